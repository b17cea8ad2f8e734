// A training step as a recorded list of backend calls, replayed at every later step (the IREE HAL
// command-buffer model; docs/runtime.md "Recorded steps").
//
// The interpreter binds every op once, so after the first step nothing of a step is decided on the
// host any more: the same kernels run on the same addresses with the same parameters, and what changes
// from step to step (the learning rate, the step count, the token batch) is read from memory written
// before the step (Interpreter.h "Per-step inputs"). CommandRecorder is a Backend that stands in for
// the real one while the interpreter runs one step: it runs nothing, and appends each work call
// (launches, copies of per-step inputs, fills, event records and waits, collectives, send / recv and
// their waits, host functions) to a CommandList, with the op it belongs to. CommandList::replay issues
// the calls in order on the real backend. The CPU backend replays the list call by call; the CUDA
// backend captures one replay into a CUDA graph (Backend::beginGraphCapture) and launches the graph
// at every later step.
//
// A collective's handle is known only when the call is issued, so the recorder hands out its own
// handle numbers (the call's index among the list's handle-returning calls) and a replay keeps the real
// handles in a table by that number for the waits that follow. A communication call keeps the call
// site (FlightRecorder.h) it was recorded under; a replay sets it again with the replayed step, so a
// hang dump names the plan op and the step as an eager step would.
//
// What a recorded step cannot do is read device memory on the host in the middle of the step (a
// copyToHost: only --check-async does), read the clock (markTime: only --trace / --profile) or make
// streams, events, channels or memory: the recorder refuses those calls with an error naming the
// call, and the interpreter then runs its steps eagerly (Interpreter::stepExecution says why).
#pragma once

#include "llcdist/runtime/Backend.h"
#include "llcdist/runtime/FlightRecorder.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace llcdist::rt {

class CommandList {
 public:
  // Issues every recorded call in order on `target` (the backend the list was recorded against);
  // `step` is the step the replay runs, for the flight recorder's call sites. The first failing call's
  // error, after "step N, " and the context it was recorded under (the interpreter's: "action a:
  // <program>: subroutine ..."), so it reads as the op-by-op step's.
  Status replay(Backend& target, int64_t step) const;

  size_t size() const { return commands_.size(); }
  // How many of the calls launch a kernel (Backend::launch).
  int64_t launches() const { return launches_; }
  // How many return a collective handle (collectives, send and recv).
  int64_t handles() const { return handles_; }

 private:
  friend class CommandRecorder;
  struct ReplayState {
    std::vector<CollectiveHandle> handles;  // by recorded handle number
    int64_t step = 0;
  };
  struct Command {
    std::function<Status(Backend&, ReplayState&)> run;
    std::string context;  // prefixed to the call's error
  };
  std::vector<Command> commands_;
  int64_t launches_ = 0, handles_ = 0;
};

// The stand-in backend that records (see above). Queries (arenaAt, hasKernel, kernelVariants, ...) go
// to the real backend; work calls are appended to `list`; the others are refused.
class CommandRecorder final : public Backend {
 public:
  CommandRecorder(Backend& target, CommandList& list) : target_(target), list_(list) {}

  // The context of the calls recorded from now on (the interpreter sets it before each op).
  void setContext(std::string context) { context_ = std::move(context); }

  std::string name() const override { return target_.name(); }
  Status allocateArena(int64_t bytes) override;
  std::byte* arenaAt(int64_t offset) override { return target_.arenaAt(offset); }
  int64_t arenaBytes() const override { return target_.arenaBytes(); }
  int64_t peakAllocatedBytes() const override { return target_.peakAllocatedBytes(); }
  StatusOr<float*> allocateStaging(int64_t elems) override;
  StatusOr<void*> allocateHostInput(int64_t bytes) override;
  StatusOr<Stream> createStream() override;
  StatusOr<Event> createEvent() override;
  Status recordEvent(Stream stream, Event event) override;
  Status waitEvent(Stream stream, Event event) override;
  Status synchronize() override;
  Status copyToDevice(Stream stream, int64_t offset, const void* src, int64_t bytes) override;
  Status copyToHost(Stream stream, void* dst, int64_t offset, int64_t bytes) override;
  Status copyHostInput(Stream stream, void* dst, const void* src, int64_t bytes) override;
  Status fillZero(Stream stream, int64_t offset, int64_t bytes) override;
  Status launchHostFunc(Stream stream, std::function<void()> fn) override;
  Status launch(Stream stream, const KernelCall& call) override;
  bool hasKernel(schema::OpKind kind) const override { return target_.hasKernel(kind); }
  std::vector<const KernelVariantInfo*> kernelVariants(schema::OpKind kind) const override {
    return target_.kernelVariants(kind);
  }
  KernelSelectOptions kernelSelectOptions() const override { return target_.kernelSelectOptions(); }
  Status prepare(const KernelCall& call) override;
  StatusOr<int64_t> markTime(Stream stream) override;
  StatusOr<Channel> createChannel(const std::vector<int>& group) override;
  Status connect() override;
  using Backend::allReduceAsync;
  StatusOr<CollectiveHandle> allReduceAsync(Stream stream, void* buffer, int64_t count, CommDType dtype, ReduceOp op,
                                            Channel channel) override;
  StatusOr<CollectiveHandle> allGatherAsync(Stream stream, const void* in, void* out, int64_t outer, int64_t inner,
                                            int64_t total, CommDType dtype, Channel channel) override;
  StatusOr<CollectiveHandle> reduceScatterAsync(Stream stream, const void* in, void* out, int64_t outer, int64_t inner,
                                                int64_t total, CommDType dtype, ReduceOp op, Channel channel) override;
  StatusOr<CollectiveHandle> allToAllAsync(Stream stream, const void* x, void* y, int64_t outer, int64_t mid,
                                           int64_t inner, int xRankDim, CommDType dtype, Channel channel) override;
  StatusOr<CollectiveHandle> allToAllVAsync(Stream stream, const void* x, int64_t xRows, const int32_t* sendSplits,
                                            void* y, int64_t yRows, int32_t* recvSplits, int64_t chunks,
                                            int64_t rowElems, CommDType dtype, Channel channel) override;
  StatusOr<CollectiveHandle> sendAsync(Stream stream, const void* x, int64_t count, CommDType dtype, int peer,
                                       int64_t tag, int64_t microbatch) override;
  StatusOr<CollectiveHandle> recvAsync(Stream stream, void* y, int64_t count, CommDType dtype, int peer, int64_t tag,
                                       int64_t microbatch) override;
  Status waitCollective(Stream stream, CollectiveHandle handle) override;
  // Nothing has run while recording; the timeline, the only caller, is off in a recorded step.
  bool collectiveDone(CollectiveHandle) override { return true; }

 private:
  void add(std::function<Status(Backend&, CommandList::ReplayState&)> run);
  // A call that returns a handle: `issue` makes the real call at replay; the recorded number is returned.
  CollectiveHandle addHandle(std::function<StatusOr<CollectiveHandle>(Backend&)> issue);
  Status refuse(const char* call) const;

  Backend& target_;
  CommandList& list_;
  std::string context_;
};

}  // namespace llcdist::rt
