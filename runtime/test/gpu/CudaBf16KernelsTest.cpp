// The CUDA kernels on bf16 buffers, as a bf16 plan binds them (host/KernelVariants.h: every float role
// f32 or bf16, stats and the loss f32), against the CPU reference of the interpreter's staged path
// (KernelHarness.h: bf16 arguments converted to f32, the f32 kernel, written ones rounded back). Both
// round each written value once at the same point, so they differ only where the f32 value before
// rounding differs in its last bits (another order of f32 sums, the device's expf / tanhf) and the
// rounding falls the other way: one bf16 ulp, 2^-8 relative. Hence kBf16Rtol = 2^-7 for computed bf16
// results, exact for copies and gathers; f32 outputs (stats, a bf16 GEMM's f32 gradient, the loss)
// keep their f32 tolerances. Sizes: multiples of 8 (the elementwise kernels' 16-byte path) and not
// (their scalar path), long runs of one id in the embedding gradient (its sort), GEMM shapes from a
// single row to tiled ones, both weight layouts, accumulate on and off. Skipped without a device.
#include "KernelHarness.h"

#include "llcdist/runtime/OpParams.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llcdist::rt::cuda::test {
namespace {

using K = schema::OpKind;

constexpr double kBf16Rtol = 1.0 / 128, kBf16Atol = 1e-6;  // one bf16 ulp (2^-8 relative), with margin
constexpr double kF32Atol = 1e-5, kF32Rtol = 1e-4;

ElementwiseParams elems(int64_t n) {
  ElementwiseParams p;
  p.n = n;
  return p;
}

TEST(CudaBf16Kernels, Elementwise) {
  LLCDIST_REQUIRE_GPU();
  for (int64_t n : {int64_t(4096), int64_t(1001)}) {  // the 8-wide path and the scalar one
    SCOPED_TRACE("n " + std::to_string(n));
    KernelCase(K::kGeluTanhFwd, elems(n))
        .bf16("x", randomF32(n, 1, -4, 4))
        .bf16("y", randomF32(n, 2))
        .expectMatch(kBf16Atol, kBf16Rtol);
    KernelCase(K::kGeluTanhBwd, elems(n))
        .bf16("dy", randomF32(n, 3))
        .bf16("x", randomF32(n, 4, -4, 4))
        .bf16("dx", randomF32(n, 5))
        .expectMatch(kBf16Atol, kBf16Rtol);
    KernelCase(K::kSwigluFwd, elems(n))
        .bf16("gate", randomF32(n, 6, -6, 6))
        .bf16("up", randomF32(n, 7))
        .bf16("y", randomF32(n, 8))
        .expectMatch(kBf16Atol, kBf16Rtol);
    KernelCase(K::kSwigluBwd, elems(n))
        .bf16("dy", randomF32(n, 9))
        .bf16("gate", randomF32(n, 10, -6, 6))
        .bf16("up", randomF32(n, 11))
        .bf16("dgate", randomF32(n, 12))
        .bf16("dup", randomF32(n, 13))
        .expectMatch(kBf16Atol, kBf16Rtol);
    // One f32 add of two exact values, rounded once: the same bits.
    KernelCase(K::kAdd, elems(n))
        .bf16("a", randomF32(n, 14))
        .bf16("b", randomF32(n, 15))
        .bf16("y", randomF32(n, 16))
        .expectMatch(0, 0);
    KernelCase(K::kAdd, elems(n))
        .bf16("a", randomF32(n, 17))
        .f32("b", randomF32(n, 18))
        .bf16("y", randomF32(n, 19))
        .expectMatch(0, 0);
    KernelCase(K::kAccumulate, elems(n)).bf16("x", randomF32(n, 20)).bf16("y", randomF32(n, 21)).expectMatch(0, 0);
    KernelCase(K::kAccumulate, elems(n)).bf16("x", randomF32(n, 22)).f32("y", randomF32(n, 23)).expectMatch(0, 0);
    KernelCase(K::kCopy, elems(n)).bf16("x", randomF32(n, 24)).bf16("y", randomF32(n, 25)).expectMatch(0, 0);
    KernelCase(K::kCopy, elems(n)).f32("x", randomF32(n, 26)).bf16("y", randomF32(n, 27)).expectMatch(0, 0);
  }
}

TEST(CudaBf16Kernels, SplitAndShardSliceCopyBf16) {
  LLCDIST_REQUIRE_GPU();
  LayoutParams p;
  p.rows = 13;
  p.sizes = {8, 24, 5};
  KernelCase(K::kSplitFwd, p)
      .bf16("x", randomF32(13 * 37, 30))
      .bf16("outs", randomF32(13 * 8, 31))
      .bf16("outs", randomF32(13 * 24, 32))
      .bf16("outs", randomF32(13 * 5, 33))
      .expectMatch(0, 0);
  KernelCase(K::kSplitBwd, p)
      .bf16("douts", randomF32(13 * 8, 34))
      .bf16("douts", randomF32(13 * 24, 35))
      .bf16("douts", randomF32(13 * 5, 36))
      .bf16("dx", randomF32(13 * 37, 37))
      .expectMatch(0, 0);
  LayoutParams s;
  s.members = 3;
  s.member = 2;
  s.outer = 4;
  s.inner = 7;
  s.total = 19;  // padded blocks: the last member's block is 5 real + 2 zero
  KernelCase(K::kShardSlice, s).bf16("x", randomF32(4 * 19, 38)).bf16("y", randomF32(4 * 7, 39)).expectMatch(0, 0);
}

EmbeddingParams embedding(int64_t M, int64_t V, int64_t H, bool accumulate, VocabShard shard = {}) {
  EmbeddingParams p;
  p.M = M;
  p.V = V;
  p.H = H;
  p.accumulate = accumulate;
  p.vocabShard = shard;
  return p;
}

TEST(CudaBf16Kernels, EmbeddingForwardAndBackward) {
  LLCDIST_REQUIRE_GPU();
  const int64_t H = 72;
  KernelCase(K::kEmbeddingFwd, embedding(33, 11, H, false))
      .i32("ids", randomI32(33, 40, 0, 10))
      .bf16("table", randomF32(11 * H, 41))
      .bf16("out", randomF32(33 * H, 42))
      .expectMatch(0, 0);
  // The gradient sums each id's rows in increasing m, in f32, rounded once: the CPU's bits. 4096 rows
  // of 7 ids: runs of ~600 rows (the sort's segments); a bf16 and an f32 table; vocabulary-sharded.
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
    KernelCase(K::kEmbeddingBwdWeight, embedding(4096, 7, H, accumulate))
        .i32("ids", randomI32(4096, 43, 0, 6))
        .bf16("dout", randomF32(4096 * H, 44))
        .bf16("dtable", randomF32(7 * H, 45))
        .expectMatch(0, 0);
    KernelCase(K::kEmbeddingBwdWeight, embedding(4096, 7, H, accumulate))
        .i32("ids", randomI32(4096, 46, 0, 6))
        .bf16("dout", randomF32(4096 * H, 47))
        .f32("dtable", randomF32(7 * H, 48))
        .expectMatch(0, 0);
    KernelCase(K::kEmbeddingBwdWeight, embedding(500, 5, H, accumulate, VocabShard{1, 3}))
        .i32("ids", randomI32(500, 49, 0, 14))
        .bf16("dout", randomF32(500 * H, 50))
        .bf16("dtable", randomF32(5 * H, 51))
        .expectMatch(0, 0);
  }
  EmbeddingParams pos;
  pos.B = 3;
  pos.S = 17;
  pos.H = H;
  pos.P = 20;
  KernelCase(K::kPosEmbeddingFwd, pos)
      .bf16("x", randomF32(3 * 17 * H, 52))
      .bf16("wpe", randomF32(20 * H, 53))
      .bf16("y", randomF32(3 * 17 * H, 54))
      .expectMatch(0, 0);
  pos.accumulate = true;
  KernelCase(K::kPosEmbeddingBwdWeight, pos)
      .bf16("dy", randomF32(3 * 17 * H, 55))
      .bf16("dwpe", randomF32(20 * H, 56))
      .expectMatch(0, 0);
  // The fused position embedding (wpe / dwpe): the sum in f32 on the gathered bf16 row, rounded once.
  EmbeddingParams fused = embedding(3 * 17, 11, H, true);
  fused.B = 3;
  fused.S = 17;
  fused.P = 20;
  KernelCase(K::kEmbeddingFwd, fused)
      .i32("ids", randomI32(3 * 17, 57, 0, 10))
      .bf16("table", randomF32(11 * H, 58))
      .bf16("out", randomF32(3 * 17 * H, 59))
      .bf16("wpe", randomF32(20 * H, 60))
      .expectMatch(0, 0);
  KernelCase(K::kEmbeddingBwdWeight, fused)
      .i32("ids", randomI32(3 * 17, 61, 0, 10))
      .bf16("dout", randomF32(3 * 17 * H, 62))
      .bf16("dtable", randomF32(11 * H, 63))
      .bf16("dwpe", randomF32(20 * H, 64))
      .expectMatch(0, 0);
}

NormParams norm(int64_t M, int64_t H, bool accumulate = false) {
  NormParams p;
  p.M = M;
  p.H = H;
  p.eps = 1e-5;
  p.accumulate = accumulate;
  return p;
}

TEST(CudaBf16Kernels, Norms) {
  LLCDIST_REQUIRE_GPU();
  for (auto [M, H] : {std::pair<int64_t, int64_t>{67, 96}, {5, 1031}}) {
    SCOPED_TRACE("M " + std::to_string(M) + ", H " + std::to_string(H));
    // The stats are f32 (the plans' mean and rstd): f32 tolerances; y bf16.
    KernelCase(K::kLayerNormFwd, norm(M, H))
        .bf16("x", randomF32(M * H, 60, -2, 3))
        .bf16("gamma", randomF32(H, 61))
        .bf16("beta", randomF32(H, 62))
        .bf16("y", randomF32(M * H, 63))
        .f32("mean", randomF32(M, 64))
        .f32("rstd", randomF32(M, 65))
        .expectMatch(kF32Atol, kBf16Rtol);
    std::vector<float> x = randomF32(M * H, 66, -2, 3), mean(static_cast<size_t>(M)), rstd(static_cast<size_t>(M));
    for (int64_t m = 0; m < M; ++m) {  // the bf16 x's own statistics, as a forward saved them
      double s = 0, ss = 0;
      for (int64_t h = 0; h < H; ++h) s += bf16ToFloat(floatToBf16(x[size_t(m * H + h)]));
      const double mu = s / double(H);
      for (int64_t h = 0; h < H; ++h) {
        const double d = bf16ToFloat(floatToBf16(x[size_t(m * H + h)])) - mu;
        ss += d * d;
      }
      mean[size_t(m)] = float(mu);
      rstd[size_t(m)] = float(1.0 / std::sqrt(ss / double(H) + 1e-5));
    }
    KernelCase(K::kLayerNormBwdInput, norm(M, H))
        .bf16("dy", randomF32(M * H, 67))
        .bf16("x", x)
        .bf16("gamma", randomF32(H, 68))
        .f32("mean", mean)
        .f32("rstd", rstd)
        .bf16("dx", randomF32(M * H, 69))
        .expectMatch(1e-4, kBf16Rtol);
    for (bool acc : {false, true})
      KernelCase(K::kLayerNormBwdWeight, norm(M, H, acc))
          .bf16("dy", randomF32(M * H, 70))
          .bf16("x", x)
          .f32("mean", mean)
          .f32("rstd", rstd)
          .bf16("dgamma", randomF32(H, 71))
          .bf16("dbeta", randomF32(H, 72))
          .expectMatch(1e-4, kBf16Rtol);
    KernelCase(K::kRmsNormFwd, norm(M, H))
        .bf16("x", x)
        .bf16("weight", randomF32(H, 73))
        .bf16("y", randomF32(M * H, 74))
        .f32("rstd", rstd)
        .expectMatch(kF32Atol, kBf16Rtol);
    KernelCase(K::kRmsNormBwdInput, norm(M, H))
        .bf16("dy", randomF32(M * H, 75))
        .bf16("x", x)
        .bf16("weight", randomF32(H, 76))
        .f32("rstd", rstd)
        .bf16("dx", randomF32(M * H, 77))
        .expectMatch(1e-4, kBf16Rtol);
    KernelCase(K::kRmsNormBwdWeight, norm(M, H, true))
        .bf16("dy", randomF32(M * H, 78))
        .bf16("x", x)
        .f32("rstd", rstd)
        .bf16("dweight", randomF32(H, 79))
        .expectMatch(1e-4, kBf16Rtol);
    // The fused norms (llcdist-plan-fuse-norm) against the CPU's, which rounds the intermediates as the
    // unfused ops stored them (the sum; the input gradient before the residual's add).
    KernelCase(K::kAddLayerNormFwd, norm(M, H))
        .bf16("a", randomF32(M * H, 80, -2, 3))
        .bf16("b", randomF32(M * H, 81))
        .bf16("sum", randomF32(M * H, 82))
        .bf16("gamma", randomF32(H, 83))
        .bf16("beta", randomF32(H, 84))
        .bf16("y", randomF32(M * H, 85))
        .f32("mean", randomF32(M, 86))
        .f32("rstd", randomF32(M, 87))
        .expectMatch(kF32Atol, kBf16Rtol);
    KernelCase(K::kAddRmsNormFwd, norm(M, H))
        .bf16("a", randomF32(M * H, 88, -2, 3))
        .bf16("b", randomF32(M * H, 89))
        .bf16("sum", randomF32(M * H, 90))
        .bf16("weight", randomF32(H, 91))
        .bf16("y", randomF32(M * H, 92))
        .f32("rstd", randomF32(M, 93))
        .expectMatch(kF32Atol, kBf16Rtol);
    for (bool residual : {false, true}) {
      KernelCase ln(K::kLayerNormBwd, norm(M, H, true));
      ln.bf16("dy", randomF32(M * H, 94))
          .bf16("x", x)
          .bf16("gamma", randomF32(H, 95))
          .f32("mean", mean)
          .f32("rstd", rstd)
          .bf16("dx", randomF32(M * H, 96))
          .bf16("dgamma", randomF32(H, 97))
          .bf16("dbeta", randomF32(H, 98));
      if (residual) ln.bf16("dresidual", randomF32(M * H, 99));
      ln.expectMatch(1e-4, kBf16Rtol);
      KernelCase rms(K::kRmsNormBwd, norm(M, H, false));
      rms.bf16("dy", randomF32(M * H, 100))
          .bf16("x", x)
          .bf16("weight", randomF32(H, 101))
          .f32("rstd", rstd)
          .bf16("dx", randomF32(M * H, 102))
          .bf16("dweight", randomF32(H, 103));
      if (residual) rms.bf16("dresidual", randomF32(M * H, 104));
      rms.expectMatch(1e-4, kBf16Rtol);
    }
  }
}

TEST(CudaBf16Kernels, Rope) {
  LLCDIST_REQUIRE_GPU();
  RopeParams p;
  p.B = 2;
  p.S = 9;
  p.n = 3;
  p.hd = 16;
  StatusOr<RopeTable> table = makeRopeTable(RopeConfig{}, p.hd, 0, p.S);
  ASSERT_TRUE(table.isOk());
  p.table = std::make_shared<RopeTable>(std::move(table).value());
  const int64_t n = p.B * p.S * p.n * p.hd;
  KernelCase(K::kRopeFwd, p).bf16("x", randomF32(n, 80)).bf16("y", randomF32(n, 81)).expectMatch(kBf16Atol, kBf16Rtol);
  KernelCase(K::kRopeBwd, p)
      .bf16("dy", randomF32(n, 82))
      .bf16("dx", randomF32(n, 83))
      .expectMatch(kBf16Atol, kBf16Rtol);
}

// The model families' optional attrs on bf16 buffers: rope's rotary_dim (Phi), the RMS norms'
// weight_offset (Gemma), the embedding's scale (Gemma: exact, a product rounded once) and swiglu's act
// "gelu_tanh" (GeGLU).
TEST(CudaBf16Kernels, FamilyAttrs) {
  LLCDIST_REQUIRE_GPU();
  for (auto [hd, rd] : {std::pair<int64_t, int64_t>{16, 8}, {80, 32}, {10, 6}}) {
    SCOPED_TRACE("hd " + std::to_string(hd) + ", rotary_dim " + std::to_string(rd));
    RopeParams p;
    p.B = 2;
    p.S = 9;
    p.n = 3;
    p.hd = hd;
    p.rotaryDim = rd;
    StatusOr<RopeTable> table = makeRopeTable(RopeConfig{}, rd, 0, p.S);
    ASSERT_TRUE(table.isOk());
    p.table = std::make_shared<RopeTable>(std::move(table).value());
    const int64_t n = p.B * p.S * p.n * p.hd;
    KernelCase(K::kRopeFwd, p)
        .bf16("x", randomF32(n, 84))
        .bf16("y", randomF32(n, 85))
        .expectMatch(kBf16Atol, kBf16Rtol);
    KernelCase(K::kRopeBwd, p)
        .bf16("dy", randomF32(n, 86))
        .bf16("dx", randomF32(n, 87))
        .expectMatch(kBf16Atol, kBf16Rtol);
  }
  for (auto [M, H] : {std::pair<int64_t, int64_t>{67, 96}, {5, 1031}}) {
    SCOPED_TRACE("M " + std::to_string(M) + ", H " + std::to_string(H));
    NormParams p = norm(M, H);
    p.weightOffset = 1.0;
    std::vector<float> x = randomF32(M * H, 110, -2, 3), rstd(static_cast<size_t>(M));
    for (int64_t m = 0; m < M; ++m) {  // the bf16 x's own rstd, as a forward saved it
      double ss = 0;
      for (int64_t h = 0; h < H; ++h) {
        const double v = bf16ToFloat(floatToBf16(x[size_t(m * H + h)]));
        ss += v * v;
      }
      rstd[size_t(m)] = float(1.0 / std::sqrt(ss / double(H) + 1e-5));
    }
    KernelCase(K::kRmsNormFwd, p)
        .bf16("x", x)
        .bf16("weight", randomF32(H, 111))
        .bf16("y", randomF32(M * H, 112))
        .f32("rstd", rstd)
        .expectMatch(kF32Atol, kBf16Rtol);
    KernelCase(K::kAddRmsNormFwd, p)
        .bf16("a", randomF32(M * H, 113, -2, 3))
        .bf16("b", randomF32(M * H, 114))
        .bf16("sum", randomF32(M * H, 115))
        .bf16("weight", randomF32(H, 116))
        .bf16("y", randomF32(M * H, 117))
        .f32("rstd", randomF32(M, 118))
        .expectMatch(kF32Atol, kBf16Rtol);
    KernelCase(K::kRmsNormBwdInput, p)
        .bf16("dy", randomF32(M * H, 119))
        .bf16("x", x)
        .bf16("weight", randomF32(H, 120))
        .f32("rstd", rstd)
        .bf16("dx", randomF32(M * H, 121))
        .expectMatch(1e-4, kBf16Rtol);
    for (bool residual : {false, true}) {
      KernelCase rms(K::kRmsNormBwd, p);
      rms.bf16("dy", randomF32(M * H, 122))
          .bf16("x", x)
          .bf16("weight", randomF32(H, 123))
          .f32("rstd", rstd)
          .bf16("dx", randomF32(M * H, 124))
          .bf16("dweight", randomF32(H, 125));
      if (residual) rms.bf16("dresidual", randomF32(M * H, 126));
      rms.expectMatch(1e-4, kBf16Rtol);
    }
  }
  {
    const int64_t H = 72;
    EmbeddingParams p = embedding(33, 11, H, false);
    p.scale = double(bf16ToFloat(floatToBf16(float(std::sqrt(double(H))))));  // the normalizer in bf16, as Gemma's
    KernelCase(K::kEmbeddingFwd, p)
        .i32("ids", randomI32(33, 127, 0, 10))
        .bf16("table", randomF32(11 * H, 128))
        .bf16("out", randomF32(33 * H, 129))
        .expectMatch(0, 0);
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
      EmbeddingParams b = embedding(4096, 7, H, accumulate);
      b.scale = p.scale;
      KernelCase(K::kEmbeddingBwdWeight, b)
          .i32("ids", randomI32(4096, 130, 0, 6))
          .bf16("dout", randomF32(4096 * H, 131))
          .bf16("dtable", randomF32(7 * H, 132))
          .expectMatch(0, 0);
      EmbeddingParams sharded = embedding(500, 5, H, accumulate, VocabShard{1, 3});
      sharded.scale = p.scale;
      KernelCase(K::kEmbeddingBwdWeight, sharded)
          .i32("ids", randomI32(500, 133, 0, 14))
          .bf16("dout", randomF32(500 * H, 134))
          .f32("dtable", randomF32(5 * H, 135))
          .expectMatch(0, 0);
    }
  }
  for (int64_t n : {int64_t(4096), int64_t(1001)}) {  // the 8-wide path and the scalar one
    SCOPED_TRACE("swiglu gelu_tanh, n " + std::to_string(n));
    ElementwiseParams p = elems(n);
    p.act = GluActivation::kGeluTanh;
    KernelCase(K::kSwigluFwd, p)
        .bf16("gate", randomF32(n, 136, -6, 6))
        .bf16("up", randomF32(n, 137))
        .bf16("y", randomF32(n, 138))
        .expectMatch(kBf16Atol, kBf16Rtol);
    KernelCase(K::kSwigluBwd, p)
        .bf16("dy", randomF32(n, 139))
        .bf16("gate", randomF32(n, 140, -6, 6))
        .bf16("up", randomF32(n, 141))
        .bf16("dgate", randomF32(n, 142))
        .bf16("dup", randomF32(n, 143))
        .expectMatch(kBf16Atol, kBf16Rtol);
  }
}

LinearParams linear(int64_t M, int64_t K, int64_t N, WeightLayout layout, bool accumulate) {
  LinearParams p;
  p.M = M;
  p.K = K;
  p.N = N;
  p.layout = layout;
  p.accumulate = accumulate;
  return p;
}

// bf16 × bf16 on tensor cores (f32 accumulation) into bf16, and into f32 (a plan's f32 gradient).
TEST(CudaBf16Kernels, LinearOnTensorCores) {
  LLCDIST_REQUIRE_GPU();
  struct Size {
    int64_t M, K, N;
  };
  for (Size s : {Size{5, 37, 19}, Size{1, 8, 7}, Size{130, 96, 72}, Size{256, 64, 128}})
    for (WeightLayout l : {WeightLayout::kOutIn, WeightLayout::kInOut})
      for (bool acc : {false, true}) {
        SCOPED_TRACE("M " + std::to_string(s.M) + " K " + std::to_string(s.K) + " N " + std::to_string(s.N) +
                     (l == WeightLayout::kOutIn ? " out_in" : " in_out") + (acc ? " accumulate" : ""));
        const LinearParams p = linear(s.M, s.K, s.N, l, acc);
        // A bf16 sum of K products whose terms cancel can round differently at a smaller magnitude
        // than the result's ulp: atol scales with sqrt(K) (the sum's typical size) times 2^-8.
        const double atol = std::sqrt(double(s.K)) / 256.0;
        if (!acc) {
          for (bool bias : {false, true}) {
            KernelCase k(K::kLinearFwd, p);
            k.bf16("x", randomF32(s.M * s.K, 90)).bf16("w", randomF32(s.N * s.K, 91));
            if (bias) k.bf16("bias", randomF32(s.N, 92));
            k.bf16("y", randomF32(s.M * s.N, 93)).expectMatch(atol, kBf16Rtol);
            // With gelu (llcdist-plan-fuse-epilogues): GELU_AUX(_BIAS) takes the GELU of the f32 product,
            // the CPU of y as stored (docs/plan-format.md): the same tolerance, a GELU' <= 1.13 apart.
            KernelCase g(K::kLinearFwd, p);
            g.bf16("x", randomF32(s.M * s.K, 90)).bf16("w", randomF32(s.N * s.K, 91));
            if (bias) g.bf16("bias", randomF32(s.N, 92));
            g.bf16("y", randomF32(s.M * s.N, 93)).bf16("gelu", randomF32(s.M * s.N, 109)).expectMatch(atol, kBf16Rtol);
          }
          KernelCase(K::kLinearBwdInput, p)  // with gelu_x: the DGELU epilogue
              .bf16("dy", randomF32(s.M * s.N, 94))
              .bf16("w", randomF32(s.N * s.K, 95))
              .bf16("gelu_x", randomF32(s.M * s.K, 110))
              .bf16("dx", randomF32(s.M * s.K, 96))
              .expectMatch(atol, kBf16Rtol);
        }
        KernelCase(K::kLinearBwdInput, p)
            .bf16("dy", randomF32(s.M * s.N, 94))
            .bf16("w", randomF32(s.N * s.K, 95))
            .bf16("dx", randomF32(s.M * s.K, 96))
            .expectMatch(atol, kBf16Rtol);
        KernelCase(K::kLinearBwdWeight, p)
            .bf16("dy", randomF32(s.M * s.N, 97))
            .bf16("x", randomF32(s.M * s.K, 98))
            .bf16("dw", randomF32(s.N * s.K, 99))
            .expectMatch(std::sqrt(double(s.M)) / 256.0, kBf16Rtol);
        KernelCase(K::kLinearBwdWeight, p)  // f32 gradient of bf16 operands: no rounding to bf16
            .bf16("dy", randomF32(s.M * s.N, 100))
            .bf16("x", randomF32(s.M * s.K, 101))
            .f32("dw", randomF32(s.N * s.K, 102))
            .expectMatch(1e-4, 1e-4);
        // With db (llcdist-plan-fuse-epilogues): a bf16 db is the epilogue's (written, not accumulated),
        // an f32 one the own bias kernels'; the epilogue sums M terms in f32, as dw.
        for (bool bf16Db : {true, false}) {
          KernelCase k(K::kLinearBwdWeight, p);
          k.bf16("dy", randomF32(s.M * s.N, 105)).bf16("x", randomF32(s.M * s.K, 106));
          k.bf16("dw", randomF32(s.N * s.K, 107));
          if (bf16Db)
            k.bf16("db", randomF32(s.N, 108));
          else
            k.f32("db", randomF32(s.N, 108));
          k.expectMatch(std::sqrt(double(s.M)) / 256.0, kBf16Rtol);
        }
        KernelCase(K::kLinearBwdBias, p)
            .bf16("dy", randomF32(s.M * s.N, 103))
            .bf16("db", randomF32(s.N, 104))
            .expectMatch(kBf16Atol, kBf16Rtol);
      }
}

LossParams loss(int64_t M, int64_t V, double scale) {
  LossParams p;
  p.M = M;
  p.V = V;
  p.scale = scale;
  return p;
}

TEST(CudaBf16Kernels, CrossEntropyOnBf16Logits) {
  LLCDIST_REQUIRE_GPU();
  const int64_t M = 37, V = 1000;
  KernelCase(K::kCrossEntropyFwd, loss(M, V, 0.5))
      .bf16("logits", randomF32(M * V, 110, -6, 6))
      .i32("targets", randomI32(M, 111, 0, int32_t(V - 1)))
      .f32("loss", {0.25f})
      .expectMatch(kF32Atol, kF32Rtol);
  KernelCase(K::kCrossEntropyBwd, loss(M, V, 1.0 / double(M)))
      .bf16("logits", randomF32(M * V, 112, -6, 6))
      .i32("targets", randomI32(M, 113, 0, int32_t(V - 1)))
      .bf16("dlogits", randomF32(M * V, 114))
      .expectMatch(1e-7, kBf16Rtol);
}

// The fused classifier (llcdist-plan-fuse-classifier): per chunk, three cuBLASLt GEMMs around the row
// kernel writing the loss terms and the gradient in place of the chunk's logits. 37 rows in chunks of 8
// (the last one short), 41 of 50 columns real; bf16 operands with dw summed in the f32 dw_acc, and f32
// throughout. A bf16 logit whose f32 product rounds the other way changes its row's gradient by about an
// ulp, so dx and dw get the linear GEMMs' tolerance.
TEST(CudaBf16Kernels, ClassifierOverChunks) {
  LLCDIST_REQUIRE_GPU();
  const int64_t M = 37, K = 24, N = 50;
  for (bool bf16 : {true, false})
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(std::string(bf16 ? "bf16" : "f32") + (accumulate ? ", accumulate" : ""));
      ClassifierParams p;
      p.linear = {M, K, N, WeightLayout::kOutIn, accumulate};
      p.chunk = 8;
      p.scale = 0.5;
      p.gradScale = 1.0 / double(M);
      p.realVocab = 41;
      KernelCase k(K::kClassifier, p);
      auto floats = [&](const char* role, const std::vector<float>& v) { bf16 ? k.bf16(role, v) : k.f32(role, v); };
      floats("x", randomF32(M * K, 120, -1, 1));
      floats("w", randomF32(N * K, 121, -1, 1));
      k.i32("targets", randomI32(M, 122, 0, 40));
      k.f32("loss", {0.25f});
      floats("logits", randomF32(8 * N, 123));
      floats("dx", randomF32(M * K, 124));
      floats("dw", randomF32(N * K, 125));
      if (bf16) k.f32("dw_acc", randomF32(N * K, 126));
      k.expectMatch(bf16 ? std::sqrt(double(M)) / 256.0 : kF32Atol, bf16 ? kBf16Rtol : kF32Rtol);
    }
}

OptimizerParams adamw() {
  OptimizerParams p;
  p.beta1 = 0.9;
  p.beta2 = 0.95;
  p.eps = 1e-8;
  p.weightDecay = 0.1;
  return p;
}

TEST(CudaBf16Kernels, OptimizerOnBf16Gradients) {
  LLCDIST_REQUIRE_GPU();
  const int64_t n = 3001;
  OptimizerParams clip;
  clip.maxNorm = 1.0;
  KernelCase(K::kGradNorm, clip)
      .bf16("grads", randomF32(n, 120))
      .bf16("grads", randomF32(77, 121))
      .f32("grads", randomF32(5, 122))
      .f32("norm", {0.0f})
      .expectMatch(kF32Atol, kBf16Rtol);
  KernelCase(K::kAdamW, adamw())
      .f32("param", randomF32(n, 123))
      .bf16("grad", randomF32(n, 124))
      .f32("m", randomF32(n, 125, -0.1f, 0.1f))
      .f32("v", randomF32(n, 126, 0.0f, 0.01f))
      .step(1e-3, 7)
      .expectMatch(1e-6, 1e-5);
}

// The _multi ops (llcdist-plan-fuse-optimizer): each tensor's update as the single op's, over a list
// whose sizes straddle the chunk size (32768 elements: several chunks, a tail, a tensor smaller
// than one chunk), in f32 and with bf16 gradients and parameters.
TEST(CudaBf16Kernels, MultiTensorOps) {
  LLCDIST_REQUIRE_GPU();
  const std::vector<int64_t> sizes = {70001, 5, 32768, 1000};
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 params and grads" : "f32");
    KernelCase k(K::kAdamWMulti, adamw());
    uint32_t seed = 130;
    for (int64_t n : sizes) {
      if (bf16) {
        k.bf16("params", randomF32(n, seed)).bf16("grads", randomF32(n, seed + 1));
      } else {
        k.f32("params", randomF32(n, seed)).f32("grads", randomF32(n, seed + 1));
      }
      k.f32("m", randomF32(n, seed + 2, -0.1f, 0.1f)).f32("v", randomF32(n, seed + 3, 0.0f, 0.01f));
      seed += 4;
    }
    k.step(1e-3, 4).expectMatch(1e-6, bf16 ? kBf16Rtol : 1e-5);
    OptimizerParams sgd;
    sgd.momentum = 0.9;
    sgd.weightDecay = 0.01;
    KernelCase s(K::kSgdMulti, sgd);
    for (int64_t n : sizes) {
      if (bf16) {
        s.bf16("params", randomF32(n, seed)).bf16("grads", randomF32(n, seed + 1));
      } else {
        s.f32("params", randomF32(n, seed)).f32("grads", randomF32(n, seed + 1));
      }
      s.f32("momentum_bufs", randomF32(n, seed + 2));
      seed += 3;
    }
    s.step(1e-2, 3).expectMatch(1e-6, bf16 ? kBf16Rtol : 1e-5);
  }
  // cast_multi: f32 masters into bf16 copies (and one bf16 -> f32 pair): exact, Bf16.h's rounding.
  KernelCase c(K::kCastMulti, ElementwiseParams{});
  uint32_t seed = 200;
  for (int64_t n : sizes) c.f32("x", randomF32(n, seed++, -100, 100));
  c.bf16("x", randomF32(9, seed++));
  for (int64_t n : sizes) c.bf16("y", randomF32(n, seed++));
  c.f32("y", randomF32(9, seed++));
  c.expectMatch(0, 0);
}

}  // namespace
}  // namespace llcdist::rt::cuda::test
