//===- PipelineSplit.cpp - cut the training step into pipeline stages -----===//
//
// Pipeline parallelism is MPMD (design.md §2): the layer sequence is cut into
// contiguous model chunks, chunk k runs on pipeline stage k mod pp, and the
// schedule (an action list per stage) says when each chunk runs for which
// microbatch. This pass only decides the cut and records it as attributes;
// llcdist-lower-to-plan builds the per-stage programs from it.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Dialect/XF/Analysis/ModelStats.h"
#include "llcdist/Dialect/XF/IR/XFOps.h"
#include "llcdist/Dialect/XF/Transforms/Passes.h"
#include "llcdist/Schedule/Schedule.h"

#include "mlir/IR/Builders.h"

#include <limits>

#define DEBUG_TYPE "llcdist-pipeline-split"

namespace llcdist::xf {
#define GEN_PASS_DEF_PIPELINESPLIT
#include "llcdist/Dialect/XF/Transforms/Passes.h.inc"
} // namespace llcdist::xf

using namespace mlir;
using namespace llcdist::xf;

namespace {
/// Forward FLOPs of one op per token (ModelStats' count), a layer call's
/// body summed (a recomputed call's: what it runs); everything but linears
/// and attention counts as free.
double forwardFlops(Operation *op, SymbolTable &symbols) {
  if (auto call = dyn_cast<LayerOp>(op)) {
    double sum = 0;
    auto fn = symbols.lookup<func::FuncOp>(call.getCallee());
    if (!fn)
      return sum;
    const std::optional<llvm::DenseSet<Operation *>> live = opsRunBy(call, fn);
    for (Operation &inner : fn.getBody().front().without_terminator())
      if (!live || live->contains(&inner))
        sum += forwardFlops(&inner, symbols);
    return sum;
  }
  return forwardFlopsPerToken(op);
}

bool isBackwardCall(LayerOp call, SymbolTable &symbols) {
  auto fn = symbols.lookup<func::FuncOp>(call.getCallee());
  return fn && fn->hasAttr("xf.backward_of");
}

/// Contiguous split of `cost` (per layer) into `parts` non-empty groups that
/// minimizes the most expensive group, with `head` added to the first group
/// and `tail` to the last. Ties go to the earliest cut (deterministic).
std::vector<int64_t> balance(const std::vector<double> &cost, int64_t parts, double head, double tail) {
  int64_t n = cost.size();
  std::vector<double> prefix(n + 1, 0);
  for (int64_t i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + cost[i];
  auto group = [&](int64_t a, int64_t b) { // layers [a, b)
    return prefix[b] - prefix[a] + (a == 0 ? head : 0) + (b == n ? tail : 0);
  };
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][i]: the least max cost of splitting layers [0, i) into k groups.
  std::vector<std::vector<double>> best(parts + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int64_t>> cut(parts + 1, std::vector<int64_t>(n + 1, 0));
  best[0][0] = 0;
  for (int64_t k = 1; k <= parts; ++k)
    for (int64_t i = k; i <= n; ++i)
      for (int64_t j = k - 1; j < i; ++j) {
        double c = std::max(best[k - 1][j], group(j, i));
        if (c < best[k][i] * (1 - 1e-12)) {
          best[k][i] = c;
          cut[k][i] = j;
        }
      }
  std::vector<int64_t> sizes(parts);
  for (int64_t k = parts, i = n; k >= 1; --k) {
    sizes[k - 1] = i - cut[k][i];
    i = cut[k][i];
  }
  return sizes;
}

/// The step's top-level ops and the training cost of each part (FLOPs per
/// token: 3 × forward, the backward being 2×): each forward layer call (its
/// recomputed forward added), the ops before the first layer (head) and
/// after the last before the backward (tail).
struct StepCosts {
  SmallVector<Operation *> ops;
  int64_t firstBackward = -1;
  std::vector<double> layerCost;
  double head = 0, tail = 0;
};

StepCosts measureStep(func::FuncOp entry, SymbolTable &symbols) {
  StepCosts s;
  Block &body = entry.getBody().front();
  for (Operation &op : body.without_terminator())
    s.ops.push_back(&op);
  s.firstBackward = backwardStart(body);
  int64_t firstLayer = -1;
  for (auto [i, op] : llvm::enumerate(s.ops)) {
    auto call = dyn_cast<LayerOp>(op);
    if (call && !isBackwardCall(call, symbols) && (s.firstBackward < 0 || int64_t(i) < s.firstBackward)) {
      if (firstLayer < 0)
        firstLayer = i;
      s.layerCost.push_back(3 * forwardFlops(op, symbols));
      continue;
    }
    if (call && op->hasAttr(kRecomputedAttr)) {
      // A layer's forward again before its backward (llcdist-recompute).
      int64_t layer = call.getIndexAttr().getInt();
      if (layer >= 0 && layer < int64_t(s.layerCost.size()))
        s.layerCost[layer] += forwardFlops(op, symbols);
      continue;
    }
    if (s.firstBackward >= 0 && int64_t(i) >= s.firstBackward)
      continue;
    (firstLayer < 0 ? s.head : s.tail) += 3 * forwardFlops(op, symbols);
  }
  return s;
}

struct PipelineSplitPass : public llcdist::xf::impl::PipelineSplitBase<PipelineSplitPass> {
  using PipelineSplitBase::PipelineSplitBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t pp = meshDegrees(module).value_or(MeshDegrees{}).pp;
    // An unknown schedule is an error whatever pp is.
    auto kind = llcdist::schedule::parseScheduleKind(schedule);
    if (!kind) {
      module.emitError("llcdist-pipeline-split: ") << kind.error().message;
      return signalPassFailure();
    }
    if (pp == 1) {
      if (virtualStages != 1 || !layout.empty()) {
        module.emitError("llcdist-pipeline-split: --virtual-stages and --pp-layout "
                         "need a pipeline (pp > 1 in --mesh)");
        return signalPassFailure();
      }
      return;
    }
    func::FuncOp entry = getTrainStep(module, "llcdist-pipeline-split");
    if (!entry)
      return signalPassFailure();
    SymbolTable symbols(module);
    auto model = module->getAttrOfType<DictionaryAttr>(kModelAttr);
    int64_t microbatches = 1;
    if (model)
      if (auto m = model.getAs<IntegerAttr>("microbatches"))
        microbatches = std::max<int64_t>(1, m.getInt());
    std::string name = "the model";
    if (model)
      if (auto n = model.getAs<StringAttr>("name"))
        name = n.str();
    if (failed(checkSchedule(module, pp, *kind, microbatches)))
      return signalPassFailure();

    const int64_t v = virtualStages;
    StepCosts costs = measureStep(entry, symbols);
    int64_t layers = costs.layerCost.size(), chunks = pp * v;
    if (layers == 0 || costs.firstBackward < 0) {
      entry.emitError("llcdist-pipeline-split: the training step has no layer "
                      "calls or no loss gradient to cut");
      return signalPassFailure();
    }
    if (chunks > layers) {
      module.emitError("llcdist-pipeline-split: pp=")
          << pp
          << (v > 1 ? " × " + std::to_string(v) + " virtual stages = " + std::to_string(chunks) + " model chunks"
                    : std::string(" stages"))
          << ", but " << name << " has " << layers << " layers: every chunk needs at least one layer (lower pp"
          << (v > 1 ? " or --virtual-stages" : "") << ")";
      return signalPassFailure();
    }
    FailureOr<std::vector<int64_t>> sizes = chunkSizes(module, costs, chunks, name);
    if (failed(sizes))
      return signalPassFailure();
    std::vector<int64_t> chunkOfLayer;
    std::vector<double> chunkCost(chunks, 0);
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t k = 0; k < (*sizes)[c]; ++k) {
        chunkCost[c] += costs.layerCost[chunkOfLayer.size()];
        chunkOfLayer.push_back(c);
      }
    chunkCost.front() += costs.head;
    chunkCost.back() += costs.tail;
    // Per microbatch: every op of the step sees the microbatch's tokens.
    double tokens = cast<RankedTensorType>(entry.getArgument(0).getType()).getNumElements();
    for (double &c : chunkCost)
      c *= tokens;
    if (failed(markChunks(costs.ops, chunkOfLayer)))
      return signalPassFailure();

    Builder b(module.getContext());
    SmallVector<NamedAttribute> info{
        b.getNamedAttr("stages", b.getI64IntegerAttr(pp)),
        b.getNamedAttr("virtual_stages", b.getI64IntegerAttr(v)),
        b.getNamedAttr("schedule", b.getStringAttr(llcdist::schedule::kindName(*kind))),
        b.getNamedAttr("microbatches", b.getI64IntegerAttr(microbatches)),
        b.getNamedAttr("layers_per_chunk", b.getI64ArrayAttr(*sizes)),
        b.getNamedAttr("chunk_flops", b.getF64ArrayAttr(chunkCost)),
    };
    module->setAttr("xf.pipeline", b.getDictionaryAttr(info));
  }

private:
  /// --virtual-stages against the schedule, and the schedule against pp and
  /// the microbatches (the generators check what a schedule needs,
  /// interleaving's m % pp == 0).
  LogicalResult checkSchedule(ModuleOp module, int64_t pp, llcdist::schedule::ScheduleKind kind, int64_t microbatches) {
    int64_t v = virtualStages;
    if (v < 1)
      return module.emitError("llcdist-pipeline-split: --virtual-stages must be >= 1");
    if (v > 1 && kind != llcdist::schedule::ScheduleKind::Interleaved1F1B)
      return module.emitError("llcdist-pipeline-split: --virtual-stages ")
             << v << " needs --schedule interleaved (schedule '" << schedule << "' runs one model chunk per stage)";
    llcdist::schedule::ScheduleOptions so;
    so.stages = pp;
    so.microbatches = microbatches;
    so.virtualStages = v;
    so.kind = kind;
    if (auto s = llcdist::schedule::generateSchedule(so); !s)
      return module.emitError("llcdist-pipeline-split: schedule '")
             << schedule << "' with pp=" << pp << ", " << microbatches
             << " microbatches (--global-batch / (--micro-batch × dp)) and " << v
             << " virtual stages: " << s.error().message;
    return success();
  }

  /// Layers per chunk: --pp-layout's, or balanced by cost.
  FailureOr<std::vector<int64_t>> chunkSizes(ModuleOp module, const StepCosts &costs, int64_t chunks,
                                             const std::string &name) {
    if (layout.empty())
      return balance(costs.layerCost, chunks, costs.head, costs.tail);
    std::vector<int64_t> sizes;
    SmallVector<StringRef> parts;
    StringRef(layout).split(parts, ',');
    int64_t sum = 0, layers = costs.layerCost.size();
    for (StringRef p : parts) {
      int64_t n;
      if (p.trim().getAsInteger(10, n) || n < 1)
        return module.emitError("llcdist-pipeline-split: --pp-layout '")
               << layout << "': '" << p << "' is not a layer count >= 1";
      sizes.push_back(n);
      sum += n;
    }
    if (int64_t(sizes.size()) != chunks || sum != layers)
      return module.emitError("llcdist-pipeline-split: --pp-layout '")
             << layout << "' gives " << sizes.size() << " chunks of " << sum << " layers; the mesh needs " << chunks
             << " chunks (pp × virtual "
             << "stages) of " << name << "'s " << layers << " layers in all";
    return sizes;
  }

  /// Marks the ops: a layer call (forward or backward) runs in its layer's
  /// chunk, any other op in the chunk of the layer call before it: chunk 0
  /// before the first call (embedding) and after the last (the backward
  /// ends at layer 0: the embedding gradient), the last chunk between the
  /// forward and the backward (its last layer's: head, loss, their grads).
  static LogicalResult markChunks(ArrayRef<Operation *> ops, const std::vector<int64_t> &chunkOfLayer) {
    int64_t current = 0, layers = chunkOfLayer.size();
    for (Operation *op : ops) {
      if (isa<ParamOp>(op))
        continue;
      if (auto call = dyn_cast<LayerOp>(op)) {
        int64_t layer = call.getIndexAttr().getInt();
        if (layer < 0 || layer >= layers)
          return call.emitOpError("llcdist-pipeline-split: layer index out of range");
        current = chunkOfLayer[layer];
      }
      op->setAttr("xf.chunk", Builder(op->getContext()).getI64IntegerAttr(current));
    }
    return success();
  }
};
} // namespace
