//===- KernelArgs.h - rewriting a kernel's buffer arguments ------*- C++ -*-===//
//
// Plan→plan passes that change which buffers a kernel reads or writes
// (llcdist-plan-zero's blocks, llcdist-plan-overlap-param-gather's whole
// copies) rewrite the kernel's `args` dictionary: each argument is a buffer
// reference or a list of them.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_LIB_DIALECT_PLAN_TRANSFORMS_KERNELARGS_H
#define LLCDIST_LIB_DIALECT_PLAN_TRANSFORMS_KERNELARGS_H

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLFunctionalExtras.h"

namespace llcdist::plan {

/// `k`'s arguments with every buffer reference `a` replaced by `map(a)`, or
/// kept where that is null.
inline mlir::DictionaryAttr
remapKernelArgs(KernelOp k, llvm::function_ref<mlir::Attribute(mlir::Attribute)> map) {
  mlir::Builder b(k.getContext());
  llvm::SmallVector<mlir::NamedAttribute> args;
  for (mlir::NamedAttribute a : k.getArgs()) {
    mlir::Attribute v = a.getValue();
    if (auto list = llvm::dyn_cast<mlir::ArrayAttr>(v)) {
      llvm::SmallVector<mlir::Attribute> elems;
      for (mlir::Attribute e : list) {
        mlir::Attribute to = map(e);
        elems.push_back(to ? to : e);
      }
      v = b.getArrayAttr(elems);
    } else if (mlir::Attribute to = map(v)) {
      v = to;
    }
    args.push_back(b.getNamedAttr(a.getName(), v));
  }
  return b.getDictionaryAttr(args);
}

} // namespace llcdist::plan

#endif
