// Attention of a block of query rows against a block of key/value rows, causal by their global
// positions, and the merge of two partial results by their log-sum-exp: what context parallelism's
// ring attention runs at each step of the ring (issue #32; Kernels.h states the contract).
//
// Per (batch, query head) the [Sq, Sk] score block is one cblas_sgemm, as attentionForward's; the
// backward recomputes the probabilities from the final log-sum-exp of each query row (over every key
// of the sequence), so the blocks' contributions to dq, dk and dv add up to the whole attention's.
// A sliding window (AttentionBlock::window) narrows each row's visible keys to a range of the block's
// rows (attentionBlockKeyRange); without one the range is the prefix [0, n), the arithmetic unchanged.
// ALiBi's bias (AttentionBlock::alibi) is by global position, so the blocks add up to the whole row's.
#include "llcdist/runtime/KernelChecks.h"
#include "llcdist/runtime/Kernels.h"

#include "CpuKernels.h"

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
  LLCDIST_RETURN_IF_ERROR(checkAttentionWindow(a.window));
  LLCDIST_RETURN_IF_ERROR(checkAttentionAlibi(a.alibi, a.nh));
  if (a.Sq <= 0 || a.Sk <= 0) return Status::invalidArgument("attention block: Sq and Sk must be positive");
  return checkAttentionBlockPositions(a.qPositions(), a.Sq, a.kvPositions(), a.Sk);
}

// The query rows' visible keys (attentionBlockKeyRange), and whether any row sees a key.
std::vector<AttentionKeyRange> visibleKeyRanges(const AttentionBlock& a, bool* any) {
  std::vector<AttentionKeyRange> n(size_t(a.Sq));
  *any = false;
  for (int64_t i = 0; i < a.Sq; ++i) {
    n[size_t(i)] = attentionBlockKeyRange(a, i);
    *any = *any || n[size_t(i)].end > n[size_t(i)].begin;
  }
  return n;
}

// The keys of the block at positions <= pos: a prefix of its rows (each run is increasing and the
// second follows the first), counted per run.
int64_t keysAtOrBefore(const AttentionBlock& a, int64_t pos) {
  const int64_t n1 = a.kvPositions().firstRows(a.Sk);
  const int64_t c1 = std::clamp<int64_t>(pos - a.kvStart + 1, 0, n1);
  if (c1 < n1) return c1;
  return n1 + std::clamp<int64_t>(pos - a.kvStart2 + 1, 0, a.Sk - n1);
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

// blockScores with ALiBi's bias slope · (key position − query position) on each row's visible keys.
void biasedBlockScores(const AttentionBlock& a, const BlockHead& v, int64_t h, const float* q, const float* k,
                       float scale, const std::vector<AttentionKeyRange>& visible, float* p) {
  blockScores(a, v, q, k, scale, p);
  if (!a.alibi.on()) return;
  const float slope = alibiSlope(a.alibi.heads, a.alibi.head0 + h);
  const PositionRuns qp = a.qPositions(), kp = a.kvPositions();
  for (int64_t i = 0; i < a.Sq; ++i) {
    const int64_t qpos = qp.at(i);
    float* row = p + i * a.Sk;
    for (int64_t j = visible[size_t(i)].begin; j < visible[size_t(i)].end; ++j)
      row[j] += slope * static_cast<float>(kp.at(j) - qpos);
  }
}

}  // namespace

AttentionBlock attentionBlock(const AttentionShape& s, const PositionRuns& q, const PositionRuns& kv) {
  return AttentionBlock{s.B,      s.S,     s.S,      s.nh,     s.nkv,     s.hd,     q.first,
                        kv.first, q.split, q.second, kv.split, kv.second, s.window, s.alibi};
}

// The keys at or before the query's position, less those at or before its position − window (a key
// is visible iff pos − window < kpos <= pos; positions are >= 0, so a window > pos masks none).
AttentionKeyRange attentionBlockKeyRange(const AttentionBlock& a, int64_t i) {
  const int64_t pos = a.qPositions().at(i);
  const int64_t end = keysAtOrBefore(a, pos);
  return {a.window > 0 && a.window <= pos ? keysAtOrBefore(a, pos - a.window) : 0, end};
}

int64_t attentionBlockVisibleKeys(const AttentionBlock& a, int64_t i) {
  const AttentionKeyRange r = attentionBlockKeyRange(a, i);
  return r.end - r.begin;
}

Status attentionBlockForward(const AttentionBlock& a, const float* q, const float* k, const float* v, float* out,
                             float* lse) {
  LLCDIST_RETURN_IF_ERROR(checkBlock(a));
  bool any = false;
  const std::vector<AttentionKeyRange> visible = visibleKeyRanges(a, &any);
  if (!any) {  // no query row sees a key of this block: the empty result, no arithmetic
    std::fill_n(out, a.B * a.Sq * a.nh * a.hd, 0.0f);
    std::fill_n(lse, a.B * a.nh * a.Sq, kNegInf);
    return Status::ok();
  }
  const float scale = attentionScale(a.hd);
  std::vector<float> p(size_t(a.Sq * a.Sk));
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t h = 0; h < a.nh; ++h) {
      const BlockHead hv = blockHead(a, b, h);
      biasedBlockScores(a, hv, h, q, k, scale, visible, p.data());
      float* lseRow = lse + (b * a.nh + h) * a.Sq;
      for (int64_t i = 0; i < a.Sq; ++i) {
        float* row = p.data() + i * a.Sk;
        const int64_t j0 = visible[size_t(i)].begin, n = visible[size_t(i)].end;
        if (n <= j0) {  // a row that sees no key of this block: nothing to merge
          std::fill(row, row + a.Sk, 0.0f);
          lseRow[i] = kNegInf;
          continue;
        }
        float mx = kNegInf;
        for (int64_t j = j0; j < n; ++j) mx = std::max(mx, row[j]);
        double sum = 0.0;
        for (int64_t j = j0; j < n; ++j) {
          row[j] = std::exp(row[j] - mx);
          sum += row[j];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = j0; j < n; ++j) row[j] *= inv;
        std::fill(row, row + j0, 0.0f);
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
  bool any = false;
  const std::vector<AttentionKeyRange> visible = visibleKeyRanges(a, &any);
  if (!any) return Status::ok();  // no query row sees a key of this block: nothing to add
  const float scale = attentionScale(a.hd);
  const int64_t Sq = a.Sq, Sk = a.Sk, hd = a.hd;
  std::vector<float> p(size_t(Sq * Sk)), dp(size_t(Sq * Sk));
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t h = 0; h < a.nh; ++h) {
      const BlockHead hv = blockHead(a, b, h);
      const float* lseRow = lse + (b * a.nh + h) * Sq;
      biasedBlockScores(a, hv, h, q, k, scale, visible, p.data());
      for (int64_t i = 0; i < Sq; ++i) {
        float* row = p.data() + i * Sk;
        const int64_t j0 = visible[size_t(i)].begin;
        const int64_t n = lseRow[i] == kNegInf ? j0 : std::max(j0, visible[size_t(i)].end);
        for (int64_t j = j0; j < n; ++j) row[j] = std::exp(row[j] - lseRow[i]);
        std::fill(row, row + j0, 0.0f);
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

// ---- CPU kernel-table entries (CpuKernels.h) -------------------------------------------------------

namespace {
AttentionBlock blockOf(const AttentionParams& p) { return attentionBlock(attentionShape(p), p.qPos, p.kvPos); }
}  // namespace

void registerCpuAttentionBlockKernels(CpuKernelTable& t) {
  using K = schema::OpKind;
  using P = AttentionParams;
  using Ctx = CpuKernelContext;
  addCpuKernel<P>(t, K::kAttentionBlockFwd, [](const KernelCall& c, const P& p, const Ctx&) {
    LLCDIST_RETURN_IF_ERROR(checkAttentionBlockElems(c, p));
    return attentionBlockForward(blockOf(p), c.F("q"), c.F("k"), c.F("v"), c.F("out"), c.F("lse"));
  });
  addCpuKernel<P>(t, K::kAttentionBlockBwd, [](const KernelCall& c, const P& p, const Ctx&) {
    LLCDIST_RETURN_IF_ERROR(checkAttentionBlockElems(c, p));
    return attentionBlockBackward(blockOf(p), c.F("dout"), c.F("q"), c.F("k"), c.F("v"), c.F("out"), c.F("lse"),
                                  c.F("dq"), c.F("dk"), c.F("dv"));
  });
  addCpuKernel<P>(t, K::kAttentionMerge, [](const KernelCall& c, const P& p, const Ctx&) -> Status {
    LLCDIST_RETURN_IF_ERROR(checkAttentionBlockElems(c, p));
    attentionMerge(p.B, p.S, p.nh, p.hd, c.F("out"), c.F("lse"), c.F("out_b"), c.F("lse_b"));
    return Status::ok();
  });
}

}  // namespace llcdist::rt
