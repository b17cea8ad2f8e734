//===- Render.cpp - text Gantt chart and Chrome trace ---------------------===//
#include "llcdist/Schedule/Render.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

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

namespace {
/// `v` as nlohmann's dump writes a double: integral values below 1e15 as
/// digits and ".0" (the trace's times, in practice), others through it.
void appendNumber(std::string &out, double v) {
  if (std::isfinite(v) && v == std::trunc(v) && std::fabs(v) < 1e15 &&
      !(v == 0 && std::signbit(v))) {
    out += std::to_string(static_cast<int64_t>(v));
    out += ".0";
  } else {
    out += nlohmann::json(v).dump();
  }
}
} // namespace

// Written as text, one event after another: what nlohmann's dump() of the
// document gives (keys in its std::map order), without building a map per
// event (a 64-microbatch interleaved schedule has thousands).
std::string llcdist::schedule::renderChromeTrace(const SimResult &r,
                                                 double usPerUnit) {
  std::string out = R"({"displayTimeUnit":"ms","traceEvents":[)";
  out += R"({"args":{"name":"pipeline schedule"},"name":"process_name","ph":"M","pid":0})";
  for (size_t s = 0; s < r.timeline.size(); ++s) {
    out += R"(,{"args":{"name":)";
    out += nlohmann::json("stage " + std::to_string(s)).dump();
    out += R"(},"name":"thread_name","ph":"M","pid":0,"tid":)";
    out += std::to_string(s);
    out += "}";
  }
  for (const auto &row : r.timeline)
    for (const TimedAction &t : row) {
      out += R"(,{"args":{"chunk":)";
      out += std::to_string(t.action.chunk);
      out += R"(,"index":)";
      out += std::to_string(t.index);
      out += R"(,"microbatch":)";
      out += std::to_string(t.action.microbatch);
      out += R"(},"cat":)";
      out += nlohmann::json(std::string(1, kindLetter(t.action.kind))).dump();
      out += R"(,"dur":)";
      appendNumber(out, (t.end - t.start) * usPerUnit);
      out += R"(,"name":)";
      out += nlohmann::json(label(t.action, r.virtualStages)).dump();
      out += R"(,"ph":"X","pid":0,"tid":)";
      out += std::to_string(t.stage);
      out += R"(,"ts":)";
      appendNumber(out, t.start * usPerUnit);
      out += "}";
    }
  out += "]}";
  return out;
}
