//===- Pipelines.h - the pipelines llc-dist compile runs -------*- C++ -*-===//
#ifndef LLCDIST_PIPELINES_PIPELINES_H
#define LLCDIST_PIPELINES_PIPELINES_H

#include "llcdist/Dialect/XF/Transforms/Passes.h"

#include <string>

namespace llcdist {

struct PlanJson;

/// Options of `llc-dist compile` that shape the training step.
struct TrainingPipelineOptions {
  xf::ForwardPipelineOptions mesh;
  std::string optimizer = "adamw";   ///< adamw | sgd
  std::string schedule = "constant"; ///< constant | cosine
  double lr = 1e-3, minLr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weightDecay = -1; ///< -1: torch's default for the optimizer
  double momentum = 0, gradClip = 0;
  int64_t warmup = 0, totalSteps = 0;
  /// Under tp: keep the embeddings and the LM head whole instead of
  /// vocabulary-parallel (llcdist-tp-replicate-embeddings).
  bool replicateEmbeddings = false;
  /// Megatron-LM's --make-vocab-size-divisible-by: the vocabulary is padded
  /// to a multiple of this × tp (× 1 with replicateEmbeddings) by
  /// llcdist-pad-vocab; 1 with tp = 1 pads nothing.
  int64_t vocabDivisibleBy = 128;
  /// Megatron's sequence parallelism in the tensor-parallel region.
  bool sequenceParallel = false;
  /// Pipeline (pp > 1): the schedule (gpipe | 1f1b | interleaved | zb-h1),
  /// model chunks per stage, and an explicit layer layout ("3,3,2"; empty:
  /// balanced by cost). See llcdist-pipeline-split.
  std::string pipelineSchedule = "1f1b";
  /// Activation recomputation: none | selective | full (llcdist-recompute).
  std::string recompute = "none";
  /// ZeRO stage over dp (0: off; 1, 2, 3 = FSDP; llcdist-lower-to-plan).
  int64_t zero = 0;
  /// ZeRO-3: gather again for the backward (true) or keep the forward's copy.
  bool reshardAfterForward = true;
  int64_t virtualStages = 1;
  std::string ppLayout;
  /// Run llcdist-verify-plan last (off only for in-memory compilations whose
  /// plan is never written, e.g. the memory hints of a plan that does not fit).
  bool verifyPlan = true;
  /// Where llcdist-verify-plan leaves the files it checked (null: dropped);
  /// writePlanDirectory then writes them as they are.
  PlanJson *verifiedPlan = nullptr;
};

/// The forward pipeline, then llcdist-pad-vocab, llcdist-autodiff, llcdist-add-optimizer, under
/// tp the strategy (llcdist-megatron-tp [+ llcdist-tp-replicate-embeddings]),
/// llcdist-partition, llcdist-pipeline-split, llcdist-lower-to-plan, on each
/// program llcdist-plan-memory, then llcdist-verify-plan: the pipeline of `llc-dist compile --emit plan`.
void buildTrainingPipeline(mlir::OpPassManager &pm,
                           const TrainingPipelineOptions &options);

/// Registers the textual pipeline `llcdist-train`.
void registerPipelines();

} // namespace llcdist

#endif
