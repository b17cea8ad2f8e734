// The CUDA kernels of the linear, attention and loss families (src/cuda/kernels/{Linear,Attention,
// Loss}.cu) against the CPU reference kernels on the same inputs (KernelHarness.h), every op kind:
// both weight layouts, accumulate on and off, with and without bias, odd sizes; causal GQA / MHA / MQA
// attention over one and several tiles and head dims 16..256, and with Mistral's sliding window (windows
// of one key, inside a tile, across tiles, >= S: then the causal bits); cross entropy plain, padded
// (real_vocab) and vocabulary-parallel. Plus what the harness cannot show: a target outside the
// vocabulary sets the device error (and leaves the loss alone), synchronous shape errors, and bitwise
// repeatability. Every test skips without a CUDA device.
//
// Tolerances: |gpu - cpu| <= atol + rtol·|cpu|. GEMMs run in f32 compute (no TF32), so 1e-4 / 1e-4
// holds with room; attention is f32 throughout (online softmax vs the CPU's two-pass one); the loss
// kernels compute in double as the CPU does, differing only in the order of the Σ exp, so 1e-6.
#include "KernelHarness.h"

#include "llcdist/runtime/Kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace llcdist::rt::cuda::test {
namespace {

using K = schema::OpKind;

// ---- Linear ---------------------------------------------------------------------------------------------

struct LinearCase {
  int64_t M, K, N;
  WeightLayout layout;
  bool accumulate;
  bool bias;
};
void PrintTo(const LinearCase& c, std::ostream* os) {
  *os << "M" << c.M << "_K" << c.K << "_N" << c.N << (c.layout == WeightLayout::kOutIn ? "_out_in" : "_in_out")
      << (c.accumulate ? "_acc" : "") << (c.bias ? "_bias" : "");
}
LinearParams linearParams(const LinearCase& c) {
  LinearParams p;
  p.M = c.M;
  p.K = c.K;
  p.N = c.N;
  p.layout = c.layout;
  p.accumulate = c.accumulate;
  return p;
}

class CudaLinearTest : public ::testing::TestWithParam<LinearCase> {};

TEST_P(CudaLinearTest, Forward) {
  LLCDIST_REQUIRE_GPU();
  const LinearCase& c = GetParam();
  KernelCase k(K::kLinearFwd, linearParams(c));
  k.f32("x", randomF32(c.M * c.K, 1)).f32("w", randomF32(c.N * c.K, 2));
  if (c.bias) k.f32("bias", randomF32(c.N, 3));
  k.f32("y", randomF32(c.M * c.N, 4));  // overwritten
  k.expectMatch(1e-4, 1e-4);
}

TEST_P(CudaLinearTest, BackwardInput) {
  LLCDIST_REQUIRE_GPU();
  const LinearCase& c = GetParam();
  KernelCase(K::kLinearBwdInput, linearParams(c))
      .f32("dy", randomF32(c.M * c.N, 5))
      .f32("w", randomF32(c.N * c.K, 6))
      .f32("dx", randomF32(c.M * c.K, 7))  // accumulated into or overwritten
      .expectMatch(1e-4, 1e-4);
}

TEST_P(CudaLinearTest, BackwardWeight) {
  LLCDIST_REQUIRE_GPU();
  const LinearCase& c = GetParam();
  KernelCase(K::kLinearBwdWeight, linearParams(c))
      .f32("dy", randomF32(c.M * c.N, 8))
      .f32("x", randomF32(c.M * c.K, 9))
      .f32("dw", randomF32(c.N * c.K, 10))
      .expectMatch(1e-4, 1e-4);
}

// With gelu / gelu_x (llcdist-plan-fuse-epilogues): cuBLASLt's GELU_AUX(_BIAS) / DGELU epilogues (or the
// GEMM and the own GELU map where it has no algorithm or the aux leading dimension is not a multiple of
// 8), against the CPU's GEMM then GELU.
TEST_P(CudaLinearTest, ForwardWithGelu) {
  LLCDIST_REQUIRE_GPU();
  const LinearCase& c = GetParam();
  KernelCase k(K::kLinearFwd, linearParams(c));
  k.f32("x", randomF32(c.M * c.K, 17)).f32("w", randomF32(c.N * c.K, 18));
  if (c.bias) k.f32("bias", randomF32(c.N, 19));
  k.f32("y", randomF32(c.M * c.N, 20)).f32("gelu", randomF32(c.M * c.N, 21)).expectMatch(1e-4, 1e-4);
}

TEST_P(CudaLinearTest, BackwardInputWithGeluGradient) {
  LLCDIST_REQUIRE_GPU();
  LinearCase c = GetParam();
  c.accumulate = false;  // gelu_x needs dx written
  KernelCase(K::kLinearBwdInput, linearParams(c))
      .f32("dy", randomF32(c.M * c.N, 22))
      .f32("w", randomF32(c.N * c.K, 23))
      .f32("gelu_x", randomF32(c.M * c.K, 24))
      .f32("dx", randomF32(c.M * c.K, 25))
      .expectMatch(1e-4, 1e-4);
}

// With db (llcdist-plan-fuse-epilogues): cuBLASLt's bias-gradient epilogue where db is written, the own
// bias kernels where it accumulates; f32 sums inside the GEMM, hence the GEMM's tolerance.
TEST_P(CudaLinearTest, BackwardWeightWithBiasGradient) {
  LLCDIST_REQUIRE_GPU();
  const LinearCase& c = GetParam();
  KernelCase(K::kLinearBwdWeight, linearParams(c))
      .f32("dy", randomF32(c.M * c.N, 13))
      .f32("x", randomF32(c.M * c.K, 14))
      .f32("dw", randomF32(c.N * c.K, 15))
      .f32("db", randomF32(c.N, 16))
      .expectMatch(1e-4, 1e-4);
}

TEST_P(CudaLinearTest, BackwardBias) {
  LLCDIST_REQUIRE_GPU();
  const LinearCase& c = GetParam();
  KernelCase(K::kLinearBwdBias, linearParams(c))
      .f32("dy", randomF32(c.M * c.N, 11))
      .f32("db", randomF32(c.N, 12))
      .expectMatch(1e-5, 1e-5);  // double sums, as the CPU
}

TEST_P(CudaLinearTest, BiasAdd) {
  LLCDIST_REQUIRE_GPU();
  const LinearCase& c = GetParam();
  KernelCase(K::kBiasAdd, linearParams(c))
      .f32("y", randomF32(c.M * c.N, 13))
      .f32("bias", randomF32(c.N, 14))
      .expectMatch(0, 0);  // one f32 add per element: exact
}

std::vector<LinearCase> linearCases() {
  std::vector<LinearCase> out;
  struct Size {
    int64_t M, K, N;
  };
  // Odd sizes; a single row / column; and sizes large enough for tiled cuBLASLt kernels and several
  // row chunks of linear_bwd_bias (64 rows a chunk).
  for (Size s : {Size{5, 37, 19}, Size{1, 1, 7}, Size{3, 8, 1}, Size{130, 96, 72}, Size{257, 64, 33}})
    for (WeightLayout l : {WeightLayout::kOutIn, WeightLayout::kInOut})
      for (bool acc : {false, true})
        for (bool bias : {false, true}) out.push_back({s.M, s.K, s.N, l, acc, bias});
  return out;
}
INSTANTIATE_TEST_SUITE_P(AllCases, CudaLinearTest, ::testing::ValuesIn(linearCases()));

// ---- Attention ------------------------------------------------------------------------------------------

struct AttentionCase {
  int64_t B, S, nh, nkv, hd;
  int64_t window = 0;  // the sliding window (attr `window`); 0: plain causal
  Alibi alibi{};       // BLOOM's ALiBi (attrs alibi_heads, head_axis); none by default
  AttentionShape shape() const { return {B, S, nh, nkv, hd, window, alibi}; }
};
void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << "B" << c.B << "_S" << c.S << "_nh" << c.nh << "_nkv" << c.nkv << "_hd" << c.hd;
  if (c.window > 0) *os << "_window" << c.window;
  if (c.alibi.on()) *os << "_alibi" << c.alibi.head0 << "of" << c.alibi.heads;
}
AttentionParams attentionParams(const AttentionCase& c) {
  AttentionParams p;
  p.B = c.B;
  p.S = c.S;
  p.nh = c.nh;
  p.nkv = c.nkv;
  p.hd = c.hd;
  p.window = c.window;
  p.alibi = c.alibi;
  return p;
}

class CudaAttentionTest : public ::testing::TestWithParam<AttentionCase> {
protected:
  const AttentionCase c = GetParam();
  const int64_t qElems = c.B * c.S * c.nh * c.hd, kvElems = c.B * c.S * c.nkv * c.hd, rows = c.B * c.nh * c.S;
  const std::vector<float> q = randomF32(qElems, 21), k = randomF32(kvElems, 22), v = randomF32(kvElems, 23);
  // Several tiles accumulate more terms: a little more room there.
  double tol() const { return c.S > 32 || c.hd > 64 ? 2e-4 : 1e-4; }
};

TEST_P(CudaAttentionTest, Forward) {
  LLCDIST_REQUIRE_GPU();
  KernelCase(K::kAttentionFwd, attentionParams(c))
      .f32("q", q)
      .f32("k", k)
      .f32("v", v)
      .f32("out", randomF32(qElems, 24))
      .f32("lse", randomF32(rows, 25))
      .expectMatch(tol(), tol());
}

TEST_P(CudaAttentionTest, Backward) {
  LLCDIST_REQUIRE_GPU();
  // The saved tensors as the forward makes them (the CPU's: both backends then read identical inputs).
  std::vector<float> out(static_cast<size_t>(qElems)), lse(static_cast<size_t>(rows));
  ASSERT_TRUE(attentionForward(c.shape(), q.data(), k.data(), v.data(), out.data(), lse.data()).isOk());
  KernelCase(K::kAttentionBwd, attentionParams(c))
      .f32("dout", randomF32(qElems, 26))
      .f32("q", q)
      .f32("k", k)
      .f32("v", v)
      .f32("out", out)
      .f32("lse", lse)
      .f32("dq", randomF32(qElems, 27))  // all three overwritten
      .f32("dk", randomF32(kvElems, 28))
      .f32("dv", randomF32(kvElems, 29))
      .expectMatch(tol(), tol());
}

// q, k, v packed in one qkv buffer and dq, dk, dv written into one dqkv (the roles llcdist-plan-packed-qkv
// gives GPT-2's attention): the own kernel's row strides against the CPU's.
TEST_P(CudaAttentionTest, PackedQkvAndGradients) {
  LLCDIST_REQUIRE_GPU();
  const int64_t packedElems = c.B * c.S * (c.nh + 2 * c.nkv) * c.hd;
  const QkvLayout packed = qkvLayout(c.nh, c.nkv, c.hd, true);
  std::vector<float> qkv(static_cast<size_t>(packedElems));
  for (int64_t r = 0; r < c.B * c.S; ++r) {
    std::copy_n(q.data() + r * c.nh * c.hd, c.nh * c.hd, qkv.data() + r * packed.qRow + packed.qOffset);
    std::copy_n(k.data() + r * c.nkv * c.hd, c.nkv * c.hd, qkv.data() + r * packed.qRow + packed.kOffset);
    std::copy_n(v.data() + r * c.nkv * c.hd, c.nkv * c.hd, qkv.data() + r * packed.qRow + packed.vOffset);
  }
  AttentionParams p = attentionParams(c);
  p.packedQkv = true;
  KernelCase(K::kAttentionFwd, p)
      .f32("qkv", qkv)
      .f32("out", randomF32(qElems, 24))
      .f32("lse", randomF32(rows, 25))
      .expectMatch(tol(), tol());
  std::vector<float> out(static_cast<size_t>(qElems)), lse(static_cast<size_t>(rows));
  ASSERT_TRUE(attentionForward(c.shape(), q.data(), k.data(), v.data(), out.data(), lse.data()).isOk());
  p.packedGrad = true;
  KernelCase(K::kAttentionBwd, p)
      .f32("dout", randomF32(qElems, 26))
      .f32("qkv", qkv)
      .f32("out", out)
      .f32("lse", lse)
      .f32("dqkv", randomF32(packedElems, 27))  // every element overwritten
      .expectMatch(tol(), tol());
}

INSTANTIATE_TEST_SUITE_P(AllCases, CudaAttentionTest,
                         ::testing::Values(AttentionCase{2, 13, 4, 2, 16},   // GQA, one tile
                                           AttentionCase{2, 13, 4, 2, 64},   //
                                           AttentionCase{1, 13, 3, 3, 24},   // MHA, hd not a multiple of 32
                                           AttentionCase{2, 9, 4, 1, 32},    // MQA
                                           AttentionCase{1, 70, 4, 2, 64},   // several key and query tiles
                                           AttentionCase{1, 1, 2, 1, 8},     // a single position
                                           AttentionCase{1, 37, 2, 1, 128},  //
                                           AttentionCase{1, 21, 2, 2, 256}));  // the largest head dim

// Mistral's sliding window: the CPU test's shape (GQA nh 4, nkv 2, S 16) with windows 1, 3, 16 (= S) and
// 100; over several key and query tiles (S 70, 100: the tiles before a block's first window skipped,
// the query tiles past its last key's window too), windows inside a tile, of a tile, across tiles.
INSTANTIATE_TEST_SUITE_P(Windowed, CudaAttentionTest,
                         ::testing::Values(AttentionCase{2, 16, 4, 2, 8, 1},      //
                                           AttentionCase{2, 16, 4, 2, 8, 3},      //
                                           AttentionCase{2, 16, 4, 2, 8, 16},     // = S: causal
                                           AttentionCase{2, 16, 4, 2, 8, 100},    // > S: causal
                                           AttentionCase{1, 70, 4, 2, 64, 5},     // inside a tile
                                           AttentionCase{1, 70, 4, 2, 64, 32},    // one tile
                                           AttentionCase{1, 70, 4, 2, 64, 45},    // across tiles
                                           AttentionCase{2, 100, 4, 1, 32, 40},   // MQA, across tiles
                                           AttentionCase{1, 37, 2, 1, 128, 1},    // the diagonal only
                                           AttentionCase{1, 21, 2, 2, 256, 7}));  // the largest head dim

// BLOOM's ALiBi (the own kernel: cuDNN is never chosen for it, AttentionPlanTest): all of a model's
// heads, a tp rank's slice (heads 6..9 of 12: from the power of two's slopes into the others'), over
// several tiles, with a sliding window, at the largest head dim.
INSTANTIATE_TEST_SUITE_P(Alibi, CudaAttentionTest,
                         ::testing::Values(AttentionCase{2, 16, 4, 2, 8, 0, {4, 0}},      //
                                           AttentionCase{1, 70, 4, 2, 64, 0, {12, 6}},    // a slice
                                           AttentionCase{2, 100, 4, 1, 32, 40, {8, 4}},   // + window
                                           AttentionCase{1, 21, 2, 2, 256, 0, {2, 0}}));  //

TEST(CudaAttentionErrorTest, RejectsHeadDimsPastTheLimit) {
  LLCDIST_REQUIRE_GPU();
  AttentionParams p;
  p.B = 1;
  p.S = 2;
  p.nh = 1;
  p.nkv = 1;
  p.hd = 512;
  const CudaKernel* kernel = cudaKernel(K::kAttentionFwd);
  ASSERT_NE(kernel, nullptr);
  KernelCall call;
  call.kind = K::kAttentionFwd;
  call.params = p;
  call.args.resize(schema::opSpec(call.kind).numArgs);
  call.argElems.resize(call.args.size());
  CudaKernelContext ctx;  // nothing is launched: the shape check comes first
  const Status s = (*kernel)(call, ctx);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.toString();
  EXPECT_NE(s.message().find("head dim 512"), std::string::npos) << s.message();
}

// ---- Loss -----------------------------------------------------------------------------------------------

LossParams lossParams(int64_t M, int64_t V, double scale, int64_t realVocab = 0,
                      std::optional<VocabShard> shard = std::nullopt) {
  LossParams p;
  p.M = M;
  p.V = V;
  p.scale = scale;
  p.realVocab = realVocab;
  p.vocabShard = shard;
  return p;
}

// Logits with large values in the padding columns (>= realV, local columns of this shard), which a
// kernel reading them would turn into a different result.
std::vector<float> logitsWithPadding(int64_t M, int64_t V, int64_t realV, int64_t begin, uint32_t seed) {
  std::vector<float> x = randomF32(M * V, seed, -3.0f, 3.0f);
  if (realV > 0)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < V; ++j)
        if (begin + j >= realV) x[size_t(m * V + j)] = 50.0f;
  return x;
}

struct PlainLossCase {
  int64_t M, V, realV;
};
class CudaCrossEntropyTest : public ::testing::TestWithParam<PlainLossCase> {};

TEST_P(CudaCrossEntropyTest, Forward) {
  LLCDIST_REQUIRE_GPU();
  const PlainLossCase c = GetParam();
  const int64_t R = c.realV > 0 ? c.realV : c.V;
  KernelCase(K::kCrossEntropyFwd, lossParams(c.M, c.V, 0.25, c.realV))
      .f32("logits", logitsWithPadding(c.M, c.V, c.realV, 0, 31))
      .i32("targets", randomI32(c.M, 32, 0, int32_t(R - 1)))
      .f32("loss", {0.75f})  // added to
      .expectMatch(1e-6, 1e-6);
}

TEST_P(CudaCrossEntropyTest, Backward) {
  LLCDIST_REQUIRE_GPU();
  const PlainLossCase c = GetParam();
  const int64_t R = c.realV > 0 ? c.realV : c.V;
  KernelCase(K::kCrossEntropyBwd, lossParams(c.M, c.V, 1.0 / double(c.M), c.realV))
      .f32("logits", logitsWithPadding(c.M, c.V, c.realV, 0, 33))
      .i32("targets", randomI32(c.M, 34, 0, int32_t(R - 1)))
      .f32("dlogits", randomF32(c.M * c.V, 35))  // overwritten, padding columns with 0
      .expectMatch(1e-6, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(AllCases, CudaCrossEntropyTest,
                         ::testing::Values(PlainLossCase{7, 50, 0}, PlainLossCase{7, 50, 41},
                                           PlainLossCase{1, 3, 0}, PlainLossCase{3, 1000, 0},  // V > the block
                                           PlainLossCase{300, 37, 30}));

// Vocabulary-parallel: 3 shards of V = 16 (48 global columns), this rank shard `index`; real_vocab 40
// puts 8 real columns on shard 2 (0 = no padding).
struct ShardCase {
  int64_t index, realV;
};
void PrintTo(const ShardCase& c, std::ostream* os) { *os << "shard" << c.index << "_real" << c.realV; }
class CudaVocabParallelTest : public ::testing::TestWithParam<ShardCase> {
protected:
  static constexpr int64_t M = 6, V = 16, kShards = 3;
  const ShardCase c = GetParam();
  const VocabShard shard{c.index, kShards};
  const int64_t globalR = c.realV > 0 ? c.realV : V * kShards;
  const std::vector<float> logits = logitsWithPadding(M, V, c.realV, c.index * V, 41);
  // Global targets: some on this shard, some elsewhere.
  const std::vector<int32_t> targets = randomI32(M, 42, 0, int32_t(globalR - 1));
  // Row statistics as the all-reduces would leave them: a max >= every logit (a float), positive sums
  // and the target logits.
  std::vector<double> rowMax() const {
    std::vector<double> r(static_cast<size_t>(M));
    for (int64_t m = 0; m < M; ++m) r[size_t(m)] = double(3.0f + 0.125f * float(m));
    return r;
  }
  std::vector<double> rowSums() const {
    std::vector<double> r(size_t(2 * M));
    for (int64_t m = 0; m < M; ++m) {
      r[size_t(m)] = 1.5 + 0.25 * double(m);
      r[size_t(M + m)] = -0.5 + 0.1 * double(m);
    }
    return r;
  }
};

TEST_P(CudaVocabParallelTest, Max) {
  LLCDIST_REQUIRE_GPU();
  KernelCase(K::kCrossEntropyMax, lossParams(M, V, 0, c.realV, shard))
      .f32("logits", logits)
      .i32("targets", targets)
      .f64("row_max", std::vector<double>(size_t(M), 0.0))
      .expectMatch(0, 0);  // a max: exact
}

TEST_P(CudaVocabParallelTest, Sums) {
  LLCDIST_REQUIRE_GPU();
  KernelCase(K::kCrossEntropySums, lossParams(M, V, 0, c.realV, shard))
      .f32("logits", logits)
      .i32("targets", targets)
      .f64("row_max", rowMax())
      .f64("row_sums", std::vector<double>(size_t(2 * M), 0.0))
      .expectMatch(1e-12, 1e-12);  // double terms, only their order differs
}

TEST_P(CudaVocabParallelTest, Forward) {
  LLCDIST_REQUIRE_GPU();
  KernelCase(K::kCrossEntropyFwd, lossParams(M, V, 0.5, c.realV, shard))
      .f32("logits", logits)
      .i32("targets", targets)
      .f32("loss", {1.25f})
      .f64("row_max", rowMax())
      .f64("row_sums", rowSums())
      .expectMatch(1e-6, 1e-6);
}

TEST_P(CudaVocabParallelTest, Backward) {
  LLCDIST_REQUIRE_GPU();
  KernelCase(K::kCrossEntropyBwd, lossParams(M, V, 1.0 / double(M), c.realV, shard))
      .f32("logits", logits)
      .i32("targets", targets)
      .f32("dlogits", randomF32(M * V, 43))
      .f64("row_max", rowMax())
      .f64("row_sums", rowSums())
      .expectMatch(1e-6, 1e-6);
}

// Shard 2 with real_vocab 40 holds 8 real columns and 8 padding ones; shard 1 with real_vocab 20 holds
// 4. (A shard of padding only writes row_max -inf, which the harness's |gpu - cpu| cannot compare.)
INSTANTIATE_TEST_SUITE_P(AllCases, CudaVocabParallelTest,
                         ::testing::Values(ShardCase{0, 0}, ShardCase{1, 0}, ShardCase{2, 0}, ShardCase{2, 40},
                                           ShardCase{1, 20}, ShardCase{0, 20}));

// ---- What the harness cannot show: device errors, synchronous errors, repeatability -------------------

struct HostBuf {
  std::vector<std::byte> bytes;
  schema::ElemType type;
  int64_t elems;
};
template <class T>
HostBuf hostBuf(const std::vector<T>& v, schema::ElemType type) {
  HostBuf b{std::vector<std::byte>(v.size() * sizeof(T)), type, int64_t(v.size())};
  std::memcpy(b.bytes.data(), v.data(), b.bytes.size());
  return b;
}
template <class T>
std::vector<T> values(const HostBuf& b) {
  std::vector<T> v(b.bytes.size() / sizeof(T));
  std::memcpy(v.data(), b.bytes.data(), b.bytes.size());
  return v;
}

// One launch of the CUDA entry on device copies of `bufs` (one buffer per role, or none for an absent
// optional role); the buffers come back with the device's contents.
struct DeviceRun {
  Status status;
  int deviceError = -1;
};
DeviceRun runOnDevice(schema::OpKind kind, const OpParams& params, std::vector<std::vector<HostBuf>>& bufs) {
  DeviceRun result;
  cudaStream_t stream = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  KernelCall call;
  call.kind = kind;
  call.params = params;
  call.args.resize(bufs.size());
  call.argElems.resize(bufs.size());
  call.argTypes.resize(bufs.size());
  for (size_t r = 0; r < bufs.size(); ++r)
    for (HostBuf& b : bufs[r]) {
      void* p = nullptr;
      EXPECT_EQ(cudaMalloc(&p, b.bytes.size() + 16), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(p, b.bytes.data(), b.bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
      call.args[r].push_back(p);
      call.argElems[r].push_back(b.elems);
      call.argTypes[r].push_back(b.type);
    }
  int* flag = nullptr;
  EXPECT_EQ(cudaMalloc(&flag, sizeof(int)), cudaSuccess);
  EXPECT_EQ(cudaMemset(flag, 0, sizeof(int)), cudaSuccess);
  {
    StreamScratch scratch(stream, 0);
    TableCache tables(0);
    StatusOr<std::unique_ptr<GemmRunner>> gemm = makeGemmRunner(0);
    EXPECT_TRUE(gemm.isOk()) << gemm.status().toString();
    CudaKernelContext ctx;
    ctx.stream = stream;
    ctx.deterministic = true;  // the repeatability tests: cuBLASLt without split-K
    ctx.gemm = gemm.isOk() ? gemm->get() : nullptr;
    ctx.scratch = &scratch;
    ctx.tables = &tables;
    ctx.deviceError = flag;
    const CudaKernel* kernel = cudaKernel(kind);
    EXPECT_NE(kernel, nullptr);
    if (kernel) result.status = (*kernel)(call, ctx);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  }
  EXPECT_EQ(cudaMemcpy(&result.deviceError, flag, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t r = 0; r < bufs.size(); ++r)
    for (size_t k = 0; k < bufs[r].size(); ++k) {
      EXPECT_EQ(cudaMemcpy(bufs[r][k].bytes.data(), call.args[r][k], bufs[r][k].bytes.size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
      cudaFree(call.args[r][k]);
    }
  cudaFree(flag);
  cudaStreamDestroy(stream);
  return result;
}

std::vector<std::vector<HostBuf>> noBufs(schema::OpKind kind) {
  return std::vector<std::vector<HostBuf>>(schema::opSpec(kind).numArgs);
}
size_t roleOf(schema::OpKind kind, std::string_view role) { return size_t(schema::argIndex(kind, role)); }

// attention_bwd's buffers: dout, q, k, v and the forward's out and lse (f32), dq, dk, dv zeroed.
std::vector<std::vector<HostBuf>> attentionBackwardBufs(const std::vector<float>& dout, const std::vector<float>& q,
                                                       const std::vector<float>& k, const std::vector<float>& v,
                                                       const std::vector<float>& out, const std::vector<float>& lse,
                                                       int64_t kvElems) {
  const schema::OpKind kind = schema::OpKind::kAttentionBwd;
  auto bufs = noBufs(kind);
  const std::pair<const char*, const std::vector<float>*> in[] = {{"dout", &dout}, {"q", &q}, {"k", &k},
                                                                  {"v", &v},       {"out", &out}, {"lse", &lse}};
  for (const auto& [role, data] : in) bufs[roleOf(kind, role)].push_back(hostBuf(*data, schema::ElemType::kF32));
  for (const char* r : {"dq", "dk", "dv"})
    bufs[roleOf(kind, r)].push_back(hostBuf(
        std::vector<float>(std::string(r) == "dq" ? q.size() : size_t(kvElems), 0.0f), schema::ElemType::kF32));
  return bufs;
}

TEST(CudaLossErrorTest, TargetOutsideTheVocabularySetsTheDeviceError) {
  LLCDIST_REQUIRE_GPU();
  const int64_t M = 4, V = 10;
  std::vector<int32_t> targets = {1, 2, int32_t(V), 3};  // row 2 is outside [0, V)
  {
    const K kind = K::kCrossEntropyFwd;
    auto bufs = noBufs(kind);
    bufs[roleOf(kind, "logits")].push_back(hostBuf(randomF32(M * V, 51), schema::ElemType::kF32));
    bufs[roleOf(kind, "targets")].push_back(hostBuf(targets, schema::ElemType::kI32));
    bufs[roleOf(kind, "loss")].push_back(hostBuf(std::vector<float>{0.5f}, schema::ElemType::kF32));
    const DeviceRun run = runOnDevice(kind, lossParams(M, V, 1.0), bufs);
    EXPECT_TRUE(run.status.isOk()) << run.status.toString();
    EXPECT_EQ(run.deviceError, kDeviceTargetOutOfRange);
    EXPECT_EQ(values<float>(bufs[roleOf(kind, "loss")][0])[0], 0.5f) << "the loss must be left unchanged";
  }
  {
    const K kind = K::kCrossEntropyBwd;
    auto bufs = noBufs(kind);
    bufs[roleOf(kind, "logits")].push_back(hostBuf(randomF32(M * V, 52), schema::ElemType::kF32));
    bufs[roleOf(kind, "targets")].push_back(hostBuf(targets, schema::ElemType::kI32));
    bufs[roleOf(kind, "dlogits")].push_back(hostBuf(randomF32(M * V, 53), schema::ElemType::kF32));
    const DeviceRun run = runOnDevice(kind, lossParams(M, V, 1.0), bufs);
    EXPECT_TRUE(run.status.isOk()) << run.status.toString();
    EXPECT_EQ(run.deviceError, kDeviceTargetOutOfRange);
  }
  {
    // Vocabulary-parallel: 2 shards of V, so V is inside the global vocabulary; 2V is not.
    std::vector<int32_t> global = {1, int32_t(V + 2), int32_t(2 * V), 0};
    const K kind = K::kCrossEntropyMax;
    auto bufs = noBufs(kind);
    bufs[roleOf(kind, "logits")].push_back(hostBuf(randomF32(M * V, 54), schema::ElemType::kF32));
    bufs[roleOf(kind, "targets")].push_back(hostBuf(global, schema::ElemType::kI32));
    bufs[roleOf(kind, "row_max")].push_back(hostBuf(std::vector<double>(size_t(M), 0.0), schema::ElemType::kF64));
    const DeviceRun run = runOnDevice(kind, lossParams(M, V, 0, 0, VocabShard{1, 2}), bufs);
    EXPECT_TRUE(run.status.isOk()) << run.status.toString();
    EXPECT_EQ(run.deviceError, kDeviceTargetOutOfRange);
  }
}

TEST(CudaLossErrorTest, RealVocabOutsideTheColumnsIsASynchronousError) {
  LLCDIST_REQUIRE_GPU();
  const int64_t M = 2, V = 8;
  const K kind = K::kCrossEntropyBwd;
  auto bufs = noBufs(kind);
  bufs[roleOf(kind, "logits")].push_back(hostBuf(randomF32(M * V, 55), schema::ElemType::kF32));
  bufs[roleOf(kind, "targets")].push_back(hostBuf(std::vector<int32_t>{0, 1}, schema::ElemType::kI32));
  bufs[roleOf(kind, "dlogits")].push_back(hostBuf(randomF32(M * V, 56), schema::ElemType::kF32));
  const DeviceRun run = runOnDevice(kind, lossParams(M, V, 1.0, V + 1), bufs);
  EXPECT_EQ(run.status.code(), StatusCode::kInvalidArgument) << run.status.toString();
  EXPECT_EQ(run.deviceError, 0);
}

// Two runs of one call give identical bits (fixed reduction orders; deterministic GEMM algorithms).
void expectRepeatable(schema::OpKind kind, const OpParams& params, const std::vector<std::vector<HostBuf>>& inputs) {
  std::vector<std::vector<HostBuf>> first = inputs, second = inputs;
  const DeviceRun a = runOnDevice(kind, params, first);
  const DeviceRun b = runOnDevice(kind, params, second);
  ASSERT_TRUE(a.status.isOk()) << a.status.toString();
  ASSERT_TRUE(b.status.isOk()) << b.status.toString();
  for (size_t r = 0; r < first.size(); ++r)
    for (size_t k = 0; k < first[r].size(); ++k)
      EXPECT_TRUE(first[r][k].bytes == second[r][k].bytes)
          << schema::opName(kind) << ": " << schema::opSpec(kind).args[r].role << " differs between two runs";
}

TEST(CudaRepeatabilityTest, AttentionBackward) {
  LLCDIST_REQUIRE_GPU();
  const AttentionCase c{2, 45, 4, 2, 64};
  const int64_t qElems = c.B * c.S * c.nh * c.hd, kvElems = c.B * c.S * c.nkv * c.hd, rows = c.B * c.nh * c.S;
  const std::vector<float> q = randomF32(qElems, 61), k = randomF32(kvElems, 62), v = randomF32(kvElems, 63);
  std::vector<float> out(static_cast<size_t>(qElems)), lse(static_cast<size_t>(rows));
  ASSERT_TRUE(attentionForward({c.B, c.S, c.nh, c.nkv, c.hd}, q.data(), k.data(), v.data(), out.data(), lse.data())
                  .isOk());
  expectRepeatable(K::kAttentionBwd, attentionParams(c),
                   attentionBackwardBufs(randomF32(qElems, 64), q, k, v, out, lse, kvElems));
}

// A window >= S masks nothing: the own kernel runs the causal tiles in the causal order, so the forward
// and backward give the causal bits.
TEST(CudaAttentionWindowTest, AWindowOfAtLeastSIsTheCausalAttentionBitForBit) {
  LLCDIST_REQUIRE_GPU();
  const AttentionCase causal{1, 70, 4, 2, 64};
  const int64_t qElems = causal.B * causal.S * causal.nh * causal.hd,
                kvElems = causal.B * causal.S * causal.nkv * causal.hd, rows = causal.B * causal.nh * causal.S;
  const std::vector<float> q = randomF32(qElems, 81), k = randomF32(kvElems, 82), v = randomF32(kvElems, 83);
  std::vector<float> out(static_cast<size_t>(qElems)), lse(static_cast<size_t>(rows));
  ASSERT_TRUE(attentionForward(causal.shape(), q.data(), k.data(), v.data(), out.data(), lse.data()).isOk());
  const auto forward = [&](const AttentionCase& c) {
    const K kind = K::kAttentionFwd;
    auto bufs = noBufs(kind);
    bufs[roleOf(kind, "q")].push_back(hostBuf(q, schema::ElemType::kF32));
    bufs[roleOf(kind, "k")].push_back(hostBuf(k, schema::ElemType::kF32));
    bufs[roleOf(kind, "v")].push_back(hostBuf(v, schema::ElemType::kF32));
    bufs[roleOf(kind, "out")].push_back(hostBuf(std::vector<float>(size_t(qElems), 0.0f), schema::ElemType::kF32));
    bufs[roleOf(kind, "lse")].push_back(hostBuf(std::vector<float>(size_t(rows), 0.0f), schema::ElemType::kF32));
    const DeviceRun run = runOnDevice(kind, attentionParams(c), bufs);
    EXPECT_TRUE(run.status.isOk()) << run.status.toString();
    return bufs;
  };
  const auto backward = [&](const AttentionCase& c) {
    const K kind = K::kAttentionBwd;
    auto bufs = attentionBackwardBufs(randomF32(qElems, 84), q, k, v, out, lse, kvElems);
    const DeviceRun run = runOnDevice(kind, attentionParams(c), bufs);
    EXPECT_TRUE(run.status.isOk()) << run.status.toString();
    return bufs;
  };
  const auto fwd0 = forward(causal), bwd0 = backward(causal);
  for (int64_t window : {int64_t(70), int64_t(71), int64_t(1) << 40}) {
    AttentionCase w = causal;
    w.window = window;
    const auto fwd = forward(w), bwd = backward(w);
    for (const char* r : {"out", "lse"})
      EXPECT_TRUE(fwd[roleOf(K::kAttentionFwd, r)][0].bytes == fwd0[roleOf(K::kAttentionFwd, r)][0].bytes)
          << r << " with window " << window;
    for (const char* r : {"dq", "dk", "dv"})
      EXPECT_TRUE(bwd[roleOf(K::kAttentionBwd, r)][0].bytes == bwd0[roleOf(K::kAttentionBwd, r)][0].bytes)
          << r << " with window " << window;
  }
}

TEST(CudaRepeatabilityTest, LinearBackwardWeightAndBias) {
  LLCDIST_REQUIRE_GPU();
  LinearCase c{512, 96, 80, WeightLayout::kOutIn, true, false};
  {
    const K kind = K::kLinearBwdWeight;
    auto bufs = noBufs(kind);
    bufs[roleOf(kind, "dy")].push_back(hostBuf(randomF32(c.M * c.N, 71), schema::ElemType::kF32));
    bufs[roleOf(kind, "x")].push_back(hostBuf(randomF32(c.M * c.K, 72), schema::ElemType::kF32));
    bufs[roleOf(kind, "dw")].push_back(hostBuf(randomF32(c.N * c.K, 73), schema::ElemType::kF32));
    expectRepeatable(kind, linearParams(c), bufs);
  }
  for (bool accumulate : {false, true}) {  // with db: the epilogue, the own kernels
    LinearCase d = c;
    d.accumulate = accumulate;
    const K kind = K::kLinearBwdWeight;
    auto bufs = noBufs(kind);
    bufs[roleOf(kind, "dy")].push_back(hostBuf(randomF32(d.M * d.N, 76), schema::ElemType::kF32));
    bufs[roleOf(kind, "x")].push_back(hostBuf(randomF32(d.M * d.K, 77), schema::ElemType::kF32));
    bufs[roleOf(kind, "dw")].push_back(hostBuf(randomF32(d.N * d.K, 78), schema::ElemType::kF32));
    bufs[roleOf(kind, "db")].push_back(hostBuf(randomF32(d.N, 79), schema::ElemType::kF32));
    expectRepeatable(kind, linearParams(d), bufs);
  }
  {
    const K kind = K::kLinearBwdBias;
    auto bufs = noBufs(kind);
    bufs[roleOf(kind, "dy")].push_back(hostBuf(randomF32(c.M * c.N, 74), schema::ElemType::kF32));
    bufs[roleOf(kind, "db")].push_back(hostBuf(randomF32(c.N, 75), schema::ElemType::kF32));
    expectRepeatable(kind, linearParams(c), bufs);
  }
}

TEST(CudaRepeatabilityTest, CrossEntropyForward) {
  LLCDIST_REQUIRE_GPU();
  const int64_t M = 33, V = 777;
  const K kind = K::kCrossEntropyFwd;
  auto bufs = noBufs(kind);
  bufs[roleOf(kind, "logits")].push_back(hostBuf(randomF32(M * V, 81, -5.0f, 5.0f), schema::ElemType::kF32));
  bufs[roleOf(kind, "targets")].push_back(hostBuf(randomI32(M, 82, 0, int32_t(V - 1)), schema::ElemType::kI32));
  bufs[roleOf(kind, "loss")].push_back(hostBuf(std::vector<float>{0.0f}, schema::ElemType::kF32));
  expectRepeatable(kind, lossParams(M, V, 1.0), bufs);
}

}  // namespace
}  // namespace llcdist::rt::cuda::test
