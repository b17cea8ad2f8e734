// Context parallelism's ring attention on the CPU kernels (Kernels.h: AttentionBlock): a sequence cut
// into 2·cp chunks and dealt Megatron's load-balanced way (rank r holds chunks r and 2·cp − 1 − r),
// each rank's query chunks run against every key/value chunk as the ring brings them, the partial
// results merged by their log-sum-exp, gives the whole sequence's causal attention (attentionForward,
// itself checked against explicit loops in AttentionTest); the blocks' backward contributions, with the
// merged out and lse, add up to attentionBackward's dq, dk and dv. The same with a rank's two chunks in
// one block of two runs of positions (AttentionBlock's qSplit / kvSplit: the plan's layout, Positions.h):
// every rank's whole ring for cp 2 and 4, contiguous and load-balanced, grouped-query heads.
#include "PositionRowsUtil.h"
#include "TestUtil.h"
#include "llcdist/runtime/Kernels.h"
#include "llcdist/runtime/Positions.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace llcdist::rt {
namespace {
using testing::expectAllClose;
using testing::randn;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Rows [start, start + n) of every batch of a [B, S, heads, hd] tensor.
std::vector<float> rows(const std::vector<float>& t, int64_t B, int64_t S, int64_t width, int64_t start, int64_t n) {
  std::vector<float> out;
  for (int64_t b = 0; b < B; ++b)
    out.insert(out.end(), t.begin() + (b * S + start) * width, t.begin() + (b * S + start + n) * width);
  return out;
}
// Columns [start, start + n) of every (batch, head) row of a [B, heads, S] tensor (lse).
std::vector<float> cols(const std::vector<float>& t, int64_t BH, int64_t S, int64_t start, int64_t n) {
  std::vector<float> out;
  for (int64_t r = 0; r < BH; ++r) out.insert(out.end(), t.begin() + r * S + start, t.begin() + r * S + start + n);
  return out;
}
// Adds `part` ([B, n, width]) into rows [start, start + n) of `t` ([B, S, width]).
void addRows(std::vector<double>& t, const std::vector<float>& part, int64_t B, int64_t S, int64_t width, int64_t start,
             int64_t n) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < n * width; ++i) t[size_t((b * S + start) * width + i)] += part[size_t(b * n * width + i)];
}

using testing::addRowsAt;
using testing::colsAt;
using testing::rowsAt;

struct Ring {
  AttentionShape s;
  int64_t cp;
  int64_t chunk() const { return s.S / (2 * cp); }
  // Megatron's load-balanced layout: rank r holds chunks r and 2·cp − 1 − r.
  std::vector<int64_t> chunksOf(int64_t r) const { return {r, 2 * cp - 1 - r}; }
};

class AttentionBlockTest : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t>> {};

TEST_P(AttentionBlockTest, TheRingGivesTheWholeSequencesAttentionAndGradients) {
  const auto [cp, nh, nkv] = GetParam();
  const Ring ring{{2, 8 * cp, nh, nkv, 8}, cp};
  const AttentionShape& s = ring.s;
  const int64_t C = ring.chunk(), qw = s.nh * s.hd, kw = s.nkv * s.hd;
  const std::vector<float> q = randn(s.B * s.S * qw, 1), k = randn(s.B * s.S * kw, 2), v = randn(s.B * s.S * kw, 3),
                           dout = randn(s.B * s.S * qw, 4);
  std::vector<float> out(q.size()), lse(size_t(s.B * s.nh * s.S));
  ASSERT_TRUE(attentionForward(s, q.data(), k.data(), v.data(), out.data(), lse.data()).isOk());
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  ASSERT_TRUE(attentionBackward(s, dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), dq.data(),
                                dk.data(), dv.data())
                  .isOk());

  std::vector<double> ringDq(dq.size(), 0.0), ringDk(dk.size(), 0.0), ringDv(dv.size(), 0.0);
  for (int64_t r = 0; r < cp; ++r)
    for (int64_t qc : ring.chunksOf(r)) {
      const std::vector<float> qBlock = rows(q, s.B, s.S, qw, qc * C, C), doBlock = rows(dout, s.B, s.S, qw, qc * C, C);
      // Forward: one step per key/value chunk, each merged into the running result.
      std::vector<float> o(qBlock.size(), 0.0f), l(size_t(s.B * s.nh * C), kNegInf);
      for (int64_t kc = 0; kc < 2 * cp; ++kc) {
        const AttentionBlock blk{s.B, C, C, s.nh, s.nkv, s.hd, qc * C, kc * C};
        std::vector<float> ob(o.size()), lb(l.size());
        ASSERT_TRUE(attentionBlockForward(blk, qBlock.data(), rows(k, s.B, s.S, kw, kc * C, C).data(),
                                          rows(v, s.B, s.S, kw, kc * C, C).data(), ob.data(), lb.data())
                        .isOk());
        attentionMerge(s.B, C, s.nh, s.hd, o.data(), l.data(), ob.data(), lb.data());
      }
      expectAllClose(o, rows(out, s.B, s.S, qw, qc * C, C), 1e-5, 1e-4, "out of chunk " + std::to_string(qc));
      expectAllClose(l, cols(lse, s.B * s.nh, s.S, qc * C, C), 1e-5, 1e-5, "lse of chunk " + std::to_string(qc));
      // Backward: each step's dq for this chunk, and dk, dv for the chunk it met (returned around the ring).
      std::vector<float> dqBlock(qBlock.size(), 0.0f);
      for (int64_t kc = 0; kc < 2 * cp; ++kc) {
        const AttentionBlock blk{s.B, C, C, s.nh, s.nkv, s.hd, qc * C, kc * C};
        std::vector<float> dkBlock(size_t(s.B * C * kw), 0.0f), dvBlock(dkBlock.size(), 0.0f);
        ASSERT_TRUE(attentionBlockBackward(blk, doBlock.data(), qBlock.data(), rows(k, s.B, s.S, kw, kc * C, C).data(),
                                           rows(v, s.B, s.S, kw, kc * C, C).data(), o.data(), l.data(), dqBlock.data(),
                                           dkBlock.data(), dvBlock.data())
                        .isOk());
        addRows(ringDk, dkBlock, s.B, s.S, kw, kc * C, C);
        addRows(ringDv, dvBlock, s.B, s.S, kw, kc * C, C);
      }
      addRows(ringDq, dqBlock, s.B, s.S, qw, qc * C, C);
    }
  expectAllClose(dq, ringDq, 1e-5, 1e-4, "dq");
  expectAllClose(dk, ringDk, 1e-5, 1e-4, "dk");
  expectAllClose(dv, ringDv, 1e-5, 1e-4, "dv");
}

// cp 1, 2, 4; multi-head, grouped-query and multi-query attention.
INSTANTIATE_TEST_SUITE_P(CpAndHeads, AttentionBlockTest,
                         ::testing::Values(std::make_tuple(int64_t(1), int64_t(2), int64_t(2)),
                                           std::make_tuple(int64_t(2), int64_t(4), int64_t(2)),
                                           std::make_tuple(int64_t(4), int64_t(4), int64_t(1)),
                                           std::make_tuple(int64_t(2), int64_t(2), int64_t(2))));

// Every rank's whole ring with its rows in the plan's layout (one block per step: this rank's S rows
// against member (c − step) mod n's, two runs each under the load-balanced layout): the merged out and
// lse are the whole sequence's at the rank's positions, and the blocks' backward contributions (dk, dv
// returned to the member that holds the rows) add up to the whole sequence's gradients.
class AttentionRingTest : public ::testing::TestWithParam<std::tuple<int64_t, CpLayout>> {};

// The ring's forward of rank c: out and lse of its S rows.
void ringForward(const AttentionShape& local, const std::vector<float>& q, const std::vector<float>& k,
                 const std::vector<float>& v, int64_t T, int64_t n, int64_t c, CpLayout layout, std::vector<float>& out,
                 std::vector<float>& lse) {
  const int64_t S = local.S, kw = local.nkv * local.hd;
  const PositionRuns qPos = contextParallelPositions(T, n, c, layout);
  const std::vector<float> qLocal = rowsAt(q, local.B, T, local.nh * local.hd, qPos, S);
  for (int64_t step = 0; step < n; ++step) {
    const PositionRuns kvPos = contextParallelPositions(T, n, (c - step + n) % n, layout);
    std::vector<float> ob(qLocal.size()), lb(size_t(local.B * local.nh * S));
    ASSERT_TRUE(attentionBlockForward(attentionBlock(local, qPos, kvPos), qLocal.data(),
                                      rowsAt(k, local.B, T, kw, kvPos, S).data(),
                                      rowsAt(v, local.B, T, kw, kvPos, S).data(), ob.data(), lb.data())
                    .isOk());
    if (step == 0) {
      out = ob;
      lse = lb;
      continue;
    }
    attentionMerge(local.B, S, local.nh, local.hd, out.data(), lse.data(), ob.data(), lb.data());
  }
}

TEST_P(AttentionRingTest, EveryRanksRingGivesTheWholeSequencesAttentionAndGradients) {
  const auto [n, layout] = GetParam();
  const AttentionShape s{2, 8 * n, 4, 2, 8};
  const int64_t T = s.S, S = T / n, qw = s.nh * s.hd, kw = s.nkv * s.hd;
  const AttentionShape local{s.B, S, s.nh, s.nkv, s.hd};
  const std::vector<float> q = randn(s.B * T * qw, 11), k = randn(s.B * T * kw, 12), v = randn(s.B * T * kw, 13),
                           dout = randn(s.B * T * qw, 14);
  std::vector<float> out(q.size()), lse(size_t(s.B * s.nh * T)), dq(q.size()), dk(k.size()), dv(v.size());
  ASSERT_TRUE(attentionForward(s, q.data(), k.data(), v.data(), out.data(), lse.data()).isOk());
  ASSERT_TRUE(attentionBackward(s, dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), dq.data(),
                                dk.data(), dv.data())
                  .isOk());
  std::vector<double> ringDq(dq.size(), 0.0), ringDk(dk.size(), 0.0), ringDv(dv.size(), 0.0);
  for (int64_t c = 0; c < n; ++c) {
    SCOPED_TRACE("rank " + std::to_string(c));
    const PositionRuns qPos = contextParallelPositions(T, n, c, layout);
    std::vector<float> o, l;
    ringForward(local, q, k, v, T, n, c, layout, o, l);
    expectAllClose(o, rowsAt(out, s.B, T, qw, qPos, S), 1e-5, 1e-5, "out");
    expectAllClose(l, colsAt(lse, s.B * s.nh, T, qPos, S), 1e-5, 1e-5, "lse");
    const std::vector<float> qLocal = rowsAt(q, s.B, T, qw, qPos, S), doLocal = rowsAt(dout, s.B, T, qw, qPos, S);
    std::vector<float> dqLocal(qLocal.size(), 0.0f);
    for (int64_t step = 0; step < n; ++step) {
      const PositionRuns kvPos = contextParallelPositions(T, n, (c - step + n) % n, layout);
      std::vector<float> dkB(size_t(s.B * S * kw), 0.0f), dvB(dkB.size(), 0.0f);
      ASSERT_TRUE(attentionBlockBackward(attentionBlock(local, qPos, kvPos), doLocal.data(), qLocal.data(),
                                         rowsAt(k, s.B, T, kw, kvPos, S).data(), rowsAt(v, s.B, T, kw, kvPos, S).data(),
                                         o.data(), l.data(), dqLocal.data(), dkB.data(), dvB.data())
                      .isOk());
      addRowsAt(ringDk, dkB, s.B, T, kw, kvPos, S);  // returned to the member that holds the rows
      addRowsAt(ringDv, dvB, s.B, T, kw, kvPos, S);
    }
    addRowsAt(ringDq, dqLocal, s.B, T, qw, qPos, S);
  }
  expectAllClose(dq, ringDq, 1e-5, 1e-5, "dq");
  expectAllClose(dk, ringDk, 1e-5, 1e-5, "dk");
  expectAllClose(dv, ringDv, 1e-5, 1e-5, "dv");
}

INSTANTIATE_TEST_SUITE_P(CpAndLayouts, AttentionRingTest,
                         ::testing::Combine(::testing::Values(int64_t(1), int64_t(2), int64_t(4)),
                                            ::testing::Values(CpLayout::kContiguous, CpLayout::kLoadBalanced)),
                         [](const auto& info) {
                           return "cp" + std::to_string(std::get<0>(info.param)) + "_" +
                                  std::string(schema::cpLayoutName(std::get<1>(info.param)));
                         });

// Two runs of positions: the keys a query row sees are a prefix of the block, counted per run. cp 2,
// T = 8, load-balanced: member 0 holds positions {0, 1, 6, 7}, member 1 {2, 3, 4, 5}.
TEST(AttentionBlockTest, TwoRunsSeeAPrefixOfTheKeys) {
  const AttentionShape local{1, 4, 1, 1, 8};
  const PositionRuns c0 = contextParallelPositions(8, 2, 0, CpLayout::kLoadBalanced),
                     c1 = contextParallelPositions(8, 2, 1, CpLayout::kLoadBalanced);
  const AttentionBlock early = attentionBlock(local, c0, c1), late = attentionBlock(local, c1, c0),
                       diag = attentionBlock(local, c0, c0);
  std::vector<int64_t> e, l, d;
  for (int64_t i = 0; i < 4; ++i) {
    e.push_back(attentionBlockVisibleKeys(early, i));
    l.push_back(attentionBlockVisibleKeys(late, i));
    d.push_back(attentionBlockVisibleKeys(diag, i));
  }
  EXPECT_EQ(e, (std::vector<int64_t>{0, 0, 4, 4}));  // queries 0, 1 see none of 2..5; 6, 7 all
  EXPECT_EQ(l, (std::vector<int64_t>{2, 2, 2, 2}));  // queries 2..5 see keys 0, 1 only
  EXPECT_EQ(d, (std::vector<int64_t>{1, 2, 3, 4}));  // the diagonal: keys 0, 1, 6, 7 in order
  // The rows that see no key get out 0 and lse −inf; the others are the plain softmax.
  const std::vector<float> q = randn(4 * 8, 21), k = randn(4 * 8, 22), v = randn(4 * 8, 23);
  std::vector<float> out(q.size()), lse(4);
  ASSERT_TRUE(attentionBlockForward(early, q.data(), k.data(), v.data(), out.data(), lse.data()).isOk());
  EXPECT_EQ(lse[0], kNegInf);
  EXPECT_EQ(lse[1], kNegInf);
  for (int c = 0; c < 16; ++c) EXPECT_EQ(out[size_t(c)], 0.0f);
  EXPECT_TRUE(std::isfinite(lse[2]) && std::isfinite(lse[3]));
  // Key positions must increase: a second run inside the first is refused.
  AttentionBlock bad = early;
  bad.kvStart2 = bad.kvStart;
  EXPECT_FALSE(attentionBlockForward(bad, q.data(), k.data(), v.data(), out.data(), lse.data()).isOk());
}

// A key block wholly after the query block: no row sees a key (out 0, lse −inf), and merging it
// changes nothing, bit for bit; merging into an empty result copies the other side.
TEST(AttentionBlockTest, AFutureBlockIsEmptyAndMergesToNothing) {
  const AttentionBlock future{1, 4, 4, 2, 1, 8, /*qStart=*/0, /*kvStart=*/4};
  const std::vector<float> q = randn(1 * 4 * 2 * 8, 5), k = randn(4 * 8, 6), v = randn(4 * 8, 7);
  std::vector<float> out(q.size(), 1.0f), lse(8, 1.0f);
  ASSERT_TRUE(attentionBlockForward(future, q.data(), k.data(), v.data(), out.data(), lse.data()).isOk());
  for (float x : out) EXPECT_EQ(x, 0.0f);
  for (float x : lse) EXPECT_EQ(x, kNegInf);

  const AttentionBlock diagonal{1, 4, 4, 2, 1, 8, 0, 0};
  std::vector<float> o(q.size()), l(8);
  ASSERT_TRUE(attentionBlockForward(diagonal, q.data(), k.data(), v.data(), o.data(), l.data()).isOk());
  std::vector<float> merged = o, mergedLse = l;
  attentionMerge(1, 4, 2, 8, merged.data(), mergedLse.data(), out.data(), lse.data());
  EXPECT_EQ(merged, o);
  EXPECT_EQ(mergedLse, l);
  std::vector<float> empty = out, emptyLse = lse;
  attentionMerge(1, 4, 2, 8, empty.data(), emptyLse.data(), o.data(), l.data());
  EXPECT_EQ(empty, o);
  EXPECT_EQ(emptyLse, l);
}

// The offsets are positions: a query block later in the sequence than its key block sees all of it
// (no mask), one on the diagonal sees the lower triangle.
TEST(AttentionBlockTest, OffsetsMaskByGlobalPosition) {
  const std::vector<float> q = randn(3 * 8, 8), k = randn(3 * 8, 9), v = randn(3 * 8, 10);
  std::vector<float> out(q.size()), lse(3);
  // Queries at 10..12 against keys at 0..2: every row sees all 3 keys, so row 0's lse is that of all 3.
  ASSERT_TRUE(
      attentionBlockForward({1, 3, 3, 1, 1, 8, 10, 0}, q.data(), k.data(), v.data(), out.data(), lse.data()).isOk());
  std::vector<float> diagOut(q.size()), diagLse(3);
  ASSERT_TRUE(
      attentionBlockForward({1, 3, 3, 1, 1, 8, 0, 0}, q.data(), k.data(), v.data(), diagOut.data(), diagLse.data())
          .isOk());
  EXPECT_EQ(lse[2], diagLse[2]);  // the last row sees all keys either way
  EXPECT_NE(lse[0], diagLse[0]);  // the first sees one key on the diagonal, three after it
  const float scale = attentionScale(8);
  double s0 = 0;
  for (int c = 0; c < 8; ++c) s0 += double(q[size_t(c)]) * k[size_t(c)];
  EXPECT_NEAR(diagLse[0], s0 * scale, 1e-5);  // one visible key: lse is its score
  EXPECT_FALSE(
      attentionBlockForward({1, 3, 3, 1, 1, 8, -1, 0}, q.data(), k.data(), v.data(), out.data(), lse.data()).isOk());
}

}  // namespace
}  // namespace llcdist::rt
