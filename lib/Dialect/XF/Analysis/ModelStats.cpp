//===- ModelStats.cpp - parameter and FLOP counts from xf IR --------------===//
#include "llcdist/Dialect/XF/Analysis/ModelStats.h"
#include "llcdist/Dialect/XF/IR/XFOps.h"
#include "llcdist/Support/MeshSpec.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "llvm/ADT/StringMap.h"

using namespace mlir;
using namespace llcdist::xf;

func::FuncOp llcdist::xf::getEntryFunction(ModuleOp module) {
  func::FuncOp entry;
  for (auto fn : module.getOps<func::FuncOp>())
    if (fn->hasAttr(kEntryAttr)) {
      if (entry) {
        fn.emitError("more than one function is marked '") << kEntryAttr << "'";
        return {};
      }
      entry = fn;
    }
  if (!entry)
    module.emitError("no function is marked '")
        << kEntryAttr << "' (the forward function of the model)";
  return entry;
}

int64_t llcdist::xf::backwardStart(Block &trainStep) {
  for (auto [i, op] : llvm::enumerate(trainStep.without_terminator()))
    if (isa<CrossEntropyGradOp, MoeAuxLossGradOp>(op))
      return i;
  return -1;
}

func::FuncOp llcdist::xf::getOptimizerStep(ModuleOp module) {
  func::FuncOp opt;
  for (auto fn : module.getOps<func::FuncOp>())
    if (fn->hasAttr("xf.optimizer"))
      opt = fn;
  return opt;
}

int64_t MeshDegrees::size(llvm::StringRef axis) const {
  return axisSetSize(std::string_view(axis),
                     [&](std::string_view a) -> int64_t { return axisDegree(a, dp, tp, pp, cp, ep); });
}

std::string MeshDegrees::gradientAxis() const { return dataParallelAxis(dp, cp); }

std::string MeshDegrees::expertGradientAxis() const { return expertDataParallelAxis(dp, ep, cp); }

std::optional<MeshDegrees> llcdist::xf::meshDegrees(ModuleOp module) {
  auto grid = module.lookupSymbol<shard::GridOp>("mesh");
  if (!grid)
    return std::nullopt;
  ArrayRef<int64_t> s = grid.getShape();
  if (s.size() != 3 && s.size() != 4)
    return std::nullopt;
  auto ep = grid->getAttrOfType<IntegerAttr>("xf.ep");
  return MeshDegrees{s[0], s[1], s[2], s.size() == 4 ? s[3] : 1, ep && ep.getInt() > 0 ? ep.getInt() : 1};
}

func::FuncOp llcdist::xf::getTrainStep(ModuleOp module, llvm::StringRef pass) {
  func::FuncOp entry = getEntryFunction(module);
  if (entry && !entry->hasAttr("xf.train_step")) {
    entry.emitError(pass) << ": run llcdist-autodiff first";
    return {};
  }
  return entry;
}

double llcdist::xf::forwardFlopsPerToken(Operation *op) {
  if (auto lin = dyn_cast<LinearOp>(op)) {
    auto in = cast<RankedTensorType>(lin.getInput().getType());
    auto out = cast<RankedTensorType>(lin.getResult().getType());
    return 2.0 * in.getShape().back() * out.getShape().back();
  }
  if (auto g = dyn_cast<GroupedLinearOp>(op)) {
    // Each token's k rows (xf.moe_permute's experts per token) each meet
    // one expert's [O, K] weight: the active experts' FLOPs.
    auto w = cast<RankedTensorType>(g.getWeight().getType());
    int64_t k = 1;
    if (auto perm = g.getGroupSizes().getDefiningOp<MoePermuteOp>())
      k = cast<RankedTensorType>(perm.getExperts().getType()).getShape().back();
    return 2.0 * double(k) * w.getDimSize(1) * w.getDimSize(2);
  }
  if (auto att = dyn_cast<AttentionOp>(op)) {
    auto q = cast<RankedTensorType>(att.getQ().getType());
    return 4.0 * q.getDimSize(1) * att.getNumHeads() * att.getHeadDim();
  }
  return 0;
}

namespace {
/// Per-token FLOPs of the ops directly in `fn`'s body (not following calls).
struct LocalFlops {
  double linear = 0, attention = 0;
};

LocalFlops countLocalFlops(func::FuncOp fn) {
  LocalFlops f;
  fn.walk([&](Operation *op) {
    (isa<LinearOp, GroupedLinearOp>(op) ? f.linear : f.attention) += forwardFlopsPerToken(op);
  });
  return f;
}

} // namespace

llvm::DenseSet<Operation *> llcdist::xf::opsForUsedResults(Operation *call, func::FuncOp body) {
  Block &block = body.getBody().front();
  llvm::DenseSet<Operation *> live;
  SmallVector<Operation *> work;
  auto reach = [&](Value v) {
    if (Operation *d = v.getDefiningOp(); d && d->getBlock() == &block && live.insert(d).second)
      work.push_back(d);
  };
  for (Operation &op : block.without_terminator())
    if (op.getNumResults() == 0 && live.insert(&op).second)
      work.push_back(&op);
  for (auto [r, v] : llvm::zip(call->getResults(), block.getTerminator()->getOperands()))
    if (!r.use_empty())
      reach(v);
  while (!work.empty())
    for (Value v : work.pop_back_val()->getOperands())
      reach(v);
  return live;
}

std::optional<llvm::DenseSet<Operation *>> llcdist::xf::opsRunBy(Operation *call, func::FuncOp body) {
  if (!call->hasAttr(kRecomputedAttr))
    return std::nullopt;
  return opsForUsedResults(call, body);
}

FailureOr<ModelStats> llcdist::xf::computeModelStats(ModuleOp module) {
  func::FuncOp entry = getEntryFunction(module);
  if (!entry)
    return failure();
  ModelStats stats;
  llvm::StringMap<RankedTensorType> params;
  auto addParam = [&](ParamOp p, StringRef name) -> LogicalResult {
    auto [it, inserted] = params.try_emplace(name, p.getType());
    if (!inserted && it->second != p.getType())
      return p.emitOpError("parameter '")
             << name << "' is used with two shapes: " << it->second << " and "
             << p.getType();
    if (inserted)
      stats.parameters += p.getType().getNumElements();
    return success();
  };

  LocalFlops top = countLocalFlops(entry);
  stats.linearFlopsPerToken = top.linear;
  stats.attentionFlopsPerToken = top.attention;
  SymbolTable symbols(module);
  llvm::DenseMap<Operation *, LocalFlops> layerFlops;

  WalkResult r = entry.walk([&](Operation *op) -> WalkResult {
    if (auto p = dyn_cast<ParamOp>(op))
      return failed(addParam(p, p.getName())) ? WalkResult::interrupt()
                                              : WalkResult::advance();
    auto layer = dyn_cast<LayerOp>(op);
    if (!layer)
      return WalkResult::advance();
    auto body = symbols.lookup<func::FuncOp>(layer.getCallee());
    if (!body) {
      layer.emitOpError("callee @") << layer.getCallee() << " not found";
      return WalkResult::interrupt();
    }
    // A backward body (after autodiff) is not another layer; its parameters
    // are its forward body's.
    if (body->hasAttr("xf.backward_of"))
      return WalkResult::advance();
    ++stats.layers;
    auto [it, inserted] = layerFlops.try_emplace(body, LocalFlops{});
    if (inserted)
      it->second = countLocalFlops(body);
    stats.linearFlopsPerToken += it->second.linear;
    stats.attentionFlopsPerToken += it->second.attention;
    WalkResult inner = body.walk([&](ParamOp p) {
      return failed(addParam(p, instantiateLayerName(p.getName(), layer.getIndex())))
                 ? WalkResult::interrupt()
                 : WalkResult::advance();
    });
    return inner;
  });
  if (r.wasInterrupted())
    return failure();

  if (entry.getNumArguments() > 0)
    if (auto ids = dyn_cast<RankedTensorType>(entry.getArgument(0).getType());
        ids && ids.getRank() == 2) {
      stats.tokensPerMicrobatch = ids.getNumElements();
      stats.seqLen = ids.getDimSize(1);
    }
  return stats;
}
