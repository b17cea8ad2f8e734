//===- CompileForTest.h - compile a shipped model in a unit test -*- C++ -*-===//
//
// The analyses are tested on real plans: this compiles models/<name>.json
// with the training pipeline, in a context the result owns.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_UNITTESTS_COMPILEFORTEST_H
#define LLCDIST_UNITTESTS_COMPILEFORTEST_H

#include "llcdist/Frontend/ImportXF.h"
#include "llcdist/InitAll.h"
#include "llcdist/Pipelines/Pipelines.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace llcdist::testing {

struct Compiled {
  std::unique_ptr<mlir::MLIRContext> ctx;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  ModelConfig config;
  TrainingShape shape; ///< resolved
};

inline std::string modelPath(const std::string &name) {
  return std::string(LLCDIST_SOURCE_DIR) + "/models/" + name + ".json";
}

/// Compiles `model` with `options` (its mesh gives dp) and `shape`; a
/// failure is a test failure (and an empty module).
inline Compiled compileForTest(const std::string &model, TrainingPipelineOptions options,
                               TrainingShape shape) {
  Compiled c;
  EXPECT_FALSE(loadModelConfig(modelPath(model), c.config)) << model;
  EXPECT_FALSE(resolveTrainingShape(c.config, options.mesh.dp, shape)) << model;
  c.shape = shape;
  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  c.ctx = std::make_unique<mlir::MLIRContext>(registry);
  c.module = importModel(*c.ctx, c.config, shape, options.mesh.dp);
  mlir::PassManager pm(c.ctx.get(), mlir::ModuleOp::getOperationName());
  buildTrainingPipeline(pm, options);
  if (!mlir::succeeded(pm.run(*c.module))) {
    ADD_FAILURE() << "compiling " << model << " failed";
    c.module = nullptr;
  }
  return c;
}

inline TrainingPipelineOptions meshOptions(int64_t dp, int64_t tp = 1, int64_t pp = 1) {
  TrainingPipelineOptions o;
  o.mesh.dp = dp;
  o.mesh.tp = tp;
  o.mesh.pp = pp;
  return o;
}

inline TrainingShape shapeForTest(int64_t seqLen, int64_t microBatch = 1,
                                  int64_t globalBatch = 0, std::string dtype = "f32") {
  TrainingShape s;
  s.seqLen = seqLen;
  s.microBatch = microBatch;
  s.globalBatch = globalBatch;
  s.dtype = std::move(dtype);
  return s;
}

} // namespace llcdist::testing

#endif
