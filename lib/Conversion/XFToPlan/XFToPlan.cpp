//===- XFToPlan.cpp - lower the xf training step to a plan.program --------===//
//
// The pass llcdist-lower-to-plan: a driver over the units of Lowering.h. It
// checks the step (analyzeStep), then lowers it as one program
// (WholeStep.cpp), or, on a module cut by llcdist-pipeline-split, as one
// program per stage (Stages.cpp), and erases the xf functions.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include "llcdist/Conversion/Passes.h"
#include "llcdist/Dialect/XF/Analysis/ModelStats.h"

#define DEBUG_TYPE "llcdist-lower-to-plan"

namespace llcdist {
#define GEN_PASS_DEF_LOWERTOPLAN
#include "llcdist/Conversion/Passes.h.inc"
} // namespace llcdist

using namespace mlir;
using namespace llcdist;
using namespace llcdist::xf;
using namespace llcdist::xftoplan;

FailureOr<StepInfo> xftoplan::analyzeStep(ModuleOp module, bool recordParamScopes) {
  StepInfo step;
  step.recordParamScopes = recordParamScopes;
  step.entry = getEntryFunction(module);
  if (!step.entry)
    return failure();
  if (!step.entry->hasAttr("xf.train_step"))
    return step.entry.emitError("llcdist-lower-to-plan: run llcdist-autodiff first "
                                "(@")
           << step.entry.getSymName() << " is not a training step)";
  step.optimizerFn = xf::getOptimizerStep(module);
  if (!step.optimizerFn)
    return module.emitError("llcdist-lower-to-plan: run llcdist-add-optimizer "
                            "first (no function is marked xf.optimizer)");
  if (auto pad = module->getAttrOfType<DictionaryAttr>("xf.vocab_padding"))
    if (auto names = pad.getAs<ArrayAttr>("params"))
      for (Attribute n : names)
        step.vocabPadded.insert(cast<StringAttr>(n).str());
  module.walk([&](xf::EmbeddingOp e) {
    if (auto row = e.getPaddingIdx())
      if (auto table = e.getTable().getDefiningOp<xf::ParamOp>())
        step.paddingRows[table.getName().str()] = int64_t(*row);
  });
  // The runtime stores f32 or bf16 (and computes in f32). bf16 values make
  // a mixed-precision plan: bf16 parameters (a working copy), gradients and
  // activations; f32 master weights, optimizer state and statistics.
  WalkResult dtypes = module.walk([&](Operation *op) -> WalkResult {
    for (Type t : op->getResultTypes())
      if (auto rt = dyn_cast<RankedTensorType>(t)) {
        Type e = rt.getElementType();
        step.mixed |= e.isBF16();
        if (!e.isF32() && !e.isBF16() && !e.isInteger(32)) {
          op->emitError("llcdist-lower-to-plan: element type ")
              << e
              << " cannot be executed: the runtime stores f32 or bf16 "
                 "(compile with --dtype f32 or bf16)";
          return WalkResult::interrupt();
        }
      }
    return WalkResult::advance();
  });
  if (dtypes.wasInterrupted())
    return failure();

  if (auto model = module->getAttrOfType<DictionaryAttr>(kModelAttr)) {
    if (auto n = model.getAs<IntegerAttr>("microbatches"))
      step.microbatches = std::max<int64_t>(1, n.getInt());
    if (auto a = model.getAs<StringAttr>("architecture"))
      step.arch = a.str();
    if (auto n = model.getAs<IntegerAttr>("num_layers"))
      step.numLayers = n.getInt();
  }

  return step;
}

namespace {
struct LowerToPlanPass : public llcdist::impl::LowerToPlanBase<LowerToPlanPass> {
  using LowerToPlanBase::LowerToPlanBase;

  void getDependentDialects(DialectRegistry &registry) const override {
    LowerToPlanBase::getDependentDialects(registry);
    registerPlanLoweringModels(registry); // every xf op's rule
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto info = module->getAttrOfType<DictionaryAttr>("xf.pipeline");
    if (!info) {
      FailureOr<StepInfo> step = analyzeStep(module, recordParamScopes);
      if (failed(step) || failed(lowerWholeStep(module, *step)))
        return signalPassFailure();
    } else {
      PipelineParallelism pipe;
      pipe.stages = info.getAs<IntegerAttr>("stages").getInt();
      pipe.virtualStages = info.getAs<IntegerAttr>("virtual_stages").getInt();
      pipe.microbatches = info.getAs<IntegerAttr>("microbatches").getInt();
      auto kind = schedule::parseScheduleKind(info.getAs<StringAttr>("schedule").getValue().str());
      if (!kind) {
        module.emitError("llcdist-lower-to-plan: xf.pipeline: ") << kind.error().message;
        return signalPassFailure();
      }
      pipe.kind = *kind;
      FailureOr<StepInfo> step = analyzeStep(module, recordParamScopes);
      if (failed(step))
        return signalPassFailure();
      for (int64_t s = 0; s < pipe.stages; ++s)
        if (failed(lowerStage(module, *step, pipe, s)))
          return signalPassFailure();
      module->setAttr("plan.pipeline", info);
      module->removeAttr("xf.pipeline");
    }
    // The xf functions are now the plan.
    for (auto fn : llvm::make_early_inc_range(module.getOps<func::FuncOp>()))
      fn.erase();
  }
};
} // namespace
