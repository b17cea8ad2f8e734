// The embedding family's CUDA kernels (the CPU reference: src/kernels/Embedding.cpp): token embedding
// forward (a gather, vocabulary-parallel with a VocabShard) and weight gradient (a scatter-add without
// atomics, below), GPT-2's learned positions forward and weight gradient (one thread per (s, h),
// summing over b in order); and their kernel-table entries. Tables, activations and gradients are f32
// or bf16 (FloatRef.cuh). An id outside the global vocabulary cannot be reported synchronously: the
// kernels store kDeviceIdOutOfRange into the context's deviceError (the forward writes a zero row).
//
// The token embedding's gradient dtable[id_m, h] += dout[m, h], m = 0..M-1, is computed as the CPU
// adds it, so its bits are the CPU's: each table element starts from its value (zero without
// accumulate) and adds the rows of its id in increasing m, in f32, rounded once where dtable is bf16.
// To do that in parallel, the (local id, m) pairs are sorted by id with CUB's radix sort, which is
// stable (equal ids keep increasing m); then one block per run of equal ids adds that id's rows, a
// thread per column. Ids of another shard's rows sort last and are skipped.
//
// Attr `scale` (Gemma's embedding multiplier; EmbeddingParams::scale, never with wpe): the forward writes
// the gathered value times float(scale) and the gradient adds float(scale)·dout, the product rounded
// to f32 before the sum (__fmul_rn: no fused multiply-add), as the CPU computes them; 1 is the plain
// gather and scatter-add.
#include "llcdist/runtime/KernelChecks.h"
#include "cuda/CudaKernels.h"
#include "cuda/kernels/FloatRef.cuh"

#include <cub/device/device_radix_sort.cuh>

#include <string>

namespace llcdist::rt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kColumnThreads = 256;  // threads of a block that adds one id's rows

#define LLCDIST_GRID_STRIDE(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// out[m, h] = table[ids[m] - begin, h] for an id of this shard's rows [begin, begin + V), 0 for another
// shard's id; an id outside [0, global) is an error (its row is written as zeros). With wpe (the fused
// position embedding, S > 0, never sharded): + wpe[offset + m % S, h], in f32 on the table's value, rounded once
// (the unfused pair's bits: the gathered row is exact in out's dtype).
__global__ void embeddingFwdKernel(const int32_t* ids, FloatRef table, FloatRef out, FloatRef wpe, int64_t M, int64_t V,
                                   int64_t H, int64_t S, int64_t offset, int64_t begin, int64_t global,
                                   int* deviceError, float scale) {
  LLCDIST_GRID_STRIDE(i, M * H) {
    const int64_t m = i / H, h = i - m * H;
    const int64_t id = ids[m];
    if (id < 0 || id >= global) {
      if (deviceError) *deviceError = kDeviceIdOutOfRange;
      out.set(i, 0.0f);
      continue;
    }
    const int64_t local = id - begin;
    float row = local >= 0 && local < V ? table[local * H + h] : 0.0f;  // another shard's row: this shard adds 0
    if (scale != 1.0f) row = __fmul_rn(row, scale);
    out.set(i, wpe.p ? row + wpe[(offset + m % S) * H + h] : row);
  }
}

// The sort's input: key m = this shard's local row of ids[m], or V (sorts last, skipped) for another
// shard's id, for padding_idx (no gradient) and for an invalid one (reported); value m = m.
__global__ void embeddingKeysKernel(const int32_t* ids, uint32_t* keys, int32_t* rows, int64_t M, int64_t V,
                                    int64_t begin, int64_t global, int64_t paddingIdx, int* deviceError) {
  LLCDIST_GRID_STRIDE(m, M) {
    const int64_t id = ids[m];
    int64_t key = V;  // V: no row of this shard (another shard's id, or padding_idx)
    if (id < 0 || id >= global) {
      if (deviceError) *deviceError = kDeviceIdOutOfRange;
    } else if (id != paddingIdx && id - begin >= 0 && id - begin < V) {
      key = id - begin;
    }
    keys[m] = uint32_t(key);
    rows[m] = int32_t(m);
  }
}

// Block i (grid-stride): when sorted position i starts a run of equal keys (and the key is a row of this
// shard), dtable[key, h] += dout[rows[j], h] for the run's j in order, for every column h.
__global__ void embeddingRunsKernel(const uint32_t* keys, const int32_t* rows, FloatRef dout, FloatRef dtable,
                                    int64_t M, int64_t V, int64_t H, float scale) {
  for (int64_t i = blockIdx.x; i < M; i += gridDim.x) {
    const uint32_t key = keys[i];
    if (int64_t(key) >= V || (i > 0 && keys[i - 1] == key)) continue;  // block-uniform
    for (int64_t h = threadIdx.x; h < H; h += blockDim.x) {
      float acc = dtable[int64_t(key) * H + h];
      if (scale == 1.0f) {
        for (int64_t j = i; j < M && keys[j] == key; ++j) acc += dout[int64_t(rows[j]) * H + h];
      } else {
        for (int64_t j = i; j < M && keys[j] == key; ++j) acc += __fmul_rn(scale, dout[int64_t(rows[j]) * H + h]);
      }
      dtable.set(int64_t(key) * H + h, acc);
    }
  }
}

// The position of row s (PositionRuns::at): first + s below split, second + (s − split) from it.
struct RowPositions {
  int64_t first, split, second;
};
__device__ __forceinline__ int64_t positionOf(const RowPositions& p, int64_t s) {
  return s < p.split ? p.first + s : p.second + (s - p.split);
}
RowPositions rowPositions(const EmbeddingParams& p) { return {p.posBegin, p.posSplit, p.posBegin2}; }

// y[b, s, h] = x[b, s, h] + wpe[pos(s), h] (y may alias x).
__global__ void posEmbeddingFwdKernel(FloatRef x, FloatRef wpe, FloatRef y, int64_t B, int64_t S, int64_t H,
                                      RowPositions pos) {
  LLCDIST_GRID_STRIDE(i, B * S * H) {
    const int64_t bs = i / H, h = i - bs * H;
    const int64_t s = bs % S;
    y.set(i, x[i] + wpe[positionOf(pos, s) * H + h]);
  }
}

// dwpe[pos(s), h] += dy[b, s, h] for b = 0..B-1 in order (the CPU's order); one thread per (s, h) (the
// rows' positions are distinct).
__global__ void posEmbeddingBwdKernel(FloatRef dy, FloatRef dwpe, int64_t B, int64_t S, int64_t H, RowPositions pos) {
  LLCDIST_GRID_STRIDE(i, S * H) {
    const int64_t s = i / H;
    const int64_t at = positionOf(pos, s) * H + (i - s * H);
    float acc = dwpe[at];
    for (int64_t b = 0; b < B; ++b) acc += dy[b * S * H + i];
    dwpe.set(at, acc);
  }
}

#undef LLCDIST_GRID_STRIDE


using P = EmbeddingParams;
using Ctx = CudaKernelContext;

// A scale with the fused position embedding is refused at plan load (src/ops/Embedding.cpp); a call
// bound otherwise is refused here too, before anything is launched.
Status checkScale(const char* what, const P& p, bool fusedPositions) {
  if (fusedPositions && p.scale != 1.0)
    return Status::invalidArgument(std::string(what) + ": scale cannot be combined with the fused position embedding");
  return Status::ok();
}

Status embeddingFwd(const KernelCall& c, const P& p, const Ctx& ctx) {
  LLCDIST_RETURN_IF_ERROR(checkVocabShard(p.vocabShard));
  const int64_t n = p.M * p.H;
  if (n == 0) return Status::ok();
  const FloatRef wpe = floatRef(c, "wpe");
  LLCDIST_RETURN_IF_ERROR(checkScale("embedding_fwd", p, wpe.p != nullptr));
  if (wpe.p) LLCDIST_RETURN_IF_ERROR(checkPositionRange(p.S, p.P, p.posBegin));
  embeddingFwdKernel<<<gridFor(n, kThreads), kThreads, 0, ctx.stream>>>(
      c.I("ids"), floatRef(c, "table"), floatRef(c, "out"), wpe, p.M, p.V, p.H, p.S, p.posBegin,
      p.vocabShard.index * p.V, p.V * p.vocabShard.count, ctx.deviceError, float(p.scale));
  return LLCDIST_CUDA_LAUNCHED("embedding_fwd", ctx.rank);
}

Status posEmbeddingBwdOf(const FloatRef& dy, const FloatRef& dwpe, const P& p, const Ctx& ctx);

Status embeddingBwd(const KernelCall& c, const P& p, const Ctx& ctx) {
  LLCDIST_RETURN_IF_ERROR(checkVocabShard(p.vocabShard));
  LLCDIST_RETURN_IF_ERROR(checkScale("embedding_bwd_weight", p, floatRef(c, "dwpe").p != nullptr));
  if (const FloatRef dwpe = floatRef(c, "dwpe"); dwpe.p)  // the fused position embedding's gradient first
    LLCDIST_RETURN_IF_ERROR(posEmbeddingBwdOf(floatRef(c, "dout"), dwpe, p, ctx));
  const FloatRef dtable = floatRef(c, "dtable");
  if (!p.accumulate && p.V * p.H > 0)
    LLCDIST_CUDA_TRY(cudaMemsetAsync(dtable.p, 0, size_t(p.V * p.H) * (dtable.bf16 ? 2 : 4), ctx.stream), ctx.rank);
  if (p.M == 0 || p.H == 0) return Status::ok();
  if (p.M > INT32_MAX || p.V >= INT32_MAX)
    return Status::invalidArgument("embedding_bwd_weight: M = " + std::to_string(p.M) + " rows or V = " +
                                   std::to_string(p.V) + " table rows do not fit the sort's 32-bit keys");
  if (!ctx.scratch) return Status::internal("embedding_bwd_weight: no device scratch in the CUDA kernel context");
  // Scratch: keys and rows in, keys and rows sorted, then CUB's temporary storage.
  int endBit = 1;
  while (endBit < 31 && (int64_t(1) << endBit) <= p.V) ++endBit;  // keys are in [0, V]
  size_t tempBytes = 0;
  LLCDIST_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, tempBytes, static_cast<const uint32_t*>(nullptr),
                                                   static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                   static_cast<int32_t*>(nullptr), int(p.M), 0, endBit, ctx.stream),
                   ctx.rank);
  const int64_t arrayBytes = (p.M * 4 + 255) / 256 * 256;
  LLCDIST_ASSIGN_OR_RETURN(void* scratch, ctx.scratch->get(4 * arrayBytes + int64_t(tempBytes)));
  char* base = static_cast<char*>(scratch);
  uint32_t* keysIn = reinterpret_cast<uint32_t*>(base);
  int32_t* rowsIn = reinterpret_cast<int32_t*>(base + arrayBytes);
  uint32_t* keys = reinterpret_cast<uint32_t*>(base + 2 * arrayBytes);
  int32_t* rows = reinterpret_cast<int32_t*>(base + 3 * arrayBytes);
  void* temp = base + 4 * arrayBytes;
  embeddingKeysKernel<<<gridFor(p.M, kThreads), kThreads, 0, ctx.stream>>>(
      c.I("ids"), keysIn, rowsIn, p.M, p.V, p.vocabShard.index * p.V, p.V * p.vocabShard.count, p.paddingIdx,
      ctx.deviceError);
  LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("embedding_bwd_weight (keys)", ctx.rank));
  LLCDIST_CUDA_TRY(cub::DeviceRadixSort::SortPairs(temp, tempBytes, keysIn, keys, rowsIn, rows, int(p.M), 0, endBit,
                                                   ctx.stream),
                   ctx.rank);
  embeddingRunsKernel<<<gridFor(p.M, 1), kColumnThreads, 0, ctx.stream>>>(keys, rows, floatRef(c, "dout"), dtable,
                                                                         p.M, p.V, p.H, float(p.scale));
  return LLCDIST_CUDA_LAUNCHED("embedding_bwd_weight", ctx.rank);
}

Status posEmbeddingFwd(const KernelCall& c, const P& p, const Ctx& ctx) {
  LLCDIST_RETURN_IF_ERROR(checkPositionRuns(p.S, p.P, p.positions()));
  const int64_t n = p.B * p.S * p.H;
  if (n == 0) return Status::ok();
  posEmbeddingFwdKernel<<<gridFor(n, kThreads), kThreads, 0, ctx.stream>>>(
      floatRef(c, "x"), floatRef(c, "wpe"), floatRef(c, "y"), p.B, p.S, p.H, rowPositions(p));
  return LLCDIST_CUDA_LAUNCHED("pos_embedding_fwd", ctx.rank);
}

Status posEmbeddingBwd(const KernelCall& c, const P& p, const Ctx& ctx) {
  return posEmbeddingBwdOf(floatRef(c, "dy"), floatRef(c, "dwpe"), p, ctx);
}

Status posEmbeddingBwdOf(const FloatRef& dy, const FloatRef& dwpe, const P& p, const Ctx& ctx) {
  LLCDIST_RETURN_IF_ERROR(checkPositionRuns(p.S, p.P, p.positions()));
  // accumulate=false: every row is zeroed first, so rows at no position of the call end at 0 and the
  // others sum from 0 (the CPU's fill then add).
  if (!p.accumulate && p.P * p.H > 0)
    LLCDIST_CUDA_TRY(cudaMemsetAsync(dwpe.p, 0, size_t(p.P * p.H) * (dwpe.bf16 ? 2 : 4), ctx.stream), ctx.rank);
  const int64_t n = p.S * p.H;
  if (n == 0) return Status::ok();
  posEmbeddingBwdKernel<<<gridFor(n, kThreads), kThreads, 0, ctx.stream>>>(dy, dwpe, p.B, p.S, p.H, rowPositions(p));
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
