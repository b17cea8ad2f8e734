// The moe family's CUDA kernels (src/cuda/kernels/Moe.cu) against the CPU reference kernels on the same
// inputs (KernelHarness.h), every op kind, f32 and bf16: routing over fewer and more experts than a warp
// (top-k with ties to the lower index: tokens whose logits are all equal or share the maximum),
// normalize on and off; the permutation with experts of no assignment; grouped GEMMs with empty
// experts, experts over several row tiles and rows past the sizes' sum, accumulate on and off; the
// sigmoid gate; the load-balancing loss's counts, gradient term and loss. Plus what the harness cannot
// show: group sizes that overrun the rows stay in bounds.
// Every test skips without a CUDA device.
//
// Inputs: logits are distinct multiples of 0.25 per token (exact in bf16, p ratios of e^0.25 apart),
// so no rounding can change the top-k; i32 outputs (experts, slots, group_sizes) are compared with a
// tolerance below 1, i.e. exactly. Copies (moe_permute's rows) match exactly; sums of k rows within f32
// tolerances; dot products and GEMMs (f32 accumulation in another order than the CPU's) 1e-4 / 1e-4;
// computed bf16 values within one bf16 ulp (CudaBf16KernelsTest.cpp).
#include "KernelHarness.h"

#include "llcdist/runtime/OpParams.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace llcdist::rt::cuda::test {
namespace {

using K = schema::OpKind;

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

// The load-balancing loss: moe_route's counts (accumulate on and off) and moe_route_bwd's gradient term
// and loss (counts and loss f32, the logits f32 or bf16). counts are integers (exact); the gradient term
// and the loss are f64 sums in another order than the CPU's.
TEST(CudaMoeKernels, RouteLoadBalancingLoss) {
  LLCDIST_REQUIRE_GPU();
  for (bool bf16 : {false, true})
    for (RouteShape s : {RouteShape{37, 9, 3}, RouteShape{300, 70, 4}, RouteShape{5, 8, 8}})
      for (bool flag : {false, true}) {  // moe_route's accumulate; moe_route_bwd's normalize
        SCOPED_TRACE(std::string(bf16 ? "bf16" : "f32") + " T " + std::to_string(s.T) + " E " + std::to_string(s.E) +
                     " k " + std::to_string(s.k) + (flag ? " flag" : ""));
        std::vector<float> counts(size_t(s.E));
        for (size_t e = 0; e < counts.size(); ++e) counts[e] = float((e * 7) % 11);
        MoeParams p = moe(s.T, 0, s.E, s.k, true);
        p.accumulate = flag;
        const std::vector<float> logits = separatedLogits(s.T, s.E, 21);
        KernelCase fwd(K::kMoeRoute, p);
        floats(fwd, bf16, "logits", logits);
        floats(fwd, bf16, "weights", randomF32(s.T * s.k, 22));  // overwritten
        fwd.i32("experts", randomI32(s.T * s.k, 23, -5, 100));   // overwritten
        fwd.f32("counts", counts);
        fwd.expectMatch(atolFor(bf16, kAtol), rtolFor(bf16, kRtol));

        p = moe(s.T, 0, s.E, s.k, flag);
        p.auxScale = 0.03;
        p.auxLossScale = 0.0625;
        KernelCase bwd(K::kMoeRouteBwd, p);
        floats(bwd, bf16, "logits", logits);
        bwd.i32("experts", distinctExperts(s.T, s.E, s.k, 24));
        floats(bwd, bf16, "dweights", randomF32(s.T * s.k, 25));
        floats(bwd, bf16, "dlogits", randomF32(s.T * s.E, 26));  // overwritten
        bwd.f32("counts", counts).f32("loss", {1.5f});
        bwd.expectMatch(atolFor(bf16, kGemmAtol), rtolFor(bf16, kGemmRtol));
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

}  // namespace
}  // namespace llcdist::rt::cuda::test
