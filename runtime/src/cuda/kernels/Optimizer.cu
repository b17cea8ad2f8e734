// The optimizer family's CUDA kernels (the CPU reference: src/kernels/Optimizer.cpp): the gradient norm
// (grad_norm; grad_norm_sq's f64 partial sum of squares; grad_norm_clip's norm of the all-reduced sum)
// with clip_grad_norm_'s in-place clipping, and the torch.optim AdamW and SGD updates (one thread per
// element, the CPU's scalars and operation order); and their kernel-table entries.
//
// The sums of squares are deterministic without atomics, in double, in three launches whatever the
// number of tensors: the list's tensors are cut into chunks of kNormChunk elements (a table uploaded
// once at bind time, as the _multi ops'); one block a chunk writes the chunk's partial (its threads'
// sums added by a fixed tree); one block a tensor adds its chunks' partials (a fixed tree again) into
// the tensor's sum; one thread adds the tensors' sums in list order (as the CPU does). The clip
// coefficient is computed on the device, so the one clip launch (one block a chunk) reads it there and
// scales only when it is < 1. adamw_multi / sgd_multi update a list of tensors in one launch: a table of the
// tensors and of their chunks (kChunk elements each), uploaded once at bind time, one block a chunk,
// each element's update the single op's (adamwAt / sgdAt). Gradients and parameters are f32 or bf16 (FloatRef.cuh: read
// exactly, each written value rounded once); the optimizer state is f32.
#include "cuda/CudaKernels.h"
#include "cuda/kernels/BlockSum.cuh"
#include "cuda/kernels/FloatRef.cuh"

#include <cmath>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace llcdist::rt::cuda {
namespace {

constexpr int kThreads = 256;        // elementwise grids
constexpr int kReduceThreads = 256;  // a reduction's block: a power of two (blockSum's tree)

#define LLCDIST_GRID_STRIDE(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

static_assert(kReduceThreads == kBlockSumThreads, "a reduction's block is blockSum's block (BlockSum.cuh)");

// The gradient norm's table: the list's tensors and the chunks of kNormChunk elements they are cut
// into (a tensor's chunks consecutive, tensors in list order), one byte string (NormSlot[T], then
// NormChunk[C]) uploaded once per bound call.
constexpr int64_t kNormChunk = 65536;
struct NormSlot {
  void* g;
  int64_t n;
  int64_t firstChunk, numChunks;
  int32_t bf16, pad;
};
struct NormChunk {
  int32_t tensor, pad;
  int64_t begin;
};

// partials[c] = Σ g² over chunk c, for every chunk (block b takes chunks b, b + gridDim.x, ...).
__global__ void sumSquaresChunks(const NormSlot* slots, const NormChunk* chunks, int64_t numChunks, double* partials) {
  for (int64_t c = blockIdx.x; c < numChunks; c += gridDim.x) {
    const NormChunk ch = chunks[c];
    const NormSlot t = slots[ch.tensor];
    const FloatRef g{t.g, t.bf16 != 0};
    const int64_t end = ch.begin + kNormChunk < t.n ? ch.begin + kNormChunk : t.n;
    double s = 0.0;
    for (int64_t i = ch.begin + threadIdx.x; i < end; i += blockDim.x) {
      const float v = g[i];
      s += double(v) * v;
    }
    s = blockSum(s);
    if (threadIdx.x == 0) partials[c] = s;
  }
}

// sums[k] = Σ of tensor k's chunk partials, for every tensor (block b takes tensors b, b + gridDim.x, ...).
__global__ void sumChunksPerTensor(const NormSlot* slots, int64_t numTensors, const double* partials, double* sums) {
  for (int64_t k = blockIdx.x; k < numTensors; k += gridDim.x) {
    const NormSlot t = slots[k];
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < t.numChunks; i += blockDim.x) s += partials[t.firstChunk + i];
    s = blockSum(s);
    if (threadIdx.x == 0) sums[k] = s;
  }
}

// One thread: *out = (Σ sums[k] in order k = 0..count-1) + *adds[0] + *adds[1] + ... (numAdds of them,
// in order; none: + 0), the CPU kernel's order (grad_norm_sq's `add` list).
__global__ void sumInOrder(const double* sums, int64_t count, const double* const* adds, int64_t numAdds, double* out) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double s = 0.0;
  for (int64_t k = 0; k < count; ++k) s += sums[k];
  s += 0.0;
  for (int64_t k = 0; k < numAdds; ++k) s += *adds[k];
  *out = s;
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

// Every chunk's elements *= *coef when *coef < 1 (clip_grad_norm_ scales only then).
__global__ void scaleChunksIfBelowOne(const NormSlot* slots, const NormChunk* chunks, int64_t numChunks,
                                      const float* coef) {
  const float s = *coef;
  if (!(s < 1.0f)) return;
  for (int64_t c = blockIdx.x; c < numChunks; c += gridDim.x) {
    const NormChunk ch = chunks[c];
    const NormSlot t = slots[ch.tensor];
    const FloatRef x{t.g, t.bf16 != 0};
    const int64_t end = ch.begin + kNormChunk < t.n ? ch.begin + kNormChunk : t.n;
    for (int64_t i = ch.begin + threadIdx.x; i < end; i += blockDim.x) x.set(i, x[i] * s);
  }
}

// AdamW's scalars for one step (adamwStep's, double arithmetic used as f32).
struct AdamScalars {
  float decay, w1, b2, w2, negStepSize, bc2Sqrt, eps;
};

// The op's hyperparameters (bound once) and the step's values (device memory, written before each
// step: KernelCall::stepValues), from which each block's first thread computes the step's scalars in
// double, as adamwStep does on the host, so a recorded step (a CUDA graph) replays with every step's own
// learning rate and bias corrections.
struct AdamWUpdateArgs {
  const StepValues* step;
  double beta1, beta2, eps, weightDecay;
  __device__ AdamScalars scalars() const {
    const double lr = step->lr, t = double(step->t);
    AdamScalars a;
    a.decay = static_cast<float>(1.0 - lr * weightDecay);
    a.w1 = static_cast<float>(1.0 - beta1);
    a.b2 = static_cast<float>(beta2);
    a.w2 = static_cast<float>(1.0 - beta2);
    const double bc1 = 1.0 - pow(beta1, t);
    const double bc2 = 1.0 - pow(beta2, t);
    a.negStepSize = static_cast<float>(-(lr / bc1));
    a.bc2Sqrt = static_cast<float>(sqrt(bc2));
    a.eps = static_cast<float>(eps);
    return a;
  }
};

// The block's scalars of `args` (Args::scalars), computed once by its first thread; every thread of the
// block must call it (it synchronizes).
template <typename Args>
__device__ auto blockScalars(const Args& args) {
  using S = decltype(args.scalars());
  __shared__ S shared;
  if (threadIdx.x == 0) shared = args.scalars();
  __syncthreads();
  return shared;
}

// One torch.optim.AdamW step of element i (Optimizer.cpp's adamwStep).
__device__ __forceinline__ void adamwAt(FloatRef param, FloatRef grad, float* m, float* v, int64_t i,
                                        const AdamScalars& a) {
  const float g = grad[i];
  const float p = param[i] * a.decay;
  const float m0 = m[i];
  // torch.lerp: small weights use self + w·(end - self), large ones end - (end - self)·(1 - w).
  const float mi = a.w1 < 0.5f ? m0 + a.w1 * (g - m0) : g - (g - m0) * (1.0f - a.w1);
  const float vi = v[i] * a.b2 + a.w2 * g * g;
  const float denom = sqrtf(vi) / a.bc2Sqrt + a.eps;
  m[i] = mi;
  v[i] = vi;
  param.set(i, p + a.negStepSize * mi / denom);
}

__global__ void adamwKernel(FloatRef param, FloatRef grad, float* m, float* v, int64_t n, AdamWUpdateArgs args) {
  const AdamScalars a = blockScalars(args);
  LLCDIST_GRID_STRIDE(i, n) { adamwAt(param, grad, m, v, i, a); }
}

// The _multi ops: a table of tensors and the chunks of kChunk elements they are cut into, one block per
// chunk (grid-stride over the chunks), uploaded once per bound call (DeviceTables::uploadBytes).
constexpr int64_t kChunk = 32768;
struct Chunk {
  int32_t tensor;
  int32_t pad;
  int64_t begin;
};
struct UpdateSlot {  // adamw_multi / sgd_multi: one tensor's buffers
  void* param;
  const void* grad;
  float* m;  // adamw: exp_avg; sgd: the momentum buffer (null without momentum)
  float* v;
  int64_t n;
  int32_t paramBf16, gradBf16;
};

// Walks the chunk table of a _multi op: block b takes chunks b, b + gridDim.x, ...; each thread of it applies
// `update(tensor slot, param, grad, i, scalars)` to elements of its chunk, the single op's element
// update, with the step's scalars (Update::args, computed once per block).
template <typename Update>
__global__ void multiTensorKernel(const UpdateSlot* slots, const Chunk* chunks, int64_t numChunks, Update update) {
  const auto scalars = blockScalars(update.args);
  for (int64_t c = blockIdx.x; c < numChunks; c += gridDim.x) {
    const Chunk ch = chunks[c];
    const UpdateSlot t = slots[ch.tensor];
    const FloatRef param{t.param, t.paramBf16 != 0}, grad{const_cast<void*>(t.grad), t.gradBf16 != 0};
    const int64_t end = ch.begin + kChunk < t.n ? ch.begin + kChunk : t.n;
    for (int64_t i = ch.begin + threadIdx.x; i < end; i += blockDim.x) update(t, param, grad, i, scalars);
  }
}

struct AdamWUpdate {
  AdamWUpdateArgs args;
  __device__ void operator()(const UpdateSlot& t, FloatRef param, FloatRef grad, int64_t i,
                             const AdamScalars& a) const {
    adamwAt(param, grad, t.m, t.v, i, a);
  }
};

// SGD's scalars for one step (sgdStep with dampening 0 and no nesterov, as the entry configures it).
struct SgdScalars {
  bool decay;
  float wd;
  bool momentum, first;
  float mom, damp, negLr;
};

// The op's configuration (bound once) and the step's values (device memory), as AdamWUpdateArgs.
struct SgdUpdateArgs {
  const StepValues* step;
  bool decay, momentum;
  float wd, mom;
  __device__ SgdScalars scalars() const {
    SgdScalars s;
    s.decay = decay;
    s.wd = wd;
    s.momentum = momentum;
    s.first = step->t == 1;
    s.mom = mom;
    s.damp = static_cast<float>(1.0 - 0.0);  // 1 - dampening
    s.negLr = static_cast<float>(-step->lr);
    return s;
  }
};

// One torch.optim.SGD step of element i (Optimizer.cpp's sgdStep).
__device__ __forceinline__ void sgdAt(FloatRef param, FloatRef grad, float* momentumBuf, int64_t i,
                                      const SgdScalars& s) {
  const float p = param[i];
  float g = grad[i];
  if (s.decay) g = g + s.wd * p;
  if (s.momentum) {
    const float buf = s.first ? g : momentumBuf[i] * s.mom + s.damp * g;
    momentumBuf[i] = buf;
    g = buf;
  }
  param.set(i, p + s.negLr * g);
}

__global__ void sgdKernel(FloatRef param, FloatRef grad, float* momentumBuf, int64_t n, SgdUpdateArgs args) {
  const SgdScalars s = blockScalars(args);
  LLCDIST_GRID_STRIDE(i, n) { sgdAt(param, grad, momentumBuf, i, s); }
}

struct SgdUpdate {
  SgdUpdateArgs args;
  __device__ void operator()(const UpdateSlot& t, FloatRef param, FloatRef grad, int64_t i, const SgdScalars& s) const {
    sgdAt(param, grad, t.m, i, s);
  }
};

#undef LLCDIST_GRID_STRIDE

using P = OptimizerParams;
using Ctx = CudaKernelContext;

// The gradient norm's tensors: `grads`, then (grad_norm_sq, on the first member of each replica group)
// `replica_shards`, uploaded as one table at bind time (prepareNorm) and found there by each step.
struct NormTable {
  const NormSlot* slots = nullptr;
  const NormChunk* chunks = nullptr;
  int64_t numTensors = 0, numChunks = 0;
};
StatusOr<NormTable> normTable(const KernelCall& c, const P& p, const Ctx& ctx) {
  const std::string op(schema::opName(c.kind));
  if (!ctx.tables) return Status::internal(op + " without device tables");
  std::vector<NormSlot> slots;
  std::vector<NormChunk> chunks;
  const auto add = [&](std::string_view role) {
    const size_t r = c.role(role);
    for (size_t k = 0; k < c.args[r].size(); ++k) {
      NormSlot t{
          c.ptr(r, k), c.argElems[r][k], int64_t(chunks.size()), 0, c.type(r, k) == schema::ElemType::kBF16 ? 1 : 0, 0};
      for (int64_t b = 0; b < t.n; b += kNormChunk) chunks.push_back(NormChunk{int32_t(slots.size()), 0, b});
      t.numChunks = int64_t(chunks.size()) - t.firstChunk;
      slots.push_back(t);
    }
  };
  add("grads");
  if (c.kind == schema::OpKind::kGradNormSq) {
    if (p.replicas < 1) return Status::internal("grad_norm_sq with replicas " + std::to_string(p.replicas));
    if (p.member % p.replicas == 0) add("replica_shards");
  }
  NormTable t;
  t.numTensors = int64_t(slots.size());
  t.numChunks = int64_t(chunks.size());
  if (slots.empty()) return t;
  std::string bytes(slots.size() * sizeof(NormSlot) + chunks.size() * sizeof(NormChunk), '\0');
  std::memcpy(bytes.data(), slots.data(), slots.size() * sizeof(NormSlot));
  std::memcpy(bytes.data() + slots.size() * sizeof(NormSlot), chunks.data(), chunks.size() * sizeof(NormChunk));
  LLCDIST_ASSIGN_OR_RETURN(const void* dev, ctx.tables->uploadBytes(bytes));
  t.slots = static_cast<const NormSlot*>(dev);
  t.chunks = reinterpret_cast<const NormChunk*>(static_cast<const char*>(dev) + slots.size() * sizeof(NormSlot));
  return t;
}

// The doubles of scratch sumOfSquares needs for the table: the tensors' sums and the chunks' partials.
int64_t sumScratchDoubles(const NormTable& t) { return t.numTensors + t.numChunks; }

// *out (device) = Σ over the table's tensors (in order) of Σ g², + each of the `adds` (device f64
// scalars) in order, in double; `scratch` holds sumScratchDoubles(t) doubles (null when that is 0).
Status sumOfSquares(const NormTable& t, const std::vector<void*>& adds, double* out, double* scratch, const Ctx& ctx,
                    const char* what) {
  const double* const* addTable = nullptr;
  if (!adds.empty()) {  // the scalars' device addresses, uploaded as a table
    std::string bytes(adds.size() * sizeof(void*), '\0');
    std::memcpy(bytes.data(), adds.data(), bytes.size());
    LLCDIST_ASSIGN_OR_RETURN(const void* dev, ctx.tables->uploadBytes(bytes));
    addTable = static_cast<const double* const*>(dev);
  }
  double* sums = scratch;
  double* partials = scratch ? scratch + t.numTensors : nullptr;
  if (t.numChunks > 0) {
    sumSquaresChunks<<<gridFor(t.numChunks, 1), kReduceThreads, 0, ctx.stream>>>(t.slots, t.chunks, t.numChunks,
                                                                                 partials);
    LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED(what, ctx.rank));
  }
  if (t.numTensors > 0) {
    sumChunksPerTensor<<<gridFor(t.numTensors, 1), kReduceThreads, 0, ctx.stream>>>(t.slots, t.numTensors, partials,
                                                                                    sums);
    LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED(what, ctx.rank));
  }
  sumInOrder<<<1, 1, 0, ctx.stream>>>(sums, t.numTensors, addTable, int64_t(adds.size()), out);
  return LLCDIST_CUDA_LAUNCHED(what, ctx.rank);
}

// clip_grad_norm_'s in-place scaling of every tensor by the device coefficient (when it is < 1).
Status clip(const NormTable& t, const float* coef, const Ctx& ctx, const char* what) {
  if (t.numChunks == 0) return Status::ok();
  scaleChunksIfBelowOne<<<gridFor(t.numChunks, 1), kThreads, 0, ctx.stream>>>(t.slots, t.chunks, t.numChunks, coef);
  return LLCDIST_CUDA_LAUNCHED(what, ctx.rank);
}

// grad_norm (gradients whole on every rank): the norm of `grads`, clipped in place when max_norm > 0.
Status gradNorm(const KernelCall& c, const P& p, const Ctx& ctx) {
  if (!ctx.scratch) return Status::internal("grad_norm without device scratch");
  LLCDIST_ASSIGN_OR_RETURN(const NormTable grads, normTable(c, p, ctx));
  // Scratch: [sq | coef (a float in a double's slot) | the sums' scratch].
  LLCDIST_ASSIGN_OR_RETURN(void* scratch, ctx.scratch->get((2 + sumScratchDoubles(grads)) * int64_t(sizeof(double))));
  double* sq = static_cast<double*>(scratch);
  float* coef = reinterpret_cast<float*>(sq + 1);
  LLCDIST_RETURN_IF_ERROR(sumOfSquares(grads, {}, sq, sq + 2, ctx, "grad_norm"));
  normAndCoef<<<1, 1, 0, ctx.stream>>>(sq, p.maxNorm, c.F("norm"), coef);
  LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("grad_norm", ctx.rank));
  if (p.maxNorm > 0) return clip(grads, coef, ctx, "grad_norm");
  return Status::ok();
}

// grad_norm_sq: this rank's partial squared norm (f64), which the plan all-reduces: `grads`, then
// `replica_shards` on the first member of each replica group, then + each `add` in order.
Status gradNormSq(const KernelCall& c, const P& p, const Ctx& ctx) {
  LLCDIST_ASSIGN_OR_RETURN(const NormTable ts, normTable(c, p, ctx));
  double* scratch = nullptr;
  const int64_t doubles = sumScratchDoubles(ts);
  if (doubles > 0) {
    if (!ctx.scratch) return Status::internal("grad_norm_sq without device scratch");
    LLCDIST_ASSIGN_OR_RETURN(void* s, ctx.scratch->get(doubles * int64_t(sizeof(double))));
    scratch = static_cast<double*>(s);
  }
  return sumOfSquares(ts, c.list("add"), c.D("sq"), scratch, ctx, "grad_norm_sq");
}

// grad_norm_clip: the norm of the all-reduced squared norm; clips `grads` in place when max_norm > 0.
Status gradNormClip(const KernelCall& c, const P& p, const Ctx& ctx) {
  if (!ctx.scratch) return Status::internal("grad_norm_clip without device scratch");
  LLCDIST_ASSIGN_OR_RETURN(void* scratch, ctx.scratch->get(int64_t(sizeof(double))));
  float* coef = static_cast<float*>(scratch);
  normAndCoef<<<1, 1, 0, ctx.stream>>>(c.D("sq"), p.maxNorm, c.F("norm"), coef);
  LLCDIST_RETURN_IF_ERROR(LLCDIST_CUDA_LAUNCHED("grad_norm_clip", ctx.rank));
  if (p.maxNorm <= 0) return Status::ok();
  LLCDIST_ASSIGN_OR_RETURN(const NormTable grads, normTable(c, p, ctx));
  return clip(grads, coef, ctx, "grad_norm_clip");
}

// Bind time: the gradient norm's table uploaded, so no step uploads anything.
StatusOr<int64_t> prepareNorm(const KernelCall& c, const Ctx& ctx) {
  const P* p = c.paramsAs<P>();
  if (!p) return Status::internal(std::string(schema::opName(c.kind)) + ": no optimizer parameters at bind time");
  LLCDIST_RETURN_IF_ERROR(normTable(c, *p, ctx).status());
  return int64_t(0);
}

// The step's values' device address (the interpreter binds it; the step count t >= 1 is its invariant).
StatusOr<const StepValues*> stepValuesOf(const KernelCall& c) {
  if (!c.stepValues)
    return Status::internal(std::string(schema::opName(c.kind)) + " was bound without the step's values");
  return c.stepValues;
}

StatusOr<AdamWUpdateArgs> adamArgs(const KernelCall& c, const P& p) {
  LLCDIST_ASSIGN_OR_RETURN(const StepValues* step, stepValuesOf(c));
  return AdamWUpdateArgs{step, p.beta1, p.beta2, p.eps, p.weightDecay};
}

// One thread per element.
Status adamw(const KernelCall& c, const P& p, const Ctx& ctx) {
  LLCDIST_ASSIGN_OR_RETURN(const AdamWUpdateArgs a, adamArgs(c, p));
  const int64_t n = c.elems("param");
  if (n == 0) return Status::ok();
  adamwKernel<<<gridFor(n, kThreads), kThreads, 0, ctx.stream>>>(floatRef(c, "param"), floatRef(c, "grad"), c.F("m"),
                                                                 c.F("v"), n, a);
  return LLCDIST_CUDA_LAUNCHED("adamw", ctx.rank);
}

// The device table of an adamw_multi / sgd_multi call: its tensors (roles params, grads and the state
// roles `m`, `v`; sgd: momentum_bufs as m) and their chunks, as one byte string (UpdateSlot[T], then
// Chunk[C]); the chunk count in *chunks.
std::string updateTable(const KernelCall& c, const char* m, const char* v, int64_t* chunks) {
  const size_t params = c.role("params"), grads = c.role("grads");
  const size_t T = c.args[params].size();
  std::vector<UpdateSlot> slots(T);
  std::vector<Chunk> cs;
  for (size_t k = 0; k < T; ++k) {
    UpdateSlot& t = slots[k];
    t.param = c.ptr(params, k);
    t.grad = c.ptr(grads, k);
    t.m = m && !c.list(m).empty() ? c.F(m, k) : nullptr;
    t.v = v && !c.list(v).empty() ? c.F(v, k) : nullptr;
    t.n = c.argElems[params][k];
    t.paramBf16 = c.type(params, k) == schema::ElemType::kBF16;
    t.gradBf16 = c.type(grads, k) == schema::ElemType::kBF16;
    for (int64_t b = 0; b < t.n; b += kChunk) cs.push_back(Chunk{int32_t(k), 0, b});
  }
  *chunks = int64_t(cs.size());
  std::string bytes(slots.size() * sizeof(UpdateSlot) + cs.size() * sizeof(Chunk), '\0');
  std::memcpy(bytes.data(), slots.data(), slots.size() * sizeof(UpdateSlot));
  std::memcpy(bytes.data() + slots.size() * sizeof(UpdateSlot), cs.data(), cs.size() * sizeof(Chunk));
  return bytes;
}

// The call's table on the device (uploaded at bind time by prepare; found here) and its chunks.
struct UploadedTable {
  const UpdateSlot* slots = nullptr;
  const Chunk* chunks = nullptr;
  int64_t numChunks = 0;
};
StatusOr<UploadedTable> uploadedTable(const KernelCall& c, const char* m, const char* v, const Ctx& ctx) {
  if (!ctx.tables) return Status::internal(std::string(schema::opName(c.kind)) + " without device tables");
  UploadedTable t;
  const std::string bytes = updateTable(c, m, v, &t.numChunks);
  LLCDIST_ASSIGN_OR_RETURN(const void* dev, ctx.tables->uploadBytes(bytes));
  t.slots = static_cast<const UpdateSlot*>(dev);
  t.chunks = reinterpret_cast<const Chunk*>(static_cast<const char*>(dev) +
                                            c.args[c.role("params")].size() * sizeof(UpdateSlot));
  return t;
}

// One block per chunk of every tensor: the whole list in one launch.
Status adamwMulti(const KernelCall& c, const P& p, const Ctx& ctx) {
  LLCDIST_ASSIGN_OR_RETURN(const AdamWUpdateArgs a, adamArgs(c, p));
  LLCDIST_ASSIGN_OR_RETURN(const UploadedTable t, uploadedTable(c, "m", "v", ctx));
  if (t.numChunks == 0) return Status::ok();
  multiTensorKernel<<<gridFor(t.numChunks, 1), kThreads, 0, ctx.stream>>>(t.slots, t.chunks, t.numChunks,
                                                                          AdamWUpdate{a});
  return LLCDIST_CUDA_LAUNCHED("adamw_multi", ctx.rank);
}

// sgdStep's configuration from the entry (momentum and weight decay from the op, dampening 0, no
// nesterov); the step's scalars are the device's (SgdUpdateArgs).
StatusOr<SgdUpdateArgs> sgdArgs(const KernelCall& c, const P& p, bool haveBuffers) {
  const std::string op(schema::opName(c.kind));
  if (p.momentum != 0.0 && !haveBuffers) return Status::invalidArgument(op + ": momentum != 0 needs a momentum buffer");
  LLCDIST_ASSIGN_OR_RETURN(const StepValues* step, stepValuesOf(c));
  return SgdUpdateArgs{step, p.weightDecay != 0.0, p.momentum != 0.0, static_cast<float>(p.weightDecay),
                       static_cast<float>(p.momentum)};
}

Status sgd(const KernelCall& c, const P& p, const Ctx& ctx) {
  float* buf = c.F("momentum_buf");
  LLCDIST_ASSIGN_OR_RETURN(const SgdUpdateArgs s, sgdArgs(c, p, buf != nullptr));
  const int64_t n = c.elems("param");
  if (n == 0) return Status::ok();
  sgdKernel<<<gridFor(n, kThreads), kThreads, 0, ctx.stream>>>(floatRef(c, "param"), floatRef(c, "grad"), buf, n, s);
  return LLCDIST_CUDA_LAUNCHED("sgd", ctx.rank);
}

Status sgdMulti(const KernelCall& c, const P& p, const Ctx& ctx) {
  LLCDIST_ASSIGN_OR_RETURN(const SgdUpdateArgs s, sgdArgs(c, p, !c.list("momentum_bufs").empty()));
  LLCDIST_ASSIGN_OR_RETURN(const UploadedTable t, uploadedTable(c, "momentum_bufs", nullptr, ctx));
  if (t.numChunks == 0) return Status::ok();
  multiTensorKernel<<<gridFor(t.numChunks, 1), kThreads, 0, ctx.stream>>>(t.slots, t.chunks, t.numChunks, SgdUpdate{s});
  return LLCDIST_CUDA_LAUNCHED("sgd_multi", ctx.rank);
}

// Bind time: the _multi call's table uploaded, so no step uploads anything.
StatusOr<int64_t> prepareAdamwMulti(const KernelCall& c, const Ctx& ctx) {
  LLCDIST_RETURN_IF_ERROR(uploadedTable(c, "m", "v", ctx).status());
  return int64_t(0);
}
StatusOr<int64_t> prepareSgdMulti(const KernelCall& c, const Ctx& ctx) {
  LLCDIST_RETURN_IF_ERROR(uploadedTable(c, "momentum_bufs", nullptr, ctx).status());
  return int64_t(0);
}

}  // namespace

// ---- CUDA kernel-table entries (CudaKernels.h) -----------------------------------------------------
void registerCudaOptimizerKernels(CudaKernelTable& t) {
  using K = schema::OpKind;
  addCudaKernel<P>(t, K::kGradNorm, "own", gradNorm, prepareNorm);
  addCudaKernel<P>(t, K::kGradNormSq, "own", gradNormSq, prepareNorm);
  addCudaKernel<P>(t, K::kGradNormClip, "own", gradNormClip, prepareNorm);
  addCudaKernel<P>(t, K::kAdamW, adamw);
  addCudaKernel<P>(t, K::kSgd, sgd);
  addCudaKernel<P>(t, K::kAdamWMulti, "own", adamwMulti, prepareAdamwMulti);
  addCudaKernel<P>(t, K::kSgdMulti, "own", sgdMulti, prepareSgdMulti);
}

}  // namespace llcdist::rt::cuda
