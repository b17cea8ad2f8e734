//===- XFInterfacesTest.cpp - every xf op answers what it must ------------===//
//
// A new xf op must say how it is differentiated: either it implements
// DifferentiableOpInterface (its rule next to it, lib/Dialect/XF/IR/
// XFAutodiff.cpp), or it is listed below as one llcdist-autodiff never has to
// differentiate (docs/adding-an-op.md). The whole-model gradient checks
// (unittests/Integration/GradCheckTest.cpp) test the rules' numbers. So must
// it say how it splits (a sharding model; a tensor-parallel rule or the
// Elementwise trait) and how it lowers to plan kernels (a PlanLoweringOpInterface
// model); the golden rule and scripts/plan-diff.py test what the rules emit.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Conversion/XFToPlan/PlanLoweringInterface.h"
#include "llcdist/Dialect/XF/IR/XFOps.h"
#include "llcdist/Dialect/XF/Transforms/TensorParallelInterface.h"
#include "llcdist/InitAll.h"

#include "mlir/Dialect/Shard/Interfaces/ShardingInterface.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

using namespace llcdist;

namespace {

/// Ops autodiff reads but differentiates itself (they need the pass's
/// context), and ops that exist only in the backward, the optimizer step or
/// after partitioning, which autodiff never meets in a forward graph.
const std::set<std::string> kNotDifferentiable = {
    // Handled by llcdist-autodiff itself.
    "xf.param", "xf.layer", "xf.cross_entropy", "xf.moe_aux_loss",
    // Created by llcdist-autodiff.
    "xf.linear_grad_input", "xf.linear_grad_weight", "xf.linear_grad_bias", "xf.embedding_grad",
    "xf.add_position_embedding_grad", "xf.layer_norm_grad_input", "xf.layer_norm_grad_params", "xf.rms_norm_grad_input",
    "xf.rms_norm_grad_weight", "xf.rope_grad", "xf.attention_grad", "xf.gelu_tanh_grad", "xf.gelu_erf_grad",
    "xf.clamp_grad", "xf.relu_grad", "xf.swiglu_grad", "xf.concat", "xf.cross_entropy_grad", "xf.accumulate_grad",
    "xf.moe_route_grad", "xf.moe_unpermute_grad", "xf.grouped_linear_grad_input", "xf.grouped_linear_grad_weight",
    "xf.sigmoid_gate_grad", "xf.moe_router_stats_grad", "xf.moe_aux_loss_grad",
    // llcdist-add-optimizer.
    "xf.clip_grad_norm", "xf.adamw", "xf.sgd",
    // llcdist-partition and the tensor-parallel passes, after autodiff.
    "xf.all_reduce_grads", "xf.all_reduce_loss", "xf.all_reduce", "xf.all_gather", "xf.reduce_scatter", "xf.bias_add",
    // context parallelism and expert parallelism, inside llcdist-partition.
    "xf.all_to_all", "xf.moe_dispatch", "xf.moe_combine"};

/// The xf ops of the optimizer step: llcdist-lower-to-plan lowers the
/// optimizer function as a whole (lib/Conversion/XFToPlan/Optimizer.cpp) and
/// tensor parallelism never propagates through it.
const std::set<std::string> kOptimizerStepOps = {"xf.clip_grad_norm", "xf.adamw", "xf.sgd", "xf.all_reduce_grads",
                                                 "xf.all_reduce_loss"};

/// Calls `check` on every registered xf op, with the dialect and every model
/// loaded as the tools load them; each name in `listed` must be an xf op (a
/// renamed op would otherwise hide in a list).
template <typename Check> void forEachXFOp(const std::set<std::string> &listed, Check check) {
  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  mlir::MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  std::set<std::string> seen;
  for (mlir::RegisteredOperationName name : ctx.getRegisteredOperations())
    if (name.getDialectNamespace() == "xf") {
      seen.insert(name.getStringRef().str());
      check(name);
    }
  ASSERT_GT(seen.size(), 30u);
  for (const std::string &op : listed)
    EXPECT_TRUE(seen.count(op)) << op << " is listed but is not an xf op";
}

TEST(XFInterfaces, EveryOpIsDifferentiableOrListed) {
  int xfOps = 0, differentiable = 0;
  forEachXFOp(kNotDifferentiable, [&](mlir::RegisteredOperationName name) {
    ++xfOps;
    std::string op = name.getStringRef().str();
    bool rule = name.hasInterface<xf::DifferentiableOpInterface>();
    differentiable += rule;
    EXPECT_NE(rule, kNotDifferentiable.count(op) == 1)
        << op
        << (rule ? " has a backward rule but is listed as not differentiable"
                 : " has no backward rule: implement DifferentiableOpInterface "
                   "(lib/Dialect/XF/IR/XFAutodiff.cpp) or list it here");
  });
  EXPECT_EQ(differentiable, 22) << "of " << xfOps << " xf ops";
}

/// xf ops with no sharding model: they exist only after partitioning (the
/// collectives it inserts, and bias_add, which tp creates). The optimizer's
/// ops and the step's collectives have one (no tensor to split).
const std::set<std::string> kNoShardingModel = {"xf.all_reduce", "xf.all_gather", "xf.reduce_scatter",
                                                "xf.all_to_all", "xf.bias_add",   "xf.moe_dispatch",
                                                "xf.moe_combine"};

TEST(XFInterfaces, EveryTensorOpHasAShardingModel) {
  forEachXFOp(kNoShardingModel, [&](mlir::RegisteredOperationName name) {
    std::string op = name.getStringRef().str();
    bool model = name.hasInterface<mlir::shard::ShardingInterface>();
    EXPECT_NE(model, kNoShardingModel.count(op) == 1)
        << op
        << (model ? " has a sharding model but is listed without one"
                  : " has no sharding model: give it a spec(Op) (none for an Elementwise op) and a name in "
                    "registerShardingInterfaceExternalModels (lib/Dialect/XF/IR/XFShardingInterface.cpp), or "
                    "list it here");
  });
}

TEST(XFInterfaces, EveryStepOpHasAPlanLowering) {
  int models = 0;
  forEachXFOp(kOptimizerStepOps, [&](mlir::RegisteredOperationName name) {
    std::string op = name.getStringRef().str();
    bool model = name.hasInterface<xftoplan::PlanLoweringOpInterface>();
    models += model;
    EXPECT_NE(model, kOptimizerStepOps.count(op) == 1)
        << op
        << (model ? " has a plan lowering but is an optimizer-step op"
                  : " has no plan lowering: write its rule and register it in "
                    "lib/Conversion/XFToPlan/OpLowerings.cpp");
  });
  EXPECT_EQ(models, 59);
}

TEST(XFInterfaces, EveryStepOpHasATensorParallelRuleOrIsElementwise) {
  int elementwiseOnly = 0;
  forEachXFOp(kOptimizerStepOps, [&](mlir::RegisteredOperationName name) {
    std::string op = name.getStringRef().str();
    bool model = name.hasInterface<xf::TensorParallelOpInterface>();
    bool elementwise = name.hasTrait<mlir::OpTrait::Elementwise>();
    elementwiseOnly += elementwise && !model;
    EXPECT_NE(model || elementwise, kOptimizerStepOps.count(op) == 1)
        << op
        << (model || elementwise ? " has a tensor-parallel rule but is an optimizer-step op"
                                 : " has no tensor-parallel rule: give it the Elementwise trait (its "
                                   "operands split alike) or write its rule in "
                                   "lib/Dialect/XF/Transforms/TensorParallelRules.cpp");
  });
  // gelu_tanh, gelu_erf, clamp, relu, swiglu and their gradients; add has a
  // rule of its own (a sum of partial sums stays partial), and so has scale
  // (on the sequence slice under sequence parallelism).
  EXPECT_EQ(elementwiseOnly, 10);
}

} // namespace
