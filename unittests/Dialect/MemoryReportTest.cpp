//===- MemoryReportTest.cpp - the compile report's memory per rank --------===//
//
// The memory report decodes what llcdist-plan-memory records; its numbers
// must equal the model-state formulas (docs/memory.md): fp32 parameters and
// gradients 4·Ψ each, Adam's two moments 8·Ψ, divided over dp by ZeRO and
// over the stages by the pipeline, and the arena the persistent buffers plus
// the transient peak.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Dialect/Plan/Analysis/MemoryReport.h"
#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "../CompileForTest.h"

#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>

using namespace llcdist;
using namespace llcdist::testing;
using plan::MemoryBudget;
using plan::MemoryReport;
using plan::StageMemory;

namespace {
int64_t persistentSum(const StageMemory &sm) {
  int64_t sum = 0;
  for (auto &[kind, bytes] : sm.persistent)
    sum += bytes;
  return sum;
}

int64_t atPeakSum(const StageMemory &sm) {
  int64_t sum = 0;
  for (auto &[cls, bytes] : sm.atPeak)
    sum += bytes;
  return sum;
}
} // namespace

// The decoding of plan.memory itself, on a hand-written program: the peak_
// entries are the classes at the live peak, everything else but the two
// transient totals a persistent kind.
TEST(MemoryReport, DecodesPlanMemory) {
  const char *ir = R"mlir(
    plan.program @stage0 attributes {arena_bytes = 1000 : i64, plan.memory = {
        param = 100 : i64, grad = 100 : i64, optimizer_state = 200 : i64, input = 8 : i64,
        metric = 4 : i64, padding = 52 : i64, transient_peak = 536 : i64,
        transient_live_peak = 512 : i64, peak_activations = 500 : i64,
        peak_communication = 12 : i64, peak_workspace = 0 : i64}} {
    }
    plan.program @stage1 {
    }
  )mlir";
  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  mlir::MLIRContext ctx(registry);
  auto module = mlir::parseSourceString<mlir::ModuleOp>(ir, &ctx);
  ASSERT_TRUE(module);
  std::vector<StageMemory> stages = plan::computeStageMemory(*module);
  ASSERT_EQ(stages.size(), 2u);
  const StageMemory &s = stages[0];
  EXPECT_EQ(s.stage, 0);
  EXPECT_EQ(s.arena, 1000);
  EXPECT_EQ(s.kind("param"), 100);
  EXPECT_EQ(s.kind("optimizer_state"), 200);
  EXPECT_EQ(s.kind("master"), 0); // absent kinds read as 0
  EXPECT_EQ(s.other(), 8 + 4 + 52);
  EXPECT_EQ(s.transientPeak, 536);
  EXPECT_EQ(s.transientLivePeak, 512);
  EXPECT_EQ(s.peak("activations"), 500);
  EXPECT_EQ(s.peak("communication"), 12);
  // The peak_ entries are not persistent kinds, nor are the totals.
  EXPECT_EQ(s.persistent.size(), 6u);
  EXPECT_EQ(s.atPeak.size(), 3u);
  EXPECT_DOUBLE_EQ(s.placedOverLive(), 536.0 / 512.0);
  // A program llcdist-plan-memory has not run on: nothing recorded.
  EXPECT_EQ(stages[1].stage, 1);
  EXPECT_EQ(stages[1].arena, 0);
  EXPECT_TRUE(stages[1].persistent.empty());
  EXPECT_DOUBLE_EQ(stages[1].placedOverLive(), 1.0);
}

// One rank, fp32, AdamW: 4·Ψ + 4·Ψ + 8·Ψ, and the arena adds up.
TEST(MemoryReport, ModelStateMatchesTheFormulas) {
  for (const char *model : {"tiny-gpt2", "tiny-llama"}) {
    Compiled c = compileForTest(model, meshOptions(1), shapeForTest(16));
    ASSERT_TRUE(c.module);
    const int64_t psi = c.config.numParameters();
    std::vector<StageMemory> stages = plan::computeStageMemory(*c.module);
    ASSERT_EQ(stages.size(), 1u);
    const StageMemory &s = stages[0];
    EXPECT_EQ(s.kind("param"), 4 * psi) << model;
    EXPECT_EQ(s.kind("grad"), 4 * psi) << model;
    EXPECT_EQ(s.kind("optimizer_state"), 8 * psi) << model;
    EXPECT_EQ(s.arena, persistentSum(s) + s.transientPeak) << model;
    EXPECT_EQ(atPeakSum(s), s.transientLivePeak) << model;
    EXPECT_LE(s.transientLivePeak, s.transientPeak);
    EXPECT_TRUE(s.commAxes.empty()); // one rank: no communicator
  }
}

// ZeRO-1 over dp = 2 halves the optimizer state (tiny-llama's rows divide
// by 2: no padded blocks), and the rank joins the dp communicator.
TEST(MemoryReport, ZeroOneShardsTheOptimizerState) {
  TrainingPipelineOptions o = meshOptions(2);
  o.zero = 1;
  Compiled c = compileForTest("tiny-llama", o, shapeForTest(16));
  ASSERT_TRUE(c.module);
  const int64_t psi = c.config.numParameters();
  std::vector<StageMemory> stages = plan::computeStageMemory(*c.module);
  ASSERT_EQ(stages.size(), 1u);
  EXPECT_EQ(stages[0].kind("optimizer_state"), 8 * psi / 2);
  EXPECT_EQ(stages[0].kind("param"), 4 * psi);
  EXPECT_EQ(stages[0].commAxes, std::vector<std::string>{"dp"});
  EXPECT_EQ(stages[0].communicators(), 1);
}

// Two pipeline stages split the (untied) parameters between them.
TEST(MemoryReport, PipelineStagesShareTheParameters) {
  Compiled c = compileForTest("tiny-llama", meshOptions(1, 1, 2), shapeForTest(16, 1, 2));
  ASSERT_TRUE(c.module);
  const int64_t psi = c.config.numParameters();
  std::vector<StageMemory> stages = plan::computeStageMemory(*c.module);
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0].kind("param") + stages[1].kind("param"), 4 * psi);
  EXPECT_EQ(stages[0].kind("optimizer_state") + stages[1].kind("optimizer_state"), 8 * psi);
  for (const StageMemory &s : stages) {
    EXPECT_EQ(s.arena, persistentSum(s) + s.transientPeak);
    EXPECT_EQ(s.commAxes, std::vector<std::string>{"pp"});
  }
}

TEST(MemoryBudget, ReserveFromTheDeviceOrFixed) {
  StageMemory sm;
  sm.arena = 900;
  sm.commAxes = {"dp", "tp"};
  MemoryBudget none{1000, "--memory-budget 1000"};
  EXPECT_EQ(none.reserve(2), 0);
  EXPECT_TRUE(none.fits(sm));
  EXPECT_EQ(none.text(sm), "1.0 KiB"); // the capacity alone

  MemoryBudget fixed = none;
  fixed.fixed = 200;
  fixed.fixedText = "200";
  EXPECT_EQ(fixed.reserve(2), 200);
  EXPECT_EQ(fixed.usable(2), 800);
  EXPECT_FALSE(fixed.fits(sm));
  EXPECT_EQ(fixed.reserveBreakdown(sm), "--memory-reserve 200");

  // A device's reserve grows with the communicators the stage joins.
  DeviceReserve d;
  d.cudaContextBytes = 10;
  d.ncclBuffsizeBytes = 1;
  d.ncclChannels = 2;
  d.ncclPeers = 2;
  MemoryBudget dev{1000, "dev", d};
  EXPECT_EQ(dev.reserve(2), d.bytes(1000, 2));
  EXPECT_EQ(dev.reserve(2) - dev.reserve(1), 4); // one more communicator: 1 × 2 × 2
  EXPECT_EQ(dev.usable(2), 1000 - d.bytes(1000, 2));
  EXPECT_NE(dev.reserveBreakdown(sm).find("2 communicators: dp, tp"), std::string::npos);
}

// The report's JSON carries the decoded numbers, and the budget per stage.
TEST(MemoryReport, JsonAndTable) {
  Compiled c = compileForTest("tiny-llama", meshOptions(1, 1, 2), shapeForTest(16, 1, 2));
  ASSERT_TRUE(c.module);
  MemoryReport r{plan::computeStageMemory(*c.module), "selective",
                 MemoryBudget{int64_t(1) << 30, "--memory-budget 1GiB"}};
  r.budget->fixed = 1 << 20;
  r.budget->fixedText = "1MiB";
  EXPECT_TRUE(r.fits());
  nlohmann::ordered_json j = r.toJson();
  ASSERT_EQ(j["memory_per_rank"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const StageMemory &s = r.stages[i];
    EXPECT_EQ(j["memory_per_rank"][i]["arena"].get<int64_t>(), s.arena);
    EXPECT_EQ(j["memory_per_rank"][i]["param"].get<int64_t>(), s.kind("param"));
    EXPECT_EQ(j["memory_per_rank"][i]["activations_peak"].get<int64_t>(), s.transientPeak);
    EXPECT_EQ(j["memory_per_rank"][i]["at_live_peak_activations"].get<int64_t>(),
              s.peak("activations"));
    EXPECT_EQ(j["memory_budget"]["usable_bytes_per_stage"][i].get<int64_t>(),
              (int64_t(1) << 30) - (1 << 20));
  }
  EXPECT_EQ(j["recompute"], "selective");
  std::string text;
  llvm::raw_string_ostream os(text);
  r.print(os);
  EXPECT_NE(text.find(", recompute selective:"), std::string::npos) << text;
  EXPECT_NE(text.find("stage 1: "), std::string::npos) << text;
  EXPECT_NE(text.find("fits --memory-budget 1GiB"), std::string::npos) << text;

  r.budget->capacity = r.stages[0].arena; // minus the reserve: too small
  EXPECT_FALSE(r.fits());
}

// A mixture of experts' buffers (docs/memory.md "Mixture of experts"):
// dropless routing has static shapes, T·k rows whatever the router picks, so
// each layer's expert buffers are the formula's bytes exactly. tiny-mixtral,
// one microbatch of T = 2 × 32 tokens, f32: H 64, E 4, k 2, I 96.
TEST(MemoryReport, MixtureOfExpertsBuffersAreTheFormula) {
  Compiled c = compileForTest("tiny-mixtral", meshOptions(1), shapeForTest(32, 2, 2));
  ASSERT_TRUE(c.module);
  const int64_t T = 64, H = 64, E = 4, k = 2, I = 96, f = 4, i32 = 4;
  // name (layer 0's) -> bytes by the formula
  const std::map<std::string, int64_t> want = {
      {"model.layers.0.block_sparse_moe.gate:moe_route.weights", T * k * f},
      {"model.layers.0.block_sparse_moe.gate:moe_route.experts", T * k * i32},
      {"model.layers.0.block_sparse_moe.experts:moe_permute", T * k * H * f},
      {"model.layers.0.block_sparse_moe.experts:moe_permute.slots", T * k * i32},
      {"model.layers.0.block_sparse_moe.experts:moe_permute.group_sizes", E * i32},
      {"model.layers.0.block_sparse_moe.experts:grouped_linear", T * k * I * f},   // w1: the gate
      {"model.layers.0.block_sparse_moe.experts:grouped_linear#1", T * k * I * f}, // w3: up
      {"model.layers.0.block_sparse_moe.experts:swiglu", T * k * I * f},
      {"model.layers.0.block_sparse_moe.experts:grouped_linear#2", T * k * H * f}, // w2: down
      {"model.layers.0.block_sparse_moe.experts:moe_unpermute", T * H * f},
  };
  std::map<std::string, int64_t> got;
  c.module->walk([&](plan::BufferOp b) {
    auto t = mlir::cast<mlir::RankedTensorType>(b.getType());
    int64_t bytes = t.getNumElements() * (t.getElementType().getIntOrFloatBitWidth() / 8);
    got[b.getName().str()] = bytes;
  });
  for (const auto &[name, bytes] : want) {
    ASSERT_TRUE(got.count(name)) << name << " is not a buffer of the plan";
    EXPECT_EQ(got[name], bytes) << name;
  }
  // And the stacked expert weights: E·O·K each, three per layer.
  EXPECT_EQ(got["model.layers.0.block_sparse_moe.experts.{e}.w1.weight"], E * I * H * f);
  EXPECT_EQ(got["model.layers.0.block_sparse_moe.experts.{e}.w2.weight"], E * H * I * f);
}

// The buffers of one layer's experts by name (layer 0's), in bytes.
static std::map<std::string, int64_t> bufferBytes(mlir::ModuleOp module) {
  std::map<std::string, int64_t> got;
  module.walk([&](plan::BufferOp b) {
    auto t = mlir::cast<mlir::RankedTensorType>(b.getType());
    got[b.getName().str()] = t.getNumElements() * (t.getElementType().getIntOrFloatBitWidth() / 8);
  });
  return got;
}

// --moe-capacity-factor (docs/memory.md "Mixture of experts"): each expert's
// rows are at most C = min(T, ceil(F·T·k/E)), so the permuted rows and every
// expert buffer hold E·C rows whatever the router picks, at two factors
// (one below the average load, one that keeps every assignment), against
// the dropless T·k.
TEST(MemoryReport, CapacityFactorBuffersAreTheFormula) {
  const int64_t T = 64, H = 64, E = 4, k = 2, I = 96, f = 4;
  for (double F : {0.5, 1.25}) {
    TrainingShape shape = shapeForTest(32, 2, 2);
    shape.moeCapacityFactor = F;
    Compiled c = compileForTest("tiny-mixtral", meshOptions(1), shape);
    ASSERT_TRUE(c.module);
    const int64_t C = std::min<int64_t>(T, int64_t(std::ceil(F * T * k / E))), rows = E * C;
    EXPECT_EQ(C, F == 0.5 ? 16 : 40);
    std::map<std::string, int64_t> got = bufferBytes(*c.module);
    const std::string x = "model.layers.0.block_sparse_moe.experts:";
    EXPECT_EQ(got[x + "moe_permute"], rows * H * f) << F;
    EXPECT_EQ(got[x + "moe_permute.slots"], T * k * 4) << F; // one slot per assignment, -1 if dropped
    EXPECT_EQ(got[x + "grouped_linear"], rows * I * f) << F;
    EXPECT_EQ(got[x + "swiglu"], rows * I * f) << F;
    EXPECT_EQ(got[x + "grouped_linear#2"], rows * H * f) << F;
    EXPECT_EQ(got[x + "moe_unpermute"], T * H * f) << F;
  }
}

// Expert parallelism (docs/memory.md): dp = 2 with ep = 2, each rank 2 of
// the 4 experts and its own T tokens; its experts' side holds the worst case
// C = ep·T·min(k, E/ep) rows; the dispatch and the combine add their
// by-member copies and the counts.
TEST(MemoryReport, ExpertParallelBuffersAreTheFormula) {
  TrainingPipelineOptions o = meshOptions(2);
  o.mesh.ep = 2;
  Compiled c = compileForTest("tiny-mixtral", o, shapeForTest(32, 2, 4));
  ASSERT_TRUE(c.module);
  const int64_t T = 64, H = 64, E = 4, k = 2, I = 96, P = 2, f = 4, i32 = 4;
  const int64_t C = P * T * std::min(k, E / P);
  EXPECT_EQ(C, 256);
  std::map<std::string, int64_t> got = bufferBytes(*c.module);
  const std::string x = "model.layers.0.block_sparse_moe.experts:";
  // The rank's own rows, as without ep.
  EXPECT_EQ(got[x + "moe_permute"], T * k * H * f);
  // The dispatch: its rows by sending member (scratch), then by local
  // expert; the counts per member and local expert; the local group sizes.
  EXPECT_EQ(got[x + "moe_dispatch.by_source"], C * H * f);
  EXPECT_EQ(got[x + "moe_dispatch"], C * H * f);
  EXPECT_EQ(got[x + "moe_dispatch.recv_splits"], E * i32);
  EXPECT_EQ(got[x + "moe_dispatch.local_sizes"], E / P * i32);
  EXPECT_EQ(got[x + "grouped_linear"], C * I * f);
  EXPECT_EQ(got[x + "swiglu"], C * I * f);
  EXPECT_EQ(got[x + "grouped_linear#2"], C * H * f);
  // The combine: by member again (scratch), home to the rank's own rows.
  EXPECT_EQ(got[x + "moe_combine.by_source"], C * H * f);
  EXPECT_EQ(got[x + "moe_combine.home_splits"], E * i32);
  EXPECT_EQ(got[x + "moe_combine"], T * k * H * f);
  // Each rank's experts: E/ep of the stacked weights.
  EXPECT_EQ(got["model.layers.0.block_sparse_moe.experts.{e}.w1.weight"], E / P * I * H * f);
}
