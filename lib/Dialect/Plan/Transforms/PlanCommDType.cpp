//===- PlanCommDType.cpp - the dtype of each collective -------------------===//
//
// llcdist-plan-comm-dtype: a collective on bf16 buffers runs in bf16, as
// NCCL runs it (every partial sum rounded to bf16, 2-byte messages), unless
// it reduces gradients and the plan asks for f32 gradient reductions
// (Megatron-LM's --accumulate-allreduce-grads-in-fp32). The choice is the
// kernel's `dtype` param (the runtime's attr, docs/plan-format.md
// "Collective dtypes"); absent means f32, so a plan without bf16 collectives
// is unchanged.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Dialect/Plan/Transforms/Passes.h"
#include "llcdist/Dialect/Plan/Analysis/CollectiveOrigin.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"

namespace llcdist::plan {
#define GEN_PASS_DEF_PLANCOMMDTYPE
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist;

namespace {

bool isCollective(StringRef kind) {
  return kind == "all_reduce" || kind == "all_gather" || kind == "reduce_scatter" || kind == "all_to_all" ||
         kind == "all_to_all_v";
}

/// A reduction of gradients (data parallelism's and ZeRO's, kv-head
/// replicas', sequence parallelism's partial sums over the tokens), by its
/// plan.origin.
bool isGradientReduction(plan::KernelOp k) { return plan::reducesGradients(k, k.getKernel()); }

/// Whether every buffer `k` names (a role's buffer or list of buffers) is
/// bf16; all_to_all_v's counts (send_splits, recv_splits: i32) aside.
bool allBf16(plan::KernelOp k, SymbolTable &symbols) {
  bool any = false;
  for (NamedAttribute role : k.getArgs()) {
    if (k.getKernel() == "all_to_all_v" && role.getName() != "x" && role.getName() != "y")
      continue;
    SmallVector<Attribute> bufs;
    if (auto list = dyn_cast<ArrayAttr>(role.getValue()))
      bufs.append(list.begin(), list.end());
    else
      bufs.push_back(role.getValue());
    for (Attribute a : bufs) {
      auto ref = dyn_cast<FlatSymbolRefAttr>(a);
      auto buf = ref ? symbols.lookup<plan::BufferOp>(ref.getValue()) : plan::BufferOp();
      if (!buf || !buf.getTensorType().getElementType().isBF16())
        return false;
      any = true;
    }
  }
  return any;
}

struct PlanCommDTypePass : public plan::impl::PlanCommDTypeBase<PlanCommDTypePass> {
  using PlanCommDTypeBase::PlanCommDTypeBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (gradReduceDtype != "bf16" && gradReduceDtype != "f32") {
      module.emitError("llcdist-plan-comm-dtype: grad-reduce-dtype \"")
          << gradReduceDtype << "\" is not bf16 or f32";
      return signalPassFailure();
    }
    const bool gradsInF32 = gradReduceDtype == "f32";
    for (auto program : module.getOps<plan::ProgramOp>()) {
      SymbolTable symbols(program);
      program.walk([&](plan::KernelOp k) {
        if (!isCollective(k.getKernel()) || !allBf16(k, symbols))
          return;
        if (gradsInF32 && isGradientReduction(k))
          return; // the default f32: reduced in f32, rounded once
        NamedAttrList params(k.getParams());
        params.set("dtype", StringAttr::get(k.getContext(), "bf16"));
        k.setParamsAttr(params.getDictionary(k.getContext()));
      });
    }
  }
};

} // namespace
