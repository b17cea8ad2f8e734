//===- Passes.h - xf passes ------------------------------------*- C++ -*-===//
#ifndef LLCDIST_DIALECT_XF_TRANSFORMS_PASSES_H
#define LLCDIST_DIALECT_XF_TRANSFORMS_PASSES_H

#include "llcdist/Dialect/XF/IR/XFDialect.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

namespace llcdist::xf {

#define GEN_PASS_DECL
#include "llcdist/Dialect/XF/Transforms/Passes.h.inc"

/// Options of the forward-graph pipeline that `llc-dist compile` runs: the
/// mesh, i.e. llcdist-attach-mesh's options (cse and llcdist-model-stats have
/// none).
using ForwardPipelineOptions = AttachMeshOptions;

/// Builds the pipeline `llc-dist compile --emit xf` runs after import:
/// cse, llcdist-attach-mesh, llcdist-model-stats.
void buildForwardPipeline(mlir::OpPassManager &pm, const ForwardPipelineOptions &options);

#define GEN_PASS_REGISTRATION
#include "llcdist/Dialect/XF/Transforms/Passes.h.inc"

/// Registers the xf passes (registerXFPasses) and the textual pipeline
/// `llcdist-forward`.
void registerXFPassesAndPipelines();

/// Attaches the TensorParallelOpInterface models (each xf op's tensor-parallel
/// rule, llcdist/Dialect/XF/Transforms/TensorParallelInterface.h) to the xf
/// ops when the xf dialect is loaded; llcdist-partition declares them too.
void registerTensorParallelModels(mlir::DialectRegistry &registry);

} // namespace llcdist::xf

#endif
