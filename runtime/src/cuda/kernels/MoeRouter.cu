// The moe family's router kernels (the CPU reference: src/kernels/Moe.cpp; semantics: PlanSchema.h
// "Mixture of experts"): moe_route / _bwd and the load-balancing loss's moe_router_stats / _bwd and
// moe_aux_loss / _bwd, with their kernel-table entries. Float roles f32 or bf16 (FloatRef.cuh), computed
// in f32 and f64 where the CPU reference computes in f64, each written value rounded once; experts and
// counts i32; the loss f32. Deterministic: no float atomics; reductions in a fixed order.
//  - moe_route / _bwd: one warp per token. The softmax is the CPU's: the max in f32, Σ exp(double(x -
//    max)) in f64 (warp reductions), p = float(exp(double(x - max)) / Σ); the j-th pick is the best (p,
//    expert) after the (j-1)-th in the order p descending, expert ascending (so ties go to the lower
//    index, and the picks need no set of their own); a NaN p orders as -inf, so the picks are always k
//    distinct experts in range. The picks' sums (normalize, the backward's terms) are the CPU's f64
//    expressions in j order; the backward skips a pick outside [0, E), as the CPU does.
//  - moe_router_stats: counts_out one block per expert (the block's count of its assignments, a fixed
//    tree); probs_out from each token's softmax (max, sum; a warp per token) kept in scratch, then
//    Σ_t p[t, e] one block per expert. moe_router_stats_bwd: a warp per token (Σ_e p·g a warp sum in f64).
//  - moe_aux_loss / _bwd: one block (N = Σ counts and Σ counts·probs fixed trees in f64).
#include "cuda/kernels/MoeCommon.cuh"

namespace llcdist::rt::cuda {
namespace {

// Butterfly reductions: every lane ends with the same value (f32 / f64 addition is commutative).

__device__ __forceinline__ float warpMax(float v) {
  for (int s = kWarp / 2; s > 0; s >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, s));
  return v;
}
__device__ __forceinline__ double warpSum(double v) {
  for (int s = kWarp / 2; s > 0; s >>= 1) v += __shfl_xor_sync(0xffffffffu, v, s);
  return v;
}

// One token's softmax as the CPU computes it (src/kernels/Moe.cpp softmaxRow): max in f32, sum =
// Σ_e exp(double(l[e] - max)) in f64 (each lane's terms in e order, then the warp's fixed butterfly),
// p[e] = float(exp(double(l[e] - max)) / sum).
struct Softmax {
  float max;
  double sum;
};
__device__ Softmax softmaxOf(FloatRef l, int64_t E, int lane) {
  float m = -INFINITY;
  for (int64_t e = lane; e < E; e += kWarp) m = fmaxf(m, l[e]);
  m = warpMax(m);
  double s = 0.0;
  for (int64_t e = lane; e < E; e += kWarp) s += exp(double(l[e] - m));
  return {m, warpSum(s)};
}
__device__ __forceinline__ float probOf(FloatRef l, int64_t e, const Softmax& sm) {
  return float(exp(double(l[e] - sm.max)) / sm.sum);
}

// The selection order: (p, e) before (q, f) when p > q, or p == q and e < f; a NaN p orders as -inf.
__device__ __forceinline__ float orderKey(float p) { return isnan(p) ? -INFINITY : p; }
__device__ __forceinline__ bool before(float p, int64_t e, float q, int64_t f) { return p > q || (p == q && e < f); }

// The first (p, e) after (prevKey, prevE) in the selection order, over the warp (every lane gets it;
// e == E: none is left).
__device__ void nextPick(FloatRef l, int64_t E, const Softmax& sm, int lane, float prevKey, int64_t prevE,
                         float& bestKey, int64_t& best) {
  bestKey = -INFINITY;
  best = E;
  for (int64_t e = lane; e < E; e += kWarp) {
    const float key = orderKey(probOf(l, e, sm));
    if (before(prevKey, prevE, key, e) && before(key, e, bestKey, best)) {
      bestKey = key;
      best = e;
    }
  }
  for (int s = kWarp / 2; s > 0; s >>= 1) {
    const float k2 = __shfl_xor_sync(0xffffffffu, bestKey, s);
    const int64_t e2 = __shfl_xor_sync(0xffffffffu, best, s);
    if (before(k2, e2, bestKey, best)) {
      bestKey = k2;
      best = e2;
    }
  }
}

// experts[t, j] = the j-th pick; weights[t, j] = its p, or with normalize float(double(p) / total), total
// = Σ_j double(p_j) in j order (the CPU's). Lane 0 writes, and with normalize reads its own experts back
// for the second pass.
__global__ void moeRouteKernel(FloatRef logits, FloatRef weights, int32_t* experts, int64_t T, int64_t E, int64_t k,
                               bool normalize) {
  const int lane = int(threadIdx.x) % kWarp;
  const int64_t warpsPerBlock = blockDim.x / kWarp;
  for (int64_t t = int64_t(blockIdx.x) * warpsPerBlock + threadIdx.x / kWarp; t < T; t += gridDim.x * warpsPerBlock) {
    const FloatRef l = logits.at(t * E);
    const Softmax sm = softmaxOf(l, E, lane);
    float key = INFINITY;
    double total = 0.0;
    int64_t e = -1;
    for (int64_t j = 0; j < k; ++j) {
      nextPick(l, E, sm, lane, key, e, key, e);
      const float p = e < E ? probOf(l, e, sm) : 0.0f;  // e == E only with k > E (refused on the host)
      total += double(p);
      if (lane == 0) {
        experts[t * k + j] = int32_t(e);
        if (!normalize) weights.set(t * k + j, p);
      }
    }
    if (!normalize || lane != 0) continue;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t ej = experts[t * k + j];
      weights.set(t * k + j, float(double(ej < E ? probOf(l, ej, sm) : 0.0f) / total));
    }
  }
}

// dlogits through moe_route with its picks fixed, the CPU's f64 expressions: picked = Σ_j p[e_j], inner =
// Σ_j p[e_j]·dw_j and g[e] = Σ_{j: e_j = e} dw_j, each in j order. normalize: dl[e] = float(p[e] / picked ·
// (g[e] - inner / picked)) for a picked e, 0 elsewhere; else dl[e] = float(p[e]·(g[e] - inner)). A pick
// outside [0, E) is skipped, as the CPU does.
__global__ void moeRouteBwdKernel(FloatRef logits, const int32_t* experts, FloatRef dweights, FloatRef dlogits,
                                  int64_t T, int64_t E, int64_t k, bool normalize) {
  const int lane = int(threadIdx.x) % kWarp;
  const int64_t warpsPerBlock = blockDim.x / kWarp;
  for (int64_t t = int64_t(blockIdx.x) * warpsPerBlock + threadIdx.x / kWarp; t < T; t += gridDim.x * warpsPerBlock) {
    const FloatRef l = logits.at(t * E);
    const Softmax sm = softmaxOf(l, E, lane);
    const int32_t* ex = experts + t * k;
    const FloatRef dw = dweights.at(t * k);
    double picked = 0.0, inner = 0.0;  // Σ_j p[e_j], Σ_j p[e_j]·dw_j
    for (int64_t j = 0; j < k; ++j) {
      if (ex[j] < 0 || ex[j] >= E) continue;
      const float p = probOf(l, ex[j], sm);
      picked += double(p);
      inner += double(p) * double(dw[j]);  // a product of two floats is exact in f64: an FMA gives the same sum
    }
    for (int64_t e = lane; e < E; e += kWarp) {
      double g = 0.0;
      bool isPick = false;
      for (int64_t j = 0; j < k; ++j)
        if (ex[j] == e) {
          g += double(dw[j]);
          isPick = true;
        }
      const float p = probOf(l, e, sm);
      float d = 0.0f;
      if (!normalize)
        d = float(double(p) * (g - inner));
      else if (isPick)
        d = float(double(p) / picked * (g - inner / picked));
      dlogits.set(t * E + e, d);
    }
  }
}

// ---- the load-balancing loss -------------------------------------------------------------------------

// counts_out[e] = counts[e] + the assignments to e: a block per expert (ids outside [0, E) count nothing).
__global__ void routerCountsKernel(const int32_t* experts, const int32_t* counts, int32_t* countsOut, int64_t N,
                                   int64_t E) {
  for (int64_t e = blockIdx.x; e < E; e += gridDim.x) {
    double n = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) n += experts[i] == e ? 1.0 : 0.0;
    n = blockSum(n);
    if (threadIdx.x == 0) countsOut[e] = int32_t(double(counts[e]) + n);
  }
}

// Each token's softmax (max, sum): a warp per token.
__global__ void tokenSoftmaxKernel(FloatRef logits, Softmax* stats, int64_t T, int64_t E) {
  const int lane = int(threadIdx.x) % kWarp;
  const int64_t warpsPerBlock = blockDim.x / kWarp;
  for (int64_t t = int64_t(blockIdx.x) * warpsPerBlock + threadIdx.x / kWarp; t < T; t += gridDim.x * warpsPerBlock) {
    const Softmax sm = softmaxOf(logits.at(t * E), E, lane);
    if (lane == 0) stats[t] = sm;
  }
}

// probs_out[e] = probs[e] + Σ_t p[t, e] from the tokens' softmax stats: a block per expert.
__global__ void routerProbSumsKernel(FloatRef logits, const Softmax* stats, FloatRef probs, FloatRef probsOut,
                                     int64_t T, int64_t E) {
  for (int64_t e = blockIdx.x; e < E; e += gridDim.x) {
    double s = 0.0;
    for (int64_t t = threadIdx.x; t < T; t += blockDim.x) s += double(probOf(logits.at(t * E), e, stats[t]));
    s = blockSum(s);
    if (threadIdx.x == 0) probsOut.set(e, float(double(probs[e]) + s));
  }
}

// dlogits[t, e] = p[t, e]·(g[e] − Σ_e' p[t, e']·g[e']), g = dprobs: a warp per token.
__global__ void routerStatsBwdKernel(FloatRef logits, FloatRef dprobs, FloatRef dlogits, int64_t T, int64_t E) {
  const int lane = int(threadIdx.x) % kWarp;
  const int64_t warpsPerBlock = blockDim.x / kWarp;
  for (int64_t t = int64_t(blockIdx.x) * warpsPerBlock + threadIdx.x / kWarp; t < T; t += gridDim.x * warpsPerBlock) {
    const FloatRef l = logits.at(t * E);
    const Softmax sm = softmaxOf(l, E, lane);
    double pg = 0.0;
    for (int64_t e = lane; e < E; e += kWarp) pg += double(probOf(l, e, sm)) * double(dprobs[e]);
    pg = warpSum(pg);
    for (int64_t e = lane; e < E; e += kWarp)
      dlogits.set(t * E + e, float(double(probOf(l, e, sm)) * (double(dprobs[e]) - pg)));
  }
}

// moe_aux_loss (probs given: loss[0] += scale·Σ counts·probs / N²) or _bwd (dprobs[e] = scale·counts[e] /
// N²); N = Σ_e counts[e], nothing / 0 when N <= 0. One block.
__global__ void auxLossKernel(const int32_t* counts, FloatRef probs, float* loss, FloatRef dprobs, int64_t E,
                              double scale) {
  double n = 0.0, dot = 0.0;
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
    n += double(counts[e]);
    if (probs.p) dot += double(counts[e]) * double(probs[e]);
  }
  n = blockSum(n);
  dot = blockSum(dot);
  if (dprobs.p)
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x)
      dprobs.set(e, n > 0.0 ? float(scale * double(counts[e]) / (n * n)) : 0.0f);
  if (loss && threadIdx.x == 0 && n > 0.0) loss[0] = float(double(loss[0]) + scale * dot / (n * n));
}

using P = MoeParams;
using Ctx = CudaKernelContext;

// k picks of E experts, each of the family's sizes in range.
Status checkRouter(const char* what, const P& p) {
  LLCDIST_RETURN_IF_ERROR(checkSizes(what, p));
  if (p.k < 1 || p.k > p.E)
    return Status::invalidArgument(
        sizeError(what, "k = " + std::to_string(p.k) + " outside [1, E = " + std::to_string(p.E) + "]"));
  return Status::ok();
}

Status moeRoute(const KernelCall& c, const P& p, const Ctx& ctx) {
  const bool fwd = c.kind == schema::OpKind::kMoeRoute;
  const char* what = fwd ? "moe_route" : "moe_route_bwd";
  LLCDIST_RETURN_IF_ERROR(checkRouter(what, p));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "logits", p.T * p.E));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "experts", p.T * p.k));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, fwd ? "weights" : "dweights", p.T * p.k));
  if (!fwd) LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "dlogits", p.T * p.E));
  if (p.T == 0) return Status::ok();
  if (fwd)
    moeRouteKernel<<<gridFor(p.T, kThreads / kWarp), kThreads, 0, ctx.stream>>>(
        floatRef(c, "logits"), floatRef(c, "weights"), c.I("experts"), p.T, p.E, p.k, p.normalize);
  else
    moeRouteBwdKernel<<<gridFor(p.T, kThreads / kWarp), kThreads, 0, ctx.stream>>>(
        floatRef(c, "logits"), c.I("experts"), floatRef(c, "dweights"), floatRef(c, "dlogits"), p.T, p.E, p.k,
        p.normalize);
  return LLCDIST_CUDA_LAUNCHED(what, ctx.rank);
}

Status moeRouterStats(const KernelCall& c, const P& p, const Ctx& ctx) {
  const char* what = "moe_router_stats";
  LLCDIST_RETURN_IF_ERROR(checkRouter(what, p));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "logits", p.T * p.E));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "experts", p.T * p.k));
  for (const char* r : {"counts", "probs", "counts_out", "probs_out"})
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, r, p.E));
  routerCountsKernel<<<rowBlocks(p.E), kRowThreads, 0, ctx.stream>>>(c.I("experts"), c.I("counts"), c.I("counts_out"),
                                                                     p.T * p.k, p.E);
  LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("moe_router_stats (counts)", ctx.rank));
  Softmax* stats = nullptr;
  if (p.T > 0) {
    if (!ctx.scratch) return Status::internal("moe_router_stats: no device scratch in the CUDA kernel context");
    LLCDIST_ASSIGN_OR_RETURN(void* scratch, ctx.scratch->get(p.T * int64_t(sizeof(Softmax))));
    stats = static_cast<Softmax*>(scratch);
    tokenSoftmaxKernel<<<gridFor(p.T, kThreads / kWarp), kThreads, 0, ctx.stream>>>(floatRef(c, "logits"), stats, p.T,
                                                                                    p.E);
    LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("moe_router_stats (softmax)", ctx.rank));
  }
  routerProbSumsKernel<<<rowBlocks(p.E), kRowThreads, 0, ctx.stream>>>(
      floatRef(c, "logits"), stats, floatRef(c, "probs"), floatRef(c, "probs_out"), p.T, p.E);
  return LLCDIST_CUDA_LAUNCHED(what, ctx.rank);
}

Status moeRouterStatsBwd(const KernelCall& c, const P& p, const Ctx& ctx) {
  const char* what = "moe_router_stats_bwd";
  LLCDIST_RETURN_IF_ERROR(checkSizes(what, p));
  for (const char* r : {"logits", "dlogits"}) LLCDIST_RETURN_IF_ERROR(checkArgElems(c, r, p.T * p.E));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "dprobs", p.E));
  if (p.T == 0) return Status::ok();
  routerStatsBwdKernel<<<gridFor(p.T, kThreads / kWarp), kThreads, 0, ctx.stream>>>(
      floatRef(c, "logits"), floatRef(c, "dprobs"), floatRef(c, "dlogits"), p.T, p.E);
  return LLCDIST_CUDA_LAUNCHED(what, ctx.rank);
}

Status moeAuxLoss(const KernelCall& c, const P& p, const Ctx& ctx) {
  const bool fwd = c.kind == schema::OpKind::kMoeAuxLoss;
  const char* what = fwd ? "moe_aux_loss" : "moe_aux_loss_bwd";
  LLCDIST_RETURN_IF_ERROR(checkSizes(what, p));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "counts", p.E));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, fwd ? "probs" : "dprobs", p.E));
  if (fwd) LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "loss", 1));
  auxLossKernel<<<1, kRowThreads, 0, ctx.stream>>>(c.I("counts"), floatRef(c, "probs"), fwd ? c.F("loss") : nullptr,
                                                   floatRef(c, "dprobs"), p.E, p.scale);
  return LLCDIST_CUDA_LAUNCHED(what, ctx.rank);
}

}  // namespace

// ---- CUDA kernel-table entries (CudaKernels.h) -----------------------------------------------------
void registerCudaMoeRouterKernels(CudaKernelTable& t) {
  using K = schema::OpKind;
  addCudaKernel<P>(t, K::kMoeRoute, moeRoute);
  addCudaKernel<P>(t, K::kMoeRouteBwd, moeRoute);
  addCudaKernel<P>(t, K::kMoeRouterStats, moeRouterStats);
  addCudaKernel<P>(t, K::kMoeRouterStatsBwd, moeRouterStatsBwd);
  addCudaKernel<P>(t, K::kMoeAuxLoss, moeAuxLoss);
  addCudaKernel<P>(t, K::kMoeAuxLossBwd, moeAuxLoss);
}

}  // namespace llcdist::rt::cuda
