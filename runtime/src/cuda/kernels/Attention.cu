// CUDA kernels of the attention family (CPU reference: src/kernels/Attention.cpp; contract: Kernels.h):
// causal self-attention with grouped KV heads. q, out, dq [B,S,nh,hd]; k, v, dk, dv [B,S,nkv,hd] (q, k, v
// and dq, dk, dv may each be packed in one [B,S,nh+2·nkv,hd] buffer: QkvLayout's row strides); query
// head h reads kv head h / (nh/nkv); scores = q·k/sqrt(hd) with keys j <= query i; lse [B,nh,S] the
// log-sum-exp of each masked score row, saved by the forward and used by the backward to recompute
// P = exp(score - lse).
//
// One warp per row everywhere, key (or query) tiles of kTile = 32 rows in shared memory, one row per
// lane; every sum runs in a fixed order (a lane's dot products d = 0..hd-1, the tiles in order, the
// tile's rows t = 0..31 broadcast by shuffles, xor-butterfly reductions), no atomics, so the result
// repeats bit for bit. The score s = scale·Σ_d q[d]·k[d] is computed the same way in all three kernels,
// so forward and backward see identical probabilities.
//  - attention_fwd: a block per (b, h, tile of W query rows), warp w owns query row i; it walks the key
//    tiles up to the block's last row with an online softmax in f32 (running max m, running sum l,
//    the output accumulator o rescaled by exp(m_old - m_new)); lane t scores key j0 + t, lane d owns
//    output columns d, d + 32, ... Writes out = o / l and lse = m + log(l).
//  - attention_bwd: (1) D[b,h,i] = Σ_d dO·O (double, as the CPU) by a warp per row; (2) dQ: a block
//    per (b, h, query tile) as the forward, dS_ij = P_ij·(dO_i·v_j - D_i), dq_i = scale·Σ_j dS_ij k_j;
//    (3) dK, dV: a block per (b, kv head g, tile of W key rows), warp w owns key row j and walks the
//    query heads of g in order and, for each, the query tiles from j on: dv_j = Σ P_ij dO_i,
//    dk_j = scale·Σ dS_ij q_i. Each of dq, dk, dv is written once (overwritten), no accumulation.
// A sliding window (AttentionParams::window, Mistral's: key j visible to query i iff j <= i and
// i − j < window; 0: none) masks a lane's key (or query) as the causal mask does, and the loops skip the
// tiles wholly outside every row's window of the block: the tiles a row runs, and the order of its sums
// over them, are those of plain causal attention when there is no window (or one >= S). ALiBi
// (AttentionParams::alibi) adds its bias to each visible score (scoreOf), in all three kernels.
// Head dims up to kMaxHd = 256 (8 output columns per lane); larger is an InvalidArgument error. This
// own kernel computes in f32 on f32 buffers (variant "own"); bf16 plans run cuDNN's fused attention
// (variant "cudnn", registered first: CudnnAttention.h), which reads and writes bf16 q, k, v, out
// (and their gradients) and f32 lse, where it is usable, and convert to this kernel otherwise.
#include "llcdist/runtime/KernelChecks.h"
#include "llcdist/runtime/Kernels.h"
#include "cuda/CudaKernels.h"
#include "cuda/CudnnAttention.h"

#include <cmath>
#include <cstdint>
#include <string>

namespace llcdist::rt::cuda {
namespace {

constexpr int kTile = 32;                  // rows per shared-memory tile: one per lane
constexpr int kMaxHd = 256;                // the largest head dim
constexpr int kMaxPerLane = kMaxHd / 32;   // output columns per lane
constexpr unsigned kFullMask = 0xffffffffu;
constexpr size_t kDefaultSharedBytes = 48 * 1024;

struct Shape {
  int64_t B, S, nh, nkv, hd;
  int64_t group;  // nh / nkv: query heads per kv head
  float scale;    // 1/sqrt(hd), as the CPU rounds it
  int64_t window;  // the sliding window (>= 1), or 0: none
  Alibi alibi;     // ALiBi's heads (none: heads 0); query head h is head alibi.head0 + h of them
  // Row strides in elements (QkvLayout): q and k, v as read; dq and dk, dv as written (packed in one
  // qkv / dqkv buffer or separate). out and dout are always [B,S,nh,hd].
  int64_t qRow, kvRow, dqRow, dkvRow;
};

// The first element of row i's head h in q (qIndex), out / dout (oIndex), dq (dqIndex); of row j's kv
// head g in k, v (kvIndex) and dk, dv (dkvIndex).
__device__ __forceinline__ int64_t qIndex(const Shape& s, int64_t b, int64_t i, int64_t h) {
  return (b * s.S + i) * s.qRow + h * s.hd;
}
__device__ __forceinline__ int64_t oIndex(const Shape& s, int64_t b, int64_t i, int64_t h) {
  return ((b * s.S + i) * s.nh + h) * s.hd;
}
__device__ __forceinline__ int64_t dqIndex(const Shape& s, int64_t b, int64_t i, int64_t h) {
  return (b * s.S + i) * s.dqRow + h * s.hd;
}
__device__ __forceinline__ int64_t kvIndex(const Shape& s, int64_t b, int64_t j, int64_t g) {
  return (b * s.S + j) * s.kvRow + g * s.hd;
}
__device__ __forceinline__ int64_t dkvIndex(const Shape& s, int64_t b, int64_t j, int64_t g) {
  return (b * s.S + j) * s.dkvRow + g * s.hd;
}
__device__ __forceinline__ int64_t rowIndex(const Shape& s, int64_t b, int64_t h, int64_t i) {  // lse, D
  return (b * s.nh + h) * s.S + i;
}

// ALiBi's slope of query head h (Kernels.h: alibiSlope), 0 without ALiBi: computed once per head.
__device__ __forceinline__ float slopeOf(const Shape& s, int64_t h) {
  return s.alibi.heads == 0 ? 0.0f : alibiSlope(s.alibi.heads, s.alibi.head0 + h);
}
// The score of query i and key j: scale·q·k, plus ALiBi's slope · (j − i), added as the CPU adds it.
__device__ __forceinline__ float scoreOf(const Shape& s, float slope, int64_t i, int64_t j, float qk) {
  const float score = qk * s.scale;
  return s.alibi.heads == 0 ? score : score + slope * static_cast<float>(j - i);
}

// Key j is inside query i's window (the causal side, j <= i, is checked apart).
__device__ __forceinline__ bool inWindow(const Shape& s, int64_t i, int64_t j) {
  return s.window == 0 || i - j < s.window;
}
// Some key of the tile [j0, j0 + kTile) is visible to query i: j0 <= i and the tile reaches i's window.
__device__ __forceinline__ bool keyTileVisible(const Shape& s, int64_t i, int64_t j0) {
  return j0 <= i && inWindow(s, i, j0 + kTile - 1);
}
// The first key tile a block of query rows [firstRow, ...] needs: the one holding firstRow's first key.
__device__ __forceinline__ int64_t firstKeyTile(const Shape& s, int64_t firstRow) {
  if (s.window == 0 || firstRow < s.window) return 0;
  return (firstRow - s.window + 1) / kTile * kTile;
}
// One past the last query row that sees a key of [.., lastKey]: S without a window.
__device__ __forceinline__ int64_t queryEnd(const Shape& s, int64_t lastKey) {
  if (s.window == 0 || lastKey + s.window >= s.S) return s.S;
  return lastKey + s.window;
}

// Xor-butterfly reductions: every lane ends with the same bits.
__device__ __forceinline__ float warpMax(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(kFullMask, x, o));
  return x;
}
__device__ __forceinline__ float warpSum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(kFullMask, x, o);
  return x;
}
__device__ __forceinline__ double warpSumD(double x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(kFullMask, x, o);
  return x;
}

// dst[r·stride + d] = src row (rowBegin + r) for r < kTile, d < hd, rows past S zero. `rowOffset(row)`
// is the element offset of a row's first element. All threads of the block take part.
template <class RowOffset>
__device__ void loadTile(float* dst, int stride, const float* src, int64_t rowBegin, int64_t S, int hd,
                         RowOffset rowOffset) {
  for (int t = threadIdx.x; t < kTile * hd; t += blockDim.x) {
    const int r = t / hd, d = t % hd;
    const int64_t row = rowBegin + r;
    dst[r * stride + d] = row < S ? src[rowOffset(row) + d] : 0.0f;
  }
}

// Σ_d a[d]·b[d], d in order.
__device__ __forceinline__ float dot(const float* a, const float* b, int hd) {
  float s = 0.0f;
  for (int d = 0; d < hd; ++d) s += a[d] * b[d];
  return s;
}

// ---- Forward --------------------------------------------------------------------------------------------
// Shared: kv [kTile][hd+1] (the K tile, then the V tile), qs [W][hd].
__global__ void attentionForwardKernel(Shape s, const float* q, const float* k, const float* v, float* out,
                                       float* lse) {
  extern __shared__ float smem[];
  const int warps = blockDim.x / 32, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int hd = int(s.hd), stride = hd + 1;
  float* kv = smem;
  float* qrow = smem + kTile * stride + warp * hd;

  const int64_t tiles = (s.S + warps - 1) / warps;
  int64_t blk = blockIdx.x;
  const int64_t tile = blk % tiles;
  blk /= tiles;
  const int64_t h = blk % s.nh, b = blk / s.nh, g = h / s.group;
  const int64_t firstRow = tile * warps;
  const int64_t lastRow = firstRow + warps - 1 < s.S - 1 ? firstRow + warps - 1 : s.S - 1;
  const int64_t i = firstRow + warp;  // this warp's query row
  const bool active = i < s.S;

  if (active)
    for (int d = lane; d < hd; d += 32) qrow[d] = q[qIndex(s, b, i, h) + d];

  float o[kMaxPerLane];
  for (int r = 0; r < kMaxPerLane; ++r) o[r] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const float slope = slopeOf(s, h);
  const auto kvRow = [&](int64_t j) { return kvIndex(s, b, j, g); };

  for (int64_t j0 = firstKeyTile(s, firstRow); j0 <= lastRow; j0 += kTile) {
    const bool runs = active && keyTileVisible(s, i, j0);  // warp-uniform
    __syncthreads();                                       // the previous V tile is consumed; q rows are written
    loadTile(kv, stride, k, j0, s.S, hd, kvRow);
    __syncthreads();
    float score = -INFINITY;  // masked: key after the query (or past S), or before its window
    if (runs && j0 + lane <= i && inWindow(s, i, j0 + lane))
      score = scoreOf(s, slope, i, j0 + lane, dot(qrow, kv + lane * stride, hd));
    __syncthreads();  // the K tile is consumed
    loadTile(kv, stride, v, j0, s.S, hd, kvRow);
    __syncthreads();
    if (runs) {
      const float mNew = fmaxf(m, warpMax(score));  // finite: the tile has a visible key (keyTileVisible)
      const float corr = expf(m - mNew);           // 0 on the first tile (m = -inf)
      const float p = score == -INFINITY ? 0.0f : expf(score - mNew);
      l = l * corr + warpSum(p);
      for (int r = 0; r < kMaxPerLane; ++r) o[r] *= corr;
      for (int t = 0; t < kTile; ++t) {
        const float pt = __shfl_sync(kFullMask, p, t);
        for (int r = 0; r < kMaxPerLane; ++r) {
          const int d = lane + 32 * r;
          if (d < hd) o[r] += pt * kv[t * stride + d];
        }
      }
      m = mNew;
    }
  }
  if (active) {
    const float inv = 1.0f / l;
    for (int r = 0; r < kMaxPerLane; ++r) {
      const int d = lane + 32 * r;
      if (d < hd) out[oIndex(s, b, i, h) + d] = o[r] * inv;
    }
    if (lane == 0) lse[rowIndex(s, b, h, i)] = m + logf(l);
  }
}

// ---- Backward ---------------------------------------------------------------------------------------------
// D[b,h,i] = float(Σ_d double(out)·double(dout)): one warp per (b, i, h) row.
__global__ void attentionRowDotKernel(Shape s, const float* out, const float* dout, float* D) {
  const int64_t rows = s.B * s.S * s.nh;
  const int lane = threadIdx.x % 32;
  const int64_t warpsInGrid = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warpsInGrid) {
    const int64_t h = row % s.nh, bi = row / s.nh, i = bi % s.S, b = bi / s.S;
    const float* o = out + row * s.hd;
    const float* d = dout + row * s.hd;
    double acc = 0.0;
    for (int64_t c = lane; c < s.hd; c += 32) acc += double(o[c]) * double(d[c]);
    acc = warpSumD(acc);
    if (lane == 0) D[rowIndex(s, b, h, i)] = static_cast<float>(acc);
  }
}

// dq. Shared: kt, vt [kTile][hd+1] (K and V tiles), qs, dos [W][hd].
__global__ void attentionBackwardQueryKernel(Shape s, const float* dout, const float* q, const float* k,
                                             const float* v, const float* lse, const float* D, float* dq) {
  extern __shared__ float smem[];
  const int warps = blockDim.x / 32, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int hd = int(s.hd), stride = hd + 1;
  float* kt = smem;
  float* vt = kt + kTile * stride;
  float* qrow = vt + kTile * stride + warp * hd;
  float* dorow = vt + kTile * stride + warps * hd + warp * hd;

  const int64_t tiles = (s.S + warps - 1) / warps;
  int64_t blk = blockIdx.x;
  const int64_t tile = blk % tiles;
  blk /= tiles;
  const int64_t h = blk % s.nh, b = blk / s.nh, g = h / s.group;
  const int64_t firstRow = tile * warps;
  const int64_t lastRow = firstRow + warps - 1 < s.S - 1 ? firstRow + warps - 1 : s.S - 1;
  const int64_t i = firstRow + warp;
  const bool active = i < s.S;

  const float slope = slopeOf(s, h);
  float lseI = 0.0f, dI = 0.0f;
  if (active) {
    for (int d = lane; d < hd; d += 32) {
      qrow[d] = q[qIndex(s, b, i, h) + d];
      dorow[d] = dout[oIndex(s, b, i, h) + d];
    }
    lseI = lse[rowIndex(s, b, h, i)];
    dI = D[rowIndex(s, b, h, i)];
  }
  float acc[kMaxPerLane];
  for (int r = 0; r < kMaxPerLane; ++r) acc[r] = 0.0f;
  const auto kvRow = [&](int64_t j) { return kvIndex(s, b, j, g); };

  for (int64_t j0 = firstKeyTile(s, firstRow); j0 <= lastRow; j0 += kTile) {
    const bool runs = active && keyTileVisible(s, i, j0);
    __syncthreads();  // the previous tiles are consumed; q / dO rows are written
    loadTile(kt, stride, k, j0, s.S, hd, kvRow);
    loadTile(vt, stride, v, j0, s.S, hd, kvRow);
    __syncthreads();
    if (runs) {
      float dS = 0.0f;
      if (j0 + lane <= i && inWindow(s, i, j0 + lane)) {
        const float score = scoreOf(s, slope, i, j0 + lane, dot(qrow, kt + lane * stride, hd));
        const float p = expf(score - lseI);
        const float dp = dot(dorow, vt + lane * stride, hd);
        dS = p * (dp - dI);
      }
      for (int t = 0; t < kTile; ++t) {
        const float dSt = __shfl_sync(kFullMask, dS, t);
        for (int r = 0; r < kMaxPerLane; ++r) {
          const int d = lane + 32 * r;
          if (d < hd) acc[r] += dSt * kt[t * stride + d];
        }
      }
    }
  }
  if (active)
    for (int r = 0; r < kMaxPerLane; ++r) {
      const int d = lane + 32 * r;
      if (d < hd) dq[dqIndex(s, b, i, h) + d] = s.scale * acc[r];
    }
}

// dk, dv. Shared: qt, dOtile [kTile][hd+1] (q and dO tiles of one query head), ks, vs [W][hd].
__global__ void attentionBackwardKeyValueKernel(Shape s, const float* dout, const float* q, const float* k,
                                                const float* v, const float* lse, const float* D, float* dk,
                                                float* dv) {
  extern __shared__ float smem[];
  const int warps = blockDim.x / 32, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int hd = int(s.hd), stride = hd + 1;
  float* qt = smem;
  float* dOtile = qt + kTile * stride;
  float* krow = dOtile + kTile * stride + warp * hd;
  float* vrow = dOtile + kTile * stride + warps * hd + warp * hd;

  const int64_t tiles = (s.S + warps - 1) / warps;
  int64_t blk = blockIdx.x;
  const int64_t tile = blk % tiles;
  blk /= tiles;
  const int64_t g = blk % s.nkv, b = blk / s.nkv;
  const int64_t firstRow = tile * warps;
  const int64_t j = firstRow + warp;  // this warp's key row
  const bool active = j < s.S;

  if (active)
    for (int d = lane; d < hd; d += 32) {
      krow[d] = k[kvIndex(s, b, j, g) + d];
      vrow[d] = v[kvIndex(s, b, j, g) + d];
    }
  float accK[kMaxPerLane], accV[kMaxPerLane];
  for (int r = 0; r < kMaxPerLane; ++r) accK[r] = accV[r] = 0.0f;

  for (int64_t hh = 0; hh < s.group; ++hh) {
    const int64_t h = g * s.group + hh;
    const float slope = slopeOf(s, h);
    const auto qRow = [&](int64_t i) { return qIndex(s, b, i, h); };
    const auto oRow = [&](int64_t i) { return oIndex(s, b, i, h); };
    // Queries i >= j: the tiles from the block's first key row on (rows before a warp's own key masked),
    // up to the last query whose window reaches the block's last key.
    const int64_t iEnd = queryEnd(s, firstRow + warps - 1);
    for (int64_t i0 = firstRow; i0 < iEnd; i0 += kTile) {
      // warp-uniform: some row of the tile is >= j and inside the window of key j
      const bool runs = active && i0 + kTile > j && inWindow(s, i0, j);
      __syncthreads();  // the previous tiles are consumed; k / v rows are written
      loadTile(qt, stride, q, i0, s.S, hd, qRow);
      loadTile(dOtile, stride, dout, i0, s.S, hd, oRow);
      __syncthreads();
      if (runs) {
        const int64_t i = i0 + lane;
        float p = 0.0f, dS = 0.0f;
        if (i < s.S && i >= j && inWindow(s, i, j)) {
          const float score = scoreOf(s, slope, i, j, dot(qt + lane * stride, krow, hd));
          p = expf(score - lse[rowIndex(s, b, h, i)]);
          const float dp = dot(dOtile + lane * stride, vrow, hd);
          dS = p * (dp - D[rowIndex(s, b, h, i)]);
        }
        for (int t = 0; t < kTile; ++t) {
          const float pt = __shfl_sync(kFullMask, p, t);
          const float dSt = __shfl_sync(kFullMask, dS, t);
          for (int r = 0; r < kMaxPerLane; ++r) {
            const int d = lane + 32 * r;
            if (d < hd) {
              accV[r] += pt * dOtile[t * stride + d];
              accK[r] += dSt * qt[t * stride + d];
            }
          }
        }
      }
    }
  }
  if (active)
    for (int r = 0; r < kMaxPerLane; ++r) {
      const int d = lane + 32 * r;
      if (d < hd) {
        dk[dkvIndex(s, b, j, g) + d] = s.scale * accK[r];
        dv[dkvIndex(s, b, j, g) + d] = accV[r];
      }
    }
}

// ---- Launch helpers ---------------------------------------------------------------------------------------

// The CPU's checks (checkAttentionShape) plus this implementation's head-dim limit and grid size.
Status checkShape(const AttentionParams& p) {
  LLCDIST_RETURN_IF_ERROR(checkAttentionShape(p.B, p.S, p.nh, p.nkv, p.hd));
  LLCDIST_RETURN_IF_ERROR(checkAttentionWindow(p.window));
  LLCDIST_RETURN_IF_ERROR(checkAttentionAlibi(p.alibi, p.nh));
  if (p.hd > kMaxHd)
    return Status::invalidArgument("attention: head dim " + std::to_string(p.hd) +
                                   " is larger than the CUDA kernels' limit " + std::to_string(kMaxHd));
  return Status::ok();
}

Shape shapeOf(const AttentionParams& p) {
  Shape s;
  s.B = p.B;
  s.S = p.S;
  s.nh = p.nh;
  s.nkv = p.nkv;
  s.hd = p.hd;
  s.group = p.nh / p.nkv;
  s.scale = attentionScale(p.hd);
  s.window = p.window >= p.S ? 0 : p.window;  // a window >= S masks nothing: plain causal, the same tiles
  s.alibi = p.alibi;
  const QkvLayout in = qkvLayout(p.nh, p.nkv, p.hd, p.packedQkv), grad = qkvLayout(p.nh, p.nkv, p.hd, p.packedGrad);
  s.qRow = in.qRow;
  s.kvRow = in.kvRow;
  s.dqRow = grad.qRow;
  s.dkvRow = grad.kvRow;
  return s;
}

// Warps per block: fewer for large head dims, so the shared memory stays small.
int forwardWarps(int64_t hd) { return hd <= 128 ? 16 : 8; }
int backwardWarps(int64_t hd) { return hd <= 64 ? 16 : hd <= 128 ? 8 : 4; }

// Blocks for `rows` rows per (b, head) in tiles of `warps`, over `heads` heads and B batches; an error
// past the grid's x limit.
StatusOr<unsigned> tileGrid(const Shape& s, int warps, int64_t heads) {
  const int64_t blocks = (s.S + warps - 1) / warps * heads * s.B;
  if (blocks > 2147483647)
    return Status::invalidArgument("attention: " + std::to_string(blocks) + " blocks exceed the CUDA grid limit");
  return unsigned(blocks);
}

// Opts a kernel into more than the default 48 KiB of dynamic shared memory when it needs it.
template <class Kernel>
Status allowSharedBytes(Kernel kernel, size_t bytes, int rank) {
  if (bytes > kDefaultSharedBytes)
    LLCDIST_CUDA_TRY(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
                     rank);
  return Status::ok();
}

// The cuDNN problem of a call: its shape, forward or backward, deterministic (--deterministic).
AttentionProblem cudnnProblem(const KernelCall& c, const AttentionParams& p, const CudaKernelContext& ctx) {
  return attentionProblem(p, c.kind == schema::OpKind::kAttentionBwd, ctx.deterministic);
}

// Bind time (Backend::prepare, and the choice's fits: CudaBackend.cpp): the graph built and cached, its
// workspace bytes.
StatusOr<int64_t> prepareCudnn(const KernelCall& c, const CudaKernelContext& ctx) {
  const AttentionParams* p = c.paramsAs<AttentionParams>();
  if (!p) return Status::internal(std::string(schema::opName(c.kind)) + " was bound without its parameters");
  if (!ctx.cudnn) return Status::invalidArgument("cuDNN's fused attention is not available on this backend");
  return ctx.cudnn->prepare(cudnnProblem(c, *p, ctx));
}

}  // namespace

void registerCudaAttentionKernels(CudaKernelTable& t) {
  using K = schema::OpKind;
  using P = AttentionParams;
  // cuDNN's fused attention (bf16), first: host/KernelVariants.h's order.
  addCudaKernel<P>(
      t, K::kAttentionFwd, "cudnn",
      [](const KernelCall& c, const P& p, const CudaKernelContext& ctx) -> Status {
        LLCDIST_RETURN_IF_ERROR(checkAttentionElems(c, p));
        if (!ctx.cudnn) return Status::internal("attention_fwd: cuDNN's attention was chosen but is not available");
        const AttentionArgs a = attentionArgs(c, p);
        return ctx.cudnn->forward(cudnnProblem(c, p, ctx), a.q, a.k, a.v, c.ptr(c.role("out")), c.F("lse"),
                                  ctx.workspace, ctx.workspaceBytes, ctx.stream);
      },
      prepareCudnn);
  addCudaKernel<P>(
      t, K::kAttentionBwd, "cudnn",
      [](const KernelCall& c, const P& p, const CudaKernelContext& ctx) -> Status {
        LLCDIST_RETURN_IF_ERROR(checkAttentionElems(c, p));
        if (!ctx.cudnn) return Status::internal("attention_bwd: cuDNN's attention was chosen but is not available");
        const AttentionArgs a = attentionArgs(c, p);
        return ctx.cudnn->backward(cudnnProblem(c, p, ctx), c.ptr(c.role("dout")), a.q, a.k, a.v,
                                   c.ptr(c.role("out")), c.F("lse"), a.dq, a.dk, a.dv, ctx.workspace,
                                   ctx.workspaceBytes, ctx.stream);
      },
      prepareCudnn);
  // The own f32 kernel.
  addCudaKernel<P>(t, K::kAttentionFwd, [](const KernelCall& c, const P& p, const CudaKernelContext& ctx) -> Status {
    LLCDIST_RETURN_IF_ERROR(checkShape(p));
    LLCDIST_RETURN_IF_ERROR(checkAttentionElems(c, p));
    const AttentionArgs a = attentionArgs(c, p);
    const Shape s = shapeOf(p);
    const int warps = forwardWarps(p.hd);
    LLCDIST_ASSIGN_OR_RETURN(const unsigned blocks, tileGrid(s, warps, p.nh));
    const size_t shared = size_t(kTile * (p.hd + 1) + warps * p.hd) * sizeof(float);
    LLCDIST_RETURN_IF_ERROR(allowSharedBytes(attentionForwardKernel, shared, ctx.rank));
    attentionForwardKernel<<<blocks, warps * 32, shared, ctx.stream>>>(s, a.qF(), a.kF(), a.vF(), c.F("out"),
                                                                       c.F("lse"));
    return LLCDIST_CUDA_LAUNCHED("attention_fwd", ctx.rank);
  });
  addCudaKernel<P>(t, K::kAttentionBwd, [](const KernelCall& c, const P& p, const CudaKernelContext& ctx) -> Status {
    LLCDIST_RETURN_IF_ERROR(checkShape(p));
    LLCDIST_RETURN_IF_ERROR(checkAttentionElems(c, p));
    const AttentionArgs a = attentionArgs(c, p);
    const Shape s = shapeOf(p);
    const int64_t rows = p.B * p.nh * p.S;
    if (!ctx.scratch) return Status::internal("attention_bwd: no device scratch in the CUDA kernel context");

    StatusOr<void*> scratch = ctx.scratch->get(rows * int64_t(sizeof(float)));
    if (!scratch.isOk()) return scratch.status().withContext("attention_bwd");
    float* D = static_cast<float*>(*scratch);
    constexpr int kRowDotThreads = 256;
    attentionRowDotKernel<<<gridFor(rows * 32, kRowDotThreads), kRowDotThreads, 0, ctx.stream>>>(s, c.F("out"),
                                                                                                c.F("dout"), D);
    LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("attention_bwd (D = rowsum(dO * O))", ctx.rank));

    const int warps = backwardWarps(p.hd);
    const size_t shared = size_t(2 * kTile * (p.hd + 1) + 2 * warps * p.hd) * sizeof(float);

    LLCDIST_ASSIGN_OR_RETURN(const unsigned qBlocks, tileGrid(s, warps, p.nh));
    LLCDIST_RETURN_IF_ERROR(allowSharedBytes(attentionBackwardQueryKernel, shared, ctx.rank));
    attentionBackwardQueryKernel<<<qBlocks, warps * 32, shared, ctx.stream>>>(
        s, c.F("dout"), a.qF(), a.kF(), a.vF(), c.F("lse"), D, a.dqF());
    LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("attention_bwd (dq)", ctx.rank));

    LLCDIST_ASSIGN_OR_RETURN(const unsigned kvBlocks, tileGrid(s, warps, p.nkv));
    LLCDIST_RETURN_IF_ERROR(allowSharedBytes(attentionBackwardKeyValueKernel, shared, ctx.rank));
    attentionBackwardKeyValueKernel<<<kvBlocks, warps * 32, shared, ctx.stream>>>(
        s, c.F("dout"), a.qF(), a.kF(), a.vF(), c.F("lse"), D, a.dkF(), a.dvF());
    return LLCDIST_CUDA_LAUNCHED("attention_bwd (dk, dv)", ctx.rank);
  });
}

}  // namespace llcdist::rt::cuda
