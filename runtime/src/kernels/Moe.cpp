// Mixture of experts (HF Mixtral / Qwen2-MoE): the router, the permutation into expert-major rows and back,
// the experts' grouped GEMMs (cblas_sgemm per group) and the shared expert's sigmoid gate. See Kernels.h for
// the contract; group sizes out of range are guarded, never an error; moe_permute's expert ids and
// moe_unpermute's slots out of range are an error (KernelChecks.h's messages, the CUDA kernels' too).
#include "llcdist/runtime/KernelChecks.h"
#include "llcdist/runtime/Kernels.h"

#include "CpuKernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace llcdist::rt {
namespace {

// p = softmax(x[0..E)) in fp32: the max subtracted, Σ exp in double.
void softmaxRow(const float* x, float* p, int64_t E) {
  const float mx = *std::max_element(x, x + E);
  double sum = 0.0;
  for (int64_t e = 0; e < E; ++e) sum += std::exp(double(x[e] - mx));
  for (int64_t e = 0; e < E; ++e) p[e] = static_cast<float>(std::exp(double(x[e] - mx)) / sum);
}

bool validExpert(int32_t e, int64_t E) { return e >= 0 && e < E; }

// The k largest of p[0..E) in descending order, ties to the lower index: a selection that compares with >
// only, so a NaN never breaks it (the picks stay distinct and in range).
void topK(const float* p, int32_t* experts, std::vector<char>& taken, int64_t E, int64_t k) {
  std::fill(taken.begin(), taken.end(), 0);
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < E; ++e)
      if (!taken[size_t(e)] && (best < 0 || p[e] > p[best])) best = e;
    taken[size_t(best)] = 1;
    experts[j] = int32_t(best);
  }
}

// The expert groups' row ranges: n_e clamped to [0, N − off_e].
struct Group {
  int64_t off = 0, rows = 0;
};
std::vector<Group> groups(const int32_t* sizes, int64_t E, int64_t N) {
  std::vector<Group> g(static_cast<size_t>(E));
  int64_t off = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = std::clamp<int64_t>(sizes[e], 0, N - off);
    g[size_t(e)] = {off, n};
    off += n;
  }
  return g;
}
int64_t groupedRows(const std::vector<Group>& g) { return g.empty() ? 0 : g.back().off + g.back().rows; }

}  // namespace

void moeRouteForward(const float* logits, float* weights, int32_t* experts, const MoeParams& p) {
  std::vector<float> prob(size_t(p.E));
  std::vector<char> taken(size_t(p.E));
  for (int64_t t = 0; t < p.T; ++t) {
    softmaxRow(logits + t * p.E, prob.data(), p.E);
    int32_t* ex = experts + t * p.k;
    float* w = weights + t * p.k;
    topK(prob.data(), ex, taken, p.E, p.k);
    double sum = 0.0;
    for (int64_t j = 0; j < p.k; ++j) sum += prob[size_t(ex[j])];
    for (int64_t j = 0; j < p.k; ++j)
      w[j] = p.normalize ? static_cast<float>(double(prob[size_t(ex[j])]) / sum) : prob[size_t(ex[j])];
  }
}

void moeRouteBackward(const float* logits, const int32_t* experts, const float* dweights, float* dlogits,
                      const MoeParams& p) {
  std::vector<float> prob(size_t(p.E));
  std::vector<double> g(size_t(p.E));
  for (int64_t t = 0; t < p.T; ++t) {
    softmaxRow(logits + t * p.E, prob.data(), p.E);
    const int32_t* ex = experts + t * p.k;
    const float* dw = dweights + t * p.k;
    float* dl = dlogits + t * p.E;
    std::fill(g.begin(), g.end(), 0.0);
    double selected = 0.0, inner = 0.0;  // Σ_j p[e_j], Σ_j p[e_j]·dw_j
    for (int64_t j = 0; j < p.k; ++j) {
      if (!validExpert(ex[j], p.E)) continue;
      g[size_t(ex[j])] += dw[j];
      selected += prob[size_t(ex[j])];
      inner += double(prob[size_t(ex[j])]) * dw[j];
    }
    if (p.normalize) {  // w_j = p[e_j] / selected: dl[e_j] = w_j·(dw_j − Σ w_j'·dw_j'), 0 elsewhere
      std::fill(dl, dl + p.E, 0.0f);
      for (int64_t j = 0; j < p.k; ++j)
        if (validExpert(ex[j], p.E)) {
          const size_t e = size_t(ex[j]);
          dl[e] = static_cast<float>(prob[e] / selected * (g[e] - inner / selected));
        }
    } else {
      for (int64_t e = 0; e < p.E; ++e) dl[e] = static_cast<float>(prob[size_t(e)] * (g[size_t(e)] - inner));
    }
  }
}

void moeRouterStats(const float* logits, const int32_t* experts, const int32_t* counts, const float* probs,
                    int32_t* countsOut, float* probsOut, const MoeParams& p) {
  std::vector<int64_t> n(size_t(p.E), 0);
  for (int64_t i = 0; i < p.T * p.k; ++i)
    if (validExpert(experts[i], p.E)) ++n[size_t(experts[i])];
  std::vector<float> prob(size_t(p.E));
  std::vector<double> S(size_t(p.E), 0.0);
  for (int64_t t = 0; t < p.T; ++t) {
    softmaxRow(logits + t * p.E, prob.data(), p.E);
    for (int64_t e = 0; e < p.E; ++e) S[size_t(e)] += prob[size_t(e)];
  }
  for (int64_t e = 0; e < p.E; ++e) {
    countsOut[e] = int32_t(int64_t(counts[e]) + n[size_t(e)]);
    probsOut[e] = static_cast<float>(double(probs[e]) + S[size_t(e)]);
  }
}

void moeRouterStatsBackward(const float* logits, const float* dprobs, float* dlogits, const MoeParams& p) {
  std::vector<float> prob(size_t(p.E));
  for (int64_t t = 0; t < p.T; ++t) {
    softmaxRow(logits + t * p.E, prob.data(), p.E);
    double pg = 0.0;  // Σ_e p[e]·g[e]
    for (int64_t e = 0; e < p.E; ++e) pg += double(prob[size_t(e)]) * dprobs[e];
    for (int64_t e = 0; e < p.E; ++e)
      dlogits[t * p.E + e] = static_cast<float>(double(prob[size_t(e)]) * (double(dprobs[e]) - pg));
  }
}

namespace {
// N = Σ_e counts[e]: every router's tokens, k assignments each.
double assignments(const int32_t* counts, int64_t E) {
  double n = 0.0;
  for (int64_t e = 0; e < E; ++e) n += counts[e];
  return n;
}
}  // namespace

void moeAuxLoss(const int32_t* counts, const float* probs, float* loss, const MoeParams& p) {
  const double n = assignments(counts, p.E);
  if (n <= 0.0) return;
  double dot = 0.0;  // Σ_e counts[e]·probs[e]
  for (int64_t e = 0; e < p.E; ++e) dot += double(counts[e]) * probs[e];
  loss[0] = static_cast<float>(double(loss[0]) + p.scale * dot / (n * n));
}

void moeAuxLossBackward(const int32_t* counts, float* dprobs, const MoeParams& p) {
  const double n = assignments(counts, p.E);
  for (int64_t e = 0; e < p.E; ++e) dprobs[e] = n > 0.0 ? static_cast<float>(p.scale * counts[e] / (n * n)) : 0.0f;
}

Status moePermute(const float* x, const int32_t* experts, float* xp, int32_t* slots, int32_t* groupSizes,
                  const MoeParams& p) {
  const int64_t N = p.T * p.k, rows = moePermuteRows(p);
  const int64_t C = p.capacity > 0 ? p.capacity : N;  // dropless: no expert has more than T·k assignments
  std::vector<int64_t> n(size_t(p.E), 0);              // n[e]: the assignments to e
  for (int64_t i = 0; i < N; ++i) {
    if (!validExpert(experts[i], p.E)) return Status::invalidArgument(moePermuteExpertError(i / p.k, experts[i]));
    ++n[size_t(experts[i])];
  }
  std::vector<int64_t> next(size_t(p.E), 0), end(size_t(p.E), 0);  // expert e's next kept row, past its last
  int64_t kept = 0;
  for (int64_t e = 0; e < p.E; ++e) {
    const int64_t size = std::min(n[size_t(e)], C);
    groupSizes[e] = int32_t(size);
    next[size_t(e)] = kept;
    kept += size;
    end[size_t(e)] = kept;
  }
  for (int64_t i = 0; i < N; ++i) {  // i = t·k + j: t, then j order within each expert
    const size_t e = size_t(experts[i]);
    if (next[e] == end[e]) {  // over the capacity: dropped
      slots[i] = -1;
      continue;
    }
    const int64_t row = next[e]++;
    slots[i] = int32_t(row);
    std::memcpy(xp + row * p.H, x + (i / p.k) * p.H, size_t(p.H) * sizeof(float));
  }
  std::fill(xp + kept * p.H, xp + rows * p.H, 0.0f);
  return Status::ok();
}

namespace {
// Every slot in [-1, rows): else the op's error naming the first bad token.
Status checkSlots(const int32_t* slots, int64_t rows, const MoeParams& p, std::string_view op) {
  for (int64_t i = 0; i < p.T * p.k; ++i)
    if (slots[i] < -1 || slots[i] >= rows) return Status::invalidArgument(moeSlotError(op, i / p.k, slots[i]));
  return Status::ok();
}
}  // namespace

Status moeUnpermute(const float* xp, const int32_t* slots, const float* weights, float* y, const MoeParams& p) {
  LLCDIST_RETURN_IF_ERROR(checkSlots(slots, moeUnpermuteRows(p), p, "moe_unpermute"));
  for (int64_t t = 0; t < p.T; ++t) {
    float* yt = y + t * p.H;
    std::fill(yt, yt + p.H, 0.0f);
    for (int64_t j = 0; j < p.k; ++j) {
      const int64_t slot = slots[t * p.k + j];
      if (slot < 0) continue;  // dropped
      const float w = weights ? weights[t * p.k + j] : 1.0f;
      const float* row = xp + slot * p.H;
      for (int64_t h = 0; h < p.H; ++h) yt[h] += w * row[h];
    }
  }
  return Status::ok();
}

Status moeUnpermuteBackward(const float* dy, const float* xp, const int32_t* slots, const float* weights, float* dxp,
                            float* dweights, const MoeParams& p) {
  const int64_t N = p.T * p.k, rows = moeUnpermuteRows(p);
  LLCDIST_RETURN_IF_ERROR(checkSlots(slots, rows, p, "moe_unpermute_bwd"));
  std::vector<char> hit(size_t(rows), 0);
  for (int64_t i = 0; i < N; ++i) {
    const int64_t slot = slots[i];
    const float* d = dy + (i / p.k) * p.H;
    if (slot < 0) {  // dropped
      dweights[i] = 0.0f;
      continue;
    }
    float* dx = dxp + slot * p.H;
    const float* row = xp + slot * p.H;
    const float w = weights[i];
    const bool first = !hit[size_t(slot)];  // a permutation writes each row once: w·dy itself
    double s = 0.0;
    for (int64_t h = 0; h < p.H; ++h) {
      s += double(d[h]) * row[h];
      dx[h] = first ? w * d[h] : dx[h] + w * d[h];
    }
    hit[size_t(slot)] = 1;
    dweights[i] = static_cast<float>(s);
  }
  for (int64_t r = 0; r < rows; ++r)
    if (!hit[size_t(r)]) std::fill(dxp + r * p.H, dxp + (r + 1) * p.H, 0.0f);
  return Status::ok();
}

namespace {
// Each expert's rows times its [O, K] weight, one GEMM per group: the forward x·Wᵀ ([rows, K] to
// [rows, O]) or the input gradient dy·W ([rows, O] to [rows, K]); the rows past the groups are zero.
void groupedRowsTimesWeight(const float* in, const float* w, const int32_t* groupSizes, float* out, const MoeParams& p,
                            bool forward) {
  const int64_t inWidth = forward ? p.K : p.O, outWidth = forward ? p.O : p.K;
  const std::vector<Group> g = groups(groupSizes, p.E, p.N);
  for (int64_t e = 0; e < p.E; ++e) {
    const Group& r = g[size_t(e)];
    if (r.rows == 0) continue;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, forward ? CblasTrans : CblasNoTrans, r.rows, outWidth, inWidth, 1.0f,
                in + r.off * inWidth, inWidth, w + e * p.O * p.K, p.K, 0.0f, out + r.off * outWidth, outWidth);
  }
  std::fill(out + groupedRows(g) * outWidth, out + p.N * outWidth, 0.0f);
}
}  // namespace

void groupedLinearForward(const float* x, const float* w, const int32_t* groupSizes, float* y, const MoeParams& p) {
  groupedRowsTimesWeight(x, w, groupSizes, y, p, /*forward=*/true);
}

void groupedLinearBackwardInput(const float* dy, const float* w, const int32_t* groupSizes, float* dx,
                                const MoeParams& p) {
  groupedRowsTimesWeight(dy, w, groupSizes, dx, p, /*forward=*/false);
}

void groupedLinearBackwardWeight(const float* dy, const float* x, const int32_t* groupSizes, float* dw,
                                 const MoeParams& p) {
  const std::vector<Group> g = groups(groupSizes, p.E, p.N);
  for (int64_t e = 0; e < p.E; ++e) {
    const Group& r = g[size_t(e)];
    float* dwe = dw + e * p.O * p.K;
    if (r.rows == 0) {
      if (!p.accumulate) std::fill(dwe, dwe + p.O * p.K, 0.0f);
      continue;
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, p.O, p.K, r.rows, 1.0f, dy + r.off * p.O, p.O, x + r.off * p.K,
                p.K, p.accumulate ? 1.0f : 0.0f, dwe, p.K);
  }
}

namespace {
float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }
}  // namespace

void sigmoidGateForward(const float* gate, const float* x, float* y, const MoeParams& p) {
  for (int64_t t = 0; t < p.T; ++t) {
    const float s = sigmoid(gate[t]);
    for (int64_t h = 0; h < p.H; ++h) y[t * p.H + h] = s * x[t * p.H + h];
  }
}

void sigmoidGateBackward(const float* dy, const float* gate, const float* x, float* dgate, float* dx,
                         const MoeParams& p) {
  for (int64_t t = 0; t < p.T; ++t) {
    const float s = sigmoid(gate[t]);
    double dot = 0.0;  // before dx, which may be dy, is written
    for (int64_t h = 0; h < p.H; ++h) dot += double(dy[t * p.H + h]) * x[t * p.H + h];
    dgate[t] = static_cast<float>(double(s) * (1.0 - double(s)) * dot);
    for (int64_t h = 0; h < p.H; ++h) dx[t * p.H + h] = s * dy[t * p.H + h];
  }
}

Status moeChunkTranspose(const float* x, const int32_t* splits, float* y, int32_t* colSizes, const MoeParams& p) {
  const int64_t R = p.r, C = p.c, N = p.N, H = p.H;
  int64_t total = 0;
  for (int64_t k = 0; k < R * C; ++k) {
    if (splits[k] < 0)
      return Status::invalidArgument("moe_chunk_transpose: splits[" + std::to_string(k) + "] (chunk (" +
                                     std::to_string(k / C) + ", " + std::to_string(k % C) +
                                     ")) is negative: " + std::to_string(splits[k]));
    total += splits[k];
  }
  if (total > N)
    return Status::invalidArgument("moe_chunk_transpose: the splits sum to " + std::to_string(total) +
                                   " rows but x and y hold N = " + std::to_string(N));
  // Each chunk's first row in row-major and in column-major order.
  std::vector<int64_t> rowMajor(size_t(R * C)), colMajor(size_t(R * C));
  int64_t at = 0;
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) rowMajor[size_t(i * C + j)] = at, at += splits[i * C + j];
  at = 0;
  for (int64_t j = 0; j < C; ++j)
    for (int64_t i = 0; i < R; ++i) colMajor[size_t(i * C + j)] = at, at += splits[i * C + j];
  const std::vector<int64_t>& from = p.inverse ? colMajor : rowMajor;
  const std::vector<int64_t>& to = p.inverse ? rowMajor : colMajor;
  for (int64_t k = 0; k < R * C; ++k)
    if (splits[k] > 0)
      std::memcpy(y + to[size_t(k)] * H, x + from[size_t(k)] * H, size_t(splits[k] * H) * sizeof(float));
  if (N > total) std::memset(y + total * H, 0, size_t((N - total) * H) * sizeof(float));
  if (colSizes)
    for (int64_t j = 0; j < C; ++j) {
      int64_t s = 0;
      for (int64_t i = 0; i < R; ++i) s += splits[i * C + j];
      colSizes[j] = int32_t(s);
    }
  return Status::ok();
}

// ---- CPU kernel-table entries (CpuKernels.h) -------------------------------------------------------

void registerCpuMoeKernels(CpuKernelTable& t) {
  using K = schema::OpKind;
  using P = MoeParams;
  using Ctx = CpuKernelContext;
  addCpuKernel<P>(t, K::kMoeRoute, [](const KernelCall& c, const P& p, const Ctx&) {
    moeRouteForward(c.F("logits"), c.F("weights"), c.I("experts"), p);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kMoeRouteBwd, [](const KernelCall& c, const P& p, const Ctx&) {
    moeRouteBackward(c.F("logits"), c.I("experts"), c.F("dweights"), c.F("dlogits"), p);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kMoeRouterStats, [](const KernelCall& c, const P& p, const Ctx&) {
    moeRouterStats(c.F("logits"), c.I("experts"), c.I("counts"), c.F("probs"), c.I("counts_out"), c.F("probs_out"), p);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kMoeRouterStatsBwd, [](const KernelCall& c, const P& p, const Ctx&) {
    moeRouterStatsBackward(c.F("logits"), c.F("dprobs"), c.F("dlogits"), p);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kMoeAuxLoss, [](const KernelCall& c, const P& p, const Ctx&) {
    moeAuxLoss(c.I("counts"), c.F("probs"), c.F("loss"), p);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kMoeAuxLossBwd, [](const KernelCall& c, const P& p, const Ctx&) {
    moeAuxLossBackward(c.I("counts"), c.F("dprobs"), p);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kMoePermute, [](const KernelCall& c, const P& p, const Ctx&) {
    return moePermute(c.F("x"), c.I("experts"), c.F("xp"), c.I("slots"), c.I("group_sizes"), p);
  });
  addCpuKernel<P>(t, K::kMoeUnpermute, [](const KernelCall& c, const P& p, const Ctx&) {
    return moeUnpermute(c.F("xp"), c.I("slots"), c.F("weights"), c.F("y"), p);
  });
  addCpuKernel<P>(t, K::kMoeUnpermuteBwd, [](const KernelCall& c, const P& p, const Ctx&) {
    return moeUnpermuteBackward(c.F("dy"), c.F("xp"), c.I("slots"), c.F("weights"), c.F("dxp"), c.F("dweights"), p);
  });
  addCpuKernel<P>(t, K::kGroupedLinearFwd, [](const KernelCall& c, const P& p, const Ctx&) {
    groupedLinearForward(c.F("x"), c.F("w"), c.I("group_sizes"), c.F("y"), p);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kGroupedLinearBwdInput, [](const KernelCall& c, const P& p, const Ctx&) {
    groupedLinearBackwardInput(c.F("dy"), c.F("w"), c.I("group_sizes"), c.F("dx"), p);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kGroupedLinearBwdWeight, [](const KernelCall& c, const P& p, const Ctx&) {
    groupedLinearBackwardWeight(c.F("dy"), c.F("x"), c.I("group_sizes"), c.F("dw"), p);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kSigmoidGateFwd, [](const KernelCall& c, const P& p, const Ctx&) {
    sigmoidGateForward(c.F("gate"), c.F("x"), c.F("y"), p);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kSigmoidGateBwd, [](const KernelCall& c, const P& p, const Ctx&) {
    sigmoidGateBackward(c.F("dy"), c.F("gate"), c.F("x"), c.F("dgate"), c.F("dx"), p);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kMoeChunkTranspose, [](const KernelCall& c, const P& p, const Ctx&) {
    return moeChunkTranspose(c.F("x"), c.I("splits"), c.F("y"), c.I("col_sizes"), p);
  });
}

}  // namespace llcdist::rt
