//===- Schedule.cpp - schedule types, parsing, structural checks ----------===//
#include "llcdist/Schedule/Schedule.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <tuple>

using namespace llcdist::schedule;

char llcdist::schedule::kindLetter(ActionKind k) {
  switch (k) {
  case ActionKind::F:
    return 'F';
  case ActionKind::B:
    return 'B';
  case ActionKind::W:
    return 'W';
  }
  return '?';
}

std::string llcdist::schedule::label(const Action &a, int64_t virtualStages) {
  std::string s(1, kindLetter(a.kind));
  s += std::to_string(a.microbatch);
  if (virtualStages > 1 || a.chunk != 0)
    s += "c" + std::to_string(a.chunk);
  return s;
}

const char *llcdist::schedule::kindName(ScheduleKind k) {
  switch (k) {
  case ScheduleKind::GPipe:
    return "gpipe";
  case ScheduleKind::OneFOneB:
    return "1f1b";
  case ScheduleKind::Interleaved1F1B:
    return "interleaved";
  case ScheduleKind::ZBH1:
    return "zb-h1";
  case ScheduleKind::Custom:
    return "custom";
  }
  return "?";
}

Expected<ScheduleKind>
llcdist::schedule::parseScheduleKind(std::string_view name) {
  for (ScheduleKind k : {ScheduleKind::GPipe, ScheduleKind::OneFOneB,
                         ScheduleKind::Interleaved1F1B, ScheduleKind::ZBH1})
    if (name == kindName(k))
      return k;
  return Error{"unknown schedule '" + std::string(name) +
               "' (expected gpipe, 1f1b, interleaved or zb-h1)"};
}

Expected<Schedule> llcdist::schedule::parseSchedule(std::string_view text,
                                                    int64_t microbatches,
                                                    int64_t virtualStages) {
  Schedule sched;
  sched.kind = ScheduleKind::Custom;
  sched.microbatches = microbatches;
  sched.virtualStages = virtualStages;
  std::vector<std::string_view> lines;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find_first_of("\n|", pos);
    if (end == std::string_view::npos)
      end = text.size();
    lines.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  // Drop blank lines at either end (a trailing newline).
  auto blank = [](std::string_view l) {
    return std::all_of(l.begin(), l.end(),
                       [](char c) { return std::isspace((unsigned char)c); });
  };
  while (!lines.empty() && blank(lines.back()))
    lines.pop_back();
  while (!lines.empty() && blank(lines.front()))
    lines.erase(lines.begin());
  if (lines.empty())
    return Error{"empty schedule text: expected one line of actions per stage"};
  for (size_t s = 0; s < lines.size(); ++s) {
    std::vector<Action> list;
    std::string_view l = lines[s];
    size_t i = 0;
    while (i < l.size()) {
      if (std::isspace((unsigned char)l[i])) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < l.size() && !std::isspace((unsigned char)l[j]))
        ++j;
      std::string tok(l.substr(i, j - i));
      auto bad = [&] {
        return Error{"stage " + std::to_string(s) + ": bad action '" + tok +
                         "' (expected F<mb>, B<mb> or W<mb>, optionally "
                         "followed by c<chunk>, e.g. F3 or B2c1)",
                     (int64_t)s, (int64_t)list.size()};
      };
      Action a;
      char k = tok[0];
      if (k == 'F')
        a.kind = ActionKind::F;
      else if (k == 'B')
        a.kind = ActionKind::B;
      else if (k == 'W')
        a.kind = ActionKind::W;
      else
        return bad();
      size_t p = 1;
      auto number = [&](int64_t &out) {
        size_t q = p;
        while (q < tok.size() && std::isdigit((unsigned char)tok[q]))
          ++q;
        if (q == p || q - p > 9)
          return false;
        out = std::stoll(tok.substr(p, q - p));
        p = q;
        return true;
      };
      if (!number(a.microbatch))
        return bad();
      if (p < tok.size()) {
        if (tok[p] != 'c')
          return bad();
        ++p;
        if (!number(a.chunk) || p != tok.size())
          return bad();
      }
      if (a.kind == ActionKind::W)
        sched.splitBackward = true;
      list.push_back(a);
      i = j;
    }
    sched.perStage.push_back(std::move(list));
  }
  sched.stages = (int64_t)sched.perStage.size();
  return sched;
}

std::string llcdist::schedule::toString(const Schedule &schedule) {
  std::string out;
  for (size_t s = 0; s < schedule.perStage.size(); ++s) {
    out += "stage " + std::to_string(s) + ":";
    for (const Action &a : schedule.perStage[s])
      out += " " + label(a, schedule.virtualStages);
    out += "\n";
  }
  return out;
}

Status llcdist::schedule::validateStructure(const Schedule &sch) {
  const int64_t p = sch.stages, m = sch.microbatches, v = sch.virtualStages;
  if (p < 1)
    return Error{"a schedule needs at least one pipeline stage (got " +
                 std::to_string(p) + ")"};
  if (m < 1)
    return Error{"a schedule needs at least one microbatch (got " +
                 std::to_string(m) + ")"};
  if (v < 1)
    return Error{"virtual stages per device must be >= 1 (got " +
                 std::to_string(v) + ")"};
  if ((int64_t)sch.perStage.size() != p)
    return Error{"the schedule declares " + std::to_string(p) +
                 " stages but has action lists for " +
                 std::to_string(sch.perStage.size())};
  const int nk = sch.splitBackward ? 3 : 2;
  for (int64_t s = 0; s < p; ++s) {
    const std::vector<Action> &list = sch.perStage[s];
    std::string where = "stage " + std::to_string(s) + ": ";
    // first index of each (kind, mb, chunk)
    std::vector<int64_t> at((size_t)(3 * m * v), -1);
    auto slot = [&](const Action &a) {
      return ((size_t)a.kind * m + a.microbatch) * v + a.chunk;
    };
    for (int64_t i = 0; i < (int64_t)list.size(); ++i) {
      const Action &a = list[i];
      std::string what =
          "action #" + std::to_string(i) + " (" + label(a, v) + ")";
      if (a.microbatch < 0 || a.microbatch >= m)
        return Error{where + what + " names microbatch " +
                         std::to_string(a.microbatch) + ", outside [0, " +
                         std::to_string(m) + ")",
                     s, i};
      if (a.chunk < 0 || a.chunk >= v)
        return Error{where + what + " names chunk " + std::to_string(a.chunk) +
                         ", outside [0, " + std::to_string(v) + ")",
                     s, i};
      if (a.kind == ActionKind::W && !sch.splitBackward)
        return Error{where + what +
                         " is a weight-gradient action in a schedule whose "
                         "backward is not split",
                     s, i};
      int64_t &first = at[slot(a)];
      if (first >= 0)
        return Error{where + what + " repeats action #" +
                         std::to_string(first) + "; each action runs once",
                     s, i};
      first = i;
    }
    // Every expected action present.
    for (int k = 0; k < nk; ++k)
      for (int64_t c = 0; c < v; ++c)
        for (int64_t mb = 0; mb < m; ++mb) {
          Action a{(ActionKind)k, mb, c};
          if (at[slot(a)] < 0)
            return Error{where + "missing " + label(a, v) + " (every stage runs " +
                             (sch.splitBackward ? "F, B and W" : "F and B") +
                             " once for each microbatch (m=" +
                             std::to_string(m) + ")" +
                             (v > 1 ? " and chunk (v=" + std::to_string(v) + ")"
                                    : std::string()) +
                             ")",
                         s};
        }
    // Same-stage order: F before B before W.
    for (int64_t i = 0; i < (int64_t)list.size(); ++i) {
      const Action &a = list[i];
      if (a.kind == ActionKind::F)
        continue;
      Action need{a.kind == ActionKind::B ? ActionKind::F : ActionKind::B,
                  a.microbatch, a.chunk};
      int64_t j = at[slot(need)];
      if (j > i)
        return Error{where + "action #" + std::to_string(i) + " (" +
                         label(a, v) + ") comes before " + label(need, v) +
                         " (action #" + std::to_string(j) +
                         ") on the same stage; " +
                         (a.kind == ActionKind::B
                              ? "a backward needs its forward's activations"
                              : "a weight gradient needs its backward's "
                                "output gradient"),
                     s, i};
    }
  }
  return Status::success();
}

namespace {
std::vector<int64_t> peakOf(const Schedule &sch, ActionKind open,
                            ActionKind close) {
  std::vector<int64_t> out;
  for (const std::vector<Action> &list : sch.perStage) {
    int64_t cur = 0, peak = 0;
    for (const Action &a : list) {
      if (a.kind == open)
        peak = std::max(peak, ++cur);
      else if (a.kind == close)
        --cur;
    }
    out.push_back(peak);
  }
  return out;
}
} // namespace

std::vector<int64_t> llcdist::schedule::peakInFlight(const Schedule &sch) {
  return peakOf(sch, ActionKind::F, ActionKind::B);
}

std::vector<int64_t>
llcdist::schedule::peakPendingWeightGrads(const Schedule &sch) {
  if (!sch.splitBackward)
    return std::vector<int64_t>(sch.perStage.size(), 0);
  return peakOf(sch, ActionKind::B, ActionKind::W);
}
