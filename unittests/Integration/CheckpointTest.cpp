//===- CheckpointTest.cpp - save, resume and reshard a training run -------===//
//
// Issue #16's acceptance: a run checkpointed at step 3 and resumed from it is
// bitwise the uninterrupted run (losses and final parameters) on the same
// plan, for dp, tp + SP, pp under each schedule, ZeRO 1/2/3, bf16 and cp; and
// resumed on a plan for another mesh (the params and the AdamW state
// resharded) it continues within the golden rule's tolerance of the
// same-mesh continuation.
//
//===----------------------------------------------------------------------===//
#include "GoldenUtil.h"

#include "llcdist/runtime/Checkpoint.h"

#include <cstring>
#include <fstream>

using namespace llcdist;
namespace rt = llcdist::rt;
namespace fs = std::filesystem;

namespace {

struct Config {
  std::string name;
  int64_t dp = 1, tp = 1, pp = 1;
  int64_t microBatch = 1;
  std::string schedule = "1f1b";
  int64_t virtualStages = 1;
  bool sequenceParallel = false;
  int64_t zero = 0;
  std::string dtype = "f32";
  std::string model = "tiny-gpt2";
  int64_t cp = 1;
};

/// `c` with context parallelism of `cp`.
Config withCp(Config c, int64_t cp) {
  c.cp = cp;
  return c;
}

std::string modelPath(const std::string &model) {
  if (model.find("-8l") != std::string::npos)
    return std::string(LLCDIST_SOURCE_DIR) + "/unittests/Integration/Inputs/" + model + ".json";
  return model;
}

std::string compile(const Config &c) {
  TrainingPipelineOptions opt = test::goldenOptions("adamw");
  opt.mesh.dp = c.dp;
  opt.mesh.tp = c.tp;
  opt.mesh.pp = c.pp;
  opt.mesh.cp = c.cp;
  opt.pipelineSchedule = c.schedule;
  opt.virtualStages = c.virtualStages;
  opt.sequenceParallel = c.sequenceParallel;
  opt.zero = c.zero;
  TrainingShape shape;
  shape.seqLen = 16;
  shape.microBatch = c.microBatch;
  shape.globalBatch = 8;
  shape.dtype = c.dtype;
  return test::compilePlan(modelPath(c.model), shape, opt, "ckpt-" + c.name);
}

// A run of `dir` to step 6: losses by step (from the first step it ran) and
// the final parameters.
struct Trace {
  std::map<int64_t, double> losses;
  std::map<std::string, std::vector<float>> params;
};

Trace run(const std::string &dir, const std::string &tag, const std::string &checkpointDir,
        const std::string &resume) {
  rt::RunOptions o = test::goldenRunOptions(dir, 6);
  o.saveParams = dir + "/params-" + tag + ".safetensors";
  if (!checkpointDir.empty()) {
    o.checkpointDir = checkpointDir;
    o.checkpointEvery = 3;
  }
  o.resume = resume;
  rt::RunResult result;
  std::ostringstream progress;
  rt::Status st = rt::runTraining(o, progress, &result);
  EXPECT_TRUE(st.isOk()) << tag << ": " << st.toString();
  Trace r;
  for (const rt::StepRecord &s : result.steps)
    r.losses[s.step] = s.loss;
  auto reader = rt::SafetensorsReader::open(o.saveParams);
  EXPECT_TRUE(reader.isOk()) << tag << ": " << reader.status().toString();
  if (reader.isOk())
    for (const rt::TensorInfo &t : reader->tensors())
      r.params[t.name] = reader->readF32(t.name).value();
  return r;
}

// The uninterrupted run, checkpointing at steps 3 and 6 into DIR/ckpt.
Trace uninterrupted(const std::string &dir, const std::string &tag) {
  return run(dir, tag + "-full", dir + "/ckpt", "");
}

test::Trained lastThree(const Trace &r) {
  test::Trained t;
  for (int64_t s = 3; s < 6; ++s) {
    auto it = r.losses.find(s);
    t.losses.push_back(it == r.losses.end() ? std::nan("") : it->second);
  }
  t.params = r.params;
  return t;
}

void expectBitwise(const Trace &full, const Trace &resumed, const std::string &what) {
  ASSERT_EQ(resumed.losses.size(), 3u) << what << ": the resumed run runs steps 3-5";
  for (const auto &[step, loss] : resumed.losses) {
    ASSERT_TRUE(full.losses.count(step)) << what << ": step " << step;
    EXPECT_EQ(std::memcmp(&loss, &full.losses.at(step), sizeof loss), 0)
        << what << ": loss of step " << step << ": " << loss << " vs " << full.losses.at(step);
  }
  ASSERT_EQ(full.params.size(), resumed.params.size()) << what;
  for (const auto &[name, a] : full.params) {
    const std::vector<float> &b = resumed.params.at(name);
    ASSERT_EQ(a.size(), b.size()) << what << ": " << name;
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << what << ": param " << name << " differs";
  }
}

TEST(Checkpoint, ResumeOnTheSamePlanIsBitwiseTheUninterruptedRun) {
  std::vector<Config> configs = {
      {"dp2", 2, 1, 1, 2},
      {"tp2-sp", 1, 2, 1, 4, "1f1b", 1, /*sp=*/true},
      {"pp2-gpipe", 1, 1, 2, 1, "gpipe"},
      {"pp2-1f1b", 1, 1, 2, 1, "1f1b"},
      {"pp2-zb-h1", 1, 1, 2, 1, "zb-h1"},
      {"pp2-interleaved", 1, 1, 2, 1, "interleaved", 2},
      {"zero1-dp2", 2, 1, 1, 2, "1f1b", 1, false, 1},
      {"zero2-dp2", 2, 1, 1, 2, "1f1b", 1, false, 2},
      {"zero3-dp2", 2, 1, 1, 2, "1f1b", 1, false, 3},
      {"bf16-dp2", 2, 1, 1, 2, "1f1b", 1, false, 0, "bf16"},
      withCp({"cp2-dp2", 2, 1, 1, 2}, 2),
  };
  for (const Config &c : configs) {
    SCOPED_TRACE(c.name);
    const std::string dir = compile(c);
    ASSERT_FALSE(dir.empty()) << c.name << ": compilation failed";
    const Trace full = uninterrupted(dir, c.name);
    ASSERT_TRUE(fs::exists(dir + "/ckpt/step-00000003/checkpoint.json")) << c.name;
    const Trace resumed = run(dir, c.name + "-resumed", "", dir + "/ckpt/step-00000003");
    expectBitwise(full, resumed, c.name);
    // The root resumes from its newest checkpoint (step 6): nothing left to run, the same params.
    const Trace none = run(dir, c.name + "-at-end", "", dir + "/ckpt");
    EXPECT_TRUE(none.losses.empty()) << c.name;
    EXPECT_EQ(none.params.size(), full.params.size());
    for (const auto &[name, a] : full.params)
      EXPECT_EQ(std::memcmp(a.data(), none.params.at(name).data(), a.size() * 4), 0) << name;
    fs::remove_all(dir);
  }
}

// Resharding: the checkpoint of `from` at step 3 resumed on `to` continues
// within the golden tolerance of `from`'s own continuation (AdamW state).
void expectReshard(const Config &from, const Config &to) {
  const std::string what = from.name + " -> " + to.name;
  SCOPED_TRACE(what);
  const std::string src = compile(from), dst = compile(to);
  ASSERT_FALSE(src.empty() || dst.empty()) << what << ": compilation failed";
  const Trace same = uninterrupted(src, from.name);
  const Trace moved = run(dst, to.name + "-from-" + from.name, "", src + "/ckpt/step-00000003");
  test::expectSame(lastThree(same), lastThree(moved), what, test::goldenTolerance("adamw"));
  fs::remove_all(src);
  fs::remove_all(dst);
}

TEST(Checkpoint, ReshardDp4ToDp2Tp2AndBack) {
  const Config dp4{"dp4", 4, 1, 1, 2}, dp2tp2{"dp2-tp2", 2, 2, 1, 2};
  expectReshard(dp4, dp2tp2);
  expectReshard(dp2tp2, dp4);
}

// Context parallelism (issue #32): the parameters and optimizer state are
// replicated over cp, so a cp=2 checkpoint resumes at cp=1 and cp=4.
TEST(Checkpoint, ReshardCp2ToCp1AndCp4) {
  const Config cp2 = withCp({"cp2-dp2", 2, 1, 1, 2}, 2);
  expectReshard(cp2, {"cp1-dp2", 2, 1, 1, 2});
  expectReshard(cp2, withCp({"cp4", 1, 1, 1, 8}, 4));
}

TEST(Checkpoint, ReshardZero3Dp4ToPlainDp2) {
  expectReshard({"zero3-dp4", 4, 1, 1, 2, "1f1b", 1, false, 3}, {"dp2", 2, 1, 1, 2});
}

TEST(Checkpoint, ReshardPp2OneFOneBToPp4Interleaved) {
  Config from{"pp2-1f1b-8l", 1, 1, 2, 1, "1f1b"};
  Config to{"pp4-interleaved-8l", 1, 1, 4, 1, "interleaved", 2};
  from.model = to.model = "tiny-gpt2-8l";
  expectReshard(from, to);
}

TEST(Checkpoint, ReshardSingleDeviceToDp2Tp2Pp2) {
  expectReshard({"single", 1, 1, 1, 8}, {"dp2-tp2-pp2", 2, 2, 2, 1});
}

// What a resume refuses, with the fix in the message: another model, another
// global batch, a corrupted shard (naming the file and the tensor, and the
// fallback checkpoint), a missing shard.
TEST(Checkpoint, BadCheckpointsAreClearErrors) {
  const Config c{"err-dp2", 2, 1, 1, 2};
  const std::string dir = compile(c);
  ASSERT_FALSE(dir.empty());
  uninterrupted(dir, c.name);
  auto resumeError = [&](const std::string &plan, const std::string &from) {
    rt::RunOptions o = test::goldenRunOptions(plan, 6);
    o.resume = from;
    std::ostringstream progress;
    return rt::runTraining(o, progress).toString();
  };
  // Another model.
  Config other{"err-llama", 2, 1, 1, 2};
  other.model = "tiny-llama";
  const std::string llama = compile(other);
  EXPECT_NE(resumeError(llama, dir + "/ckpt").find("the checkpoint is of model 'tiny-gpt2'"), std::string::npos);
  // Another seed: the data order would change.
  {
    rt::RunOptions o = test::goldenRunOptions(dir, 6);
    o.resume = dir + "/ckpt";
    o.seed = 12;
    std::ostringstream progress;
    const std::string e = rt::runTraining(o, progress).toString();
    EXPECT_NE(e.find("pass --seed 11"), std::string::npos) << e;
  }
  // One byte of a tensor flipped in the newest checkpoint: named, with step 3 as the fallback.
  const std::string shard = dir + "/ckpt/step-00000006/rank-00000.safetensors";
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-100, std::ios::end);
    char b = 0;
    f.read(&b, 1);
    b = char(b ^ 0x40);
    f.seekp(-100, std::ios::end);
    f.write(&b, 1);
  }
  std::string e = resumeError(dir, dir + "/ckpt");
  EXPECT_NE(e.find("rank-00000.safetensors: corrupted"), std::string::npos) << e;
  EXPECT_NE(e.find("(tensor '"), std::string::npos) << e;
  EXPECT_NE(e.find("--resume " + dir + "/ckpt/step-00000003"), std::string::npos) << e;
  // Truncated, then missing.
  fs::resize_file(shard, fs::file_size(shard) - 10);
  e = resumeError(dir, dir + "/ckpt");
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  fs::remove(shard);
  e = resumeError(dir, dir + "/ckpt");
  EXPECT_NE(e.find("rank-00000.safetensors: missing"), std::string::npos) << e;
  // The step-3 checkpoint still resumes.
  EXPECT_EQ(resumeError(dir, dir + "/ckpt/step-00000003"), "OK");
  fs::remove_all(dir);
  fs::remove_all(llama);
}

} // namespace
