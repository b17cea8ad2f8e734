//===- ModelFamilies.cpp - each family's config.json fields -----------------===//
//
// The fields of each transformers config class llc-dist builds (LlamaConfig
// and the Llama-shaped families', PhiConfig, StableLmConfig, OlmoConfig,
// Starcoder2Config, GPTNeoXConfig, FalconConfig, GPTJConfig, CohereConfig; the
// GPT-2-style ones without rotary embeddings are GptFamilies.cpp's) into one
// ModelConfig. What llc-dist does not build is refused by name.
//
//===----------------------------------------------------------------------===//
#include "ConfigFields.h"

#include "llcdist/runtime/FloatAttrRules.h" // header-only: the runtime's rule for clamp's limit
#include "llcdist/runtime/PlanSchema.h"     // header-only: the runtime's rule for rope_theta

#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>

using namespace llcdist;

namespace llcdist::config {

namespace {

/// rope_theta, under the runtime's own rule (PlanSchema.h), so no config
/// compiles to a plan the runtime refuses (5e-324 is a positive double but
/// 0 in fp32).
void readRopeTheta(FieldReader &r, ModelConfig &c, const json &obj, double dflt = 10000.0,
                   const char *key = "rope_theta") {
  c.ropeTheta = r.positiveFloat(key, dflt);
  if (!llcdist::rt::schema::ropeThetaInRange(c.ropeTheta))
    r.fail(key, std::string(llcdist::rt::schema::kRopeThetaRule) + ", got " + obj.at(key).dump());
}

/// Every query head's group has a kv head: num_key_value_heads divides
/// num_attention_heads.
void checkKvHeads(FieldReader &r, const ModelConfig &c) {
  if (c.heads % c.kvHeads != 0)
    r.fail("num_key_value_heads", "num_key_value_heads=" + std::to_string(c.kvHeads) +
                                      " does not divide num_attention_heads=" + std::to_string(c.heads));
}

/// A family whose rope_scaling llc-dist does not implement: null or absent
/// only; `why` ends the message ("must be null for Qwen2 (...)").
void refuseRopeScaling(FieldReader &r, const std::string &why) {
  if (r.has("rope_scaling"))
    r.fail("rope_scaling", "must be null for " + why);
  r.ignore({"rope_scaling"});
}

/// The mixture-of-experts fields of MixtralConfig and Qwen2MoeConfig
/// (transformers 4.40). What llc-dist does not build yet is refused by name.
void parseMoe(FieldReader &r, ModelConfig &c, const json &obj) {
  MoeConfig e;
  const bool qwen = c.arch == Arch::Qwen2Moe;
  const char *expertsKey = qwen ? "num_experts" : "num_local_experts";
  e.experts = r.positiveInt(expertsKey, qwen ? 60 : 8);
  e.topK = r.positiveInt("num_experts_per_tok", qwen ? 4 : 2);
  if (e.topK > e.experts)
    r.fail("num_experts_per_tok", "num_experts_per_tok=" + std::to_string(e.topK) + " is more than the " +
                                      std::to_string(e.experts) + " experts (" + expertsKey + ")");
  e.intermediate = qwen ? r.positiveInt("moe_intermediate_size", 1408) : c.intermediate;
  if (qwen) {
    e.sharedIntermediate = r.positiveInt("shared_expert_intermediate_size", 5632);
    e.normalizeTopK = r.boolean("norm_topk_prob", false);
    // Qwen2MoeDecoderLayer: layer i is sparse iff it is not in mlp_only_layers
    // and (i + 1) % decoder_sparse_step == 0; the others have a dense MLP.
    const int64_t step = r.positiveInt("decoder_sparse_step", 1);
    std::vector<bool> dense(size_t(c.layers), false);
    if (r.has("mlp_only_layers")) {
      const json &only = obj.at("mlp_only_layers");
      if (!only.is_array())
        r.fail("mlp_only_layers", "must be an array of layer indices, got " + only.dump());
      for (const json &i : only) {
        if (!i.is_number_integer() || i.get<int64_t>() < 0 || i.get<int64_t>() >= c.layers)
          r.fail("mlp_only_layers",
                 "must hold layer indices in [0, num_hidden_layers=" + std::to_string(c.layers) + "), got " + i.dump());
        dense[size_t(i.get<int64_t>())] = true;
      }
    }
    r.ignore({"mlp_only_layers"});
    for (int64_t i = 0; i < c.layers; ++i)
      if (dense[size_t(i)] || (i + 1) % step != 0)
        e.denseLayers.push_back(i);
    if (int64_t(e.denseLayers.size()) == c.layers)
      r.fail(step > c.layers ? "decoder_sparse_step" : "mlp_only_layers",
             "leaves no layer a mixture of experts (layer i is sparse iff it is not in mlp_only_layers and "
             "(i + 1) % decoder_sparse_step == 0); a model without experts is a Qwen2ForCausalLM");
  } else {
    const json *jitter = r.has("router_jitter_noise") ? &r.get("router_jitter_noise") : nullptr;
    if (jitter && !(jitter->is_number() && jitter->get<double>() == 0))
      r.fail("router_jitter_noise", "must be 0: jitter multiplies the router's input by random noise in "
                                    "training, and llc-dist's steps are deterministic");
    r.ignore({"router_jitter_noise"});
  }
  // transformers adds router_aux_loss_coef × the load-balancing loss to the
  // loss when output_router_logits (load_balancing_loss_func over every
  // layer's router logits).
  const bool auxLoss = r.boolean("output_router_logits", false);
  const json *coef = r.has("router_aux_loss_coef") ? &r.get("router_aux_loss_coef") : nullptr;
  if (coef && !(coef->is_number() && coef->get<double>() >= 0 && coef->get<double>() <= 1e6))
    r.fail("router_aux_loss_coef", "must be a number in [0, 1e6], got " + coef->dump());
  r.ignore({"router_aux_loss_coef"});
  if (auxLoss)
    e.auxLossCoef = coef ? coef->get<double>() : 0.001; // both configs' default
  c.moe = e;
}
} // namespace

/// Llama's fields, Qwen2's (LlamaForCausalLM's layer with biases on q, k
/// and v only; transformers' Qwen2Config has no head_dim, attention_bias,
/// mlp_bias or pretraining_tp; its sliding window is off unless
/// use_sliding_window, which is refused) and Mistral's (Llama's layer without
/// biases and with sliding_window; MistralConfig 4.40 has no head_dim either).
void parseLlama(FieldReader &r, ModelConfig &c, const json &obj) {
  // Mixtral has Mistral's attention and Qwen2-MoE Qwen2's.
  const bool mixtral = c.arch == Arch::Mixtral;
  const bool qwen2 = c.arch == Arch::Qwen2 || c.arch == Arch::Qwen2Moe, mistral = c.arch == Arch::Mistral || mixtral,
             gemma = c.arch == Arch::Gemma;
  c.vocab = r.positiveInt("vocab_size");
  c.hidden = r.positiveInt("hidden_size");
  c.intermediate = r.positiveInt("intermediate_size");
  c.layers = r.positiveInt("num_hidden_layers");
  c.heads = r.positiveInt("num_attention_heads");
  c.kvHeads = r.positiveInt("num_key_value_heads", c.heads);
  c.maxPositions = r.positiveInt("max_position_embeddings", qwen2 ? 32768 : mistral ? 131072 : gemma ? 8192 : 2048);
  if ((qwen2 || mistral) && r.has("head_dim"))
    r.fail("head_dim", std::string("is not a field of ") + hfArchitecture(c.arch) +
                           "'s config in transformers 4.40 (head_dim is hidden_size / num_attention_heads); remove it");
  if (!r.has("head_dim") && !gemma && c.hidden % c.heads != 0)
    r.fail("num_attention_heads", "num_attention_heads=" + std::to_string(c.heads) + " does not divide hidden_size=" +
                                      std::to_string(c.hidden) + "; fix it or give head_dim explicitly");
  c.headDim = r.positiveInt("head_dim", gemma ? 256 : c.hidden / c.heads); // GemmaConfig's default: 256
  if (c.headDim % 2 != 0)
    r.fail("head_dim", "must be even for rotary embeddings, got " + std::to_string(c.headDim));
  checkKvHeads(r, c);
  c.normEps = r.positiveFloat("rms_norm_eps", mixtral ? 1e-5 : 1e-6);
  readRopeTheta(r, c, obj, mixtral ? 1e6 : 10000.0);
  c.tieEmbeddings = r.boolean("tie_word_embeddings", gemma);
  if (c.arch == Arch::Mixtral || c.arch == Arch::Qwen2Moe)
    parseMoe(r, c, obj);
  r.ignore({"attention_dropout"});
  if (gemma) {
    // transformers 4.40's GemmaMLP: hidden_activation, else the tanh GELU
    // whatever hidden_act says (it warns that exact GELU was a mistake).
    r.string("hidden_act", "gelu_pytorch_tanh");
    std::string act = r.string("hidden_activation", "gelu_pytorch_tanh");
    if (act != "gelu_pytorch_tanh" && act != "gelu_new")
      r.fail("hidden_activation",
             "unsupported activation '" + act + "'; Gemma's MLP is GeGLU with the tanh GELU (\"gelu_pytorch_tanh\")");
    c.gatedGelu = c.scaleEmbeddings = true;
    c.normWeightOffset = 1; // GemmaRMSNorm: x · rstd · (1 + w)
    c.qkvBias = c.outputBias = r.boolean("attention_bias", false);
    c.mlpBias = false;
    refuseRopeScaling(r, "Gemma (GemmaConfig has no rope scaling)");
    return;
  }
  std::string act = r.string("hidden_act", "silu");
  if (act != "silu")
    r.fail("hidden_act", "unsupported activation '" + act + "'; Llama's MLP is SwiGLU (\"silu\")");
  if (mistral) {
    c.qkvBias = c.outputBias = c.mlpBias = false;
    // MistralConfig's default window is 4096 (MixtralConfig's None); null is
    // plain causal attention.
    if ((obj.contains("sliding_window") && obj.at("sliding_window").is_null()) ||
        (mixtral && !obj.contains("sliding_window")))
      r.ignore({"sliding_window"});
    else
      c.slidingWindow = r.positiveInt("sliding_window", 4096);
    refuseRopeScaling(r, "Mistral (no scaling is implemented for it)");
    return;
  }
  if (qwen2) {
    c.qkvBias = true;
    c.outputBias = c.mlpBias = false;
    if (r.boolean("use_sliding_window", false))
      r.fail("use_sliding_window", "sliding-window attention is not implemented; only false (full causal "
                                   "attention, Qwen2's default) is supported");
    r.ignore({"sliding_window", "max_window_layers"}); // only read with use_sliding_window
    refuseRopeScaling(r, "Qwen2 (its YaRN scaling is not implemented)");
    return;
  }
  c.qkvBias = c.outputBias = r.boolean("attention_bias", false);
  c.mlpBias = r.boolean("mlp_bias", false);
  if (r.has("pretraining_tp") &&
      !(obj.at("pretraining_tp").is_number_integer() && obj.at("pretraining_tp").get<int64_t>() == 1))
    r.fail("pretraining_tp", "only 1 is supported (it changes numerics only)");
  r.ignore({"pretraining_tp"});
  if (r.has("rope_scaling")) {
    const json &s = r.get("rope_scaling");
    if (!s.is_object())
      r.fail("rope_scaling", "must be an object or null");
    std::string type = s.value("rope_type", s.value("type", std::string()));
    if (type != "llama3")
      r.fail("rope_scaling", "unsupported rope_type '" + type + "'; only \"llama3\" is implemented");
    RopeScaling rs;
    auto num = [&](const char *k) {
      if (!s.contains(k) || !s.at(k).is_number() || !(s.at(k).get<double>() > 0))
        r.fail("rope_scaling", std::string("needs a positive number '") + k + "'");
      return s.at(k).get<double>();
    };
    rs.factor = num("factor");
    rs.lowFreqFactor = num("low_freq_factor");
    rs.highFreqFactor = num("high_freq_factor");
    // In max_position_embeddings' range before the cast (1e300 would be UB).
    double original = num("original_max_position_embeddings");
    if (!(original >= 1 && original <= double(r.maxFor("max_position_embeddings"))))
      r.fail("rope_scaling", "'original_max_position_embeddings' must be in [1, " +
                                 std::to_string(r.maxFor("max_position_embeddings")) + "], got " +
                                 s.at("original_max_position_embeddings").dump());
    rs.originalMaxPositions = static_cast<int64_t>(original);
    if (!llcdist::rt::schema::ropeScalingValid(rs.factor, rs.lowFreqFactor, rs.highFreqFactor,
                                               double(rs.originalMaxPositions)))
      r.fail("rope_scaling", std::string(llcdist::rt::schema::kRopeScalingRule) + ", got factor " +
                                 s.at("factor").dump() + ", low_freq_factor " + s.at("low_freq_factor").dump() +
                                 ", high_freq_factor " + s.at("high_freq_factor").dump());
    c.ropeScaling = rs;
  } else {
    r.ignore({"rope_scaling"});
  }
}

namespace {

/// partial_rotary_factor (PhiConfig's default 0.5, StableLmConfig's 0.25;
/// GPTNeoXConfig's rotary_pct, 0.25): int(factor * head_dim) dims of each
/// head rotate, as PhiAttention, StableLmAttention and GPTNeoXAttention cut
/// them.
void readPartialRotary(FieldReader &r, ModelConfig &c, const json &obj, double dflt,
                       const char *key = "partial_rotary_factor") {
  double factor = r.positiveFloat(key, dflt);
  if (factor > 1)
    r.fail(key, "must be in (0, 1], got " + obj.at(key).dump());
  c.rotaryDim = int64_t(factor * double(c.headDim));
  if (c.rotaryDim < 2 || c.rotaryDim % 2 != 0)
    r.fail(key, "gives int(" + obj.value(key, json(dflt)).dump() + " * " + std::to_string(c.headDim) +
                    ") = " + std::to_string(c.rotaryDim) + " rotary dims per head; they must be even and at least 2");
}

/// Rotary embeddings over whole heads rotate pairs of dims: head_dim even.
void requireEvenHeadDim(FieldReader &r, const ModelConfig &c) {
  if (c.headDim % 2 != 0)
    r.fail("num_attention_heads", "gives head_dim " + std::to_string(c.headDim) +
                                      " (hidden_size / num_attention_heads), which must be even for rotary embeddings");
}

/// The sizes of a family whose transformers 4.40 config has no head_dim
/// (PhiConfig, StableLmConfig, Starcoder2Config: head_dim is hidden_size /
/// num_attention_heads), each field's default the config class's.
struct SizeDefaults {
  int64_t vocab, hidden, intermediate, layers, heads, kvHeads, maxPositions;
};
void readSizes(FieldReader &r, ModelConfig &c, const SizeDefaults &d) {
  c.vocab = r.positiveInt("vocab_size", d.vocab);
  c.hidden = r.positiveInt("hidden_size", d.hidden);
  c.intermediate = r.positiveInt("intermediate_size", d.intermediate);
  c.layers = r.positiveInt("num_hidden_layers", d.layers);
  c.heads = r.positiveInt("num_attention_heads", d.heads);
  c.kvHeads = r.positiveInt("num_key_value_heads", d.kvHeads ? d.kvHeads : c.heads);
  c.maxPositions = r.positiveInt("max_position_embeddings", d.maxPositions);
  if (r.has("head_dim"))
    r.fail("head_dim", std::string("is not a field of ") + hfArchitecture(c.arch) +
                           "'s config in transformers 4.40 (head_dim is hidden_size / num_attention_heads); remove it");
  headDimOfHidden(r, c);
  checkKvHeads(r, c);
}

} // namespace

/// Phi's fields (transformers 4.40's PhiConfig): one LayerNorm feeding
/// attention and MLP side by side, biases everywhere (lm_head too), rotary
/// embeddings on the first partial_rotary_factor of each head.
void parsePhi(FieldReader &r, ModelConfig &c, const json &obj) {
  readSizes(r, c, {51200, 2048, 8192, 24, 32, 0, 2048});
  readPartialRotary(r, c, obj, 0.5);
  c.normEps = r.positiveFloat("layer_norm_eps", 1e-5);
  readRopeTheta(r, c, obj);
  refuseRopeScaling(r, "Phi (its linear and dynamic scalings are not implemented)");
  if (r.boolean("qk_layernorm", false))
    r.fail("qk_layernorm", "only false (Phi-2's) is supported");
  std::string act = r.string("hidden_act", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    r.fail("hidden_act", "unsupported activation '" + act + "'; llc-dist implements Phi's tanh GELU (\"gelu_new\")");
  c.tieEmbeddings = r.boolean("tie_word_embeddings", false);
  c.qkvBias = c.outputBias = c.mlpBias = c.lmHeadBias = true;
  r.ignore({"resid_pdrop", "embd_pdrop", "attention_dropout"});
}

/// StableLM's fields (transformers 4.40's StableLmConfig): Llama's layer with
/// LayerNorms (weight and bias), partial rotary embeddings, biases on q, k and
/// v when use_qkv_bias; attention and MLP side by side on one LayerNorm when
/// use_parallel_residual. Per-head q/k LayerNorms (qk_layernorm, StableLM 2
/// 12B's) are refused.
void parseStableLm(FieldReader &r, ModelConfig &c, const json &obj) {
  readSizes(r, c, {50304, 2560, 6912, 32, 32, 32, 4096});
  readPartialRotary(r, c, obj, 0.25);
  c.normEps = r.positiveFloat("layer_norm_eps", 1e-5);
  readRopeTheta(r, c, obj);
  refuseRopeScaling(r, "StableLM (its linear and dynamic scalings are not implemented)");
  if (r.boolean("qk_layernorm", false))
    r.fail("qk_layernorm", "per-head LayerNorms of q and k are not implemented; only false is supported");
  std::string act = r.string("hidden_act", "silu");
  if (act != "silu")
    r.fail("hidden_act", "unsupported activation '" + act + "'; StableLM's MLP is SwiGLU (\"silu\")");
  c.qkvBias = r.boolean("use_qkv_bias", false);
  c.outputBias = c.mlpBias = false;
  c.parallelResidual = r.boolean("use_parallel_residual", false);
  c.tieEmbeddings = r.boolean("tie_word_embeddings", false);
  r.ignore({"hidden_dropout", "attention_dropout"});
}

/// Cohere's fields (transformers 4.40's CohereConfig; Command-R, Aya 23):
/// StableLM's parallel layer, x + attn(ln x) + mlp(ln x) on one LayerNorm of
/// a weight alone (CohereLayerNorm), rotary embeddings over whole heads in
/// adjacent pairs (its rotate_half interleaves), GQA, SwiGLU, q, k, v and o
/// biases when attention_bias, the head tied, the logits times logit_scale.
/// use_qk_norm (Command R+'s per-head LayerNorms of q and k) is refused.
void parseCohere(FieldReader &r, ModelConfig &c, const json &obj) {
  readSizes(r, c, {256000, 8192, 22528, 40, 64, 0, 8192});
  requireEvenHeadDim(r, c);
  c.normEps = r.positiveFloat("layer_norm_eps", 1e-5);
  c.normParams = NormParams::WeightOnly;
  c.parallelResidual = true;
  c.ropeInterleaved = true;
  readRopeTheta(r, c, obj);
  refuseRopeScaling(r, "Cohere (CohereConfig has no rope scaling)");
  if (r.boolean("use_qk_norm", false))
    r.fail("use_qk_norm", "per-head LayerNorms of q and k (Command R+'s) are not implemented; only false is supported");
  std::string act = r.string("hidden_act", "silu");
  if (act != "silu")
    r.fail("hidden_act", "unsupported activation '" + act + "'; Cohere's MLP is SwiGLU (\"silu\")");
  c.qkvBias = c.outputBias = r.boolean("attention_bias", false);
  c.mlpBias = false;
  c.tieEmbeddings = r.boolean("tie_word_embeddings", true);
  c.logitScale = r.positiveFloat("logit_scale", 0.0625);
  if (!llcdist::rt::schema::multiplierValid(c.logitScale))
    r.fail("logit_scale", std::string(llcdist::rt::schema::kMultiplierRule) + ", got " + obj.at("logit_scale").dump());
  r.ignore({"attention_dropout"});
}

/// OLMo's fields (transformers 4.40's OlmoConfig): Llama's layer with
/// LayerNorms that have no weight or bias (OlmoLayerNorm: eps 1e-5, no field),
/// biases on q, k, v and o when attention_bias, q, k and v clamped to [-c, c]
/// when clip_qkv (OLMo-7B-0424's); rope_scaling is refused.
void parseOlmo(FieldReader &r, ModelConfig &c, const json &obj) {
  readSizes(r, c, {50304, 4096, 11008, 32, 32, 0, 2048});
  requireEvenHeadDim(r, c);
  c.normEps = 1e-5; // OlmoLayerNorm's, fixed
  c.normParams = NormParams::None;
  readRopeTheta(r, c, obj);
  refuseRopeScaling(r, "OLMo (its linear and dynamic scalings are not implemented)");
  if (r.has("clip_qkv")) { // null: none (OLMo-1B's and OLMo-7B's); OLMo-7B-0424's is 8
    c.clipQkv = r.positiveFloat("clip_qkv", std::nullopt);
    if (!llcdist::rt::schema::clampLimitValid(c.clipQkv))
      r.fail("clip_qkv", std::string(llcdist::rt::schema::kClampLimitRule) + ", got " + obj.at("clip_qkv").dump());
  }
  r.ignore({"clip_qkv"});
  std::string act = r.string("hidden_act", "silu");
  if (act != "silu")
    r.fail("hidden_act", "unsupported activation '" + act + "'; OLMo's MLP is SwiGLU (\"silu\")");
  c.qkvBias = c.outputBias = r.boolean("attention_bias", false);
  c.mlpBias = false;
  c.tieEmbeddings = r.boolean("tie_word_embeddings", false);
  r.ignore({"attention_dropout"});
}

/// GPT-NeoX's fields (transformers 4.40's GPTNeoXConfig; Pythia, GPT-NeoX-20B):
/// LayerNorms with biases, q, k and v fused per head in query_key_value, rotary
/// embeddings on the first rotary_pct of each head (base rotary_emb_base),
/// the exact GELU ("gelu"), attention and MLP side by side on two LayerNorms
/// when use_parallel_residual (the default), biases on the attention's
/// projections when attention_bias, on the MLP's always; an untied embed_out.
void parseGptNeoX(FieldReader &r, ModelConfig &c, const json &obj) {
  if (r.has("num_key_value_heads"))
    r.fail("num_key_value_heads", "is not a field of GPTNeoXConfig (every head has its own k and v); remove it");
  readSizes(r, c, {50432, 6144, 24576, 44, 64, 0, 2048});
  readPartialRotary(r, c, obj, 0.25, "rotary_pct");
  readRopeTheta(r, c, obj, 10000.0, "rotary_emb_base");
  c.normEps = r.positiveFloat("layer_norm_eps", 1e-5);
  refuseRopeScaling(r, "GPT-NeoX (its linear and dynamic scalings are not implemented)");
  std::string act = r.string("hidden_act", "gelu");
  // gelu_fast (GPT-NeoX-20B's) is the tanh GELU written as
  // 0.5 x (1 + tanh(0.79788456 x (1 + 0.044715 x^2))): the same function.
  if (act != "gelu" && act != "gelu_new" && act != "gelu_pytorch_tanh" && act != "gelu_fast")
    r.fail("hidden_act", "unsupported activation '" + act +
                             "'; llc-dist implements the exact GELU (\"gelu\", Pythia's) and the tanh one "
                             "(\"gelu_new\", \"gelu_fast\": GPT-NeoX-20B's)");
  c.mlpActivation = act == "gelu" ? MlpActivation::GeluErf : MlpActivation::GeluTanh;
  c.parallelResidual = c.parallelNorms = r.boolean("use_parallel_residual", true);
  c.qkvBias = c.outputBias = r.boolean("attention_bias", true);
  c.mlpBias = true;
  c.tieEmbeddings = r.boolean("tie_word_embeddings", false);
  // Dropout (llc-dist trains without it), under GPTNeoXConfig's names and the
  // older ones EleutherAI's published configs carry.
  r.ignore({"attention_dropout", "hidden_dropout", "classifier_dropout", "attention_probs_dropout_prob",
            "hidden_dropout_prob"});
}

/// Falcon's fields (transformers 4.40's FalconConfig): LayerNorms with biases,
/// one query_key_value GEMM whose output holds each kv head's query heads, k
/// and v side by side, full rotary embeddings, the exact GELU, biases on
/// every projection when bias. The layouts: new_decoder_architecture
/// (num_kv_heads groups; attention and MLP side by side on ln_attn and
/// ln_mlp), else multi_query (one k and v head after every q) or one group
/// per head, attention and MLP side by side on one LayerNorm when
/// parallel_attn. ALiBi and rope_scaling are refused.
void parseFalcon(FieldReader &r, ModelConfig &c, const json &obj) {
  if (r.has("n_embed"))
    r.fail("n_embed", "is FalconConfig's old name of hidden_size; write hidden_size");
  const bool newArch = r.boolean("new_decoder_architecture", false);
  const bool multiQuery = r.boolean("multi_query", true); // ignored under new_decoder_architecture
  if (r.has("num_key_value_heads"))
    r.fail("num_key_value_heads", "is not a field of FalconConfig (its name is num_kv_heads); rename it");
  c.vocab = r.positiveInt("vocab_size", 65024);
  c.hidden = r.positiveInt("hidden_size", 4544);
  c.layers = r.positiveInt("num_hidden_layers", 32);
  c.heads = r.positiveInt("num_attention_heads", 71);
  c.maxPositions = r.positiveInt("max_position_embeddings", 2048);
  headDimOfHidden(r, c);
  requireEvenHeadDim(r, c);
  // FalconAttention's kv heads: num_kv_heads (default num_attention_heads)
  // under new_decoder_architecture, else one (multi_query) or one per head.
  const int64_t kv = r.positiveInt("num_kv_heads", c.heads);
  c.kvHeads = newArch ? kv : multiQuery ? 1 : c.heads;
  if (c.heads % c.kvHeads != 0)
    r.fail("num_kv_heads", "num_kv_heads=" + std::to_string(c.kvHeads) +
                               " does not divide num_attention_heads=" + std::to_string(c.heads));
  c.intermediate = r.positiveInt("ffn_hidden_size", 4 * c.hidden);
  c.normEps = r.positiveFloat("layer_norm_epsilon", 1e-5);
  readRopeTheta(r, c, obj);
  refuseRopeScaling(r, "Falcon (its linear and dynamic scalings are not implemented)");
  if (r.boolean("alibi", false))
    r.fail("alibi", "ALiBi position biases are not implemented for Falcon (Falcon-RW's bias is BLOOM's with the "
                    "slopes rounded to bf16 and scaled by 1/sqrt(head_dim); BloomForCausalLM's is implemented); only "
                    "false (rotary embeddings) is supported");
  std::string act = r.string("activation", "gelu");
  if (act != "gelu")
    r.fail("activation", "unsupported activation '" + act + "'; llc-dist implements Falcon's exact GELU (\"gelu\")");
  c.mlpActivation = MlpActivation::GeluErf;
  c.parallelResidual = newArch || r.boolean("parallel_attn", true);
  c.parallelNorms = newArch;
  c.qkvBias = c.outputBias = c.mlpBias = r.boolean("bias", false);
  c.tieEmbeddings = r.boolean("tie_word_embeddings", true);
  // Dropout (llc-dist trains without it), and a field TII's published
  // configs carry that FalconConfig 4.40 never reads.
  r.ignore({"hidden_dropout", "attention_dropout", "apply_residual_connection_post_layernorm", "num_kv_heads",
            "multi_query", "parallel_attn"});
}

namespace {
/// The fields GPTJConfig and CodeGenConfig share (`cls`: the config class,
/// `attn`: its attention module, `family`: its name in messages): Phi's layer (attention and MLP side by
/// side on one LayerNorm) with GPT-2's names, out_proj without a bias, fc_in
/// and fc_out with them, the tanh GELU, rotary embeddings on the first
/// rotary_dim dims of each head in adjacent pairs (rotate_every_two, theta
/// 10,000), an untied head with a bias.
void readGptJFields(FieldReader &r, ModelConfig &c, const char *cls, const std::string &attn,
                    const std::string &family) {
  refuseAliases(r, cls,
                {{"hidden_size", "n_embd"},
                 {"num_attention_heads", "n_head"},
                 {"num_hidden_layers", "n_layer"},
                 {"max_position_embeddings", "n_positions"}});
  c.vocab = r.positiveInt("vocab_size", 50400);
  c.maxPositions = r.positiveInt("n_positions", 2048);
  c.hidden = r.positiveInt("n_embd", 4096);
  c.layers = r.positiveInt("n_layer", 28);
  c.heads = c.kvHeads = r.positiveInt("n_head", 16);
  headDimOfHidden(r, c, "n_head", "n_embd");
  c.intermediate = r.positiveInt("n_inner", 4 * c.hidden);
  // transformers builds the sine table over n_embd when rotary_dim is null,
  // which only broadcasts over one head: a rotary_dim is required.
  c.rotaryDim = r.positiveInt("rotary_dim", 64);
  if (c.rotaryDim % 2 != 0 || c.rotaryDim > c.headDim)
    r.fail("rotary_dim",
           "must be even and at most head_dim = " + std::to_string(c.headDim) + ", got " + std::to_string(c.rotaryDim));
  if (c.rotaryDim == c.headDim)
    c.rotaryDim = 0; // every dim rotates
  c.ropeInterleaved = true;
  c.normEps = r.positiveFloat("layer_norm_epsilon", 1e-5);
  std::string act = r.string("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    r.fail("activation_function",
           "unsupported activation '" + act + "'; llc-dist implements " + family + "'s tanh GELU (\"gelu_new\")");
  c.qkvBias = c.outputBias = false;
  c.mlpBias = c.lmHeadBias = true;
  c.tieEmbeddings = r.boolean("tie_word_embeddings", false);
  // Fields of the published configs that the config class never reads:
  // they hold only their one value (rotary embeddings, scaled scores).
  if (!r.boolean("rotary", true))
    r.fail("rotary", "transformers' " + attn + " always applies rotary embeddings; only true is supported");
  if (!r.boolean("scale_attn_weights", true))
    r.fail("scale_attn_weights",
           "transformers' " + attn + " always scales the scores by 1/sqrt(head_dim); only true is supported");
  // Dropout (llc-dist trains without it), and the rest of those configs:
  // the sequence-summary head, the tokenizer's class, a training switch.
  r.ignore({"resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_activation", "summary_first_dropout",
            "summary_proj_to_labels", "summary_type", "summary_use_proj", "task_specific_params",
            "gradient_checkpointing", "tokenizer_class"});
}
} // namespace

/// GPT-J's fields (transformers 4.40's GPTJConfig): readGptJFields' layer,
/// q, k and v from three GEMMs without biases.
void parseGptJ(FieldReader &r, ModelConfig &c, const json &) {
  readGptJFields(r, c, "GPTJConfig", "GPTJAttention", "GPT-J");
}

/// CodeGen's fields (transformers 4.40's CodeGenConfig): GPT-J's layer with
/// q, v and k from one GEMM (qkv_proj, no bias) whose output is 4 blocks
/// (CodeGenAttention's hard-coded mp_num), each [q | v | k] of a quarter of
/// the heads: ModelConfig::qkvBlocks. n_ctx is never read.
void parseCodeGen(FieldReader &r, ModelConfig &c, const json &) {
  readGptJFields(r, c, "CodeGenConfig", "CodeGenAttention", "CodeGen");
  c.qkvBlocks = 4;
  if (c.heads % c.qkvBlocks != 0)
    r.fail("n_head", "n_head=" + std::to_string(c.heads) +
                         " is not a multiple of 4: CodeGen's qkv_proj holds 4 blocks (mp_num) of whole heads");
  r.ignore({"n_ctx"});
}

/// StarCoder2's fields (transformers 4.40's Starcoder2Config): Llama's
/// attention (GQA, rotary embeddings, Mistral's sliding window) in a GPT-style
/// layer: LayerNorms with biases, c_fc -> tanh GELU -> c_proj, biases on
/// every projection when use_bias; the head tied by default.
void parseStarcoder2(FieldReader &r, ModelConfig &c, const json &obj) {
  readSizes(r, c, {49152, 3072, 12288, 30, 24, 2, 4096});
  requireEvenHeadDim(r, c);
  c.normEps = r.positiveFloat("norm_epsilon", 1e-5);
  readRopeTheta(r, c, obj);
  refuseRopeScaling(r, "StarCoder2 (Starcoder2Config has no rope scaling)");
  std::string act = r.string("hidden_act", "gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh" && act != "gelu_new")
    r.fail("hidden_act",
           "unsupported activation '" + act + "'; llc-dist implements StarCoder2's tanh GELU (\"gelu_pytorch_tanh\")");
  // Starcoder2Config's default window is None: plain causal attention.
  if (r.has("sliding_window"))
    c.slidingWindow = r.positiveInt("sliding_window");
  r.ignore({"sliding_window"});
  c.qkvBias = c.outputBias = c.mlpBias = r.boolean("use_bias", true);
  c.tieEmbeddings = r.boolean("tie_word_embeddings", true);
  // Dropout (llc-dist trains without it, as every family here), and the
  // fields bigcode's published configs carry that Starcoder2Config 4.40
  // never reads (norm_type "layer_norm", mlp_type "default", a second
  // layer_norm_epsilon: the model is built from norm_epsilon alone).
  r.ignore(
      {"attention_dropout", "residual_dropout", "embedding_dropout", "norm_type", "mlp_type", "layer_norm_epsilon"});
}

} // namespace llcdist::config
