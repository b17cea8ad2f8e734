//===- Autodiff.cpp - reverse-mode autodiff of the xf forward graph -------===//
//
// The backward of each op is written once, next to the op
// (DifferentiableOpInterface, lib/Dialect/XF/IR/XFAutodiff.cpp; the loss and
// layer calls, which need this pass's context, in `GradEmitter`), and used
// twice: inside every layer body (emitting into a new backward body
// whose arguments are the saved forward values) and in the entry function
// (emitting in place, after the loss).
//
//===----------------------------------------------------------------------===//
#include "llcdist/Dialect/XF/Analysis/ModelStats.h"
#include "llcdist/Dialect/XF/IR/XFOps.h"
#include "llcdist/Dialect/XF/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"

#define DEBUG_TYPE "llcdist-autodiff"

namespace llcdist::xf {
#define GEN_PASS_DEF_AUTODIFF
#include "llcdist/Dialect/XF/Transforms/Passes.h.inc"
} // namespace llcdist::xf

using namespace mlir;
using namespace llcdist::xf;

namespace {

/// Whether values of type `t` have gradients: float tensors do; integer ones
/// (token ids, expert ids, the router's counts) do not, and layer bodies
/// neither take nor return gradients for them.
bool carriesGradient(Type t) { return isa<FloatType>(cast<ShapedType>(t).getElementType()); }

/// Gives norms and attention their statistics result (what their backward
/// reads: DifferentiableOpInterface::buildWithSavedStatistics), replacing
/// each such op in `fn` by one that yields it.
void addStatistics(func::FuncOp fn) {
  SmallVector<DifferentiableOpInterface> ops;
  fn.walk([&](DifferentiableOpInterface op) { ops.push_back(op); });
  for (DifferentiableOpInterface op : ops) {
    OpBuilder b(op);
    Operation *repl = op.buildWithSavedStatistics(b);
    if (!repl)
      continue;
    op->getResult(0).replaceAllUsesWith(repl->getResult(0));
    op->erase();
  }
}

/// Emits the backward of a straight-line block of forward ops.
class GradEmitter : public GradientSink {
public:
  /// `fwd` maps a forward value to one usable where backward ops are built.
  GradEmitter(OpBuilder &b, std::function<Value(Value)> fwd,
              const llvm::DenseMap<StringRef, func::FuncOp> &backwardBodies)
      : b(b), fwdFn(std::move(fwd)), backwardBodies(backwardBodies) {}

  void seed(Value v, Value grad) { addGrad(v, grad); }
  Value gradOf(Value v) const { return grads.lookup(v); }

  /// Emits the backward of `ops` (in forward order) in reverse order.
  LogicalResult run(ArrayRef<Operation *> ops) {
    for (Operation *op : llvm::reverse(ops))
      if (failed(differentiate(op)))
        return failure();
    return success();
  }

  Value fwd(Value v) override { return fwdFn(v); }

  /// Adds a gradient contribution to `v`: into its parameter's gradient when
  /// `v` is an xf.param, else summed into the gradient map.
  void addGrad(Value v, Value g) override {
    if (!g || !carriesGradient(v.getType()))
      return;
    if (auto p = v.getDefiningOp<ParamOp>()) {
      AccumulateGradOp::create(b, p.getLoc(), p.getNameAttr(), g);
      return;
    }
    Value &slot = grads[v];
    slot = slot ? AddOp::create(b, g.getLoc(), slot, g).getResult() : g;
  }

  LogicalResult differentiate(Operation *op) {
    if (isa<ParamOp>(op))
      return success();
    if (auto ce = dyn_cast<CrossEntropyOp>(op)) {
      // The loss: its gradient is the seed, scaled by the caller.
      if (!lossScale)
        return ce.emitOpError("autodiff: the loss is not the value returned "
                              "by the entry function");
      Value d = CrossEntropyGradOp::create(b, ce.getLoc(), ce.getLogits().getType(), fwd(ce.getLogits()),
                                           fwd(ce.getTargets()), b.getF64FloatAttr(*lossScale), ce.getRealVocabAttr());
      addGrad(ce.getLogits(), d);
      return success();
    }
    if (auto aux = dyn_cast<MoeAuxLossOp>(op)) {
      // The loss plus the load-balancing loss: the loss's gradient is the
      // seed (its xf.cross_entropy's rule), the probabilities' sums get
      // theirs here, scaled as the loss is over microbatches.
      auto g = MoeAuxLossGradOp::create(b, aux.getLoc(), aux.getProbs().getType(), fwd(aux.getCounts()),
                                        aux.getCoefAttr(), aux.getTopKAttr(), b.getF64FloatAttr(microbatchScale));
      addGrad(aux.getProbs(), g);
      return success();
    }
    // Every other op: skip it when no result has a gradient.
    SmallVector<Value> dys;
    bool any = false;
    for (Value r : op->getResults()) {
      dys.push_back(grads.lookup(r));
      any |= bool(dys.back());
    }
    if (!any)
      return success();
    if (auto l = dyn_cast<LayerOp>(op))
      return differentiateLayer(l, dys);
    if (auto d = dyn_cast<DifferentiableOpInterface>(op))
      return d.buildBackward(b, *this, dys);
    return op->emitOpError("autodiff: no backward rule for this op");
  }

  /// A layer call: a call of its backward body, whose arguments are the
  /// gradients of the layer's outputs and the values it saved.
  LogicalResult differentiateLayer(LayerOp l, ArrayRef<Value> dys) {
    auto bwd = backwardBodies.lookup(l.getCallee());
    if (!bwd)
      return l.emitOpError("autodiff: no backward body for @") << l.getCallee();
    SmallVector<Value> args;
    for (unsigned i = 0, e = numPrimary(l); i < e; ++i) {
      if (!carriesGradient(l.getResult(i).getType()))
        continue;
      if (!dys[i])
        return l.emitOpError("autodiff: layer result #") << i << " has no gradient";
      args.push_back(dys[i]);
    }
    for (Value saved : l.getResults().drop_front(numPrimary(l)))
      args.push_back(fwd(saved));
    auto call = LayerOp::create(b, l.getLoc(), bwd.getFunctionType().getResults(),
                                FlatSymbolRefAttr::get(bwd.getSymNameAttr()), l.getIndexAttr(), args);
    auto differentiable =
        llvm::make_filter_range(l.getOperands(), [](Value v) { return carriesGradient(v.getType()); });
    for (auto [operand, g] : llvm::zip(differentiable, call.getResults()))
      addGrad(operand, g);
    return success();
  }

  /// Results of a forward layer call that are the layer's outputs (the rest
  /// are saved values for its backward).
  static unsigned numPrimary(LayerOp l) {
    if (auto n = l->getAttrOfType<IntegerAttr>("xf.num_outputs"))
      return n.getInt();
    return l.getNumResults();
  }

public:
  /// The cross-entropy's gradient scale (1 / the step's tokens) and the
  /// loss's over microbatches (1 / microbatches): entry functions only.
  std::optional<double> lossScale;
  double microbatchScale = 1.0;

private:
  OpBuilder &b;
  std::function<Value(Value)> fwdFn;
  const llvm::DenseMap<StringRef, func::FuncOp> &backwardBodies;
  llvm::DenseMap<Value, Value> grads;
};

struct AutodiffPass : public llcdist::xf::impl::AutodiffBase<AutodiffPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp entry = getEntryFunction(module);
    if (!entry)
      return signalPassFailure();
    if (entry->hasAttr("xf.train_step")) {
      entry.emitError("autodiff: @") << entry.getSymName() << " is already a training step";
      return signalPassFailure();
    }
    if (!entry.getBody().hasOneBlock()) {
      entry.emitError("autodiff: the entry function must be one block");
      return signalPassFailure();
    }

    // 1. A backward body for every layer body the entry calls.
    SymbolTable symbols(module);
    llvm::MapVector<StringRef, func::FuncOp> bodies;
    entry.walk([&](LayerOp l) {
      if (auto fn = symbols.lookup<func::FuncOp>(l.getCallee()))
        bodies.insert({fn.getSymName(), fn});
    });
    llvm::DenseMap<StringRef, func::FuncOp> backward;
    for (auto &[name, body] : bodies) {
      if (module.lookupSymbol((name + "_bwd").str())) {
        body.emitError("autodiff: @") << name << "_bwd already exists";
        return signalPassFailure();
      }
      FailureOr<func::FuncOp> bwd = buildBackwardBody(body);
      if (failed(bwd))
        return signalPassFailure();
      backward[name] = *bwd;
    }

    // 2. Layer calls now also return the saved values.
    SmallVector<LayerOp> calls;
    entry.walk([&](LayerOp l) { calls.push_back(l); });
    for (LayerOp l : calls) {
      auto body = bodies.lookup(l.getCallee());
      OpBuilder b(l);
      auto nl = LayerOp::create(b, l.getLoc(), body.getFunctionType().getResults(), l.getCalleeAttr(), l.getIndexAttr(),
                                l.getOperands());
      nl->setAttr("xf.num_outputs", b.getI64IntegerAttr(l.getNumResults()));
      for (auto [o, n] : llvm::zip(l.getResults(), nl.getResults()))
        o.replaceAllUsesWith(n);
      l.erase();
    }

    // 3. The entry: forward, then backward in place, before the return.
    addStatistics(entry);
    Block &block = entry.getBody().front();
    auto ret = cast<func::ReturnOp>(block.getTerminator());
    auto ce = ret.getNumOperands() == 1 ? ret.getOperand(0).getDefiningOp<CrossEntropyOp>() : CrossEntropyOp();
    if (auto aux = ret.getNumOperands() == 1 ? ret.getOperand(0).getDefiningOp<MoeAuxLossOp>() : MoeAuxLossOp())
      ce = aux.getLoss().getDefiningOp<CrossEntropyOp>();
    if (!ce) {
      entry.emitError("autodiff: the entry function must return the value of "
                      "an xf.cross_entropy (the loss), or of an xf.moe_aux_loss of one");
      return signalPassFailure();
    }
    SmallVector<Operation *> fwdOps;
    for (Operation &op : block.without_terminator())
      fwdOps.push_back(&op);
    OpBuilder b(ret);
    GradEmitter emit(
        b, [](Value v) { return v; }, backward);
    emit.microbatchScale = 1.0 / double(microbatches(module));
    emit.lossScale = emit.microbatchScale / double(cast<RankedTensorType>(ce.getTargets().getType()).getNumElements());
    if (failed(emit.run(fwdOps)))
      return signalPassFailure();
    entry.setSymName("train_step");
    entry->setAttr("xf.train_step", b.getUnitAttr());
  }

  int64_t microbatches(ModuleOp module) {
    if (auto m = module->getAttrOfType<DictionaryAttr>(kModelAttr))
      if (auto n = m.getAs<IntegerAttr>("microbatches"))
        return std::max<int64_t>(1, n.getInt());
    return 1;
  }

  /// Builds `@<body>_bwd(dy..., saved...) -> (dx...)` and makes `body`
  /// return (y..., saved...); dy and dx only for the float outputs and
  /// inputs (carriesGradient).
  FailureOr<func::FuncOp> buildBackwardBody(func::FuncOp body) {
    if (!body.getBody().hasOneBlock())
      return body.emitError("autodiff: a layer body must be one block");
    addStatistics(body);
    Block &block = body.getBody().front();
    auto ret = cast<func::ReturnOp>(block.getTerminator());
    FunctionType ft = body.getFunctionType();

    OpBuilder mb(body);
    mb.setInsertionPointAfter(body);
    auto dyTypes = llvm::to_vector(llvm::make_filter_range(ft.getResults(), carriesGradient));
    auto bwd =
        func::FuncOp::create(mb, body.getLoc(), (body.getSymName() + "_bwd").str(), mb.getFunctionType(dyTypes, {}));
    bwd.setPrivate();
    bwd->setAttr(kLayerBodyAttr, mb.getUnitAttr());
    bwd->setAttr("xf.backward_of", FlatSymbolRefAttr::get(body.getSymNameAttr()));
    Block *bb = bwd.addEntryBlock();
    OpBuilder b = OpBuilder::atBlockBegin(bb);

    // Forward values the backward reads: parameters are re-read, everything
    // else becomes a saved value (a new argument of the backward body).
    SmallVector<Value> saved;
    llvm::DenseMap<Value, Value> mapped;
    auto fwd = [&](Value v) -> Value {
      if (Value m = mapped.lookup(v))
        return m;
      Value m;
      if (auto p = v.getDefiningOp<ParamOp>()) {
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(bb);
        m = b.clone(*p)->getResult(0);
      } else {
        m = bb->addArgument(v.getType(), v.getLoc());
        saved.push_back(v);
      }
      mapped[v] = m;
      return m;
    };
    const llvm::DenseMap<StringRef, func::FuncOp> noBackwardBodies; // outlives `emit`, which keeps a reference
    GradEmitter emit(b, fwd, noBackwardBodies);
    auto outputs = llvm::make_filter_range(ret.getOperands(), [](Value v) { return carriesGradient(v.getType()); });
    for (auto [r, arg] : llvm::zip(outputs, bb->getArguments()))
      emit.seed(r, arg);
    SmallVector<Operation *> ops;
    for (Operation &op : block.without_terminator())
      ops.push_back(&op);
    if (failed(emit.run(ops)))
      return failure();
    SmallVector<Value> dxs;
    for (BlockArgument a : block.getArguments()) {
      if (!carriesGradient(a.getType()))
        continue;
      Value g = emit.gradOf(a);
      if (!g)
        return body.emitError("autodiff: layer input #") << a.getArgNumber() << " gets no gradient";
      dxs.push_back(g);
    }
    func::ReturnOp::create(b, body.getLoc(), dxs);
    bwd.setFunctionType(b.getFunctionType(bb->getArgumentTypes(), ValueRange(dxs).getTypes()));

    // The forward body returns its outputs, then the saved values.
    SmallVector<Value> results(ret.getOperands());
    results.append(saved.begin(), saved.end());
    OpBuilder rb(ret);
    func::ReturnOp::create(rb, ret.getLoc(), results);
    ret.erase();
    body.setFunctionType(rb.getFunctionType(ft.getInputs(), ValueRange(results).getTypes()));
    return bwd;
  }
};
} // namespace
