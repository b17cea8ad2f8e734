//===- ModelConfigTest.cpp - Hugging Face config parsing ------------------===//
#include "llcdist/Frontend/ModelConfig.h"

#include <gtest/gtest.h>

#include <map>

using namespace llcdist;

namespace {
std::string model(const std::string &name) {
  return std::string(LLCDIST_SOURCE_DIR) + "/models/" + name + ".json";
}

ModelConfig load(const std::string &name) {
  ModelConfig c;
  auto err = loadModelConfig(model(name), c);
  EXPECT_FALSE(err) << (err ? err->message : "");
  return c;
}

/// Parses `text` expecting an error; returns its message.
std::string parseError(const std::string &text) {
  ModelConfig c;
  auto err = parseModelConfig(text, "bad.json", c);
  EXPECT_TRUE(err.has_value()) << "expected an error for: " << text;
  return err ? err->message : "";
}

const char *kGpt2 = R"({"architectures": ["GPT2LMHeadModel"], "n_embd": 64,
  "n_head": 4, "n_layer": 2, "n_positions": 32, "vocab_size": 128})";
} // namespace

// Published parameter counts (Hugging Face / Meta model cards), from the
// architecture formula; ModelStatsTest checks the IR's own count.
TEST(ModelConfig, PublishedParameterCounts) {
  std::map<std::string, int64_t> published = {
      {"gpt2", 124439808},
      {"llama2-7b", 6738415616},
      {"llama3-8b", 8030261248},
      {"llama3.2-1b", 1235814400}, // tied embeddings (bench/gpu_step.py)
      {"llama3.1-405b", 405853388800},
      // Qwen2 (the safetensors index's total_size / 2 bytes): biases on q,
      // k and v only; the small sizes tie the embeddings.
      {"qwen2-0.5b", 494032768},
      {"qwen2-1.5b", 1543714304},
      {"qwen2-7b", 7615616512},
      {"mistral-7b", 7241732096}, // Mistral-7B-v0.1
      // Gemma (tied, head_dim 256) and Phi-2 (biases everywhere, the LM
      // head's too): the model cards' safetensors totals.
      {"gemma-2b", 2506172416},
      {"gemma-7b", 8537680896},
      {"phi-2", 2779683840},
      // StarCoder2 (the model cards' 3.03B, 7.17B and 15.96B; transformers
      // 4.40.2's Starcoder2ForCausalLM counts the same): 3B and 7B tie the
      // head, 15B does not.
      {"starcoder2-3b", 3030371328},
      {"starcoder2-7b", 7173923840},
      {"starcoder2-15b", 15957889024},
      // StableLM (the model cards' 1,644,515,328 and 2,795,443,200): q, k, v
      // biases in 2-1.6B only, LayerNorms, untied.
      {"stablelm-2-1_6b", 1644515328},
      {"stablelm-3b-4e1t", 2795443200},
      // OLMo (the model cards' 1.18B and 6.89B, transformers 4.40.2's
      // OlmoForCausalLM counts the same): no norm parameters at all; 1B ties
      // the head, 7B does not.
      {"olmo-1b", 1176764416},
      {"olmo-7b", 6888095744},
      // GPT-NeoX (the Pythia paper's totals, Biderman et al. 2023, Table 1;
      // GPT-NeoX-20B's paper, 20,554,567,680; transformers 4.40.2's
      // GPTNeoXForCausalLM counts the same): untied, biases everywhere.
      {"pythia-160m", 162322944},
      {"pythia-1b", 1011781632},
      {"pythia-6.9b", 6857302016},
      {"gpt-neox-20b", 20554567680},
      // Falcon-7B (the safetensors' total_size / 2 bytes; transformers
      // 4.40.2's FalconForCausalLM counts the same): multi_query, tied.
      {"falcon-7b", 6921720704},
      // BLOOM (the model cards' 559,214,592, 7,069,016,064 and
      // 176,247,271,424; transformers 4.40.2's BloomForCausalLM counts the
      // same for 560m): tied, biases everywhere, a LayerNorm on the
      // embeddings, no position table.
      {"bloom-560m", 559214592},
      {"bloom-7b1", 7069016064},
      {"bloom-176b", 176247271424},
      // GPTBigCode (StarCoder's 15.5B, StarCoderBase-1B's 1.14B): GPT-2's
      // layer with one k and one v head (multi_query), learned positions.
      {"starcoder-15.5b", 15517456384},
      {"starcoderbase-1b", 1137207296},
      // MPT (MPT-7B's 6,649,286,656 and MPT-30B's 29,957,200,896; transformers
      // 4.40.2's MptForCausalLM counts the same): no biases, LayerNorms of a
      // weight alone, no position table, tied.
      {"mpt-7b", 6649286656},
      {"mpt-30b", 29957200896},
      // GPT-J-6B (transformers 4.40.2's GPTJForCausalLM holds 6,050,882,784):
      // untied, the head's bias, one LayerNorm a layer, no attention biases.
      {"gpt-j-6b", 6050882784},
      // OPT (the paper's 125M to 175B: transformers 4.40.2's OPTForCausalLM
      // holds 125,239,296 for opt-125m): biases everywhere, tied, the
      // position table's max_position_embeddings + 2 rows.
      {"opt-125m", 125239296},
      {"opt-1.3b", 1315758080},
      {"opt-6.7b", 6658473984},
      {"opt-66b", 65719701504},
      {"opt-175b", 174604468224},
      // Cohere's Command-R (35B: transformers 4.40.2's CohereForCausalLM
      // holds the same for tiny-cohere's shapes): one LayerNorm of a weight
      // a layer, no biases, tied.
      {"c4ai-command-r-v01", 34980831232},
      // GPT-Neo (EleutherAI's 125M, 1.3B and 2.7B; transformers 4.40.2's
      // GPTNeoForCausalLM holds 125,198,592 for gpt-neo-125m): q, k, v
      // without biases, out_proj and the MLP with them, learned positions,
      // tied.
      {"gpt-neo-125m", 125198592},
      {"gpt-neo-1.3b", 1315575808},
      {"gpt-neo-2.7b", 2651307520},
  };
  for (auto &[name, n] : published)
    EXPECT_EQ(load(name).numParameters(), n) << name;
}

TEST(ModelConfig, GPT2Fields) {
  ModelConfig c = load("gpt2");
  EXPECT_EQ(c.arch, Arch::GPT2);
  EXPECT_EQ(c.name, "gpt2");
  EXPECT_EQ(c.hidden, 768);
  EXPECT_EQ(c.heads, 12);
  EXPECT_EQ(c.kvHeads, 12);
  EXPECT_EQ(c.headDim, 64);
  EXPECT_EQ(c.intermediate, 3072); // n_inner null -> 4 * n_embd
  EXPECT_EQ(c.maxPositions, 1024);
  EXPECT_TRUE(c.tieEmbeddings);
  EXPECT_DOUBLE_EQ(c.normEps, 1e-5);
}

TEST(ModelConfig, Qwen2Fields) {
  ModelConfig c = load("qwen2-7b");
  EXPECT_EQ(c.arch, Arch::Qwen2);
  EXPECT_EQ(c.heads, 28);
  EXPECT_EQ(c.kvHeads, 4);
  EXPECT_EQ(c.headDim, 128);
  EXPECT_TRUE(c.qkvBias);
  EXPECT_FALSE(c.outputBias);
  EXPECT_FALSE(c.mlpBias);
  EXPECT_FALSE(c.tieEmbeddings);
  EXPECT_DOUBLE_EQ(c.ropeTheta, 1e6);
  EXPECT_TRUE(load("qwen2-0.5b").tieEmbeddings);
  EXPECT_EQ(c.layerTensors(), 12); // 2 norms, q k v o, 3 MLP, 3 biases
}

// What Qwen2's config may not say: a sliding window (not implemented), a
// rope_scaling, a head_dim (not a Qwen2Config field), Llama's bias switches.
TEST(ModelConfig, Qwen2RefusesWhatItCannotTrain) {
  const std::string head = R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
    "num_attention_heads": 8, "num_hidden_layers": 2, "num_key_value_heads": 2, "vocab_size": 128, )";
  ModelConfig c;
  EXPECT_FALSE(parseModelConfig(head + R"("use_sliding_window": false, "sliding_window": 64})", "ok.json", c));
  EXPECT_EQ(c.maxPositions, 32768); // Qwen2Config's default
  EXPECT_NE(parseError(head + R"("use_sliding_window": true})").find("field 'use_sliding_window': sliding-window"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"("rope_scaling": {"type": "yarn", "factor": 4}})").find("field 'rope_scaling'"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"("head_dim": 8})").find("field 'head_dim': is not a field of Qwen2"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"("attention_bias": true})")
                .find("field 'attention_bias': unknown field for "
                      "Qwen2ForCausalLM"),
            std::string::npos);
}

TEST(ModelConfig, MistralFields) {
  ModelConfig c = load("mistral-7b");
  EXPECT_EQ(c.arch, Arch::Mistral);
  EXPECT_EQ(c.slidingWindow, 4096);
  EXPECT_EQ(c.kvHeads, 8);
  EXPECT_FALSE(c.qkvBias || c.outputBias || c.mlpBias);
  EXPECT_EQ(std::string(hfArchitecture(c.arch)), "MistralForCausalLM");
  const std::string head = R"({"architectures": ["MistralForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
    "num_attention_heads": 8, "num_hidden_layers": 2, "num_key_value_heads": 2, "vocab_size": 128)";
  ModelConfig d;
  ASSERT_FALSE(parseModelConfig(head + R"(, "sliding_window": null})", "null.json", d));
  EXPECT_EQ(d.slidingWindow, 0); // plain causal
  ASSERT_FALSE(parseModelConfig(head + "}", "default.json", d));
  EXPECT_EQ(d.slidingWindow, 4096); // MistralConfig's default
  EXPECT_NE(parseError(head + R"(, "sliding_window": 0})").find("field 'sliding_window': must be a positive integer"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "attention_bias": true})").find("unknown field for MistralForCausalLM"),
            std::string::npos);
}

TEST(ModelConfig, GemmaFields) {
  ModelConfig c = load("gemma-2b");
  EXPECT_EQ(c.arch, Arch::Gemma);
  EXPECT_EQ(c.headDim, 256); // not hidden / heads = 256 by chance: gemma-7b's is 3072 / 16 = 192
  EXPECT_EQ(load("gemma-7b").headDim, 256);
  EXPECT_EQ(c.kvHeads, 1);
  EXPECT_TRUE(c.tieEmbeddings && c.gatedGelu && c.scaleEmbeddings);
  EXPECT_EQ(c.normWeightOffset, 1.0);
  EXPECT_FALSE(c.qkvBias || c.outputBias || c.mlpBias);
  EXPECT_TRUE(llamaLayout(c.arch));
  const std::string head = R"({"architectures": ["GemmaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
    "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 1, "vocab_size": 128)";
  ModelConfig d;
  ASSERT_FALSE(parseModelConfig(head + "}", "default.json", d));
  EXPECT_EQ(d.headDim, 256); // GemmaConfig's default, whatever hidden / heads is
  EXPECT_EQ(d.maxPositions, 8192);
  // hidden_act is what transformers 4.40 ignores (it warns and uses the tanh
  // GELU unless hidden_activation says otherwise).
  ASSERT_FALSE(parseModelConfig(head + R"(, "hidden_act": "gelu"})", "act.json", d));
  EXPECT_TRUE(d.gatedGelu);
  EXPECT_NE(parseError(head + R"(, "hidden_activation": "gelu"})").find("field 'hidden_activation': unsupported"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "rope_scaling": {"type": "linear", "factor": 2.0}})")
                .find("field 'rope_scaling': must be null for Gemma"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "mlp_bias": true})").find("unknown field for GemmaForCausalLM"), std::string::npos);
}

TEST(ModelConfig, PhiFields) {
  ModelConfig c = load("phi-2");
  EXPECT_EQ(c.arch, Arch::Phi);
  EXPECT_EQ(c.headDim, 80);
  EXPECT_EQ(c.rotaryDim, 32); // int(0.4 * 80)
  EXPECT_TRUE(c.lmHeadBias && c.qkvBias && c.outputBias && c.mlpBias);
  EXPECT_FALSE(c.tieEmbeddings);
  EXPECT_FALSE(llamaLayout(c.arch));
  EXPECT_EQ(c.layerTensors(), 14);
  const std::string head = R"({"architectures": ["PhiForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
    "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 128)";
  ModelConfig d;
  ASSERT_FALSE(parseModelConfig(head + "}", "default.json", d));
  EXPECT_EQ(d.rotaryDim, 8); // PhiConfig's default factor 0.5 of 16
  EXPECT_EQ(d.kvHeads, 4);
  EXPECT_NE(parseError(head + R"(, "partial_rotary_factor": 0.2})")
                .find("field 'partial_rotary_factor': gives int(0.2 * 16) = 3 rotary dims per head; they must be even"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "partial_rotary_factor": 0.1})").find("int(0.1 * 16) = 1"), std::string::npos);
  EXPECT_NE(parseError(head + R"(, "partial_rotary_factor": 1.5})").find("must be in (0, 1]"), std::string::npos);
  EXPECT_NE(parseError(head + R"(, "qk_layernorm": true})").find("field 'qk_layernorm': only false"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "hidden_act": "relu"})").find("field 'hidden_act': unsupported"), std::string::npos);
  EXPECT_NE(parseError(head + R"(, "rms_norm_eps": 1e-6})").find("unknown field for PhiForCausalLM"),
            std::string::npos);
}

TEST(ModelConfig, Starcoder2Fields) {
  ModelConfig c = load("starcoder2-3b");
  EXPECT_EQ(c.arch, Arch::Starcoder2);
  EXPECT_EQ(c.headDim, 128);
  EXPECT_EQ(c.kvHeads, 2);
  EXPECT_EQ(c.slidingWindow, 4096);
  EXPECT_DOUBLE_EQ(c.ropeTheta, 999999.4420358813);
  EXPECT_TRUE(c.qkvBias && c.outputBias && c.mlpBias);
  EXPECT_FALSE(c.lmHeadBias);
  EXPECT_TRUE(c.tieEmbeddings);
  EXPECT_FALSE(llamaLayout(c.arch));
  EXPECT_TRUE(layerNorms(c.arch));
  EXPECT_EQ(c.layerTensors(), 16); // transformers' Starcoder2DecoderLayer
  EXPECT_FALSE(load("starcoder2-15b").tieEmbeddings);
  const std::string head = R"({"architectures": ["Starcoder2ForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
    "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 128)";
  ModelConfig d;
  ASSERT_FALSE(parseModelConfig(head + "}", "default.json", d));
  EXPECT_EQ(d.kvHeads, 2);       // Starcoder2Config's defaults: 2 kv heads,
  EXPECT_EQ(d.slidingWindow, 0); // no window,
  EXPECT_TRUE(d.tieEmbeddings);  // a tied head,
  EXPECT_EQ(d.maxPositions, 4096);
  ModelConfig nb;
  ASSERT_FALSE(parseModelConfig(head + R"(, "use_bias": false, "sliding_window": null})", "nobias.json", nb));
  EXPECT_FALSE(nb.qkvBias || nb.outputBias || nb.mlpBias);
  EXPECT_EQ(nb.slidingWindow, 0);
  EXPECT_EQ(nb.layerTensors(), 10);
  EXPECT_EQ(d.numParameters() - nb.numParameters(), 2 * (64 + 2 * 32 + 64 + 128 + 64)); // the biases of 2 layers
  EXPECT_NE(parseError(head + R"(, "hidden_act": "gelu"})").find("field 'hidden_act': unsupported activation 'gelu'"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "sliding_window": 0})").find("field 'sliding_window': must be a positive integer"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "rope_scaling": {"type": "linear", "factor": 2.0}})")
                .find("field 'rope_scaling': must be null for StarCoder2"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "head_dim": 16})").find("field 'head_dim': is not a field of Starcoder2ForCausalLM"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "num_key_value_heads": 3})").find("does not divide num_attention_heads=4"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "rms_norm_eps": 1e-6})").find("unknown field for Starcoder2ForCausalLM"),
            std::string::npos);
}

TEST(ModelConfig, StableLmFields) {
  ModelConfig c = load("stablelm-2-1_6b");
  EXPECT_EQ(c.arch, Arch::StableLm);
  EXPECT_EQ(c.headDim, 64);
  EXPECT_EQ(c.rotaryDim, 16); // int(0.25 * 64)
  EXPECT_TRUE(c.qkvBias);
  EXPECT_FALSE(c.outputBias || c.mlpBias || c.lmHeadBias || c.tieEmbeddings || c.parallelResidual);
  EXPECT_TRUE(llamaLayout(c.arch)); // q, k, v, o and a gated MLP
  EXPECT_TRUE(layerNorms(c.arch));  // with LayerNorms
  EXPECT_EQ(c.layerTensors(), 14);  // transformers' StableLmDecoderLayer
  EXPECT_EQ(load("stablelm-3b-4e1t").layerTensors(), 11);
  const std::string head = R"({"architectures": ["StableLmForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
    "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 2, "vocab_size": 128)";
  ModelConfig d, par;
  ASSERT_FALSE(parseModelConfig(head + "}", "default.json", d));
  EXPECT_EQ(d.rotaryDim, 4); // StableLmConfig's default factor 0.25 of 16
  EXPECT_FALSE(d.qkvBias);
  ASSERT_FALSE(parseModelConfig(head + R"(, "use_parallel_residual": true})", "parallel.json", par));
  EXPECT_TRUE(par.parallelResidual);
  EXPECT_EQ(par.layerTensors(), 9);                               // one LayerNorm
  EXPECT_EQ(d.numParameters() - par.numParameters(), 2 * 2 * 64); // a LayerNorm's weight and bias in 2 layers
  EXPECT_NE(parseError(head + R"(, "qk_layernorm": true})").find("field 'qk_layernorm': per-head LayerNorms"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "partial_rotary_factor": 0.2})").find("int(0.2 * 16) = 3 rotary dims per head"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "hidden_act": "gelu"})").find("field 'hidden_act': unsupported activation"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "rope_scaling": {"type": "linear", "factor": 2.0}})")
                .find("field 'rope_scaling': must be null for StableLM"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "use_bias": true})").find("unknown field for StableLmForCausalLM"),
            std::string::npos);
}

// OLMo: Llama's layer with LayerNorms that have no weight or bias.
TEST(ModelConfig, OlmoFields) {
  ModelConfig c = load("olmo-7b");
  EXPECT_EQ(c.arch, Arch::Olmo);
  EXPECT_EQ(c.headDim, 128);
  EXPECT_TRUE(llamaLayout(c.arch)); // q, k, v, o and a gated MLP
  EXPECT_TRUE(layerNorms(c.arch));  // LayerNorms ...
  EXPECT_EQ(c.normParams, NormParams::None); // ... without parameters
  EXPECT_EQ(c.normTensors(), 0);
  EXPECT_EQ(c.finalNormTensors(), 0);
  EXPECT_DOUBLE_EQ(c.normEps, 1e-5); // OlmoLayerNorm's, fixed
  EXPECT_FALSE(c.qkvBias || c.outputBias || c.mlpBias || c.tieEmbeddings);
  EXPECT_EQ(c.layerTensors(), 7); // q, k, v, o, gate, up, down
  EXPECT_TRUE(load("olmo-1b").tieEmbeddings);
  const std::string head = R"({"architectures": ["OlmoForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
    "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 128)";
  ModelConfig d, bias;
  ASSERT_FALSE(parseModelConfig(head + R"(, "clip_qkv": null})", "default.json", d));
  EXPECT_EQ(d.kvHeads, 4); // OlmoConfig: num_key_value_heads defaults to the heads
  ASSERT_FALSE(parseModelConfig(head + R"(, "attention_bias": true})", "bias.json", bias));
  EXPECT_TRUE(bias.qkvBias && bias.outputBias && !bias.mlpBias);
  EXPECT_EQ(bias.numParameters() - d.numParameters(), 2 * (3 * 64 + 64)); // q, k, v and o biases in 2 layers
  EXPECT_EQ(d.clipQkv, 0);                                                // null: no clamp
  ModelConfig clip;
  ASSERT_FALSE(parseModelConfig(head + R"(, "clip_qkv": 8.0})", "clip.json", clip));
  EXPECT_EQ(clip.clipQkv, 8.0);
  EXPECT_EQ(clip.numParameters(), d.numParameters()); // a clamp has no parameters
  EXPECT_NE(parseError(head + R"(, "clip_qkv": -1})").find("field 'clip_qkv'"), std::string::npos);
  EXPECT_NE(parseError(head + R"(, "clip_qkv": 1e39})")
                .find("field 'clip_qkv': must be a positive fp32 number (finite, non-zero), got 1e+39"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "hidden_act": "gelu"})").find("field 'hidden_act': unsupported activation"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "rope_scaling": {"type": "linear", "factor": 2.0}})")
                .find("field 'rope_scaling': must be null for OLMo"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "layer_norm_eps": 1e-6})").find("unknown field for OlmoForCausalLM"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "head_dim": 16})").find("field 'head_dim': is not a field of OlmoForCausalLM"),
            std::string::npos);
}

// GPT-NeoX: a GPT-style layer (two LayerNorms, a two-matrix MLP) with q, k
// and v fused per head, partial rotary embeddings and the exact GELU.
TEST(ModelConfig, GptNeoXFields) {
  ModelConfig c = load("pythia-1b");
  EXPECT_EQ(c.arch, Arch::GptNeoX);
  EXPECT_STREQ(hfArchitecture(c.arch), "GPTNeoXForCausalLM");
  EXPECT_STREQ(archName(c.arch), "gpt_neox");
  EXPECT_EQ(c.headDim, 256);
  EXPECT_EQ(c.kvHeads, 8);
  EXPECT_EQ(c.rotaryDim, 64); // int(0.25 * 256)
  EXPECT_FALSE(llamaLayout(c.arch));
  EXPECT_TRUE(layerNorms(c.arch));
  EXPECT_TRUE(c.mlpActivation == MlpActivation::GeluErf && c.parallelResidual);
  EXPECT_TRUE(c.qkvBias && c.outputBias && c.mlpBias && !c.tieEmbeddings);
  EXPECT_EQ(c.normTensors(), 4); // two LayerNorms, parallel or not
  EXPECT_EQ(c.layerTensors(), 12);
  ModelConfig neox20b = load("gpt-neox-20b");
  EXPECT_FALSE((neox20b.mlpActivation == MlpActivation::GeluErf)); // "gelu_fast": the tanh GELU
  EXPECT_TRUE(neox20b.parallelResidual); // GPTNeoXConfig's default
  const std::string head = R"({"architectures": ["GPTNeoXForCausalLM"], "hidden_size": 64, "intermediate_size": 256,
    "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 128)";
  ModelConfig d, plain;
  ASSERT_FALSE(parseModelConfig(head + "}", "default.json", d));
  EXPECT_EQ(d.rotaryDim, 4); // rotary_pct 0.25 of head_dim 16
  EXPECT_DOUBLE_EQ(d.ropeTheta, 10000.0);
  ASSERT_FALSE(parseModelConfig(head + R"(, "attention_bias": false, "use_parallel_residual": false,
    "rotary_emb_base": 500000, "rotary_pct": 1.0})",
                                "plain.json", plain));
  EXPECT_FALSE(plain.qkvBias || plain.outputBias || plain.parallelResidual);
  EXPECT_TRUE(plain.mlpBias);
  EXPECT_EQ(plain.rotaryDim, 16);
  EXPECT_DOUBLE_EQ(plain.ropeTheta, 500000.0);
  EXPECT_EQ(d.numParameters() - plain.numParameters(), 2 * (3 * 64 + 64)); // query_key_value and dense biases
  EXPECT_EQ(plain.layerTensors(), 10);
  EXPECT_NE(parseError(head + R"(, "num_key_value_heads": 2})")
                .find("field 'num_key_value_heads': is not a field of GPTNeoXConfig"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "hidden_act": "relu"})").find("field 'hidden_act': unsupported activation 'relu'"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "rotary_pct": 0.01})").find("field 'rotary_pct': gives int(0.01 * 16) = 0"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "rotary_emb_base": 0})").find("field 'rotary_emb_base'"), std::string::npos);
  EXPECT_NE(parseError(head + R"(, "rope_scaling": {"type": "linear", "factor": 2.0}})")
                .find("field 'rope_scaling': must be null for GPT-NeoX"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "rope_theta": 10000})").find("unknown field for GPTNeoXForCausalLM"),
            std::string::npos);
}

// Falcon: q, k and v fused per kv head, in its three layouts.
TEST(ModelConfig, FalconFields) {
  ModelConfig c = load("falcon-7b");
  EXPECT_EQ(c.arch, Arch::Falcon);
  EXPECT_STREQ(hfArchitecture(c.arch), "FalconForCausalLM");
  EXPECT_EQ(c.headDim, 64);
  EXPECT_EQ(c.kvHeads, 1); // multi_query
  EXPECT_EQ(c.intermediate, 4 * 4544);
  EXPECT_TRUE(groupedQkv(c.arch) && !llamaLayout(c.arch) && layerNorms(c.arch));
  EXPECT_TRUE(c.mlpActivation == MlpActivation::GeluErf && c.parallelResidual && !c.parallelNorms && c.tieEmbeddings);
  EXPECT_FALSE(c.qkvBias || c.outputBias || c.mlpBias);
  EXPECT_EQ(c.rotaryDim, 0);     // every dim of each head
  EXPECT_EQ(c.normTensors(), 2); // one LayerNorm under parallel_attn
  EXPECT_EQ(c.layerTensors(), 6);
  const std::string head = R"({"architectures": ["FalconForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
    "num_hidden_layers": 2, "vocab_size": 128)";
  ModelConfig grouped, perHead, sequential;
  ASSERT_FALSE(parseModelConfig(
      head + R"(, "new_decoder_architecture": true, "num_kv_heads": 2, "ffn_hidden_size": 96})", "new.json", grouped));
  EXPECT_EQ(grouped.kvHeads, 2);
  EXPECT_EQ(grouped.intermediate, 96);
  EXPECT_TRUE(grouped.parallelResidual && grouped.parallelNorms);
  EXPECT_EQ(grouped.normTensors(), 4); // ln_attn and ln_mlp
  ASSERT_FALSE(parseModelConfig(head + R"(, "multi_query": false, "num_kv_heads": 2})", "heads.json", perHead));
  EXPECT_EQ(perHead.kvHeads, 4); // num_kv_heads is read only under new_decoder_architecture
  ASSERT_FALSE(parseModelConfig(head + R"(, "parallel_attn": false, "bias": true})", "seq.json", sequential));
  EXPECT_FALSE(sequential.parallelResidual);
  EXPECT_EQ(sequential.normTensors(), 4);
  EXPECT_TRUE(sequential.qkvBias && sequential.outputBias && sequential.mlpBias);
  EXPECT_EQ(sequential.layerTensors(), 12);
  EXPECT_NE(parseError(head + R"(, "alibi": true})").find("field 'alibi': ALiBi position biases are not implemented"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "activation": "relu"})").find("field 'activation': unsupported activation 'relu'"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "n_embed": 64})").find("field 'n_embed': is FalconConfig's old name"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "new_decoder_architecture": true, "num_kv_heads": 3})")
                .find("field 'num_kv_heads': num_kv_heads=3 does not divide num_attention_heads=4"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "num_key_value_heads": 2})").find("its name is num_kv_heads"), std::string::npos);
  EXPECT_NE(parseError(head + R"(, "rope_scaling": {"type": "linear", "factor": 2.0}})")
                .find("field 'rope_scaling': must be null for Falcon"),
            std::string::npos);
}

// BLOOM: GPT-NeoX's fused q|k|v per head, ALiBi, a LayerNorm on the
// embeddings, BloomConfig's own names (n_head, n_layer).
TEST(ModelConfig, BloomFields) {
  ModelConfig c = load("bloom-176b");
  EXPECT_EQ(c.arch, Arch::Bloom);
  EXPECT_STREQ(hfArchitecture(c.arch), "BloomForCausalLM");
  EXPECT_EQ(c.layers, 70);
  EXPECT_EQ(c.heads, 112);
  EXPECT_EQ(c.kvHeads, 112);
  EXPECT_EQ(c.headDim, 128);
  EXPECT_EQ(c.intermediate, 4 * 14336);
  EXPECT_TRUE(groupedQkv(c.arch) && !llamaLayout(c.arch) && layerNorms(c.arch));
  EXPECT_TRUE(c.alibi && c.embeddingNorm && c.tieEmbeddings);
  EXPECT_FALSE(c.mlpActivation == MlpActivation::GeluErf ||
               c.parallelResidual); // bloom_gelu is the tanh one; sequential
  EXPECT_TRUE(c.qkvBias && c.outputBias && c.mlpBias);
  EXPECT_EQ(c.normTensors(), 4);
  EXPECT_EQ(c.layerTensors(), 12);
  // A diagnostic about the heads or the layers points at n_head's and n_layer's lines.
  EXPECT_NE(c.where("num_heads"), c.path + ": ");
  EXPECT_NE(c.where("num_layers"), c.path + ": ");
  EXPECT_EQ(c.fieldPos.at("num_heads").key, "n_head");
  EXPECT_EQ(c.fieldPos.at("num_layers").key, "n_layer");
  const std::string head = R"({"architectures": ["BloomForCausalLM"], "hidden_size": 64, "n_head": 4,
    "n_layer": 2, "vocab_size": 128)";
  ModelConfig d;
  ASSERT_FALSE(parseModelConfig(head + "}", "tiny.json", d));
  EXPECT_EQ(d.headDim, 16);
  EXPECT_EQ(d.maxPositions, 2048);
  EXPECT_NE(parseError(head + R"(, "apply_residual_connection_post_layernorm": true})")
                .find("field 'apply_residual_connection_post_layernorm': a residual from the LayerNorm's output"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "slow_but_exact": true})").find("field 'slow_but_exact'"), std::string::npos);
  EXPECT_NE(parseError(head + R"(, "n_embed": 64})").find("field 'n_embed': is BloomConfig's old name"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "num_attention_heads": 4})").find("BloomConfig's alias of n_head; write n_head"),
            std::string::npos);
  EXPECT_NE(parseError(R"({"architectures": ["BloomForCausalLM"], "hidden_size": 64, "n_head": 6})")
                .find("field 'n_head': n_head=6 does not divide hidden_size=64"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "max_position_embeddings": 64})").find("unknown field for BloomForCausalLM"),
            std::string::npos);
}

// GPTBigCode: GPT-2's names and learned positions, nn.Linear layouts, c_attn
// grouped by kv head (one group under multi_query).
TEST(ModelConfig, GptBigCodeFields) {
  ModelConfig c = load("starcoder-15.5b");
  EXPECT_EQ(c.arch, Arch::GptBigCode);
  EXPECT_STREQ(hfArchitecture(c.arch), "GPTBigCodeForCausalLM");
  EXPECT_EQ(c.heads, 48);
  EXPECT_EQ(c.kvHeads, 1); // multi_query
  EXPECT_EQ(c.headDim, 128);
  EXPECT_EQ(c.intermediate, 24576);
  EXPECT_EQ(c.maxPositions, 8192);
  EXPECT_TRUE(groupedQkv(c.arch) && learnedPositions(c.arch) && !llamaLayout(c.arch) && layerNorms(c.arch));
  EXPECT_FALSE(c.mlpActivation == MlpActivation::GeluErf || c.parallelResidual || c.alibi);
  EXPECT_TRUE(c.qkvBias && c.outputBias && c.mlpBias && c.tieEmbeddings);
  EXPECT_EQ(c.layerTensors(), 12);
  EXPECT_EQ(c.fieldPos.at("num_kv_heads").key, "multi_query");
  EXPECT_EQ(c.fieldPos.at("num_layers").key, "n_layer");
  const std::string head = R"({"architectures": ["GPTBigCodeForCausalLM"], "n_embd": 64, "n_head": 4,
    "n_layer": 2, "vocab_size": 128, "n_positions": 32)";
  ModelConfig mha, exact;
  ASSERT_FALSE(parseModelConfig(head + R"(, "multi_query": false})", "mha.json", mha));
  EXPECT_EQ(mha.kvHeads, 4);
  EXPECT_EQ(mha.intermediate, 256); // n_inner null: 4 * n_embd
  ASSERT_FALSE(parseModelConfig(head + R"(, "activation_function": "gelu"})", "exact.json", exact));
  EXPECT_TRUE(exact.mlpActivation == MlpActivation::GeluErf);
  EXPECT_NE(parseError(head + R"(, "activation_function": "relu"})")
                .find("field 'activation_function': unsupported activation 'relu'"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "scale_attn_weights": false})").find("field 'scale_attn_weights': only true"),
            std::string::npos);
  EXPECT_NE(parseError(head + R"(, "num_key_value_heads": 1})").find("unknown field for GPTBigCodeForCausalLM"),
            std::string::npos);
  TrainingShape s;
  s.seqLen = 33;
  const std::optional<std::string> why = resolveTrainingShape(mha, 1, s);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("--seq-len 33 exceeds the 32 learned positions"), std::string::npos) << *why;
}

// MPT: GPT-2's layer with MptConfig's names (d_model, n_heads, n_layers,
// max_seq_len), ALiBi, LayerNorms of a weight alone, no biases; what
// transformers' MptModel hard-codes is refused when a config says otherwise.
TEST(ModelConfig, MptFields) {
  ModelConfig c = load("mpt-7b");
  EXPECT_EQ(c.arch, Arch::Mpt);
  EXPECT_STREQ(hfArchitecture(c.arch), "MptForCausalLM");
  EXPECT_EQ(c.heads, 32);
  EXPECT_EQ(c.kvHeads, 32);
  EXPECT_EQ(c.headDim, 128);
  EXPECT_EQ(c.intermediate, 16384);
  EXPECT_EQ(c.maxPositions, 2048);
  EXPECT_TRUE(gpt2Layer(c.arch) && !learnedPositions(c.arch) && !groupedQkv(c.arch) && layerNorms(c.arch));
  EXPECT_TRUE(c.alibi && c.mlpActivation == MlpActivation::GeluErf && c.tieEmbeddings);
  EXPECT_EQ(c.normParams, NormParams::WeightOnly);
  EXPECT_FALSE(c.qkvBias || c.outputBias || c.mlpBias || c.embeddingNorm || c.lmHeadBias);
  EXPECT_EQ(c.layerTensors(), 6); // norm_1, norm_2 (weights), Wqkv, out_proj, up_proj, down_proj
  EXPECT_EQ(c.normTensors(), 2);
  EXPECT_EQ(c.finalNormTensors(), 1);
  EXPECT_EQ(c.fieldPos.at("num_heads").key, "n_heads");
  EXPECT_EQ(c.fieldPos.at("num_layers").key, "n_layers");
  EXPECT_EQ(c.fieldPos.at("hidden_size").key, "d_model");
  const std::string head = R"({"architectures": ["MptForCausalLM"], "d_model": 64, "n_heads": 4,
    "n_layers": 2, "vocab_size": 128, "max_seq_len": 32)";
  ModelConfig plain, saved;
  ASSERT_FALSE(parseModelConfig(head + "}", "plain.json", plain)); // MptConfig's defaults
  EXPECT_EQ(plain.intermediate, 256);
  EXPECT_EQ(plain.normEps, 1e-5);
  // transformers 4.40's save_pretrained writes attn_config as {"model_type": ""}; nulls are defaults.
  ASSERT_FALSE(parseModelConfig(head + R"(, "attn_config": {"model_type": "", "clip_qkv": null,
    "softmax_scale": 0.25}, "logit_scale": null})",
                                "saved.json", saved));
  const std::pair<std::string, std::string> refused[] = {
      {R"(, "hidden_size": 64})", "field 'hidden_size': is MptConfig's alias of d_model"},
      {R"(, "expansion_ratio": 2})", "field 'expansion_ratio': transformers' MptMLP is 4·d_model wide"},
      {R"(, "no_bias": false})", "field 'no_bias': transformers' MptModel has no biases"},
      {R"(, "logit_scale": 0.5})", "field 'logit_scale': transformers' MptForCausalLM does not scale"},
      {R"(, "embedding_fraction": 0.1})", "field 'embedding_fraction'"},
      {R"(, "norm_type": "rmsnorm"})", "field 'norm_type': unsupported norm_type 'rmsnorm'"},
      {R"(, "attn_config": {"alibi": false}})", "field 'alibi': transformers' MptModel always adds ALiBi"},
      {R"(, "attn_config": {"alibi_bias_max": 16}})", "field 'alibi_bias_max'"},
      {R"(, "attn_config": {"clip_qkv": 8}})", "field 'clip_qkv': transformers' MptAttention does not clamp"},
      {R"(, "attn_config": {"qk_ln": true}})", "field 'qk_ln': is not implemented"},
      {R"(, "attn_config": {"softmax_scale": 0.5}})", "field 'softmax_scale': only 1/sqrt(head_dim)"},
      {R"(, "attn_config": {"attn_type": "multiquery_attention"}})", "field 'attn_type'"},
      {R"(, "attn_config": {"rope": true}})", "unknown field for MptForCausalLM's attn_config"},
      {R"(, "attn_config": 3})", "field 'attn_config': must be a JSON object"},
      {R"(, "n_positions": 32})", "unknown field for MptForCausalLM"},
  };
  for (const auto &[extra, want] : refused)
    EXPECT_NE(parseError(head + extra).find(want), std::string::npos) << extra << ": " << parseError(head + extra);
  // MosaicML's Hub configs name their remote code's class (transformers builds MptForCausalLM).
  ModelConfig hub;
  std::string hubText = head + "}";
  hubText.replace(hubText.find("MptForCausalLM"), 14, "MPTForCausalLM");
  ASSERT_FALSE(parseModelConfig(hubText, "hub.json", hub));
  EXPECT_EQ(hub.arch, Arch::Mpt);
  // ALiBi has no position table: --seq-len is not bounded by max_seq_len.
  TrainingShape s;
  s.seqLen = 64;
  EXPECT_FALSE(resolveTrainingShape(plain, 1, s));
}

// GPT-J: Phi's layer with GPT-2's names, rotate_every_two on rotary_dim of
// each head, no attention biases, the head's bias; EleutherAI's published
// config reads as is.
TEST(ModelConfig, GptJFields) {
  ModelConfig c = load("gpt-j-6b");
  EXPECT_EQ(c.arch, Arch::GptJ);
  EXPECT_STREQ(hfArchitecture(c.arch), "GPTJForCausalLM");
  EXPECT_EQ(c.heads, 16);
  EXPECT_EQ(c.headDim, 256);
  EXPECT_EQ(c.rotaryDim, 64);
  EXPECT_EQ(c.intermediate, 16384);
  EXPECT_TRUE(phiLayer(c.arch) && !llamaLayout(c.arch) && layerNorms(c.arch) && !learnedPositions(c.arch));
  EXPECT_TRUE(c.ropeInterleaved && c.mlpBias && c.lmHeadBias);
  EXPECT_FALSE(c.qkvBias || c.outputBias || c.tieEmbeddings || c.parallelResidual);
  EXPECT_EQ(c.layerTensors(), 10); // ln_1 (2), q k v out_proj, fc_in and fc_out with their biases
  EXPECT_EQ(c.fieldPos.at("num_heads").key, "n_head");
  const std::string head = R"({"architectures": ["GPTJForCausalLM"], "n_embd": 64, "n_head": 4,
    "n_layer": 2, "vocab_size": 128, "n_positions": 32)";
  ModelConfig full;
  ASSERT_FALSE(parseModelConfig(head + R"(, "rotary_dim": 16})", "full.json", full));
  EXPECT_EQ(full.rotaryDim, 0); // every dim of the head rotates
  const std::pair<std::string, std::string> refused[] = {
      {R"(, "hidden_size": 64})", "field 'hidden_size': is GPTJConfig's alias of n_embd"},
      {R"(, "rotary_dim": 7})", "field 'rotary_dim': must be even and at most head_dim = 16"},
      {R"(, "rotary_dim": 32})", "field 'rotary_dim': must be even and at most head_dim = 16"},
      {R"(, "rotary": false})", "field 'rotary': transformers' GPTJAttention always applies"},
      {R"(, "activation_function": "relu"})", "field 'activation_function': unsupported activation 'relu'"},
      {R"(, "n_head": 5})", "field 'n_head': n_head=5 does not divide n_embd=64"},
      {R"(, "rope_theta": 1000})", "unknown field for GPTJForCausalLM"},
  };
  for (const auto &[extra, want] : refused) {
    // rotary_dim defaults to GPT-J-6B's 64, wider than these 16-dim heads.
    std::string text = head + (extra.find("rotary_dim") == std::string::npos ? R"(, "rotary_dim": 8)" : "") + extra;
    if (extra.find("n_head") != std::string::npos)
      text = R"({"architectures": ["GPTJForCausalLM"], "n_embd": 64, "n_layer": 2, "vocab_size": 128)" + extra;
    EXPECT_NE(parseError(text).find(want), std::string::npos) << extra << ": " << parseError(text);
  }
}

// CodeGen: GPT-J's fields and layer, q, v and k from one GEMM in 4 blocks
// (qkv_proj, mp_num); Salesforce's published config reads as is.
TEST(ModelConfig, CodeGenFields) {
  ModelConfig c = load("codegen-350m-mono");
  EXPECT_EQ(c.arch, Arch::CodeGen);
  EXPECT_STREQ(hfArchitecture(c.arch), "CodeGenForCausalLM");
  EXPECT_STREQ(archName(c.arch), "codegen");
  EXPECT_EQ(c.numParameters(), 356712448); // what transformers' CodeGenForCausalLM counts on this config
  EXPECT_EQ(c.heads, 16);
  EXPECT_EQ(c.headDim, 64);
  EXPECT_EQ(c.rotaryDim, 32);
  EXPECT_EQ(c.qkvBlocks, 4);
  EXPECT_EQ(c.maxPositions, 2048);
  EXPECT_TRUE(phiLayer(c.arch) && layerNorms(c.arch) && !llamaLayout(c.arch) && !learnedPositions(c.arch) &&
              !groupedQkv(c.arch) && !tokenEmbeddingPadding(c.arch));
  EXPECT_TRUE(c.ropeInterleaved && c.mlpBias && c.lmHeadBias);
  EXPECT_FALSE(c.qkvBias || c.outputBias || c.tieEmbeddings || c.parallelResidual);
  EXPECT_EQ(c.layerTensors(), 8); // ln_1 (2), qkv_proj, out_proj, fc_in and fc_out with their biases
  EXPECT_EQ(c.fieldPos.at("num_heads").key, "n_head");
  const std::string head = R"({"architectures": ["CodeGenForCausalLM"], "n_embd": 64, "n_head": 4,
    "n_layer": 2, "vocab_size": 128, "n_positions": 32, "rotary_dim": 8)";
  ModelConfig small;
  ASSERT_FALSE(parseModelConfig(head + R"(, "n_ctx": 32})", "small.json", small));
  // wte, the head and its bias, ln_f; per layer ln_1, qkv_proj, out_proj, fc_in and fc_out with biases.
  EXPECT_EQ(small.numParameters(),
            2 * 128 * 64 + 128 + 2 * 64 + 2 * (2 * 64 + 3 * 64 * 64 + 64 * 64 + 2 * 64 * 256 + 256 + 64));
  const std::pair<std::string, std::string> refused[] = {
      {R"(, "hidden_size": 64})", "field 'hidden_size': is CodeGenConfig's alias of n_embd"},
      {R"(, "rotary": false})", "field 'rotary': transformers' CodeGenAttention always applies"},
      {R"(, "activation_function": "relu"})",
       "field 'activation_function': unsupported activation 'relu'; llc-dist implements CodeGen's tanh GELU"},
      {R"(, "n_head": 2})", "field 'n_head': n_head=2 is not a multiple of 4: CodeGen's qkv_proj holds 4 blocks"},
      {R"(, "rope_theta": 1000})", "unknown field for CodeGenForCausalLM"},
  };
  for (const auto &[extra, want] : refused) {
    std::string text = head + extra;
    if (extra.find("n_head") != std::string::npos)
      text = R"({"architectures": ["CodeGenForCausalLM"], "n_embd": 64, "n_layer": 2, "vocab_size": 128,
        "rotary_dim": 8)" +
             extra;
    EXPECT_NE(parseError(text).find(want), std::string::npos) << extra << ": " << parseError(text);
  }
}

// OPT: StarCoder2's sequential layer with learned positions from row 2 of
// their table, ReLU, biases everywhere, tied; what only opt-350m has (the
// LayerNorms after the residual, project_in / project_out) is refused.
TEST(ModelConfig, OptFields) {
  ModelConfig c = load("opt-6.7b");
  EXPECT_EQ(c.arch, Arch::Opt);
  EXPECT_STREQ(hfArchitecture(c.arch), "OPTForCausalLM");
  EXPECT_EQ(c.heads, 32);
  EXPECT_EQ(c.kvHeads, 32);
  EXPECT_EQ(c.headDim, 128);
  EXPECT_EQ(c.intermediate, 16384);
  EXPECT_EQ(c.maxPositions, 2048);
  EXPECT_EQ(c.positionOffset, 2);
  EXPECT_TRUE(c.mlpActivation == MlpActivation::Relu);
  EXPECT_TRUE(learnedPositions(c.arch) && !llamaLayout(c.arch) && layerNorms(c.arch) && !phiLayer(c.arch) &&
              !gpt2Layer(c.arch));
  EXPECT_TRUE(c.qkvBias && c.outputBias && c.mlpBias && c.tieEmbeddings && c.normParams == NormParams::Full);
  EXPECT_FALSE(c.parallelResidual || c.lmHeadBias || c.alibi);
  EXPECT_EQ(c.layerTensors(), 16); // two LayerNorms (4), q k v out_proj fc1 fc2 and their biases
  EXPECT_EQ(c.fieldPos.at("max_positions").key, "max_position_embeddings");
  // --seq-len is bounded by the positions (not the table's two extra rows).
  TrainingShape s;
  s.seqLen = 2049;
  std::optional<std::string> err = resolveTrainingShape(c, 1, s);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("exceeds the 2048 learned positions of opt-6.7b (max_position_embeddings)"), std::string::npos)
      << *err;
  s.seqLen = 2048;
  EXPECT_FALSE(resolveTrainingShape(c, 1, s));
  const std::string head = R"({"architectures": ["OPTForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
    "num_hidden_layers": 2, "vocab_size": 128, "ffn_dim": 128, "max_position_embeddings": 32)";
  ModelConfig small;
  ASSERT_FALSE(parseModelConfig(head + R"(, "word_embed_proj_dim": 64, "prefix": "</s>"})", "small.json", small));
  EXPECT_EQ(small.numParameters(),
            128 * 64 + 34 * 64 + 2 * (4 * 64 + 4 * 64 * 64 + 4 * 64 + 2 * 64 * 128 + 128 + 64) + 2 * 64);
  const std::pair<std::string, std::string> refused[] = {
      {R"(, "do_layer_norm_before": false})", "field 'do_layer_norm_before': the LayerNorms after the residual adds"},
      {R"(, "word_embed_proj_dim": 32})",
       "field 'word_embed_proj_dim': embeddings of another width than hidden_size=64"},
      {R"(, "_remove_final_layer_norm": true})", "field '_remove_final_layer_norm': a model without the final"},
      {R"(, "activation_function": "gelu"})", "field 'activation_function': unsupported activation 'gelu'"},
      {R"(, "enable_bias": false})", "field 'enable_bias': OPT without biases is not supported"},
      {R"(, "layer_norm_elementwise_affine": false})", "field 'layer_norm_elementwise_affine'"},
      {R"(, "word_embed_proj_dim": 0})", "field 'word_embed_proj_dim': must be a positive integer"},
      {R"(, "num_attention_heads": 5})", "field 'num_attention_heads': num_attention_heads=5 does not divide"},
      {R"(, "rope_theta": 1000})", "unknown field for OPTForCausalLM"},
  };
  for (const auto &[extra, want] : refused) {
    std::string text = head + extra;
    if (extra.find("num_attention_heads") != std::string::npos)
      text = R"({"architectures": ["OPTForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2)" + extra;
    EXPECT_NE(parseError(text).find(want), std::string::npos) << extra << ": " << parseError(text);
  }
}

// Cohere: StableLM's parallel layer with LayerNorms of a weight alone,
// rotary embeddings in adjacent pairs over whole heads, scaled logits;
// use_qk_norm (Command R+'s) is refused.
TEST(ModelConfig, CohereFields) {
  ModelConfig c = load("c4ai-command-r-v01");
  EXPECT_EQ(c.arch, Arch::Cohere);
  EXPECT_STREQ(hfArchitecture(c.arch), "CohereForCausalLM");
  EXPECT_EQ(c.heads, 64);
  EXPECT_EQ(c.kvHeads, 64);
  EXPECT_EQ(c.headDim, 128);
  EXPECT_EQ(c.intermediate, 22528);
  EXPECT_DOUBLE_EQ(c.logitScale, 0.0625);
  EXPECT_DOUBLE_EQ(c.ropeTheta, 8000000.0);
  EXPECT_TRUE(llamaLayout(c.arch) && layerNorms(c.arch) && !learnedPositions(c.arch));
  EXPECT_TRUE(c.parallelResidual && c.ropeInterleaved && c.tieEmbeddings);
  EXPECT_EQ(c.normParams, NormParams::WeightOnly);
  EXPECT_FALSE(c.parallelNorms || c.qkvBias || c.outputBias || c.mlpBias || c.lmHeadBias);
  EXPECT_EQ(c.rotaryDim, 0);
  EXPECT_EQ(c.layerTensors(), 8); // input_layernorm's weight, q k v o, gate up down
  EXPECT_EQ(c.fieldPos.at("logit_scale").key, "logit_scale");
  const std::string head = R"({"architectures": ["CohereForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
    "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 128, "intermediate_size": 96)";
  ModelConfig plain;
  ASSERT_FALSE(parseModelConfig(head + R"(, "attention_bias": true, "logit_scale": 0.5})", "plain.json", plain));
  EXPECT_TRUE(plain.qkvBias && plain.outputBias);
  EXPECT_DOUBLE_EQ(plain.logitScale, 0.5);
  ModelConfig dflt;
  ASSERT_FALSE(parseModelConfig(head + "}", "dflt.json", dflt));
  EXPECT_DOUBLE_EQ(dflt.logitScale, 0.0625); // CohereConfig's default
  const std::pair<std::string, std::string> refused[] = {
      {R"(, "use_qk_norm": true})", "field 'use_qk_norm': per-head LayerNorms of q and k"},
      {R"(, "logit_scale": 0})", "field 'logit_scale': must be a positive number"},
      {R"(, "logit_scale": 1e39})", "field 'logit_scale': must be a finite, non-zero fp32 number"},
      {R"(, "hidden_act": "gelu"})", "field 'hidden_act': unsupported activation 'gelu'"},
      {R"(, "rope_scaling": {"type": "linear", "factor": 2.0}})", "field 'rope_scaling'"},
      {R"(, "head_dim": 16})", "field 'head_dim': is not a field of CohereForCausalLM's config"},
      {R"(, "partial_rotary_factor": 0.5})", "unknown field for CohereForCausalLM"},
  };
  for (const auto &[extra, want] : refused)
    EXPECT_NE(parseError(head + extra).find(want), std::string::npos) << extra << ": " << parseError(head + extra);
}

// GPT-Neo: GPT-2's sequential layer with nn.Linear q, k, v (no biases),
// unscaled scores, and global and local layers from attention_types (or
// attention_layers where the file writes it, as transformers reads it).
TEST(ModelConfig, GptNeoFields) {
  ModelConfig c = load("gpt-neo-1.3b");
  EXPECT_EQ(c.arch, Arch::GptNeo);
  EXPECT_STREQ(hfArchitecture(c.arch), "GPTNeoForCausalLM");
  EXPECT_STREQ(archName(c.arch), "gpt_neo");
  EXPECT_EQ(c.heads, 16);
  EXPECT_EQ(c.kvHeads, 16);
  EXPECT_EQ(c.headDim, 128);
  EXPECT_EQ(c.intermediate, 8192); // intermediate_size null: 4 · hidden_size
  EXPECT_EQ(c.maxPositions, 2048);
  EXPECT_EQ(c.localWindow, 256);
  ASSERT_EQ(c.localLayers.size(), 12u);
  EXPECT_EQ(c.localLayers.front(), 1);
  EXPECT_EQ(c.localLayers.back(), 23);
  EXPECT_TRUE(c.localLayer(3) && !c.localLayer(4));
  EXPECT_TRUE(c.unscaledAttention && c.tieEmbeddings && c.outputBias && c.mlpBias);
  EXPECT_FALSE(c.qkvBias || c.lmHeadBias || c.parallelResidual);
  EXPECT_EQ(c.paddingIdx, -1); // GPTNeoModel's wte has no padding_idx
  EXPECT_TRUE(learnedPositions(c.arch) && layerNorms(c.arch) && !llamaLayout(c.arch) && !gpt2Layer(c.arch));
  EXPECT_TRUE(c.mlpActivation == MlpActivation::GeluTanh);
  EXPECT_EQ(c.layerTensors(), 13); // ln_1, ln_2 (4), q k v out_proj c_fc c_proj, out_proj's and the MLP's biases
  EXPECT_EQ(c.fieldPos.at("num_heads").key, "num_heads");
  EXPECT_EQ(c.fieldPos.at("num_layers").key, "num_layers");
  TrainingShape s;
  s.seqLen = 2049;
  std::optional<std::string> err = resolveTrainingShape(c, 1, s);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("exceeds the 2048 learned positions of gpt-neo-1.3b (max_position_embeddings)"),
            std::string::npos)
      << *err;
  const std::string head = R"({"architectures": ["GPTNeoForCausalLM"], "hidden_size": 64, "num_heads": 4,
    "num_layers": 3, "vocab_size": 128, "max_position_embeddings": 32)";
  const auto parse = [](const std::string &text) {
    ModelConfig m;
    std::optional<ConfigError> e = parseModelConfig(text, "neo.json", m);
    EXPECT_FALSE(e) << (e ? e->message : "");
    return m;
  };
  ModelConfig types = parse(head + R"(, "attention_types": [[["local"], 1], [["global", "local"], 1]]})");
  EXPECT_EQ(types.localLayers, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(types.intermediate, 256);
  // attention_layers, where written, is what transformers' model reads.
  ModelConfig layers = parse(head + R"(, "attention_types": [[["global"], 3]], "attention_layers": ["global",
    "global", "local"], "window_size": 4})");
  EXPECT_EQ(layers.localLayers, (std::vector<int64_t>{2}));
  EXPECT_EQ(layers.localWindow, 4);
  const std::pair<std::string, std::string> refused[] = {
      {R"(})", "field 'attention_types': gives 24 layers, but num_layers = 3 (transformers requires one entry per "
               "layer)"},
      {R"(, "attention_types": [[["global", "sparse"], 1], [["global"], 1]]})",
       "field 'attention_types': layer 1's attention kind is 'sparse'; GPTNeoAttention implements \"global\" and "
       "\"local\""},
      {R"(, "attention_types": [["global", 3]]})", "field 'attention_types': each entry must be [a list of"},
      {R"(, "attention_types": "global"})", "field 'attention_types': must be an array"},
      {R"(, "attention_types": [[["global"], 3]], "attention_layers": ["global"]})",
       "field 'attention_layers': must be an array of num_layers = 3 attention kinds"},
      {R"(, "attention_types": [[["global"], 3]], "window_size": 0})", "field 'window_size': must be a positive"},
      {R"(, "attention_types": [[["global"], 3]], "activation_function": "relu"})",
       "field 'activation_function': unsupported activation 'relu'"},
      {R"(, "attention_types": [[["global"], 3]], "num_attention_heads": 4})", "field 'num_attention_heads'"},
      {R"(, "attention_types": [[["global"], 3]], "rope_theta": 10000})", "unknown field for GPTNeoForCausalLM"},
  };
  for (const auto &[extra, want] : refused)
    EXPECT_NE(parseError(head + extra).find(want), std::string::npos) << extra << ": " << parseError(head + extra);
  // num_heads must divide hidden_size.
  EXPECT_NE(parseError(R"({"architectures": ["GPTNeoForCausalLM"], "hidden_size": 64, "num_heads": 5})")
                .find("field 'num_heads': num_heads=5 does not divide hidden_size=64"),
            std::string::npos);
}

TEST(ModelConfig, BioGptFields) {
  ModelConfig c = load("biogpt");
  EXPECT_EQ(c.arch, Arch::BioGpt);
  EXPECT_STREQ(hfArchitecture(c.arch), "BioGptForCausalLM");
  EXPECT_STREQ(archName(c.arch), "biogpt");
  EXPECT_EQ(c.numParameters(), 346763264); // microsoft/biogpt: "347M"
  EXPECT_EQ(c.heads, 16);
  EXPECT_EQ(c.kvHeads, 16);
  EXPECT_EQ(c.headDim, 64);
  EXPECT_EQ(c.intermediate, 4096);
  EXPECT_EQ(c.maxPositions, 1024);
  EXPECT_EQ(c.positionOffset, 2);
  EXPECT_EQ(c.paddingIdx, 1);
  EXPECT_EQ(c.normEps, 1e-5); // nn.LayerNorm's default: the file's layer_norm_eps 1e-12 is never read
  EXPECT_TRUE(c.mlpActivation == MlpActivation::GeluErf);
  EXPECT_TRUE(c.scaleEmbeddings);
  EXPECT_TRUE(learnedPositions(c.arch) && tokenEmbeddingPadding(c.arch) && layerNorms(c.arch) && !llamaLayout(c.arch) &&
              !phiLayer(c.arch) && !gpt2Layer(c.arch) && !groupedQkv(c.arch));
  EXPECT_TRUE(c.qkvBias && c.outputBias && c.mlpBias && c.tieEmbeddings && c.normParams == NormParams::Full);
  EXPECT_FALSE(c.parallelResidual || c.lmHeadBias || c.alibi || c.unscaledAttention);
  EXPECT_EQ(c.layerTensors(), 16); // two LayerNorms (4), q k v out_proj fc1 fc2 and their biases
  EXPECT_EQ(c.fieldPos.at("max_positions").key, "max_position_embeddings");
  const std::string head = R"({"architectures": ["BioGptForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
    "num_hidden_layers": 2, "vocab_size": 128, "intermediate_size": 128, "max_position_embeddings": 32)";
  ModelConfig small;
  ASSERT_FALSE(
      parseModelConfig(head + R"(, "scale_embedding": false, "tie_word_embeddings": false})", "small.json", small));
  EXPECT_FALSE(small.scaleEmbeddings);
  EXPECT_EQ(small.paddingIdx, 1); // BioGptConfig's default pad_token_id
  // The table and its head (output_projection), 34 positions, two layers, the final LayerNorm.
  EXPECT_EQ(small.numParameters(),
            2 * 128 * 64 + 34 * 64 + 2 * (4 * 64 + 4 * 64 * 64 + 4 * 64 + 2 * 64 * 128 + 128 + 64) + 2 * 64);
  const std::pair<std::string, std::string> refused[] = {
      {R"(, "hidden_act": "relu"})", "field 'hidden_act': unsupported activation 'relu'; llc-dist implements "
                                     "BioGPT's erf GELU (\"gelu\")"},
      {R"(, "scale_embedding": 1})", "field 'scale_embedding'"},
      {R"(, "num_attention_heads": 5})", "field 'num_attention_heads': num_attention_heads=5 does not divide"},
      {R"(, "rope_theta": 1000})", "unknown field for BioGptForCausalLM"},
  };
  for (const auto &[extra, want] : refused) {
    std::string text = head + extra;
    if (extra.find("num_attention_heads") != std::string::npos)
      text = R"({"architectures": ["BioGptForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2)" + extra;
    EXPECT_NE(parseError(text).find(want), std::string::npos) << extra << ": " << parseError(text);
  }
}

// The token embedding's padding_idx, as transformers builds it: pad_token_id,
// or the config class's default where the field is absent; null is none;
// families whose nn.Embedding takes no padding_idx ignore the field.
TEST(ModelConfig, PaddingIdxFromPadTokenId) {
  EXPECT_EQ(load("opt-125m").paddingIdx, 1);
  EXPECT_EQ(load("gemma-2b").paddingIdx, 0);
  EXPECT_EQ(load("olmo-7b").paddingIdx, 1);
  EXPECT_EQ(load("c4ai-command-r-v01").paddingIdx, 0);
  EXPECT_EQ(load("tiny-gemma").paddingIdx, -1); // "pad_token_id": null
  EXPECT_EQ(load("llama3-8b").paddingIdx, -1);  // absent, LlamaConfig's default None
  EXPECT_EQ(load("bloom-560m").paddingIdx, -1); // BLOOM's embedding has no padding_idx
  const auto parse = [](const std::string &arch, const std::string &extra) {
    ModelConfig c;
    const std::string mlp = arch == "OPTForCausalLM" ? R"("ffn_dim": 128)" : R"("intermediate_size": 96)";
    const std::string text = R"({"architectures": [")" + arch +
                             R"("], "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
      "vocab_size": 128, "max_position_embeddings": 32, )" +
                             mlp + extra + "}";
    std::optional<ConfigError> err = parseModelConfig(text, "pad.json", c);
    EXPECT_FALSE(err) << arch << extra << ": " << (err ? err->message : "");
    return c.paddingIdx;
  };
  EXPECT_EQ(parse("OPTForCausalLM", ""), 1); // OPTConfig's default
  EXPECT_EQ(parse("OPTForCausalLM", R"(, "pad_token_id": null)"), -1);
  EXPECT_EQ(parse("GemmaForCausalLM", ""), 0);
  EXPECT_EQ(parse("CohereForCausalLM", ""), 0);
  EXPECT_EQ(parse("OlmoForCausalLM", ""), 1);
  EXPECT_EQ(parse("BioGptForCausalLM", ""), 1);
  EXPECT_EQ(parse("LlamaForCausalLM", ""), -1);
  EXPECT_EQ(parse("Qwen2ForCausalLM", R"(, "pad_token_id": 127)"), 127);
  EXPECT_EQ(parse("LlamaForCausalLM", R"(, "pad_token_id": -1)"), 127); // nn.Embedding counts from the end
  EXPECT_EQ(parse("LlamaForCausalLM", R"(, "pad_token_id": -128)"), 0);
  const std::string head = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
    "num_hidden_layers": 2, "vocab_size": 128, "intermediate_size": 96)";
  const std::pair<std::string, std::string> refused[] = {
      {R"(, "pad_token_id": 128})",
       "field 'pad_token_id': the token embedding's padding_idx 128 is outside the vocabulary [0, 128) "
       "(vocab_size); set it to a token id below 128 or to null"},
      {R"(, "pad_token_id": -129})", "padding_idx -129 is outside the vocabulary [0, 128)"},
      {R"(, "pad_token_id": "<pad>"})", "field 'pad_token_id': must be a token id (an integer) or null"},
      {R"(, "pad_token_id": 1.5})", "field 'pad_token_id': must be a token id (an integer) or null"},
  };
  for (const auto &[extra, want] : refused)
    EXPECT_NE(parseError(head + extra).find(want), std::string::npos) << extra << ": " << parseError(head + extra);
  // GPT-2's wte has no padding_idx: the field stays metadata, whatever it holds.
  ModelConfig gpt2;
  ASSERT_FALSE(parseModelConfig(R"({"architectures": ["GPT2LMHeadModel"], "n_embd": 64, "n_head": 4, "n_layer": 2,
    "vocab_size": 128, "n_positions": 32, "pad_token_id": 500})",
                                "gpt2.json", gpt2));
  EXPECT_EQ(gpt2.paddingIdx, -1);
}

TEST(ModelConfig, LlamaFields) {
  ModelConfig c = load("llama3.1-405b");
  EXPECT_EQ(c.arch, Arch::Llama);
  EXPECT_EQ(c.layers, 126);
  EXPECT_EQ(c.heads, 128);
  EXPECT_EQ(c.kvHeads, 8);
  EXPECT_EQ(c.headDim, 128);
  EXPECT_FALSE(c.tieEmbeddings);
  EXPECT_DOUBLE_EQ(c.ropeTheta, 500000.0);
  ASSERT_TRUE(c.ropeScaling.has_value());
  EXPECT_DOUBLE_EQ(c.ropeScaling->factor, 8.0);
  EXPECT_EQ(c.ropeScaling->originalMaxPositions, 8192);
}

TEST(ModelConfig, ExplicitHeadDimAndDefaults) {
  ModelConfig c;
  auto err = parseModelConfig(
      R"({"model_type": "llama", "hidden_size": 96, "intermediate_size": 64,
          "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 32,
          "head_dim": 32})",
      "m.json", c);
  ASSERT_FALSE(err) << err->message;
  EXPECT_EQ(c.headDim, 32);
  EXPECT_EQ(c.kvHeads, 4);         // defaults to num_attention_heads
  EXPECT_DOUBLE_EQ(c.ropeTheta, 10000.0);
  EXPECT_FALSE(c.tieEmbeddings);   // Llama's default
}

TEST(ModelConfig, Errors) {
  // Malformed JSON: located.
  EXPECT_NE(parseError("{\"n_embd\": 64,\n  oops}").find("bad.json:2:"),
            std::string::npos);
  EXPECT_NE(parseError("[1, 2]").find("expected a JSON object"),
            std::string::npos);
  // Unsupported architecture names the field.
  EXPECT_NE(parseError(R"({"architectures": ["BertModel"]})")
                .find("field 'architectures': unsupported architecture"),
            std::string::npos);
  EXPECT_NE(parseError("{}").find("missing field 'architectures'"),
            std::string::npos);
  // Missing field.
  EXPECT_NE(parseError(R"({"architectures": ["GPT2LMHeadModel"]})")
                .find("missing field 'vocab_size'"),
            std::string::npos);
  // Unknown field, located at its line.
  std::string unknown = parseError(
      std::string(kGpt2).insert(1, "\n\"n_embed\": 64,"));
  EXPECT_NE(unknown.find("bad.json:2:1: field 'n_embed': unknown field"),
            std::string::npos)
      << unknown;
  // Wrong type / value.
  std::string neg = kGpt2;
  neg.replace(neg.find("\"n_layer\": 2"), 12, "\"n_layer\": -2");
  EXPECT_NE(parseError(neg).find("field 'n_layer': must be a positive integer"),
            std::string::npos);
  // Heads that do not divide hidden.
  std::string heads = kGpt2;
  heads.replace(heads.find("\"n_head\": 4"), 11, "\"n_head\": 5");
  EXPECT_NE(parseError(heads).find("n_head=5 does not divide n_embd=64"),
            std::string::npos);
  // KV heads that do not divide heads.
  EXPECT_NE(parseError(R"({"model_type": "llama", "hidden_size": 64,
      "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 3,
      "num_hidden_layers": 1, "vocab_size": 32})")
                .find("num_key_value_heads=3 does not divide num_attention_heads=4"),
            std::string::npos);
  EXPECT_NE(parseError(R"({"model_type": "llama", "hidden_size": 64,
      "intermediate_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1,
      "vocab_size": 32, "rope_scaling": {"rope_type": "yarn", "factor": 2.0}})")
                .find("unsupported rope_type 'yarn'"),
            std::string::npos);
  EXPECT_NE(parseError(R"({"model_type": "llama", "hidden_size": 64,
      "intermediate_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1,
      "vocab_size": 32, "hidden_act": "gelu"})")
                .find("field 'hidden_act'"),
            std::string::npos);
}

// rope_theta is checked with the runtime's rule (rt::schema::kRopeThetaRule): the runtime computes
// RoPE in fp32, where a double subnormal is 0 and 1e39 is inf (issue #16).
TEST(ModelConfig, RopeThetaInTheRuntimesFp32Range) {
  auto llama = [](const std::string &theta) {
    return R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 32, "rope_theta": )" +
           theta + "}";
  };
  for (const char *theta : {"5e-324", "1e-39", "1e+39"}) {
    std::string err = parseError(llama(theta));
    EXPECT_NE(err.find("field 'rope_theta': must be a positive number in the normal fp32 range "
                       "[1.17549435e-38, 3.40282347e+38] (the runtime computes RoPE frequencies "
                       "in fp32), got " + std::string(theta)),
              std::string::npos)
        << err;
  }
  for (const char *theta : {"1.2e-38", "3.4e38", "500000.0"}) {
    ModelConfig c;
    auto err = parseModelConfig(llama(theta), "ok.json", c);
    EXPECT_FALSE(err) << theta << ": " << (err ? err->message : "");
  }
}

TEST(ModelConfig, MissingFile) {
  ModelConfig c;
  auto err = loadModelConfig("/nonexistent/model.json", c);
  ASSERT_TRUE(err);
  EXPECT_NE(err->message.find("/nonexistent/model.json: cannot open"),
            std::string::npos);
}

TEST(TrainingShape, DefaultsAndErrors) {
  ModelConfig c = load("tiny-gpt2");
  TrainingShape s;
  EXPECT_FALSE(resolveTrainingShape(c, 2, s));
  EXPECT_EQ(s.seqLen, 64); // min(n_positions, 1024)
  EXPECT_EQ(s.globalBatch, 2);
  EXPECT_EQ(s.microbatches(2), 1);

  TrainingShape longSeq;
  longSeq.seqLen = 65;
  auto e1 = resolveTrainingShape(c, 1, longSeq);
  ASSERT_TRUE(e1);
  EXPECT_NE(e1->find("exceeds the 64 learned positions"), std::string::npos);

  TrainingShape odd;
  odd.microBatch = 2;
  odd.globalBatch = 6;
  auto e2 = resolveTrainingShape(c, 2, odd);
  ASSERT_TRUE(e2);
  EXPECT_NE(e2->find("not a multiple of --micro-batch × dp = 4"),
            std::string::npos);

  TrainingShape accum;
  accum.microBatch = 2;
  accum.globalBatch = 16;
  EXPECT_FALSE(resolveTrainingShape(c, 2, accum));
  EXPECT_EQ(accum.microbatches(2), 4);

  TrainingShape dtype;
  dtype.dtype = "fp8";
  EXPECT_TRUE(resolveTrainingShape(c, 1, dtype));
}

// The frontend remembers where the fields that shape the graph are, by role,
// so pass diagnostics can point at them (the roles are xf.model's keys).
TEST(ModelConfig, FieldPositionsByRole) {
  const char *text = "{\n"
                     "  \"architectures\": [\"LlamaForCausalLM\"],\n"
                     "  \"hidden_size\": 64,\n"
                     "  \"intermediate_size\": 128,\n"
                     "    \"num_attention_heads\": 4,\n"
                     "  \"num_hidden_layers\": 2,\n"
                     "  \"vocab_size\": 128\n"
                     "}\n";
  ModelConfig c;
  ASSERT_FALSE(parseModelConfig(text, "m.json", c));
  auto at = [&](const char *role) {
    auto it = c.fieldPos.find(role);
    return it == c.fieldPos.end()
               ? std::string("-")
               : it->second.key + "@" + std::to_string(it->second.line) + ":" +
                     std::to_string(it->second.column);
  };
  EXPECT_EQ(at("num_heads"), "num_attention_heads@5:5");
  // No num_key_value_heads: kv heads default to the heads, so that field.
  EXPECT_EQ(at("num_kv_heads"), "num_attention_heads@5:5");
  EXPECT_EQ(at("num_layers"), "num_hidden_layers@6:3");
  EXPECT_EQ(at("vocab_size"), "vocab_size@7:3");
  EXPECT_EQ(at("hidden_size"), "hidden_size@3:3");
  EXPECT_EQ(at("max_positions"), "-"); // defaulted: no field to point at
  EXPECT_EQ(c.where("num_layers"), "m.json:6:3: ");
  EXPECT_EQ(c.where("max_positions"), "m.json: ");
}

// The mixtures of experts: total parameters as the safetensors indexes give
// them (total_size / 2 bytes) and the active ones (top_k experts per token),
// from the formula. Mixtral-8x7B: "46.7B total, 12.9B active"; Qwen1.5-MoE-
// A2.7B: 14.3B total, "2.7B activated".
TEST(ModelConfig, MixtureOfExpertsParameterCounts) {
  ModelConfig mixtral = load("mixtral-8x7b");
  EXPECT_EQ(mixtral.numParameters(), 46702792704);
  EXPECT_EQ(mixtral.activeParameters(), 12879925248);
  ModelConfig qwen = load("qwen1.5-moe-a2.7b");
  EXPECT_EQ(qwen.numParameters(), 14315784192);
  EXPECT_EQ(qwen.activeParameters(), 2689173504);
  // A dense model: every parameter is active.
  EXPECT_EQ(load("llama3-8b").activeParameters(), load("llama3-8b").numParameters());
  // The tiny ones, by hand: tiny-mixtral's layer is 2·64 (norms) + 10,240
  // (q, k, v, o) + 4·64 (router) + 4 experts · 3·64·96; two of them active.
  ModelConfig tiny = load("tiny-mixtral");
  EXPECT_EQ(tiny.layerParameters(), 128 + 10240 + 256 + 4 * 3 * 64 * 96);
  EXPECT_EQ(tiny.numParameters(), 2 * 256 * 64 + 64 + 4 * tiny.layerParameters());
  EXPECT_EQ(tiny.activeParameters(), 2 * 256 * 64 + 64 + 4 * (128 + 10240 + 256 + 2 * 3 * 64 * 96));
  // Router, three stacked expert weights, norms, q k v o; Qwen2-MoE adds the
  // q, k, v biases and the shared expert (three matrices and its gate).
  EXPECT_EQ(tiny.layerTensors(), 10);
  EXPECT_EQ(load("tiny-qwen2-moe").layerTensors(), 17);
}

TEST(ModelConfig, MixtureOfExpertsFields) {
  ModelConfig m = load("mixtral-8x7b");
  EXPECT_EQ(m.arch, Arch::Mixtral);
  EXPECT_EQ(std::string(hfArchitecture(m.arch)), "MixtralForCausalLM");
  ASSERT_TRUE(m.moe);
  EXPECT_EQ(m.moe->experts, 8);
  EXPECT_EQ(m.moe->topK, 2);
  EXPECT_EQ(m.moe->intermediate, 14336); // Mixtral's intermediate_size is each expert's
  EXPECT_EQ(m.moe->sharedIntermediate, 0);
  EXPECT_TRUE(m.moe->normalizeTopK);
  EXPECT_EQ(m.slidingWindow, 0); // null
  EXPECT_FALSE(m.qkvBias);
  EXPECT_TRUE(llamaLayout(m.arch));
  ModelConfig q = load("qwen1.5-moe-a2.7b");
  EXPECT_EQ(q.arch, Arch::Qwen2Moe);
  ASSERT_TRUE(q.moe);
  EXPECT_EQ(q.moe->experts, 60);
  EXPECT_EQ(q.moe->topK, 4);
  EXPECT_EQ(q.moe->intermediate, 1408);
  EXPECT_EQ(q.moe->sharedIntermediate, 5632);
  EXPECT_FALSE(q.moe->normalizeTopK);
  EXPECT_TRUE(q.qkvBias);
  EXPECT_FALSE(q.outputBias);
  EXPECT_FALSE(load("llama3-8b").moe);
  // MixtralConfig's defaults: rope_theta 1e6, rms_norm_eps 1e-5, no window.
  ModelConfig d;
  ASSERT_FALSE(parseModelConfig(R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 64,
    "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128})",
                                "m.json", d));
  EXPECT_DOUBLE_EQ(d.ropeTheta, 1e6);
  EXPECT_DOUBLE_EQ(d.normEps, 1e-5);
  EXPECT_EQ(d.slidingWindow, 0);
  EXPECT_EQ(d.moe->experts, 8);
  EXPECT_EQ(d.moe->topK, 2);
  // The load-balancing loss only with output_router_logits (transformers
  // adds it to the loss then), at router_aux_loss_coef (default 0.001).
  EXPECT_EQ(m.moe->auxLossCoef, 0); // Mixtral-8x7B's config: false
  const std::string head = R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128, "output_router_logits": true)";
  ModelConfig aux;
  ASSERT_FALSE(parseModelConfig(head + R"(, "router_aux_loss_coef": 0.02})", "a.json", aux));
  EXPECT_DOUBLE_EQ(aux.moe->auxLossCoef, 0.02);
  ASSERT_FALSE(parseModelConfig(head + "}", "a.json", aux));
  EXPECT_DOUBLE_EQ(aux.moe->auxLossCoef, 0.001);
}

// What llc-dist does not build yet is refused by name, with the fix.
TEST(ModelConfig, MixtureOfExpertsRefusals) {
  const std::string mixtral = R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 64,
    "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128)";
  const std::string qwen = R"({"architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 64,
    "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128)";
  EXPECT_NE(parseError(mixtral + R"(, "num_local_experts": 4, "num_experts_per_tok": 5})")
                .find("field 'num_experts_per_tok': num_experts_per_tok=5 is more than the 4 experts"),
            std::string::npos);
  EXPECT_NE(parseError(mixtral + R"(, "router_jitter_noise": 0.01})").find("field 'router_jitter_noise': must be 0"),
            std::string::npos);
  EXPECT_NE(parseError(mixtral + R"(, "router_aux_loss_coef": -1})")
                .find("field 'router_aux_loss_coef': must be a number in [0, 1e6]"),
            std::string::npos);
  // Dense layers: mlp_only_layers holds layer indices, and some layer must stay sparse.
  EXPECT_NE(parseError(qwen + R"(, "mlp_only_layers": [2]})")
                .find("field 'mlp_only_layers': must hold layer indices in [0, num_hidden_layers=2), got 2"),
            std::string::npos);
  EXPECT_NE(parseError(qwen + R"(, "mlp_only_layers": 1})").find("field 'mlp_only_layers': must be an array"),
            std::string::npos);
  EXPECT_NE(parseError(qwen + R"(, "decoder_sparse_step": 3})")
                .find("field 'decoder_sparse_step': leaves no layer a mixture of experts"),
            std::string::npos);
  EXPECT_NE(parseError(qwen + R"(, "decoder_sparse_step": 2, "mlp_only_layers": [1]})")
                .find("field 'mlp_only_layers': leaves no layer a mixture of experts"),
            std::string::npos);
  EXPECT_NE(parseError(qwen + R"(, "num_experts": 0})").find("field 'num_experts': must be a positive integer"),
            std::string::npos);
  // Each family's own field names: Mixtral has no num_experts.
  EXPECT_NE(parseError(mixtral + R"(, "num_experts": 8})").find("unknown field for MixtralForCausalLM"),
            std::string::npos);
  ModelConfig ok;
  EXPECT_FALSE(parseModelConfig(qwen + R"(, "mlp_only_layers": [], "decoder_sparse_step": 1})", "q.json", ok));
  EXPECT_TRUE(ok.moe->denseLayers.empty());
  EXPECT_EQ(ok.sparseLayers(), 2);
}

// Qwen2MoeDecoderLayer's rule: layer i is sparse iff it is not in
// mlp_only_layers and (i + 1) % decoder_sparse_step == 0; the dense layers'
// MLPs have intermediate_size, and the parameter count follows.
TEST(ModelConfig, Qwen2MoeDenseLayers) {
  const std::string qwen = R"({"architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 64,
    "intermediate_size": 96, "moe_intermediate_size": 16, "shared_expert_intermediate_size": 32,
    "num_experts": 4, "num_experts_per_tok": 2, "num_hidden_layers": 6, "num_attention_heads": 4,
    "vocab_size": 128)";
  ModelConfig all, mixed;
  ASSERT_FALSE(parseModelConfig(qwen + "}", "q.json", all));
  ASSERT_FALSE(parseModelConfig(qwen + R"(, "decoder_sparse_step": 2, "mlp_only_layers": [3, 0]})", "q.json", mixed));
  EXPECT_EQ(mixed.moe->denseLayers, (std::vector<int64_t>{0, 2, 3, 4}));
  EXPECT_EQ(mixed.sparseLayers(), 2);
  EXPECT_TRUE(mixed.sparseLayer(1));
  EXPECT_TRUE(mixed.sparseLayer(5));
  EXPECT_FALSE(mixed.sparseLayer(3));
  EXPECT_TRUE(all.sparseLayer(3));
  // Four of six layers trade the router (4·64), four experts (4·3·64·16),
  // the shared expert (3·64·32) and its gate (64) for a dense MLP (3·64·96).
  const int64_t sparseMlp = 4 * 64 + 4 * 3 * 64 * 16 + 3 * 64 * 32 + 64, denseMlp = 3 * 64 * 96;
  EXPECT_EQ(all.numParameters() - mixed.numParameters(), 4 * (sparseMlp - denseMlp));
  // Active: top-2 of the 4 experts in the two sparse layers only.
  EXPECT_EQ(all.activeParameters() - mixed.activeParameters(), 4 * (sparseMlp - 2 * 3 * 64 * 16 - denseMlp));
}
