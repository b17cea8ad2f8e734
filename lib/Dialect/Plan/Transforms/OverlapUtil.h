//===- OverlapUtil.h - what the overlap passes share ------------*- C++ -*-===//
//
// The few steps every pass that makes a plan asynchronous takes
// (docs/plan-format.md "Asynchronous plans"): list a queue on the program,
// pick token ids no other pass's in-flight op uses, start a communication
// kernel on a queue, wait for it.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_LIB_DIALECT_PLAN_TRANSFORMS_OVERLAPUTIL_H
#define LLCDIST_LIB_DIALECT_PLAN_TRANSFORMS_OVERLAPUTIL_H

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"

#include "mlir/IR/Builders.h"

#include <algorithm>

namespace llcdist::plan::overlap {

/// Lists `queue` in the program's `queues` (creating ["compute", queue]).
inline void addQueue(ProgramOp program, llvm::StringRef queue) {
  mlir::MLIRContext *ctx = program.getContext();
  llvm::SmallVector<mlir::Attribute> queues;
  if (auto q = program->getAttrOfType<mlir::ArrayAttr>(kQueuesAttr))
    queues.assign(q.begin(), q.end());
  else
    queues.push_back(mlir::StringAttr::get(ctx, kComputeQueue));
  if (llvm::none_of(queues, [&](mlir::Attribute q) { return mlir::cast<mlir::StringAttr>(q).getValue() == queue; }))
    queues.push_back(mlir::StringAttr::get(ctx, queue));
  program->setAttr(kQueuesAttr, mlir::ArrayAttr::get(ctx, queues));
}

/// The first token id above every token the program uses already, so a
/// pass's tokens never meet another pass's in flight (those may cross
/// subroutines, e.g. the gradient buckets' into the optimizer).
inline int64_t firstFreeToken(ProgramOp program) {
  int64_t next = 0;
  program.walk([&](KernelOp k) {
    if (auto t = k->getAttrOfType<mlir::IntegerAttr>(kTokenAttr))
      next = std::max(next, t.getInt() + 1);
  });
  return next;
}

/// Whether any argument of `k` (a buffer or a list of buffers) names `buf`.
inline bool referencesBuffer(KernelOp k, mlir::StringAttr buf) {
  auto is = [&](mlir::Attribute a) {
    auto ref = mlir::dyn_cast<mlir::FlatSymbolRefAttr>(a);
    return ref && ref.getAttr() == buf;
  };
  for (mlir::NamedAttribute arg : k.getArgs()) {
    if (auto list = mlir::dyn_cast<mlir::ArrayAttr>(arg.getValue())) {
      if (llvm::any_of(list, is))
        return true;
    } else if (is(arg.getValue())) {
      return true;
    }
  }
  return false;
}

/// Makes `op` (a communication kernel) start asynchronously on `queue`.
inline void start(mlir::Operation *op, llvm::StringRef queue, int64_t token) {
  mlir::Builder b(op->getContext());
  op->setAttr(kQueueAttr, b.getStringAttr(queue));
  op->setAttr(kTokenAttr, b.getI64IntegerAttr(token));
}

/// A `wait` for `token` at the builder's insertion point.
inline KernelOp createWait(mlir::OpBuilder &b, mlir::Location loc, int64_t token) {
  auto w = KernelOp::create(b, loc, kWaitKernel, b.getDictionaryAttr({}), b.getDictionaryAttr({}));
  w->setAttr(kTokenAttr, b.getI64IntegerAttr(token));
  return w;
}

} // namespace llcdist::plan::overlap

#endif
