// The layout family's CUDA kernels (the CPU reference: src/kernels/Layout.cpp): zero (any dtype, a
// memset per buffer), split_fwd / split_bwd (column blocks of a row-major matrix, one copy kernel per
// part) and shard_slice (ZeRO: this rank's block of every row, zero past `total`); and their
// kernel-table entries.
#include "llcdist/runtime/KernelChecks.h"
#include "cuda/CudaKernels.h"

#include <algorithm>
#include <string>

namespace llcdist::rt::cuda {
namespace {

constexpr int kThreads = 256;

// dst[r, j] = src[r, j] for r < rows, j < w, with row strides srcStride / dstStride (elements).
__global__ void copyColumns(const float* src, int64_t srcStride, float* dst, int64_t dstStride, int64_t rows,
                            int64_t w) {
  const int64_t n = rows * w;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / w, j = i - r * w;
    dst[r * dstStride + j] = src[r * srcStride + j];
  }
}

// y[o, k] = x[o, begin + k] for k < real, 0 for real <= k < inner; x has `total` elements a row.
__global__ void shardSliceKernel(const float* x, float* y, int64_t outer, int64_t inner, int64_t total,
                                 int64_t begin, int64_t real) {
  const int64_t n = outer * inner;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = i / inner, k = i - o * inner;
    y[i] = k < real ? x[o * total + begin + k] : 0.0f;
  }
}

using P = LayoutParams;
using Ctx = CudaKernelContext;

Status zero(const KernelCall& c, const P&, const Ctx& ctx) {
  const size_t x = c.role("x");
  for (size_t k = 0; k < c.args[x].size(); ++k) {
    const int64_t bytes = c.argElems[x][k] * schema::elemTypeSize(c.type(x, k));
    if (bytes > 0) LLCDIST_CUDA_TRY(cudaMemsetAsync(c.args[x][k], 0, size_t(bytes), ctx.stream), ctx.rank);
  }
  return Status::ok();
}

// x [rows, Σsizes] <-> parts [rows, sizes[p]].
Status split(const KernelCall& c, const P& p, const Ctx& ctx) {
  const bool fwd = c.kind == schema::OpKind::kSplitFwd;
  const char* what = fwd ? "split_fwd" : "split_bwd";
  const std::vector<void*>& parts = c.list(fwd ? "outs" : "douts");
  if (parts.size() != p.sizes.size())
    return Status::internal(std::string(what) + ": " + std::to_string(parts.size()) + " parts but " +
                            std::to_string(p.sizes.size()) + " sizes");
  float* whole = c.F(fwd ? "x" : "dx");
  int64_t width = 0;
  for (int64_t s : p.sizes) width += s;
  int64_t col = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    float* part = static_cast<float*>(parts[i]);
    const int64_t w = p.sizes[i];
    const int64_t n = p.rows * w;
    if (n > 0) {
      if (fwd)
        copyColumns<<<gridFor(n, kThreads), kThreads, 0, ctx.stream>>>(whole + col, width, part, w, p.rows, w);
      else
        copyColumns<<<gridFor(n, kThreads), kThreads, 0, ctx.stream>>>(part, w, whole + col, width, p.rows, w);
      LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED(what, ctx.rank));
    }
    col += w;
  }
  return Status::ok();
}

// y[o, k] = x[o, member·inner + k]: this rank's block of every row. With padded blocks x has `total`
// elements a row and y's elements past them are zero.
Status shardSlice(const KernelCall& c, const P& p, const Ctx& ctx) {
  LLCDIST_ASSIGN_OR_RETURN(const int64_t total, checkShardSlice(c, p));
  const int64_t begin = p.member * p.inner;
  const int64_t real = std::clamp<int64_t>(total - begin, 0, p.inner);
  const int64_t count = p.outer * p.inner;
  if (count == 0) return Status::ok();
  shardSliceKernel<<<gridFor(count, kThreads), kThreads, 0, ctx.stream>>>(c.F("x"), c.F("y"), p.outer, p.inner,
                                                                          total, begin, real);
  return LLCDIST_CUDA_LAUNCHED("shard_slice", ctx.rank);
}

}  // namespace

// ---- CUDA kernel-table entries (CudaKernels.h) -----------------------------------------------------
void registerCudaLayoutKernels(CudaKernelTable& t) {
  using K = schema::OpKind;
  addCudaKernel<P>(t, K::kZero, zero);
  addCudaKernel<P>(t, K::kSplitFwd, split);
  addCudaKernel<P>(t, K::kSplitBwd, split);
  addCudaKernel<P>(t, K::kShardSlice, shardSlice);
}

}  // namespace llcdist::rt::cuda
