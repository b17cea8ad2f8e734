//===- ContextParallel.cpp - context parallelism over cp -------------------===//
//
// Context parallelism (issue #32) splits every sample's sequence over the cp
// axis: rank c of a cp group holds tokens [c·S/cp, (c+1)·S/cp) of each of its
// sequences (the runtime's data loader follows, docs/plan-format.md). Every
// op that acts on tokens one by one — embeddings, norms, linears, the MLP,
// the loss — runs on the local tokens unchanged, so the propagation is data
// parallelism's on the sequence dimension (the ops' loop nests, batchLoop):
// a contraction over the tokens (a weight gradient, the loss's mean) is a
// partial result over cp, summed once per step or averaged with the dp
// partials, over Megatron's data-parallel group dp × cp (`xf.all_reduce_grads`
// and `xf.all_reduce_loss` over "dp+cp", which llcdist-partition adds; ZeRO
// then shards over the same group). Learned positions start at the rank's
// first token (the op's `xf.seq_parallel_axis`).
//
// Attention is the one op that mixes tokens. With `impl` all-to-all
// (DeepSpeed-Ulysses, Megatron's --cp-comm-type a2a) the ops of the attention
// core — rope, attention and their gradients — run on the whole sequence and
// 1/cp of the heads: a sequence-split operand is exchanged by `xf.all_to_all`
// (split the features into cp head groups, gather the sequence), and a
// head-split value is exchanged back where any other op reads it. The
// all-to-all's result also replaces the value in a layer body's returns, so
// the backward reads the head-split q, k, v, out and lse that the forward
// saved rather than exchanging them again: four all-to-alls per layer
// forward (q, k, v in, out back) and four backward (dout in; dq, dk, dv back).
// Each cp rank takes whole kv groups: where cp does not divide the kv heads
// (per tp rank) but is a multiple of them, k and v are replicated as tp
// replicates them: each kv head is repeated cp/kv times (xf.split, then
// xf.concat in repeat order) before its all-to-all, so rank c receives the kv
// head of its query heads, c·kv/cp; on the way back the replicas' gradients
// are summed (xf.split, xf.add, xf.concat).
//
// With `impl` ring (Megatron's --cp-comm-type p2p, the default) every op
// stays on the rank's tokens and all heads: rope takes the positions of the
// rank's tokens (`xf.seq_parallel_axis` cp), and attention and its gradient
// get `xf.cp_ring` (the cp size), which llcdist-lower-to-plan expands into
// the ring: k and v travel around the cp group, each step's block attention
// merged by its log-sum-exp, and the backward's dk and dv travel with them
// back to their owner. The rank holds Megatron's load-balanced causal
// chunks (module attr `xf.cp_layout` "load_balanced": chunks c and 2·cp−1−c
// of 2·cp), so every rank does the same attention work.
//
//===----------------------------------------------------------------------===//
#include "ContextParallel.h"
#include "PartitionUtils.h"

#include "llcdist/Dialect/XF/Analysis/ModelStats.h"
#include "llcdist/Dialect/XF/IR/XFOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace llcdist::xf;
using llcdist::xf::detail::batchLoop;

namespace {
/// How a value is distributed over cp.
struct CP {
  enum Kind { None, Seq, Heads, Partial } kind = None;
  int64_t dim = 0; // the split dimension, for Seq and Heads
  bool operator==(const CP &o) const { return kind == o.kind && ((kind != Seq && kind != Heads) || dim == o.dim); }
  bool operator!=(const CP &o) const { return !(*this == o); }
  static CP seq(int64_t d) { return {Seq, d}; }
  static CP heads(int64_t d) { return {Heads, d}; }
};

/// The ops of the attention core: the whole sequence, 1/cp of the heads.
bool isHeadOp(Operation *op) { return isa<RopeOp, RopeGradOp, AttentionOp, AttentionGradOp>(op); }

constexpr llvm::StringLiteral kToHeads = "context parallelism (all-to-all): attention needs the whole sequence; "
                                         "each cp rank takes 1/cp of the heads";
constexpr llvm::StringLiteral kToSeq = "context parallelism (all-to-all): back from the attention's heads to "
                                       "this rank's slice of the sequence";

class ContextParallelPropagation {
public:
  ContextParallelPropagation(ModuleOp module, int64_t cp, bool ring)
      : module(module), cp(cp), ring(ring), symbols(module) {}

  LogicalResult run() {
    func::FuncOp entry = getTrainStep(module, "llcdist-partition");
    if (!entry)
      return failure();
    if (!ring && failed(planKvReplicas()))
      return failure();
    if (ring && failed(checkRingLayout(entry)))
      return failure();
    for (BlockArgument a : entry.getArguments()) // token ids and labels [B, S]
      state[a] = CP::seq(1);
    if (failed(propagate(entry.getBody().front())) || failed(checkGradients()) || failed(applyTypes()))
      return failure();
    return success();
  }

private:
  CP of(Value v) const { return state.lookup(v); }

  LogicalResult propagate(Block &block) {
    return llcdist::xf::detail::visitOps(block, [&](Operation *op) { return visit(op); });
  }

  LogicalResult visit(Operation *op) {
    if (auto call = dyn_cast<LayerOp>(op))
      return visitLayer(call);
    if (isHeadOp(op))
      return ring ? visitRingOp(op) : visitHeadOp(op);
    for (OpOperand &use : op->getOpOperands())
      if (of(use.get()).kind == CP::Heads)
        use.set(toSeq(use.get()));
    if (isa<ZerosOp, MoeAuxLossOp>(op))
      return visitStatistics(op);
    if (auto ar = dyn_cast<AllReduceOp>(op); ar && of(ar.getInput()).kind == CP::Partial) {
      state[ar.getResult()] = {CP::Partial}; // summed over another axis (tp): still a partial sum over cp
      return success();
    }
    if (failed(checkPartialOperands(op)))
      return failure();
    if (isa<AddOp>(op) && of(op->getOperand(0)).kind == CP::Partial) {
      state[op->getResult(0)] = {CP::Partial}; // a sum of partial sums (checked above)
      return success();
    }
    auto first = llvm::find_if(op->getOperands(), [&](Value v) { return of(v).kind == CP::Seq; });
    if (first == op->operand_end())
      return success(); // parameters and what is computed from them only
    if (failed(positions(op)))
      return failure();
    if (isa<MoeRouteOp, MoeRouterStatsOp, MoePermuteOp, MoeUnpermuteOp>(op))
      return visitExperts(op);
    if (isa<AddPositionEmbeddingGradOp>(op)) { // this rank's rows of the table only
      state[op->getResult(0)] = {CP::Partial};
      return success();
    }
    unsigned index = first - op->operand_begin();
    int64_t dim = of(*first).dim;
    std::optional<llcdist::xf::detail::BatchLoop> loop = batchLoop(op, index, dim);
    for (auto [i, r] : llvm::enumerate(op->getResults())) {
      if (!loop) {
        state[r] = CP::seq(dim); // collectives and bias_add keep their dimensions
      } else if (loop->reduction) {
        state[r] = {CP::Partial};
      } else if (loop->resultDims[i] >= 0) {
        state[r] = CP::seq(loop->resultDims[i]);
      } else {
        // A norm's statistics: rows flattened from the leading dims, indexed
        // by the first row loop only. The local rows are this rank's tokens.
        std::optional<llcdist::xf::detail::BatchLoop> rows = batchLoop(op, index, 0);
        if (!rows || rows->reduction || rows->resultDims[i] < 0)
          return op->emitOpError("llcdist-partition: result ")
                 << i << " has no sequence dimension, but the op's sequence loop is parallel";
        state[r] = CP::seq(rows->resultDims[i]);
      }
    }
    return success();
  }

  /// The mixture of experts on each rank's own slice of the tokens, as under
  /// dp: the permuted rows [B·S·k, H] are this rank's tokens' rows (split on
  /// their first dimension like a batch), the group sizes its own; the
  /// grouped GEMMs and the rest follow their loop nests (a weight gradient
  /// sums the rank's rows: a partial sum over cp). The load-balancing loss
  /// and a capacity factor count a microbatch's tokens: refused.
  LogicalResult visitExperts(Operation *op) {
    if (isa<MoeRouterStatsOp>(op)) { // this rank's tokens' statistics, added to the partial sums before
      for (Value r : op->getResults())
        state[r] = {CP::Partial};
      return success();
    }
    if (auto r = dyn_cast<MoeRouteOp>(op)) {
      const CP tokens = of(r.getLogits());
      state[r.getWeights()] = tokens;
      state[r.getExperts()] = tokens;
      return success();
    }
    if (auto p = dyn_cast<MoePermuteOp>(op)) {
      if (p.getCapacity())
        return op->emitOpError("llcdist-partition: --moe-capacity-factor bounds each expert's rows of a rank's "
                               "tokens, which context parallelism splits over cp (a different drop policy); compile "
                               "without cp or without a capacity factor");
      state[p.getResult()] = CP::seq(0);
      state[p.getSlots()] = of(p.getExperts());
      return success();
    }
    auto u = cast<MoeUnpermuteOp>(op); // rows back to the rank's tokens
    state[u.getResult()] = of(u.getSlots());
    return success();
  }

  /// Only sums of partial sums and gradient accumulation read partial sums.
  LogicalResult checkPartialOperands(Operation *op) {
    bool partial = llvm::any_of(op->getOperands(), [&](Value v) { return of(v).kind == CP::Partial; });
    if (!partial || isa<AccumulateGradOp, MoeRouterStatsOp>(op)) // (the statistics: visitStatistics)
      return success();
    if (isa<AddOp>(op) && llvm::all_of(op->getOperands(), [&](Value v) { return of(v).kind == CP::Partial; }))
      return success();
    return op->emitOpError("llcdist-partition: consumes a partial sum over cp; an all-reduce would be needed here");
  }

  /// The load-balancing loss's statistics [E]: each cp rank's routers count
  /// and sum its own slice of the tokens (xf.zeros starts zero partial sums,
  /// the layers pass them on); the loss reads the microbatch's, all-reduced
  /// over cp once, and each rank adds the same loss to its own (the step's
  /// loss is their mean over dp × cp).
  LogicalResult visitStatistics(Operation *op) {
    if (isa<ZerosOp>(op)) {
      state[op->getResult(0)] = {CP::Partial};
      return success();
    }
    auto aux = cast<MoeAuxLossOp>(op);
    for (Value v : {aux.getCounts(), aux.getProbs()}) {
      if (of(v).kind != CP::Partial)
        continue;
      OpBuilder b(aux->getContext());
      b.setInsertionPointAfterValue(v);
      auto ar = AllReduceOp::create(b, v.getLoc(), v, "cp",
                                    "context parallelism: each cp rank's routers count the assignments and sum the "
                                    "probabilities of its own slice of the tokens; the load-balancing loss reads the "
                                    "microbatch's",
                                    stringifyCollectiveOrigin(CollectiveOrigin::ContextParallel));
      v.replaceAllUsesExcept(ar.getResult(), ar);
    }
    state[aux.getResult()] = of(aux.getLoss());
    return success();
  }

  /// Learned positions of a sequence slice are the rank's tokens' (mesh.cp_layout); under sequence
  /// parallelism too, tp's slice of them ("tp+cp": each cp slice split over tp).
  LogicalResult positions(Operation *op) {
    if (!isa<AddPositionEmbeddingOp, AddPositionEmbeddingGradOp>(op))
      return success();
    auto sp = op->getAttrOfType<StringAttr>("xf.seq_parallel_axis");
    if (sp && sp.getValue() != "tp")
      return op->emitOpError("llcdist-partition: learned positions already split over ") << sp << " under cp";
    op->setAttr("xf.seq_parallel_axis", StringAttr::get(op->getContext(), sp ? "tp+cp" : "cp"));
    return success();
  }

  /// Ring: the load-balanced layout cuts each sequence into 2·cp chunks.
  LogicalResult checkRingLayout(func::FuncOp entry) {
    int64_t seq = cast<RankedTensorType>(entry.getArgument(0).getType()).getDimSize(1);
    if (seq % (2 * cp) != 0)
      return emitError(entry.getLoc(), "llcdist-partition: cp=")
             << cp << " (ring) cuts the sequence of " << seq << " tokens into 2*cp=" << 2 * cp
             << " load-balanced chunks, which does not divide it; choose --seq-len a multiple of " << 2 * cp
             << " (or --cp-impl all-to-all)";
    module->setAttr("xf.cp_layout", StringAttr::get(module.getContext(), "load_balanced"));
    return success();
  }

  /// Ring: the attention core stays on the rank's tokens ([B, S, F], lse
  /// [B, heads, S]); rope takes their positions, attention the ring.
  LogicalResult visitRingOp(Operation *op) {
    auto seqDim = [&](Value v) { return isa<AttentionGradOp>(op) && v == op->getOperand(5) ? 2 : 1; };
    for (Value v : op->getOperands())
      if (of(v) != CP::seq(seqDim(v)))
        return op->emitOpError("llcdist-partition: the attention core reads an operand that is not a "
                               "sequence-split activation under cp (ring)");
    for (Value r : op->getResults())
      state[r] = CP::seq(isa<AttentionOp>(op) && r == op->getResult(1) ? 2 : 1);
    MLIRContext *ctx = op->getContext();
    if (isa<RopeOp, RopeGradOp>(op))
      op->setAttr("xf.seq_parallel_axis", StringAttr::get(ctx, "cp"));
    else
      op->setAttr("xf.cp_ring", IntegerAttr::get(IntegerType::get(ctx, 64), cp));
    return success();
  }

  LogicalResult visitHeadOp(Operation *op) {
    for (OpOperand &use : op->getOpOperands()) {
      CP s = of(use.get());
      if (s.kind == CP::Seq && s.dim == 1)
        use.set(toHeads(use.get()));
      else if (s.kind != CP::Heads)
        return op->emitOpError("llcdist-partition: the attention core reads an operand that is not a "
                               "sequence-split activation [B, S, F] under cp");
    }
    for (Value r : op->getResults()) // lse [B, heads, S]; every other [B, S, heads·hd]
      state[r] = CP::heads(isa<AttentionOp>(op) && r == op->getResult(1) ? 1 : 2);
    // Replicated kv heads: rope carries them through; every dk and dv holds
    // the replicas' gradients.
    if (isa<RopeOp, RopeGradOp>(op) && replicated.contains(op->getOperand(0)))
      markReplicated(op->getResult(0));
    if (auto g = dyn_cast<AttentionGradOp>(op); g && kvReplicas > 1) {
      markReplicated(g.getDk());
      markReplicated(g.getDv());
    }
    if (auto at = dyn_cast<AttentionOp>(op))
      return localHeads(at);
    if (auto at = dyn_cast<AttentionGradOp>(op))
      return localHeads(at);
    return success();
  }

  /// num_heads and num_kv_heads (already per tp rank) over cp: each cp rank
  /// takes whole kv groups.
  template <typename AttnOp> LogicalResult localHeads(AttnOp op) {
    int64_t nh = op.getNumHeads(), nkv = op.getNumKvHeads();
    if (nkv != kvHeads || int64_t(op.getHeadDim()) != headDim)
      return op.emitOpError("llcdist-partition: every attention under cp (all-to-all) must have the same kv "
                            "heads and head_dim");
    if (op.getAlibiHeads())
      return op.emitOpError("llcdist-partition: cp (all-to-all) with ALiBi (alibi_heads) is not supported: the "
                            "heads a cp rank takes would need their slopes; use --cp-impl ring, which keeps every "
                            "head and adds the bias by global position");
    heads.push_back({op, nh / cp, kvReplicas > 1 ? 1 : nkv / cp});
    return success();
  }

  /// All-to-all: each cp rank takes nh/cp query heads and their kv group, so
  /// cp divides the heads (per tp rank) and either divides the kv heads or is
  /// a multiple of them (then each kv head is replicated cp/kv times).
  LogicalResult planKvReplicas() {
    AttentionOp first;
    module.walk([&](AttentionOp a) {
      if (!first)
        first = a;
    });
    if (!first)
      return success();
    const int64_t nh = first.getNumHeads(), nkv = first.getNumKvHeads();
    kvHeads = nkv;
    headDim = first.getHeadDim();
    if (nh % cp == 0 && (nkv % cp == 0 || cp % nkv == 0)) {
      kvReplicas = nkv % cp == 0 ? 1 : cp / nkv;
      return success();
    }
    return first.emitOpError("llcdist-partition: cp=")
           << cp << " (all-to-all) gives each cp rank 1/cp of the attention's heads: it must divide num_heads=" << nh
           << " and either divide num_kv_heads=" << nkv
           << " or be a multiple of it (kv heads replicated), per tp rank; choose such a cp (or --cp-impl ring)";
  }

  /// The kv heads of `v` [B, S, kv·hd] (sequence-split) repeated in place,
  /// each kvReplicas times: [B, S, cp·hd], head j' holding kv head
  /// j'/kvReplicas.
  Value repeatKvHeads(Value v) {
    OpBuilder b = after(v);
    SmallVector<Value> parts{v};
    if (kvHeads > 1) {
      auto split = SplitOp::create(b, v.getLoc(), SmallVector<Type>(size_t(kvHeads), headsType(v, 1)), v);
      parts.assign(split.getResults().begin(), split.getResults().end());
    }
    SmallVector<Value> repeated;
    for (Value p : parts) {
      state[p] = CP::seq(1);
      repeated.append(size_t(kvReplicas), p);
    }
    Value r = ConcatOp::create(b, v.getLoc(), headsType(v, cp), repeated);
    state[r] = CP::seq(1);
    return r;
  }

  /// `v`'s type [..., n·head_dim]: n heads wide.
  RankedTensorType headsType(Value v, int64_t n) const {
    auto t = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> dims(t.getShape());
    dims.back() = n * headDim;
    return RankedTensorType::get(dims, t.getElementType());
  }

  /// The inverse's gradient: `v` [B, S, cp·hd] (sequence-split) holds the
  /// replicas' gradients; their sums per kv head, [B, S, kv·hd].
  Value sumKvReplicas(Value v) {
    OpBuilder b = after(v);
    auto split = SplitOp::create(b, v.getLoc(), SmallVector<Type>(size_t(cp), headsType(v, 1)), v);
    SmallVector<Value> sums;
    for (int64_t j = 0; j < kvHeads; ++j) {
      Value sum = split.getResult(unsigned(j * kvReplicas));
      state[sum] = CP::seq(1);
      for (int64_t r = 1; r < kvReplicas; ++r) {
        Value next = split.getResult(unsigned(j * kvReplicas + r));
        state[next] = CP::seq(1);
        sum = AddOp::create(b, v.getLoc(), sum, next);
        state[sum] = CP::seq(1);
      }
      sums.push_back(sum);
    }
    if (sums.size() == 1)
      return sums.front();
    Value r = ConcatOp::create(b, v.getLoc(), headsType(v, kvHeads), sums);
    state[r] = CP::seq(1);
    return r;
  }

  /// `v` holds replicated kv heads (or their gradients): its whole (global)
  /// width is cp heads, of which each rank holds one.
  void markReplicated(Value v) {
    if (replicated.insert(v).second)
      v.setType(headsType(v, cp));
  }

  /// A layer call: replicated kv heads flow in through its body's arguments
  /// (the forward's saved k and v) and out through its results.
  LogicalResult visitLayer(LayerOp call) {
    auto body = symbols.lookup<func::FuncOp>(call.getCallee());
    for (auto [operand, arg] : llvm::zip(call.getOperands(), body.getArguments()))
      if (replicated.contains(operand))
        markReplicated(arg);
    if (failed(llcdist::xf::detail::propagateLayer(call, symbols, state, bodyArgs,
                                                   [&](Block &b) { return propagate(b); })))
      return failure();
    auto ret = cast<func::ReturnOp>(body.getBody().front().getTerminator());
    for (auto [r, v] : llvm::zip(call.getResults(), ret.getOperands()))
      if (replicated.contains(v))
        markReplicated(r);
    return success();
  }

  /// Whether `v` (sequence-split, about to take the head split) is a k or v
  /// to replicate: its width is the kv heads' (the queries' differs, as cp
  /// divides the heads but not the kv heads).
  bool isReplicatedKv(Value v) const {
    return kvReplicas > 1 && cast<RankedTensorType>(v.getType()).getShape().back() == kvHeads * headDim;
  }

  /// The all-to-all of `v` (sequence-split, [B, S, F]) to the head split,
  /// once per value, right after its definition; it also replaces v in its
  /// layer body's returns (what the backward reads).
  Value toHeads(Value v) {
    Value &h = headsOf[v];
    if (!h) {
      const bool kv = isReplicatedKv(v);
      h = exchange(kv ? repeatKvHeads(v) : v, /*splitDim=*/2, /*concatDim=*/1, kToHeads, CP::heads(2));
      if (kv)
        replicated.insert(h); // its type is the concat's already
      v.replaceUsesWithIf(h, [&](OpOperand &u) {
        return isa<func::ReturnOp>(u.getOwner()) && u.getOwner()->getParentOp()->hasAttr("xf.layer_body");
      });
    }
    return h;
  }

  /// The all-to-all of a head-split `v` back to the sequence split, once.
  Value toSeq(Value v) {
    Value &s = seqOf[v];
    if (!s) {
      s = exchange(v, /*splitDim=*/1, /*concatDim=*/2, kToSeq, CP::seq(1));
      if (replicated.contains(v))
        s = sumKvReplicas(s);
    }
    return s;
  }

  /// An xf.all_to_all of `v` over cp right after its definition, its result
  /// in state `to` (global types: applyTypes makes both sides local).
  Value exchange(Value v, int64_t splitDim, int64_t concatDim, StringRef reason, CP to) {
    OpBuilder b = after(v);
    Value r = AllToAllOp::create(b, v.getLoc(), v.getType(), v, "cp", splitDim, concatDim, reason,
                                 stringifyCollectiveOrigin(CollectiveOrigin::ContextParallel))
                  .getResult();
    state[r] = to;
    return r;
  }

  static OpBuilder after(Value v) {
    OpBuilder b(v.getContext());
    if (Operation *def = v.getDefiningOp())
      b.setInsertionPointAfter(def);
    else
      b.setInsertionPointToStart(cast<BlockArgument>(v).getOwner());
    return b;
  }

  /// Every parameter gradient sums over all tokens: a partial sum over cp.
  LogicalResult checkGradients() {
    return llcdist::xf::detail::checkPartialGradients(module, "cp", [&](Value g) { return of(g).kind == CP::Partial; });
  }

  LogicalResult applyTypes() {
    for (auto &[value, s] : state) {
      if (s.kind != CP::Seq && s.kind != CP::Heads)
        continue;
      Value v = value;
      auto t = cast<RankedTensorType>(v.getType());
      SmallVector<int64_t> dims(t.getShape());
      if (s.dim >= int64_t(dims.size()) || dims[s.dim] % cp != 0)
        return emitError(v.getLoc(), "llcdist-partition: cp=")
               << cp << " does not divide dimension " << s.dim << " of " << t
               << (s.kind == CP::Heads ? " (the heads)" : " (the sequence)");
      dims[s.dim] /= cp;
      v.setType(RankedTensorType::get(dims, t.getElementType()));
    }
    Builder b(module.getContext());
    for (auto &[op, nh, nkv] : heads) {
      op->setAttr("num_heads", b.getI64IntegerAttr(nh));
      op->setAttr("num_kv_heads", b.getI64IntegerAttr(nkv));
    }
    llcdist::xf::detail::refreshFunctionTypes(module);
    return success();
  }

  struct LocalHeads {
    Operation *op;
    int64_t nh, nkv;
  };

  ModuleOp module;
  int64_t cp;
  bool ring;
  SymbolTable symbols;
  llvm::DenseMap<Value, CP> state;
  llvm::DenseMap<Operation *, SmallVector<CP>> bodyArgs;
  llvm::DenseMap<Value, Value> headsOf, seqOf;
  SmallVector<LocalHeads> heads;
  /// All-to-all with replicated kv heads (kvReplicas > 1): the attention's
  /// kv heads and head_dim per tp rank, and the head-split values that hold
  /// replicas (k, v, dk, dv and their ropes).
  int64_t kvReplicas = 1, kvHeads = 0, headDim = 0;
  llvm::DenseSet<Value> replicated;
};
} // namespace

LogicalResult llcdist::xf::partitionContextParallel(ModuleOp module, int64_t cp, const std::string &impl) {
  if (impl != "all-to-all" && impl != "ring")
    return module.emitError("llcdist-partition: --cp-impl '") << impl << "' is not known; use ring or all-to-all";
  return ContextParallelPropagation(module, cp, impl == "ring").run();
}
