//===- FusionTest.cpp - every fusion pass keeps the bits ------------------===//
//
// The fusion passes are on by default, so every other golden test runs fused
// plans against the single-device run. This test holds each pass to more:
// a plan compiled with every fusion and one compiled with that one fusion off
// give the same losses and parameters bit for bit (the fused kernels round
// each intermediate as the unfused ones stored it), on one rank and on the
// shipped meshes and schedules (dp, tp with sequence parallelism and its
// comm overlap, pp with 1F1B, interleaved and ZB-H1, ZeRO 1/2/3, gradient
// buckets, recomputation), f32 and bf16, AdamW and SGD with momentum. It
// also checks that the pass fused something there, and fused nothing with
// its flag off.
//
//===----------------------------------------------------------------------===//
#include "GoldenUtil.h"

#include "llcdist/runtime/Plan.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <iostream>
#include <set>

using namespace llcdist;
using K = rt::schema::OpKind;

namespace {

struct Case {
  const char *tag;
  const char *model;
  const char *optimizer;
  const char *dtype;
  std::function<void(TrainingPipelineOptions &)> mesh;
  int64_t microBatch;
  /// A fusion with nothing to fuse here (else every fusion must fuse but
  /// those whose `applies` says no).
  const char *fusesNothing = "";
};

/// A fusion pass: its option, which ops only it emits, and on which cases it
/// has something to fuse.
struct Fusion {
  const char *name;
  bool TrainingPipelineOptions::*flag;
  std::function<bool(const rt::Op &)> isFused;
  std::function<bool(const Case &)> applies = [](const Case &) { return true; };
  /// A later fusion that consumes this one's ops, off in both runs.
  bool TrainingPipelineOptions::*alsoOff = nullptr;
};

std::function<bool(const rt::Op &)> ofKinds(std::set<K> kinds) {
  return [kinds](const rt::Op &op) { return kinds.count(op.kind) > 0; };
}

const Fusion kFusions[] = {
    {"fuse-optimizer", &TrainingPipelineOptions::fuseOptimizer, ofKinds({K::kAdamWMulti, K::kSgdMulti, K::kCastMulti})},
    {"fuse-norm", &TrainingPipelineOptions::fuseNorm,
     ofKinds({K::kAddLayerNormFwd, K::kAddRmsNormFwd, K::kLayerNormBwd, K::kRmsNormBwd})},
    // Llama's linear layers have no bias and its MLP no GELU.
    {"fuse-epilogues", &TrainingPipelineOptions::fuseEpilogues,
     [](const rt::Op &op) {
       return (op.kind == K::kLinearBwdWeight && op.arg("db") >= 0) ||
              (op.kind == K::kLinearFwd && op.arg("gelu") >= 0) ||
              (op.kind == K::kLinearBwdInput && op.arg("gelu_x") >= 0);
     },
     [](const Case &c) { return std::string(c.model) == "tiny-gpt2"; }},
    // Changes no op count: the gradient's buffer goes. The classifier fusion
    // would take its cross_entropy_bwd.
    {"ce-grad-in-place", &TrainingPipelineOptions::ceGradInPlace,
     [](const rt::Op &op) { return op.kind == K::kCrossEntropyBwd && op.arg("dlogits") == op.arg("logits"); },
     [](const Case &) { return true; }, &TrainingPipelineOptions::fuseClassifier},
    // Llama projects q, k and v by three GEMMs: there is no split to drop.
    {"packed-qkv", &TrainingPipelineOptions::packedQkv,
     [](const rt::Op &op) {
       return (op.kind == K::kAttentionFwd || op.kind == K::kAttentionBwd) &&
              (op.arg("qkv") >= 0 || op.arg("dqkv") >= 0);
     },
     [](const Case &c) { return std::string(c.model) == "tiny-gpt2"; }},
    // Llama has no position embedding; under tp the token embedding is
    // vocabulary-parallel (an all-reduce between the two), under SP the
    // positions are sharded.
    {"fuse-embedding", &TrainingPipelineOptions::fuseEmbedding,
     [](const rt::Op &op) {
       return (op.kind == K::kEmbeddingFwd && op.arg("wpe") >= 0) ||
              (op.kind == K::kEmbeddingBwdWeight && op.arg("dwpe") >= 0);
     },
     [](const Case &c) { return std::string(c.model) == "tiny-gpt2" && !std::strstr(c.tag, "tp2"); }},
    // Under tp the loss is vocabulary-parallel (its statistics' all-reduces
    // between the kernels); ZB-H1 runs the weight gradient in its W pass.
    // The cases' microbatches are at most 128 tokens: one chunk, the same
    // GEMMs (ClassifierChunks below trains several chunks).
    {"fuse-classifier", &TrainingPipelineOptions::fuseClassifier, ofKinds({K::kClassifier}),
     [](const Case &c) {
       return !std::strstr(c.tag, "tp2") && !std::strstr(c.tag, "3d") && !std::strstr(c.tag, "zbh1");
     }},
};

/// Ops per step over every program of the plan in `dir`, and how many are
/// fused ones.
std::pair<int64_t, int64_t> opCounts(const std::string &dir, const std::function<bool(const rt::Op &)> &isFused) {
  rt::StatusOr<rt::Plan> plan = rt::loadPlan(dir);
  EXPECT_TRUE(plan.isOk()) << plan.status().toString();
  if (!plan.isOk())
    return {0, 0};
  int64_t ops = 0, fused = 0;
  for (const rt::Program &p : plan->programs)
    for (const rt::Action &a : p.actions)
      for (const rt::Op &op : p.subroutines[size_t(a.subroutine)].ops) {
        ++ops;
        fused += isFused(op);
      }
  return {ops, fused};
}

struct Trial {
  test::Trained trained;
  int64_t ops = 0, fused = 0;
};

Trial compileAndTrain(const Case &c, const Fusion &f, bool on, int64_t classifierChunkRows = 0) {
  TrainingPipelineOptions opt = test::goldenOptions(c.optimizer);
  c.mesh(opt);
  opt.*f.flag = on;
  if (f.alsoOff)
    opt.*f.alsoOff = false;
  opt.classifierChunkRows = classifierChunkRows;
  TrainingShape shape;
  shape.seqLen = 16;
  shape.microBatch = c.microBatch;
  shape.globalBatch = 8;
  shape.dtype = c.dtype;
  const std::string tag = std::string("fusion-") + c.tag + "-" + f.name + (on ? "-on" : "-off");
  const std::string dir = test::compilePlan(c.model, shape, opt, tag);
  Trial r;
  EXPECT_FALSE(dir.empty()) << tag << ": compilation failed";
  if (dir.empty())
    return r;
  std::tie(r.ops, r.fused) = opCounts(dir, f.isFused);
  r.trained = test::runGoldenSteps(dir, tag);
  std::filesystem::remove_all(dir);
  return r;
}

const Case kCases[] = {
    {"gpt2-f32", "tiny-gpt2", "adamw", "f32", [](TrainingPipelineOptions &) {}, 8},
    {"llama-bf16", "tiny-llama", "adamw", "bf16", [](TrainingPipelineOptions &) {}, 8},
    {"llama-sgd-dp2-buckets", "tiny-llama", "sgd", "f32",
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
    {"llama-f32-tp2", "tiny-llama", "adamw", "f32", [](TrainingPipelineOptions &o) { o.mesh.tp = 2; }, 8},
    {"gpt2-bf16-pp2-1f1b", "tiny-gpt2", "adamw", "bf16", [](TrainingPipelineOptions &o) { o.mesh.pp = 2; }, 4},
    {"llama-f32-pp2-interleaved", "tiny-llama", "adamw", "f32",
     [](TrainingPipelineOptions &o) {
       o.mesh.pp = 2;
       o.pipelineSchedule = "interleaved";
       o.virtualStages = 2;
     },
     2},
    // ZB-H1 reads the logits' gradient in the W pass, a subroutine of its
    // own: llcdist-plan-ce-grad-in-place keeps the buffers apart.
    {"gpt2-f32-pp2-zbh1", "tiny-gpt2", "sgd", "f32",
     [](TrainingPipelineOptions &o) {
       o.mesh.pp = 2;
       o.pipelineSchedule = "zb-h1";
     },
     4, "ce-grad-in-place"},
    {"llama-bf16-dp2-zero1", "tiny-llama", "adamw", "bf16",
     [](TrainingPipelineOptions &o) {
       o.mesh.dp = 2;
       o.zero = 1;
     },
     4},
    // f32 (no casts) under ZeRO: each update sits between its block's slice
    // and gather, so no two updates are consecutive.
    {"gpt2-f32-dp2-zero2", "tiny-gpt2", "adamw", "f32",
     [](TrainingPipelineOptions &o) {
       o.mesh.dp = 2;
       o.zero = 2;
     },
     2, "fuse-optimizer"},
    {"llama-bf16-dp2-zero2-buckets", "tiny-llama", "adamw", "bf16",
     [](TrainingPipelineOptions &o) {
       o.mesh.dp = 2;
       o.zero = 2;
       o.gradBucketSize = 1000;
     },
     2},
    {"llama-bf16-dp2-zero3", "tiny-llama", "adamw", "bf16",
     [](TrainingPipelineOptions &o) {
       o.mesh.dp = 2;
       o.zero = 3;
       o.fsdpPrefetch = 1;
     },
     4},
    {"gpt2-bf16-recompute-full", "tiny-gpt2", "adamw", "bf16", [](TrainingPipelineOptions &o) { o.recompute = "full"; },
     4},
    {"llama-f32-3d", "tiny-llama", "adamw", "f32",
     [](TrainingPipelineOptions &o) {
       o.mesh.dp = 2;
       o.mesh.tp = 2;
       o.mesh.pp = 2;
       o.sequenceParallel = true;
       o.recompute = "selective";
     },
     2},
};

class FusionTest : public ::testing::TestWithParam<Fusion> {};

TEST_P(FusionTest, OnAndOffTrainToTheSameBits) {
  const Fusion &f = GetParam();
  for (const Case &c : kCases) {
    SCOPED_TRACE(std::string(c.tag) + ", " + f.name);
    const Trial off = compileAndTrain(c, f, false), on = compileAndTrain(c, f, true);
    EXPECT_EQ(off.fused, 0) << "fused kernels with the fusion off";
    if (std::string(c.fusesNothing) == f.name || !f.applies(c)) {
      EXPECT_EQ(on.ops, off.ops);
    } else {
      EXPECT_GT(on.fused, 0) << "the pass fused nothing";
      if (std::string(f.name) != "ce-grad-in-place")
        EXPECT_LT(on.ops, off.ops) << "the fusion removed no op";
    }
    test::expectSameBits(off.trained, on.trained);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryFusion, FusionTest, ::testing::ValuesIn(kFusions), [](const auto &info) {
  std::string n = info.param.name;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
});

} // namespace

// The classifier over several chunks (24 rows of a 64- or 128-row
// microbatch, the last chunk short): the loss is the same rows' losses
// summed in the same order and dx the same rows of the same products, but dw
// is summed chunk by chunk (in f32, rounded once), so the runs agree within
// rounding, not bit for bit (SGD with momentum, whose update is linear in
// the gradient): f32 within 1e-6 relative, bf16 within 1e-3.
TEST(FusionTest, ClassifierChunksTrainLikeTheUnfusedOps) {
  const Fusion &f = *std::find_if(std::begin(kFusions), std::end(kFusions),
                                  [](const Fusion &x) { return std::string(x.name) == "fuse-classifier"; });
  for (Case c : kCases) {
    const std::string tag = c.tag;
    if (tag != "gpt2-f32" && tag != "llama-bf16" && tag != "gpt2-bf16-pp2-1f1b" && tag != "llama-bf16-dp2-zero1")
      continue;
    c.optimizer = "sgd"; // AdamW's m / sqrt(v) turns a rounding of a near-zero gradient into a whole step
    SCOPED_TRACE(tag);
    const Trial off = compileAndTrain(c, f, false), on = compileAndTrain(c, f, true, /*classifierChunkRows=*/24);
    EXPECT_GT(on.fused, 0);
    const double rtol = std::string(c.dtype) == "f32" ? 1e-6 : 1e-3;
    ASSERT_EQ(off.trained.losses.size(), on.trained.losses.size());
    for (size_t i = 0; i < off.trained.losses.size(); ++i)
      EXPECT_NEAR(on.trained.losses[i], off.trained.losses[i], rtol * std::abs(off.trained.losses[i])) << "step " << i;
    double worst = 0;
    for (const auto &[name, a] : off.trained.params) {
      const auto &b = on.trained.params.at(name);
      ASSERT_EQ(a.size(), b.size()) << name;
      for (size_t i = 0; i < a.size(); ++i)
        worst = std::max(worst, std::abs(double(a[i]) - double(b[i])) / (std::abs(double(a[i])) + 1e-2));
    }
    EXPECT_LE(worst, rtol) << "the largest parameter difference, relative";
    RecordProperty(tag + "_worst_param_rel", std::to_string(worst));
    std::cout << tag << ": the largest parameter difference " << worst << " (relative)\n";
  }
}
