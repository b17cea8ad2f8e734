//===- CommReportTest.cpp - the compile report's communication volume -----===//
//
// The collectives the partitioner inserts, counted on the emitted plan, must
// equal the analytic volume: data parallelism all-reduces every fp32 gradient
// once per step (4·Ψ bytes), which a ring sends 2(n-1)/n times per rank.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Dialect/Plan/Analysis/CommReport.h"
#include "llcdist/Frontend/ImportXF.h"
#include "llcdist/InitAll.h"
#include "llcdist/Pipelines/Pipelines.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

using namespace llcdist;

namespace {
plan::CommReport compileAndReport(const std::string &model, int64_t dp,
                                  int64_t microbatches, int64_t *params,
                                  int64_t tp = 1, ModelConfig *config = nullptr) {
  ModelConfig cfg;
  EXPECT_FALSE(loadModelConfig(std::string(LLCDIST_SOURCE_DIR) + "/models/" +
                                   model + ".json",
                               cfg));
  *params = cfg.numParameters();
  if (config)
    *config = cfg;
  TrainingShape shape;
  shape.seqLen = 16;
  shape.microBatch = 2;
  shape.globalBatch = 2 * dp * microbatches;
  EXPECT_FALSE(resolveTrainingShape(cfg, dp, shape));
  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  mlir::MLIRContext ctx(registry);
  auto module = importModel(ctx, cfg, shape, dp);
  mlir::PassManager pm(&ctx, mlir::ModuleOp::getOperationName());
  TrainingPipelineOptions opt;
  opt.mesh.dp = dp;
  opt.mesh.tp = tp;
  buildTrainingPipeline(pm, opt);
  EXPECT_TRUE(mlir::succeeded(pm.run(*module)));
  auto report = plan::computeCommReport(*module);
  EXPECT_TRUE(mlir::succeeded(report));
  return mlir::succeeded(report) ? *report : plan::CommReport{};
}
} // namespace

TEST(CommReport, OneRankHasNoCollectives) {
  int64_t params;
  EXPECT_TRUE(compileAndReport("tiny-gpt2", 1, 1, &params).entries.empty());
}

TEST(CommReport, DataParallelGradientsMatchTheAnalyticVolume) {
  for (const char *model : {"tiny-gpt2", "tiny-llama"})
    for (int64_t dp : {2, 4})
      for (int64_t mb : {1, 3}) {
        int64_t params;
        plan::CommReport r = compileAndReport(model, dp, mb, &params);
        ASSERT_EQ(r.entries.size(), 2u) << model;
        const plan::CollectiveEntry &g = r.entries[0], &l = r.entries[1];
        EXPECT_EQ(g.payload, "gradients");
        EXPECT_EQ(g.kind, "all_reduce");
        EXPECT_EQ(g.axis, "dp");
        EXPECT_EQ(g.groupSize, dp);
        // Once per step whatever the microbatch count (DDP's no_sync).
        EXPECT_EQ(g.callsPerStep, 1) << "microbatches " << mb;
        EXPECT_EQ(g.payloadBytes, 4 * params) << model;
        EXPECT_DOUBLE_EQ(g.ringBytesPerStep(),
                         2.0 * double(dp - 1) / double(dp) * 4.0 * double(params));
        EXPECT_EQ(l.payload, "loss");
        EXPECT_EQ(l.payloadBytes, 4);
      }
}

// Megatron's tensor parallelism: per microbatch, each layer all-reduces its
// attention and MLP outputs forward and two input gradients backward, of
// b·s·h values each (Narayanan et al., SC21, §2.3: "4 all-reduce operations
// per layer"), plus the vocab-parallel embedding forward and the LM head's
// input gradient backward.
TEST(CommReport, TensorParallelActivationsMatchMegatron) {
  for (const char *model : {"tiny-gpt2", "tiny-llama"})
    for (int64_t tp : {2, 4})
      for (int64_t mb : {1, 2}) {
        int64_t params;
        ModelConfig cfg;
        plan::CommReport r = compileAndReport(model, 1, mb, &params, tp, &cfg);
        int64_t b = 2, s = 16, h = cfg.hidden, L = cfg.layers;
        int64_t calls = 0;
        for (const plan::CollectiveEntry &e : r.entries) {
          EXPECT_EQ(e.axis, "tp");
          EXPECT_EQ(e.payload, "activations");
          EXPECT_EQ(e.payloadBytes, 4 * b * s * h) << e.reason;
          calls += e.callsPerStep;
        }
        EXPECT_EQ(calls, (4 * L + 2) * mb) << model << " tp=" << tp;
        double n = double(tp);
        EXPECT_DOUBLE_EQ(r.ringBytesPerStep(),
                         double((4 * L + 2) * mb) * 2 * (n - 1) / n * 4.0 * double(b * s * h));
      }
}
