//===- CommReport.h - communication volume of a plan -----------*- C++ -*-===//
#ifndef LLCDIST_DIALECT_PLAN_ANALYSIS_COMMREPORT_H
#define LLCDIST_DIALECT_PLAN_ANALYSIS_COMMREPORT_H

#include "llcdist/Dialect/Plan/Analysis/CollectiveOrigin.h"
#include "llcdist/Support/MeshSpec.h"
#include "llcdist/Support/Topology.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <nlohmann/json.hpp>

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace llcdist::plan {

struct CollectiveEntry;

/// The analytic volume of a collective, printed beside the counted one: data
/// parallelism all-reduces the gradients (4·Ψ_local bytes in fp32, 2·Ψ in
/// bf16) once per step; Megatron's tensor parallelism all-reduces b·s·h
/// activations: each layer's two row-parallel outputs forward and two
/// column-parallel input gradients backward, plus the vocab-parallel
/// embedding forward and the LM head's input gradient backward — (4L + 2)
/// per microbatch; a pipeline border sends one microbatch's residual stream.
struct AnalyticVolume {
  std::string formula; ///< empty: no prediction for this collective
  double payloadBytes = 0;
  int64_t calls = -1; ///< -1: calls not predicted
  bool known() const { return !formula.empty(); }
  /// The counted payload equals the formula's, and so do the calls where
  /// the formula predicts them.
  bool matches(const CollectiveEntry &e) const;
};

/// What the analytic volumes need to know about a plan, read once from the
/// module (plan.manifest, xf.model, xf.recompute and the kernels).
struct CommFacts {
  bool bf16 = false;          ///< mixed precision: bf16 gradients and activations
  bool vocabParallel = false; ///< a vocabulary-parallel LM head and loss
  bool sequenceParallel = false;
  /// llcdist-plan-p2p-scatter-gather ran: pipeline sends carry 1/tp, and an
  /// all_gather over tp (plan.origin "pipeline") follows each recv.
  bool scatterGatherP2P = false;
  bool fullRecompute = false;
  int64_t tp = 1, cp = 1;
  /// From xf.model: micro-batch, sequence, hidden size, layers, microbatches.
  std::optional<std::array<int64_t, 5>> bshLM;
  int64_t headDim = 0;
  /// From xf.model: query and kv heads (0: not given).
  int64_t numHeads = 0, numKvHeads = 0;
  bool kvBias = false; ///< the k and v projections have biases
  /// The MLP's tp-split linears per layer: 1 (a dense MLP, or Qwen2-MoE's
  /// shared expert), 0 where only experts remain (Mixtral: they run whole
  /// on every tp rank, or on each rank's tokens under SP).
  int64_t splitMlps = 1;
  /// The row-parallel reductions per layer a fully recomputed layer runs
  /// again (it runs only what its backward reads): the attention output's
  /// (the MLP's input adds it) and a Qwen2-MoE shared expert's (its gate's
  /// gradient reads it), not a dense MLP's (only the residual stream reads
  /// it), nor either of Phi's (both branches only add into the stream).
  int64_t recomputedRowParallel = 1;
  /// From xf.model: a mixture of experts' experts (0: dense).
  int64_t experts = 0;
};

/// Which link a collective's group uses, and the ring time at its bandwidth.
struct LinkEstimate {
  bool crossesNodes = false;
  double gbs = 0, ms = 0;
};

/// The collectives of the program with one kind, axis, payload and reason
/// (e.g. every layer's row-parallel output all-reduce), over one step.
struct CollectiveEntry {
  std::string kind;   ///< all_reduce, all_gather, reduce_scatter, all_to_all, send
  std::string axis;   ///< dp, tp, pp, cp
  std::string reason; ///< provenance: why the partitioner needed it
  /// The same as a kind (plan.origin): what the analytic formula is keyed on.
  std::optional<xf::CollectiveOrigin> origin;
  std::string payload; ///< what travels: "gradients", "loss", ... (plan.payload)
  int64_t groupSize = 1;
  int64_t callsPerStep = 0;
  /// Per call: the bytes of the reduced / gathered / sent tensor as they
  /// move, 2 per element of a collective of dtype bf16, 4 per element of
  /// one of dtype f32 (bf16 buffers included: the runtime moves them as f32);
  /// a send's buffer bytes.
  int64_t payloadBytes = 0;
  /// The collective's dtype (its `dtype` param: "bf16", or "f32" when absent).
  std::string dtype = "f32";
  /// The pipeline stage whose program issues it (-1: a plan of one program).
  int64_t stage = -1;
  /// The queue it is issued on (its `queue` attribute; "compute" when absent:
  /// synchronous). An overlap pass moves collectives onto a communication
  /// queue, where they run while the compute queue goes on.
  std::string queue = "compute";
  /// Bytes each rank sends per step with NCCL's ring algorithms: all-reduce
  /// 2(n-1)/n · payload, all-gather and reduce-scatter (n-1)/n · payload; a
  /// pipeline `send` the payload itself.
  double ringBytesPerStep() const;
  /// The formula's volume for this entry (analyticVolume).
  AnalyticVolume analytic;
};

struct CommReport {
  std::vector<CollectiveEntry> entries;
  /// Parameter elements one rank updates (the most of any stage; a tied
  /// parameter's copy on another stage than its home is not counted).
  int64_t localParameters = 0;
  std::vector<int64_t> localParametersPerStage; ///< one entry per program
  /// Of those, the experts' shards split over ep (expert parallelism: their
  /// gradients reduce over edp, the rest over dp).
  int64_t localExpertParameters = 0;
  std::vector<int64_t> localExpertParametersPerStage;
  CommFacts facts;
  double ringBytesPerStep() const;
  /// Ring bytes per step and rank by queue, in first-use order: what runs
  /// exposed (on "compute") and what may overlap compute (the others).
  std::vector<std::pair<std::string, double>> ringBytesPerStepByQueue() const;

  /// One object per entry: counted and analytic volume, the reason, and with
  /// a topology the link and estimated time (the compile report's
  /// "collectives").
  nlohmann::ordered_json toJson(const MeshSpec &mesh, const Topology *topology) const;
  /// The table of the compile report: one line per entry with its formula
  /// and "= same" or "≠ MISMATCH"; with a topology, where the ranks sit and
  /// each entry's link and time.
  void print(llvm::raw_ostream &os, const MeshSpec &mesh, const Topology *topology) const;
};

/// Reads the facts the analytic formulas depend on.
CommFacts computeCommFacts(mlir::ModuleOp module);

/// The analytic volume of `e`, an entry of `report`, or one without a
/// formula (ZeRO's per-parameter blocks; per-stage layer counts).
AnalyticVolume analyticVolume(const CollectiveEntry &e, const CommReport &report, const CommFacts &facts);

/// The link `e`'s group uses on `topology` with `mesh`'s rank order, and the
/// time of its ring bytes per step at that link's bandwidth.
LinkEstimate estimateLink(const CollectiveEntry &e, const MeshSpec &mesh, const Topology &topology);

/// Reads the collectives (and pipeline sends) of the module's plan.program
/// ops, one per pipeline stage; the group sizes come from plan.manifest's
/// mesh. Each entry gets its analytic volume. Fails (with a diagnostic)
/// without a program.
mlir::FailureOr<CommReport> computeCommReport(mlir::ModuleOp module);

/// The mesh axes (of more than one rank) each plan.program communicates on,
/// sorted: every kernel's `axis` and `shard_axis` (the collectives of a
/// vocabulary-parallel loss, of a grad norm across shards or stages, ZeRO's,
/// pipeline send/recv). Each is one channel of the runtime (one NCCL
/// communicator per rank), so the device budget reserves NCCL's buffers per
/// entry. One list per program, in order.
std::vector<std::vector<std::string>> communicatorAxesPerProgram(mlir::ModuleOp module);

} // namespace llcdist::plan

#endif
