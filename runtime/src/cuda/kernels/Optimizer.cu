// The optimizer family's CUDA kernels (the CPU reference: src/kernels/Optimizer.cpp): the gradient norm
// (grad_norm; grad_norm_sq's f64 partial sum of squares; grad_norm_clip's norm of the all-reduced sum)
// with clip_grad_norm_'s in-place clipping, and the torch.optim AdamW and SGD updates (one thread per
// element, the CPU's scalars and operation order); and their kernel-table entries.
//
// The sums of squares are deterministic without atomics, in double: for each tensor of the list, a
// first pass of at most kMaxPartials blocks (a number fixed by the tensor's size) writes one partial
// per block (its threads' grid-stride sums added by a fixed tree), a one-block pass adds the partials
// into the tensor's sum, and a one-thread pass adds the tensors' sums in list order (as the CPU does).
// The clip coefficient is computed on the device, so the clip kernels read it there and scale only
// when it is < 1. Gradients and parameters are f32 or bf16 (FloatRef.cuh: read exactly, each written
// value rounded once); the optimizer state is f32.
#include "cuda/CudaKernels.h"
#include "cuda/kernels/FloatRef.cuh"

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

namespace llcdist::rt::cuda {
namespace {

constexpr int kThreads = 256;             // elementwise grids
constexpr int kReduceThreads = 256;       // a reduction's block: a power of two (blockSum's tree)
constexpr int64_t kMaxPartials = 1024;    // first-pass blocks (partials) of one tensor

#define LLCDIST_GRID_STRIDE(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// The sum of every thread's v over the block (blockDim.x == kReduceThreads), in a fixed tree order;
// every thread of the block must call it (it synchronizes) and gets the sum.
__device__ double blockSum(double v) {
  __shared__ double buf[kReduceThreads];
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = kReduceThreads / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  const double sum = buf[0];
  __syncthreads();  // every thread has read buf[0] before the next call overwrites it
  return sum;
}

// partials[block] = Σ g² over the block's grid-stride elements.
__global__ void sumSquaresPartials(FloatRef g, int64_t n, double* partials) {
  double s = 0.0;
  LLCDIST_GRID_STRIDE(i, n) {
    const float v = g[i];
    s += double(v) * v;
  }
  s = blockSum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// One block: *out = Σ partials[0..count).
__global__ void sumPartials(const double* partials, int64_t count, double* out) {
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) s += partials[i];
  s = blockSum(s);
  if (threadIdx.x == 0) *out = s;
}

// One thread: *out = (Σ sums[k] in order k = 0..count-1) + (add ? *add : 0), gradNormPartial's order.
__global__ void sumInOrder(const double* sums, int64_t count, const double* add, double* out) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double s = 0.0;
  for (int64_t k = 0; k < count; ++k) s += sums[k];
  *out = s + (add ? *add : 0.0);
}

// One thread: *norm = float(sqrt(*sq)) and *coef = clipCoefficient(sqrt(*sq), maxNorm), i.e.
// float(std::min(1.0, maxNorm / (norm + 1e-6))).
__global__ void normAndCoef(const double* sq, double maxNorm, float* norm, float* coef) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  const double total = sqrt(*sq);
  *norm = static_cast<float>(total);
  const double q = maxNorm / (total + 1e-6);
  *coef = static_cast<float>(q < 1.0 ? q : 1.0);  // std::min(1.0, q), NaN included
}

// x *= *coef when *coef < 1 (clip_grad_norm_ scales only then).
__global__ void scaleIfBelowOne(FloatRef x, int64_t n, const float* coef) {
  const float s = *coef;
  if (!(s < 1.0f)) return;
  LLCDIST_GRID_STRIDE(i, n) { x.set(i, x[i] * s); }
}

// One torch.optim.AdamW step (Optimizer.cpp's adamwStep; scalars from the host).
__global__ void adamwKernel(FloatRef param, FloatRef grad, float* m, float* v, int64_t n, float decay, float w1,
                            float b2, float w2, float negStepSize, float bc2Sqrt, float eps) {
  LLCDIST_GRID_STRIDE(i, n) {
    const float g = grad[i];
    const float p = param[i] * decay;
    const float m0 = m[i];
    // torch.lerp: small weights use self + w·(end - self), large ones end - (end - self)·(1 - w).
    const float mi = w1 < 0.5f ? m0 + w1 * (g - m0) : g - (g - m0) * (1.0f - w1);
    const float vi = v[i] * b2 + w2 * g * g;
    const float denom = sqrtf(vi) / bc2Sqrt + eps;
    m[i] = mi;
    v[i] = vi;
    param.set(i, p + negStepSize * mi / denom);
  }
}

// One torch.optim.SGD step (Optimizer.cpp's sgdStep with dampening 0 and no nesterov, as the entry
// configures it).
__global__ void sgdKernel(FloatRef param, FloatRef grad, float* momentumBuf, int64_t n, bool decay, float wd,
                          bool momentum, bool first, float mom, float damp, float negLr) {
  LLCDIST_GRID_STRIDE(i, n) {
    const float p = param[i];
    float g = grad[i];
    if (decay) g = g + wd * p;
    if (momentum) {
      const float buf = first ? g : momentumBuf[i] * mom + damp * g;
      momentumBuf[i] = buf;
      g = buf;
    }
    param.set(i, p + negLr * g);
  }
}

#undef LLCDIST_GRID_STRIDE

using P = OptimizerParams;
using Ctx = CudaKernelContext;

struct Tensor {
  FloatRef data;
  int64_t n = 0;
};

// The buffers of a list role, in order (none for an absent optional list).
std::vector<Tensor> tensorsOf(const KernelCall& c, std::string_view role) {
  std::vector<Tensor> v;
  const size_t r = c.role(role);
  for (size_t k = 0; k < c.args[r].size(); ++k) v.push_back({floatRef(c, r, k), c.argElems[r][k]});
  return v;
}

// First-pass blocks of a tensor of n elements (at least one, which writes 0 for an empty tensor).
int64_t partialBlocks(int64_t n) {
  const int64_t blocks = (n + kReduceThreads - 1) / kReduceThreads;
  return blocks < 1 ? 1 : blocks > kMaxPartials ? kMaxPartials : blocks;
}

// The doubles of scratch sumOfSquares needs for `ts`: the tensors' sums and their partials.
int64_t sumScratchDoubles(const std::vector<Tensor>& ts) {
  int64_t d = int64_t(ts.size());
  for (const Tensor& t : ts) d += partialBlocks(t.n);
  return d;
}

// *out (device) = Σ over ts (in order) of Σ g², + *add when add is not null, in double; `scratch`
// holds sumScratchDoubles(ts) doubles (null when that is 0).
Status sumOfSquares(const std::vector<Tensor>& ts, const double* add, double* out, double* scratch, const Ctx& ctx,
                    const char* what) {
  double* sums = scratch;
  double* partials = scratch ? scratch + ts.size() : nullptr;
  for (size_t k = 0; k < ts.size(); ++k) {
    const int64_t blocks = partialBlocks(ts[k].n);
    sumSquaresPartials<<<unsigned(blocks), kReduceThreads, 0, ctx.stream>>>(ts[k].data, ts[k].n, partials);
    LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED(what, ctx.rank));
    sumPartials<<<1, kReduceThreads, 0, ctx.stream>>>(partials, blocks, sums + k);
    LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED(what, ctx.rank));
    partials += blocks;
  }
  sumInOrder<<<1, 1, 0, ctx.stream>>>(sums, int64_t(ts.size()), add, out);
  return LLCDIST_CUDA_LAUNCHED(what, ctx.rank);
}

// clip_grad_norm_'s in-place scaling of every tensor by the device coefficient (when it is < 1).
Status clip(const std::vector<Tensor>& ts, const float* coef, const Ctx& ctx, const char* what) {
  for (const Tensor& t : ts) {
    if (t.n == 0) continue;
    scaleIfBelowOne<<<gridFor(t.n, kThreads), kThreads, 0, ctx.stream>>>(t.data, t.n, coef);
    LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED(what, ctx.rank));
  }
  return Status::ok();
}

// grad_norm (gradients whole on every rank): the norm of `grads`, clipped in place when max_norm > 0.
Status gradNorm(const KernelCall& c, const P& p, const Ctx& ctx) {
  if (!ctx.scratch) return Status::internal("grad_norm without device scratch");
  const std::vector<Tensor> grads = tensorsOf(c, "grads");
  // Scratch: [sq | coef (a float in a double's slot) | the sums' scratch].
  LLCDIST_ASSIGN_OR_RETURN(void* scratch, ctx.scratch->get((2 + sumScratchDoubles(grads)) * int64_t(sizeof(double))));
  double* sq = static_cast<double*>(scratch);
  float* coef = reinterpret_cast<float*>(sq + 1);
  LLCDIST_RETURN_IF_ERROR(sumOfSquares(grads, nullptr, sq, sq + 2, ctx, "grad_norm"));
  normAndCoef<<<1, 1, 0, ctx.stream>>>(sq, p.maxNorm, c.F("norm"), coef);
  LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("grad_norm", ctx.rank));
  if (p.maxNorm > 0) return clip(grads, coef, ctx, "grad_norm");
  return Status::ok();
}

// grad_norm_sq: this rank's partial squared norm (f64), which the plan all-reduces: `grads`, then
// `replica_shards` on the first member of each replica group, then + add.
Status gradNormSq(const KernelCall& c, const P& p, const Ctx& ctx) {
  if (p.replicas < 1) return Status::internal("grad_norm_sq with replicas " + std::to_string(p.replicas));
  std::vector<Tensor> ts = tensorsOf(c, "grads");
  if (p.member % p.replicas == 0)
    for (const Tensor& t : tensorsOf(c, "replica_shards")) ts.push_back(t);
  double* scratch = nullptr;
  const int64_t doubles = sumScratchDoubles(ts);
  if (doubles > 0) {
    if (!ctx.scratch) return Status::internal("grad_norm_sq without device scratch");
    LLCDIST_ASSIGN_OR_RETURN(void* s, ctx.scratch->get(doubles * int64_t(sizeof(double))));
    scratch = static_cast<double*>(s);
  }
  return sumOfSquares(ts, c.D("add"), c.D("sq"), scratch, ctx, "grad_norm_sq");
}

// grad_norm_clip: the norm of the all-reduced squared norm; clips `grads` in place when max_norm > 0.
Status gradNormClip(const KernelCall& c, const P& p, const Ctx& ctx) {
  if (!ctx.scratch) return Status::internal("grad_norm_clip without device scratch");
  LLCDIST_ASSIGN_OR_RETURN(void* scratch, ctx.scratch->get(int64_t(sizeof(double))));
  float* coef = static_cast<float*>(scratch);
  normAndCoef<<<1, 1, 0, ctx.stream>>>(c.D("sq"), p.maxNorm, c.F("norm"), coef);
  LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("grad_norm_clip", ctx.rank));
  if (p.maxNorm > 0) return clip(tensorsOf(c, "grads"), coef, ctx, "grad_norm_clip");
  return Status::ok();
}

// adamwStep's scalars (double arithmetic, used as f32), then one thread per element.
Status adamw(const KernelCall& c, const P& p, const Ctx& ctx) {
  const int64_t step = c.t;
  if (step < 1) return Status::invalidArgument("adamw: step must be >= 1, got " + std::to_string(step));
  const double lr = c.lr;
  const float decay = static_cast<float>(1.0 - lr * p.weightDecay);
  const float w1 = static_cast<float>(1.0 - p.beta1);
  const float b2 = static_cast<float>(p.beta2);
  const float w2 = static_cast<float>(1.0 - p.beta2);
  const double bc1 = 1.0 - std::pow(p.beta1, double(step));
  const double bc2 = 1.0 - std::pow(p.beta2, double(step));
  const float negStepSize = static_cast<float>(-(lr / bc1));
  const float bc2Sqrt = static_cast<float>(std::sqrt(bc2));
  const float eps = static_cast<float>(p.eps);
  const int64_t n = c.elems("param");
  if (n == 0) return Status::ok();
  adamwKernel<<<gridFor(n, kThreads), kThreads, 0, ctx.stream>>>(floatRef(c, "param"), floatRef(c, "grad"), c.F("m"),
                                                                 c.F("v"), n, decay, w1, b2, w2, negStepSize, bc2Sqrt,
                                                                 eps);
  return LLCDIST_CUDA_LAUNCHED("adamw", ctx.rank);
}

// sgdStep with the entry's configuration (momentum and weight decay from the op, dampening 0, no
// nesterov).
Status sgd(const KernelCall& c, const P& p, const Ctx& ctx) {
  const int64_t step = c.t;
  if (step < 1) return Status::invalidArgument("sgd: step must be >= 1, got " + std::to_string(step));
  float* buf = c.F("momentum_buf");
  if (p.momentum != 0.0 && !buf) return Status::invalidArgument("sgd: momentum != 0 needs a momentum buffer");
  const float wd = static_cast<float>(p.weightDecay);
  const float mom = static_cast<float>(p.momentum);
  const float damp = static_cast<float>(1.0 - 0.0);  // 1 - dampening
  const float negLr = static_cast<float>(-c.lr);
  const int64_t n = c.elems("param");
  if (n == 0) return Status::ok();
  sgdKernel<<<gridFor(n, kThreads), kThreads, 0, ctx.stream>>>(floatRef(c, "param"), floatRef(c, "grad"), buf, n,
                                                               p.weightDecay != 0.0, wd, p.momentum != 0.0,
                                                               step == 1, mom, damp, negLr);
  return LLCDIST_CUDA_LAUNCHED("sgd", ctx.rank);
}

}  // namespace

// ---- CUDA kernel-table entries (CudaKernels.h) -----------------------------------------------------
void registerCudaOptimizerKernels(CudaKernelTable& t) {
  using K = schema::OpKind;
  addCudaKernel<P>(t, K::kGradNorm, gradNorm);
  addCudaKernel<P>(t, K::kGradNormSq, gradNormSq);
  addCudaKernel<P>(t, K::kGradNormClip, gradNormClip);
  addCudaKernel<P>(t, K::kAdamW, adamw);
  addCudaKernel<P>(t, K::kSgd, sgd);
}

}  // namespace llcdist::rt::cuda
