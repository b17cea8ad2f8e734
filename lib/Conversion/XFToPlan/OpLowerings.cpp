//===- OpLowerings.cpp - each xf op's plan kernels ------------------------===//
//
// The PlanLoweringOpInterface models of the xf ops: one rule per op,
// `OpLowering::lower<Op>`, which defines the buffers of the op's results in
// the scope and emits its plan.kernel calls (LowerOps.cpp is the driver: the
// scopes, layer calls, the split backward and the helpers the rules use). A
// new op gets a rule here and a name in registerPlanLoweringModels
// (docs/adding-an-op.md); the mixture of experts' are in MoeLowerings.cpp.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"
#include "LoweringModels.h"

#include "llcdist/Dialect/XF/Analysis/ModelStats.h"

#include "llcdist/Conversion/Passes.h"

using namespace mlir;
using namespace llcdist;
using namespace llcdist::xf;
using namespace llcdist::xftoplan;

#include "llcdist/Conversion/XFToPlan/PlanLoweringInterface.cpp.inc"

//===----------------------------------------------------------------------===//
// Structure: parameters and layer calls
//===----------------------------------------------------------------------===//

template <> LogicalResult OpLowering::lower<ParamOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto p = cast<ParamOp>(op);
  std::string name = instantiateLayerName(p.getName(), s.layer);
  ParamInfo &info = params.param(name, p.getType());
  if (auto sh = p->getAttrOfType<DictionaryAttr>("xf.sharding"))
    info.sharding = sh;
  s.bufs[p.getResult()] = {info.working};
  // FSDP gathers the whole parameter where each scope begins to read
  // it (llcdist-plan-zero): which kernel that is, only this lowering
  // knows.
  if (step.recordParamScopes) {
    SmallVector<NamedAttribute, 4> scope = {str("param", name), str("slot", s.prefix), b.getNamedAttr("loc", loc)};
    if (pb.slots > 1) // a pipeline chunk's: the gathered copy is per slot
      scope.push_back(b.getNamedAttr(plan::kSlotsAttr, b.getI64IntegerAttr(pb.slots)));
    pb.recordParamScope(b.getDictionaryAttr(scope));
  }
  for (Operation *user : p->getUsers()) {
    if (isa<EmbeddingOp, AddPositionEmbeddingOp>(user) && user->getOperand(1) == p.getResult())
      info.isTable = true;
    if (isa<LayerNormOp, RMSNormOp>(user) && user->getOperand(1) == p.getResult())
      info.isNormWeight = true;
  }
  return success();
}

template <> LogicalResult OpLowering::lower<LayerOp>(Operation *op, Scope &s, BackwardPart part, Location) {
  return lowerLayer(cast<LayerOp>(op), s, part);
}

//===----------------------------------------------------------------------===//
// Forward
//===----------------------------------------------------------------------===//

template <> LogicalResult OpLowering::lower<EmbeddingOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto e = cast<EmbeddingOp>(op);
  Buf out = def(s, e.getResult(), op);
  kernel("embedding_fwd", {arg("ids", use(s, e.getIds())), arg("table", use(s, e.getTable())), arg("out", out)},
         withShardAxis(op, withOptional("scale", e.getScale(),
                                        {i64("M", numel(e.getIds())), i64("V", dim(e.getTable(), 0)),
                                         i64("H", dim(e.getTable(), 1))})),
         loc);
  return success();
}

template <>
LogicalResult OpLowering::lower<AddPositionEmbeddingOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto e = cast<AddPositionEmbeddingOp>(op);
  Buf y = def(s, e.getResult(), op);
  kernel("pos_embedding_fwd", {arg("x", use(s, e.getInput())), arg("wpe", use(s, e.getTable())), arg("y", y)},
         withShardAxis(op, withOptional("offset", e.getOffset(),
                                        {i64("B", dim(e.getInput(), 0)), i64("S", dim(e.getInput(), 1)),
                                         i64("H", dim(e.getInput(), 2)), i64("P", dim(e.getTable(), 0))})),
         loc);
  return success();
}

template <> LogicalResult OpLowering::lower<LayerNormOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto ln = cast<LayerNormOp>(op);
  int64_t rows = numel(ln.getInput()) / lastDim(ln.getInput());
  Buf y = def(s, ln.getResult(), op);
  Buf mean = newBuffer(label(op, s) + ".mean", "activation", f32({rows}));
  Buf rstd = newBuffer(label(op, s) + ".rstd", "activation", f32({rows}));
  if (ln.getStats())
    s.bufs[ln.getStats()] = {mean, rstd};
  SmallVector<NamedAttribute> args{arg("x", use(s, ln.getInput()))};
  if (ln.getWeight()) // none: no affine transform (gamma 1, beta 0)
    args.push_back(arg("gamma", use(s, ln.getWeight())));
  if (ln.getBias()) // none: no add (MPT's LayerNorm)
    args.push_back(arg("beta", use(s, ln.getBias())));
  args.append({arg("y", y), arg("mean", mean), arg("rstd", rstd)});
  kernel("layer_norm_fwd", args,
         {i64("M", rows), i64("H", lastDim(ln.getInput())), f64("eps", ln.getEps().convertToDouble())}, loc);
  return success();
}

template <> LogicalResult OpLowering::lower<RMSNormOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto rn = cast<RMSNormOp>(op);
  int64_t rows = numel(rn.getInput()) / lastDim(rn.getInput());
  Buf y = def(s, rn.getResult(), op);
  Buf rstd = newBuffer(label(op, s) + ".rstd", "activation", f32({rows}));
  if (rn.getStats())
    s.bufs[rn.getStats()] = {rstd};
  kernel("rms_norm_fwd",
         {arg("x", use(s, rn.getInput())), arg("weight", use(s, rn.getWeight())), arg("y", y), arg("rstd", rstd)},
         withOptional("weight_offset", rn.getWeightOffset(),
                      {i64("M", rows), i64("H", lastDim(rn.getInput())), f64("eps", rn.getEps().convertToDouble())}),
         loc);
  return success();
}

template <> LogicalResult OpLowering::lower<LinearOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto lin = cast<LinearOp>(op);
  int64_t k = lastDim(lin.getInput()), n = lastDim(lin.getResult());
  Buf y = def(s, lin.getResult(), op);
  SmallVector<NamedAttribute> args{arg("x", use(s, lin.getInput())), arg("w", use(s, lin.getWeight())), arg("y", y)};
  if (lin.getBias())
    args.push_back(arg("bias", use(s, lin.getBias())));
  kernel("linear_fwd", args, {i64("M", numel(lin.getInput()) / k), i64("K", k), i64("N", n), layout(lin.getLayout())},
         loc);
  return success();
}

template <> LogicalResult OpLowering::lower<SplitOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto sp = cast<SplitOp>(op);
  // A grouped split is a split of rows × groups rows of a group's width.
  const int64_t groups = sp.getGroups() ? int64_t(*sp.getGroups()) : 1;
  SmallVector<Attribute> outs, sizes;
  for (Value r : sp.getResults()) {
    outs.push_back(def(s, r, op));
    sizes.push_back(b.getI64IntegerAttr(lastDim(r) / groups));
  }
  kernel("split_fwd", {arg("x", use(s, sp.getInput())), arg("outs", b.getArrayAttr(outs))},
         {i64("rows", numel(sp.getInput()) / lastDim(sp.getInput()) * groups),
          b.getNamedAttr("sizes", b.getArrayAttr(sizes))},
         loc);
  return success();
}

template <> LogicalResult OpLowering::lower<RopeOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto r = cast<RopeOp>(op);
  Buf y = def(s, r.getResult(), op);
  kernel("rope_fwd", {arg("x", use(s, r.getInput())), arg("y", y)},
         withShardAxis(op, withOptional("rotary_dim", r.getRotaryDim(),
                                        ropeAttrs(r.getInput(), r.getHeadDim(), r.getTheta(), r.getScalingAttr(),
                                                  r.getInterleaved()))),
         loc);
  return success();
}

template <> LogicalResult OpLowering::lower<AttentionOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto at = cast<AttentionOp>(op);
  Buf out = def(s, at.getResult(), op);
  int64_t B = dim(at.getQ(), 0), S = dim(at.getQ(), 1);
  Buf lse = newBuffer(label(op, s) + ".lse", "activation", f32({B, int64_t(at.getNumHeads()), S}));
  if (at.getLse())
    s.bufs[at.getLse()] = {lse};
  if (op->hasAttr("xf.cp_ring"))
    return ringAttentionForward(at, s, out, lse, loc);
  kernel("attention_fwd",
         {arg("q", use(s, at.getQ())), arg("k", use(s, at.getK())), arg("v", use(s, at.getV())), arg("out", out),
          arg("lse", lse)},
         withAttentionBias(op, {i64("B", B), i64("S", S), i64("nh", at.getNumHeads()), i64("nkv", at.getNumKvHeads()),
                                i64("hd", at.getHeadDim())}),
         loc);
  return success();
}

template <> LogicalResult OpLowering::lower<GeluTanhOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<GeluTanhOp>(op);
  Buf y = def(s, g.getResult(), op);
  kernel("gelu_tanh_fwd", {arg("x", use(s, g.getInput())), arg("y", y)}, {i64("n", numel(g.getInput()))}, loc);
  return success();
}

template <> LogicalResult OpLowering::lower<GeluErfOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<GeluErfOp>(op);
  Buf y = def(s, g.getResult(), op);
  kernel("gelu_erf_fwd", {arg("x", use(s, g.getInput())), arg("y", y)}, {i64("n", numel(g.getInput()))}, loc);
  return success();
}

template <> LogicalResult OpLowering::lower<ClampOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto c = cast<ClampOp>(op);
  Buf y = def(s, c.getResult(), op);
  kernel("clamp_fwd", {arg("x", use(s, c.getInput())), arg("y", y)},
         {i64("n", numel(c.getInput())), f64("limit", c.getLimit().convertToDouble())}, loc);
  return success();
}

template <> LogicalResult OpLowering::lower<ReluOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto r = cast<ReluOp>(op);
  Buf y = def(s, r.getResult(), op);
  kernel("relu_fwd", {arg("x", use(s, r.getInput())), arg("y", y)}, {i64("n", numel(r.getInput()))}, loc);
  return success();
}

template <> LogicalResult OpLowering::lower<ScaleOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto c = cast<ScaleOp>(op);
  Buf y = def(s, c.getResult(), op);
  kernel("scale", {arg("x", use(s, c.getInput())), arg("y", y)},
         {i64("n", numel(c.getInput())), f64("factor", c.getFactor().convertToDouble())}, loc);
  return success();
}

template <> LogicalResult OpLowering::lower<SwiGLUOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<SwiGLUOp>(op);
  Buf y = def(s, g.getResult(), op);
  kernel("swiglu_fwd", {arg("gate", use(s, g.getGate())), arg("up", use(s, g.getUp())), arg("y", y)},
         withOptional("act", g.getActivation(), {i64("n", numel(g.getGate()))}), loc);
  return success();
}

template <> LogicalResult OpLowering::lower<AddOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto a = cast<AddOp>(op);
  Buf y = def(s, a.getResult(), op);
  kernel("add", {arg("a", use(s, a.getLhs())), arg("b", use(s, a.getRhs())), arg("y", y)},
         {i64("n", numel(a.getLhs()))}, loc);
  return success();
}

template <> LogicalResult OpLowering::lower<CrossEntropyOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto ce = cast<CrossEntropyOp>(op);
  s.bufs[ce.getLoss()] = {lossBuf};
  SmallVector<NamedAttribute> args{arg("logits", use(s, ce.getLogits())), arg("targets", use(s, ce.getTargets())),
                                   arg("loss", lossBuf)};
  vocabParallelStats(op, s, ce.getLogits(), ce.getTargets(), ce.getRealVocab(), loc, args);
  kernel("cross_entropy_fwd", args,
         withRealVocab(ce.getRealVocab(),
                       withShardAxis(op, {i64("M", numel(ce.getTargets())), i64("V", lastDim(ce.getLogits())),
                                          f64("scale", 1.0 / double(step.microbatches))})),
         loc);
  return success();
}

//===----------------------------------------------------------------------===//
// Backward
//===----------------------------------------------------------------------===//

template <> LogicalResult OpLowering::lower<CrossEntropyGradOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<CrossEntropyGradOp>(op);
  // The forward's statistics are not kept to the backward (a
  // pipeline's or recompute's scopes would have to carry them): the
  // backward recomputes them with the same collectives.
  Buf d = def(s, g.getResult(), op);
  SmallVector<NamedAttribute> args{arg("logits", use(s, g.getLogits())), arg("targets", use(s, g.getTargets())),
                                   arg("dlogits", d)};
  vocabParallelStats(op, s, g.getLogits(), g.getTargets(), g.getRealVocab(), loc, args);
  kernel("cross_entropy_bwd", args,
         withRealVocab(g.getRealVocab(),
                       withShardAxis(op, {i64("M", numel(g.getTargets())), i64("V", lastDim(g.getLogits())),
                                          f64("scale", g.getScale().convertToDouble())})),
         loc);
  return success();
}

template <> LogicalResult OpLowering::lower<LinearGradInputOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<LinearGradInputOp>(op);
  int64_t k = lastDim(g.getResult()), n = lastDim(g.getDy());
  Buf dx = def(s, g.getResult(), op);
  kernel("linear_bwd_input", {arg("dy", use(s, g.getDy())), arg("w", use(s, g.getWeight())), arg("dx", dx)},
         {i64("M", numel(g.getDy()) / n), i64("K", k), i64("N", n), layout(g.getLayout()), flag("accumulate", false)},
         loc);
  return success();
}

namespace {
template <> constexpr bool kWritesParameterGradients<LinearGradWeightOp> = true;
} // namespace
template <> LogicalResult OpLowering::lower<LinearGradWeightOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<LinearGradWeightOp>(op);
  int64_t k = lastDim(g.getInput()), n = lastDim(g.getDy());
  auto [dw, acc] = gradTarget(s, g.getResult(), op);
  kernel("linear_bwd_weight", {arg("dy", use(s, g.getDy())), arg("x", use(s, g.getInput())), arg("dw", dw)},
         {i64("M", numel(g.getDy()) / n), i64("K", k), i64("N", n), layout(g.getLayout()), flag("accumulate", acc)},
         loc);
  return success();
}

namespace {
template <> constexpr bool kWritesParameterGradients<LinearGradBiasOp> = true;
} // namespace
template <> LogicalResult OpLowering::lower<LinearGradBiasOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<LinearGradBiasOp>(op);
  int64_t n = lastDim(g.getDy());
  auto [db, acc] = gradTarget(s, g.getResult(), op);
  kernel("linear_bwd_bias", {arg("dy", use(s, g.getDy())), arg("db", db)},
         {i64("M", numel(g.getDy()) / n), i64("N", n), flag("accumulate", acc)}, loc);
  return success();
}

namespace {
template <> constexpr bool kWritesParameterGradients<EmbeddingGradOp> = true;
} // namespace
template <> LogicalResult OpLowering::lower<EmbeddingGradOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<EmbeddingGradOp>(op);
  auto [dt, acc] = gradTarget(s, g.getResult(), op);
  kernel("embedding_bwd_weight", {arg("ids", use(s, g.getIds())), arg("dout", use(s, g.getDy())), arg("dtable", dt)},
         withShardAxis(op, withOptional("padding_idx", g.getPaddingIdx(),
                                        withOptional("scale", g.getScale(),
                                                     {i64("M", numel(g.getIds())), i64("V", dim(g.getResult(), 0)),
                                                      i64("H", dim(g.getResult(), 1)), flag("accumulate", acc)}))),
         loc);
  return success();
}

namespace {
template <> constexpr bool kWritesParameterGradients<AddPositionEmbeddingGradOp> = true;
} // namespace
template <>
LogicalResult OpLowering::lower<AddPositionEmbeddingGradOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<AddPositionEmbeddingGradOp>(op);
  auto [dt, acc] = gradTarget(s, g.getResult(), op);
  kernel("pos_embedding_bwd_weight", {arg("dy", use(s, g.getDy())), arg("dwpe", dt)},
         withShardAxis(
             op, withOptional("offset", g.getOffset(),
                              {i64("B", dim(g.getDy(), 0)), i64("S", dim(g.getDy(), 1)), i64("H", dim(g.getDy(), 2)),
                               i64("P", dim(g.getResult(), 0)), flag("accumulate", acc)})),
         loc);
  return success();
}

template <> LogicalResult OpLowering::lower<LayerNormGradInputOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<LayerNormGradInputOp>(op);
  auto st = s.bufs.lookup(g.getStats());
  Buf dx = def(s, g.getResult(), op);
  SmallVector<NamedAttribute> args{arg("dy", use(s, g.getDy())), arg("x", use(s, g.getInput()))};
  if (g.getWeight())
    args.push_back(arg("gamma", use(s, g.getWeight())));
  args.append({arg("mean", st[0]), arg("rstd", st[1]), arg("dx", dx)});
  kernel("layer_norm_bwd_input", args, {i64("M", numel(g.getDy()) / lastDim(g.getDy())), i64("H", lastDim(g.getDy()))},
         loc);
  return success();
}

namespace {
template <> constexpr bool kWritesParameterGradients<LayerNormGradParamsOp> = true;
} // namespace
template <>
LogicalResult OpLowering::lower<LayerNormGradParamsOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<LayerNormGradParamsOp>(op);
  auto st = s.bufs.lookup(g.getStats());
  auto [dg, acc] = gradTarget(s, g.getDweight(), op);
  SmallVector<NamedAttribute> args{arg("dy", use(s, g.getDy())), arg("x", use(s, g.getInput())), arg("mean", st[0]),
                                   arg("rstd", st[1]), arg("dgamma", dg)};
  if (g.getDbias()) { // none: a LayerNorm without a bias (MPT's)
    auto [db, acc2] = gradTarget(s, g.getDbias(), op);
    (void)acc2; // fused together or not at all (isFused checks both)
    args.push_back(arg("dbeta", db));
  }
  kernel("layer_norm_bwd_weight", args,
         {i64("M", numel(g.getDy()) / lastDim(g.getDy())), i64("H", lastDim(g.getDy())), flag("accumulate", acc)}, loc);
  return success();
}

template <> LogicalResult OpLowering::lower<RMSNormGradInputOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<RMSNormGradInputOp>(op);
  Buf dx = def(s, g.getResult(), op);
  kernel("rms_norm_bwd_input",
         {arg("dy", use(s, g.getDy())), arg("x", use(s, g.getInput())), arg("weight", use(s, g.getWeight())),
          arg("rstd", use(s, g.getStats())), arg("dx", dx)},
         withOptional("weight_offset", g.getWeightOffset(),
                      {i64("M", numel(g.getDy()) / lastDim(g.getDy())), i64("H", lastDim(g.getDy()))}),
         loc);
  return success();
}

namespace {
template <> constexpr bool kWritesParameterGradients<RMSNormGradWeightOp> = true;
} // namespace
template <> LogicalResult OpLowering::lower<RMSNormGradWeightOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<RMSNormGradWeightOp>(op);
  auto [dw, acc] = gradTarget(s, g.getResult(), op);
  kernel("rms_norm_bwd_weight",
         {arg("dy", use(s, g.getDy())), arg("x", use(s, g.getInput())), arg("rstd", use(s, g.getStats())),
          arg("dweight", dw)},
         {i64("M", numel(g.getDy()) / lastDim(g.getDy())), i64("H", lastDim(g.getDy())), flag("accumulate", acc)}, loc);
  return success();
}

template <> LogicalResult OpLowering::lower<RopeGradOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto r = cast<RopeGradOp>(op);
  Buf dx = def(s, r.getResult(), op);
  kernel("rope_bwd", {arg("dy", use(s, r.getDy())), arg("dx", dx)},
         withShardAxis(op, withOptional("rotary_dim", r.getRotaryDim(),
                                        ropeAttrs(r.getDy(), r.getHeadDim(), r.getTheta(), r.getScalingAttr(),
                                                  r.getInterleaved()))),
         loc);
  return success();
}

template <> LogicalResult OpLowering::lower<AttentionGradOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<AttentionGradOp>(op);
  Buf dq = def(s, g.getDq(), op, ".dq");
  Buf dk = def(s, g.getDk(), op, ".dk");
  Buf dv = def(s, g.getDv(), op, ".dv");
  if (op->hasAttr("xf.cp_ring"))
    return ringAttentionBackward(g, s, dq, dk, dv, loc);
  kernel("attention_bwd",
         {arg("dout", use(s, g.getDout())), arg("q", use(s, g.getQ())), arg("k", use(s, g.getK())),
          arg("v", use(s, g.getV())), arg("out", use(s, g.getOut())), arg("lse", use(s, g.getLse())), arg("dq", dq),
          arg("dk", dk), arg("dv", dv)},
         withAttentionBias(op, {i64("B", dim(g.getQ(), 0)), i64("S", dim(g.getQ(), 1)), i64("nh", g.getNumHeads()),
                                i64("nkv", g.getNumKvHeads()), i64("hd", g.getHeadDim())}),
         loc);
  return success();
}

template <> LogicalResult OpLowering::lower<GeluTanhGradOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<GeluTanhGradOp>(op);
  Buf dx = def(s, g.getResult(), op);
  kernel("gelu_tanh_bwd", {arg("dy", use(s, g.getDy())), arg("x", use(s, g.getInput())), arg("dx", dx)},
         {i64("n", numel(g.getDy()))}, loc);
  return success();
}

template <> LogicalResult OpLowering::lower<GeluErfGradOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<GeluErfGradOp>(op);
  Buf dx = def(s, g.getResult(), op);
  kernel("gelu_erf_bwd", {arg("dy", use(s, g.getDy())), arg("x", use(s, g.getInput())), arg("dx", dx)},
         {i64("n", numel(g.getDy()))}, loc);
  return success();
}

template <> LogicalResult OpLowering::lower<ClampGradOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto c = cast<ClampGradOp>(op);
  Buf dx = def(s, c.getResult(), op);
  kernel("clamp_bwd", {arg("dy", use(s, c.getDy())), arg("x", use(s, c.getInput())), arg("dx", dx)},
         {i64("n", numel(c.getDy())), f64("limit", c.getLimit().convertToDouble())}, loc);
  return success();
}

template <> LogicalResult OpLowering::lower<ReluGradOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto r = cast<ReluGradOp>(op);
  Buf dx = def(s, r.getResult(), op);
  kernel("relu_bwd", {arg("dy", use(s, r.getDy())), arg("x", use(s, r.getInput())), arg("dx", dx)},
         {i64("n", numel(r.getDy()))}, loc);
  return success();
}

template <> LogicalResult OpLowering::lower<SwiGLUGradOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto g = cast<SwiGLUGradOp>(op);
  Buf dg = def(s, g.getDgate(), op, ".dgate");
  Buf du = def(s, g.getDup(), op, ".dup");
  kernel("swiglu_bwd",
         {arg("dy", use(s, g.getDy())), arg("gate", use(s, g.getGate())), arg("up", use(s, g.getUp())),
          arg("dgate", dg), arg("dup", du)},
         withOptional("act", g.getActivation(), {i64("n", numel(g.getDy()))}), loc);
  return success();
}

template <> LogicalResult OpLowering::lower<ConcatOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto c = cast<ConcatOp>(op);
  const int64_t groups = c.getGroups() ? int64_t(*c.getGroups()) : 1; // as lower<SplitOp>
  SmallVector<Attribute> ins, sizes;
  for (Value v : c.getInputs()) {
    ins.push_back(use(s, v));
    sizes.push_back(b.getI64IntegerAttr(lastDim(v) / groups));
  }
  Buf dx = def(s, c.getResult(), op);
  kernel("split_bwd", {arg("douts", b.getArrayAttr(ins)), arg("dx", dx)},
         {i64("rows", numel(c.getResult()) / lastDim(c.getResult()) * groups),
          b.getNamedAttr("sizes", b.getArrayAttr(sizes))},
         loc);
  return success();
}

//===----------------------------------------------------------------------===//
// Collectives and what partitioning adds
//===----------------------------------------------------------------------===//

template <> LogicalResult OpLowering::lower<AllReduceOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto ar = cast<AllReduceOp>(op);
  // In place: the partial value has no other use.
  Buf buf = use(s, ar.getInput());
  s.bufs[ar.getResult()] = {buf};
  plan::KernelOp k = kernel("all_reduce", {arg("x", b.getArrayAttr({buf}))},
                            {str("axis", ar.getAxis()), str("op", "sum")}, NameLoc::get(ar.getReasonAttr(), loc));
  k->setAttr("plan.payload", b.getStringAttr(activationPayload(ar.getInput(), /*forward=*/true)));
  plan::setCollectiveOrigin(k, ar);
  return success();
}

template <> LogicalResult OpLowering::lower<AllGatherOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  // x [outer, inner_x] <-> y [outer, inner_y] along `dim`: outer is the
  // product of the dimensions before it, inner that of the local slice.
  bool gather = isa<AllGatherOp>(op);
  Value local = gather ? op->getOperand(0) : op->getResult(0);
  int64_t d = op->getAttrOfType<IntegerAttr>("dim").getInt();
  auto lt = cast<RankedTensorType>(local.getType());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < lt.getRank(); ++i)
    (i < d ? outer : inner) *= lt.getDimSize(i);
  Buf y = def(s, op->getResult(0), op);
  SmallVector<NamedAttribute> attrs{b.getNamedAttr("axis", op->getAttr("axis")), i64("outer", outer),
                                    i64("inner", inner)};
  if (!gather)
    attrs.push_back(str("op", "sum"));
  plan::KernelOp k =
      kernel(gather ? "all_gather" : "reduce_scatter", {arg("x", use(s, op->getOperand(0))), arg("y", y)}, attrs,
             NameLoc::get(op->getAttrOfType<StringAttr>("reason"), loc));
  k->setAttr("plan.payload", b.getStringAttr("activations"));
  plan::setCollectiveOrigin(k, op);
  return success();
}

template <> LogicalResult OpLowering::lower<ReduceScatterOp>(Operation *op, Scope &s, BackwardPart part, Location loc) {
  return lower<AllGatherOp>(op, s, part, loc); // one rule for both
}

template <> LogicalResult OpLowering::lower<AllToAllOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  // The runtime's view (docs/plan-format.md "all_to_all"): x [outer, mid, n,
  // inner] -> y [outer, n, mid, inner] when the split dimension follows the
  // gathered one (sequence -> heads, x_rank_dim 2), the inverse otherwise.
  auto a2a = cast<AllToAllOp>(op);
  auto x = cast<RankedTensorType>(a2a.getInput().getType());
  auto y = cast<RankedTensorType>(a2a.getResult().getType());
  int64_t split = a2a.getSplitDim(), concat = a2a.getConcatDim();
  int64_t n = y.getDimSize(concat) / x.getDimSize(concat);
  auto prod = [&](int64_t from, int64_t to) {
    int64_t p = 1;
    for (int64_t i = from; i < to; ++i)
      p *= x.getDimSize(i);
    return p;
  };
  bool toHeads = concat < split;
  int64_t outer = toHeads ? prod(0, concat) : prod(0, split);
  int64_t mid = toHeads ? prod(concat, split) : prod(split, concat) / n;
  int64_t inner = toHeads ? prod(split, x.getRank()) / n : prod(concat, x.getRank());
  Buf out = def(s, a2a.getResult(), op);
  plan::KernelOp k = kernel("all_to_all", {arg("x", use(s, a2a.getInput())), arg("y", out)},
                            {b.getNamedAttr("axis", a2a.getAxisAttr()), i64("outer", outer), i64("mid", mid),
                             i64("inner", inner), i64("x_rank_dim", toHeads ? 2 : 1)},
                            NameLoc::get(a2a.getReasonAttr(), loc));
  k->setAttr("plan.payload", b.getStringAttr("activations"));
  plan::setCollectiveOrigin(k, op);
  return success();
}

/// Expert parallelism's exchange (docs/plan-format.md "all_to_all_v"):
/// `rows` [Nx, H] go out in chunks of `sendSplits` (n members × c local
/// experts), the received ones land in `out` [Ny, H] and their counts in
/// `recvSplits`.
void OpLowering::allToAllV(Operation *op, Buf rows, Buf sendSplits, Buf out, Buf recvSplits, int64_t c, Value x,
                           Value y, Location loc) {
  plan::KernelOp k = kernel(
      "all_to_all_v", {arg("x", rows), arg("send_splits", sendSplits), arg("y", out), arg("recv_splits", recvSplits)},
      {b.getNamedAttr("axis", op->getAttr("axis")), i64("c", c), i64("H", dim(x, 1)), i64("Nx", dim(x, 0)),
       i64("Ny", dim(y, 0))},
      NameLoc::get(op->getAttrOfType<StringAttr>("reason"), loc));
  k->setAttr("plan.payload", b.getStringAttr("expert rows"));
  plan::setCollectiveOrigin(k, op);
}

template <> LogicalResult OpLowering::lower<MoeDispatchOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  // all_to_all_v to the experts' members (rows by sending member, then local
  // expert), then moe_chunk_transpose groups them by local expert.
  auto d = cast<MoeDispatchOp>(op);
  const int64_t c = numel(d.getLocalSizes()), n = numel(d.getRecvSplits()) / c;
  Buf out = def(s, d.getResult(), op);
  Buf splits = def(s, d.getRecvSplits(), op, ".recv_splits");
  Buf sizes = def(s, d.getLocalSizes(), op, ".local_sizes");
  Buf bySource = newBuffer(label(op, s) + ".by_source", "scratch", pb.bufferOp(out).getType());
  allToAllV(op, use(s, d.getInput()), use(s, d.getGroupSizes()), bySource, splits, c, d.getInput(), d.getResult(), loc);
  kernel("moe_chunk_transpose", {arg("x", bySource), arg("splits", splits), arg("y", out), arg("col_sizes", sizes)},
         {i64("r", n), i64("c", c), i64("N", dim(d.getResult(), 0)), i64("H", dim(d.getResult(), 1))}, loc);
  return success();
}

template <> LogicalResult OpLowering::lower<MoeCombineOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  // The dispatch backwards: by sending member again, then all_to_all_v home.
  auto cb = cast<MoeCombineOp>(op);
  const int64_t c = int64_t(cb.getLocalExperts()), n = numel(cb.getRecvSplits()) / c;
  Buf out = def(s, cb.getResult(), op);
  Buf splits = use(s, cb.getRecvSplits());
  Buf bySource = newBuffer(label(op, s) + ".by_source", "scratch", pb.bufferOp(use(s, cb.getInput())).getType());
  Buf homeSplits = newBuffer(label(op, s) + ".home_splits", "scratch", pb.bufferOp(splits).getType());
  kernel("moe_chunk_transpose", {arg("x", use(s, cb.getInput())), arg("splits", splits), arg("y", bySource)},
         {i64("r", n), i64("c", c), i64("N", dim(cb.getInput(), 0)), i64("H", dim(cb.getInput(), 1)),
          flag("inverse", true)},
         loc);
  allToAllV(op, bySource, splits, out, homeSplits, c, cb.getInput(), cb.getResult(), loc);
  return success();
}

template <> LogicalResult OpLowering::lower<BiasAddOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto ba = cast<BiasAddOp>(op);
  Buf y = use(s, ba.getInput());
  s.bufs[ba.getResult()] = {y};
  int64_t n = lastDim(ba.getInput());
  kernel("bias_add", {arg("y", y), arg("bias", use(s, ba.getBias()))},
         {i64("M", numel(ba.getInput()) / n), i64("N", n)}, loc);
  return success();
}

template <> LogicalResult OpLowering::lower<AccumulateGradOp>(Operation *op, Scope &s, BackwardPart, Location loc) {
  auto acc = cast<AccumulateGradOp>(op);
  if (isFused(acc.getGrad()))
    return success(); // written by the gradient's own kernel
  auto it = params.find(instantiateLayerName(acc.getName(), s.layer));
  if (it == params.end())
    return acc.emitOpError("gradient of a parameter that is never read");
  kernel("accumulate", {arg("x", use(s, acc.getGrad())), arg("y", it->second.grad)}, {i64("n", numel(acc.getGrad()))},
         loc);
  return success();
}

//===----------------------------------------------------------------------===//
// The models
//===----------------------------------------------------------------------===//

void llcdist::xftoplan::registerPlanLoweringModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, xf::XFDialect *) {
    attachPlanLowering<ParamOp, LayerOp, EmbeddingOp, AddPositionEmbeddingOp, LayerNormOp, RMSNormOp, LinearOp, SplitOp,
                       RopeOp, AttentionOp, GeluTanhOp, GeluErfOp, ClampOp, ReluOp, ScaleOp, SwiGLUOp, AddOp,
                       CrossEntropyOp, CrossEntropyGradOp, LinearGradInputOp, LinearGradWeightOp, LinearGradBiasOp,
                       EmbeddingGradOp, AddPositionEmbeddingGradOp, LayerNormGradInputOp, LayerNormGradParamsOp,
                       RMSNormGradInputOp, RMSNormGradWeightOp, RopeGradOp, AttentionGradOp, GeluTanhGradOp,
                       GeluErfGradOp, ClampGradOp, ReluGradOp, SwiGLUGradOp, ConcatOp, AllReduceOp, AllGatherOp,
                       ReduceScatterOp, AllToAllOp, BiasAddOp, AccumulateGradOp, MoeDispatchOp, MoeCombineOp>(ctx);
    attachMoePlanLowerings(ctx);
  });
}
