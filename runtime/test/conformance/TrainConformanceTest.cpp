// Training through runTraining() on each backend: the loss starts at ln V and falls, every step's loss
// and the saved parameters match the CPU backend's run, and steps replayed from the recorded list (a
// CUDA graph on the GPU, the list call by call on the CPU) repeat the op-by-op run's bits.
#include "Backends.h"

#include "../PlanTestUtil.h"

#include <cmath>
#include <cstring>

namespace llcdist::rt::conformance {
namespace {

class TrainConformance : public testing::TrainFixture, public ::testing::WithParamInterface<BackendUnderTest> {
 protected:
  TrainConformance() : TrainFixture(11) {}
  void SetUp() override {
    TrainFixture::SetUp();
    if (!backend().unavailable.empty()) GTEST_SKIP() << backend().name << ": " << backend().unavailable;
  }
  const BackendUnderTest& backend() const { return GetParam(); }

  // The plan `b` for `steps` steps on tokens repeating 0..15.
  RunOptions optionsFor(const testing::PlanBuilder& b, int64_t steps) {
    RunOptions o = options(planDir(b), steps);
    o.data = repeatingTokens(4096, 16);
    return o;
  }

  // Runs `o` on `factory`; the per-step losses, and the parameters saved after the last step.
  void train(RunOptions o, const BackendFactory& factory, const std::string& save, std::vector<double>* losses,
             std::map<std::string, std::vector<float>>* params, RunResult* result = nullptr) {
    o.backend = factory;
    o.saveParams = path(save);
    RunResult res;
    const Status st = run(o, &res);
    ASSERT_TRUE(st.isOk()) << st.toString();
    for (const StepRecord& s : res.steps) losses->push_back(s.loss);
    *params = readAll(o.saveParams);
    if (result) *result = res;
  }
};

// Loss and parameters against the CPU's run: the same bits on the CPU; on another backend within a
// training tolerance (its kernels sum in another order, and 40 AdamW steps carry the differences on).
TEST_P(TrainConformance, LossStartsAtLnVFallsAndMatchesTheCpu) {
  const int64_t V = 32;
  const RunOptions o = optionsFor(testing::oneLayerPlan(V, 16, 8, 2, 2), 40);
  std::vector<double> losses, cpuLosses;
  std::map<std::string, std::vector<float>> params, cpuParams;
  train(o, backend().factory, "params.safetensors", &losses, &params);
  train(o, cpuBackendFactory(), "cpu.safetensors", &cpuLosses, &cpuParams);
  ASSERT_EQ(losses.size(), 40u);
  EXPECT_NEAR(losses[0], std::log(double(V)), 2e-3);
  EXPECT_LT(losses.back(), 0.5 * std::log(double(V))) << "the loss did not fall";
  const Tolerance tol = backend().f32.bitwise() ? Tolerance{} : Tolerance{1e-4, 1e-3};
  for (size_t s = 0; s < losses.size(); ++s)
    EXPECT_TRUE(tol.within(losses[s], cpuLosses[s]))
        << "step " << s << ": " << losses[s] << " vs the CPU's " << cpuLosses[s];
  ASSERT_EQ(params.size(), cpuParams.size());
  for (const auto& [name, v] : cpuParams) {
    const std::vector<float>& got = params.at(name);
    ASSERT_EQ(got.size(), v.size()) << name;
    int misses = 0;
    for (size_t i = 0; i < v.size(); ++i)
      if (!tol.within(got[i], v[i]) && misses++ < 4)
        ADD_FAILURE() << name << "[" << i << "]: " << got[i] << " vs the CPU's " << v[i];
  }
}

// A replayed step reads the step's learning rate, step count and batches as they are at that step: with
// a rate that changes every step, the recorded run and the op-by-op one end on the same bits.
TEST_P(TrainConformance, RecordedStepsTrainToTheOpByOpBits) {
  testing::PlanBuilder b = testing::oneLayerPlan(16, 8, 4, 1, 2);
  b.manifest["lr_schedule"] = {
      {"kind", "cosine"}, {"max_lr", 2e-2}, {"min_lr", 1e-3}, {"warmup_steps", 2}, {"total_steps", 6}};
  RunOptions o = optionsFor(b, 6);
  std::map<std::string, std::vector<float>> params[2];
  std::vector<double> losses[2];
  for (int record = 0; record < 2; ++record) {
    o.recordSteps = record == 1;
    RunResult res;
    train(o, backend().factory, record ? "recorded.safetensors" : "op-by-op.safetensors", &losses[record],
          &params[record], &res);
    if (record)
      EXPECT_EQ(res.stepExecution, backend().name == "cpu" ? "replayed" : "cuda graph") << res.stepExecutionLine;
    else
      EXPECT_EQ(res.stepExecution, "op by op");
  }
  EXPECT_EQ(losses[0], losses[1]);
  ASSERT_EQ(params[0].size(), 2u);
  for (const auto& [name, v] : params[0])
    EXPECT_EQ(std::memcmp(v.data(), params[1].at(name).data(), v.size() * sizeof(float)), 0) << name;
}

INSTANTIATE_TEST_SUITE_P(Backends, TrainConformance, ::testing::ValuesIn(backendsUnderTest()), backendTestName);

}  // namespace
}  // namespace llcdist::rt::conformance
