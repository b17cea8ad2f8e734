// The measured timeline (Timeline.h, `--trace DIR`): the Chrome trace writer on hand-made timelines,
// and a dp=2 run whose trace holds every kernel launch and all-reduce of every rank and step.
#include "PlanTestUtil.h"

#include "llcdist/runtime/KernelCall.h"
#include "llcdist/runtime/Plan.h"
#include "llcdist/runtime/Timeline.h"
#include "llcdist/runtime/Train.h"

#include <map>
#include <set>
#include <tuple>

namespace llcdist::rt {
namespace {

using testing::json;
namespace fs = std::filesystem;

json readJson(const std::string& file) {
  std::ifstream f(file);
  return json::parse(f, nullptr, /*allow_exceptions=*/false);
}

// The one-layer plan on dp = 2: the grads and the loss are averaged over dp before the optimizer.
testing::PlanBuilder dataParallelPlan() {
  constexpr int kDwte = 1, kDlm = 5, kLoss = 13;  // buffer ids of oneLayerPlan
  testing::PlanBuilder p = testing::oneLayerPlan(32, 16, 8, /*B=*/2, /*microbatches=*/2);
  p.manifest["batch"]["dp"] = 2;
  p.manifest["batch"]["global_batch"] = 2 * 2 * 2;
  p.manifest["mesh"] = {{"dp", 2}, {"tp", 1}, {"pp", 1}};
  p.manifest["programs"][0]["ranks"] = {0, 1};
  json& opt = p.ops("optimizer");
  json pre = json::array();
  pre.push_back({{"op", "all_reduce"}, {"args", {{"x", {kDwte, kDlm}}}}, {"attrs", {{"axis", "dp"}, {"op", "avg"}}}});
  pre.push_back({{"op", "all_reduce"}, {"args", {{"x", {kLoss}}}}, {"attrs", {{"axis", "dp"}, {"op", "avg"}}}});
  for (json& o : opt) pre.push_back(o);
  opt = pre;
  return p;
}

TEST(ChromeTraceTest, RendersRanksLanesAndProvenance) {
  const std::string loc = "h.0.mlp", sub = "forward";
  Timeline r0, r1;
  r0.record({"linear", TraceLane::kCompute, 5000, 7500, &loc, &sub, 3, 1, 2});
  r1.record({"all_reduce", TraceLane::kCommunication, 9000, 9000, &loc, &sub, 3, -1, 4});
  const json doc = json::parse(renderChromeTrace({&r0, &r1}));
  ASSERT_EQ(doc["displayTimeUnit"], "ms");
  std::vector<json> complete;
  std::map<std::pair<int, int>, std::string> threads;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "X") complete.push_back(e);
    if (e["name"] == "thread_name") threads[{e["pid"].get<int>(), e["tid"].get<int>()}] = e["args"]["name"];
  }
  EXPECT_EQ(threads.size(), 4u);
  EXPECT_EQ(threads[std::make_pair(1, 0)], "compute");
  EXPECT_EQ(threads[std::make_pair(1, 1)], "communication");
  ASSERT_EQ(complete.size(), 2u);
  // ts from the earliest event of any rank, in microseconds.
  EXPECT_EQ(complete[0]["name"], "linear");
  EXPECT_EQ(complete[0]["pid"], 0);
  EXPECT_EQ(complete[0]["tid"], 0);
  EXPECT_DOUBLE_EQ(complete[0]["ts"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(complete[0]["dur"].get<double>(), 2.5);
  EXPECT_EQ(complete[0]["args"], json({{"loc", "h.0.mlp"}, {"step", 3}, {"microbatch", 1}, {"action", 2},
                                       {"subroutine", "forward"}}));
  EXPECT_EQ(complete[1]["name"], "all_reduce");
  EXPECT_EQ(complete[1]["pid"], 1);
  EXPECT_EQ(complete[1]["tid"], 1);
  EXPECT_EQ(complete[1]["cat"], "communication");
  EXPECT_DOUBLE_EQ(complete[1]["ts"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(complete[1]["dur"].get<double>(), 0.0);
}

class TraceFileTest : public testing::TrainFixture {
protected:
  TraceFileTest() : TrainFixture(5) {}
};

TEST_F(TraceFileTest, WritesAtomicallyAndReportsABadPath) {
  Timeline t;
  ASSERT_TRUE(writeChromeTrace(path("trace.json"), {&t}).isOk());
  EXPECT_TRUE(readJson(path("trace.json")).is_object());
  EXPECT_FALSE(fs::exists(path("trace.json.tmp")));
  const Status bad = writeChromeTrace(path("missing/trace.json"), {&t});
  EXPECT_EQ(bad.code(), StatusCode::kIoError);
  EXPECT_FALSE(fs::exists(path("missing")));
}

TEST_F(TraceFileTest, BadTraceDirFailsBeforeTraining) {
  RunOptions o = options(planDir(dataParallelPlan()), 1);
  o.traceDir = path("no-such-dir");
  o.quiet = false;
  std::ostringstream progress;
  const Status s = runTraining(o, progress);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("--trace directory '" + o.traceDir + "'"), std::string::npos) << s.message();
  EXPECT_EQ(progress.str(), "");  // no step ran
  EXPECT_FALSE(fs::exists(o.traceDir));
}

TEST_F(TraceFileTest, FailedRunWritesNoTrace) {
  // Without the grads' all-reduce the replicas diverge: the steps run (and are recorded), then
  // --save-params fails.
  testing::PlanBuilder p = dataParallelPlan();
  json& opt = p.ops("optimizer");
  opt.erase(opt.begin());
  RunOptions o = options(planDir(p), 2);
  o.saveParams = path("out.safetensors");
  o.traceDir = path("trace");
  fs::create_directories(o.traceDir);
  const Status s = run(o);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("--save-params"), std::string::npos) << s.message();
  EXPECT_TRUE(fs::is_empty(o.traceDir));
}

TEST_F(TraceFileTest, DataParallelRunRecordsEveryKernelAndAllReduce) {
  constexpr int64_t kSteps = 2;
  const std::string plan = planDir(dataParallelPlan());
  RunOptions o = options(plan, kSteps);
  o.traceDir = path("trace");
  fs::create_directories(o.traceDir);
  Status s = run(o);
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_FALSE(fs::exists(o.traceDir + "/trace.json.tmp"));
  EXPECT_FALSE(fs::exists(o.traceDir + "/trace.json.probe"));
  const json doc = readJson(o.traceDir + "/trace.json");
  ASSERT_TRUE(doc.is_object()) << "trace.json is not valid JSON";

  // What the plan's actions launch per step: its kernel ops, and its communication ops.
  auto loaded = loadPlan(plan);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  const Program& prog = loaded->programs[0];
  int64_t kernels = 0, allReduces = 0;
  for (const Action& a : prog.actions)
    for (const Op& op : prog.subroutines[size_t(a.subroutine)].ops) {
      kernels += launchesKernel(op.kind);
      allReduces += op.kind == schema::OpKind::kAllReduce;
    }
  ASSERT_GT(kernels, 0);
  ASSERT_EQ(allReduces, 2);

  std::map<std::tuple<int, int64_t>, int64_t> computePerStep, allReducePerStep;  // (rank, step)
  std::map<std::pair<int, int>, double> laneEnd;                                   // (rank, lane)
  std::set<int> ranks;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const int rank = e["pid"], lane = e["tid"];
    const int64_t step = e["args"]["step"];
    const double ts = e["ts"], dur = e["dur"];
    ranks.insert(rank);
    EXPECT_GE(dur, 0.0);
    EXPECT_TRUE(e["args"].contains("loc") && e["args"].contains("microbatch") && e["args"].contains("subroutine"));
    EXPECT_GE(e["args"]["action"].get<int64_t>(), 0);
    if (lane == 0) {
      EXPECT_EQ(e["cat"], "compute");
      ++computePerStep[{rank, step}];
    } else {
      ASSERT_EQ(lane, 1);
      EXPECT_EQ(e["cat"], "communication");
      EXPECT_EQ(e["name"], "all_reduce");
      ++allReducePerStep[{rank, step}];
    }
    // Execution is synchronous: one lane's intervals follow each other in file order.
    auto end = laneEnd.find({rank, lane});
    if (end != laneEnd.end()) {
      EXPECT_GE(ts, end->second) << "rank " << rank << " lane " << lane;
    }
    laneEnd[{rank, lane}] = ts + dur;
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1}));
  for (int r : {0, 1})
    for (int64_t step = 0; step < kSteps; ++step) {
      EXPECT_EQ(computePerStep[std::make_tuple(r, step)], kernels) << "rank " << r << " step " << step;
      EXPECT_EQ(allReducePerStep[std::make_tuple(r, step)], allReduces) << "rank " << r << " step " << step;
    }
}

}  // namespace
}  // namespace llcdist::rt
