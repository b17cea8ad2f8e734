// The elementwise family's CUDA kernels (the CPU reference: src/kernels/Activation.cpp): GELU (tanh
// approximation, HF "gelu_new") forward and backward, SwiGLU forward and backward (and GeGLU, swiglu_*'s
// attr act "gelu_tanh": the GELU maps on the gate), residual add,
// gradient fan-in (accumulate), copy, and cast between f32 and bf16 (round to nearest even, bit for bit
// as Bf16.h); and their kernel-table entries.
//
// Every op is one map over its n elements: f reads each input element (f32, or bf16 converted exactly:
// FloatRef.cuh), computes in f32 and writes each output rounded once to its buffer's dtype. Each
// element is read before it is written (outputs may alias inputs). When every argument is bf16, n is a
// multiple of 8 and every buffer 16-byte aligned (arena buffers are 64-byte aligned), a thread moves 8
// elements with one 16-byte load or store per buffer; otherwise one element at a time, in a
// grid-stride loop. Both compute the same f32 values, so the results do not depend on the path.
#include "cuda/kernels/Elementwise.cuh"

#include "cuda/CudaKernels.h"
#include "cuda/kernels/FloatRef.cuh"

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace llcdist::rt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.7978845608028654f;  // math.sqrt(2.0 / math.pi)
constexpr float kGeluCoef = 0.044715f;
constexpr float kSqrtHalf = 0.70710678118654752f;    // M_SQRT1_2
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1/√(2π)

__device__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ float siluf(float x) { return x / (1.0f + expf(-x)); }  // torch's silu kernel

// The ops, as functions of one element: in[] the inputs, out[] the outputs (f32).
struct GeluFwd {
  static constexpr int kIn = 1, kOut = 1;
  __device__ void operator()(const float* in, float* out) const {
    const float v = in[0];
    out[0] = 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + kGeluCoef * (v * v * v))));
  }
};
struct GeluBwd {  // in: dy, x
  static constexpr int kIn = 2, kOut = 1;
  __device__ void operator()(const float* in, float* out) const {
    const float d = in[0], v = in[1];
    const float t = tanhf(kSqrt2OverPi * (v + kGeluCoef * (v * v * v)));
    const float dinner = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoef * v * v);
    out[0] = d * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * dinner);
  }
};
struct GeluErfFwd {  // torch's exact GELU: x·Φ(x)
  static constexpr int kIn = 1, kOut = 1;
  __device__ void operator()(const float* in, float* out) const {
    const float v = in[0];
    out[0] = v * 0.5f * (1.0f + erff(v * kSqrtHalf));
  }
};
struct GeluErfBwd {  // in: dy, x; Φ(x) + x·φ(x)
  static constexpr int kIn = 2, kOut = 1;
  __device__ void operator()(const float* in, float* out) const {
    const float v = in[1];
    const float cdf = 0.5f * (1.0f + erff(v * kSqrtHalf));
    out[0] = in[0] * (cdf + v * (kInvSqrt2Pi * expf(-0.5f * v * v)));
  }
};
struct ClampFwd {  // OLMo's clip_qkv: the bound is the call's (ElementwiseParams::limit)
  static constexpr int kIn = 1, kOut = 1;
  float limit;
  static ClampFwd of(const ElementwiseParams& p) { return {p.limit}; }
  __device__ void operator()(const float* in, float* out) const { out[0] = fminf(fmaxf(in[0], -limit), limit); }
};
struct ClampBwd {  // in: dy, x; torch's clamp passes dy where -limit <= x <= limit
  static constexpr int kIn = 2, kOut = 1;
  float limit;
  static ClampBwd of(const ElementwiseParams& p) { return {p.limit}; }
  __device__ void operator()(const float* in, float* out) const {
    out[0] = in[1] >= -limit && in[1] <= limit ? in[0] : 0.0f;
  }
};
struct ReluFwd {  // OPT's MLP: x below 0 gives 0 (a NaN passes, as on the CPU)
  static constexpr int kIn = 1, kOut = 1;
  __device__ void operator()(const float* in, float* out) const { out[0] = in[0] < 0.0f ? 0.0f : in[0]; }
};
struct ReluBwd {  // in: dy, x; torch's threshold_backward: dy where x > 0
  static constexpr int kIn = 2, kOut = 1;
  __device__ void operator()(const float* in, float* out) const { out[0] = in[1] > 0.0f ? in[0] : 0.0f; }
};
struct Scale {  // Cohere's logit_scale: the factor is the call's (ElementwiseParams::factor)
  static constexpr int kIn = 1, kOut = 1;
  float factor;
  static Scale of(const ElementwiseParams& p) { return {p.factor}; }
  __device__ void operator()(const float* in, float* out) const { out[0] = in[0] * factor; }
};
struct SwigluFwd {  // in: gate, up
  static constexpr int kIn = 2, kOut = 1;
  __device__ void operator()(const float* in, float* out) const { out[0] = siluf(in[0]) * in[1]; }
};
struct SwigluBwd {  // in: dy, gate, up; out: dgate, dup
  static constexpr int kIn = 3, kOut = 2;
  __device__ void operator()(const float* in, float* out) const {
    const float d = in[0], g = in[1], u = in[2];
    const float sg = sigmoidf(g);
    out[0] = d * u * sg * (1.0f + g * (1.0f - sg));
    out[1] = d * siluf(g);
  }
};
// GeGLU (swiglu_*'s act "gelu_tanh", Gemma): GeluFwd / GeluBwd on the gate, the one gelu_tanh definition.
struct GegluFwd {  // in: gate, up
  static constexpr int kIn = 2, kOut = 1;
  __device__ void operator()(const float* in, float* out) const {
    float g;
    GeluFwd{}(in, &g);
    out[0] = g * in[1];
  }
};
struct GegluBwd {  // in: dy, gate, up; out: dgate = gelu_tanh_bwd(dy·up, gate), dup = dy·gelu_tanh(gate)
  static constexpr int kIn = 3, kOut = 2;
  __device__ void operator()(const float* in, float* out) const {
    const float dyUp[2] = {in[0] * in[2], in[1]};
    GeluBwd{}(dyUp, &out[0]);
    float g;
    GeluFwd{}(in + 1, &g);
    out[1] = in[0] * g;
  }
};
// The map an op's entry runs when its gate activation is gelu_tanh (ElementwiseParams::act): the GLU
// maps' GeGLU form; F itself for every other map (their ops have no attr act).
template <class F>
struct GeluTanhGate {
  using type = F;
};
template <>
struct GeluTanhGate<SwigluFwd> {
  using type = GegluFwd;
};
template <>
struct GeluTanhGate<SwigluBwd> {
  using type = GegluBwd;
};
struct Add {  // in: a, b
  static constexpr int kIn = 2, kOut = 1;
  __device__ void operator()(const float* in, float* out) const { out[0] = in[0] + in[1]; }
};
struct Accumulate {  // in: x, y (old); out: y
  static constexpr int kIn = 2, kOut = 1;
  __device__ void operator()(const float* in, float* out) const { out[0] = in[1] + in[0]; }
};
struct Identity {  // copy and cast: y = x (rounded when y is bf16)
  static constexpr int kIn = 1, kOut = 1;
  __device__ void operator()(const float* in, float* out) const { out[0] = in[0]; }
};

template <int N>
struct Refs {
  FloatRef r[N > 0 ? N : 1];
};

template <class F>
__global__ void mapKernel(F f, Refs<F::kIn> in, Refs<F::kOut> out, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float a[F::kIn], o[F::kOut];
#pragma unroll
    for (int j = 0; j < F::kIn; ++j) a[j] = in.r[j][i];
    f(a, o);
#pragma unroll
    for (int j = 0; j < F::kOut; ++j) out.r[j].set(i, o[j]);
  }
}

// Every buffer bf16: 8 elements (16 bytes) per buffer per thread and iteration.
template <class F>
__global__ void mapBf16x8Kernel(F f, Refs<F::kIn> in, Refs<F::kOut> out, int64_t packs) {
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < packs; p += int64_t(gridDim.x) * blockDim.x) {
    uint4 v[F::kIn];
#pragma unroll
    for (int j = 0; j < F::kIn; ++j) v[j] = static_cast<const uint4*>(in.r[j].p)[p];
    uint4 w[F::kOut];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      float a[F::kIn], o[F::kOut];
#pragma unroll
      for (int j = 0; j < F::kIn; ++j) a[j] = bf16BitsToFloat(reinterpret_cast<const uint16_t*>(&v[j])[e]);
      f(a, o);
#pragma unroll
      for (int j = 0; j < F::kOut; ++j) reinterpret_cast<uint16_t*>(&w[j])[e] = floatToBf16Bits(o[j]);
    }
#pragma unroll
    for (int j = 0; j < F::kOut; ++j) static_cast<uint4*>(out.r[j].p)[p] = w[j];
  }
}

template <class F>
Status runMap(const char* what, const Refs<F::kIn>& in, const Refs<F::kOut>& out, int64_t n,
              const CudaKernelContext& ctx, const F& f = F{}) {
  if (n == 0) return Status::ok();
  bool packed = n % 8 == 0;
  for (int j = 0; j < F::kIn; ++j)
    packed = packed && in.r[j].bf16 && reinterpret_cast<uintptr_t>(in.r[j].p) % 16 == 0;
  for (int j = 0; j < F::kOut; ++j)
    packed = packed && out.r[j].bf16 && reinterpret_cast<uintptr_t>(out.r[j].p) % 16 == 0;
  if (packed)
    mapBf16x8Kernel<F><<<gridFor(n / 8, kThreads), kThreads, 0, ctx.stream>>>(f, in, out, n / 8);
  else
    mapKernel<F><<<gridFor(n, kThreads), kThreads, 0, ctx.stream>>>(f, in, out, n);
  return LLCDIST_CUDA_LAUNCHED(what, ctx.rank);
}

// cast_multi: a table of (x, y) pairs and the chunks of kCastChunk elements they are cut into, one
// block per chunk, uploaded once per bound call (DeviceTables::uploadBytes, at bind time).
constexpr int64_t kCastChunk = 32768;
struct CastSlot {
  const void* x;
  void* y;
  int64_t n;
  int32_t xBf16, yBf16;
};
struct CastChunk {
  int32_t pair;
  int32_t pad;
  int64_t begin;
};

__global__ void castMultiKernel(const CastSlot* slots, const CastChunk* chunks, int64_t numChunks) {
  for (int64_t c = blockIdx.x; c < numChunks; c += gridDim.x) {
    const CastChunk ch = chunks[c];
    const CastSlot t = slots[ch.pair];
    const FloatRef x{const_cast<void*>(t.x), t.xBf16 != 0}, y{t.y, t.yBf16 != 0};
    const int64_t end = ch.begin + kCastChunk < t.n ? ch.begin + kCastChunk : t.n;
    for (int64_t i = ch.begin + threadIdx.x; i < end; i += blockDim.x) y.set(i, x[i]);
  }
}

using P = ElementwiseParams;
using Ctx = CudaKernelContext;

// The device table of a cast_multi call (CastSlot[pairs], then CastChunk[chunks]) and its chunk count.
struct CastTable {
  const CastSlot* slots = nullptr;
  const CastChunk* chunks = nullptr;
  int64_t numChunks = 0;
};
StatusOr<CastTable> castTable(const KernelCall& c, const Ctx& ctx) {
  if (!ctx.tables) return Status::internal("cast_multi without device tables");
  const size_t xr = c.role("x"), yr = c.role("y");
  const size_t T = c.args[xr].size();
  std::vector<CastSlot> slots(T);
  std::vector<CastChunk> chunks;
  for (size_t k = 0; k < T; ++k) {
    const schema::ElemType from = c.type(xr, k), to = c.type(yr, k);
    if (!schema::isFloatType(from) || !schema::isFloatType(to)) return Status::internal("cast_multi between non-float dtypes");
    slots[k] = CastSlot{c.ptr(xr, k), c.ptr(yr, k), c.argElems[xr][k], from == schema::ElemType::kBF16,
                        to == schema::ElemType::kBF16};
    for (int64_t b = 0; b < slots[k].n; b += kCastChunk) chunks.push_back(CastChunk{int32_t(k), 0, b});
  }
  std::string bytes(T * sizeof(CastSlot) + chunks.size() * sizeof(CastChunk), '\0');
  std::memcpy(bytes.data(), slots.data(), T * sizeof(CastSlot));
  std::memcpy(bytes.data() + T * sizeof(CastSlot), chunks.data(), chunks.size() * sizeof(CastChunk));
  LLCDIST_ASSIGN_OR_RETURN(const void* dev, ctx.tables->uploadBytes(bytes));
  CastTable t;
  t.slots = static_cast<const CastSlot*>(dev);
  t.chunks = reinterpret_cast<const CastChunk*>(static_cast<const char*>(dev) + T * sizeof(CastSlot));
  t.numChunks = int64_t(chunks.size());
  return t;
}

// The functor of a call: F::of(params) for a functor with state (clamp's limit), else F{}.
template <class F, class = void>
struct FunctorOf {
  static F of(const P&) { return F{}; }
};
template <class F>
struct FunctorOf<F, std::void_t<decltype(F::of(std::declval<const P&>()))>> {
  static F of(const P& p) { return F::of(p); }
};

// The entry of op `kind`, the map F from the named input roles to the named output roles (swiglu_*:
// GeluTanhGate<F> where the call's act is gelu_tanh).
template <class F>
CudaKernel mapEntry(schema::OpKind kind, std::initializer_list<const char*> ins, std::initializer_list<const char*> outs) {
  std::vector<std::string> in(ins.begin(), ins.end()), out(outs.begin(), outs.end());
  const char* what = schema::opName(kind).data();  // a literal: NUL-terminated
  return typedKernel<P, Ctx>(kind, [what, in, out](const KernelCall& c, const P& p, const Ctx& ctx) {
    Refs<F::kIn> a;
    Refs<F::kOut> y;
    for (int j = 0; j < F::kIn; ++j) a.r[j] = floatRef(c, in[size_t(j)]);
    for (int j = 0; j < F::kOut; ++j) y.r[j] = floatRef(c, out[size_t(j)]);
    using G = typename GeluTanhGate<F>::type;
    if constexpr (!std::is_same_v<G, F>) {
      if (p.act == GluActivation::kGeluTanh) return runMap<G>(what, a, y, p.n, ctx);
    }
    return runMap<F>(what, a, y, p.n, ctx, FunctorOf<F>::of(p));
  });
}

}  // namespace

Status geluTanhForwardMap(FloatRef x, FloatRef y, int64_t n, const CudaKernelContext& ctx) {
  Refs<1> a, b;
  a.r[0] = x;
  b.r[0] = y;
  return runMap<GeluFwd>("gelu_tanh_fwd", a, b, n, ctx);
}

Status geluTanhBackwardMap(FloatRef dy, FloatRef x, FloatRef dx, int64_t n, const CudaKernelContext& ctx) {
  Refs<2> a;
  Refs<1> b;
  a.r[0] = dy;
  a.r[1] = x;
  b.r[0] = dx;
  return runMap<GeluBwd>("gelu_tanh_bwd", a, b, n, ctx);
}

// ---- CUDA kernel-table entries (CudaKernels.h) -----------------------------------------------------
void registerCudaElementwiseKernels(CudaKernelTable& t) {
  using K = schema::OpKind;
  const auto add = [&t](K kind, CudaKernel kernel) { t.append(kind, CudaKernelVariant{"own", std::move(kernel), nullptr}); };
  add(K::kGeluTanhFwd, mapEntry<GeluFwd>(K::kGeluTanhFwd, {"x"}, {"y"}));
  add(K::kGeluTanhBwd, mapEntry<GeluBwd>(K::kGeluTanhBwd, {"dy", "x"}, {"dx"}));
  add(K::kGeluErfFwd, mapEntry<GeluErfFwd>(K::kGeluErfFwd, {"x"}, {"y"}));
  add(K::kGeluErfBwd, mapEntry<GeluErfBwd>(K::kGeluErfBwd, {"dy", "x"}, {"dx"}));
  add(K::kClampFwd, mapEntry<ClampFwd>(K::kClampFwd, {"x"}, {"y"}));
  add(K::kClampBwd, mapEntry<ClampBwd>(K::kClampBwd, {"dy", "x"}, {"dx"}));
  add(K::kReluFwd, mapEntry<ReluFwd>(K::kReluFwd, {"x"}, {"y"}));
  add(K::kReluBwd, mapEntry<ReluBwd>(K::kReluBwd, {"dy", "x"}, {"dx"}));
  add(K::kScale, mapEntry<Scale>(K::kScale, {"x"}, {"y"}));
  add(K::kSwigluFwd, mapEntry<SwigluFwd>(K::kSwigluFwd, {"gate", "up"}, {"y"}));
  add(K::kSwigluBwd, mapEntry<SwigluBwd>(K::kSwigluBwd, {"dy", "gate", "up"}, {"dgate", "dup"}));
  add(K::kAdd, mapEntry<Add>(K::kAdd, {"a", "b"}, {"y"}));
  add(K::kAccumulate, mapEntry<Accumulate>(K::kAccumulate, {"x", "y"}, {"y"}));
  // copy and cast: y = x converted (f32 -> bf16 rounds to nearest even, bf16 -> f32 is exact); the
  // same dtype is a device copy. cast's x and y never overlap (PlanSchema); copy's may not either.
  const auto convert = [](K kind) {
    const char* what = schema::opName(kind).data();
    return typedKernel<P, Ctx>(kind, [what](const KernelCall& c, const P& p, const Ctx& ctx) -> Status {
      const FloatRef x = floatRef(c, "x"), y = floatRef(c, "y");
      if (!schema::isFloatType(c.type(c.role("x"))) || !schema::isFloatType(c.type(c.role("y"))))
        return Status::internal(std::string(what) + " between non-float dtypes");
      if (p.n == 0) return Status::ok();
      if (x.bf16 == y.bf16) {
        LLCDIST_CUDA_TRY(cudaMemcpyAsync(y.p, x.p, size_t(p.n) * (x.bf16 ? 2 : 4), cudaMemcpyDeviceToDevice, ctx.stream),
                         ctx.rank);
        return Status::ok();
      }
      Refs<1> a, b;
      a.r[0] = x;
      b.r[0] = y;
      return runMap<Identity>(what, a, b, p.n, ctx);
    });
  };
  add(K::kCopy, convert(K::kCopy));
  add(K::kCast, convert(K::kCast));
  // cast_multi: every pair in one launch (the bf16 copies of a mixed-precision plan's masters).
  addCudaKernel<P>(
      t, K::kCastMulti, "own",
      [](const KernelCall& c, const P&, const Ctx& ctx) -> Status {
        LLCDIST_ASSIGN_OR_RETURN(const CastTable tab, castTable(c, ctx));
        if (tab.numChunks == 0) return Status::ok();
        castMultiKernel<<<gridFor(tab.numChunks, 1), kThreads, 0, ctx.stream>>>(tab.slots, tab.chunks, tab.numChunks);
        return LLCDIST_CUDA_LAUNCHED("cast_multi", ctx.rank);
      },
      [](const KernelCall& c, const Ctx& ctx) -> StatusOr<int64_t> {  // bind time: the table uploaded
        LLCDIST_RETURN_IF_ERROR(castTable(c, ctx).status());
        return int64_t(0);
      });
}

}  // namespace llcdist::rt::cuda
