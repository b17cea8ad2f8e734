//===- Stages.cpp - one plan.program per pipeline stage --------------------===//
//
// A pipeline stage (llcdist-pipeline-split marked every top-level op of the
// step with its chunk). Chunk k runs on stage k mod pp. For each chunk of
// this stage, the chunk's forward ops, backward ops and, for a split
// backward, weight-gradient ops are lowered once into subroutines
// forward_v<k>, backward_v<k> and backward_weight_v<k>. Microbatches in
// flight at once run them in different slots (the schedule's peak number
// of microbatches in flight for that chunk): each activation, scratch and
// input buffer of the chunk has one instance per slot (plan::kSlotsAttr)
// and each action names its slot, so the program does not grow with the
// microbatch count.
// A value that an op reads from another chunk arrives by `recv` at its first
// use; the chunk that computes it `send`s it at the end of its subroutine.
// Parameters read by chunks of several stages (tied embeddings) live on each;
// the first stage is their home: the others send it their gradient, it
// updates the parameter and sends the new value back.
//
// What each stage holds, sends and receives is decided by the stage plan
// (llcdist/Conversion/XFToPlan/StagePlan.h); this file emits it.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include "llcdist/Dialect/XF/Analysis/ModelStats.h"

using namespace mlir;
using namespace llcdist;
using namespace llcdist::xf;
using namespace llcdist::xftoplan;
namespace sch = llcdist::schedule;
namespace sp = llcdist::stageplan;

namespace {
int64_t chunkOf(Operation *op) {
  auto c = op->getAttrOfType<IntegerAttr>("xf.chunk");
  return c ? c.getInt() : -1;
}

/// The step's top-level ops as stage planning sees them.
sp::Step describeStep(ArrayRef<Operation *> ops, int64_t firstBackward) {
  llvm::DenseMap<Operation *, int64_t> indexOf;
  for (auto [i, op] : llvm::enumerate(ops))
    indexOf[op] = int64_t(i);
  sp::Step step;
  step.firstBackward = firstBackward;
  for (Operation *op : ops) {
    sp::StepOp &s = step.ops.emplace_back();
    s.chunk = chunkOf(op);
    s.numResults = op->getNumResults();
    for (Value v : op->getOperands()) {
      Operation *d = v.getDefiningOp();
      if (auto prm = dyn_cast_or_null<ParamOp>(d))
        s.operands.push_back(sp::Operand::ofParam(prm.getName().str()));
      else if (!d)
        s.operands.push_back(sp::Operand::input());
      else
        s.operands.push_back(sp::Operand::resultOf(indexOf.lookup(d), cast<OpResult>(v).getResultNumber()));
    }
  }
  return step;
}
} // namespace

namespace {
/// The subroutines of one model chunk: forward, backward and, for a split
/// backward, the weight gradients.
struct ChunkSubroutines {
  plan::SubroutineOp f, b, w;
};

/// One stage's program: each of its chunks' subroutines, the tied
/// parameters' exchange around the optimizer, the schedule.
class StageLowering {
public:
  StageLowering(ModuleOp module, const StepInfo &step, const PipelineParallelism &pipe, int64_t stage)
      : module(module), step(step), pipe(pipe), stage(stage), pb(module), params(pb, step), lowering(pb, params, step),
        b(pb.b) {}

  LogicalResult run();

private:
  LogicalResult lowerChunk(const sp::ChunkPlan &chunk);
  LogicalResult lowerRange(Scope &sc, int64_t vs, int64_t begin, int64_t end, BackwardPart part,
                           llvm::DenseSet<Value> &sent);
  void exchangeTiedParameters(bool gradients);
  void emitSchedule(const std::vector<sch::Action> &actions);

  ModuleOp module;
  const StepInfo &step;
  const PipelineParallelism &pipe;
  const int64_t stage;
  ProgramBuilder pb;
  ParamBuffers params;
  OpLowering lowering;
  OpBuilder &b;
  // The step's top-level ops, where the backward starts, what crosses chunks
  // and what this stage holds (run()).
  SmallVector<Operation *> ops;
  int64_t firstBackward = -1;
  sp::Crossings crossings;
  sp::StagePlan stagePlan;
  llvm::DenseMap<Value, const sp::Crossing *> crossingOf;
  std::map<int64_t, ChunkSubroutines> subs; // by local chunk
};

LogicalResult StageLowering::run() {
  func::FuncOp entry = step.entry;
  const int64_t p = pipe.stages;
  sch::ScheduleOptions so;
  so.stages = p;
  so.microbatches = pipe.microbatches;
  so.virtualStages = pipe.virtualStages;
  so.kind = pipe.kind;
  auto schedule = sch::generateSchedule(so);
  if (!schedule)
    return module.emitError("llcdist-lower-to-plan: ") << schedule.error().message;

  // The top-level ops; where the backward starts; what crosses chunks.
  Block &body = entry.getBody().front();
  for (Operation &op : body.without_terminator())
    ops.push_back(&op);
  firstBackward = backwardStart(body);
  if (firstBackward < 0)
    return entry.emitError("llcdist-lower-to-plan: the training step has no loss gradient");
  sp::Step desc = describeStep(ops, firstBackward);
  if (std::optional<sp::Error> err = sp::verifyChunks(desc, p))
    return ops[err->op]->emitOpError(err->message);
  crossings = sp::findCrossings(desc, p);
  stagePlan = sp::planStage(desc, crossings, *schedule, stage);
  for (const sp::Crossing &c : crossings.values)
    crossingOf[ops[c.value.first]->getResult(c.value.second)] = &c;

  pb.beginProgram(("stage" + std::to_string(stage)).c_str());
  if (stagePlan.hasLoss)
    lowering.lossBuf = pb.newBuffer("loss", "metric", pb.f32({1}));
  Buf gradNorm = pb.newBuffer("grad_norm", "metric", pb.f32({1}));
  for (const sp::ChunkPlan &chunk : stagePlan.chunks)
    if (failed(lowerChunk(chunk)))
      return failure();

  // The optimizer: replicas send their gradient home, the home stage adds
  // them (in stage order), everyone reduces over dp, takes the global norm
  // (over pp too) and updates what it owns; the home sends the new values.
  exchangeTiedParameters(/*gradients=*/true);
  OptimizerScope scope;
  scope.replicaOf = &stagePlan.replicaOf;
  scope.pipelined = true;
  scope.loss = lowering.lossBuf;
  scope.gradNorm = gradNorm;
  FailureOr<OptimizerChoice> optimizer = lowerOptimizer(step.optimizerFn, pb, params, step, scope);
  if (failed(optimizer))
    return failure();
  exchangeTiedParameters(/*gradients=*/false);
  params.emitStepBegin(entry.getLoc(), lowering.lossBuf);
  emitSchedule(schedule->perStage[stage]);
  if (stage == 0)
    module->setAttr(plan::kManifestAttr, buildManifest(module, step, *optimizer));
  return success();
}

/// Lowers chunk `chunk` once into its subroutines, its buffers with one
/// instance per slot.
LogicalResult StageLowering::lowerChunk(const sp::ChunkPlan &chunk) {
  func::FuncOp entry = step.entry;
  const int64_t vs = chunk.chunk;
  ChunkSubroutines &sb = subs[chunk.localChunk];
  sb.f = pb.addSubroutine(sp::subroutineName(sch::ActionKind::F, vs));
  sb.b = pb.addSubroutine(sp::subroutineName(sch::ActionKind::B, vs));
  if (stagePlan.splitBackward)
    sb.w = pb.addSubroutine(sp::subroutineName(sch::ActionKind::W, vs));
  pb.slots = chunk.slots;
  Scope sc;
  sc.prefix = sp::chunkPrefix(vs);
  llvm::DenseSet<Value> sent; // a split backward lowers its layer calls twice
  pb.current = sb.f;
  if (chunk.readsInputs) {
    auto idsType = cast<RankedTensorType>(entry.getArgument(0).getType());
    Buf ids = pb.newBuffer(sc.prefix + "input_ids", "input", entry.getArgument(0).getType());
    Buf targets = pb.newBuffer(sc.prefix + "labels", "input", entry.getArgument(1).getType());
    sc.bufs[entry.getArgument(0)] = {ids};
    sc.bufs[entry.getArgument(1)] = {targets};
    pb.kernel("load_microbatch", {pb.arg("ids", ids), pb.arg("targets", targets)},
              {pb.i64("B", idsType.getDimSize(0)), pb.i64("S", idsType.getDimSize(1))}, entry.getLoc());
  }
  if (failed(lowerRange(sc, vs, 0, firstBackward, BackwardPart::Whole, sent)))
    return failure();
  pb.current = sb.b;
  // A split backward: B computes the input gradients and the cheap
  // weight gradients; W the weight-gradient GEMMs. Where every W of the
  // chunk directly follows its B, nothing can use the gap between them,
  // so B runs the whole backward in its own order (each activation and
  // gradient freed as in 1F1B) and W is empty.
  bool deferW = stagePlan.splitBackward && !chunk.fusedBackward;
  if (failed(lowerRange(sc, vs, firstBackward, ops.size(), deferW ? BackwardPart::InputGradients : BackwardPart::Whole,
                        sent)))
    return failure();
  if (deferW) {
    pb.current = sb.w;
    if (failed(lowerRange(sc, vs, firstBackward, ops.size(), BackwardPart::WeightGradients, sent)))
      return failure();
  }
  pb.slots = 1;
  return success();
}

/// Lowers the part `part` of chunk `vs`'s ops in [begin, end), with a recv
/// before the first use of a value from another chunk and a send after the
/// last op for each value another chunk reads.
LogicalResult StageLowering::lowerRange(Scope &sc, int64_t vs, int64_t begin, int64_t end, BackwardPart part,
                                        llvm::DenseSet<Value> &sent) {
  const int64_t p = pipe.stages;
  const bool forward = begin < firstBackward;
  SmallVector<Value> produced;
  for (int64_t i = begin; i < end; ++i) {
    Operation *op = ops[i];
    // A layer call is filtered op by op inside its body.
    if (chunkOf(op) != vs || (!isa<LayerOp>(op) && !lowering.inPart(op, part)))
      continue;
    for (Value v : op->getOperands()) {
      if (sc.bufs.count(v))
        continue;
      Operation *d = v.getDefiningOp();
      if (auto prm = dyn_cast_or_null<ParamOp>(d)) {
        if (failed(lowering.lowerOp(prm, sc, part)))
          return failure();
        continue;
      }
      const sp::Crossing *crossing = crossingOf.lookup(v);
      if (!crossing)
        continue; // defined in this chunk by an op another part lowers
      Buf buf = pb.newBuffer(sc.prefix + "recv:" + std::to_string(crossing->tag), "activation", v.getType());
      sc.bufs[v] = {buf};
      pb.transfer("recv", buf, crossing->fromChunk % p, crossing->tag,
                  NameLoc::get(b.getStringAttr("pipeline: from chunk " + std::to_string(crossing->fromChunk)),
                               lowering.provenance(op, sc)),
                  activationPayload(v, forward), xf::CollectiveOrigin::Pipeline);
    }
    if (failed(lowering.lowerOp(op, sc, part)))
      return failure();
    for (Value v : op->getResults())
      if (crossingOf.count(v) && sent.insert(v).second)
        produced.push_back(v);
  }
  for (Value v : produced) {
    const sp::Crossing *crossing = crossingOf.lookup(v);
    for (int64_t reader : crossing->readers)
      pb.transfer("send", lowering.use(sc, v), reader % p, crossing->tag,
                  NameLoc::get(b.getStringAttr("pipeline: to chunk " + std::to_string(reader)), v.getLoc()),
                  activationPayload(v, forward), xf::CollectiveOrigin::Pipeline);
  }
  return success();
}

/// The tied parameters' exchange in the optimizer: `gradients`, the
/// replicas' gradients sent home and added there (before the update);
/// otherwise the home's updated values sent to the replicas (after it).
void StageLowering::exchangeTiedParameters(bool gradients) {
  pb.current = pb.optimizer;
  for (const sp::TiedParam &tied : crossings.tied) {
    const std::string &name = tied.name;
    if (!params.contains(name))
      continue;
    ParamInfo &pi = params[name];
    Location loc = NameLoc::get(
        b.getStringAttr(gradients ? "pipeline: tied parameter gradient" : "pipeline: tied parameter value"),
        NameLoc::get(b.getStringAttr(name), module.getLoc()));
    if (tied.home != stage) {
      pb.transfer(gradients ? "send" : "recv", gradients ? pi.grad : pi.value, tied.home, tied.tag, loc,
                  "tied parameter", xf::CollectiveOrigin::TiedParameter);
      continue;
    }
    for (int64_t other : tied.stages) {
      if (other == stage)
        continue;
      if (!gradients) {
        pb.transfer("send", pi.value, other, tied.tag, loc, "tied parameter", xf::CollectiveOrigin::TiedParameter);
        continue;
      }
      RankedTensorType gt = pi.type;
      Buf part = pb.newBuffer(name + ".grad@stage" + std::to_string(other), "scratch", gt);
      pb.transfer("recv", part, other, tied.tag, loc, "tied parameter", xf::CollectiveOrigin::TiedParameter);
      pb.kernel("accumulate", {pb.arg("x", part), pb.arg("y", pi.grad)}, {pb.i64("n", gt.getNumElements())}, loc);
    }
  }
}

/// The schedule: this stage's actions, each with its (chunk, slot).
void StageLowering::emitSchedule(const std::vector<sch::Action> &actions) {
  pb.beginSchedule();
  pb.action(pb.stepBegin, std::nullopt);
  for (auto [a, slot] : llvm::zip(actions, stagePlan.slotOfAction)) {
    ChunkSubroutines &sb = subs[a.chunk];
    plan::SubroutineOp sub = a.kind == sch::ActionKind::F ? sb.f : a.kind == sch::ActionKind::B ? sb.b : sb.w;
    SmallVector<NamedAttribute, 3> attrs = {pb.str("pipeline.kind", std::string(1, sch::kindLetter(a.kind))),
                                            pb.i64("pipeline.chunk", a.chunk)};
    if (slot > 0)
      attrs.push_back(pb.i64(plan::kSlotAttr, slot));
    pb.action(sub, a.microbatch, attrs);
  }
  pb.action(pb.optimizer, std::nullopt);
}
} // namespace

LogicalResult xftoplan::lowerStage(ModuleOp module, const StepInfo &step, const PipelineParallelism &pipe,
                                   int64_t stage) {
  return StageLowering(module, step, pipe, stage).run();
}
