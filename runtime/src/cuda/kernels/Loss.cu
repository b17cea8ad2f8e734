// CUDA kernels of the loss family (CPU reference: src/kernels/Loss.cpp; contract: Kernels.h): cross
// entropy over logits [M,V] and int32 targets, plain or vocabulary-parallel (Megatron's decomposition
// into cross_entropy_max, cross_entropy_sums and the plan's all-reduces), with vocabulary padding
// (real_vocab: global columns >= it are outside the softmax and get zero gradient).
//
// One block of kThreads threads per row (a grid-stride loop over rows); a thread takes the columns
// tid, tid + kThreads, ...; the row's max (f32) and Σ exp (double, each term exp(double(x - max)) as
// the CPU computes it) are reduced over a fixed shared-memory tree, so results repeat bit for bit
// (they differ from the CPU only in the order of the double sum). The mean loss is one block summing
// the rows' double losses in a fixed order. No atomics, no copy of the logits: bf16 logits are read as
// they are (FloatRef.cuh) and a bf16 dlogits is written rounded once, in place of the logits.
//
// A target outside the vocabulary, where the CPU op returns an OutOfRange error, stores
// kDeviceTargetOutOfRange into *ctx.deviceError (a plain store; the backend reports it at
// synchronize()); that row's outputs are left as they were and cross_entropy_fwd leaves the loss
// unchanged. The shape errors the CPU reports synchronously (a bad shard, real_vocab outside the
// logits' columns) are returned synchronously here too.
//
// classifier (llcdist-plan-fuse-classifier; variant "cublaslt"): per chunk of token rows, three
// cuBLASLt GEMMs through the rank's GemmRunner (the linear family's problems, GemmPlan.h, on the
// chunk's rows) around one row kernel that writes the row's loss and its gradient in place of the
// chunk's logits: logits = x·Wᵀ, then dx = dlogits·W, then dlogitsᵀ·x onto dw_acc (f32; the first
// chunk writes it) or, without dw_acc, onto dw; dw = (accumulate ? dw : 0) + dw_acc at the end, and the
// mean loss over all M rows in one block, as cross_entropy_fwd's.
#include "cuda/CudaKernels.h"
#include "cuda/Gemm.h"
#include "cuda/host/GemmPlan.h"
#include "cuda/kernels/BlockSum.cuh"
#include "cuda/kernels/Elementwise.cuh"
#include "cuda/kernels/FloatRef.cuh"
#include "llcdist/runtime/KernelChecks.h"

#include <cmath>
#include <cstdint>
#include <string>

namespace llcdist::rt::cuda {
namespace {

constexpr int kThreads = 256;  // a power of two: the reduction trees halve it
static_assert(kThreads == kBlockSumThreads, "a row's block is blockSum's block (BlockSum.cuh)");

// The block's max of `v` (every thread passes one value; all threads get the result).
__device__ float blockMax(float v, float* red) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  const float r = red[0];
  __syncthreads();  // red is reused by the next reduction
  return r;
}

// max over x[0, n) (-inf for n = 0).
__device__ float rowMax(FloatRef x, int64_t n, float* red) {
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) mx = fmaxf(mx, x[j]);
  return blockMax(mx, red);
}

// Σ over x[0, n) of exp(double(x - mx)).
__device__ double rowSumExp(FloatRef x, int64_t n, float mx, double* red) {
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) s += exp(double(x[j] - mx));
  return blockSum(s, red);
}

__device__ __forceinline__ void reportBadTarget(int* deviceError) {
  if (deviceError) *deviceError = kDeviceTargetOutOfRange;
}

// cross_entropy_fwd (kGrad false): rowLoss[m] = max + log(Σ exp(x - max)) - x[target] over the first R
// columns (0 for a row whose target is outside [0, R), which is reported). The classifier's row step
// (kGrad true) then writes the gradient as crossEntropyBackwardKernel does, in place of the row (read in
// full before any thread writes it).
template <bool kGrad>
__global__ void crossEntropyRowKernel(FloatRef logits, const int32_t* targets, double* rowLoss, int64_t M, int64_t V,
                                      int64_t R, float scale, int* deviceError) {
  __shared__ float redF[kThreads];
  __shared__ double redD[kThreads];
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {  // block-uniform
    const int64_t t = targets[m];
    if (t < 0 || t >= R) {
      if (threadIdx.x == 0) {
        reportBadTarget(deviceError);
        rowLoss[m] = 0.0;
      }
      continue;
    }
    const FloatRef x = logits.at(m * V);
    const float mx = rowMax(x, R, redF);
    const double sum = rowSumExp(x, R, mx, redD);
    if (threadIdx.x == 0) rowLoss[m] = double(mx) + log(sum) - double(x[t]);
    if (!kGrad) continue;
    __syncthreads();  // x[t] read before any thread overwrites it
    const double inv = 1.0 / sum;
    for (int64_t j = threadIdx.x; j < R; j += kThreads) {
      const double p = exp(double(x[j] - mx)) * inv;
      x.set(j, static_cast<float>((p - (j == t ? 1.0 : 0.0)) * double(scale)));
    }
    for (int64_t j = R + threadIdx.x; j < V; j += kThreads) x.set(j, 0.0f);
  }
}

// Vocabulary-parallel cross_entropy_fwd: rowLoss[m] = float(rowMax) + log(rowSums[m]) - rowSums[M + m].
__global__ void crossEntropyVocabParallelRowLossKernel(const double* rowMaxIn, const double* rowSums, double* rowLoss,
                                                       int64_t M) {
  for (int64_t m = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; m < M; m += int64_t(gridDim.x) * blockDim.x)
    rowLoss[m] = double(float(rowMaxIn[m])) + log(rowSums[m]) - rowSums[M + m];
}

// One block: loss[0] += float(scale · mean(rowLoss)), the rows summed in a fixed order. With targets
// (the plain op), a row whose target is outside [0, R) leaves the loss unchanged.
__global__ void crossEntropyMeanKernel(const double* rowLoss, const int32_t* targets, int64_t R, int64_t M,
                                       double scale, float* loss) {
  __shared__ double red[kThreads];
  double s = 0.0, bad = 0.0;
  for (int64_t m = threadIdx.x; m < M; m += kThreads) {
    s += rowLoss[m];
    if (targets && (targets[m] < 0 || int64_t(targets[m]) >= R)) bad += 1.0;
  }
  const double total = blockSum(s, red);
  const double badRows = blockSum(bad, red);
  if (threadIdx.x == 0 && badRows == 0.0) {
    const double mean = M > 0 ? total / double(M) : 0.0;
    loss[0] += float(scale * mean);
  }
}

// cross_entropy_bwd: dlogits = (softmax(x) - onehot(target)) · scale on the first R columns, 0 on the
// padding columns [R, V). dlogits may alias logits: a row is read in full (max, sum) before any thread
// writes it, and each element is then read and written by one thread.
__global__ void crossEntropyBackwardKernel(FloatRef logits, const int32_t* targets, FloatRef dlogits, int64_t M,
                                           int64_t V, int64_t R, float scale, int* deviceError) {
  __shared__ float redF[kThreads];
  __shared__ double redD[kThreads];
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const int64_t t = targets[m];
    if (t < 0 || t >= R) {
      if (threadIdx.x == 0) reportBadTarget(deviceError);
      continue;
    }
    const FloatRef x = logits.at(m * V);
    const FloatRef d = dlogits.at(m * V);
    const float mx = rowMax(x, R, redF);
    const double inv = 1.0 / rowSumExp(x, R, mx, redD);
    for (int64_t j = threadIdx.x; j < R; j += kThreads) {
      const double p = exp(double(x[j] - mx)) * inv;
      d.set(j, static_cast<float>((p - (j == t ? 1.0 : 0.0)) * double(scale)));
    }
    for (int64_t j = R + threadIdx.x; j < V; j += kThreads) d.set(j, 0.0f);
  }
}

// dw[i] = (accumulate ? dw[i] : 0) + acc[i], rounded once into dw's dtype.
__global__ void addWeightGradKernel(FloatRef dw, const float* acc, int64_t n, bool accumulate) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dw.set(i, accumulate ? dw[i] + acc[i] : acc[i]);
}

// cross_entropy_max: rowMaxOut[m] = max over the shard's first n (real) columns, -inf for n = 0; a
// target outside [0, globalR) is reported.
__global__ void crossEntropyShardMaxKernel(FloatRef logits, const int32_t* targets, double* rowMaxOut, int64_t M,
                                           int64_t V, int64_t n, int64_t globalR, int* deviceError) {
  __shared__ float red[kThreads];
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const int64_t t = targets[m];
    if (t < 0 || t >= globalR) {
      if (threadIdx.x == 0) reportBadTarget(deviceError);
      continue;
    }
    const float mx = rowMax(logits.at(m * V), n, red);
    if (threadIdx.x == 0) rowMaxOut[m] = n > 0 ? double(mx) : -INFINITY;
  }
}

// cross_entropy_sums: rowSums[m] = Σ_{j<n} exp(double(x_j - float(rowMax[m]))); rowSums[M + m] = the
// target's logit where this shard holds it (local column in [0, n)), else 0.
__global__ void crossEntropyShardSumsKernel(FloatRef logits, const int32_t* targets, const double* rowMaxIn,
                                            double* rowSums, int64_t M, int64_t V, int64_t n, int64_t begin) {
  __shared__ double red[kThreads];
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const FloatRef x = logits.at(m * V);
    const float gmax = float(rowMaxIn[m]);  // a float that went through double: exact
    const double sum = rowSumExp(x, n, gmax, red);
    if (threadIdx.x == 0) {
      rowSums[m] = sum;
      const int64_t local = int64_t(targets[m]) - begin;
      rowSums[M + m] = local >= 0 && local < n ? double(x[local]) : 0.0;
    }
  }
}

// Vocabulary-parallel cross_entropy_bwd: dlogits = (exp(x - float(rowMax)) / rowSums - onehot) · scale
// on the shard's n real columns, 0 on the rest; a target outside [0, globalR) is reported (row left).
__global__ void crossEntropyBackwardVocabParallelKernel(FloatRef logits, const int32_t* targets, const double* rowMaxIn,
                                                        const double* rowSums, FloatRef dlogits, int64_t M, int64_t V,
                                                        int64_t n, int64_t begin, int64_t globalR, float scale,
                                                        int* deviceError) {
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const int64_t t = targets[m];
    if (t < 0 || t >= globalR) {
      if (threadIdx.x == 0) reportBadTarget(deviceError);
      continue;
    }
    const FloatRef x = logits.at(m * V);
    const FloatRef d = dlogits.at(m * V);
    const float gmax = float(rowMaxIn[m]);
    const double inv = 1.0 / rowSums[m];
    const int64_t target = t - begin;
    for (int64_t j = threadIdx.x; j < n; j += kThreads) {
      const double p = exp(double(x[j] - gmax)) * inv;
      d.set(j, static_cast<float>((p - (j == target ? 1.0 : 0.0)) * double(scale)));
    }
    for (int64_t j = n + threadIdx.x; j < V; j += kThreads) d.set(j, 0.0f);
  }
}

// ---- Host-side checks, as the CPU's -----------------------------------------------------------------------

Status checkRealVocab(int64_t realV, int64_t V) {
  if (realV < 0 || realV > V)
    return Status::invalidArgument("cross_entropy: real vocabulary " + std::to_string(realV) + " is outside [1, " +
                                   std::to_string(V) + "] (the logits' columns)");
  return Status::ok();
}

Status checkShard(const VocabShard& shard) {
  if (shard.count < 1 || shard.index < 0 || shard.index >= shard.count)
    return Status::invalidArgument("cross_entropy: vocabulary shard " + std::to_string(shard.index) + " of " +
                                   std::to_string(shard.count) + " is invalid");
  return Status::ok();
}

// The shard's local columns [0, n) that hold real vocabulary.
int64_t realColumns(int64_t V, int64_t realV, const VocabShard& shard) {
  if (realV <= 0) return V;
  const int64_t n = realV - shard.index * V;
  return n < 0 ? 0 : n > V ? V : n;
}

Status needShard(const LossParams& p, const char* op) {
  if (!p.vocabShard) return Status::invalidArgument(std::string(op) + ": no vocabulary shard (attr shard_axis)");
  return Status::ok();
}

Status needRole(const void* ptr, const char* op, const char* role) {
  if (!ptr) return Status::invalidArgument(std::string(op) + ": role " + role + " is required here");
  return Status::ok();
}

Status needScratch(const CudaKernelContext& ctx, const char* op) {
  if (!ctx.scratch) return Status::internal(std::string(op) + ": no device scratch in the CUDA kernel context");
  return Status::ok();
}

unsigned rowBlocks(int64_t M) { return gridFor(M, 1); }  // one block a row, capped (grid-stride)

GemmDType gemmType(const FloatRef& r) { return r.bf16 ? GemmDType::kBF16 : GemmDType::kF32; }

// One of the classifier's GEMMs on a chunk's operands (x rows, W, the chunk's dlogits as dy).
Status classifierGemm(const GemmProblem& g, FloatRef x, FloatRef w, FloatRef dy, void* out,
                      const CudaKernelContext& ctx) {
  auto of = [&](GemmOperand o) -> const void* {
    return o == GemmOperand::kX ? x.p : o == GemmOperand::kW ? w.p : dy.p;
  };
  GemmProblem problem = g;
  problem.tf32 = ctx.tf32;
  return ctx.gemm->run(problem, of(g.a), of(g.b), out, nullptr, nullptr, ctx.stream, ctx.deterministic)
      .withContext("classifier");
}

Status classifier(const KernelCall& c, const ClassifierParams& p, const CudaKernelContext& ctx) {
  const LinearParams& lin = p.linear;
  const int64_t M = lin.M, K = lin.K, N = lin.N;
  LLCDIST_RETURN_IF_ERROR(checkRealVocab(p.realVocab, N));
  if (p.chunk < 1) return Status::invalidArgument("classifier: chunk " + std::to_string(p.chunk) + " is not >= 1");
  for (const auto& [role, n] : {std::pair<const char*, int64_t>{"x", M * K},
                                {"w", N * K},
                                {"dx", M * K},
                                {"dw", N * K},
                                {"logits", p.chunk * N}})
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, role, n));
  if (!ctx.gemm) return Status::internal("classifier: no GEMM runner in the CUDA kernel context");
  LLCDIST_RETURN_IF_ERROR(needScratch(ctx, "classifier"));
  if (M <= 0) return Status::ok();
  StatusOr<void*> scratch = ctx.scratch->get(M * int64_t(sizeof(double)));
  if (!scratch.isOk()) return scratch.status().withContext("classifier");
  double* rowLoss = static_cast<double*>(*scratch);
  const FloatRef x = floatRef(c, "x"), w = floatRef(c, "w"), logits = floatRef(c, "logits"), dx = floatRef(c, "dx"),
                 dw = floatRef(c, "dw");
  float* dwAcc = c.F("dw_acc");
  const int32_t* targets = c.I("targets");
  const int64_t R = p.realVocab > 0 ? p.realVocab : N;
  for (int64_t r = 0; r < M; r += p.chunk) {
    LinearParams rows = lin;
    rows.M = M - r < p.chunk ? M - r : p.chunk;
    const FloatRef xr = x.at(r * K);
    LLCDIST_RETURN_IF_ERROR(
        classifierGemm(linearForwardGemm(rows, false, gemmType(x), gemmType(logits)), xr, w, {}, logits.p, ctx));
    crossEntropyRowKernel<true><<<rowBlocks(rows.M), kThreads, 0, ctx.stream>>>(
        logits, targets + r, rowLoss + r, rows.M, N, R, float(p.gradScale), ctx.deviceError);
    LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("classifier (loss and gradient)", ctx.rank));
    rows.accumulate = false;
    LLCDIST_RETURN_IF_ERROR(classifierGemm(linearBackwardInputGemm(rows, gemmType(logits), gemmType(dx)), {}, w, logits,
                                           dx.at(r * K).p, ctx));
    rows.accumulate = r > 0 || (!dwAcc && lin.accumulate);
    const GemmDType outType = dwAcc ? GemmDType::kF32 : gemmType(dw);
    LLCDIST_RETURN_IF_ERROR(classifierGemm(linearBackwardWeightGemm(rows, gemmType(logits), outType), xr, {}, logits,
                                           dwAcc ? static_cast<void*>(dwAcc) : dw.p, ctx));
  }
  if (dwAcc) {
    addWeightGradKernel<<<gridFor(N * K, kThreads), kThreads, 0, ctx.stream>>>(dw, dwAcc, N * K, lin.accumulate);
    LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("classifier (weight gradient)", ctx.rank));
  }
  crossEntropyMeanKernel<<<1, kThreads, 0, ctx.stream>>>(rowLoss, targets, R, M, p.scale, c.F("loss"));
  return LLCDIST_CUDA_LAUNCHED("classifier (mean loss)", ctx.rank);
}

}  // namespace

void registerCudaLossKernels(CudaKernelTable& t) {
  using K = schema::OpKind;
  using P = LossParams;
  addCudaKernel<P>(t, K::kCrossEntropyFwd, [](const KernelCall& c, const P& p, const CudaKernelContext& ctx) -> Status {
    // The synchronous checks first (as the CPU: real_vocab for the plain op, none for the
    // vocabulary-parallel one, which reads only the reduced statistics).
    if (p.vocabShard) {
      LLCDIST_RETURN_IF_ERROR(needRole(c.D("row_max"), "cross_entropy_fwd", "row_max"));
      LLCDIST_RETURN_IF_ERROR(needRole(c.D("row_sums"), "cross_entropy_fwd", "row_sums"));
    } else {
      LLCDIST_RETURN_IF_ERROR(checkRealVocab(p.realVocab, p.V));
    }
    LLCDIST_RETURN_IF_ERROR(needScratch(ctx, "cross_entropy_fwd"));
    const int64_t M = p.M > 0 ? p.M : 0;
    StatusOr<void*> scratch = ctx.scratch->get((M > 0 ? M : 1) * int64_t(sizeof(double)));
    if (!scratch.isOk()) return scratch.status().withContext("cross_entropy_fwd");
    double* rowLoss = static_cast<double*>(*scratch);
    const int32_t* targets = nullptr;  // checked again by the mean kernel (the plain op only)
    int64_t R = 0;
    if (p.vocabShard) {
      if (M > 0) {
        crossEntropyVocabParallelRowLossKernel<<<gridFor(M, kThreads), kThreads, 0, ctx.stream>>>(
            c.D("row_max"), c.D("row_sums"), rowLoss, M);
        LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("cross_entropy_fwd (row losses)", ctx.rank));
      }
    } else {
      R = p.realVocab > 0 ? p.realVocab : p.V;
      targets = c.I("targets");
      if (M > 0) {
        crossEntropyRowKernel<false><<<rowBlocks(M), kThreads, 0, ctx.stream>>>(floatRef(c, "logits"), targets, rowLoss,
                                                                                M, p.V, R, 0.0f, ctx.deviceError);
        LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("cross_entropy_fwd (row losses)", ctx.rank));
      }
    }
    crossEntropyMeanKernel<<<1, kThreads, 0, ctx.stream>>>(rowLoss, targets, R, M, p.scale, c.F("loss"));
    return LLCDIST_CUDA_LAUNCHED("cross_entropy_fwd (mean)", ctx.rank);
  });
  addCudaKernel<P>(t, K::kCrossEntropyBwd, [](const KernelCall& c, const P& p, const CudaKernelContext& ctx) -> Status {
    if (p.vocabShard) {
      LLCDIST_RETURN_IF_ERROR(checkShard(*p.vocabShard));
      LLCDIST_RETURN_IF_ERROR(checkRealVocab(p.realVocab, p.V * p.vocabShard->count));
      LLCDIST_RETURN_IF_ERROR(needRole(c.D("row_max"), "cross_entropy_bwd", "row_max"));
      LLCDIST_RETURN_IF_ERROR(needRole(c.D("row_sums"), "cross_entropy_bwd", "row_sums"));
      if (p.M <= 0) return Status::ok();
      const int64_t globalR = p.realVocab > 0 ? p.realVocab : p.V * p.vocabShard->count;
      crossEntropyBackwardVocabParallelKernel<<<rowBlocks(p.M), kThreads, 0, ctx.stream>>>(
          floatRef(c, "logits"), c.I("targets"), c.D("row_max"), c.D("row_sums"), floatRef(c, "dlogits"), p.M, p.V,
          realColumns(p.V, p.realVocab, *p.vocabShard), p.vocabShard->index * p.V, globalR, float(p.scale),
          ctx.deviceError);
      return LLCDIST_CUDA_LAUNCHED("cross_entropy_bwd", ctx.rank);
    }
    LLCDIST_RETURN_IF_ERROR(checkRealVocab(p.realVocab, p.V));
    if (p.M <= 0) return Status::ok();
    const int64_t R = p.realVocab > 0 ? p.realVocab : p.V;
    crossEntropyBackwardKernel<<<rowBlocks(p.M), kThreads, 0, ctx.stream>>>(
        floatRef(c, "logits"), c.I("targets"), floatRef(c, "dlogits"), p.M, p.V, R, float(p.scale), ctx.deviceError);
    return LLCDIST_CUDA_LAUNCHED("cross_entropy_bwd", ctx.rank);
  });
  addCudaKernel<ClassifierParams>(t, K::kClassifier, "cublaslt", classifier);
  addCudaKernel<P>(t, K::kCrossEntropyMax, [](const KernelCall& c, const P& p, const CudaKernelContext& ctx) -> Status {
    LLCDIST_RETURN_IF_ERROR(needShard(p, "cross_entropy_max"));
    LLCDIST_RETURN_IF_ERROR(checkShard(*p.vocabShard));
    LLCDIST_RETURN_IF_ERROR(checkRealVocab(p.realVocab, p.V * p.vocabShard->count));
    if (p.M <= 0) return Status::ok();
    const int64_t globalR = p.realVocab > 0 ? p.realVocab : p.V * p.vocabShard->count;
    crossEntropyShardMaxKernel<<<rowBlocks(p.M), kThreads, 0, ctx.stream>>>(
        floatRef(c, "logits"), c.I("targets"), c.D("row_max"), p.M, p.V, realColumns(p.V, p.realVocab, *p.vocabShard),
        globalR, ctx.deviceError);
    return LLCDIST_CUDA_LAUNCHED("cross_entropy_max", ctx.rank);
  });
  addCudaKernel<P>(t, K::kCrossEntropySums,
                   [](const KernelCall& c, const P& p, const CudaKernelContext& ctx) -> Status {
                     LLCDIST_RETURN_IF_ERROR(needShard(p, "cross_entropy_sums"));
                     LLCDIST_RETURN_IF_ERROR(checkShard(*p.vocabShard));
                     LLCDIST_RETURN_IF_ERROR(checkRealVocab(p.realVocab, p.V * p.vocabShard->count));
                     if (p.M <= 0) return Status::ok();
                     crossEntropyShardSumsKernel<<<rowBlocks(p.M), kThreads, 0, ctx.stream>>>(
                         floatRef(c, "logits"), c.I("targets"), c.D("row_max"), c.D("row_sums"), p.M, p.V,
                         realColumns(p.V, p.realVocab, *p.vocabShard), p.vocabShard->index * p.V);
                     return LLCDIST_CUDA_LAUNCHED("cross_entropy_sums", ctx.rank);
                   });
}

}  // namespace llcdist::rt::cuda
