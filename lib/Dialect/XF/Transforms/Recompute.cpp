//===- Recompute.cpp - activation recomputation ---------------------------===//
//
// Full recomputation re-runs a layer's forward right before its backward
// from the saved layer input; selective recomputation re-runs only the core
// attention inside the backward layer body. Both are rewrites of the xf
// training step, so every later pass (partitioning, pipeline stages,
// lowering, memory planning) sees the recomputation as ordinary ops.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Dialect/XF/Analysis/ModelStats.h"
#include "llcdist/Dialect/XF/IR/XFOps.h"
#include "llcdist/Dialect/XF/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallPtrSet.h"

#define DEBUG_TYPE "llcdist-recompute"

namespace llcdist::xf {
#define GEN_PASS_DEF_RECOMPUTE
#include "llcdist/Dialect/XF/Transforms/Passes.h.inc"
} // namespace llcdist::xf

using namespace mlir;
using namespace llcdist::xf;

namespace {
bool isBackwardCall(LayerOp call, SymbolTable &symbols) {
  auto fn = symbols.lookup<func::FuncOp>(call.getCallee());
  return fn && fn->hasAttr("xf.backward_of");
}

/// Full: before each backward layer call, a copy of the forward call whose
/// results it reads; the backward call then reads the copy's.
LogicalResult recomputeLayers(func::FuncOp entry, SymbolTable &symbols) {
  SmallVector<LayerOp> backwardCalls;
  entry.walk([&](LayerOp call) {
    if (isBackwardCall(call, symbols))
      backwardCalls.push_back(call);
  });
  for (LayerOp bwd : backwardCalls) {
    LayerOp fwd;
    for (Value v : bwd.getOperands())
      if (auto d = v.getDefiningOp<LayerOp>(); d && !isBackwardCall(d, symbols))
        fwd = d;
    if (!fwd)
      return bwd.emitOpError("llcdist-recompute: no forward layer call feeds this "
                             "backward call");
    OpBuilder b(bwd);
    Operation *copy = b.clone(*fwd.getOperation());
    copy->setAttr(kRecomputedAttr, b.getUnitAttr());
    for (OpOperand &use : bwd->getOpOperands())
      if (auto r = dyn_cast<OpResult>(use.get()); r && r.getOwner() == fwd.getOperation())
        use.set(copy->getResult(r.getResultNumber()));
  }
  return success();
}

/// Selective: in every backward layer body, the attention output and lse
/// that the backward reads are recomputed from its saved q, k, v.
LogicalResult recomputeAttention(ModuleOp module) {
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (!fn->hasAttr("xf.backward_of"))
      continue;
    SmallVector<AttentionGradOp> grads;
    fn.walk([&](AttentionGradOp g) { grads.push_back(g); });
    for (AttentionGradOp g : grads) {
      Value out = g.getOut(), lse = g.getLse();
      if (!isa<BlockArgument>(out) || !isa<BlockArgument>(lse) ||
          !isa<BlockArgument>(g.getQ()) || !isa<BlockArgument>(g.getK()) ||
          !isa<BlockArgument>(g.getV()))
        continue; // already recomputed, or not a saved attention
      OpBuilder b = OpBuilder::atBlockBegin(&fn.getBody().front());
      auto att = AttentionOp::create(b, g.getLoc(), out.getType(), lse.getType(), g.getQ(), g.getK(), g.getV(),
                                     g.getNumHeadsAttr(), g.getNumKvHeadsAttr(), g.getHeadDimAttr(), g.getWindowAttr(),
                                     g.getAlibiHeadsAttr());
      att->setAttr(kRecomputedAttr, b.getUnitAttr());
      out.replaceAllUsesWith(att.getResult());
      lse.replaceAllUsesWith(att.getLse());
    }
  }
  return success();
}

struct RecomputePass : public llcdist::xf::impl::RecomputeBase<RecomputePass> {
  using RecomputeBase::RecomputeBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (mode != "none" && mode != "selective" && mode != "full") {
      module.emitError("llcdist-recompute: mode '")
          << mode << "' is not none, selective or full";
      return signalPassFailure();
    }
    if (mode == "none")
      return;
    func::FuncOp entry = getTrainStep(module, "llcdist-recompute");
    if (!entry)
      return signalPassFailure();
    SymbolTable symbols(module);
    if (failed(mode == "full" ? recomputeLayers(entry, symbols) : recomputeAttention(module)))
      return signalPassFailure();
    module->setAttr("xf.recompute", StringAttr::get(module.getContext(), mode));
  }
};
} // namespace
