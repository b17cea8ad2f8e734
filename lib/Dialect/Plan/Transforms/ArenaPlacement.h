//===- ArenaPlacement.h - offsets for buffers from their lifetimes -*- C++ -*-===//
//
// llcdist-plan-memory's placement (docs/memory.md): buffers live in
// segments of the step's kernel sequence, and two share bytes only when
// none of their segments overlap. Best fit in order of first use, and
// greedy orders and a skyline where that misses the live peak.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_LIB_DIALECT_PLAN_TRANSFORMS_ARENAPLACEMENT_H
#define LLCDIST_LIB_DIALECT_PLAN_TRANSFORMS_ARENAPLACEMENT_H

#include "llcdist/runtime/PlanSchema.h"

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

namespace llcdist::plan::memory {

/// Bytes rounded up to the arena alignment.
inline int64_t aligned(int64_t bytes) {
  constexpr int64_t a = rt::schema::kArenaAlignment;
  return (bytes + a - 1) / a * a;
}

/// Kernels [first, last] of the step during which a buffer is live.
struct Segment {
  int64_t first, last;
};

/// Arena offsets for buffers live in `lifetimes` (sorted segments; buffers
/// in order of first use), `sizes` bytes each, so that two buffers share
/// bytes only when none of their segments overlap: the best-fit sweep, and
/// where it misses `livePeak` (the most bytes live at once) and the buffers
/// conflict in at most kPairBudget pairs (the cost of listing them) also
/// greedy by size, greedy by bytes x kernels live, and bottom-left on a
/// skyline (the buffer that can go lowest next) in three orders; the
/// smallest arena wins (ties: in that order), and the first to reach the
/// live peak ends the search. None dominates: the sweep packs the nested
/// lives of a deep model exactly, size order does better where short and
/// long lives interleave (ZB-H1's deferred weight gradients), the
/// long-lived first where large short lives fall between them, and the
/// skyline where microbatches in flight meet one microbatch's logits or
/// whole gradient (docs/memory.md).
std::vector<int64_t> placeTransient(llvm::ArrayRef<llvm::ArrayRef<Segment>> lifetimes,
                                    llvm::ArrayRef<int64_t> sizes, int64_t livePeak);

/// The most bytes live at once over `lifetimes` (`sizes` bytes each) on a
/// step of `kernels` kernels, and the first kernel where it is reached.
std::pair<int64_t, int64_t> liveBytesPeak(int64_t kernels, llvm::ArrayRef<llvm::ArrayRef<Segment>> lifetimes,
                                          llvm::ArrayRef<int64_t> sizes);

/// Sorts `items` (each with `segs`, on a step of `kernels` kernels) by their
/// first kernel, stably: a counting sort, O(items + kernels).
template <typename T> void sortByFirstUse(std::vector<T> &items, int64_t kernels) {
  std::vector<uint32_t> next(kernels + 1, 0); // where the next of each first kernel goes
  for (const T &x : items)
    ++next[x.segs.front().first + 1];
  std::partial_sum(next.begin(), next.end(), next.begin());
  std::vector<T> sorted(items.size());
  for (T &x : items)
    sorted[next[x.segs.front().first]++] = std::move(x);
  items = std::move(sorted);
}

} // namespace llcdist::plan::memory

#endif
