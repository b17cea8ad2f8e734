// The CUDA backend (library llcdist_runtime_cuda, built when CMake finds the CUDA toolkit; the macro
// LLCDIST_HAVE_CUDA is defined for its users). This header has no CUDA include: the driver and the CLI
// include it whether or not the backend is built, and call it only #if LLCDIST_HAVE_CUDA.
//
// One backend per rank, on one device. The arena is one cudaMalloc of the planned size; each plan
// queue is a CUDA stream (the plan's default stream too: a non-blocking stream of its own), each
// token a CUDA event; host <-> arena copies go through pinned staging; kernels are the CUDA kernel
// table's (src/cuda/kernels/, one family per file; deterministic: no atomics in reductions). Errors
// carry the file, the line, the CUDA / cuBLAS / NCCL error string and the rank, as a Status.
//
// Collectives, two ways:
//  - NCCL (options.nccl, every rank on its own device; built when NCCL is found): one ncclComm_t per
//    plan channel, split once from a world communicator in connect() (src/cuda/host/NcclPlan.h), the
//    world bootstrapped over options.communicator (rank 0's ncclUniqueId, all-gathered; MPI under a
//    launcher, #10). Collectives run in the plan's dtype on the calling stream; consecutive send /
//    recv calls are grouped (ncclGroupStart / End) so the verifier's eager-send deadlock freedom
//    carries over for a stage's exchanges; a wait orders the waiting stream after the operation
//    (cudaStreamWaitEvent; the host does not block), and errors and hangs (ncclCommGetAsyncError,
//    options.timeoutSeconds) are reported by synchronize(), which aborts the communicators.
//  - Staged (virtual ranks: several ranks of a plan on one device in one process, or no NCCL): the
//    stream is synchronized, the data copied to pinned host memory, the call made on
//    options.communicator (the in-process communicator, or MPI), and the result copied back; the
//    handle is complete when the call returns. Results are the CPU backend's bits for the same inputs
//    (the same communicator code), so a multi-rank plan can be checked against the CPU on one GPU;
//    nothing overlaps.
#pragma once

#include "llcdist/runtime/Backend.h"

#include <memory>
#include <string>

namespace llcdist::rt {

struct CudaBackendOptions {
  int rank = 0;    // this backend's global rank (named in errors)
  int device = 0;  // the CUDA device ordinal
  // The run's host communicator: the staged collectives' and NCCL's bootstrap (null: single-rank
  // groups only).
  Communicator* communicator = nullptr;
  bool nccl = false;           // collectives through NCCL (needs a build with NCCL and one device per rank)
  // --deterministic: bitwise-repeatable runs (cuDNN's deterministic attention backward, cuBLASLt
  // without split-K reductions). Default off, as PyTorch: the fast kernels.
  bool deterministic = false;
  bool tf32 = false;           // --tf32: f32 GEMMs may use TF32 tensor cores (default off: full f32)
  double timeoutSeconds = 300;  // NCCL: synchronize() gives up (and aborts) after this long
};

// Devices visible to this process (0 when the driver or a device is missing; `why` then says why).
int cudaDevices(std::string* why = nullptr);
// Whether this build's CUDA backend has NCCL.
bool cudaBackendHasNccl();

// The backend on options.device; an error when the device cannot be used.
StatusOr<std::unique_ptr<Backend>> makeCudaBackend(const CudaBackendOptions& options);

}  // namespace llcdist::rt
