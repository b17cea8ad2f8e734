//===- ModelInfo.cpp - the report of `llc-dist info` ----------------------===//
#include "llcdist/Pipelines/ModelInfo.h"
#include "llcdist/Support/ReportFormat.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

using namespace llcdist;
using json = nlohmann::ordered_json;

json llcdist::modelStatsJson(const xf::ModelStats &s) {
  json j;
  j["parameters"] = s.parameters;
  j["layers"] = s.layers;
  j["seq_len"] = s.seqLen;
  j["forward_flops_per_token"] = s.forwardFlopsPerToken();
  j["training_flops_per_token"] = s.trainingFlopsPerToken();
  j["linear_flops_per_token"] = s.linearFlopsPerToken;
  j["attention_flops_per_token"] = s.attentionFlopsPerToken;
  j["six_n_flops_per_token"] = 6.0 * double(s.parameters);
  j["formula"] = "training FLOPs/token = 3 × (Σ_linear 2·K·N + Σ_attention "
                 "4·S·heads·head_dim)";
  return j;
}

json ModelInfo::toJson() const {
  json j;
  j["model"] = model;
  j["file"] = file;
  if (config) {
    const ModelConfig &c = *config;
    j["architecture"] = hfArchitecture(c.arch);
    j["hidden_size"] = c.hidden;
    j["num_heads"] = c.heads;
    j["num_kv_heads"] = c.kvHeads;
    j["head_dim"] = c.headDim;
    j["intermediate_size"] = c.intermediate;
    j["vocab_size"] = c.vocab;
    // The padded rows of a plan at tp=1 with the default divisor (128).
    j["padded_vocab_size_tp1"] = (c.vocab + 127) / 128 * 128;
    j["tie_word_embeddings"] = c.tieEmbeddings;
    if (c.moe) {
      j["num_experts"] = c.moe->experts;
      j["experts_per_token"] = c.moe->topK;
      j["active_parameters"] = c.activeParameters();
      j["dense_layers"] = c.moe->denseLayers; // Qwen2-MoE's decoder_sparse_step, mlp_only_layers
    }
  }
  json s = modelStatsJson(stats);
  for (auto &[k, v] : s.items())
    j[k] = v;
  return j;
}

void ModelInfo::print(llvm::raw_ostream &os) const {
  os << fmt::format("model             {}", model);
  if (config)
    os << fmt::format(" ({})", hfArchitecture(config->arch));
  os << "\n";
  os << fmt::format("parameters        {}\n", groupDigits(stats.parameters));
  if (config && config->moe)
    os << fmt::format(
        "                  {} active: {} experts per token of {} (expert FFN {}{})\n",
        groupDigits(config->activeParameters()), config->moe->topK, config->moe->experts, config->moe->intermediate,
        config->moe->sharedIntermediate ? fmt::format(", shared expert {}", config->moe->sharedIntermediate)
                                        : std::string());
  os << fmt::format("layers            {}", stats.layers);
  if (config && config->moe && !config->moe->denseLayers.empty())
    os << fmt::format(" ({} with a dense MLP: {})", config->moe->denseLayers.size(),
                      fmt::join(config->moe->denseLayers, ", "));
  os << "\n";
  if (config) {
    const ModelConfig &c = *config;
    os << fmt::format("hidden            {} (heads {}, kv heads {}, head_dim "
                      "{}, intermediate {})\n",
                      c.hidden, c.heads, c.kvHeads, c.headDim, c.intermediate);
    os << fmt::format("vocab             {}{}\n", c.vocab,
                      c.tieEmbeddings ? " (tied embeddings)" : "");
    // What a plan pads it to (llcdist-pad-vocab), at the default
    // --make-vocab-size-divisible-by 128; the counts above stay the real ones.
    if (c.vocab % 128 != 0)
      os << fmt::format("                  padded in plans to a multiple of 128 × tp "
                        "(--make-vocab-size-divisible-by): {} at tp=1, {} at tp=8\n",
                        (c.vocab + 127) / 128 * 128, (c.vocab + 1023) / 1024 * 1024);
  }
  os << fmt::format("seq len           {}\n", stats.seqLen);
  os << fmt::format("training FLOPs    {} per token\n", sci(stats.trainingFlopsPerToken()));
  os << "  = 3 × (Σ_linear 2·K·N + Σ_attention 4·S·heads·head_dim)\n";
  os << fmt::format("  = 3 × ({} linear + {} attention)\n", sci(stats.linearFlopsPerToken),
                    sci(stats.attentionFlopsPerToken));
  os << fmt::format("  (6N approximation: {})\n", sci(6.0 * stats.parameters));
}
