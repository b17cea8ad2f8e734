//===- MegatronTP.cpp - Megatron-LM's tensor-parallel strategy ------------===//
#include "llcdist/Dialect/XF/IR/XFOps.h"
#include "llcdist/Dialect/XF/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"

#define DEBUG_TYPE "llcdist-megatron-tp"

namespace llcdist::xf {
#define GEN_PASS_DEF_MEGATRONTP
#include "llcdist/Dialect/XF/Transforms/Passes.h.inc"
} // namespace llcdist::xf

using namespace mlir;
using namespace llcdist::xf;

namespace {
struct Split {
  int64_t dim, blocks;
  bool operator!=(const Split &o) const { return dim != o.dim || blocks != o.blocks; }
};

struct MegatronTPPass : public llcdist::xf::impl::MegatronTPBase<MegatronTPPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    llvm::StringMap<Split> splits;
    auto want = [&](Value v, Split s) -> LogicalResult {
      auto p = v.getDefiningOp<ParamOp>();
      if (!p)
        return emitError(v.getLoc(), "llcdist-megatron-tp: this weight is not an xf.param");
      auto [it, inserted] = splits.try_emplace(p.getName(), s);
      if (!inserted && it->second != s)
        return p.emitOpError("llcdist-megatron-tp: parameter '")
               << p.getName() << "' would be split two ways (a tied weight used by "
               << "ops with different tensor-parallel splits)";
      return success();
    };
    WalkResult r = module.walk([&](Operation *op) -> WalkResult {
      LogicalResult ok = success();
      if (auto e = dyn_cast<EmbeddingOp>(op))
        ok = want(e.getTable(), {0, 1});
      if (auto lin = dyn_cast<LinearOp>(op)) {
        bool outIn = lin.getLayout() == WeightLayout::OutIn;
        auto users = llvm::to_vector(lin->getUsers());
        // The mixture of experts runs whole on every rank: its router and
        // Qwen2-MoE's shared-expert gate stay replicated. A linear whose
        // output is gated (the shared expert's down projection) is a row-
        // parallel one, as one feeding the residual add is. (A layer body
        // also returns the values its backward reads: not consumers.)
        Value out = lin.getResult();
        auto consumers =
            llvm::to_vector(llvm::make_filter_range(users, [](Operation *u) { return !isa<func::ReturnOp>(u); }));
        auto gateOf = [&](Operation *u) {
          auto g = dyn_cast<SigmoidGateOp>(u);
          return g && g.getGate() == out;
        };
        auto gated = [&](Operation *u) {
          auto g = dyn_cast<SigmoidGateOp>(u);
          return g && g.getInput() == out;
        };
        if (!consumers.empty() &&
            llvm::all_of(consumers, [&](Operation *u) { return isa<MoeRouteOp, MoeRouterStatsOp>(u) || gateOf(u); }))
          return WalkResult::advance();
        bool toResidual = !users.empty() && llvm::all_of(users, [](Operation *u) { return isa<AddOp>(u); });
        bool toGate = llvm::any_of(consumers, gated) &&
                      llvm::all_of(consumers, [&](Operation *u) { return isa<AddOp>(u) || gated(u); });
        bool row = (toResidual || toGate) && lin->getParentOfType<func::FuncOp>()->hasAttr(kLayerBodyAttr);
        int64_t blocks = 1;
        if (users.size() == 1)
          if (auto sp = dyn_cast<SplitOp>(users.front()); sp && !sp.getGroups()) {
            // (A grouped split's groups lie side by side: one block.)
            auto last = [](Value v) {
              return cast<RankedTensorType>(v.getType()).getShape().back();
            };
            if (llvm::all_of(sp.getResults(),
                             [&](Value v) { return last(v) == last(sp.getResult(0)); }))
              blocks = sp.getNumResults();
          }
        if (row) {
          ok = want(lin.getWeight(), {outIn ? 1 : 0, 1});
        } else { // column-parallel, or the vocabulary-parallel LM head
          ok = want(lin.getWeight(), {outIn ? 0 : 1, blocks});
          if (succeeded(ok) && lin.getBias())
            ok = want(lin.getBias(), {0, blocks});
        }
      }
      return failed(ok) ? WalkResult::interrupt() : WalkResult::advance();
    });
    if (r.wasInterrupted())
      return signalPassFailure();
    Builder b(module.getContext());
    module.walk([&](ParamOp p) {
      auto it = splits.find(p.getName());
      if (it == splits.end())
        return;
      p->setAttr("xf.tp_split",
                 b.getDictionaryAttr({b.getNamedAttr("dim", b.getI64IntegerAttr(it->second.dim)),
                                      b.getNamedAttr("blocks",
                                                     b.getI64IntegerAttr(it->second.blocks))}));
    });
  }
};
} // namespace
