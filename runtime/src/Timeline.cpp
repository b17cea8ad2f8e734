// Chrome trace rendering of the ranks' measured timelines. See Timeline.h.
#include "llcdist/runtime/Timeline.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>

namespace llcdist::rt {

std::string renderChromeTrace(const std::vector<const Timeline*>& ranks) {
  // One time axis for all ranks: the earliest interval recorded anywhere is 0.
  int64_t origin = std::numeric_limits<int64_t>::max();
  for (const Timeline* t : ranks)
    if (t)
      for (const TimelineEvent& e : t->events()) origin = std::min(origin, e.startNs);
  nlohmann::json events = nlohmann::json::array();
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r]) continue;
    events.push_back(
        {{"name", "process_name"}, {"ph", "M"}, {"pid", r}, {"args", {{"name", "rank " + std::to_string(r)}}}});
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", r}, {"tid", 0}, {"args", {{"name", "compute"}}}});
    // Lane 1 is "communication" unless the program has a second queue, which names it; lanes 2, ...
    // are the further queues (feature "async").
    const std::vector<std::string>& queues = ranks[r]->queues();
    for (size_t q = 1; q < std::max<size_t>(queues.size(), 2); ++q)
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", r},
                        {"tid", q},
                        {"args", {{"name", q < queues.size() ? queues[q] : std::string("communication")}}}});
  }
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r]) continue;
    for (const TimelineEvent& e : ranks[r]->events()) {
      const bool comm = e.lane == TraceLane::kCommunication;
      nlohmann::json args = {{"loc", e.loc ? *e.loc : std::string()},
                             {"step", e.step},
                             {"microbatch", e.microbatch},
                             {"action", e.action},
                             {"subroutine", e.subroutine ? *e.subroutine : std::string()}};
      if (!e.variant.empty()) args["variant"] = std::string(e.variant);  // the kernel variant that ran
      if (e.flops > 0) args["flops"] = e.flops;
      events.push_back({{"name", std::string(e.name)},
                        {"cat", comm ? "communication" : "compute"},
                        {"ph", "X"},
                        {"ts", double(e.startNs - origin) / 1000.0},
                        {"dur", double(e.endNs - e.startNs) / 1000.0},
                        {"pid", r},
                        {"tid", comm ? std::max(1, e.queue) : 0},
                        {"args", std::move(args)}});
    }
  }
  // One event per line: still one JSON document, and greppable.
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  for (size_t i = 0; i < events.size(); ++i) out += events[i].dump() + (i + 1 < events.size() ? ",\n" : "\n");
  return out + "]}";
}

Status writeChromeTrace(const std::string& path, const std::vector<const Timeline*>& ranks) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc | std::ios::binary);
    if (!f) return Status::ioError("'" + tmp + "': cannot open for writing");
    f << renderChromeTrace(ranks) << '\n';
    f.close();
    if (!f) {
      std::remove(tmp.c_str());
      return Status::ioError("'" + tmp + "': write failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::ioError("'" + path + "': cannot rename the temporary file into place");
  }
  return Status::ok();
}

}  // namespace llcdist::rt
