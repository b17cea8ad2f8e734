//===- PlanFuseEpilogues.cpp - work that rides along a GEMM ---------------===//
//
// llcdist-plan-fuse-epilogues (Passes.td): in every subroutine, a
// linear_bwd_bias and the linear_bwd_weight of the same dy (same M, N and
// accumulate) become the linear_bwd_weight with `db`: the bias gradient the
// weight-gradient GEMM's cuBLASLt epilogue (BGRADA / BGRADB) computes while
// it reads dy anyway (docs/gpu.md). Only synchronous compute kernels fuse,
// at a place the pair may meet (Fusion.h: placement), and the fused op runs
// the unfused kernels' arithmetic (docs/plan-format.md), so the numbers are
// the same bits.
//
//===----------------------------------------------------------------------===//

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/Dialect/Plan/Transforms/Passes.h"

#include "Fusion.h"
#include "KernelAccess.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

namespace llcdist::plan {
#define GEN_PASS_DEF_PLANFUSEEPILOGUES
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist;

namespace {

Attribute arg(plan::KernelOp k, StringRef role) { return k.getArgs().get(role); }

bool is(plan::KernelOp k, StringRef kernel) { return k.getKernel() == kernel && plan::isSyncCompute(k); }

/// Whether `bias` (a linear_bwd_bias) may join `weight` (a linear_bwd_weight)
/// as its db: the same dy and shape, the same accumulation, no db yet, and db
/// none of the GEMM's buffers (the fused op writes dw, then db).
bool joins(plan::KernelOp weight, plan::KernelOp bias) {
  if (!is(weight, "linear_bwd_weight") || arg(weight, "db") || arg(weight, "dy") != arg(bias, "dy"))
    return false;
  for (StringRef p : {"M", "N", "accumulate"})
    if (!weight.getParams().get(p) || weight.getParams().get(p) != bias.getParams().get(p))
      return false;
  Attribute db = arg(bias, "db");
  return db != arg(weight, "dy") && db != arg(weight, "x") && db != arg(weight, "dw");
}

struct PlanFuseEpiloguesPass : public plan::impl::PlanFuseEpiloguesBase<PlanFuseEpiloguesPass> {
  using PlanFuseEpiloguesBase::PlanFuseEpiloguesBase;

  void runOnOperation() override {
    plan::ProgramOp program = getOperation();
    OpBuilder b(program.getContext());
    plan::FusionRecord fused;
    const plan::Accesses accesses(program);

    program.walk([&](plan::SubroutineOp sub) {
      SmallVector<plan::KernelOp> ops(sub.getOps<plan::KernelOp>());
      llvm::DenseSet<Operation *> taken; // the erased kernels
      for (plan::KernelOp bias : ops) {
        if (taken.contains(bias) || !is(bias, "linear_bwd_bias"))
          continue;
        for (plan::KernelOp weight : ops) {
          if (taken.contains(weight) || !joins(weight, bias))
            continue;
          SmallVector<plan::KernelOp> members{weight, bias};
          if (bias->isBeforeInBlock(weight))
            std::swap(members[0], members[1]);
          plan::KernelOp at = plan::placement(members, accesses);
          if (!at)
            continue;
          SmallVector<NamedAttribute> args(weight.getArgs().getValue());
          args.push_back(b.getNamedAttr("db", arg(bias, "db")));
          b.setInsertionPoint(at);
          plan::KernelOp::create(b, weight.getLoc(), b.getStringAttr("linear_bwd_weight"), b.getDictionaryAttr(args),
                                 weight.getParams());
          taken.insert(weight);
          taken.insert(bias);
          weight.erase();
          bias.erase();
          fused.add("linear_bwd_weight + linear_bwd_bias", "linear_bwd_weight with db", 2);
          break;
        }
      }
    });
    fused.write(program, getArgument());
  }
};

} // namespace
