// The rope family's CUDA kernels (the CPU reference: src/kernels/Rope.cpp): rotary position embedding,
// HF Llama rotate_half convention, forward (rotation by the table's angles) and backward (its
// transpose, the rotation by -angle); and their kernel-table entries. One thread per rotated pair
// (b, s, head, i < hd/2) reads x[i] and x[half + i] before writing both, so y may alias x. The cos /
// sin table (RopeParams, built on the host at bind time) is read from its device copy
// (CudaKernelContext::tables, uploaded once per table). x and y are f32 or bf16 (FloatRef.cuh): the
// rotation is computed in f32 and rounded once. With a partial rotary width rd < hd (attr rotary_dim,
// Phi) only each head's first rd dims rotate, over a table rd wide, and a thread per pass-through
// element (b, s, head, rd <= d < hd) copies it (rounded once to y's dtype, as the CPU's staged path).
// Interleaved (attr `interleaved`, GPT-J's rotate_every_two): pair j is dims (2j, 2j + 1), not (j, j + rd/2).
#include "llcdist/runtime/KernelChecks.h"
#include "cuda/CudaKernels.h"
#include "cuda/kernels/FloatRef.cuh"

#include <string>

namespace llcdist::rt::cuda {
namespace {

constexpr int kThreads = 256;

// sign = +1: y = x*cos + rotate_half(x)*sin; sign = -1: the transpose. cos / sin are [S, rd]: the first
// rd dims of each head of hd rotate (rd == hd: all), and the rest are copied. Work item j of a row:
// j < rd/2 the pair (j, j + rd/2), else the pass-through dim rd + (j − rd/2).
__global__ void rotateKernel(const float* cosT, const float* sinT, FloatRef x, FloatRef y, int64_t B, int64_t S,
                             int64_t n, int64_t hd, int64_t rd, float sign, bool interleaved) {
  const int64_t half = rd / 2;
  const int64_t loStride = interleaved ? 2 : 1, hiOffset = interleaved ? 1 : half;
  const int64_t perRow = half + (hd - rd);
  const int64_t items = B * S * n * perRow;
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < items; j += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = j % perRow, row = j / perRow;  // row = (b·S + s)·n + head
    const int64_t off = row * hd;
    if (i >= half) {  // a pass-through dim (y may be x: the same element read, then written)
      const int64_t d = rd + (i - half);
      y.set(off + d, x[off + d]);
      continue;
    }
    const int64_t s = (row / n) % S;
    const float* c = cosT + s * rd;
    const float* sn = sinT + s * rd;
    const int64_t l = off + loStride * i, h = l + hiOffset;
    const float lo = x[l], hi = x[h];
    y.set(l, lo * c[i] + (-hi) * (sign * sn[i]));
    y.set(h, hi * c[half + i] + lo * (sign * sn[half + i]));
  }
}

using P = RopeParams;
using Ctx = CudaKernelContext;

Status rope(const KernelCall& c, const P& p, const Ctx& ctx) {
  const bool fwd = c.kind == schema::OpKind::kRopeFwd;
  const char* what = fwd ? "rope_fwd" : "rope_bwd";
  if (!p.table) return Status::internal(std::string(what) + " without a rope table");
  LLCDIST_RETURN_IF_ERROR(checkRopeTable(*p.table, p.S, p.hd, p.rotaryDim));
  const int64_t rd = p.rotaryDim == 0 ? p.hd : p.rotaryDim;
  const int64_t items = p.B * p.S * p.n * (rd / 2 + (p.hd - rd));
  if (items == 0) return Status::ok();
  const int64_t count = p.S * rd;
  if (int64_t(p.table->cos.size()) != count || int64_t(p.table->sin.size()) != count)
    return Status::internal(std::string(what) + ": the rope table holds " + std::to_string(p.table->cos.size()) +
                            " cos and " + std::to_string(p.table->sin.size()) + " sin values, expected S×rotary_dim = " +
                            std::to_string(count));
  if (!ctx.tables) return Status::internal(std::string(what) + " without device tables");
  LLCDIST_ASSIGN_OR_RETURN(const float* cosT, ctx.tables->upload(p.table->cos.data(), count, p.table));
  LLCDIST_ASSIGN_OR_RETURN(const float* sinT, ctx.tables->upload(p.table->sin.data(), count, p.table));
  rotateKernel<<<gridFor(items, kThreads), kThreads, 0, ctx.stream>>>(cosT, sinT, floatRef(c, fwd ? "x" : "dy"),
                                                                      floatRef(c, fwd ? "y" : "dx"), p.B, p.S, p.n,
                                                                      p.hd, rd, fwd ? 1.0f : -1.0f, p.interleaved);
  return LLCDIST_CUDA_LAUNCHED(what, ctx.rank);
}

}  // namespace

// ---- CUDA kernel-table entries (CudaKernels.h) -----------------------------------------------------
void registerCudaRopeKernels(CudaKernelTable& t) {
  using K = schema::OpKind;
  addCudaKernel<P>(t, K::kRopeFwd, rope);
  addCudaKernel<P>(t, K::kRopeBwd, rope);
}

}  // namespace llcdist::rt::cuda
