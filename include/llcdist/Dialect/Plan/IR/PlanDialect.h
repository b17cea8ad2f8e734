//===- PlanDialect.h - the plan dialect -----------------------*- C++ -*-===//
#ifndef LLCDIST_DIALECT_PLAN_IR_PLANDIALECT_H
#define LLCDIST_DIALECT_PLAN_IR_PLANDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"

#include "llcdist/Dialect/Plan/IR/PlanDialect.h.inc"

#define GET_OP_CLASSES
#include "llcdist/Dialect/Plan/IR/PlanOps.h.inc"

namespace llcdist::plan {
/// Module attribute: the manifest fields (model, batch, mesh, optimizer,
/// lr_schedule, grad_clip) the emitter writes to manifest.json.
constexpr const char kManifestAttr[] = "plan.manifest";
/// Kernel attribute (llcdist-lower-to-plan's record-param-scopes): the
/// parameters whose reads in one scope (a layer body's forward or backward,
/// a chunk's top level) begin at this kernel, each {param, slot (the
/// microbatch slot's prefix), loc (the read's)}; what llcdist-plan-zero's
/// ZeRO-3 gathers need and a plan does not otherwise say. Not in the JSON.
constexpr const char kParamScopesAttr[] = "plan.param_scopes";
} // namespace llcdist::plan

#endif
