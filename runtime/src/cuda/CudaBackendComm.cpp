// The CUDA backend's collectives (the class: CudaBackendImpl.h): channels, NCCL communicators and their
// bootstrap, all-reduce / all-gather / reduce-scatter and send / recv through NCCL (one group per
// microbatch's pending point-to-point ops), or staged through the host communicator without NCCL, and
// their handles' events.
#include "CudaBackendImpl.h"

namespace llcdist::rt::cuda {

StatusOr<Channel> CudaBackend::createChannel(const std::vector<int>& group) {
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

Status CudaBackend::connect() {
#if LLCDIST_HAVE_NCCL
  if (!nccl()) return Status::ok();
  LLCDIST_RETURN_IF_ERROR(device());
  std::vector<Group> mine;
  for (const Chan& c : channels_) mine.push_back(c.group);
  const int world = opts_.communicator->worldSize();
  LLCDIST_ASSIGN_OR_RETURN(NcclBootstrap boot,
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
    LLCDIST_NCCL_TRY(
        ncclCommSplit(world_, call.color < 0 ? NCCL_SPLIT_NOCOLOR : call.color, call.key, &split[round], nullptr),
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

StatusOr<CollectiveHandle> CudaBackend::allReduceAsync(Stream s, void* buffer, int64_t count, CommDType dtype,
                                                       ReduceOp op, Channel ch) {
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

StatusOr<CollectiveHandle> CudaBackend::allGatherAsync(Stream s, const void* in, void* out, int64_t outer,
                                                       int64_t inner, int64_t total, CommDType dtype, Channel ch) {
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

StatusOr<CollectiveHandle> CudaBackend::reduceScatterAsync(Stream s, const void* in, void* out, int64_t outer,
                                                           int64_t inner, int64_t total, CommDType dtype, ReduceOp op,
                                                           Channel ch) {
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
    LLCDIST_NCCL_TRY(ncclReduceScatter(blocks, out, size_t(outer * inner), ncclType(dtype), ncclOp(op), c->comm, st),
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
  LLCDIST_RETURN_IF_ERROR(opts_.communicator->reduceScatter(opts_.rank, c->group, hin, hout, outer, inner, dtype, op));
  LLCDIST_RETURN_IF_ERROR(toDevice(st, out, hout, outer * inner * eb));
  return done(Status::ok());
}

// all_to_all: x's blocks packed contiguously with one cudaMemcpy2DAsync per member (none when x already
// is the blocks), one NCCL group of a send and a receive per member on the channel's communicator
// (member index = NCCL rank: the split's key), the received blocks unpacked into y the same way; without
// NCCL staged through the host communicator, packed and unpacked on the host as the CPU backend does.
StatusOr<CollectiveHandle> CudaBackend::allToAllAsync(Stream s, const void* x, void* y, int64_t outer, int64_t mid,
                                                      int64_t inner, int xRankDim, CommDType dtype, Channel ch) {
  LLCDIST_ASSIGN_OR_RETURN(cudaStream_t st, enter(s));
  LLCDIST_ASSIGN_OR_RETURN(Chan * c, channel(ch));
  if (xRankDim != 1 && xRankDim != 2)
    return Status::invalidArgument("cuda backend: all-to-all x_rank_dim " + std::to_string(xRankDim) +
                                   " (expected 1 or 2)");
  const int yRankDim = 3 - xRankDim;
  const int64_t n = int64_t(c->group.size()), eb = elemBytes(dtype), block = outer * mid * inner;
  const int64_t bytes = n * block * eb;
  if (bytes == 0) return done(Status::ok());
  if (n == 1) {  // one member: both layouts are [outer, mid, inner]
    LLCDIST_CUDA_TRY(cudaMemcpyAsync(y, x, size_t(bytes), cudaMemcpyDeviceToDevice, st), opts_.rank);
    return done(Status::ok());
  }
#if LLCDIST_HAVE_NCCL
  if (nccl()) {
    auto copy2d = [&](const std::vector<StridedCopy>& copies, const void* src, void* dst) -> Status {
      for (const StridedCopy& k : copies)
        LLCDIST_CUDA_TRY(cudaMemcpy2DAsync(static_cast<std::byte*>(dst) + k.dstOffset, size_t(k.dstPitch),
                                           static_cast<const std::byte*>(src) + k.srcOffset, size_t(k.srcPitch),
                                           size_t(k.width), size_t(k.rows), cudaMemcpyDeviceToDevice, st),
                         opts_.rank);
      return Status::ok();
    };
    const bool xBlocks = allToAllIsBlocks(outer, mid, xRankDim), yBlocks = allToAllIsBlocks(outer, mid, yRankDim);
    std::byte* area = nullptr;
    if (!xBlocks || !yBlocks) {
      LLCDIST_ASSIGN_OR_RETURN(void* scratch, scratch_[size_t(s.id)]->get(2 * bytes));
      area = static_cast<std::byte*>(scratch);
    }
    const std::byte* send = xBlocks ? static_cast<const std::byte*>(x) : area;
    std::byte* recv = yBlocks ? static_cast<std::byte*>(y) : area + bytes;
    if (!xBlocks) LLCDIST_RETURN_IF_ERROR(copy2d(allToAllCopies(n, outer, mid, inner, xRankDim, eb, true), x, area));
    LLCDIST_NCCL_TRY(ncclGroupStart(), opts_.rank);
    for (int64_t j = 0; j < n; ++j) {
      LLCDIST_NCCL_GROUP_TRY(ncclSend(send + j * block * eb, size_t(block), ncclType(dtype), int(j), c->comm, st),
                             opts_.rank);
      LLCDIST_NCCL_GROUP_TRY(ncclRecv(recv + j * block * eb, size_t(block), ncclType(dtype), int(j), c->comm, st),
                             opts_.rank);
    }
    LLCDIST_NCCL_TRY(ncclGroupEnd(), opts_.rank);
    if (!yBlocks) LLCDIST_RETURN_IF_ERROR(copy2d(allToAllCopies(n, outer, mid, inner, yRankDim, eb, false), recv, y));
    return recordHandle(st);
  }
#endif
  // Staged: x to the host as it is, packed into the second buffer, exchanged back into the first,
  // unpacked into the second, which goes to y.
  LLCDIST_ASSIGN_OR_RETURN(void* h0, hostBuffer(0, bytes));
  LLCDIST_ASSIGN_OR_RETURN(void* h1, hostBuffer(1, bytes));
  LLCDIST_RETURN_IF_ERROR(toHost(st, h0, x, bytes));
  runStridedCopies(allToAllCopies(n, outer, mid, inner, xRankDim, eb, true), h0, h1);
  LLCDIST_RETURN_IF_ERROR(opts_.communicator->allToAll(opts_.rank, c->group, h1, h0, block, dtype));
  runStridedCopies(allToAllCopies(n, outer, mid, inner, yRankDim, eb, false), h0, h1);
  LLCDIST_RETURN_IF_ERROR(toDevice(st, y, h1, bytes));
  return done(Status::ok());
}

// all_to_all_v (expert parallelism). The row counts live on the device (the router computed them), and
// NCCL's send / recv take host counts: every member's x and y rows and send splits are gathered to every
// member by one NCCL all-gather, copied to a pinned host buffer with ONE stream synchronization (the op's
// only host sync: every later call of the step queues behind it as usual) and checked alike on every
// member (agreeOnSplits: negative, Σ send > Nx, Σ recv > Ny; the first wrong member's error on all of
// them, before any row moves), and the rows go in a NCCL group of a send and a receive per member (sizes
// from the host splits; empty ones skipped), the tail of y zeroed with cudaMemsetAsync. A group of one
// copies on the device; without NCCL the whole call is staged through the host communicator
// (Communicator::allToAllV).
StatusOr<CollectiveHandle> CudaBackend::allToAllVAsync(Stream s, const void* x, int64_t xRows,
                                                       const int32_t* sendSplits, void* y, int64_t yRows,
                                                       int32_t* recvSplits, int64_t chunks, int64_t rowElems,
                                                       CommDType dtype, Channel ch) {
  LLCDIST_ASSIGN_OR_RETURN(cudaStream_t st, enter(s));
  LLCDIST_ASSIGN_OR_RETURN(Chan * c, channel(ch));
  // The host reads the splits: a step with all_to_all_v is not captured into a device graph (the refused
  // capture leaves the recorded step replayed call by call, Interpreter::recordStep).
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  LLCDIST_CUDA_TRY(cudaStreamIsCapturing(st, &capturing), opts_.rank);
  if (capturing != cudaStreamCaptureStatusNone)
    return Status::invalidArgument("all_to_all_v reads its splits on the host (one stream synchronization per "
                                   "call), which a device graph cannot capture");
  const int64_t n = int64_t(c->group.size()), rowBytes = rowElems * elemBytes(dtype);
  const int64_t splitBytes = n * chunks * int64_t(sizeof(int32_t));
  const bool staged = n > 1 && !(LLCDIST_HAVE_NCCL && nccl());
  if (!staged) {
    int32_t *hostSend = nullptr, *hostRecv = nullptr;
    if (n == 1) {
      // The host copy of [send splits | received splits].
      LLCDIST_ASSIGN_OR_RETURN(void* hs, hostBuffer(2, 2 * splitBytes));
      hostSend = static_cast<int32_t*>(hs);
      hostRecv = hostSend + chunks;
      LLCDIST_CUDA_TRY(cudaMemcpyAsync(recvSplits, sendSplits, size_t(splitBytes), cudaMemcpyDeviceToDevice, st),
                       opts_.rank);
      LLCDIST_CUDA_TRY(cudaMemcpyAsync(hostSend, sendSplits, size_t(splitBytes), cudaMemcpyDeviceToHost, st),
                       opts_.rank);
      LLCDIST_CUDA_TRY(cudaStreamSynchronize(st), opts_.rank);
      // The check every group size shares: sends, then this member's column (= its sends) into hostRecv.
      LLCDIST_RETURN_IF_ERROR(checkEveryMembersSplits({opts_.rank}, hostSend, &xRows, &yRows, chunks, 0, hostRecv));
    }
#if LLCDIST_HAVE_NCCL
    else {
      LLCDIST_RETURN_IF_ERROR(
          agreeOnSplits(c, s, st, sendSplits, recvSplits, xRows, yRows, chunks, &hostSend, &hostRecv));
    }
#endif
    int64_t received = 0;
    for (int64_t k = 0; k < n * chunks; ++k) received += hostRecv[k];
    auto* out = static_cast<std::byte*>(y);
    const auto* in = static_cast<const std::byte*>(x);
    if (n == 1) {
      if (received > 0)
        LLCDIST_CUDA_TRY(cudaMemcpyAsync(out, in, size_t(received * rowBytes), cudaMemcpyDeviceToDevice, st),
                         opts_.rank);
    }
#if LLCDIST_HAVE_NCCL
    else {
      // Elements of the row blocks as NCCL counts them (bf16 / f32 / f64 rows move as they are).
      LLCDIST_NCCL_TRY(ncclGroupStart(), opts_.rank);
      int64_t sendAt = 0, recvAt = 0;
      for (int64_t j = 0; j < n; ++j) {
        int64_t sendRows = 0, recvRows = 0;
        for (int64_t k = 0; k < chunks; ++k) sendRows += hostSend[j * chunks + k], recvRows += hostRecv[j * chunks + k];
        const size_t sendCount = size_t(sendRows * rowElems), recvCount = size_t(recvRows * rowElems);
        if (sendRows > 0)
          LLCDIST_NCCL_GROUP_TRY(ncclSend(in + sendAt * rowBytes, sendCount, ncclType(dtype), int(j), c->comm, st),
                                 opts_.rank);
        if (recvRows > 0)
          LLCDIST_NCCL_GROUP_TRY(ncclRecv(out + recvAt * rowBytes, recvCount, ncclType(dtype), int(j), c->comm, st),
                                 opts_.rank);
        sendAt += sendRows;
        recvAt += recvRows;
      }
      LLCDIST_NCCL_TRY(ncclGroupEnd(), opts_.rank);
    }
#endif
    if (yRows > received)
      LLCDIST_CUDA_TRY(cudaMemsetAsync(out + received * rowBytes, 0, size_t((yRows - received) * rowBytes), st),
                       opts_.rank);
    if (n == 1) return done(Status::ok());
    return recordHandle(st);
  }
  // Staged: x and the send splits to the host, the host communicator's all_to_all_v, y and the received
  // splits back.
  LLCDIST_ASSIGN_OR_RETURN(void* hs, hostBuffer(2, 2 * splitBytes));
  int32_t* hostSend = static_cast<int32_t*>(hs);
  int32_t* hostRecv = hostSend + n * chunks;
  LLCDIST_ASSIGN_OR_RETURN(void* hx, hostBuffer(0, xRows * rowBytes));
  LLCDIST_ASSIGN_OR_RETURN(void* hy, hostBuffer(1, yRows * rowBytes));
  LLCDIST_RETURN_IF_ERROR(toHost(st, hostSend, sendSplits, splitBytes));
  LLCDIST_RETURN_IF_ERROR(toHost(st, hx, x, xRows * rowBytes));
  LLCDIST_RETURN_IF_ERROR(opts_.communicator->allToAllV(opts_.rank, c->group, hx, xRows, hostSend, hy, yRows, hostRecv,
                                                        chunks, rowElems, dtype));
  LLCDIST_RETURN_IF_ERROR(toDevice(st, y, hy, yRows * rowBytes));
  LLCDIST_RETURN_IF_ERROR(toDevice(st, recvSplits, hostRecv, splitBytes));
  return done(Status::ok());
}

#if LLCDIST_HAVE_NCCL
Status CudaBackend::agreeOnSplits(Chan* c, Stream s, cudaStream_t st, const int32_t* sendSplits, int32_t* recvSplits,
                                  int64_t xRows, int64_t yRows, int64_t chunks, int32_t** hostSend,
                                  int32_t** hostRecv) {
  const int64_t n = int64_t(c->group.size()), me = c->member;
  // One member's record in i32 words: its x's and y's rows (two i64), then its n·chunks send splits.
  const int64_t record = 4 + n * chunks, splitBytes = n * chunks * int64_t(sizeof(int32_t));
  const int64_t tableBytes = n * record * int64_t(sizeof(int32_t));
  // Pinned host: [this member's rows (4 words) | every member's record | this member's received splits].
  LLCDIST_ASSIGN_OR_RETURN(void* hs, hostBuffer(2, 4 * int64_t(sizeof(int32_t)) + tableBytes + splitBytes));
  int32_t* hostRows = static_cast<int32_t*>(hs);
  int32_t* hostTable = hostRows + 4;
  *hostRecv = hostTable + n * record;
  *hostSend = hostTable + me * record + 4;
  const int64_t rows[2] = {xRows, yRows};
  std::memcpy(hostRows, rows, sizeof rows);
  LLCDIST_ASSIGN_OR_RETURN(void* dev, scratch_[size_t(s.id)]->get(tableBytes));
  int32_t* table = static_cast<int32_t*>(dev);
  int32_t* mine = table + me * record;
  LLCDIST_CUDA_TRY(cudaMemcpyAsync(mine, hostRows, sizeof rows, cudaMemcpyHostToDevice, st), opts_.rank);
  LLCDIST_CUDA_TRY(cudaMemcpyAsync(mine + 4, sendSplits, size_t(splitBytes), cudaMemcpyDeviceToDevice, st), opts_.rank);
  LLCDIST_NCCL_TRY(ncclAllGather(mine, table, size_t(record), ncclInt32, c->comm, st), opts_.rank);  // in place
  LLCDIST_CUDA_TRY(cudaMemcpyAsync(hostTable, table, size_t(tableBytes), cudaMemcpyDeviceToHost, st), opts_.rank);
  LLCDIST_RETURN_IF_ERROR(pollNccl(st, c->comm, "all_to_all_v's split exchange"));
  LLCDIST_CUDA_TRY(cudaStreamSynchronize(st), opts_.rank);
  std::vector<int32_t> sends(size_t(n * n * chunks));
  std::vector<int64_t> xRowsOf(static_cast<size_t>(n)), yRowsOf(static_cast<size_t>(n));
  for (int64_t m = 0; m < n; ++m) {
    const int32_t* r = hostTable + m * record;
    std::memcpy(&xRowsOf[size_t(m)], r, sizeof(int64_t));
    std::memcpy(&yRowsOf[size_t(m)], r + 2, sizeof(int64_t));
    std::memcpy(sends.data() + m * n * chunks, r + 4, size_t(splitBytes));
  }
  LLCDIST_RETURN_IF_ERROR(
      checkEveryMembersSplits(c->group, sends.data(), xRowsOf.data(), yRowsOf.data(), chunks, size_t(me), *hostRecv));
  // This member's received splits on the device: column `me` of every member's send splits.
  const size_t width = size_t(chunks) * sizeof(int32_t);
  LLCDIST_CUDA_TRY(cudaMemcpy2DAsync(recvSplits, width, table + 4 + me * chunks, size_t(record) * sizeof(int32_t),
                                     width, size_t(n), cudaMemcpyDeviceToDevice, st),
                   opts_.rank);
  return Status::ok();
}

Status CudaBackend::abortOnTimeout(const std::string& what) {
  for (Chan& c : channels_)
    if (c.comm) ncclCommAbort(c.comm), c.comm = nullptr;
  if (world_) ncclCommAbort(world_), world_ = nullptr;
  return Status::deadlineExceeded("rank " + std::to_string(opts_.rank) + ": " + what + " did not finish within " +
                                  std::to_string(opts_.timeoutSeconds) +
                                  " s (a peer is not making the matching call); the communicators were aborted");
}

Status CudaBackend::pollNccl(cudaStream_t st, ncclComm_t comm, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opts_.timeoutSeconds);
  for (cudaError_t e = cudaStreamQuery(st); e != cudaSuccess; e = cudaStreamQuery(st)) {
    if (e != cudaErrorNotReady) LLCDIST_CUDA_TRY(e, opts_.rank);
    LLCDIST_RETURN_IF_ERROR(asyncError(comm));
    if (std::chrono::steady_clock::now() > deadline) return abortOnTimeout(what);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return Status::ok();
}
#endif

StatusOr<CollectiveHandle> CudaBackend::sendAsync(Stream s, const void* x, int64_t count, CommDType dtype, int peer,
                                                  int64_t tag, int64_t microbatch) {
  return p2p(true, s, const_cast<void*>(x), count, dtype, peer, tag, microbatch);
}

StatusOr<CollectiveHandle> CudaBackend::recvAsync(Stream s, void* y, int64_t count, CommDType dtype, int peer,
                                                  int64_t tag, int64_t microbatch) {
  return p2p(false, s, y, count, dtype, peer, tag, microbatch);
}

Status CudaBackend::waitCollective(Stream s, CollectiveHandle h) {
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

bool CudaBackend::collectiveDone(CollectiveHandle h) {
  if (!flushP2p().isOk()) return true;  // the error is the wait's
  auto it = handles_.find(h.id);
  if (it == handles_.end() || !it->second.event) return true;
  return cudaEventQuery(it->second.event) != cudaErrorNotReady;
}

StatusOr<CudaBackend::Chan*> CudaBackend::channel(Channel ch) {
  if (ch.id < 0 || ch.id >= int(channels_.size()))
    return Status::invalidArgument("cuda backend: unknown channel " + std::to_string(ch.id));
  return &channels_[size_t(ch.id)];
}

CollectiveHandle CudaBackend::done(Status st) {
  const int64_t id = nextHandle_++;
  handles_[id] = Handle{nullptr, std::move(st)};
  return CollectiveHandle{id};
}

StatusOr<cudaEvent_t> CudaBackend::handleEvent() {
  cudaEvent_t e = nullptr;
  if (!freeEvents_.empty()) {
    e = freeEvents_.back();
    freeEvents_.pop_back();
  } else {
    LLCDIST_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), opts_.rank);
  }
  return e;
}

StatusOr<CollectiveHandle> CudaBackend::recordHandle(cudaStream_t st) {
  LLCDIST_ASSIGN_OR_RETURN(cudaEvent_t e, handleEvent());
  if (const cudaError_t r = cudaEventRecord(e, st); r != cudaSuccess) {
    freeEvents_.push_back(e);
    return cudaError(r, "cudaEventRecord(e, st)", __FILE__, __LINE__, opts_.rank);
  }
  const int64_t id = nextHandle_++;
  handles_[id] = Handle{e, Status::ok()};
  return CollectiveHandle{id};
}

StatusOr<CollectiveHandle> CudaBackend::p2p(bool send, Stream s, void* ptr, int64_t count, CommDType dtype, int peer,
                                            int64_t tag, int64_t microbatch) {
  LLCDIST_RETURN_IF_ERROR(device());
  if (s.id < 0 || s.id >= int(streams_.size()))
    return Status::invalidArgument("cuda backend: unknown stream " + std::to_string(s.id));
  if (!opts_.communicator)
    return Status::invalidArgument(std::string("cuda backend: ") + (send ? "send" : "recv") +
                                   " without a communicator");
  if (nccl()) {
    // Grouped with the point-to-point calls right before and after it on the same stream.
    if (!pending_.empty() && pendingStream_ != s.id) LLCDIST_RETURN_IF_ERROR(flushP2p());
    pendingStream_ = s.id;
    const int64_t id = nextHandle_++;
    handles_[id] = Handle{};  // its event is set when the group is issued
    pending_.push_back(PendingP2p{send, ptr, count, dtype, peer, id});
    return CollectiveHandle{id};
  }
  cudaStream_t st = streams_[size_t(s.id)];
  LLCDIST_RETURN_IF_ERROR(flushP2p());
  const int64_t bytes = count * commDTypeSize(dtype);
  LLCDIST_ASSIGN_OR_RETURN(void* h, hostBuffer(0, bytes));
  if (send) {
    LLCDIST_RETURN_IF_ERROR(toHost(st, h, ptr, bytes));
    return done(opts_.communicator->send(opts_.rank, peer, h, count, dtype, tag, microbatch));
  }
  const Status got = opts_.communicator->recv(opts_.rank, peer, h, count, dtype, tag, microbatch);
  if (got.isOk()) LLCDIST_RETURN_IF_ERROR(toDevice(st, ptr, h, bytes));
  return done(got);
}

Status CudaBackend::flushP2p() {
  if (pending_.empty()) return Status::ok();
#if LLCDIST_HAVE_NCCL
  std::vector<PendingP2p> calls;
  calls.swap(pending_);
  cudaStream_t st = streams_[size_t(pendingStream_)];
  LLCDIST_NCCL_TRY(ncclGroupStart(), opts_.rank);
  for (const PendingP2p& p : calls) {
    const ncclResult_t r = p.send ? ncclSend(p.ptr, size_t(p.count), ncclType(p.dtype), p.peer, world_, st)
                                  : ncclRecv(p.ptr, size_t(p.count), ncclType(p.dtype), p.peer, world_, st);
    if (r != ncclSuccess) {
      ncclGroupEnd();
      return ncclError(r, p.send ? "ncclSend" : "ncclRecv", __FILE__, __LINE__, opts_.rank);
    }
  }
  LLCDIST_NCCL_TRY(ncclGroupEnd(), opts_.rank);
  // Every handle of the group gets an event recorded after it, taken from those the waits have
  // released (waitCollective), so a pipeline's sends and receives do not create events step after step.
  for (const PendingP2p& p : calls) {
    LLCDIST_ASSIGN_OR_RETURN(cudaEvent_t e, handleEvent());
    handles_[p.handle].event = e;  // owned by the handle from here (destroyed with it if never waited)
    LLCDIST_CUDA_TRY(cudaEventRecord(e, st), opts_.rank);
  }
  return Status::ok();
#else
  return Status::internal("grouped point-to-point calls without NCCL");
#endif
}

Status CudaBackend::waitForNccl() {
#if LLCDIST_HAVE_NCCL
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opts_.timeoutSeconds);
  for (;;) {
    bool idle = true;
    for (cudaStream_t s : streams_) {
      const cudaError_t e = cudaStreamQuery(s);
      if (e == cudaErrorNotReady)
        idle = false;
      else
        LLCDIST_CUDA_TRY(e, opts_.rank);
    }
    if (idle) return Status::ok();
    for (Chan& c : channels_) LLCDIST_RETURN_IF_ERROR(asyncError(c.comm));
    LLCDIST_RETURN_IF_ERROR(asyncError(world_));
    if (std::chrono::steady_clock::now() > deadline) return abortOnTimeout("NCCL work");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
#else
  return Status::ok();
#endif
}

#if LLCDIST_HAVE_NCCL
Status CudaBackend::asyncError(ncclComm_t comm) {
  if (!comm) return Status::ok();
  ncclResult_t r = ncclSuccess;
  LLCDIST_NCCL_TRY(ncclCommGetAsyncError(comm, &r), opts_.rank);
  if (r != ncclSuccess && r != ncclInProgress)
    return ncclError(r, "NCCL asynchronous error", __FILE__, __LINE__, opts_.rank);
  return Status::ok();
}
#endif

}  // namespace llcdist::rt::cuda
