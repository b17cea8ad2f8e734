//===- StepModel.h - the analytic time and memory of a training step -*- C++ -*-===//
//
// MLIR-free and fast (microseconds per configuration): what the planner
// (`llc-dist plan`) ranks thousands of configurations with before it
// compiles and simulates the best few exactly (PlanSimulator.h). It prices
// the ops the compiler emits for one transformer layer (the same shapes and
// bytes, through CostModel.h), the embedding, LM head and loss, the
// optimizer, the collectives each axis adds, and the pipeline schedule's
// bubble by its analytic formula; memory per rank by an analytic model of
// what llcdist-plan-memory places. docs/cost-model.md states every term.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_COST_STEPMODEL_H
#define LLCDIST_COST_STEPMODEL_H

#include "llcdist/Cost/CostModel.h"
#include "llcdist/Frontend/ModelConfig.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace llcdist::cost {

/// What is trained: the model, the batch and the precision.
struct Workload {
  ModelConfig model;
  int64_t globalBatch = 0; ///< sequences per step
  int64_t seqLen = 0;
  Precision precision = Precision::BF16;
  /// How the core attention runs. `Flash`: one fused causal kernel (what
  /// llc-dist's runtimes run; CostModel.h's attentionSeconds). `Unfused`:
  /// Megatron-LM as of SC21 and Korthikanti et al. (the calibration and
  /// validation runs): QKᵀ and softmax·V as batched GEMMs over the whole
  /// S×S score matrix, the fused scale-mask-softmax and the attention
  /// dropout memory-bound on it (docs/cost-model.md).
  enum class Attention { Flash, Unfused } attention = Attention::Flash;
  /// Which memory-bound kernels are one. `Plan`: the compiler's default
  /// fusion passes (llcdist-plan-fuse-*: each residual add with the norm
  /// after it, the norm's backward with the residual gradient's add, the
  /// bias, GELU and bias gradient in the GEMMs' epilogues, the LM head and
  /// loss as one chunked classifier where the vocabulary is not split).
  /// `None`: every kernel apart, as the calibration set (Megatron-LM) is
  /// priced (docs/cost-model.md).
  enum class Fusion { Plan, None } fusion = Fusion::Plan;
  /// Megatron-LM's pipeline transport, which the runs of the calibration and
  /// validation sets used: the scatter/gather optimization without SP
  /// (Narayanan et al. SC21, §4.1: each tp rank sends 1/tp of the activation
  /// and the receiving stage all-gathers it over NVLink), and a stage's send
  /// posted with its receive of the other direction (batch_isend_irecv), so
  /// the two transfers occupy it once. llc-dist's plans (false) run `send`
  /// and `recv` as two synchronous ops, whole activations unless compiled
  /// --scatter-gather-p2p (ParallelConfig::scatterGatherP2P).
  bool scatterGatherP2P = false;
  /// What full recomputation runs again. `Read`: what the backward reads, as
  /// llc-dist's plans do (llcdist-lower-to-plan: not the projections only the
  /// residual stream reads, their tp reductions, the layer's last add).
  /// `Whole`: the layer's whole forward, as Megatron-LM's recomputation (the
  /// calibration and validation runs) and torch.utils.checkpoint do.
  enum class Recomputation { Read, Whole } recomputation = Recomputation::Read;
  /// Mixture of experts: --moe-capacity-factor F (0: dropless). Each
  /// expert keeps at most C_e = ceil(F·T·k/E) of a rank's T tokens per
  /// microbatch (moeExpertCapacity): the static rows, and under uniform
  /// routing the computed ones where F < 1.
  double moeCapacityFactor = 0;
  /// The vocabulary the plan holds: padded to a multiple of 128 × tp
  /// (Megatron's --make-vocab-size-divisible-by, the compiler's default).
  int64_t paddedVocab(int64_t tp) const;
};

/// One point of the planner's search: the knobs of `llc-dist compile`.
struct ParallelConfig {
  int64_t dp = 1, tp = 1, pp = 1;
  /// Context parallelism: each rank of a cp group holds 1/cp of every
  /// sequence; attention by `cpImpl`, ring (k/v blocks passed around the
  /// group, each step's transfer under the previous block's attention) or
  /// all-to-all (Ulysses: the sequence split swapped for the heads').
  int64_t cp = 1;
  std::string cpImpl = "ring";
  int64_t virtualStages = 1;      ///< model chunks per stage (interleaved only)
  int64_t microBatch = 1;         ///< sequences per microbatch per dp rank
  int zero = 0;                   ///< ZeRO stage 0-3 over dp × cp
  std::string recompute = "none"; ///< none | selective | full
  std::string schedule = "1f1b";  ///< gpipe | 1f1b | interleaved | zb-h1 (pp > 1)
  bool sequenceParallel = false;  ///< under tp
  /// --scatter-gather-p2p: under tp and pp without SP, each tp rank sends
  /// 1/tp of a pipeline tensor, the receivers all-gather it over tp (the
  /// planner picks it wherever it applies, as Megatron-LM does).
  bool scatterGatherP2P = false;
  /// Where scatter/gather pipeline sends apply: the tp ranks of a stage hold
  /// the same activation (tp > 1 without SP) and there are stages (pp > 1).
  bool scatterGatherApplies() const { return tp > 1 && pp > 1 && !sequenceParallel; }
  /// Expert parallelism (mixture-of-experts models only): each layer's
  /// experts split over ep ranks drawn from dp (ep divides dp and the
  /// experts; an ep group is ep consecutive dp ranks, MeshSpec.h). Expert
  /// gradients reduce over the dp / ep replicas of a shard ("edp"), the rest
  /// over dp. Not with ZeRO (the compiler refuses it).
  int64_t ep = 1;
  int64_t gradBucket = 0;   ///< --grad-bucket-size in parameters (0: off)
  int64_t fsdpPrefetch = 0; ///< --fsdp-prefetch (zero 3)
  int64_t microbatches(int64_t globalBatch) const { return globalBatch / (microBatch * dp); }
  /// The mesh (Megatron's rank order tp,dp,pp, or tp,cp,dp,pp: the
  /// compiler's default).
  MeshSpec mesh() const {
    MeshSpec m;
    m.dp = dp, m.tp = tp, m.pp = pp, m.cp = cp, m.ep = ep;
    if (cp > 1)
      m.rankOrder = {"tp", "cp", "dp", "pp"};
    return m;
  }
  int64_t gpus() const { return dp * tp * pp * cp; }
  /// The data-parallel group (Megatron's dp × cp): its size, and its axes as
  /// the compiler names them ("dp+cp", "cp" or "dp"). Gradients reduce over
  /// it in one collective and ZeRO shards over it.
  int64_t dataParallelGroup() const { return dp * cp; }
  std::string gradientAxis() const { return dataParallelAxis(dp, cp); }
  /// Under expert parallelism the experts' data-parallel group, the ranks
  /// holding one expert shard (dp / ep, times cp): its size and axes
  /// ("edp", "edp+cp" or "cp"). The experts' gradients reduce over it.
  int64_t expertDataParallelGroup() const { return dp / ep * cp; }
  std::string expertGradientAxis() const { return expertDataParallelAxis(dp, ep, cp); }
  /// The `llc-dist compile` flags that build this configuration.
  std::string compileFlags() const;
  /// "dp=..,tp=..,pp=.. v=.. mb=.. zero=.. recompute=.. ..." for reports.
  std::string str() const;
};

/// Why `c` cannot be compiled for `w` (divisibility: heads, kv heads,
/// intermediate and vocabulary by tp; the batch by micro-batch × dp; layers
/// by pp × v; interleaved's microbatches by pp; ...), or nullopt.
std::optional<std::string> checkConfig(const Workload &w, const ParallelConfig &c);

/// Per-rank memory of the largest stage, by kind (bytes).
struct MemoryEstimate {
  int64_t params = 0; ///< the parameters the rank holds (with bf16 copies)
  int64_t grads = 0;
  int64_t optimizer = 0;   ///< Adam moments and f32 master weights
  int64_t activations = 0; ///< at the peak: stashed microbatches + one layer's transients
  int64_t total() const { return params + grads + optimizer + activations; }
  int64_t stage = 0; ///< which stage it is
};
MemoryEstimate estimateMemory(const Workload &w, const ParallelConfig &c);

/// FLOPs of one step (all ranks), Korthikanti et al. 2022 §5 generalized to
/// the layer's real shapes: model FLOPs are 3 × the forward's (every matmul
/// 2·m·n·k, attention's QKᵀ and PV 4·B·S²·h counted whole, as the papers do);
/// hardware FLOPs add what recomputation runs again (full: one more forward;
/// selective: attention's QKᵀ and PV again). For GPT with a 4h MLP these are
/// exactly 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) and, with full recompute,
/// Narayanan's 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)).
struct StepFlops {
  double model = 0, hardware = 0;
};
StepFlops stepFlops(const Workload &w, const std::string &recompute);

/// Time per mesh axis ("dp", "tp", "pp", "cp"; "ep" with expert parallelism:
/// the dispatch and combine all-to-alls): what the step spends communicating
/// on it, and how much of that is hidden under compute.
struct AxisComm {
  double total = 0, exposed = 0;
};

struct StepPrediction {
  double stepSeconds = 0;
  double tokensPerSecond = 0;
  double mfu = 0, hfu = 0;   ///< model / hardware FLOPs over (GPUs × peak × step)
  double computeSeconds = 0; ///< the busiest stage's compute (all microbatches)
  double bubbleSeconds = 0;  ///< idle time of the pipeline (analytic)
  double optimizerSeconds = 0;
  std::map<std::string, AxisComm> comm;
  double exposedCommSeconds() const;
  MemoryEstimate memory;
  /// What bounds it most: "compute", "bubble", "tp communication", ...
  std::string bound;
};

/// The analytic prediction; `c` must pass checkConfig.
StepPrediction predictStep(const Hardware &hw, const Workload &w, const ParallelConfig &c);
/// The same with `memory` = estimateMemory(w, c) already computed (the
/// planner's search prunes by it before pricing).
StepPrediction predictStep(const Hardware &hw, const Workload &w, const ParallelConfig &c,
                           const MemoryEstimate &memory);

} // namespace llcdist::cost

#endif
