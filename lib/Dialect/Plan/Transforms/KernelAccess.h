//===- KernelAccess.h - the buffers a kernel reads and writes ----*- C++ -*-===//
//
// What the passes that reorder or merge kernels (the overlap windows, the
// fusion passes) ask of a kernel: which buffers it reads and which it
// writes, from the runtime's schema (PlanSchema.h: each role's access).
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_LIB_DIALECT_PLAN_TRANSFORMS_KERNELACCESS_H
#define LLCDIST_LIB_DIALECT_PLAN_TRANSFORMS_KERNELACCESS_H

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/runtime/PlanSchema.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"

namespace llcdist::plan {

/// The buffers a kernel reads and writes (a read-written role in both). A
/// kernel of no known kind reads and writes all.
struct KernelAccess {
  llvm::DenseSet<mlir::StringAttr> reads, writes;

  /// Whether the kernel reads or writes `buf`.
  bool touches(mlir::StringAttr buf) const { return reads.contains(buf) || writes.contains(buf); }
};

inline KernelAccess accessOf(KernelOp k) {
  namespace schema = llcdist::rt::schema;
  KernelAccess acc;
  auto kind = schema::parseOpKind(k.getKernel().str());
  for (mlir::NamedAttribute arg : k.getArgs()) {
    auto access = schema::ArgAccess::kReadWrite;
    if (kind)
      if (int idx = schema::argIndex(*kind, arg.getName().strref()); idx >= 0)
        access = schema::opSpec(*kind).args[idx].access;
    auto note = [&](mlir::Attribute a) {
      mlir::StringAttr name = mlir::cast<mlir::FlatSymbolRefAttr>(a).getAttr();
      if (access != schema::ArgAccess::kWrite)
        acc.reads.insert(name);
      if (access != schema::ArgAccess::kRead)
        acc.writes.insert(name);
    };
    if (auto list = mlir::dyn_cast<mlir::ArrayAttr>(arg.getValue()))
      llvm::for_each(list, note);
    else
      note(arg.getValue());
  }
  return acc;
}

/// Whether two kernels must keep their order: one writes a buffer the other
/// reads or writes. Each intersection walks the smaller set, so checking a
/// kernel against the union of many (a multi-tensor window's) costs the
/// kernel's buffers, not the union's.
inline bool dependent(const KernelAccess &a, const KernelAccess &b) {
  auto meets = [](const llvm::DenseSet<mlir::StringAttr> &x, const llvm::DenseSet<mlir::StringAttr> &y) {
    const auto &small = x.size() <= y.size() ? x : y, &large = x.size() <= y.size() ? y : x;
    return llvm::any_of(small, [&](mlir::StringAttr n) { return large.contains(n); });
  };
  return meets(a.writes, b.reads) || meets(a.writes, b.writes) || meets(b.writes, a.reads);
}

} // namespace llcdist::plan

#endif
