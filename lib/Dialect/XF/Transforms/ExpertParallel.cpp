//===- ExpertParallel.cpp - expert parallelism over ep ----------------------===//
//
// Expert parallelism (issue #34, Megatron-LM's --expert-model-parallel-size):
// the ep ranks are drawn from the data-parallel group (ep divides dp; an ep
// group is ep consecutive dp ranks, MeshSpec.h). Each holds E/ep of every
// mixture-of-experts layer's experts, member m experts [m·E/ep, (m+1)·E/ep):
// the stacked expert weights [E, O, K] become [E/ep, O, K] (xf.sharding axis
// "ep", dim 0), and their gradients, which sum the tokens of the whole ep
// group, reduce over the replicas of the shard ("edp", dp/ep ranks) instead
// of dp.
//
// Every rank still routes its own tokens (data parallelism's rows). Between
// xf.moe_permute and xf.moe_unpermute, rows live in one of two places:
//  - the rank's token rows [N, H] (N = the rank's tokens × k, grouped by
//    global expert: xf.moe_permute's order), and
//  - the rows of the rank's experts [C, H]: what every member of the ep group
//    sent here, grouped by local expert, then by sending member
//    (xf.moe_dispatch). C is the worst case the static plan must hold, every
//    member's tokens routed here: C = ep · T · min(k, E/ep) for T tokens per
//    rank (each token picks k distinct experts, at most E/ep of them here).
// The grouped GEMMs (xf.grouped_linear and its gradients) run on the expert
// rows with the local group sizes; a row-parallel op whose operands are all
// expert rows (the SwiGLU between the expert GEMMs, its gradient, the sum of
// two input gradients) stays there; any other reader gets the rows back in
// token order (xf.moe_combine, with the dispatch's counts). So a layer
// forward dispatches once and combines once, and its backward the same: the
// output gradient out to the experts, the input gradient back.
//
// Layer bodies: a value whose other form exists in its body replaces it in
// the body's returns (as context parallelism does), so the backward reads
// the dispatched input rows and the combined output it needs without
// exchanging them again.
//
//===----------------------------------------------------------------------===//
#include "ExpertParallel.h"
#include "PartitionUtils.h"

#include "llcdist/Dialect/XF/Analysis/ModelStats.h"
#include "llcdist/Dialect/XF/IR/XFOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSet.h"

#include <algorithm>

using namespace mlir;
using namespace llcdist::xf;

namespace {

constexpr llvm::StringLiteral kToExperts = "expert parallelism: each token's rows go to the ep rank that holds "
                                           "their expert (all-to-all-v, the row counts exchanged first)";
constexpr llvm::StringLiteral kToTokens = "expert parallelism: the experts' rows go back to their tokens' ranks "
                                          "(all-to-all-v)";

/// A dispatch in one body: what a combine of its rows needs.
struct Dispatch {
  Value recvSplits, localSizes;
  int64_t tokenRows = 0; ///< N: the rank's token rows it was sent from
};

class ExpertParallelPropagation {
public:
  ExpertParallelPropagation(ModuleOp module, int64_t ep) : module(module), ep(ep), symbols(module) {}

  LogicalResult run(SmallVectorImpl<Attribute> &expertParams) {
    func::FuncOp entry = getTrainStep(module, "llcdist-partition");
    if (!entry || failed(readRouting()) || failed(propagate(entry.getBody().front())) ||
        failed(shardParams(expertParams)))
      return failure();
    llcdist::xf::detail::refreshFunctionTypes(module);
    return success();
  }

private:
  /// Every layer's experts E and top-k (one routing for the model).
  LogicalResult readRouting() {
    WalkResult r = module.walk([&](MoePermuteOp perm) {
      auto route = cast<RankedTensorType>(perm.getExperts().getType());
      int64_t e = cast<RankedTensorType>(perm.getGroupSizes().getType()).getDimSize(0);
      int64_t k = route.getShape().back(), t = route.getNumElements() / k;
      int64_t cap = int64_t(perm.getCapacity().value_or(0));
      if (experts && (e != experts || k != topK || t != tokens || cap != expertCapacity)) {
        perm.emitOpError("llcdist-partition: expert parallelism needs one routing for the model; this layer has ")
            << e << " experts, top-" << k << ", " << t << " tokens and capacity " << cap << ", another " << experts
            << ", top-" << topK << ", " << tokens << " and " << expertCapacity;
        return WalkResult::interrupt();
      }
      experts = e, topK = k, tokens = t, expertCapacity = cap;
      return WalkResult::advance();
    });
    if (r.wasInterrupted())
      return failure();
    if (experts % ep != 0)
      return module.emitError("llcdist-partition: ep=") << ep << " does not divide the " << experts << " experts";
    return success();
  }

  /// C: the rows of this rank's experts in the worst case: every member's
  /// T tokens routed here, each to at most min(k, E/ep) of its experts;
  /// with a capacity, at most that many rows per expert from each member.
  int64_t capacity() const {
    const int64_t local = experts / ep, dropless = ep * tokens * std::min(topK, local);
    return expertCapacity ? std::min(dropless, ep * local * expertCapacity) : dropless;
  }

  bool onExperts(Value v) const { return state.lookup(v); }

  LogicalResult propagate(Block &block) {
    return llcdist::xf::detail::visitOps(block, [&](Operation *op) { return visit(op); });
  }

  LogicalResult visit(Operation *op) {
    if (auto call = dyn_cast<LayerOp>(op))
      return visitLayer(call);
    if (isa<GroupedLinearOp, GroupedLinearGradInputOp>(op))
      return visitGrouped(op, {0}, /*rowsOut=*/true);
    if (isa<GroupedLinearGradWeightOp>(op))
      return visitGrouped(op, {0, 1}, /*rowsOut=*/false);
    if (llvm::none_of(op->getOperands(), [&](Value v) { return onExperts(v); }))
      return success();
    if (staysOnExperts(op)) {
      Value first = *llvm::find_if(op->getOperands(), [&](Value v) { return onExperts(v); });
      for (Value r : op->getResults()) {
        setRows(r, dim0(first));
        state[r] = true;
        if (auto d = dispatchOf.find(first); d != dispatchOf.end())
          dispatchOf[r] = d->second;
      }
      return success();
    }
    for (OpOperand &use : op->getOpOperands())
      if (onExperts(use.get())) {
        FailureOr<Value> tokens = toTokens(use.get(), op);
        if (failed(tokens))
          return failure();
        use.set(*tokens);
      }
    return success();
  }

  /// A row-parallel op (each result row from the same operand rows) whose
  /// operands are all expert rows.
  bool staysOnExperts(Operation *op) const {
    for (auto [i, v] : llvm::enumerate(op->getOperands())) {
      if (!onExperts(v))
        return false;
      std::optional<llcdist::xf::detail::BatchLoop> rows = llcdist::xf::detail::batchLoop(op, unsigned(i), 0);
      if (!rows || rows->reduction || llvm::any_of(rows->resultDims, [](int64_t d) { return d != 0; }))
        return false;
    }
    return true;
  }

  /// A grouped GEMM: its row operands on the experts (dispatched with its
  /// global group sizes where they are token rows), its group sizes the
  /// local experts'; rows out on the experts too, or (the weight gradient)
  /// this rank's experts' slice.
  LogicalResult visitGrouped(Operation *op, ArrayRef<unsigned> rowOperands, bool rowsOut) {
    const unsigned sizesOperand = op->getNumOperands() - 1;
    Value globalSizes = op->getOperand(sizesOperand);
    std::optional<Dispatch> d;
    for (unsigned i : rowOperands) {
      Value v = op->getOperand(i);
      if (!onExperts(v)) {
        v = toExperts(v, globalSizes, op);
        op->setOperand(i, v);
      }
      if (auto it = dispatchOf.find(v); !d && it != dispatchOf.end())
        d = it->second;
    }
    if (!d)
      return op->emitOpError("llcdist-partition: expert parallelism: none of this grouped GEMM's rows was "
                             "dispatched in its function, so its experts' group sizes are unknown here");
    op->setOperand(sizesOperand, d->localSizes);
    Value r = op->getResult(0);
    if (!rowsOut) { // the weight gradient: this rank's experts
      auto t = cast<RankedTensorType>(r.getType());
      SmallVector<int64_t> dims(t.getShape());
      dims[0] /= ep;
      r.setType(RankedTensorType::get(dims, t.getElementType()));
      return success();
    }
    setRows(r, dim0(op->getOperand(rowOperands.front())));
    state[r] = true;
    dispatchOf[r] = *d;
    return success();
  }

  /// Token rows `v` [N, H] sent to their experts' ranks, once per value and
  /// group sizes, right before `user` (its first reader).
  Value toExperts(Value v, Value globalSizes, Operation *user) {
    Value &e = expertsOf[{v, globalSizes}];
    if (e)
      return e;
    OpBuilder b(user);
    auto t = cast<RankedTensorType>(v.getType());
    auto i32 = [&](int64_t n) { return RankedTensorType::get({n}, b.getI32Type()); };
    auto rows = RankedTensorType::get({capacity(), t.getDimSize(1)}, t.getElementType());
    auto d = MoeDispatchOp::create(b, v.getLoc(), rows, i32(experts), i32(experts / ep), v, globalSizes, "ep",
                                   kToExperts, stringifyCollectiveOrigin(CollectiveOrigin::ExpertParallel));
    e = d.getResult();
    state[e] = true;
    dispatchOf[e] = {d.getRecvSplits(), d.getLocalSizes(), t.getDimSize(0)};
    otherForm[v] = e;
    return e;
  }

  /// Expert rows `v` back to their tokens' ranks, once per value, right
  /// before `user`.
  FailureOr<Value> toTokens(Value v, Operation *user) {
    if (Value t = tokensOf.lookup(v))
      return t;
    auto d = dispatchOf.find(v);
    if (d == dispatchOf.end())
      return user->emitOpError("llcdist-partition: expert parallelism: reads expert rows that were not "
                               "dispatched in its function, so they cannot be sent back to their tokens here");
    OpBuilder b(user);
    auto t = cast<RankedTensorType>(v.getType());
    auto rows = RankedTensorType::get({d->second.tokenRows, t.getDimSize(1)}, t.getElementType());
    Value r = MoeCombineOp::create(b, v.getLoc(), rows, v, d->second.recvSplits, "ep", experts / ep, kToTokens,
                                   stringifyCollectiveOrigin(CollectiveOrigin::ExpertParallel))
                  .getResult();
    tokensOf[v] = r;
    otherForm[v] = r;
    return r;
  }

  /// A layer call: expert rows flow through its body's arguments and
  /// returns; a returned value exchanged in its body is returned in the
  /// form its exchange made (what the backward reads).
  LogicalResult visitLayer(LayerOp call) {
    auto propagateBody = [&](Block &block) {
      for (auto [arg, operand] : llvm::zip(block.getArguments(), call.getOperands()))
        if (onExperts(arg))
          arg.setType(operand.getType());
      if (failed(propagate(block)))
        return failure();
      Operation *ret = block.getTerminator();
      for (OpOperand &use : ret->getOpOperands())
        if (Value other = otherForm.lookup(use.get()))
          use.set(other);
      return success();
    };
    if (failed(llcdist::xf::detail::propagateLayer(call, symbols, state, bodyArgs, propagateBody)))
      return failure();
    auto body = symbols.lookup<func::FuncOp>(call.getCallee());
    for (auto [r, v] : llvm::zip(call.getResults(), body.getBody().front().getTerminator()->getOperands()))
      r.setType(v.getType());
    return success();
  }

  /// The stacked expert weights (every grouped GEMM's xf.param) split on
  /// dim 0 over ep.
  LogicalResult shardParams(SmallVectorImpl<Attribute> &expertParams) {
    llvm::StringSet<> names;
    WalkResult r = module.walk([&](Operation *op) {
      if (!isa<GroupedLinearOp, GroupedLinearGradInputOp>(op))
        return WalkResult::advance();
      auto p = op->getOperand(1).getDefiningOp<ParamOp>();
      if (!p) {
        op->emitOpError("llcdist-partition: expert parallelism splits the experts' weights, but this grouped "
                        "GEMM's weight is no xf.param");
        return WalkResult::interrupt();
      }
      names.insert(p.getName());
      return WalkResult::advance();
    });
    if (r.wasInterrupted())
      return failure();
    Builder b(module.getContext());
    r = module.walk([&](ParamOp p) {
      if (!names.contains(p.getName()))
        return WalkResult::advance();
      if (p->hasAttr("xf.sharding")) {
        p.emitOpError("llcdist-partition: expert weights split over ep are split over another axis already");
        return WalkResult::interrupt();
      }
      auto t = cast<RankedTensorType>(p.getType());
      SmallVector<int64_t> dims(t.getShape());
      p->setAttr("xf.sharding", b.getDictionaryAttr({b.getNamedAttr("axis", b.getStringAttr("ep")),
                                                     b.getNamedAttr("dim", b.getI64IntegerAttr(0)),
                                                     b.getNamedAttr("blocks", b.getI64IntegerAttr(1)),
                                                     b.getNamedAttr("global_shape", b.getDenseI64ArrayAttr(dims))}));
      dims[0] /= ep;
      p.getResult().setType(RankedTensorType::get(dims, t.getElementType()));
      return WalkResult::advance();
    });
    if (r.wasInterrupted())
      return failure();
    SmallVector<StringRef> sorted;
    for (const auto &n : names)
      sorted.push_back(n.getKey());
    llvm::sort(sorted);
    for (StringRef n : sorted)
      expertParams.push_back(b.getStringAttr(n));
    return success();
  }

  static int64_t dim0(Value v) { return cast<RankedTensorType>(v.getType()).getDimSize(0); }

  static void setRows(Value v, int64_t rows) {
    auto t = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> dims(t.getShape());
    dims[0] = rows;
    v.setType(RankedTensorType::get(dims, t.getElementType()));
  }

  ModuleOp module;
  int64_t ep;
  SymbolTable symbols;
  /// The routing (every layer's): E, k, the rank's tokens per microbatch
  /// and --moe-capacity-factor's rows per expert (0: dropless).
  int64_t experts = 0, topK = 1, tokens = 0, expertCapacity = 0;
  /// Whether a value holds the rows of this rank's experts.
  llvm::DenseMap<Value, bool> state;
  llvm::DenseMap<Operation *, SmallVector<bool>> bodyArgs;
  llvm::DenseMap<Value, Dispatch> dispatchOf;
  llvm::DenseMap<std::pair<Value, Value>, Value> expertsOf;
  llvm::DenseMap<Value, Value> tokensOf, otherForm;
};

} // namespace

LogicalResult llcdist::xf::partitionExpertParallel(ModuleOp module, int64_t ep,
                                                   SmallVectorImpl<Attribute> &expertParams) {
  return ExpertParallelPropagation(module, ep).run(expertParams);
}
