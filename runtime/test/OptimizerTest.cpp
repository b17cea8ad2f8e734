#include "TestUtil.h"
#include "llcdist/runtime/Kernels.h"

namespace llcdist::rt {
namespace {
using testing::expectAllClose;
using testing::randn;

TEST(AdamWTest, FirstStepByHand) {
  // t = 1: m̂ = g and v̂ = g², so p ← p·(1 - lr·wd) - lr·g/(|g| + eps).
  AdamWConfig cfg;
  cfg.lr = 0.1;
  cfg.weightDecay = 0.01;
  std::vector<float> p = {1.0f, -2.0f}, g = {0.5f, -3.0f}, m(2, 0.0f), v(2, 0.0f);
  ASSERT_TRUE(adamwStep(p.data(), g.data(), m.data(), v.data(), 2, 1, cfg).isOk());
  EXPECT_NEAR(p[0], 1.0 * 0.999 - 0.1, 1e-6);
  EXPECT_NEAR(p[1], -2.0 * 0.999 + 0.1, 1e-6);
  EXPECT_NEAR(m[0], 0.05, 1e-8);
  EXPECT_NEAR(v[1], 0.001 * 9.0, 1e-8);
}

TEST(AdamWTest, SeveralStepsMatchTorchFormulaInDouble) {
  AdamWConfig cfg;
  cfg.lr = 3e-3;
  cfg.beta1 = 0.8;
  cfg.beta2 = 0.95;
  cfg.eps = 1e-6;
  cfg.weightDecay = 0.1;
  const int64_t n = 32;
  std::vector<float> p = randn(n, 1), m(n, 0.0f), v(n, 0.0f);
  std::vector<double> pr(p.begin(), p.end()), mr(n, 0.0), vr(n, 0.0);
  for (int64_t t = 1; t <= 5; ++t) {
    std::vector<float> g = randn(n, 100 + t);
    ASSERT_TRUE(adamwStep(p.data(), g.data(), m.data(), v.data(), n, t, cfg).isOk());
    for (int64_t i = 0; i < n; ++i) {
      pr[i] *= 1 - cfg.lr * cfg.weightDecay;
      mr[i] = cfg.beta1 * mr[i] + (1 - cfg.beta1) * g[i];
      vr[i] = cfg.beta2 * vr[i] + (1 - cfg.beta2) * double(g[i]) * g[i];
      const double mhat = mr[i] / (1 - std::pow(cfg.beta1, t));
      const double vhat = vr[i] / (1 - std::pow(cfg.beta2, t));
      pr[i] -= cfg.lr * mhat / (std::sqrt(vhat) + cfg.eps);
    }
  }
  expectAllClose(p, pr, 1e-6, 1e-5, "param");
  expectAllClose(m, mr, 1e-7, 1e-5, "exp_avg");
  expectAllClose(v, vr, 1e-8, 1e-5, "exp_avg_sq");
  EXPECT_FALSE(adamwStep(p.data(), p.data(), m.data(), v.data(), n, 0, cfg).isOk());
}

TEST(SgdTest, PlainMomentumNesterovAndWeightDecay) {
  const std::vector<float> g1 = {1.0f, -2.0f}, g2 = {0.5f, 4.0f};
  {  // plain
    SgdConfig cfg;
    cfg.lr = 0.1;
    std::vector<float> p = {1.0f, 1.0f};
    ASSERT_TRUE(sgdStep(p.data(), g1.data(), nullptr, 2, 1, cfg).isOk());
    EXPECT_FLOAT_EQ(p[0], 0.9f);
    EXPECT_FLOAT_EQ(p[1], 1.2f);
  }
  {  // momentum: buf1 = g1, buf2 = 0.9·g1 + g2
    SgdConfig cfg;
    cfg.lr = 0.1;
    cfg.momentum = 0.9;
    std::vector<float> p = {1.0f, 1.0f}, buf(2, 42.0f);  // garbage buffer: step 1 overwrites it
    ASSERT_TRUE(sgdStep(p.data(), g1.data(), buf.data(), 2, 1, cfg).isOk());
    ASSERT_TRUE(sgdStep(p.data(), g2.data(), buf.data(), 2, 2, cfg).isOk());
    EXPECT_NEAR(buf[0], 0.9 * 1.0 + 0.5, 1e-6);
    EXPECT_NEAR(p[0], 1.0 - 0.1 * 1.0 - 0.1 * 1.4, 1e-6);
    EXPECT_NEAR(p[1], 1.0 + 0.2 - 0.1 * (0.9 * -2.0 + 4.0), 1e-6);
  }
  {  // nesterov + weight decay: g' = g + wd·p; buf as above on g'; step with g' + momentum·buf
    SgdConfig cfg;
    cfg.lr = 0.1;
    cfg.momentum = 0.5;
    cfg.weightDecay = 0.1;
    cfg.nesterov = true;
    std::vector<float> p = {2.0f}, buf(1);
    std::vector<float> g = {1.0f};
    ASSERT_TRUE(sgdStep(p.data(), g.data(), buf.data(), 1, 1, cfg).isOk());
    const double gp = 1.0 + 0.1 * 2.0;  // 1.2, buf = 1.2
    const double p1 = 2.0 - 0.1 * (gp + 0.5 * gp);
    EXPECT_NEAR(p[0], p1, 1e-6);
    ASSERT_TRUE(sgdStep(p.data(), g.data(), buf.data(), 1, 2, cfg).isOk());
    const double gp2 = 1.0 + 0.1 * p1, buf2 = 0.5 * gp + gp2;
    EXPECT_NEAR(buf[0], buf2, 1e-6);
    EXPECT_NEAR(p[0], p1 - 0.1 * (gp2 + 0.5 * buf2), 1e-6);
  }
  SgdConfig needsBuf;
  needsBuf.momentum = 0.9;
  std::vector<float> p(1), g(1);
  EXPECT_EQ(sgdStep(p.data(), g.data(), nullptr, 1, 1, needsBuf).code(), StatusCode::kInvalidArgument);
}

TEST(ClipTest, GlobalNormAndClipping) {
  std::vector<float> a = {3.0f, 4.0f}, b = {12.0f};
  std::vector<GradSpan> grads = {{a.data(), 2}, {b.data(), 1}};
  EXPECT_DOUBLE_EQ(globalGradNorm(grads), 13.0);
  // max_norm above the norm: coefficient clamps to 1 and nothing changes.
  EXPECT_DOUBLE_EQ(clipGradNorm(grads, 20.0), 13.0);
  EXPECT_EQ(a[0], 3.0f);
  EXPECT_EQ(b[0], 12.0f);
  EXPECT_EQ(clipCoefficient(13.0, 20.0), 1.0f);
  // max_norm below: scaled by max_norm / (norm + 1e-6).
  EXPECT_DOUBLE_EQ(clipGradNorm(grads, 6.5), 13.0);
  const float coef = static_cast<float>(6.5 / (13.0 + 1e-6));
  EXPECT_EQ(a[0], 3.0f * coef);
  EXPECT_EQ(a[1], 4.0f * coef);
  EXPECT_EQ(b[0], 12.0f * coef);
  EXPECT_NEAR(globalGradNorm(grads), 6.5, 1e-5);
  EXPECT_DOUBLE_EQ(sumOfSquares(a.data(), 2) + sumOfSquares(b.data(), 1),
                   std::pow(globalGradNorm(grads), 2));
}

// The split norm's local steps (grad_norm_sq / grad_norm_clip) against a direct computation: a flat
// long-double sum of squares over every counted element (a different association, so within a
// relative 1e-14), the replica rule, the added partial sum, and the clip.
TEST(ClipTest, SplitNormPartialAndFinishMatchADirectComputation) {
  std::vector<float> a = randn(37, 1), b = randn(5, 2), r = randn(11, 3);
  const std::vector<GradSpan> grads = {{a.data(), 37}, {b.data(), 5}}, replicas = {{r.data(), 11}};
  long double want = 0;
  for (const std::vector<float>* v : {&a, &b})
    for (float x : *v) want += (long double)x * x;
  long double wantReplicas = want;
  for (float x : r) wantReplicas += (long double)x * x;
  EXPECT_NEAR(gradNormPartial(grads, replicas, false, 0.0), double(want), 1e-14 * double(want));
  EXPECT_NEAR(gradNormPartial(grads, replicas, true, 0.0), double(wantReplicas), 1e-14 * double(wantReplicas));
  // `add` (the all-reduced partial sum of the split gradients) is added last: exactly s + add.
  const double s = gradNormPartial(grads, {}, false, 0.0);
  EXPECT_EQ(gradNormPartial(grads, {}, false, 2.5), s + 2.5);
  EXPECT_EQ(gradNormPartial({}, {}, false, 0.0), 0.0);  // a stage without counted gradients
  // Finish: sqrt, and the clip of every list by min(1, max / (norm + 1e-6)) only when it is < 1.
  std::vector<float> x = {3.0f, 4.0f}, y = {12.0f};
  const std::vector<GradSpan> xs = {{x.data(), 2}}, ys = {{y.data(), 1}};
  EXPECT_DOUBLE_EQ(gradNormFinish(169.0, 0.0, {&xs, &ys}), 13.0);  // max_norm 0: no clip
  EXPECT_EQ(x, (std::vector<float>{3.0f, 4.0f}));
  EXPECT_DOUBLE_EQ(gradNormFinish(169.0, 20.0, {&xs, &ys}), 13.0);  // coefficient >= 1: unchanged
  EXPECT_EQ(y[0], 12.0f);
  EXPECT_DOUBLE_EQ(gradNormFinish(169.0, 6.5, {&xs, &ys}), 13.0);
  const float coef = float(6.5 / (13.0 + 1e-6));
  EXPECT_EQ(x, (std::vector<float>{3.0f * coef, 4.0f * coef}));
  EXPECT_EQ(y[0], 12.0f * coef);
}

// The split over shards reproduces the one-rank norm: grad_norm_sq per shard, their member-order sum
// (the all_reduce), the replicated part added, then the finish, against clipGradNorm over everything.
TEST(ClipTest, SplitNormOverShardsIsTheWholeNorm) {
  std::vector<float> rep = randn(9, 4), s0 = randn(16, 5), s1 = randn(16, 6);
  std::vector<float> rep2 = rep, s02 = s0, s12 = s1;
  const double whole = clipGradNorm({{rep2.data(), 9}, {s02.data(), 16}, {s12.data(), 16}}, 1.0);
  const double shardSum = gradNormPartial({{s0.data(), 16}}, {}, false, 0.0) +
                          gradNormPartial({{s1.data(), 16}}, {}, false, 0.0);
  const double total = gradNormPartial({{rep.data(), 9}}, {}, false, shardSum);
  const std::vector<GradSpan> r = {{rep.data(), 9}}, a = {{s0.data(), 16}}, b = {{s1.data(), 16}};
  const double norm = gradNormFinish(total, 1.0, {&r, &a, &b});
  EXPECT_NEAR(norm, whole, 1e-14 * whole);
  expectAllClose(rep, rep2, 1e-7, 1e-6, "replicated");
  expectAllClose(s0, s02, 1e-7, 1e-6, "shard 0");
  expectAllClose(s1, s12, 1e-7, 1e-6, "shard 1");
}

TEST(LrScheduleTest, WarmupCosineAndConstant) {
  LrSchedule s;
  s.kind = LrSchedule::Kind::kWarmupCosine;
  s.maxLr = 1e-3;
  s.minLr = 1e-4;
  s.warmupSteps = 10;
  s.totalSteps = 110;
  EXPECT_DOUBLE_EQ(learningRate(s, 0), 1e-4);    // (0+1)/10 · max
  EXPECT_DOUBLE_EQ(learningRate(s, 4), 5e-4);
  EXPECT_DOUBLE_EQ(learningRate(s, 9), 1e-3);
  EXPECT_DOUBLE_EQ(learningRate(s, 10), 1e-3);   // cosine starts at max
  EXPECT_NEAR(learningRate(s, 60), 5.5e-4, 1e-15);  // halfway: (max + min) / 2
  EXPECT_NEAR(learningRate(s, 35), 1e-4 + 0.5 * (1 + std::cos(M_PI * 0.25)) * 9e-4, 1e-15);
  EXPECT_DOUBLE_EQ(learningRate(s, 110), 1e-4);
  EXPECT_DOUBLE_EQ(learningRate(s, 500), 1e-4);  // stays at min

  LrSchedule c;
  c.maxLr = 2e-3;
  EXPECT_DOUBLE_EQ(learningRate(c, 0), 2e-3);
  EXPECT_DOUBLE_EQ(learningRate(c, 1000), 2e-3);
  c.warmupSteps = 4;
  EXPECT_DOUBLE_EQ(learningRate(c, 1), 1e-3);
  EXPECT_DOUBLE_EQ(learningRate(c, 4), 2e-3);
}

}  // namespace
}  // namespace llcdist::rt
