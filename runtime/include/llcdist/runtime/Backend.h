// The execution backend: device memory (one arena per program), streams and events, kernel launches
// and collectives. The interpreter (Interpreter.h) is written against this interface only, so a CUDA
// backend is a new implementation of it with its own kernel table (KernelTable.h); the CPU backend
// (CpuBackend.h, library llcdist_runtime_cpu) is the reference and the test oracle.
//
// Ordering model (CUDA's): work launched on one stream runs in launch order; recordEvent(s, e) marks
// the point after everything launched on s so far, and waitEvent(s, e) makes later work on s wait for
// it (the latest record of e when waitEvent is called). Work on different streams runs concurrently
// unless events or collective waits order it. synchronize() blocks the host until all launched work is
// done. Errors of asynchronous work are reported by the wait for it (waitCollective on the default
// stream) or by synchronize(). The CPU backend executes the default stream (0) synchronously on the
// calling thread (its events are complete when recorded) and every created stream on a worker thread
// of its own, so communication issued there overlaps compute (asynchronous plans, Interpreter.h).
//
// Collectives are asynchronous: a call enqueues the operation on a stream and returns a handle, and
// waitCollective(s, h) makes later work on stream s wait for its completion (the result buffer must
// not be read before that). A collective runs on a Channel: one communication group (global ranks in
// member order, Mesh::group), created once at start-up with createChannel — the interpreter creates one
// per distinct group of its program in Interpreter::create (docs/plan-format.md "Channels"); an NCCL
// backend maps a channel to a communicator (ncclCommSplit), the CPU backend to its group. A rank's
// backend takes part only in groups that contain its rank. Semantics and determinism are the
// Communicator's (Communicator.h). Point-to-point sends and receives (pipeline plans) are asynchronous
// the same way and are waited for with waitCollective; a send's source may be overwritten once the
// wait returns (sends are eager: Communicator.h), a receive's destination read after it.
#pragma once

#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/KernelCall.h"
#include "llcdist/runtime/KernelVariant.h"
#include "llcdist/runtime/PlanSchema.h"
#include "llcdist/runtime/Status.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
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
struct Channel {
  int id = -1;
};

// all_to_all's rearrangement (Backend::allToAllAsync), shared by the backends: one strided copy per
// member j between the op's tensor, [outer, mid, n, inner] (rank dimension 2) or [outer, n, mid, inner]
// (rank dimension 1), and n contiguous blocks of outer·mid·inner elements (block j holds the tensor's
// index j of its rank dimension, in (outer, mid, inner) order). `rows` rows of `width` bytes, src rows
// `srcPitch` bytes apart from byte `srcOffset`, dst rows `dstPitch` apart from `dstOffset` (a
// cudaMemcpy2DAsync each on the GPU).
struct StridedCopy {
  int64_t srcOffset = 0, dstOffset = 0, rows = 0, width = 0, srcPitch = 0, dstPitch = 0;
};
// pack: tensor -> blocks (x's side: rankDim = xRankDim); otherwise blocks -> tensor (y's side: rankDim =
// 3 - xRankDim).
std::vector<StridedCopy> allToAllCopies(int64_t n, int64_t outer, int64_t mid, int64_t inner, int rankDim,
                                        int64_t elemBytes, bool pack);
// Whether the tensor of that side already is the n contiguous blocks (no copy needed): outer = 1 and
// either rank dimension 1 or mid = 1.
constexpr bool allToAllIsBlocks(int64_t outer, int64_t mid, int rankDim) {
  return outer == 1 && (rankDim == 1 || mid == 1);
}
// Runs the copies on host memory.
void runStridedCopies(const std::vector<StridedCopy>& copies, const void* src, void* dst);

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
  // Device memory for `elems` f32 temporaries outside the arena (the interpreter's staging of bf16
  // arguments, Interpreter.h), zero-filled, owned by the backend until it is destroyed; any number of
  // calls. The CPU backend's is host heap, not counted in peakAllocatedBytes (like its kernels'
  // temporaries); a device backend counts it.
  virtual StatusOr<float*> allocateStaging(int64_t elems) = 0;
  // Host memory for a step's inputs (the interpreter's "Per-step inputs": the step's values and the
  // token batches), which copyHostInput copies to the device without the host waiting: pinned on CUDA,
  // host heap on the CPU; zero-filled, owned by the backend until it is destroyed; any number of calls.
  virtual StatusOr<void*> allocateHostInput(int64_t bytes) = 0;

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
  // Copies `bytes` from host input memory `src` (allocateHostInput) to device address `dst` (in the
  // arena or in staging), ordered on `stream`, without the host waiting: `src` must keep its value until
  // the stream has passed the copy (the interpreter rewrites its inputs only once a step has
  // synchronized). A recorded step (CommandList.h) copies from the same address at every replay.
  virtual Status copyHostInput(Stream stream, void* dst, const void* src, int64_t bytes) = 0;
  // Runs `fn` on the host once all earlier work on `stream` is done; later work on the stream waits
  // for it (CUDA's cudaLaunchHostFunc). The interpreter's timeline reads the clock this way around
  // communication on a worker stream, on the thread that runs it. `fn` must not call the backend.
  virtual Status launchHostFunc(Stream stream, std::function<void()> fn) = 0;
  // Runs one op. Pointers in `call` are device addresses inside this backend's arena.
  virtual Status launch(Stream stream, const KernelCall& call) = 0;
  // Whether launch() runs ops of `kind`: an entry in the backend's kernel table (KernelTable.h). The
  // interpreter checks it for every kernel op of a program at create(); the collective, point-to-point
  // and load_microbatch ops are not launched (see the calls below and Interpreter.h).
  virtual bool hasKernel(schema::OpKind kind) const = 0;
  // The kernel variants of `kind` (KernelVariant.h), in the backend's order of preference; a call's
  // KernelCall::variant indexes this list. Default: one f32 kernel (f32KernelVariant: every bf16
  // argument converted) for each kind with hasKernel, none otherwise. The pointers live as long as
  // the backend.
  virtual std::vector<const KernelVariantInfo*> kernelVariants(schema::OpKind kind) const;
  // The options the variants' choice depends on (--deterministic, --tf32, whether cuDNN can run here).
  virtual KernelSelectOptions kernelSelectOptions() const { return {}; }
  // Called once for every bound kernel call (its variant chosen, addresses in the arena), by
  // Interpreter::create, before any step: a backend prepares what the call will need (the CUDA
  // backend builds cuDNN's attention graphs and sizes the one workspace they share), so no step
  // builds or allocates anything. Default: nothing.
  virtual Status prepare(const KernelCall& call) {
    (void)call;
    return Status::ok();
  }

  // ---- device graphs (recorded steps: CommandList.h) --------------------------------------------------
  // Whether one replay of a recorded step can be captured into a device graph (a CUDA graph) that is
  // launched at every later step; why not in *why. Default: no (the interpreter replays the recorded
  // list call by call, as on the CPU backend).
  virtual bool canCaptureGraph(std::string* why) const;
  // From beginGraphCapture to endGraphCapture the work calls on every stream are captured into a graph,
  // not run; endGraphCapture returns its id for launchGraph, which runs the whole graph on the default
  // stream (ordered as a launch there). Default: an error (canCaptureGraph is false).
  virtual Status beginGraphCapture();
  virtual StatusOr<int> endGraphCapture();
  virtual Status launchGraph(int graph);

  // ---- time marks (--trace, --profile) ------------------------------------------------------------------
  // A mark is a point on `stream`'s execution: the time at which everything launched on it before the
  // mark has run. markTime() records one and returns its id; markTimeNs() gives its time in
  // nanoseconds on Timeline::nowNs()'s scale, valid after the next synchronize(); clearTimeMarks()
  // forgets every mark (the interpreter does so after each step has read its own). Default (the CPU
  // backend, whose default stream runs synchronously on the calling thread): the host clock when the
  // mark is made, which is when the work before it has run. A device backend records an event, so an
  // op's interval is its execution on the device, not its launch (CudaBackend.h).
  virtual StatusOr<int64_t> markTime(Stream stream);
  virtual StatusOr<int64_t> markTimeNs(int64_t mark);
  virtual void clearTimeMarks() { hostMarks_.clear(); }

  // ---- collectives (explicit waits) -------------------------------------------------------------------
  // A communication call made on a worker stream carries the issuing thread's call site
  // (FlightRecorder.h's currentCallSite, copied when the call is issued) to the thread that runs it,
  // so the flight recorder names the plan op that made it.
  // The channel of `group`: the global ranks taking part (this rank included exactly once), in member
  // order. Called at start-up, once per group, before any collective on it; an error for a group without
  // this rank.
  virtual StatusOr<Channel> createChannel(const std::vector<int>& group) = 0;
  // Called once on each rank's own thread, by every rank of a multi-rank run together, after
  // Interpreter::create (which creates the channels) and before the rank's first work: a backend whose
  // channels need a collective set-up over the whole world (NCCL's communicators, CudaBackend.h) makes
  // it here. The CPU backend has none.
  virtual Status connect() { return Status::ok(); }
  // `channel`: a channel this backend created (createChannel). `dtype`:
  // the elements' type (f32, bf16 or f64), which is the reduction's arithmetic (Communicator.h); sizes
  // (count, outer, inner, total) are in elements.
  // In-place all-reduce of `count` elements at `buffer`.
  virtual StatusOr<CollectiveHandle> allReduceAsync(Stream stream, void* buffer, int64_t count, CommDType dtype,
                                                    ReduceOp op, Channel channel) = 0;
  // in [outer, inner], out [outer, total]: out[o, m·inner + k] = in_m[o, k] (n = |group|) for
  // m·inner + k < total <= n·inner (total < n·inner: ZeRO's padded blocks, the padding is dropped).
  virtual StatusOr<CollectiveHandle> allGatherAsync(Stream stream, const void* in, void* out, int64_t outer,
                                                    int64_t inner, int64_t total, CommDType dtype, Channel channel) = 0;
  // in [outer, total], out [outer, inner]: out[o, k] = reduce_m in_m[o, c·inner + k], c this rank's
  // member index, with in_m[o, j] = 0 for total <= j < n·inner (the padding of ZeRO's blocks).
  virtual StatusOr<CollectiveHandle> reduceScatterAsync(Stream stream, const void* in, void* out, int64_t outer,
                                                        int64_t inner, int64_t total, CommDType dtype, ReduceOp op,
                                                        Channel channel) = 0;
  // all_to_all (context parallelism, Ulysses): x and y hold outer·mid·n·inner elements (n = |group|).
  // xRankDim 2: x is [outer, mid, n, inner] and y [outer, n, mid, inner]; xRankDim 1: x is [outer, n,
  // mid, inner] and y [outer, mid, n, inner]. The block of x at index j of its rank dimension
  // (outer·mid·inner elements) goes to member j; the block from member i lands at index i of y's rank
  // dimension (this member's own block is copied). x and y do not overlap. A backend packs x's blocks
  // contiguously (allToAllCopies below), runs the communicator's (or NCCL's) all-to-all and unpacks
  // into y. Default: an InvalidArgument error (a backend without it cannot run context-parallel plans).
  virtual StatusOr<CollectiveHandle> allToAllAsync(Stream stream, const void* x, void* y, int64_t outer, int64_t mid,
                                                   int64_t inner, int xRankDim, CommDType dtype, Channel channel);
  // all_to_all_v (expert parallelism; Communicator::allToAllV's semantics on backend memory): x [xRows,
  // rowElems], y [yRows, rowElems] in elements of `dtype`, sendSplits / recvSplits the i32 [n·chunks]
  // buffers of the op (backend memory). Its errors (a negative split, Σ send > xRows, Σ recv > yRows)
  // are the call's or its handle's. Default: an InvalidArgument error (a backend without it cannot run
  // expert-parallel plans).
  virtual StatusOr<CollectiveHandle> allToAllVAsync(Stream stream, const void* x, int64_t xRows,
                                                    const int32_t* sendSplits, void* y, int64_t yRows,
                                                    int32_t* recvSplits, int64_t chunks, int64_t rowElems,
                                                    CommDType dtype, Channel channel);
  // f32.
  StatusOr<CollectiveHandle> allReduceAsync(Stream stream, float* buffer, int64_t count, ReduceOp op, Channel channel) {
    return allReduceAsync(stream, buffer, count, CommDType::kF32, op, channel);
  }
  // Point-to-point (send / recv ops): `count` elements of `dtype` (the buffer's: a bf16 buffer moves as
  // bf16, never through f32 staging) to / from global rank `peer`, with the op's tag and the action's
  // microbatch (-1 when none); matching as in Communicator.h.
  virtual StatusOr<CollectiveHandle> sendAsync(Stream stream, const void* x, int64_t count, CommDType dtype, int peer,
                                               int64_t tag, int64_t microbatch) = 0;
  virtual StatusOr<CollectiveHandle> recvAsync(Stream stream, void* y, int64_t count, CommDType dtype, int peer,
                                               int64_t tag, int64_t microbatch) = 0;
  // f32.
  StatusOr<CollectiveHandle> sendAsync(Stream stream, const float* x, int64_t count, int peer, int64_t tag,
                                       int64_t microbatch) {
    return sendAsync(stream, x, count, CommDType::kF32, peer, tag, microbatch);
  }
  StatusOr<CollectiveHandle> recvAsync(Stream stream, float* y, int64_t count, int peer, int64_t tag,
                                       int64_t microbatch) {
    return recvAsync(stream, y, count, CommDType::kF32, peer, tag, microbatch);
  }
  // Later work on `stream` waits for the collective (or send / recv) to complete; on the default
  // stream the host blocks and gets its error. Each handle is waited for once.
  virtual Status waitCollective(Stream stream, CollectiveHandle handle) = 0;
  // Whether the collective has completed (a query, like cudaEventQuery; a waited handle counts as
  // complete). The timeline records a wait only when it blocked.
  virtual bool collectiveDone(CollectiveHandle handle) = 0;

 private:
  std::vector<int64_t> hostMarks_;  // the default markTime's clock readings
};

}  // namespace llcdist::rt
