#include "TestUtil.h"
#include "llcdist/runtime/Kernels.h"
#include "llcdist/runtime/PlanSchema.h"

#include <limits>

namespace llcdist::rt {
namespace {
using testing::checkGradient;
using testing::dot;
using testing::expectAllClose;
using testing::randn;

constexpr int64_t B = 2, S = 5, n = 3, hd = 8;

// transformers' _compute_default_rope_parameters / _compute_llama3_parameters, in double.
std::vector<double> refInvFreq(const RopeConfig& c, int64_t dim) {
  std::vector<double> inv;
  for (int64_t i = 0; i < dim; i += 2) inv.push_back(1.0 / std::pow(double(c.theta), double(i) / dim));
  if (!c.llama3) return inv;
  const double oldCtx = double(c.originalMaxPositionEmbeddings);
  const double lowWavelen = oldCtx / c.lowFreqFactor, highWavelen = oldCtx / c.highFreqFactor;
  for (double& f : inv) {
    const double wavelen = 2 * M_PI / f;
    if (wavelen < highWavelen) continue;
    if (wavelen > lowWavelen) {
      f /= c.factor;
      continue;
    }
    const double smooth = (oldCtx / wavelen - c.lowFreqFactor) / (c.highFreqFactor - c.lowFreqFactor);
    f = (1 - smooth) * f / c.factor + smooth * f;
  }
  return inv;
}

TEST(RopeTest, ForwardMatchesRotateHalfDefinition) {
  RopeConfig cfg;
  cfg.theta = 10000.0f;
  const int64_t posBegin = 3;
  auto table = makeRopeTable(cfg, hd, posBegin, S);
  ASSERT_TRUE(table.isOk()) << table.status().message();
  std::vector<float> x = randn(B * S * n * hd, 1), y(x.size());
  ASSERT_TRUE(ropeForward(*table, x.data(), y.data(), B, S, n, hd).isOk());

  const std::vector<double> inv = refInvFreq(cfg, hd);
  std::vector<double> ref(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < n; ++h) {
        const float* xv = x.data() + ((b * S + s) * n + h) * hd;
        std::vector<double> rot(hd);  // rotate_half(x) = cat(-x[hd/2:], x[:hd/2])
        for (int64_t i = 0; i < hd / 2; ++i) {
          rot[i] = -xv[hd / 2 + i];
          rot[hd / 2 + i] = xv[i];
        }
        for (int64_t j = 0; j < hd; ++j) {
          const double angle = double(posBegin + s) * inv[j % (hd / 2)];  // emb = cat(freqs, freqs)
          ref[((b * S + s) * n + h) * hd + j] = xv[j] * std::cos(angle) + rot[j] * std::sin(angle);
        }
      }
  expectAllClose(y, ref, 1e-5, 1e-5, "rope");
}

// GPT-J's rotate_every_two (transformers' apply_rotary_pos_emb in modeling_gptj) on a partial rotary
// width, in double: dims 2i and 2i + 1 of the first rd rotate by the angle of inv_freq[i] over rd
// (x·cos + rotate_every_two(x)·sin, rotate_every_two(x)[2i] = -x[2i+1], [2i+1] = x[2i], the
// angles repeat_interleave'd); the rest pass through. Its backward is the transpose (finite
// differences), in place too.
TEST(RopeTest, InterleavedMatchesRotateEveryTwoDefinition) {
  constexpr int64_t rd = 4;
  RopeConfig cfg;
  const int64_t posBegin = 2;
  auto table = makeRopeTable(cfg, rd, posBegin, S);
  ASSERT_TRUE(table.isOk()) << table.status().message();
  std::vector<float> x = randn(B * S * n * hd, 11), y(x.size());
  ASSERT_TRUE(ropeForward(*table, x.data(), y.data(), B, S, n, hd, rd, /*interleaved=*/true).isOk());
  const std::vector<double> inv = refInvFreq(cfg, rd);
  std::vector<double> ref(x.size());
  for (int64_t row = 0; row < B * S * n; ++row) {
    const int64_t s = (row / n) % S;
    const float* xv = x.data() + row * hd;
    for (int64_t j = 0; j < hd; ++j) {
      double v = xv[j];
      if (j < rd) {
        const double angle = double(posBegin + s) * inv[j / 2];
        const double every2 = j % 2 == 0 ? -double(xv[j + 1]) : double(xv[j - 1]);
        v = xv[j] * std::cos(angle) + every2 * std::sin(angle);
      }
      ref[row * hd + j] = v;
    }
  }
  expectAllClose(y, ref, 1e-5, 1e-5, "interleaved rope");
  // Not rotate_half: the comparison can fail.
  std::vector<float> half(x.size());
  ASSERT_TRUE(ropeForward(*table, x.data(), half.data(), B, S, n, hd, rd).isOk());
  EXPECT_NE(half, y);
  std::vector<float> dy = randn(x.size(), 12), dx(x.size());
  ASSERT_TRUE(ropeBackward(*table, dy.data(), dx.data(), B, S, n, hd, rd, true).isOk());
  checkGradient(
      x, dx,
      [&] {
        std::vector<float> out(x.size());
        EXPECT_TRUE(ropeForward(*table, x.data(), out.data(), B, S, n, hd, rd, true).isOk());
        return dot(dy, out);
      },
      "dx");
  std::vector<float> inplace = dy;
  ASSERT_TRUE(ropeBackward(*table, inplace.data(), inplace.data(), B, S, n, hd, rd, true).isOk());
  EXPECT_EQ(inplace, dx);
}

TEST(RopeTest, TableRowsDependOnlyOnAbsolutePosition) {
  RopeConfig cfg;
  auto whole = makeRopeTable(cfg, hd, 0, 10);
  auto tail = makeRopeTable(cfg, hd, 6, 4);
  ASSERT_TRUE(whole.isOk() && tail.isOk());
  for (int64_t i = 0; i < 4 * hd; ++i) {
    EXPECT_EQ(tail->cos[i], whole->cos[6 * hd + i]);
    EXPECT_EQ(tail->sin[i], whole->sin[6 * hd + i]);
  }
  EXPECT_EQ(whole->cos[0], 1.0f);  // position 0 is the identity
  EXPECT_EQ(whole->sin[0], 0.0f);
}

TEST(RopeTest, BackwardMatchesFiniteDifferences) {
  auto table = makeRopeTable(RopeConfig{}, hd, 0, S);
  ASSERT_TRUE(table.isOk());
  std::vector<float> x = randn(B * S * n * hd, 2), dy = randn(x.size(), 3), dx(x.size());
  ASSERT_TRUE(ropeBackward(*table, dy.data(), dx.data(), B, S, n, hd).isOk());
  checkGradient(x, dx, [&] {
    std::vector<float> y(x.size());
    EXPECT_TRUE(ropeForward(*table, x.data(), y.data(), B, S, n, hd).isOk());
    return dot(dy, y);
  }, "dx");
  // In place works too.
  std::vector<float> inplace = dy;
  ASSERT_TRUE(ropeBackward(*table, inplace.data(), inplace.data(), B, S, n, hd).isOk());
  EXPECT_EQ(inplace, dx);
}

TEST(RopeTest, Llama3InvFreqMatchesTransformers) {
  RopeConfig cfg;  // Llama 3.1 8B
  cfg.theta = 500000.0f;
  cfg.llama3 = true;
  cfg.factor = 8.0f;
  cfg.lowFreqFactor = 1.0f;
  cfg.highFreqFactor = 4.0f;
  cfg.originalMaxPositionEmbeddings = 8192;
  auto inv = ropeInvFreq(cfg, 128);
  ASSERT_TRUE(inv.isOk());
  const std::vector<double> ref = refInvFreq(cfg, 128);
  expectAllClose(*inv, ref, 0.0, 1e-5, "inv_freq");

  RopeConfig plain = cfg;
  plain.llama3 = false;
  auto base = ropeInvFreq(plain, 128);
  ASSERT_TRUE(base.isOk());
  EXPECT_EQ((*inv)[0], (*base)[0]);                // high frequency: untouched
  EXPECT_EQ((*inv)[63], (*base)[63] / 8.0f);       // low frequency: divided by factor
  int medium = 0;
  for (int i = 0; i < 64; ++i) medium += (*inv)[i] != (*base)[i] && (*inv)[i] != (*base)[i] / 8.0f;
  EXPECT_GT(medium, 0);  // some frequencies are smoothly interpolated
}

TEST(RopeTest, InvalidArguments) {
  EXPECT_EQ(ropeInvFreq(RopeConfig{}, 7).status().code(), StatusCode::kInvalidArgument);
  auto table = makeRopeTable(RopeConfig{}, hd, 0, S);
  ASSERT_TRUE(table.isOk());
  std::vector<float> x(B * (S + 1) * n * hd);
  Status s = ropeForward(*table, x.data(), x.data(), B, S + 1, n, hd);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("table is for S=5"), std::string::npos) << s.message();
}

// rope_theta outside the normal fp32 range (a subnormal 1e-40f, 0, inf) is refused with the rule the
// compiler applies to configs and xf.rope (schema::kRopeThetaRule), never turned into NaN tables.
TEST(RopeTest, ThetaOutsideNormalFp32RangeIsRefused) {
  for (float theta : {1e-40f, 0.0f, -1.0f, std::numeric_limits<float>::infinity()}) {
    RopeConfig cfg;
    cfg.theta = theta;
    Status s = ropeInvFreq(cfg, hd).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << theta;
    EXPECT_NE(s.message().find("rope_theta " + std::string(schema::kRopeThetaRule)), std::string::npos)
        << s.message();
  }
  RopeConfig smallest;
  smallest.theta = std::numeric_limits<float>::min();  // the smallest normal fp32 value is accepted
  EXPECT_TRUE(ropeInvFreq(smallest, hd).isOk());
}

}  // namespace
}  // namespace llcdist::rt
