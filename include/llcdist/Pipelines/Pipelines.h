//===- Pipelines.h - the pipelines llc-dist compile runs -------*- C++ -*-===//
#ifndef LLCDIST_PIPELINES_PIPELINES_H
#define LLCDIST_PIPELINES_PIPELINES_H

#include "llcdist/Conversion/Passes.h"
#include "llcdist/Dialect/XF/Transforms/Passes.h"

#include <optional>
#include <string>
#include <vector>

namespace llcdist {

struct PlanJson;

/// Options of `llc-dist compile` that shape the training step: the one
/// definition C++ callers fill and the textual pipeline `llcdist-train` binds
/// (by the names registerPipelines gives them). The passes whose options the
/// pipeline takes unchanged are bases, so their fields (names and defaults
/// from Passes.td) are ours and go to the pass as they are:
/// llcdist-add-optimizer (optimizer, lr, lrSchedule, warmup,
/// totalSteps, minLr, beta1, beta2, eps, weightDecay, momentum, gradClip),
/// llcdist-partition (sequenceParallel: Megatron's sequence parallelism) and
/// llcdist-lower-to-plan (recordParamScopes, set from zero).
struct TrainingPipelineOptions : xf::AddOptimizerOptions, xf::PartitionOptions, LowerToPlanOptions {
  /// ZeRO over dp (0: off; 3: FSDP), llcdist-plan-zero's stage.
  int64_t zero = 0;
  /// ZeRO-3: gather each layer's parameters again for its backward.
  bool reshardAfterForward = true;
  /// The dtype of gradient reductions on bf16 buffers (llcdist-plan-comm-dtype):
  /// bf16 as NCCL reduces them, or f32 (Megatron-LM's
  /// --accumulate-allreduce-grads-in-fp32).
  std::string gradReduceDtype = "bf16";
  /// Gradient elements per bucket of llcdist-plan-grad-buckets, which
  /// overlaps the dp gradient all-reduce with the last backward (0: off, the
  /// synchronous all-reduce). defaultGradBucketSize is Megatron-LM's.
  int64_t gradBucketSize = 0;
  /// ZeRO-3: units whose parameter all-gathers llcdist-plan-fsdp-prefetch
  /// starts ahead of the one computing, in forward and backward (0: off,
  /// synchronous; FSDP2's default is 1).
  int64_t fsdpPrefetch = 0;
  /// ZeRO-1/2: overlap the updated parameters' all-gather with the next
  /// step's first forward (llcdist-plan-overlap-param-gather; Megatron-LM's
  /// --overlap-param-gather, off by default as there).
  bool overlapParamGather = false;
  /// Under sequence parallelism: start its all-gathers and reduce-scatters
  /// on queue comm, overlapped with the kernels independent of them
  /// (llcdist-plan-sp-overlap, Megatron-LM's --tp-comm-overlap).
  bool tpCommOverlap = false;
  /// Under pp: start the pipeline sends and recvs on queue comm, overlapped
  /// with the kernels of their action independent of them
  /// (llcdist-plan-p2p-overlap, Megatron-LM's overlap_p2p_comm).
  bool overlapP2P = false;
  /// Under tp and pp without sequence parallelism: each tp rank sends its
  /// 1/tp slice of a stage's activation, the receivers all-gather over tp
  /// (llcdist-plan-p2p-scatter-gather, Megatron-LM's scatter/gather of
  /// pipeline tensors).
  bool scatterGatherP2P = false;
  /// The forward pipeline's (llcdist-attach-mesh's) mesh.
  xf::ForwardPipelineOptions mesh;
  /// Under tp: keep the embeddings and the LM head whole instead of
  /// vocabulary-parallel (llcdist-tp-replicate-embeddings).
  bool replicateEmbeddings = false;
  /// Megatron-LM's --make-vocab-size-divisible-by: the vocabulary is padded
  /// to a multiple of this × tp (× 1 with replicateEmbeddings) by
  /// llcdist-pad-vocab; 1 with tp = 1 pads nothing.
  int64_t vocabDivisibleBy = 128;
  /// Pipeline (pp > 1): the schedule (gpipe | 1f1b | interleaved | zb-h1),
  /// model chunks per stage, and an explicit layer layout ("3,3,2"; empty:
  /// balanced by cost). llcdist-pipeline-split's options, named apart from
  /// the LR schedule.
  std::string pipelineSchedule = "1f1b";
  int64_t virtualStages = 1;
  std::string ppLayout;
  /// Activation recomputation: none | selective | full (llcdist-recompute).
  std::string recompute = "none";
  /// One multi-tensor op per optimizer group and one cast_multi for the bf16
  /// copies (llcdist-plan-fuse-optimizer; off: the per-parameter ops).
  bool fuseOptimizer = true;
  /// The residual add and the norm after it one kernel, and a norm's backward
  /// (both gradients and the residual's add) one kernel
  /// (llcdist-plan-fuse-norm; off: the unfused kernels).
  bool fuseNorm = true;
  /// Context parallelism's ring: transfers in flight during the block's
  /// attention (llcdist-plan-cp-ring-overlap; off: the synchronous ring).
  bool cpRingOverlap = true;
  /// A linear layer's bias gradient in its weight-gradient GEMM's epilogue,
  /// the GELU after a linear in its GEMMs' (llcdist-plan-fuse-epilogues; off:
  /// linear_bwd_bias and gelu_tanh_fwd / _bwd apart).
  bool fuseEpilogues = true;
  /// The cross entropy's gradient written over the logits
  /// (llcdist-plan-ce-grad-in-place; off: a buffer of its own).
  bool ceGradInPlace = true;
  /// The LM head, the cross entropy and their backward as one `classifier`
  /// op over chunks of token rows (llcdist-plan-fuse-classifier; off: the
  /// five kernels and the whole logits).
  bool fuseClassifier = true;
  /// Token rows per classifier chunk (0: the pass's choice, within 128 MiB).
  int64_t classifierChunkRows = 0;
  /// Attention reads q, k, v from the QKV GEMM's packed output and writes dq,
  /// dk, dv into one buffer (llcdist-plan-packed-qkv; off: split_fwd /
  /// split_bwd copies).
  bool packedQkv = true;
  /// The position embedding in the token embedding's kernels, forward and
  /// backward (llcdist-plan-fuse-embedding; off: pos_embedding_* apart).
  bool fuseEmbedding = true;
  /// Run llcdist-verify-plan last (off only for in-memory compilations whose
  /// plan is never written, e.g. the memory hints of a plan that does not fit).
  bool verifyPlan = true;
  /// Where llcdist-verify-plan leaves the files it checked (null: dropped);
  /// writePlanDirectory then writes them as they are.
  PlanJson *verifiedPlan = nullptr;
};

/// Megatron-LM's default bucket size (DistributedDataParallelConfig's
/// bucket_size): max(40,000,000, 1,000,000 × dp) parameters, so that each
/// bucket's all-reduce moves enough bytes to reach bus bandwidth.
int64_t defaultGradBucketSize(int64_t dp);

/// The forward pipeline, then the training passes in the order of
/// describeTrainingPipeline(), each where its options say (under tp the
/// strategy, ZeRO, the overlaps, the fusions, the arena, the verifiers), the
/// per-program ones nested under each plan.program: the pipeline of
/// `llc-dist compile --emit plan` and of `llc-dist-opt --llcdist-train`.
void buildTrainingPipeline(mlir::OpPassManager &pm, const TrainingPipelineOptions &options);

/// The training passes after the forward pipeline as llc-dist compile's help
/// lists them: "llcdist-pad-vocab, ..., llcdist-megatron-tp (under tp), ...,
/// on each program: ..." (each with when it runs), from the table
/// buildTrainingPipeline builds from.
std::string describeTrainingPipeline();
/// Their pass arguments, in order (every pass the pipeline can run).
std::vector<std::string> trainingPipelinePasses();

/// The rules between the overlap options and the mesh and ZeRO (what each
/// overlap needs), or nullopt when they hold. In the words of llc-dist
/// compile's flags; llc-dist compile and `llc-dist-opt --llcdist-train` refuse
/// the same options (the textual pipeline fails to build).
std::optional<std::string> overlapOptionsError(const TrainingPipelineOptions &options);
/// The optimizer options' ranges (torch.optim's own checks), or nullopt.
std::optional<std::string> optimizerOptionsError(const TrainingPipelineOptions &options);

/// Registers the textual pipeline `llcdist-train`, whose options are
/// TrainingPipelineOptions' (all but verifyPlan and verifiedPlan, which only
/// C++ callers set).
void registerPipelines();

} // namespace llcdist

#endif
