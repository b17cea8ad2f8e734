// Cross entropy over a vocabulary (torch F.cross_entropy with reduction="mean").
#include "llcdist/runtime/Kernels.h"

#include "CpuKernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
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
    return Status::invalidArgument("cross_entropy: real vocabulary " + std::to_string(realV) +
                                   " is outside [1, " + std::to_string(V) + "] (the logits' columns)");
  return Status::ok();
}

Status crossEntropyForward(const float* logits, const int32_t* targets, float* losses, double* meanLoss,
                           int64_t M, int64_t V, int64_t realV) {
  LLCDIST_RETURN_IF_ERROR(checkRealVocab(realV, V));
  const int64_t R = realV > 0 ? realV : V;
  double total = 0.0;
  for (int64_t m = 0; m < M; ++m) {
    LLCDIST_RETURN_IF_ERROR(checkTarget(targets, m, R));
    const float* x = logits + m * V;
    const RowStats st = rowStats(x, R);
    const double loss = double(st.max) + std::log(st.sumExp) - double(x[targets[m]]);
    if (losses) losses[m] = static_cast<float>(loss);
    total += loss;
  }
  *meanLoss = M > 0 ? total / double(M) : 0.0;
  return Status::ok();
}

Status crossEntropyBackward(const float* logits, const int32_t* targets, float* dlogits, int64_t M,
                            int64_t V, float scale, int64_t realV) {
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

namespace {

// Global row statistics of vocabulary-parallel logits: max (f32, exact through the f64 all-reduce),
// Σ exp(x - max) and the target's logit, reduced over the shards.
struct GlobalRowStats {
  std::vector<float> max;
  std::vector<double> sumExp, targetLogit;
};

// The local columns [0, n) of this shard that hold real vocabulary: global columns below realV (realV 0:
// all of them). A shard may hold padding only (n = 0).
int64_t realColumns(int64_t V, int64_t realV, const VocabShard& shard) {
  if (realV <= 0) return V;
  return std::clamp<int64_t>(realV - shard.index * V, 0, V);
}

Status vocabParallelStats(const float* logits, const int32_t* targets, int64_t M, int64_t V, int64_t realV,
                          const VocabShard& shard, const ShardAllReduceF64& reduce, GlobalRowStats* out) {
  if (shard.count < 1 || shard.index < 0 || shard.index >= shard.count)
    return Status::invalidArgument("cross_entropy: vocabulary shard " + std::to_string(shard.index) + " of " +
                                   std::to_string(shard.count) + " is invalid");
  if (!reduce) return Status::invalidArgument("cross_entropy: vocabulary-parallel call without an all-reduce");
  LLCDIST_RETURN_IF_ERROR(checkRealVocab(realV, V * shard.count));
  // Every target checked before the first collective, so a bad batch fails every member alike.
  for (int64_t m = 0; m < M; ++m)
    LLCDIST_RETURN_IF_ERROR(checkTarget(targets, m, realV > 0 ? realV : V * shard.count));
  const int64_t n = realColumns(V, realV, shard);
  std::vector<double> mx(static_cast<size_t>(M), -std::numeric_limits<double>::infinity());
  if (n > 0)
    for (int64_t m = 0; m < M; ++m) mx[size_t(m)] = double(*std::max_element(logits + m * V, logits + m * V + n));
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
    for (int64_t j = 0; j < n; ++j) sum += std::exp(double(x[j] - gmax));
    sums[size_t(m)] = sum;
    const int64_t local = int64_t(targets[m]) - begin;
    if (local >= 0 && local < n) sums[size_t(M + m)] = double(x[local]);
  }
  LLCDIST_RETURN_IF_ERROR(reduce(sums.data(), 2 * M, /*max=*/false));
  out->sumExp.assign(sums.begin(), sums.begin() + M);
  out->targetLogit.assign(sums.begin() + M, sums.end());
  return Status::ok();
}

}  // namespace

Status crossEntropyForwardVocabParallel(const float* logits, const int32_t* targets, double* meanLoss, int64_t M,
                                        int64_t V, const VocabShard& shard, const ShardAllReduceF64& reduce,
                                        int64_t realV) {
  GlobalRowStats st;
  LLCDIST_RETURN_IF_ERROR(vocabParallelStats(logits, targets, M, V, realV, shard, reduce, &st));
  double total = 0.0;
  for (int64_t m = 0; m < M; ++m)
    total += double(st.max[size_t(m)]) + std::log(st.sumExp[size_t(m)]) - st.targetLogit[size_t(m)];
  *meanLoss = M > 0 ? total / double(M) : 0.0;
  return Status::ok();
}

Status crossEntropyBackwardVocabParallel(const float* logits, const int32_t* targets, float* dlogits, int64_t M,
                                         int64_t V, float scale, const VocabShard& shard,
                                         const ShardAllReduceF64& reduce, int64_t realV) {
  GlobalRowStats st;
  LLCDIST_RETURN_IF_ERROR(vocabParallelStats(logits, targets, M, V, realV, shard, reduce, &st));
  const int64_t begin = shard.index * V;
  const int64_t n = realColumns(V, realV, shard);
  for (int64_t m = 0; m < M; ++m) {
    const float* x = logits + m * V;
    float* d = dlogits + m * V;
    const float gmax = st.max[size_t(m)];
    const double inv = 1.0 / st.sumExp[size_t(m)];
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
  // Vocabulary-parallel: the row statistics are all-reduced over the shard_axis group.
  auto shardReduce = [](const P& p, const Ctx& ctx) -> ShardAllReduceF64 {
    return [&p, &ctx](double* buf, int64_t n, bool max) {
      return ctx.groupAllReduce(p.group, buf, n, max ? ReduceOp::kMax : ReduceOp::kSum);
    };
  };
  addCpuKernel<P>(t, K::kCrossEntropyFwd, [shardReduce](const KernelCall& c, const P& p, const Ctx& ctx) {
    double mean = 0.0;
    if (p.vocabShard)
      LLCDIST_RETURN_IF_ERROR(crossEntropyForwardVocabParallel(c.F("logits"), c.I("targets"), &mean, p.M, p.V,
                                                               *p.vocabShard, shardReduce(p, ctx), p.realVocab));
    else
      LLCDIST_RETURN_IF_ERROR(crossEntropyForward(c.F("logits"), c.I("targets"), nullptr, &mean, p.M, p.V, p.realVocab));
    c.F("loss")[0] += float(p.scale * mean);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kCrossEntropyBwd, [shardReduce](const KernelCall& c, const P& p, const Ctx& ctx) {
    if (p.vocabShard)
      return crossEntropyBackwardVocabParallel(c.F("logits"), c.I("targets"), c.F("dlogits"), p.M, p.V, float(p.scale),
                                               *p.vocabShard, shardReduce(p, ctx), p.realVocab);
    return crossEntropyBackward(c.F("logits"), c.I("targets"), c.F("dlogits"), p.M, p.V, float(p.scale), p.realVocab);
  });
}

}  // namespace llcdist::rt
