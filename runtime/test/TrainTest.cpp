// End-to-end training through runTraining() on hand-written plans: loss at init and its decrease,
// gradient accumulation equivalence, determinism, safetensors round trip, init-from and data errors.
#include "PlanTestUtil.h"
#include "TestUtil.h"

#include "llcdist/runtime/Safetensors.h"
#include "llcdist/runtime/TokenData.h"
#include "llcdist/runtime/Train.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <tuple>

namespace llcdist::rt {
namespace {

using testing::oneLayerPlan;
namespace fs = std::filesystem;

class TrainTest : public testing::TrainFixture {
 protected:
  TrainTest() : TrainFixture(7) {}
};

TEST_F(TrainTest, LossStartsAtLnVAndFalls) {
  const int64_t V = 32;
  const std::string plan = planDir(oneLayerPlan(V, 16, 8, 2, 1));
  RunOptions o = options(plan, 40);
  o.data = repeatingTokens(4096, 16);
  o.logJson = path("log.jsonl");
  RunResult res;
  Status s = run(o, &res);
  ASSERT_TRUE(s.isOk()) << s.message();
  ASSERT_EQ(res.steps.size(), 40u);
  EXPECT_NEAR(res.steps[0].loss, std::log(double(V)), 2e-3);
  EXPECT_GT(res.steps[0].gradNorm, 0.0);
  EXPECT_DOUBLE_EQ(res.steps[0].lr, 1e-2);
  EXPECT_LT(res.steps.back().loss, 0.5 * std::log(double(V))) << "the loss did not fall";
  EXPECT_EQ(res.tokensPerStep, 16);
  // The log has one complete JSON record per step.
  std::ifstream log(o.logJson);
  std::string line;
  int n = 0;
  while (std::getline(log, line)) {
    const auto j = testing::json::parse(line);
    EXPECT_EQ(j["step"], n);
    EXPECT_NEAR(j["loss"].get<double>(), res.steps[size_t(n)].loss, 1e-6);
    for (const char* k : {"lr", "grad_norm", "tokens_per_s"}) EXPECT_TRUE(j.contains(k)) << k;
    ++n;
  }
  EXPECT_EQ(n, 40);
}

TEST_F(TrainTest, ProgressLinesUnlessQuiet) {
  const std::string plan = planDir(oneLayerPlan(16, 8, 4, 1, 1));
  RunOptions o = options(plan, 3);
  o.quiet = false;
  std::ostringstream progress;
  ASSERT_TRUE(runTraining(o, progress).isOk());
  const std::string lines = progress.str();
  EXPECT_NE(lines.find("step 3/3 | loss "), std::string::npos) << lines;
  // Three step lines, the memory line and how the steps ran (Train.h).
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 5) << lines;
  EXPECT_NE(lines.find("\nmemory: rank 0 arena "), std::string::npos) << lines;
  EXPECT_NE(lines.find("\nsteps: the second step's "), std::string::npos) << lines;
  o.progressIsTty = true;
  std::ostringstream tty;
  ASSERT_TRUE(runTraining(o, tty).isOk());
  const std::string ttyText = tty.str();
  EXPECT_EQ(std::count(ttyText.begin(), ttyText.end(), '\r'), 3);
  EXPECT_EQ(std::count(ttyText.begin(), ttyText.end(), '\n'), 3) << ttyText;  // the progress line, memory, steps
}

TEST_F(TrainTest, GradientAccumulationMatchesLargerMicroBatch) {
  const std::string tokens = repeatingTokens(4096, 29);
  const std::string a = planDir(oneLayerPlan(32, 16, 8, /*B=*/1, /*microbatches=*/2), "a");
  const std::string b = planDir(oneLayerPlan(32, 16, 8, /*B=*/2, /*microbatches=*/1), "b");
  RunResult ra, rb;
  for (auto [plan, res, out] : {std::tuple{a, &ra, path("a.safetensors")}, std::tuple{b, &rb, path("b.safetensors")}}) {
    RunOptions o = options(plan, 4);
    o.data = tokens;
    o.shuffle = true;
    o.saveParams = out;
    Status s = run(o, res);
    ASSERT_TRUE(s.isOk()) << s.message();
  }
  for (size_t k = 0; k < ra.steps.size(); ++k) {
    EXPECT_NEAR(ra.steps[k].loss, rb.steps[k].loss, 1e-6 * std::abs(rb.steps[k].loss)) << "step " << k;
    EXPECT_NEAR(ra.steps[k].gradNorm, rb.steps[k].gradNorm, 1e-5 * rb.steps[k].gradNorm) << "step " << k;
  }
  const auto pa = readAll(path("a.safetensors")), pb = readAll(path("b.safetensors"));
  ASSERT_EQ(pa.size(), 2u);
  for (const auto& [name, va] : pa) {
    const std::vector<float>& vb = pb.at(name);
    double maxRel = 0;
    for (size_t i = 0; i < va.size(); ++i)
      maxRel = std::max(maxRel, std::abs(double(va[i]) - vb[i]) / std::max(1e-2, std::abs(double(vb[i]))));
    EXPECT_LT(maxRel, 1e-6) << name;
  }
}

TEST_F(TrainTest, SameSeedIsBitwiseDeterministic) {
  const std::string plan = planDir(oneLayerPlan(32, 16, 8, 2, 2));
  RunResult r1, r2, r3;
  RunOptions o = options(plan, 5);
  o.saveParams = path("1.safetensors");
  ASSERT_TRUE(run(o, &r1).isOk());
  o.saveParams = path("2.safetensors");
  ASSERT_TRUE(run(o, &r2).isOk());
  for (size_t k = 0; k < r1.steps.size(); ++k) {
    EXPECT_EQ(std::memcmp(&r1.steps[k].loss, &r2.steps[k].loss, sizeof(double)), 0) << "step " << k;
    EXPECT_EQ(std::memcmp(&r1.steps[k].gradNorm, &r2.steps[k].gradNorm, sizeof(double)), 0) << "step " << k;
  }
  std::ifstream f1(path("1.safetensors"), std::ios::binary), f2(path("2.safetensors"), std::ios::binary);
  const std::string s1((std::istreambuf_iterator<char>(f1)), {}), s2((std::istreambuf_iterator<char>(f2)), {});
  EXPECT_FALSE(s1.empty());
  EXPECT_EQ(s1, s2);
  o.seed = 8;  // another seed: other init and other synthetic data
  ASSERT_TRUE(run(o, &r3).isOk());
  EXPECT_NE(r1.steps[0].loss, r3.steps[0].loss);
}

TEST_F(TrainTest, InitFromThenSaveRoundTripsExactly) {
  const int64_t V = 16, H = 8;
  const std::string plan = planDir(oneLayerPlan(V, H, 4, 1, 1));
  std::vector<float> wte = testing::randn(V * H, 1), lm = testing::randn(V * H, 2);
  wte[3] = -0.0f;
  wte[5] = 1e-40f;  // a denormal survives too
  ASSERT_TRUE(writeSafetensors(path("in.safetensors"), {{"transformer.wte.weight", DType::kF32, {V, H}, wte.data()},
                                                        {"lm_head.weight", DType::kF32, {V, H}, lm.data()}})
                  .isOk());
  RunOptions o = options(plan, 0);
  o.initFrom = path("in.safetensors");
  o.saveParams = path("out.safetensors");
  Status s = run(o);
  ASSERT_TRUE(s.isOk()) << s.message();
  const auto out = readAll(o.saveParams);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(std::memcmp(out.at("transformer.wte.weight").data(), wte.data(), wte.size() * 4), 0);
  EXPECT_EQ(std::memcmp(out.at("lm_head.weight").data(), lm.data(), lm.size() * 4), 0);
  EXPECT_EQ(SafetensorsReader::open(o.saveParams)->metadata().at("format"), "pt");

  // BF16 input is converted to f32.
  std::vector<uint16_t> wteB(wte.size()), lmB(lm.size());
  for (size_t i = 0; i < wte.size(); ++i) wteB[i] = floatToBf16(wte[i]), lmB[i] = floatToBf16(lm[i]);
  ASSERT_TRUE(writeSafetensors(path("bf16.safetensors"), {{"transformer.wte.weight", DType::kBF16, {V, H}, wteB.data()},
                                                          {"lm_head.weight", DType::kBF16, {V, H}, lmB.data()}})
                  .isOk());
  o.initFrom = path("bf16.safetensors");
  ASSERT_TRUE(run(o).isOk());
  const auto conv = readAll(o.saveParams);
  for (size_t i = 0; i < wte.size(); ++i) ASSERT_EQ(conv.at("transformer.wte.weight")[i], bf16ToFloat(wteB[i]));
}

TEST_F(TrainTest, InitFromErrorsNameFileAndTensor) {
  const int64_t V = 16, H = 8;
  const std::string plan = planDir(oneLayerPlan(V, H, 4, 1, 1));
  std::vector<float> w(size_t(V * H), 0.5f), wrong(size_t(V * (H + 1)), 0.5f);
  RunOptions o = options(plan, 1);
  auto expectError = [&](const std::string& file, std::vector<std::string> parts) {
    o.initFrom = file;
    Status s = run(o);
    ASSERT_FALSE(s.isOk());
    for (const std::string& p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << s.message();
  };
  ASSERT_TRUE(
      writeSafetensors(path("missing.safetensors"), {{"lm_head.weight", DType::kF32, {V, H}, w.data()}}).isOk());
  expectError(path("missing.safetensors"), {"missing.safetensors", "'transformer.wte.weight'", "missing"});
  ASSERT_TRUE(writeSafetensors(path("shape.safetensors"), {{"lm_head.weight", DType::kF32, {V, H + 1}, wrong.data()},
                                                           {"transformer.wte.weight", DType::kF32, {V, H}, w.data()}})
                  .isOk());
  expectError(path("shape.safetensors"), {"shape.safetensors", "'lm_head.weight'", "[16, 9]", "[16, 8]"});
  ASSERT_TRUE(
      writeSafetensors(path("extra.safetensors"), {{"lm_head.weight", DType::kF32, {V, H}, w.data()},
                                                   {"transformer.wte.weight", DType::kF32, {V, H}, w.data()},
                                                   {"transformer.h.0.attn.bias", DType::kF32, {V, H}, w.data()}})
          .isOk());
  expectError(path("extra.safetensors"), {"extra.safetensors", "'transformer.h.0.attn.bias'", "not parameters"});
  // Truncated: a valid file cut short.
  fs::copy_file(path("extra.safetensors"), path("trunc.safetensors"));
  fs::resize_file(path("trunc.safetensors"), fs::file_size(path("trunc.safetensors")) - 100);
  expectError(path("trunc.safetensors"), {"trunc.safetensors"});
  expectError(path("nonexistent.safetensors"), {"nonexistent.safetensors"});
}

TEST_F(TrainTest, DataErrorsNameFileAndPosition) {
  const std::string plan = planDir(oneLayerPlan(16, 8, 4, 1, 1));
  RunOptions o = options(plan, 1);
  std::vector<uint16_t> t(100, 3);
  t[42] = 16;  // == vocab_size
  ASSERT_TRUE(writeTokenFile(path("big.bin"), t.data(), int64_t(t.size())).isOk());
  o.data = path("big.bin");
  Status s = run(o);
  ASSERT_FALSE(s.isOk());
  for (const char* p : {"big.bin", "token 16", "position 42", "vocab_size 16"})
    EXPECT_NE(s.message().find(p), std::string::npos) << s.message();
  testing::writeText(path("garbage.bin"), std::string(2000, 'x'));
  o.data = path("garbage.bin");
  s = run(o);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("garbage.bin"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("magic"), std::string::npos) << s.message();
}

TEST_F(TrainTest, RunLevelErrors) {
  testing::PlanBuilder b = oneLayerPlan(16, 8, 4, 1, 1);
  RunOptions o = options(planDir(b), -1);
  EXPECT_NE(run(o).message().find("--steps"), std::string::npos);
  // A pipeline-parallel plan without the feature "pipeline" is refused with a clear message.
  b.manifest["mesh"]["pp"] = 2;
  b.manifest["programs"][0]["ranks"] = {0, 1};
  o = options(planDir(b, "pp2"), 1);
  Status s = run(o);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("mesh.pp"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("pipeline parallelism"), std::string::npos) << s.message();
  // Log file that cannot be opened.
  o = options(planDir(oneLayerPlan(16, 8, 4, 1, 1), "ok"), 1);
  o.logJson = path("no/such/dir/log.jsonl");
  s = run(o);
  EXPECT_NE(s.message().find("--log-json"), std::string::npos) << s.message();
}

TEST_F(TrainTest, SyntheticDataIsInVocabAndIndependentOfMicroBatching) {
  // Same global batch through (B=2, M=1) and (B=1, M=2): same loss at step 0 (same params, same data).
  RunResult ra, rb;
  ASSERT_TRUE(run(options(planDir(oneLayerPlan(32, 8, 4, 2, 1), "a"), 1), &ra).isOk());
  ASSERT_TRUE(run(options(planDir(oneLayerPlan(32, 8, 4, 1, 2), "b"), 1), &rb).isOk());
  EXPECT_NEAR(ra.steps[0].loss, rb.steps[0].loss, 1e-6);
}

}  // namespace
}  // namespace llcdist::rt
