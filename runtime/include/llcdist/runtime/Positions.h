// The global sequence positions of a rank's rows (context and sequence parallelism; docs/plan-format.md
// "Context parallelism"): one helper that the data loader, the position embeddings, RoPE and ring
// attention all call, so they agree on which positions a rank holds.
//
// Header-only, standard library and PlanSchema.h only.
#pragma once

#include "llcdist/runtime/PlanSchema.h"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace llcdist::rt {

using schema::CpLayout;

// Rows in one or two runs of increasing positions: row s is at position first + s below `split` and at
// second + (s − split) from it. The default is positions 0, 1, 2, ...; from(begin) is one run from begin.
struct PositionRuns {
  static constexpr int64_t kNoSplit = std::numeric_limits<int64_t>::max();
  int64_t first = 0, split = 0, second = 0;

  int64_t at(int64_t s) const { return s < split ? first + s : second + (s - split); }
  static constexpr PositionRuns from(int64_t begin) { return {begin, kNoSplit, 0}; }
  // The rows of the first run among rows [0, rows).
  int64_t firstRows(int64_t rows) const { return std::clamp<int64_t>(split, 0, rows); }
  // The smallest and the largest position of rows [0, rows), rows >= 1 (each run is increasing).
  int64_t minAt(int64_t rows) const {
    const int64_t n1 = firstRows(rows);
    return n1 == 0 ? second : n1 == rows ? first : std::min(first, second);
  }
  int64_t maxAt(int64_t rows) const {
    const int64_t n1 = firstRows(rows);
    return n1 == 0 || n1 == rows ? at(rows - 1) : std::max(at(n1 - 1), at(rows - 1));
  }
};

// The positions of the L = T/n rows of coordinate c of a cp axis of size n over a sequence of T
// (manifest.mesh.cp_layout). Contiguous: [c·L, (c+1)·L). Load-balanced (T divisible by 2n), h = T/(2n):
// rows [0, h) at [c·h, (c+1)·h), rows [h, 2h) at [(2n−1−c)·h, (2n−c)·h).
inline PositionRuns contextParallelPositions(int64_t T, int64_t n, int64_t c, CpLayout layout) {
  if (n < 1) n = 1;
  if (layout == CpLayout::kLoadBalanced) {
    const int64_t h = T / (2 * n);
    return {c * h, h, (2 * n - 1 - c) * h};
  }
  const int64_t L = T / n;
  return {c * L, L, 0};
}

}  // namespace llcdist::rt
