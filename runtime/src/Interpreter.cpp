// Binds a program's ops to KernelCalls and runs its actions. See Interpreter.h.
#include "llcdist/runtime/Interpreter.h"

#include <algorithm>

namespace llcdist::rt {

StatusOr<std::unique_ptr<Interpreter>> Interpreter::create(const Plan& plan, size_t programIndex, Backend& backend,
                                                           int rank) {
  if (programIndex >= plan.programs.size())
    return Status::outOfRange("program index " + std::to_string(programIndex) + " out of range (the plan has " +
                              std::to_string(plan.programs.size()) + ")");
  if (rank < 0 || rank >= plan.manifest.worldSize())
    return Status::outOfRange("rank " + std::to_string(rank) + " out of range (the plan's world size is " +
                              std::to_string(plan.manifest.worldSize()) + ")");
  if (programIndex < plan.manifest.programs.size()) {
    const std::vector<int64_t>& ranks = plan.manifest.programs[programIndex].ranks;
    if (std::find(ranks.begin(), ranks.end(), int64_t(rank)) == ranks.end())
      return Status::invalidArgument("rank " + std::to_string(rank) + " does not run programs[" +
                                     std::to_string(programIndex) + "] (" + plan.manifest.programs[programIndex].file +
                                     ")");
  }
  std::unique_ptr<Interpreter> in(new Interpreter());
  in->rank_ = rank;
  in->programIndex_ = programIndex;
  in->plan_ = &plan;
  in->program_ = &plan.programs[programIndex];
  in->backend_ = &backend;
  LLCDIST_RETURN_IF_ERROR(backend.allocateArena(in->program_->arenaBytes).withContext(in->program_->file));
  const auto& subs = in->program_->subroutines;
  in->subroutines_.resize(subs.size());
  for (size_t s = 0; s < subs.size(); ++s)
    for (size_t i = 0; i < subs[s].ops.size(); ++i) {
      BoundOp b;
      LLCDIST_RETURN_IF_ERROR(in->bind(subs[s].ops[i], &b).withContext(in->where(s, i)));
      in->subroutines_[s].push_back(std::move(b));
    }
  return in;
}

std::string Interpreter::where(size_t s, size_t i) const {
  const Op& op = program_->subroutines[s].ops[i];
  std::string w = program_->file + ": subroutine '" + program_->subroutines[s].name + "' op " + std::to_string(i) +
                  " (" + std::string(schema::opName(op.kind));
  if (!op.loc.empty()) w += ", loc '" + op.loc + "'";
  return w + ")";
}

Status Interpreter::bind(const Op& op, BoundOp* out) {
  KernelCall& c = out->call;
  out->op = &op;
  c.kind = op.kind;
  c.args.resize(op.args.size());
  c.argElems.resize(op.args.size());
  for (size_t r = 0; r < op.args.size(); ++r)
    for (int64_t id : op.args[r]) {
      const BufferDesc& b = program_->buffers[size_t(id)];
      c.args[r].push_back(backend_->arenaAt(b.offset));
      c.argElems[r].push_back(b.numel());
    }
  c.M = op.intAttr("M");
  c.K = op.intAttr("K");
  c.N = op.intAttr("N");
  c.V = op.intAttr("V");
  c.H = op.intAttr("H");
  c.B = op.intAttr("B");
  c.S = op.intAttr("S");
  c.P = op.intAttr("P");
  c.n = op.intAttr("n");
  c.rows = op.intAttr("rows");
  c.nh = op.intAttr("nh");
  c.nkv = op.intAttr("nkv");
  c.hd = op.intAttr("hd");
  c.sizes = op.intListAttr("sizes");
  c.accumulate = op.boolAttr("accumulate");
  c.layout = op.stringAttr("layout") == "in_out" ? WeightLayout::kInOut : WeightLayout::kOutIn;
  c.eps = op.floatAttr("eps");
  c.scale = op.floatAttr("scale");
  c.maxNorm = op.floatAttr("max_norm");
  c.beta1 = op.floatAttr("beta1");
  c.beta2 = op.floatAttr("beta2");
  c.weightDecay = op.floatAttr("weight_decay");
  c.momentum = op.floatAttr("momentum");
  c.outer = op.intAttr("outer");
  c.inner = op.intAttr("inner");
  const std::string reduce = op.stringAttr("op");
  c.reduceOp = reduce == "avg" ? ReduceOp::kAvg : reduce == "max" ? ReduceOp::kMax : ReduceOp::kSum;
  if (op.attrs.count("axis")) {
    auto axis = parseMeshAxis(op.stringAttr("axis"));
    if (!axis) return Status::internal("unknown axis \"" + op.stringAttr("axis") + "\"");
    c.group = plan_->manifest.mesh().group(rank_, *axis);
  }
  if (op.attrs.count(std::string(schema::kShardAxisAttr))) {
    const std::string name = op.stringAttr(std::string(schema::kShardAxisAttr));
    auto axis = parseMeshAxis(name);
    if (!axis) return Status::internal("unknown shard_axis \"" + name + "\"");
    const Mesh mesh = plan_->manifest.mesh();
    if (op.kind == schema::OpKind::kPosEmbeddingFwd || op.kind == schema::OpKind::kPosEmbeddingBwdWeight) {
      c.posBegin = mesh.coord(rank_, *axis) * c.S;  // sequence-parallel: positions [c·S, (c+1)·S)
    } else {  // vocabulary-parallel embedding / cross entropy
      c.group = mesh.group(rank_, *axis);
      c.vocabShard = VocabShard{mesh.coord(rank_, *axis), mesh.axisSize(*axis)};
    }
  }
  if (op.attrs.count(std::string(schema::kStageAxisAttr))) {  // grad_norm over pipeline stages
    const std::string name = op.stringAttr(std::string(schema::kStageAxisAttr));
    auto axis = parseMeshAxis(name);
    if (!axis) return Status::internal("unknown stage_axis \"" + name + "\"");
    c.stageGroup = plan_->manifest.mesh().group(rank_, *axis);
  }
  if (schema::isPointToPoint(op.kind)) {
    // The peer: this rank with coordinate `peer` on `axis` (the loader checked peer < axis size).
    const Mesh mesh = plan_->manifest.mesh();
    const std::string name = op.stringAttr("axis");
    auto axis = parseMeshAxis(name);
    if (!axis) return Status::internal("unknown axis \"" + name + "\"");
    const int64_t peer = op.intAttr("peer", -1);
    if (peer < 0 || peer >= mesh.axisSize(*axis))
      return Status::internal("peer " + std::to_string(peer) + " out of range for axis " + name);
    if (peer == mesh.coord(rank_, *axis))
      return Status::invalidArgument(std::string(schema::opName(op.kind)) + ": peer " + std::to_string(peer) +
                                     " is rank " + std::to_string(rank_) + "'s own coordinate on axis " + name +
                                     " (a rank cannot " + (op.kind == schema::OpKind::kSend ? "send to" : "receive from") +
                                     " itself)");
    c.peer = int(mesh.withCoord(rank_, *axis, peer));
    c.tag = op.intAttr("tag");
    c.group.clear();  // no collective group: the peer is c.peer
  }
  if (op.kind == schema::OpKind::kRopeFwd || op.kind == schema::OpKind::kRopeBwd) {
    RopeConfig cfg;
    cfg.theta = float(op.floatAttr("theta"));
    cfg.llama3 = op.boolAttr("llama3");
    if (cfg.llama3) {
      cfg.factor = float(op.floatAttr("factor"));
      cfg.lowFreqFactor = float(op.floatAttr("low_freq_factor"));
      cfg.highFreqFactor = float(op.floatAttr("high_freq_factor"));
      cfg.originalMaxPositionEmbeddings = op.intAttr("original_max_position_embeddings");
    }
    LLCDIST_ASSIGN_OR_RETURN(RopeTable table, makeRopeTable(cfg, c.hd, 0, c.S));
    out->rope = std::make_shared<RopeTable>(std::move(table));
    c.rope = out->rope.get();
  }
  return Status::ok();
}

Status Interpreter::runCollective(const BoundOp& b) {
  const KernelCall& c = b.call;
  switch (c.kind) {
    case schema::OpKind::kAllReduce:
      for (size_t k = 0; k < c.args[0].size(); ++k) {
        LLCDIST_ASSIGN_OR_RETURN(CollectiveHandle h,
                                 backend_->allReduceAsync(stream_, c.f(0, k), c.argElems[0][k], c.reduceOp, c.group));
        LLCDIST_RETURN_IF_ERROR(backend_->waitCollective(stream_, h));
      }
      return Status::ok();
    case schema::OpKind::kAllGather: {
      LLCDIST_ASSIGN_OR_RETURN(CollectiveHandle h,
                               backend_->allGatherAsync(stream_, c.f(0), c.f(1), c.outer, c.inner, c.group));
      return backend_->waitCollective(stream_, h);
    }
    case schema::OpKind::kReduceScatter: {
      LLCDIST_ASSIGN_OR_RETURN(CollectiveHandle h, backend_->reduceScatterAsync(stream_, c.f(0), c.f(1), c.outer,
                                                                                c.inner, c.reduceOp, c.group));
      return backend_->waitCollective(stream_, h);
    }
    default:
      return Status::internal("not a collective");
  }
}

Status Interpreter::runPointToPoint(const BoundOp& b, int64_t microbatch) {
  const KernelCall& c = b.call;
  CollectiveHandle h;
  if (c.kind == schema::OpKind::kSend) {
    LLCDIST_ASSIGN_OR_RETURN(h, backend_->sendAsync(stream_, c.f(0), c.argElems[0][0], c.peer, c.tag, microbatch));
  } else {
    LLCDIST_ASSIGN_OR_RETURN(h, backend_->recvAsync(stream_, c.f(0), c.argElems[0][0], c.peer, c.tag, microbatch));
  }
  return backend_->waitCollective(stream_, h);
}

Status Interpreter::runOp(const BoundOp& b, int64_t step, int64_t microbatch, double lr, const MicrobatchSource& data) {
  if (schema::isCollective(b.call.kind)) return runCollective(b);
  if (schema::isPointToPoint(b.call.kind)) return runPointToPoint(b, microbatch);
  if (b.call.kind != schema::OpKind::kLoadMicrobatch) {
    if (b.call.kind == schema::OpKind::kAdamW || b.call.kind == schema::OpKind::kSgd) {
      KernelCall c = b.call;  // small: pointers and scalars
      c.lr = lr;
      c.t = step + 1;
      return backend_->launch(stream_, c);
    }
    return backend_->launch(stream_, b.call);
  }
  if (!data) return Status::invalidArgument("load_microbatch: no data source was given");
  if (microbatch < 0) return Status::invalidArgument("load_microbatch: the action has no microbatch");
  const int64_t n = b.call.B * b.call.S;
  idsHost_.assign(size_t(n), 0);
  targetsHost_.assign(size_t(n), 0);
  LLCDIST_RETURN_IF_ERROR(data(step, microbatch, idsHost_.data(), targetsHost_.data(), b.call.B, b.call.S));
  const int64_t idsId = b.op->arg("ids"), tgtId = b.op->arg("targets");
  LLCDIST_RETURN_IF_ERROR(backend_->copyToDevice(stream_, program_->buffers[size_t(idsId)].offset, idsHost_.data(), n * 4));
  return backend_->copyToDevice(stream_, program_->buffers[size_t(tgtId)].offset, targetsHost_.data(), n * 4);
}

Status Interpreter::runSubroutine(size_t s, int64_t step, int64_t microbatch, double lr, const MicrobatchSource& data) {
  if (s >= subroutines_.size()) return Status::outOfRange("subroutine index " + std::to_string(s) + " out of range");
  const std::vector<BoundOp>& ops = subroutines_[s];
  for (size_t i = 0; i < ops.size(); ++i)
    LLCDIST_RETURN_IF_ERROR(runOp(ops[i], step, microbatch, lr, data).withContext(where(s, i)));
  return Status::ok();
}

Status Interpreter::runStep(int64_t step, double lr, const MicrobatchSource& data) {
  for (size_t a = 0; a < program_->actions.size(); ++a) {
    const Action& act = program_->actions[a];
    LLCDIST_RETURN_IF_ERROR(runSubroutine(size_t(act.subroutine), step, act.microbatch, lr, data)
                                .withContext("step " + std::to_string(step) + ", action " + std::to_string(a)));
  }
  return backend_->synchronize();
}

Status Interpreter::readBuffer(int64_t id, void* dst) {
  if (id < 0 || id >= int64_t(program_->buffers.size())) return Status::outOfRange("buffer id " + std::to_string(id) + " out of range");
  const BufferDesc& b = program_->buffers[size_t(id)];
  LLCDIST_RETURN_IF_ERROR(backend_->copyToHost(stream_, dst, b.offset, b.bytes));
  return backend_->synchronize();
}

Status Interpreter::writeBuffer(int64_t id, const void* src) {
  if (id < 0 || id >= int64_t(program_->buffers.size())) return Status::outOfRange("buffer id " + std::to_string(id) + " out of range");
  const BufferDesc& b = program_->buffers[size_t(id)];
  LLCDIST_RETURN_IF_ERROR(backend_->copyToDevice(stream_, b.offset, src, b.bytes));
  return backend_->synchronize();
}

StatusOr<std::vector<float>> Interpreter::readF32(int64_t id) {
  if (id < 0 || id >= int64_t(program_->buffers.size())) return Status::outOfRange("buffer id " + std::to_string(id) + " out of range");
  if (program_->buffers[size_t(id)].dtype != schema::ElemType::kF32)
    return Status::invalidArgument("buffer " + std::to_string(id) + " is not f32");
  std::vector<float> v(size_t(program_->buffers[size_t(id)].numel()));
  LLCDIST_RETURN_IF_ERROR(readBuffer(id, v.data()));
  return v;
}

}  // namespace llcdist::rt
