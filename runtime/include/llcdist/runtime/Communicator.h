// Communicators: the collectives of a multi-rank run (docs/plan-format.md "Multi-rank plans").
//
// A Communicator connects the ranks of one run. Every collective is called by every member of its
// group — a list of global ranks in member order (the member index is the position in the list;
// Mesh::group builds it) — and the members of a group must make the same sequence of calls on it,
// with matching kinds and sizes (a mismatch is an InvalidArgument error for every member). Calls are
// blocking: they return when this member's output is complete.
//
// Semantics (NCCL's, with the plan format's determinism rule): reductions run in member-index order
// (member 0 + member 1 + ...) in the elements' precision (`dtype`), and every member receives identical
// bits; kAvg multiplies the sum by 1/n afterwards; kMax propagates NaN. kBF16 is NCCL's bf16 reduction:
// each partial sum is rounded to bf16 (acc = bf16(f32(acc) + f32(x_m)), round to nearest even), kAvg's
// sum is then scaled as bf16(f32(sum) · f32(1/n)); kMax is exact. Elements are 2 bytes (kBF16), 4
// (kF32) or 8 (kF64): what a call moves. all_gather copies elements whatever their dtype.
//   allReduce:     buf[i] = reduce_m buf_m[i]                      (in place, count elements)
//   allGather:     y[o, m·inner + k] = x_m[o, k]                   (x [outer, inner], y [outer, n·inner])
//   reduceScatter: y[o, k] = reduce_m x_m[o, c·inner + k]           (x [outer, n·inner], y [outer, inner],
//                                                                    c this rank's member index)
//   allToAll:      recv[m, k] = send_m[c, k]                         (send, recv [n, count]: block m of
//                                                                    send goes to member m, block m of recv
//                                                                    comes from member m; a copy of elements)
//   allToAllV:     rows of `rowElems` elements in c variable-size chunks per member pair (all_to_all_v,
//                  expert parallelism): recvSplits[m·c + j] = sendSplits_m[c'·c + j] (c' this member's
//                  index), then y holds member 0's rows for this member, then member 1's, ..., and zeros
//                  past them (see allToAllV below)
//
// Failure: abort(reason) makes every pending and later collective of every rank return an Aborted
// error naming the reason (the first abort wins), so one failing rank never leaves the others
// waiting. A member that waits longer than the timeout for the others gets a DeadlineExceeded error
// naming the collective, the axis (when a mesh is known), the group, which members arrived and how
// many calls each missing member has made on the group; the timeout also aborts the communicator.
//
// Point-to-point (the send/recv ops of pipeline plans, docs/plan-format.md "Pipeline plans"): messages
// travel per ordered pair (sender, receiver) in FIFO order and carry (count, dtype, tag, microbatch): a
// bf16 buffer moves as bf16, 2 bytes an element (dtype is part of the match). Sends are
// eager (buffered): send copies the data into the pair's channel and returns at once, whether or not the
// receiver is waiting. recv blocks until the pair's channel has a message, then checks that the head
// message carries exactly the receiver's (count, dtype, tag, microbatch): otherwise it is an InvalidArgument
// error for the receiver naming both ranks, both triples and the recv (the message stays queued and the
// communicator is aborted, as for a collective mismatch). Tags are checked, never used to reorder. A
// recv that waits longer than the timeout fails with DeadlineExceeded naming the peer rank, the axis
// (when a mesh is known and the two ranks differ on one axis), the count, tag and microbatch, and aborts
// the communicator; an abort wakes blocked receivers with Aborted, and send/recv after an abort fail with
// Aborted at once.
#pragma once

#include "llcdist/runtime/Mesh.h"
#include "llcdist/runtime/Status.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace llcdist::rt {

enum class ReduceOp { kSum, kAvg, kMax };
// The element type of a collective: its reduction arithmetic and its message elements.
// kI32: the plan's integer buffers (the load-balancing loss's counts): moved by send / recv across
// pipeline stages, summed exactly by all_reduce (the plan sums them only: no avg, no max).
enum class CommDType { kF32, kF64, kBF16, kI32 };
constexpr int64_t commDTypeSize(CommDType t) { return t == CommDType::kF64 ? 8 : t == CommDType::kBF16 ? 2 : 4; }
constexpr const char* commDTypeName(CommDType t) {
  return t == CommDType::kF64 ? "f64" : t == CommDType::kBF16 ? "bf16" : t == CommDType::kI32 ? "i32" : "f32";
}

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int worldSize() const = 0;

  // `rank` is the caller's global rank; it must appear exactly once in `group`.
  virtual Status allReduce(int rank, const std::vector<int>& group, void* buf, int64_t count, CommDType dtype,
                           ReduceOp op) = 0;
  // outer, inner and count are in elements of `dtype`.
  virtual Status allGather(int rank, const std::vector<int>& group, const void* x, void* y, int64_t outer,
                           int64_t inner, CommDType dtype) = 0;
  virtual Status reduceScatter(int rank, const std::vector<int>& group, const void* x, void* y, int64_t outer,
                               int64_t inner, CommDType dtype, ReduceOp op) = 0;
  // Equal contiguous blocks of `count` elements of `dtype` (context parallelism's all_to_all): send and
  // recv hold n = |group| blocks; block m of send goes to member m and block m of recv comes from member
  // m (this member's own block is copied). send and recv must not overlap. Every communicator of the
  // runtime has it; the default (a communicator written before it) is an InvalidArgument error.
  virtual Status allToAll(int rank, const std::vector<int>& group, const void* send, void* recv, int64_t count,
                          CommDType dtype);
  // all_to_all_v (expert parallelism; PlanSchema.h kAllToAllVArgs): x [xRows, rowElems] and y [yRows,
  // rowElems] in elements of `dtype`; sendSplits and recvSplits [n·chunks] (n = |group|, host memory).
  // This member (me) sends to member i the chunks sendSplits[i·chunks + j] rows, taken consecutively
  // from row 0 of x in (i, j) order; recvSplits[i·chunks + j] = member i's sendSplits[me·chunks + j]; y
  // gets member 0's rows for me, then member 1's, ..., from row 0, and every row past Σ recvSplits is
  // zero. Errors (InvalidArgument, every member of the call gets one where the communicator sees all
  // splits): a negative split, Σ sendSplits > xRows, Σ recvSplits > yRows. x and y must not overlap;
  // every member passes the same chunks, rowElems and dtype (the request), xRows and yRows may differ.
  // Default: allToAllVByBlocks below (the splits by allToAll, then the rows in blocks padded to the
  // largest block of the call: an all_reduce max, then allToAll), for a communicator without its own.
  virtual Status allToAllV(int rank, const std::vector<int>& group, const void* x, int64_t xRows,
                           const int32_t* sendSplits, void* y, int64_t yRows, int32_t* recvSplits, int64_t chunks,
                           int64_t rowElems, CommDType dtype);

  // Point-to-point: `rank` is the caller, `peer` the other rank (in [0, worldSize), != rank); `count`
  // elements of `dtype`; `microbatch` is the calling action's microbatch (-1 when it has none). send
  // returns as soon as x is copied; recv fills y[count] from the matching send (see above).
  virtual Status send(int rank, int peer, const void* x, int64_t count, CommDType dtype, int64_t tag,
                      int64_t microbatch) = 0;
  virtual Status recv(int rank, int peer, void* y, int64_t count, CommDType dtype, int64_t tag, int64_t microbatch) = 0;
  // f32.
  Status send(int rank, int peer, const float* x, int64_t count, int64_t tag, int64_t microbatch) {
    return send(rank, peer, x, count, CommDType::kF32, tag, microbatch);
  }
  Status recv(int rank, int peer, float* y, int64_t count, int64_t tag, int64_t microbatch) {
    return recv(rank, peer, y, count, CommDType::kF32, tag, microbatch);
  }

  // Fails all pending and later collectives and receives (see above). Thread-safe; the first reason is kept.
  virtual void abort(const Status& reason) = 0;
  // The first abort's reason (a timeout's error included); ok when not aborted.
  virtual Status abortReason() const = 0;
};

struct InProcessCommunicatorOptions {
  int worldSize = 1;
  // Names the axis of a group in error messages ("axis dp", "axis dp+cp": Mesh::axisSetOfGroup); optional.
  std::optional<Mesh> mesh;
  // How long a member waits for the rest of its group (a receiver for its message) before the
  // DeadlineExceeded error.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

// Ranks are threads of one process that share this object. The last member to arrive at a collective
// computes it for the whole group (outside the lock) while the others wait. Point-to-point messages are
// copied into per-pair queues held by this object.
std::unique_ptr<Communicator> makeInProcessCommunicator(const InProcessCommunicatorOptions& options);

// all_to_all_v's parts, shared by the communicators and the backends (Backend.cpp):
// Checks this member's send splits (n·chunks of them, none negative, their sum <= xRows): an
// InvalidArgument error naming the rank, the split or the sum and xRows; *total gets the sum.
Status checkSendSplits(int rank, const int32_t* sendSplits, int64_t n, int64_t chunks, int64_t xRows, int64_t* total);
// The sum of the received splits against y's rows: "rank R receives T rows but y holds Ny: the plan's
// capacity is too small" (and a negative split, which a checked sender never sends).
Status checkRecvSplits(int rank, const int32_t* recvSplits, int64_t n, int64_t chunks, int64_t yRows, int64_t* total);
// Every member's splits checked alike on every member (the MPI and NCCL all_to_all_v gather them all
// first): member m's send splits at sends[m·n·chunks], its x's and y's rows at xRows[m], yRows[m]. Each
// sender's splits against its x in member order, then each receiver's sum against its y: the first wrong
// one's error, the same on every member, before any row moves. On success recvSplits (n·chunks) holds
// member `me`'s received splits: column `me` of every sender's.
Status checkEveryMembersSplits(const std::vector<int>& group, const int32_t* sends, const int64_t* xRows,
                               const int64_t* yRows, int64_t chunks, size_t me, int32_t* recvSplits);
// allToAllV on top of allToAll and allReduce (Communicator::allToAllV's default).
Status allToAllVByBlocks(Communicator& comm, int rank, const std::vector<int>& group, const void* x, int64_t xRows,
                         const int32_t* sendSplits, void* y, int64_t yRows, int32_t* recvSplits, int64_t chunks,
                         int64_t rowElems, CommDType dtype);
// A group of one member (host memory): recvSplits = sendSplits, y = x's rows then zeros, with both checks.
Status allToAllVSelf(int rank, const void* x, int64_t xRows, const int32_t* sendSplits, void* y, int64_t yRows,
                     int32_t* recvSplits, int64_t chunks, int64_t rowElems, CommDType dtype);

}  // namespace llcdist::rt
