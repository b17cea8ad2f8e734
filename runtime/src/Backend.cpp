// The Backend interface's defaults (Backend.h): one f32 kernel per kind, host-clock time marks, no
// device graphs.
#include "llcdist/runtime/Backend.h"

#include "llcdist/runtime/Timeline.h"

#include <algorithm>
#include <cstring>

namespace llcdist::rt {

std::vector<const KernelVariantInfo*> Backend::kernelVariants(schema::OpKind kind) const {
  if (!hasKernel(kind)) return {};
  return {&f32KernelVariant()};
}

StatusOr<int64_t> Backend::markTime(Stream stream) {
  (void)stream;
  hostMarks_.push_back(Timeline::nowNs());
  return int64_t(hostMarks_.size()) - 1;
}

StatusOr<int64_t> Backend::markTimeNs(int64_t mark) {
  if (mark < 0 || mark >= int64_t(hostMarks_.size()))
    return Status::outOfRange("time mark " + std::to_string(mark) + " was not made (or was cleared)");
  return hostMarks_[size_t(mark)];
}

Status Communicator::allToAll(int rank, const std::vector<int>& group, const void*, void*, int64_t, CommDType) {
  (void)group;
  return Status::invalidArgument("rank " + std::to_string(rank) + ": this communicator has no all_to_all");
}

StatusOr<CollectiveHandle> Backend::allToAllAsync(Stream, const void*, void*, int64_t, int64_t, int64_t, int, CommDType,
                                                  Channel) {
  return Status::invalidArgument("the " + name() + " backend has no all_to_all");
}

StatusOr<CollectiveHandle> Backend::allToAllVAsync(Stream, const void*, int64_t, const int32_t*, void*, int64_t,
                                                   int32_t*, int64_t, int64_t, CommDType, Channel) {
  return Status::invalidArgument("the " + name() + " backend has no all_to_all_v");
}

Status checkSendSplits(int rank, const int32_t* sendSplits, int64_t n, int64_t chunks, int64_t xRows, int64_t* total) {
  int64_t sum = 0;
  for (int64_t k = 0; k < n * chunks; ++k) {
    if (sendSplits[k] < 0)
      return Status::invalidArgument("all_to_all_v on rank " + std::to_string(rank) + ": send_splits[" +
                                     std::to_string(k) + "] (member " + std::to_string(k / chunks) + ", chunk " +
                                     std::to_string(k % chunks) + ") is negative: " + std::to_string(sendSplits[k]));
    sum += sendSplits[k];
  }
  if (sum > xRows)
    return Status::invalidArgument("all_to_all_v on rank " + std::to_string(rank) + ": the send splits sum to " +
                                   std::to_string(sum) + " rows but x holds " + std::to_string(xRows));
  *total = sum;
  return Status::ok();
}

Status checkRecvSplits(int rank, const int32_t* recvSplits, int64_t n, int64_t chunks, int64_t yRows, int64_t* total) {
  int64_t sum = 0;
  for (int64_t k = 0; k < n * chunks; ++k) {
    if (recvSplits[k] < 0)
      return Status::invalidArgument("all_to_all_v on rank " + std::to_string(rank) + ": received split " +
                                     std::to_string(k) + " is negative: " + std::to_string(recvSplits[k]));
    sum += recvSplits[k];
  }
  if (sum > yRows)
    return Status::invalidArgument("all_to_all_v on rank " + std::to_string(rank) + " receives " + std::to_string(sum) +
                                   " rows but y holds " + std::to_string(yRows) + ": the plan's capacity is too small");
  *total = sum;
  return Status::ok();
}

Status checkEveryMembersSplits(const std::vector<int>& group, const int32_t* sends, const int64_t* xRows,
                               const int64_t* yRows, int64_t chunks, size_t me, int32_t* recvSplits) {
  const size_t n = group.size(), c = size_t(chunks);
  int64_t total = 0;
  for (size_t m = 0; m < n; ++m)
    LLCDIST_RETURN_IF_ERROR(checkSendSplits(group[m], sends + m * n * c, int64_t(n), chunks, xRows[m], &total));
  std::vector<int32_t> theirs(n * c), mine;
  for (size_t m = 0; m < n; ++m) {  // member m receives column m of every sender's splits
    for (size_t i = 0; i < n; ++i) std::memcpy(theirs.data() + i * c, sends + i * n * c + m * c, c * sizeof(int32_t));
    LLCDIST_RETURN_IF_ERROR(checkRecvSplits(group[m], theirs.data(), int64_t(n), chunks, yRows[m], &total));
    if (m == me) mine = theirs;
  }
  std::memcpy(recvSplits, mine.data(), mine.size() * sizeof(int32_t));
  return Status::ok();
}

Status Communicator::allToAllV(int rank, const std::vector<int>& group, const void* x, int64_t xRows,
                               const int32_t* sendSplits, void* y, int64_t yRows, int32_t* recvSplits, int64_t chunks,
                               int64_t rowElems, CommDType dtype) {
  return allToAllVByBlocks(*this, rank, group, x, xRows, sendSplits, y, yRows, recvSplits, chunks, rowElems, dtype);
}

// The splits by allToAll (i32 moves as 4-byte f32 elements: a copy), then one f64 all-reduce max of
// the call's largest block and of which member's splits are wrong, then every block padded to it by
// allToAll, unpacked into y. The checks' verdicts travel with the block size, so a wrong split fails
// every member at once (its own error on the member whose splits they are, the same first one named on
// the others), before any row moves: a member failing alone would leave the others waiting out the
// timeout. Send splits are checked before receive capacities, each in member order, as in process.
Status allToAllVByBlocks(Communicator& comm, int rank, const std::vector<int>& group, const void* x, int64_t xRows,
                         const int32_t* sendSplits, void* y, int64_t yRows, int32_t* recvSplits, int64_t chunks,
                         int64_t rowElems, CommDType dtype) {
  const int64_t n = int64_t(group.size()), rowBytes = rowElems * commDTypeSize(dtype);
  const int64_t me = int64_t(std::find(group.begin(), group.end(), rank) - group.begin());
  int64_t sent = 0, received = 0;
  Status sendOk = checkSendSplits(rank, sendSplits, n, chunks, xRows, &sent);
  LLCDIST_RETURN_IF_ERROR(comm.allToAll(rank, group, sendSplits, recvSplits, chunks, CommDType::kF32));
  Status recvOk = checkRecvSplits(rank, recvSplits, n, chunks, yRows, &received);
  std::vector<int64_t> sendRows(size_t(n), 0), recvRows(size_t(n), 0);
  // {the largest block, the first wrong member's verdict}: a member's wrong send splits count 2n − m,
  // its too small y n − m (0: none), so the max is the first of the kind checked first.
  double agreed[2] = {0, !sendOk.isOk() ? double(2 * n - me) : !recvOk.isOk() ? double(n - me) : 0};
  for (int64_t i = 0; i < n && agreed[1] == 0; ++i) {
    for (int64_t j = 0; j < chunks; ++j) {
      sendRows[size_t(i)] += sendSplits[i * chunks + j];
      recvRows[size_t(i)] += recvSplits[i * chunks + j];
    }
    agreed[0] = std::max(agreed[0], double(sendRows[size_t(i)]));
  }
  LLCDIST_RETURN_IF_ERROR(comm.allReduce(rank, group, agreed, 2, CommDType::kF64, ReduceOp::kMax));
  if (const int64_t verdict = int64_t(agreed[1]); verdict > 0) {
    const bool sends = verdict > n;
    const int64_t m = sends ? 2 * n - verdict : n - verdict;
    if (m == me) return sends ? sendOk : recvOk;
    return Status::invalidArgument("all_to_all_v on rank " + std::to_string(rank) + ": rank " +
                                   std::to_string(group[size_t(m)]) + "'s " +
                                   (sends ? "send splits are wrong" : "y is too small for what it receives") +
                                   " (its error says how); no rows moved");
  }
  const double largest = agreed[0];
  const int64_t block = int64_t(largest) * rowBytes;
  std::vector<std::byte> send(size_t(n * block)), recv(size_t(n * block));
  const auto* in = static_cast<const std::byte*>(x);
  for (int64_t i = 0, at = 0; i < n; at += sendRows[size_t(i)] * rowBytes, ++i)
    if (sendRows[size_t(i)] > 0) std::memcpy(send.data() + i * block, in + at, size_t(sendRows[size_t(i)] * rowBytes));
  if (block > 0)
    LLCDIST_RETURN_IF_ERROR(comm.allToAll(rank, group, send.data(), recv.data(), int64_t(largest) * rowElems, dtype));
  auto* out = static_cast<std::byte*>(y);
  int64_t at = 0;
  for (int64_t i = 0; i < n; at += recvRows[size_t(i)] * rowBytes, ++i)
    if (recvRows[size_t(i)] > 0) std::memcpy(out + at, recv.data() + i * block, size_t(recvRows[size_t(i)] * rowBytes));
  if (yRows > received) std::memset(out + received * rowBytes, 0, size_t((yRows - received) * rowBytes));
  return Status::ok();
}

Status allToAllVSelf(int rank, const void* x, int64_t xRows, const int32_t* sendSplits, void* y, int64_t yRows,
                     int32_t* recvSplits, int64_t chunks, int64_t rowElems, CommDType dtype) {
  int64_t sent = 0, received = 0;
  LLCDIST_RETURN_IF_ERROR(checkSendSplits(rank, sendSplits, 1, chunks, xRows, &sent));
  if (recvSplits != sendSplits) std::memmove(recvSplits, sendSplits, size_t(chunks) * sizeof(int32_t));
  LLCDIST_RETURN_IF_ERROR(checkRecvSplits(rank, recvSplits, 1, chunks, yRows, &received));
  const int64_t rowBytes = rowElems * commDTypeSize(dtype);
  if (received > 0) std::memmove(y, x, size_t(received * rowBytes));
  if (yRows > received)
    std::memset(static_cast<std::byte*>(y) + received * rowBytes, 0, size_t((yRows - received) * rowBytes));
  return Status::ok();
}

std::vector<StridedCopy> allToAllCopies(int64_t n, int64_t outer, int64_t mid, int64_t inner, int rankDim,
                                        int64_t elemBytes, bool pack) {
  const int64_t blockBytes = outer * mid * inner * elemBytes;
  std::vector<StridedCopy> copies;
  for (int64_t j = 0; j < n; ++j) {
    StridedCopy c;
    int64_t tensorOffset = 0, tensorPitch = 0;
    if (rankDim == 2) {  // [outer, mid, n, inner]: a row per (o, m) of inner elements
      c.rows = outer * mid;
      c.width = inner * elemBytes;
      tensorOffset = j * inner * elemBytes;
      tensorPitch = n * inner * elemBytes;
    } else {  // [outer, n, mid, inner]: a row per o of mid·inner elements
      c.rows = outer;
      c.width = mid * inner * elemBytes;
      tensorOffset = j * mid * inner * elemBytes;
      tensorPitch = n * mid * inner * elemBytes;
    }
    const int64_t blockOffset = j * blockBytes, blockPitch = c.width;
    c.srcOffset = pack ? tensorOffset : blockOffset;
    c.srcPitch = pack ? tensorPitch : blockPitch;
    c.dstOffset = pack ? blockOffset : tensorOffset;
    c.dstPitch = pack ? blockPitch : tensorPitch;
    copies.push_back(c);
  }
  return copies;
}

void runStridedCopies(const std::vector<StridedCopy>& copies, const void* src, void* dst) {
  const auto* in = static_cast<const std::byte*>(src);
  auto* out = static_cast<std::byte*>(dst);
  for (const StridedCopy& c : copies)
    for (int64_t r = 0; r < c.rows && c.width > 0; ++r)
      std::memcpy(out + c.dstOffset + r * c.dstPitch, in + c.srcOffset + r * c.srcPitch, size_t(c.width));
}

bool Backend::canCaptureGraph(std::string* why) const {
  if (why) *why = "the " + name() + " backend has no device graphs";
  return false;
}

Status Backend::beginGraphCapture() {
  return Status::invalidArgument("the " + name() + " backend cannot capture a device graph");
}

StatusOr<int> Backend::endGraphCapture() {
  return Status::invalidArgument("the " + name() + " backend cannot capture a device graph");
}

Status Backend::launchGraph(int graph) {
  return Status::invalidArgument("the " + name() + " backend has no device graph " + std::to_string(graph));
}

}  // namespace llcdist::rt
