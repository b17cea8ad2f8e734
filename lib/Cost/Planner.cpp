//===- Planner.cpp - choosing a parallel configuration --------------------===//
//
// The search of Planner.h: nested loops over the knobs with one
// ParallelConfig edited in place, each configuration checked (checkConfig),
// fitted (estimateMemory + the device reserve) and priced (predictStep);
// per-family accumulators indexed by the loop level they belong to; the
// reports built once, after the search, for the few that survive.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Cost/Planner.h"

#include "PlannerText.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>

using namespace llcdist;
using namespace llcdist::cost;
using json = nlohmann::ordered_json;

namespace {

using namespace llcdist::cost::detail;

const char *const kSchedules[] = {"gpipe", "1f1b", "interleaved", "zb-h1"};
const char *const kRecomputes[] = {"none", "selective", "full"};
const char *const kCpImpls[] = {"ring", "all-to-all"};

std::vector<int64_t> divisorsOf(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i * i <= n; ++i)
    if (n % i == 0) {
      d.push_back(i);
      if (i != n / i)
        d.push_back(n / i);
    }
  std::sort(d.begin(), d.end());
  return d;
}

/// The NCCL communicators a rank of `c` joins: one per axis of size > 1;
/// under expert parallelism also its ep group's and its shard's replicas'
/// (edp, dp / ep > 1; edp × cp under context parallelism).
int64_t communicatorsOf(const ParallelConfig &c) {
  return int64_t(c.dp > 1) + int64_t(c.tp > 1) + int64_t(c.pp > 1) + int64_t(c.cp > 1) + int64_t(c.ep > 1) +
         int64_t(c.ep > 1 && c.expertDataParallelGroup() > 1);
}
constexpr size_t kMaxCommunicators = 6;

/// The families a configuration belongs to: its mesh and one per knob that
/// applies to it (-1: none).
enum FamilySlot { kMesh, kMb, kSchedule, kVirtual, kZero, kBucket, kPrefetch, kRecompute, kSp, kCpImpl, kEp, kSlots };
using FamilyIdx = std::array<int, kSlots>;

struct FamilyAcc {
  std::string kind, key;
  int64_t members = 0, div = 0, mem = 0, feasible = 0;
  double bestStep = std::numeric_limits<double>::infinity();
  ParallelConfig best;
  int64_t closestExcess = std::numeric_limits<int64_t>::max();
  ParallelConfig closest;
  std::string divReason;
};

struct Ranked {
  double step;
  int64_t memory;
  ParallelConfig config;
  FamilyIdx fams;
};

/// The knob families, created before the search: slot -> value -> index.
struct KnobFamilies {
  std::vector<FamilyAcc> &accs;
  std::map<std::pair<int, int64_t>, int> index;
  int get(int slot, int64_t value, const char *knob, const std::string &valueText) {
    auto [it, inserted] = index.try_emplace({slot, value}, int(accs.size()));
    if (inserted) {
      FamilyAcc a;
      a.kind = "knob";
      a.key = std::string(knob) + "=" + valueText;
      accs.push_back(std::move(a));
    }
    return it->second;
  }
};

/// The parts of a step that add up to it: what the time went to.
struct StepParts {
  double compute, bubble, optimizer;
  std::map<std::string, double> exposed;
};
StepParts partsOf(const StepPrediction &p) {
  StepParts s{0, p.bubbleSeconds, p.optimizerSeconds, {}};
  double comm = 0;
  for (const auto &[axis, c] : p.comm) {
    s.exposed[axis] = c.exposed;
    comm += c.exposed;
  }
  s.compute = std::max(0.0, p.stepSeconds - p.bubbleSeconds - p.optimizerSeconds - comm);
  return s;
}

double exposedOf(const StepPrediction &p, const std::string &axis) {
  auto it = p.comm.find(axis);
  return it == p.comm.end() ? 0 : it->second.exposed;
}

bool axisCrosses(const Hardware &hw, const ParallelConfig &c, const std::string &axis) {
  return axisGroup(c.mesh(), axis, hw.topology).crossesNodes();
}

Candidate makeCandidate(const Hardware &hw, const Workload &w, const ParallelConfig &c) {
  Candidate k;
  k.config = c;
  k.prediction = predictStep(hw, w, c);
  k.capacityBytes = hw.device.memoryBytes;
  k.reserveBytes = hw.device.reserve.bytes(hw.device.memoryBytes, communicatorsOf(c));
  return k;
}

std::string memoryText(const MemoryEstimate &m, int64_t reserve) {
  return strf("params %.1f + grads %.1f + optimizer %.1f + activations %.1f + reserve %.1f GiB", gib(double(m.params)),
              gib(double(m.grads)), gib(double(m.optimizer)), gib(double(m.activations)), gib(double(reserve)));
}

/// Fills `f`'s reason against the winner `win` (f.best set).
void explainSlower(const Hardware &hw, const Candidate &win, FamilyReport &f) {
  const Candidate &b = *f.best;
  const StepPrediction &bp = b.prediction, &wp = win.prediction;
  f.slowerPercent = (bp.stepSeconds / wp.stepSeconds - 1) * 100;
  f.bubbleShare = b.bubbleShare();
  f.exposedCommShare = b.exposedCommShare();
  StepParts bs = partsOf(bp), ws = partsOf(wp);
  // The part that grew most explains the loss.
  LossReason reason = LossReason::Compute;
  double most = bs.compute - ws.compute;
  std::string axis;
  if (bs.bubble - ws.bubble > most) {
    most = bs.bubble - ws.bubble;
    reason = LossReason::Bubble;
  }
  for (const auto &[a, e] : bs.exposed) {
    double d = e - (ws.exposed.count(a) ? ws.exposed.at(a) : 0);
    if (d > most) {
      most = d;
      reason = LossReason::Communication;
      axis = a;
    }
  }
  if (bs.optimizer - ws.optimizer > most) {
    most = bs.optimizer - ws.optimizer;
    reason = LossReason::Optimizer;
    axis.clear();
  }
  if (std::fabs(f.slowerPercent) < 0.05)
    reason = LossReason::Tie;
  f.reason = reason;
  std::string head = strf("slower by %.1f %% (%.4g s vs the winner's %.4g s per step)", f.slowerPercent, bp.stepSeconds,
                          wp.stepSeconds);
  switch (reason) {
  case LossReason::Tie:
    f.why = strf("ties with the winner (%.4g s vs %.4g s per step): the model prices this the "
                 "same; the search keeps the first it met",
                 bp.stepSeconds, wp.stepSeconds);
    break;
  case LossReason::Bubble:
    f.why = head + strf(": bubble-bound: its pipeline bubble is %.4g s, %.1f %% of its step "
                        "(the winner's: %.4g s, %.1f %%)",
                        bs.bubble, 100 * f.bubbleShare, ws.bubble, 100 * win.bubbleShare());
    break;
  case LossReason::Communication: {
    f.commAxis = axis;
    f.commCrossesNodes = axisCrosses(hw, b.config, axis);
    double e = bs.exposed[axis];
    f.why = head + strf(": communication-bound %s: exposed %s communication %.4g s, %.1f %% "
                        "of its step (the winner's %s: %.4g s)",
                        f.commCrossesNodes ? "across nodes" : "inside a node", axis.c_str(), e,
                        100 * e / bp.stepSeconds, axis.c_str(), ws.exposed.count(axis) ? ws.exposed.at(axis) : 0.0);
    if (f.commCrossesNodes)
      f.why += strf(" — its %s groups span nodes of %lld GPUs", axis.c_str(), (long long)hw.topology.gpusPerNode);
    break;
  }
  case LossReason::Optimizer:
    f.why = head + strf(": its optimizer step takes %.4g s (the winner's: %.4g s)", bs.optimizer, ws.optimizer);
    break;
  default: {
    f.why = head + strf(": more compute on its busiest stage: %.4g s vs %.4g s (HFU %.1f %%, "
                        "MFU %.1f %%)",
                        bs.compute, ws.compute, 100 * bp.hfu, 100 * bp.mfu);
    if (b.config.recompute != win.config.recompute && b.config.recompute != "none")
      f.why +=
          strf("; recompute %s runs %s again", b.config.recompute.c_str(),
               b.config.recompute == "full" ? "every layer's forward (what its backward reads)" : "the core attention");
    break;
  }
  }
}

} // namespace

int64_t cost::autoGradBucket(int64_t dp) { return std::max<int64_t>(40000000, 1000000 * dp); }

const char *cost::lossReasonName(LossReason r) {
  switch (r) {
  case LossReason::Divisibility:
    return "divisibility";
  case LossReason::Memory:
    return "memory";
  case LossReason::Bubble:
    return "bubble";
  case LossReason::Communication:
    return "communication";
  case LossReason::Compute:
    return "compute";
  case LossReason::Optimizer:
    return "optimizer";
  case LossReason::Tie:
    return "tie";
  }
  return "?";
}

double Candidate::bubbleShare() const {
  return prediction.stepSeconds > 0 ? prediction.bubbleSeconds / prediction.stepSeconds : 0;
}
double Candidate::exposedCommShare() const {
  return prediction.stepSeconds > 0 ? prediction.exposedCommSeconds() / prediction.stepSeconds : 0;
}

//===----------------------------------------------------------------------===//
// The search
//===----------------------------------------------------------------------===//

namespace {
/// The meshes of `n` GPUs: tp a divisor of the GPUs, pp a divisor of the
/// rest, dp what is left (within the bounds and --fix).
struct Mesh {
  int64_t dp, tp, pp, cp;
  int64_t dataParallelGroup() const { return dp * cp; } ///< ZeRO's and the buckets' group
};
std::vector<Mesh> meshesOf(int64_t n, int64_t maxTp, int64_t maxPp, int64_t maxCp, const PlannerOptions &opts) {
  std::vector<Mesh> meshes;
  for (int64_t tp : divisorsOf(n)) {
    if (opts.tp ? tp != *opts.tp : tp > maxTp)
      continue;
    for (int64_t pp : divisorsOf(n / tp)) {
      if (opts.pp ? pp != *opts.pp : pp > maxPp)
        continue;
      for (int64_t cp : divisorsOf(n / tp / pp)) {
        if (opts.cp ? cp != *opts.cp : cp > maxCp)
          continue;
        int64_t dp = n / tp / pp / cp;
        if (opts.dp && dp != *opts.dp)
          continue;
        meshes.push_back({dp, tp, pp, cp});
      }
    }
  }
  return meshes;
}

/// The exhaustive search: every configuration of every mesh evaluated
/// (checkConfig, the memory estimate, the step model), the best kept in
/// order, each family (mesh, knob value) accumulating its members' fates.
class Search {
public:
  Search(const Hardware &hw, const Workload &w, const PlannerOptions &opts, PlanResult &out, std::vector<Mesh> meshes)
      : hw(hw), w(w), opts(opts), out(out), meshes(std::move(meshes)), capacity(hw.device.memoryBytes),
        keep(size_t(std::max<int64_t>(opts.top, 2))), knobs{accs, {}} {
    // The reserve by communicator count: computed once.
    for (size_t k = 0; k <= kMaxCommunicators; ++k)
      reserve[k] = hw.device.reserve.bytes(capacity, int64_t(k));
    // Knob values searched.
    if (opts.microBatch)
      mbs = {*opts.microBatch};
    else
      for (int64_t mb = 1; mb <= opts.maxMicroBatch; mb *= 2)
        mbs.push_back(mb);
    for (int z = 0; z <= 3; ++z)
      if (!opts.zero || *opts.zero == z)
        zeros.push_back(z);
    for (int r = 0; r < 3; ++r)
      if (!opts.recompute || *opts.recompute == kRecomputes[r])
        recomputes.push_back(r);
    makeFamilies();
    best.reserve(keep + 1);
  }

  void run(std::chrono::steady_clock::time_point t0) {
    lastReport = t0;
    for (size_t mi = 0; mi < meshes.size(); ++mi)
      searchMesh(mi);
    if (opts.progress)
      opts.progress(int64_t(meshes.size()), int64_t(meshes.size()), out.evaluated);
  }

  std::vector<FamilyAcc> accs;
  std::vector<Ranked> best; // sorted, at most `keep`
  int64_t closestExcess = std::numeric_limits<int64_t>::max();
  ParallelConfig closest;
  std::string firstDiv;
  std::array<int64_t, kMaxCommunicators + 1> reserve;

private:
  /// The families, created in a fixed order so the report's order does not
  /// depend on the search's.
  void makeFamilies() {
    accs.reserve(meshes.size() + 64);
    for (const Mesh &m : meshes) {
      FamilyAcc a;
      a.kind = "mesh";
      a.key = strf("dp=%lld,tp=%lld,pp=%lld", (long long)m.dp, (long long)m.tp, (long long)m.pp);
      if (m.cp > 1)
        a.key += strf(",cp=%lld", (long long)m.cp);
      accs.push_back(std::move(a));
    }
    for (int64_t mb : mbs)
      mbFam.push_back(knobs.get(kMb, mb, "mb", std::to_string(mb)));
    for (int s = 0; s < 4; ++s)
      schedFam[size_t(s)] = knobs.get(kSchedule, s, "schedule", kSchedules[s]);
    vFam.assign(size_t(opts.maxVirtualStages + 1), -1);
    for (int64_t v = 2; v <= opts.maxVirtualStages; ++v)
      vFam[size_t(v)] = knobs.get(kVirtual, v, "v", std::to_string(v));
    for (int z = 0; z < 4; ++z)
      zeroFam[size_t(z)] = knobs.get(kZero, z, "zero", std::to_string(z));
    for (int b = 0; b < 2; ++b)
      bucketFam[size_t(b)] = knobs.get(kBucket, b, "bucket", b ? "auto" : "off");
    for (int p = 0; p < 2; ++p)
      prefFam[size_t(p)] = knobs.get(kPrefetch, p, "prefetch", std::to_string(p));
    for (int r = 0; r < 3; ++r)
      recFam[size_t(r)] = knobs.get(kRecompute, r, "recompute", kRecomputes[r]);
    for (int s = 0; s < 2; ++s)
      spFam[size_t(s)] = knobs.get(kSp, s, "sp", s ? "on" : "off");
    for (int i = 0; i < 2; ++i)
      cpImplFam[size_t(i)] = knobs.get(kCpImpl, i, "cp-impl", kCpImpls[i]);
    // Expert parallelism's degrees (mixture-of-experts models): every
    // divisor of the experts, each a family.
    if (w.model.moe)
      for (int64_t ep : divisorsOf(w.model.moe->experts))
        if (!opts.ep || *opts.ep == ep)
          epFam[ep] = knobs.get(kEp, ep, "ep", std::to_string(ep));
    // A fixed virtual-stage count beyond the default bound.
    if (opts.virtualStages && *opts.virtualStages > opts.maxVirtualStages) {
      vFam.resize(size_t(*opts.virtualStages + 1), -1);
      vFam[size_t(*opts.virtualStages)] =
          knobs.get(kVirtual, *opts.virtualStages, "v", std::to_string(*opts.virtualStages));
    }
  }

  void evaluate() {
    ++out.evaluated;
    std::optional<std::string> bad = checkConfig(w, c);
    if (bad) {
      ++out.prunedDivisibility;
      for (int f : fams)
        if (f >= 0) {
          FamilyAcc &a = accs[size_t(f)];
          ++a.members, ++a.div;
          if (a.divReason.empty())
            a.divReason = *bad + " (" + c.str() + ")";
        }
      if (firstDiv.empty())
        firstDiv = *bad + " (" + c.str() + ")";
      return;
    }
    MemoryEstimate mem = estimateMemory(w, c);
    int64_t excess = mem.total() + reserve[size_t(communicatorsOf(c))] - capacity;
    if (excess > 0) {
      ++out.prunedMemory;
      for (int f : fams)
        if (f >= 0) {
          FamilyAcc &a = accs[size_t(f)];
          ++a.members, ++a.mem;
          if (excess < a.closestExcess) {
            a.closestExcess = excess;
            a.closest = c;
          }
        }
      if (excess < closestExcess) {
        closestExcess = excess;
        closest = c;
      }
      return;
    }
    double step = predictStep(hw, w, c, mem).stepSeconds;
    ++out.feasible;
    for (int f : fams)
      if (f >= 0) {
        FamilyAcc &a = accs[size_t(f)];
        ++a.members, ++a.feasible;
        if (step < a.bestStep) {
          a.bestStep = step;
          a.best = c;
        }
      }
    if (best.size() < keep || step < best.back().step) {
      for (const Ranked &r : best)
        if (r.step == step && r.memory == mem.total()) {
          ++out.duplicates;
          return;
        }
      auto at = std::upper_bound(best.begin(), best.end(), step, [](double s, const Ranked &r) { return s < r.step; });
      best.insert(at, Ranked{step, mem.total(), c, fams});
      if (best.size() > keep)
        best.pop_back();
    }
  }

  /// Every configuration of mesh `mi`.
  void searchMesh(size_t mi) {
    const Mesh &m = meshes[mi];
    c.dp = m.dp, c.tp = m.tp, c.pp = m.pp, c.cp = m.cp;
    fams.fill(-1);
    fams[kMesh] = int(mi);
    for (int i = 0; i < 2; ++i) {
      if (i > 0 && m.cp == 1)
        break;
      if (m.cp > 1 && opts.cpImpl && *opts.cpImpl != kCpImpls[i])
        continue;
      c.cpImpl = kCpImpls[i];
      fams[kCpImpl] = m.cp > 1 ? cpImplFam[size_t(i)] : -1;
      // Expert parallelism: ep among the divisors of dp that divide the
      // experts (mixture-of-experts models only).
      for (const auto &[ep, fam] : epFam) {
        if (m.dp % ep)
          continue;
        c.ep = ep;
        fams[kEp] = fam;
        searchKnobs(mi, m);
      }
      if (epFam.empty()) {
        c.ep = 1;
        fams[kEp] = -1;
        searchKnobs(mi, m);
      }
    }
  }

  /// Every configuration of mesh `mi` with the cp implementation set.
  void searchKnobs(size_t mi, const Mesh &m) {
    // (schedule, v) pairs of this mesh.
    std::vector<std::pair<int, int64_t>> scheds;
    if (m.pp == 1) {
      if (!opts.schedule || *opts.schedule == "1f1b")
        if (!opts.virtualStages || *opts.virtualStages == 1)
          scheds.push_back({-1, 1});
    } else {
      for (int s = 0; s < 4; ++s) {
        if (opts.schedule && *opts.schedule != kSchedules[s])
          continue;
        if (std::string(kSchedules[s]) == "interleaved") {
          int64_t lo = 2, hi = opts.maxVirtualStages;
          if (opts.virtualStages)
            lo = hi = *opts.virtualStages;
          for (int64_t v = std::max<int64_t>(lo, 2); v <= hi; ++v)
            scheds.push_back({s, v});
        } else if (!opts.virtualStages || *opts.virtualStages == 1) {
          scheds.push_back({s, 1});
        }
      }
    }
    for (size_t bi = 0; bi < mbs.size(); ++bi) {
      c.microBatch = mbs[bi];
      fams[kMb] = mbFam[bi];
      for (auto [s, v] : scheds) {
        c.schedule = s < 0 ? "1f1b" : kSchedules[s];
        c.virtualStages = v;
        fams[kSchedule] = s < 0 ? -1 : schedFam[size_t(s)];
        fams[kVirtual] = v > 1 ? vFam[size_t(v)] : -1;
        for (int z : zeros) {
          if (z > 0 && m.dataParallelGroup() == 1)
            continue;
          c.zero = z;
          fams[kZero] = zeroFam[size_t(z)];
          for (int b = 0; b < 2; ++b) {
            if (b && m.dataParallelGroup() == 1)
              continue;
            if (opts.gradBucket && (*opts.gradBucket != 0) != bool(b))
              continue;
            c.gradBucket =
                b ? (opts.gradBucket && *opts.gradBucket > 0 ? *opts.gradBucket : autoGradBucket(m.dataParallelGroup()))
                  : 0;
            fams[kBucket] = m.dataParallelGroup() > 1 ? bucketFam[size_t(b)] : -1;
            for (int pf = 0; pf < 2; ++pf) {
              if (pf && z != 3)
                continue;
              if (opts.fsdpPrefetch && (*opts.fsdpPrefetch != 0) != bool(pf))
                continue;
              c.fsdpPrefetch = pf ? (opts.fsdpPrefetch ? *opts.fsdpPrefetch : 1) : 0;
              fams[kPrefetch] = z == 3 ? prefFam[size_t(pf)] : -1;
              for (int r : recomputes) {
                c.recompute = kRecomputes[r];
                fams[kRecompute] = recFam[size_t(r)];
                for (int sp = 0; sp < 2; ++sp) {
                  if (sp && m.tp == 1)
                    continue;
                  if (opts.sequenceParallel && *opts.sequenceParallel != bool(sp))
                    continue;
                  c.sequenceParallel = sp;
                  // Megatron-LM's scatter/gather of pipeline tensors wherever it applies.
                  c.scatterGatherP2P = c.scatterGatherApplies();
                  fams[kSp] = m.tp > 1 ? spFam[size_t(sp)] : -1;
                  evaluate();
                }
              }
            }
          }
        }
      }
      if (opts.progress && (out.evaluated & 255) == 0) {
        auto now = std::chrono::steady_clock::now();
        if (now - lastReport > std::chrono::milliseconds(250)) {
          lastReport = now;
          opts.progress(int64_t(mi), int64_t(meshes.size()), out.evaluated);
        }
      }
    }
  }

  const Hardware &hw;
  const Workload &w;
  const PlannerOptions &opts;
  PlanResult &out;
  const std::vector<Mesh> meshes;
  const int64_t capacity;
  const size_t keep;
  KnobFamilies knobs;
  std::vector<int64_t> mbs;
  std::vector<int> zeros, recomputes;
  std::vector<int> mbFam, zeroFam = std::vector<int>(4), recFam = std::vector<int>(3), schedFam = std::vector<int>(4),
                          spFam = std::vector<int>(2), bucketFam = std::vector<int>(2), prefFam = std::vector<int>(2),
                          cpImplFam = std::vector<int>(2), vFam;
  std::map<int64_t, int> epFam; ///< ep -> its family (mixture-of-experts models)
  ParallelConfig c;
  FamilyIdx fams;
  std::chrono::steady_clock::time_point lastReport;
};

/// The families that do not hold the winner, each with its best member and
/// why it lost (slower, out of memory, or no member compiles).
void reportFamilies(const Hardware &hw, const Workload &w, const Search &s, int64_t capacity, PlanResult &out) {
  const std::vector<FamilyAcc> &accs = s.accs;
  const std::vector<Ranked> &best = s.best;
  const auto &reserve = s.reserve;
  FamilyIdx winnerFams;
  winnerFams.fill(-1);
  if (!best.empty())
    winnerFams = best.front().fams;
  for (size_t i = 0; i < accs.size(); ++i) {
    const FamilyAcc &a = accs[i];
    if (a.members == 0 || std::find(winnerFams.begin(), winnerFams.end(), int(i)) != winnerFams.end())
      continue;
    FamilyReport f;
    f.kind = a.kind;
    f.key = a.key;
    f.members = a.members;
    f.prunedDivisibility = a.div;
    f.prunedMemory = a.mem;
    f.feasible = a.feasible;
    if (a.feasible > 0) {
      f.best = makeCandidate(hw, w, a.best);
      if (!out.top.empty())
        explainSlower(hw, out.top.front(), f);
    } else if (a.mem > 0) {
      f.reason = LossReason::Memory;
      f.closest = a.closest;
      f.closestMemory = estimateMemory(w, a.closest);
      f.closestReserve = reserve[size_t(communicatorsOf(a.closest))];
      f.oomGiB = gib(double(a.closestExcess));
      f.why = strf("out of memory by %.2f GiB: its closest member (%s) needs %.2f GiB of %.2f GiB "
                   "(%s)",
                   f.oomGiB, a.closest.str().c_str(), gib(double(f.closestMemory.total() + f.closestReserve)),
                   gib(double(capacity)), memoryText(f.closestMemory, f.closestReserve).c_str());
    } else {
      f.reason = LossReason::Divisibility;
      f.divisibility = a.divReason;
      f.why = "no member compiles: " + a.divReason;
    }
    out.families.push_back(std::move(f));
  }
}

/// Why the winner splits the sequence: what a rank holds, its cp groups, and
/// what the meshes without cp came to (out of memory, or slower).
void explainContextParallel(const Hardware &hw, const Candidate &win, PlanResult &out) {
  const ParallelConfig &c = win.config;
  out.winnerWhy.push_back(strf("cp=%lld (%s) gives each rank %lld of every %lld-token sequence, so its activations "
                               "are %.2f GiB; its cp groups %s",
                               (long long)c.cp, c.cpImpl.c_str(), (long long)(out.seqLen / c.cp), (long long)out.seqLen,
                               gib(double(win.prediction.memory.activations)),
                               axisCrosses(hw, c, "cp") ? "span nodes" : "stay inside a node"));
  const FamilyReport *fastest = nullptr, *closest = nullptr;
  for (const FamilyReport &f : out.families) {
    if (f.kind != "mesh" || f.key.find(",cp=") != std::string::npos)
      continue;
    if (f.best && (!fastest || f.slowerPercent < fastest->slowerPercent))
      fastest = &f;
    if (!f.best && f.closest && (!closest || f.oomGiB < closest->oomGiB))
      closest = &f;
  }
  if (fastest)
    out.winnerWhy.push_back(
        strf("without context parallelism the best mesh, %s, is %s", fastest->key.c_str(), fastest->why.c_str()));
  else if (closest)
    out.winnerWhy.push_back(strf("without context parallelism nothing fits: the closest, %s, is out of memory by "
                                 "%.2f GiB (%s)",
                                 closest->closest->str().c_str(), closest->oomGiB,
                                 memoryText(closest->closestMemory, closest->closestReserve).c_str()));
}

/// Why a mixture-of-experts winner takes its ep: what a rank holds of the
/// experts, what its all-to-alls cost and where its ep groups sit, and what
/// the other ep degrees came to. The step model prices the experts under
/// uniform routing (no load imbalance).
/// "layer", or where some layers are dense "sparse layer (12 of 24)".
std::string sparseLayerWord(const ModelConfig &m) {
  if (m.sparseLayers() == m.layers)
    return "layer";
  return strf("sparse layer (%lld of %lld)", (long long)m.sparseLayers(), (long long)m.layers);
}

void explainExpertParallel(const Hardware &hw, const Workload &w, const Candidate &win, PlanResult &out) {
  const ParallelConfig &c = win.config;
  const MoeConfig &e = *w.model.moe;
  const StepPrediction &p = win.prediction;
  const MemoryEstimate &m = p.memory;
  const double state = double(m.params + m.grads + m.optimizer);
  if (c.ep > 1) {
    ParallelConfig whole = c;
    whole.ep = 1;
    const MemoryEstimate w1 = estimateMemory(w, whole);
    const int64_t T = c.microBatch * w.seqLen;
    const int64_t rows = c.ep * T * std::min(e.topK, e.experts / c.ep);
    const double a2a = exposedOf(p, "ep");
    out.winnerWhy.push_back(
        strf("ep=%lld: each rank holds %lld of every %s's %lld experts, so its model state is %.2f GiB (%.2f GiB "
             "with every expert, ep=1%s); its experts' side holds the worst case of %lld rows per layer and microbatch "
             "(ep x T x min(k, E/ep), vs T x k = %lld without ep): activations %.2f GiB (%.2f GiB at ep=1)",
             (long long)c.ep, (long long)(e.experts / c.ep), sparseLayerWord(w.model).c_str(), (long long)e.experts,
             gib(state), gib(double(w1.params + w1.grads + w1.optimizer)),
             c.zero ? ", where ZeRO splits every expert over dp instead of its shard over dp/ep" : "", (long long)rows,
             (long long)(T * e.topK), gib(double(m.activations)), gib(double(w1.activations))));
    out.winnerWhy.push_back(
        strf("its dispatch and combine all-to-alls (%d per MoE layer and microbatch, %.1f MiB "
             "each) take %.4g s of the step (%.1f %%), over ep groups that %s; expert "
             "gradients %s over %s = %lld ranks, the rest over %s = %lld",
             c.recompute == "full" ? 6 : 4,
             double(T) * double(e.topK) * double(w.model.hidden) * double(bytesOf(w.precision)) / (1024.0 * 1024.0),
             a2a, 100 * a2a / p.stepSeconds, axisCrosses(hw, c, "ep") ? "span nodes" : "stay inside a node (NVLink)",
             c.zero ? "reduce-scatter" : "all-reduce", c.cp > 1 ? "dp/ep × cp" : "dp/ep",
             (long long)c.expertDataParallelGroup(), c.cp > 1 ? "dp × cp" : "dp", (long long)c.dataParallelGroup()));
  } else {
    out.winnerWhy.push_back(strf("ep=1: every rank holds all %lld experts of every %s (model state %.2f GiB)",
                                 (long long)e.experts, sparseLayerWord(w.model).c_str(), gib(state)));
  }
  out.winnerWhy.push_back(std::string("the experts' GEMMs are priced as the active experts' FLOPs on each rank's own "
                                      "tokens and the all-to-alls as (ep-1)/ep of those rows leaving the rank: uniform "
                                      "routing, no load imbalance") +
                          (c.ep > 1 ? "; the SwiGLU and the row reorders between the expert GEMMs run on the static "
                                      "worst-case rows"
                                    : ""));
  // The other ep degrees: the fastest that fits, or why none did.
  const FamilyReport *other = nullptr;
  for (const FamilyReport &f : out.families)
    if (f.kind == "knob" && f.key.rfind("ep=", 0) == 0 &&
        (!other || (f.best && (!other->best || f.slowerPercent < other->slowerPercent))))
      other = &f;
  if (other)
    out.winnerWhy.push_back(strf("the best with %s is %s", other->key.c_str(), other->why.c_str()));
}

/// Why the winner wins: its step and memory, the runner-up, its tp groups,
/// the best other mesh.
void explainWinner(const Hardware &hw, const Workload &w, const std::vector<Ranked> &best, int64_t capacity,
                   PlanResult &out) {
  if (!out.top.empty()) {
    const Candidate &win = out.top.front();
    const StepPrediction &p = win.prediction;
    StepParts s = partsOf(p);
    out.winnerWhy.push_back(strf("%s: %.4g s per step, %s tokens/s, MFU %.1f %% (HFU %.1f %%), "
                                 "bound by %s",
                                 win.config.str().c_str(), p.stepSeconds, fmtTokens(p.tokensPerSecond).c_str(),
                                 100 * p.mfu, 100 * p.hfu, p.bound.c_str()));
    if (best.size() > 1)
      out.winnerWhy.push_back(strf("faster than the runner-up (%s, %.4g s) by %.1f %%; %lld of "
                                   "%lld configurations fit",
                                   best[1].config.str().c_str(), best[1].step, (best[1].step / p.stepSeconds - 1) * 100,
                                   (long long)out.feasible, (long long)out.evaluated));
    else
      out.winnerWhy.push_back(
          strf("the only one of %lld configurations that compiles and fits", (long long)out.evaluated));
    out.winnerWhy.push_back(strf("its step: compute %.4g s, bubble %.4g s (%.1f %%), exposed "
                                 "communication %.4g s (tp %.4g, dp %.4g, pp %.4g%s%s), optimizer "
                                 "%.4g s",
                                 s.compute, s.bubble, 100 * win.bubbleShare(), p.exposedCommSeconds(),
                                 exposedOf(p, "tp"), exposedOf(p, "dp"), exposedOf(p, "pp"),
                                 win.config.cp > 1 ? strf(", cp %.4g", exposedOf(p, "cp")).c_str() : "",
                                 win.config.ep > 1 ? strf(", ep %.4g", exposedOf(p, "ep")).c_str() : "", s.optimizer));
    out.winnerWhy.push_back(strf("memory: %.2f GiB of %.2f GiB per rank (%s), %.2f GiB to spare",
                                 gib(double(win.memoryBytes())), gib(double(capacity)),
                                 memoryText(p.memory, win.reserveBytes).c_str(),
                                 gib(double(capacity - win.memoryBytes()))));
    if (win.config.tp > 1)
      out.winnerWhy.push_back(axisCrosses(hw, win.config, "tp")
                                  ? strf("its tp=%lld groups span nodes of %lld GPUs", (long long)win.config.tp,
                                         (long long)hw.topology.gpusPerNode)
                                  : strf("its tp=%lld groups stay inside a node of %lld GPUs (NVLink)",
                                         (long long)win.config.tp, (long long)hw.topology.gpusPerNode));
    if (win.config.cp > 1)
      explainContextParallel(hw, win, out);
    if (w.model.moe)
      explainExpertParallel(hw, w, win, out);
    // The closest mesh family.
    const FamilyReport *next = nullptr;
    for (const FamilyReport &f : out.families)
      if (f.kind == "mesh" && f.best && (!next || f.slowerPercent < next->slowerPercent))
        next = &f;
    if (next)
      out.winnerWhy.push_back(strf("the best other mesh, %s, is %s", next->key.c_str(), next->why.c_str()));
  }
}
} // namespace

std::optional<std::string> cost::plan(const Hardware &hw, const Workload &w, const PlannerOptions &opts,
                                      PlanResult &out) {
  if (auto err = checkOptions(w, opts))
    return err;
  auto t0 = std::chrono::steady_clock::now();
  out = PlanResult();
  const int64_t n = opts.gpus;
  out.gpus = n;
  out.globalBatch = w.globalBatch;
  out.seqLen = w.seqLen;
  out.capacityBytes = hw.device.memoryBytes;
  out.gpusPerNode = hw.topology.gpusPerNode;
  const int64_t capacity = hw.device.memoryBytes;
  const int64_t maxTp = opts.maxTp > 0 ? opts.maxTp : 2 * hw.topology.gpusPerNode;
  const int64_t maxPp = opts.maxPp > 0 ? opts.maxPp : w.model.layers;
  const int64_t maxCp = maxContextParallel(w, opts);
  std::vector<Mesh> meshes = meshesOf(n, maxTp, maxPp, maxCp, opts);
  out.meshes = int64_t(meshes.size());
  if (meshes.empty())
    return strf("no dp x tp x pp x cp = %lld with tp <= %lld, pp <= %lld and cp <= %lld%s", (long long)n,
                (long long)maxTp, (long long)maxPp, (long long)maxCp,
                opts.tp || opts.pp || opts.dp || opts.cp ? " and the --fix degrees" : "");
  Search search(hw, w, opts, out, std::move(meshes));
  search.run(t0);
  if (out.evaluated == 0)
    return std::string("the --fix knobs leave no configuration to evaluate (e.g. a schedule "
                       "with pp=1, or sp with tp=1)");
  if (out.feasible == 0 && out.prunedMemory == 0)
    return strf("none of the %lld configurations of dp x tp x pp = %lld compiles; e.g. %s", (long long)out.evaluated,
                (long long)n, search.firstDiv.c_str());
  out.firstDivisibility = search.firstDiv;
  if (out.feasible == 0) {
    out.closest = search.closest;
    out.closestOomGiB = gib(double(search.closestExcess));
  }
  // The survivors, priced again in full.
  for (const Ranked &r : search.best)
    if (int64_t(out.top.size()) < opts.top)
      out.top.push_back(makeCandidate(hw, w, r.config));
  reportFamilies(hw, w, search, capacity, out);
  explainWinner(hw, w, search.best, capacity, out);
  out.searchSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return std::nullopt;
}
