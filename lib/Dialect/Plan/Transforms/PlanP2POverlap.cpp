//===- PlanP2POverlap.cpp - overlap pipeline sends and receives -----------===//
//
// Megatron-LM's overlap_p2p_comm within an action (docs/plan-format.md
// "Asynchronous plans"). A synchronous pipeline stage sends its output (the
// forward's activation, the backward's input gradient) and then computes
// nothing until the peer has taken it, and receives its input before any
// kernel runs. Here every pipeline send and recv is started on queue "comm"
// with a token (OverlapWindows.h): a send starts right after the last write
// of its payload, the kernels before it that do not feed the payload (the
// backward's weight gradients, the parameter-gradient kernels of the layers
// below the sent gradient) move below the start and run while it is in
// flight, and it is waited before the payload is next written or at the end
// of the subroutine; a recv starts as early as the subroutine allows and is
// waited just before the first kernel that reads its buffer.
//
// No start moves across another communication op, so every rank issues its
// communication in the synchronous plan's order: the cross-rank verifier,
// which treats a start as blocking, checks exactly the order the synchronous
// plan had, and the runtime, where a start does not block the compute, only
// waits later than the synchronous plan would have. Tokens do not cross
// actions: posting a recv during the previous action is not done yet.
//
//===----------------------------------------------------------------------===//
#include "OverlapWindows.h"

#include "llcdist/Dialect/Plan/Analysis/CollectiveOrigin.h"
#include "llcdist/Dialect/Plan/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "llcdist-plan-p2p-overlap"

namespace llcdist::plan {
#define GEN_PASS_DEF_PLANP2POVERLAP
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist::plan;

namespace {

struct PlanP2POverlapPass : public llcdist::plan::impl::PlanP2POverlapBase<PlanP2POverlapPass> {
  using PlanP2POverlapBase::PlanP2POverlapBase;

  void runOnOperation() override {
    overlapSelected(getOperation(), isSyncPipelineTransfer, /*crossOtherStarts=*/false, kP2POverlapAttr);
  }
};
} // namespace
