//===- ImportXF.cpp - model config -> xf forward graph --------------------===//
//
// Mirrors Hugging Face transformers' GPT2LMHeadModel, LlamaForCausalLM and
// PhiForCausalLM forward passes op for op (Qwen2ForCausalLM,
// MistralForCausalLM and GemmaForCausalLM share Llama's layer, with q/k/v
// biases, a sliding window, GeGLU and (1 + w) norms; MixtralForCausalLM and
// Qwen2MoeForCausalLM put a sparse mixture of experts in its MLP's place;
// Starcoder2ForCausalLM has Llama's attention in a GPT-style layer;
// StableLmForCausalLM is Llama's layer with LayerNorms and partial rotary,
// OlmoForCausalLM Llama's layer with LayerNorms that have no parameters;
// GPTNeoXForCausalLM a GPT-style layer with q, k and v fused per head, partial
// rotary embeddings, the exact GELU and a parallel residual, and
// FalconForCausalLM one with q, k and v fused per kv head; BloomForCausalLM
// GPT-NeoX's fused q, k and v with ALiBi; GPTBigCodeForCausalLM and
// MptForCausalLM GPT-2's layer, MPT's with ALiBi, no biases and LayerNorms
// of a weight alone; GPTJForCausalLM Phi's layer with GPT-2's names and
// rotary embeddings in adjacent pairs; OPTForCausalLM StarCoder2's layer with
// learned positions from row 2 of their table and ReLU; CohereForCausalLM
// StableLM's parallel layer with rotary embeddings in adjacent pairs and
// scaled logits);
// parameter names and
// layouts are theirs, so a safetensors checkpoint maps onto the graph without
// conversion.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Frontend/ImportXF.h"
#include "llcdist/Dialect/XF/IR/ConfigLoc.h"
#include "llcdist/Dialect/XF/IR/XFOps.h"
#include "llcdist/Frontend/ModelConfig.h"

#include "mlir/IR/Builders.h"

#include <cmath>
#include <iterator>

using namespace mlir;
using namespace llcdist;
using namespace llcdist::xf;

static_assert(kMaxModelMicrobatches == kMaxMicrobatches,
              "xf.model's microbatches bound is the frontend's (resolveTrainingShape)");

namespace {
/// The body a family's layers are built by (the Importer's llamaBlock,
/// gpt2Block, phiBlock, sequentialBlock, stablelmBlock, groupedQkvBlock).
enum class Body { Llama, Gpt2, Phi, Sequential, StableLm, GroupedQkv };

/// How the importer builds each family: its layer body, and its names
/// outside its layers as its state_dict has them: the token embedding's
/// module, the learned position table's (kLearnedPositions only), the final
/// norm's (a LayerNorm where kLayerNorms, else an RMSNorm) and the head's
/// (untied: its weight; with ModelConfig::lmHeadBias, its bias). One row per
/// Arch, in its order.
struct Layout {
  Arch arch;
  Body body;
  const char *embed, *positions, *finalNorm, *head;
};
constexpr Layout kLayouts[] = {
    {Arch::GPT2, Body::Gpt2, "transformer.wte", "transformer.wpe", "transformer.ln_f", "lm_head"},
    {Arch::Llama, Body::Llama, "model.embed_tokens", nullptr, "model.norm", "lm_head"},
    {Arch::Qwen2, Body::Llama, "model.embed_tokens", nullptr, "model.norm", "lm_head"},
    {Arch::Mistral, Body::Llama, "model.embed_tokens", nullptr, "model.norm", "lm_head"},
    {Arch::Gemma, Body::Llama, "model.embed_tokens", nullptr, "model.norm", "lm_head"},
    {Arch::Phi, Body::Phi, "model.embed_tokens", nullptr, "model.final_layernorm", "lm_head"},
    {Arch::Mixtral, Body::Llama, "model.embed_tokens", nullptr, "model.norm", "lm_head"},
    {Arch::Qwen2Moe, Body::Llama, "model.embed_tokens", nullptr, "model.norm", "lm_head"},
    {Arch::Starcoder2, Body::Sequential, "model.embed_tokens", nullptr, "model.norm", "lm_head"},
    {Arch::StableLm, Body::StableLm, "model.embed_tokens", nullptr, "model.norm", "lm_head"},
    {Arch::Olmo, Body::Llama, "model.embed_tokens", nullptr, "model.norm", "lm_head"},
    {Arch::GptNeoX, Body::GroupedQkv, "gpt_neox.embed_in", nullptr, "gpt_neox.final_layer_norm", "embed_out"},
    {Arch::Falcon, Body::GroupedQkv, "transformer.word_embeddings", nullptr, "transformer.ln_f", "lm_head"},
    {Arch::Bloom, Body::GroupedQkv, "transformer.word_embeddings", nullptr, "transformer.ln_f", "lm_head"},
    {Arch::GptBigCode, Body::Gpt2, "transformer.wte", "transformer.wpe", "transformer.ln_f", "lm_head"},
    {Arch::Mpt, Body::Gpt2, "transformer.wte", nullptr, "transformer.norm_f", "lm_head"},
    {Arch::GptJ, Body::Phi, "transformer.wte", nullptr, "transformer.ln_f", "lm_head"},
    {Arch::Opt, Body::Sequential, "model.decoder.embed_tokens", "model.decoder.embed_positions",
     "model.decoder.final_layer_norm", "lm_head"},
    {Arch::Cohere, Body::StableLm, "model.embed_tokens", nullptr, "model.norm", "lm_head"},
    {Arch::GptNeo, Body::Sequential, "transformer.wte", "transformer.wpe", "transformer.ln_f", "lm_head"},
    {Arch::BioGpt, Body::Sequential, "biogpt.embed_tokens", "biogpt.embed_positions", "biogpt.layer_norm",
     "output_projection"},
    {Arch::CodeGen, Body::Phi, "transformer.wte", nullptr, "transformer.ln_f", "lm_head"},
};
constexpr bool layoutsAgreeWithTheTraits() {
  for (int i = 0; i < kNumArchs; ++i) {
    const Layout &l = kLayouts[i];
    const Arch a = Arch(i);
    if (int(l.arch) != i || (l.positions != nullptr) != learnedPositions(a) || (l.body == Body::Gpt2) != gpt2Layer(a) ||
        (l.body == Body::Phi) != phiLayer(a) || (l.body == Body::Llama && !llamaLayout(a)))
      return false;
  }
  return std::size(kLayouts) == size_t(kNumArchs);
}
static_assert(layoutsAgreeWithTheTraits(), "one kLayouts row per Arch, in its order, agreeing with kFamilies' "
                                           "traits (learned positions, GPT-2's, Phi's and Llama's layers)");
const Layout &layout(Arch a) { return kLayouts[int(a)]; }

class Importer {
public:
  Importer(MLIRContext &ctx, const ModelConfig &m, const TrainingShape &s,
           int64_t dp)
      : ctx(ctx), m(m), b(&ctx),
        fileLoc(FileLineColLoc::get(&ctx, m.path.empty() ? "<config>" : m.path,
                                    1, 1)),
        B(s.microBatch * dp), S(s.seqLen), shape(s), dp(dp) {
    elt = s.dtype == "bf16"  ? Type(b.getBF16Type())
          : s.dtype == "f16" ? Type(b.getF16Type())
                             : Type(b.getF32Type());
  }

  OwningOpRef<ModuleOp> run() {
    OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc, StringRef(m.name));
    (*module)->setAttr(kModelAttr, describe());
    b.setInsertionPointToEnd(module->getBody());
    // One body per kind of layer: Qwen2-MoE's dense layers (decoder_sparse_step,
    // mlp_only_layers) call their own, and so do GPT-Neo's local ones.
    func::FuncOp sparse, dense, local;
    switch (layout(m.arch).body) {
    case Body::Sequential:
      if (int64_t(m.localLayers.size()) < m.layers)
        dense = sequentialBlock();
      if (!m.localLayers.empty()) {
        b.setInsertionPointToEnd(module->getBody());
        local = sequentialBlock(/*local=*/true);
      }
      break;
    case Body::Gpt2:
      dense = gpt2Block();
      break;
    case Body::Phi:
      dense = phiBlock();
      break;
    case Body::StableLm:
      dense = stablelmBlock();
      break;
    case Body::GroupedQkv:
      dense = groupedQkvBlock();
      break;
    case Body::Llama: // below, with a mixture of experts' sparse body
      break;
    }
    if (m.sparseLayers() > 0) {
      sparse = llamaBlock(/*sparse=*/true);
      b.setInsertionPointToEnd(module->getBody());
    }
    if (!dense && m.sparseLayers() < m.layers)
      dense = llamaBlock(/*sparse=*/false);
    b.setInsertionPointToEnd(module->getBody());
    forward([&](int64_t i) { return m.sparseLayer(i) ? sparse : m.localLayer(i) ? local : dense; });
    return module;
  }

private:
  RankedTensorType t(ArrayRef<int64_t> dims) {
    return RankedTensorType::get(dims, elt);
  }
  RankedTensorType act(int64_t d) { return t({B, S, d}); }
  Location loc(StringRef scope) { return NameLoc::get(b.getStringAttr(scope), fileLoc); }
  /// `scope`'s location, also naming the config fields (roles, see
  /// ConfigLoc.h) that shaped the op; a diagnostic shows the first field
  /// unless `fileFirst` (the entry function: its other errors are about the
  /// flags, not a field).
  Location loc(StringRef scope, ArrayRef<StringRef> roles, bool fileFirst = false) {
    SmallVector<Location> locs;
    if (fileFirst)
      locs.push_back(fileLoc);
    for (StringRef role : roles) {
      auto it = m.fieldPos.find(role.str());
      if (it == m.fieldPos.end())
        continue;
      locs.push_back(NameLoc::get(
          b.getStringAttr((kConfigFieldPrefix + role).str()),
          FileLineColLoc::get(&ctx, m.path.empty() ? "<config>" : m.path, it->second.line,
                              it->second.column)));
    }
    if (locs.size() == (fileFirst ? 1u : 0u))
      return loc(scope);
    if (!fileFirst)
      locs.push_back(fileLoc);
    return NameLoc::get(b.getStringAttr(scope),
                        FusedLoc::get(&ctx, locs, b.getStringAttr(kConfigLocTag)));
  }

  Value param(StringRef name, ArrayRef<int64_t> dims) {
    return ParamOp::create(b, loc(name), t(dims), name);
  }
  Value linear(StringRef name, Value x, int64_t in, int64_t out, bool bias,
               WeightLayout layout) {
    std::string w = (name + ".weight").str();
    Value wv = layout == WeightLayout::OutIn ? param(w, {out, in})
                                             : param(w, {in, out});
    Value bv = bias ? param((name + ".bias").str(), {out}) : Value();
    auto xt = cast<RankedTensorType>(x.getType());
    SmallVector<int64_t> dims(xt.getShape());
    dims.back() = out;
    return LinearOp::create(b, loc(name), t(dims), layout, x, wv, bv);
  }

  /// LayerNorm `name` (parameters name.weight, name.bias; MPT's without the
  /// bias, none for OLMo's OlmoLayerNorm) of `x`.
  Value layerNorm(const std::string &name, Value x) {
    if (m.normParams == NormParams::None)
      return LayerNormOp::create(b, loc(name), x.getType(), /*stats=*/Type(), x, /*weight=*/Value(),
                                 /*bias=*/Value(), b.getF64FloatAttr(m.normEps))
          .getResult();
    // Separate statements: the parameters appear in a fixed order.
    Value w = param(name + ".weight", {m.hidden});
    Value bias = m.normParams == NormParams::Full ? param(name + ".bias", {m.hidden}) : Value();
    return LayerNormOp::create(b, loc(name), x.getType(), /*stats=*/Type(), x,
                               w, bias, b.getF64FloatAttr(m.normEps))
        .getResult();
  }

  /// transformers' output_router_logits: the load-balancing loss over the
  /// sparse layers' routers (a dense layer passes the statistics on).
  bool auxLoss() const { return m.moe && m.moe->auxLossCoef > 0; }
  /// The load-balancing statistics [E] the layers pass on (auxLoss()): the
  /// assignments to each expert (i32) and the sums of its probabilities.
  SmallVector<Type> routerStatsTypes() {
    if (!auxLoss())
      return {};
    const int64_t E = m.moe->experts;
    return {RankedTensorType::get({E}, b.getI32Type()), RankedTensorType::get({E}, b.getF32Type())};
  }

  /// Opens a layer body `name(x) -> x` (`name(x, counts, probs) -> (x,
  /// counts, probs)` with auxLoss(): the routers' statistics so far);
  /// returns its first argument.
  Value beginLayer(func::FuncOp &fn, StringRef name) {
    SmallVector<Type> io{act(m.hidden)};
    llvm::append_range(io, routerStatsTypes());
    fn = func::FuncOp::create(b, loc(name), name, b.getFunctionType(io, io));
    fn->setAttr(kLayerBodyAttr, b.getUnitAttr());
    fn.setPrivate();
    b.setInsertionPointToStart(fn.addEntryBlock());
    routerStats.assign(fn.getArguments().begin() + 1, fn.getArguments().end());
    return fn.getArgument(0);
  }

  /// GPT-2's layer (Conv1D layouts; c_attn [q | k | v]), GPTBigCode's
  /// (nn.Linear layouts; c_attn split in kv-head groups: every q head, the k
  /// and the v head under multi_query, else each head's q, k and v) and
  /// MPT's (nn.Linear layouts, Wqkv [q | k | v], ALiBi, no biases).
  func::FuncOp gpt2Block() {
    func::FuncOp fn;
    const bool bigcode = m.arch == Arch::GptBigCode, mpt = m.arch == Arch::Mpt;
    Value x = beginLayer(fn, bigcode ? "gpt_bigcode_block" : mpt ? "mpt_block" : "gpt2_block");
    // Each family's names: the block, its norms, attention's and the MLP's.
    struct Names {
      const char *block, *ln1, *qkv, *proj, *ln2, *mlp, *fc, *fcProj;
    };
    const Names n =
        mpt ? Names{"transformer.blocks.{i}.", "norm_1", "Wqkv", "out_proj", "norm_2", "ffn", "up_proj", "down_proj"}
            : Names{"transformer.h.{i}.", "ln_1", "c_attn", "c_proj", "ln_2", "mlp", "c_fc", "c_proj"};
    const std::string p = n.block, attn = p + "attn.", mlp = p + n.mlp + ".";
    int64_t H = m.hidden, I = m.intermediate, kv = m.kvHeads * m.headDim;
    const WeightLayout layout = m.arch == Arch::GPT2 ? WeightLayout::InOut : WeightLayout::OutIn;
    Value h = layerNorm(p + n.ln1, x);
    Value qkv = linear(attn + n.qkv, h, H, H + 2 * kv, m.qkvBias, layout);
    IntegerAttr groups = bigcode ? b.getI64IntegerAttr(m.kvHeads) : IntegerAttr();
    auto split = SplitOp::create(b, bigcode ? loc(p + "attn", {"num_kv_heads"}) : loc(p + "attn"),
                                 TypeRange{act(H), act(kv), act(kv)}, qkv, groups);
    Value a = attention(p, split.getResult(0), split.getResult(1), split.getResult(2), "attn");
    Value o = linear(attn + n.proj, a, H, H, m.outputBias, layout);
    x = AddOp::create(b, loc(p + "attn"), x, o);
    h = layerNorm(p + n.ln2, x);
    Value f = linear(mlp + n.fc, h, H, I, m.mlpBias, layout);
    Value g = mlpActivation(p + n.mlp, f);
    Value d = linear(mlp + n.fcProj, g, I, H, m.mlpBias, layout);
    x = AddOp::create(b, loc(p + n.mlp), x, d);
    func::ReturnOp::create(b, loc(p), x);
    return fn;
  }

  /// The two-matrix MLP's activation of `f` (ModelConfig::mlpActivation),
  /// located at `scope`.
  Value mlpActivation(const std::string &scope, Value f) {
    switch (m.mlpActivation) {
    case MlpActivation::GeluErf:
      return GeluErfOp::create(b, loc(scope), f).getResult();
    case MlpActivation::Relu:
      return ReluOp::create(b, loc(scope), f).getResult();
    case MlpActivation::GeluTanh:
      break;
    }
    return GeluTanhOp::create(b, loc(scope), f).getResult();
  }

  /// RMSNorm `name` (parameter name.weight) of `x`; Gemma's scales by
  /// (1 + w).
  Value rmsNorm(const std::string &name, Value x) {
    FloatAttr offset = m.normWeightOffset != 0 ? b.getF64FloatAttr(m.normWeightOffset) : FloatAttr();
    return RMSNormOp::create(b, loc(name), x.getType(), /*stats=*/Type(), x, param(name + ".weight", {m.hidden}),
                             b.getF64FloatAttr(m.normEps), offset)
        .getResult();
  }

  /// Rotary embeddings on q or k of layer prefix `p` (Phi's on the first
  /// rotaryDim dims of each head); `attn`: the attention module's name.
  Value rope(const std::string &p, Value v, const char *attn = "self_attn") {
    IntegerAttr rotary = m.rotaryDim && m.rotaryDim != m.headDim ? b.getI64IntegerAttr(m.rotaryDim) : IntegerAttr();
    return RopeOp::create(b, loc(p + attn + ".rotary_emb"), v.getType(), v, b.getI64IntegerAttr(m.headDim),
                          b.getF64FloatAttr(m.ropeTheta), ropeScaling(), rotary,
                          m.ropeInterleaved ? b.getUnitAttr() : UnitAttr())
        .getResult();
  }

  /// Causal attention of layer prefix `p` over q [B, S, nh·hd] and k, v;
  /// `localKeys` > 0: each query sees that many keys (GPT-Neo's local
  /// layers: the last window_size), else the model's window.
  Value attention(const std::string &p, Value q, Value k, Value v, const char *attn = "self_attn",
                  int64_t localKeys = 0) {
    // Mistral's sliding window W: transformers 4.40 (and Mistral's reference
    // code) let query i see keys i-W..i, W + 1 of them: xf.attention's
    // `window`. Where the keys cover the sequence it masks nothing (plain
    // causal).
    const int64_t keys = localKeys ? localKeys : m.slidingWindow > 0 ? m.slidingWindow + 1 : 0;
    IntegerAttr window = keys > 0 && keys < S ? b.getI64IntegerAttr(keys) : IntegerAttr();
    // BLOOM's ALiBi: the slopes of the model's heads.
    IntegerAttr alibi = m.alibi ? b.getI64IntegerAttr(m.heads) : IntegerAttr();
    return AttentionOp::create(b, loc(p + attn, {"num_heads", "num_kv_heads"}), act(m.heads * m.headDim),
                               /*lse=*/Type(), q, k, v, m.heads, m.kvHeads, m.headDim, window, alibi)
        .getResult();
  }

  /// OLMo's clip_qkv: projection `name`'s output `v` clamped to [-c, c]
  /// (transformers' clamp_, before the rotary embeddings); else `v`.
  Value clipQkv(const std::string &name, Value v) {
    if (m.clipQkv <= 0)
      return v;
    return ClampOp::create(b, loc(name, {"clip_qkv"}), v, b.getF64FloatAttr(m.clipQkv)).getResult();
  }

  /// Layer prefix `p`'s q, k and v projections of `h` (with biases when
  /// `bias`), rotary embeddings on q and k (none where the model has learned
  /// positions: OPT), and causal attention: [B, S, heads·head_dim], before
  /// the output projection; `attn`: the attention module's name;
  /// `localKeys`: attention()'s.
  Value selfAttention(const std::string &p, Value h, bool bias, const char *attn = "self_attn", int64_t localKeys = 0) {
    int64_t H = m.hidden, q = m.heads * m.headDim, kv = m.kvHeads * m.headDim;
    auto o = WeightLayout::OutIn;
    const std::string a = p + attn + ".";
    // Separate statements: the ops appear in a fixed order.
    Value qv = clipQkv(a + "q_proj", linear(a + "q_proj", h, H, q, bias, o));
    if (m.unscaledAttention) // GPT-Neo's scores q·k: sqrt(head_dim) here, 1/sqrt(head_dim) in xf.attention
      qv = ScaleOp::create(b, loc(p + attn), qv, b.getF64FloatAttr(std::sqrt(double(m.headDim)))).getResult();
    Value kv_ = clipQkv(a + "k_proj", linear(a + "k_proj", h, H, kv, bias, o));
    Value vv = clipQkv(a + "v_proj", linear(a + "v_proj", h, H, kv, bias, o));
    if (learnedPositions(m.arch))
      return attention(p, qv, kv_, vv, attn, localKeys);
    Value qr = rope(p, qv, attn);
    Value kr = rope(p, kv_, attn);
    return attention(p, qr, kr, vv, attn, localKeys);
  }

  /// CodeGen's attention of layer prefix `p` on `h`: one GEMM (`attn`.qkv_proj,
  /// no bias) whose output is m.qkvBlocks blocks, each [q | v | k] of
  /// heads / qkvBlocks heads (a grouped xf.split: tp takes whole blocks),
  /// rotary embeddings on q and k, causal attention.
  Value blockedQkvAttention(const std::string &p, Value h, const char *attn) {
    const int64_t H = m.hidden, q = m.heads * m.headDim;
    Value qkv = linear(p + attn + ".qkv_proj", h, H, 3 * q, m.qkvBias, WeightLayout::OutIn);
    auto split = SplitOp::create(b, loc(p + attn, {"num_heads"}), TypeRange{act(q), act(q), act(q)}, qkv,
                                 b.getI64IntegerAttr(m.qkvBlocks));
    // Separate statements: the ops appear in a fixed order (q's rotation, then k's).
    Value qr = rope(p, split.getResult(0), attn);
    Value kr = rope(p, split.getResult(2), attn); // each block is q | v | k
    return attention(p, qr, kr, split.getResult(1), attn);
  }

  /// The gated MLP under `prefix` ("model.layers.{i}.mlp."): gate_proj,
  /// up_proj, SwiGLU (Gemma: GeGLU), down_proj.
  Value gatedMlp(const std::string &prefix, Value h, int64_t I, bool bias) {
    int64_t H = m.hidden;
    auto o = WeightLayout::OutIn;
    Value gate = linear(prefix + "gate_proj", h, H, I, bias, o);
    Value up = linear(prefix + "up_proj", h, H, I, bias, o);
    // Gemma's GeGLU: the tanh GELU in SwiGLU's place.
    StringAttr activation = m.gatedGelu ? b.getStringAttr("gelu_tanh") : StringAttr();
    Value s = SwiGLUOp::create(b, loc(prefix.substr(0, prefix.size() - 1)), gate, up, activation);
    return linear(prefix + "down_proj", s, I, H, bias, o);
  }

  /// The sparse mixture of experts of layer prefix `p` (transformers'
  /// MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock): the router, softmax and
  /// top-k, each token's rows grouped by expert, the experts' SwiGLU MLPs as
  /// grouped GEMMs over stacked weights (Hugging Face's experts.{e}.*), the
  /// weighted sum back per token; Qwen2-MoE adds its shared expert, gated by
  /// sigmoid(shared_expert_gate(h)).
  Value moeBlock(const std::string &p, Value h) {
    const MoeConfig &e = *m.moe;
    const bool mixtral = m.arch == Arch::Mixtral;
    const std::string blk = p + (mixtral ? "block_sparse_moe." : "mlp.");
    const int64_t H = m.hidden, E = e.experts, k = e.topK, I = e.intermediate;
    auto ids = [&](ArrayRef<int64_t> dims) { return RankedTensorType::get(dims, b.getI32Type()); };
    Value logits = linear(blk + "gate", h, H, E, /*bias=*/false, WeightLayout::OutIn);
    auto route = MoeRouteOp::create(b, loc(blk + "gate"), t({B, S, k}), ids({B, S, k}), logits, b.getI64IntegerAttr(k),
                                    e.normalizeTopK ? b.getUnitAttr() : UnitAttr());
    if (auxLoss()) {
      auto stats = MoeRouterStatsOp::create(b, loc(blk + "gate", {"output_router_logits"}), logits, route.getExperts(),
                                            routerStats[0], routerStats[1]);
      routerStats = {stats.getCountsOut(), stats.getProbsOut()};
    }
    // --moe-capacity-factor: each expert keeps at most C rows of a rank's
    // tokens, E·C rows per data-parallel rank whatever the router picks.
    const int64_t capacity = moeExpertCapacity(m, shape);
    const int64_t N = capacity ? dp * E * capacity : B * S * k;
    auto rows = MoePermuteOp::create(b, loc(blk + "experts"), t({N, H}), ids({B, S, k}), ids({E}), h,
                                     route.getExperts(), capacity ? b.getI64IntegerAttr(capacity) : IntegerAttr());
    auto expertLinear = [&](const char *name, Value x, int64_t out, int64_t in) {
      std::string w = blk + "experts.{e}." + name + ".weight";
      return GroupedLinearOp::create(b, loc(blk + "experts"), t({N, out}), x, param(w, {E, out, in}),
                                     rows.getGroupSizes())
          .getResult();
    };
    Value gate = expertLinear(mixtral ? "w1" : "gate_proj", rows.getResult(), I, H);
    Value up = expertLinear(mixtral ? "w3" : "up_proj", rows.getResult(), I, H);
    Value swiglu = SwiGLUOp::create(b, loc(blk + "experts"), gate, up, StringAttr());
    Value down = expertLinear(mixtral ? "w2" : "down_proj", swiglu, H, I);
    Value routed = MoeUnpermuteOp::create(b, loc(blk + "experts"), act(H), down, rows.getSlots(), route.getWeights());
    if (!e.sharedIntermediate)
      return routed;
    Value shared = gatedMlp(blk + "shared_expert.", h, e.sharedIntermediate, /*bias=*/false);
    Value g = linear(blk + "shared_expert_gate", h, H, 1, /*bias=*/false, WeightLayout::OutIn);
    Value gated = SigmoidGateOp::create(b, loc(blk + "shared_expert_gate"), act(H), g, shared);
    return AddOp::create(b, loc(blk), routed, gated);
  }

  /// LlamaDecoderLayer, with the mixture of experts in the MLP's place when
  /// `sparse` (OLMo's: with LayerNorms).
  func::FuncOp llamaBlock(bool sparse) {
    func::FuncOp fn;
    Value x = beginLayer(fn, sparse                 ? "moe_decoder_layer"
                             : m.arch == Arch::Olmo ? "olmo_decoder_layer"
                                                    : "llama_decoder_layer");
    const std::string p = "model.layers.{i}.";
    int64_t H = m.hidden, q = m.heads * m.headDim;
    auto norm = [&](const std::string &name, Value v) {
      return layerNorms(m.arch) ? layerNorm(name, v) : rmsNorm(name, v);
    };
    Value h = norm(p + "input_layernorm", x);
    Value a = selfAttention(p, h, m.qkvBias);
    Value out = linear(p + "self_attn.o_proj", a, q, H, m.outputBias, WeightLayout::OutIn);
    x = AddOp::create(b, loc(p + "self_attn"), x, out);
    h = norm(p + "post_attention_layernorm", x);
    Value d = sparse ? moeBlock(p, h) : gatedMlp(p + "mlp.", h, m.intermediate, m.mlpBias);
    x = AddOp::create(b, loc(p + "mlp"), x, d);
    SmallVector<Value> outputs{x};
    llvm::append_range(outputs, routerStats);
    func::ReturnOp::create(b, loc(p), outputs);
    return fn;
  }

  /// PhiDecoderLayer: one LayerNorm feeding attention and the MLP side by
  /// side, (attn(ln x) + mlp(ln x)) + x in transformers' order; biases on
  /// every projection. GPTJBlock: the same with GPT-2's names, no biases on
  /// q, k, v and out_proj, and rotate_every_two (ModelConfig::ropeInterleaved).
  /// CodeGenBlock: GPT-J's with q, v and k from qkv_proj's blocks
  /// (blockedQkvAttention).
  func::FuncOp phiBlock() {
    func::FuncOp fn;
    const bool codegen = m.arch == Arch::CodeGen, gptj = m.arch == Arch::GptJ || codegen; // GPT-J's names
    Value x = beginLayer(fn, codegen ? "codegen_block" : gptj ? "gptj_block" : "phi_decoder_layer");
    struct Names {
      const char *block, *ln, *attn, *proj, *fc, *fcProj;
    };
    const Names n =
        gptj ? Names{"transformer.h.{i}.", "ln_1", "attn", "attn.out_proj", "mlp.fc_in", "mlp.fc_out"}
             : Names{"model.layers.{i}.", "input_layernorm", "self_attn", "self_attn.dense", "mlp.fc1", "mlp.fc2"};
    const std::string p = n.block;
    int64_t H = m.hidden, I = m.intermediate, q = m.heads * m.headDim;
    auto o = WeightLayout::OutIn;
    Value h = layerNorm(p + n.ln, x);
    Value a = m.qkvBlocks ? blockedQkvAttention(p, h, n.attn) : selfAttention(p, h, m.qkvBias, n.attn);
    Value attnOut = linear(p + n.proj, a, q, H, m.outputBias, o);
    Value f = linear(p + n.fc, h, H, I, m.mlpBias, o);
    Value g = mlpActivation(p + "mlp", f);
    Value mlpOut = linear(p + n.fcProj, g, I, H, m.mlpBias, o);
    Value sum = AddOp::create(b, loc(p + "mlp"), attnOut, mlpOut);
    x = AddOp::create(b, loc(p), sum, x);
    func::ReturnOp::create(b, loc(p), x);
    return fn;
  }

  /// Starcoder2DecoderLayer: Llama's attention (GQA, rotary embeddings, the
  /// sliding window) between LayerNorms, and a GPT-style MLP (c_fc, the tanh
  /// GELU, c_proj); biases on every projection when use_bias.
  /// OPTDecoderLayer: the same with OPT's names, no rotary embeddings (the
  /// positions are learned) and ReLU; biases everywhere; BioGptDecoderLayer:
  /// OPT's with BioGPT's prefix and the erf GELU. GPTNeoBlock: the
  /// same with GPT-Neo's names, learned positions, q, k and v without biases,
  /// unscaled scores, and with `local` its local attention (window_size).
  func::FuncOp sequentialBlock(bool local = false) {
    func::FuncOp fn;
    struct Names {
      const char *body, *block, *ln1, *attn, *proj, *ln2, *fc, *fcProj;
    };
    Names n;
    switch (m.arch) {
    case Arch::Opt:
    case Arch::BioGpt: // OPT's names under BioGPT's prefix
      n = {m.arch == Arch::Opt ? "opt_decoder_layer" : "biogpt_decoder_layer",
           m.arch == Arch::Opt ? "model.decoder.layers.{i}." : "biogpt.layers.{i}.",
           "self_attn_layer_norm",
           "self_attn",
           "self_attn.out_proj",
           "final_layer_norm",
           "fc1",
           "fc2"};
      break;
    case Arch::GptNeo:
      n = {local ? "gpt_neo_block_local" : "gpt_neo_block",
           "transformer.h.{i}.",
           "ln_1",
           "attn.attention",
           "attn.attention.out_proj",
           "ln_2",
           "mlp.c_fc",
           "mlp.c_proj"};
      break;
    default: // StarCoder2
      n = {"starcoder2_decoder_layer", "model.layers.{i}.",        "input_layernorm", "self_attn",
           "self_attn.o_proj",         "post_attention_layernorm", "mlp.c_fc",        "mlp.c_proj"};
    }
    Value x = beginLayer(fn, n.body);
    const std::string p = n.block;
    int64_t H = m.hidden, I = m.intermediate, q = m.heads * m.headDim;
    auto o = WeightLayout::OutIn;
    Value h = layerNorm(p + n.ln1, x);
    Value a = selfAttention(p, h, m.qkvBias, n.attn, local ? m.localWindow : 0); // GPT-Neo's local layers
    Value out = linear(p + n.proj, a, q, H, m.outputBias, o);
    x = AddOp::create(b, loc(p + "self_attn"), x, out);
    h = layerNorm(p + n.ln2, x);
    Value f = linear(p + n.fc, h, H, I, m.mlpBias, o);
    Value g = mlpActivation(p + "mlp", f);
    Value d = linear(p + n.fcProj, g, I, H, m.mlpBias, o);
    x = AddOp::create(b, loc(p + "mlp"), x, d);
    func::ReturnOp::create(b, loc(p), x);
    return fn;
  }

  /// StableLmDecoderLayer: Llama's layer with LayerNorms (partial rotary
  /// embeddings through rope()); with use_parallel_residual one LayerNorm
  /// feeds attention and the MLP, (x + attn(ln x)) + mlp(ln x) in
  /// transformers' order. CohereDecoderLayer: the parallel one, its
  /// LayerNorm of a weight alone, its rotary embeddings in adjacent pairs,
  /// o_proj's bias with q, k and v's (attention_bias).
  func::FuncOp stablelmBlock() {
    func::FuncOp fn;
    Value x = beginLayer(fn, m.arch == Arch::Cohere ? "cohere_decoder_layer" : "stablelm_decoder_layer");
    const std::string p = "model.layers.{i}.";
    int64_t H = m.hidden, q = m.heads * m.headDim;
    Value h = layerNorm(p + "input_layernorm", x);
    Value a = selfAttention(p, h, m.qkvBias);
    Value out = linear(p + "self_attn.o_proj", a, q, H, m.outputBias, WeightLayout::OutIn);
    x = AddOp::create(b, loc(p + "self_attn"), x, out);
    if (!m.parallelResidual)
      h = layerNorm(p + "post_attention_layernorm", x);
    Value d = gatedMlp(p + "mlp.", h, m.intermediate, /*bias=*/false);
    x = AddOp::create(b, loc(p + "mlp"), x, d);
    func::ReturnOp::create(b, loc(p), x);
    return fn;
  }

  /// A GPT-style layer with grouped QKV (groupedQkv): GPTNeoXLayer and
  /// FalconDecoderLayer. LayerNorms with biases; q, k and v from one GEMM
  /// whose output holds each kv head's query heads, k and v side by side (a
  /// split in kv-head groups, which tp splits in whole groups), rotary
  /// embeddings (GPT-NeoX: on part of each head), the MLP's exact GELU (or
  /// tanh, by GPT-NeoX's hidden_act). Under the parallel residual x +
  /// attn(ln1 x) + mlp(ln2 x) (one LayerNorm unless parallelNorms), summed
  /// as transformers does ((mlp + attn) + x); else sequential.
  func::FuncOp groupedQkvBlock() {
    func::FuncOp fn;
    const bool neox = m.arch == Arch::GptNeoX;
    Value x = beginLayer(fn, neox ? "gpt_neox_layer" : m.arch == Arch::Bloom ? "bloom_block" : "falcon_decoder_layer");
    const std::string p = neox ? "gpt_neox.layers.{i}." : "transformer.h.{i}.";
    const char *attn = neox ? "attention" : "self_attention";
    const bool falconNorms = !neox && m.parallelNorms; // new_decoder_architecture's names
    const std::string ln1 = falconNorms ? "ln_attn" : "input_layernorm";
    const std::string ln2 = falconNorms ? "ln_mlp" : "post_attention_layernorm";
    int64_t H = m.hidden, I = m.intermediate, q = m.heads * m.headDim, kv = m.kvHeads * m.headDim;
    auto o = WeightLayout::OutIn;
    Value h = layerNorm(p + ln1, x);
    Value qkv = linear(p + attn + ".query_key_value", h, H, q + 2 * kv, m.qkvBias, o);
    auto split = SplitOp::create(b, loc(p + attn, {"num_kv_heads"}), TypeRange{act(q), act(kv), act(kv)}, qkv,
                                 b.getI64IntegerAttr(m.kvHeads));
    // BLOOM: ALiBi in the attention instead of rotary embeddings.
    Value qr = m.alibi ? split.getResult(0) : rope(p, split.getResult(0), attn);
    Value kr = m.alibi ? split.getResult(1) : rope(p, split.getResult(1), attn);
    Value a = attention(p, qr, kr, split.getResult(2), attn);
    Value attnOut = linear(p + attn + ".dense", a, q, H, m.outputBias, o);
    auto mlp = [&](Value in) {
      Value f = linear(p + "mlp.dense_h_to_4h", in, H, I, m.mlpBias, o);
      Value g = mlpActivation(p + "mlp", f);
      return linear(p + "mlp.dense_4h_to_h", g, I, H, m.mlpBias, o);
    };
    if (m.parallelResidual) {
      Value mlpOut = mlp(m.parallelNorms ? layerNorm(p + ln2, x) : h);
      Value sum = AddOp::create(b, loc(p + "mlp"), mlpOut, attnOut);
      x = AddOp::create(b, loc(p), sum, x);
    } else {
      x = AddOp::create(b, loc(p + attn), attnOut, x);
      Value mlpOut = mlp(layerNorm(p + ln2, x));
      x = AddOp::create(b, loc(p + "mlp"), mlpOut, x);
    }
    func::ReturnOp::create(b, loc(p), x);
    return fn;
  }

  DictionaryAttr ropeScaling() {
    if (!m.ropeScaling)
      return {};
    const RopeScaling &r = *m.ropeScaling;
    return b.getDictionaryAttr({
        b.getNamedAttr("rope_type", b.getStringAttr("llama3")),
        b.getNamedAttr("factor", b.getF64FloatAttr(r.factor)),
        b.getNamedAttr("low_freq_factor", b.getF64FloatAttr(r.lowFreqFactor)),
        b.getNamedAttr("high_freq_factor", b.getF64FloatAttr(r.highFreqFactor)),
        b.getNamedAttr("original_max_position_embeddings",
                       b.getF64FloatAttr(double(r.originalMaxPositions))),
    });
  }

  /// The entry: the embeddings, layer i calling body `layer(i)`, the final
  /// norm, the LM head and the loss.
  void forward(llvm::function_ref<func::FuncOp(int64_t)> layer) {
    auto ids = RankedTensorType::get({B, S}, b.getI32Type());
    auto lossTy = RankedTensorType::get({}, b.getF32Type());
    auto fn = func::FuncOp::create(b, loc("forward", {"num_layers"}, /*fileFirst=*/true),
                                   "forward",
                                   b.getFunctionType({ids, ids}, {lossTy}));
    fn->setAttr(kEntryAttr, b.getUnitAttr());
    fn.setArgAttr(0, "xf.name", b.getStringAttr("input_ids"));
    fn.setArgAttr(1, "xf.name", b.getStringAttr("labels"));
    b.setInsertionPointToStart(fn.addEntryBlock());
    int64_t H = m.hidden, V = m.vocab;
    const Layout &n = layout(m.arch);
    const std::string embName = std::string(n.embed) + ".weight";
    Value emb = param(embName, {V, H});
    // Gemma and BioGPT: the token embeddings times sqrt(hidden_size).
    FloatAttr scale = m.scaleEmbeddings ? b.getF64FloatAttr(std::sqrt(double(H))) : FloatAttr();
    // torch's nn.Embedding(padding_idx = pad_token_id): row p gets no gradient from the lookup.
    IntegerAttr padding = m.paddingIdx >= 0 ? b.getI64IntegerAttr(m.paddingIdx) : IntegerAttr();
    Value x = EmbeddingOp::create(b, loc(embName, {"vocab_size"}), act(H), fn.getArgument(0), emb, scale, padding);
    if (m.embeddingNorm) // BLOOM
      x = layerNorm("transformer.word_embeddings_layernorm", x);
    if (learnedPositions(m.arch)) { // OPT's and BioGPT's tables: position p at row p + 2
      const std::string wpe = n.positions;
      IntegerAttr offset = m.positionOffset ? b.getI64IntegerAttr(m.positionOffset) : IntegerAttr();
      x = AddPositionEmbeddingOp::create(b, loc(wpe, {"max_positions"}), act(H), x,
                                         param(wpe + ".weight", {m.maxPositions + m.positionOffset, H}), offset);
    }
    // The load-balancing statistics start at zero and pass through every
    // layer (with the activations, over pipeline stages too).
    SmallVector<Value> stats;
    for (Type t : routerStatsTypes())
      stats.push_back(ZerosOp::create(b, loc("model.layers", {"output_router_logits"}), t));
    for (int64_t i = 0; i < m.layers; ++i) {
      SmallVector<Value> in{x};
      llvm::append_range(in, stats);
      auto call = LayerOp::create(b, loc("layer"), ValueRange(in).getTypes(), layer(i).getSymName(), i, in);
      x = call.getResult(0);
      stats.assign(call.getResults().begin() + 1, call.getResults().end());
    }
    x = layerNorms(m.arch) ? layerNorm(n.finalNorm, x) : rmsNorm(n.finalNorm, x);
    // Cohere's logit_scale, on the hidden state rather than the logits (H
    // values a token, not V; the head stays one GEMM with the loss): the
    // same logits, exactly where it is a power of two (Command-R's 1/16).
    if (m.logitScale != 1)
      x = ScaleOp::create(b, loc("lm_head", {"logit_scale"}), x, b.getF64FloatAttr(m.logitScale)).getResult();
    Value head = m.tieEmbeddings ? emb : param(std::string(n.head) + ".weight", {V, H});
    Value headBias = m.lmHeadBias ? param(std::string(n.head) + ".bias", {V}) : Value();
    Value logits = LinearOp::create(b, loc("lm_head"), act(V), WeightLayout::OutIn, x, head, headBias);
    Value loss = CrossEntropyOp::create(b, loc("loss"), lossTy, logits,
                                        fn.getArgument(1), /*real_vocab=*/nullptr);
    if (auxLoss()) // transformers' loss + router_aux_loss_coef · load_balancing_loss_func
      loss = MoeAuxLossOp::create(b, loc("loss", {"output_router_logits"}), lossTy, loss, stats[0], stats[1],
                                  b.getF64FloatAttr(m.moe->auxLossCoef), b.getI64IntegerAttr(m.moe->topK));
    func::ReturnOp::create(b, loc("forward"), loss);
  }

  DictionaryAttr describe() {
    SmallVector<NamedAttribute> a;
    auto i64 = [&](StringRef k, int64_t v) {
      a.push_back(b.getNamedAttr(k, b.getI64IntegerAttr(v)));
    };
    a.push_back(b.getNamedAttr("name", b.getStringAttr(m.name)));
    a.push_back(b.getNamedAttr("architecture", b.getStringAttr(hfArchitecture(m.arch))));
    i64("vocab_size", m.vocab);
    i64("hidden_size", m.hidden);
    i64("num_layers", m.layers);
    i64("num_heads", m.heads);
    i64("num_kv_heads", m.kvHeads);
    i64("head_dim", m.headDim);
    i64("intermediate_size", m.intermediate);
    i64("max_positions", m.maxPositions);
    a.push_back(b.getNamedAttr("tie_word_embeddings", b.getBoolAttr(m.tieEmbeddings)));
    if (m.moe) {
      i64("num_experts", m.moe->experts);
      i64("experts_per_token", m.moe->topK);
    }
    i64("seq_len", S);
    i64("micro_batch", shape.microBatch);
    i64("global_batch", shape.globalBatch);
    i64("microbatches", shape.microbatches(dp));
    a.push_back(b.getNamedAttr("dtype", b.getStringAttr(shape.dtype)));
    return b.getDictionaryAttr(a);
  }

  MLIRContext &ctx;
  const ModelConfig &m;
  OpBuilder b;
  Location fileLoc;
  Type elt;
  int64_t B, S;
  const TrainingShape &shape;
  int64_t dp;
  /// Inside a layer body with auxLoss(): the routers' statistics so far.
  SmallVector<Value, 2> routerStats;
};
} // namespace

OwningOpRef<ModuleOp> llcdist::importModel(MLIRContext &ctx,
                                           const ModelConfig &model,
                                           const TrainingShape &shape,
                                           int64_t dp) {
  ctx.loadDialect<XFDialect, func::FuncDialect>();
  return Importer(ctx, model, shape, dp).run();
}
