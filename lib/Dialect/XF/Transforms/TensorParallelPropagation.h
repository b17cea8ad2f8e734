//===- TensorParallelPropagation.h - tp splits through the step -*- C++ -*-===//
//
// The state of llcdist-partition's tensor parallelism (TensorParallel.cpp):
// the split of every value over tp, and the propagation that each op's rule
// (its TensorParallelOpInterface model, TensorParallelRules.cpp) reads and
// writes.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_LIB_DIALECT_XF_TRANSFORMS_TENSORPARALLELPROPAGATION_H
#define LLCDIST_LIB_DIALECT_XF_TRANSFORMS_TENSORPARALLELPROPAGATION_H

#include "llcdist/Dialect/XF/IR/XFOps.h"
#include "llcdist/Dialect/XF/Transforms/TensorParallelInterface.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <string>

namespace llcdist::xf {
namespace detail {
/// How a value is split over tp.
struct TP {
  /// Seq: split on the sequence (sequence parallelism), `dim` the sequence
  /// (or batch-major row) dimension of this value.
  enum Kind { R, Split, Partial, Seq } kind = R;
  int64_t dim = 0, blocks = 1;
  /// Split only: how many consecutive tp ranks hold the same part (kv-head
  /// replication); the dimension splits into tp / replicas parts.
  int64_t replicas = 1;
  bool operator==(const TP &o) const {
    return kind == o.kind &&
           ((kind != Split && kind != Seq) || (dim == o.dim && blocks == o.blocks && replicas == o.replicas));
  }
  bool operator!=(const TP &o) const { return !(*this == o); }
  static TP split(int64_t dim, int64_t blocks = 1, int64_t replicas = 1) { return {Split, dim, blocks, replicas}; }
  static TP seq(int64_t dim) { return {Seq, dim, 1}; }
};

/// Why a value is a partial sum over tp: the collective that reduces it
/// carries both (the sentence for people, the kind for the reports).
struct PartialSum {
  std::string reason;
  CollectiveOrigin origin = CollectiveOrigin::RowParallel;
};

inline int64_t rank(mlir::Value v) { return mlir::cast<mlir::RankedTensorType>(v.getType()).getRank(); }
inline int64_t lastDimOf(mlir::Value v) { return rank(v) - 1; }
} // namespace detail

/// Tensor parallelism over tp: the strategy read from the parameters, the
/// propagation of splits in program order (each op's rule is its
/// TensorParallelOpInterface model), the collectives it inserts, and the
/// local types.
class TensorParallelPropagation {
  using TP = detail::TP;
  using PartialSum = detail::PartialSum;
  using Value = mlir::Value;
  using Operation = mlir::Operation;
  using LogicalResult = mlir::LogicalResult;
  using StringRef = llvm::StringRef;

public:
  TensorParallelPropagation(mlir::ModuleOp module, int64_t tp, bool sp)
      : module(module), tp(tp), sp(sp), symbols(module) {}

  LogicalResult run();

private:
  //===--------------------------------------------------------------------===//
  // Strategy: the parameters' xf.tp_split annotations.
  //===--------------------------------------------------------------------===//
  LogicalResult readStrategy();

  /// With num_kv_heads < tp (and kv heads | tp, which llcdist-attach-mesh
  /// checks), rank r's query heads all use kv head r / (tp / kv): the k and v
  /// projections (weight and bias) split into kv parts, each held by the
  /// tp / kv ranks that share it, so every rank computes its own kv head only.
  LogicalResult replicateKvHeads();

  /// The gradient of a replicated kv projection is, on each rank, the sum
  /// over its own query heads only: all-reduce it over the replicas (the
  /// sub-groups of tp / kv consecutive tp ranks) once per step.
  void reduceKvReplicaGrads();

  //===--------------------------------------------------------------------===//
  // Propagation (in program order, into layer bodies at their calls).
  //===--------------------------------------------------------------------===//
  TP of(Value v) const { return state.lookup(v); }

  LogicalResult propagate(mlir::Block &block);

  /// Replaces `v`'s uses by its all-reduce over tp; the result replicates.
  Value allReduce(Value v, Operation *after, const PartialSum &why);

  /// Marks `v` a partial sum over tp, reduced where first needed whole.
  void partial(Value v, StringRef reason, CollectiveOrigin origin) { partial(v, PartialSum{reason.str(), origin}); }
  void partial(Value v, PartialSum why) {
    state[v] = TP{TP::Partial};
    partialReason[v] = std::move(why);
  }

  LogicalResult mismatch(Operation *op) {
    return op->emitOpError("llcdist-partition: no tensor-parallel rule for these "
                           "operand shardings");
  }

  /// Marks the attention heads local: num_heads and num_kv_heads over tp.
  /// With kv heads replicated (replicas = tp / kv), one kv head per rank.
  template <typename AttnOp> LogicalResult localHeads(AttnOp op, int64_t replicas) {
    int64_t nh = op.getNumHeads(), nkv = op.getNumKvHeads();
    if (nh % tp != 0 || (nkv * replicas) % tp != 0 || (replicas > 1 && nkv * replicas != tp))
      return op.emitOpError("llcdist-partition: tp=")
             << tp << " must divide num_heads=" << nh << " and num_kv_heads=" << nkv
             << " (or be a multiple of the kv heads, which then replicate)";
    mlir::Builder b(op.getContext());
    op.setNumHeadsAttr(b.getI64IntegerAttr(nh / tp));
    op.setNumKvHeadsAttr(b.getI64IntegerAttr(nkv * replicas / tp));
    // ALiBi's slopes are the model's heads': rank c holds heads
    // [c·nh/tp, (c+1)·nh/tp) of alibi_heads.
    if (op.getAlibiHeads())
      op->setAttr(kAlibiHeadAxisAttr, b.getStringAttr("tp"));
    return mlir::success();
  }

  /// A grouped xf.split or xf.concat on the rank's groups: groups over tp.
  template <typename GroupedOp> LogicalResult localGroups(GroupedOp op) {
    const int64_t g = int64_t(*op.getGroups());
    if (g % tp != 0)
      return op.emitOpError("llcdist-partition: tp=")
             << tp << " must divide groups=" << g << " (each rank holds whole groups: heads, for a fused QKV)";
    op.setGroupsAttr(mlir::Builder(op.getContext()).getI64IntegerAttr(g / tp));
    return mlir::success();
  }

  void markVocabParallel(Operation *op);

  /// A partial sum stays partial through sums of partial sums (a column
  /// linear's q, k and v input gradients add up before one all-reduce, as in
  /// Megatron); any other consumer gets it all-reduced first, once.
  void reducePartialOperands(Operation *op);

  /// A whole value plus a partial sum whose only use is another add (Qwen2-
  /// MoE's backward: the shared-expert gate's replicated input gradient,
  /// then its up and gate projections' partial ones): the whole value joins
  /// after the reduction, so the partial sums add up first and reduce once.
  /// `add` = whole + partial, each of one use; false when it is not so.
  bool deferWholeOperand(AddOp add);
  /// The next add of a deferred sum: a partial sum joins the partial part
  /// (a new add before `add`), the whole part stays deferred; false when
  /// `add` is not such a sum.
  bool extendDeferredSum(AddOp add);
  /// A deferred sum's consumer needs it: the partial part reduced (all-
  /// reduced, or reduce-scattered where the whole part is split on the
  /// sequence), then the whole part added.
  void finishDeferredSum(Value sum);

  /// A sequence-split operand of an op that needs the whole sequence is
  /// all-gathered (once per value; the sequence region keeps the slice).
  void gatherSequenceOperands(Operation *op);

  /// The op runs on the rank's slice of the sequence: the sequence region
  /// (TensorParallelOpInterface::runsOnSequenceSlice) and, under sequence
  /// parallelism, the mixture of experts on each rank's own tokens (as
  /// under dp): its ops, a linear with a replicated weight reading the
  /// slice (the router, Qwen2-MoE's shared-expert gate) and its gradients,
  /// and an elementwise op of sequence-split operands (the SwiGLU between
  /// the experts' GEMMs).
  bool onSequenceSlice(Operation *op) const;

  /// Sequence parallelism's mixture of experts: every operand split on the
  /// sequence (or replicated: the weights, the group sizes), the token and
  /// row results split alike, the experts' weight gradients partial sums
  /// over tp (finishSequenceParallel sums them).
  LogicalResult expertsOnSequenceSlice(Operation *op);

  void reduceScatter(Value v);

  /// The sequence is scattered where the vocabulary-parallel lookup's partial
  /// sum is reduced: sequence parallelism needs a split embedding table.
  LogicalResult checkSequenceParallelEntry();

  /// The gradients of parameters used in the sequence region are partial sums
  /// over tp (each rank saw a slice of the tokens): sum them once per step.
  LogicalResult finishSequenceParallel();

  LogicalResult visit(Operation *op);

public:
  /// The rule of op kind `OpTy` (its TensorParallelOpInterface model calls
  /// it): one specialization per xf op in TensorParallelRules.cpp.
  template <typename OpTy> LogicalResult rule(Operation *op);
  /// The rule of an op that runs whole on every tp rank (the mixture of
  /// experts): every operand replicated, every result replicated.
  LogicalResult replicatedOnly(Operation *op);
  /// The rule of the load-balancing loss's whole-vector ops (xf.zeros,
  /// xf.moe_aux_loss and its gradient): every operand replicated, with or
  /// without sequence parallelism (they hold no tokens).
  LogicalResult replicatedStatistics(Operation *op);

private:
  /// The results split as `from`.
  LogicalResult same(Value from, mlir::ValueRange to) {
    for (Value t : to)
      state[t] = of(from);
    return mlir::success();
  }

  /// An op with the Elementwise trait: its operands split alike, its results
  /// split as they are.
  LogicalResult elementwise(Operation *op) {
    for (Value v : op->getOperands())
      if (of(v) != of(op->getOperand(0)))
        return mismatch(op);
    return same(op->getOperand(0), op->getResults());
  }

  LogicalResult visitLayer(LayerOp call);

  //===--------------------------------------------------------------------===//
  // Local types; parameters remember their global shape and split.
  //===--------------------------------------------------------------------===//
  LogicalResult applyTypes();

  mlir::ModuleOp module;
  int64_t tp;
  mlir::SymbolTable symbols;
  llvm::StringMap<TP> params;
  llvm::DenseMap<Value, TP> state;
  llvm::DenseMap<Value, PartialSum> partialReason;
  /// Deferred sums (deferWholeOperand): the add's result, its whole operand.
  llvm::DenseMap<Value, Value> deferredWhole;
  llvm::DenseMap<Value, Value> gathered;
  llvm::StringSet<> tpPartialGrads;
  llvm::StringSet<> kvReplicaGrads; ///< replicated kv projections, by name
  bool sp;
  llvm::DenseMap<Operation *, llvm::SmallVector<TP>> bodyArgs;
};
} // namespace llcdist::xf

#endif
