//===- PlanFuseEmbedding.cpp - token and position embedding as one --------===//
//
// llcdist-plan-fuse-embedding (Passes.td): GPT-2's input is the token
// embedding's gather (embedding_fwd) plus the learned position embedding
// (pos_embedding_fwd), and its backward the two weight gradients of the same
// dy (embedding_bwd_weight, pos_embedding_bwd_weight): two kernels each way,
// the first writing a [tokens, hidden] buffer the second reads back. In every
// subroutine,
//  - an embedding_fwd and the pos_embedding_fwd that first reads its out
//    become the embedding_fwd with `wpe` (out = table[ids] + wpe[position]),
//    writing the position embedding's y; the intermediate buffer goes where
//    nothing else touches it;
//  - a pos_embedding_bwd_weight and an embedding_bwd_weight of the same dy
//    (dy = dout, the same accumulate) become the embedding_bwd_weight with
//    `dwpe`.
// Only unsharded ops fuse (no shard_axis: vocabulary- or sequence-parallel
// ones keep their communication between them), synchronous, at a place the
// pair may meet (Fusion.h: placement). The gather copies table rows, so
// where table and out have one dtype the intermediate is exact and the fused
// op gives the same bits.
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
#define GEN_PASS_DEF_PLANFUSEEMBEDDING
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist;

namespace {

using plan::argOf;
using plan::intParamOf;
using plan::isSyncKernel;

/// Whether the token embedding `emb` (M rows of H) and the position
/// embedding `pos` (B×S rows of H) cover the same rows, neither sharded
/// and the token embedding not scaled (the fused kernel adds wpe unscaled).
bool sameRows(plan::KernelOp emb, plan::KernelOp pos) {
  return !emb.getParams().get("shard_axis") && !pos.getParams().get("shard_axis") && !emb.getParams().get("scale") &&
         intParamOf(emb, "H") == intParamOf(pos, "H") &&
         intParamOf(emb, "M") == intParamOf(pos, "B") * intParamOf(pos, "S") && intParamOf(pos, "S") > 0;
}

/// `emb`'s params with the position embedding's S and P, and its offset
/// (OPT's) where it has one.
DictionaryAttr withPositions(OpBuilder &b, plan::KernelOp emb, plan::KernelOp pos) {
  SmallVector<NamedAttribute> params(emb.getParams().getValue());
  params.push_back(b.getNamedAttr("S", pos.getParams().get("S")));
  params.push_back(b.getNamedAttr("P", pos.getParams().get("P")));
  if (Attribute offset = pos.getParams().get("offset"))
    params.push_back(b.getNamedAttr("offset", offset));
  return b.getDictionaryAttr(params);
}

struct PlanFuseEmbeddingPass : public plan::impl::PlanFuseEmbeddingBase<PlanFuseEmbeddingPass> {
  using PlanFuseEmbeddingBase::PlanFuseEmbeddingBase;

  void runOnOperation() override {
    plan::ProgramOp program = getOperation();
    OpBuilder b(program.getContext());
    plan::FusionRecord fused;
    const plan::Accesses accesses(program);
    plan::FusionBuffers bufs(program);
    fuseForward(program, b, accesses, bufs, fused);
    fuseBackward(program, b, accesses, fused);
    bufs.finish();
    fused.write(program, getArgument());
  }

  static void fuseForward(plan::ProgramOp program, OpBuilder &b, const plan::Accesses &accesses,
                          plan::FusionBuffers &bufs, plan::FusionRecord &fused) {
    struct Pair {
      plan::KernelOp emb, pos;
    };
    SmallVector<Pair> pairs;
    program.walk([&](plan::SubroutineOp sub) {
      for (plan::KernelOp e : sub.getOps<plan::KernelOp>()) {
        if (!isSyncKernel(e, "embedding_fwd") || argOf(e, "wpe"))
          continue;
        Attribute out = argOf(e, "out");
        plan::KernelOp p = plan::nextReader(e, out);
        if (!isSyncKernel(p, "pos_embedding_fwd") || argOf(p, "x") != out || !sameRows(e, p))
          continue;
        // The gather's rows are the table's: exact in out only where both have one dtype.
        if (bufs.elementTypeOf(argOf(e, "table")) != bufs.elementTypeOf(out) ||
            bufs.elementTypeOf(out) != bufs.elementTypeOf(argOf(p, "y")))
          continue;
        // The fused op writes y while it reads ids, table and wpe: none of them may be y.
        Attribute y = argOf(p, "y");
        if (y == argOf(e, "ids") || y == argOf(e, "table") || y == argOf(p, "wpe") || argOf(p, "wpe") == out)
          continue;
        pairs.push_back({e, p});
      }
    });
    // A separate intermediate goes only where the pair alone touches it (a
    // pipeline's _last clone repeats the pair).
    llvm::DenseMap<Attribute, int64_t> touches = plan::kernelsTouching(program), pairTouches;
    for (Pair &p : pairs)
      if (argOf(p.emb, "out") != argOf(p.pos, "y"))
        pairTouches[argOf(p.emb, "out")] += 2;
    for (Pair &p : pairs) {
      Attribute out = argOf(p.emb, "out"), y = argOf(p.pos, "y");
      if (out != y && touches[out] != pairTouches[out])
        continue;
      SmallVector<NamedAttribute> args{b.getNamedAttr("ids", argOf(p.emb, "ids")),
                                       b.getNamedAttr("table", argOf(p.emb, "table")), b.getNamedAttr("out", y),
                                       b.getNamedAttr("wpe", argOf(p.pos, "wpe"))};
      if (!plan::fusePair(b, p.emb, p.pos, args, withPositions(b, p.emb, p.pos), accesses))
        continue;
      fused.add("embedding_fwd + pos_embedding_fwd", "embedding_fwd with wpe", 2);
      if (out != y)
        bufs.eraseIfUnused(out);
    }
  }

  static void fuseBackward(plan::ProgramOp program, OpBuilder &b, const plan::Accesses &accesses,
                           plan::FusionRecord &fused) {
    program.walk([&](plan::SubroutineOp sub) {
      SmallVector<plan::KernelOp> ops(sub.getOps<plan::KernelOp>());
      llvm::DenseSet<Operation *> taken;
      for (plan::KernelOp p : ops) {
        if (taken.contains(p) || !isSyncKernel(p, "pos_embedding_bwd_weight"))
          continue;
        for (plan::KernelOp e : ops) {
          if (taken.contains(e) || !isSyncKernel(e, "embedding_bwd_weight") || argOf(e, "dwpe") ||
              argOf(e, "dout") != argOf(p, "dy") || !sameRows(e, p) ||
              e.getParams().get("accumulate") != p.getParams().get("accumulate"))
            continue;
          Attribute dwpe = argOf(p, "dwpe");
          if (dwpe == argOf(e, "dtable") || dwpe == argOf(e, "dout") || dwpe == argOf(e, "ids"))
            continue;
          SmallVector<NamedAttribute> args(e.getArgs().getValue());
          args.push_back(b.getNamedAttr("dwpe", dwpe));
          Operation *eOp = e, *pOp = p;
          if (!plan::fusePair(b, e, p, args, withPositions(b, e, p), accesses))
            continue;
          taken.insert(eOp);
          taken.insert(pOp);
          fused.add("embedding_bwd_weight + pos_embedding_bwd_weight", "embedding_bwd_weight with dwpe", 2);
          break;
        }
      }
    });
  }
};

} // namespace
