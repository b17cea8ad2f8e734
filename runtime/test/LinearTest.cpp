#include "TestUtil.h"
#include "llcdist/runtime/Kernels.h"

namespace llcdist::rt {
namespace {
using testing::checkGradient;
using testing::dot;
using testing::expectAllClose;
using testing::randn;

struct LinearCase {
  WeightLayout layout;
  bool bias;
};

void PrintTo(const LinearCase& c, std::ostream* os) {
  *os << (c.layout == WeightLayout::kOutIn ? "OUT_IN" : "IN_OUT") << (c.bias ? "+bias" : "");
}

class LinearTest : public ::testing::TestWithParam<LinearCase> {
protected:
  static constexpr int64_t M = 5, K = 7, N = 6;
  std::vector<float> x = randn(M * K, 1), w = randn(N * K, 2, 0.5f), b = randn(N, 3), dy = randn(M * N, 4);

  float wAt(int64_t n, int64_t k) const {  // W as the math [N,K] matrix, whatever the layout
    return GetParam().layout == WeightLayout::kOutIn ? w[n * K + k] : w[k * N + n];
  }
  std::vector<float> forward() const {
    std::vector<float> y(M * N);
    linearForward(x.data(), w.data(), GetParam().bias ? b.data() : nullptr, y.data(), M, K, N,
                  GetParam().layout);
    return y;
  }
};

TEST_P(LinearTest, ForwardMatchesNaive) {
  std::vector<double> ref(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = GetParam().bias ? b[n] : 0.0;
      for (int64_t k = 0; k < K; ++k) s += double(x[m * K + k]) * wAt(n, k);
      ref[m * N + n] = s;
    }
  expectAllClose(forward(), ref, 1e-5, 1e-5, "y");
}

TEST_P(LinearTest, GradientsMatchFiniteDifferences) {
  const auto loss = [&] { return dot(dy, forward()); };
  std::vector<float> dx(M * K), dw(N * K), db(N);
  linearBackwardInput(dy.data(), w.data(), dx.data(), M, K, N, GetParam().layout, false);
  linearBackwardWeight(dy.data(), x.data(), dw.data(), M, K, N, GetParam().layout, false);
  checkGradient(x, dx, loss, "dx");
  checkGradient(w, dw, loss, "dw");
  if (GetParam().bias) {
    linearBackwardBias(dy.data(), db.data(), M, N, false);
    checkGradient(b, db, loss, "db");
  }
}

TEST_P(LinearTest, AccumulateAddsToExistingGradients) {
  std::vector<float> dx(M * K), dw(N * K), db(N);
  linearBackwardInput(dy.data(), w.data(), dx.data(), M, K, N, GetParam().layout, false);
  linearBackwardWeight(dy.data(), x.data(), dw.data(), M, K, N, GetParam().layout, false);
  linearBackwardBias(dy.data(), db.data(), M, N, false);
  std::vector<float> dx2 = randn(M * K, 7), dw2 = randn(N * K, 8), db2 = randn(N, 9);
  std::vector<double> dxRef(dx2.begin(), dx2.end()), dwRef(dw2.begin(), dw2.end()),
      dbRef(db2.begin(), db2.end());
  for (size_t i = 0; i < dx.size(); ++i) dxRef[i] += dx[i];
  for (size_t i = 0; i < dw.size(); ++i) dwRef[i] += dw[i];
  for (size_t i = 0; i < db.size(); ++i) dbRef[i] += db[i];
  linearBackwardInput(dy.data(), w.data(), dx2.data(), M, K, N, GetParam().layout, true);
  linearBackwardWeight(dy.data(), x.data(), dw2.data(), M, K, N, GetParam().layout, true);
  linearBackwardBias(dy.data(), db2.data(), M, N, true);
  expectAllClose(dx2, dxRef, 1e-6, 1e-6, "dx");
  expectAllClose(dw2, dwRef, 1e-6, 1e-6, "dw");
  expectAllClose(db2, dbRef, 1e-6, 1e-6, "db");
}

INSTANTIATE_TEST_SUITE_P(Layouts, LinearTest,
                         ::testing::Values(LinearCase{WeightLayout::kOutIn, true},
                                           LinearCase{WeightLayout::kOutIn, false},
                                           LinearCase{WeightLayout::kInOut, true},
                                           LinearCase{WeightLayout::kInOut, false}),
                         [](const auto& info) {
                           return std::string(info.param.layout == WeightLayout::kOutIn ? "OutIn"
                                                                                        : "InOut") +
                                  (info.param.bias ? "Bias" : "NoBias");
                         });

}  // namespace
}  // namespace llcdist::rt
