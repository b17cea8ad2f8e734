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
#include "SlotLayout.h"

#include "llcdist/Dialect/Plan/Transforms/Passes.h"

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/runtime/PlanSchema.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringMap.h"

#include <algorithm>
#include <array>
#include <deque>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#define DEBUG_TYPE "llcdist-plan-memory"

namespace llcdist::plan {
#define GEN_PASS_DEF_PLANMEMORY
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist::plan;
using namespace llcdist::plan::memory;
namespace schema = llcdist::rt::schema;

namespace {
bool persistent(BufferOp buf) {
  StringRef k = buf.getKind();
  return k == "param" || k == "grad" || k == "optimizer_state" || k == "input" || k == "metric";
}

/// The program's buffers numbered in order, so the liveness below works on
/// indices instead of symbol names, and their instances numbered densely:
/// buffer i's instance k (its microbatch slot k; 0 when unslotted) is
/// `firstInstance[i] + k`.
struct Buffers {
  SmallVector<BufferOp> ops;
  SmallVector<int64_t> bytes;     // getNumBytes, once
  SmallVector<int64_t> instances; // kSlotsAttr, or 1 (0 counts as 1)
  SmallVector<char> slotted;      // has kSlotsAttr: an action's slot picks
  SmallVector<uint32_t> firstInstance;
  SmallVector<char> persistent; // placed for the whole step: no segments
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
      persistent.push_back(::persistent(buf));
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
  /// The accesses to unslotted buffers, with their kernel's index: all an
  /// action of a slot other than 0 replays where the slots are alike.
  std::vector<std::pair<uint32_t, Access>> unslotted;
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
    if (kind && (*kind == schema::OpKind::kAllGather || *kind == schema::OpKind::kReduceScatter ||
                 *kind == schema::OpKind::kRecv))
      if (auto out = k.getArgs().getAs<FlatSymbolRefAttr>("y"))
        if (auto i = lookup(out))
          communication.push_back(*i);
    // Per buffer of this kernel: does it read it, does it overwrite it?
    SmallVector<std::tuple<uint32_t, bool, bool>, 8> touched;
    llvm::SmallDenseMap<uint32_t, unsigned, 8> entry; // buffer -> its entry in `touched`
    for (NamedAttribute arg : k.getArgs()) {
      bool reads = true, overwrites = false;
      if (kind) {
        int idx = schema::argIndex(*kind, std::string_view(arg.getName().data(), arg.getName().size()));
        if (idx >= 0) {
          const schema::ArgAccess acc =
              schema::effectiveAccess(*kind, size_t(idx), !accumulate || accumulate.getValue());
          overwrites = acc == schema::ArgAccess::kWrite;
          reads = !overwrites;
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
    // Persistent state is placed for the whole step: its accesses need no
    // replay (a step touches parameters and gradients in most kernels).
    for (auto [buf, r, w] : touched) {
      if (buffers.persistent[buf])
        continue;
      accesses.push_back({buf, w && !r});
      if (!buffers.slotted[buf])
        unslotted.push_back({uint32_t(kernels.size()), accesses.back()});
    }
    rec.numAccesses = accesses.size() - rec.firstAccess;
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
  llvm::StringMap<SubroutineSummary> summaries; // by subroutine name

  /// The number of kernels an action of subroutine `sub` runs.
  int64_t kernelsOf(StringRef sub) const {
    auto it = summaries.find(sub);
    return it == summaries.end() ? 0 : int64_t(it->second.kernels.size());
  }

  /// Phase 1: every subroutine's summary.
  Liveness(Block &body, const Buffers &buffers) {
    segments.resize(buffers.numInstances);
    communication.assign(buffers.size(), 0);
    for (auto sub : body.getOps<SubroutineOp>()) {
      SubroutineSummary &summary = summaries[sub.getSymName()];
      for (auto k : sub.getBody().front().getOps<KernelOp>())
        summary.add(k, buffers, tokens);
    }
  }

  /// Phase 2: the segments, action after action. With `alike` (the slots
  /// are alike: SlotPattern), an action of a slot other than 0 replays only
  /// its unslotted accesses: its slot's instances live where slot 0's do,
  /// moved (SlotPattern::map).
  void replay(Block &body, const Buffers &buffers, bool alike) {
    // Asynchronous plans: the instances each started communication op uses,
    // by token (those of the starting action's slot). The op may touch them
    // until its wait, so each stays live from the start through the wait
    // and no buffer takes its bytes meanwhile.
    std::vector<SmallVector<uint32_t, 4>> inFlight(tokens.size());
    int64_t t = 0;
    auto access = [&](const SubroutineSummary::Access &a, int64_t slot, int64_t at) {
      std::optional<uint32_t> inst = buffers.instance(a.buffer, slot);
      if (!inst)
        return inst;
      SmallVector<Segment, 2> &segs = segments[*inst];
      if (segs.empty() || (a.overwrites && segs.back().last < at))
        segs.push_back({at, at});
      else
        segs.back().last = at;
      return inst;
    };
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
        if (alike && slot != 0) {
          for (const auto &[k, a] : summary.unslotted)
            access(a, slot, t + int64_t(k));
          t += int64_t(summary.kernels.size());
          continue;
        }
        for (const SubroutineSummary::Kernel &k : summary.kernels) {
          if (k.wait) {
            for (uint32_t inst : inFlight[k.token])
              if (!segments[inst].empty())
                segments[inst].back().last = t;
            inFlight[k.token].clear();
            ++t;
            continue;
          }
          for (const SubroutineSummary::Access &a : ArrayRef(summary.accesses).slice(k.firstAccess, k.numAccesses))
            if (std::optional<uint32_t> inst = access(a, slot, t); inst && k.token >= 0)
              inFlight[k.token].push_back(*inst);
          ++t;
        }
      }
    numKernels = t;
  }

  /// Dense numbers of the program's tokens (none: a synchronous program).
  llvm::DenseMap<int64_t, int32_t> tokens;
};

/// The slots' pattern (SlotPattern), where they are alike: no token (a
/// started op's buffers live to its wait, which may be in another slot's
/// action), every slotted buffer touched by the subroutines of one chunk
/// only, that chunk's buffers all with its number of slots, and every slot
/// of the chunk running the chunk's subroutines in slot 0's order.
std::optional<SlotPattern> slotPattern(Block &body, const Buffers &buffers, const Liveness &live,
                                       ArrayRef<ActionSpan> spans) {
  if (!live.tokens.empty())
    return std::nullopt;
  SlotPattern p;
  p.spans = spans;
  std::vector<StringRef> subOf;
  for (auto sched : body.getOps<ScheduleOp>())
    for (auto action : sched.getBody().front().getOps<ActionOp>())
      subOf.push_back(action.getSubroutine());
  if (subOf.size() != spans.size())
    return std::nullopt;
  // The chunk of each subroutine's actions (-2: none runs it; -3: several).
  auto meet = [](int64_t &have, int64_t c) { have = have == -2 || have == c ? c : -3; };
  llvm::StringMap<int64_t> chunkOfSub;
  for (auto [a, span] : llvm::enumerate(spans))
    meet(chunkOfSub.try_emplace(subOf[a], -2).first->second, span.chunk);
  std::vector<int64_t> chunkOfBuf(buffers.size(), -2);
  for (const auto &entry : live.summaries) {
    auto run = chunkOfSub.find(entry.getKey());
    if (run == chunkOfSub.end())
      continue; // never run: never replayed
    const int64_t c = run->second;
    for (const SubroutineSummary::Access &a : entry.getValue().accesses)
      if (buffers.slotted[a.buffer])
        meet(chunkOfBuf[a.buffer], c);
  }
  std::map<int64_t, int64_t> slotsOfChunk;
  for (uint32_t i = 0; i < buffers.size(); ++i) {
    if (!buffers.slotted[i] || chunkOfBuf[i] == -2)
      continue;
    if (chunkOfBuf[i] < 0)
      return std::nullopt;
    auto [it, fresh] = slotsOfChunk.try_emplace(chunkOfBuf[i], buffers.instances[i]);
    if (!fresh && it->second != buffers.instances[i])
      return std::nullopt;
  }
  if (!slotsOfChunk.empty())
    p.actions.resize(size_t(slotsOfChunk.rbegin()->first + 1));
  for (auto [c, slots] : slotsOfChunk)
    p.actions[size_t(c)].resize(size_t(std::max<int64_t>(slots, 0)));
  std::map<std::pair<int64_t, int64_t>, int64_t> seen; // (chunk, slot) -> actions so far
  for (auto [a, span] : llvm::enumerate(spans)) {
    p.place.push_back(seen[{span.chunk, span.slot}]++);
    if (span.chunk < 0 || span.chunk >= int64_t(p.actions.size()) || p.actions[size_t(span.chunk)].empty())
      continue;
    auto &bySlot = p.actions[size_t(span.chunk)];
    if (span.slot < 0 || span.slot >= int64_t(bySlot.size()))
      return std::nullopt;
    bySlot[size_t(span.slot)].push_back(int64_t(a));
  }
  for (const auto &bySlot : p.actions)
    for (const std::vector<int64_t> &acts : bySlot) {
      if (acts.empty() || acts.size() != bySlot[0].size())
        return std::nullopt;
      for (size_t i = 0; i < acts.size(); ++i)
        if (subOf[acts[i]] != subOf[bySlot[0][i]])
          return std::nullopt;
    }
  for (auto [a, span] : llvm::enumerate(spans))
    for (int64_t k = span.first; k <= span.last; ++k)
      p.actionAt.push_back(int64_t(a));
  return p;
}

/// One program's placement (the pass's steps, in order): live segments,
/// the persistent buffers, the transient ones best-fit (slot blocks by
/// pattern), the offsets written, the breakdown recorded.
class ProgramMemory {
public:
  ProgramMemory(ProgramOp program, bool slotsAlike, bool checkAlike)
      : program(program), body(program.getBody().front()), b(program.getContext()), buffers(body), live(body, buffers),
        checkAlike(checkAlike) {
    // 1. Live segments over the step (per subroutine once, then per action).
    // Instances of slotted buffers (plan::kSlotsAttr), by symbol name.
    for (BufferOp buf : buffers.ops)
      if (auto n = buf->getAttrOfType<IntegerAttr>(kSlotsAttr))
        slotsOf[buf.getSymNameAttr()] = n.getInt();
    // Each action's kernels in that numbering, and its chunk.
    for (auto sched : body.getOps<ScheduleOp>())
      for (auto action : sched.getBody().front().getOps<ActionOp>()) {
        int64_t first = actionSpans.empty() ? 0 : actionSpans.back().last + 1;
        auto chunk = action->getAttrOfType<IntegerAttr>("pipeline.chunk");
        auto slot = action->getAttrOfType<IntegerAttr>(kSlotAttr);
        actionSpans.push_back({first, first + live.kernelsOf(action.getSubroutine()) - 1, chunk ? chunk.getInt() : -1,
                               slot ? slot.getInt() : 0});
      }
    // Where the slots are alike, slot 0 stands for the others (SlotPattern).
    pattern = slotsAlike ? slotPattern(body, buffers, live, actionSpans) : std::nullopt;
    live.replay(body, buffers, pattern.has_value());
    t = live.numKernels;
    for (auto buf : body.getOps<BufferOp>())
      bufferOf[buf.getSymNameAttr()] = buf;
  }

  LogicalResult run() {
    placePersistent();
    measureLivePeak();
    // 3. Slotted instances by pattern (SlotLayout), then every item —
    // unslotted and per-instance buffers, chunk workspace, slot blocks —
    // best-fit in order of first use (placeTransient).
    // Slot blocks hold what a microbatch frees during its backward until
    // the block's last buffer dies, and equal blocks leave holes that small
    // buffers would fill, and a chunk's workspace shares one instance that
    // must avoid every slot's block. Where that costs more than kBlockSlack
    // over the live peak, the blocks taking the workspace that fits in them
    // (layoutSlots' adopt) and per-instance placement (exact, but
    // O(microbatches × buffers) in the plan and its checks) are tried too,
    // and the smallest arena wins (ties: blocks, per instance, adopt).
    Placement placed = place(/*byPattern=*/true);
    if (!mismatch && !placed.layout.inBlock.empty() && double(placed.peak) > (1 + kBlockSlack) * double(livePeak)) {
      Placement adopted = place(/*byPattern=*/true, /*adopt=*/true);
      Placement exact = place(/*byPattern=*/false);
      for (Placement *other : {&exact, &adopted})
        if (other->peak < placed.peak)
          placed = std::move(*other);
    }
    if (mismatch) {
      program.emitError("llcdist-plan-memory: the slots worked out from slot 0 differ from "
                        "every slot's: ")
          << *mismatch;
      return failure();
    }
    writeOffsets(placed);
    recordBreakdown();
    return success();
  }

private:
  struct Placement {
    SlotLayout layout;
    std::vector<Item> items; // in order of first use
    std::vector<int64_t> offsets;
    int64_t peak = 0;
  };

  /// 2. Persistent state first, one after another (a slotted buffer's
  /// instances side by side); recorded by kind. The transient instances are
  /// collected for later.
  void placePersistent() {
    // 2. Persistent state first, one after another (a slotted buffer's
    // instances side by side); recorded by kind.
    int64_t offset = 0;
    for (uint32_t i = 0; i < buffers.size(); ++i) {
      BufferOp buf = buffers.ops[i];
      StringAttr name = buf.getSymNameAttr();
      const int64_t instances = buffers.instances[i];
      bool placed = false;
      const int64_t alignedBytes = aligned(buffers.bytes[i]);
      if (!persistent(buf))
        for (int64_t k = 0; k < instances; ++k)
          if (ArrayRef<Segment> segs = live.segments[buffers.firstInstance[i] + k]; !segs.empty()) {
            Transient &tr = byFirstUse.emplace_back(Transient{buf, k, segs, alignedBytes});
            tr.index = i;
            placed = true;
            if (pattern && buffers.slotted[i]) {
              tr.patternChunk = actionSpans[pattern->actionAt[segs.front().first]].chunk;
              break;
            }
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
    base = offset;
  }

  /// Calls `f(tr, slot, segment)` for every segment of every transient
  /// instance (with the pattern, each slot's of a slotted buffer).
  template <typename F> void forEachSegment(F f) const {
    // A slot-0 segment's ends as (place of the action, kernels after its start).
    SmallVector<std::array<int64_t, 4>, 4> ends;
    for (const Transient &tr : byFirstUse) {
      if (tr.patternChunk < 0) {
        for (const Segment &s : tr.segs)
          f(tr, tr.slot, s);
        continue;
      }
      ends.clear();
      for (const Segment &s : tr.segs) {
        int64_t a = pattern->actionAt[s.first], e = pattern->actionAt[s.last];
        ends.push_back(
            {pattern->place[a], s.first - actionSpans[a].first, pattern->place[e], s.last - actionSpans[e].first});
      }
      const auto &bySlot = pattern->actions[size_t(tr.patternChunk)];
      for (auto [k, acts] : llvm::enumerate(bySlot))
        for (const auto &[pf, of, pl, ol] : ends)
          f(tr, int64_t(k), Segment{actionSpans[acts[pf]].first + of, actionSpans[acts[pl]].first + ol});
    }
  }

  /// The most bytes live at once over the transient instances (the lower
  /// bound of any placement), and the first kernel where it is reached
  /// (liveBytesPeak over every instance).
  void measureLivePeak() {
    sortByFirstUse(byFirstUse, t);
    {
      std::vector<int64_t> delta(t + 1, 0);
      forEachSegment([&](const Transient &tr, int64_t, Segment s) {
        delta[s.first] += tr.bytes;
        delta[s.last + 1] -= tr.bytes;
      });
      int64_t running = 0;
      for (auto [k, v] : llvm::enumerate(delta))
        if ((running += v) > livePeak) {
          livePeak = running;
          peakAt = int64_t(k);
        }
    }
  }

  /// With `pattern`: every instance as one of its own (the pattern's slots
  /// worked out), in order of first use, for per-instance placement.
  std::vector<Transient> everyInstance() {
    // In the order layoutSlots' callers build it (buffer, then slot),
    // then by first use.
    std::vector<Transient> all;
    std::vector<SmallVector<const Transient *, 1>> own(buffers.size());
    for (const Transient &tr : byFirstUse)
      own[size_t(tr.index)].push_back(&tr);
    for (uint32_t i = 0; i < buffers.size(); ++i)
      for (const Transient *tr : own[i]) {
        if (tr->patternChunk < 0) {
          all.push_back(*tr);
          continue;
        }
        for (int64_t k = 0; k < pattern->slots(tr->patternChunk); ++k) {
          Transient inst = *tr;
          inst.slot = k;
          inst.patternChunk = -1;
          if (k > 0)
            inst.segs = expandedSegs.emplace_back(pattern->map(tr->patternChunk, k, tr->segs));
          all.push_back(inst);
        }
      }
    sortByFirstUse(all, t);
    return all;
  }

  /// check-slots-alike: where `alike` (the pattern's layout, or none: per
  /// instance) differs from layoutSlots' on every instance, what differs.
  std::optional<std::string> differ(const std::optional<SlotLayout> &alike, const std::vector<Transient> &all,
                                    bool adopt) {
    SlotLayout ref = layoutSlots(all, slotsOf, actionSpans, t, /*byPattern=*/true, adopt);
    if (!alike)
      return ref.inBlock.empty() ? std::nullopt
                                 : std::optional<std::string>("the pattern fell back to "
                                                              "per-instance placement");
    if (alike->items.size() != ref.items.size())
      return "items: " + std::to_string(alike->items.size()) + " vs " + std::to_string(ref.items.size());
    for (auto [i, x] : llvm::enumerate(alike->items)) {
      const Item &y = ref.items[i];
      bool same = x.buf == y.buf && x.slot == y.slot && x.bytes == y.bytes && x.block == y.block &&
                  x.segs.size() == y.segs.size();
      for (size_t k = 0; same && k < x.segs.size(); ++k)
        same = x.segs[k].first == y.segs[k].first && x.segs[k].last == y.segs[k].last;
      if (!same)
        return "item " + std::to_string(i) + " (block " + std::to_string(x.block) + " slot " + std::to_string(x.slot) +
               ")";
    }
    if (alike->inBlock.size() != ref.inBlock.size())
      return std::string("the buffers in blocks");
    for (const auto &[name, in] : alike->inBlock) {
      auto it = ref.inBlock.find(name);
      if (it == ref.inBlock.end() || it->second.block != in.block || it->second.offset != in.offset ||
          it->second.shared != in.shared)
        return "buffer " + name.str() + "'s place in its block";
    }
    std::vector<ArrayRef<Segment>> segs;
    std::vector<int64_t> bytes;
    for (const Transient &tr : all) {
      segs.push_back(tr.segs);
      bytes.push_back(tr.bytes);
    }
    if (liveBytesPeak(t, segs, bytes) != std::make_pair(livePeak, peakAt))
      return std::string("the live peak");
    return std::nullopt;
  }

  Placement place(bool byPattern, bool adopt = false) {
    Placement p;
    std::optional<SlotLayout> alike;
    if (pattern && byPattern)
      alike = layoutSlotsAlike(byFirstUse, slotsOf, *pattern, t, adopt);
    if (checkAlike && pattern && byPattern)
      if (std::optional<std::string> why = differ(alike, everyInstance(), adopt))
        mismatch = adopt ? "(workspace in slot blocks) " + *why : *why;
    if (alike)
      p.layout = std::move(*alike);
    else if (pattern)
      p.layout = layoutSlots(everyInstance(), slotsOf, actionSpans, t, /*byPattern=*/false);
    else
      p.layout = layoutSlots(byFirstUse, slotsOf, actionSpans, t, byPattern, adopt);
    if (adopt && p.layout.adopted == 0) { // the blocks' layout again: nothing to place
      p.peak = std::numeric_limits<int64_t>::max();
      return p;
    }
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
  }

  /// Each item's offset: a buffer's (instance's, or all instances' for a
  /// workspace buffer) or a slot block's base; a slot block's buffers at
  /// the block's base plus their place in it.
  void writeOffsets(Placement &placed) {
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
        if (auto it = blockBase.find({placed.block, placed.shared ? -1 : k}); it != blockBase.end())
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
        buf.setOffsetAttr(b.getI64IntegerAttr(*llvm::find_if(it->second, [](int64_t o) { return o >= 0; })));
      for (int64_t &o : it->second)
        if (o < 0)
          o = *buf.getOffset();
      buf->setAttr(kSlotOffsetsAttr, b.getDenseI64ArrayAttr(it->second));
    }
    transientPeak = peak;
  }

  /// The arena and the breakdown the compile report prints (llc-dist
  /// compile; issue #6).
  void recordBreakdown() {
    const int64_t peak = transientPeak;
    // What is live at that moment: activations, communication buffers, and
    // workspace (the other scratch buffers).
    int64_t atPeak[3] = {0, 0, 0};
    forEachSegment([&](const Transient &tr, int64_t, Segment seg) {
      if (seg.first <= peakAt && peakAt <= seg.last) {
        int cls = live.communication[size_t(tr.index)] ? 1 : tr.buf.getKind() == "scratch" ? 2 : 0;
        atPeak[cls] += tr.bytes;
      }
    });
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

  ProgramOp program;
  Block &body;
  Builder b;
  const Buffers buffers;
  Liveness live;
  const bool checkAlike;
  llvm::DenseMap<StringAttr, int64_t> slotsOf;
  std::vector<ActionSpan> actionSpans;
  std::optional<SlotPattern> pattern;
  int64_t t = 0;
  llvm::DenseMap<StringAttr, BufferOp> bufferOf;
  std::map<std::string, int64_t> byKind;
  /// Per slotted buffer, its instances' offsets (-1: not yet placed).
  llvm::DenseMap<StringAttr, SmallVector<int64_t, 4>> slotOffsets;
  /// Every transient instance; with `pattern`, a slotted buffer's slot 0
  /// stands for all its slots (Transient::patternChunk).
  std::vector<Transient> byFirstUse;
  int64_t base = 0, livePeak = 0, peakAt = 0, transientPeak = 0;
  std::deque<SmallVector<Segment, 2>> expandedSegs;
  std::optional<std::string> mismatch;
};

struct PlanMemoryPass : public llcdist::plan::impl::PlanMemoryBase<PlanMemoryPass> {
  using PlanMemoryBase::PlanMemoryBase;
  void runOnOperation() override {
    if (failed(ProgramMemory(getOperation(), slotsAlike, checkSlotsAlike).run()))
      signalPassFailure();
  }
};
} // namespace
