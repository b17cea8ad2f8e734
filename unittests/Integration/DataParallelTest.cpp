//===- DataParallelTest.cpp - the golden rule for data parallelism --------===//
//
// Every parallel plan reproduces the single-device plan: for tiny GPT-2 and
// tiny Llama, dp ∈ {2, 4} with the same global batch (with and without
// gradient accumulation) gives the single-device losses and parameters after
// 3 SGD and 3 AdamW steps, within 1e-5 relative (fp32; the sums run in a
// different order).
//
//===----------------------------------------------------------------------===//
#include "PlanTestUtil.h"

#include "llcdist/runtime/Safetensors.h"
#include "llcdist/runtime/Train.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>

using namespace llcdist;
namespace rt = llcdist::rt;

namespace {
struct Trained {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> params;
};

Trained train(const std::string &model, int64_t dp, int64_t microBatch,
              const std::string &optimizer) {
  TrainingShape shape;
  shape.seqLen = 16;
  shape.microBatch = microBatch;
  shape.globalBatch = 8;
  TrainingPipelineOptions opt;
  opt.mesh.dp = dp;
  opt.optimizer = optimizer;
  opt.lr = optimizer == "sgd" ? 0.05 : 2e-3;
  opt.momentum = optimizer == "sgd" ? 0.9 : 0.0;
  opt.gradClip = 1.0;
  std::string tag = "dp" + std::to_string(dp) + "-mb" + std::to_string(microBatch) + optimizer;
  std::string dir = test::compilePlan(model, shape, opt, tag);
  EXPECT_FALSE(dir.empty());
  rt::RunOptions o;
  o.planDir = dir;
  o.steps = 3;
  o.data = std::string(LLCDIST_SOURCE_DIR) + "/data/corpus_train.bin";
  o.seed = 11;
  o.quiet = true;
  o.saveParams = dir + "/params.safetensors";
  rt::RunResult result;
  std::ostringstream progress;
  rt::Status st = rt::runTraining(o, progress, &result);
  EXPECT_TRUE(st.isOk()) << st.toString();
  Trained t;
  for (const auto &s : result.steps)
    t.losses.push_back(s.loss);
  auto reader = rt::SafetensorsReader::open(o.saveParams);
  EXPECT_TRUE(reader.isOk()) << reader.status().toString();
  if (reader.isOk())
    for (const auto &info : reader->tensors()) {
      auto v = reader->readF32(info.name);
      EXPECT_TRUE(v.isOk());
      if (v.isOk())
        t.params[info.name] = v.value();
    }
  std::filesystem::remove_all(dir);
  return t;
}

/// Losses within 1e-5 relative; every parameter element within
/// 1e-5·max(|a|, 1e-3) + `updateTol`.
void expectSame(const Trained &ref, const Trained &got, const std::string &what,
                double updateTol) {
  ASSERT_EQ(ref.losses.size(), got.losses.size()) << what;
  for (size_t i = 0; i < ref.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-5 * std::fabs(ref.losses[i]))
        << what << ": loss of step " << i;
  ASSERT_EQ(ref.params.size(), got.params.size()) << what;
  for (const auto &[name, a] : ref.params) {
    const auto &b = got.params.at(name);
    ASSERT_EQ(a.size(), b.size()) << name;
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      double strict = 1e-5 * std::max(std::fabs(double(a[i])), 1e-3);
      double ratio = std::fabs(double(a[i]) - b[i]) / (strict + updateTol);
      if (ratio > worst)
        worst = ratio, at = i;
    }
    EXPECT_LE(worst, 1.0) << what << ": " << name << "[" << at << "] " << a[at]
                          << " vs " << b[at];
  }
}

// AdamW divides by sqrt(v): wherever a gradient element partly cancels, the
// rounding of its sum (which dp reorders) becomes a relative difference of
// m/sqrt(v), and so of the update, up to a whole step lr in the limit of
// complete cancellation. SGD, linear in the gradient, is held to 1e-5
// relative everywhere (and, since Adam is blind to a gradient's scale, SGD is
// the test that catches a wrong reduction factor). Under AdamW the losses are
// held to 1e-5 relative and each parameter element to 1e-5 relative plus 5%
// of lr (seen: up to 1.8% of lr; about 2% of GPT-2's elements exceed the
// strict bound); a wrong partition (a missing reduction, a wrong data shard)
// moves elements by O(lr).
void golden(const std::string &model, const std::string &optimizer) {
  double updateTol = optimizer == "adamw" ? 0.05 * 2e-3 : 0.0;
  Trained ref = train(model, 1, 8, optimizer); // one device, one microbatch
  EXPECT_LT(ref.losses.back(), ref.losses.front()) << "the reference learns";
  for (int64_t dp : {2, 4}) {
    int64_t full = 8 / dp;
    std::string name = model + " " + optimizer + " dp=" + std::to_string(dp);
    expectSame(ref, train(model, dp, full, optimizer), name, updateTol);
    expectSame(ref, train(model, dp, full / 2, optimizer),
               name + " with 2 microbatches", updateTol);
  }
}
} // namespace

TEST(DataParallel, TinyGPT2SGD) { golden("tiny-gpt2", "sgd"); }
TEST(DataParallel, TinyGPT2AdamW) { golden("tiny-gpt2", "adamw"); }
TEST(DataParallel, TinyLlamaSGD) { golden("tiny-llama", "sgd"); }
TEST(DataParallel, TinyLlamaAdamW) { golden("tiny-llama", "adamw"); }
