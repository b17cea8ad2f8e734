//===- PlanP2PScatterGather.cpp - pipeline sends of 1/tp, all-gathered ----===//
//
// Megatron-LM's scatter/gather of pipeline tensors (Narayanan et al. 2021,
// §4.1): under tensor parallelism without sequence parallelism, every tp
// rank of a stage holds the same activation (and the same activation
// gradient) at the stage's boundary, and each sends all of it to its peer
// in the next stage: tp copies of the same bytes over the slower inter-node
// links. Here each sends its 1/tp slice (shard_slice over tp) and the
// receiving ranks all-gather the slices over tp, on the fast intra-node
// links. The values each rank computes are unchanged: the gathered buffer is
// the buffer that was sent.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Dialect/Plan/Analysis/CollectiveOrigin.h"
#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/Dialect/Plan/Transforms/Passes.h"
#include "llcdist/Dialect/XF/Analysis/ModelStats.h"

#include "KernelArgs.h"

#include "mlir/IR/Builders.h"

namespace llcdist::plan {
#define GEN_PASS_DEF_PLANP2PSCATTERGATHER
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist;

namespace {

struct PlanP2PScatterGatherPass : public plan::impl::PlanP2PScatterGatherBase<PlanP2PScatterGatherPass> {
  using PlanP2PScatterGatherBase::PlanP2PScatterGatherBase;

  void runOnOperation() override {
    plan::ProgramOp program = getOperation();
    int64_t tp = 1;
    if (auto module = program->getParentOfType<ModuleOp>())
      tp = xf::meshDegrees(module).value_or(xf::MeshDegrees{}).tp;
    if (tp < 2)
      return; // every rank of a stage sends its own activation already
    // Under sequence parallelism a stage's tp ranks hold different slices of
    // the sequence at its boundary: slicing them again and gathering would
    // mix them. (Their sends are 1/tp already.)
    WalkResult seq = program.walk([&](plan::KernelOp k) {
      return plan::collectiveOrigin(k) == xf::CollectiveOrigin::SequenceParallel ? WalkResult::interrupt()
                                                                                 : WalkResult::advance();
    });
    if (seq.wasInterrupted()) {
      program.emitError("llcdist-plan-p2p-scatter-gather: the pipeline's sends are sliced over tp only where "
                        "every tp rank holds the same activation; under sequence parallelism they hold "
                        "different slices of the sequence (and send 1/tp already): leave "
                        "--scatter-gather-p2p off with --sequence-parallel");
      return signalPassFailure();
    }

    plan::NewBuffers newBuffers(program);
    int64_t sends = 0, recvs = 0;
    SmallVector<plan::KernelOp> transfers;
    program.walk([&](plan::KernelOp k) {
      if (plan::isSyncPipelineTransfer(k))
        transfers.push_back(k);
    });
    // One slice per buffer: a buffer sent to several chunks, or received in
    // several subroutines (a backward and its last microbatch's clone),
    // shares it.
    llvm::DenseMap<Attribute, plan::BufferOp> sliceOf;
    for (plan::KernelOp k : transfers) {
      const bool send = k.getKernel() == "send";
      StringRef role = send ? "x" : "y";
      auto ref = dyn_cast_or_null<FlatSymbolRefAttr>(k.getArgs().get(role));
      auto buf = ref ? program.lookupSymbol<plan::BufferOp>(ref.getAttr()) : plan::BufferOp();
      if (!buf)
        continue;
      RankedTensorType type = buf.getTensorType();
      const int64_t n = type.getNumElements();
      if (n % tp != 0)
        continue; // both sides see the same size and keep the whole transfer
      auto payload = k->getAttrOfType<StringAttr>("plan.payload");
      if (payload && payload.getValue().starts_with("router statistics"))
        continue; // [E] per microbatch (the MoE load-balancing loss's), i32 counts among them: kept whole
      // The slice: one tp rank's n/tp elements, with the buffer's microbatch slots.
      plan::BufferOp &slice = sliceOf[ref];
      if (!slice) {
        OpBuilder bb(buf);
        bb.setInsertionPointAfter(buf);
        slice = newBuffers.create(bb, buf.getLoc(), RankedTensorType::get({n / tp}, type.getElementType()),
                                  (buf.getName() + ":tp-slice").str(), "activation");
        if (Attribute slots = buf->getAttr(plan::kSlotsAttr))
          slice->setAttr(plan::kSlotsAttr, slots);
      }
      auto sliceRef = FlatSymbolRefAttr::get(slice.getSymNameAttr());
      OpBuilder b(k);
      DictionaryAttr params = b.getDictionaryAttr({b.getNamedAttr("axis", b.getStringAttr("tp")),
                                                   b.getNamedAttr("outer", b.getI64IntegerAttr(1)),
                                                   b.getNamedAttr("inner", b.getI64IntegerAttr(n / tp))});
      if (send) {
        plan::KernelOp::create(b, k.getLoc(), "shard_slice",
                               b.getDictionaryAttr({b.getNamedAttr("x", ref), b.getNamedAttr("y", sliceRef)}), params);
        k.setArgsAttr(b.getDictionaryAttr({b.getNamedAttr("x", sliceRef)}));
        ++sends;
        continue;
      }
      k.setArgsAttr(b.getDictionaryAttr({b.getNamedAttr("y", sliceRef)}));
      b.setInsertionPointAfter(k);
      auto gather = plan::KernelOp::create(
          b,
          NameLoc::get(b.getStringAttr("pipeline scatter/gather: the slices each tp rank received, gathered"),
                       k.getLoc()),
          "all_gather", b.getDictionaryAttr({b.getNamedAttr("x", sliceRef), b.getNamedAttr("y", ref)}), params);
      if (Attribute payload = k->getAttr("plan.payload"))
        gather->setAttr("plan.payload", payload);
      plan::setCollectiveOrigin(gather, xf::CollectiveOrigin::Pipeline);
      ++recvs;
    }
    if (sends + recvs) {
      Builder b(program.getContext());
      program->setAttr(plan::kP2PScatterGatherAttr,
                       b.getDictionaryAttr({b.getNamedAttr("sends", b.getI64IntegerAttr(sends)),
                                            b.getNamedAttr("recvs", b.getI64IntegerAttr(recvs))}));
    }
  }
};

} // namespace
