// Multi-rank training through runTraining(): data-parallel plans (all_reduce(avg) of the grads and the
// loss) reproduce the single-rank plan with the same global batch; replicas that diverge are caught at
// --save-params; sharded params init, import and export exactly like the unsharded plan.
#include "PlanTestUtil.h"
#include "TestUtil.h"
#include "train/TrainParts.h"

#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Safetensors.h"
#include "llcdist/runtime/TokenData.h"
#include "llcdist/runtime/Train.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <thread>

namespace llcdist::rt {
namespace {

using testing::json;
namespace fs = std::filesystem;

// Buffer ids of oneLayerPlan.
constexpr int kDwte = 1, kDlm = 5, kLoss = 13;

void setMesh(testing::PlanBuilder& p, int64_t dp, int64_t tp, const std::vector<std::string>& order = {}) {
  const int64_t B = p.manifest["batch"]["micro_batch"], M = p.manifest["batch"]["microbatches"];
  p.manifest["batch"]["dp"] = dp;
  p.manifest["batch"]["global_batch"] = B * M * dp;
  p.manifest["mesh"] = {{"dp", dp}, {"tp", tp}, {"pp", 1}};
  if (!order.empty()) p.manifest["mesh"]["rank_order"] = order;
  json ranks = json::array();
  for (int64_t r = 0; r < dp * tp; ++r) ranks.push_back(r);
  p.manifest["programs"][0]["ranks"] = ranks;
}

// The one-layer plan with B·M·dp = G: each rank averages the grads and the loss over dp before the
// optimizer (DDP); `reduceGrads` false leaves the replicas to diverge.
testing::PlanBuilder dataParallelPlan(int64_t dp, int64_t B, int64_t M, bool reduceGrads = true) {
  testing::PlanBuilder p = testing::oneLayerPlan(32, 16, 8, B, M);
  setMesh(p, dp, 1);
  json& opt = p.ops("optimizer");
  json pre = json::array();
  if (reduceGrads)
    pre.push_back({{"op", "all_reduce"}, {"args", {{"x", {kDwte, kDlm}}}}, {"attrs", {{"axis", "dp"}, {"op", "avg"}}}});
  pre.push_back({{"op", "all_reduce"}, {"args", {{"x", {kLoss}}}}, {"attrs", {{"axis", "dp"}, {"op", "avg"}}}});
  for (json& o : opt) pre.push_back(o);
  opt = pre;
  return p;
}

class MultiRankTrainTest : public testing::TrainFixture {
protected:
  MultiRankTrainTest() : TrainFixture(11) {}
  static std::string bytes(const std::string& file) {
    std::ifstream f(file, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), {});
  }
};

TEST_F(MultiRankTrainTest, DataParallelMatchesSingleRank) {
  // G = 8 sequences per step: (dp=1, M=4), (dp=2, M=2), (dp=4, M=1), B = 2.
  std::vector<uint16_t> t(4096);
  for (size_t i = 0; i < t.size(); ++i) t[i] = uint16_t((i * 7 + i / 13) % 32);
  ASSERT_TRUE(writeTokenFile(path("tokens.bin"), t.data(), int64_t(t.size())).isOk());
  std::map<int, RunResult> res;
  for (int dp : {1, 2, 4}) {
    RunOptions o = options(planDir(dataParallelPlan(dp, 2, 4 / dp), "dp" + std::to_string(dp)), 3);
    o.data = path("tokens.bin");
    o.shuffle = true;
    o.saveParams = path("dp" + std::to_string(dp) + ".safetensors");
    Status s = run(o, &res[dp]);
    ASSERT_TRUE(s.isOk()) << "dp=" << dp << ": " << s.message();
    ASSERT_EQ(res[dp].steps.size(), 3u);
  }
  const auto ref = readAll(path("dp1.safetensors"));
  ASSERT_EQ(ref.size(), 2u);
  for (int dp : {2, 4}) {
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_NEAR(res[dp].steps[k].loss, res[1].steps[k].loss, 1e-5 * std::abs(res[1].steps[k].loss)) << dp << " " << k;
      EXPECT_NEAR(res[dp].steps[k].gradNorm, res[1].steps[k].gradNorm, 1e-5 * res[1].steps[k].gradNorm) << dp << " " << k;
    }
    const auto got = readAll(path("dp" + std::to_string(dp) + ".safetensors"));
    for (const auto& [name, want] : ref) {
      const std::vector<float>& v = got.at(name);
      double maxRel = 0;
      for (size_t i = 0; i < v.size(); ++i)
        maxRel = std::max(maxRel, std::abs(double(v[i]) - want[i]) / std::max(1e-2, std::abs(double(want[i]))));
      EXPECT_LT(maxRel, 1e-5) << "dp=" << dp << " " << name;
    }
  }
  EXPECT_EQ(res[2].tokensPerStep, res[1].tokensPerStep);
}

TEST_F(MultiRankTrainTest, DataParallelIsBitwiseDeterministic) {
  const std::string plan = planDir(dataParallelPlan(2, 2, 2), "dp2");
  RunResult r1, r2;
  RunOptions o = options(plan, 3);
  o.saveParams = path("1.safetensors");
  ASSERT_TRUE(run(o, &r1).isOk());
  o.saveParams = path("2.safetensors");
  ASSERT_TRUE(run(o, &r2).isOk());
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(std::memcmp(&r1.steps[k].loss, &r2.steps[k].loss, sizeof(double)), 0);
    EXPECT_EQ(std::memcmp(&r1.steps[k].gradNorm, &r2.steps[k].gradNorm, sizeof(double)), 0);
  }
  EXPECT_EQ(bytes(path("1.safetensors")), bytes(path("2.safetensors")));
}

TEST_F(MultiRankTrainTest, DivergedReplicasAreReportedAtSave) {
  // Without the gradient all-reduce each dp rank steps on its own data: the replicas differ.
  RunOptions o = options(planDir(dataParallelPlan(2, 2, 2, /*reduceGrads=*/false), "bad"), 1);
  o.saveParams = path("out.safetensors");
  Status s = run(o);
  ASSERT_FALSE(s.isOk());
  for (const char* part : {"--save-params", "param 'transformer.wte.weight'", "rank 1", "rank 0", "element"})
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " in: " << s.message();
  EXPECT_FALSE(fs::exists(o.saveParams));
}

// A plan with one vocab-sharded table (tp, dim 0), a GPT-2 c_attn sharded per head (tp, dim 1,
// blocks 3) and a replicated lm_head; nothing to run but zeroing the loss. tp = 1 with shard = false
// is the unsharded reference.
testing::PlanBuilder shardedPlan(int64_t dp, int64_t tp, bool shard, const std::vector<std::string>& order = {}) {
  const int64_t V = 12, H = 4;
  testing::PlanBuilder p(V, 4, 1, 1);
  setMesh(p, dp, tp, order);
  const int64_t n = shard ? tp : 1;
  const int64_t wte = p.buffer("wte", "param", {V / n, H}), dwte = p.buffer("dwte", "grad", {V / n, H});
  const int64_t qkv = p.buffer("c_attn", "param", {H, 3 * H / n}), dqkv = p.buffer("dc_attn", "grad", {H, 3 * H / n});
  const int64_t lm = p.buffer("lm", "param", {V, H}), dlm = p.buffer("dlm", "grad", {V, H});
  const int64_t loss = p.buffer("loss", "metric", {1});
  p.param("transformer.wte.weight", {V, H}, wte, dwte, {{"kind", "normal"}, {"std", 0.02}}, false);
  p.param("transformer.h.0.attn.c_attn.weight", {H, 3 * H}, qkv, dqkv, {{"kind", "normal"}, {"std", 1.0}}, true);
  p.param("lm_head.weight", {V, H}, lm, dlm, {{"kind", "normal"}, {"std", 0.5}}, true);
  if (shard) {
    p.manifest["params"][0]["sharding"] = {{"axis", "tp"}, {"dim", 0}};
    p.manifest["params"][1]["sharding"] = {{"axis", "tp"}, {"dim", 1}, {"blocks", 3}};
  }
  p.op("step_begin", "fill_zero", {{"x", {loss}}});
  p.action("step_begin");
  return p;
}

TEST_F(MultiRankTrainTest, ShardedParamsInitSaveAndImportLikeTheFullModel) {
  RunOptions o = options(planDir(shardedPlan(1, 1, false), "ref"), 0);
  o.saveParams = path("ref.safetensors");
  Status s = run(o);
  ASSERT_TRUE(s.isOk()) << s.message();
  const std::string ref = bytes(o.saveParams);
  ASSERT_FALSE(ref.empty());
  int i = 0;
  for (auto [dp, tp, order] : {std::tuple{1, 2, std::vector<std::string>{}}, std::tuple{2, 2, std::vector<std::string>{}},
                               std::tuple{2, 2, std::vector<std::string>{"dp", "tp", "pp"}}}) {
    SCOPED_TRACE("dp=" + std::to_string(dp) + " tp=" + std::to_string(tp) + " order " + std::to_string(order.size()));
    const std::string plan = planDir(shardedPlan(dp, tp, true, order), "sharded" + std::to_string(i++));
    // Init by global index: the gathered save is the unsharded plan's file, byte for byte (also after
    // a step, which only zeroes the loss and checks every replica of every shard).
    for (int64_t steps : {0, 1}) {
      o = options(plan, steps);
      o.saveParams = path("sharded.safetensors");
      s = run(o);
      ASSERT_TRUE(s.isOk()) << s.message();
      EXPECT_EQ(bytes(o.saveParams), ref);
    }
    // --init-from slices every shard out of the full tensors; saving gathers them back exactly.
    const auto full = readAll(path("ref.safetensors"));
    std::vector<float> wte = testing::randn(48, 3), qkv = testing::randn(48, 4), lm = testing::randn(48, 5);
    ASSERT_TRUE(writeSafetensors(path("in.safetensors"), {{"transformer.wte.weight", DType::kF32, {12, 4}, wte.data()},
                                                          {"transformer.h.0.attn.c_attn.weight", DType::kF32, {4, 12}, qkv.data()},
                                                          {"lm_head.weight", DType::kF32, {12, 4}, lm.data()}})
                    .isOk());
    o = options(plan, 0);
    o.initFrom = path("in.safetensors");
    o.saveParams = path("roundtrip.safetensors");
    s = run(o);
    ASSERT_TRUE(s.isOk()) << s.message();
    const auto back = readAll(o.saveParams);
    EXPECT_EQ(std::memcmp(back.at("transformer.wte.weight").data(), wte.data(), 48 * 4), 0);
    EXPECT_EQ(std::memcmp(back.at("transformer.h.0.attn.c_attn.weight").data(), qkv.data(), 48 * 4), 0);
    EXPECT_EQ(std::memcmp(back.at("lm_head.weight").data(), lm.data(), 48 * 4), 0);
  }
}

// The shard layout itself (docs/plan-format.md): [2, 12] on dim 1 with blocks 3 over n = 2 — member 1
// holds columns 2-3, 6-7 and 10-11 of each row; dim 0 unblocked is a contiguous row range.
TEST(ShardLayoutTest, BlocksSplitEachBlockOverTheMembers) {
  ParamDesc p;
  p.name = "w";
  p.shape = {2, 12};
  p.sharding = ParamSharding{MeshAxis::kTp, 1, 3};
  p.localShape = {2, 6};
  std::vector<int64_t> local2global(12, -1);
  train::forEachShardRun(p, 1, 2, [&](int64_t l, int64_t g, int64_t count) {
    for (int64_t k = 0; k < count; ++k) local2global[size_t(l + k)] = g + k;
  });
  EXPECT_EQ(local2global, (std::vector<int64_t>{2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23}));
  p.shape = {6, 2};
  p.sharding = ParamSharding{MeshAxis::kTp, 0, 1};
  p.localShape = {2, 2};
  std::vector<int64_t> rows;
  train::forEachShardRun(p, 2, 3, [&](int64_t l, int64_t g, int64_t count) { rows.insert(rows.end(), {l, g, count}); });
  EXPECT_EQ(rows, (std::vector<int64_t>{0, 8, 4}));
}

TEST_F(MultiRankTrainTest, ProgressAndLogComeFromRankZero) {
  RunOptions o = options(planDir(dataParallelPlan(2, 1, 1), "dp2"), 2);
  o.quiet = false;
  o.logJson = path("log.jsonl");
  std::ostringstream progress;
  RunResult res;
  Status s = runTraining(o, progress, &res);
  ASSERT_TRUE(s.isOk()) << s.message();
  const std::string text = progress.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4) << text;  // two steps, one memory line, steps
  EXPECT_NE(text.find("step 2/2"), std::string::npos) << text;
  EXPECT_NE(text.find("memory: ranks 0-1 arena "), std::string::npos) << text;  // SPMD: the ranks agree
  std::ifstream log(o.logJson);
  std::string line;
  int lines = 0;
  while (std::getline(log, line)) ++lines;
  EXPECT_EQ(lines, 2);
  EXPECT_GT(res.peakDeviceBytes, 0);
}


// One rank fails (its data holds token ids past the embedding table) while the other already waits in
// the gradient all-reduce: the run returns that rank's error promptly, not a hang or an Aborted echo.
TEST_F(MultiRankTrainTest, OneFailingRankFailsTheRunWithItsError) {
  // A 16-row table under a 32-token vocab.
  testing::PlanBuilder p = testing::oneLayerPlan(16, 8, 4, 1, 1);
  setMesh(p, 2, 1);
  p.manifest["model"]["vocab_size"] = 32;
  json& opt = p.ops("optimizer");
  const json reduce = {{"op", "all_reduce"}, {"args", {{"x", {kDwte, kDlm}}}}, {"attrs", {{"axis", "dp"}, {"op", "avg"}}}};
  opt.insert(opt.begin(), reduce);
  // Sample 0 (rank 0) reads tokens 0..4, sample 1 (rank 1) tokens 4..8: only rank 1 sees ids >= 16.
  std::vector<uint16_t> t = {1, 2, 3, 4, 5, 20, 21, 22, 23, 24, 1, 2};
  ASSERT_TRUE(writeTokenFile(path("tokens.bin"), t.data(), int64_t(t.size())).isOk());
  RunOptions o = options(planDir(p, "fail"), 1);
  o.data = path("tokens.bin");
  o.collectiveTimeoutSeconds = 60;
  const auto t0 = std::chrono::steady_clock::now();
  Status s = run(o);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.code(), StatusCode::kAborted) << s.message();
  for (const char* part : {"rank 1: ", "embedding_fwd", "step 0"})
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " in: " << s.message();
}

// The collective ops and the split gradient norm (grad_norm_sq, an f64 all_reduce, grad_norm_clip)
// through interpreters on a tp=2 mesh (dp=2, rank order dp fastest, so tp groups are {0, 2} and {1, 3}).
TEST_F(MultiRankTrainTest, InterpreterRunsCollectivesOverTheOpsAxisGroup) {
  testing::PlanBuilder b(8, 3, 2, 1);
  setMesh(b, 2, 2, {"dp", "tp", "pp"});
  const int64_t x = b.buffer("x", "activation", {2, 3}), y = b.buffer("y", "activation", {2, 6});
  const int64_t rs = b.buffer("rs", "activation", {2, 3}), ar = b.buffer("ar", "activation", {4});
  const int64_t g = b.buffer("g", "grad", {2}), gs = b.buffer("gs", "grad", {3}), norm = b.buffer("grad_norm", "metric", {});
  b.op("s", "all_gather", {{"x", x}, {"y", y}}, {{"axis", "tp"}, {"outer", 2}, {"inner", 3}});
  b.op("s", "reduce_scatter", {{"x", y}, {"y", rs}}, {{"axis", "tp"}, {"outer", 2}, {"inner", 3}, {"op", "sum"}});
  b.op("s", "all_reduce", {{"x", {ar}}}, {{"axis", "dp"}, {"op", "max"}});
  const int64_t sharded = b.buffer("sharded_sq", "scratch", {1}, "f64"), sq = b.buffer("sq", "scratch", {1}, "f64");
  b.op("s", "grad_norm_sq", {{"grads", {gs}}, {"sq", sharded}});
  b.op("s", "all_reduce", {{"x", {sharded}}}, {{"axis", "tp"}, {"op", "sum"}});
  b.op("s", "grad_norm_sq", {{"grads", {g}}, {"add", sharded}, {"sq", sq}});
  b.op("s", "grad_norm_clip", {{"sq", sq}, {"grads", {g, gs}}, {"norm", norm}}, {{"max_norm", 1.0}});
  b.action("s");
  Plan plan;
  auto m = parseManifest(b.manifest.dump(), "manifest.json");
  ASSERT_TRUE(m.isOk()) << m.status().message();
  plan.manifest = m.value();
  auto prog = parseProgram(b.program.dump(), "program-0.json", plan.manifest);
  ASSERT_TRUE(prog.isOk()) << prog.status().message();
  plan.programs.push_back(std::move(prog).value());

  InProcessCommunicatorOptions co;
  co.worldSize = 4;
  co.mesh = plan.manifest.mesh();
  auto comm = makeInProcessCommunicator(co);
  std::vector<std::unique_ptr<Backend>> be(4);
  std::vector<std::unique_ptr<Interpreter>> in(4);
  for (int r = 0; r < 4; ++r) {
    CpuBackendOptions bo;
    bo.rank = r;
    bo.communicator = comm.get();
    be[size_t(r)] = makeCpuBackend(bo);
    auto i = Interpreter::create(plan, 0, *be[size_t(r)], r);
    ASSERT_TRUE(i.isOk()) << i.status().message();
    in[size_t(r)] = std::move(i).value();
  }
  std::vector<Status> st(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r)
    threads.emplace_back([&, r] {
      Interpreter& it = *in[size_t(r)];
      std::vector<float> xv(6), arv(4, float(r)), gv = {3.0f, 0.0f}, gsv(3, 0.0f);
      for (int k = 0; k < 6; ++k) xv[size_t(k)] = float(10 * r + k);
      gsv[0] = r < 2 ? 4.0f : 12.0f;  // tp member 0 holds 4, member 1 holds 12: norm sqrt(9+16+144) = 13
      for (auto [id, v] : {std::pair{x, &xv}, std::pair{ar, &arv}, std::pair{g, &gv}, std::pair{gs, &gsv}}) {
        Status w = it.writeBuffer(id, v->data());
        if (!w.isOk()) { st[size_t(r)] = w; return; }
      }
      st[size_t(r)] = it.runSubroutine(0, 0, -1, 0.0, nullptr);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 4; ++r) ASSERT_TRUE(st[size_t(r)].isOk()) << r << ": " << st[size_t(r)].message();
  for (int r = 0; r < 4; ++r) {
    const std::vector<int> grp = plan.manifest.mesh().group(r, MeshAxis::kTp);
    ASSERT_EQ(grp.size(), 2u);
    EXPECT_EQ(grp[0], r % 2);
    const auto yv = in[size_t(r)]->readF32(y).value();
    for (int o = 0; o < 2; ++o)
      for (int mb = 0; mb < 2; ++mb)
        for (int k = 0; k < 3; ++k) EXPECT_EQ(yv[size_t(o * 6 + mb * 3 + k)], float(10 * grp[size_t(mb)] + o * 3 + k));
    // reduce_scatter of the gathered y: member c gets Σ_m y[o, c·3 + k] = 2 · x_c[o, k].
    const auto rsv = in[size_t(r)]->readF32(rs).value();
    for (int k = 0; k < 6; ++k) EXPECT_EQ(rsv[size_t(k)], 2.0f * float(10 * r + k));
    const auto arv = in[size_t(r)]->readF32(ar).value();
    EXPECT_EQ(arv[0], float(r | 1));  // dp groups {0, 1} and {2, 3}
    EXPECT_FLOAT_EQ(in[size_t(r)]->readF32(norm).value()[0], 13.0f);
    const float coef = float(std::min(1.0, 1.0 / (13.0 + 1e-6)));
    EXPECT_FLOAT_EQ(in[size_t(r)]->readF32(g).value()[0], 3.0f * coef);
    EXPECT_FLOAT_EQ(in[size_t(r)]->readF32(gs).value()[0], (r < 2 ? 4.0f : 12.0f) * coef);
  }
}

// launcherOf (Train.h): which environment says this process is one of several. srun is recognized
// by its variables alone here (no Slurm on the CI machine).
TEST(LauncherTest, RecognizesMpirunPmiAndSrunByTheirEnvironment) {
  const char* vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS", "SLURM_PROCID"};
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  for (const char* v : vars) {
    const char* now = std::getenv(v);
    saved.emplace_back(v, now ? std::optional<std::string>(now) : std::nullopt);
    unsetenv(v);
  }
  EXPECT_EQ(launcherOf(), std::nullopt);
  setenv("SLURM_STEP_NUM_TASKS", "4", 1);  // without SLURM_PROCID: a Slurm job step, not an srun task
  EXPECT_EQ(launcherOf(), std::nullopt);
  setenv("SLURM_PROCID", "2", 1);
  EXPECT_EQ(launcherOf(), std::optional<std::string>("SLURM_STEP_NUM_TASKS=4"));
  unsetenv("SLURM_STEP_NUM_TASKS");
  unsetenv("SLURM_PROCID");
  setenv("PMI_SIZE", "8", 1);
  EXPECT_EQ(launcherOf(), std::optional<std::string>("PMI_SIZE=8"));
  setenv("OMPI_COMM_WORLD_SIZE", "1", 1);  // a world of one process runs alone; PMI_SIZE still says 8
  EXPECT_EQ(launcherOf(), std::optional<std::string>("PMI_SIZE=8"));
  unsetenv("PMI_SIZE");
  EXPECT_EQ(launcherOf(), std::nullopt);
  setenv("OMPI_COMM_WORLD_SIZE", "x", 1);
  EXPECT_EQ(launcherOf(), std::nullopt);
  for (const auto& [v, value] : saved) {
    if (value) setenv(v.c_str(), value->c_str(), 1);
    else unsetenv(v.c_str());
  }
}

}  // namespace
}  // namespace llcdist::rt
