// Cross entropy over a vocabulary (torch F.cross_entropy with reduction="mean").
#include "llcdist/runtime/Kernels.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

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

namespace {

// Global row statistics of vocabulary-parallel logits: max (f32, exact through the f64 all-reduce),
// Σ exp(x - max) and the target's logit, reduced over the shards.
struct GlobalRowStats {
  std::vector<float> max;
  std::vector<double> sumExp, targetLogit;
};

Status vocabParallelStats(const float* logits, const int32_t* targets, int64_t M, int64_t V,
                          const VocabShard& shard, const ShardAllReduceF64& reduce, GlobalRowStats* out) {
  if (shard.count < 1 || shard.index < 0 || shard.index >= shard.count)
    return Status::invalidArgument("cross_entropy: vocabulary shard " + std::to_string(shard.index) + " of " +
                                   std::to_string(shard.count) + " is invalid");
  if (!reduce) return Status::invalidArgument("cross_entropy: vocabulary-parallel call without an all-reduce");
  // Every target checked before the first collective, so a bad batch fails every member alike.
  for (int64_t m = 0; m < M; ++m) LLCDIST_RETURN_IF_ERROR(checkTarget(targets, m, V * shard.count));
  std::vector<double> mx(static_cast<size_t>(M));
  for (int64_t m = 0; m < M; ++m) mx[size_t(m)] = double(*std::max_element(logits + m * V, logits + (m + 1) * V));
  LLCDIST_RETURN_IF_ERROR(reduce(mx.data(), M, /*max=*/true));
  // [Σ exp(x - max) for every row | target logit for every row], one sum.
  std::vector<double> sums(size_t(2 * M), 0.0);
  out->max.resize(size_t(M));
  const int64_t begin = shard.index * V;
  for (int64_t m = 0; m < M; ++m) {
    const float gmax = float(mx[size_t(m)]);  // a float that went through double: exact
    out->max[size_t(m)] = gmax;
    const float* x = logits + m * V;
    double sum = 0.0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(double(x[j] - gmax));
    sums[size_t(m)] = sum;
    const int64_t local = int64_t(targets[m]) - begin;
    if (local >= 0 && local < V) sums[size_t(M + m)] = double(x[local]);
  }
  LLCDIST_RETURN_IF_ERROR(reduce(sums.data(), 2 * M, /*max=*/false));
  out->sumExp.assign(sums.begin(), sums.begin() + M);
  out->targetLogit.assign(sums.begin() + M, sums.end());
  return Status::ok();
}

}  // namespace

Status crossEntropyForwardVocabParallel(const float* logits, const int32_t* targets, double* meanLoss, int64_t M,
                                        int64_t V, const VocabShard& shard, const ShardAllReduceF64& reduce) {
  GlobalRowStats st;
  LLCDIST_RETURN_IF_ERROR(vocabParallelStats(logits, targets, M, V, shard, reduce, &st));
  double total = 0.0;
  for (int64_t m = 0; m < M; ++m)
    total += double(st.max[size_t(m)]) + std::log(st.sumExp[size_t(m)]) - st.targetLogit[size_t(m)];
  *meanLoss = M > 0 ? total / double(M) : 0.0;
  return Status::ok();
}

Status crossEntropyBackwardVocabParallel(const float* logits, const int32_t* targets, float* dlogits, int64_t M,
                                         int64_t V, float scale, const VocabShard& shard,
                                         const ShardAllReduceF64& reduce) {
  GlobalRowStats st;
  LLCDIST_RETURN_IF_ERROR(vocabParallelStats(logits, targets, M, V, shard, reduce, &st));
  const int64_t begin = shard.index * V;
  for (int64_t m = 0; m < M; ++m) {
    const float* x = logits + m * V;
    float* d = dlogits + m * V;
    const float gmax = st.max[size_t(m)];
    const double inv = 1.0 / st.sumExp[size_t(m)];
    const int64_t target = int64_t(targets[m]) - begin;
    for (int64_t j = 0; j < V; ++j) {
      const double p = std::exp(double(x[j] - gmax)) * inv;
      d[j] = static_cast<float>((p - (j == target ? 1.0 : 0.0)) * scale);
    }
  }
  return Status::ok();
}

}  // namespace llcdist::rt
