// Attention of a block of query rows against a block of key/value rows, causal by their global
// positions, and the merge of two partial results by their log-sum-exp: what context parallelism's
// ring attention runs at each step of the ring (issue #32; Kernels.h states the contract).
//
// Per (batch, query head) the [Sq, Sk] score block is one cblas_sgemm, as attentionForward's; the
// backward recomputes the probabilities from the final log-sum-exp of each query row (over every key
// of the sequence), so the blocks' contributions to dq, dk and dv add up to the whole attention's.
#include "llcdist/runtime/KernelChecks.h"
#include "llcdist/runtime/Kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace llcdist::rt {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

Status checkBlock(const AttentionBlock& a) {
  LLCDIST_RETURN_IF_ERROR(checkAttentionShape(a.B, std::max<int64_t>(a.Sq, a.Sk), a.nh, a.nkv, a.hd));
  if (a.Sq <= 0 || a.Sk <= 0) return Status::invalidArgument("attention block: Sq and Sk must be positive");
  if (a.qStart < 0 || a.kvStart < 0)
    return Status::invalidArgument("attention block: qStart and kvStart must be positions (>= 0)");
  return Status::ok();
}

// The keys query row i sees: [0, visibleKeys) (key position kvStart + j <= query position qStart + i).
int64_t visibleKeys(const AttentionBlock& a, int64_t i) {
  return std::clamp<int64_t>(a.qStart + i - a.kvStart + 1, 0, a.Sk);
}

// One (batch, query head): where it starts in q/out ([B,Sq,nh,hd]) and in k/v ([B,Sk,nkv,hd]).
struct BlockHead {
  int64_t qOff, kvOff, qStride, kvStride;
};
BlockHead blockHead(const AttentionBlock& a, int64_t b, int64_t h) {
  const int64_t g = h / (a.nh / a.nkv);
  return {(b * a.Sq * a.nh + h) * a.hd, (b * a.Sk * a.nkv + g) * a.hd, a.nh * a.hd, a.nkv * a.hd};
}

// p[Sq,Sk] = scale · Q·Kᵀ for one head.
void blockScores(const AttentionBlock& a, const BlockHead& v, const float* q, const float* k, float scale, float* p) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, a.Sq, a.Sk, a.hd, scale, q + v.qOff, v.qStride, k + v.kvOff,
              v.kvStride, 0.0f, p, a.Sk);
}

}  // namespace

Status attentionBlockForward(const AttentionBlock& a, const float* q, const float* k, const float* v, float* out,
                             float* lse) {
  LLCDIST_RETURN_IF_ERROR(checkBlock(a));
  const float scale = attentionScale(a.hd);
  std::vector<float> p(size_t(a.Sq * a.Sk));
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t h = 0; h < a.nh; ++h) {
      const BlockHead hv = blockHead(a, b, h);
      blockScores(a, hv, q, k, scale, p.data());
      float* lseRow = lse + (b * a.nh + h) * a.Sq;
      for (int64_t i = 0; i < a.Sq; ++i) {
        float* row = p.data() + i * a.Sk;
        const int64_t n = visibleKeys(a, i);
        if (n == 0) {  // a row that sees no key of this block: nothing to merge
          std::fill(row, row + a.Sk, 0.0f);
          lseRow[i] = kNegInf;
          continue;
        }
        float mx = kNegInf;
        for (int64_t j = 0; j < n; ++j) mx = std::max(mx, row[j]);
        double sum = 0.0;
        for (int64_t j = 0; j < n; ++j) {
          row[j] = std::exp(row[j] - mx);
          sum += row[j];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j < n; ++j) row[j] *= inv;
        std::fill(row + n, row + a.Sk, 0.0f);
        lseRow[i] = mx + static_cast<float>(std::log(sum));
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, a.Sq, a.hd, a.Sk, 1.0f, p.data(), a.Sk, v + hv.kvOff,
                  hv.kvStride, 0.0f, out + hv.qOff, hv.qStride);
    }
  return Status::ok();
}

void attentionMerge(int64_t B, int64_t Sq, int64_t nh, int64_t hd, float* out, float* lse, const float* outB,
                    const float* lseB) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        const int64_t l = (b * nh + h) * Sq + i;
        const float l1 = lse[l], l2 = lseB[l];
        float* o = out + ((b * Sq + i) * nh + h) * hd;
        const float* ob = outB + ((b * Sq + i) * nh + h) * hd;
        if (l2 == kNegInf) continue;  // the other block saw no key of this row
        if (l1 == kNegInf) {
          std::copy(ob, ob + hd, o);
          lse[l] = l2;
          continue;
        }
        const double m = std::max(l1, l2);
        const double e1 = std::exp(double(l1) - m), e2 = std::exp(double(l2) - m);
        const double w1 = e1 / (e1 + e2), w2 = e2 / (e1 + e2);
        for (int64_t c = 0; c < hd; ++c) o[c] = static_cast<float>(w1 * o[c] + w2 * ob[c]);
        lse[l] = static_cast<float>(m + std::log(e1 + e2));
      }
}

Status attentionBlockBackward(const AttentionBlock& a, const float* dout, const float* q, const float* k,
                              const float* v, const float* out, const float* lse, float* dq, float* dk, float* dv) {
  LLCDIST_RETURN_IF_ERROR(checkBlock(a));
  const float scale = attentionScale(a.hd);
  const int64_t Sq = a.Sq, Sk = a.Sk, hd = a.hd;
  std::vector<float> p(size_t(Sq * Sk)), dp(size_t(Sq * Sk));
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t h = 0; h < a.nh; ++h) {
      const BlockHead hv = blockHead(a, b, h);
      const float* lseRow = lse + (b * a.nh + h) * Sq;
      blockScores(a, hv, q, k, scale, p.data());
      for (int64_t i = 0; i < Sq; ++i) {
        float* row = p.data() + i * Sk;
        const int64_t n = lseRow[i] == kNegInf ? 0 : visibleKeys(a, i);
        for (int64_t j = 0; j < n; ++j) row[j] = std::exp(row[j] - lseRow[i]);
        std::fill(row + n, row + Sk, 0.0f);
      }
      // dP = dO · Vᵀ; dS = P ∘ (dP - D), D_i = dO_i · O_i with the final O (the whole row's softmax).
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Sq, Sk, hd, 1.0f, dout + hv.qOff, hv.qStride, v + hv.kvOff,
                  hv.kvStride, 0.0f, dp.data(), Sk);
      for (int64_t i = 0; i < Sq; ++i) {
        const float* o = out + hv.qOff + i * hv.qStride;
        const float* d = dout + hv.qOff + i * hv.qStride;
        double D = 0.0;
        for (int64_t c = 0; c < hd; ++c) D += double(o[c]) * d[c];
        const float Df = static_cast<float>(D);
        float* row = dp.data() + i * Sk;
        for (int64_t j = 0; j < Sk; ++j) row[j] = p[size_t(i * Sk + j)] * (row[j] - Df);
      }
      // dQ += scale · dS · K;  dK += scale · dSᵀ · Q;  dV += Pᵀ · dO
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Sq, hd, Sk, scale, dp.data(), Sk, k + hv.kvOff,
                  hv.kvStride, 1.0f, dq + hv.qOff, hv.qStride);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Sk, hd, Sq, scale, dp.data(), Sk, q + hv.qOff, hv.qStride,
                  1.0f, dk + hv.kvOff, hv.kvStride);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Sk, hd, Sq, 1.0f, p.data(), Sk, dout + hv.qOff, hv.qStride,
                  1.0f, dv + hv.kvOff, hv.kvStride);
    }
  return Status::ok();
}

}  // namespace llcdist::rt
