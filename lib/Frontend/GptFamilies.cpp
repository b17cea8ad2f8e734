//===- GptFamilies.cpp - the GPT-2-style families' config.json fields ------===//
//
// The fields of the transformers config classes whose models have no rotary
// embeddings (GPT2Config, GPTBigCodeConfig, OPTConfig, GPTNeoConfig and
// BioGptConfig with learned positions; BloomConfig and MptConfig with ALiBi)
// into one ModelConfig; the other families are ModelFamilies.cpp's. What llc-dist does
// not build is refused by name.
//
//===----------------------------------------------------------------------===//
#include "ConfigFields.h"

#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

using namespace llcdist;

namespace llcdist::config {

void parseGPT2(FieldReader &r, ModelConfig &c, const json &) {
  c.vocab = r.positiveInt("vocab_size");
  c.maxPositions = r.positiveInt("n_positions");
  c.hidden = r.positiveInt("n_embd");
  c.layers = r.positiveInt("n_layer");
  c.heads = r.positiveInt("n_head");
  c.kvHeads = c.heads;
  headDimOfHidden(r, c, "n_head", "n_embd");
  c.intermediate = r.positiveInt("n_inner", 4 * c.hidden);
  c.normEps = r.positiveFloat("layer_norm_epsilon", 1e-5);
  std::string act = r.string("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    r.fail("activation_function",
           "unsupported activation '" + act + "'; llc-dist implements GPT-2's tanh GELU (\"gelu_new\")");
  c.tieEmbeddings = r.boolean("tie_word_embeddings", true);
  if (!r.boolean("scale_attn_weights", true))
    r.fail("scale_attn_weights", "only true (scores scaled by 1/sqrt(head_dim)) "
                                 "is supported");
  if (r.boolean("scale_attn_by_inverse_layer_idx", false))
    r.fail("scale_attn_by_inverse_layer_idx", "only false is supported");
  c.qkvBias = c.outputBias = c.mlpBias = true;
  r.ignore({"n_ctx", "attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_activation", "summary_first_dropout",
            "summary_proj_to_labels", "summary_type", "summary_use_proj", "task_specific_params",
            "reorder_and_upcast_attn", "output_past"});
}

/// GPTBigCode's fields (transformers 4.40's GPTBigCodeConfig: StarCoder,
/// SantaCoder): GPT-2's layer and learned positions with nn.Linear layouts,
/// and c_attn holding every q head then one k and one v head under
/// multi_query (the default), each head's q, k and v side by side otherwise;
/// the activation by name (the tanh GELU by default, or the exact one).
void parseGptBigCode(FieldReader &r, ModelConfig &c, const json &) {
  c.vocab = r.positiveInt("vocab_size", 50257);
  c.maxPositions = r.positiveInt("n_positions", 1024);
  c.hidden = r.positiveInt("n_embd", 768);
  c.layers = r.positiveInt("n_layer", 12);
  c.heads = r.positiveInt("n_head", 12);
  headDimOfHidden(r, c, "n_head", "n_embd");
  c.kvHeads = r.boolean("multi_query", true) ? 1 : c.heads;
  c.intermediate = r.positiveInt("n_inner", 4 * c.hidden);
  c.normEps = r.positiveFloat("layer_norm_epsilon", 1e-5);
  std::string act = r.string("activation_function", "gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh" && act != "gelu_new" && act != "gelu")
    r.fail("activation_function", "unsupported activation '" + act +
                                      "'; llc-dist implements the tanh GELU (\"gelu_pytorch_tanh\", StarCoder's) and "
                                      "the exact one (\"gelu\")");
  c.mlpActivation = act == "gelu" ? MlpActivation::GeluErf : MlpActivation::GeluTanh;
  if (!r.boolean("scale_attn_weights", true))
    r.fail("scale_attn_weights", "only true (scores scaled by 1/sqrt(head_dim)) is supported");
  c.tieEmbeddings = r.boolean("tie_word_embeddings", true);
  c.qkvBias = c.outputBias = c.mlpBias = true;
  // Dropout; and the softmax's f32 upcast, with its rescaling by the layer
  // index that keeps fp16 scores in range (the same scores: llc-dist's
  // softmax is always f32).
  r.ignore({"resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_softmax_in_fp32", "scale_attention_softmax_in_fp32"});
}

/// BLOOM's fields (transformers 4.40's BloomConfig): no position embedding
/// but ALiBi, a LayerNorm on the embeddings (word_embeddings_layernorm), one
/// query_key_value GEMM holding each head's q, k and v side by side (as
/// GPT-NeoX), LayerNorms with biases, a sequential residual, the tanh GELU
/// (bloom_gelu) on a 4·hidden MLP, biases everywhere, the head tied.
void parseBloom(FieldReader &r, ModelConfig &c, const json &) {
  if (r.has("n_embed"))
    r.fail("n_embed", "is BloomConfig's old name of hidden_size; write hidden_size");
  refuseAliases(r, "BloomConfig", {{"num_hidden_layers", "n_layer"}, {"num_attention_heads", "n_head"}});
  c.vocab = r.positiveInt("vocab_size", 250880);
  c.hidden = r.positiveInt("hidden_size", 64);
  c.layers = r.positiveInt("n_layer", 2);
  c.heads = c.kvHeads = r.positiveInt("n_head", 8);
  headDimOfHidden(r, c, "n_head");
  c.intermediate = 4 * c.hidden; // BloomMLP's dense_h_to_4h
  // No learned positions, so no bound; BLOOM was trained on 2,048 tokens (the
  // default --seq-len is min(this, 1024)).
  c.maxPositions = 2048;
  c.normEps = r.positiveFloat("layer_norm_epsilon", 1e-5);
  if (r.boolean("apply_residual_connection_post_layernorm", false))
    r.fail("apply_residual_connection_post_layernorm",
           "a residual from the LayerNorm's output is not implemented; only false (BLOOM's published models) is "
           "supported");
  if (r.boolean("slow_but_exact", false))
    r.fail("slow_but_exact", "the pretraining_tp slicing of the output projections is not implemented (it only "
                             "reorders floating-point sums); set it to false");
  c.alibi = c.embeddingNorm = true;
  c.mlpActivation = MlpActivation::GeluTanh; // bloom_gelu_forward: the tanh approximation
  c.qkvBias = c.outputBias = c.mlpBias = true;
  c.tieEmbeddings = r.boolean("tie_word_embeddings", true);
  // Dropout (llc-dist trains without it); pretraining_tp (read only with
  // slow_but_exact); and the Megatron-DeepSpeed flags BigScience's published
  // configs carry that BloomConfig 4.40 never reads (fused kernels, n_inner:
  // the MLP is always 4·hidden, offset_alibi).
  r.ignore({"hidden_dropout", "attention_dropout", "pretraining_tp", "attention_softmax_in_fp32", "bias_dropout_fusion",
            "masked_softmax_fusion", "offset_alibi", "skip_bias_add", "skip_bias_add_qkv", "n_inner", "unk_token_id"});
}

/// MPT's fields (transformers 4.40's MptConfig and its attn_config,
/// MptAttentionConfig): GPT-2's sequential layer with nn.Linear layouts, one
/// Wqkv GEMM [q | k | v] (multi-head), ALiBi in place of positions, LayerNorms
/// of a weight alone (MptBlock sets their bias to None), the exact GELU on a
/// 4·d_model MLP, no biases, the head tied. transformers' MptModel hard-codes
/// several things its config names (ALiBi with alibi_bias_max 8, no biases,
/// the 4·d_model MLP, no clamp of q, k and v, unscaled logits): any other
/// value is refused by name, so a config trains as transformers runs it.
void parseMpt(FieldReader &r, ModelConfig &c, const json &) {
  refuseAliases(r, "MptConfig",
                {{"hidden_size", "d_model"}, {"num_attention_heads", "n_heads"}, {"num_hidden_layers", "n_layers"}});
  c.vocab = r.positiveInt("vocab_size", 50368);
  c.hidden = r.positiveInt("d_model", 2048);
  c.layers = r.positiveInt("n_layers", 24);
  c.heads = c.kvHeads = r.positiveInt("n_heads", 16);
  headDimOfHidden(r, c, "n_heads", "d_model");
  if (r.positiveInt("expansion_ratio", 4) != 4)
    r.fail("expansion_ratio", "transformers' MptMLP is 4·d_model wide whatever this says; only 4 is supported");
  c.intermediate = 4 * c.hidden;
  // ALiBi: no position table, so no bound but the default --seq-len
  // (transformers builds the bias for max_seq_len positions).
  c.maxPositions = r.positiveInt("max_seq_len", 2048);
  c.normEps = r.positiveFloat("layer_norm_epsilon", 1e-5);
  if (!r.boolean("no_bias", true))
    r.fail("no_bias", "transformers' MptModel has no biases whatever this says; only true is supported");
  const std::string norm = r.string("norm_type", "low_precision_layernorm");
  if (norm != "low_precision_layernorm" && norm != "layernorm")
    r.fail("norm_type", "unsupported norm_type '" + norm + "'; transformers' MptModel builds LayerNorms (" +
                            "\"low_precision_layernorm\" or \"layernorm\")");
  if (r.has("logit_scale"))
    r.fail("logit_scale", "transformers' MptForCausalLM does not scale the logits; remove it (null)");
  if (r.positiveFloat("embedding_fraction", 1.0) != 1.0)
    r.fail("embedding_fraction", "the scaling of the embeddings' gradient is not implemented (transformers' MptModel "
                                 "ignores it too); only 1.0 is supported");
  FieldReader attn = r.object("attn_config");
  const std::string type = attn.string("attn_type", "multihead_attention");
  if (type != "multihead_attention")
    attn.fail("attn_type", "transformers' MptAttention is multi-head whatever this says; only "
                           "\"multihead_attention\" is supported");
  if (!attn.boolean("alibi", true))
    attn.fail("alibi", "transformers' MptModel always adds ALiBi (and has no position table); only true is supported");
  if (attn.positiveFloat("alibi_bias_max", 8.0) != 8.0)
    attn.fail("alibi_bias_max", "transformers builds MPT's ALiBi slopes with 8 whatever this says (BLOOM's slopes); "
                                "only 8 is supported");
  if (attn.has("softmax_scale")) {
    const double scale = attn.positiveFloat("softmax_scale", std::nullopt);
    const double want = 1.0 / std::sqrt(double(c.headDim));
    if (std::abs(scale - want) > 1e-12 * want)
      attn.fail("softmax_scale", "only 1/sqrt(head_dim) (null) is supported, got " + std::to_string(scale));
  }
  if (attn.has("clip_qkv"))
    attn.fail("clip_qkv", "transformers' MptAttention does not clamp q, k and v; remove it (null)");
  for (const char *off : {"qk_ln", "prefix_lm", "attn_uses_sequence_id"})
    if (attn.boolean(off, false))
      attn.fail(off, "is not implemented (nor read by transformers' MptModel); only false is supported");
  // Dropout (llc-dist trains without it), the kernel choice, the optional
  // fields checked above, which may be null, and the empty model_type
  // transformers 4.40's save_pretrained writes into attn_config.
  attn.ignore({"attn_pdrop", "attn_impl", "softmax_scale", "clip_qkv", "model_type"});
  attn.rejectUnknown("MptForCausalLM's attn_config");
  c.alibi = true;
  c.mlpActivation = MlpActivation::GeluErf; // MptMLP's nn.GELU(approximate="none")
  c.qkvBias = c.outputBias = c.mlpBias = false;
  c.normParams = NormParams::WeightOnly;
  c.tieEmbeddings = r.boolean("tie_word_embeddings", true);
  // Dropout; learned_pos_emb, which transformers' MptModel never reads (it
  // has no position table); and the fields of MosaicML's published configs
  // that only their own code reads (initialization, device, logging).
  r.ignore({"resid_pdrop", "emb_pdrop", "learned_pos_emb", "init_device", "verbose", "init_config", "tokenizer_name",
            "auto_map", "logit_scale"});
}

/// OPT's fields (transformers 4.40's OPTConfig): StarCoder2's sequential
/// layer with learned positions (OPTLearnedPositionalEmbedding: position p at
/// row p + 2 of max_position_embeddings + 2 rows), LayerNorms before
/// attention and the MLP, q, k, v and out_proj with biases, fc1 -> ReLU ->
/// fc2 with biases, the final LayerNorm, the head tied. What only opt-350m
/// has (the LayerNorms after the residual, embeddings of another width with
/// project_in / project_out) is refused by name.
void parseOpt(FieldReader &r, ModelConfig &c, const json &) {
  c.vocab = r.positiveInt("vocab_size", 50272);
  c.hidden = r.positiveInt("hidden_size", 768);
  c.layers = r.positiveInt("num_hidden_layers", 12);
  c.heads = c.kvHeads = r.positiveInt("num_attention_heads", 12);
  headDimOfHidden(r, c);
  c.intermediate = r.positiveInt("ffn_dim", 3072);
  c.maxPositions = r.positiveInt("max_position_embeddings", 2048);
  c.positionOffset = 2;
  c.normEps = 1e-5; // nn.LayerNorm's default: OPTConfig has no epsilon
  std::string act = r.string("activation_function", "relu");
  if (act != "relu")
    r.fail("activation_function", "unsupported activation '" + act + "'; llc-dist implements OPT's ReLU (\"relu\")");
  c.mlpActivation = MlpActivation::Relu;
  if (!r.boolean("do_layer_norm_before", true))
    r.fail("do_layer_norm_before", "the LayerNorms after the residual adds (opt-350m's) are not supported; only true "
                                   "(each LayerNorm before attention and the MLP) is");
  if (r.boolean("_remove_final_layer_norm", false))
    r.fail("_remove_final_layer_norm", "a model without the final LayerNorm is not supported; only false is");
  if (r.has("word_embed_proj_dim") && r.positiveInt("word_embed_proj_dim") != c.hidden)
    r.fail("word_embed_proj_dim", "embeddings of another width than hidden_size=" + std::to_string(c.hidden) +
                                      " (project_in / project_out, opt-350m's) are not supported; write " +
                                      std::to_string(c.hidden) + " or remove the field");
  if (!r.boolean("enable_bias", true))
    r.fail("enable_bias", "OPT without biases is not supported; only true is");
  if (!r.boolean("layer_norm_elementwise_affine", true))
    r.fail("layer_norm_elementwise_affine", "OPT's LayerNorms without weight and bias are not supported; only true is");
  c.qkvBias = c.outputBias = c.mlpBias = true;
  c.tieEmbeddings = r.boolean("tie_word_embeddings", true);
  // Dropout and layer drop (llc-dist trains without them), the initializer's
  // std, and metaseq's prefix token in the published configs.
  r.ignore(
      {"word_embed_proj_dim", "dropout", "attention_dropout", "activation_dropout", "layerdrop", "init_std", "prefix"});
}

/// GPT-Neo's fields (transformers 4.40's GPTNeoConfig): GPT-2's sequential
/// layer with nn.Linear q, k, v (no biases) and out_proj (a bias), c_fc ->
/// tanh GELU -> c_proj, learned positions, the head tied; the scores q·k not
/// divided by sqrt(head_dim); and attention_types, expanded to one entry per
/// layer ("global": causal; "local": the last window_size keys).
/// transformers takes attention_layers from the file where it is written
/// (PretrainedConfig sets it after expanding attention_types), so llc-dist
/// does too.
void parseGptNeo(FieldReader &r, ModelConfig &c, const json &) {
  refuseAliases(r, "GPTNeoConfig", {{"num_attention_heads", "num_heads"}, {"num_hidden_layers", "num_layers"}});
  c.vocab = r.positiveInt("vocab_size", 50257);
  c.maxPositions = r.positiveInt("max_position_embeddings", 2048);
  c.hidden = r.positiveInt("hidden_size", 2048);
  c.layers = r.positiveInt("num_layers", 24);
  c.heads = c.kvHeads = r.positiveInt("num_heads", 16);
  headDimOfHidden(r, c, "num_heads", "hidden_size");
  c.intermediate = r.positiveInt("intermediate_size", 4 * c.hidden); // null: 4 · hidden_size
  c.normEps = r.positiveFloat("layer_norm_epsilon", 1e-5);
  std::string act = r.string("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    r.fail("activation_function",
           "unsupported activation '" + act + "'; llc-dist implements GPT-Neo's tanh GELU (\"gelu_new\")");
  c.qkvBias = false;
  c.outputBias = c.mlpBias = true;
  c.unscaledAttention = true;
  c.tieEmbeddings = r.boolean("tie_word_embeddings", true);
  // attention_types [[["global", "local"], n], ...]: each pattern repeated n
  // times; transformers requires num_layers entries.
  const auto badTypes = [&](const std::string &why) {
    r.fail("attention_types", why + " (GPTNeoConfig's form: [[[\"global\", \"local\"], 12]], each list of "
                                    "attention kinds repeated its count of times)");
  };
  const json types =
      r.has("attention_types") ? r.get("attention_types") : json::parse(R"([[["global", "local"], 12]])");
  if (!types.is_array())
    badTypes("must be an array, got " + types.dump());
  int64_t total = 0; // the layers it gives, counted before any is listed
  for (const json &item : types) {
    if (!item.is_array() || item.size() != 2 || !item[0].is_array() || !item[1].is_number_integer() ||
        item[1].get<int64_t>() < 0 || item[1].get<int64_t>() > (int64_t(1) << 16))
      badTypes("each entry must be [a list of attention kinds, a count in [0, 65536]], got " + item.dump());
    for (const json &kind : item[0])
      if (!kind.is_string())
        badTypes("an attention kind must be a string, got " + kind.dump());
    total += int64_t(item[0].size()) * item[1].get<int64_t>();
  }
  if (total != c.layers)
    r.fail("attention_types", "gives " + std::to_string(total) + " layers, but num_layers = " +
                                  std::to_string(c.layers) + " (transformers requires one entry per layer)");
  std::vector<std::string> kinds;
  for (const json &item : types)
    for (int64_t n = 0; n < item[1].get<int64_t>(); ++n)
      for (const json &kind : item[0])
        kinds.push_back(kind.get<std::string>());
  if (r.has("attention_layers")) { // what transformers' model reads, where the file writes it
    const json &layers = r.get("attention_layers");
    if (!layers.is_array() || int64_t(layers.size()) != c.layers)
      r.fail("attention_layers", "must be an array of num_layers = " + std::to_string(c.layers) +
                                     " attention kinds (\"global\" or \"local\"), got " + layers.dump());
    kinds.clear();
    for (const json &kind : layers)
      kinds.push_back(kind.is_string() ? kind.get<std::string>() : kind.dump());
  }
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string &kind = kinds[size_t(i)];
    if (kind == "local")
      c.localLayers.push_back(i);
    else if (kind != "global")
      r.fail(r.has("attention_layers") ? "attention_layers" : "attention_types",
             "layer " + std::to_string(i) + "'s attention kind is '" + kind +
                 "'; GPTNeoAttention implements \"global\" and \"local\"");
  }
  c.localWindow = r.positiveInt("window_size", 256);
  // Dropout (llc-dist trains without it), the sequence-summary and
  // classification heads' fields, a training switch.
  r.ignore({"embed_dropout", "attention_dropout", "resid_dropout", "classifier_dropout", "summary_activation",
            "summary_first_dropout", "summary_proj_to_labels", "summary_type", "summary_use_proj",
            "gradient_checkpointing", "tokenizer_class"});
}
/// BioGPT's fields (transformers 4.40's BioGptConfig): OPT's sequential layer
/// with BioGPT's names (biogpt.layers.{i}.self_attn_layer_norm, self_attn.
/// {q,k,v,out}_proj, final_layer_norm, fc1, fc2), the erf GELU, biases on
/// every projection, learned positions from row 2 of a table of
/// max_position_embeddings + 2 rows (BioGptLearnedPositionalEmbedding's
/// offset), the token embeddings times sqrt(hidden_size) where
/// scale_embedding, the final LayerNorm (biogpt.layer_norm), the head
/// (output_projection) tied. Every LayerNorm is nn.LayerNorm's default
/// (eps 1e-5): BioGptModel does not read layer_norm_eps, so neither does
/// llc-dist.
void parseBioGpt(FieldReader &r, ModelConfig &c, const json &) {
  c.vocab = r.positiveInt("vocab_size", 42384);
  c.hidden = r.positiveInt("hidden_size", 1024);
  c.layers = r.positiveInt("num_hidden_layers", 24);
  c.heads = c.kvHeads = r.positiveInt("num_attention_heads", 16);
  headDimOfHidden(r, c);
  c.intermediate = r.positiveInt("intermediate_size", 4096);
  c.maxPositions = r.positiveInt("max_position_embeddings", 1024);
  c.positionOffset = 2;
  c.normEps = 1e-5; // nn.LayerNorm's default (layer_norm_eps is not read)
  std::string act = r.string("hidden_act", "gelu");
  if (act != "gelu")
    r.fail("hidden_act", "unsupported activation '" + act + "'; llc-dist implements BioGPT's erf GELU (\"gelu\")");
  c.mlpActivation = MlpActivation::GeluErf;
  c.scaleEmbeddings = r.boolean("scale_embedding", true);
  c.qkvBias = c.outputBias = c.mlpBias = true;
  c.tieEmbeddings = r.boolean("tie_word_embeddings", true);
  // Dropout and layer drop (llc-dist trains without them), and the epsilon
  // BioGptModel never reads.
  r.ignore(
      {"hidden_dropout_prob", "attention_probs_dropout_prob", "activation_dropout", "layerdrop", "layer_norm_eps"});
}
} // namespace llcdist::config
