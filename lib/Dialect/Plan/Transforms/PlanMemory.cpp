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
// per microbatch slot; an action with slot k uses instance k. Each instance
// is planned as a buffer of its own (its segments are those of the actions
// in its slot), so the arena is exactly what separate per-slot buffers
// would take; the offsets are recorded in plan::kSlotOffsetsAttr.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Dialect/Plan/Transforms/Passes.h"

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/runtime/PlanSchema.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <set>
#include <tuple>

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

/// The free bytes at the sweep's current kernel: `busy` maps the begin of
/// every buffer live there to its end (disjoint ranges); `gaps` holds each
/// bounded hole between them as (size, begin), so the smallest hole that
/// fits is one lookup. Above the highest live buffer everything is free.
class FreeSpace {
public:
  void insert(int64_t begin, int64_t end) {
    auto next = busy.lower_bound(begin);
    int64_t lo = next == busy.begin() ? 0 : std::prev(next)->second;
    if (next != busy.end()) {
      gaps.erase({next->first - lo, lo});
      addGap(end, next->first);
    }
    addGap(lo, begin);
    busy.emplace(begin, end);
  }
  void erase(int64_t begin) {
    auto it = busy.find(begin);
    int64_t lo = it == busy.begin() ? 0 : std::prev(it)->second;
    gaps.erase({begin - lo, lo});
    if (auto next = std::next(it); next != busy.end()) {
      gaps.erase({next->first - it->second, it->second});
      addGap(lo, next->first);
    }
    busy.erase(it);
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
  int64_t top() const { return busy.empty() ? 0 : busy.rbegin()->second; }
  void addGap(int64_t lo, int64_t hi) {
    if (hi > lo)
      gaps.insert({hi - lo, lo});
  }
  std::map<int64_t, int64_t> busy;
  std::set<Range> gaps;
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
  FreeSpace space;
  using Event = std::tuple<int64_t, size_t>; // (kernel the bytes are free from, buffer)
  std::priority_queue<Event, std::vector<Event>, std::greater<>> ends;
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
      bool hasEnd = !ends.empty() && std::get<0>(ends.top()) <= now;
      bool hasStart = !returning.empty() && std::get<0>(*returning.begin()) <= now;
      if (hasEnd && (!hasStart || std::get<0>(ends.top()) <= std::get<0>(*returning.begin()))) {
        auto [free, id] = ends.top();
        ends.pop();
        space.erase(offsets[id]);
        active[id] = 0;
      } else if (hasStart) {
        auto [first, id, k] = *returning.begin();
        returning.erase(returning.begin());
        space.insert(offsets[id], offsets[id] + sizes[id]);
        active[id] = 1;
        ends.push({lifetimes[id][k].last + 1, id});
        if (k + 1 < lifetimes[id].size())
          returning.insert({lifetimes[id][k + 1].first, id, k + 1});
      } else {
        break;
      }
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
    space.insert(at, at + sizes[i]);
    active[i] = 1;
    ends.push({segs.front().last + 1, i});
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

struct PlanMemoryPass : public llcdist::plan::impl::PlanMemoryBase<PlanMemoryPass> {
  void runOnOperation() override {
    ProgramOp program = getOperation();
    Block &body = program.getBody().front();
    Builder b(program.getContext());

    // 1. Live segments over the step: kernels numbered in execution order.
    llvm::StringMap<SmallVector<KernelOp>> kernelsOf;
    for (auto sub : body.getOps<SubroutineOp>())
      for (auto k : sub.getBody().front().getOps<KernelOp>())
        kernelsOf[sub.getSymName()].push_back(k);
    // Instances of slotted buffers (plan::kSlotsAttr), by symbol name.
    llvm::DenseMap<StringAttr, int64_t> slotsOf;
    for (auto buf : body.getOps<BufferOp>())
      if (auto n = buf->getAttrOfType<IntegerAttr>(kSlotsAttr))
        slotsOf[buf.getSymNameAttr()] = n.getInt();
    // Keyed by the uniqued symbol name (pointer hashing: a deep model has
    // ~10^5 buffers and ~10^6 buffer references) and the instance.
    using Instance = std::pair<StringAttr, int64_t>;
    llvm::DenseMap<Instance, SmallVector<Segment, 2>> live;
    // Buffers that communication fills (a gather's, reduce-scatter's or
    // recv's output): the report's "communication buffers".
    llvm::DenseSet<StringAttr> communication;
    int64_t t = 0;
    llvm::SmallDenseMap<StringAttr, std::pair<bool, bool>, 8> touched;
    // Asynchronous plans: the buffers of each started communication op, by
    // token, as the instances the starting action's slot uses. The op may
    // touch them until its wait, so each stays live from the start through
    // the wait and no buffer takes its bytes meanwhile.
    llvm::DenseMap<int64_t, SmallVector<Instance, 4>> inFlight;
    for (auto sched : body.getOps<ScheduleOp>())
      for (auto action : sched.getBody().front().getOps<ActionOp>()) {
        auto slotAttr = action->getAttrOfType<IntegerAttr>(kSlotAttr);
        const int64_t slot = slotAttr ? slotAttr.getInt() : 0;
        for (KernelOp k : kernelsOf.lookup(action.getSubroutine())) {
          auto token = k->getAttrOfType<IntegerAttr>(kTokenAttr);
          if (token && k.getKernel() == kWaitKernel) {
            for (Instance inst : inFlight.lookup(token.getInt()))
              if (auto it = live.find(inst); it != live.end() && !it->second.empty())
                it->second.back().last = t;
            inFlight.erase(token.getInt());
            ++t;
            continue;
          }
          auto kind = schema::parseOpKind(k.getKernel().str());
          auto accumulate = k.getParams().getAs<BoolAttr>("accumulate");
          if (kind && (*kind == schema::OpKind::kAllGather ||
                       *kind == schema::OpKind::kReduceScatter || *kind == schema::OpKind::kRecv))
            for (StringRef role : {"y"})
              if (auto out = k.getArgs().getAs<FlatSymbolRefAttr>(role))
                communication.insert(out.getAttr());
          // Per buffer of this kernel: does it read it, does it overwrite it?
          touched.clear();
          for (NamedAttribute arg : k.getArgs()) {
            bool reads = true, overwrites = false;
            if (kind) {
              int idx = schema::argIndex(*kind, arg.getName().strref());
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
              auto &[r, w] = touched[cast<FlatSymbolRefAttr>(a).getAttr()];
              r |= reads;
              w |= overwrites;
            };
            if (auto list = dyn_cast<ArrayAttr>(arg.getValue()))
              llvm::for_each(list, note);
            else
              note(arg.getValue());
          }
          for (auto &[name, rw] : touched) {
            const Instance inst{name, slotsOf.count(name) ? slot : 0};
            auto &segs = live[inst];
            bool def = rw.second && !rw.first;
            if (segs.empty() || (def && segs.back().last < t))
              segs.push_back({t, t});
            else
              segs.back().last = t;
            if (token)
              inFlight[token.getInt()].push_back(inst);
          }
          ++t;
        }
      }

    // 2. Persistent state first, one after another (a slotted buffer's
    // instances side by side); recorded by kind.
    int64_t offset = 0;
    std::map<std::string, int64_t> byKind;
    // Per slotted buffer, its instances' offsets (-1: not yet placed).
    llvm::DenseMap<StringAttr, SmallVector<int64_t, 4>> slotOffsets;
    struct Transient {
      BufferOp buf;
      int64_t slot;
      ArrayRef<Segment> segs;
    };
    std::vector<Transient> byFirstUse;
    for (auto buf : body.getOps<BufferOp>()) {
      StringAttr name = buf.getSymNameAttr();
      const int64_t instances = slotsOf.lookup(name) ? slotsOf.lookup(name) : 1;
      bool placed = false;
      if (!persistent(buf))
        for (int64_t k = 0; k < instances; ++k)
          if (auto it = live.find({name, k}); it != live.end() && !it->second.empty()) {
            byFirstUse.push_back({buf, k, it->second});
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

    // 3. Transient buffers (instances), best-fit in order of first use
    // (placeTransient).
    llvm::stable_sort(byFirstUse, [](const Transient &x, const Transient &y) {
      return x.segs.front().first < y.segs.front().first;
    });
    std::vector<ArrayRef<Segment>> lifetimes;
    std::vector<int64_t> sizes;
    for (Transient &tr : byFirstUse) {
      lifetimes.push_back(tr.segs);
      sizes.push_back(aligned(tr.buf.getNumBytes()));
    }
    // The most bytes live at once (the lower bound of any placement), and
    // the kernel where it is reached.
    std::vector<int64_t> liveBytes(t + 1, 0); // bytes live per kernel
    for (size_t i = 0; i < byFirstUse.size(); ++i)
      for (const Segment &s : lifetimes[i]) {
        liveBytes[s.first] += sizes[i];
        liveBytes[s.last + 1] -= sizes[i];
      }
    int64_t livePeak = 0, running = 0, peakAt = 0;
    for (auto [k, v] : llvm::enumerate(liveBytes))
      if ((running += v) > livePeak) {
        livePeak = running;
        peakAt = k;
      }
    std::vector<int64_t> offsets = placeTransient(lifetimes, sizes, livePeak);
    int64_t peak = 0;
    for (auto [i, tr] : llvm::enumerate(byFirstUse)) {
      peak = std::max(peak, offsets[i] + sizes[i]);
      if (tr.slot == 0)
        tr.buf.setOffsetAttr(b.getI64IntegerAttr(base + offsets[i]));
      if (auto it = slotOffsets.find(tr.buf.getSymNameAttr()); it != slotOffsets.end())
        it->second[tr.slot] = base + offsets[i];
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
          int cls = communication.contains(tr.buf.getSymNameAttr()) ? 1
                    : tr.buf.getKind() == "scratch"            ? 2
                                                                : 0;
          atPeak[cls] += aligned(tr.buf.getNumBytes());
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
