// The plan loader on pipeline plans (docs/plan-format.md "Pipeline plans"): the feature, one program
// per stage with exactly that stage's ranks, params placed by "placements", send/recv attrs and
// the stage norm (grad_norm_sq, all_reduce over pp, grad_norm_clip). Every error names the file and the JSON path.
#include "PipelineTestUtil.h"

#include "llcdist/runtime/Plan.h"

#include <algorithm>
#include <functional>
#include <string>

namespace llcdist::rt {
namespace {

using testing::json;
using testing::MultiProgramPlan;
using testing::TinyLm;

// Buffer ids of tinyLmPipeline. Stage 0: wte 0/1/2, w1 3/4/5, ids 6, targets 7, h 8, h2 9, dh 10,
// dh2 11, grad_norm 12 (tied: the peer gradient 13). Stage 1: head 0/1/2, ids 3, targets 4, h2 5,
// dh2 6, logits 7, loss 8, grad_norm 9. Subroutines: 0 step_begin, 1 forward, 2 backward, 3 optimizer.
constexpr int kS1Logits = 7, kS1Ids = 3;

class PipelinePlanTest : public testing::TempDirTest {
protected:
  Status load(const MultiProgramPlan& p) {
    p.write(dir);
    return loadPlan(dir.string()).status();
  }
  // Builds the pipeline for `cfg`, applies `mutate` and expects a load error containing every part.
  void expectError(const TinyLm& cfg, const std::function<void(MultiProgramPlan&)>& mutate,
                   const std::vector<std::string>& parts) {
    MultiProgramPlan p = testing::tinyLmPipeline(cfg);
    mutate(p);
    Status s = load(p);
    ASSERT_FALSE(s.isOk()) << "expected an error containing '" << parts[0] << "'";
    for (const std::string& part : parts) EXPECT_NE(s.message().find(part), std::string::npos) << part << " in: " << s.message();
  }
  void expectError(const std::function<void(MultiProgramPlan&)>& mutate, const std::vector<std::string>& parts) {
    expectError(TinyLm{}, mutate, parts);
  }
  static TinyLm tied() {
    TinyLm c;
    c.tied = true;
    return c;
  }
  static TinyLm dp2() {
    TinyLm c;
    c.dp = 2;
    return c;
  }
};

TEST_F(PipelinePlanTest, ValidTwoStagePlanLoads) {
  for (bool isTied : {false, true}) {
    TinyLm c = isTied ? tied() : TinyLm{};
    c.dp = 2;
    testing::tinyLmPipeline(c).write(dir);
    auto plan = loadPlan(dir.string());
    ASSERT_TRUE(plan.isOk()) << plan.status().message();
    const Manifest& m = plan->manifest;
    EXPECT_TRUE(m.hasFeature("pipeline"));
    EXPECT_EQ(m.meshPp, 2);
    ASSERT_EQ(plan->programs.size(), 2u);
    EXPECT_EQ(m.programs[1].stage, 1);
    EXPECT_EQ(m.programs[1].ranks, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(m.programOfRank(1), 0);
    EXPECT_EQ(m.programOfRank(2), 1);
    EXPECT_EQ(m.programOfRank(4), -1);
    // wte: placed in program 0 (and program 1 when tied); buffer/grad mirror placements[0].
    const ParamDesc& wte = m.params[0];
    EXPECT_FALSE(wte.legacyBufferGrad);
    ASSERT_EQ(wte.placements.size(), isTied ? 2u : 1u);
    EXPECT_EQ(wte.placements[0].program, 0);
    EXPECT_EQ(wte.buffer, 0);
    EXPECT_EQ(wte.grad, 1);
    ASSERT_NE(wte.placementIn(0), nullptr);
    EXPECT_EQ(wte.placementIn(1) != nullptr, isTied);
    if (isTied) {
      EXPECT_EQ(wte.placements[1].program, 1);
      EXPECT_EQ(wte.placements[1].buffer, 0);
      EXPECT_EQ(wte.placements[1].grad, 1);
    }
    // Stage 0's forward ends with the send; stage 1's forward recvs.
    const Op& send = plan->programs[0].subroutines[1].ops[3];
    EXPECT_EQ(send.kind, schema::OpKind::kSend);
    EXPECT_EQ(send.intAttr("peer", -1), 1);
    EXPECT_EQ(send.intAttr("tag", -1), 0);
    EXPECT_EQ(send.stringAttr("axis"), "pp");
    const Op& recv = plan->programs[1].subroutines[1].ops[1];
    EXPECT_EQ(recv.kind, schema::OpKind::kRecv);
    EXPECT_EQ(recv.intAttr("peer", -1), 0);
    const std::vector<Op>& opt = plan->programs[1].subroutines[3].ops;
    const auto it = std::find_if(opt.begin(), opt.end(), [](const Op& o) { return o.kind == schema::OpKind::kGradNormClip; });
    ASSERT_NE(it, opt.end());
    ASSERT_GE(it - opt.begin(), 2);
    const Op& norm = *it;
    const Op& overStages = *(it - 1);  // the squared norm's all_reduce over the stages
    EXPECT_EQ(overStages.kind, schema::OpKind::kAllReduce);
    EXPECT_EQ(overStages.stringAttr("axis"), "pp");
    EXPECT_EQ(overStages.argList("x"), std::vector<int64_t>{norm.arg("sq")});
    EXPECT_EQ((it - 2)->kind, schema::OpKind::kGradNormSq);
    EXPECT_EQ(norm.argList("grads").empty(), isTied);  // grads is optional: a stage may count none
    // Stage 0 has no loss buffer: that is fine (only the last stage reports it).
    EXPECT_LT(plan->programs[0].findBuffer("loss"), 0);
  }
}

// The single-program spelling still works, and placements work in a single-program plan too; a plan
// may list "pipeline" with pp = 1.
TEST_F(PipelinePlanTest, PlacementsAndFeatureInSingleProgramPlans) {
  testing::PlanBuilder b = testing::tinyLmSingle(TinyLm{});
  b.write(dir);
  auto plan = loadPlan(dir.string());
  ASSERT_TRUE(plan.isOk()) << plan.status().message();
  EXPECT_TRUE(plan->manifest.params[0].legacyBufferGrad);
  ASSERT_EQ(plan->manifest.params[0].placements.size(), 1u);
  EXPECT_EQ(plan->manifest.params[0].placements[0].program, 0);
  EXPECT_EQ(plan->manifest.params[0].placements[0].buffer, plan->manifest.params[0].buffer);

  for (json& p : b.manifest["params"]) {
    p["placements"] = json::array({{{"program", 0}, {"buffer", p["buffer"]}, {"grad", p["grad"]}}});
    p.erase("buffer");
    p.erase("grad");
  }
  b.manifest["features"] = {"pipeline"};
  b.manifest["programs"][0]["stage"] = 0;
  b.write(dir);
  plan = loadPlan(dir.string());
  ASSERT_TRUE(plan.isOk()) << plan.status().message();
  EXPECT_FALSE(plan->manifest.params[2].legacyBufferGrad);
  EXPECT_EQ(plan->manifest.params[2].buffer, plan->manifest.params[2].placements[0].buffer);
}

TEST_F(PipelinePlanTest, PipelineNeedsTheFeature) {
  expectError([](auto& p) { p.manifest["features"] = json::array(); },
              {"manifest.json", "mesh.pp", "pp > 1 needs the feature \"pipeline\""});
  // Without the feature, more than one program is refused (SPMD).
  expectError([](auto& p) {
    p.manifest["features"] = json::array();
    p.manifest["mesh"]["pp"] = 1;
    p.manifest["mesh"]["dp"] = 2;
    p.manifest["batch"]["dp"] = 2;
    p.manifest["batch"]["global_batch"] = 8;
  }, {"manifest.json", "programs", "SPMD", "got 2 programs"});
}

TEST_F(PipelinePlanTest, StageProgramsAndRanks) {
  // dp = 2: stage 0 runs ranks {0, 1}, stage 1 ranks {2, 3}.
  expectError(dp2(), [](auto& p) { p.manifest["programs"][0]["ranks"] = {0, 2}; },
              {"manifest.json", "programs[0].ranks[1]", "rank 2 has pp coordinate 1", "stage 0"});
  expectError(dp2(), [](auto& p) {
    p.manifest["programs"][0]["ranks"] = {2, 3};
    p.manifest["programs"][1]["ranks"] = {0, 1};
  }, {"programs[0].ranks[0]", "rank 2"});
  expectError(dp2(), [](auto& p) { p.manifest["programs"][0]["ranks"] = {0}; },
              {"manifest.json", "programs[0].ranks", "missing rank 1"});
  expectError(dp2(), [](auto& p) { p.manifest["programs"][1]["ranks"] = {3, 2, 3}; },
              {"programs[1].ranks[2]", "rank 3 already runs programs[1]"});
  expectError([](auto& p) { p.manifest["programs"][1]["stage"] = 0; },
              {"manifest.json", "programs[1].stage", "expected 1", "got 0"});
  expectError([](auto& p) { p.manifest["programs"][1]["stage"] = -1; }, {"programs[1].stage", ">= 0"});
  expectError([](auto& p) { p.manifest["programs"].erase(1); },
              {"manifest.json", "programs", "one program per stage", "mesh.pp = 2", "got 1"});
  expectError([](auto& p) { p.manifest["programs"].push_back({{"file", "program-1.json"}, {"ranks", json::array()}}); },
              {"programs", "expected mesh.pp = 2 programs, got 3"});
  expectError([](auto& p) { p.manifest["programs"][0]["extra"] = 1; }, {"programs[0].extra", "unknown field"});
  // The rank order decides the pp coordinates: pp fastest makes stage 0 the even ranks.
  MultiProgramPlan p = testing::tinyLmPipeline(dp2());
  p.manifest["mesh"]["rank_order"] = {"pp", "dp", "tp"};
  EXPECT_NE(load(p).message().find("programs[0].ranks[1]: rank 1 has pp coordinate 1"), std::string::npos) << load(p).message();
  p.manifest["programs"][0]["ranks"] = {0, 2};
  p.manifest["programs"][1]["ranks"] = {1, 3};
  EXPECT_TRUE(load(p).isOk()) << load(p).message();
}

TEST_F(PipelinePlanTest, PlacementErrors) {
  auto wte = [](MultiProgramPlan& p) -> json& { return p.manifest["params"][0]; };
  expectError([&](auto& p) { wte(p)["buffer"] = 0; }, {"manifest.json", "params[0].buffer", "not both"});
  expectError([&](auto& p) { wte(p).erase("placements"); },
              {"manifest.json", "params[0].placements", "missing", "\"buffer\" and \"grad\""});
  expectError([&](auto& p) { wte(p)["placements"] = json::array(); }, {"params[0].placements", "non-empty array"});
  expectError([&](auto& p) { wte(p)["placements"] = 0; }, {"params[0].placements", "non-empty array"});
  expectError([&](auto& p) { wte(p)["placements"][0]["program"] = 2; },
              {"manifest.json", "params[0].placements[0].program", "program 2 is out of range", "2 program(s)"});
  expectError([&](auto& p) { wte(p)["placements"][0]["program"] = -1; }, {"params[0].placements[0].program", ">= 0"});
  expectError([&](auto& p) { wte(p)["placements"][0].erase("grad"); }, {"params[0].placements[0].grad", "missing"});
  expectError([&](auto& p) { wte(p)["placements"][0]["stage"] = 0; }, {"params[0].placements[0].stage", "unknown field"});
  expectError(tied(), [&](auto& p) { wte(p)["placements"][1]["program"] = 0; },
              {"params[0].placements[1].program", "program 0 already has a copy", "placements[0]"});
  // Buffer checks in the placement's program (as validateParams does for the single-program spelling).
  expectError(tied(), [&](auto& p) { wte(p)["placements"][1]["buffer"] = kS1Logits; },
              {"manifest.json", "params[0].placements[1].buffer", "kind \"activation\"", "expected \"param\""});
  expectError(tied(), [&](auto& p) { wte(p)["placements"][1]["grad"] = 99; },
              {"params[0].placements[1].grad", "out of range", "program-1.json"});
  expectError(tied(), [&](auto& p) { wte(p)["placements"][1]["buffer"] = kS1Ids; },
              {"params[0].placements[1].buffer", "kind \"input\""});
  expectError([&](auto& p) {  // lm_head's buffer/grad in program 1 under the wrong shape
    p.manifest["params"][2]["shape"] = {16, 32};
  }, {"params[2].placements[0].buffer", "shape [32, 16]", "has shape [16, 32]"});
  expectError([&](auto& p) {  // two params on one buffer
    p.manifest["params"][1]["placements"][0]["buffer"] = 0;
    p.manifest["params"][1]["shape"] = {32, 16};
  }, {"params[1].placements[0].buffer", "already used by params[0]"});
  // The single-program spelling needs a single-program plan.
  expectError([&](auto& p) {
    json& lm = p.manifest["params"][2];
    lm["buffer"] = 0;
    lm["grad"] = 1;
    lm.erase("placements");
  }, {"manifest.json", "params[2].buffer", "programs[0]", "use \"placements\""});
  // A sharded param must have all its shards in every program holding it: sharding over pp cannot.
  expectError([&](auto& p) { wte(p)["sharding"] = {{"axis", "pp"}, {"dim", 0}}; },
              {"params[0].sharding", "sharded over pp", "programs[0] has no rank with pp coordinate 1"});
}

TEST_F(PipelinePlanTest, SendRecvAndStageAxisErrors) {
  // Stage 0's send (forward op 3) and stage 1's recv (forward op 1).
  auto send = [](MultiProgramPlan& p) -> json& { return p.programs[0].program["subroutines"][1]["ops"][3]; };
  auto recv = [](MultiProgramPlan& p) -> json& { return p.programs[1].program["subroutines"][1]["ops"][1]; };
  expectError([&](auto& p) { send(p)["attrs"]["peer"] = 2; },
              {"program-0.json", "subroutines[1].ops[3].attrs.peer", "peer 2 is out of range", "\"pp\" has size 2"});
  expectError([&](auto& p) { send(p)["attrs"]["axis"] = "dp"; },
              {"program-0.json", "subroutines[1].ops[3].attrs.peer", "peer 1 is out of range", "\"dp\" has size 1"});
  expectError([&](auto& p) { send(p)["attrs"]["tag"] = -1; }, {"subroutines[1].ops[3].attrs.tag", "integer >= 0", "-1"});
  expectError([&](auto& p) { send(p)["attrs"]["peer"] = 1.5; }, {"attrs.peer", "expected an integer"});
  expectError([&](auto& p) { send(p)["attrs"].erase("tag"); }, {"attrs.tag", "missing attribute \"tag\" of op \"send\""});
  expectError([&](auto& p) { send(p)["attrs"]["microbatch"] = 0; },
              {"program-0.json", "subroutines[1].ops[3].attrs.microbatch", "unknown attribute",
               "axis, peer (optional), shift (optional), tag"});
  // A ring shift instead of a peer: exactly one of the two, 1 <= shift <= n − 1.
  expectError([&](auto& p) { send(p)["attrs"]["shift"] = 1; },
              {"subroutines[1].ops[3].attrs.shift", "either peer or shift, not both"});
  expectError([&](auto& p) { send(p)["attrs"].erase("peer"); },
              {"subroutines[1].ops[3].attrs.peer", "required", "ring shift (shift)"});
  expectError(
      [&](auto& p) {
        send(p)["attrs"].erase("peer");
        send(p)["attrs"]["shift"] = 2;
      },
      {"subroutines[1].ops[3].attrs.shift", "shift 2 is out of range", "\"pp\" has size 2", "shifts 1..1"});
  expectError(
      [&](auto& p) {
        send(p)["attrs"].erase("peer");
        send(p)["attrs"]["shift"] = 0;
      },
      {"subroutines[1].ops[3].attrs.shift"});
  expectError([&](auto& p) { recv(p)["attrs"]["axis"] = "xp"; }, {"attrs.axis", "unknown mesh axis \"xp\""});
  // A buffer moves as it is stored, an i32 one too (the load-balancing loss's counts): a list is no buffer.
  expectError([&](auto& p) { recv(p)["args"] = {{"y", {kS1Ids}}}; }, {"subroutines[1].ops[1].args.y"});
  MultiProgramPlan ints = testing::tinyLmPipeline(TinyLm{});
  recv(ints)["args"] = {{"y", kS1Ids}};
  EXPECT_TRUE(load(ints).isOk()) << load(ints).message();
  expectError([&](auto& p) { recv(p)["args"] = {{"x", 5}}; }, {"args.x", "unknown role for op \"recv\""});
  // The stage norm (stage 1's optimizer ops 0..2: grad_norm_sq, all_reduce over pp, grad_norm_clip).
  // The in-kernel spelling of earlier plans (grad_norm with stage_axis) is refused; the partial squared
  // norm is f64 only.
  auto norm = [](MultiProgramPlan& p) -> json& { return p.programs[1].program["subroutines"][3]["ops"][0]; };
  expectError([&](auto& p) { norm(p)["attrs"]["stage_axis"] = "pp"; },
              {"program-1.json", "subroutines[3].ops[0].attrs.stage_axis", "unknown attribute"});
  expectError([&](auto& p) {
    json& clip = p.programs[1].program["subroutines"][3]["ops"][2];
    ASSERT_EQ(clip["op"], "grad_norm_clip");
    clip["op"] = "grad_norm";
    clip["args"].erase("sq");
    clip["attrs"]["stage_axis"] = "pp";
  }, {"subroutines[3].ops[2].attrs.stage_axis", "unknown attribute", "max_norm"});
  expectError([&](auto& p) { norm(p)["args"]["sq"] = kS1Ids; }, {"args.sq", "i32", "needs f64"});
  expectError([&](auto& p) { norm(p)["args"]["grads"] = json::array(); }, {"args.grads", "non-empty array"});
}

TEST_F(PipelinePlanTest, TruncationsFailCleanly) {
  MultiProgramPlan p = testing::tinyLmPipeline(tied());
  const std::string text = p.manifest.dump();
  for (size_t n = 0; n < text.size(); n += 9) EXPECT_FALSE(parseManifest(text.substr(0, n), "manifest.json").isOk());
  uint32_t state = 7;
  for (int i = 0; i < 500; ++i) {
    std::string t = text;
    state = state * 1664525u + 1013904223u;
    t[(state >> 8) % t.size()] = char("0123456789{}[]\",:-ae"[(state >> 4) % 20]);
    (void)parseManifest(t, "manifest.json");
  }
}

}  // namespace
}  // namespace llcdist::rt
