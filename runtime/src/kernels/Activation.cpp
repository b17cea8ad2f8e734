// The elementwise family's CPU kernels: GELU (tanh approximation, HF "gelu_new"), SwiGLU, residual add,
// gradient fan-in; and its table entries (also copy and cast).
#include "llcdist/runtime/Kernels.h"

#include "CpuKernels.h"
#include "llcdist/runtime/Bf16.h"

#include <cmath>
#include <cstring>

namespace llcdist::rt {
namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;  // math.sqrt(2.0 / math.pi)
constexpr float kGeluCoef = 0.044715f;

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float silu(float x) { return x / (1.0f + std::exp(-x)); }  // torch's silu kernel
}  // namespace

void geluTanhForward(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + kGeluCoef * (v * v * v))));
  }
}

void geluTanhBackward(const float* dy, const float* x, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float t = std::tanh(kSqrt2OverPi * (v + kGeluCoef * (v * v * v)));
    const float dinner = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoef * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * dinner);
  }
}

void swigluForward(const float* gate, const float* up, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = silu(gate[i]) * up[i];
}

void swigluBackward(const float* dy, const float* gate, const float* up, float* dgate, float* dup,
                    int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i], u = up[i], d = dy[i];
    const float sg = sigmoid(g);
    dgate[i] = d * u * sg * (1.0f + g * (1.0f - sg));
    dup[i] = d * silu(g);
  }
}

void addForward(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void accumulateInto(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

// ---- CPU kernel-table entries (CpuKernels.h) -------------------------------------------------------

void registerCpuElementwiseKernels(CpuKernelTable& t) {
  using K = schema::OpKind;
  using P = ElementwiseParams;
  using Ctx = CpuKernelContext;
  addCpuKernel<P>(t, K::kGeluTanhFwd, [](const KernelCall& c, const P& p, const Ctx&) {
    geluTanhForward(c.F("x"), c.F("y"), p.n);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kGeluTanhBwd, [](const KernelCall& c, const P& p, const Ctx&) {
    geluTanhBackward(c.F("dy"), c.F("x"), c.F("dx"), p.n);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kSwigluFwd, [](const KernelCall& c, const P& p, const Ctx&) {
    swigluForward(c.F("gate"), c.F("up"), c.F("y"), p.n);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kSwigluBwd, [](const KernelCall& c, const P& p, const Ctx&) {
    swigluBackward(c.F("dy"), c.F("gate"), c.F("up"), c.F("dgate"), c.F("dup"), p.n);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kAdd, [](const KernelCall& c, const P& p, const Ctx&) {
    addForward(c.F("a"), c.F("b"), c.F("y"), p.n);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kAccumulate, [](const KernelCall& c, const P& p, const Ctx&) {
    accumulateInto(c.F("x"), c.F("y"), p.n);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kCopy, [](const KernelCall& c, const P& p, const Ctx&) {
    std::memcpy(c.F("y"), c.F("x"), size_t(p.n) * 4);
    return Status::ok();
  });
  // y = x converted: f32 -> bf16 rounds to nearest even, bf16 -> f32 is exact, same dtype copies.
  addCpuKernel<P>(t, K::kCast, [](const KernelCall& c, const P& p, const Ctx&) {
    const schema::ElemType from = c.type(c.role("x")), to = c.type(c.role("y"));
    const void* x = c.ptr(c.role("x"));
    void* y = c.ptr(c.role("y"));
    if (!schema::isFloatType(from) || !schema::isFloatType(to)) return Status::internal("cast between non-float dtypes");
    if (from == to) {
      std::memmove(y, x, size_t(p.n * schema::elemTypeSize(from)));
    } else if (from == schema::ElemType::kF32) {
      convertF32ToBf16(static_cast<const float*>(x), static_cast<uint16_t*>(y), p.n);
    } else {
      convertBf16ToF32(static_cast<const uint16_t*>(x), static_cast<float*>(y), p.n);
    }
    return Status::ok();
  });
}

}  // namespace llcdist::rt
