//===- PipelineTest.cpp - the golden rule for pipeline parallelism --------===//
//
// Every pipelined plan reproduces the single-device plan (issue #5): tiny
// GPT-2 (tied embeddings: the first and last stage hold a copy) and tiny
// Llama, global batch 8, against one device with one microbatch of 8:
//   pp = 2 and pp = 4 with GPipe, 1F1B and ZB-H1 (8 microbatches);
//   pp = 2 interleaved with v = 2 (4 model chunks of one layer), and pp = 4
//   with v = 2 on 8-layer variants (unittests/Integration/Inputs/);
//   dp = 2, tp = 2, pp = 2 (1F1B; also with sequence parallelism, and with
//   the pipeline's sends sliced over tp, --scatter-gather-p2p);
//   tiny Mixtral with the load-balancing loss (its statistics crossing the
//   stages) under every schedule, against one device with the same
//   microbatches.
// Also: the bubble of the schedule read back from the emitted programs equals
// the analytic formulas, and the emitted programs carry the schedule.
//
//===----------------------------------------------------------------------===//
#include "GoldenUtil.h"

#include "llcdist/Dialect/Plan/Analysis/PipelineReport.h"

using namespace llcdist;
namespace rt = llcdist::rt;

namespace {
using test::Trained;

struct PipelineConfig {
  int64_t dp = 1, tp = 1, pp = 2;
  std::string schedule = "1f1b";
  int64_t virtualStages = 1;
  bool sequenceParallel = false;
  bool scatterGather = false; ///< --scatter-gather-p2p
  std::string name() const {
    return "dp" + std::to_string(dp) + "-tp" + std::to_string(tp) + "-pp" + std::to_string(pp) + "-" + schedule +
           (virtualStages > 1 ? "-v" + std::to_string(virtualStages) : "") + (sequenceParallel ? "-sp" : "") +
           (scatterGather ? "-sg" : "");
  }
};

Trained train(const std::string &model, const PipelineConfig &c, const std::string &optimizer) {
  TrainingPipelineOptions opt = test::goldenOptions(optimizer);
  opt.mesh.dp = c.dp;
  opt.mesh.tp = c.tp;
  opt.mesh.pp = c.pp;
  opt.pipelineSchedule = c.schedule;
  opt.virtualStages = c.virtualStages;
  opt.sequenceParallel = c.sequenceParallel;
  opt.scatterGatherP2P = c.scatterGather;
  // One sequence per microbatch: 8 / dp microbatches flow through the pipe.
  return test::trainPlan(model, opt, 1, c.name() + "-" + optimizer);
}

void golden(const std::string &model, const std::string &optimizer) {
  TrainingPipelineOptions single = test::goldenOptions(optimizer);
  Trained ref = test::trainPlan(model, single, 8, "pp-reference-" + optimizer);
  EXPECT_LT(ref.losses.back(), ref.losses.front()) << "the reference learns";
  std::vector<PipelineConfig> configs;
  for (int64_t pp : {2, 4})
    for (const char *s : {"gpipe", "1f1b", "zb-h1"})
      configs.push_back({1, 1, pp, s});
  configs.push_back({1, 1, 2, "interleaved", 2});
  configs.push_back({2, 2, 2, "1f1b"});
  configs.push_back({2, 2, 2, "1f1b", 1, /*sequenceParallel=*/true});
  configs.push_back({2, 2, 2, "1f1b", 1, false, /*scatterGather=*/true});
  for (const PipelineConfig &c : configs)
    test::expectSame(ref, train(model, c, optimizer), model + " " + optimizer + " " + c.name(),
                     test::goldenTolerance(optimizer));
}

// Interleaving on pp = 4 needs 8 model chunks of a layer each: the tiny
// models with 8 layers (test inputs), v = 2, 8 microbatches.
void goldenInterleaved4(const std::string &model, const std::string &optimizer) {
  std::string path = std::string(LLCDIST_SOURCE_DIR) + "/unittests/Integration/Inputs/" + model + "-8l.json";
  Trained ref = test::trainPlan(path, test::goldenOptions(optimizer), 8, "pp4-il-ref-" + optimizer);
  PipelineConfig c{1, 1, 4, "interleaved", 2};
  TrainingPipelineOptions opt = test::goldenOptions(optimizer);
  opt.mesh.pp = 4;
  opt.pipelineSchedule = "interleaved";
  opt.virtualStages = 2;
  test::expectSame(ref, test::trainPlan(path, opt, 1, c.name() + "-" + optimizer),
                   model + "-8l " + optimizer + " " + c.name(), test::goldenTolerance(optimizer));
}

// The MoE load-balancing loss (tiny-mixtral with output_router_logits): its
// statistics cross the stages with the activations and its gradient comes
// back with theirs. The loss is per microbatch (transformers' per batch), so
// the reference runs the same 8 microbatches of one sequence on one device;
// tp (without sequence parallelism) keeps every token on every rank.
void goldenLoadBalancing(const std::string &optimizer) {
  const std::string path = std::string(LLCDIST_SOURCE_DIR) + "/unittests/Integration/Inputs/tiny-mixtral-aux.json";
  Trained ref = test::trainPlan(path, test::goldenOptions(optimizer), 1, "pp-aux-ref-" + optimizer);
  EXPECT_LT(ref.losses.back(), ref.losses.front()) << "the reference learns";
  std::vector<PipelineConfig> configs;
  for (const char *s : {"gpipe", "1f1b", "zb-h1"})
    configs.push_back({1, 1, 2, s});
  configs.push_back({1, 1, 4, "1f1b"});
  configs.push_back({1, 1, 2, "interleaved", 2});
  configs.push_back({1, 2, 2, "1f1b"});
  configs.push_back({1, 2, 2, "1f1b", 1, false, /*scatterGather=*/true});
  for (const PipelineConfig &c : configs)
    test::expectSame(ref, train(path, c, optimizer), "tiny-mixtral-aux " + optimizer + " " + c.name(),
                     test::goldenTolerance(optimizer));
}
} // namespace

TEST(Pipeline, TinyMixtralLoadBalancingLoss) { goldenLoadBalancing("sgd"); }

// --scatter-gather-p2p moves the same bytes in a different way (each tp rank
// sends 1/tp, the receivers all-gather): it trains to the whole sends' bits,
// interleaved and zero-bubble schedules included.
TEST(Pipeline, ScatterGatherSendsTrainToTheWholeSendsBits) {
  for (const char *model : {"tiny-gpt2", "tiny-llama"})
    for (PipelineConfig c : {PipelineConfig{1, 2, 2, "interleaved", 2}, PipelineConfig{1, 2, 2, "zb-h1"}}) {
      SCOPED_TRACE(std::string(model) + " " + c.name());
      const Trained whole = train(model, c, "adamw");
      c.scatterGather = true;
      const Trained sliced = train(model, c, "adamw");
      ASSERT_EQ(whole.losses.size(), 3u);
      test::expectSameBits(whole, sliced);
    }
}

TEST(Pipeline, Interleaved4StagesTinyGPT2) { goldenInterleaved4("tiny-gpt2", "sgd"); }
TEST(Pipeline, Interleaved4StagesTinyLlama) { goldenInterleaved4("tiny-llama", "adamw"); }

TEST(Pipeline, TinyGPT2SGD) { golden("tiny-gpt2", "sgd"); }
TEST(Pipeline, TinyGPT2AdamW) { golden("tiny-gpt2", "adamw"); }
TEST(Pipeline, TinyLlamaSGD) { golden("tiny-llama", "sgd"); }
TEST(Pipeline, TinyLlamaAdamW) { golden("tiny-llama", "adamw"); }

namespace {
/// Compiles tiny-llama for `c` with `microbatches` and reads back its
/// pipeline report (the schedule of the emitted programs).
plan::PipelineReport reportOf(const PipelineConfig &c, int64_t microbatches) {
  ModelConfig cfg;
  EXPECT_FALSE(loadModelConfig(std::string(LLCDIST_SOURCE_DIR) + "/models/tiny-llama.json", cfg));
  TrainingShape shape;
  shape.seqLen = 8;
  shape.microBatch = 1;
  shape.globalBatch = microbatches * c.dp;
  EXPECT_FALSE(resolveTrainingShape(cfg, c.dp, shape));
  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  mlir::MLIRContext ctx(registry);
  auto module = importModel(ctx, cfg, shape, c.dp);
  mlir::PassManager pm(&ctx, mlir::ModuleOp::getOperationName());
  TrainingPipelineOptions opt;
  opt.mesh.dp = c.dp;
  opt.mesh.pp = c.pp;
  opt.pipelineSchedule = c.schedule;
  opt.virtualStages = c.virtualStages;
  buildTrainingPipeline(pm, opt);
  EXPECT_TRUE(mlir::succeeded(pm.run(*module))) << c.name();
  auto report = plan::computePipelineReport(*module);
  EXPECT_TRUE(mlir::succeeded(report) && report->has_value()) << c.name();
  return **report;
}
} // namespace

// The bubble of the schedule the programs execute (their action lists,
// simulated with F = 1, B = 2, or B = W = 1 when split) against the
// literature: (p-1)/m for GPipe and 1F1B, (1/v)(p-1)/m interleaved, ZB-H1's
// (p-1)(B + max(F-W, 0))/(m(F+B+W)); every stage idles equally long.
TEST(Pipeline, EmittedBubbleEqualsAnalytic) {
  struct Case {
    PipelineConfig config;
    int64_t m;
    double expected;
  };
  std::vector<Case> cases = {
      {{1, 1, 2, "gpipe"}, 4, 1.0 / 4},
      {{1, 1, 4, "gpipe"}, 8, 3.0 / 8},
      {{1, 1, 2, "1f1b"}, 8, 1.0 / 8},
      {{1, 1, 4, "1f1b"}, 4, 3.0 / 4},
      {{1, 1, 4, "1f1b"}, 12, 3.0 / 12},
      {{1, 1, 2, "interleaved", 2}, 4, 1.0 / 8},
      {{1, 1, 2, "interleaved", 2}, 6, 1.0 / 12},
      {{1, 1, 4, "zb-h1"}, 8, 3.0 * 1 / (8 * 3)},
      {{2, 1, 2, "1f1b"}, 4, 1.0 / 4},
  };
  for (const Case &k : cases) {
    plan::PipelineReport r = reportOf(k.config, k.m);
    std::string what = k.config.name() + " m=" + std::to_string(k.m);
    EXPECT_EQ(r.microbatches, k.m) << what;
    EXPECT_NEAR(r.analyticBubble, k.expected, 1e-12) << what;
    EXPECT_NEAR(r.simulated.bubbleOverIdeal, k.expected, 1e-9) << what;
    if (k.config.schedule != "zb-h1") // ZB-H1's stages idle unequally
      for (const auto &st : r.simulated.perStage)
        EXPECT_NEAR(st.bubbleOverIdeal, k.expected, 1e-9) << what;
    // Every (microbatch, chunk) runs F and B (and W) exactly once per stage.
    for (const auto &actions : r.emitted.perStage)
      EXPECT_EQ(int64_t(actions.size()), k.m * k.config.virtualStages * (k.config.schedule == "zb-h1" ? 3 : 2)) << what;
  }
}

// Peak microbatches in flight per stage, read from the emitted programs:
// 1F1B holds min(p - s, m) on stage s, GPipe all m.
TEST(Pipeline, EmittedPeakInFlight) {
  plan::PipelineReport oneF = reportOf({1, 1, 4, "1f1b"}, 8);
  EXPECT_EQ(oneF.peakInFlight, (std::vector<int64_t>{4, 3, 2, 1}));
  plan::PipelineReport gpipe = reportOf({1, 1, 4, "gpipe"}, 8);
  EXPECT_EQ(gpipe.peakInFlight, (std::vector<int64_t>{8, 8, 8, 8}));
}
