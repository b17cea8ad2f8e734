#include "TestUtil.h"
#include "llcdist/runtime/Kernels.h"

namespace llcdist::rt {
namespace {
using testing::checkGradient;
using testing::dot;
using testing::expectAllClose;
using testing::randn;

constexpr int64_t M = 4, H = 9;

TEST(LayerNormTest, ForwardMatchesTorchDefinition) {
  std::vector<float> x = randn(M * H, 1, 2.0f), g = randn(H, 2), b = randn(H, 3);
  for (float& v : x) v += 3.0f;  // a non-zero mean
  std::vector<float> y(M * H), mean(M), rstd(M);
  const float eps = 1e-5f;
  layerNormForward(x.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data(), M, H, eps);
  std::vector<double> ref(M * H), refMean(M), refRstd(M);
  for (int64_t m = 0; m < M; ++m) {
    double mu = 0, var = 0;
    for (int64_t h = 0; h < H; ++h) mu += x[m * H + h];
    mu /= H;
    for (int64_t h = 0; h < H; ++h) var += (x[m * H + h] - mu) * (x[m * H + h] - mu);
    var /= H;  // biased
    refMean[m] = mu;
    refRstd[m] = 1.0 / std::sqrt(var + eps);
    for (int64_t h = 0; h < H; ++h) ref[m * H + h] = (x[m * H + h] - mu) * refRstd[m] * g[h] + b[h];
  }
  expectAllClose(y, ref, 1e-5, 1e-5, "y");
  expectAllClose(mean, refMean, 1e-6, 1e-6, "mean");
  expectAllClose(rstd, refRstd, 1e-6, 1e-6, "rstd");
}

TEST(LayerNormTest, GradientsMatchFiniteDifferences) {
  std::vector<float> x = randn(M * H, 4), g = randn(H, 5), b = randn(H, 6), dy = randn(M * H, 7);
  const float eps = 1e-5f;
  std::vector<float> y(M * H), mean(M), rstd(M);
  const auto loss = [&] {
    std::vector<float> out(M * H), mu(M), rs(M);
    layerNormForward(x.data(), g.data(), b.data(), out.data(), mu.data(), rs.data(), M, H, eps);
    return dot(dy, out);
  };
  layerNormForward(x.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data(), M, H, eps);
  std::vector<float> dx(M * H), dg(H), db(H);
  layerNormBackwardInput(dy.data(), x.data(), g.data(), mean.data(), rstd.data(), dx.data(), M, H);
  layerNormBackwardWeight(dy.data(), x.data(), mean.data(), rstd.data(), dg.data(), db.data(), M, H, false);
  checkGradient(x, dx, loss, "dx");
  checkGradient(g, dg, loss, "dgamma");
  checkGradient(b, db, loss, "dbeta");

  std::vector<float> dg2 = dg, db2 = db;
  layerNormBackwardWeight(dy.data(), x.data(), mean.data(), rstd.data(), dg2.data(), db2.data(), M, H, true);
  for (int64_t h = 0; h < H; ++h) {
    EXPECT_FLOAT_EQ(dg2[h], 2 * dg[h]);
    EXPECT_FLOAT_EQ(db2[h], 2 * db[h]);
  }
}

TEST(RmsNormTest, ForwardMatchesHfDefinition) {
  std::vector<float> x = randn(M * H, 8, 3.0f), w = randn(H, 9);
  std::vector<float> y(M * H), rstd(M);
  const float eps = 1e-6f;
  rmsNormForward(x.data(), w.data(), y.data(), rstd.data(), M, H, eps);
  std::vector<double> ref(M * H);
  for (int64_t m = 0; m < M; ++m) {
    double ms = 0;
    for (int64_t h = 0; h < H; ++h) ms += double(x[m * H + h]) * x[m * H + h];
    const double r = 1.0 / std::sqrt(ms / H + eps);
    EXPECT_NEAR(rstd[m], r, 1e-6 * r);
    for (int64_t h = 0; h < H; ++h) ref[m * H + h] = w[h] * x[m * H + h] * r;
  }
  expectAllClose(y, ref, 1e-5, 1e-5, "y");
}

TEST(RmsNormTest, GradientsMatchFiniteDifferences) {
  std::vector<float> x = randn(M * H, 10), w = randn(H, 11), dy = randn(M * H, 12);
  const float eps = 1e-6f;
  const auto loss = [&] {
    std::vector<float> out(M * H), rs(M);
    rmsNormForward(x.data(), w.data(), out.data(), rs.data(), M, H, eps);
    return dot(dy, out);
  };
  std::vector<float> y(M * H), rstd(M), dx(M * H), dw(H);
  rmsNormForward(x.data(), w.data(), y.data(), rstd.data(), M, H, eps);
  rmsNormBackwardInput(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), M, H);
  rmsNormBackwardWeight(dy.data(), x.data(), rstd.data(), dw.data(), M, H, false);
  checkGradient(x, dx, loss, "dx");
  checkGradient(w, dw, loss, "dweight");
}

}  // namespace
}  // namespace llcdist::rt
