// The CPU reference backend: one aligned, zero-filled arena; the default stream executes synchronously
// on the calling thread, every other stream on its own worker thread (a FIFO of work items);
// collectives through the run's Communicator (or only over the single-rank group without one).
// See CpuBackend.h.
#include "llcdist/runtime/CpuBackend.h"

#include "llcdist/runtime/FlightRecorder.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

// OpenBLAS's thread control, resolved only when the linked BLAS is OpenBLAS.
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace llcdist::rt {
namespace {

constexpr int64_t kAlign = schema::kArenaAlignment;

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};

// Completion of one asynchronous item (a collective's handle, a recorded event): set once by the worker
// that ran it, waited for by anyone under the mutex (no spinning).
struct Completion {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
  void complete(Status st) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      status = std::move(st);
    }
    cv.notify_all();
  }
  Status wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    return status;
  }
  bool isDone() {
    std::lock_guard<std::mutex> lock(mu);
    return done;
  }
};

// A non-default stream: one thread running its items in FIFO order. An item's error is kept and
// reported by the next synchronize() (and by the handle of a collective); items after a failed one
// still run (each reports its own failure), so no waiter is left behind.
class WorkerStream {
 public:
  WorkerStream() : thread_([this] { run(); }) {}
  ~WorkerStream() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();  // the remaining items run first: they may hold a peer waiting for them
  }
  void enqueue(std::function<Status()> item) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      items_.push_back(std::move(item));
      ++pending_;
    }
    cv_.notify_all();
  }
  // Blocks until every item enqueued so far has run; returns the first error since the last call.
  Status drain() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [&] { return pending_ == 0; });
    Status st = firstError_;
    firstError_ = Status::ok();
    return st;
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !items_.empty(); });
      if (items_.empty()) return;  // stop_ and nothing left
      std::function<Status()> item = std::move(items_.front());
      items_.pop_front();
      lock.unlock();
      Status st = item();
      lock.lock();
      if (!st.isOk() && firstError_.isOk()) firstError_ = st;
      if (--pending_ == 0) idle_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_, idle_;
  std::deque<std::function<Status()>> items_;
  int64_t pending_ = 0;  // enqueued and not yet finished
  bool stop_ = false;
  Status firstError_;
  std::thread thread_;  // last: started once the state above exists
};

// Communicator calls on one group (or to / from one peer) in this rank's issue order. The communicator
// matches the members' calls on a group by their order, so calls issued on different streams (the
// rank's thread and a worker) must enter it in the order the program issued them, as on every other
// member: each call takes a ticket when it is issued and runs once every earlier ticket of its key has
// finished. (An earlier call always finishes: it completes, fails, times out or is aborted.)
class IssueOrder {
 public:
  struct Ticket {
    IssueOrder* order;
    int64_t n;
  };
  Ticket take() {
    std::lock_guard<std::mutex> lock(mu_);
    return {this, issued_++};
  }
  static Status run(Ticket t, const std::function<Status()>& call) {
    IssueOrder& o = *t.order;
    {
      std::unique_lock<std::mutex> lock(o.mu_);
      o.cv_.wait(lock, [&] { return o.finished_ == t.n; });
    }
    Status st = call();
    {
      std::lock_guard<std::mutex> lock(o.mu_);
      ++o.finished_;
    }
    o.cv_.notify_all();
    return st;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t issued_ = 0, finished_ = 0;
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
    if (!p)
      return Status::invalidArgument("cpu backend: cannot allocate an arena of " + std::to_string(bytes) + " bytes");
    std::memset(p, 0, alloc);
    arena_.reset(p);
    bytes_ = bytes;
    peak_ = std::max<int64_t>(peak_, rounded);
    return Status::ok();
  }
  std::byte* arenaAt(int64_t offset) override { return arena_ ? arena_.get() + offset : nullptr; }
  int64_t arenaBytes() const override { return bytes_; }
  int64_t peakAllocatedBytes() const override { return peak_; }
  StatusOr<float*> allocateStaging(int64_t elems) override {
    if (elems < 0) return Status::invalidArgument("cpu backend: negative staging size " + std::to_string(elems));
    staging_.push_back(std::make_unique<float[]>(size_t(elems)));  // value-initialized: zeros
    return staging_.back().get();
  }

  StatusOr<void*> allocateHostInput(int64_t bytes) override {
    if (bytes < 0) return Status::invalidArgument("cpu backend: negative host input size " + std::to_string(bytes));
    hostInputs_.push_back(std::make_unique<std::byte[]>(size_t(std::max<int64_t>(bytes, 1))));  // zeros
    return static_cast<void*>(hostInputs_.back().get());
  }

  // Stream 0 runs on the calling thread; every created stream gets its worker thread.
  StatusOr<Stream> createStream() override {
    workers_.push_back(std::make_unique<WorkerStream>());
    return Stream{int(workers_.size())};
  }
  StatusOr<Event> createEvent() override {
    events_.push_back(nullptr);  // never recorded: complete
    return Event{int(events_.size()) - 1};
  }
  Status recordEvent(Stream s, Event e) override {
    LLCDIST_RETURN_IF_ERROR(checkStream(s));
    LLCDIST_RETURN_IF_ERROR(checkEvent(e));
    if (s.id == 0) {  // everything launched on the default stream is done already
      events_[size_t(e.id)] = nullptr;
      return Status::ok();
    }
    auto c = std::make_shared<Completion>();
    events_[size_t(e.id)] = c;
    worker(s).enqueue([c] {
      c->complete(Status::ok());
      return Status::ok();
    });
    return Status::ok();
  }
  Status waitEvent(Stream s, Event e) override {
    LLCDIST_RETURN_IF_ERROR(checkStream(s));
    LLCDIST_RETURN_IF_ERROR(checkEvent(e));
    std::shared_ptr<Completion> c = events_[size_t(e.id)];  // the latest record, as CUDA's
    if (!c) return Status::ok();
    if (s.id == 0) return c->wait();
    worker(s).enqueue([c] { return c->wait(); });
    return Status::ok();
  }
  // Waits for every worker's items; the first error any of them had since the last synchronize.
  Status synchronize() override {
    Status first;
    for (auto& w : workers_) {
      Status st = w->drain();
      if (first.isOk() && !st.isOk()) first = st;
    }
    return first;
  }

  Status copyToDevice(Stream s, int64_t offset, const void* src, int64_t bytes) override {
    LLCDIST_RETURN_IF_ERROR(checkRange(s, offset, bytes, "copyToDevice"));
    std::byte* dst = arena_.get() + offset;
    return submit(s, [=] {
      if (bytes > 0) std::memcpy(dst, src, size_t(bytes));
      return Status::ok();
    });
  }
  Status copyToHost(Stream s, void* dst, int64_t offset, int64_t bytes) override {
    LLCDIST_RETURN_IF_ERROR(checkRange(s, offset, bytes, "copyToHost"));
    const std::byte* src = arena_.get() + offset;
    return submit(s, [=] {
      if (bytes > 0) std::memcpy(dst, src, size_t(bytes));
      return Status::ok();
    });
  }
  Status fillZero(Stream s, int64_t offset, int64_t bytes) override {
    LLCDIST_RETURN_IF_ERROR(checkRange(s, offset, bytes, "fillZero"));
    std::byte* dst = arena_.get() + offset;
    return submit(s, [=] {
      if (bytes > 0) std::memset(dst, 0, size_t(bytes));
      return Status::ok();
    });
  }
  Status copyHostInput(Stream s, void* dst, const void* src, int64_t bytes) override {
    LLCDIST_RETURN_IF_ERROR(checkStream(s));
    if (bytes < 0 || (bytes > 0 && (!dst || !src)))
      return Status::invalidArgument("cpu backend: copyHostInput of " + std::to_string(bytes) +
                                     " bytes without memory");
    return submit(s, [=] {
      if (bytes > 0) std::memcpy(dst, src, size_t(bytes));
      return Status::ok();
    });
  }
  Status launchHostFunc(Stream s, std::function<void()> fn) override {
    LLCDIST_RETURN_IF_ERROR(checkStream(s));
    return submit(s, [fn = std::move(fn)] {
      fn();
      return Status::ok();
    });
  }
  bool hasKernel(schema::OpKind kind) const override { return cpuKernelTable().find(kind) != nullptr; }
  Status launch(Stream s, const KernelCall& call) override {
    LLCDIST_RETURN_IF_ERROR(checkStream(s));
    if (!kernelTable_.isOk()) return kernelTable_;  // the start-up check: an op kind without its kernel
    return submit(s, [call] { return runCpuKernel(call); });
  }

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
    const std::vector<int> group = *g;
    return collective(s, group, [=, this] {
      if (opts_.communicator) return opts_.communicator->allReduce(opts_.rank, group, buffer, count, dtype, op);
      return checkGroup(group, "all-reduce");
    });
  }
  // Sizes in elements of `dtype`; the padding copies move bytes (el per element).
  StatusOr<CollectiveHandle> allGatherAsync(Stream s, const void* in, void* out, int64_t outer, int64_t inner,
                                            int64_t total, CommDType dtype, Channel channel) override {
    LLCDIST_RETURN_IF_ERROR(checkStream(s));
    LLCDIST_ASSIGN_OR_RETURN(const std::vector<int>* g, groupOf(channel));
    const std::vector<int> group = *g;
    const int64_t padded = int64_t(group.size()) * inner, el = commDTypeSize(dtype);
    LLCDIST_RETURN_IF_ERROR(checkTotal(total, padded, "all-gather"));
    return collective(s, group, [=, this]() -> Status {
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
      return Status::ok();
    });
  }
  // Packs x's blocks on the host, the communicator's all-to-all, unpacks into y (Backend.h); a side that
  // already is the contiguous blocks is used as it is.
  StatusOr<CollectiveHandle> allToAllAsync(Stream s, const void* x, void* y, int64_t outer, int64_t mid, int64_t inner,
                                           int xRankDim, CommDType dtype, Channel channel) override {
    LLCDIST_RETURN_IF_ERROR(checkStream(s));
    LLCDIST_ASSIGN_OR_RETURN(const std::vector<int>* g, groupOf(channel));
    const std::vector<int> group = *g;
    if (xRankDim != 1 && xRankDim != 2)
      return Status::invalidArgument("cpu backend: all-to-all x_rank_dim " + std::to_string(xRankDim) +
                                     " (expected 1 or 2)");
    return collective(s, group, [=, this]() -> Status {
      const int64_t n = int64_t(group.size()), el = commDTypeSize(dtype), block = outer * mid * inner;
      const bool xBlocks = allToAllIsBlocks(outer, mid, xRankDim), yBlocks = allToAllIsBlocks(outer, mid, 3 - xRankDim);
      std::vector<std::byte> sendScratch(xBlocks ? 0 : size_t(n * block * el));
      std::vector<std::byte> recvScratch(yBlocks ? 0 : size_t(n * block * el));
      const void* send = x;
      if (!xBlocks) {
        runStridedCopies(allToAllCopies(n, outer, mid, inner, xRankDim, el, true), x, sendScratch.data());
        send = sendScratch.data();
      }
      void* recv = yBlocks ? y : recvScratch.data();
      if (opts_.communicator) {
        LLCDIST_RETURN_IF_ERROR(opts_.communicator->allToAll(opts_.rank, group, send, recv, block, dtype));
      } else {
        LLCDIST_RETURN_IF_ERROR(checkGroup(group, "all-to-all"));
        if (block > 0) std::memmove(recv, send, size_t(block * el));
      }
      if (!yBlocks) runStridedCopies(allToAllCopies(n, outer, mid, inner, 3 - xRankDim, el, false), recv, y);
      return Status::ok();
    });
  }
  // all_to_all_v: the communicator's, on the buffers as they are (host memory); a group of one copies.
  StatusOr<CollectiveHandle> allToAllVAsync(Stream s, const void* x, int64_t xRows, const int32_t* sendSplits, void* y,
                                            int64_t yRows, int32_t* recvSplits, int64_t chunks, int64_t rowElems,
                                            CommDType dtype, Channel channel) override {
    LLCDIST_RETURN_IF_ERROR(checkStream(s));
    LLCDIST_ASSIGN_OR_RETURN(const std::vector<int>* g, groupOf(channel));
    const std::vector<int> group = *g;
    return collective(s, group, [=, this]() -> Status {
      if (group.size() == 1)
        return allToAllVSelf(opts_.rank, x, xRows, sendSplits, y, yRows, recvSplits, chunks, rowElems, dtype);
      if (!opts_.communicator) return checkGroup(group, "all-to-all-v");
      return opts_.communicator->allToAllV(opts_.rank, group, x, xRows, sendSplits, y, yRows, recvSplits, chunks,
                                           rowElems, dtype);
    });
  }
  StatusOr<CollectiveHandle> reduceScatterAsync(Stream s, const void* in, void* out, int64_t outer, int64_t inner,
                                                int64_t total, CommDType dtype, ReduceOp op, Channel channel) override {
    LLCDIST_RETURN_IF_ERROR(checkStream(s));
    LLCDIST_ASSIGN_OR_RETURN(const std::vector<int>* g, groupOf(channel));
    const std::vector<int> group = *g;
    const int64_t padded = int64_t(group.size()) * inner, el = commDTypeSize(dtype);
    LLCDIST_RETURN_IF_ERROR(checkTotal(total, padded, "reduce-scatter"));
    return collective(s, group, [=, this]() -> Status {
      // Padded blocks: reduce a copy of the input whose padding is zero (0x0000 is +0 in every dtype).
      std::vector<std::byte> scratch(total < padded ? size_t(outer * padded * el) : 0, std::byte{0});
      for (int64_t o = 0; total < padded && o < outer; ++o)
        std::memcpy(scratch.data() + o * padded * el, static_cast<const std::byte*>(in) + o * total * el,
                    size_t(total * el));
      const void* whole = total < padded ? scratch.data() : in;
      if (opts_.communicator)
        return opts_.communicator->reduceScatter(opts_.rank, group, whole, out, outer, inner, dtype, op);
      LLCDIST_RETURN_IF_ERROR(checkGroup(group, "reduce-scatter"));
      if (whole != out && outer * inner > 0) std::memmove(out, whole, size_t(outer * inner * el));
      return Status::ok();
    });
  }
  StatusOr<CollectiveHandle> sendAsync(Stream s, const void* x, int64_t count, CommDType dtype, int peer, int64_t tag,
                                       int64_t microbatch) override {
    LLCDIST_RETURN_IF_ERROR(checkStream(s));
    if (!opts_.communicator) return noPeer("send to", peer);
    return collective(s, {-1, peer}, [=, this] {
      return opts_.communicator->send(opts_.rank, peer, x, count, dtype, tag, microbatch);
    });
  }
  StatusOr<CollectiveHandle> recvAsync(Stream s, void* y, int64_t count, CommDType dtype, int peer, int64_t tag,
                                       int64_t microbatch) override {
    LLCDIST_RETURN_IF_ERROR(checkStream(s));
    if (!opts_.communicator) return noPeer("receive from", peer);
    return collective(s, {-2, peer}, [=, this] {
      return opts_.communicator->recv(opts_.rank, peer, y, count, dtype, tag, microbatch);
    });
  }
  // A handle of the default stream completed when it was issued; one of a worker stream is waited
  // for here (the host blocks for the default stream; a worker stream gets an item that blocks) and
  // released: a handle is waited for once.
  Status waitCollective(Stream s, CollectiveHandle h) override {
    LLCDIST_RETURN_IF_ERROR(checkStream(s));
    if (h.id < 0 || h.id >= numCollectives_) return Status::invalidArgument("cpu backend: unknown collective handle");
    auto it = pending_.find(h.id);
    if (it == pending_.end()) return Status::ok();
    std::shared_ptr<Completion> c = std::move(it->second);
    pending_.erase(it);
    if (s.id == 0) return c->wait();
    worker(s).enqueue([c] { return c->wait(); });
    return Status::ok();
  }
  bool collectiveDone(CollectiveHandle h) override {
    auto it = pending_.find(h.id);
    return it == pending_.end() || it->second->isDone();
  }

 private:
  WorkerStream& worker(Stream s) { return *workers_[size_t(s.id) - 1]; }
  // Runs `fn` now on the default stream (its error is the call's), or enqueues it on the worker.
  Status submit(Stream s, std::function<Status()> fn) {
    if (s.id == 0) return fn();
    worker(s).enqueue(std::move(fn));
    return Status::ok();
  }
  // A communication call: on the default stream it runs now (an error is the call's and the handle
  // is complete); on a worker stream its completion is the handle's, reported at its wait.
  // `key` orders it with the other calls of its group or peer (IssueOrder).
  StatusOr<CollectiveHandle> collective(Stream s, const std::vector<int>& key, std::function<Status()> fn) {
    const CollectiveHandle h{numCollectives_++};
    const IssueOrder::Ticket ticket = order(key).take();
    if (s.id == 0) {
      LLCDIST_RETURN_IF_ERROR(IssueOrder::run(ticket, fn));
      return h;
    }
    auto c = std::make_shared<Completion>();
    pending_[h.id] = c;
    // The issuing thread's call site (FlightRecorder.h) goes with the call to the worker; its strings
    // are the plan's, which outlive the backend's work.
    CommCallSite site;
    if (const CommCallSite* now = currentCallSite()) site = *now;
    site.enqueuedUs = flightNowUs();
    worker(s).enqueue([c, ticket, site, fn = std::move(fn)] {
      const ScopedCallSite scopedSite(site);
      Status st = IssueOrder::run(ticket, fn);
      c->complete(st);
      return st;
    });
    return h;
  }
  // A group's key is its member list; a send's {-1, peer}, a receive's {-2, peer}.
  static std::vector<int> groupKey(const std::vector<int>& group) { return group; }
  IssueOrder& order(const std::vector<int>& key) {
    std::lock_guard<std::mutex> lock(ordersMu_);
    std::unique_ptr<IssueOrder>& o = orders_[key];
    if (!o) o = std::make_unique<IssueOrder>();
    return *o;
  }
  Status checkStream(Stream s) const {
    if (s.id < 0 || s.id > int(workers_.size()))
      return Status::invalidArgument("cpu backend: unknown stream " + std::to_string(s.id));
    return Status::ok();
  }
  Status checkEvent(Event e) const {
    if (e.id < 0 || e.id >= int(events_.size()))
      return Status::invalidArgument("cpu backend: unknown event " + std::to_string(e.id));
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
                                   std::to_string(group.size()) +
                                   " ranks; the CPU backend has no communicator and "
                                   "runs only single-rank groups containing its own rank " +
                                   std::to_string(opts_.rank));
  }

  Status noPeer(const char* what, int peer) const {
    return Status::invalidArgument(std::string("cpu backend: cannot ") + what + " rank " + std::to_string(peer) +
                                   ": the backend of rank " + std::to_string(opts_.rank) +
                                   " has no communicator (point-to-point needs a multi-rank run)");
  }

  CpuBackendOptions opts_;
  Status kernelTable_;  // checkCpuKernelTable() when the backend was made
  std::unique_ptr<std::byte, FreeDeleter> arena_;
  std::vector<std::unique_ptr<float[]>> staging_;         // allocateStaging: host heap
  std::vector<std::unique_ptr<std::byte[]>> hostInputs_;  // allocateHostInput: host heap
  int64_t bytes_ = 0, peak_ = 0;
  std::vector<std::vector<int>> channels_;                  // by Channel::id
  std::vector<std::shared_ptr<Completion>> events_;         // the latest record of each event; null: complete
  std::map<int64_t, std::shared_ptr<Completion>> pending_;  // worker-stream handles not yet waited for
  int64_t numCollectives_ = 0;
  std::mutex ordersMu_;
  std::map<std::vector<int>, std::unique_ptr<IssueOrder>> orders_;
  // Last: destroyed first, so the workers are joined before the arena they write goes.
  std::vector<std::unique_ptr<WorkerStream>> workers_;
};

}  // namespace

std::unique_ptr<Backend> makeCpuBackend(const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace llcdist::rt
