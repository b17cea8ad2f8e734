//===- Simulator.cpp - discrete-event timing and deadlock detection -------===//
#include "llcdist/Schedule/Simulator.h"

#include <algorithm>
#include <limits>

using namespace llcdist::schedule;

namespace {

struct Dep {
  Action action;
  int64_t stage;
  bool crossStage;
};

/// The actions `a` on stage `s` waits for (see Simulator.h).
std::vector<Dep> depsOf(const Action &a, int64_t s, int64_t p, int64_t v) {
  std::vector<Dep> d;
  const int64_t mb = a.microbatch, c = a.chunk;
  switch (a.kind) {
  case ActionKind::F:
    if (s > 0)
      d.push_back({{ActionKind::F, mb, c}, s - 1, true});
    else if (c > 0)
      d.push_back({{ActionKind::F, mb, c - 1}, p - 1, p > 1});
    break;
  case ActionKind::B:
    d.push_back({{ActionKind::F, mb, c}, s, false});
    if (s < p - 1)
      d.push_back({{ActionKind::B, mb, c}, s + 1, true});
    else if (c < v - 1)
      d.push_back({{ActionKind::B, mb, c + 1}, 0, p > 1});
    break;
  case ActionKind::W:
    d.push_back({{ActionKind::B, mb, c}, s, false});
    break;
  }
  return d;
}

double costOf(const Action &a, const CostModel &c, int64_t v) {
  double whole = a.kind == ActionKind::F   ? c.forward
                 : a.kind == ActionKind::B ? c.backward
                                           : c.weight;
  return whole / (double)v;
}

} // namespace

Expected<SimResult> llcdist::schedule::simulate(const Schedule &sch,
                                                const CostModel &costs) {
  Status st = validateStructure(sch);
  if (!st.ok())
    return st.error();
  if (costs.forward < 0 || costs.backward < 0 || costs.weight < 0 ||
      costs.p2pLatency < 0)
    return Error{"action costs and the point-to-point latency must be >= 0"};
  const int64_t p = sch.stages, m = sch.microbatches, v = sch.virtualStages;
  auto slot = [&](const Action &a, int64_t s) {
    return (((size_t)s * 3 + (size_t)a.kind) * m + a.microbatch) * v + a.chunk;
  };
  const double notDone = -1;
  std::vector<double> endOf((size_t)(p * 3 * m * v), notDone);
  std::vector<int64_t> indexOf((size_t)(p * 3 * m * v), -1);
  for (int64_t s = 0; s < p; ++s)
    for (int64_t i = 0; i < (int64_t)sch.perStage[s].size(); ++i)
      indexOf[slot(sch.perStage[s][i], s)] = i;

  SimResult r;
  r.stages = p;
  r.microbatches = m;
  r.virtualStages = v;
  r.timeline.resize((size_t)p);
  std::vector<size_t> next((size_t)p, 0);
  std::vector<double> freeAt((size_t)p, 0.0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (int64_t s = 0; s < p; ++s) {
      const auto &list = sch.perStage[s];
      while (next[s] < list.size()) {
        const Action &a = list[next[s]];
        double start = freeAt[s];
        bool ready = true;
        for (const Dep &d : depsOf(a, s, p, v)) {
          double e = endOf[slot(d.action, d.stage)];
          if (e == notDone) {
            ready = false;
            break;
          }
          start = std::max(start, e + (d.crossStage ? costs.p2pLatency : 0));
        }
        if (!ready)
          break;
        double end = start + costOf(a, costs, v);
        endOf[slot(a, s)] = end;
        freeAt[s] = end;
        r.timeline[s].push_back({a, s, (int64_t)next[s], start, end});
        ++next[s];
        progress = true;
      }
    }
  }

  // Deadlock: follow "waits for" edges from a blocked stage's next action to
  // the stage that owes the missing dependency, until a stage repeats.
  for (int64_t s0 = 0; s0 < p; ++s0) {
    if (next[s0] == sch.perStage[s0].size())
      continue;
    std::vector<int64_t> chain; // stages in visiting order
    std::vector<Dep> waits;     // waits[k]: what chain[k]'s next action lacks
    int64_t cur = s0;
    while (std::find(chain.begin(), chain.end(), cur) == chain.end()) {
      chain.push_back(cur);
      const Action &a = sch.perStage[cur][next[cur]];
      Dep missing{};
      for (const Dep &d : depsOf(a, cur, p, v))
        if (endOf[slot(d.action, d.stage)] == notDone) {
          missing = d;
          break;
        }
      waits.push_back(missing);
      cur = missing.stage;
    }
    // The cycle starts where `cur` first appeared; rotate it to begin at its
    // lowest stage so the message does not depend on the scan order.
    size_t first = std::find(chain.begin(), chain.end(), cur) - chain.begin();
    std::vector<int64_t> cyc(chain.begin() + first, chain.end());
    std::vector<Dep> cw(waits.begin() + first, waits.end());
    size_t lo = std::min_element(cyc.begin(), cyc.end()) - cyc.begin();
    std::rotate(cyc.begin(), cyc.begin() + lo, cyc.end());
    std::rotate(cw.begin(), cw.begin() + lo, cw.end());
    auto act = [&](int64_t s) {
      return "stage " + std::to_string(s) + " action #" +
             std::to_string(next[s]) + " (" +
             label(sch.perStage[s][next[s]], v) + ")";
    };
    std::string msg = "deadlock: " + act(cyc[0]) + " can never start: ";
    std::string stagesList;
    for (size_t k = 0; k < cyc.size(); ++k) {
      const Dep &d = cw[k];
      int64_t owner = d.stage;
      int64_t idx = indexOf[slot(d.action, owner)];
      msg += (k ? ", which " : "it ") + std::string("waits for ") +
             label(d.action, v) + " (stage " + std::to_string(owner) +
             " action #" + std::to_string(idx) + ")";
      if (idx != (int64_t)next[owner])
        msg += ", queued behind " + act(owner);
      stagesList += (k ? ", " : "") + std::to_string(cyc[k]);
    }
    msg += "; a cyclic wait between stage" +
           std::string(cyc.size() > 1 ? "s " : " ") + stagesList;
    return Error{msg, cyc[0], (int64_t)next[cyc[0]]};
  }

  // Statistics.
  for (int64_t s = 0; s < p; ++s)
    for (const TimedAction &t : r.timeline[s])
      r.makespan = std::max(r.makespan, t.end);
  std::vector<int64_t> inflight = peakInFlight(sch),
                       pendingW = peakPendingWeightGrads(sch);
  double totalIdle = 0, totalBusy = 0;
  for (int64_t s = 0; s < p; ++s) {
    StageStats ss;
    for (const TimedAction &t : r.timeline[s])
      ss.busy += t.end - t.start;
    ss.idle = r.makespan - ss.busy;
    ss.idleFraction = r.makespan > 0 ? ss.idle / r.makespan : 0;
    ss.bubbleOverIdeal = ss.busy > 0 ? ss.idle / ss.busy : 0;
    ss.peakInFlight = inflight[s];
    ss.peakPendingWeightGrads = pendingW[s];
    totalIdle += ss.idle;
    totalBusy += ss.busy;
    r.perStage.push_back(ss);
  }
  r.idleFraction = r.makespan > 0 ? totalIdle / (r.makespan * (double)p) : 0;
  r.bubbleOverIdeal = totalBusy > 0 ? totalIdle / totalBusy : 0;
  return r;
}

Status llcdist::schedule::validateSchedule(const Schedule &schedule) {
  Expected<SimResult> r = simulate(schedule, CostModel());
  if (!r)
    return r.error();
  return Status::success();
}

double
llcdist::schedule::analyticBubbleOverIdeal(const ScheduleOptions &o,
                                           const CostModel &c) {
  const double p = (double)o.stages, m = (double)o.microbatches;
  switch (o.kind) {
  case ScheduleKind::GPipe:
  case ScheduleKind::OneFOneB:
    return (p - 1) / m;
  case ScheduleKind::Interleaved1F1B:
    return (p - 1) / ((double)o.virtualStages * m);
  case ScheduleKind::ZBH1:
    // Stage 0 idles (p-1)B before its first backward in any case; when W < F
    // the cool-down leaves (p-1)(F-W) more (Qi et al.'s (p-1)(F+B-W)).
    return (p - 1) * (c.backward + std::max(c.forward - c.weight, 0.0)) /
           (m * (c.forward + c.backward + c.weight));
  case ScheduleKind::Custom:
    break;
  }
  return std::numeric_limits<double>::quiet_NaN();
}
