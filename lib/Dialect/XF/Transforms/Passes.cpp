//===- Passes.cpp - xf pipelines and registration -------------------------===//
#include "llcdist/Dialect/XF/Transforms/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void llcdist::xf::buildForwardPipeline(OpPassManager &pm,
                                       const ForwardPipelineOptions &options) {
  pm.addPass(createCSEPass());
  pm.addPass(createAttachMesh(
      {options.dp, options.tp, options.pp, options.rankOrder}));
  pm.addPass(createModelStats());
}

namespace {
struct ForwardPipelineCLOptions
    : public PassPipelineOptions<ForwardPipelineCLOptions> {
  Option<int64_t> dp{*this, "dp", llvm::cl::desc("data-parallel degree"),
                     llvm::cl::init(1)};
  Option<int64_t> tp{*this, "tp", llvm::cl::desc("tensor-parallel degree"),
                     llvm::cl::init(1)};
  Option<int64_t> pp{*this, "pp", llvm::cl::desc("pipeline-parallel degree"),
                     llvm::cl::init(1)};
  Option<std::string> rankOrder{*this, "rank-order",
                                llvm::cl::desc("fastest- to slowest-varying axes"),
                                llvm::cl::init("tp,dp,pp")};
};
} // namespace

void llcdist::xf::registerXFPassesAndPipelines() {
  registerXFPasses();
  PassPipelineRegistration<ForwardPipelineCLOptions>(
      "llcdist-forward",
      "the forward-graph pipeline of `llc-dist compile --emit xf`",
      [](OpPassManager &pm, const ForwardPipelineCLOptions &o) {
        buildForwardPipeline(pm, {o.dp, o.tp, o.pp, o.rankOrder});
      });
}
