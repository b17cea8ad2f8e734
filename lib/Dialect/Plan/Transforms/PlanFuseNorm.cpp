//===- PlanFuseNorm.cpp - the residual add and the norms, fused ----------===//
//
// llcdist-plan-fuse-norm (Passes.td): in every subroutine,
//  - an `add` followed by the norm forward of its sum (layer_norm_fwd /
//    rms_norm_fwd with x = the add's y) becomes add_layer_norm_fwd /
//    add_rms_norm_fwd, which writes both the sum (the residual stream) and
//    the normalized value;
//  - a norm's weight-gradient and input-gradient kernels next to each other
//    (either order, the same dy, x and statistics) become layer_norm_bwd /
//    rms_norm_bwd; when the next kernel is an `add` of the input gradient and
//    another gradient (the residual's), and no other kernel of the program
//    touches the input gradient, the add joins it (`dresidual`) and the
//    input gradient's buffer goes. A LayerNorm without gamma (OLMo's) has no
//    weight gradient: its input gradient and that add become layer_norm_bwd
//    without gamma, dgamma and dbeta.
// Only synchronous compute kernels fuse, and the fused kernel stands where
// one of them stood, the others moving to it across kernels independent of
// them only (a wait: of the operation it waits for): the ZeRO-3 gathers and
// ZeRO-2/3 reduce-scatters between a norm's kernels stay where they are. The fused
// kernels round each intermediate as the unfused ones stored it
// (docs/plan-format.md), so the numbers are the same bits.
//
//===----------------------------------------------------------------------===//

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/Dialect/Plan/Transforms/Passes.h"

#include "Fusion.h"
#include "KernelAccess.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <optional>

namespace llcdist::plan {
#define GEN_PASS_DEF_PLANFUSENORM
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist;

namespace {

/// A norm family: its unfused kernels, its fused ones and the roles that
/// differ (LayerNorm: gamma, beta, mean; RMSNorm: weight).
struct NormKinds {
  StringRef fwd, bwdInput, bwdWeight, addFwd, bwd;
  bool layerNorm;
};
constexpr NormKinds kLayerNorm{"layer_norm_fwd",     "layer_norm_bwd_input", "layer_norm_bwd_weight",
                               "add_layer_norm_fwd", "layer_norm_bwd",       true};
constexpr NormKinds kRmsNorm{"rms_norm_fwd",     "rms_norm_bwd_input", "rms_norm_bwd_weight",
                             "add_rms_norm_fwd", "rms_norm_bwd",       false};

std::optional<NormKinds> normOf(StringRef kernel) {
  for (const NormKinds &n : {kLayerNorm, kRmsNorm})
    if (kernel == n.fwd || kernel == n.bwdInput || kernel == n.bwdWeight)
      return n;
  return std::nullopt;
}

using plan::argOf;
using plan::isSyncKernel;

/// Builds kernel `kernel` before `at` with `args` and `params`, located at
/// `loc` (the norm's: its provenance names the module).
plan::KernelOp build(OpBuilder &b, Operation *at, StringRef kernel, ArrayRef<NamedAttribute> args,
                     DictionaryAttr params, Location loc) {
  b.setInsertionPoint(at);
  return plan::KernelOp::create(b, loc, b.getStringAttr(kernel), b.getDictionaryAttr(args), params);
}

/// The forward: an add, and the norm that first reads its sum. Returns the
/// norm it erased with the add, or null.
Operation *fuseForward(OpBuilder &b, plan::KernelOp add, const plan::Accesses &accesses, plan::FusionRecord &fused) {
  if (!isSyncKernel(add, "add"))
    return nullptr;
  plan::KernelOp norm = plan::nextReader(add, argOf(add, "y"));
  std::optional<NormKinds> n = norm ? normOf(norm.getKernel()) : std::nullopt;
  if (!n || !isSyncKernel(norm, n->fwd) || argOf(norm, "x") != argOf(add, "y"))
    return nullptr;
  auto count = add.getParams().getAs<IntegerAttr>("n");
  auto M = norm.getParams().getAs<IntegerAttr>("M"), H = norm.getParams().getAs<IntegerAttr>("H");
  if (!count || !M || !H || count.getInt() != M.getInt() * H.getInt())
    return nullptr;
  plan::KernelOp at = plan::placement({add, norm}, accesses);
  if (!at)
    return nullptr;
  SmallVector<NamedAttribute> args{b.getNamedAttr("a", argOf(add, "a")), b.getNamedAttr("b", argOf(add, "b")),
                                   b.getNamedAttr("sum", argOf(add, "y"))};
  for (NamedAttribute a : norm.getArgs())
    if (a.getName() != "x")
      args.push_back(a);
  build(b, at, n->addFwd, args, norm.getParams(), norm.getLoc());
  fused.add(("add + " + n->fwd).str(), n->addFwd, 2);
  add.erase();
  Operation *erased = norm;
  norm.erase();
  return erased;
}

/// A backward pair: the weight and input gradients of one norm (same dy, x,
/// statistics and shape).
bool samePair(plan::KernelOp w, plan::KernelOp in, const NormKinds &n) {
  if (!isSyncKernel(w, n.bwdWeight) || !isSyncKernel(in, n.bwdInput))
    return false;
  for (StringRef role : {"dy", "x", "rstd"})
    if (argOf(w, role) != argOf(in, role))
      return false;
  if (n.layerNorm && argOf(w, "mean") != argOf(in, "mean"))
    return false;
  for (StringRef p : {"M", "H"})
    if (w.getParams().get(p) != in.getParams().get(p))
      return false;
  return true;
}

/// A candidate backward fusion: the pair (no weight gradient for a LayerNorm
/// without gamma) and the add that first reads the input gradient (or null).
struct BwdGroup {
  plan::KernelOp weight, input, add;
  NormKinds kinds;
};

/// The residual operand of `g.add` (the other one than the input gradient),
/// or null when it is not the residual's add of `g`'s input gradient.
Attribute residualOf(const plan::FusionBuffers &bufs, BwdGroup g) {
  if (!isSyncKernel(g.add, "add"))
    return {};
  Attribute dx = argOf(g.input, "dx"), a = argOf(g.add, "a"), bb = argOf(g.add, "b"), y = argOf(g.add, "y");
  if ((a == dx) == (bb == dx) || y == dx)
    return {};
  Attribute residual = a == dx ? bb : a;
  // The fused kernel runs the pair's gradients, then the add: neither of the
  // pair may write what the add reads (the residual) or touch what it writes
  // (y), and the input gradient is rounded to y's dtype, which must be its
  // own.
  const StringAttr residualName = cast<FlatSymbolRefAttr>(residual).getAttr(),
                   yName = cast<FlatSymbolRefAttr>(y).getAttr();
  for (plan::KernelOp k : {g.weight, g.input}) {
    if (!k)
      continue;
    plan::KernelAccess acc = plan::accessOf(k);
    if (acc.writes.contains(residualName) || acc.reads.contains(yName) || acc.writes.contains(yName))
      return {};
  }
  if (bufs.elementTypeOf(dx) != bufs.elementTypeOf(y))
    return {};
  auto count = g.add.getParams().getAs<IntegerAttr>("n");
  auto M = g.input.getParams().getAs<IntegerAttr>("M"), H = g.input.getParams().getAs<IntegerAttr>("H");
  if (!count || !M || !H || count.getInt() != M.getInt() * H.getInt())
    return {};
  return residual;
}

struct PlanFuseNormPass : public plan::impl::PlanFuseNormBase<PlanFuseNormPass> {
  using PlanFuseNormBase::PlanFuseNormBase;

  void runOnOperation() override {
    plan::ProgramOp program = getOperation();
    OpBuilder b(program.getContext());
    plan::FusionRecord fused;
    const plan::Accesses accesses(program);
    plan::FusionBuffers bufs(program);

    // The forward pairs.
    program.walk([&](plan::SubroutineOp sub) {
      SmallVector<plan::KernelOp> ops(sub.getOps<plan::KernelOp>());
      llvm::DenseSet<Operation *> erased;
      for (plan::KernelOp k : ops)
        if (!erased.contains(k))
          if (Operation *norm = fuseForward(b, k, accesses, fused))
            erased.insert(norm);
    });

    // The backward groups: each input gradient with its weight gradient in
    // the same subroutine and the kernel that first reads the input gradient.
    // Then which residual adds may join: those whose input gradient no kernel
    // but its group's touches, in any subroutine (a pipeline's _last clone
    // repeats the backward's groups).
    SmallVector<BwdGroup> groups;
    program.walk([&](plan::SubroutineOp sub) {
      SmallVector<plan::KernelOp> ops(sub.getOps<plan::KernelOp>());
      // The weight gradients by their dy (a linear search per input gradient
      // would be quadratic in the layers).
      llvm::DenseMap<Attribute, SmallVector<plan::KernelOp, 2>> weightsOf;
      for (plan::KernelOp k : ops)
        if (std::optional<NormKinds> n = normOf(k.getKernel()); n && k.getKernel() == n->bwdWeight)
          weightsOf[argOf(k, "dy")].push_back(k);
      for (plan::KernelOp in : ops) {
        std::optional<NormKinds> n = normOf(in.getKernel());
        if (!n || in.getKernel() != n->bwdInput)
          continue;
        const SmallVector<plan::KernelOp, 2> &candidates = weightsOf.lookup(argOf(in, "dy"));
        auto w = llvm::find_if(candidates, [&](plan::KernelOp k) { return samePair(k, in, *n); });
        const bool plain = n->layerNorm && !argOf(in, "gamma"); // no weight gradient to pair with
        if (w == candidates.end() && !(plain && isSyncKernel(in, n->bwdInput)))
          continue;
        groups.push_back(BwdGroup{plain ? plan::KernelOp() : *w, in, plan::nextReader(in, argOf(in, "dx")), *n});
      }
    });
    llvm::DenseMap<Attribute, int64_t> touches = plan::kernelsTouching(program), groupTouches;
    SmallVector<Attribute> residuals;
    for (BwdGroup &g : groups) {
      residuals.push_back(residualOf(bufs, g));
      if (residuals.back())
        groupTouches[argOf(g.input, "dx")] += 2;
    }

    for (auto [g, residual] : llvm::zip_equal(groups, residuals)) {
      Attribute dx = argOf(g.input, "dx");
      SmallVector<plan::KernelOp> members{g.input};
      if (g.weight)
        members.insert(g.input->isBeforeInBlock(g.weight) ? members.end() : members.begin(), g.weight);
      plan::KernelOp at;
      bool withResidual = residual && touches[dx] == groupTouches[dx];
      if (withResidual) {
        members.push_back(g.add);
        at = plan::placement(members, accesses);
        if (!at) { // the pair may still fuse without the add
          withResidual = false;
          members.pop_back();
        }
      }
      // Without a weight gradient only the add is worth joining: alone, the
      // input gradient is one kernel already.
      if (!g.weight && !withResidual)
        continue;
      if (!at)
        at = plan::placement(members, accesses);
      if (!at)
        continue;
      SmallVector<NamedAttribute> args;
      for (NamedAttribute a : g.input.getArgs())
        if (a.getName() != "dx")
          args.push_back(a);
      if (withResidual)
        args.push_back(b.getNamedAttr("dresidual", residual));
      args.push_back(b.getNamedAttr("dx", withResidual ? argOf(g.add, "y") : dx));
      if (g.weight)
        for (NamedAttribute a : g.weight.getArgs())
          if (!g.input.getArgs().get(a.getName()))
            args.push_back(a);
      // The weight gradient's params (M, H, accumulate; without one, the
      // input gradient's and no accumulation) and the input gradient's
      // weight_offset (Gemma's (1 + w)), if any.
      NamedAttrList params(g.weight ? g.weight.getParams() : g.input.getParams());
      if (!g.weight)
        params.set("accumulate", b.getBoolAttr(false));
      if (Attribute offset = g.input.getParams().get("weight_offset"))
        params.set("weight_offset", offset);
      build(b, at, g.kinds.bwd, args, params.getDictionary(b.getContext()), g.input.getLoc());
      const std::string from = (g.weight ? (g.kinds.bwdWeight + " + ").str() : std::string()) + g.kinds.bwdInput.str();
      fused.add(from + (withResidual ? " + add" : ""), g.kinds.bwd, int(members.size()));
      for (plan::KernelOp m : members)
        m.erase();
      if (withResidual) // the input gradient's buffer: no kernel names it any more
        bufs.eraseIfUnused(dx);
    }
    bufs.finish();
    fused.write(program, getArgument());
  }
};

} // namespace
