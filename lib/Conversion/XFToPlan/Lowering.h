//===- Lowering.h - the units of llcdist-lower-to-plan ----------*- C++ -*-===//
//
// llcdist-lower-to-plan (XFToPlan.cpp) is a driver over these units, one
// concern per file, joined by this header (as Triton's pipeliner joins its
// phases by a schedule header):
//
//   ProgramBuilder.cpp  a plan.program's buffers, subroutines, kernels, actions
//   Buffers.cpp         parameter buffers: values, f32 masters and bf16
//                       working copies, gradients; step_begin
//   LowerOps.cpp        xf ops to plan.kernel calls on a value→buffer map:
//                       scopes, layer calls, the split backward, helpers
//   OpLowerings.cpp     each xf op's rule (PlanLoweringOpInterface models;
//                       LoweringModels.h), the mixture of experts' in
//                       MoeLowerings.cpp
//   Optimizer.cpp       the optimizer step: gradient reductions, norm, updates
//   Manifest.cpp        plan.param entries (with the init policy of
//                       llcdist/Frontend/InitPolicy.h) and plan.manifest
//   WholeStep.cpp       the whole step as one program (no pipeline)
//   Stages.cpp          one program per pipeline stage, as the stage plan
//                       (llcdist/Conversion/XFToPlan/StagePlan.h) says
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_LIB_CONVERSION_XFTOPLAN_LOWERING_H
#define LLCDIST_LIB_CONVERSION_XFTOPLAN_LOWERING_H

#include "llcdist/Conversion/XFToPlan/PlanLoweringInterface.h"
#include "llcdist/Conversion/XFToPlan/StagePlan.h"
#include "llcdist/Dialect/Plan/Analysis/CollectiveOrigin.h"
#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/Dialect/XF/IR/XFOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace llcdist::xftoplan {

using Buf = mlir::FlatSymbolRefAttr;

inline int64_t numel(mlir::Value v) { return mlir::cast<mlir::RankedTensorType>(v.getType()).getNumElements(); }
inline int64_t lastDim(mlir::Value v) { return mlir::cast<mlir::RankedTensorType>(v.getType()).getShape().back(); }
inline int64_t dim(mlir::Value v, unsigned i) { return mlir::cast<mlir::RankedTensorType>(v.getType()).getDimSize(i); }

//===----------------------------------------------------------------------===//
// The step being lowered (XFToPlan.cpp)
//===----------------------------------------------------------------------===//

/// What the driver learns about the module before lowering it; the same for
/// every program (stage) it lowers.
struct StepInfo {
  mlir::func::FuncOp entry, optimizerFn;
  /// Mixed precision: bf16 values in the IR (see ParamBuffers::param).
  bool mixed = false;
  int64_t microbatches = 1, numLayers = 0;
  std::string arch;
  /// Parameters whose dimension 0 llcdist-pad-vocab padded past the real
  /// vocabulary (the manifest's `vocab_padded`).
  std::set<std::string> vocabPadded;
  /// The tables looked up with a padding_idx (xf.embedding's: torch's
  /// nn.Embedding(padding_idx)) and that row, which starts at zero (the
  /// manifest's init.zero_row).
  std::map<std::string, int64_t> paddingRows;
  /// Record where each scope begins to read each parameter
  /// (plan::kParamScopesAttr), for llcdist-plan-zero's ZeRO-3.
  bool recordParamScopes = false;
};

/// The checks every lowering starts with (a training step, an optimizer,
/// storable element types), and
/// what they find; failure with an error emitted.
mlir::FailureOr<StepInfo> analyzeStep(mlir::ModuleOp module, bool recordParamScopes);

//===----------------------------------------------------------------------===//
// ProgramBuilder (ProgramBuilder.cpp)
//===----------------------------------------------------------------------===//

/// Builds one plan.program: buffers (declared before the first subroutine),
/// subroutines, kernels (appended to `current`) and the schedule's actions.
class ProgramBuilder {
public:
  explicit ProgramBuilder(mlir::ModuleOp module) : module(module), ctx(module.getContext()), b(ctx) {}

  /// A new program @name with its step_begin and optimizer subroutines.
  void beginProgram(mlir::StringRef name);
  /// A subroutine placed before the optimizer.
  plan::SubroutineOp addSubroutine(mlir::StringRef name);
  /// A buffer; a repeated name (a split's results) gets #1, #2, ...
  /// An activation, scratch or input buffer gets `slots` instances when
  /// that is more than one (plan::kSlotsAttr).
  Buf newBuffer(std::string name, mlir::StringRef kind, mlir::Type type);
  /// The instances of each activation, scratch and input buffer newBuffer
  /// makes: a pipeline chunk's microbatch slots while its subroutines are
  /// lowered, else 1.
  int64_t slots = 1;
  plan::BufferOp bufferOp(Buf buf) const { return bufferOps.lookup(buf); }
  /// record-param-scopes: a scope begins to read a parameter here, recorded
  /// on the next kernel (plan::kParamScopesAttr).
  void recordParamScope(mlir::Attribute read) { pendingScopes.push_back(read); }
  /// Which line of the memory report a buffer counts in, when not its kind.
  void setMemoryClass(Buf buf, mlir::StringRef cls);
  plan::KernelOp kernel(mlir::StringRef name, mlir::ArrayRef<mlir::NamedAttribute> args,
                        mlir::ArrayRef<mlir::NamedAttribute> attrs, mlir::Location loc);
  /// A pipeline `send` of `buf` to stage `peer`, or a `recv` into it; what
  /// travels (`payload`) and why (`origin`) are for the communication
  /// report, as on collectives.
  void transfer(mlir::StringRef op, Buf buf, int64_t peer, int64_t tag, mlir::Location loc, mlir::StringRef payload,
                xf::CollectiveOrigin origin);
  /// A schedule action at the builder's insertion point.
  void action(plan::SubroutineOp sub, std::optional<int64_t> mb, mlir::ArrayRef<mlir::NamedAttribute> attrs = {});
  /// The program's schedule region, ready for action().
  void beginSchedule();

  mlir::NamedAttribute arg(mlir::StringRef role, mlir::Attribute buf) { return b.getNamedAttr(role, buf); }
  mlir::NamedAttribute i64(mlir::StringRef n, int64_t v) { return b.getNamedAttr(n, b.getI64IntegerAttr(v)); }
  mlir::NamedAttribute f64(mlir::StringRef n, double v) { return b.getNamedAttr(n, b.getF64FloatAttr(v)); }
  mlir::NamedAttribute flag(mlir::StringRef n, bool v) { return b.getNamedAttr(n, b.getBoolAttr(v)); }
  mlir::NamedAttribute str(mlir::StringRef n, mlir::StringRef v) { return b.getNamedAttr(n, b.getStringAttr(v)); }
  mlir::RankedTensorType f32(mlir::ArrayRef<int64_t> dims) { return mlir::RankedTensorType::get(dims, b.getF32Type()); }
  /// The f64 buffers of partial reductions a kernel hands to a collective.
  mlir::RankedTensorType f64Type(mlir::ArrayRef<int64_t> dims) {
    return mlir::RankedTensorType::get(dims, b.getF64Type());
  }
  static mlir::RankedTensorType withF32(mlir::RankedTensorType t) {
    return mlir::RankedTensorType::get(t.getShape(), mlir::Float32Type::get(t.getContext()));
  }

  mlir::ModuleOp module;
  mlir::MLIRContext *ctx;
  mlir::OpBuilder b;
  plan::ProgramOp program;
  plan::SubroutineOp firstSubroutine, stepBegin, optimizer, current;

private:
  int64_t nextBuffer = 0;
  llvm::StringMap<unsigned> bufferNames;
  /// This program's buffers by symbol (program.lookupSymbol walks them all).
  llvm::DenseMap<mlir::Attribute, plan::BufferOp> bufferOps;
  llvm::SmallVector<mlir::Attribute> pendingScopes;
};

//===----------------------------------------------------------------------===//
// Parameter buffers (Buffers.cpp)
//===----------------------------------------------------------------------===//

struct ParamInfo {
  mlir::RankedTensorType type;   ///< the local (this rank's) type
  mlir::DictionaryAttr sharding; ///< xf.sharding of a split parameter, or null
  Buf value, grad;
  /// What the ops read: `value`, or under mixed precision its bf16 copy.
  Buf working;
  bool isTable = false;      // read by an embedding: no weight decay
  bool isNormWeight = false; // initialized to ones
  bool isNormOrBias = false; // rank-1
};

/// Every parameter's buffers in one program, created at its first read.
class ParamBuffers {
public:
  ParamBuffers(ProgramBuilder &pb, const StepInfo &step) : pb(pb), step(step) {}

  /// The buffers of parameter `name` of local type `type`, created on first
  /// call: the value (or the f32 master and its bf16 working copy) and the
  /// gradient.
  ParamInfo &param(const std::string &name, mlir::RankedTensorType type);
  ParamInfo &operator[](llvm::StringRef name) { return params[name]; }
  llvm::StringMap<ParamInfo>::iterator find(llvm::StringRef name) { return params.find(name); }
  llvm::StringMap<ParamInfo>::iterator end() { return params.end(); }
  bool contains(llvm::StringRef name) const { return params.count(name); }
  /// The parameters in the order the program first reads them.
  const std::vector<std::string> &order() const { return paramOrder; }

  /// step_begin: under mixed precision the step's bf16 copy of every master
  /// ; then zero every gradient
  /// and `loss` (when this program has it).
  void emitStepBegin(mlir::Location loc, Buf loss);

private:
  ProgramBuilder &pb;
  const StepInfo &step;
  llvm::StringMap<ParamInfo> params;
  std::vector<std::string> paramOrder;
};

//===----------------------------------------------------------------------===//
// Op lowering (LowerOps.cpp)
//===----------------------------------------------------------------------===//

/// What an activation a collective or a pipeline transfer moves carries: a
/// layer call's first result is the residual stream (or, backward, its
/// gradient); its others are the MoE load-balancing loss's statistics the
/// layers pass on (or their gradient).
llvm::StringRef activationPayload(mlir::Value v, bool forward);

/// Values' buffers within one instantiation of a function body.
struct Scope {
  llvm::DenseMap<mlir::Value, llvm::SmallVector<Buf, 2>> bufs;
  int64_t layer = -1;
  /// Prepended to activation buffer names: a pipeline stage lowers each
  /// chunk once, its buffers with one instance per slot ("v1/").
  std::string prefix;
  /// The scopes of the layer calls lowered in this scope: a zero-bubble
  /// backward lowers a backward layer body twice (input gradients, then
  /// weight gradients) into one scope.
  std::map<mlir::Operation *, std::unique_ptr<Scope>> inner;
  /// The weight-gradient part of a split backward: the all-gathered values
  /// it has gathered again from their slices (regatherForWeights).
  llvm::DenseSet<mlir::Value> regathered;
};

/// Which ops of a backward one lowering of it emits. A split backward
/// (ZB-H1) lowers the backward twice: B, then W.
enum class BackwardPart : int {
  /// Every op (the forward; an unsplit or fused backward).
  Whole,
  /// B: the input gradients and the cheap weight gradients (norms, biases,
  /// embeddings), without the all-gathers only W reads.
  InputGradients,
  /// W: the weight-gradient GEMMs and what reads them; each all-gathered
  /// operand is gathered again from its slice before its first use.
  WeightGradients,
};

/// True when `v`'s defining op computes parameter gradients (dW, db, a
/// norm's or an embedding's weight gradient: PlanLoweringOpInterface's
/// writesParameterGradients) and every result of it is only added into a
/// parameter's gradient: its kernel then writes the gradients directly.
bool isFused(mlir::Value v);

/// Lowers xf ops to plan.kernel calls into the builder's current subroutine,
/// each value into its own buffer (or, for a gradient only accumulated into
/// a parameter's, straight into that gradient buffer).
class OpLowering {
public:
  OpLowering(ProgramBuilder &pb, ParamBuffers &params, const StepInfo &step)
      : pb(pb), b(pb.b), params(params), step(step), symbols(pb.module) {}

  /// Lowers `op` (a layer call: its body, instantiated) in scope `s`.
  mlir::LogicalResult lowerOp(mlir::Operation *op, Scope &s, BackwardPart part = BackwardPart::Whole);
  /// Whether `part` emits `op` (Whole: every op).
  bool inPart(mlir::Operation *op, BackwardPart part);
  /// The buffer of `v` in `s`, which must have been lowered.
  Buf use(Scope &s, mlir::Value v);
  /// The location of `op`'s kernels: its NameLoc with `{i}` bound.
  mlir::Location provenance(mlir::Operation *op, Scope &s);

  /// The loss (the last stage's, or the only program's; null elsewhere).
  Buf lossBuf;

  /// The rule of op kind `OpTy` (PlanLoweringOpInterface's model calls it):
  /// one specialization per xf op in OpLowerings.cpp, with `loc` the
  /// provenance of its kernels.
  template <typename OpTy>
  mlir::LogicalResult lower(mlir::Operation *op, Scope &s, BackwardPart part, mlir::Location loc);

private:
  /// Set by gradTarget on an xf.accumulate_grad naming no parameter
  /// (hand-written IR; reported there), failing the op's lowering.
  bool badGradTarget = false;
  mlir::LogicalResult lowerOpImpl(mlir::Operation *op, Scope &s, BackwardPart part);
  mlir::LogicalResult lowerLayer(xf::LayerOp call, Scope &s, BackwardPart part);
  /// Whether `op` belongs to W: a weight-gradient GEMM (linear_grad_weight),
  /// or an op that reads what W computes (the accumulation into the
  /// parameter's gradient). Everything else runs in B, the cheap weight
  /// gradients of norms, biases and embeddings included, so what a pending W
  /// holds is each GEMM's input and output gradient and nothing more.
  bool deferredToW(mlir::Operation *op);
  /// An all-gather whose result only W reads: W gathers it (from the slice,
  /// which is what waits), B does not.
  bool gathersOnlyForW(mlir::Operation *op);
  /// In the weight part, before `op`: every operand that is an all-gather
  /// of a (sequence-parallel) slice is gathered again, right before its first
  /// use in W, so that between B and W only the slice is held.
  mlir::LogicalResult regatherForWeights(mlir::Operation *op, Scope &s);
  /// Where weight-gradient result `r` goes, and whether the kernel adds.
  std::pair<Buf, bool> gradTarget(Scope &s, mlir::Value r, mlir::Operation *op);

  std::string label(mlir::Operation *op, Scope &s);
  Buf def(Scope &s, mlir::Value v, mlir::Operation *op, mlir::StringRef suffix = "");
  mlir::NamedAttribute layout(xf::WeightLayout l);
  /// `attrs` plus the plan attribute `name` = an optional xf attribute's
  /// value, where the xf op has one (plans of ops without it stay as they
  /// were): attention's window, rope's rotary_dim, rms_norm's
  /// weight_offset, the embedding's scale, the gated MLP's activation.
  llvm::SmallVector<mlir::NamedAttribute> withOptional(mlir::StringRef name, std::optional<uint64_t> v,
                                                       llvm::SmallVector<mlir::NamedAttribute> attrs) {
    if (v)
      attrs.push_back(i64(name, int64_t(*v)));
    return attrs;
  }
  llvm::SmallVector<mlir::NamedAttribute> withOptional(mlir::StringRef name, std::optional<llvm::APFloat> v,
                                                       llvm::SmallVector<mlir::NamedAttribute> attrs) {
    if (v)
      attrs.push_back(f64(name, v->convertToDouble()));
    return attrs;
  }
  llvm::SmallVector<mlir::NamedAttribute> withOptional(mlir::StringRef name, std::optional<mlir::StringRef> v,
                                                       llvm::SmallVector<mlir::NamedAttribute> attrs) {
    if (v)
      attrs.push_back(b.getNamedAttr(name, b.getStringAttr(*v)));
    return attrs;
  }
  /// `attrs` plus an attention's masks and biases: `window`, `alibi_heads`
  /// and `head_axis` (from xf.alibi_head_axis) where the op has them.
  llvm::SmallVector<mlir::NamedAttribute> withAttentionBias(mlir::Operation *op,
                                                            llvm::SmallVector<mlir::NamedAttribute> attrs);
  /// `attrs` plus shard_axis when the op is vocabulary- or sequence-parallel.
  llvm::SmallVector<mlir::NamedAttribute> withShardAxis(mlir::Operation *op,
                                                        llvm::SmallVector<mlir::NamedAttribute> attrs);
  /// A vocabulary-parallel loss op's row statistics (Megatron's
  /// decomposition; kernels never communicate): cross_entropy_max, an
  /// all_reduce max, cross_entropy_sums, an all_reduce sum over the op's
  /// vocabulary axis. Appends row_max and row_sums to `args`; nothing when
  /// the op is not vocabulary-parallel.
  void vocabParallelStats(mlir::Operation *op, Scope &s, mlir::Value logits, mlir::Value targets,
                          std::optional<uint64_t> realVocab, mlir::Location loc,
                          llvm::SmallVector<mlir::NamedAttribute> &args);
  /// `attrs` plus real_vocab when the loss masks vocabulary padding.
  llvm::SmallVector<mlir::NamedAttribute> withRealVocab(std::optional<uint64_t> real,
                                                        llvm::SmallVector<mlir::NamedAttribute> attrs);
  /// Context parallelism's ring attention (RingAttention.cpp): the kernels
  /// of an attention (gradient) marked xf.cp_ring, results into the buffers
  /// given.
  mlir::LogicalResult ringAttentionForward(xf::AttentionOp at, Scope &s, Buf out, Buf lse, mlir::Location loc);
  mlir::LogicalResult ringAttentionBackward(xf::AttentionGradOp g, Scope &s, Buf dq, Buf dk, Buf dv,
                                            mlir::Location loc);
  /// moe_unpermute(_bwd)'s attributes for `rows` [N, H] and `slots` [.., k].
  llvm::SmallVector<mlir::NamedAttribute> unpermuteAttrs(mlir::Value rows, mlir::Value slots);
  /// Expert parallelism's all_to_all_v of `rows` (xf value x) into `out`
  /// (xf value y), c chunks per member, for xf.moe_dispatch / moe_combine `op`.
  void allToAllV(mlir::Operation *op, Buf rows, Buf sendSplits, Buf out, Buf recvSplits, int64_t c, mlir::Value x,
                 mlir::Value y, mlir::Location loc);
  /// `send` x to the next member of cp and `recv` y from the previous one.
  void ringShift(Buf x, Buf y, int64_t n, int64_t tag, mlir::StringRef payload, mlir::Location loc);
  llvm::SmallVector<mlir::NamedAttribute> ringBlockAttrs(mlir::Operation *attention, mlir::Value q, int64_t nh,
                                                         int64_t nkv, int64_t hd, int64_t step);
  /// rope_fwd / rope_bwd attributes for x [B, S, n·hd] (`interleaved`:
  /// GPT-J's adjacent pairs).
  llvm::SmallVector<mlir::NamedAttribute> ropeAttrs(mlir::Value x, int64_t hd, llvm::APFloat theta,
                                                    mlir::DictionaryAttr scaling, bool interleaved);

  // The builder's helpers, as the op cases spell them.
  plan::KernelOp kernel(mlir::StringRef name, mlir::ArrayRef<mlir::NamedAttribute> args,
                        mlir::ArrayRef<mlir::NamedAttribute> attrs, mlir::Location loc) {
    return pb.kernel(name, args, attrs, loc);
  }
  Buf newBuffer(std::string name, mlir::StringRef kind, mlir::Type type) {
    return pb.newBuffer(std::move(name), kind, type);
  }
  mlir::NamedAttribute arg(mlir::StringRef role, mlir::Attribute buf) { return pb.arg(role, buf); }
  mlir::NamedAttribute i64(mlir::StringRef n, int64_t v) { return pb.i64(n, v); }
  mlir::NamedAttribute f64(mlir::StringRef n, double v) { return pb.f64(n, v); }
  mlir::NamedAttribute flag(mlir::StringRef n, bool v) { return pb.flag(n, v); }
  mlir::NamedAttribute str(mlir::StringRef n, mlir::StringRef v) { return pb.str(n, v); }
  mlir::RankedTensorType f32(mlir::ArrayRef<int64_t> dims) { return pb.f32(dims); }

  ProgramBuilder &pb;
  mlir::OpBuilder &b;
  ParamBuffers &params;
  const StepInfo &step;
  mlir::SymbolTable symbols;
  llvm::DenseMap<mlir::Operation *, bool> deferredMemo;
};

//===----------------------------------------------------------------------===//
// Optimizer (Optimizer.cpp)
//===----------------------------------------------------------------------===//

/// What the optimizer of one program owns: everything, or, on a pipeline
/// stage, what its stage plan says.
struct OptimizerScope {
  /// Tied parameters held here but updated on their home stage.
  const std::map<std::string, int64_t> *replicaOf = nullptr;
  /// Whether the gradient norm also sums over the pipeline's stages.
  bool pipelined = false;
  Buf loss, gradNorm;

  bool updates(const std::string &name) const { return !replicaOf || !replicaOf->count(name); }
};

/// The choices the manifest records.
struct OptimizerChoice {
  mlir::DictionaryAttr attrs;
  double gradClip = 0;
};

/// Lowers the optimizer step `fn` into the builder's optimizer subroutine:
/// the gradient all-reduces (under ZeRO llcdist-plan-zero rewrites the dp one), the loss
/// average, the global norm with clipping, one AdamW or SGD update per
/// parameter this program updates (with its state buffers and plan.param).
mlir::FailureOr<OptimizerChoice> lowerOptimizer(mlir::func::FuncOp fn, ProgramBuilder &pb, ParamBuffers &params,
                                                const StepInfo &step, const OptimizerScope &scope);

//===----------------------------------------------------------------------===//
// Manifest (Manifest.cpp)
//===----------------------------------------------------------------------===//

/// The plan.param entry of parameter `name` (before the first subroutine):
/// its buffers and state, its initialization, weight decay, tp sharding,
/// vocabulary padding and pipeline replica.
void emitParam(ProgramBuilder &pb, const StepInfo &step, const std::string &name, const ParamInfo &p,
               llvm::ArrayRef<mlir::Attribute> state, bool decays, std::optional<int64_t> replicaOf,
               mlir::Location loc);

/// The module's plan.manifest: model, batch, mesh, optimizer, clipping, LR.
mlir::DictionaryAttr buildManifest(mlir::ModuleOp module, const StepInfo &step, const OptimizerChoice &optimizer);

//===----------------------------------------------------------------------===//
// Programs (WholeStep.cpp, Stages.cpp)
//===----------------------------------------------------------------------===//

/// The whole step as one program, @stage0.
mlir::LogicalResult lowerWholeStep(mlir::ModuleOp module, const StepInfo &step);

/// The pipeline parallelism llcdist-pipeline-split marked: stages, model
/// chunks per stage, microbatches and the schedule. (Not a pass pipeline:
/// those are lib/Pipelines'.)
struct PipelineParallelism {
  int64_t stages = 1, virtualStages = 1, microbatches = 1;
  schedule::ScheduleKind kind = schedule::ScheduleKind::OneFOneB;
};

/// The program of pipeline stage `stage`, @stage<stage>.
mlir::LogicalResult lowerStage(mlir::ModuleOp module, const StepInfo &step, const PipelineParallelism &pipe,
                               int64_t stage);

} // namespace llcdist::xftoplan

#endif // LLCDIST_LIB_CONVERSION_XFTOPLAN_LOWERING_H
