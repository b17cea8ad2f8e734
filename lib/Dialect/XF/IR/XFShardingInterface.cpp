//===- XFShardingInterface.cpp - upstream ShardingInterface for xf --------===//
//
// Every xf op that computes on tensors is described to upstream MLIR's
// `shard` dialect the way linalg ops are: a loop nest (parallel or reduction
// iterators) and one indexing map per operand and result, each a projected
// permutation of the loops. Upstream `sharding-propagation` then derives the
// shardings of unannotated values, and `shard-partition` calls `partition`
// below to build the per-rank op on local shapes.
//
// xf ops are coarser than linalg ops: several of their dimensions cannot be
// split without changing what the op computes (causal attention's sequence,
// the hidden dimension a norm reduces over, the vocabulary an embedding
// gathers from, rope's absolute positions, the fused pieces of xf.split).
// Upstream has no notion of an unshardable loop, so each loop here carries a
// *granule*: the number of mesh processes splitting it must divide the
// granule; granule 1 pins the loop (it must stay replicated).
// `getShardingOption` drops every split that violates its granule, so the op
// asks for the replicated layout and partition gathers the operand instead of
// computing a wrong result. This is the conservative answer the docs describe
// op by op (docs/sharding-interface.md).
//
// Upstream's sharding attribute has no partial-sum state (MLIR 22): when a
// reduction loop is split, `partition` all-reduces the op's results right
// away (as upstream linalg does), and the result's annotation says
// "replicated".
//
//===----------------------------------------------------------------------===//
#include "llcdist/Dialect/XF/IR/XFShardingInterface.h"

#include "llcdist/Dialect/XF/IR/XFDialect.h"
#include "llcdist/Dialect/XF/IR/XFOps.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterface.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterfaceImpl.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"

#include <optional>

using namespace mlir;
using namespace llcdist::xf;

using shard::GridAxis;
using shard::GridOp;
using shard::ReductionKind;
using shard::Sharding;
using shard::ShardingArray;
using shard::ShardingOption;
using utils::IteratorType;

namespace {

//===----------------------------------------------------------------------===//
// The loop nest of an xf op
//===----------------------------------------------------------------------===//

struct Loop {
  IteratorType type = IteratorType::parallel;
  /// Combiner of a reduction loop (ignored for parallel loops).
  ReductionKind kind = ReductionKind::Sum;
  /// nullopt: any split; otherwise the split count must divide it (1: the
  /// loop must stay replicated).
  std::optional<int64_t> granule;
};

struct OpSpec {
  SmallVector<Loop> loops;
  /// One per operand, then one per result; dimension i of the value is
  /// indexed by loop dims[i].
  SmallVector<SmallVector<unsigned>> dims;

  unsigned add(IteratorType type = IteratorType::parallel, std::optional<int64_t> granule = std::nullopt,
               ReductionKind kind = ReductionKind::Sum) {
    loops.push_back({type, kind, granule});
    return loops.size() - 1;
  }
  unsigned pinned(IteratorType type = IteratorType::parallel, ReductionKind kind = ReductionKind::Generic) {
    return add(type, 1, kind);
  }
  SmallVector<unsigned> addN(unsigned n, IteratorType type, ReductionKind kind = ReductionKind::Sum) {
    SmallVector<unsigned> res;
    for (unsigned i = 0; i < n; ++i)
      res.push_back(add(type, std::nullopt, kind));
    return res;
  }
  void map(ArrayRef<unsigned> d) { dims.emplace_back(d.begin(), d.end()); }
  void map(ArrayRef<unsigned> lead, ArrayRef<unsigned> tail) {
    SmallVector<unsigned> d(lead.begin(), lead.end());
    d.append(tail.begin(), tail.end());
    dims.push_back(std::move(d));
  }

  SmallVector<AffineMap> maps(MLIRContext *ctx) const {
    SmallVector<AffineMap> res;
    for (const auto &d : dims) {
      SmallVector<AffineExpr> exprs;
      for (unsigned l : d)
        exprs.push_back(getAffineDimExpr(l, ctx));
      res.push_back(AffineMap::get(loops.size(), 0, exprs, ctx));
    }
    return res;
  }
};

int64_t rank(Value v) { return cast<RankedTensorType>(v.getType()).getRank(); }

/// Identity maps for every operand and result (all of one rank).
OpSpec elementwise(Operation *op) {
  OpSpec s;
  Value first = op->getNumResults() ? op->getResult(0) : op->getOperand(0);
  SmallVector<unsigned> all = s.addN(rank(first), IteratorType::parallel);
  for (unsigned i = 0, e = op->getNumOperands() + op->getNumResults(); i < e; ++i)
    s.map(all);
  return s;
}

/// The leading ("row") loops of a [..., H] value. The norms' statistics are
/// laid out over rows = the product of the leading dims, flattened: that is
/// a block split of the rows only when just the first leading loop is split,
/// so when statistics are present the other leading loops are pinned, and
/// the statistics' row dim is indexed by the first leading loop. A rank-1
/// input has a single row: a pinned loop stands for it.
struct Rows {
  SmallVector<unsigned> lead;
  unsigned row;
};
Rows rows(OpSpec &s, int64_t leadRank, bool withStats, IteratorType type, ReductionKind kind) {
  Rows r;
  for (int64_t i = 0; i < leadRank; ++i) {
    bool pin = withStats && i > 0;
    r.lead.push_back(s.add(type, pin ? std::optional<int64_t>(1) : std::nullopt, kind));
  }
  r.row = leadRank > 0 ? r.lead.front() : s.pinned(type, kind);
  return r;
}

/// Norm forward and dX: rows parallel, H a reduction (mean/variance) that
/// upstream cannot split (not a sum of per-shard results): pinned.
/// Operand order: the [..., H] tensors (`wide`), the [H] vectors, `stats`.
OpSpec normSpec(int64_t inRank, unsigned wideOperands, unsigned vecOperands, bool statsOperand, unsigned wideResults,
                bool statsResult, bool lnStats) {
  OpSpec s;
  bool withStats = statsOperand || statsResult;
  Rows r = rows(s, inRank - 1, withStats, IteratorType::parallel, ReductionKind::Sum);
  unsigned h = s.pinned(IteratorType::reduction, ReductionKind::Generic);
  std::optional<unsigned> two;
  if (withStats && lnStats)
    two = s.pinned();
  auto statsMap = [&] {
    if (two)
      s.map({*two, r.row});
    else
      s.map({r.row});
  };
  for (unsigned i = 0; i < wideOperands; ++i)
    s.map(r.lead, {h});
  for (unsigned i = 0; i < vecOperands; ++i)
    s.map({h});
  if (statsOperand)
    statsMap();
  for (unsigned i = 0; i < wideResults; ++i)
    s.map(r.lead, {h});
  if (statsResult)
    statsMap();
  return s;
}

/// Norm parameter gradients: a sum over rows (the data-parallel partial
/// sum); H parallel (the statistics are given, so dW[h] is local in h).
OpSpec normParamsSpec(int64_t inRank, unsigned numResults, bool lnStats) {
  OpSpec s;
  Rows r = rows(s, inRank - 1, /*withStats=*/true, IteratorType::reduction, ReductionKind::Sum);
  unsigned h = s.add();
  std::optional<unsigned> two;
  if (lnStats)
    two = s.pinned();
  s.map(r.lead, {h}); // dy
  s.map(r.lead, {h}); // input
  if (two)
    s.map({*two, r.row});
  else
    s.map({r.row});
  for (unsigned i = 0; i < numResults; ++i)
    s.map({h});
  return s;
}

SmallVector<unsigned> weightDims(WeightLayout layout, unsigned n, unsigned k) {
  return layout == WeightLayout::OutIn ? SmallVector<unsigned>{n, k} : SmallVector<unsigned>{k, n};
}

/// Attention and its gradient: batch parallel; the sequence pinned (causal:
/// query s reads keys 0..s, so a split sequence needs the earlier keys);
/// the feature dim = heads*head_dim split in whole kv groups: the split count
/// must divide num_kv_heads (then it divides num_heads too, and every local
/// query head still reads its own kv head). lse [B, num_heads, S] is indexed
/// by the same feature loop: a block split of num_heads*head_dim features
/// into n whole-head blocks is a block split of the heads.
OpSpec attentionSpec(int64_t numKvHeads, unsigned tensorsBefore, bool lseOperand, unsigned tensorsAfter,
                     bool lseResult) {
  OpSpec s;
  unsigned b = s.add();
  unsigned q = s.pinned();
  unsigned f = s.add(IteratorType::parallel, numKvHeads);
  for (unsigned i = 0; i < tensorsBefore; ++i)
    s.map({b, q, f});
  if (lseOperand)
    s.map({b, f, q});
  for (unsigned i = 0; i < tensorsAfter; ++i)
    s.map({b, q, f});
  if (lseResult)
    s.map({b, f, q});
  return s;
}

// The loop nest of each xf op with a StructuredModel (below); an op with the
// Elementwise trait needs none (`elementwise`).

/// One tensor, its dims independent (a parameter's or gradient's shard is
/// the same slice of every rank's copy).
OpSpec spec(ParamOp op) { return elementwise(op); }
OpSpec spec(AccumulateGradOp op) { return elementwise(op); }

/// [B, S, heads*head_dim]: each position is rotated by its absolute index s,
/// so S is pinned; the features split in whole heads.
OpSpec ropeSpec(Value x, int64_t headDim) {
  int64_t f = cast<RankedTensorType>(x.getType()).getDimSize(2);
  OpSpec s;
  unsigned b = s.add(), q = s.pinned(), h = s.add(IteratorType::parallel, f / headDim);
  s.map({b, q, h});
  s.map({b, q, h});
  return s;
}
OpSpec spec(RopeOp op) { return ropeSpec(op.getResult(), op.getHeadDim()); }
OpSpec spec(RopeGradOp op) { return ropeSpec(op.getResult(), op.getHeadDim()); }

OpSpec spec(LayerNormOp op) {
  // input, weight and bias (none without an affine transform, no bias in MPT's) -> result, stats
  return normSpec(rank(op.getInput()), 1, unsigned(bool(op.getWeight())) + unsigned(bool(op.getBias())), false, 1,
                  static_cast<bool>(op.getStats()), true);
}

OpSpec spec(RMSNormOp op) {
  return normSpec(rank(op.getInput()), 1, 1, false, 1, static_cast<bool>(op.getStats()), false);
}

OpSpec spec(LayerNormGradInputOp op) {
  // dy, input, weight (if any), stats -> dx
  return normSpec(rank(op.getInput()), 2, op.getWeight() ? 1 : 0, true, 1, false, true);
}

OpSpec spec(RMSNormGradInputOp op) { return normSpec(rank(op.getInput()), 2, 1, true, 1, false, false); }

OpSpec spec(LayerNormGradParamsOp op) { return normParamsSpec(rank(op.getInput()), op->getNumResults(), true); }

OpSpec spec(RMSNormGradWeightOp op) { return normParamsSpec(rank(op.getInput()), 1, false); }

OpSpec spec(LinearOp op) {
  // (rows..., N, K), K a sum.
  OpSpec s;
  auto lead = s.addN(rank(op.getInput()) - 1, IteratorType::parallel);
  unsigned n = s.add(), k = s.add(IteratorType::reduction);
  s.map(lead, {k});
  s.map(weightDims(op.getLayout(), n, k));
  if (op.getBias())
    s.map({n});
  s.map(lead, {n});
  return s;
}

OpSpec spec(LinearGradInputOp op) {
  // dx[r, k] = sum_n dy[r, n] W[n, k]: (rows..., K, N), N a sum.
  OpSpec s;
  auto lead = s.addN(rank(op.getDy()) - 1, IteratorType::parallel);
  unsigned k = s.add(), n = s.add(IteratorType::reduction);
  s.map(lead, {n});
  s.map(weightDims(op.getLayout(), n, k));
  s.map(lead, {k});
  return s;
}

OpSpec spec(LinearGradWeightOp op) {
  // dW[n, k] = sum_rows dy[r, n] x[r, k]: the rows are the sum (data
  // parallelism's partial sum).
  OpSpec s;
  auto lead = s.addN(rank(op.getDy()) - 1, IteratorType::reduction);
  unsigned n = s.add(), k = s.add();
  s.map(lead, {n});
  s.map(lead, {k});
  s.map(weightDims(op.getLayout(), n, k));
  return s;
}

OpSpec spec(LinearGradBiasOp op) {
  OpSpec s;
  auto lead = s.addN(rank(op.getDy()) - 1, IteratorType::reduction);
  unsigned n = s.add();
  s.map(lead, {n});
  s.map({n});
  return s;
}

OpSpec spec(EmbeddingOp op) {
  // A gather: the ids' dims parallel; the vocabulary pinned (a
  // vocab-parallel table needs masking + a sum, not expressible here).
  OpSpec s;
  auto lead = s.addN(rank(op.getIds()), IteratorType::parallel);
  unsigned v = s.pinned(), h = s.add();
  s.map(lead);
  s.map({v, h});
  s.map(lead, {h});
  return s;
}

OpSpec spec(EmbeddingGradOp op) {
  // A scatter-add over the ids' positions: those are the sum.
  OpSpec s;
  auto lead = s.addN(rank(op.getIds()), IteratorType::reduction);
  unsigned v = s.pinned(), h = s.add();
  s.map(lead);
  s.map(lead, {h});
  s.map({v, h});
  return s;
}

/// input[b, s] + table[s]: the table has P >= S rows, so neither S nor P can
/// be split consistently: both pinned.
OpSpec spec(AddPositionEmbeddingOp) {
  OpSpec s;
  unsigned b = s.add(), q = s.pinned(), h = s.add(), p = s.pinned();
  s.map({b, q, h});
  s.map({p, h});
  s.map({b, q, h});
  return s;
}

OpSpec spec(AddPositionEmbeddingGradOp) {
  OpSpec s;
  unsigned b = s.add(IteratorType::reduction), q = s.pinned(), h = s.add(), p = s.pinned();
  s.map({b, q, h});
  s.map({p, h});
  return s;
}

OpSpec spec(AttentionOp op) { return attentionSpec(op.getNumKvHeads(), 3, false, 1, static_cast<bool>(op.getLse())); }

OpSpec spec(AttentionGradOp op) {
  // dout, q, k, v, out, lse -> dq, dk, dv
  return attentionSpec(op.getNumKvHeads(), 5, true, 3, false);
}

OpSpec spec(CrossEntropyOp op) {
  // The mean over every token: an average over the rows (equal
  // shards), and a log-softmax over the vocabulary (pinned).
  OpSpec s;
  auto lead = s.addN(rank(op.getTargets()), IteratorType::reduction, ReductionKind::Average);
  unsigned v = s.pinned(IteratorType::reduction, ReductionKind::Generic);
  s.map(lead, {v});
  s.map(lead);
  s.map({});
  return s;
}

OpSpec spec(CrossEntropyGradOp op) {
  // Per-token softmax - onehot, scaled by the global 1/tokens.
  OpSpec s;
  auto lead = s.addN(rank(op.getTargets()), IteratorType::parallel);
  unsigned v = s.pinned();
  s.map(lead, {v});
  s.map(lead);
  s.map(lead, {v});
  return s;
}

/// Consecutive pieces of the last dim: a block split of the whole is not a
/// block split of each piece (GPT-2's fused QKV), so pinned.
OpSpec piecesSpec(Operation *op) {
  OpSpec s;
  auto lead = s.addN(rank(op->getResult(0)) - 1, IteratorType::parallel);
  unsigned f = s.pinned();
  for (unsigned i = 0, e = op->getNumOperands() + op->getNumResults(); i < e; ++i)
    s.map(lead, {f});
  return s;
}
OpSpec spec(SplitOp op) { return piecesSpec(op); }
OpSpec spec(ConcatOp op) { return piecesSpec(op); }

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//

/// The token loops of an MoE op's [tokens..., d] values: the first (the
/// batch) splits, the others are pinned, since the permuted rows [B·S·k, d]
/// are laid out by the first one alone (a block of batches is a block of
/// rows). Which rows go to which expert depends on the data: every expert,
/// top-k and feature loop is pinned.
SmallVector<unsigned> tokenLoops(OpSpec &s, int64_t leadRank) {
  SmallVector<unsigned> lead;
  for (int64_t i = 0; i < leadRank; ++i)
    lead.push_back(i == 0 ? s.add() : s.pinned());
  return lead;
}

/// A per-token MoE op: the token loops, then pinned loops a, b (and c when
/// used), and each operand, then each result, laid out as one letter of
/// `layout`: 'a' / 'b' = (tokens..., a / b), 'A' = the permuted rows
/// (batch, a), 'c' = (c) alone (the group sizes).
OpSpec tokenwise(int64_t leadRank, StringRef layout) {
  OpSpec s;
  auto lead = tokenLoops(s, leadRank);
  unsigned a = s.pinned(), b = s.pinned(), c = layout.contains('c') ? s.pinned() : 0;
  for (char v : layout) {
    if (v == 'A')
      s.map({lead.front(), a});
    else if (v == 'c')
      s.map({c});
    else
      s.map(lead, {v == 'a' ? a : b});
  }
  return s;
}

// a: experts (the logits' last dim), b: the top-k.
OpSpec spec(MoeRouteOp op) { return tokenwise(rank(op.getLogits()) - 1, "abb"); }
OpSpec spec(MoeRouteGradOp op) { return tokenwise(rank(op.getLogits()) - 1, "abba"); }
// a: hidden, b: the top-k, c: experts. input, experts -> rows, slots, sizes.
OpSpec spec(MoePermuteOp op) { return tokenwise(rank(op.getInput()) - 1, "abAbc"); }
// rows, slots (, weights) -> (tokens, h).
OpSpec spec(MoeUnpermuteOp op) { return tokenwise(rank(op.getSlots()) - 1, op.getWeights() ? "Abba" : "Aba"); }
// dy, rows, slots, weights -> drows, dweights.
OpSpec spec(MoeUnpermuteGradOp op) { return tokenwise(rank(op.getSlots()) - 1, "aAbbAb"); }

/// The load-balancing statistics: sums over the tokens (the first token
/// loop a sum, the others pinned), per expert (pinned: the loss needs
/// them all). logits, experts, counts, probs -> counts', probs'.
OpSpec spec(MoeRouterStatsOp op) {
  OpSpec s;
  SmallVector<unsigned> lead;
  for (int64_t i = 0, n = rank(op.getLogits()) - 1; i < n; ++i)
    lead.push_back(i == 0 ? s.add(IteratorType::reduction) : s.pinned(IteratorType::reduction, ReductionKind::Sum));
  unsigned e = s.pinned(), k = s.pinned();
  s.map(lead, {e});
  s.map(lead, {k});
  for (int i = 0; i < 4; ++i)
    s.map({e});
  return s;
}
// logits, dprobs -> dlogits: per token, the experts pinned.
OpSpec spec(MoeRouterStatsGradOp op) {
  OpSpec s;
  auto lead = tokenLoops(s, rank(op.getLogits()) - 1);
  unsigned e = s.pinned();
  s.map(lead, {e});
  s.map({e});
  s.map(lead, {e});
  return s;
}
/// The load-balancing loss and its gradient read every expert's counts
/// (their sum is the token count): the expert loop is pinned.
OpSpec spec(MoeAuxLossOp) {
  OpSpec s;
  unsigned e = s.pinned(IteratorType::reduction, ReductionKind::Sum);
  s.map({});
  s.map({e});
  s.map({e});
  s.map({});
  return s;
}
OpSpec spec(MoeAuxLossGradOp) {
  OpSpec s;
  unsigned e = s.pinned();
  s.map({e});
  s.map({e});
  return s;
}
OpSpec spec(ZerosOp op) { return elementwise(op); }

/// The grouped GEMMs: rows n (parallel, or the sum of the weight gradient),
/// the experts, outputs and inputs pinned.
OpSpec groupedSpec(bool gradWeight, bool gradInput) {
  OpSpec s;
  unsigned n = s.add(gradWeight ? IteratorType::reduction : IteratorType::parallel);
  unsigned e = s.pinned(), o = s.pinned(), k = s.pinned();
  if (gradWeight) { // dy (n, o), x (n, k), sizes (e) -> dw (e, o, k)
    s.map({n, o});
    s.map({n, k});
    s.map({e});
    s.map({e, o, k});
  } else if (gradInput) { // dy (n, o), w (e, o, k), sizes (e) -> dx (n, k)
    s.map({n, o});
    s.map({e, o, k});
    s.map({e});
    s.map({n, k});
  } else { // x (n, k), w (e, o, k), sizes (e) -> y (n, o)
    s.map({n, k});
    s.map({e, o, k});
    s.map({e});
    s.map({n, o});
  }
  return s;
}
OpSpec spec(GroupedLinearOp) { return groupedSpec(false, false); }
OpSpec spec(GroupedLinearGradInputOp) { return groupedSpec(false, true); }
OpSpec spec(GroupedLinearGradWeightOp) { return groupedSpec(true, false); }

// a: hidden, b: the gate's one column. gate, input -> result; dy, gate,
// input -> dgate, dinput.
OpSpec spec(SigmoidGateOp op) { return tokenwise(rank(op.getInput()) - 1, "baa"); }
OpSpec spec(SigmoidGateGradOp op) { return tokenwise(rank(op.getInput()) - 1, "ababa"); }

//===----------------------------------------------------------------------===//
// Shared pieces of the models
//===----------------------------------------------------------------------===//

/// Processes along `axes`, or nullopt when a grid size is dynamic.
std::optional<int64_t> splitCount(GridOp grid, ArrayRef<GridAxis> axes) {
  int64_t n = shard::collectiveProcessGroupSize(axes, grid);
  if (ShapedType::isDynamic(n))
    return std::nullopt;
  return n;
}

/// Which grid axes split each loop, read from the partitioned op's operand
/// and result shardings.
ShardingArray loopAxes(const OpSpec &spec, ArrayRef<Sharding> operands, ArrayRef<Sharding> results) {
  ShardingArray res(spec.loops.size());
  std::vector<Sharding> all(operands.begin(), operands.end());
  all.insert(all.end(), results.begin(), results.end());
  for (auto [sharding, dims] : llvm::zip(all, spec.dims)) {
    if (!sharding)
      continue;
    for (auto [axes, loop] : llvm::zip(sharding.getSplitAxes(), dims))
      if (!axes.empty() && res[loop].empty())
        res[loop].assign(axes.asArrayRef().begin(), axes.asArrayRef().end());
  }
  return res;
}

/// Builds the per-rank op: a clone on local types; when a reduction loop is
/// split, each result is all-reduced over its axes (upstream has no partial
/// state to defer it to).
LogicalResult partitionXF(Operation *op, const OpSpec &spec, ArrayRef<Sharding> operandShardings,
                          ArrayRef<Sharding> resultShardings, IRMapping &partitionMap,
                          SymbolTableCollection &symbolTable, OpBuilder &builder) {
  ShardingArray axes = loopAxes(spec, operandShardings, resultShardings);
  SmallVector<GridAxis> reductionAxes;
  std::optional<ReductionKind> kind;
  FlatSymbolRefAttr gridSym;
  for (const Sharding &s : llvm::concat<const Sharding>(operandShardings, resultShardings))
    if (s && !gridSym)
      gridSym = s.getGridAttr();
  GridOp grid = shard::getGridOrNull(op, gridSym, symbolTable);

  for (auto [loop, loopAxes] : llvm::zip(spec.loops, axes)) {
    if (loopAxes.empty())
      continue;
    if (loop.granule) {
      std::optional<int64_t> n = grid ? splitCount(grid, loopAxes) : std::nullopt;
      if (!n || *loop.granule % *n != 0)
        return op->emitOpError("cannot partition: a dimension this op cannot "
                               "split (see docs/sharding-interface.md) is "
                               "sharded; annotate it replicated");
    }
    if (loop.type != IteratorType::reduction)
      continue;
    if (loop.kind == ReductionKind::Generic || (kind && *kind != loop.kind))
      return op->emitOpError("cannot partition: the split reduction is not a "
                             "single sum/average");
    kind = loop.kind;
    llvm::append_range(reductionAxes, loopAxes);
  }
  if (!reductionAxes.empty()) {
    if (auto linear = dyn_cast<LinearOp>(op); linear && linear.getBias())
      return op->emitOpError("cannot partition: a row-parallel xf.linear (in-features sharded) "
                             "with a bias would add the bias on every rank before the "
                             "all_reduce; split the bias off or keep the in-features replicated");
  }

  // ALiBi's slopes belong to the model's heads; a rank's slice needs the
  // split axis's name, which llcdist-partition records (xf.alibi_head_axis).
  if (op->hasAttr("alibi_heads") && grid && !axes[2].empty() && splitCount(grid, axes[2]) != 1)
    return op->emitOpError("cannot partition: the heads of an attention with alibi_heads split over grid axes; "
                           "use llcdist-partition, which gives each rank its slice of the slopes");
  Operation *clone = builder.clone(*op, partitionMap);
  for (auto [result, sharding] : llvm::zip_equal(clone->getResults(), resultShardings)) {
    if (!sharding)
      continue;
    result.setType(
        shard::shardType(result.getType(), shard::getGridOrNull(op, sharding.getGridAttr(), symbolTable), sharding));
  }

  // Attention's head counts are attributes: a feature split over n ranks
  // leaves num_heads/n and num_kv_heads/n heads on each (the granule
  // guarantees n divides num_kv_heads, hence num_heads).
  auto localHeads = [&](auto attn) {
    int64_t n = 1;
    if (grid && !axes[2].empty())
      n = *splitCount(grid, axes[2]);
    if (n == 1)
      return;
    attn.setNumHeadsAttr(builder.getI64IntegerAttr(attn.getNumHeads() / n));
    attn.setNumKvHeadsAttr(builder.getI64IntegerAttr(attn.getNumKvHeads() / n));
  };
  if (auto attn = dyn_cast<AttentionOp>(clone))
    localHeads(attn);
  if (auto attn = dyn_cast<AttentionGradOp>(clone))
    localHeads(attn);

  if (!reductionAxes.empty() && grid) {
    for (auto [orig, local] : llvm::zip(op->getResults(), clone->getResults())) {
      Value reduced = shard::AllReduceOp::create(builder, op->getLoc(), local, grid.getSymName(), reductionAxes, *kind);
      partitionMap.map(orig, reduced);
    }
  }
  return success();
}

//===----------------------------------------------------------------------===//
// The models
//===----------------------------------------------------------------------===//

/// An xf op described by its loop nest: `spec`, or `elementwise` for an op
/// with the Elementwise trait.
template <typename Op>
struct StructuredModel : public shard::ShardingInterface::ExternalModel<StructuredModel<Op>, Op> {
  static OpSpec getSpec(Operation *op) {
    if constexpr (Op::template hasTrait<OpTrait::Elementwise>())
      return elementwise(op);
    else
      return spec(cast<Op>(op));
  }

  SmallVector<IteratorType> getLoopIteratorTypes(Operation *op) const {
    return llvm::map_to_vector(getSpec(op).loops, [](const Loop &l) { return l.type; });
  }

  SmallVector<ReductionKind> getReductionLoopIteratorKinds(Operation *op) const {
    SmallVector<ReductionKind> res;
    for (const Loop &l : getSpec(op).loops)
      if (l.type == IteratorType::reduction)
        res.push_back(l.kind);
    return res;
  }

  SmallVector<AffineMap> getIndexingMaps(Operation *op) const { return getSpec(op).maps(op->getContext()); }

  /// Upstream's default, then every split that breaks a loop's granule is
  /// dropped: the op then asks for that dimension replicated.
  FailureOr<ShardingOption> getShardingOption(Operation *op, ArrayRef<Sharding> operandShardings,
                                              ArrayRef<Sharding> resultShardings) const {
    FailureOr<ShardingOption> option = shard::detail::defaultGetShardingOption(op, operandShardings, resultShardings);
    if (failed(option) || option->empty || !option->grid)
      return option;
    OpSpec opSpec = getSpec(op);
    auto grid = SymbolTable::lookupNearestSymbolFrom<GridOp>(op, option->grid);
    for (auto [loop, axes] : llvm::zip(opSpec.loops, option->shardingArray)) {
      if (!loop.granule || axes.empty())
        continue;
      std::optional<int64_t> n = grid ? splitCount(grid, axes) : std::nullopt;
      if (!n || *loop.granule % *n != 0)
        axes.clear();
    }
    shard::removeTrailingEmptySubArray(option->shardingArray);
    return option;
  }

  LogicalResult partition(Operation *op, ArrayRef<Value> /*partitionedOperands*/, ArrayRef<Sharding> operandShardings,
                          ArrayRef<Sharding> resultShardings, IRMapping &partitionMap,
                          SymbolTableCollection &symbolTable, OpBuilder &builder) const {
    return partitionXF(op, getSpec(op), operandShardings, resultShardings, partitionMap, symbolTable, builder);
  }
};

/// xf.layer: a call whose callee upstream propagation does not enter (it
/// works on one function body at a time). The only faithful answer without
/// looking into the callee: every operand and result replicated.
struct LayerModel : public shard::ShardingInterface::ExternalModel<LayerModel, LayerOp> {
  SmallVector<IteratorType> getLoopIteratorTypes(Operation *) const { return {}; }
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    return SmallVector<AffineMap>(op->getNumOperands() + op->getNumResults(), AffineMap::get(op->getContext()));
  }
  FailureOr<ShardingOption> getShardingOption(Operation *, ArrayRef<Sharding> operandShardings,
                                              ArrayRef<Sharding> resultShardings) const {
    for (const Sharding &s : llvm::concat<const Sharding>(operandShardings, resultShardings))
      if (s)
        return ShardingOption(ShardingArray{}, s.getGridAttr());
    return ShardingOption::makeEmpty();
  }
  // partition: the interface's default (a clone on replicated values).
};

/// Optimizer-step ops have no tensor operands or results: nothing to shard,
/// but propagation rejects any op without the interface.
template <typename Op> struct NoTensorModel : public shard::ShardingInterface::ExternalModel<NoTensorModel<Op>, Op> {
  FailureOr<ShardingOption> getShardingOption(Operation *, ArrayRef<Sharding>, ArrayRef<Sharding>) const {
    return ShardingOption::makeEmpty();
  }
};

template <typename... Ops> void attachStructured(MLIRContext *ctx) {
  (Ops::template attachInterface<StructuredModel<Ops>>(*ctx), ...);
}

template <typename... Ops> void attachNoTensor(MLIRContext *ctx) {
  (Ops::template attachInterface<NoTensorModel<Ops>>(*ctx), ...);
}

} // namespace

void llcdist::xf::registerShardingInterfaceExternalModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, XFDialect *) {
    attachStructured<ParamOp, AccumulateGradOp, AddOp, GeluTanhOp, GeluErfOp, ClampOp, ReluOp, ScaleOp, SwiGLUOp,
                     GeluTanhGradOp, GeluErfGradOp, ClampGradOp, ReluGradOp, SwiGLUGradOp, RopeOp, RopeGradOp,
                     LayerNormOp, RMSNormOp, LayerNormGradInputOp, RMSNormGradInputOp, LayerNormGradParamsOp,
                     RMSNormGradWeightOp, LinearOp, LinearGradInputOp, LinearGradWeightOp, LinearGradBiasOp,
                     EmbeddingOp, EmbeddingGradOp, AddPositionEmbeddingOp, AddPositionEmbeddingGradOp, AttentionOp,
                     AttentionGradOp, CrossEntropyOp, CrossEntropyGradOp, SplitOp, ConcatOp, MoeRouteOp, MoeRouteGradOp,
                     MoePermuteOp, MoeUnpermuteOp, MoeUnpermuteGradOp, GroupedLinearOp, GroupedLinearGradInputOp,
                     GroupedLinearGradWeightOp, SigmoidGateOp, SigmoidGateGradOp, MoeRouterStatsOp,
                     MoeRouterStatsGradOp, MoeAuxLossOp, MoeAuxLossGradOp, ZerosOp>(ctx);
    LayerOp::attachInterface<LayerModel>(*ctx);
    attachNoTensor<ClipGradNormOp, AdamWOp, SGDOp, AllReduceGradsOp, AllReduceLossOp>(ctx);
  });
}
