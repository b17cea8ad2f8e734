//===- FitBudgetTest.cpp - fitting a plan into a memory budget ------------===//
//
// --recompute auto and the OOM advice, checked against compilations made
// here independently: the mode picked is the least whose arena fits, and
// every hint's peak is the arena of its own configuration compiled alone.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Pipelines/FitBudget.h"
#include "../CompileForTest.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <list>

using namespace llcdist;
using namespace llcdist::testing;
using plan::MemoryBudget;
using plan::StageMemory;

namespace {
int64_t peakArena(mlir::ModuleOp m) {
  int64_t peak = 0;
  for (const StageMemory &sm : plan::computeStageMemory(m))
    peak = std::max(peak, sm.arena);
  return peak;
}

int64_t peakArenaOf(const std::string &model, int64_t dp, const std::string &recompute) {
  TrainingPipelineOptions o = meshOptions(dp);
  o.recompute = recompute;
  Compiled c = compileForTest(model, o, shapeForTest(16, 1));
  return c.module ? peakArena(*c.module) : -1;
}

/// fitRecompute over real compilations of tiny-llama; the modules stay alive
/// in `keep`.
std::string autoRecompute(const MemoryBudget &budget, std::vector<std::string> &tried,
                          std::vector<std::string> *compiled = nullptr) {
  std::list<Compiled> keep;
  mlir::FailureOr<std::string> mode = fitRecompute(
      [&](llvm::StringRef mode) -> mlir::FailureOr<mlir::ModuleOp> {
        if (compiled)
          compiled->push_back(mode.str());
        TrainingPipelineOptions o = meshOptions(1);
        o.recompute = mode.str();
        keep.push_back(compileForTest("tiny-llama", o, shapeForTest(16, 1)));
        if (!keep.back().module)
          return mlir::failure();
        return *keep.back().module;
      },
      budget, tried);
  EXPECT_TRUE(mlir::succeeded(mode));
  return mlir::succeeded(mode) ? *mode : "";
}
} // namespace

TEST(FitBudget, RecomputeAutoPicksTheLeastThatFits) {
  const int64_t none = peakArenaOf("tiny-llama", 1, "none"),
                selective = peakArenaOf("tiny-llama", 1, "selective"),
                full = peakArenaOf("tiny-llama", 1, "full");
  ASSERT_GT(none, selective);
  ASSERT_GT(selective, full);
  std::vector<std::string> tried, compiled;
  EXPECT_EQ(autoRecompute(MemoryBudget{none, "b"}, tried, &compiled), "none");
  EXPECT_TRUE(tried.empty());
  EXPECT_EQ(compiled, std::vector<std::string>{"none"}); // stops at the first fit
  tried.clear();
  EXPECT_EQ(autoRecompute(MemoryBudget{selective, "b"}, tried), "selective");
  EXPECT_EQ(tried, std::vector<std::string>{"none"});
  tried.clear();
  EXPECT_EQ(autoRecompute(MemoryBudget{full, "b"}, tried), "full");
  EXPECT_EQ(tried, (std::vector<std::string>{"none", "selective"}));
  tried.clear();
  // Nothing fits: the last mode, with all three tried.
  EXPECT_EQ(autoRecompute(MemoryBudget{full - 1, "b"}, tried), "full");
  EXPECT_EQ(tried, (std::vector<std::string>{"none", "selective", "full"}));
}

TEST(FitBudget, RecomputeAutoStopsAtAFailedCompilation) {
  std::vector<std::string> tried;
  int calls = 0;
  mlir::FailureOr<std::string> mode = fitRecompute(
      [&](llvm::StringRef) -> mlir::FailureOr<mlir::ModuleOp> {
        ++calls;
        return mlir::failure();
      },
      MemoryBudget{1, "b"}, tried);
  EXPECT_TRUE(mlir::failed(mode));
  EXPECT_EQ(calls, 1);
}

// Each hint is the compilation of its own configuration: its peak is the
// arena that configuration has when compiled here, and fits says whether it
// is within the budget. Compiled hints come first, cheapest class first.
TEST(FitBudget, HintsAreTheirConfigurationsCompiled) {
  TrainingPipelineOptions train = meshOptions(2);
  Compiled base = compileForTest("tiny-llama", train, shapeForTest(16, 1));
  ASSERT_TRUE(base.module);
  const int64_t arena = peakArena(*base.module);
  MemoryBudget budget{arena - 1, "--memory-budget test"};
  ASSERT_FALSE(fitsBudget(*base.module, budget));
  MeshSpec mesh{2, 1, 1};
  std::vector<MemoryHint> hints =
      memoryHints(modelPath("tiny-llama"), base.shape, mesh, train, budget);
  std::vector<std::string> flags;
  for (const MemoryHint &h : hints)
    flags.push_back(h.flags);
  std::vector<std::string> sorted = flags;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<std::string>{"--mesh dp=1,tp=1,pp=2", "--mesh dp=1,tp=2,pp=1",
                                              "--recompute full", "--recompute selective",
                                              "--zero 1", "--zero 2", "--zero 3"}));
  for (size_t i = 0; i < hints.size(); ++i) {
    const MemoryHint &h = hints[i];
    ASSERT_TRUE(h.compiled) << h.flags << ": " << h.failure;
    TrainingPipelineOptions o = h.train;
    o.mesh = {h.mesh.dp, h.mesh.tp, h.mesh.pp, h.mesh.cp, h.mesh.rankOrderStr()};
    Compiled alone = compileForTest("tiny-llama", o, base.shape);
    ASSERT_TRUE(alone.module) << h.flags;
    EXPECT_EQ(h.peak, peakArena(*alone.module)) << h.flags;
    EXPECT_EQ(h.fits, fitsBudget(*alone.module, budget)) << h.flags;
    EXPECT_DOUBLE_EQ(h.ringBytes, ringBytesPerRank(*alone.module)) << h.flags;
    if (i > 0) {
      EXPECT_LE(hints[i - 1].costClass, h.costClass);
      if (hints[i - 1].costClass == h.costClass)
        EXPECT_LE(hints[i - 1].ringBytes, h.ringBytes);
    }
  }
  EXPECT_EQ(hints.front().flags.rfind("--zero", 0), 0u); // ZeRO first: no extra compute
  EXPECT_NE(llvm::find_if(hints, [](const MemoryHint &h) { return h.fits; }), hints.end());
}

TEST(FitBudget, OutOfMemoryMessageNamesTheStagesOverBudget) {
  StageMemory small, big;
  small.stage = 0;
  small.arena = 512 << 20;
  big.stage = 1;
  big.arena = int64_t(3) << 30;
  big.persistent = {{"param", 1 << 30}, {"grad", 1 << 30}};
  big.transientPeak = 1 << 30;
  MemoryBudget budget{int64_t(2) << 30, "--memory-budget 2GiB"};
  std::string msg = oomMessage({small, big}, budget, {"none", "selective"});
  EXPECT_EQ(msg.rfind("the plan does not fit: --memory-budget 2GiB allows 2.00 GiB per rank "
                      "(--recompute auto tried none selective)",
                      0),
            0u)
      << msg;
  EXPECT_EQ(msg.find("stage 0 needs"), std::string::npos) << msg;
  EXPECT_NE(msg.find("stage 1 needs 3.00 GiB per rank: parameters 1.00 GiB | gradients 1.00 GiB"),
            std::string::npos)
      << msg;

  MemoryHint failed, fits;
  failed.flags = "--mesh dp=1,tp=2,pp=1";
  failed.failure = "tp does not divide the heads";
  fits.flags = "--zero 1";
  fits.compiled = fits.fits = true;
  fits.peak = 1 << 30;
  fits.ringBytes = 100;
  std::string advice = hintsMessage({fits, failed}, budget, 100, 0.3);
  EXPECT_NE(advice.find("2 compilations in 0.3 s"), std::string::npos) << advice;
  EXPECT_NE(advice.find("not possible: tp does not divide the heads"), std::string::npos);
  EXPECT_NE(advice.find("peak   1.00 GiB  fits          the same communication"),
            std::string::npos)
      << advice;
  EXPECT_NE(advice.find("the fastest that fits --memory-budget 2GiB: --zero 1"),
            std::string::npos);
}
