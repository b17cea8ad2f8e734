// Helpers of the ring-attention tests: the rows of a whole sequence that a cp rank holds (its
// positions, PositionRuns), gathered and scattered back.
#pragma once

#include "llcdist/runtime/Positions.h"

#include <cstdint>
#include <vector>

namespace llcdist::rt::testing {

// The S rows at positions `pos` of every batch of a [B, T, width] tensor.
inline std::vector<float> rowsAt(const std::vector<float>& t, int64_t B, int64_t T, int64_t width,
                                 const PositionRuns& pos, int64_t S) {
  std::vector<float> out;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      out.insert(out.end(), t.begin() + (b * T + pos.at(s)) * width, t.begin() + (b * T + pos.at(s) + 1) * width);
  return out;
}
// The S columns at `pos` of every (batch, head) row of a [B, heads, T] tensor (lse).
inline std::vector<float> colsAt(const std::vector<float>& t, int64_t BH, int64_t T, const PositionRuns& pos,
                                 int64_t S) {
  std::vector<float> out;
  for (int64_t r = 0; r < BH; ++r)
    for (int64_t s = 0; s < S; ++s) out.push_back(t[size_t(r * T + pos.at(s))]);
  return out;
}
// Adds `part` ([B, S, width]) into the rows at `pos` of `t` ([B, T, width]).
inline void addRowsAt(std::vector<double>& t, const std::vector<float>& part, int64_t B, int64_t T, int64_t width,
                      const PositionRuns& pos, int64_t S) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t i = 0; i < width; ++i)
        t[size_t((b * T + pos.at(s)) * width + i)] += part[size_t((b * S + s) * width + i)];
}

}  // namespace llcdist::rt::testing
