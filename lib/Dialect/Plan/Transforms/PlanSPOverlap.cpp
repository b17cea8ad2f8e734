//===- PlanSPOverlap.cpp - overlap sequence parallelism's collectives -----===//
//
// Megatron-LM's --tp-comm-overlap in its bulk form (docs/plan-format.md
// "Asynchronous plans"). Under sequence parallelism every tensor-parallel
// region is entered by an all_gather of the sequence-split activation and
// left by a reduce_scatter (in the backward: the input gradient's
// reduce_scatter, and the all_gather of the layer input that the weight
// gradient needs again). A synchronous plan runs each of them between two
// kernels, with the compute idle. Here each one is started on queue "comm"
// with a token and overlapped with the kernels around it that do not depend
// on it:
//
//   - the start moves up, to just after the last kernel it depends on, and
//     the kernels it passes that are independent of it (and of the kernels
//     it depends on) move below the start. In the backward this is Megatron's
//     wgrad/dgrad overlap: the input gradient's reduce_scatter starts right
//     after the input-gradient GEMM and the weight-gradient GEMM that came
//     before it runs while it is in flight; the re-gather of a layer input
//     starts as early as the subroutine allows.
//   - the wait moves down, to just before the first kernel that reads what
//     the collective writes or writes what it touches.
//
// The window of an op only holds compute kernels, the starts of the other
// collectives of this pass (all on queue "comm", issued in program order on
// every rank of the tp group, so their order matches across ranks) and
// waits; a synchronous collective or a pipeline send/recv ends it, since two
// collectives of one group must not run concurrently on two queues. A
// start's window never crosses another start or wait upwards, so the comm
// queue keeps the collectives' program order. Buffers are symbols here (the
// pass runs before llcdist-plan-memory, which keeps in-flight buffers live
// through their waits); llcdist-verify-async checks the result on the arena.
//
// The program records what moved (plan.tp_comm_overlap: per collective kind,
// how many started, how many of them overlap at least one kernel, and how
// many kernels and GEMMs their windows hold) for the compile summary. A
// collective with nothing to overlap is still started and waited at once, so
// that no window of another crosses a synchronous collective.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Dialect/Plan/Transforms/Passes.h"

#include "llcdist/runtime/PlanSchema.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#define DEBUG_TYPE "llcdist-plan-sp-overlap"

namespace llcdist::plan {
#define GEN_PASS_DEF_PLANSPOVERLAP
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist::plan;
namespace schema = llcdist::rt::schema;

namespace {
/// The buffers a kernel reads and writes (a read-written role in both). A
/// kernel of no known kind (none reach this pass) reads and writes all.
struct Access {
  llvm::DenseSet<StringAttr> reads, writes;
};

Access accessOf(KernelOp k) {
  Access acc;
  auto kind = schema::parseOpKind(k.getKernel().str());
  for (NamedAttribute arg : k.getArgs()) {
    auto access = schema::ArgAccess::kReadWrite;
    if (kind)
      if (int idx = schema::argIndex(*kind, arg.getName().strref()); idx >= 0)
        access = schema::opSpec(*kind).args[idx].access;
    auto note = [&](Attribute a) {
      StringAttr name = cast<FlatSymbolRefAttr>(a).getAttr();
      if (access != schema::ArgAccess::kWrite)
        acc.reads.insert(name);
      if (access != schema::ArgAccess::kRead)
        acc.writes.insert(name);
    };
    if (auto list = dyn_cast<ArrayAttr>(arg.getValue()))
      llvm::for_each(list, note);
    else
      note(arg.getValue());
  }
  return acc;
}

/// Whether the two kernels must keep their order: one writes a buffer the
/// other reads or writes.
bool dependent(const Access &a, const Access &b) {
  auto meets = [](const llvm::DenseSet<StringAttr> &x, const llvm::DenseSet<StringAttr> &y) {
    return llvm::any_of(x, [&](StringAttr n) { return y.contains(n); });
  };
  return meets(a.writes, b.reads) || meets(a.writes, b.writes) || meets(b.writes, a.reads);
}

/// Sequence parallelism's collectives: the tp all_gathers and
/// reduce_scatters of activations (llcdist-lower-to-plan's, synchronous).
bool isCandidate(KernelOp k) {
  auto axis = k.getParams().getAs<StringAttr>("axis");
  auto payload = k->getAttrOfType<StringAttr>("plan.payload");
  return (k.getKernel() == "all_gather" || k.getKernel() == "reduce_scatter") && axis &&
         axis.getValue() == "tp" && payload && payload.getValue() == "activations" &&
         !k->hasAttr(kTokenAttr);
}

bool isGemm(KernelOp k) { return k.getKernel().starts_with("linear_"); }

/// What the window of one collective holds, for the report.
struct Moved {
  int64_t started = 0, overlapped = 0, kernels = 0, gemms = 0;
};

struct PlanSPOverlapPass
    : public llcdist::plan::impl::PlanSPOverlapBase<PlanSPOverlapPass> {
  using PlanSPOverlapBase::PlanSPOverlapBase;

  void runOnOperation() override {
    ProgramOp program = getOperation();
    Block &body = program.getBody().front();
    // Fresh tokens above any an earlier pass (grad buckets) started.
    int64_t nextToken = 0;
    program.walk([&](KernelOp k) {
      if (auto t = k->getAttrOfType<IntegerAttr>(kTokenAttr))
        nextToken = std::max(nextToken, t.getInt() + 1);
    });
    llvm::StringMap<Moved> moved;
    OpBuilder b(program.getContext());
    for (auto sub : body.getOps<SubroutineOp>()) {
      Block &block = sub.getBody().front();
      SmallVector<KernelOp> candidates;
      for (KernelOp k : block.getOps<KernelOp>())
        if (isCandidate(k))
          candidates.push_back(k);
      // All of them go on queue comm first, so that a window may hold the
      // later ones (they are no synchronous collectives any more).
      llvm::DenseSet<Operation *> onComm;
      for (KernelOp c : candidates) {
        c->setAttr(kQueueAttr, b.getStringAttr("comm"));
        c->setAttr(kTokenAttr, b.getI64IntegerAttr(nextToken++));
        onComm.insert(c);
      }
      auto isWait = [](Operation *op) {
        auto k = dyn_cast<KernelOp>(op);
        return k && k.getKernel() == kWaitKernel;
      };
      // A compute kernel (not a collective, not a wait).
      auto isCompute = [&](Operation *op) {
        auto k = dyn_cast<KernelOp>(op);
        return k && !isCommunicationKernel(k.getKernel()) && !isWait(op);
      };
      for (KernelOp c : candidates) {
        Access ca = accessOf(c);
        // 1. The start: up past the kernels since the last start or wait
        // (or synchronous collective); those independent of it and of every
        // kernel kept above it move below it, in their order.
        SmallVector<Access> kept{ca};
        SmallVector<Operation *> below; // in reverse order
        for (Operation *p = c->getPrevNode(); p && isCompute(p); p = p->getPrevNode()) {
          Access pa = accessOf(cast<KernelOp>(p));
          if (llvm::any_of(kept, [&](const Access &k) { return dependent(pa, k); }))
            kept.push_back(std::move(pa));
          else
            below.push_back(p);
        }
        for (Operation *p : below) // reverse order, each moved right after c
          p->moveAfter(c);
        // 2. The wait: down past the kernels independent of it, the other
        // starts of this pass whose buffers it does not share, and waits.
        Operation *end = c->getNextNode();
        for (; end && !end->hasTrait<OpTrait::IsTerminator>(); end = end->getNextNode()) {
          auto k = dyn_cast<KernelOp>(end);
          if (!k || !(isCompute(k) || isWait(k) || onComm.contains(k)))
            break;
          if (!isWait(k) && dependent(accessOf(k), ca))
            break;
        }
        if (end)
          b.setInsertionPoint(end);
        else
          b.setInsertionPointToEnd(&block);
        auto w = KernelOp::create(b, c.getLoc(), kWaitKernel, b.getDictionaryAttr({}),
                                  b.getDictionaryAttr({}));
        w->setAttr(kTokenAttr, c->getAttr(kTokenAttr));
      }
      // 3. What each window holds, once all have moved (a later start's
      // reordering moves kernels only within the windows around it).
      llvm::DenseMap<int64_t, Operation *> open;
      llvm::DenseMap<Operation *, std::pair<int64_t, int64_t>> held; // kernels, GEMMs
      for (Operation &op : block) {
        auto k = dyn_cast<KernelOp>(&op);
        if (!k)
          continue;
        auto token = k->getAttrOfType<IntegerAttr>(kTokenAttr);
        if (onComm.contains(k)) {
          open[token.getInt()] = k;
          held[k];
        } else if (isWait(k) && token) {
          open.erase(token.getInt());
        } else if (isCompute(k)) {
          for (auto &[t, c] : open) {
            ++held[c].first;
            held[c].second += isGemm(k);
          }
        }
      }
      for (KernelOp c : candidates) {
        auto [kernels, gemms] = held.lookup(c);
        Moved &m = moved[c.getKernel()];
        ++m.started;
        m.overlapped += kernels > 0;
        m.kernels += kernels;
        m.gemms += gemms;
      }
    }
    if (moved.empty())
      return;

    MLIRContext *ctx = program.getContext();
    SmallVector<Attribute> queues;
    if (auto q = program->getAttrOfType<ArrayAttr>(kQueuesAttr))
      queues.assign(q.begin(), q.end());
    else
      queues.push_back(StringAttr::get(ctx, kComputeQueue));
    if (llvm::none_of(queues, [](Attribute q) { return cast<StringAttr>(q).getValue() == "comm"; }))
      queues.push_back(StringAttr::get(ctx, "comm"));
    program->setAttr(kQueuesAttr, ArrayAttr::get(ctx, queues));
    SmallVector<NamedAttribute> report;
    for (StringRef kind : {"all_gather", "reduce_scatter"})
      if (auto it = moved.find(kind); it != moved.end())
        report.push_back(b.getNamedAttr(
            kind, b.getDictionaryAttr(
                      {b.getNamedAttr("started", b.getI64IntegerAttr(it->second.started)),
                       b.getNamedAttr("overlapped", b.getI64IntegerAttr(it->second.overlapped)),
                       b.getNamedAttr("kernels", b.getI64IntegerAttr(it->second.kernels)),
                       b.getNamedAttr("gemms", b.getI64IntegerAttr(it->second.gemms))})));
    program->setAttr(kTpCommOverlapAttr, b.getDictionaryAttr(report));
  }
};
} // namespace
