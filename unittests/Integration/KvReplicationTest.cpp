//===- KvReplicationTest.cpp - the golden rule for kv-head replication ----===//
//
// With fewer kv heads than tp ranks (MQA, GQA with tp > kv heads) each tp
// rank holds the kv head its query heads use, and the k/v projections'
// gradients are all-reduced over the replicas (the tp / kv ranks sharing a
// head). Every such plan reproduces the single-device plan (issue #10):
//   a tiny MQA Llama (4 heads, 1 kv head) at tp = 2 and tp = 4, a tiny GQA
//   Llama (8 heads, 2 kv heads) at tp = 4; each with and without sequence
//   parallelism, with pp = 2 (1F1B) and with dp = 2; also ZeRO 1/2/3 at
//   dp = 2 and ZB-H1 at pp = 2; SGD strict, AdamW as GoldenUtil.h documents.
// Also: the plan holds one kv head per rank (manifest sharding, local
// shapes), the replica all-reduce is over sub-groups of tp, a plan without
// it is caught by the save's replica check (the test can fail), and
// --init-from gives each rank its head (a file round-trips bit for bit).
//
//===----------------------------------------------------------------------===//
#include "GoldenUtil.h"

#include "llcdist/runtime/Plan.h"

#include <nlohmann/json.hpp>

#include <fstream>

using namespace llcdist;
namespace rt = llcdist::rt;

namespace {
using test::Trained;

std::string input(const std::string &name) {
  return std::string(LLCDIST_SOURCE_DIR) + "/unittests/Integration/Inputs/" + name + ".json";
}

struct KvConfig {
  int64_t dp = 1, tp = 2, pp = 1;
  bool sequenceParallel = false;
  int64_t zero = 0;
  std::string schedule = "1f1b";
  std::string recompute = "none";
  std::string name() const {
    return "dp" + std::to_string(dp) + "-tp" + std::to_string(tp) + "-pp" + std::to_string(pp) +
           (sequenceParallel ? "-sp" : "") + (zero ? "-zero" + std::to_string(zero) : "") +
           (pp > 1 ? "-" + schedule : "") + (recompute != "none" ? "-recompute-" + recompute : "");
  }
};

TrainingPipelineOptions optionsFor(const KvConfig &c, const std::string &optimizer) {
  TrainingPipelineOptions opt = test::goldenOptions(optimizer);
  opt.mesh.dp = c.dp;
  opt.mesh.tp = c.tp;
  opt.mesh.pp = c.pp;
  opt.sequenceParallel = c.sequenceParallel;
  opt.zero = c.zero;
  opt.pipelineSchedule = c.schedule;
  opt.recompute = c.recompute;
  return opt;
}

// Pipelined runs send one sequence per microbatch (8 / dp of them), as
// PipelineTest does; the others run the whole local batch as one microbatch.
int64_t microBatchOf(const KvConfig &c) { return c.pp > 1 ? 1 : 8 / c.dp; }

void golden(const std::string &model, const std::vector<KvConfig> &configs,
            const std::string &optimizer) {
  Trained ref = test::trainPlan(input(model), test::goldenOptions(optimizer), 8,
                                "kv-ref-" + optimizer);
  EXPECT_LT(ref.losses.back(), ref.losses.front()) << "the reference learns";
  for (const KvConfig &c : configs)
    test::expectSame(ref,
                     test::trainPlan(input(model), optionsFor(c, optimizer), microBatchOf(c),
                                     "kv-" + c.name() + "-" + optimizer),
                     model + " " + optimizer + " " + c.name(), test::goldenTolerance(optimizer));
}

std::vector<KvConfig> withVariants(int64_t tp) {
  return {{1, tp, 1, false}, {1, tp, 1, true}, {1, tp, 2, false},
          {1, tp, 2, true},  {2, tp, 1, false}, {2, tp, 2, true}};
}
} // namespace

TEST(KvReplication, MqaTp2SGD) { golden("tiny-llama-mqa", withVariants(2), "sgd"); }
TEST(KvReplication, MqaTp4SGD) { golden("tiny-llama-mqa", withVariants(4), "sgd"); }
TEST(KvReplication, GqaTp4SGD) { golden("tiny-llama-gqa", withVariants(4), "sgd"); }
// ZeRO's dp blocks of a replicated kv shard, and ZB-H1's deferred weight
// gradients (the replica all-reduce waits for the last W pass).
TEST(KvReplication, ZeroAndZeroBubbleSGD) {
  golden("tiny-llama-mqa",
         {{2, 4, 1, false, 1}, {2, 4, 1, false, 2}, {2, 4, 1, true, 3}, {1, 4, 2, false, 0, "zb-h1"}},
         "sgd");
  golden("tiny-llama-gqa", {{2, 4, 1, false, 3}, {1, 4, 2, true, 0, "zb-h1"}}, "sgd");
}
// Recomputation: selective's copy of the attention reads the saved k and v
// (it was refused at tp > kv heads before: the partitioner looked for their
// projections there too), full recomputes the projections themselves.
TEST(KvReplication, RecomputeSGD) {
  golden("tiny-llama-gqa",
         {{1, 4, 1, false, 0, "1f1b", "selective"},
          {2, 4, 1, true, 0, "1f1b", "selective"},
          {1, 4, 2, false, 0, "1f1b", "selective"},
          {1, 4, 1, true, 0, "1f1b", "full"}},
         "sgd");
}
TEST(KvReplication, MqaTp4AdamW) {
  golden("tiny-llama-mqa", {{1, 4, 1, false}, {1, 4, 2, true}, {2, 4, 1, false}}, "adamw");
}
TEST(KvReplication, GqaTp4AdamW) {
  golden("tiny-llama-gqa", {{1, 4, 1, true}, {1, 4, 2, false}, {2, 4, 1, true}}, "adamw");
}

namespace {
std::string compileKv(const std::string &model, const KvConfig &c, const std::string &tag) {
  TrainingShape shape;
  shape.seqLen = 16;
  shape.microBatch = microBatchOf(c);
  shape.globalBatch = 8;
  return test::compilePlan(input(model), shape, optionsFor(c, "sgd"), tag);
}

nlohmann::json readJson(const std::string &path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}
} // namespace

// GQA at tp = 4: kv head r / 2 on tp rank r. The manifest says so (replicas
// 2, local [head_dim, hidden]); the program all-reduces exactly the k and v
// gradients over sub-groups of 2, and the grad norm counts them once.
TEST(KvReplication, PlanHoldsOneKvHeadPerRank) {
  std::string dir = compileKv("tiny-llama-gqa", {1, 4, 1, false}, "kv-plan");
  ASSERT_FALSE(dir.empty());
  auto plan = rt::loadPlan(dir);
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  int64_t kv = 0;
  for (const rt::ParamDesc &p : plan->manifest.params) {
    bool isKv = p.name.find("k_proj") != std::string::npos ||
                p.name.find("v_proj") != std::string::npos;
    if (!isKv) {
      if (p.sharding) EXPECT_EQ(p.sharding->replicas, 1) << p.name;
      continue;
    }
    ++kv;
    ASSERT_TRUE(p.sharding) << p.name;
    EXPECT_EQ(p.sharding->replicas, 2) << p.name;
    EXPECT_EQ(p.shape, (std::vector<int64_t>{2 * 8, 64})) << p.name; // kv·head_dim x hidden
    EXPECT_EQ(p.localShape, (std::vector<int64_t>{8, 64})) << p.name; // one head
  }
  EXPECT_EQ(kv, 2 * 4) << "k_proj and v_proj of 4 layers";
  // The replica all-reduce: one op over tp sub-groups of 2, covering 8 grads.
  nlohmann::json prog = readJson(dir + "/program-0.json");
  int64_t subgroupReduces = 0, covered = 0, replicaNorms = 0;
  for (const auto &sub : prog["subroutines"])
    for (const auto &op : sub["ops"])
      if (op["op"] == "all_reduce" && op["attrs"].contains("group_size")) {
        ++subgroupReduces;
        EXPECT_EQ(op["attrs"]["group_size"], 2);
        EXPECT_EQ(op["attrs"]["axis"], "tp");
        covered += int64_t(op["args"]["x"].size());
      } else if (op["op"] == "grad_norm_sq" && op["args"].contains("replica_shards")) {
        ++replicaNorms;
        EXPECT_EQ(op["attrs"]["replicas"], 2);
        EXPECT_EQ(op["attrs"]["replica_axis"], "tp");
        EXPECT_EQ(op["args"]["replica_shards"].size(), 8u);
      }
  EXPECT_EQ(subgroupReduces, 1);
  EXPECT_EQ(covered, 8);
  EXPECT_EQ(replicaNorms, 1);
  std::filesystem::remove_all(dir);
}

// The replica reduction is needed: without it each replica updates its kv
// head with its own query heads' part, the replicas diverge, and the save
// refuses them (this is the check that would catch a wrong group).
TEST(KvReplication, WithoutReplicaReductionReplicasDiverge) {
  std::string dir = compileKv("tiny-llama-mqa", {1, 2, 1, false}, "kv-noreduce");
  ASSERT_FALSE(dir.empty());
  std::string file = dir + "/program-0.json";
  nlohmann::json prog = readJson(file);
  int64_t removed = 0;
  for (auto &sub : prog["subroutines"]) {
    nlohmann::json kept = nlohmann::json::array();
    for (auto &op : sub["ops"])
      if (op["op"] == "all_reduce" && op["attrs"].contains("group_size"))
        ++removed;
      else
        kept.push_back(op);
    sub["ops"] = kept;
  }
  ASSERT_EQ(removed, 1);
  std::ofstream(file) << prog.dump(1);
  rt::RunOptions o;
  o.planDir = dir;
  o.steps = 1;
  o.data = std::string(LLCDIST_SOURCE_DIR) + "/data/corpus_train.bin";
  o.quiet = true;
  o.saveParams = dir + "/params.safetensors";
  std::ostringstream progress;
  rt::Status st = rt::runTraining(o, progress, nullptr);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.toString().find("replicas diverged"), std::string::npos) << st.toString();
  EXPECT_NE(st.toString().find("_proj.weight"), std::string::npos) << st.toString();
  std::filesystem::remove_all(dir);
}

// --init-from slices each rank's kv head out of the Hugging Face tensor and
// the save gathers it back: with 0 steps the file round-trips bit for bit
// (MQA at tp = 4: every rank holds the one kv head).
TEST(KvReplication, InitFromRoundTrips) {
  for (auto [model, tp] : {std::pair<std::string, int64_t>{"tiny-llama-mqa", 4},
                           {"tiny-llama-gqa", 4}}) {
    Trained ref = test::trainPlan(input(model), test::goldenOptions("sgd"), 8, "kv-rt-ref");
    std::string refFile = test::tempPath("llcdist-kv-rt-ref").string() + ".safetensors";
    {
      std::vector<rt::TensorToWrite> tensors;
      for (const auto &[name, v] : ref.params) {
        rt::TensorToWrite t;
        t.name = name;
        t.dtype = rt::DType::kF32;
        t.data = v.data();
        tensors.push_back(t);
      }
      // Shapes come from the plan's manifest (the same model).
      std::string dir0 = compileKv(model, {1, 1, 1, false}, "kv-rt-shapes");
      ASSERT_FALSE(dir0.empty());
      auto plan0 = rt::loadPlan(dir0);
      ASSERT_TRUE(plan0.isOk());
      for (auto &t : tensors)
        for (const rt::ParamDesc &p : plan0->manifest.params)
          if (p.name == t.name)
            t.shape = p.shape;
      std::filesystem::remove_all(dir0);
      ASSERT_TRUE(rt::writeSafetensors(refFile, std::move(tensors), {{"format", "pt"}}).isOk());
    }
    std::string dir = compileKv(model, {1, tp, 1, false}, "kv-rt");
    ASSERT_FALSE(dir.empty());
    rt::RunOptions o;
    o.planDir = dir;
    o.steps = 0;
    o.initFrom = refFile;
    o.quiet = true;
    o.saveParams = dir + "/params.safetensors";
    std::ostringstream progress;
    rt::Status st = rt::runTraining(o, progress, nullptr);
    ASSERT_TRUE(st.isOk()) << st.toString();
    auto reader = rt::SafetensorsReader::open(o.saveParams);
    ASSERT_TRUE(reader.isOk());
    for (const auto &[name, v] : ref.params) {
      auto got = reader->readF32(name);
      ASSERT_TRUE(got.isOk()) << name;
      EXPECT_EQ(got.value(), v) << model << " " << name;
    }
    std::filesystem::remove_all(dir);
    std::filesystem::remove(refFile);
  }
}
