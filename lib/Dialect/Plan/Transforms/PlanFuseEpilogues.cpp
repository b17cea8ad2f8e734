//===- PlanFuseEpilogues.cpp - work that rides along a GEMM ---------------===//
//
// llcdist-plan-fuse-epilogues (Passes.td): in every subroutine,
//  - a linear_bwd_bias and the linear_bwd_weight of the same dy (same M, N
//    and accumulate) become the linear_bwd_weight with `db`: the bias
//    gradient the weight-gradient GEMM's cuBLASLt epilogue (BGRADA / BGRADB)
//    computes while it reads dy anyway;
//  - a linear_fwd and the gelu_tanh_fwd that first reads its y become the
//    linear_fwd with `gelu` (GELU_AUX_BIAS: y stays, the pre-activation);
//  - a linear_bwd_input that writes (not accumulates) its dx and the
//    gelu_tanh_bwd that first reads it as dy become the linear_bwd_input
//    with `gelu_x` (DGELU), writing the GELU's dx, when no other kernel of
//    the program touches the linear's dx (whose buffer then goes) and both
//    have one dtype.
// Only synchronous compute kernels fuse, at a place the pair may meet
// (Fusion.h: placement), and the fused op runs the unfused kernels'
// arithmetic, rounding as they stored (docs/plan-format.md), so the numbers
// are the same bits on the CPU.
//
//===----------------------------------------------------------------------===//

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/Dialect/Plan/Transforms/Passes.h"

#include "Fusion.h"
#include "KernelAccess.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace llcdist::plan {
#define GEN_PASS_DEF_PLANFUSEEPILOGUES
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist;

namespace {

using plan::argOf;
using plan::isSyncKernel;

/// Whether `bias` (a linear_bwd_bias) may join `weight` (a linear_bwd_weight)
/// as its db: the same dy and shape, the same accumulation, no db yet, and db
/// none of the GEMM's buffers (the fused op writes dw, then db).
bool joins(plan::KernelOp weight, plan::KernelOp bias) {
  if (!isSyncKernel(weight, "linear_bwd_weight") || argOf(weight, "db") || argOf(weight, "dy") != argOf(bias, "dy"))
    return false;
  for (StringRef p : {"M", "N", "accumulate"})
    if (!weight.getParams().get(p) || weight.getParams().get(p) != bias.getParams().get(p))
      return false;
  Attribute db = argOf(bias, "db");
  return db != argOf(weight, "dy") && db != argOf(weight, "x") && db != argOf(weight, "dw");
}

/// Whether `gelu`'s element count `n` is the M×`cols` of `linear`.
bool sameCount(plan::KernelOp linear, plan::KernelOp gelu, StringRef cols) {
  auto n = gelu.getParams().getAs<IntegerAttr>("n");
  auto M = linear.getParams().getAs<IntegerAttr>("M"), C = linear.getParams().getAs<IntegerAttr>(cols);
  return n && M && C && n.getInt() == M.getInt() * C.getInt();
}

/// Replaces `linear` and `other` by `linear`'s kernel with `args`, where
/// they may meet; false (nothing changed) when they cannot.
bool replacePair(OpBuilder &b, plan::KernelOp linear, plan::KernelOp other, ArrayRef<NamedAttribute> args,
                 const plan::Accesses &accesses) {
  return plan::fusePair(b, linear, other, args, linear.getParams(), accesses);
}

struct PlanFuseEpiloguesPass : public plan::impl::PlanFuseEpiloguesBase<PlanFuseEpiloguesPass> {
  using PlanFuseEpiloguesBase::PlanFuseEpiloguesBase;

  void runOnOperation() override {
    plan::ProgramOp program = getOperation();
    OpBuilder b(program.getContext());
    plan::FusionRecord fused;
    const plan::Accesses accesses(program);

    plan::FusionBuffers bufs(program);
    program.walk([&](plan::SubroutineOp sub) {
      SmallVector<plan::KernelOp> ops(sub.getOps<plan::KernelOp>());
      llvm::DenseSet<Operation *> taken; // the erased kernels
      // The weight gradients by their dy (a linear search per bias would be
      // quadratic in the layers).
      llvm::DenseMap<Attribute, SmallVector<plan::KernelOp, 2>> weightsOf;
      for (plan::KernelOp k : ops)
        if (isSyncKernel(k, "linear_bwd_weight"))
          weightsOf[argOf(k, "dy")].push_back(k);
      for (plan::KernelOp bias : ops) {
        if (taken.contains(bias) || !isSyncKernel(bias, "linear_bwd_bias"))
          continue;
        for (plan::KernelOp weight : weightsOf.lookup(argOf(bias, "dy"))) {
          if (taken.contains(weight) || !joins(weight, bias))
            continue;
          SmallVector<NamedAttribute> args(weight.getArgs().getValue());
          args.push_back(b.getNamedAttr("db", argOf(bias, "db")));
          Operation *w = weight, *bb = bias;
          if (!replacePair(b, weight, bias, args, accesses))
            continue;
          taken.insert(w);
          taken.insert(bb);
          fused.add("linear_bwd_weight + linear_bwd_bias", "linear_bwd_weight with db", 2);
          break;
        }
      }
    });
    fuseGelu(program, b, accesses, bufs, fused);
    bufs.finish();
    fused.write(program, getArgument());
  }

  /// The GELU's forward into linear_fwd, its backward into linear_bwd_input.
  void fuseGelu(plan::ProgramOp program, OpBuilder &b, const plan::Accesses &accesses, plan::FusionBuffers &bufs,
                plan::FusionRecord &fused) {
    // The backward's candidates first (a pair of the forward changes no
    // backward kernel): the linear's dx must be the pair's alone in the
    // whole program (a pipeline's _last clone repeats the pair).
    struct Bwd {
      plan::KernelOp linear, gelu;
    };
    SmallVector<Bwd> bwd;
    program.walk([&](plan::SubroutineOp sub) {
      for (plan::KernelOp k : sub.getOps<plan::KernelOp>()) {
        if (!isSyncKernel(k, "linear_bwd_input") || argOf(k, "gelu_x"))
          continue;
        auto acc = k.getParams().getAs<BoolAttr>("accumulate");
        plan::KernelOp g = plan::nextReader(k, argOf(k, "dx"));
        if (!acc || acc.getValue() || !g || !isSyncKernel(g, "gelu_tanh_bwd") || argOf(g, "dy") != argOf(k, "dx") ||
            argOf(g, "x") == argOf(k, "dx") || !sameCount(k, g, "K") ||
            bufs.elementTypeOf(argOf(k, "dx")) != bufs.elementTypeOf(argOf(g, "dx")))
          continue;
        // The fused op reads gelu_x after writing dx: the GELU's x must be none of the linear's buffers.
        if (llvm::is_contained(ArrayRef<Attribute>{argOf(k, "dy"), argOf(k, "w")}, argOf(g, "dx")) ||
            llvm::is_contained(ArrayRef<Attribute>{argOf(k, "dy"), argOf(k, "w")}, argOf(g, "x")))
          continue;
        bwd.push_back({k, g});
      }
    });
    llvm::DenseMap<Attribute, int64_t> touches = plan::kernelsTouching(program), pairTouches;
    for (Bwd &p : bwd)
      pairTouches[argOf(p.linear, "dx")] += 2;
    for (Bwd &p : bwd) {
      Attribute dAct = argOf(p.linear, "dx");
      if (touches[dAct] != pairTouches[dAct])
        continue;
      SmallVector<NamedAttribute> args;
      for (NamedAttribute a : p.linear.getArgs())
        if (a.getName() != "dx")
          args.push_back(a);
      args.push_back(b.getNamedAttr("dx", argOf(p.gelu, "dx")));
      args.push_back(b.getNamedAttr("gelu_x", argOf(p.gelu, "x")));
      if (!replacePair(b, p.linear, p.gelu, args, accesses))
        continue;
      fused.add("linear_bwd_input + gelu_tanh_bwd", "linear_bwd_input with gelu_x", 2);
      bufs.eraseIfUnused(dAct);
    }

    program.walk([&](plan::SubroutineOp sub) {
      SmallVector<plan::KernelOp> ops(sub.getOps<plan::KernelOp>());
      llvm::DenseSet<Operation *> erased;
      for (plan::KernelOp k : ops) {
        if (erased.contains(k) || !isSyncKernel(k, "linear_fwd") || argOf(k, "gelu"))
          continue;
        plan::KernelOp g = plan::nextReader(k, argOf(k, "y"));
        if (!g || erased.contains(g) || !isSyncKernel(g, "gelu_tanh_fwd") || argOf(g, "x") != argOf(k, "y") ||
            !sameCount(k, g, "N"))
          continue;
        Attribute out = argOf(g, "y");
        if (llvm::any_of(k.getArgs(), [&](NamedAttribute a) { return a.getValue() == out; }))
          continue;
        SmallVector<NamedAttribute> args(k.getArgs().getValue());
        args.push_back(b.getNamedAttr("gelu", out));
        Operation *linear = k, *gelu = g;
        if (!replacePair(b, k, g, args, accesses))
          continue;
        erased.insert(linear);
        erased.insert(gelu);
        fused.add("linear_fwd + gelu_tanh_fwd", "linear_fwd with gelu", 2);
      }
    });
  }
};

} // namespace
