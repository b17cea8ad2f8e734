// CUDA kernels of the linear family (CPU reference: src/kernels/Linear.cpp; contract: Kernels.h):
//  - linear_fwd, linear_bwd_input, linear_bwd_weight: one cuBLASLt GEMM each through the rank's
//    GemmRunner (Gemm.h), the row-major op mapped to a column-major problem by GemmPlan.h (linear_fwd's
//    bias is the GEMM's bias epilogue, or, where cuBLASLt has no algorithm with it, a broadcast of
//    the bias into y and the GEMM accumulating onto it; accumulate is beta = 1).
//  - linear_bwd_bias: db[N] (+)= column sums of dy[M,N] in double, without atomics: pass 1 sums fixed
//    chunks of kBiasRowsPerChunk rows per column into f64 scratch, pass 2 (one thread per column) adds
//    the chunks in order, so the result depends only on M and repeats bit for bit.
//  - bias_add: y[M,N] += bias[N], elementwise.
#include "cuda/CudaKernels.h"
#include "cuda/Gemm.h"
#include "cuda/host/GemmPlan.h"
#include "llcdist/runtime/KernelChecks.h"

#include <cstdint>
#include <string>

namespace llcdist::rt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kBiasRowsPerChunk = 64;

// C (m×n column-major, ldc) = beta·C (+ bias[i] on row i): a GEMM with k = 0 (an empty sum). Not
// reached by plans (their sizes are >= 1), kept so that no size reaches cuBLASLt as 0.
__global__ void emptyGemmKernel(float* C, int64_t m, int64_t n, int64_t ldc, float beta, const float* bias) {
  const int64_t total = m * n;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t % m, j = t / m;
    float v = beta != 0.0f ? beta * C[i + j * ldc] : 0.0f;
    if (bias) v += bias[i];
    C[i + j * ldc] = v;
  }
}

// C (m×n column-major, ldc) = bias[i] on row i: the bias placed first, for a GEMM that then
// accumulates (beta 1) without the bias epilogue, as the CPU computes linear_fwd.
__global__ void broadcastBiasKernel(float* C, int64_t m, int64_t n, int64_t ldc, const float* bias) {
  const int64_t total = m * n;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t % m, j = t / m;
    C[i + j * ldc] = bias[i];
  }
}

// partial[c·N + n] = Σ over rows m of chunk c (rows [c·R, min(M, (c+1)·R)), in order) of dy[m·N + n].
__global__ void biasChunkSumsKernel(const float* dy, double* partial, int64_t M, int64_t N, int64_t chunks) {
  const int64_t total = chunks * N;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = t / N, n = t % N;
    const int64_t begin = c * kBiasRowsPerChunk;
    const int64_t end = begin + kBiasRowsPerChunk < M ? begin + kBiasRowsPerChunk : M;
    double s = 0.0;
    for (int64_t m = begin; m < end; ++m) s += double(dy[m * N + n]);
    partial[t] = s;
  }
}

// db[n] = float((accumulate ? db[n] : 0) + Σ_c partial[c·N + n]), the chunks in order.
__global__ void biasFinishKernel(const double* partial, float* db, int64_t N, int64_t chunks, bool accumulate) {
  for (int64_t n = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; n < N; n += int64_t(gridDim.x) * blockDim.x) {
    double s = 0.0;
    for (int64_t c = 0; c < chunks; ++c) s += partial[c * N + n];
    db[n] = static_cast<float>(accumulate ? double(db[n]) + s : s);
  }
}

__global__ void biasAddKernel(float* y, const float* bias, int64_t M, int64_t N) {
  const int64_t total = M * N;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x)
    y[t] += bias[t % N];
}

struct LinearOperands {
  const float* x = nullptr;
  const float* w = nullptr;
  const float* dy = nullptr;
  const float* of(GemmOperand o) const { return o == GemmOperand::kX ? x : o == GemmOperand::kW ? w : dy; }
};

// C = the op's output, through the runner (or the empty-sum kernel when k = 0).
Status runLinearGemm(const KernelCall& c, const GemmProblem& g, const LinearOperands& ops, float* out,
                     const float* bias, const CudaKernelContext& ctx) {
  if (!ctx.gemm)
    return Status::internal(std::string(schema::opName(c.kind)) + ": no GEMM runner in the CUDA kernel context");
  if (g.m == 0 || g.n == 0) return Status::ok();
  if (g.k == 0) {
    emptyGemmKernel<<<gridFor(g.m * g.n, kThreads), kThreads, 0, ctx.stream>>>(
        out, g.m, g.n, g.ldc, g.beta, g.epilogue == GemmEpilogue::kBias ? bias : nullptr);
    return LLCDIST_CUDA_LAUNCHED("linear (k = 0)", ctx.rank);
  }
  const Status st = ctx.gemm->run(g, ops.of(g.a), ops.of(g.b), out, bias, ctx.stream, ctx.deterministic);
  if (st.code() != StatusCode::kNotFound || g.epilogue != GemmEpilogue::kBias)
    return st.withContext(schema::opName(c.kind));
  // No cuBLASLt algorithm with the bias epilogue for this problem: the bias first, then the product
  // accumulated onto it (the CPU's order).
  broadcastBiasKernel<<<gridFor(g.m * g.n, kThreads), kThreads, 0, ctx.stream>>>(out, g.m, g.n, g.ldc, bias);
  LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("linear_fwd (bias)", ctx.rank));
  GemmProblem plain = g;
  plain.epilogue = GemmEpilogue::kNone;
  plain.beta = 1.0f;
  return ctx.gemm->run(plain, ops.of(g.a), ops.of(g.b), out, nullptr, ctx.stream, ctx.deterministic)
      .withContext(schema::opName(c.kind));
}

}  // namespace

void registerCudaLinearKernels(CudaKernelTable& t) {
  using K = schema::OpKind;
  using P = LinearParams;
  addCudaKernel<P>(t, K::kLinearFwd, [](const KernelCall& c, const P& p, const CudaKernelContext& ctx) -> Status {
    const float* bias = c.F("bias");
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "x", p.M * p.K));
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "w", p.N * p.K));
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "y", p.M * p.N));
    if (bias) LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "bias", p.N));
    LinearOperands ops;
    ops.x = c.F("x");
    ops.w = c.F("w");
    return runLinearGemm(c, linearForwardGemm(p, bias != nullptr), ops, c.F("y"), bias, ctx);
  });
  addCudaKernel<P>(t, K::kLinearBwdInput, [](const KernelCall& c, const P& p, const CudaKernelContext& ctx) -> Status {
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "dy", p.M * p.N));
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "w", p.N * p.K));
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "dx", p.M * p.K));
    LinearOperands ops;
    ops.dy = c.F("dy");
    ops.w = c.F("w");
    return runLinearGemm(c, linearBackwardInputGemm(p), ops, c.F("dx"), nullptr, ctx);
  });
  addCudaKernel<P>(t, K::kLinearBwdWeight, [](const KernelCall& c, const P& p, const CudaKernelContext& ctx) -> Status {
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "dy", p.M * p.N));
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "x", p.M * p.K));
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "dw", p.N * p.K));
    LinearOperands ops;
    ops.dy = c.F("dy");
    ops.x = c.F("x");
    return runLinearGemm(c, linearBackwardWeightGemm(p), ops, c.F("dw"), nullptr, ctx);
  });
  addCudaKernel<P>(t, K::kLinearBwdBias, [](const KernelCall& c, const P& p, const CudaKernelContext& ctx) -> Status {
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "dy", p.M * p.N));
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "db", p.N));
    if (p.N <= 0) return Status::ok();
    const int64_t M = p.M > 0 ? p.M : 0;
    const int64_t chunks = (M + kBiasRowsPerChunk - 1) / kBiasRowsPerChunk;
    double* partial = nullptr;
    if (chunks > 0) {
      if (!ctx.scratch) return Status::internal("linear_bwd_bias: no device scratch in the CUDA kernel context");
      StatusOr<void*> scratch = ctx.scratch->get(chunks * p.N * int64_t(sizeof(double)));
      if (!scratch.isOk()) return scratch.status().withContext("linear_bwd_bias");
      partial = static_cast<double*>(*scratch);
      biasChunkSumsKernel<<<gridFor(chunks * p.N, kThreads), kThreads, 0, ctx.stream>>>(c.F("dy"), partial, M, p.N,
                                                                                         chunks);
      LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("linear_bwd_bias (chunk sums)", ctx.rank));
    }
    biasFinishKernel<<<gridFor(p.N, kThreads), kThreads, 0, ctx.stream>>>(partial, c.F("db"), p.N, chunks,
                                                                         p.accumulate);
    return LLCDIST_CUDA_LAUNCHED("linear_bwd_bias", ctx.rank);
  });
  addCudaKernel<P>(t, K::kBiasAdd, [](const KernelCall& c, const P& p, const CudaKernelContext& ctx) -> Status {
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "y", p.M * p.N));
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "bias", p.N));
    if (p.M <= 0 || p.N <= 0) return Status::ok();
    biasAddKernel<<<gridFor(p.M * p.N, kThreads), kThreads, 0, ctx.stream>>>(c.F("y"), c.F("bias"), p.M, p.N);
    return LLCDIST_CUDA_LAUNCHED("bias_add", ctx.rank);
  });
}

}  // namespace llcdist::rt::cuda
