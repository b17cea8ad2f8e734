// The run command of `llc-dist run` and `llcdist-run` (RunCommand.h): the launcher, the backend choice
// and the run (its help and command line: RunCommandLine.cpp).
#include "llcdist/runtime/RunCommand.h"

#include "llcdist/runtime/CudaBackend.h"
#if LLCDIST_HAVE_MPI
#include "llcdist/runtime/MpiCommunicator.h"
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <unistd.h>
#include <vector>

namespace llcdist::rt {
namespace {

#if LLCDIST_HAVE_CUDA
// The node-local index of this process under a launcher (0 when none says).
int localProcessIndex() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "PMI_LOCAL_RANK"})
    if (const char* v = std::getenv(var)) {
      char* end = nullptr;
      const long n = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && n >= 0) return int(n);
    }
  return 0;
}
int localProcessCount() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"})
    if (const char* v = std::getenv(var)) {
      char* end = nullptr;
      const long n = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && n >= 1) return int(n);
    }
  return 1;
}
#endif

// --backend / --device-ids / --deterministic / --tf32: sets o.backend to the CUDA backend (the default
// when it is built and a device is visible) or the CPU backend; an error (to print) when the CUDA
// backend was asked for and cannot run here.
Status configureBackend(const RunCommandLine& line, RunOptions& o, bool underLauncher, const RunCommandTool& tool) {
#if LLCDIST_HAVE_CUDA
  std::string why;
  const int visible = cudaDevices(&why);
  if (line.backend == "cpu" || (line.backend.empty() && visible == 0)) {
    o.backend = cpuBackendFactory();
    return Status::ok();
  }
  if (visible == 0)
    return Status::invalidArgument("--backend cuda: " + why + " (run with --backend cpu, or on a machine with a GPU)");
  std::vector<int> devices = line.deviceIds;
  if (devices.empty())
    for (int d = 0; d < visible; ++d) devices.push_back(d);
  // This process's ranks take the devices in order, from the node-local index of the process (one
  // process per GPU: process i gets device i).
  const int ranksPerProcess = line.ranksPerProcess;
  const int base = underLauncher ? localProcessIndex() * ranksPerProcess : 0;
  const int onNode = underLauncher ? localProcessCount() * ranksPerProcess : -1;  // -1: the plan's world
  const bool nccl = cudaBackendHasNccl();
  const double timeout = o.collectiveTimeoutSeconds;
  const std::vector<int> local = o.localRanks;
  const bool deterministic = line.deterministic, tf32 = line.tf32;
  o.backend = [=](int rank, Communicator* comm) -> StatusOr<std::unique_ptr<Backend>> {
    const int world = comm ? comm->worldSize() : 1;
    const int slot = underLauncher ? base + (rank - local.front()) : rank;
    CudaBackendOptions co;
    co.rank = rank;
    co.device = devices[size_t(slot) % devices.size()];
    co.communicator = comm;
    // NCCL when every rank on this node has a device of its own; else the ranks share devices
    // (virtual ranks) and collectives are staged.
    const int ranksOnNode = onNode < 0 ? world : onNode;
    co.nccl = comm && nccl && ranksOnNode <= int(devices.size());
    co.timeoutSeconds = timeout;
    co.deterministic = deterministic;
    co.tf32 = tf32;
    return makeCudaBackend(co);
  };
  (void)tool;
  return Status::ok();
#else
  (void)underLauncher;
  if (line.backend == "cuda")
    return Status::invalidArgument("--backend cuda: this " + tool.name +
                                   " was built without the CUDA backend (CMake found no CUDA toolkit); run with "
                                   "--backend cpu");
  o.backend = cpuBackendFactory();
  return Status::ok();
#endif
}

}  // namespace

int runCommand(const std::vector<std::string>& args, const RunCommandTool& tool, std::ostream& out,
               std::ostream& err) {
  auto error = [&](const std::string& msg) {
    err << tool.name << ": error: " << msg << "\n";
    err.flush();
  };
  StatusOr<RunCommandLine> parsed = parseRunCommandLine(args, std::getenv("LLCDIST_BACKEND"));
  if (!parsed.isOk()) {
    error(parsed.status().message());
    err << tool.usageHint << "\n";
    return kRunExitUsage;
  }
  RunCommandLine line = std::move(parsed).value();
  if (line.help) {
    out << runCommandHelp();
    out.flush();
    return kRunExitOk;
  }
  RunOptions& o = line.run;
  o.progressIsTty = &out == &std::cout && isatty(STDOUT_FILENO);
  o.errors = &err;
  // Started by mpirun or srun as one of several processes: this process runs its ranks, on MPI.
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<DumpPeers> peers;
  if (std::optional<std::string> launcher = launcherOf()) {
#if LLCDIST_HAVE_MPI
    auto made = [&]() -> StatusOr<std::unique_ptr<Communicator>> {
      LLCDIST_RETURN_IF_ERROR(initMpi());
      MpiCommunicatorOptions mo;
      mo.timeout = std::chrono::milliseconds(int64_t(o.collectiveTimeoutSeconds * 1000.0));
      mo.ranksPerProcess = line.ranksPerProcess;
      return makeMpiCommunicator(mo);
    }();
    if (!made.isOk()) {
      error(*launcher + ": " + made.status().toString());
      return kRunExitError;
    }
    comm = std::move(made).value();
    peers = makeMpiDumpPeers();
    o.communicator = comm.get();
    o.dumpPeers = peers.get();
    for (int k = 0; k < line.ranksPerProcess; ++k) o.localRanks.push_back(mpiWorldRank() * line.ranksPerProcess + k);
    o.progressIsTty = false;  // the launcher forwards every process's output: a line per step
#else
    error("a launcher started this process as one of several (" + *launcher + "), but this " + tool.name +
          " was built without MPI: install libopenmpi-dev and rebuild (scripts/setup-deps.sh), or run `" +
          tool.invocation + " PLAN` alone (every rank a thread)");
    return kRunExitError;
#endif
  }
  if (line.ranksPerProcess != 1 && !comm) {
    error("--ranks-per-process " + std::to_string(line.ranksPerProcess) +
          ": no launcher started this process (alone, every rank is a thread of it already; use it under "
          "mpirun -n WORLD/K or srun)");
    return kRunExitError;
  }
  if (Status st = configureBackend(line, o, comm != nullptr, tool); !st.isOk()) {
    error(st.message());
    return kRunExitError;
  }
  Status st = runTrainingOn(o, out);
  if (st.isOk()) return kRunExitOk;
  out.flush();
#if LLCDIST_HAVE_MPI
  if (comm) {
    // Every process of the job ends: the others would wait for this rank (named by rank, unless the
    // run's error already names one of this process's ranks).
    bool named = false;
    for (int r : o.localRanks) named = named || st.message().rfind("rank " + std::to_string(r) + ": ", 0) == 0;
    if (!named && line.ranksPerProcess == 1)
      st = std::move(st).withRank(o.localRanks[0]);
    else if (!named)
      st = std::move(st).withContext("process " + std::to_string(mpiWorldRank()) + " (ranks " +
                                     std::to_string(o.localRanks.front()) + "-" +
                                     std::to_string(o.localRanks.back()) + ")");
    error(st.toString());
    abortMpiJob(kRunExitError);
  }
#endif
  error(st.toString());
  return kRunExitError;
}

}  // namespace llcdist::rt
