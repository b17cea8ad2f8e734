//===- AddOptimizer.cpp - the optimizer step and the LR schedule ----------===//
#include "llcdist/Dialect/XF/IR/XFOps.h"
#include "llcdist/Dialect/XF/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"

#define DEBUG_TYPE "llcdist-add-optimizer"

namespace llcdist::xf {
#define GEN_PASS_DEF_ADDOPTIMIZER
#include "llcdist/Dialect/XF/Transforms/Passes.h.inc"
} // namespace llcdist::xf

using namespace mlir;
using namespace llcdist::xf;

namespace {
struct AddOptimizerPass
    : public llcdist::xf::impl::AddOptimizerBase<AddOptimizerPass> {
  using AddOptimizerBase::AddOptimizerBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fail = [&](const Twine &msg) {
      module.emitError("llcdist-add-optimizer: ") << msg;
      signalPassFailure();
    };
    std::string opt = optimizer, sched = lrSchedule;
    double wd = weightDecay < 0 ? (opt == "adamw" ? 0.01 : 0.0) : double(weightDecay);
    if (opt != "adamw" && opt != "sgd")
      return fail("optimizer '" + opt + "' is not adamw or sgd");
    if (sched != "constant" && sched != "cosine")
      return fail("lr-schedule '" + sched + "' is not constant or cosine");
    if (!(lr > 0))
      return fail("lr must be > 0");
    if (minLr < 0 || minLr > lr)
      return fail("min-lr must be in [0, lr]");
    if (warmup < 0 || totalSteps < 0)
      return fail("warmup and total-steps must be >= 0");
    if (totalSteps > 0 && warmup > totalSteps)
      return fail("warmup exceeds total-steps");
    if (module.lookupSymbol("optimizer_step"))
      return fail("@optimizer_step already exists");

    OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
    Location loc = module.getLoc();
    auto fn = func::FuncOp::create(b, loc, "optimizer_step", b.getFunctionType({}, {}));
    fn->setAttr("xf.optimizer", b.getUnitAttr());
    b.setInsertionPointToStart(fn.addEntryBlock());
    auto f64 = [&](double v) { return b.getF64FloatAttr(v); };
    ClipGradNormOp::create(b, loc, f64(gradClip));
    if (opt == "adamw")
      AdamWOp::create(b, loc, f64(beta1), f64(beta2), f64(eps), f64(wd));
    else
      SGDOp::create(b, loc, f64(momentum), f64(wd));
    func::ReturnOp::create(b, loc);

    module->setAttr("xf.lr_schedule",
                    b.getDictionaryAttr({
                        b.getNamedAttr("kind", b.getStringAttr(sched)),
                        b.getNamedAttr("max_lr", f64(lr)),
                        b.getNamedAttr("min_lr", f64(minLr)),
                        b.getNamedAttr("warmup_steps", b.getI64IntegerAttr(warmup)),
                        b.getNamedAttr("total_steps", b.getI64IntegerAttr(totalSteps)),
                    }));
    if (failed(mlir::verify(fn)))
      return signalPassFailure();
  }
};
} // namespace
