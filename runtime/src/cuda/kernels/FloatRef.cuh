// Private to the CUDA kernels: a float role's buffer as a kernel reads and writes it, f32 or bf16 as the
// call's kernel variant takes it (KernelVariant.h, KernelCall::argTypes), and the f32 <-> bf16
// conversions bit for bit as the CPU's Bf16.h (round to nearest even; NaN stays a quiet NaN).
//
// The numerics contract (docs/plan-format.md "Where bf16 results are rounded"): a kernel reads bf16
// exactly (bf16 -> f32), computes in f32 (or f64 where its CPU reference does), and rounds each value
// it writes once, where the CPU's staged path rounds its f32 temporary after the op. A read-write role
// (accumulate) reads the old bf16 value exactly, adds in f32 and rounds once.
//
// FloatRef's dtype is a kernel argument, the same for every thread, so its branch is uniform and costs
// nothing next to the memory access; no template per dtype combination is needed.
#pragma once

#include "llcdist/runtime/KernelCall.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <string_view>

namespace llcdist::rt::cuda {

// Bf16.h's floatToBf16 / bf16ToFloat, bit for bit.
__device__ __forceinline__ uint16_t floatToBf16Bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // NaN: keep it a (quiet) NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);                    // round to nearest even
}
__device__ __forceinline__ float bf16BitsToFloat(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }

struct FloatRef {
  void* p = nullptr;
  bool bf16 = false;

  __device__ __forceinline__ float operator[](int64_t i) const {
    return bf16 ? bf16BitsToFloat(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
  }
  __device__ __forceinline__ void set(int64_t i, float v) const {
    if (bf16)
      static_cast<uint16_t*>(p)[i] = floatToBf16Bits(v);
    else
      static_cast<float*>(p)[i] = v;
  }
  // The buffer from element `i` on (a row of a matrix).
  __host__ __device__ __forceinline__ FloatRef at(int64_t i) const {
    return FloatRef{static_cast<char*>(p) + i * (bf16 ? 2 : 4), bf16};
  }
  __host__ __device__ __forceinline__ explicit operator bool() const { return p != nullptr; }
};

// The k-th buffer of role `role` of the call as a FloatRef (null when an optional role is absent).
inline FloatRef floatRef(const KernelCall& c, size_t role, size_t k = 0) {
  return FloatRef{c.ptr(role, k), c.type(role, k) == schema::ElemType::kBF16};
}
inline FloatRef floatRef(const KernelCall& c, std::string_view role, size_t k = 0) {
  const int r = schema::argIndex(c.kind, role);
  if (r < 0 || size_t(r) >= c.args.size() || c.args[size_t(r)].empty()) return FloatRef{};
  return floatRef(c, size_t(r), k);
}

}  // namespace llcdist::rt::cuda
