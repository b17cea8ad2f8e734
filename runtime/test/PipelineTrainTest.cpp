// Pipeline plans end to end through runTraining() (docs/plan-format.md "Pipeline plans"): a two-stage
// pipeline of a tiny LM trains to the same parameters, losses and grad norms as the same model in one
// program (1e-6 relative; dp × pp within 1e-5 of the dp = 1 single program); a param tied across the
// stages stays one param when the plan sums its copies' gradients, and copies that diverge are caught
// at --save-params; --init-from / --save-params round-trip the tied copies; send/recv failures fail the
// run with the recv's error.
#include "PipelineTestUtil.h"
#include "TestUtil.h"

#include "llcdist/runtime/Safetensors.h"
#include "llcdist/runtime/Train.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

namespace llcdist::rt {
namespace {

using testing::json;
using testing::TinyLm;
namespace fs = std::filesystem;

class PipelineTrainTest : public testing::TrainFixture {
protected:
  PipelineTrainTest() : TrainFixture(5) {}

  std::string pipelineDir(const testing::MultiProgramPlan& p, const std::string& name) {
    const fs::path d = dir / name;
    fs::create_directories(d);
    p.write(d);
    return d.string();
  }
  // Runs `steps` steps of the plan in `planPath`, saving the params to name.safetensors.
  RunResult train(const std::string& planPath, const std::string& name, int64_t steps = 3) {
    RunOptions o = options(planPath, steps);
    o.saveParams = path(name + ".safetensors");
    RunResult res;
    Status s = run(o, &res);
    EXPECT_TRUE(s.isOk()) << name << ": " << s.message();
    return res;
  }
  // |a - b| <= rel · max(|b|, floor) for every element of every param, and the same names.
  static void expectSameParams(const std::map<std::string, std::vector<float>>& got,
                               const std::map<std::string, std::vector<float>>& want, double rel, double floor) {
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [name, w] : want) {
      ASSERT_TRUE(got.count(name)) << name;
      const std::vector<float>& g = got.at(name);
      ASSERT_EQ(g.size(), w.size()) << name;
      double worst = 0;
      for (size_t i = 0; i < w.size(); ++i)
        worst = std::max(worst, std::abs(double(g[i]) - w[i]) / std::max(floor, std::abs(double(w[i]))));
      EXPECT_LE(worst, rel) << name;
    }
  }
  static void expectSameSteps(const RunResult& got, const RunResult& want, double rel) {
    ASSERT_EQ(got.steps.size(), want.steps.size());
    for (size_t k = 0; k < want.steps.size(); ++k) {
      EXPECT_NEAR(got.steps[k].loss, want.steps[k].loss, rel * std::abs(want.steps[k].loss)) << "step " << k;
      EXPECT_NEAR(got.steps[k].gradNorm, want.steps[k].gradNorm, rel * want.steps[k].gradNorm) << "step " << k;
      EXPECT_EQ(got.steps[k].lr, want.steps[k].lr);
    }
  }
  static std::string bytes(const std::string& file) {
    std::ifstream f(file, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), {});
  }
};

// The reference model in one program vs. the same model split over two stages. Clipping is active
// (max_norm below the gradient norm), so both stages must agree on the global norm (the all_reduce of the squared norms over pp).
TEST_F(PipelineTrainTest, TwoStagePipelineMatchesSingleProgram) {
  const TinyLm c;
  const RunResult ref = train(planDir(testing::tinyLmSingle(c), "single"), "single");
  const RunResult pipe = train(pipelineDir(testing::tinyLmPipeline(c), "pipeline"), "pipeline");
  ASSERT_EQ(ref.steps.size(), 3u);
  for (const StepRecord& s : ref.steps) EXPECT_GT(s.gradNorm, c.maxNorm) << "the test needs clipping to be active";
  expectSameSteps(pipe, ref, 1e-6);
  const auto want = readAll(path("single.safetensors"));
  ASSERT_EQ(want.size(), 3u);
  expectSameParams(readAll(path("pipeline.safetensors")), want, 1e-6, 1e-3);
  // Training moved the params (the comparison is not trivially of the initial values).
  RunOptions o = options(planDir(testing::tinyLmSingle(c), "init"), 0);
  o.saveParams = path("init.safetensors");
  ASSERT_TRUE(run(o).isOk());
  EXPECT_NE(readAll(path("init.safetensors")).at("lm_head.weight"), want.at("lm_head.weight"));
  EXPECT_EQ(pipe.tokensPerStep, ref.tokensPerStep);
}

// wte is both the embedding (stage 0) and the LM head (stage 1): two copies of one param. The plan sums
// the copies' gradients with send/recv + accumulate, so both step identically and --save-params (which
// checks every copy bit for bit) writes one tensor equal to the single program's tied weight.
TEST_F(PipelineTrainTest, TiedParamAcrossStagesMatchesSingleProgram) {
  TinyLm c;
  c.tied = true;
  const RunResult ref = train(planDir(testing::tinyLmSingle(c), "single"), "single");
  const RunResult pipe = train(pipelineDir(testing::tinyLmPipeline(c), "pipeline"), "pipeline");
  for (const StepRecord& s : ref.steps) EXPECT_GT(s.gradNorm, c.maxNorm);
  expectSameSteps(pipe, ref, 1e-6);
  const auto want = readAll(path("single.safetensors"));
  ASSERT_EQ(want.size(), 2u);
  expectSameParams(readAll(path("pipeline.safetensors")), want, 1e-6, 1e-3);
}

// dp = 2 × pp = 2 (4 ranks; stage 1 is ranks {2, 3}, so the loss comes from rank 2) against the
// dp = 1 single program with the same global batch.
TEST_F(PipelineTrainTest, DataParallelPipelineMatchesSingleProgram) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    TinyLm ref;
    ref.tied = tied;
    ref.microbatches = 4;
    TinyLm pp = ref;
    pp.dp = 2;
    pp.microbatches = 2;
    const std::string name = tied ? "tied" : "untied";
    const RunResult r1 = train(planDir(testing::tinyLmSingle(ref), "single-" + name), "single-" + name);
    const RunResult r2 = train(pipelineDir(testing::tinyLmPipeline(pp), "pipeline-" + name), "pipeline-" + name);
    expectSameSteps(r2, r1, 1e-5);
    expectSameParams(readAll(path("pipeline-" + name + ".safetensors")), readAll(path("single-" + name + ".safetensors")),
                     1e-5, 1e-3);
  }
}

// Runs are bitwise reproducible, whatever the thread scheduling.
TEST_F(PipelineTrainTest, PipelineIsBitwiseDeterministic) {
  TinyLm c;
  c.tied = true;
  c.dp = 2;
  const std::string plan = pipelineDir(testing::tinyLmPipeline(c), "pipeline");
  const RunResult a = train(plan, "a"), b = train(plan, "b");
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t k = 0; k < a.steps.size(); ++k) {
    EXPECT_EQ(std::memcmp(&a.steps[k].loss, &b.steps[k].loss, sizeof(double)), 0);
    EXPECT_EQ(std::memcmp(&a.steps[k].gradNorm, &b.steps[k].gradNorm, sizeof(double)), 0);
  }
  EXPECT_EQ(bytes(path("a.safetensors")), bytes(path("b.safetensors")));
}

// Without the gradient exchange each copy of the tied param steps with its own partial gradient: the
// copies differ, and --save-params names the param, both ranks (and their programs) and the element.
TEST_F(PipelineTrainTest, DivergedTiedCopiesAreReportedAtSave) {
  TinyLm c;
  c.tied = true;
  c.syncTied = false;
  RunOptions o = options(pipelineDir(testing::tinyLmPipeline(c), "diverged"), 1);
  o.saveParams = path("out.safetensors");
  const Status s = run(o);
  ASSERT_FALSE(s.isOk());
  for (const char* part : {"--save-params", "param 'transformer.wte.weight'", "rank 1's copy (programs[1])",
                           "rank 0's (programs[0])", "at element"})
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " in: " << s.message();
  EXPECT_FALSE(fs::exists(o.saveParams));
  // At step 0 (nothing trained) the copies are identical: init writes the same values into both.
  o.steps = 0;
  EXPECT_TRUE(run(o).isOk());
}

// --init-from writes the file's tensor into every copy; --save-params (steps 0) gives it back bit for
// bit; the pipeline's init equals the single program's.
TEST_F(PipelineTrainTest, InitAndImportFillEveryCopy) {
  TinyLm c;
  c.tied = true;
  const std::string pipe = pipelineDir(testing::tinyLmPipeline(c), "pipeline");
  train(planDir(testing::tinyLmSingle(c), "single"), "single-init", 0);
  train(pipe, "pipeline-init", 0);
  EXPECT_EQ(bytes(path("single-init.safetensors")), bytes(path("pipeline-init.safetensors")));

  std::vector<float> wte = testing::randn(c.V * c.H, 1, 0.1f), w1 = testing::randn(c.H * c.H, 2, 0.1f);
  ASSERT_TRUE(writeSafetensors(path("in.safetensors"), {{"transformer.wte.weight", DType::kF32, {c.V, c.H}, wte.data()},
                                                         {"h.0.w1.weight", DType::kF32, {c.H, c.H}, w1.data()}})
                  .isOk());
  RunOptions o = options(pipe, 0);
  o.initFrom = path("in.safetensors");
  o.saveParams = path("roundtrip.safetensors");
  Status s = run(o);
  ASSERT_TRUE(s.isOk()) << s.message();
  const auto back = readAll(o.saveParams);
  EXPECT_EQ(std::memcmp(back.at("transformer.wte.weight").data(), wte.data(), wte.size() * 4), 0);
  EXPECT_EQ(std::memcmp(back.at("h.0.w1.weight").data(), w1.data(), w1.size() * 4), 0);
  // Both copies were written: after one synchronized step they still agree (save succeeds) and equal
  // the single program started from the same file.
  o = options(pipe, 1);
  o.initFrom = path("in.safetensors");
  o.saveParams = path("pipe1.safetensors");
  s = run(o);
  ASSERT_TRUE(s.isOk()) << s.message();
  o = options(path("single"), 1);
  o.initFrom = path("in.safetensors");
  o.saveParams = path("single1.safetensors");
  s = run(o);
  ASSERT_TRUE(s.isOk()) << s.message();
  expectSameParams(readAll(path("pipe1.safetensors")), readAll(path("single1.safetensors")), 1e-6, 1e-3);
  // The file must still hold every param of the plan, whichever stage holds it.
  ASSERT_TRUE(writeSafetensors(path("partial.safetensors"), {{"h.0.w1.weight", DType::kF32, {c.H, c.H}, w1.data()}}).isOk());
  o = options(pipe, 0);
  o.initFrom = path("partial.safetensors");
  s = run(o);
  EXPECT_NE(s.message().find("tensor 'transformer.wte.weight'"), std::string::npos) << s.message();
}

// Progress and the log come from the last stage's lowest rank (stage 0 has no loss buffer at all).
TEST_F(PipelineTrainTest, ProgressAndLogComeFromTheLastStage) {
  TinyLm c;
  c.dp = 2;
  RunOptions o = options(pipelineDir(testing::tinyLmPipeline(c), "pipeline"), 2);
  o.quiet = false;
  o.logJson = path("log.jsonl");
  std::ostringstream progress;
  RunResult res;
  Status s = runTraining(o, progress, &res);
  ASSERT_TRUE(s.isOk()) << s.message();
  const std::string text = progress.str();
  // Two steps, one memory line per stage (the ranks of a stage agree; the stages' arenas differ) and
  // how the steps ran.
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 5) << text;
  EXPECT_NE(text.find("memory: ranks 0-1 arena "), std::string::npos) << text;
  EXPECT_NE(text.find("memory: ranks 2-3 arena "), std::string::npos) << text;
  ASSERT_EQ(res.steps.size(), 2u);
  EXPECT_GT(res.steps[0].loss, 0.0);
  EXPECT_TRUE(std::isfinite(res.steps[0].gradNorm));
  std::ifstream log(o.logJson);
  std::string line;
  int lines = 0;
  while (std::getline(log, line)) ++lines;
  EXPECT_EQ(lines, 2);
  // The last stage must have the loss.
  testing::MultiProgramPlan p = testing::tinyLmPipeline(TinyLm{});
  p.programs[1].program["buffers"][8]["name"] = "total_loss";
  s = run(options(pipelineDir(p, "noloss"), 1));
  ASSERT_FALSE(s.isOk());
  for (const char* part : {"program-1.json", "no metric buffer named \"loss\"", "last pipeline stage"})
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " in: " << s.message();
}

// A recv that finds the wrong message fails the run with the receiver's error, naming both sides.
TEST_F(PipelineTrainTest, MismatchedTagFailsTheRun) {
  testing::MultiProgramPlan p = testing::tinyLmPipeline(TinyLm{});
  json& recv = p.programs[1].program["subroutines"][1]["ops"][1];
  ASSERT_EQ(recv["op"], "recv");
  recv["attrs"]["tag"] = 5;
  recv["loc"] = "h2 from stage 0";
  RunOptions o = options(pipelineDir(p, "mismatch"), 1);
  o.collectiveTimeoutSeconds = 60;
  const Status s = run(o);
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
  for (const char* part : {"rank 1: ", "step 0", "subroutine 'forward' op 1 (recv, loc 'h2 from stage 0')",
                           "rank 0 sent (count 256, tag 0, microbatch 0)", "expects (count 256, tag 5, microbatch 0)"})
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " in: " << s.message();
}

// A send the plan forgot: stage 1 never sends the activation gradient back (and, so that it finishes
// its step instead of waiting too, its grad_norm does not join the stage all-reduce). Stage 0's recv
// times out; the run's error names the recv's peer, axis, tag and microbatch.
TEST_F(PipelineTrainTest, MissingSendTimesOut) {
  testing::MultiProgramPlan p = testing::tinyLmPipeline(TinyLm{});
  json& bwd = p.programs[1].program["subroutines"][2]["ops"];
  ASSERT_EQ(bwd.back()["op"], "send");
  bwd.erase(bwd.size() - 1);
  json& opt = p.programs[1].program["subroutines"][3]["ops"];
  ASSERT_EQ(opt[1]["op"], "all_reduce");  // the stage norm's all-reduce over pp
  ASSERT_EQ(opt[1]["attrs"]["axis"], "pp");
  opt.erase(1);
  RunOptions o = options(pipelineDir(p, "nosend"), 1);
  o.collectiveTimeoutSeconds = 0.3;
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = run(o);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.message();
  // Both stages end up waiting: stage 0 for the missing gradient, stage 1 (a moment later) for the next
  // microbatch stage 0 never sends. Usually stage 0 times out first and aborts stage 1; when the threads
  // are scheduled so that stage 1's timeout fires first, the run reports that one. Either names the
  // stuck recv precisely.
  const bool stage0 = s.message().rfind("rank 0: ", 0) == 0;
  const std::vector<const char*> parts =
      stage0 ? std::vector<const char*>{"rank 0: ", "subroutine 'backward' op 0 (recv)",
                                        "recv(256 f32, tag 1, microbatch 0) from rank 1 on axis pp",
                                        "timed out after 0.3 s", "rank 1 has sent 0 message(s) to rank 0"}
             : std::vector<const char*>{"rank 1: ", "subroutine 'forward' op 1 (recv)",
                                        "recv(256 f32, tag 0, microbatch 1) from rank 0 on axis pp",
                                        "timed out after 0.3 s", "rank 0 has sent 1 message(s) to rank 1"};
  for (const char* part : parts) EXPECT_NE(s.message().find(part), std::string::npos) << part << " in: " << s.message();
}

}  // namespace
}  // namespace llcdist::rt
