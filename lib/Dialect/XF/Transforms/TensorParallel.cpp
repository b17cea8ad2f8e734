//===- TensorParallel.cpp - tensor parallelism over tp ---------------------===//
//
// The strategy arrives as annotations: `xf.tp_split = {dim, blocks}` on the
// xf.param ops to split over tp (llcdist-megatron-tp writes Megatron-LM's;
// other strategy passes may write others). Everything else follows from
// propagation, forward and backward, into layer bodies:
//  - a linear whose weight is split on its output dimension (column-parallel)
//    takes a replicated input and yields a split output (split per block for a
//    fused q|k|v); one split on its input dimension (row-parallel) takes a
//    split input and yields a partial sum, all-reduced before its bias is
//    added once; a replicated weight keeps everything replicated;
//  - a token embedding with a split table is a masked lookup (partial sum);
//    a loss over split logits is the vocabulary-parallel cross-entropy;
//  - partial sums stay partial through sums of partial sums and are
//    all-reduced where first needed whole (Megatron's f and g operators);
//  - with fewer kv heads than tp ranks (MQA, GQA with tp > kv heads) the
//    column-split k and v projections are split into kv-head parts instead of
//    tp parts: the tp/kv consecutive ranks whose query heads share a kv head
//    hold that head (replicas), and their weight gradients, each a partial
//    sum over its query heads, are all-reduced over that sub-group of tp.
//
//===----------------------------------------------------------------------===//
#include "TensorParallel.h"
#include "PartitionUtils.h"

#include "llcdist/Dialect/XF/Analysis/ModelStats.h"
#include "llcdist/Dialect/XF/IR/XFOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace llcdist::xf;

namespace {
struct TP {
  /// Seq: split on the sequence (sequence parallelism), `dim` the sequence
  /// (or batch-major row) dimension of this value.
  enum Kind { R, Split, Partial, Seq } kind = R;
  int64_t dim = 0, blocks = 1;
  /// Split only: how many consecutive tp ranks hold the same part (kv-head
  /// replication); the dimension splits into tp / replicas parts.
  int64_t replicas = 1;
  bool operator==(const TP &o) const {
    return kind == o.kind && ((kind != Split && kind != Seq) ||
                              (dim == o.dim && blocks == o.blocks && replicas == o.replicas));
  }
  bool operator!=(const TP &o) const { return !(*this == o); }
  static TP split(int64_t dim, int64_t blocks = 1, int64_t replicas = 1) {
    return {Split, dim, blocks, replicas};
  }
  static TP seq(int64_t dim) { return {Seq, dim, 1}; }
};

/// Ops of the sequence-parallel region (Korthikanti et al.): they run on a
/// slice of the sequence when their activations are split on it.
bool isSequenceRegion(Operation *op) {
  return isa<AddOp, LayerNormOp, RMSNormOp, LayerNormGradInputOp, LayerNormGradParamsOp,
             RMSNormGradInputOp, RMSNormGradWeightOp, AddPositionEmbeddingOp,
             AddPositionEmbeddingGradOp, BiasAddOp, LinearGradBiasOp, LayerOp,
             AccumulateGradOp>(op);
}

int64_t rank(Value v) { return cast<RankedTensorType>(v.getType()).getRank(); }
int64_t lastDimOf(Value v) { return rank(v) - 1; }

/// Why a value is a partial sum over tp: the collective that reduces it
/// carries both (the sentence for people, the kind for the reports).
struct PartialSum {
  std::string reason;
  CollectiveOrigin origin = CollectiveOrigin::RowParallel;
};

class TensorParallel {
public:
  TensorParallel(ModuleOp module, int64_t tp, bool sp)
      : module(module), tp(tp), sp(sp), symbols(module) {}

  LogicalResult run() {
    func::FuncOp entry = getEntryFunction(module);
    if (!entry)
      return failure();
    if (failed(readStrategy()) || failed(replicateKvHeads()))
      return failure();
    if (sp && failed(checkSequenceParallelEntry()))
      return failure();
    if (failed(propagate(entry.getBody().front())))
      return failure();
    if (sp && failed(finishSequenceParallel()))
      return failure();
    reduceKvReplicaGrads();
    return applyTypes();
  }

private:
  //===--------------------------------------------------------------------===//
  // Strategy: the parameters' xf.tp_split annotations.
  //===--------------------------------------------------------------------===//
  LogicalResult readStrategy() {
    WalkResult r = module.walk([&](ParamOp p) {
      TP s;
      if (Attribute raw = p->getAttr("xf.tp_split")) {
        // Hand-written IR may carry anything here: check before reading.
        auto a = dyn_cast<DictionaryAttr>(raw);
        IntegerAttr dim = a ? a.getAs<IntegerAttr>("dim") : IntegerAttr();
        IntegerAttr blocks = a ? a.getAs<IntegerAttr>("blocks") : IntegerAttr();
        if (!dim || !blocks || blocks.getInt() < 1) {
          p.emitOpError("llcdist-partition: 'xf.tp_split' must be a dictionary "
                        "{dim = D : i64, blocks = B : i64} with B >= 1, got ")
              << raw;
          return WalkResult::interrupt();
        }
        s = TP::split(dim.getInt(), blocks.getInt());
      }
      auto [it, inserted] = params.try_emplace(p.getName(), s);
      if (!inserted && it->second != s) {
        p.emitOpError("llcdist-partition: parameter '")
            << p.getName() << "' is annotated with two different tp splits";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    return failure(r.wasInterrupted());
  }

  /// With num_kv_heads < tp (and kv heads | tp, which llcdist-attach-mesh
  /// checks), rank r's query heads all use kv head r / (tp / kv): the k and v
  /// projections (weight and bias) split into kv parts, each held by the
  /// tp / kv ranks that share it, so every rank computes its own kv head only.
  LogicalResult replicateKvHeads() {
    WalkResult r = module.walk([&](AttentionOp at) -> WalkResult {
      int64_t nkv = at.getNumKvHeads();
      if (nkv >= tp)
        return WalkResult::advance();
      if (tp % nkv != 0) {
        at.emitOpError("llcdist-partition: tp=")
            << tp << " is not a multiple of num_kv_heads=" << nkv
            << "; kv heads replicate only when they divide tp";
        return WalkResult::interrupt();
      }
      for (Value v : {at.getK(), at.getV()}) {
        if (auto rope = v.getDefiningOp<RopeOp>())
          v = rope->getOperand(0);
        auto lin = v.getDefiningOp<LinearOp>();
        auto w = lin ? lin.getWeight().getDefiningOp<ParamOp>() : ParamOp();
        bool outIn = lin && lin.getLayout() == WeightLayout::OutIn;
        TP want = w ? params.lookup(w.getName()) : TP{};
        if (!w || want != TP::split(outIn ? 0 : 1)) {
          at.emitOpError("llcdist-partition: num_kv_heads=")
              << nkv << " < tp=" << tp
              << " replicates kv heads, which needs k and v each from its own "
                 "column-parallel linear of an xf.param (not a fused q|k|v); choose "
                 "tp dividing the kv heads";
          return WalkResult::interrupt();
        }
        SmallVector<ParamOp> ps{w};
        if (Value bias = lin.getBias())
          if (auto b = bias.getDefiningOp<ParamOp>())
            ps.push_back(b);
        for (ParamOp p : ps) {
          TP &s = params[p.getName()];
          s.replicas = tp / nkv;
          kvReplicaGrads.insert(p.getName());
        }
      }
      return WalkResult::advance();
    });
    return failure(r.wasInterrupted());
  }

  /// The gradient of a replicated kv projection is, on each rank, the sum
  /// over its own query heads only: all-reduce it over the replicas (the
  /// sub-groups of tp / kv consecutive tp ranks) once per step.
  void reduceKvReplicaGrads() {
    func::FuncOp opt;
    for (auto fn : module.getOps<func::FuncOp>())
      if (fn->hasAttr("xf.optimizer"))
        opt = fn;
    if (!opt || kvReplicaGrads.empty())
      return;
    OpBuilder b = OpBuilder::atBlockBegin(&opt.getBody().front());
    SmallVector<StringRef> names;
    int64_t replicas = 1;
    for (const auto &entry : kvReplicaGrads) {
      names.push_back(entry.getKey());
      replicas = params.lookup(entry.getKey()).replicas;
    }
    llvm::sort(names);
    AllReduceGradsOp::create(
        b, opt.getLoc(), "tp", "sum",
        "kv-head replication: the tp ranks sharing a kv head each hold its "
        "projections' gradient summed over their own query heads only",
        stringifyCollectiveOrigin(CollectiveOrigin::KvReplica), b.getStrArrayAttr(names),
        b.getI64IntegerAttr(replicas));
  }

  //===--------------------------------------------------------------------===//
  // Propagation (in program order, into layer bodies at their calls).
  //===--------------------------------------------------------------------===//
  TP of(Value v) const { return state.lookup(v); }

  LogicalResult propagate(Block &block) {
    for (Operation &op : llvm::make_early_inc_range(block.without_terminator()))
      if (failed(visit(&op)))
        return failure();
    return success();
  }

  /// Replaces `v`'s uses by its all-reduce over tp; the result replicates.
  Value allReduce(Value v, Operation *after, const PartialSum &why) {
    OpBuilder b(after->getContext());
    b.setInsertionPointAfter(after);
    auto ar = AllReduceOp::create(b, after->getLoc(), v, "tp", why.reason,
                                  stringifyCollectiveOrigin(why.origin));
    v.replaceAllUsesExcept(ar.getResult(), ar);
    state[ar.getResult()] = TP{};
    return ar.getResult();
  }

  /// Marks `v` a partial sum over tp, reduced where first needed whole.
  void partial(Value v, StringRef reason, CollectiveOrigin origin) {
    partial(v, PartialSum{reason.str(), origin});
  }
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
    Builder b(op.getContext());
    op.setNumHeadsAttr(b.getI64IntegerAttr(nh / tp));
    op.setNumKvHeadsAttr(b.getI64IntegerAttr(nkv * replicas / tp));
    return success();
  }

  void markVocabParallel(Operation *op) {
    op->setAttr("xf.vocab_parallel_axis", StringAttr::get(op->getContext(), "tp"));
  }

  /// A partial sum stays partial through sums of partial sums (a column
  /// linear's q, k and v input gradients add up before one all-reduce, as in
  /// Megatron); any other consumer gets it all-reduced first, once.
  void reducePartialOperands(Operation *op) {
    bool sumOfPartials = isa<AddOp>(op) && llvm::all_of(op->getOperands(), [&](Value v) {
                           return of(v).kind == TP::Partial;
                         });
    if (sumOfPartials || isa<AllReduceOp, ReduceScatterOp>(op) ||
        (sp && isa<AccumulateGradOp>(op)))
      return;
    for (Value v : llvm::to_vector(op->getOperands())) {
      if (of(v).kind != TP::Partial)
        continue;
      // With sequence parallelism an activation entering the sequence region
      // is reduce-scattered along the sequence instead of all-reduced.
      if (sp && isSequenceRegion(op) && rank(v) == 3)
        reduceScatter(v);
      else
        allReduce(v, v.getDefiningOp(), partialReason.lookup(v));
    }
  }

  /// A sequence-split operand of an op that needs the whole sequence is
  /// all-gathered (once per value; the sequence region keeps the slice).
  void gatherSequenceOperands(Operation *op) {
    if (!sp || isSequenceRegion(op) || isa<AllGatherOp, ReduceScatterOp, AllReduceOp>(op))
      return;
    for (OpOperand &use : op->getOpOperands()) {
      Value v = use.get();
      TP s = of(v);
      if (s.kind != TP::Seq)
        continue;
      Value &whole = gathered[v];
      if (!whole) {
        OpBuilder b(op->getContext());
        if (Operation *def = v.getDefiningOp())
          b.setInsertionPointAfter(def);
        else
          b.setInsertionPointToStart(cast<BlockArgument>(v).getOwner());
        auto t = cast<RankedTensorType>(v.getType());
        auto ag = AllGatherOp::create(b, v.getLoc(), t, v, "tp", s.dim,
                                      "sequence parallelism: this op needs the whole "
                                      "sequence of a sequence-split activation",
                                      stringifyCollectiveOrigin(CollectiveOrigin::SequenceParallel));
        whole = ag.getResult();
        state[whole] = TP{};
      }
      use.set(whole);
    }
  }

  void reduceScatter(Value v) {
    OpBuilder b(v.getContext());
    b.setInsertionPointAfter(v.getDefiningOp());
    auto rs = ReduceScatterOp::create(
        b, v.getLoc(), v.getType(), v, "tp", 1,
        partialReason.lookup(v).reason + "; sequence parallelism keeps the sum's slice of "
                                         "the sequence",
        stringifyCollectiveOrigin(partialReason.lookup(v).origin));
    v.replaceAllUsesExcept(rs.getResult(), rs);
    state[rs.getResult()] = TP::seq(1);
  }

  /// The sequence is scattered where the vocabulary-parallel lookup's partial
  /// sum is reduced: sequence parallelism needs a split embedding table.
  LogicalResult checkSequenceParallelEntry() {
    bool splitTable = false;
    module.walk([&](EmbeddingOp e) {
      if (auto p = e.getTable().getDefiningOp<ParamOp>())
        splitTable |= params.lookup(p.getName()).kind == TP::Split;
    });
    if (!splitTable)
      return module.emitError("llcdist-partition: sequence parallelism needs the "
                              "vocabulary-parallel embedding (its partial lookup is "
                              "where the sequence is scattered); do not replicate the "
                              "embeddings");
    return success();
  }

  /// The gradients of parameters used in the sequence region are partial sums
  /// over tp (each rank saw a slice of the tokens): sum them once per step.
  LogicalResult finishSequenceParallel() {
    func::FuncOp opt;
    for (auto fn : module.getOps<func::FuncOp>())
      if (fn->hasAttr("xf.optimizer"))
        opt = fn;
    if (!opt || tpPartialGrads.empty())
      return success();
    OpBuilder b = OpBuilder::atBlockBegin(&opt.getBody().front());
    SmallVector<StringRef> names;
    for (const auto &entry : tpPartialGrads)
      names.push_back(entry.getKey());
    llvm::sort(names);
    AllReduceGradsOp::create(
        b, opt.getLoc(), "tp", "sum",
        "sequence parallelism: these parameters act on each rank's slice of the "
        "sequence, so their gradients are partial sums over tp",
        stringifyCollectiveOrigin(CollectiveOrigin::SequenceParallel), b.getStrArrayAttr(names),
        /*group_size=*/IntegerAttr());
    return success();
  }

  LogicalResult visit(Operation *op) {
    reducePartialOperands(op);
    gatherSequenceOperands(op);
    auto same = [&](Value from, ValueRange to) {
      for (Value t : to)
        state[t] = of(from);
      return success();
    };
    return llvm::TypeSwitch<Operation *, LogicalResult>(op)
        .Case([&](ParamOp p) {
          state[p.getResult()] = params.lookup(p.getName());
          return success();
        })
        .Case([&](LayerOp call) { return visitLayer(call); })
        .Case<AllReduceOp, AllGatherOp, ReduceScatterOp>([&](Operation *) { return success(); })
        .Case([&](BiasAddOp ba) {
          state[ba.getResult()] = of(ba.getInput());
          return success();
        })
        .Case([&](LinearOp lin) -> LogicalResult {
          TP x = of(lin.getInput()), w = of(lin.getWeight());
          bool outIn = lin.getLayout() == WeightLayout::OutIn;
          if (w.kind == TP::R) { // replicated: nothing to split
            if (x.kind != TP::R)
              return mismatch(lin);
            return success();
          }
          if (w.dim == (outIn ? 0 : 1)) { // column-parallel
            if (x.kind != TP::R)
              return mismatch(lin);
            state[lin.getResult()] =
                TP::split(lastDimOf(lin.getResult()), w.blocks, w.replicas);
            return success();
          }
          // Row-parallel: the output is a partial sum.
          if (x != TP::split(lastDimOf(lin.getInput())))
            return mismatch(lin);
          Value y = lin.getResult();
          Value bias = lin.getBias();
          if (!bias) {
            partial(y, "a row-parallel linear's output is a partial sum over tp",
                    CollectiveOrigin::RowParallel);
            return success();
          }
          // The bias joins after the reduction, once.
          OpBuilder b(lin);
          auto nobias = LinearOp::create(b, lin.getLoc(), y.getType(), lin.getLayout(),
                                         lin.getInput(), lin.getWeight(), Value());
          partial(nobias.getResult(), "a row-parallel linear's output is a partial sum over tp",
                  CollectiveOrigin::RowParallel);
          auto withBias = BiasAddOp::create(b, lin.getLoc(), nobias.getResult(), bias);
          y.replaceAllUsesWith(withBias.getResult());
          lin.erase();
          return visit(withBias);
        })
        .Case([&](SplitOp sp) -> LogicalResult {
          TP x = of(sp.getInput());
          if (x.kind == TP::R)
            return same(sp.getInput(), sp.getResults());
          if (x.kind != TP::Split || x.dim != lastDimOf(sp.getInput()) ||
              x.blocks != int64_t(sp.getNumResults()) || x.replicas != 1)
            return mismatch(sp);
          for (Value r : sp.getResults())
            state[r] = TP::split(lastDimOf(r));
          return success();
        })
        .Case([&](ConcatOp c) -> LogicalResult {
          if (llvm::all_of(c.getInputs(), [&](Value v) { return of(v).kind == TP::R; })) {
            state[c.getResult()] = TP{};
            return success();
          }
          for (Value v : c.getInputs())
            if (of(v) != TP::split(lastDimOf(v)))
              return mismatch(c);
          state[c.getResult()] =
              TP::split(lastDimOf(c.getResult()), c.getInputs().size());
          return success();
        })
        .Case<RopeOp, RopeGradOp, GeluTanhOp>([&](Operation *o) {
          return same(o->getOperand(0), o->getResults());
        })
        .Case([&](AddOp a) -> LogicalResult {
          TP l = of(a.getLhs()), r = of(a.getRhs());
          if (l.kind == TP::Partial && r.kind == TP::Partial) {
            partial(a.getResult(), partialReason.lookup(a.getLhs()));
            return success();
          }
          if (l != r)
            return mismatch(a);
          state[a.getResult()] = l;
          return success();
        })
        .Case<GeluTanhGradOp, SwiGLUOp, SwiGLUGradOp>([&](Operation *o) -> LogicalResult {
          for (Value v : o->getOperands())
            if (of(v) != of(o->getOperand(0)))
              return mismatch(o);
          return same(o->getOperand(0), o->getResults());
        })
        .Case([&](AttentionOp at) -> LogicalResult {
          TP q = of(at.getQ());
          if (q.kind == TP::R && of(at.getK()).kind == TP::R)
            return same(at.getQ(), at->getResults());
          // k and v: split like q, or into kv-head parts held by replicas.
          TP kv = TP::split(2, 1, of(at.getK()).replicas);
          if (q != TP::split(2) || of(at.getK()) != kv || of(at.getV()) != kv)
            return mismatch(at);
          state[at.getResult()] = TP::split(2);
          if (at.getLse())
            state[at.getLse()] = TP::split(1);
          return localHeads(at, kv.replicas);
        })
        .Case([&](AttentionGradOp g) -> LogicalResult {
          TP kv = TP::split(2, 1, of(g.getK()).replicas);
          for (Value v : {g.getDout(), g.getQ(), g.getK(), g.getV(), g.getOut()}) {
            TP want = v == g.getK() || v == g.getV() ? kv : TP::split(2);
            if (of(v) != want)
              return of(v).kind == TP::R ? same(g.getQ(), g->getResults()) : mismatch(g);
          }
          // dk and dv: each rank's part is the sum over its own query heads.
          state[g.getDq()] = TP::split(2);
          state[g.getDk()] = kv;
          state[g.getDv()] = kv;
          return localHeads(g, kv.replicas);
        })
        .Case([&](LayerNormOp ln) -> LogicalResult {
          TP x = of(ln.getInput());
          if (x.kind == TP::Seq) {
            state[ln.getResult()] = x;
            if (ln.getStats())
              state[ln.getStats()] = TP::seq(1); // [2, rows]
          } else if (x.kind != TP::R) {
            return mismatch(ln);
          }
          return success();
        })
        .Case([&](RMSNormOp rn) -> LogicalResult {
          TP x = of(rn.getInput());
          if (x.kind == TP::Seq) {
            state[rn.getResult()] = x;
            if (rn.getStats())
              state[rn.getStats()] = TP::seq(0); // [rows]
          } else if (x.kind != TP::R) {
            return mismatch(rn);
          }
          return success();
        })
        .Case<LayerNormGradInputOp, RMSNormGradInputOp>([&](Operation *o) -> LogicalResult {
          TP dy = of(o->getOperand(0));
          if (dy.kind == TP::Seq)
            state[o->getResult(0)] = dy;
          else if (dy.kind != TP::R)
            return mismatch(o);
          return success();
        })
        .Case<LayerNormGradParamsOp, RMSNormGradWeightOp, LinearGradBiasOp>(
            [&](Operation *o) -> LogicalResult {
              TP dy = of(o->getOperand(0));
              if (dy.kind == TP::Seq) { // summed over this rank's tokens only
                for (Value r : o->getResults())
                  partial(r, "sequence parallelism", CollectiveOrigin::SequenceParallel);
                return success();
              }
              if (auto gb = dyn_cast<LinearGradBiasOp>(o); gb && dy.kind == TP::Split)
                state[gb.getResult()] = TP::split(0, dy.blocks, dy.replicas);
              else if (dy.kind != TP::R)
                return mismatch(o);
              return success();
            })
        .Case([&](AddPositionEmbeddingOp pe) -> LogicalResult {
          TP x = of(pe.getInput());
          if (x.kind == TP::Seq) {
            pe->setAttr("xf.seq_parallel_axis", StringAttr::get(pe.getContext(), "tp"));
            state[pe.getResult()] = x;
          } else if (x.kind != TP::R) {
            return mismatch(pe);
          }
          return success();
        })
        .Case([&](AddPositionEmbeddingGradOp g) -> LogicalResult {
          TP dy = of(g.getDy());
          if (dy.kind == TP::Seq) {
            g->setAttr("xf.seq_parallel_axis", StringAttr::get(g.getContext(), "tp"));
            partial(g.getResult(), "sequence parallelism", CollectiveOrigin::SequenceParallel);
          } else if (dy.kind != TP::R) {
            return mismatch(g);
          }
          return success();
        })
        .Case([&](EmbeddingOp e) -> LogicalResult {
          if (of(e.getTable()).kind == TP::R)
            return success();
          markVocabParallel(e);
          partial(e.getResult(), "a vocabulary-parallel embedding lookup is a partial "
                                 "sum over tp (each rank holds a slice of the vocabulary)",
                  CollectiveOrigin::VocabParallelEmbedding);
          return success();
        })
        .Case([&](EmbeddingGradOp g) -> LogicalResult {
          if (of(g.getDy()).kind != TP::R)
            return mismatch(g);
          // Which table it belongs to: the parameter it accumulates into.
          for (Operation *u : g->getUsers())
            if (auto acc = dyn_cast<AccumulateGradOp>(u))
              if (params.lookup(acc.getName()).kind == TP::Split) {
                markVocabParallel(g);
                state[g.getResult()] = TP::split(0);
              }
          return success();
        })
        .Case([&](CrossEntropyOp ce) -> LogicalResult {
          TP l = of(ce.getLogits());
          if (l.kind == TP::R)
            return success();
          if (l != TP::split(lastDimOf(ce.getLogits())))
            return mismatch(ce);
          markVocabParallel(ce);
          return success(); // the loss replicates (the kernel all-reduces)
        })
        .Case([&](CrossEntropyGradOp g) -> LogicalResult {
          TP l = of(g.getLogits());
          if (l.kind == TP::R)
            return success();
          markVocabParallel(g);
          state[g.getResult()] = l;
          return success();
        })
        .Case([&](LinearGradWeightOp g) -> LogicalResult {
          TP dy = of(g.getDy()), x = of(g.getInput());
          bool outIn = g.getLayout() == WeightLayout::OutIn;
          if (dy.kind == TP::R && x.kind == TP::R)
            return success();
          if (dy.kind == TP::Split && x.kind == TP::R) // column / vocab
            state[g.getResult()] = TP::split(outIn ? 0 : 1, dy.blocks, dy.replicas);
          else if (dy.kind == TP::R && x.kind == TP::Split) // row
            state[g.getResult()] = TP::split(outIn ? 1 : 0);
          else
            return mismatch(g);
          return success();
        })
        .Case([&](LinearGradInputOp g) -> LogicalResult {
          TP dy = of(g.getDy()), w = of(g.getWeight());
          bool outIn = g.getLayout() == WeightLayout::OutIn;
          if (dy.kind == TP::R && w.kind == TP::R)
            return success();
          if (dy.kind == TP::R && w == TP::split(outIn ? 1 : 0)) { // row
            state[g.getResult()] = TP::split(lastDimOf(g.getResult()));
            return success();
          }
          // Replicated kv projections too: each rank's dx is the part through
          // its query heads' share of its kv head, and the parts over all tp
          // ranks add up to the whole.
          if (dy.kind == TP::Split && w.kind == TP::Split && w.dim == (outIn ? 0 : 1) &&
              dy.replicas == w.replicas) {
            partial(g.getResult(), "a column-parallel linear's input gradient is a "
                                   "partial sum over tp",
                    CollectiveOrigin::ColumnParallel);
            return success();
          }
          return mismatch(g);
        })
        .Case([&](AccumulateGradOp acc) -> LogicalResult {
          TP want = params.lookup(acc.getName()), got = of(acc.getGrad());
          if (sp && got.kind == TP::Partial && want.kind == TP::R) {
            tpPartialGrads.insert(acc.getName());
            return success();
          }
          if (want != got)
            return acc.emitOpError("llcdist-partition: the gradient of '")
                   << acc.getName() << "' is not split like the parameter";
          return success();
        })
        .Default([&](Operation *o) {
          return o->emitOpError("llcdist-partition: no tensor-parallel rule for this op");
        });
  }

  LogicalResult visitLayer(LayerOp call) {
    return llcdist::xf::detail::propagateLayer(call, symbols, state, bodyArgs,
                                  [&](Block &b) { return propagate(b); });
  }


  //===--------------------------------------------------------------------===//
  // Local types; parameters remember their global shape and split.
  //===--------------------------------------------------------------------===//
  LogicalResult applyTypes() {
    Builder b(module.getContext());
    WalkResult r = module.walk([&](ParamOp p) {
      // The request becomes the result: xf.tp_split -> xf.sharding.
      p->removeAttr("xf.tp_split");
      TP s = params.lookup(p.getName());
      if (s.kind != TP::Split)
        return WalkResult::advance();
      SmallVector<NamedAttribute> sh{
          b.getNamedAttr("axis", b.getStringAttr("tp")),
          b.getNamedAttr("dim", b.getI64IntegerAttr(s.dim)),
          b.getNamedAttr("blocks", b.getI64IntegerAttr(s.blocks)),
          b.getNamedAttr("global_shape", b.getDenseI64ArrayAttr(p.getType().getShape()))};
      if (s.replicas > 1) // kv-head replication (absent: every rank its own part)
        sh.push_back(b.getNamedAttr("replicas", b.getI64IntegerAttr(s.replicas)));
      p->setAttr("xf.sharding", b.getDictionaryAttr(sh));
      return WalkResult::advance();
    });
    (void)r;
    for (auto &[value, s] : state) {
      if (s.kind != TP::Split && s.kind != TP::Seq)
        continue;
      Value v = value;
      auto t = cast<RankedTensorType>(v.getType());
      SmallVector<int64_t> dims(t.getShape());
      int64_t parts = tp / s.replicas;
      if (dims[s.dim] % (parts * s.blocks) != 0)
        return emitError(v.getLoc(), "llcdist-partition: tp=")
               << tp << " does not divide dimension " << s.dim << " of " << t
               << (s.blocks > 1 ? " (per block)" : "")
               << (s.replicas > 1 ? " into kv-head parts" : "");
      dims[s.dim] /= parts;
      v.setType(RankedTensorType::get(dims, t.getElementType()));
    }
    llcdist::xf::detail::refreshFunctionTypes(module);
    return success();
  }

  ModuleOp module;
  int64_t tp;
  SymbolTable symbols;
  llvm::StringMap<TP> params;
  llvm::DenseMap<Value, TP> state;
  llvm::DenseMap<Value, PartialSum> partialReason;
  llvm::DenseMap<Value, Value> gathered;
  llvm::StringSet<> tpPartialGrads;
  llvm::StringSet<> kvReplicaGrads; ///< replicated kv projections, by name
  bool sp;
  llvm::DenseMap<Operation *, SmallVector<TP>> bodyArgs;
};
} // namespace

LogicalResult llcdist::xf::partitionTensorParallel(ModuleOp module, int64_t tp,
                                                   bool sequenceParallel) {
  return TensorParallel(module, tp, sequenceParallel).run();
}
