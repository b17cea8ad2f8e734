// The moe family's CUDA kernels (src/cuda/kernels/Moe.cu) against the CPU reference kernels on the same
// inputs (KernelHarness.h), every op kind, f32 and bf16: routing over fewer and more experts than a warp
// (top-k with ties to the lower index: tokens whose logits are all equal or share the maximum),
// normalize on and off; the permutation with experts of no assignment; grouped GEMMs with empty
// experts, experts over several row tiles and rows past the sizes' sum, accumulate on and off; the
// sigmoid gate; the load-balancing loss's counts, gradient term and loss (and the loss of no
// assignments); moe_permute under a capacity (token dropping, heavy collisions) and moe_unpermute / _bwd
// with dropped slots and N rows, and the backward with slots that name a row more than once; routing
// over logits with near-ties (one f32 ulp apart) and the backward with picks outside [0, E) (skipped,
// as the CPU does, not reported). Plus what the harness cannot show: group sizes that overrun the rows
// stay in bounds; a bad expert id or slot is reported with the CPU kernels' message.
// Every test skips without a CUDA device.
//
// Inputs: logits are distinct multiples of 0.25 per token (exact in bf16, p ratios of e^0.25 apart),
// so no rounding can change the top-k, except in the near-tie test, where the picks rest on the router
// computing p as the CPU does; i32 outputs (experts, slots, group_sizes, counts) are compared exactly
// (the harness). Copies (moe_permute's rows) match exactly; sums of k rows within f32 tolerances; dot
// products and GEMMs (f32 accumulation in another order than the CPU's) 1e-4 / 1e-4; computed bf16
// values within one bf16 ulp (CudaBf16KernelsTest.cpp).
#include "../MoeRoutingUtil.h"
#include "KernelHarness.h"

#include "llcdist/runtime/KernelChecks.h"
#include "llcdist/runtime/Kernels.h"
#include "llcdist/runtime/OpParams.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace llcdist::rt::cuda::test {
namespace {

using K = schema::OpKind;
using llcdist::rt::testing::skewedExperts;

constexpr double kAtol = 1e-5, kRtol = 1e-4;          // f32 arithmetic
constexpr double kGemmAtol = 1e-4, kGemmRtol = 1e-4;  // dot products and GEMMs
constexpr double kBf16Atol = 1e-6, kBf16Rtol = 1.0 / 128;

// A float role's buffer in f32 or bf16.
void floats(KernelCase& c, bool bf16, std::string_view role, const std::vector<float>& v) {
  if (bf16)
    c.bf16(role, v);
  else
    c.f32(role, v);
}
double atolFor(bool bf16, double f32Atol) { return bf16 ? kBf16Atol : f32Atol; }
double rtolFor(bool bf16, double f32Rtol) { return bf16 ? kBf16Rtol : f32Rtol; }

// A random permutation of [0, n).
std::vector<int32_t> permutation(int64_t n, uint32_t seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  std::mt19937 gen(seed);
  std::shuffle(v.begin(), v.end(), gen);
  return v;
}

// Multiples of 1/16 in [-1, 1]: exact in bf16; a dot product of H of them (multiples of 1/256, |Σ| <= H)
// is exact in f32 and f64, so every order of summing it gives the same value.
std::vector<float> sixteenths(int64_t n, uint32_t seed) {
  const std::vector<int32_t> q = randomI32(n, seed, -16, 16);
  std::vector<float> v(q.size());
  for (size_t i = 0; i < q.size(); ++i) v[i] = float(q[i]) / 16.0f;
  return v;
}

// Per token, the experts' logits are a permutation of 0.25·(0..E-1) - 1: distinct and exact in bf16.
// Token 0's are all equal (every p ties: picks 0..k-1) and token 1's two largest are equal (the lower
// index first).
std::vector<float> separatedLogits(int64_t T, int64_t E, uint32_t seed) {
  std::vector<float> l(static_cast<size_t>(T * E));
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<int32_t> perm = permutation(E, seed + uint32_t(t));
    for (int64_t e = 0; e < E; ++e) l[size_t(t * E + e)] = 0.25f * float(perm[size_t(e)]) - 1.0f;
  }
  if (T > 0)
    for (int64_t e = 0; e < E; ++e) l[size_t(e)] = 0.5f;
  if (T > 1 && E > 2) {
    auto top = std::max_element(l.begin() + E, l.begin() + 2 * E);
    l[size_t(E + (top - (l.begin() + E) + 2) % E)] = *top;  // another expert ties with the maximum
  }
  return l;
}

// Per token, random logits in [-1, 1] with two near-ties, one f32 ulp (at most ~6e-8) apart: the two
// largest (which is picked first) and the k-th and (k+1)-th largest (which is picked at all; k < E). The
// later one is set next to the earlier, above it for some tokens and below for others, so the higher
// and the lower index each win some. f32 only: bf16 cannot hold a gap this small.
std::vector<float> nearTieLogits(int64_t T, int64_t E, int64_t k, uint32_t seed) {
  std::vector<float> l = randomF32(T * E, seed);
  for (int64_t t = 0; t < T && E > 1; ++t) {
    float* row = l.data() + t * E;
    std::vector<int32_t> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    auto nextTo = [&](int64_t from, int64_t to, bool above) {
      row[order[size_t(to)]] = std::nextafter(row[order[size_t(from)]], above ? INFINITY : -INFINITY);
    };
    nextTo(0, 1, t % 2 == 0);
    if (k > 1 && k < E) nextTo(k - 1, k, t % 4 < 2);
  }
  return l;
}

// Per token, k distinct experts in [0, E) in random order.
std::vector<int32_t> distinctExperts(int64_t T, int64_t E, int64_t k, uint32_t seed) {
  std::vector<int32_t> ex;
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<int32_t> perm = permutation(E, seed + uint32_t(t));
    ex.insert(ex.end(), perm.begin(), perm.begin() + k);
  }
  return ex;
}

MoeParams moe(int64_t T, int64_t H, int64_t E, int64_t k, bool normalize = false) {
  MoeParams p;
  p.T = T;
  p.H = H;
  p.E = E;
  p.k = k;
  p.normalize = normalize;
  return p;
}
MoeParams grouped(int64_t N, int64_t Kin, int64_t O, int64_t E, bool accumulate = false) {
  MoeParams p;
  p.N = N;
  p.K = Kin;
  p.O = O;
  p.E = E;
  p.accumulate = accumulate;
  return p;
}

struct RouteShape {
  int64_t T, E, k;
};

TEST(CudaMoeKernels, RouteForwardAndBackward) {
  LLCDIST_REQUIRE_GPU();
  for (bool bf16 : {false, true})
    for (RouteShape s : {RouteShape{37, 9, 3}, RouteShape{19, 70, 4}, RouteShape{5, 8, 8}, RouteShape{3, 2, 1}})
      for (bool normalize : {false, true}) {
        SCOPED_TRACE(std::string(bf16 ? "bf16" : "f32") + " T " + std::to_string(s.T) + " E " + std::to_string(s.E) +
                     " k " + std::to_string(s.k) + (normalize ? " normalize" : ""));
        const MoeParams p = moe(s.T, 0, s.E, s.k, normalize);
        const std::vector<float> logits = separatedLogits(s.T, s.E, 1);
        KernelCase fwd(K::kMoeRoute, p);
        floats(fwd, bf16, "logits", logits);
        floats(fwd, bf16, "weights", randomF32(s.T * s.k, 2));  // overwritten
        fwd.i32("experts", randomI32(s.T * s.k, 3, -5, 100));   // overwritten
        fwd.expectMatch(atolFor(bf16, kAtol), rtolFor(bf16, kRtol));

        KernelCase bwd(K::kMoeRouteBwd, p);
        floats(bwd, bf16, "logits", logits);
        bwd.i32("experts", distinctExperts(s.T, s.E, s.k, 4));
        floats(bwd, bf16, "dweights", randomF32(s.T * s.k, 5));
        floats(bwd, bf16, "dlogits", randomF32(s.T * s.E, 6));  // overwritten
        bwd.expectMatch(atolFor(bf16, kAtol), rtolFor(bf16, kRtol));
      }
}

// Near-ties: the picks (experts, exact) and every other output match the CPU's; the backward runs on the
// CPU's picks, then with picks outside [0, E) (-1, E, E + 7), which both kernels skip (no device error).
TEST(CudaMoeKernels, RouteNearTiesPickAsTheCpu) {
  LLCDIST_REQUIRE_GPU();
  for (RouteShape s : {RouteShape{37, 9, 3}, RouteShape{19, 70, 4}, RouteShape{5, 8, 8}, RouteShape{3, 2, 1}})
    for (bool normalize : {false, true}) {
      SCOPED_TRACE("T " + std::to_string(s.T) + " E " + std::to_string(s.E) + " k " + std::to_string(s.k) +
                   (normalize ? " normalize" : ""));
      const MoeParams p = moe(s.T, 0, s.E, s.k, normalize);
      const std::vector<float> logits = nearTieLogits(s.T, s.E, s.k, 40);
      KernelCase fwd(K::kMoeRoute, p);
      fwd.f32("logits", logits);
      fwd.f32("weights", randomF32(s.T * s.k, 41));           // overwritten
      fwd.i32("experts", randomI32(s.T * s.k, 42, -5, 100));  // overwritten
      fwd.expectMatch(kAtol, kRtol);

      std::vector<float> weights(size_t(s.T * s.k));
      std::vector<int32_t> picks(size_t(s.T * s.k));
      moeRouteForward(logits.data(), weights.data(), picks.data(), p);
      std::vector<int32_t> badPicks = picks;
      badPicks[0] = -1;
      badPicks[size_t(s.T * s.k - 1)] = int32_t(s.E);
      if (s.T > 2) badPicks[size_t(2 * s.k)] = int32_t(s.E + 7);
      for (const std::vector<int32_t>* experts : {&picks, &badPicks}) {
        SCOPED_TRACE(experts == &picks ? "the CPU's picks" : "picks outside [0, E)");
        KernelCase bwd(K::kMoeRouteBwd, p);
        bwd.f32("logits", logits);
        bwd.i32("experts", *experts);
        bwd.f32("dweights", randomF32(s.T * s.k, 43));
        bwd.f32("dlogits", randomF32(s.T * s.E, 44));  // overwritten
        bwd.expectMatch(kAtol, kRtol);
      }
    }
}

// The load-balancing loss: moe_router_stats (counts i32, exact; the probabilities' sums f64 in another
// order than the CPU's), its gradient through the softmax, and moe_aux_loss / _bwd from two layers' counts.
TEST(CudaMoeKernels, RouteLoadBalancingLoss) {
  LLCDIST_REQUIRE_GPU();
  for (bool bf16 : {false, true})
    for (RouteShape s : {RouteShape{37, 9, 3}, RouteShape{300, 70, 4}, RouteShape{5, 8, 8}}) {
      SCOPED_TRACE(std::string(bf16 ? "bf16" : "f32") + " T " + std::to_string(s.T) + " E " + std::to_string(s.E) +
                   " k " + std::to_string(s.k));
      std::vector<int32_t> counts(size_t(s.E));
      for (size_t e = 0; e < counts.size(); ++e) counts[e] = int32_t((e * 7) % 11);
      const std::vector<float> logits = separatedLogits(s.T, s.E, 21);
      KernelCase stats(K::kMoeRouterStats, moe(s.T, 0, s.E, s.k, false));
      floats(stats, bf16, "logits", logits);
      stats.i32("experts", distinctExperts(s.T, s.E, s.k, 24));
      stats.i32("counts", counts);
      floats(stats, bf16, "probs", randomF32(s.E, 27));
      stats.i32("counts_out", randomI32(s.E, 28, -5, 100));  // overwritten
      floats(stats, bf16, "probs_out", randomF32(s.E, 29));  // overwritten
      stats.expectMatch(atolFor(bf16, kGemmAtol), rtolFor(bf16, kGemmRtol));

      KernelCase bwd(K::kMoeRouterStatsBwd, moe(s.T, 0, s.E, s.k, false));
      floats(bwd, bf16, "logits", logits);
      floats(bwd, bf16, "dprobs", randomF32(s.E, 25));
      floats(bwd, bf16, "dlogits", randomF32(s.T * s.E, 26));  // overwritten
      bwd.expectMatch(atolFor(bf16, kGemmAtol), rtolFor(bf16, kGemmRtol));

      MoeParams aux = moe(0, 0, s.E, 0, false);
      aux.scale = 0.0625;
      KernelCase loss(K::kMoeAuxLoss, aux);
      loss.i32("counts", counts);
      floats(loss, bf16, "probs", randomF32(s.E, 30));
      loss.f32("loss", {1.5f});
      loss.expectMatch(atolFor(bf16, kGemmAtol), rtolFor(bf16, kGemmRtol));
      KernelCase dloss(K::kMoeAuxLossBwd, aux);
      dloss.i32("counts", counts);
      floats(dloss, bf16, "dprobs", randomF32(s.E, 31));  // overwritten
      dloss.expectMatch(atolFor(bf16, kAtol), rtolFor(bf16, kRtol));
    }
}

// No assignments (every count 0, N = 0): moe_aux_loss leaves the loss as it is and _bwd writes dprobs 0,
// as the CPU; E over one block's threads too.
TEST(CudaMoeKernels, AuxLossOfNoAssignments) {
  LLCDIST_REQUIRE_GPU();
  for (bool bf16 : {false, true})
    for (int64_t E : {int64_t(1), int64_t(9), int64_t(300)}) {
      SCOPED_TRACE(std::string(bf16 ? "bf16" : "f32") + " E " + std::to_string(E));
      MoeParams aux = moe(0, 0, E, 0, false);
      aux.scale = 0.0625;
      const std::vector<int32_t> counts(size_t(E), 0);
      KernelCase loss(K::kMoeAuxLoss, aux);
      loss.i32("counts", counts);
      floats(loss, bf16, "probs", randomF32(E, 32));
      loss.f32("loss", {1.5f});
      loss.expectMatch(0, 0);
      KernelCase dloss(K::kMoeAuxLossBwd, aux);
      dloss.i32("counts", counts);
      floats(dloss, bf16, "dprobs", randomF32(E, 33));  // overwritten with 0
      dloss.expectMatch(0, 0);
    }
}

struct PermuteShape {
  int64_t T, H, E, k;
};

// Copies: exact. T·k < E leaves experts without assignments; 41 tokens of top-2 over 3 experts give
// long runs of one expert.
TEST(CudaMoeKernels, PermuteIsAStableExpertMajorGather) {
  LLCDIST_REQUIRE_GPU();
  for (bool bf16 : {false, true})
    for (PermuteShape s : {PermuteShape{5, 7, 13, 2}, PermuteShape{41, 33, 3, 2}, PermuteShape{64, 16, 8, 1}}) {
      SCOPED_TRACE(std::string(bf16 ? "bf16" : "f32") + " T " + std::to_string(s.T) + " E " + std::to_string(s.E) +
                   " k " + std::to_string(s.k));
      const int64_t N = s.T * s.k;
      KernelCase c(K::kMoePermute, moe(s.T, s.H, s.E, s.k));
      floats(c, bf16, "x", randomF32(s.T * s.H, 10));
      c.i32("experts", distinctExperts(s.T, s.E, s.k, 11));
      floats(c, bf16, "xp", randomF32(N * s.H, 12));  // overwritten
      c.i32("slots", randomI32(N, 13, -3, 1000));
      c.i32("group_sizes", randomI32(s.E, 14, -3, 1000));
      c.expectMatch(0, 0);
    }
  // x in f32, xp in bf16: each copied value rounded once.
  KernelCase c(K::kMoePermute, moe(9, 5, 4, 2));
  c.f32("x", randomF32(45, 15)).i32("experts", distinctExperts(9, 4, 2, 16)).bf16("xp", randomF32(90, 17));
  c.i32("slots", randomI32(18, 18, 0, 5)).i32("group_sizes", randomI32(4, 19, 0, 5)).expectMatch(0, 0);
}

TEST(CudaMoeKernels, UnpermuteForwardAndBackward) {
  LLCDIST_REQUIRE_GPU();
  for (bool bf16 : {false, true})
    for (PermuteShape s : {PermuteShape{37, 45, 0, 3}, PermuteShape{8, 300, 0, 2}, PermuteShape{11, 5, 0, 1}}) {
      SCOPED_TRACE(std::string(bf16 ? "bf16" : "f32") + " T " + std::to_string(s.T) + " H " + std::to_string(s.H) +
                   " k " + std::to_string(s.k));
      const int64_t N = s.T * s.k;
      const MoeParams p = moe(s.T, s.H, 0, s.k);
      const std::vector<int32_t> slots = permutation(N, 20);
      for (bool weighted : {true, false}) {
        KernelCase fwd(K::kMoeUnpermute, p);
        floats(fwd, bf16, "xp", randomF32(N * s.H, 21));
        fwd.i32("slots", slots);
        if (weighted) floats(fwd, bf16, "weights", randomF32(N, 22, 0, 1));
        floats(fwd, bf16, "y", randomF32(s.T * s.H, 23));  // overwritten
        fwd.expectMatch(atolFor(bf16, kAtol), rtolFor(bf16, kRtol));
      }
      KernelCase bwd(K::kMoeUnpermuteBwd, p);
      floats(bwd, bf16, "dy", randomF32(s.T * s.H, 24));
      floats(bwd, bf16, "xp", randomF32(N * s.H, 25));
      bwd.i32("slots", slots);
      floats(bwd, bf16, "weights", randomF32(N, 26, 0, 1));
      floats(bwd, bf16, "dxp", randomF32(N * s.H, 27));  // overwritten
      floats(bwd, bf16, "dweights", randomF32(N, 28));   // overwritten
      bwd.expectMatch(atolFor(bf16, kGemmAtol), rtolFor(bf16, kGemmRtol));
    }
}

// Token dropping: capacities that drop (1, 3) and one that keeps every assignment (40); xp's E·C rows
// start as garbage (the rows past the kept ones must be zeroed); x in f32 or bf16.
TEST(CudaMoeKernels, PermuteWithACapacityDropsAsTheCpu) {
  LLCDIST_REQUIRE_GPU();
  const int64_t T = 37, H = 33, E = 5, k = 2;
  for (bool bf16 : {false, true})
    for (int64_t C : {int64_t(1), int64_t(3), int64_t(40)}) {
      SCOPED_TRACE(std::string(bf16 ? "bf16" : "f32") + " capacity " + std::to_string(C));
      MoeParams p = moe(T, H, E, k);
      p.capacity = C;
      KernelCase c(K::kMoePermute, p);
      floats(c, bf16, "x", randomF32(T * H, 70));
      c.i32("experts", skewedExperts(T, E, k, 71));
      floats(c, bf16, "xp", randomF32(E * C * H, 72));  // overwritten
      c.i32("slots", randomI32(T * k, 73, -3, 1000));
      c.i32("group_sizes", randomI32(E, 74, -3, 1000));
      c.expectMatch(0, 0);
    }
}

// moe_unpermute / _bwd with attr N (more rows than T·k, as under a capacity) and dropped slots (-1):
// rows no slot names are zero in dxp, dropped assignments get dweights 0.
TEST(CudaMoeKernels, UnpermuteWithDroppedSlotsAndNRows) {
  LLCDIST_REQUIRE_GPU();
  const int64_t T = 19, H = 37, k = 2, N = 50;
  std::vector<int32_t> slots = permutation(N, 75);
  slots.resize(size_t(T * k));
  for (size_t i = 0; i < slots.size(); i += 3) slots[i] = -1;
  MoeParams p = moe(T, H, 0, k);
  p.N = N;
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "f32");
    for (bool weighted : {true, false}) {
      KernelCase fwd(K::kMoeUnpermute, p);
      floats(fwd, bf16, "xp", randomF32(N * H, 76));
      fwd.i32("slots", slots);
      if (weighted) floats(fwd, bf16, "weights", randomF32(T * k, 77, 0, 1));
      floats(fwd, bf16, "y", randomF32(T * H, 78));  // overwritten
      fwd.expectMatch(atolFor(bf16, kAtol), rtolFor(bf16, kRtol));
    }
    KernelCase bwd(K::kMoeUnpermuteBwd, p);
    floats(bwd, bf16, "dy", randomF32(T * H, 79));
    floats(bwd, bf16, "xp", randomF32(N * H, 80));
    bwd.i32("slots", slots);
    floats(bwd, bf16, "weights", randomF32(T * k, 81, 0, 1));
    floats(bwd, bf16, "dxp", randomF32(N * H, 82));       // overwritten
    floats(bwd, bf16, "dweights", randomF32(T * k, 83));  // overwritten
    bwd.expectMatch(atolFor(bf16, kGemmAtol), rtolFor(bf16, kGemmRtol));
  }
}

// moe_unpermute_bwd with slots that name a row more than once (no permutation does; the CPU sums the
// terms in assignment order): row 3 thrice (tokens 0, 1 and 3), row 7 twice, row 5 twice from one token,
// a dropped assignment, rows of none. dxp must be the CPU's f32 sum bit for bit; dy and xp are sixteenths,
// so the dweights' dot products are exact in any order and the whole call compares exactly.
TEST(CudaMoeKernels, UnpermuteBackwardSumsRepeatedRowsAsTheCpu) {
  LLCDIST_REQUIRE_GPU();
  const int64_t T = 5, H = 37, k = 2, N = 12;
  const std::vector<int32_t> slots = {3, 7, 3, -1, 0, 11, 7, 3, 5, 5};
  MoeParams p = moe(T, H, 0, k);
  p.N = N;
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "f32");
    KernelCase bwd(K::kMoeUnpermuteBwd, p);
    floats(bwd, bf16, "dy", sixteenths(T * H, 100));
    floats(bwd, bf16, "xp", sixteenths(N * H, 101));
    bwd.i32("slots", slots);
    floats(bwd, bf16, "weights", randomF32(T * k, 102, 0, 1));
    floats(bwd, bf16, "dxp", randomF32(N * H, 103));       // overwritten
    floats(bwd, bf16, "dweights", randomF32(T * k, 104));  // overwritten
    bwd.expectMatch(0, 0);
  }
}

// A bad expert id (moe_permute) or slot (moe_unpermute / _bwd): the CPU kernel refuses it; the CUDA
// kernel reports its code with the lowest bad token and its value, which the backend words exactly as
// the CPU does (describeDeviceError).
TEST(CudaMoeKernels, BadExpertIdsAndSlotsGiveTheCpuMessage) {
  LLCDIST_REQUIRE_GPU();
  const int64_t T = 7, H = 5, E = 4, k = 2;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  std::vector<void*> dev;
  auto upload = [&](const void* host, size_t bytes) {
    void* ptr = nullptr;
    EXPECT_EQ(cudaMalloc(&ptr, bytes < 16 ? 16 : bytes), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    dev.push_back(ptr);
    return ptr;
  };
  // The code (an int) and at byte 8 the detail, as the backend allocates them.
  char* report = static_cast<char*>(upload(std::vector<char>(16, 0).data(), 16));
  auto reset = [&] {
    ASSERT_EQ(cudaMemset(report, 0, 8), cudaSuccess);
    ASSERT_EQ(cudaMemset(report + 8, 0xff, 8), cudaSuccess);
  };
  // Runs `kind` on device copies of the role buffers; returns the code and the message of the report.
  auto run = [&](K kind, const MoeParams& p, const std::vector<std::pair<const void*, int64_t>>& roles,
                 int* code) -> std::string {
    reset();
    StreamScratch scratch(stream, 0);
    CudaKernelContext ctx;
    ctx.stream = stream;
    ctx.scratch = &scratch;
    ctx.deviceError = reinterpret_cast<int*>(report);
    ctx.deviceErrorDetail = reinterpret_cast<unsigned long long*>(report + 8);
    KernelCall c;
    c.kind = kind;
    c.params = p;
    for (const auto& [host, elems] : roles) {
      c.args.push_back({upload(host, size_t(elems) * 4)});
      c.argElems.push_back({elems});
    }
    const Status st = (*cudaKernel(kind))(c, ctx);
    EXPECT_TRUE(st.isOk()) << st.toString();
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    unsigned long long detail = 0;
    EXPECT_EQ(cudaMemcpy(code, report, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(&detail, report + 8, sizeof(detail), cudaMemcpyDeviceToHost), cudaSuccess);
    return describeDeviceError(*code, detail);
  };
  const std::vector<float> x = randomF32(T * H, 90), w = randomF32(T * k, 91), dy = randomF32(T * H, 92);
  {
    std::vector<int32_t> experts = distinctExperts(T, E, k, 93);
    experts[size_t(5 * k + 1)] = -1;          // token 5
    experts[size_t(3 * k)] = int32_t(E + 5);  // token 3: the lowest bad token
    for (int64_t C : {int64_t(0), int64_t(2)}) {
      MoeParams p = moe(T, H, E, k);
      p.capacity = C;
      const int64_t R = moePermuteRows(p);
      std::vector<float> xp(size_t(R * H));
      std::vector<int32_t> slots(static_cast<size_t>(T * k)), sizes(static_cast<size_t>(E));
      const Status cpu = moePermute(x.data(), experts.data(), xp.data(), slots.data(), sizes.data(), p);
      ASSERT_FALSE(cpu.isOk());
      EXPECT_EQ(cpu.message(), moePermuteExpertError(3, E + 5));
      int code = 0;
      const std::string gpu = run(
          K::kMoePermute, p,
          {{x.data(), T * H}, {experts.data(), T * k}, {xp.data(), R * H}, {slots.data(), T * k}, {sizes.data(), E}},
          &code);
      EXPECT_EQ(code, kDeviceMoeExpertOutOfRange);
      EXPECT_EQ(gpu, cpu.message());
    }
  }
  {
    const int64_t N = 20;
    std::vector<int32_t> slots = permutation(N, 94);
    slots.resize(size_t(T * k));
    slots[size_t(4 * k)] = int32_t(N);  // token 4
    slots[size_t(2 * k + 1)] = -2;      // token 2: the lowest bad token
    slots[size_t(1 * k)] = -1;          // dropped: fine
    MoeParams p = moe(T, H, 0, k);
    p.N = N;
    const std::vector<float> xp = randomF32(N * H, 95);
    std::vector<float> y(size_t(T * H)), dxp(size_t(N * H)), dw(size_t(T * k));
    const Status cpuFwd = moeUnpermute(xp.data(), slots.data(), w.data(), y.data(), p);
    ASSERT_FALSE(cpuFwd.isOk());
    int code = 0;
    EXPECT_EQ(run(K::kMoeUnpermute, p,
                  {{xp.data(), N * H}, {slots.data(), T * k}, {w.data(), T * k}, {y.data(), T * H}}, &code),
              cpuFwd.message());
    EXPECT_EQ(code, kDeviceMoeSlotOutOfRange);
    const Status cpuBwd = moeUnpermuteBackward(dy.data(), xp.data(), slots.data(), w.data(), dxp.data(), dw.data(), p);
    ASSERT_FALSE(cpuBwd.isOk());
    EXPECT_EQ(run(K::kMoeUnpermuteBwd, p,
                  {{dy.data(), T * H},
                   {xp.data(), N * H},
                   {slots.data(), T * k},
                   {w.data(), T * k},
                   {dxp.data(), N * H},
                   {dw.data(), T * k}},
                  &code),
              cpuBwd.message());
    EXPECT_EQ(code, kDeviceMoeSlotBwdOutOfRange);
    EXPECT_EQ(cpuBwd.message(), moeSlotError("moe_unpermute_bwd", 2, -2));
  }
  for (void* ptr : dev) cudaFree(ptr);
  cudaStreamDestroy(stream);
}

struct GroupedShape {
  int64_t K, O;
  std::vector<int32_t> sizes;  // N = their sum + tail
  int64_t tail;                // rows past the sizes' sum
};

std::vector<GroupedShape> groupedShapes() {
  return {
      {37, 45, {13, 0, 33, 1, 9}, 14},  // an empty expert, one over two row tiles, a tail
      {16, 8, {70}, 0},                 // one expert, three row tiles
      {5, 70, {0, 0, 4, 0}, 3},         // leading and trailing empty experts
      {64, 96, {32, 32, 0, 65}, 0},     // whole tiles
  };
}

TEST(CudaMoeKernels, GroupedLinearForwardAndInputGradient) {
  LLCDIST_REQUIRE_GPU();
  for (bool bf16 : {false, true})
    for (const GroupedShape& s : groupedShapes()) {
      const int64_t E = int64_t(s.sizes.size());
      const int64_t N = std::accumulate(s.sizes.begin(), s.sizes.end(), int64_t(0)) + s.tail;
      SCOPED_TRACE(std::string(bf16 ? "bf16" : "f32") + " N " + std::to_string(N) + " K " + std::to_string(s.K) +
                   " O " + std::to_string(s.O) + " E " + std::to_string(E));
      const MoeParams p = grouped(N, s.K, s.O, E);
      KernelCase fwd(K::kGroupedLinearFwd, p);
      floats(fwd, bf16, "x", randomF32(N * s.K, 30));
      floats(fwd, bf16, "w", randomF32(E * s.O * s.K, 31));
      fwd.i32("group_sizes", s.sizes);
      floats(fwd, bf16, "y", randomF32(N * s.O, 32));  // overwritten
      fwd.expectMatch(atolFor(bf16, kGemmAtol), rtolFor(bf16, kGemmRtol));

      KernelCase bwd(K::kGroupedLinearBwdInput, p);
      floats(bwd, bf16, "dy", randomF32(N * s.O, 33));
      floats(bwd, bf16, "w", randomF32(E * s.O * s.K, 34));
      bwd.i32("group_sizes", s.sizes);
      floats(bwd, bf16, "dx", randomF32(N * s.K, 35));  // overwritten
      bwd.expectMatch(atolFor(bf16, kGemmAtol), rtolFor(bf16, kGemmRtol));
    }
}

TEST(CudaMoeKernels, GroupedLinearWeightGradient) {
  LLCDIST_REQUIRE_GPU();
  for (bool bf16 : {false, true})
    for (const GroupedShape& s : groupedShapes())
      for (bool accumulate : {false, true})
        for (bool f32Grad : {false, true}) {  // a bf16 plan's f32 gradient, or bf16 (f32 plans: f32 only)
          if (!bf16 && !f32Grad) continue;
          const int64_t E = int64_t(s.sizes.size());
          const int64_t N = std::accumulate(s.sizes.begin(), s.sizes.end(), int64_t(0)) + s.tail;
          SCOPED_TRACE(std::string(bf16 ? "bf16" : "f32") + (f32Grad ? " dw f32" : "") + " N " + std::to_string(N) +
                       " K " + std::to_string(s.K) + " O " + std::to_string(s.O) + (accumulate ? " accumulate" : ""));
          KernelCase c(K::kGroupedLinearBwdWeight, grouped(N, s.K, s.O, E, accumulate));
          floats(c, bf16, "dy", randomF32(N * s.O, 40));
          floats(c, bf16, "x", randomF32(N * s.K, 41));
          c.i32("group_sizes", s.sizes);
          floats(c, !f32Grad, "dw", randomF32(E * s.O * s.K, 42));
          c.expectMatch(atolFor(!f32Grad, kGemmAtol), rtolFor(!f32Grad, kGemmRtol));
        }
}

TEST(CudaMoeKernels, SigmoidGate) {
  LLCDIST_REQUIRE_GPU();
  for (bool bf16 : {false, true})
    for (int64_t H : {int64_t(45), int64_t(1), int64_t(700)}) {
      SCOPED_TRACE(std::string(bf16 ? "bf16" : "f32") + " H " + std::to_string(H));
      const int64_t T = 37;
      KernelCase fwd(K::kSigmoidGateFwd, moe(T, H, 0, 0));
      floats(fwd, bf16, "gate", randomF32(T, 50, -4, 4));
      floats(fwd, bf16, "x", randomF32(T * H, 51));
      floats(fwd, bf16, "y", randomF32(T * H, 52));  // overwritten
      fwd.expectMatch(atolFor(bf16, kAtol), rtolFor(bf16, kRtol));

      KernelCase bwd(K::kSigmoidGateBwd, moe(T, H, 0, 0));
      floats(bwd, bf16, "dy", randomF32(T * H, 53));
      floats(bwd, bf16, "gate", randomF32(T, 54, -4, 4));
      floats(bwd, bf16, "x", randomF32(T * H, 55));
      floats(bwd, bf16, "dgate", randomF32(T, 56));   // overwritten
      floats(bwd, bf16, "dx", randomF32(T * H, 57));  // overwritten
      bwd.expectMatch(atolFor(bf16, kGemmAtol), rtolFor(bf16, kGemmRtol));
    }
}

// Sizes the harness cannot compare (what the CPU does with them is its own business): group sizes
// beyond the rows, and a negative one, run in bounds (clamped) and leave no device error.
TEST(CudaMoeKernels, GroupSizesPastTheRowsStayInBounds) {
  LLCDIST_REQUIRE_GPU();
  const int64_t N = 20, Kin = 7, O = 9, E = 3;
  const std::vector<int32_t> sizes = {15, -4, 1000};
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  std::vector<void*> dev;
  auto upload = [&](const void* host, size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    dev.push_back(p);
    return p;
  };
  const std::vector<float> x = randomF32(N * Kin, 60), w = randomF32(E * O * Kin, 61), dy = randomF32(N * O, 62);
  void* xD = upload(x.data(), x.size() * 4);
  void* wD = upload(w.data(), w.size() * 4);
  void* dyD = upload(dy.data(), dy.size() * 4);
  void* sizesD = upload(sizes.data(), sizes.size() * 4);
  void* yD = upload(dy.data(), dy.size() * 4);
  void* dxD = upload(x.data(), x.size() * 4);
  void* dwD = upload(w.data(), w.size() * 4);
  int* flag = static_cast<int*>(upload(std::vector<int>{0}.data(), sizeof(int)));
  {
    StreamScratch scratch(stream, 0);
    CudaKernelContext ctx;
    ctx.stream = stream;
    ctx.scratch = &scratch;
    ctx.deviceError = flag;
    auto run = [&](K kind, std::vector<void*> ptrs, std::vector<int64_t> elems, bool accumulate = false) {
      KernelCall c;
      c.kind = kind;
      c.params = grouped(N, Kin, O, E, accumulate);
      for (size_t r = 0; r < ptrs.size(); ++r) {
        c.args.push_back({ptrs[r]});
        c.argElems.push_back({elems[r]});
      }
      const CudaKernel* kernel = cudaKernel(kind);
      ASSERT_NE(kernel, nullptr);
      const Status st = (*kernel)(c, ctx);
      ASSERT_TRUE(st.isOk()) << st.toString();
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess) << schema::opName(kind);
    };
    run(K::kGroupedLinearFwd, {xD, wD, sizesD, yD}, {N * Kin, E * O * Kin, E, N * O});
    run(K::kGroupedLinearBwdInput, {dyD, wD, sizesD, dxD}, {N * O, E * O * Kin, E, N * Kin});
    run(K::kGroupedLinearBwdWeight, {dyD, xD, sizesD, dwD}, {N * O, N * Kin, E, E * O * Kin}, true);
  }
  int code = -1;
  ASSERT_EQ(cudaMemcpy(&code, flag, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(code, 0);
  // Expert 0 holds rows 0..14, expert 1 none, expert 2 the 5 rows left (its 1000 clamped): no tail.
  std::vector<float> y(size_t(N * O));
  ASSERT_EQ(cudaMemcpy(y.data(), yD, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int64_t n : {int64_t(0), int64_t(14), int64_t(15), N - 1})
    for (int64_t o = 0; o < O; ++o) {
      const int64_t e = n < 15 ? 0 : 2;
      double ref = 0;
      for (int64_t kk = 0; kk < Kin; ++kk) ref += double(x[size_t(n * Kin + kk)]) * w[size_t((e * O + o) * Kin + kk)];
      EXPECT_NEAR(y[size_t(n * O + o)], ref, 1e-4) << "row " << n << ", output " << o;
    }
  for (void* p : dev) cudaFree(p);
  cudaStreamDestroy(stream);
}

// moe_chunk_transpose (expert parallelism): random r × c grids with empty chunks (a third of the splits
// 0), both directions, with and without col_sizes, rows past the sum zeroed (y starts as garbage); f32
// and bf16 copies match the CPU reference exactly.
TEST(CudaMoeKernels, ChunkTranspose) {
  LLCDIST_REQUIRE_GPU();
  std::mt19937 gen(70);
  for (bool bf16 : {false, true})
    for (auto [R, C] : {std::pair<int64_t, int64_t>{1, 1}, {2, 4}, {8, 2}, {5, 33}})
      for (bool inverse : {false, true})
        for (bool cols : {false, true}) {
          SCOPED_TRACE(std::string(bf16 ? "bf16" : "f32") + " r " + std::to_string(R) + " c " + std::to_string(C) +
                       (inverse ? " inverse" : "") + (cols ? " col_sizes" : ""));
          std::vector<int32_t> splits;
          int64_t total = 0;
          for (int64_t k = 0; k < R * C; ++k) {
            splits.push_back(gen() % 3 == 0 ? 0 : int32_t(gen() % 7));
            total += splits.back();
          }
          const int64_t H = 37, N = total + 5;
          MoeParams p;
          p.r = R, p.c = C, p.N = N, p.H = H, p.inverse = inverse;
          KernelCase c(K::kMoeChunkTranspose, p);
          floats(c, bf16, "x", randomF32(N * H, 71));
          c.i32("splits", splits);
          floats(c, bf16, "y", randomF32(N * H, 72));  // overwritten, the tail with zeros
          if (cols) c.i32("col_sizes", std::vector<int32_t>(size_t(C), -1));
          c.expectMatch(0.0, 0.0);
        }
}

}  // namespace
}  // namespace llcdist::rt::cuda::test
