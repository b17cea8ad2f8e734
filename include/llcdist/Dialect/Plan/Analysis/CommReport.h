//===- CommReport.h - communication volume of a plan -----------*- C++ -*-===//
#ifndef LLCDIST_DIALECT_PLAN_ANALYSIS_COMMREPORT_H
#define LLCDIST_DIALECT_PLAN_ANALYSIS_COMMREPORT_H

#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace llcdist::plan {

/// The collectives of the program with one kind, axis, payload and reason
/// (e.g. every layer's row-parallel output all-reduce), over one step.
struct CollectiveEntry {
  std::string kind;   ///< all_reduce, all_gather, reduce_scatter
  std::string axis;   ///< dp, tp, pp
  std::string reason; ///< provenance: why the partitioner needed it
  std::string payload; ///< what travels: "gradients", "loss", ... (plan.payload)
  int64_t groupSize = 1;
  int64_t callsPerStep = 0;
  int64_t payloadBytes = 0; ///< per call: the reduced / gathered / sent tensor
  /// The pipeline stage whose program issues it (-1: a plan of one program).
  int64_t stage = -1;
  /// Bytes each rank sends per step with NCCL's ring algorithms: all-reduce
  /// 2(n-1)/n · payload, all-gather and reduce-scatter (n-1)/n · payload; a
  /// pipeline `send` the payload itself.
  double ringBytesPerStep() const;
};

struct CommReport {
  std::vector<CollectiveEntry> entries;
  /// Parameter elements one rank updates (the most of any stage; a tied
  /// parameter's copy on another stage than its home is not counted).
  int64_t localParameters = 0;
  std::vector<int64_t> localParametersPerStage; ///< one entry per program
  double ringBytesPerStep() const;
};

/// Reads the collectives (and pipeline sends) of the module's plan.program
/// ops, one per pipeline stage; the group sizes come from plan.manifest's
/// mesh. Fails (with a diagnostic) without a program.
mlir::FailureOr<CommReport> computeCommReport(mlir::ModuleOp module);

/// The mesh axes (of more than one rank) each plan.program communicates on,
/// sorted: every kernel's `axis`, `shard_axis` and `stage_axis` (a
/// vocabulary-parallel loss, a grad norm across stages, ZeRO's collectives,
/// pipeline send/recv). Each is one channel of the runtime (one NCCL
/// communicator per rank), so the device budget reserves NCCL's buffers per
/// entry. One list per program, in order.
std::vector<std::vector<std::string>> communicatorAxesPerProgram(mlir::ModuleOp module);

} // namespace llcdist::plan

#endif
