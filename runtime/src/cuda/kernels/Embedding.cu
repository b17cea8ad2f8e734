// The embedding family's CUDA kernels (the CPU reference: src/kernels/Embedding.cpp): token embedding
// forward (a gather, vocabulary-parallel with a VocabShard) and weight gradient (a scatter-add without
// atomics: one thread per column h, looping over the rows m = 0..M-1 in the CPU's order), GPT-2's
// learned positions forward and weight gradient (one thread per (s, h), summing over b in order); and
// their kernel-table entries. An id outside the global vocabulary cannot be reported synchronously: the
// kernels store kDeviceIdOutOfRange into the context's deviceError (the forward writes a zero row).
#include "llcdist/runtime/KernelChecks.h"
#include "cuda/CudaKernels.h"

#include <string>

namespace llcdist::rt::cuda {
namespace {

constexpr int kThreads = 256;

#define LLCDIST_GRID_STRIDE(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// out[m, h] = table[ids[m] - begin, h] for an id of this shard's rows [begin, begin + V), 0 for another
// shard's id; an id outside [0, global) is an error (its row is written as zeros).
__global__ void embeddingFwdKernel(const int32_t* ids, const float* table, float* out, int64_t M, int64_t V,
                                   int64_t H, int64_t begin, int64_t global, int* deviceError) {
  LLCDIST_GRID_STRIDE(i, M * H) {
    const int64_t m = i / H, h = i - m * H;
    const int64_t id = ids[m];
    if (id < 0 || id >= global) {
      if (deviceError) *deviceError = kDeviceIdOutOfRange;
      out[i] = 0.0f;
      continue;
    }
    const int64_t local = id - begin;
    out[i] = local >= 0 && local < V ? table[local * H + h] : 0.0f;  // another shard's row: this shard adds 0
  }
}

// dtable[ids[m] - begin, h] += dout[m, h] for m = 0..M-1 in order (the CPU's order, so the sums are
// its bits); thread h owns column h of the table, so no two threads write the same element.
__global__ void embeddingBwdKernel(const int32_t* ids, const float* dout, float* dtable, int64_t M, int64_t V,
                                   int64_t H, int64_t begin, int64_t global, int* deviceError) {
  LLCDIST_GRID_STRIDE(h, H) {
    for (int64_t m = 0; m < M; ++m) {
      const int64_t id = ids[m];
      if (id < 0 || id >= global) {
        if (deviceError) *deviceError = kDeviceIdOutOfRange;
        continue;
      }
      const int64_t local = id - begin;
      if (local < 0 || local >= V) continue;  // another shard's row
      dtable[local * H + h] += dout[m * H + h];
    }
  }
}

// y[b, s, h] = x[b, s, h] + wpe[posBegin + s, h] (y may alias x).
__global__ void posEmbeddingFwdKernel(const float* x, const float* wpe, float* y, int64_t B, int64_t S, int64_t H,
                                      int64_t posBegin) {
  LLCDIST_GRID_STRIDE(i, B * S * H) {
    const int64_t bs = i / H, h = i - bs * H;
    const int64_t s = bs % S;
    y[i] = x[i] + wpe[(posBegin + s) * H + h];
  }
}

// dwpe[posBegin + s, h] += dy[b, s, h] for b = 0..B-1 in order (the CPU's order); one thread per (s, h).
__global__ void posEmbeddingBwdKernel(const float* dy, float* dwpe, int64_t B, int64_t S, int64_t H,
                                      int64_t posBegin) {
  LLCDIST_GRID_STRIDE(i, S * H) {
    float* w = dwpe + posBegin * H + i;
    float acc = *w;
    for (int64_t b = 0; b < B; ++b) acc += dy[b * S * H + i];
    *w = acc;
  }
}

#undef LLCDIST_GRID_STRIDE


using P = EmbeddingParams;
using Ctx = CudaKernelContext;

Status embeddingFwd(const KernelCall& c, const P& p, const Ctx& ctx) {
  LLCDIST_RETURN_IF_ERROR(checkVocabShard(p.vocabShard));
  const int64_t n = p.M * p.H;
  if (n == 0) return Status::ok();
  embeddingFwdKernel<<<gridFor(n, kThreads), kThreads, 0, ctx.stream>>>(
      c.I("ids"), c.F("table"), c.F("out"), p.M, p.V, p.H, p.vocabShard.index * p.V, p.V * p.vocabShard.count,
      ctx.deviceError);
  return LLCDIST_CUDA_LAUNCHED("embedding_fwd", ctx.rank);
}

Status embeddingBwd(const KernelCall& c, const P& p, const Ctx& ctx) {
  LLCDIST_RETURN_IF_ERROR(checkVocabShard(p.vocabShard));
  float* dtable = c.F("dtable");
  if (!p.accumulate && p.V * p.H > 0)
    LLCDIST_CUDA_TRY(cudaMemsetAsync(dtable, 0, size_t(p.V * p.H) * 4, ctx.stream), ctx.rank);
  if (p.M == 0 || p.H == 0) return Status::ok();
  embeddingBwdKernel<<<gridFor(p.H, kThreads), kThreads, 0, ctx.stream>>>(
      c.I("ids"), c.F("dout"), dtable, p.M, p.V, p.H, p.vocabShard.index * p.V, p.V * p.vocabShard.count,
      ctx.deviceError);
  return LLCDIST_CUDA_LAUNCHED("embedding_bwd_weight", ctx.rank);
}

Status posEmbeddingFwd(const KernelCall& c, const P& p, const Ctx& ctx) {
  LLCDIST_RETURN_IF_ERROR(checkPositionRange(p.S, p.P, p.posBegin));
  const int64_t n = p.B * p.S * p.H;
  if (n == 0) return Status::ok();
  posEmbeddingFwdKernel<<<gridFor(n, kThreads), kThreads, 0, ctx.stream>>>(c.F("x"), c.F("wpe"), c.F("y"), p.B,
                                                                           p.S, p.H, p.posBegin);
  return LLCDIST_CUDA_LAUNCHED("pos_embedding_fwd", ctx.rank);
}

Status posEmbeddingBwd(const KernelCall& c, const P& p, const Ctx& ctx) {
  LLCDIST_RETURN_IF_ERROR(checkPositionRange(p.S, p.P, p.posBegin));
  float* dwpe = c.F("dwpe");
  // accumulate=false: every row is zeroed first, so rows outside [posBegin, posBegin + S) end at 0 and
  // the rows inside sum from 0 (the CPU's fill then add).
  if (!p.accumulate && p.P * p.H > 0)
    LLCDIST_CUDA_TRY(cudaMemsetAsync(dwpe, 0, size_t(p.P * p.H) * 4, ctx.stream), ctx.rank);
  const int64_t n = p.S * p.H;
  if (n == 0) return Status::ok();
  posEmbeddingBwdKernel<<<gridFor(n, kThreads), kThreads, 0, ctx.stream>>>(c.F("dy"), dwpe, p.B, p.S, p.H,
                                                                           p.posBegin);
  return LLCDIST_CUDA_LAUNCHED("pos_embedding_bwd_weight", ctx.rank);
}

}  // namespace

// ---- CUDA kernel-table entries (CudaKernels.h) -----------------------------------------------------
void registerCudaEmbeddingKernels(CudaKernelTable& t) {
  using K = schema::OpKind;
  addCudaKernel<P>(t, K::kEmbeddingFwd, embeddingFwd);
  addCudaKernel<P>(t, K::kEmbeddingBwdWeight, embeddingBwd);
  addCudaKernel<P>(t, K::kPosEmbeddingFwd, posEmbeddingFwd);
  addCudaKernel<P>(t, K::kPosEmbeddingBwdWeight, posEmbeddingBwd);
}

}  // namespace llcdist::rt::cuda
