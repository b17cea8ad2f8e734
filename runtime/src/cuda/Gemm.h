// Private to the CUDA backend: cuBLASLt GEMMs behind an RAII runner (handle + workspace; matmul
// descriptors, layouts and the heuristic's algorithm cached per problem). The backend creates one per
// rank (makeGemmRunner) and hands it to the linear kernels through CudaKernelContext::gemm.
#pragma once

#include "cuda/host/GemmPlan.h"
#include "llcdist/runtime/Status.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

namespace llcdist::rt::cuda {

class GemmRunner {
public:
  virtual ~GemmRunner() = default;
  // Device bytes held (the workspace), counted in the backend's peakAllocatedBytes.
  virtual int64_t deviceBytes() const = 0;
  // Enqueues C = op(A)·op(B) + beta·C (+ bias) on `stream` (GemmPlan.h: the problem, column-major as
  // cuBLAS defines it; A and B of the problem's dtype, C, bias and aux of its outType; bias required
  // with the epilogues that have one (epilogueHasBias): read with kBias and kGeluAuxBias, written with
  // the bias-gradient epilogues; aux with the GELU epilogues (epilogueHasAux): written by kGeluAux(Bias),
  // read by kDGelu).
  // `deterministic` restricts the algorithm to non-split-K reductions. m, n, k must be >= 1. Errors
  // name the problem and the rank, and nothing is enqueued then: InvalidArgument for a malformed
  // problem or misaligned pointers, NotFound when cuBLASLt has no algorithm for the problem (the
  // caller may retry it another way, e.g. without the bias epilogue), Internal for a cuBLASLt or CUDA
  // failure; NotFound too for an epilogue cuBLASLt cannot run as the problem has it
  // (gemmEpilogueUnsupportedReason). Thread-safe.
  virtual Status run(const GemmProblem& problem, const void* A, const void* B, void* C, const void* bias,
                     const void* aux, cudaStream_t stream, bool deterministic) = 0;
};

// A runner on the current device; errors name the rank.
StatusOr<std::unique_ptr<GemmRunner>> makeGemmRunner(int rank);

}  // namespace llcdist::rt::cuda
