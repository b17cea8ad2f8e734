// Cross entropy over a vocabulary (torch F.cross_entropy with reduction="mean").
#include "llcdist/runtime/Kernels.h"

#include "CpuKernels.h"
#include "llcdist/runtime/Bf16.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace llcdist::rt {
namespace {

Status checkTarget(const int32_t* targets, int64_t m, int64_t V) {
  if (targets[m] < 0 || targets[m] >= V)
    return Status::outOfRange("cross_entropy: target " + std::to_string(targets[m]) + " at position " +
                              std::to_string(m) + " is outside the vocabulary [0, " + std::to_string(V) + ")");
  return Status::ok();
}

struct RowStats {
  float max;
  double sumExp;  // Σ exp(x - max)
};

// Over the first V columns (the real vocabulary; padding columns after them are never read).
RowStats rowStats(const float* x, int64_t V) {
  float mx = *std::max_element(x, x + V);
  double sum = 0.0;
  for (int64_t j = 0; j < V; ++j) sum += std::exp(double(x[j] - mx));
  return {mx, sum};
}

}  // namespace

// 0 < realV <= V: the columns the loss reads (realV 0: all V).
Status checkRealVocab(int64_t realV, int64_t V) {
  if (realV < 0 || realV > V)
    return Status::invalidArgument("cross_entropy: real vocabulary " + std::to_string(realV) + " is outside [1, " +
                                   std::to_string(V) + "] (the logits' columns)");
  return Status::ok();
}

namespace {

// Adds the rows' losses to *total in row order (targets checked by the caller; R real columns).
void addRowLosses(const float* logits, const int32_t* targets, float* losses, double* total, int64_t M, int64_t V,
                  int64_t R) {
  for (int64_t m = 0; m < M; ++m) {
    const float* x = logits + m * V;
    const RowStats st = rowStats(x, R);
    const double loss = double(st.max) + std::log(st.sumExp) - double(x[targets[m]]);
    if (losses) losses[m] = static_cast<float>(loss);
    *total += loss;
  }
}

}  // namespace

Status crossEntropyForward(const float* logits, const int32_t* targets, float* losses, double* meanLoss, int64_t M,
                           int64_t V, int64_t realV) {
  LLCDIST_RETURN_IF_ERROR(checkRealVocab(realV, V));
  const int64_t R = realV > 0 ? realV : V;
  for (int64_t m = 0; m < M; ++m) LLCDIST_RETURN_IF_ERROR(checkTarget(targets, m, R));
  double total = 0.0;
  addRowLosses(logits, targets, losses, &total, M, V, R);
  *meanLoss = M > 0 ? total / double(M) : 0.0;
  return Status::ok();
}

Status crossEntropyBackward(const float* logits, const int32_t* targets, float* dlogits, int64_t M, int64_t V,
                            float scale, int64_t realV) {
  LLCDIST_RETURN_IF_ERROR(checkRealVocab(realV, V));
  const int64_t R = realV > 0 ? realV : V;
  for (int64_t m = 0; m < M; ++m) LLCDIST_RETURN_IF_ERROR(checkTarget(targets, m, R));
  for (int64_t m = 0; m < M; ++m) {
    const float* x = logits + m * V;
    float* d = dlogits + m * V;
    const RowStats st = rowStats(x, R);
    const double inv = 1.0 / st.sumExp;
    for (int64_t j = 0; j < R; ++j) {
      const double p = std::exp(double(x[j] - st.max)) * inv;
      d[j] = static_cast<float>((p - (j == targets[m] ? 1.0 : 0.0)) * scale);
    }
    // Padding columns are outside the softmax: exactly zero gradient, so the padded rows of the LM head
    // get none either.
    std::fill(d + R, d + V, 0.0f);
  }
  return Status::ok();
}

Status classifierForwardBackward(const ClassifierArrays& a, const ClassifierParams& p, double* total) {
  const LinearParams& lin = p.linear;
  const int64_t M = lin.M, K = lin.K, N = lin.N;
  LLCDIST_RETURN_IF_ERROR(checkRealVocab(p.realVocab, N));
  if (p.chunk < 1) return Status::invalidArgument("classifier: chunk " + std::to_string(p.chunk) + " is not >= 1");
  const int64_t R = p.realVocab > 0 ? p.realVocab : N;
  for (int64_t m = 0; m < M; ++m) LLCDIST_RETURN_IF_ERROR(checkTarget(a.targets, m, R));
  for (int64_t r = 0; r < M; r += p.chunk) {
    const int64_t rows = std::min(p.chunk, M - r);
    const float* x = a.x + r * K;
    linearForward(x, a.w, nullptr, a.logits, rows, K, N, lin.layout);
    if (a.bf16Logits) roundToBf16InPlace(a.logits, rows * N);
    addRowLosses(a.logits, a.targets + r, nullptr, total, rows, N, R);
    LLCDIST_RETURN_IF_ERROR(
        crossEntropyBackward(a.logits, a.targets + r, a.logits, rows, N, float(p.gradScale), p.realVocab));
    if (a.bf16Logits) roundToBf16InPlace(a.logits, rows * N);
    linearBackwardInput(a.logits, a.w, a.dx + r * K, rows, K, N, lin.layout, /*accumulate=*/false);
    float* dw = a.dwAcc ? a.dwAcc : a.dw;
    const bool onto = r > 0 || (!a.dwAcc && lin.accumulate);
    linearBackwardWeight(a.logits, x, dw, rows, K, N, lin.layout, onto);
  }
  if (a.dwAcc) {
    const int64_t n = K * N;
    if (M == 0) std::fill(a.dwAcc, a.dwAcc + n, 0.0f);
    for (int64_t i = 0; i < n; ++i) a.dw[i] = lin.accumulate ? a.dw[i] + a.dwAcc[i] : a.dwAcc[i];
  }
  return Status::ok();
}

namespace {

// The local columns [0, n) of this shard that hold real vocabulary: global columns below realV (realV 0:
// all of them). A shard may hold padding only (n = 0).
int64_t realColumns(int64_t V, int64_t realV, const VocabShard& shard) {
  if (realV <= 0) return V;
  return std::clamp<int64_t>(realV - shard.index * V, 0, V);
}

Status checkShard(const VocabShard& shard) {
  if (shard.count < 1 || shard.index < 0 || shard.index >= shard.count)
    return Status::invalidArgument("cross_entropy: vocabulary shard " + std::to_string(shard.index) + " of " +
                                   std::to_string(shard.count) + " is invalid");
  return Status::ok();
}

}  // namespace

Status crossEntropyShardMax(const float* logits, const int32_t* targets, double* rowMax, int64_t M, int64_t V,
                            const VocabShard& shard, int64_t realV) {
  LLCDIST_RETURN_IF_ERROR(checkShard(shard));
  LLCDIST_RETURN_IF_ERROR(checkRealVocab(realV, V * shard.count));
  // Every target checked before the first collective, so a bad batch fails every member alike.
  for (int64_t m = 0; m < M; ++m) LLCDIST_RETURN_IF_ERROR(checkTarget(targets, m, realV > 0 ? realV : V * shard.count));
  const int64_t n = realColumns(V, realV, shard);
  for (int64_t m = 0; m < M; ++m)
    rowMax[m] = n > 0 ? double(*std::max_element(logits + m * V, logits + m * V + n))
                      : -std::numeric_limits<double>::infinity();
  return Status::ok();
}

Status crossEntropyShardSums(const float* logits, const int32_t* targets, const double* rowMax, double* rowSums,
                             int64_t M, int64_t V, const VocabShard& shard, int64_t realV) {
  LLCDIST_RETURN_IF_ERROR(checkShard(shard));
  LLCDIST_RETURN_IF_ERROR(checkRealVocab(realV, V * shard.count));
  const int64_t n = realColumns(V, realV, shard);
  const int64_t begin = shard.index * V;
  for (int64_t m = 0; m < M; ++m) {
    const float gmax = float(rowMax[m]);  // a float that went through double: exact
    const float* x = logits + m * V;
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(double(x[j] - gmax));
    rowSums[m] = sum;
    const int64_t local = int64_t(targets[m]) - begin;
    rowSums[M + m] = local >= 0 && local < n ? double(x[local]) : 0.0;
  }
  return Status::ok();
}

Status crossEntropyForwardVocabParallel(const double* rowMax, const double* rowSums, double* meanLoss, int64_t M) {
  double total = 0.0;
  for (int64_t m = 0; m < M; ++m) total += double(float(rowMax[m])) + std::log(rowSums[m]) - rowSums[M + m];
  *meanLoss = M > 0 ? total / double(M) : 0.0;
  return Status::ok();
}

Status crossEntropyBackwardVocabParallel(const float* logits, const int32_t* targets, const double* rowMax,
                                         const double* rowSums, float* dlogits, int64_t M, int64_t V, float scale,
                                         const VocabShard& shard, int64_t realV) {
  LLCDIST_RETURN_IF_ERROR(checkShard(shard));
  LLCDIST_RETURN_IF_ERROR(checkRealVocab(realV, V * shard.count));
  for (int64_t m = 0; m < M; ++m) LLCDIST_RETURN_IF_ERROR(checkTarget(targets, m, realV > 0 ? realV : V * shard.count));
  const int64_t begin = shard.index * V;
  const int64_t n = realColumns(V, realV, shard);
  for (int64_t m = 0; m < M; ++m) {
    const float* x = logits + m * V;
    float* d = dlogits + m * V;
    const float gmax = float(rowMax[m]);
    const double inv = 1.0 / rowSums[m];
    const int64_t target = int64_t(targets[m]) - begin;
    for (int64_t j = 0; j < n; ++j) {
      const double p = std::exp(double(x[j] - gmax)) * inv;
      d[j] = static_cast<float>((p - (j == target ? 1.0 : 0.0)) * scale);
    }
    std::fill(d + n, d + V, 0.0f);  // padding columns: outside the softmax, zero gradient
  }
  return Status::ok();
}

// ---- CPU kernel-table entries (CpuKernels.h) -------------------------------------------------------

void registerCpuLossKernels(CpuKernelTable& t) {
  using K = schema::OpKind;
  using P = LossParams;
  using Ctx = CpuKernelContext;
  // Vocabulary-parallel (attr shard_axis): row_max and row_sums hold the statistics the plan's
  // all-reduces completed over the shards.
  addCpuKernel<P>(t, K::kCrossEntropyFwd, [](const KernelCall& c, const P& p, const Ctx&) {
    double mean = 0.0;
    if (p.vocabShard)
      LLCDIST_RETURN_IF_ERROR(crossEntropyForwardVocabParallel(c.D("row_max"), c.D("row_sums"), &mean, p.M));
    else
      LLCDIST_RETURN_IF_ERROR(
          crossEntropyForward(c.F("logits"), c.I("targets"), nullptr, &mean, p.M, p.V, p.realVocab));
    c.F("loss")[0] += float(p.scale * mean);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kCrossEntropyBwd, [](const KernelCall& c, const P& p, const Ctx&) {
    if (p.vocabShard)
      return crossEntropyBackwardVocabParallel(c.F("logits"), c.I("targets"), c.D("row_max"), c.D("row_sums"),
                                               c.F("dlogits"), p.M, p.V, float(p.scale), *p.vocabShard, p.realVocab);
    return crossEntropyBackward(c.F("logits"), c.I("targets"), c.F("dlogits"), p.M, p.V, float(p.scale), p.realVocab);
  });
  addCpuKernel<ClassifierParams>(t, K::kClassifier, [](const KernelCall& c, const ClassifierParams& p, const Ctx&) {
    ClassifierArrays a;
    a.x = c.F("x");
    a.w = c.F("w");
    a.targets = c.I("targets");
    a.logits = c.F("logits");
    a.dx = c.F("dx");
    a.dw = c.F("dw");
    a.dwAcc = c.F("dw_acc");
    a.bf16Logits = c.storedBf16("logits");
    double total = 0.0;
    LLCDIST_RETURN_IF_ERROR(classifierForwardBackward(a, p, &total));
    const int64_t M = p.linear.M;
    c.F("loss")[0] += float(p.scale * (M > 0 ? total / double(M) : 0.0));
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kCrossEntropyMax, [](const KernelCall& c, const P& p, const Ctx&) {
    return crossEntropyShardMax(c.F("logits"), c.I("targets"), c.D("row_max"), p.M, p.V, *p.vocabShard, p.realVocab);
  });
  addCpuKernel<P>(t, K::kCrossEntropySums, [](const KernelCall& c, const P& p, const Ctx&) {
    return crossEntropyShardSums(c.F("logits"), c.I("targets"), c.D("row_max"), c.D("row_sums"), p.M, p.V,
                                 *p.vocabShard, p.realVocab);
  });
}

}  // namespace llcdist::rt
