//===- PlannerReport.cpp - the planner's results, as text and JSON --------===//
//
// PlanResult's order of the exact (compiled and simulated) candidates, its
// JSON and its printed table with the families' reasons; the search is
// Planner.cpp's.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Cost/Planner.h"

#include "PlannerText.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

using namespace llcdist;
using namespace llcdist::cost;
using namespace llcdist::cost::detail;
using json = nlohmann::ordered_json;

//===----------------------------------------------------------------------===//
// Reports
//===----------------------------------------------------------------------===//

std::vector<size_t> PlanResult::exactOrder() const {
  std::vector<size_t> order;
  for (size_t i = 0; i < exact.size(); ++i)
    order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (exact[a].ok != exact[b].ok)
      return exact[a].ok;
    return exact[a].ok && exact[a].stepSeconds < exact[b].stepSeconds;
  });
  for (size_t &i : order)
    i = exact[i].candidate;
  return order;
}

json cost::configJson(const ParallelConfig &c, int64_t globalBatch) {
  json j;
  j["dp"] = c.dp;
  j["tp"] = c.tp;
  j["pp"] = c.pp;
  j["cp"] = c.cp;
  j["cp_impl"] = c.cp > 1 ? json(c.cpImpl) : json(nullptr);
  if (c.ep > 1) // expert parallelism (mixture of experts)
    j["ep"] = c.ep;
  j["virtual_stages"] = c.virtualStages;
  j["micro_batch"] = c.microBatch;
  j["microbatches"] = c.microbatches(globalBatch);
  j["zero"] = c.zero;
  j["recompute"] = c.recompute;
  j["schedule"] = c.pp > 1 ? json(c.schedule) : json(nullptr);
  j["sequence_parallel"] = c.sequenceParallel;
  j["grad_bucket_size"] = c.gradBucket;
  j["fsdp_prefetch"] = c.fsdpPrefetch;
  j["compile_flags"] = c.compileFlags();
  return j;
}

static json memoryJson(const MemoryEstimate &m, int64_t reserve, int64_t capacity) {
  json j;
  j["params"] = m.params;
  j["grads"] = m.grads;
  j["optimizer"] = m.optimizer;
  j["activations"] = m.activations;
  j["reserve"] = reserve;
  j["total"] = m.total() + reserve;
  j["capacity"] = capacity;
  j["stage"] = m.stage;
  return j;
}

static json candidateJson(const Candidate &k, int64_t globalBatch) {
  const StepPrediction &p = k.prediction;
  json j;
  j["config"] = configJson(k.config, globalBatch);
  j["step_seconds"] = p.stepSeconds;
  j["tokens_per_second"] = p.tokensPerSecond;
  j["mfu"] = p.mfu;
  j["hfu"] = p.hfu;
  j["compute_seconds"] = p.computeSeconds;
  j["bubble_seconds"] = p.bubbleSeconds;
  j["bubble_share"] = k.bubbleShare();
  j["optimizer_seconds"] = p.optimizerSeconds;
  j["exposed_comm_seconds"] = p.exposedCommSeconds();
  j["exposed_comm_share"] = k.exposedCommShare();
  json comm = json::object();
  for (const auto &[axis, c] : p.comm)
    comm[axis] = {{"total_seconds", c.total}, {"exposed_seconds", c.exposed}};
  j["comm"] = comm;
  j["memory"] = memoryJson(p.memory, k.reserveBytes, k.capacityBytes);
  j["bound"] = p.bound;
  return j;
}

json PlanResult::toJson() const {
  json j;
  j["gpus"] = gpus;
  j["global_batch"] = globalBatch;
  j["seq_len"] = seqLen;
  j["capacity_bytes"] = capacityBytes;
  j["counters"] = {{"meshes", meshes},
                   {"evaluated", evaluated},
                   {"pruned_divisibility", prunedDivisibility},
                   {"pruned_memory", prunedMemory},
                   {"feasible", feasible},
                   {"duplicates", duplicates},
                   {"search_seconds", searchSeconds},
                   {"configs_per_second", configsPerSecond()},
                   {"exact_seconds", exactSeconds}};
  json top_ = json::array();
  for (size_t i = 0; i < top.size(); ++i) {
    json c = candidateJson(top[i], globalBatch);
    c["rank"] = i + 1;
    top_.push_back(std::move(c));
  }
  j["top"] = std::move(top_);
  if (!top.empty())
    j["winner"] = {{"config", configJson(top.front().config, globalBatch)}, {"why", winnerWhy}};
  else
    j["winner"] = nullptr;
  if (closest)
    j["closest"] = {{"config", configJson(*closest, globalBatch)}, {"oom_gib", closestOomGiB}};
  json fams = json::array();
  for (const FamilyReport &f : families) {
    json x;
    x["kind"] = f.kind;
    x["key"] = f.key;
    x["members"] = f.members;
    x["pruned_divisibility"] = f.prunedDivisibility;
    x["pruned_memory"] = f.prunedMemory;
    x["feasible"] = f.feasible;
    x["reason"] = lossReasonName(f.reason);
    x["why"] = f.why;
    if (f.best) {
      x["best"] = candidateJson(*f.best, globalBatch);
      x["slower_percent"] = f.slowerPercent;
      x["bubble_share"] = f.bubbleShare;
      x["exposed_comm_share"] = f.exposedCommShare;
      if (f.reason == LossReason::Communication) {
        x["comm_axis"] = f.commAxis;
        x["comm_crosses_nodes"] = f.commCrossesNodes;
      }
    }
    if (f.closest) {
      x["closest"] = configJson(*f.closest, globalBatch);
      x["closest_memory"] = memoryJson(f.closestMemory, f.closestReserve, capacityBytes);
      x["oom_gib"] = f.oomGiB;
    }
    if (!f.divisibility.empty())
      x["divisibility"] = f.divisibility;
    fams.push_back(std::move(x));
  }
  j["families"] = std::move(fams);
  json ex = json::array();
  for (const ExactResult &e : exact) {
    json x;
    x["rank"] = e.candidate + 1;
    x["ok"] = e.ok;
    x["analytic_step_seconds"] =
        e.candidate < top.size() ? top[e.candidate].prediction.stepSeconds : 0.0;
    x["exact_step_seconds"] = e.ok ? json(e.stepSeconds) : json(nullptr);
    x["compile_seconds"] = e.compileSeconds;
    x["simulate_seconds"] = e.simulateSeconds;
    if (!e.error.empty())
      x["error"] = e.error;
    if (!e.planDir.empty())
      x["plan_dir"] = e.planDir;
    ex.push_back(std::move(x));
  }
  j["exact"] = std::move(ex);
  json order = json::array();
  if (!exact.empty())
    for (size_t i : exactOrder())
      order.push_back(i + 1);
  j["exact_ranking"] = std::move(order);
  return j;
}

void PlanResult::print(std::ostream &os) const {
  os << strf("searched %lld configurations on %lld meshes of %lld GPUs in %.2f s (%.0f per "
             "second): %lld do not compile (divisibility), %lld do not fit (memory), %lld fit\n",
             (long long)evaluated, (long long)meshes, (long long)gpus, searchSeconds,
             configsPerSecond(), (long long)prunedDivisibility, (long long)prunedMemory,
             (long long)feasible);
  if (top.empty()) {
    if (closest)
      os << strf("nothing fits: the closest, %s, is out of memory by %.2f GiB\n",
                 closest->str().c_str(), closestOomGiB);
    return;
  }
  bool haveExact = !exact.empty();
  size_t width = 6;
  for (const Candidate &k : top)
    width = std::max(width, k.config.str().size());
  os << "\n" << strf("  #  %-*s  %9s  %6s  %10s  %9s  %6s  %7s", int(width), "config", "step (s)",
                     "MFU", "tokens/s", "mem/rank", "bubble", "exp.comm");
  if (haveExact)
    os << strf("  %9s  %5s", "exact (s)", "rank");
  os << "\n";
  std::vector<size_t> order = haveExact ? exactOrder() : std::vector<size_t>{};
  for (size_t i = 0; i < top.size(); ++i) {
    const Candidate &k = top[i];
    const StepPrediction &p = k.prediction;
    os << strf("  %zu  %-*s  %9.4g  %5.1f%%  %10s  %5.1f GiB  %5.1f%%  %6.1f%%", i + 1,
               int(width), k.config.str().c_str(), p.stepSeconds, 100 * p.mfu,
               fmtTokens(p.tokensPerSecond).c_str(), gib(double(k.memoryBytes())),
               100 * k.bubbleShare(), 100 * k.exposedCommShare());
    if (haveExact) {
      const ExactResult *e = nullptr;
      for (const ExactResult &x : exact)
        if (x.candidate == i)
          e = &x;
      size_t rank = size_t(std::find(order.begin(), order.end(), i) - order.begin()) + 1;
      if (e && e->ok)
        os << strf("  %9.4g  %5zu", e->stepSeconds, rank);
      else if (e)
        os << strf("  %9s  %5s", "failed", "-");
    }
    os << "\n";
  }
  os << "\nthe winner: " << top.front().config.compileFlags() << "\n";
  for (const std::string &s : winnerWhy)
    os << "  - " << s << "\n";
  if (!families.empty()) {
    os << "\nrejected families (the best member of each, and why it lost):\n";
    for (const FamilyReport &f : families)
      os << strf("  %-4s %-22s %s\n", f.kind.c_str(), f.key.c_str(), f.why.c_str());
  }
  if (haveExact) {
    os << strf("\nexact: the top %zu compiled and simulated in %.2f s\n", exact.size(),
               exactSeconds);
    for (const ExactResult &e : exact) {
      if (!e.ok) {
        os << strf("  #%zu failed: %s\n", e.candidate + 1, e.error.c_str());
        continue;
      }
      double a = top[e.candidate].prediction.stepSeconds;
      os << strf("  #%zu analytic %.4g s, simulated %.4g s (%+.1f %%; compile %.2f s, simulate "
                 "%.2f s)\n",
                 e.candidate + 1, a, e.stepSeconds, (e.stepSeconds / a - 1) * 100,
                 e.compileSeconds, e.simulateSeconds);
    }
    std::vector<size_t> o = exactOrder();
    if (!o.empty() && exact[0].ok && o.front() != 0)
      os << strf("  reranked by the simulation: #%zu is fastest (%s)\n", o.front() + 1,
                 top[o.front()].config.str().c_str());
  }
}
