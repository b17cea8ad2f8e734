// cuDNN fused attention (src/cuda/CudnnAttention.h) against the CPU reference kernels (Kernels.h:
// attentionForward / attentionBackward) on seeded bf16 inputs: the reference runs in f32 on the bf16
// values (exactly representable), cuDNN on the bf16 buffers themselves, reading our [B,S,nh,hd] /
// [B,S,nkv,hd] layouts through strides. Shapes: MHA, GQA (nh=8, nkv=2), MQA, head dims 64 and 128,
// sequence lengths that are not multiples of 64, B > 1; and Mistral's sliding window (cuDNN's diagonal band
// left bound: AttentionPlan.h), windows of one key, inside a 64-row tile, across tiles, against the
// CPU reference with the same window. Plus: the deterministic backward repeats bit for
// bit, graphs are cached per problem, and bad calls are errors, not crashes. Every test skips (one line)
// without a CUDA device ("no CUDA device") or when cudnnAttentionUsable is false (a build without the
// cuDNN frontend, an old GPU).
//
// Tolerances, |cudnn - cpu| <= atol + rtol·|cpu|, estimated rather than measured: bf16 keeps 8
// significant bits (relative rounding error u = 2^-9 ≈ 2e-3). The forward rounds P to bf16 before P·V
// (each term off by <= u, the weights positive and summing to 1, so <= u·max|v|) and rounds out to bf16
// (<= u·|out|): about 4e-3 for |v| <= 1, checked with atol = rtol = 2e-2 (5x margin). lse stays in f32
// from exact bf16 products accumulated in f32 (errors ~1e-6 for these magnitudes, |lse| < 10): atol =
// rtol = 1e-3. The backward rounds P and dS to bf16 before its three GEMMs and dq, dk, dv to bf16, and
// reads cuDNN's own bf16 out (D = rowsum(dO·O)): a few u of each gradient's terms; atol = rtol = 2e-2
// for gradients of magnitude ~0.1-1 (inputs uniform in [-1, 1]).
#include "KernelHarness.h"

#include "cuda/CudnnAttention.h"
#include "llcdist/runtime/Bf16.h"
#include "llcdist/runtime/Kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace llcdist::rt::cuda::test {
namespace {

using T = AttentionTensor;

constexpr double kOutTol = 2e-2, kLseTol = 1e-3, kGradTol = 2e-2;

#define LLCDIST_REQUIRE_CUDNN_ATTENTION()                                                  \
  do {                                                                                     \
    LLCDIST_REQUIRE_GPU();                                                                 \
    std::string llcdist_why_;                                                              \
    if (!::llcdist::rt::cuda::cudnnAttentionUsable(&llcdist_why_))                         \
      GTEST_SKIP() << "cuDNN attention is not usable: " << llcdist_why_;                   \
  } while (0)

// A device buffer, freed on scope exit.
struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (n > 0 && cudaMalloc(&p, n) != cudaSuccess) p = nullptr;
  }
  ~DeviceBuffer() {
    if (p) cudaFree(p);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// Random values rounded to bf16: `bits` for the device, `f32` (the same values) for the reference.
struct Bf16Data {
  std::vector<uint16_t> bits;
  std::vector<float> f32;
};
Bf16Data randomBf16(int64_t n, uint32_t seed) {
  Bf16Data d;
  d.f32 = randomF32(n, seed);
  d.bits.resize(d.f32.size());
  convertF32ToBf16(d.f32.data(), d.bits.data(), n);
  convertBf16ToF32(d.bits.data(), d.f32.data(), n);
  return d;
}

std::unique_ptr<DeviceBuffer> upload(const void* host, size_t bytes) {
  auto b = std::make_unique<DeviceBuffer>(bytes);
  if (b->p) {
    EXPECT_EQ(cudaMemcpy(b->p, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  return b;
}
std::vector<float> downloadBf16(const DeviceBuffer& b, int64_t n) {
  std::vector<uint16_t> bits(static_cast<size_t>(n), 0);
  EXPECT_EQ(cudaMemcpy(bits.data(), b.p, size_t(n) * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<float> f(static_cast<size_t>(n));
  convertBf16ToF32(bits.data(), f.data(), n);
  return f;
}
std::vector<float> downloadF32(const DeviceBuffer& b, int64_t n) {
  std::vector<float> f(static_cast<size_t>(n), 0.0f);
  EXPECT_EQ(cudaMemcpy(f.data(), b.p, size_t(n) * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  return f;
}

void expectClose(const std::vector<float>& got, const std::vector<float>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - double(want[i]));
    worst = std::max(worst, err);
    if (!(err <= tol + tol * std::fabs(double(want[i]))) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: cudnn " << got[i] << " vs cpu " << want[i] << " (atol = rtol = " << tol
                    << ")";
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " differ; largest error " << worst;
}

struct Shape {
  int64_t B, S, nh, nkv, hd;
  int64_t window = 0;  // the sliding window; 0: plain causal
  AttentionParams params(bool packed = false) const {
    AttentionParams p{B, S, nh, nkv, hd, packed, packed};
    p.window = window;
    return p;
  }
  AttentionShape shape() const { return {B, S, nh, nkv, hd, window}; }
};
void PrintTo(const Shape& s, std::ostream* os) {
  *os << "B" << s.B << "_S" << s.S << "_nh" << s.nh << "_nkv" << s.nkv << "_hd" << s.hd;
  if (s.window > 0) *os << "_window" << s.window;
}

// Everything one shape needs on the device: inputs, outputs, one workspace for both graphs.
struct AttentionRun {
  AttentionProblem fwd, bwd;
  Bf16Data q, k, v, dout;
  // Device buffers: the inputs q, k, v, dout; the outputs out, lse, dq, dk, dv; the workspace.
  std::unique_ptr<DeviceBuffer> qDev, kDev, vDev, doutDev, outDev, lseDev, dqDev, dkDev, dvDev, workspace;
  int64_t workspaceBytes = 0;
  cudaStream_t stream = nullptr;

  AttentionRun(const Shape& s, bool deterministic) {
    const AttentionParams params = s.params();
    fwd = attentionProblem(params, false, false);
    bwd = attentionProblem(params, true, deterministic);
    q = randomBf16(attentionElems(fwd, T::kQ), 11);
    k = randomBf16(attentionElems(fwd, T::kK), 12);
    v = randomBf16(attentionElems(fwd, T::kV), 13);
    dout = randomBf16(attentionElems(bwd, T::kDO), 14);
  }
  ~AttentionRun() {
    if (stream) cudaStreamDestroy(stream);
  }

  // Uploads the inputs, allocates the outputs and the workspace prepare() asks for.
  void setUp(CudnnAttention& att) {
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    StatusOr<int64_t> wf = att.prepare(fwd);
    ASSERT_TRUE(wf.isOk()) << wf.status().toString();
    StatusOr<int64_t> wb = att.prepare(bwd);
    ASSERT_TRUE(wb.isOk()) << wb.status().toString();
    workspaceBytes = std::max(*wf, *wb);
    workspace = std::make_unique<DeviceBuffer>(size_t(workspaceBytes));
    ASSERT_TRUE(workspaceBytes == 0 || workspace->p) << workspaceBytes << " bytes of workspace";
    qDev = upload(q.bits.data(), q.bits.size() * 2);
    kDev = upload(k.bits.data(), k.bits.size() * 2);
    vDev = upload(v.bits.data(), v.bits.size() * 2);
    doutDev = upload(dout.bits.data(), dout.bits.size() * 2);
    outDev = std::make_unique<DeviceBuffer>(size_t(attentionElems(fwd, T::kO)) * 2);
    lseDev = std::make_unique<DeviceBuffer>(size_t(attentionElems(fwd, T::kStats)) * 4);
    dqDev = std::make_unique<DeviceBuffer>(q.bits.size() * 2);
    dkDev = std::make_unique<DeviceBuffer>(k.bits.size() * 2);
    dvDev = std::make_unique<DeviceBuffer>(v.bits.size() * 2);
    for (const DeviceBuffer* b : {qDev.get(), kDev.get(), vDev.get(), doutDev.get(), outDev.get(), lseDev.get(),
                                  dqDev.get(), dkDev.get(), dvDev.get()})
      ASSERT_NE(b->p, nullptr);
  }
  Status forward(CudnnAttention& att) {
    return att.forward(fwd, qDev->p, kDev->p, vDev->p, outDev->p, static_cast<float*>(lseDev->p), workspace->p,
                       workspaceBytes, stream);
  }
  Status backward(CudnnAttention& att) {
    return att.backward(bwd, doutDev->p, qDev->p, kDev->p, vDev->p, outDev->p, static_cast<const float*>(lseDev->p),
                        dqDev->p, dkDev->p, dvDev->p, workspace->p, workspaceBytes, stream);
  }
};

std::unique_ptr<CudnnAttention> makeAttention() {
  StatusOr<std::unique_ptr<CudnnAttention>> a = CudnnAttention::create(0);
  EXPECT_TRUE(a.isOk()) << a.status().toString();
  return a.isOk() ? std::move(a).value() : nullptr;
}

class CudnnAttentionTest : public ::testing::TestWithParam<Shape> {};

TEST_P(CudnnAttentionTest, ForwardAndBackwardMatchCpuReference) {
  LLCDIST_REQUIRE_CUDNN_ATTENTION();
  const Shape& s = GetParam();
  std::unique_ptr<CudnnAttention> att = makeAttention();
  ASSERT_NE(att, nullptr);
  AttentionRun run(s, /*deterministic=*/false);
  ASSERT_NO_FATAL_FAILURE(run.setUp(*att));
  const Status f = run.forward(*att);
  ASSERT_TRUE(f.isOk()) << f.toString();
  const Status b = run.backward(*att);
  ASSERT_TRUE(b.isOk()) << b.toString();
  ASSERT_EQ(cudaStreamSynchronize(run.stream), cudaSuccess);

  const AttentionShape shape = s.shape();
  std::vector<float> out(run.q.f32.size()), lse(size_t(attentionElems(run.fwd, T::kStats)));
  ASSERT_TRUE(attentionForward(shape, run.q.f32.data(), run.k.f32.data(), run.v.f32.data(), out.data(), lse.data())
                  .isOk());
  std::vector<float> dq(run.q.f32.size()), dk(run.k.f32.size()), dv(run.v.f32.size());
  ASSERT_TRUE(attentionBackward(shape, run.dout.f32.data(), run.q.f32.data(), run.k.f32.data(), run.v.f32.data(),
                                out.data(), lse.data(), dq.data(), dk.data(), dv.data())
                  .isOk());

  expectClose(downloadBf16(*run.outDev, int64_t(out.size())), out, kOutTol, "out");
  expectClose(downloadF32(*run.lseDev, int64_t(lse.size())), lse, kLseTol, "lse");
  expectClose(downloadBf16(*run.dqDev, int64_t(dq.size())), dq, kGradTol, "dq");
  expectClose(downloadBf16(*run.dkDev, int64_t(dk.size())), dk, kGradTol, "dk");
  expectClose(downloadBf16(*run.dvDev, int64_t(dv.size())), dv, kGradTol, "dv");
}

TEST_P(CudnnAttentionTest, DeterministicBackwardRepeatsBitForBit) {
  LLCDIST_REQUIRE_CUDNN_ATTENTION();
  const Shape& s = GetParam();
  std::unique_ptr<CudnnAttention> att = makeAttention();
  ASSERT_NE(att, nullptr);
  AttentionRun run(s, /*deterministic=*/true);
  ASSERT_NO_FATAL_FAILURE(run.setUp(*att));
  std::vector<std::vector<uint16_t>> first;
  for (int rep = 0; rep < 2; ++rep) {
    const Status f = run.forward(*att);
    ASSERT_TRUE(f.isOk()) << f.toString();
    // Poison the outputs: the backward must overwrite every element.
    for (const DeviceBuffer* b : {run.dqDev.get(), run.dkDev.get(), run.dvDev.get()})
      ASSERT_EQ(cudaMemsetAsync(b->p, rep == 0 ? 0xff : 0x7f, b->bytes, run.stream), cudaSuccess);
    const Status b = run.backward(*att);
    ASSERT_TRUE(b.isOk()) << b.toString();
    ASSERT_EQ(cudaStreamSynchronize(run.stream), cudaSuccess);
    std::vector<std::vector<uint16_t>> now;
    for (const DeviceBuffer* d : {run.outDev.get(), run.dqDev.get(), run.dkDev.get(), run.dvDev.get()}) {
      now.emplace_back(d->bytes / 2);
      ASSERT_EQ(cudaMemcpy(now.back().data(), d->p, d->bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    if (rep == 0) {
      first = std::move(now);
      continue;
    }
    const char* names[] = {"out", "dq", "dk", "dv"};
    for (size_t i = 0; i < first.size(); ++i)
      EXPECT_EQ(std::memcmp(first[i].data(), now[i].data(), first[i].size() * 2), 0) << names[i] << " differs";
  }
}

// Q, K, V read from one packed [B,S,nh+2·nkv,hd] buffer and dQ, dK, dV written into one (the qkv / dqkv
// roles of llcdist-plan-packed-qkv): the same layouts' dims with the packed row stride, K and V addressed
// from their offsets into the row. Against the CPU reference, and every element of dqkv written.
TEST_P(CudnnAttentionTest, PackedQkvMatchesCpuReference) {
  LLCDIST_REQUIRE_CUDNN_ATTENTION();
  const Shape& s = GetParam();
  std::unique_ptr<CudnnAttention> att = makeAttention();
  ASSERT_NE(att, nullptr);
  const AttentionParams params = s.params(/*packed=*/true);
  const AttentionProblem fwd = attentionProblem(params, false, false), bwd = attentionProblem(params, true, false);
  ASSERT_TRUE(fwd.packedQkv && bwd.packedQkv && bwd.packedGrad);
  const QkvLayout L = qkvLayout(s.nh, s.nkv, s.hd, true);
  const int64_t rows = s.B * s.S, qRow = s.nh * s.hd, kvRow = s.nkv * s.hd;
  const Bf16Data q = randomBf16(rows * qRow, 31), k = randomBf16(rows * kvRow, 32), v = randomBf16(rows * kvRow, 33),
                 dout = randomBf16(rows * qRow, 34);
  std::vector<uint16_t> packed(size_t(rows * L.qRow));
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(q.bits.data() + r * qRow, qRow, packed.data() + r * L.qRow + L.qOffset);
    std::copy_n(k.bits.data() + r * kvRow, kvRow, packed.data() + r * L.qRow + L.kOffset);
    std::copy_n(v.bits.data() + r * kvRow, kvRow, packed.data() + r * L.qRow + L.vOffset);
  }
  StatusOr<int64_t> wf = att->prepare(fwd), wb = att->prepare(bwd);
  ASSERT_TRUE(wf.isOk()) << wf.status().toString();
  ASSERT_TRUE(wb.isOk()) << wb.status().toString();
  const int64_t wsBytes = std::max(*wf, *wb);
  DeviceBuffer ws(size_t(std::max<int64_t>(wsBytes, 1)));
  std::unique_ptr<DeviceBuffer> qkv = upload(packed.data(), packed.size() * 2), doutDev = upload(dout.bits.data(), dout.bits.size() * 2);
  DeviceBuffer outDev(size_t(rows * qRow) * 2), lseDev(size_t(s.B * s.nh * s.S) * 4), dqkv(packed.size() * 2);
  ASSERT_NE(dqkv.p, nullptr);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(dqkv.p, 0xff, dqkv.bytes, stream), cudaSuccess);  // NaNs unless overwritten
  auto at = [](void* base, int64_t elems) { return static_cast<void*>(static_cast<char*>(base) + elems * 2); };
  Status st = att->forward(fwd, at(qkv->p, L.qOffset), at(qkv->p, L.kOffset), at(qkv->p, L.vOffset), outDev.p,
                           static_cast<float*>(lseDev.p), ws.p, wsBytes, stream);
  ASSERT_TRUE(st.isOk()) << st.toString();
  st = att->backward(bwd, doutDev->p, at(qkv->p, L.qOffset), at(qkv->p, L.kOffset), at(qkv->p, L.vOffset), outDev.p,
                     static_cast<const float*>(lseDev.p), at(dqkv.p, L.qOffset), at(dqkv.p, L.kOffset),
                     at(dqkv.p, L.vOffset), ws.p, wsBytes, stream);
  ASSERT_TRUE(st.isOk()) << st.toString();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);

  const AttentionShape shape = s.shape();
  std::vector<float> out(size_t(rows * qRow)), lse(size_t(s.B * s.nh * s.S));
  ASSERT_TRUE(attentionForward(shape, q.f32.data(), k.f32.data(), v.f32.data(), out.data(), lse.data()).isOk());
  std::vector<float> dq(q.f32.size()), dk(k.f32.size()), dv(v.f32.size());
  ASSERT_TRUE(attentionBackward(shape, dout.f32.data(), q.f32.data(), k.f32.data(), v.f32.data(), out.data(),
                                lse.data(), dq.data(), dk.data(), dv.data())
                  .isOk());
  expectClose(downloadBf16(outDev, int64_t(out.size())), out, kOutTol, "out");
  expectClose(downloadF32(lseDev, int64_t(lse.size())), lse, kLseTol, "lse");
  const std::vector<float> got = downloadBf16(dqkv, int64_t(packed.size()));
  std::vector<float> gq(dq.size()), gk(dk.size()), gv(dv.size());
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(got.data() + r * L.qRow + L.qOffset, qRow, gq.data() + r * qRow);
    std::copy_n(got.data() + r * L.qRow + L.kOffset, kvRow, gk.data() + r * kvRow);
    std::copy_n(got.data() + r * L.qRow + L.vOffset, kvRow, gv.data() + r * kvRow);
  }
  expectClose(gq, dq, kGradTol, "dq (packed)");
  expectClose(gk, dk, kGradTol, "dk (packed)");
  expectClose(gv, dv, kGradTol, "dv (packed)");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudnnAttentionTest,
                         ::testing::Values(Shape{2, 128, 4, 4, 64},    // MHA
                                           Shape{2, 200, 8, 2, 128},   // GQA, hd 128, S not a multiple of 64
                                           Shape{1, 96, 8, 1, 64},     // MQA
                                           Shape{3, 77, 8, 2, 64},     // GQA, B = 3, S odd
                                           Shape{1, 256, 2, 2, 128})); // MHA, hd 128

INSTANTIATE_TEST_SUITE_P(Windowed, CudnnAttentionTest,
                         ::testing::Values(Shape{2, 128, 4, 4, 64, 1},     // the diagonal only
                                           Shape{2, 200, 8, 2, 128, 16},   // GQA, inside a tile
                                           Shape{1, 96, 8, 1, 64, 64},     // MQA, one tile
                                           Shape{3, 77, 8, 2, 64, 40},     // S odd, across tiles
                                           Shape{1, 256, 2, 2, 128, 100},  // across tiles
                                           Shape{2, 64, 4, 2, 64, 64}));   // = S: the causal problem

TEST(CudnnAttentionCacheTest, GraphsAreBuiltOncePerProblem) {
  LLCDIST_REQUIRE_CUDNN_ATTENTION();
  std::unique_ptr<CudnnAttention> att = makeAttention();
  ASSERT_NE(att, nullptr);
  const AttentionParams params{2, 64, 4, 2, 64};
  EXPECT_EQ(att->cachedGraphs(), 0);
  ASSERT_TRUE(att->prepare(attentionProblem(params, false, false)).isOk());
  ASSERT_TRUE(att->prepare(attentionProblem(params, false, true)).isOk());  // the same forward graph
  EXPECT_EQ(att->cachedGraphs(), 1);
  ASSERT_TRUE(att->prepare(attentionProblem(params, true, false)).isOk());
  ASSERT_TRUE(att->prepare(attentionProblem(params, true, true)).isOk());
  ASSERT_TRUE(att->prepare(attentionProblem(params, true, true)).isOk());
  EXPECT_EQ(att->cachedGraphs(), 3);
  // A sliding window is another graph (the band's left bound); one >= S is the causal problem's.
  AttentionParams windowed = params;
  windowed.window = 16;
  ASSERT_TRUE(att->prepare(attentionProblem(windowed, false, false)).isOk());
  EXPECT_EQ(att->cachedGraphs(), 4);
  windowed.window = 64;
  ASSERT_TRUE(att->prepare(attentionProblem(windowed, false, false)).isOk());
  EXPECT_EQ(att->cachedGraphs(), 4);
}

TEST(CudnnAttentionErrorTest, BadCallsAreErrors) {
  LLCDIST_REQUIRE_CUDNN_ATTENTION();
  std::unique_ptr<CudnnAttention> att = makeAttention();
  ASSERT_NE(att, nullptr);
  // Refused problems: an f32 one, a head dim that is not a multiple of 8.
  const AttentionParams params{1, 64, 2, 2, 64};
  StatusOr<int64_t> f32 = att->prepare(attentionProblem(params, false, false, schema::ElemType::kF32));
  EXPECT_EQ(f32.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f32.status().message().find("f32"), std::string::npos) << f32.status().message();
  StatusOr<int64_t> hd = att->prepare(attentionProblem(AttentionParams{1, 64, 2, 2, 60}, false, false));
  EXPECT_EQ(hd.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(att->cachedGraphs(), 0);

  AttentionRun run(Shape{1, 64, 2, 2, 64}, false);
  ASSERT_NO_FATAL_FAILURE(run.setUp(*att));
  // Unprepared: another shape.
  AttentionProblem other = run.fwd;
  other.S = 32;
  Status s = att->forward(other, run.qDev->p, run.kDev->p, run.vDev->p, run.outDev->p,
                          static_cast<float*>(run.lseDev->p), run.workspace->p, run.workspaceBytes, run.stream);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not prepared"), std::string::npos) << s.message();
  // The wrong direction.
  s = att->forward(run.bwd, run.qDev->p, run.kDev->p, run.vDev->p, run.outDev->p, static_cast<float*>(run.lseDev->p),
                   run.workspace->p, run.workspaceBytes, run.stream);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  // A misaligned and a null pointer.
  s = att->forward(run.fwd, static_cast<char*>(run.qDev->p) + 2, run.kDev->p, run.vDev->p, run.outDev->p,
                   static_cast<float*>(run.lseDev->p), run.workspace->p, run.workspaceBytes, run.stream);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Q at"), std::string::npos) << s.message();
  s = att->forward(run.fwd, run.qDev->p, nullptr, run.vDev->p, run.outDev->p, static_cast<float*>(run.lseDev->p),
                   run.workspace->p, run.workspaceBytes, run.stream);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  // Too small a workspace (when the graph needs one).
  if (run.workspaceBytes > 0) {
    s = att->forward(run.fwd, run.qDev->p, run.kDev->p, run.vDev->p, run.outDev->p, static_cast<float*>(run.lseDev->p),
                     run.workspace->p, run.workspaceBytes - 1, run.stream);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("workspace"), std::string::npos) << s.message();
  }
  // The errors name the rank.
  EXPECT_NE(s.message().find("rank 0"), std::string::npos) << s.message();
  EXPECT_EQ(cudaStreamSynchronize(run.stream), cudaSuccess);
}

// Without the frontend (or a usable cuDNN) create() says why instead of failing later.
TEST(CudnnAttentionErrorTest, CreateFailsWhereNotUsable) {
  LLCDIST_REQUIRE_GPU();
  std::string why;
  const bool usable = cudnnAttentionUsable(&why);
  StatusOr<std::unique_ptr<CudnnAttention>> a = CudnnAttention::create(3);
  EXPECT_EQ(a.isOk(), usable) << why;
  if (!usable) {
    EXPECT_NE(a.status().message().find(why), std::string::npos) << a.status().message();
    EXPECT_NE(a.status().message().find("rank 3"), std::string::npos) << a.status().message();
  }
}

}  // namespace
}  // namespace llcdist::rt::cuda::test
