//===- XFToPlan.cpp - lower the xf training step to a plan.program --------===//
//
// One kernel call (or two, for an unfused gradient) per xf op, each value in
// its own buffer. Layer calls are expanded: a layer body is lowered once per
// call with `{i}` bound to the call's index, so the program lists every
// layer's kernels and every parameter's buffers.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Conversion/Passes.h"
#include "llcdist/Dialect/XF/Analysis/ModelStats.h"
#include "llcdist/Dialect/XF/IR/XFOps.h"
#include "llcdist/Schedule/Schedule.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>

#define DEBUG_TYPE "llcdist-lower-to-plan"

namespace llcdist {
#define GEN_PASS_DEF_LOWERTOPLAN
#include "llcdist/Conversion/Passes.h.inc"
} // namespace llcdist

using namespace mlir;
using namespace llcdist;
using namespace llcdist::xf;
namespace plan = llcdist::plan;

namespace {
using Buf = FlatSymbolRefAttr;

int64_t numel(Value v) { return cast<RankedTensorType>(v.getType()).getNumElements(); }
int64_t lastDim(Value v) { return cast<RankedTensorType>(v.getType()).getShape().back(); }
int64_t dim(Value v, unsigned i) { return cast<RankedTensorType>(v.getType()).getDimSize(i); }

struct ParamInfo {
  RankedTensorType type;       ///< the local (this rank's) type
  /// ZeRO: `type` with its first dimension split over dp (the optimizer
  /// state's, and from stage 2 the gradient's, from stage 3 the value's):
  /// ceil(rows / dp) rows, so when dp does not divide the rows the last
  /// blocks end in zero padding (FSDP2's and DeepSpeed's padded shards).
  RankedTensorType shardType;
  DictionaryAttr sharding;     ///< xf.sharding of a split parameter, or null
  Buf value, grad;
  /// What the ops read: `value`, or under mixed precision its bf16 copy.
  Buf working;
  bool isTable = false;      // read by an embedding: no weight decay
  bool isNormWeight = false; // initialized to ones
  bool isNormOrBias = false; // rank-1
};

/// Values' buffers within one instantiation of a function body.
struct Scope {
  llvm::DenseMap<Value, SmallVector<Buf, 2>> bufs;
  int64_t layer = -1;
  /// Prepended to activation buffer names: a pipeline stage lowers each
  /// chunk once per microbatch slot ("v1s0/").
  std::string prefix;
  /// The scopes of the layer calls lowered in this scope: a zero-bubble
  /// backward lowers a backward layer body twice (input gradients, then
  /// weight gradients) into one scope.
  std::map<Operation *, std::unique_ptr<Scope>> inner;
  /// The weight-gradient pass of a split backward: the all-gathered values
  /// it has gathered again from their slices (regatherForWeights).
  llvm::DenseSet<Value> regathered;
};

/// The pipeline of a module cut by llcdist-pipeline-split.
struct Pipeline {
  int64_t stages = 1, virtualStages = 1, microbatches = 1;
  llcdist::schedule::ScheduleKind kind = llcdist::schedule::ScheduleKind::OneFOneB;
  int64_t chunks() const { return stages * virtualStages; }
};

int64_t chunkOf(Operation *op) {
  auto c = op->getAttrOfType<IntegerAttr>("xf.chunk");
  return c ? c.getInt() : -1;
}

/// The ops that compute a parameter's gradient (dW, db, a norm's or an
/// embedding's weight gradient): the lowering can write them straight into
/// the gradient buffer.
bool isParamGradient(Operation *op) {
  return isa_and_nonnull<LinearGradWeightOp, LinearGradBiasOp, EmbeddingGradOp,
                         AddPositionEmbeddingGradOp, RMSNormGradWeightOp,
                         LayerNormGradParamsOp>(op);
}

class Lowering {
public:
  explicit Lowering(ModuleOp module, int64_t zero = 0, bool reshardAfterForward = true)
      : module(module), ctx(module.getContext()), b(ctx), symbols(module), zero(zero),
        reshardAfterForward(reshardAfterForward) {}

  /// One program for the whole step (no pipeline).
  LogicalResult run();
  /// The program of pipeline stage `stage`.
  LogicalResult runStage(const Pipeline &pipe, int64_t stage);

private:
  // --- buffers, params, kernels -------------------------------------------
  Buf newBuffer(std::string name, StringRef kind, Type type) {
    // Names are unique: a repeated one (a split's results) gets #1, #2, ...
    if (unsigned n = bufferNames[name]++)
      name += "#" + std::to_string(n);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(firstSubroutine);
    std::string sym = "b" + std::to_string(nextBuffer++);
    auto op = plan::BufferOp::create(b, module.getLoc(), b.getStringAttr(sym),
                                     TypeAttr::get(type), b.getStringAttr(name),
                                     b.getStringAttr(kind), IntegerAttr());
    Buf ref = FlatSymbolRefAttr::get(ctx, sym);
    bufferOps[ref] = op;
    return ref;
  }
  RankedTensorType f32(ArrayRef<int64_t> dims) {
    return RankedTensorType::get(dims, b.getF32Type());
  }
  ParamInfo &param(const std::string &name, RankedTensorType type) {
    auto [it, inserted] = params.try_emplace(name);
    if (inserted) {
      ParamInfo &p = it->second;
      p.type = type;
      p.shardType = type;
      if (zero > 0) {
        SmallVector<int64_t> dims(type.getShape());
        dims[0] = llvm::divideCeil(dims[0], dp);
        p.shardType = RankedTensorType::get(dims, type.getElementType());
      }
      RankedTensorType held = zero >= 3 ? p.shardType : type;
      if (mixed) {
        // The manifest's parameter is the f32 master (what the runtime
        // initializes and saves; under ZeRO only this rank's block of it);
        // the ops read a bf16 copy, made from the master at the start of
        // every step (zeroGradients).
        p.value = newBuffer(name, "param", withF32(zero > 0 ? p.shardType : type));
        setMemoryClass(p.value, "optimizer_state"); // the paper's 12Ψ: master + m + v
        p.working = newBuffer(name + ".bf16", "param", held);
      } else {
        p.value = p.working = newBuffer(name, "param", held);
      }
      p.grad = newBuffer(name + ".grad", "grad", zero >= 2 ? p.shardType : type);
      p.isNormOrBias = type.getRank() == 1;
      paramOrder.push_back(name);
    }
    return it->second;
  }
  static RankedTensorType withF32(RankedTensorType t) {
    return RankedTensorType::get(t.getShape(), Float32Type::get(t.getContext()));
  }
  /// Which line of the memory report a buffer counts in, when not its kind.
  void setMemoryClass(Buf buf, StringRef cls) {
    if (auto op = bufferOps.lookup(buf))
      op->setAttr("memory_class", b.getStringAttr(cls));
  }
  /// The attributes of a ZeRO collective (or shard_slice) between the whole
  /// local tensor of `p` and its dp block. A padded block (dp does not
  /// divide the rows) adds `total`: the whole side holds only the real
  /// elements, and the runtime reads the padding as zeros (reduce_scatter,
  /// shard_slice) or drops it (all_gather).
  SmallVector<NamedAttribute> zeroCollective(const ParamInfo &p) {
    SmallVector<NamedAttribute> attrs{str("axis", "dp"), i64("outer", 1),
                                      i64("inner", p.shardType.getNumElements())};
    if (p.type.getNumElements() != p.shardType.getNumElements() * dp)
      attrs.push_back(i64("total", p.type.getNumElements()));
    return attrs;
  }
  /// ZeRO-2/3: a gradient contribution `full` (this microbatch's, not yet
  /// reduced over dp) is reduce-scattered and added to the gradient shard.
  void reduceIntoShard(Buf full, const std::string &name, Location loc) {
    ParamInfo &p = params[name];
    Buf part = newBuffer(name + ".grad_part", "scratch", p.shardType);
    SmallVector<NamedAttribute> attrs = zeroCollective(p);
    attrs.push_back(str("op", "sum"));
    kernel("reduce_scatter", {arg("x", full), arg("y", part)}, attrs,
           NameLoc::get(b.getStringAttr("ZeRO: reduce-scatter the gradient into its dp shard"),
                        loc))
        ->setAttr("plan.payload", b.getStringAttr("gradients"));
    kernel("accumulate", {arg("x", part), arg("y", p.grad)},
           {i64("n", p.shardType.getNumElements())}, loc);
  }
  std::string label(Operation *op, Scope &s) {
    std::string scope = s.prefix;
    if (auto nl = dyn_cast<NameLoc>(op->getLoc()))
      scope += instantiateLayerName(nl.getName().getValue(), s.layer);
    return scope + ":" + op->getName().stripDialect().str();
  }
  Buf def(Scope &s, Value v, Operation *op, StringRef suffix = "") {
    Buf buf = newBuffer(label(op, s) + suffix.str(), "activation", v.getType());
    s.bufs[v] = {buf};
    return buf;
  }
  Buf use(Scope &s, Value v) {
    auto it = s.bufs.find(v);
    assert(it != s.bufs.end() && "value lowered before its use");
    return it->second.front();
  }
  Location provenance(Operation *op, Scope &s) {
    if (auto nl = dyn_cast<NameLoc>(op->getLoc()))
      return NameLoc::get(b.getStringAttr(instantiateLayerName(nl.getName().getValue(), s.layer)),
                          nl.getChildLoc());
    return op->getLoc();
  }
  plan::KernelOp kernel(StringRef name, ArrayRef<NamedAttribute> args,
                        ArrayRef<NamedAttribute> attrs, Location loc) {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToEnd(&current.getBody().front());
    return plan::KernelOp::create(b, loc, name, b.getDictionaryAttr(args),
                                  b.getDictionaryAttr(attrs));
  }
  NamedAttribute arg(StringRef role, Attribute buf) { return b.getNamedAttr(role, buf); }
  /// A pipeline `send` of `buf` to stage `peer`, or a `recv` into it; what
  /// travels (`payload`) is for the communication report, as on collectives.
  void transfer(StringRef op, Buf buf, int64_t peer, int64_t tag, Location loc,
                StringRef payload) {
    kernel(op, {arg(op == "send" ? "x" : "y", buf)},
           {str("axis", "pp"), i64("peer", peer), i64("tag", tag)}, loc)
        ->setAttr("plan.payload", b.getStringAttr(payload));
  }
  NamedAttribute i64(StringRef n, int64_t v) { return b.getNamedAttr(n, b.getI64IntegerAttr(v)); }
  NamedAttribute f64(StringRef n, double v) { return b.getNamedAttr(n, b.getF64FloatAttr(v)); }
  NamedAttribute flag(StringRef n, bool v) { return b.getNamedAttr(n, b.getBoolAttr(v)); }
  NamedAttribute str(StringRef n, StringRef v) { return b.getNamedAttr(n, b.getStringAttr(v)); }
  NamedAttribute layout(WeightLayout l) {
    return str("layout", l == WeightLayout::OutIn ? "out_in" : "in_out");
  }

  /// `attrs` plus shard_axis when the op is vocabulary-parallel.
  SmallVector<NamedAttribute> withShardAxis(Operation *op,
                                            SmallVector<NamedAttribute> attrs) {
    if (auto axis = op->getAttrOfType<StringAttr>("xf.vocab_parallel_axis"))
      attrs.push_back(b.getNamedAttr("shard_axis", axis));
    if (auto axis = op->getAttrOfType<StringAttr>("xf.seq_parallel_axis"))
      attrs.push_back(b.getNamedAttr("shard_axis", axis));
    return attrs;
  }

  /// `attrs` plus real_vocab when the loss masks vocabulary padding
  /// (llcdist-pad-vocab).
  SmallVector<NamedAttribute> withRealVocab(std::optional<uint64_t> real,
                                            SmallVector<NamedAttribute> attrs) {
    if (real)
      attrs.push_back(i64("real_vocab", int64_t(*real)));
    return attrs;
  }

  /// rope_fwd / rope_bwd attributes for x [B, S, n·hd].
  SmallVector<NamedAttribute> ropeAttrs(Value x, int64_t hd, APFloat theta,
                                        DictionaryAttr scaling) {
    SmallVector<NamedAttribute> attrs{i64("B", dim(x, 0)), i64("S", dim(x, 1)),
                                      i64("n", lastDim(x) / hd), i64("hd", hd),
                                      f64("theta", theta.convertToDouble())};
    if (scaling) {
      attrs.push_back(flag("llama3", true));
      for (StringRef key : {"factor", "low_freq_factor", "high_freq_factor"})
        attrs.push_back(f64(key, scaling.getAs<FloatAttr>(key).getValueAsDouble()));
      // An integer in the plan format (and in Hugging Face's config).
      Attribute original = scaling.get("original_max_position_embeddings");
      attrs.push_back(i64("original_max_position_embeddings",
                          isa<IntegerAttr>(original)
                              ? cast<IntegerAttr>(original).getInt()
                              : int64_t(cast<FloatAttr>(original).getValueAsDouble())));
    }
    return attrs;
  }

  // --- gradients computed straight into a parameter's gradient ------------
  /// True when every result of `v`'s defining op is only added into a
  /// parameter's gradient: the kernel then writes the gradients directly.
  static bool isFused(Value v) {
    Operation *d = v.getDefiningOp();
    if (!isParamGradient(d))
      return false;
    return llvm::all_of(d->getResults(), [](Value r) {
      return r.hasOneUse() && isa<AccumulateGradOp>(*r.getUsers().begin());
    });
  }
  /// Where weight-gradient result `r` goes, and whether the kernel adds.
  std::pair<Buf, bool> gradTarget(Scope &s, Value r, Operation *op) {
    if (isFused(r)) {
      auto acc = cast<AccumulateGradOp>(*r.getUsers().begin());
      std::string name = instantiateLayerName(acc.getName(), s.layer);
      if (zero >= 2) {
        // This microbatch's contribution, whole; reduced into the shard
        // after the kernel (pendingShardReduce).
        Buf full = newBuffer(name + ".grad_mb", "scratch", params[name].type);
        pendingShardReduce.push_back({full, name, op->getLoc()});
        return {full, false};
      }
      return {params.find(name)->second.grad, true};
    }
    return {def(s, r, op, ".grad"), false};
  }

  // --- lowering --------------------------------------------------------------
  LogicalResult lowerBlock(Block &block, Scope &s);
  LogicalResult lowerOp(Operation *op, Scope &s) {
    if (weightPass && deferredToW(op) && failed(regatherForWeights(op, s)))
      return failure();
    LogicalResult r = lowerOpImpl(op, s);
    for (auto &[full, name, loc] : pendingShardReduce)
      reduceIntoShard(full, name, loc);
    pendingShardReduce.clear();
    return r;
  }
  LogicalResult lowerOpImpl(Operation *op, Scope &s);
  // --- split backward (ZB-H1): what B runs and what waits for W ------------
  /// Whether `op` belongs to W: a weight-gradient GEMM (linear_grad_weight),
  /// or an op that reads what W computes (the accumulation into the
  /// parameter's gradient). Everything else runs in B, the cheap weight
  /// gradients of norms, biases and embeddings included, so what a pending W
  /// holds is each GEMM's input and output gradient and nothing more.
  bool deferredToW(Operation *op);
  /// An all-gather whose result only W reads: W gathers it (from the slice,
  /// which is what waits), B does not.
  bool gathersOnlyForW(Operation *op) {
    return isa<AllGatherOp>(op) && !op->use_empty() &&
           llvm::all_of(op->getUsers(), [&](Operation *u) { return deferredToW(u); });
  }
  /// In the weight pass, before `op`: every operand that is an all-gather
  /// of a (sequence-parallel) slice is gathered again, right before its first
  /// use in W, so that between B and W only the slice is held.
  LogicalResult regatherForWeights(Operation *op, Scope &s) {
    for (Value v : op->getOperands())
      if (auto ag = v.getDefiningOp<AllGatherOp>())
        if (s.regathered.insert(v).second && failed(lowerOp(ag, s)))
          return failure();
    return success();
  }
  /// The ZeRO stage and the mesh: a stage in 0..3, dp > 1 when on.
  LogicalResult zeroCheck();
  LogicalResult lowerLayer(LayerOp call, Scope &s);
  LogicalResult lowerOptimizer(func::FuncOp fn);
  DictionaryAttr manifest(func::FuncOp entry);
  /// Checks shared by run() and runStage(); finds the entry and optimizer.
  LogicalResult prepare(func::FuncOp &entry, func::FuncOp &opt);
  /// A new program @name with step_begin and optimizer subroutines.
  void beginProgram(StringRef name);
  plan::SubroutineOp addSubroutine(StringRef name);
  /// step_begin zeroes every gradient (and the loss, when this program has it).
  void zeroGradients(Location loc);
  void action(plan::SubroutineOp sub, std::optional<int64_t> mb,
              ArrayRef<NamedAttribute> attrs = {});
  /// Pipeline stages: whether this stage updates `name` (false on a stage
  /// that holds a replica of a parameter whose home is another stage).
  bool updatesHere(StringRef name) const { return !replicaOf.count(name.str()); }
  DictionaryAttr initOf(const std::string &name, const ParamInfo &p);

  ModuleOp module;
  MLIRContext *ctx;
  OpBuilder b;
  SymbolTable symbols;
  plan::ProgramOp program;
  plan::SubroutineOp firstSubroutine, stepBegin, forward, backward, optimizer, current;
  int64_t nextBuffer = 0;
  llvm::StringMap<unsigned> bufferNames;
  /// This program's buffers by symbol (program.lookupSymbol walks them all).
  llvm::DenseMap<Attribute, plan::BufferOp> bufferOps;
  llvm::StringMap<ParamInfo> params;
  std::vector<std::string> paramOrder;
  Buf lossBuf, gradNormBuf;
  /// Ops of the layer bodies that the current pass lowers (null: all).
  std::function<bool(Operation *)> keepOp;
  /// Lowering the W subroutine of a split backward (see regatherForWeights).
  bool weightPass = false;
  llvm::DenseMap<Operation *, bool> deferredMemo;
  /// Pipeline: the parameters held here whose home stage is another
  /// (name -> home stage), and the pp axis for grad_norm's stage_axis.
  std::map<std::string, int64_t> replicaOf;
  bool pipelined = false;
  /// ZeRO stage (0: off) over dp; gradients waiting for reduceIntoShard.
  int64_t zero = 0, dp = 1;
  /// Mixed precision (bf16 values in the IR): see param().
  bool mixed = false;
  /// Parameters whose dimension 0 llcdist-pad-vocab padded past the real
  /// vocabulary (the manifest's `vocab_padded`).
  std::set<std::string> vocabPadded;
  /// ZeRO-3: whether the backward gathers a layer's parameters again (true:
  /// FSDP's reshard_after_forward) or reuses the forward's gathered copy,
  /// kept alive in between (`gathered`, by microbatch slot and name).
  bool reshardAfterForward = true;
  llvm::StringMap<Buf> gathered;
  struct PendingReduce {
    Buf full;
    std::string name;
    Location loc;
  };
  std::vector<PendingReduce> pendingShardReduce;
  int64_t microbatches = 1, numLayers = 0;
  std::string arch;
  // Optimizer choice, for the manifest.
  DictionaryAttr optimizerAttrs;
  double gradClip = 0;
};

LogicalResult Lowering::lowerLayer(LayerOp call, Scope &s) {
  auto fn = symbols.lookup<func::FuncOp>(call.getCallee());
  if (!fn)
    return call.emitOpError("callee not found");
  Block &body = fn.getBody().front();
  std::unique_ptr<Scope> &slot = s.inner[call.getOperation()];
  if (!slot) {
    slot = std::make_unique<Scope>();
    slot->layer = call.getIndexAttr().getInt();
    slot->prefix = s.prefix;
    for (auto [a, operand] : llvm::zip(body.getArguments(), call.getOperands()))
      slot->bufs[a] = s.bufs.lookup(operand);
  }
  Scope &inner = *slot;
  // A parameter only where this pass reads it (under ZeRO-3 lowering it
  // gathers it: W's GEMMs read activations and gradients, never weights).
  for (Operation &op : body.without_terminator())
    if (!keepOp || keepOp(&op) ||
        (isa<ParamOp>(op) && llvm::any_of(op.getUsers(), keepOp)))
      if (failed(lowerOp(&op, inner)))
        return failure();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  for (auto [r, v] : llvm::zip(call.getResults(), ret.getOperands()))
    if (auto it = inner.bufs.find(v); it != inner.bufs.end())
      s.bufs[r] = it->second;
  return success();
}

bool Lowering::deferredToW(Operation *op) {
  if (isa<LinearGradWeightOp>(op))
    return true;
  if (isa<ParamOp, LayerOp>(op))
    return false;
  if (auto it = deferredMemo.find(op); it != deferredMemo.end())
    return it->second;
  bool deferred = llvm::any_of(op->getOperands(), [&](Value v) {
    Operation *d = v.getDefiningOp();
    return d && deferredToW(d);
  });
  deferredMemo[op] = deferred;
  return deferred;
}

LogicalResult Lowering::lowerBlock(Block &block, Scope &s) {
  for (Operation &op : block.without_terminator())
    if (failed(lowerOp(&op, s)))
      return failure();
  return success();
}

LogicalResult Lowering::lowerOpImpl(Operation *op, Scope &s) {
  Location loc = provenance(op, s);
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](ParamOp p) {
        std::string name = instantiateLayerName(p.getName(), s.layer);
        ParamInfo &info = param(name, p.getType());
        if (auto sh = p->getAttrOfType<DictionaryAttr>("xf.sharding"))
          info.sharding = sh;
        s.bufs[p.getResult()] = {info.working};
        if (zero >= 3 && !reshardAfterForward && gathered.count(s.prefix + name)) {
          s.bufs[p.getResult()] = {gathered[s.prefix + name]};
        } else if (zero >= 3) {
          // FSDP: the whole parameter exists only while this scope (a layer
          // body's forward or backward, or the step's top level) uses it.
          Buf full = newBuffer(s.prefix + name + ".gathered", "activation", info.type);
          gathered[s.prefix + name] = full;
          kernel("all_gather", {arg("x", info.working), arg("y", full)}, zeroCollective(info),
                 NameLoc::get(b.getStringAttr("ZeRO-3: gather the parameter before its use"),
                              loc))
              ->setAttr("plan.payload", b.getStringAttr("parameters"));
          s.bufs[p.getResult()] = {full};
        }
        for (Operation *user : p->getUsers()) {
          if (isa<EmbeddingOp, AddPositionEmbeddingOp>(user) &&
              user->getOperand(1) == p.getResult())
            info.isTable = true;
          if (isa<LayerNormOp, RMSNormOp>(user) && user->getOperand(1) == p.getResult())
            info.isNormWeight = true;
        }
        return success();
      })
      .Case([&](LayerOp l) { return lowerLayer(l, s); })
      .Case([&](EmbeddingOp e) {
        Buf out = def(s, e.getResult(), op);
        kernel("embedding_fwd",
               {arg("ids", use(s, e.getIds())), arg("table", use(s, e.getTable())),
                arg("out", out)},
               withShardAxis(op, {i64("M", numel(e.getIds())), i64("V", dim(e.getTable(), 0)),
                                  i64("H", dim(e.getTable(), 1))}),
               loc);
        return success();
      })
      .Case([&](AddPositionEmbeddingOp e) {
        Buf y = def(s, e.getResult(), op);
        kernel("pos_embedding_fwd",
               {arg("x", use(s, e.getInput())), arg("wpe", use(s, e.getTable())),
                arg("y", y)},
               withShardAxis(op, {i64("B", dim(e.getInput(), 0)), i64("S", dim(e.getInput(), 1)),
                                  i64("H", dim(e.getInput(), 2)), i64("P", dim(e.getTable(), 0))}),
               loc);
        return success();
      })
      .Case([&](LayerNormOp ln) {
        int64_t rows = numel(ln.getInput()) / lastDim(ln.getInput());
        Buf y = def(s, ln.getResult(), op);
        Buf mean = newBuffer(label(op, s) + ".mean", "activation", f32({rows}));
        Buf rstd = newBuffer(label(op, s) + ".rstd", "activation", f32({rows}));
        if (ln.getStats())
          s.bufs[ln.getStats()] = {mean, rstd};
        kernel("layer_norm_fwd",
               {arg("x", use(s, ln.getInput())), arg("gamma", use(s, ln.getWeight())),
                arg("beta", use(s, ln.getBias())), arg("y", y), arg("mean", mean),
                arg("rstd", rstd)},
               {i64("M", rows), i64("H", lastDim(ln.getInput())),
                f64("eps", ln.getEps().convertToDouble())},
               loc);
        return success();
      })
      .Case([&](RMSNormOp rn) {
        int64_t rows = numel(rn.getInput()) / lastDim(rn.getInput());
        Buf y = def(s, rn.getResult(), op);
        Buf rstd = newBuffer(label(op, s) + ".rstd", "activation", f32({rows}));
        if (rn.getStats())
          s.bufs[rn.getStats()] = {rstd};
        kernel("rms_norm_fwd",
               {arg("x", use(s, rn.getInput())), arg("weight", use(s, rn.getWeight())),
                arg("y", y), arg("rstd", rstd)},
               {i64("M", rows), i64("H", lastDim(rn.getInput())),
                f64("eps", rn.getEps().convertToDouble())},
               loc);
        return success();
      })
      .Case([&](LinearOp lin) {
        int64_t k = lastDim(lin.getInput()), n = lastDim(lin.getResult());
        Buf y = def(s, lin.getResult(), op);
        SmallVector<NamedAttribute> args{arg("x", use(s, lin.getInput())),
                                         arg("w", use(s, lin.getWeight())),
                                         arg("y", y)};
        if (lin.getBias())
          args.push_back(arg("bias", use(s, lin.getBias())));
        kernel("linear_fwd", args,
               {i64("M", numel(lin.getInput()) / k), i64("K", k), i64("N", n),
                layout(lin.getLayout())},
               loc);
        return success();
      })
      .Case([&](SplitOp sp) {
        SmallVector<Attribute> outs, sizes;
        for (Value r : sp.getResults()) {
          outs.push_back(def(s, r, op));
          sizes.push_back(b.getI64IntegerAttr(lastDim(r)));
        }
        kernel("split_fwd",
               {arg("x", use(s, sp.getInput())), arg("outs", b.getArrayAttr(outs))},
               {i64("rows", numel(sp.getInput()) / lastDim(sp.getInput())),
                b.getNamedAttr("sizes", b.getArrayAttr(sizes))},
               loc);
        return success();
      })
      .Case([&](RopeOp r) {
        Buf y = def(s, r.getResult(), op);
        kernel("rope_fwd", {arg("x", use(s, r.getInput())), arg("y", y)},
               ropeAttrs(r.getInput(), r.getHeadDim(), r.getTheta(), r.getScalingAttr()),
               loc);
        return success();
      })
      .Case([&](AttentionOp at) {
        Buf out = def(s, at.getResult(), op);
        int64_t B = dim(at.getQ(), 0), S = dim(at.getQ(), 1);
        Buf lse = newBuffer(label(op, s) + ".lse", "activation",
                            f32({B, int64_t(at.getNumHeads()), S}));
        if (at.getLse())
          s.bufs[at.getLse()] = {lse};
        kernel("attention_fwd",
               {arg("q", use(s, at.getQ())), arg("k", use(s, at.getK())),
                arg("v", use(s, at.getV())), arg("out", out), arg("lse", lse)},
               {i64("B", B), i64("S", S), i64("nh", at.getNumHeads()),
                i64("nkv", at.getNumKvHeads()), i64("hd", at.getHeadDim())},
               loc);
        return success();
      })
      .Case([&](GeluTanhOp g) {
        Buf y = def(s, g.getResult(), op);
        kernel("gelu_tanh_fwd", {arg("x", use(s, g.getInput())), arg("y", y)},
               {i64("n", numel(g.getInput()))}, loc);
        return success();
      })
      .Case([&](SwiGLUOp g) {
        Buf y = def(s, g.getResult(), op);
        kernel("swiglu_fwd",
               {arg("gate", use(s, g.getGate())), arg("up", use(s, g.getUp())),
                arg("y", y)},
               {i64("n", numel(g.getGate()))}, loc);
        return success();
      })
      .Case([&](AddOp a) {
        Buf y = def(s, a.getResult(), op);
        kernel("add",
               {arg("a", use(s, a.getLhs())), arg("b", use(s, a.getRhs())),
                arg("y", y)},
               {i64("n", numel(a.getLhs()))}, loc);
        return success();
      })
      .Case([&](CrossEntropyOp ce) {
        s.bufs[ce.getLoss()] = {lossBuf};
        kernel("cross_entropy_fwd",
               {arg("logits", use(s, ce.getLogits())),
                arg("targets", use(s, ce.getTargets())), arg("loss", lossBuf)},
               withRealVocab(ce.getRealVocab(),
                             withShardAxis(op, {i64("M", numel(ce.getTargets())),
                                                i64("V", lastDim(ce.getLogits())),
                                                f64("scale", 1.0 / double(microbatches))})),
               loc);
        return success();
      })
      // --- backward -----------------------------------------------------------
      .Case([&](CrossEntropyGradOp g) {
        Buf d = def(s, g.getResult(), op);
        kernel("cross_entropy_bwd",
               {arg("logits", use(s, g.getLogits())),
                arg("targets", use(s, g.getTargets())), arg("dlogits", d)},
               withRealVocab(g.getRealVocab(),
                             withShardAxis(op, {i64("M", numel(g.getTargets())),
                                                i64("V", lastDim(g.getLogits())),
                                                f64("scale", g.getScale().convertToDouble())})),
               loc);
        return success();
      })
      .Case([&](LinearGradInputOp g) {
        int64_t k = lastDim(g.getResult()), n = lastDim(g.getDy());
        Buf dx = def(s, g.getResult(), op);
        kernel("linear_bwd_input",
               {arg("dy", use(s, g.getDy())), arg("w", use(s, g.getWeight())),
                arg("dx", dx)},
               {i64("M", numel(g.getDy()) / n), i64("K", k), i64("N", n),
                layout(g.getLayout()), flag("accumulate", false)},
               loc);
        return success();
      })
      .Case([&](LinearGradWeightOp g) {
        int64_t k = lastDim(g.getInput()), n = lastDim(g.getDy());
        auto [dw, acc] = gradTarget(s, g.getResult(), op);
        kernel("linear_bwd_weight",
               {arg("dy", use(s, g.getDy())), arg("x", use(s, g.getInput())),
                arg("dw", dw)},
               {i64("M", numel(g.getDy()) / n), i64("K", k), i64("N", n),
                layout(g.getLayout()), flag("accumulate", acc)},
               loc);
        return success();
      })
      .Case([&](LinearGradBiasOp g) {
        int64_t n = lastDim(g.getDy());
        auto [db, acc] = gradTarget(s, g.getResult(), op);
        kernel("linear_bwd_bias", {arg("dy", use(s, g.getDy())), arg("db", db)},
               {i64("M", numel(g.getDy()) / n), i64("N", n), flag("accumulate", acc)},
               loc);
        return success();
      })
      .Case([&](EmbeddingGradOp g) {
        auto [dt, acc] = gradTarget(s, g.getResult(), op);
        kernel("embedding_bwd_weight",
               {arg("ids", use(s, g.getIds())), arg("dout", use(s, g.getDy())),
                arg("dtable", dt)},
               withShardAxis(op, {i64("M", numel(g.getIds())), i64("V", dim(g.getResult(), 0)),
                                  i64("H", dim(g.getResult(), 1)), flag("accumulate", acc)}),
               loc);
        return success();
      })
      .Case([&](AddPositionEmbeddingGradOp g) {
        auto [dt, acc] = gradTarget(s, g.getResult(), op);
        kernel("pos_embedding_bwd_weight", {arg("dy", use(s, g.getDy())), arg("dwpe", dt)},
               withShardAxis(op, {i64("B", dim(g.getDy(), 0)), i64("S", dim(g.getDy(), 1)),
                                  i64("H", dim(g.getDy(), 2)), i64("P", dim(g.getResult(), 0)),
                                  flag("accumulate", acc)}),
               loc);
        return success();
      })
      .Case([&](LayerNormGradInputOp g) {
        auto st = s.bufs.lookup(g.getStats());
        Buf dx = def(s, g.getResult(), op);
        kernel("layer_norm_bwd_input",
               {arg("dy", use(s, g.getDy())), arg("x", use(s, g.getInput())),
                arg("gamma", use(s, g.getWeight())), arg("mean", st[0]),
                arg("rstd", st[1]), arg("dx", dx)},
               {i64("M", numel(g.getDy()) / lastDim(g.getDy())),
                i64("H", lastDim(g.getDy()))},
               loc);
        return success();
      })
      .Case([&](LayerNormGradParamsOp g) {
        auto st = s.bufs.lookup(g.getStats());
        auto [dg, acc] = gradTarget(s, g.getDweight(), op);
        auto [db, acc2] = gradTarget(s, g.getDbias(), op);
        (void)acc2; // fused together or not at all (isFused checks both)
        kernel("layer_norm_bwd_weight",
               {arg("dy", use(s, g.getDy())), arg("x", use(s, g.getInput())),
                arg("mean", st[0]), arg("rstd", st[1]), arg("dgamma", dg),
                arg("dbeta", db)},
               {i64("M", numel(g.getDy()) / lastDim(g.getDy())),
                i64("H", lastDim(g.getDy())), flag("accumulate", acc)},
               loc);
        return success();
      })
      .Case([&](RMSNormGradInputOp g) {
        Buf dx = def(s, g.getResult(), op);
        kernel("rms_norm_bwd_input",
               {arg("dy", use(s, g.getDy())), arg("x", use(s, g.getInput())),
                arg("weight", use(s, g.getWeight())),
                arg("rstd", use(s, g.getStats())), arg("dx", dx)},
               {i64("M", numel(g.getDy()) / lastDim(g.getDy())),
                i64("H", lastDim(g.getDy()))},
               loc);
        return success();
      })
      .Case([&](RMSNormGradWeightOp g) {
        auto [dw, acc] = gradTarget(s, g.getResult(), op);
        kernel("rms_norm_bwd_weight",
               {arg("dy", use(s, g.getDy())), arg("x", use(s, g.getInput())),
                arg("rstd", use(s, g.getStats())), arg("dweight", dw)},
               {i64("M", numel(g.getDy()) / lastDim(g.getDy())),
                i64("H", lastDim(g.getDy())), flag("accumulate", acc)},
               loc);
        return success();
      })
      .Case([&](RopeGradOp r) {
        Buf dx = def(s, r.getResult(), op);
        kernel("rope_bwd", {arg("dy", use(s, r.getDy())), arg("dx", dx)},
               ropeAttrs(r.getDy(), r.getHeadDim(), r.getTheta(), r.getScalingAttr()),
               loc);
        return success();
      })
      .Case([&](AttentionGradOp g) {
        Buf dq = def(s, g.getDq(), op, ".dq");
        Buf dk = def(s, g.getDk(), op, ".dk");
        Buf dv = def(s, g.getDv(), op, ".dv");
        kernel("attention_bwd",
               {arg("dout", use(s, g.getDout())), arg("q", use(s, g.getQ())),
                arg("k", use(s, g.getK())), arg("v", use(s, g.getV())),
                arg("out", use(s, g.getOut())), arg("lse", use(s, g.getLse())),
                arg("dq", dq), arg("dk", dk), arg("dv", dv)},
               {i64("B", dim(g.getQ(), 0)), i64("S", dim(g.getQ(), 1)),
                i64("nh", g.getNumHeads()), i64("nkv", g.getNumKvHeads()),
                i64("hd", g.getHeadDim())},
               loc);
        return success();
      })
      .Case([&](GeluTanhGradOp g) {
        Buf dx = def(s, g.getResult(), op);
        kernel("gelu_tanh_bwd",
               {arg("dy", use(s, g.getDy())), arg("x", use(s, g.getInput())),
                arg("dx", dx)},
               {i64("n", numel(g.getDy()))}, loc);
        return success();
      })
      .Case([&](SwiGLUGradOp g) {
        Buf dg = def(s, g.getDgate(), op, ".dgate");
        Buf du = def(s, g.getDup(), op, ".dup");
        kernel("swiglu_bwd",
               {arg("dy", use(s, g.getDy())), arg("gate", use(s, g.getGate())),
                arg("up", use(s, g.getUp())), arg("dgate", dg), arg("dup", du)},
               {i64("n", numel(g.getDy()))}, loc);
        return success();
      })
      .Case([&](ConcatOp c) {
        SmallVector<Attribute> ins, sizes;
        for (Value v : c.getInputs()) {
          ins.push_back(use(s, v));
          sizes.push_back(b.getI64IntegerAttr(lastDim(v)));
        }
        Buf dx = def(s, c.getResult(), op);
        kernel("split_bwd", {arg("douts", b.getArrayAttr(ins)), arg("dx", dx)},
               {i64("rows", numel(c.getResult()) / lastDim(c.getResult())),
                b.getNamedAttr("sizes", b.getArrayAttr(sizes))},
               loc);
        return success();
      })
      .Case([&](AllReduceOp ar) {
        // In place: the partial value has no other use.
        Buf buf = use(s, ar.getInput());
        s.bufs[ar.getResult()] = {buf};
        kernel("all_reduce", {arg("x", b.getArrayAttr({buf}))},
               {str("axis", ar.getAxis()), str("op", "sum")},
               NameLoc::get(ar.getReasonAttr(), loc))
            ->setAttr("plan.payload", b.getStringAttr("activations"));
        return success();
      })
      .Case<AllGatherOp, ReduceScatterOp>([&](Operation *o) {
        // x [outer, inner_x] <-> y [outer, inner_y] along `dim`: outer is the
        // product of the dimensions before it, inner that of the local slice.
        bool gather = isa<AllGatherOp>(o);
        Value local = gather ? o->getOperand(0) : o->getResult(0);
        int64_t d = o->getAttrOfType<IntegerAttr>("dim").getInt();
        auto lt = cast<RankedTensorType>(local.getType());
        int64_t outer = 1, inner = 1;
        for (int64_t i = 0; i < lt.getRank(); ++i)
          (i < d ? outer : inner) *= lt.getDimSize(i);
        Buf y = def(s, o->getResult(0), o);
        SmallVector<NamedAttribute> attrs{b.getNamedAttr("axis", o->getAttr("axis")),
                                          i64("outer", outer), i64("inner", inner)};
        if (!gather)
          attrs.push_back(str("op", "sum"));
        kernel(gather ? "all_gather" : "reduce_scatter",
               {arg("x", use(s, o->getOperand(0))), arg("y", y)}, attrs,
               NameLoc::get(o->getAttrOfType<StringAttr>("reason"), loc))
            ->setAttr("plan.payload", b.getStringAttr("activations"));
        return success();
      })
      .Case([&](BiasAddOp ba) {
        Buf y = use(s, ba.getInput());
        s.bufs[ba.getResult()] = {y};
        int64_t n = lastDim(ba.getInput());
        kernel("bias_add", {arg("y", y), arg("bias", use(s, ba.getBias()))},
               {i64("M", numel(ba.getInput()) / n), i64("N", n)}, loc);
        return success();
      })
      .Case([&](AccumulateGradOp acc) -> LogicalResult {
        if (isFused(acc.getGrad()))
          return success(); // written by the gradient's own kernel
        auto it = params.find(instantiateLayerName(acc.getName(), s.layer));
        if (it == params.end())
          return acc.emitOpError("gradient of a parameter that is never read");
        if (zero >= 2) {
          reduceIntoShard(use(s, acc.getGrad()), it->getKey().str(), loc);
          return success();
        }
        kernel("accumulate", {arg("x", use(s, acc.getGrad())), arg("y", it->second.grad)},
               {i64("n", numel(acc.getGrad()))}, loc);
        return success();
      })
      .Default([&](Operation *o) {
        return o->emitOpError("llcdist-lower-to-plan: no lowering for this op");
      });
}

DictionaryAttr Lowering::initOf(const std::string &name, const ParamInfo &p) {
  if (p.isNormWeight)
    return b.getDictionaryAttr({str("kind", "ones")});
  if (p.isNormOrBias)
    return b.getDictionaryAttr({str("kind", "zeros")});
  double std = 0.02; // Hugging Face's initializer_range default
  // GPT-2 scales its residual projections by 1/sqrt(2·layers) at init.
  if (arch == "GPT2LMHeadModel" && StringRef(name).ends_with("c_proj.weight"))
    std /= std::sqrt(2.0 * double(numLayers));
  return b.getDictionaryAttr({str("kind", "normal"), f64("std", std)});
}

LogicalResult Lowering::lowerOptimizer(func::FuncOp fn) {
  current = optimizer;
  // The gradient each update reads: the gradient buffer, or under ZeRO-1
  // the dp shard reduce-scattered out of it.
  llvm::StringMap<Buf> updateGrad;
  for (const std::string &name : paramOrder)
    updateGrad[name] = params[name].grad;
  for (Operation &op : fn.getBody().front().without_terminator()) {
    if (auto ar = dyn_cast<AllReduceGradsOp>(op); ar && zero > 0 && ar.getAxis() == "dp") {
      // ZeRO replaces the gradient all-reduce over dp by reduce-scatters:
      // stages 2 and 3 did them in the backward, stage 1 does them now.
      if (zero == 1)
        for (const std::string &name : paramOrder) {
          if (!updatesHere(name))
            continue; // a tied copy: its home reduces the summed gradient
          ParamInfo &p = params[name];
          Buf shard = newBuffer(name + ".grad_shard", "scratch", p.shardType);
          SmallVector<NamedAttribute> attrs = zeroCollective(p);
          attrs.push_back(str("op", "sum"));
          kernel("reduce_scatter", {arg("x", p.grad), arg("y", shard)}, attrs,
                 NameLoc::get(b.getStringAttr("ZeRO-1: reduce-scatter the gradient to the "
                                              "optimizer state's owner"),
                              NameLoc::get(b.getStringAttr(name), op.getLoc())))
              ->setAttr("plan.payload", b.getStringAttr("gradients"));
          updateGrad[name] = shard;
        }
      continue;
    }
    if (auto ar = dyn_cast<AllReduceGradsOp>(op)) {
      SmallVector<Attribute> covered;
      for (const std::string &name : paramOrder)
        if (ar.covers(name) && updatesHere(name))
          covered.push_back(updateGrad[name]);
      if (covered.empty())
        continue;
      SmallVector<NamedAttribute> attrs{str("axis", ar.getAxis()), str("op", ar.getReduction())};
      if (auto g = ar.getGroupSize()) // over sub-groups of the axis (kv-head replicas)
        attrs.push_back(i64("group_size", int64_t(*g)));
      kernel("all_reduce", {arg("x", b.getArrayAttr(covered))}, attrs,
             NameLoc::get(ar.getReasonAttr(), op.getLoc()))
          ->setAttr("plan.payload",
                    b.getStringAttr(ar.getGroupSize() ? "kv-replica gradients"
                                    : ar.getParams()  ? "sequence-parallel gradients"
                                                      : "gradients"));
      continue;
    }
    if (auto ar = dyn_cast<AllReduceLossOp>(op)) {
      if (!lossBuf)
        continue; // a pipeline stage before the last has no loss
      kernel("all_reduce", {arg("x", b.getArrayAttr({lossBuf}))},
             {str("axis", ar.getAxis()), str("op", "avg")},
             NameLoc::get(ar.getReasonAttr(), op.getLoc()))
          ->setAttr("plan.payload", b.getStringAttr("loss"));
      continue;
    }
    if (auto clip = dyn_cast<ClipGradNormOp>(op)) {
      gradClip = clip.getMaxNorm().convertToDouble();
      // Replicated gradients count once; split ones once per shard (summed
      // over their axis); replicated shards (kv heads) once per shard, on
      // the first of its replicas.
      SmallVector<Attribute> replicated, sharded, replicaShards;
      StringAttr axis;
      int64_t replicas = 0;
      for (const std::string &name : paramOrder) {
        ParamInfo &p = params[name];
        if (!updatesHere(name))
          continue; // counted on its home stage
        if (p.sharding) {
          axis = p.sharding.getAs<StringAttr>("axis");
          if (auto r = p.sharding.getAs<IntegerAttr>("replicas")) {
            if (replicas && replicas != r.getInt())
              return op.emitOpError("llcdist-lower-to-plan: sharded parameters with ")
                     << replicas << " and " << r.getInt()
                     << " replicas per shard; grad_norm counts one replica count";
            replicas = r.getInt();
            replicaShards.push_back(updateGrad[name]);
          } else {
            sharded.push_back(updateGrad[name]);
          }
        } else {
          replicated.push_back(updateGrad[name]);
        }
      }
      SmallVector<NamedAttribute> args{arg("norm", gradNormBuf)};
      SmallVector<NamedAttribute> attrs{f64("max_norm", gradClip)};
      if (!replicated.empty())
        args.push_back(arg("grads", b.getArrayAttr(replicated)));
      if (!sharded.empty())
        args.push_back(arg("sharded", b.getArrayAttr(sharded)));
      if (!replicaShards.empty()) {
        args.push_back(arg("replica_shards", b.getArrayAttr(replicaShards)));
        attrs.push_back(i64("replicas", replicas));
      }
      if (!sharded.empty() || !replicaShards.empty())
        attrs.push_back(b.getNamedAttr("axis", axis));
      // Each dp rank holds other gradient blocks (ZeRO), each stage other
      // parameters (pipeline): the norm sums over those axes.
      if (pipelined || zero > 0)
        attrs.push_back(str("stage_axis", zero > 0 && pipelined ? "dp,pp"
                                          : pipelined           ? "pp"
                                                                : "dp"));
      kernel("grad_norm", args, attrs, op.getLoc());
      continue;
    }
    auto adamw = dyn_cast<AdamWOp>(op);
    auto sgd = dyn_cast<SGDOp>(op);
    if (!adamw && !sgd)
      return op.emitOpError("llcdist-lower-to-plan: unexpected op in the optimizer step");
    double wd = adamw ? adamw.getWeightDecay().convertToDouble()
                      : sgd.getWeightDecay().convertToDouble();
    optimizerAttrs =
        adamw ? b.getDictionaryAttr({str("kind", "adamw"),
                                     f64("beta1", adamw.getBeta1().convertToDouble()),
                                     f64("beta2", adamw.getBeta2().convertToDouble()),
                                     f64("eps", adamw.getEps().convertToDouble()),
                                     f64("weight_decay", wd)})
              : b.getDictionaryAttr({str("kind", "sgd"),
                                     f64("momentum", sgd.getMomentum().convertToDouble()),
                                     f64("weight_decay", wd)});
    for (const std::string &name : paramOrder) {
      ParamInfo &p = params[name];
      bool decays = p.type.getRank() >= 2 && !p.isTable;
      SmallVector<Attribute> state;
      Location loc = NameLoc::get(b.getStringAttr(name), op.getLoc());
      // What the update writes: the parameter, or under ZeRO-1/2 this dp
      // rank's shard of it, cut out now and gathered back after.
      Buf target = p.value, grad = updateGrad[name];
      bool sliceAndGather = (zero == 1 || zero == 2) && !mixed && updatesHere(name);
      if (sliceAndGather) {
        target = newBuffer(name + ".shard", "scratch", p.shardType);
        kernel("shard_slice", {arg("x", p.value), arg("y", target)}, zeroCollective(p), loc);
      }
      if (!updatesHere(name)) {
        // A replica: its home stage updates it and sends the new value.
      } else if (adamw) {
        Buf m = newBuffer(name + ".exp_avg", "optimizer_state", withF32(p.shardType));
        Buf v = newBuffer(name + ".exp_avg_sq", "optimizer_state", withF32(p.shardType));
        state = {m, v};
        kernel("adamw",
               {arg("param", target), arg("grad", grad), arg("m", m), arg("v", v)},
               {f64("beta1", adamw.getBeta1().convertToDouble()),
                f64("beta2", adamw.getBeta2().convertToDouble()),
                f64("eps", adamw.getEps().convertToDouble()),
                f64("weight_decay", decays ? wd : 0.0)},
               loc);
      } else {
        double mom = sgd.getMomentum().convertToDouble();
        SmallVector<NamedAttribute> args{arg("param", target), arg("grad", grad)};
        if (mom != 0) {
          Buf buf = newBuffer(name + ".momentum_buffer", "optimizer_state", withF32(p.shardType));
          state = {buf};
          args.push_back(arg("momentum_buf", buf));
        }
        kernel("sgd", args, {f64("momentum", mom), f64("weight_decay", decays ? wd : 0.0)},
               loc);
      }
      if (sliceAndGather)
        kernel("all_gather", {arg("x", target), arg("y", p.value)}, zeroCollective(p),
               NameLoc::get(b.getStringAttr("ZeRO: gather the updated shards"), loc))
            ->setAttr("plan.payload", b.getStringAttr("parameters"));
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(firstSubroutine);
      auto pop = plan::ParamOp::create(b, loc, b.getStringAttr(name), p.value, p.grad,
                                       b.getArrayAttr(state), initOf(name, p),
                                       b.getBoolAttr(decays));
      if (p.sharding)
        pop->setAttr("sharding", p.sharding);
      if (vocabPadded.count(name)) // dim 0 padded past the real vocabulary
        pop->setAttr("vocab_padded", b.getUnitAttr());
      if (!updatesHere(name)) // reports: updated (and counted) on its home stage
        pop->setAttr("pipeline.replica_of", b.getI64IntegerAttr(replicaOf[name]));
      if (zero > 0) {
        // The tensor's shape on this rank before ZeRO's blocks (the writer's
        // `shape` when there is no tp `sharding`).
        pop->setAttr("local_shape", b.getDenseI64ArrayAttr(p.type.getShape()));
        SmallVector<NamedAttribute> z{str("axis", "dp"), i64("stage", zero)};
        if (mixed && zero < 3) // the f32 master is this rank's block
          z.push_back(flag("value_block", true));
        // dp does not divide the rows: each block has ceil(rows / dp) rows,
        // the last ones zero padding (absent when the blocks are exact).
        if (p.shardType.getDimSize(0) * dp != p.type.getDimSize(0))
          z.push_back(i64("block_rows", p.shardType.getDimSize(0)));
        pop->setAttr("zero", b.getDictionaryAttr(z));
      }
    }
  }
  if (!optimizerAttrs)
    return fn.emitError("llcdist-lower-to-plan: the optimizer step has no "
                        "xf.adamw or xf.sgd");
  return success();
}

DictionaryAttr Lowering::manifest(func::FuncOp entry) {
  auto model = module->getAttrOfType<DictionaryAttr>(kModelAttr);
  auto get = [&](StringRef k) -> Attribute { return model ? model.get(k) : Attribute(); };
  auto ids = cast<RankedTensorType>(entry.getArgument(0).getType());
  int64_t dp = 1, tp = 1, pp = 1;
  ArrayAttr rankOrder = b.getStrArrayAttr({"tp", "dp", "pp"}); // Megatron's
  if (auto grid = module.lookupSymbol<shard::GridOp>("mesh")) {
    auto shape = grid.getShape();
    if (shape.size() == 3)
      dp = shape[0], tp = shape[1], pp = shape[2];
    if (auto order = grid->getAttrOfType<ArrayAttr>("xf.rank_order"))
      rankOrder = order;
  }
  // After llcdist-partition the ids are one dp rank's: the micro-batch.
  int64_t microBatch = module->hasAttr("xf.partition") ? ids.getDimSize(0)
                                                        : ids.getDimSize(0) / dp;
  SmallVector<NamedAttribute> modelAttrs{
      b.getNamedAttr("name", get("name") ? get("name") : b.getStringAttr("model")),
      b.getNamedAttr("architecture", get("architecture") ? get("architecture") : b.getStringAttr("")),
      b.getNamedAttr("vocab_size", get("vocab_size") ? get("vocab_size") : b.getI64IntegerAttr(0)),
      str("dtype", mixed ? "bf16" : "f32"),
  };
  // Vocabulary padding (llcdist-pad-vocab): the real vocabulary is the
  // loss's, the padded one the tables' rows.
  if (auto pad = module->getAttrOfType<DictionaryAttr>("xf.vocab_padding")) {
    modelAttrs[2] = b.getNamedAttr("vocab_size", pad.get("vocab_size"));
    modelAttrs.push_back(b.getNamedAttr("padded_vocab_size", pad.get("padded_vocab_size")));
  }
  SmallVector<NamedAttribute> m{
      b.getNamedAttr("model", b.getDictionaryAttr(modelAttrs)),
      b.getNamedAttr("batch",
                     b.getDictionaryAttr({
                         i64("seq_len", ids.getDimSize(1)),
                         i64("micro_batch", microBatch),
                         i64("microbatches", microbatches),
                         i64("dp", dp),
                         i64("global_batch", microBatch * microbatches * dp),
                     })),
      b.getNamedAttr("mesh", b.getDictionaryAttr({i64("dp", dp), i64("tp", tp), i64("pp", pp),
                                                  b.getNamedAttr("rank_order", rankOrder)})),
      b.getNamedAttr("optimizer", optimizerAttrs),
      f64("grad_clip", gradClip),
  };
  if (auto lr = module->getAttrOfType<DictionaryAttr>("xf.lr_schedule"))
    m.push_back(b.getNamedAttr("lr_schedule", lr));
  return b.getDictionaryAttr(m);
}

LogicalResult Lowering::prepare(func::FuncOp &entry, func::FuncOp &opt) {
  entry = getEntryFunction(module);
  if (!entry)
    return failure();
  if (!entry->hasAttr("xf.train_step"))
    return entry.emitError("llcdist-lower-to-plan: run llcdist-autodiff first "
                           "(@") << entry.getSymName() << " is not a training step)";
  for (auto fn : module.getOps<func::FuncOp>())
    if (fn->hasAttr("xf.optimizer"))
      opt = fn;
  if (!opt)
    return module.emitError("llcdist-lower-to-plan: run llcdist-add-optimizer "
                            "first (no function is marked xf.optimizer)");
  if (auto pad = module->getAttrOfType<DictionaryAttr>("xf.vocab_padding"))
    if (auto names = pad.getAs<ArrayAttr>("params"))
      for (Attribute n : names)
        vocabPadded.insert(cast<StringAttr>(n).str());
  // The runtime stores f32 or bf16 (and computes in f32). bf16 values make
  // a mixed-precision plan: bf16 parameters (a working copy), gradients and
  // activations; f32 master weights, optimizer state and statistics.
  WalkResult dtypes = module.walk([&](Operation *op) -> WalkResult {
    for (Type t : op->getResultTypes())
      if (auto rt = dyn_cast<RankedTensorType>(t)) {
        Type e = rt.getElementType();
        mixed |= e.isBF16();
        if (!e.isF32() && !e.isBF16() && !e.isInteger(32)) {
          op->emitError("llcdist-lower-to-plan: element type ")
              << e << " cannot be executed: the runtime stores f32 or bf16 "
                      "(compile with --dtype f32 or bf16)";
          return WalkResult::interrupt();
        }
      }
    return WalkResult::advance();
  });
  if (dtypes.wasInterrupted())
    return failure();

  if (auto model = module->getAttrOfType<DictionaryAttr>(kModelAttr)) {
    if (auto n = model.getAs<IntegerAttr>("microbatches"))
      microbatches = std::max<int64_t>(1, n.getInt());
    if (auto a = model.getAs<StringAttr>("architecture"))
      arch = a.str();
    if (auto n = model.getAs<IntegerAttr>("num_layers"))
      numLayers = n.getInt();
  }
  return success();
}

void Lowering::beginProgram(StringRef name) {
  b.setInsertionPointToEnd(module.getBody());
  program = plan::ProgramOp::create(b, module.getLoc(), name, IntegerAttr());
  bufferOps.clear();
  b.setInsertionPointToStart(&program.getBody().emplaceBlock());
  stepBegin = plan::SubroutineOp::create(b, module.getLoc(), "step_begin");
  optimizer = plan::SubroutineOp::create(b, module.getLoc(), "optimizer");
  for (auto sub : {stepBegin, optimizer})
    sub.getBody().emplaceBlock();
  firstSubroutine = stepBegin;
}

plan::SubroutineOp Lowering::addSubroutine(StringRef name) {
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPoint(optimizer);
  auto sub = plan::SubroutineOp::create(b, module.getLoc(), name);
  sub.getBody().emplaceBlock();
  return sub;
}

void Lowering::zeroGradients(Location loc) {
  current = stepBegin;
  if (mixed)
    for (const std::string &name : paramOrder) {
      ParamInfo &p = params[name];
      Location castLoc = NameLoc::get(
          b.getStringAttr("mixed precision: the step's bf16 copy of the f32 master"),
          NameLoc::get(b.getStringAttr(name), loc));
      if (zero == 1 || zero == 2) {
        // The master is this rank's block: round it, then gather the blocks.
        Buf block = newBuffer(name + ".bf16_block", "scratch", p.shardType);
        kernel("cast", {arg("x", p.value), arg("y", block)},
               {i64("n", p.shardType.getNumElements())}, castLoc);
        kernel("all_gather", {arg("x", block), arg("y", p.working)}, zeroCollective(p),
               NameLoc::get(b.getStringAttr("ZeRO: gather the updated parameter blocks"),
                            castLoc))
            ->setAttr("plan.payload", b.getStringAttr("parameters"));
        continue;
      }
      int64_t n = bufferOps.lookup(p.working).getTensorType().getNumElements();
      kernel("cast", {arg("x", p.value), arg("y", p.working)}, {i64("n", n)}, castLoc);
    }
  SmallVector<Attribute> zeroed;
  for (const std::string &name : paramOrder)
    zeroed.push_back(params[name].grad);
  if (lossBuf)
    zeroed.push_back(lossBuf);
  kernel("zero", {arg("x", b.getArrayAttr(zeroed))}, {}, loc);
}

void Lowering::action(plan::SubroutineOp sub, std::optional<int64_t> mb,
                      ArrayRef<NamedAttribute> attrs) {
  auto a = plan::ActionOp::create(b, module.getLoc(),
                                  FlatSymbolRefAttr::get(sub.getSymNameAttr()),
                                  mb ? b.getI64IntegerAttr(*mb) : IntegerAttr());
  for (NamedAttribute attr : attrs)
    a->setAttr(attr.getName(), attr.getValue());
}

LogicalResult Lowering::zeroCheck() {
  if (zero == 0)
    return success();
  if (zero < 0 || zero > 3)
    return module.emitError("llcdist-lower-to-plan: --zero ") << zero << " is not 0, 1, 2 or 3";
  if (auto grid = module.lookupSymbol<shard::GridOp>("mesh"))
    dp = grid.getShape()[0];
  if (dp < 2)
    return module.emitError("llcdist-lower-to-plan: --zero ")
           << zero << " shards over dp, but the mesh has dp=1 (use --mesh dp=N with N > 1)";
  // A parameter whose rows dp does not divide is padded (param()), so
  // every shape is accepted.
  return success();
}

LogicalResult Lowering::run() {
  func::FuncOp entry, opt;
  if (failed(prepare(entry, opt)) || failed(zeroCheck()))
    return failure();
  beginProgram("stage0");
  forward = addSubroutine("forward");
  backward = addSubroutine("backward");

  // Inputs and metrics.
  Scope top;
  Buf ids = newBuffer("input_ids", "input", entry.getArgument(0).getType());
  Buf targets = newBuffer("labels", "input", entry.getArgument(1).getType());
  lossBuf = newBuffer("loss", "metric", f32({1}));
  gradNormBuf = newBuffer("grad_norm", "metric", f32({1}));
  top.bufs[entry.getArgument(0)] = {ids};
  top.bufs[entry.getArgument(1)] = {targets};
  auto ids_t = cast<RankedTensorType>(entry.getArgument(0).getType());
  current = forward;
  kernel("load_microbatch", {arg("ids", ids), arg("targets", targets)},
         {i64("B", ids_t.getDimSize(0)), i64("S", ids_t.getDimSize(1))},
         entry.getLoc());
  int64_t firstBackward = backwardStart(entry.getBody().front());
  for (auto [i, op] : llvm::enumerate(entry.getBody().front().without_terminator())) {
    if (int64_t(i) == firstBackward)
      current = backward;
    if (failed(lowerOp(&op, top)))
      return failure();
  }
  if (failed(lowerOptimizer(opt)))
    return failure();
  zeroGradients(entry.getLoc());

  // The schedule of one step.
  b.setInsertionPointToEnd(&program.getBody().front());
  auto sched = plan::ScheduleOp::create(b, module.getLoc());
  b.setInsertionPointToStart(&sched.getBody().emplaceBlock());
  action(stepBegin, std::nullopt);
  for (int64_t j = 0; j < microbatches; ++j) {
    action(forward, j);
    action(backward, j);
  }
  action(optimizer, std::nullopt);
  module->setAttr(plan::kManifestAttr, manifest(entry));
  return success();
}

// A pipeline stage (llcdist-pipeline-split marked every top-level op of the
// step with its chunk). Chunk k runs on stage k mod pp. For each chunk of
// this stage and each microbatch slot (the schedule's peak number of
// microbatches in flight for that chunk), the chunk's forward ops, backward
// ops and, for a split backward, weight-gradient ops are lowered into
// subroutines forward_v<k>_s<slot>, backward_v<k>_s<slot> and
// backward_weight_v<k>_s<slot>, each slot with its own activation buffers.
// A value that an op reads from another chunk arrives by `recv` at its first
// use; the chunk that computes it `send`s it at the end of its subroutine.
// Parameters read by chunks of several stages (tied embeddings) live on each;
// the first stage is their home: the others send it their gradient, it
// updates the parameter and sends the new value back.
LogicalResult Lowering::runStage(const Pipeline &pipe, int64_t stage) {
  namespace sch = llcdist::schedule;
  pipelined = true;
  func::FuncOp entry, opt;
  if (failed(prepare(entry, opt)))
    return failure();
  if (failed(zeroCheck()))
    return failure();
  const int64_t p = pipe.stages, chunks = pipe.chunks();
  sch::ScheduleOptions so;
  so.stages = p;
  so.microbatches = pipe.microbatches;
  so.virtualStages = pipe.virtualStages;
  so.kind = pipe.kind;
  auto schedule = sch::generateSchedule(so);
  if (!schedule)
    return module.emitError("llcdist-lower-to-plan: ") << schedule.error().message;
  const std::vector<sch::Action> &actions = schedule->perStage[stage];
  const bool split = schedule->splitBackward;

  // The top-level ops; where the backward starts; which values cross chunks.
  Block &body = entry.getBody().front();
  SmallVector<Operation *> ops;
  for (Operation &op : body.without_terminator())
    ops.push_back(&op);
  int64_t firstBackward = backwardStart(body);
  if (firstBackward < 0)
    return entry.emitError("llcdist-lower-to-plan: the training step has no loss gradient");
  // Crossing values: defined by a marked op of one chunk, read by another.
  // Each gets a tag (its index in this deterministic walk) shared by the
  // sending and the receiving stage.
  llvm::DenseMap<Value, int64_t> tagOf;
  llvm::DenseMap<Value, SmallVector<int64_t, 1>> readersOf; // chunks
  std::map<std::string, std::set<int64_t>> stagesOfParam;
  for (Operation *op : ops) {
    int64_t c = chunkOf(op);
    if (c < 0)
      continue;
    for (Value v : op->getOperands()) {
      Operation *d = v.getDefiningOp();
      if (auto prm = dyn_cast_or_null<ParamOp>(d)) {
        stagesOfParam[prm.getName().str()].insert(c % p);
        continue;
      }
      if (!d || chunkOf(d) == c)
        continue;
      if (chunkOf(d) < 0)
        return op->emitOpError("llcdist-lower-to-plan: operand of an op in chunk ")
               << c << " comes from an op llcdist-pipeline-split did not mark";
      if (chunkOf(d) % p == c % p)
        return op->emitOpError("llcdist-lower-to-plan: chunk ")
               << c << " reads a value of chunk " << chunkOf(d)
               << " on the same stage; only values between stages can travel";
      if (!tagOf.count(v))
        tagOf[v] = tagOf.size();
      if (!llvm::is_contained(readersOf[v], c))
        readersOf[v].push_back(c);
    }
  }
  const int64_t paramTagBase = int64_t(tagOf.size());
  std::map<std::string, int64_t> paramTag, homeOf;
  for (auto &[name, stages] : stagesOfParam)
    if (stages.size() > 1) {
      paramTag[name] = paramTagBase + int64_t(paramTag.size());
      homeOf[name] = *stages.begin();
      if (stages.count(stage) && *stages.begin() != stage)
        replicaOf[name] = *stages.begin();
    }

  beginProgram(("stage" + std::to_string(stage)).c_str());
  if (stage == (chunks - 1) % p)
    lossBuf = newBuffer("loss", "metric", f32({1}));
  gradNormBuf = newBuffer("grad_norm", "metric", f32({1}));

  // Microbatch slots per local chunk: a slot is taken by F and freed by the
  // last action that reads the chunk's activations (B, or W when split).
  // A freed slot is reused only with one chunk per stage and an unsplit
  // backward (GPipe, 1F1B), where every microbatch in flight holds its whole
  // footprint until B. Otherwise what is held changes over a microbatch's
  // life (B frees part, W the rest) or chunks take turns, and a reused slot
  // pins bytes the other slots need in turn: any two slots then collide at
  // some moment and no arena layout gets near the live peak (llama3-8b
  // tp=8 pp=4: interleaved 1.38×, ZB-H1 1.14×). One slot per microbatch
  // keeps each buffer's life one interval, which llcdist-plan-memory packs
  // to within a few percent of the live peak (docs/memory.md).
  int64_t localChunks = pipe.virtualStages;
  const bool reuseSlots = localChunks == 1 && !split;
  std::vector<int64_t> slotsOf(localChunks, 0);
  std::vector<std::vector<int64_t>> freeSlots(localChunks);
  std::map<std::pair<int64_t, int64_t>, int64_t> slotOf; // (mb, chunk) -> slot
  std::vector<int64_t> slotOfAction;
  for (const sch::Action &a : actions) {
    std::pair<int64_t, int64_t> key{a.microbatch, a.chunk};
    if (a.kind == sch::ActionKind::F) {
      auto &fs = freeSlots[a.chunk];
      int64_t slot;
      if (fs.empty() || !reuseSlots) {
        slot = slotsOf[a.chunk]++;
      } else {
        auto it = std::min_element(fs.begin(), fs.end());
        slot = *it;
        fs.erase(it);
      }
      slotOf[key] = slot;
    }
    slotOfAction.push_back(slotOf.at(key));
    bool last = split ? a.kind == sch::ActionKind::W : a.kind == sch::ActionKind::B;
    if (last)
      freeSlots[a.chunk].push_back(slotOf.at(key));
  }

  // Split backward: a local chunk whose every W directly follows its B on
  // this stage (ZB-H1's first stage), and whose backward sends nothing
  // (which a W run inside B would delay), runs B and W as one backward.
  std::vector<bool> fusedBackward(localChunks, false);
  if (split)
    for (int64_t lc = 0; lc < localChunks; ++lc) {
      int64_t vs = lc * p + stage;
      bool adjacent = true;
      for (size_t i = 0; i < actions.size(); ++i)
        if (actions[i].kind == sch::ActionKind::B && actions[i].chunk == lc)
          adjacent &= i + 1 < actions.size() && actions[i + 1].kind == sch::ActionKind::W &&
                      actions[i + 1].microbatch == actions[i].microbatch &&
                      actions[i + 1].chunk == lc;
      bool sends = llvm::any_of(llvm::drop_begin(ops, firstBackward), [&](Operation *op) {
        return chunkOf(op) == vs &&
               llvm::any_of(op->getResults(), [&](Value v) { return tagOf.count(v) > 0; });
      });
      fusedBackward[lc] = adjacent && !sends;
    }

  // Lower each (chunk, slot).
  struct Subs {
    plan::SubroutineOp f, b, w;
  };
  std::map<std::pair<int64_t, int64_t>, Subs> subs; // (local chunk, slot)
  auto ids_t = cast<RankedTensorType>(entry.getArgument(0).getType());
  for (int64_t lc = 0; lc < localChunks; ++lc) {
    int64_t vs = lc * p + stage;
    std::string tagName = "v" + std::to_string(vs);
    // Whether this chunk reads the ids or the labels (then every slot loads
    // its microbatch).
    bool readsInputs = llvm::any_of(ops, [&](Operation *op) {
      return chunkOf(op) == vs &&
             llvm::any_of(op->getOperands(), [](Value v) { return isa<BlockArgument>(v); });
    });
    for (int64_t slot = 0; slot < slotsOf[lc]; ++slot) {
      std::string suffix = "_" + tagName + "_s" + std::to_string(slot);
      Subs &sb = subs[{lc, slot}];
      sb.f = addSubroutine("forward" + suffix);
      sb.b = addSubroutine("backward" + suffix);
      if (split)
        sb.w = addSubroutine("backward_weight" + suffix);
      Scope sc;
      sc.prefix = tagName + "s" + std::to_string(slot) + "/";
      llvm::DenseSet<Value> sent; // a split backward lowers its layer calls twice
      current = sb.f;
      if (readsInputs) {
        Buf ids = newBuffer(sc.prefix + "input_ids", "input", entry.getArgument(0).getType());
        Buf targets = newBuffer(sc.prefix + "labels", "input", entry.getArgument(1).getType());
        sc.bufs[entry.getArgument(0)] = {ids};
        sc.bufs[entry.getArgument(1)] = {targets};
        kernel("load_microbatch", {arg("ids", ids), arg("targets", targets)},
               {i64("B", ids_t.getDimSize(0)), i64("S", ids_t.getDimSize(1))},
               entry.getLoc());
      }
      // Lowers this chunk's ops of [begin, end) that `keep` accepts, with a
      // recv before the first use of a value from another chunk and a send
      // after the last op for each value another chunk reads.
      auto lowerRange = [&](int64_t begin, int64_t end,
                            std::function<bool(Operation *)> keep) -> LogicalResult {
        StringRef payload = begin < firstBackward ? "activations" : "activation gradients";
        SmallVector<Value> produced;
        for (int64_t i = begin; i < end; ++i) {
          Operation *op = ops[i];
          if (chunkOf(op) != vs || (keep && !isa<LayerOp>(op) && !keep(op)))
            continue;
          for (Value v : op->getOperands()) {
            if (sc.bufs.count(v))
              continue;
            Operation *d = v.getDefiningOp();
            if (auto prm = dyn_cast_or_null<ParamOp>(d)) {
              if (failed(lowerOp(prm, sc)))
                return failure();
              continue;
            }
            auto tag = tagOf.find(v);
            if (tag == tagOf.end())
              continue; // defined in this chunk by an op another pass lowers
            Buf buf = newBuffer(sc.prefix + "recv:" + std::to_string(tag->second),
                                "activation", v.getType());
            sc.bufs[v] = {buf};
            transfer("recv", buf, chunkOf(d) % p, tag->second,
                     NameLoc::get(b.getStringAttr("pipeline: from chunk " +
                                                  std::to_string(chunkOf(d))),
                                  provenance(op, sc)),
                     payload);
          }
          keepOp = keep;
          LogicalResult r = lowerOp(op, sc);
          keepOp = nullptr;
          if (failed(r))
            return failure();
          for (Value v : op->getResults())
            if (tagOf.count(v) && sent.insert(v).second)
              produced.push_back(v);
        }
        for (Value v : produced)
          for (int64_t reader : readersOf[v])
            transfer("send", use(sc, v), reader % p, tagOf[v],
                     NameLoc::get(b.getStringAttr("pipeline: to chunk " +
                                                  std::to_string(reader)),
                                  v.getLoc()),
                     payload);
        return success();
      };
      if (failed(lowerRange(0, firstBackward, nullptr)))
        return failure();
      current = sb.b;
      // A split backward: B computes the input gradients and the cheap
      // weight gradients; W the weight-gradient GEMMs. Where every W of the
      // chunk directly follows its B, nothing can use the gap between them,
      // so B runs the whole backward in its own order (each activation and
      // gradient freed as in 1F1B) and W is empty.
      bool deferW = split && !fusedBackward[lc];
      std::function<bool(Operation *)> inputGrads, weightGrads;
      if (deferW) {
        inputGrads = [this](Operation *op) {
          return !deferredToW(op) && !gathersOnlyForW(op);
        };
        weightGrads = [this](Operation *op) { return deferredToW(op); };
      }
      if (failed(lowerRange(firstBackward, ops.size(), inputGrads)))
        return failure();
      if (deferW) {
        current = sb.w;
        weightPass = true;
        LogicalResult r = lowerRange(firstBackward, ops.size(), weightGrads);
        weightPass = false;
        if (failed(r))
          return failure();
      }
    }
  }

  // The optimizer: replicas send their gradient home, the home stage adds
  // them (in stage order), everyone reduces over dp, takes the global norm
  // (over pp too) and updates what it owns; the home sends the new values.
  // `exchange(true)`: the gradients, before the update; `exchange(false)`:
  // the updated values, after it.
  auto exchange = [&](bool gradients) {
    current = optimizer;
    for (auto &[name, home] : homeOf) {
      if (!params.count(name))
        continue;
      ParamInfo &pi = params[name];
      Location loc = NameLoc::get(
          b.getStringAttr(gradients ? "pipeline: tied parameter gradient"
                                    : "pipeline: tied parameter value"),
          NameLoc::get(b.getStringAttr(name), module.getLoc()));
      int64_t tag = paramTag[name];
      if (home != stage) {
        transfer(gradients ? "send" : "recv", gradients ? pi.grad : pi.value, home, tag, loc,
                 "tied parameter");
        continue;
      }
      for (int64_t other : stagesOfParam[name]) {
        if (other == stage)
          continue;
        if (!gradients) {
          transfer("send", pi.value, other, tag, loc, "tied parameter");
          continue;
        }
        // The gradient as this stage holds it (under ZeRO-2/3 the dp block).
        RankedTensorType gt = zero >= 2 ? pi.shardType : pi.type;
        Buf part = newBuffer(name + ".grad@stage" + std::to_string(other), "scratch", gt);
        transfer("recv", part, other, tag, loc, "tied parameter");
        kernel("accumulate", {arg("x", part), arg("y", pi.grad)}, {i64("n", gt.getNumElements())},
               loc);
      }
    }
  };
  exchange(/*gradients=*/true);
  if (failed(lowerOptimizer(opt)))
    return failure();
  exchange(/*gradients=*/false);
  zeroGradients(entry.getLoc());

  // The schedule: this stage's actions, each with its (chunk, slot).
  b.setInsertionPointToEnd(&program.getBody().front());
  auto sched = plan::ScheduleOp::create(b, module.getLoc());
  b.setInsertionPointToStart(&sched.getBody().emplaceBlock());
  action(stepBegin, std::nullopt);
  for (auto [a, slot] : llvm::zip(actions, slotOfAction)) {
    Subs &sb = subs[{a.chunk, slot}];
    plan::SubroutineOp sub = a.kind == sch::ActionKind::F   ? sb.f
                             : a.kind == sch::ActionKind::B ? sb.b
                                                            : sb.w;
    action(sub, a.microbatch,
           {str("pipeline.kind", std::string(1, sch::kindLetter(a.kind))),
            i64("pipeline.chunk", a.chunk)});
  }
  action(optimizer, std::nullopt);
  if (stage == 0)
    module->setAttr(plan::kManifestAttr, manifest(entry));
  return success();
}

struct LowerToPlanPass : public llcdist::impl::LowerToPlanBase<LowerToPlanPass> {
  using LowerToPlanBase::LowerToPlanBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto info = module->getAttrOfType<DictionaryAttr>("xf.pipeline");
    if (!info) {
      if (failed(Lowering(module, zero, reshardAfterForward).run()))
        return signalPassFailure();
    } else {
      Pipeline pipe;
      pipe.stages = info.getAs<IntegerAttr>("stages").getInt();
      pipe.virtualStages = info.getAs<IntegerAttr>("virtual_stages").getInt();
      pipe.microbatches = info.getAs<IntegerAttr>("microbatches").getInt();
      auto kind = llcdist::schedule::parseScheduleKind(
          info.getAs<StringAttr>("schedule").getValue().str());
      if (!kind) {
        module.emitError("llcdist-lower-to-plan: xf.pipeline: ") << kind.error().message;
        return signalPassFailure();
      }
      pipe.kind = *kind;
      for (int64_t s = 0; s < pipe.stages; ++s)
        if (failed(Lowering(module, zero, reshardAfterForward).runStage(pipe, s)))
          return signalPassFailure();
      module->setAttr("plan.pipeline", info);
      module->removeAttr("xf.pipeline");
    }
    // The xf functions are now the plan.
    for (auto fn : llvm::make_early_inc_range(module.getOps<func::FuncOp>()))
      fn.erase();
  }
};
} // namespace
