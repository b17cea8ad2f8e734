//===- Optimizer.cpp - the optimizer step: reductions, norm, updates ------===//
//
// The gradient all-reduces over dp and tp (under ZeRO llcdist-plan-zero
// rewrites the dp one), the loss's
// average, the global gradient norm (with clipping), then one AdamW or SGD
// update per parameter this program updates, with its state buffers and its
// plan.param. What a pipeline stage updates is its stage plan's answer
// (OptimizerScope), not decided here.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

using namespace mlir;
using namespace llcdist;
using namespace llcdist::xf;
using namespace llcdist::xftoplan;

namespace {
/// The optimizer function's ops, one method each, into the builder's
/// optimizer subroutine.
class OptimizerLowering {
public:
  OptimizerLowering(ProgramBuilder &pb, ParamBuffers &params, const StepInfo &step, const OptimizerScope &scope)
      : pb(pb), b(pb.b), params(params), step(step), scope(scope) {
    for (const std::string &name : params.order())
      updateGrad[name] = params[name].grad;
  }

  FailureOr<OptimizerChoice> run(func::FuncOp fn);

private:
  void gradientReduction(AllReduceGradsOp ar);
  void lossAverage(AllReduceLossOp ar);
  LogicalResult gradNorm(ClipGradNormOp clip);
  void allReduceSq(Buf sq, StringRef over, const Twine &why, Location loc);
  void updates(Operation *op, AdamWOp adamw, SGDOp sgd);

  plan::KernelOp kernel(StringRef name, ArrayRef<NamedAttribute> args, ArrayRef<NamedAttribute> attrs, Location loc) {
    return pb.kernel(name, args, attrs, loc);
  }
  NamedAttribute arg(StringRef role, Attribute buf) { return pb.arg(role, buf); }
  NamedAttribute i64(StringRef n, int64_t v) { return pb.i64(n, v); }
  NamedAttribute f64(StringRef n, double v) { return pb.f64(n, v); }
  NamedAttribute str(StringRef n, StringRef v) { return pb.str(n, v); }

  ProgramBuilder &pb;
  OpBuilder &b;
  ParamBuffers &params;
  const StepInfo &step;
  const OptimizerScope &scope;
  OptimizerChoice choice;
  /// The gradient each update reads.
  llvm::StringMap<Buf> updateGrad;
};

FailureOr<OptimizerChoice> OptimizerLowering::run(func::FuncOp fn) {
  pb.current = pb.optimizer;
  for (Operation &op : fn.getBody().front().without_terminator()) {
    if (auto ar = dyn_cast<AllReduceGradsOp>(op)) {
      gradientReduction(ar);
    } else if (auto ar = dyn_cast<AllReduceLossOp>(op)) {
      lossAverage(ar);
    } else if (auto clip = dyn_cast<ClipGradNormOp>(op)) {
      if (failed(gradNorm(clip)))
        return failure();
    } else if (isa<AdamWOp, SGDOp>(op)) {
      updates(&op, dyn_cast<AdamWOp>(op), dyn_cast<SGDOp>(op));
    } else {
      return op.emitOpError("llcdist-lower-to-plan: unexpected op in the optimizer step");
    }
  }
  if (!choice.attrs)
    return fn.emitError("llcdist-lower-to-plan: the optimizer step has no "
                        "xf.adamw or xf.sgd");
  return choice;
}

/// The all-reduce of the gradients this program updates that `ar` covers.
void OptimizerLowering::gradientReduction(AllReduceGradsOp ar) {
  SmallVector<Attribute> covered;
  for (const std::string &name : params.order())
    if (ar.covers(name) && scope.updates(name))
      covered.push_back(updateGrad[name]);
  if (covered.empty())
    return;
  SmallVector<NamedAttribute> attrs{str("axis", ar.getAxis()), str("op", ar.getReduction())};
  if (auto g = ar.getGroupSize()) // over sub-groups of the axis (kv-head replicas)
    attrs.push_back(i64("group_size", int64_t(*g)));
  plan::KernelOp k =
      kernel("all_reduce", {arg("x", b.getArrayAttr(covered))}, attrs, NameLoc::get(ar.getReasonAttr(), ar.getLoc()));
  // The experts' gradients (Partition.cpp's reduceExpertGradients) reduce
  // over their replicas: edp, edp+cp, or cp where ep = dp; the
  // sequence-parallel ones (the norms') over tp.
  StringRef axis = ar.getAxis();
  const bool experts = ar.getParams() && (axis == "edp" || axis == "edp+cp" || axis == "cp");
  k->setAttr("plan.payload", b.getStringAttr(ar.getGroupSize() ? "kv-replica gradients"
                                             : experts         ? "expert gradients"
                                             : ar.getParams()  ? "sequence-parallel gradients"
                                                               : "gradients"));
  plan::setCollectiveOrigin(k, ar);
}

/// The loss's average (a pipeline stage before the last has no loss).
void OptimizerLowering::lossAverage(AllReduceLossOp ar) {
  if (!scope.loss)
    return;
  plan::KernelOp k =
      kernel("all_reduce", {arg("x", b.getArrayAttr({scope.loss}))}, {str("axis", ar.getAxis()), str("op", "avg")},
             NameLoc::get(ar.getReasonAttr(), ar.getLoc()));
  k->setAttr("plan.payload", b.getStringAttr("loss"));
  plan::setCollectiveOrigin(k, ar);
}

/// An f64 partial squared norm all-reduced over `over` (kernels never
/// communicate).
void OptimizerLowering::allReduceSq(Buf sq, StringRef over, const Twine &why, Location loc) {
  plan::KernelOp k = kernel("all_reduce", {arg("x", b.getArrayAttr({sq}))}, {str("axis", over), str("op", "sum")},
                            NameLoc::get(b.getStringAttr(why), loc));
  k->setAttr("plan.payload", b.getStringAttr("grad norm"));
  plan::setCollectiveOrigin(k, CollectiveOrigin::GradNorm);
}

/// The global gradient norm and the clipping. Replicated gradients count
/// once; split ones once per shard (summed over their axis); replicated
/// shards (kv heads) once per shard, on the first of its replicas. Each
/// axis that splits gradients (tp, and ep for the experts) has its own
/// partial sum, reduced over it, and added to the replicated ones'.
LogicalResult OptimizerLowering::gradNorm(ClipGradNormOp clip) {
  Location loc = clip.getLoc();
  choice.gradClip = clip.getMaxNorm().convertToDouble();
  struct Split {
    StringAttr axis;
    SmallVector<Attribute> sharded, replicaShards;
    int64_t replicas = 0;
  };
  SmallVector<Attribute> replicated;
  SmallVector<Split> splits; // per axis, in parameter order
  for (const std::string &name : params.order()) {
    ParamInfo &p = params[name];
    if (!scope.updates(name))
      continue; // counted on its home stage
    if (!p.sharding) {
      replicated.push_back(updateGrad[name]);
      continue;
    }
    auto axis = p.sharding.getAs<StringAttr>("axis");
    auto sp = llvm::find_if(splits, [&](const Split &s) { return s.axis == axis; });
    if (sp == splits.end())
      sp = splits.insert(splits.end(), Split{axis, {}, {}, 0});
    auto r = p.sharding.getAs<IntegerAttr>("replicas");
    if (!r) {
      sp->sharded.push_back(updateGrad[name]);
      continue;
    }
    if (sp->replicas && sp->replicas != r.getInt())
      return clip.emitOpError("llcdist-lower-to-plan: sharded parameters with ")
             << sp->replicas << " and " << r.getInt() << " replicas per shard; grad_norm counts one replica count";
    sp->replicas = r.getInt();
    sp->replicaShards.push_back(updateGrad[name]);
  }
  const bool split = !splits.empty();
  if (!split && !scope.pipelined) { // every gradient whole here: one local kernel
    kernel("grad_norm", {arg("norm", scope.gradNorm), arg("grads", b.getArrayAttr(replicated))},
           {f64("max_norm", choice.gradClip)}, loc);
    return success();
  }
  // f64 partial squared norms, all-reduced by the plan, in the order the
  // sums are defined (the split gradients over their axis, the replicated
  // ones added, then the stages).
  SmallVector<Attribute> partials;
  for (Split &sp : splits) {
    Buf part =
        pb.newBuffer(splits.size() == 1 ? std::string("grad_norm.sharded_sq") : "grad_norm.sharded_sq." + sp.axis.str(),
                     "scratch", pb.f64Type({1}));
    SmallVector<NamedAttribute> args{arg("sq", part)}, attrs;
    if (!sp.sharded.empty())
      args.push_back(arg("grads", b.getArrayAttr(sp.sharded)));
    if (!sp.replicaShards.empty()) {
      args.push_back(arg("replica_shards", b.getArrayAttr(sp.replicaShards)));
      attrs.push_back(i64("replicas", sp.replicas));
      attrs.push_back(b.getNamedAttr("replica_axis", sp.axis));
    }
    kernel("grad_norm_sq", args, attrs, loc);
    allReduceSq(part, sp.axis.getValue(), "grad_norm: the split gradients' squared norm over " + sp.axis.getValue(),
                loc);
    partials.push_back(part);
  }
  Buf total = partials.size() == 1 ? cast<FlatSymbolRefAttr>(partials.front()) : Buf();
  if (!replicated.empty() || partials.size() != 1) {
    Buf sq = pb.newBuffer("grad_norm.sq", "scratch", pb.f64Type({1}));
    SmallVector<NamedAttribute> args{arg("sq", sq)};
    if (!replicated.empty())
      args.push_back(arg("grads", b.getArrayAttr(replicated)));
    if (!partials.empty())
      args.push_back(arg("add", b.getArrayAttr(partials)));
    kernel("grad_norm_sq", args, {}, loc);
    total = sq;
  }
  // Each stage holds other parameters (pipeline): the norm sums over pp
  // (under ZeRO llcdist-plan-zero adds dp before it).
  if (scope.pipelined)
    allReduceSq(total, "pp", "grad_norm: every stage's squared norm over pp", loc);
  SmallVector<Attribute> clipped(replicated);
  for (const Split &sp : splits) {
    clipped.append(sp.sharded.begin(), sp.sharded.end());
    clipped.append(sp.replicaShards.begin(), sp.replicaShards.end());
  }
  SmallVector<NamedAttribute> args{arg("sq", total), arg("norm", scope.gradNorm)};
  if (!clipped.empty())
    args.push_back(arg("grads", b.getArrayAttr(clipped)));
  kernel("grad_norm_clip", args, {f64("max_norm", choice.gradClip)}, loc);
  return success();
}

/// One AdamW or SGD update per parameter this program updates, with its
/// state buffers, and every parameter's plan.param.
void OptimizerLowering::updates(Operation *op, AdamWOp adamw, SGDOp sgd) {
  double wd = adamw ? adamw.getWeightDecay().convertToDouble() : sgd.getWeightDecay().convertToDouble();
  choice.attrs = adamw ? b.getDictionaryAttr({str("kind", "adamw"), f64("beta1", adamw.getBeta1().convertToDouble()),
                                              f64("beta2", adamw.getBeta2().convertToDouble()),
                                              f64("eps", adamw.getEps().convertToDouble()), f64("weight_decay", wd)})
                       : b.getDictionaryAttr({str("kind", "sgd"), f64("momentum", sgd.getMomentum().convertToDouble()),
                                              f64("weight_decay", wd)});
  for (const std::string &name : params.order()) {
    ParamInfo &p = params[name];
    bool decays = p.type.getRank() >= 2 && !p.isTable;
    SmallVector<Attribute> state;
    Location loc = NameLoc::get(b.getStringAttr(name), op->getLoc());
    // What the update writes: the parameter (llcdist-plan-zero makes it,
    // or a slice of it, and the state the dp block under ZeRO).
    Buf target = p.value, grad = updateGrad[name];
    // f32, the master's type.
    RankedTensorType stateType = ProgramBuilder::withF32(p.type);
    if (!scope.updates(name)) {
      // A replica: its home stage updates it and sends the new value.
    } else if (adamw) {
      Buf m = pb.newBuffer(name + ".exp_avg", "optimizer_state", stateType);
      Buf v = pb.newBuffer(name + ".exp_avg_sq", "optimizer_state", stateType);
      state = {m, v};
      kernel("adamw", {arg("param", target), arg("grad", grad), arg("m", m), arg("v", v)},
             {f64("beta1", adamw.getBeta1().convertToDouble()), f64("beta2", adamw.getBeta2().convertToDouble()),
              f64("eps", adamw.getEps().convertToDouble()), f64("weight_decay", decays ? wd : 0.0)},
             loc);
    } else {
      double mom = sgd.getMomentum().convertToDouble();
      SmallVector<NamedAttribute> args{arg("param", target), arg("grad", grad)};
      if (mom != 0) {
        Buf buf = pb.newBuffer(name + ".momentum_buffer", "optimizer_state", stateType);
        state = {buf};
        args.push_back(arg("momentum_buf", buf));
      }
      kernel("sgd", args, {f64("momentum", mom), f64("weight_decay", decays ? wd : 0.0)}, loc);
    }
    std::optional<int64_t> replica;
    if (!scope.updates(name))
      replica = scope.replicaOf->at(name);
    emitParam(pb, step, name, p, state, decays, replica, loc);
  }
}
} // namespace

FailureOr<OptimizerChoice> xftoplan::lowerOptimizer(func::FuncOp fn, ProgramBuilder &pb, ParamBuffers &params,
                                                    const StepInfo &step, const OptimizerScope &scope) {
  return OptimizerLowering(pb, params, step, scope).run(fn);
}
