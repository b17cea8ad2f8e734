//===- TensorParallelRules.cpp - each xf op's tensor-parallel rule --------===//
//
// The TensorParallelOpInterface models of the xf ops: one rule per op,
// `TensorParallelPropagation::rule<Op>`, which sets the tp split of the op's
// results from its operands' or reports a mismatch (TensorParallel.cpp is
// the pass: the strategy, the propagation, the collectives, local types).
// An op with the Elementwise trait needs no rule here; a new op with a rule of
// its own gets it here and a name in registerTensorParallelModels
// (docs/adding-an-op.md).
//
//===----------------------------------------------------------------------===//
#include "TensorParallelPropagation.h"

#include "llcdist/Dialect/XF/Transforms/Passes.h"

using namespace mlir;
using namespace llcdist::xf;
using llcdist::xf::detail::lastDimOf;
using llcdist::xf::detail::TP;

namespace llcdist::xf {

//===----------------------------------------------------------------------===//
// Each op's rule (its TensorParallelOpInterface model)
//===----------------------------------------------------------------------===//

template <> LogicalResult TensorParallelPropagation::rule<ParamOp>(Operation *op) {
  auto p = cast<ParamOp>(op);
  state[p.getResult()] = params.lookup(p.getName());
  return success();
}

template <> LogicalResult TensorParallelPropagation::rule<LayerOp>(Operation *op) {
  auto call = cast<LayerOp>(op);
  return visitLayer(call);
}

template <> LogicalResult TensorParallelPropagation::rule<AllReduceOp>(Operation *) { return success(); }

template <> LogicalResult TensorParallelPropagation::rule<AllGatherOp>(Operation *op) {
  return rule<AllReduceOp>(op); // one rule for both
}

template <> LogicalResult TensorParallelPropagation::rule<ReduceScatterOp>(Operation *op) {
  return rule<AllReduceOp>(op); // one rule for both
}

// Context parallelism's all-to-all runs after tensor parallelism (it is
// inserted on tp-local values); in hand-written IR it may only move values
// that tp leaves whole.
template <> LogicalResult TensorParallelPropagation::rule<AllToAllOp>(Operation *op) {
  if (of(op->getOperand(0)).kind != TP::R)
    return op->emitOpError("llcdist-partition: an all-to-all of a value split over tp; context parallelism "
                           "is partitioned after tensor parallelism, on the tp-local values");
  return success();
}

template <> LogicalResult TensorParallelPropagation::rule<BiasAddOp>(Operation *op) {
  auto ba = cast<BiasAddOp>(op);
  state[ba.getResult()] = of(ba.getInput());
  return success();
}

template <> LogicalResult TensorParallelPropagation::rule<LinearOp>(Operation *op) {
  auto lin = cast<LinearOp>(op);
  TP x = of(lin.getInput()), w = of(lin.getWeight());
  bool outIn = lin.getLayout() == WeightLayout::OutIn;
  if (w.kind == TP::R) { // replicated: nothing to split
    if (x.kind == TP::Seq) { // on the rank's tokens (onSequenceSlice: a router)
      state[lin.getResult()] = x;
      return success();
    }
    if (x.kind != TP::R)
      return mismatch(lin);
    return success();
  }
  if (w.dim == (outIn ? 0 : 1)) { // column-parallel
    if (x.kind != TP::R)
      return mismatch(lin);
    state[lin.getResult()] = TP::split(lastDimOf(lin.getResult()), w.blocks, w.replicas);
    return success();
  }
  // Row-parallel: the output is a partial sum.
  if (x != TP::split(lastDimOf(lin.getInput())))
    return mismatch(lin);
  Value y = lin.getResult();
  Value bias = lin.getBias();
  if (!bias) {
    partial(y, "a row-parallel linear's output is a partial sum over tp", CollectiveOrigin::RowParallel);
    return success();
  }
  // The bias joins after the reduction, once.
  OpBuilder b(lin);
  auto nobias =
      LinearOp::create(b, lin.getLoc(), y.getType(), lin.getLayout(), lin.getInput(), lin.getWeight(), Value());
  partial(nobias.getResult(), "a row-parallel linear's output is a partial sum over tp", CollectiveOrigin::RowParallel);
  auto withBias = BiasAddOp::create(b, lin.getLoc(), nobias.getResult(), bias);
  y.replaceAllUsesWith(withBias.getResult());
  lin.erase();
  return visit(withBias);
}

template <> LogicalResult TensorParallelPropagation::rule<SplitOp>(Operation *op) {
  auto sp = cast<SplitOp>(op);
  TP x = of(sp.getInput());
  if (x.kind == TP::R)
    return same(sp.getInput(), sp.getResults());
  if (sp.getGroups()) { // whole groups per rank: a block split of the input, of each piece too
    if (x != TP::split(lastDimOf(sp.getInput())))
      return mismatch(sp);
    if (failed(localGroups(sp)))
      return failure();
    for (Value r : sp.getResults())
      state[r] = TP::split(lastDimOf(r));
    return success();
  }
  if (x.kind != TP::Split || x.dim != lastDimOf(sp.getInput()) || x.blocks != int64_t(sp.getNumResults()) ||
      x.replicas != 1)
    return mismatch(sp);
  for (Value r : sp.getResults())
    state[r] = TP::split(lastDimOf(r));
  return success();
}

template <> LogicalResult TensorParallelPropagation::rule<ConcatOp>(Operation *op) {
  auto c = cast<ConcatOp>(op);
  if (llvm::all_of(c.getInputs(), [&](Value v) { return of(v).kind == TP::R; })) {
    state[c.getResult()] = TP{};
    return success();
  }
  for (Value v : c.getInputs())
    if (of(v) != TP::split(lastDimOf(v)))
      return mismatch(c);
  if (c.getGroups()) { // the backward of a grouped split: whole groups per rank
    if (failed(localGroups(c)))
      return failure();
    state[c.getResult()] = TP::split(lastDimOf(c.getResult()));
    return success();
  }
  state[c.getResult()] = TP::split(lastDimOf(c.getResult()), c.getInputs().size());
  return success();
}

template <> LogicalResult TensorParallelPropagation::rule<RopeOp>(Operation *op) {
  return same(op->getOperand(0), op->getResults());
}

template <> LogicalResult TensorParallelPropagation::rule<RopeGradOp>(Operation *op) {
  return rule<RopeOp>(op); // one rule for both
}

template <> LogicalResult TensorParallelPropagation::rule<AddOp>(Operation *op) {
  auto a = cast<AddOp>(op);
  if (deferredWhole.count(a.getResult())) // a partial sum whose whole operand joins after its reduction
    return success();
  TP l = of(a.getLhs()), r = of(a.getRhs());
  if (l.kind == TP::Partial && r.kind == TP::Partial) {
    partial(a.getResult(), partialReason.lookup(a.getLhs()));
    return success();
  }
  if (l != r)
    return mismatch(a);
  state[a.getResult()] = l;
  return success();
}

/// xf.scale (Cohere's logit scale) splits as its operand, which is never a
/// partial sum here: in the backward the head's partial input gradient is
/// reduced first, and under sequence parallelism reduce-scattered onto the
/// sequence slice it runs on (the generic Elementwise rule would all-reduce it
/// whole, and the final norm's gradient would then meet the sequence-split
/// residual stream).
template <> LogicalResult TensorParallelPropagation::rule<ScaleOp>(Operation *op) {
  return same(op->getOperand(0), op->getResults());
}

template <> LogicalResult TensorParallelPropagation::rule<AttentionOp>(Operation *op) {
  auto at = cast<AttentionOp>(op);
  TP q = of(at.getQ());
  if (q.kind == TP::R && of(at.getK()).kind == TP::R)
    return same(at.getQ(), at->getResults());
  // k and v: split like q, or into kv-head parts held by replicas.
  TP kv = TP::split(2, 1, of(at.getK()).replicas);
  if (q != TP::split(2) || of(at.getK()) != kv || of(at.getV()) != kv)
    return mismatch(at);
  state[at.getResult()] = TP::split(2);
  if (at.getLse())
    state[at.getLse()] = TP::split(1);
  return localHeads(at, kv.replicas);
}

template <> LogicalResult TensorParallelPropagation::rule<AttentionGradOp>(Operation *op) {
  auto g = cast<AttentionGradOp>(op);
  TP kv = TP::split(2, 1, of(g.getK()).replicas);
  for (Value v : {g.getDout(), g.getQ(), g.getK(), g.getV(), g.getOut()}) {
    TP want = v == g.getK() || v == g.getV() ? kv : TP::split(2);
    if (of(v) != want)
      return of(v).kind == TP::R ? same(g.getQ(), g->getResults()) : mismatch(g);
  }
  // dk and dv: each rank's part is the sum over its own query heads.
  state[g.getDq()] = TP::split(2);
  state[g.getDk()] = kv;
  state[g.getDv()] = kv;
  return localHeads(g, kv.replicas);
}

template <> LogicalResult TensorParallelPropagation::rule<LayerNormOp>(Operation *op) {
  auto ln = cast<LayerNormOp>(op);
  TP x = of(ln.getInput());
  if (x.kind == TP::Seq) {
    state[ln.getResult()] = x;
    if (ln.getStats())
      state[ln.getStats()] = TP::seq(1); // [2, rows]
  } else if (x.kind != TP::R) {
    return mismatch(ln);
  }
  return success();
}

template <> LogicalResult TensorParallelPropagation::rule<RMSNormOp>(Operation *op) {
  auto rn = cast<RMSNormOp>(op);
  TP x = of(rn.getInput());
  if (x.kind == TP::Seq) {
    state[rn.getResult()] = x;
    if (rn.getStats())
      state[rn.getStats()] = TP::seq(0); // [rows]
  } else if (x.kind != TP::R) {
    return mismatch(rn);
  }
  return success();
}

template <> LogicalResult TensorParallelPropagation::rule<LayerNormGradInputOp>(Operation *op) {
  TP dy = of(op->getOperand(0));
  if (dy.kind == TP::Seq)
    state[op->getResult(0)] = dy;
  else if (dy.kind != TP::R)
    return mismatch(op);
  return success();
}

template <> LogicalResult TensorParallelPropagation::rule<RMSNormGradInputOp>(Operation *op) {
  return rule<LayerNormGradInputOp>(op); // one rule for both
}

template <> LogicalResult TensorParallelPropagation::rule<LayerNormGradParamsOp>(Operation *op) {
  TP dy = of(op->getOperand(0));
  if (dy.kind == TP::Seq) { // summed over this rank's tokens only
    for (Value r : op->getResults())
      partial(r, "sequence parallelism", CollectiveOrigin::SequenceParallel);
    return success();
  }
  if (auto gb = dyn_cast<LinearGradBiasOp>(op); gb && dy.kind == TP::Split)
    state[gb.getResult()] = TP::split(0, dy.blocks, dy.replicas);
  else if (dy.kind != TP::R)
    return mismatch(op);
  return success();
}

template <> LogicalResult TensorParallelPropagation::rule<RMSNormGradWeightOp>(Operation *op) {
  return rule<LayerNormGradParamsOp>(op); // one rule for both
}

template <> LogicalResult TensorParallelPropagation::rule<LinearGradBiasOp>(Operation *op) {
  return rule<LayerNormGradParamsOp>(op); // one rule for both
}

template <> LogicalResult TensorParallelPropagation::rule<AddPositionEmbeddingOp>(Operation *op) {
  auto pe = cast<AddPositionEmbeddingOp>(op);
  TP x = of(pe.getInput());
  if (x.kind == TP::Seq) {
    pe->setAttr("xf.seq_parallel_axis", StringAttr::get(pe.getContext(), "tp"));
    state[pe.getResult()] = x;
  } else if (x.kind != TP::R) {
    return mismatch(pe);
  }
  return success();
}

template <> LogicalResult TensorParallelPropagation::rule<AddPositionEmbeddingGradOp>(Operation *op) {
  auto g = cast<AddPositionEmbeddingGradOp>(op);
  TP dy = of(g.getDy());
  if (dy.kind == TP::Seq) {
    g->setAttr("xf.seq_parallel_axis", StringAttr::get(g.getContext(), "tp"));
    partial(g.getResult(), "sequence parallelism", CollectiveOrigin::SequenceParallel);
  } else if (dy.kind != TP::R) {
    return mismatch(g);
  }
  return success();
}

template <> LogicalResult TensorParallelPropagation::rule<EmbeddingOp>(Operation *op) {
  auto e = cast<EmbeddingOp>(op);
  if (of(e.getTable()).kind == TP::R)
    return success();
  markVocabParallel(e);
  partial(e.getResult(),
          "a vocabulary-parallel embedding lookup is a partial "
          "sum over tp (each rank holds a slice of the vocabulary)",
          CollectiveOrigin::VocabParallelEmbedding);
  return success();
}

template <> LogicalResult TensorParallelPropagation::rule<EmbeddingGradOp>(Operation *op) {
  auto g = cast<EmbeddingGradOp>(op);
  if (of(g.getDy()).kind != TP::R)
    return mismatch(g);
  // Which table it belongs to: the parameter it accumulates into.
  for (Operation *u : g->getUsers())
    if (auto acc = dyn_cast<AccumulateGradOp>(u))
      if (params.lookup(acc.getName()).kind == TP::Split) {
        markVocabParallel(g);
        state[g.getResult()] = TP::split(0);
      }
  return success();
}

template <> LogicalResult TensorParallelPropagation::rule<CrossEntropyOp>(Operation *op) {
  auto ce = cast<CrossEntropyOp>(op);
  TP l = of(ce.getLogits());
  if (l.kind == TP::R)
    return success();
  if (l != TP::split(lastDimOf(ce.getLogits())))
    return mismatch(ce);
  markVocabParallel(ce);
  return success(); // the loss replicates (the kernel all-reduces)
}

template <> LogicalResult TensorParallelPropagation::rule<CrossEntropyGradOp>(Operation *op) {
  auto g = cast<CrossEntropyGradOp>(op);
  TP l = of(g.getLogits());
  if (l.kind == TP::R)
    return success();
  markVocabParallel(g);
  state[g.getResult()] = l;
  return success();
}

template <> LogicalResult TensorParallelPropagation::rule<LinearGradWeightOp>(Operation *op) {
  auto g = cast<LinearGradWeightOp>(op);
  TP dy = of(g.getDy()), x = of(g.getInput());
  bool outIn = g.getLayout() == WeightLayout::OutIn;
  if (dy.kind == TP::R && x.kind == TP::R)
    return success();
  if (dy.kind == TP::Seq && x.kind == TP::Seq) { // a replicated weight on the rank's tokens (a router)
    partial(g.getResult(), "sequence parallelism", CollectiveOrigin::SequenceParallel);
    return success();
  }
  if (dy.kind == TP::Split && x.kind == TP::R) // column / vocab
    state[g.getResult()] = TP::split(outIn ? 0 : 1, dy.blocks, dy.replicas);
  else if (dy.kind == TP::R && x.kind == TP::Split) // row
    state[g.getResult()] = TP::split(outIn ? 1 : 0);
  else
    return mismatch(g);
  return success();
}

template <> LogicalResult TensorParallelPropagation::rule<LinearGradInputOp>(Operation *op) {
  auto g = cast<LinearGradInputOp>(op);
  TP dy = of(g.getDy()), w = of(g.getWeight());
  bool outIn = g.getLayout() == WeightLayout::OutIn;
  if (dy.kind == TP::R && w.kind == TP::R)
    return success();
  if (dy.kind == TP::Seq && w.kind == TP::R) { // a replicated weight on the rank's tokens (a router)
    state[g.getResult()] = dy;
    return success();
  }
  if (dy.kind == TP::R && w == TP::split(outIn ? 1 : 0)) { // row
    state[g.getResult()] = TP::split(lastDimOf(g.getResult()));
    return success();
  }
  // Replicated kv projections too: each rank's dx is the part through
  // its query heads' share of its kv head, and the parts over all tp
  // ranks add up to the whole.
  if (dy.kind == TP::Split && w.kind == TP::Split && w.dim == (outIn ? 0 : 1) && dy.replicas == w.replicas) {
    partial(g.getResult(),
            "a column-parallel linear's input gradient is a "
            "partial sum over tp",
            CollectiveOrigin::ColumnParallel);
    return success();
  }
  return mismatch(g);
}

// The mixture of experts runs whole on every tp rank (tensor parallelism
// splits attention and the dense MLPs only). A partial sum reaching it is
// reduced first, like any consumer's. Under sequence parallelism it runs on
// each rank's own tokens instead (expertsOnSequenceSlice).
LogicalResult TensorParallelPropagation::replicatedOnly(Operation *op) {
  if (sp)
    return expertsOnSequenceSlice(op);
  for (Value v : op->getOperands())
    if (of(v).kind != TP::R)
      return op->emitOpError("llcdist-partition: the mixture-of-experts layer runs whole on every tp rank, so its "
                             "operands must be replicated over tp");
  return success();
}

namespace {
/// Why the load-balancing statistics are partial sums over tp under
/// sequence parallelism.
const char *kSequenceParallelStatistics = "sequence parallelism: each tp rank's routers count the assignments and sum "
                                          "the probabilities of its own slice of the tokens; the load-balancing loss "
                                          "reads the microbatch's";
} // namespace

LogicalResult TensorParallelPropagation::replicatedStatistics(Operation *op) {
  if (sp && isa<ZerosOp>(op)) { // the statistics before the first router: zero partial sums
    partial(op->getResult(0), kSequenceParallelStatistics, CollectiveOrigin::SequenceParallel);
    return success();
  }
  for (Value v : op->getOperands())
    if (of(v).kind != TP::R)
      return op->emitOpError("llcdist-partition: the load-balancing loss reads whole statistics on every tp rank, so "
                             "its operands must be replicated over tp");
  return success();
}

LogicalResult TensorParallelPropagation::expertsOnSequenceSlice(Operation *op) {
  // The statistics of this rank's tokens, added to the partial sums before.
  if (auto s = dyn_cast<MoeRouterStatsOp>(op)) {
    for (Value r : s->getResults())
      partial(r, kSequenceParallelStatistics, CollectiveOrigin::SequenceParallel);
    return success();
  }
  // A capacity counts a microbatch's tokens, which each rank now holds 1/tp of.
  if (auto p = dyn_cast<MoePermuteOp>(op); p && p.getCapacity())
    return op->emitOpError("llcdist-partition: --moe-capacity-factor bounds each expert's rows of a rank's tokens, "
                           "which sequence parallelism splits over tp (a different drop policy); compile without "
                           "--sequence-parallel or without a capacity factor");
  bool tokens = false;
  for (Value v : op->getOperands()) {
    TP s = of(v);
    tokens |= s.kind == TP::Seq;
    if (s.kind != TP::Seq && s.kind != TP::R)
      return mismatch(op);
  }
  if (!tokens)
    return mismatch(op);
  for (Value r : op->getResults()) {
    if (isa<GroupedLinearGradWeightOp>(op)) // summed over this rank's tokens only
      partial(r, "sequence parallelism", CollectiveOrigin::SequenceParallel);
    else if (detail::rank(r) >= 2) // [batch, sequence, ...] tokens or [rows, ...] expert rows
      state[r] = TP::seq(detail::rank(r) == 3 ? 1 : 0);
    // (rank 1: the group sizes, each rank's own, as under dp)
  }
  return success();
}

template <> LogicalResult TensorParallelPropagation::rule<AccumulateGradOp>(Operation *op) {
  auto acc = cast<AccumulateGradOp>(op);
  TP want = params.lookup(acc.getName()), got = of(acc.getGrad());
  if (sp && got.kind == TP::Partial && want.kind == TP::R) {
    tpPartialGrads.insert(acc.getName());
    return success();
  }
  if (want != got)
    return acc.emitOpError("llcdist-partition: the gradient of '")
           << acc.getName() << "' is not split like the parameter";
  return success();
}
} // namespace llcdist::xf

//===----------------------------------------------------------------------===//
// The models
//===----------------------------------------------------------------------===//

#include "llcdist/Dialect/XF/Transforms/TensorParallelInterface.cpp.inc"

namespace {
/// The sequence-parallel region (TensorParallelOpInterface::runsOnSequenceSlice).
template <typename OpTy> constexpr bool kRunsOnSequenceSlice = false;
template <> constexpr bool kRunsOnSequenceSlice<AddOp> = true;
template <> constexpr bool kRunsOnSequenceSlice<ScaleOp> = true;
template <> constexpr bool kRunsOnSequenceSlice<LayerNormOp> = true;
template <> constexpr bool kRunsOnSequenceSlice<RMSNormOp> = true;
template <> constexpr bool kRunsOnSequenceSlice<LayerNormGradInputOp> = true;
template <> constexpr bool kRunsOnSequenceSlice<LayerNormGradParamsOp> = true;
template <> constexpr bool kRunsOnSequenceSlice<RMSNormGradInputOp> = true;
template <> constexpr bool kRunsOnSequenceSlice<RMSNormGradWeightOp> = true;
template <> constexpr bool kRunsOnSequenceSlice<AddPositionEmbeddingOp> = true;
template <> constexpr bool kRunsOnSequenceSlice<AddPositionEmbeddingGradOp> = true;
template <> constexpr bool kRunsOnSequenceSlice<BiasAddOp> = true;
template <> constexpr bool kRunsOnSequenceSlice<LinearGradBiasOp> = true;
template <> constexpr bool kRunsOnSequenceSlice<LayerOp> = true;
template <> constexpr bool kRunsOnSequenceSlice<AccumulateGradOp> = true;

template <typename OpTy>
struct TensorParallelModel : public TensorParallelOpInterface::ExternalModel<TensorParallelModel<OpTy>, OpTy> {
  LogicalResult propagateTensorParallel(Operation *op, TensorParallelPropagation &p) const { return p.rule<OpTy>(op); }
  bool runsOnSequenceSlice(Operation *) const { return kRunsOnSequenceSlice<OpTy>; }
};

template <typename... Ops> void attachTensorParallel(MLIRContext *ctx) {
  (Ops::template attachInterface<TensorParallelModel<Ops>>(*ctx), ...);
}

/// The ops that run whole on every tp rank share one rule
/// (TensorParallelPropagation::replicatedOnly).
template <typename OpTy>
struct ReplicatedOnTpModel : public TensorParallelOpInterface::ExternalModel<ReplicatedOnTpModel<OpTy>, OpTy> {
  LogicalResult propagateTensorParallel(Operation *op, TensorParallelPropagation &p) const {
    return p.replicatedOnly(op);
  }
  bool runsOnSequenceSlice(Operation *) const { return false; }
};

template <typename... Ops> void attachReplicatedOnTp(MLIRContext *ctx) {
  (Ops::template attachInterface<ReplicatedOnTpModel<Ops>>(*ctx), ...);
}

/// The load-balancing loss's whole-vector ops share one rule too
/// (TensorParallelPropagation::replicatedStatistics).
template <typename OpTy>
struct StatisticsOnTpModel : public TensorParallelOpInterface::ExternalModel<StatisticsOnTpModel<OpTy>, OpTy> {
  LogicalResult propagateTensorParallel(Operation *op, TensorParallelPropagation &p) const {
    return p.replicatedStatistics(op);
  }
  bool runsOnSequenceSlice(Operation *) const { return false; }
};
} // namespace

void llcdist::xf::registerTensorParallelModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, XFDialect *) {
    attachTensorParallel<ParamOp, LayerOp, AllReduceOp, AllGatherOp, ReduceScatterOp, AllToAllOp, BiasAddOp, LinearOp,
                         SplitOp, ConcatOp, RopeOp, RopeGradOp, AddOp, AttentionOp, AttentionGradOp, LayerNormOp,
                         RMSNormOp, LayerNormGradInputOp, RMSNormGradInputOp, LayerNormGradParamsOp,
                         RMSNormGradWeightOp, LinearGradBiasOp, AddPositionEmbeddingOp, AddPositionEmbeddingGradOp,
                         EmbeddingOp, EmbeddingGradOp, CrossEntropyOp, CrossEntropyGradOp, LinearGradWeightOp,
                         LinearGradInputOp, AccumulateGradOp, ScaleOp>(ctx);
    attachReplicatedOnTp<MoeRouteOp, MoeRouteGradOp, MoeRouterStatsOp, MoeRouterStatsGradOp, MoePermuteOp,
                         MoeUnpermuteOp, MoeUnpermuteGradOp, GroupedLinearOp, GroupedLinearGradInputOp,
                         GroupedLinearGradWeightOp, SigmoidGateOp, SigmoidGateGradOp, MoeDispatchOp, MoeCombineOp>(ctx);
    ZerosOp::attachInterface<StatisticsOnTpModel<ZerosOp>>(*ctx);
    MoeAuxLossOp::attachInterface<StatisticsOnTpModel<MoeAuxLossOp>>(*ctx);
    MoeAuxLossGradOp::attachInterface<StatisticsOnTpModel<MoeAuxLossGradOp>>(*ctx);
  });
}
