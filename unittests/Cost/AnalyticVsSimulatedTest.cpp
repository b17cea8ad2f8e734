//===- AnalyticVsSimulatedTest.cpp - the planner's model vs the plan -----===//
//
// The planner ranks thousands of configurations with the analytic step
// model (StepModel.h) and simulates only the best few exactly
// (PlanSimulator.h, on the compiled plan). The ranking is only as good as
// the two agree: here the same configurations, compiled by the real
// compiler and simulated op by op, against predictStep, across dp (ZeRO 0-3,
// buckets, prefetch), tp (with and without SP), pp (all four schedules,
// interleaving), cp (ring and all-to-all) and recomputation. The tolerance is 5 %, and 15 % for
// ZeRO-3: the analytic model hides each prefetched all-gather under a
// layer's compute, while in the plan it also queues behind the synchronous
// reduce-scatters on the same communicator (measured: 14 % short on
// llama3-8b, dp = 8).
//
//===----------------------------------------------------------------------===//
#include "llcdist/Cost/PlanSimulator.h"
#include "llcdist/Cost/StepModel.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace llcdist;
using namespace llcdist::cost;
namespace fs = std::filesystem;

namespace {
struct Case {
  const char *model, *device, *topology;
  int64_t seq, global;
  ParallelConfig config;
  double tolerance;
};

ParallelConfig cfg(int64_t dp, int64_t tp, int64_t pp, const char *schedule = "1f1b", int64_t v = 1, bool sp = false,
                   const char *recompute = "none", int zero = 0, int64_t bucket = 0, int64_t prefetch = 0,
                   int64_t mb = 1) {
  ParallelConfig c;
  c.dp = dp, c.tp = tp, c.pp = pp, c.schedule = schedule, c.virtualStages = v;
  c.sequenceParallel = sp, c.recompute = recompute, c.zero = zero, c.gradBucket = bucket;
  c.fsdpPrefetch = prefetch, c.microBatch = mb;
  return c;
}

/// `c` with context parallelism of `cp` by `impl` (issue #32).
ParallelConfig withCp(ParallelConfig c, int64_t cp, const char *impl) {
  c.cp = cp, c.cpImpl = impl;
  return c;
}

/// An empty directory of its own under the system's temporary directory.
fs::path freshTempDir(const std::string &prefix) {
  fs::path dir = fs::temp_directory_path() / (prefix + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

/// A GPT-2-architecture Hugging Face config of the validation rows' kind (4h MLP, vocabulary 51200,
/// 2048 positions) at `path`; returns the path.
std::string writeGptConfig(const fs::path &path, int64_t hidden, int64_t heads, int64_t layers) {
  std::ofstream f(path);
  f << R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": )" << hidden << R"(, "n_head": )"
    << heads << R"(, "n_layer": )" << layers
    << R"(, "n_positions": 2048, "n_ctx": 2048, "n_inner": null, "vocab_size": 51200, "layer_norm_epsilon": 1e-5})";
  return path.string();
}
} // namespace

TEST(AnalyticVsSimulated, AgreeOnSampledConfigurations) {
  const Case cases[] = {
      {"llama3-8b", "h100-80gb", "dgx-h100", 2048, 32, cfg(8, 1, 1, "1f1b", 1, false, "none", 1), 0.05},
      {"llama3-8b", "h100-80gb", "dgx-h100", 2048, 32, cfg(8, 1, 1, "1f1b", 1, false, "none", 0, 40000000), 0.05},
      {"llama3-8b", "h100-80gb", "dgx-h100", 2048, 32, cfg(8, 1, 1, "1f1b", 1, false, "none", 2), 0.05},
      {"llama3-8b", "h100-80gb", "dgx-h100", 2048, 32, cfg(8, 1, 1, "1f1b", 1, false, "none", 3, 0, 1), 0.15},
      {"llama3-8b", "a100-80gb", "dgx-a100", 2048, 32, cfg(4, 2, 1, "1f1b", 1, true, "selective", 0, 0, 0, 2), 0.05},
      {"llama3-70b", "h100-80gb", "dgx-h100", 2048, 64, cfg(2, 8, 4, "1f1b", 1, true, "selective", 1), 0.05},
      {"llama3-70b", "h100-80gb", "dgx-h100", 2048, 64, cfg(2, 8, 4, "interleaved", 2, true, "none", 1, 40000000),
       0.05},
      {"llama3-70b", "a100-80gb", "dgx-a100", 2048, 64, cfg(1, 8, 8, "zb-h1", 1, false, "full"), 0.05},
      {"gpt3-175b", "a100-80gb", "dgx-a100", 2048, 64, cfg(1, 8, 8, "gpipe", 1, false, "full"), 0.05},
      {"gpt3-175b", "a100-80gb", "dgx-a100", 2048, 64, cfg(1, 8, 8, "interleaved", 3, false, "full"), 0.05},
      // Context parallelism: the ring (its transfers under the previous block's attention) and
      // the all-to-alls (measured: both 2 % short).
      {"llama3-8b", "h100-80gb", "dgx-h100", 8192, 16, withCp(cfg(2, 4, 1, "1f1b", 1, true), 2, "ring"), 0.05},
      {"llama3-8b", "h100-80gb", "dgx-h100", 8192, 16, withCp(cfg(2, 4, 1, "1f1b", 1, true), 2, "all-to-all"), 0.05},
  };
  for (const Case &k : cases) {
    Workload w;
    std::string modelPath = std::string(LLCDIST_SOURCE_DIR) + "/models/" + k.model + ".json";
    ASSERT_FALSE(loadModelConfig(modelPath, w.model)) << k.model;
    w.globalBatch = k.global, w.seqLen = k.seq;
    ASSERT_FALSE(checkConfig(w, k.config)) << k.config.str();
    std::string what = std::string(k.model) + " " + k.config.str() + " on " + k.device;

    fs::path dir = fs::temp_directory_path() / ("llcdist-avs." + std::to_string(::getpid()));
    fs::remove_all(dir);
    std::string cmd = std::string(LLCDIST_TOOL) + " compile " + modelPath + " --dtype bf16" + " --seq-len " +
                      std::to_string(k.seq) + " --global-batch " + std::to_string(k.global) + " " +
                      k.config.compileFlags() + " -o " + dir.string() + " --quiet";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    Hardware hw;
    ASSERT_FALSE(loadHardware(k.device, k.topology, hw));
    PlanSimResult sim;
    auto err = simulatePlan(dir.string(), hw, SimOptions(), sim);
    ASSERT_FALSE(err) << *err;
    fs::remove_all(dir);

    StepPrediction p = predictStep(hw, w, k.config);
    EXPECT_NEAR(p.stepSeconds / sim.stepSeconds, 1.0, k.tolerance)
        << what << ": analytic " << p.stepSeconds << " s, simulated " << sim.stepSeconds << " s";
  }
}

// Issue #31's 13 % between the two on Korthikanti et al.'s 530B run (Table
// 5, full recomputation: tp 8, pp 35, interleaved v 3, 280 microbatches of
// one sequence) is not a disagreement of the models: the validation prices
// Megatron-LM's plan, whose pipeline sends use its scatter/gather
// optimization (each tp rank sends 1/tp, the receiver all-gathers) and post
// each send with a receive (Workload::scatterGatherP2P), while the
// simulation prices llc-dist's plan, which by default sends the whole
// activation from every tp rank, a send and a receive apart. Priced for the
// same plan they agree within 3 % (issue #31's target): measured, analytic
// 56.9 s vs simulated 55.9 s (1.8 %) with whole sends, and 47.9 s vs 47.9 s
// (0.1 %) with llc-dist's plan compiled --scatter-gather-p2p.
TEST(AnalyticVsSimulated, TheValidationRowsGapIsThePipelineSendsScatterGather) {
  const fs::path dir = freshTempDir("llcdist-avs530.");
  const std::string modelPath = writeGptConfig(dir / "gpt-530b.json", 20480, 128, 105);
  Workload w;
  ASSERT_FALSE(loadModelConfig(modelPath, w.model));
  w.globalBatch = 280, w.seqLen = 2048;
  const ParallelConfig c = cfg(1, 8, 35, "interleaved", 3, false, "full");
  ASSERT_FALSE(checkConfig(w, c)) << c.str();
  Hardware hw;
  ASSERT_FALSE(loadHardware("a100-80gb", "dgx-a100", hw));
  // The plan as compiled by default (whole sends), and with Megatron-LM's
  // scatter/gather (--scatter-gather-p2p).
  PlanSimResult sim[2];
  for (int sg = 0; sg < 2; ++sg) {
    const std::string plan = (dir / (sg ? "plan-sg" : "plan")).string();
    std::string cmd = std::string(LLCDIST_TOOL) + " compile " + modelPath +
                      " --dtype bf16 --seq-len 2048 --global-batch 280 " + c.compileFlags() + " -o " + plan +
                      " --quiet" + (sg ? " --scatter-gather-p2p" : "");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    auto err = simulatePlan(plan, hw, SimOptions(), sim[sg]);
    ASSERT_FALSE(err) << *err;
  }
  fs::remove_all(dir);
  const double same = predictStep(hw, w, c).stepSeconds;
  ParallelConfig sg = c;
  sg.scatterGatherP2P = true;
  const double sameSg = predictStep(hw, w, sg).stepSeconds;
  w.scatterGatherP2P = true;
  const double megatron = predictStep(hw, w, c).stepSeconds;
  EXPECT_NEAR(same / sim[0].stepSeconds, 1.0, 0.03)
      << "analytic " << same << " s, simulated " << sim[0].stepSeconds << " s";
  EXPECT_NEAR(sameSg / sim[1].stepSeconds, 1.0, 0.03)
      << "with scatter/gather: analytic " << sameSg << " s, simulated " << sim[1].stepSeconds << " s";
  // Megatron-LM's transport is the validation's gap to llc-dist's default plan.
  EXPECT_LT(megatron / sim[0].stepSeconds, 0.93) << "Megatron-LM's transport " << megatron << " s";
  EXPECT_LT(megatron, sameSg);
  EXPECT_LT(sim[1].stepSeconds, sim[0].stepSeconds);
  std::printf("530B row: analytic %.1f s / simulated %.1f s (whole sends), %.1f s / %.1f s (scatter/gather); "
              "Megatron-LM's transport %.1f s\n",
              same, sim[0].stepSeconds, sameSg, sim[1].stepSeconds, megatron);
}

// The plan's fusions (llcdist-plan-fuse-*, on by default) are priced as
// compiled: Workload::Fusion::Plan against the default plan, Fusion::None
// against the plan compiled with every fusion off, and what fusing saves
// the same in both models. GPT at tp 8 with full recomputation (the 22B
// validation rows' shape, four layers: the norms, epilogues and the
// recomputed forward's kernels) and Llama at tp 1 (the chunked classifier).
TEST(AnalyticVsSimulated, FusionsArePricedAsCompiled) {
  const fs::path dir = freshTempDir("llcdist-avsfuse.");
  const std::string gptPath = writeGptConfig(dir / "gpt-22b-4l.json", 6144, 64, 4);
  struct FuseCase {
    std::string model;
    int64_t global;
    ParallelConfig config;
  } cases[] = {
      {gptPath, 4, cfg(1, 8, 1, "1f1b", 1, false, "full", 0, 0, 0, 4)},
      {std::string(LLCDIST_SOURCE_DIR) + "/models/llama3-8b.json", 2,
       cfg(1, 1, 1, "1f1b", 1, false, "none", 0, 0, 0, 2)},
  };
  Hardware hw;
  ASSERT_FALSE(loadHardware("a100-80gb", "dgx-a100", hw));
  for (const FuseCase &k : cases) {
    Workload w;
    ASSERT_FALSE(loadModelConfig(k.model, w.model)) << k.model;
    w.globalBatch = k.global, w.seqLen = 2048;
    ASSERT_FALSE(checkConfig(w, k.config)) << k.config.str();
    double analytic[2], simulated[2]; // [fused, unfused]
    for (int off = 0; off < 2; ++off) {
      const std::string plan = (dir / (off ? "plan-unfused" : "plan")).string();
      std::string cmd = std::string(LLCDIST_TOOL) + " compile " + k.model +
                        " --dtype bf16 --seq-len 2048 --global-batch " + std::to_string(k.global) + " " +
                        k.config.compileFlags() + " -o " + plan + " --quiet" +
                        (off ? " --no-fuse-norm --no-fuse-epilogues --no-fuse-classifier --no-fuse-embedding"
                               " --no-fuse-optimizer"
                             : "");
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
      PlanSimResult sim;
      auto err = simulatePlan(plan, hw, SimOptions(), sim);
      ASSERT_FALSE(err) << *err;
      w.fusion = off ? Workload::Fusion::None : Workload::Fusion::Plan;
      analytic[off] = predictStep(hw, w, k.config).stepSeconds;
      simulated[off] = sim.stepSeconds;
      EXPECT_NEAR(analytic[off] / simulated[off], 1.0, 0.03)
          << k.model << (off ? " unfused" : " fused") << ": analytic " << analytic[off] << " s, simulated "
          << simulated[off] << " s";
    }
    const double savedAnalytic = 1 - analytic[0] / analytic[1], savedSimulated = 1 - simulated[0] / simulated[1];
    EXPECT_GT(savedSimulated, 0.005) << k.model;
    EXPECT_NEAR(savedAnalytic, savedSimulated, 0.01) << k.model;
    std::printf("%s: fusing saves %.1f %% analytic, %.1f %% simulated (fused %.3f s / %.3f s)\n",
                fs::path(k.model).filename().c_str(), 100 * savedAnalytic, 100 * savedSimulated, analytic[0],
                simulated[0]);
  }
  fs::remove_all(dir);
}
