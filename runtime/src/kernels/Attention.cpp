// Causal self-attention with grouped KV heads. See Kernels.h for the contract.
//
// Per (batch, query head) the S×S score block is one cblas_sgemm over strided rows of q/k (row stride
// nh·hd resp. nkv·hd, or (nh+2·nkv)·hd when they are packed in one buffer), so no transposes or copies
// are materialized. Backward recomputes the probabilities from
// the saved log-sum-exp (FlashAttention's recipe) and sums dk/dv over the heads of a group in head
// order, which keeps it deterministic. A sliding window (AttentionShape::window) masks the keys before
// each row's first (attentionFirstKey) as the causal mask masks those after it: the softmax loops run
// over the row's keys only, so without a window (or with one >= S) the arithmetic is the causal one.
// ALiBi (AttentionShape::alibi) adds its bias to the row's visible scores before the softmax, in the
// forward and in the backward's recomputation alike.
#include "llcdist/runtime/KernelChecks.h"
#include "llcdist/runtime/Kernels.h"

#include "CpuKernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace llcdist::rt {
namespace {

Status checkShape(const AttentionShape& s) {
  LLCDIST_RETURN_IF_ERROR(checkAttentionShape(s.B, s.S, s.nh, s.nkv, s.hd));
  LLCDIST_RETURN_IF_ERROR(checkAttentionAlibi(s.alibi, s.nh));
  return checkAttentionWindow(s.window);
}

// Where one (batch, query head) slice starts in each tensor, and the row strides: q, dq by their layouts,
// out, dout contiguous [B,S,nh,hd], its kv head g = h / (nh/nkv) in k, v and dk, dv.
struct HeadView {
  int64_t qOff, kvOff, oOff, dqOff, dkvOff;
  int64_t qStride, kvStride, oStride, dqStride, dkvStride;
};

HeadView headView(const AttentionShape& s, const QkvLayout& in, const QkvLayout& grad, int64_t b, int64_t h) {
  const int64_t g = h / (s.nh / s.nkv);
  return {b * s.S * in.qRow + h * s.hd,
          b * s.S * in.kvRow + g * s.hd,
          (b * s.S * s.nh + h) * s.hd,
          b * s.S * grad.qRow + h * s.hd,
          b * s.S * grad.kvRow + g * s.hd,
          in.qRow,
          in.kvRow,
          s.nh * s.hd,
          grad.qRow,
          grad.kvRow};
}

// scores[S,S] = scale · Q·Kᵀ for one head.
void scores(const AttentionShape& s, const HeadView& v, const float* q, const float* k, float scale, float* out) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.S, s.S, s.hd, scale, q + v.qOff, v.qStride, k + v.kvOff,
              v.kvStride, 0.0f, out, s.S);
}

// The scores of head h, with ALiBi's bias on each row's visible keys.
void biasedScores(const AttentionShape& s, const HeadView& v, int64_t h, const float* q, const float* k, float scale,
                  float* out) {
  scores(s, v, q, k, scale, out);
  if (!s.alibi.on()) return;
  const float slope = alibiSlope(s.alibi.heads, s.alibi.head0 + h);
  for (int64_t i = 0; i < s.S; ++i)  // the row's visible keys j (the window's first to i): slope · (j − i)
    for (int64_t j = attentionFirstKey(i, s.window); j <= i; ++j) out[i * s.S + j] += slope * static_cast<float>(j - i);
}

QkvLayout separate(const AttentionShape& s) { return qkvLayout(s.nh, s.nkv, s.hd, false); }

}  // namespace

Status attentionForward(const AttentionShape& s, const float* q, const float* k, const float* v, float* out,
                        float* lse) {
  return attentionForward(s, separate(s), q, k, v, out, lse);
}

Status attentionBackward(const AttentionShape& s, const float* dout, const float* q, const float* k, const float* v,
                         const float* out, const float* lse, float* dq, float* dk, float* dv) {
  return attentionBackward(s, separate(s), separate(s), dout, q, k, v, out, lse, dq, dk, dv);
}

Status attentionForward(const AttentionShape& s, const QkvLayout& in, const float* q, const float* k, const float* v,
                        float* out, float* lse) {
  LLCDIST_RETURN_IF_ERROR(checkShape(s));
  const float scale = attentionScale(s.hd);
  const int64_t S = s.S;
  std::vector<float> p(S * S);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.nh; ++h) {
      const HeadView hv = headView(s, in, in, b, h);
      biasedScores(s, hv, h, q, k, scale, p.data());
      float* lseRow = lse + (b * s.nh + h) * S;
      for (int64_t i = 0; i < S; ++i) {
        float* row = p.data() + i * S;
        const int64_t j0 = attentionFirstKey(i, s.window);  // 0 without a window
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = j0; j <= i; ++j) mx = std::max(mx, row[j]);
        double sum = 0.0;
        for (int64_t j = j0; j <= i; ++j) {
          row[j] = std::exp(row[j] - mx);
          sum += row[j];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = j0; j <= i; ++j) row[j] *= inv;
        std::fill(row, row + j0, 0.0f);         // the window
        std::fill(row + i + 1, row + S, 0.0f);  // causal mask
        lseRow[i] = mx + static_cast<float>(std::log(sum));
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, s.hd, S, 1.0f, p.data(), S, v + hv.kvOff, hv.kvStride,
                  0.0f, out + hv.oOff, hv.oStride);
    }
  return Status::ok();
}

Status attentionBackward(const AttentionShape& s, const QkvLayout& in, const QkvLayout& grad, const float* dout,
                         const float* q, const float* k, const float* v, const float* out, const float* lse, float* dq,
                         float* dk, float* dv) {
  LLCDIST_RETURN_IF_ERROR(checkShape(s));
  const float scale = attentionScale(s.hd);
  const int64_t S = s.S, hd = s.hd;
  for (int64_t r = 0; r < s.B * S; ++r)  // dk, dv accumulate over the heads of a group: zero their rows
    for (int64_t g = 0; g < s.nkv; ++g) {
      std::fill_n(dk + r * grad.kvRow + g * hd, hd, 0.0f);
      std::fill_n(dv + r * grad.kvRow + g * hd, hd, 0.0f);
    }
  std::vector<float> p(S * S), dp(S * S);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.nh; ++h) {
      const HeadView hv = headView(s, in, grad, b, h);
      const float* lseRow = lse + (b * s.nh + h) * S;
      biasedScores(s, hv, h, q, k, scale, p.data());
      for (int64_t i = 0; i < S; ++i) {
        float* row = p.data() + i * S;
        const int64_t j0 = attentionFirstKey(i, s.window);
        for (int64_t j = j0; j <= i; ++j) row[j] = std::exp(row[j] - lseRow[i]);
        std::fill(row, row + j0, 0.0f);
        std::fill(row + i + 1, row + S, 0.0f);
      }
      // dP = dO · Vᵀ
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, S, S, hd, 1.0f, dout + hv.oOff, hv.oStride, v + hv.kvOff,
                  hv.kvStride, 0.0f, dp.data(), S);
      // dS = P ∘ (dP - D), D_i = dO_i · O_i  (overwrites dp)
      for (int64_t i = 0; i < S; ++i) {
        const float* o = out + hv.oOff + i * hv.oStride;
        const float* d = dout + hv.oOff + i * hv.oStride;
        double D = 0.0;
        for (int64_t c = 0; c < hd; ++c) D += double(o[c]) * d[c];
        const float Df = static_cast<float>(D);
        float* row = dp.data() + i * S;
        const int64_t j0 = attentionFirstKey(i, s.window);
        for (int64_t j = j0; j <= i; ++j) row[j] = p[i * S + j] * (row[j] - Df);
        std::fill(row, row + j0, 0.0f);
        std::fill(row + i + 1, row + S, 0.0f);
      }
      // dQ = scale · dS · K;  dK += scale · dSᵀ · Q;  dV += Pᵀ · dO
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, hd, S, scale, dp.data(), S, k + hv.kvOff, hv.kvStride,
                  0.0f, dq + hv.dqOff, hv.dqStride);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, S, hd, S, scale, dp.data(), S, q + hv.qOff, hv.qStride, 1.0f,
                  dk + hv.dkvOff, hv.dkvStride);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, S, hd, S, 1.0f, p.data(), S, dout + hv.oOff, hv.oStride,
                  1.0f, dv + hv.dkvOff, hv.dkvStride);
    }
  return Status::ok();
}

// ---- CPU kernel-table entries (CpuKernels.h) -------------------------------------------------------

void registerCpuAttentionKernels(CpuKernelTable& t) {
  using K = schema::OpKind;
  using P = AttentionParams;
  using Ctx = CpuKernelContext;
  addCpuKernel<P>(t, K::kAttentionFwd, [](const KernelCall& c, const P& p, const Ctx&) {
    LLCDIST_RETURN_IF_ERROR(checkAttentionElems(c, p));
    const AttentionArgs a = attentionArgs(c, p);
    return attentionForward(attentionShape(p), a.in, a.qF(), a.kF(), a.vF(), c.F("out"), c.F("lse"));
  });
  addCpuKernel<P>(t, K::kAttentionBwd, [](const KernelCall& c, const P& p, const Ctx&) {
    LLCDIST_RETURN_IF_ERROR(checkAttentionElems(c, p));
    const AttentionArgs a = attentionArgs(c, p);
    return attentionBackward(attentionShape(p), a.in, a.grad, c.F("dout"), a.qF(), a.kF(), a.vF(), c.F("out"),
                             c.F("lse"), a.dqF(), a.dkF(), a.dvF());
  });
}

}  // namespace llcdist::rt
