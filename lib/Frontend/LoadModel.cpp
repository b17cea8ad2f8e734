//===- LoadModel.cpp - a model from a config or an .mlir file -------------===//
#include "llcdist/Frontend/LoadModel.h"
#include "llcdist/Frontend/ImportXF.h"
#include "llcdist/Support/NestingDepth.h"

#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

using namespace mlir;
using namespace llcdist;

std::optional<LoadedModel> llcdist::loadModel(MLIRContext &ctx, llvm::SourceMgr &srcMgr,
                                              const std::string &path, TrainingShape shape,
                                              int64_t dp, std::string &error) {
  LoadedModel lm;
  if (!llvm::sys::fs::exists(path)) {
    error = path + ": no such file (shipped models are in models/, e.g. models/gpt2.json)";
    return std::nullopt;
  }
  if (StringRef(path).ends_with(".mlir")) {
    auto file = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
    if (!file) {
      error = path + ": cannot read: " + file.getError().message();
      return std::nullopt;
    }
    // Bounded before MLIR's recursive parser sees it (NestingDepth.h).
    if (auto deep = checkNestingDepth((*file)->getBuffer())) {
      error = deep->describe(path);
      return std::nullopt;
    }
    srcMgr.AddNewSourceBuffer(std::move(*file), llvm::SMLoc());
    lm.module = parseSourceFile<ModuleOp>(srcMgr, ParserConfig(&ctx));
    if (!lm.module)
      return std::nullopt; // diagnostics already reported with locations
    return lm;
  }
  ModelConfig cfg;
  if (auto err = loadModelConfig(path, cfg)) {
    error = err->message;
    return std::nullopt;
  }
  if (auto err = resolveTrainingShape(cfg, dp, shape)) {
    error = *err;
    return std::nullopt;
  }
  lm.module = importModel(ctx, cfg, shape, dp);
  if (failed(mlir::verify(*lm.module))) {
    error = path + ": internal error: the imported graph does not verify";
    return std::nullopt;
  }
  lm.config = cfg;
  lm.shape = shape;
  return lm;
}
