//===- PlannedCompileTest.cpp - a planned configuration, two ways ---------===//
//
// `llc-dist plan` compiles its top configurations in memory through
// plannedCompile (lib/Pipelines/PlannedCompile.cpp) and prints the winner as
// `llc-dist compile` flags (ParallelConfig::compileFlags). Both must be the
// same compilation: for configurations that set every knob, the plan written
// from plannedCompile's options and the plan `llc-dist compile` writes from
// the printed flags are the same files.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Frontend/ModelConfig.h"
#include "llcdist/Pipelines/FitBudget.h"
#include "llcdist/Pipelines/PlannedCompile.h"
#include "llcdist/Target/Plan/PlanWriter.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>
#include <unistd.h>

using namespace llcdist;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path &p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// `model` at the shape both compilations below use: 8 sequences of 16.
cost::Workload workload(const std::string &model) {
  cost::Workload w;
  EXPECT_FALSE(loadModelConfig(model, w.model)) << model;
  w.globalBatch = 8;
  w.seqLen = 16;
  return w;
}

/// `c` on `w` compiled two ways into `base`: planned/ through
/// plannedCompile (in memory, as llc-dist plan does) and cli/ by
/// `llc-dist compile` with its printed flags (and the workload's `extra`);
/// then every plan file compared (the manifest and a program at least).
void expectSameCompilation(const std::string &model, const cost::Workload &w, const cost::ParallelConfig &c,
                           const fs::path &base, const std::string &extra = "") {
  fs::remove_all(base);
  const PlannedCompile p = plannedCompile(w, c);
  std::string error;
  bool written = false;
  ASSERT_TRUE(compileInMemory(
      model, p.shape, p.mesh, p.options,
      [&](mlir::ModuleOp m) { written = mlir::succeeded(writePlanDirectory(m, (base / "planned").string())); }, error))
      << error;
  ASSERT_TRUE(written);
  const std::string cmd = std::string(LLCDIST_TOOL) + " compile " + model + " " + c.compileFlags() +
                          " --seq-len 16 --global-batch 8 --dtype bf16" + extra + " --quiet -o " +
                          (base / "cli").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  int files = 0;
  for (const auto &e : fs::directory_iterator(base / "planned")) {
    const std::string name = e.path().filename().string();
    if (name != "manifest.json" && name.rfind("program-", 0) != 0)
      continue;
    ++files;
    EXPECT_EQ(slurp(e.path()), slurp(base / "cli" / name)) << name << " differs";
  }
  EXPECT_GE(files, 2);
}

TEST(PlannedCompile, IsTheCompilationOfThePrintedFlags) {
  const std::string model = std::string(LLCDIST_SOURCE_DIR) + "/models/tiny-llama.json";
  cost::Workload w = workload(model);
  std::vector<cost::ParallelConfig> configs(4);
  configs[0].dp = 2, configs[0].zero = 3, configs[0].fsdpPrefetch = 1, configs[0].recompute = "selective";
  configs[1].tp = 2, configs[1].pp = 2, configs[1].sequenceParallel = true, configs[1].schedule = "interleaved",
  configs[1].virtualStages = 2, configs[1].microBatch = 2;
  configs[2].dp = 2, configs[2].zero = 1, configs[2].gradBucket = 4000, configs[2].recompute = "full";
  configs[3].pp = 2, configs[3].schedule = "zb-h1", configs[3].microBatch = 2;
  for (size_t i = 0; i < configs.size(); ++i) {
    SCOPED_TRACE(configs[i].compileFlags());
    const fs::path base = fs::temp_directory_path() / ("llcdist-planned-" + std::to_string(::getpid()) + "-" +
                                                       std::to_string(i));
    expectSameCompilation(model, w, configs[i], base);
    fs::remove_all(base);
  }
}

// A mixture of experts under expert parallelism, ZeRO and the workload's
// capacity factor (llc-dist plan --moe-capacity-factor): the same
// compilation as `llc-dist compile` with the printed flags and the
// workload's --moe-capacity-factor.
TEST(PlannedCompile, CarriesTheCapacityFactor) {
  const std::string model = std::string(LLCDIST_SOURCE_DIR) + "/models/tiny-mixtral.json";
  cost::Workload w = workload(model);
  w.moeCapacityFactor = 0.75;
  cost::ParallelConfig c;
  c.dp = 4, c.ep = 2, c.zero = 1;
  EXPECT_EQ(plannedCompile(w, c).shape.moeCapacityFactor, 0.75);
  const fs::path base = fs::temp_directory_path() / ("llcdist-planned-moe-" + std::to_string(::getpid()));
  expectSameCompilation(model, w, c, base, " --moe-capacity-factor 0.75");
  EXPECT_NE(slurp(base / "planned" / "program-0.json").find("\"capacity\""), std::string::npos)
      << "moe_permute without its capacity";
  fs::remove_all(base);
}

} // namespace
