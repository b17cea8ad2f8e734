// ZeRO plans end to end (docs/plan-format.md "ZeRO plans"): a ZeRO-3 rank's param block holds exactly
// the unsharded model's values at its global indices (with and without a tp sharding); --save-params
// gathers blocks and shards back into the same file as the unsharded plan, and --init-from then
// --save-params (0 steps) gives back the input bit for bit, for every stage on dp = 2 and 4 and dp × tp;
// replicas of one block (and, for stages 1/2, every dp rank's whole copy) must agree bitwise; pipeline
// placements hold the blocks of each copy; and the one-layer LM trained with ZeRO 1, 2 or 3 over dp
// matches the single-rank plan of the same global batch. ZeRO over the set dp+cp (context parallelism)
// likewise, and its checkpoints resume on other meshes.
#include "PipelineTestUtil.h"
#include "TestUtil.h"
#include "ZeroTestUtil.h"
#include "train/TrainParts.h"

#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Plan.h"
#include "llcdist/runtime/Rng.h"
#include "llcdist/runtime/Safetensors.h"
#include "llcdist/runtime/Train.h"

#include <cmath>
#include <cstring>
#include <tuple>

namespace llcdist::rt {
namespace {

using testing::json;
namespace fs = std::filesystem;

constexpr uint64_t kSeed = 17;

class ZeroTrainTest : public testing::TrainFixture {
protected:
  ZeroTrainTest() : TrainFixture(kSeed) {}
  static std::string bytes(const std::string& file) {
    std::ifstream f(file, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), {});
  }
  std::string saveAfter(const std::string& plan, int64_t steps, const std::string& initFrom = "") {
    RunOptions o = options(plan, steps);
    o.initFrom = initFrom;
    o.saveParams = path("out.safetensors");
    Status s = run(o);
    EXPECT_TRUE(s.isOk()) << s.message();
    return bytes(o.saveParams);
  }
};

// The global flat index of element `localFlat` of tp member m's shard of `p` (2-D params sharded on dim
// 0 or 1 with blocks; 1-D ones are never sharded here), written out independently of the runtime.
int64_t globalIndex(const testing::ZeroTestParam& p, int64_t m, int64_t tp, int64_t localFlat) {
  if (p.shape.size() == 1) return localFlat;
  const std::vector<int64_t> local = testing::localShapeOf(p, tp);
  int64_t idx[2] = {localFlat / local[1], localFlat % local[1]};
  if (!p.sharding.is_null()) {
    const int64_t d = p.sharding["dim"], blocks = p.sharding.value("blocks", int64_t(1));
    const int64_t chunk = p.shape[size_t(d)] / (blocks * tp);
    const int64_t j = idx[d];
    idx[d] = (j / chunk) * tp * chunk + m * chunk + j % chunk;  // block j/chunk, member m's chunk in it
  }
  return idx[0] * p.shape[1] + idx[1];
}

struct Layout {
  int64_t dp, tp;
  bool shard;
  std::vector<std::string> order;
  bool padded = false;  // zeroTestParams' padded shapes: some blocks end in padding
  int64_t cp = 1;       // > 1: ZeRO over "dp+cp"
  std::string name() const {
    return "dp" + std::to_string(dp) + "tp" + std::to_string(tp) + (shard ? "s" : "") + (order.empty() ? "" : "o") +
           (padded ? "p" : "") + (cp > 1 ? "cp" + std::to_string(cp) : "");
  }
};
const std::vector<Layout>& layouts() {
  static const std::vector<Layout> l = {{2, 1, false, {}},
                                        {4, 1, false, {}},
                                        {2, 2, true, {}},
                                        {2, 2, true, {"dp", "tp", "pp"}},
                                        {2, 2, false, {}},
                                        {2, 1, false, {}, true},
                                        {4, 1, false, {}, true},
                                        {4, 2, true, {}, true},
                                        // ZeRO over dp+cp: the default order (tp, cp, dp, pp), dp fastest, padded
                                        // blocks, and dp = 1 (the set is then the cp group).
                                        {2, 2, true, {}, false, 2},
                                        {2, 2, true, {"dp", "cp", "tp", "pp"}, false, 2},
                                        {2, 1, false, {}, true, 2},
                                        {1, 1, false, {}, false, 2}};
  return l;
}

// The ZeRO block of `rank`: its index among the ranks with its tp coordinate (pp = 1 here), in rank order
// (the dp group, or the dp+cp one), counted here from the single-axis coordinates.
int64_t zeroMemberOf(const Mesh& mesh, int rank) {
  int64_t c = 0;
  for (int q = 0; q < rank; ++q) c += mesh.coord(q, MeshAxis::kTp) == mesh.coord(rank, MeshAxis::kTp);
  return c;
}

// wte's init.zero_row (torch's nn.Embedding(padding_idx)): row 11 of 16 starts at zero, on the second
// vocabulary shard where wte is split over tp = 2, in whichever block holds it.
constexpr int64_t kWteZeroRow = 11;

TEST_F(ZeroTrainTest, InitOfABlockIsTheUnshardedParamByGlobalIndex) {
  for (int64_t stage : {1, 2, 3})
    for (const Layout& l : layouts()) {
      SCOPED_TRACE("stage " + std::to_string(stage) + " " + l.name());
      testing::PlanBuilder b = testing::zeroParamsPlan({l.dp, l.tp, stage, l.shard, l.order, l.padded, l.cp});
      ASSERT_EQ(b.manifest["params"][0]["name"], "transformer.wte.weight");
      b.manifest["params"][0]["init"]["zero_row"] = kWteZeroRow;
      const fs::path d = dir / ("s" + std::to_string(stage) + l.name());
      fs::create_directories(d);
      b.write(d);
      auto plan = loadPlan(d.string());
      ASSERT_TRUE(plan.isOk()) << plan.status().message();
      const Manifest& m = plan->manifest;
      const Mesh mesh = m.mesh();
      const std::vector<testing::ZeroTestParam> params = testing::zeroTestParams(l.shard, l.padded);
      for (int r = 0; r < int(m.worldSize()); ++r) {
        auto backend = makeCpuBackend();
        auto interp = Interpreter::create(*plan, 0, *backend, r);
        ASSERT_TRUE(interp.isOk()) << interp.status().message();
        ASSERT_TRUE(train::initParams(m, **interp, kSeed, "").isOk());
        const int64_t tpMember = mesh.coord(r, MeshAxis::kTp), zeroMember = zeroMemberOf(mesh, r), n = l.dp * l.cp;
        if (l.cp > 1) {
          EXPECT_EQ(zeroMember, mesh.coord(r, *parseAxisSet("dp+cp")));
        }
        for (size_t i = 0; i < params.size(); ++i) {
          const testing::ZeroTestParam& p = params[i];
          int64_t numel = 1;
          for (int64_t s : p.shape) numel *= s;
          std::vector<float> full(static_cast<size_t>(numel));
          initNormal(full.data(), kSeed, p.name, 0, numel, float(p.std));
          const std::vector<float> got = (*interp)->readF32(m.params[i].buffer).value();
          int64_t local = 1;
          for (int64_t s : testing::localShapeOf(p, l.tp)) local *= s;
          const bool block = p.zero && stage == 3;  // the value buffer holds member c's rows only
          // A block has ceil(rows / n) rows; those past the local tensor's last row are zero padding.
          const int64_t rows = testing::localShapeOf(p, l.tp)[0], blockN = (rows + n - 1) / n * (local / rows);
          ASSERT_EQ(int64_t(got.size()), block ? blockN : local) << p.name;
          const int64_t first = block ? zeroMember * blockN : 0;
          const int64_t pm = p.sharding.is_null() ? 0 : tpMember;
          for (size_t e = 0; e < got.size(); ++e) {
            if (first + int64_t(e) >= local) {
              ASSERT_EQ(got[e], 0.0f) << p.name << " rank " << r << " padding element " << e;
              continue;
            }
            const int64_t g = globalIndex(p, pm, l.tp, first + int64_t(e));
            if (i == 0 && g / p.shape[1] == kWteZeroRow) {
              ASSERT_EQ(got[e], 0.0f) << p.name << " rank " << r << " element " << e << " (global " << g << ")";
              continue;
            }
            ASSERT_EQ(std::memcmp(&got[e], &full[size_t(g)], 4), 0)
                << p.name << " rank " << r << " element " << e << " (global " << g << ")";
          }
        }
      }
    }
}

TEST_F(ZeroTrainTest, SaveGathersBlocksAndInitFromRoundTrips) {
  // Padded blocks too: the save strips the padding, --init-from fills only the real rows.
  for (bool padded : {false, true}) {
    const std::string tag = padded ? "p" : "";
    const std::string ref = saveAfter(planDir(testing::zeroParamsPlan({1, 1, 0, false, {}, padded}), "ref" + tag), 0);
    ASSERT_FALSE(ref.empty());
    // An input file of other values: every tensor random.
    std::vector<std::vector<float>> in;
    std::vector<TensorToWrite> tensors;
    uint32_t seed = 1;
    for (const testing::ZeroTestParam& p : testing::zeroTestParams(false, padded)) {
      int64_t n = 1;
      for (int64_t s : p.shape) n *= s;
      in.push_back(testing::randn(n, seed++));
    }
    {
      size_t k = 0;
      for (const testing::ZeroTestParam& p : testing::zeroTestParams(false, padded))
        tensors.push_back({p.name, DType::kF32, p.shape, in[k++].data()});
    }
    const std::string input = path("in" + tag + ".safetensors");
    ASSERT_TRUE(writeSafetensors(input, tensors, {{"format", "pt"}}).isOk());
    for (int64_t stage : {1, 2, 3})
      for (const Layout& l : layouts()) {
        if (l.padded != padded) continue;
        SCOPED_TRACE("stage " + std::to_string(stage) + " " + l.name());
        const std::string plan = planDir(testing::zeroParamsPlan({l.dp, l.tp, stage, l.shard, l.order, l.padded, l.cp}),
                                         "s" + std::to_string(stage) + l.name());
        // Init by global index: the gathered file is the unsharded plan's, byte for byte; after a step too
        // (the step only zeroes the loss; the save checks every replica of every block).
        EXPECT_EQ(saveAfter(plan, 0), ref);
        EXPECT_EQ(saveAfter(plan, 1), ref);
        // --init-from slices each rank's block of its shard; the save gathers them back exactly.
        const std::string back = saveAfter(plan, 0, input);
        EXPECT_EQ(back, bytes(input));
        const auto got = readAll(path("out.safetensors"));
        size_t k = 0;
        for (const testing::ZeroTestParam& p : testing::zeroTestParams(false, padded)) {
          ASSERT_EQ(got.at(p.name).size(), in[k].size());
          EXPECT_EQ(std::memcmp(got.at(p.name).data(), in[k].data(), in[k].size() * 4), 0) << p.name;
          ++k;
        }
      }
  }
}

// A plan whose step writes rank-dependent values into a ZeRO param through shard_slice: `src` (a plain
// replicated param [2, 2·inner·...]) is sliced over `axis` into the param's value buffer, so the
// members of `axis` end up with different values there.
testing::PlanBuilder divergingPlan(int64_t stage, int64_t dp, int64_t tp, const std::string& axis) {
  testing::PlanBuilder p(16, 4, 1, 1);
  testing::setMesh(p, dp, tp);
  p.manifest["features"] = {"zero"};
  // "w" [4, 4] with ZeRO over dp: its value buffer is [4/dp, 4] under stage 3, else [4, 4].
  const std::vector<int64_t> held = stage >= 3 ? std::vector<int64_t>{4 / dp, 4} : std::vector<int64_t>{4, 4};
  const int64_t heldN = held[0] * held[1];
  const int64_t n = axis == "dp" ? dp : tp;
  const int64_t w = p.buffer("w", "param", held), dw = p.buffer("w.grad", "grad", stage >= 2 ? std::vector<int64_t>{4 / dp, 4} : std::vector<int64_t>{4, 4});
  const int64_t src = p.buffer("src", "param", {n * heldN}), dsrc = p.buffer("src.grad", "grad", {n * heldN});
  const int64_t loss = p.buffer("loss", "metric", {1});
  p.param("w", {4, 4}, w, dw, {{"kind", "normal"}, {"std", 1.0}}, true);
  p.manifest["params"][0]["zero"] = {{"axis", "dp"}, {"stage", stage}};
  p.param("src", {n * heldN}, src, dsrc, {{"kind", "normal"}, {"std", 1.0}}, false);
  p.op("step_begin", "fill_zero", {{"x", {loss}}});
  p.op("step_begin", "shard_slice", {{"x", src}, {"y", w}}, {{"axis", axis}, {"outer", 1}, {"inner", heldN}});
  p.action("step_begin");
  return p;
}

TEST_F(ZeroTrainTest, DivergedReplicasOfABlockAreReportedAtSave) {
  // Stage 3 on dp = 2 × tp = 2: the tp members with one dp coordinate hold the same block of "w" and
  // must agree; slicing over tp makes them differ.
  {
    RunOptions o = options(planDir(divergingPlan(3, 2, 2, "tp"), "s3"), 1);
    o.saveParams = path("s3.safetensors");
    Status s = run(o);
    ASSERT_FALSE(s.isOk());
    for (const char* part : {"--save-params", "param 'w'", "rank 1", "rank 0", "ZeRO block 0", "diverged"})
      EXPECT_NE(s.message().find(part), std::string::npos) << part << " in: " << s.message();
    EXPECT_FALSE(fs::exists(o.saveParams));
  }
  // Stage 3 on dp = 2 alone: every rank holds another block; different values are no divergence.
  {
    RunOptions o = options(planDir(divergingPlan(3, 2, 1, "dp"), "s3dp"), 1);
    o.saveParams = path("s3dp.safetensors");
    Status s = run(o);
    EXPECT_TRUE(s.isOk()) << s.message();
  }
  // Stages 1 and 2 keep the whole param on every dp rank: those copies must agree as without ZeRO.
  for (int64_t stage : {1, 2}) {
    RunOptions o = options(planDir(divergingPlan(stage, 2, 1, "dp"), "s" + std::to_string(stage)), 1);
    o.saveParams = path("s12.safetensors");
    Status s = run(o);
    ASSERT_FALSE(s.isOk()) << stage;
    for (const char* part : {"param 'w'", "rank 1's copy differs from rank 0's"})
      EXPECT_NE(s.message().find(part), std::string::npos) << part << " in: " << s.message();
    EXPECT_EQ(s.message().find("ZeRO block"), std::string::npos) << s.message();
  }
}

// Pipeline placements: a params-only two-stage plan over dp = 2 with ZeRO-3 blocks, wte tied across the
// stages (both copies hold the dp block of their rank), w1 on stage 0 and lm_head on stage 1.
testing::MultiProgramPlan zeroPipelinePlan() {
  testing::MultiProgramPlan plan;
  testing::PlanBuilder s0(16, 4, 1, 1), s1(16, 4, 1, 1);
  testing::setMesh(s0, 2, 1);
  plan.manifest = s0.manifest;
  plan.manifest["mesh"]["pp"] = 2;
  plan.manifest["features"] = {"pipeline", "zero"};
  plan.manifest["programs"] = {{{"file", "program-0.json"}, {"ranks", {0, 1}}, {"stage", 0}},
                               {{"file", "program-1.json"}, {"ranks", {2, 3}}, {"stage", 1}}};
  auto pair = [](testing::PlanBuilder& b, const std::string& name, std::vector<int64_t> block) {
    return std::pair{b.buffer(name, "param", block), b.buffer(name + ".grad", "grad", block)};
  };
  const auto wte0 = pair(s0, "wte", {8, 4}), w1 = pair(s0, "w1", {2, 4});
  const auto wte1 = pair(s1, "wte", {8, 4}), lm = pair(s1, "lm", {8, 4});
  const int64_t loss = s1.buffer("loss", "metric", {1});
  s0.op("step_begin", "fill_zero", {{"x", {wte0.second}}});
  s1.op("step_begin", "fill_zero", {{"x", {loss}}});
  s0.action("step_begin");
  s1.action("step_begin");
  auto param = [](const std::string& name, std::vector<int64_t> shape, json placements) {
    return json{{"name", name}, {"shape", shape}, {"dtype", "f32"}, {"placements", std::move(placements)},
                {"init", {{"kind", "normal"}, {"std", 0.5}}}, {"weight_decay", false},
                {"zero", {{"axis", "dp"}, {"stage", 3}}}};
  };
  auto at = [](int64_t program, std::pair<int64_t, int64_t> b) {
    return json{{"program", program}, {"buffer", b.first}, {"grad", b.second}};
  };
  plan.manifest["params"] =
      json::array({param("transformer.wte.weight", {16, 4}, json::array({at(0, wte0), at(1, wte1)})),
                   param("h.0.w1.weight", {4, 4}, json::array({at(0, w1)})),
                   param("lm_head.weight", {16, 4}, json::array({at(1, lm)}))});
  plan.programs = {std::move(s0), std::move(s1)};
  return plan;
}

TEST_F(ZeroTrainTest, PipelinePlacementsHoldTheirBlocks) {
  // The reference: the same three params whole, on one rank.
  testing::PlanBuilder r(16, 4, 1, 1);
  for (auto [name, shape] : {std::pair{"transformer.wte.weight", std::vector<int64_t>{16, 4}},
                             std::pair{"h.0.w1.weight", std::vector<int64_t>{4, 4}},
                             std::pair{"lm_head.weight", std::vector<int64_t>{16, 4}}}) {
    const int64_t v = r.buffer(name, "param", shape), g = r.buffer(std::string(name) + ".grad", "grad", shape);
    r.param(name, shape, v, g, {{"kind", "normal"}, {"std", 0.5}}, false);
  }
  r.op("step_begin", "fill_zero", {{"x", {r.buffer("loss", "metric", {1})}}});
  r.action("step_begin");
  const std::string ref = saveAfter(planDir(r, "ref"), 0);
  ASSERT_FALSE(ref.empty());
  const fs::path d = dir / "pipe";
  fs::create_directories(d);
  zeroPipelinePlan().write(d);
  EXPECT_EQ(saveAfter(d.string(), 0), ref);
  EXPECT_EQ(saveAfter(d.string(), 1), ref);
  std::vector<float> wte = testing::randn(64, 7), w1 = testing::randn(16, 8), lm = testing::randn(64, 9);
  ASSERT_TRUE(writeSafetensors(path("in.safetensors"), {{"transformer.wte.weight", DType::kF32, {16, 4}, wte.data()},
                                                        {"h.0.w1.weight", DType::kF32, {4, 4}, w1.data()},
                                                        {"lm_head.weight", DType::kF32, {16, 4}, lm.data()}},
                               {{"format", "pt"}})
                  .isOk());
  EXPECT_EQ(saveAfter(d.string(), 0, path("in.safetensors")), bytes(path("in.safetensors")));
}

// The one-layer LM with ZeRO stage 1, 2 or 3 over dp, or over dp+cp (cp = 2: each rank holds half of
// every sample's positions), trains like the single-rank plan of the same global batch (8 sequences per
// step): losses, grad norms and the gathered params within 1e-5.
TEST_F(ZeroTrainTest, ZeroPlansTrainLikeTheSingleRankPlan) {
  const int64_t B = 2, G = 4;  // microbatches of the single-rank plan
  RunResult want;
  {
    RunOptions o = options(planDir(testing::oneLayerPlan(32, 16, 8, B, G), "ref"), 3);
    o.saveParams = path("ref.safetensors");
    Status s = run(o, &want);
    ASSERT_TRUE(s.isOk()) << s.message();
  }
  const auto ref = readAll(path("ref.safetensors"));
  for (auto [stage, dp, cp] : {std::tuple{3, 2, 1}, std::tuple{1, 2, 1}, std::tuple{2, 2, 1}, std::tuple{3, 4, 1},
                               std::tuple{3, 2, 2}, std::tuple{1, 2, 2}, std::tuple{2, 1, 2}}) {
    SCOPED_TRACE("ZeRO-" + std::to_string(stage) + " dp " + std::to_string(dp) + " cp " + std::to_string(cp));
    const std::string name = "z" + std::to_string(stage) + "dp" + std::to_string(dp) + "cp" + std::to_string(cp);
    RunOptions o = options(planDir(testing::zeroOneLayerPlan(stage, dp, B, G / dp, cp), name), 3);
    o.saveParams = path(name + ".safetensors");
    RunResult got;
    Status s = run(o, &got);
    ASSERT_TRUE(s.isOk()) << s.message();
    ASSERT_EQ(got.steps.size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_NEAR(got.steps[k].loss, want.steps[k].loss, 1e-5 * std::abs(want.steps[k].loss)) << "step " << k;
      EXPECT_NEAR(got.steps[k].gradNorm, want.steps[k].gradNorm, 1e-5 * want.steps[k].gradNorm) << "step " << k;
    }
    EXPECT_LT(want.steps[2].loss, want.steps[0].loss);  // it learns
    const auto params = readAll(o.saveParams);
    ASSERT_EQ(params.size(), ref.size());
    for (const auto& [pname, w] : ref) {
      const std::vector<float>& v = params.at(pname);
      ASSERT_EQ(v.size(), w.size());
      double worst = 0;
      for (size_t i = 0; i < v.size(); ++i)
        worst = std::max(worst, std::abs(double(v[i]) - w[i]) / std::max(1e-2, std::abs(double(w[i]))));
      EXPECT_LT(worst, 1e-5) << pname;
    }
  }
}

// A checkpoint of a ZeRO-over-dp+cp run (dp = 2, cp = 2: blocks of the dp+cp member index) resumes like
// one over dp: on the same plan bitwise the uninterrupted run, and on ZeRO-3 over dp = 4 and on one rank
// within 1e-5 of it; a single-rank checkpoint resumes on the dp+cp plan alike.
TEST_F(ZeroTrainTest, DpCpCheckpointsResumeOnOtherMeshes) {
  const int64_t B = 2, G = 4;
  const std::string dpcp = planDir(testing::zeroOneLayerPlan(3, 2, B, G / 2, 2), "dpcp");
  const std::string dp4 = planDir(testing::zeroOneLayerPlan(3, 4, B, G / 4), "dp4");
  const std::string single = planDir(testing::oneLayerPlan(32, 16, 8, B, G), "single");
  // Runs `plan` to step 3, from `resume` when given (saving a checkpoint after step 2 when `save`).
  auto runTo3 = [&](const std::string& plan, const std::string& name, const std::string& resume, bool save,
                    RunResult* res) {
    RunOptions o = options(plan, 3);
    o.saveParams = path(name + ".safetensors");
    o.resume = resume;
    if (save) {
      o.checkpointDir = path(name + ".ckpt");
      o.checkpointEvery = 2;
    }
    Status s = run(o, res);
    EXPECT_TRUE(s.isOk()) << name << ": " << s.message();
    return o.saveParams;
  };
  auto expectClose = [&](const std::string& file, const std::string& ref, double tol) {
    const auto got = readAll(file), want = readAll(ref);
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [pname, w] : want) {
      const std::vector<float>& v = got.at(pname);
      ASSERT_EQ(v.size(), w.size());
      double worst = 0;
      for (size_t i = 0; i < v.size(); ++i)
        worst = std::max(worst, std::abs(double(v[i]) - w[i]) / std::max(1e-2, std::abs(double(w[i]))));
      EXPECT_LT(worst, tol) << pname << " in " << file;
    }
  };
  RunResult full, single3;
  const std::string fullFile = runTo3(dpcp, "dpcp", "", true, &full);
  const std::string singleFile = runTo3(single, "single", "", true, &single3);
  ASSERT_TRUE(fs::exists(path("dpcp.ckpt")));
  ASSERT_EQ(full.steps.size(), 3u);
  for (auto [plan, name] : {std::pair{dpcp, "same"}, std::pair{dp4, "dp4"}, std::pair{single, "one"}}) {
    SCOPED_TRACE(name);
    RunResult r;
    const std::string file = runTo3(plan, name, path("dpcp.ckpt"), false, &r);
    ASSERT_EQ(r.steps.size(), 1u);  // step 3 only
    if (std::string(name) == "same") {
      EXPECT_EQ(bytes(file), bytes(fullFile));
      EXPECT_EQ(r.steps[0].loss, full.steps[2].loss);
    } else {
      expectClose(file, fullFile, 1e-5);
      EXPECT_NEAR(r.steps[0].loss, full.steps[2].loss, 1e-5 * std::abs(full.steps[2].loss));
    }
  }
  RunResult r;
  expectClose(runTo3(dpcp, "fromOne", path("single.ckpt"), false, &r), singleFile, 1e-5);
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_NEAR(r.steps[0].loss, single3.steps[2].loss, 1e-5 * std::abs(single3.steps[2].loss));
}

}  // namespace
}  // namespace llcdist::rt
