// Elementwise activations: GELU (tanh approximation, HF "gelu_new"), SwiGLU, residual add.
#include "llcdist/runtime/Kernels.h"

#include <cmath>

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

}  // namespace llcdist::rt
