//===- PlanCpRingOverlap.cpp - overlap the ring's transfers ---------------===//
//
// Context parallelism's ring attention (--cp-impl ring) passes each k/v
// block to the next cp rank while the current block's attention runs
// (Megatron's p2p context parallelism; docs/plan-format.md "Asynchronous
// plans"). The lowering emits the ring synchronously: at each step the
// send of the block held and the recv of the next, then that block's
// attention. Here every ring `send` and `recv` (plan.origin
// "context_parallel") is started on queue "comm" with a token
// (OverlapWindows.h): the next block's transfer starts as soon as the block
// it sends has arrived, before the current block's attention, and its recv
// is waited just before the kernel that reads it. A wait moves past the
// other ring transfers' starts whose buffers it does not share, so the k and
// v (and in the backward dk and dv) transfers of a step are in flight
// together. Starts never cross another communication op, so each rank
// issues its ring in the synchronous order.
//
//===----------------------------------------------------------------------===//
#include "OverlapWindows.h"

#include "llcdist/Dialect/Plan/Analysis/CollectiveOrigin.h"
#include "llcdist/Dialect/Plan/Transforms/Passes.h"

namespace llcdist::plan {
#define GEN_PASS_DEF_PLANCPRINGOVERLAP
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist::plan;

namespace {

bool isSyncRingTransfer(KernelOp k) {
  return (k.getKernel() == "send" || k.getKernel() == "recv") &&
         collectiveOrigin(k) == llcdist::xf::CollectiveOrigin::ContextParallel && !k->hasAttr(kTokenAttr);
}

struct PlanCpRingOverlapPass : public llcdist::plan::impl::PlanCpRingOverlapBase<PlanCpRingOverlapPass> {
  using PlanCpRingOverlapBase::PlanCpRingOverlapBase;

  void runOnOperation() override {
    overlapSelected(getOperation(), isSyncRingTransfer, /*crossOtherStarts=*/true, kCpRingOverlapAttr);
  }
};
} // namespace
