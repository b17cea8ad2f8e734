// The moe family's CUDA kernels (the CPU reference: src/kernels/Moe.cpp; semantics: PlanSchema.h
// "Mixture of experts") and their kernel-table entries; the router's and the load-balancing loss's are in
// MoeRouter.cu. Every float role is f32 or bf16 (FloatRef.cuh), computed in f32 (f64 for long dot
// products), each written value rounded once; experts, slots and group_sizes are i32. Deterministic: no
// float atomics (integer ones only: counts and the lowest bad token); reductions in a fixed order.
//  - moe_permute: a stable counting sort as CUB's radix sort of (expert, assignment) pairs, stable, so
//    equal experts keep (t, j) order. One thread then finds each expert's first sorted position by
//    binary search of the sorted keys, its kept rows min(n_e, C) (group_sizes; C = capacity, T·k
//    without) and their first row (the kept rows' prefix sums); sorted position i of expert e is its
//    rank r = i - start_e, kept (slot off_e + r) when r < C, else dropped (slot -1). xp a block per row:
//    the row's expert by binary search of the offsets, its token from the sorted values; rows past the
//    kept ones zero. An expert id outside [0, E) sorts last, gets slot -1 and no row, and is reported
//    (kDeviceMoeExpertOutOfRange with the lowest such token and its id: the CPU's message).
//  - moe_unpermute / _bwd: a thread per (t, h) sums its k rows in j order; the backward's dweights are
//    block dot products, dxp one thread per (row, h) of the N rows through the inverse of slots and each
//    row's count of slots naming it (rows of no slot: 0; a row of several slots, which no permutation
//    gives: the CPU's f32 sum of their terms in assignment order). A slot -1 (dropped) adds nothing
//    (dweights 0); one < -1 or >= N is skipped and reported (kDeviceMoeSlotOutOfRange /
//    kDeviceMoeSlotBwdOutOfRange with the lowest such token and its slot).
//  - grouped_linear_*: the group sizes stay on the device (moe_permute wrote them): one thread turns
//    them into clamped row offsets and row-tile starts; the forward / input-gradient GEMM runs 32×32
//    output tiles that never cross an expert (a tile finds its expert by binary search of the tile
//    starts), rows past the sizes' sum are zeroed; the weight gradient runs a 32×32 tile of dw[e] per
//    block, summing the expert's rows in order. Sizes are clamped to [0, rows left]: bad sizes never
//    read or write out of bounds.
//  - sigmoid_gate_fwd: elementwise (y may alias x); _bwd: a block per row (dx may alias dy: each thread
//    writes only elements it read before the block's sum).
//  - moe_chunk_transpose (expert parallelism): the splits stay on the device (no host sync): one thread
//    clamps them (a negative split 0, reported; the sum cut at N, reported: kDeviceSplitOutOfRange) and
//    writes each chunk's source and destination first row in y's chunk order, and col_sizes; then a
//    block per row of y finds its chunk by binary search of the destination starts and copies the row
//    (rows past the sum: zero). f32 or bf16 rows copied as they are.
#include "cuda/kernels/MoeCommon.cuh"

#include <cub/device/device_radix_sort.cuh>

#include <cstdint>
#include <string>

namespace llcdist::rt::cuda {
namespace {

constexpr int kTile = 32;                              // grouped GEMM tiles: kTile × kTile outputs, kTile-deep steps
constexpr int kTileRowsPerPass = kRowThreads / kTile;  // a tile's rows one pass of the block covers

#define LLCDIST_GRID_STRIDE(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// ---- moe_permute -----------------------------------------------------------------------------------

// The sort's input: key n = experts[n], or E (sorts last) for an id outside [0, E), reported; value n = n.
__global__ void permuteKeysKernel(const int32_t* experts, uint32_t* keys, int32_t* vals, int64_t N, int64_t E,
                                  int64_t k, DeviceReport report) {
  LLCDIST_GRID_STRIDE(n, N) {
    const int64_t e = experts[n];
    const bool bad = e < 0 || e >= E;
    if (bad) reportMoe(report, kDeviceMoeExpertOutOfRange, n / k, e);
    keys[n] = uint32_t(bad ? E : e);
    vals[n] = int32_t(n);
  }
}

// The first i with keys[i] >= key (keys sorted).
__device__ int64_t lowerBound(const uint32_t* keys, int64_t N, uint32_t key) {
  int64_t lo = 0, hi = N;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (keys[mid] < key)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

// The last i in [0, n) with a[i] <= v (a non-decreasing, a[0] <= v): the chunk, expert or tile a row
// (or tile) index v falls in, from its chunks' starting offsets a.
__device__ int64_t lastAtMost(const int64_t* a, int64_t n, int64_t v) {
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (a[mid] <= v)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// One thread (E is small): start[e] = expert e's first sorted position; sizes[e] = its kept rows
// min(n_e, C); off[e] = its first row (Σ of the kept rows before it), off[E] = the kept rows' sum.
__global__ void permuteGroupsKernel(const uint32_t* keys, int64_t N, int64_t E, int64_t C, int64_t* start, int64_t* off,
                                    int32_t* sizes) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  int64_t rows = 0, first = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t next = lowerBound(keys, N, uint32_t(e + 1)), n = next - first;
    const int64_t kept = n < C ? n : C;
    start[e] = first;
    off[e] = rows;
    sizes[e] = int32_t(kept);
    rows += kept;
    first = next;
  }
  off[E] = rows;
}

// slots[vals[i]] = off[e] + r for sorted position i of expert e at rank r = i - start[e] < C; -1 for a
// dropped assignment (r >= C) or an id outside [0, E).
__global__ void permuteSlotsKernel(const uint32_t* keys, const int32_t* vals, const int64_t* start, const int64_t* off,
                                   int32_t* slots, int64_t N, int64_t E, int64_t C) {
  LLCDIST_GRID_STRIDE(i, N) {
    const int64_t e = keys[i];
    int32_t slot = -1;
    if (e < E && i - start[e] < C) slot = int32_t(off[e] + (i - start[e]));
    slots[vals[i]] = slot;
  }
}

// A block per row of xp (R rows, grid-stride): a kept row copies its token's x (its expert the last e
// with off[e] <= row, its sorted position start[e] + row - off[e]); rows from off[E] on are zero.
__global__ void permuteRowsKernel(FloatRef x, const int32_t* vals, const int64_t* start, const int64_t* off,
                                  FloatRef xp, int64_t R, int64_t H, int64_t E, int64_t k) {
  const int64_t kept = off[E];
  for (int64_t row = blockIdx.x; row < R; row += gridDim.x) {
    if (row >= kept) {
      for (int64_t h = threadIdx.x; h < H; h += blockDim.x) xp.set(row * H + h, 0.0f);
      continue;
    }
    const int64_t e = lastAtMost(off, E, row);
    const int64_t t = vals[start[e] + (row - off[e])] / k;
    for (int64_t h = threadIdx.x; h < H; h += blockDim.x) xp.set(row * H + h, x[t * H + h]);
  }
}

// ---- moe_unpermute / moe_unpermute_bwd -------------------------------------------------------------

// y[t, h] = Σ_j w[t, j]·xp[slots[t, j], h] in j order (weights absent: 1); R rows of xp. A slot -1 adds
// nothing; one outside [-1, R) is skipped and reported.
__global__ void unpermuteKernel(FloatRef xp, const int32_t* slots, FloatRef weights, FloatRef y, int64_t T, int64_t H,
                                int64_t k, int64_t R, DeviceReport report) {
  LLCDIST_GRID_STRIDE(i, T * H) {
    const int64_t t = i / H, h = i - t * H;
    float acc = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t s = slots[t * k + j];
      if (s < 0 || s >= R) {
        if (s != -1 && h == 0) reportMoe(report, kDeviceMoeSlotOutOfRange, t, s);
        continue;
      }
      const float v = xp[s * H + h];
      acc += weights ? weights[t * k + j] * v : v;
    }
    y.set(i, acc);
  }
}

// Block per assignment n = (t, j) of A = T·k: dweights[n] = dy[t]·xp[slots[n]] (f64 sum); inverse[slots[n]]
// = n and hits[slots[n]] counts it (an integer atomic: the count is exact whatever the order; inverse is
// read only for a row of one hit). A slot -1: dweights 0; one outside [-1, R): dweights 0, reported.
__global__ void unpermuteBwdDotKernel(FloatRef dy, FloatRef xp, const int32_t* slots, FloatRef dweights,
                                      int32_t* inverse, int32_t* hits, int64_t A, int64_t R, int64_t H, int64_t k,
                                      DeviceReport report) {
  for (int64_t n = blockIdx.x; n < A; n += gridDim.x) {
    const int64_t s = slots[n];
    if (s < 0 || s >= R) {  // block-uniform
      if (threadIdx.x == 0) {
        if (s != -1) reportMoe(report, kDeviceMoeSlotBwdOutOfRange, n / k, s);
        dweights.set(n, 0.0f);
      }
      continue;
    }
    const FloatRef dyr = dy.at((n / k) * H), xr = xp.at(s * H);
    double sum = 0.0;
    for (int64_t h = threadIdx.x; h < H; h += blockDim.x) sum += double(dyr[h]) * xr[h];
    sum = blockSum(sum);
    if (threadIdx.x == 0) {
      dweights.set(n, float(sum));
      inverse[s] = int32_t(n);
      atomicAdd(hits + s, 1);
    }
  }
}

// dxp[r, h] over the R rows, as the CPU: 0 for a row of no assignment; w[n]·dy[n / k, h] for the one
// assignment n of a row (inverse[r]); for a row of several, the first term w·dy, then each next one added
// in assignment order, dx + w·dy (f32, the product rounded before the sum: no FMA), over the A
// assignments' slots.
__global__ void unpermuteBwdRowsKernel(FloatRef dy, FloatRef weights, const int32_t* slots, const int32_t* inverse,
                                       const int32_t* hits, FloatRef dxp, int64_t R, int64_t H, int64_t k, int64_t A) {
  LLCDIST_GRID_STRIDE(i, R * H) {
    const int64_t r = i / H, h = i - r * H;
    const int32_t count = hits[r];
    if (count == 0) {
      dxp.set(i, 0.0f);
      continue;
    }
    if (count == 1) {
      const int64_t n = inverse[r];
      dxp.set(i, weights[n] * dy[(n / k) * H + h]);
      continue;
    }
    float acc = 0.0f;
    bool first = true;
    for (int64_t n = 0; n < A; ++n) {
      if (slots[n] != r) continue;
      acc = first ? weights[n] * dy[(n / k) * H + h] : __fadd_rn(acc, __fmul_rn(weights[n], dy[(n / k) * H + h]));
      first = false;
    }
    dxp.set(i, acc);
  }
}

// ---- grouped_linear_* ------------------------------------------------------------------------------

// off[e] = Σ_{e' < e} sizes, each size clamped to [0, N - off[e]] (so off[E] <= N); tileStart[e] = Σ_{e' < e}
// ceil(size / kTile), the row tiles of the experts before e. One thread: E is small.
__global__ void groupOffsetsKernel(const int32_t* sizes, int64_t E, int64_t N, int64_t* off, int64_t* tileStart) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  int64_t rows = 0, tiles = 0;
  for (int64_t e = 0; e < E; ++e) {
    off[e] = rows;
    tileStart[e] = tiles;
    int64_t s = sizes[e];
    s = s < 0 ? 0 : (s > N - rows ? N - rows : s);
    rows += s;
    tiles += (s + kTile - 1) / kTile;
  }
  off[E] = rows;
  tileStart[E] = tiles;
}

// The row tiles' GEMM: for the rows [off[e], off[e+1]) of expert e, out[n, c] = Σ_r a[n, r]·B_e(c, r), with
// B_e(c, r) = b[e·bE + c·bc + r·br] (forward: w[e] as [O, K], c = o, r = k; input gradient: c = k, r = o).
// Block (tile, column tile); thread (ty, tx) computes columns c0 + tx of the rows ty + kTileRowsPerPass·i.
__global__ void groupedRowsGemmKernel(FloatRef a, FloatRef b, FloatRef out, const int64_t* off,
                                      const int64_t* tileStart, int64_t E, int64_t C, int64_t R, int64_t bE, int64_t bc,
                                      int64_t br) {
  __shared__ float as[kTile][kTile + 1];  // [row][r]
  __shared__ float bs[kTile][kTile + 1];  // [c][r]
  const int64_t tile = blockIdx.x;
  if (tile >= tileStart[E]) return;                  // block-uniform: past the experts' tiles
  const int64_t e = lastAtMost(tileStart, E, tile);  // an empty expert has no tiles
  const int64_t row0 = off[e] + (tile - tileStart[e]) * kTile, rowEnd = off[e + 1];
  const int64_t c0 = int64_t(blockIdx.y) * kTile;
  const int tx = int(threadIdx.x) % kTile, ty = int(threadIdx.x) / kTile;
  const FloatRef be = b.at(e * bE);
  float acc[kTile / kTileRowsPerPass] = {};
  for (int64_t r0 = 0; r0 < R; r0 += kTile) {
    for (int i = 0; i < kTile / kTileRowsPerPass; ++i) {
      const int q = ty + kTileRowsPerPass * i;
      const int64_t n = row0 + q, r = r0 + tx;
      as[q][tx] = n < rowEnd && r < R ? a[n * R + r] : 0.0f;
      // bs[c][r] from B's contiguous index, whichever it is (coalesced loads).
      const int cq = br == 1 ? q : tx, rq = br == 1 ? tx : q;
      const int64_t c = c0 + cq, rr = r0 + rq;
      bs[cq][rq] = c < C && rr < R ? be[c * bc + rr * br] : 0.0f;
    }
    __syncthreads();
    for (int r = 0; r < kTile; ++r)
      for (int i = 0; i < kTile / kTileRowsPerPass; ++i) acc[i] += as[ty + kTileRowsPerPass * i][r] * bs[tx][r];
    __syncthreads();
  }
  for (int i = 0; i < kTile / kTileRowsPerPass; ++i) {
    const int64_t n = row0 + ty + kTileRowsPerPass * i, c = c0 + tx;
    if (n < rowEnd && c < C) out.set(n * C + c, acc[i]);
  }
}

// out[n, c] = 0 for the rows n >= off[E] (past the sizes' sum).
__global__ void zeroTailRowsKernel(FloatRef out, const int64_t* off, int64_t E, int64_t N, int64_t C) {
  const int64_t first = off[E];
  LLCDIST_GRID_STRIDE(i, (N - first) * C) out.set(first * C + i, 0.0f);
}

// dw[e, o, k] (+)= Σ over expert e's rows n, in order, of dy[n, o]·x[n, k]. Block (k tile, o tile, e);
// thread (ty, tx) computes k = k0 + tx for o = o0 + ty + kTileRowsPerPass·i. With accumulate an expert of
// no rows keeps dw[e] as it is; without, it is zero.
__global__ void groupedWeightGemmKernel(FloatRef dy, FloatRef x, FloatRef dw, const int64_t* off, int64_t K, int64_t O,
                                        bool accumulate) {
  __shared__ float dys[kTile][kTile + 1];  // [row][o]
  __shared__ float xs[kTile][kTile + 1];   // [row][k]
  const int64_t e = blockIdx.z, k0 = int64_t(blockIdx.x) * kTile, o0 = int64_t(blockIdx.y) * kTile;
  const int64_t begin = off[e], end = off[e + 1];
  if (accumulate && begin == end) return;  // block-uniform
  const int tx = int(threadIdx.x) % kTile, ty = int(threadIdx.x) / kTile;
  float acc[kTile / kTileRowsPerPass] = {};
  for (int64_t n0 = begin; n0 < end; n0 += kTile) {
    for (int i = 0; i < kTile / kTileRowsPerPass; ++i) {
      const int q = ty + kTileRowsPerPass * i;
      const int64_t n = n0 + q;
      dys[q][tx] = n < end && o0 + tx < O ? dy[n * O + o0 + tx] : 0.0f;
      xs[q][tx] = n < end && k0 + tx < K ? x[n * K + k0 + tx] : 0.0f;
    }
    __syncthreads();
    for (int r = 0; r < kTile; ++r)
      for (int i = 0; i < kTile / kTileRowsPerPass; ++i) acc[i] += dys[r][ty + kTileRowsPerPass * i] * xs[r][tx];
    __syncthreads();
  }
  for (int i = 0; i < kTile / kTileRowsPerPass; ++i) {
    const int64_t o = o0 + ty + kTileRowsPerPass * i, k = k0 + tx;
    if (o >= O || k >= K) continue;
    const int64_t at = (e * O + o) * K + k;
    dw.set(at, accumulate ? dw[at] + acc[i] : acc[i]);
  }
}

// ---- sigmoid_gate_fwd / _bwd -----------------------------------------------------------------------

__device__ __forceinline__ float sigmoidOf(float g) { return 1.0f / (1.0f + expf(-g)); }

// y[t, h] = sigmoid(gate[t])·x[t, h] (y may alias x).
__global__ void sigmoidGateFwdKernel(FloatRef gate, FloatRef x, FloatRef y, int64_t T, int64_t H) {
  LLCDIST_GRID_STRIDE(i, T * H) y.set(i, sigmoidOf(gate[i / H]) * x[i]);
}

// Block per row t: dgate[t] = float(s·(1 - s)·Σ_h dy·x), the product and the sum in f64 as the CPU's, dx =
// s·dy (dx may alias dy: each thread writes the elements it read before blockSum's barrier).
__global__ void sigmoidGateBwdKernel(FloatRef dy, FloatRef gate, FloatRef x, FloatRef dgate, FloatRef dx, int64_t T,
                                     int64_t H) {
  for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
    const FloatRef dyr = dy.at(t * H), xr = x.at(t * H), dxr = dx.at(t * H);
    double sum = 0.0;
    for (int64_t h = threadIdx.x; h < H; h += blockDim.x) sum += double(dyr[h]) * xr[h];
    sum = blockSum(sum);
    const float s = sigmoidOf(gate[t]);
    if (threadIdx.x == 0) dgate.set(t, float(double(s) * (1.0 - double(s)) * sum));
    for (int64_t h = threadIdx.x; h < H; h += blockDim.x) dxr.set(h, s * dyr[h]);
  }
}

// ---- moe_chunk_transpose -----------------------------------------------------------------------------

// The r × c grid's chunks in y's order q (column-major when !inverse, row-major when inverse): dst[q] its
// first row in y, src[q] in x (x holds them in the other order); dst[r·c] = the rows' sum. Splits clamped
// (negative: 0; cut at N in x's order), either reported. colSizes[j] (when not null) = Σ_i of the clamped
// splits. One thread: r·c is small (experts × ep members).
__global__ void chunkOffsetsKernel(const int32_t* splits, int64_t R, int64_t C, int64_t N, bool inverse, int64_t* dst,
                                   int64_t* src, int32_t* colSizes, int* deviceError) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  const int64_t RC = R * C;
  // x's order: row-major when !inverse. Pass 1: clamp in x's order, writing sizes into src (temporarily).
  int64_t at = 0;
  for (int64_t q = 0; q < RC; ++q) {
    const int64_t i = inverse ? q % R : q / C, j = inverse ? q / R : q % C;  // x's q-th chunk
    int64_t s = splits[i * C + j];
    if (s < 0 || s > N - at) {
      if (deviceError) *deviceError = kDeviceSplitOutOfRange;
      s = s < 0 ? 0 : N - at;
    }
    src[i * C + j] = at;  // x's first row of chunk (i, j), indexed by grid position for now
    dst[i * C + j] = s;   // its clamped size
    at += s;
  }
  if (colSizes)
    for (int64_t j = 0; j < C; ++j) {
      int64_t sum = 0;
      for (int64_t i = 0; i < R; ++i) sum += dst[i * C + j];
      colSizes[j] = int32_t(sum);
    }
  // Pass 2: y's order. Each grid position's (x start, size) moves to index q of y's order, in place:
  // gather into the tail first would need more scratch, so walk y's order with a temporary copy held in
  // the upper half of dst / src (the caller gives 2·(r·c) + 1 slots each).
  int64_t* size = dst + RC + 1;
  int64_t* start = src + RC + 1;
  for (int64_t k = 0; k < RC; ++k) size[k] = dst[k], start[k] = src[k];
  int64_t y = 0;
  for (int64_t q = 0; q < RC; ++q) {
    const int64_t i = inverse ? q / C : q % R, j = inverse ? q % C : q / R;  // y's q-th chunk
    dst[q] = y;
    src[q] = start[i * C + j];
    y += size[i * C + j];
  }
  dst[RC] = y;
}

// A block per row of y (grid-stride over rows): its chunk q is the last with dst[q] <= row; rows from
// dst[r·c] on are zero.
__global__ void chunkRowsKernel(FloatRef x, FloatRef y, const int64_t* dst, const int64_t* src, int64_t RC, int64_t N,
                                int64_t H) {
  const int64_t total = dst[RC];
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    if (row >= total) {
      for (int64_t h = threadIdx.x; h < H; h += blockDim.x) y.set(row * H + h, 0.0f);
      continue;
    }
    const int64_t q = lastAtMost(dst, RC, row);
    const int64_t from = src[q] + (row - dst[q]);
    for (int64_t h = threadIdx.x; h < H; h += blockDim.x) y.set(row * H + h, x[from * H + h]);
  }
}

#undef LLCDIST_GRID_STRIDE

Status moePermute(const KernelCall& c, const P& p, const Ctx& ctx) {
  const char* what = "moe_permute";
  LLCDIST_RETURN_IF_ERROR(checkSizes(what, p));
  const int64_t N = p.T * p.k, R = moePermuteRows(p);
  const int64_t C = p.capacity > 0 ? p.capacity : N;  // dropless: no expert has more than T·k assignments
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "x", p.T * p.H));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "experts", N));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "xp", R * p.H));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "slots", N));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "group_sizes", p.E));
  int32_t* sizes = c.I("group_sizes");
  if (N == 0) {  // no assignments: every group empty, every row of xp (E·capacity under a capacity) zero
    if (p.E > 0) LLCDIST_CUDA_TRY(cudaMemsetAsync(sizes, 0, size_t(p.E) * 4, ctx.stream), ctx.rank);
    const FloatRef xp = floatRef(c, "xp");
    if (R * p.H > 0)
      LLCDIST_CUDA_TRY(cudaMemsetAsync(xp.p, 0, size_t(R * p.H) * (xp.bf16 ? 2 : 4), ctx.stream), ctx.rank);
    return Status::ok();
  }
  if (!ctx.scratch) return Status::internal("moe_permute: no device scratch in the CUDA kernel context");
  // Scratch: keys and values in, sorted, CUB's temporary storage, then the experts' start and off.
  int endBit = 1;
  while (endBit < 32 && (int64_t(1) << endBit) <= p.E) ++endBit;  // keys are in [0, E]
  size_t tempBytes = 0;
  LLCDIST_CUDA_TRY(
      cub::DeviceRadixSort::SortPairs(nullptr, tempBytes, static_cast<const uint32_t*>(nullptr),
                                      static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                      static_cast<int32_t*>(nullptr), int(N), 0, endBit, ctx.stream),
      ctx.rank);
  const int64_t arrayBytes = (N * 4 + 255) / 256 * 256, tempAligned = (int64_t(tempBytes) + 255) / 256 * 256;
  const int64_t groupBytes = (2 * p.E + 1) * int64_t(sizeof(int64_t));
  LLCDIST_ASSIGN_OR_RETURN(void* scratch, ctx.scratch->get(4 * arrayBytes + tempAligned + groupBytes));
  char* base = static_cast<char*>(scratch);
  uint32_t* keysIn = reinterpret_cast<uint32_t*>(base);
  int32_t* valsIn = reinterpret_cast<int32_t*>(base + arrayBytes);
  uint32_t* keys = reinterpret_cast<uint32_t*>(base + 2 * arrayBytes);
  int32_t* vals = reinterpret_cast<int32_t*>(base + 3 * arrayBytes);
  int64_t* start = reinterpret_cast<int64_t*>(base + 4 * arrayBytes + tempAligned);
  int64_t* off = start + p.E;  // E + 1
  permuteKeysKernel<<<gridFor(N, kThreads), kThreads, 0, ctx.stream>>>(c.I("experts"), keysIn, valsIn, N, p.E, p.k,
                                                                       deviceReport(ctx));
  LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("moe_permute (keys)", ctx.rank));
  LLCDIST_CUDA_TRY(cub::DeviceRadixSort::SortPairs(base + 4 * arrayBytes, tempBytes, keysIn, keys, valsIn, vals, int(N),
                                                   0, endBit, ctx.stream),
                   ctx.rank);
  permuteGroupsKernel<<<1, 1, 0, ctx.stream>>>(keys, N, p.E, C, start, off, sizes);
  LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("moe_permute (group sizes)", ctx.rank));
  permuteSlotsKernel<<<gridFor(N, kThreads), kThreads, 0, ctx.stream>>>(keys, vals, start, off, c.I("slots"), N, p.E,
                                                                        C);
  LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("moe_permute (slots)", ctx.rank));
  if (p.H == 0) return Status::ok();
  permuteRowsKernel<<<rowBlocks(R), kRowThreads, 0, ctx.stream>>>(floatRef(c, "x"), vals, start, off, floatRef(c, "xp"),
                                                                  R, p.H, p.E, p.k);
  return LLCDIST_CUDA_LAUNCHED(what, ctx.rank);
}

Status moeUnpermute(const KernelCall& c, const P& p, const Ctx& ctx) {
  const char* what = "moe_unpermute";
  LLCDIST_RETURN_IF_ERROR(checkSizes(what, p));
  const int64_t A = p.T * p.k, R = moeUnpermuteRows(p);
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "xp", R * p.H));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "slots", A));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "weights", A));  // an absent weights passes
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "y", p.T * p.H));
  if (p.T * p.H == 0) return Status::ok();
  unpermuteKernel<<<gridFor(p.T * p.H, kThreads), kThreads, 0, ctx.stream>>>(
      floatRef(c, "xp"), c.I("slots"), floatRef(c, "weights"), floatRef(c, "y"), p.T, p.H, p.k, R, deviceReport(ctx));
  return LLCDIST_CUDA_LAUNCHED(what, ctx.rank);
}

Status moeUnpermuteBwd(const KernelCall& c, const P& p, const Ctx& ctx) {
  const char* what = "moe_unpermute_bwd";
  LLCDIST_RETURN_IF_ERROR(checkSizes(what, p));
  const int64_t A = p.T * p.k, R = moeUnpermuteRows(p);
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "dy", p.T * p.H));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "xp", R * p.H));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "slots", A));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "weights", A));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "dxp", R * p.H));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "dweights", A));
  if (A == 0 && R * p.H == 0) return Status::ok();
  if (!ctx.scratch) return Status::internal("moe_unpermute_bwd: no device scratch in the CUDA kernel context");
  // Scratch: inverse, then hits, R each (inverse is read only where hits is 1, so it needs no fill).
  LLCDIST_ASSIGN_OR_RETURN(void* scratch, ctx.scratch->get((R > 0 ? 2 * R : 1) * 4));
  int32_t* inverse = static_cast<int32_t*>(scratch);
  int32_t* hits = inverse + R;
  if (R > 0) LLCDIST_CUDA_TRY(cudaMemsetAsync(hits, 0, size_t(R) * 4, ctx.stream), ctx.rank);
  if (A > 0) {
    unpermuteBwdDotKernel<<<rowBlocks(A), kRowThreads, 0, ctx.stream>>>(floatRef(c, "dy"), floatRef(c, "xp"),
                                                                        c.I("slots"), floatRef(c, "dweights"), inverse,
                                                                        hits, A, R, p.H, p.k, deviceReport(ctx));
    LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("moe_unpermute_bwd (dweights)", ctx.rank));
  }
  if (R * p.H == 0) return Status::ok();
  unpermuteBwdRowsKernel<<<gridFor(R * p.H, kThreads), kThreads, 0, ctx.stream>>>(
      floatRef(c, "dy"), floatRef(c, "weights"), c.I("slots"), inverse, hits, floatRef(c, "dxp"), R, p.H, p.k, A);
  return LLCDIST_CUDA_LAUNCHED(what, ctx.rank);
}

// The clamped row offsets and row-tile starts of the experts (groupOffsetsKernel) in scratch: off, then
// tileStart, E + 1 each.
StatusOr<int64_t*> groupOffsets(const KernelCall& c, const P& p, const Ctx& ctx, const char* what) {
  if (!ctx.scratch) return Status::internal(std::string(what) + ": no device scratch in the CUDA kernel context");
  LLCDIST_ASSIGN_OR_RETURN(void* scratch, ctx.scratch->get(2 * (p.E + 1) * int64_t(sizeof(int64_t))));
  int64_t* off = static_cast<int64_t*>(scratch);
  groupOffsetsKernel<<<1, 1, 0, ctx.stream>>>(c.I("group_sizes"), p.E, p.N, off, off + p.E + 1);
  LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED((std::string(what) + " (offsets)").c_str(), ctx.rank));
  return off;
}

Status checkGrouped(const KernelCall& c, const P& p, const char* what) {
  LLCDIST_RETURN_IF_ERROR(checkSizes(what, p));
  if (p.E > 65535) return Status::invalidArgument(sizeError(what, "more than 65535 experts"));
  const int64_t C = c.kind == schema::OpKind::kGroupedLinearBwdInput ? p.K : p.O;  // the row GEMMs' columns
  if ((C + kTile - 1) / kTile > 65535) return Status::invalidArgument(sizeError(what, "too many output columns"));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "group_sizes", p.E));
  if (c.kind == schema::OpKind::kGroupedLinearBwdWeight) {
    if ((p.O + kTile - 1) / kTile > 65535) return Status::invalidArgument(sizeError(what, "too many outputs O"));
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "dy", p.N * p.O));
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "x", p.N * p.K));
    return checkArgElems(c, "dw", p.E * p.O * p.K);
  }
  const bool fwd = c.kind == schema::OpKind::kGroupedLinearFwd;
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, fwd ? "x" : "dy", p.N * (fwd ? p.K : p.O)));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "w", p.E * p.O * p.K));
  return checkArgElems(c, fwd ? "y" : "dx", p.N * (fwd ? p.O : p.K));
}

// grouped_linear_fwd (y = x·w[e]ᵀ: columns o, reduce over k) and _bwd_input (dx = dy·w[e]: columns k,
// reduce over o), then the rows past the sizes' sum zeroed.
Status groupedRows(const KernelCall& c, const P& p, const Ctx& ctx) {
  const bool fwd = c.kind == schema::OpKind::kGroupedLinearFwd;
  const char* what = fwd ? "grouped_linear_fwd" : "grouped_linear_bwd_input";
  LLCDIST_RETURN_IF_ERROR(checkGrouped(c, p, what));
  const int64_t C = fwd ? p.O : p.K, R = fwd ? p.K : p.O;
  if (p.N * C == 0) return Status::ok();
  const FloatRef out = floatRef(c, fwd ? "y" : "dx");
  if (p.E == 0) {  // no experts: every row is past the sizes' sum
    LLCDIST_CUDA_TRY(cudaMemsetAsync(out.p, 0, size_t(p.N * C) * (out.bf16 ? 2 : 4), ctx.stream), ctx.rank);
    return Status::ok();
  }
  LLCDIST_ASSIGN_OR_RETURN(int64_t * off, groupOffsets(c, p, ctx, what));
  const int64_t* tileStart = off + p.E + 1;
  const dim3 grid(unsigned((p.N + kTile - 1) / kTile + p.E), unsigned((C + kTile - 1) / kTile));
  groupedRowsGemmKernel<<<grid, kRowThreads, 0, ctx.stream>>>(floatRef(c, fwd ? "x" : "dy"), floatRef(c, "w"), out, off,
                                                              tileStart, p.E, C, R, p.O * p.K, fwd ? p.K : 1,
                                                              fwd ? 1 : p.K);
  LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED(what, ctx.rank));
  zeroTailRowsKernel<<<gridFor(p.N * C, kThreads), kThreads, 0, ctx.stream>>>(out, off, p.E, p.N, C);
  return LLCDIST_CUDA_LAUNCHED((std::string(what) + " (tail rows)").c_str(), ctx.rank);
}

Status groupedWeight(const KernelCall& c, const P& p, const Ctx& ctx) {
  const char* what = "grouped_linear_bwd_weight";
  LLCDIST_RETURN_IF_ERROR(checkGrouped(c, p, what));
  if (p.E * p.O * p.K == 0) return Status::ok();
  LLCDIST_ASSIGN_OR_RETURN(int64_t * off, groupOffsets(c, p, ctx, what));
  const dim3 grid(unsigned((p.K + kTile - 1) / kTile), unsigned((p.O + kTile - 1) / kTile), unsigned(p.E));
  groupedWeightGemmKernel<<<grid, kRowThreads, 0, ctx.stream>>>(floatRef(c, "dy"), floatRef(c, "x"), floatRef(c, "dw"),
                                                                off, p.K, p.O, p.accumulate);
  return LLCDIST_CUDA_LAUNCHED(what, ctx.rank);
}

Status sigmoidGate(const KernelCall& c, const P& p, const Ctx& ctx) {
  const bool fwd = c.kind == schema::OpKind::kSigmoidGateFwd;
  const char* what = fwd ? "sigmoid_gate_fwd" : "sigmoid_gate_bwd";
  LLCDIST_RETURN_IF_ERROR(checkSizes(what, p));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "gate", p.T));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "x", p.T * p.H));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, fwd ? "y" : "dy", p.T * p.H));
  if (!fwd) LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "dx", p.T * p.H));
  if (!fwd) LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "dgate", p.T));
  if (p.T == 0) return Status::ok();
  if (fwd) {
    if (p.H == 0) return Status::ok();
    sigmoidGateFwdKernel<<<gridFor(p.T * p.H, kThreads), kThreads, 0, ctx.stream>>>(
        floatRef(c, "gate"), floatRef(c, "x"), floatRef(c, "y"), p.T, p.H);
  } else {
    sigmoidGateBwdKernel<<<rowBlocks(p.T), kRowThreads, 0, ctx.stream>>>(
        floatRef(c, "dy"), floatRef(c, "gate"), floatRef(c, "x"), floatRef(c, "dgate"), floatRef(c, "dx"), p.T, p.H);
  }
  return LLCDIST_CUDA_LAUNCHED(what, ctx.rank);
}

// moe_chunk_transpose: the offsets (one thread, into scratch), then the rows; no host sync. A bad split
// is clamped and reported at the next synchronize (kDeviceSplitOutOfRange).
Status moeChunkTranspose(const KernelCall& c, const P& p, const Ctx& ctx) {
  const char* what = "moe_chunk_transpose";
  if (p.r < 1 || p.c < 1 || p.N < 0 || p.H < 0 || p.N > INT32_MAX)
    return Status::invalidArgument(sizeError(what, "r, c >= 1 and 0 <= N <= 2^31 - 1 rows"));
  const int64_t RC = p.r * p.c;
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "splits", RC));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "x", p.N * p.H));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "y", p.N * p.H));
  int32_t* colSizes = c.I("col_sizes");
  if (colSizes) LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "col_sizes", p.c));
  if (!ctx.scratch) return Status::internal(std::string(what) + ": no device scratch in the CUDA kernel context");
  // dst and src: 2·RC + 1 slots each (chunkOffsetsKernel's temporaries in the upper halves).
  const int64_t slots = 2 * RC + 1;
  LLCDIST_ASSIGN_OR_RETURN(void* scratch, ctx.scratch->get(2 * slots * int64_t(sizeof(int64_t))));
  int64_t* dst = static_cast<int64_t*>(scratch);
  int64_t* src = dst + slots;
  chunkOffsetsKernel<<<1, 1, 0, ctx.stream>>>(c.I("splits"), p.r, p.c, p.N, p.inverse, dst, src, colSizes,
                                              ctx.deviceError);
  LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("moe_chunk_transpose (offsets)", ctx.rank));
  if (p.N * p.H == 0) return Status::ok();
  chunkRowsKernel<<<rowBlocks(p.N), kRowThreads, 0, ctx.stream>>>(floatRef(c, "x"), floatRef(c, "y"), dst, src, RC, p.N,
                                                                  p.H);
  return LLCDIST_CUDA_LAUNCHED(what, ctx.rank);
}

}  // namespace

// ---- CUDA kernel-table entries (CudaKernels.h) -----------------------------------------------------
void registerCudaMoeKernels(CudaKernelTable& t) {
  using K = schema::OpKind;
  addCudaKernel<P>(t, K::kMoePermute, moePermute);
  addCudaKernel<P>(t, K::kMoeUnpermute, moeUnpermute);
  addCudaKernel<P>(t, K::kMoeUnpermuteBwd, moeUnpermuteBwd);
  addCudaKernel<P>(t, K::kGroupedLinearFwd, groupedRows);
  addCudaKernel<P>(t, K::kGroupedLinearBwdInput, groupedRows);
  addCudaKernel<P>(t, K::kGroupedLinearBwdWeight, groupedWeight);
  addCudaKernel<P>(t, K::kSigmoidGateFwd, sigmoidGate);
  addCudaKernel<P>(t, K::kSigmoidGateBwd, sigmoidGate);
  addCudaKernel<P>(t, K::kMoeChunkTranspose, moeChunkTranspose);
}

}  // namespace llcdist::rt::cuda
