//===- RecordedStepsTest.cpp - a replayed step is the op-by-op step --------===//
//
// Recorded steps (runtime Interpreter.h, CommandList.h; `--cuda-graphs`, on
// by default): from the third step on, the interpreter replays the backend
// calls it recorded at the second, and the CUDA backend launches them as one
// CUDA graph. Every golden test runs recorded steps already, but against a
// single-device run that records too; this test holds them to the op-by-op
// run of the same plan, bit for bit, over 6 steps whose learning rate
// differs at every step (linear warmup, then cosine decay) and whose batches
// differ: a replay that kept anything of the recorded step (its learning
// rate, its step count, its tokens) would train differently. On the shipped
// meshes and schedules: dp with buckets, tp with sequence parallelism and
// asynchronous communication overlap, pp with 1F1B, interleaved and ZB-H1,
// ZeRO 1/2/3 with FSDP prefetch, f32 and bf16, AdamW and SGD with momentum
// (whose first step differs from the others).
//
//===----------------------------------------------------------------------===//
#include "GoldenUtil.h"

#include <functional>

using namespace llcdist;

namespace {

struct Case {
  const char *tag;
  const char *model;
  const char *optimizer;
  const char *dtype;
  std::function<void(TrainingPipelineOptions &)> mesh;
  int64_t microBatch;
};

const Case kCases[] = {
    {"gpt2-f32", "tiny-gpt2", "adamw", "f32", [](TrainingPipelineOptions &) {}, 4},
    {"llama-bf16-sgd", "tiny-llama", "sgd", "bf16", [](TrainingPipelineOptions &) {}, 8},
    {"llama-f32-dp2-buckets", "tiny-llama", "adamw", "f32",
     [](TrainingPipelineOptions &o) {
       o.mesh.dp = 2;
       o.gradBucketSize = 2000;
     },
     4},
    {"gpt2-bf16-tp2-sp-overlap", "tiny-gpt2", "adamw", "bf16",
     [](TrainingPipelineOptions &o) {
       o.mesh.tp = 2;
       o.sequenceParallel = true;
       o.tpCommOverlap = true;
     },
     8},
    {"gpt2-f32-pp2-1f1b", "tiny-gpt2", "sgd", "f32", [](TrainingPipelineOptions &o) { o.mesh.pp = 2; }, 2},
    {"llama-bf16-pp2-interleaved", "tiny-llama", "adamw", "bf16",
     [](TrainingPipelineOptions &o) {
       o.mesh.pp = 2;
       o.pipelineSchedule = "interleaved";
       o.virtualStages = 2;
     },
     2},
    {"gpt2-f32-pp2-zbh1", "tiny-gpt2", "adamw", "f32",
     [](TrainingPipelineOptions &o) {
       o.mesh.pp = 2;
       o.pipelineSchedule = "zb-h1";
     },
     4},
    {"llama-bf16-dp2-zero1", "tiny-llama", "adamw", "bf16",
     [](TrainingPipelineOptions &o) {
       o.mesh.dp = 2;
       o.zero = 1;
     },
     4},
    {"llama-f32-dp2-zero3-prefetch", "tiny-llama", "adamw", "f32",
     [](TrainingPipelineOptions &o) {
       o.mesh.dp = 2;
       o.zero = 3;
       o.fsdpPrefetch = 1;
     },
     4},
    {"llama-f32-3d", "tiny-llama", "adamw", "f32",
     [](TrainingPipelineOptions &o) {
       o.mesh.dp = 2;
       o.mesh.tp = 2;
       o.mesh.pp = 2;
       o.sequenceParallel = true;
     },
     2},
};

constexpr int64_t kSteps = 6;

struct Trial {
  test::Trained trained;
  std::string execution;
};

Trial train(const std::string &dir, bool record) {
  rt::RunOptions o = test::goldenRunOptions(dir, kSteps);
  o.recordSteps = record;
  o.saveParams = dir + (record ? "/recorded.safetensors" : "/op-by-op.safetensors");
  rt::RunResult result;
  Trial r;
  r.trained = test::trainWith(o, record ? "recorded" : "op by op", /*expectOk=*/true, &result);
  r.execution = result.stepExecution;
  return r;
}

TEST(RecordedStepsTest, ReplayedStepsTrainToTheOpByOpBits) {
  for (const Case &c : kCases) {
    SCOPED_TRACE(c.tag);
    TrainingPipelineOptions opt = test::goldenOptions(c.optimizer);
    opt.lrSchedule = "cosine";
    opt.warmup = 2;
    opt.totalSteps = kSteps;
    opt.minLr = opt.lr / 10;
    c.mesh(opt);
    TrainingShape shape;
    shape.seqLen = 16;
    shape.microBatch = c.microBatch;
    shape.globalBatch = 8;
    shape.dtype = c.dtype;
    const std::string dir = test::compilePlan(c.model, shape, opt, std::string("recorded-") + c.tag);
    ASSERT_FALSE(dir.empty()) << "compilation failed";
    const Trial off = train(dir, false), on = train(dir, true);
    EXPECT_EQ(off.execution, "op by op");
    EXPECT_EQ(on.execution, "replayed"); // the CPU backend has no device graphs
    ASSERT_EQ(off.trained.losses.size(), size_t(kSteps));
    ASSERT_EQ(on.trained.losses.size(), size_t(kSteps));
    test::expectSameBits(off.trained, on.trained);
    // Distinct losses: the steps trained on different batches with different rates.
    EXPECT_NE(on.trained.losses[2], on.trained.losses[3]);
    std::filesystem::remove_all(dir);
  }
}

} // namespace
