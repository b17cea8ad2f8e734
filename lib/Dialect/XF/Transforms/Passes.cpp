//===- Passes.cpp - xf pipelines and registration -------------------------===//
#include "llcdist/Dialect/XF/Transforms/Passes.h"
#include "llcdist/Support/PipelineOptions.h"

#include "mlir/Transforms/Passes.h"

using namespace mlir;

void llcdist::xf::buildForwardPipeline(OpPassManager &pm,
                                       const ForwardPipelineOptions &options) {
  pm.addPass(createCSEPass());
  pm.addPass(createAttachMesh(options));
  pm.addPass(createModelStats());
}

/// The textual options of `llcdist-forward`: attach-mesh's, by the same names.
static void bindForwardPipelineOptions(
    llcdist::TextualPipelineOptions<llcdist::xf::ForwardPipelineOptions> &o,
    llcdist::xf::ForwardPipelineOptions &f) {
  o.bind("dp", f.dp, "data-parallel degree");
  o.bind("tp", f.tp, "tensor-parallel degree");
  o.bind("pp", f.pp, "pipeline-parallel degree");
  o.bind("rank-order", f.rankOrder, "fastest- to slowest-varying axes");
}

void llcdist::xf::registerXFPassesAndPipelines() {
  registerXFPasses();
  llcdist::registerTextualPipeline<ForwardPipelineOptions>(
      "llcdist-forward",
      "the forward-graph pipeline of `llc-dist compile --emit xf`",
      bindForwardPipelineOptions, buildForwardPipeline);
}
