//===- ArenaPlacement.cpp - offsets for buffers from their lifetimes -----===//
#include "ArenaPlacement.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <tuple>

using namespace llvm;
using namespace llcdist::plan::memory;

namespace {

using Range = std::pair<int64_t, int64_t>; // bytes [first, second)

/// The free bytes at the sweep's current kernel. The buffers live there
/// (disjoint ranges) form a list in address order, linked through their
/// indices: a pipelined program has thousands live at once but few holes
/// between them, so placing or freeing a buffer touches its two neighbours
/// and the holes, never a search over everything live. Each bounded hole
/// is kept by (size, begin), so the smallest that fits is one lookup, and
/// by begin with the buffer just above it, so the hole holding an address
/// is one lookup. Above the highest live buffer everything is free.
class FreeSpace {
public:
  explicit FreeSpace(size_t n) : begin(n), end(n), below(n, kNone), above(n, kNone) {}

  /// Marks [b, e) (free now) as buffer `id`'s.
  void insert(uint32_t id, int64_t b, int64_t e) {
    begin[id] = b, end[id] = e;
    // The hole holding `b`, else the free space above everything.
    uint32_t next = kNone;
    int64_t lo = top();
    if (auto it = holes.upper_bound(b); it != holes.begin() && b < begin[std::prev(it)->second]) {
      lo = std::prev(it)->first;
      next = std::prev(it)->second;
    }
    uint32_t prev = next == kNone ? last : below[next];
    if (next != kNone) {
      eraseHole(lo, begin[next]);
      addHole(e, begin[next], next);
      below[next] = id;
    } else {
      last = id;
    }
    if (prev != kNone)
      above[prev] = id;
    below[id] = prev, above[id] = next;
    addHole(lo, b, id);
  }
  /// Frees buffer `id`'s bytes.
  void erase(uint32_t id) {
    uint32_t prev = below[id], next = above[id];
    int64_t lo = prev == kNone ? 0 : end[prev];
    eraseHole(lo, begin[id]);
    if (next != kNone) {
      eraseHole(end[id], begin[next]);
      addHole(lo, begin[next], next);
      below[next] = prev;
    } else {
      last = prev;
    }
    if (prev != kNone)
      above[prev] = next;
  }

  /// Best fit: the start of the smallest free range of at least `size`
  /// bytes (the lowest of equal ones) that also avoids `extra` (disjoint,
  /// sorted), else the lowest offset above everything live that does.
  int64_t bestFit(int64_t size, ArrayRef<Range> extra) const {
    auto it = gaps.lower_bound({size, std::numeric_limits<int64_t>::min()});
    if (extra.empty())
      return it != gaps.end() ? it->second : top();
    int64_t bestSize = std::numeric_limits<int64_t>::max(), bestAt = -1;
    // The pieces of [lo, hi) that no extra range covers; returns where the
    // last (open-ended when hi is unbounded) piece begins.
    auto pieces = [&](int64_t lo, int64_t hi) {
      auto e = std::upper_bound(extra.begin(), extra.end(), lo,
                                [](int64_t v, const Range &r) { return v < r.second; });
      for (; e != extra.end() && e->first < hi; ++e) {
        int64_t piece = e->first - lo;
        if (piece >= size && (piece < bestSize || (piece == bestSize && lo < bestAt)))
          bestSize = piece, bestAt = lo;
        lo = std::max(lo, e->second);
      }
      return lo;
    };
    for (; it != gaps.end(); ++it) {
      auto [gap, lo] = *it;
      int64_t last = pieces(lo, lo + gap);
      int64_t piece = lo + gap - last;
      bool untouched = last == lo;
      if (piece >= size && (piece < bestSize || (piece == bestSize && last < bestAt)))
        bestSize = piece, bestAt = last;
      if (untouched)
        break; // larger holes can only waste more (their pieces aside)
    }
    int64_t above = pieces(top(), std::numeric_limits<int64_t>::max());
    return bestAt >= 0 ? bestAt : above;
  }

private:
  static constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  int64_t top() const { return last == kNone ? 0 : end[last]; }
  void addHole(int64_t lo, int64_t hi, uint32_t next) {
    if (hi > lo) {
      gaps.insert({hi - lo, lo});
      holes.emplace(lo, next);
    }
  }
  void eraseHole(int64_t lo, int64_t hi) {
    if (hi > lo) {
      gaps.erase({hi - lo, lo});
      holes.erase(lo);
    }
  }
  // Per buffer while live: its bytes, and its neighbours in address order.
  std::vector<int64_t> begin, end;
  std::vector<uint32_t> below, above;
  uint32_t last = kNone;                // the highest live buffer
  std::set<Range> gaps;                 // holes as (size, begin)
  std::map<int64_t, uint32_t> holes;    // hole begin -> the buffer above it
};

/// The later segments of the placed buffers that are out of the free space
/// now (between two of their segments), by first kernel in a tree over the
/// kernels that keeps the latest last kernel of each subtree: the segments
/// overlapping kernels [f, l] (first <= l, last >= f) are found in
/// O((k + 1) log T) for k found, never by walking every segment that comes
/// back before l (which made a step with gradient accumulation quadratic in
/// the layers: every saved activation of microbatch 0 comes back in
/// microbatch 1).
class ComingBack {
public:
  explicit ComingBack(int64_t kernels) {
    while (leaves < kernels)
      leaves *= 2;
    maxLast.assign(size_t(2 * leaves), -1);
    at.resize(size_t(kernels)); // leaves past the last kernel stay empty (maxLast -1: never visited)
  }
  void insert(const Segment &s, uint32_t id) {
    at[size_t(s.first)].push_back({s.last, id});
    update(s.first);
  }
  void erase(const Segment &s, uint32_t id) {
    auto &leaf = at[size_t(s.first)];
    leaf.erase(llvm::find(leaf, std::make_pair(s.last, id)));
    update(s.first);
  }
  /// Calls `found(id)` for every segment overlapping kernels [f, l].
  template <typename F> void overlapping(int64_t f, int64_t l, F found) const {
    visit(1, 0, leaves - 1, f, l, found);
  }

private:
  void update(int64_t first) {
    int64_t m = -1;
    for (const auto &[last, id] : at[size_t(first)])
      m = std::max(m, last);
    size_t node = size_t(leaves + first);
    maxLast[node] = m;
    for (node /= 2; node >= 1; node /= 2)
      maxLast[node] = std::max(maxLast[2 * node], maxLast[2 * node + 1]);
  }
  template <typename F>
  void visit(size_t node, int64_t lo, int64_t hi, int64_t f, int64_t l, F &found) const {
    if (lo > l || maxLast[node] < f)
      return;
    if (lo == hi) {
      for (const auto &[last, id] : at[size_t(lo)])
        if (last >= f)
          found(id);
      return;
    }
    const int64_t mid = (lo + hi) / 2;
    visit(2 * node, lo, mid, f, l, found);
    visit(2 * node + 1, mid + 1, hi, f, l, found);
  }
  int64_t leaves = 1;
  std::vector<int64_t> maxLast;                                    // per tree node
  std::vector<SmallVector<std::pair<int64_t, uint32_t>, 1>> at;    // per first kernel: (last, buffer)
};

/// One sweep over the kernels, buffer after buffer: a buffer goes into the
/// smallest hole that fits between the buffers live at its first kernel
/// (best fit, as allocators and XLA's heap simulator do), avoiding as well
/// the buffers placed earlier that come back to life (a later segment)
/// while it lives. Each step is O(log n) plus, for those returning
/// segments, O(log T) each (ComingBack), so a plan whose buffers each live
/// once costs O(n log n).
std::vector<int64_t> placeBySweep(ArrayRef<ArrayRef<Segment>> lifetimes,
                                  ArrayRef<int64_t> sizes) {
  size_t n = lifetimes.size();
  std::vector<int64_t> offsets(n, 0);
  std::vector<size_t> seenAt(n, 0); // the buffer (+1) whose placement last found it coming back
  FreeSpace space(n);
  // The live buffers by the kernel their bytes are free from: a list per
  // kernel, linked through the buffers (a buffer has one segment live at a
  // time). Buffers come in order of first use, so the sweep frees kernel
  // after kernel (`freed`); within a kernel the order of frees does not
  // matter (the free space is that of the buffers left).
  constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  int64_t horizon = 0;
  for (ArrayRef<Segment> l : lifetimes)
    horizon = std::max(horizon, l.back().last + 1);
  std::vector<uint32_t> endsAt(horizon + 1, kNone), nextEnd(n, kNone);
  auto endAt = [&](int64_t free, size_t id) {
    nextEnd[id] = std::exchange(endsAt[free], uint32_t(id));
  };
  int64_t freed = 0; // kernels before this one have had their frees
  // The next segment of each placed buffer that has one, not yet begun:
  // (first kernel, buffer, segment).
  std::set<std::tuple<int64_t, size_t, size_t>> returning;
  std::vector<Range> extra;
  std::vector<char> active(n, 0); // whether a buffer's bytes are in `space` now
  // Per placed buffer, its segment live now or next; the later segments of
  // those not live now, indexed.
  std::vector<uint32_t> current(n, 0);
  ComingBack comingBack(horizon);
  auto laterSegments = [&](size_t id) { return lifetimes[id].drop_front(current[id]); };
  for (size_t i = 0; i < n; ++i) {
    ArrayRef<Segment> segs = lifetimes[i];
    int64_t now = segs.front().first;
    // Advance to `now`: free what ended, re-occupy what came back (in time
    // order, a kernel's frees before its returns).
    while (true) {
      int64_t back = returning.empty() ? std::numeric_limits<int64_t>::max()
                                       : std::get<0>(*returning.begin());
      for (; freed <= std::min(now, back); ++freed)
        for (uint32_t id = std::exchange(endsAt[freed], kNone); id != kNone; id = nextEnd[id]) {
          space.erase(id);
          active[id] = 0;
          ++current[id];
          for (const Segment &s : laterSegments(id))
            comingBack.insert(s, id);
        }
      if (back > now)
        break;
      auto [first, id, k] = *returning.begin();
      returning.erase(returning.begin());
      for (const Segment &s : laterSegments(id))
        comingBack.erase(s, uint32_t(id));
      space.insert(id, offsets[id], offsets[id] + sizes[id]);
      active[id] = 1;
      endAt(lifetimes[id][k].last + 1, id);
      if (k + 1 < lifetimes[id].size())
        returning.insert({lifetimes[id][k + 1].first, id, k + 1});
    }
    if (sizes[i] == 0)
      continue; // no bytes to place (and none to free later)
    // Placed buffers not live now that come back while this one lives.
    extra.clear();
    for (const Segment &c : segs)
      comingBack.overlapping(c.first, c.last, [&](uint32_t id) {
        if (seenAt[id] != i + 1) { // once per buffer
          seenAt[id] = i + 1;
          extra.push_back({offsets[id], offsets[id] + sizes[id]});
        }
      });
    llvm::sort(extra);
    size_t merged = 0; // disjoint and sorted, for FreeSpace::bestFit
    for (const Range &r : extra)
      if (merged && r.first <= extra[merged - 1].second)
        extra[merged - 1].second = std::max(extra[merged - 1].second, r.second);
      else
        extra[merged++] = r;
    extra.resize(merged);
    int64_t at = space.bestFit(sizes[i], extra);
    offsets[i] = at;
    space.insert(i, at, at + sizes[i]);
    active[i] = 1;
    endAt(segs.front().last + 1, i);
    if (segs.size() > 1)
      returning.insert({segs[1].first, i, 1});
  }
  return offsets;
}

/// Buffers up to which conflicts() drops repeated pairs with a bit per pair
/// (2 MiB) instead of sorting every buffer's list.
constexpr size_t kPairMatrixLimit = 4096;

/// Every pair of buffers with overlapping segments (each buffer's list
/// without repeats, in no particular order), or nothing when there are more than `budget` pairs: a sweep
/// over the segments in order of first kernel, each paired with the
/// segments still live, so the cost is the pairs found.
std::optional<std::vector<std::vector<uint32_t>>>
conflicts(ArrayRef<ArrayRef<Segment>> lifetimes, size_t budget) {
  std::vector<std::tuple<int64_t, int64_t, uint32_t>> segs; // (first, last, buffer)
  for (auto [i, l] : llvm::enumerate(lifetimes))
    for (const Segment &s : l)
      segs.push_back({s.first, s.last, uint32_t(i)});
  llvm::sort(segs);
  const size_t n = lifetimes.size();
  std::vector<std::vector<uint32_t>> adj(n);
  // Pairs seen, where a bit per pair is small (a pipeline's slot blocks:
  // every block overlaps most others, in several segments).
  std::vector<bool> seen(n <= kPairMatrixLimit ? n * n : 0);
  std::vector<size_t> live; // indices into segs
  size_t pairs = 0;
  for (size_t k = 0; k < segs.size(); ++k) {
    auto [first, last, buf] = segs[k];
    for (size_t a = 0; a < live.size();) {
      auto [f2, l2, b2] = segs[live[a]];
      if (l2 < first) {
        live[a] = live.back();
        live.pop_back();
        continue;
      }
      if (++pairs > budget)
        return std::nullopt;
      ++a;
      if (!seen.empty()) {
        if (buf == b2 || seen[size_t(buf) * n + b2])
          continue;
        seen[size_t(buf) * n + b2] = seen[size_t(b2) * n + buf] = true;
      }
      adj[buf].push_back(b2);
      adj[b2].push_back(buf);
    }
    live.push_back(k);
  }
  if (seen.empty()) { // drop repeats in one pass per list (placeBySize reads a list in any order)
    std::vector<uint32_t> stamp(n, std::numeric_limits<uint32_t>::max());
    for (auto [i, l] : llvm::enumerate(adj)) {
      llvm::erase_if(l, [&, i = uint32_t(i)](uint32_t j) { return std::exchange(stamp[j], i) == i; });
    }
  }
  return adj;
}

/// Greedy in `order` (TFLite's and XLA's heap planners): each buffer at the
/// lowest offset clear of the placed buffers it conflicts with.
std::vector<int64_t> placeGreedy(ArrayRef<int64_t> sizes, const std::vector<std::vector<uint32_t>> &adj,
                                 ArrayRef<uint32_t> order) {
  size_t n = sizes.size();
  std::vector<int64_t> offsets(n, 0);
  std::vector<char> placed(n, 0);
  std::vector<Range> busy;
  for (uint32_t i : order) {
    busy.clear();
    for (uint32_t j : adj[i])
      if (placed[j] && sizes[j] > 0)
        busy.push_back({offsets[j], offsets[j] + sizes[j]});
    llvm::sort(busy);
    int64_t at = 0;
    for (const Range &r : busy) {
      if (r.first - at >= sizes[i])
        break;
      at = std::max(at, r.second);
    }
    offsets[i] = at;
    placed[i] = 1;
  }
  return offsets;
}

/// Bottom-left on a skyline: the unplaced buffer that can go lowest — on
/// top of the highest placed buffer it conflicts with — goes there next
/// (ties: the earlier in `order`). Offsets only rise, so no buffer waits
/// for a hole below the others; the order is chosen as the packing grows,
/// not fixed beforehand. Where long lives and large short ones interleave
/// (a pipeline's microbatches in flight, and one microbatch's logits or
/// whole gradient), a fixed order lifts a long life above the hole a
/// short one will need, or the short one above them all; here each next
/// buffer is the one that can go lowest. Each unplaced buffer waits in the
/// queue once, under a floor that may have risen since (placing a buffer
/// raises its neighbours' floors in O(1) each); one found out of date is
/// queued again under its floor now. O(pairs + (n + requeued) log n).
std::vector<int64_t> placeSkyline(ArrayRef<int64_t> sizes, const std::vector<std::vector<uint32_t>> &adj,
                                  ArrayRef<uint32_t> order) {
  const size_t n = sizes.size();
  std::vector<uint32_t> rank(n);
  for (auto [k, i] : llvm::enumerate(order))
    rank[i] = uint32_t(k);
  std::vector<int64_t> floor(n, 0), offsets(n, 0);
  std::vector<char> placed(n, 0);
  using Entry = std::pair<int64_t, uint32_t>; // (floor when queued, rank)
  std::vector<Entry> queued;
  for (uint32_t k = 0; k < n; ++k)
    queued.push_back({0, k});
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> next(std::greater<Entry>(), std::move(queued));
  while (!next.empty()) {
    auto [at, r] = next.top();
    next.pop();
    const uint32_t i = order[r];
    if (floor[i] > at) { // out of date: every other buffer's floor is at least `at`
      next.push({floor[i], r});
      continue;
    }
    placed[i] = 1;
    offsets[i] = at;
    const int64_t top = at + sizes[i];
    for (uint32_t j : adj[i])
      if (!placed[j])
        floor[j] = std::max(floor[j], top);
  }
  return offsets;
}
} // namespace

constexpr size_t kPairBudget = size_t(1) << 22;
/// Past this many overlapping pairs, how far above the live peak the
/// greedy orders may leave a placement before the skyline is tried too.
constexpr size_t kSkylinePairs = size_t(1) << 18;
constexpr double kSkylineSlack = 0.01;
std::vector<int64_t> llcdist::plan::memory::placeTransient(ArrayRef<ArrayRef<Segment>> lifetimes,
                                    ArrayRef<int64_t> sizes, int64_t livePeak) {
  auto peakOf = [&](const std::vector<int64_t> &offsets) {
    int64_t peak = 0;
    for (size_t i = 0; i < offsets.size(); ++i)
      peak = std::max(peak, offsets[i] + sizes[i]);
    return peak;
  };
  std::vector<int64_t> sweep = placeBySweep(lifetimes, sizes);
  // No placement beats `livePeak`, the most bytes live at once: where the
  // sweep reaches it (deep models with nested lives), listing the conflicts
  // for greedy by size would cost O(pairs) for nothing.
  if (peakOf(sweep) <= livePeak)
    return sweep;
  // Overlapping segment pairs (at least the buffer pairs), counted without
  // listing them: per segment, those begun before it and not yet ended.
  std::vector<int64_t> firsts, lasts;
  for (ArrayRef<Segment> l : lifetimes)
    for (const Segment &s : l) {
      firsts.push_back(s.first);
      lasts.push_back(s.last);
    }
  llvm::sort(firsts);
  llvm::sort(lasts);
  size_t budget = std::max<size_t>(kPairBudget, 16 * lifetimes.size()), pairs = 0;
  for (size_t k = 0; k < firsts.size() && pairs <= budget; ++k)
    pairs += k - size_t(std::lower_bound(lasts.begin(), lasts.end(), firsts[k]) - lasts.begin());
  if (pairs > budget)
    return sweep;
  auto adj = conflicts(lifetimes, budget);
  if (!adj)
    return sweep;
  // Greedy largest first (ties: first use), then by bytes x kernels live,
  // so long-lived buffers (a pipeline slot's activations) pack first and
  // the short, large ones (a microbatch's whole gradient) take the holes
  // their slot leaves (ties: size order); then (past kSkylinePairs only
  // where those miss the live peak by more than kSkylineSlack) the skyline
  // with three tie orders: that same bytes x kernels order, first use, and
  // longest span first (ties: larger first). The first to reach the live
  // peak ends the search.
  std::vector<uint32_t> order(lifetimes.size());
  std::iota(order.begin(), order.end(), 0);
  llvm::stable_sort(order, [&](uint32_t x, uint32_t y) { return sizes[x] > sizes[y]; });
  std::vector<int64_t> best = std::move(sweep);
  int64_t bestPeak = peakOf(best);
  auto reached = [&](std::vector<int64_t> offsets) {
    if (int64_t p = peakOf(offsets); p < bestPeak) {
      best = std::move(offsets);
      bestPeak = p;
    }
    return bestPeak <= livePeak;
  };
  if (reached(placeGreedy(sizes, *adj, order)))
    return best;
  std::vector<int64_t> area(lifetimes.size(), 0);
  for (auto [i, l] : llvm::enumerate(lifetimes))
    for (const Segment &s : l)
      area[i] += sizes[i] * (s.last - s.first + 1);
  llvm::stable_sort(order, [&](uint32_t x, uint32_t y) { return area[x] > area[y]; });
  if (reached(placeGreedy(sizes, *adj, order)))
    return best;
  // The skyline costs a few times a greedy pass where most buffers
  // conflict (a dense step's O(n^2) pairs, with each floor raised by most
  // placements); the misses it mends are of several percent
  // (docs/memory.md), so past kSkylinePairs it runs only beyond
  // kSkylineSlack.
  if ((pairs > kSkylinePairs && double(bestPeak) <= (1 + kSkylineSlack) * double(livePeak)) ||
      reached(placeSkyline(sizes, *adj, order)))
    return best;
  std::iota(order.begin(), order.end(), 0);
  if (reached(placeSkyline(sizes, *adj, order)))
    return best;
  auto span = [&](uint32_t i) { return lifetimes[i].back().last - lifetimes[i].front().first; };
  llvm::stable_sort(order, [&](uint32_t x, uint32_t y) {
    return std::make_pair(span(x), sizes[x]) > std::make_pair(span(y), sizes[y]);
  });
  reached(placeSkyline(sizes, *adj, order));
  return best;
}

/// The most bytes live at once over `lifetimes` (`sizes` bytes each) on a
/// step of `kernels` kernels, and the first kernel where it is reached.
std::pair<int64_t, int64_t> llcdist::plan::memory::liveBytesPeak(int64_t kernels, ArrayRef<ArrayRef<Segment>> lifetimes,
                                          ArrayRef<int64_t> sizes) {
  std::vector<int64_t> delta(kernels + 1, 0);
  for (size_t i = 0; i < lifetimes.size(); ++i)
    for (const Segment &s : lifetimes[i]) {
      delta[s.first] += sizes[i];
      delta[s.last + 1] -= sizes[i];
    }
  int64_t peak = 0, running = 0, at = 0;
  for (auto [k, v] : llvm::enumerate(delta))
    if ((running += v) > peak) {
      peak = running;
      at = int64_t(k);
    }
  return {peak, at};
}
