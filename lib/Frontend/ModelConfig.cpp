//===- ModelConfig.cpp - Hugging Face config.json front end ---------------===//
#include "llcdist/Frontend/ModelConfig.h"
#include "ConfigFields.h"
#include "llcdist/Support/JsonObject.h"
#include "llcdist/runtime/PlanSchema.h" // header-only: the runtime's rule for rope_theta

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

using namespace llcdist;
using json = nlohmann::json;

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
  // The GPT-style layers: the LayerNorms (one for Phi's, GPT-J's and a
  // parallel residual's; MPT's without biases); q, k, v (fused or not), o,
  // the MLP's two matrices, and each family's biases (GPT-2, Phi, BLOOM,
  // GPTBigCode: every one; StarCoder2: use_bias; GPT-NeoX: the MLP's, the
  // attention's when attention_bias; Falcon: bias; MPT: none; GPT-J: the
  // MLP's).
  if (!llamaLayout(c.arch))
    return T(c.normTensors()) * H + H * q + 2 * H * kv + q * H + 2 * H * I + (c.qkvBias ? q + 2 * kv : 0) +
           (c.outputBias ? H : 0) + (c.mlpBias ? I + H : 0);
  T layer = T(c.normTensors()) * H + H * q + 2 * H * kv + q * H;
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
  if (learnedPositions(c.arch))
    n += T(c.maxPositions + c.positionOffset) * H; // wpe (OPT's with its two unused rows)
  n += T(c.finalNormTensors()) * H;                // ln_f, model.norm (Phi: model.final_layernorm)
  if (c.embeddingNorm)
    n += 2 * H; // BLOOM's word_embeddings_layernorm
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
  if (!llamaLayout(arch)) { // the norms, q k v o (q|k|v fused: one), the MLP's two matrices, their biases
    const bool fused = gpt2Layer(arch) || groupedQkv(arch) || qkvBlocks > 0;
    return normTensors() + (fused ? 4 : 6) + (qkvBias ? (fused ? 1 : 3) : 0) + (outputBias ? 1 : 0) + (mlpBias ? 2 : 0);
  }
  // The norms, q k v o, and the gated MLP's three matrices or the router,
  // three stacked expert weights and the shared expert with its gate.
  int64_t mlp = moe && sparse ? 4 + (moe->sharedIntermediate ? 4 : 0) : 3 + (mlpBias ? 3 : 0);
  return 4 + normTensors() + mlp + (qkvBias ? 3 : 0) + (outputBias ? 1 : 0);
}

int64_t ModelConfig::normTensors() const {
  const int64_t norms = phiLayer(arch) || (parallelResidual && !parallelNorms) ? 1 : 2;
  return norms * finalNormTensors();
}

int64_t ModelConfig::finalNormTensors() const {
  if (normParams == NormParams::None)
    return 0;
  return layerNorms(arch) && normParams == NormParams::Full ? 2 : 1;
}

using namespace llcdist::config;

namespace {
const std::initializer_list<const char *> kMetadataFields = {
    "_name_or_path", "architectures", "model_type", "torch_dtype",
    "transformers_version", "use_cache", "bos_token_id", "eos_token_id",
    "pad_token_id", "initializer_range", "id2label", "label2id"};

/// Class names of published configs that transformers builds as a family's
/// own class: MosaicML's Hub configs name their remote code's MPTForCausalLM
/// (with model_type "mpt", which transformers maps to MptForCausalLM).
constexpr std::pair<const char *, Arch> kArchAliases[] = {{"MPTForCausalLM", Arch::Mpt}};

/// Where config.json keeps the fields the passes may blame (ModelConfig's
/// fieldPos roles): the heads, the kv heads (the heads' key where the file
/// has no kv key: GPTBigCode's is multi_query), the layers, the position
/// table's size and the hidden size.
struct ConfigKeys {
  const char *heads, *kvHeads, *layers, *positions, *hidden;
};
constexpr ConfigKeys kHfKeys{"num_attention_heads", "num_key_value_heads", "num_hidden_layers",
                             "max_position_embeddings", "hidden_size"};
constexpr ConfigKeys kGpt2Keys{"n_head", nullptr, "n_layer", "n_positions", "n_embd"};
constexpr ConfigKeys kFalconKeys{"num_attention_heads", "num_kv_heads", "num_hidden_layers", "max_position_embeddings",
                                 "hidden_size"};

/// How a family's config.json is read: its parser (ConfigFields.h), the
/// token embedding's padding_idx where pad_token_id is absent (the config
/// class's default; -1: None, and always for a family without kPaddingIdx)
/// and its keys.
struct Reader {
  Arch arch;
  void (*parse)(FieldReader &, ModelConfig &, const json &);
  int64_t padDefault;
  ConfigKeys keys;
};

/// One row per Arch, in its order (kFamilies').
constexpr Reader kReaders[] = {
    {Arch::GPT2, parseGPT2, -1, kGpt2Keys},
    {Arch::Llama, parseLlama, -1, kHfKeys},
    {Arch::Qwen2, parseLlama, -1, kHfKeys},
    {Arch::Mistral, parseLlama, -1, kHfKeys},
    {Arch::Gemma, parseLlama, 0, kHfKeys},
    {Arch::Phi, parsePhi, -1, kHfKeys},
    {Arch::Mixtral, parseLlama, -1, kHfKeys},
    {Arch::Qwen2Moe, parseLlama, -1, kHfKeys},
    {Arch::Starcoder2, parseStarcoder2, -1, kHfKeys},
    {Arch::StableLm, parseStableLm, -1, kHfKeys},
    {Arch::Olmo, parseOlmo, 1, kHfKeys},
    {Arch::GptNeoX, parseGptNeoX, -1, kHfKeys},
    {Arch::Falcon, parseFalcon, -1, kFalconKeys},
    {Arch::Bloom, parseBloom, -1, {"n_head", nullptr, "n_layer", "max_position_embeddings", "hidden_size"}},
    {Arch::GptBigCode, parseGptBigCode, -1, {"n_head", "multi_query", "n_layer", "n_positions", "n_embd"}},
    {Arch::Mpt, parseMpt, -1, {"n_heads", nullptr, "n_layers", "max_seq_len", "d_model"}},
    {Arch::GptJ, parseGptJ, -1, kGpt2Keys},
    {Arch::Opt, parseOpt, 1, kHfKeys},
    {Arch::Cohere, parseCohere, 0, kHfKeys},
    {Arch::GptNeo, parseGptNeo, -1, {"num_heads", nullptr, "num_layers", "max_position_embeddings", "hidden_size"}},
    {Arch::BioGpt, parseBioGpt, 1, kHfKeys},
    {Arch::CodeGen, parseCodeGen, -1, kGpt2Keys},
};
constexpr bool readersInArchOrder() {
  for (int i = 0; i < kNumArchs; ++i)
    if (int(kReaders[i].arch) != i || (kReaders[i].padDefault >= 0 && !tokenEmbeddingPadding(Arch(i))))
      return false;
  return std::size(kReaders) == size_t(kNumArchs);
}
static_assert(readersInArchOrder(), "one kReaders row per Arch, in its order; a pad default only where the family's "
                                    "embedding takes padding_idx (kPaddingIdx)");
const Reader &reader(Arch a) { return kReaders[int(a)]; }

Arch detectArch(FieldReader &r, const json &obj) {
  if (obj.contains("architectures")) {
    const json &a = obj.at("architectures");
    if (!a.is_array() || a.empty())
      r.fail("architectures", "must be a non-empty array of class names");
    std::string supported;
    for (const Family &k : kFamilies) {
      for (const json &name : a)
        if (name == k.hfClass)
          return k.arch;
      supported += std::string(supported.empty() ? "" : ", ") + k.hfClass;
    }
    for (const auto &[alias, arch] : kArchAliases)
      for (const json &name : a)
        if (name == alias)
          return arch;
    r.fail("architectures", "unsupported architecture " + a.dump() + "; supported: " + supported);
  }
  if (obj.contains("model_type")) {
    const json &t = obj.at("model_type");
    std::string supported;
    for (const Family &k : kFamilies) {
      if (t == k.modelType)
        return k.arch;
      supported += std::string(supported.empty() ? "" : ", ") + "\"" + k.modelType + "\"";
    }
    r.fail("model_type", "unsupported model_type " + t.dump() + "; supported: " + supported);
  }
  throw Failure{r.where("") + "missing field 'architectures' (e.g. "
                              "[\"LlamaForCausalLM\"]) or 'model_type'"};
}

/// The token embedding's padding_idx (ModelConfig::paddingIdx) as
/// transformers builds it: pad_token_id, or the config class's default when
/// the field is absent (Reader::padDefault); null is None. nn.Embedding
/// takes -V <= p < V and counts a negative p from the end.
int64_t paddingIdx(const json &obj, const FieldReader &r, const ModelConfig &c) {
  if (!tokenEmbeddingPadding(c.arch))
    return -1;
  if (!obj.contains("pad_token_id"))
    return reader(c.arch).padDefault;
  const json &v = obj.at("pad_token_id");
  if (v.is_null())
    return -1;
  if (!v.is_number_integer())
    r.fail("pad_token_id", "must be a token id (an integer) or null, got " + v.dump());
  const int64_t p = v.get<int64_t>();
  if (p < -c.vocab || p >= c.vocab)
    r.fail("pad_token_id", "the token embedding's padding_idx " + v.dump() + " is outside the vocabulary [0, " +
                               std::to_string(c.vocab) + ") (vocab_size); set it to a token id below " +
                               std::to_string(c.vocab) + " or to null for no padding row");
  return p < 0 ? c.vocab + p : p;
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
    reader(c.arch).parse(r, c, obj);
    c.paddingIdx = paddingIdx(obj, r, c);
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
    const ConfigKeys &keys = reader(c.arch).keys;
    const std::pair<const char *, std::string> roles[] = {
        {"num_heads", keys.heads},
        {"num_kv_heads", keys.kvHeads && obj.contains(keys.kvHeads) ? keys.kvHeads : keys.heads},
        {"num_layers", keys.layers},
        {"vocab_size", "vocab_size"},
        {"max_positions", keys.positions},
        {"hidden_size", keys.hidden},
        {"output_router_logits", "output_router_logits"}, // the MoE load-balancing loss
        {"logit_scale", "logit_scale"},                   // Cohere's scaled logits
        {"clip_qkv", "clip_qkv"}};                        // OLMo's clamp of q, k and v
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
  if (learnedPositions(m.arch) && s.seqLen > m.maxPositions)
    return m.where("max_positions") + "--seq-len " + std::to_string(s.seqLen) + " exceeds the " +
           std::to_string(m.maxPositions) + " learned positions of " + m.name + " (" + reader(m.arch).keys.positions +
           "); use --seq-len <= " + std::to_string(m.maxPositions);
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
