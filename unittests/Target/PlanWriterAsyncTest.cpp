//===- PlanWriterAsyncTest.cpp - the JSON of asynchronous plans -----------===//
//
// The writer's side of feature "async" (docs/plan-format.md): a started
// communication op carries top-level "queue" and "token", a wait is
// {"op": "wait", "token": T}, a program with queues lists them, and the
// manifest lists the feature only when a program uses any of it.
//
//===----------------------------------------------------------------------===//
#include "llcdist/InitAll.h"
#include "llcdist/Target/Plan/PlanWriter.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

using namespace llcdist;

namespace {
/// A module with one program; `queues` and the optimizer's two kernels are
/// spliced in.
std::string planModule(const std::string &queues, const std::string &kernels) {
  return R"mlir(
    module attributes {plan.manifest = {model = {name = "t"}, mesh = {dp = 2 : i64, tp = 1 : i64, pp = 1 : i64}}} {
      plan.program @stage0 attributes {arena_bytes = 64 : i64)mlir" +
         queues + R"mlir(} {
        plan.buffer @g : tensor<4xf32> {kind = "grad", name = "w.grad", offset = 0 : i64}
        plan.subroutine @optimizer {
)mlir" + kernels + R"mlir(
        }
        plan.schedule {
          plan.action @optimizer
        }
      }
    })mlir";
}

bool hasFeature(const nlohmann::ordered_json &manifest, const std::string &f) {
  const auto &fs = manifest["features"];
  return std::find(fs.begin(), fs.end(), f) != fs.end();
}

struct Parsed {
  mlir::MLIRContext ctx;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  explicit Parsed(const std::string &ir) : ctx(registry()) {
    module = mlir::parseSourceString<mlir::ModuleOp>(ir, &ctx);
  }
  static mlir::DialectRegistry registry() {
    mlir::DialectRegistry r;
    registerAllDialects(r);
    return r;
  }
};
} // namespace

TEST(PlanWriterAsync, StartAndWaitFields) {
  Parsed p(planModule(R"(, queues = ["compute", "comm"])",
                      R"(plan.kernel "all_reduce" {x = [@g]} {axis = "dp", op = "sum"} {queue = "comm", token = 5 : i64}
                         plan.kernel "wait" {} {} {token = 5 : i64})"));
  ASSERT_TRUE(p.module);
  auto plan = buildPlanJson(*p.module);
  ASSERT_TRUE(succeeded(plan));
  EXPECT_TRUE(hasFeature(plan->manifest, "async"));
  const auto &program = plan->programs.at(0);
  EXPECT_EQ(program["queues"], nlohmann::ordered_json::parse(R"(["compute", "comm"])"));
  const auto &ops = program["subroutines"][0]["ops"];
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0]["op"], "all_reduce");
  EXPECT_EQ(ops[0]["queue"], "comm");
  EXPECT_EQ(ops[0]["token"], 5);
  EXPECT_EQ(ops[0]["args"]["x"], nlohmann::ordered_json::parse("[0]"));
  // The wait: op and token (and its loc), no args, no attrs.
  EXPECT_EQ(ops[1]["op"], "wait");
  EXPECT_EQ(ops[1]["token"], 5);
  EXPECT_FALSE(ops[1].contains("args"));
  EXPECT_FALSE(ops[1].contains("attrs"));
  EXPECT_FALSE(ops[1].contains("queue"));
}

TEST(PlanWriterAsync, SynchronousPlanHasNoAsyncFields) {
  Parsed p(planModule("", R"(plan.kernel "all_reduce" {x = [@g]} {axis = "dp", op = "sum"})"));
  ASSERT_TRUE(p.module);
  auto plan = buildPlanJson(*p.module);
  ASSERT_TRUE(succeeded(plan));
  EXPECT_FALSE(hasFeature(plan->manifest, "async"));
  const auto &program = plan->programs.at(0);
  EXPECT_FALSE(program.contains("queues"));
  const auto &op = program["subroutines"][0]["ops"][0];
  EXPECT_FALSE(op.contains("queue"));
  EXPECT_FALSE(op.contains("token"));
  // The keys of a synchronous op, in order, as before asynchronous plans.
  std::vector<std::string> keys;
  for (auto it = op.begin(); it != op.end(); ++it)
    keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"op", "args", "attrs", "loc"}));
}

// A synchronous op on a listed queue (no token) is still an async-format
// field: the feature is listed.
TEST(PlanWriterAsync, QueueWithoutTokenNeedsTheFeature) {
  Parsed p(planModule(R"(, queues = ["compute", "comm"])",
                      R"(plan.kernel "all_reduce" {x = [@g]} {axis = "dp", op = "sum"} {queue = "comm"})"));
  ASSERT_TRUE(p.module);
  auto plan = buildPlanJson(*p.module);
  ASSERT_TRUE(succeeded(plan));
  EXPECT_TRUE(hasFeature(plan->manifest, "async"));
  EXPECT_EQ(plan->programs.at(0)["subroutines"][0]["ops"][0]["queue"], "comm");
  EXPECT_FALSE(plan->programs.at(0)["subroutines"][0]["ops"][0].contains("token"));
}
