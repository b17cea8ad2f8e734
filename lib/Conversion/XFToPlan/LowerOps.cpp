//===- LowerOps.cpp - xf ops to plan.kernel calls on a value→buffer map ---===//
//
// One kernel call (or two, for an unfused gradient) per xf op, each value in
// its own buffer; each op's rule is its PlanLoweringOpInterface model
// (OpLowerings.cpp). Layer calls are expanded: a layer body is lowered once per
// call with `{i}` bound to the call's index, so the program lists every
// layer's kernels and every parameter's buffers.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"
#include "llcdist/Dialect/XF/Analysis/ModelStats.h"

using namespace mlir;
using namespace llcdist;
using namespace llcdist::xf;
using namespace llcdist::xftoplan;

bool llcdist::xftoplan::isFused(Value v) {
  auto d = dyn_cast_or_null<PlanLoweringOpInterface>(v.getDefiningOp());
  if (!d || !d.writesParameterGradients())
    return false;
  return llvm::all_of(d->getResults(),
                      [](Value r) { return r.hasOneUse() && isa<AccumulateGradOp>(*r.getUsers().begin()); });
}

//===----------------------------------------------------------------------===//
// Buffers of values
//===----------------------------------------------------------------------===//

std::string OpLowering::label(Operation *op, Scope &s) {
  std::string scope = s.prefix;
  if (auto nl = dyn_cast<NameLoc>(op->getLoc()))
    scope += instantiateLayerName(nl.getName().getValue(), s.layer);
  return scope + ":" + op->getName().stripDialect().str();
}

Buf OpLowering::def(Scope &s, Value v, Operation *op, StringRef suffix) {
  Buf buf = newBuffer(label(op, s) + suffix.str(), "activation", v.getType());
  s.bufs[v] = {buf};
  return buf;
}

Buf OpLowering::use(Scope &s, Value v) {
  auto it = s.bufs.find(v);
  assert(it != s.bufs.end() && "value lowered before its use");
  return it->second.front();
}

Location OpLowering::provenance(Operation *op, Scope &s) {
  if (auto nl = dyn_cast<NameLoc>(op->getLoc()))
    return NameLoc::get(b.getStringAttr(instantiateLayerName(nl.getName().getValue(), s.layer)), nl.getChildLoc());
  return op->getLoc();
}

//===----------------------------------------------------------------------===//
// Kernel attributes
//===----------------------------------------------------------------------===//

NamedAttribute OpLowering::layout(WeightLayout l) {
  return str("layout", l == WeightLayout::OutIn ? "out_in" : "in_out");
}

SmallVector<NamedAttribute> OpLowering::withAttentionBias(Operation *op, SmallVector<NamedAttribute> attrs) {
  for (StringRef name : {"window", "alibi_heads"})
    if (auto v = op->getAttrOfType<IntegerAttr>(name))
      attrs.push_back(i64(name, v.getInt()));
  if (auto axis = op->getAttrOfType<StringAttr>(xf::kAlibiHeadAxisAttr))
    attrs.push_back(b.getNamedAttr("head_axis", axis));
  return attrs;
}

SmallVector<NamedAttribute> OpLowering::withShardAxis(Operation *op, SmallVector<NamedAttribute> attrs) {
  if (auto axis = op->getAttrOfType<StringAttr>("xf.vocab_parallel_axis"))
    attrs.push_back(b.getNamedAttr("shard_axis", axis));
  if (auto axis = op->getAttrOfType<StringAttr>("xf.seq_parallel_axis"))
    attrs.push_back(b.getNamedAttr("shard_axis", axis));
  return attrs;
}

void OpLowering::vocabParallelStats(Operation *op, Scope &s, Value logits, Value targets,
                                    std::optional<uint64_t> realVocab, Location loc,
                                    SmallVector<NamedAttribute> &args) {
  auto axis = op->getAttrOfType<StringAttr>("xf.vocab_parallel_axis");
  if (!axis)
    return;
  int64_t m = numel(targets);
  SmallVector<NamedAttribute> attrs =
      withRealVocab(realVocab, {i64("M", m), i64("V", lastDim(logits)), b.getNamedAttr("shard_axis", axis)});
  Buf lg = use(s, logits), tg = use(s, targets);
  Buf rowMax = newBuffer(label(op, s) + ".row_max", "scratch", pb.f64Type({m}));
  Buf rowSums = newBuffer(label(op, s) + ".row_sums", "scratch", pb.f64Type({2 * m}));
  auto allReduce = [&](Buf x, StringRef reduction, StringRef payload, StringRef why) {
    plan::KernelOp k =
        kernel("all_reduce", {arg("x", b.getArrayAttr({x}))}, {b.getNamedAttr("axis", axis), str("op", reduction)},
               NameLoc::get(b.getStringAttr(why), loc));
    k->setAttr("plan.payload", b.getStringAttr(payload));
    plan::setCollectiveOrigin(k, xf::CollectiveOrigin::VocabParallelLoss);
  };
  kernel("cross_entropy_max", {arg("logits", lg), arg("targets", tg), arg("row_max", rowMax)}, attrs, loc);
  allReduce(rowMax, "max", "row maxima", "vocabulary-parallel cross entropy: every row's maximum over the shards");
  kernel("cross_entropy_sums",
         {arg("logits", lg), arg("targets", tg), arg("row_max", rowMax), arg("row_sums", rowSums)}, attrs, loc);
  allReduce(rowSums, "sum", "row sums",
            "vocabulary-parallel cross entropy: Σ exp and the target logit over the shards");
  args.push_back(arg("row_max", rowMax));
  args.push_back(arg("row_sums", rowSums));
}

SmallVector<NamedAttribute> OpLowering::withRealVocab(std::optional<uint64_t> real, SmallVector<NamedAttribute> attrs) {
  if (real)
    attrs.push_back(i64("real_vocab", int64_t(*real)));
  return attrs;
}

SmallVector<NamedAttribute> OpLowering::ropeAttrs(Value x, int64_t hd, APFloat theta, DictionaryAttr scaling,
                                                  bool interleaved) {
  SmallVector<NamedAttribute> attrs{i64("B", dim(x, 0)), i64("S", dim(x, 1)), i64("n", lastDim(x) / hd), i64("hd", hd),
                                    f64("theta", theta.convertToDouble())};
  if (interleaved) // GPT-J's adjacent pairs; absent: rotate_half (plans of other models unchanged)
    attrs.push_back(flag("interleaved", true));
  if (scaling) {
    attrs.push_back(flag("llama3", true));
    for (StringRef key : {"factor", "low_freq_factor", "high_freq_factor"})
      attrs.push_back(f64(key, scaling.getAs<FloatAttr>(key).getValueAsDouble()));
    // An integer in the plan format (and in Hugging Face's config).
    Attribute original = scaling.get("original_max_position_embeddings");
    attrs.push_back(i64("original_max_position_embeddings",
                        isa<IntegerAttr>(original) ? cast<IntegerAttr>(original).getInt()
                                                   : int64_t(cast<FloatAttr>(original).getValueAsDouble())));
  }
  return attrs;
}

//===----------------------------------------------------------------------===//
// Gradients computed straight into a parameter's gradient
//===----------------------------------------------------------------------===//

std::pair<Buf, bool> OpLowering::gradTarget(Scope &s, Value r, Operation *op) {
  if (isFused(r)) {
    auto acc = cast<AccumulateGradOp>(*r.getUsers().begin());
    std::string name = instantiateLayerName(acc.getName(), s.layer);
    auto it = params.find(name);
    if (it == params.end()) {
      // Hand-written IR: an accumulate_grad naming no xf.param. Report it
      // and lower into a plain buffer; the pass fails on the error.
      acc.emitOpError("names '") << name << "', which is no xf.param of the module";
      badGradTarget = true;
      return {def(s, r, op, ".grad"), false};
    }
    return {it->second.grad, true};
  }
  return {def(s, r, op, ".grad"), false};
}

//===----------------------------------------------------------------------===//
// Split backward (ZB-H1): what B runs and what waits for W
//===----------------------------------------------------------------------===//

bool OpLowering::deferredToW(Operation *op) {
  if (isa<LinearGradWeightOp>(op))
    return true;
  if (isa<ParamOp, LayerOp>(op))
    return false;
  if (auto it = deferredMemo.find(op); it != deferredMemo.end())
    return it->second;
  bool deferred = llvm::any_of(op->getOperands(), [&](Value v) {
    Operation *d = v.getDefiningOp();
    return d && deferredToW(d);
  });
  deferredMemo[op] = deferred;
  return deferred;
}

bool OpLowering::gathersOnlyForW(Operation *op) {
  return isa<AllGatherOp>(op) && !op->use_empty() &&
         llvm::all_of(op->getUsers(), [&](Operation *u) { return deferredToW(u); });
}

bool OpLowering::inPart(Operation *op, BackwardPart part) {
  switch (part) {
  case BackwardPart::Whole:
    return true;
  case BackwardPart::InputGradients:
    return !deferredToW(op) && !gathersOnlyForW(op);
  case BackwardPart::WeightGradients:
    return deferredToW(op);
  }
  llvm_unreachable("unknown backward part");
}

LogicalResult OpLowering::regatherForWeights(Operation *op, Scope &s) {
  for (Value v : op->getOperands())
    if (auto ag = v.getDefiningOp<AllGatherOp>())
      if (s.regathered.insert(v).second && failed(lowerOp(ag, s, BackwardPart::WeightGradients)))
        return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

LogicalResult OpLowering::lowerOp(Operation *op, Scope &s, BackwardPart part) {
  if (part == BackwardPart::WeightGradients && deferredToW(op) && failed(regatherForWeights(op, s)))
    return failure();
  if (failed(lowerOpImpl(op, s, part)) || badGradTarget)
    return failure();
  return success();
}

StringRef llcdist::xftoplan::activationPayload(Value v, bool forward) {
  auto r = dyn_cast<OpResult>(v);
  if (r && isa<LayerOp>(r.getOwner()) && r.getResultNumber() > 0)
    return forward ? "router statistics" : "router statistics gradients";
  return forward ? "activations" : "activation gradients";
}

LogicalResult OpLowering::lowerLayer(LayerOp call, Scope &s, BackwardPart part) {
  auto fn = symbols.lookup<func::FuncOp>(call.getCallee());
  if (!fn)
    return call.emitOpError("callee not found");
  Block &body = fn.getBody().front();
  std::unique_ptr<Scope> &slot = s.inner[call.getOperation()];
  if (!slot) {
    slot = std::make_unique<Scope>();
    slot->layer = call.getIndexAttr().getInt();
    slot->prefix = s.prefix;
    for (auto [a, operand] : llvm::zip(body.getArguments(), call.getOperands()))
      slot->bufs[a] = s.bufs.lookup(operand);
  }
  Scope &inner = *slot;
  // A parameter only where this part reads it (under ZeRO-3 its reads
  // begin here: W's GEMMs read activations and gradients, never weights).
  // A recomputed call runs only what its backward reads.
  const std::optional<llvm::DenseSet<Operation *>> live = opsRunBy(call, fn);
  auto inThisPart = [&](Operation *op) { return (!live || live->contains(op)) && inPart(op, part); };
  for (Operation &op : body.without_terminator())
    if (inThisPart(&op) || (isa<ParamOp>(op) && llvm::any_of(op.getUsers(), inThisPart)))
      if (failed(lowerOp(&op, inner, part)))
        return failure();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  for (auto [r, v] : llvm::zip(call.getResults(), ret.getOperands()))
    if (auto it = inner.bufs.find(v); it != inner.bufs.end())
      s.bufs[r] = it->second;
  return success();
}

LogicalResult OpLowering::lowerOpImpl(Operation *op, Scope &s, BackwardPart part) {
  auto lowering = dyn_cast<PlanLoweringOpInterface>(op);
  if (!lowering)
    return op->emitOpError("llcdist-lower-to-plan: no lowering for this op (it has no "
                           "PlanLoweringOpInterface model: docs/adding-an-op.md)");
  return lowering.lowerToPlan(*this, s, part);
}
