// The attention tests' independent reference (SlidingWindowAttentionTest, AlibiAttentionTest): causal
// attention with Mistral's sliding window and BLOOM's ALiBi, written in double from the definitions
// (nothing shared with the kernels: the slopes as transformers' build_alibi_tensor computes them), and
// the CPU kernels run on separate or packed q, k, v.
#pragma once

#include "PositionRowsUtil.h"
#include "TestUtil.h"

#include "llcdist/runtime/Kernels.h"
#include "llcdist/runtime/Positions.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace llcdist::rt::testing {

// Key position j is visible to query position i: causal, within the window (0: none).
inline bool sees(int64_t i, int64_t j, int64_t window) { return j <= i && (window == 0 || i - j < window); }

// transformers 4.40's build_alibi_tensor (models/bloom/modeling_bloom.py): the slopes of n heads, step by
// step in double.
inline std::vector<double> transformersAlibiSlopes(int64_t n) {
  const int64_t p = int64_t(1) << int64_t(std::floor(std::log2(double(n))));
  const double base = std::pow(2.0, -std::pow(2.0, -(std::log2(double(p)) - 3)));
  std::vector<double> s;
  for (int64_t k = 1; k <= p; ++k) s.push_back(std::pow(base, double(k)));
  if (p != n) {
    const double extra = std::pow(2.0, -std::pow(2.0, -(std::log2(double(2 * p)) - 3)));
    const int64_t rest = std::min(p, n - p);
    for (int64_t k = 1; k < 1 + 2 * rest; k += 2) s.push_back(std::pow(extra, double(k)));
  }
  return s;
}

struct AttentionReference {
  std::vector<double> out, lse, dq, dk, dv;
};

// Per (b, h, i): the scaled scores of the visible keys plus ALiBi's slope(h) · (j − i), their softmax P,
// out = Σ P v, lse = log Σ exp; then dP = dO·v, dS = P ∘ (dP − Σ_j P dP), dq = scale·Σ dS k,
// dk += scale·dS q, dv += P dO (kv head h/(nh/nkv)).
inline AttentionReference bruteForceAttention(const AttentionShape& s, const std::vector<float>& q,
                                              const std::vector<float>& k, const std::vector<float>& v,
                                              const std::vector<float>& dout) {
  AttentionReference r;
  r.out.assign(size_t(s.B * s.S * s.nh * s.hd), 0.0);
  r.dq = r.out;
  r.lse.assign(size_t(s.B * s.nh * s.S), 0.0);
  r.dk.assign(size_t(s.B * s.S * s.nkv * s.hd), 0.0);
  r.dv = r.dk;
  const double scale = 1.0 / std::sqrt(double(s.hd));
  const std::vector<double> slopes = s.alibi.on() ? transformersAlibiSlopes(s.alibi.heads) : std::vector<double>();
  auto qi = [&](int64_t b, int64_t i, int64_t h) { return size_t(((b * s.S + i) * s.nh + h) * s.hd); };
  auto kj = [&](int64_t b, int64_t j, int64_t g) { return size_t(((b * s.S + j) * s.nkv + g) * s.hd); };
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.nh; ++h)
      for (int64_t i = 0; i < s.S; ++i) {
        const int64_t g = h / (s.nh / s.nkv);
        const double slope = s.alibi.on() ? slopes[size_t(s.alibi.head0 + h)] : 0.0;
        std::vector<double> p(size_t(s.S), 0.0), dp(size_t(s.S), 0.0);
        double mx = -INFINITY;
        for (int64_t j = 0; j < s.S; ++j) {
          if (!sees(i, j, s.window)) continue;
          double d = 0;
          for (int64_t c = 0; c < s.hd; ++c) d += double(q[qi(b, i, h) + c]) * double(k[kj(b, j, g) + c]);
          p[size_t(j)] = scale * d + slope * double(j - i);
          mx = std::max(mx, p[size_t(j)]);
        }
        double sum = 0;
        for (int64_t j = 0; j < s.S; ++j)
          if (sees(i, j, s.window)) sum += std::exp(p[size_t(j)] - mx);
        r.lse[size_t((b * s.nh + h) * s.S + i)] = mx + std::log(sum);
        double pdp = 0;
        for (int64_t j = 0; j < s.S; ++j) {
          if (!sees(i, j, s.window)) continue;
          p[size_t(j)] = std::exp(p[size_t(j)] - mx) / sum;
          for (int64_t c = 0; c < s.hd; ++c) {
            r.out[qi(b, i, h) + c] += p[size_t(j)] * double(v[kj(b, j, g) + c]);
            dp[size_t(j)] += double(dout[qi(b, i, h) + c]) * double(v[kj(b, j, g) + c]);
          }
          pdp += p[size_t(j)] * dp[size_t(j)];
        }
        for (int64_t j = 0; j < s.S; ++j) {
          if (!sees(i, j, s.window)) continue;
          const double dS = p[size_t(j)] * (dp[size_t(j)] - pdp);
          for (int64_t c = 0; c < s.hd; ++c) {
            r.dq[qi(b, i, h) + c] += scale * dS * double(k[kj(b, j, g) + c]);
            r.dk[kj(b, j, g) + c] += scale * dS * double(q[qi(b, i, h) + c]);
            r.dv[kj(b, j, g) + c] += p[size_t(j)] * double(dout[qi(b, i, h) + c]);
          }
        }
      }
  return r;
}

struct AttentionResult {
  std::vector<float> out, lse, dq, dk, dv;
};

// The kernels' forward and backward, q, k, v (and dq, dk, dv) separate or packed in one buffer.
inline AttentionResult runAttentionKernels(const AttentionShape& s, bool packed, const std::vector<float>& q,
                                           const std::vector<float>& k, const std::vector<float>& v,
                                           const std::vector<float>& dout) {
  AttentionResult r;
  r.out.assign(q.size(), 0.0f);
  r.lse.assign(size_t(s.B * s.nh * s.S), 0.0f);
  r.dq.assign(q.size(), 0.0f);
  r.dk.assign(k.size(), 0.0f);
  r.dv.assign(v.size(), 0.0f);
  if (!packed) {
    EXPECT_TRUE(attentionForward(s, q.data(), k.data(), v.data(), r.out.data(), r.lse.data()).isOk());
    EXPECT_TRUE(attentionBackward(s, dout.data(), q.data(), k.data(), v.data(), r.out.data(), r.lse.data(), r.dq.data(),
                                  r.dk.data(), r.dv.data())
                    .isOk());
    return r;
  }
  const QkvLayout L = qkvLayout(s.nh, s.nkv, s.hd, true);
  const int64_t rows = s.B * s.S, qw = s.nh * s.hd, kw = s.nkv * s.hd;
  std::vector<float> qkv(size_t(rows * L.qRow)), dqkv(qkv.size(), std::numeric_limits<float>::quiet_NaN());
  for (int64_t t = 0; t < rows; ++t) {
    std::copy_n(q.data() + t * qw, qw, qkv.data() + t * L.qRow + L.qOffset);
    std::copy_n(k.data() + t * kw, kw, qkv.data() + t * L.qRow + L.kOffset);
    std::copy_n(v.data() + t * kw, kw, qkv.data() + t * L.qRow + L.vOffset);
  }
  const float* in = qkv.data();
  EXPECT_TRUE(
      attentionForward(s, L, in + L.qOffset, in + L.kOffset, in + L.vOffset, r.out.data(), r.lse.data()).isOk());
  EXPECT_TRUE(attentionBackward(s, L, L, dout.data(), in + L.qOffset, in + L.kOffset, in + L.vOffset, r.out.data(),
                                r.lse.data(), dqkv.data() + L.qOffset, dqkv.data() + L.kOffset, dqkv.data() + L.vOffset)
                  .isOk());
  for (int64_t t = 0; t < rows; ++t) {
    std::copy_n(dqkv.data() + t * L.qRow + L.qOffset, qw, r.dq.data() + t * qw);
    std::copy_n(dqkv.data() + t * L.qRow + L.kOffset, kw, r.dk.data() + t * kw);
    std::copy_n(dqkv.data() + t * L.qRow + L.vOffset, kw, r.dv.data() + t * kw);
  }
  return r;
}

// The kernels' forward and backward (runAttentionKernels) against the brute force on the same inputs:
// out and lse within 1e-5, the gradients within 1e-5 absolute or 1e-4 relative. Returns the kernels'.
inline AttentionResult expectKernelsMatchTheBruteForce(const AttentionShape& s, bool packed,
                                                       const std::vector<float>& q, const std::vector<float>& k,
                                                       const std::vector<float>& v, const std::vector<float>& dout) {
  const AttentionResult got = runAttentionKernels(s, packed, q, k, v, dout);
  const AttentionReference want = bruteForceAttention(s, q, k, v, dout);
  expectAllClose(got.out, want.out, 1e-5, 1e-5, "out");
  expectAllClose(got.lse, want.lse, 1e-5, 1e-5, "lse");
  expectAllClose(got.dq, want.dq, 1e-5, 1e-4, "dq");
  expectAllClose(got.dk, want.dk, 1e-5, 1e-4, "dk");
  expectAllClose(got.dv, want.dv, 1e-5, 1e-4, "dv");
  return got;
}

// Every rank's ring of cp n under `layout` over `whole`'s T rows (random q, k, v, dout from `seed`): the
// blocks of each rank (attentionBlock of its S = T/n rows, the shape's window and ALiBi) merged by
// attentionMerge give the whole sequence's out and lse, and their backward shares add up to its dq, dk,
// dv. *emptyBlocks (when not null) gets the number of blocks in which no row saw a key.
inline void expectRingIsTheWholeAttention(const AttentionShape& whole, int64_t n, CpLayout layout, uint32_t seed,
                                          int64_t* emptyBlocks = nullptr) {
  const int64_t B = whole.B, T = whole.S, S = T / n, nh = whole.nh, hd = whole.hd, qw = nh * hd, kw = whole.nkv * hd;
  AttentionShape local = whole;
  local.S = S;
  const std::vector<float> q = randn(B * T * qw, seed), k = randn(B * T * kw, seed + 1),
                           v = randn(B * T * kw, seed + 2), dout = randn(B * T * qw, seed + 3);
  std::vector<float> out(q.size()), lse(size_t(B * nh * T)), dq(q.size()), dk(k.size()), dv(v.size());
  ASSERT_TRUE(attentionForward(whole, q.data(), k.data(), v.data(), out.data(), lse.data()).isOk());
  ASSERT_TRUE(attentionBackward(whole, dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), dq.data(),
                                dk.data(), dv.data())
                  .isOk());
  std::vector<double> ringDq(dq.size(), 0.0), ringDk(dk.size(), 0.0), ringDv(dv.size(), 0.0);
  int64_t empty = 0;
  for (int64_t c = 0; c < n; ++c) {
    SCOPED_TRACE("rank " + std::to_string(c));
    const PositionRuns qPos = contextParallelPositions(T, n, c, layout);
    const std::vector<float> qL = rowsAt(q, B, T, qw, qPos, S), doL = rowsAt(dout, B, T, qw, qPos, S);
    std::vector<float> o(qL.size(), 0.0f), l(size_t(B * nh * S), -INFINITY);
    for (int64_t step = 0; step < n; ++step) {
      const PositionRuns kvPos = contextParallelPositions(T, n, (c - step + n) % n, layout);
      const AttentionBlock blk = attentionBlock(local, qPos, kvPos);
      ASSERT_EQ(blk.window, whole.window);
      ASSERT_EQ(blk.alibi.head0, whole.alibi.head0);
      std::vector<float> ob(qL.size(), 7.0f), lb(l.size(), 7.0f);
      ASSERT_TRUE(attentionBlockForward(blk, qL.data(), rowsAt(k, B, T, kw, kvPos, S).data(),
                                        rowsAt(v, B, T, kw, kvPos, S).data(), ob.data(), lb.data())
                      .isOk());
      empty += std::all_of(lb.begin(), lb.end(), [](float x) { return x == -INFINITY; });
      attentionMerge(B, S, nh, hd, o.data(), l.data(), ob.data(), lb.data());
    }
    expectAllClose(o, rowsAt(out, B, T, qw, qPos, S), 1e-5, 1e-5, "out");
    expectAllClose(l, colsAt(lse, B * nh, T, qPos, S), 1e-5, 1e-5, "lse");
    std::vector<float> dqL(qL.size(), 0.0f);
    for (int64_t step = 0; step < n; ++step) {
      const PositionRuns kvPos = contextParallelPositions(T, n, (c - step + n) % n, layout);
      std::vector<float> dkB(size_t(B * S * kw), 0.0f), dvB(dkB.size(), 0.0f);
      ASSERT_TRUE(attentionBlockBackward(attentionBlock(local, qPos, kvPos), doL.data(), qL.data(),
                                         rowsAt(k, B, T, kw, kvPos, S).data(), rowsAt(v, B, T, kw, kvPos, S).data(),
                                         o.data(), l.data(), dqL.data(), dkB.data(), dvB.data())
                      .isOk());
      addRowsAt(ringDk, dkB, B, T, kw, kvPos, S);
      addRowsAt(ringDv, dvB, B, T, kw, kvPos, S);
    }
    addRowsAt(ringDq, dqL, B, T, qw, qPos, S);
  }
  expectAllClose(dq, ringDq, 1e-5, 1e-5, "dq");
  expectAllClose(dk, ringDk, 1e-5, 1e-5, "dk");
  expectAllClose(dv, ringDv, 1e-5, 1e-5, "dv");
  if (emptyBlocks) *emptyBlocks = empty;
}

}  // namespace llcdist::rt::testing
