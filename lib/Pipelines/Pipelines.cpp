//===- Pipelines.cpp - the pipelines llc-dist compile runs ----------------===//
#include "llcdist/Pipelines/Pipelines.h"
#include "llcdist/Dialect/Plan/Transforms/Passes.h"
#include "llcdist/Support/PipelineOptions.h"

#include <fmt/format.h>

#include <algorithm>

using namespace mlir;
using namespace llcdist;

int64_t llcdist::defaultGradBucketSize(int64_t dp) { return std::max<int64_t>(40'000'000, 1'000'000 * dp); }

std::optional<std::string> llcdist::overlapOptionsError(const TrainingPipelineOptions &o) {
  if (o.gradBucketSize < 0)
    return "--grad-bucket-size must be a parameter count >= 0 (0: off) or auto, got " +
           std::to_string(o.gradBucketSize);
  if (o.tpCommOverlap && !o.sequenceParallel)
    return std::string("--tp-comm-overlap overlaps sequence parallelism's collectives: it needs "
                       "--sequence-parallel");
  if (o.overlapP2P && o.mesh.pp == 1)
    return std::string("--overlap-p2p overlaps the pipeline's sends and receives: it needs pp > 1 "
                       "in --mesh");
  if (o.scatterGatherP2P && (o.mesh.pp == 1 || o.mesh.tp == 1))
    return std::string("--scatter-gather-p2p slices the pipeline's sends over tp: it needs pp > 1 and tp > 1 "
                       "in --mesh");
  if (o.scatterGatherP2P && o.sequenceParallel)
    return std::string("--scatter-gather-p2p and --sequence-parallel: under sequence parallelism each tp rank "
                       "sends its own 1/tp of the sequence already; leave --scatter-gather-p2p off");
  if (o.fsdpPrefetch < 0)
    return "--fsdp-prefetch must be a unit count >= 0 (0: off), got " + std::to_string(o.fsdpPrefetch);
  if (o.fsdpPrefetch > 0 && o.zero != 3)
    return std::string("--fsdp-prefetch only applies to --zero 3 (FSDP)");
  if (o.overlapParamGather && o.zero != 1 && o.zero != 2)
    return std::string("--overlap-param-gather only applies to --zero 1 or 2");
  return std::nullopt;
}

std::optional<std::string> llcdist::optimizerOptionsError(const TrainingPipelineOptions &t) {
  auto need = [](bool ok, const char *flag, const char *range, double got) -> std::optional<std::string> {
    if (ok)
      return std::nullopt;
    return fmt::format("{} must be {}, got {}", flag, range, got);
  };
  for (std::optional<std::string> e :
       {need(t.lr > 0, "--lr", "> 0 (default 1e-3)", t.lr),
        need(t.minLr >= 0 && t.minLr <= t.lr, "--min-lr", "in [0, --lr] (default 0)", t.minLr),
        need(t.beta1 >= 0 && t.beta1 < 1, "--beta1", "in [0, 1) (default 0.9)", t.beta1),
        need(t.beta2 >= 0 && t.beta2 < 1, "--beta2", "in [0, 1) (default 0.999)", t.beta2),
        need(t.eps > 0, "--eps", "> 0 (default 1e-8)", t.eps),
        // -1 is the struct's "torch's default for the optimizer" (0.01 AdamW, 0 SGD).
        need(t.weightDecay >= 0 || t.weightDecay == -1, "--weight-decay",
             ">= 0 (default: torch's, 0.01 for AdamW, 0 for SGD)", t.weightDecay),
        need(t.momentum >= 0, "--momentum", ">= 0 (default 0)", t.momentum),
        need(t.gradClip >= 0, "--grad-clip", ">= 0 (0 = off, the default)", t.gradClip)})
    if (e)
      return e;
  return std::nullopt;
}

namespace {

using Options = TrainingPipelineOptions;

/// One pass of the training pipeline after the forward pipeline: its
/// argument, when it runs (as llc-dist compile's help says it; empty:
/// always), whether it runs on each plan.program (nested) or on the module,
/// and the options' rule and the pass itself. buildTrainingPipeline and
/// describeTrainingPipeline read this one table.
struct Step {
  const char *pass;
  const char *when;
  bool perProgram;
  bool (*runs)(const Options &);
  std::unique_ptr<Pass> (*make)(const Options &);
};

bool always(const Options &) { return true; }

const Step kSteps[] = {
    // Megatron-LM: the vocabulary splits over tp only when vocabulary-parallel.
    {"llcdist-pad-vocab", "", false, always,
     [](const Options &o) {
       return xf::createPadVocab({o.vocabDivisibleBy * (o.replicateEmbeddings ? 1 : o.mesh.tp)});
     }},
    {"llcdist-autodiff", "", false, always, [](const Options &) { return xf::createAutodiff(); }},
    {"llcdist-recompute", "", false, always, [](const Options &o) { return xf::createRecompute({o.recompute}); }},
    {"llcdist-add-optimizer", "", false, always, [](const Options &o) { return xf::createAddOptimizer(o); }},
    {"llcdist-megatron-tp", "under tp", false, [](const Options &o) { return o.mesh.tp > 1; },
     [](const Options &) { return xf::createMegatronTP(); }},
    {"llcdist-tp-replicate-embeddings", "under tp with --tp-embeddings replicated", false,
     [](const Options &o) { return o.mesh.tp > 1 && o.replicateEmbeddings; },
     [](const Options &) { return xf::createTPReplicateEmbeddings(); }},
    {"llcdist-partition", "", false, always, [](const Options &o) { return xf::createPartition(o); }},
    {"llcdist-pipeline-split", "", false, always,
     [](const Options &o) {
       xf::PipelineSplitOptions split;
       split.virtualStages = o.virtualStages;
       split.layout = o.ppLayout;
       split.schedule = o.pipelineSchedule;
       return xf::createPipelineSplit(split);
     }},
    // ZeRO is a rewrite of the lowered plan; for ZeRO-3's gathers the
    // lowering records where each scope reads each parameter.
    {"llcdist-lower-to-plan", "", false, always,
     [](const Options &o) {
       LowerToPlanOptions lowering = o;
       lowering.recordParamScopes = o.zero == 3;
       return createLowerToPlan(lowering);
     }},
    {"llcdist-plan-zero", "--zero 1|2|3", false, [](const Options &o) { return o.zero != 0; },
     [](const Options &o) {
       return plan::createPlanZero({o.zero, o.reshardAfterForward});
     }},
    {"llcdist-plan-comm-dtype", "", false, always,
     [](const Options &o) { return plan::createPlanCommDType({o.gradReduceDtype}); }},
    // Per program: the overlap, the fusions, the arena, the race check of
    // asynchronous plans (on the planned bytes).
    {"llcdist-plan-grad-buckets", "--grad-bucket-size", true, [](const Options &o) { return o.gradBucketSize > 0; },
     [](const Options &o) { return plan::createPlanGradBuckets({o.gradBucketSize}); }},
    {"llcdist-plan-fsdp-prefetch", "--fsdp-prefetch", true, [](const Options &o) { return o.fsdpPrefetch > 0; },
     [](const Options &o) { return plan::createPlanFsdpPrefetch({o.fsdpPrefetch}); }},
    {"llcdist-plan-overlap-param-gather", "--overlap-param-gather", true,
     [](const Options &o) { return o.overlapParamGather; },
     [](const Options &) { return plan::createPlanOverlapParamGather(); }},
    {"llcdist-plan-sp-overlap", "--tp-comm-overlap", true, [](const Options &o) { return o.tpCommOverlap; },
     [](const Options &) { return plan::createPlanSPOverlap(); }},
    {"llcdist-plan-p2p-scatter-gather", "--scatter-gather-p2p", true,
     [](const Options &o) { return o.scatterGatherP2P; },
     [](const Options &) { return plan::createPlanP2PScatterGather(); }},
    {"llcdist-plan-p2p-overlap", "--overlap-p2p", true, [](const Options &o) { return o.overlapP2P; },
     [](const Options &) { return plan::createPlanP2POverlap(); }},
    {"llcdist-plan-cp-ring-overlap", "cp ring, unless --no-cp-ring-overlap", true,
     [](const Options &o) { return o.mesh.cp > 1 && o.cpImpl == "ring" && o.cpRingOverlap; },
     [](const Options &) { return plan::createPlanCpRingOverlap(); }},
    // Fusion, after every pass that rewrites or moves the per-parameter ops
    // and the kernels around the communication.
    {"llcdist-plan-fuse-norm", "unless --no-fuse-norm", true, [](const Options &o) { return o.fuseNorm; },
     [](const Options &) { return plan::createPlanFuseNorm(); }},
    {"llcdist-plan-fuse-epilogues", "unless --no-fuse-epilogues", true,
     [](const Options &o) { return o.fuseEpilogues; }, [](const Options &) { return plan::createPlanFuseEpilogues(); }},
    {"llcdist-plan-ce-grad-in-place", "unless --no-ce-grad-in-place", true,
     [](const Options &o) { return o.ceGradInPlace; }, [](const Options &) { return plan::createPlanCeGradInPlace(); }},
    {"llcdist-plan-fuse-classifier", "unless --no-fuse-classifier", true,
     [](const Options &o) { return o.fuseClassifier; },
     [](const Options &o) { return plan::createPlanFuseClassifier({o.classifierChunkRows}); }},
    {"llcdist-plan-packed-qkv", "unless --no-packed-qkv", true, [](const Options &o) { return o.packedQkv; },
     [](const Options &) { return plan::createPlanPackedQkv(); }},
    {"llcdist-plan-fuse-embedding", "unless --no-fuse-embedding", true,
     [](const Options &o) { return o.fuseEmbedding; }, [](const Options &) { return plan::createPlanFuseEmbedding(); }},
    {"llcdist-plan-fuse-optimizer", "unless --no-fuse-optimizer", true,
     [](const Options &o) { return o.fuseOptimizer; }, [](const Options &) { return plan::createPlanFuseOptimizer(); }},
    {"llcdist-plan-memory", "", true, always, [](const Options &) { return plan::createPlanMemory(); }},
    {"llcdist-verify-async", "", true, [](const Options &o) { return o.verifyPlan; },
     [](const Options &) { return plan::createVerifyAsync(); }},
    {"llcdist-verify-plan", "", false, [](const Options &o) { return o.verifyPlan; },
     [](const Options &o) { return plan::createVerifyPlan({}, o.verifiedPlan); }},
};

} // namespace

void llcdist::buildTrainingPipeline(OpPassManager &pm, const TrainingPipelineOptions &o) {
  xf::buildForwardPipeline(pm, o.mesh);
  OpPassManager *programs = nullptr; // one nest for the consecutive per-program passes
  for (const Step &step : kSteps) {
    if (!step.runs(o))
      continue;
    if (!step.perProgram) {
      programs = nullptr;
      pm.addPass(step.make(o));
      continue;
    }
    if (!programs)
      programs = &pm.nest<plan::ProgramOp>();
    programs->addPass(step.make(o));
  }
}

std::string llcdist::describeTrainingPipeline() {
  std::string out;
  bool nested = false;
  for (const Step &step : kSteps) {
    if (!out.empty())
      out += ", ";
    if (step.perProgram && !nested)
      out += "on each program: ";
    nested = step.perProgram;
    out += step.when[0] ? fmt::format("{} ({})", step.pass, step.when) : std::string(step.pass);
  }
  return out;
}

std::vector<std::string> llcdist::trainingPipelinePasses() {
  std::vector<std::string> out;
  for (const Step &step : kSteps)
    out.push_back(step.pass);
  return out;
}

/// The textual options of `llcdist-train`: each pass's own name where the
/// pipeline hands the option to one pass unchanged, llc-dist compile's flag
/// name otherwise (pp-layout, recompute, make-vocab-size-divisible-by).
static void bindTrainingPipelineOptions(TextualPipelineOptions<TrainingPipelineOptions> &o,
                                        TrainingPipelineOptions &f) {
  o.bind("dp", f.mesh.dp, "data-parallel degree");
  o.bind("tp", f.mesh.tp, "tensor-parallel degree");
  o.bind("pp", f.mesh.pp, "pipeline-parallel degree");
  o.bind("cp", f.mesh.cp, "context-parallel degree");
  o.bind("ep", f.mesh.ep, "expert-parallel degree (drawn from dp)");
  o.bind("cp-impl", f.cpImpl, "context parallelism's attention: ring | all-to-all (Ulysses)");
  o.bind("rank-order", f.mesh.rankOrder, "fastest- to slowest-varying axes");
  o.bind("optimizer", f.optimizer, "adamw | sgd");
  o.bind("lr-schedule", f.lrSchedule, "constant | cosine");
  o.bind("lr", f.lr, "peak learning rate");
  o.bind("min-lr", f.minLr, "final learning rate of the cosine schedule");
  o.bind("warmup", f.warmup, "linear warmup steps");
  o.bind("total-steps", f.totalSteps, "steps of the cosine decay (0: the run's --steps)");
  o.bind("beta1", f.beta1, "AdamW beta1");
  o.bind("beta2", f.beta2, "AdamW beta2");
  o.bind("eps", f.eps, "AdamW eps");
  o.bind("weight-decay", f.weightDecay, "weight decay on matrices only (-1: torch's default for the optimizer)");
  o.bind("momentum", f.momentum, "SGD momentum");
  o.bind("grad-clip", f.gradClip, "global-norm clipping threshold (0 = off)");
  o.bind("tp-replicate-embeddings", f.replicateEmbeddings, "under tp, keep the embeddings and the LM head whole");
  o.bind("make-vocab-size-divisible-by", f.vocabDivisibleBy,
         "pad the vocabulary to a multiple of this × tp (× 1 with replicated embeddings)");
  o.bind("sequence-parallel", f.sequenceParallel, "Megatron's sequence parallelism in the tensor-parallel region");
  o.bind("schedule", f.pipelineSchedule, "pipeline schedule: gpipe | 1f1b | interleaved | zb-h1");
  o.bind("virtual-stages", f.virtualStages, "model chunks per pipeline stage");
  o.bind("pp-layout", f.ppLayout, "layers per model chunk, e.g. 3,3,2 (empty: balanced by cost)");
  o.bind("recompute", f.recompute, "activation recomputation: none | selective | full");
  o.bind("zero", f.zero, "ZeRO stage over dp (0: off; 3: FSDP)");
  o.bind("reshard-after-forward", f.reshardAfterForward, "ZeRO-3: gather a layer's parameters again for its backward");
  o.bind("grad-reduce-dtype", f.gradReduceDtype,
         "gradient reductions of bf16 plans: bf16 (NCCL's) | f32 (accumulate-allreduce-grads-in-fp32)");
  o.bind("grad-bucket-size", f.gradBucketSize,
         "gradient elements per dp all-reduce bucket overlapped with the last "
         "backward (0: off, synchronous)");
  o.bind("fsdp-prefetch", f.fsdpPrefetch,
         "ZeRO-3: units whose parameter all-gathers start ahead of the one "
         "computing (0: off, synchronous)");
  o.bind("overlap-param-gather", f.overlapParamGather,
         "ZeRO-1/2: overlap the updated parameters' all-gather with the next "
         "step's first forward");
  o.bind("tp-comm-overlap", f.tpCommOverlap,
         "under sequence parallelism, overlap its all-gathers and reduce-scatters "
         "with independent kernels (llcdist-plan-sp-overlap)");
  o.bind("overlap-p2p", f.overlapP2P,
         "under pp, overlap the pipeline sends and recvs with the kernels of their "
         "action (llcdist-plan-p2p-overlap)");
  o.bind("scatter-gather-p2p", f.scatterGatherP2P,
         "under tp and pp, send 1/tp of each pipeline tensor and all-gather it over "
         "tp on the receiving stage (llcdist-plan-p2p-scatter-gather)");
  o.bind("cp-ring-overlap", f.cpRingOverlap,
         "start ring attention's transfers early and wait late (llcdist-plan-cp-ring-overlap)");
  o.bind("fuse-norm", f.fuseNorm,
         "the residual add with the norm after it, and a norm's backward kernels "
         "with the residual's add, one kernel each (llcdist-plan-fuse-norm)");
  o.bind("fuse-epilogues", f.fuseEpilogues,
         "a linear layer's bias gradient and the GELU after it (forward and "
         "backward) in the neighbouring GEMM's epilogue (llcdist-plan-fuse-epilogues)");
  o.bind("ce-grad-in-place", f.ceGradInPlace,
         "the cross entropy's gradient written over the logits "
         "(llcdist-plan-ce-grad-in-place)");
  o.bind("fuse-classifier", f.fuseClassifier,
         "the LM head, the cross entropy and their backward as one op over chunks "
         "of token rows (llcdist-plan-fuse-classifier)");
  o.bind("classifier-chunk-rows", f.classifierChunkRows,
         "token rows per classifier chunk (0: within 128 MiB of logits)");
  o.bind("packed-qkv", f.packedQkv,
         "attention on the QKV GEMM's packed output, without the split copies "
         "(llcdist-plan-packed-qkv)");
  o.bind("fuse-embedding", f.fuseEmbedding,
         "the position embedding in the token embedding's kernels, forward and "
         "backward (llcdist-plan-fuse-embedding)");
  o.bind("fuse-optimizer", f.fuseOptimizer,
         "one multi-tensor op per optimizer group and one cast_multi for the bf16 "
         "copies (llcdist-plan-fuse-optimizer)");
}

void llcdist::registerPipelines() {
  registerTextualPipeline<TrainingPipelineOptions>(
      "llcdist-train",
      "the pipeline of `llc-dist compile --emit plan`: forward graph, "
      "autodiff, optimizer, partitioning, pipeline stages, lowering to the "
      "plan dialect, memory planning, cross-rank verification",
      bindTrainingPipelineOptions, buildTrainingPipeline,
      [](const TrainingPipelineOptions &o) -> std::optional<std::string> {
        if (auto e = optimizerOptionsError(o))
          return e;
        return overlapOptionsError(o);
      });
}
