// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11) and deterministic parameter init.
//
// Every element's value depends only on (seed, parameter name, global flat index): element i of a
// tensor uses Philox block i/4 under a key derived from (seed, name). So a rank initializing rows
// [r0, r1) of a sharded tensor (globalBegin = r0·cols) produces exactly the values the full tensor has
// there, whatever the sharding — the property that makes every parallel plan start from the same
// global model.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace llcdist::rt {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// One Philox4x32 block with 10 rounds (bit-exact with Random123's philox4x32_10).
PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

// A 64-bit key from (seed, name): FNV-1a of the name mixed with the seed by SplitMix64 finalizers.
uint64_t streamKey(uint64_t seed, std::string_view name);

// out[j] ~ N(mean, std²) for global indices globalBegin + j, j in [0, count). Box-Muller on Philox
// output: block c = i/4 gives (u0,u1) -> elements 4c, 4c+1 and (u2,u3) -> 4c+2, 4c+3.
void initNormal(float* out, uint64_t seed, std::string_view name, int64_t globalBegin, int64_t count,
                float std, float mean = 0.0f);
// out[j] ~ U[lo, hi) for global indices globalBegin + j (one 32-bit Philox word per element).
void initUniform(float* out, uint64_t seed, std::string_view name, int64_t globalBegin, int64_t count,
                 float lo, float hi);
// Constant fill (ones for norm weights, zeros for biases).
void fillConstant(float* out, int64_t count, float value);

// 64 random bits at (key, a, b): a pure function, for permutations and other counter-based uses.
uint64_t random64(uint64_t key, uint64_t a, uint64_t b);

}  // namespace llcdist::rt
