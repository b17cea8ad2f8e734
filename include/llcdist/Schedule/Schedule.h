//===- Schedule.h - pipeline schedules as data -----------------*- C++ -*-===//
//
// MLIR-free. A pipeline schedule is data: for each of the p pipeline stages an
// ordered list of actions, each naming a subroutine (F = forward of a model
// chunk, B = backward, W = weight gradient), a microbatch and a virtual chunk.
// Generators produce GPipe, 1F1B (PipeDream-flush), Megatron's interleaved
// 1F1B and ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism"); hand-made
// schedules can be parsed from text. `validateSchedule` checks any schedule
// (every action exactly once per stage, per-stage order, no cyclic wait);
// Simulator.h times it; Render.h prints it. See docs/pipeline-schedules.md.
//
// Errors are values (Expected<T> / Status), never exceptions or aborts.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_SCHEDULE_SCHEDULE_H
#define LLCDIST_SCHEDULE_SCHEDULE_H

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace llcdist::schedule {

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

/// What went wrong; `stage` and `actionIndex` locate it when it concerns one
/// action of one stage's list (-1 otherwise).
struct Error {
  std::string message;
  int64_t stage = -1;
  int64_t actionIndex = -1;
};

/// A value or an Error (std::expected-like; C++17).
template <typename T> class Expected {
public:
  Expected(T value) : v_(std::move(value)) {}
  Expected(Error error) : v_(std::move(error)) {}
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T &value() { return std::get<0>(v_); }
  const T &value() const { return std::get<0>(v_); }
  T &operator*() { return value(); }
  const T &operator*() const { return value(); }
  T *operator->() { return &value(); }
  const T *operator->() const { return &value(); }
  const Error &error() const { return std::get<1>(v_); }

private:
  std::variant<T, Error> v_;
};

/// Success, or an Error.
class Status {
public:
  static Status success() { return Status(); }
  Status(Error error) : ok_(false), error_(std::move(error)) {}
  bool ok() const { return ok_; }
  const Error &error() const { return error_; }

private:
  Status() = default;
  bool ok_ = true;
  Error error_;
};

//===----------------------------------------------------------------------===//
// Actions and schedules
//===----------------------------------------------------------------------===//

/// F: forward of one chunk. B: backward; in a split-backward (zero-bubble)
/// schedule B is the input gradient only and W the weight gradient.
enum class ActionKind : uint8_t { F, B, W };

struct Action {
  ActionKind kind = ActionKind::F;
  int64_t microbatch = 0;
  /// The device-local model chunk, 0 <= chunk < virtualStages. Chunk c on
  /// stage s is virtual stage c * stages + s (Megatron's layout).
  int64_t chunk = 0;
  bool operator==(const Action &o) const {
    return kind == o.kind && microbatch == o.microbatch && chunk == o.chunk;
  }
  bool operator!=(const Action &o) const { return !(*this == o); }
};

char kindLetter(ActionKind k);
/// "F3"; with virtualStages > 1 the chunk is shown too: "F3c1".
std::string label(const Action &a, int64_t virtualStages = 1);

enum class ScheduleKind { GPipe, OneFOneB, Interleaved1F1B, ZBH1, Custom };
/// "gpipe", "1f1b", "interleaved", "zb-h1", "custom".
const char *kindName(ScheduleKind k);
/// Parses the --schedule spellings above (not "custom").
Expected<ScheduleKind> parseScheduleKind(std::string_view name);

struct ScheduleOptions {
  int64_t stages = 1;        ///< p, pipeline stages (devices along pp)
  int64_t microbatches = 1;  ///< m
  int64_t virtualStages = 1; ///< v, model chunks per device (interleaved only)
  ScheduleKind kind = ScheduleKind::OneFOneB;
};

struct Schedule {
  ScheduleKind kind = ScheduleKind::Custom;
  int64_t stages = 1;
  int64_t microbatches = 1;
  int64_t virtualStages = 1;
  /// True for zero-bubble schedules: every (microbatch, chunk) has a B (input
  /// gradient) and a W (weight gradient). False: no W actions.
  bool splitBackward = false;
  /// perStage[s] is stage s's action list, executed in order.
  std::vector<std::vector<Action>> perStage;
};

//===----------------------------------------------------------------------===//
// Generators
//===----------------------------------------------------------------------===//

/// Dispatches on options.kind. Errors: stages < 1, microbatches < 1,
/// virtualStages < 1, virtualStages != 1 for a non-interleaved kind, and for
/// interleaved a microbatch count that is not a multiple of the stage count.
Expected<Schedule> generateSchedule(const ScheduleOptions &options);

/// All forwards, then all backwards (microbatch order) on every stage.
Expected<Schedule> generateGPipe(int64_t stages, int64_t microbatches);
/// PipeDream-flush: stage s runs min(p-1-s, m) warm-up forwards, then
/// alternates one forward and one backward, then drains the backwards.
Expected<Schedule> generate1F1B(int64_t stages, int64_t microbatches);
/// Megatron-LM's interleaved 1F1B with v chunks per device; m % p == 0.
/// With v == 1 this is 1F1B.
Expected<Schedule> generateInterleaved1F1B(int64_t stages,
                                           int64_t microbatches,
                                           int64_t virtualStages);
/// ZB-H1: 1F1B's warm-up and F/B order (so 1F1B's activation memory), with
/// the backward split into B and W; stage s defers its first s weight
/// gradients, which then fill the cool-down bubble.
Expected<Schedule> generateZBH1(int64_t stages, int64_t microbatches);

//===----------------------------------------------------------------------===//
// Hand-made schedules, validation, memory
//===----------------------------------------------------------------------===//

/// Parses one line per stage (lines separated by '\n' or '|'), each a
/// whitespace-separated list of actions "F3", "B0", "W2", optionally with a
/// chunk "F3c1". Stages = number of lines; splitBackward = any W present.
/// The result is not validated (call validateSchedule).
Expected<Schedule> parseSchedule(std::string_view text, int64_t microbatches,
                                 int64_t virtualStages = 1);

/// Structure: every stage runs exactly one F and one B (and one W when
/// splitBackward) for each (microbatch, chunk), nothing out of range, B after
/// its F and W after its B on the same stage. Dependencies: the cross-stage
/// waits can all be met (no cyclic wait); a deadlock names the stage and the
/// index of the action that can never start and the cycle of waits.
Status validateSchedule(const Schedule &schedule);
/// The structural half of validateSchedule only.
Status validateStructure(const Schedule &schedule);

/// Per stage: the most (microbatch, chunk) pairs whose F is done and whose B
/// is not (activations held). 1F1B: min(p - s, m); GPipe: m.
std::vector<int64_t> peakInFlight(const Schedule &schedule);
/// Per stage: the most pairs whose B is done and whose W is not (the inputs
/// a deferred weight gradient keeps alive). 0 without splitBackward.
std::vector<int64_t> peakPendingWeightGrads(const Schedule &schedule);

/// One line per stage: "stage 0: F0 F1 B0 B1".
std::string toString(const Schedule &schedule);

} // namespace llcdist::schedule

#endif
