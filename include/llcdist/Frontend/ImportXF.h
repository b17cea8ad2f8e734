//===- ImportXF.h - model config -> xf forward graph -----------*- C++ -*-===//
#ifndef LLCDIST_FRONTEND_IMPORTXF_H
#define LLCDIST_FRONTEND_IMPORTXF_H

#include "llcdist/Frontend/ModelConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace llcdist {

/// Builds the xf forward graph (GLOBAL shapes: batch = micro-batch × dp) of
/// `model` for one microbatch: `func.func @forward(ids, targets) -> loss`
/// plus one layer body, with Hugging Face parameter names. Locations point
/// into the config file. `shape` must have been resolved.
mlir::OwningOpRef<mlir::ModuleOp> importModel(mlir::MLIRContext &ctx,
                                              const ModelConfig &model,
                                              const TrainingShape &shape,
                                              int64_t dp);

} // namespace llcdist

#endif
