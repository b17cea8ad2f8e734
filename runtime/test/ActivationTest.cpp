#include "TestUtil.h"
#include "llcdist/runtime/Kernels.h"

#include <algorithm>

namespace llcdist::rt {
namespace {
using testing::checkGradient;
using testing::dot;
using testing::expectAllClose;
using testing::randn;

constexpr int64_t N = 64;

TEST(GeluTest, ForwardMatchesHfGeluNew) {
  std::vector<float> x = randn(N, 1, 3.0f), y(N);
  geluTanhForward(x.data(), y.data(), N);
  std::vector<double> ref(N);
  for (int64_t i = 0; i < N; ++i) {
    const double v = x[i];
    ref[i] = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
  }
  expectAllClose(y, ref, 1e-6, 1e-5, "gelu");
}

TEST(GeluTest, BackwardMatchesFiniteDifferences) {
  std::vector<float> x = randn(N, 2, 2.0f), dy = randn(N, 3), dx(N);
  geluTanhBackward(dy.data(), x.data(), dx.data(), N);
  checkGradient(x, dx, [&] {
    std::vector<float> y(N);
    geluTanhForward(x.data(), y.data(), N);
    return dot(dy, y);
  }, "dx");
}

TEST(GeluErfTest, ForwardMatchesTheDefinitionAndBackwardFiniteDifferences) {
  std::vector<float> x = randn(N, 9, 3.0f), y(N), dy = randn(N, 10), dx(N);
  geluErfForward(x.data(), y.data(), N);
  std::vector<double> ref(N);
  for (int64_t i = 0; i < N; ++i) ref[i] = 0.5 * double(x[i]) * std::erfc(-double(x[i]) / std::sqrt(2.0));
  expectAllClose(y, ref, 1e-6, 1e-5, "gelu_erf");
  // Not the tanh approximation: the two differ by up to ~5e-4 near |x| = 2.
  std::vector<float> tanhY(N);
  geluTanhForward(x.data(), tanhY.data(), N);
  double most = 0;
  for (int64_t i = 0; i < N; ++i) most = std::max(most, std::abs(double(tanhY[i]) - ref[i]));
  EXPECT_GT(most, 1e-5);
  geluErfBackward(dy.data(), x.data(), dx.data(), N);
  checkGradient(
      x, dx,
      [&] {
        std::vector<float> out(N);
        geluErfForward(x.data(), out.data(), N);
        return dot(dy, out);
      },
      "dx");
}

// torch's clamp: the bound on both sides, the gradient passed where the
// input lies within them (ends included), none where it was clamped.
TEST(ClampTest, ForwardClampsAndBackwardPassesTheUnclampedOnly) {
  std::vector<float> x = randn(N, 11, 2.0f), y(N), dy = randn(N, 12), dx(N);
  x[0] = 0.5f, x[1] = -0.5f, x[2] = 0.25f;  // both bounds exactly, and one inside
  clampForward(x.data(), y.data(), N, 0.5f);
  int clamped = 0;
  for (int64_t i = 0; i < N; ++i) {
    const bool inside = x[i] >= -0.5f && x[i] <= 0.5f;
    clamped += !inside;
    EXPECT_EQ(y[i], inside ? x[i] : (x[i] > 0 ? 0.5f : -0.5f)) << i;
  }
  EXPECT_GT(clamped, N / 2);  // the test clamps most of the input
  clampBackward(dy.data(), x.data(), dx.data(), N, 0.5f);
  for (int64_t i = 0; i < N; ++i) EXPECT_EQ(dx[i], x[i] >= -0.5f && x[i] <= 0.5f ? dy[i] : 0.0f) << i;
  EXPECT_EQ(dx[0], dy[0]);
  EXPECT_EQ(dx[1], dy[1]);
}

// torch's relu and threshold_backward: 0 below zero (and its gradient 0 at zero itself), x and dy above.
TEST(ReluTest, ForwardAndBackwardMatchTheDefinition) {
  std::vector<float> x = randn(N, 13, 2.0f), y(N), dy = randn(N, 14), dx(N);
  x[0] = 0.0f, x[1] = -0.0f, x[2] = 1e-30f, x[3] = -1e-30f;
  reluForward(x.data(), y.data(), N);
  int zeroed = 0;
  for (int64_t i = 0; i < N; ++i) {
    zeroed += x[i] < 0.0f;
    EXPECT_EQ(y[i], x[i] < 0.0f ? 0.0f : x[i]) << i;
  }
  EXPECT_GT(zeroed, N / 4);  // both sides are exercised
  EXPECT_GT(N - zeroed, N / 4);
  reluBackward(dy.data(), x.data(), dx.data(), N);
  for (int64_t i = 0; i < N; ++i) EXPECT_EQ(dx[i], x[i] > 0.0f ? dy[i] : 0.0f) << i;
  EXPECT_EQ(dx[0], 0.0f);  // x = 0: no gradient (torch)
  EXPECT_EQ(dx[2], dy[2]);
  EXPECT_EQ(dx[3], 0.0f);
  const float nan = std::nanf("");
  reluForward(&nan, y.data(), 1);
  EXPECT_TRUE(std::isnan(y[0]));  // torch.relu(nan) is nan
}

// y = x·factor, in place too; a power of two scales exactly (Cohere's 0.0625).
TEST(ScaleTest, ForwardMultipliesEveryElement) {
  std::vector<float> x = randn(N, 15, 3.0f), y(N);
  scaleForward(x.data(), y.data(), N, 0.0625f);
  for (int64_t i = 0; i < N; ++i) EXPECT_EQ(double(y[i]), double(x[i]) / 16.0) << i;
  scaleForward(x.data(), y.data(), N, 0.8333333f);
  for (int64_t i = 0; i < N; ++i) EXPECT_EQ(y[i], x[i] * 0.8333333f) << i;
  scaleForward(y.data(), y.data(), N, -2.0f);
  for (int64_t i = 0; i < N; ++i) EXPECT_EQ(y[i], x[i] * 0.8333333f * -2.0f) << i;
}

TEST(SwigluTest, ForwardAndBackward) {
  std::vector<float> g = randn(N, 4, 2.0f), u = randn(N, 5), dy = randn(N, 6), y(N);
  swigluForward(g.data(), u.data(), y.data(), N);
  std::vector<double> ref(N);
  for (int64_t i = 0; i < N; ++i) ref[i] = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * u[i];
  expectAllClose(y, ref, 1e-6, 1e-5, "swiglu");

  std::vector<float> dg(N), du(N);
  swigluBackward(dy.data(), g.data(), u.data(), dg.data(), du.data(), N);
  const auto loss = [&] {
    std::vector<float> out(N);
    swigluForward(g.data(), u.data(), out.data(), N);
    return dot(dy, out);
  };
  checkGradient(g, dg, loss, "dgate");
  checkGradient(u, du, loss, "dup");
}

TEST(AddTest, AddAndAccumulate) {
  std::vector<float> a = randn(N, 7), b = randn(N, 8), y(N);
  addForward(a.data(), b.data(), y.data(), N);
  for (int64_t i = 0; i < N; ++i) EXPECT_EQ(y[i], a[i] + b[i]);
  accumulateInto(a.data(), y.data(), N);
  for (int64_t i = 0; i < N; ++i) EXPECT_EQ(y[i], (a[i] + b[i]) + a[i]);
}

}  // namespace
}  // namespace llcdist::rt
