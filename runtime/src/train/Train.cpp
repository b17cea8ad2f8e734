// The training loop: plan -> backend + interpreter -> params -> steps -> logs and export. See Train.h.
#include "llcdist/runtime/Train.h"

#include "TrainParts.h"

#include "llcdist/runtime/Checkpoint.h"
#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/FaultInjection.h"
#include "llcdist/runtime/FileUtil.h"
#include "llcdist/runtime/FlightRecorder.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Kernels.h"
#include "llcdist/runtime/Plan.h"
#include "llcdist/runtime/Profile.h"
#include "llcdist/runtime/Timeline.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

namespace llcdist::rt {
namespace {

std::string jsonNumber(double x) {
  if (!std::isfinite(x)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

std::string logRecord(const StepRecord& r) {
  return "{\"step\": " + std::to_string(r.step) + ", \"loss\": " + jsonNumber(r.loss) +
         ", \"lr\": " + jsonNumber(r.lr) + ", \"grad_norm\": " + jsonNumber(r.gradNorm) +
         ", \"tokens_per_s\": " + jsonNumber(r.tokensPerSec) + "}\n";
}

std::string progressLine(const StepRecord& r, int64_t steps) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "step %lld/%lld | loss %.6f | lr %.3e | grad norm %.4f | %.0f tok/s",
                static_cast<long long>(r.step + 1), static_cast<long long>(steps), r.loss, r.lr, r.gradNorm,
                r.tokensPerSec);
  return buf;
}

std::string jsonIntArray(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// The "memory" field of the last log record (Train.h): the run's figures per rank.
std::string memoryField(const RunResult& r) {
  return ", \"memory\": {\"arena_bytes\": " + jsonIntArray(r.arenaBytes) +
         ", \"arena_high_water_bytes\": " + jsonIntArray(r.arenaHighWaterBytes) +
         ", \"peak_live_bytes\": " + jsonIntArray(r.measuredPeakLiveBytes) +
         ", \"peak_device_bytes\": " + jsonIntArray(r.devicePeakBytes) + "}";
}

// The first rank of each process of a world of `n` ranks, `k` per process: the group of the
// driver's collectives over all processes (one call per process).
std::vector<int> firstRanks(int n, int k) {
  std::vector<int> g;
  for (int r = 0; r < n; r += k) g.push_back(r);
  return g;
}

// The memory lines printed after the run (Train.h): one per run of consecutive ranks with the same
// three numbers ("rank r" or "ranks a-b"), so an SPMD plan prints one line.
std::string memoryLines(const RunResult& r) {
  const size_t n = r.arenaBytes.size();
  auto same = [&](size_t i, size_t j) {
    return r.arenaBytes[i] == r.arenaBytes[j] && r.arenaHighWaterBytes[i] == r.arenaHighWaterBytes[j] &&
           r.measuredPeakLiveBytes[i] == r.measuredPeakLiveBytes[j];
  };
  std::string s;
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && same(i, j)) ++j;
    const std::string who =
        j - i == 1 ? "rank " + std::to_string(i) : "ranks " + std::to_string(i) + "-" + std::to_string(j - 1);
    s += "memory: " + who + " arena " + std::to_string(r.arenaBytes[i]) + " bytes, touched up to " +
         std::to_string(r.arenaHighWaterBytes[i]) + ", live peak " + std::to_string(r.measuredPeakLiveBytes[i]) + "\n";
    i = j;
  }
  // A backend that holds more than its arena (the CUDA backend's workspaces, staging, scratch).
  for (size_t k = 0; k < n && k < r.devicePeakBytes.size(); ++k) {
    const int64_t arena =
        (r.arenaBytes[k] + schema::kArenaAlignment - 1) / schema::kArenaAlignment * schema::kArenaAlignment;
    if (r.devicePeakBytes[k] > arena)
      s += "device memory: rank " + std::to_string(k) + " peak " + std::to_string(r.devicePeakBytes[k]) +
           " bytes (arena " + std::to_string(r.arenaBytes[k]) + " + workspaces " +
           std::to_string(r.devicePeakBytes[k] - r.arenaBytes[k]) + ")\n";
  }
  return s;
}

// FNV-1a over one of the plan's files: the processes of a run compare manifest.json's and those of
// the program files they loaded (a process reads only its ranks' programs).
StatusOr<uint64_t> fileFingerprint(const std::string& dir, const std::string& file) {
  StatusOr<uint64_t> h = fnv1a64File(dir + "/" + file);
  if (!h.isOk()) return Status::ioError(dir + "/" + file + ": cannot read it again for the plan's fingerprint");
  return h;
}

// The flight recorder's run id: the plan's fingerprint and rank 0's start time (Diagnose.h orders
// runs by it).
std::string runIdOf(uint64_t fingerprint, int64_t startUs) {
  return hex16(fingerprint) + "-" + std::to_string(startUs);
}

// Fails early when --save-params cannot be written, rather than after the run's steps: a probe file
// is created beside the target and removed again.
Status checkWritable(const std::string& path) {
  std::string probe = path + ".probe";
  {
    std::ofstream f(probe, std::ios::trunc);
    if (!f) return Status::ioError("--save-params file '" + path + "': cannot write there (does the directory exist?)");
  }
  std::remove(probe.c_str());
  return Status::ok();
}

// Fails early when --trace's directory cannot take the trace: it must exist, and a probe file is
// created in it and removed again.
Status checkTraceDir(const std::string& dir) {
  const std::string probe = dir + "/trace.json.probe";
  {
    std::ofstream f(probe, std::ios::trunc);
    if (!f) return Status::ioError("--trace directory '" + dir + "': cannot write there (does it exist?)");
  }
  std::remove(probe.c_str());
  return Status::ok();
}

// One rank of the run: its backend, interpreter and the status it ended with.
struct RankRun {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Interpreter> interp;
  Timeline timeline;  // --trace: written only by this rank's thread
  Status status;
};

// The error a failed run reports: the lowest rank's own error (not an Aborted echo of another rank's
// failure); else the communicator's abort reason.
Status firstError(const std::vector<RankRun>& ranks, const Communicator* comm, bool multiRank) {
  for (size_t r = 0; r < ranks.size(); ++r)
    if (!ranks[r].status.isOk() && ranks[r].status.code() != StatusCode::kAborted)
      return multiRank ? Status(ranks[r].status).withRank(int(r)) : ranks[r].status;
  if (comm && !comm->abortReason().isOk()) return comm->abortReason();
  for (const RankRun& r : ranks)
    if (!r.status.isOk()) return r.status;
  return Status::ok();
}

// The options' rules that need no plan.
Status checkRunOptions(const RunOptions& opts) {
  if (!opts.backend)
    return Status::invalidArgument(
        "RunOptions::backend is unset: runTrainingOn needs the backend factory of "
        "each rank (runTraining, in llcdist_runtime, defaults to the CPU backend)");
  if (opts.steps < 0) return Status::invalidArgument("--steps must be >= 0, got " + std::to_string(opts.steps));
  if (!(opts.collectiveTimeoutSeconds > 0))
    return Status::invalidArgument("the collective timeout must be > 0 seconds");
  if ((opts.checkpointEvery > 0) != !opts.checkpointDir.empty())
    return Status::invalidArgument(opts.checkpointDir.empty() ? "--checkpoint-every needs --checkpoint-dir"
                                                              : "--checkpoint-dir needs --checkpoint-every N (N >= 1)");
  if ((opts.keepLast != 0 || opts.asyncCheckpoint) && opts.checkpointDir.empty())
    return Status::invalidArgument("--keep-last and --async-checkpoint need --checkpoint-dir");
  if (opts.keepLast < 0) return Status::invalidArgument("--keep-last must be >= 0 (0: keep every checkpoint)");
  if (!opts.resume.empty() && !opts.initFrom.empty())
    return Status::invalidArgument(
        "--resume and --init-from: give one (a resumed run takes its params from the "
        "checkpoint)");
  return Status::ok();
}

// How the reporting rank's steps after the first ran (RunResult::stepExecution), and its line.
void describeStepExecution(const Interpreter& interp, RunResult& res) {
  const Interpreter::StepExecution& e = interp.stepExecution();
  const std::string calls = "the second step's " + std::to_string(e.commands) + " backend calls (" +
                            std::to_string(e.launches) + " kernel launches), recorded once";
  if (e.deviceGraph) {
    res.stepExecution = "cuda graph";
    res.stepExecutionLine = "steps: " + calls + ", run as one CUDA graph at every later step\n";
  } else if (e.recorded) {
    res.stepExecution = "replayed";
    res.stepExecutionLine = "steps: " + calls + ", replayed call by call at every later step (" + e.whyNoGraph + ")\n";
  } else {
    res.stepExecution = "op by op";
    res.stepExecutionLine = "steps: op by op (" + (e.whyNotRecorded.empty() ? "one step" : e.whyNotRecorded) + ")\n";
  }
}

// The ranks this process runs: every rank (an in-process run); or, one process per rank (or per k
// consecutive ranks), those the caller names on its communicator, checked against the plan.
StatusOr<std::vector<int>> localRanksOf(const RunOptions& opts, int world, const Mesh& mesh) {
  std::vector<int> local;
  if (opts.communicator == nullptr) {
    for (int r = 0; r < world; ++r) local.push_back(r);
    return local;
  }
  const Communicator* comm = opts.communicator;
  // k consecutive ranks per process, from a multiple of k (every process the same k).
  const int k = int(opts.localRanks.size());
  const int perProcess = std::max(1, k);
  if (comm->worldSize() != world) {
    const int processes = comm->worldSize() / perProcess;
    if (perProcess == 1)
      return Status::invalidArgument(
          "the launcher started " + std::to_string(processes) + " processes but the plan has " + std::to_string(world) +
          " ranks (" + mesh.describe() + "): start one process per rank (-n " + std::to_string(world) + ")");
    return Status::invalidArgument(
        "the launcher started " + std::to_string(processes) + " processes of " + std::to_string(perProcess) +
        " ranks (--ranks-per-process) but the plan has " + std::to_string(world) + " ranks (" + mesh.describe() + ")" +
        (world % perProcess == 0 ? ": start -n " + std::to_string(world / perProcess)
                                 : ": --ranks-per-process must divide " + std::to_string(world)));
  }
  bool consecutive = k >= 1 && world % k == 0 && opts.localRanks[0] >= 0 && opts.localRanks[0] % k == 0;
  for (int i = 0; consecutive && i < k; ++i) consecutive = opts.localRanks[size_t(i)] == opts.localRanks[0] + i;
  if (!consecutive || opts.localRanks.back() >= world)
    return Status::invalidArgument(
        "one process per rank (or per k ranks): give the k consecutive ranks this "
        "process runs, from a multiple of k that divides the plan's " +
        std::to_string(world) + " ranks");
  local = opts.localRanks;
  return local;
}

// Every process must have loaded the same plan: the fingerprints of all, compared on each (with each
// one's start time: rank 0's names the run in the flight recorder's dumps), over the processes' first
// ranks (one call per process). Returns every process's [start time, fingerprints...].
template <typename OnError>
StatusOr<std::vector<int64_t>> checkSamePlan(const Manifest& m, Communicator* comm, int world,
                                             const std::vector<int>& local, int64_t startUs,
                                             const std::vector<int64_t>& fingerprints, OnError fireOnError) {
  const ScopedCallSite scopedSite(CommCallSite::driver("exchanging the plan's fingerprint"));
  // Per process: its start time, then the fingerprints.
  std::vector<int64_t> mine = {startUs};
  mine.insert(mine.end(), fingerprints.begin(), fingerprints.end());
  const int64_t n = int64_t(mine.size());
  const std::vector<int> leaders = firstRanks(world, int(local.size()));
  std::vector<int64_t> all(leaders.size() * size_t(n));
  LLCDIST_RETURN_IF_ERROR(fireOnError(comm->allGather(local[0], leaders, mine.data(), all.data(), 1, n, CommDType::kF64)
                                          .withContext("exchanging the plan's fingerprint")));
  // File f of process p: all[p·n + 1 + f] (f 0: manifest.json; 1 + i: program i; 0 = not loaded),
  // compared with the first process that loaded it.
  for (int64_t f = 0; f < n - 1; ++f) {
    const std::string file = f == 0 ? std::string("manifest.json") : m.programs[size_t(f - 1)].file;
    std::optional<size_t> first;
    for (size_t p = 0; p < leaders.size(); ++p) {
      const int64_t h = all[p * size_t(n) + 1 + size_t(f)];
      if (h == 0 && f > 0) continue;
      if (!first) {
        first = p;
        continue;
      }
      const int64_t h0 = all[*first * size_t(n) + 1 + size_t(f)];
      if (h == h0) continue;
      return Status::invalidArgument("rank " + std::to_string(leaders[p]) + " loaded another plan than rank " +
                                     std::to_string(leaders[*first]) + " (" + file + ": fingerprint " +
                                     hex16(uint64_t(h)) + " vs " + hex16(uint64_t(h0)) +
                                     "): every process must run the same plan directory");
    }
  }
  return all;
}

// What the run is, for a checkpoint's manifest and for the checks against the one it resumes.
CheckpointManifest checkpointDescription(const RunOptions& opts, const Manifest& m, const LrSchedule& sched,
                                         uint64_t planHash) {
  CheckpointManifest runDesc;
  runDesc.globalBatch = m.globalBatch;
  runDesc.seqLen = m.seqLen;
  runDesc.lrSchedule = sched.kind == LrSchedule::Kind::kWarmupCosine ? "cosine" : "constant";
  runDesc.lrTotalSteps = sched.totalSteps;
  runDesc.data = opts.data;
  runDesc.shuffle = opts.shuffle;
  runDesc.seed = opts.seed;
  runDesc.modelName = m.modelName;
  runDesc.architecture = m.architecture;
  runDesc.modelFingerprint = train::modelFingerprint(m);
  runDesc.vocabSize = m.vocabSize;
  runDesc.meshDp = m.meshDp;
  runDesc.meshTp = m.meshTp;
  runDesc.meshPp = m.meshPp;
  runDesc.meshCp = m.meshCp;
  runDesc.planFingerprint = hex16(planHash);
  runDesc.optimizer = m.optimizer.kind == OptimizerDesc::Kind::kAdamW ? "adamw" : "sgd";
  return runDesc;
}

// --save-params: rank 0's process writes the file; the others send it their param buffers, param by
// param in the manifest's order (tag: the param's index; microbatch -2), which it receives in that
// order.
template <typename OnError>
Status saveParamsOnRankZero(const RunOptions& opts, const Manifest& m, const Plan& plan, int world,
                            const std::vector<int>& local, std::vector<RankRun>& ranks, Communicator* comm,
                            OnError fireOnError) {
  auto isLocal = [&](int r) { return std::find(local.begin(), local.end(), r) != local.end(); };
  constexpr int64_t kParamMessage = -2;
  const ScopedCallSite scopedSite(CommCallSite::driver("--save-params: the params to rank 0"));
  if (isLocal(0)) {
    auto read = [&](int r, int64_t param, int64_t buffer) -> StatusOr<std::vector<float>> {
      if (isLocal(r)) return ranks[size_t(r)].interp->readF32(buffer);
      std::vector<float> v(size_t(plan.programs[size_t(m.programOfRank(r))].buffers[size_t(buffer)].numel()));
      LLCDIST_RETURN_IF_ERROR(comm->recv(0, r, v.data(), int64_t(v.size()), param, kParamMessage));
      return v;
    };
    LLCDIST_RETURN_IF_ERROR(
        fireOnError(train::saveParams(m, world, read, opts.saveParams).withContext("--save-params")));
  } else {
    for (const ParamDesc& p : m.params)
      for (int r : local)
        if (const ParamDesc::Placement* pl = p.placementIn(m.programOfRank(r))) {
          LLCDIST_ASSIGN_OR_RETURN(std::vector<float> v, ranks[size_t(r)].interp->readF32(pl->buffer));
          LLCDIST_RETURN_IF_ERROR(fireOnError(
              comm->send(r, 0, v.data(), int64_t(v.size()), int64_t(&p - m.params.data()), kParamMessage)
                  .withContext("--save-params: sending rank " + std::to_string(r) + "'s params to rank 0")));
        }
  }
  return Status::ok();
}

// The fingerprints, where they name the run (the flight recorder) or are compared (one process of
// several): manifest.json's, then, one process of several, each program's (0: not loaded here).
StatusOr<std::vector<int64_t>> planFingerprints(const RunOptions& opts, const Plan& plan, bool wanted) {
  const bool external = opts.communicator != nullptr;
  const Manifest& m = plan.manifest;
  std::vector<int64_t> fingerprints;
  if (wanted) {
    LLCDIST_ASSIGN_OR_RETURN(uint64_t h, fileFingerprint(opts.planDir, "manifest.json"));
    fingerprints.push_back(int64_t(h));
  }
  for (size_t p = 0; external && p < m.programs.size(); ++p) {
    uint64_t h = 0;
    if (plan.isLoaded(p)) {
      LLCDIST_ASSIGN_OR_RETURN(h, fileFingerprint(opts.planDir, m.programs[p].file));
    }
    fingerprints.push_back(int64_t(h));
  }
  return fingerprints;
}

// The flight recorder of the local ranks' calls, the communicator that records them, and its watchdog,
// which dumps them when a call outlives the timeout or the run fails with a rank waiting.
struct FlightRecording {
  std::unique_ptr<FlightRecorder> recorder;
  std::unique_ptr<Communicator> recording;
  std::unique_ptr<Watchdog> watchdog;
};

FlightRecording startFlightRecorder(const RunOptions& opts, const Mesh& mesh, int world, const std::vector<int>& local,
                                    uint64_t manifestFingerprint, int64_t startUs, Communicator& comm) {
  FlightRecording f;
  FlightRunInfo info;
  info.runId = runIdOf(manifestFingerprint, startUs);
  info.planDir = opts.planDir;
  info.worldSize = world;
  info.mesh = mesh;
  info.commTimeoutSeconds = opts.collectiveTimeoutSeconds;
  f.recorder = std::make_unique<FlightRecorder>(info, local, size_t(std::min<int64_t>(opts.flightEntries, 1 << 24)));
  f.recording = makeRecordingCommunicator(comm, *f.recorder);
  WatchdogOptions wo;
  wo.dir = opts.flightDir;
  wo.timeoutSeconds = opts.collectiveTimeoutSeconds;
  wo.communicator = f.recording.get();
  wo.peers = opts.dumpPeers;
  wo.errors = opts.errors;
  f.watchdog = std::make_unique<Watchdog>(*f.recorder, wo);
  return f;
}

// Backends and interpreters, made here on one thread (the CPU backend sets OpenBLAS's threads
// process-wide); parameter init and the steps run on one thread per rank.
StatusOr<std::vector<RankRun>> makeRanks(const RunOptions& opts, const Plan& plan, const std::vector<int>& local,
                                         Communicator* comm) {
  const Manifest& m = plan.manifest;
  const bool multiRank = m.worldSize() > 1;
  std::vector<RankRun> ranks(static_cast<size_t>(m.worldSize()));
  for (int r : local) {
    StatusOr<std::unique_ptr<Backend>> made = opts.backend(r, comm);
    if (!made.isOk()) return multiRank ? Status(made.status()).withRank(r) : made.status();
    if (!made.value()) return Status::internal("the backend factory returned no backend for rank " + std::to_string(r));
    ranks[size_t(r)].backend = std::move(made).value();
    const int64_t programIndex = m.programOfRank(r);  // the loader checks every rank runs one program
    if (programIndex < 0) return Status::internal("no program runs rank " + std::to_string(r));
    auto interp = Interpreter::create(plan, size_t(programIndex), *ranks[size_t(r)].backend, r);
    if (!interp.isOk()) return multiRank ? Status(interp.status()).withRank(r) : interp.status();
    ranks[size_t(r)].interp = std::move(interp).value();
    if (!opts.traceDir.empty() || opts.profile) ranks[size_t(r)].interp->setTimeline(&ranks[size_t(r)].timeline);
    ranks[size_t(r)].interp->setCheckAsync(opts.checkAsync);
    ranks[size_t(r)].interp->setRecordSteps(opts.recordSteps);
  }
  return ranks;
}

// Every rank's memory into `res`: this process's ranks', and with one process per rank (`comm` set)
// the others' (an all-gather over the world of each rank's figures, 8-byte elements copied as they are).
Status gatherMemory(const std::vector<RankRun>& ranks, const std::vector<int>& local, int world, Communicator* comm,
                    RunResult& res) {
  std::vector<std::array<int64_t, 4>> memory(size_t(world), {0, 0, 0, 0});
  for (int r : local) {
    const std::optional<MemoryStats>& mem = ranks[size_t(r)].interp->memoryStats();
    memory[size_t(r)] = {ranks[size_t(r)].backend->arenaBytes(), mem ? mem->arenaHighWaterBytes : 0,
                         mem ? mem->peakLiveBytes : 0, ranks[size_t(r)].backend->peakAllocatedBytes()};
    res.peakDeviceBytes = std::max(res.peakDeviceBytes, ranks[size_t(r)].backend->peakAllocatedBytes());
  }
  if (comm) {
    // Each process's ranks' figures (consecutive ranks: consecutive entries), over the first ranks.
    const std::vector<std::array<int64_t, 4>> mine(memory.begin() + local.front(), memory.begin() + local.back() + 1);
    const ScopedCallSite scopedSite(CommCallSite::driver("gathering every rank's memory"));
    LLCDIST_RETURN_IF_ERROR(comm->allGather(local[0], firstRanks(world, int(local.size())), mine.data(), memory.data(),
                                            1, 4 * int64_t(local.size()), CommDType::kF64)
                                .withContext("gathering every rank's memory"));
  }
  for (const auto& [arena, high, live, device] : memory) {
    res.arenaBytes.push_back(arena);
    res.arenaHighWaterBytes.push_back(high);
    res.measuredPeakLiveBytes.push_back(live);
    res.devicePeakBytes.push_back(device);
  }
  return Status::ok();
}

// --profile: each program's lowest local rank (Profile.h), the first step left out when several ran;
// --trace: the timelines, written last, so that a failed run leaves no trace.
Status writeProfileAndTrace(const RunOptions& opts, const Manifest& m, const std::vector<int>& local,
                            const std::vector<RankRun>& ranks, std::ostream& progress) {
  // --profile: each program's lowest local rank (Profile.h), the first step left out when several ran.
  if (opts.profile && opts.steps > 0) {
    std::set<size_t> shown;
    for (int r : local) {
      const size_t program = size_t(m.programOfRank(r));
      if (!shown.insert(program).second) continue;
      const Profile prof = computeProfile(ranks[size_t(r)].timeline, kSkipFirstStep, r);
      printProfile(prof, ranks[size_t(r)].interp->kernelChoices(), progress);
    }
    progress << std::flush;
  }
  // Last, so that a failed run (a step, or --save-params) leaves no trace.
  if (!opts.traceDir.empty()) {
    std::vector<const Timeline*> timelines;
    for (const RankRun& r : ranks) timelines.push_back(&r.timeline);
    LLCDIST_RETURN_IF_ERROR(writeChromeTrace(opts.traceDir + "/trace.json", timelines).withContext("--trace"));
  }
  return Status::ok();
}

// Checkpoints and resume (Checkpoint.h): what the run is, for the checkpoint's manifest and for the
// checks against the one it resumes; each local rank's state tensors; the checkpoint it resumes; the
// saver, whose preparation (removing what an interrupted save left) happens before the processes'
// first exchange, so no rank writes into the root before it.
struct Checkpointing {
  CheckpointManifest runDesc;
  std::optional<CheckpointReader> resumeFrom;
  std::vector<std::vector<train::StateTensor>> states;
  std::unique_ptr<train::CheckpointSaver> saver;
};

StatusOr<Checkpointing> setUpCheckpoints(const RunOptions& opts, const Plan& plan, const LrSchedule& sched,
                                         const std::vector<int>& local, Communicator* comm, std::ostream& progress,
                                         std::mutex& outputMutex) {
  const Manifest& m = plan.manifest;
  const int world = int(m.worldSize());
  const bool checkpointing = !opts.checkpointDir.empty();
  Checkpointing ck;
  CheckpointManifest& runDesc = ck.runDesc;
  ck.states.resize(size_t(world));
  if (checkpointing || !opts.resume.empty()) {
    LLCDIST_ASSIGN_OR_RETURN(uint64_t planHash, fileFingerprint(opts.planDir, "manifest.json"));
    runDesc = checkpointDescription(opts, m, sched, planHash);
    for (int r : local) {
      const int64_t p = m.programOfRank(r);
      if (p < 0) return Status::internal("no program runs rank " + std::to_string(r));
      LLCDIST_ASSIGN_OR_RETURN(ck.states[size_t(r)], train::stateTensorsOf(m, plan.programs[size_t(p)], size_t(p), r));
    }
  }
  if (!opts.resume.empty()) {
    LLCDIST_ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::open(opts.resume));
    LLCDIST_RETURN_IF_ERROR(train::checkResumable(reader, m, runDesc, opts.steps));
    ck.resumeFrom = std::move(reader);
  }
  if (checkpointing) {
    train::CheckpointRun cr;
    cr.root = opts.checkpointDir;
    cr.keepLast = opts.keepLast;
    cr.async = opts.asyncCheckpoint;
    cr.manifest = &m;
    cr.plan = &plan;
    cr.base = runDesc;
    cr.comm = comm;
    cr.world = world;
    cr.progress = opts.quiet ? nullptr : &progress;
    cr.progressMutex = &outputMutex;
    ck.saver = std::make_unique<train::CheckpointSaver>(std::move(cr));
    if (std::find(local.begin(), local.end(), 0) != local.end()) LLCDIST_RETURN_IF_ERROR(ck.saver->prepare());
  }
  return ck;
}

// The reporting rank's record of each step: its loss and gradient norm read back, the --log-json line
// (the last one waits for every rank's memory measurement), the progress line.
struct StepReporter {
  const RunOptions& opts;
  std::ostream& progress;
  RunResult& res;
  std::ofstream& log;
  std::string& lastRecord;
  std::mutex& outputMutex;
  int64_t lossId, normId;

  Status report(Interpreter& interp, StepRecord rec, double dt) {
    const std::lock_guard<std::mutex> outputLock(outputMutex);
    float loss = 0, norm = std::numeric_limits<float>::quiet_NaN();
    LLCDIST_RETURN_IF_ERROR(interp.readBuffer(lossId, &loss));
    if (normId >= 0) LLCDIST_RETURN_IF_ERROR(interp.readBuffer(normId, &norm));
    rec.loss = loss;
    rec.gradNorm = norm;
    rec.tokensPerSec = dt > 0 ? double(res.tokensPerStep) / dt : 0.0;
    res.steps.push_back(rec);
    if (log.is_open()) {
      std::string line = logRecord(rec);
      if (rec.step == opts.steps - 1) {
        lastRecord = line;
      } else {
        log << line << std::flush;
        if (!log) return Status::ioError("--log-json file '" + opts.logJson + "': write failed");
      }
    }
    if (!opts.quiet) {
      if (opts.progressIsTty)
        progress << '\r' << progressLine(rec, opts.steps) << "\x1b[K" << std::flush;
      else
        progress << progressLine(rec, opts.steps) << '\n' << std::flush;
    }
    return Status::ok();
  }
};

// The plan: one process of several reads only the programs its ranks run, and every program when it
// runs rank 0 and writes --save-params (the coordinated writer reads every rank's params by their
// programs' buffers).
StatusOr<Plan> loadPlanFor(const RunOptions& opts) {
  const bool external = opts.communicator != nullptr;
  auto wanted = [&](const Manifest& man, size_t program) {
    if (!external) return true;
    for (int r : opts.localRanks) {
      if (r == 0 && !opts.saveParams.empty()) return true;
      if (man.programOfRank(r) == int64_t(program)) return true;
    }
    return false;
  };
  return loadPlan(opts.planDir, wanted);
}

// The step's metrics come from the lowest rank of the last program: the last pipeline stage, which
// computes the loss (rank 0 of an SPMD plan). (A process that did not load the last program has no
// reporting rank: the one that did checks.)
struct ReportingRank {
  int64_t lossId, normId;
  int rank;
};

StatusOr<ReportingRank> reportingRankOf(const Plan& plan) {
  const size_t lastProgram = plan.programs.size() - 1;
  const Program& prog = plan.programs[lastProgram];
  const int64_t lossId = prog.findBuffer(schema::kLossMetric);
  const int64_t normId = prog.findBuffer(schema::kGradNormMetric);
  if (lossId < 0 && plan.isLoaded(lastProgram))
    return Status::invalidArgument(prog.file + ": no metric buffer named \"loss\" (the runtime reports it each step" +
                                   (lastProgram > 0 ? std::string(", from the last pipeline stage") : std::string()) +
                                   ")");
  const std::vector<int64_t>& lastRanks = plan.manifest.programs[lastProgram].ranks;
  return ReportingRank{lossId, normId, int(*std::min_element(lastRanks.begin(), lastRanks.end()))};
}

// LLCDIST_FAULT (FaultInjection.h): the tests' crashed, hung or slow rank, as a communicator over
// `comm` (null when the variable is unset).
StatusOr<std::unique_ptr<FaultCommunicator>> faultCommunicatorOf(Communicator* comm, int world) {
  LLCDIST_ASSIGN_OR_RETURN(std::optional<FaultSpec> fault, faultSpecFromEnvironment());
  if (fault) {
    if (world == 1) return Status::invalidArgument("LLCDIST_FAULT: a one-rank plan makes no communication call");
    if (fault->rank >= world)
      return Status::invalidArgument("LLCDIST_FAULT: rank " + std::to_string(fault->rank) + " is not in the plan's " +
                                     std::to_string(world) + " ranks");
    return makeFaultCommunicator(*comm, *fault);
  }
  return std::unique_ptr<FaultCommunicator>();
}

// Runs `runRank` for every local rank, each on a thread of its own with a communicator (`comm`; one
// rank: on this thread), into the ranks' statuses; a failed rank aborts the communicator, so that
// nobody waits for it any more.
template <typename RunRank>
void runEveryRank(const std::vector<int>& local, std::vector<RankRun>& ranks, Communicator* comm, RunRank runRank) {
  if (!comm) {
    ranks[size_t(local.front())].status = runRank(local.front());
    return;
  }
  std::vector<std::thread> threads;
  for (int r : local)
    threads.emplace_back([&, r] {
      Status s = runRank(r);
      if (!s.isOk()) comm->abort(Status(s).withRank(r));
      ranks[size_t(r)].status = std::move(s);
    });
  for (std::thread& t : threads) t.join();
}

}  // namespace

Status runTrainingOn(const RunOptions& opts, std::ostream& progress, RunResult* result) {
  LLCDIST_RETURN_IF_ERROR(checkRunOptions(opts));
  const bool external = opts.communicator != nullptr;
  LLCDIST_ASSIGN_OR_RETURN(Plan plan, loadPlanFor(opts));
  const Manifest& m = plan.manifest;
  const int world = int(m.worldSize());
  const bool multiRank = world > 1;
  const Mesh mesh = m.mesh();
  // The ranks this process runs: every rank, on an in-process communicator; or, one process per rank,
  // those the caller names on its communicator.
  Communicator* comm = opts.communicator;
  std::unique_ptr<Communicator> ownComm;
  LLCDIST_ASSIGN_OR_RETURN(std::vector<int> local, localRanksOf(opts, world, mesh));
  if (multiRank && !external) {
    InProcessCommunicatorOptions co;
    co.worldSize = world;
    co.mesh = mesh;
    co.timeout = std::chrono::milliseconds(int64_t(opts.collectiveTimeoutSeconds * 1000.0));
    ownComm = makeInProcessCommunicator(co);
    comm = ownComm.get();
  }
  // The fingerprints, where they name the run (the flight recorder) or are compared (one process of
  // several): manifest.json's, then each program's (0: not loaded here).
  const bool recordCalls = multiRank && opts.flightEntries > 0;
  LLCDIST_ASSIGN_OR_RETURN(std::vector<int64_t> fingerprints, planFingerprints(opts, plan, external || recordCalls));
  const int64_t startUs = flightNowUs();
  // The flight recorder records every call of the local ranks; its watchdog dumps them when a call
  // outlives the timeout, or when the run fails with a rank waiting (fireOnError).
  FlightRecording flight;
  if (recordCalls) {
    flight = startFlightRecorder(opts, mesh, world, local, uint64_t(fingerprints[0]), startUs, *comm);
    comm = flight.recording.get();
  }
  std::unique_ptr<FlightRecorder>& recorder = flight.recorder;
  std::unique_ptr<Watchdog>& watchdog = flight.watchdog;
  auto fireOnError = [&](Status st) {
    if (!st.isOk() && watchdog && recorder->anyUnfinished()) watchdog->fire(st.toString());
    return st;
  };
  LrSchedule sched = m.lrSchedule;
  if (sched.totalSteps == 0) sched.totalSteps = opts.steps;
  if (sched.kind == LrSchedule::Kind::kWarmupCosine && sched.totalSteps <= sched.warmupSteps)
    sched.totalSteps = sched.warmupSteps + 1;  // a run shorter than the warmup never reaches the decay

  // Checkpoints and resume (Checkpoint.h): what the run is, for the checkpoint's manifest and for the
  // checks against the one it resumes; each local rank's state tensors; the saver, whose preparation
  // (removing what an interrupted save left) happens before the processes' first exchange, so no
  // rank writes into the root before it.
  std::mutex outputMutex;  // progress and log lines: the reporting rank's and rank 0's checkpoint lines
  LLCDIST_ASSIGN_OR_RETURN(
      Checkpointing ck, setUpCheckpoints(opts, plan, sched, local, multiRank ? comm : nullptr, progress, outputMutex));
  const std::optional<CheckpointReader>& resumeFrom = ck.resumeFrom;
  std::vector<std::vector<train::StateTensor>>& states = ck.states;
  std::unique_ptr<train::CheckpointSaver>& saver = ck.saver;
  const int64_t firstStep = resumeFrom ? resumeFrom->manifest().step : 0;
  if (external) {
    LLCDIST_ASSIGN_OR_RETURN(std::vector<int64_t> all,
                             checkSamePlan(m, comm, world, local, startUs, fingerprints, fireOnError));
    if (recorder) recorder->setRunId(runIdOf(uint64_t(all[1]), all[0]));
  }
  auto isLocal = [&](int r) { return std::find(local.begin(), local.end(), r) != local.end(); };
  if (!opts.saveParams.empty() && isLocal(0)) LLCDIST_RETURN_IF_ERROR(checkWritable(opts.saveParams));
  if (!opts.traceDir.empty()) {
    if (external)
      return Status::invalidArgument(
          "--trace: one process per rank does not record a trace yet "
          "(run the plan without the launcher to trace it)");
    LLCDIST_RETURN_IF_ERROR(checkTraceDir(opts.traceDir));
  }
  // The step's metrics come from the lowest rank of the last program: the last pipeline stage, which
  // computes the loss (rank 0 of an SPMD plan).
  // (A process that did not load the last program has no reporting rank: the one that did checks.)
  LLCDIST_ASSIGN_OR_RETURN(const ReportingRank reporting, reportingRankOf(plan));
  const int64_t lossId = reporting.lossId, normId = reporting.normId;
  const int reportRank = reporting.rank;
  const bool reporter = isLocal(reportRank);

  // LLCDIST_FAULT (FaultInjection.h): the tests' crashed, hung or slow rank.
  LLCDIST_ASSIGN_OR_RETURN(std::unique_ptr<FaultCommunicator> faulty, faultCommunicatorOf(comm, world));
  if (faulty) comm = faulty.get();
  // Backends and interpreters are made here, on one thread (the CPU backend sets OpenBLAS's threads
  // process-wide); parameter init and the steps run on one thread per rank.
  LLCDIST_ASSIGN_OR_RETURN(std::vector<RankRun> ranks, makeRanks(opts, plan, local, multiRank ? comm : nullptr));
  LLCDIST_ASSIGN_OR_RETURN(train::DataSourceFactory dataFor,
                           train::makeDataSources(m, opts.data, opts.shuffle, opts.seed));

  std::ofstream log;
  if (!opts.logJson.empty() && reporter) {
    log.open(opts.logJson, std::ios::trunc);
    if (!log) return Status::ioError("--log-json file '" + opts.logJson + "': cannot open for writing");
    if (saver) saver->setLog(&log);
  }

  RunResult local_;
  RunResult& res = result ? *result : local_;
  res = RunResult{};
  res.tokensPerStep = m.globalBatch * m.seqLen;
  // The last step's log record waits for every rank's memory measurement (after the steps).
  std::string lastRecord;
  StepReporter reporter_{opts, progress, res, log, lastRecord, outputMutex, lossId, normId};

  // One rank's whole run. reportRank reports (records, log, progress); its metrics are the run's.
  auto runRank = [&](int r) -> Status {
    Interpreter& interp = *ranks[size_t(r)].interp;
    if (multiRank) {
      const ScopedCallSite scopedSite(CommCallSite::driver("connecting the backend's channels"));
      LLCDIST_RETURN_IF_ERROR(ranks[size_t(r)].backend->connect().withContext("connecting the backend's channels"));
    }
    if (resumeFrom)
      LLCDIST_RETURN_IF_ERROR(train::loadRankState(*resumeFrom, m, states[size_t(r)], interp));
    else
      LLCDIST_RETURN_IF_ERROR(train::initParams(m, interp, opts.seed, opts.initFrom));
    const MicrobatchSource data = dataFor(mesh.coord(r, MeshAxis::kDp), mesh.coord(r, MeshAxis::kCp));
    for (int64_t step = firstStep; step < opts.steps; ++step) {
      StepRecord rec;
      rec.step = step;
      rec.lr = learningRate(sched, step);
      const auto t0 = std::chrono::steady_clock::now();
      if (faulty) faulty->beginStep(r, step);
      LLCDIST_RETURN_IF_ERROR(interp.runStep(step, rec.lr, data));
      const auto t1 = std::chrono::steady_clock::now();  // the step, without its checkpoint
      if (r == reportRank)
        LLCDIST_RETURN_IF_ERROR(reporter_.report(interp, rec, std::chrono::duration<double>(t1 - t0).count()));
      if (saver && (step + 1) % opts.checkpointEvery == 0)
        LLCDIST_RETURN_IF_ERROR(fireOnError(saver->save(r, step + 1, interp, states[size_t(r)])));
    }
    if (saver) LLCDIST_RETURN_IF_ERROR(fireOnError(saver->finish(r)));  // an async save still writing
    return Status::ok();
  };

  runEveryRank(local, ranks, multiRank ? comm : nullptr, runRank);
  if (!opts.quiet && opts.progressIsTty && !res.steps.empty() && reporter) progress << '\n' << std::flush;
  LLCDIST_RETURN_IF_ERROR(fireOnError(firstError(ranks, comm, multiRank)));
  // Every rank's memory: this process's ranks', and with one process per rank the others' (an
  // all-gather over the world of each rank's three figures, 8-byte elements copied as they are).
  LLCDIST_RETURN_IF_ERROR(fireOnError(gatherMemory(ranks, local, world, external && multiRank ? comm : nullptr, res)));
  if (!lastRecord.empty()) {                  // the last record carries every rank's memory measurement
    lastRecord.erase(lastRecord.size() - 2);  // "}\n"
    log << lastRecord + memoryField(res) + "}\n" << std::flush;
    if (!log) return Status::ioError("--log-json file '" + opts.logJson + "': write failed");
  }
  if (reporter) describeStepExecution(*ranks[size_t(reportRank)].interp, res);
  if (!opts.quiet && opts.steps > 0 && reporter) progress << memoryLines(res) << res.stepExecutionLine << std::flush;
  if (!opts.saveParams.empty())
    LLCDIST_RETURN_IF_ERROR(saveParamsOnRankZero(opts, m, plan, world, local, ranks, comm, fireOnError));
  // Last, so that a failed run (a step, or --save-params) leaves no trace.
  LLCDIST_RETURN_IF_ERROR(writeProfileAndTrace(opts, m, local, ranks, progress));
  return Status::ok();
}

std::optional<std::string> launcherOf() {
  const bool srun = std::getenv("SLURM_PROCID") != nullptr;
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}) {
    const char* v = std::getenv(var);
    if (!v || (std::string(var) == "SLURM_STEP_NUM_TASKS" && !srun)) continue;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end != v && *end == '\0' && n > 1) return std::string(var) + "=" + v;
  }
  return std::nullopt;
}

}  // namespace llcdist::rt
