//===- XFAutodiff.cpp - each forward op's backward, next to the op --------===//
//
// DifferentiableOpInterface: the reverse-mode rule of every forward op that
// needs nothing but its own operands (llcdist-autodiff keeps the two that need
// the pass's context: the loss, seeded with its scale, and layer calls, which
// call their backward bodies). A rule reads forward values through
// `grads.fwd` and hands each operand's gradient to `grads.addGrad`; the order
// in which it creates ops is the order of the backward graph.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Dialect/XF/IR/XFOps.h"

using namespace mlir;
using namespace llcdist::xf;

#include "llcdist/Dialect/XF/IR/XFInterfaces.cpp.inc"

namespace {
RankedTensorType f32Tensor(MLIRContext *ctx, ArrayRef<int64_t> dims) {
  return RankedTensorType::get(dims, Float32Type::get(ctx));
}

/// The rows of a [..., H] value: the product of its leading dimensions.
int64_t rows(Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  int64_t n = 1;
  for (int64_t d : t.getShape().drop_back())
    n *= d;
  return n;
}
} // namespace

//===----------------------------------------------------------------------===//
// What a backward reads beyond the operands
//===----------------------------------------------------------------------===//

Operation *LayerNormOp::buildWithSavedStatistics(OpBuilder &b) {
  if (getStats())
    return nullptr;
  return LayerNormOp::create(b, getLoc(), getResult().getType(), f32Tensor(getContext(), {2, rows(getInput())}),
                             getInput(), getWeight(), getBias(), getEpsAttr());
}

Operation *RMSNormOp::buildWithSavedStatistics(OpBuilder &b) {
  if (getStats())
    return nullptr;
  return RMSNormOp::create(b, getLoc(), getResult().getType(), f32Tensor(getContext(), {rows(getInput())}), getInput(),
                           getWeight(), getEpsAttr(), getWeightOffsetAttr());
}

Operation *AttentionOp::buildWithSavedStatistics(OpBuilder &b) {
  if (getLse())
    return nullptr;
  auto q = cast<RankedTensorType>(getQ().getType());
  return AttentionOp::create(b, getLoc(), getResult().getType(),
                             f32Tensor(getContext(), {q.getDimSize(0), int64_t(getNumHeads()), q.getDimSize(1)}),
                             getQ(), getK(), getV(), getNumHeadsAttr(), getNumKvHeadsAttr(), getHeadDimAttr(),
                             getWindowAttr(), getAlibiHeadsAttr());
}

//===----------------------------------------------------------------------===//
// The rules
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::buildBackward(OpBuilder &b, GradientSink &grads, ArrayRef<Value> dys) {
  grads.addGrad(getTable(), EmbeddingGradOp::create(b, getLoc(), getTable().getType(), grads.fwd(getIds()), dys[0],
                                                    getScaleAttr(), getPaddingIdxAttr()));
  return success();
}

LogicalResult AddPositionEmbeddingOp::buildBackward(OpBuilder &b, GradientSink &grads, ArrayRef<Value> dys) {
  grads.addGrad(getInput(), dys[0]);
  grads.addGrad(getTable(),
                AddPositionEmbeddingGradOp::create(b, getLoc(), getTable().getType(), dys[0], getOffsetAttr()));
  return success();
}

LogicalResult LayerNormOp::buildBackward(OpBuilder &b, GradientSink &grads, ArrayRef<Value> dys) {
  Value dy = dys[0], x = grads.fwd(getInput()), st = grads.fwd(getStats());
  if (getWeight()) { // without an affine transform there is no parameter; MPT's has no bias
    auto params = LayerNormGradParamsOp::create(b, getLoc(), getWeight().getType(),
                                                getBias() ? getBias().getType() : Type(), dy, x, st);
    grads.addGrad(getWeight(), params.getDweight());
    if (getBias())
      grads.addGrad(getBias(), params.getDbias());
  }
  Value w = getWeight() ? grads.fwd(getWeight()) : Value();
  grads.addGrad(getInput(), LayerNormGradInputOp::create(b, getLoc(), x.getType(), dy, x, w, st));
  return success();
}

LogicalResult RMSNormOp::buildBackward(OpBuilder &b, GradientSink &grads, ArrayRef<Value> dys) {
  Value dy = dys[0], x = grads.fwd(getInput()), st = grads.fwd(getStats());
  grads.addGrad(getWeight(), RMSNormGradWeightOp::create(b, getLoc(), getWeight().getType(), dy, x, st));
  // d(c + w)/dw = 1: the weight's gradient does not see the offset.
  grads.addGrad(getInput(), RMSNormGradInputOp::create(b, getLoc(), x.getType(), dy, x, grads.fwd(getWeight()), st,
                                                       getWeightOffsetAttr()));
  return success();
}

LogicalResult LinearOp::buildBackward(OpBuilder &b, GradientSink &grads, ArrayRef<Value> dys) {
  // dW (and db) first, then dX: the order a zero-bubble schedule later
  // splits apart.
  Value dy = dys[0];
  grads.addGrad(getWeight(), LinearGradWeightOp::create(b, getLoc(), getWeight().getType(), getLayoutAttr(), dy,
                                                        grads.fwd(getInput())));
  if (getBias())
    grads.addGrad(getBias(), LinearGradBiasOp::create(b, getLoc(), getBias().getType(), dy));
  grads.addGrad(getInput(), LinearGradInputOp::create(b, getLoc(), getInput().getType(), getLayoutAttr(), dy,
                                                      grads.fwd(getWeight())));
  return success();
}

LogicalResult SplitOp::buildBackward(OpBuilder &b, GradientSink &grads, ArrayRef<Value> dys) {
  for (auto [r, d] : llvm::zip(getResults(), dys))
    if (!d)
      return emitOpError("autodiff: result #")
             << cast<OpResult>(r).getResultNumber() << " of a split is unused; drop it from the graph";
  grads.addGrad(getInput(), ConcatOp::create(b, getLoc(), getInput().getType(), dys, getGroupsAttr()));
  return success();
}

LogicalResult RopeOp::buildBackward(OpBuilder &b, GradientSink &grads, ArrayRef<Value> dys) {
  grads.addGrad(getInput(), RopeGradOp::create(b, getLoc(), getType(), dys[0], getHeadDimAttr(), getThetaAttr(),
                                               getScalingAttr(), getRotaryDimAttr(), getInterleavedAttr()));
  return success();
}

LogicalResult AttentionOp::buildBackward(OpBuilder &b, GradientSink &grads, ArrayRef<Value> dys) {
  auto g = AttentionGradOp::create(b, getLoc(), getQ().getType(), getK().getType(), getV().getType(), dys[0],
                                   grads.fwd(getQ()), grads.fwd(getK()), grads.fwd(getV()), grads.fwd(getResult()),
                                   grads.fwd(getLse()), getNumHeadsAttr(), getNumKvHeadsAttr(), getHeadDimAttr(),
                                   getWindowAttr(), getAlibiHeadsAttr());
  grads.addGrad(getQ(), g.getDq());
  grads.addGrad(getK(), g.getDk());
  grads.addGrad(getV(), g.getDv());
  return success();
}

LogicalResult GeluTanhOp::buildBackward(OpBuilder &b, GradientSink &grads, ArrayRef<Value> dys) {
  grads.addGrad(getInput(), GeluTanhGradOp::create(b, getLoc(), getType(), dys[0], grads.fwd(getInput())));
  return success();
}

LogicalResult ReluOp::buildBackward(OpBuilder &b, GradientSink &grads, ArrayRef<Value> dys) {
  grads.addGrad(getInput(), ReluGradOp::create(b, getLoc(), getType(), dys[0], grads.fwd(getInput())));
  return success();
}

LogicalResult ScaleOp::buildBackward(OpBuilder &b, GradientSink &grads, ArrayRef<Value> dys) {
  grads.addGrad(getInput(), ScaleOp::create(b, getLoc(), getType(), dys[0], getFactorAttr()));
  return success();
}

LogicalResult GeluErfOp::buildBackward(OpBuilder &b, GradientSink &grads, ArrayRef<Value> dys) {
  grads.addGrad(getInput(), GeluErfGradOp::create(b, getLoc(), getType(), dys[0], grads.fwd(getInput())));
  return success();
}

LogicalResult ClampOp::buildBackward(OpBuilder &b, GradientSink &grads, ArrayRef<Value> dys) {
  grads.addGrad(getInput(), ClampGradOp::create(b, getLoc(), getType(), dys[0], grads.fwd(getInput()), getLimitAttr()));
  return success();
}

LogicalResult SwiGLUOp::buildBackward(OpBuilder &b, GradientSink &grads, ArrayRef<Value> dys) {
  auto g = SwiGLUGradOp::create(b, getLoc(), getType(), getType(), dys[0], grads.fwd(getGate()), grads.fwd(getUp()),
                                getActivationAttr());
  grads.addGrad(getGate(), g.getDgate());
  grads.addGrad(getUp(), g.getDup());
  return success();
}

LogicalResult AddOp::buildBackward(OpBuilder &, GradientSink &grads, ArrayRef<Value> dys) {
  grads.addGrad(getLhs(), dys[0]);
  grads.addGrad(getRhs(), dys[0]);
  return success();
}

LogicalResult MoeRouteOp::buildBackward(OpBuilder &b, GradientSink &grads, ArrayRef<Value> dys) {
  // The experts (integers) carry no gradient; the router's comes through
  // the weights, the selection held constant.
  if (!dys[0])
    return success();
  grads.addGrad(getLogits(), MoeRouteGradOp::create(b, getLoc(), getLogits().getType(), grads.fwd(getLogits()),
                                                    grads.fwd(getExperts()), dys[0], getNormalizeAttr()));
  return success();
}

LogicalResult MoeRouterStatsOp::buildBackward(OpBuilder &b, GradientSink &grads, ArrayRef<Value> dys) {
  // The counts (integers) carry no gradient; the probabilities' sums pass
  // theirs on to the routers before (the sum's other term) and to this
  // router's logits through the softmax.
  if (!dys[1])
    return success();
  grads.addGrad(getProbs(), dys[1]);
  grads.addGrad(getLogits(),
                MoeRouterStatsGradOp::create(b, getLoc(), getLogits().getType(), grads.fwd(getLogits()), dys[1]));
  return success();
}

LogicalResult ZerosOp::buildBackward(OpBuilder &, GradientSink &, ArrayRef<Value>) {
  return success(); // a constant: its gradient goes nowhere
}

LogicalResult MoePermuteOp::buildBackward(OpBuilder &b, GradientSink &grads, ArrayRef<Value> dys) {
  // Each token's gradient: the sum of its rows' (an unweighted unpermute).
  if (!dys[0])
    return success();
  grads.addGrad(getInput(), MoeUnpermuteOp::create(b, getLoc(), getInput().getType(), dys[0], grads.fwd(getSlots()),
                                                   /*weights=*/Value()));
  return success();
}

LogicalResult MoeUnpermuteOp::buildBackward(OpBuilder &b, GradientSink &grads, ArrayRef<Value> dys) {
  if (!getWeights())
    return emitOpError("autodiff: an unweighted moe_unpermute (xf.moe_permute's backward) has no backward of its own");
  auto g = MoeUnpermuteGradOp::create(b, getLoc(), getInput().getType(), getWeights().getType(), dys[0],
                                      grads.fwd(getInput()), grads.fwd(getSlots()), grads.fwd(getWeights()));
  grads.addGrad(getInput(), g.getDinput());
  grads.addGrad(getWeights(), g.getDweights());
  return success();
}

LogicalResult GroupedLinearOp::buildBackward(OpBuilder &b, GradientSink &grads, ArrayRef<Value> dys) {
  // dW first, then dX, as xf.linear.
  Value dy = dys[0], sizes = grads.fwd(getGroupSizes());
  grads.addGrad(getWeight(), GroupedLinearGradWeightOp::create(b, getLoc(), getWeight().getType(), dy,
                                                               grads.fwd(getInput()), sizes));
  grads.addGrad(getInput(),
                GroupedLinearGradInputOp::create(b, getLoc(), getInput().getType(), dy, grads.fwd(getWeight()), sizes));
  return success();
}

LogicalResult SigmoidGateOp::buildBackward(OpBuilder &b, GradientSink &grads, ArrayRef<Value> dys) {
  auto g = SigmoidGateGradOp::create(b, getLoc(), getGate().getType(), getInput().getType(), dys[0],
                                     grads.fwd(getGate()), grads.fwd(getInput()));
  grads.addGrad(getGate(), g.getDgate());
  grads.addGrad(getInput(), g.getDinput());
  return success();
}
