//===- WholeStep.cpp - the whole training step as one plan.program --------===//
//
// Without a pipeline: @stage0 with step_begin, forward (load the microbatch,
// then the ops up to the loss), backward (the ops from the loss gradient on)
// and optimizer; the schedule runs forward and backward once per microbatch.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include "llcdist/Dialect/XF/Analysis/ModelStats.h"

using namespace mlir;
using namespace llcdist;
using namespace llcdist::xf;
using namespace llcdist::xftoplan;

LogicalResult xftoplan::lowerWholeStep(ModuleOp module, const StepInfo &step) {
  func::FuncOp entry = step.entry;
  ProgramBuilder pb(module);
  ParamBuffers params(pb, step);
  OpLowering lowering(pb, params, step);
  pb.beginProgram("stage0");
  plan::SubroutineOp forward = pb.addSubroutine("forward");
  plan::SubroutineOp backward = pb.addSubroutine("backward");

  // Inputs and metrics.
  Scope top;
  Buf ids = pb.newBuffer("input_ids", "input", entry.getArgument(0).getType());
  Buf targets = pb.newBuffer("labels", "input", entry.getArgument(1).getType());
  lowering.lossBuf = pb.newBuffer("loss", "metric", pb.f32({1}));
  Buf gradNorm = pb.newBuffer("grad_norm", "metric", pb.f32({1}));
  top.bufs[entry.getArgument(0)] = {ids};
  top.bufs[entry.getArgument(1)] = {targets};
  auto idsType = cast<RankedTensorType>(entry.getArgument(0).getType());
  pb.current = forward;
  pb.kernel("load_microbatch", {pb.arg("ids", ids), pb.arg("targets", targets)},
            {pb.i64("B", idsType.getDimSize(0)), pb.i64("S", idsType.getDimSize(1))},
            entry.getLoc());
  int64_t firstBackward = backwardStart(entry.getBody().front());
  for (auto [i, op] : llvm::enumerate(entry.getBody().front().without_terminator())) {
    if (int64_t(i) == firstBackward)
      pb.current = backward;
    if (failed(lowering.lowerOp(&op, top)))
      return failure();
  }
  OptimizerScope scope;
  scope.loss = lowering.lossBuf;
  scope.gradNorm = gradNorm;
  FailureOr<OptimizerChoice> optimizer =
      lowerOptimizer(step.optimizerFn, pb, params, step, scope);
  if (failed(optimizer))
    return failure();
  params.emitStepBegin(entry.getLoc(), lowering.lossBuf);

  // The schedule of one step.
  pb.beginSchedule();
  pb.action(pb.stepBegin, std::nullopt);
  for (int64_t j = 0; j < step.microbatches; ++j) {
    pb.action(forward, j);
    pb.action(backward, j);
  }
  pb.action(pb.optimizer, std::nullopt);
  module->setAttr(plan::kManifestAttr, buildManifest(module, step, *optimizer));
  return success();
}
