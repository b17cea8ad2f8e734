//===- Pipelines.cpp - the pipelines llc-dist compile runs ----------------===//
#include "llcdist/Pipelines/Pipelines.h"
#include "llcdist/Conversion/Passes.h"
#include "llcdist/Dialect/Plan/Transforms/Passes.h"

#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace llcdist;

void llcdist::buildTrainingPipeline(OpPassManager &pm,
                                    const TrainingPipelineOptions &o) {
  xf::buildForwardPipeline(pm, o.mesh);
  // Megatron-LM: the vocabulary splits over tp only when vocabulary-parallel.
  const int64_t vocabSplit = o.replicateEmbeddings ? 1 : o.mesh.tp;
  pm.addPass(xf::createPadVocab({o.vocabDivisibleBy * vocabSplit}));
  pm.addPass(xf::createAutodiff());
  pm.addPass(xf::createRecompute({o.recompute}));
  xf::AddOptimizerOptions opt;
  opt.optimizer = o.optimizer;
  opt.schedule = o.schedule;
  opt.lr = o.lr;
  opt.minLr = o.minLr;
  opt.warmup = o.warmup;
  opt.totalSteps = o.totalSteps;
  opt.beta1 = o.beta1;
  opt.beta2 = o.beta2;
  opt.eps = o.eps;
  opt.weightDecay = o.weightDecay;
  opt.momentum = o.momentum;
  opt.gradClip = o.gradClip;
  pm.addPass(xf::createAddOptimizer(opt));
  if (o.mesh.tp > 1) {
    pm.addPass(xf::createMegatronTP());
    if (o.replicateEmbeddings)
      pm.addPass(xf::createTPReplicateEmbeddings());
  }
  pm.addPass(xf::createPartition({o.sequenceParallel}));
  xf::PipelineSplitOptions split;
  split.virtualStages = o.virtualStages;
  split.layout = o.ppLayout;
  split.schedule = o.pipelineSchedule;
  pm.addPass(xf::createPipelineSplit(split));
  pm.addPass(createLowerToPlan({o.zero, o.reshardAfterForward}));
  pm.addNestedPass<plan::ProgramOp>(plan::createPlanMemory());
  if (o.verifyPlan)
    pm.addPass(plan::createVerifyPlan({}, o.verifiedPlan));
}

namespace {
struct TrainingPipelineCLOptions
    : public PassPipelineOptions<TrainingPipelineCLOptions> {
  Option<int64_t> dp{*this, "dp", llvm::cl::init(1)};
  Option<int64_t> tp{*this, "tp", llvm::cl::init(1)};
  Option<int64_t> pp{*this, "pp", llvm::cl::init(1)};
  Option<std::string> rankOrder{*this, "rank-order", llvm::cl::init("tp,dp,pp")};
  Option<std::string> optimizer{*this, "optimizer", llvm::cl::init("adamw")};
  Option<std::string> schedule{*this, "lr-schedule", llvm::cl::init("constant")};
  Option<double> lr{*this, "lr", llvm::cl::init(1e-3)};
  Option<double> minLr{*this, "min-lr", llvm::cl::init(0.0)};
  Option<int64_t> warmup{*this, "warmup", llvm::cl::init(0)};
  Option<int64_t> totalSteps{*this, "total-steps", llvm::cl::init(0)};
  Option<double> weightDecay{*this, "weight-decay", llvm::cl::init(-1.0)};
  Option<double> momentum{*this, "momentum", llvm::cl::init(0.0)};
  Option<double> gradClip{*this, "grad-clip", llvm::cl::init(0.0)};
  Option<bool> replicateEmbeddings{*this, "tp-replicate-embeddings", llvm::cl::init(false)};
  Option<int64_t> vocabDivisibleBy{*this, "make-vocab-size-divisible-by", llvm::cl::init(128)};
  Option<bool> sequenceParallel{*this, "sequence-parallel", llvm::cl::init(false)};
  Option<std::string> pipelineSchedule{*this, "schedule", llvm::cl::init("1f1b")};
  Option<int64_t> virtualStages{*this, "virtual-stages", llvm::cl::init(1)};
  Option<std::string> recompute{*this, "recompute", llvm::cl::init("none")};
  Option<int64_t> zero{*this, "zero", llvm::cl::init(0)};
  Option<bool> reshardAfterForward{*this, "reshard-after-forward", llvm::cl::init(true)};
  Option<std::string> ppLayout{*this, "pp-layout", llvm::cl::init("")};
};
} // namespace

void llcdist::registerPipelines() {
  PassPipelineRegistration<TrainingPipelineCLOptions>(
      "llcdist-train",
      "the pipeline of `llc-dist compile --emit plan`: forward graph, "
      "autodiff, optimizer, partitioning, pipeline stages, lowering to the "
      "plan dialect, memory planning, cross-rank verification",
      [](OpPassManager &pm, const TrainingPipelineCLOptions &c) {
        TrainingPipelineOptions o;
        o.mesh = {c.dp, c.tp, c.pp, c.rankOrder};
        o.optimizer = c.optimizer;
        o.schedule = c.schedule;
        o.lr = c.lr;
        o.minLr = c.minLr;
        o.warmup = c.warmup;
        o.totalSteps = c.totalSteps;
        o.weightDecay = c.weightDecay;
        o.momentum = c.momentum;
        o.gradClip = c.gradClip;
        o.replicateEmbeddings = c.replicateEmbeddings;
        o.vocabDivisibleBy = c.vocabDivisibleBy;
        o.sequenceParallel = c.sequenceParallel;
        o.pipelineSchedule = c.pipelineSchedule;
        o.virtualStages = c.virtualStages;
        o.ppLayout = c.ppLayout;
        o.recompute = c.recompute;
        o.zero = c.zero;
        o.reshardAfterForward = c.reshardAfterForward;
        buildTrainingPipeline(pm, o);
      });
}
