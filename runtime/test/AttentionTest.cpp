#include "TestUtil.h"
#include "llcdist/runtime/Kernels.h"

namespace llcdist::rt {
namespace {
using testing::checkGradient;
using testing::dot;
using testing::expectAllClose;
using testing::randn;

}  // namespace

// Readable parameter names in gtest output.
void PrintTo(const AttentionShape& s, std::ostream* os) {
  *os << "{B=" << s.B << ", S=" << s.S << ", nh=" << s.nh << ", nkv=" << s.nkv << ", hd=" << s.hd << "}";
}

namespace {

class AttentionTest : public ::testing::TestWithParam<AttentionShape> {
protected:
  AttentionShape s = GetParam();
  int64_t qSize() const { return s.B * s.S * s.nh * s.hd; }
  int64_t kvSize() const { return s.B * s.S * s.nkv * s.hd; }
};

// Explicit loops in double: repeat_kv, scores, causal mask, softmax, P·v.
void naiveAttention(const AttentionShape& s, const std::vector<float>& q, const std::vector<float>& k,
                    const std::vector<float>& v, std::vector<double>& out, std::vector<double>& lse) {
  out.assign(s.B * s.S * s.nh * s.hd, 0.0);
  lse.assign(s.B * s.nh * s.S, 0.0);
  const int64_t group = s.nh / s.nkv;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.nh; ++h)
      for (int64_t i = 0; i < s.S; ++i) {
        const int64_t g = h / group;
        std::vector<double> sc(s.S, -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          double d = 0;
          for (int64_t c = 0; c < s.hd; ++c)
            d += double(q[((b * s.S + i) * s.nh + h) * s.hd + c]) * k[((b * s.S + j) * s.nkv + g) * s.hd + c];
          sc[j] = d / std::sqrt(double(s.hd));
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(sc[j] - mx);
        lse[(b * s.nh + h) * s.S + i] = mx + std::log(sum);
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t c = 0; c < s.hd; ++c)
            out[((b * s.S + i) * s.nh + h) * s.hd + c] +=
                std::exp(sc[j] - mx) / sum * v[((b * s.S + j) * s.nkv + g) * s.hd + c];
      }
}

TEST_P(AttentionTest, ForwardMatchesNaive) {
  std::vector<float> q = randn(qSize(), 1), k = randn(kvSize(), 2), v = randn(kvSize(), 3);
  std::vector<float> out(qSize()), lse(s.B * s.nh * s.S);
  ASSERT_TRUE(attentionForward(s, q.data(), k.data(), v.data(), out.data(), lse.data()).isOk());
  std::vector<double> refOut, refLse;
  naiveAttention(s, q, k, v, refOut, refLse);
  expectAllClose(out, refOut, 1e-5, 1e-5, "out");
  expectAllClose(lse, refLse, 1e-5, 1e-5, "lse");
}

TEST_P(AttentionTest, GradientsMatchFiniteDifferences) {
  std::vector<float> q = randn(qSize(), 4), k = randn(kvSize(), 5), v = randn(kvSize(), 6);
  std::vector<float> dout = randn(qSize(), 7);
  std::vector<float> out(qSize()), lse(s.B * s.nh * s.S);
  ASSERT_TRUE(attentionForward(s, q.data(), k.data(), v.data(), out.data(), lse.data()).isOk());
  std::vector<float> dq(qSize()), dk(kvSize(), 9.0f), dv(kvSize(), 9.0f);  // dk/dv get overwritten
  ASSERT_TRUE(attentionBackward(s, dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(),
                                dq.data(), dk.data(), dv.data())
                  .isOk());
  const auto loss = [&] {
    std::vector<float> o(qSize()), l(s.B * s.nh * s.S);
    EXPECT_TRUE(attentionForward(s, q.data(), k.data(), v.data(), o.data(), l.data()).isOk());
    return dot(dout, o);
  };
  checkGradient(q, dq, loss, "dq");
  checkGradient(k, dk, loss, "dk");
  checkGradient(v, dv, loss, "dv");
}

INSTANTIATE_TEST_SUITE_P(Heads, AttentionTest,
                         ::testing::Values(AttentionShape{2, 5, 4, 4, 4},   // MHA
                                           AttentionShape{2, 5, 4, 2, 4},   // GQA
                                           AttentionShape{1, 6, 4, 1, 8},   // MQA
                                           AttentionShape{1, 1, 2, 1, 3}),  // one token
                         [](const auto& info) {
                           const AttentionShape& s = info.param;
                           return "B" + std::to_string(s.B) + "S" + std::to_string(s.S) + "nh" +
                                  std::to_string(s.nh) + "nkv" + std::to_string(s.nkv) + "hd" +
                                  std::to_string(s.hd);
                         });

TEST(AttentionErrors, HeadsMustDivide) {
  std::vector<float> buf(1000);
  Status st = attentionForward({1, 2, 3, 2, 4}, buf.data(), buf.data(), buf.data(), buf.data(), buf.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("not a multiple"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace llcdist::rt
