//===- PlanTestUtil.h - compile a shipped model into a plan for tests -----===//
#ifndef LLCDIST_UNITTESTS_INTEGRATION_PLANTESTUTIL_H
#define LLCDIST_UNITTESTS_INTEGRATION_PLANTESTUTIL_H

#include "llcdist/Frontend/ImportXF.h"
#include "llcdist/InitAll.h"
#include "llcdist/Pipelines/Pipelines.h"
#include "llcdist/Target/Plan/PlanWriter.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <filesystem>
#include <string>

#include <unistd.h>

namespace llcdist::test {

/// A path under the system temp dir for `name`, unique to this process, so
/// test runs of two checkouts at once never share (and clobber) a plan.
inline std::filesystem::path tempPath(const std::string &name) {
  return std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()));
}

/// Compiles models/<name>.json (or `name` itself when it is a path to a
/// .json file) with `shape` and `train` into a module of `ctx`; null on
/// failure.
inline mlir::OwningOpRef<mlir::ModuleOp> compileModule(mlir::MLIRContext &ctx,
                                                      const std::string &name,
                                                      TrainingShape shape,
                                                      const TrainingPipelineOptions &train) {
  ModelConfig cfg;
  bool isPath = name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0;
  std::string path =
      isPath ? name : std::string(LLCDIST_SOURCE_DIR) + "/models/" + name + ".json";
  int64_t dp = train.mesh.dp;
  if (loadModelConfig(path, cfg) || resolveTrainingShape(cfg, dp, shape))
    return nullptr;
  auto module = importModel(ctx, cfg, shape, dp);
  mlir::PassManager pm(&ctx, mlir::ModuleOp::getOperationName());
  buildTrainingPipeline(pm, train);
  if (mlir::failed(pm.run(*module)))
    return nullptr;
  return module;
}

/// compileModule into a fresh plan directory under the system temp dir;
/// returns its path ("" on failure).
inline std::string compilePlan(const std::string &name, TrainingShape shape,
                               TrainingPipelineOptions train,
                               const std::string &tag) {
  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  mlir::MLIRContext ctx(registry);
  auto module = compileModule(ctx, name, shape, train);
  if (!module)
    return "";
  std::string dir =
      tempPath("llcdist-test-" + std::filesystem::path(name).stem().string() + "-" + tag).string();
  std::filesystem::remove_all(dir);
  if (mlir::failed(writePlanDirectory(*module, dir)))
    return "";
  return dir;
}

} // namespace llcdist::test

#endif
