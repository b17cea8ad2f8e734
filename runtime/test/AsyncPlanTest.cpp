// Asynchronous plans (feature "async", docs/plan-format.md "Asynchronous plans"): the loader's queue
// and token rules, a dp = 2 plan whose gradient all-reduce runs on a comm queue (same bits as its
// synchronous version), the checking mode (--check-async) finding a late wait and an in-place
// overwrite, the measured memory of an in-flight buffer, and a trace whose comm-lane interval
// overlaps compute of the same rank.
#include "ForwardingBackend.h"
#include "PlanTestUtil.h"

#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Plan.h"
#include "llcdist/runtime/Timeline.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <cmath>
#include <cstring>
#include <thread>

namespace llcdist::rt {
namespace {

using testing::json;
using testing::PlanBuilder;

// Buffer ids of testing::oneLayerPlan.
constexpr int64_t kWte = 0, kDwte = 1, kLm = 4, kDlm = 5, kLoss = 13;

json op(const std::string& name, json args, json attrs = json::object()) {
  return {{"op", name}, {"args", std::move(args)}, {"attrs", std::move(attrs)}};
}
json started(json o, int64_t token, const std::string& queue = "comm") {
  o["token"] = token;
  o["queue"] = queue;
  return o;
}
json waitOp(int64_t token) { return {{"op", "wait"}, {"token", token}}; }
json allReduce(std::vector<int64_t> x) { return op("all_reduce", {{"x", x}}, {{"axis", "dp"}, {"op", "avg"}}); }

// The one-layer plan on dp = 2 (TraceTest's): the grads and the loss are all-reduced at the start of
// the optimizer. With `async`, the lm_head gradient and the loss go on queue "comm" with tokens 0 and
// 1; a copy of lm_head.weight into a scratch buffer (independent of both) runs while they are in
// flight, and the waits come right before the first reader, grad_norm. `waitAt` moves token 0's wait
// to just after that op index of the optimizer (a late wait) when >= 0.
PlanBuilder dataParallel(bool async, int waitAt = -1) {
  PlanBuilder p = testing::oneLayerPlan(32, 16, 8, /*B=*/2, /*microbatches=*/2);
  p.manifest["batch"]["dp"] = 2;
  p.manifest["batch"]["global_batch"] = 8;
  p.manifest["mesh"] = {{"dp", 2}, {"tp", 1}, {"pp", 1}};
  p.manifest["programs"][0]["ranks"] = {0, 1};
  const int64_t scratch = p.buffer("lm_copy", "scratch", {32, 16});
  json& opt = p.ops("optimizer");
  json pre = json::array();
  if (async) {
    p.manifest["features"] = {"async"};
    p.program["queues"] = {"compute", "comm"};
    // The loss first: the checking mode runs a queue's ops in start order, so token 0 started after
    // token 1 is not run early by token 1's wait.
    pre.push_back(started(allReduce({kLoss}), 1));
    pre.push_back(started(allReduce({kDlm}), 0));
    pre.push_back(allReduce({kDwte}));
    pre.push_back(op("copy", {{"x", kLm}, {"y", scratch}}, {{"n", 32 * 16}}));
    pre.push_back(waitOp(1));
    if (waitAt < 0) pre.push_back(waitOp(0));
  } else {
    pre.push_back(allReduce({kDwte, kDlm}));
    pre.push_back(allReduce({kLoss}));
    pre.push_back(op("copy", {{"x", kLm}, {"y", scratch}}, {{"n", 32 * 16}}));
  }
  for (size_t i = 0; i < opt.size(); ++i) {
    pre.push_back(opt[i]);
    if (waitAt == int(i)) pre.push_back(waitOp(0));
  }
  opt = pre;
  return p;
}

class AsyncTrainTest : public testing::TrainFixture {
protected:
  AsyncTrainTest() : TrainFixture(11) {}
  // Runs `steps` steps and returns the losses' bits and every saved parameter.
  Status train(const PlanBuilder& p, const std::string& name, bool check, std::vector<uint64_t>* losses,
               std::map<std::string, std::vector<float>>* params) {
    RunOptions o = options(planDir(p, name), 3);
    o.checkAsync = check;
    if (params) o.saveParams = path(name + ".safetensors");
    RunResult res;
    LLCDIST_RETURN_IF_ERROR(run(o, &res));
    for (const StepRecord& r : res.steps) {
      uint64_t bits;
      std::memcpy(&bits, &r.loss, sizeof bits);
      losses->push_back(bits);
    }
    if (params) *params = readAll(o.saveParams);
    return Status::ok();
  }
};

bool sameBits(const std::map<std::string, std::vector<float>>& a, const std::map<std::string, std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, v] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.size() != v.size() ||
        std::memcmp(v.data(), it->second.data(), v.size() * sizeof(float)) != 0)
      return false;
  }
  return true;
}

TEST_F(AsyncTrainTest, AsyncGradientAllReduceGivesTheSynchronousBits) {
  std::vector<uint64_t> syncLoss, asyncLoss, checkLoss;
  std::map<std::string, std::vector<float>> syncParams, asyncParams, checkParams;
  Status s = train(dataParallel(false), "sync", false, &syncLoss, &syncParams);
  ASSERT_TRUE(s.isOk()) << s.message();
  s = train(dataParallel(true), "async", false, &asyncLoss, &asyncParams);
  ASSERT_TRUE(s.isOk()) << s.message();
  s = train(dataParallel(true), "check", true, &checkLoss, &checkParams);
  ASSERT_TRUE(s.isOk()) << s.message();
  ASSERT_EQ(syncLoss.size(), 3u);
  EXPECT_EQ(asyncLoss, syncLoss);
  EXPECT_EQ(checkLoss, syncLoss);  // a correct plan passes the checking mode unchanged
  ASSERT_EQ(syncParams.size(), 2u);
  EXPECT_TRUE(sameBits(asyncParams, syncParams));
  EXPECT_TRUE(sameBits(checkParams, syncParams));
  // Not a tautology: the parameters moved.
  EXPECT_NE(syncLoss.front(), syncLoss.back());
}

// What a device backend sees of a plan's queues (the CUDA backend maps each Stream to a CUDA stream
// and each Event to a CUDA event one to one, CudaBackend.h): a backend made by RunOptions::backend
// that records every stream-addressed call and forwards it to the CPU backend. Each rank creates one
// stream per non-compute queue before its first step and connects once before any work; the started
// all-reduces go to the comm queue's stream and are waited for on the compute stream at the plan's
// waits; the synchronous all-reduce and every kernel run on the compute stream; and the losses are
// the plain CPU run's bits.
class RecordingBackend final : public testing::ForwardingBackend {
public:
  RecordingBackend(std::unique_ptr<Backend> inner, std::vector<std::string>* log, std::mutex* mu)
      : ForwardingBackend(std::move(inner)), log_(log), mu_(mu) {}
  std::string name() const override { return "recording"; }
  StatusOr<Stream> createStream() override {
    note("createStream");
    return inner_->createStream();
  }
  Status recordEvent(Stream s, Event e) override {
    note("recordEvent s" + std::to_string(s.id));
    return inner_->recordEvent(s, e);
  }
  Status waitEvent(Stream s, Event e) override {
    note("waitEvent s" + std::to_string(s.id));
    return inner_->waitEvent(s, e);
  }
  Status launch(Stream s, const KernelCall& c) override {
    if (s.id != 0) note("launch off the compute stream: " + std::string(schema::opName(c.kind)));
    return inner_->launch(s, c);
  }
  Status connect() override {
    note("connect");
    return inner_->connect();
  }
  StatusOr<CollectiveHandle> allReduceAsync(Stream s, void* b, int64_t n, CommDType d, ReduceOp op,
                                            Channel c) override {
    note("allReduce s" + std::to_string(s.id));
    return inner_->allReduceAsync(s, b, n, d, op, c);
  }
  Status waitCollective(Stream s, CollectiveHandle h) override {
    note("waitCollective s" + std::to_string(s.id));
    return inner_->waitCollective(s, h);
  }

private:
  void note(const std::string& what) {
    std::lock_guard<std::mutex> lock(*mu_);
    log_->push_back(what);
  }
  std::vector<std::string>* log_;
  std::mutex* mu_;
};

TEST_F(AsyncTrainTest, EachQueueIsOneStreamAndEachTokenAnEventPair) {
  std::vector<uint64_t> plain;
  ASSERT_TRUE(train(dataParallel(true), "plain", false, &plain, nullptr).isOk());
  std::vector<std::vector<std::string>> logs(2);
  std::mutex mu;
  RunOptions o = options(planDir(dataParallel(true), "recorded"), 3);
  o.backend = [&](int rank, Communicator* comm) -> StatusOr<std::unique_ptr<Backend>> {
    CpuBackendOptions co;
    co.rank = rank;
    co.communicator = comm;
    return std::unique_ptr<Backend>(std::make_unique<RecordingBackend>(makeCpuBackend(co), &logs[size_t(rank)], &mu));
  };
  RunResult res;
  const Status st = run(o, &res);
  ASSERT_TRUE(st.isOk()) << st.toString();
  std::vector<uint64_t> recorded;
  for (const StepRecord& r : res.steps) {
    uint64_t bits;
    std::memcpy(&bits, &r.loss, sizeof bits);
    recorded.push_back(bits);
  }
  EXPECT_EQ(recorded, plain) << "a backend made through RunOptions::backend runs the same plan";
  for (const std::vector<std::string>& log : logs) {
    ASSERT_GE(log.size(), 2u);
    EXPECT_EQ(log[0], "createStream") << "one stream for the comm queue, at create";
    EXPECT_EQ(std::count(log.begin(), log.end(), "createStream"), 1);
    EXPECT_EQ(log[1], "connect") << "connect before the rank's first work";
    EXPECT_EQ(std::count(log.begin(), log.end(), "connect"), 1);
    // Per step: the two started all-reduces on the comm stream (1), after the comm stream waited for
    // the compute work before them; the synchronous one on the compute stream; every wait there.
    EXPECT_EQ(std::count(log.begin(), log.end(), "allReduce s1"), 2 * 3);
    EXPECT_EQ(std::count(log.begin(), log.end(), "allReduce s0"), 1 * 3);
    EXPECT_EQ(std::count(log.begin(), log.end(), "waitCollective s1"), 0) << "waits are the waiting queue's";
    EXPECT_EQ(std::count(log.begin(), log.end(), "waitCollective s0"), (2 + 1) * 3)
        << "the plan's two waits and the synchronous all-reduce's, on compute";
    for (const std::string& line : log) EXPECT_EQ(line.find("launch off"), std::string::npos) << line;
    // The comm stream starts each started all-reduce only after the compute stream's event.
    for (size_t i = 0; i < log.size(); ++i)
      if (log[i] == "allReduce s1") {
        auto before = std::find(std::make_reverse_iterator(log.begin() + long(i)), log.rend(), "waitEvent s1");
        EXPECT_NE(before, log.rend()) << "an all-reduce on the comm stream without a wait for compute";
      }
  }
}

TEST_F(AsyncTrainTest, CheckingModeTurnsALateWaitIntoNaN) {
  // Token 0's wait after the optimizer's lm_head update (op index 2: grad_norm 0, adamw wte 1, adamw
  // lm_head 2): grad_norm and the update read the reduced gradient before it is there.
  std::vector<uint64_t> loss, syncLoss;
  Status s = train(dataParallel(true, /*waitAt=*/2), "late", true, &loss, nullptr);
  ASSERT_TRUE(s.isOk()) << s.message();
  s = train(dataParallel(false), "sync", false, &syncLoss, nullptr);
  ASSERT_TRUE(s.isOk()) << s.message();
  ASSERT_EQ(loss.size(), 3u);
  auto value = [](uint64_t bits) {
    double d;
    std::memcpy(&d, &bits, sizeof d);
    return d;
  };
  EXPECT_EQ(loss[0], syncLoss[0]);  // the first step's forward ran on the initial parameters
  // The update read the poisoned gradient: the parameters, and so every later loss, are NaN.
  EXPECT_TRUE(std::isnan(value(loss[1]))) << value(loss[1]);
  EXPECT_TRUE(std::isnan(value(loss[2])));
}

TEST_F(AsyncTrainTest, CheckingModeReportsAnOverwrittenInPlaceBuffer) {
  // A zero of the in-flight lm_head gradient between its start and its wait.
  PlanBuilder p = dataParallel(true);
  json& opt = p.ops("optimizer");
  opt.insert(opt.begin() + 3, op("fill_zero", {{"x", {kDlm}}}));
  std::vector<uint64_t> loss;
  const Status s = train(p, "overwrite", true, &loss, nullptr);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("buffer 5 (\"grad.lm_head\") was written while"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("subroutine 'optimizer' op 1 (all_reduce)"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("token 0"), std::string::npos) << s.message();
}

// ---- the loader ------------------------------------------------------------------------------------
class AsyncLoaderTest : public ::testing::Test {
protected:
  static Status load(const PlanBuilder& b) {
    auto m = parseManifest(b.manifest.dump(), "manifest.json");
    if (!m.isOk()) return m.status();
    return parseProgram(b.program.dump(), "program-0.json", *m).status();
  }
  static void expectError(const PlanBuilder& b, const std::string& what) {
    const Status s = load(b);
    ASSERT_FALSE(s.isOk()) << "accepted; expected: " << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  }
  // dataParallel(true) with the optimizer's first ops replaced by `ops`.
  static PlanBuilder withOptimizerPrefix(json ops, int drop = 6) {
    PlanBuilder p = dataParallel(true);
    json& opt = p.ops("optimizer");
    opt.erase(opt.begin(), opt.begin() + drop);
    for (size_t i = ops.size(); i-- > 0;) opt.insert(opt.begin(), ops[i]);
    return p;
  }
};

TEST_F(AsyncLoaderTest, AValidPlanLoadsWithItsQueuesAndTokens) {
  PlanBuilder p = dataParallel(true);
  auto m = parseManifest(p.manifest.dump(), "manifest.json");
  ASSERT_TRUE(m.isOk()) << m.status().message();
  auto prog = parseProgram(p.program.dump(), "program-0.json", *m);
  ASSERT_TRUE(prog.isOk()) << prog.status().message();
  EXPECT_EQ(prog->queues, (std::vector<std::string>{"compute", "comm"}));
  const Subroutine& opt = prog->subroutines[3];  // step_begin, forward, backward, optimizer
  ASSERT_EQ(opt.name, "optimizer");
  EXPECT_EQ(opt.ops[1].queue, 1);
  EXPECT_EQ(opt.ops[1].token, 0);
  EXPECT_TRUE(opt.ops[1].startsAsync());
  EXPECT_EQ(opt.ops[2].queue, 0);
  EXPECT_EQ(opt.ops[2].token, -1);
  EXPECT_EQ(opt.ops[4].kind, schema::OpKind::kWait);
  EXPECT_EQ(opt.ops[4].token, 1);
  EXPECT_FALSE(opt.ops[4].startsAsync());
}

TEST_F(AsyncLoaderTest, FieldsNeedTheFeature) {
  PlanBuilder p = dataParallel(true);
  p.manifest["features"] = json::array();
  expectError(p, "program-0.json: queues: needs the feature \"async\"");
  p.program.erase("queues");
  expectError(p, "program-0.json: subroutines[3].ops[0].queue: \"queue\" needs the feature \"async\"");
  json& opt = p.ops("optimizer");
  opt[0].erase("queue");
  opt[1].erase("queue");
  expectError(p, "subroutines[3].ops[0].token: \"token\" needs the feature \"async\"");
  opt[0].erase("token");
  opt[1].erase("token");
  expectError(p, "subroutines[3].ops[4].token: \"token\" needs the feature \"async\"");
}

TEST_F(AsyncLoaderTest, QueueRules) {
  PlanBuilder p = dataParallel(true);
  p.program["queues"] = {"comm", "compute"};
  expectError(p, "queues[0]: the first queue must be \"compute\", got \"comm\"");
  p.program["queues"] = {"compute", "comm", "comm"};
  expectError(p, "queues[2]: duplicate queue \"comm\"");
  p.program["queues"] = {"compute", "Comm"};
  expectError(p, "queues[1]: queue name \"Comm\" is not of the form [a-z0-9_]+");
  p.program["queues"] = json::array();
  expectError(p, "queues: expected a non-empty array");
  p.program["queues"] = {"compute"};
  expectError(p, "subroutines[3].ops[0].queue: unknown queue \"comm\" (the program's queues: \"compute\")");
  PlanBuilder k = dataParallel(true);
  k.ops("optimizer")[3]["queue"] = "comm";  // the copy kernel
  expectError(k, "subroutines[3].ops[3].queue: op \"copy\" must run on queue \"compute\"");
  PlanBuilder t = dataParallel(true);
  t.ops("optimizer")[3]["token"] = 5;
  expectError(t, "subroutines[3].ops[3].token: op \"copy\" cannot be started asynchronously");
  PlanBuilder n = dataParallel(true);
  n.ops("optimizer")[0]["token"] = -1;
  expectError(n, "subroutines[3].ops[0].token");
  PlanBuilder w = dataParallel(true);
  w.ops("optimizer")[4].erase("token");
  expectError(w, "subroutines[3].ops[4].token: missing required field");
}

TEST_F(AsyncLoaderTest, TokenRulesOverTheStepsExecutionOrder) {
  const json ar = started(allReduce({kDlm}), 0);
  const json loss = allReduce({kLoss}), grads = allReduce({kDwte});
  expectError(withOptimizerPrefix({waitOp(0), ar, waitOp(0), loss, grads}),
              "subroutines[3].ops[0].token: wait before start: token 0 is not in flight (action 5, subroutine "
              "\"optimizer\"");
  expectError(withOptimizerPrefix({ar, waitOp(0), waitOp(0), loss, grads}),
              "subroutines[3].ops[2].token: double wait: token 0 was already waited for");
  expectError(withOptimizerPrefix({ar, loss, grads}),
              "subroutines[3].ops[0].token: never waited: token 0 (started in action 5) is still in flight at the "
              "end of the step");
  expectError(withOptimizerPrefix({ar, started(allReduce({kLoss}), 0), waitOp(0), grads}),
              "subroutines[3].ops[1].token: token 0 is started again before its wait (it is in flight from "
              "subroutines[3].ops[0], action 5)");
  // A token reused after its wait is fine, and so is a wait on another queue.
  json w = waitOp(0);
  w["queue"] = "comm";
  EXPECT_TRUE(load(withOptimizerPrefix({ar, w, started(allReduce({kLoss}), 0), waitOp(0), grads})).isOk());
  // Per microbatch: a token started in every backward and waited in the next forward is started
  // again before its wait on the second microbatch... unless the wait comes first in each run.
  PlanBuilder mb = dataParallel(false);
  mb.manifest["features"] = {"async"};
  mb.ops("backward").push_back(started(allReduce({kDlm}), 7, "compute"));
  mb.ops("backward").push_back(waitOp(7));
  EXPECT_TRUE(load(mb).isOk());
  PlanBuilder bad = dataParallel(false);
  bad.manifest["features"] = {"async"};
  bad.ops("backward").push_back(started(allReduce({kDlm}), 7, "compute"));
  bad.ops("optimizer").insert(bad.ops("optimizer").begin(), waitOp(7));
  expectError(bad, "subroutines[2].ops[4].token: token 7 is started again before its wait (it is in flight from "
                   "subroutines[2].ops[4], action 2)");
}

// ---- memory and trace, on interpreters run directly ------------------------------------------------
StatusOr<Plan> parse(const PlanBuilder& b) { return testing::parsePlan(b, /*validateParameters=*/false); }

// Single rank, aligned bytes 64 each: w param (whole step), loss metric (whole step), a, b activations.
//   0 copy w -> a            a written
//   1 all_reduce [a] token 0 (started; a live until its wait)
//   2 copy w -> b            b written
//   3 accumulate b into w    b's last use
//   4 wait 0                 a's last touch (async); the synchronous plan has no op here
// Synchronous (no token, no wait): a [0,1], b [2,3]: peak 128 + 64 = 192. Asynchronous: a [0,4]
// overlaps b: peak 128 + 128 = 256 at position 2.
PlanBuilder inFlightMemoryPlan(bool async) {
  PlanBuilder p(8, 2, 1, 1);
  const int64_t w = p.buffer("w", "param", {16});
  p.buffer("loss", "metric", {1});
  const int64_t a = p.buffer("a", "activation", {16});
  const int64_t b = p.buffer("b", "activation", {16});
  if (async) {
    p.manifest["features"] = {"async"};
    p.program["queues"] = {"compute", "comm"};
  }
  p.op("s", "copy", {{"x", w}, {"y", a}}, {{"n", 16}});
  json ar = allReduce({a});
  p.ops("s").push_back(async ? started(ar, 0) : ar);
  p.op("s", "copy", {{"x", w}, {"y", b}}, {{"n", 16}});
  p.op("s", "accumulate", {{"x", b}, {"y", w}}, {{"n", 16}});
  if (async) p.ops("s").push_back(waitOp(0));
  p.action("s");
  return p;
}

TEST(AsyncMemoryTest, AnInFlightBufferIsLiveFromItsStartThroughItsWait) {
  for (bool async : {false, true}) {
    const auto m = testing::measureMemory(inFlightMemoryPlan(async));
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->opsExecuted, async ? 5 : 4);
    EXPECT_EQ(m->peakLiveBytes, async ? 256 : 192) << (async ? "async" : "sync");
    EXPECT_EQ(m->peakPosition, async ? 2 : 0) << (async ? "async" : "sync");
  }
}

// Two ranks running a dp = 2 program directly: rank 0 starts an all-reduce on "comm" and then runs a
// long compute op; rank 1 starts its step only later, so rank 0's all-reduce is still in its
// communicator call (on the comm worker) while rank 0's compute runs: the two intervals overlap.
TEST(AsyncTraceTest, CommLaneIntervalOverlapsComputeOfTheSameRank) {
  constexpr int64_t N = 256;
  PlanBuilder p(8, 2, 1, 1);
  p.manifest["features"] = {"async"};
  p.manifest["batch"]["dp"] = 2;
  p.manifest["batch"]["global_batch"] = 2;
  p.manifest["mesh"] = {{"dp", 2}, {"tp", 1}, {"pp", 1}};
  p.manifest["programs"][0]["ranks"] = {0, 1};
  p.program["queues"] = {"compute", "comm"};
  const int64_t g = p.buffer("g", "grad", {64});
  const int64_t x = p.buffer("x", "activation", {N, N});
  const int64_t w = p.buffer("w", "param", {N, N});
  const int64_t y = p.buffer("y", "activation", {N, N});
  p.ops("s").push_back(started(allReduce({g}), 3));
  for (int i = 0; i < 16; ++i)
    p.op("s", "linear_fwd", {{"x", x}, {"w", w}, {"y", y}}, {{"M", N}, {"K", N}, {"N", N}, {"layout", "out_in"}});
  p.ops("s").push_back(waitOp(3));
  p.action("s");
  auto plan = parse(p);
  ASSERT_TRUE(plan.isOk()) << plan.status().message();
  InProcessCommunicatorOptions co;
  co.worldSize = 2;
  auto comm = makeInProcessCommunicator(co);
  Timeline timelines[2];
  Status status[2];
  std::unique_ptr<Backend> backends[2];
  std::unique_ptr<Interpreter> interps[2];
  for (int r = 0; r < 2; ++r) {
    CpuBackendOptions bo;
    bo.rank = r;
    bo.communicator = comm.get();
    backends[r] = makeCpuBackend(bo);
    auto in = Interpreter::create(*plan, 0, *backends[r], r);
    ASSERT_TRUE(in.isOk()) << in.status().message();
    interps[r] = std::move(in).value();
    interps[r]->setTimeline(&timelines[r]);
  }
  std::vector<float> ones(64, 1.0f);
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(interps[r]->writeF32(g, ones.data()).isOk());
  std::thread ranks[2];
  for (int r = 0; r < 2; ++r)
    ranks[r] = std::thread([&, r] {
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      status[r] = interps[r]->runStep(0, 0.0, nullptr);
    });
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(status[r].isOk()) << status[r].message();
  auto reduced = interps[0]->readF32(g);
  ASSERT_TRUE(reduced.isOk());
  EXPECT_EQ((*reduced)[0], 1.0f);  // avg of ones
  const TimelineEvent* commEvent = nullptr;
  std::vector<const TimelineEvent*> compute;
  for (const TimelineEvent& e : timelines[0].events()) {
    if (e.lane == TraceLane::kCommunication) {
      EXPECT_EQ(e.queue, 1);
      commEvent = &e;
    } else if (e.name == "linear_fwd") {
      compute.push_back(&e);
    }
  }
  ASSERT_NE(commEvent, nullptr);
  ASSERT_EQ(compute.size(), 16u);
  // The all-reduce cannot end before rank 1 arrives (after 300 ms); rank 0's compute starts at once.
  EXPECT_LT(compute.front()->startNs, commEvent->endNs);
  EXPECT_LT(commEvent->startNs, compute.back()->endNs);
  // The wait blocked (rank 1 was late): it is on the compute lane.
  EXPECT_TRUE(std::any_of(timelines[0].events().begin(), timelines[0].events().end(),
                          [](const TimelineEvent& e) { return e.name == "wait" && e.lane == TraceLane::kCompute; }));
  // The rendered trace: lane 1 is named after the queue.
  const json doc = json::parse(renderChromeTrace({&timelines[0], &timelines[1]}));
  bool named = false;
  for (const json& e : doc["traceEvents"])
    if (e["name"] == "thread_name" && e["tid"] == 1 && e["args"]["name"] == "comm") named = true;
  EXPECT_TRUE(named);
}

}  // namespace
}  // namespace llcdist::rt
