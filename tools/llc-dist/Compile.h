//===- Compile.h - what llc-dist compile and info share ---------*- C++ -*-===//
//
// Loading a model for a command (its error printed) and checking the IR's
// parameter count against the architecture's formula (Compile.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_TOOLS_LLC_DIST_COMPILE_H
#define LLCDIST_TOOLS_LLC_DIST_COMPILE_H

#include "llcdist/Dialect/XF/Analysis/ModelStats.h"
#include "llcdist/Frontend/LoadModel.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/SourceMgr.h"

#include <optional>
#include <string>

namespace llcdist::cli {

/// loadModel, printing its error (an .mlir file's are already reported).
std::optional<LoadedModel> loadOrReport(mlir::MLIRContext &ctx, llvm::SourceMgr &srcMgr, const std::string &path,
                                        TrainingShape shape, int64_t dp);

/// Checks the IR's count against the architecture's formula: a mismatch is a
/// compiler bug, never a user error (printed; false).
bool crossCheck(const LoadedModel &lm, const xf::ModelStats &s);

} // namespace llcdist::cli

#endif // LLCDIST_TOOLS_LLC_DIST_COMPILE_H
