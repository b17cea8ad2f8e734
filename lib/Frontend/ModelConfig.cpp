//===- ModelConfig.cpp - Hugging Face config.json front end ---------------===//
#include "llcdist/Frontend/ModelConfig.h"
#include "llcdist/Support/JsonObject.h"
#include "llcdist/runtime/PlanSchema.h" // header-only: the runtime's rule for rope_theta

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

using namespace llcdist;
using json = nlohmann::json;

namespace {
/// Every family: Arch, its model_type and its transformers class.
struct ArchNames {
  Arch arch;
  const char *name, *hf;
};
constexpr ArchNames kArchs[] = {{Arch::GPT2, "gpt2", "GPT2LMHeadModel"},
                                {Arch::Llama, "llama", "LlamaForCausalLM"},
                                {Arch::Qwen2, "qwen2", "Qwen2ForCausalLM"},
                                {Arch::Mistral, "mistral", "MistralForCausalLM"},
                                {Arch::Gemma, "gemma", "GemmaForCausalLM"},
                                {Arch::Phi, "phi", "PhiForCausalLM"},
                                {Arch::Mixtral, "mixtral", "MixtralForCausalLM"},
                                {Arch::Qwen2Moe, "qwen2_moe", "Qwen2MoeForCausalLM"},
                                {Arch::Starcoder2, "starcoder2", "Starcoder2ForCausalLM"}};
} // namespace

const char *llcdist::archName(Arch a) { return kArchs[int(a)].name; }
const char *llcdist::hfArchitecture(Arch a) { return kArchs[int(a)].hf; }

namespace {
/// The architecture's parameter formula, in T: int64_t for numParameters(),
/// double for the bound parseModelConfig checks first (no overflow there).
/// One layer's MLP: the gated MLP, or the mixture of experts (the router,
/// `experts` of the experts, Qwen2-MoE's shared expert and its gate).
template <typename T> T mlpCount(const ModelConfig &c, T experts, bool sparse) {
  T H = c.hidden;
  if (!c.moe || !sparse)
    return 3 * H * T(c.intermediate) + (c.mlpBias ? 2 * T(c.intermediate) + H : 0);
  const MoeConfig &e = *c.moe;
  T n = T(e.experts) * H + experts * 3 * H * T(e.intermediate);
  if (e.sharedIntermediate)
    n += 3 * H * T(e.sharedIntermediate) + H;
  return n;
}

/// The architecture's parameter formula, in T: int64_t for numParameters(),
/// double for the bound parseModelConfig checks first (no overflow there).
/// `active`: a mixture of experts counts top_k experts; `sparse`: the layer
/// is one (else its MLP is dense).
template <typename T> T layerCount(const ModelConfig &c, bool active, bool sparse) {
  T H = c.hidden, I = c.intermediate;
  T q = T(c.heads) * T(c.headDim), kv = T(c.kvHeads) * T(c.headDim);
  if (c.arch == Arch::GPT2)
    return 2 * H + (H * 3 * H + 3 * H) + (H * H + H) + 2 * H + (H * I + I) + (I * H + H);
  if (c.arch == Arch::Phi) // one LayerNorm; q, k, v, dense, fc1, fc2, all with biases
    return 2 * H + (H * q + q) + 2 * (H * kv + kv) + (q * H + H) + (H * I + I) + (I * H + H);
  if (c.arch == Arch::Starcoder2) // two LayerNorms; q, k, v, o, c_fc, c_proj, biases when use_bias
    return 4 * H + H * q + 2 * H * kv + q * H + 2 * H * I + (c.qkvBias ? q + 2 * kv : 0) + (c.outputBias ? H : 0) +
           (c.mlpBias ? I + H : 0);
  T layer = 2 * H + H * q + 2 * H * kv + q * H;
  layer += mlpCount<T>(c, c.moe ? T(active ? c.moe->topK : c.moe->experts) : T(0), sparse);
  if (c.qkvBias)
    layer += q + 2 * kv;
  if (c.outputBias)
    layer += H;
  return layer;
}

template <typename T> T parameterCount(const ModelConfig &c, bool active = false) {
  T H = c.hidden, V = c.vocab, L = c.layers;
  T n = V * H + (c.tieEmbeddings ? 0 : V * H);
  if (c.arch == Arch::GPT2)
    n += T(c.maxPositions) * H + 2 * H; // wpe, ln_f
  else if (layerNorms(c.arch))
    n += 2 * H; // Phi's model.final_layernorm, StarCoder2's model.norm
  else
    n += H; // model.norm
  if (c.lmHeadBias)
    n += V;
  const T sparse = T(c.sparseLayers());
  return n + sparse * layerCount<T>(c, active, true) + (L - sparse) * layerCount<T>(c, active, false);
}

/// Far above any published model (GPT-3: 2^37.3, Llama 3.1 405B: 2^38.6),
/// far below int64: sizes each within its own bound can still multiply past
/// it (issue #16: 2^16 layers of hidden 2^18 overflowed the count).
constexpr double kMaxParameters = double(int64_t(1) << 50);
} // namespace

int64_t ModelConfig::numParameters() const { return parameterCount<int64_t>(*this); }
int64_t ModelConfig::activeParameters() const { return parameterCount<int64_t>(*this, /*active=*/true); }
int64_t ModelConfig::layerParameters() const { return layerCount<int64_t>(*this, /*active=*/false, moe.has_value()); }
int64_t ModelConfig::layerTensors(bool sparse) const {
  if (arch == Arch::GPT2)
    return 12;
  if (arch == Arch::Phi)
    return 14;
  if (arch == Arch::Starcoder2) // four norm tensors, six matrices, their biases
    return 10 + (qkvBias ? 3 : 0) + (outputBias ? 1 : 0) + (mlpBias ? 2 : 0);
  // Two norms, q k v o, and the gated MLP's three matrices or the router,
  // three stacked expert weights and the shared expert with its gate.
  int64_t mlp = moe && sparse ? 4 + (moe->sharedIntermediate ? 4 : 0) : 3 + (mlpBias ? 3 : 0);
  return 6 + mlp + (qkvBias ? 3 : 0) + (outputBias ? 1 : 0);
}

namespace {
/// Thrown inside this file only; converted to ConfigError at the API.
struct Failure {
  std::string message;
};

std::pair<unsigned, unsigned> lineColOf(std::string_view text, size_t offset) {
  unsigned line = 1, col = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

std::string lineCol(std::string_view text, size_t offset) {
  auto [line, col] = lineColOf(text, offset);
  return std::to_string(line) + ":" + std::to_string(col);
}

/// The offset of `key`'s first occurrence as an object key, or npos.
size_t keyOffset(std::string_view text, const std::string &key) {
  std::string quoted = "\"" + key + "\"";
  for (size_t pos = text.find(quoted); pos != std::string_view::npos;
       pos = text.find(quoted, pos + 1)) {
    size_t after = pos + quoted.size();
    while (after < text.size() && isspace((unsigned char)text[after]))
      ++after;
    if (after < text.size() && text[after] == ':')
      return pos;
  }
  return std::string_view::npos;
}

/// Reads the fields of one JSON object, remembering which were used, so
/// that anything left over is reported as an unknown field.
class FieldReader {
public:
  FieldReader(const json &obj, std::string_view text, std::string path)
      : obj(obj), text(text), path(std::move(path)) {}

  [[noreturn]] void fail(const std::string &key, const std::string &why) const {
    throw Failure{where(key) + "field '" + key + "': " + why};
  }

  bool has(const std::string &key) const {
    return obj.contains(key) && !obj.at(key).is_null();
  }

  const json &get(const std::string &key) {
    used.insert(key);
    if (!has(key))
      throw Failure{path + ": missing field '" + key + "'"};
    return obj.at(key);
  }

  int64_t positiveInt(const std::string &key,
                      std::optional<int64_t> dflt = std::nullopt) {
    used.insert(key);
    if (!has(key)) {
      if (dflt)
        return *dflt;
      throw Failure{path + ": missing field '" + key +
                    "' (a positive integer)"};
    }
    const json &v = obj.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() <= 0)
      fail(key, "must be a positive integer, got " + v.dump());
    int64_t x = v.get<int64_t>();
    // Sanity bounds far above every published model (405B: 126 layers,
    // hidden 16,384, vocabulary 128,256): a typo stops here, before counts
    // overflow or a graph of millions of layers is built.
    int64_t bound = maxFor(key);
    if (x > bound)
      fail(key, "must be at most " + std::to_string(bound) + " (a sanity bound far above any "
                "published model), got " + v.dump());
    return x;
  }

  static int64_t maxFor(const std::string &key) {
    static const std::map<std::string, int64_t> bounds = {{"n_layer", 1 << 16},
                                                          {"num_hidden_layers", 1 << 16},
                                                          {"n_embd", 1 << 18},
                                                          {"hidden_size", 1 << 18},
                                                          {"n_inner", 1 << 20},
                                                          {"intermediate_size", 1 << 20},
                                                          {"n_head", 1 << 14},
                                                          {"num_attention_heads", 1 << 14},
                                                          {"num_key_value_heads", 1 << 14},
                                                          {"head_dim", 1 << 14},
                                                          {"vocab_size", 1 << 27},
                                                          {"n_positions", 1 << 24},
                                                          {"max_position_embeddings", 1 << 24},
                                                          {"num_local_experts", 1 << 16},
                                                          {"num_experts", 1 << 16},
                                                          {"num_experts_per_tok", 1 << 16},
                                                          {"moe_intermediate_size", 1 << 20},
                                                          {"shared_expert_intermediate_size", 1 << 20},
                                                          {"decoder_sparse_step", 1 << 16}};
    auto it = bounds.find(key);
    return it == bounds.end() ? (int64_t(1) << 40) : it->second;
  }

  double positiveFloat(const std::string &key, std::optional<double> dflt) {
    used.insert(key);
    if (!has(key)) {
      if (dflt)
        return *dflt;
      throw Failure{path + ": missing field '" + key + "' (a positive number)"};
    }
    const json &v = obj.at(key);
    if (!v.is_number() || !(v.get<double>() > 0))
      fail(key, "must be a positive number, got " + v.dump());
    return v.get<double>();
  }

  bool boolean(const std::string &key, bool dflt) {
    used.insert(key);
    if (!has(key))
      return dflt;
    const json &v = obj.at(key);
    if (!v.is_boolean())
      fail(key, "must be true or false, got " + v.dump());
    return v.get<bool>();
  }

  std::string string(const std::string &key, std::optional<std::string> dflt) {
    used.insert(key);
    if (!has(key)) {
      if (dflt)
        return *dflt;
      throw Failure{path + ": missing field '" + key + "' (a string)"};
    }
    const json &v = obj.at(key);
    if (!v.is_string())
      fail(key, "must be a string, got " + v.dump());
    return v.get<std::string>();
  }

  /// Fields that do not change the training graph (metadata, dropout, ...).
  void ignore(std::initializer_list<const char *> keys) {
    for (const char *k : keys)
      used.insert(k);
  }

  void rejectUnknown(const std::string &arch) const {
    for (auto it = obj.begin(); it != obj.end(); ++it)
      if (!used.count(it.key()))
        fail(it.key(), "unknown field for " + arch +
                           "; remove it, or check its spelling against the "
                           "Hugging Face config of " + arch);
  }

  /// "FILE:LINE:COL: " of the key's first occurrence, or "FILE: ".
  std::string where(const std::string &key) const {
    size_t pos = keyOffset(text, key);
    return pos == std::string_view::npos ? path + ": "
                                         : path + ":" + lineCol(text, pos) + ": ";
  }

private:
  const json &obj;
  std::string_view text;
  std::string path;
  std::set<std::string> used;
};

const std::initializer_list<const char *> kMetadataFields = {
    "_name_or_path", "architectures", "model_type", "torch_dtype",
    "transformers_version", "use_cache", "bos_token_id", "eos_token_id",
    "pad_token_id", "initializer_range", "id2label", "label2id"};

Arch detectArch(FieldReader &r, const json &obj) {
  if (obj.contains("architectures")) {
    const json &a = obj.at("architectures");
    if (!a.is_array() || a.empty())
      r.fail("architectures", "must be a non-empty array of class names");
    std::string supported;
    for (const ArchNames &k : kArchs) {
      for (const json &name : a)
        if (name == k.hf)
          return k.arch;
      supported += std::string(supported.empty() ? "" : ", ") + k.hf;
    }
    r.fail("architectures", "unsupported architecture " + a.dump() + "; supported: " + supported);
  }
  if (obj.contains("model_type")) {
    const json &t = obj.at("model_type");
    std::string supported;
    for (const ArchNames &k : kArchs) {
      if (t == k.name)
        return k.arch;
      supported += std::string(supported.empty() ? "" : ", ") + "\"" + k.name + "\"";
    }
    r.fail("model_type", "unsupported model_type " + t.dump() + "; supported: " + supported);
  }
  throw Failure{r.where("") + "missing field 'architectures' (e.g. "
                              "[\"LlamaForCausalLM\"]) or 'model_type'"};
}

void parseGPT2(FieldReader &r, ModelConfig &c) {
  c.vocab = r.positiveInt("vocab_size");
  c.maxPositions = r.positiveInt("n_positions");
  c.hidden = r.positiveInt("n_embd");
  c.layers = r.positiveInt("n_layer");
  c.heads = r.positiveInt("n_head");
  c.kvHeads = c.heads;
  if (c.hidden % c.heads != 0)
    r.fail("n_head", "n_head=" + std::to_string(c.heads) +
                         " does not divide n_embd=" + std::to_string(c.hidden));
  c.headDim = c.hidden / c.heads;
  c.intermediate = r.positiveInt("n_inner", 4 * c.hidden);
  c.normEps = r.positiveFloat("layer_norm_epsilon", 1e-5);
  std::string act = r.string("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    r.fail("activation_function",
           "unsupported activation '" + act +
               "'; llc-dist implements GPT-2's tanh GELU (\"gelu_new\")");
  c.tieEmbeddings = r.boolean("tie_word_embeddings", true);
  if (!r.boolean("scale_attn_weights", true))
    r.fail("scale_attn_weights", "only true (scores scaled by 1/sqrt(head_dim)) "
                                 "is supported");
  if (r.boolean("scale_attn_by_inverse_layer_idx", false))
    r.fail("scale_attn_by_inverse_layer_idx", "only false is supported");
  c.qkvBias = c.outputBias = c.mlpBias = true;
  r.ignore({"n_ctx", "attn_pdrop", "embd_pdrop", "resid_pdrop",
            "summary_activation", "summary_first_dropout",
            "summary_proj_to_labels", "summary_type", "summary_use_proj",
            "task_specific_params", "reorder_and_upcast_attn", "output_past"});
}

/// rope_theta, under the runtime's own rule (PlanSchema.h), so no config
/// compiles to a plan the runtime refuses (5e-324 is a positive double but
/// 0 in fp32).
void readRopeTheta(FieldReader &r, ModelConfig &c, const json &obj, double dflt = 10000.0) {
  c.ropeTheta = r.positiveFloat("rope_theta", dflt);
  if (!llcdist::rt::schema::ropeThetaInRange(c.ropeTheta))
    r.fail("rope_theta", std::string(llcdist::rt::schema::kRopeThetaRule) + ", got " + obj.at("rope_theta").dump());
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
    r.fail("num_attention_heads",
           "num_attention_heads=" + std::to_string(c.heads) +
               " does not divide hidden_size=" + std::to_string(c.hidden) +
               "; fix it or give head_dim explicitly");
  c.headDim = r.positiveInt("head_dim", gemma ? 256 : c.hidden / c.heads); // GemmaConfig's default: 256
  if (c.headDim % 2 != 0)
    r.fail("head_dim", "must be even for rotary embeddings, got " +
                           std::to_string(c.headDim));
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
      !(obj.at("pretraining_tp").is_number_integer() &&
        obj.at("pretraining_tp").get<int64_t>() == 1))
    r.fail("pretraining_tp", "only 1 is supported (it changes numerics only)");
  r.ignore({"pretraining_tp"});
  if (r.has("rope_scaling")) {
    const json &s = r.get("rope_scaling");
    if (!s.is_object())
      r.fail("rope_scaling", "must be an object or null");
    std::string type = s.value("rope_type", s.value("type", std::string()));
    if (type != "llama3")
      r.fail("rope_scaling", "unsupported rope_type '" + type +
                                 "'; only \"llama3\" is implemented");
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

/// Phi's fields (transformers 4.40's PhiConfig): one LayerNorm feeding
/// attention and MLP side by side, biases everywhere (lm_head too), rotary
/// embeddings on the first partial_rotary_factor of each head.
void parsePhi(FieldReader &r, ModelConfig &c, const json &obj) {
  c.vocab = r.positiveInt("vocab_size", 51200);
  c.hidden = r.positiveInt("hidden_size", 2048);
  c.intermediate = r.positiveInt("intermediate_size", 8192);
  c.layers = r.positiveInt("num_hidden_layers", 24);
  c.heads = r.positiveInt("num_attention_heads", 32);
  c.kvHeads = r.positiveInt("num_key_value_heads", c.heads);
  c.maxPositions = r.positiveInt("max_position_embeddings", 2048);
  if (c.hidden % c.heads != 0)
    r.fail("num_attention_heads", "num_attention_heads=" + std::to_string(c.heads) +
                                      " does not divide hidden_size=" + std::to_string(c.hidden));
  checkKvHeads(r, c);
  c.headDim = c.hidden / c.heads;
  double factor = r.positiveFloat("partial_rotary_factor", 0.5);
  if (factor > 1)
    r.fail("partial_rotary_factor", "must be in (0, 1], got " + obj.at("partial_rotary_factor").dump());
  // PhiAttention: int(partial_rotary_factor * head_dim) dims rotate.
  c.rotaryDim = int64_t(factor * double(c.headDim));
  if (c.rotaryDim < 2 || c.rotaryDim % 2 != 0)
    r.fail("partial_rotary_factor", "gives int(" + obj.value("partial_rotary_factor", json(0.5)).dump() + " * " +
                                        std::to_string(c.headDim) + ") = " + std::to_string(c.rotaryDim) +
                                        " rotary dims per head; they must be even and at least 2");
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
/// StarCoder2's fields (transformers 4.40's Starcoder2Config): Llama's
/// attention (GQA, rotary embeddings, Mistral's sliding window) in a GPT-style
/// layer: LayerNorms with biases, c_fc -> tanh GELU -> c_proj, biases on
/// every projection when use_bias; the head tied by default.
void parseStarcoder2(FieldReader &r, ModelConfig &c, const json &obj) {
  c.vocab = r.positiveInt("vocab_size", 49152);
  c.hidden = r.positiveInt("hidden_size", 3072);
  c.intermediate = r.positiveInt("intermediate_size", 12288);
  c.layers = r.positiveInt("num_hidden_layers", 30);
  c.heads = r.positiveInt("num_attention_heads", 24);
  c.kvHeads = r.positiveInt("num_key_value_heads", 2);
  c.maxPositions = r.positiveInt("max_position_embeddings", 4096);
  if (r.has("head_dim"))
    r.fail("head_dim", "is not a field of Starcoder2ForCausalLM's config in transformers 4.40 (head_dim is "
                       "hidden_size / num_attention_heads); remove it");
  if (c.hidden % c.heads != 0)
    r.fail("num_attention_heads", "num_attention_heads=" + std::to_string(c.heads) +
                                      " does not divide hidden_size=" + std::to_string(c.hidden));
  c.headDim = c.hidden / c.heads;
  if (c.headDim % 2 != 0)
    r.fail("num_attention_heads", "gives head_dim " + std::to_string(c.headDim) +
                                      " (hidden_size / num_attention_heads), which must be even for rotary embeddings");
  checkKvHeads(r, c);
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
} // namespace

std::optional<ConfigError> llcdist::parseModelConfig(std::string_view text,
                                                     const std::string &path,
                                                     ModelConfig &out) {
  try {
    json obj;
    size_t byte = 0;
    if (auto err = parseStrictJson(text, obj, byte)) {
      if (!byte) // too deep, a duplicate key, a number out of range
        return ConfigError{path + ": malformed JSON: " + *err};
      // A syntax error reads "[json.exception...] parse error at line L,
      // column C: WHAT"; keep WHAT, the location is ours.
      const std::string &msg = *err;
      size_t col = msg.find("column ");
      size_t colon = msg.find(": ", col == std::string::npos ? 0 : col);
      return ConfigError{path + ":" + lineCol(text, byte - 1) + ": malformed JSON: " +
                         (colon == std::string::npos ? msg : msg.substr(colon + 2))};
    }
    if (!obj.is_object())
      return ConfigError{path + ": expected a JSON object (a Hugging Face "
                                "config.json), got " +
                         std::string(obj.type_name())};
    FieldReader r(obj, text, path);
    ModelConfig c;
    c.path = path;
    size_t slash = path.find_last_of('/');
    std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    size_t dot = base.rfind(".json");
    c.name = dot == std::string::npos ? base : base.substr(0, dot);
    if (c.name == "config" && slash != std::string::npos) {
      // .../llama3-8b/config.json: name the model after its folder.
      std::string dir = path.substr(0, slash);
      size_t s2 = dir.find_last_of('/');
      c.name = s2 == std::string::npos ? dir : dir.substr(s2 + 1);
    }
    c.arch = detectArch(r, obj);
    r.ignore(kMetadataFields);
    if (c.arch == Arch::GPT2)
      parseGPT2(r, c);
    else if (c.arch == Arch::Phi)
      parsePhi(r, c, obj);
    else if (c.arch == Arch::Starcoder2)
      parseStarcoder2(r, c, obj);
    else
      parseLlama(r, c, obj);
    r.rejectUnknown(hfArchitecture(c.arch));
    if (double n = parameterCount<double>(c); n > kMaxParameters) {
      char count[32];
      std::snprintf(count, sizeof count, "%.3g", n);
      return ConfigError{path + ": the sizes give " + count + " parameters, more than 2^50 (a " +
                         "sanity bound far above any published model): check the layer count, " +
                         "hidden, intermediate and vocabulary sizes and the heads"};
    }
    // The fields later passes may blame (tp vs heads, pp vs layers, ...):
    // the importer gives the ops they shape a location at the field.
    bool gpt2 = c.arch == Arch::GPT2;
    bool hasKv = !gpt2 && obj.contains("num_key_value_heads");
    const std::pair<const char *, std::string> roles[] = {
        {"num_heads", gpt2 ? "n_head" : "num_attention_heads"},
        {"num_kv_heads", gpt2 ? "n_head" : hasKv ? "num_key_value_heads" : "num_attention_heads"},
        {"num_layers", gpt2 ? "n_layer" : "num_hidden_layers"},
        {"vocab_size", "vocab_size"},
        {"max_positions", gpt2 ? "n_positions" : "max_position_embeddings"},
        {"hidden_size", gpt2 ? "n_embd" : "hidden_size"},
        {"output_router_logits", "output_router_logits"}}; // the MoE load-balancing loss
    for (const auto &[role, key] : roles) {
      size_t pos = keyOffset(text, key);
      if (pos == std::string_view::npos)
        continue;
      auto [line, col] = lineColOf(text, pos);
      c.fieldPos[role] = {key, line, col};
    }
    out = c;
    return std::nullopt;
  } catch (const Failure &f) {
    return ConfigError{f.message};
  } catch (const json::exception &e) {
    return ConfigError{path + ": " + e.what()};
  }
}

std::string ModelConfig::where(const std::string &role) const {
  auto it = fieldPos.find(role);
  if (it == fieldPos.end())
    return path + ": ";
  return path + ":" + std::to_string(it->second.line) + ":" +
         std::to_string(it->second.column) + ": ";
}

std::optional<ConfigError> llcdist::loadModelConfig(const std::string &path,
                                                    ModelConfig &out) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return ConfigError{path + ": cannot open the model file"};
  std::stringstream ss;
  ss << in.rdbuf();
  return parseModelConfig(ss.str(), path, out);
}

std::optional<std::string>
llcdist::resolveTrainingShape(const ModelConfig &m, int64_t dp,
                              TrainingShape &s) {
  if (s.seqLen == 0)
    s.seqLen = std::min<int64_t>(m.maxPositions, 1024);
  if (s.seqLen < 1)
    return "--seq-len must be >= 1";
  if (m.arch == Arch::GPT2 && s.seqLen > m.maxPositions)
    return m.where("max_positions") + "--seq-len " + std::to_string(s.seqLen) + " exceeds the " +
           std::to_string(m.maxPositions) + " learned positions of " + m.name +
           " (n_positions); use --seq-len <= " + std::to_string(m.maxPositions);
  if (s.microBatch < 1)
    return "--micro-batch must be >= 1";
  int64_t perStep = 0; // sequences per microbatch over dp
  if (dp < 1 || __builtin_mul_overflow(s.microBatch, dp, &perStep))
    return "--micro-batch " + std::to_string(s.microBatch) + " × dp " + std::to_string(dp) +
           " overflows: lower --micro-batch";
  if (s.globalBatch == 0)
    s.globalBatch = perStep;
  if (s.globalBatch < 1 || s.globalBatch % perStep != 0)
    return "--global-batch " + std::to_string(s.globalBatch) +
           " is not a multiple of --micro-batch × dp = " +
           std::to_string(perStep) +
           "; global batch = micro-batch × microbatches × dp";
  // Every microbatch is an action of the step (and of every schedule): a
  // bound far above real runs (Megatron-LM's 1T: 512) keeps a typo from
  // building a step of billions of actions.
  if (s.globalBatch / perStep > kMaxMicrobatches)
    return "--global-batch " + std::to_string(s.globalBatch) + " / (--micro-batch × dp = " +
           std::to_string(perStep) + ") = " + std::to_string(s.globalBatch / perStep) +
           " microbatches per step, more than " + std::to_string(kMaxMicrobatches) +
           ": raise --micro-batch or dp, or lower --global-batch";
  if (s.dtype != "f32" && s.dtype != "bf16" && s.dtype != "f16")
    return "--dtype '" + s.dtype + "' is not one of f32, bf16, f16";
  if (s.moeCapacityFactor != 0 && !m.moe)
    return "--moe-capacity-factor applies to a mixture-of-experts model; " + m.name + " has no experts";
  if (s.moeCapacityFactor < 0 || !std::isfinite(s.moeCapacityFactor))
    return "--moe-capacity-factor must be > 0 (0 or absent: dropless)";
  return std::nullopt;
}

int64_t llcdist::moeExpertCapacity(const ModelConfig &m, const TrainingShape &s) {
  if (!m.moe || s.moeCapacityFactor <= 0)
    return 0;
  const int64_t T = s.microBatch * s.seqLen, k = m.moe->topK, E = m.moe->experts;
  const double rows = std::ceil(s.moeCapacityFactor * double(T) * double(k) / double(E));
  return std::max<int64_t>(1, std::min<int64_t>(T, int64_t(std::min(rows, double(T)))));
}
