//===- PlanMemory.cpp - arena offsets from buffer liveness ----------------===//
//
// Every buffer gets a 64-byte-aligned arena offset. State that lives across
// steps (parameters, gradients, optimizer state, inputs, metrics) is placed
// first, for the whole step. Activations and scratch buffers are live in
// segments of the step's kernel sequence (the schedule with each
// subroutine's kernels inlined, action after action): a segment starts where
// a kernel overwrites the buffer (a written role, not accumulating, that the
// kernel does not also read) and ends at the buffer's last access before the
// next overwrite. A buffer reused by every microbatch is therefore live only
// while each microbatch needs it. Two buffers share bytes only when none of
// their segments overlap. Offsets come from a best-fit sweep in order of
// first use (O(n log n)) or, where that misses the most bytes live at once
// and the conflicts are few enough to list, greedy by size, whichever arena
// is smaller (placeTransient); the arena
// size is the plan's peak for this order of kernels, and the most bytes
// live at once (the lower bound a perfect packing would reach) is recorded
// beside it. In an asynchronous plan a buffer of a started communication
// op is live from the start through its token's wait.
//
// A slotted buffer (a pipeline chunk's, plan::kSlotsAttr) has one instance
// per microbatch slot; an action with slot k uses instance k, whose segments
// are those of the actions in its slot. The instances are placed by pattern
// (layoutSlots): a chunk's workspace shares one instance across slots, and
// what a microbatch keeps across actions goes in a slot block per chunk,
// laid out once, so every instance is a block base plus one offset; where
// blocks cost more than kBlockSlack over the live peak, each instance is
// placed as a buffer of its own as well and the smaller arena wins. The
// offsets are recorded in plan::kSlotOffsetsAttr.
//
// Cost: a pipelined program runs each chunk's subroutines once per
// microbatch, so the liveness is computed in two phases: each subroutine's
// kernels are decoded once into integer records (SubroutineSummary: buffer
// index, overwrites, token), and each action replays its subroutine's
// records with its slot (Liveness). Buffers and instances are numbered
// densely (Buffers), so nothing per action looks up a name.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Dialect/Plan/Transforms/Passes.h"

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/runtime/PlanSchema.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringMap.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#define DEBUG_TYPE "llcdist-plan-memory"

namespace llcdist::plan {
#define GEN_PASS_DEF_PLANMEMORY
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist::plan;
namespace schema = llcdist::rt::schema;

namespace {
constexpr int64_t kAlignment = schema::kArenaAlignment;

int64_t aligned(int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

bool persistent(BufferOp buf) {
  StringRef k = buf.getKind();
  return k == "param" || k == "grad" || k == "optimizer_state" || k == "input" ||
         k == "metric";
}

struct Segment {
  int64_t first, last;
};

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

/// One sweep over the kernels, buffer after buffer: a buffer goes into the
/// smallest hole that fits between the buffers live at its first kernel
/// (best fit, as allocators and XLA's heap simulator do), avoiding as well
/// the buffers placed earlier that come back to life (a later segment)
/// while it lives. Each step is O(log n) plus those returning segments, so
/// a plan whose buffers each live once costs O(n log n).
std::vector<int64_t> placeBySweep(ArrayRef<ArrayRef<Segment>> lifetimes,
                                  ArrayRef<int64_t> sizes) {
  size_t n = lifetimes.size();
  std::vector<int64_t> offsets(n, 0);
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
        }
      if (back > now)
        break;
      auto [first, id, k] = *returning.begin();
      returning.erase(returning.begin());
      space.insert(id, offsets[id], offsets[id] + sizes[id]);
      active[id] = 1;
      endAt(lifetimes[id][k].last + 1, id);
      if (k + 1 < lifetimes[id].size())
        returning.insert({lifetimes[id][k + 1].first, id, k + 1});
    }
    if (sizes[i] == 0)
      continue; // no bytes to place (and none to free later)
    // Placed buffers that come back while this one lives (each buffer's
    // next segment is in `returning`; its later ones are compared here).
    extra.clear();
    for (auto it = returning.begin();
         it != returning.end() && std::get<0>(*it) <= segs.back().last; ++it) {
      auto [first, id, k] = *it;
      if (active[id])
        continue; // its bytes are in `space` already
      ArrayRef<Segment> x = lifetimes[id].drop_front(k);
      size_t a = 0, c = 0;
      while (a < x.size() && c < segs.size() && x[a].first <= segs.back().last) {
        if (x[a].last < segs[c].first)
          ++a;
        else if (segs[c].last < x[a].first)
          ++c;
        else {
          extra.push_back({offsets[id], offsets[id] + sizes[id]});
          break;
        }
      }
    }
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

/// Every pair of buffers with overlapping segments (each buffer's list
/// sorted, without repeats), or nothing when there are more than `budget`
/// pairs: a sweep over the segments in order of first kernel, each paired
/// with the segments still live, so the cost is the pairs found.
std::optional<std::vector<std::vector<uint32_t>>>
conflicts(ArrayRef<ArrayRef<Segment>> lifetimes, size_t budget) {
  std::vector<std::tuple<int64_t, int64_t, uint32_t>> segs; // (first, last, buffer)
  for (auto [i, l] : llvm::enumerate(lifetimes))
    for (const Segment &s : l)
      segs.push_back({s.first, s.last, uint32_t(i)});
  llvm::sort(segs);
  std::vector<std::vector<uint32_t>> adj(lifetimes.size());
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
      adj[buf].push_back(b2);
      adj[b2].push_back(buf);
      if (++pairs > budget)
        return std::nullopt;
      ++a;
    }
    live.push_back(k);
  }
  for (auto &l : adj) {
    llvm::sort(l);
    l.erase(std::unique(l.begin(), l.end()), l.end());
  }
  return adj;
}

/// Greedy by size (TFLite's and XLA's heap planners): largest buffer first
/// (ties: first use), each at the lowest offset clear of the placed buffers
/// it conflicts with.
std::vector<int64_t> placeBySize(ArrayRef<ArrayRef<Segment>> lifetimes,
                                 ArrayRef<int64_t> sizes,
                                 const std::vector<std::vector<uint32_t>> &adj) {
  size_t n = lifetimes.size();
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  llvm::stable_sort(order, [&](uint32_t x, uint32_t y) { return sizes[x] > sizes[y]; });
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

/// Arena offsets for buffers live in `lifetimes` (sorted segments; buffers
/// in order of first use), `sizes` bytes each, so that two buffers share
/// bytes only when none of their segments overlap: the best-fit sweep, and
/// where it misses `livePeak` (the most bytes live at once) and the buffers
/// conflict in at most kPairBudget pairs (the cost of listing them) also
/// greedy by size; the smaller arena wins. Neither
/// dominates: the sweep packs the nested lives of a deep model exactly,
/// size order does better where short and long lives interleave (ZB-H1's
/// deferred weight gradients).
constexpr size_t kPairBudget = size_t(1) << 22;
std::vector<int64_t> placeTransient(ArrayRef<ArrayRef<Segment>> lifetimes,
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
  std::vector<int64_t> bySize = placeBySize(lifetimes, sizes, *adj);
  return peakOf(bySize) < peakOf(sweep) ? bySize : sweep;
}

/// The most bytes live at once over `lifetimes` (`sizes` bytes each) on a
/// step of `kernels` kernels, and the first kernel where it is reached.
std::pair<int64_t, int64_t> liveBytesPeak(int64_t kernels, ArrayRef<ArrayRef<Segment>> lifetimes,
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

/// A transient buffer instance and its live segments (step 1).
struct Transient {
  mutable BufferOp buf; // (ops' accessors are not const)
  int64_t slot;
  ArrayRef<Segment> segs;
  int64_t bytes; // aligned(buf.getNumBytes()), once per buffer
};

/// An action's kernels in the step's numbering, and its pipeline chunk (-1:
/// none).
struct ActionSpan {
  int64_t first, last, chunk;
  int64_t slot = 0;
};

/// What the arena places: a buffer instance (`slot` -1: one instance every
/// slot shares), or (`block` >= 0) slot `slot` of a slot block.
struct Item {
  BufferOp buf;
  int64_t slot = 0;
  ArrayRef<Segment> segs;
  int64_t bytes = 0;
  int64_t block = -1;
};

/// A slotted buffer laid out in a slot block.
struct InBlock {
  int64_t block, offset;
  bool shared = false; // a workspace block's: the same bytes in every slot
};

/// Workspace blocks' ids, above the chunks' (Item::block).
constexpr int64_t kWorkspaceBlocks = int64_t(1) << 32;

/// Whether a layout (`at`, `sizes`) keeps buffers apart that are live at
/// once: `segs[j]` are buffer j's segments.
bool disjointWhereLive(ArrayRef<ArrayRef<Segment>> segs, ArrayRef<int64_t> at,
                       ArrayRef<int64_t> sizes) {
  struct Live {
    int64_t first, last;
    size_t buf;
  };
  std::vector<Live> all, active;
  for (size_t j = 0; j < segs.size(); ++j)
    for (const Segment &s : segs[j])
      all.push_back({s.first, s.last, j});
  llvm::sort(all, [](const Live &x, const Live &y) { return x.first < y.first; });
  for (const Live &s : all) {
    llvm::erase_if(active, [&](const Live &a) { return a.last < s.first; });
    for (const Live &a : active)
      if (a.buf != s.buf && at[a.buf] < at[s.buf] + sizes[s.buf] &&
          at[s.buf] < at[a.buf] + sizes[a.buf])
        return false;
    active.push_back(s);
  }
  return true;
}

/// How far above the live peak slot blocks may place a program before
/// per-instance placement is tried (PlanMemoryPass).
constexpr double kBlockSlack = 0.02;

struct SlotLayout {
  std::vector<Item> items;
  llvm::MapVector<StringAttr, InBlock> inBlock;
  std::deque<SmallVector<Segment, 2>> storage; // merged segments the items point into
};

/// Merges `segs` (any order) into disjoint sorted segments.
SmallVector<Segment, 2> merged(SmallVector<Segment, 2> segs) {
  llvm::sort(segs, [](const Segment &x, const Segment &y) { return x.first < y.first; });
  SmallVector<Segment, 2> out;
  for (const Segment &s : segs)
    if (!out.empty() && s.first <= out.back().last + 1)
      out.back().last = std::max(out.back().last, s.last);
    else
      out.push_back(s);
  return out;
}

/// The pipeline's slotted instances by pattern (docs/memory.md "Microbatch
/// slots"). Every slot of a chunk runs the same subroutines, so its
/// instances live alike:
///  - a buffer none of whose segments crosses an action's end (a chunk's
///    workspace) needs no instance per slot: every slot shares one, live in
///    the segments of all;
///  - the others (what a microbatch keeps from F to B and W: saved
///    activations, received values) are laid out once per chunk, at
///    offsets in a slot block computed from slot 0's lifetimes, and each
///    slot of the chunk is one block, live while any of its buffers is. The
///    layout is checked on every slot (no two buffers live at once share
///    bytes); a slot on which it would not hold, or a buffer that belongs to
///    no single chunk, leaves the whole program to per-instance placement.
/// So a buffer's instances sit at the block bases of its chunk plus one
/// offset, which the plan writes once per chunk ("slot deltas").
/// With `byPattern` false, or where the pattern does not hold, every
/// instance is an item of its own.
SlotLayout layoutSlots(ArrayRef<Transient> instances,
                       const llvm::DenseMap<StringAttr, int64_t> &slotsOf,
                       ArrayRef<ActionSpan> spans, int64_t kernels, bool byPattern) {
  SlotLayout out;
  auto perInstance = [&] {
    SlotLayout all;
    for (const Transient &tr : instances)
      all.items.push_back({tr.buf, tr.slot, tr.segs, tr.bytes});
    return all;
  };
  if (!byPattern)
    return perInstance();
  // The action of each kernel, looked up per segment end (the spans tile
  // the step in order, so this is the last span beginning at or before it).
  std::vector<int64_t> actionAt(std::max<int64_t>(kernels, 0), -1);
  for (auto [a, span] : llvm::enumerate(spans))
    for (int64_t k = std::max<int64_t>(span.first, 0); k <= span.last && k < kernels; ++k)
      actionAt[k] = int64_t(a);
  auto actionOf = [&](int64_t time) -> int64_t {
    if (time >= 0 && time < kernels && actionAt[time] >= 0)
      return actionAt[time];
    auto it = std::upper_bound(spans.begin(), spans.end(), time,
                               [](int64_t v, const ActionSpan &a) { return v < a.first; });
    return it - spans.begin() - 1;
  };
  // A kernel's place in its slot's run of the chunk: (the action's rank
  // among the actions of its chunk and slot, the kernel's index in it).
  // Two slots whose buffers' segments begin and end at the same places
  // overlap alike (the order of the places is that of the times).
  std::vector<int64_t> ordinal(spans.size());
  {
    std::map<std::pair<int64_t, int64_t>, int64_t> seen; // (chunk, slot) -> actions so far
    for (auto [a, span] : llvm::enumerate(spans))
      ordinal[a] = seen[{span.chunk, span.slot}]++;
  }
  auto placeOf = [&](int64_t time) {
    int64_t a = actionOf(time);
    return std::make_pair(ordinal[a], time - spans[a].first);
  };
  auto sameShape = [&](ArrayRef<ArrayRef<Segment>> x, ArrayRef<ArrayRef<Segment>> y) {
    for (size_t j = 0; j < x.size(); ++j) {
      if (x[j].size() != y[j].size())
        return false;
      for (size_t i = 0; i < x[j].size(); ++i)
        if (placeOf(x[j][i].first) != placeOf(y[j][i].first) ||
            placeOf(x[j][i].last) != placeOf(y[j][i].last))
          return false;
    }
    return true;
  };
  // The slotted buffers' instances, by buffer in order of first use.
  llvm::MapVector<StringAttr, SmallVector<const Transient *, 4>> slotted;
  for (const Transient &tr : instances) {
    if (!slotsOf.count(tr.buf.getSymNameAttr())) {
      out.items.push_back({tr.buf, 0, tr.segs, tr.bytes});
      continue;
    }
    slotted[tr.buf.getSymNameAttr()].push_back(&tr);
  }
  // One block per chunk. (Blocks per chunk and life — by the kinds and
  // places of the actions that write a buffer first and read it last —
  // come closer to the live peak but fragment the arena more: llama3-8b
  // tp=8 pp=4 ZB-H1 1.005x -> 1.065x.)
  std::map<int64_t, SmallVector<BufferOp>> chunks; // chunk -> its block's buffers
  // A chunk's workspace buffers by the actions they live in (those of one
  // subroutine, usually): each set is one workspace block, laid out from
  // its first action and live over each action's span of its buffers.
  struct Workspace {
    BufferOp buf;
    SmallVector<Segment, 2> segs; // sorted
  };
  std::map<std::vector<int64_t>, SmallVector<Workspace, 4>> workspaces;
  for (auto &[name, insts] : slotted) {
    BufferOp buf = insts.front()->buf;
    bool local = true;
    int64_t chunk = -2;
    for (const Transient *tr : insts)
      for (const Segment &s : tr->segs) {
        int64_t a = actionOf(s.first), e = actionOf(s.last);
        if (a < 0 || e < 0)
          return perInstance();
        local &= a == e;
        for (int64_t c : {spans[a].chunk, spans[e].chunk})
          chunk = chunk == -2 || chunk == c ? c : -3;
      }
    if (local) {
      SmallVector<Segment, 2> all;
      for (const Transient *tr : insts)
        all.append(tr->segs.begin(), tr->segs.end());
      llvm::sort(all, [](const Segment &x, const Segment &y) { return x.first < y.first; });
      for (size_t i = 1; i < all.size(); ++i)
        if (all[i].first <= all[i - 1].last)
          return perInstance(); // two slots' segments overlap: not a workspace
      std::vector<int64_t> actions;
      for (const Segment &seg : all)
        if (actions.empty() || actions.back() != actionOf(seg.first))
          actions.push_back(actionOf(seg.first));
      workspaces[actions].push_back({buf, std::move(all)});
      continue;
    }
    if (chunk < 0)
      return perInstance();
    chunks[chunk].push_back(buf);
  }
  for (auto &[chunk, bufs] : chunks) {
    const int64_t id = chunk;
    const int64_t slots = slotsOf.lookup(bufs.front().getSymNameAttr());
    // Each buffer's segments per slot.
    std::vector<std::vector<ArrayRef<Segment>>> segsOf(slots,
                                                       std::vector<ArrayRef<Segment>>(bufs.size()));
    for (auto [j, buf] : llvm::enumerate(bufs)) {
      if (slotsOf.lookup(buf.getSymNameAttr()) != slots)
        return perInstance();
      for (const Transient *tr : slotted[buf.getSymNameAttr()])
        segsOf[tr->slot][j] = tr->segs;
    }
    std::vector<int64_t> sizes;
    for (BufferOp buf : bufs)
      sizes.push_back(aligned(buf.getNumBytes()));
    // Slot 0's lifetimes give the layout; a buffer it never uses has none.
    if (llvm::any_of(segsOf[0], [](ArrayRef<Segment> s) { return s.empty(); }))
      return perInstance();
    std::vector<int64_t> at = placeTransient(segsOf[0], sizes,
                                             liveBytesPeak(kernels, segsOf[0], sizes).first);
    int64_t blockBytes = 0;
    for (size_t j = 0; j < bufs.size(); ++j)
      blockBytes = std::max(blockBytes, at[j] + sizes[j]);
    // The layout holds on every slot: buffers live at once are disjoint.
    for (int64_t k = 0; k < slots; ++k) {
      if (k > 0 && !sameShape(segsOf[k], segsOf[0]) && !disjointWhereLive(segsOf[k], at, sizes))
        return perInstance();
      // The block of slot k: live while any of its buffers is.
      SmallVector<Segment, 2> all;
      for (size_t j = 0; j < bufs.size(); ++j)
        all.append(segsOf[k][j].begin(), segsOf[k][j].end());
      if (all.empty())
        continue; // a slot no action uses: its instances share slot 0's bytes
      SmallVector<Segment, 2> &blockSegs = out.storage.emplace_back(merged(std::move(all)));
      Item block;
      block.slot = k;
      block.segs = blockSegs;
      block.bytes = blockBytes;
      block.block = id;
      out.items.push_back(block);
    }
    for (auto [j, buf] : llvm::enumerate(bufs))
      out.inBlock[buf.getSymNameAttr()] = {id, at[j]};
  }
  int64_t nextWorkspace = kWorkspaceBlocks;
  for (auto &[actions, members] : workspaces) {
    const int64_t id = nextWorkspace++;
    // Each member's segments per action (actions in order).
    std::vector<std::vector<SmallVector<Segment, 2>>> per(
        actions.size(), std::vector<SmallVector<Segment, 2>>(members.size()));
    for (auto [j, m] : llvm::enumerate(members))
      for (const Segment &seg : m.segs) {
        size_t a = std::lower_bound(actions.begin(), actions.end(), actionOf(seg.first)) -
                   actions.begin();
        per[a][j].push_back(seg);
      }
    auto inAction = [&](size_t a) {
      std::vector<ArrayRef<Segment>> l;
      for (auto &segs : per[a])
        l.push_back(segs);
      return l;
    };
    std::vector<int64_t> sizes;
    for (Workspace &m : members)
      sizes.push_back(aligned(m.buf.getNumBytes()));
    std::vector<ArrayRef<Segment>> first = inAction(0);
    if (llvm::any_of(first, [](ArrayRef<Segment> l) { return l.empty(); }))
      return perInstance();
    std::vector<int64_t> at =
        placeTransient(first, sizes, liveBytesPeak(kernels, first, sizes).first);
    int64_t blockBytes = 0;
    for (size_t j = 0; j < members.size(); ++j)
      blockBytes = std::max(blockBytes, at[j] + sizes[j]);
    SmallVector<Segment, 2> &hulls = out.storage.emplace_back();
    // An action whose members' segments sit where the first's do (relative
    // to the action's start) overlaps alike.
    auto likeFirst = [&](size_t a) {
      for (size_t j = 0; j < members.size(); ++j) {
        if (per[a][j].size() != per[0][j].size())
          return false;
        for (size_t i = 0; i < per[a][j].size(); ++i)
          if (per[a][j][i].first - spans[actions[a]].first !=
                  per[0][j][i].first - spans[actions[0]].first ||
              per[a][j][i].last - spans[actions[a]].first !=
                  per[0][j][i].last - spans[actions[0]].first)
            return false;
      }
      return true;
    };
    for (size_t a = 0; a < actions.size(); ++a) {
      std::vector<ArrayRef<Segment>> l = inAction(a);
      if (a > 0 && !likeFirst(a) && !disjointWhereLive(l, at, sizes))
        return perInstance();
      Segment hull{std::numeric_limits<int64_t>::max(), -1};
      for (ArrayRef<Segment> segs : l)
        for (const Segment &seg : segs)
          hull = {std::min(hull.first, seg.first), std::max(hull.last, seg.last)};
      hulls.push_back(hull);
    }
    Item block;
    block.slot = -1;
    block.segs = hulls;
    block.bytes = blockBytes;
    block.block = id;
    out.items.push_back(block);
    for (auto [j, m] : llvm::enumerate(members))
      out.inBlock[m.buf.getSymNameAttr()] = {id, at[j], /*shared=*/true};
  }
  return out;
}

/// The program's buffers numbered in order, so the liveness below works on
/// indices instead of symbol names, and their instances numbered densely:
/// buffer i's instance k (its microbatch slot k; 0 when unslotted) is
/// `firstInstance[i] + k`.
struct Buffers {
  SmallVector<BufferOp> ops;
  SmallVector<int64_t> bytes;         // getNumBytes, once
  SmallVector<int64_t> instances;     // kSlotsAttr, or 1 (0 counts as 1)
  SmallVector<char> slotted;          // has kSlotsAttr: an action's slot picks
  SmallVector<uint32_t> firstInstance;
  uint32_t numInstances = 0;
  // Keyed by the uniqued symbol name (pointer hashing); looked up once per
  // kernel argument of each subroutine, never per action.
  llvm::DenseMap<StringAttr, uint32_t> index;

  explicit Buffers(Block &body) {
    for (auto buf : body.getOps<BufferOp>()) {
      index[buf.getSymNameAttr()] = ops.size();
      ops.push_back(buf);
      bytes.push_back(buf.getNumBytes());
      auto n = buf->getAttrOfType<IntegerAttr>(kSlotsAttr);
      instances.push_back(n && n.getInt() ? n.getInt() : 1);
      slotted.push_back(n != nullptr);
      firstInstance.push_back(numInstances);
      numInstances += std::max<int64_t>(instances.back(), 0);
    }
  }
  size_t size() const { return ops.size(); }
  /// The instance of buffer `buf` that an action with slot `slot` uses, or
  /// none for a slot past its instances (no placement looks at those).
  std::optional<uint32_t> instance(uint32_t buf, int64_t slot) const {
    int64_t k = slotted[buf] ? slot : 0;
    if (k < 0 || k >= instances[buf])
      return std::nullopt;
    return firstInstance[buf] + uint32_t(k);
  }
};

/// Phase 1 of the liveness: what each subroutine's kernels do to the
/// buffers, decoded from the IR once per subroutine (the op kind, each
/// argument's access, `accumulate`, the token) rather than once per action
/// that runs it. A pipelined program runs each chunk's subroutines once per
/// microbatch, so phase 2 (`Liveness`) replays these integer records
/// with the action's slot and the current kernel number.
struct SubroutineSummary {
  /// One buffer a kernel touches (each buffer once per kernel, its roles
  /// merged): `overwrites` when the kernel writes it without reading it
  /// (a written role, not accumulating), which begins a new segment.
  struct Access {
    uint32_t buffer;
    bool overwrites;
  };
  struct Kernel {
    uint32_t firstAccess, numAccesses; // into `accesses`
    int32_t token = -1;                // dense token number; -1: none
    bool wait = false;                 // a wait on `token`
  };
  std::vector<Kernel> kernels;
  std::vector<Access> accesses;
  /// Buffers that communication fills (a gather's, reduce-scatter's or
  /// recv's output): the report's "communication buffers".
  SmallVector<uint32_t> communication;

  /// Appends `k`'s record; `tokens` numbers the tokens densely.
  void add(KernelOp k, const Buffers &buffers, llvm::DenseMap<int64_t, int32_t> &tokens) {
    Kernel rec{uint32_t(accesses.size()), 0};
    if (auto token = k->getAttrOfType<IntegerAttr>(kTokenAttr))
      rec.token = tokens.try_emplace(token.getInt(), int32_t(tokens.size())).first->second;
    if (rec.token >= 0 && k.getKernel() == kWaitKernel) {
      rec.wait = true;
      kernels.push_back(rec);
      return;
    }
    auto kind = schema::parseOpKind(std::string_view(k.getKernel().data(), k.getKernel().size()));
    auto accumulate = k.getParams().getAs<BoolAttr>("accumulate");
    auto lookup = [&](Attribute a) -> std::optional<uint32_t> {
      auto it = buffers.index.find(cast<FlatSymbolRefAttr>(a).getAttr());
      if (it == buffers.index.end())
        return std::nullopt; // not a buffer: nothing to place
      return it->second;
    };
    if (kind && (*kind == schema::OpKind::kAllGather ||
                 *kind == schema::OpKind::kReduceScatter || *kind == schema::OpKind::kRecv))
      if (auto out = k.getArgs().getAs<FlatSymbolRefAttr>("y"))
        if (auto i = lookup(out))
          communication.push_back(*i);
    // Per buffer of this kernel: does it read it, does it overwrite it?
    SmallVector<std::tuple<uint32_t, bool, bool>, 8> touched;
    llvm::SmallDenseMap<uint32_t, unsigned, 8> entry; // buffer -> its entry in `touched`
    for (NamedAttribute arg : k.getArgs()) {
      bool reads = true, overwrites = false;
      if (kind) {
        int idx = schema::argIndex(*kind, std::string_view(arg.getName().data(),
                                                           arg.getName().size()));
        if (idx >= 0) {
          schema::ArgAccess acc = schema::opSpec(*kind).args[idx].access;
          reads = acc != schema::ArgAccess::kWrite;
          overwrites = acc == schema::ArgAccess::kWrite ||
                       (acc == schema::ArgAccess::kReadWrite && accumulate &&
                        !accumulate.getValue());
          if (overwrites)
            reads = false;
        }
      }
      auto note = [&](Attribute a) {
        std::optional<uint32_t> buf = lookup(a);
        if (!buf)
          return;
        auto [it, fresh] = entry.try_emplace(*buf, touched.size());
        if (fresh)
          touched.push_back({*buf, reads, overwrites});
        else
          std::get<1>(touched[it->second]) |= reads, std::get<2>(touched[it->second]) |= overwrites;
      };
      if (auto list = dyn_cast<ArrayAttr>(arg.getValue()))
        llvm::for_each(list, note);
      else
        note(arg.getValue());
    }
    for (auto [buf, r, w] : touched)
      accesses.push_back({buf, w && !r});
    rec.numAccesses = touched.size();
    kernels.push_back(rec);
  }
};

/// Phase 2: the live segments of every buffer instance over the step's
/// kernel sequence (kernels numbered in execution order, action after
/// action), replaying each action's subroutine summary with its slot.
struct Liveness {
  std::vector<SmallVector<Segment, 2>> segments; // per instance
  SmallVector<char> communication;               // per buffer
  int64_t numKernels = 0;
  llvm::StringMap<SubroutineSummary> summaries;  // by subroutine name

  /// The number of kernels an action of subroutine `sub` runs.
  int64_t kernelsOf(StringRef sub) const {
    auto it = summaries.find(sub);
    return it == summaries.end() ? 0 : int64_t(it->second.kernels.size());
  }

  Liveness(Block &body, const Buffers &buffers) {
    segments.resize(buffers.numInstances);
    communication.assign(buffers.size(), 0);
    llvm::DenseMap<int64_t, int32_t> tokens;
    for (auto sub : body.getOps<SubroutineOp>()) {
      SubroutineSummary &summary = summaries[sub.getSymName()];
      for (auto k : sub.getBody().front().getOps<KernelOp>())
        summary.add(k, buffers, tokens);
    }
    // Asynchronous plans: the instances each started communication op uses,
    // by token (those of the starting action's slot). The op may touch them
    // until its wait, so each stays live from the start through the wait
    // and no buffer takes its bytes meanwhile.
    std::vector<SmallVector<uint32_t, 4>> inFlight(tokens.size());
    int64_t t = 0;
    for (auto sched : body.getOps<ScheduleOp>())
      for (auto action : sched.getBody().front().getOps<ActionOp>()) {
        auto it = summaries.find(action.getSubroutine());
        if (it == summaries.end())
          continue;
        const SubroutineSummary &summary = it->second;
        for (uint32_t buf : summary.communication)
          communication[buf] = 1;
        auto slotAttr = action->getAttrOfType<IntegerAttr>(kSlotAttr);
        const int64_t slot = slotAttr ? slotAttr.getInt() : 0;
        for (const SubroutineSummary::Kernel &k : summary.kernels) {
          if (k.wait) {
            for (uint32_t inst : inFlight[k.token])
              if (!segments[inst].empty())
                segments[inst].back().last = t;
            inFlight[k.token].clear();
            ++t;
            continue;
          }
          for (const SubroutineSummary::Access &a :
               ArrayRef(summary.accesses).slice(k.firstAccess, k.numAccesses)) {
            std::optional<uint32_t> inst = buffers.instance(a.buffer, slot);
            if (!inst)
              continue;
            SmallVector<Segment, 2> &segs = segments[*inst];
            if (segs.empty() || (a.overwrites && segs.back().last < t))
              segs.push_back({t, t});
            else
              segs.back().last = t;
            if (k.token >= 0)
              inFlight[k.token].push_back(*inst);
          }
          ++t;
        }
      }
    numKernels = t;
  }
};

struct PlanMemoryPass : public llcdist::plan::impl::PlanMemoryBase<PlanMemoryPass> {
  void runOnOperation() override {
    ProgramOp program = getOperation();
    Block &body = program.getBody().front();
    Builder b(program.getContext());

    // 1. Live segments over the step (per subroutine once, then per action).
    const Buffers buffers(body);
    const Liveness live(body, buffers);
    const int64_t t = live.numKernels;
    // Instances of slotted buffers (plan::kSlotsAttr), by symbol name.
    llvm::DenseMap<StringAttr, int64_t> slotsOf;
    for (BufferOp buf : buffers.ops)
      if (auto n = buf->getAttrOfType<IntegerAttr>(kSlotsAttr))
        slotsOf[buf.getSymNameAttr()] = n.getInt();

    // Each action's kernels in that numbering, and its chunk.
    std::vector<ActionSpan> actionSpans;
    for (auto sched : body.getOps<ScheduleOp>())
      for (auto action : sched.getBody().front().getOps<ActionOp>()) {
        int64_t first = actionSpans.empty() ? 0 : actionSpans.back().last + 1;
        auto chunk = action->getAttrOfType<IntegerAttr>("pipeline.chunk");
        auto slot = action->getAttrOfType<IntegerAttr>(kSlotAttr);
        actionSpans.push_back({first,
                               first + live.kernelsOf(action.getSubroutine()) - 1,
                               chunk ? chunk.getInt() : -1, slot ? slot.getInt() : 0});
      }
    llvm::DenseMap<StringAttr, BufferOp> bufferOf;
    for (auto buf : body.getOps<BufferOp>())
      bufferOf[buf.getSymNameAttr()] = buf;

    // 2. Persistent state first, one after another (a slotted buffer's
    // instances side by side); recorded by kind.
    int64_t offset = 0;
    std::map<std::string, int64_t> byKind;
    // Per slotted buffer, its instances' offsets (-1: not yet placed).
    llvm::DenseMap<StringAttr, SmallVector<int64_t, 4>> slotOffsets;
    std::vector<Transient> byFirstUse; // every transient instance
    for (uint32_t i = 0; i < buffers.size(); ++i) {
      BufferOp buf = buffers.ops[i];
      StringAttr name = buf.getSymNameAttr();
      const int64_t instances = buffers.instances[i];
      bool placed = false;
      const int64_t alignedBytes = aligned(buffers.bytes[i]);
      if (!persistent(buf))
        for (int64_t k = 0; k < instances; ++k)
          if (ArrayRef<Segment> segs = live.segments[buffers.firstInstance[i] + k];
              !segs.empty()) {
            byFirstUse.push_back({buf, k, segs, alignedBytes});
            placed = true;
          }
      if (instances > 1)
        slotOffsets[name].assign(instances, -1);
      if (placed)
        continue;
      buf.setOffsetAttr(b.getI64IntegerAttr(offset));
      for (int64_t k = 0; k < instances; ++k) {
        if (instances > 1)
          slotOffsets[name][k] = offset;
        offset += aligned(buf.getNumBytes());
      }
      auto cls = buf->getAttrOfType<StringAttr>("memory_class");
      byKind[cls ? cls.str() : buf.getKind().str()] += instances * buf.getNumBytes();
    }
    int64_t base = offset;

    // The most bytes live at once over the transient instances (the lower
    // bound of any placement), and the kernel where it is reached.
    sortByFirstUse(byFirstUse, t);
    auto [livePeak, peakAt] = liveBytesPeak(
        t, llvm::map_to_vector(byFirstUse, [](const Transient &tr) { return tr.segs; }),
        llvm::map_to_vector(byFirstUse,
                            [](const Transient &tr) { return tr.bytes; }));

    // 3. Slotted instances by pattern (SlotLayout), then every item —
    // unslotted and per-instance buffers, chunk workspace, slot blocks —
    // best-fit in order of first use (placeTransient).
    struct Placement {
      SlotLayout layout;
      std::vector<Item> items; // in order of first use
      std::vector<int64_t> offsets;
      int64_t peak = 0;
    };
    auto place = [&](bool byPattern) {
      Placement p{layoutSlots(byFirstUse, slotsOf, actionSpans, t, byPattern), {}, {}, 0};
      p.items = p.layout.items;
      sortByFirstUse(p.items, t);
      std::vector<ArrayRef<Segment>> lifetimes;
      std::vector<int64_t> sizes;
      for (const Item &it : p.items) {
        lifetimes.push_back(it.segs);
        sizes.push_back(it.bytes);
      }
      p.offsets = placeTransient(lifetimes, sizes, liveBytesPeak(t, lifetimes, sizes).first);
      for (auto [i, it] : llvm::enumerate(p.items))
        p.peak = std::max(p.peak, p.offsets[i] + it.bytes);
      return p;
    };
    // Slot blocks hold what a microbatch frees during its backward until
    // the block's last buffer dies, and equal blocks leave holes that small
    // buffers would fill. Where that costs more than kBlockSlack over the
    // live peak, per-instance placement (exact, but O(microbatches ×
    // buffers) in the plan and its checks) is tried too, and the smaller
    // arena wins.
    Placement placed = place(/*byPattern=*/true);
    if (!placed.layout.inBlock.empty() &&
        double(placed.peak) > (1 + kBlockSlack) * double(livePeak)) {
      Placement exact = place(/*byPattern=*/false);
      if (exact.peak < placed.peak)
        placed = std::move(exact);
    }
    SlotLayout &layout = placed.layout;
    std::vector<Item> &items = placed.items;
    std::vector<int64_t> &offsets = placed.offsets;
    std::vector<int64_t> sizes;
    for (const Item &it : items)
      sizes.push_back(it.bytes);
    int64_t peak = 0;
    // Each item's offset: a buffer's (instance's, or all instances' for a
    // workspace buffer) or a slot block's base.
    llvm::DenseMap<std::pair<int64_t, int64_t>, int64_t> blockBase; // (block, slot)
    for (auto [i, it] : llvm::enumerate(items)) {
      peak = std::max(peak, offsets[i] + sizes[i]);
      const int64_t at = base + offsets[i];
      if (it.block >= 0) {
        blockBase[{it.block, it.slot}] = at;
        continue;
      }
      if (it.slot <= 0)
        it.buf.setOffsetAttr(b.getI64IntegerAttr(at));
      if (auto so = slotOffsets.find(it.buf.getSymNameAttr()); so != slotOffsets.end()) {
        if (it.slot < 0)
          llvm::fill(so->second, at); // a chunk's workspace: every slot's
        else
          so->second[it.slot] = at;
      }
    }
    // A slot block's buffers at the block's base plus their place in it.
    for (const auto &[name, placed] : layout.inBlock) {
      auto &so = slotOffsets[name];
      for (int64_t k = 0; k < int64_t(so.size()); ++k)
        if (auto it = blockBase.find({placed.block, placed.shared ? -1 : k});
            it != blockBase.end())
          so[k] = it->second + placed.offset;
      if (so[0] >= 0)
        bufferOf.lookup(name).setOffsetAttr(b.getI64IntegerAttr(so[0]));
    }
    // Every instance has an offset: one no action touches (none in
    // practice: each slot runs the chunk's whole subroutines) shares
    // instance 0's bytes, and the runtime checks none of its ops.
    for (auto buf : body.getOps<BufferOp>()) {
      auto it = slotOffsets.find(buf.getSymNameAttr());
      if (it == slotOffsets.end())
        continue;
      if (!buf.getOffset())
        buf.setOffsetAttr(b.getI64IntegerAttr(
            *llvm::find_if(it->second, [](int64_t o) { return o >= 0; })));
      for (int64_t &o : it->second)
        if (o < 0)
          o = *buf.getOffset();
      buf->setAttr(kSlotOffsetsAttr, b.getDenseI64ArrayAttr(it->second));
    }
    // What is live at that moment: activations, communication buffers, and
    // workspace (the other scratch buffers).
    int64_t atPeak[3] = {0, 0, 0};
    for (Transient &tr : byFirstUse)
      for (const Segment &seg : tr.segs)
        if (seg.first <= peakAt && peakAt <= seg.last) {
          int cls = live.communication[buffers.index.lookup(tr.buf.getSymNameAttr())] ? 1
                    : tr.buf.getKind() == "scratch"            ? 2
                                                                : 0;
          atPeak[cls] += tr.bytes;
        }
    program.setArenaBytesAttr(b.getI64IntegerAttr(base + peak));

    // The breakdown the compile report prints (llc-dist compile; issue #6).
    SmallVector<NamedAttribute> memory;
    // Exact tensor bytes per kind (the model-state formulas), and the 64-byte
    // alignment the persistent buffers add.
    int64_t exact = 0;
    for (auto &[kind, bytes] : byKind) {
      memory.push_back(b.getNamedAttr(kind, b.getI64IntegerAttr(bytes)));
      exact += bytes;
    }
    memory.push_back(b.getNamedAttr("padding", b.getI64IntegerAttr(base - exact)));
    memory.push_back(b.getNamedAttr("transient_peak", b.getI64IntegerAttr(peak)));
    memory.push_back(b.getNamedAttr("transient_live_peak", b.getI64IntegerAttr(livePeak)));
    memory.push_back(b.getNamedAttr("peak_activations", b.getI64IntegerAttr(atPeak[0])));
    memory.push_back(b.getNamedAttr("peak_communication", b.getI64IntegerAttr(atPeak[1])));
    memory.push_back(b.getNamedAttr("peak_workspace", b.getI64IntegerAttr(atPeak[2])));
    program->setAttr("plan.memory", b.getDictionaryAttr(memory));
  }
};
} // namespace
