// A step's backend calls recorded once and replayed. See CommandList.h.
#include "llcdist/runtime/CommandList.h"

#include <optional>
#include <utility>

namespace llcdist::rt {

Status CommandList::replay(Backend& target, int64_t step) const {
  ReplayState state;
  state.handles.assign(size_t(handles_), CollectiveHandle{});
  state.step = step;
  for (const Command& c : commands_) {
    Status st = c.run(target, state);
    if (!st.isOk())
      return std::move(st).withContext("step " + std::to_string(step) + (c.context.empty() ? "" : ", " + c.context));
  }
  return Status::ok();
}

void CommandRecorder::add(std::function<Status(Backend&, CommandList::ReplayState&)> run) {
  list_.commands_.push_back(CommandList::Command{std::move(run), context_});
}

CollectiveHandle CommandRecorder::addHandle(std::function<StatusOr<CollectiveHandle>(Backend&)> issue) {
  const int64_t number = list_.handles_++;
  // The call site the interpreter set for this call (FlightRecorder.h), replayed with the replay's step.
  std::optional<CommCallSite> site;
  if (const CommCallSite* now = currentCallSite()) site = *now;
  add([number, site, issue = std::move(issue)](Backend& b, CommandList::ReplayState& r) -> Status {
    std::optional<ScopedCallSite> scoped;
    if (site) {
      CommCallSite s = *site;
      s.step = r.step;
      scoped.emplace(s);
    }
    LLCDIST_ASSIGN_OR_RETURN(r.handles[size_t(number)], issue(b));
    return Status::ok();
  });
  return CollectiveHandle{number};
}

Status CommandRecorder::refuse(const char* call) const {
  return Status::invalidArgument(std::string("a recorded step cannot ") + call +
                                 " (only work on the device is recorded: CommandList.h)");
}

Status CommandRecorder::allocateArena(int64_t) { return refuse("allocate the arena"); }
StatusOr<float*> CommandRecorder::allocateStaging(int64_t) { return refuse("allocate staging memory"); }
StatusOr<void*> CommandRecorder::allocateHostInput(int64_t) { return refuse("allocate host input memory"); }
StatusOr<Stream> CommandRecorder::createStream() { return refuse("create a stream"); }
StatusOr<Event> CommandRecorder::createEvent() { return refuse("create an event"); }
Status CommandRecorder::synchronize() { return refuse("synchronize with the host"); }
Status CommandRecorder::copyToDevice(Stream, int64_t, const void*, int64_t) {
  return refuse("copy host memory whose value is read now (per-step inputs go through copyHostInput)");
}
Status CommandRecorder::copyToHost(Stream, void*, int64_t, int64_t) { return refuse("read device memory on the host"); }
Status CommandRecorder::prepare(const KernelCall&) { return refuse("prepare a kernel"); }
StatusOr<int64_t> CommandRecorder::markTime(Stream) { return refuse("read the clock (--trace, --profile)"); }
StatusOr<Channel> CommandRecorder::createChannel(const std::vector<int>&) { return refuse("create a channel"); }
Status CommandRecorder::connect() { return refuse("connect channels"); }

Status CommandRecorder::recordEvent(Stream s, Event e) {
  add([=](Backend& b, CommandList::ReplayState&) { return b.recordEvent(s, e); });
  return Status::ok();
}

Status CommandRecorder::waitEvent(Stream s, Event e) {
  add([=](Backend& b, CommandList::ReplayState&) { return b.waitEvent(s, e); });
  return Status::ok();
}

Status CommandRecorder::copyHostInput(Stream s, void* dst, const void* src, int64_t bytes) {
  add([=](Backend& b, CommandList::ReplayState&) { return b.copyHostInput(s, dst, src, bytes); });
  return Status::ok();
}

Status CommandRecorder::fillZero(Stream s, int64_t offset, int64_t bytes) {
  add([=](Backend& b, CommandList::ReplayState&) { return b.fillZero(s, offset, bytes); });
  return Status::ok();
}

Status CommandRecorder::launchHostFunc(Stream s, std::function<void()> fn) {
  add([s, fn = std::move(fn)](Backend& b, CommandList::ReplayState&) { return b.launchHostFunc(s, fn); });
  return Status::ok();
}

Status CommandRecorder::launch(Stream s, const KernelCall& call) {
  ++list_.launches_;
  add([s, call](Backend& b, CommandList::ReplayState&) { return b.launch(s, call); });
  return Status::ok();
}

StatusOr<CollectiveHandle> CommandRecorder::allReduceAsync(Stream s, void* buffer, int64_t count, CommDType dtype,
                                                           ReduceOp op, Channel channel) {
  return addHandle([=](Backend& b) { return b.allReduceAsync(s, buffer, count, dtype, op, channel); });
}

StatusOr<CollectiveHandle> CommandRecorder::allGatherAsync(Stream s, const void* in, void* out, int64_t outer,
                                                           int64_t inner, int64_t total, CommDType dtype,
                                                           Channel channel) {
  return addHandle([=](Backend& b) { return b.allGatherAsync(s, in, out, outer, inner, total, dtype, channel); });
}

StatusOr<CollectiveHandle> CommandRecorder::reduceScatterAsync(Stream s, const void* in, void* out, int64_t outer,
                                                               int64_t inner, int64_t total, CommDType dtype,
                                                               ReduceOp op, Channel channel) {
  return addHandle(
      [=](Backend& b) { return b.reduceScatterAsync(s, in, out, outer, inner, total, dtype, op, channel); });
}

StatusOr<CollectiveHandle> CommandRecorder::allToAllAsync(Stream s, const void* x, void* y, int64_t outer, int64_t mid,
                                                          int64_t inner, int xRankDim, CommDType dtype,
                                                          Channel channel) {
  return addHandle([=](Backend& b) { return b.allToAllAsync(s, x, y, outer, mid, inner, xRankDim, dtype, channel); });
}

StatusOr<CollectiveHandle> CommandRecorder::allToAllVAsync(Stream s, const void* x, int64_t xRows,
                                                           const int32_t* sendSplits, void* y, int64_t yRows,
                                                           int32_t* recvSplits, int64_t chunks, int64_t rowElems,
                                                           CommDType dtype, Channel channel) {
  return addHandle([=](Backend& b) {
    return b.allToAllVAsync(s, x, xRows, sendSplits, y, yRows, recvSplits, chunks, rowElems, dtype, channel);
  });
}

StatusOr<CollectiveHandle> CommandRecorder::sendAsync(Stream s, const void* x, int64_t count, CommDType dtype, int peer,
                                                      int64_t tag, int64_t microbatch) {
  return addHandle([=](Backend& b) { return b.sendAsync(s, x, count, dtype, peer, tag, microbatch); });
}

StatusOr<CollectiveHandle> CommandRecorder::recvAsync(Stream s, void* y, int64_t count, CommDType dtype, int peer,
                                                      int64_t tag, int64_t microbatch) {
  return addHandle([=](Backend& b) { return b.recvAsync(s, y, count, dtype, peer, tag, microbatch); });
}

Status CommandRecorder::waitCollective(Stream s, CollectiveHandle h) {
  if (h.id < 0 || h.id >= list_.handles_)
    return Status::internal("a recorded wait for handle " + std::to_string(h.id) + " that was not recorded");
  add([s, h](Backend& b, CommandList::ReplayState& r) { return b.waitCollective(s, r.handles[size_t(h.id)]); });
  return Status::ok();
}

}  // namespace llcdist::rt
