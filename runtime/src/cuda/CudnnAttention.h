// Private to the CUDA backend: the plan's causal GQA attention (Kernels.h) through cuDNN's fused SDPA
// graphs (the cuDNN frontend's graph API: Graph::sdpa / Graph::sdpa_backward), for bf16 plans. The own f32
// kernel (kernels/Attention.cu) stays the fallback: f32 plans, a build without the frontend, a problem
// cuDNN does not take (cudnnAttentionUnsupportedReason, or an error of prepare()).
//
// All frontend use is in CudnnAttention.cpp, the one translation unit that includes cudnn_frontend.h
// (minutes to compile; it needs nvrtc and libcuda at link time). This header has no frontend or cuDNN
// include. Without the frontend (LLCDIST_HAVE_CUDNN_FRONTEND unset) the .cpp is a stub:
// cudnnAttentionUsable says why and create() fails, so the backend compiles and links either way.
//
// The contract (AttentionPlan.h): q, out, dout, dq [B,S,nh,hd] bf16; k, v, dk, dv [B,S,nkv,hd] bf16;
// lse [B,nh,S] f32, the natural-log log-sum-exp of each causal-masked row of scale·q·kᵀ (with the
// problem's sliding window, if any, masked too: AttentionProblem::window). dq, dk, dv are
// overwritten (dk, dv summed over the query heads of a kv group). Every pointer 16-byte aligned.
//
// Life cycle: one CudnnAttention per backend (rank), created on the rank's current device. prepare(p) at
// bind time builds each problem's graph once (validate, operation graph, heuristics A then fallback,
// support check, plans) and caches it under attentionKey(p); it returns the workspace bytes the graph
// needs, which the caller allocates once (the largest over its problems) before any step. forward()
// and backward() only look up the cached graph and enqueue it on `stream` with that workspace: nothing
// is built or allocated in a step (so a step can be captured as a CUDA graph), and an unprepared
// problem is an error.
//
// deterministic (backward): cuDNN's deterministic algorithm (set_deterministic_algorithm; on Hopper the
// dP-workspace variant, whose workspace is about B·nh·S²·2 bytes: 1 GiB at B=4, nh=32, S=2048);
// without it the fast path, whose dQ accumulation with atomics may differ in the last bits between runs.
// The forward has no atomics.
//
// Errors are Status values naming the problem (describeAttention), the step that failed, the frontend's
// or cuDNN's error string and the rank; nothing throws across this interface (frontend exceptions are
// caught inside). Calls are thread-safe (a mutex guards the cache and the handle's stream), though one
// backend thread per rank is the intended use.
#pragma once

#include "cuda/host/AttentionPlan.h"
#include "llcdist/runtime/Status.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

namespace llcdist::rt::cuda {

// Whether this build has the frontend (LLCDIST_HAVE_CUDNN_FRONTEND), the cuDNN library loads at run time
// (a handle can be created) and the current device can run the SDPA graphs (compute capability 8.0+).
// When not, *why (if given) says why in one line. Cheap enough to call at bind time (creates and destroys
// a cuDNN handle on the current device).
bool cudnnAttentionUsable(std::string* why);

// The machine cudnnAttentionUnsupportedReason is asked about: the current device's compute capability
// and cuDNN's run-time version (0s where unknown: without the frontend, or no device).
CudnnTarget cudnnAttentionTarget();

class CudnnAttention {
public:
  // A cuDNN handle on the current device and an empty graph cache. Errors name the rank: no frontend in
  // this build, no cuDNN, no device.
  static StatusOr<std::unique_ptr<CudnnAttention>> create(int rank);
  virtual ~CudnnAttention();

  // Builds (or finds in the cache) the graph of `p`; returns the workspace bytes its execution needs
  // (0 is possible). Called at bind time, before any step. InvalidArgument when the problem is one
  // cudnnAttentionUnsupportedReason refuses (the reason in the message); NotFound when cuDNN has no plan
  // for it (GRAPH_NOT_SUPPORTED, no heuristic or plan: fall back, as for GemmRunner's "no algorithm");
  // Internal for any other failure (the frontend's error code and message, cuDNN's last error). A failed
  // build is not cached.
  virtual StatusOr<int64_t> prepare(const AttentionProblem& p) = 0;

  // Enqueue the prepared forward graph of `p` (p.backward false) on `stream`: out, lse from q, k, v.
  // `workspace` holds at least prepare(p)'s bytes (null when that is 0).
  virtual Status forward(const AttentionProblem& p, const void* q, const void* k, const void* v, void* out, float* lse,
                         void* workspace, int64_t workspaceBytes, cudaStream_t stream) = 0;

  // Enqueue the prepared backward graph of `p` (p.backward true) on `stream`: dq, dk, dv from dout and the
  // forward's q, k, v, out, lse.
  virtual Status backward(const AttentionProblem& p, const void* dout, const void* q, const void* k, const void* v,
                          const void* out, const float* lse, void* dq, void* dk, void* dv, void* workspace,
                          int64_t workspaceBytes, cudaStream_t stream) = 0;

  // Graphs in the cache (for tests and the bind log).
  virtual int64_t cachedGraphs() const = 0;

protected:
  CudnnAttention() = default;
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;
};

}  // namespace llcdist::rt::cuda
