//===- Run.cpp - llc-dist run PLAN ----------------------------------------===//
//
// Training on the CUDA backend (when built and a GPU is present) or the CPU
// backend: every rank a thread of this process, or, under mpirun / srun, one
// rank per process over MPI (docs/cluster.md, docs/gpu.md).
//
//===----------------------------------------------------------------------===//
#include "Cli.h"

#include "llcdist/runtime/Train.h"
#if LLCDIST_HAVE_MPI
#include "llcdist/runtime/MpiCommunicator.h"
#endif
#if LLCDIST_HAVE_CUDA
#include "llcdist/runtime/CudaBackend.h"
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <vector>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <unistd.h>

using namespace llcdist;

const char *const llcdist::cli::kRunHelp = R"(llc-dist run PLAN [options]

Executes a plan directory written by `llc-dist compile` on the GPU (CUDA
backend) or the CPU: initializes (or loads) the parameters, runs --steps
training steps over the data, prints one progress line per step, and saves
the parameters.

Alone, every rank of the plan is a thread of this process. Started by a
launcher as one process per rank (`mpirun -n WORLD llc-dist run PLAN`, or
srun), each process runs its rank over MPI: the results are the same bits.
The process of the last stage's first rank prints the progress and writes
--log-json, rank 0's writes --save-params; a launcher world that is not the
plan's, or a rank that fails, ends every process with an error
(docs/cluster.md).

OPTIONS
  --steps N              training steps (default 1)
  --data FILE|synthetic  llm.c token file (e.g. data/corpus_train.bin) or
                         deterministic random tokens (default synthetic)
  --shuffle on|off       shuffle the samples of each epoch (default off: the
                         order of docs/plan-format.md / design.md §4)
  --seed S               seed of initialization, shuffling, synthetic data (default 0)
  --init-from W.safetensors   load parameters (Hugging Face names and layouts)
  --save-params OUT.safetensors  save parameters after the run
  --log-json FILE        JSON Lines, one record per step: step, loss, lr,
                         grad_norm, tokens_per_s (and one per checkpoint)
  --checkpoint-dir D     write checkpoints under D (docs/checkpoints.md): each
                         rank its own shards (master params, optimizer state),
                         rank 0 a manifest; committed atomically, D/latest last
  --checkpoint-every N   a checkpoint after every N-th step (with --checkpoint-dir)
  --keep-last K          keep only the newest K checkpoints (default 0: all)
  --async-checkpoint     snapshot to host memory at the step boundary and write
                         in the background while training continues
  --resume D             continue from a checkpoint (D: a --checkpoint-dir, for
                         its newest checkpoint, or one of its step-N
                         directories) to --steps (the run's total): the same
                         plan gives the uninterrupted run's bits; a plan for
                         another mesh (dp, tp, pp, schedule, ZeRO, dtype)
                         reshards the params and optimizer state
  --trace DIR            write DIR/trace.json: each rank's measured kernel and
                         communication intervals as a Chrome trace (Perfetto)
  --backend cuda|cpu     where the kernels run (default: cuda when this build
                         has the CUDA backend and a GPU is visible, else cpu).
                         With more ranks than GPUs, ranks share a device
                         (virtual ranks, collectives staged through the host);
                         one GPU per rank uses NCCL (docs/gpu.md). Without
                         the flag, LLCDIST_BACKEND=cuda|cpu sets the default
  --device-ids I,J,..    the CUDA devices the ranks of this process use, in
                         order, round-robin (default: every visible device;
                         under a launcher offset by the node-local rank)
  --ranks-per-process K  under a launcher: each process runs K consecutive
                         ranks as threads (mpirun -n WORLD/K; default 1)
  --comm-timeout S       a rank that waits longer than S seconds in one
                         collective or receive fails the run, naming the call
                         and the ranks that did not come (default 600, as
                         NCCL's watchdog)
  --flight-dir DIR       where the flight recorder dumps each rank's last
                         communication calls when a run hangs or fails
                         waiting (DIR/flight-rank-R.json; default
                         llc-dist-flight); read them with llc-dist diagnose DIR
  --flight-entries N     calls each rank keeps (default 2000; 0: no recorder)
  --check-async          asynchronous plans: run each started communication op
                         only at its wait, its outputs NaN-poisoned until then
                         (a missing or late wait changes the numbers or fails)
  --quiet                no progress output
)";

namespace {

// The node-local index of this process under a launcher (0 when none says).
int localProcessIndex() {
  for (const char *var : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                          "MPI_LOCALRANKID", "PMI_LOCAL_RANK"})
    if (const char *v = std::getenv(var)) {
      char *end = nullptr;
      const long n = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && n >= 0)
        return int(n);
    }
  return 0;
}
int localProcessCount() {
  for (const char *var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE",
                          "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"})
    if (const char *v = std::getenv(var)) {
      char *end = nullptr;
      const long n = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && n >= 1)
        return int(n);
    }
  return 1;
}

// --backend / --device-ids: sets o.backend for the CUDA backend (the default
// when it is built and a device is visible). False after printing an error.
bool configureBackend(rt::RunOptions &o, const std::string &backend,
                      std::vector<int> devices, int ranksPerProcess,
                      bool underLauncher) {
#if LLCDIST_HAVE_CUDA
  std::string why;
  const int visible = rt::cudaDevices(&why);
  if (backend == "cpu" || (backend.empty() && visible == 0))
    return true;
  if (visible == 0) {
    llcdist::cli::error("--backend cuda: " + why +
                        " (run with --backend cpu, or on a machine with a GPU)");
    return false;
  }
  if (devices.empty())
    for (int d = 0; d < visible; ++d)
      devices.push_back(d);
  // This process's ranks take the devices in order, from the node-local
  // index of the process (one process per GPU: process i gets device i).
  const int base = underLauncher ? localProcessIndex() * ranksPerProcess : 0;
  const int onNode =
      underLauncher ? localProcessCount() * ranksPerProcess : -1; // -1: the plan's world
  const bool nccl = rt::cudaBackendHasNccl();
  const double timeout = o.collectiveTimeoutSeconds;
  const std::vector<int> local = o.localRanks;
  o.backend = [=](int rank, rt::Communicator *comm)
      -> rt::StatusOr<std::unique_ptr<rt::Backend>> {
    const int world = comm ? comm->worldSize() : 1;
    const int slot = underLauncher ? base + (rank - local.front()) : rank;
    rt::CudaBackendOptions co;
    co.rank = rank;
    co.device = devices[size_t(slot) % devices.size()];
    co.communicator = comm;
    // NCCL when every rank on this node has a device of its own; else the
    // ranks share devices (virtual ranks) and collectives are staged.
    const int ranksOnNode = onNode < 0 ? world : onNode;
    co.nccl = comm && nccl && ranksOnNode <= int(devices.size());
    co.timeoutSeconds = timeout;
    return rt::makeCudaBackend(co);
  };
  return true;
#else
  (void)devices;
  (void)ranksPerProcess;
  (void)underLauncher;
  (void)o;
  if (backend == "cuda") {
    llcdist::cli::error("--backend cuda: this llc-dist was built without the CUDA "
                        "backend (CMake found no CUDA toolkit); run with --backend cpu");
    return false;
  }
  return true;
#endif
}

} // namespace

int llcdist::cli::runRun(Args &args) {
  rt::RunOptions o;
  int64_t seed = 0, ranksPerProcess = 1;
  std::string shuffle = "off", backend, deviceIds;
  ValueFlags runFlags;
  runFlags.add("--steps", &o.steps)
      .add("--data", &o.data)
      .add("--shuffle", &shuffle)
      .add("--seed", &seed)
      .add("--init-from", &o.initFrom)
      .add("--save-params", &o.saveParams)
      .add("--log-json", &o.logJson)
      .add("--checkpoint-dir", &o.checkpointDir)
      .add("--checkpoint-every", &o.checkpointEvery, 1, int64_t(1) << 40)
      .add("--keep-last", &o.keepLast, 1, 1 << 20)
      .add("--resume", &o.resume)
      .add("--trace", &o.traceDir)
      .add("--comm-timeout", &o.collectiveTimeoutSeconds)
      .add("--flight-dir", &o.flightDir)
      .add("--flight-entries", &o.flightEntries)
      .add("--ranks-per-process", &ranksPerProcess)
      .add("--backend", &backend)
      .add("--device-ids", &deviceIds);
  o.collectiveTimeoutSeconds = 600; // NCCL's watchdog default
  o.flightEntries = 2000;           // PyTorch's flight recorder's default
  while (!args.empty()) {
    std::string a = args.next();
    if (a == "--help" || a == "-h") {
      llvm::outs() << kRunHelp;
      return 0;
    }
    if (runFlags.match(args, a))
      continue;
    if (a == "--quiet")
      o.quiet = true;
    else if (a == "--check-async")
      o.checkAsync = true;
    else if (a == "--async-checkpoint")
      o.asyncCheckpoint = true;
    else if (a.rfind("-", 0) == 0)
      throw UsageError{"run: unknown option '" + a + "'"};
    else if (o.planDir.empty())
      o.planDir = a;
    else
      throw UsageError{"run: more than one PLAN given ('" + o.planDir + "', '" +
                       a + "')"};
  }
  if (o.planDir.empty())
    throw UsageError{"run: missing PLAN (a directory written by llc-dist compile -o)"};
  if (o.steps < 0)
    throw UsageError{"--steps must be >= 0"};
  if (!(o.collectiveTimeoutSeconds > 0) || o.collectiveTimeoutSeconds > 1e6)
    throw UsageError{"--comm-timeout must be in (0, 1e6] seconds"};
  if (o.flightEntries < 0 || o.flightEntries > (int64_t(1) << 24))
    throw UsageError{"--flight-entries must be in [0, 16777216]"};
  if (ranksPerProcess < 1 || ranksPerProcess > 1024)
    throw UsageError{"--ranks-per-process must be in [1, 1024]"};
  if (o.flightDir.empty())
    throw UsageError{"--flight-dir needs a directory"};
  if (shuffle != "on" && shuffle != "off")
    throw UsageError{"--shuffle must be on or off, got '" + shuffle + "'"};
  if (backend.empty()) // the environment's default (the test suites pin the CPU)
    if (const char *env = std::getenv("LLCDIST_BACKEND")) {
      backend = env;
      if (backend != "cuda" && backend != "cpu")
        throw UsageError{"LLCDIST_BACKEND must be cuda or cpu, got '" + backend + "'"};
    }
  if (!backend.empty() && backend != "cuda" && backend != "cpu")
    throw UsageError{"--backend must be cuda or cpu, got '" + backend + "'"};
  std::vector<int> devices;
  if (!deviceIds.empty()) {
    for (size_t begin = 0; begin <= deviceIds.size();) { // every item, empty ones too
      size_t comma = deviceIds.find(',', begin);
      if (comma == std::string::npos)
        comma = deviceIds.size();
      const std::string item = deviceIds.substr(begin, comma - begin);
      begin = comma + 1;
      char *end = nullptr;
      const long v = std::strtol(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || v < 0 || v > 1023)
        throw UsageError{"--device-ids: '" + item +
                         "' is not a device ordinal (a comma-separated list such as 0,1,2,3)"};
      devices.push_back(int(v));
    }
    if (backend == "cpu")
      throw UsageError{"--device-ids: only with the CUDA backend (not with --backend cpu)"};
  }
  o.shuffle = shuffle == "on";
  o.seed = static_cast<uint64_t>(seed);
  o.progressIsTty = isatty(fileno(stdout));
  // Started by mpirun or srun as one of several processes: this process runs one rank, on MPI.
  std::unique_ptr<rt::Communicator> comm;
  std::unique_ptr<rt::DumpPeers> peers;
  if (std::optional<std::string> launcher = rt::launcherOf()) {
#if LLCDIST_HAVE_MPI
    auto made = [&]() -> rt::StatusOr<std::unique_ptr<rt::Communicator>> {
      LLCDIST_RETURN_IF_ERROR(rt::initMpi());
      rt::MpiCommunicatorOptions mo;
      mo.timeout = std::chrono::milliseconds(int64_t(o.collectiveTimeoutSeconds * 1000.0));
      mo.ranksPerProcess = int(ranksPerProcess);
      return rt::makeMpiCommunicator(mo);
    }();
    if (!made.isOk()) {
      error(*launcher + ": " + made.status().toString());
      return kExitError;
    }
    comm = std::move(made).value();
    peers = rt::makeMpiDumpPeers();
    o.communicator = comm.get();
    o.dumpPeers = peers.get();
    for (int64_t k = 0; k < ranksPerProcess; ++k)
      o.localRanks.push_back(rt::mpiWorldRank() * int(ranksPerProcess) + int(k));
    o.progressIsTty = false; // the launcher forwards every process's output: a line per step
#else
    error("a launcher started this process as one of several (" + *launcher +
          "), but this llc-dist was built without MPI: install libopenmpi-dev and rebuild "
          "(scripts/setup-deps.sh), or run `llc-dist run PLAN` alone (every rank a thread)");
    return kExitError;
#endif
  }
  if (ranksPerProcess != 1 && !comm) {
    error("--ranks-per-process " + std::to_string(ranksPerProcess) +
          ": no launcher started this process (alone, every rank is a thread of it already; use it under "
          "mpirun -n WORLD/K or srun)");
    return kExitError;
  }
  if (!configureBackend(o, backend, devices, int(ranksPerProcess), comm != nullptr))
    return kExitError;
  rt::Status st = rt::runTraining(o, std::cout);
  if (!st.isOk()) {
    std::cout.flush();
#if LLCDIST_HAVE_MPI
    if (comm) {
      // Every process of the job ends: the others would wait for this rank.
      // (named by rank, unless the run's error already names one of this
      // process's ranks)
      bool named = false;
      for (int r : o.localRanks)
        named = named || st.message().rfind("rank " + std::to_string(r) + ": ", 0) == 0;
      if (!named && ranksPerProcess == 1)
        st = std::move(st).withRank(o.localRanks[0]);
      else if (!named)
        st = std::move(st).withContext(
            "process " + std::to_string(rt::mpiWorldRank()) + " (ranks " +
            std::to_string(o.localRanks.front()) + "-" +
            std::to_string(o.localRanks.back()) + ")");
      error(st.toString());
      rt::abortMpiJob(kExitError);
    }
#endif
    error(st.toString());
    return kExitError;
  }
  return 0;
}
