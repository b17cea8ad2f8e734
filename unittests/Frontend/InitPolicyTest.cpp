//===- InitPolicyTest.cpp - Hugging Face's _init_weights by parameter -----===//
#include "llcdist/Frontend/InitPolicy.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace llcdist;

namespace {
constexpr const char *kGpt2 = "GPT2LMHeadModel";
constexpr const char *kLlama = "LlamaForCausalLM";
const ParamRole kMatrix{};
} // namespace

// Norm scales start at 1 and every other rank-1 parameter (biases, a
// LayerNorm's shift) at 0, whatever the name or the architecture.
TEST(InitPolicy, NormWeightsOnesOtherRank1Zeros) {
  InitSpec ln = initPolicy(kGpt2, "transformer.h.0.ln_1.weight", 12, {true, true});
  EXPECT_EQ(ln.kind, InitSpec::Kind::Ones);
  InitSpec bias = initPolicy(kGpt2, "transformer.h.0.attn.c_proj.bias", 12, {false, true});
  EXPECT_EQ(bias.kind, InitSpec::Kind::Zeros);
  InitSpec rms = initPolicy(kLlama, "model.norm.weight", 2, {true, true});
  EXPECT_EQ(rms.kind, InitSpec::Kind::Ones);
}

// Matrices: normal(0, 0.02), Hugging Face's initializer_range.
TEST(InitPolicy, MatricesNormalInitializerRange) {
  InitSpec q = initPolicy(kLlama, "model.layers.0.self_attn.q_proj.weight", 32, kMatrix);
  EXPECT_EQ(q.kind, InitSpec::Kind::Normal);
  EXPECT_EQ(q.std, 0.02);
  EXPECT_EQ(initPolicy(kGpt2, "transformer.wte.weight", 12, kMatrix).std, 0.02);
}

// GPT-2's residual projections: 0.02 / sqrt(2 * 12) with 12 layers; the
// rule is GPT-2's only (a Llama o_proj, or a name merely containing
// "c_proj.weight" elsewhere, keeps 0.02).
TEST(InitPolicy, Gpt2ResidualProjectionsScaledByDepth) {
  InitSpec attn = initPolicy(kGpt2, "transformer.h.3.attn.c_proj.weight", 12, kMatrix);
  EXPECT_EQ(attn.kind, InitSpec::Kind::Normal);
  EXPECT_DOUBLE_EQ(attn.std, 0.02 / std::sqrt(24.0));
  EXPECT_DOUBLE_EQ(initPolicy(kGpt2, "transformer.h.0.mlp.c_proj.weight", 2, kMatrix).std,
                   0.01);
  EXPECT_EQ(initPolicy(kLlama, "model.layers.0.mlp.c_proj.weight", 12, kMatrix).std, 0.02);
  EXPECT_EQ(initPolicy(kGpt2, "transformer.h.0.attn.c_proj.weight.x", 12, kMatrix).std, 0.02);
  EXPECT_EQ(initPolicy(kGpt2, "transformer.h.0.attn.c_attn.weight", 12, kMatrix).std, 0.02);
}
