//===- PlanPackedQkv.cpp - attention on the packed QKV buffer -------------===//
//
// llcdist-plan-packed-qkv (Passes.td): GPT-2's QKV GEMM writes q, k and v
// side by side in one [tokens, (nh+2·nkv)·hd] buffer; a split_fwd copies
// them into three buffers for the attention, and in the backward a
// split_bwd copies the attention's dq, dk, dv back into one buffer for the
// GEMM's gradients: two copies of the whole QKV activation per layer. The
// attention ops read and write the packed layout through row strides (its
// `qkv` and `dqkv` roles, docs/plan-format.md), so this pass
//  - makes every attention op that reads a split_fwd's outputs (as q, k, v
//    in that order) read the split's input as `qkv`, and drops the split,
//    where no value changes: the outputs are touched only by their splits
//    and those attention ops, and after every write of the input the next
//    kernel of its subroutine touching the input or the outputs is the
//    split;
//  - makes an attention_bwd whose dq, dk, dv only a split_bwd reads (the
//    next kernel after it touching them, with no kernel between touching
//    the split's dx) write that dx as `dqkv`, and drops the split.
// The buffers q, k, v and dq, dk, dv go; the attention reads the same
// values, computes the same arithmetic and so keeps the bits.
//
//===----------------------------------------------------------------------===//

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/Dialect/Plan/Transforms/Passes.h"

#include "Fusion.h"
#include "KernelAccess.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"

namespace llcdist::plan {
#define GEN_PASS_DEF_PLANPACKEDQKV
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist;

namespace {

using plan::argOf;
using plan::intParamOf;
using plan::isSyncKernel;
using plan::symbolOf;

/// The three buffers of a split's list role `role` (empty unless there are
/// exactly three).
SmallVector<Attribute, 3> threeOf(plan::KernelOp split, StringRef role) {
  auto list = dyn_cast_or_null<ArrayAttr>(argOf(split, role));
  if (!list || list.size() != 3)
    return {};
  return SmallVector<Attribute, 3>(list.begin(), list.end());
}

/// Whether `split` (rows × sizes) cuts rows of the packed layout of
/// `attention`: rows B·S, sizes nh·hd, nkv·hd, nkv·hd.
bool cutsPackedRows(plan::KernelOp split, plan::KernelOp attention) {
  auto sizes = split.getParams().getAs<ArrayAttr>("sizes");
  const int64_t nh = intParamOf(attention, "nh"), nkv = intParamOf(attention, "nkv"), hd = intParamOf(attention, "hd");
  if (!sizes || sizes.size() != 3 ||
      intParamOf(split, "rows") != intParamOf(attention, "B") * intParamOf(attention, "S"))
    return false;
  const int64_t want[3] = {nh * hd, nkv * hd, nkv * hd};
  for (int i = 0; i < 3; ++i) {
    auto s = dyn_cast<IntegerAttr>(sizes[i]);
    if (!s || s.getInt() != want[i])
      return false;
  }
  return true;
}

bool touchesAny(const plan::KernelAccess &acc, ArrayRef<Attribute> bufs) {
  return llvm::any_of(bufs, [&](Attribute b) { return acc.touches(symbolOf(b)); });
}
bool touches(plan::KernelOp k, ArrayRef<Attribute> bufs) { return touchesAny(plan::accessOf(k), bufs); }

/// `k`'s arguments with `drop` removed and `role` = `buf` added.
DictionaryAttr withPacked(OpBuilder &b, plan::KernelOp k, ArrayRef<StringRef> drop, StringRef role, Attribute buf) {
  SmallVector<NamedAttribute> args;
  for (NamedAttribute a : k.getArgs())
    if (!llvm::is_contained(drop, a.getName().getValue()))
      args.push_back(a);
  args.push_back(b.getNamedAttr(role, buf));
  return b.getDictionaryAttr(args);
}

struct PlanPackedQkvPass : public plan::impl::PlanPackedQkvBase<PlanPackedQkvPass> {
  using PlanPackedQkvBase::PlanPackedQkvBase;

  void runOnOperation() override {
    plan::ProgramOp program = getOperation();
    OpBuilder b(program.getContext());
    plan::FusionRecord fused;
    plan::FusionBuffers bufs(program);
    packInputs(program, b, bufs, fused);
    packGradients(program, b, bufs, fused);
    bufs.finish();
    fused.write(program, getArgument());
  }

  /// split_fwd + the attention ops reading its outputs -> attention on `qkv`.
  static void packInputs(plan::ProgramOp program, OpBuilder &b, plan::FusionBuffers &bufs, plan::FusionRecord &fused) {
    struct Group {
      Attribute x;
      SmallVector<plan::KernelOp> splits, attentions;
      bool ok = true;
    };
    // Keyed by the split's first output; every split of a group writes the same three from one input.
    llvm::MapVector<Attribute, Group> groups;
    program.walk([&](plan::KernelOp k) {
      if (!isSyncKernel(k, "split_fwd"))
        return;
      SmallVector<Attribute, 3> outs = threeOf(k, "outs");
      if (outs.empty())
        return;
      Group &g = groups[outs[0]];
      g.ok = g.ok && (!g.x || (g.x == argOf(k, "x") && threeOf(g.splits.front(), "outs") == outs));
      g.x = argOf(k, "x");
      g.splits.push_back(k);
    });
    if (groups.empty())
      return;
    llvm::DenseMap<Attribute, int64_t> touching = plan::kernelsTouching(program);
    program.walk([&](plan::KernelOp k) {
      if (!isSyncKernel(k, "attention_fwd") && !isSyncKernel(k, "attention_bwd"))
        return;
      auto it = groups.find(argOf(k, "q"));
      if (it == groups.end())
        return;
      Group &g = it->second;
      SmallVector<Attribute, 3> outs = threeOf(g.splits.front(), "outs");
      g.ok = g.ok && argOf(k, "k") == outs[1] && argOf(k, "v") == outs[2] && cutsPackedRows(g.splits.front(), k) &&
             !touchesOtherwise(k, {"q", "k", "v"}, outs, g.x);
      g.attentions.push_back(k);
    });

    for (auto &[q, g] : groups) {
      if (!g.ok || g.attentions.empty())
        continue;
      SmallVector<Attribute, 3> outs = threeOf(g.splits.front(), "outs");
      // The outputs are touched by the group's kernels only.
      const int64_t own = int64_t(g.splits.size() + g.attentions.size());
      if (llvm::any_of(outs, [&](Attribute o) { return touching[o] != own; }))
        continue;
      if (llvm::any_of(outs, [&](Attribute o) { return bufs.elementTypeOf(o) != bufs.elementTypeOf(g.x); }))
        continue;
      if (!splitFollowsEveryWrite(program, g.x, outs, g.splits))
        continue;
      for (plan::KernelOp a : g.attentions) {
        b.setInsertionPoint(a);
        plan::KernelOp::create(b, a.getLoc(), a.getKernelAttr(), withPacked(b, a, {"q", "k", "v"}, "qkv", g.x),
                               a.getParams());
        a.erase();
      }
      for (plan::KernelOp s : g.splits)
        s.erase();
      for (Attribute o : outs)
        bufs.eraseIfUnused(o);
      fused.add("split_fwd + attention", "attention reading qkv", int64_t(g.splits.size() + g.attentions.size()),
                int64_t(g.attentions.size()));
    }
  }

  /// Whether attention `k` names one of `parts` or `whole` in another role
  /// than `roles` (the packed buffer must stay apart from its other
  /// arguments).
  static bool touchesOtherwise(plan::KernelOp k, ArrayRef<StringRef> roles, ArrayRef<Attribute> parts,
                               Attribute whole) {
    for (NamedAttribute a : k.getArgs()) {
      if (llvm::is_contained(roles, a.getName().getValue()))
        continue;
      if (a.getValue() == whole || llvm::is_contained(parts, a.getValue()))
        return true;
    }
    return false;
  }

  /// Whether, in every subroutine, the next kernel after each write of `x`
  /// that touches `x` or `outs` is one of `splits`, and every kernel touching
  /// them is synchronous: then the outputs hold the split of x's current
  /// value wherever an attention reads them.
  static bool splitFollowsEveryWrite(plan::ProgramOp program, Attribute x, ArrayRef<Attribute> outs,
                                     ArrayRef<plan::KernelOp> splits) {
    SmallVector<Attribute, 4> all(outs.begin(), outs.end());
    all.push_back(x);
    bool ok = true;
    program.walk([&](plan::SubroutineOp sub) {
      bool pendingWrite = false;
      for (plan::KernelOp k : sub.getOps<plan::KernelOp>()) {
        const plan::KernelAccess acc = plan::accessOf(k);
        if (!touchesAny(acc, all))
          continue;
        if (!plan::isSyncCompute(k)) {
          ok = false;
          continue;
        }
        if (llvm::is_contained(splits, k)) {
          pendingWrite = false;
          continue;
        }
        if (pendingWrite)
          ok = false; // x or the outputs touched between a write of x and its split
        if (acc.writes.contains(symbolOf(x))) {
          pendingWrite = true;
          if (acc.reads.contains(symbolOf(x)))
            ok = false; // x updated in place: keep it simple
        }
      }
      ok = ok && !pendingWrite;
    });
    return ok;
  }

  /// attention_bwd + the split_bwd of its dq, dk, dv -> attention_bwd on `dqkv`.
  static void packGradients(plan::ProgramOp program, OpBuilder &b, plan::FusionBuffers &bufs,
                            plan::FusionRecord &fused) {
    llvm::DenseMap<Attribute, int64_t> touching = plan::kernelsTouching(program), pairTouches;
    struct Pair {
      plan::KernelOp attention, split;
    };
    SmallVector<Pair> pairs;
    program.walk([&](plan::SubroutineOp sub) {
      for (plan::KernelOp a : sub.getOps<plan::KernelOp>()) {
        if (!isSyncKernel(a, "attention_bwd") || !argOf(a, "dq"))
          continue;
        const SmallVector<Attribute, 3> grads{argOf(a, "dq"), argOf(a, "dk"), argOf(a, "dv")};
        plan::KernelOp split;
        for (Operation *x = a->getNextNode(); x && !split; x = x->getNextNode())
          if (auto k = dyn_cast<plan::KernelOp>(x); k && touches(k, grads))
            split = k;
        if (!isSyncKernel(split, "split_bwd") || threeOf(split, "douts") != ArrayRef<Attribute>(grads) ||
            !cutsPackedRows(split, a))
          continue;
        Attribute dx = argOf(split, "dx");
        if (touchesOtherwise(a, {"dq", "dk", "dv"}, grads, dx) ||
            llvm::any_of(grads, [&](Attribute g) { return bufs.elementTypeOf(g) != bufs.elementTypeOf(dx); }))
          continue;
        bool between = false; // dx touched between the two: the write may not move up
        for (Operation *x = a->getNextNode(); x != split.getOperation(); x = x->getNextNode())
          if (auto k = dyn_cast<plan::KernelOp>(x); k && touches(k, {dx}))
            between = true;
        if (between)
          continue;
        pairs.push_back({a, split});
        for (Attribute g : grads)
          pairTouches[g] += 2;
      }
    });
    for (Pair &p : pairs) {
      const SmallVector<Attribute, 3> grads{argOf(p.attention, "dq"), argOf(p.attention, "dk"),
                                            argOf(p.attention, "dv")};
      if (llvm::any_of(grads, [&](Attribute g) { return touching[g] != pairTouches[g]; }))
        continue;
      b.setInsertionPoint(p.attention);
      plan::KernelOp::create(b, p.attention.getLoc(), p.attention.getKernelAttr(),
                             withPacked(b, p.attention, {"dq", "dk", "dv"}, "dqkv", argOf(p.split, "dx")),
                             p.attention.getParams());
      p.attention.erase();
      p.split.erase();
      for (Attribute g : grads)
        bufs.eraseIfUnused(g);
      fused.add("attention_bwd + split_bwd", "attention_bwd writing dqkv", 2);
    }
  }
};

} // namespace
