//===- PlanCeGradInPlace.cpp - the logits' gradient over the logits -------===//
//
// llcdist-plan-ce-grad-in-place (Passes.td): a cross_entropy_bwd writes the
// gradient of the logits into a buffer of its own, as large as the logits
// ([tokens, vocabulary]: 0.8 GB for GPT-2 at 8 × 1024 in bf16, 2 GB for
// Llama-3.2-1B at 4 × 2048), while the logits, which nothing reads after it,
// stay live until it. This pass makes it write over the logits (the op's
// allowed alias, docs/plan-format.md) where that changes no value: the
// logits are read by no kernel after the cross entropy's backward in its
// subroutine, and the gradient's buffer is touched only after it, by the
// kernels of that subroutine. The gradient's buffer goes; llcdist-plan-memory
// then places one buffer where there were two.
//
//===----------------------------------------------------------------------===//

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/Dialect/Plan/Transforms/Passes.h"

#include "Fusion.h"
#include "KernelAccess.h"

#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/MapVector.h"

namespace llcdist::plan {
#define GEN_PASS_DEF_PLANCEGRADINPLACE
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist;

namespace {

struct PlanCeGradInPlacePass : public plan::impl::PlanCeGradInPlaceBase<PlanCeGradInPlacePass> {
  using PlanCeGradInPlaceBase::PlanCeGradInPlaceBase;

  void runOnOperation() override {
    plan::ProgramOp program = getOperation();
    plan::FusionRecord fused;

    // Each gradient buffer and the cross-entropy backwards writing it over
    // which logits (a pipeline's _last clone repeats the backward).
    struct Writers {
      Attribute logits;
      SmallVector<plan::KernelOp> ops;
      bool ok = true;
    };
    llvm::MapVector<Attribute, Writers> grads;
    program.walk([&](plan::KernelOp k) {
      if (!plan::isSyncKernel(k, "cross_entropy_bwd"))
        return;
      Attribute logits = plan::argOf(k, "logits"), dlogits = plan::argOf(k, "dlogits");
      if (!logits || !dlogits || logits == dlogits)
        return;
      Writers &w = grads[dlogits];
      w.ok = w.ok && (!w.logits || w.logits == logits);
      w.logits = logits;
      w.ops.push_back(k);
    });

    for (auto &[dlogits, w] : grads) {
      auto grad = program.lookupSymbol<plan::BufferOp>(plan::symbolOf(dlogits));
      auto logits = program.lookupSymbol<plan::BufferOp>(plan::symbolOf(w.logits));
      if (!w.ok || !grad || !logits || grad.getTensorType() != logits.getTensorType())
        continue;
      if (!inPlaceKeepsValues(program, w.ops, plan::symbolOf(dlogits), plan::symbolOf(w.logits)))
        continue;
      if (failed(SymbolTable::replaceAllSymbolUses(grad, logits.getSymNameAttr(), program)))
        continue;
      grad.erase();
      fused.add("cross_entropy_bwd", "cross_entropy_bwd writing over its logits",
                int64_t(w.ops.size()), int64_t(w.ops.size()));
    }
    fused.write(program, getArgument());
  }

  /// Whether `grad` may become `logits` for the cross-entropy backwards
  /// `writers`: in each subroutine, every kernel touching `grad` comes after
  /// the writer (its only one), and no kernel after the writer touches the
  /// logits; no other subroutine touches `grad`, and no asynchronous
  /// operation touches either.
  static bool inPlaceKeepsValues(plan::ProgramOp program, ArrayRef<plan::KernelOp> writers, StringAttr grad,
                                 StringAttr logits) {
    bool ok = true;
    program.walk([&](plan::SubroutineOp sub) {
      plan::KernelOp writer;
      for (plan::KernelOp k : sub.getOps<plan::KernelOp>()) {
        const plan::KernelAccess acc = plan::accessOf(k);
        if (!plan::isSyncCompute(k) && (acc.touches(grad) || acc.touches(logits)))
          ok = false; // in flight across other kernels: keep the buffers apart
        if (llvm::is_contained(writers, k)) {
          ok = ok && !writer;
          writer = k;
          continue;
        }
        if (!writer && acc.touches(grad))
          ok = false; // touched before it is written, or in a subroutine without its writer
        if (writer && acc.touches(logits))
          ok = false; // the logits are read (or written) after the backward
        if (writer && acc.writes.contains(grad))
          ok = false; // another writer
      }
    });
    return ok;
  }
};

} // namespace
