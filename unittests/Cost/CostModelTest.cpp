//===- CostModelTest.cpp - op and collective times, the analytic step ----===//
//
// Every figure is checked against the formula written out again here from
// the shipped files' numbers (docs/cost-model.md), not against the code's
// own output; the analytic FLOPs against the papers' closed forms.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Cost/StepModel.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace llcdist;
using namespace llcdist::cost;

namespace {
Hardware hardware(const char *device, const char *topo) {
  Hardware hw;
  auto err = loadHardware(device, topo, hw);
  EXPECT_FALSE(err) << *err;
  return hw;
}

ModelConfig gpt(int64_t h, int64_t layers, int64_t heads, int64_t vocab = 51200,
                int64_t positions = 2048) {
  ModelConfig m;
  m.arch = Arch::GPT2;
  m.hidden = h, m.layers = layers, m.heads = heads, m.kvHeads = heads;
  m.headDim = h / heads, m.intermediate = 4 * h, m.vocab = vocab, m.maxPositions = positions;
  return m;
}
} // namespace

TEST(CostModel, ShippedHardwareLoads) {
  for (const char *d : {"a100-80gb", "a100-40gb", "h100-80gb", "h200"})
    for (const char *t : {"dgx-a100", "dgx-h100", "dgx-h200"}) {
      Hardware hw;
      auto err = loadHardware(d, t, hw);
      ASSERT_FALSE(err) << *err;
      EXPECT_GT(hw.dc().gemmEfficiency, 0.3) << d;
      EXPECT_FALSE(hw.dc().fitSource.empty()) << d;
      EXPECT_FALSE(hw.tc().source.empty()) << t;
    }
}

TEST(CostModel, GemmIsTheRooflineWithTheFittedEfficiency) {
  Hardware hw = hardware("a100-80gb", "dgx-a100");
  const DeviceCost &dc = hw.dc();
  // A large square GEMM: compute-bound; F / (P · e · F/(F + knee)) + launch.
  double F = 2.0 * 8192 * 8192 * 8192;
  double e = dc.gemmEfficiency * F / (F + dc.gemmKneeGflop * 1e9);
  double want = F / (312e12 * e) + dc.kernelLaunchUs * 1e-6;
  EXPECT_NEAR(gemmSeconds(hw, 8192, 8192, 8192, Precision::BF16), want, want * 1e-12);
  // A large matrix-vector product: memory-bound on the weight's bytes.
  double bytes = 2.0 * (1 * 16384 + 16384.0 * 16384 + 1 * 16384);
  double mem = bytes / (2.04e12 * dc.memoryEfficiency) + dc.kernelLaunchUs * 1e-6;
  EXPECT_NEAR(gemmSeconds(hw, 1, 16384, 16384, Precision::BF16), mem, mem * 1e-12);
  // Larger GEMMs reach more of the peak.
  EXPECT_LT(gemmEfficiency(hw, 1e9), gemmEfficiency(hw, 1e12));
  EXPECT_LT(gemmEfficiency(hw, 1e15), dc.gemmEfficiency);
  // f32 runs on the FP32 units: 312 / 19.5 = 16x slower when compute-bound.
  double f32 = gemmSeconds(hw, 8192, 8192, 8192, Precision::F32) - dc.kernelLaunchUs * 1e-6;
  double bf16 = gemmSeconds(hw, 8192, 8192, 8192, Precision::BF16) - dc.kernelLaunchUs * 1e-6;
  EXPECT_NEAR(f32 / bf16, 312.0 / 19.5, 1e-9);
}

TEST(CostModel, AttentionCountsTheCausalHalfAndTheBackwardTwoAndAHalf) {
  Hardware hw = hardware("h100-80gb", "dgx-h100");
  double fwd = 2.0 * 1 * 8192 * 8192 * 128 * 128; // B S² nh hd, half of 4 B S² nh hd
  double launch = hw.dc().kernelLaunchUs * 1e-6;
  EXPECT_NEAR(attentionSeconds(hw, 1, 8192, 128, 128, false, Precision::BF16),
              fwd / (989e12 * hw.dc().attentionFwdEfficiency) + launch, 1e-12);
  EXPECT_NEAR(attentionSeconds(hw, 1, 8192, 128, 128, true, Precision::BF16),
              2.5 * fwd / (989e12 * hw.dc().attentionBwdEfficiency) + launch, 1e-12);
}

TEST(CostModel, CollectivesUseNcclTestsBusBandwidthFactors) {
  EXPECT_DOUBLE_EQ(busFactor(Collective::AllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(busFactor(Collective::AllGather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(busFactor(Collective::ReduceScatter, 4), 3.0 / 4);
  EXPECT_EQ(busFactor(Collective::AllReduce, 1), 0);

  Hardware hw = hardware("a100-80gb", "dgx-a100");
  const TopologyCost &tc = hw.tc();
  double bytes = 1 << 30;
  // Inside a node: NVLink's 300 GB/s at the busbw fraction, ring latency.
  Group node{8, 8};
  double want = 2.0 * 7 / 8 * bytes / (300e9 * tc.intraBusbwFraction) +
                14 * tc.intraLatencyUs * 1e-6;
  EXPECT_NEAR(collectiveSeconds(hw, Collective::AllReduce, bytes, node), want, want * 1e-12);
  // One GPU per node (dp under tp = 8): that GPU's NIC, 25 GB/s.
  Group spread{32, 1};
  want = 31.0 / 32 * bytes / (25e9 * tc.interBusbwFraction) + 31 * tc.interLatencyUs * 1e-6;
  EXPECT_NEAR(collectiveSeconds(hw, Collective::AllGather, bytes, spread), want, want * 1e-12);
  // Eight per node: the node's eight rails, 200 GB/s (still under NVLink's).
  Group rails{32, 8};
  EXPECT_NEAR(busBandwidth(hw, rails), std::min(8 * 25e9 * tc.interBusbwFraction,
                                                300e9 * tc.intraBusbwFraction),
              1);
  EXPECT_GT(collectiveSeconds(hw, Collective::AllReduce, bytes, spread),
            collectiveSeconds(hw, Collective::AllReduce, bytes, rails));
  // p2p: one link.
  EXPECT_NEAR(p2pSeconds(hw, bytes, true),
              bytes / (25e9 * tc.interBusbwFraction) + tc.interLatencyUs * 1e-6, 1e-12);
}

TEST(CostModel, AxisGroupsFollowTheRankOrder) {
  Topology topo;
  topo.gpusPerNode = 8;
  MeshSpec mesh; // tp,dp,pp (Megatron's)
  mesh.dp = 4, mesh.tp = 8, mesh.pp = 2;
  Group tp = axisGroup(mesh, "tp", topo), dp = axisGroup(mesh, "dp", topo);
  EXPECT_EQ(tp.size, 8);
  EXPECT_EQ(tp.perNode, 8);
  EXPECT_FALSE(tp.crossesNodes());
  EXPECT_EQ(dp.size, 4);
  EXPECT_EQ(dp.perNode, 1); // stride 8: every member on its own node
  mesh.tp = 2;
  dp = axisGroup(mesh, "dp", topo);
  EXPECT_EQ(dp.perNode, 4); // stride 2 in nodes of 8: all 4 on one node
  ASSERT_FALSE(parseRankOrder("dp,tp,pp", mesh));
  Group tp2 = axisGroup(mesh, "tp", topo);
  EXPECT_EQ(tp2.perNode, 2); // stride 4: ranks 0 and 4 share node 0
}

TEST(CostModel, MissingCostObjectsAreErrors) {
  DeviceSpec d;
  auto err = parseDevice(R"({"name": "x", "memory_gib": 80, "bf16_dense_tflops": 312,
      "hbm_tb_s": 2, "reserve": {"cuda_context_mib": 1, "cublas_workspace_mib": 1,
      "cudnn_workspace_mib": 1, "nccl_buffsize_mib": 1, "nccl_channels": 1, "nccl_peers": 1,
      "fragmentation_fraction": 0, "source": "s"},
      "cost": {"fp32_tflops": 19.5, "kernel_launch_us": 4, "attention_fwd_efficiency": 1.5,
               "attention_bwd_efficiency": 0.4, "source": "s", "fitted": {}}})",
                         "dev.json", d);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("dev.json: field 'cost.attention_fwd_efficiency': must be a fraction"),
            std::string::npos)
      << *err;
  err = parseDevice(R"({"name": "x", "memory_gib": 80, "bf16_dense_tflops": 312,
      "hbm_tb_s": 2, "reserve": {"cuda_context_mib": 1, "cublas_workspace_mib": 1,
      "cudnn_workspace_mib": 1, "nccl_buffsize_mib": 1, "nccl_channels": 1, "nccl_peers": 1,
      "fragmentation_fraction": 0, "source": "s"},
      "cost": {"fp32_tflops": 19.5, "kernel_launch_us": 4, "attention_fwd_efficiency": 0.5,
               "attention_bwd_efficiency": 0.4, "source": "s",
               "fitted": {"gemm_efficiency": 0.6, "gemm_knee_gflop": 1e999,
                          "memory_efficiency": 0.6, "source": "s"}}})",
                    "dev.json", d);
  ASSERT_TRUE(err); // too large for a double: refused by the reader, naming the file
  EXPECT_EQ(err->rfind("dev.json: malformed JSON", 0), 0u) << *err;
  EXPECT_NE(err->find("number overflow"), std::string::npos) << *err;
  Topology t;
  err = parseTopology(R"({"gpus_per_node": 8, "intra_node_gb_s": 300, "nics_per_node": 8,
      "nic_gb_s": 25, "cost": {"intra_node_latency_us": 2, "inter_node_latency_us": 6,
      "intra_node_busbw_fraction": 0.8, "source": "s"}})",
                      "topo.json", t);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("topo.json: missing field 'cost.inter_node_busbw_fraction'"),
            std::string::npos)
      << *err;
  Hardware hw;
  err = loadHardware("a100-80gb", std::string(LLCDIST_SOURCE_DIR) +
                                      "/unittests/Frontend/does-not-exist.json",
                     hw);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("cannot open"), std::string::npos) << *err;
}

// The FLOPs of a step: Korthikanti's 72·B·s·l·h²(1 + s/6h + V/12lh) for
// GPT (model), Narayanan's 96·B·s·l·h²(1 + s/6h + V/16lh) with full
// recomputation (hardware) but for the MLP's output projection, which
// Megatron's recomputation runs again and llc-dist's does not (no backward
// reads its output): 2·4h² FLOPs per token per layer, 8·B·s·l·h².
TEST(StepModel, FlopsAreThePapersClosedForms) {
  Workload w;
  w.model = gpt(12288, 96, 96);
  w.globalBatch = 1536;
  w.seqLen = 2048;
  double B = 1536, s = 2048, l = 96, h = 12288, V = 51200;
  double model = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
  double full = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  EXPECT_NEAR(stepFlops(w, "none").model / model, 1, 1e-12);
  EXPECT_NEAR(stepFlops(w, "none").hardware / model, 1, 1e-12);
  EXPECT_NEAR(stepFlops(w, "full").hardware / (full - 8 * B * s * l * h * h), 1, 1e-12);
  // Selective: the attention's QKᵀ and PV (4·B·s²·h per layer) once more.
  EXPECT_NEAR(stepFlops(w, "selective").hardware / (model + 4 * B * s * s * h * l), 1, 1e-12);
}

TEST(StepModel, ChecksDivisibility) {
  Workload w;
  w.model = gpt(1024, 24, 16);
  w.globalBatch = 64;
  w.seqLen = 1024;
  ParallelConfig c;
  c.tp = 3;
  EXPECT_TRUE(checkConfig(w, c));
  c.tp = 2, c.dp = 3;
  EXPECT_TRUE(checkConfig(w, c)); // 64 % 3
  c.dp = 4, c.pp = 4, c.schedule = "interleaved", c.virtualStages = 2;
  EXPECT_FALSE(checkConfig(w, c)) << *checkConfig(w, c); // 16 microbatches, a multiple of 4
  c.microBatch = 8;                                      // 2 microbatches
  EXPECT_TRUE(checkConfig(w, c));
  c.microBatch = 1, c.virtualStages = 7; // 28 chunks > 24 layers
  EXPECT_TRUE(checkConfig(w, c));
  // Replicated kv heads (tp > kv heads) compile, with selective
  // recomputation too (KvReplication.RecomputeSGD).
  Workload gqa;
  gqa.model = gpt(1024, 24, 16);
  gqa.model.arch = Arch::Llama, gqa.model.kvHeads = 4, gqa.model.intermediate = 2816;
  gqa.globalBatch = 8, gqa.seqLen = 128;
  ParallelConfig r;
  r.tp = 8;
  EXPECT_FALSE(checkConfig(gqa, r));
  r.recompute = "selective";
  EXPECT_FALSE(checkConfig(gqa, r));
}

// The step time is the busiest stage's microbatches plus the schedule's
// analytic bubble plus exposed dp communication plus the optimizer; the
// pipeline adds its bubble: with everything else fixed, 1F1B's bubble is
// (p − 1)/m of the ideal (plus the p2p of the fill and drain), interleaved's
// 1/v of that.
TEST(StepModel, BubbleFollowsTheSchedules) {
  Hardware hw = hardware("a100-80gb", "dgx-a100");
  Workload w;
  w.model = gpt(4096, 32, 32);
  w.globalBatch = 64;
  w.seqLen = 2048;
  ParallelConfig c;
  c.tp = 8, c.pp = 4, c.dp = 1;
  StepPrediction one = predictStep(hw, w, c);
  double ratio1 = one.bubbleSeconds / one.computeSeconds;
  EXPECT_NEAR(ratio1, 3.0 / 64, 0.01);
  c.schedule = "interleaved", c.virtualStages = 2;
  StepPrediction il = predictStep(hw, w, c);
  EXPECT_NEAR(il.bubbleSeconds / il.computeSeconds, 3.0 / 128, 0.01);
  EXPECT_LT(il.bubbleSeconds, one.bubbleSeconds);
  c.schedule = "gpipe", c.virtualStages = 1;
  StepPrediction gp = predictStep(hw, w, c);
  EXPECT_NEAR(gp.bubbleSeconds, one.bubbleSeconds, one.bubbleSeconds * 1e-9);
  EXPECT_GT(gp.memory.activations, one.memory.activations); // all 64 in flight
  // MFU is model FLOPs over GPUs × peak × step.
  EXPECT_NEAR(one.mfu, stepFlops(w, "none").model / (32 * 312e12 * one.stepSeconds), 1e-12);
}

TEST(StepModel, OverlapHidesDataParallelCommunication) {
  Hardware hw = hardware("a100-80gb", "dgx-a100");
  Workload w;
  w.model = gpt(2048, 24, 16);
  w.globalBatch = 64;
  w.seqLen = 2048;
  ParallelConfig c;
  c.dp = 64;
  StepPrediction sync = predictStep(hw, w, c);
  EXPECT_GT(sync.comm.at("dp").total, 0);
  EXPECT_DOUBLE_EQ(sync.comm.at("dp").exposed, sync.comm.at("dp").total);
  c.gradBucket = 40000000;
  StepPrediction ov = predictStep(hw, w, c);
  // The same bytes in more collectives (one per bucket): more latency, but
  // all but the last bucket hidden under the backward.
  EXPECT_GE(ov.comm.at("dp").total, sync.comm.at("dp").total);
  EXPECT_LT(ov.comm.at("dp").exposed, sync.comm.at("dp").exposed);
  EXPECT_LT(ov.stepSeconds, sync.stepSeconds);
}
