#include "TestUtil.h"
#include "llcdist/runtime/Kernels.h"

namespace llcdist::rt {
namespace {
using testing::checkGradient;
using testing::dot;
using testing::randn;

TEST(EmbeddingTest, ForwardGathersRows) {
  const int64_t V = 5, H = 3;
  std::vector<float> table = randn(V * H, 1);
  std::vector<int32_t> ids = {4, 0, 4, 2};
  std::vector<float> out(ids.size() * H);
  ASSERT_TRUE(embeddingForward(ids.data(), table.data(), out.data(), 4, V, H).isOk());
  for (size_t m = 0; m < ids.size(); ++m)
    for (int64_t h = 0; h < H; ++h) EXPECT_EQ(out[m * H + h], table[ids[m] * H + h]);
}

TEST(EmbeddingTest, BackwardScatterAddsRepeatedIds) {
  const int64_t V = 6, H = 4, M = 7;
  std::vector<int32_t> ids = {1, 3, 1, 5, 1, 0, 3};
  std::vector<float> table = randn(V * H, 2), dout = randn(M * H, 3);
  std::vector<float> dtable(V * H, 123.0f);  // garbage: accumulate=false must overwrite all rows
  ASSERT_TRUE(embeddingBackward(ids.data(), dout.data(), dtable.data(), M, V, H, false).isOk());
  EXPECT_EQ(dtable[2 * H], 0.0f);  // row 2 is never referenced
  const auto loss = [&] {
    std::vector<float> out(M * H);
    EXPECT_TRUE(embeddingForward(ids.data(), table.data(), out.data(), M, V, H).isOk());
    return dot(dout, out);
  };
  checkGradient(table, dtable, loss, "dtable");

  std::vector<float> acc = dtable;
  ASSERT_TRUE(embeddingBackward(ids.data(), dout.data(), acc.data(), M, V, H, true).isOk());
  for (size_t i = 0; i < acc.size(); ++i) EXPECT_FLOAT_EQ(acc[i], 2 * dtable[i]);
}

// torch's nn.Embedding(padding_idx): the padding id's rows add nothing (its row of dtable keeps its value
// under accumulate, 0 without), every other id scatter-adds as before; on a vocabulary shard the padding
// id is global. The expected table is summed here row by row.
TEST(EmbeddingTest, PaddingIdxGetsNoGradient) {
  const int64_t H = 2;
  const std::vector<int32_t> ids = {1, 4, 1, 5, 4, 0, 4};
  const int64_t M = int64_t(ids.size());
  const std::vector<float> dout = randn(M * H, 4);
  for (const auto& [V, shard] : {std::pair<int64_t, VocabShard>{6, {}}, {3, VocabShard{1, 2}}}) {
    const int64_t pad = 4, begin = shard.index * V;
    const std::vector<float> base = randn(V * H, 5);
    std::vector<float> want = base;
    for (int64_t m = 0; m < M; ++m)
      if (ids[m] != pad && ids[m] >= begin && ids[m] < begin + V)
        for (int64_t h = 0; h < H; ++h) want[(ids[m] - begin) * H + h] += dout[m * H + h];
    std::vector<float> got = base;
    ASSERT_TRUE(embeddingBackward(ids.data(), dout.data(), got.data(), M, V, H, true, shard, 1.0f, pad).isOk());
    EXPECT_EQ(got, want) << "V = " << V;
    for (int64_t h = 0; h < H; ++h) EXPECT_EQ(got[(pad - begin) * H + h], base[(pad - begin) * H + h]);
    ASSERT_TRUE(embeddingBackward(ids.data(), dout.data(), got.data(), M, V, H, false, shard, 1.0f, pad).isOk());
    for (int64_t h = 0; h < H; ++h) EXPECT_EQ(got[(pad - begin) * H + h], 0.0f);
    // The control: without padding_idx the row gets the three ids' rows.
    ASSERT_TRUE(embeddingBackward(ids.data(), dout.data(), got.data(), M, V, H, false, shard).isOk());
    EXPECT_NE(got[(pad - begin) * H], 0.0f);
  }
}

TEST(EmbeddingTest, OutOfRangeIdIsAnError) {
  const int64_t V = 4, H = 2;
  std::vector<float> table(V * H), out(2 * H), dtable(V * H);
  for (std::vector<int32_t> ids : {std::vector<int32_t>{1, 4}, std::vector<int32_t>{-1, 0}}) {
    Status s = embeddingForward(ids.data(), table.data(), out.data(), 2, V, H);
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
    EXPECT_NE(s.message().find("outside the vocabulary [0, 4)"), std::string::npos) << s.message();
    EXPECT_FALSE(embeddingBackward(ids.data(), out.data(), dtable.data(), 2, V, H, false).isOk());
  }
}

TEST(PositionEmbeddingTest, ForwardAndWeightGradient) {
  const int64_t B = 2, S = 3, H = 4, P = 5;
  std::vector<float> x = randn(B * S * H, 1), wpe = randn(P * H, 2), dy = randn(B * S * H, 3);
  std::vector<float> y(B * S * H);
  ASSERT_TRUE(positionEmbeddingForward(x.data(), wpe.data(), y.data(), B, S, H, P).isOk());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h)
        EXPECT_EQ(y[(b * S + s) * H + h], x[(b * S + s) * H + h] + wpe[s * H + h]);

  std::vector<float> dwpe(P * H, 7.0f);
  ASSERT_TRUE(positionEmbeddingBackwardWeight(dy.data(), dwpe.data(), B, S, H, P, false).isOk());
  for (int64_t i = S * H; i < P * H; ++i) EXPECT_EQ(dwpe[i], 0.0f);
  const auto loss = [&] {
    std::vector<float> out(B * S * H);
    EXPECT_TRUE(positionEmbeddingForward(x.data(), wpe.data(), out.data(), B, S, H, P).isOk());
    return dot(dy, out);
  };
  checkGradient(wpe, dwpe, loss, "dwpe");

  // In place (y aliases x) is allowed.
  std::vector<float> inplace = x;
  ASSERT_TRUE(positionEmbeddingForward(inplace.data(), wpe.data(), inplace.data(), B, S, H, P).isOk());
  EXPECT_EQ(inplace, y);
}

TEST(PositionEmbeddingTest, SequenceLongerThanTableIsAnError) {
  std::vector<float> x(6 * 2), wpe(4 * 2);
  EXPECT_EQ(positionEmbeddingForward(x.data(), wpe.data(), x.data(), 1, 6, 2, 4).code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(positionEmbeddingBackwardWeight(x.data(), wpe.data(), 1, 6, 2, 4, false).isOk());
}

// Sequence parallelism (attr shard_axis): x/y/dy hold positions [posBegin, posBegin + S) of the sequence.
TEST(PositionEmbeddingTest, PositionOffsetMatchesADirectLoop) {
  const int64_t B = 3, S = 2, H = 5, P = 7;
  const std::vector<float> x = randn(B * S * H, 11), wpe = randn(P * H, 12), dy = randn(B * S * H, 13);
  for (int64_t begin : {0, 1, 3, 5}) {  // 5: the last two rows, [5, 7)
    SCOPED_TRACE("posBegin " + std::to_string(begin));
    std::vector<float> y(size_t(B * S * H)), want(size_t(B * S * H));
    ASSERT_TRUE(positionEmbeddingForward(x.data(), wpe.data(), y.data(), B, S, H, P, begin).isOk());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t h = 0; h < H; ++h)
          want[size_t((b * S + s) * H + h)] = x[size_t((b * S + s) * H + h)] + wpe[size_t((begin + s) * H + h)];
    EXPECT_EQ(y, want);
    std::vector<float> inplace = x;  // y may alias x
    ASSERT_TRUE(positionEmbeddingForward(inplace.data(), wpe.data(), inplace.data(), B, S, H, P, begin).isOk());
    EXPECT_EQ(inplace, want);

    // Backward: rows [begin, begin + S) get Σ_b dy (b in order), every other row is zeroed
    // (accumulate = false) or left alone (accumulate = true).
    const std::vector<float> init = randn(P * H, 14);
    std::vector<float> dwpe = init, wantOver(size_t(P * H), 0.0f), wantAcc = init;
    ASSERT_TRUE(positionEmbeddingBackwardWeight(dy.data(), dwpe.data(), B, S, H, P, false, begin).isOk());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t h = 0; h < H; ++h) {
          wantOver[size_t((begin + s) * H + h)] += dy[size_t((b * S + s) * H + h)];
          wantAcc[size_t((begin + s) * H + h)] += dy[size_t((b * S + s) * H + h)];
        }
    EXPECT_EQ(dwpe, wantOver);
    dwpe = init;
    ASSERT_TRUE(positionEmbeddingBackwardWeight(dy.data(), dwpe.data(), B, S, H, P, true, begin).isOk());
    EXPECT_EQ(dwpe, wantAcc);
  }
  // posBegin = 0 is the default (the unsharded kernel), bit for bit.
  std::vector<float> a(size_t(B * S * H)), b(size_t(B * S * H));
  ASSERT_TRUE(positionEmbeddingForward(x.data(), wpe.data(), a.data(), B, S, H, P).isOk());
  ASSERT_TRUE(positionEmbeddingForward(x.data(), wpe.data(), b.data(), B, S, H, P, 0).isOk());
  EXPECT_EQ(a, b);
}

TEST(PositionEmbeddingTest, ShardPastTheTableIsAnError) {
  // S = 3 positions from posBegin = 3: [3, 6) does not fit P = 5 (shard c = 1 of a 6-long sequence).
  const int64_t B = 1, S = 3, H = 2, P = 5;
  std::vector<float> x(size_t(B * S * H), 1.0f), wpe(size_t(P * H), 2.0f), y(size_t(B * S * H), -1.0f);
  const std::vector<float> wpe0 = wpe;
  Status s = positionEmbeddingForward(x.data(), wpe.data(), y.data(), B, S, H, P, 3);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  for (const char* part : {"positions [3, 6)", "5 positions"}) EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
  EXPECT_EQ(y, std::vector<float>(size_t(B * S * H), -1.0f));  // nothing written
  s = positionEmbeddingBackwardWeight(x.data(), wpe.data(), B, S, H, P, false, 3);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("positions [3, 6)"), std::string::npos) << s.message();
  EXPECT_EQ(wpe, wpe0);  // not zeroed on error
  // [2, 5) fits exactly; a negative start is an error.
  EXPECT_TRUE(positionEmbeddingForward(x.data(), wpe.data(), y.data(), B, S, H, P, 2).isOk());
  s = positionEmbeddingForward(x.data(), wpe.data(), y.data(), B, S, H, P, -1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("negative"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace llcdist::rt
