//===- PlannerTest.cpp - the configuration search and its explanations ---===//
//
// The search's counts against counts made here independently, its winner
// against a brute force over the same space, its pruning against the
// analytic memory recomputed here, its explanations on cases built to have
// one cause, its option errors, its JSON, and the Megatron-LM / DeepSpeed
// mapping one knob at a time.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Cost/Planner.h"
#include "llcdist/Cost/FrameworkConfig.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

using namespace llcdist;
using namespace llcdist::cost;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

Hardware hardware(const char *device = "h100-80gb", const char *topo = "dgx-h100") {
  Hardware hw;
  auto err = loadHardware(device, topo, hw);
  EXPECT_FALSE(err) << *err;
  return hw;
}

ModelConfig llama8b() {
  ModelConfig m;
  auto err = loadModelConfig(std::string(LLCDIST_SOURCE_DIR) + "/models/llama3-8b.json", m);
  EXPECT_FALSE(err) << err->message;
  return m;
}

ModelConfig llama405b() {
  ModelConfig m;
  auto err = loadModelConfig(std::string(LLCDIST_SOURCE_DIR) + "/models/llama3.1-405b.json", m);
  EXPECT_FALSE(err) << err->message;
  return m;
}

Workload workload(ModelConfig m, int64_t globalBatch, int64_t seqLen) {
  Workload w;
  w.model = std::move(m);
  w.globalBatch = globalBatch;
  w.seqLen = seqLen;
  w.precision = Precision::BF16;
  return w;
}

PlanResult planOrFail(const Hardware &hw, const Workload &w, const PlannerOptions &o) {
  PlanResult r;
  auto err = plan(hw, w, o, r);
  EXPECT_FALSE(err) << *err;
  return r;
}

const FamilyReport *family(const PlanResult &r, const std::string &key) {
  for (const FamilyReport &f : r.families)
    if (f.key == key)
      return &f;
  return nullptr;
}

int64_t communicators(const ParallelConfig &c) {
  return int64_t(c.dp > 1) + int64_t(c.tp > 1) + int64_t(c.pp > 1) + int64_t(c.cp > 1);
}

} // namespace

//===----------------------------------------------------------------------===//
// Enumeration and counts
//===----------------------------------------------------------------------===//

TEST(Planner, MeshesAreEveryFactorization) {
  Hardware hw = hardware();
  Workload w = workload(llama8b(), 96, 1024);
  for (int64_t n : {1, 6, 12, 16, 24, 64}) {
    PlannerOptions o;
    o.gpus = n;
    o.maxTp = 8; // tp <= 8, pp <= 32 layers
    PlanResult r = planOrFail(hw, w, o);
    int64_t count = 0;
    for (int64_t dp = 1; dp <= n; ++dp)
      for (int64_t tp = 1; tp <= 8; ++tp)
        for (int64_t pp = 1; pp <= 32; ++pp)
          count += dp * tp * pp == n;
    EXPECT_EQ(r.meshes, count) << "gpus " << n;
    // One mesh family per mesh, less the winner's.
    int64_t meshFamilies = 0;
    for (const FamilyReport &f : r.families)
      meshFamilies += f.kind == "mesh";
    // (with no winner, when nothing fits: one GPU holds no 8B model's Adam state).
    EXPECT_EQ(meshFamilies, count - (r.top.empty() ? 0 : 1)) << "gpus " << n;
    EXPECT_EQ(r.top.empty(), n == 1);
  }
}

TEST(Planner, EvaluatedIsTheProductOfTheKnobs) {
  Hardware hw = hardware();
  Workload w = workload(llama8b(), 64, 1024);
  PlannerOptions o;
  o.gpus = 16;
  o.maxMicroBatch = 4;    // 1, 2, 4
  o.maxVirtualStages = 3; // 2, 3
  PlanResult r = planOrFail(hw, w, o);
  int64_t want = 0;
  for (int64_t tp = 1; tp <= 16; tp *= 2)
    for (int64_t pp = 1; tp * pp <= 16; pp *= 2) {
      int64_t dp = 16 / tp / pp;
      // gpipe, 1f1b, zb-h1 and interleaved with v = 2, 3.
      int64_t schedules = pp == 1 ? 1 : 3 + 2;
      // ZeRO 0-2 x buckets off/auto, ZeRO 3 x buckets x prefetch 0/1.
      int64_t zeroBucketPrefetch = dp == 1 ? 1 : 3 * 2 + 1 * 2 * 2;
      int64_t sp = tp > 1 ? 2 : 1;
      want += 3 * schedules * zeroBucketPrefetch * 3 * sp;
    }
  EXPECT_EQ(r.evaluated, want);
  EXPECT_EQ(r.evaluated, r.prunedDivisibility + r.prunedMemory + r.feasible);
  EXPECT_GT(r.feasible, 0);
  // Each family's members split the same way.
  for (const FamilyReport &f : r.families)
    EXPECT_EQ(f.members, f.prunedDivisibility + f.prunedMemory + f.feasible) << f.key;
}

TEST(Planner, WinnerIsTheBruteForceFastest) {
  Hardware hw = hardware();
  Workload w = workload(llama8b(), 32, 2048);
  PlannerOptions o;
  o.gpus = 8;
  o.maxMicroBatch = 2;
  o.maxVirtualStages = 2;
  PlanResult r = planOrFail(hw, w, o);
  ASSERT_FALSE(r.top.empty());
  // Every configuration again, priced here.
  double fastest = 1e30;
  int64_t fits = 0, evaluated = 0;
  const int64_t cap = hw.device.memoryBytes;
  for (int64_t tp : {1, 2, 4, 8})
    for (int64_t pp : {1, 2, 4, 8}) {
      if (8 % (tp * pp))
        continue;
      for (int64_t mb : {1, 2})
        for (const char *s : {"1f1b", "gpipe", "zb-h1", "interleaved"})
          for (int z = 0; z <= 3; ++z)
            for (int b = 0; b < 2; ++b)
              for (int pf = 0; pf < 2; ++pf)
                for (const char *rc : {"none", "selective", "full"})
                  for (int sp = 0; sp < 2; ++sp) {
                    ParallelConfig c;
                    c.tp = tp, c.pp = pp, c.dp = 8 / tp / pp, c.microBatch = mb;
                    c.schedule = s;
                    c.virtualStages = std::string(s) == "interleaved" ? 2 : 1;
                    if (pp == 1 && std::string(s) != "1f1b")
                      continue;
                    if ((z && c.dp == 1) || (b && c.dp == 1) || (pf && z != 3) || (sp && tp == 1))
                      continue;
                    c.zero = z;
                    c.gradBucket = b ? autoGradBucket(c.dp) : 0;
                    c.fsdpPrefetch = pf;
                    c.recompute = rc;
                    c.sequenceParallel = sp;
                    c.scatterGatherP2P = tp > 1 && pp > 1 && !sp; // wherever it applies
                    ++evaluated;
                    if (checkConfig(w, c))
                      continue;
                    if (estimateMemory(w, c).total() + hw.device.reserve.bytes(cap, communicators(c)) > cap)
                      continue;
                    ++fits;
                    fastest = std::min(fastest, predictStep(hw, w, c).stepSeconds);
                  }
    }
  EXPECT_EQ(r.evaluated, evaluated);
  EXPECT_EQ(r.feasible, fits);
  EXPECT_DOUBLE_EQ(r.top.front().prediction.stepSeconds, fastest);
  for (size_t i = 1; i < r.top.size(); ++i)
    EXPECT_LE(r.top[i - 1].prediction.stepSeconds, r.top[i].prediction.stepSeconds);
}

TEST(Planner, FixRestrictsTheSearch) {
  Hardware hw = hardware();
  Workload w = workload(llama8b(), 64, 2048);
  PlannerOptions o;
  o.gpus = 32;
  ASSERT_FALSE(parseFix("tp=2,pp=2", o));
  ASSERT_FALSE(parseFix("recompute=selective,sp=on", o));
  PlanResult r = planOrFail(hw, w, o);
  EXPECT_EQ(r.meshes, 1);
  ASSERT_FALSE(r.top.empty());
  for (const Candidate &k : r.top) {
    EXPECT_EQ(k.config.tp, 2);
    EXPECT_EQ(k.config.pp, 2);
    EXPECT_EQ(k.config.dp, 8);
    EXPECT_EQ(k.config.recompute, "selective");
    EXPECT_TRUE(k.config.sequenceParallel);
  }
  for (const FamilyReport &f : r.families)
    EXPECT_NE(f.key, "recompute=none");
}

// Under tp and pp without SP the planner prices and compiles Megatron-LM's
// scatter/gather pipeline sends: 1/tp per send plus an all-gather over tp,
// faster than whole sends over the inter-node links.
TEST(Planner, ScatterGatherWhereverItApplies) {
  Hardware hw = hardware();
  Workload w = workload(llama8b(), 64, 2048);
  PlannerOptions o;
  o.gpus = 32;
  ASSERT_FALSE(parseFix("tp=8,pp=4,sp=off,recompute=selective", o));
  PlanResult r = planOrFail(hw, w, o);
  ASSERT_FALSE(r.top.empty());
  for (const Candidate &k : r.top) {
    EXPECT_TRUE(k.config.scatterGatherP2P) << k.config.str();
    EXPECT_NE(k.config.compileFlags().find("--scatter-gather-p2p"), std::string::npos);
    ParallelConfig whole = k.config;
    whole.scatterGatherP2P = false;
    EXPECT_LT(k.prediction.stepSeconds, predictStep(hw, w, whole).stepSeconds) << k.config.str();
  }
  ParallelConfig sp = r.top.front().config;
  sp.sequenceParallel = true;
  EXPECT_TRUE(checkConfig(w, sp)) << "scatter/gather with sequence parallelism";
}

//===----------------------------------------------------------------------===//
// Pruning
//===----------------------------------------------------------------------===//

TEST(Planner, DivisibilityPrunesWholeMeshes) {
  // 12 heads: tp = 8 and 16 divide neither the heads nor the GPUs' use of them.
  Hardware hw = hardware();
  ModelConfig m = llama8b();
  m.heads = 12, m.kvHeads = 12, m.headDim = m.hidden / 12;
  Workload w = workload(m, 64, 1024);
  PlannerOptions o;
  o.gpus = 16;
  PlanResult r = planOrFail(hw, w, o);
  for (const char *key : {"dp=2,tp=8,pp=1", "dp=1,tp=16,pp=1", "dp=1,tp=8,pp=2"}) {
    const FamilyReport *f = family(r, key);
    ASSERT_TRUE(f) << key;
    EXPECT_EQ(f->reason, LossReason::Divisibility) << key;
    EXPECT_EQ(f->prunedDivisibility, f->members) << key;
    EXPECT_NE(f->why.find("does not divide num_heads=12"), std::string::npos) << f->why;
  }
  EXPECT_NE(r.top.front().config.tp, 8);
}

// GPT-NeoX's and Falcon's fused q|k|v splits over tp in whole kv-head
// groups: where Llama would replicate kv heads (tp a multiple of them), the
// planner refuses the mesh as the compiler does, so it never proposes one
// that does not compile.
TEST(Planner, FusedQkvNeedsTpDividingTheKvHeads) {
  ModelConfig falcon;
  ASSERT_FALSE(loadModelConfig(std::string(LLCDIST_SOURCE_DIR) + "/models/tiny-falcon.json", falcon));
  Workload w = workload(falcon, 8, 32);
  ParallelConfig c;
  c.tp = 2;
  EXPECT_FALSE(checkConfig(w, c)) << "one kv group per rank";
  c.tp = 4; // 4 query heads over 2 kv heads
  std::optional<std::string> why = checkConfig(w, c);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("tp=4 does not divide num_kv_heads=2: a fused q|k|v"), std::string::npos) << *why;
  ModelConfig llama = falcon; // the same sizes with separate k and v projections: replicated
  llama.arch = Arch::Llama;
  EXPECT_FALSE(checkConfig(workload(llama, 8, 32), c));
}

// CodeGen's qkv_proj splits over tp in whole blocks of [q | v | k] (4, its
// mp_num): tp=8 divides 8 heads but not the blocks, and the planner refuses
// it as the compiler does (hf-codegen.test).
TEST(Planner, CodeGenQkvBlocksBoundTp) {
  ModelConfig codegen;
  ASSERT_FALSE(loadModelConfig(std::string(LLCDIST_SOURCE_DIR) + "/models/tiny-codegen.json", codegen));
  codegen.heads = codegen.kvHeads = 8;
  codegen.headDim = codegen.hidden / 8;
  Workload w = workload(codegen, 8, 32);
  ParallelConfig c;
  for (int64_t tp : {1, 2, 4}) {
    c.tp = tp;
    EXPECT_FALSE(checkConfig(w, c)) << "tp=" << tp << ": whole blocks per rank";
  }
  c.tp = 8;
  std::optional<std::string> why = checkConfig(w, c);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("tp=8 does not divide the 4 blocks of CodeGen's qkv_proj"), std::string::npos) << *why;
  c.tp = 1;
  FrameworkArgs a = frameworkArgs(w, c);
  EXPECT_TRUE(std::any_of(a.megatronNotes.begin(), a.megatronNotes.end(), [](const std::string &n) {
    return n.find("q, v and k from one GEMM in 4 blocks of [q | v | k] (CodeGen's qkv_proj)") != std::string::npos;
  }));
}

// BLOOM's ALiBi: all-to-all context parallelism is refused as the compiler
// refuses it (ContextParallel.cpp), the ring taken; the --as megatron flags
// say there is no position embedding and name Megatron-DeepSpeed's.
TEST(Planner, AlibiTakesTheRingNotAllToAll) {
  ModelConfig bloom;
  ASSERT_FALSE(loadModelConfig(std::string(LLCDIST_SOURCE_DIR) + "/models/tiny-bloom.json", bloom));
  Workload w = workload(bloom, 8, 32);
  ParallelConfig c;
  c.cp = 2;
  c.cpImpl = "ring";
  EXPECT_FALSE(checkConfig(w, c));
  c.cpImpl = "all-to-all";
  std::optional<std::string> why = checkConfig(w, c);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("ALiBi's slopes follow the heads: use the ring"), std::string::npos) << *why;
}

TEST(Planner, MemoryPruningSaysByHowMuch) {
  // llama3-70b on 8 GPUs with everything that saves memory off: nothing fits.
  Hardware hw = hardware();
  ModelConfig m;
  ASSERT_FALSE(loadModelConfig(std::string(LLCDIST_SOURCE_DIR) + "/models/llama3-70b.json", m));
  Workload w = workload(m, 8, 4096);
  PlannerOptions o;
  o.gpus = 8;
  ASSERT_FALSE(parseFix("dp=8,tp=1,pp=1,zero=0,recompute=none,mb=1,bucket=off", o));
  PlanResult r;
  ASSERT_FALSE(plan(hw, w, o, r));
  EXPECT_TRUE(r.top.empty());
  EXPECT_EQ(r.evaluated, 1);
  EXPECT_EQ(r.prunedMemory, 1);
  ASSERT_TRUE(r.closest);
  ParallelConfig c;
  c.dp = 8;
  double want =
      double(estimateMemory(w, c).total() + hw.device.reserve.bytes(hw.device.memoryBytes, 1) - hw.device.memoryBytes) /
      kGiB;
  EXPECT_GT(want, 100); // 70B x 16 bytes over 80 GiB
  EXPECT_NEAR(r.closestOomGiB, want, 1e-9);

  // Searched on 32 GPUs: dp=16 x pp=2 cannot fit (ZeRO-3 is not searched with
  // pp, and ZeRO-2 still holds half the bf16 weights, 70 GB), and its closest
  // member is the family's least memory, found here by its own loops.
  Workload w32 = workload(m, 32, 4096);
  PlannerOptions s;
  s.gpus = 32;
  PlanResult all = planOrFail(hw, w32, s);
  ASSERT_FALSE(all.top.empty());
  const FamilyReport *f = family(all, "dp=16,tp=1,pp=2");
  ASSERT_TRUE(f);
  ASSERT_EQ(f->reason, LossReason::Memory) << f->why;
  ASSERT_TRUE(f->closest);
  double least = 1e30;
  for (int z = 0; z <= 3; ++z)
    for (const char *rc : {"none", "selective", "full"})
      for (int64_t mb : {1, 2, 4, 8})
        for (const char *sched : {"gpipe", "1f1b", "zb-h1", "interleaved"})
          for (int64_t v = 1; v <= 8; ++v) {
            ParallelConfig k;
            k.dp = 16, k.pp = 2, k.zero = z, k.recompute = rc, k.microBatch = mb;
            k.schedule = sched, k.virtualStages = v;
            if (!checkConfig(w32, k))
              least = std::min(least, double(estimateMemory(w32, k).total()));
          }
  double excess =
      (least + double(hw.device.reserve.bytes(hw.device.memoryBytes, 2)) - double(hw.device.memoryBytes)) / kGiB;
  EXPECT_GT(excess, 0);
  char text[64];
  std::snprintf(text, sizeof text, "out of memory by %.2f GiB", excess);
  EXPECT_NE(f->why.find(text), std::string::npos) << f->why;
  // The fitting winner really fits.
  EXPECT_LE(all.top.front().memoryBytes(), hw.device.memoryBytes);
}

//===----------------------------------------------------------------------===//
// Explanations
//===----------------------------------------------------------------------===//

TEST(Planner, SlowInterNodeLinksKeepTpInsideANode) {
  // Two nodes of 8 whose NICs are 1,000 x slower than DGX H100's.
  Hardware hw = hardware();
  hw.topology.nicGBs /= 1000;
  hw.topology.interNodeGBs /= 1000;
  Workload w = workload(llama8b(), 64, 2048);
  PlannerOptions o;
  o.gpus = 16;
  PlanResult r = planOrFail(hw, w, o);
  ASSERT_FALSE(r.top.empty());
  EXPECT_LE(r.top.front().config.tp, 8);
  // Every mesh family whose tp spans the two nodes lost on tp communication.
  const FamilyReport *f = family(r, "dp=1,tp=16,pp=1");
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->best) << f->why;
  EXPECT_EQ(f->reason, LossReason::Communication) << f->why;
  EXPECT_EQ(f->commAxis, "tp");
  EXPECT_TRUE(f->commCrossesNodes);
  EXPECT_NE(f->why.find("communication-bound across nodes"), std::string::npos) << f->why;
  EXPECT_GT(f->slowerPercent, 100);
  EXPECT_GT(f->exposedCommShare, 0.5);
  // The slow NICs are the cause: on DGX H100's own links the same family
  // spends a smaller share of its step on exposed communication.
  PlanResult fast = planOrFail(hardware(), w, o);
  const FamilyReport *g = family(fast, "dp=1,tp=16,pp=1");
  ASSERT_TRUE(g && g->best);
  EXPECT_LT(g->exposedCommShare, f->exposedCommShare);
  EXPECT_LT(g->best->prediction.stepSeconds, f->best->prediction.stepSeconds);
}

TEST(Planner, FewMicrobatchesMakeDeepPipelinesBubbleBound) {
  // 8 sequences on 8 GPUs: pp=8 has 8 microbatches of 1 at most, dp=8 none.
  Hardware hw = hardware();
  Workload w = workload(llama8b(), 8, 2048);
  PlannerOptions o;
  o.gpus = 8;
  PlanResult r = planOrFail(hw, w, o);
  ASSERT_FALSE(r.top.empty());
  EXPECT_EQ(r.top.front().config.pp, 1);
  const FamilyReport *f = family(r, "dp=1,tp=1,pp=8");
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->best) << f->why;
  EXPECT_EQ(f->reason, LossReason::Bubble) << f->why;
  EXPECT_GT(f->bubbleShare, 0.2); // its best member interleaves: (p-1)/(v m) of the ideal
  EXPECT_NE(f->why.find("bubble-bound"), std::string::npos) << f->why;
}

TEST(Planner, WinnerExplanationHasItsNumbers) {
  Hardware hw = hardware();
  Workload w = workload(llama8b(), 64, 2048);
  PlannerOptions o;
  o.gpus = 16;
  PlanResult r = planOrFail(hw, w, o);
  ASSERT_GE(r.winnerWhy.size(), 4u);
  const Candidate &win = r.top.front();
  char step[32];
  std::snprintf(step, sizeof step, "%.4g s per step", win.prediction.stepSeconds);
  EXPECT_NE(r.winnerWhy[0].find(step), std::string::npos) << r.winnerWhy[0];
  EXPECT_NE(r.winnerWhy[0].find(win.config.str()), std::string::npos);
  EXPECT_NE(r.winnerWhy[1].find("runner-up"), std::string::npos) << r.winnerWhy[1];
  EXPECT_NE(r.winnerWhy[3].find("GiB to spare"), std::string::npos) << r.winnerWhy[3];
  // Every family slower than the winner says by how much, consistently.
  for (const FamilyReport &f : r.families)
    if (f.best) {
      EXPECT_GE(f.best->prediction.stepSeconds, win.prediction.stepSeconds) << f.key;
      EXPECT_NEAR(f.slowerPercent, (f.best->prediction.stepSeconds / win.prediction.stepSeconds - 1) * 100, 1e-9);
    }
}

//===----------------------------------------------------------------------===//
// Options and errors
//===----------------------------------------------------------------------===//

//===----------------------------------------------------------------------===//
// Context parallelism (issue #32)
//===----------------------------------------------------------------------===//

// A sequence of 8K tokens or fewer is not split: cp is searched up to
// seq_len / 8192 (the meshes above are those without cp).
TEST(Planner, ShortSequencesAreNotSplit) {
  Workload w = workload(llama8b(), 64, 8192);
  PlannerOptions o;
  o.gpus = 16;
  o.maxMicroBatch = 1;
  PlanResult r = planOrFail(hardware(), w, o);
  for (const Candidate &k : r.top)
    EXPECT_EQ(k.config.cp, 1) << k.config.str();
  for (const FamilyReport &f : r.families)
    EXPECT_EQ(f.key.find("cp"), std::string::npos) << f.key;
}

// At 32K tokens the search takes cp up to 4, with both implementations: the
// meshes are every dp·tp·pp·cp factorization, each cp > 1 mesh's
// configurations twice (ring, all-to-all).
TEST(Planner, LongSequencesSearchCpWithBothImplementations) {
  ModelConfig m;
  auto err = loadModelConfig(std::string(LLCDIST_SOURCE_DIR) + "/models/llama3.2-1b.json", m);
  ASSERT_FALSE(err) << err->message;
  Workload w = workload(m, 16, 32768);
  PlannerOptions o;
  o.gpus = 16;
  o.maxMicroBatch = 1;
  o.maxTp = 8;
  PlanResult r = planOrFail(hardware(), w, o);
  int64_t meshes = 0;
  for (int64_t tp = 1; tp <= 8; tp *= 2)
    for (int64_t pp = 1; tp * pp <= 16; pp *= 2)
      for (int64_t cp = 1; tp * pp * cp <= 16 && cp <= 4; cp *= 2)
        ++meshes;
  EXPECT_EQ(r.meshes, meshes);
  EXPECT_TRUE(family(r, "cp-impl=all-to-all") || family(r, "cp-impl=ring")) << "a cp-impl family lost";
  EXPECT_EQ(r.evaluated, r.prunedDivisibility + r.prunedMemory + r.feasible);
}

// Llama 3's long-context stage (Dubey et al. 2024, §3.3.2): 405B at 131,072
// tokens on 16,384 H100s. Without context parallelism a rank holds whole
// 128K-token sequences: what fits is 64-stage pipelines with one
// microbatch in flight, bubble-bound, so the planner chooses cp > 1 and
// says why, with the best mesh without cp and by how much it is slower.
TEST(Planner, Llama405bAt128kChoosesContextParallelism) {
  Hardware hw = hardware();
  Workload w = workload(llama405b(), 128, 131072);
  PlannerOptions o;
  o.gpus = 16384;
  o.maxMicroBatch = 1;
  o.maxVirtualStages = 2;
  PlanResult r = planOrFail(hw, w, o);
  ASSERT_FALSE(r.top.empty());
  const ParallelConfig &win = r.top.front().config;
  EXPECT_GT(win.cp, 1) << win.str();
  EXPECT_LE(r.top.front().memoryBytes(), hw.device.memoryBytes);
  std::string why;
  for (const std::string &line : r.winnerWhy)
    why += line + "\n";
  EXPECT_NE(why.find("cp=" + std::to_string(win.cp) + " ("), std::string::npos) << why;
  EXPECT_NE(why.find("without context parallelism"), std::string::npos) << why;
  // Every mesh without cp is out of memory, cannot compile, or is slower.
  for (const FamilyReport &f : r.families)
    if (f.kind == "mesh" && f.key.find("cp=") == std::string::npos)
      EXPECT_TRUE(f.feasible == 0 || f.slowerPercent > 100) << f.key << ": " << f.why;
}

// Meta's layout of that stage (tp=8, cp=16, pp=16, dp=8), as llc-dist
// compiles it to fit an 80 GB H100 with the reserve (SP, ZeRO-1, full
// recomputation, 1F1B: bench/compile_time.py compiles it with --device
// h100-80gb, which checks the exact plan), and its throughput is printed
// beside the published 380 TFLOP/s per GPU (bench/validate_cost_model.py
// holds the comparison, with Meta's knobs).
TEST(StepModel, MetasLongContextConfigurationFits) {
  Hardware hw = hardware();
  Workload w = workload(llama405b(), 128, 131072);
  ParallelConfig c;
  c.dp = 8, c.tp = 8, c.pp = 16, c.cp = 16, c.cpImpl = "ring";
  c.sequenceParallel = true, c.zero = 1, c.recompute = "full";
  ASSERT_FALSE(checkConfig(w, c)) << *checkConfig(w, c);
  StepPrediction p = predictStep(hw, w, c);
  const int64_t reserve = hw.device.reserve.bytes(hw.device.memoryBytes, communicators(c));
  EXPECT_LE(p.memory.total() + reserve, hw.device.memoryBytes) << p.memory.total() / kGiB << " GiB";
  const double tflops = p.mfu * peakFlops(hw, Precision::BF16) / 1e12;
  std::printf("llama3.1-405b 131072 tokens tp=8 cp=16 pp=16 dp=8: predicted %.0f TFLOP/s per GPU "
              "(published: 380)\n",
              tflops);
  EXPECT_GT(tflops, 0);
  EXPECT_GT(p.comm.at("cp").total, 0);
}

// The step model's cp, term by term: the rank's tokens are 1/cp of the
// sequence, so the stashed activations halve with cp (the transient
// layer's too), and the ring's k/v traffic is 2·(cp − 1) blocks forward.
TEST(StepModel, ContextParallelSplitsTheTokens) {
  Workload w = workload(llama8b(), 8, 32768);
  ParallelConfig one, two;
  one.tp = two.tp = 8;
  two.cp = 2;
  MemoryEstimate m1 = estimateMemory(w, one), m2 = estimateMemory(w, two);
  EXPECT_EQ(m1.params, m2.params);
  EXPECT_EQ(m1.optimizer, m2.optimizer);
  EXPECT_NEAR(double(m2.activations) / double(m1.activations), 0.5, 1e-9);
  Hardware hw = hardware();
  StepPrediction p1 = predictStep(hw, w, one), p2 = predictStep(hw, w, two);
  EXPECT_EQ(p1.comm.count("cp") ? p1.comm.at("cp").total : 0.0, 0.0);
  EXPECT_GT(p2.comm.at("cp").total, 0);
  // The two cp ranks run half of the sequence each: every step is about half.
  EXPECT_LT(p2.computeSeconds, 0.6 * p1.computeSeconds);
  ParallelConfig a2a = two;
  a2a.cpImpl = "all-to-all";
  // 32 heads / tp 8 = 4 per rank; 8 kv heads / 8 = 1, replicated over cp 2.
  EXPECT_FALSE(checkConfig(w, a2a)) << *checkConfig(w, a2a);
  a2a.tp = 4; // 2 kv heads per rank
  EXPECT_FALSE(checkConfig(w, a2a)) << *checkConfig(w, a2a);
  a2a.tp = 8;
  a2a.cp = 8; // 4 heads per rank do not split 8 ways
  EXPECT_TRUE(checkConfig(w, a2a));
  // The replicated k and v move cp heads each: more all-to-all traffic than
  // one kv head per rank would.
  ParallelConfig a2a4 = a2a, ring4 = a2a;
  a2a4.cp = ring4.cp = 4;
  ring4.cpImpl = "ring";
  EXPECT_FALSE(checkConfig(w, a2a4)) << *checkConfig(w, a2a4);
  EXPECT_GT(predictStep(hw, w, a2a4).comm.at("cp").total, 0);
}

TEST(Planner, ParseFixRefusesWhatItDoesNotKnow) {
  PlannerOptions o;
  auto err = parseFix("tq=8", o);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("unknown knob 'tq'"), std::string::npos) << *err;
  EXPECT_TRUE(parseFix("tp=0", o));
  EXPECT_TRUE(parseFix("tp=eight", o));
  EXPECT_TRUE(parseFix("zero=4", o));
  EXPECT_TRUE(parseFix("recompute=some", o));
  EXPECT_TRUE(parseFix("schedule=1f2b", o));
  EXPECT_TRUE(parseFix("sp=maybe", o));
  EXPECT_TRUE(parseFix("tp", o));
  PlannerOptions p;
  ASSERT_FALSE(parseFix("tp=8", p));
  err = parseFix("tp=4", p);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("fixed twice"), std::string::npos) << *err;
  PlannerOptions q;
  ASSERT_FALSE(parseFix("bucket=auto,prefetch=1,v=2,mb=4,sp=off", q));
  EXPECT_EQ(q.gradBucket, -1);
  EXPECT_EQ(q.fsdpPrefetch, 1);
  EXPECT_EQ(q.virtualStages, 2);
  EXPECT_EQ(q.microBatch, 4);
  EXPECT_EQ(q.sequenceParallel, false);
  PlannerOptions c;
  ASSERT_FALSE(parseFix("cp=16,cp-impl=ring", c));
  EXPECT_EQ(c.cp, 16);
  EXPECT_EQ(c.cpImpl, "ring");
  err = parseFix("cp-impl=p2p", c);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("cp-impl must be ring or all-to-all"), std::string::npos) << *err;
}

TEST(Planner, ContradictionsAreRefused) {
  Hardware hw = hardware();
  Workload w = workload(llama8b(), 64, 2048);
  auto refused = [&](int64_t gpus, const char *fix, const char *says) {
    PlannerOptions o;
    o.gpus = gpus;
    if (*fix)
      ASSERT_FALSE(parseFix(fix, o));
    PlanResult r;
    auto err = plan(hw, w, o, r);
    ASSERT_TRUE(err) << fix;
    EXPECT_NE(err->find(says), std::string::npos) << *err;
  };
  refused(0, "", "--gpus must be >= 1");
  refused(12, "tp=8", "tp=8 does not divide --gpus 12");
  refused(16, "dp=2,tp=2,pp=2", "dp x tp x pp = 8 is not --gpus 16");
  refused(16, "dp=1,zero=1", "shards over dp, but dp is 1");
  refused(16, "pp=1,schedule=gpipe", "needs a pipeline, but pp is 1");
  refused(16, "zero=1,prefetch=1", "needs zero=3");
  refused(16, "schedule=1f1b,v=2", "needs schedule=interleaved");
  refused(16, "tp=1,sp=on", "needs tp > 1");
  refused(16, "pp=64", "does not divide --gpus 16");
  refused(16, "mb=3", "does not divide --global-batch 64");
  // A batch that no dp of the fixed mesh divides: nothing compiles, with the reason.
  Workload odd = workload(llama8b(), 64, 2048);
  odd.globalBatch = 3;
  PlannerOptions o;
  o.gpus = 16;
  ASSERT_FALSE(parseFix("dp=16", o));
  PlanResult r;
  auto err = plan(hw, odd, o, r);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("none of the"), std::string::npos) << *err;
  Workload longSeq = workload(llama8b(), 64, 1 << 20);
  PlannerOptions p;
  p.gpus = 8;
  err = plan(hw, longSeq, p, r);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("max_position_embeddings"), std::string::npos) << *err;
}

//===----------------------------------------------------------------------===//
// JSON
//===----------------------------------------------------------------------===//

TEST(Planner, JsonHasEveryCounterAndSection) {
  Hardware hw = hardware();
  Workload w = workload(llama8b(), 64, 2048);
  PlannerOptions o;
  o.gpus = 16;
  o.top = 3;
  PlanResult r = planOrFail(hw, w, o);
  ExactResult e;
  e.candidate = 1;
  e.ok = true;
  e.stepSeconds = 0.5;
  r.exact.push_back(e);
  ExactResult f;
  f.candidate = 0;
  f.ok = true;
  f.stepSeconds = 0.9;
  r.exact.push_back(f);
  nlohmann::ordered_json j = r.toJson();
  for (const char *k : {"meshes", "evaluated", "pruned_divisibility", "pruned_memory", "feasible", "duplicates",
                        "search_seconds", "configs_per_second", "exact_seconds"})
    EXPECT_TRUE(j["counters"].contains(k)) << k;
  EXPECT_EQ(j["counters"]["evaluated"], r.evaluated);
  ASSERT_EQ(j["top"].size(), 3u);
  for (const char *k : {"rank", "config", "step_seconds", "tokens_per_second", "mfu", "hfu", "bubble_seconds",
                        "bubble_share", "exposed_comm_seconds", "exposed_comm_share", "comm", "memory", "bound"})
    EXPECT_TRUE(j["top"][0].contains(k)) << k;
  for (const char *k : {"dp", "tp", "pp", "virtual_stages", "micro_batch", "microbatches", "zero", "recompute",
                        "schedule", "sequence_parallel", "grad_bucket_size", "fsdp_prefetch", "compile_flags"})
    EXPECT_TRUE(j["top"][0]["config"].contains(k)) << k;
  EXPECT_EQ(j["top"][0]["memory"]["total"], r.top[0].memoryBytes());
  EXPECT_TRUE(j["winner"].contains("why"));
  ASSERT_FALSE(j["families"].empty());
  for (const auto &fam : j["families"])
    for (const char *k : {"kind", "key", "members", "reason", "why"})
      EXPECT_TRUE(fam.contains(k)) << k;
  // The exact results rerank: #2 simulated faster than #1.
  ASSERT_EQ(j["exact"].size(), 2u);
  EXPECT_EQ(j["exact"][0]["exact_step_seconds"], 0.5);
  EXPECT_EQ(j["exact_ranking"], nlohmann::ordered_json::array({2, 1}));
}

//===----------------------------------------------------------------------===//
// Megatron-LM and DeepSpeed, one knob at a time
//===----------------------------------------------------------------------===//

namespace {

struct Mapped {
  Workload w = workload(llama8b(), 256, 4096);
  ParallelConfig c;
  Mapped() { c.dp = 4, c.tp = 2, c.pp = 2; }
  FrameworkArgs args() const { return frameworkArgs(w, c); }
};

bool hasNote(const std::vector<std::string> &notes, const std::string &text) {
  for (const std::string &n : notes)
    if (n.find(text) != std::string::npos)
      return true;
  return false;
}

} // namespace

TEST(FrameworkConfig, Tp) {
  Mapped m;
  EXPECT_TRUE(hasFlag(m.args().megatron, "--tensor-model-parallel-size 2"));
  EXPECT_EQ(m.args().deepspeed["tensor_parallel"]["autotp_size"], 2);
  m.c.tp = 8;
  EXPECT_TRUE(hasFlag(m.args().megatron, "--tensor-model-parallel-size 8"));
  EXPECT_FALSE(hasFlag(m.args().megatron, "--tensor-model-parallel-size 2"));
  EXPECT_EQ(m.args().deepspeed["tensor_parallel"]["autotp_size"], 8);
  m.c.tp = 1;
  EXPECT_FALSE(m.args().deepspeed.contains("tensor_parallel"));
}

TEST(FrameworkConfig, Pp) {
  Mapped m;
  EXPECT_TRUE(hasFlag(m.args().megatron, "--pipeline-model-parallel-size 2"));
  EXPECT_EQ(m.args().deepspeed["pipeline"]["stages"], 2);
  m.c.pp = 4;
  EXPECT_TRUE(hasFlag(m.args().megatron, "--pipeline-model-parallel-size 4"));
  EXPECT_EQ(m.args().deepspeed["pipeline"]["stages"], 4);
  m.c.pp = 1;
  EXPECT_TRUE(hasFlag(m.args().megatron, "--pipeline-model-parallel-size 1"));
  EXPECT_FALSE(m.args().deepspeed.contains("pipeline"));
}

TEST(FrameworkConfig, Dp) {
  Mapped m;
  EXPECT_TRUE(hasNote(m.args().megatronNotes, "launch on 16 GPUs: dp = world / (tp x pp) = 4"));
  EXPECT_EQ(m.args().deepspeed["gradient_accumulation_steps"], 64);
  m.c.dp = 8;
  EXPECT_TRUE(hasNote(m.args().megatronNotes, "launch on 32 GPUs"));
  EXPECT_TRUE(hasNote(m.args().deepspeedNotes, "launch on 32 GPUs"));
  EXPECT_EQ(m.args().deepspeed["gradient_accumulation_steps"], 32);
}

TEST(FrameworkConfig, Cp) {
  Mapped m;
  EXPECT_FALSE(hasFlag(m.args().megatron, "--context-parallel-size 1"));
  EXPECT_FALSE(m.args().deepspeed.contains("sequence_parallel_size"));
  m.c.cp = 16;
  EXPECT_TRUE(hasFlag(m.args().megatron, "--context-parallel-size 16"));
  EXPECT_TRUE(hasFlag(m.args().megatron, "--cp-comm-type p2p"));
  EXPECT_TRUE(hasNote(m.args().megatronNotes, "launch on 256 GPUs: dp = world / (tp x pp x cp) = 4"));
  EXPECT_TRUE(hasNote(m.args().deepspeedNotes, "no ring attention"));
  m.c.cpImpl = "all-to-all";
  EXPECT_TRUE(hasFlag(m.args().megatron, "--cp-comm-type a2a"));
  EXPECT_EQ(m.args().deepspeed["sequence_parallel_size"], 16);
}

TEST(FrameworkConfig, Schedule) {
  Mapped m;
  m.c.schedule = "1f1b";
  FrameworkArgs a = m.args();
  EXPECT_TRUE(a.megatronNotes.size() == 1); // the launch note only: 1F1B is the default
  EXPECT_TRUE(a.deepspeedNotes.size() == 1);
  m.c.schedule = "interleaved";
  m.c.virtualStages = 4; // 32 layers / (2 x 4) = 4 per chunk
  a = m.args();
  EXPECT_TRUE(hasFlag(a.megatron, "--num-layers-per-virtual-pipeline-stage 4"));
  EXPECT_TRUE(hasNote(a.deepspeedNotes, "1F1B only"));
  m.c.virtualStages = 3; // 32 / 6 is not whole: the count of chunks instead
  a = m.args();
  EXPECT_TRUE(hasFlag(a.megatron, "--virtual-pipeline-model-parallel-size 3"));
  m.c.virtualStages = 1;
  m.c.schedule = "gpipe";
  a = m.args();
  EXPECT_TRUE(hasNote(a.megatronNotes, "no GPipe schedule"));
  m.c.schedule = "zb-h1";
  a = m.args();
  EXPECT_TRUE(hasNote(a.megatronNotes, "--enable-zero-bubble"));
  for (const std::string &f : a.megatron)
    EXPECT_EQ(f.find("virtual"), std::string::npos) << f;
}

TEST(FrameworkConfig, MicroBatch) {
  Mapped m;
  EXPECT_TRUE(hasFlag(m.args().megatron, "--micro-batch-size 1"));
  EXPECT_EQ(m.args().deepspeed["train_micro_batch_size_per_gpu"], 1);
  m.c.microBatch = 4;
  EXPECT_TRUE(hasFlag(m.args().megatron, "--micro-batch-size 4"));
  EXPECT_EQ(m.args().deepspeed["train_micro_batch_size_per_gpu"], 4);
  EXPECT_EQ(m.args().deepspeed["gradient_accumulation_steps"], 16);
}

TEST(FrameworkConfig, GlobalBatch) {
  Mapped m;
  EXPECT_TRUE(hasFlag(m.args().megatron, "--global-batch-size 256"));
  EXPECT_EQ(m.args().deepspeed["train_batch_size"], 256);
  m.w.globalBatch = 1024;
  EXPECT_TRUE(hasFlag(m.args().megatron, "--global-batch-size 1024"));
  EXPECT_EQ(m.args().deepspeed["train_batch_size"], 1024);
  // DeepSpeed's identity: train = micro x accumulation x dp.
  FrameworkArgs a = m.args();
  EXPECT_EQ(a.deepspeed["train_batch_size"].get<int64_t>(),
            a.deepspeed["train_micro_batch_size_per_gpu"].get<int64_t>() *
                a.deepspeed["gradient_accumulation_steps"].get<int64_t>() * m.c.dp);
}

TEST(FrameworkConfig, SeqLen) {
  Mapped m;
  EXPECT_TRUE(hasFlag(m.args().megatron, "--seq-length 4096"));
  m.w.seqLen = 8192;
  EXPECT_TRUE(hasFlag(m.args().megatron, "--seq-length 8192"));
}

TEST(FrameworkConfig, SequenceParallel) {
  Mapped m;
  EXPECT_FALSE(hasFlag(m.args().megatron, "--sequence-parallel"));
  m.c.sequenceParallel = true;
  EXPECT_TRUE(hasFlag(m.args().megatron, "--sequence-parallel"));
  EXPECT_TRUE(hasNote(m.args().deepspeedNotes, "Ulysses"));
}

TEST(FrameworkConfig, Recompute) {
  Mapped m;
  FrameworkArgs a = m.args();
  for (const std::string &f : a.megatron)
    EXPECT_EQ(f.find("--recompute"), std::string::npos) << f;
  EXPECT_FALSE(a.deepspeed.contains("activation_checkpointing"));
  m.c.recompute = "selective";
  a = m.args();
  EXPECT_TRUE(hasFlag(a.megatron, "--recompute-granularity selective"));
  EXPECT_FALSE(hasFlag(a.megatron, "--recompute-method uniform"));
  EXPECT_TRUE(hasNote(a.deepspeedNotes, "recompute selective"));
  m.c.recompute = "full";
  a = m.args();
  EXPECT_TRUE(hasFlag(a.megatron, "--recompute-granularity full"));
  EXPECT_TRUE(hasFlag(a.megatron, "--recompute-method uniform"));
  EXPECT_TRUE(hasFlag(a.megatron, "--recompute-num-layers 1"));
  EXPECT_TRUE(a.deepspeed.contains("activation_checkpointing"));
  EXPECT_EQ(a.deepspeed["pipeline"]["activation_checkpoint_interval"], 1);
}

TEST(FrameworkConfig, Zero) {
  Mapped m;
  EXPECT_FALSE(hasFlag(m.args().megatron, "--use-distributed-optimizer"));
  EXPECT_EQ(m.args().deepspeed["zero_optimization"]["stage"], 0);
  m.c.zero = 1;
  EXPECT_TRUE(hasFlag(m.args().megatron, "--use-distributed-optimizer"));
  EXPECT_EQ(m.args().deepspeed["zero_optimization"]["stage"], 1);
  m.c.zero = 2;
  EXPECT_TRUE(hasFlag(m.args().megatron, "--use-distributed-optimizer"));
  EXPECT_TRUE(hasNote(m.args().megatronNotes, "zero 2"));
  EXPECT_EQ(m.args().deepspeed["zero_optimization"]["stage"], 2);
  m.c.zero = 3;
  EXPECT_FALSE(hasFlag(m.args().megatron, "--use-distributed-optimizer"));
  EXPECT_TRUE(hasFlag(m.args().megatron, "--use-torch-fsdp2"));
  EXPECT_TRUE(hasNote(m.args().megatronNotes, "does not work with pipeline parallelism"));
  EXPECT_EQ(m.args().deepspeed["zero_optimization"]["stage"], 3);
}

TEST(FrameworkConfig, GradBucket) {
  Mapped m;
  EXPECT_FALSE(hasFlag(m.args().megatron, "--overlap-grad-reduce"));
  EXPECT_EQ(m.args().deepspeed["zero_optimization"]["overlap_comm"], false);
  m.c.gradBucket = autoGradBucket(m.c.dp);
  EXPECT_TRUE(hasFlag(m.args().megatron, "--overlap-grad-reduce"));
  for (const std::string &f : m.args().megatron) // Megatron's default size: no flag
    EXPECT_EQ(f.find("--ddp-bucket-size"), std::string::npos);
  EXPECT_EQ(m.args().deepspeed["zero_optimization"]["overlap_comm"], true);
  EXPECT_EQ(m.args().deepspeed["zero_optimization"]["reduce_bucket_size"], 40000000);
  m.c.gradBucket = 1000;
  EXPECT_TRUE(hasFlag(m.args().megatron, "--ddp-bucket-size 1000"));
  EXPECT_EQ(m.args().deepspeed["zero_optimization"]["reduce_bucket_size"], 1000);
}

TEST(FrameworkConfig, FsdpPrefetch) {
  Mapped m;
  m.c.zero = 3;
  m.c.pp = 1;
  m.c.fsdpPrefetch = 0;
  EXPECT_EQ(m.args().deepspeed["zero_optimization"]["stage3_prefetch_bucket_size"], 0);
  EXPECT_TRUE(hasNote(m.args().megatronNotes, "fsdp prefetch 0"));
  m.c.fsdpPrefetch = 1;
  int64_t one = m.args().deepspeed["zero_optimization"]["stage3_prefetch_bucket_size"];
  // One llama3-8b layer over tp=2: (4096·4096·2 + 4096·1024·2 + 3·4096·14336 + 2·4096) / 2.
  EXPECT_EQ(one, (4096LL * 4096 * 2 + 4096LL * 1024 * 2 + 3LL * 4096 * 14336 + 2 * 4096) / 2);
  EXPECT_FALSE(hasNote(m.args().megatronNotes, "fsdp prefetch"));
  m.c.fsdpPrefetch = 2;
  EXPECT_EQ(m.args().deepspeed["zero_optimization"]["stage3_prefetch_bucket_size"], 2 * one);
  m.c.zero = 1;
  EXPECT_FALSE(m.args().deepspeed["zero_optimization"].contains("stage3_prefetch_bucket_size"));
}

TEST(FrameworkConfig, Dtype) {
  Mapped m;
  EXPECT_TRUE(hasFlag(m.args().megatron, "--bf16"));
  EXPECT_EQ(m.args().deepspeed["bf16"]["enabled"], true);
  m.w.precision = Precision::F32;
  EXPECT_FALSE(hasFlag(m.args().megatron, "--bf16"));
  EXPECT_EQ(m.args().deepspeed["bf16"]["enabled"], false);
}

TEST(FrameworkConfig, Model) {
  Mapped m;
  FrameworkArgs a = m.args();
  for (const char *f : {"--num-layers 32", "--hidden-size 4096", "--ffn-hidden-size 14336", "--num-attention-heads 32",
                        "--group-query-attention", "--num-query-groups 8", "--swiglu", "--normalization RMSNorm",
                        "--position-embedding-type rope", "--untie-embeddings-and-output-weights"})
    EXPECT_TRUE(hasFlag(a.megatron, f)) << f;
  m.w.model.layers = 16;
  m.w.model.kvHeads = 32;
  a = m.args();
  EXPECT_TRUE(hasFlag(a.megatron, "--num-layers 16"));
  EXPECT_FALSE(hasFlag(a.megatron, "--group-query-attention"));
  EXPECT_FALSE(hasFlag(a.megatron, "--add-qkv-bias"));
  // Qwen2: Llama's flags, with the q, k, v biases and no other.
  ModelConfig qwen;
  ASSERT_FALSE(loadModelConfig(std::string(LLCDIST_SOURCE_DIR) + "/models/qwen2-7b.json", qwen));
  m.w.model = qwen;
  a = m.args();
  for (const char *f : {"--swiglu", "--normalization RMSNorm", "--rotary-base 1e+06", "--disable-bias-linear",
                        "--add-qkv-bias", "--num-query-groups 4", "--untie-embeddings-and-output-weights"})
    EXPECT_TRUE(hasFlag(a.megatron, f)) << f;
  // BLOOM: no position embedding (ALiBi, in a note naming Megatron-DeepSpeed's flags), the tanh GELU,
  // a tied head.
  ModelConfig bloom;
  ASSERT_FALSE(loadModelConfig(std::string(LLCDIST_SOURCE_DIR) + "/models/bloom-176b.json", bloom));
  m.w.model = bloom;
  a = m.args();
  for (const char *f : {"--num-attention-heads 112", "--position-embedding-type none", "--openai-gelu"})
    EXPECT_TRUE(hasFlag(a.megatron, f)) << f;
  for (const char *f : {"--position-embedding-type rope", "--untie-embeddings-and-output-weights", "--swiglu"})
    EXPECT_FALSE(hasFlag(a.megatron, f)) << f;
  EXPECT_TRUE(hasNote(a.megatronNotes, "--position-embedding-type alibi and --embed-layernorm"));
  // StarCoder (GPTBigCode): learned positions (Megatron-LM's default: no flag), one kv head, the tanh GELU.
  ModelConfig starcoder;
  ASSERT_FALSE(loadModelConfig(std::string(LLCDIST_SOURCE_DIR) + "/models/starcoder-15.5b.json", starcoder));
  m.w.model = starcoder;
  a = m.args();
  for (const char *f :
       {"--group-query-attention", "--num-query-groups 1", "--openai-gelu", "--max-position-embeddings 8192"})
    EXPECT_TRUE(hasFlag(a.megatron, f)) << f;
  EXPECT_FALSE(hasFlag(a.megatron, "--position-embedding-type rope"));
  // MPT: ALiBi (a note naming Megatron-DeepSpeed's flag, no embedding LayerNorm), the exact GELU (no
  // --openai-gelu), no biases, LayerNorms without a bias (a note).
  ModelConfig mpt;
  ASSERT_FALSE(loadModelConfig(std::string(LLCDIST_SOURCE_DIR) + "/models/mpt-7b.json", mpt));
  m.w.model = mpt;
  a = m.args();
  for (const char *f : {"--position-embedding-type none", "--disable-bias-linear", "--num-attention-heads 32"})
    EXPECT_TRUE(hasFlag(a.megatron, f)) << f;
  for (const char *f : {"--openai-gelu", "--swiglu", "--untie-embeddings-and-output-weights"})
    EXPECT_FALSE(hasFlag(a.megatron, f)) << f;
  EXPECT_TRUE(hasNote(a.megatronNotes, "ALiBi instead of position embeddings (MPT's)"));
  EXPECT_TRUE(hasNote(a.megatronNotes, "LayerNorms with a weight and no bias (MPT's, Cohere's)"));
  EXPECT_FALSE(hasNote(a.megatronNotes, "--embed-layernorm"));
  // GPT-J: rotary embeddings on a quarter of each head, in adjacent pairs; the MLP's biases only; untied.
  ModelConfig gptj;
  ASSERT_FALSE(loadModelConfig(std::string(LLCDIST_SOURCE_DIR) + "/models/gpt-j-6b.json", gptj));
  m.w.model = gptj;
  a = m.args();
  for (const char *f : {"--position-embedding-type rope", "--rotary-percent 0.25", "--rotary-interleaved",
                        "--openai-gelu", "--untie-embeddings-and-output-weights"})
    EXPECT_TRUE(hasFlag(a.megatron, f)) << f;
  EXPECT_FALSE(hasFlag(a.megatron, "--disable-bias-linear"));
  EXPECT_TRUE(hasNote(a.megatronNotes, "no biases on q, k, v and out_proj but on the MLP (GPT-J's)"));
  EXPECT_TRUE(hasNote(a.megatronNotes, "the LM head's bias"));
  // OPT: learned positions (Megatron-LM's default), ReLU, biases, tied.
  ModelConfig opt;
  ASSERT_FALSE(loadModelConfig(std::string(LLCDIST_SOURCE_DIR) + "/models/opt-6.7b.json", opt));
  m.w.model = opt;
  a = m.args();
  for (const char *f : {"--position-embedding-type", "--openai-gelu", "--untie-embeddings-and-output-weights",
                        "--disable-bias-linear", "--swiglu"})
    EXPECT_FALSE(hasFlag(a.megatron, f)) << f;
  EXPECT_TRUE(hasNote(a.megatronNotes, "ReLU in the MLP (OPT's)"));
  // Cohere: rotary embeddings in adjacent pairs, SwiGLU, LayerNorm (Megatron-LM's default) of a weight alone,
  // the parallel layer, scaled logits, tied.
  ModelConfig cohere;
  ASSERT_FALSE(loadModelConfig(std::string(LLCDIST_SOURCE_DIR) + "/models/c4ai-command-r-v01.json", cohere));
  m.w.model = cohere;
  a = m.args();
  for (const char *f : {"--position-embedding-type rope", "--rotary-base 8e+06", "--rotary-interleaved", "--swiglu",
                        "--disable-bias-linear"})
    EXPECT_TRUE(hasFlag(a.megatron, f)) << f;
  for (const char *f : {"--normalization", "--untie-embeddings-and-output-weights"})
    EXPECT_FALSE(hasFlag(a.megatron, f)) << f;
  EXPECT_TRUE(hasNote(a.megatronNotes, "logits multiplied by logit_scale 0.0625 (Cohere's)"));
  EXPECT_TRUE(hasNote(a.megatronNotes, "LayerNorms with a weight and no bias (MPT's, Cohere's)"));
  EXPECT_TRUE(hasNote(a.megatronNotes, "attention and MLP in parallel on one LayerNorm"));
  // GPT-Neo: learned positions, the tanh GELU, no q, k, v biases, unscaled scores, local layers, tied.
  ModelConfig neo;
  ASSERT_FALSE(loadModelConfig(std::string(LLCDIST_SOURCE_DIR) + "/models/gpt-neo-1.3b.json", neo));
  m.w.model = neo;
  m.w.seqLen = 2048;
  a = m.args();
  EXPECT_TRUE(hasFlag(a.megatron, "--openai-gelu"));
  for (const char *f : {"--position-embedding-type", "--untie-embeddings-and-output-weights", "--disable-bias-linear"})
    EXPECT_FALSE(hasFlag(a.megatron, f)) << f;
  EXPECT_TRUE(hasNote(a.megatronNotes, "no biases on q, k and v but on out_proj and the MLP (GPT-Neo's)"));
  EXPECT_TRUE(hasNote(a.megatronNotes, "attention scores not divided by sqrt(head_dim) (GPT-Neo's)"));
  EXPECT_TRUE(hasNote(a.megatronNotes, "local attention (each query sees the last 256 keys) in 12 of 24 layers"));
  EXPECT_TRUE(hasNote(a.megatronNotes, "--window-size 255 0"));
  // BioGPT: learned positions from row 2, the erf GELU (Megatron-LM's default), scaled token embeddings, tied.
  ModelConfig bio;
  ASSERT_FALSE(loadModelConfig(std::string(LLCDIST_SOURCE_DIR) + "/models/biogpt.json", bio));
  m.w.model = bio;
  m.w.seqLen = 1024;
  a = m.args();
  EXPECT_TRUE(hasFlag(a.megatron, "--max-position-embeddings 1024"));
  for (const char *f : {"--openai-gelu", "--position-embedding-type", "--untie-embeddings-and-output-weights",
                        "--disable-bias-linear", "--swiglu"})
    EXPECT_FALSE(hasFlag(a.megatron, f)) << f;
  EXPECT_TRUE(hasNote(a.megatronNotes, "token embeddings multiplied by sqrt(hidden_size) (Gemma's, BioGPT's)"));
  EXPECT_TRUE(hasNote(a.megatronNotes, "position p read from row p + 2 of a table of 1026 rows"));
}

TEST(FrameworkConfig, EveryRowIsTested) {
  // A row added to the table without a test above fails here.
  std::set<std::string> tested = {"model",        "seq-len",
                                  "dp",           "tp",
                                  "pp",           "cp",
                                  "schedule",     "micro-batch",
                                  "global-batch", "sequence-parallel",
                                  "recompute",    "zero",
                                  "grad-bucket",  "fsdp-prefetch",
                                  "dtype"};
  std::set<std::string> rows;
  for (const KnobMapping &k : knobMappings())
    rows.insert(k.knob);
  EXPECT_EQ(rows, tested);
}

TEST(FrameworkConfig, MegatronCommandIsOneInvocation) {
  Mapped m;
  m.c.schedule = "gpipe";
  std::string cmd = megatronCommand(m.args());
  EXPECT_EQ(cmd.rfind("# ", 0), 0u) << cmd;
  EXPECT_NE(cmd.find("pretrain_gpt.py \\\n    --num-layers 32 \\\n"), std::string::npos) << cmd;
  EXPECT_EQ(cmd.back(), '\n');
  EXPECT_NE(cmd.substr(cmd.size() - 3, 2), "\\\n");
}
