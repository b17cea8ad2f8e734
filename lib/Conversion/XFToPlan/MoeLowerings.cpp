//===- MoeLowerings.cpp - the mixture of experts' plan kernels ------------===//
//
// The PlanLoweringOpInterface rules of the mixture-of-experts ops (the router,
// the permutation and the experts' grouped GEMMs, Qwen2-MoE's shared-expert
// gate, the load-balancing loss), as OpLowerings.cpp's: each defines its
// results' buffers and emits its plan.kernel calls.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"
#include "LoweringModels.h"

#include "llcdist/Dialect/XF/Analysis/ModelStats.h"

using namespace mlir;
using namespace llcdist;
using namespace llcdist::xf;
using namespace llcdist::xftoplan;

namespace {
/// Tokens and experts of a router's [..., E] logits.
std::pair<int64_t, int64_t> tokensAndExperts(Value logits) {
  int64_t e = lastDim(logits);
  return {numel(logits) / e, e};
}
} // namespace

template <> LogicalResult OpLowering::lower<MoeRouteOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto r = cast<MoeRouteOp>(op);
  auto [T, E] = tokensAndExperts(r.getLogits());
  Buf w = def(s, r.getWeights(), op, ".weights");
  Buf e = def(s, r.getExperts(), op, ".experts");
  SmallVector<NamedAttribute> args{arg("logits", use(s, r.getLogits())), arg("weights", w), arg("experts", e)};
  SmallVector<NamedAttribute> attrs{i64("T", T), i64("E", E), i64("k", r.getTopK()),
                                    flag("normalize", r.getNormalize())};
  kernel("moe_route", args, attrs, loc);
  return success();
}

template <> LogicalResult OpLowering::lower<MoePermuteOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto p = cast<MoePermuteOp>(op);
  Buf xp = def(s, p.getResult(), op);
  Buf slots = def(s, p.getSlots(), op, ".slots");
  Buf sizes = def(s, p.getGroupSizes(), op, ".group_sizes");
  kernel("moe_permute",
         {arg("x", use(s, p.getInput())), arg("experts", use(s, p.getExperts())), arg("xp", xp), arg("slots", slots),
          arg("group_sizes", sizes)},
         withOptional("capacity", p.getCapacity(),
                      {i64("T", numel(p.getInput()) / lastDim(p.getInput())), i64("H", lastDim(p.getInput())),
                       i64("E", numel(p.getGroupSizes())), i64("k", lastDim(p.getExperts()))}),
         loc);
  return success();
}

/// moe_unpermute(_bwd)'s T, H, k, and N where the rows are not T·k (a
/// capacity: experts·capacity rows, some slots dropped).
SmallVector<NamedAttribute> OpLowering::unpermuteAttrs(Value rows, Value slots) {
  const int64_t k = lastDim(slots), T = numel(slots) / k, N = dim(rows, 0);
  SmallVector<NamedAttribute> attrs{i64("T", T), i64("H", lastDim(rows)), i64("k", k)};
  if (N != T * k)
    attrs.push_back(i64("N", N));
  return attrs;
}

template <> LogicalResult OpLowering::lower<MoeUnpermuteOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto u = cast<MoeUnpermuteOp>(op);
  Buf y = def(s, u.getResult(), op);
  SmallVector<NamedAttribute> args{arg("xp", use(s, u.getInput())), arg("slots", use(s, u.getSlots())), arg("y", y)};
  if (u.getWeights())
    args.push_back(arg("weights", use(s, u.getWeights())));
  kernel("moe_unpermute", args, unpermuteAttrs(u.getInput(), u.getSlots()), loc);
  return success();
}

template <> LogicalResult OpLowering::lower<GroupedLinearOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<GroupedLinearOp>(op);
  Buf y = def(s, g.getResult(), op);
  kernel("grouped_linear_fwd",
         {arg("x", use(s, g.getInput())), arg("w", use(s, g.getWeight())),
          arg("group_sizes", use(s, g.getGroupSizes())), arg("y", y)},
         {i64("N", dim(g.getInput(), 0)), i64("K", dim(g.getInput(), 1)), i64("O", dim(g.getWeight(), 1)),
          i64("E", dim(g.getWeight(), 0))},
         loc);
  return success();
}

template <> LogicalResult OpLowering::lower<SigmoidGateOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<SigmoidGateOp>(op);
  Buf y = def(s, g.getResult(), op);
  kernel("sigmoid_gate_fwd", {arg("gate", use(s, g.getGate())), arg("x", use(s, g.getInput())), arg("y", y)},
         {i64("T", numel(g.getGate())), i64("H", lastDim(g.getInput()))}, loc);
  return success();
}

template <> LogicalResult OpLowering::lower<MoeRouteGradOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<MoeRouteGradOp>(op);
  auto [T, E] = tokensAndExperts(g.getLogits());
  Buf d = def(s, g.getResult(), op);
  SmallVector<NamedAttribute> args{arg("logits", use(s, g.getLogits())), arg("experts", use(s, g.getExperts())),
                                   arg("dweights", use(s, g.getDweights())), arg("dlogits", d)};
  SmallVector<NamedAttribute> attrs{i64("T", T), i64("E", E), i64("k", lastDim(g.getExperts())),
                                    flag("normalize", g.getNormalize())};
  kernel("moe_route_bwd", args, attrs, loc);
  return success();
}

template <> LogicalResult OpLowering::lower<MoeUnpermuteGradOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<MoeUnpermuteGradOp>(op);
  Buf dxp = def(s, g.getDinput(), op, ".dinput");
  Buf dw = def(s, g.getDweights(), op, ".dweights");
  kernel("moe_unpermute_bwd",
         {arg("dy", use(s, g.getDy())), arg("xp", use(s, g.getInput())), arg("slots", use(s, g.getSlots())),
          arg("weights", use(s, g.getWeights())), arg("dxp", dxp), arg("dweights", dw)},
         unpermuteAttrs(g.getInput(), g.getSlots()), loc);
  return success();
}

template <>
LogicalResult OpLowering::lower<GroupedLinearGradInputOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<GroupedLinearGradInputOp>(op);
  Buf dx = def(s, g.getResult(), op);
  kernel("grouped_linear_bwd_input",
         {arg("dy", use(s, g.getDy())), arg("w", use(s, g.getWeight())), arg("group_sizes", use(s, g.getGroupSizes())),
          arg("dx", dx)},
         {i64("N", dim(g.getDy(), 0)), i64("K", dim(g.getResult(), 1)), i64("O", dim(g.getDy(), 1)),
          i64("E", dim(g.getWeight(), 0))},
         loc);
  return success();
}

namespace {
template <> constexpr bool kWritesParameterGradients<GroupedLinearGradWeightOp> = true;
} // namespace
template <>
LogicalResult OpLowering::lower<GroupedLinearGradWeightOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<GroupedLinearGradWeightOp>(op);
  auto [dw, acc] = gradTarget(s, g.getResult(), op);
  kernel("grouped_linear_bwd_weight",
         {arg("dy", use(s, g.getDy())), arg("x", use(s, g.getInput())), arg("group_sizes", use(s, g.getGroupSizes())),
          arg("dw", dw)},
         {i64("N", dim(g.getDy(), 0)), i64("K", dim(g.getInput(), 1)), i64("O", dim(g.getDy(), 1)),
          i64("E", dim(g.getResult(), 0)), flag("accumulate", acc)},
         loc);
  return success();
}

template <> LogicalResult OpLowering::lower<SigmoidGateGradOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<SigmoidGateGradOp>(op);
  Buf dgate = def(s, g.getDgate(), op, ".dgate");
  Buf dx = def(s, g.getDinput(), op, ".dinput");
  kernel("sigmoid_gate_bwd",
         {arg("dy", use(s, g.getDy())), arg("gate", use(s, g.getGate())), arg("x", use(s, g.getInput())),
          arg("dgate", dgate), arg("dx", dx)},
         {i64("T", numel(g.getGate())), i64("H", lastDim(g.getInput()))}, loc);
  return success();
}

//===----------------------------------------------------------------------===//
// The load-balancing loss (transformers' load_balancing_loss_func)
//===----------------------------------------------------------------------===//

template <> LogicalResult OpLowering::lower<MoeRouterStatsOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto r = cast<MoeRouterStatsOp>(op);
  auto [T, E] = tokensAndExperts(r.getLogits());
  Buf counts = def(s, r.getCountsOut(), op, ".counts");
  Buf probs = def(s, r.getProbsOut(), op, ".probs");
  kernel("moe_router_stats",
         {arg("logits", use(s, r.getLogits())), arg("experts", use(s, r.getExperts())),
          arg("counts", use(s, r.getCounts())), arg("probs", use(s, r.getProbs())), arg("counts_out", counts),
          arg("probs_out", probs)},
         {i64("T", T), i64("E", E), i64("k", lastDim(r.getExperts()))}, loc);
  return success();
}

template <> LogicalResult OpLowering::lower<MoeRouterStatsGradOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<MoeRouterStatsGradOp>(op);
  auto [T, E] = tokensAndExperts(g.getLogits());
  Buf d = def(s, g.getResult(), op);
  kernel("moe_router_stats_bwd",
         {arg("logits", use(s, g.getLogits())), arg("dprobs", use(s, g.getDprobs())), arg("dlogits", d)},
         {i64("T", T), i64("E", E)}, loc);
  return success();
}

template <> LogicalResult OpLowering::lower<ZerosOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  Buf z = def(s, op->getResult(0), op);
  kernel("fill_zero", {arg("x", b.getArrayAttr({z}))}, {}, loc);
  return success();
}

namespace {
/// coef · E · k²: the load-balancing loss is that over N² times Σ_e C_e·S_e,
/// N = Σ_e C_e = k · L·T assignments of the L routers' T tokens.
double auxLossFactor(double coef, int64_t experts, int64_t topK) {
  return coef * double(experts) * double(topK) * double(topK);
}
} // namespace

template <> LogicalResult OpLowering::lower<MoeAuxLossOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto a = cast<MoeAuxLossOp>(op);
  if (!lossBuf)
    return a.emitOpError("llcdist-lower-to-plan: the load-balancing loss needs the step's loss in its program");
  s.bufs[a.getResult()] = {lossBuf};
  const int64_t E = numel(a.getCounts());
  // Counted in the loss as the cross-entropy is: a mean over microbatches
  // (then over dp, by the step's loss all-reduce).
  kernel("moe_aux_loss",
         {arg("counts", use(s, a.getCounts())), arg("probs", use(s, a.getProbs())), arg("loss", lossBuf)},
         {i64("E", E), f64("scale", auxLossFactor(a.getCoef().convertToDouble(), E, int64_t(a.getTopK())) /
                                        double(step.microbatches))},
         loc);
  return success();
}

template <> LogicalResult OpLowering::lower<MoeAuxLossGradOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<MoeAuxLossGradOp>(op);
  Buf d = def(s, g.getResult(), op);
  const int64_t E = numel(g.getCounts());
  // Each dp rank's loss is over its own tokens and the step's is their
  // mean: its gradient is 1/dp of its own (the dp sum then averages).
  const int64_t dp = xf::meshDegrees(pb.module).value_or(xf::MeshDegrees{}).dp;
  kernel("moe_aux_loss_bwd", {arg("counts", use(s, g.getCounts())), arg("dprobs", d)},
         {i64("E", E), f64("scale", auxLossFactor(g.getCoef().convertToDouble(), E, int64_t(g.getTopK())) *
                                        g.getScale().convertToDouble() / double(dp))},
         loc);
  return success();
}

void llcdist::xftoplan::attachMoePlanLowerings(MLIRContext *ctx) {
  attachPlanLowering<MoeRouteOp, MoeRouterStatsOp, MoePermuteOp, MoeUnpermuteOp, GroupedLinearOp, SigmoidGateOp,
                     MoeRouteGradOp, MoeRouterStatsGradOp, MoeUnpermuteGradOp, GroupedLinearGradInputOp,
                     GroupedLinearGradWeightOp, SigmoidGateGradOp, ZerosOp, MoeAuxLossOp, MoeAuxLossGradOp>(ctx);
}
