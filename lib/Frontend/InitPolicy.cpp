//===- InitPolicy.cpp - how a Hugging Face model initializes its weights --===//
#include "llcdist/Frontend/InitPolicy.h"

#include <cmath>

using namespace llcdist;

InitSpec llcdist::initPolicy(std::string_view architecture, std::string_view paramName,
                             int64_t numLayers, ParamRole role) {
  // GemmaRMSNorm scales by (1 + w): transformers starts w at zero.
  if (role.normWeight)
    return {architecture == "GemmaForCausalLM" ? InitSpec::Kind::Zeros : InitSpec::Kind::Ones, 0};
  if (role.rank1)
    return {InitSpec::Kind::Zeros, 0};
  double std = 0.02; // Hugging Face's initializer_range default
  // GPT-2 scales its residual projections by 1/sqrt(2·layers) at init.
  constexpr std::string_view kResidual = "c_proj.weight";
  if (architecture == "GPT2LMHeadModel" && paramName.size() >= kResidual.size() &&
      paramName.substr(paramName.size() - kResidual.size()) == kResidual)
    std /= std::sqrt(2.0 * double(numLayers));
  return {InitSpec::Kind::Normal, std};
}
