//===- PartitionUtils.h - shared by the dp and tp propagations --*- C++ -*-===//
#ifndef LLCDIST_LIB_DIALECT_XF_TRANSFORMS_PARTITIONUTILS_H
#define LLCDIST_LIB_DIALECT_XF_TRANSFORMS_PARTITIONUTILS_H

#include "llcdist/Dialect/XF/IR/XFOps.h"

#include "mlir/Dialect/Shard/Interfaces/ShardingInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

#include <optional>

namespace llcdist::xf::detail {

/// The rule of an op for a split dimension of one operand, read from its
/// loop nest (its ShardingInterface model,
/// lib/Dialect/XF/IR/XFShardingInterface.cpp): the loop that indexes that
/// dimension. A reduction loop makes every result a partial sum (a weight
/// gradient, the loss); a parallel one splits each result on the dimension
/// it indexes (the batch, the sequence, or the rows of a norm's statistics).
/// Data parallelism asks it for the batch, context parallelism for the
/// sequence.
struct BatchLoop {
  bool reduction = false;
  /// Per result: the dimension the loop indexes (-1: none).
  llvm::SmallVector<int64_t> resultDims;
};

/// nullopt for an op without a loop nest (the collectives and bias_add,
/// which keep their dimensions) or whose operand dimension is not a loop of
/// its own.
inline std::optional<BatchLoop> batchLoop(mlir::Operation *op, unsigned operand, int64_t dim) {
  auto nest = mlir::dyn_cast<mlir::shard::ShardingInterface>(op);
  if (!nest)
    return std::nullopt;
  llvm::SmallVector<mlir::AffineMap> maps = nest.getIndexingMaps();
  llvm::SmallVector<mlir::utils::IteratorType> loops = nest.getLoopIteratorTypes();
  auto d = mlir::dyn_cast<mlir::AffineDimExpr>(maps[operand].getResult(dim));
  if (!d)
    return std::nullopt;
  BatchLoop b;
  b.reduction = loops[d.getPosition()] == mlir::utils::IteratorType::reduction;
  for (unsigned r = 0; r < op->getNumResults(); ++r) {
    mlir::AffineMap m = maps[op->getNumOperands() + r];
    int64_t at = -1;
    for (unsigned i = 0; i < m.getNumResults(); ++i)
      if (m.getResult(i) == d)
        at = i;
    b.resultDims.push_back(at);
  }
  return b;
}

/// Visits every op of `block` but its terminator, in program order (a
/// visit may erase or insert ops next to its own); stops at the first
/// failure. Every propagation's loop over a function body or a layer body.
template <typename Visit> mlir::LogicalResult visitOps(mlir::Block &block, Visit visit) {
  for (mlir::Operation &op : llvm::make_early_inc_range(block.without_terminator()))
    if (mlir::failed(visit(&op)))
      return mlir::failure();
  return mlir::success();
}

/// Propagates shardings (of any state type S) through a layer call: the
/// callee body is propagated once, by `propagateBlock`, with the call's
/// operand states on its arguments; every later call must pass the same
/// states; the call's results take the states of the body's returns.
template <typename S, typename PropagateBlock>
mlir::LogicalResult
propagateLayer(LayerOp call, mlir::SymbolTable &symbols,
               llvm::DenseMap<mlir::Value, S> &state,
               llvm::DenseMap<mlir::Operation *, llvm::SmallVector<S>> &bodyArgs,
               PropagateBlock propagateBlock) {
  auto body = symbols.lookup<mlir::func::FuncOp>(call.getCallee());
  mlir::Block &block = body.getBody().front();
  llvm::SmallVector<S> args;
  for (mlir::Value v : call.getOperands())
    args.push_back(state.lookup(v));
  auto [it, first] = bodyArgs.try_emplace(body, args);
  if (!first && it->second != args)
    return call.emitOpError("llcdist-partition: layer @")
           << call.getCallee() << " is called with different shardings";
  if (first) {
    for (auto [a, s] : llvm::zip(block.getArguments(), args))
      state[a] = s;
    if (mlir::failed(propagateBlock(block)))
      return mlir::failure();
  }
  auto ret = mlir::cast<mlir::func::ReturnOp>(block.getTerminator());
  for (auto [r, v] : llvm::zip(call.getResults(), ret.getOperands()))
    state[r] = state.lookup(v);
  return mlir::success();
}

/// Every parameter gradient (each xf.accumulate_grad's) must be a partial sum
/// over `axis` (`isPartial(value)`), or summing it over the axis would be
/// wrong: the first that is not is an error naming it.
template <typename IsPartial>
mlir::LogicalResult checkPartialGradients(mlir::ModuleOp module, llvm::StringRef axis, IsPartial isPartial) {
  mlir::WalkResult r = module.walk([&](AccumulateGradOp acc) {
    if (isPartial(acc.getGrad()))
      return mlir::WalkResult::advance();
    acc.emitOpError("llcdist-partition: gradient of '") << acc.getName() << "' is not a partial sum over " << axis;
    return mlir::WalkResult::interrupt();
  });
  return mlir::failure(r.wasInterrupted());
}

/// At the start of the optimizer step `opt`, once per step after every
/// microbatch: every gradient (but those named in `exclude`, when given)
/// summed over `axis` (already scaled by the global token count) and the
/// step's loss averaged over it, each with its provenance.
inline void reduceOncePerStep(mlir::func::FuncOp opt, llvm::StringRef axis, llvm::StringRef gradReason,
                              CollectiveOrigin gradOrigin, llvm::StringRef lossReason,
                              mlir::ArrayAttr exclude = mlir::ArrayAttr()) {
  mlir::OpBuilder b = mlir::OpBuilder::atBlockBegin(&opt.getBody().front());
  AllReduceGradsOp::create(b, opt.getLoc(), axis, "sum", gradReason, stringifyCollectiveOrigin(gradOrigin),
                           /*params=*/mlir::ArrayAttr(), /*group_size=*/mlir::IntegerAttr(), exclude);
  AllReduceLossOp::create(b, opt.getLoc(), axis, lossReason, stringifyCollectiveOrigin(CollectiveOrigin::Loss));
}

/// Gives every function of `module` the type of its (retyped) block
/// arguments and returned values.
inline void refreshFunctionTypes(mlir::ModuleOp module) {
  for (auto fn : module.getOps<mlir::func::FuncOp>()) {
    if (fn.isExternal())
      continue;
    mlir::Block &b = fn.getBody().front();
    fn.setFunctionType(mlir::FunctionType::get(fn.getContext(), b.getArgumentTypes(),
                                               b.getTerminator()->getOperandTypes()));
  }
}

} // namespace llcdist::xf::detail

#endif
