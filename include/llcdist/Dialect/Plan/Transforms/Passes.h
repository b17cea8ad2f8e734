//===- Passes.h - plan passes ----------------------------------*- C++ -*-===//
#ifndef LLCDIST_DIALECT_PLAN_TRANSFORMS_PASSES_H
#define LLCDIST_DIALECT_PLAN_TRANSFORMS_PASSES_H

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "mlir/Pass/Pass.h"

namespace llcdist {
struct PlanJson;
} // namespace llcdist

namespace llcdist::plan {
#define GEN_PASS_DECL
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"

/// llcdist-verify-plan that, when the plan passes, moves the files it checked
/// into `*verified`, so that a caller writing them (llc-dist compile) does
/// not build them a second time. `verified` must outlive the pass run.
std::unique_ptr<mlir::Pass> createVerifyPlan(VerifyPlanOptions options,
                                             llcdist::PlanJson *verified);
} // namespace llcdist::plan

#endif
