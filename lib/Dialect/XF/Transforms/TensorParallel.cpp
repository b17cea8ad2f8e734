//===- TensorParallel.cpp - tensor parallelism over tp ---------------------===//
//
// The strategy arrives as annotations: `xf.tp_split = {dim, blocks}` on the
// xf.param ops to split over tp (llcdist-megatron-tp writes Megatron-LM's;
// other strategy passes may write others). Everything else follows from
// propagation, forward and backward, into layer bodies:
//  - a linear whose weight is split on its output dimension (column-parallel)
//    takes a replicated input and yields a split output (split per block for a
//    fused q|k|v); one split on its input dimension (row-parallel) takes a
//    split input and yields a partial sum, all-reduced before its bias is
//    added once; a replicated weight keeps everything replicated;
//  - a token embedding with a split table is a masked lookup (partial sum);
//    a loss over split logits is the vocabulary-parallel cross-entropy;
//  - partial sums stay partial through sums of partial sums and are
//    all-reduced where first needed whole (Megatron's f and g operators);
//  - with fewer kv heads than tp ranks (MQA, GQA with tp > kv heads) the
//    column-split k and v projections are split into kv-head parts instead of
//    tp parts: the tp/kv consecutive ranks whose query heads share a kv head
//    hold that head (replicas), and their weight gradients, each a partial
//    sum over its query heads, are all-reduced over that sub-group of tp.
//
//===----------------------------------------------------------------------===//
#include "TensorParallel.h"
#include "PartitionUtils.h"
#include "TensorParallelPropagation.h"

#include "llcdist/Dialect/XF/Analysis/ModelStats.h"

using namespace mlir;
using namespace llcdist::xf;
using llcdist::xf::detail::lastDimOf;
using llcdist::xf::detail::PartialSum;
using llcdist::xf::detail::rank;
using llcdist::xf::detail::TP;

namespace {
/// The mixture-of-experts ops that run whole on every tp rank without
/// sequence parallelism (TensorParallelPropagation::replicatedOnly).
bool isExpertOp(Operation *op) {
  return isa<MoeRouteOp, MoeRouteGradOp, MoeRouterStatsOp, MoeRouterStatsGradOp, MoePermuteOp, MoeUnpermuteOp,
             MoeUnpermuteGradOp, GroupedLinearOp, GroupedLinearGradInputOp, GroupedLinearGradWeightOp, SigmoidGateOp,
             SigmoidGateGradOp>(op);
}
} // namespace

bool TensorParallelPropagation::onSequenceSlice(Operation *op) const {
  // The sequence-parallel region (Korthikanti et al.).
  auto rule = dyn_cast<TensorParallelOpInterface>(op);
  if (rule && rule.runsOnSequenceSlice())
    return true;
  if (!sp)
    return false;
  auto seq = [&](Value v) { return of(v).kind == TP::Seq; };
  auto replicated = [&](Value v) { return of(v).kind == TP::R; };
  if (isExpertOp(op))
    return true;
  if (auto l = dyn_cast<LinearOp>(op))
    return replicated(l.getWeight()) && seq(l.getInput());
  if (auto g = dyn_cast<LinearGradInputOp>(op))
    return replicated(g.getWeight()) && seq(g.getDy());
  if (auto g = dyn_cast<LinearGradWeightOp>(op))
    return seq(g.getDy()) && seq(g.getInput());
  return op->hasTrait<OpTrait::Elementwise>() && op->getNumOperands() > 0 && llvm::all_of(op->getOperands(), seq);
}

LogicalResult TensorParallelPropagation::run() {
  func::FuncOp entry = getEntryFunction(module);
  if (!entry)
    return failure();
  if (failed(readStrategy()) || failed(replicateKvHeads()))
    return failure();
  if (sp && failed(checkSequenceParallelEntry()))
    return failure();
  if (failed(propagate(entry.getBody().front())))
    return failure();
  if (sp && failed(finishSequenceParallel()))
    return failure();
  reduceKvReplicaGrads();
  return applyTypes();
}

LogicalResult TensorParallelPropagation::readStrategy() {
  WalkResult r = module.walk([&](ParamOp p) {
    TP s;
    if (Attribute raw = p->getAttr("xf.tp_split")) {
      // Hand-written IR may carry anything here: check before reading.
      auto a = dyn_cast<DictionaryAttr>(raw);
      IntegerAttr dim = a ? a.getAs<IntegerAttr>("dim") : IntegerAttr();
      IntegerAttr blocks = a ? a.getAs<IntegerAttr>("blocks") : IntegerAttr();
      if (!dim || !blocks || blocks.getInt() < 1) {
        p.emitOpError("llcdist-partition: 'xf.tp_split' must be a dictionary "
                      "{dim = D : i64, blocks = B : i64} with B >= 1, got ")
            << raw;
        return WalkResult::interrupt();
      }
      s = TP::split(dim.getInt(), blocks.getInt());
    }
    auto [it, inserted] = params.try_emplace(p.getName(), s);
    if (!inserted && it->second != s) {
      p.emitOpError("llcdist-partition: parameter '") << p.getName() << "' is annotated with two different tp splits";
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return failure(r.wasInterrupted());
}

LogicalResult TensorParallelPropagation::replicateKvHeads() {
  WalkResult r = module.walk([&](AttentionOp at) -> WalkResult {
    int64_t nkv = at.getNumKvHeads();
    // Selective recomputation's copy (llcdist-recompute) reads the forward's
    // saved k and v: the forward's attention checks and marks their projections.
    if (nkv >= tp || at->hasAttr(kRecomputedAttr))
      return WalkResult::advance();
    if (tp % nkv != 0) {
      at.emitOpError("llcdist-partition: tp=")
          << tp << " is not a multiple of num_kv_heads=" << nkv << "; kv heads replicate only when they divide tp";
      return WalkResult::interrupt();
    }
    for (Value v : {at.getK(), at.getV()}) {
      if (auto rope = v.getDefiningOp<RopeOp>())
        v = rope->getOperand(0);
      auto lin = v.getDefiningOp<LinearOp>();
      auto w = lin ? lin.getWeight().getDefiningOp<ParamOp>() : ParamOp();
      bool outIn = lin && lin.getLayout() == WeightLayout::OutIn;
      TP want = w ? params.lookup(w.getName()) : TP{};
      if (!w || want != TP::split(outIn ? 0 : 1)) {
        at.emitOpError("llcdist-partition: num_kv_heads=")
            << nkv << " < tp=" << tp
            << " replicates kv heads, which needs k and v each from its own "
               "column-parallel linear of an xf.param (not a fused q|k|v); choose "
               "tp dividing the kv heads";
        return WalkResult::interrupt();
      }
      SmallVector<ParamOp> ps{w};
      if (Value bias = lin.getBias())
        if (auto b = bias.getDefiningOp<ParamOp>())
          ps.push_back(b);
      for (ParamOp p : ps) {
        TP &s = params[p.getName()];
        s.replicas = tp / nkv;
        kvReplicaGrads.insert(p.getName());
      }
    }
    return WalkResult::advance();
  });
  return failure(r.wasInterrupted());
}

void TensorParallelPropagation::reduceKvReplicaGrads() {
  func::FuncOp opt = getOptimizerStep(module);
  if (!opt || kvReplicaGrads.empty())
    return;
  OpBuilder b = OpBuilder::atBlockBegin(&opt.getBody().front());
  SmallVector<StringRef> names;
  int64_t replicas = 1;
  for (const auto &entry : kvReplicaGrads) {
    names.push_back(entry.getKey());
    replicas = params.lookup(entry.getKey()).replicas;
  }
  llvm::sort(names);
  AllReduceGradsOp::create(b, opt.getLoc(), "tp", "sum",
                           "kv-head replication: the tp ranks sharing a kv head each hold its "
                           "projections' gradient summed over their own query heads only",
                           stringifyCollectiveOrigin(CollectiveOrigin::KvReplica), b.getStrArrayAttr(names),
                           b.getI64IntegerAttr(replicas), /*exclude=*/ArrayAttr());
}

LogicalResult TensorParallelPropagation::propagate(Block &block) {
  return llcdist::xf::detail::visitOps(block, [&](Operation *op) { return visit(op); });
}

Value TensorParallelPropagation::allReduce(Value v, Operation *after, const PartialSum &why) {
  OpBuilder b(after->getContext());
  b.setInsertionPointAfter(after);
  auto ar = AllReduceOp::create(b, after->getLoc(), v, "tp", why.reason, stringifyCollectiveOrigin(why.origin));
  v.replaceAllUsesExcept(ar.getResult(), ar);
  state[ar.getResult()] = TP{};
  return ar.getResult();
}

void TensorParallelPropagation::markVocabParallel(Operation *op) {
  op->setAttr("xf.vocab_parallel_axis", StringAttr::get(op->getContext(), "tp"));
}

bool TensorParallelPropagation::deferWholeOperand(AddOp add) {
  Value lhs = add.getLhs(), rhs = add.getRhs();
  const bool lhsPartial = of(lhs).kind == TP::Partial;
  if (lhsPartial == (of(rhs).kind == TP::Partial))
    return false;
  Value part = lhsPartial ? lhs : rhs, whole = lhsPartial ? rhs : lhs;
  TP w = of(whole);
  if ((w.kind != TP::R && w.kind != TP::Seq) || deferredWhole.count(part) || !part.hasOneUse() ||
      !add.getResult().hasOneUse() || !isa<AddOp>(*add.getResult().user_begin()))
    return false;
  partial(add.getResult(), partialReason.lookup(part));
  deferredWhole[add.getResult()] = whole;
  return true;
}

bool TensorParallelPropagation::extendDeferredSum(AddOp add) {
  Value lhs = add.getLhs(), rhs = add.getRhs();
  const bool lhsDeferred = deferredWhole.count(lhs);
  Value sum = lhsDeferred ? lhs : rhs, other = lhsDeferred ? rhs : lhs;
  auto prev = sum.getDefiningOp<AddOp>();
  if (!deferredWhole.count(sum) || deferredWhole.count(other) || of(other).kind != TP::Partial || !other.hasOneUse() ||
      !prev)
    return false;
  // prev = whole + part: part + other first, the whole after.
  Value whole = deferredWhole.lookup(sum);
  Value part = prev.getLhs() == whole ? prev.getRhs() : prev.getLhs();
  const PartialSum why = partialReason.lookup(sum);
  OpBuilder b(add);
  auto partials = AddOp::create(b, add.getLoc(), part, other);
  partial(partials.getResult(), why);
  add->setOperands({whole, partials.getResult()});
  deferredWhole.erase(sum);
  state.erase(sum);
  partialReason.erase(sum);
  prev.erase();
  partial(add.getResult(), why);
  deferredWhole[add.getResult()] = whole;
  // The sum goes on into another add, or its consumer needs it now (the
  // layer's last residual add, StableLM's parallel block: x + attn + mlp).
  if (!add.getResult().hasOneUse() || !isa<AddOp>(*add.getResult().user_begin()))
    finishDeferredSum(add.getResult());
  return true;
}

void TensorParallelPropagation::finishDeferredSum(Value sum) {
  auto add = sum.getDefiningOp<AddOp>();
  Value whole = deferredWhole.lookup(sum);
  deferredWhole.erase(sum);
  Value part = add.getLhs() == whole ? add.getRhs() : add.getLhs();
  // Reduced as the whole operand is split: over the sequence, or whole.
  if (of(whole).kind == TP::Seq)
    reduceScatter(part);
  else
    allReduce(part, part.getDefiningOp(), partialReason.lookup(part));
  state[sum] = of(whole);
  partialReason.erase(sum);
}

void TensorParallelPropagation::reducePartialOperands(Operation *op) {
  for (Value v : llvm::to_vector(op->getOperands()))
    if (deferredWhole.count(v) && !(isa<AddOp>(op) && extendDeferredSum(cast<AddOp>(op))))
      finishDeferredSum(v);
  bool sumOfPartials =
      isa<AddOp>(op) && llvm::all_of(op->getOperands(), [&](Value v) { return of(v).kind == TP::Partial; });
  if (sumOfPartials || isa<AllReduceOp, ReduceScatterOp>(op) || (sp && isa<AccumulateGradOp>(op)))
    return;
  if (auto add = dyn_cast<AddOp>(op); add && deferWholeOperand(add))
    return;
  for (Value v : llvm::to_vector(op->getOperands())) {
    if (of(v).kind != TP::Partial)
      continue;
    // The MoE load-balancing statistics [E] under sequence parallelism: each
    // rank's routers add their own tokens' to them, the layers pass them on
    // as partial sums, reduced once where the loss reads them.
    if (isa<LayerOp, MoeRouterStatsOp>(op) && rank(v) == 1)
      continue;
    // With sequence parallelism an activation entering the sequence region
    // is reduce-scattered along the sequence instead of all-reduced.
    if (sp && onSequenceSlice(op) && rank(v) == 3)
      reduceScatter(v);
    else
      allReduce(v, v.getDefiningOp(), partialReason.lookup(v));
  }
}

void TensorParallelPropagation::gatherSequenceOperands(Operation *op) {
  if (!sp || onSequenceSlice(op) || isa<AllGatherOp, ReduceScatterOp, AllReduceOp>(op))
    return;
  for (OpOperand &use : op->getOpOperands()) {
    Value v = use.get();
    TP s = of(v);
    if (s.kind != TP::Seq)
      continue;
    Value &whole = gathered[v];
    if (!whole) {
      OpBuilder b(op->getContext());
      if (Operation *def = v.getDefiningOp())
        b.setInsertionPointAfter(def);
      else
        b.setInsertionPointToStart(cast<BlockArgument>(v).getOwner());
      auto t = cast<RankedTensorType>(v.getType());
      auto ag = AllGatherOp::create(b, v.getLoc(), t, v, "tp", s.dim,
                                    "sequence parallelism: this op needs the whole "
                                    "sequence of a sequence-split activation",
                                    stringifyCollectiveOrigin(CollectiveOrigin::SequenceParallel));
      whole = ag.getResult();
      state[whole] = TP{};
    }
    use.set(whole);
  }
}

void TensorParallelPropagation::reduceScatter(Value v) {
  OpBuilder b(v.getContext());
  b.setInsertionPointAfter(v.getDefiningOp());
  auto rs = ReduceScatterOp::create(b, v.getLoc(), v.getType(), v, "tp", 1,
                                    partialReason.lookup(v).reason + "; sequence parallelism keeps the sum's slice of "
                                                                     "the sequence",
                                    stringifyCollectiveOrigin(partialReason.lookup(v).origin));
  v.replaceAllUsesExcept(rs.getResult(), rs);
  state[rs.getResult()] = TP::seq(1);
}

LogicalResult TensorParallelPropagation::checkSequenceParallelEntry() {
  bool splitTable = false;
  module.walk([&](EmbeddingOp e) {
    if (auto p = e.getTable().getDefiningOp<ParamOp>())
      splitTable |= params.lookup(p.getName()).kind == TP::Split;
  });
  if (!splitTable)
    return module.emitError("llcdist-partition: sequence parallelism needs the "
                            "vocabulary-parallel embedding (its partial lookup is "
                            "where the sequence is scattered); do not replicate the "
                            "embeddings");
  return success();
}

LogicalResult TensorParallelPropagation::finishSequenceParallel() {
  func::FuncOp opt = getOptimizerStep(module);
  if (!opt || tpPartialGrads.empty())
    return success();
  OpBuilder b = OpBuilder::atBlockBegin(&opt.getBody().front());
  SmallVector<StringRef> names;
  for (const auto &entry : tpPartialGrads)
    names.push_back(entry.getKey());
  llvm::sort(names);
  AllReduceGradsOp::create(b, opt.getLoc(), "tp", "sum",
                           "sequence parallelism: these parameters act on each rank's slice of the "
                           "sequence, so their gradients are partial sums over tp",
                           stringifyCollectiveOrigin(CollectiveOrigin::SequenceParallel), b.getStrArrayAttr(names),
                           /*group_size=*/IntegerAttr(), /*exclude=*/ArrayAttr());
  return success();
}

LogicalResult TensorParallelPropagation::visit(Operation *op) {
  reducePartialOperands(op);
  gatherSequenceOperands(op);
  if (auto rule = dyn_cast<TensorParallelOpInterface>(op))
    return rule.propagateTensorParallel(*this);
  if (op->hasTrait<OpTrait::Elementwise>())
    return elementwise(op);
  return op->emitOpError("llcdist-partition: no tensor-parallel rule for this op (no "
                         "TensorParallelOpInterface model, not Elementwise: "
                         "docs/adding-an-op.md)");
}

LogicalResult TensorParallelPropagation::visitLayer(LayerOp call) {
  if (failed(
          llcdist::xf::detail::propagateLayer(call, symbols, state, bodyArgs, [&](Block &b) { return propagate(b); })))
    return failure();
  // A partial sum a layer returns (the load-balancing statistics under
  // sequence parallelism) keeps its reason: its all-reduce says why.
  auto ret = cast<func::ReturnOp>(symbols.lookup<func::FuncOp>(call.getCallee()).getBody().front().getTerminator());
  for (auto [r, v] : llvm::zip(call.getResults(), ret.getOperands()))
    if (of(r).kind == TP::Partial)
      if (auto it = partialReason.find(v); it != partialReason.end()) {
        PartialSum why = it->second; // (inserting may move the map's entries)
        partialReason[r] = std::move(why);
      }
  return success();
}

LogicalResult TensorParallelPropagation::applyTypes() {
  Builder b(module.getContext());
  WalkResult r = module.walk([&](ParamOp p) {
    // The request becomes the result: xf.tp_split -> xf.sharding.
    p->removeAttr("xf.tp_split");
    TP s = params.lookup(p.getName());
    if (s.kind != TP::Split)
      return WalkResult::advance();
    SmallVector<NamedAttribute> sh{b.getNamedAttr("axis", b.getStringAttr("tp")),
                                   b.getNamedAttr("dim", b.getI64IntegerAttr(s.dim)),
                                   b.getNamedAttr("blocks", b.getI64IntegerAttr(s.blocks)),
                                   b.getNamedAttr("global_shape", b.getDenseI64ArrayAttr(p.getType().getShape()))};
    if (s.replicas > 1) // kv-head replication (absent: every rank its own part)
      sh.push_back(b.getNamedAttr("replicas", b.getI64IntegerAttr(s.replicas)));
    p->setAttr("xf.sharding", b.getDictionaryAttr(sh));
    return WalkResult::advance();
  });
  (void)r;
  for (auto &[value, s] : state) {
    if (s.kind != TP::Split && s.kind != TP::Seq)
      continue;
    Value v = value;
    auto t = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> dims(t.getShape());
    int64_t parts = tp / s.replicas;
    if (dims[s.dim] % (parts * s.blocks) != 0)
      return emitError(v.getLoc(), "llcdist-partition: tp=")
             << tp << " does not divide dimension " << s.dim << " of " << t << (s.blocks > 1 ? " (per block)" : "")
             << (s.replicas > 1 ? " into kv-head parts" : "");
    dims[s.dim] /= parts;
    v.setType(RankedTensorType::get(dims, t.getElementType()));
  }
  llcdist::xf::detail::refreshFunctionTypes(module);
  return success();
}

LogicalResult llcdist::xf::partitionTensorParallel(ModuleOp module, int64_t tp, bool sequenceParallel) {
  return TensorParallelPropagation(module, tp, sequenceParallel).run();
}
