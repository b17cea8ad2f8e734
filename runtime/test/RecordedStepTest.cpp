// Recorded steps (CommandList.h, Interpreter.h "Recorded steps" and "Per-step inputs"): the recorder
// runs nothing and lists the calls, a replay issues them with what the per-step inputs hold at the
// time, handles and errors come out as they would op by op, and the interpreter records the second
// step unless a timeline, checking mode or the option says no. The bitwise comparison with op-by-op
// steps over the shipped meshes and schedules is unittests/Integration/RecordedStepsTest.cpp.
#include "llcdist/runtime/CommandList.h"

#include "PlanTestUtil.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace llcdist::rt {
namespace {

constexpr Stream kDefault{0};

std::vector<float> arenaFloats(Backend& b, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n), 0.0f);
  std::memcpy(v.data(), b.arenaAt(0), size_t(n) * sizeof(float));
  return v;
}

TEST(CommandListTest, RecordingRunsNothingAndEveryReplayReadsTheInputsAsTheyAreThen) {
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  ASSERT_TRUE(cpu->allocateArena(64).isOk());
  StatusOr<void*> host = cpu->allocateHostInput(4 * sizeof(float));
  ASSERT_TRUE(host.isOk());
  float* in = static_cast<float*>(*host);
  for (int i = 0; i < 4; ++i) in[i] = float(i + 1);
  CommandList list;
  CommandRecorder rec(*cpu, list);
  ASSERT_TRUE(rec.copyHostInput(kDefault, cpu->arenaAt(0), in, 4 * sizeof(float)).isOk());
  ASSERT_TRUE(rec.fillZero(kDefault, 8, 4).isOk());  // element 2
  EXPECT_EQ(list.size(), 2u);
  EXPECT_EQ(arenaFloats(*cpu, 4), (std::vector<float>{0, 0, 0, 0}));  // nothing ran
  ASSERT_TRUE(list.replay(*cpu, 1).isOk());
  EXPECT_EQ(arenaFloats(*cpu, 4), (std::vector<float>{1, 2, 0, 4}));
  for (int i = 0; i < 4; ++i) in[i] = float(10 * (i + 1));
  ASSERT_TRUE(list.replay(*cpu, 2).isOk());
  EXPECT_EQ(arenaFloats(*cpu, 4), (std::vector<float>{10, 20, 0, 40}));
}

TEST(CommandListTest, ACollectiveHandleIsTheReplaysOwn) {
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  ASSERT_TRUE(cpu->allocateArena(64).isOk());
  StatusOr<Channel> ch = cpu->createChannel({0});
  ASSERT_TRUE(ch.isOk());
  CommandList list;
  CommandRecorder rec(*cpu, list);
  for (int i = 0; i < 2; ++i) {
    StatusOr<CollectiveHandle> h =
        rec.allReduceAsync(kDefault, cpu->arenaAt(0), 4, CommDType::kF32, ReduceOp::kSum, *ch);
    ASSERT_TRUE(h.isOk());
    EXPECT_EQ(h->id, i);  // the recorder's numbers
    ASSERT_TRUE(rec.waitCollective(kDefault, *h).isOk());
  }
  EXPECT_EQ(list.handles(), 2);
  // Each replay waits for the handles it issued (the backend's numbers go on: 0, 1, then 2, 3).
  ASSERT_TRUE(list.replay(*cpu, 0).isOk());
  const Status again = list.replay(*cpu, 1);
  EXPECT_TRUE(again.isOk()) << again.toString();
  EXPECT_FALSE(rec.waitCollective(kDefault, CollectiveHandle{7}).isOk());  // never recorded
}

TEST(CommandListTest, HostReadsClockAndAllocationAreRefused) {
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  ASSERT_TRUE(cpu->allocateArena(64).isOk());
  CommandList list;
  CommandRecorder rec(*cpu, list);
  float x = 0;
  const Status read = rec.copyToHost(kDefault, &x, 0, 4);
  EXPECT_EQ(read.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(read.message().find("read device memory on the host"), std::string::npos) << read.message();
  EXPECT_NE(rec.markTime(kDefault).status().message().find("--trace"), std::string::npos);
  EXPECT_FALSE(rec.copyToDevice(kDefault, 0, &x, 4).isOk());
  EXPECT_FALSE(rec.allocateStaging(4).isOk());
  EXPECT_FALSE(rec.createStream().isOk());
  EXPECT_FALSE(rec.synchronize().isOk());
  EXPECT_EQ(list.size(), 0u);
}

TEST(CommandListTest, AReplayedErrorNamesTheStepAndTheRecordedOp) {
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  ASSERT_TRUE(cpu->allocateArena(64).isOk());
  CommandList list;
  CommandRecorder rec(*cpu, list);
  KernelCall bad;  // an optimizer update bound without the step's values
  bad.kind = schema::OpKind::kSgd;
  bad.args = {{cpu->arenaAt(0)}, {cpu->arenaAt(16)}, {}};
  bad.argElems = {{4}, {4}, {}};
  bad.params = OptimizerParams{};
  rec.setContext("action 3: program-0.json: subroutine 'optimizer' op 1 (sgd)");
  ASSERT_TRUE(rec.launch(kDefault, bad).isOk());
  EXPECT_EQ(list.launches(), 1);
  const Status st = list.replay(*cpu, 9);
  ASSERT_FALSE(st.isOk());
  EXPECT_EQ(st.message().rfind("step 9, action 3: program-0.json: subroutine 'optimizer' op 1 (sgd): ", 0), 0u)
      << st.message();
  EXPECT_NE(st.message().find("without the step's values"), std::string::npos) << st.message();
}

class RecordedStepTrainTest : public testing::TrainFixture {
 protected:
  RecordedStepTrainTest() : TrainFixture(5) {}
};

TEST_F(RecordedStepTrainTest, TheSecondStepIsRecordedAndTheRunSaysHow) {
  const std::string plan = planDir(testing::oneLayerPlan(16, 8, 4, 1, 2));
  RunResult res;
  RunOptions o = options(plan, 4);
  ASSERT_TRUE(run(o, &res).isOk());
  EXPECT_EQ(res.stepExecution, "replayed");
  EXPECT_NE(res.stepExecutionLine.find("kernel launches), recorded once, replayed call by call"), std::string::npos)
      << res.stepExecutionLine;
  EXPECT_NE(res.stepExecutionLine.find("the cpu backend has no device graphs"), std::string::npos);
  o.steps = 1;
  ASSERT_TRUE(run(o, &res).isOk());
  EXPECT_EQ(res.stepExecutionLine, "steps: op by op (one step)\n");
  o.steps = 3;
  o.recordSteps = false;
  ASSERT_TRUE(run(o, &res).isOk());
  EXPECT_EQ(res.stepExecution, "op by op");
  EXPECT_NE(res.stepExecutionLine.find("--cuda-graphs off"), std::string::npos) << res.stepExecutionLine;
  o.recordSteps = true;
  o.profile = true;
  std::ostringstream progress;
  ASSERT_TRUE(runTraining(o, progress, &res).isOk());
  EXPECT_NE(res.stepExecutionLine.find("op by op (a trace or profile times every op"), std::string::npos)
      << res.stepExecutionLine;
  o.profile = false;
  o.checkAsync = true;
  ASSERT_TRUE(run(o, &res).isOk());
  EXPECT_NE(res.stepExecutionLine.find("--check-async"), std::string::npos) << res.stepExecutionLine;
}

// That replayed steps train to the op-by-op run's bits is the backend conformance suite's
// (runtime/test/conformance/TrainConformanceTest.cpp), on every backend.

// The interpreter directly: the list is made at the second step, its kernel launches are the step's
// (each op once, its bf16 conversions none here), and a data error of a later step still names its op.
TEST_F(RecordedStepTrainTest, TheRecordedListHoldsOneStepsCalls) {
  const std::string plan = planDir(testing::oneLayerPlan(16, 8, 4, 1, 2));
  StatusOr<Plan> loaded = loadPlan(plan);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().toString();
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  StatusOr<std::unique_ptr<Interpreter>> interp = Interpreter::create(*loaded, 0, *cpu);
  ASSERT_TRUE(interp.isOk()) << interp.status().toString();
  int64_t loads = 0;
  const MicrobatchSource data = [&](int64_t step, int64_t mb, int32_t* ids, int32_t* tgt, int64_t B, int64_t S) {
    ++loads;
    if (step == 3) return Status::invalidArgument("no batch " + std::to_string(mb) + " at step 3");
    for (int64_t i = 0; i < B * S; ++i) {
      ids[i] = int32_t((step * 7 + mb * 3 + i) % 16);
      tgt[i] = int32_t((step * 5 + mb + i) % 16);
    }
    return Status::ok();
  };
  ASSERT_TRUE((*interp)->runStep(0, 1e-2, data).isOk());
  EXPECT_FALSE((*interp)->stepExecution().recorded);
  ASSERT_TRUE((*interp)->runStep(1, 1e-2, data).isOk());
  const Interpreter::StepExecution& e = (*interp)->stepExecution();
  EXPECT_TRUE(e.recorded);
  EXPECT_FALSE(e.deviceGraph);
  // 2 microbatches × (embedding, linear, cross entropy fwd and bwd, 2 linear bwd, embedding bwd) + zero
  // + grad_norm + 2 adamw; + the step's values and 2 × 2 batch copies.
  EXPECT_EQ(e.launches, 2 * 7 + 4);
  EXPECT_EQ(e.commands, e.launches + 1 + 4);
  EXPECT_EQ(loads, 4);  // two steps of two microbatches
  ASSERT_TRUE((*interp)->runStep(2, 1e-2, data).isOk());
  const Status st = (*interp)->runStep(3, 1e-2, data);
  ASSERT_FALSE(st.isOk());
  EXPECT_EQ(st.message().rfind("step 3, action 1: ", 0), 0u) << st.message();
  EXPECT_NE(st.message().find("load_microbatch"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace llcdist::rt
