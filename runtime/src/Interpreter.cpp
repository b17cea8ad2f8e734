// Binds a program's ops to KernelCalls and runs its actions. See Interpreter.h.
#include "llcdist/runtime/Interpreter.h"

#include "ops/OpDefs.h"

#include "llcdist/runtime/Bf16.h"

#include <algorithm>
#include <map>

namespace llcdist::rt {

namespace sc = schema;

namespace {
// Ops that take bf16 buffers as they are (no f32 staging): zero, cast, load_microbatch, and the
// collectives with dtype "bf16" (reduced in bf16 on the buffers themselves).
bool handlesBf16Itself(const Op& op) {
  return sc::handlesBf16Itself(op.kind) || ops::commDType(op) == CommDType::kBF16;
}
}  // namespace

// The first step's execution trace (see Interpreter.h): per buffer, the lifetime in progress (from the
// op that wrote its value to the last op that touched it so far) and the lifetimes already ended.
struct Interpreter::MemoryTrace {
  struct Buffer {
    int64_t start = -1, last = -1;  // the open lifetime; start -1: none yet
    bool carried = false;           // read before the step's first write: a value from the previous step
    bool touched = false;
  };
  struct Lifetime {
    int64_t id, first, last;
  };
  std::vector<Buffer> buffers;
  std::vector<Lifetime> ended;
  int64_t position = 0;  // the next op's position
};

Interpreter::Interpreter() = default;
Interpreter::~Interpreter() = default;

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
  if (backend.arenaBytes() != in->program_->arenaBytes)  // the backend allocates exactly arena_bytes
    return Status::internal(in->program_->file + ": backend " + backend.name() + " allocated an arena of " +
                            std::to_string(backend.arenaBytes()) + " bytes for arena_bytes = " +
                            std::to_string(in->program_->arenaBytes));
  const auto& subs = in->program_->subroutines;
  // One staging area for the f32 temporaries of bf16 arguments, as large as the largest op needs (ops
  // run one at a time); allocated before binding, which takes addresses in it.
  int64_t staging = 0;
  for (const Subroutine& sub : subs)
    for (const Op& op : sub.ops) staging = std::max(staging, in->stagingElems(op));
  in->staging_.assign(size_t(staging), 0.0f);
  in->subroutines_.resize(subs.size());
  for (size_t s = 0; s < subs.size(); ++s)
    for (size_t i = 0; i < subs[s].ops.size(); ++i) {
      BoundOp b;
      LLCDIST_RETURN_IF_ERROR(in->bind(subs[s].ops[i], &b).withContext(in->where(s, i)));
      in->subroutines_[s].push_back(std::move(b));
    }
  LLCDIST_RETURN_IF_ERROR(in->createChannels());
  return in;
}

// One channel per distinct group of the program's collectives (an axis at this rank's coordinates, or
// one of its group_size sub-groups), created here once, before any step (docs/plan-format.md
// "Channels"); each collective runs on its group's.
Status Interpreter::createChannels() {
  std::map<std::vector<int>, Channel> byGroup;
  for (size_t s = 0; s < subroutines_.size(); ++s)
    for (size_t i = 0; i < subroutines_[s].size(); ++i) {
      BoundOp& b = subroutines_[s][i];
      if (!sc::isCollective(b.call.kind)) continue;
      const CommunicationParams* p = b.call.paramsAs<CommunicationParams>();
      if (!p) return Status::internal(where(s, i) + ": a collective bound without its parameters");
      auto it = byGroup.find(p->group);
      if (it == byGroup.end()) {
        StatusOr<Channel> ch = backend_->createChannel(p->group);
        if (!ch.isOk()) return Status(ch.status()).withContext(where(s, i));
        it = byGroup.emplace(p->group, *ch).first;
      }
      b.channel = it->second;
    }
  numChannels_ = byGroup.size();
  return Status::ok();
}

std::string Interpreter::where(size_t s, size_t i) const {
  const Op& op = program_->subroutines[s].ops[i];
  std::string w = program_->file + ": subroutine '" + program_->subroutines[s].name + "' op " + std::to_string(i) +
                  " (" + std::string(schema::opName(op.kind));
  if (!op.loc.empty()) w += ", loc '" + op.loc + "'";
  return w + ")";
}

// Elements of f32 staging the op needs: one temporary per distinct bf16 buffer of its float roles.
int64_t Interpreter::stagingElems(const Op& op) const {
  if (handlesBf16Itself(op)) return 0;
  const sc::OpSpec& spec = sc::opSpec(op.kind);
  std::vector<int64_t> seen;
  int64_t n = 0;
  for (size_t r = 0; r < op.args.size() && r < spec.numArgs; ++r) {
    if (spec.args[r].type != sc::ArgType::kF32) continue;
    for (int64_t id : op.args[r]) {
      const BufferDesc& b = program_->buffers[size_t(id)];
      if (b.dtype != sc::ElemType::kBF16 || std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
      seen.push_back(id);
      n += b.numel();
    }
  }
  return n;
}

namespace {
// A cast launch between an arena buffer and an f32 staging temporary.
KernelCall castCall(void* x, sc::ElemType xType, void* y, sc::ElemType yType, int64_t n) {
  KernelCall c;
  c.kind = sc::OpKind::kCast;
  c.args = {{x}, {y}};
  c.argElems = {{n}, {n}};
  c.argTypes = {{xType}, {yType}};
  c.params = ElementwiseParams{n};
  return c;
}
}  // namespace

Status Interpreter::bind(const Op& op, BoundOp* out) {
  KernelCall& c = out->call;
  out->op = &op;
  c.kind = op.kind;
  c.args.resize(op.args.size());
  c.argElems.resize(op.args.size());
  c.argTypes.resize(op.args.size());
  for (size_t r = 0; r < op.args.size(); ++r)
    for (int64_t id : op.args[r]) {
      const BufferDesc& b = program_->buffers[size_t(id)];
      c.args[r].push_back(backend_->arenaAt(b.offset));
      c.argElems[r].push_back(b.numel());
      c.argTypes[r].push_back(b.dtype);
      const sc::ArgAccess access = op.access(r);
      auto use = std::find_if(out->uses.begin(), out->uses.end(), [&](const BoundOp::Use& u) { return u.id == id; });
      if (use == out->uses.end()) use = out->uses.insert(out->uses.end(), BoundOp::Use{id, false, false});
      use->read |= access != sc::ArgAccess::kWrite;
      use->write |= access != sc::ArgAccess::kRead;
    }
  // bf16 arguments of float roles: bind the op to f32 temporaries in the staging area, converted in
  // when the op reads the buffer and out when it writes it (a buffer in several roles shares one).
  if (!handlesBf16Itself(op)) {
    const sc::OpSpec& spec = sc::opSpec(op.kind);
    struct Slot {
      float* tmp;
      bool read = false, written = false;
    };
    std::map<int64_t, Slot> slots;
    std::vector<int64_t> order;  // first-appearance order, for deterministic conversion order
    float* next = staging_.data();
    for (size_t r = 0; r < op.args.size(); ++r) {
      if (spec.args[r].type != sc::ArgType::kF32) continue;
      const sc::ArgAccess access = op.access(r);
      for (size_t k = 0; k < op.args[r].size(); ++k) {
        const int64_t id = op.args[r][k];
        const BufferDesc& b = program_->buffers[size_t(id)];
        if (b.dtype != sc::ElemType::kBF16) continue;
        auto it = slots.find(id);
        if (it == slots.end()) {
          it = slots.emplace(id, Slot{next}).first;
          order.push_back(id);
          next += b.numel();
        }
        it->second.read |= access != sc::ArgAccess::kWrite;
        it->second.written |= access != sc::ArgAccess::kRead;
        c.args[r][k] = it->second.tmp;
        c.argTypes[r][k] = sc::ElemType::kF32;
      }
    }
    if (next > staging_.data() + staging_.size()) return Status::internal("bf16 staging area too small");
    for (int64_t id : order) {
      const Slot& slot = slots.at(id);
      const BufferDesc& b = program_->buffers[size_t(id)];
      void* arena = backend_->arenaAt(b.offset);
      if (slot.read) out->convertIn.push_back(castCall(arena, sc::ElemType::kBF16, slot.tmp, sc::ElemType::kF32, b.numel()));
      if (slot.written)
        out->convertOut.push_back(castCall(slot.tmp, sc::ElemType::kF32, arena, sc::ElemType::kBF16, b.numel()));
    }
  }
  // The family's parameters (src/ops/<Family>.cpp), for a backend that has the op's kernel.
  const ops::OpDef* def = ops::opDefs().find(op.kind);
  if (!def) return Status::internal("op " + std::string(sc::opName(op.kind)) + " has no definition (docs/adding-an-op.md)");
  if (launchesKernel(op.kind) && !backend_->hasKernel(op.kind))
    return Status::invalidArgument("backend " + backend_->name() + " has no kernel for op " +
                                   std::string(sc::opName(op.kind)));
  LLCDIST_ASSIGN_OR_RETURN(c.params, def->bind(ops::BindContext{op, plan_->manifest, plan_->manifest.mesh(), rank_}));
  return Status::ok();
}

Status Interpreter::runCollective(const BoundOp& b) {
  const KernelCall& c = b.call;
  const CommunicationParams* p = c.paramsAs<CommunicationParams>();
  if (!p) return Status::internal("a collective bound without its parameters");
  switch (c.kind) {
    case schema::OpKind::kAllReduce:
      for (size_t k = 0; k < c.args[0].size(); ++k) {
        LLCDIST_ASSIGN_OR_RETURN(CollectiveHandle h, backend_->allReduceAsync(stream_, c.args[0][k], c.argElems[0][k],
                                                                            p->dtype, p->reduceOp, b.channel));
        LLCDIST_RETURN_IF_ERROR(backend_->waitCollective(stream_, h));
      }
      return Status::ok();
    case schema::OpKind::kAllGather: {
      LLCDIST_ASSIGN_OR_RETURN(CollectiveHandle h, backend_->allGatherAsync(stream_, c.args[0][0], c.args[1][0], p->outer,
                                                                          p->inner, p->total, p->dtype, b.channel));
      return backend_->waitCollective(stream_, h);
    }
    case schema::OpKind::kReduceScatter: {
      LLCDIST_ASSIGN_OR_RETURN(CollectiveHandle h, backend_->reduceScatterAsync(stream_, c.args[0][0], c.args[1][0],
                                                                                p->outer, p->inner, p->total, p->dtype,
                                                                                p->reduceOp, b.channel));
      return backend_->waitCollective(stream_, h);
    }
    default:
      return Status::internal("not a collective");
  }
}

Status Interpreter::runPointToPoint(const BoundOp& b, int64_t microbatch) {
  const KernelCall& c = b.call;
  const CommunicationParams* p = c.paramsAs<CommunicationParams>();
  if (!p) return Status::internal("a send / recv bound without its parameters");
  CollectiveHandle h;
  if (c.kind == schema::OpKind::kSend) {
    LLCDIST_ASSIGN_OR_RETURN(h, backend_->sendAsync(stream_, c.f(0), c.argElems[0][0], p->peer, p->tag, microbatch));
  } else {
    LLCDIST_ASSIGN_OR_RETURN(h, backend_->recvAsync(stream_, c.f(0), c.argElems[0][0], p->peer, p->tag, microbatch));
  }
  return backend_->waitCollective(stream_, h);
}

Status Interpreter::runOp(const BoundOp& b, int64_t step, int64_t microbatch, double lr, const MicrobatchSource& data) {
  if (!b.convertIn.empty() || !b.convertOut.empty()) {  // bf16 arguments: convert in, run in f32, round out
    for (const KernelCall& in : b.convertIn)
      LLCDIST_RETURN_IF_ERROR(backend_->launch(stream_, in).withContext("converting a bf16 argument to f32"));
    LLCDIST_RETURN_IF_ERROR(execute(b, step, microbatch, lr, data));
    for (const KernelCall& out : b.convertOut)
      LLCDIST_RETURN_IF_ERROR(backend_->launch(stream_, out).withContext("rounding an f32 result to bf16"));
    return Status::ok();
  }
  return execute(b, step, microbatch, lr, data);
}

// The op itself, on b.call's addresses (arena, or f32 temporaries for bf16 arguments).
Status Interpreter::execute(const BoundOp& b, int64_t step, int64_t microbatch, double lr, const MicrobatchSource& data) {
  if (schema::isCollective(b.call.kind)) return runCollective(b);
  if (schema::isPointToPoint(b.call.kind)) return runPointToPoint(b, microbatch);
  if (launchesKernel(b.call.kind)) {
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
  const DataParams* batch = b.call.paramsAs<DataParams>();
  if (!batch) return Status::internal("load_microbatch bound without its parameters");
  const int64_t n = batch->B * batch->S;
  idsHost_.assign(size_t(n), 0);
  targetsHost_.assign(size_t(n), 0);
  LLCDIST_RETURN_IF_ERROR(data(step, microbatch, idsHost_.data(), targetsHost_.data(), batch->B, batch->S));
  const int64_t idsId = b.op->arg("ids"), tgtId = b.op->arg("targets");
  LLCDIST_RETURN_IF_ERROR(backend_->copyToDevice(stream_, program_->buffers[size_t(idsId)].offset, idsHost_.data(), n * 4));
  return backend_->copyToDevice(stream_, program_->buffers[size_t(tgtId)].offset, targetsHost_.data(), n * 4);
}

Status Interpreter::runSubroutine(size_t s, int64_t step, int64_t microbatch, double lr, const MicrobatchSource& data) {
  if (s >= subroutines_.size()) return Status::outOfRange("subroutine index " + std::to_string(s) + " out of range");
  const std::vector<BoundOp>& ops = subroutines_[s];
  for (size_t i = 0; i < ops.size(); ++i) {
    // The measured timeline (Timeline.h): no clock is read unless one is attached. Every op but
    // load_microbatch launches a kernel or communicates.
    const sc::OpKind kind = ops[i].call.kind;
    const bool timed = timeline_ && kind != sc::OpKind::kLoadMicrobatch;
    const int64_t t0 = timed ? Timeline::nowNs() : 0;
    LLCDIST_RETURN_IF_ERROR(runOp(ops[i], step, microbatch, lr, data).withContext(where(s, i)));
    if (timed) {
      const bool communicates = !launchesKernel(kind);
      timeline_->record({sc::opName(kind), communicates ? TraceLane::kCommunication : TraceLane::kCompute, t0,
                         Timeline::nowNs(), &ops[i].op->loc, &program_->subroutines[s].name, step, microbatch,
                         action_});
    }
    if (trace_) traceOp(ops[i]);  // the memory measurement hook: one position per executed op
  }
  return Status::ok();
}

Status Interpreter::runStep(int64_t step, double lr, const MicrobatchSource& data) {
  if (!memory_) {  // the first step is traced (every step executes the same ops)
    trace_ = std::make_unique<MemoryTrace>();
    trace_->buffers.resize(program_->buffers.size());
  }
  for (size_t a = 0; a < program_->actions.size(); ++a) {
    const Action& act = program_->actions[a];
    action_ = int64_t(a);
    Status st = runSubroutine(size_t(act.subroutine), step, act.microbatch, lr, data)
                    .withContext("step " + std::to_string(step) + ", action " + std::to_string(a));
    action_ = -1;
    if (!st.isOk()) {
      trace_.reset();  // a failed step measures nothing; the next one is traced again
      return st;
    }
  }
  Status st = backend_->synchronize();
  if (trace_ && st.isOk()) memory_ = finishTrace();
  trace_.reset();
  return st;
}

void Interpreter::traceOp(const BoundOp& b) {
  MemoryTrace& t = *trace_;
  const int64_t pos = t.position++;
  for (const BoundOp::Use& u : b.uses) {
    MemoryTrace::Buffer& buf = t.buffers[size_t(u.id)];
    buf.touched = true;
    if (u.read) {  // the value lives on (read, or read-modify-write)
      if (buf.start < 0) {
        buf.start = 0;  // read before any write in the step: the previous step's value
        buf.carried = true;
      }
      buf.last = pos;
    } else {  // written without being read: a new value; the previous one died at its last use
      if (buf.start >= 0) t.ended.push_back({u.id, buf.start, buf.last});
      buf.start = buf.last = pos;
    }
  }
}

MemoryStats Interpreter::finishTrace() const {
  const MemoryTrace& t = *trace_;
  const int64_t positions = t.position;
  auto aligned = [](int64_t bytes) {
    return (bytes + sc::kArenaAlignment - 1) / sc::kArenaAlignment * sc::kArenaAlignment;
  };
  MemoryStats m;
  m.arenaBytes = program_->arenaBytes;
  m.opsExecuted = positions;
  m.stagingBytes = int64_t(staging_.size()) * int64_t(sizeof(float));
  // Live bytes per position: whole-step kinds everywhere; activations / scratch over their lifetimes.
  int64_t wholeStep = 0;
  std::vector<int64_t> delta(size_t(positions) + 1, 0);
  auto live = [&](int64_t id, int64_t first, int64_t last) {
    const int64_t bytes = aligned(program_->buffers[size_t(id)].bytes);
    delta[size_t(first)] += bytes;
    delta[size_t(last) + 1] -= bytes;
  };
  for (const MemoryTrace::Lifetime& l : t.ended)
    if (!sc::livesWholeStep(program_->buffers[size_t(l.id)].kind)) live(l.id, l.first, l.last);
  for (size_t id = 0; id < program_->buffers.size(); ++id) {
    const BufferDesc& b = program_->buffers[id];
    const MemoryTrace::Buffer& u = t.buffers[id];
    if (u.touched) m.arenaHighWaterBytes = std::max(m.arenaHighWaterBytes, b.offset + b.bytes);
    if (sc::livesWholeStep(b.kind)) {
      wholeStep += aligned(b.bytes);
    } else if (u.start >= 0) {  // the open lifetime; a carried value lives on into the next step
      live(int64_t(id), u.start, u.carried ? positions - 1 : u.last);
    }
  }
  m.peakLiveBytes = wholeStep;
  int64_t bytes = wholeStep;
  for (int64_t p = 0; p < positions; ++p) {
    bytes += delta[size_t(p)];
    if (m.peakPosition < 0 || bytes > m.peakLiveBytes) {
      m.peakLiveBytes = bytes;
      m.peakPosition = p;
    }
  }
  return m;
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
  const BufferDesc& b = program_->buffers[size_t(id)];
  if (!sc::isFloatType(b.dtype))
    return Status::invalidArgument("buffer " + std::to_string(id) + " (\"" + b.name + "\") is " +
                                   std::string(sc::elemTypeName(b.dtype)) + ", not a float buffer");
  std::vector<float> v(size_t(b.numel()));
  if (b.dtype == sc::ElemType::kF32) {
    LLCDIST_RETURN_IF_ERROR(readBuffer(id, v.data()));
    return v;
  }
  std::vector<uint16_t> raw(size_t(b.numel()));
  LLCDIST_RETURN_IF_ERROR(readBuffer(id, raw.data()));
  convertBf16ToF32(raw.data(), v.data(), b.numel());
  return v;
}

Status Interpreter::writeF32(int64_t id, const float* src) {
  if (id < 0 || id >= int64_t(program_->buffers.size())) return Status::outOfRange("buffer id " + std::to_string(id) + " out of range");
  const BufferDesc& b = program_->buffers[size_t(id)];
  if (!sc::isFloatType(b.dtype))
    return Status::invalidArgument("buffer " + std::to_string(id) + " (\"" + b.name + "\") is " +
                                   std::string(sc::elemTypeName(b.dtype)) + ", not a float buffer");
  if (b.dtype == sc::ElemType::kF32) return writeBuffer(id, src);
  std::vector<uint16_t> raw(size_t(b.numel()));
  convertF32ToBf16(src, raw.data(), b.numel());
  return writeBuffer(id, raw.data());
}

}  // namespace llcdist::rt
