// The CUDA kernels of the layout, elementwise, embedding, norm, rope and optimizer families against
// their CPU reference kernels (KernelHarness.h): every op kind on seeded random inputs with odd sizes
// (tails of blocks and grid-stride loops), accumulate on and off where an op has it, the vocabulary-
// sharded embedding, and the device error of an invalid id. Copies, gathers, casts and the scatter-adds
// that keep the CPU's order must match exactly; arithmetic within f32 tolerances (the device's tanhf /
// expf and contracted multiply-adds differ from the CPU's by an ulp or so). Skipped without a device.
#include "KernelHarness.h"

#include "llcdist/runtime/OpParams.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

namespace llcdist::rt::cuda::test {
namespace {

using K = schema::OpKind;

constexpr double kAtol = 1e-5, kRtol = 1e-4;  // f32 arithmetic

// One CUDA entry run on device buffers the test owns, for what the harness cannot check: the device
// error of invalid data, calls refused before launching, and bit patterns (the harness compares
// values, and there an infinity never matches itself).
class CudaDirectCall : public ::testing::Test {
protected:
  void SetUp() override {
    LLCDIST_REQUIRE_GPU();
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&flag_, sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaMemset(flag_, 0, sizeof(int)), cudaSuccess);
    ctx_.stream = stream_;
    ctx_.deviceError = flag_;
  }
  void TearDown() override {
    for (void* p : allocs_) cudaFree(p);
    if (flag_) cudaFree(flag_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  template <class T>
  void* device(const std::vector<T>& v) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, v.size() * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    allocs_.push_back(p);
    return p;
  }
  template <class T>
  std::vector<T> host(const void* p, size_t n) {
    std::vector<T> v(n);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  // One buffer per role; types empty: the roles' default dtypes.
  static KernelCall call(K kind, OpParams params, std::vector<void*> ptrs, std::vector<int64_t> elems,
                         std::vector<schema::ElemType> types = {}) {
    KernelCall c;
    c.kind = kind;
    c.params = std::move(params);
    for (size_t r = 0; r < ptrs.size(); ++r) {
      c.args.push_back({ptrs[r]});
      c.argElems.push_back({elems[r]});
      if (!types.empty()) c.argTypes.push_back({types[r]});
    }
    return c;
  }
  Status run(const KernelCall& c) {
    const CudaKernel* kernel = cudaKernel(c.kind);
    if (!kernel) return Status::internal("no CUDA kernel for " + std::string(schema::opName(c.kind)));
    return (*kernel)(c, ctx_);
  }
  int deviceError() { return host<int>(flag_, 1)[0]; }

  cudaStream_t stream_ = nullptr;
  int* flag_ = nullptr;
  CudaKernelContext ctx_;
  std::vector<void*> allocs_;
};

// ---- layout ---------------------------------------------------------------------------------------

TEST(CudaLayoutKernels, ZeroClearsEveryDtype) {
  LLCDIST_REQUIRE_GPU();
  std::vector<double> f64s = {1.5, -2.0, 3.25, 7.0, -0.5};
  KernelCase(K::kFillZero, LayoutParams{})
      .f32("x", randomF32(37, 1))
      .bf16("x", randomF32(13, 2))
      .i32("x", randomI32(9, 3, 1, 100))
      .f64("x", f64s)
      .expectMatch(0, 0);
}

TEST(CudaLayoutKernels, SplitForwardAndBackward) {
  LLCDIST_REQUIRE_GPU();
  LayoutParams p;
  p.rows = 5;
  p.sizes = {3, 37, 1};
  const int64_t width = 3 + 37 + 1;
  KernelCase(K::kSplitFwd, p)
      .f32("x", randomF32(p.rows * width, 4))
      .f32("outs", randomF32(p.rows * 3, 5))
      .f32("outs", randomF32(p.rows * 37, 6))
      .f32("outs", randomF32(p.rows * 1, 7))
      .expectMatch(0, 0);
  KernelCase(K::kSplitBwd, p)
      .f32("douts", randomF32(p.rows * 3, 8))
      .f32("douts", randomF32(p.rows * 37, 9))
      .f32("douts", randomF32(p.rows * 1, 10))
      .f32("dx", randomF32(p.rows * width, 11))
      .expectMatch(0, 0);
}

TEST(CudaLayoutKernels, ShardSliceWholeAndPaddedBlocks) {
  LLCDIST_REQUIRE_GPU();
  struct Shape {
    int64_t member, total;
  };
  // 3 members of 7 columns: whole rows (21), padded rows of 19 (member 2 holds 5 real columns) and of
  // 13 (member 2 holds none, member 1 holds 6).
  for (Shape s : {Shape{1, 21}, Shape{2, 21}, Shape{2, 19}, Shape{1, 13}, Shape{2, 13}}) {
    SCOPED_TRACE("member " + std::to_string(s.member) + ", total " + std::to_string(s.total));
    LayoutParams p;
    p.members = 3;
    p.member = s.member;
    p.outer = 5;
    p.inner = 7;
    p.total = s.total;
    KernelCase(K::kShardSlice, p)
        .f32("x", randomF32(p.outer * s.total, 12))
        .f32("y", randomF32(p.outer * p.inner, 13))
        .expectMatch(0, 0);
  }
}

// ---- elementwise ----------------------------------------------------------------------------------

ElementwiseParams elems(int64_t n) {
  ElementwiseParams p;
  p.n = n;
  return p;
}

// One activation's forward (x -> y) and backward (dy, x -> dx), seeds from `seed`.
void expectActivationMatches(K fwd, K bwd, uint32_t seed) {
  const int64_t n = 1001;
  KernelCase(fwd, elems(n))
      .f32("x", randomF32(n, seed, -4, 4))
      .f32("y", randomF32(n, seed + 1))
      .expectMatch(kAtol, kRtol);
  KernelCase(bwd, elems(n))
      .f32("dy", randomF32(n, seed + 2))
      .f32("x", randomF32(n, seed + 3, -4, 4))
      .f32("dx", randomF32(n, seed + 4))
      .expectMatch(kAtol, kRtol);
}

TEST(CudaElementwiseKernels, GeluTanh) {
  LLCDIST_REQUIRE_GPU();
  expectActivationMatches(K::kGeluTanhFwd, K::kGeluTanhBwd, 20);
}

TEST(CudaElementwiseKernels, Clamp) {
  LLCDIST_REQUIRE_GPU();
  const int64_t n = 1001;
  ElementwiseParams p = elems(n);
  p.limit = 0.5f;
  KernelCase(K::kClampFwd, p).f32("x", randomF32(n, 30, -2, 2)).f32("y", randomF32(n, 31)).expectMatch(0, 0);
  KernelCase(K::kClampBwd, p)
      .f32("dy", randomF32(n, 32))
      .f32("x", randomF32(n, 33, -2, 2))
      .f32("dx", randomF32(n, 34))
      .expectMatch(0, 0);
}

// OPT's ReLU (inputs on both sides of zero).
TEST(CudaElementwiseKernels, Relu) {
  LLCDIST_REQUIRE_GPU();
  expectActivationMatches(K::kReluFwd, K::kReluBwd, 35);
}

// Cohere's logit_scale: the CPU's bits (one multiply), a factor that is not a power of two too.
TEST(CudaElementwiseKernels, Scale) {
  LLCDIST_REQUIRE_GPU();
  const int64_t n = 1001;
  for (float factor : {0.0625f, 0.8333333f}) {
    ElementwiseParams p = elems(n);
    p.factor = factor;
    KernelCase(K::kScale, p).f32("x", randomF32(n, 40, -4, 4)).f32("y", randomF32(n, 41)).expectMatch(0, 0);
  }
}

TEST(CudaElementwiseKernels, GeluErf) {
  LLCDIST_REQUIRE_GPU();
  expectActivationMatches(K::kGeluErfFwd, K::kGeluErfBwd, 25);
}

TEST(CudaElementwiseKernels, Swiglu) {
  LLCDIST_REQUIRE_GPU();
  const int64_t n = 1001;
  KernelCase(K::kSwigluFwd, elems(n))
      .f32("gate", randomF32(n, 30, -6, 6))
      .f32("up", randomF32(n, 31))
      .f32("y", randomF32(n, 32))
      .expectMatch(kAtol, kRtol);
  KernelCase(K::kSwigluBwd, elems(n))
      .f32("dy", randomF32(n, 33))
      .f32("gate", randomF32(n, 34, -6, 6))
      .f32("up", randomF32(n, 35))
      .f32("dgate", randomF32(n, 36))
      .f32("dup", randomF32(n, 37))
      .expectMatch(kAtol, kRtol);
}

TEST(CudaElementwiseKernels, AddAccumulateCopyAreExact) {
  LLCDIST_REQUIRE_GPU();
  const int64_t n = 1001;
  KernelCase(K::kAdd, elems(n))
      .f32("a", randomF32(n, 40))
      .f32("b", randomF32(n, 41))
      .f32("y", randomF32(n, 42))
      .expectMatch(0, 0);
  KernelCase(K::kAccumulate, elems(n)).f32("x", randomF32(n, 43)).f32("y", randomF32(n, 44)).expectMatch(0, 0);
  KernelCase(K::kCopy, elems(n)).f32("x", randomF32(n, 45)).f32("y", randomF32(n, 46)).expectMatch(0, 0);
}

float fromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Finite values that exercise bf16 rounding: ties (to even, both ways), the largest finite bf16, NaNs
// (one with a payload only in the low bits: it must stay NaN), signed zeros and subnormals; then
// random values. (Results that are infinite are checked by CastMatchesBf16BitForBit: the harness's
// comparison never matches an infinity.)
std::vector<float> castInputs() {
  std::vector<float> v = {
      1.0f,
      fromBits(0x3f808000u),  // 1 + 2^-8: a tie between 1 and 1 + 2^-7, rounds down to even
      fromBits(0x3f818000u),  // a tie whose lower neighbour is odd: rounds up
      fromBits(0x3f808001u),  // just past the tie: rounds up
      fromBits(0x7f7f0000u),  // the largest finite bf16
      fromBits(0x7f7f7fffu),  // just below the tie past it: rounds down to the largest finite
      std::numeric_limits<float>::quiet_NaN(),
      fromBits(0x7f800001u),  // a signalling NaN with only a low payload bit
      fromBits(0xffc00001u),  // a negative quiet NaN
      0.0f,
      -0.0f,
      1e-40f,                 // subnormal
      fromBits(0x00008000u),  // the smallest subnormal tie
      std::numeric_limits<float>::denorm_min(),
  };
  const std::vector<float> r = randomF32(1001, 50, -1000, 1000);
  v.insert(v.end(), r.begin(), r.end());
  return v;
}

TEST(CudaElementwiseKernels, CastF32ToBf16RoundsToNearestEven) {
  LLCDIST_REQUIRE_GPU();
  const std::vector<float> x = castInputs();
  const int64_t n = int64_t(x.size());
  KernelCase(K::kCast, elems(n)).f32("x", x).bf16("y", randomF32(n, 51)).expectMatch(0, 0);
}

TEST(CudaElementwiseKernels, CastBf16ToF32IsExact) {
  LLCDIST_REQUIRE_GPU();
  const std::vector<float> x = castInputs();
  const int64_t n = int64_t(x.size());
  KernelCase(K::kCast, elems(n)).bf16("x", x).f32("y", randomF32(n, 52)).expectMatch(0, 0);
}

TEST(CudaElementwiseKernels, CastSameDtypeCopies) {
  LLCDIST_REQUIRE_GPU();
  const std::vector<float> x = castInputs();
  const int64_t n = int64_t(x.size());
  KernelCase(K::kCast, elems(n)).f32("x", x).f32("y", randomF32(n, 53)).expectMatch(0, 0);
  KernelCase(K::kCast, elems(n)).bf16("x", x).bf16("y", randomF32(n, 54)).expectMatch(0, 0);
}

// Bf16.h's conversions bit for bit: f32 -> bf16 on the inputs above, the values that round to or are
// infinities, and random bit patterns (NaNs with every kind of payload among them); bf16 -> f32 on
// every bf16.
TEST_F(CudaDirectCall, CastMatchesBf16BitForBit) {
  LLCDIST_REQUIRE_GPU();
  using schema::ElemType;
  std::vector<float> x = castInputs();
  for (uint32_t u : {0x7f7f8000u, 0x7f7fffffu, 0x7f800000u, 0xff800000u, 0xff7f8000u, 0x7fffffffu, 0xffffffffu})
    x.push_back(fromBits(u));  // to inf (ties and max float), ±inf, all-ones NaNs
  for (uint32_t u : randomI32(65537, 55, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()))
    x.push_back(fromBits(u));
  const int64_t n = int64_t(x.size());
  void* dx = device(x);
  void* dy = device(std::vector<uint16_t>(size_t(n), 0xabcd));
  Status st = run(call(K::kCast, elems(n), {dx, dy}, {n, n}, {ElemType::kF32, ElemType::kBF16}));
  ASSERT_TRUE(st.isOk()) << st.toString();
  const std::vector<uint16_t> narrowed = host<uint16_t>(dy, size_t(n));
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i)
    if (narrowed[size_t(i)] != floatToBf16(x[size_t(i)]) && bad++ < 5)
      ADD_FAILURE() << "f32 bits 0x" << std::hex << bitsOf(x[size_t(i)]) << ": gpu 0x" << narrowed[size_t(i)]
                    << ", Bf16.h 0x" << floatToBf16(x[size_t(i)]);
  EXPECT_EQ(bad, 0);

  std::vector<uint16_t> every(65536);
  for (size_t i = 0; i < every.size(); ++i) every[i] = uint16_t(i);
  const int64_t m = int64_t(every.size());
  void* db = device(every);
  void* df = device(std::vector<float>(every.size(), 0.5f));
  st = run(call(K::kCast, elems(m), {db, df}, {m, m}, {ElemType::kBF16, ElemType::kF32}));
  ASSERT_TRUE(st.isOk()) << st.toString();
  const std::vector<float> widened = host<float>(df, every.size());
  bad = 0;
  for (size_t i = 0; i < every.size(); ++i)
    if (bitsOf(widened[i]) != bitsOf(bf16ToFloat(every[i])) && bad++ < 5)
      ADD_FAILURE() << "bf16 0x" << std::hex << every[i] << ": gpu 0x" << bitsOf(widened[i]);
  EXPECT_EQ(bad, 0);
}

// ---- embedding ------------------------------------------------------------------------------------

EmbeddingParams embedding(int64_t M, int64_t V, int64_t H, bool accumulate, VocabShard shard = {}) {
  EmbeddingParams p;
  p.M = M;
  p.V = V;
  p.H = H;
  p.accumulate = accumulate;
  p.vocabShard = shard;
  return p;
}

TEST(CudaEmbeddingKernels, ForwardGathersRows) {
  LLCDIST_REQUIRE_GPU();
  const int64_t M = 11, V = 7, H = 37;
  KernelCase(K::kEmbeddingFwd, embedding(M, V, H, false))
      .i32("ids", randomI32(M, 60, 0, int32_t(V - 1)))
      .f32("table", randomF32(V * H, 61))
      .f32("out", randomF32(M * H, 62))
      .expectMatch(0, 0);
}

TEST(CudaEmbeddingKernels, ForwardVocabSharded) {
  LLCDIST_REQUIRE_GPU();
  const int64_t M = 11, V = 7, H = 37;
  for (int64_t index : {0, 1, 2}) {
    SCOPED_TRACE("shard " + std::to_string(index) + " of 3");
    KernelCase(K::kEmbeddingFwd, embedding(M, V, H, false, VocabShard{index, 3}))
        .i32("ids", randomI32(M, 63, 0, int32_t(3 * V - 1)))
        .f32("table", randomF32(V * H, 64))
        .f32("out", randomF32(M * H, 65))
        .expectMatch(0, 0);
  }
}

// Repeated ids (M > V) are summed in the CPU's order m = 0..M-1: the same bits.
TEST(CudaEmbeddingKernels, BackwardScatterAddsInOrder) {
  LLCDIST_REQUIRE_GPU();
  const int64_t M = 29, V = 5, H = 37;
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
    KernelCase(K::kEmbeddingBwdWeight, embedding(M, V, H, accumulate))
        .i32("ids", randomI32(M, 66, 0, int32_t(V - 1)))
        .f32("dout", randomF32(M * H, 67))
        .f32("dtable", randomF32(V * H, 68))
        .expectMatch(0, 0);
  }
}

TEST(CudaEmbeddingKernels, BackwardVocabSharded) {
  LLCDIST_REQUIRE_GPU();
  const int64_t M = 29, V = 5, H = 37;
  for (bool accumulate : {false, true})
    for (int64_t index : {0, 2}) {
      SCOPED_TRACE(std::string(accumulate ? "accumulate" : "overwrite") + ", shard " + std::to_string(index));
      KernelCase(K::kEmbeddingBwdWeight, embedding(M, V, H, accumulate, VocabShard{index, 3}))
          .i32("ids", randomI32(M, 69, 0, int32_t(3 * V - 1)))
          .f32("dout", randomF32(M * H, 70))
          .f32("dtable", randomF32(V * H, 71))
          .expectMatch(0, 0);
    }
}

EmbeddingParams positions(int64_t B, int64_t S, int64_t H, int64_t P, bool accumulate, int64_t posBegin) {
  EmbeddingParams p;
  p.B = B;
  p.S = S;
  p.H = H;
  p.P = P;
  p.accumulate = accumulate;
  p.posBegin = posBegin;
  return p;
}

TEST(CudaEmbeddingKernels, PositionForward) {
  LLCDIST_REQUIRE_GPU();
  const int64_t B = 3, S = 5, H = 37, P = 9;
  for (int64_t posBegin : {0, 4}) {  // 4 + 5 = P: the last rows of the table
    SCOPED_TRACE("posBegin " + std::to_string(posBegin));
    KernelCase(K::kPosEmbeddingFwd, positions(B, S, H, P, false, posBegin))
        .f32("x", randomF32(B * S * H, 80))
        .f32("wpe", randomF32(P * H, 81))
        .f32("y", randomF32(B * S * H, 82))
        .expectMatch(0, 0);
  }
}

TEST(CudaEmbeddingKernels, PositionWeightGradient) {
  LLCDIST_REQUIRE_GPU();
  const int64_t B = 3, S = 5, H = 37, P = 11;
  for (bool accumulate : {false, true})
    for (int64_t posBegin : {0, 3, 6}) {
      SCOPED_TRACE(std::string(accumulate ? "accumulate" : "overwrite") + ", posBegin " + std::to_string(posBegin));
      KernelCase(K::kPosEmbeddingBwdWeight, positions(B, S, H, P, accumulate, posBegin))
          .f32("dy", randomF32(B * S * H, 83))
          .f32("dwpe", randomF32(P * H, 84))
          .expectMatch(0, 0);
    }
}

// The token embedding with the position embedding fused in (wpe / dwpe, llcdist-plan-fuse-embedding):
// the CPU's bits, forward and both gradients.
TEST(CudaEmbeddingKernels, FusedPositions) {
  LLCDIST_REQUIRE_GPU();
  const int64_t B = 3, S = 5, H = 37, P = 9, V = 7, M = B * S;
  for (int64_t offset : {0, 2, 4}) {  // OPT's table: positions from row 2 (4 + 5 = P: its last rows)
    SCOPED_TRACE("offset " + std::to_string(offset));
    EmbeddingParams p = embedding(M, V, H, false);
    p.B = B;
    p.S = S;
    p.P = P;
    p.posBegin = offset;
    KernelCase(K::kEmbeddingFwd, p)
        .i32("ids", randomI32(M, 85, 0, int32_t(V - 1)))
        .f32("table", randomF32(V * H, 86))
        .f32("out", randomF32(M * H, 87))
        .f32("wpe", randomF32(P * H, 88))
        .expectMatch(0, 0);
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
      p.accumulate = accumulate;
      KernelCase(K::kEmbeddingBwdWeight, p)
          .i32("ids", randomI32(M, 89, 0, int32_t(V - 1)))
          .f32("dout", randomF32(M * H, 90))
          .f32("dtable", randomF32(V * H, 91))
          .f32("dwpe", randomF32(P * H, 92))
          .expectMatch(0, 0);
    }
  }
}

// The checks the CPU kernel returns synchronously and the CUDA one cannot (an id outside the
// vocabulary, read on the device) or can (positions past the table, from the parameters alone).
TEST_F(CudaDirectCall, ForwardIdOutsideTheVocabularySetsTheDeviceError) {
  LLCDIST_REQUIRE_GPU();
  const int64_t M = 3, V = 4, H = 37;
  for (int32_t bad : {-1, 4}) {
    SCOPED_TRACE("id " + std::to_string(bad));
    ASSERT_EQ(cudaMemset(flag_, 0, sizeof(int)), cudaSuccess);
    void* ids = device(std::vector<int32_t>{1, bad, 3});
    void* table = device(randomF32(V * H, 90));
    void* out = device(randomF32(M * H, 91));
    const Status st = run(call(K::kEmbeddingFwd, embedding(M, V, H, false), {ids, table, out}, {M, V * H, M * H}));
    ASSERT_TRUE(st.isOk()) << st.toString();
    EXPECT_EQ(deviceError(), kDeviceIdOutOfRange);
    const std::vector<float> got = host<float>(out, size_t(M * H));
    for (int64_t h = 0; h < H; ++h) EXPECT_EQ(got[size_t(H + h)], 0.0f) << "h " << h;  // the bad id's row
  }
}

TEST_F(CudaDirectCall, BackwardIdOutsideTheShardedVocabularySetsTheDeviceError) {
  LLCDIST_REQUIRE_GPU();
  const int64_t M = 3, V = 4, H = 37;
  void* ids = device(std::vector<int32_t>{1, 12, 3});  // 3 shards of 4: [0, 12)
  void* dout = device(randomF32(M * H, 92));
  void* dtable = device(randomF32(V * H, 93));
  const Status st = run(call(K::kEmbeddingBwdWeight, embedding(M, V, H, false, VocabShard{2, 3}), {ids, dout, dtable},
                             {M, M * H, V * H}));
  ASSERT_TRUE(st.isOk()) << st.toString();
  EXPECT_EQ(deviceError(), kDeviceIdOutOfRange);
}

TEST_F(CudaDirectCall, PositionsPastTheTableAreRefusedBeforeLaunching) {
  LLCDIST_REQUIRE_GPU();
  // B, S, H, P with posBegin + S > P: checked from the parameters, no buffer is touched.
  const Status fwd = run(call(K::kPosEmbeddingFwd, positions(2, 5, 3, 9, false, 5), {nullptr, nullptr, nullptr},
                              {30, 27, 30}));
  EXPECT_EQ(fwd.code(), StatusCode::kInvalidArgument) << fwd.toString();
  const Status bwd =
      run(call(K::kPosEmbeddingBwdWeight, positions(2, 5, 3, 4, true, 0), {nullptr, nullptr}, {30, 12}));
  EXPECT_EQ(bwd.code(), StatusCode::kInvalidArgument) << bwd.toString();
  EXPECT_EQ(deviceError(), kDeviceOk);
}

// ---- norm -----------------------------------------------------------------------------------------

NormParams norm(int64_t M, int64_t H, bool accumulate = false) {
  NormParams p;
  p.M = M;
  p.H = H;
  p.eps = 1e-5;
  p.accumulate = accumulate;
  return p;
}

struct NormShape {
  int64_t M, H;
};
// A row narrower than a block, one of several strides with a tail, and enough rows for several
// weight-gradient chunks (the last one shorter).
const NormShape kNormShapes[] = {{5, 37}, {3, 1031}, {67, 37}};

std::string shapeName(NormShape s) { return "M " + std::to_string(s.M) + ", H " + std::to_string(s.H); }

// With beta, and without (MPT's LayerNorm: gamma alone).
TEST(CudaNormKernels, LayerNormForward) {
  LLCDIST_REQUIRE_GPU();
  for (NormShape s : kNormShapes)
    for (bool beta : {true, false}) {
      SCOPED_TRACE(shapeName(s) + (beta ? "" : ", no beta"));
      KernelCase c(K::kLayerNormFwd, norm(s.M, s.H));
      c.f32("x", randomF32(s.M * s.H, 100, -2, 3)).f32("gamma", randomF32(s.H, 101));
      if (beta) c.f32("beta", randomF32(s.H, 102));
      c.f32("y", randomF32(s.M * s.H, 103))
          .f32("mean", randomF32(s.M, 104))
          .f32("rstd", randomF32(s.M, 105))
          .expectMatch(kAtol, kRtol);
    }
}

TEST(CudaNormKernels, LayerNormBackwardInput) {
  LLCDIST_REQUIRE_GPU();
  for (NormShape s : kNormShapes) {
    SCOPED_TRACE(shapeName(s));
    KernelCase(K::kLayerNormBwdInput, norm(s.M, s.H))
        .f32("dy", randomF32(s.M * s.H, 110))
        .f32("x", randomF32(s.M * s.H, 111, -2, 3))
        .f32("gamma", randomF32(s.H, 112))
        .f32("mean", randomF32(s.M, 113, -0.5, 0.5))
        .f32("rstd", randomF32(s.M, 114, 0.5, 2))
        .f32("dx", randomF32(s.M * s.H, 115))
        .expectMatch(kAtol, kRtol);
  }
}

// With dbeta, and without (MPT's LayerNorm: dgamma alone).
TEST(CudaNormKernels, LayerNormBackwardWeight) {
  LLCDIST_REQUIRE_GPU();
  for (NormShape s : kNormShapes)
    for (bool accumulate : {false, true})
      for (bool dbeta : {true, false}) {
        SCOPED_TRACE(shapeName(s) + (accumulate ? ", accumulate" : ", overwrite") + (dbeta ? "" : ", no dbeta"));
        KernelCase c(K::kLayerNormBwdWeight, norm(s.M, s.H, accumulate));
        c.f32("dy", randomF32(s.M * s.H, 120))
            .f32("x", randomF32(s.M * s.H, 121, -2, 3))
            .f32("mean", randomF32(s.M, 122, -0.5, 0.5))
            .f32("rstd", randomF32(s.M, 123, 0.5, 2))
            .f32("dgamma", randomF32(s.H, 124));
        if (dbeta) c.f32("dbeta", randomF32(s.H, 125));
        c.expectMatch(kAtol, kRtol);
      }
}

TEST(CudaNormKernels, RmsNormForward) {
  LLCDIST_REQUIRE_GPU();
  for (NormShape s : kNormShapes) {
    SCOPED_TRACE(shapeName(s));
    KernelCase(K::kRmsNormFwd, norm(s.M, s.H))
        .f32("x", randomF32(s.M * s.H, 130, -2, 3))
        .f32("weight", randomF32(s.H, 131))
        .f32("y", randomF32(s.M * s.H, 132))
        .f32("rstd", randomF32(s.M, 133))
        .expectMatch(kAtol, kRtol);
  }
}

TEST(CudaNormKernels, RmsNormBackwardInput) {
  LLCDIST_REQUIRE_GPU();
  for (NormShape s : kNormShapes) {
    SCOPED_TRACE(shapeName(s));
    KernelCase(K::kRmsNormBwdInput, norm(s.M, s.H))
        .f32("dy", randomF32(s.M * s.H, 140))
        .f32("x", randomF32(s.M * s.H, 141, -2, 3))
        .f32("weight", randomF32(s.H, 142))
        .f32("rstd", randomF32(s.M, 143, 0.5, 2))
        .f32("dx", randomF32(s.M * s.H, 144))
        .expectMatch(kAtol, kRtol);
  }
}

TEST(CudaNormKernels, RmsNormBackwardWeight) {
  LLCDIST_REQUIRE_GPU();
  for (NormShape s : kNormShapes)
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(shapeName(s) + (accumulate ? ", accumulate" : ", overwrite"));
      KernelCase(K::kRmsNormBwdWeight, norm(s.M, s.H, accumulate))
          .f32("dy", randomF32(s.M * s.H, 150))
          .f32("x", randomF32(s.M * s.H, 151, -2, 3))
          .f32("rstd", randomF32(s.M, 152, 0.5, 2))
          .f32("dweight", randomF32(s.H, 153))
          .expectMatch(kAtol, kRtol);
    }
}

// ---- rope -----------------------------------------------------------------------------------------

// rope_fwd / rope_bwd params; rotaryDim 0: every dim of each head rotates (else Phi's first
// rotaryDim, the table built over them).
RopeParams rope(int64_t B, int64_t S, int64_t n, int64_t hd, const RopeConfig& cfg, int64_t rotaryDim = 0) {
  RopeParams p;
  p.B = B;
  p.S = S;
  p.n = n;
  p.hd = hd;
  p.rotaryDim = rotaryDim;
  p.table = std::make_shared<const RopeTable>(makeRopeTable(cfg, rotaryDim ? rotaryDim : hd, 0, S).value());
  return p;
}

// Llama 3's rope_scaling over a short original context (so the scaling bands cut the frequencies).
RopeConfig llama3Rope() {
  RopeConfig c;
  c.theta = 500000.0f;
  c.llama3 = true;
  c.originalMaxPositionEmbeddings = 4;
  return c;
}

TEST(CudaRopeKernels, ForwardAndBackward) {
  LLCDIST_REQUIRE_GPU();
  const RopeConfig llama3 = llama3Rope();
  const int64_t B = 2, S = 5, n = 3;
  for (int64_t hd : {6, 8})  // hd / 2 odd and even
    for (const RopeConfig& cfg : {RopeConfig{}, llama3}) {
      SCOPED_TRACE("hd " + std::to_string(hd) + (cfg.llama3 ? ", llama3" : ""));
      const int64_t e = B * S * n * hd;
      KernelCase(K::kRopeFwd, rope(B, S, n, hd, cfg))
          .f32("x", randomF32(e, 160))
          .f32("y", randomF32(e, 161))
          .expectMatch(kAtol, kRtol);
      KernelCase(K::kRopeBwd, rope(B, S, n, hd, cfg))
          .f32("dy", randomF32(e, 162))
          .f32("dx", randomF32(e, 163))
          .expectMatch(kAtol, kRtol);
    }
}

// ---- the model families' optional attrs ------------------------------------------------------------
// rope's rotary_dim (Phi), the RMS norms' weight_offset (Gemma), the embedding's scale (Gemma) and
// swiglu's act "gelu_tanh" (GeGLU): the CUDA kernels against the CPU's with each attr set (bf16:
// CudaBf16KernelsTest).

TEST(CudaRopeKernels, PartialRotaryDim) {
  LLCDIST_REQUIRE_GPU();
  const RopeConfig llama3 = llama3Rope();
  const int64_t B = 2, S = 5, n = 3;
  struct Dims {
    int64_t hd, rd;
  };
  // Phi-2: hd 80, rotary_dim 32; GPT-J-6B: hd 256, rotary_dim 64 (interleaved: its rotate_every_two).
  for (Dims d : {Dims{10, 4}, Dims{10, 6}, Dims{8, 2}, Dims{80, 32}, Dims{256, 64}})
    for (const RopeConfig& cfg : {RopeConfig{}, llama3})
      for (bool interleaved : {false, true}) {
        SCOPED_TRACE("hd " + std::to_string(d.hd) + ", rotary_dim " + std::to_string(d.rd) +
                     (cfg.llama3 ? ", llama3" : "") + (interleaved ? ", interleaved" : ""));
        const int64_t e = B * S * n * d.hd;
        RopeParams p = rope(B, S, n, d.hd, cfg, d.rd);
        p.interleaved = interleaved;
        KernelCase(K::kRopeFwd, p).f32("x", randomF32(e, 164)).f32("y", randomF32(e, 165)).expectMatch(kAtol, kRtol);
        KernelCase(K::kRopeBwd, p).f32("dy", randomF32(e, 166)).f32("dx", randomF32(e, 167)).expectMatch(kAtol, kRtol);
      }
}

TEST(CudaNormKernels, RmsNormWeightOffset) {
  LLCDIST_REQUIRE_GPU();
  for (NormShape s : kNormShapes)
    for (double offset : {1.0, -0.5}) {
      SCOPED_TRACE(shapeName(s) + ", weight_offset " + std::to_string(offset));
      NormParams p = norm(s.M, s.H);
      p.weightOffset = offset;
      KernelCase(K::kRmsNormFwd, p)
          .f32("x", randomF32(s.M * s.H, 170, -2, 3))
          .f32("weight", randomF32(s.H, 171))
          .f32("y", randomF32(s.M * s.H, 172))
          .f32("rstd", randomF32(s.M, 173))
          .expectMatch(kAtol, kRtol);
      KernelCase(K::kAddRmsNormFwd, p)
          .f32("a", randomF32(s.M * s.H, 174, -2, 3))
          .f32("b", randomF32(s.M * s.H, 175))
          .f32("sum", randomF32(s.M * s.H, 176))
          .f32("weight", randomF32(s.H, 177))
          .f32("y", randomF32(s.M * s.H, 178))
          .f32("rstd", randomF32(s.M, 179))
          .expectMatch(kAtol, kRtol);
      KernelCase(K::kRmsNormBwdInput, p)
          .f32("dy", randomF32(s.M * s.H, 180))
          .f32("x", randomF32(s.M * s.H, 181, -2, 3))
          .f32("weight", randomF32(s.H, 182))
          .f32("rstd", randomF32(s.M, 183, 0.5, 2))
          .f32("dx", randomF32(s.M * s.H, 184))
          .expectMatch(kAtol, kRtol);
      for (bool residual : {false, true}) {
        p.accumulate = residual;  // both settings of the weight gradient's accumulate
        KernelCase rms(K::kRmsNormBwd, p);
        rms.f32("dy", randomF32(s.M * s.H, 185))
            .f32("x", randomF32(s.M * s.H, 186, -2, 3))
            .f32("weight", randomF32(s.H, 187))
            .f32("rstd", randomF32(s.M, 188, 0.5, 2))
            .f32("dx", randomF32(s.M * s.H, 189))
            .f32("dweight", randomF32(s.H, 190));
        if (residual) rms.f32("dresidual", randomF32(s.M * s.H, 191));
        rms.expectMatch(kAtol, kRtol);
      }
    }
}

// The scaled gather and scatter-add (Gemma's sqrt(hidden)): the CPU's products and sums in its order,
// the same bits.
TEST(CudaEmbeddingKernels, Scaled) {
  LLCDIST_REQUIRE_GPU();
  const int64_t M = 29, V = 5, H = 37;
  const double scale = double(float(std::sqrt(37.0)));
  for (int64_t count : {1, 3})
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(std::string(accumulate ? "accumulate" : "overwrite") + ", " + std::to_string(count) + " shards");
      EmbeddingParams p = embedding(M, V, H, accumulate, VocabShard{count - 1, count});
      p.scale = scale;
      KernelCase(K::kEmbeddingFwd, p)
          .i32("ids", randomI32(M, 192, 0, int32_t(count * V - 1)))
          .f32("table", randomF32(V * H, 193))
          .f32("out", randomF32(M * H, 194))
          .expectMatch(0, 0);
      KernelCase(K::kEmbeddingBwdWeight, p)
          .i32("ids", randomI32(M, 195, 0, int32_t(count * V - 1)))
          .f32("dout", randomF32(M * H, 196))
          .f32("dtable", randomF32(V * H, 197))
          .expectMatch(0, 0);
    }
}

// A scale with the fused position embedding is refused at plan load; a call bound so anyway is refused
// before launching.
TEST_F(CudaDirectCall, ScaledEmbeddingWithFusedPositionsIsRefused) {
  LLCDIST_REQUIRE_GPU();
  EmbeddingParams p = embedding(4, 3, 5, false);
  p.S = 4;
  p.P = 4;
  p.scale = 2.0;
  void* ids = device(std::vector<int32_t>{0, 1, 2, 0});
  void* table = device(randomF32(15, 206));
  void* out = device(randomF32(20, 207));
  void* wpe = device(randomF32(20, 208));
  const Status st = run(call(K::kEmbeddingFwd, p, {ids, table, out, wpe}, {4, 15, 20, 20}));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  EXPECT_EQ(deviceError(), kDeviceOk);
}

TEST(CudaElementwiseKernels, SwigluGeluTanhGate) {
  LLCDIST_REQUIRE_GPU();
  const int64_t n = 1001;
  ElementwiseParams p = elems(n);
  p.act = GluActivation::kGeluTanh;
  KernelCase(K::kSwigluFwd, p)
      .f32("gate", randomF32(n, 198, -6, 6))
      .f32("up", randomF32(n, 199))
      .f32("y", randomF32(n, 200))
      .expectMatch(kAtol, kRtol);
  KernelCase(K::kSwigluBwd, p)
      .f32("dy", randomF32(n, 201))
      .f32("gate", randomF32(n, 202, -6, 6))
      .f32("up", randomF32(n, 203))
      .f32("dgate", randomF32(n, 204))
      .f32("dup", randomF32(n, 205))
      .expectMatch(kAtol, kRtol);
}

// ---- optimizer ------------------------------------------------------------------------------------

OptimizerParams maxNorm(double m) {
  OptimizerParams p;
  p.maxNorm = m;
  return p;
}

// Three tensors, the last cut into several of the gradient norm's chunks (kNormChunk = 65536 elements,
// one block each) and a short last chunk.
const int64_t kGradSizes[] = {37, 1001, 300007};

TEST(CudaOptimizerKernels, GradNormClipsWhenAboveMaxNorm) {
  LLCDIST_REQUIRE_GPU();
  // The norm is about sqrt(301045 / 3) ≈ 317: max_norm 1 clips, 1e9 does not, 0 never clips.
  for (double m : {1.0, 1e9, 0.0}) {
    SCOPED_TRACE("max_norm " + std::to_string(m));
    KernelCase kc(K::kGradNorm, maxNorm(m));
    uint32_t seed = 170;
    for (int64_t size : kGradSizes) kc.f32("grads", randomF32(size, seed++));
    kc.f32("norm", {0.0f}).expectMatch(1e-7, 1e-6);
  }
}

TEST(CudaOptimizerKernels, GradNormSq) {
  LLCDIST_REQUIRE_GPU();
  struct Case {
    int64_t member, replicas;
    bool add;
  };
  // member 2 of replicas 2 counts the replica shards, member 1 does not.
  for (Case cs : {Case{2, 2, true}, Case{1, 2, true}, Case{0, 1, false}}) {
    SCOPED_TRACE("member " + std::to_string(cs.member) + ", replicas " + std::to_string(cs.replicas));
    OptimizerParams p;
    p.member = cs.member;
    p.replicas = cs.replicas;
    KernelCase kc(K::kGradNormSq, p);
    uint32_t seed = 180;
    for (int64_t size : kGradSizes) kc.f32("grads", randomF32(size, seed++));
    kc.f32("replica_shards", randomF32(13, 185)).f32("replica_shards", randomF32(300001, 186));
    if (cs.add) kc.f64("add", {0.375});
    kc.f64("sq", {-1.0}).expectMatch(0, 1e-10);  // double sums in another order
  }
}

TEST(CudaOptimizerKernels, GradNormSqWithoutRolesIsZero) {
  LLCDIST_REQUIRE_GPU();
  KernelCase(K::kGradNormSq, OptimizerParams{}).f64("sq", {-1.0}).expectMatch(0, 0);
}

TEST(CudaOptimizerKernels, GradNormClip) {
  LLCDIST_REQUIRE_GPU();
  // norm 2: max_norm 0.5 clips by about 1/4, 10 does not, 0 never clips; no grads: only the norm.
  for (double m : {0.5, 10.0, 0.0}) {
    SCOPED_TRACE("max_norm " + std::to_string(m));
    KernelCase kc(K::kGradNormClip, maxNorm(m));
    kc.f64("sq", {4.0});
    uint32_t seed = 190;
    for (int64_t size : kGradSizes) kc.f32("grads", randomF32(size, seed++));
    kc.f32("norm", {0.0f}).expectMatch(0, 1e-7);
  }
  KernelCase(K::kGradNormClip, maxNorm(0.5)).f64("sq", {2.0}).f32("norm", {0.0f}).expectMatch(0, 1e-7);
}

TEST(CudaOptimizerKernels, AdamW) {
  LLCDIST_REQUIRE_GPU();
  const int64_t n = 1001;
  // beta1 0.9: lerp weight 0.1 (< 0.5); beta1 0.3: weight 0.7 (torch.lerp's other form).
  for (double beta1 : {0.9, 0.3})
    for (int64_t t : {1, 7}) {
      SCOPED_TRACE("beta1 " + std::to_string(beta1) + ", t " + std::to_string(t));
      OptimizerParams p;
      p.beta1 = beta1;
      p.beta2 = 0.999;
      p.eps = 1e-8;
      p.weightDecay = 0.01;
      KernelCase(K::kAdamW, p)
          .f32("param", randomF32(n, 200))
          .f32("grad", randomF32(n, 201))
          .f32("m", randomF32(n, 202, -0.1f, 0.1f))
          .f32("v", randomF32(n, 203, 0.0f, 0.01f))
          .step(1e-3, t)
          .expectMatch(1e-6, 1e-5);
    }
}

TEST(CudaOptimizerKernels, SgdWithAndWithoutMomentum) {
  LLCDIST_REQUIRE_GPU();
  const int64_t n = 1001;
  for (int64_t t : {1, 3}) {
    SCOPED_TRACE("t " + std::to_string(t));
    OptimizerParams p;
    p.momentum = 0.9;
    p.weightDecay = 0.01;
    KernelCase(K::kSgd, p)
        .f32("param", randomF32(n, 210))
        .f32("grad", randomF32(n, 211))
        .f32("momentum_buf", randomF32(n, 212))
        .step(0.05, t)
        .expectMatch(1e-6, 1e-5);
  }
  for (double wd : {0.0, 0.01}) {
    SCOPED_TRACE("no momentum, weight decay " + std::to_string(wd));
    OptimizerParams p;
    p.weightDecay = wd;
    KernelCase(K::kSgd, p)
        .f32("param", randomF32(n, 213))
        .f32("grad", randomF32(n, 214))
        .step(0.05, 2)
        .expectMatch(1e-6, 1e-5);
  }
}

}  // namespace
}  // namespace llcdist::rt::cuda::test
