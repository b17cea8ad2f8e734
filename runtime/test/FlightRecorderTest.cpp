// The flight recorder, its watchdog and `diagnose` (FlightRecorder.h, Diagnose.h): what a rank records
// (channels, sequence numbers, call sites, the ring), what a dump holds and how a malformed one is
// rejected, how the dumps of a hung run are matched, and the whole path through runTraining: a rank
// that hangs at a chosen collective is named, with the op and its provenance.
#include "PlanTestUtil.h"
#include "TestUtil.h"

#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/Diagnose.h"
#include "llcdist/runtime/FlightRecorder.h"
#include "llcdist/runtime/Train.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace llcdist::rt {
namespace {

using testing::json;
namespace fs = std::filesystem;

FlightRunInfo info(int world, const std::string& runId = "0123456789abcdef-100") {
  FlightRunInfo i;
  i.runId = runId;
  i.worldSize = world;
  i.mesh = Mesh::make(world, 1, 1);
  i.commTimeoutSeconds = 1;
  return i;
}

std::unique_ptr<Communicator> inProcess(int world, double timeoutSeconds) {
  InProcessCommunicatorOptions o;
  o.worldSize = world;
  o.mesh = Mesh::make(world, 1, 1);
  o.timeout = std::chrono::milliseconds(int64_t(timeoutSeconds * 1000));
  return makeInProcessCommunicator(o);
}

class FlightRecorderTest : public testing::TempDirTest {};

StatusOr<FlightSet> setOf(const FlightRecorder& rec, const std::string& reason = "test") {
  FlightSet set;
  set.dir = "mem";
  set.runId = rec.info().runId;
  set.worldSize = rec.info().worldSize;
  set.mesh = rec.info().mesh;
  for (int r : rec.localRanks()) {
    LLCDIST_ASSIGN_OR_RETURN(FlightDump d, parseFlightDump(rec.dumpJson(r, reason), "rank" + std::to_string(r)));
    set.dumps.push_back(std::move(d));
  }
  return set;
}

TEST_F(FlightRecorderTest, NumbersCallsPerChannelAndPairsSendsWithReceives) {
  auto comm = inProcess(2, 10);
  FlightRecorder rec(info(2), {0, 1}, 100);
  auto recording = makeRecordingCommunicator(*comm, rec);
  const std::string prog = "program-0.json", sub = "optimizer", loc = "the reason @ layer 3 @ model.json:1:1";
  auto rank = [&](int r) {
    CommCallSite site;
    site.program = &prog, site.subroutine = &sub, site.loc = &loc, site.opIndex = 7, site.step = 2, site.action = 4;
    const ScopedCallSite scoped(site);
    float x[3] = {1, 2, 3};
    for (int k = 0; k < 2; ++k)
      EXPECT_TRUE(recording->allReduce(r, {0, 1}, x, 3, CommDType::kF32, ReduceOp::kSum).isOk());
    if (r == 0)
      EXPECT_TRUE(recording->send(0, 1, x, 3, 9, 1).isOk());
    else
      EXPECT_TRUE(recording->recv(1, 0, x, 3, 9, 1).isOk());
  };
  std::thread t(rank, 1);
  rank(0);
  t.join();
  for (int r : {0, 1}) {
    const std::vector<CommRecord> recs = rec.records(r);
    ASSERT_EQ(recs.size(), 3u);
    for (int k = 0; k < 2; ++k) {
      EXPECT_EQ(recs[size_t(k)].channel, "group 0,1");
      EXPECT_EQ(recs[size_t(k)].seq, k);
      EXPECT_EQ(recs[size_t(k)].op, "all_reduce");
      EXPECT_EQ(recs[size_t(k)].reduceOp, "sum");
      EXPECT_EQ(recs[size_t(k)].bytes, 12);
      EXPECT_EQ(recs[size_t(k)].state, CommRecord::State::kCompleted);
      EXPECT_LE(recs[size_t(k)].startedUs, recs[size_t(k)].completedUs);
    }
    // The send and its receive name one channel, numbered alike.
    EXPECT_EQ(recs[2].channel, "p2p 0->1");
    EXPECT_EQ(recs[2].seq, 0);
    EXPECT_EQ(recs[2].op, r == 0 ? "send" : "recv");
    EXPECT_EQ(recs[2].peer, 1 - r);
    EXPECT_EQ(recs[2].tag, 9);
    EXPECT_EQ(recs[2].microbatch, 1);
    EXPECT_EQ(recs[2].program, prog);
    EXPECT_EQ(recs[2].subroutine, sub);
    EXPECT_EQ(recs[2].opIndex, 7);
    EXPECT_EQ(recs[2].step, 2);
    EXPECT_EQ(recs[2].action, 4);
    EXPECT_EQ(recs[2].loc, loc);
  }
  // A dump reads back as it was recorded.
  StatusOr<FlightSet> set = setOf(rec);
  ASSERT_TRUE(set.isOk()) << set.status().toString();
  EXPECT_EQ(set->dumps[1].records[2].loc, loc);
  EXPECT_EQ(set->dumps[1].records[1].seq, 1);
  // Nobody waits: the diagnosis says so.
  EXPECT_NE(diagnoseText(*set).find("no rank waits in a communication call"), std::string::npos) << diagnoseText(*set);
}

TEST_F(FlightRecorderTest, TheRingKeepsTheLastCallsAndCountsTheDropped) {
  auto comm = inProcess(1, 10);
  FlightRecorder rec(info(1), {0}, 3);
  auto recording = makeRecordingCommunicator(*comm, rec);
  float x = 1;
  for (int k = 0; k < 5; ++k) ASSERT_TRUE(recording->allReduce(0, {0}, &x, 1, CommDType::kF32, ReduceOp::kSum).isOk());
  int64_t dropped = 0;
  const std::vector<CommRecord> recs = rec.records(0, &dropped);
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(dropped, 2);
  EXPECT_EQ(recs[0].id, 2);
  EXPECT_EQ(recs[2].seq, 4);
}

// Ranks 0-2 call an all_reduce that rank 3 never calls (it stops after the first): the diagnosis names
// rank 3, the operation with its call site and provenance, and the waiting ranks.
TEST_F(FlightRecorderTest, DiagnoseNamesTheRankThatNeverCame) {
  auto comm = inProcess(4, 0.3);
  FlightRecorder rec(info(4), {0, 1, 2, 3}, 100);
  auto recording = makeRecordingCommunicator(*comm, rec);
  const std::string prog = "program-0.json", sub = "backward",
                    loc = "grads are partial sums over dp @ wte @ m.json:1:1";
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r)
    threads.emplace_back([&, r] {
      CommCallSite site;
      site.program = &prog, site.subroutine = &sub, site.loc = &loc, site.step = 1;
      float x = 1;
      for (int k = 0; k < (r == 3 ? 1 : 2); ++k) {
        site.opIndex = 10 + k;
        const ScopedCallSite scoped(site);
        Status s = recording->allReduce(r, {0, 1, 2, 3}, &x, 1, CommDType::kF32, ReduceOp::kSum);
        EXPECT_EQ(s.isOk(), k == 0) << s.toString();
      }
    });
  for (std::thread& t : threads) t.join();
  StatusOr<FlightSet> set = setOf(rec);
  ASSERT_TRUE(set.isOk()) << set.status().toString();
  const json d = json::parse(diagnoseJson(*set));
  EXPECT_EQ(d["root_causes"], json::array({3}));
  ASSERT_EQ(d["blocked"].size(), 1u);
  const json& b = d["blocked"][0];
  EXPECT_EQ(b["never_reached"], json::array({3}));
  EXPECT_EQ(b["waiting"], json::array({0, 1, 2}));
  EXPECT_EQ(b["seq"], 1);
  EXPECT_EQ(b["axis"], "dp");
  EXPECT_EQ(b["op_index"], 11);
  EXPECT_EQ(b["reason"], "grads are partial sums over dp");
  EXPECT_EQ(b["where"], "wte @ m.json:1:1");
  const std::string text = diagnoseText(*set);
  for (const char* part :
       {"rank 3 never reached all_reduce #1 on group 0,1,2,3 (axis dp) in step 1", "waiting there: ranks 0, 1, 2",
        "why the compiler put it there: grads are partial sums over dp", "program-0.json subroutine 'backward' op 11",
        "rank 3 is in no communication call", "root cause: rank 3"})
    EXPECT_NE(text.find(part), std::string::npos) << part << " in:\n" << text;
  // Without rank 3's dump, it is still the root cause: it left none.
  set->dumps.pop_back();
  const json e = json::parse(diagnoseJson(*set));
  EXPECT_EQ(e["root_causes"], json::array({3}));
  EXPECT_EQ(e["missing"], json::array({3}));
  EXPECT_EQ(e["blocked"][0]["no_dump"], json::array({3}));
}

// A call that never returns (an inner communicator without a timeout): the watchdog dumps every rank,
// prints the diagnosis and aborts the communicator.
TEST_F(FlightRecorderTest, TheWatchdogFiresOnACallPastTheTimeout) {
  struct Stuck final : Communicator {
    std::atomic<bool> aborted{false};
    int worldSize() const override { return 2; }
    Status allReduce(int, const std::vector<int>&, void*, int64_t, CommDType, ReduceOp) override {
      while (!aborted) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return Status::aborted("aborted");
    }
    Status allGather(int, const std::vector<int>&, const void*, void*, int64_t, int64_t, CommDType) override {
      return {};
    }
    Status reduceScatter(int, const std::vector<int>&, const void*, void*, int64_t, int64_t, CommDType,
                         ReduceOp) override {
      return {};
    }
    Status send(int, int, const void*, int64_t, CommDType, int64_t, int64_t) override { return {}; }
    Status recv(int, int, void*, int64_t, CommDType, int64_t, int64_t) override { return {}; }
    void abort(const Status&) override { aborted = true; }
    Status abortReason() const override { return aborted ? Status::aborted("aborted") : Status::ok(); }
  } stuck;
  FlightRecorder rec(info(2), {0, 1}, 10);
  auto recording = makeRecordingCommunicator(stuck, rec);
  std::ostringstream errors;
  WatchdogOptions wo;
  wo.dir = (dir / "flight").string();
  wo.timeoutSeconds = 0.1;  // fires 1.1 s into the call
  wo.communicator = recording.get();
  wo.errors = &errors;
  wo.poll = std::chrono::milliseconds(20);
  Watchdog dog(rec, wo);
  float x = 0;
  const auto t0 = std::chrono::steady_clock::now();
  Status s = recording->allReduce(0, {0, 1}, &x, 1, CommDType::kF32, ReduceOp::kSum);
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(s.isOk());
  EXPECT_GT(dt, 1.0);
  EXPECT_LT(dt, 10.0);
  EXPECT_TRUE(stuck.aborted);
  StatusOr<FlightSet> set = loadFlightDir(wo.dir);
  ASSERT_TRUE(set.isOk()) << set.status().toString();
  ASSERT_EQ(set->dumps.size(), 2u);
  EXPECT_NE(set->dumps[0].reason.find("watchdog: rank 0 has waited"), std::string::npos) << set->dumps[0].reason;
  EXPECT_NE(errors.str().find("rank 1 never reached all_reduce #0 on group 0,1"), std::string::npos) << errors.str();
}

TEST_F(FlightRecorderTest, MalformedDumpsAreRejectedNamingTheField) {
  auto comm = inProcess(2, 1);
  FlightRecorder rec(info(2), {0, 1}, 10);
  auto recording = makeRecordingCommunicator(*comm, rec);
  float x = 0;
  std::thread t([&] { (void)recording->allReduce(1, {0, 1}, &x, 1, CommDType::kF32, ReduceOp::kSum); });
  ASSERT_TRUE(recording->allReduce(0, {0, 1}, &x, 1, CommDType::kF32, ReduceOp::kSum).isOk());
  t.join();
  const json good = json::parse(rec.dumpJson(0, "test"));
  ASSERT_TRUE(parseFlightDump(good.dump(), "f.json").isOk());
  struct Case {
    std::function<void(json&)> edit;
    const char* want;
  };
  const Case cases[] = {
      {[](json& j) { j["format"] = "other"; }, "field 'format'"},
      {[](json& j) { j["version"] = 2; }, "field 'version'"},
      {[](json& j) { j["rank"] = 2; }, "field 'rank': out of range [0, 1]"},
      {[](json& j) { j["world_size"] = 1e30; }, "field 'world_size': must be an integer"},
      {[](json& j) { j["mesh"]["dp"] = 3; }, "field 'mesh': dp·tp·pp is not world_size"},
      {[](json& j) { j["records"][0]["state"] = "lost"; }, "field 'records[0].state'"},
      {[](json& j) {
         j["records"][0]["group"] = json::array({0, 7});
       },
       "field 'records[0].group'"},
      {[](json& j) { j["records"][0]["op"] = "broadcast"; }, "field 'records[0].op'"},
      {[](json& j) { j["records"][0].erase("seq"); }, "field 'records[0].seq': missing"},
      {[](json& j) { j["records"] = 3; }, "field 'records'"},
  };
  for (const Case& c : cases) {
    json j = good;
    c.edit(j);
    StatusOr<FlightDump> d = parseFlightDump(j.dump(), "f.json");
    ASSERT_FALSE(d.isOk()) << c.want;
    EXPECT_NE(d.status().message().find(std::string("f.json: ") + c.want), std::string::npos)
        << c.want << " in: " << d.status().message();
  }
  for (const std::string& text : {good.dump() + " junk", std::string("{"), std::string("[1]")}) {
    StatusOr<FlightDump> d = parseFlightDump(text, "f.json");
    ASSERT_FALSE(d.isOk()) << text;
    EXPECT_NE(d.status().message().find("f.json"), std::string::npos) << d.status().message();
  }
}

TEST_F(FlightRecorderTest, ADirectoryIsReadForItsNewestRun) {
  const std::string flight = (dir / "flight").string();
  for (const auto& [id, ranks] : std::vector<std::pair<std::string, std::vector<int>>>{{"0123456789abcdef-100", {0, 1}},
                                                                                       {"0123456789abcdef-200", {1}}}) {
    FlightRecorder rec(info(2, id), ranks, 4);
    ASSERT_TRUE(rec.dump(flight, "test").isOk());
  }
  // Rank 1's newer dump replaced its older one; rank 0's is of the older run.
  StatusOr<FlightSet> set = loadFlightDir(flight);
  ASSERT_TRUE(set.isOk()) << set.status().toString();
  EXPECT_EQ(set->runId, "0123456789abcdef-200");
  ASSERT_EQ(set->dumps.size(), 1u);
  EXPECT_EQ(set->dumps[0].rank, 1);
  ASSERT_EQ(set->ignored.size(), 1u);
  EXPECT_NE(set->ignored[0].find("flight-rank-0.json"), std::string::npos);
  EXPECT_EQ(loadFlightDir((dir / "none").string()).status().code(), StatusCode::kNotFound);
  fs::create_directories(dir / "empty");
  EXPECT_EQ(loadFlightDir((dir / "empty").string()).status().code(), StatusCode::kNotFound);
}

// The whole path: a 4-rank data-parallel run in which rank 2 hangs (LLCDIST_FAULT) at its first
// communication call of step 1, the grads' all_reduce: the run fails, every rank's dump is written
// and the diagnosis names rank 2 and that op, with the provenance the plan gave it.
class FlightTrainTest : public testing::TrainFixture {
 protected:
  FlightTrainTest() : TrainFixture(5) {}
};

TEST_F(FlightTrainTest, AHungRankIsNamedWithItsOperation) {
  testing::PlanBuilder p = testing::oneLayerPlan(32, 16, 8, 1, 1);
  p.manifest["batch"]["dp"] = 4;
  p.manifest["batch"]["global_batch"] = 4;
  p.manifest["mesh"] = {{"dp", 4}, {"tp", 1}, {"pp", 1}};
  p.manifest["programs"][0]["ranks"] = json::array({0, 1, 2, 3});
  json& opt = p.ops("optimizer");
  const json reduce = {{"op", "all_reduce"},
                       {"args", {{"x", {1, 5}}}},
                       {"attrs", {{"axis", "dp"}, {"op", "avg"}}},
                       {"loc", "DDP: the grads' average over dp @ lm_head @ test.json:1:1"}};
  opt.insert(opt.begin(), reduce);
  RunOptions o = options(planDir(p), 3);
  o.collectiveTimeoutSeconds = 0.5;
  o.flightEntries = 100;
  o.flightDir = path("flight");
  std::ostringstream errors;
  o.errors = &errors;
  ASSERT_EQ(setenv("LLCDIST_FAULT", "rank:2,step:1,op:0,kind:stall", 1), 0);
  const Status s = run(o);
  unsetenv("LLCDIST_FAULT");
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.toString();
  EXPECT_NE(errors.str().find("root cause: rank 2"), std::string::npos) << errors.str();
  StatusOr<FlightSet> set = loadFlightDir(o.flightDir);
  ASSERT_TRUE(set.isOk()) << set.status().toString() << "\n" << s.toString();
  EXPECT_EQ(set->dumps.size(), 4u);
  const json d = json::parse(diagnoseJson(*set));
  EXPECT_EQ(d["root_causes"], json::array({2}));
  const json& b = d["blocked"][0];
  EXPECT_EQ(b["never_reached"], json::array({2}));
  EXPECT_EQ(b["waiting"], json::array({0, 1, 3}));
  EXPECT_EQ(b["subroutine"], "optimizer");
  EXPECT_EQ(b["op_index"], 0);
  EXPECT_EQ(b["step"], 1);
  EXPECT_EQ(b["reason"], "DDP: the grads' average over dp");
  // Step 0's calls completed on every rank and are in the dumps: two buffers, one call each.
  EXPECT_GE(set->dumps[2].records.size(), 2u);
  EXPECT_EQ(set->dumps[2].records[0].state, CommRecord::State::kCompleted);
}

}  // namespace
}  // namespace llcdist::rt
