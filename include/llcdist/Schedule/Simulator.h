//===- Simulator.h - discrete-event timing of a pipeline schedule -*- C++ -*-===//
//
// Each stage executes its action list in order, one action at a time. An
// action starts when its stage is free and its dependencies have ended (plus
// the point-to-point latency when the dependency ran on another stage):
//   F(mb, c) on stage s  needs F(mb, c) on stage s-1, or for s == 0 and c > 0
//                        F(mb, c-1) on stage p-1 (the previous virtual stage);
//   B(mb, c) on stage s  needs F(mb, c) on stage s and B(mb, c) on stage s+1,
//                        or for s == p-1 and c < v-1 B(mb, c+1) on stage 0;
//   W(mb, c) on stage s  needs B(mb, c) on stage s.
// Costs are for one whole stage (all layers a device holds); with v chunks
// per device an action of one chunk costs 1/v of that.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_SCHEDULE_SIMULATOR_H
#define LLCDIST_SCHEDULE_SIMULATOR_H

#include "llcdist/Schedule/Schedule.h"

namespace llcdist::schedule {

struct CostModel {
  double forward = 1.0;  ///< F of a whole stage
  double backward = 1.0; ///< B of a whole stage (input grad only when split)
  double weight = 1.0;   ///< W of a whole stage (split-backward schedules)
  double p2pLatency = 0; ///< added to every dependency between two stages
};

struct TimedAction {
  Action action;
  int64_t stage = 0;
  int64_t index = 0; ///< position in the stage's list
  double start = 0, end = 0;
};

struct StageStats {
  double busy = 0; ///< sum of the stage's action durations
  double idle = 0; ///< makespan - busy (before, between and after actions)
  /// idle / makespan: the bubble as a fraction of the step. GPipe and 1F1B
  /// with F = B and no latency: (p-1)/(m+p-1).
  double idleFraction = 0;
  /// idle / busy: the bubble relative to the ideal (bubble-free) compute
  /// time, the literature's (p-1)/m for GPipe and 1F1B, (1/v)(p-1)/m for
  /// interleaved 1F1B.
  double bubbleOverIdeal = 0;
  int64_t peakInFlight = 0;
  int64_t peakPendingWeightGrads = 0;
};

struct SimResult {
  int64_t stages = 0, microbatches = 0, virtualStages = 1;
  /// timeline[s] is stage s's actions in list order, with times.
  std::vector<std::vector<TimedAction>> timeline;
  double makespan = 0;
  std::vector<StageStats> perStage;
  double idleFraction = 0;    ///< total idle / (p * makespan)
  double bubbleOverIdeal = 0; ///< total idle / total busy
};

/// Validates the structure, then times every action. A cyclic wait is an
/// Error naming the stage and index of an action that can never start.
Expected<SimResult> simulate(const Schedule &schedule,
                             const CostModel &costs = CostModel());

/// The analytic bubble over ideal compute for `options` (no latency):
/// GPipe/1F1B (p-1)/m; interleaved (p-1)/(v m); ZB-H1 with m >= p
/// (p-1)(B + max(F-W, 0)) / (m(F+B+W)), which is the paper's
/// (p-1)(F+B-W) / (m(F+B+W)) when W <= F (see docs/pipeline-schedules.md).
double analyticBubbleOverIdeal(const ScheduleOptions &options,
                               const CostModel &costs = CostModel());

} // namespace llcdist::schedule

#endif
