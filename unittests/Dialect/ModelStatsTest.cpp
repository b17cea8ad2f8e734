//===- ModelStatsTest.cpp - counts taken on the imported IR ---------------===//
#include "llcdist/Dialect/XF/Analysis/ModelStats.h"
#include "llcdist/Frontend/ImportXF.h"
#include "llcdist/InitAll.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <gtest/gtest.h>

using namespace llcdist;

namespace {
struct Imported {
  ModelConfig config;
  xf::ModelStats stats;
};

Imported importAndCount(const std::string &name, int64_t seqLen = 0) {
  Imported r;
  std::string path = std::string(LLCDIST_SOURCE_DIR) + "/models/" + name + ".json";
  auto err = loadModelConfig(path, r.config);
  EXPECT_FALSE(err) << (err ? err->message : "");
  TrainingShape shape;
  shape.seqLen = seqLen;
  EXPECT_FALSE(resolveTrainingShape(r.config, 1, shape));
  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  mlir::MLIRContext ctx(registry);
  auto module = importModel(ctx, r.config, shape, 1);
  EXPECT_TRUE(mlir::succeeded(mlir::verify(*module))) << name;
  auto stats = xf::computeModelStats(*module);
  EXPECT_TRUE(mlir::succeeded(stats)) << name;
  if (mlir::succeeded(stats))
    r.stats = *stats;
  return r;
}
} // namespace

// The published figures, counted on the IR (unique xf.param tensors).
TEST(ModelStats, PublishedParameterCounts) {
  EXPECT_EQ(importAndCount("gpt2").stats.parameters, 124439808);
  EXPECT_EQ(importAndCount("llama2-7b").stats.parameters, 6738415616);
  EXPECT_EQ(importAndCount("llama3-8b").stats.parameters, 8030261248);
  EXPECT_EQ(importAndCount("llama3.1-405b").stats.parameters, 405853388800);
  EXPECT_EQ(importAndCount("qwen2-7b").stats.parameters, 7615616512);
  EXPECT_EQ(importAndCount("mistral-7b").stats.parameters, 7241732096);
  EXPECT_EQ(importAndCount("gemma-7b").stats.parameters, 8537680896);
  EXPECT_EQ(importAndCount("phi-2").stats.parameters, 2779683840);
  EXPECT_EQ(importAndCount("starcoder2-3b").stats.parameters, 3030371328);
  EXPECT_EQ(importAndCount("starcoder2-15b").stats.parameters, 15957889024);
  EXPECT_EQ(importAndCount("stablelm-2-1_6b").stats.parameters, 1644515328);
  EXPECT_EQ(importAndCount("olmo-1b").stats.parameters, 1176764416);
  EXPECT_EQ(importAndCount("olmo-7b").stats.parameters, 6888095744);
  EXPECT_EQ(importAndCount("pythia-1b").stats.parameters, 1011781632);
  EXPECT_EQ(importAndCount("gpt-neox-20b").stats.parameters, 20554567680);
  EXPECT_EQ(importAndCount("falcon-7b").stats.parameters, 6921720704);
  EXPECT_EQ(importAndCount("bloom-176b").stats.parameters, 176247271424);
  EXPECT_EQ(importAndCount("starcoder-15.5b").stats.parameters, 15517456384);
  EXPECT_EQ(importAndCount("mixtral-8x7b").stats.parameters, 46702792704);
  EXPECT_EQ(importAndCount("qwen1.5-moe-a2.7b").stats.parameters, 14315784192);
}

// Every shipped model: the IR's count agrees with the architecture formula.
TEST(ModelStats, IRAgreesWithFormulaForEveryShippedModel) {
  for (const char *name : {"tiny-gpt2",
                           "tiny-llama",
                           "gpt2",
                           "gpt2-medium",
                           "gpt2-large",
                           "gpt2-xl",
                           "gpt3-175b",
                           "llama2-7b",
                           "llama2-13b",
                           "llama2-70b",
                           "llama3-8b",
                           "llama3-70b",
                           "llama3.1-405b",
                           "tiny-qwen2",
                           "qwen2-0.5b",
                           "qwen2-1.5b",
                           "qwen2-7b",
                           "tiny-mistral",
                           "mistral-7b",
                           "tiny-gemma",
                           "gemma-2b",
                           "gemma-7b",
                           "tiny-phi",
                           "phi-2",
                           "tiny-mixtral",
                           "mixtral-8x7b",
                           "tiny-qwen2-moe",
                           "qwen1.5-moe-a2.7b",
                           "tiny-starcoder2",
                           "starcoder2-3b",
                           "starcoder2-7b",
                           "starcoder2-15b",
                           "tiny-stablelm",
                           "stablelm-2-1_6b",
                           "stablelm-3b-4e1t",
                           "../unittests/Integration/Inputs/tiny-stablelm-parallel",
                           "tiny-olmo",
                           "olmo-1b",
                           "olmo-7b",
                           "tiny-gpt-neox",
                           "pythia-160m",
                           "pythia-1b",
                           "pythia-6.9b",
                           "gpt-neox-20b",
                           "tiny-falcon",
                           "falcon-7b",
                           "tiny-bloom",
                           "bloom-560m",
                           "bloom-7b1",
                           "bloom-176b",
                           "tiny-gpt-bigcode",
                           "../unittests/Integration/Inputs/tiny-gpt-bigcode-mha",
                           "starcoder-15.5b",
                           "starcoderbase-1b",
                           "tiny-mpt",
                           "mpt-7b",
                           "mpt-30b",
                           "tiny-gpt-j",
                           "gpt-j-6b",
                           "tiny-opt",
                           "opt-125m",
                           "opt-66b",
                           "tiny-cohere",
                           "c4ai-command-r-v01",
                           "tiny-gpt-neo",
                           "gpt-neo-125m",
                           "gpt-neo-2.7b",
                           "tiny-biogpt",
                           "biogpt",
                           "tiny-codegen",
                           "codegen-350m-mono"}) {
    Imported r = importAndCount(name);
    EXPECT_EQ(r.stats.parameters, r.config.numParameters()) << name;
    EXPECT_EQ(r.stats.layers, r.config.layers) << name;
  }
}

// Qwen2-MoE with dense layers (decoder_sparse_step 2): each kind of layer
// calls its own body, and the IR's count is the formula's and transformers'
// own (260,160 for this config, counted by Qwen2MoeForCausalLM 4.40.2).
TEST(ModelStats, DenseAndSparseLayers) {
  Imported r = importAndCount("../unittests/Integration/Inputs/tiny-qwen2-moe-mixed");
  EXPECT_EQ(r.stats.parameters, r.config.numParameters());
  EXPECT_EQ(r.stats.parameters, 260160);
  EXPECT_EQ(r.stats.layers, 4);
}

// FLOPs against Megatron-LM's closed form for GPT (Narayanan et al. SC21,
// eq. 3 without recomputation): per token 72·l·h²·(1 + s/(6h) + V/(12·l·h))
// counts the same matmuls (QKV, proj, 4h MLP, the S×S attention, LM head).
TEST(ModelStats, GPTFlopsMatchMegatronFormula) {
  for (int64_t s : {128, 1024}) {
    Imported r = importAndCount("gpt2", s);
    double l = 12, h = 768, V = 50257;
    double megatron = 72 * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
    EXPECT_NEAR(r.stats.trainingFlopsPerToken(), megatron, 1e-9 * megatron)
        << "seq " << s;
  }
}

// Llama: count each matmul by hand (GQA k/v, SwiGLU's three projections).
TEST(ModelStats, LlamaFlopsByHand) {
  Imported r = importAndCount("llama3-8b", 2048);
  double H = 4096, I = 14336, L = 32, V = 128256, S = 2048, q = 4096,
         kv = 1024;
  double linear = L * 2 * (H * q + 2 * H * kv + q * H + 3 * H * I) + 2 * H * V;
  double attention = L * 4 * S * q;
  EXPECT_DOUBLE_EQ(r.stats.linearFlopsPerToken, linear);
  EXPECT_DOUBLE_EQ(r.stats.attentionFlopsPerToken, attention);
  EXPECT_DOUBLE_EQ(r.stats.trainingFlopsPerToken(), 3 * (linear + attention));
}
