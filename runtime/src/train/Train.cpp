// The training loop: plan -> backend + interpreter -> params -> steps -> logs and export. See Train.h.
#include "llcdist/runtime/Train.h"

#include "TrainParts.h"

#include "llcdist/runtime/Backend.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Kernels.h"
#include "llcdist/runtime/Plan.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

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

Status checkSingleRank(const Plan& plan) {
  const Manifest& m = plan.manifest;
  if (m.worldSize() != 1 || plan.programs.size() != 1)
    return Status::invalidArgument("the plan needs " + std::to_string(m.worldSize()) + " ranks (mesh dp=" +
                                   std::to_string(m.meshDp) + " tp=" + std::to_string(m.meshTp) + " pp=" +
                                   std::to_string(m.meshPp) + "); this runtime runs single-rank plans only "
                                   "(compile with dp=tp=pp=1)");
  return Status::ok();
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

}  // namespace

Status runTraining(const RunOptions& opts, std::ostream& progress, RunResult* result) {
  if (opts.steps < 0) return Status::invalidArgument("--steps must be >= 0, got " + std::to_string(opts.steps));
  LLCDIST_ASSIGN_OR_RETURN(Plan plan, loadPlan(opts.planDir));
  LLCDIST_RETURN_IF_ERROR(checkSingleRank(plan));
  if (!opts.saveParams.empty()) LLCDIST_RETURN_IF_ERROR(checkWritable(opts.saveParams));
  const Manifest& m = plan.manifest;
  const Program& prog = plan.programs[0];
  const int64_t lossId = prog.findBuffer(schema::kLossMetric);
  const int64_t normId = prog.findBuffer(schema::kGradNormMetric);
  if (lossId < 0)
    return Status::invalidArgument(prog.file + ": no metric buffer named \"loss\" (the runtime reports it each step)");

  std::unique_ptr<Backend> backend = makeCpuBackend();
  LLCDIST_ASSIGN_OR_RETURN(std::unique_ptr<Interpreter> interp, Interpreter::create(plan, 0, *backend));
  LLCDIST_RETURN_IF_ERROR(train::initParams(m, *interp, opts.seed, opts.initFrom));
  LLCDIST_ASSIGN_OR_RETURN(MicrobatchSource data, train::makeDataSource(m, opts.data, opts.shuffle, opts.seed));

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
  for (int64_t step = 0; step < opts.steps; ++step) {
    StepRecord r;
    r.step = step;
    r.lr = learningRate(sched, step);
    const auto t0 = std::chrono::steady_clock::now();
    LLCDIST_RETURN_IF_ERROR(interp->runStep(step, r.lr, data));
    float loss = 0, norm = std::numeric_limits<float>::quiet_NaN();
    LLCDIST_RETURN_IF_ERROR(interp->readBuffer(lossId, &loss));
    if (normId >= 0) LLCDIST_RETURN_IF_ERROR(interp->readBuffer(normId, &norm));
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.loss = loss;
    r.gradNorm = norm;
    r.tokensPerSec = dt > 0 ? double(res.tokensPerStep) / dt : 0.0;
    res.steps.push_back(r);
    if (log.is_open()) {
      log << logRecord(r) << std::flush;
      if (!log) return Status::ioError("--log-json file '" + opts.logJson + "': write failed");
    }
    if (!opts.quiet) {
      if (opts.progressIsTty) progress << '\r' << progressLine(r, opts.steps) << "\x1b[K" << std::flush;
      else progress << progressLine(r, opts.steps) << '\n' << std::flush;
    }
  }
  if (!opts.quiet && opts.progressIsTty && opts.steps > 0) progress << '\n' << std::flush;
  res.peakDeviceBytes = backend->peakAllocatedBytes();
  if (!opts.saveParams.empty())
    LLCDIST_RETURN_IF_ERROR(train::saveParams(m, *interp, opts.saveParams).withContext("--save-params"));
  return Status::ok();
}

}  // namespace llcdist::rt
