// The rules for the float op attributes whose value the kernels use as an fp32 number (Gemma's
// rms-norm `weight_offset` and embedding `scale`, clamp's `limit`, scale's `factor`, PlanSchema.h). One definition: the
// runtime checks plans against it (src/ops/Norm.cpp, src/ops/Embedding.cpp) and the compiler checks xf.rms_norm and
// xf.embedding (lib/Dialect/XF/IR/XFOps.cpp), so a plan llc-dist writes is one the runtime loads.
// Header-only and MLIR-free.
#pragma once

#include <cfloat>
#include <string_view>

namespace llcdist::rt::schema {

// `v` rounds to a finite fp32 value: in [-FLT_MAX, FLT_MAX] (NaN is not).
constexpr bool finiteAsF32(double v) { return v >= -double(FLT_MAX) && v <= double(FLT_MAX); }
// `v` rounds to a non-zero fp32 value: its magnitude above half the smallest subnormal.
constexpr bool nonZeroAsF32(double v) { return v > double(FLT_TRUE_MIN) / 2 || v < -double(FLT_TRUE_MIN) / 2; }

// rms_norm's weight_offset: any value finite as fp32.
constexpr bool weightOffsetValid(double v) { return finiteAsF32(v); }
inline constexpr std::string_view kWeightOffsetRule = "must be a finite fp32 number";
// A multiplier (embedding's scale, Gemma's; scale's factor, Cohere's logit_scale): finite and non-zero as
// fp32.
constexpr bool multiplierValid(double v) { return finiteAsF32(v) && nonZeroAsF32(v); }
inline constexpr std::string_view kMultiplierRule = "must be a finite, non-zero fp32 number";

// clamp's limit (OLMo's clip_qkv): positive, finite and non-zero as fp32.
constexpr bool clampLimitValid(double v) { return v > 0 && finiteAsF32(v) && nonZeroAsF32(v); }
inline constexpr std::string_view kClampLimitRule = "must be a positive fp32 number (finite, non-zero)";

static_assert(multiplierValid(0.0625) && multiplierValid(-2.0) && !multiplierValid(0.0) && !multiplierValid(1e39));
static_assert(clampLimitValid(8.0) && !clampLimitValid(0.0) && !clampLimitValid(-1.0) && !clampLimitValid(1e39) &&
              !clampLimitValid(1e-50));
static_assert(weightOffsetValid(1.0) && !weightOffsetValid(1e39) && !weightOffsetValid(-1e39));
static_assert(multiplierValid(45.25) && !multiplierValid(1e-50) && multiplierValid(double(FLT_TRUE_MIN)));

}  // namespace llcdist::rt::schema
