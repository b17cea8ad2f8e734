//===- Fusion.h - what the fusion passes share --------------------*- C++ -*-===//
//
// The plan→plan fusion passes (llcdist-plan-fuse-optimizer,
// llcdist-plan-fuse-norm) replace runs of kernels by one kernel whose
// contract is theirs in turn (docs/plan-format.md). Each records what it
// fused on the program (kFusedAttr) for the compile summary's "fused" lines.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_LIB_DIALECT_PLAN_TRANSFORMS_FUSION_H
#define LLCDIST_LIB_DIALECT_PLAN_TRANSFORMS_FUSION_H

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"

#include <string>
#include <vector>

namespace llcdist::plan {

/// What one pass fused on one program, per pattern: `ops` kernels of the
/// pattern `from` (" + "-joined kinds) became `into` kernels `to`.
class FusionRecord {
public:
  void add(llvm::StringRef from, llvm::StringRef to, int64_t ops, int64_t into = 1) {
    auto it = llvm::find_if(counts, [&](const Counts &c) { return c.from == from && c.to == to; });
    if (it == counts.end())
      it = counts.insert(counts.end(), Counts{from.str(), to.str()});
    it->ops += ops;
    it->into += into;
  }

  /// Appends the counts to the program's kFusedAttr under `pass` (nothing
  /// when nothing was fused).
  void write(ProgramOp program, llvm::StringRef pass) const {
    if (counts.empty())
      return;
    mlir::Builder b(program.getContext());
    llvm::SmallVector<mlir::Attribute> record;
    if (auto old = program->getAttrOfType<mlir::ArrayAttr>(kFusedAttr))
      record.assign(old.begin(), old.end());
    for (const Counts &c : counts)
      record.push_back(b.getDictionaryAttr({b.getNamedAttr("pass", b.getStringAttr(pass)),
                                            b.getNamedAttr("from", b.getStringAttr(c.from)),
                                            b.getNamedAttr("to", b.getStringAttr(c.to)),
                                            b.getNamedAttr("ops", b.getI64IntegerAttr(c.ops)),
                                            b.getNamedAttr("into", b.getI64IntegerAttr(c.into))}));
    program->setAttr(kFusedAttr, b.getArrayAttr(record));
  }

private:
  struct Counts {
    std::string from, to;
    int64_t ops = 0, into = 0;
  };
  std::vector<Counts> counts; // in order of first fusion

};

/// Whether `k` runs synchronously on the compute queue (no token, no queue):
/// the only kernels a fusion pass touches.
inline bool isSyncCompute(KernelOp k) {
  return !k->hasAttr(kTokenAttr) && !k->hasAttr(kQueueAttr);
}

} // namespace llcdist::plan

#endif
