// Private to the CUDA kernels: the elementwise maps other kernels run as a step of theirs (Elementwise.cu;
// the CPU reference: src/kernels/Activation.cpp). Each reads and writes f32 or bf16 per buffer
// (FloatRef), computes in f32, rounds each value written once, and is enqueued on ctx.stream.
#pragma once

#include "cuda/CudaKernels.h"
#include "cuda/kernels/FloatRef.cuh"

#include <cstdint>

namespace llcdist::rt::cuda {

// y[i] = gelu_tanh(x[i]) (gelu_tanh_fwd), i < n.
Status geluTanhForwardMap(FloatRef x, FloatRef y, int64_t n, const CudaKernelContext& ctx);
// dx[i] = dy[i] · gelu_tanh'(x[i]) (gelu_tanh_bwd), i < n; dx may be dy.
Status geluTanhBackwardMap(FloatRef dy, FloatRef x, FloatRef dx, int64_t n, const CudaKernelContext& ctx);

}  // namespace llcdist::rt::cuda
