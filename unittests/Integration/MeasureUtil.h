//===- MeasureUtil.h - a plan's memory as the runtime measures it ---------===//
//
// Shared by MemoryTest, ZeroPaddingTest and ZeroBubbleMemoryTest: run a plan
// one step and hold the runtime's per-rank arena high-water mark and peak of
// live bytes against what the compiler planned (plan.memory).
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_UNITTESTS_INTEGRATION_MEASUREUTIL_H
#define LLCDIST_UNITTESTS_INTEGRATION_MEASUREUTIL_H

#include "PlanTestUtil.h"

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/runtime/Plan.h"
#include "llcdist/runtime/Train.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <sstream>
#include <vector>

namespace llcdist::test {

/// plan.memory of every plan.program, by kind, plus "arena": the program's
/// arena bytes (-1 when it has none).
inline std::vector<std::map<std::string, int64_t>> plannedMemory(mlir::ModuleOp m) {
  std::vector<std::map<std::string, int64_t>> out;
  for (auto program : m.getOps<plan::ProgramOp>()) {
    std::map<std::string, int64_t> kinds;
    if (auto d = program->getAttrOfType<mlir::DictionaryAttr>("plan.memory"))
      for (mlir::NamedAttribute n : d)
        kinds[n.getName().str()] = mlir::cast<mlir::IntegerAttr>(n.getValue()).getInt();
    kinds["arena"] = program.getArenaBytes() ? int64_t(*program.getArenaBytes()) : -1;
    out.push_back(kinds);
  }
  return out;
}

/// One runtime step of a plan: what it measured, and the plan it ran.
struct MeasuredStep {
  rt::RunResult result;
  rt::Plan plan;
};

/// Runs the plan in `dir` one step (on synthetic data) and loads it back,
/// then removes `dir`. A failure is a test failure naming `what`, and
/// nullopt.
inline std::optional<MeasuredStep> runOneStep(const std::string &dir, const std::string &what) {
  rt::RunOptions o;
  o.planDir = dir;
  o.steps = 1;
  o.quiet = true;
  MeasuredStep m;
  std::ostringstream progress;
  rt::Status st = rt::runTraining(o, progress, &m.result);
  EXPECT_TRUE(st.isOk()) << what << ": " << st.toString();
  auto plan = rt::loadPlan(dir);
  EXPECT_TRUE(plan.isOk()) << what << ": " << plan.status().toString();
  std::filesystem::remove_all(dir);
  if (!st.isOk() || !plan.isOk())
    return std::nullopt;
  m.plan = std::move(plan).value();
  return m;
}

/// Writes `module` to the plan directory `name` under the system temp dir
/// and runs it with runOneStep.
inline std::optional<MeasuredStep> writeAndRunOneStep(mlir::ModuleOp module,
                                                      const std::string &name,
                                                      const std::string &what) {
  std::string dir = tempPath(name).string();
  std::filesystem::remove_all(dir);
  bool written = mlir::succeeded(writePlanDirectory(module, dir));
  EXPECT_TRUE(written) << what << ": cannot write the plan to " << dir;
  if (!written)
    return std::nullopt;
  return runOneStep(dir, what);
}

/// The planned bytes that live the whole step: every kind of `planned` but
/// the arena and the transient and peak figures (exact bytes + alignment
/// padding = the arena's aligned base).
inline int64_t plannedPersistentBytes(const std::map<std::string, int64_t> &planned) {
  int64_t persistent = 0;
  for (auto &[kind, bytes] : planned)
    if (kind != "arena" && kind != "transient_peak" && kind != "transient_live_peak" &&
        kind.rfind("peak_", 0) != 0)
      persistent += bytes;
  return persistent;
}

/// For every rank of `run`: its peak of live bytes is the planned persistent
/// bytes plus the transient live peak, and its arena high-water mark the
/// planned arena: exactly when `arenaSlack` is 0, else in
/// (arena - arenaSlack, arena] (the arena ends at the aligned end of its
/// highest buffer, which odd sizes leave short of the boundary).
inline void expectMeasuredPeakEqualsPlanned(const MeasuredStep &run,
                                            const std::vector<std::map<std::string, int64_t>> &planned,
                                            const std::string &what, int64_t arenaSlack) {
  const rt::Manifest &manifest = run.plan.manifest;
  ASSERT_EQ(int64_t(run.result.arenaHighWaterBytes.size()), manifest.worldSize()) << what;
  for (int64_t r = 0; r < manifest.worldSize(); ++r) {
    std::map<std::string, int64_t> p = planned[manifest.programOfRank(r)];
    int64_t persistent = plannedPersistentBytes(p);
    if (arenaSlack == 0) {
      EXPECT_EQ(run.result.arenaHighWaterBytes[r], p["arena"]) << what << " rank " << r;
    } else {
      EXPECT_LE(run.result.arenaHighWaterBytes[r], p["arena"]) << what << " rank " << r;
      EXPECT_GT(run.result.arenaHighWaterBytes[r], p["arena"] - arenaSlack)
          << what << " rank " << r;
    }
    EXPECT_EQ(run.result.measuredPeakLiveBytes[r], persistent + p["transient_live_peak"])
        << what << " rank " << r;
  }
}

} // namespace llcdist::test

#endif
