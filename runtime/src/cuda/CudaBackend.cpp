// The CUDA backend (CudaBackend.h): the arena, streams, events, pinned staging and the kernel table's
// launches (the class: CudaBackendImpl.h; its collectives: CudaBackendComm.cpp), and making one.
#include "CudaBackendImpl.h"

#include "llcdist/runtime/KernelChecks.h"

namespace llcdist::rt {
namespace cuda {

std::string describeDeviceError(int code, unsigned long long detail) {
  const int64_t token = int64_t(detail >> 32);
  const int64_t value = int64_t(int32_t(uint32_t(detail & 0xffffffffull)));
  switch (code) {
    case kDeviceIdOutOfRange: return "a token id outside the vocabulary";
    case kDeviceTargetOutOfRange: return "a target outside the vocabulary";
    case kDeviceSplitOutOfRange: return "a moe_chunk_transpose split that is negative or sums past N";
    case kDeviceMoeExpertOutOfRange: return moePermuteExpertError(token, value);
    case kDeviceMoeSlotOutOfRange: return moeSlotError("moe_unpermute", token, value);
    case kDeviceMoeSlotBwdOutOfRange: return moeSlotError("moe_unpermute_bwd", token, value);
    default: return "an invalid value";
  }
}

Status CudaBackend::init() {
  LLCDIST_RETURN_IF_ERROR(checkCudaKernelTable());
  LLCDIST_CUDA_TRY(cudaSetDevice(opts_.device), opts_.rank);
#if !LLCDIST_HAVE_NCCL
  if (opts_.nccl)
    return Status::invalidArgument(
        "the CUDA backend was built without NCCL: collectives are staged through the "
        "host communicator (run with one process per GPU after installing NCCL)");
#endif
  LLCDIST_RETURN_IF_ERROR(addStream());  // the plan's default stream (0)
  // The code (an int) and, 8 bytes on, its detail (CudaKernelContext::deviceErrorDetail).
  LLCDIST_CUDA_TRY(cudaMalloc(&deviceError_, kDeviceErrorBytes), opts_.rank);
  LLCDIST_RETURN_IF_ERROR(resetDeviceError());
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

Status CudaBackend::allocateArena(int64_t bytes) {
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
                                   std::to_string(bytes) + " bytes on device " + std::to_string(opts_.device) + " (" +
                                   cudaGetErrorString(e) + "; " + std::to_string(freeB) + " of " +
                                   std::to_string(totalB) + " bytes free)");
  }
  LLCDIST_CUDA_TRY(cudaMemset(arena_, 0, size_t(rounded)), opts_.rank);
  bytes_ = bytes;
  return Status::ok();
}

StatusOr<float*> CudaBackend::allocateStaging(int64_t elems) {
  LLCDIST_RETURN_IF_ERROR(device());
  if (elems < 0) return Status::invalidArgument("cuda backend: negative staging size " + std::to_string(elems));
  float* p = nullptr;
  LLCDIST_CUDA_TRY(cudaMalloc(&p, size_t(std::max<int64_t>(elems, 1)) * sizeof(float)), opts_.rank);
  stagingAreas_.push_back(p);
  stagingBytes_ += elems * int64_t(sizeof(float));
  LLCDIST_CUDA_TRY(cudaMemset(p, 0, size_t(std::max<int64_t>(elems, 1)) * sizeof(float)), opts_.rank);
  return p;
}

int64_t CudaBackend::peakAllocatedBytes() const {
  int64_t scratch = stagingBytes_;
  for (const auto& s : scratch_) scratch += s->bytes();
  const int64_t arena = arena_ ? std::max<int64_t>(kAlign, (bytes_ + kAlign - 1) / kAlign * kAlign) : 0;
  return arena + scratch + tables_.bytes() + (gemm_ ? gemm_->deviceBytes() : 0) + workspaceBytes_;
}

StatusOr<Event> CudaBackend::createEvent() {
  LLCDIST_RETURN_IF_ERROR(device());
  cudaEvent_t e = nullptr;
  LLCDIST_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), opts_.rank);
  events_.push_back(e);
  return Event{int(events_.size()) - 1};
}

Status CudaBackend::recordEvent(Stream s, Event e) {
  LLCDIST_ASSIGN_OR_RETURN(cudaStream_t st, enter(s));
  LLCDIST_RETURN_IF_ERROR(checkEvent(e));
  LLCDIST_CUDA_TRY(cudaEventRecord(events_[size_t(e.id)], st), opts_.rank);
  return Status::ok();
}

Status CudaBackend::waitEvent(Stream s, Event e) {
  LLCDIST_ASSIGN_OR_RETURN(cudaStream_t st, enter(s));
  LLCDIST_RETURN_IF_ERROR(checkEvent(e));
  LLCDIST_CUDA_TRY(cudaStreamWaitEvent(st, events_[size_t(e.id)], 0), opts_.rank);
  return Status::ok();
}

Status CudaBackend::synchronize() {
  LLCDIST_RETURN_IF_ERROR(device());
  LLCDIST_RETURN_IF_ERROR(flushP2p());
  if (nccl()) LLCDIST_RETURN_IF_ERROR(waitForNccl());
  for (cudaStream_t s : streams_) LLCDIST_CUDA_TRY(cudaStreamSynchronize(s), opts_.rank);
  int code = 0;
  LLCDIST_CUDA_TRY(cudaMemcpy(&code, deviceError_, sizeof(int), cudaMemcpyDeviceToHost), opts_.rank);
  if (code != kDeviceOk) {
    unsigned long long detail = ~0ull;
    LLCDIST_CUDA_TRY(cudaMemcpy(&detail, deviceErrorDetail(), sizeof(detail), cudaMemcpyDeviceToHost), opts_.rank);
    LLCDIST_RETURN_IF_ERROR(resetDeviceError());
    return Status::invalidArgument(describeDeviceError(code, detail) + " met by a kernel on rank " +
                                   std::to_string(opts_.rank) + " (the CUDA kernels report it at the next synchronize)");
  }
  return Status::ok();
}

Status CudaBackend::resetDeviceError() {
  LLCDIST_CUDA_TRY(cudaMemset(deviceError_, 0, sizeof(int)), opts_.rank);
  LLCDIST_CUDA_TRY(cudaMemset(deviceErrorDetail(), 0xff, sizeof(unsigned long long)), opts_.rank);  // ~0: none
  return Status::ok();
}

Status CudaBackend::copyToDevice(Stream s, int64_t offset, const void* src, int64_t bytes) {
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

Status CudaBackend::copyToHost(Stream s, void* dst, int64_t offset, int64_t bytes) {
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

Status CudaBackend::fillZero(Stream s, int64_t offset, int64_t bytes) {
  LLCDIST_ASSIGN_OR_RETURN(cudaStream_t st, enter(s));
  LLCDIST_RETURN_IF_ERROR(checkRange(offset, bytes, "fillZero"));
  if (bytes == 0) return Status::ok();
  LLCDIST_CUDA_TRY(cudaMemsetAsync(arenaAt(offset), 0, size_t(bytes), st), opts_.rank);
  return Status::ok();
}

StatusOr<void*> CudaBackend::allocateHostInput(int64_t bytes) {
  LLCDIST_RETURN_IF_ERROR(device());
  if (bytes < 0) return Status::invalidArgument("cuda backend: negative host input size " + std::to_string(bytes));
  void* p = nullptr;
  LLCDIST_CUDA_TRY(cudaHostAlloc(&p, size_t(std::max<int64_t>(bytes, 1)), cudaHostAllocDefault), opts_.rank);
  hostInputs_.push_back(p);
  std::memset(p, 0, size_t(std::max<int64_t>(bytes, 1)));
  return p;
}

// Pinned source: the copy is asynchronous, and a captured one reads the same address at every launch.
Status CudaBackend::copyHostInput(Stream s, void* dst, const void* src, int64_t bytes) {
  LLCDIST_ASSIGN_OR_RETURN(cudaStream_t st, enter(s));
  if (bytes < 0 || (bytes > 0 && (!dst || !src)))
    return Status::invalidArgument("cuda backend: copyHostInput of " + std::to_string(bytes) + " bytes without memory");
  if (bytes == 0) return Status::ok();
  LLCDIST_CUDA_TRY(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyHostToDevice, st), opts_.rank);
  return Status::ok();
}

bool CudaBackend::canCaptureGraph(std::string* why) const {
  if (opts_.communicator && !nccl()) {
    if (why) *why = "communication is staged through host memory without NCCL (the host waits inside the step)";
    return false;
  }
  return true;
}

Status CudaBackend::beginGraphCapture() {
  LLCDIST_RETURN_IF_ERROR(device());
  LLCDIST_RETURN_IF_ERROR(flushP2p());
  while (joinEvents_.size() < streams_.size()) {  // made now: nothing is created during a capture
    cudaEvent_t e = nullptr;
    LLCDIST_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), opts_.rank);
    joinEvents_.push_back(e);
  }
  LLCDIST_CUDA_TRY(cudaStreamBeginCapture(streams_[0], cudaStreamCaptureModeThreadLocal), opts_.rank);
  return Status::ok();
}

StatusOr<int> CudaBackend::endGraphCapture() {
  LLCDIST_RETURN_IF_ERROR(device());
  Status st = flushP2p();  // point-to-point calls still grouped belong to the step
  // Every stream the capture forked into (through an event wait) joins the default stream again.
  for (size_t i = 1; i < streams_.size() && st.isOk(); ++i) {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(streams_[i], &capturing);
    if (e == cudaSuccess && capturing == cudaStreamCaptureStatusActive) {
      e = cudaEventRecord(joinEvents_[i], streams_[i]);
      if (e == cudaSuccess) e = cudaStreamWaitEvent(streams_[0], joinEvents_[i], 0);
    }
    if (e != cudaSuccess) st = cudaError(e, "joining a stream into the capture", __FILE__, __LINE__, opts_.rank);
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(streams_[0], &graph);  // ended even after an error
  if (st.isOk() && ended != cudaSuccess) st = cudaError(ended, "cudaStreamEndCapture", __FILE__, __LINE__, opts_.rank);
  cudaGraphExec_t exec = nullptr;
  if (st.isOk()) {
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    if (made != cudaSuccess) st = cudaError(made, "cudaGraphInstantiate", __FILE__, __LINE__, opts_.rank);
  }
  if (!st.isOk()) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // a failed capture leaves no sticky error
    return st;
  }
  graphs_.push_back(Graph{graph, exec});
  return int(graphs_.size()) - 1;
}

Status CudaBackend::launchGraph(int graph) {
  if (graph < 0 || graph >= int(graphs_.size()))
    return Status::invalidArgument("cuda backend: unknown graph " + std::to_string(graph));
  LLCDIST_ASSIGN_OR_RETURN(cudaStream_t st, enter(Stream{0}));
  LLCDIST_CUDA_TRY(cudaGraphLaunch(graphs_[size_t(graph)].exec, st), opts_.rank);
  return Status::ok();
}

Status CudaBackend::prepare(const KernelCall& call) {
  LLCDIST_RETURN_IF_ERROR(device());
  LLCDIST_ASSIGN_OR_RETURN(const CudaKernelVariant* v, variantOf(call));
  if (!v->prepare) return Status::ok();
  LLCDIST_ASSIGN_OR_RETURN(const int64_t bytes, v->prepare(call, context(Stream{0}, streams_[0])));
  return growWorkspace(bytes);
}

StatusOr<int64_t> CudaBackend::markTime(Stream s) {
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

StatusOr<int64_t> CudaBackend::markTimeNs(int64_t mark) {
  if (mark < 0 || size_t(mark) >= marksUsed_)
    return Status::outOfRange("time mark " + std::to_string(mark) + " was not made (or was cleared)");
  float ms = 0.0f;
  LLCDIST_CUDA_TRY(cudaEventElapsedTime(&ms, marks_[0], marks_[size_t(mark)]), opts_.rank);
  return anchorNs_ + int64_t(double(ms) * 1e6);
}

CudaKernelContext CudaBackend::context(Stream s, cudaStream_t st) {
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
  ctx.deviceErrorDetail = deviceErrorDetail();
  return ctx;
}

StatusOr<const CudaKernelVariant*> CudaBackend::variantOf(const KernelCall& call) const {
  const std::vector<CudaKernelVariant>* vs = cudaKernelTable().find(call.kind);
  if (!vs || vs->empty())
    return Status::internal("the CUDA backend has no kernel for op " + std::string(schema::opName(call.kind)));
  if (call.variant < 0 || size_t(call.variant) >= vs->size())
    return Status::internal(std::string(schema::opName(call.kind)) + ": no kernel variant " +
                            std::to_string(call.variant));
  return &(*vs)[size_t(call.variant)];
}

void CudaBackend::buildVariants() {
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

Status CudaBackend::growWorkspace(int64_t bytes) {
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

StatusOr<cudaStream_t> CudaBackend::enter(Stream s) {
  LLCDIST_RETURN_IF_ERROR(device());
  if (s.id < 0 || s.id >= int(streams_.size()))
    return Status::invalidArgument("cuda backend: unknown stream " + std::to_string(s.id));
  LLCDIST_RETURN_IF_ERROR(flushP2p());
  return streams_[size_t(s.id)];
}

Status CudaBackend::checkRange(int64_t offset, int64_t bytes, const char* what) const {
  if (!arena_ || offset < 0 || bytes < 0 || offset + bytes > bytes_)
    return Status::outOfRange(std::string("cuda backend: ") + what + " of " + std::to_string(bytes) +
                              " bytes at arena offset " + std::to_string(offset) + " outside the arena of " +
                              std::to_string(bytes_) + " bytes");
  return Status::ok();
}

Status CudaBackend::addStream() {
  cudaStream_t s = nullptr;
  LLCDIST_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), opts_.rank);
  streams_.push_back(s);
  scratch_.push_back(std::make_unique<StreamScratch>(s, opts_.rank));
  staging_.emplace_back();
  for (StagingSlot& slot : staging_.back().slots)
    LLCDIST_CUDA_TRY(cudaEventCreateWithFlags(&slot.free, cudaEventDisableTiming), opts_.rank);
  return Status::ok();
}

StatusOr<void*> CudaBackend::stagingFor(Stream s, int64_t bytes) {
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

Status CudaBackend::stagingUsed(Stream s) {
  Staging& st = staging_[size_t(s.id)];
  LLCDIST_CUDA_TRY(cudaEventRecord(st.slots[st.next].free, streams_[size_t(s.id)]), opts_.rank);
  st.next = (st.next + 1) % kStagingSlots;
  return Status::ok();
}

Status CudaBackend::hostFunc(cudaStream_t st, std::function<void()> fn) {
  // Captured (a recorded step's host function): the graph calls it at every launch, so the backend
  // keeps it; deleting it after the first call would leave the next launch a dangling pointer.
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  LLCDIST_CUDA_TRY(cudaStreamIsCapturing(st, &capturing), opts_.rank);
  if (capturing != cudaStreamCaptureStatusNone) {
    capturedHostFuncs_.push_back(std::make_unique<std::function<void()>>(std::move(fn)));
    LLCDIST_CUDA_TRY(
        cudaLaunchHostFunc(
            st, [](void* p) { (*static_cast<std::function<void()>*>(p))(); }, capturedHostFuncs_.back().get()),
        opts_.rank);
    return Status::ok();
  }
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

StatusOr<void*> CudaBackend::hostBuffer(int which, int64_t bytes) {
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

Status CudaBackend::toHost(cudaStream_t st, void* host, const void* dev, int64_t bytes) {
  if (bytes == 0) return Status::ok();
  LLCDIST_CUDA_TRY(cudaMemcpyAsync(host, dev, size_t(bytes), cudaMemcpyDeviceToHost, st), opts_.rank);
  LLCDIST_CUDA_TRY(cudaStreamSynchronize(st), opts_.rank);
  return Status::ok();
}

Status CudaBackend::toDevice(cudaStream_t st, void* dev, const void* host, int64_t bytes) {
  if (bytes == 0) return Status::ok();
  LLCDIST_CUDA_TRY(cudaMemcpyAsync(dev, host, size_t(bytes), cudaMemcpyHostToDevice, st), opts_.rank);
  // The pinned buffer is reused by the next staged call: wait for the copy.
  LLCDIST_CUDA_TRY(cudaStreamSynchronize(st), opts_.rank);
  return Status::ok();
}

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
  LLCDIST_RETURN_IF_ERROR(
      backend->init().withContext("creating the CUDA backend of rank " + std::to_string(options.rank)));
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace llcdist::rt
