//===- Partition.cpp - SPMD partitioning over the mesh --------------------===//
//
// Sharding propagation and partitioning for the dp axis. A value's sharding
// is which of its dimensions is split over dp (the batch dimension) or
// whether it is a partial sum over dp (a contraction over that dimension).
// The rule of each op is read from its loop nest (batchLoop); layer bodies
// are propagated once per body (every call must agree). Tensor parallelism
// (TensorParallel.cpp) runs first.
//
//===----------------------------------------------------------------------===//
#include "ContextParallel.h"
#include "ExpertParallel.h"
#include "PartitionUtils.h"
#include "TensorParallel.h"

#include "llcdist/Dialect/XF/Analysis/ModelStats.h"
#include "llcdist/Dialect/XF/IR/XFOps.h"
#include "llcdist/Dialect/XF/Transforms/Passes.h"

#include "llcdist/Dialect/XF/IR/XFShardingInterface.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterface.h"
#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "llcdist-partition"

namespace llcdist::xf {
#define GEN_PASS_DEF_PARTITION
#include "llcdist/Dialect/XF/Transforms/Passes.h.inc"
} // namespace llcdist::xf

using namespace mlir;
using namespace llcdist::xf;
using llcdist::xf::detail::BatchLoop;
using llcdist::xf::detail::batchLoop;

namespace {
/// How a value is distributed over the dp axis.
struct Sharding {
  enum Kind { Replicated, Split, Partial } kind = Replicated;
  int64_t dim = 0; // the split dimension, for Split
  bool operator==(const Sharding &o) const { return kind == o.kind && (kind != Split || dim == o.dim); }
};

class Propagation {
public:
  Propagation(ModuleOp module) : symbols(module) {}

  LogicalResult propagate(Block &block) {
    return llcdist::xf::detail::visitOps(block, [&](Operation *op) { return visit(op); });
  }

  Sharding of(Value v) const { return state.lookup(v); }
  void set(Value v, Sharding s) { state[v] = s; }
  const llvm::DenseMap<Value, Sharding> &all() const { return state; }

private:
  LogicalResult visit(Operation *op) {
    if (auto call = dyn_cast<LayerOp>(op))
      return visitLayer(call);
    // The load-balancing loss of each rank's own tokens, as each DDP rank's
    // transformers loss: the routers' statistics stay the rank's own (never
    // summed), and the sum is the loss's, which the step averages over dp.
    if (isa<MoeRouterStatsOp>(op))
      return success();
    if (auto aux = dyn_cast<MoeAuxLossOp>(op)) {
      set(aux.getResult(), of(aux.getLoss()));
      return success();
    }
    bool split = false, partial = false;
    for (Value v : op->getOperands()) {
      Sharding s = of(v);
      split |= s.kind == Sharding::Split;
      partial |= s.kind == Sharding::Partial;
    }
    if (partial) {
      // Only sums of partial sums stay partial; nothing else may consume one.
      if (auto add = dyn_cast<AddOp>(op);
          add && of(add.getLhs()).kind == Sharding::Partial && of(add.getRhs()).kind == Sharding::Partial) {
        set(add.getResult(), {Sharding::Partial});
        return success();
      }
      if (isa<AccumulateGradOp>(op))
        return success();
      return op->emitOpError("llcdist-partition: consumes a partial sum over dp; "
                             "an all-reduce would be needed here");
    }
    if (!split)
      return success(); // parameters and what is computed from them only
    unsigned first = 0;
    while (of(op->getOperand(first)).kind != Sharding::Split)
      ++first;
    std::optional<BatchLoop> batch = batchLoop(op, first, of(op->getOperand(first)).dim);
    for (auto [i, r] : llvm::enumerate(op->getResults())) {
      if (!batch)
        set(r, {Sharding::Split, 0}); // the batch dimension
      else if (batch->reduction)
        set(r, {Sharding::Partial});
      else if (batch->resultDims[i] >= 0)
        set(r, {Sharding::Split, batch->resultDims[i]});
      else if (cast<RankedTensorType>(r.getType()).getElementType().isInteger())
        continue; // per-rank metadata of the rank's own tokens (xf.moe_permute's group sizes): kept whole, never summed
      else
        return op->emitOpError("llcdist-partition: result ")
               << i << " has no batch dimension, but the op's batch loop is parallel";
    }
    return success();
  }

  LogicalResult visitLayer(LayerOp call) {
    return llcdist::xf::detail::propagateLayer(call, symbols, state, bodyArgs, [&](Block &b) { return propagate(b); });
  }

  SymbolTable symbols;
  llvm::DenseMap<Value, Sharding> state;
  llvm::DenseMap<Operation *, SmallVector<Sharding>> bodyArgs;
};

/// Data parallelism: token ids and labels split on their batch dimension,
/// propagated through the step; every split dimension divided by dp.
LogicalResult partitionDataParallel(ModuleOp module, func::FuncOp entry, int64_t dp) {
  // 1. Propagate: token ids and labels are split on their batch dimension.
  Propagation prop(module);
  for (BlockArgument a : entry.getArguments())
    prop.set(a, {Sharding::Split, 0});
  if (failed(prop.propagate(entry.getBody().front())))
    return failure();
  if (failed(llcdist::xf::detail::checkPartialGradients(module, "dp",
                                                        [&](Value g) { return prop.of(g).kind == Sharding::Partial; })))
    return failure();

  // 2. Local types: split dimensions divided by dp.
  for (auto &[value, s] : prop.all()) {
    if (s.kind != Sharding::Split)
      continue;
    Value v = value;
    auto t = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> dims(t.getShape());
    if (dims[s.dim] % dp != 0)
      return emitError(v.getLoc(), "llcdist-partition: dimension ")
             << s.dim << " of " << t << " is not divisible by dp=" << dp;
    dims[s.dim] /= dp;
    v.setType(RankedTensorType::get(dims, t.getElementType()));
  }
  llcdist::xf::detail::refreshFunctionTypes(module);
  return success();
}

/// Why the gradients reduce over the data-parallel group (dp, cp or both).
std::string gradientReason(int64_t dp, int64_t cp) {
  if (cp == 1)
    return "every weight gradient contracts over the batch dimension, which is sharded on dp: each rank holds a "
           "partial sum (already scaled by the global token count)";
  if (dp == 1)
    return "context parallelism: every weight gradient sums over the tokens, which are split on cp: each rank "
           "holds a partial sum (already scaled by the global token count)";
  return "the data-parallel group dp × cp (Megatron's): every weight gradient sums over the batch, sharded on dp, "
         "and the sequence, split on cp: each rank holds a partial sum (already scaled by the global token "
         "count), reduced in one collective";
}

/// Expert parallelism: the experts' gradients reduce over the replicas of
/// their shard (edp, and cp under context parallelism: each cp rank routes
/// its own slice of the tokens), right after every other gradient's dp
/// all-reduce.
void reduceExpertGradients(func::FuncOp opt, ArrayAttr params, const MeshDegrees &mesh) {
  OpBuilder b(opt.getContext());
  b.setInsertionPointAfter(*opt.getBody().front().getOps<AllReduceGradsOp>().begin());
  const std::string held = "each rank holds its experts' gradient over the tokens of its ep group (already scaled "
                           "by the global token count); ";
  const int64_t edp = mesh.size("edp"), cp = mesh.cp;
  const std::string axis = mesh.expertGradientAxis();
  const std::string reason =
      cp == 1    ? "expert parallelism: " + held + "the dp/ep ranks that hold the same experts (edp) sum it"
      : edp == 1 ? "expert parallelism under context parallelism: " + held +
                       "the cp ranks, which hold the same experts for other slices of the sequence, sum it"
                 : "expert parallelism under context parallelism: " + held +
                       "the ranks that hold the same experts, dp/ep of them times cp (edp × cp), sum it";
  AllReduceGradsOp::create(b, opt.getLoc(), axis, "sum", reason,
                           stringifyCollectiveOrigin(CollectiveOrigin::DataParallelGradients), params,
                           /*group_size=*/IntegerAttr(), /*exclude=*/ArrayAttr());
}

struct PartitionPass : public llcdist::xf::impl::PartitionBase<PartitionPass> {
  using PartitionBase::PartitionBase;

  void getDependentDialects(DialectRegistry &registry) const override {
    PartitionBase::getDependentDialects(registry);
    registerTensorParallelModels(registry); // every xf op's tp rule
    // Every xf op's loop nest: data parallelism's rule (batchLoop).
    registerShardingInterfaceExternalModels(registry);
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto grid = module.lookupSymbol<shard::GridOp>("mesh");
    if (!grid)
      return; // no mesh: one device
    std::optional<MeshDegrees> mesh = meshDegrees(module);
    if (!mesh) {
      grid.emitError("llcdist-partition: expected a (dp, tp, pp) or (dp, tp, pp, cp) grid");
      return signalPassFailure();
    }
    // pp is not a sharding: stages are MPMD, llcdist-pipeline-split cuts them.
    const int64_t dp = mesh->dp, tp = mesh->tp, cp = mesh->cp;
    if (sequenceParallel && tp == 1) {
      grid.emitError("llcdist-partition: sequence parallelism splits the "
                     "tensor-parallel region's sequence over tp; it needs tp > 1");
      return signalPassFailure();
    }
    if (dp == 1 && tp == 1 && cp == 1)
      return;
    func::FuncOp entry = getTrainStep(module, "llcdist-partition");
    if (!entry)
      return signalPassFailure();
    func::FuncOp opt = getOptimizerStep(module);
    if (!opt) {
      module.emitError("llcdist-partition: run llcdist-add-optimizer first");
      return signalPassFailure();
    }

    Builder attrs(module.getContext());
    SmallVector<NamedAttribute> degrees{attrs.getNamedAttr("dp", attrs.getI64IntegerAttr(dp)),
                                        attrs.getNamedAttr("tp", attrs.getI64IntegerAttr(tp))};
    if (cp > 1)
      degrees.push_back(attrs.getNamedAttr("cp", attrs.getI64IntegerAttr(cp)));
    if (mesh->ep > 1)
      degrees.push_back(attrs.getNamedAttr("ep", attrs.getI64IntegerAttr(mesh->ep)));
    module->setAttr("xf.partition", attrs.getDictionaryAttr(degrees));
    // Tensor parallelism first: it inserts the tp collectives, whose batch
    // dimension the dp propagation below then splits like any other op's;
    // then context parallelism splits the sequence (and inserts its
    // all-to-alls, which keep the batch first too).
    if (tp > 1 && failed(partitionTensorParallel(module, tp, sequenceParallel)))
      return signalPassFailure();
    if (cp > 1 && failed(partitionContextParallel(module, cp, cpImpl)))
      return signalPassFailure();
    if (dp > 1 && failed(partitionDataParallel(module, entry, dp)))
      return signalPassFailure();
    // Expert parallelism last: its exchanges carry the rank's own rows.
    SmallVector<Attribute> expertParams;
    if (mesh->ep > 1 && failed(partitionExpertParallel(module, mesh->ep, expertParams)))
      return signalPassFailure();
    // 3. The collectives: once per step, before the update, over the
    // data-parallel group (Megatron's dp × cp: with context parallelism a
    // weight gradient is a partial sum over both).
    if (dp > 1 || cp > 1)
      llcdist::xf::detail::reduceOncePerStep(opt, mesh->gradientAxis(), gradientReason(dp, cp),
                                             CollectiveOrigin::DataParallelGradients,
                                             dp > 1 && cp > 1 ? "each dp × cp rank's loss is the mean over its own "
                                                                "tokens (its samples' slice of the sequence)"
                                             : dp > 1         ? "each dp rank's loss is the mean over its own tokens"
                                                              : "each cp rank's loss is the mean over its own slice of "
                                                                "the sequence",
                                             expertParams.empty() ? ArrayAttr() : attrs.getArrayAttr(expertParams));
    if (!expertParams.empty() && mesh->size(mesh->expertGradientAxis()) > 1)
      reduceExpertGradients(opt, attrs.getArrayAttr(expertParams), *mesh);
  }
};
} // namespace
