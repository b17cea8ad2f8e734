// The attention tests' independent reference (SlidingWindowAttentionTest, AlibiAttentionTest): causal
// attention with Mistral's sliding window and BLOOM's ALiBi, written in double from the definitions
// (nothing shared with the kernels: the slopes as transformers' build_alibi_tensor computes them), and
// the CPU kernels run on separate or packed q, k, v.
#pragma once

#include "llcdist/runtime/Kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
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

}  // namespace llcdist::rt::testing
