// The elementwise family's CPU kernels: GELU (tanh approximation, HF "gelu_new"; exact, HF "gelu"), SwiGLU (and GeGLU,
// its gelu_tanh gate: swiglu_*'s attr `act`), residual add, gradient fan-in; and its table entries (also copy and
// cast).
#include "llcdist/runtime/Kernels.h"

#include "CpuKernels.h"
#include "llcdist/runtime/Bf16.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace llcdist::rt {
namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;  // math.sqrt(2.0 / math.pi)
constexpr float kGeluCoef = 0.044715f;

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float silu(float x) { return x / (1.0f + std::exp(-x)); }  // torch's silu kernel

// gelu_tanh and its derivative: the one definition of gelu_tanh_fwd / _bwd and of GeGLU's gate.
float geluTanh(float v) { return 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + kGeluCoef * (v * v * v)))); }
float geluTanhDerivative(float v) {
  const float t = std::tanh(kSqrt2OverPi * (v + kGeluCoef * (v * v * v)));
  const float dinner = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoef * v * v);
  return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * dinner;
}

// The exact GELU as torch's CPU kernel computes it: x·Φ(x), Φ(x) = 0.5·(1 + erf(x/√2)); its derivative
// Φ(x) + x·φ(x), φ(x) = exp(-x²/2)/√(2π).
constexpr float kSqrtHalf = 0.70710678118654752f;    // M_SQRT1_2
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // M_2_SQRTPI · M_SQRT1_2 · 0.5
float geluErf(float v) { return v * 0.5f * (1.0f + std::erf(v * kSqrtHalf)); }
float geluErfDerivative(float v) {
  const float cdf = 0.5f * (1.0f + std::erf(v * kSqrtHalf));
  return cdf + v * (kInvSqrt2Pi * std::exp(-0.5f * v * v));
}
}  // namespace

void geluTanhForward(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = geluTanh(x[i]);
}

void geluTanhBackward(const float* dy, const float* x, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    dx[i] = dy[i] * geluTanhDerivative(x[i]);
  }
}

void geluErfForward(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = geluErf(x[i]);
}

void geluErfBackward(const float* dy, const float* x, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * geluErfDerivative(x[i]);
}

void clampForward(const float* x, float* y, int64_t n, float limit) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::min(std::max(x[i], -limit), limit);
}

void clampBackward(const float* dy, const float* x, float* dx, int64_t n, float limit) {
  for (int64_t i = 0; i < n; ++i) dx[i] = x[i] >= -limit && x[i] <= limit ? dy[i] : 0.0f;
}

void reluForward(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

void reluBackward(const float* dy, const float* x, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

void scaleForward(const float* x, float* y, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * factor;
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

void swigluForward(const float* gate, const float* up, float* y, int64_t n, GluActivation act) {
  if (act == GluActivation::kSilu) return swigluForward(gate, up, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = geluTanh(gate[i]) * up[i];
}

void swigluBackward(const float* dy, const float* gate, const float* up, float* dgate, float* dup, int64_t n,
                    GluActivation act) {
  if (act == GluActivation::kSilu) return swigluBackward(dy, gate, up, dgate, dup, n);
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i], u = up[i], d = dy[i];  // read before dgate or dup (which may be dy) is written
    dgate[i] = (d * u) * geluTanhDerivative(g);       // gelu_tanh_bwd of d·u
    dup[i] = d * geluTanh(g);
  }
}

void addForward(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void accumulateInto(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

// ---- CPU kernel-table entries (CpuKernels.h) -------------------------------------------------------

namespace {
// y = x converted between float dtypes (f32 -> bf16 rounds to nearest even, bf16 -> f32 is exact, the
// same dtype copies): cast and each pair of cast_multi.
Status castElements(const void* x, schema::ElemType from, void* y, schema::ElemType to, int64_t n) {
  if (!schema::isFloatType(from) || !schema::isFloatType(to)) return Status::internal("cast between non-float dtypes");
  if (from == to) {
    std::memmove(y, x, size_t(n * schema::elemTypeSize(from)));
  } else if (from == schema::ElemType::kF32) {
    convertF32ToBf16(static_cast<const float*>(x), static_cast<uint16_t*>(y), n);
  } else {
    convertBf16ToF32(static_cast<const uint16_t*>(x), static_cast<float*>(y), n);
  }
  return Status::ok();
}
}  // namespace

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
  addCpuKernel<P>(t, K::kGeluErfFwd, [](const KernelCall& c, const P& p, const Ctx&) {
    geluErfForward(c.F("x"), c.F("y"), p.n);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kGeluErfBwd, [](const KernelCall& c, const P& p, const Ctx&) {
    geluErfBackward(c.F("dy"), c.F("x"), c.F("dx"), p.n);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kClampFwd, [](const KernelCall& c, const P& p, const Ctx&) {
    clampForward(c.F("x"), c.F("y"), p.n, p.limit);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kClampBwd, [](const KernelCall& c, const P& p, const Ctx&) {
    clampBackward(c.F("dy"), c.F("x"), c.F("dx"), p.n, p.limit);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kReluFwd, [](const KernelCall& c, const P& p, const Ctx&) {
    reluForward(c.F("x"), c.F("y"), p.n);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kReluBwd, [](const KernelCall& c, const P& p, const Ctx&) {
    reluBackward(c.F("dy"), c.F("x"), c.F("dx"), p.n);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kScale, [](const KernelCall& c, const P& p, const Ctx&) {
    scaleForward(c.F("x"), c.F("y"), p.n, p.factor);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kSwigluFwd, [](const KernelCall& c, const P& p, const Ctx&) {
    swigluForward(c.F("gate"), c.F("up"), c.F("y"), p.n, p.act);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kSwigluBwd, [](const KernelCall& c, const P& p, const Ctx&) {
    swigluBackward(c.F("dy"), c.F("gate"), c.F("up"), c.F("dgate"), c.F("dup"), p.n, p.act);
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
    return castElements(c.ptr(c.role("x")), c.type(c.role("x")), c.ptr(c.role("y")), c.type(c.role("y")), p.n);
  });
  addCpuKernel<P>(t, K::kCastMulti, [](const KernelCall& c, const P&, const Ctx&) -> Status {
    const size_t x = c.role("x"), y = c.role("y");
    for (size_t k = 0; k < c.args[x].size(); ++k)
      LLCDIST_RETURN_IF_ERROR(castElements(c.ptr(x, k), c.type(x, k), c.ptr(y, k), c.type(y, k), c.argElems[x][k]));
    return Status::ok();
  });
}

}  // namespace llcdist::rt
