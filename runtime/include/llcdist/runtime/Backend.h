// The execution backend: device memory (one arena per program), streams and events, kernel launches
// and collectives. The interpreter (Interpreter.h) is written against this interface only, so a CUDA
// backend is a new implementation of it; the CPU backend (makeCpuBackend) is the reference and the
// test oracle.
//
// Ordering model (CUDA's): work launched on one stream runs in launch order; recordEvent(s, e) marks
// the point after everything launched on s so far, and waitEvent(s, e) makes later work on s wait for
// it. synchronize() blocks the host until all launched work is done. Errors of asynchronous work may be
// reported by a later call on the same stream or by synchronize(). The CPU backend executes every
// launch and copy synchronously on the calling thread, so its events are complete when recorded; it
// keeps the interface so that plans and the interpreter never assume synchronous execution.
//
// Collectives are asynchronous: a call enqueues the operation on a stream and returns a handle, and
// waitCollective(s, h) makes later work on stream s wait for its completion (the result buffer must
// not be read before that). Groups are lists of global ranks in member order (Mesh::group); a rank's
// backend takes part only in groups that contain its rank. Semantics and determinism are the
// Communicator's (Communicator.h). Point-to-point sends and receives (pipeline plans) are asynchronous
// the same way and are waited for with waitCollective; a send's source may be overwritten once the
// wait returns (sends are eager: Communicator.h), a receive's destination read after it.
#pragma once

#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/Kernels.h"
#include "llcdist/runtime/PlanSchema.h"
#include "llcdist/runtime/Status.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace llcdist::rt {

struct Stream {
  int id = 0;  // 0 is the default stream, which always exists
};
struct Event {
  int id = -1;
};
struct CollectiveHandle {
  int64_t id = -1;
};

// A kernel launch: the op with its buffers resolved to device addresses and its attrs, plus the
// step context (learning rate and optimizer step t) that optimizer ops need. Built by the interpreter.
struct KernelCall {
  schema::OpKind kind = schema::OpKind::kZero;
  // args[i][k]: device address of the k-th buffer of role kOpSpecs[kind].args[i] (empty when an
  // optional role is absent); argElems[i][k] its element count.
  std::vector<std::vector<void*>> args;
  std::vector<std::vector<int64_t>> argElems;
  // argTypes[i][k]: the dtype of that buffer (as args; may be left empty, meaning f32 for float roles
  // and i32 for i32 roles). The interpreter hands kernels f32 data for every float role (bf16 buffers
  // are converted to f32 temporaries around the launch: PlanSchema's handlesBf16Itself); only `zero`
  // and `cast` see bf16 addresses, and they read their dtypes from here.
  std::vector<std::vector<schema::ElemType>> argTypes;
  // Sizes and scalars (names as in the op table; unused fields stay 0).
  int64_t M = 0, K = 0, N = 0, V = 0, H = 0, B = 0, S = 0, P = 0, n = 0, rows = 0;
  int64_t nh = 0, nkv = 0, hd = 0;
  std::vector<int64_t> sizes;  // split_fwd / split_bwd
  bool accumulate = false;
  WeightLayout layout = WeightLayout::kOutIn;
  double eps = 0, scale = 0, maxNorm = 0;
  double beta1 = 0, beta2 = 0, weightDecay = 0, momentum = 0;
  const RopeTable* rope = nullptr;  // rope_fwd / rope_bwd: table for positions 0..S-1 (owned by caller)
  // Collectives (all_reduce, all_gather, reduce_scatter) and grad_norm's `sharded` list: the global
  // ranks of the op's `axis` group in member order (empty when the op has no axis), the reduction, and
  // all_gather / reduce_scatter's outer and inner sizes.
  // Vocabulary-parallel ops (embedding_fwd, embedding_bwd_weight, cross_entropy_fwd, cross_entropy_bwd
  // with attr `shard_axis`): `group` is the shard_axis group and vocabShard this rank's slice (index =
  // its coordinate on the axis, count = the axis size); nullopt without shard_axis.
  std::vector<int> group;
  std::optional<VocabShard> vocabShard;
  // cross_entropy_* attr `real_vocab` (vocabulary padding): global columns >= realVocab are padding; 0
  // when absent (every column is vocabulary).
  int64_t realVocab = 0;
  // Sequence-parallel position embedding (pos_embedding_fwd / pos_embedding_bwd_weight with attr
  // `shard_axis`): the first global position of this rank's S positions, c·S with c its coordinate on
  // the axis; 0 without shard_axis. (No collective: `group` stays empty.)
  int64_t posBegin = 0;
  ReduceOp reduceOp = ReduceOp::kSum;
  int64_t outer = 0, inner = 0;
  // all_gather / reduce_scatter / shard_slice: elements per outer row of the whole side, n·inner, or
  // less with attr `total` (ZeRO's padded blocks: the padding is never stored on the whole side); the
  // interpreter always sets it, and 0 means n·inner.
  int64_t total = 0;
  // shard_slice (ZeRO plans; a kernel, no communication): this rank's member index c on the op's `axis`
  // (y[o, k] = x[o, c·inner + k]); `group` holds the axis group, so n = group.size().
  // grad_norm with args.replica_shards: member is this rank's index on `axis` and replicas the attr
  // `replicas` (the replica shards count where member % replicas == 0).
  int64_t member = 0;
  int64_t replicas = 1;
  // grad_norm with attr `stage_axis`: the global ranks of that axis's group in member order (the total
  // squared norm is all-reduced over it); empty without stage_axis.
  std::vector<std::vector<int>> stageGroups;  // one per axis of stage_axis ("dp,pp"), in order
  // send / recv: the peer's global rank (this rank with coordinate `peer` on `axis`) and the tag.
  int peer = -1;
  int64_t tag = 0;
  // Step context, set per launch.
  double lr = 0;
  int64_t t = 0;  // optimizer step count, step + 1

  void* ptr(size_t role, size_t k = 0) const { return args[role].empty() ? nullptr : args[role][k]; }
  float* f(size_t role, size_t k = 0) const { return static_cast<float*>(ptr(role, k)); }
  int32_t* i32(size_t role, size_t k = 0) const { return static_cast<int32_t*>(ptr(role, k)); }
  schema::ElemType type(size_t role, size_t k = 0) const {
    if (role < argTypes.size() && k < argTypes[role].size()) return argTypes[role][k];
    return schema::opSpec(kind).args[role].type == schema::ArgType::kI32 ? schema::ElemType::kI32
                                                                          : schema::ElemType::kF32;
  }
};

class Backend {
public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // ---- memory ----------------------------------------------------------------------------------------
  // Allocates the program's arena: exactly `bytes` bytes (rounded up to kArenaAlignment), aligned to
  // kArenaAlignment, zero-filled. One arena per backend; allocating again is an error.
  virtual Status allocateArena(int64_t bytes) = 0;
  // Device address of arena byte `offset` (offset <= arenaBytes()); null before allocateArena.
  virtual std::byte* arenaAt(int64_t offset) = 0;
  virtual int64_t arenaBytes() const = 0;
  // Largest number of device bytes held at once by this backend: the arena plus any workspace the
  // backend allocates itself (the CPU backend: the arena only; its kernels' temporaries are host heap).
  virtual int64_t peakAllocatedBytes() const = 0;

  // ---- streams and events ----------------------------------------------------------------------------
  virtual StatusOr<Stream> createStream() = 0;
  virtual StatusOr<Event> createEvent() = 0;
  virtual Status recordEvent(Stream stream, Event event) = 0;
  virtual Status waitEvent(Stream stream, Event event) = 0;
  virtual Status synchronize() = 0;

  // ---- work -----------------------------------------------------------------------------------------
  // Host <-> arena copies ordered on `stream`; the host buffer must stay valid until the copy is done
  // (after synchronize(); the CPU backend copies before returning).
  virtual Status copyToDevice(Stream stream, int64_t offset, const void* src, int64_t bytes) = 0;
  virtual Status copyToHost(Stream stream, void* dst, int64_t offset, int64_t bytes) = 0;
  virtual Status fillZero(Stream stream, int64_t offset, int64_t bytes) = 0;
  // Runs one op. Pointers in `call` are device addresses inside this backend's arena.
  virtual Status launch(Stream stream, const KernelCall& call) = 0;

  // ---- collectives (explicit waits) -------------------------------------------------------------------
  // `group`: the global ranks taking part (this rank included), in the group's rank order.
  // In-place all-reduce of `count` f32 elements at `buffer`.
  virtual StatusOr<CollectiveHandle> allReduceAsync(Stream stream, float* buffer, int64_t count, ReduceOp op,
                                                    const std::vector<int>& group) = 0;
  // in [outer, inner], out [outer, total]: out[o, m·inner + k] = in_m[o, k] (n = |group|) for
  // m·inner + k < total <= n·inner (total < n·inner: ZeRO's padded blocks, the padding is dropped).
  virtual StatusOr<CollectiveHandle> allGatherAsync(Stream stream, const float* in, float* out, int64_t outer,
                                                    int64_t inner, int64_t total, const std::vector<int>& group) = 0;
  // in [outer, total], out [outer, inner]: out[o, k] = reduce_m in_m[o, c·inner + k], c this rank's
  // member index, with in_m[o, j] = 0 for total <= j < n·inner (the padding of ZeRO's blocks).
  virtual StatusOr<CollectiveHandle> reduceScatterAsync(Stream stream, const float* in, float* out, int64_t outer,
                                                        int64_t inner, int64_t total, ReduceOp op,
                                                        const std::vector<int>& group) = 0;
  // outer = 1, unpadded: out[count·n] = every member's in[count] concatenated; out[count] = member
  // chunk c reduced.
  StatusOr<CollectiveHandle> allGatherAsync(Stream stream, const float* in, float* out, int64_t count,
                                            const std::vector<int>& group) {
    return allGatherAsync(stream, in, out, 1, count, int64_t(group.size()) * count, group);
  }
  StatusOr<CollectiveHandle> reduceScatterAsync(Stream stream, const float* in, float* out, int64_t count,
                                                ReduceOp op, const std::vector<int>& group) {
    return reduceScatterAsync(stream, in, out, 1, count, int64_t(group.size()) * count, op, group);
  }
  // Point-to-point (send / recv ops): `count` f32 elements to / from global rank `peer`, with the op's
  // tag and the action's microbatch (-1 when none); matching as in Communicator.h.
  virtual StatusOr<CollectiveHandle> sendAsync(Stream stream, const float* x, int64_t count, int peer, int64_t tag,
                                               int64_t microbatch) = 0;
  virtual StatusOr<CollectiveHandle> recvAsync(Stream stream, float* y, int64_t count, int peer, int64_t tag,
                                               int64_t microbatch) = 0;
  // Later work on `stream` waits for the collective (or send / recv) to complete.
  virtual Status waitCollective(Stream stream, CollectiveHandle handle) = 0;
};

struct CpuBackendOptions {
  int rank = 0;  // this backend's global rank
  // The run's communicator (shared by every rank's backend; must outlive the backend), or null: then
  // only single-rank groups {rank} are allowed.
  Communicator* communicator = nullptr;
  // OpenBLAS worker threads, set process-wide when the backend is created (when the linked BLAS is
  // OpenBLAS). 1 keeps GEMM results bitwise reproducible across runs and machines; 0 leaves the
  // library's setting (OPENBLAS_NUM_THREADS) alone.
  int blasThreads = 1;
};

// The CPU reference backend: kernels from Kernels.h, executed synchronously. Collectives run through
// options.communicator, synchronously, when the call is made (the handle is complete at once). Without
// a communicator, collectives over a group of one rank (itself) complete immediately (all-reduce and
// reduce-scatter are the identity, all-gather a copy) and a group with any other rank is an
// InvalidArgument error naming the group. grad_norm with a `sharded` list all-reduces (f64, sum) the
// sharded squared norm over call.group through the communicator, and with `stage_axis` the total over
// each of call.stageGroups in order; the vocabulary-parallel cross entropy all-reduces its row statistics (f64: max, then
// sum) over call.group the same way, so these kernel-internal collectives have the standalone
// collectives' determinism, mismatch, abort and timeout behaviour. send / recv go through the
// communicator's send / recv when the call is made (a send is buffered, a recv returns with the data);
// without a communicator they are an InvalidArgument error.
std::unique_ptr<Backend> makeCpuBackend(const CpuBackendOptions& options = {});

// All-reduces buf[n] (f64) in place over `group` with `op`, in member order with identical bits on
// every member (the Communicator's rule): the collective inside a kernel, for grad_norm's `sharded`
// list (over call.group) and `stage_axis` (over call.stageGroups) and the vocabulary-parallel cross
// entropy (over call.group). The CPU backend passes its communicator's allReduce.
using CpuGroupAllReduce = std::function<Status(const std::vector<int>& group, double* buf, int64_t n, ReduceOp op)>;

// Runs one KernelCall with the CPU kernels of Kernels.h (what CpuBackend::launch does); exposed so
// other backends can fall back to it for host-resident data and for tests. Collective and
// point-to-point ops are not kernels (an error). Kernels that need a collective (grad_norm with
// `sharded` or `stage_axis`, cross_entropy_* with `shard_axis`) call `groupAllReduce`; in the overload
// without it, a group of one rank is the identity and a larger group is an error.
Status runCpuKernel(const KernelCall& call, const CpuGroupAllReduce& groupAllReduce);
Status runCpuKernel(const KernelCall& call);
// grad_norm: total = Σ grads g² + reduceSharded(Σ sharded g²), then reduceStage(total) when
// call.stageGroups is not empty, norm = sqrt(total); sums in double; clips both lists in place when
// max_norm > 0. `reduceSharded` all-reduces (sum) its argument across call.group in place, `reduceStage`
// across each of call.stageGroups in turn.
Status runCpuGradNorm(const KernelCall& call, const std::function<Status(double*)>& reduceSharded,
                      const std::function<Status(double*)>& reduceStage = nullptr);

}  // namespace llcdist::rt
