//===- Bf16ReduceTest.cpp - the golden rule for bf16 gradient reductions --===//
//
// A bf16 (mixed precision) plan reduces its bf16 gradients in bf16 as NCCL
// does (each partial sum rounded to bf16; --grad-reduce-dtype bf16, the
// default) or in f32, rounded once (--grad-reduce-dtype f32, Megatron's
// accumulate-allreduce-grads-in-fp32). Both reproduce the single-device bf16
// run on dp=2, dp=2 × tp=2 and dp=4 within the bf16 tolerance below. With
// two members the two choices are the same computation (one sum, rounded
// once: bit-identical runs); with four, bf16 rounds each of the three partial
// sums and the runs differ (the dtype reaches the runtime).
//
// The tolerance. The single device rounds each gradient once (the f32 GEMM
// sum over the 8 sequences, rounded to bf16); dp=2 rounds each rank's
// 4-sequence gradient, then the sum (f32: once more; bf16: once more per
// partial sum), so a gradient element moves by a few bf16 half-ulps
// (2^-8 relative each), tp's bf16 activation all-reduces add their own
// roundings, and 3 SGD steps (lr 0.05, momentum 0.9) turn that into
// parameter differences of lr · |g| · O(2^-7). Measured (tiny GPT-2 and tiny
// Llama, both choices, dp=2, dp=2 × tp=2, dp=4): losses within 4e-5
// relative, parameters within 1.5e-4 absolute; tiny Gemma, Phi and Mistral:
// losses within 5.4e-5, parameters within 2.3e-4 (Gemma at dp=2 × tp=2); tiny
// StarCoder2: losses within 8.4e-5, parameters within 1.4e-4. The bound: losses within 2e-4
// relative, every f32 master within 5e-4 absolute. A wrong reduction (a
// missing or doubled gradient) moves parameters by lr · |g| ≈ 1e-2.
//
//===----------------------------------------------------------------------===//
#include "GoldenUtil.h"

using namespace llcdist;

namespace {
using test::deviation;
using test::Deviation;
using test::Trained;

Trained trainBf16(const std::string &model, int64_t dp, int64_t tp, const std::string &reduceDtype) {
  TrainingPipelineOptions opt = test::goldenOptions("sgd");
  opt.mesh.dp = dp;
  opt.mesh.tp = tp;
  opt.gradReduceDtype = reduceDtype;
  std::string tag = "bf16-reduce-" + reduceDtype + "-dp" + std::to_string(dp) + "-tp" + std::to_string(tp);
  return test::trainPlan(model, opt, 8 / dp, tag, "bf16");
}

void golden(const std::string &model) {
  const Trained ref = trainBf16(model, 1, 1, "bf16");
  ASSERT_FALSE(ref.losses.empty());
  EXPECT_LT(ref.losses.back(), ref.losses.front()) << "the reference learns";
  for (auto [dp, tp] : {std::pair<int64_t, int64_t>{2, 1}, {2, 2}, {4, 1}}) {
    const std::string name = model + " bf16 dp=" + std::to_string(dp) + " tp=" + std::to_string(tp);
    const Trained inBf16 = trainBf16(model, dp, tp, "bf16");
    const Trained inF32 = trainBf16(model, dp, tp, "f32");
    for (const auto &[what, got] : {std::pair<const char *, const Trained &>{"bf16", inBf16}, {"f32", inF32}}) {
      const Deviation d = deviation(ref, got);
      std::printf("%s, gradients reduced in %s: losses within %.3g relative, parameters within %.3g\n",
                  name.c_str(), what, d.lossRel, d.paramAbs);
      EXPECT_LE(d.lossRel, 2e-4) << name << ", gradients reduced in " << what;
      EXPECT_LE(d.paramAbs, 5e-4) << name << ", gradients reduced in " << what;
    }
    if (dp == 2)
      EXPECT_TRUE(deviation(inBf16, inF32).identical)
          << name << ": one bf16 sum of two members rounds once either way";
    else
      EXPECT_FALSE(deviation(inBf16, inF32).identical)
          << name << ": reducing in bf16 and in f32 gave identical bits (the dtype never reached the runtime)";
  }
}
} // namespace

TEST(Bf16Reduce, GoldenRuleTinyGPT2) { golden("tiny-gpt2"); }
TEST(Bf16Reduce, GoldenRuleTinyLlama) { golden("tiny-llama"); }
// The families in bf16 (their kernels' bf16 paths: the (1 + w) norm, the
// scaled embedding, GeGLU, partial rotary, the sliding window).
TEST(Bf16Reduce, GoldenRuleTinyGemma) { golden("tiny-gemma"); }
TEST(Bf16Reduce, GoldenRuleTinyPhi) { golden("tiny-phi"); }
TEST(Bf16Reduce, GoldenRuleTinyMistral) { golden("tiny-mistral"); }
TEST(Bf16Reduce, GoldenRuleTinyStarcoder2) { golden("tiny-starcoder2"); }
TEST(Bf16Reduce, GoldenRuleTinyStableLm) { golden("tiny-stablelm"); }
