//===- CompileSummary.h - the report of `llc-dist compile` -----*- C++ -*-===//
//
// Everything the compile report shows, gathered from the analyses (model
// statistics, memory, communication, pipeline) and the plan writer, printed
// as text for people or JSON (--format json) for machines. The driver only
// fills it and calls toJson() or print().
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_PIPELINES_COMPILESUMMARY_H
#define LLCDIST_PIPELINES_COMPILESUMMARY_H

#include "llcdist/Dialect/Plan/Analysis/CommReport.h"
#include "llcdist/Dialect/Plan/Analysis/MemoryReport.h"
#include "llcdist/Dialect/Plan/Analysis/PipelineReport.h"
#include "llcdist/Dialect/XF/Analysis/ModelStats.h"
#include "llcdist/Frontend/ModelConfig.h"
#include "llcdist/Pipelines/ModelInfo.h"
#include "llcdist/Support/MeshSpec.h"
#include "llcdist/Support/Topology.h"
#include "llcdist/Target/Plan/PlanWriter.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace llcdist {

/// What llcdist-pad-vocab recorded (xf.vocab_padding): the real and padded
/// vocabulary and the multiple.
struct VocabPadding {
  int64_t vocab = 0, padded = 0, multiple = 1;
};
/// std::nullopt when nothing was padded.
std::optional<VocabPadding> vocabPaddingOf(mlir::ModuleOp module);

/// The counts llcdist-model-stats recorded (xf.stats; the graph may since
/// have been lowered to a plan), else counted on the xf graph now.
mlir::FailureOr<xf::ModelStats> recordedModelStats(mlir::ModuleOp module);

/// xf.model's name, else the module's, else "<model>".
std::string modelName(mlir::ModuleOp module);

/// One gradient bucket of llcdist-plan-grad-buckets (plan.grad_buckets): an
/// all-reduce over dp started during the last microbatch's backward.
struct GradBucket {
  std::string collective; ///< all_reduce, or reduce_scatter (ZeRO-1, one per gradient)
  int64_t grads = 0, elements = 0, bytes = 0;
  /// ZeRO-2: reduced in every microbatch's backward (else in the last one's).
  bool everyMicrobatch = false;
  /// The program and the subroutine that start it (a pipeline stage has a
  /// last backward per chunk).
  std::string program, subroutine;
};
/// The buckets of every program, in token order (empty: no overlap).
std::vector<GradBucket> gradBucketsOf(mlir::ModuleOp module);

/// The ZeRO-3 gathers of one subroutine llcdist-plan-fsdp-prefetch made
/// asynchronous (plan.fsdp_prefetch).
struct FsdpPrefetch {
  std::string program, subroutine;
  /// Units (layers, the root's runs); gathers started, of them started before
  /// their unit began (all but unit 0's); bytes gathered.
  int64_t units = 0, gathers = 0, prefetched = 0, bytes = 0;
};
/// Every program's, in program and subroutine order (empty: no prefetch).
std::vector<FsdpPrefetch> fsdpPrefetchOf(mlir::ModuleOp module);

/// The ZeRO-1/2 parameter gathers llcdist-plan-overlap-param-gather moved
/// into the step's start (plan.param_gather_overlap), per program.
struct ParamGatherOverlap {
  std::string program, waitedIn; ///< waitedIn: the first forward's subroutine
  int64_t gathers = 0, bytes = 0;
};
std::vector<ParamGatherOverlap> paramGatherOverlapOf(mlir::ModuleOp module);
/// The programs without plan.param_gather_overlap.
std::vector<std::string> programsWithoutParamGatherOverlap(mlir::ModuleOp module);
/// What llcdist-plan-sp-overlap moved (plan.tp_comm_overlap), summed over
/// the programs: per collective kind, how many it started on queue comm, how
/// many of them overlap at least one kernel, and the kernels and GEMMs their
/// windows hold.
struct TpCommOverlap {
  std::string collective; ///< all_gather | reduce_scatter
  int64_t started = 0, overlapped = 0, kernels = 0, gemms = 0;
};
std::vector<TpCommOverlap> tpCommOverlapOf(mlir::ModuleOp module);

/// The pipeline transfers llcdist-plan-p2p-scatter-gather sliced over tp
/// (plan::kP2PScatterGatherAttr), summed over the programs; nullopt when it
/// did not run.
struct P2PScatterGather {
  int64_t sends = 0, recvs = 0;
};
std::optional<P2PScatterGather> p2pScatterGatherOf(mlir::ModuleOp module);

/// What the fusion passes fused (plan::kFusedAttr), summed over every
/// program, in pass order: `ops` kernels of the pattern `from` became `into`
/// kernels `to`.
struct FusedKernels {
  std::string pass, from, to;
  int64_t ops = 0, into = 0;
};
std::vector<FusedKernels> fusedOf(mlir::ModuleOp module);

struct CompileSummary {
  std::string model; ///< modelName
  MeshSpec mesh;
  /// The resolved training shape of a model compiled from its config
  /// (std::nullopt for an .mlir input, whose shapes are in the IR).
  std::optional<TrainingShape> shape;
  std::string emit = "plan"; ///< plan | xf
  std::string output;        ///< the plan directory or xf file ("-": stdout)
  std::string dumpDir;       ///< --dump-ir-dir, or empty
  double compileMs = 0;
  xf::ModelStats stats;
  std::optional<VocabPadding> vocabPadding;
  std::optional<int64_t> configVocab; ///< the config's vocabulary, with a config
  int64_t vocabDivisibleBy = 128;     ///< --make-vocab-size-divisible-by
  std::optional<Topology> topology;
  // Plans only (emit == "plan").
  std::optional<PlanSummary> plan;
  std::optional<plan::CommReport> comm;
  std::optional<plan::PipelineReport> pipeline;
  std::optional<plan::MemoryReport> memory;
  std::vector<GradBucket> gradBuckets;
  int64_t gradBucketSize = 0; ///< --grad-bucket-size (0: off)
  std::vector<FsdpPrefetch> fsdpPrefetch;
  int64_t fsdpPrefetchUnits = 0; ///< --fsdp-prefetch (0: off)
  std::vector<ParamGatherOverlap> paramGatherOverlap;
  /// With --overlap-param-gather: the programs the pass left synchronous (a
  /// stage holding a tied parameter's replica or sending its value).
  std::vector<std::string> paramGatherSynchronous;
  std::vector<TpCommOverlap> tpCommOverlap;         ///< --tp-comm-overlap (empty: off)
  std::optional<P2PScatterGather> p2pScatterGather; ///< --scatter-gather-p2p
  std::vector<FusedKernels> fused;                  ///< the fusion passes (empty: none fused)

  nlohmann::ordered_json toJson() const;
  void print(llvm::raw_ostream &os) const;
};

} // namespace llcdist

#endif
