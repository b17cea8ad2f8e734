// The in-process communicator: ranks are threads sharing one object. See Communicator.h.
//
// Each group (its member list) has a per-member call counter; the k-th call of every member on a
// group meets in instance k of that group. Arriving members register their buffers; the last one
// checks that all calls match, computes the collective for every member outside the lock, marks the
// instance done and wakes the others. An instance is erased when its last member leaves.
//
// Point-to-point: one FIFO queue of messages per ordered pair (sender, receiver); send copies its data
// into a message and appends it, recv waits for the queue's head and checks it (Communicator.h).
#include "llcdist/runtime/Communicator.h"

#include "Reduce.h"

#include "llcdist/runtime/Bf16.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <utility>

namespace llcdist::rt {
namespace {
using namespace comm;

struct Instance {
  std::vector<int> group;
  std::vector<Request> requests;  // by member
  std::vector<const void*> in;
  std::vector<void*> out;
  std::vector<bool> arrived;
  int numArrived = 0, numLeft = 0;
  bool executing = false, done = false;
  Status result;
};

struct GroupState {
  std::vector<int64_t> calls;  // calls made so far, by member
  std::map<int64_t, Instance> instances;
};

// One buffered send: its data and what the receiver must match.
struct Message {
  int64_t count = 0, tag = 0, microbatch = -1;
  CommDType dtype = CommDType::kF32;
  std::vector<std::byte> data;
};

// The queue of one ordered pair (sender, receiver), with counters for diagnostics.
struct Channel {
  std::deque<Message> queue;
  int64_t sent = 0, received = 0;
};

template <typename T>
void runAllReduce(Instance& inst, const Request& r) {
  const size_t n = inst.in.size();
  std::vector<const T*> src(n);
  for (size_t m = 0; m < n; ++m) src[m] = static_cast<const T*>(inst.in[m]);
  std::vector<T> acc(size_t(r.count));
  if (r.count > 0) reduceInto(acc.data(), src, r.count, 0, r.op);
  for (size_t m = 0; m < n; ++m)
    if (r.count > 0) std::memcpy(inst.out[m], acc.data(), size_t(r.count) * sizeof(T));
}

// Byte copies of elements of the request's dtype.
void runAllGather(Instance& inst, const Request& r) {
  const size_t n = inst.in.size();
  const int64_t el = commDTypeSize(r.dtype);
  const int64_t row = int64_t(n) * r.inner * el, part = r.inner * el;
  for (size_t c = 0; c < n; ++c) {
    auto* y = static_cast<std::byte*>(inst.out[c]);
    for (size_t m = 0; m < n; ++m) {
      const auto* x = static_cast<const std::byte*>(inst.in[m]);
      for (int64_t o = 0; o < r.outer; ++o) std::memmove(y + o * row + int64_t(m) * part, x + o * part, size_t(part));
    }
  }
}

// Block c of member m's input into block m of member c's output (byte copies), through temporaries as
// an output may alias some member's input.
void runAllToAll(Instance& inst, const Request& r) {
  const size_t n = inst.in.size();
  const size_t block = size_t(r.count * commDTypeSize(r.dtype));
  if (block == 0) return;
  std::vector<std::vector<std::byte>> results(n, std::vector<std::byte>(n * block));
  for (size_t c = 0; c < n; ++c)
    for (size_t m = 0; m < n; ++m)
      std::memcpy(results[c].data() + m * block, static_cast<const std::byte*>(inst.in[m]) + c * block, block);
  for (size_t c = 0; c < n; ++c) std::memcpy(inst.out[c], results[c].data(), n * block);
}

// all_to_all_v: every member's send splits checked (the first error is every member's), the received
// splits computed and checked against each member's y, then the rows copied chunk by chunk and each
// y's tail zeroed. Outputs never alias inputs of this member (the loader's rule) but the received
// splits are all computed before any is written.
Status runAllToAllV(Instance& inst, const Request& r) {
  const int64_t n = int64_t(inst.in.size()), c = r.count, rowBytes = r.inner * commDTypeSize(r.dtype);
  std::vector<int64_t> sent(static_cast<size_t>(n)), received(static_cast<size_t>(n));
  for (int64_t m = 0; m < n; ++m)
    LLCDIST_RETURN_IF_ERROR(checkSendSplits(inst.group[size_t(m)], inst.requests[size_t(m)].sendSplits, n, c,
                                            inst.requests[size_t(m)].xRows, &sent[size_t(m)]));
  std::vector<std::vector<int32_t>> recv(size_t(n), std::vector<int32_t>(size_t(n * c)));
  for (int64_t me = 0; me < n; ++me)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < c; ++j)
        recv[size_t(me)][size_t(i * c + j)] = inst.requests[size_t(i)].sendSplits[me * c + j];
  for (int64_t me = 0; me < n; ++me)
    LLCDIST_RETURN_IF_ERROR(checkRecvSplits(inst.group[size_t(me)], recv[size_t(me)].data(), n, c,
                                            inst.requests[size_t(me)].yRows, &received[size_t(me)]));
  // Row offsets of chunk (dest, j) in each sender's x: prefix sums in (dest, j) order.
  std::vector<std::vector<int64_t>> from(size_t(n), std::vector<int64_t>(size_t(n * c) + 1, 0));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < n * c; ++k)
      from[size_t(i)][size_t(k) + 1] = from[size_t(i)][size_t(k)] + inst.requests[size_t(i)].sendSplits[k];
  for (int64_t me = 0; me < n; ++me) {
    auto* y = static_cast<std::byte*>(inst.out[size_t(me)]);
    int64_t at = 0;
    for (int64_t i = 0; i < n; ++i) {
      const auto* x = static_cast<const std::byte*>(inst.in[size_t(i)]);
      for (int64_t j = 0; j < c; ++j) {
        const int64_t rows = recv[size_t(me)][size_t(i * c + j)];
        if (rows > 0)
          std::memcpy(y + at * rowBytes, x + from[size_t(i)][size_t(me * c + j)] * rowBytes, size_t(rows * rowBytes));
        at += rows;
      }
    }
    const int64_t yRows = inst.requests[size_t(me)].yRows;
    if (yRows > at) std::memset(y + at * rowBytes, 0, size_t((yRows - at) * rowBytes));
  }
  for (int64_t me = 0; me < n; ++me)
    std::memcpy(inst.requests[size_t(me)].recvSplits, recv[size_t(me)].data(), size_t(n * c) * sizeof(int32_t));
  return Status::ok();
}

template <typename T>
void runReduceScatter(Instance& inst, const Request& r) {
  const size_t n = inst.in.size();
  const int64_t row = int64_t(n) * r.inner;
  std::vector<const T*> src(n);
  for (size_t m = 0; m < n; ++m) src[m] = static_cast<const T*>(inst.in[m]);
  // Every output first into a temporary: an output may alias some member's input.
  std::vector<std::vector<T>> results(n, std::vector<T>(size_t(r.outer * r.inner)));
  for (size_t c = 0; c < n; ++c)
    for (int64_t o = 0; o < r.outer; ++o)
      reduceInto(results[c].data() + o * r.inner, src, r.inner, o * row + int64_t(c) * r.inner, r.op);
  for (size_t c = 0; c < n; ++c)
    if (!results[c].empty()) std::memcpy(inst.out[c], results[c].data(), results[c].size() * sizeof(T));
}

class InProcessCommunicator final : public Communicator {
 public:
  explicit InProcessCommunicator(const InProcessCommunicatorOptions& o) : opts_(o) {}

  int worldSize() const override { return opts_.worldSize; }

  Status allReduce(int rank, const std::vector<int>& group, void* buf, int64_t count, CommDType dtype,
                   ReduceOp op) override {
    Request r;
    r.kind = Kind::kAllReduce;
    r.dtype = dtype;
    r.op = op;
    r.count = count;
    return run(rank, group, buf, buf, r);
  }
  Status allGather(int rank, const std::vector<int>& group, const void* x, void* y, int64_t outer, int64_t inner,
                   CommDType dtype) override {
    Request r;
    r.kind = Kind::kAllGather;
    r.dtype = dtype;
    r.outer = outer;
    r.inner = inner;
    return run(rank, group, x, y, r);
  }
  Status reduceScatter(int rank, const std::vector<int>& group, const void* x, void* y, int64_t outer, int64_t inner,
                       CommDType dtype, ReduceOp op) override {
    Request r;
    r.kind = Kind::kReduceScatter;
    r.dtype = dtype;
    r.op = op;
    r.outer = outer;
    r.inner = inner;
    return run(rank, group, x, y, r);
  }

  Status allToAll(int rank, const std::vector<int>& group, const void* send, void* recv, int64_t count,
                  CommDType dtype) override {
    Request r;
    r.kind = Kind::kAllToAll;
    r.dtype = dtype;
    r.count = count;
    return run(rank, group, send, recv, r);
  }

  Status allToAllV(int rank, const std::vector<int>& group, const void* x, int64_t xRows, const int32_t* sendSplits,
                   void* y, int64_t yRows, int32_t* recvSplits, int64_t chunks, int64_t rowElems,
                   CommDType dtype) override {
    Request r;
    r.kind = Kind::kAllToAllV;
    r.dtype = dtype;
    r.count = chunks;
    r.inner = rowElems;
    r.xRows = xRows;
    r.yRows = yRows;
    r.sendSplits = sendSplits;
    r.recvSplits = recvSplits;
    if (chunks < 1 || xRows < 0 || yRows < 0)
      return Status::invalidArgument(where(r, group) + ": chunks " + std::to_string(chunks) + ", x rows " +
                                     std::to_string(xRows) + ", y rows " + std::to_string(yRows));
    return run(rank, group, x, y, r);
  }

  Status send(int rank, int peer, const void* x, int64_t count, CommDType dtype, int64_t tag,
              int64_t microbatch) override {
    const std::string what = p2pWhat(true, rank, peer, count, dtype, tag, microbatch);
    LLCDIST_RETURN_IF_ERROR(checkP2P(rank, peer, count, what));
    Message m;
    m.count = count;
    m.dtype = dtype;
    m.tag = tag;
    m.microbatch = microbatch;
    if (count > 0) {  // eager: the caller may reuse x at once
      const auto* bytes = static_cast<const std::byte*>(x);
      m.data.assign(bytes, bytes + count * commDTypeSize(dtype));
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return abortedError(what);
    Channel& ch = channels_[{rank, peer}];
    ch.queue.push_back(std::move(m));
    ++ch.sent;
    cv_.notify_all();
    return Status::ok();
  }

  Status recv(int rank, int peer, void* y, int64_t count, CommDType dtype, int64_t tag, int64_t microbatch) override {
    const std::string what = p2pWhat(false, rank, peer, count, dtype, tag, microbatch);
    LLCDIST_RETURN_IF_ERROR(checkP2P(rank, peer, count, what));
    std::unique_lock<std::mutex> lock(mu_);
    Channel& ch = channels_[{peer, rank}];  // std::map: the reference stays valid while others insert
    const auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
    while (!aborted_ && ch.queue.empty()) {
      if (cv_.wait_until(lock, deadline) != std::cv_status::timeout || aborted_ || !ch.queue.empty()) continue;
      Status s = Status::deadlineExceeded(
          what + ": timed out after " + secondsStr(opts_.timeout) + " s waiting for the matching send; rank " +
          std::to_string(peer) + " has sent " + std::to_string(ch.sent) + " message(s) to rank " +
          std::to_string(rank) + " so far, all received (a rank skipped or reordered a send, or is stuck)");
      abortLocked(Status(s).withRank(rank));
      return s;
    }
    if (aborted_) return abortedError(what);
    const Message& head = ch.queue.front();
    if (head.count != count || head.dtype != dtype || head.tag != tag || head.microbatch != microbatch) {
      Status s = Status::invalidArgument(
          "send/recv mismatch in message " + std::to_string(ch.received) + " from rank " + std::to_string(peer) +
          " to rank " + std::to_string(rank) + ": rank " + std::to_string(peer) + " sent " +
          triple(head.count, head.dtype, head.tag, head.microbatch) + " but rank " + std::to_string(rank) + "'s " +
          what + " expects " + triple(count, dtype, tag, microbatch) +
          " (messages are matched in order per pair of ranks; tags are checked, never used to reorder)");
      abortLocked(Status(s).withRank(rank));
      return s;
    }
    Message m = std::move(ch.queue.front());
    ch.queue.pop_front();
    ++ch.received;
    lock.unlock();
    if (count > 0) std::memcpy(y, m.data.data(), m.data.size());
    return Status::ok();
  }

  void abort(const Status& reason) override {
    std::lock_guard<std::mutex> lock(mu_);
    abortLocked(reason);
  }
  Status abortReason() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return reason_;
  }

 private:
  void abortLocked(const Status& reason) {
    if (aborted_) return;
    aborted_ = true;
    reason_ = reason.isOk() ? Status::aborted("aborted without a reason") : reason;
    cv_.notify_all();
  }
  Status abortedError(const std::string& what) const {
    return Status::aborted(what + ": abandoned because another rank failed: " + reason_.message());
  }

  // "all_reduce(sum, 4 f32) on axis dp, group [0, 2]"; a group over several axes "on axis dp+cp, ...".
  std::string where(const Request& r, const std::vector<int>& group) const {
    std::string s = r.describe() + " on ";
    if (opts_.mesh)
      if (auto a = opts_.mesh->axisSetOfGroup(group)) s += "axis " + axisSetName(*a) + ", ";
    return s + "group " + rankList(group);
  }

  // "send(4 f32, tag 1, microbatch 0) to rank 1 on axis pp" / "recv(...) from rank 0 on axis pp".
  std::string p2pWhat(bool isSend, int rank, int peer, int64_t count, CommDType dtype, int64_t tag,
                      int64_t microbatch) const {
    std::string s = std::string(isSend ? "send(" : "recv(") + std::to_string(count) + " " + commDTypeName(dtype) +
                    ", tag " + std::to_string(tag) + ", microbatch " + std::to_string(microbatch) + ") " +
                    (isSend ? "to" : "from") + " rank " + std::to_string(peer);
    if (opts_.mesh)
      if (auto a = opts_.mesh->axisBetween(rank, peer)) s += " on axis " + std::string(meshAxisName(*a));
    return s;
  }

  Status checkP2P(int rank, int peer, int64_t count, const std::string& what) const {
    for (int r : {rank, peer})
      if (r < 0 || r >= opts_.worldSize)
        return Status::invalidArgument(what + ": rank " + std::to_string(r) + " is outside the world of " +
                                       std::to_string(opts_.worldSize) + " ranks");
    if (rank == peer)
      return Status::invalidArgument(what + ": rank " + std::to_string(rank) +
                                     " cannot send to or receive from itself");
    if (count < 0) return Status::invalidArgument(what + ": negative count");
    return Status::ok();
  }

  Status checkCall(int rank, const std::vector<int>& group, const Request& r, int* member) const {
    const std::string what = where(r, group);
    if (group.empty()) return Status::invalidArgument(what + ": empty group");
    *member = -1;
    for (size_t i = 0; i < group.size(); ++i) {
      if (group[i] < 0 || group[i] >= opts_.worldSize)
        return Status::invalidArgument(what + ": rank " + std::to_string(group[i]) + " is outside the world of " +
                                       std::to_string(opts_.worldSize) + " ranks");
      for (size_t j = 0; j < i; ++j)
        if (group[j] == group[i])
          return Status::invalidArgument(what + ": rank " + std::to_string(group[i]) + " appears twice");
      if (group[i] == rank) *member = int(i);
    }
    if (*member < 0)
      return Status::invalidArgument(what + ": the calling rank " + std::to_string(rank) + " is not a member");
    if (r.count < 0 || r.outer < 0 || r.inner < 0) return Status::invalidArgument(what + ": negative size");
    return Status::ok();
  }

  Status run(int rank, const std::vector<int>& group, const void* in, void* out, const Request& r) {
    int member = 0;
    LLCDIST_RETURN_IF_ERROR(checkCall(rank, group, r, &member));
    const size_t n = group.size();
    std::unique_lock<std::mutex> lock(mu_);
    const std::string what = where(r, group);
    if (aborted_) return abortedError(what);
    GroupState& gs = groups_[group];
    if (gs.calls.empty()) gs.calls.assign(n, 0);
    const int64_t seq = gs.calls[size_t(member)]++;
    Instance& inst = gs.instances[seq];
    if (inst.arrived.empty()) {
      inst.group = group;
      inst.requests.resize(n);
      inst.in.assign(n, nullptr);
      inst.out.assign(n, nullptr);
      inst.arrived.assign(n, false);
    }
    inst.requests[size_t(member)] = r;
    inst.in[size_t(member)] = in;
    inst.out[size_t(member)] = out;
    inst.arrived[size_t(member)] = true;
    if (++inst.numArrived == int(n)) {
      // Last to arrive: check the calls match, then compute for everybody outside the lock.
      for (size_t m = 0; m < n; ++m)
        if (!(inst.requests[m] == inst.requests[0])) {
          inst.result = Status::invalidArgument("collective mismatch in call " + std::to_string(seq) + " on group " +
                                                rankList(group) + ": rank " + std::to_string(group[0]) + " called " +
                                                inst.requests[0].describe() + " but rank " + std::to_string(group[m]) +
                                                " called " + inst.requests[m].describe());
          break;
        }
      if (inst.result.isOk()) {
        inst.executing = true;
        lock.unlock();
        execute(inst);
        lock.lock();
        inst.executing = false;
      }
      inst.done = true;
      if (!inst.result.isOk()) abortLocked(inst.result);
      cv_.notify_all();
    } else {
      auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
      // Leave early on abort, but never while the last member is still writing our output.
      const auto ready = [&] { return inst.done || (aborted_ && !inst.executing); };
      while (!ready()) {
        if (cv_.wait_until(lock, deadline) != std::cv_status::timeout || ready()) continue;
        if (inst.executing) {  // everybody is here: the result is on its way
          deadline = std::chrono::steady_clock::now() + opts_.timeout;
          continue;
        }
        Status s = timeoutError(what, group, gs, inst, seq);
        abortLocked(Status(s).withRank(rank));
        leave(gs, seq, n);
        return s;
      }
      if (!inst.done) {
        leave(gs, seq, n);
        return abortedError(what);
      }
    }
    Status result = inst.result;
    leave(gs, seq, n);
    return result;
  }

  void leave(GroupState& gs, int64_t seq, size_t n) {
    auto it = gs.instances.find(seq);
    if (it != gs.instances.end() && ++it->second.numLeft == int(n)) gs.instances.erase(it);
  }

  Status timeoutError(const std::string& what, const std::vector<int>& group, const GroupState& gs,
                      const Instance& inst, int64_t seq) const {
    std::string arrived, missing;
    for (size_t m = 0; m < group.size(); ++m) {
      const std::string who = "rank " + std::to_string(group[m]) + " (member " + std::to_string(m) + ")";
      if (inst.arrived[m])
        arrived += (arrived.empty() ? "" : ", ") + who;
      else
        missing +=
            (missing.empty() ? "" : ", ") + who + " after " + std::to_string(gs.calls[m]) + " call(s) on this group";
    }
    return Status::deadlineExceeded(what + ", call " + std::to_string(seq) + " on this group: timed out after " +
                                    secondsStr(opts_.timeout) + " s waiting for the group; arrived: " + arrived +
                                    "; missing: " + missing +
                                    " (a rank skipped or reordered a collective, or is stuck)");
  }

  static void execute(Instance& inst) {
    const Request& r = inst.requests[0];
    if (r.kind == Kind::kAllToAllV) {
      inst.result = runAllToAllV(inst, r);
      return;
    }
    switch (r.kind) {
      case Kind::kAllReduce:
        withElementType(r.dtype, [&](auto e) { runAllReduce<decltype(e)>(inst, r); });
        return;
      case Kind::kAllGather:
        runAllGather(inst, r);
        return;
      case Kind::kReduceScatter:
        withElementType(r.dtype, [&](auto e) { runReduceScatter<decltype(e)>(inst, r); });
        return;
      case Kind::kAllToAll:
        runAllToAll(inst, r);
        return;
      case Kind::kAllToAllV:  // above
        return;
    }
  }

  InProcessCommunicatorOptions opts_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::vector<int>, GroupState> groups_;
  std::map<std::pair<int, int>, Channel> channels_;  // (sender, receiver)
  bool aborted_ = false;
  Status reason_;
};

}  // namespace

std::unique_ptr<Communicator> makeInProcessCommunicator(const InProcessCommunicatorOptions& options) {
  return std::make_unique<InProcessCommunicator>(options);
}

}  // namespace llcdist::rt
