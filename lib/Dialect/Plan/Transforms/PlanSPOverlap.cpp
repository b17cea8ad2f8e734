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
// on it (OverlapWindows.h):
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
// collectives of one group must not run concurrently on two queues. A start
// never moves up past another start or wait, so the comm queue keeps the
// collectives' program order. Buffers are symbols here (the
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
#include "OverlapWindows.h"

#include "llcdist/Dialect/Plan/Transforms/Passes.h"
#include "llcdist/Dialect/Plan/Analysis/CollectiveOrigin.h"

#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "llcdist-plan-sp-overlap"

namespace llcdist::plan {
#define GEN_PASS_DEF_PLANSPOVERLAP
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist::plan;

namespace {
/// Sequence parallelism's collectives: the tp all_gathers and
/// reduce_scatters of activations (llcdist-lower-to-plan's, synchronous).
bool isCandidate(KernelOp k) {
  auto axis = k.getParams().getAs<StringAttr>("axis");
  return axis && axis.getValue() == "tp" && movesTpActivations(k, k.getKernel()) && !k->hasAttr(kTokenAttr);
}

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
    int64_t nextToken = overlap::firstFreeToken(program);
    llvm::StringMap<Moved> moved;
    for (auto sub : body.getOps<SubroutineOp>()) {
      Block &block = sub.getBody().front();
      SmallVector<KernelOp> candidates;
      for (KernelOp k : block.getOps<KernelOp>())
        if (isCandidate(k))
          candidates.push_back(k);
      SmallVector<Window> windows =
          overlapInBlock(block, candidates, nextToken, /*crossOtherStarts=*/true);
      for (auto [c, w] : llvm::zip_equal(candidates, windows)) {
        Moved &m = moved[c.getKernel()];
        ++m.started;
        m.overlapped += w.kernels > 0;
        m.kernels += w.kernels;
        m.gemms += w.gemms;
      }
    }
    if (moved.empty())
      return;

    overlap::addQueue(program, "comm");
    OpBuilder b(program.getContext());
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
