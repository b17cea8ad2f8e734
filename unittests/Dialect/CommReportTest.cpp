//===- CommReportTest.cpp - the compile report's communication volume -----===//
//
// The collectives the partitioner inserts, counted on the emitted plan, must
// equal the analytic volume: data parallelism all-reduces every fp32 gradient
// once per step (4·Ψ bytes), which a ring sends 2(n-1)/n times per rank. The
// report's own formulas (CollectiveEntry::analytic) are checked against the
// same numbers computed here.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Dialect/Plan/Analysis/CommReport.h"
#include "../CompileForTest.h"
#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/Frontend/ImportXF.h"
#include "llcdist/InitAll.h"
#include "llcdist/Pipelines/Pipelines.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

using namespace llcdist;

namespace {
plan::CommReport compileAndReport(const std::string &model, int64_t dp, int64_t microbatches, int64_t *params,
                                  int64_t tp = 1, ModelConfig *config = nullptr, int64_t gradBucketSize = 0) {
  ModelConfig cfg;
  EXPECT_FALSE(loadModelConfig(std::string(LLCDIST_SOURCE_DIR) + "/models/" + model + ".json", cfg));
  *params = cfg.numParameters();
  if (config)
    *config = cfg;
  TrainingShape shape;
  shape.seqLen = 16;
  shape.microBatch = 2;
  shape.globalBatch = 2 * dp * microbatches;
  EXPECT_FALSE(resolveTrainingShape(cfg, dp, shape));
  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  mlir::MLIRContext ctx(registry);
  auto module = importModel(ctx, cfg, shape, dp);
  mlir::PassManager pm(&ctx, mlir::ModuleOp::getOperationName());
  TrainingPipelineOptions opt;
  opt.mesh.dp = dp;
  opt.mesh.tp = tp;
  opt.gradBucketSize = gradBucketSize;
  buildTrainingPipeline(pm, opt);
  EXPECT_TRUE(mlir::succeeded(pm.run(*module)));
  auto report = plan::computeCommReport(*module);
  EXPECT_TRUE(mlir::succeeded(report));
  return mlir::succeeded(report) ? *report : plan::CommReport{};
}
} // namespace

TEST(CommReport, OneRankHasNoCollectives) {
  int64_t params;
  EXPECT_TRUE(compileAndReport("tiny-gpt2", 1, 1, &params).entries.empty());
}

TEST(CommReport, DataParallelGradientsMatchTheAnalyticVolume) {
  for (const char *model : {"tiny-gpt2", "tiny-llama"})
    for (int64_t dp : {2, 4})
      for (int64_t mb : {1, 3}) {
        int64_t params;
        plan::CommReport r = compileAndReport(model, dp, mb, &params);
        ASSERT_EQ(r.entries.size(), 2u) << model;
        const plan::CollectiveEntry &g = r.entries[0], &l = r.entries[1];
        EXPECT_EQ(g.payload, "gradients");
        EXPECT_EQ(g.kind, "all_reduce");
        EXPECT_EQ(g.axis, "dp");
        EXPECT_EQ(g.groupSize, dp);
        // Once per step whatever the microbatch count (DDP's no_sync).
        EXPECT_EQ(g.callsPerStep, 1) << "microbatches " << mb;
        EXPECT_EQ(g.payloadBytes, 4 * params) << model;
        EXPECT_DOUBLE_EQ(g.ringBytesPerStep(), 2.0 * double(dp - 1) / double(dp) * 4.0 * double(params));
        EXPECT_EQ(l.payload, "loss");
        EXPECT_EQ(l.payloadBytes, 4);
      }
}

// Gradient buckets move the gradient all-reduces from the compute queue (run
// exposed) to the communication queue, in several calls: the bytes per queue
// are what moved, and the total does not change.
TEST(CommReport, BytesByQueueShowWhatBucketsMoved) {
  int64_t params;
  plan::CommReport sync = compileAndReport("tiny-gpt2", 2, 2, &params);
  ASSERT_EQ(sync.ringBytesPerStepByQueue().size(), 1u);
  EXPECT_EQ(sync.ringBytesPerStepByQueue()[0].first, "compute");
  plan::CommReport async = compileAndReport("tiny-gpt2", 2, 2, &params, 1, nullptr, /*gradBucketSize=*/50'000);
  auto byQueue = async.ringBytesPerStepByQueue();
  ASSERT_EQ(byQueue.size(), 2u);
  const double ring = 2.0 * (2 - 1) / 2; // 2(n-1)/n at dp = 2
  double loss = 0, grads = 0;
  for (const plan::CollectiveEntry &e : async.entries)
    (e.payload == "gradients" ? grads : loss) += e.ringBytesPerStep();
  EXPECT_DOUBLE_EQ(grads, ring * 4.0 * double(params)); // every gradient once
  for (auto [queue, bytes] : byQueue)
    EXPECT_DOUBLE_EQ(bytes, queue == "comm" ? grads : loss) << queue;
  EXPECT_DOUBLE_EQ(async.ringBytesPerStep(), sync.ringBytesPerStep());
  std::string text;
  llvm::raw_string_ostream os(text);
  async.print(os, MeshSpec{2, 1, 1}, nullptr);
  EXPECT_NE(text.find("ring B/step by queue:"), std::string::npos) << text;
  EXPECT_NE(text.find(" compute 4 (exposed)"), std::string::npos) << text;
  EXPECT_NE(text.find(" comm " + std::to_string(int64_t(grads)) + " (may overlap compute)"), std::string::npos) << text;
  for (const auto &j : async.toJson(MeshSpec{2, 1, 1}, nullptr))
    EXPECT_EQ(j["queue"], j["payload"] == "gradients" ? "comm" : "compute") << j.dump();
}

// Megatron's tensor parallelism: per microbatch, each layer all-reduces its
// attention and MLP outputs forward and two input gradients backward, of
// b·s·h values each (Narayanan et al., SC21, §2.3: "4 all-reduce operations
// per layer"), plus the vocab-parallel embedding forward and the LM head's
// input gradient backward.
TEST(CommReport, TensorParallelActivationsMatchMegatron) {
  for (const char *model : {"tiny-gpt2", "tiny-llama"})
    for (int64_t tp : {2, 4})
      for (int64_t mb : {1, 2}) {
        int64_t params;
        ModelConfig cfg;
        plan::CommReport r = compileAndReport(model, 1, mb, &params, tp, &cfg);
        int64_t b = 2, s = 16, h = cfg.hidden, L = cfg.layers;
        int64_t calls = 0;
        double ring = 0;
        for (const plan::CollectiveEntry &e : r.entries) {
          EXPECT_EQ(e.axis, "tp");
          // The f64 partial reductions of the loss and the norm (kernels never
          // communicate) are not Megatron's activation all-reduces.
          if (e.origin == xf::CollectiveOrigin::VocabParallelLoss || e.origin == xf::CollectiveOrigin::GradNorm)
            continue;
          EXPECT_EQ(e.payload, "activations");
          EXPECT_EQ(e.payloadBytes, 4 * b * s * h) << e.reason;
          calls += e.callsPerStep;
          ring += e.ringBytesPerStep();
        }
        EXPECT_EQ(calls, (4 * L + 2) * mb) << model << " tp=" << tp;
        double n = double(tp);
        EXPECT_DOUBLE_EQ(ring, double((4 * L + 2) * mb) * 2 * (n - 1) / n * 4.0 * double(b * s * h));
      }
}

namespace {
using llcdist::testing::Compiled;
using llcdist::testing::compileForTest;
using llcdist::testing::meshOptions;
using llcdist::testing::shapeForTest;

plan::CommReport reportOf(const Compiled &c) {
  if (!c.module)
    return {};
  auto r = plan::computeCommReport(*c.module);
  EXPECT_TRUE(mlir::succeeded(r));
  return mlir::succeeded(r) ? *r : plan::CommReport{};
}

std::string printed(const plan::CommReport &r, const MeshSpec &mesh, const Topology *topo = nullptr) {
  std::string s;
  llvm::raw_string_ostream os(s);
  r.print(os, mesh, topo);
  return s;
}
} // namespace

// Each entry carries the formula's volume, computed here independently: the
// gradients' 4·Ψ (2·Ψ in bf16) once per step, the loss's one f32.
TEST(CommReport, AnalyticVolumeOfDataParallelism) {
  for (const char *dtype : {"f32", "bf16"}) {
    Compiled c = compileForTest("tiny-llama", meshOptions(2), shapeForTest(16, 2, 0, dtype));
    plan::CommReport r = reportOf(c);
    const int64_t psi = c.config.numParameters();
    const double el = std::string(dtype) == "bf16" ? 2 : 4;
    EXPECT_EQ(r.localParameters, psi);
    EXPECT_EQ(r.facts.bf16, std::string(dtype) == "bf16");
    ASSERT_EQ(r.entries.size(), 2u);
    const plan::CollectiveEntry &g = r.entries[0], &l = r.entries[1];
    EXPECT_DOUBLE_EQ(g.analytic.payloadBytes, el * double(psi)) << dtype;
    EXPECT_EQ(g.analytic.calls, 1);
    EXPECT_TRUE(g.analytic.matches(g)) << g.analytic.formula;
    EXPECT_DOUBLE_EQ(l.analytic.payloadBytes, 4.0);
    EXPECT_TRUE(l.analytic.matches(l));
  }
}

// Under tp every collective has a formula that matches the counted one, and
// the formulas' calls sum to Megatron's (4L + 2) per microbatch; with full
// recomputation the attention output's all-reduce runs again (the MLP's
// output only feeds the residual stream, which no backward reads): (5L + 2).
TEST(CommReport, AnalyticVolumeOfTensorParallelism) {
  for (const char *recompute : {"none", "full"})
    for (const char *dtype : {"f32", "bf16"}) {
      const int64_t b = 2, s = 16, mb = 2;
      TrainingPipelineOptions o = meshOptions(1, 2);
      o.recompute = recompute;
      Compiled c = compileForTest("tiny-gpt2", o, shapeForTest(s, b, b * mb, dtype));
      plan::CommReport r = reportOf(c);
      const int64_t h = c.config.hidden, L = c.config.layers;
      const double el = std::string(dtype) == "bf16" ? 2 : 4;
      const bool full = std::string(recompute) == "full";
      int64_t calls = 0;
      ASSERT_FALSE(r.entries.empty());
      for (const plan::CollectiveEntry &e : r.entries) {
        ASSERT_TRUE(e.analytic.known()) << e.reason;
        EXPECT_TRUE(e.analytic.matches(e)) << e.reason << ": " << e.analytic.formula;
        // The loss's and the norm's f64 partial reductions: their own formulas (checked by matches).
        if (e.origin == xf::CollectiveOrigin::VocabParallelLoss || e.origin == xf::CollectiveOrigin::GradNorm)
          continue;
        EXPECT_DOUBLE_EQ(e.analytic.payloadBytes, el * double(b * s * h)) << e.reason;
        calls += e.analytic.calls;
      }
      EXPECT_EQ(calls, ((full ? 5 : 4) * L + 2) * mb) << recompute << " " << dtype;
      std::string text = printed(r, MeshSpec{1, 2, 1});
      EXPECT_EQ(text.find("MISMATCH"), std::string::npos) << text;
      EXPECT_NE(text.find("= same"), std::string::npos) << text;
    }
}

// A pipeline border sends one microbatch's residual stream, b·s·h values.
TEST(CommReport, AnalyticVolumeOfPipelineSends) {
  const int64_t b = 1, s = 16;
  Compiled c = compileForTest("tiny-llama", meshOptions(1, 1, 2), shapeForTest(s, b, 4));
  plan::CommReport r = reportOf(c);
  int64_t sends = 0;
  for (const plan::CollectiveEntry &e : r.entries) {
    EXPECT_GE(e.stage, 0);
    if (e.kind != "send")
      continue;
    ++sends;
    EXPECT_DOUBLE_EQ(e.analytic.payloadBytes, 4.0 * double(b * s * c.config.hidden));
    EXPECT_TRUE(e.analytic.matches(e)) << e.reason;
    EXPECT_EQ(e.callsPerStep, 4); // one per microbatch
  }
  EXPECT_EQ(sends, 2); // activations forward, their gradients backward
}

// --scatter-gather-p2p: each pipeline send carries this tp rank's 1/tp of
// b·s·h, and each recv is followed by an all-gather over tp of the whole.
TEST(CommReport, AnalyticVolumeOfScatterGatherPipelineSends) {
  const int64_t b = 1, s = 16, tp = 2;
  TrainingPipelineOptions opt = meshOptions(1, tp, 2);
  opt.scatterGatherP2P = true;
  Compiled c = compileForTest("tiny-llama", opt, shapeForTest(s, b, 4));
  plan::CommReport r = reportOf(c);
  int64_t sends = 0, gathers = 0;
  for (const plan::CollectiveEntry &e : r.entries) {
    const bool gather = e.kind == "all_gather" && e.origin == xf::CollectiveOrigin::Pipeline;
    if (e.kind != "send" && !gather)
      continue;
    (gather ? gathers : sends) += 1;
    EXPECT_DOUBLE_EQ(e.analytic.payloadBytes, 4.0 * double(b * s * c.config.hidden) / (gather ? 1 : tp)) << e.kind;
    EXPECT_EQ(e.payloadBytes * (gather ? 1 : tp), 4 * b * s * c.config.hidden) << e.kind;
    EXPECT_TRUE(e.analytic.matches(e)) << e.kind << ": " << e.analytic.formula;
    EXPECT_EQ(e.callsPerStep, 4); // one per microbatch
  }
  EXPECT_EQ(sends, 2);
  EXPECT_EQ(gathers, 2);
}

// A counted volume that differs from the formula is reported, not hidden.
TEST(CommReport, MismatchIsPrinted) {
  plan::CommReport r;
  plan::CollectiveEntry e;
  e.kind = "all_reduce";
  e.axis = "dp";
  e.payload = "gradients";
  e.groupSize = 2;
  e.callsPerStep = 1;
  e.payloadBytes = 400;
  r.entries.push_back(e);
  r.localParameters = 100;
  r.localParametersPerStage = {100};
  r.entries[0].analytic = plan::analyticVolume(r.entries[0], r, r.facts);
  EXPECT_TRUE(r.entries[0].analytic.matches(r.entries[0]));
  EXPECT_NE(printed(r, MeshSpec{2, 1, 1}).find("= same"), std::string::npos);
  r.entries[0].payloadBytes = 404;
  EXPECT_FALSE(r.entries[0].analytic.matches(r.entries[0]));
  EXPECT_NE(printed(r, MeshSpec{2, 1, 1}).find("≠ MISMATCH"), std::string::npos);
}

// The JSON has one object per entry with the counted and analytic numbers;
// with a topology, the link and the ring time at its bandwidth.
TEST(CommReport, JsonAndLinkEstimate) {
  Compiled c = compileForTest("tiny-gpt2", meshOptions(2, 2), shapeForTest(16, 1));
  plan::CommReport r = reportOf(c);
  MeshSpec mesh{2, 2, 1};
  Topology topo;
  topo.name = "test";
  topo.gpusPerNode = 2; // tp groups inside a node, dp groups across
  topo.intraNodeGBs = 100;
  topo.interNodeGBs = 10;
  nlohmann::ordered_json j = r.toJson(mesh, &topo);
  ASSERT_EQ(j.size(), r.entries.size());
  for (size_t i = 0; i < r.entries.size(); ++i) {
    const plan::CollectiveEntry &e = r.entries[i];
    EXPECT_EQ(j[i]["payload_bytes"].get<int64_t>(), e.payloadBytes);
    EXPECT_EQ(j[i]["analytic_payload_bytes"].get<double>(), e.analytic.payloadBytes);
    EXPECT_EQ(j[i]["reason"], e.reason);
    const bool across = e.axis == "dp";
    EXPECT_EQ(j[i]["crosses_nodes"].get<bool>(), across) << e.axis;
    const double gbs = across ? 10 : 100;
    EXPECT_DOUBLE_EQ(j[i]["estimated_ms_per_step"].get<double>(), e.ringBytesPerStep() / (gbs * 1e9) * 1e3);
    EXPECT_FALSE(j[i].contains("stage")); // one program
  }
  EXPECT_FALSE(r.toJson(mesh, nullptr)[0].contains("crosses_nodes"));
  std::string text = printed(r, mesh, &topo);
  EXPECT_NE(text.find("topology test: 4 ranks on 2 nodes of 2 GPUs"), std::string::npos) << text;
}

// Every collective of a plan carries its kind from where it was created:
// Megatron's per-microbatch counts by kind — 2L row-parallel outputs, 2L + 1
// column-parallel input gradients (the LM head's too), 1 embedding — and the
// data-parallel gradient and loss reductions once per step.
TEST(CommReport, CollectivesCarryTheirOrigin) {
  using xf::CollectiveOrigin;
  const int64_t mb = 2;
  Compiled c = compileForTest("tiny-gpt2", meshOptions(2, 2), shapeForTest(16, 1, 2 * mb));
  plan::CommReport r = reportOf(c);
  const int64_t L = c.config.layers;
  std::map<CollectiveOrigin, int64_t> calls;
  for (const plan::CollectiveEntry &e : r.entries) {
    ASSERT_TRUE(e.origin) << e.reason;
    calls[*e.origin] += e.callsPerStep;
  }
  EXPECT_EQ(calls[CollectiveOrigin::RowParallel], 2 * L * mb);
  EXPECT_EQ(calls[CollectiveOrigin::ColumnParallel], (2 * L + 1) * mb);
  EXPECT_EQ(calls[CollectiveOrigin::VocabParallelEmbedding], mb);
  EXPECT_EQ(calls[CollectiveOrigin::DataParallelGradients], 1);
  EXPECT_EQ(calls[CollectiveOrigin::Loss], 1);
  EXPECT_EQ(calls[CollectiveOrigin::VocabParallelLoss], 2 * 2 * mb); // max and sums, fwd and bwd
  EXPECT_EQ(calls[CollectiveOrigin::GradNorm], 1);
  EXPECT_EQ(calls.size(), 7u);
  // Kernels that are no collective have none.
  c.module->walk([&](plan::KernelOp k) {
    if (k.getKernel() == "matmul")
      EXPECT_FALSE(plan::collectiveOrigin(k));
  });
}

// What the lowering creates itself: ZeRO's collectives, pipeline transfers
// and the tied embedding's exchange between the first and last stage.
TEST(CommReport, LoweringCollectivesCarryTheirOrigin) {
  using xf::CollectiveOrigin;
  TrainingPipelineOptions o = meshOptions(2, 1, 2);
  o.zero = 3;
  Compiled c = compileForTest("tiny-gpt2", o, shapeForTest(16, 1, 4));
  plan::CommReport r = reportOf(c);
  std::set<std::pair<std::string, CollectiveOrigin>> seen;
  for (const plan::CollectiveEntry &e : r.entries) {
    ASSERT_TRUE(e.origin) << e.reason;
    seen.insert({e.kind, *e.origin});
    if (*e.origin == CollectiveOrigin::Zero)
      EXPECT_FALSE(e.analytic.known()) << e.reason; // per-parameter blocks
  }
  EXPECT_TRUE(seen.count({"all_gather", CollectiveOrigin::Zero}));
  EXPECT_TRUE(seen.count({"reduce_scatter", CollectiveOrigin::Zero}));
  EXPECT_TRUE(seen.count({"send", CollectiveOrigin::Pipeline}));
  EXPECT_TRUE(seen.count({"send", CollectiveOrigin::TiedParameter}));
  EXPECT_FALSE(seen.count({"all_reduce", CollectiveOrigin::DataParallelGradients}));
}

// The formula is picked by the kind, never by the reason's wording.
TEST(CommReport, FormulaFollowsTheOriginNotTheReason) {
  plan::CommReport r;
  r.localParametersPerStage = {0};
  r.facts.bshLM = std::array<int64_t, 5>{2, 16, 64, 4, 3}; // b, s, h, L, M
  plan::CollectiveEntry e;
  e.kind = "all_reduce";
  e.axis = "tp";
  e.payload = "activations";
  e.reason = "a row-parallel linear's output is a partial sum over tp";
  e.origin = xf::CollectiveOrigin::ColumnParallel;
  plan::AnalyticVolume a = plan::analyticVolume(e, r, r.facts);
  EXPECT_EQ(a.calls, 2 * 4 * 3); // column-parallel: 2L per microbatch (no LM head here)
  EXPECT_NE(a.formula.find("input gradients"), std::string::npos) << a.formula;
  e.origin = xf::CollectiveOrigin::RowParallel;
  e.reason = "anything";
  EXPECT_NE(plan::analyticVolume(e, r, r.facts).formula.find("attention and MLP outputs"), std::string::npos);
  e.origin.reset(); // no kind: no formula
  EXPECT_FALSE(plan::analyticVolume(e, r, r.facts).known());
}

// No collective or transfer of any plan is left without a kind: every
// parallelism, ZeRO stage, bf16, sequence parallelism, kv-head replication.
TEST(CommReport, EveryCollectiveHasAnOrigin) {
  struct Config {
    const char *model;
    int64_t dp, tp, pp, zero;
    bool sp;
    const char *dtype;
  };
  for (const Config &cfg :
       {Config{"tiny-llama", 2, 2, 1, 1, false, "f32"}, Config{"tiny-llama", 2, 1, 2, 2, false, "bf16"},
        Config{"tiny-gpt2", 2, 1, 2, 3, false, "f32"}, Config{"tiny-llama", 1, 2, 2, 0, true, "bf16"},
        Config{"tiny-llama", 1, 4, 1, 0, false, "f32"}}) {
    TrainingPipelineOptions o = meshOptions(cfg.dp, cfg.tp, cfg.pp);
    o.zero = cfg.zero;
    o.sequenceParallel = cfg.sp;
    Compiled c = compileForTest(cfg.model, o, shapeForTest(16, 1, 4 * cfg.dp, cfg.dtype));
    ASSERT_TRUE(c.module);
    int64_t collectives = 0;
    c.module->walk([&](plan::KernelOp k) {
      llvm::StringRef kind = k.getKernel();
      if (kind != "all_reduce" && kind != "all_gather" && kind != "reduce_scatter" && kind != "send" && kind != "recv")
        return;
      ++collectives;
      EXPECT_TRUE(plan::collectiveOrigin(k)) << cfg.model << " " << kind.str() << " without plan.origin";
    });
    EXPECT_GT(collectives, 0);
  }
}
