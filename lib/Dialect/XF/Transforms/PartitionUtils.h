//===- PartitionUtils.h - shared by the dp and tp propagations --*- C++ -*-===//
#ifndef LLCDIST_LIB_DIALECT_XF_TRANSFORMS_PARTITIONUTILS_H
#define LLCDIST_LIB_DIALECT_XF_TRANSFORMS_PARTITIONUTILS_H

#include "llcdist/Dialect/XF/IR/XFOps.h"

#include "mlir/IR/SymbolTable.h"

namespace llcdist::xf::detail {

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
