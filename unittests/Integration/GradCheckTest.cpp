//===- GradCheckTest.cpp - the compiled training step's gradients ---------===//
//
// End to end: compile a shipped tiny model (frontend, autodiff, lowering,
// emission), load the plan in the runtime, and check every parameter's
// gradient — as the compiled backward computes it, accumulated over two
// microbatches — against central finite differences of the compiled
// step's loss. This proves the autodiff wiring (fan-in of the residual
// stream, the tied embedding's two contributions, GQA's shared kv heads,
// saved activations across layer bodies, loss scaling over microbatches),
// independently of the kernels' own finite-difference tests.
//
//===----------------------------------------------------------------------===//
#include "PlanTestUtil.h"

#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Plan.h"
#include "llcdist/runtime/Rng.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

using namespace llcdist;
namespace rt = llcdist::rt;

namespace {
struct Harness {
  rt::Plan plan;
  std::unique_ptr<rt::Backend> backend;
  std::unique_ptr<rt::Interpreter> interp;
  int64_t lossId = -1;
  std::vector<int32_t> ids, targets; // [microbatches][B·S]
  int64_t B = 0, S = 0;

  size_t sub(const std::string &name) const {
    const auto &subs = interp->program().subroutines;
    for (size_t i = 0; i < subs.size(); ++i)
      if (subs[i].name == name)
        return i;
    ADD_FAILURE() << "no subroutine " << name;
    return 0;
  }

  rt::MicrobatchSource source() {
    return [this](int64_t, int64_t mb, int32_t *i, int32_t *t, int64_t b, int64_t s) {
      std::copy_n(ids.begin() + mb * b * s, b * s, i);
      std::copy_n(targets.begin() + mb * b * s, b * s, t);
      return rt::Status::ok();
    };
  }

  /// step_begin, then forward and backward of every microbatch: the loss.
  /// The backward too, since the LM head and its loss are one op there
  /// (llcdist-plan-fuse-classifier): the step's loss is written in it.
  double run() {
    auto src = source();
    EXPECT_TRUE(interp->runSubroutine(sub("step_begin"), 0, -1, 0.0, src).isOk());
    for (int64_t mb = 0; mb < plan.manifest.microbatches; ++mb) {
      auto st = interp->runSubroutine(sub("forward"), 0, mb, 0.0, src);
      EXPECT_TRUE(st.isOk()) << st.toString();
      EXPECT_TRUE(interp->runSubroutine(sub("backward"), 0, mb, 0.0, src).isOk());
    }
    return double(interp->readF32(lossId).value()[0]);
  }
};

void checkGradients(const std::string &model, uint64_t seed) {
  TrainingShape shape;
  shape.seqLen = 8;
  shape.microBatch = 2;
  shape.globalBatch = 4; // two microbatches: gradient accumulation
  TrainingPipelineOptions train;
  train.optimizer = "sgd";
  std::string dir = test::compilePlan(model, shape, train, "gradcheck");
  ASSERT_FALSE(dir.empty()) << "compile failed";

  Harness h;
  auto plan = rt::loadPlan(dir);
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  h.plan = std::move(plan).value();
  h.backend = rt::makeCpuBackend();
  auto interp = rt::Interpreter::create(h.plan, 0, *h.backend);
  ASSERT_TRUE(interp.isOk()) << interp.status().toString();
  h.interp = std::move(interp).value();
  for (const auto &b : h.interp->program().buffers)
    if (b.name == "loss")
      h.lossId = b.id;
  ASSERT_GE(h.lossId, 0);

  // A generic point: every parameter (norm weights and biases included)
  // random, so no gradient term vanishes by symmetry.
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const auto &p : h.plan.manifest.params) {
    std::vector<float> v(p.numel());
    float base = p.init.kind == rt::ParamInit::Kind::kOnes ? 1.0f : 0.0f;
    float scale = p.shape.size() == 1 ? 0.1f : 0.15f;
    for (float &x : v)
      x = base + scale * normal(rng);
    ASSERT_TRUE(h.interp->writeBuffer(p.buffer, v.data()).isOk());
  }
  int64_t vocab = h.plan.manifest.vocabSize;
  std::uniform_int_distribution<int32_t> tok(0, int32_t(vocab - 1));
  int64_t n = h.plan.manifest.microbatches * shape.microBatch * shape.seqLen;
  for (int64_t i = 0; i < n; ++i) {
    h.ids.push_back(tok(rng));
    h.targets.push_back(tok(rng));
  }

  double loss = h.run();
  EXPECT_TRUE(std::isfinite(loss));
  std::vector<std::vector<float>> grads;
  for (const auto &p : h.plan.manifest.params)
    grads.push_back(h.interp->readF32(p.grad).value());

  // Central differences on a few elements of every parameter: 3 each, more
  // where a model has few tensors (MPT's 26), so that over 100 are checked.
  const float eps = 1e-2f;
  const int64_t tensors = int64_t(h.plan.manifest.params.size());
  const int perTensor = int(std::max<int64_t>(3, 101 / tensors + 1));
  int checked = 0;
  for (size_t pi = 0; pi < h.plan.manifest.params.size(); ++pi) {
    const auto &p = h.plan.manifest.params[pi];
    std::vector<float> v = h.interp->readF32(p.buffer).value();
    std::uniform_int_distribution<int64_t> pick(0, p.numel() - 1);
    for (int k = 0; k < perTensor; ++k) {
      int64_t e = pick(rng);
      float orig = v[e];
      v[e] = orig + eps;
      ASSERT_TRUE(h.interp->writeBuffer(p.buffer, v.data()).isOk());
      double up = h.run();
      v[e] = orig - eps;
      ASSERT_TRUE(h.interp->writeBuffer(p.buffer, v.data()).isOk());
      double down = h.run();
      v[e] = orig;
      ASSERT_TRUE(h.interp->writeBuffer(p.buffer, v.data()).isOk());
      double fd = (up - down) / (2.0 * eps);
      double g = grads[pi][e];
      EXPECT_NEAR(g, fd, 2e-4 + 2e-2 * std::fabs(fd))
          << model << ": d loss / d " << p.name << "[" << e << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
  std::filesystem::remove_all(dir);
}
} // namespace

TEST(GradCheck, TinyGPT2EveryParameter) { checkGradients("tiny-gpt2", 1); }
TEST(GradCheck, TinyLlamaEveryParameter) { checkGradients("tiny-llama", 2); }
// GPT-NeoX: the grouped QKV split's gradient (a grouped concat), the exact
// GELU's, two LayerNorms of the same input under the parallel residual.
TEST(GradCheck, TinyGptNeoXEveryParameter) { checkGradients("tiny-gpt-neox", 3); }
// Falcon: the grouped split with unequal pieces (2 q heads, 1 k, 1 v per
// group), attention and MLP on their own LayerNorms.
TEST(GradCheck, TinyFalconEveryParameter) { checkGradients("tiny-falcon", 4); }
// BLOOM: ALiBi's bias inside the attention's softmax, the LayerNorm on the
// embeddings.
TEST(GradCheck, TinyBloomEveryParameter) { checkGradients("tiny-bloom", 5); }
// GPTBigCode: the grouped split of one group (all q heads, one k, one v),
// MQA's k and v gradients summed over every query head, learned positions.
TEST(GradCheck, TinyGptBigCodeEveryParameter) { checkGradients("tiny-gpt-bigcode", 6); }
// MPT: LayerNorms of a weight alone (dgamma, no dbeta), Wqkv's plain split,
// ALiBi, the exact GELU, no biases.
TEST(GradCheck, TinyMptEveryParameter) { checkGradients("tiny-mpt", 7); }
// GPT-J: rotate_every_two's transpose in the backward, the head's bias.
TEST(GradCheck, TinyGptJEveryParameter) { checkGradients("tiny-gpt-j", 8); }
// Cohere: the parallel layer on a LayerNorm of a weight alone, the logits'
// scale in the backward (xf.scale is its own gradient).
TEST(GradCheck, TinyCohereEveryParameter) { checkGradients("tiny-cohere", 10); }
// GPT-Neo: q's scale by sqrt(head_dim) in the backward, the local layers'
// window (4 keys of 8), two layer bodies.
TEST(GradCheck, TinyGptNeoEveryParameter) { checkGradients("tiny-gpt-neo", 11); }
// BioGPT: the token embeddings' scale (sqrt(64) = 8) in the backward beside
// the positions' table read from row 2, the erf GELU.
TEST(GradCheck, TinyBioGptEveryParameter) { checkGradients("tiny-biogpt", 12); }
// CodeGen: the grouped split of qkv_proj (pieces taken q, v, k) in the
// backward, the side-by-side layer.
TEST(GradCheck, TinyCodeGenEveryParameter) { checkGradients("tiny-codegen", 13); }
// (Not OPT: a step of 1e-2 moves some of ReLU's inputs across 0, where the
// loss has a kink, and central differences are off by more than the
// tolerance there (tried: at least 6 of ~100 elements). Its gradients are checked
// against torch autograd instead, every element of every parameter through 3
// SGD steps (test/reference/hf-opt.test), and ReLU's backward by ReluTest.)
