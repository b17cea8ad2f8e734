// The CPU reference backend: one aligned, zero-filled arena; synchronous execution on the calling
// thread; collectives through the run's Communicator (or only over the single-rank group without one).
// See CpuBackend.h.
#include "llcdist/runtime/CpuBackend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

// OpenBLAS's thread control, resolved only when the linked BLAS is OpenBLAS.
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace llcdist::rt {
namespace {

constexpr int64_t kAlign = schema::kArenaAlignment;

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};

class CpuBackend final : public Backend {
public:
  explicit CpuBackend(const CpuBackendOptions& o) : opts_(o), kernelTable_(checkCpuKernelTable()) {
    if (o.blasThreads > 0 && openblas_set_num_threads) openblas_set_num_threads(o.blasThreads);
  }

  std::string name() const override { return "cpu"; }

  Status allocateArena(int64_t bytes) override {
    if (arena_) return Status::invalidArgument("cpu backend: the arena is already allocated");
    if (bytes < 0) return Status::invalidArgument("cpu backend: negative arena size " + std::to_string(bytes));
    const int64_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    const size_t alloc = size_t(rounded > 0 ? rounded : kAlign);  // aligned_alloc(0) may return null
    auto* p = static_cast<std::byte*>(std::aligned_alloc(size_t(kAlign), alloc));
    if (!p) return Status::invalidArgument("cpu backend: cannot allocate an arena of " + std::to_string(bytes) + " bytes");
    std::memset(p, 0, alloc);
    arena_.reset(p);
    bytes_ = bytes;
    peak_ = std::max<int64_t>(peak_, rounded);
    return Status::ok();
  }
  std::byte* arenaAt(int64_t offset) override { return arena_ ? arena_.get() + offset : nullptr; }
  int64_t arenaBytes() const override { return bytes_; }
  int64_t peakAllocatedBytes() const override { return peak_; }

  StatusOr<Stream> createStream() override { return Stream{numStreams_++}; }
  StatusOr<Event> createEvent() override { return Event{numEvents_++}; }
  Status recordEvent(Stream s, Event e) override {
    LLCDIST_RETURN_IF_ERROR(checkStream(s));
    return checkEvent(e);
  }
  Status waitEvent(Stream s, Event e) override { return recordEvent(s, e); }  // recorded events are complete
  Status synchronize() override { return Status::ok(); }

  Status copyToDevice(Stream s, int64_t offset, const void* src, int64_t bytes) override {
    LLCDIST_RETURN_IF_ERROR(checkRange(s, offset, bytes, "copyToDevice"));
    if (bytes > 0) std::memcpy(arena_.get() + offset, src, size_t(bytes));
    return Status::ok();
  }
  Status copyToHost(Stream s, void* dst, int64_t offset, int64_t bytes) override {
    LLCDIST_RETURN_IF_ERROR(checkRange(s, offset, bytes, "copyToHost"));
    if (bytes > 0) std::memcpy(dst, arena_.get() + offset, size_t(bytes));
    return Status::ok();
  }
  Status fillZero(Stream s, int64_t offset, int64_t bytes) override {
    LLCDIST_RETURN_IF_ERROR(checkRange(s, offset, bytes, "fillZero"));
    if (bytes > 0) std::memset(arena_.get() + offset, 0, size_t(bytes));
    return Status::ok();
  }
  bool hasKernel(schema::OpKind kind) const override { return cpuKernelTable().find(kind) != nullptr; }
  Status launch(Stream s, const KernelCall& call) override {
    LLCDIST_RETURN_IF_ERROR(checkStream(s));
    if (!kernelTable_.isOk()) return kernelTable_;  // the start-up check: an op kind without its kernel
    // Collectives inside kernels (grad_norm's sharded list, vocabulary-parallel cross entropy).
    return runCpuKernel(call, [&](const std::vector<int>& group, double* v, int64_t n, ReduceOp op) -> Status {
      if (group.size() <= 1 || !opts_.communicator) {
        const std::string what = std::string(schema::opName(call.kind)) + "'s all-reduce";
        return checkGroup(group.empty() ? std::vector<int>{opts_.rank} : group, what.c_str());
      }
      return opts_.communicator->allReduce(opts_.rank, group, v, n, CommDType::kF64, op);
    });
  }

  // A channel is its group: the communicator keeps its per-group state keyed by it.
  StatusOr<Channel> createChannel(const std::vector<int>& group) override {
    if (std::count(group.begin(), group.end(), opts_.rank) != 1)
      return Status::invalidArgument("cpu backend: a channel's group must hold rank " + std::to_string(opts_.rank) +
                                     " exactly once, got a group of " + std::to_string(group.size()) + " ranks");
    channels_.push_back(group);
    return Channel{int(channels_.size()) - 1};
  }

  using Backend::allReduceAsync;
  StatusOr<CollectiveHandle> allReduceAsync(Stream s, void* buffer, int64_t count, CommDType dtype, ReduceOp op,
                                            Channel channel) override {
    LLCDIST_RETURN_IF_ERROR(checkStream(s));
    LLCDIST_ASSIGN_OR_RETURN(const std::vector<int>* g, groupOf(channel));
    const std::vector<int>& group = *g;
    if (opts_.communicator)
      LLCDIST_RETURN_IF_ERROR(opts_.communicator->allReduce(opts_.rank, group, buffer, count, dtype, op));
    else
      LLCDIST_RETURN_IF_ERROR(checkGroup(group, "all-reduce"));
    return CollectiveHandle{numCollectives_++};
  }
  // Sizes in elements of `dtype`; the padding copies move bytes (el per element).
  StatusOr<CollectiveHandle> allGatherAsync(Stream s, const void* in, void* out, int64_t outer, int64_t inner,
                                            int64_t total, CommDType dtype, Channel channel) override {
    LLCDIST_RETURN_IF_ERROR(checkStream(s));
    LLCDIST_ASSIGN_OR_RETURN(const std::vector<int>* g, groupOf(channel));
    const std::vector<int>& group = *g;
    const int64_t padded = int64_t(group.size()) * inner, el = commDTypeSize(dtype);
    LLCDIST_RETURN_IF_ERROR(checkTotal(total, padded, "all-gather"));
    // Padded blocks: gather the whole padded tensor into host scratch, keep its real elements.
    std::vector<std::byte> scratch(total < padded ? size_t(outer * padded * el) : 0);
    void* whole = total < padded ? scratch.data() : out;
    if (opts_.communicator) {
      LLCDIST_RETURN_IF_ERROR(opts_.communicator->allGather(opts_.rank, group, in, whole, outer, inner, dtype));
    } else {
      LLCDIST_RETURN_IF_ERROR(checkGroup(group, "all-gather"));
      if (in != whole && outer * inner > 0) std::memmove(whole, in, size_t(outer * inner * el));
    }
    if (whole != out)
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(static_cast<std::byte*>(out) + o * total * el, scratch.data() + o * padded * el,
                    size_t(total * el));
    return CollectiveHandle{numCollectives_++};
  }
  StatusOr<CollectiveHandle> reduceScatterAsync(Stream s, const void* in, void* out, int64_t outer, int64_t inner,
                                                int64_t total, CommDType dtype, ReduceOp op,
                                                Channel channel) override {
    LLCDIST_RETURN_IF_ERROR(checkStream(s));
    LLCDIST_ASSIGN_OR_RETURN(const std::vector<int>* g, groupOf(channel));
    const std::vector<int>& group = *g;
    const int64_t padded = int64_t(group.size()) * inner, el = commDTypeSize(dtype);
    LLCDIST_RETURN_IF_ERROR(checkTotal(total, padded, "reduce-scatter"));
    // Padded blocks: reduce a copy of the input whose padding is zero (0x0000 is +0 in every dtype).
    std::vector<std::byte> scratch(total < padded ? size_t(outer * padded * el) : 0, std::byte{0});
    for (int64_t o = 0; total < padded && o < outer; ++o)
      std::memcpy(scratch.data() + o * padded * el, static_cast<const std::byte*>(in) + o * total * el,
                  size_t(total * el));
    const void* whole = total < padded ? scratch.data() : in;
    if (opts_.communicator) {
      LLCDIST_RETURN_IF_ERROR(
          opts_.communicator->reduceScatter(opts_.rank, group, whole, out, outer, inner, dtype, op));
    } else {
      LLCDIST_RETURN_IF_ERROR(checkGroup(group, "reduce-scatter"));
      if (whole != out && outer * inner > 0) std::memmove(out, whole, size_t(outer * inner * el));
    }
    return CollectiveHandle{numCollectives_++};
  }
  StatusOr<CollectiveHandle> sendAsync(Stream s, const float* x, int64_t count, int peer, int64_t tag,
                                       int64_t microbatch) override {
    LLCDIST_RETURN_IF_ERROR(checkStream(s));
    if (!opts_.communicator) return noPeer("send to", peer);
    LLCDIST_RETURN_IF_ERROR(opts_.communicator->send(opts_.rank, peer, x, count, tag, microbatch));
    return CollectiveHandle{numCollectives_++};
  }
  StatusOr<CollectiveHandle> recvAsync(Stream s, float* y, int64_t count, int peer, int64_t tag,
                                       int64_t microbatch) override {
    LLCDIST_RETURN_IF_ERROR(checkStream(s));
    if (!opts_.communicator) return noPeer("receive from", peer);
    LLCDIST_RETURN_IF_ERROR(opts_.communicator->recv(opts_.rank, peer, y, count, tag, microbatch));
    return CollectiveHandle{numCollectives_++};
  }
  Status waitCollective(Stream s, CollectiveHandle h) override {
    LLCDIST_RETURN_IF_ERROR(checkStream(s));
    if (h.id < 0 || h.id >= numCollectives_) return Status::invalidArgument("cpu backend: unknown collective handle");
    return Status::ok();
  }

private:
  Status checkStream(Stream s) const {
    if (s.id < 0 || s.id >= numStreams_) return Status::invalidArgument("cpu backend: unknown stream " + std::to_string(s.id));
    return Status::ok();
  }
  Status checkEvent(Event e) const {
    if (e.id < 0 || e.id >= numEvents_) return Status::invalidArgument("cpu backend: unknown event " + std::to_string(e.id));
    return Status::ok();
  }
  Status checkRange(Stream s, int64_t offset, int64_t bytes, const char* what) const {
    LLCDIST_RETURN_IF_ERROR(checkStream(s));
    if (!arena_) return Status::invalidArgument(std::string("cpu backend: ") + what + " before allocateArena");
    if (offset < 0 || bytes < 0 || offset > bytes_ || bytes > bytes_ - offset)
      return Status::outOfRange(std::string("cpu backend: ") + what + " range [" + std::to_string(offset) + ", " +
                                std::to_string(offset + bytes) + ") is outside the arena of " + std::to_string(bytes_) +
                                " bytes");
    return Status::ok();
  }
  // The whole side of a padded all-gather / reduce-scatter holds 0 < total <= n·inner elements a row.
  static Status checkTotal(int64_t total, int64_t padded, const char* what) {
    if (total > 0 && total <= padded) return Status::ok();
    return Status::invalidArgument(std::string("cpu backend: ") + what + " with total " + std::to_string(total) +
                                   " elements outside (0, n·inner = " + std::to_string(padded) + "]");
  }

  StatusOr<const std::vector<int>*> groupOf(Channel c) const {
    if (c.id < 0 || size_t(c.id) >= channels_.size())
      return Status::invalidArgument("cpu backend: unknown channel " + std::to_string(c.id) +
                                     " (createChannel makes them)");
    return &channels_[size_t(c.id)];
  }

  Status checkGroup(const std::vector<int>& group, const char* what) const {
    if (group.size() == 1 && group[0] == opts_.rank) return Status::ok();
    return Status::invalidArgument(std::string("cpu backend: ") + what + " over a group of " +
                                   std::to_string(group.size()) + " ranks; the CPU backend has no communicator and "
                                   "runs only single-rank groups containing its own rank " + std::to_string(opts_.rank));
  }

  Status noPeer(const char* what, int peer) const {
    return Status::invalidArgument(std::string("cpu backend: cannot ") + what + " rank " + std::to_string(peer) +
                                   ": the backend of rank " + std::to_string(opts_.rank) +
                                   " has no communicator (point-to-point needs a multi-rank run)");
  }

  CpuBackendOptions opts_;
  Status kernelTable_;  // checkCpuKernelTable() when the backend was made
  std::unique_ptr<std::byte, FreeDeleter> arena_;
  int64_t bytes_ = 0, peak_ = 0;
  std::vector<std::vector<int>> channels_;  // by Channel::id
  int numStreams_ = 1, numEvents_ = 0;
  int64_t numCollectives_ = 0;
};

}  // namespace

std::unique_ptr<Backend> makeCpuBackend(const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace llcdist::rt
