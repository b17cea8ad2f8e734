// CUDA kernels of the linear family (CPU reference: src/kernels/Linear.cpp; contract: Kernels.h):
//  - linear_fwd, linear_bwd_input, linear_bwd_weight (variant "cublaslt"): one cuBLASLt GEMM each
//    through the rank's GemmRunner (Gemm.h), the row-major op mapped to a column-major problem by
//    GemmPlan.h, in the buffers' dtypes: bf16 × bf16 on tensor cores with f32 accumulation, writing
//    bf16 (rounded once) or f32 (a bf16 plan's f32 gradients), or f32 × f32 (TF32 only with --tf32).
//    linear_fwd's bias is the GEMM's bias epilogue, or, where cuBLASLt has no algorithm with it, a
//    broadcast of the bias into y and the GEMM accumulating onto it; accumulate is beta = 1 (the
//    output's old value read exactly, the sum rounded once).
//    linear_bwd_weight's db (the fused bias gradient) is the GEMM's bias-gradient epilogue (BGRADA /
//    BGRADB) writing db, where db is written in the GEMM output's dtype; else linear_bwd_bias's kernels.
//    linear_fwd's gelu and linear_bwd_input's gelu_x (the fused GELU) are the GEMM's GELU_AUX(_BIAS) /
//    DGELU epilogues (the GELU of the f32 product, y or gelu_x its aux matrix), where cuBLASLt has an
//    algorithm and the aux matrix has the output's dtype; else the GEMM, then the own GELU map on its
//    output as stored (the CPU's order).
//  - linear_bwd_bias: db[N] (+)= column sums of dy[M,N] in double, without atomics: pass 1 sums fixed
//    chunks of kBiasRowsPerChunk rows per column into f64 scratch, pass 2 (one thread per column) adds
//    the chunks in order, so the result depends only on M and repeats bit for bit.
//  - bias_add: y[M,N] += bias[N], elementwise.
// Every float role is f32 or bf16 as the variant takes it (host/KernelVariants.h, FloatRef.cuh).
#include "cuda/CudaKernels.h"
#include "cuda/Gemm.h"
#include "cuda/host/GemmPlan.h"
#include "cuda/kernels/Elementwise.cuh"
#include "cuda/kernels/FloatRef.cuh"
#include "llcdist/runtime/KernelChecks.h"

#include <cstdint>
#include <optional>
#include <string>

namespace llcdist::rt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kBiasRowsPerChunk = 64;

// C (m×n column-major, ldc) = beta·C (+ bias[i] on row i): a GEMM with k = 0 (an empty sum). Not
// reached by plans (their sizes are >= 1), kept so that no size reaches cuBLASLt as 0.
__global__ void emptyGemmKernel(FloatRef C, int64_t m, int64_t n, int64_t ldc, float beta, FloatRef bias) {
  const int64_t total = m * n;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t % m, j = t / m;
    float v = beta != 0.0f ? beta * C[i + j * ldc] : 0.0f;
    if (bias) v += bias[i];
    C.set(i + j * ldc, v);
  }
}

// C (m×n column-major, ldc) = bias[i] on row i: the bias placed first, for a GEMM that then
// accumulates (beta 1) without the bias epilogue, as the CPU computes linear_fwd.
__global__ void broadcastBiasKernel(FloatRef C, int64_t m, int64_t n, int64_t ldc, FloatRef bias) {
  const int64_t total = m * n;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t % m, j = t / m;
    C.set(i + j * ldc, bias[i]);
  }
}

// partial[c·N + n] = Σ over rows m of chunk c (rows [c·R, min(M, (c+1)·R)), in order) of dy[m·N + n].
__global__ void biasChunkSumsKernel(FloatRef dy, double* partial, int64_t M, int64_t N, int64_t chunks) {
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
__global__ void biasFinishKernel(const double* partial, FloatRef db, int64_t N, int64_t chunks, bool accumulate) {
  for (int64_t n = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; n < N; n += int64_t(gridDim.x) * blockDim.x) {
    double s = 0.0;
    for (int64_t c = 0; c < chunks; ++c) s += partial[c * N + n];
    db.set(n, static_cast<float>(accumulate ? double(db[n]) + s : s));
  }
}

__global__ void biasAddKernel(FloatRef y, FloatRef bias, int64_t M, int64_t N) {
  const int64_t total = M * N;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x)
    y.set(t, y[t] + bias[t % N]);
}

GemmDType gemmType(const FloatRef& r) { return r.bf16 ? GemmDType::kBF16 : GemmDType::kF32; }

struct LinearOperands {
  FloatRef x, w, dy;
  const void* of(GemmOperand o) const { return o == GemmOperand::kX ? x.p : o == GemmOperand::kW ? w.p : dy.p; }
};

// C = the op's output, through the runner (or the empty-sum kernel when k = 0).
Status runLinearGemm(const KernelCall& c, GemmProblem g, const LinearOperands& ops, FloatRef out, FloatRef bias,
                     const CudaKernelContext& ctx) {
  if (!ctx.gemm)
    return Status::internal(std::string(schema::opName(c.kind)) + ": no GEMM runner in the CUDA kernel context");
  g.tf32 = ctx.tf32;
  if (g.m == 0 || g.n == 0) return Status::ok();
  if (g.k == 0) {
    emptyGemmKernel<<<gridFor(g.m * g.n, kThreads), kThreads, 0, ctx.stream>>>(
        out, g.m, g.n, g.ldc, g.beta, g.epilogue == GemmEpilogue::kBias ? bias : FloatRef{});
    return LLCDIST_CUDA_LAUNCHED("linear (k = 0)", ctx.rank);
  }
  const Status st = ctx.gemm->run(g, ops.of(g.a), ops.of(g.b), out.p, bias.p, nullptr, ctx.stream, ctx.deterministic);
  if (st.code() != StatusCode::kNotFound || g.epilogue != GemmEpilogue::kBias)
    return st.withContext(schema::opName(c.kind));
  // No cuBLASLt algorithm with the bias epilogue for this problem: the bias first, then the product
  // accumulated onto it (the CPU's order).
  broadcastBiasKernel<<<gridFor(g.m * g.n, kThreads), kThreads, 0, ctx.stream>>>(out, g.m, g.n, g.ldc, bias);
  LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("linear_fwd (bias)", ctx.rank));
  GemmProblem plain = g;
  plain.epilogue = GemmEpilogue::kNone;
  plain.beta = 1.0f;
  return ctx.gemm->run(plain, ops.of(g.a), ops.of(g.b), out.p, nullptr, nullptr, ctx.stream, ctx.deterministic)
      .withContext(schema::opName(c.kind));
}

// db[N] (+)= the column sums of dy[M,N] (linear_bwd_bias), with the own two-pass kernels.
Status biasGradient(FloatRef dy, FloatRef db, const LinearParams& p, const CudaKernelContext& ctx) {
  if (p.N <= 0) return Status::ok();
  const int64_t M = p.M > 0 ? p.M : 0;
  const int64_t chunks = (M + kBiasRowsPerChunk - 1) / kBiasRowsPerChunk;
  double* partial = nullptr;
  if (chunks > 0) {
    if (!ctx.scratch) return Status::internal("linear_bwd_bias: no device scratch in the CUDA kernel context");
    StatusOr<void*> scratch = ctx.scratch->get(chunks * p.N * int64_t(sizeof(double)));
    if (!scratch.isOk()) return scratch.status().withContext("linear_bwd_bias");
    partial = static_cast<double*>(*scratch);
    biasChunkSumsKernel<<<gridFor(chunks * p.N, kThreads), kThreads, 0, ctx.stream>>>(dy, partial, M, p.N, chunks);
    LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("linear_bwd_bias (chunk sums)", ctx.rank));
  }
  biasFinishKernel<<<gridFor(p.N, kThreads), kThreads, 0, ctx.stream>>>(partial, db, p.N, chunks, p.accumulate);
  return LLCDIST_CUDA_LAUNCHED("linear_bwd_bias", ctx.rank);
}

// The fused linear ops' GEMM with its epilogue (bias gradient, GELU), C = out: its status, or nullopt
// where it cannot run so (no GEMM runner, an empty problem, cuBLASLt without an algorithm for it), for
// the caller to run the GEMM and its own kernels instead.
std::optional<Status> tryEpilogue(const KernelCall& c, GemmProblem g, const LinearOperands& ops, void* out,
                                  const void* bias, const void* aux, const CudaKernelContext& ctx) {
  if (!ctx.gemm || g.m == 0 || g.n == 0 || g.k == 0) return std::nullopt;
  g.tf32 = ctx.tf32;
  const Status st = ctx.gemm->run(g, ops.of(g.a), ops.of(g.b), out, bias, aux, ctx.stream, ctx.deterministic);
  if (st.code() == StatusCode::kNotFound) return std::nullopt;
  return st.withContext(schema::opName(c.kind));
}

// linear_bwd_weight with db (llcdist-plan-fuse-epilogues): the weight-gradient GEMM with cuBLASLt's
// bias-gradient epilogue writing the column sums of dy straight into db (dy read once, one launch), where
// db is written, not accumulated, and has the GEMM output's dtype: the epilogue rounds each sum once, into
// db's dtype, as the contract asks. Otherwise (accumulate: the epilogue only writes; another dtype; no
// algorithm with the epilogue) the plain GEMM and linear_bwd_bias's own kernels.
Status weightAndBiasGradient(const KernelCall& c, const LinearParams& p, const LinearOperands& ops, FloatRef dw,
                             FloatRef db, const CudaKernelContext& ctx) {
  GemmProblem g = linearBackwardWeightGemm(p, gemmType(ops.dy), gemmType(dw), /*biasGrad=*/true);
  if (!p.accumulate && gemmType(db) == g.outType)
    if (std::optional<Status> st = tryEpilogue(c, g, ops, dw.p, db.p, nullptr, ctx)) return *st;
  g.epilogue = GemmEpilogue::kNone;
  LLCDIST_RETURN_IF_ERROR(runLinearGemm(c, g, ops, dw, FloatRef{}, ctx));
  return biasGradient(ops.dy, db, p, ctx);
}

// linear_fwd with gelu: gelu = GELU(y), y = x·W (+ bias) kept as the pre-activation. The GELU_AUX(_BIAS)
// epilogue writes both (C = gelu, aux = y); otherwise the GEMM into y, then the GELU map of y as stored.
Status linearGeluForward(const KernelCall& c, const LinearParams& p, const LinearOperands& ops, FloatRef y,
                         FloatRef bias, FloatRef gelu, const CudaKernelContext& ctx) {
  const GemmProblem g = linearForwardGemm(p, bool(bias), gemmType(ops.x), gemmType(gelu), /*gelu=*/true);
  if (gemmType(y) == g.outType)
    if (std::optional<Status> st = tryEpilogue(c, g, ops, gelu.p, bias.p, y.p, ctx)) return *st;
  LLCDIST_RETURN_IF_ERROR(
      runLinearGemm(c, linearForwardGemm(p, bool(bias), gemmType(ops.x), gemmType(y)), ops, y, bias, ctx));
  return geluTanhForwardMap(y, gelu, p.M * p.N, ctx);
}

// linear_bwd_input with gelu_x: dx = GELU'(gelu_x) · (dy·W). The DGELU epilogue (aux = gelu_x) where dx
// is written (the pass fuses only then); otherwise the GEMM into dx, then the GELU-gradient map in place.
Status linearGeluBackwardInput(const KernelCall& c, const LinearParams& p, const LinearOperands& ops, FloatRef dx,
                               FloatRef geluX, const CudaKernelContext& ctx) {
  const GemmProblem g = linearBackwardInputGemm(p, gemmType(ops.dy), gemmType(dx), /*dgelu=*/true);
  if (!p.accumulate && gemmType(geluX) == g.outType)
    if (std::optional<Status> st = tryEpilogue(c, g, ops, dx.p, nullptr, geluX.p, ctx)) return *st;
  LLCDIST_RETURN_IF_ERROR(
      runLinearGemm(c, linearBackwardInputGemm(p, gemmType(ops.dy), gemmType(dx)), ops, dx, FloatRef{}, ctx));
  return geluTanhBackwardMap(dx, geluX, dx, p.M * p.K, ctx);
}

}  // namespace

void registerCudaLinearKernels(CudaKernelTable& t) {
  using K = schema::OpKind;
  using P = LinearParams;
  addCudaKernel<P>(t, K::kLinearFwd, "cublaslt", [](const KernelCall& c, const P& p, const CudaKernelContext& ctx) -> Status {
    const FloatRef bias = floatRef(c, "bias");
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "x", p.M * p.K));
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "w", p.N * p.K));
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "y", p.M * p.N));
    if (bias) LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "bias", p.N));
    LinearOperands ops;
    ops.x = floatRef(c, "x");
    ops.w = floatRef(c, "w");
    const FloatRef y = floatRef(c, "y"), gelu = floatRef(c, "gelu");
    if (gelu) {
      LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "gelu", p.M * p.N));
      return linearGeluForward(c, p, ops, y, bias, gelu, ctx);
    }
    return runLinearGemm(c, linearForwardGemm(p, bool(bias), gemmType(ops.x), gemmType(y)), ops, y, bias, ctx);
  });
  addCudaKernel<P>(t, K::kLinearBwdInput, "cublaslt", [](const KernelCall& c, const P& p, const CudaKernelContext& ctx) -> Status {
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "dy", p.M * p.N));
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "w", p.N * p.K));
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "dx", p.M * p.K));
    LinearOperands ops;
    ops.dy = floatRef(c, "dy");
    ops.w = floatRef(c, "w");
    const FloatRef dx = floatRef(c, "dx"), geluX = floatRef(c, "gelu_x");
    if (geluX) {
      LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "gelu_x", p.M * p.K));
      return linearGeluBackwardInput(c, p, ops, dx, geluX, ctx);
    }
    return runLinearGemm(c, linearBackwardInputGemm(p, gemmType(ops.dy), gemmType(dx)), ops, dx, FloatRef{}, ctx);
  });
  addCudaKernel<P>(t, K::kLinearBwdWeight, "cublaslt", [](const KernelCall& c, const P& p, const CudaKernelContext& ctx) -> Status {
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "dy", p.M * p.N));
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "x", p.M * p.K));
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "dw", p.N * p.K));
    LinearOperands ops;
    ops.dy = floatRef(c, "dy");
    ops.x = floatRef(c, "x");
    const FloatRef dw = floatRef(c, "dw"), db = floatRef(c, "db");
    if (db) {
      LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "db", p.N));
      return weightAndBiasGradient(c, p, ops, dw, db, ctx);
    }
    return runLinearGemm(c, linearBackwardWeightGemm(p, gemmType(ops.dy), gemmType(dw)), ops, dw, FloatRef{}, ctx);
  });
  addCudaKernel<P>(t, K::kLinearBwdBias, [](const KernelCall& c, const P& p, const CudaKernelContext& ctx) -> Status {
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "dy", p.M * p.N));
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "db", p.N));
    return biasGradient(floatRef(c, "dy"), floatRef(c, "db"), p, ctx);
  });
  addCudaKernel<P>(t, K::kBiasAdd, [](const KernelCall& c, const P& p, const CudaKernelContext& ctx) -> Status {
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "y", p.M * p.N));
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "bias", p.N));
    if (p.M <= 0 || p.N <= 0) return Status::ok();
    biasAddKernel<<<gridFor(p.M * p.N, kThreads), kThreads, 0, ctx.stream>>>(floatRef(c, "y"), floatRef(c, "bias"),
                                                                             p.M, p.N);
    return LLCDIST_CUDA_LAUNCHED("bias_add", ctx.rank);
  });
}

}  // namespace llcdist::rt::cuda
