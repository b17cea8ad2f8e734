//===- InitPolicy.h - how a Hugging Face model initializes its weights ----===//
//
// MLIR-free model knowledge beside ModelConfig: the initial distribution of
// each parameter, as Hugging Face's `_init_weights` chooses it. The plan's
// manifest records it per parameter (plan.param `init`); the runtime draws
// each element from it with a counter-based RNG (design.md §3).
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_FRONTEND_INITPOLICY_H
#define LLCDIST_FRONTEND_INITPOLICY_H

#include <cstdint>
#include <string_view>

namespace llcdist {

/// How a parameter's elements start.
struct InitSpec {
  enum class Kind { Normal, Zeros, Ones };
  Kind kind = Kind::Normal;
  /// Kind::Normal: the standard deviation (the mean is 0).
  double std = 0;
};

/// What the policy needs to know of a parameter besides its name.
struct ParamRole {
  /// The scale of a LayerNorm or an RMSNorm.
  bool normWeight = false;
  /// Rank 1: a norm's shift or a bias.
  bool rank1 = false;
};

/// Hugging Face's `_init_weights` for `architecture` (the config's
/// "architectures" entry, e.g. "GPT2LMHeadModel") with `numLayers` layers:
/// norm weights 1, other rank-1 parameters (biases, norm shifts) 0, every
/// matrix normal(0, initializer_range = 0.02), except GPT-2's residual
/// projections (`*c_proj.weight`), scaled by 1/sqrt(2·layers).
InitSpec initPolicy(std::string_view architecture, std::string_view paramName,
                    int64_t numLayers, ParamRole role);

} // namespace llcdist

#endif // LLCDIST_FRONTEND_INITPOLICY_H
