// The layout family's CUDA kernels (the CPU reference: src/kernels/Layout.cpp): fill_zero (any dtype, a
// memset per buffer), split_fwd / split_bwd (column blocks of a row-major matrix, one copy kernel per
// part) and shard_slice (ZeRO: this rank's block of every row, zero past `total`); and their
// kernel-table entries. split and shard_slice copy elements of one dtype (f32 or bf16: their variant
// requires every float argument to share it, host/KernelVariants.h), 4 or 2 bytes each.
#include "llcdist/runtime/KernelChecks.h"
#include "cuda/CudaKernels.h"

#include <algorithm>
#include <string>

namespace llcdist::rt::cuda {
namespace {

constexpr int kThreads = 256;

// dst[r, j] = src[r, j] for r < rows, j < w, with row strides srcStride / dstStride (elements of T).
template <class T>
__global__ void copyColumns(const T* src, int64_t srcStride, T* dst, int64_t dstStride, int64_t rows, int64_t w) {
  const int64_t n = rows * w;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / w, j = i - r * w;
    dst[r * dstStride + j] = src[r * srcStride + j];
  }
}

// y[o, k] = x[o, begin + k] for k < real, 0 for real <= k < inner; x has `total` elements a row.
template <class T>
__global__ void shardSliceKernel(const T* x, T* y, int64_t outer, int64_t inner, int64_t total, int64_t begin,
                                 int64_t real) {
  const int64_t n = outer * inner;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = i / inner, k = i - o * inner;
    y[i] = k < real ? x[o * total + begin + k] : T(0);  // T(0): +0.0 in f32 and in bf16
  }
}

// One part of split_fwd (whole -> part) or split_bwd (part -> whole): columns [0, w) of `whole` (row
// stride `width`) and `part` (row stride w).
template <class T>
void copyPart(T* whole, int64_t width, T* part, int64_t w, int64_t rows, bool fwd, cudaStream_t stream) {
  const int64_t n = rows * w;
  if (fwd)
    copyColumns<<<gridFor(n, kThreads), kThreads, 0, stream>>>(whole, width, part, w, rows, w);
  else
    copyColumns<<<gridFor(n, kThreads), kThreads, 0, stream>>>(part, w, whole, width, rows, w);
}

// Whether the call's float arguments are bf16 (its variant gives them one dtype).
bool bf16Args(const KernelCall& c, const char* role) { return c.type(c.role(role)) == schema::ElemType::kBF16; }

using P = LayoutParams;
using Ctx = CudaKernelContext;

Status fillZero(const KernelCall& c, const P&, const Ctx& ctx) {
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
  const bool bf16 = bf16Args(c, fwd ? "x" : "dx");
  void* whole = c.ptr(c.role(fwd ? "x" : "dx"));
  int64_t width = 0;
  for (int64_t s : p.sizes) width += s;
  int64_t col = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    void* part = parts[i];
    const int64_t w = p.sizes[i];
    const int64_t n = p.rows * w;
    if (n > 0) {
      if (bf16)
        copyPart(static_cast<uint16_t*>(whole) + col, width, static_cast<uint16_t*>(part), w, p.rows, fwd, ctx.stream);
      else
        copyPart(static_cast<float*>(whole) + col, width, static_cast<float*>(part), w, p.rows, fwd, ctx.stream);
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
  if (bf16Args(c, "x"))
    shardSliceKernel<<<gridFor(count, kThreads), kThreads, 0, ctx.stream>>>(
        static_cast<const uint16_t*>(c.ptr(c.role("x"))), static_cast<uint16_t*>(c.ptr(c.role("y"))), p.outer,
        p.inner, total, begin, real);
  else
    shardSliceKernel<<<gridFor(count, kThreads), kThreads, 0, ctx.stream>>>(c.F("x"), c.F("y"), p.outer, p.inner,
                                                                            total, begin, real);
  return LLCDIST_CUDA_LAUNCHED("shard_slice", ctx.rank);
}

}  // namespace

// ---- CUDA kernel-table entries (CudaKernels.h) -----------------------------------------------------
void registerCudaLayoutKernels(CudaKernelTable& t) {
  using K = schema::OpKind;
  addCudaKernel<P>(t, K::kFillZero, fillZero);
  addCudaKernel<P>(t, K::kSplitFwd, split);
  addCudaKernel<P>(t, K::kSplitBwd, split);
  addCudaKernel<P>(t, K::kShardSlice, shardSlice);
}

}  // namespace llcdist::rt::cuda
