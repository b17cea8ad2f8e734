// CUDA kernels of ring attention (CPU reference: src/kernels/AttentionBlock.cpp; contract: Kernels.h
// AttentionBlock): attention_block_fwd / attention_block_bwd, one step of context parallelism's ring
// (this rank's S query rows against the S key/value rows of another member, causal by global
// position: AttentionParams::qPos / kvPos), and attention_merge.
//
// Straightforward f32 kernels (variant "own", f32 roles only: a bf16 plan converts), one warp per row,
// lane d owning head dims d, d + 32, ... (head dims up to kMaxHd); every sum in a fixed order (the keys
// or queries in order, xor-butterfly reductions over the lanes), no atomics, so a run repeats bit for
// bit. The keys a query row sees are a prefix of the block's rows (the key positions increase), as on
// the CPU; with a sliding window (AttentionParams::window: also query position − key position < window)
// a range of them, [begin, end), the loops running over it alone (begin 0 without a window: the same
// arithmetic). ALiBi (AttentionParams::alibi) adds its bias by global position to every score
// (scoreOf), the forward's and the backward's recomputed ones alike.
//  - forward: a warp per (b, h, query row i), an online softmax over the row's visible keys; a row
//    that sees none gets out = 0 and lse = −inf.
//  - backward: D_i = Σ dO·O (double) per query row into scratch; then a warp per query row for dq and a
//    warp per (b, kv head, key row) for dk and dv (over the query heads of that kv head and every query
//    row that sees the key), each recomputing P = exp(score − lse) from the final lse; the block's
//    contributions are ADDED to dq, dk, dv.
//  - merge: a thread per (b, h, i) row, the CPU's double-precision weights.
#include "cuda/CudaKernels.h"
#include "llcdist/runtime/KernelChecks.h"
#include "llcdist/runtime/Kernels.h"

#include <cmath>
#include <cstdint>
#include <string>

namespace llcdist::rt::cuda {
namespace {

constexpr int kMaxHd = 256;               // the largest head dim
constexpr int kMaxPerLane = kMaxHd / 32;  // head dims per lane
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpsPerBlock = 8;

// One run or two of positions (PositionRuns) and the block's shape.
struct Runs {
  int64_t first, split, second;
};
struct Block {
  int64_t B, S, nh, nkv, hd, group;
  float scale;
  Runs q, kv;
  int64_t window;  // the sliding window (>= 1), or 0: none
  Alibi alibi;     // ALiBi's heads (none: heads 0), by global position
};

__device__ __forceinline__ int64_t positionOf(const Runs& r, int64_t s) {
  return s < r.split ? r.first + s : r.second + (s - r.split);
}
// Key row j is visible to query row i.
__device__ __forceinline__ bool visible(const Block& s, int64_t i, int64_t j) {
  const int64_t q = positionOf(s.q, i), k = positionOf(s.kv, j);
  return k <= q && (s.window == 0 || q - k < s.window);
}
// ALiBi's slope of query head h (Kernels.h: alibiSlope), 0 without ALiBi: computed once per head.
__device__ __forceinline__ float slopeOf(const Block& s, int64_t h) {
  return s.alibi.heads == 0 ? 0.0f : alibiSlope(s.alibi.heads, s.alibi.head0 + h);
}
// The score of query row i and key row j: scale·q·k, plus ALiBi's slope · (key position − query
// position), as the CPU adds it.
__device__ __forceinline__ float scoreOf(const Block& s, float slope, int64_t i, int64_t j, float qk) {
  const float score = qk * s.scale;
  if (s.alibi.heads == 0) return score;
  return score + slope * static_cast<float>(positionOf(s.kv, j) - positionOf(s.q, i));
}
__device__ __forceinline__ int64_t clampTo(int64_t x, int64_t hi) { return x < 0 ? 0 : x > hi ? hi : x; }
// The keys at positions <= pos: a prefix of the block's rows, counted per run.
__device__ int64_t keysAtOrBefore(const Block& s, int64_t pos) {
  const int64_t n1 = clampTo(s.kv.split, s.S);
  const int64_t c1 = clampTo(pos - s.kv.first + 1, n1);
  if (c1 < n1) return c1;
  return n1 + clampTo(pos - s.kv.second + 1, s.S - n1);
}
// The keys query row i sees: rows [*begin, end) (attentionBlockKeyRange; begin 0 without a window).
__device__ int64_t visibleKeys(const Block& s, int64_t i, int64_t* begin) {
  const int64_t pos = positionOf(s.q, i);
  *begin = s.window > 0 && s.window <= pos ? keysAtOrBefore(s, pos - s.window) : 0;
  return keysAtOrBefore(s, pos);
}

__device__ __forceinline__ int64_t qIndex(const Block& s, int64_t b, int64_t i, int64_t h) {  // q, out, dout, dq
  return ((b * s.S + i) * s.nh + h) * s.hd;
}
__device__ __forceinline__ int64_t kvIndex(const Block& s, int64_t b, int64_t j, int64_t g) {  // k, v, dk, dv
  return ((b * s.S + j) * s.nkv + g) * s.hd;
}
__device__ __forceinline__ int64_t rowIndex(const Block& s, int64_t b, int64_t h, int64_t i) {  // lse, D
  return (b * s.nh + h) * s.S + i;
}

__device__ __forceinline__ float warpSum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(kFullMask, x, o);
  return x;
}
__device__ __forceinline__ double warpSumD(double x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(kFullMask, x, o);
  return x;
}
// Σ_d a[d]·b[d] over the warp: this lane's dims, then the butterfly (every lane gets the same bits).
__device__ __forceinline__ float warpDot(const float* a, const float* b, int hd, int lane) {
  float part = 0.0f;
  for (int d = lane; d < hd; d += 32) part += a[d] * b[d];
  return warpSum(part);
}

// The warp's global index and the warp count of the grid (grid-stride over rows).
__device__ __forceinline__ int64_t warpId() { return int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; }
__device__ __forceinline__ int64_t warpCount() { return int64_t(gridDim.x) * (blockDim.x / 32); }

// ---- Forward ----------------------------------------------------------------------------------------------
__global__ void blockForwardKernel(Block s, const float* q, const float* k, const float* v, float* out, float* lse) {
  const int lane = threadIdx.x % 32, hd = int(s.hd);
  for (int64_t row = warpId(); row < s.B * s.nh * s.S; row += warpCount()) {
    const int64_t i = row % s.S, bh = row / s.S, h = bh % s.nh, b = bh / s.nh, g = h / s.group;
    int64_t j0 = 0;
    const int64_t n = visibleKeys(s, i, &j0);
    const bool sees = n > j0;
    const float* qi = q + qIndex(s, b, i, h);
    const float slope = slopeOf(s, h);
    float o[kMaxPerLane];
    for (int r = 0; r < kMaxPerLane; ++r) o[r] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = j0; j < n; ++j) {
      const float score = scoreOf(s, slope, i, j, warpDot(qi, k + kvIndex(s, b, j, g), hd, lane));
      const float mNew = fmaxf(m, score);
      const float corr = expf(m - mNew), p = expf(score - mNew);  // corr 0 on the first key (m = -inf)
      l = l * corr + p;
      const float* vj = v + kvIndex(s, b, j, g);
      for (int r = 0; r < kMaxPerLane; ++r) {
        const int d = lane + 32 * r;
        if (d < hd) o[r] = o[r] * corr + p * vj[d];
      }
      m = mNew;
    }
    const float inv = sees ? 1.0f / l : 0.0f;
    for (int r = 0; r < kMaxPerLane; ++r) {
      const int d = lane + 32 * r;
      if (d < hd) out[qIndex(s, b, i, h) + d] = o[r] * inv;
    }
    if (lane == 0) lse[rowIndex(s, b, h, i)] = sees ? m + logf(l) : -INFINITY;
  }
}

// ---- Backward ---------------------------------------------------------------------------------------------
// D[b,h,i] = float(Σ_d double(out)·double(dout)).
__global__ void blockRowDotKernel(Block s, const float* out, const float* dout, float* D) {
  const int lane = threadIdx.x % 32;
  for (int64_t row = warpId(); row < s.B * s.nh * s.S; row += warpCount()) {
    const int64_t i = row % s.S, bh = row / s.S, h = bh % s.nh, b = bh / s.nh;
    const float* o = out + qIndex(s, b, i, h);
    const float* d = dout + qIndex(s, b, i, h);
    double acc = 0.0;
    for (int c = lane; c < s.hd; c += 32) acc += double(o[c]) * double(d[c]);
    acc = warpSumD(acc);
    if (lane == 0) D[rowIndex(s, b, h, i)] = static_cast<float>(acc);
  }
}

// dS_ij = P_ij·(dO_i·v_j − D_i), P_ij = exp(score_ij − lse_i), both from the warp's dot products.
struct Grad {
  float p, dS;
};
__device__ __forceinline__ Grad gradAt(const Block& s, float slope, int64_t i, int64_t j, const float* qi,
                                       const float* doi, const float* kj, const float* vj, float lseI, float dI,
                                       int lane) {
  const float p = expf(scoreOf(s, slope, i, j, warpDot(qi, kj, int(s.hd), lane)) - lseI);
  return {p, p * (warpDot(doi, vj, int(s.hd), lane) - dI)};
}

// dq_i += scale·Σ_j dS_ij k_j over the row's visible keys.
__global__ void blockQueryGradKernel(Block s, const float* dout, const float* q, const float* k, const float* v,
                                     const float* lse, const float* D, float* dq) {
  const int lane = threadIdx.x % 32, hd = int(s.hd);
  for (int64_t row = warpId(); row < s.B * s.nh * s.S; row += warpCount()) {
    const int64_t i = row % s.S, bh = row / s.S, h = bh % s.nh, b = bh / s.nh, g = h / s.group;
    const float lseI = lse[rowIndex(s, b, h, i)], dI = D[rowIndex(s, b, h, i)];
    const float slope = slopeOf(s, h);
    int64_t j0 = 0;
    const int64_t end = visibleKeys(s, i, &j0);
    const int64_t n = lseI == -INFINITY || end < j0 ? j0 : end;
    const float* qi = q + qIndex(s, b, i, h);
    const float* doi = dout + qIndex(s, b, i, h);
    float acc[kMaxPerLane];
    for (int r = 0; r < kMaxPerLane; ++r) acc[r] = 0.0f;
    for (int64_t j = j0; j < n; ++j) {
      const float* kj = k + kvIndex(s, b, j, g);
      const Grad gr = gradAt(s, slope, i, j, qi, doi, kj, v + kvIndex(s, b, j, g), lseI, dI, lane);
      for (int r = 0; r < kMaxPerLane; ++r) {
        const int d = lane + 32 * r;
        if (d < hd) acc[r] += gr.dS * kj[d];
      }
    }
    if (n == j0) continue;
    for (int r = 0; r < kMaxPerLane; ++r) {
      const int d = lane + 32 * r;
      if (d < hd) dq[qIndex(s, b, i, h) + d] += s.scale * acc[r];
    }
  }
}

// dk_j += scale·Σ dS_ij q_i and dv_j += Σ P_ij dO_i over the query heads of kv head g (in order) and the
// query rows that see key j (in order).
__global__ void blockKeyValueGradKernel(Block s, const float* dout, const float* q, const float* k, const float* v,
                                        const float* lse, const float* D, float* dk, float* dv) {
  const int lane = threadIdx.x % 32, hd = int(s.hd);
  for (int64_t row = warpId(); row < s.B * s.nkv * s.S; row += warpCount()) {
    const int64_t j = row % s.S, bg = row / s.S, g = bg % s.nkv, b = bg / s.nkv;
    const float* kj = k + kvIndex(s, b, j, g);
    const float* vj = v + kvIndex(s, b, j, g);
    float accK[kMaxPerLane], accV[kMaxPerLane];
    for (int r = 0; r < kMaxPerLane; ++r) accK[r] = accV[r] = 0.0f;
    for (int64_t h = g * s.group; h < (g + 1) * s.group; ++h) {
      const float slope = slopeOf(s, h);
      for (int64_t i = 0; i < s.S; ++i) {
        const float lseI = lse[rowIndex(s, b, h, i)];
        if (lseI == -INFINITY || !visible(s, i, j)) continue;  // warp-uniform
        const float* qi = q + qIndex(s, b, i, h);
        const float* doi = dout + qIndex(s, b, i, h);
        const Grad gr = gradAt(s, slope, i, j, qi, doi, kj, vj, lseI, D[rowIndex(s, b, h, i)], lane);
        for (int r = 0; r < kMaxPerLane; ++r) {
          const int d = lane + 32 * r;
          if (d < hd) {
            accK[r] += gr.dS * qi[d];
            accV[r] += gr.p * doi[d];
          }
        }
      }
    }
    for (int r = 0; r < kMaxPerLane; ++r) {
      const int d = lane + 32 * r;
      if (d < hd) {
        dk[kvIndex(s, b, j, g) + d] += s.scale * accK[r];
        dv[kvIndex(s, b, j, g) + d] += accV[r];
      }
    }
  }
}

// ---- Merge -----------------------------------------------------------------------------------------------
// (out, lse) := the merge with (outB, lseB) (attentionMerge: a −inf side is none).
__global__ void mergeKernel(int64_t B, int64_t S, int64_t nh, int64_t hd, float* out, float* lse, const float* outB,
                            const float* lseB) {
  const int64_t rows = B * nh * S;
  for (int64_t l = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; l < rows; l += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = l % S, bh = l / S, h = bh % nh, b = bh / nh;
    const float l1 = lse[l], l2 = lseB[l];
    float* o = out + ((b * S + i) * nh + h) * hd;
    const float* ob = outB + ((b * S + i) * nh + h) * hd;
    if (l2 == -INFINITY) continue;
    if (l1 == -INFINITY) {
      for (int64_t c = 0; c < hd; ++c) o[c] = ob[c];
      lse[l] = l2;
      continue;
    }
    const double m = fmax(double(l1), double(l2));
    const double e1 = exp(double(l1) - m), e2 = exp(double(l2) - m);
    const double w1 = e1 / (e1 + e2), w2 = e2 / (e1 + e2);
    for (int64_t c = 0; c < hd; ++c) o[c] = static_cast<float>(w1 * o[c] + w2 * ob[c]);
    lse[l] = static_cast<float>(m + log(e1 + e2));
  }
}

// ---- Launch helpers ---------------------------------------------------------------------------------------

Status checkBlockShape(const char* what, const AttentionParams& p) {
  LLCDIST_RETURN_IF_ERROR(checkAttentionShape(p.B, p.S, p.nh, p.nkv, p.hd));
  LLCDIST_RETURN_IF_ERROR(checkAttentionWindow(p.window));
  LLCDIST_RETURN_IF_ERROR(checkAttentionAlibi(p.alibi, p.nh));
  if (p.hd > kMaxHd)
    return Status::invalidArgument(std::string(what) + ": head dim " + std::to_string(p.hd) +
                                   " is larger than the CUDA kernels' limit " + std::to_string(kMaxHd));
  return checkAttentionBlockPositions(p.qPos, p.S, p.kvPos, p.S);
}

Block blockOf(const AttentionParams& p) {
  return Block{p.B,
               p.S,
               p.nh,
               p.nkv,
               p.hd,
               p.nh / p.nkv,
               attentionScale(p.hd),
               Runs{p.qPos.first, p.qPos.split, p.qPos.second},
               Runs{p.kvPos.first, p.kvPos.split, p.kvPos.second},
               p.window,
               p.alibi};
}

// Blocks of kWarpsPerBlock warps, one warp per row (grid-stride past gridFor's cap).
unsigned warpGrid(int64_t rows) { return gridFor(rows * 32, kWarpsPerBlock * 32); }

using P = AttentionParams;
using Ctx = CudaKernelContext;

Status blockForward(const KernelCall& c, const P& p, const Ctx& ctx) {
  LLCDIST_RETURN_IF_ERROR(checkBlockShape("attention_block_fwd", p));
  LLCDIST_RETURN_IF_ERROR(checkAttentionBlockElems(c, p));
  const Block s = blockOf(p);
  blockForwardKernel<<<warpGrid(p.B * p.nh * p.S), kWarpsPerBlock * 32, 0, ctx.stream>>>(
      s, c.F("q"), c.F("k"), c.F("v"), c.F("out"), c.F("lse"));
  return LLCDIST_CUDA_LAUNCHED("attention_block_fwd", ctx.rank);
}

Status blockBackward(const KernelCall& c, const P& p, const Ctx& ctx) {
  LLCDIST_RETURN_IF_ERROR(checkBlockShape("attention_block_bwd", p));
  LLCDIST_RETURN_IF_ERROR(checkAttentionBlockElems(c, p));
  if (!ctx.scratch) return Status::internal("attention_block_bwd: no device scratch in the CUDA kernel context");
  const Block s = blockOf(p);
  const int64_t rows = p.B * p.nh * p.S;
  StatusOr<void*> scratch = ctx.scratch->get(rows * int64_t(sizeof(float)));
  if (!scratch.isOk()) return scratch.status().withContext("attention_block_bwd");
  float* D = static_cast<float*>(*scratch);
  const unsigned threads = kWarpsPerBlock * 32;
  blockRowDotKernel<<<warpGrid(rows), threads, 0, ctx.stream>>>(s, c.F("out"), c.F("dout"), D);
  LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("attention_block_bwd (D = rowsum(dO * O))", ctx.rank));
  blockQueryGradKernel<<<warpGrid(rows), threads, 0, ctx.stream>>>(s, c.F("dout"), c.F("q"), c.F("k"), c.F("v"),
                                                                   c.F("lse"), D, c.F("dq"));
  LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("attention_block_bwd (dq)", ctx.rank));
  blockKeyValueGradKernel<<<warpGrid(p.B * p.nkv * p.S), threads, 0, ctx.stream>>>(
      s, c.F("dout"), c.F("q"), c.F("k"), c.F("v"), c.F("lse"), D, c.F("dk"), c.F("dv"));
  return LLCDIST_CUDA_LAUNCHED("attention_block_bwd (dk, dv)", ctx.rank);
}

Status merge(const KernelCall& c, const P& p, const Ctx& ctx) {
  LLCDIST_RETURN_IF_ERROR(checkAttentionBlockElems(c, p));
  const int64_t rows = p.B * p.nh * p.S;
  if (rows == 0) return Status::ok();
  mergeKernel<<<gridFor(rows), 256, 0, ctx.stream>>>(p.B, p.S, p.nh, p.hd, c.F("out"), c.F("lse"), c.F("out_b"),
                                                     c.F("lse_b"));
  return LLCDIST_CUDA_LAUNCHED("attention_merge", ctx.rank);
}

}  // namespace

void registerCudaAttentionBlockKernels(CudaKernelTable& t) {
  using K = schema::OpKind;
  addCudaKernel<P>(t, K::kAttentionBlockFwd, blockForward);
  addCudaKernel<P>(t, K::kAttentionBlockBwd, blockBackward);
  addCudaKernel<P>(t, K::kAttentionMerge, merge);
}

}  // namespace llcdist::rt::cuda
