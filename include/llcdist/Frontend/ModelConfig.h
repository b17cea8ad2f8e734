//===- ModelConfig.h - Hugging Face config.json front end ------*- C++ -*-===//
//
// MLIR-free: parses and validates a Hugging Face config.json of one of the
// causal LM classes in kFamilies (GPT2LMHeadModel, LlamaForCausalLM, ...)
// into one flat description of a decoder-only transformer. Errors name the
// file, the line and column of the field, the field, and what to do.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_FRONTEND_MODELCONFIG_H
#define LLCDIST_FRONTEND_MODELCONFIG_H

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace llcdist {

enum class Arch {
  GPT2,
  Llama,
  Qwen2,
  Mistral,
  Gemma,
  Phi,
  Mixtral,
  Qwen2Moe,
  Starcoder2,
  StableLm,
  Olmo,
  GptNeoX,
  Falcon,
  Bloom,
  GptBigCode,
  Mpt,
  GptJ,
  Opt,
  Cohere,
  GptNeo,
  BioGpt,
  CodeGen
};
/// How many families there are: a new one is appended to Arch and gets its
/// row in kFamilies (and in ModelConfig.cpp's kReaders; docs/adding-a-model.md).
inline constexpr int kNumArchs = int(Arch::CodeGen) + 1;

/// What the passes ask of a family: the bits of a kFamilies row. Each family
/// states in its row the ones it has, so a new family decides each of them
/// where it is added rather than inheriting a default from a list elsewhere.
enum ArchTrait : unsigned {
  /// Llama's decoder layer (RMSNorm, RoPE, q/k/v/o projections, a gated MLP,
  /// the model.layers.{i} names), which Qwen2 (with q, k, v biases), Mistral
  /// (with a sliding attention window) and Gemma (GeGLU, (1 + w) norms,
  /// scaled embeddings) share, and so do the mixtures of experts (Mixtral:
  /// Mistral's attention; Qwen2-MoE: Qwen2's) with a sparse MoE block in the
  /// MLP's place, and so do StableLM (with LayerNorms and partial rotary
  /// embeddings), OLMo (with LayerNorms that have no weight or bias) and
  /// Cohere (StableLM's parallel layer with LayerNorms of a weight alone,
  /// rotary embeddings in adjacent pairs and scaled logits). The others have
  /// LayerNorms and a two-matrix MLP.
  kLlamaLayout = 1u << 0,
  /// GPT-2's layer: one GEMM's q | k | v (GPTBigCode: in kv-head groups), the
  /// two-matrix MLP, sequential; GPTBigCode's and MPT's (Wqkv, no biases,
  /// ALiBi) with nn.Linear layouts and their own names.
  kGpt2Layer = 1u << 1,
  /// One LayerNorm feeding attention and the MLP side by side, x + attn(ln x)
  /// + mlp(ln x): Phi's PhiDecoderLayer, GPT-J's GPTJBlock and CodeGen's
  /// CodeGenBlock (ImportXF's phiBlock).
  kPhiLayer = 1u << 2,
  /// transformers builds the token embedding with padding_idx =
  /// config.pad_token_id (ModelConfig::paddingIdx); without it pad_token_id
  /// is metadata.
  kPaddingIdx = 1u << 3,
  /// A learned position table added to the embeddings instead of rotary
  /// embeddings (transformer.wpe; OPT's model.decoder.embed_positions from
  /// row ModelConfig::positionOffset); --seq-len is bounded by it.
  kLearnedPositions = 1u << 4,
  /// q, k and v come from one GEMM whose output holds, for each kv head, its
  /// query heads' q and its k and v side by side (GPT-NeoX: one query head
  /// per group; Falcon: num_heads / num_kv_heads, one group under
  /// multi_query; BLOOM: one query head per group, as GPT-NeoX; GPTBigCode:
  /// one group of every q head, the k and the v head under multi_query, else
  /// one per head).
  kGroupedQkv = 1u << 5,
  /// The norms are LayerNorms (the final one too), not RMSNorms: with a
  /// weight and a bias but OLMo's (neither) and MPT's and Cohere's (a weight
  /// alone): ModelConfig::normParams.
  kLayerNorms = 1u << 6,
};

/// A family: its model_type, its transformers class and its traits.
struct Family {
  Arch arch;
  const char *modelType, *hfClass;
  unsigned traits;
};

/// Every family, one row per Arch in its order.
inline constexpr Family kFamilies[] = {
    {Arch::GPT2, "gpt2", "GPT2LMHeadModel", kGpt2Layer | kLearnedPositions | kLayerNorms},
    {Arch::Llama, "llama", "LlamaForCausalLM", kLlamaLayout | kPaddingIdx},
    {Arch::Qwen2, "qwen2", "Qwen2ForCausalLM", kLlamaLayout | kPaddingIdx},
    {Arch::Mistral, "mistral", "MistralForCausalLM", kLlamaLayout | kPaddingIdx},
    {Arch::Gemma, "gemma", "GemmaForCausalLM", kLlamaLayout | kPaddingIdx},
    {Arch::Phi, "phi", "PhiForCausalLM", kPhiLayer | kPaddingIdx | kLayerNorms},
    {Arch::Mixtral, "mixtral", "MixtralForCausalLM", kLlamaLayout | kPaddingIdx},
    {Arch::Qwen2Moe, "qwen2_moe", "Qwen2MoeForCausalLM", kLlamaLayout | kPaddingIdx},
    {Arch::Starcoder2, "starcoder2", "Starcoder2ForCausalLM", kPaddingIdx | kLayerNorms},
    {Arch::StableLm, "stablelm", "StableLmForCausalLM", kLlamaLayout | kPaddingIdx | kLayerNorms},
    {Arch::Olmo, "olmo", "OlmoForCausalLM", kLlamaLayout | kPaddingIdx | kLayerNorms},
    {Arch::GptNeoX, "gpt_neox", "GPTNeoXForCausalLM", kGroupedQkv | kLayerNorms},
    {Arch::Falcon, "falcon", "FalconForCausalLM", kGroupedQkv | kLayerNorms},
    {Arch::Bloom, "bloom", "BloomForCausalLM", kGroupedQkv | kLayerNorms},
    {Arch::GptBigCode, "gpt_bigcode", "GPTBigCodeForCausalLM",
     kGpt2Layer | kGroupedQkv | kLearnedPositions | kLayerNorms},
    {Arch::Mpt, "mpt", "MptForCausalLM", kGpt2Layer | kLayerNorms},
    {Arch::GptJ, "gptj", "GPTJForCausalLM", kPhiLayer | kLayerNorms},
    {Arch::Opt, "opt", "OPTForCausalLM", kPaddingIdx | kLearnedPositions | kLayerNorms},
    {Arch::Cohere, "cohere", "CohereForCausalLM", kLlamaLayout | kPaddingIdx | kLayerNorms},
    {Arch::GptNeo, "gpt_neo", "GPTNeoForCausalLM", kLearnedPositions | kLayerNorms},
    {Arch::BioGpt, "biogpt", "BioGptForCausalLM", kPaddingIdx | kLearnedPositions | kLayerNorms},
    {Arch::CodeGen, "codegen", "CodeGenForCausalLM", kPhiLayer | kLayerNorms},
};
constexpr bool familiesInArchOrder() {
  for (int i = 0; i < kNumArchs; ++i)
    if (int(kFamilies[i].arch) != i)
      return false;
  return sizeof kFamilies / sizeof kFamilies[0] == size_t(kNumArchs);
}
static_assert(familiesInArchOrder(), "one kFamilies row per Arch, in its order");

constexpr const Family &family(Arch a) { return kFamilies[int(a)]; }
constexpr bool hasTrait(Arch a, ArchTrait t) { return (family(a).traits & t) != 0; }
/// "gpt2" / "llama" / ... (the model_type)
constexpr const char *archName(Arch a) { return family(a).modelType; }
/// "GPT2LMHeadModel" / "LlamaForCausalLM" / ...
constexpr const char *hfArchitecture(Arch a) { return family(a).hfClass; }
constexpr bool llamaLayout(Arch a) { return hasTrait(a, kLlamaLayout); }
constexpr bool gpt2Layer(Arch a) { return hasTrait(a, kGpt2Layer); }
constexpr bool phiLayer(Arch a) { return hasTrait(a, kPhiLayer); }
constexpr bool tokenEmbeddingPadding(Arch a) { return hasTrait(a, kPaddingIdx); }
constexpr bool learnedPositions(Arch a) { return hasTrait(a, kLearnedPositions); }
constexpr bool groupedQkv(Arch a) { return hasTrait(a, kGroupedQkv); }
constexpr bool layerNorms(Arch a) { return hasTrait(a, kLayerNorms); }

/// What a norm learns (ModelConfig::normParams): Full, a weight and a bias
/// (RMSNorm: its weight); WeightOnly, a LayerNorm's weight without a bias
/// (MPT's, Cohere's); None, neither (OLMo's OlmoLayerNorm).
enum class NormParams { Full, WeightOnly, None };

/// The activation of a two-matrix (GPT-style) MLP (ModelConfig::mlpActivation).
enum class MlpActivation { GeluTanh, GeluErf, Relu };

/// Hugging Face's `rope_scaling` with rope_type "llama3" (Llama 3.1+).
struct RopeScaling {
  double factor = 1, lowFreqFactor = 1, highFreqFactor = 1;
  int64_t originalMaxPositions = 0;
};

/// A sparse mixture-of-experts MLP (Mixtral's MixtralSparseMoeBlock,
/// Qwen2-MoE's Qwen2MoeSparseMoeBlock): a router [experts, hidden] (HF
/// `gate`), softmax, the top `topK` experts of each token, each expert a
/// SwiGLU MLP of `intermediate`; Qwen2-MoE adds a shared expert (a SwiGLU
/// MLP of `sharedIntermediate`) scaled by sigmoid(shared_expert_gate(x)).
struct MoeConfig {
  int64_t experts = 0, topK = 0, intermediate = 0;
  /// The layers whose MLP is dense (Qwen2-MoE's Qwen2MoeMLP of the model's
  /// intermediate_size): those in mlp_only_layers and those with
  /// (i + 1) % decoder_sparse_step != 0, ascending; empty: every layer is
  /// sparse (Mixtral, Qwen1.5-MoE).
  std::vector<int64_t> denseLayers;
  bool sparse(int64_t layer) const { return !std::binary_search(denseLayers.begin(), denseLayers.end(), layer); }
  int64_t sharedIntermediate = 0; ///< 0: no shared expert (Mixtral)
  /// The top-k weights divided by their sum (Mixtral: always; Qwen2-MoE:
  /// norm_topk_prob).
  bool normalizeTopK = true;
  /// The load-balancing auxiliary loss's coefficient (router_aux_loss_coef)
  /// when output_router_logits adds it to the loss; 0: no auxiliary loss.
  double auxLossCoef = 0;
};

struct ModelConfig {
  std::string path;  ///< the file it came from ("" when parsed from text)
  std::string name;  ///< file stem, e.g. "llama3-8b"
  Arch arch = Arch::GPT2;
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, kvHeads = 0,
          headDim = 0, intermediate = 0, maxPositions = 0;
  double normEps = 1e-5;
  /// The learned parameters of every norm (NormParams).
  NormParams normParams = NormParams::Full;
  /// OLMo's clip_qkv c: the q, k and v projections' outputs clamped to
  /// [-c, c] before the rotary embeddings; 0: none.
  double clipQkv = 0;
  double ropeTheta = 10000.0; ///< Llama and Qwen2
  std::optional<RopeScaling> ropeScaling;
  bool tieEmbeddings = true;
  /// Biases on the q, k and v projections (GPT-2: always; Llama:
  /// attention_bias; Qwen2: always; StarCoder2: use_bias) and on the output
  /// projection (GPT-2: always; Llama: attention_bias; Qwen2: never;
  /// StarCoder2: use_bias).
  bool qkvBias = true, outputBias = true;
  /// Mistral's (and StarCoder2's) sliding_window W: query i sees keys
  /// i-W..i (transformers 4.40's mask: W + 1 keys, itself included); 0:
  /// plain causal attention.
  int64_t slidingWindow = 0;
  bool mlpBias = true; ///< GPT-2: always; Llama: mlp_bias; StarCoder2: use_bias
  /// Phi's and StableLM's partial rotary: the first rotaryDim dims of each
  /// head rotate (partial_rotary_factor · head_dim; GPT-J's rotary_dim); 0:
  /// all of them.
  int64_t rotaryDim = 0;
  /// GPT-J's rotate_every_two: the rotated pairs are adjacent dims (2j,
  /// 2j + 1), not rotate_half's j and j + rotaryDim/2 (xf.rope interleaved).
  bool ropeInterleaved = false;
  /// CodeGen's qkv_proj: one GEMM whose output is this many blocks (its
  /// mp_num, 4), each [q | v | k] of heads / qkvBlocks heads; 0: q, k and v
  /// are laid out otherwise. tp must divide it (whole blocks per rank).
  int64_t qkvBlocks = 0;
  bool lmHeadBias = false; ///< Phi, GPT-J: lm_head has a bias
  /// Cohere's logit_scale: the logits times it (applied to the final norm's
  /// output, before the head: the same logits, bit for bit where it is a
  /// power of two); 1: none.
  double logitScale = 1;
  /// use_parallel_residual: attention and the MLP both read the layer's
  /// input, x + attn(ln x) + mlp(ln' x). StableLM's and Falcon's
  /// parallel_attn through one LayerNorm (ln' = ln, as Phi's block always
  /// is); with parallelNorms through two (GPT-NeoX's input_layernorm and
  /// post_attention_layernorm, Falcon's new_decoder_architecture's ln_attn
  /// and ln_mlp).
  bool parallelResidual = false;
  bool parallelNorms = false;
  /// The two-matrix MLP's activation: the tanh GELU ("gelu_new": GPT-2, Phi,
  /// StarCoder2, GPT-J), the exact one (GPT-NeoX's hidden_act "gelu",
  /// Falcon's, MPT's) or ReLU (OPT's).
  MlpActivation mlpActivation = MlpActivation::GeluTanh;
  /// GPT-Neo's local attention: in the layers of localLayers (ascending; the
  /// "local" entries of attention_layers) query i sees keys i-W < j <= i, W =
  /// localWindow (window_size: W keys, itself included; xf.attention's
  /// window); the other layers attend globally.
  int64_t localWindow = 0;
  std::vector<int64_t> localLayers;
  bool localLayer(int64_t layer) const { return std::binary_search(localLayers.begin(), localLayers.end(), layer); }
  /// GPT-Neo's attention scores q·k are not divided by sqrt(head_dim): q is
  /// multiplied by sqrt(head_dim) first (xf.scale), which xf.attention's
  /// 1/sqrt(head_dim) undoes (exactly where head_dim is a power of 4).
  bool unscaledAttention = false;
  /// OPT's OPTLearnedPositionalEmbedding: position p is row p + 2 of a table
  /// of maxPositions + 2 rows (xf.add_position_embedding's offset); 0: row p
  /// of maxPositions.
  int64_t positionOffset = 0;
  /// torch's nn.Embedding(padding_idx) on the token embedding, from
  /// pad_token_id (transformers' default: OPT's and OLMo's 1, Gemma's and
  /// Cohere's 0, the others' none) in the families whose embedding takes it
  /// (tokenEmbeddingPadding): row paddingIdx gets no gradient from the
  /// lookup (xf.embedding's padding_idx); -1: none.
  int64_t paddingIdx = -1;
  /// BLOOM's (and MPT's) ALiBi: no position embedding; each attention score
  /// gets a head's slope times (key − query position) (xf.attention
  /// alibi_heads).
  bool alibi = false;
  /// BLOOM's word_embeddings_layernorm: a LayerNorm (weight and bias) on
  /// the embeddings before the first layer.
  bool embeddingNorm = false;
  /// Gemma: RMSNorm scales by (1 + w), the embeddings are multiplied by
  /// sqrt(hidden_size), and the gated MLP's activation is the tanh GELU
  /// (GeGLU) instead of SiLU (SwiGLU).
  double normWeightOffset = 0;
  bool scaleEmbeddings = false;
  bool gatedGelu = false;
  /// The layers' MLPs are this mixture of experts (Mixtral, Qwen2-MoE), but
  /// for moe->denseLayers.
  std::optional<MoeConfig> moe;
  /// Whether layer i's MLP is the mixture of experts; the count of such layers.
  bool sparseLayer(int64_t i) const { return moe && moe->sparse(i); }
  int64_t sparseLayers() const { return moe ? layers - int64_t(moe->denseLayers.size()) : 0; }
  /// Where the fields that shape the graph are, by the role they play (the
  /// xf.model keys: num_heads, num_kv_heads, num_layers, vocab_size,
  /// max_positions, hidden_size) -> the config key and its {line, column}
  /// (1-based). A role whose field is absent (defaulted) has no entry.
  struct FieldPos {
    std::string key;
    unsigned line = 0, column = 0;
  };
  std::map<std::string, FieldPos> fieldPos;
  /// "PATH:LINE:COL: " of the field playing `role`, else "PATH: ".
  std::string where(const std::string &role) const;

  /// Parameter count from the architecture's formula (unique tensors: a tied
  /// embedding counts once). The compiler's count from the IR must agree.
  int64_t numParameters() const;
  /// The parameters one token's forward reads: a mixture of experts counts
  /// topK of its experts (Mixtral-8x7B: 12.9 B of 46.7 B); else
  /// numParameters().
  int64_t activeParameters() const;
  /// One decoder layer's parameters (a sparse layer's where the model has
  /// experts), and its parameter tensors (an expert weight stacks the
  /// experts' tensors: one tensor): a sparse layer's where `sparse` and the
  /// model has experts, a dense layer's otherwise.
  int64_t layerParameters() const;
  int64_t layerTensors(bool sparse = true) const;
  /// One layer's norm tensors, each of hidden_size elements: two RMSNorm
  /// weights (the Llama-shaped families), two LayerNorms' weights and biases
  /// (GPT-2, StarCoder2, StableLM), one LayerNorm's (Phi, StableLM under
  /// use_parallel_residual, Falcon's parallel_attn), two LayerNorms' weights
  /// (MPT), none (OLMo).
  int64_t normTensors() const;
  /// The final norm's tensors, each of hidden_size elements: a LayerNorm's
  /// weight and bias, an RMSNorm's weight or MPT's LayerNorm's, none (OLMo).
  int64_t finalNormTensors() const;
};

/// A failed parse or check: `message` already reads
/// "FILE:LINE:COL: field 'F': what is wrong; the fix".
struct ConfigError {
  std::string message;
};

/// Parses `text` (the content of `path`). Returns the error, if any.
std::optional<ConfigError> parseModelConfig(std::string_view text,
                                            const std::string &path,
                                            ModelConfig &out);
/// Reads and parses the file at `path`.
std::optional<ConfigError> loadModelConfig(const std::string &path,
                                           ModelConfig &out);

} // namespace llcdist



namespace llcdist {

/// The shapes of one training step (llc-dist compile's --seq-len,
/// --micro-batch, --global-batch, --dtype).
/// The most microbatches one step may have (resolveTrainingShape).
constexpr int64_t kMaxMicrobatches = 65536;

struct TrainingShape {
  int64_t seqLen = 0;      ///< 0: min(max positions, 1024)
  int64_t microBatch = 1;  ///< sequences per microbatch per data-parallel rank
  int64_t globalBatch = 0; ///< sequences per step; 0: microBatch × dp
  std::string dtype = "f32"; ///< f32 | bf16 | f16
  /// Mixture of experts: --moe-capacity-factor F (0: dropless, the
  /// default). Each expert takes at most ceil(F · T · k / E) of a rank's T
  /// tokens per microbatch; later assignments are dropped (docs/memory.md).
  double moeCapacityFactor = 0;

  /// Microbatches per step: globalBatch / (microBatch × dp).
  int64_t microbatches(int64_t dp) const { return globalBatch / (microBatch * dp); }
};

/// Fills the defaults of `shape` and checks it against the model and the
/// data-parallel degree; returns a message naming the flag and the fix.
///
/// The capacity of each expert under --moe-capacity-factor (0 without
/// one): the rows it takes of a rank's T tokens per microbatch, routed k at
/// a time to E experts: min(T, ceil(F · T · k / E)), at least 1.
int64_t moeExpertCapacity(const ModelConfig &model, const TrainingShape &shape);
std::optional<std::string> resolveTrainingShape(const ModelConfig &model,
                                                int64_t dp,
                                                TrainingShape &shape);

} // namespace llcdist

#endif
