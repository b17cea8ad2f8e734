// The training loop: plan -> backend + interpreter -> params -> steps -> logs and export. See Train.h.
#include "llcdist/runtime/Train.h"

#include "TrainParts.h"

#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Kernels.h"
#include "llcdist/runtime/Plan.h"
#include "llcdist/runtime/Timeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <cstdio>
#include <fstream>
#include <limits>
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
  return "{\"step\": " + std::to_string(r.step) + ", \"loss\": " + jsonNumber(r.loss) + ", \"lr\": " + jsonNumber(r.lr) +
         ", \"grad_norm\": " + jsonNumber(r.gradNorm) + ", \"tokens_per_s\": " + jsonNumber(r.tokensPerSec) + "}\n";
}

std::string progressLine(const StepRecord& r, int64_t steps) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "step %lld/%lld | loss %.6f | lr %.3e | grad norm %.4f | %.0f tok/s",
                static_cast<long long>(r.step + 1), static_cast<long long>(steps), r.loss, r.lr, r.gradNorm,
                r.tokensPerSec);
  return buf;
}

// Every rank's first-step memory measurement, for the last log record: each rank settles once (after
// its first step, or when it ends without one); the reporting rank waits until all have.
class MemoryBoard {
public:
  explicit MemoryBoard(int world) : stats_(size_t(world)), settled_(size_t(world), false), pending_(world) {}
  void settle(int rank, const std::optional<MemoryStats>& stats) {
    std::lock_guard<std::mutex> lock(mu_);
    if (settled_[size_t(rank)]) return;
    settled_[size_t(rank)] = true;
    stats_[size_t(rank)] = stats;
    if (--pending_ == 0) cv_.notify_all();
  }
  std::vector<std::optional<MemoryStats>> waitAll() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return pending_ == 0; });
    return stats_;
  }

private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::optional<MemoryStats>> stats_;
  std::vector<bool> settled_;
  int pending_;
};

std::string jsonIntArray(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// The "memory" field of the last log record (Train.h).
std::string memoryField(const std::vector<int64_t>& arena, const std::vector<std::optional<MemoryStats>>& stats) {
  std::vector<int64_t> high, live;
  for (const auto& s : stats) {
    high.push_back(s ? s->arenaHighWaterBytes : 0);
    live.push_back(s ? s->peakLiveBytes : 0);
  }
  return ", \"memory\": {\"arena_bytes\": " + jsonIntArray(arena) + ", \"arena_high_water_bytes\": " +
         jsonIntArray(high) + ", \"peak_live_bytes\": " + jsonIntArray(live) + "}";
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
    const std::string who = j - i == 1 ? "rank " + std::to_string(i)
                                       : "ranks " + std::to_string(i) + "-" + std::to_string(j - 1);
    s += "memory: " + who + " arena " + std::to_string(r.arenaBytes[i]) + " bytes, touched up to " +
         std::to_string(r.arenaHighWaterBytes[i]) + ", live peak " + std::to_string(r.measuredPeakLiveBytes[i]) + "\n";
    i = j;
  }
  return s;
}

// Fails early when --save-params cannot be written, rather than after the run's steps: a probe file
// is created beside the target and removed again.
Status checkWritable(const std::string& path) {
  std::string probe = path + ".probe";
  {
    std::ofstream f(probe, std::ios::trunc);
    if (!f)
      return Status::ioError("--save-params file '" + path +
                             "': cannot write there (does the directory exist?)");
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

}  // namespace

Status runTraining(const RunOptions& opts, std::ostream& progress, RunResult* result) {
  if (opts.steps < 0) return Status::invalidArgument("--steps must be >= 0, got " + std::to_string(opts.steps));
  if (!(opts.collectiveTimeoutSeconds > 0))
    return Status::invalidArgument("the collective timeout must be > 0 seconds");
  LLCDIST_ASSIGN_OR_RETURN(Plan plan, loadPlan(opts.planDir));
  if (!opts.saveParams.empty()) LLCDIST_RETURN_IF_ERROR(checkWritable(opts.saveParams));
  if (!opts.traceDir.empty()) LLCDIST_RETURN_IF_ERROR(checkTraceDir(opts.traceDir));
  const Manifest& m = plan.manifest;
  // The step's metrics come from the lowest rank of the last program: the last pipeline stage, which
  // computes the loss (rank 0 of an SPMD plan).
  const size_t lastProgram = plan.programs.size() - 1;
  const Program& prog = plan.programs[lastProgram];
  const int64_t lossId = prog.findBuffer(schema::kLossMetric);
  const int64_t normId = prog.findBuffer(schema::kGradNormMetric);
  if (lossId < 0)
    return Status::invalidArgument(prog.file + ": no metric buffer named \"loss\" (the runtime reports it each step" +
                                   (lastProgram > 0 ? std::string(", from the last pipeline stage") : std::string()) +
                                   ")");
  const std::vector<int64_t>& lastRanks = m.programs[lastProgram].ranks;
  const int reportRank = int(*std::min_element(lastRanks.begin(), lastRanks.end()));

  const int world = int(m.worldSize());
  const bool multiRank = world > 1;
  const Mesh mesh = m.mesh();
  std::unique_ptr<Communicator> comm;
  if (multiRank) {
    InProcessCommunicatorOptions co;
    co.worldSize = world;
    co.mesh = mesh;
    co.timeout = std::chrono::milliseconds(int64_t(opts.collectiveTimeoutSeconds * 1000.0));
    comm = makeInProcessCommunicator(co);
  }
  // Backends and interpreters are made here, on one thread (the CPU backend sets OpenBLAS's threads
  // process-wide); parameter init and the steps run on one thread per rank.
  std::vector<RankRun> ranks(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    CpuBackendOptions bo;
    bo.rank = r;
    bo.communicator = comm.get();
    ranks[size_t(r)].backend = makeCpuBackend(bo);
    const int64_t programIndex = m.programOfRank(r);  // the loader checks every rank runs one program
    if (programIndex < 0) return Status::internal("no program runs rank " + std::to_string(r));
    auto interp = Interpreter::create(plan, size_t(programIndex), *ranks[size_t(r)].backend, r);
    if (!interp.isOk()) return multiRank ? Status(interp.status()).withRank(r) : interp.status();
    ranks[size_t(r)].interp = std::move(interp).value();
    if (!opts.traceDir.empty()) ranks[size_t(r)].interp->setTimeline(&ranks[size_t(r)].timeline);
    ranks[size_t(r)].interp->setCheckAsync(opts.checkAsync);
  }
  LLCDIST_ASSIGN_OR_RETURN(train::DataSourceFactory dataFor,
                           train::makeDataSources(m, opts.data, opts.shuffle, opts.seed));

  LrSchedule sched = m.lrSchedule;
  if (sched.totalSteps == 0) sched.totalSteps = opts.steps;
  if (sched.kind == LrSchedule::Kind::kWarmupCosine && sched.totalSteps <= sched.warmupSteps)
    sched.totalSteps = sched.warmupSteps + 1;  // a run shorter than the warmup never reaches the decay

  std::ofstream log;
  if (!opts.logJson.empty()) {
    log.open(opts.logJson, std::ios::trunc);
    if (!log) return Status::ioError("--log-json file '" + opts.logJson + "': cannot open for writing");
  }

  RunResult local;
  RunResult& res = result ? *result : local;
  res = RunResult{};
  res.tokensPerStep = m.globalBatch * m.seqLen;
  for (int r = 0; r < world; ++r) res.arenaBytes.push_back(ranks[size_t(r)].backend->arenaBytes());
  MemoryBoard memoryBoard(world);

  // One rank's whole run. reportRank reports (records, log, progress); its metrics are the run's.
  auto runRank = [&](int r) -> Status {
    Interpreter& interp = *ranks[size_t(r)].interp;
    LLCDIST_RETURN_IF_ERROR(train::initParams(m, interp, opts.seed, opts.initFrom));
    const MicrobatchSource data = dataFor(mesh.coord(r, MeshAxis::kDp));
    for (int64_t step = 0; step < opts.steps; ++step) {
      StepRecord rec;
      rec.step = step;
      rec.lr = learningRate(sched, step);
      const auto t0 = std::chrono::steady_clock::now();
      LLCDIST_RETURN_IF_ERROR(interp.runStep(step, rec.lr, data));
      if (step == 0) memoryBoard.settle(r, interp.memoryStats());  // measured during this first step
      if (r != reportRank) continue;
      float loss = 0, norm = std::numeric_limits<float>::quiet_NaN();
      LLCDIST_RETURN_IF_ERROR(interp.readBuffer(lossId, &loss));
      if (normId >= 0) LLCDIST_RETURN_IF_ERROR(interp.readBuffer(normId, &norm));
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      rec.loss = loss;
      rec.gradNorm = norm;
      rec.tokensPerSec = dt > 0 ? double(res.tokensPerStep) / dt : 0.0;
      res.steps.push_back(rec);
      if (log.is_open()) {
        std::string line = logRecord(rec);
        if (step == opts.steps - 1) {  // the last record carries every rank's memory measurement
          line.erase(line.size() - 2);  // "}\n"
          line += memoryField(res.arenaBytes, memoryBoard.waitAll()) + "}\n";
        }
        log << line << std::flush;
        if (!log) return Status::ioError("--log-json file '" + opts.logJson + "': write failed");
      }
      if (!opts.quiet) {
        if (opts.progressIsTty) progress << '\r' << progressLine(rec, opts.steps) << "\x1b[K" << std::flush;
        else progress << progressLine(rec, opts.steps) << '\n' << std::flush;
      }
    }
    return Status::ok();
  };

  if (!multiRank) {
    ranks[0].status = runRank(0);
  } else {
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r)
      threads.emplace_back([&, r] {
        Status s = runRank(r);
        memoryBoard.settle(r, ranks[size_t(r)].interp->memoryStats());  // no-op after a first step
        if (!s.isOk()) comm->abort(Status(s).withRank(r));  // nobody waits for this rank any more
        ranks[size_t(r)].status = std::move(s);
      });
    for (std::thread& t : threads) t.join();
  }
  if (!opts.quiet && opts.progressIsTty && !res.steps.empty()) progress << '\n' << std::flush;
  LLCDIST_RETURN_IF_ERROR(firstError(ranks, comm.get(), multiRank));
  for (const RankRun& r : ranks) {
    res.peakDeviceBytes = std::max(res.peakDeviceBytes, r.backend->peakAllocatedBytes());
    const std::optional<MemoryStats>& mem = r.interp->memoryStats();
    res.arenaHighWaterBytes.push_back(mem ? mem->arenaHighWaterBytes : 0);
    res.measuredPeakLiveBytes.push_back(mem ? mem->peakLiveBytes : 0);
  }
  if (!opts.quiet && opts.steps > 0) progress << memoryLines(res) << std::flush;
  if (!opts.saveParams.empty()) {
    std::vector<Interpreter*> interps;
    for (RankRun& r : ranks) interps.push_back(r.interp.get());
    LLCDIST_RETURN_IF_ERROR(train::saveParams(m, interps, opts.saveParams).withContext("--save-params"));
  }
  // Last, so that a failed run (a step, or --save-params) leaves no trace.
  if (!opts.traceDir.empty()) {
    std::vector<const Timeline*> timelines;
    for (const RankRun& r : ranks) timelines.push_back(&r.timeline);
    LLCDIST_RETURN_IF_ERROR(writeChromeTrace(opts.traceDir + "/trace.json", timelines).withContext("--trace"));
  }
  return Status::ok();
}

}  // namespace llcdist::rt
