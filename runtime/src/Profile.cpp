// The --profile table (Profile.h).
#include "llcdist/runtime/Profile.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <iterator>
#include <map>
#include <set>

namespace llcdist::rt {

Profile computeProfile(const Timeline& timeline, int64_t firstStep, int rank) {
  Profile p;
  p.rank = rank;
  p.firstStep = firstStep;
  struct Span {
    int64_t begin = std::numeric_limits<int64_t>::max(), end = std::numeric_limits<int64_t>::min();
  };
  std::map<int64_t, Span> steps;
  std::map<std::pair<std::string, std::string>, ProfileRow> rows;
  int64_t ops = 0;
  if (firstStep == kSkipFirstStep) {
    std::set<int64_t> recorded;
    for (const TimelineEvent& e : timeline.events()) recorded.insert(e.step);
    firstStep = recorded.size() > 1 ? *std::next(recorded.begin()) : recorded.empty() ? 0 : *recorded.begin();
  }
  for (const TimelineEvent& e : timeline.events()) {
    if (e.step < firstStep) continue;
    Span& s = steps[e.step];
    // The step's span: its compute-lane ops and its synchronous communication (queue 0); work on other
    // queues overlaps it.
    if (e.queue == 0) {
      s.begin = std::min(s.begin, e.startNs);
      s.end = std::max(s.end, e.endNs);
    }
    ProfileRow& r = rows[{std::string(e.name), std::string(e.variant)}];
    r.kind = std::string(e.name);
    r.variant = std::string(e.variant);
    r.calls += 1;
    r.ns += double(e.endNs - e.startNs);
    r.flops += e.flops;
    ++ops;
  }
  if (steps.empty()) return p;
  p.firstStep = steps.begin()->first;
  p.steps = int64_t(steps.size());
  double stepNs = 0;
  for (const auto& [step, span] : steps)
    if (span.end > span.begin) stepNs += double(span.end - span.begin);
  const double n = double(p.steps);
  p.stepNs = stepNs / n;
  p.opsPerStep = double(ops) / n;
  for (auto& [key, r] : rows) {
    r.calls /= n;
    r.ns /= n;
    r.flops /= n;
    r.share = p.stepNs > 0 ? r.ns / p.stepNs : 0;
    p.busyNs += r.ns;
    p.rows.push_back(r);
  }
  std::stable_sort(p.rows.begin(), p.rows.end(), [](const ProfileRow& a, const ProfileRow& b) { return a.ns > b.ns; });
  return p;
}

void printProfile(const Profile& p, const std::vector<Interpreter::KernelChoiceSummary>& choices,
                  std::ostream& out) {
  char line[256];
  if (p.steps == 0) {
    out << "profile: rank " << p.rank << ": no step was measured\n";
  } else {
    std::snprintf(line, sizeof line, "profile: rank %d, steps %lld-%lld (%lld), %.3f ms/step on the device, %.0f ops/step, "
                  "%.1f%% idle\n",
                  p.rank, (long long)p.firstStep, (long long)(p.firstStep + p.steps - 1), (long long)p.steps,
                  p.stepNs * 1e-6, p.opsPerStep, p.stepNs > 0 ? 100.0 * p.idleNs() / p.stepNs : 0.0);
    out << line;
    std::snprintf(line, sizeof line, "  %-26s %-9s %11s %10s %7s %9s\n", "op kind", "variant", "calls/step", "ms/step",
                  "share", "TFLOP/s");
    out << line;
    for (const ProfileRow& r : p.rows) {
      char tf[32] = "";
      if (r.flops > 0) std::snprintf(tf, sizeof tf, "%9.1f", r.tflops());
      std::snprintf(line, sizeof line, "  %-26s %-9s %11.1f %10.3f %6.1f%% %9s\n", r.kind.c_str(),
                    r.variant.empty() ? "-" : r.variant.c_str(), r.calls, r.ns * 1e-6, 100.0 * r.share, tf);
      out << line;
    }
    std::snprintf(line, sizeof line, "  %-26s %-9s %11s %10.3f %6.1f%%\n", "(idle)", "", "", p.idleNs() * 1e-6,
                  p.stepNs > 0 ? 100.0 * p.idleNs() / p.stepNs : 0.0);
    out << line;
  }
  if (choices.empty()) return;
  out << "kernels:";
  bool first = true;
  for (const Interpreter::KernelChoiceSummary& c : choices) {
    out << (first ? " " : "; ") << schema::opName(c.kind) << " " << c.variant << " x" << c.ops;
    if (c.convertedArgs > 0) out << " (" << c.convertedArgs << " bf16 arguments converted to f32)";
    if (!c.passedOver.empty()) out << " (passed over " << c.passedOver << ")";
    first = false;
  }
  out << "\n";
}

}  // namespace llcdist::rt
