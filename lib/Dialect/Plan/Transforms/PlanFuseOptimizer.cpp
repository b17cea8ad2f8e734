//===- PlanFuseOptimizer.cpp - one multi-tensor op per optimizer group ----===//
//
// llcdist-plan-fuse-optimizer: the per-parameter optimizer updates and the
// per-parameter bf16 casts of the masters become one multi-tensor op per
// group (Passes.td). A run of consecutive adamw (or sgd) kernels, with no
// token or queue, is one window; its ops are grouped by their hyperparameters
// (beta1, beta2, eps, weight_decay; momentum, weight_decay), in order of
// first appearance, and each group of two or more becomes one adamw_multi
// (sgd_multi) in the group's order, in place of the window. A run of
// consecutive casts becomes one cast_multi. Reordering inside a window is
// safe because the updates of different parameters touch disjoint buffers;
// a window in which one op writes a buffer another touches (never emitted
// by the lowering) is left as it is. Each tensor's update is the single op's,
// so the numbers do not change (tested bit for bit on the CPU).
//
//===----------------------------------------------------------------------===//
#include "llcdist/Dialect/Plan/Transforms/Passes.h"

#include "Fusion.h"
#include "KernelAccess.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"

#include <string>

namespace llcdist::plan {
#define GEN_PASS_DEF_PLANFUSEOPTIMIZER
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist;

namespace {

/// The multi-tensor form of a fusable kernel and its roles (single -> list),
/// or null.
struct Fusion {
  StringRef multi;
  SmallVector<std::pair<StringRef, StringRef>, 4> roles;
  /// Whether the single ops' params (the hyperparameters) go to the multi op
  /// and split the groups; cast's (its n) do not: every cast joins one group.
  bool keepsParams;
};
std::optional<Fusion> fusionOf(StringRef kernel) {
  if (kernel == "adamw")
    return Fusion{"adamw_multi", {{"param", "params"}, {"grad", "grads"}, {"m", "m"}, {"v", "v"}}, true};
  if (kernel == "sgd")
    return Fusion{"sgd_multi", {{"param", "params"}, {"grad", "grads"}, {"momentum_buf", "momentum_bufs"}}, true};
  if (kernel == "cast")
    return Fusion{"cast_multi", {{"x", "x"}, {"y", "y"}}, false};
  return std::nullopt;
}

/// Whether `k` may join a window: a fusable kernel, synchronous, on compute.
bool fusable(plan::KernelOp k) { return fusionOf(k.getKernel()) && plan::isSyncCompute(k); }

/// Whether the window's ops touch disjoint buffers but for reads (what makes
/// their order free): no op depends on the union of the earlier ones'
/// accesses. One pass (a window holds every parameter's update: pairwise
/// checks were quadratic in the layers).
bool independent(ArrayRef<plan::KernelOp> window) {
  plan::KernelAccess seen;
  for (plan::KernelOp k : window) {
    plan::KernelAccess acc = plan::accessOf(k);
    if (plan::dependent(acc, seen))
      return false;
    seen.reads.insert(acc.reads.begin(), acc.reads.end());
    seen.writes.insert(acc.writes.begin(), acc.writes.end());
  }
  return true;
}

/// The multi-tensor op of `group` (two or more kernels of one kind with equal
/// params), built before `at`.
plan::KernelOp buildMulti(OpBuilder &b, Operation *at, ArrayRef<plan::KernelOp> group) {
  plan::KernelOp first = group.front();
  const Fusion f = *fusionOf(first.getKernel());
  SmallVector<NamedAttribute> args;
  for (auto [single, list] : f.roles) {
    SmallVector<Attribute> bufs;
    for (plan::KernelOp k : group)
      if (Attribute a = k.getArgs().get(single))
        bufs.push_back(a);
    if (bufs.empty())
      continue; // an optional role every op leaves out (sgd without momentum)
    args.push_back(b.getNamedAttr(list, b.getArrayAttr(bufs)));
  }
  // Provenance: the group and its first and last op (the runtime names it on
  // failure).
  std::string name = f.multi.str() + " of " + std::to_string(group.size()) + " tensors";
  Location loc = NameLoc::get(b.getStringAttr(name), first.getLoc());
  b.setInsertionPoint(at);
  return plan::KernelOp::create(b, loc, b.getStringAttr(f.multi), b.getDictionaryAttr(args),
                                f.keepsParams ? first.getParams() : b.getDictionaryAttr({}));
}

struct PlanFuseOptimizerPass : public plan::impl::PlanFuseOptimizerBase<PlanFuseOptimizerPass> {
  using PlanFuseOptimizerBase::PlanFuseOptimizerBase;

  void runOnOperation() override {
    plan::ProgramOp program = getOperation();
    OpBuilder b(program.getContext());
    plan::FusionRecord fused;
    program.walk([&](plan::SubroutineOp sub) {
      SmallVector<plan::KernelOp> ops(sub.getOps<plan::KernelOp>());
      for (size_t i = 0; i < ops.size();) {
        if (!fusable(ops[i])) {
          ++i;
          continue;
        }
        // The window: consecutive fusable kernels of one multi-tensor kind.
        const StringRef multi = fusionOf(ops[i].getKernel())->multi;
        size_t j = i;
        while (j < ops.size() && fusable(ops[j]) && fusionOf(ops[j].getKernel())->multi == multi)
          ++j;
        ArrayRef<plan::KernelOp> window(ops.begin() + i, ops.begin() + j);
        i = j;
        if (window.size() < 2 || !independent(window))
          continue;
        // Groups by params (the hyperparameters; casts form one group), in
        // order of first appearance; nothing changes unless one has two ops.
        const bool keepsParams = fusionOf(ops[j - 1].getKernel())->keepsParams;
        llvm::MapVector<DictionaryAttr, SmallVector<plan::KernelOp>> groups;
        for (plan::KernelOp k : window)
          groups[keepsParams ? k.getParams() : DictionaryAttr()].push_back(k);
        if (llvm::none_of(groups, [](const auto &g) { return g.second.size() >= 2; }))
          continue;
        Operation *at = window.front();
        for (auto &[params, group] : groups) {
          if (group.size() < 2) { // one op: kept, in its group's place
            if (group.front().getOperation() != at)
              group.front()->moveBefore(at);
            continue;
          }
          plan::KernelOp multi = buildMulti(b, at, group);
          fused.add(group.front().getKernel(), multi.getKernel(), int64_t(group.size()));
        }
        for (auto &[params, group] : groups)
          if (group.size() >= 2)
            for (plan::KernelOp k : group)
              k.erase();
      }
    });
    fused.write(program, getArgument());
  }
};

} // namespace
