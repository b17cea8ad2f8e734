// The elementwise family's CUDA kernels (the CPU reference: src/kernels/Activation.cpp): GELU (tanh
// approximation, HF "gelu_new") forward and backward, SwiGLU forward and backward, residual add,
// gradient fan-in (accumulate), copy, and cast between f32 and bf16 (round to nearest even, bit for bit
// as Bf16.h); and their kernel-table entries. Every kernel is one grid-stride loop over the n elements,
// each thread reading its element's inputs before writing (outputs may alias inputs).
#include "cuda/CudaKernels.h"

#include <cstdint>

namespace llcdist::rt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.7978845608028654f;  // math.sqrt(2.0 / math.pi)
constexpr float kGeluCoef = 0.044715f;

#define LLCDIST_GRID_STRIDE(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

__device__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ float siluf(float x) { return x / (1.0f + expf(-x)); }  // torch's silu kernel

// Bf16.h's floatToBf16 / bf16ToFloat, bit for bit.
__device__ uint16_t floatToBf16Bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // NaN: keep it a (quiet) NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);                    // round to nearest even
}
__device__ float bf16BitsToFloat(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }

__global__ void geluFwdKernel(const float* x, float* y, int64_t n) {
  LLCDIST_GRID_STRIDE(i, n) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + kGeluCoef * (v * v * v))));
  }
}

__global__ void geluBwdKernel(const float* dy, const float* x, float* dx, int64_t n) {
  LLCDIST_GRID_STRIDE(i, n) {
    const float v = x[i], d = dy[i];
    const float t = tanhf(kSqrt2OverPi * (v + kGeluCoef * (v * v * v)));
    const float dinner = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoef * v * v);
    dx[i] = d * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * dinner);
  }
}

__global__ void swigluFwdKernel(const float* gate, const float* up, float* y, int64_t n) {
  LLCDIST_GRID_STRIDE(i, n) {
    const float g = gate[i], u = up[i];
    y[i] = siluf(g) * u;
  }
}

__global__ void swigluBwdKernel(const float* dy, const float* gate, const float* up, float* dgate, float* dup,
                                int64_t n) {
  LLCDIST_GRID_STRIDE(i, n) {
    const float g = gate[i], u = up[i], d = dy[i];
    const float sg = sigmoidf(g);
    dgate[i] = d * u * sg * (1.0f + g * (1.0f - sg));
    dup[i] = d * siluf(g);
  }
}

__global__ void addKernel(const float* a, const float* b, float* y, int64_t n) {
  LLCDIST_GRID_STRIDE(i, n) {
    const float va = a[i], vb = b[i];
    y[i] = va + vb;
  }
}

__global__ void accumulateKernel(const float* x, float* y, int64_t n) {
  LLCDIST_GRID_STRIDE(i, n) { y[i] += x[i]; }
}

__global__ void f32ToBf16Kernel(const float* x, uint16_t* y, int64_t n) {
  LLCDIST_GRID_STRIDE(i, n) { y[i] = floatToBf16Bits(x[i]); }
}

__global__ void bf16ToF32Kernel(const uint16_t* x, float* y, int64_t n) {
  LLCDIST_GRID_STRIDE(i, n) { y[i] = bf16BitsToFloat(x[i]); }
}

#undef LLCDIST_GRID_STRIDE

using P = ElementwiseParams;
using Ctx = CudaKernelContext;

}  // namespace

// ---- CUDA kernel-table entries (CudaKernels.h) -----------------------------------------------------
void registerCudaElementwiseKernels(CudaKernelTable& t) {
  using K = schema::OpKind;
  addCudaKernel<P>(t, K::kGeluTanhFwd, [](const KernelCall& c, const P& p, const Ctx& ctx) -> Status {
    if (p.n == 0) return Status::ok();
    geluFwdKernel<<<gridFor(p.n, kThreads), kThreads, 0, ctx.stream>>>(c.F("x"), c.F("y"), p.n);
    return LLCDIST_CUDA_LAUNCHED("gelu_tanh_fwd", ctx.rank);
  });
  addCudaKernel<P>(t, K::kGeluTanhBwd, [](const KernelCall& c, const P& p, const Ctx& ctx) -> Status {
    if (p.n == 0) return Status::ok();
    geluBwdKernel<<<gridFor(p.n, kThreads), kThreads, 0, ctx.stream>>>(c.F("dy"), c.F("x"), c.F("dx"), p.n);
    return LLCDIST_CUDA_LAUNCHED("gelu_tanh_bwd", ctx.rank);
  });
  addCudaKernel<P>(t, K::kSwigluFwd, [](const KernelCall& c, const P& p, const Ctx& ctx) -> Status {
    if (p.n == 0) return Status::ok();
    swigluFwdKernel<<<gridFor(p.n, kThreads), kThreads, 0, ctx.stream>>>(c.F("gate"), c.F("up"), c.F("y"), p.n);
    return LLCDIST_CUDA_LAUNCHED("swiglu_fwd", ctx.rank);
  });
  addCudaKernel<P>(t, K::kSwigluBwd, [](const KernelCall& c, const P& p, const Ctx& ctx) -> Status {
    if (p.n == 0) return Status::ok();
    swigluBwdKernel<<<gridFor(p.n, kThreads), kThreads, 0, ctx.stream>>>(c.F("dy"), c.F("gate"), c.F("up"),
                                                                         c.F("dgate"), c.F("dup"), p.n);
    return LLCDIST_CUDA_LAUNCHED("swiglu_bwd", ctx.rank);
  });
  addCudaKernel<P>(t, K::kAdd, [](const KernelCall& c, const P& p, const Ctx& ctx) -> Status {
    if (p.n == 0) return Status::ok();
    addKernel<<<gridFor(p.n, kThreads), kThreads, 0, ctx.stream>>>(c.F("a"), c.F("b"), c.F("y"), p.n);
    return LLCDIST_CUDA_LAUNCHED("add", ctx.rank);
  });
  addCudaKernel<P>(t, K::kAccumulate, [](const KernelCall& c, const P& p, const Ctx& ctx) -> Status {
    if (p.n == 0) return Status::ok();
    accumulateKernel<<<gridFor(p.n, kThreads), kThreads, 0, ctx.stream>>>(c.F("x"), c.F("y"), p.n);
    return LLCDIST_CUDA_LAUNCHED("accumulate", ctx.rank);
  });
  addCudaKernel<P>(t, K::kCopy, [](const KernelCall& c, const P& p, const Ctx& ctx) -> Status {
    if (p.n == 0) return Status::ok();
    LLCDIST_CUDA_TRY(cudaMemcpyAsync(c.F("y"), c.F("x"), size_t(p.n) * 4, cudaMemcpyDeviceToDevice, ctx.stream),
                     ctx.rank);
    return Status::ok();
  });
  // y = x converted: f32 -> bf16 rounds to nearest even, bf16 -> f32 is exact, same dtype copies (x and
  // y never overlap: PlanSchema's cast).
  addCudaKernel<P>(t, K::kCast, [](const KernelCall& c, const P& p, const Ctx& ctx) -> Status {
    const schema::ElemType from = c.type(c.role("x")), to = c.type(c.role("y"));
    const void* x = c.ptr(c.role("x"));
    void* y = c.ptr(c.role("y"));
    if (!schema::isFloatType(from) || !schema::isFloatType(to)) return Status::internal("cast between non-float dtypes");
    if (p.n == 0) return Status::ok();
    if (from == to) {
      LLCDIST_CUDA_TRY(cudaMemcpyAsync(y, x, size_t(p.n * schema::elemTypeSize(from)), cudaMemcpyDeviceToDevice,
                                       ctx.stream),
                       ctx.rank);
      return Status::ok();
    }
    if (from == schema::ElemType::kF32)
      f32ToBf16Kernel<<<gridFor(p.n, kThreads), kThreads, 0, ctx.stream>>>(static_cast<const float*>(x),
                                                                           static_cast<uint16_t*>(y), p.n);
    else
      bf16ToF32Kernel<<<gridFor(p.n, kThreads), kThreads, 0, ctx.stream>>>(static_cast<const uint16_t*>(x),
                                                                           static_cast<float*>(y), p.n);
    return LLCDIST_CUDA_LAUNCHED("cast", ctx.rank);
  });
}

}  // namespace llcdist::rt::cuda
