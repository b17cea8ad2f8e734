// A rank's measured timeline (`llc-dist run --trace DIR`): the wall-clock interval of every kernel op
// and every communication op the interpreter executes, written as a Chrome trace (the format of the
// compiler's schedule.trace.json, lib/Schedule/Render.cpp) that Perfetto and chrome://tracing open.
//
// Recording: an Interpreter with a Timeline (Interpreter::setTimeline) makes a time mark before and
// after each op that launches a kernel (lane compute; a bf16 op's conversions included) or
// communicates (collectives and send / recv; lane communication, the wait included, since execution
// is synchronous); load_microbatch is not recorded. A mark is Backend::markTime: the steady clock on
// the CPU backend, whose default stream runs on the calling thread, and a CUDA event on the GPU, so an
// interval is the op's execution on the device, not its launch; the step's intervals are recorded
// once it has synchronized. Asynchronous plans: communication on queue q >= 1 is recorded with its
// real interval (start..end of the communicator call) by the backend thread that runs it, on lane
// tid q named after the queue; a wait op is recorded on the compute lane only when it blocked.
// Kernels never communicate (the gradient norm's and the vocabulary-parallel loss's reductions are
// all_reduce ops of their own). Without a Timeline no clock is read and no mark is made. One
// Timeline belongs to one rank; a mutex serializes the rank's thread and its backend's workers.
//
// File (writeChromeTrace): {"displayTimeUnit": "ms", "traceEvents": [...]}; metadata events name
// each process "rank R" (pid = global rank) and its two threads (tid 0 "compute", tid 1
// "communication"); each interval is a complete event {"name": op kind, "cat": lane, "ph": "X", "ts",
// "dur" (microseconds, ts from the earliest recorded event of any rank, so ranks share one time axis),
// "pid", "tid", "args": {"loc", "step", "microbatch" (-1: none), "action" (-1: a subroutine run
// outside a step), "subroutine", and for kernel ops "variant" (the kernel variant that ran) and, for
// GEMMs and attention, "flops"}}, one event per line. The file is written atomically (temporary file
// + rename).
#pragma once

#include "llcdist/runtime/Status.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace llcdist::rt {

enum class TraceLane : int { kCompute = 0, kCommunication = 1 };

struct TimelineEvent {
  std::string_view name;           // the op kind (schema::opName: static storage)
  TraceLane lane;
  int64_t startNs, endNs;          // steady clock, nanoseconds since its epoch
  const std::string* loc;          // the op's provenance; owned by the plan, which outlives the trace
  const std::string* subroutine;   // the subroutine's name; owned by the plan
  int64_t step, microbatch, action;
  // The queue (index into the program's queues, feature "async") of a communication event: 0 is
  // synchronous communication of the compute queue, on lane tid 1 as before; queue q >= 1 is on lane
  // tid q, named after the queue.
  int queue = 0;
  // A kernel op's variant (KernelVariant.h: "own", "cublaslt", "cudnn"; static storage) and its
  // floating-point operations (kernelFlops; 0 for memory-bound ops and communication).
  std::string_view variant = {};
  double flops = 0;
};

class Timeline {
public:
  using Clock = std::chrono::steady_clock;
  static int64_t nowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  }
  // Thread-safe: the rank's thread and its backend's worker threads record into one timeline.
  void record(const TimelineEvent& e) {
    std::lock_guard<std::mutex> lock(*mu_);
    events_.push_back(e);
  }
  // Read once recording is over (after the run).
  const std::vector<TimelineEvent>& events() const { return events_; }
  // The program's queues, which name the communication lanes (Interpreter::setTimeline sets them).
  void setQueues(std::vector<std::string> queues) { queues_ = std::move(queues); }
  const std::vector<std::string>& queues() const { return queues_; }

private:
  std::unique_ptr<std::mutex> mu_ = std::make_unique<std::mutex>();  // a pointer: Timeline stays movable
  std::vector<TimelineEvent> events_;
  std::vector<std::string> queues_;
};

// The Chrome trace of every rank's timeline (ranks[r] is global rank r's; null: a rank with none),
// as a string (see above).
std::string renderChromeTrace(const std::vector<const Timeline*>& ranks);
// Writes renderChromeTrace(ranks) to `path` atomically: `path`.tmp, then renamed over `path`.
Status writeChromeTrace(const std::string& path, const std::vector<const Timeline*>& ranks);

}  // namespace llcdist::rt
