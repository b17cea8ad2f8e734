//===- PlanWriter.h - write a plan directory -------------------*- C++ -*-===//
#ifndef LLCDIST_TARGET_PLAN_PLANWRITER_H
#define LLCDIST_TARGET_PLAN_PLANWRITER_H

#include "mlir/IR/BuiltinOps.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace llcdist {

/// What an emitted plan holds, for the compile summary.
struct PlanSummary {
  int64_t buffers = 0, kernels = 0, params = 0;
  /// The largest program's arena, and each program's (one per pipeline stage).
  int64_t arenaBytes = 0;
  std::vector<int64_t> arenaBytesPerProgram;
  /// Whether a program uses queues, tokens or waits (feature "async").
  bool async = false;
  /// Each program's ops per training step: every op its actions run, once per
  /// action (what a backend launches or issues per step, load_microbatch and
  /// waits included).
  std::vector<int64_t> opsPerStepPerProgram;
};

/// The plan directory's files as JSON: manifest.json and program-<i>.json.
struct PlanJson {
  nlohmann::ordered_json manifest;
  std::vector<nlohmann::ordered_json> programs;
  PlanSummary summary;
};

/// Builds the runtime's files (docs/plan-format.md) from `module`'s
/// plan.program ops: one program, or one per pipeline stage (feature
/// "pipeline": programs list their stage's ranks, params their placements).
/// Errors are reported on the module.
mlir::FailureOr<PlanJson> buildPlanJson(mlir::ModuleOp module);

/// Writes buildPlanJson(module) as the plan directory `dir`, plus
/// `extraFiles` (file name -> contents, e.g. the schedule's trace). The files
/// are written into a temporary sibling directory and renamed into place, so
/// a failure leaves neither a partial directory nor a damaged older plan. An
/// existing `dir` is replaced only when it is a plan directory (holds a
/// manifest.json) or empty.
mlir::FailureOr<PlanSummary>
writePlanDirectory(mlir::ModuleOp module, const std::string &dir,
                   const std::map<std::string, std::string> &extraFiles = {});
/// The same with files already built from `module` (e.g. those
/// llcdist-verify-plan checked); `module` locates errors.
mlir::FailureOr<PlanSummary>
writePlanDirectory(mlir::ModuleOp module, const PlanJson &plan, const std::string &dir,
                   const std::map<std::string, std::string> &extraFiles = {});

} // namespace llcdist

#endif
