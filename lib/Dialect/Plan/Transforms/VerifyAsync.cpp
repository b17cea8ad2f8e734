//===- VerifyAsync.cpp - tokens and in-flight buffers of one program -------===//
//
// The static race check of asynchronous plans (docs/plan-verifier.md "Races
// of asynchronous plans"). It executes the program's step in order (the
// schedule's actions, each subroutine's kernels) and tracks the
// communication ops in flight: from a kernel with a `token` to the `wait`
// with that token. It rejects
//  - a token waited twice, a wait before its start, a token started again
//    while in flight, a token still in flight at the end of the step;
//  - an op that writes bytes an in-flight op reads or writes, or reads bytes
//    an in-flight op writes (two in-flight ops may read the same bytes).
// Bytes are the buffers' arena ranges once llcdist-plan-memory has placed
// them (so aliasing buffers conflict), else the buffers themselves. A slotted
// buffer (a pipeline chunk's, kSlotsAttr) has a range per instance, and a
// kernel touches the instance of its action's slot (kSlotOffsetsAttr).
// Every error names both ops: subroutine, kernel index, kernel, origin and
// location, and the action (and microbatch) that ran each.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Dialect/Plan/Analysis/CollectiveOrigin.h"
#include "llcdist/Dialect/Plan/Transforms/Passes.h"

#include "llcdist/runtime/PlanSchema.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"

#include <map>
#include <set>
#include <tuple>

#define DEBUG_TYPE "llcdist-verify-async"

namespace llcdist::plan {
#define GEN_PASS_DEF_VERIFYASYNC
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist::plan;
namespace schema = llcdist::rt::schema;

namespace {
/// Bytes [first, second) of the arena, or [i, i + 1) for the i-th buffer
/// when offsets are not planned yet.
using Range = std::pair<int64_t, int64_t>;

bool overlaps(ArrayRef<Range> a, ArrayRef<Range> b) {
  for (const Range &x : a)
    for (const Range &y : b)
      if (x.first < y.second && y.first < x.second)
        return true;
  return false;
}

/// What one kernel reads and writes.
struct Access {
  SmallVector<Range, 4> reads, writes;
};

/// One execution of a kernel: the kernel, the action that ran it and the
/// action's microbatch slot.
struct Run {
  KernelOp kernel;
  int64_t action = -1;
  ActionOp actionOp;
  int64_t slot = 0;
};

struct InFlight {
  Run start;
  const Access *access;
};

class StepChecker {
public:
  explicit StepChecker(ProgramOp program) : program(program) {}

  LogicalResult run() {
    Block &body = program.getBody().front();
    // A synchronous program (no kernel carries a token: no start, no wait)
    // has nothing in flight, ever: nothing to check, and no need to number
    // its buffers' instances or walk its actions.
    if (!program
             .walk([](KernelOp k) {
               return k->hasAttr(kTokenAttr) ? WalkResult::interrupt() : WalkResult::advance();
             })
             .wasInterrupted())
      return success();
    // Bytes per buffer: arena ranges when every buffer has an offset.
    bool planned = llvm::all_of(body.getOps<BufferOp>(),
                                [](BufferOp b) { return b.getOffset().has_value(); });
    int64_t index = 0;
    for (BufferOp b : body.getOps<BufferOp>()) {
      SmallVector<Range, 1> &r = ranges[b.getSymNameAttr()];
      auto slots = b->getAttrOfType<IntegerAttr>(kSlotsAttr);
      auto slotOffsets = b->getAttrOfType<DenseI64ArrayAttr>(kSlotOffsetsAttr);
      const int64_t instances = slots ? slots.getInt() : 1;
      for (int64_t k = 0; k < instances; ++k) {
        int64_t at = 0;
        if (planned)
          at = slotOffsets && k < int64_t(slotOffsets.size()) ? slotOffsets[k]
                                                              : int64_t(*b.getOffset());
        r.push_back(planned ? Range{at, at + b.getNumBytes()} : Range{index, index + 1});
        ++index;
      }
    }
    llvm::StringMap<SubroutineOp> subs;
    for (auto sub : body.getOps<SubroutineOp>())
      subs[sub.getSymName()] = sub;

    int64_t actionIndex = 0;
    for (auto sched : body.getOps<ScheduleOp>())
      for (auto action : sched.getBody().front().getOps<ActionOp>()) {
        SubroutineOp sub = subs.lookup(action.getSubroutine());
        auto slot = action->getAttrOfType<IntegerAttr>(kSlotAttr);
        if (sub)
          for (KernelOp k : sub.getBody().front().getOps<KernelOp>())
            step({k, actionIndex, action, slot ? slot.getInt() : 0});
        ++actionIndex;
      }
    for (auto &[token, f] : inFlight) {
      f.start.kernel.emitOpError("token ")
          << token << " is never waited: started by " << describe(f.start)
          << ", still in flight at the end of the step";
      failed = true;
    }
    return llvm::failure(failed);
  }

private:
  /// "subroutine @s kernel 3 'all_reduce' (origin dp_gradients) in action 5
  /// (microbatch 1)"; the location is the diagnostic's.
  std::string describe(Run r) {
    auto sub = r.kernel->getParentOfType<SubroutineOp>();
    int64_t index = 0;
    for (KernelOp k : sub.getBody().front().getOps<KernelOp>()) {
      if (k == r.kernel)
        break;
      ++index;
    }
    std::string s = "subroutine @" + sub.getSymName().str() + " kernel " +
                    std::to_string(index) + " '" + r.kernel.getKernel().str() + "'";
    if (auto origin = r.kernel->getAttrOfType<StringAttr>(kOriginAttr))
      s += " (origin " + origin.str() + ")";
    s += " in action " + std::to_string(r.action);
    if (auto mb = r.actionOp.getMicrobatch())
      s += " (microbatch " + std::to_string(int64_t(*mb)) + ")";
    if (r.slot > 0)
      s += " in slot " + std::to_string(r.slot);
    return s;
  }

  /// What kernel `k` touches when its action runs in `slot`.
  const Access &accessOf(KernelOp k, int64_t slot) {
    auto [it, inserted] = accesses.try_emplace({k.getOperation(), slot});
    if (!inserted)
      return it->second;
    Access &acc = it->second;
    auto kind = schema::parseOpKind(k.getKernel().str());
    for (NamedAttribute arg : k.getArgs()) {
      // A role the schema does not know (the op verifier refuses it) counts
      // as read and written.
      bool reads = true, writes = true;
      if (kind)
        if (int idx = schema::argIndex(*kind, arg.getName().strref()); idx >= 0) {
          schema::ArgAccess a = schema::opSpec(*kind).args[idx].access;
          reads = a != schema::ArgAccess::kWrite;
          writes = a != schema::ArgAccess::kRead;
        }
      auto note = [&](Attribute a) {
        auto it = ranges.find(cast<FlatSymbolRefAttr>(a).getAttr());
        if (it == ranges.end()) // an unknown buffer: the op verifier refuses it
          return;
        const SmallVector<Range, 1> &instances = it->second;
        // A slot past the instances is the plan loader's error, not a race.
        Range r = instances[size_t(slot) < instances.size() ? size_t(slot) : 0];
        if (reads)
          acc.reads.push_back(r);
        if (writes)
          acc.writes.push_back(r);
      };
      if (auto list = dyn_cast<ArrayAttr>(arg.getValue()))
        llvm::for_each(list, note);
      else
        note(arg.getValue());
    }
    return acc;
  }

  /// Reports a pair of runs once (a subroutine run per microbatch repeats it).
  bool firstReport(StringRef what, KernelOp a, KernelOp b) {
    return reported.insert({what.str(), a.getOperation(), b.getOperation()}).second;
  }

  void step(Run r) {
    KernelOp k = r.kernel;
    auto token = k->getAttrOfType<IntegerAttr>(kTokenAttr);
    if (k.getKernel() == kWaitKernel) {
      int64_t t = token.getInt();
      auto it = inFlight.find(t);
      if (it != inFlight.end()) {
        lastWait.insert_or_assign(t, r);
        inFlight.erase(it);
        return;
      }
      failed = true;
      auto prev = lastWait.find(t);
      if (prev == lastWait.end()) {
        if (firstReport("before-start", k, k))
          k.emitOpError("wait before start: token ")
              << t << " is not in flight at " << describe(r);
        return;
      }
      if (firstReport("double-wait", k, prev->second.kernel)) {
        auto diag = k.emitOpError("double wait: token ")
                    << t << " waited at " << describe(r) << " was already waited at "
                    << describe(prev->second);
        diag.attachNote(prev->second.kernel.getLoc()) << "the first wait";
      }
      return;
    }
    // Nothing in flight and nothing started: no race to look for, and the
    // kernel's bytes are not needed (most kernels of a step, all of a
    // synchronous plan's).
    if (inFlight.empty() && !token)
      return;
    const Access &acc = accessOf(k, r.slot);
    for (auto &[t, f] : inFlight) {
      // The same kernel again with its token in flight: a restart, reported
      // as one below (its buffers are its own).
      if (token && token.getInt() == t && f.start.kernel == k)
        continue;
      bool writesInFlight = overlaps(acc.writes, f.access->reads) ||
                            overlaps(acc.writes, f.access->writes);
      bool readsWritten = overlaps(acc.reads, f.access->writes);
      if (!writesInFlight && !readsWritten)
        continue;
      failed = true;
      if (!firstReport("race", k, f.start.kernel))
        continue;
      auto diag = k.emitOpError("race: ")
                  << describe(r) << (writesInFlight ? " writes" : " reads")
                  << " a buffer that the in-flight " << describe(f.start) << " (token " << t
                  << ") " << (writesInFlight ? "accesses" : "writes")
                  << ", before its wait";
      diag.attachNote(f.start.kernel.getLoc()) << "the in-flight op started here";
    }
    if (!token)
      return;
    int64_t t = token.getInt();
    if (auto it = inFlight.find(t); it != inFlight.end()) {
      failed = true;
      if (firstReport("restart", k, it->second.start.kernel)) {
        auto diag = k.emitOpError("token ")
                    << t << " started again while in flight: " << describe(r)
                    << " restarts the token of " << describe(it->second.start)
                    << ", not waited yet";
        diag.attachNote(it->second.start.kernel.getLoc()) << "the first start";
      }
      return;
    }
    inFlight.insert({t, {r, &acc}});
  }

  ProgramOp program;
  llvm::DenseMap<StringAttr, SmallVector<Range, 1>> ranges; // per instance
  // By kernel and slot. Node-based: an in-flight op keeps a pointer to its
  // Access while more kernels are added (a DenseMap's growth would move it).
  std::map<std::pair<Operation *, int64_t>, Access> accesses;
  std::map<int64_t, InFlight> inFlight; // by token, reported in token order
  llvm::DenseMap<int64_t, Run> lastWait;
  std::set<std::tuple<std::string, Operation *, Operation *>> reported;
  bool failed = false;
};

struct VerifyAsyncPass : public llcdist::plan::impl::VerifyAsyncBase<VerifyAsyncPass> {
  void runOnOperation() override {
    if (failed(StepChecker(getOperation()).run()))
      signalPassFailure();
  }
};
} // namespace
