// The CUDA backend (CudaBackend.h): the arena, streams, events, pinned staging, the kernel table's
// launches, and the collectives through NCCL or staged through the host communicator.
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
#include <thread>
#include <vector>

namespace llcdist::rt {
namespace cuda {
namespace {

constexpr int64_t kAlign = schema::kArenaAlignment;

#if LLCDIST_HAVE_NCCL
Status ncclError(ncclResult_t r, const char* expr, const char* file, int line, int rank) {
  return Status::internal(std::string(file) + ":" + std::to_string(line) + ": " + expr + ": " + ncclGetErrorString(r) +
                          " (" + ncclGetLastError(nullptr) + ") on rank " + std::to_string(rank));
}
#define LLCDIST_NCCL_TRY(expr, rank)                                                           \
  do {                                                                                         \
    const ncclResult_t llcdist_nccl_r_ = (expr);                                               \
    if (llcdist_nccl_r_ != ncclSuccess && llcdist_nccl_r_ != ncclInProgress)                   \
      return ::llcdist::rt::cuda::ncclError(llcdist_nccl_r_, #expr, __FILE__, __LINE__, (rank)); \
  } while (0)

ncclDataType_t ncclType(CommDType t) {
  switch (t) {
    case CommDType::kF32: return ncclFloat32;
    case CommDType::kF64: return ncclFloat64;
    case CommDType::kBF16: return ncclBfloat16;
  }
  return ncclFloat32;
}
ncclRedOp_t ncclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
  }
  return ncclSum;
}
#endif

int elemBytes(CommDType t) { return t == CommDType::kF64 ? 8 : t == CommDType::kBF16 ? 2 : 4; }

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

  Status init() {
    LLCDIST_RETURN_IF_ERROR(checkCudaKernelTable());
    LLCDIST_CUDA_TRY(cudaSetDevice(opts_.device), opts_.rank);
#if !LLCDIST_HAVE_NCCL
    if (opts_.nccl)
      return Status::invalidArgument("the CUDA backend was built without NCCL: collectives are staged through the "
                                     "host communicator (run with one process per GPU after installing NCCL)");
#endif
    LLCDIST_RETURN_IF_ERROR(addStream());  // the plan's default stream (0)
    LLCDIST_CUDA_TRY(cudaMalloc(&deviceError_, sizeof(int)), opts_.rank);
    LLCDIST_CUDA_TRY(cudaMemset(deviceError_, 0, sizeof(int)), opts_.rank);
    LLCDIST_ASSIGN_OR_RETURN(gemm_, makeGemmRunner(opts_.rank));
    cudaDeviceProp prop{};
    LLCDIST_CUDA_TRY(cudaGetDeviceProperties(&prop, opts_.device), opts_.rank);
    select_.deterministic = opts_.deterministic;
    select_.tf32 = opts_.tf32;
    select_.smVersion = prop.major * 10 + prop.minor;
    // cuDNN's fused attention where this build and machine have it; otherwise the own kernel runs
    // attention (KernelVariants.h), and `why` is what the choice log says.
    if (cudnnAttentionUsable(&cudnnWhy_)) {
      StatusOr<std::unique_ptr<CudnnAttention>> made = CudnnAttention::create(opts_.rank);
      if (made.isOk()) {
        cudnn_ = std::move(made).value();
        select_.cudnn = true;
        select_.cudnnVersion = cudnnAttentionTarget().cudnnVersion;
      } else {
        cudnnWhy_ = made.status().message();
      }
    }
    buildVariants();
    return Status::ok();
  }

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
  Status allocateArena(int64_t bytes) override {
    LLCDIST_RETURN_IF_ERROR(device());
    if (arena_) return Status::invalidArgument("cuda backend: the arena is already allocated");
    if (bytes < 0) return Status::invalidArgument("cuda backend: negative arena size " + std::to_string(bytes));
    const int64_t rounded = std::max<int64_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
    const cudaError_t e = cudaMalloc(&arena_, size_t(rounded));
    if (e != cudaSuccess) {
      size_t freeB = 0, totalB = 0;
      cudaGetLastError();
      cudaMemGetInfo(&freeB, &totalB);
      return Status::invalidArgument("rank " + std::to_string(opts_.rank) + ": cannot allocate the arena of " +
                                     std::to_string(bytes) + " bytes on device " + std::to_string(opts_.device) +
                                     " (" + cudaGetErrorString(e) + "; " + std::to_string(freeB) + " of " +
                                     std::to_string(totalB) + " bytes free)");
    }
    LLCDIST_CUDA_TRY(cudaMemset(arena_, 0, size_t(rounded)), opts_.rank);
    bytes_ = bytes;
    return Status::ok();
  }
  std::byte* arenaAt(int64_t offset) override { return arena_ ? static_cast<std::byte*>(arena_) + offset : nullptr; }
  int64_t arenaBytes() const override { return bytes_; }
  StatusOr<float*> allocateStaging(int64_t elems) override {
    LLCDIST_RETURN_IF_ERROR(device());
    if (elems < 0) return Status::invalidArgument("cuda backend: negative staging size " + std::to_string(elems));
    float* p = nullptr;
    LLCDIST_CUDA_TRY(cudaMalloc(&p, size_t(std::max<int64_t>(elems, 1)) * sizeof(float)), opts_.rank);
    stagingAreas_.push_back(p);
    stagingBytes_ += elems * int64_t(sizeof(float));
    LLCDIST_CUDA_TRY(cudaMemset(p, 0, size_t(std::max<int64_t>(elems, 1)) * sizeof(float)), opts_.rank);
    return p;
  }
  int64_t peakAllocatedBytes() const override {
    int64_t scratch = stagingBytes_;
    for (const auto& s : scratch_) scratch += s->bytes();
    const int64_t arena = arena_ ? std::max<int64_t>(kAlign, (bytes_ + kAlign - 1) / kAlign * kAlign) : 0;
    return arena + scratch + tables_.bytes() + (gemm_ ? gemm_->deviceBytes() : 0) + workspaceBytes_;
  }

  // ---- streams and events ----------------------------------------------------------------------------
  StatusOr<Stream> createStream() override {
    LLCDIST_RETURN_IF_ERROR(device());
    LLCDIST_RETURN_IF_ERROR(addStream());
    return Stream{int(streams_.size()) - 1};
  }
  StatusOr<Event> createEvent() override {
    LLCDIST_RETURN_IF_ERROR(device());
    cudaEvent_t e = nullptr;
    LLCDIST_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), opts_.rank);
    events_.push_back(e);
    return Event{int(events_.size()) - 1};
  }
  Status recordEvent(Stream s, Event e) override {
    LLCDIST_ASSIGN_OR_RETURN(cudaStream_t st, enter(s));
    LLCDIST_RETURN_IF_ERROR(checkEvent(e));
    LLCDIST_CUDA_TRY(cudaEventRecord(events_[size_t(e.id)], st), opts_.rank);
    return Status::ok();
  }
  Status waitEvent(Stream s, Event e) override {
    LLCDIST_ASSIGN_OR_RETURN(cudaStream_t st, enter(s));
    LLCDIST_RETURN_IF_ERROR(checkEvent(e));
    LLCDIST_CUDA_TRY(cudaStreamWaitEvent(st, events_[size_t(e.id)], 0), opts_.rank);
    return Status::ok();
  }
  Status synchronize() override {
    LLCDIST_RETURN_IF_ERROR(device());
    LLCDIST_RETURN_IF_ERROR(flushP2p());
    if (nccl()) LLCDIST_RETURN_IF_ERROR(waitForNccl());
    for (cudaStream_t s : streams_) LLCDIST_CUDA_TRY(cudaStreamSynchronize(s), opts_.rank);
    int code = 0;
    LLCDIST_CUDA_TRY(cudaMemcpy(&code, deviceError_, sizeof(int), cudaMemcpyDeviceToHost), opts_.rank);
    if (code != kDeviceOk) {
      LLCDIST_CUDA_TRY(cudaMemset(deviceError_, 0, sizeof(int)), opts_.rank);
      return Status::invalidArgument(
          std::string(code == kDeviceIdOutOfRange ? "a token id outside the vocabulary"
                      : code == kDeviceTargetOutOfRange ? "a target outside the vocabulary"
                                                        : "an invalid value") +
          " met by a kernel on rank " + std::to_string(opts_.rank) + " (the CUDA kernels report it at the next synchronize)");
    }
    return Status::ok();
  }

  // ---- work -----------------------------------------------------------------------------------------
  // Copies go through the stream's pinned slots in chunks of at most kStagingChunk bytes, so a large
  // parameter needs no pinned buffer of its size.
  Status copyToDevice(Stream s, int64_t offset, const void* src, int64_t bytes) override {
    LLCDIST_ASSIGN_OR_RETURN(cudaStream_t st, enter(s));
    LLCDIST_RETURN_IF_ERROR(checkRange(offset, bytes, "copyToDevice"));
    for (int64_t done = 0; done < bytes; done += kStagingChunk) {
      const int64_t n = std::min(kStagingChunk, bytes - done);
      LLCDIST_ASSIGN_OR_RETURN(void* pinned, stagingFor(s, n));
      std::memcpy(pinned, static_cast<const std::byte*>(src) + done, size_t(n));
      LLCDIST_CUDA_TRY(cudaMemcpyAsync(arenaAt(offset + done), pinned, size_t(n), cudaMemcpyHostToDevice, st),
                       opts_.rank);
      LLCDIST_RETURN_IF_ERROR(stagingUsed(s));
    }
    return Status::ok();
  }
  Status copyToHost(Stream s, void* dst, int64_t offset, int64_t bytes) override {
    LLCDIST_ASSIGN_OR_RETURN(cudaStream_t st, enter(s));
    LLCDIST_RETURN_IF_ERROR(checkRange(offset, bytes, "copyToHost"));
    for (int64_t done = 0; done < bytes; done += kStagingChunk) {
      const int64_t n = std::min(kStagingChunk, bytes - done);
      LLCDIST_ASSIGN_OR_RETURN(void* pinned, stagingFor(s, n));
      LLCDIST_CUDA_TRY(cudaMemcpyAsync(pinned, arenaAt(offset + done), size_t(n), cudaMemcpyDeviceToHost, st),
                       opts_.rank);
      // The pinned bytes reach `dst` on the stream, after the copy (no CUDA call in a host function).
      std::byte* to = static_cast<std::byte*>(dst) + done;
      LLCDIST_RETURN_IF_ERROR(hostFunc(st, [to, pinned, n] { std::memcpy(to, pinned, size_t(n)); }));
      LLCDIST_RETURN_IF_ERROR(stagingUsed(s));
    }
    return Status::ok();
  }
  Status fillZero(Stream s, int64_t offset, int64_t bytes) override {
    LLCDIST_ASSIGN_OR_RETURN(cudaStream_t st, enter(s));
    LLCDIST_RETURN_IF_ERROR(checkRange(offset, bytes, "fillZero"));
    if (bytes == 0) return Status::ok();
    LLCDIST_CUDA_TRY(cudaMemsetAsync(arenaAt(offset), 0, size_t(bytes), st), opts_.rank);
    return Status::ok();
  }
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
  Status prepare(const KernelCall& call) override {
    LLCDIST_RETURN_IF_ERROR(device());
    LLCDIST_ASSIGN_OR_RETURN(const CudaKernelVariant* v, variantOf(call));
    if (!v->prepare) return Status::ok();
    LLCDIST_ASSIGN_OR_RETURN(const int64_t bytes, v->prepare(call, context(Stream{0}, streams_[0])));
    return growWorkspace(bytes);
  }

  // ---- time marks: a timing event per mark, its time from the first mark of the step ---------------
  StatusOr<int64_t> markTime(Stream s) override {
    LLCDIST_ASSIGN_OR_RETURN(cudaStream_t st, enter(s));
    if (marksUsed_ == marks_.size()) {
      cudaEvent_t e = nullptr;
      LLCDIST_CUDA_TRY(cudaEventCreate(&e), opts_.rank);  // with timing
      marks_.push_back(e);
    }
    LLCDIST_CUDA_TRY(cudaEventRecord(marks_[marksUsed_], st), opts_.rank);
    // The first mark's device time is taken as the host clock when it was recorded: the device
    // timeline is placed on the host's scale at that point (close when the stream was idle).
    if (marksUsed_ == 0) anchorNs_ = Timeline::nowNs();
    return int64_t(marksUsed_++);
  }
  StatusOr<int64_t> markTimeNs(int64_t mark) override {
    if (mark < 0 || size_t(mark) >= marksUsed_)
      return Status::outOfRange("time mark " + std::to_string(mark) + " was not made (or was cleared)");
    float ms = 0.0f;
    LLCDIST_CUDA_TRY(cudaEventElapsedTime(&ms, marks_[0], marks_[size_t(mark)]), opts_.rank);
    return anchorNs_ + int64_t(double(ms) * 1e6);
  }
  void clearTimeMarks() override { marksUsed_ = 0; }

  // ---- collectives -----------------------------------------------------------------------------------
  StatusOr<Channel> createChannel(const std::vector<int>& group) override {
    const auto at = std::find(group.begin(), group.end(), opts_.rank);
    if (at == group.end() || std::count(group.begin(), group.end(), opts_.rank) != 1)
      return Status::invalidArgument("cuda backend: rank " + std::to_string(opts_.rank) +
                                     " creates a channel for a group without it exactly once");
    if (group.size() > 1 && !opts_.communicator)
      return Status::invalidArgument("cuda backend: a group of " + std::to_string(group.size()) +
                                     " ranks without a communicator (a single-rank run)");
    channels_.push_back(Chan{group, int(at - group.begin())});
    return Channel{int(channels_.size()) - 1};
  }

  Status connect() override {
#if LLCDIST_HAVE_NCCL
    if (!nccl()) return Status::ok();
    LLCDIST_RETURN_IF_ERROR(device());
    std::vector<Group> mine;
    for (const Chan& c : channels_) mine.push_back(c.group);
    const int world = opts_.communicator->worldSize();
    LLCDIST_ASSIGN_OR_RETURN(
        NcclBootstrap boot,
        bootstrapNccl(*opts_.communicator, opts_.rank, mine, [&]() -> StatusOr<NcclId> {
          ncclUniqueId id;
          LLCDIST_NCCL_TRY(ncclGetUniqueId(&id), opts_.rank);
          NcclId out;
          static_assert(sizeof(id) == sizeof(out), "ncclUniqueId is 128 bytes");
          std::memcpy(out.data(), &id, sizeof(id));
          return out;
        }));
    ncclUniqueId id;
    std::memcpy(&id, boot.id.data(), sizeof(id));
    LLCDIST_NCCL_TRY(ncclCommInitRank(&world_, world, id, opts_.rank), opts_.rank);
    LLCDIST_ASSIGN_OR_RETURN(NcclChannelPlan plan, planNcclChannels(boot.groupsOfRank, opts_.rank));
    std::vector<ncclComm_t> split(plan.rounds.size(), nullptr);
    for (size_t round = 0; round < plan.rounds.size(); ++round) {
      const NcclSplitCall& call = plan.calls[round];
      LLCDIST_NCCL_TRY(ncclCommSplit(world_, call.color < 0 ? NCCL_SPLIT_NOCOLOR : call.color, call.key,
                                     &split[round], nullptr),
                       opts_.rank);
    }
    for (Chan& c : channels_) {
      if (c.group.size() < 2) continue;
      auto it = plan.roundOf.find(c.group);
      if (it == plan.roundOf.end()) return Status::internal("NCCL channel plan without the group of a channel");
      c.comm = split[it->second];
    }
#endif
    return Status::ok();
  }

  StatusOr<CollectiveHandle> allReduceAsync(Stream s, void* buffer, int64_t count, CommDType dtype, ReduceOp op,
                                            Channel ch) override {
    LLCDIST_ASSIGN_OR_RETURN(cudaStream_t st, enter(s));
    LLCDIST_ASSIGN_OR_RETURN(Chan * c, channel(ch));
    if (c->group.size() == 1 || count == 0) return done(Status::ok());
#if LLCDIST_HAVE_NCCL
    if (nccl()) {
      LLCDIST_NCCL_TRY(ncclAllReduce(buffer, buffer, size_t(count), ncclType(dtype), ncclOp(op), c->comm, st),
                       opts_.rank);
      return recordHandle(st);
    }
#endif
    const int64_t bytes = count * elemBytes(dtype);
    LLCDIST_ASSIGN_OR_RETURN(void* host, hostBuffer(0, bytes));
    LLCDIST_RETURN_IF_ERROR(toHost(st, host, buffer, bytes));
    LLCDIST_RETURN_IF_ERROR(opts_.communicator->allReduce(opts_.rank, c->group, host, count, dtype, op));
    LLCDIST_RETURN_IF_ERROR(toDevice(st, buffer, host, bytes));
    return done(Status::ok());
  }

  StatusOr<CollectiveHandle> allGatherAsync(Stream s, const void* in, void* out, int64_t outer, int64_t inner,
                                            int64_t total, CommDType dtype, Channel ch) override {
    LLCDIST_ASSIGN_OR_RETURN(cudaStream_t st, enter(s));
    LLCDIST_ASSIGN_OR_RETURN(Chan * c, channel(ch));
    const int64_t n = int64_t(c->group.size()), eb = elemBytes(dtype);
    if (n == 1) {  // a copy of the first `total` of each row
      LLCDIST_CUDA_TRY(cudaMemcpy2DAsync(out, size_t(total * eb), in, size_t(inner * eb), size_t(total * eb),
                                         size_t(outer), cudaMemcpyDeviceToDevice, st),
                       opts_.rank);
      return done(Status::ok());
    }
#if LLCDIST_HAVE_NCCL
    if (nccl()) {
      const bool direct = outer == 1 && total == n * inner;
      void* blocks = out;
      if (!direct) {
        LLCDIST_ASSIGN_OR_RETURN(blocks, scratch_[size_t(s.id)]->get(n * outer * inner * eb));
      }
      LLCDIST_NCCL_TRY(ncclAllGather(in, blocks, size_t(outer * inner), ncclType(dtype), c->comm, st), opts_.rank);
      if (!direct) LLCDIST_RETURN_IF_ERROR(unpackGathered(blocks, out, n, outer, inner, total, int(eb), st, opts_.rank));
      return recordHandle(st);
    }
#endif
    // Staged as the CPU backend does it: the whole padded tensor on the host, then its real elements.
    const int64_t padded = n * inner;
    LLCDIST_ASSIGN_OR_RETURN(void* hin, hostBuffer(0, outer * inner * eb));
    LLCDIST_ASSIGN_OR_RETURN(void* hout, hostBuffer(1, outer * padded * eb));
    LLCDIST_RETURN_IF_ERROR(toHost(st, hin, in, outer * inner * eb));
    LLCDIST_RETURN_IF_ERROR(opts_.communicator->allGather(opts_.rank, c->group, hin, hout, outer, inner, dtype));
    for (int64_t o = 1; total < padded && o < outer; ++o)  // rows of `padded` -> rows of `total`, in place
      std::memmove(static_cast<std::byte*>(hout) + o * total * eb, static_cast<std::byte*>(hout) + o * padded * eb,
                   size_t(total * eb));
    LLCDIST_RETURN_IF_ERROR(toDevice(st, out, hout, outer * total * eb));
    return done(Status::ok());
  }

  StatusOr<CollectiveHandle> reduceScatterAsync(Stream s, const void* in, void* out, int64_t outer, int64_t inner,
                                                int64_t total, CommDType dtype, ReduceOp op, Channel ch) override {
    LLCDIST_ASSIGN_OR_RETURN(cudaStream_t st, enter(s));
    LLCDIST_ASSIGN_OR_RETURN(Chan * c, channel(ch));
    const int64_t n = int64_t(c->group.size()), eb = elemBytes(dtype);
    if (n == 1) {  // this member's block, zero past `total`
      LLCDIST_CUDA_TRY(cudaMemsetAsync(out, 0, size_t(outer * inner * eb), st), opts_.rank);
      const int64_t keep = std::min(inner, total);
      if (keep > 0)
        LLCDIST_CUDA_TRY(cudaMemcpy2DAsync(out, size_t(inner * eb), in, size_t(total * eb), size_t(keep * eb),
                                           size_t(outer), cudaMemcpyDeviceToDevice, st),
                         opts_.rank);
      return done(Status::ok());
    }
#if LLCDIST_HAVE_NCCL
    if (nccl()) {
      const bool direct = outer == 1 && total == n * inner;
      const void* blocks = in;
      if (!direct) {
        LLCDIST_ASSIGN_OR_RETURN(void* packed, scratch_[size_t(s.id)]->get(n * outer * inner * eb));
        LLCDIST_RETURN_IF_ERROR(packForScatter(in, packed, n, outer, inner, total, int(eb), st, opts_.rank));
        blocks = packed;
      }
      LLCDIST_NCCL_TRY(
          ncclReduceScatter(blocks, out, size_t(outer * inner), ncclType(dtype), ncclOp(op), c->comm, st),
          opts_.rank);
      return recordHandle(st);
    }
#endif
    // Staged as the CPU backend does it: a zero-padded copy of the input, reduced.
    const int64_t padded = n * inner;
    LLCDIST_ASSIGN_OR_RETURN(void* hin, hostBuffer(0, outer * padded * eb));
    LLCDIST_ASSIGN_OR_RETURN(void* hout, hostBuffer(1, outer * inner * eb));
    LLCDIST_RETURN_IF_ERROR(toHost(st, hin, in, outer * total * eb));
    for (int64_t o = outer - 1; total < padded && o >= 0; --o) {  // rows of `total` -> padded rows, in place
      std::byte* row = static_cast<std::byte*>(hin) + o * padded * eb;
      std::memmove(row, static_cast<std::byte*>(hin) + o * total * eb, size_t(total * eb));
      std::memset(row + total * eb, 0, size_t((padded - total) * eb));
    }
    LLCDIST_RETURN_IF_ERROR(
        opts_.communicator->reduceScatter(opts_.rank, c->group, hin, hout, outer, inner, dtype, op));
    LLCDIST_RETURN_IF_ERROR(toDevice(st, out, hout, outer * inner * eb));
    return done(Status::ok());
  }

  StatusOr<CollectiveHandle> sendAsync(Stream s, const float* x, int64_t count, int peer, int64_t tag,
                                       int64_t microbatch) override {
    return p2p(true, s, const_cast<float*>(x), count, peer, tag, microbatch);
  }
  StatusOr<CollectiveHandle> recvAsync(Stream s, float* y, int64_t count, int peer, int64_t tag,
                                       int64_t microbatch) override {
    return p2p(false, s, y, count, peer, tag, microbatch);
  }

  Status waitCollective(Stream s, CollectiveHandle h) override {
    LLCDIST_ASSIGN_OR_RETURN(cudaStream_t st, enter(s));
    auto it = handles_.find(h.id);
    if (it == handles_.end())
      return Status::internal("cuda backend: handle " + std::to_string(h.id) + " is unknown or was waited for");
    Handle handle = it->second;
    handles_.erase(it);
    if (!handle.event) return handle.status;
    const cudaError_t e = cudaStreamWaitEvent(st, handle.event, 0);
    freeEvents_.push_back(handle.event);  // reusable: the wait has captured the record
    LLCDIST_CUDA_TRY(e, opts_.rank);
    return Status::ok();
  }
  bool collectiveDone(CollectiveHandle h) override {
    if (!flushP2p().isOk()) return true;  // the error is the wait's
    auto it = handles_.find(h.id);
    if (it == handles_.end() || !it->second.event) return true;
    return cudaEventQuery(it->second.event) != cudaErrorNotReady;
  }

private:
  struct Chan {
    Group group;
    int member = 0;
#if LLCDIST_HAVE_NCCL
    ncclComm_t comm = nullptr;
#endif
  };
  struct Handle {
    cudaEvent_t event = nullptr;  // null: complete, with `status`
    Status status;
  };
  struct PendingP2p {
    bool send;
    float* ptr;
    int64_t count;
    int peer;
    int64_t handle;
  };

  bool nccl() const { return opts_.nccl; }

  CudaKernelContext context(Stream s, cudaStream_t st) {
    CudaKernelContext ctx;
    ctx.stream = st;
    ctx.rank = opts_.rank;
    ctx.deterministic = opts_.deterministic;
    ctx.tf32 = opts_.tf32;
    ctx.gemm = gemm_.get();
    ctx.cudnn = cudnn_.get();
    ctx.workspace = workspace_;
    ctx.workspaceBytes = workspaceBytes_;
    ctx.scratch = scratch_[size_t(s.id)].get();
    ctx.tables = &tables_;
    ctx.deviceError = deviceError_;
    return ctx;
  }
  StatusOr<const CudaKernelVariant*> variantOf(const KernelCall& call) const {
    const std::vector<CudaKernelVariant>* vs = cudaKernelTable().find(call.kind);
    if (!vs || vs->empty())
      return Status::internal("the CUDA backend has no kernel for op " + std::string(schema::opName(call.kind)));
    if (call.variant < 0 || size_t(call.variant) >= vs->size())
      return Status::internal(std::string(schema::opName(call.kind)) + ": no kernel variant " +
                              std::to_string(call.variant));
    return &(*vs)[size_t(call.variant)];
  }
  // What the kernel variants take (host/KernelVariants.h), each variant with a bind-time preparation
  // (cuDNN's graph build) made part of its predicate: a variant whose preparation fails for a call does
  // not fit it, and the choice falls back to the next (the own kernel), with the reason in the log.
  void buildVariants() {
    const CudaKernelTable& table = cudaKernelTable();
    for (size_t k = 0; k < schema::kNumOpKinds; ++k) {
      variants_[k] = cudaKernelVariants(schema::OpKind(k));
      const std::vector<CudaKernelVariant>* registered = table.find(schema::OpKind(k));
      for (size_t i = 0; registered && i < variants_[k].size() && i < registered->size(); ++i) {
        CudaKernelPrepare prep = (*registered)[i].prepare;
        if (!prep) continue;
        auto base = variants_[k][i].fits;
        variants_[k][i].fits = [this, base, prep](const KernelCall& c, const KernelSelectOptions& o) -> std::string {
          if (base) {
            std::string why = base(c, o);
            if (!why.empty()) return why;
          }
          if (!device().isOk()) return "the device cannot be selected";
          StatusOr<int64_t> ws = prep(c, context(Stream{0}, streams_[0]));
          return ws.isOk() ? std::string() : ws.status().message();
        };
      }
    }
    // Without cuDNN the log says why (not only "not usable").
    if (select_.cudnn || cudnnWhy_.empty()) return;
    for (schema::OpKind kind : {schema::OpKind::kAttentionFwd, schema::OpKind::kAttentionBwd})
      for (KernelVariantInfo& v : variants_[size_t(kind)])
        if (v.name == kCudnnVariant)
          v.fits = [why = cudnnWhy_](const KernelCall&, const KernelSelectOptions&) { return why; };
  }
  Status growWorkspace(int64_t bytes) {
    if (bytes <= workspaceBytes_) return Status::ok();
    if (workspace_) LLCDIST_CUDA_TRY(cudaFree(workspace_), opts_.rank);
    workspace_ = nullptr;
    workspaceBytes_ = 0;
    const cudaError_t e = cudaMalloc(&workspace_, size_t(bytes));
    if (e != cudaSuccess) {
      cudaGetLastError();
      workspace_ = nullptr;
      return Status::invalidArgument("rank " + std::to_string(opts_.rank) + ": cannot allocate the " +
                                     std::to_string(bytes) + "-byte library workspace (cuDNN attention) on device " +
                                     std::to_string(opts_.device) + ": " + cudaGetErrorString(e));
    }
    workspaceBytes_ = bytes;
    return Status::ok();
  }

  Status device() { LLCDIST_CUDA_TRY(cudaSetDevice(opts_.device), opts_.rank); return Status::ok(); }

  // Every call that enqueues work: the device, the stream, and the grouped point-to-point calls issued
  // before it (so they run before it on their stream, in issue order).
  StatusOr<cudaStream_t> enter(Stream s) {
    LLCDIST_RETURN_IF_ERROR(device());
    if (s.id < 0 || s.id >= int(streams_.size()))
      return Status::invalidArgument("cuda backend: unknown stream " + std::to_string(s.id));
    LLCDIST_RETURN_IF_ERROR(flushP2p());
    return streams_[size_t(s.id)];
  }
  Status checkEvent(Event e) const {
    if (e.id < 0 || e.id >= int(events_.size()))
      return Status::invalidArgument("cuda backend: unknown event " + std::to_string(e.id));
    return Status::ok();
  }
  Status checkRange(int64_t offset, int64_t bytes, const char* what) const {
    if (!arena_ || offset < 0 || bytes < 0 || offset + bytes > bytes_)
      return Status::outOfRange(std::string("cuda backend: ") + what + " of " + std::to_string(bytes) +
                                " bytes at arena offset " + std::to_string(offset) + " outside the arena of " +
                                std::to_string(bytes_) + " bytes");
    return Status::ok();
  }
  StatusOr<Chan*> channel(Channel ch) {
    if (ch.id < 0 || ch.id >= int(channels_.size()))
      return Status::invalidArgument("cuda backend: unknown channel " + std::to_string(ch.id));
    return &channels_[size_t(ch.id)];
  }

  Status addStream() {
    cudaStream_t s = nullptr;
    LLCDIST_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), opts_.rank);
    streams_.push_back(s);
    scratch_.push_back(std::make_unique<StreamScratch>(s, opts_.rank));
    staging_.emplace_back();
    for (StagingSlot& slot : staging_.back().slots)
      LLCDIST_CUDA_TRY(cudaEventCreateWithFlags(&slot.free, cudaEventDisableTiming), opts_.rank);
    return Status::ok();
  }

  // The stream's next pinned staging slot, at least `bytes`, once its previous copy is done; the copy
  // that takes it calls stagingUsed after enqueueing.
  StatusOr<void*> stagingFor(Stream s, int64_t bytes) {
    StagingSlot& st = staging_[size_t(s.id)].slots[staging_[size_t(s.id)].next];
    LLCDIST_CUDA_TRY(cudaEventSynchronize(st.free), opts_.rank);
    if (st.bytes < size_t(bytes)) {
      if (st.host) LLCDIST_CUDA_TRY(cudaFreeHost(st.host), opts_.rank);
      st.host = nullptr;
      st.bytes = 0;
      LLCDIST_CUDA_TRY(cudaHostAlloc(&st.host, size_t(bytes), cudaHostAllocDefault), opts_.rank);
      st.bytes = size_t(bytes);
    }
    return st.host;
  }
  Status stagingUsed(Stream s) {
    Staging& st = staging_[size_t(s.id)];
    LLCDIST_CUDA_TRY(cudaEventRecord(st.slots[st.next].free, streams_[size_t(s.id)]), opts_.rank);
    st.next = (st.next + 1) % kStagingSlots;
    return Status::ok();
  }

  Status hostFunc(cudaStream_t st, std::function<void()> fn) {
    auto* heap = new std::function<void()>(std::move(fn));
    const cudaError_t e = cudaLaunchHostFunc(
        st,
        [](void* p) {
          auto* f = static_cast<std::function<void()>*>(p);
          (*f)();
          delete f;
        },
        heap);
    if (e != cudaSuccess) delete heap;
    LLCDIST_CUDA_TRY(e, opts_.rank);
    return Status::ok();
  }

  // Staged collectives: pinned host buffers (two, for in and out), the copies synchronous.
  StatusOr<void*> hostBuffer(int which, int64_t bytes) {
    HostBuf& b = hostBufs_[which];
    if (b.bytes < size_t(bytes)) {
      if (b.ptr) LLCDIST_CUDA_TRY(cudaFreeHost(b.ptr), opts_.rank);
      b.ptr = nullptr;
      b.bytes = 0;
      LLCDIST_CUDA_TRY(cudaHostAlloc(&b.ptr, size_t(std::max<int64_t>(bytes, 1)), cudaHostAllocDefault), opts_.rank);
      b.bytes = size_t(bytes);
    }
    return b.ptr;
  }
  Status toHost(cudaStream_t st, void* host, const void* dev, int64_t bytes) {
    if (bytes == 0) return Status::ok();
    LLCDIST_CUDA_TRY(cudaMemcpyAsync(host, dev, size_t(bytes), cudaMemcpyDeviceToHost, st), opts_.rank);
    LLCDIST_CUDA_TRY(cudaStreamSynchronize(st), opts_.rank);
    return Status::ok();
  }
  Status toDevice(cudaStream_t st, void* dev, const void* host, int64_t bytes) {
    if (bytes == 0) return Status::ok();
    LLCDIST_CUDA_TRY(cudaMemcpyAsync(dev, host, size_t(bytes), cudaMemcpyHostToDevice, st), opts_.rank);
    // The pinned buffer is reused by the next staged call: wait for the copy.
    LLCDIST_CUDA_TRY(cudaStreamSynchronize(st), opts_.rank);
    return Status::ok();
  }

  CollectiveHandle done(Status st) {
    const int64_t id = nextHandle_++;
    handles_[id] = Handle{nullptr, std::move(st)};
    return CollectiveHandle{id};
  }
  StatusOr<CollectiveHandle> recordHandle(cudaStream_t st) {
    cudaEvent_t e = nullptr;
    if (!freeEvents_.empty()) {
      e = freeEvents_.back();
      freeEvents_.pop_back();
    } else {
      LLCDIST_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), opts_.rank);
    }
    LLCDIST_CUDA_TRY(cudaEventRecord(e, st), opts_.rank);
    const int64_t id = nextHandle_++;
    handles_[id] = Handle{e, Status::ok()};
    return CollectiveHandle{id};
  }

  StatusOr<CollectiveHandle> p2p(bool send, Stream s, float* ptr, int64_t count, int peer, int64_t tag,
                                 int64_t microbatch) {
    LLCDIST_RETURN_IF_ERROR(device());
    if (s.id < 0 || s.id >= int(streams_.size()))
      return Status::invalidArgument("cuda backend: unknown stream " + std::to_string(s.id));
    if (!opts_.communicator)
      return Status::invalidArgument(std::string("cuda backend: ") + (send ? "send" : "recv") + " without a communicator");
    if (nccl()) {
      // Grouped with the point-to-point calls right before and after it on the same stream.
      if (!pending_.empty() && pendingStream_ != s.id) LLCDIST_RETURN_IF_ERROR(flushP2p());
      pendingStream_ = s.id;
      const int64_t id = nextHandle_++;
      handles_[id] = Handle{};  // its event is set when the group is issued
      pending_.push_back(PendingP2p{send, ptr, count, peer, id});
      return CollectiveHandle{id};
    }
    cudaStream_t st = streams_[size_t(s.id)];
    LLCDIST_RETURN_IF_ERROR(flushP2p());
    const int64_t bytes = count * int64_t(sizeof(float));
    LLCDIST_ASSIGN_OR_RETURN(void* host, hostBuffer(0, bytes));
    float* h = static_cast<float*>(host);
    if (send) {
      LLCDIST_RETURN_IF_ERROR(toHost(st, h, ptr, bytes));
      return done(opts_.communicator->send(opts_.rank, peer, h, count, tag, microbatch));
    }
    const Status got = opts_.communicator->recv(opts_.rank, peer, h, count, tag, microbatch);
    if (got.isOk()) LLCDIST_RETURN_IF_ERROR(toDevice(st, ptr, h, bytes));
    return done(got);
  }

  // Issues the pending point-to-point calls as one NCCL group on their stream.
  Status flushP2p() {
    if (pending_.empty()) return Status::ok();
#if LLCDIST_HAVE_NCCL
    std::vector<PendingP2p> calls;
    calls.swap(pending_);
    cudaStream_t st = streams_[size_t(pendingStream_)];
    LLCDIST_NCCL_TRY(ncclGroupStart(), opts_.rank);
    for (const PendingP2p& p : calls) {
      const ncclResult_t r = p.send ? ncclSend(p.ptr, size_t(p.count), ncclFloat32, p.peer, world_, st)
                                    : ncclRecv(p.ptr, size_t(p.count), ncclFloat32, p.peer, world_, st);
      if (r != ncclSuccess) {
        ncclGroupEnd();
        return ncclError(r, p.send ? "ncclSend" : "ncclRecv", __FILE__, __LINE__, opts_.rank);
      }
    }
    LLCDIST_NCCL_TRY(ncclGroupEnd(), opts_.rank);
    cudaEvent_t e = nullptr;
    LLCDIST_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), opts_.rank);
    LLCDIST_CUDA_TRY(cudaEventRecord(e, st), opts_.rank);
    // One event marks the group; every handle of it waits on it (the first wait releases the rest).
    for (size_t i = 0; i < calls.size(); ++i) {
      cudaEvent_t mine = e;
      if (i > 0) {
        LLCDIST_CUDA_TRY(cudaEventCreateWithFlags(&mine, cudaEventDisableTiming), opts_.rank);
        LLCDIST_CUDA_TRY(cudaEventRecord(mine, st), opts_.rank);
      }
      handles_[calls[i].handle].event = mine;
    }
    return Status::ok();
#else
    return Status::internal("grouped point-to-point calls without NCCL");
#endif
  }

  // NCCL: every stream done, or an asynchronous communicator error, or the timeout (then every
  // communicator is aborted, so no rank waits forever).
  Status waitForNccl() {
#if LLCDIST_HAVE_NCCL
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opts_.timeoutSeconds);
    for (;;) {
      bool idle = true;
      for (cudaStream_t s : streams_) {
        const cudaError_t e = cudaStreamQuery(s);
        if (e == cudaErrorNotReady) idle = false;
        else LLCDIST_CUDA_TRY(e, opts_.rank);
      }
      if (idle) return Status::ok();
      for (Chan& c : channels_) LLCDIST_RETURN_IF_ERROR(asyncError(c.comm));
      LLCDIST_RETURN_IF_ERROR(asyncError(world_));
      if (std::chrono::steady_clock::now() > deadline) {
        for (Chan& c : channels_)
          if (c.comm) ncclCommAbort(c.comm), c.comm = nullptr;
        if (world_) ncclCommAbort(world_), world_ = nullptr;
        return Status::deadlineExceeded("rank " + std::to_string(opts_.rank) + ": NCCL work did not finish within " +
                                        std::to_string(opts_.timeoutSeconds) +
                                        " s (a peer is not making the matching call); the communicators were aborted");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
#else
    return Status::ok();
#endif
  }
#if LLCDIST_HAVE_NCCL
  Status asyncError(ncclComm_t comm) {
    if (!comm) return Status::ok();
    ncclResult_t r = ncclSuccess;
    LLCDIST_NCCL_TRY(ncclCommGetAsyncError(comm, &r), opts_.rank);
    if (r != ncclSuccess && r != ncclInProgress) return ncclError(r, "NCCL asynchronous error", __FILE__, __LINE__, opts_.rank);
    return Status::ok();
  }
#endif

  struct HostBuf {
    void* ptr = nullptr;
    size_t bytes = 0;
  };

  CudaBackendOptions opts_;
  void* arena_ = nullptr;
  int64_t bytes_ = 0;
  int* deviceError_ = nullptr;
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
  HostBuf hostBufs_[2];
  std::vector<float*> stagingAreas_;  // allocateStaging
  int64_t stagingBytes_ = 0;
#if LLCDIST_HAVE_NCCL
  ncclComm_t world_ = nullptr;
#endif
};

}  // namespace
}  // namespace cuda

int cudaDevices(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device is visible";
  return n;
}

bool cudaBackendHasNccl() { return LLCDIST_HAVE_NCCL != 0; }

StatusOr<std::unique_ptr<Backend>> makeCudaBackend(const CudaBackendOptions& options) {
  std::string why;
  const int devices = cudaDevices(&why);
  if (devices == 0) return Status::invalidArgument("--backend cuda: " + why);
  if (options.device < 0 || options.device >= devices)
    return Status::invalidArgument("--device-ids: device " + std::to_string(options.device) + " of rank " +
                                   std::to_string(options.rank) + " does not exist (this machine has " +
                                   std::to_string(devices) + ")");
  auto backend = std::make_unique<cuda::CudaBackend>(options);
  LLCDIST_RETURN_IF_ERROR(backend->init().withContext("creating the CUDA backend of rank " + std::to_string(options.rank)));
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace llcdist::rt
