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
  checkGradient(
      logits, dlogits,
      [&] {
        double mean = 0;
        EXPECT_TRUE(crossEntropyForward(logits.data(), t.data(), nullptr, &mean, M, V).isOk());
        return mean / microbatches;
      },
      "dlogits", 1e-2f, 1e-5, 1e-2);

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

// ---- classifier (the LM head and the cross entropy, fused over chunks of rows) -------------------------

struct ClassifierCase {
  int64_t M, K, N, chunk, realVocab;
  WeightLayout layout;
  bool accumulate, withAcc;
};

// What the op computes, by the unfused ops on the whole [M, N] logits: linear_fwd, cross_entropy_fwd,
// cross_entropy_bwd in place, linear_bwd_input, linear_bwd_weight.
struct Unfused {
  double mean = 0;
  std::vector<float> dx, dw;
};
Unfused unfusedClassifier(const ClassifierCase& c, const std::vector<float>& x, const std::vector<float>& w,
                          const std::vector<int32_t>& t, const std::vector<float>& dw0, float gradScale) {
  Unfused u;
  std::vector<float> logits(size_t(c.M * c.N));
  linearForward(x.data(), w.data(), nullptr, logits.data(), c.M, c.K, c.N, c.layout);
  EXPECT_TRUE(crossEntropyForward(logits.data(), t.data(), nullptr, &u.mean, c.M, c.N, c.realVocab).isOk());
  EXPECT_TRUE(crossEntropyBackward(logits.data(), t.data(), logits.data(), c.M, c.N, gradScale, c.realVocab).isOk());
  u.dx.assign(size_t(c.M * c.K), 0.0f);
  u.dw = dw0;
  linearBackwardInput(logits.data(), w.data(), u.dx.data(), c.M, c.K, c.N, c.layout, false);
  linearBackwardWeight(logits.data(), x.data(), u.dw.data(), c.M, c.K, c.N, c.layout, c.accumulate);
  return u;
}

TEST(ClassifierTest, ChunkedOpMatchesTheUnfusedOps) {
  const std::vector<ClassifierCase> cases = {
      {7, 5, 9, 3, 0, WeightLayout::kOutIn, true, false},  {7, 5, 9, 1, 8, WeightLayout::kInOut, false, false},
      {7, 5, 9, 7, 0, WeightLayout::kOutIn, false, false}, {7, 5, 9, 4, 8, WeightLayout::kOutIn, true, true},
      {8, 3, 6, 2, 0, WeightLayout::kInOut, false, true},  {64, 16, 40, 24, 37, WeightLayout::kOutIn, true, true},
  };
  uint32_t seed = 10;
  for (const ClassifierCase& c : cases) {
    SCOPED_TRACE("M " + std::to_string(c.M) + " chunk " + std::to_string(c.chunk) + " realVocab " +
                 std::to_string(c.realVocab));
    std::vector<float> x = randn(c.M * c.K, seed++), w = randn(c.K * c.N, seed++), dw0 = randn(c.K * c.N, seed++);
    std::vector<int32_t> t = randIds(c.M, c.realVocab > 0 ? c.realVocab : c.N, seed++);
    const float gradScale = 1.0f / float(2 * c.M);
    const Unfused want = unfusedClassifier(c, x, w, t, dw0, gradScale);

    ClassifierParams p;
    p.linear = {c.M, c.K, c.N, c.layout, c.accumulate};
    p.chunk = c.chunk;
    p.gradScale = gradScale;
    p.realVocab = c.realVocab;
    std::vector<float> logits(size_t(c.chunk * c.N)), dx(size_t(c.M * c.K), 7.0f), dw = dw0,
                                                                                   acc(size_t(c.K * c.N), 3.0f);
    ClassifierArrays a{
        x.data(), w.data(), t.data(), logits.data(), dx.data(), dw.data(), c.withAcc ? acc.data() : nullptr, false};
    double total = 0;
    ASSERT_TRUE(classifierForwardBackward(a, p, &total).isOk());
    EXPECT_NEAR(total / double(c.M), want.mean, 1e-12 * std::abs(want.mean) + 1e-12);
    expectAllClose(dx, want.dx, 1e-6, 1e-5, "dx");
    expectAllClose(dw, want.dw, 1e-6, 1e-5, "dw");
  }
}

// dx and dw against finite differences of the mean loss the op reports (gradScale 1/M: the mean's).
TEST(ClassifierTest, GradientsMatchFiniteDifferences) {
  const ClassifierCase c{6, 4, 7, 4, 6, WeightLayout::kOutIn, false, true};
  std::vector<float> x = randn(c.M * c.K, 41), w = randn(c.K * c.N, 42);
  const std::vector<int32_t> t = randIds(c.M, c.realVocab, 43);
  ClassifierParams p;
  p.linear = {c.M, c.K, c.N, c.layout, false};
  p.chunk = c.chunk;
  p.gradScale = 1.0 / double(c.M);
  p.realVocab = c.realVocab;
  auto run = [&](std::vector<float>* dx, std::vector<float>* dw) {
    std::vector<float> logits(size_t(c.chunk * c.N)), dxs(size_t(c.M * c.K)), dws(size_t(c.K * c.N)),
        acc(size_t(c.K * c.N));
    double total = 0;
    EXPECT_TRUE(classifierForwardBackward(
                    {x.data(), w.data(), t.data(), logits.data(), dxs.data(), dws.data(), acc.data(), false}, p, &total)
                    .isOk());
    if (dx) *dx = dxs;
    if (dw) *dw = dws;
    return total / double(c.M);
  };
  std::vector<float> dx, dw;
  run(&dx, &dw);
  checkGradient(
      x, dx, [&] { return run(nullptr, nullptr); }, "dx", 1e-2f, 1e-4, 1e-2);
  checkGradient(
      w, dw, [&] { return run(nullptr, nullptr); }, "dw", 1e-2f, 1e-4, 1e-2);
}

// A target outside the real vocabulary fails before anything is written.
TEST(ClassifierTest, BadTargetWritesNothing) {
  ClassifierParams p;
  p.linear = {4, 2, 5, WeightLayout::kOutIn, false};
  p.chunk = 2;
  p.gradScale = 0.25;
  p.realVocab = 4;
  std::vector<float> x = randn(8, 1), w = randn(10, 2), logits(10, 1.5f), dx(8, 2.5f), dw(10, 3.5f);
  std::vector<int32_t> t = {0, 1, 2, 4};  // 4 is padding
  double total = 0;
  const Status s = classifierForwardBackward(
      {x.data(), w.data(), t.data(), logits.data(), dx.data(), dw.data(), nullptr, false}, p, &total);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.message();
  EXPECT_EQ(dx, std::vector<float>(8, 2.5f));
  EXPECT_EQ(dw, std::vector<float>(10, 3.5f));
  EXPECT_EQ(logits, std::vector<float>(10, 1.5f));
  EXPECT_EQ(total, 0.0);
}

}  // namespace
}  // namespace llcdist::rt
