//===- Passes.h - lowerings between llc-dist dialects ----------*- C++ -*-===//
#ifndef LLCDIST_CONVERSION_PASSES_H
#define LLCDIST_CONVERSION_PASSES_H

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace llcdist {
#define GEN_PASS_DECL
#include "llcdist/Conversion/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "llcdist/Conversion/Passes.h.inc"

namespace xftoplan {
/// Attaches the PlanLoweringOpInterface models (each xf op's plan kernels,
/// llcdist/Conversion/XFToPlan/PlanLoweringInterface.h) to the xf ops when
/// the xf dialect is loaded; llcdist-lower-to-plan declares them too.
void registerPlanLoweringModels(mlir::DialectRegistry &registry);
} // namespace xftoplan
} // namespace llcdist

#endif
