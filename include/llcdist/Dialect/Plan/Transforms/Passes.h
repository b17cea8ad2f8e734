//===- Passes.h - plan passes ----------------------------------*- C++ -*-===//
#ifndef LLCDIST_DIALECT_PLAN_TRANSFORMS_PASSES_H
#define LLCDIST_DIALECT_PLAN_TRANSFORMS_PASSES_H

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "mlir/Pass/Pass.h"

namespace llcdist::plan {
#define GEN_PASS_DECL
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

#endif
