//===- Simulate.cpp - llc-dist simulate PLAN ------------------------------===//
//
// The predicted step of a plan directory on a device and a cluster: the
// discrete-event simulation of PlanSimulator.h on the cost model
// (docs/cost-model.md "Simulating a plan (llc-dist simulate)").
//
//===----------------------------------------------------------------------===//
#include "Cli.h"

#include "llcdist/Cost/PlanSimulator.h"

#include <fstream>
#include <string>

using namespace llcdist;
using json = nlohmann::ordered_json;

const char *const llcdist::cli::kSimulateHelp =
    R"(llc-dist simulate PLAN --device D --topology T [options]

Predicts one training step of a plan directory without running it: every
op of every pipeline stage gets its time from the cost model (GEMMs and
attention from the device's peaks and fitted efficiencies, other kernels
from its memory bandwidth, collectives and send/recv from the topology's
links), and a discrete-event simulation replays the plan's queues, tokens
and waits, its send/recv order between stages and its collectives over pp.
One rank per stage stands for the stage's dp x tp ranks. Reports the step
time, tokens/s, MFU and HFU, each stage's busy, idle and bubble time, and
each axis' communication: its total and the part compute was blocked by
(exposed) or not (overlapped). docs/cost-model.md defines each number.

OPTIONS
  --device NAME|FILE     the accelerator (devices/: h100-80gb, a100-80gb, ...)
                         with a "cost" object
  --topology NAME|FILE   the cluster (topologies/: dgx-h100, dgx-a100, ...)
                         with a "cost" object
  --model-flops-per-token F
                         the model's training FLOPs per token, for MFU (llc-dist
                         info MODEL prints them; llc-dist compile --device D
                         --topology T passes them itself); without it MFU is
                         n/a (HFU counts the plan's own GEMM and attention
                         FLOPs)
  --trace FILE           write the predicted timeline as a Chrome trace (the
                         format of llc-dist run --trace: open both in Perfetto)
  --format text|json     output format (default text); json: {"plan": PLAN,
                         "predicted": {step_time_s, tokens_per_s, mfu, hfu,
                         bubble_s, stages[], comm.{dp,tp,pp}.{total_s,
                         exposed_s, overlapped_s}, ...}}
)";

int llcdist::cli::runSimulate(Args &args) {
  std::string dir, device, topology, format = "text", tracePath;
  double modelFlops = 0;
  ValueFlags flags;
  flags.add("--device", &device)
      .add("--topology", &topology)
      .add("--model-flops-per-token", &modelFlops)
      .add("--trace", &tracePath)
      .add("--format", &format);
  while (!args.empty()) {
    std::string a = args.next();
    if (a == "--help" || a == "-h") {
      llvm::outs() << kSimulateHelp;
      return 0;
    }
    if (flags.match(args, a))
      continue;
    if (a.rfind("-", 0) == 0)
      throw UsageError{"simulate: unknown option '" + a + "'"};
    if (!dir.empty())
      throw UsageError{"simulate: more than one PLAN given ('" + dir + "', '" + a + "')"};
    dir = a;
  }
  if (dir.empty())
    throw UsageError{"simulate: missing PLAN (a directory written by llc-dist compile -o)"};
  if (device.empty())
    throw UsageError{"simulate: missing --device (a name in devices/ or a device file)"};
  if (topology.empty())
    throw UsageError{"simulate: missing --topology (a name in topologies/ or a topology file)"};
  if (format != "text" && format != "json")
    throw UsageError{"--format must be text or json, got '" + format + "'"};
  if (modelFlops < 0)
    throw UsageError{"--model-flops-per-token must be >= 0, got " + std::to_string(modelFlops)};
  cost::Hardware hw;
  if (auto err = cost::loadHardware(device, topology, hw)) {
    error(*err);
    return kExitError;
  }
  cost::SimOptions options;
  if (modelFlops > 0)
    options.modelFlopsPerToken = modelFlops;
  options.trace = !tracePath.empty();
  cost::PlanSimResult r;
  if (auto err = cost::simulatePlan(dir, hw, options, r)) {
    error(*err);
    return kExitError;
  }
  if (!tracePath.empty()) {
    std::ofstream f(tracePath, std::ios::trunc | std::ios::binary);
    f << r.traceJson << '\n';
    f.close();
    if (!f) {
      error("--trace '" + tracePath + "': cannot write the predicted timeline");
      return kExitError;
    }
  }
  if (format == "json") {
    llvm::outs() << json({{"plan", dir}, {"predicted", r.toJson()}}).dump(2) << "\n";
    return 0;
  }
  llvm::outs() << "llc-dist simulate: " << dir << ": predicted\n" << r.text("  ");
  return 0;
}
