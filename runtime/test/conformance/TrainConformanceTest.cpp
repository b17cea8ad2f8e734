// Training through runTraining() on each backend: the loss starts at ln V and falls, every step's loss
// and the saved parameters match the CPU backend's run, and steps replayed from the recorded list (a
// CUDA graph on the GPU, the list call by call on the CPU) repeat the op-by-op run's bits.
#include "Backends.h"

#include "../PlanTestUtil.h"

#include "llcdist/runtime/Safetensors.h"
#include "llcdist/runtime/TokenData.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>

#include <unistd.h>

namespace llcdist::rt::conformance {
namespace {

namespace fs = std::filesystem;

class TrainConformance : public BackendConformance {
 protected:
  void SetUp() override {
    BackendConformance::SetUp();
    if (IsSkipped()) return;
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();  // "Case/cuda"
    for (char& c : name)
      if (c == '/') c = '-';
    dir = fs::path(::testing::TempDir()) / ("llcdist-conformance-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override {
    if (!dir.empty()) fs::remove_all(dir);
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }

  // The plan `b` written under `name`, with a token file repeating 0..period-1.
  RunOptions options(const testing::PlanBuilder& b, int64_t steps, int period = 16) {
    const fs::path planDir = dir / "plan";
    fs::create_directories(planDir);
    b.write(planDir);
    std::vector<uint16_t> tokens(4096);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t(i % size_t(period));
    EXPECT_TRUE(writeTokenFile(path("tokens.bin"), tokens.data(), int64_t(tokens.size())).isOk());
    RunOptions o;
    o.planDir = planDir.string();
    o.steps = steps;
    o.quiet = true;
    o.seed = 11;
    o.data = path("tokens.bin");
    return o;
  }

  // Runs `o` on `factory`; the per-step losses, and the parameters saved after the last step.
  void train(RunOptions o, const BackendFactory& factory, const std::string& save, std::vector<double>* losses,
             std::map<std::string, std::vector<float>>* params, RunResult* result = nullptr) {
    o.backend = factory;
    o.saveParams = path(save);
    RunResult res;
    std::ostringstream progress;
    const Status st = runTraining(o, progress, &res);
    ASSERT_TRUE(st.isOk()) << st.toString();
    for (const StepRecord& s : res.steps) losses->push_back(s.loss);
    auto reader = SafetensorsReader::open(o.saveParams);
    ASSERT_TRUE(reader.isOk()) << reader.status().message();
    for (const TensorInfo& t : reader->tensors()) (*params)[t.name] = reader->readF32(t.name).value();
    if (result) *result = res;
  }

  fs::path dir;
};

// Loss and parameters against the CPU's run: the same bits on the CPU; on another backend within a
// training tolerance (its kernels sum in another order, and 40 AdamW steps carry the differences on).
TEST_P(TrainConformance, LossStartsAtLnVFallsAndMatchesTheCpu) {
  const int64_t V = 32;
  const RunOptions o = options(testing::oneLayerPlan(V, 16, 8, 2, 2), 40);
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
  RunOptions o = options(b, 6);
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
