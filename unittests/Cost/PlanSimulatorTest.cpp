//===- PlanSimulatorTest.cpp - the simulator of compiled plans ------------===//
//
// Plans compiled by the real compiler (the built `llc-dist compile`), checked
// against numbers computed here independently: a pp=1 step is the sum of
// its ops' costs (re-derived from the program JSON), pipeline bubbles follow
// (p−1)/(m+p−1), gradient buckets hide dp communication, and bad inputs and
// cyclic waits are errors naming what is wrong.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Cost/PlanSimulator.h"

#include <algorithm>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <unistd.h>

using namespace llcdist;
using namespace llcdist::cost;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string src(const std::string &rel) { return std::string(LLCDIST_SOURCE_DIR) + "/" + rel; }
std::string input(const std::string &name) { return src("unittests/Cost/Inputs/" + name); }

/// Compiles `model` with `flags` into a fresh plan directory; "" on failure.
std::string compile(const std::string &model, const std::string &flags, const std::string &tag) {
  fs::path dir = fs::temp_directory_path() /
                 ("llcdist-sim-" + tag + "." + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::string cmd = std::string(LLCDIST_TOOL) + " compile " + model + " " + flags + " -o " +
                    dir.string() + " --quiet";
  if (std::system(cmd.c_str()) != 0) {
    ADD_FAILURE() << "failed: " << cmd;
    return "";
  }
  return dir.string();
}

Hardware hardware(const std::string &device, const std::string &topology) {
  Hardware hw;
  auto err = loadHardware(device, topology, hw);
  EXPECT_FALSE(err) << *err;
  return hw;
}

json readJson(const std::string &path) {
  std::ifstream f(path);
  return json::parse(f);
}

/// The cost of one op, re-derived from its JSON (not planOpCost): what a
/// plan with one stage and only synchronous communication adds up to.
double independentOpSeconds(const Hardware &hw, const json &prog, const json &op, int64_t dp) {
  const json &bufs = prog["buffers"];
  auto bytesOf = [&](int64_t id) { return bufs[size_t(id)]["bytes"].get<double>(); };
  auto prec = [&](int64_t id) {
    return bufs[size_t(id)]["dtype"] == "bf16" ? Precision::BF16 : Precision::F32;
  };
  std::string name = op["op"];
  const json attrs = op.value("attrs", json::object());
  const json args = op.value("args", json::object());
  if (name == "linear_fwd" || name == "linear_bwd_input" || name == "linear_bwd_weight") {
    int64_t first = name == "linear_fwd" ? args["x"].get<int64_t>() : args["dy"].get<int64_t>();
    return gemmSeconds(hw, attrs["M"], attrs["N"], attrs["K"], prec(first));
  }
  if (name == "classifier") {
    // Per chunk of rows its three GEMMs; the logits written once, read twice
    // and written once more by the loss and its gradient.
    const int64_t M = attrs["M"], N = attrs["N"], K = attrs["K"], chunk = attrs["chunk"];
    const int64_t x = args["x"], logits = args["logits"];
    double t = 0;
    for (int64_t r = 0; r < M; r += chunk)
      t += 3 * gemmSeconds(hw, std::min(chunk, M - r), N, K, prec(x));
    const double elem = bufs[size_t(logits)]["dtype"] == "bf16" ? 2 : 4;
    return t + memorySeconds(hw, 4.0 * double(M) * double(N) * elem);
  }
  if (name == "attention_fwd" || name == "attention_bwd") {
    bool bwd = name == "attention_bwd";
    // q, or the packed qkv (llcdist-plan-packed-qkv): the same dtype.
    int64_t first = bwd ? args["dout"].get<int64_t>() : args.value("q", args.value("qkv", int64_t(-1)));
    return attentionSeconds(hw, attrs["B"], attrs["S"], attrs["nh"], attrs["hd"], bwd,
                            prec(first));
  }
  if (name == "all_reduce") {
    // f32 and f64 buffers (these plans have no bf16 ones) move their bytes;
    // the dp ranks share one 8-GPU node.
    double t = 0;
    for (int64_t id : args["x"])
      t += collectiveSeconds(hw, Collective::AllReduce, bytesOf(id), Group{dp, dp});
    return t;
  }
  if (name == "load_microbatch")
    return launchSeconds(hw);
  if (name == "wait")
    return 0;
  double bytes = 0;
  for (auto &[role, v] : args.items()) {
    if (v.is_array())
      for (int64_t id : v)
        bytes += bytesOf(id);
    else
      bytes += bytesOf(v.get<int64_t>());
  }
  return memorySeconds(hw, bytes);
}

double independentStepSeconds(const Hardware &hw, const std::string &dir, int64_t dp) {
  json prog = readJson(dir + "/program-0.json");
  std::map<std::string, const json *> subs;
  for (const json &s : prog["subroutines"])
    subs[s["name"]] = &s;
  double t = 0;
  for (const json &a : prog["actions"])
    for (const json &op : (*subs[a["subroutine"]])["ops"])
      t += independentOpSeconds(hw, prog, op, dp);
  return t;
}

TEST(PlanSimulator, OneStageStepIsTheSumOfItsOps) {
  Hardware hw = hardware("h100-80gb", "dgx-h100");
  for (int64_t dp : {1, 2}) {
    std::string dir = compile(src("models/tiny-gpt2.json"),
                              "--mesh dp=" + std::to_string(dp) + " --global-batch 4",
                              "sum-dp" + std::to_string(dp));
    ASSERT_FALSE(dir.empty());
    PlanSimResult r;
    auto err = simulatePlan(dir, hw, SimOptions{}, r);
    ASSERT_FALSE(err) << *err;
    double expected = independentStepSeconds(hw, dir, dp);
    EXPECT_GT(expected, 0);
    EXPECT_NEAR(r.stepSeconds, expected, 1e-9 * expected) << "dp=" << dp;
    ASSERT_EQ(r.stages.size(), 1u);
    // Synchronous plans: every collective is exposed, nothing else idles.
    EXPECT_NEAR(r.comm["dp"].exposed, r.comm["dp"].total, 1e-12);
    EXPECT_NEAR(r.comm["dp"].overlapped(), 0, 1e-12);
    if (dp == 1)
      EXPECT_EQ(r.comm["dp"].total, 0);
    else
      EXPECT_GT(r.comm["dp"].total, 0);
    EXPECT_NEAR(r.stages[0].busySeconds + r.stages[0].exposedCommSeconds, r.stepSeconds,
                1e-9 * r.stepSeconds);
    EXPECT_NEAR(r.stages[0].bubbleSeconds, 0, 1e-9 * r.stepSeconds);
    EXPECT_NEAR(r.tokensPerSecond, 4.0 * 64 / r.stepSeconds, 1e-6 * r.tokensPerSecond);
    fs::remove_all(dir);
  }
}

TEST(PlanSimulator, HfuEqualsMfuWithoutRecomputationOrPadding) {
  // tiny-llama's vocabulary (256) needs no padding and nothing is
  // recomputed, so the plan's GEMM and attention FLOPs are the model's: 3 ×
  // the forward's (attention counted whole), here derived by hand.
  Hardware hw = hardware("h100-80gb", "dgx-h100");
  std::string dir = compile(src("models/tiny-llama.json"), "--global-batch 2", "flops");
  ASSERT_FALSE(dir.empty());
  json man = readJson(dir + "/manifest.json");
  // tiny-llama: h 64, 4 layers, 8 heads × 8, kv 4 heads × 8, MLP 128, vocab 256, S 64.
  double S = man["batch"]["seq_len"], tokens = 2 * S;
  double perLayer = 2.0 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128) + 4.0 * S * 64;
  double perToken = 3 * (4 * perLayer + 2.0 * 64 * 256);
  SimOptions o;
  o.modelFlopsPerToken = perToken;
  PlanSimResult r;
  auto err = simulatePlan(dir, hw, o, r);
  ASSERT_FALSE(err) << *err;
  EXPECT_NEAR(r.executedFlops, perToken * tokens, 1e-9 * r.executedFlops);
  ASSERT_TRUE(r.mfu);
  EXPECT_NEAR(*r.mfu, r.hfu, 1e-12);
  EXPECT_NEAR(r.hfu, perToken * tokens / (r.stepSeconds * 67e12), 1e-9 * r.hfu);
  fs::remove_all(dir);
}

double meanBubbleFraction(const Hardware &hw, const std::string &flags, const std::string &tag) {
  std::string dir = compile(input("llama-8l.json"), flags, tag);
  if (dir.empty())
    return -1;
  PlanSimResult r;
  auto err = simulatePlan(dir, hw, SimOptions{}, r);
  EXPECT_FALSE(err) << *err;
  fs::remove_all(dir);
  EXPECT_EQ(r.stages.size(), 4u);
  return r.bubbleFraction;
}

TEST(PlanSimulator, PipelineBubblesFollowTheSchedules) {
  // pp = 4, m = 8: GPipe and 1F1B idle (p−1)/(m+p−1) = 3/11 of the step;
  // interleaving v = 2 chunks divides the bubble by about v (3/19).
  Hardware hw = hardware("h100-80gb", "dgx-h100");
  const double p = 4, m = 8;
  double gpipe = meanBubbleFraction(hw, "--mesh pp=4 --global-batch 8 --schedule gpipe", "gpipe");
  double f1b1 = meanBubbleFraction(hw, "--mesh pp=4 --global-batch 8 --schedule 1f1b", "1f1b");
  double inter = meanBubbleFraction(
      hw, "--mesh pp=4 --global-batch 8 --schedule interleaved --virtual-stages 2", "inter");
  EXPECT_NEAR(gpipe, (p - 1) / (m + p - 1), 0.05);
  EXPECT_NEAR(f1b1, (p - 1) / (m + p - 1), 0.05);
  EXPECT_NEAR(inter, (p - 1) / (2 * m + p - 1), 0.05);
  EXPECT_LT(inter, f1b1 - 0.05);
}

TEST(PlanSimulator, GradientBucketsHideDataParallelCommunication) {
  // One GPU per node on a 0.5 GB/s NIC: the dp all-reduces are a large part
  // of the step, and the buckets start them during the backward.
  Hardware hw = hardware("h100-80gb", input("slow-net.json"));
  PlanSimResult sync, buckets;
  std::string a = compile(src("models/tiny-llama.json"), "--mesh dp=2 --global-batch 4", "nob");
  std::string b = compile(src("models/tiny-llama.json"),
                          "--mesh dp=2 --global-batch 4 --grad-bucket-size 4000", "b");
  ASSERT_FALSE(a.empty() || b.empty());
  ASSERT_FALSE(simulatePlan(a, hw, SimOptions{}, sync));
  ASSERT_FALSE(simulatePlan(b, hw, SimOptions{}, buckets));
  EXPECT_GT(sync.comm["dp"].total, 0.01 * sync.stepSeconds);
  EXPECT_NEAR(sync.comm["dp"].overlapped(), 0, 1e-12);
  EXPECT_NEAR(buckets.comm["dp"].total, sync.comm["dp"].total, 1e-9);
  EXPECT_GT(buckets.comm["dp"].overlapped(), 0.5 * buckets.comm["dp"].total);
  // What the buckets hide is what the step saves (the compute is the same).
  EXPECT_LT(buckets.stepSeconds, sync.stepSeconds);
  EXPECT_NEAR(sync.stepSeconds - buckets.stepSeconds, buckets.comm["dp"].overlapped(),
              0.01 * sync.stepSeconds);
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(PlanSimulator, TraceHasTheRuntimesFormat) {
  Hardware hw = hardware("h100-80gb", "dgx-h100");
  std::string dir = compile(input("llama-8l.json"),
                            "--mesh dp=2,pp=2 --global-batch 8 --grad-bucket-size 20000", "trace");
  ASSERT_FALSE(dir.empty());
  PlanSimResult r;
  ASSERT_FALSE(simulatePlan(dir, hw, SimOptions{}, r));
  json t = json::parse(r.traceJson);
  EXPECT_EQ(t["displayTimeUnit"], "ms");
  std::map<int64_t, std::string> processes;
  int64_t kernels = 0, comm = 0;
  double last = 0;
  for (const json &e : t["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name")
      processes[e["pid"]] = e["args"]["name"];
    if (e["ph"] != "X")
      continue;
    EXPECT_TRUE(e["pid"] == 0 || e["pid"] == 2) << e.dump(); // the stages' lowest ranks
    (e["tid"] == 0 ? kernels : comm) += 1;
    EXPECT_TRUE(e["args"].contains("subroutine"));
    last = std::max(last, e["ts"].get<double>() + e["dur"].get<double>());
  }
  EXPECT_EQ(processes.size(), 2u);
  EXPECT_EQ(processes[2], "rank 2");
  EXPECT_GT(kernels, 100);
  EXPECT_GT(comm, 10);
  EXPECT_NEAR(last, r.stepSeconds * 1e6, 1); // ts from the first event, at 0
  fs::remove_all(dir);
}

TEST(PlanSimulator, CyclicWaitIsAnErrorNamingTheStages) {
  // Stage 0 first receives from stage 1, which first receives from stage 0.
  Hardware hw = hardware("h100-80gb", "dgx-h100");
  std::string dir = compile(src("models/tiny-llama.json"),
                            "--mesh pp=2 --global-batch 2 --schedule gpipe", "cycle");
  ASSERT_FALSE(dir.empty());
  json prog = readJson(dir + "/program-0.json");
  int64_t y = -1;
  for (json &s : prog["subroutines"])
    for (json &op : s["ops"])
      if (op["op"] == "recv")
        y = op["args"]["y"];
  ASSERT_GE(y, 0);
  for (json &s : prog["subroutines"])
    if (s["name"].get<std::string>().rfind("forward", 0) == 0) {
      json recv = {{"op", "recv"},
                   {"args", {{"y", y}}},
                   {"attrs", {{"axis", "pp"}, {"peer", 1}, {"tag", 7}}}};
      s["ops"].insert(s["ops"].begin(), recv);
      break;
    }
  std::ofstream(dir + "/program-0.json") << prog.dump();
  PlanSimResult r;
  auto err = simulatePlan(dir, hw, SimOptions{}, r);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("cyclic wait"), std::string::npos) << *err;
  EXPECT_NE(err->find("stage 0 is blocked at " + dir + "/program-0.json: subroutines[1].ops[0]"),
            std::string::npos)
      << *err;
  EXPECT_NE(err->find("recv from stage 1, tag 7"), std::string::npos) << *err;
  EXPECT_NE(err->find("stage 1 is blocked at " + dir + "/program-1.json"), std::string::npos)
      << *err;
  EXPECT_NE(err->find("(recv from stage 0, tag 0, subroutine 'forward_v1', action 1): its send "
                      "from stage 0 (message 0 of that pair) is never issued"),
            std::string::npos)
      << *err;
  fs::remove_all(dir);
}

TEST(PlanSimulator, BadInputsAreErrors) {
  Hardware hw = hardware("h100-80gb", "dgx-h100");
  PlanSimResult r;
  auto err = simulatePlan("/nonexistent/plan", hw, SimOptions{}, r);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("/nonexistent/plan: not a plan directory"), std::string::npos) << *err;

  // A device file without its "cost" object.
  json dev = readJson(src("devices/h100-80gb.json"));
  dev.erase("cost");
  fs::path noCost = fs::temp_directory_path() / ("nocost." + std::to_string(::getpid()) + ".json");
  std::ofstream(noCost) << dev.dump();
  Hardware h;
  err = loadHardware(noCost.string(), "dgx-h100", h);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("no 'cost' object"), std::string::npos) << *err;
  fs::remove(noCost);

  err = loadHardware("no-such-device", "dgx-h100", h);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("no-such-device"), std::string::npos) << *err;
  err = loadHardware("h100-80gb", "no-such-topology", h);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("no-such-topology.json"), std::string::npos) << *err;
}

} // namespace
