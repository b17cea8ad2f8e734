//===- PlanCmd.cpp - llc-dist plan MODEL --gpus N ... ---------------------===//
//
// Chooses a configuration: the analytic search of Planner.h over every knob
// of `llc-dist compile`, then the best few compiled in-process with the real
// pipeline into temporary plan directories and simulated (PlanSimulator.h),
// the exact step time beside the analytic one; the winner printed as a
// report, as JSON, or as Megatron-LM flags / a DeepSpeed config
// (FrameworkConfig.h). docs/cost-model.md, "Choosing a configuration".
//
//===----------------------------------------------------------------------===//
#include "Cli.h"

#include "llcdist/Cost/FrameworkConfig.h"
#include "llcdist/Cost/PlanSimulator.h"
#include "llcdist/Cost/Planner.h"
#include "llcdist/Pipelines/FitBudget.h"
#include "llcdist/Pipelines/Pipelines.h"
#include "llcdist/Pipelines/PlannedCompile.h"
#include "llcdist/Support/Device.h"
#include "llcdist/Target/Plan/PlanWriter.h"

#include "llvm/Support/FileSystem.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <unistd.h>

using namespace mlir;
using namespace llcdist;
using json = nlohmann::ordered_json;

const char *const llcdist::cli::kPlanHelp =
    R"HELP(llc-dist plan MODEL --gpus N --device D --topology T --global-batch B --seq-len S [options]

Chooses how to train MODEL (a Hugging Face config.json) on N GPUs: searches
every configuration of llc-dist compile's knobs — dp x tp x pp x cp = N (tp a
divisor of N up to 2 nodes' GPUs, pp up to the layers, cp up to seq-len /
8192 with the ring or all-to-all attention: context parallelism only for
long sequences), interleaved's
virtual stages, the micro-batch, ZeRO 0-3, recompute none/selective/full,
the pipeline schedule (gpipe, 1f1b, interleaved, zb-h1), sequence
parallelism under tp, gradient buckets (off / Megatron's auto size) and FSDP
prefetch under ZeRO-3; under tp and pp without sequence parallelism the
pipeline's sends are always scatter/gather (--scatter-gather-p2p); for a
mixture of experts ep too (the divisors of dp that divide the experts;
ZeRO splits an expert shard over its dp/ep replicas) — drops those that do not compile (divisibility) or do
not fit the device's memory (the analytic estimate plus the device's
reserve), ranks the rest by the analytic step model, then compiles the top
ones with the real compiler and simulates them (llc-dist simulate), printing
the simulated step time beside the analytic one and reranking by it.
Explains the winner and, for every rejected family of configurations (by
mesh, and by each knob's value), its best member and why it lost.
docs/cost-model.md, "Choosing a configuration (llc-dist plan)".

OPTIONS
  --gpus N               GPUs to use (dp x tp x pp x cp = N)
  --device NAME|FILE     the accelerator (devices/: h100-80gb, a100-80gb, ...)
  --topology NAME|FILE   the cluster (topologies/: dgx-h100, dgx-a100, dgx-h200)
  --global-batch B       sequences per step
  --global-batch-tokens T
                         or tokens per step (a multiple of --seq-len)
  --seq-len S            tokens per sequence
  --moe-capacity-factor F
                         a mixture of experts' capacity factor, as llc-dist
                         compile's (0 or absent: dropless): each expert keeps
                         ceil(F x T x k / E) of a rank's T tokens; priced with
                         uniform routing (F < 1 drops, and computes, fewer rows)
  --dtype bf16|f32       (default bf16)
  --top K                configurations in the table (default 5)
  --exact K              how many of them to compile and simulate (default: all
                         of the top; 0: none)
  --fix KNOB=V[,..]      search only that value (repeatable): dp, tp, pp, cp,
                         cp-impl (ring|all-to-all), ep (experts), v
                         (virtual stages), mb (micro-batch), zero, recompute,
                         schedule, sp (on|off), bucket (off|auto|N), prefetch
  --max-tp N             the largest tp searched (default 2 x GPUs per node)
  --max-micro-batch N    the largest micro-batch searched (default 8)
  --max-virtual-stages N the most virtual stages searched (default 8)
  --keep-plans DIR       keep the compiled plans (DIR/rank-K) instead of
                         removing them
  --format text|json     output format (default text); json has everything:
                         counters, top, winner, families, exact, frameworks
  --as megatron|deepspeed
                         print only the winner as Megatron-LM pretrain_gpt.py
                         flags or as a DeepSpeed config (JSON); what the
                         framework cannot express is a '#' note (megatron) or
                         a line on stderr (deepspeed)
)HELP";

namespace {

using namespace llcdist::cli;

/// The exact check of one candidate: compiled in a context of its own and
/// written to `dir`, then simulated. Errors end up in `r.error`.
void compileAndSimulate(const std::string &model, const cost::Workload &w, const cost::Hardware &hw,
                        const cost::ParallelConfig &c, const std::string &dir, cost::ExactResult &r) {
  auto t0 = std::chrono::steady_clock::now();
  const PlannedCompile planned = plannedCompile(w, c);
  // In memory, without the communication verifier (it would check every
  // rank's program: 16,384 of them at scale); the simulator reads the files.
  bool written = false;
  if (!compileInMemory(
          model, planned.shape, planned.mesh, planned.options,
          [&](ModuleOp module) { written = succeeded(writePlanDirectory(module, dir)); }, r.error))
    return;
  if (!written) {
    r.error = dir + ": cannot write the plan";
    return;
  }
  auto t1 = std::chrono::steady_clock::now();
  r.compileSeconds = std::chrono::duration<double>(t1 - t0).count();
  cost::SimOptions so;
  so.trace = false;
  so.modelFlopsPerStep = cost::stepFlops(w, c.recompute).model;
  cost::PlanSimResult sim;
  if (auto e = cost::simulatePlan(dir, hw, so, sim)) {
    r.error = *e;
    return;
  }
  r.simulateSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  r.stepSeconds = sim.stepSeconds;
  r.ok = true;
}

/// The exact check of the analytic top `exactK`: each compiled (in memory,
/// through plannedCompile) into a directory of `keepDir` or a temporary one
/// and simulated, into result.exact; false (printed) when no directory can
/// be made.
bool exactCheck(const std::string &model, const cost::Workload &w, const cost::Hardware &hw, int64_t exactK,
                const std::string &keepDir, cost::PlanResult &result) {
  auto te = std::chrono::steady_clock::now();
  std::string tmpRoot;
  if (exactK > 0) {
    if (!keepDir.empty()) {
      if (std::error_code ec = llvm::sys::fs::create_directories(keepDir)) {
        error(keepDir + ": cannot create the --keep-plans directory: " + ec.message());
        return false;
      }
      tmpRoot = keepDir;
    } else {
      llvm::SmallString<128> dir;
      if (std::error_code ec = llvm::sys::fs::createUniqueDirectory("llc-dist-plan", dir)) {
        error("cannot create a temporary directory: " + ec.message());
        return false;
      }
      tmpRoot = dir.str().str();
    }
  }
  size_t nExact = size_t(std::min<int64_t>(exactK, int64_t(result.top.size())));
  for (size_t i = 0; i < nExact; ++i) {
    cost::ExactResult r;
    r.candidate = i;
    r.planDir = tmpRoot + "/rank-" + std::to_string(i + 1);
    llvm::errs() << "llc-dist plan: compiling and simulating " << (i + 1) << "/" << nExact << ": "
                 << result.top[i].config.compileFlags() << "\n";
    compileAndSimulate(model, w, hw, result.top[i].config, r.planDir, r);
    if (keepDir.empty())
      r.planDir.clear();
    result.exact.push_back(std::move(r));
  }
  if (!tmpRoot.empty() && keepDir.empty())
    (void)llvm::sys::fs::remove_directories(tmpRoot);
  result.exactSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - te).count();
  return true;
}

/// The winner's index in result.top: the simulation's fastest where the
/// exact check ran it, else the analytic first (*bySimulation says which).
size_t winnerOf(const cost::PlanResult &result, bool *bySimulation) {
  size_t winner = 0;
  *bySimulation = false;
  if (!result.exact.empty()) {
    std::vector<size_t> order = result.exactOrder();
    for (const cost::ExactResult &e : result.exact)
      if (e.candidate == order.front() && e.ok) {
        winner = order.front();
        *bySimulation = true;
      }
  }
  return winner;
}

json frameworksJson(const cost::FrameworkArgs &a) {
  json j;
  j["megatron"] = {{"flags", a.megatron}, {"notes", a.megatronNotes}, {"command", cost::megatronCommand(a)}};
  j["deepspeed"] = {{"config", a.deepspeed}, {"notes", a.deepspeedNotes}};
  return j;
}

} // namespace

namespace {
/// What `llc-dist plan` was asked, its flags checked (a UsageError names the
/// flag); `help` when --help was given.
struct PlanRequest {
  std::string model, device, topology, dtype = "bf16", format = "text", as, keepDir;
  int64_t gpus = 0, globalBatch = 0, globalTokens = 0, seqLen = 0, top = 5, exactK = -1, maxTp = 0, maxMb = 8, maxV = 8;
  double moeCapacityFactor = 0;
  std::vector<std::string> fixes;
  bool help = false;
};

PlanRequest parsePlanArgs(Args &args) {
  PlanRequest r;
  auto &[model, device, topology, dtype, format, as, keepDir, gpus, globalBatch, globalTokens, seqLen, top, exactK,
         maxTp, maxMb, maxV, moeCapacityFactor, fixes, help] = r;
  ValueFlags flags;
  flags.add("--gpus", &gpus)
      .add("--device", &device)
      .add("--topology", &topology)
      .add("--global-batch", &globalBatch)
      .add("--global-batch-tokens", &globalTokens)
      .add("--seq-len", &seqLen)
      .add("--moe-capacity-factor", &moeCapacityFactor)
      .add("--dtype", &dtype)
      .add("--top", &top)
      .add("--exact", &exactK)
      .add("--max-tp", &maxTp)
      .add("--max-micro-batch", &maxMb)
      .add("--max-virtual-stages", &maxV)
      .add("--keep-plans", &keepDir)
      .add("--format", &format)
      .add("--as", &as);
  while (!args.empty()) {
    std::string a = args.next();
    if (a == "--help" || a == "-h") {
      help = true;
      return r;
    }
    if (auto v = args.value(a, "--fix"))
      fixes.push_back(*v);
    else if (flags.match(args, a))
      continue;
    else if (a.rfind("-", 0) == 0)
      throw UsageError{"plan: unknown option '" + a + "'"};
    else if (model.empty())
      model = a;
    else
      throw UsageError{"plan: more than one MODEL given ('" + model + "', '" + a + "')"};
  }
  if (model.empty())
    throw UsageError{"plan: missing MODEL (e.g. models/llama3-8b.json)"};
  if (gpus < 1)
    throw UsageError{"plan: --gpus N (>= 1) is required"};
  if (device.empty())
    throw UsageError{"plan: --device is required (devices/: h100-80gb, a100-80gb, a100-40gb, "
                     "h200)"};
  if (topology.empty())
    throw UsageError{"plan: --topology is required (topologies/: dgx-h100, dgx-a100, dgx-h200)"};
  if (seqLen < 1)
    throw UsageError{"plan: --seq-len S (>= 1) is required"};
  if ((globalBatch > 0) == (globalTokens > 0))
    throw UsageError{"plan: give one of --global-batch (sequences, >= 1) and "
                     "--global-batch-tokens (tokens)"};
  if (globalTokens > 0) {
    if (globalTokens % seqLen)
      throw UsageError{"--global-batch-tokens " + std::to_string(globalTokens) + " is not a multiple of --seq-len " +
                       std::to_string(seqLen) + ": the step holds whole sequences"};
    globalBatch = globalTokens / seqLen;
  }
  if (dtype != "bf16" && dtype != "f32")
    throw UsageError{"--dtype must be bf16 or f32, got '" + dtype + "'"};
  if (format != "text" && format != "json")
    throw UsageError{"--format must be text or json, got '" + format + "'"};
  if (!as.empty() && as != "megatron" && as != "deepspeed")
    throw UsageError{"--as must be megatron or deepspeed, got '" + as + "'"};
  if (top < 1)
    throw UsageError{"--top must be >= 1, got " + std::to_string(top)};
  if (exactK < 0)
    exactK = top;

  return r;
}

/// The plan's output: Megatron-LM flags or a DeepSpeed config (--as), the
/// JSON (--format json), or the report.
int printPlan(const PlanRequest &req, const cost::Workload &w, const cost::Hardware &hw,
              const cost::PlanResult &result) {
  const std::string &model = req.model, &topology = req.topology, &dtype = req.dtype, &format = req.format,
                    &as = req.as;
  const int64_t gpus = req.gpus, globalBatch = w.globalBatch, seqLen = w.seqLen;
  // The winner: the simulation's fastest when it ran, else the analytic one.
  bool bySimulation = false;
  const size_t winner = winnerOf(result, &bySimulation);
  cost::FrameworkArgs fw = cost::frameworkArgs(w, result.top[winner].config);

  if (as == "megatron" && format == "text") {
    llvm::outs() << cost::megatronCommand(fw);
    return 0;
  }
  if (as == "deepspeed" && format == "text") {
    for (const std::string &n : fw.deepspeedNotes)
      llvm::errs() << "llc-dist plan: note: " << n << "\n";
    llvm::outs() << cost::deepspeedText(fw);
    return 0;
  }
  if (format == "json") {
    json j;
    j["model"] = model;
    j["device"] = hw.device.id;
    j["topology"] = topology;
    j["topology_name"] = hw.topology.name;
    j["dtype"] = dtype;
    json body = result.toJson();
    for (auto &[k, v] : body.items())
      j[k] = v;
    j["winner_rank"] = winner + 1;
    j["winner_by"] = bySimulation ? "simulation" : "analytic";
    j["frameworks"] = frameworksJson(fw);
    llvm::outs() << j.dump(2) << "\n";
    return 0;
  }
  std::ostringstream os;
  os << "llc-dist plan: " << w.model.name << " on " << gpus << " x " << hw.device.id << " (" << hw.topology.name << ", "
     << hw.topology.gpusPerNode << " GPUs per node), " << globalBatch << " x " << seqLen << " tokens per step, "
     << dtype << "\n";
  result.print(os);
  os << "\nthe " << (bySimulation ? "simulated" : "analytic") << " winner, #" << winner + 1
     << ", as Megatron-LM flags (--as megatron; --as deepspeed for "
     << "a DeepSpeed config):\n"
     << cost::megatronCommand(fw);
  llvm::outs() << os.str();
  return 0;
}
} // namespace

int llcdist::cli::runPlan(Args &args) {
  const PlanRequest req = parsePlanArgs(args);
  if (req.help) {
    llvm::outs() << kPlanHelp;
    return 0;
  }
  const std::string &model = req.model, &device = req.device, &topology = req.topology, &dtype = req.dtype;
  const int64_t gpus = req.gpus, globalBatch = req.globalBatch, seqLen = req.seqLen;
  cost::PlannerOptions opts;
  opts.gpus = gpus;
  opts.top = req.top;
  opts.maxTp = req.maxTp;
  opts.maxMicroBatch = req.maxMb;
  opts.maxVirtualStages = req.maxV;
  for (const std::string &f : req.fixes)
    if (auto err = cost::parseFix(f, opts))
      throw UsageError{*err};

  cost::Workload w;
  if (model.size() >= 5 && model.compare(model.size() - 5, 5, ".mlir") == 0)
    throw UsageError{"plan: MODEL must be a Hugging Face config.json (the search reads its "
                     "shapes), got '" +
                     model + "'"};
  if (auto err = loadModelConfig(model, w.model)) {
    error(err->message);
    return kExitError;
  }
  w.globalBatch = globalBatch;
  w.seqLen = seqLen;
  w.moeCapacityFactor = req.moeCapacityFactor;
  // The compiler's checks of the flag (resolveTrainingShape's), before the search.
  if (w.moeCapacityFactor != 0 && !w.model.moe)
    throw UsageError{"--moe-capacity-factor applies to a mixture-of-experts model; " + w.model.name +
                     " has no experts"};
  if (w.moeCapacityFactor < 0 || !std::isfinite(w.moeCapacityFactor))
    throw UsageError{"--moe-capacity-factor must be > 0 (0 or absent: dropless)"};
  w.precision = dtype == "bf16" ? cost::Precision::BF16 : cost::Precision::F32;
  cost::Hardware hw;
  if (auto err = cost::loadHardware(device, topology, hw)) {
    error(*err);
    return kExitError;
  }

  bool tty = isatty(2);
  auto lastLine = std::chrono::steady_clock::now();
  opts.progress = [&](int64_t done, int64_t meshes, int64_t evaluated) {
    auto now = std::chrono::steady_clock::now();
    if (tty) {
      llvm::errs() << "\rllc-dist plan: searching: mesh " << done << "/" << meshes << ", " << evaluated
                   << " configurations" << (done == meshes ? "\n" : "");
    } else if (done < meshes && now - lastLine > std::chrono::seconds(2)) {
      lastLine = now;
      llvm::errs() << "llc-dist plan: searching: mesh " << done << "/" << meshes << ", " << evaluated
                   << " configurations\n";
    }
  };
  cost::PlanResult result;
  if (auto err = cost::plan(hw, w, opts, result)) {
    error("plan: " + *err);
    return kExitError;
  }
  if (result.top.empty()) {
    std::ostringstream os;
    result.print(os);
    llvm::errs() << os.str();
    char more[32];
    std::snprintf(more, sizeof more, "%.2f", result.closestOomGiB);
    error("plan: no configuration of " + std::to_string(gpus) + " GPUs fits " + hw.device.id +
          (result.closest ? "; the closest, " + result.closest->str() + ", needs " + more +
                                " GiB more per rank: add GPUs, or a device with more memory"
                          : std::string()));
    return kExitError;
  }

  // The exact check of the top: compiled and simulated.
  if (!exactCheck(model, w, hw, req.exactK, req.keepDir, result))
    return kExitError;

  return printPlan(req, w, hw, result);
}
