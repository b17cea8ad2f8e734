// --profile's table (Profile.h) from a synthetic timeline whose numbers are known.
#include "llcdist/runtime/Profile.h"

#include <gtest/gtest.h>

#include <sstream>

namespace llcdist::rt {
namespace {

TimelineEvent ev(std::string_view name, std::string_view variant, int64_t step, int64_t start, int64_t end,
                 double flops = 0, int queue = 0) {
  TimelineEvent e{name, TraceLane::kCompute, start, end, nullptr, nullptr, step, -1, 0};
  e.variant = variant;
  e.flops = flops;
  e.queue = queue;
  return e;
}

TEST(Profile, PerKindTimesSharesTflopsAndIdle) {
  Timeline t;
  // Step 0 (warm-up, not counted): one slow GEMM.
  t.record(ev("linear_fwd", "cublaslt", 0, 0, 1'000'000'000, 1e12));
  // Steps 1 and 2: a 2 ms GEMM of 1e12 FLOP (500 TFLOP/s), a 0.5 ms add, a 0.5 ms gap; the step spans 3 ms.
  for (int64_t s = 1; s <= 2; ++s) {
    const int64_t t0 = s * 10'000'000;
    t.record(ev("linear_fwd", "cublaslt", s, t0, t0 + 2'000'000, 1e12));
    t.record(ev("add", "own", s, t0 + 2'500'000, t0 + 3'000'000));
    // Communication on another queue overlaps: counted as a row, not in the step's span.
    t.record(ev("all_reduce", "", s, t0 + 100, t0 + 9'000'000, 0, 1));
  }
  const Profile p = computeProfile(t, 1, 3);
  EXPECT_EQ(p.rank, 3);
  EXPECT_EQ(p.firstStep, 1);
  EXPECT_EQ(p.steps, 2);
  EXPECT_DOUBLE_EQ(p.stepNs, 3e6);
  EXPECT_DOUBLE_EQ(p.opsPerStep, 3.0);
  ASSERT_EQ(p.rows.size(), 3u);
  EXPECT_EQ(p.rows[0].kind, "all_reduce");  // largest first
  EXPECT_EQ(p.rows[1].kind, "linear_fwd");
  EXPECT_EQ(p.rows[1].variant, "cublaslt");
  EXPECT_DOUBLE_EQ(p.rows[1].calls, 1.0);
  EXPECT_DOUBLE_EQ(p.rows[1].ns, 2e6);
  EXPECT_NEAR(p.rows[1].tflops(), 500.0, 1e-9);
  EXPECT_NEAR(p.rows[1].share, 2.0 / 3.0, 1e-12);
  EXPECT_EQ(p.rows[2].kind, "add");
  EXPECT_DOUBLE_EQ(p.rows[2].tflops(), 0.0);
  std::ostringstream out;
  Interpreter::KernelChoiceSummary c{schema::OpKind::kAttentionFwd, "own", 12, 48, "cudnn: head dim 20"};
  printProfile(p, {c}, out);
  const std::string s = out.str();
  EXPECT_NE(s.find("profile: rank 3, steps 1-2 (2), 3.000 ms/step on the device, 3 ops/step"), std::string::npos) << s;
  EXPECT_NE(s.find("linear_fwd"), std::string::npos) << s;
  EXPECT_NE(s.find("500.0"), std::string::npos) << s;
  EXPECT_NE(s.find("kernels: attention_fwd own x12 (48 bf16 arguments converted to f32) (passed over cudnn: head dim 20)"),
            std::string::npos)
      << s;
}

TEST(Profile, SkipFirstStepLeavesOutTheEarliestRecordedStep) {
  Timeline t;
  for (int64_t s : {7, 8, 9}) t.record(ev("add", "own", s, s * 100, s * 100 + 10));
  Profile p = computeProfile(t, kSkipFirstStep);
  EXPECT_EQ(p.firstStep, 8);
  EXPECT_EQ(p.steps, 2);
  Timeline one;
  one.record(ev("add", "own", 3, 0, 10));
  p = computeProfile(one, kSkipFirstStep);  // a single step is counted
  EXPECT_EQ(p.firstStep, 3);
  EXPECT_EQ(p.steps, 1);
}

TEST(Profile, NoCountedStep) {
  Timeline t;
  t.record(ev("add", "own", 0, 0, 10));
  const Profile p = computeProfile(t, 1);
  EXPECT_EQ(p.steps, 0);
  std::ostringstream out;
  printProfile(p, {}, out);
  EXPECT_NE(out.str().find("no step was measured"), std::string::npos);
}

}  // namespace
}  // namespace llcdist::rt
