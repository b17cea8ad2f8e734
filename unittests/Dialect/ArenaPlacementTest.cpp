//===- ArenaPlacementTest.cpp - llcdist-plan-memory's placement ----------===//
//
// placeTransient (lib/Dialect/Plan/Transforms/ArenaPlacement.h) against an
// independent check: two buffers whose segments overlap never share a byte,
// and no placement is below the most bytes live at once. Random lifetimes of
// one to four segments (a buffer that comes back, as an activation does in
// every microbatch of a step that accumulates gradients), and the nested
// lives of a deep model over several microbatches, which the sweep packs
// exactly, and microbatches in flight between one microbatch's large short
// life and the next, which only the skyline packs exactly.
//
//===----------------------------------------------------------------------===//

#include "ArenaPlacement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

using namespace llcdist::plan::memory;

namespace {

bool overlap(llvm::ArrayRef<Segment> a, llvm::ArrayRef<Segment> b) {
  for (const Segment &x : a)
    for (const Segment &y : b)
      if (x.first <= y.last && y.first <= x.last)
        return true;
  return false;
}

/// Every pair of buffers live at once lies in disjoint bytes; returns the
/// arena's size.
int64_t checkPlacement(const std::vector<std::vector<Segment>> &lives, const std::vector<int64_t> &sizes,
                       const std::vector<int64_t> &offsets) {
  EXPECT_EQ(offsets.size(), lives.size());
  int64_t top = 0;
  for (size_t i = 0; i < lives.size(); ++i) {
    EXPECT_GE(offsets[i], 0) << "buffer " << i;
    top = std::max(top, offsets[i] + sizes[i]);
    for (size_t j = 0; j < i; ++j)
      if (sizes[i] > 0 && sizes[j] > 0 && overlap(lives[i], lives[j]))
        EXPECT_TRUE(offsets[i] + sizes[i] <= offsets[j] || offsets[j] + sizes[j] <= offsets[i])
            << "buffers " << j << " and " << i << " live at once share bytes";
  }
  return top;
}

struct Placed {
  int64_t arena, livePeak;
};

Placed place(const std::vector<std::vector<Segment>> &lives, const std::vector<int64_t> &sizes, int64_t kernels) {
  std::vector<llvm::ArrayRef<Segment>> refs(lives.begin(), lives.end());
  const int64_t livePeak = liveBytesPeak(kernels, refs, sizes).first;
  const std::vector<int64_t> offsets = placeTransient(refs, sizes, livePeak);
  const int64_t arena = checkPlacement(lives, sizes, offsets);
  EXPECT_GE(arena, livePeak);
  return {arena, livePeak};
}

TEST(ArenaPlacement, RandomLifetimesNeverShareBytesWhileLive) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const int64_t kernels = 400;
    const size_t n = 150;
    std::vector<std::vector<Segment>> lives;
    std::vector<int64_t> sizes;
    for (size_t i = 0; i < n; ++i) {
      const int segs = 1 + int(rng() % 4);
      std::vector<int64_t> cuts;
      for (int k = 0; k < 2 * segs; ++k)
        cuts.push_back(int64_t(rng() % kernels));
      std::sort(cuts.begin(), cuts.end());
      std::vector<Segment> l;
      for (int k = 0; k < segs; ++k)
        if (l.empty() || cuts[2 * k] > l.back().last) // disjoint, in order
          l.push_back({cuts[2 * k], cuts[2 * k + 1]});
      lives.push_back(l);
      sizes.push_back(64 * int64_t(1 + rng() % 16) * (rng() % 10 == 0 ? 0 : 1)); // some empty
    }
    // Placement takes buffers in order of first use.
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i)
      order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return lives[a].front().first < lives[b].front().first; });
    std::vector<std::vector<Segment>> sortedLives;
    std::vector<int64_t> sortedSizes;
    for (size_t i : order) {
      sortedLives.push_back(lives[i]);
      sortedSizes.push_back(sizes[i]);
    }
    place(sortedLives, sortedSizes, kernels);
  }
}

// A deep model's saved activations over m microbatches of one step: layer
// l's lives from its forward to its backward in each microbatch, nested
// inside layer l-1's. The live peak is every layer's activation at once;
// the sweep reaches it (the layers stack as they nest), whatever m.
TEST(ArenaPlacement, NestedLivesOverMicrobatchesPackExactly) {
  for (int64_t m : {1, 2, 8}) {
    SCOPED_TRACE(std::to_string(m) + " microbatches");
    const int64_t layers = 300, period = 2 * layers + 2;
    std::vector<std::vector<Segment>> lives(static_cast<size_t>(layers));
    std::vector<int64_t> sizes(static_cast<size_t>(layers), 4096);
    for (int64_t l = 0; l < layers; ++l)
      for (int64_t mb = 0; mb < m; ++mb)
        lives[size_t(l)].push_back({mb * period + l, mb * period + 2 * layers - l});
    const Placed p = place(lives, sizes, m * period);
    EXPECT_EQ(p.livePeak, layers * 4096);
    EXPECT_EQ(p.arena, p.livePeak);
  }
}

// Two microbatches in flight, each with two activations (a, b) that live
// from its forward to its backward, and a large buffer of one kernel (its
// logits, say) while the other's activations are live: microbatch 0's at
// kernel 1, microbatch 1's at kernel 5 (the gpt2 interleaved last stage's
// classifier chunk, reduced to these six buffers). The live peak is
// 2a + big at kernels 1 and 5. Placed in any fixed order by size, by
// bytes x kernels or by first use, both large buffers or microbatch 0's
// activations go low first, and microbatch 1's activations, which meet
// both, end up above everything: 2a over the peak (1.11x here). Packing
// it exactly needs microbatch 1's activations where microbatch 0's large
// buffer was: the skyline places next whatever can go lowest, and finds it.
TEST(ArenaPlacement, LargeShortLivesBetweenMicrobatchesInFlightPackExactly) {
  const int64_t a = 4096, big = 65536;
  const std::vector<std::vector<Segment>> lives = {
      {{0, 4}}, {{0, 3}}, // microbatch 0's activations
      {{1, 1}},           // its large buffer
      {{2, 7}}, {{2, 6}}, // microbatch 1's activations
      {{5, 5}},           // its large buffer
  };
  const std::vector<int64_t> sizes = {a, a, big, a, a, big};
  const Placed p = place(lives, sizes, 8);
  EXPECT_EQ(p.livePeak, 2 * a + big);
  EXPECT_EQ(p.arena, p.livePeak);
}

} // namespace
