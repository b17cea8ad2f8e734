// Private to the CUDA backend (library llcdist_runtime_cuda, built when the CUDA toolkit is found): the
// context a CUDA kernel-table entry gets, the error helpers, and the registrations of the CUDA kernel
// families (one src/cuda/kernels/<Family>.cu each, with its kernels, launchers and entries at its end;
// docs/adding-an-op.md). An op kind has one or more kernel variants (KernelVariant.h), stated with
// what they take in host/KernelVariants.h and registered here by name: the kernels read f32 or bf16
// for each float role as their variant takes it (KernelCall::argTypes; FloatRef in
// kernels/FloatRef.cuh), computing in f32, i32 ids and targets, f64 partial sums.
// Our own kernels are deterministic: no atomics in reductions (fixed reduction trees), so a run
// repeats bit for bit; cuBLASLt may choose split-K algorithms and cuDNN a non-deterministic backward
// unless the context's `deterministic` flag (--deterministic) restricts them.
#pragma once

#include "llcdist/runtime/KernelCall.h"
#include "llcdist/runtime/KernelTable.h"
#include "llcdist/runtime/Status.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

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
  // A device copy of `count` floats at `host`, which `owner` keeps alive (the op's RopeTable): the
  // first call with an address uploads it (synchronously), later calls return the same copy. The
  // cache holds `owner` as long as the copy, so no other table can come to lie at that address.
  virtual StatusOr<const float*> upload(const float* host, int64_t count, std::shared_ptr<const void> owner) = 0;
  // A device copy of `bytes` (a kernel's table of tensor addresses and sizes: the _multi ops), keyed by
  // its content: the first call with a content uploads it (synchronously; the kernels' bind-time
  // preparation makes that call, so a step only finds it), later calls return the same copy.
  virtual StatusOr<const void*> uploadBytes(const std::string& bytes) = 0;
};

class CudnnAttention;  // CudnnAttention.h: cuDNN's fused attention (graphs cached per shape)

struct CudaKernelContext {
  cudaStream_t stream = nullptr;
  int rank = 0;                // named in errors
  bool deterministic = false;  // --deterministic: cuBLASLt without split-K, cuDNN's deterministic backward
  bool tf32 = false;           // --tf32: f32 GEMMs may use TF32 tensor cores
  GemmRunner* gemm = nullptr;
  CudnnAttention* cudnn = nullptr;  // null when cuDNN's attention is not usable
  // The backend's one workspace for library calls that need one (cuDNN's attention), sized at bind
  // time to the largest need of the program's calls (the variant's prepare; Backend::prepare).
  void* workspace = nullptr;
  int64_t workspaceBytes = 0;
  DeviceScratch* scratch = nullptr;
  DeviceTables* tables = nullptr;
  // A device int the kernels set (a plain store) to a DeviceErrorCode when they meet invalid data they
  // cannot report synchronously (an embedding id or a target outside the vocabulary); the backend reads
  // it at synchronize() and turns it into an error naming the op. 0: no error.
  int* deviceError = nullptr;
  // With the moe codes below: the first (token, value) met, as the kernels' atomicMin of
  // (token << 32) | uint32(value) (the lowest token wins, deterministically); initially ~0. Null: none kept.
  unsigned long long* deviceErrorDetail = nullptr;
};
// Codes a kernel stores into CudaKernelContext::deviceError.
// kDeviceSplitOutOfRange: moe_chunk_transpose's splits (a negative one, or a sum past N).
// kDeviceMoeExpertOutOfRange: moe_permute's expert id outside [0, E); kDeviceMoeSlotOutOfRange /
// kDeviceMoeSlotBwdOutOfRange: moe_unpermute's / moe_unpermute_bwd's slot outside [-1, N). These three
// keep the token and the value in deviceErrorDetail.
enum DeviceErrorCode : int {
  kDeviceOk = 0,
  kDeviceIdOutOfRange = 1,
  kDeviceTargetOutOfRange = 2,
  kDeviceSplitOutOfRange = 3,
  kDeviceMoeExpertOutOfRange = 4,
  kDeviceMoeSlotOutOfRange = 5,
  kDeviceMoeSlotBwdOutOfRange = 6
};
// What a device error code (and its detail) means, as the backend's synchronize() words it: the moe codes
// give the CPU kernels' message (KernelChecks.h: moePermuteExpertError, moeSlotError) for the detail's
// token and value.
std::string describeDeviceError(int code, unsigned long long detail);
using CudaKernel = BackendKernel<CudaKernelContext>;
// Called by Backend::prepare at bind time with the bound call (its variant chosen, arena addresses):
// builds what the kernel will need (cuDNN's graphs) and returns the workspace bytes it needs (0: none).
using CudaKernelPrepare = std::function<StatusOr<int64_t>(const KernelCall& call, const CudaKernelContext& context)>;
// One kernel variant of an op kind: its name (one of cudaKernelVariants(kind)'s, host/KernelVariants.h,
// where what it takes is stated), its kernel and, optionally, its bind-time preparation.
struct CudaKernelVariant {
  std::string_view name;
  CudaKernel run;
  CudaKernelPrepare prepare;
};
// Per kind: its variants, in the order of cudaKernelVariants(kind) (checkCudaKernelTable checks it).
using CudaKernelTable = KernelTable<std::vector<CudaKernelVariant>>;

// Registers `kernel(call, params, context)` (the family's parameters P: typedKernel, KernelCall.h) as
// the variant `name` of `kind`.
template <class P, class Fn>
void addCudaKernel(CudaKernelTable& table, schema::OpKind kind, std::string_view name, Fn kernel,
                   CudaKernelPrepare prepare = nullptr) {
  table.append(kind, CudaKernelVariant{name, typedKernel<P, CudaKernelContext>(kind, std::move(kernel)),
                                       std::move(prepare)});
}
// The variant "own" (our kernel).
template <class P, class Fn>
void addCudaKernel(CudaKernelTable& table, schema::OpKind kind, Fn kernel) {
  addCudaKernel<P>(table, kind, "own", std::move(kernel));
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
void registerCudaAttentionBlockKernels(CudaKernelTable& table);  // AttentionBlock.cu: ring attention
void registerCudaLossKernels(CudaKernelTable& table);         // Loss.cu: cross_entropy_*
void registerCudaOptimizerKernels(CudaKernelTable& table);    // Optimizer.cu: grad_norm*, adamw, sgd
void registerCudaMoeKernels(CudaKernelTable& table);          // Moe.cu: moe_*, grouped_linear_*, sigmoid_gate_*
void registerCudaMoeRouterKernels(CudaKernelTable& table);    // MoeRouter.cu: moe_route*, moe_router_stats*, moe_aux_loss*

// The CUDA backend's kernel table: an entry for exactly the kinds with launchesKernel(kind), checked
// at backend creation.
const CudaKernelTable& cudaKernelTable();
Status checkCudaKernelTable();
// The kernel of `kind`'s variant `name`, for tests and benchmarks that call kernels directly; empty
// `name`: the variant "own" where there is one, else the first. Null when there is none.
const CudaKernel* cudaKernel(schema::OpKind kind, std::string_view name = {});

}  // namespace llcdist::rt::cuda
