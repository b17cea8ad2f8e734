// How the plan's attention is handed to cuDNN's SDPA graphs (cuda/host/AttentionPlan.h), checked on the
// CPU: the [b,h,s,d] dims and strides of every tensor against an independent index computation on our
// row-major buffers, and numerically: an attention forward and backward computed only through those
// layouts, with cuDNN's semantics (query head h reads kv head h / (nh/nkv), dK and dV summed over the
// query heads of a group, Stats = natural-log lse), equals the CPU reference kernels (Kernels.h) on the
// same buffers. What cuDNN is handed is exactly such a description, so this proves the mapping without a
// GPU. The same with a sliding window (AttentionParams::window) against the mask the frontend builds from
// the diagonal band's left bound (col + left_bound > row, with right bound 0: row >= col). Also the graph
// cache key (every field distinguishes), the support reasons, the element counts, the pointer check, the
// FLOP convention, and the backend's choice of cuDNN for a windowed attention (KernelVariants.h).
#include "llcdist/runtime/Kernels.h"

#include "cuda/host/AttentionPlan.h"
#include "cuda/host/KernelVariants.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

namespace llcdist::rt::cuda {
namespace {

using T = AttentionTensor;
// EXPECT that `haystack` contains `needle`, printing both when not.
#define EXPECT_CONTAINS(haystack, needle)                                                     \
  do {                                                                                        \
    const std::string llcdist_h_ = (haystack);                                                \
    EXPECT_NE(llcdist_h_.find(needle), std::string::npos) << "\"" << llcdist_h_ << "\" lacks \"" << (needle) << "\""; \
  } while (0)

AttentionProblem problem(int64_t B, int64_t S, int64_t nh, int64_t nkv, int64_t hd, bool backward = false,
                         bool deterministic = false, int64_t window = 0) {
  AttentionParams params{B, S, nh, nkv, hd};
  params.window = window;
  return attentionProblem(params, backward, deterministic);
}

std::vector<float> random(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(gen);
  return v;
}

// The offset the layout gives element (b, h, s, d).
int64_t at(const AttentionLayout& l, int64_t b, int64_t h, int64_t s, int64_t d) {
  return b * l.stride[0] + h * l.stride[1] + s * l.stride[2] + d * l.stride[3];
}

void expectClose(const std::vector<float>& got, const std::vector<float>& want, double atol, double rtol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::fabs(double(got[i]) - double(want[i])) <= atol + rtol * std::fabs(double(want[i]));
    if (!ok && bad++ < 5) ADD_FAILURE() << what << "[" << i << "]: through strides " << got[i] << " vs cpu " << want[i];
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " differ";
}

// ---- Problem --------------------------------------------------------------------------------------------

TEST(AttentionPlanProblemTest, FromParams) {
  const AttentionProblem f = problem(2, 7, 8, 2, 64, /*backward=*/false, /*deterministic=*/true);
  EXPECT_EQ(f.B, 2);
  EXPECT_EQ(f.S, 7);
  EXPECT_EQ(f.nh, 8);
  EXPECT_EQ(f.nkv, 2);
  EXPECT_EQ(f.hd, 64);
  EXPECT_FALSE(f.backward);
  EXPECT_FALSE(f.deterministic) << "the forward graph is shared by both settings";
  EXPECT_EQ(f.scale, 0.125f);
  EXPECT_EQ(f.dtype, schema::ElemType::kBF16);
  const AttentionProblem b = problem(2, 7, 8, 2, 96, true, true);
  EXPECT_TRUE(b.backward);
  EXPECT_TRUE(b.deterministic);
  // The CPU reference's rounding of 1/sqrt(96), not a float sqrt.
  EXPECT_EQ(b.scale, static_cast<float>(1.0 / std::sqrt(96.0)));
  EXPECT_FALSE(problem(2, 7, 8, 2, 96, true, false).deterministic);
  EXPECT_EQ(attentionProblem(AttentionParams{1, 2, 2, 2, 8}, false, false, schema::ElemType::kF32).dtype,
            schema::ElemType::kF32);
}

// The window is the problem's (cuDNN's left bound); one >= S masks nothing and is dropped, so the problem
// (and its graph) is the plain causal one.
TEST(AttentionPlanProblemTest, WindowFromParams) {
  EXPECT_EQ(problem(2, 16, 4, 2, 64, false, false, 3).window, 3);
  EXPECT_EQ(problem(2, 16, 4, 2, 64, true, true, 15).window, 15);
  EXPECT_EQ(problem(2, 16, 4, 2, 64).window, 0);
  for (int64_t w : {16, 17, 4096}) {
    EXPECT_EQ(problem(2, 16, 4, 2, 64, true, false, w).window, 0) << w;
    EXPECT_TRUE(attentionKey(problem(2, 16, 4, 2, 64, true, false, w)) == attentionKey(problem(2, 16, 4, 2, 64, true)));
  }
  EXPECT_CONTAINS(describeAttention(problem(1, 8192, 32, 8, 128, false, false, 4096)), "causal window=4096");
  EXPECT_EQ(describeAttention(problem(1, 8, 2, 1, 8)).find("window"), std::string::npos);
}

TEST(AttentionPlanProblemTest, DescriptionNamesEveryField) {
  const std::string d = describeAttention(problem(4, 2048, 32, 8, 64, true, true));
  for (const char* part : {"backward", "B=4", "S=2048", "nh=32", "nkv=8", "hd=64", "bf16", "causal", "scale=0.125",
                           "deterministic"})
    EXPECT_CONTAINS(d, part);
  EXPECT_CONTAINS(describeAttention(problem(1, 2, 2, 1, 8)), "forward");
}

// ---- Key ------------------------------------------------------------------------------------------------

TEST(AttentionPlanKeyTest, EqualProblemsHaveEqualKeys) {
  const AttentionKey a = attentionKey(problem(2, 7, 8, 2, 64, true, true));
  const AttentionKey b = attentionKey(problem(2, 7, 8, 2, 64, true, true));
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a != b);
  EXPECT_FALSE(a < b);
  EXPECT_FALSE(b < a);
  EXPECT_EQ(AttentionKeyHash()(a), AttentionKeyHash()(b));
}

TEST(AttentionPlanKeyTest, EveryFieldDistinguishesKeys) {
  AttentionProblem base = problem(2, 7, 8, 2, 64, true, false);
  std::vector<std::function<void(AttentionProblem&)>> changes = {
      [](AttentionProblem& p) { p.B = 3; },
      [](AttentionProblem& p) { p.S = 8; },
      [](AttentionProblem& p) { p.nh = 16; },
      [](AttentionProblem& p) { p.nkv = 4; },
      [](AttentionProblem& p) { p.hd = 128; },
      [](AttentionProblem& p) { p.backward = false; },
      [](AttentionProblem& p) { p.deterministic = true; },
      [](AttentionProblem& p) { p.scale = std::nextafter(p.scale, 1.0f); },  // one ulp
      [](AttentionProblem& p) { p.dtype = schema::ElemType::kF32; },
      [](AttentionProblem& p) { p.packedQkv = true; },
      [](AttentionProblem& p) { p.packedGrad = true; },
      [](AttentionProblem& p) { p.window = 3; },
  };
  const AttentionKey k0 = attentionKey(base);
  std::set<AttentionKey> ordered{k0};
  std::unordered_set<AttentionKey, AttentionKeyHash> hashed{k0};
  for (size_t i = 0; i < changes.size(); ++i) {
    AttentionProblem p = base;
    changes[i](p);
    const AttentionKey k = attentionKey(p);
    EXPECT_FALSE(k == k0) << "change " << i;
    EXPECT_TRUE(k != k0) << "change " << i;
    EXPECT_TRUE(k < k0 || k0 < k) << "change " << i;
    EXPECT_NE(AttentionKeyHash()(k), AttentionKeyHash()(k0)) << "change " << i;
    ordered.insert(k);
    hashed.insert(k);
  }
  EXPECT_EQ(ordered.size(), changes.size() + 1);
  EXPECT_EQ(hashed.size(), changes.size() + 1);
}

// ---- Layouts --------------------------------------------------------------------------------------------

struct Shape {
  int64_t B, S, nh, nkv, hd;
};
void PrintTo(const Shape& s, std::ostream* os) {
  *os << "B" << s.B << "_S" << s.S << "_nh" << s.nh << "_nkv" << s.nkv << "_hd" << s.hd;
}
const Shape kShapes[] = {
    {2, 7, 4, 2, 8},   // GQA, B > 1, S odd
    {1, 5, 3, 3, 16},  // MHA
    {2, 4, 4, 1, 8},   // MQA
    {3, 9, 6, 2, 24},  // GQA with 3 query heads per kv head
};

class AttentionPlanLayoutTest : public ::testing::TestWithParam<Shape> {
protected:
  AttentionProblem p(bool backward = false, int64_t window = 0) const {
    const Shape& s = GetParam();
    return problem(s.B, s.S, s.nh, s.nkv, s.hd, backward, false, window);
  }
};

// The mask cuDNN applies to score (row i, column j), as the frontend 1.32 builds it
// (utils/attn_score_modifiers.h, sliding_window_mask, diagonal aligned top-left): the right bound 0 keeps
// row + 0 >= column, the left bound L (when set: the problem's window) keeps column + L > row.
bool cudnnKeeps(const AttentionProblem& p, int64_t i, int64_t j) {
  return i + 0 >= j && (p.window == 0 || j + p.window > i);
}
// The windows the layout tests run: none, one key, and one shorter than every shape's S.
constexpr int64_t kWindows[] = {0, 1, 3};

// Element (b, h, s, d) of each buffer sits where the strides say: q-shaped [B,S,nh,hd] and kv-shaped
// [B,S,nkv,hd] row-major, Stats [B,nh,S]; and the layout addresses every element of the buffer exactly
// once (no gap, no overlap).
TEST_P(AttentionPlanLayoutTest, StridesAddressOurRowMajorBuffers) {
  const AttentionProblem pr = p(true);
  const Shape& s = GetParam();
  for (T t : kAttentionTensors) {
    SCOPED_TRACE(attentionTensorName(t));
    const AttentionLayout l = attentionLayout(pr, t);
    const bool stats = t == T::kStats;
    const bool kv = t == T::kK || t == T::kV || t == T::kDK || t == T::kDV;
    const int64_t heads = kv ? s.nkv : s.nh, d = stats ? 1 : s.hd;
    EXPECT_EQ(l.dim[0], s.B);
    EXPECT_EQ(l.dim[1], heads);
    EXPECT_EQ(l.dim[2], s.S);
    EXPECT_EQ(l.dim[3], d);
    EXPECT_EQ(l.stride[3], 1) << "cuDNN needs the innermost stride 1";
    const int64_t elems = attentionElems(pr, t);
    EXPECT_EQ(elems, s.B * s.S * heads * d);
    std::vector<int> seen(static_cast<size_t>(elems), 0);
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < s.S; ++i)
          for (int64_t c = 0; c < d; ++c) {
            const int64_t want = stats ? (b * s.nh + h) * s.S + i : ((b * s.S + i) * heads + h) * s.hd + c;
            const int64_t got = at(l, b, h, i, c);
            ASSERT_EQ(got, want) << "(" << b << "," << h << "," << i << "," << c << ")";
            ++seen[size_t(got)];
          }
    for (size_t o = 0; o < seen.size(); ++o) ASSERT_EQ(seen[o], 1) << "offset " << o;
  }
}

// Packed (attention's qkv / dqkv roles): Q, K, V (and dQ, dK, dV), each addressed from its own first
// element (QkvLayout's offsets), together address every element of the one [B,S,nh+2·nkv,hd] buffer
// exactly once, head h of q at (b·S + s)·(nh+2·nkv)·hd + h·hd, k's after q's, v's after k's; O, dO and
// Stats keep their layouts.
TEST_P(AttentionPlanLayoutTest, PackedStridesAddressOnePackedBuffer) {
  const Shape& s = GetParam();
  AttentionProblem pr = p(true);
  pr.packedQkv = pr.packedGrad = true;
  const QkvLayout packed = qkvLayout(s.nh, s.nkv, s.hd, true);
  const int64_t row = (s.nh + 2 * s.nkv) * s.hd;
  for (bool grads : {false, true}) {
    const T parts[3] = {grads ? T::kDQ : T::kQ, grads ? T::kDK : T::kK, grads ? T::kDV : T::kV};
    const int64_t offsets[3] = {packed.qOffset, packed.kOffset, packed.vOffset};
    std::vector<int> seen(size_t(s.B * s.S * row), 0);
    for (int part = 0; part < 3; ++part) {
      SCOPED_TRACE(attentionTensorName(parts[part]));
      const AttentionLayout l = attentionLayout(pr, parts[part]);
      const int64_t heads = part == 0 ? s.nh : s.nkv, first = part == 0 ? 0 : part == 1 ? s.nh : s.nh + s.nkv;
      EXPECT_EQ(l.dim[1], heads);
      EXPECT_EQ(attentionElems(pr, parts[part]), (s.B * s.S - 1) * row + heads * s.hd);  // v's ends the buffer
      for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t i = 0; i < s.S; ++i)
            for (int64_t c = 0; c < s.hd; ++c) {
              const int64_t got = offsets[part] + at(l, b, h, i, c);
              ASSERT_EQ(got, (b * s.S + i) * row + (first + h) * s.hd + c);
              ++seen[size_t(got)];
            }
    }
    for (size_t o = 0; o < seen.size(); ++o) ASSERT_EQ(seen[o], 1) << "offset " << o;
  }
  for (T t : {T::kO, T::kDO, T::kStats}) {
    SCOPED_TRACE(attentionTensorName(t));
    const AttentionLayout l = attentionLayout(pr, t), unpacked = attentionLayout(p(true), t);
    EXPECT_EQ(l.stride, unpacked.stride);
  }
  // A forward problem never carries packedGrad (its graph is shared).
  AttentionParams params{s.B, s.S, s.nh, s.nkv, s.hd, true, true};
  EXPECT_TRUE(attentionProblem(params, false, false).packedQkv);
  EXPECT_FALSE(attentionProblem(params, false, false).packedGrad);
  EXPECT_TRUE(attentionProblem(params, true, false).packedGrad);
}

// An attention forward computed only through the layouts with cuDNN's semantics (double precision,
// two passes) equals Kernels.h's attentionForward on our buffers: out and lse (natural log).
TEST_P(AttentionPlanLayoutTest, ForwardThroughLayoutsMatchesCpuKernel) {
  for (int64_t window : kWindows) {
    SCOPED_TRACE("window " + std::to_string(window));
    const AttentionProblem pr = p(false, window);
    const Shape& s = GetParam();
    const std::vector<float> q = random(attentionElems(pr, T::kQ), 1), k = random(attentionElems(pr, T::kK), 2),
                             v = random(attentionElems(pr, T::kV), 3);
    std::vector<float> out(size_t(attentionElems(pr, T::kO))), lse(size_t(attentionElems(pr, T::kStats)));
    ASSERT_TRUE(attentionForward(AttentionShape{s.B, s.S, s.nh, s.nkv, s.hd, window}, q.data(), k.data(), v.data(),
                                 out.data(), lse.data())
                    .isOk());

    const AttentionLayout Lq = attentionLayout(pr, T::kQ), Lk = attentionLayout(pr, T::kK),
                          Lv = attentionLayout(pr, T::kV), Lo = attentionLayout(pr, T::kO),
                          Ls = attentionLayout(pr, T::kStats);
    std::vector<float> refOut(out.size(), std::numeric_limits<float>::quiet_NaN()), refLse(lse.size(), refOut[0]);
    const int64_t group = s.nh / s.nkv;
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t h = 0; h < s.nh; ++h) {
        const int64_t g = h / group;  // cuDNN's GQA: query head h reads kv head h / (h_q / h_k)
        for (int64_t i = 0; i < s.S; ++i) {
          std::vector<double> score(size_t(s.S), -INFINITY);  // masked scores stay -inf
          double m = -INFINITY;
          for (int64_t j = 0; j < s.S; ++j) {
            if (!cudnnKeeps(pr, i, j)) continue;
            double dot = 0;
            for (int64_t d = 0; d < s.hd; ++d) dot += double(q[at(Lq, b, h, i, d)]) * double(k[at(Lk, b, g, j, d)]);
            score[size_t(j)] = double(pr.scale) * dot;
            m = std::max(m, score[size_t(j)]);
          }
          double sum = 0;
          for (double x : score) sum += std::exp(x - m);
          const double l = m + std::log(sum);
          refLse[at(Ls, b, h, i, 0)] = float(l);
          for (int64_t d = 0; d < s.hd; ++d) {
            double o = 0;
            for (int64_t j = 0; j < s.S; ++j) o += std::exp(score[size_t(j)] - l) * double(v[at(Lv, b, g, j, d)]);
            refOut[at(Lo, b, h, i, d)] = float(o);
          }
        }
      }
    expectClose(refOut, out, 1e-5, 1e-5, "O");
    expectClose(refLse, lse, 1e-5, 1e-5, "Stats");
  }
}

// The backward likewise: dQ, dK, dV through the layouts (P = exp(score - lse), dS = P·(dP - rowsum(dO·O)),
// dK and dV summed over the query heads of a kv group) equal Kernels.h's attentionBackward.
TEST_P(AttentionPlanLayoutTest, BackwardThroughLayoutsMatchesCpuKernel) {
  for (int64_t window : kWindows) {
    SCOPED_TRACE("window " + std::to_string(window));
    const AttentionProblem pr = p(true, window);
    const Shape& s = GetParam();
    const AttentionShape shape{s.B, s.S, s.nh, s.nkv, s.hd, window};
    const std::vector<float> q = random(attentionElems(pr, T::kQ), 4), k = random(attentionElems(pr, T::kK), 5),
                             v = random(attentionElems(pr, T::kV), 6), dout = random(attentionElems(pr, T::kDO), 7);
    std::vector<float> out(size_t(attentionElems(pr, T::kO))), lse(size_t(attentionElems(pr, T::kStats)));
    ASSERT_TRUE(attentionForward(shape, q.data(), k.data(), v.data(), out.data(), lse.data()).isOk());
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
    ASSERT_TRUE(attentionBackward(shape, dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), dq.data(),
                                  dk.data(), dv.data())
                    .isOk());

    const AttentionLayout Lq = attentionLayout(pr, T::kQ), Lk = attentionLayout(pr, T::kK),
                          Lv = attentionLayout(pr, T::kV), Lo = attentionLayout(pr, T::kO),
                          Ls = attentionLayout(pr, T::kStats), Ldo = attentionLayout(pr, T::kDO),
                          Ldq = attentionLayout(pr, T::kDQ), Ldk = attentionLayout(pr, T::kDK),
                          Ldv = attentionLayout(pr, T::kDV);
    std::vector<double> rq(dq.size(), 0.0), rk(dk.size(), 0.0), rv(dv.size(), 0.0);
    const int64_t group = s.nh / s.nkv;
    const double scale = pr.scale;
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t h = 0; h < s.nh; ++h) {
        const int64_t g = h / group;
        for (int64_t i = 0; i < s.S; ++i) {
          double D = 0;
          for (int64_t d = 0; d < s.hd; ++d) D += double(dout[at(Ldo, b, h, i, d)]) * double(out[at(Lo, b, h, i, d)]);
          const double l = lse[at(Ls, b, h, i, 0)];
          for (int64_t j = 0; j < s.S; ++j) {
            if (!cudnnKeeps(pr, i, j)) continue;
            double dot = 0, dp = 0;
            for (int64_t d = 0; d < s.hd; ++d) {
              dot += double(q[at(Lq, b, h, i, d)]) * double(k[at(Lk, b, g, j, d)]);
              dp += double(dout[at(Ldo, b, h, i, d)]) * double(v[at(Lv, b, g, j, d)]);
            }
            const double P = std::exp(scale * dot - l), dS = P * (dp - D);
            for (int64_t d = 0; d < s.hd; ++d) {
              rq[at(Ldq, b, h, i, d)] += scale * dS * double(k[at(Lk, b, g, j, d)]);
              rk[at(Ldk, b, g, j, d)] += scale * dS * double(q[at(Lq, b, h, i, d)]);
              rv[at(Ldv, b, g, j, d)] += P * double(dout[at(Ldo, b, h, i, d)]);
            }
          }
        }
      }
    const auto f = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
    expectClose(f(rq), dq, 2e-5, 2e-5, "dQ");
    expectClose(f(rk), dk, 2e-5, 2e-5, "dK");
    expectClose(f(rv), dv, 2e-5, 2e-5, "dV");
  }
}

INSTANTIATE_TEST_SUITE_P(AttentionPlan, AttentionPlanLayoutTest, ::testing::ValuesIn(kShapes));

TEST(AttentionPlanLayoutTest, ElementCountsAndTypes) {
  const AttentionProblem p = problem(2, 5, 8, 2, 16, true);
  EXPECT_EQ(attentionElems(p, T::kQ), 2 * 5 * 8 * 16);
  EXPECT_EQ(attentionElems(p, T::kO), 1280);
  EXPECT_EQ(attentionElems(p, T::kDO), 1280);
  EXPECT_EQ(attentionElems(p, T::kDQ), 1280);
  EXPECT_EQ(attentionElems(p, T::kK), 2 * 5 * 2 * 16);
  EXPECT_EQ(attentionElems(p, T::kV), 320);
  EXPECT_EQ(attentionElems(p, T::kDK), 320);
  EXPECT_EQ(attentionElems(p, T::kDV), 320);
  EXPECT_EQ(attentionElems(p, T::kStats), 2 * 8 * 5);
  EXPECT_EQ(attentionElems(problem(0, 5, 8, 2, 16), T::kQ), 0);
  for (T t : kAttentionTensors)
    EXPECT_EQ(attentionTensorType(p, t), t == T::kStats ? schema::ElemType::kF32 : schema::ElemType::kBF16)
        << attentionTensorName(t);
}

TEST(AttentionPlanLayoutTest, TensorsOfEachGraph) {
  const AttentionProblem f = problem(1, 4, 2, 1, 8, false), b = problem(1, 4, 2, 1, 8, true);
  std::set<std::string> names;
  for (T t : kAttentionTensors) {
    names.insert(attentionTensorName(t));
    EXPECT_TRUE(attentionTensorUsed(b, t)) << attentionTensorName(t);
    const bool fwd = t == T::kQ || t == T::kK || t == T::kV || t == T::kO || t == T::kStats;
    EXPECT_EQ(attentionTensorUsed(f, t), fwd) << attentionTensorName(t);
  }
  EXPECT_EQ(names.size(), kAttentionTensors.size());
}

// ---- Support ----------------------------------------------------------------------------------------------

constexpr CudnnTarget kH200{90, 91900};

TEST(AttentionPlanSupportTest, TheProblemsWeRunAreSupported) {
  for (bool backward : {false, true})
    for (bool det : {false, true}) {
      for (const Shape& s : {Shape{8, 1024, 12, 12, 64}, Shape{4, 2048, 32, 8, 64}, Shape{2, 100, 8, 2, 128},
                             Shape{3, 77, 4, 1, 64}, Shape{1, 2, 2, 2, 8}, Shape{1, 64, 4, 4, 256}})
        EXPECT_EQ(cudnnAttentionUnsupportedReason(problem(s.B, s.S, s.nh, s.nkv, s.hd, backward, det), kH200), "")
            << describeAttention(problem(s.B, s.S, s.nh, s.nkv, s.hd, backward, det));
      // cuDNN 9.14 (the other run time the target machine has)
      EXPECT_EQ(cudnnAttentionUnsupportedReason(problem(4, 2048, 32, 8, 64, backward, det), {90, 91400}), "");
    }
  EXPECT_EQ(cudnnAttentionUnsupportedReason(problem(1, 1, 2, 2, 64, false), kH200), "") << "a forward of S = 1";
}

std::string reason(const AttentionProblem& p, CudnnTarget t = kH200) { return cudnnAttentionUnsupportedReason(p, t); }

TEST(AttentionPlanSupportTest, ReasonsName) {
  EXPECT_CONTAINS(reason(problem(0, 4, 2, 2, 64)), "positive");
  EXPECT_CONTAINS(reason(problem(1, 4, 2, 2, 0)), "positive");
  EXPECT_CONTAINS(reason(problem(1, 4, 6, 4, 64)), "not a multiple of num_kv_heads 4");
  EXPECT_CONTAINS(reason(attentionProblem(AttentionParams{1, 4, 2, 2, 64}, false, false, schema::ElemType::kF32)),
                  "not f32");
  AttentionProblem nanScale = problem(1, 4, 2, 2, 64);
  nanScale.scale = std::numeric_limits<float>::quiet_NaN();
  EXPECT_CONTAINS(reason(nanScale), "scale");
  EXPECT_CONTAINS(reason(problem(1, 4, 2, 2, 60)), "head dim 60 is not a multiple of 8");
  EXPECT_CONTAINS(reason(problem(1, 4, 2, 2, 264)), "head dim 264 is larger than 256");
  EXPECT_CONTAINS(reason(problem(1, 4, 2, 2, 64), {75, 91900}), "compute capability 8.0");
  EXPECT_CONTAINS(reason(problem(1, 4, 2, 2, 64), {90, 80907}), "cuDNN 9 is required");
  EXPECT_CONTAINS(reason(problem(1, 4, 2, 2, 64), {90, 91000}), "9.10.0 has known SDPA bugs");
  EXPECT_CONTAINS(reason(problem(1, 4, 2, 2, 64, true), {90, 91001}), "9.10.1 has known SDPA bugs");
  EXPECT_EQ(reason(problem(1, 4, 2, 2, 64), {90, 91002}), "");
  EXPECT_CONTAINS(reason(problem(1, 1, 2, 2, 64, true)), "S = 1");
}

// A sliding window is cuDNN's diagonal band left bound: supported wherever the causal problem is (the
// frontend refuses a left bound only when <= 0, or with a bottom-right diagonal or s_q > s_kv, which these
// problems never have); a negative window or one past cuDNN's int is refused by name.
TEST(AttentionPlanSupportTest, WindowedProblemsAreSupported) {
  for (bool backward : {false, true})
    for (int64_t window : {1, 3, 64, 4095})
      for (CudnnTarget t : {kH200, CudnnTarget{90, 91400}, CudnnTarget{80, 91900}, CudnnTarget{100, 92300}}) {
        const AttentionProblem pr = problem(2, 4096, 32, 8, 128, backward, false, window);
        EXPECT_EQ(pr.window, window);
        EXPECT_EQ(reason(pr, t), "") << describeAttention(pr) << " on sm " << t.smVersion;
      }
  AttentionProblem negative = problem(1, 64, 2, 2, 64);
  negative.window = -1;
  EXPECT_CONTAINS(reason(negative), "window -1");
  AttentionProblem huge = problem(1, 64, 2, 2, 64);
  huge.window = int64_t(1) << 31;
  EXPECT_CONTAINS(reason(huge), "int diagonal band left bound");
  // The other limits still apply.
  EXPECT_CONTAINS(reason(problem(1, 64, 2, 2, 60, false, false, 8)), "not a multiple of 8");
}

// The backend's choice (cudaKernelVariants: "cudnn" first, then "own") of a bf16 attention op of `params`
// on an H200 with cuDNN 9.19 or without cuDNN.
StatusOr<KernelChoice> chooseFor(schema::OpKind kind, const AttentionParams& params, bool cudnn) {
  using E = schema::ElemType;
  KernelCall c;
  c.kind = kind;
  c.params = params;
  const schema::OpSpec& spec = schema::opSpec(kind);
  c.args.resize(spec.numArgs);
  c.argElems.resize(spec.numArgs);
  c.argTypes.resize(spec.numArgs);
  for (const char* role : {"q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv"}) {
    const int r = schema::argIndex(kind, role);
    if (r < 0) continue;
    c.args[size_t(r)] = {nullptr};
    c.argElems[size_t(r)] = {1 << 22};
    c.argTypes[size_t(r)] = {std::string(role) == "lse" ? E::kF32 : E::kBF16};
  }
  std::vector<const KernelVariantInfo*> variants;
  for (const KernelVariantInfo& v : cudaKernelVariants(kind)) variants.push_back(&v);
  KernelSelectOptions o;
  o.cudnn = cudnn;
  o.smVersion = 90;
  o.cudnnVersion = 91900;
  return chooseKernelVariant(c, variants, o);
}

// A windowed bf16 attention goes to cuDNN where it is usable, as the causal one does; without cuDNN the
// own kernel (which takes f32) runs it with the bf16 arguments converted.
TEST(AttentionPlanSupportTest, TheBackendChoosesCudnnForAWindowedAttention) {
  using K = schema::OpKind;
  AttentionParams params{2, 512, 8, 2, 64};
  params.window = 128;
  for (K kind : {K::kAttentionFwd, K::kAttentionBwd}) {
    SCOPED_TRACE(schema::opName(kind));
    StatusOr<KernelChoice> got = chooseFor(kind, params, true);
    ASSERT_TRUE(got.isOk()) << got.status().toString();
    EXPECT_EQ(got->name, kCudnnVariant);
    EXPECT_EQ(got->converted, 0);
    got = chooseFor(kind, params, false);
    ASSERT_TRUE(got.isOk()) << got.status().toString();
    EXPECT_EQ(got->name, kOwnVariant);
    EXPECT_GT(got->converted, 0);
  }
}

// BLOOM's ALiBi: cuDNN's alibi mask derives the slopes from the graph's own heads, which a tp rank's slice
// is not, so the problem is unsupported by name and the own kernel runs it, even where cuDNN is usable.
TEST(AttentionPlanSupportTest, AlibiRunsTheOwnKernel) {
  using K = schema::OpKind;
  AttentionParams params{2, 512, 8, 8, 64};
  params.alibi = Alibi{16, 8};
  for (bool backward : {false, true}) {
    const AttentionProblem pr = attentionProblem(params, backward, false);
    EXPECT_TRUE(pr.alibi);
    EXPECT_CONTAINS(reason(pr), "ALiBi");
    EXPECT_CONTAINS(describeAttention(pr), " alibi");
  }
  EXPECT_FALSE(problem(2, 512, 8, 8, 64).alibi);
  for (K kind : {K::kAttentionFwd, K::kAttentionBwd}) {
    SCOPED_TRACE(schema::opName(kind));
    const StatusOr<KernelChoice> got = chooseFor(kind, params, true);
    ASSERT_TRUE(got.isOk()) << got.status().toString();
    EXPECT_EQ(got->name, kOwnVariant);
    EXPECT_GT(got->converted, 0);
  }
}

TEST(AttentionPlanSupportTest, HeadDimLimitsDependOnDeviceAndVersion) {
  // Forward: 256 on Hopper; on Ampere only from cuDNN 9.10 on.
  EXPECT_EQ(reason(problem(1, 64, 2, 2, 256), {90, 90900}), "");
  EXPECT_CONTAINS(reason(problem(1, 64, 2, 2, 256), {80, 90900}), "larger than 128");
  EXPECT_EQ(reason(problem(1, 64, 2, 2, 256), {80, 91900}), "");
  EXPECT_CONTAINS(reason(problem(1, 64, 2, 2, 192), {100, 90800}), "larger than 128");
  // Backward: 256 on Hopper, 128 elsewhere; on Blackwell 256 from cuDNN 9.23.
  EXPECT_EQ(reason(problem(1, 64, 2, 2, 256, true), {90, 91900}), "");
  EXPECT_CONTAINS(reason(problem(1, 64, 2, 2, 256, true), {80, 91900}), "larger than 128 in the backward");
  EXPECT_EQ(reason(problem(1, 64, 2, 2, 128, true), {80, 91900}), "");
  EXPECT_CONTAINS(reason(problem(1, 64, 2, 2, 256, true), {100, 91900}), "needs cuDNN 9.23");
  EXPECT_EQ(reason(problem(1, 64, 2, 2, 256, true), {100, 92300}), "");
  EXPECT_CONTAINS(reason(problem(1, 64, 2, 2, 192, true), {100, 92300}), "larger than 128");
  // Deterministic backward on Blackwell from cuDNN 9.18.
  EXPECT_CONTAINS(reason(problem(1, 64, 2, 2, 64, true, true), {100, 91700}), "deterministic");
  EXPECT_EQ(reason(problem(1, 64, 2, 2, 64, true, true), {100, 91800}), "");
  EXPECT_EQ(reason(problem(1, 64, 2, 2, 64, true, false), {100, 91700}), "");
}

// ---- Pointers, FLOPs ----------------------------------------------------------------------------------------

TEST(AttentionPlanPointerTest, NamesTheTensor) {
  alignas(16) static unsigned char buf[64];
  EXPECT_TRUE(checkAttentionPointer(T::kQ, buf).isOk());
  EXPECT_TRUE(checkAttentionPointer(T::kStats, buf + 16).isOk());
  const Status misaligned = checkAttentionPointer(T::kDK, buf + 2);
  EXPECT_EQ(misaligned.code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(misaligned.message(), "dK");
  EXPECT_CONTAINS(misaligned.message(), "16-byte aligned");
  const Status null = checkAttentionPointer(T::kV, nullptr);
  EXPECT_EQ(null.code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(null.message(), "null V");
}

TEST(AttentionPlanFlopsTest, FlashAttentionConvention) {
  // GPT-2 124M: 4·8·12·1024²·64 / 2.
  EXPECT_EQ(attentionForwardFlops(problem(8, 1024, 12, 12, 64)), 12884901888.0);
  EXPECT_EQ(attentionBackwardFlops(problem(8, 1024, 12, 12, 64, true)), 2.5 * 12884901888.0);
  // GQA does not change the count: the work is per query head.
  EXPECT_EQ(attentionForwardFlops(problem(4, 2048, 32, 8, 64)), attentionForwardFlops(problem(4, 2048, 32, 32, 64)));
  // A window W < S drops the (S − W)²/2 pairs it masks from the causal S²/2: 4·1·1·(1024² − 768²)/2·64.
  EXPECT_EQ(attentionForwardFlops(problem(1, 1024, 1, 1, 64, false, false, 256)),
            4.0 * (1024.0 * 1024.0 - 768.0 * 768.0) / 2.0 * 64.0);
  EXPECT_EQ(attentionForwardFlops(problem(1, 1024, 1, 1, 64, false, false, 1024)),
            attentionForwardFlops(problem(1, 1024, 1, 1, 64)));
}

}  // namespace
}  // namespace llcdist::rt::cuda
