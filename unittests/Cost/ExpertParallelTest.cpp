//===- ExpertParallelTest.cpp - expert parallelism in the cost model -----===//
//
// Issue #34 on the cost side: ParallelConfig's ep (its flags, text and the
// compiler's refusals), the per-rank memory (the experts' state divided by
// ep, the dense state not; the experts' rows at the compiler's worst case),
// the dispatch and combine all-to-alls priced over the ep group (consecutive
// dp ranks), the gradients split over edp and dp, the planner's search of ep
// on Mixtral-8x7B and the Megatron-LM flag. Every expected figure is written
// out here from the model's shapes (docs/cost-model.md, "Expert
// parallelism"), not read back from the code.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Cost/FrameworkConfig.h"
#include "llcdist/Cost/Planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>

using namespace llcdist;
using namespace llcdist::cost;

namespace {

Hardware hardware() {
  Hardware hw;
  auto err = loadHardware("h100-80gb", "dgx-h100", hw);
  EXPECT_FALSE(err) << *err;
  return hw;
}

ModelConfig model(const char *name) {
  ModelConfig m;
  auto err = loadModelConfig(std::string(LLCDIST_SOURCE_DIR) + "/models/" + name + ".json", m);
  EXPECT_FALSE(err) << err->message;
  return m;
}

Workload workload(const char *name, int64_t globalBatch = 256, int64_t seqLen = 4096) {
  Workload w;
  w.model = model(name);
  w.globalBatch = globalBatch;
  w.seqLen = seqLen;
  w.precision = Precision::BF16;
  return w;
}

ParallelConfig config(int64_t dp, int64_t ep, int64_t tp = 1, int64_t pp = 1) {
  ParallelConfig c;
  c.dp = dp, c.ep = ep, c.tp = tp, c.pp = pp;
  if (pp > 1)
    c.schedule = "1f1b";
  return c;
}

std::string why(const Workload &w, const ParallelConfig &c) {
  auto r = checkConfig(w, c);
  return r ? *r : std::string("(accepted)");
}

// Mixtral-8x7B: 32 layers of 8 experts, each a SwiGLU MLP of 14336 over 4096.
constexpr double kLayers = 32, kExperts = 8, kTopK = 2, kH = 4096, kI = 14336;
constexpr double kExpertElements = kLayers * kExperts * 3 * kH * kI; // every layer's stacked experts

} // namespace

TEST(ExpertParallel, ConfigFlagsAndText) {
  ParallelConfig c = config(8, 4);
  EXPECT_EQ(c.mesh().ep, 4);
  EXPECT_EQ(c.mesh().str(), "dp=8,tp=1,pp=1,ep=4");
  EXPECT_EQ(c.compileFlags().rfind("--mesh dp=8,tp=1,pp=1,ep=4 --micro-batch 1", 0), 0u) << c.compileFlags();
  EXPECT_EQ(c.str().rfind("dp=8,tp=1,pp=1,ep=4 mb=1", 0), 0u) << c.str();
  EXPECT_EQ(configJson(c, 256)["ep"], 4);
  // ep = 1 is not shown: the flags, text and JSON of every configuration
  // without experts stay what they were.
  c.ep = 1;
  EXPECT_EQ(c.mesh().ep, 1);
  EXPECT_EQ(c.compileFlags().find("ep="), std::string::npos);
  EXPECT_EQ(c.str().find("ep="), std::string::npos);
  EXPECT_FALSE(configJson(c, 256).contains("ep"));
}

TEST(ExpertParallel, ConfigIsCheckedAsTheCompilerDoes) {
  const Workload mixtral = workload("mixtral-8x7b");
  EXPECT_EQ(why(mixtral, config(8, 8)), "(accepted)");
  EXPECT_EQ(why(mixtral, config(8, 2)), "(accepted)");
  EXPECT_EQ(why(mixtral, config(4, 8)),
            "ep=8 must divide dp=4: expert-parallel ranks are drawn from the data-parallel group");
  EXPECT_EQ(why(mixtral, config(6, 3)), "ep=3 does not divide the 8 experts; choose ep among the divisors of 8");
  for (int64_t ep : {1, 2, 8}) { // ZeRO splits the experts over edp (none apart when ep = dp)
    ParallelConfig zero = config(8, ep);
    zero.zero = 1;
    EXPECT_EQ(why(mixtral, zero), "(accepted)") << ep;
  }
  EXPECT_EQ(why(mixtral, config(8, 0)), "every degree and the micro-batch must be >= 1");
  const Workload llama = workload("llama3-8b");
  EXPECT_EQ(why(llama, config(8, 2)), "ep=2 splits a mixture-of-experts model's experts, but this model has none; "
                                      "leave ep out of --mesh");
  EXPECT_EQ(why(workload("qwen1.5-moe-a2.7b"), config(8, 8)),
            "ep=8 does not divide the 60 experts; choose ep among the divisors of 60");
  EXPECT_EQ(why(workload("qwen1.5-moe-a2.7b"), config(8, 4)), "(accepted)");
  // The load-balancing loss (output_router_logits) crosses pipeline stages
  // with the activations, as the compiler plans it; full recomputation takes
  // it too.
  Workload aux = mixtral;
  aux.model.moe->auxLossCoef = 0.02;
  EXPECT_EQ(why(aux, config(8, 2, 1, 2)), "(accepted)");
  EXPECT_EQ(why(mixtral, config(8, 2, 1, 2)), "(accepted)");
  ParallelConfig full = config(8, 2);
  full.recompute = "full";
  EXPECT_EQ(why(aux, full), "(accepted)");
  // Sequence parallelism runs the experts on each tp rank's tokens: with the
  // loss (its statistics summed over tp), not with a capacity factor, which
  // bounds a rank's tokens.
  ParallelConfig sp = config(4, 2, 2);
  sp.sequenceParallel = true;
  EXPECT_EQ(why(mixtral, sp), "(accepted)");
  EXPECT_EQ(why(aux, sp), "(accepted)");
  Workload capped = mixtral;
  capped.moeCapacityFactor = 1.0;
  EXPECT_NE(why(capped, sp).find("sequence parallelism"), std::string::npos) << why(capped, sp);
  // Context parallelism routes each cp rank's own tokens: with ep (its
  // experts' gradients reduce over edp × cp) and the loss (its statistics
  // summed over cp), not with a capacity factor.
  ParallelConfig cp = config(4, 1);
  cp.cp = 2;
  Workload longer = workload("mixtral-8x7b", 256, 32768);
  EXPECT_EQ(why(longer, cp), "(accepted)");
  cp.ep = 2;
  EXPECT_EQ(why(longer, cp), "(accepted)");
  cp.ep = 1;
  longer.model.moe->auxLossCoef = 0.02;
  EXPECT_EQ(why(longer, cp), "(accepted)");
  longer.moeCapacityFactor = 1.0;
  EXPECT_NE(why(longer, cp).find("context parallelism splits"), std::string::npos) << why(longer, cp);
}

TEST(ExpertParallel, MemoryDividesTheExpertsOnly) {
  const Workload w = workload("mixtral-8x7b");
  const MemoryEstimate whole = estimateMemory(w, config(8, 1));
  for (int64_t ep : {2, 4, 8}) {
    SCOPED_TRACE("ep=" + std::to_string(ep));
    const MemoryEstimate split = estimateMemory(w, config(8, ep));
    // The experts' bf16 value, gradient and f32 master + Adam moments shrink
    // to 1/ep; the dense parameters (attention, norms, routers, embedding,
    // head) are what they were.
    const double gone = kExpertElements * (1 - 1.0 / double(ep));
    EXPECT_NEAR(double(whole.params - split.params), 2 * gone, 2);
    EXPECT_NEAR(double(whole.grads - split.grads), 2 * gone, 2);
    EXPECT_NEAR(double(whole.optimizer - split.optimizer), 12 * gone, 2);
    EXPECT_NEAR(double(split.params) - 2 * kExpertElements / double(ep), double(whole.params) - 2 * kExpertElements, 2);
    // The experts' side holds C = ep·T·min(k, E/ep) rows where ep = 1 holds
    // T·k: their gate, up and SwiGLU outputs (3·I each) and their input and
    // output rows (2·H) per layer, stashed; and the one layer's transient 3·I.
    const double T = 4096, C = double(ep) * T * std::min(kTopK, kExperts / double(ep));
    const double stash = kLayers * (3 * (C - T * kTopK) * kI * 2 + 2 * (C - T * kTopK) * kH * 2);
    const double transient = 3 * (C - T * kTopK) * kI * 2;
    EXPECT_NEAR(double(split.activations - whole.activations), stash + transient, 4);
  }
}

TEST(ExpertParallel, ZeroSplitsExpertsOverTheirReplicas) {
  // ZeRO splits the dense parameters over dp and a rank's expert shard
  // (1/ep of the experts) over its edp = dp/ep replicas: each rank keeps
  // 1/dp of every expert either way, so ZeRO's sharded states are those of
  // ep = 1 at every ep; what ZeRO leaves whole (the gradient under stage 1,
  // the value under 1 and 2) still shrinks by the experts' (1 − 1/ep).
  const Workload w = workload("mixtral-8x7b");
  for (int zero : {1, 2, 3}) {
    ParallelConfig base = config(8, 1);
    base.zero = zero;
    const MemoryEstimate whole = estimateMemory(w, base);
    for (int64_t ep : {2, 4, 8}) {
      SCOPED_TRACE("zero=" + std::to_string(zero) + " ep=" + std::to_string(ep));
      ParallelConfig c = config(8, ep);
      c.zero = zero;
      const MemoryEstimate split = estimateMemory(w, c);
      const double gone = kExpertElements * (1 - 1.0 / double(ep));
      EXPECT_NEAR(double(split.optimizer), double(whole.optimizer), 16);
      EXPECT_NEAR(double(whole.grads - split.grads), zero >= 2 ? 0 : 2 * gone, 4);
      EXPECT_NEAR(double(whole.params - split.params), zero >= 3 ? 0 : 2 * gone, 4);
    }
  }
  // The optimizer's time follows the state it updates.
  const Hardware hw = hardware();
  ParallelConfig ep8 = config(8, 8), ep1 = config(8, 1);
  ep8.zero = ep1.zero = 1;
  EXPECT_NEAR(predictStep(hw, w, ep8).optimizerSeconds, predictStep(hw, w, ep1).optimizerSeconds,
              1e-6 * predictStep(hw, w, ep1).optimizerSeconds);
}

TEST(ExpertParallel, CapacityFactorBoundsTheRows) {
  // --moe-capacity-factor F: each expert keeps C_e = ceil(F·T·k/E) of a
  // rank's T tokens (moeExpertCapacity). At ep=8 the experts' side holds
  // min(8·T·min(k, 1), E·C_e) rows: F = 1 gives E·ceil(T·2/8) = 2·T where
  // dropless holds the worst case 8·T; their gate, up and SwiGLU outputs
  // and their input and output rows shrink by the difference.
  Workload w = workload("mixtral-8x7b");
  const double T = 4096, dropless = 8 * T;
  const MemoryEstimate worst = estimateMemory(w, config(8, 8));
  w.moeCapacityFactor = 1.0;
  const double capped = kExperts * std::ceil(1.0 * T * kTopK / kExperts);
  const MemoryEstimate bounded = estimateMemory(w, config(8, 8));
  const double stash = kLayers * (3 * (dropless - capped) * kI * 2 + 2 * (dropless - capped) * kH * 2);
  const double transient = 3 * (dropless - capped) * kI * 2;
  EXPECT_NEAR(double(worst.activations - bounded.activations), stash + transient, 4);
  EXPECT_EQ(worst.params, bounded.params);
  // F = 0.5 drops half the rows under uniform routing: the all-to-alls move
  // half as many, and the experts compute half of their FLOPs.
  const Hardware hw = hardware();
  Workload half = workload("mixtral-8x7b");
  half.moeCapacityFactor = 0.5;
  const double g = 4096 * kTopK * kH * 2, gHalf = kExperts * std::ceil(0.5 * T * kTopK / kExperts) * kH * 2;
  const ParallelConfig c = config(8, 8);
  EXPECT_NEAR(predictStep(hw, half, c).comm.at("ep").total /
                  predictStep(hw, workload("mixtral-8x7b"), c).comm.at("ep").total,
              gHalf / g, 0.05);
  const double expertFlops = 6 * kLayers * 3 * kH * kI * kTopK * 256 * 4096; // the dropless experts' share
  EXPECT_NEAR(stepFlops(workload("mixtral-8x7b"), "none").model - stepFlops(half, "none").model, expertFlops / 2,
              1e-6 * expertFlops);
  // Megatron-LM's capacity flags, with the position drop policy
  // (llc-dist's: the later assignments in token order go).
  FrameworkArgs a = frameworkArgs(half, c);
  EXPECT_TRUE(hasFlag(a.megatron, "--moe-expert-capacity-factor 0.5"));
  EXPECT_TRUE(hasFlag(a.megatron, "--moe-token-drop-policy position"));
  a = frameworkArgs(workload("mixtral-8x7b"), c);
  EXPECT_FALSE(std::any_of(a.megatron.begin(), a.megatron.end(),
                           [](const std::string &f) { return f.rfind("--moe-expert-capacity-factor", 0) == 0; }));
}

TEST(ExpertParallel, SequenceParallelSplitsTheExpertsTokens) {
  // Under SP each tp rank routes its own 1/tp of the tokens (no gather
  // before the layer): the experts' gate, up and SwiGLU outputs (3·T·k·I
  // per layer, stashed, and one layer's transient), their input and output
  // rows (2·T·k·H) and the router's logits, weights and routes (E + k
  // elements and 2·k i32 a token) are 1/tp of those without SP, where every
  // tp rank runs the whole layer.
  const Workload w = workload("mixtral-8x7b");
  ParallelConfig whole = config(4, 1, 2), sp = whole;
  sp.sequenceParallel = true;
  const MemoryEstimate a = estimateMemory(w, whole), b = estimateMemory(w, sp);
  const double T = 4096, experts = 3 * T * kTopK * kI * 2;
  // SP also keeps the norms' and residuals' activations (4·T·H·2 and the
  // two rstd per layer) on 1/tp of the tokens.
  const double seq = kLayers * (4 * T * kH * 2 + 2 * T * 4) / 2;
  const double rowsAndRouter = kLayers * (2 * T * kTopK * kH * 2 + T * (kExperts * 2 + kTopK * 2 + 2 * kTopK * 4)) / 2;
  EXPECT_NEAR(double(a.activations - b.activations), (kLayers + 1) * experts / 2 + seq + rowsAndRouter, 1e3);
}

TEST(ExpertParallel, AllToAllsOnlyWithEpAndByTheirVolume) {
  const Hardware hw = hardware();
  Workload w = workload("mixtral-8x7b");
  const StepPrediction none = predictStep(hw, w, config(8, 1));
  EXPECT_EQ(none.comm.count("ep"), 0u);
  const ParallelConfig c = config(8, 8);
  const StepPrediction ep = predictStep(hw, w, c);
  ASSERT_EQ(ep.comm.count("ep"), 1u);
  // Per layer and microbatch: dispatch and combine forward, their gradients
  // backward: four all-to-alls of the rank's T·k rows of H bf16, over the
  // ep group (dp ranks 0-7 under tp=1: one node).
  const Group g = axisGroup(c.mesh(), "ep", hw.topology);
  EXPECT_EQ(g.size, 8);
  EXPECT_FALSE(g.crossesNodes());
  const double bytes = 4096 * kTopK * kH * 2;
  const double a2a =
      busFactor(Collective::AllToAll, 8) * bytes / busBandwidth(hw, g) + collectiveLatency(hw, Collective::AllToAll, g);
  const double microbatches = 256 / 8;
  EXPECT_NEAR(ep.comm.at("ep").total, microbatches * kLayers * 4 * a2a, 1e-9);
  EXPECT_EQ(ep.comm.at("ep").exposed, ep.comm.at("ep").total);
  // Full recomputation runs the forward's two again.
  ParallelConfig full = c;
  full.recompute = "full";
  EXPECT_NEAR(predictStep(hw, w, full).comm.at("ep").total, microbatches * kLayers * 6 * a2a, 1e-9);
  // Twice the tokens per microbatch: twice the bytes per all-to-all.
  ParallelConfig mb2 = c;
  mb2.microBatch = 2;
  const double perMicrobatch = ep.comm.at("ep").total / microbatches;
  EXPECT_GT(predictStep(hw, w, mb2).comm.at("ep").total / (microbatches / 2), 1.9 * perMicrobatch);
  // An ep group that spans nodes (tp=2: dp ranks stride 2, eight of them on
  // two nodes) is slower.
  const StepPrediction spread = predictStep(hw, w, config(8, 8, 2, 1));
  EXPECT_TRUE(axisGroup(config(8, 8, 2, 1).mesh(), "ep", hw.topology).crossesNodes());
  EXPECT_GT(spread.comm.at("ep").total, ep.comm.at("ep").total);
  // The expert compute is the active experts' either way (uniform routing):
  // the model FLOPs (MFU × step) do not change with ep.
  EXPECT_NEAR(ep.mfu * ep.stepSeconds, none.mfu * none.stepSeconds, 1e-12);
}

TEST(ExpertParallel, ExpertGradientsReduceOverEdp) {
  const Hardware hw = hardware();
  const Workload w = workload("mixtral-8x7b");
  // dp=16, ep=8: the experts' gradients over edp = 2 ranks (0 and 8: two
  // nodes), the dense ones over dp = 16.
  const ParallelConfig c = config(16, 8);
  const Group edp = axisGroup(c.mesh(), "edp", hw.topology), dp = axisGroup(c.mesh(), "dp", hw.topology);
  EXPECT_EQ(edp.size, 2);
  EXPECT_EQ(edp.perNode, 1);
  EXPECT_EQ(dp.size, 16);
  const MemoryEstimate m = estimateMemory(w, c);
  const double experts = kExpertElements / 8, dense = double(m.params) / 2 - experts;
  const double expected = collectiveSeconds(hw, Collective::AllReduce, 2 * dense, dp) +
                          collectiveSeconds(hw, Collective::AllReduce, 2 * experts, edp);
  EXPECT_NEAR(predictStep(hw, w, c).comm.at("dp").total, expected, 1e-3 * expected);
  // ep = dp: every rank holds its own experts' only replica, nothing to
  // reduce but the dense gradients.
  const ParallelConfig all = config(8, 8);
  const double dense8 = double(estimateMemory(w, all).params) / 2 - kExpertElements / 8;
  const double only =
      collectiveSeconds(hw, Collective::AllReduce, 2 * dense8, axisGroup(all.mesh(), "dp", hw.topology));
  EXPECT_NEAR(predictStep(hw, w, all).comm.at("dp").total, only, 1e-3 * only);
}

TEST(ExpertParallel, PlannerSearchesEpOnMixtral) {
  const Hardware hw = hardware();
  const Workload w = workload("mixtral-8x7b");
  PlannerOptions o;
  o.gpus = 64;
  PlanResult r;
  ASSERT_FALSE(plan(hw, w, o, r));
  ASSERT_FALSE(r.top.empty());
  const Candidate &win = r.top.front();
  EXPECT_LE(win.memoryBytes(), win.capacityBytes);
  // Every ep degree that divides the 8 experts is a family.
  for (const char *key : {"ep=2", "ep=4", "ep=8"}) {
    bool found = std::any_of(r.families.begin(), r.families.end(),
                             [&](const FamilyReport &f) { return f.kind == "knob" && f.key == key; });
    found |= win.config.ep == std::stoll(std::string(key).substr(3));
    EXPECT_TRUE(found) << key;
  }
  // The reasons name the ep choice and the routing assumption.
  auto said = [&](const std::string &text) {
    return std::any_of(r.winnerWhy.begin(), r.winnerWhy.end(),
                       [&](const std::string &s) { return s.find(text) != std::string::npos; });
  };
  EXPECT_TRUE(said("ep=" + std::to_string(win.config.ep) + ": ")) << r.winnerWhy.front();
  EXPECT_TRUE(said("uniform routing, no load imbalance"));
  // Fixed at ep=8: a fitting configuration, its experts one per rank.
  ASSERT_FALSE(parseFix("ep=8", o));
  PlanResult r8;
  ASSERT_FALSE(plan(hw, w, o, r8));
  ASSERT_FALSE(r8.top.empty());
  const Candidate &w8 = r8.top.front();
  EXPECT_EQ(w8.config.ep, 8);
  EXPECT_LE(w8.memoryBytes(), w8.capacityBytes);
  EXPECT_GT(w8.prediction.comm.at("ep").total, 0);
  bool holds = std::any_of(r8.winnerWhy.begin(), r8.winnerWhy.end(), [](const std::string &s) {
    return s.find("ep=8: each rank holds 1 of every layer's 8 experts") != std::string::npos;
  });
  EXPECT_TRUE(holds);
  EXPECT_NE(w8.config.compileFlags().find(",ep=8 "), std::string::npos);
}

TEST(ExpertParallel, FixEpIsChecked) {
  PlannerOptions o;
  o.gpus = 64;
  ASSERT_FALSE(parseFix("ep=4", o));
  EXPECT_EQ(o.ep, 4);
  auto refused = [&](const Workload &w, const PlannerOptions &opts) {
    auto e = checkOptions(w, opts);
    return e ? *e : std::string("(accepted)");
  };
  EXPECT_EQ(refused(workload("mixtral-8x7b"), o), "(accepted)");
  EXPECT_NE(refused(workload("llama3-8b"), o).find("has none"), std::string::npos);
  PlannerOptions three = o;
  three.ep = 3;
  EXPECT_NE(refused(workload("mixtral-8x7b"), three).find("8 experts"), std::string::npos)
      << refused(workload("mixtral-8x7b"), three);
  PlannerOptions zero = o;
  zero.zero = 1; // ZeRO splits the experts over edp
  EXPECT_EQ(refused(workload("mixtral-8x7b"), zero), "(accepted)");
  PlannerOptions dp = o;
  dp.dp = 2;
  EXPECT_NE(refused(workload("mixtral-8x7b"), dp).find("must divide dp=2"), std::string::npos);
  EXPECT_TRUE(parseFix("ep=0", o).has_value());
}

TEST(ExpertParallel, MegatronFlags) {
  const Workload w = workload("mixtral-8x7b");
  FrameworkArgs a = frameworkArgs(w, config(8, 8));
  EXPECT_TRUE(hasFlag(a.megatron, "--expert-model-parallel-size 8"));
  for (const char *f : {"--num-experts 8", "--moe-router-topk 2", "--moe-ffn-hidden-size 14336", "--moe-grouped-gemm",
                        "--moe-token-dispatcher-type alltoall"})
    EXPECT_TRUE(hasFlag(a.megatron, f)) << f;
  EXPECT_TRUE(std::any_of(a.deepspeedNotes.begin(), a.deepspeedNotes.end(),
                          [](const std::string &n) { return n.find("ep_size=8") != std::string::npos; }));
  a = frameworkArgs(w, config(8, 1));
  EXPECT_TRUE(hasFlag(a.megatron, "--expert-model-parallel-size 1"));
  EXPECT_FALSE(hasFlag(a.megatron, "--expert-model-parallel-size 8"));
  a = frameworkArgs(workload("llama3-8b"), config(8, 1));
  EXPECT_FALSE(std::any_of(a.megatron.begin(), a.megatron.end(),
                           [](const std::string &f) { return f.rfind("--expert-model-parallel-size", 0) == 0; }));
}

// Qwen2-MoE with dense layers (decoder_sparse_step 2: 12 of Qwen1.5-MoE's 24
// layers sparse, the others a SwiGLU MLP of intermediate_size): the step
// model prices the mean layer, so the experts' FLOPs and ep's all-to-alls are
// half the all-sparse model's, and Megatron-LM gets the layer pattern.
TEST(ExpertParallel, DenseAndSparseLayersPriceTheMeanLayer) {
  const Workload sparse = workload("qwen1.5-moe-a2.7b");
  Workload mixed = sparse;
  {
    std::ifstream in(std::string(LLCDIST_SOURCE_DIR) + "/models/qwen1.5-moe-a2.7b.json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string one = "\"decoder_sparse_step\": 1";
    ASSERT_NE(text.find(one), std::string::npos);
    text.replace(text.find(one), one.size(), "\"decoder_sparse_step\": 2");
    auto err = parseModelConfig(text, "qwen-mixed.json", mixed.model);
    ASSERT_FALSE(err) << err->message;
  }
  ASSERT_EQ(mixed.model.sparseLayers(), 12);
  // Per token and layer a sparse MLP multiplies 3·H·(k·I_e + I_shared), a
  // dense one 3·H·I; model FLOPs are 6 per multiply-add and token.
  const double H = 2048, L = 24, T = 256.0 * 4096, k = 4, Ie = 1408, Ish = 5632, I = 5632;
  const double dropped = 6 * T * (L / 2) * 3 * H * ((k * Ie + Ish) - I);
  EXPECT_NEAR(stepFlops(sparse, "none").model - stepFlops(mixed, "none").model, dropped, 1e-9 * dropped);
  const Hardware hw = hardware();
  const ParallelConfig c = config(8, 4);
  EXPECT_NEAR(predictStep(hw, mixed, c).comm.at("ep").total / predictStep(hw, sparse, c).comm.at("ep").total, 0.5,
              1e-9);
  // The parameters a rank holds: the 12 dense layers' MLPs in place of 12
  // sparse ones (the router, 60 experts, the shared expert and its gate),
  // whole at ep = 1 (bf16 values).
  const ParallelConfig one = config(8, 1);
  const double sparseMlp = 60 * H + 60 * 3 * H * Ie + 3 * H * Ish + H, denseMlp = 3 * H * I;
  EXPECT_NEAR(double(estimateMemory(sparse, one).params - estimateMemory(mixed, one).params),
              2 * (L / 2) * (sparseMlp - denseMlp), 8);
  FrameworkArgs a = frameworkArgs(mixed, c);
  std::string freq = "--moe-layer-freq '[";
  for (int i = 0; i < 24; ++i)
    freq += std::string(i ? "," : "") + (i % 2 ? "1" : "0");
  EXPECT_TRUE(hasFlag(a.megatron, freq + "]'"));
  a = frameworkArgs(sparse, c);
  EXPECT_FALSE(std::any_of(a.megatron.begin(), a.megatron.end(),
                           [](const std::string &f) { return f.rfind("--moe-layer-freq", 0) == 0; }));
}
