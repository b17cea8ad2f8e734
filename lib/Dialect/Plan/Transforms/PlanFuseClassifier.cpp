//===- PlanFuseClassifier.cpp - the LM head and its loss in chunks --------===//
//
// llcdist-plan-fuse-classifier (Passes.td): the LM head writes the logits
// ([tokens, vocabulary]: 0.8 GB for GPT-2 at 8 × 1024 in bf16, 2 GB for
// Llama-3.2-1B at 4 × 2048), the cross entropy reads them, and they stay live
// until the backward's cross_entropy_bwd and the two GEMMs of the LM head's
// backward have read their gradient. This pass makes the five kernels
//   forward:  linear_fwd (x·Wᵀ → logits), cross_entropy_fwd
//   backward: cross_entropy_bwd, linear_bwd_weight, linear_bwd_input
// one `classifier` kernel at the cross_entropy_bwd's place, which runs the
// LM head, the loss and both gradients over chunks of `chunk` token rows
// (docs/plan-format.md): only a [chunk, vocabulary] scratch holds logits,
// and, where dw is not f32 and there are several chunks, an f32 [N, K]
// scratch sums dw over them (one rounding, as the unfused GEMM's).
//
// The loss is then written in the backward: the pass fuses only where that
// changes no value. For each logits buffer:
//  - every forward subroutine with the pair (linear_fwd writing it, then the
//    cross_entropy_fwd reading it) and every backward subroutine with the
//    triple agree on x, w, targets, loss, dx, dw and the shapes; all are
//    synchronous and unsharded (no vocabulary-parallel statistics), the
//    linear without bias or GELU, the input gradient written, not summed;
//  - the logits and their gradient are touched by these kernels only;
//  - after the linear_fwd in its subroutine, and before the
//    cross_entropy_bwd in its, no kernel touches the loss or writes x, w or
//    the targets; between the cross_entropy_bwd and the last GEMM, none
//    writes x, w, the targets, and none touches dx (dw) before the GEMM that
//    wrote it (a gradient bucket's all-reduce after it sees the same value);
//  - in the schedule, every forward action is followed by the backward
//    action of the same microbatch before any other action touching these
//    buffers (so 1F1B, one stage or the last; not GPipe's all-forwards-first
//    nor ZB-H1, whose W pass holds the weight gradient apart).
// The row losses are summed in the same order, so the loss is the same bits;
// dx is the same rows of the same products; dw is summed over the chunks.
//
//===----------------------------------------------------------------------===//

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/Dialect/Plan/Transforms/Passes.h"
#include "llcdist/Support/ClassifierChunk.h"

#include "Fusion.h"
#include "KernelAccess.h"
#include "KernelArgs.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"

#include <algorithm>
#include <optional>

namespace llcdist::plan {
#define GEN_PASS_DEF_PLANFUSECLASSIFIER
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist;

namespace {

using plan::argOf;
using plan::intParamOf;
using plan::isSyncKernel;

/// One logits buffer's kernels: the forward pair per forward subroutine, the
/// backward triple per backward subroutine.
struct Group {
  struct Fwd {
    plan::KernelOp linear, ce;
  };
  struct Bwd {
    plan::KernelOp ce, dw, dx; // cross_entropy_bwd, linear_bwd_weight, linear_bwd_input
  };
  SmallVector<Fwd> fwd;
  SmallVector<Bwd> bwd;
};

bool sameParams(plan::KernelOp a, plan::KernelOp b, ArrayRef<StringRef> names) {
  return llvm::all_of(names, [&](StringRef n) { return a.getParams().get(n) == b.getParams().get(n); });
}

/// A synchronous, unsharded cross entropy without the vocabulary-parallel statistics.
bool plainCrossEntropy(plan::KernelOp k, StringRef kind) {
  return isSyncKernel(k, kind) && !k.getParams().get("shard_axis") && !argOf(k, "row_max") && !argOf(k, "row_sums");
}

struct PlanFuseClassifierPass : public plan::impl::PlanFuseClassifierBase<PlanFuseClassifierPass> {
  using PlanFuseClassifierBase::PlanFuseClassifierBase;

  void runOnOperation() override {
    plan::ProgramOp program = getOperation();
    plan::FusionRecord fused;
    plan::FusionBuffers bufs(program);
    llvm::MapVector<Attribute, Group> groups = collect(program);
    if (groups.empty())
      return;
    const llvm::DenseMap<Attribute, int64_t> touches = plan::kernelsTouching(program);
    plan::NewBuffers fresh(program);
    for (auto &[logits, g] : groups) {
      if (!valid(program, g, logits, bufs, touches))
        continue;
      rewrite(program, g, logits, bufs, fresh);
      fused.add("linear_fwd + cross_entropy_fwd + cross_entropy_bwd + linear_bwd_weight + linear_bwd_input",
                "classifier", int64_t(2 * g.fwd.size() + 3 * g.bwd.size()), int64_t(g.bwd.size()));
    }
    bufs.finish();
    fused.write(program, getArgument());
  }

  /// The candidates by logits buffer: each forward pair and backward triple
  /// found in a subroutine.
  static llvm::MapVector<Attribute, Group> collect(plan::ProgramOp program) {
    llvm::MapVector<Attribute, Group> groups;
    program.walk([&](plan::SubroutineOp sub) {
      for (plan::KernelOp ce : sub.getOps<plan::KernelOp>()) {
        if (!plainCrossEntropy(ce, "cross_entropy_fwd"))
          continue;
        Attribute logits = argOf(ce, "logits");
        // The linear_fwd writing the logits: the last kernel before ce touching them.
        plan::KernelOp linear;
        for (Operation *x = ce->getPrevNode(); x && !linear; x = x->getPrevNode())
          if (auto k = dyn_cast<plan::KernelOp>(x); k && plan::accessOf(k).touches(plan::symbolOf(logits)))
            linear = k;
        if (isSyncKernel(linear, "linear_fwd") && argOf(linear, "y") == logits && !argOf(linear, "bias") &&
            !argOf(linear, "gelu"))
          groups[logits].fwd.push_back({linear, ce});
      }
    });
    program.walk([&](plan::SubroutineOp sub) {
      for (plan::KernelOp ce : sub.getOps<plan::KernelOp>()) {
        if (!plainCrossEntropy(ce, "cross_entropy_bwd") || !groups.count(argOf(ce, "logits")))
          continue;
        Attribute grad = argOf(ce, "dlogits");
        Group::Bwd b{ce, {}, {}};
        for (Operation *x = ce->getNextNode(); x && !(b.dw && b.dx); x = x->getNextNode()) {
          auto k = dyn_cast<plan::KernelOp>(x);
          if (!k || argOf(k, "dy") != grad)
            continue;
          if (!b.dw && isSyncKernel(k, "linear_bwd_weight"))
            b.dw = k;
          else if (!b.dx && isSyncKernel(k, "linear_bwd_input"))
            b.dx = k;
        }
        if (b.dw && b.dx)
          groups[argOf(ce, "logits")].bwd.push_back(b);
        else
          groups[argOf(ce, "logits")].fwd.clear(); // a backward the pass cannot fuse: keep the group
      }
    });
    return groups;
  }

  /// Whether the group may become classifier kernels without changing a value.
  static bool valid(plan::ProgramOp program, const Group &g, Attribute logits, const plan::FusionBuffers &bufs,
                    const llvm::DenseMap<Attribute, int64_t> &touches) {
    if (g.fwd.empty() || g.bwd.empty())
      return false;
    const Group::Fwd &f0 = g.fwd.front();
    const Group::Bwd &b0 = g.bwd.front();
    const Attribute x = argOf(f0.linear, "x"), w = argOf(f0.linear, "w"), targets = argOf(f0.ce, "targets"),
                    loss = argOf(f0.ce, "loss"), grad = argOf(b0.ce, "dlogits"), dx = argOf(b0.dx, "dx"),
                    dw = argOf(b0.dw, "dw");
    for (Group::Fwd f : g.fwd)
      if (argOf(f.linear, "x") != x || argOf(f.linear, "w") != w || argOf(f.ce, "targets") != targets ||
          argOf(f.ce, "loss") != loss || !sameParams(f.linear, f0.linear, {"M", "K", "N", "layout"}) ||
          !sameParams(f.ce, f0.ce, {"M", "V", "scale", "real_vocab"}))
        return false;
    if (intParamOf(f0.ce, "M") != intParamOf(f0.linear, "M") || intParamOf(f0.ce, "V") != intParamOf(f0.linear, "N"))
      return false;
    for (Group::Bwd b : g.bwd) {
      if (argOf(b.ce, "targets") != targets || argOf(b.ce, "dlogits") != grad || argOf(b.dx, "dx") != dx ||
          argOf(b.dw, "dw") != dw || argOf(b.dw, "x") != x || argOf(b.dx, "w") != w || argOf(b.dw, "db") ||
          argOf(b.dx, "gelu_x") || !sameParams(b.ce, b0.ce, {"scale"}) ||
          !sameParams(b.ce, f0.ce, {"M", "V", "real_vocab"}) ||
          !sameParams(b.dw, f0.linear, {"M", "K", "N", "layout"}) ||
          !sameParams(b.dx, f0.linear, {"M", "K", "N", "layout"}) || !sameParams(b.dw, b0.dw, {"accumulate"}))
        return false;
      auto acc = b.dx.getParams().getAs<BoolAttr>("accumulate");
      if (!acc || acc.getValue())
        return false;
    }
    // One buffer must not play two parts (the op's roles never alias).
    llvm::SmallDenseSet<Attribute, 8> distinct{x, w, targets, loss, logits, dx, dw};
    if (distinct.size() != 7 || (grad != logits && distinct.contains(grad)))
      return false;
    // The GEMMs' dtypes: x, w and the logits alike; dx and dw that or f32.
    Type t = bufs.elementTypeOf(x), f32 = Float32Type::get(program.getContext());
    if (!t || bufs.elementTypeOf(w) != t || bufs.elementTypeOf(logits) != t || bufs.elementTypeOf(grad) != t)
      return false;
    for (Attribute out : {dx, dw})
      if (bufs.elementTypeOf(out) != t && bufs.elementTypeOf(out) != f32)
        return false;
    // The logits and their gradient: these kernels' alone.
    const int64_t nf = int64_t(g.fwd.size()), nb = int64_t(g.bwd.size());
    if (grad == logits ? touches.lookup(logits) != 2 * nf + 3 * nb
                       : touches.lookup(logits) != 2 * nf + nb || touches.lookup(grad) != 3 * nb)
      return false;

    const plan::KernelAccess group = groupAccess({x, w, targets, loss, logits, grad, dx, dw});
    const llvm::DenseSet<StringAttr> inputs{plan::symbolOf(x), plan::symbolOf(w), plan::symbolOf(targets)};
    auto writesInput = [&](const plan::KernelAccess &a) {
      return llvm::any_of(inputs, [&](StringAttr s) { return a.writes.contains(s); });
    };
    const StringAttr lossSym = plan::symbolOf(loss);
    const llvm::DenseSet<StringAttr> outs{plan::symbolOf(logits), plan::symbolOf(grad), plan::symbolOf(dx),
                                          plan::symbolOf(dw)};
    auto touchesOut = [&](const plan::KernelAccess &a) {
      return llvm::any_of(outs, [&](StringAttr s) { return a.touches(s); });
    };
    for (Group::Fwd f : g.fwd)
      for (Operation *op = f.linear->getNextNode(); op; op = op->getNextNode()) {
        auto k = dyn_cast<plan::KernelOp>(op);
        if (!k || k == f.ce)
          continue;
        const plan::KernelAccess a = plan::accessOf(k);
        if (a.touches(lossSym) || writesInput(a) || touchesOut(a) || !waitIsKnown(k))
          return false;
      }
    for (Group::Bwd b : g.bwd) {
      for (Operation *op = b.ce->getPrevNode(); op; op = op->getPrevNode())
        if (auto k = dyn_cast<plan::KernelOp>(op)) {
          const plan::KernelAccess a = plan::accessOf(k);
          if (a.touches(lossSym) || writesInput(a) || !waitIsKnown(k))
            return false;
        }
      // The classifier writes dx and dw at the cross_entropy_bwd's place: a
      // kernel before the GEMM that wrote one must not touch it (after it,
      // e.g. a gradient bucket's all-reduce, it sees the same value).
      bool dwDone = false, dxDone = false;
      const StringAttr dwSym = plan::symbolOf(dw), dxSym = plan::symbolOf(dx), logitsSym = plan::symbolOf(logits),
                       gradSym = plan::symbolOf(grad);
      for (Operation *op = b.ce->getNextNode(); op && !(dwDone && dxDone); op = op->getNextNode()) {
        auto k = dyn_cast<plan::KernelOp>(op);
        if (!k)
          continue;
        if (k == b.dw || k == b.dx) {
          (k == b.dw ? dwDone : dxDone) = true;
          continue;
        }
        const plan::KernelAccess a = plan::accessOf(k);
        if (writesInput(a) || a.touches(logitsSym) || a.touches(gradSym) || (!dwDone && a.touches(dwSym)) ||
            (!dxDone && a.touches(dxSym)) || !waitIsKnown(k))
          return false;
      }
    }
    return scheduleKeepsPairs(program, g, group);
  }

  /// A wait names no buffers: one anywhere in the ranges above could end an
  /// operation on the group's buffers; be conservative.
  static bool waitIsKnown(plan::KernelOp k) { return k.getKernel() != plan::kWaitKernel; }

  static plan::KernelAccess groupAccess(ArrayRef<Attribute> bufs) {
    plan::KernelAccess a;
    for (Attribute b : bufs)
      a.reads.insert(plan::symbolOf(b)), a.writes.insert(plan::symbolOf(b));
    return a;
  }

  /// Every forward action is followed by its microbatch's backward action
  /// before any other action whose subroutine touches the group's buffers.
  static bool scheduleKeepsPairs(plan::ProgramOp program, const Group &g, const plan::KernelAccess &group) {
    llvm::DenseSet<StringAttr> fwd, bwd;
    for (Group::Fwd f : g.fwd)
      fwd.insert(f.linear->getParentOfType<plan::SubroutineOp>().getSymNameAttr());
    for (const Group::Bwd &b : g.bwd)
      bwd.insert(b.ce->getParentOfType<plan::SubroutineOp>().getSymNameAttr());
    if (llvm::any_of(fwd, [&](StringAttr s) { return bwd.contains(s); }))
      return false;
    llvm::DenseMap<StringAttr, bool> touching; // per subroutine: touches the group's buffers
    program.walk([&](plan::SubroutineOp sub) {
      bool t = false;
      for (plan::KernelOp k : sub.getOps<plan::KernelOp>())
        t = t || k.getKernel() == plan::kWaitKernel || plan::dependent(plan::accessOf(k), group);
      touching[sub.getSymNameAttr()] = t;
    });
    std::optional<int64_t> pending;
    bool any = false;
    for (plan::ScheduleOp schedule : program.getBody().front().getOps<plan::ScheduleOp>())
      for (plan::ActionOp action : schedule.getBody().front().getOps<plan::ActionOp>()) {
        StringAttr sub = action.getSubroutineAttr().getAttr();
        const int64_t mb = action.getMicrobatch() ? int64_t(*action.getMicrobatch()) : -1;
        if (fwd.contains(sub)) {
          if (pending)
            return false;
          pending = mb;
          any = true;
        } else if (bwd.contains(sub)) {
          if (!pending || *pending != mb)
            return false;
          pending.reset();
        } else if (pending && touching.lookup(sub)) {
          return false;
        }
      }
    return any && !pending;
  }

  void rewrite(plan::ProgramOp program, Group &g, Attribute logits, plan::FusionBuffers &bufs,
               plan::NewBuffers &fresh) {
    OpBuilder b(program.getContext());
    Group::Fwd &f0 = g.fwd.front();
    Group::Bwd &b0 = g.bwd.front();
    plan::BufferOp logitsBuf = bufs.lookup(logits), dwBuf = bufs.lookup(argOf(b0.dw, "dw"));
    const int64_t M = intParamOf(f0.linear, "M"), K = intParamOf(f0.linear, "K"), N = intParamOf(f0.linear, "N");
    Type elem = logitsBuf.getTensorType().getElementType();
    const int64_t elemBytes = std::max<int64_t>(1, int64_t(elem.getIntOrFloatBitWidth() / 8));
    const int64_t chunk = chunkRows > 0 ? std::min<int64_t>(chunkRows, M) : classifierChunkRows(M, N, elemBytes);

    auto newBuffer = [&](StringRef name, RankedTensorType type) {
      b.setInsertionPoint(logitsBuf);
      return FlatSymbolRefAttr::get(
          fresh.create(b, logitsBuf.getLoc(), type, name, "scratch", logitsBuf->getAttr(plan::kSlotsAttr))
              .getSymNameAttr());
    };
    Attribute chunkBuf = newBuffer((logitsBuf.getName() + ".chunk").str(), RankedTensorType::get({chunk, N}, elem));
    Attribute dwAcc;
    if (chunk < M && !dwBuf.getTensorType().getElementType().isF32())
      dwAcc = newBuffer((dwBuf.getName() + ".f32_sum").str(),
                        RankedTensorType::get(dwBuf.getTensorType().getShape(), b.getF32Type()));

    SmallVector<NamedAttribute> args{b.getNamedAttr("x", argOf(f0.linear, "x")),
                                     b.getNamedAttr("w", argOf(f0.linear, "w")),
                                     b.getNamedAttr("targets", argOf(f0.ce, "targets")),
                                     b.getNamedAttr("loss", argOf(f0.ce, "loss")),
                                     b.getNamedAttr("logits", chunkBuf),
                                     b.getNamedAttr("dx", argOf(b0.dx, "dx")),
                                     b.getNamedAttr("dw", argOf(b0.dw, "dw"))};
    if (dwAcc)
      args.push_back(b.getNamedAttr("dw_acc", dwAcc));
    SmallVector<NamedAttribute> params{b.getNamedAttr("M", b.getI64IntegerAttr(M)),
                                       b.getNamedAttr("K", b.getI64IntegerAttr(K)),
                                       b.getNamedAttr("N", b.getI64IntegerAttr(N)),
                                       b.getNamedAttr("layout", f0.linear.getParams().get("layout")),
                                       b.getNamedAttr("accumulate", b0.dw.getParams().get("accumulate")),
                                       b.getNamedAttr("chunk", b.getI64IntegerAttr(chunk)),
                                       b.getNamedAttr("scale", f0.ce.getParams().get("scale")),
                                       b.getNamedAttr("grad_scale", b0.ce.getParams().get("scale"))};
    if (Attribute real = f0.ce.getParams().get("real_vocab"))
      params.push_back(b.getNamedAttr("real_vocab", real));
    const Attribute grad = argOf(b0.ce, "dlogits");
    for (Group::Bwd &bw : g.bwd) {
      b.setInsertionPoint(bw.ce);
      plan::KernelOp::create(b, f0.linear.getLoc(), b.getStringAttr("classifier"), b.getDictionaryAttr(args),
                             b.getDictionaryAttr(params));
      bw.ce.erase();
      bw.dw.erase();
      bw.dx.erase();
    }
    for (Group::Fwd &f : g.fwd) {
      f.linear.erase();
      f.ce.erase();
    }
    bufs.eraseIfUnused(logits);
    if (grad != logits)
      bufs.eraseIfUnused(grad);
  }
};

} // namespace
