//===- PlanZero.cpp - ZeRO over dp as a plan→plan rewrite -----------------===//
//
// llcdist-plan-zero: ZeRO over dp on a plan lowered without it. Each dp rank
// (each rank of the data-parallel group dp × cp, axis "dp+cp", under context
// parallelism, as in Megatron: the gradient all-reduce's group) owns one row
// block of every parameter (ceil(rows / dp) rows, the last
// blocks zero-padded): it receives only that block of the summed gradient
// (stage 1: a reduce-scatter where the plan all-reduced; stage 2: each
// contribution reduce-scattered into a gradient block where the backward
// computes it), keeps the optimizer state of that block, updates it and
// gathers the updated blocks back into the whole parameter the next step
// reads. Under stage 3 (FSDP) the parameter is a block too, gathered where
// each scope (a layer body's forward, its backward, a chunk's top level)
// begins to read it, and the update writes the block in place.
//
// Everything the rewrite needs is in the plan: the parameters and their
// buffers (plan.param), the dp gradient all-reduce (its plan.origin), the
// kernels writing a gradient (`accumulate` into it, or a weight-gradient
// kernel with `accumulate` = true), the updates (the kernels reading the
// parameter as `param`) and, under mixed precision, the working copy
// (step_begin's cast from the master); but where a scope begins is the
// lowering's knowledge, which it records for stage 3 (record-param-scopes:
// plan.param_scopes on the kernel there; removed here).
//
// Under expert parallelism an expert's shard (plan.param `sharding` over
// ep) is replicated over edp only, the dp/ep ranks holding the same experts:
// its blocks are over edp (none when ep = dp), and the gradient norm's ep
// partial is no longer reduced over ep, since the dp sum of the blocks'
// norms covers every shard's every block once.
// New buffers are declared where llcdist-lower-to-plan declares them when
// it builds the same plan itself, so buffer ids and arena offsets do not
// depend on which of the two made the plan.
//
//===----------------------------------------------------------------------===//
#include "KernelArgs.h"

#include "llcdist/Dialect/Plan/Transforms/Passes.h"

#include "llcdist/Dialect/Plan/Analysis/CollectiveOrigin.h"
#include "llcdist/Dialect/XF/Analysis/ModelStats.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"

#include <optional>

#define DEBUG_TYPE "llcdist-plan-zero"

namespace llcdist::plan {
#define GEN_PASS_DEF_PLANZERO
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist;

namespace {

using Buf = FlatSymbolRefAttr;

/// One parameter of the program, as the rewrite sees it.
struct Param {
  plan::ParamOp op;
  plan::BufferOp value, grad;
  /// What the forward and backward read: `value`, or under mixed precision
  /// the bf16 copy step_begin casts from the f32 master.
  plan::BufferOp working;
  /// step_begin's cast of the master into `working` (mixed precision only).
  plan::KernelOp cast;
  /// The tensor on this rank before ZeRO, and its block.
  RankedTensorType type, shardType;
  /// The group splitting it into blocks (the program's data-parallel group,
  /// or edp for an expert shard) and its size.
  StringAttr axis;
  int64_t groupSize = 0;
  /// Updated on another pipeline stage (a tied replica): no update here.
  bool replica = false;
};

/// Rewrites one plan.program of a module on `mesh`.
class ProgramZero {
public:
  ProgramZero(plan::ProgramOp program, int64_t stage, bool reshardAfterForward, const xf::MeshDegrees &mesh)
      : program(program), stage(stage), reshardAfterForward(reshardAfterForward), mesh(mesh), b(program.getContext()),
        axis(b.getStringAttr(mesh.gradientAxis())) {}

  LogicalResult run();

private:
  LogicalResult collect();
  /// A new buffer (a fresh symbol b<N>) declared before `before`, with an
  /// instance per slot where `slots` is given (a pipeline chunk's).
  Buf newBuffer(Operation *before, StringRef name, StringRef kind, RankedTensorType type, IntegerAttr slots = {});
  plan::KernelOp kernel(StringRef name, ArrayRef<NamedAttribute> args, ArrayRef<NamedAttribute> attrs, Location loc);
  /// A ZeRO collective: `kernel` with the communication report's payload
  /// and origin.
  plan::KernelOp collective(StringRef name, ArrayRef<NamedAttribute> args, ArrayRef<NamedAttribute> attrs, Location loc,
                            StringRef payload);
  /// The attributes of a collective (or shard_slice) between the whole
  /// local tensor of `p` and its dp block. A padded block adds `total`: the
  /// whole side holds only the real elements.
  SmallVector<NamedAttribute> blockAttrs(const Param &p);
  /// The kernel's args with every buffer in `map` replaced.
  DictionaryAttr remapArgs(plan::KernelOp k, const DenseMap<Attribute, Attribute> &map) {
    return plan::remapKernelArgs(k, [&](Attribute a) { return map.lookup(a); });
  }
  /// A new buffer named `name` (with #1, #2, ... when repeated, as the
  /// lowering names them) declared after `after`.
  Buf newScratchAfter(Operation *after, StringRef name, RankedTensorType type, StringRef kind = "scratch",
                      IntegerAttr slots = {});
  /// The microbatch slots of a pipeline chunk's subroutine (those of the
  /// chunk's buffers, plan::kSlotsAttr; none outside a chunk): the scratch
  /// made for it gets an instance per slot, as the lowering gives the
  /// chunk's own, so the memory plan may place each in its slot's block
  /// where that slot's activations are already freed.
  IntegerAttr chunkSlots(plan::SubroutineOp sub);
  /// Stage 1: the dp gradient all-reduce becomes per-parameter
  /// reduce-scatters whose blocks the optimizer reads (from stage 2 it
  /// goes).
  void reduceScatterGradients();
  /// The forward and backward: ZeRO-3's gathers where each scope begins to
  /// read a parameter, and from stage 2 each gradient contribution
  /// reduce-scattered into the gradient's block.
  LogicalResult rewriteSteps();
  /// Stage 2 on: every gradient, and what a tied parameter's home receives
  /// from its replicas, is the block.
  void shardGradients();
  /// ZeRO-3: the parameter (and master) buffers hold the block.
  void shardParameters();
  /// grad_norm sums the blocks' squared norms over dp (an all_reduce of the
  /// f64 partial sum); an ep partial is no longer reduced over ep.
  void sumNormOverDp();
  /// The state is the block; an f32 update (stages 1, 2) slices its block
  /// and gathers it back.
  void shardUpdates();
  /// Stages 1, 2 under mixed precision: the master is the block, step_begin
  /// gathers the bf16 copy.
  void gatherWorkingCopies();
  /// plan.param's local_shape and zero.
  void annotateParams();

  plan::ProgramOp program;
  int64_t stage;
  /// ZeRO-3: each scope gathers again (FSDP's reshard_after_forward), or
  /// the backward reads its slot's forward copy.
  bool reshardAfterForward;
  const xf::MeshDegrees &mesh;
  OpBuilder b;
  /// The data-parallel group's axis ("dp", "dp+cp", "cp").
  StringAttr axis;
  Block *body = nullptr;
  plan::SubroutineOp stepBegin, optimizer;
  Operation *firstSubroutine = nullptr;
  llvm::StringMap<plan::BufferOp> buffers;
  std::vector<Param> params;
  /// The plan is mixed precision: the masters are f32 blocks, not updated
  /// through a slice.
  bool mixed = false;
  std::optional<plan::NewBuffers> fresh; // from collect()
  llvm::StringMap<unsigned> scratchNames;
};

Buf ProgramZero::newBuffer(Operation *before, StringRef name, StringRef kind, RankedTensorType type,
                           IntegerAttr slots) {
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPoint(before);
  plan::BufferOp op = fresh->create(b, program.getLoc(), type, name, kind, slots);
  buffers[op.getSymName()] = op;
  return FlatSymbolRefAttr::get(op.getSymNameAttr());
}

plan::KernelOp ProgramZero::collective(StringRef name, ArrayRef<NamedAttribute> args, ArrayRef<NamedAttribute> attrs,
                                       Location loc, StringRef payload) {
  plan::KernelOp k = kernel(name, args, attrs, loc);
  k->setAttr("plan.payload", b.getStringAttr(payload));
  plan::setCollectiveOrigin(k, xf::CollectiveOrigin::Zero);
  return k;
}

Buf ProgramZero::newScratchAfter(Operation *after, StringRef name, RankedTensorType type, StringRef kind,
                                 IntegerAttr slots) {
  std::string unique = name.str();
  if (unsigned n = scratchNames[name]++)
    unique += "#" + std::to_string(n);
  return newBuffer(after->getNextNode(), unique, kind, type, slots);
}

plan::KernelOp ProgramZero::kernel(StringRef name, ArrayRef<NamedAttribute> args, ArrayRef<NamedAttribute> attrs,
                                   Location loc) {
  return plan::KernelOp::create(b, loc, name, b.getDictionaryAttr(args), b.getDictionaryAttr(attrs));
}

SmallVector<NamedAttribute> ProgramZero::blockAttrs(const Param &p) {
  SmallVector<NamedAttribute> attrs{b.getNamedAttr("axis", p.axis), b.getNamedAttr("outer", b.getI64IntegerAttr(1)),
                                    b.getNamedAttr("inner", b.getI64IntegerAttr(p.shardType.getNumElements()))};
  if (p.type.getNumElements() != p.shardType.getNumElements() * p.groupSize)
    attrs.push_back(b.getNamedAttr("total", b.getI64IntegerAttr(p.type.getNumElements())));
  return attrs;
}

LogicalResult ProgramZero::collect() {
  body = &program.getBody().front();
  fresh.emplace(program);
  for (Operation &op : *body) {
    if (auto buf = dyn_cast<plan::BufferOp>(op)) {
      buffers[buf.getSymName()] = buf;
    } else if (auto sub = dyn_cast<plan::SubroutineOp>(op)) {
      if (!firstSubroutine)
        firstSubroutine = sub;
      if (sub.getSymName() == "step_begin")
        stepBegin = sub;
      else if (sub.getSymName() == "optimizer")
        optimizer = sub;
    }
  }
  if (!stepBegin || !optimizer)
    return program.emitError("llcdist-plan-zero: expected the step_begin and optimizer "
                             "subroutines of llcdist-lower-to-plan");
  // ZeRO-3 gathers where each scope begins to read a parameter, which only
  // the lowering knows (record-param-scopes).
  bool recorded = false;
  program.walk([&](plan::KernelOp k) { recorded |= k->hasAttr(plan::kParamScopesAttr); });
  if (stage >= 3 && !recorded && !body->getOps<plan::ParamOp>().empty())
    return program.emitError("llcdist-plan-zero: stage 3 needs where each scope reads each "
                             "parameter: lower with llcdist-lower-to-plan record-param-scopes");
  // Under mixed precision step_begin casts each master into its working copy.
  llvm::DenseMap<Attribute, plan::KernelOp> castOf;
  for (auto k : stepBegin.getBody().front().getOps<plan::KernelOp>())
    if (k.getKernel() == "cast")
      castOf[k.getArgs().get("x")] = k;
  for (auto p : body->getOps<plan::ParamOp>()) {
    if (p->hasAttr("zero"))
      return p.emitOpError("llcdist-plan-zero: the parameter is already ZeRO-sharded");
    Param info;
    info.op = p;
    info.axis = axis;
    info.groupSize = mesh.size(axis);
    auto sharding = p->getAttrOfType<DictionaryAttr>("sharding");
    auto shardAxis = sharding ? sharding.getAs<StringAttr>("axis") : StringAttr();
    if (shardAxis && shardAxis.getValue() == "ep") {
      // An expert shard: its replicas are the edp ranks, and the cp ranks
      // under context parallelism (none when ep = dp and cp = 1: each rank
      // holds its experts alone, and nothing is split).
      const std::string replicas = mesh.expertGradientAxis();
      info.axis = b.getStringAttr(replicas);
      info.groupSize = mesh.size(replicas);
      if (info.groupSize < 2)
        continue;
    }
    info.value = buffers.lookup(p.getValue());
    info.grad = buffers.lookup(p.getGrad());
    info.replica = p->hasAttr("pipeline.replica_of");
    info.working = info.value;
    if (plan::KernelOp cast = castOf.lookup(p.getValueAttr())) {
      info.cast = cast;
      info.working = buffers.lookup(cast.getArgs().getAs<FlatSymbolRefAttr>("y").getValue());
      mixed = true;
    }
    info.type = info.working.getTensorType();
    SmallVector<int64_t> dims(info.type.getShape());
    dims[0] = llvm::divideCeil(dims[0], info.groupSize);
    info.shardType = RankedTensorType::get(dims, info.type.getElementType());
    params.push_back(info);
  }
  return success();
}

void ProgramZero::reduceScatterGradients() {
  // The lowering's dp gradient all-reduce (one per step); every later
  // reader of a gradient (the tp reductions, the norm, the update) reads
  // this rank's reduced block instead.
  SmallVector<plan::KernelOp> dpReduces;
  for (auto k : optimizer.getBody().front().getOps<plan::KernelOp>())
    if (plan::collectiveOrigin(k) == xf::CollectiveOrigin::DataParallelGradients)
      dpReduces.push_back(k);
  if (stage >= 2) {
    // The backward reduced each contribution into the gradient's block.
    for (plan::KernelOp k : dpReduces)
      k.erase();
    return;
  }
  if (dpReduces.empty())
    return;
  plan::KernelOp first = dpReduces.front();
  // The reduce-scatter's target buffers come before the optimizer's own:
  // the first state buffer or plan.param of the updates.
  llvm::DenseSet<Attribute> stateBufs;
  for (Param &p : params)
    for (Attribute s : p.op.getState())
      stateBufs.insert(s);
  Operation *declareAt = firstSubroutine;
  for (Operation &op : *body) {
    auto buf = dyn_cast<plan::BufferOp>(op);
    if (isa<plan::ParamOp>(op) || (buf && stateBufs.count(FlatSymbolRefAttr::get(buf.getSymNameAttr())))) {
      declareAt = &op;
      break;
    }
  }
  // The all-reduce's location is the reason beside the optimizer op's.
  Location stepLoc = first.getLoc();
  if (auto n = dyn_cast<NameLoc>(stepLoc))
    stepLoc = n.getChildLoc();
  DenseMap<Attribute, Attribute> toShard;
  Operation *last = nullptr;
  b.setInsertionPoint(first);
  for (Param &p : params) {
    if (p.replica)
      continue; // its home stage reduces the summed gradient
    std::string name = p.op.getName().str();
    Buf shard = newBuffer(declareAt, name + ".grad_shard", "scratch", p.shardType);
    SmallVector<NamedAttribute> attrs = blockAttrs(p);
    attrs.push_back(b.getNamedAttr("op", b.getStringAttr("sum")));
    last = collective("reduce_scatter", {b.getNamedAttr("x", p.op.getGradAttr()), b.getNamedAttr("y", shard)}, attrs,
                      NameLoc::get(b.getStringAttr("ZeRO-1: reduce-scatter the gradient to the "
                                                   "optimizer state's owner"),
                                   NameLoc::get(b.getStringAttr(name), stepLoc)),
                      "gradients");
    toShard[p.op.getGradAttr()] = shard;
  }
  for (plan::KernelOp k : dpReduces)
    k.erase();
  if (!last)
    return;
  // What comes before the reduction (a tied gradient's exchange) reads the
  // whole gradient; what follows reads the block.
  for (Operation *op = last->getNextNode(); op; op = op->getNextNode()) {
    auto k = dyn_cast<plan::KernelOp>(op);
    if (!k)
      continue;
    k.setArgsAttr(remapArgs(k, toShard));
  }
}

LogicalResult ProgramZero::rewriteSteps() {
  llvm::DenseMap<Attribute, unsigned> paramOfGrad;
  for (auto [i, p] : llvm::enumerate(params))
    paramOfGrad[p.op.getGradAttr()] = i;
  auto gradParam = [&](Attribute a) -> Param * {
    auto it = paramOfGrad.find(a);
    return it == paramOfGrad.end() ? nullptr : &params[it->second];
  };
  // `full` (one contribution, whole) reduce-scattered over dp into a part
  // of the block, added to the gradient's block; after `after`. The scratch
  // has the subroutine's slots (chunkSlots).
  IntegerAttr subSlots;
  auto reduceInto = [&](Operation *&declared, Buf full, Param &p, Location loc) {
    std::string name = p.op.getName().str();
    Buf part = newScratchAfter(declared, name + ".grad_part", p.shardType, "scratch", subSlots);
    declared = buffers.lookup(part.getValue());
    SmallVector<NamedAttribute> attrs = blockAttrs(p);
    attrs.push_back(b.getNamedAttr("op", b.getStringAttr("sum")));
    collective("reduce_scatter", {b.getNamedAttr("x", full), b.getNamedAttr("y", part)}, attrs,
               NameLoc::get(
                   b.getStringAttr("ZeRO: reduce-scatter the gradient into its " + p.axis.getValue() + " shard"), loc),
               "gradients");
    kernel("accumulate", {b.getNamedAttr("x", part), b.getNamedAttr("y", p.op.getGradAttr())},
           {b.getNamedAttr("n", b.getI64IntegerAttr(p.shardType.getNumElements()))}, loc);
  };
  // New buffers are declared after the latest buffer the kernels read or
  // wrote so far (where the lowering's counter stood when it made them).
  Operation *declared = nullptr;
  auto see = [&](Attribute a) {
    auto ref = dyn_cast<FlatSymbolRefAttr>(a);
    plan::BufferOp buf = ref ? buffers.lookup(ref.getValue()) : plan::BufferOp();
    if (buf && (!declared || declared->isBeforeInBlock(buf)))
      declared = buf;
  };
  // ZeRO-3: the parameter each kernel reads is the copy its scope gathered
  // (by slot and name: the forward's, reused by the backward without
  // reshard_after_forward).
  llvm::StringMap<Param *> byName;
  llvm::DenseMap<Attribute, Param *> byWorking;
  for (Param &p : params) {
    byName[p.op.getName()] = &p;
    byWorking[FlatSymbolRefAttr::get(p.working.getSymNameAttr())] = &p;
  }
  llvm::StringMap<Buf> gatheredBySlot;
  // A scope spans subroutines (the step's top level its forward and
  // backward; a chunk's slot its F, B and W), laid out one after another.
  DenseMap<Attribute, Attribute> current; // working copy → its scope's gathered one
  auto gatherReason = b.getStringAttr("ZeRO-3: gather the parameter before its use");
  for (auto sub : body->getOps<plan::SubroutineOp>()) {
    if (sub == stepBegin || sub == optimizer)
      continue;
    subSlots = chunkSlots(sub);
    for (auto k : llvm::make_early_inc_range(sub.getBody().front().getOps<plan::KernelOp>())) {
      if (auto scopes = k->getAttrOfType<ArrayAttr>(plan::kParamScopesAttr)) {
        k->removeAttr(plan::kParamScopesAttr);
        b.setInsertionPoint(k);
        for (auto read : scopes.getAsRange<DictionaryAttr>()) {
          Param *p = byName.lookup(read.getAs<StringAttr>("param").getValue());
          if (!p || stage < 3)
            continue;
          std::string key = (read.getAs<StringAttr>("slot").getValue() + p->op.getName()).str();
          Buf full = gatheredBySlot.lookup(key);
          if (!full || reshardAfterForward) {
            // The whole parameter exists only while this scope uses it.
            for (Operation *own : {p->value.getOperation(), p->working.getOperation(), p->grad.getOperation()})
              if (!declared || declared->isBeforeInBlock(own))
                declared = own;
            // A pipeline chunk's scope: one gathered copy per microbatch slot,
            // as for the chunk's other buffers.
            full = newScratchAfter(declared, key + ".gathered", p->type, "activation",
                                   read.getAs<IntegerAttr>(plan::kSlotsAttr));
            declared = buffers.lookup(full.getValue());
            gatheredBySlot[key] = full;
            collective(
                "all_gather",
                {b.getNamedAttr("x", FlatSymbolRefAttr::get(p->working.getSymNameAttr())), b.getNamedAttr("y", full)},
                blockAttrs(*p), NameLoc::get(gatherReason, cast<LocationAttr>(read.get("loc"))), "parameters");
          }
          current[FlatSymbolRefAttr::get(p->working.getSymNameAttr())] = full;
        }
      }
      if (stage >= 3) {
        for (NamedAttribute a : k.getArgs())
          if (auto ref = dyn_cast<FlatSymbolRefAttr>(a.getValue()); ref && byWorking.count(ref) && !current.count(ref))
            return k.emitOpError("llcdist-plan-zero: reads parameter '")
                   << byWorking.lookup(ref)->op.getName() << "' outside a scope recorded by llcdist-lower-to-plan";
        k.setArgsAttr(remapArgs(k, current));
      }
      for (NamedAttribute a : k.getArgs()) {
        if (auto list = dyn_cast<ArrayAttr>(a.getValue()))
          llvm::for_each(list, see);
        else
          see(a.getValue());
      }
      if (stage < 2)
        continue;
      if (k.getKernel() == "accumulate") {
        // A contribution added to the gradient: reduce it into the block.
        Param *p = gradParam(k.getArgs().get("y"));
        if (!p)
          continue;
        b.setInsertionPoint(k);
        reduceInto(declared, cast<FlatSymbolRefAttr>(k.getArgs().get("x")), *p, k.getLoc());
        k.erase();
        continue;
      }
      auto acc = k.getParams().getAs<BoolAttr>("accumulate");
      if (!acc || !acc.getValue())
        continue;
      // A weight gradient computed straight into the parameter's gradient:
      // the kernel writes this microbatch's whole contribution instead,
      // reduced into the block after it (in plan.param order).
      SmallVector<std::pair<unsigned, Buf>> written;
      DenseMap<Attribute, Attribute> toFull;
      for (NamedAttribute a : k.getArgs())
        if (gradParam(a.getValue()))
          written.push_back({paramOfGrad.lookup(a.getValue()), Buf()});
      if (written.empty())
        continue;
      llvm::sort(written, [](auto &x, auto &y) { return x.first < y.first; });
      for (auto &[i, full] : written) {
        Param &p = params[i];
        full = newScratchAfter(declared, p.op.getName().str() + ".grad_mb", p.type, "scratch", subSlots);
        declared = buffers.lookup(full.getValue());
        toFull[p.op.getGradAttr()] = full;
      }
      k.setArgsAttr(remapArgs(k, toFull));
      NamedAttrList attrs(k.getParams());
      attrs.set("accumulate", b.getBoolAttr(false));
      k.setParamsAttr(attrs.getDictionary(b.getContext()));
      b.setInsertionPointAfter(k);
      for (auto &[i, full] : written)
        reduceInto(declared, full, params[i], k.getLoc());
    }
  }
  return success();
}

void ProgramZero::shardGradients() {
  llvm::DenseMap<Attribute, Param *> byGrad;
  for (Param &p : params)
    byGrad[p.op.getGradAttr()] = &p;
  // A tied parameter's home receives the replicas' gradients, as they hold
  // them: the block.
  for (auto k : optimizer.getBody().front().getOps<plan::KernelOp>()) {
    Param *p = k.getKernel() == "accumulate" ? byGrad.lookup(k.getArgs().get("y")) : nullptr;
    if (!p)
      continue;
    buffers.lookup(k.getArgs().getAs<FlatSymbolRefAttr>("x").getValue()).setTypeAttr(TypeAttr::get(p->shardType));
    NamedAttrList attrs(k.getParams());
    attrs.set("n", b.getI64IntegerAttr(p->shardType.getNumElements()));
    k.setParamsAttr(attrs.getDictionary(b.getContext()));
  }
  for (Param &p : params)
    p.grad.setTypeAttr(TypeAttr::get(p.shardType));
}

IntegerAttr ProgramZero::chunkSlots(plan::SubroutineOp sub) {
  IntegerAttr slots;
  sub.walk([&](plan::KernelOp k) {
    for (NamedAttribute a : k.getArgs())
      if (auto ref = dyn_cast<FlatSymbolRefAttr>(a.getValue()))
        if (plan::BufferOp buf = buffers.lookup(ref.getValue()); buf && !slots)
          slots = buf->getAttrOfType<IntegerAttr>(plan::kSlotsAttr);
  });
  return slots;
}

void ProgramZero::shardParameters() {
  for (Param &p : params) {
    p.working.setTypeAttr(TypeAttr::get(p.shardType));
    if (!p.cast)
      continue;
    // Mixed precision: the f32 master is the block too, and step_begin
    // casts it into the working copy's block.
    p.value.setTypeAttr(TypeAttr::get(RankedTensorType::get(p.shardType.getShape(), b.getF32Type())));
    NamedAttrList attrs(p.cast.getParams());
    attrs.set("n", b.getI64IntegerAttr(p.shardType.getNumElements()));
    p.cast.setParamsAttr(attrs.getDictionary(b.getContext()));
  }
}

void ProgramZero::sumNormOverDp() {
  // Each dp rank holds other gradient blocks: the squared norm sums over dp
  // too, before the pipeline's stages. A local grad_norm becomes
  // grad_norm_sq, the dp all-reduce and grad_norm_clip; a split one gets the
  // dp all-reduce before its pp all-reduce (or before its clip).
  auto *body = &optimizer.getBody().front();
  auto dpAllReduce = [&](Attribute sq, Location loc) {
    plan::KernelOp k = kernel(
        "all_reduce", {b.getNamedAttr("x", b.getArrayAttr({sq}))},
        {b.getNamedAttr("axis", axis), b.getNamedAttr("op", b.getStringAttr("sum"))},
        NameLoc::get(
            b.getStringAttr("grad_norm: the gradient blocks' squared norm over " + axis.getValue() + " (ZeRO)"), loc));
    k->setAttr("plan.payload", b.getStringAttr("grad norm"));
    plan::setCollectiveOrigin(k, xf::CollectiveOrigin::GradNorm);
  };
  for (auto k : llvm::make_early_inc_range(body->getOps<plan::KernelOp>())) {
    // The experts' partial: ep is inside dp, whose sum below adds every ep
    // shard's blocks (edp) once; summing it over ep first would count each
    // shard ep times.
    auto over = k.getParams().getAs<StringAttr>("axis");
    if (k.getKernel() == "all_reduce" && over && over.getValue() == "ep" &&
        plan::collectiveOrigin(k) == xf::CollectiveOrigin::GradNorm) {
      k.erase();
      continue;
    }
    if (k.getKernel() == "grad_norm") {
      Buf sq = newBuffer(firstSubroutine, "grad_norm.sq", "scratch", RankedTensorType::get({1}, b.getF64Type()));
      b.setInsertionPoint(k);
      kernel("grad_norm_sq", {b.getNamedAttr("sq", sq), b.getNamedAttr("grads", k.getArgs().get("grads"))}, {},
             k.getLoc());
      dpAllReduce(sq, k.getLoc());
      kernel("grad_norm_clip",
             {b.getNamedAttr("sq", sq), b.getNamedAttr("grads", k.getArgs().get("grads")),
              b.getNamedAttr("norm", k.getArgs().get("norm"))},
             k.getParams().getValue(), k.getLoc());
      k.erase();
      continue;
    }
    if (k.getKernel() != "grad_norm_clip")
      continue;
    Attribute sq = k.getArgs().get("sq");
    Operation *at = k;
    for (auto o : body->getOps<plan::KernelOp>()) {
      auto axis = o.getParams().getAs<StringAttr>("axis");
      if (o.getKernel() == "all_reduce" && axis && axis.getValue() == "pp" &&
          o.getArgs().get("x") == b.getArrayAttr({sq})) {
        at = o;
        break;
      }
    }
    b.setInsertionPoint(at);
    dpAllReduce(sq, k.getLoc());
  }
}

void ProgramZero::shardUpdates() {
  llvm::DenseMap<Attribute, Param *> byValue;
  for (Param &p : params) {
    // The state is f32 (the master's type) and this rank's block only.
    for (Attribute s : p.op.getState())
      buffers.lookup(cast<FlatSymbolRefAttr>(s).getValue())
          .setTypeAttr(TypeAttr::get(RankedTensorType::get(p.shardType.getShape(), b.getF32Type())));
    if (!p.replica)
      byValue[p.op.getValueAttr()] = &p;
  }
  if (mixed || stage >= 3)
    return; // the update writes the master's (ZeRO-3: the value's) block in place
  // An f32 update: cut this rank's block out of the parameter, update it,
  // gather the blocks back.
  for (auto k : llvm::make_early_inc_range(optimizer.getBody().front().getOps<plan::KernelOp>())) {
    if (k.getKernel() != "adamw" && k.getKernel() != "sgd")
      continue;
    Param *p = byValue.lookup(k.getArgs().get("param"));
    if (!p)
      continue;
    std::string name = p->op.getName().str();
    Operation *declareAt = p->op.getState().empty()
                               ? p->op.getOperation()
                               : buffers.lookup(cast<FlatSymbolRefAttr>(p->op.getState()[0]).getValue()).getOperation();
    Buf shard = newBuffer(declareAt, name + ".shard", "scratch", p->shardType);
    b.setInsertionPoint(k);
    kernel("shard_slice", {b.getNamedAttr("x", p->op.getValueAttr()), b.getNamedAttr("y", shard)}, blockAttrs(*p),
           k.getLoc());
    k.setArgsAttr(remapArgs(k, {{p->op.getValueAttr(), shard}}));
    b.setInsertionPointAfter(k);
    collective("all_gather", {b.getNamedAttr("x", shard), b.getNamedAttr("y", p->op.getValueAttr())}, blockAttrs(*p),
               NameLoc::get(b.getStringAttr("ZeRO: gather the updated shards"), k.getLoc()), "parameters");
  }
}

void ProgramZero::gatherWorkingCopies() {
  // Under mixed precision the master is this rank's block: step_begin
  // rounds the block, then gathers the blocks into the bf16 working copy.
  if (stage >= 3)
    return; // the lowering cast the master's block into the working copy's
  for (Param &p : params) {
    if (!p.cast)
      continue;
    p.value.setTypeAttr(TypeAttr::get(RankedTensorType::get(p.shardType.getShape(), b.getF32Type())));
    std::string name = p.op.getName().str();
    Buf block = newBuffer(firstSubroutine, name + ".bf16_block", "scratch", p.shardType);
    Location castLoc = p.cast.getLoc();
    b.setInsertionPoint(p.cast);
    kernel("cast", {b.getNamedAttr("x", p.op.getValueAttr()), b.getNamedAttr("y", block)},
           {b.getNamedAttr("n", b.getI64IntegerAttr(p.shardType.getNumElements()))}, castLoc);
    collective("all_gather",
               {b.getNamedAttr("x", block), b.getNamedAttr("y", FlatSymbolRefAttr::get(p.working.getSymNameAttr()))},
               blockAttrs(p), NameLoc::get(b.getStringAttr("ZeRO: gather the updated parameter blocks"), castLoc),
               "parameters");
    p.cast.erase();
  }
}

void ProgramZero::annotateParams() {
  for (Param &p : params) {
    // The tensor's shape on this rank before the blocks (the writer's
    // `shape` when there is no tp `sharding`).
    p.op->setAttr("local_shape", b.getDenseI64ArrayAttr(p.type.getShape()));
    SmallVector<NamedAttribute> z{b.getNamedAttr("axis", p.axis), b.getNamedAttr("stage", b.getI64IntegerAttr(stage))};
    if (mixed && stage < 3) // the f32 master is this rank's block
      z.push_back(b.getNamedAttr("value_block", b.getBoolAttr(true)));
    // dp does not divide the rows: the last blocks are zero padding.
    if (p.shardType.getDimSize(0) * p.groupSize != p.type.getDimSize(0))
      z.push_back(b.getNamedAttr("block_rows", b.getI64IntegerAttr(p.shardType.getDimSize(0))));
    p.op->setAttr("zero", b.getDictionaryAttr(z));
  }
}

LogicalResult ProgramZero::run() {
  if (failed(collect()))
    return failure();
  if (failed(rewriteSteps()))
    return failure();
  if (stage >= 2)
    shardGradients();
  if (stage >= 3)
    shardParameters();
  reduceScatterGradients();
  sumNormOverDp();
  shardUpdates();
  gatherWorkingCopies();
  annotateParams();
  return success();
}

struct PlanZeroPass : public plan::impl::PlanZeroBase<PlanZeroPass> {
  using PlanZeroBase::PlanZeroBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    const int64_t stage = this->stage;
    const bool reshardAfterForward = this->reshardAfterForward;
    if (stage < 1 || stage > 3) {
      module.emitError("llcdist-plan-zero: stage ") << stage << " is not 1, 2 or 3";
      return signalPassFailure();
    }
    // The data-parallel group: dp, or dp × cp under context parallelism.
    xf::MeshDegrees mesh = xf::meshDegrees(module).value_or(xf::MeshDegrees{});
    if (mesh.size(mesh.gradientAxis()) < 2) {
      module.emitError("llcdist-plan-zero: stage ")
          << stage << " shards over dp, but the mesh has dp=1 (use --mesh dp=N with N > 1)";
      return signalPassFailure();
    }
    for (auto program : module.getOps<plan::ProgramOp>())
      if (failed(ProgramZero(program, stage, reshardAfterForward, mesh).run()))
        return signalPassFailure();
  }
};

} // namespace
