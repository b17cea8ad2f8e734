//===- PlanLoweringInterface.h - an xf op's plan kernels --------*- C++ -*-===//
//
// The op interface llcdist-lower-to-plan lowers every xf op through. Its
// models for the xf ops are in lib/Conversion/XFToPlan/OpLowerings.cpp
// (registered by registerPlanLoweringModels, llcdist/Conversion/Passes.h);
// docs/adding-an-op.md says how a new op gets one.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_CONVERSION_XFTOPLAN_PLANLOWERINGINTERFACE_H
#define LLCDIST_CONVERSION_XFTOPLAN_PLANLOWERINGINTERFACE_H

#include "mlir/IR/OpDefinition.h"

namespace llcdist::xftoplan {
class OpLowering;
struct Scope;
enum class BackwardPart : int;
} // namespace llcdist::xftoplan

#include "llcdist/Conversion/XFToPlan/PlanLoweringInterface.h.inc"

#endif
