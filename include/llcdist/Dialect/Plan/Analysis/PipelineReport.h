//===- PipelineReport.h - the emitted pipeline schedule --------*- C++ -*-===//
#ifndef LLCDIST_DIALECT_PLAN_ANALYSIS_PIPELINEREPORT_H
#define LLCDIST_DIALECT_PLAN_ANALYSIS_PIPELINEREPORT_H

#include "llcdist/Schedule/Simulator.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace llcdist::plan {

/// What a pipelined plan does per stage, read back from the emitted
/// programs (their action lists), not from the generator's options.
struct PipelineReport {
  std::string schedule;
  int64_t stages = 1, virtualStages = 1, microbatches = 1;
  /// The cut (llcdist-pipeline-split): layers and estimated training FLOPs
  /// per microbatch of each model chunk (chunk k runs on stage k mod p), and
  /// their sums per stage; imbalance = max stage / mean stage - 1.
  std::vector<int64_t> layersPerChunk;
  std::vector<double> chunkFlops, stageFlops;
  double imbalance = 0;
  /// The action lists of the emitted programs as a schedule, and its
  /// simulation with the analytic formulas' costs (F = 1, B = 2, or with a
  /// split backward B = W = 1, per whole stage; no latency).
  schedule::Schedule emitted;
  schedule::CostModel costs;
  schedule::SimResult simulated;
  /// (p-1)/m, (1/v)(p-1)/m, or ZB-H1's formula (Simulator.h).
  double analyticBubble = 0;
  std::vector<int64_t> peakInFlight; ///< per stage: microbatches whose activations it holds

  /// The analytic bubble's formula for this schedule, as printed.
  std::string analyticBubbleFormula() const;
  /// The compile report's "pipeline": per stage its chunks, cost, bubble,
  /// peak in flight and emitted actions.
  nlohmann::ordered_json toJson() const;
  /// The compile report's pipeline table and the schedule as a text Gantt
  /// chart (when it is small enough to read); `traceFile`, when not empty,
  /// is named as the Chrome trace of the schedule.
  void print(llvm::raw_ostream &os, llvm::StringRef traceFile = "") const;
};

/// The report of a module whose plan.program ops were lowered from a
/// pipeline (module attribute plan.pipeline); std::nullopt without one.
/// Fails, with a diagnostic, when the emitted action lists are not a valid
/// schedule (which the compiler never produces).
mlir::FailureOr<std::optional<PipelineReport>> computePipelineReport(mlir::ModuleOp module);

} // namespace llcdist::plan

#endif
