// The CUDA backend's class (CudaBackend.h's makeCudaBackend makes one): its device side (arena,
// streams, events, pinned staging, the kernel table's launches) is CudaBackend.cpp's, its collectives
// (NCCL, or staged through the host communicator) CudaBackendComm.cpp's. Private to src/cuda.
#pragma once

#include "llcdist/runtime/CudaBackend.h"

#include "CommLayout.h"
#include "CudaKernels.h"
#include "CudnnAttention.h"
#include "DeviceMemory.h"
#include "Gemm.h"
#include "host/KernelVariants.h"
#include "host/NcclPlan.h"

#include "llcdist/runtime/Timeline.h"

#include "llcdist/runtime/Communicator.h"

#include <cuda_runtime.h>
#ifndef LLCDIST_HAVE_NCCL
#define LLCDIST_HAVE_NCCL 0
#endif
#if LLCDIST_HAVE_NCCL
#include <nccl.h>
#endif

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

namespace llcdist::rt::cuda {

constexpr int64_t kAlign = schema::kArenaAlignment;

#if LLCDIST_HAVE_NCCL
inline Status ncclError(ncclResult_t r, const char* expr, const char* file, int line, int rank) {
  return Status::internal(std::string(file) + ":" + std::to_string(line) + ": " + expr + ": " + ncclGetErrorString(r) +
                          " (" + ncclGetLastError(nullptr) + ") on rank " + std::to_string(rank));
}
#define LLCDIST_NCCL_TRY(expr, rank)                                                             \
  do {                                                                                           \
    const ncclResult_t llcdist_nccl_r_ = (expr);                                                 \
    if (llcdist_nccl_r_ != ncclSuccess && llcdist_nccl_r_ != ncclInProgress)                     \
      return ::llcdist::rt::cuda::ncclError(llcdist_nccl_r_, #expr, __FILE__, __LINE__, (rank)); \
  } while (0)
// A call inside an open ncclGroupStart: on failure the group is ended first, so later NCCL calls of
// this thread are not swallowed into a group that is never issued.
#define LLCDIST_NCCL_GROUP_TRY(expr, rank)                                                       \
  do {                                                                                           \
    const ncclResult_t llcdist_nccl_r_ = (expr);                                                 \
    if (llcdist_nccl_r_ != ncclSuccess && llcdist_nccl_r_ != ncclInProgress) {                   \
      ncclGroupEnd();                                                                            \
      return ::llcdist::rt::cuda::ncclError(llcdist_nccl_r_, #expr, __FILE__, __LINE__, (rank)); \
    }                                                                                            \
  } while (0)

inline ncclDataType_t ncclType(CommDType t) {
  switch (t) {
    case CommDType::kF32:
      return ncclFloat32;
    case CommDType::kF64:
      return ncclFloat64;
    case CommDType::kBF16:
      return ncclBfloat16;
    case CommDType::kI32:
      return ncclInt32;
  }
  return ncclFloat32;
}
inline ncclRedOp_t ncclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}
#endif

inline int elemBytes(CommDType t) { return t == CommDType::kF64 ? 8 : t == CommDType::kBF16 ? 2 : 4; }

// Pinned host memory for one stream's copies: a ring of kStagingSlots buffers, each reused once the
// copy that used it last is done, so the host runs up to that many copies ahead of the stream (the
// microbatch loads of a step do not wait for the kernels between them).
constexpr int kStagingSlots = 4;
constexpr int64_t kStagingChunk = int64_t(32) << 20;
struct StagingSlot {
  void* host = nullptr;
  size_t bytes = 0;
  cudaEvent_t free = nullptr;  // recorded after the last use
};
struct Staging {
  StagingSlot slots[kStagingSlots];
  int next = 0;  // the slot the next copy takes
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& o) : opts_(o), tables_(o.rank) {}

  Status init();

  ~CudaBackend() override {
    cudaSetDevice(opts_.device);
    for (cudaStream_t s : streams_) cudaStreamSynchronize(s);
#if LLCDIST_HAVE_NCCL
    for (Chan& c : channels_)
      if (c.comm) ncclCommDestroy(c.comm);
    if (world_) ncclCommDestroy(world_);
#endif
    scratch_.clear();
    cudnn_.reset();
    gemm_.reset();
    if (workspace_) cudaFree(workspace_);
    for (cudaEvent_t e : marks_) cudaEventDestroy(e);
    for (HostBuf& b : hostBufs_)
      if (b.ptr) cudaFreeHost(b.ptr);
    for (float* p : stagingAreas_) cudaFree(p);
    for (void* p : hostInputs_) cudaFreeHost(p);
    for (Graph& g : graphs_) {
      if (g.exec) cudaGraphExecDestroy(g.exec);
      if (g.graph) cudaGraphDestroy(g.graph);
    }
    for (cudaEvent_t e : joinEvents_) cudaEventDestroy(e);
    for (Staging& st : staging_)
      for (StagingSlot& slot : st.slots) {
        if (slot.host) cudaFreeHost(slot.host);
        if (slot.free) cudaEventDestroy(slot.free);
      }
    for (auto& [id, h] : handles_)
      if (h.event) cudaEventDestroy(h.event);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    for (cudaEvent_t e : freeEvents_) cudaEventDestroy(e);
    for (cudaStream_t s : streams_) cudaStreamDestroy(s);
    if (deviceError_) cudaFree(deviceError_);
    if (arena_) cudaFree(arena_);
  }

  std::string name() const override { return "cuda"; }

  // ---- memory ----------------------------------------------------------------------------------------
  Status allocateArena(int64_t bytes) override;
  std::byte* arenaAt(int64_t offset) override { return arena_ ? static_cast<std::byte*>(arena_) + offset : nullptr; }
  int64_t arenaBytes() const override { return bytes_; }
  StatusOr<float*> allocateStaging(int64_t elems) override;
  StatusOr<void*> allocateHostInput(int64_t bytes) override;
  int64_t peakAllocatedBytes() const override;

  // ---- streams and events ----------------------------------------------------------------------------
  StatusOr<Stream> createStream() override {
    LLCDIST_RETURN_IF_ERROR(device());
    LLCDIST_RETURN_IF_ERROR(addStream());
    return Stream{int(streams_.size()) - 1};
  }
  StatusOr<Event> createEvent() override;
  Status recordEvent(Stream s, Event e) override;
  Status waitEvent(Stream s, Event e) override;
  Status synchronize() override;

  // ---- work -----------------------------------------------------------------------------------------
  // Copies go through the stream's pinned slots in chunks of at most kStagingChunk bytes, so a large
  // parameter needs no pinned buffer of its size.
  Status copyToDevice(Stream s, int64_t offset, const void* src, int64_t bytes) override;
  Status copyToHost(Stream s, void* dst, int64_t offset, int64_t bytes) override;
  Status fillZero(Stream s, int64_t offset, int64_t bytes) override;
  Status copyHostInput(Stream s, void* dst, const void* src, int64_t bytes) override;
  Status launchHostFunc(Stream s, std::function<void()> fn) override {
    LLCDIST_ASSIGN_OR_RETURN(cudaStream_t st, enter(s));
    return hostFunc(st, std::move(fn));
  }
  Status launch(Stream s, const KernelCall& call) override {
    LLCDIST_ASSIGN_OR_RETURN(cudaStream_t st, enter(s));
    LLCDIST_ASSIGN_OR_RETURN(const CudaKernelVariant* v, variantOf(call));
    return v->run(call, context(s, st)).withContext(std::string(schema::opName(call.kind)));
  }
  bool hasKernel(schema::OpKind kind) const override { return cudaKernelTable().find(kind) != nullptr; }
  std::vector<const KernelVariantInfo*> kernelVariants(schema::OpKind kind) const override {
    std::vector<const KernelVariantInfo*> out;
    for (const KernelVariantInfo& v : variants_[size_t(kind)]) out.push_back(&v);
    return out;
  }
  KernelSelectOptions kernelSelectOptions() const override { return select_; }
  // The variant's bind-time preparation (cuDNN's graphs, already built when the choice tried them):
  // the one workspace grows to the largest need, before any step.
  Status prepare(const KernelCall& call) override;

  // CUDA graphs of recorded steps (Backend.h, CommandList.h): the default stream is captured in
  // thread-local mode; the streams it forks into through event waits (asynchronous plans'
  // communication queues) are joined back before the capture ends.
  bool canCaptureGraph(std::string* why) const override;
  Status beginGraphCapture() override;
  StatusOr<int> endGraphCapture() override;
  Status launchGraph(int graph) override;

  // ---- time marks: a timing event per mark, its time from the first mark of the step ---------------
  StatusOr<int64_t> markTime(Stream s) override;
  StatusOr<int64_t> markTimeNs(int64_t mark) override;
  void clearTimeMarks() override { marksUsed_ = 0; }

  // ---- collectives -----------------------------------------------------------------------------------
  StatusOr<Channel> createChannel(const std::vector<int>& group) override;

  Status connect() override;

  StatusOr<CollectiveHandle> allReduceAsync(Stream s, void* buffer, int64_t count, CommDType dtype, ReduceOp op,
                                            Channel ch) override;

  StatusOr<CollectiveHandle> allGatherAsync(Stream s, const void* in, void* out, int64_t outer, int64_t inner,
                                            int64_t total, CommDType dtype, Channel ch) override;

  StatusOr<CollectiveHandle> reduceScatterAsync(Stream s, const void* in, void* out, int64_t outer, int64_t inner,
                                                int64_t total, CommDType dtype, ReduceOp op, Channel ch) override;

  StatusOr<CollectiveHandle> allToAllAsync(Stream s, const void* x, void* y, int64_t outer, int64_t mid, int64_t inner,
                                           int xRankDim, CommDType dtype, Channel ch) override;

  StatusOr<CollectiveHandle> allToAllVAsync(Stream s, const void* x, int64_t xRows, const int32_t* sendSplits, void* y,
                                            int64_t yRows, int32_t* recvSplits, int64_t chunks, int64_t rowElems,
                                            CommDType dtype, Channel ch) override;

  StatusOr<CollectiveHandle> sendAsync(Stream s, const void* x, int64_t count, CommDType dtype, int peer, int64_t tag,
                                       int64_t microbatch) override;
  StatusOr<CollectiveHandle> recvAsync(Stream s, void* y, int64_t count, CommDType dtype, int peer, int64_t tag,
                                       int64_t microbatch) override;

  Status waitCollective(Stream s, CollectiveHandle h) override;
  bool collectiveDone(CollectiveHandle h) override;

 private:
  struct Chan {
    Group group;
    int member = 0;
#if LLCDIST_HAVE_NCCL
    ncclComm_t comm = nullptr;
#endif
  };
  struct Graph {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
  };
  struct Handle {
    cudaEvent_t event = nullptr;  // null: complete, with `status`
    Status status;
  };
  struct PendingP2p {
    bool send;
    void* ptr;
    int64_t count;
    CommDType dtype;
    int peer;
    int64_t handle;
  };

  bool nccl() const { return opts_.nccl; }

  CudaKernelContext context(Stream s, cudaStream_t st);
  StatusOr<const CudaKernelVariant*> variantOf(const KernelCall& call) const;
  // What the kernel variants take (host/KernelVariants.h), each variant with a bind-time preparation
  // (cuDNN's graph build) made part of its predicate: a variant whose preparation fails for a call does
  // not fit it, and the choice falls back to the next (the own kernel), with the reason in the log.
  void buildVariants();
  Status growWorkspace(int64_t bytes);

  Status device() {
    LLCDIST_CUDA_TRY(cudaSetDevice(opts_.device), opts_.rank);
    return Status::ok();
  }

  // Every call that enqueues work: the device, the stream, and the grouped point-to-point calls issued
  // before it (so they run before it on their stream, in issue order).
  StatusOr<cudaStream_t> enter(Stream s);
  Status checkEvent(Event e) const {
    if (e.id < 0 || e.id >= int(events_.size()))
      return Status::invalidArgument("cuda backend: unknown event " + std::to_string(e.id));
    return Status::ok();
  }
  Status checkRange(int64_t offset, int64_t bytes, const char* what) const;
  StatusOr<Chan*> channel(Channel ch);

  Status addStream();

  // The stream's next pinned staging slot, at least `bytes`, once its previous copy is done; the copy
  // that takes it calls stagingUsed after enqueueing.
  StatusOr<void*> stagingFor(Stream s, int64_t bytes);
  Status stagingUsed(Stream s);

  Status hostFunc(cudaStream_t st, std::function<void()> fn);

  // Staged collectives: pinned host buffers (two, for in and out; a third for all_to_all_v's splits),
  // the copies synchronous.
  StatusOr<void*> hostBuffer(int which, int64_t bytes);
  Status toHost(cudaStream_t st, void* host, const void* dev, int64_t bytes);
  Status toDevice(cudaStream_t st, void* dev, const void* host, int64_t bytes);

  CollectiveHandle done(Status st);
  StatusOr<CollectiveHandle> recordHandle(cudaStream_t st);
  // An event for a handle: one a wait has released (freeEvents_), or a new one.
  StatusOr<cudaEvent_t> handleEvent();

  StatusOr<CollectiveHandle> p2p(bool send, Stream s, void* ptr, int64_t count, CommDType dtype, int peer, int64_t tag,
                                 int64_t microbatch);

  // Issues the pending point-to-point calls as one NCCL group on their stream.
  Status flushP2p();

  // NCCL: every stream done, or an asynchronous communicator error, or the timeout (then every
  // communicator is aborted, so no rank waits forever).
  Status waitForNccl();
#if LLCDIST_HAVE_NCCL
  Status asyncError(ncclComm_t comm);
  // all_to_all_v over NCCL, before any row moves: every member's [x rows, y rows | send splits] gathered
  // to every member (one all-gather), copied to the host with the call's one synchronization, and checked
  // alike on every member (checkEveryMembersSplits), so a wrong split fails the call on all of them at
  // once. Leaves this member's send and received splits in hostSend / hostRecv and the received ones in
  // recvSplits on the device.
  Status agreeOnSplits(Chan* c, Stream s, cudaStream_t st, const int32_t* sendSplits, int32_t* recvSplits,
                       int64_t xRows, int64_t yRows, int64_t chunks, int32_t** hostSend, int32_t** hostRecv);
  // Polls `st` behind an NCCL call the host must wait for, as waitForNccl polls every stream: an
  // asynchronous NCCL error, or the timeout (then every communicator is aborted; `what` names the call).
  Status pollNccl(cudaStream_t st, ncclComm_t comm, const std::string& what);
  // The timeout's end: every communicator aborted, and the error saying `what` did not finish.
  Status abortOnTimeout(const std::string& what);
#endif

  struct HostBuf {
    void* ptr = nullptr;
    size_t bytes = 0;
  };

  CudaBackendOptions opts_;
  void* arena_ = nullptr;
  int64_t bytes_ = 0;
  // The kernels' error code (an int) and, at byte 8, its detail (CudaKernelContext): one allocation.
  static constexpr size_t kDeviceErrorBytes = 16;
  int* deviceError_ = nullptr;
  unsigned long long* deviceErrorDetail() const {
    return reinterpret_cast<unsigned long long*>(reinterpret_cast<char*>(deviceError_) + 8);
  }
  Status resetDeviceError();  // code 0, detail ~0
  std::vector<cudaStream_t> streams_;
  std::vector<std::unique_ptr<StreamScratch>> scratch_;
  std::vector<Staging> staging_;
  std::vector<cudaEvent_t> events_;
  TableCache tables_;
  std::unique_ptr<GemmRunner> gemm_;
  std::unique_ptr<CudnnAttention> cudnn_;  // null: cuDNN's attention is not usable (cudnnWhy_ says why)
  std::string cudnnWhy_;
  void* workspace_ = nullptr;  // the library workspace (Backend::prepare), grown before any step
  int64_t workspaceBytes_ = 0;
  KernelSelectOptions select_;
  std::array<std::vector<KernelVariantInfo>, schema::kNumOpKinds> variants_;
  std::vector<cudaEvent_t> marks_;  // time marks' events (with timing), reused each step
  size_t marksUsed_ = 0;
  int64_t anchorNs_ = 0;
  std::vector<Chan> channels_;
  std::map<int64_t, Handle> handles_;
  std::vector<cudaEvent_t> freeEvents_;
  int64_t nextHandle_ = 0;
  std::vector<PendingP2p> pending_;
  int pendingStream_ = 0;
  HostBuf hostBufs_[3];
  std::vector<float*> stagingAreas_;     // allocateStaging
  std::vector<void*> hostInputs_;        // allocateHostInput: pinned
  std::vector<Graph> graphs_;            // endGraphCapture, by id
  std::vector<cudaEvent_t> joinEvents_;  // per stream: its join into a capture
  // Host functions captured into a graph: a graph's host node runs at every launch, so each is kept
  // (not deleted by its first run) until the backend, after its graphs, is destroyed.
  std::vector<std::unique_ptr<std::function<void()>>> capturedHostFuncs_;
  int64_t stagingBytes_ = 0;
#if LLCDIST_HAVE_NCCL
  ncclComm_t world_ = nullptr;
#endif
};

}  // namespace llcdist::rt::cuda
