// The mixture-of-experts kernels (Moe.cpp): each forward against a reference written here in double from
// the definitions (HF Mixtral / Qwen2-MoE: softmax, torch.topk, optional renormalisation, the
// load-balancing loss as transformers writes it; expert-major
// rows; per-expert out_in GEMMs; the shared expert's sigmoid gate), each backward against central
// differences of its forward; ties, k = 1 and k = E, empty groups, rows past the groups, ids out of range;
// moe_permute's capacity (token dropping) against a hand reference, unpermute with dropped slots.
#include "TestUtil.h"
#include "MoeRoutingUtil.h"
#include "llcdist/runtime/KernelChecks.h"
#include "llcdist/runtime/Kernels.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <tuple>

namespace llcdist::rt {
namespace {
using testing::checkGradient;
using testing::dot;
using testing::expectAllClose;
using testing::randIds;
using testing::randn;
using testing::skewedExperts;

MoeParams route(int64_t T, int64_t E, int64_t k, bool normalize) {
  MoeParams p;
  p.T = T, p.E = E, p.k = k, p.normalize = normalize;
  return p;
}
MoeParams tokens(int64_t T, int64_t H, int64_t E, int64_t k) {
  MoeParams p;
  p.T = T, p.H = H, p.E = E, p.k = k;
  return p;
}
MoeParams grouped(int64_t N, int64_t K, int64_t O, int64_t E, bool accumulate = false) {
  MoeParams p;
  p.N = N, p.K = K, p.O = O, p.E = E, p.accumulate = accumulate;
  return p;
}

// ---- moe_route ----------------------------------------------------------------------------------------

// The reference router in double: softmax, the k largest in descending order (ties to the lower index),
// optionally renormalised.
void routeReference(const std::vector<float>& logits, const MoeParams& p, std::vector<int32_t>& experts,
                    std::vector<double>& weights) {
  experts.assign(size_t(p.T * p.k), -1);
  weights.assign(size_t(p.T * p.k), 0.0);
  for (int64_t t = 0; t < p.T; ++t) {
    std::vector<double> prob(size_t(p.E));
    double mx = -1e300, sum = 0.0;
    for (int64_t e = 0; e < p.E; ++e) mx = std::max(mx, double(logits[size_t(t * p.E + e)]));
    for (int64_t e = 0; e < p.E; ++e) sum += prob[size_t(e)] = std::exp(double(logits[size_t(t * p.E + e)]) - mx);
    for (double& v : prob) v /= sum;
    std::vector<int32_t> order(size_t(p.E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return prob[size_t(a)] > prob[size_t(b)]; });
    double selected = 0.0;
    for (int64_t j = 0; j < p.k; ++j) selected += prob[size_t(order[size_t(j)])];
    for (int64_t j = 0; j < p.k; ++j) {
      experts[size_t(t * p.k + j)] = order[size_t(j)];
      weights[size_t(t * p.k + j)] = prob[size_t(order[size_t(j)])] / (p.normalize ? selected : 1.0);
    }
  }
}

// Logits on a grid of 0.3: distinct values far apart (no rounding can reorder them), equal values exactly
// equal (ties).
std::vector<float> gridLogits(int64_t n, int32_t levels, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  const std::vector<int32_t> ids = randIds(n, levels, seed);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.3f * float(ids[i]) - 0.6f;
  return v;
}

TEST(MoeRouteTest, ForwardMatchesSoftmaxTopK) {
  for (const auto& [E, k, levels] : {std::tuple{6, 2, 4}, {6, 1, 3}, {6, 6, 4}, {8, 3, 20}, {4, 4, 2}})
    for (bool normalize : {false, true}) {
      SCOPED_TRACE("E " + std::to_string(E) + " k " + std::to_string(k) + (normalize ? " normalize" : ""));
      const MoeParams p = route(7, E, k, normalize);
      const std::vector<float> logits = gridLogits(p.T * p.E, levels, uint32_t(E * 10 + k));
      std::vector<float> weights(size_t(p.T * p.k));
      std::vector<int32_t> experts(size_t(p.T * p.k));
      moeRouteForward(logits.data(), weights.data(), experts.data(), p);
      std::vector<int32_t> wantExperts;
      std::vector<double> wantWeights;
      routeReference(logits, p, wantExperts, wantWeights);
      EXPECT_EQ(experts, wantExperts);
      expectAllClose(weights, wantWeights, 1e-7, 1e-6, "weights");
    }
}

TEST(MoeRouteTest, TiesGoToTheLowerExpertInDescendingOrder) {
  // Row 0: experts 1, 2 and 4 tie for the largest; row 1: all equal; row 2: a strict order.
  const std::vector<float> logits = {1, 3, 3, 0, 3, /**/ 2, 2, 2, 2, 2, /**/ -1, 0.5f, 4, -3, 2};
  const MoeParams p = route(3, 5, 3, true);
  std::vector<float> weights(9);
  std::vector<int32_t> experts(9);
  moeRouteForward(logits.data(), weights.data(), experts.data(), p);
  EXPECT_EQ(experts, (std::vector<int32_t>{1, 2, 4, 0, 1, 2, 2, 4, 1}));
  for (int64_t j = 0; j < 6; ++j) EXPECT_FLOAT_EQ(weights[size_t(j)], 1.0f / 3.0f) << j;  // equal p, normalised
  EXPECT_GT(weights[6], weights[7]);
  EXPECT_GT(weights[7], weights[8]);
  // k = E without normalize: the weights are the whole softmax, summing to 1.
  const MoeParams all = route(1, 5, 5, false);
  std::vector<float> w5(5);
  std::vector<int32_t> e5(5);
  moeRouteForward(logits.data() + 10, w5.data(), e5.data(), all);
  EXPECT_EQ(e5, (std::vector<int32_t>{2, 4, 1, 0, 3}));
  EXPECT_NEAR(std::accumulate(w5.begin(), w5.end(), 0.0), 1.0, 1e-6);
}

TEST(MoeRouteTest, BackwardMatchesFiniteDifferences) {
  for (const auto& [E, k] : {std::pair{6, 2}, {6, 1}, {5, 5}, {8, 3}})
    for (bool normalize : {false, true}) {
      SCOPED_TRACE("E " + std::to_string(E) + " k " + std::to_string(k) + (normalize ? " normalize" : ""));
      const MoeParams p = route(4, E, k, normalize);
      // Each row a permutation of 0..E-1 spaced 0.4 apart, plus small noise: a selection no step of 1e-2 flips.
      std::vector<float> logits(size_t(p.T * p.E));
      const std::vector<float> noise = randn(p.T * p.E, uint32_t(E + k), 0.03f);
      for (int64_t t = 0; t < p.T; ++t) {
        std::vector<int32_t> perm(static_cast<size_t>(E));
        std::iota(perm.begin(), perm.end(), 0);
        std::rotate(perm.begin(), perm.begin() + (t * 3) % E, perm.end());
        if (t % 2) std::reverse(perm.begin(), perm.end());
        for (int64_t e = 0; e < E; ++e)
          logits[size_t(t * E + e)] = 0.4f * float(perm[size_t(e)]) + noise[size_t(t * E + e)];
      }
      const std::vector<float> dw = randn(p.T * p.k, uint32_t(7 + E));
      std::vector<float> weights(size_t(p.T * p.k)), dlogits(size_t(p.T * p.E), 99.0f);
      std::vector<int32_t> experts(size_t(p.T * p.k));
      moeRouteForward(logits.data(), weights.data(), experts.data(), p);
      const std::vector<int32_t> selection = experts;
      moeRouteBackward(logits.data(), experts.data(), dw.data(), dlogits.data(), p);
      checkGradient(
          logits, dlogits,
          [&] {
            moeRouteForward(logits.data(), weights.data(), experts.data(), p);
            EXPECT_EQ(experts, selection);
            return dot(dw, weights);
          },
          "dlogits");
    }
}

TEST(MoeRouteTest, BackwardIgnoresExpertIdsOutOfRange) {
  const MoeParams p = route(1, 4, 2, true);
  const std::vector<float> logits = {0.5f, -1.0f, 2.0f, 0.0f}, dw = {1.0f, 2.0f};
  const std::vector<int32_t> experts = {2, 7};  // 7 is a producer's bug: only expert 2 is selected
  std::vector<float> dl(4, 99.0f);
  moeRouteBackward(logits.data(), experts.data(), dw.data(), dl.data(), p);
  for (float v : dl) EXPECT_EQ(v, 0.0f);  // one selected expert: its normalised weight is constant 1
}

// ---- the load-balancing loss (moe_router_stats / _bwd, moe_aux_loss / _bwd) ------------------------------

// softmax(logits[t])[e] in double.
std::vector<double> probabilities(const std::vector<float>& logits, int64_t T, int64_t E) {
  std::vector<double> prob(size_t(T * E));
  for (int64_t t = 0; t < T; ++t) {
    double mx = -1e300, sum = 0.0;
    for (int64_t e = 0; e < E; ++e) mx = std::max(mx, double(logits[size_t(t * E + e)]));
    for (int64_t e = 0; e < E; ++e) sum += prob[size_t(t * E + e)] = std::exp(double(logits[size_t(t * E + e)]) - mx);
    for (int64_t e = 0; e < E; ++e) prob[size_t(t * E + e)] /= sum;
  }
  return prob;
}

TEST(MoeAuxLossTest, RouterStatsAddTheAssignmentsAndProbabilities) {
  MoeParams p = route(9, 6, 2, false);
  const std::vector<float> logits = gridLogits(p.T * p.E, 3, 17);  // three levels: many ties
  std::vector<float> weights(size_t(p.T * p.k));
  std::vector<int32_t> experts(size_t(p.T * p.k));
  moeRouteForward(logits.data(), weights.data(), experts.data(), p);
  experts[3] = 6;  // out of range (a producer's bug): counts nothing
  const std::vector<int32_t> counts = {1, 0, 7, 2, 0, 3};
  const std::vector<float> probs = {0.5f, 0.0f, 1.25f, 0.0f, 2.0f, 0.25f};
  std::vector<int32_t> countsOut(6, -99);
  std::vector<float> probsOut(6, -99.0f);
  moeRouterStats(logits.data(), experts.data(), counts.data(), probs.data(), countsOut.data(), probsOut.data(), p);
  std::vector<int32_t> wantCounts = counts;
  for (size_t i = 0; i < experts.size(); ++i)
    if (i != 3) ++wantCounts[size_t(experts[i])];
  EXPECT_EQ(countsOut, wantCounts);
  const std::vector<double> prob = probabilities(logits, p.T, p.E);
  std::vector<double> wantProbs(probs.begin(), probs.end());
  for (int64_t t = 0; t < p.T; ++t)
    for (int64_t e = 0; e < p.E; ++e) wantProbs[size_t(e)] += prob[size_t(t * p.E + e)];
  expectAllClose(probsOut, wantProbs, 1e-6, 1e-6, "probs_out");
}

TEST(MoeAuxLossTest, RouterStatsBackwardMatchesFiniteDifferences) {
  for (int64_t E : {6, 1, 8}) {
    SCOPED_TRACE("E " + std::to_string(E));
    MoeParams p = route(5, E, 1, false);
    std::vector<float> logits = randn(p.T * E, uint32_t(40 + E));
    const std::vector<float> g = randn(E, uint32_t(50 + E));
    std::vector<float> dlogits(size_t(p.T * E), 99.0f);
    moeRouterStatsBackward(logits.data(), g.data(), dlogits.data(), p);
    // Σ_e g[e]·probs_out[e] through the kernel's forward (its probabilities' sums).
    const std::vector<int32_t> experts(size_t(p.T), 0), zeroCounts(size_t(E), 0);
    const std::vector<float> zeroProbs(size_t(E), 0.0f);
    checkGradient(
        logits, dlogits,
        [&] {
          std::vector<int32_t> c(static_cast<size_t>(E));
          std::vector<float> s(static_cast<size_t>(E));
          moeRouterStats(logits.data(), experts.data(), zeroCounts.data(), zeroProbs.data(), c.data(), s.data(), p);
          double v = 0.0;
          for (int64_t e = 0; e < E; ++e) v += double(g[size_t(e)]) * s[size_t(e)];
          return v;
        },
        "dlogits");
  }
}

// transformers' load_balancing_loss_func over L routers' logits and picks, in double, as it writes it:
// tokens_per_expert = the mean over the L·T tokens of each pick's one-hot, router_prob_per_expert = the
// mean of the softmax; coef · E · Σ (tokens_per_expert · router_prob_per_expert).
double loadBalancingLoss(const std::vector<std::vector<float>>& logits, const std::vector<std::vector<int32_t>>& experts,
                         const MoeParams& p, double coef) {
  const double tokens = double(logits.size()) * double(p.T);
  std::vector<double> perExpert(size_t(p.E), 0.0), prob(size_t(p.E), 0.0);
  for (size_t l = 0; l < logits.size(); ++l) {
    for (int32_t e : experts[l]) perExpert[size_t(e)] += 1.0 / tokens;
    const std::vector<double> pr = probabilities(logits[l], p.T, p.E);
    for (int64_t t = 0; t < p.T; ++t)
      for (int64_t e = 0; e < p.E; ++e) prob[size_t(e)] += pr[size_t(t * p.E + e)] / tokens;
  }
  double sum = 0.0;
  for (int64_t e = 0; e < p.E; ++e) sum += perExpert[size_t(e)] * prob[size_t(e)];
  return coef * double(p.E) * sum;
}

TEST(MoeAuxLossTest, TwoRoutersGiveTransformersLoss) {
  for (const auto& [E, k] : {std::pair{6, 2}, {4, 1}, {8, 8}}) {
    SCOPED_TRACE("E " + std::to_string(E) + " k " + std::to_string(k));
    MoeParams p = route(7, E, k, true);
    std::vector<std::vector<float>> logits;
    std::vector<std::vector<int32_t>> experts;
    std::vector<int32_t> counts(size_t(E), 0);
    std::vector<float> probs(size_t(E), 0.0f);
    for (uint32_t l = 0; l < 2; ++l) {  // two layers' routers, their statistics passed on
      logits.push_back(randn(p.T * E, 60 + l + uint32_t(E)));
      experts.emplace_back(size_t(p.T * k));
      std::vector<float> w(size_t(p.T * k));
      moeRouteForward(logits.back().data(), w.data(), experts.back().data(), p);
      std::vector<int32_t> c(static_cast<size_t>(E));
      std::vector<float> s(static_cast<size_t>(E));
      moeRouterStats(logits.back().data(), experts.back().data(), counts.data(), probs.data(), c.data(), s.data(), p);
      counts = c, probs = s;
    }
    const double coef = 0.02;
    MoeParams aux;
    aux.E = E;
    aux.scale = coef * double(E) * double(k) * double(k);  // the lowering's scale, one microbatch
    std::vector<float> loss = {1.5f};
    moeAuxLoss(counts.data(), probs.data(), loss.data(), aux);
    const double want = loadBalancingLoss(logits, experts, p, coef);
    EXPECT_NEAR(double(loss[0]) - 1.5, want, 1e-6 + 1e-5 * want);
    // Its gradient w.r.t. the probabilities' sums (the loss is linear in them): scale·counts / N².
    std::vector<float> dprobs(size_t(E), 99.0f);
    moeAuxLossBackward(counts.data(), dprobs.data(), aux);
    std::vector<float> sums = probs;
    checkGradient(
        sums, dprobs,
        [&] {
          std::vector<float> l = {0.0f};
          moeAuxLoss(counts.data(), sums.data(), l.data(), aux);
          return double(l[0]);
        },
        "dprobs");
  }
}

TEST(MoeAuxLossTest, NoAssignmentsAddNothing) {
  MoeParams aux;
  aux.E = 3;
  aux.scale = 2.0;
  const std::vector<int32_t> none(3, 0);
  const std::vector<float> probs = {1.0f, 2.0f, 3.0f};
  std::vector<float> loss = {0.75f}, dprobs(3, 99.0f);
  moeAuxLoss(none.data(), probs.data(), loss.data(), aux);
  moeAuxLossBackward(none.data(), dprobs.data(), aux);
  EXPECT_EQ(loss[0], 0.75f);
  EXPECT_EQ(dprobs, (std::vector<float>(3, 0.0f)));
}

// ---- moe_permute / moe_unpermute ------------------------------------------------------------------------

// The reference permutation: the assignments (t, j) sorted by (expert, t, j).
void permuteReference(const std::vector<int32_t>& experts, const MoeParams& p, std::vector<int32_t>& slots,
                      std::vector<int32_t>& sizes) {
  std::vector<std::tuple<int32_t, int64_t, int64_t>> order;
  for (int64_t t = 0; t < p.T; ++t)
    for (int64_t j = 0; j < p.k; ++j) order.emplace_back(experts[size_t(t * p.k + j)], t, j);
  std::sort(order.begin(), order.end());
  slots.assign(size_t(p.T * p.k), -1);
  sizes.assign(size_t(p.E), 0);
  for (size_t r = 0; r < order.size(); ++r) {
    const auto& [e, t, j] = order[r];
    slots[size_t(t * p.k + j)] = int32_t(r);
    ++sizes[size_t(e)];
  }
}

TEST(MoePermuteTest, ExpertMajorRowsAndGroupSizes) {
  for (const auto& [E, k] : {std::pair{5, 2}, {4, 1}, {3, 3}}) {
    SCOPED_TRACE("E " + std::to_string(E) + " k " + std::to_string(k));
    const MoeParams p = tokens(6, 4, E, k);
    std::vector<int32_t> experts = randIds(p.T * p.k, int32_t(E - 1), uint32_t(E * 7 + k));  // expert E-1 empty
    experts[0] = 0;
    const std::vector<float> x = randn(p.T * p.H, 3);
    std::vector<float> xp(size_t(p.T * p.k * p.H), 99.0f);
    std::vector<int32_t> slots(size_t(p.T * p.k)), sizes(size_t(p.E), 99);
    ASSERT_TRUE(moePermute(x.data(), experts.data(), xp.data(), slots.data(), sizes.data(), p).isOk());
    std::vector<int32_t> wantSlots, wantSizes;
    permuteReference(experts, p, wantSlots, wantSizes);
    EXPECT_EQ(slots, wantSlots);
    EXPECT_EQ(sizes, wantSizes);
    EXPECT_EQ(sizes[size_t(E - 1)], 0);
    for (int64_t i = 0; i < p.T * p.k; ++i)
      for (int64_t h = 0; h < p.H; ++h)
        EXPECT_EQ(xp[size_t(wantSlots[size_t(i)] * p.H + h)], x[size_t((i / p.k) * p.H + h)]);
  }
}

// An expert id outside [0, E) is an error naming moe_permute, the (first) token and the id -- the CUDA
// kernel's message too (moePermuteExpertError) -- and nothing is written.
TEST(MoePermuteTest, ExpertIdsOutOfRangeAreAnError) {
  for (const auto& [bad, token] : {std::pair{3, 1}, {-1, 0}, {7, 2}}) {
    for (int64_t capacity : {0, 1}) {
      MoeParams p = tokens(3, 2, 3, 2);
      p.capacity = capacity;
      std::vector<int32_t> experts = {1, 2, 0, 0, 1, 0};
      experts[size_t(token * 2 + 1)] = bad;
      const std::vector<float> x = {1, 2, 3, 4, 5, 6};
      std::vector<float> xp(size_t(moePermuteRows(p) * 2), 99.0f);
      std::vector<int32_t> slots(6, 99), sizes(3, 99);
      const Status st = moePermute(x.data(), experts.data(), xp.data(), slots.data(), sizes.data(), p);
      ASSERT_FALSE(st.isOk());
      EXPECT_EQ(st.message(), moePermuteExpertError(token, bad));
      EXPECT_NE(st.message().find("moe_permute: token " + std::to_string(token) + " is routed to expert id " +
                                  std::to_string(bad)),
                std::string::npos)
          << st.message();
      EXPECT_EQ(slots, std::vector<int32_t>(6, 99));
      EXPECT_EQ(sizes, std::vector<int32_t>(3, 99));
      EXPECT_EQ(xp, std::vector<float>(xp.size(), 99.0f));
    }
  }
}

TEST(MoeUnpermuteTest, WeightedSumOverTheTokensSlots) {
  const MoeParams p = tokens(5, 3, 4, 2);
  const std::vector<int32_t> experts = randIds(p.T * p.k, 4, 11);
  std::vector<int32_t> slots, sizes;
  permuteReference(experts, p, slots, sizes);
  const std::vector<float> xp = randn(p.T * p.k * p.H, 12), w = randn(p.T * p.k, 13);
  for (bool weighted : {true, false}) {
    std::vector<float> y(size_t(p.T * p.H), 99.0f);
    ASSERT_TRUE(moeUnpermute(xp.data(), slots.data(), weighted ? w.data() : nullptr, y.data(), p).isOk());
    std::vector<double> ref(size_t(p.T * p.H), 0.0);
    for (int64_t t = 0; t < p.T; ++t)
      for (int64_t j = 0; j < p.k; ++j)
        for (int64_t h = 0; h < p.H; ++h)
          ref[size_t(t * p.H + h)] +=
              (weighted ? double(w[size_t(t * p.k + j)]) : 1.0) * xp[size_t(slots[size_t(t * p.k + j)] * p.H + h)];
    expectAllClose(y, ref, 1e-6, 1e-6, weighted ? "y" : "y (no weights)");
  }
  // A slot -1 (a dropped assignment) adds nothing.
  std::vector<int32_t> dropped = slots;
  dropped[1] = dropped[2] = -1;
  std::vector<float> y(size_t(p.T * p.H)), yGood(size_t(p.T * p.H));
  ASSERT_TRUE(moeUnpermute(xp.data(), dropped.data(), nullptr, y.data(), p).isOk());
  std::vector<float> zeroW(w.size(), 1.0f);
  zeroW[1] = zeroW[2] = 0.0f;
  ASSERT_TRUE(moeUnpermute(xp.data(), slots.data(), zeroW.data(), yGood.data(), p).isOk());
  EXPECT_EQ(y, yGood);
}

// A slot < -1 or >= N (T·k, or attr N) is an error naming the op, the token and the slot; nothing is
// written (forward and backward).
TEST(MoeUnpermuteTest, SlotsOutOfRangeAreAnError) {
  for (int64_t N : {0, 5}) {
    MoeParams p = tokens(3, 2, 4, 2);
    p.N = N;
    const int64_t rows = moeUnpermuteRows(p);
    for (const auto& [bad, token] : {std::pair{int32_t(rows), 1}, {-2, 2}, {1000, 0}}) {
      SCOPED_TRACE("N " + std::to_string(rows) + " slot " + std::to_string(bad));
      std::vector<int32_t> slots = {0, 1, 2, -1, 3, 4};
      slots[size_t(token * 2)] = bad;
      const std::vector<float> xp = randn(rows * p.H, 14), w = randn(6, 15), dy = randn(3 * p.H, 16);
      std::vector<float> y(6, 99.0f), dxp(xp.size(), 99.0f), dw(6, 99.0f);
      const Status fwd = moeUnpermute(xp.data(), slots.data(), w.data(), y.data(), p);
      ASSERT_FALSE(fwd.isOk());
      EXPECT_EQ(fwd.message(), moeSlotError("moe_unpermute", token, bad));
      EXPECT_NE(fwd.message().find("moe_unpermute: token " + std::to_string(token) + " has slot " + std::to_string(bad)),
                std::string::npos)
          << fwd.message();
      EXPECT_EQ(y, std::vector<float>(6, 99.0f));
      const Status bwd = moeUnpermuteBackward(dy.data(), xp.data(), slots.data(), w.data(), dxp.data(), dw.data(), p);
      ASSERT_FALSE(bwd.isOk());
      EXPECT_EQ(bwd.message(), moeSlotError("moe_unpermute_bwd", token, bad));
      EXPECT_EQ(dxp, std::vector<float>(xp.size(), 99.0f));
      EXPECT_EQ(dw, std::vector<float>(6, 99.0f));
    }
  }
}

TEST(MoeUnpermuteTest, BackwardMatchesFiniteDifferences) {
  for (int64_t k : {1, 2, 4}) {
    SCOPED_TRACE("k " + std::to_string(k));
    const MoeParams p = tokens(4, 3, 4, k);
    std::vector<int32_t> slots, sizes;
    permuteReference(randIds(p.T * p.k, 4, uint32_t(20 + k)), p, slots, sizes);
    std::vector<float> xp = randn(p.T * p.k * p.H, 21), w = randn(p.T * p.k, 22);
    const std::vector<float> dy = randn(p.T * p.H, 23);
    std::vector<float> dxp(xp.size(), 99.0f), dw(w.size(), 99.0f);
    ASSERT_TRUE(moeUnpermuteBackward(dy.data(), xp.data(), slots.data(), w.data(), dxp.data(), dw.data(), p).isOk());
    const auto loss = [&] {
      std::vector<float> y(size_t(p.T * p.H));
      EXPECT_TRUE(moeUnpermute(xp.data(), slots.data(), w.data(), y.data(), p).isOk());
      return dot(dy, y);
    };
    checkGradient(xp, dxp, loss, "dxp");
    checkGradient(w, dw, loss, "dweights");
  }
}

TEST(MoeUnpermuteTest, BackwardZeroesRowsNoSlotNames) {
  const MoeParams p = tokens(2, 2, 2, 2);
  const std::vector<int32_t> slots = {3, -1, 0, -1};  // rows 1 and 2 unnamed; two dropped assignments
  const std::vector<float> xp = {1, 2, 3, 4, 5, 6, 7, 8}, w = {2, 3, 4, 5}, dy = {1, -1, 0.5f, 2};
  std::vector<float> dxp(8 + 2, 99.0f), dw(4, 99.0f);
  ASSERT_TRUE(moeUnpermuteBackward(dy.data(), xp.data(), slots.data(), w.data(), dxp.data(), dw.data(), p).isOk());
  EXPECT_EQ(dxp, (std::vector<float>{2, 8, 0, 0, 0, 0, 2, -2, 99, 99}));
  EXPECT_EQ(dw, (std::vector<float>{7 - 8, 0, 0.5f + 4, 0}));
}

// ---- capacity (token dropping) ----------------------------------------------------------------------------

// The hand reference of moe_permute under a capacity C (GShard / Switch, token order): the assignments
// sorted by (expert, t, j); each expert keeps its first C, the kept ones numbered in that order (packed
// rows in expert order); the others are dropped (slot -1).
struct CapacityReference {
  std::vector<int32_t> slots, sizes;
  int64_t kept = 0, dropped = 0;
};
CapacityReference capacityReference(const std::vector<int32_t>& experts, const MoeParams& p, int64_t C) {
  std::vector<std::tuple<int32_t, int64_t, int64_t>> order;
  for (int64_t t = 0; t < p.T; ++t)
    for (int64_t j = 0; j < p.k; ++j) order.emplace_back(experts[size_t(t * p.k + j)], t, j);
  std::sort(order.begin(), order.end());
  CapacityReference r;
  r.slots.assign(size_t(p.T * p.k), -1);
  r.sizes.assign(size_t(p.E), 0);
  for (const auto& [e, t, j] : order) {
    if (r.sizes[size_t(e)] == C) {
      ++r.dropped;
      continue;
    }
    ++r.sizes[size_t(e)];
    r.slots[size_t(t * p.k + j)] = int32_t(r.kept++);
  }
  return r;
}

MoeParams capacityTokens(int64_t T, int64_t H, int64_t E, int64_t k, int64_t C) {
  MoeParams p = tokens(T, H, E, k);
  p.capacity = C;
  return p;
}

TEST(MoeCapacityTest, PermuteKeepsEachExpertsFirstAssignmentsInTokenOrder) {
  const int64_t T = 29, H = 3, E = 5, k = 2;
  const std::vector<int32_t> experts = skewedExperts(T, E, k, 81);
  const std::vector<float> x = randn(T * H, 82);
  std::vector<int32_t> dropless(size_t(T * k)), droplessSizes(static_cast<size_t>(E));
  {
    std::vector<float> xp(size_t(T * k * H));
    ASSERT_TRUE(
        moePermute(x.data(), experts.data(), xp.data(), dropless.data(), droplessSizes.data(), tokens(T, H, E, k))
            .isOk());
  }
  const int64_t most = *std::max_element(droplessSizes.begin(), droplessSizes.end());
  ASSERT_GT(most, 8);  // heavy collisions: the capacities below drop
  for (int64_t C : {int64_t(1), int64_t(3), int64_t(8), most, most + 7}) {
    SCOPED_TRACE("capacity " + std::to_string(C));
    const MoeParams p = capacityTokens(T, H, E, k, C);
    ASSERT_EQ(moePermuteRows(p), E * C);
    std::vector<float> xp(size_t(E * C * H), 99.0f);
    std::vector<int32_t> slots(size_t(T * k), 99), sizes(size_t(E), 99);
    ASSERT_TRUE(moePermute(x.data(), experts.data(), xp.data(), slots.data(), sizes.data(), p).isOk());
    const CapacityReference want = capacityReference(experts, p, C);
    EXPECT_EQ(slots, want.slots);
    EXPECT_EQ(sizes, want.sizes);
    for (int64_t e = 0; e < E; ++e) EXPECT_EQ(sizes[size_t(e)], std::min<int64_t>(droplessSizes[size_t(e)], C));
    EXPECT_EQ(want.dropped > 0, C < most);
    if (C >= most) {
      EXPECT_EQ(slots, dropless);  // nothing dropped: the dropless layout
    }
    // Which (t, j) are dropped: those past the first C of their expert in (t, j) order.
    std::vector<int64_t> seen(size_t(E), 0);
    for (int64_t i = 0; i < T * k; ++i) EXPECT_EQ(slots[size_t(i)] < 0, seen[size_t(experts[size_t(i)])]++ >= C) << i;
    for (int64_t i = 0; i < T * k; ++i) {
      if (slots[size_t(i)] < 0) continue;
      for (int64_t h = 0; h < H; ++h)
        EXPECT_EQ(xp[size_t(slots[size_t(i)] * H + h)], x[size_t((i / k) * H + h)]) << "assignment " << i;
    }
    for (int64_t r = want.kept * H; r < E * C * H; ++r) EXPECT_EQ(xp[size_t(r)], 0.0f) << "tail element " << r;
  }
}

TEST(MoeCapacityTest, UnpermuteSkipsDroppedAssignments) {
  const int64_t T = 17, H = 4, E = 4, k = 2, C = 3;
  const std::vector<int32_t> experts = skewedExperts(T, E, k, 83);
  MoeParams p = capacityTokens(T, H, E, k, C);
  const CapacityReference ref = capacityReference(experts, p, C);
  ASSERT_GT(ref.dropped, 0);
  p.N = E * C;  // moe_unpermute's attr N
  const std::vector<float> xp = randn(E * C * H, 84), w = randn(T * k, 85);
  for (bool weighted : {true, false}) {
    std::vector<float> y(size_t(T * H), 99.0f);
    ASSERT_TRUE(moeUnpermute(xp.data(), ref.slots.data(), weighted ? w.data() : nullptr, y.data(), p).isOk());
    std::vector<double> want(size_t(T * H), 0.0);
    for (int64_t i = 0; i < T * k; ++i) {
      if (ref.slots[size_t(i)] < 0) continue;
      for (int64_t h = 0; h < H; ++h)
        want[size_t((i / k) * H + h)] +=
            (weighted ? double(w[size_t(i)]) : 1.0) * xp[size_t(ref.slots[size_t(i)] * H + h)];
    }
    expectAllClose(y, want, 1e-6, 1e-6, weighted ? "y" : "y (no weights)");
  }
  // A token whose every assignment is dropped gets 0.
  std::vector<int32_t> allDropped = ref.slots;
  allDropped[0] = allDropped[1] = -1;
  std::vector<float> y(size_t(T * H), 99.0f);
  ASSERT_TRUE(moeUnpermute(xp.data(), allDropped.data(), w.data(), y.data(), p).isOk());
  for (int64_t h = 0; h < H; ++h) EXPECT_EQ(y[size_t(h)], 0.0f);
}

TEST(MoeCapacityTest, UnpermuteBackwardWithDrops) {
  const int64_t T = 13, H = 3, E = 4, k = 2, C = 2;
  const std::vector<int32_t> experts = skewedExperts(T, E, k, 86);
  MoeParams p = capacityTokens(T, H, E, k, C);
  const CapacityReference ref = capacityReference(experts, p, C);
  ASSERT_GT(ref.dropped, 0);
  p.N = E * C;
  std::vector<float> xp = randn(E * C * H, 87), w = randn(T * k, 88);
  const std::vector<float> dy = randn(T * H, 89);
  std::vector<float> dxp(xp.size(), 99.0f), dw(w.size(), 99.0f);
  ASSERT_TRUE(moeUnpermuteBackward(dy.data(), xp.data(), ref.slots.data(), w.data(), dxp.data(), dw.data(), p).isOk());
  std::vector<char> named(size_t(E * C), 0);
  for (int64_t i = 0; i < T * k; ++i) {
    const int32_t s = ref.slots[size_t(i)];
    if (s < 0) {
      EXPECT_EQ(dw[size_t(i)], 0.0f) << "dropped assignment " << i;
      continue;
    }
    named[size_t(s)] = 1;
    double d = 0.0;
    for (int64_t h = 0; h < H; ++h) {
      d += double(dy[size_t((i / k) * H + h)]) * xp[size_t(s * H + h)];
      EXPECT_FLOAT_EQ(dxp[size_t(s * H + h)], w[size_t(i)] * dy[size_t((i / k) * H + h)]);
    }
    EXPECT_NEAR(dw[size_t(i)], d, 1e-6);
  }
  for (int64_t r = 0; r < E * C; ++r) {
    if (named[size_t(r)]) continue;
    for (int64_t h = 0; h < H; ++h) EXPECT_EQ(dxp[size_t(r * H + h)], 0.0f) << "row " << r;
  }
  const auto loss = [&] {
    std::vector<float> y(size_t(T * H));
    EXPECT_TRUE(moeUnpermute(xp.data(), ref.slots.data(), w.data(), y.data(), p).isOk());
    return dot(dy, y);
  };
  checkGradient(xp, dxp, loss, "dxp");
  checkGradient(w, dw, loss, "dweights");
}

// permute under a capacity, identity experts, unpermute with N = E·C: each token gets Σ over its kept
// assignments of w·x[t] (the dropped ones contribute nothing, as in GShard / Switch).
TEST(MoeCapacityTest, PermuteThenUnpermuteSumsTheKeptAssignments) {
  const int64_t T = 21, H = 2, E = 3, k = 2, C = 5;
  const std::vector<int32_t> experts = skewedExperts(T, E, k, 90);
  MoeParams p = capacityTokens(T, H, E, k, C);
  const std::vector<float> x = randn(T * H, 91), w = randn(T * k, 92);
  std::vector<float> xp(size_t(E * C * H)), y(size_t(T * H));
  std::vector<int32_t> slots(static_cast<size_t>(T * k)), sizes(static_cast<size_t>(E));
  ASSERT_TRUE(moePermute(x.data(), experts.data(), xp.data(), slots.data(), sizes.data(), p).isOk());
  p.N = E * C;
  ASSERT_TRUE(moeUnpermute(xp.data(), slots.data(), w.data(), y.data(), p).isOk());
  const CapacityReference ref = capacityReference(experts, p, C);
  ASSERT_GT(ref.dropped, 0);
  std::vector<double> want(size_t(T * H), 0.0);
  for (int64_t i = 0; i < T * k; ++i)
    if (ref.slots[size_t(i)] >= 0)
      for (int64_t h = 0; h < H; ++h) want[size_t((i / k) * H + h)] += double(w[size_t(i)]) * x[size_t((i / k) * H + h)];
  expectAllClose(y, want, 1e-6, 1e-6, "y");
}

// ---- grouped_linear ------------------------------------------------------------------------------------

// The reference: expert e's rows (sizes clamped as the contract says) times w[e]ᵀ, the rest 0.
std::vector<double> groupedReference(const std::vector<float>& x, const std::vector<float>& w,
                                     const std::vector<int32_t>& sizes, const MoeParams& p) {
  std::vector<double> y(size_t(p.N * p.O), 0.0);
  int64_t row = 0;
  for (int64_t e = 0; e < p.E; ++e)
    for (int64_t r = 0; r < sizes[size_t(e)] && row < p.N; ++r, ++row)
      for (int64_t o = 0; o < p.O; ++o)
        for (int64_t c = 0; c < p.K; ++c)
          y[size_t(row * p.O + o)] += double(x[size_t(row * p.K + c)]) * w[size_t((e * p.O + o) * p.K + c)];
  return y;
}

TEST(GroupedLinearTest, ForwardMatchesPerExpertGemms) {
  const MoeParams p = grouped(10, 4, 3, 4);
  const std::vector<float> x = randn(p.N * p.K, 31), w = randn(p.E * p.O * p.K, 32);
  // An empty expert and a row past Σ sizes; sizes past N (cut at N); a negative size (0).
  for (const std::vector<int32_t>& sizes :
       {std::vector<int32_t>{3, 0, 5, 1}, {2, 3, 4, 1}, {4, -2, 9, 5}, {0, 0, 0, 0}}) {
    std::vector<float> y(size_t(p.N * p.O + 3), 99.0f);  // 3 guard elements
    groupedLinearForward(x.data(), w.data(), sizes.data(), y.data(), p);
    EXPECT_EQ(std::vector<float>(y.end() - 3, y.end()), std::vector<float>(3, 99.0f));
    y.resize(size_t(p.N * p.O));
    expectAllClose(y, groupedReference(x, w, sizes, p), 1e-5, 1e-5, "y");
  }
}

TEST(GroupedLinearTest, BackwardMatchesFiniteDifferences) {
  const MoeParams p = grouped(9, 4, 3, 4);
  const std::vector<int32_t> sizes = {3, 0, 4, 1};  // expert 1 empty, row 8 past the groups
  std::vector<float> x = randn(p.N * p.K, 41), w = randn(p.E * p.O * p.K, 42, 0.5f);
  const std::vector<float> dy = randn(p.N * p.O, 43);
  std::vector<float> dx(x.size(), 99.0f), dw(w.size(), 99.0f);
  groupedLinearBackwardInput(dy.data(), w.data(), sizes.data(), dx.data(), p);
  groupedLinearBackwardWeight(dy.data(), x.data(), sizes.data(), dw.data(), p);
  for (int64_t i = 8 * p.K; i < 9 * p.K; ++i) EXPECT_EQ(dx[size_t(i)], 0.0f);
  for (int64_t i = p.O * p.K; i < 2 * p.O * p.K; ++i) EXPECT_EQ(dw[size_t(i)], 0.0f);
  const auto loss = [&] {
    std::vector<float> y(size_t(p.N * p.O));
    groupedLinearForward(x.data(), w.data(), sizes.data(), y.data(), p);
    return dot(dy, y);
  };
  checkGradient(x, dx, loss, "dx");
  checkGradient(w, dw, loss, "dw");
}

TEST(GroupedLinearTest, AccumulateAddsAndLeavesEmptyExpertsAlone) {
  MoeParams p = grouped(8, 3, 2, 3);
  const std::vector<int32_t> sizes = {5, 0, 3};
  const std::vector<float> x = randn(p.N * p.K, 51), dy = randn(p.N * p.O, 52), before = randn(p.E * p.O * p.K, 53);
  std::vector<float> fresh(before.size(), 99.0f), dw = before;
  groupedLinearBackwardWeight(dy.data(), x.data(), sizes.data(), fresh.data(), p);
  p.accumulate = true;
  groupedLinearBackwardWeight(dy.data(), x.data(), sizes.data(), dw.data(), p);
  std::vector<double> want(before.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = double(before[i]) + fresh[i];
  expectAllClose(dw, want, 1e-6, 1e-6, "dw");
  for (int64_t i = p.O * p.K; i < 2 * p.O * p.K; ++i) EXPECT_EQ(dw[size_t(i)], before[size_t(i)]);
}

// ---- the block: route, permute, grouped GEMM, unpermute --------------------------------------------------

TEST(MoeBlockTest, PermutedGroupedGemmEqualsTheDenseMixture) {
  const int64_t T = 6, H = 5, E = 4, k = 2, O = 3;
  const std::vector<float> logits = randn(T * E, 61), x = randn(T * H, 62), w = randn(E * O * H, 63);
  std::vector<float> weights(T * k), xp(T * k * H), yp(T * k * O), y(T * O);
  std::vector<int32_t> experts(T * k), slots(T * k), sizes(E);
  moeRouteForward(logits.data(), weights.data(), experts.data(), route(T, E, k, true));
  ASSERT_TRUE(moePermute(x.data(), experts.data(), xp.data(), slots.data(), sizes.data(), tokens(T, H, E, k)).isOk());
  groupedLinearForward(xp.data(), w.data(), sizes.data(), yp.data(), grouped(T * k, H, O, E));
  ASSERT_TRUE(moeUnpermute(yp.data(), slots.data(), weights.data(), y.data(), tokens(T, O, E, k)).isOk());
  std::vector<double> ref(T * O, 0.0);  // HF's loop: Σ_j w_j · expert_{e_j}(x[t])
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j)
      for (int64_t o = 0; o < O; ++o) {
        double s = 0.0;
        for (int64_t h = 0; h < H; ++h) s += double(x[t * H + h]) * w[(experts[t * k + j] * O + o) * H + h];
        ref[t * O + o] += weights[t * k + j] * s;
      }
  expectAllClose(y, ref, 1e-5, 1e-5, "y");
}

// ---- sigmoid_gate --------------------------------------------------------------------------------------

TEST(SigmoidGateTest, ForwardAndBackward) {
  const MoeParams p = tokens(5, 4, 1, 1);
  std::vector<float> gate = randn(p.T, 71, 2.0f), x = randn(p.T * p.H, 72);
  const std::vector<float> dy = randn(p.T * p.H, 73);
  std::vector<float> y(x.size());
  sigmoidGateForward(gate.data(), x.data(), y.data(), p);
  std::vector<double> ref(x.size());
  for (int64_t t = 0; t < p.T; ++t)
    for (int64_t h = 0; h < p.H; ++h) ref[t * p.H + h] = x[t * p.H + h] / (1.0 + std::exp(-double(gate[t])));
  expectAllClose(y, ref, 1e-6, 1e-6, "y");
  std::vector<float> inPlace = x;  // y may alias x
  sigmoidGateForward(gate.data(), inPlace.data(), inPlace.data(), p);
  EXPECT_EQ(inPlace, y);

  std::vector<float> dgate(p.T, 99.0f), dx(x.size(), 99.0f);
  sigmoidGateBackward(dy.data(), gate.data(), x.data(), dgate.data(), dx.data(), p);
  const auto loss = [&] {
    std::vector<float> out(x.size());
    sigmoidGateForward(gate.data(), x.data(), out.data(), p);
    return dot(dy, out);
  };
  checkGradient(gate, dgate, loss, "dgate");
  checkGradient(x, dx, loss, "dx");
  std::vector<float> dyInPlace = dy, dgate2(p.T);  // dx may alias dy
  sigmoidGateBackward(dyInPlace.data(), gate.data(), x.data(), dgate2.data(), dyInPlace.data(), p);
  EXPECT_EQ(dyInPlace, dx);
  EXPECT_EQ(dgate2, dgate);
}

}  // namespace
}  // namespace llcdist::rt
