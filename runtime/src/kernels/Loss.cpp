// Cross entropy over a vocabulary (torch F.cross_entropy with reduction="mean").
#include "llcdist/runtime/Kernels.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace llcdist::rt {
namespace {

Status checkTarget(const int32_t* targets, int64_t m, int64_t V) {
  if (targets[m] < 0 || targets[m] >= V)
    return Status::outOfRange("cross_entropy: target " + std::to_string(targets[m]) + " at position " +
                              std::to_string(m) + " is outside the vocabulary [0, " +
                              std::to_string(V) + ")");
  return Status::ok();
}

struct RowStats {
  float max;
  double sumExp;  // Σ exp(x - max)
};

RowStats rowStats(const float* x, int64_t V) {
  float mx = *std::max_element(x, x + V);
  double sum = 0.0;
  for (int64_t j = 0; j < V; ++j) sum += std::exp(double(x[j] - mx));
  return {mx, sum};
}

}  // namespace

Status crossEntropyForward(const float* logits, const int32_t* targets, float* losses, double* meanLoss,
                           int64_t M, int64_t V) {
  double total = 0.0;
  for (int64_t m = 0; m < M; ++m) {
    LLCDIST_RETURN_IF_ERROR(checkTarget(targets, m, V));
    const float* x = logits + m * V;
    const RowStats st = rowStats(x, V);
    const double loss = double(st.max) + std::log(st.sumExp) - double(x[targets[m]]);
    if (losses) losses[m] = static_cast<float>(loss);
    total += loss;
  }
  *meanLoss = M > 0 ? total / double(M) : 0.0;
  return Status::ok();
}

Status crossEntropyBackward(const float* logits, const int32_t* targets, float* dlogits, int64_t M,
                            int64_t V, float scale) {
  for (int64_t m = 0; m < M; ++m) LLCDIST_RETURN_IF_ERROR(checkTarget(targets, m, V));
  for (int64_t m = 0; m < M; ++m) {
    const float* x = logits + m * V;
    float* d = dlogits + m * V;
    const RowStats st = rowStats(x, V);
    const double inv = 1.0 / st.sumExp;
    for (int64_t j = 0; j < V; ++j) {
      const double p = std::exp(double(x[j] - st.max)) * inv;
      d[j] = static_cast<float>((p - (j == targets[m] ? 1.0 : 0.0)) * scale);
    }
  }
  return Status::ok();
}

}  // namespace llcdist::rt
