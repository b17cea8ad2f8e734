// The MPI communicator. See MpiCommunicator.h.
#include "llcdist/runtime/MpiCommunicator.h"

#include "Reduce.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <thread>

namespace llcdist::rt {
namespace {
using namespace comm;

// Tags on the communicator: point-to-point messages, and collectives (kFirstGroupTag + the group's
// hash, so two groups rarely share one; a shared tag is still caught, by the request check).
constexpr int kP2PTag = 1;
constexpr int kFirstGroupTag = 2;
constexpr int64_t kMagic = 0x6c6c6364697374;  // "llcdist"

// A collective's request as it travels: every member compares all of them.
struct Header {
  int64_t magic, kind, dtype, op, count, outer, inner, group;
};
Header headerOf(const Request& r, int64_t group) {
  return {kMagic, int64_t(r.kind), int64_t(r.dtype), int64_t(r.op), r.count, r.outer, r.inner, group};
}
Request requestOf(const Header& h) {
  Request r;
  r.kind = Kind(h.kind);
  r.dtype = CommDType(h.dtype);
  r.op = ReduceOp(h.op);
  r.count = h.count, r.outer = h.outer, r.inner = h.inner;
  return r;
}
bool sameRequest(const Header& a, const Header& b) { return a.group == b.group && requestOf(a) == requestOf(b); }

// A point-to-point message's triple, ahead of its data.
struct P2PHeader {
  int64_t magic, count, tag, microbatch, dtype;  // dtype: the CommDType's value
};

int64_t groupHash(const std::vector<int>& g) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the member list
  for (int r : g) {
    h ^= uint64_t(uint32_t(r));
    h *= 1099511628211ull;
  }
  return int64_t(h >> 1);
}

// Between polls: a few yields, then sleeps that double up to 1 ms, so that waiting ranks leave the
// cores to the ranks that compute (tests run 8 processes on 2 cores) without adding much latency.
class Backoff {
 public:
  void pause() {
    if (++polls_ < 64) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, std::chrono::microseconds(1000));
  }

 private:
  int polls_ = 0;
  std::chrono::microseconds sleep_{10};
};

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const MpiCommunicatorOptions& o) : opts_(o), k_(std::max(o.ranksPerProcess, 1)) {
    // One duplicate of MPI_COMM_WORLD per (sender slot, receiver slot): with k ranks per process,
    // a message's communicator, source process and tag say which rank sent it to which.
    comms_.resize(size_t(k_) * size_t(k_), MPI_COMM_NULL);
    for (MPI_Comm& c : comms_) MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_rank(MPI_COMM_WORLD, &process_);
    MPI_Comm_size(MPI_COMM_WORLD, &processes_);
    size_ = processes_ * k_;
    void* ub = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    tagUb_ = flag && ub ? *static_cast<int*>(ub) : 32767;
  }
  ~MpiCommunicator() override {
    // Sends not yet delivered: a receiver that is still running takes them; give up after the
    // timeout (the job is ending anyway).
    const auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
    std::lock_guard<std::mutex> lock(sendsMu_);
    for (PendingSend& s : sends_) {
      int done = 0;
      while (!done && std::chrono::steady_clock::now() < deadline) {
        MPI_Test(&s.request, &done, MPI_STATUS_IGNORE);
        if (!done) std::this_thread::yield();
      }
      if (!done) {
        MPI_Cancel(&s.request);
        MPI_Request_free(&s.request);
      }
    }
    for (MPI_Comm& c : comms_) MPI_Comm_free(&c);
  }

  int worldSize() const override { return size_; }

  Status allReduce(int rank, const std::vector<int>& group, void* buf, int64_t count, CommDType dtype,
                   ReduceOp op) override {
    Request r;
    r.kind = Kind::kAllReduce, r.dtype = dtype, r.op = op, r.count = count;
    const size_t bytes = size_t(count * commDTypeSize(dtype));
    std::vector<std::vector<std::byte>> from;
    LLCDIST_RETURN_IF_ERROR(exchange(
        rank, group, r, [&](size_t) { return std::make_pair(buf, bytes); }, bytes, from));
    const size_t me = memberOf(rank, group);
    withElementType(dtype, [&](auto e) { reduceMembers<decltype(e)>(from, me, buf, buf, count, op); });
    return Status::ok();
  }

  Status allGather(int rank, const std::vector<int>& group, const void* x, void* y, int64_t outer, int64_t inner,
                   CommDType dtype) override {
    Request r;
    r.kind = Kind::kAllGather, r.dtype = dtype, r.outer = outer, r.inner = inner;
    const int64_t el = commDTypeSize(dtype);
    const size_t bytes = size_t(outer * inner * el);
    std::vector<std::vector<std::byte>> from;
    LLCDIST_RETURN_IF_ERROR(exchange(
        rank, group, r, [&](size_t) { return std::make_pair(x, bytes); }, bytes, from));
    const size_t me = memberOf(rank, group), n = group.size();
    // y may alias x: x's rows first into this member's slot of `from`.
    from[me].assign(static_cast<const std::byte*>(x), static_cast<const std::byte*>(x) + bytes);
    auto* out = static_cast<std::byte*>(y);
    const int64_t row = int64_t(n) * inner * el, part = inner * el;
    for (size_t m = 0; m < n; ++m)
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(out + o * row + int64_t(m) * part, from[m].data() + o * part, size_t(part));
    return Status::ok();
  }

  Status reduceScatter(int rank, const std::vector<int>& group, const void* x, void* y, int64_t outer, int64_t inner,
                       CommDType dtype, ReduceOp op) override {
    Request r;
    r.kind = Kind::kReduceScatter, r.dtype = dtype, r.op = op, r.outer = outer, r.inner = inner;
    const int64_t el = commDTypeSize(dtype);
    const size_t n = group.size(), bytes = size_t(outer * inner * el);
    // Member j gets column block j of every row of x.
    std::vector<std::vector<std::byte>> blocks(n, std::vector<std::byte>(bytes));
    const auto* in = static_cast<const std::byte*>(x);
    const int64_t row = int64_t(n) * inner * el, part = inner * el;
    for (size_t j = 0; j < n; ++j)
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(blocks[j].data() + o * part, in + o * row + int64_t(j) * part, size_t(part));
    std::vector<std::vector<std::byte>> from;
    LLCDIST_RETURN_IF_ERROR(exchange(
        rank, group, r, [&](size_t j) { return std::make_pair<const void*>(blocks[j].data(), bytes); }, bytes, from));
    const size_t me = memberOf(rank, group);
    const int64_t cnt = outer * inner;
    withElementType(dtype, [&](auto e) { reduceMembers<decltype(e)>(from, me, blocks[me].data(), y, cnt, op); });
    return Status::ok();
  }

  // Block j of `send` to member j over the same per-member messages as the other collectives (a rank's
  // group has no MPI communicator of its own, and one process may run several ranks: MPI_Alltoall does
  // not fit), this member's own block copied.
  Status allToAll(int rank, const std::vector<int>& group, const void* send, void* recv, int64_t count,
                  CommDType dtype) override {
    Request r;
    r.kind = Kind::kAllToAll, r.dtype = dtype, r.count = count;
    const size_t bytes = size_t(count * commDTypeSize(dtype));
    const auto* in = static_cast<const std::byte*>(send);
    std::vector<std::vector<std::byte>> from;
    LLCDIST_RETURN_IF_ERROR(exchange(
        rank, group, r, [&](size_t j) { return std::make_pair<const void*>(in + j * bytes, bytes); }, bytes, from));
    const size_t me = memberOf(rank, group), n = group.size();
    from[me].assign(in + me * bytes, in + (me + 1) * bytes);
    auto* out = static_cast<std::byte*>(recv);
    for (size_t m = 0; m < n; ++m)
      if (bytes > 0) std::memcpy(out + m * bytes, from[m].data(), bytes);
    return Status::ok();
  }

  // all_to_all_v: over the same per-member messages as allToAll (MPI_Alltoall / MPI_Alltoallv need a
  // communicator per group and one rank per process, which this communicator does not have): first every
  // member's splits with its x's and y's rows, to every member, then each member's rows, variable-size
  // messages whose sizes both sides know from the splits; this member's own rows copied. Every member
  // checks every member's splits as the in-process communicator does (each sender's against its x, then
  // each receiver's sum against its y, in member order), so a wrong split fails the call on every member
  // with the same error at once, before any row moves, instead of one member failing and the others
  // waiting out the timeout.
  Status allToAllV(int rank, const std::vector<int>& group, const void* x, int64_t xRows, const int32_t* sendSplits,
                   void* y, int64_t yRows, int32_t* recvSplits, int64_t chunks, int64_t rowElems,
                   CommDType dtype) override {
    Request r;
    r.kind = Kind::kAllToAllV, r.dtype = dtype, r.count = chunks, r.inner = rowElems;
    const size_t n = group.size(), me = memberOf(rank, group), c = size_t(chunks);
    std::vector<std::vector<std::byte>> from;
    if (me == n)  // exchange's error for a rank outside its group
      return exchange(rank, group, r, [&](size_t) { return std::make_pair<const void*>(nullptr, size_t(0)); }, 0, from);
    // This member's splits, then its x's and y's rows.
    const size_t splitBytes = n * c * sizeof(int32_t), msgBytes = splitBytes + 2 * sizeof(int64_t);
    std::vector<std::byte> mine(msgBytes);
    const int64_t rows[2] = {xRows, yRows};
    std::memcpy(mine.data(), sendSplits, splitBytes);
    std::memcpy(mine.data() + splitBytes, rows, sizeof rows);
    LLCDIST_RETURN_IF_ERROR(exchange(
        rank, group, r, [&](size_t) { return std::make_pair<const void*>(mine.data(), msgBytes); }, msgBytes, from));
    from[me] = std::move(mine);
    std::vector<int32_t> all(n * n * c);  // member m's send splits at m·n·c
    std::vector<int64_t> xRowsOf(n), yRowsOf(n);
    for (size_t m = 0; m < n; ++m) {
      std::memcpy(all.data() + m * n * c, from[m].data(), splitBytes);
      std::memcpy(&xRowsOf[m], from[m].data() + splitBytes, sizeof(int64_t));
      std::memcpy(&yRowsOf[m], from[m].data() + splitBytes + sizeof(int64_t), sizeof(int64_t));
    }
    std::vector<int32_t> recv(n * c);
    if (Status s = checkEveryMembersSplits(group, all.data(), xRowsOf.data(), yRowsOf.data(), chunks, me, recv.data());
        !s.isOk())
      return fail(s);
    const int64_t rowBytes = rowElems * commDTypeSize(dtype);
    std::vector<size_t> sendAt(n + 1, 0), expected(n, 0);
    size_t largest = 0;
    for (size_t j = 0; j < n; ++j) {
      int64_t rows = 0, in = 0;
      for (size_t k = j * size_t(chunks); k < (j + 1) * size_t(chunks); ++k) rows += sendSplits[k], in += recv[k];
      sendAt[j + 1] = sendAt[j] + size_t(rows * rowBytes);
      expected[j] = size_t(in * rowBytes);
      if (j != me) largest = std::max(largest, sendAt[j + 1] - sendAt[j]);
    }
    const auto* xb = static_cast<const std::byte*>(x);
    const auto rowsTo = [&](size_t j) {
      return std::make_pair<const void*>(xb + sendAt[j], sendAt[j + 1] - sendAt[j]);
    };
    LLCDIST_RETURN_IF_ERROR(exchange(rank, group, r, rowsTo, largest, from, &expected));
    auto* out = static_cast<std::byte*>(y);
    size_t at = 0;
    for (size_t m = 0; m < n; ++m) {
      const std::byte* src = m == me ? xb + sendAt[me] : from[m].data();
      if (expected[m] > 0) std::memcpy(out + at, src, expected[m]);
      at += expected[m];
    }
    if (int64_t(at) < yRows * rowBytes) std::memset(out + at, 0, size_t(yRows * rowBytes) - at);
    std::memcpy(recvSplits, recv.data(), recv.size() * sizeof(int32_t));
    return Status::ok();
  }

  Status send(int rank, int peer, const void* x, int64_t count, CommDType dtype, int64_t tag,
              int64_t microbatch) override {
    LLCDIST_RETURN_IF_ERROR(checkP2P(rank, peer, "send", count));
    PendingSend s;
    P2PHeader h{kMagic, count, tag, microbatch, int64_t(dtype)};
    const size_t bytes = size_t(count * commDTypeSize(dtype));
    s.data.resize(sizeof h + bytes);
    std::memcpy(s.data.data(), &h, sizeof h);
    if (count > 0) std::memcpy(s.data.data() + sizeof h, x, bytes);
    std::lock_guard<std::mutex> lock(sendsMu_);
    reapSends();
    sends_.push_back(std::move(s));
    PendingSend& p = sends_.back();
    MPI_Isend(p.data.data(), int(p.data.size()), MPI_BYTE, processOf(peer), kP2PTag, commFor(rank, peer), &p.request);
    return Status::ok();
  }

  Status recv(int rank, int peer, void* y, int64_t count, CommDType dtype, int64_t tag, int64_t microbatch) override {
    LLCDIST_RETURN_IF_ERROR(checkP2P(rank, peer, "recv", count));
    std::vector<std::byte> msg;
    const auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
    Backoff backoff;
    while (true) {
      if (Status a = abortReason(); !a.isOk()) return Status::aborted(a.message());
      if (takeMessage(peer, rank, kP2PTag, msg)) break;
      if (std::chrono::steady_clock::now() > deadline) {
        Status err = Status::deadlineExceeded(
            "recv " + triple(count, dtype, tag, microbatch) + " on rank " + std::to_string(rank) + " from rank " +
            std::to_string(peer) + axisPhrase(rank, peer) + ": no message within " + secondsStr(opts_.timeout) + " s");
        abort(err);
        return err;
      }
      backoff.pause();
    }
    P2PHeader h{};
    if (msg.size() >= sizeof h) std::memcpy(&h, msg.data(), sizeof h);
    if (msg.size() < sizeof h || h.magic != kMagic)
      return fail(Status::invalidArgument("recv on rank " + std::to_string(rank) + " from rank " +
                                          std::to_string(peer) + ": not a point-to-point message"));
    const size_t bytes = size_t(count * commDTypeSize(dtype));
    if (h.count != count || h.dtype != int64_t(dtype) || h.tag != tag || h.microbatch != microbatch ||
        msg.size() != sizeof h + bytes) {
      const CommDType sent = h.dtype == int64_t(CommDType::kBF16)  ? CommDType::kBF16
                             : h.dtype == int64_t(CommDType::kF64) ? CommDType::kF64
                             : h.dtype == int64_t(CommDType::kI32) ? CommDType::kI32
                                                                   : CommDType::kF32;
      return fail(Status::invalidArgument("send/recv mismatch: rank " + std::to_string(rank) + " receives " +
                                          triple(count, dtype, tag, microbatch) + " from rank " + std::to_string(peer) +
                                          " but rank " + std::to_string(peer) + " sent " +
                                          triple(h.count, sent, h.tag, h.microbatch)));
    }
    if (count > 0) std::memcpy(y, msg.data() + sizeof h, bytes);
    return Status::ok();
  }

  void abort(const Status& reason) override {
    std::lock_guard<std::mutex> lock(abortMu_);
    if (aborted_.load()) return;
    reason_ = reason;
    aborted_.store(true);
  }
  Status abortReason() const override {
    if (!aborted_.load()) return Status::ok();
    std::lock_guard<std::mutex> lock(abortMu_);
    return reason_;
  }

 private:
  struct PendingSend {
    std::vector<std::byte> data;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  std::string axisPhrase(int a, int b) const {
    if (!opts_.mesh) return "";
    if (auto axis = opts_.mesh->axisBetween(a, b)) return " (axis " + std::string(meshAxisName(*axis)) + ")";
    return "";
  }
  std::string groupPhrase(const std::vector<int>& group) const {
    std::string s = "group " + rankList(group);
    if (opts_.mesh)
      if (auto axis = opts_.mesh->axisSetOfGroup(group)) s += " (axis " + axisSetName(*axis) + ")";
    return s;
  }
  Status fail(Status err) {
    abort(err);
    return err;
  }

  static size_t memberOf(int rank, const std::vector<int>& group) {
    return size_t(std::find(group.begin(), group.end(), rank) - group.begin());
  }

  Status checkRank(int rank) const {
    if (rank < 0 || processOf(rank) != process_)
      return Status::invalidArgument("the MPI communicator of process " + std::to_string(process_) +
                                     " was called for rank " + std::to_string(rank) + ", which it does not run (" +
                                     std::to_string(k_) + " rank" + (k_ == 1 ? "" : "s") + " per process)");
    return Status::ok();
  }
  int processOf(int rank) const { return rank / k_; }
  // The communicator of messages from rank `from` to rank `to`.
  MPI_Comm commFor(int from, int to) const { return comms_[size_t(from % k_) * size_t(k_) + size_t(to % k_)]; }
  Status checkP2P(int rank, int peer, const char* what, int64_t count) const {
    LLCDIST_RETURN_IF_ERROR(checkRank(rank));
    if (peer < 0 || peer >= size_ || peer == rank)
      return Status::invalidArgument(std::string(what) + " on rank " + std::to_string(rank) + ": peer " +
                                     std::to_string(peer) + " is not another rank of the " + std::to_string(size_) +
                                     "-rank world");
    if (count < 0 || uint64_t(count) * sizeof(float) + sizeof(P2PHeader) > uint64_t(INT32_MAX))
      return Status::invalidArgument(std::string(what) + " on rank " + std::to_string(rank) + ": count " +
                                     std::to_string(count) + " out of range for one MPI message");
    if (Status a = abortReason(); !a.isOk()) return Status::aborted(a.message());
    return Status::ok();
  }

  // Frees the buffers of delivered sends (sendsMu_ held).
  void reapSends() {
    for (auto it = sends_.begin(); it != sends_.end();) {
      int done = 0;
      MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
      it = done ? sends_.erase(it) : std::next(it);
    }
  }

  // The oldest message from rank `from` to rank `to` on `tag`, if one has arrived.
  bool takeMessage(int from, int to, int tag, std::vector<std::byte>& out) {
    int flag = 0;
    MPI_Message m;
    MPI_Status st;
    MPI_Improbe(processOf(from), tag, commFor(from, to), &flag, &m, &st);
    if (!flag) return false;
    int bytes = 0;
    MPI_Get_count(&st, MPI_BYTE, &bytes);
    out.resize(size_t(bytes));
    MPI_Mrecv(out.data(), bytes, MPI_BYTE, &m, MPI_STATUS_IGNORE);
    return true;
  }

  // Serializes one rank's calls on a group (the ranks of one process on a group call it at once).
  std::mutex& groupMutex(int rank, const std::vector<int>& group) {
    std::lock_guard<std::mutex> lock(groupsMu_);
    std::unique_ptr<std::mutex>& m = groupLocks_[{rank, group}];
    if (!m) m = std::make_unique<std::mutex>();
    return *m;
  }

  // One collective call's messages: this member's request and `payload(j)` to every other member j,
  // theirs back (`from[m]`: member m's payload, empty for this member); then the request check. Every
  // payload is `bytes` long, or with `expected` (all_to_all_v's rows) member m's is expected[m] bytes.
  template <typename Payload>
  Status exchange(int rank, const std::vector<int>& group, const Request& r, Payload payload, size_t bytes,
                  std::vector<std::vector<std::byte>>& from, const std::vector<size_t>* expected = nullptr) {
    if (expected)
      for (size_t j = 0; j < expected->size() && j < group.size(); ++j)
        if (group[j] != rank) bytes = std::max(bytes, (*expected)[j]);
    LLCDIST_RETURN_IF_ERROR(checkRank(rank));
    const size_t n = group.size(), me = memberOf(rank, group);
    if (me == n || std::count(group.begin(), group.end(), rank) != 1)
      return Status::invalidArgument("rank " + std::to_string(rank) + " calls " + r.describe() + " on " +
                                     rankList(group) + ", which does not hold it once");
    for (int m : group)
      if (m < 0 || m >= size_)
        return Status::invalidArgument(r.describe() + " on " + rankList(group) + ": rank " + std::to_string(m) +
                                       " is outside the " + std::to_string(size_) + "-rank world");
    if (bytes + sizeof(Header) > size_t(INT32_MAX))
      return Status::invalidArgument(r.describe() + " on " + rankList(group) + ": too large for one MPI message (" +
                                     std::to_string(bytes) + " bytes)");
    if (Status a = abortReason(); !a.isOk()) return Status::aborted(a.message());
    std::lock_guard<std::mutex> serial(groupMutex(rank, group));
    const int64_t gh = groupHash(group);
    const int tag = kFirstGroupTag + int(uint64_t(gh) % uint64_t(tagUb_ - kFirstGroupTag));
    const Header mine = headerOf(r, gh);
    // Sends: the same buffer for every member unless the payloads differ (reduce_scatter).
    std::vector<std::vector<std::byte>> out(n);
    std::vector<MPI_Request> reqs;
    for (size_t j = 0; j < n; ++j) {
      if (j == me) continue;
      auto [data, size] = payload(j);
      out[j].resize(sizeof mine + size);
      std::memcpy(out[j].data(), &mine, sizeof mine);
      if (size) std::memcpy(out[j].data() + sizeof mine, data, size);
      reqs.emplace_back();
      MPI_Isend(out[j].data(), int(out[j].size()), MPI_BYTE, processOf(group[j]), tag, commFor(rank, group[j]),
                &reqs.back());
    }
    from.assign(n, {});
    std::vector<bool> arrived(n, false);
    arrived[me] = true;
    size_t pending = n - 1;
    const auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
    Backoff backoff;
    auto giveUp = [&](Status err) {
      for (MPI_Request& q : reqs) {
        MPI_Cancel(&q);
        MPI_Request_free(&q);
      }
      return fail(std::move(err));
    };
    while (pending > 0) {
      bool progressed = false;
      for (size_t j = 0; j < n; ++j)
        if (!arrived[j] && takeMessage(group[j], rank, tag, from[j])) {
          arrived[j] = true;
          --pending;
          progressed = true;
        }
      if (progressed) continue;
      if (Status a = abortReason(); !a.isOk()) return giveUp(Status::aborted(a.message()));
      if (std::chrono::steady_clock::now() > deadline) {
        std::string have, missing;
        for (size_t j = 0; j < n; ++j) {
          std::string& list = arrived[j] ? have : missing;
          list += (list.empty() ? "" : ", ") + std::to_string(group[j]);
        }
        return giveUp(Status::deadlineExceeded(r.describe() + " on " + groupPhrase(group) + ": rank " +
                                               std::to_string(rank) + " waited " + secondsStr(opts_.timeout) +
                                               " s; arrived: " + have + "; missing: " + missing));
      }
      backoff.pause();
    }
    // Every member's request against member 0's: the same verdict on every member.
    std::vector<Header> heads(n, mine);
    for (size_t j = 0; j < n; ++j) {
      if (j == me) continue;
      if (from[j].size() < sizeof(Header)) return giveUp(Status::internal("a short collective message"));
      std::memcpy(&heads[j], from[j].data(), sizeof(Header));
    }
    for (size_t j = 1; j < n; ++j)
      if (heads[j].magic != kMagic || heads[0].magic != kMagic || !sameRequest(heads[j], heads[0]))
        return giveUp(Status::invalidArgument("collective mismatch on " + groupPhrase(group) + ": rank " +
                                              std::to_string(group[0]) + " calls " + requestOf(heads[0]).describe() +
                                              " but rank " + std::to_string(group[j]) + " calls " +
                                              requestOf(heads[j]).describe()));
    for (size_t j = 0; j < n; ++j) {
      const size_t due = sizeof(Header) + (expected ? (*expected)[j] : bytes);
      if (j != me && from[j].size() != due)
        return giveUp(Status::internal("a collective message of " + std::to_string(from[j].size()) + " bytes where " +
                                       std::to_string(due) + " were due"));
    }
    for (size_t j = 0; j < n; ++j)
      if (j != me) from[j].erase(from[j].begin(), from[j].begin() + sizeof(Header));
    // Our sends are done once every member has its message; wait for MPI to release the buffers.
    for (MPI_Request& q : reqs) {
      int done = 0;
      while (!done) {
        MPI_Test(&q, &done, MPI_STATUS_IGNORE);
        if (done) break;
        if (std::chrono::steady_clock::now() > deadline)
          return giveUp(Status::deadlineExceeded(r.describe() + " on " + groupPhrase(group) +
                                                 ": a member did not take rank " + std::to_string(rank) +
                                                 "'s data within " + secondsStr(opts_.timeout) + " s"));
        backoff.pause();
      }
    }
    return Status::ok();
  }

  // out[k] = the reduction over members m, in member order, of member m's data[k] (count elements):
  // this member's is `own`, the others' `from[m]`. `out` may alias `own`.
  template <typename T>
  static void reduceMembers(const std::vector<std::vector<std::byte>>& from, size_t me, const void* own, void* out,
                            int64_t count, ReduceOp op) {
    std::vector<const T*> src(from.size());
    for (size_t m = 0; m < from.size(); ++m)
      src[m] = m == me ? static_cast<const T*>(own) : reinterpret_cast<const T*>(from[m].data());
    std::vector<T> acc(static_cast<size_t>(count));
    if (count > 0) reduceInto(acc.data(), src, count, 0, op);
    if (count > 0) std::memcpy(out, acc.data(), size_t(count) * sizeof(T));
  }

  MpiCommunicatorOptions opts_;
  int k_ = 1;                    // ranks per process: process p runs ranks [p·k, p·k + k)
  std::vector<MPI_Comm> comms_;  // by (sender slot, receiver slot): commFor
  int process_ = 0, processes_ = 1, size_ = 1, tagUb_ = 32767;
  std::mutex sendsMu_;
  std::list<PendingSend> sends_;
  std::mutex groupsMu_;
  std::map<std::pair<int, std::vector<int>>, std::unique_ptr<std::mutex>> groupLocks_;
  mutable std::mutex abortMu_;
  std::atomic<bool> aborted_{false};
  Status reason_;
};

// The flight recorder's dump requests (FlightRecorder.h): on a duplicate of MPI_COMM_WORLD of their
// own, a request (tag 1, the reason's bytes) to every other process and an answer (tag 2, empty) back.
class MpiDumpPeers final : public DumpPeers {
 public:
  MpiDumpPeers() {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiDumpPeers() override {
    for (MPI_Request& r : pending_) {
      int done = 0;
      MPI_Test(&r, &done, MPI_STATUS_IGNORE);
      if (!done) {
        MPI_Cancel(&r);
        MPI_Request_free(&r);
      }
    }
    MPI_Comm_free(&comm_);
  }

  int requestDumps(const std::string& reason, std::chrono::milliseconds grace) override {
    std::lock_guard<std::mutex> lock(mu_);
    request_ = "rank " + std::to_string(rank_) + " asked: " + reason;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      pending_.emplace_back();
      MPI_Isend(request_.data(), int(request_.size()), MPI_CHAR, p, kRequest, comm_, &pending_.back());
    }
    std::vector<bool> answered(size_t(size_), false);
    int n = 0;
    const auto deadline = std::chrono::steady_clock::now() + grace;
    Backoff backoff;
    while (n < size_ - 1 && std::chrono::steady_clock::now() < deadline) {
      int flag = 0;
      MPI_Status st;
      MPI_Iprobe(MPI_ANY_SOURCE, kAnswer, comm_, &flag, &st);
      if (flag) {
        MPI_Recv(nullptr, 0, MPI_CHAR, st.MPI_SOURCE, kAnswer, comm_, MPI_STATUS_IGNORE);
        if (!answered[size_t(st.MPI_SOURCE)]) answered[size_t(st.MPI_SOURCE)] = true, ++n;
        continue;
      }
      std::string other;
      if (takeRequest(&other)) {  // this process has dumped already: answer at once
        answerLocked();
        continue;
      }
      backoff.pause();
    }
    return n;
  }

  bool pollRequest(std::string* reason) override {
    std::lock_guard<std::mutex> lock(mu_);
    return takeRequest(reason);
  }
  void answer() override {
    std::lock_guard<std::mutex> lock(mu_);
    answerLocked();
  }

 private:
  static constexpr int kRequest = 1, kAnswer = 2;
  bool takeRequest(std::string* reason) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kRequest, comm_, &flag, &st);
    if (!flag) return false;
    int n = 0;
    MPI_Get_count(&st, MPI_CHAR, &n);
    std::string text(size_t(std::max(n, 0)), '\0');
    MPI_Recv(text.data(), n, MPI_CHAR, st.MPI_SOURCE, kRequest, comm_, MPI_STATUS_IGNORE);
    requesters_.push_back(st.MPI_SOURCE);
    *reason = text;
    return true;
  }
  void answerLocked() {
    for (int p : requesters_) {
      pending_.emplace_back();
      MPI_Isend(nullptr, 0, MPI_CHAR, p, kAnswer, comm_, &pending_.back());
    }
    requesters_.clear();
  }

  std::mutex mu_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::string request_;
  std::list<MPI_Request> pending_;
  std::vector<int> requesters_;
};

Status& initResult() {
  static Status s = Status::internal("initMpi was not called");
  return s;
}

}  // namespace

Status initMpi() {
  static std::once_flag once;
  std::call_once(once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    int provided = 0;
    if (initialized)
      MPI_Query_thread(&provided);
    else if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      initResult() = Status::internal("MPI_Init_thread failed");
      return;
    }
    if (!initialized)
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
      });
    initResult() = provided >= MPI_THREAD_MULTIPLE
                       ? Status::ok()
                       : Status::internal("the MPI library provides thread level " + std::to_string(provided) +
                                          ", below MPI_THREAD_MULTIPLE (the runtime calls MPI from several "
                                          "threads of a rank)");
  });
  return initResult();
}

int mpiWorldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int mpiWorldSize() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

void abortMpiJob(int exitCode) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, exitCode);
  std::_Exit(exitCode);  // (MPI_Abort does not return)
}

StatusOr<std::unique_ptr<Communicator>> makeMpiCommunicator(const MpiCommunicatorOptions& options) {
  LLCDIST_RETURN_IF_ERROR(initMpi());
  if (options.ranksPerProcess < 1 || options.ranksPerProcess > 1024)
    return Status::invalidArgument("ranks per process must be in [1, 1024], got " +
                                   std::to_string(options.ranksPerProcess));
  if (options.mesh && options.mesh->worldSize() != int64_t(mpiWorldSize()) * options.ranksPerProcess)
    return Status::invalidArgument("the mesh has " + std::to_string(options.mesh->worldSize()) +
                                   " ranks but MPI started " + std::to_string(mpiWorldSize()) + " processes of " +
                                   std::to_string(options.ranksPerProcess) + " ranks");
  return std::unique_ptr<Communicator>(std::make_unique<MpiCommunicator>(options));
}

std::unique_ptr<DumpPeers> makeMpiDumpPeers() { return std::make_unique<MpiDumpPeers>(); }

}  // namespace llcdist::rt
