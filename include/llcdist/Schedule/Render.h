//===- Render.h - text Gantt chart and Chrome trace of a schedule -*- C++ -*-===//
#ifndef LLCDIST_SCHEDULE_RENDER_H
#define LLCDIST_SCHEDULE_RENDER_H

#include "llcdist/Schedule/Simulator.h"

#include <string>

namespace llcdist::schedule {

/// One row per stage, one column per `unit` of time (0: the shortest action
/// duration). A column shows the label of the action that starts in it
/// ("F0", "B3", "W1", "F2c1"), "-" where an action started earlier
/// continues, "." where the stage idles; columns are padded to the longest
/// label and separated by one space, trailing blanks trimmed:
///   S0: F0 F1 .  B0 .  B1
///   S1: .  F0 B0 F1 B1 .
std::string renderGantt(const SimResult &result, double unit = 0);

/// Chrome trace JSON ({"traceEvents": [...]}), one complete ("X") event per
/// action, pid 0, tid = stage, plus thread names "stage N"; ts/dur in
/// microseconds = simulated time * usPerUnit. Opens in Perfetto.
std::string renderChromeTrace(const SimResult &result,
                              double usPerUnit = 1000.0);

} // namespace llcdist::schedule

#endif
