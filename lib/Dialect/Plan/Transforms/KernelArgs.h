//===- KernelArgs.h - rewriting a kernel's buffer arguments ------*- C++ -*-===//
//
// Plan→plan passes that change which buffers a kernel reads or writes
// (llcdist-plan-zero's blocks, llcdist-plan-overlap-param-gather's whole
// copies, llcdist-plan-fuse-classifier's scratch) rewrite the kernel's `args`
// dictionary, where each argument is a buffer reference or a list of them,
// and declare the new buffers they need (NewBuffers).
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_LIB_DIALECT_PLAN_TRANSFORMS_KERNELARGS_H
#define LLCDIST_LIB_DIALECT_PLAN_TRANSFORMS_KERNELARGS_H

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLFunctionalExtras.h"

#include <algorithm>
#include <string>

namespace llcdist::plan {

/// `k`'s arguments with every buffer reference `a` replaced by `map(a)`, or
/// kept where that is null.
inline mlir::DictionaryAttr remapKernelArgs(KernelOp k, llvm::function_ref<mlir::Attribute(mlir::Attribute)> map) {
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

/// New `plan.buffer`s of a program, named as the lowering names buffers:
/// `b<N>`, numbered on from one past the largest such symbol the program
/// declared when this was made.
class NewBuffers {
public:
  explicit NewBuffers(ProgramOp program) {
    for (BufferOp buf : program.getBody().front().getOps<BufferOp>()) {
      llvm::StringRef sym = buf.getSymName();
      int64_t n = 0;
      if (sym.consume_front("b") && !sym.getAsInteger(10, n))
        next = std::max(next, n + 1);
    }
  }

  /// Declares buffer `name` (`kind`: "scratch", "param", ...) of `type` at
  /// `b`'s insertion point; with `slots`, one instance per microbatch slot
  /// of a pipeline chunk (kSlotsAttr: a buffer its subroutines use, as the
  /// lowering gives the chunk's own).
  BufferOp create(mlir::OpBuilder &b, mlir::Location loc, mlir::RankedTensorType type, llvm::StringRef name,
                  llvm::StringRef kind, mlir::Attribute slots = {}) {
    auto buf = BufferOp::create(b, loc, b.getStringAttr("b" + std::to_string(next++)), mlir::TypeAttr::get(type),
                                b.getStringAttr(name), b.getStringAttr(kind), mlir::IntegerAttr());
    if (slots)
      buf->setAttr(kSlotsAttr, slots);
    return buf;
  }

private:
  int64_t next = 0;
};

} // namespace llcdist::plan

#endif
