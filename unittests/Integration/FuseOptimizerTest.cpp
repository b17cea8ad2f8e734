//===- FuseOptimizerTest.cpp - llcdist-plan-fuse-optimizer keeps the bits --===//
//
// llcdist-plan-fuse-optimizer (on by default) turns the per-parameter
// updates into adamw_multi / sgd_multi and the bf16 copies' casts into one
// cast_multi; each tensor's update is the single op's, so a run with the
// fusion and one without it give the same losses and parameters bit for bit
// (f32 and bf16, AdamW and SGD with momentum, one rank, dp, pp, and ZeRO-1,
// where each update sits between its block's slice and gather and only the
// casts fuse). Every other golden test runs
// the fused plans.
//
//===----------------------------------------------------------------------===//
#include "GoldenUtil.h"

#include "llcdist/runtime/Plan.h"

#include <cstring>
#include <tuple>

using namespace llcdist;

namespace {

struct Case {
  const char *model;
  const char *optimizer;
  const char *dtype;
  int64_t dp, pp, zero;
};

std::string tagOf(const Case &c, bool fuse) {
  return std::string("fuse-") + c.model + "-" + c.optimizer + "-" + c.dtype + "-dp" + std::to_string(c.dp) + "-pp" +
         std::to_string(c.pp) + "-z" + std::to_string(c.zero) + (fuse ? "-on" : "-off");
}

// Ops per step over every program of the plan, and how many of them are _multi ops.
std::pair<int64_t, int64_t> opCounts(const std::string &dir) {
  rt::StatusOr<rt::Plan> plan = rt::loadPlan(dir);
  EXPECT_TRUE(plan.isOk()) << plan.status().toString();
  if (!plan.isOk())
    return {0, 0};
  int64_t ops = 0, multi = 0;
  for (const rt::Program &p : plan->programs)
    for (const rt::Action &a : p.actions)
      for (const rt::Op &op : p.subroutines[size_t(a.subroutine)].ops) {
        ++ops;
        multi += op.kind == rt::schema::OpKind::kAdamWMulti || op.kind == rt::schema::OpKind::kSgdMulti ||
                 op.kind == rt::schema::OpKind::kCastMulti;
      }
  return {ops, multi};
}

TEST(FuseOptimizer, FusedAndUnfusedRunsAreBitIdentical) {
  const Case cases[] = {{"tiny-gpt2", "adamw", "f32", 1, 1, 0}, {"tiny-llama", "adamw", "bf16", 1, 1, 0},
                        {"tiny-llama", "sgd", "f32", 2, 1, 0},  {"tiny-gpt2", "adamw", "bf16", 1, 2, 0},
                        {"tiny-llama", "adamw", "bf16", 2, 1, 1}};
  for (const Case &c : cases) {
    SCOPED_TRACE(tagOf(c, true));
    test::Trained runs[2];
    int64_t ops[2] = {0, 0}, multi[2] = {0, 0};
    for (bool fuse : {false, true}) {
      TrainingPipelineOptions opt = test::goldenOptions(c.optimizer);
      opt.mesh.dp = c.dp;
      opt.mesh.pp = c.pp;
      opt.zero = c.zero;
      opt.fuseOptimizer = fuse;
      TrainingShape shape;
      shape.seqLen = 16;
      shape.microBatch = 8 / c.dp / (c.pp > 1 ? 2 : 1);
      shape.globalBatch = 8;
      shape.dtype = c.dtype;
      const std::string dir = test::compilePlan(c.model, shape, opt, tagOf(c, fuse));
      ASSERT_FALSE(dir.empty()) << "compilation failed";
      std::tie(ops[fuse], multi[fuse]) = opCounts(dir);
      runs[fuse] = test::runGoldenSteps(dir, tagOf(c, fuse));
      std::filesystem::remove_all(dir);
    }
    EXPECT_EQ(multi[0], 0);
    EXPECT_GT(multi[1], 0);
    EXPECT_LT(ops[1], ops[0]) << "the fusion removed no op";
    // Under ZeRO each update sits between its block's slice and gather: only the casts fuse.
    if (c.zero == 0)
      EXPECT_LT(ops[1], ops[0] - 20) << "the updates did not fuse";
    ASSERT_EQ(runs[0].losses.size(), runs[1].losses.size());
    for (size_t i = 0; i < runs[0].losses.size(); ++i)
      EXPECT_EQ(runs[0].losses[i], runs[1].losses[i]) << "step " << i;
    ASSERT_EQ(runs[0].params.size(), runs[1].params.size());
    for (const auto &[name, a] : runs[0].params) {
      const auto &b = runs[1].params.at(name);
      ASSERT_EQ(a.size(), b.size()) << name;
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << name << " differs";
    }
  }
}

} // namespace
