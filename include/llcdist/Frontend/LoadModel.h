//===- LoadModel.h - a model from a config or an .mlir file ----*- C++ -*-===//
#ifndef LLCDIST_FRONTEND_LOADMODEL_H
#define LLCDIST_FRONTEND_LOADMODEL_H

#include "llcdist/Frontend/ModelConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/SourceMgr.h"

#include <optional>
#include <string>

namespace llcdist {

/// A model loaded from a Hugging Face config.json or an xf .mlir file, with
/// the config and the resolved training shape when there is a config.
struct LoadedModel {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::optional<ModelConfig> config;
  TrainingShape shape;
};

/// Loads `path`: an .mlir file is parsed (its errors are reported through
/// `srcMgr`'s diagnostics, with locations, and `error` stays empty); a config
/// is read, `shape` resolved against it and dp, and the forward graph
/// imported and verified. On failure returns std::nullopt, with `error` the
/// message to print when the diagnostics did not already say it.
std::optional<LoadedModel> loadModel(mlir::MLIRContext &ctx, llvm::SourceMgr &srcMgr,
                                     const std::string &path, TrainingShape shape,
                                     int64_t dp, std::string &error);

} // namespace llcdist

#endif
