// BLOOM's ALiBi (attrs `alibi_heads` / `head_axis` of attention_fwd / _bwd and attention_block_fwd /
// _bwd; Kernels.h: Alibi, alibiSlope) on the CPU: every visible score gets slope_g · (j − i) added, g the
// op's head plus the rank's first head among alibi_heads.
//  - alibiSlope against transformers' build_alibi_tensor written as it is written there (base
//    2^(−2^−(log2 p − 3)) raised to 1..p, the odd powers of the base of 2p for the heads past p), for
//    1..130 heads; the power-of-two slopes exactly.
//  - attentionForward / attentionBackward against a brute force in double (AttentionReference.h: the
//    biased, masked softmax and its analytic backward, nothing shared with the kernels), GQA, separate and packed q, k,
//    v, all heads and a rank's slice of twice as many (head0 = nh); without ALiBi the bits are the plain ones.
//  - the ring's blocks: every rank's blocks merged give the biased whole-sequence attention, and the
//    backward shares add up to its gradients (cp 2 and 4, both layouts).
//  - the plan: alibi_heads and head_axis load and bind (head0 = the rank's tp coordinate × nh), and
//    a head_axis without alibi_heads, an alibi_heads that is not nh × the axis size, a set of axes, are
//    refused naming the attr.
#include "AttentionReference.h"
#include "PlanTestUtil.h"
#include "PositionRowsUtil.h"
#include "TestUtil.h"

#include "llcdist/runtime/KernelChecks.h"
#include "llcdist/runtime/Kernels.h"
#include "llcdist/runtime/Plan.h"
#include "llcdist/runtime/Positions.h"
#include "ops/OpDefs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace llcdist::rt {
namespace {

using testing::expectAllClose;
using testing::json;
using testing::randn;
namespace sc = schema;
using Result = testing::AttentionResult;
using testing::bruteForceAttention;
using testing::runAttentionKernels;
using testing::transformersAlibiSlopes;

constexpr int64_t kB = 2, kS = 16, kNh = 6, kNkv = 3, kHd = 8;

// ---- the slopes -----------------------------------------------------------------------------------------

TEST(AlibiSlopeTest, TransformersSlopesForEveryHeadCount) {
  for (int64_t n = 1; n <= 130; ++n) {
    const std::vector<double> want = transformersAlibiSlopes(n);
    ASSERT_EQ(int64_t(want.size()), n);
    for (int64_t g = 0; g < n; ++g)
      EXPECT_NEAR(double(alibiSlope(n, g)), want[size_t(g)], 1e-7 * want[size_t(g)]) << n << " heads, head " << g;
  }
  // 8 heads: 1/2 ... 1/256; 6 heads: 2^-2, 2^-4, 2^-6, 2^-8, then 2^-1, 2^-3 (the base of 8 heads, odd powers).
  for (int64_t g = 0; g < 8; ++g) EXPECT_EQ(alibiSlope(8, g), std::ldexp(1.0f, -int(g + 1)));
  const float six[] = {0.25f, 0.0625f, 0.015625f, 0.00390625f, 0.5f, 0.125f};
  for (int64_t g = 0; g < 6; ++g) EXPECT_EQ(alibiSlope(6, g), six[g]) << g;
}

// ---- attention_fwd / attention_bwd ----------------------------------------------------------------------

// Whether q, k, v are packed; the ALiBi heads: all nh (head0 0) or the second half of 2·nh.
class AlibiAttentionTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {
 protected:
  const bool packed = std::get<0>(GetParam());
  const bool slice = std::get<1>(GetParam());
  const AttentionShape s{kB, kS, kNh, kNkv, kHd, 0, slice ? Alibi{2 * kNh, kNh} : Alibi{kNh, 0}};
  const std::vector<float> q = randn(kB * kS * kNh * kHd, 61), k = randn(kB * kS * kNkv * kHd, 62),
                           v = randn(kB * kS * kNkv * kHd, 63), dout = randn(kB * kS * kNh * kHd, 64);
};

TEST_P(AlibiAttentionTest, ForwardAndBackwardMatchTheBruteForce) {
  const Result got = testing::expectKernelsMatchTheBruteForce(s, packed, q, k, v, dout);
  // The bias changes the result (and the brute force without it is the plain kernels').
  const Result plain = runAttentionKernels({kB, kS, kNh, kNkv, kHd}, packed, q, k, v, dout);
  EXPECT_NE(got.out, plain.out);
  expectAllClose(plain.out, bruteForceAttention({kB, kS, kNh, kNkv, kHd}, q, k, v, dout).out, 1e-5, 1e-5, "plain out");
}

INSTANTIATE_TEST_SUITE_P(LayoutsAndSlices, AlibiAttentionTest, ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "packed" : "separate") +
                                  (std::get<1>(info.param) ? "_secondHalfOf12" : "_all6");
                         });

TEST(AlibiAttentionErrors, HeadsOutsideTheSlopesAreRefused) {
  std::vector<float> buf(4096);
  for (const Alibi& bad : {Alibi{4, 0}, Alibi{6, 1}, Alibi{12, -1}, Alibi{-6, 0}}) {
    const Status f =
        attentionForward({1, 4, kNh, kNkv, 4, 0, bad}, buf.data(), buf.data(), buf.data(), buf.data(), buf.data());
    EXPECT_EQ(f.code(), StatusCode::kInvalidArgument) << bad.heads << " " << bad.head0;
    EXPECT_NE(f.message().find("ALiBi heads"), std::string::npos) << f.message();
  }
  EXPECT_TRUE(checkAttentionAlibi(Alibi{12, 6}, kNh).isOk());
  EXPECT_TRUE(checkAttentionAlibi(Alibi{}, kNh).isOk());
}

// ---- the ring's blocks (AttentionReference.h: expectRingIsTheWholeAttention) ---------------------------

class AlibiRingTest : public ::testing::TestWithParam<std::tuple<int64_t, CpLayout>> {};

// Chunks of 4 positions, T = 2·cp·4, the heads the second half of 12: the blocks carry the bias by
// global position, so the ring is the whole sequence's attention, forward and backward.
TEST_P(AlibiRingTest, BlocksAndMergeGiveTheBiasedAttentionAndItsGradients) {
  const auto [n, layout] = GetParam();
  const AttentionShape whole{kB, 8 * n, kNh, kNkv, kHd, 0, Alibi{2 * kNh, kNh}};
  testing::expectRingIsTheWholeAttention(whole, n, layout, 71);
  // The whole sequence's attention is the brute force's (so the ring is too).
  const int64_t T = whole.S;
  const std::vector<float> q = randn(kB * T * kNh * kHd, 71), k = randn(kB * T * kNkv * kHd, 72),
                           v = randn(kB * T * kNkv * kHd, 73), dout = randn(kB * T * kNh * kHd, 74);
  expectAllClose(runAttentionKernels(whole, false, q, k, v, dout).out, bruteForceAttention(whole, q, k, v, dout).out,
                 1e-5, 1e-5, "whole out");
}

INSTANTIATE_TEST_SUITE_P(CpLayouts, AlibiRingTest,
                         ::testing::Combine(::testing::Values(int64_t(2), int64_t(4)),
                                            ::testing::Values(CpLayout::kLoadBalanced, CpLayout::kContiguous)),
                         [](const auto& info) {
                           return "cp" + std::to_string(std::get<0>(info.param)) + "_" +
                                  std::string(sc::cpLayoutName(std::get<1>(info.param)));
                         });

// ---- the plan ------------------------------------------------------------------------------------------

StatusOr<Plan> loadPlan(const testing::PlanBuilder& b) {
  Plan plan;
  LLCDIST_ASSIGN_OR_RETURN(plan.manifest, parseManifest(b.manifest.dump(), "manifest.json"));
  LLCDIST_ASSIGN_OR_RETURN(Program prog, parseProgram(b.program.dump(), "program-0.json", plan.manifest));
  plan.programs.push_back(std::move(prog));
  return plan;
}

// One attention_fwd of 3 local heads (1 kv head) on a mesh of tp = `tp`, attrs plus `extra`.
testing::PlanBuilder tpAttentionPlan(int64_t tp, const json& extra) {
  testing::PlanBuilder b(16, 4, 1, 1);
  b.manifest["mesh"]["tp"] = tp;
  json ranks = json::array();
  for (int64_t r = 0; r < tp; ++r) ranks.push_back(r);
  b.manifest["programs"][0]["ranks"] = ranks;
  const int64_t q = b.buffer("q", "activation", {4, 12}), k = b.buffer("k", "activation", {4, 4}),
                v = b.buffer("v", "activation", {4, 4}), o = b.buffer("o", "activation", {4, 12}),
                l = b.buffer("l", "activation", {3, 4});
  json attrs = {{"B", 1}, {"S", 4}, {"nh", 3}, {"nkv", 1}, {"hd", 4}};
  for (auto it = extra.begin(); it != extra.end(); ++it) attrs[it.key()] = it.value();
  b.op("s", "attention_fwd", {{"q", q}, {"k", k}, {"v", v}, {"out", o}, {"lse", l}}, attrs);
  b.action("s");
  return b;
}

TEST(AlibiAttentionPlanTest, HeadsBindToTheRanksSlice) {
  for (const auto& [tp, extra] :
       {std::pair{int64_t(1), json::object()}, std::pair{int64_t(1), json{{"alibi_heads", 3}}},
        std::pair{int64_t(2), json{{"alibi_heads", 6}, {"head_axis", "tp"}}}}) {
    const StatusOr<Plan> p = loadPlan(tpAttentionPlan(tp, extra));
    ASSERT_TRUE(p.isOk()) << extra.dump() << ": " << p.status().toString();
    const Op& op = p->programs[0].subroutines[0].ops[0];
    const Manifest& m = p->manifest;
    for (int rank = 0; rank < tp; ++rank) {
      const StatusOr<OpParams> bound = ops::opDefs().find(op.kind)->bind(ops::BindContext{op, m, m.mesh(), rank});
      ASSERT_TRUE(bound.isOk()) << bound.status().toString();
      const Alibi a = std::get<AttentionParams>(*bound).alibi;
      EXPECT_EQ(a.heads, extra.empty() ? 0 : 3 * tp) << extra.dump();
      EXPECT_EQ(a.head0, 3 * rank) << extra.dump() << " rank " << rank;
    }
  }
}

TEST(AlibiAttentionPlanTest, BadAttrsAreRefusedByName) {
  struct Case {
    int64_t tp;
    json extra;
    const char *attr, *says;
  };
  for (const Case& c :
       {Case{1, {{"head_axis", "tp"}}, "attrs.head_axis", "needs attrs.alibi_heads"},
        Case{2, {{"alibi_heads", 3}, {"head_axis", "tp"}}, "attrs.alibi_heads", "nh = 3 × the head_axis"},
        Case{2, {{"alibi_heads", 6}}, "attrs.alibi_heads", "(no head_axis)"},
        Case{2, {{"alibi_heads", 6}, {"head_axis", "dp+tp"}}, "attrs.head_axis", "single axis"},
        Case{1, {{"alibi_heads", 0}}, "attrs.alibi_heads", ""},
        Case{1, {{"alibi_heads", "3"}}, "attrs.alibi_heads", ""}}) {
    const StatusOr<Plan> p = loadPlan(tpAttentionPlan(c.tp, c.extra));
    ASSERT_FALSE(p.isOk()) << c.extra.dump() << " loaded";
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find(c.attr), std::string::npos) << p.status().message();
    EXPECT_NE(p.status().message().find(c.says), std::string::npos) << p.status().message();
  }
}

}  // namespace
}  // namespace llcdist::rt
