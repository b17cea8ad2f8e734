// The norm family's CUDA kernels (the CPU reference: src/kernels/Norm.cpp): LayerNorm (torch
// nn.LayerNorm) and RMSNorm (HF LlamaRMSNorm), forward, input gradient and weight gradients, and the
// fused forms (add_*_norm_fwd: the residual add in the forward's row pass; *_norm_bwd: the weight
// gradients' passes, then the input gradient with the residual's add); and their kernel-table entries.
//  - Forward and input gradient: one block per row; each thread sums its strided columns in double and
//    the block adds the threads' sums with a fixed tree (blockSum), so the row statistics are the CPU's
//    double sums up to their order, and a run repeats bit for bit.
//  - Weight gradients (sums over the M rows) without atomics, in two passes: the rows are cut into at
//    most kMaxChunks chunks and one thread per (chunk, h) sums its chunk's rows in order, in double,
//    into scratch partials; then one thread per column h adds its chunks' partials in chunk order.
#include "cuda/CudaKernels.h"
#include "cuda/kernels/BlockSum.cuh"
#include "cuda/kernels/FloatRef.cuh"

#include <algorithm>

namespace llcdist::rt::cuda {
namespace {

constexpr int kThreads = 256;             // elementwise grids
constexpr int kRowThreads = 256;          // threads of a row's block: a power of two (blockSum's tree)
constexpr int64_t kMaxRowBlocks = 65535;  // row blocks in flight; each loops over rows m += gridDim.x
constexpr int64_t kMinChunkRows = 32;     // weight gradients: rows a chunk sums at least ...
constexpr int64_t kMaxChunks = 128;       // ... and at most this many chunks (bounds the scratch)

#define LLCDIST_GRID_STRIDE(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

static_assert(kRowThreads == kBlockSumThreads, "a row's block is blockSum's block (BlockSum.cuh)");

// ---- LayerNorm ------------------------------------------------------------------------------------
// x, gamma, beta, y, dy, dx are f32 or bf16 (FloatRef.cuh); mean and rstd f32.

// With a (add_layer_norm_fwd): x is the sum, first written as a + b; each thread then reads back the
// elements it wrote (the same h), as stored (rounded where x is bf16).
__device__ __forceinline__ void addRow(FloatRef a, FloatRef b, FloatRef sumRow, int64_t m, int64_t H) {
  if (!a) return;
  const FloatRef ar = a.at(m * H), br = b.at(m * H);
  for (int64_t h = threadIdx.x; h < H; h += blockDim.x) sumRow.set(h, ar[h] + br[h]);
}

__global__ void layerNormFwdKernel(FloatRef x, FloatRef gamma, FloatRef beta, FloatRef y, float* mean, float* rstd,
                                   int64_t M, int64_t H, float eps, FloatRef a, FloatRef b) {
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const FloatRef xr = x.at(m * H);
    addRow(a, b, xr, m, H);
    double sum = 0.0;
    for (int64_t h = threadIdx.x; h < H; h += blockDim.x) sum += xr[h];
    const double mu = blockSum(sum) / double(H);
    double var = 0.0;
    for (int64_t h = threadIdx.x; h < H; h += blockDim.x) var += (xr[h] - mu) * (xr[h] - mu);
    var = blockSum(var) / double(H);
    const float mu32 = static_cast<float>(mu);
    const float rs = static_cast<float>(1.0 / sqrt(var + double(eps)));
    const FloatRef yr = y.at(m * H);
    // No beta: no add (MPT's LayerNorm); no gamma (and no beta): no affine transform, the CPU's same bits.
    for (int64_t h = threadIdx.x; h < H; h += blockDim.x)
      yr.set(h, gamma && beta ? (xr[h] - mu32) * rs * gamma[h] + beta[h]
                : gamma       ? (xr[h] - mu32) * rs * gamma[h]
                              : (xr[h] - mu32) * rs);
    if (threadIdx.x == 0) {
      mean[m] = mu32;
      rstd[m] = rs;
    }
  }
}

// The input gradient v of element i as the fused backward stores it (the CPU's withResidual): with a
// residual, dresidual[i] + v, v first rounded to bf16 when the unfused op stored it so (roundBf16).
__device__ __forceinline__ float withResidual(float v, FloatRef dresidual, int64_t i, bool roundBf16) {
  if (!dresidual) return v;
  return dresidual[i] + (roundBf16 ? bf16BitsToFloat(floatToBf16Bits(v)) : v);
}

// dx = rstd · (g - mean(g) - xhat·mean(g·xhat)) with g = dy·gamma, dy without gamma (plus dresidual:
// withResidual).
__global__ void layerNormBwdInputKernel(FloatRef dy, FloatRef x, FloatRef gamma, const float* mean, const float* rstd,
                                        FloatRef dx, int64_t M, int64_t H, FloatRef dresidual, bool roundBf16) {
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const FloatRef xr = x.at(m * H);
    const FloatRef dyr = dy.at(m * H);
    const float mu = mean[m], rs = rstd[m];
    double sumG = 0.0, sumGX = 0.0;
    for (int64_t h = threadIdx.x; h < H; h += blockDim.x) {
      const double g = gamma ? double(dyr[h]) * gamma[h] : double(dyr[h]);
      sumG += g;
      sumGX += g * ((xr[h] - mu) * rs);
    }
    sumG = blockSum(sumG);
    sumGX = blockSum(sumGX);
    const float meanG = static_cast<float>(sumG / double(H));
    const float meanGX = static_cast<float>(sumGX / double(H));
    const FloatRef dxr = dx.at(m * H);
    for (int64_t h = threadIdx.x; h < H; h += blockDim.x) {
      const float xhat = (xr[h] - mu) * rs;
      const float gh = gamma ? dyr[h] * gamma[h] : dyr[h];
      dxr.set(h, withResidual(rs * (gh - meanG - xhat * meanGX), dresidual, m * H + h, roundBf16));
    }
  }
}

// Partials j = chunk·H + h: dgPart = Σ dy·xhat, dbPart = Σ dy over the chunk's rows, in row order.
__global__ void layerNormWeightPartials(FloatRef dy, FloatRef x, const float* mean, const float* rstd, double* dgPart,
                                        double* dbPart, int64_t M, int64_t H, int64_t chunkRows, int64_t chunks) {
  LLCDIST_GRID_STRIDE(j, chunks * H) {
    const int64_t chunk = j / H, h = j - chunk * H;
    const int64_t m0 = chunk * chunkRows, m1 = m0 + chunkRows < M ? m0 + chunkRows : M;
    double dg = 0.0, db = 0.0;
    for (int64_t m = m0; m < m1; ++m) {
      const float xhat = (x[m * H + h] - mean[m]) * rstd[m];
      const float d = dy[m * H + h];
      dg += double(d) * xhat;
      db += d;
    }
    dgPart[j] = dg;
    dbPart[j] = db;
  }
}

// ---- RMSNorm --------------------------------------------------------------------------------------
// x, weight, y, dy, dx are f32 or bf16; rstd f32. weightOffset (Gemma's RMSNorm, attr weight_offset):
// the weight used is weightOffset + w in f32, w itself when the offset is 0 (the CPU's rmsNormWeight).

__device__ __forceinline__ float rmsWeight(float w, float weightOffset) {
  return weightOffset == 0.0f ? w : weightOffset + w;
}

__global__ void rmsNormFwdKernel(FloatRef x, FloatRef weight, FloatRef y, float* rstd, int64_t M, int64_t H, float eps,
                                 FloatRef a, FloatRef b, float weightOffset) {
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const FloatRef xr = x.at(m * H);
    addRow(a, b, xr, m, H);
    double ss = 0.0;
    for (int64_t h = threadIdx.x; h < H; h += blockDim.x) {
      const float v = xr[h];
      ss += double(v) * v;
    }
    ss = blockSum(ss);
    const float rs = static_cast<float>(1.0 / sqrt(ss / double(H) + double(eps)));
    const FloatRef yr = y.at(m * H);
    for (int64_t h = threadIdx.x; h < H; h += blockDim.x)
      yr.set(h, rmsWeight(weight[h], weightOffset) * (xr[h] * rs));  // HF: weight * (x * rsqrt)
    if (threadIdx.x == 0) rstd[m] = rs;
  }
}

// dx = rstd · (g - xhat·mean(g·xhat)) with g = dy·weight, xhat = x·rstd.
__global__ void rmsNormBwdInputKernel(FloatRef dy, FloatRef x, FloatRef weight, const float* rstd, FloatRef dx,
                                      int64_t M, int64_t H, FloatRef dresidual, bool roundBf16, float weightOffset) {
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const FloatRef xr = x.at(m * H);
    const FloatRef dyr = dy.at(m * H);
    const float rs = rstd[m];
    double sumGX = 0.0;
    for (int64_t h = threadIdx.x; h < H; h += blockDim.x)
      sumGX += double(dyr[h]) * rmsWeight(weight[h], weightOffset) * (xr[h] * rs);
    sumGX = blockSum(sumGX);
    const float meanGX = static_cast<float>(sumGX / double(H));
    const FloatRef dxr = dx.at(m * H);
    for (int64_t h = threadIdx.x; h < H; h += blockDim.x)
      dxr.set(h, withResidual(rs * (dyr[h] * rmsWeight(weight[h], weightOffset) - (xr[h] * rs) * meanGX), dresidual,
                              m * H + h, roundBf16));
  }
}

// Partials j = chunk·H + h: Σ dy·(x·rstd) over the chunk's rows, in row order.
__global__ void rmsNormWeightPartials(FloatRef dy, FloatRef x, const float* rstd, double* dwPart, int64_t M, int64_t H,
                                      int64_t chunkRows, int64_t chunks) {
  LLCDIST_GRID_STRIDE(j, chunks * H) {
    const int64_t chunk = j / H, h = j - chunk * H;
    const int64_t m0 = chunk * chunkRows, m1 = m0 + chunkRows < M ? m0 + chunkRows : M;
    double dw = 0.0;
    for (int64_t m = m0; m < m1; ++m) dw += double(dy[m * H + h]) * (x[m * H + h] * rstd[m]);
    dwPart[j] = dw;
  }
}

// ---- Weight gradients' second pass ----------------------------------------------------------------

// out[h] = Σ_chunk part[chunk·H + h] in chunk order, added to out[h] when accumulate (as the CPU: the
// float gradient plus the double sum, rounded once).
__global__ void finishColumns(const double* part, int64_t chunks, int64_t H, FloatRef out, bool accumulate) {
  LLCDIST_GRID_STRIDE(h, H) {
    double s = 0.0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) s += part[chunk * H + h];
    out.set(h, static_cast<float>(accumulate ? out[h] + s : s));
  }
}

#undef LLCDIST_GRID_STRIDE

unsigned rowBlocks(int64_t M) { return unsigned(M < kMaxRowBlocks ? M : kMaxRowBlocks); }

// How the weight gradients cut the M rows: `chunks` chunks of `rows` rows (the last one shorter).
struct Chunks {
  int64_t rows = 1, chunks = 0;
};
Chunks chunksFor(int64_t M) {
  Chunks c;
  if (M <= 0) return c;
  const int64_t wanted = std::min<int64_t>((M + kMinChunkRows - 1) / kMinChunkRows, kMaxChunks);
  c.rows = (M + wanted - 1) / wanted;
  c.chunks = (M + c.rows - 1) / c.rows;
  return c;
}

using P = NormParams;
using Ctx = CudaKernelContext;

// The forward of a norm row kernel; `x` is the input role ("x", or "sum" of the fused add: then a and b
// are set).
Status layerNormFwdOf(const KernelCall& c, const P& p, const Ctx& ctx, const char* x, FloatRef a, FloatRef b) {
  if (p.M == 0) return Status::ok();
  layerNormFwdKernel<<<rowBlocks(p.M), kRowThreads, 0, ctx.stream>>>(floatRef(c, x), floatRef(c, "gamma"),
                                                                     floatRef(c, "beta"), floatRef(c, "y"), c.F("mean"),
                                                                     c.F("rstd"), p.M, p.H, float(p.eps), a, b);
  return LLCDIST_CUDA_LAUNCHED(schema::opName(c.kind).data(), ctx.rank);
}
Status layerNormFwd(const KernelCall& c, const P& p, const Ctx& ctx) { return layerNormFwdOf(c, p, ctx, "x", {}, {}); }
Status addLayerNormFwd(const KernelCall& c, const P& p, const Ctx& ctx) {
  return layerNormFwdOf(c, p, ctx, "sum", floatRef(c, "a"), floatRef(c, "b"));
}

Status layerNormBwdInput(const KernelCall& c, const P& p, const Ctx& ctx) {
  if (p.M == 0) return Status::ok();
  layerNormBwdInputKernel<<<rowBlocks(p.M), kRowThreads, 0, ctx.stream>>>(
      floatRef(c, "dy"), floatRef(c, "x"), floatRef(c, "gamma"), c.F("mean"), c.F("rstd"), floatRef(c, "dx"), p.M, p.H,
      floatRef(c, "dresidual"), c.storedBf16("dx"));
  return LLCDIST_CUDA_LAUNCHED(schema::opName(c.kind).data(), ctx.rank);
}

Status layerNormBwdWeight(const KernelCall& c, const P& p, const Ctx& ctx) {
  if (p.H == 0) return Status::ok();
  if (!ctx.scratch) return Status::internal(std::string(schema::opName(c.kind)) + " without device scratch");
  const Chunks ch = chunksFor(p.M);
  double* dgPart = nullptr;
  double* dbPart = nullptr;
  if (ch.chunks > 0) {
    LLCDIST_ASSIGN_OR_RETURN(void* scratch, ctx.scratch->get(2 * ch.chunks * p.H * int64_t(sizeof(double))));
    dgPart = static_cast<double*>(scratch);
    dbPart = dgPart + ch.chunks * p.H;
    layerNormWeightPartials<<<gridFor(ch.chunks * p.H, kThreads), kThreads, 0, ctx.stream>>>(
        floatRef(c, "dy"), floatRef(c, "x"), c.F("mean"), c.F("rstd"), dgPart, dbPart, p.M, p.H, ch.rows, ch.chunks);
    LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED(schema::opName(c.kind).data(), ctx.rank));
  }
  finishColumns<<<gridFor(p.H, kThreads), kThreads, 0, ctx.stream>>>(dgPart, ch.chunks, p.H, floatRef(c, "dgamma"),
                                                                     p.accumulate);
  LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED(schema::opName(c.kind).data(), ctx.rank));
  if (!floatRef(c, "dbeta")) return Status::ok();  // a LayerNorm without beta (MPT's)
  finishColumns<<<gridFor(p.H, kThreads), kThreads, 0, ctx.stream>>>(dbPart, ch.chunks, p.H, floatRef(c, "dbeta"),
                                                                     p.accumulate);
  return LLCDIST_CUDA_LAUNCHED(schema::opName(c.kind).data(), ctx.rank);
}

// layer_norm_bwd: the weight gradients first (they read dy and x, which dx may not overwrite: no alias),
// then the input gradient with the residual.
Status layerNormBwd(const KernelCall& c, const P& p, const Ctx& ctx) {
  if (floatRef(c, "dgamma"))  // none: a LayerNorm without gamma and beta (the input gradient and the add)
    LLCDIST_RETURN_IF_ERROR(layerNormBwdWeight(c, p, ctx));
  return layerNormBwdInput(c, p, ctx);
}

Status rmsNormFwdOf(const KernelCall& c, const P& p, const Ctx& ctx, const char* x, FloatRef a, FloatRef b) {
  if (p.M == 0) return Status::ok();
  rmsNormFwdKernel<<<rowBlocks(p.M), kRowThreads, 0, ctx.stream>>>(floatRef(c, x), floatRef(c, "weight"),
                                                                   floatRef(c, "y"), c.F("rstd"), p.M, p.H,
                                                                   float(p.eps), a, b, float(p.weightOffset));
  return LLCDIST_CUDA_LAUNCHED(schema::opName(c.kind).data(), ctx.rank);
}
Status rmsNormFwd(const KernelCall& c, const P& p, const Ctx& ctx) { return rmsNormFwdOf(c, p, ctx, "x", {}, {}); }
Status addRmsNormFwd(const KernelCall& c, const P& p, const Ctx& ctx) {
  return rmsNormFwdOf(c, p, ctx, "sum", floatRef(c, "a"), floatRef(c, "b"));
}

Status rmsNormBwdInput(const KernelCall& c, const P& p, const Ctx& ctx) {
  if (p.M == 0) return Status::ok();
  rmsNormBwdInputKernel<<<rowBlocks(p.M), kRowThreads, 0, ctx.stream>>>(
      floatRef(c, "dy"), floatRef(c, "x"), floatRef(c, "weight"), c.F("rstd"), floatRef(c, "dx"), p.M, p.H,
      floatRef(c, "dresidual"), c.storedBf16("dx"), float(p.weightOffset));
  return LLCDIST_CUDA_LAUNCHED(schema::opName(c.kind).data(), ctx.rank);
}

Status rmsNormBwdWeight(const KernelCall& c, const P& p, const Ctx& ctx) {
  if (p.H == 0) return Status::ok();
  if (!ctx.scratch) return Status::internal(std::string(schema::opName(c.kind)) + " without device scratch");
  const Chunks ch = chunksFor(p.M);
  double* dwPart = nullptr;
  if (ch.chunks > 0) {
    LLCDIST_ASSIGN_OR_RETURN(void* scratch, ctx.scratch->get(ch.chunks * p.H * int64_t(sizeof(double))));
    dwPart = static_cast<double*>(scratch);
    rmsNormWeightPartials<<<gridFor(ch.chunks * p.H, kThreads), kThreads, 0, ctx.stream>>>(
        floatRef(c, "dy"), floatRef(c, "x"), c.F("rstd"), dwPart, p.M, p.H, ch.rows, ch.chunks);
    LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED(schema::opName(c.kind).data(), ctx.rank));
  }
  finishColumns<<<gridFor(p.H, kThreads), kThreads, 0, ctx.stream>>>(dwPart, ch.chunks, p.H, floatRef(c, "dweight"),
                                                                     p.accumulate);
  return LLCDIST_CUDA_LAUNCHED(schema::opName(c.kind).data(), ctx.rank);
}

Status rmsNormBwd(const KernelCall& c, const P& p, const Ctx& ctx) {
  LLCDIST_RETURN_IF_ERROR(rmsNormBwdWeight(c, p, ctx));
  return rmsNormBwdInput(c, p, ctx);
}

}  // namespace

// ---- CUDA kernel-table entries (CudaKernels.h) -----------------------------------------------------
void registerCudaNormKernels(CudaKernelTable& t) {
  using K = schema::OpKind;
  addCudaKernel<P>(t, K::kLayerNormFwd, layerNormFwd);
  addCudaKernel<P>(t, K::kLayerNormBwdInput, layerNormBwdInput);
  addCudaKernel<P>(t, K::kLayerNormBwdWeight, layerNormBwdWeight);
  addCudaKernel<P>(t, K::kRmsNormFwd, rmsNormFwd);
  addCudaKernel<P>(t, K::kRmsNormBwdInput, rmsNormBwdInput);
  addCudaKernel<P>(t, K::kRmsNormBwdWeight, rmsNormBwdWeight);
  addCudaKernel<P>(t, K::kAddLayerNormFwd, addLayerNormFwd);
  addCudaKernel<P>(t, K::kAddRmsNormFwd, addRmsNormFwd);
  addCudaKernel<P>(t, K::kLayerNormBwd, layerNormBwd);
  addCudaKernel<P>(t, K::kRmsNormBwd, rmsNormBwd);
}

}  // namespace llcdist::rt::cuda
