//===- LowerOps.cpp - xf ops to plan.kernel calls on a value→buffer map ---===//
//
// One kernel call (or two, for an unfused gradient) per xf op, each value in
// its own buffer. Layer calls are expanded: a layer body is lowered once per
// call with `{i}` bound to the call's index, so the program lists every
// layer's kernels and every parameter's buffers.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace llcdist;
using namespace llcdist::xf;
using namespace llcdist::xftoplan;

namespace {
/// The ops that compute a parameter's gradient (dW, db, a norm's or an
/// embedding's weight gradient): the lowering can write them straight into
/// the gradient buffer.
bool isParamGradient(Operation *op) {
  return isa_and_nonnull<LinearGradWeightOp, LinearGradBiasOp, EmbeddingGradOp,
                         AddPositionEmbeddingGradOp, RMSNormGradWeightOp,
                         LayerNormGradParamsOp>(op);
}

/// True when every result of `v`'s defining op is only added into a
/// parameter's gradient: the kernel then writes the gradients directly.
bool isFused(Value v) {
  Operation *d = v.getDefiningOp();
  if (!isParamGradient(d))
    return false;
  return llvm::all_of(d->getResults(), [](Value r) {
    return r.hasOneUse() && isa<AccumulateGradOp>(*r.getUsers().begin());
  });
}
} // namespace

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
    return NameLoc::get(b.getStringAttr(instantiateLayerName(nl.getName().getValue(), s.layer)),
                        nl.getChildLoc());
  return op->getLoc();
}

//===----------------------------------------------------------------------===//
// Kernel attributes
//===----------------------------------------------------------------------===//

NamedAttribute OpLowering::layout(WeightLayout l) {
  return str("layout", l == WeightLayout::OutIn ? "out_in" : "in_out");
}

SmallVector<NamedAttribute> OpLowering::withShardAxis(Operation *op,
                                                      SmallVector<NamedAttribute> attrs) {
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
  SmallVector<NamedAttribute> attrs = withRealVocab(
      realVocab, {i64("M", m), i64("V", lastDim(logits)), b.getNamedAttr("shard_axis", axis)});
  Buf lg = use(s, logits), tg = use(s, targets);
  Buf rowMax = newBuffer(label(op, s) + ".row_max", "scratch", pb.f64Type({m}));
  Buf rowSums = newBuffer(label(op, s) + ".row_sums", "scratch", pb.f64Type({2 * m}));
  auto allReduce = [&](Buf x, StringRef reduction, StringRef payload, StringRef why) {
    plan::KernelOp k = kernel("all_reduce", {arg("x", b.getArrayAttr({x}))},
                              {b.getNamedAttr("axis", axis), str("op", reduction)},
                              NameLoc::get(b.getStringAttr(why), loc));
    k->setAttr("plan.payload", b.getStringAttr(payload));
    plan::setCollectiveOrigin(k, xf::CollectiveOrigin::VocabParallelLoss);
  };
  kernel("cross_entropy_max", {arg("logits", lg), arg("targets", tg), arg("row_max", rowMax)}, attrs,
         loc);
  allReduce(rowMax, "max", "row maxima",
            "vocabulary-parallel cross entropy: every row's maximum over the shards");
  kernel("cross_entropy_sums",
         {arg("logits", lg), arg("targets", tg), arg("row_max", rowMax), arg("row_sums", rowSums)},
         attrs, loc);
  allReduce(rowSums, "sum", "row sums",
            "vocabulary-parallel cross entropy: Σ exp and the target logit over the shards");
  args.push_back(arg("row_max", rowMax));
  args.push_back(arg("row_sums", rowSums));
}

SmallVector<NamedAttribute> OpLowering::withRealVocab(std::optional<uint64_t> real,
                                                      SmallVector<NamedAttribute> attrs) {
  if (real)
    attrs.push_back(i64("real_vocab", int64_t(*real)));
  return attrs;
}

SmallVector<NamedAttribute> OpLowering::ropeAttrs(Value x, int64_t hd, APFloat theta,
                                                  DictionaryAttr scaling) {
  SmallVector<NamedAttribute> attrs{i64("B", dim(x, 0)), i64("S", dim(x, 1)),
                                    i64("n", lastDim(x) / hd), i64("hd", hd),
                                    f64("theta", theta.convertToDouble())};
  if (scaling) {
    attrs.push_back(flag("llama3", true));
    for (StringRef key : {"factor", "low_freq_factor", "high_freq_factor"})
      attrs.push_back(f64(key, scaling.getAs<FloatAttr>(key).getValueAsDouble()));
    // An integer in the plan format (and in Hugging Face's config).
    Attribute original = scaling.get("original_max_position_embeddings");
    attrs.push_back(i64("original_max_position_embeddings",
                        isa<IntegerAttr>(original)
                            ? cast<IntegerAttr>(original).getInt()
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
      if (s.regathered.insert(v).second &&
          failed(lowerOp(ag, s, BackwardPart::WeightGradients)))
        return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

LogicalResult OpLowering::lowerOp(Operation *op, Scope &s, BackwardPart part) {
  if (part == BackwardPart::WeightGradients && deferredToW(op) &&
      failed(regatherForWeights(op, s)))
    return failure();
  if (failed(lowerOpImpl(op, s, part)) || badGradTarget)
    return failure();
  return success();
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
  auto inThisPart = [&](Operation *op) { return inPart(op, part); };
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
  Location loc = provenance(op, s);
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](ParamOp p) {
        std::string name = instantiateLayerName(p.getName(), s.layer);
        ParamInfo &info = params.param(name, p.getType());
        if (auto sh = p->getAttrOfType<DictionaryAttr>("xf.sharding"))
          info.sharding = sh;
        s.bufs[p.getResult()] = {info.working};
        // FSDP gathers the whole parameter where each scope begins to read
        // it (llcdist-plan-zero): which kernel that is, only this lowering
        // knows.
        if (step.recordParamScopes) {
          SmallVector<NamedAttribute, 4> scope = {str("param", name), str("slot", s.prefix),
                                                  b.getNamedAttr("loc", loc)};
          if (pb.slots > 1) // a pipeline chunk's: the gathered copy is per slot
            scope.push_back(b.getNamedAttr(plan::kSlotsAttr, b.getI64IntegerAttr(pb.slots)));
          pb.recordParamScope(b.getDictionaryAttr(scope));
        }
        for (Operation *user : p->getUsers()) {
          if (isa<EmbeddingOp, AddPositionEmbeddingOp>(user) &&
              user->getOperand(1) == p.getResult())
            info.isTable = true;
          if (isa<LayerNormOp, RMSNormOp>(user) && user->getOperand(1) == p.getResult())
            info.isNormWeight = true;
        }
        return success();
      })
      .Case([&](LayerOp l) { return lowerLayer(l, s, part); })
      .Case([&](EmbeddingOp e) {
        Buf out = def(s, e.getResult(), op);
        kernel("embedding_fwd",
               {arg("ids", use(s, e.getIds())), arg("table", use(s, e.getTable())),
                arg("out", out)},
               withShardAxis(op, {i64("M", numel(e.getIds())), i64("V", dim(e.getTable(), 0)),
                                  i64("H", dim(e.getTable(), 1))}),
               loc);
        return success();
      })
      .Case([&](AddPositionEmbeddingOp e) {
        Buf y = def(s, e.getResult(), op);
        kernel("pos_embedding_fwd",
               {arg("x", use(s, e.getInput())), arg("wpe", use(s, e.getTable())),
                arg("y", y)},
               withShardAxis(op, {i64("B", dim(e.getInput(), 0)), i64("S", dim(e.getInput(), 1)),
                                  i64("H", dim(e.getInput(), 2)), i64("P", dim(e.getTable(), 0))}),
               loc);
        return success();
      })
      .Case([&](LayerNormOp ln) {
        int64_t rows = numel(ln.getInput()) / lastDim(ln.getInput());
        Buf y = def(s, ln.getResult(), op);
        Buf mean = newBuffer(label(op, s) + ".mean", "activation", f32({rows}));
        Buf rstd = newBuffer(label(op, s) + ".rstd", "activation", f32({rows}));
        if (ln.getStats())
          s.bufs[ln.getStats()] = {mean, rstd};
        kernel("layer_norm_fwd",
               {arg("x", use(s, ln.getInput())), arg("gamma", use(s, ln.getWeight())),
                arg("beta", use(s, ln.getBias())), arg("y", y), arg("mean", mean),
                arg("rstd", rstd)},
               {i64("M", rows), i64("H", lastDim(ln.getInput())),
                f64("eps", ln.getEps().convertToDouble())},
               loc);
        return success();
      })
      .Case([&](RMSNormOp rn) {
        int64_t rows = numel(rn.getInput()) / lastDim(rn.getInput());
        Buf y = def(s, rn.getResult(), op);
        Buf rstd = newBuffer(label(op, s) + ".rstd", "activation", f32({rows}));
        if (rn.getStats())
          s.bufs[rn.getStats()] = {rstd};
        kernel("rms_norm_fwd",
               {arg("x", use(s, rn.getInput())), arg("weight", use(s, rn.getWeight())),
                arg("y", y), arg("rstd", rstd)},
               {i64("M", rows), i64("H", lastDim(rn.getInput())),
                f64("eps", rn.getEps().convertToDouble())},
               loc);
        return success();
      })
      .Case([&](LinearOp lin) {
        int64_t k = lastDim(lin.getInput()), n = lastDim(lin.getResult());
        Buf y = def(s, lin.getResult(), op);
        SmallVector<NamedAttribute> args{arg("x", use(s, lin.getInput())),
                                         arg("w", use(s, lin.getWeight())),
                                         arg("y", y)};
        if (lin.getBias())
          args.push_back(arg("bias", use(s, lin.getBias())));
        kernel("linear_fwd", args,
               {i64("M", numel(lin.getInput()) / k), i64("K", k), i64("N", n),
                layout(lin.getLayout())},
               loc);
        return success();
      })
      .Case([&](SplitOp sp) {
        SmallVector<Attribute> outs, sizes;
        for (Value r : sp.getResults()) {
          outs.push_back(def(s, r, op));
          sizes.push_back(b.getI64IntegerAttr(lastDim(r)));
        }
        kernel("split_fwd",
               {arg("x", use(s, sp.getInput())), arg("outs", b.getArrayAttr(outs))},
               {i64("rows", numel(sp.getInput()) / lastDim(sp.getInput())),
                b.getNamedAttr("sizes", b.getArrayAttr(sizes))},
               loc);
        return success();
      })
      .Case([&](RopeOp r) {
        Buf y = def(s, r.getResult(), op);
        kernel("rope_fwd", {arg("x", use(s, r.getInput())), arg("y", y)},
               ropeAttrs(r.getInput(), r.getHeadDim(), r.getTheta(), r.getScalingAttr()),
               loc);
        return success();
      })
      .Case([&](AttentionOp at) {
        Buf out = def(s, at.getResult(), op);
        int64_t B = dim(at.getQ(), 0), S = dim(at.getQ(), 1);
        Buf lse = newBuffer(label(op, s) + ".lse", "activation",
                            f32({B, int64_t(at.getNumHeads()), S}));
        if (at.getLse())
          s.bufs[at.getLse()] = {lse};
        kernel("attention_fwd",
               {arg("q", use(s, at.getQ())), arg("k", use(s, at.getK())),
                arg("v", use(s, at.getV())), arg("out", out), arg("lse", lse)},
               {i64("B", B), i64("S", S), i64("nh", at.getNumHeads()),
                i64("nkv", at.getNumKvHeads()), i64("hd", at.getHeadDim())},
               loc);
        return success();
      })
      .Case([&](GeluTanhOp g) {
        Buf y = def(s, g.getResult(), op);
        kernel("gelu_tanh_fwd", {arg("x", use(s, g.getInput())), arg("y", y)},
               {i64("n", numel(g.getInput()))}, loc);
        return success();
      })
      .Case([&](SwiGLUOp g) {
        Buf y = def(s, g.getResult(), op);
        kernel("swiglu_fwd",
               {arg("gate", use(s, g.getGate())), arg("up", use(s, g.getUp())),
                arg("y", y)},
               {i64("n", numel(g.getGate()))}, loc);
        return success();
      })
      .Case([&](AddOp a) {
        Buf y = def(s, a.getResult(), op);
        kernel("add",
               {arg("a", use(s, a.getLhs())), arg("b", use(s, a.getRhs())),
                arg("y", y)},
               {i64("n", numel(a.getLhs()))}, loc);
        return success();
      })
      .Case([&](CrossEntropyOp ce) {
        s.bufs[ce.getLoss()] = {lossBuf};
        SmallVector<NamedAttribute> args{arg("logits", use(s, ce.getLogits())),
                                         arg("targets", use(s, ce.getTargets())),
                                         arg("loss", lossBuf)};
        vocabParallelStats(op, s, ce.getLogits(), ce.getTargets(), ce.getRealVocab(), loc, args);
        kernel("cross_entropy_fwd", args,
               withRealVocab(ce.getRealVocab(),
                             withShardAxis(op, {i64("M", numel(ce.getTargets())),
                                                i64("V", lastDim(ce.getLogits())),
                                                f64("scale", 1.0 / double(step.microbatches))})),
               loc);
        return success();
      })
      // --- backward -----------------------------------------------------------
      .Case([&](CrossEntropyGradOp g) {
        // The forward's statistics are not kept to the backward (a
        // pipeline's or recompute's scopes would have to carry them): the
        // backward recomputes them with the same collectives.
        Buf d = def(s, g.getResult(), op);
        SmallVector<NamedAttribute> args{arg("logits", use(s, g.getLogits())),
                                         arg("targets", use(s, g.getTargets())),
                                         arg("dlogits", d)};
        vocabParallelStats(op, s, g.getLogits(), g.getTargets(), g.getRealVocab(), loc, args);
        kernel("cross_entropy_bwd", args,
               withRealVocab(g.getRealVocab(),
                             withShardAxis(op, {i64("M", numel(g.getTargets())),
                                                i64("V", lastDim(g.getLogits())),
                                                f64("scale", g.getScale().convertToDouble())})),
               loc);
        return success();
      })
      .Case([&](LinearGradInputOp g) {
        int64_t k = lastDim(g.getResult()), n = lastDim(g.getDy());
        Buf dx = def(s, g.getResult(), op);
        kernel("linear_bwd_input",
               {arg("dy", use(s, g.getDy())), arg("w", use(s, g.getWeight())),
                arg("dx", dx)},
               {i64("M", numel(g.getDy()) / n), i64("K", k), i64("N", n),
                layout(g.getLayout()), flag("accumulate", false)},
               loc);
        return success();
      })
      .Case([&](LinearGradWeightOp g) {
        int64_t k = lastDim(g.getInput()), n = lastDim(g.getDy());
        auto [dw, acc] = gradTarget(s, g.getResult(), op);
        kernel("linear_bwd_weight",
               {arg("dy", use(s, g.getDy())), arg("x", use(s, g.getInput())),
                arg("dw", dw)},
               {i64("M", numel(g.getDy()) / n), i64("K", k), i64("N", n),
                layout(g.getLayout()), flag("accumulate", acc)},
               loc);
        return success();
      })
      .Case([&](LinearGradBiasOp g) {
        int64_t n = lastDim(g.getDy());
        auto [db, acc] = gradTarget(s, g.getResult(), op);
        kernel("linear_bwd_bias", {arg("dy", use(s, g.getDy())), arg("db", db)},
               {i64("M", numel(g.getDy()) / n), i64("N", n), flag("accumulate", acc)},
               loc);
        return success();
      })
      .Case([&](EmbeddingGradOp g) {
        auto [dt, acc] = gradTarget(s, g.getResult(), op);
        kernel("embedding_bwd_weight",
               {arg("ids", use(s, g.getIds())), arg("dout", use(s, g.getDy())),
                arg("dtable", dt)},
               withShardAxis(op, {i64("M", numel(g.getIds())), i64("V", dim(g.getResult(), 0)),
                                  i64("H", dim(g.getResult(), 1)), flag("accumulate", acc)}),
               loc);
        return success();
      })
      .Case([&](AddPositionEmbeddingGradOp g) {
        auto [dt, acc] = gradTarget(s, g.getResult(), op);
        kernel("pos_embedding_bwd_weight", {arg("dy", use(s, g.getDy())), arg("dwpe", dt)},
               withShardAxis(op, {i64("B", dim(g.getDy(), 0)), i64("S", dim(g.getDy(), 1)),
                                  i64("H", dim(g.getDy(), 2)), i64("P", dim(g.getResult(), 0)),
                                  flag("accumulate", acc)}),
               loc);
        return success();
      })
      .Case([&](LayerNormGradInputOp g) {
        auto st = s.bufs.lookup(g.getStats());
        Buf dx = def(s, g.getResult(), op);
        kernel("layer_norm_bwd_input",
               {arg("dy", use(s, g.getDy())), arg("x", use(s, g.getInput())),
                arg("gamma", use(s, g.getWeight())), arg("mean", st[0]),
                arg("rstd", st[1]), arg("dx", dx)},
               {i64("M", numel(g.getDy()) / lastDim(g.getDy())),
                i64("H", lastDim(g.getDy()))},
               loc);
        return success();
      })
      .Case([&](LayerNormGradParamsOp g) {
        auto st = s.bufs.lookup(g.getStats());
        auto [dg, acc] = gradTarget(s, g.getDweight(), op);
        auto [db, acc2] = gradTarget(s, g.getDbias(), op);
        (void)acc2; // fused together or not at all (isFused checks both)
        kernel("layer_norm_bwd_weight",
               {arg("dy", use(s, g.getDy())), arg("x", use(s, g.getInput())),
                arg("mean", st[0]), arg("rstd", st[1]), arg("dgamma", dg),
                arg("dbeta", db)},
               {i64("M", numel(g.getDy()) / lastDim(g.getDy())),
                i64("H", lastDim(g.getDy())), flag("accumulate", acc)},
               loc);
        return success();
      })
      .Case([&](RMSNormGradInputOp g) {
        Buf dx = def(s, g.getResult(), op);
        kernel("rms_norm_bwd_input",
               {arg("dy", use(s, g.getDy())), arg("x", use(s, g.getInput())),
                arg("weight", use(s, g.getWeight())),
                arg("rstd", use(s, g.getStats())), arg("dx", dx)},
               {i64("M", numel(g.getDy()) / lastDim(g.getDy())),
                i64("H", lastDim(g.getDy()))},
               loc);
        return success();
      })
      .Case([&](RMSNormGradWeightOp g) {
        auto [dw, acc] = gradTarget(s, g.getResult(), op);
        kernel("rms_norm_bwd_weight",
               {arg("dy", use(s, g.getDy())), arg("x", use(s, g.getInput())),
                arg("rstd", use(s, g.getStats())), arg("dweight", dw)},
               {i64("M", numel(g.getDy()) / lastDim(g.getDy())),
                i64("H", lastDim(g.getDy())), flag("accumulate", acc)},
               loc);
        return success();
      })
      .Case([&](RopeGradOp r) {
        Buf dx = def(s, r.getResult(), op);
        kernel("rope_bwd", {arg("dy", use(s, r.getDy())), arg("dx", dx)},
               ropeAttrs(r.getDy(), r.getHeadDim(), r.getTheta(), r.getScalingAttr()),
               loc);
        return success();
      })
      .Case([&](AttentionGradOp g) {
        Buf dq = def(s, g.getDq(), op, ".dq");
        Buf dk = def(s, g.getDk(), op, ".dk");
        Buf dv = def(s, g.getDv(), op, ".dv");
        kernel("attention_bwd",
               {arg("dout", use(s, g.getDout())), arg("q", use(s, g.getQ())),
                arg("k", use(s, g.getK())), arg("v", use(s, g.getV())),
                arg("out", use(s, g.getOut())), arg("lse", use(s, g.getLse())),
                arg("dq", dq), arg("dk", dk), arg("dv", dv)},
               {i64("B", dim(g.getQ(), 0)), i64("S", dim(g.getQ(), 1)),
                i64("nh", g.getNumHeads()), i64("nkv", g.getNumKvHeads()),
                i64("hd", g.getHeadDim())},
               loc);
        return success();
      })
      .Case([&](GeluTanhGradOp g) {
        Buf dx = def(s, g.getResult(), op);
        kernel("gelu_tanh_bwd",
               {arg("dy", use(s, g.getDy())), arg("x", use(s, g.getInput())),
                arg("dx", dx)},
               {i64("n", numel(g.getDy()))}, loc);
        return success();
      })
      .Case([&](SwiGLUGradOp g) {
        Buf dg = def(s, g.getDgate(), op, ".dgate");
        Buf du = def(s, g.getDup(), op, ".dup");
        kernel("swiglu_bwd",
               {arg("dy", use(s, g.getDy())), arg("gate", use(s, g.getGate())),
                arg("up", use(s, g.getUp())), arg("dgate", dg), arg("dup", du)},
               {i64("n", numel(g.getDy()))}, loc);
        return success();
      })
      .Case([&](ConcatOp c) {
        SmallVector<Attribute> ins, sizes;
        for (Value v : c.getInputs()) {
          ins.push_back(use(s, v));
          sizes.push_back(b.getI64IntegerAttr(lastDim(v)));
        }
        Buf dx = def(s, c.getResult(), op);
        kernel("split_bwd", {arg("douts", b.getArrayAttr(ins)), arg("dx", dx)},
               {i64("rows", numel(c.getResult()) / lastDim(c.getResult())),
                b.getNamedAttr("sizes", b.getArrayAttr(sizes))},
               loc);
        return success();
      })
      .Case([&](AllReduceOp ar) {
        // In place: the partial value has no other use.
        Buf buf = use(s, ar.getInput());
        s.bufs[ar.getResult()] = {buf};
        plan::KernelOp k = kernel("all_reduce", {arg("x", b.getArrayAttr({buf}))},
                                  {str("axis", ar.getAxis()), str("op", "sum")},
                                  NameLoc::get(ar.getReasonAttr(), loc));
        k->setAttr("plan.payload", b.getStringAttr("activations"));
        plan::setCollectiveOrigin(k, ar);
        return success();
      })
      .Case<AllGatherOp, ReduceScatterOp>([&](Operation *o) {
        // x [outer, inner_x] <-> y [outer, inner_y] along `dim`: outer is the
        // product of the dimensions before it, inner that of the local slice.
        bool gather = isa<AllGatherOp>(o);
        Value local = gather ? o->getOperand(0) : o->getResult(0);
        int64_t d = o->getAttrOfType<IntegerAttr>("dim").getInt();
        auto lt = cast<RankedTensorType>(local.getType());
        int64_t outer = 1, inner = 1;
        for (int64_t i = 0; i < lt.getRank(); ++i)
          (i < d ? outer : inner) *= lt.getDimSize(i);
        Buf y = def(s, o->getResult(0), o);
        SmallVector<NamedAttribute> attrs{b.getNamedAttr("axis", o->getAttr("axis")),
                                          i64("outer", outer), i64("inner", inner)};
        if (!gather)
          attrs.push_back(str("op", "sum"));
        plan::KernelOp k = kernel(gather ? "all_gather" : "reduce_scatter",
                                  {arg("x", use(s, o->getOperand(0))), arg("y", y)}, attrs,
                                  NameLoc::get(o->getAttrOfType<StringAttr>("reason"), loc));
        k->setAttr("plan.payload", b.getStringAttr("activations"));
        plan::setCollectiveOrigin(k, o);
        return success();
      })
      .Case([&](BiasAddOp ba) {
        Buf y = use(s, ba.getInput());
        s.bufs[ba.getResult()] = {y};
        int64_t n = lastDim(ba.getInput());
        kernel("bias_add", {arg("y", y), arg("bias", use(s, ba.getBias()))},
               {i64("M", numel(ba.getInput()) / n), i64("N", n)}, loc);
        return success();
      })
      .Case([&](AccumulateGradOp acc) -> LogicalResult {
        if (isFused(acc.getGrad()))
          return success(); // written by the gradient's own kernel
        auto it = params.find(instantiateLayerName(acc.getName(), s.layer));
        if (it == params.end())
          return acc.emitOpError("gradient of a parameter that is never read");
        kernel("accumulate", {arg("x", use(s, acc.getGrad())), arg("y", it->second.grad)},
               {i64("n", numel(acc.getGrad()))}, loc);
        return success();
      })
      .Default([&](Operation *o) {
        return o->emitOpError("llcdist-lower-to-plan: no lowering for this op");
      });
}

