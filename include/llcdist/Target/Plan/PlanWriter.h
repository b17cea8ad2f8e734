//===- PlanWriter.h - write a plan directory -------------------*- C++ -*-===//
#ifndef LLCDIST_TARGET_PLAN_PLANWRITER_H
#define LLCDIST_TARGET_PLAN_PLANWRITER_H

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace llcdist {

/// What an emitted plan holds, for the compile summary.
struct PlanSummary {
  int64_t buffers = 0, kernels = 0, params = 0, arenaBytes = 0;
};

/// Writes `module`'s plan.program as the runtime's plan directory `dir`
/// (manifest.json + program-0.json, docs/plan-format.md). The files are
/// written into a temporary sibling directory and renamed into place, so a
/// failure leaves neither a partial directory nor a damaged older plan. An
/// existing `dir` is replaced only when it is a plan directory (holds a
/// manifest.json) or empty. Errors are reported on the module.
mlir::FailureOr<PlanSummary> writePlanDirectory(mlir::ModuleOp module,
                                                const std::string &dir);

} // namespace llcdist

#endif
