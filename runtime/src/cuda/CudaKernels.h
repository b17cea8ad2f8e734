// Private to the CUDA backend (library llcdist_runtime_cuda, built when the CUDA toolkit is found): the
// context a CUDA kernel-table entry gets, the error helpers, and the registrations of the CUDA kernel
// families (one src/cuda/kernels/<Family>.cu each, with its kernels, launchers and entries at its end;
// docs/adding-an-op.md). The kernels see what the CPU kernels see (KernelCall.h): f32 buffers for
// every float role (bf16 arguments are staged through f32 by the interpreter, so bf16 storage computes
// in f32), i32 ids and targets, f64 partial sums; `zero` and `cast` read their dtypes themselves.
// Every kernel is deterministic: no atomics in reductions (fixed reduction trees), so a run repeats
// bit for bit; the context's `deterministic` flag additionally restricts cuBLASLt to algorithms
// without split-K reductions.
#pragma once

#include "llcdist/runtime/KernelCall.h"
#include "llcdist/runtime/KernelTable.h"
#include "llcdist/runtime/Status.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace llcdist::rt::cuda {

class GemmRunner;  // Gemm.h: cuBLASLt handle, workspace, cached descriptors and algorithms

// Device memory a kernel may use for temporaries (partial sums), ordered on the launch's stream: one
// per stream, grown (never shrunk) by get(); the pointer is valid until the next get() on it.
class DeviceScratch {
public:
  virtual ~DeviceScratch() = default;
  virtual StatusOr<void*> get(int64_t bytes) = 0;
};

// Device copies of host-side tables that are part of a bound call (RoPE's cos / sin, RopeParams):
// uploaded once per host address and kept while the backend lives.
class DeviceTables {
public:
  virtual ~DeviceTables() = default;
  virtual StatusOr<const float*> upload(const float* host, int64_t count) = 0;
};

struct CudaKernelContext {
  cudaStream_t stream = nullptr;
  int rank = 0;               // named in errors
  bool deterministic = true;  // cuBLASLt: no split-K algorithms
  GemmRunner* gemm = nullptr;
  DeviceScratch* scratch = nullptr;
  DeviceTables* tables = nullptr;
  // A device int the kernels set (a plain store) to a DeviceErrorCode when they meet invalid data they
  // cannot report synchronously (an embedding id or a target outside the vocabulary); the backend reads
  // it at synchronize() and turns it into an error naming the op. 0: no error.
  int* deviceError = nullptr;
};
// Codes a kernel stores into CudaKernelContext::deviceError.
enum DeviceErrorCode : int { kDeviceOk = 0, kDeviceIdOutOfRange = 1, kDeviceTargetOutOfRange = 2 };
using CudaKernel = BackendKernel<CudaKernelContext>;
using CudaKernelTable = KernelTable<CudaKernel>;

template <class P, class Fn>
void addCudaKernel(CudaKernelTable& table, schema::OpKind kind, Fn kernel) {
  table.add(kind, typedKernel<P, CudaKernelContext>(kind, std::move(kernel)));
}

// "FILE:LINE: EXPR: cudaErrorX (the CUDA error string) on rank R" as an Internal status; ok for
// cudaSuccess.
Status cudaError(cudaError_t e, const char* expr, const char* file, int line, int rank);
// The error of the last kernel launch (cudaGetLastError), named by `what`.
Status launchError(const char* what, const char* file, int line, int rank);

#define LLCDIST_CUDA_TRY(expr, rank)                                                                  \
  do {                                                                                                \
    const cudaError_t llcdist_cuda_e_ = (expr);                                                       \
    if (llcdist_cuda_e_ != cudaSuccess)                                                               \
      return ::llcdist::rt::cuda::cudaError(llcdist_cuda_e_, #expr, __FILE__, __LINE__, (rank));     \
  } while (0)
// After a <<<...>>> launch: its configuration error, if any.
#define LLCDIST_CUDA_LAUNCHED(what, rank) ::llcdist::rt::cuda::launchError((what), __FILE__, __LINE__, (rank))

// Blocks of `threads` covering n elements, capped for grid-stride loops.
inline unsigned gridFor(int64_t n, int threads = 256) {
  const int64_t blocks = (n + threads - 1) / threads;
  return unsigned(blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}

// The families' registrations (src/cuda/kernels/<Family>.cu).
void registerCudaLayoutKernels(CudaKernelTable& table);       // Layout.cu: zero, split_*, shard_slice
void registerCudaElementwiseKernels(CudaKernelTable& table);  // Elementwise.cu: gelu, swiglu, add, accumulate, copy, cast
void registerCudaEmbeddingKernels(CudaKernelTable& table);    // Embedding.cu: embedding_*, pos_embedding_*
void registerCudaNormKernels(CudaKernelTable& table);         // Norm.cu: layer_norm_*, rms_norm_*
void registerCudaLinearKernels(CudaKernelTable& table);       // Linear.cu: linear_*, bias_add (cuBLASLt)
void registerCudaRopeKernels(CudaKernelTable& table);         // Rope.cu: rope_*
void registerCudaAttentionKernels(CudaKernelTable& table);    // Attention.cu: attention_*
void registerCudaLossKernels(CudaKernelTable& table);         // Loss.cu: cross_entropy_*
void registerCudaOptimizerKernels(CudaKernelTable& table);    // Optimizer.cu: grad_norm*, adamw, sgd

// The CUDA backend's kernel table: an entry for exactly the kinds with launchesKernel(kind), checked
// at backend creation.
const CudaKernelTable& cudaKernelTable();
Status checkCudaKernelTable();

}  // namespace llcdist::rt::cuda
