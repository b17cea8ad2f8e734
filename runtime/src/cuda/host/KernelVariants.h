// Private to the CUDA backend, but free of CUDA (standard library and runtime headers only, so the
// choices are tested on machines without a toolkit: runtime/test/CudaKernelVariantsTest.cpp): the
// CUDA backend's kernel variants of every op kind (KernelVariant.h), in preference order, with the
// dtypes each takes per role and the predicate that says when it can run. The kernel table
// (src/cuda/kernels/<Family>.cu) registers one kernel per variant listed here, by name, and the
// backend's start-up check (checkCudaKernelTable) fails when the two lists differ.
//
// What the variants take (the numerics contract: docs/plan-format.md "Where bf16 results are
// rounded"): every kernel the CUDA backend has reads and writes f32 or bf16 for each float role of
// its op, in any mix, computing in f32 and rounding each bf16 value it writes once; the statistics a
// kernel saves for its backward (layer norm's mean and rstd, attention's lse) and the loss stay f32,
// as the plans store them. Exceptions:
//  - attention_fwd / attention_bwd: "cudnn" (cuDNN's fused attention through its frontend) takes bf16
//    q, k, v, out (dout, dq, dk, dv) only, where cuDNN is usable (KernelSelectOptions::cudnn) and
//    supports the shape; "own" (our f32 kernel) takes f32 only: a bf16 plan without cuDNN converts.
//  - linear_fwd / _bwd_input / _bwd_weight ("cublaslt"): the GEMM's two operands share one dtype, and
//    the output is that dtype or f32 (cuBLASLt's bf16 × bf16 → bf16 | f32 with f32 accumulation, or
//    f32 × f32 → f32); linear_fwd's bias has the output's dtype. A mix outside that converts the bf16
//    arguments (an f32 GEMM).
//  - split_fwd / _bwd and shard_slice copy elements: every float argument has one dtype.
//  - adamw / sgd: the optimizer state (m, v, momentum_buf) is f32 (the plans' master state).
#pragma once

#include "llcdist/runtime/KernelVariant.h"
#include "llcdist/runtime/PlanSchema.h"

#include <string_view>
#include <vector>

namespace llcdist::rt::cuda {

// The variants of `kind`, in the backend's order of preference (empty for the kinds that do not launch
// a kernel: launchesKernel). The references live for the program's lifetime.
const std::vector<KernelVariantInfo>& cudaKernelVariants(schema::OpKind kind);

// Variant names (KernelVariantInfo::name) the CUDA backend uses.
inline constexpr std::string_view kOwnVariant = "own";          // our CUDA kernel
inline constexpr std::string_view kCublasLtVariant = "cublaslt";  // a cuBLASLt GEMM
inline constexpr std::string_view kCudnnVariant = "cudnn";        // cuDNN's fused attention

}  // namespace llcdist::rt::cuda
