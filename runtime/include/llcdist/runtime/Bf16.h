// bfloat16 <-> fp32: the storage dtype `bf16` of the plan format (docs/plan-format.md "bf16 storage").
//
// A bf16 value is the top 16 bits of an IEEE-754 binary32. Widening (bf16 -> f32) is exact. Narrowing
// (f32 -> bf16) rounds to nearest, ties to even; values past the largest finite bf16 round to ±inf
// (as IEEE rounding does), ±inf stay ±inf, and NaN stays NaN (quieted: the payload's top bits are kept
// and the quiet bit is set, so a NaN never becomes inf). Subnormals round like any other value.
//
// Header-only, standard library only (the safetensors reader and the plan runtime share it).
#pragma once

#include <cstdint>
#include <cstring>

namespace llcdist::rt {

inline float bf16ToFloat(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t floatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040);  // NaN: keep it a (quiet) NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1)) >> 16);                  // round to nearest even
}

// f32 value of the bf16 nearest to f (round to nearest even): what storing f in a bf16 buffer keeps.
inline float roundToBf16(float f) { return bf16ToFloat(floatToBf16(f)); }
// Each of x[0..n) so: f32 data as a bf16 buffer would store it.
inline void roundToBf16InPlace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = roundToBf16(x[i]);
}

// Whole arrays (n elements; src and dst must not overlap).
inline void convertBf16ToF32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16ToFloat(src[i]);
}
inline void convertF32ToBf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = floatToBf16(src[i]);
}

}  // namespace llcdist::rt
