// What the moe family's CUDA files share (Moe.cu: permutation, grouped GEMMs, shared-expert gate, chunk
// transpose; MoeRouter.cu: the router and the load-balancing loss): launch shapes, the device report of a
// bad value, the fixed-order block sum (BlockSum.cuh) and the family's size checks. Included by .cu files
// only; everything is file-local (an anonymous namespace), as it was in one file.
#ifndef LLCDIST_RUNTIME_SRC_CUDA_KERNELS_MOECOMMON_CUH
#define LLCDIST_RUNTIME_SRC_CUDA_KERNELS_MOECOMMON_CUH

#include "cuda/CudaKernels.h"
#include "cuda/kernels/BlockSum.cuh"
#include "cuda/kernels/FloatRef.cuh"
#include "llcdist/runtime/KernelChecks.h"

#include <cstdint>
#include <string>

namespace llcdist::rt::cuda {
namespace {

constexpr int kThreads = 256;  // elementwise grids
constexpr int kWarp = 32;
constexpr int kRowThreads = 256;          // a row's block: a power of two (blockSum's tree)
constexpr int64_t kMaxRowBlocks = 65535;  // row blocks in flight; each loops over rows
static_assert(kRowThreads == kBlockSumThreads, "a row's block is blockSum's block (BlockSum.cuh)");

// Where a moe kernel reports a bad value with its token (CudaKernelContext::deviceError / _Detail).
struct DeviceReport {
  int* error = nullptr;
  unsigned long long* detail = nullptr;
};
DeviceReport deviceReport(const CudaKernelContext& ctx) { return {ctx.deviceError, ctx.deviceErrorDetail}; }
// The lowest token's (token, value) wins the detail (an integer atomicMin: deterministic).
__device__ __forceinline__ void reportMoe(const DeviceReport& r, int code, int64_t token, int64_t value) {
  if (r.detail)
    atomicMin(r.detail, (static_cast<unsigned long long>(token) << 32) | static_cast<uint32_t>(int32_t(value)));
  if (r.error) *r.error = code;
}

using P = MoeParams;
using Ctx = CudaKernelContext;

unsigned rowBlocks(int64_t rows) { return unsigned(rows < 1 ? 1 : (rows > kMaxRowBlocks ? kMaxRowBlocks : rows)); }

std::string sizeError(const char* what, const std::string& why) { return std::string(what) + ": " + why; }

// Sizes every kernel of the family needs: non-negative, and T·k rows (E·capacity, N) addressable by i32
// slots.
Status checkSizes(const char* what, const P& p) {
  for (int64_t v : {p.T, p.H, p.E, p.k, p.N, p.K, p.O, p.capacity})
    if (v < 0) return Status::invalidArgument(sizeError(what, "a negative size"));
  if (p.T * p.k > INT32_MAX || p.E >= INT32_MAX || p.N > INT32_MAX || p.capacity > INT32_MAX ||
      moePermuteRows(p) > INT32_MAX)
    return Status::invalidArgument(sizeError(
        what, "T·k = " + std::to_string(p.T * p.k) + " rows, E = " + std::to_string(p.E) +
                  " experts or E·capacity = " + std::to_string(moePermuteRows(p)) + " rows do not fit i32 ids"));
  return Status::ok();
}

}  // namespace
}  // namespace llcdist::rt::cuda

#endif  // LLCDIST_RUNTIME_SRC_CUDA_KERNELS_MOECOMMON_CUH
