//===- VerifyPlan.cpp - cross-rank communication check before emission ----===//
#include "llcdist/Dialect/Plan/Transforms/Passes.h"
#include "llcdist/Target/Plan/PlanWriter.h"
#include "llcdist/Verify/PlanComm.h"

#include <nlohmann/json.hpp>

#define DEBUG_TYPE "llcdist-verify-plan"

namespace llcdist::plan {
#define GEN_PASS_DEF_VERIFYPLAN
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;

namespace {
struct VerifyPlanPass : public llcdist::plan::impl::VerifyPlanBase<VerifyPlanPass> {
  using VerifyPlanBase::VerifyPlanBase;
  VerifyPlanPass(llcdist::plan::VerifyPlanOptions options, llcdist::PlanJson *verified)
      : VerifyPlanBase(std::move(options)), verified(verified) {}

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // The verifier stops once it holds max-errors errors: below 1 it would
    // stop before the first and pass every plan.
    if (maxErrors < 1) {
      module.emitError("llcdist-verify-plan: max-errors must be >= 1, got ")
          << static_cast<int64_t>(maxErrors);
      return signalPassFailure();
    }
    FailureOr<llcdist::PlanJson> files = llcdist::buildPlanJson(module);
    if (failed(files))
      return signalPassFailure();
    // The runtime's loader: the plan as `llc-dist run` would see it.
    namespace rt = llcdist::rt;
    // The documents as built (the runtime reads the same JSON type: no copy, no text).
    auto manifest = rt::parseManifestDocument(files->manifest, "manifest.json");
    if (!manifest.isOk()) {
      module.emitError("llcdist-verify-plan: the runtime refuses the plan: ")
          << manifest.status().toString();
      return signalPassFailure();
    }
    rt::Plan plan;
    plan.manifest = std::move(manifest.value());
    for (auto [i, program] : llvm::enumerate(files->programs)) {
      std::string file = "program-" + std::to_string(i) + ".json";
      auto parsed = rt::parseProgramDocument(program, file, plan.manifest);
      if (!parsed.isOk()) {
        module.emitError("llcdist-verify-plan: the runtime refuses the plan: ")
            << parsed.status().toString();
        return signalPassFailure();
      }
      plan.programs.push_back(std::move(parsed.value()));
    }
    for (auto [i, program] : llvm::enumerate(plan.programs))
      if (rt::Status st = rt::validateParams(plan.manifest, program, int64_t(i)); !st.isOk()) {
        module.emitError("llcdist-verify-plan: the runtime refuses the plan: ") << st.toString();
        return signalPassFailure();
      }
    llcdist::verify::VerifyResult result = llcdist::verify::verifyPlan(plan, maxErrors);
    if (result.ok()) {
      if (verified)
        *verified = std::move(*files);
      return;
    }
    auto diag = module.emitError("llcdist-verify-plan: ");
    diag << result.str();
    signalPassFailure();
  }

  llcdist::PlanJson *verified = nullptr;
};
} // namespace

std::unique_ptr<Pass> llcdist::plan::createVerifyPlan(VerifyPlanOptions options,
                                                      llcdist::PlanJson *verified) {
  return std::make_unique<VerifyPlanPass>(std::move(options), verified);
}
