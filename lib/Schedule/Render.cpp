//===- Render.cpp - text Gantt chart and Chrome trace ---------------------===//
#include "llcdist/Schedule/Render.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

using namespace llcdist::schedule;

std::string llcdist::schedule::renderGantt(const SimResult &r, double unit) {
  if (unit <= 0) {
    unit = std::numeric_limits<double>::infinity();
    for (const auto &row : r.timeline)
      for (const TimedAction &t : row)
        if (t.end > t.start)
          unit = std::min(unit, t.end - t.start);
    if (!std::isfinite(unit))
      unit = 1;
  }
  auto col = [&](double t) { return (int64_t)std::llround(t / unit); };
  const int64_t ncols = col(r.makespan);
  size_t width = 1;
  for (const auto &row : r.timeline)
    for (const TimedAction &t : row)
      width = std::max(width, label(t.action, r.virtualStages).size());
  std::string out;
  for (size_t s = 0; s < r.timeline.size(); ++s) {
    std::vector<std::string> cells((size_t)std::max<int64_t>(ncols, 0), ".");
    for (const TimedAction &t : r.timeline[s]) {
      int64_t b = col(t.start), e = std::max(col(t.end), b + 1);
      for (int64_t c = b; c < e && c < ncols; ++c)
        cells[c] = c == b ? label(t.action, r.virtualStages) : "-";
    }
    std::string line = "S" + std::to_string(s) + ":";
    for (const std::string &c : cells)
      line += " " + c + std::string(width - c.size(), ' ');
    while (!line.empty() && line.back() == ' ')
      line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string llcdist::schedule::renderChromeTrace(const SimResult &r,
                                                 double usPerUnit) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", 0},
                    {"args", {{"name", "pipeline schedule"}}}});
  for (size_t s = 0; s < r.timeline.size(); ++s)
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", s},
                      {"args", {{"name", "stage " + std::to_string(s)}}}});
  for (const auto &row : r.timeline)
    for (const TimedAction &t : row) {
      std::string kind(1, kindLetter(t.action.kind));
      events.push_back({{"name", label(t.action, r.virtualStages)},
                        {"cat", kind},
                        {"ph", "X"},
                        {"ts", t.start * usPerUnit},
                        {"dur", (t.end - t.start) * usPerUnit},
                        {"pid", 0},
                        {"tid", t.stage},
                        {"args",
                         {{"microbatch", t.action.microbatch},
                          {"chunk", t.action.chunk},
                          {"index", t.index}}}});
    }
  nlohmann::json doc = {{"traceEvents", events},
                        {"displayTimeUnit", "ms"}};
  return doc.dump();
}
