//===- CollectiveOrigin.h - why a plan collective exists -------*- C++ -*-===//
//
// The structured provenance of a plan's collectives and pipeline transfers:
// llcdist-lower-to-plan sets it on each kernel it creates for one (plan.origin,
// beside the readable reason in the kernel's location), and the reports read
// it through collectiveOrigin(), never from the reason's wording.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_DIALECT_PLAN_ANALYSIS_COLLECTIVEORIGIN_H
#define LLCDIST_DIALECT_PLAN_ANALYSIS_COLLECTIVEORIGIN_H

#include "llcdist/Dialect/XF/IR/XFOps.h"

#include "mlir/IR/Operation.h"

#include <optional>

namespace llcdist::plan {

/// The discardable attribute on a plan.kernel that holds its origin (a
/// string: xf::stringifyCollectiveOrigin). Not part of the plan's JSON.
constexpr const char kOriginAttr[] = "plan.origin";

/// The origin of `kernel`, or std::nullopt for a kernel that is no collective
/// (or was written by hand without one).
std::optional<xf::CollectiveOrigin> collectiveOrigin(mlir::Operation *kernel);

/// Sets the origin of `kernel`.
void setCollectiveOrigin(mlir::Operation *kernel, xf::CollectiveOrigin origin);
/// Copies the origin of `xfCollective` (its `origin` attribute) onto `kernel`.
void setCollectiveOrigin(mlir::Operation *kernel, mlir::Operation *xfCollective);

/// Whether the collective `kernel` (of kind `kind`: "all_reduce",
/// "all_gather", "reduce_scatter") reduces gradients: data parallelism's
/// all-reduce, ZeRO's reduce-scatter, the kv-head replicas' all-reduce, and
/// sequence parallelism's all-reduce of partial sums over the tokens. False
/// for a kernel without an origin.
bool reducesGradients(mlir::Operation *kernel, llvm::StringRef kind);
/// Whether the collective `kernel` (an all_gather or reduce_scatter) moves
/// activations between tensor-parallel ranks: sequence parallelism's
/// all-gathers and the reduce-scatters that end a row- or column-parallel
/// layer or the vocabulary-parallel embedding under it.
bool movesTpActivations(mlir::Operation *kernel, llvm::StringRef kind);
/// Whether `kernel` is a synchronous pipeline transfer: a send or recv of an
/// activation or its gradient between stages (origin Pipeline, not a tied
/// parameter's) without a token (not started by an overlap pass yet).
bool isSyncPipelineTransfer(mlir::Operation *kernel);

} // namespace llcdist::plan

#endif
