#include "TestUtil.h"
#include "llcdist/runtime/KernelChecks.h"
#include "llcdist/runtime/Kernels.h"

#include <algorithm>
#include <limits>

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

// q, k, v read from one packed [B,S,nh+2·nkv,hd] buffer and dq, dk, dv written into one (QkvLayout) give
// the bits of separate buffers, and the packed gradient's every element is written.
TEST_P(AttentionTest, PackedLayoutGivesTheBitsOfSeparateBuffers) {
  const std::vector<float> q = randn(qSize(), 11), k = randn(kvSize(), 12), v = randn(kvSize(), 13);
  const std::vector<float> dout = randn(qSize(), 14);
  const QkvLayout packed = qkvLayout(s.nh, s.nkv, s.hd, true);
  const int64_t rows = s.B * s.S, qRow = s.nh * s.hd, kvRow = s.nkv * s.hd;
  std::vector<float> qkv(rows * packed.qRow);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(q.data() + r * qRow, qRow, qkv.data() + r * packed.qRow + packed.qOffset);
    std::copy_n(k.data() + r * kvRow, kvRow, qkv.data() + r * packed.qRow + packed.kOffset);
    std::copy_n(v.data() + r * kvRow, kvRow, qkv.data() + r * packed.qRow + packed.vOffset);
  }
  std::vector<float> out(qSize()), lse(s.B * s.nh * s.S), pout(qSize()), plse(lse.size());
  ASSERT_TRUE(attentionForward(s, q.data(), k.data(), v.data(), out.data(), lse.data()).isOk());
  ASSERT_TRUE(attentionForward(s, packed, qkv.data() + packed.qOffset, qkv.data() + packed.kOffset,
                               qkv.data() + packed.vOffset, pout.data(), plse.data())
                  .isOk());
  EXPECT_EQ(pout, out);
  EXPECT_EQ(plse, lse);

  std::vector<float> dq(qSize()), dk(kvSize()), dv(kvSize());
  ASSERT_TRUE(attentionBackward(s, dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), dq.data(),
                                dk.data(), dv.data())
                  .isOk());
  std::vector<float> dqkv(qkv.size(), std::numeric_limits<float>::quiet_NaN());
  ASSERT_TRUE(attentionBackward(s, packed, packed, dout.data(), qkv.data() + packed.qOffset,
                                qkv.data() + packed.kOffset, qkv.data() + packed.vOffset, out.data(), lse.data(),
                                dqkv.data() + packed.qOffset, dqkv.data() + packed.kOffset,
                                dqkv.data() + packed.vOffset)
                  .isOk());
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = dqkv.data() + r * packed.qRow;
    for (int64_t c = 0; c < qRow; ++c) ASSERT_EQ(row[packed.qOffset + c], dq[r * qRow + c]) << "dq row " << r;
    for (int64_t c = 0; c < kvRow; ++c) {
      ASSERT_EQ(row[packed.kOffset + c], dk[r * kvRow + c]) << "dk row " << r;
      ASSERT_EQ(row[packed.vOffset + c], dv[r * kvRow + c]) << "dv row " << r;
    }
  }
  // Packed inputs with separate gradients (and the reverse) are the same arithmetic too.
  std::vector<float> dq2(qSize()), dk2(kvSize()), dv2(kvSize());
  ASSERT_TRUE(attentionBackward(s, packed, qkvLayout(s.nh, s.nkv, s.hd, false), dout.data(),
                                qkv.data() + packed.qOffset, qkv.data() + packed.kOffset, qkv.data() + packed.vOffset,
                                out.data(), lse.data(), dq2.data(), dk2.data(), dv2.data())
                  .isOk());
  EXPECT_EQ(dq2, dq);
  EXPECT_EQ(dk2, dk);
  EXPECT_EQ(dv2, dv);
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

// attentionArgs (KernelChecks.h): where q, k, v and dq, dk, dv start, in elements of the dtype the kernel gets
// the packed role in (f32 for the CPU, bf16 for cuDNN), and the separate buffers as they are.
TEST(AttentionArgs, PackedOffsetsAreInElementsOfTheRoleType) {
  const AttentionParams p{2, 3, 4, 2, 8, true, true};
  for (schema::ElemType type : {schema::ElemType::kF32, schema::ElemType::kBF16}) {
    KernelCall c;
    c.kind = schema::OpKind::kAttentionBwd;
    c.params = p;
    const schema::OpSpec& spec = schema::opSpec(c.kind);
    c.args.resize(spec.numArgs);
    c.argTypes.resize(spec.numArgs);
    alignas(64) static char qkv[4096], dqkv[4096];
    c.args[c.role("qkv")] = {qkv};
    c.args[c.role("dqkv")] = {dqkv};
    c.argTypes[c.role("qkv")] = {type};
    c.argTypes[c.role("dqkv")] = {type};
    const AttentionArgs a = attentionArgs(c, p);
    const int64_t e = schema::elemTypeSize(type);
    EXPECT_EQ(static_cast<char*>(a.q), qkv);
    EXPECT_EQ(static_cast<char*>(a.k), qkv + 4 * 8 * e);
    EXPECT_EQ(static_cast<char*>(a.v), qkv + (4 + 2) * 8 * e);
    EXPECT_EQ(static_cast<char*>(a.dq), dqkv);
    EXPECT_EQ(static_cast<char*>(a.dk), dqkv + 4 * 8 * e);
    EXPECT_EQ(static_cast<char*>(a.dv), dqkv + (4 + 2) * 8 * e);
    EXPECT_EQ(a.in.qRow, (4 + 2 * 2) * 8);
    EXPECT_EQ(a.grad.kvRow, (4 + 2 * 2) * 8);
  }
  // Separate buffers: the roles' own pointers and rows; a forward call has no gradients.
  KernelCall c;
  c.kind = schema::OpKind::kAttentionFwd;
  c.args.resize(schema::opSpec(c.kind).numArgs);
  float q[1], k[1], v[1];
  c.args[c.role("q")] = {q};
  c.args[c.role("k")] = {k};
  c.args[c.role("v")] = {v};
  const AttentionParams sep{2, 3, 4, 2, 8};
  const AttentionArgs a = attentionArgs(c, sep);
  EXPECT_EQ(a.qF(), q);
  EXPECT_EQ(a.kF(), k);
  EXPECT_EQ(a.vF(), v);
  EXPECT_EQ(a.dq, nullptr);
  EXPECT_EQ(a.in.qRow, 4 * 8);
  EXPECT_EQ(a.in.kvRow, 2 * 8);
}

TEST(AttentionErrors, HeadsMustDivide) {
  std::vector<float> buf(1000);
  Status st = attentionForward({1, 2, 3, 2, 4}, buf.data(), buf.data(), buf.data(), buf.data(), buf.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("not a multiple"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace llcdist::rt
