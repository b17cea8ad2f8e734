#include "TestUtil.h"
#include "llcdist/runtime/Kernels.h"

namespace llcdist::rt {
namespace {
using testing::checkGradient;
using testing::expectAllClose;
using testing::randIds;
using testing::randn;

TEST(CrossEntropyTest, UniformLogitsGiveLogV) {
  const int64_t M = 3, V = 50;
  std::vector<float> logits(M * V, 0.25f), losses(M);
  std::vector<int32_t> t = {0, 17, 49};
  double mean = 0;
  ASSERT_TRUE(crossEntropyForward(logits.data(), t.data(), losses.data(), &mean, M, V).isOk());
  EXPECT_NEAR(mean, std::log(50.0), 1e-6);
  for (float l : losses) EXPECT_NEAR(l, std::log(50.0), 1e-6);
}

TEST(CrossEntropyTest, ForwardMatchesNaiveAndIsStable) {
  const int64_t M = 4, V = 11;
  std::vector<float> logits = randn(M * V, 1, 3.0f);
  for (int64_t j = 0; j < V; ++j) logits[3 * V + j] += 1000.0f;  // would overflow a naive exp
  std::vector<int32_t> t = randIds(M, V, 2);
  std::vector<float> losses(M);
  double mean = 0;
  ASSERT_TRUE(crossEntropyForward(logits.data(), t.data(), losses.data(), &mean, M, V).isOk());
  std::vector<double> ref(M);
  double refMean = 0;
  for (int64_t m = 0; m < M; ++m) {
    double mx = -1e300, s = 0;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, double(logits[m * V + j]));
    for (int64_t j = 0; j < V; ++j) s += std::exp(logits[m * V + j] - mx);
    ref[m] = -(logits[m * V + t[m]] - mx - std::log(s));
    refMean += ref[m] / M;
  }
  expectAllClose(losses, ref, 1e-5, 1e-5, "loss");
  EXPECT_NEAR(mean, refMean, 1e-6);
}

TEST(CrossEntropyTest, BackwardMatchesFiniteDifferencesWithScale) {
  const int64_t M = 3, V = 7;
  std::vector<float> logits = randn(M * V, 3), dlogits(M * V);
  std::vector<int32_t> t = randIds(M, V, 4);
  const float microbatches = 2.0f;
  const float scale = 1.0f / (M * microbatches);
  ASSERT_TRUE(crossEntropyBackward(logits.data(), t.data(), dlogits.data(), M, V, scale).isOk());
  checkGradient(logits, dlogits, [&] {
    double mean = 0;
    EXPECT_TRUE(crossEntropyForward(logits.data(), t.data(), nullptr, &mean, M, V).isOk());
    return mean / microbatches;
  }, "dlogits", 1e-2f, 1e-5, 1e-2);

  // In place (dlogits aliases logits) gives the same result.
  std::vector<float> inplace = logits;
  ASSERT_TRUE(crossEntropyBackward(inplace.data(), t.data(), inplace.data(), M, V, scale).isOk());
  EXPECT_EQ(inplace, dlogits);
}

TEST(CrossEntropyTest, OutOfRangeTargetIsAnError) {
  std::vector<float> logits(2 * 3);
  std::vector<int32_t> t = {0, 3};
  double mean;
  Status s = crossEntropyForward(logits.data(), t.data(), nullptr, &mean, 2, 3);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("target 3 at position 1"), std::string::npos) << s.message();
  EXPECT_FALSE(crossEntropyBackward(logits.data(), t.data(), logits.data(), 2, 3, 1.0f).isOk());
}

}  // namespace
}  // namespace llcdist::rt
