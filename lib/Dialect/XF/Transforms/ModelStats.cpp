//===- ModelStats.cpp - record parameter and FLOP counts on the module ----===//
#include "llcdist/Dialect/XF/Analysis/ModelStats.h"
#include "llcdist/Dialect/XF/IR/XFOps.h"
#include "llcdist/Dialect/XF/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "llcdist-model-stats"

namespace llcdist::xf {
#define GEN_PASS_DEF_MODELSTATS
#include "llcdist/Dialect/XF/Transforms/Passes.h.inc"
} // namespace llcdist::xf

using namespace mlir;
using namespace llcdist::xf;

namespace {
struct ModelStatsPass
    : public llcdist::xf::impl::ModelStatsBase<ModelStatsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<ModelStats> stats = computeModelStats(module);
    if (failed(stats))
      return signalPassFailure();
    Builder b(module.getContext());
    module->setAttr(
        "xf.stats",
        b.getDictionaryAttr({
            b.getNamedAttr("parameters", b.getI64IntegerAttr(stats->parameters)),
            b.getNamedAttr("layers", b.getI64IntegerAttr(stats->layers)),
            b.getNamedAttr("forward_flops_per_token",
                           b.getI64IntegerAttr(
                               static_cast<int64_t>(stats->forwardFlopsPerToken()))),
            b.getNamedAttr("linear_flops_per_token",
                           b.getI64IntegerAttr(
                               static_cast<int64_t>(stats->linearFlopsPerToken))),
            b.getNamedAttr("attention_flops_per_token",
                           b.getI64IntegerAttr(
                               static_cast<int64_t>(stats->attentionFlopsPerToken))),
            b.getNamedAttr("training_flops_per_token",
                           b.getI64IntegerAttr(
                               static_cast<int64_t>(stats->trainingFlopsPerToken()))),
        }));
    markAllAnalysesPreserved();
  }
};
} // namespace
