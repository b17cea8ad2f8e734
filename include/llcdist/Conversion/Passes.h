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
} // namespace llcdist

#endif
