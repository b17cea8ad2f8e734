//===- TPReplicateEmbeddings.cpp - keep embeddings whole under tp ---------===//
//
// The worked example of docs/writing-a-sharding-pass.md: a strategy pass
// edits the xf.tp_split annotations; llcdist-partition derives the rest.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Dialect/XF/IR/XFOps.h"
#include "llcdist/Dialect/XF/Transforms/Passes.h"

#include "llvm/ADT/StringSet.h"

#define DEBUG_TYPE "llcdist-tp-replicate-embeddings"

namespace llcdist::xf {
#define GEN_PASS_DEF_TPREPLICATEEMBEDDINGS
#include "llcdist/Dialect/XF/Transforms/Passes.h.inc"
} // namespace llcdist::xf

using namespace mlir;
using namespace llcdist::xf;

namespace {
struct TPReplicateEmbeddingsPass
    : public llcdist::xf::impl::TPReplicateEmbeddingsBase<TPReplicateEmbeddingsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    // 1. The parameters to keep whole: embedding tables, and the weight of
    //    the linear that feeds the loss (the LM head, tied or not).
    llvm::StringSet<> whole;
    auto keep = [&](Value v) {
      if (auto p = v.getDefiningOp<ParamOp>())
        whole.insert(p.getName());
    };
    module.walk([&](Operation *op) {
      if (auto e = dyn_cast<EmbeddingOp>(op))
        keep(e.getTable());
      if (auto ce = dyn_cast<CrossEntropyOp>(op))
        if (auto head = ce.getLogits().getDefiningOp<LinearOp>())
          keep(head.getWeight());
    });
    // 2. Drop their split, on every clone of the name (layer bodies and
    //    backward bodies read parameters by name too).
    module.walk([&](ParamOp p) {
      if (whole.contains(p.getName()))
        p->removeAttr("xf.tp_split");
    });
  }
};
} // namespace
