//===- AttachMesh.cpp - declare the device mesh and check divisibility ----===//
#include "llcdist/Dialect/XF/Analysis/ModelStats.h"
#include "llcdist/Dialect/XF/IR/ConfigLoc.h"
#include "llcdist/Dialect/XF/IR/XFOps.h"
#include "llcdist/Dialect/XF/Transforms/Passes.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#define DEBUG_TYPE "llcdist-attach-mesh"

namespace llcdist::xf {
#define GEN_PASS_DEF_ATTACHMESH
#include "llcdist/Dialect/XF/Transforms/Passes.h.inc"
} // namespace llcdist::xf

using namespace mlir;
using namespace llcdist::xf;

namespace {
struct AttachMeshPass
    : public llcdist::xf::impl::AttachMeshBase<AttachMeshPass> {
  using AttachMeshBase::AttachMeshBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // Read the options once: they are cl::opt wrappers, not plain integers.
    dp_ = dp;
    tp_ = tp;
    pp_ = pp;
    cp_ = cp;
    ep_ = ep;
    if (dp_ < 1 || tp_ < 1 || pp_ < 1 || cp_ < 1 || ep_ < 1) {
      module.emitError("mesh degrees must be >= 1, got dp=")
          << dp_ << " tp=" << tp_ << " pp=" << pp_ << " cp=" << cp_ << " ep=" << ep_;
      return signalPassFailure();
    }
    OpBuilder b(module.getContext());
    SmallVector<StringRef> order;
    StringRef(rankOrder).split(order, ',');
    auto count = [&](StringRef a) { return llvm::count(order, a); };
    bool three = order.size() == 3 && count("dp") == 1 && count("tp") == 1 && count("pp") == 1;
    bool four = order.size() == 4 && count("dp") == 1 && count("tp") == 1 && count("pp") == 1 && count("cp") == 1;
    if (!three && !four) {
      module.emitError("rank-order '") << rankOrder << "' is not a permutation of dp, tp, pp (and cp)";
      return signalPassFailure();
    }
    // A mesh without cp keeps the three-axis grid it always had; with cp > 1
    // a three-axis order takes cp right after tp (Megatron: tp, cp, dp, pp).
    if (cp_ == 1 && four)
      llvm::erase(order, "cp");
    if (cp_ > 1 && three)
      order.insert(llvm::find(order, "tp") + 1, "cp");
    SmallVector<int64_t> shape{dp_, tp_, pp_};
    if (cp_ > 1)
      shape.push_back(cp_);
    ArrayAttr axes = gridAxes(module.getContext(), cp_ > 1);
    ArrayAttr orderAttr = b.getStrArrayAttr(order);
    // Idempotent: the output of `llc-dist compile --emit xf` already declares
    // the mesh it was attached for. The same mesh is accepted as is, so that
    // file compiles again; any other is an error naming both.
    Operation *old = module.lookupSymbol("mesh");
    if (old && failed(checkExistingMesh(old, orderAttr)))
      return signalPassFailure();
    if (failed(checkDivisibility(module)))
      return signalPassFailure();
    if (old)
      return;
    b.setInsertionPointToStart(module.getBody());
    auto grid = shard::GridOp::create(b, module.getLoc(), "mesh", ArrayRef<int64_t>(shape));
    grid->setAttr("xf.mesh_axes", axes);
    grid->setAttr("xf.rank_order", orderAttr);
    if (ep_ > 1)
      grid->setAttr("xf.ep", b.getI64IntegerAttr(ep_));
  }

  /// An existing @mesh must be the grid this pass would create (the same
  /// degrees; cp named exactly when cp > 1).
  LogicalResult checkExistingMesh(Operation *old, ArrayAttr order) {
    // "tp,dp,pp" for a rank order (a non-string entry shows as "?").
    auto joined = [](ArrayAttr names) {
      return llvm::join(llvm::map_range(names,
                                        [](Attribute a) {
                                          auto s = dyn_cast<StringAttr>(a);
                                          return s ? s.getValue() : StringRef("?");
                                        }),
                        ",");
    };
    auto meshStr = [](ArrayRef<int64_t> s, int64_t ep) {
      std::string m = llvm::formatv("dp={0},tp={1},pp={2}", s[0], s[1], s[2]);
      return (s.size() == 4 ? m + ",cp=" + std::to_string(s[3]) : m) + (ep > 1 ? ",ep=" + std::to_string(ep) : "");
    };
    std::string want = meshStr(cp_ > 1 ? ArrayRef<int64_t>{dp_, tp_, pp_, cp_} : ArrayRef<int64_t>{dp_, tp_, pp_}, ep_);
    auto grid = dyn_cast<shard::GridOp>(old);
    auto oldAxes = grid ? grid->getAttrOfType<ArrayAttr>("xf.mesh_axes") : ArrayAttr();
    bool known = oldAxes &&
                 (oldAxes == gridAxes(old->getContext(), false) || oldAxes == gridAxes(old->getContext(), true)) &&
                 grid.getShape().size() == oldAxes.size();
    if (!known)
      return old->emitError("a symbol named @mesh already exists and is not "
                            "the dp x tp x pp (x cp) grid llcdist-attach-mesh "
                            "declares (shard.grid with xf.mesh_axes = "
                            "[\"dp\", \"tp\", \"pp\"] or [\"dp\", \"tp\", \"pp\", \"cp\"]); rename or "
                            "remove it");
    auto oldEp = grid->getAttrOfType<IntegerAttr>("xf.ep");
    std::string have = meshStr(grid.getShape(), oldEp ? oldEp.getInt() : 1);
    if (have != want)
      return old->emitError("the module already declares mesh ")
             << have << " but mesh " << want
             << " was requested; compile it with --mesh " << have
             << " (or from the config for another mesh)";
    auto oldOrder = grid->getAttrOfType<ArrayAttr>("xf.rank_order");
    if (oldOrder && oldOrder != order) {
      std::string haveOrder = joined(oldOrder);
      return old->emitError("the module's mesh has rank order ")
             << haveOrder << " but rank order " << joined(order)
             << " was requested; compile it with --rank-order " << haveOrder;
    }
    if (!oldOrder)
      grid->setAttr("xf.rank_order", order);
    return success();
  }

  LogicalResult checkDivisibility(ModuleOp module) {
    func::FuncOp entry = getEntryFunction(module);
    if (!entry)
      return failure();
    // Every op of the model: entry plus the layer bodies it calls.
    bool ok = true;
    module.walk([&](Operation *op) {
      if (auto att = dyn_cast<AttentionOp>(op)) {
        int64_t nh = att.getNumHeads(), nkv = att.getNumKvHeads();
        if (nh % tp_ != 0) {
          att.emitError("tp=") << tp_ << " does not divide num_heads=" << nh
                               << "; choose tp among the divisors of " << nh;
          ok = false;
        } else if (nkv % tp_ != 0 && tp_ % nkv != 0) {
          emitError(configFieldLoc(att, "num_kv_heads"), "tp=")
              << tp_ << " and num_kv_heads=" << nkv
                               << " do not divide one another; kv heads can "
                                  "be split (tp | kv heads) or replicated "
                                  "(kv heads | tp)";
          ok = false;
        }
      }
      // The vocabulary need not divide tp: llcdist-pad-vocab pads it (the
      // training pipeline runs it with 128 × tp, Megatron's default).
    });
    if (!ok)
      return failure();
    if (entry.getNumArguments() > 0)
      if (auto ids = dyn_cast<RankedTensorType>(entry.getArgument(0).getType())) {
        if (ids.getRank() >= 1 && ids.getDimSize(0) % dp_ != 0)
          return entry.emitError("dp=")
                 << dp_ << " does not divide the batch of "
                 << ids.getDimSize(0) << " sequences";
        if (cp_ > 1 && (ids.getRank() < 2 || ids.getDimSize(1) % cp_ != 0))
          return entry.emitError("cp=") << cp_ << " does not divide the sequence of "
                                        << (ids.getRank() < 2 ? 0 : ids.getDimSize(1))
                                        << " tokens; choose --seq-len a multiple of cp";
      }
    if (failed(checkExperts(module, entry)))
      return failure();
    int64_t layers = 0;
    entry.walk([&](LayerOp) { ++layers; });
    if (pp_ > 1 && pp_ > layers)
      return emitError(configFieldLoc(entry, "num_layers"), "pp=")
             << pp_ << " exceeds the model's " << layers
             << " layers; a pipeline stage needs at least one layer";
    return success();
  }

  /// Expert parallelism splits every mixture-of-experts layer's experts
  /// over ep ranks drawn from dp: ep divides dp and each layer's experts.
  LogicalResult checkExperts(ModuleOp module, func::FuncOp entry) {
    if (ep_ == 1)
      return success();
    if (dp_ % ep_ != 0)
      return entry.emitError("ep=") << ep_ << " must divide dp=" << dp_
                                    << ": expert-parallel ranks are drawn from the data-parallel group";
    bool any = false;
    WalkResult r = module.walk([&](MoePermuteOp perm) {
      any = true;
      int64_t experts = cast<RankedTensorType>(perm.getGroupSizes().getType()).getDimSize(0);
      if (experts % ep_ == 0)
        return WalkResult::advance();
      emitError(configFieldLoc(perm, "num_local_experts"), "ep=")
          << ep_ << " does not divide the " << experts << " experts; choose ep among the divisors of " << experts;
      return WalkResult::interrupt();
    });
    if (r.wasInterrupted())
      return failure();
    if (!any)
      return entry.emitError("ep=") << ep_
                                    << " splits a mixture-of-experts model's experts, but this model has none; "
                                       "leave ep out of --mesh";
    return success();
  }

  /// The grid's axis names: dp, tp, pp (and cp).
  static ArrayAttr gridAxes(MLIRContext *ctx, bool withCp) {
    Builder b(ctx);
    return withCp ? b.getStrArrayAttr({"dp", "tp", "pp", "cp"}) : b.getStrArrayAttr({"dp", "tp", "pp"});
  }

  int64_t dp_ = 1, tp_ = 1, pp_ = 1, cp_ = 1, ep_ = 1;
};
} // namespace
