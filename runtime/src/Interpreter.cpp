// Binds a program's ops to KernelCalls and runs its actions. See Interpreter.h.
#include "llcdist/runtime/Interpreter.h"

#include "llcdist/runtime/FlightRecorder.h"

#include "ops/OpDefs.h"

#include "llcdist/runtime/Bf16.h"

#include <algorithm>
#include <cstring>
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
  // One stream per queue (the compute queue on the default stream) and an event to order each other
  // queue after compute work.
  in->streams_.assign(1, in->stream_);
  in->queueEvents_.assign(1, Event{});
  for (size_t q = 1; q < in->program_->queues.size(); ++q) {
    LLCDIST_ASSIGN_OR_RETURN(Stream stream, backend.createStream());
    LLCDIST_ASSIGN_OR_RETURN(Event event, backend.createEvent());
    in->streams_.push_back(stream);
    in->queueEvents_.push_back(event);
  }
  in->deferred_.assign(in->program_->queues.size(), {});
  const auto& subs = in->program_->subroutines;
  // Each op's parameters and kernel variant, chosen once (they do not depend on the slot).
  std::vector<std::vector<OpBinding>> bindings(subs.size());
  for (size_t s = 0; s < subs.size(); ++s)
    for (size_t i = 0; i < subs[s].ops.size(); ++i) {
      StatusOr<OpBinding> b = in->chooseBinding(subs[s].ops[i]);
      if (!b.isOk()) return Status(b.status()).withContext(in->where(s, i));
      bindings[s].push_back(std::move(b).value());
    }
  // One staging area for the f32 temporaries of converted bf16 arguments, as large as the largest op
  // needs (ops run one at a time); allocated before binding, which takes addresses in it.
  int64_t staging = 0;
  for (size_t s = 0; s < subs.size(); ++s)
    for (size_t i = 0; i < subs[s].ops.size(); ++i)
      staging = std::max(staging, in->stagingElems(subs[s].ops[i], bindings[s][i]));
  if (staging > 0) {
    LLCDIST_ASSIGN_OR_RETURN(in->staging_, backend.allocateStaging(staging));
  }
  in->stagingElems_ = staging;
  // Each subroutine is bound once per slot, 0 to the highest an action runs it in: a slotted buffer's
  // instance is an arena address like any other, so running an op costs the same with slots as without.
  const auto& buffers = in->program_->buffers;
  in->instanceBase_.resize(buffers.size());
  int64_t instances = 0;
  for (size_t id = 0; id < buffers.size(); ++id) {
    in->instanceBase_[id] = instances;
    instances += buffers[id].instances();
  }
  std::vector<int64_t> slots(subs.size(), 1);
  for (const Action& a : in->program_->actions)
    slots[size_t(a.subroutine)] = std::max(slots[size_t(a.subroutine)], a.slot + 1);
  in->subroutines_.resize(subs.size());
  for (size_t s = 0; s < subs.size(); ++s) {
    in->subroutines_[s].resize(size_t(slots[s]));
    for (int64_t k = 0; k < slots[s]; ++k) {
      for (size_t i = 0; i < subs[s].ops.size(); ++i) {
        BoundOp b;
        LLCDIST_RETURN_IF_ERROR(in->bind(subs[s].ops[i], bindings[s][i], k, &b).withContext(in->where(s, i)));
        if (launchesKernel(b.call.kind))  // graphs, workspaces: built now, never during a step
          LLCDIST_RETURN_IF_ERROR(backend.prepare(b.call).withContext(in->where(s, i)));
        in->subroutines_[s][size_t(k)].push_back(std::move(b));
      }
    }
  }
  // The choices, summarized per (kind, variant) in order of first appearance.
  for (size_t s = 0; s < subs.size(); ++s)
    for (size_t i = 0; i < subs[s].ops.size(); ++i) {
      const Op& op = subs[s].ops[i];
      const OpBinding& b = bindings[s][i];
      if (!launchesKernel(op.kind)) continue;
      auto it = std::find_if(in->kernelChoices_.begin(), in->kernelChoices_.end(), [&](const KernelChoiceSummary& k) {
        return k.kind == op.kind && k.variant == b.variantName;
      });
      if (it == in->kernelChoices_.end())
        it = in->kernelChoices_.insert(in->kernelChoices_.end(),
                                       KernelChoiceSummary{op.kind, std::string(b.variantName), 0, 0, b.passedOver});
      ++it->ops;
      for (const std::vector<bool>& role : b.convert) it->convertedArgs += std::count(role.begin(), role.end(), true);
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
    for (std::vector<BoundOp>& slot : subroutines_[s])  // each slot's binding of the subroutine
      for (size_t i = 0; i < slot.size(); ++i) {
        BoundOp& b = slot[i];
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

void Interpreter::setTimeline(Timeline* timeline) {
  timeline_ = timeline;
  if (timeline) timeline->setQueues(program_->queues);
}

std::string Interpreter::where(size_t s, size_t i) const {
  const Op& op = program_->subroutines[s].ops[i];
  std::string w = program_->file + ": subroutine '" + program_->subroutines[s].name + "' op " + std::to_string(i) +
                  " (" + std::string(schema::opName(op.kind));
  if (!op.loc.empty()) w += ", loc '" + op.loc + "'";
  return w + ")";
}

// The op's parameters, kernel variant and conversions. Kernel ops take the variant the backend's choice
// rule gives for their buffers' dtypes (KernelVariant.h); zero, cast and load_microbatch take their
// buffers as they are; communication ops convert every bf16 argument unless they run in bf16.
StatusOr<Interpreter::OpBinding> Interpreter::chooseBinding(const Op& op) {
  OpBinding out;
  // The family's parameters (src/ops/<Family>.cpp), for a backend that has the op's kernel.
  const ops::OpDef* def = ops::opDefs().find(op.kind);
  if (!def) return Status::internal("op " + std::string(sc::opName(op.kind)) + " has no definition (docs/adding-an-op.md)");
  if (launchesKernel(op.kind) && !backend_->hasKernel(op.kind))
    return Status::invalidArgument("backend " + backend_->name() + " has no kernel for op " +
                                   std::string(sc::opName(op.kind)));
  LLCDIST_ASSIGN_OR_RETURN(out.params, def->bind(ops::BindContext{op, plan_->manifest, plan_->manifest.mesh(), rank_}));
  const sc::OpSpec& spec = sc::opSpec(op.kind);
  out.convert.resize(op.args.size());
  for (size_t r = 0; r < op.args.size(); ++r) out.convert[r].assign(op.args[r].size(), false);
  if (handlesBf16Itself(op)) {  // zero, cast (and load_microbatch, a host copy): any dtype, no choice
    if (launchesKernel(op.kind)) {
      const std::vector<const KernelVariantInfo*> variants = backend_->kernelVariants(op.kind);
      if (!variants.empty()) out.variantName = variants.front()->name;
    }
    return out;
  }
  if (!launchesKernel(op.kind)) {  // communication in f32: every bf16 argument through an f32 temporary
    for (size_t r = 0; r < op.args.size() && r < spec.numArgs; ++r) {
      if (!sc::isFloatRole(spec.args[r].type)) continue;
      for (size_t k = 0; k < op.args[r].size(); ++k)
        out.convert[r][k] = program_->buffers[size_t(op.args[r][k])].dtype == sc::ElemType::kBF16;
    }
    return out;
  }
  KernelCall probe;  // what the choice reads: kind, dtypes, sizes, parameters (no addresses)
  probe.kind = op.kind;
  probe.args.resize(op.args.size());
  probe.argElems.resize(op.args.size());
  probe.argTypes.resize(op.args.size());
  for (size_t r = 0; r < op.args.size(); ++r)
    for (int64_t id : op.args[r]) {
      const BufferDesc& b = program_->buffers[size_t(id)];
      probe.args[r].push_back(nullptr);
      probe.argElems[r].push_back(b.numel());
      probe.argTypes[r].push_back(b.dtype);
    }
  probe.params = out.params;
  LLCDIST_ASSIGN_OR_RETURN(KernelChoice choice, chooseKernelVariant(probe, backend_->kernelVariants(op.kind),
                                                                    backend_->kernelSelectOptions()));
  out.variant = choice.variant;
  out.variantName = choice.name;
  out.passedOver = std::move(choice.passedOver);
  out.convert = std::move(choice.convert);
  return out;
}

// Elements of f32 staging the op needs: one temporary per distinct converted buffer.
int64_t Interpreter::stagingElems(const Op& op, const OpBinding& binding) const {
  std::vector<int64_t> seen;
  int64_t n = 0;
  for (size_t r = 0; r < op.args.size() && r < binding.convert.size(); ++r)
    for (size_t k = 0; k < op.args[r].size(); ++k) {
      const int64_t id = op.args[r][k];
      if (!binding.convert[r][k] || std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
      seen.push_back(id);
      n += program_->buffers[size_t(id)].numel();
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

Status Interpreter::bind(const Op& op, const OpBinding& binding, int64_t slot, BoundOp* out) {
  KernelCall& c = out->call;
  out->op = &op;
  out->slot = slot;
  c.kind = op.kind;
  c.variant = binding.variant;
  c.args.resize(op.args.size());
  c.argElems.resize(op.args.size());
  c.argTypes.resize(op.args.size());
  c.storedTypes.resize(op.args.size());
  for (size_t r = 0; r < op.args.size(); ++r)
    for (int64_t id : op.args[r]) {
      const BufferDesc& b = program_->buffers[size_t(id)];
      c.args[r].push_back(backend_->arenaAt(b.offsetAt(slot)));
      c.argElems[r].push_back(b.numel());
      c.argTypes[r].push_back(b.dtype);
      c.storedTypes[r].push_back(b.dtype);
      const sc::ArgAccess access = op.access(r);
      auto use = std::find_if(out->uses.begin(), out->uses.end(), [&](const BoundOp::Use& u) { return u.id == id; });
      if (use == out->uses.end())
        use = out->uses.insert(out->uses.end(),
                               BoundOp::Use{id, false, false, instanceBase_[size_t(id)] + (b.instances() > 1 ? slot : 0)});
      use->read |= access != sc::ArgAccess::kWrite;
      use->write |= access != sc::ArgAccess::kRead;
    }
  // Converted bf16 arguments: bind the op to f32 temporaries in the staging area, converted in when the
  // op reads the buffer and out when it writes it (a buffer in several roles shares one).
  struct Slot {
    float* tmp;
    bool read = false, written = false;
  };
  std::map<int64_t, Slot> slots;
  std::vector<int64_t> order;  // first-appearance order, for deterministic conversion order
  float* next = staging_;
  for (size_t r = 0; r < op.args.size(); ++r) {
    const sc::ArgAccess access = op.access(r);
    for (size_t k = 0; k < op.args[r].size(); ++k) {
      if (r >= binding.convert.size() || !binding.convert[r][k]) continue;
      const int64_t id = op.args[r][k];
      const BufferDesc& b = program_->buffers[size_t(id)];
      if (b.dtype != sc::ElemType::kBF16) return Status::internal("a conversion of a buffer that is not bf16");
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
  if (next > staging_ + stagingElems_) return Status::internal("bf16 staging area too small");
  for (int64_t id : order) {
    const Slot& staged = slots.at(id);
    const BufferDesc& b = program_->buffers[size_t(id)];
    void* arena = backend_->arenaAt(b.offsetAt(slot));
    if (staged.read)
      out->convertIn.push_back(castCall(arena, sc::ElemType::kBF16, staged.tmp, sc::ElemType::kF32, b.numel()));
    if (staged.written)
      out->convertOut.push_back(castCall(staged.tmp, sc::ElemType::kF32, arena, sc::ElemType::kBF16, b.numel()));
  }
  // An asynchronous op keeps its buffers from its start to its wait, which the one shared staging area
  // cannot give it.
  if (op.startsAsync() && (!out->convertIn.empty() || !out->convertOut.empty()))
    return Status::invalidArgument("asynchronous communication (\"token\") on bf16 buffers is not supported by "
                                 "this runtime; run it synchronously");
  c.params = binding.params;
  out->variant = binding.variantName;
  out->flops = kernelFlops(c);
  return Status::ok();
}

Status Interpreter::issueCommunication(const BoundOp& b, size_t queue, int64_t microbatch, size_t subroutine,
                                       int64_t step, std::vector<CollectiveHandle>* handles) {
  const KernelCall& c = b.call;
  const CommunicationParams* p = c.paramsAs<CommunicationParams>();
  if (!p) return Status::internal("a communication op bound without its parameters");
  const Stream stream = streams_[queue];
  // The flight recorder's provenance of the call (FlightRecorder.h); the backend carries it to the
  // thread that runs the call.
  const Subroutine& sub = program_->subroutines[subroutine];
  CommCallSite site;
  site.program = &program_->file;
  site.subroutine = &sub.name;
  site.opIndex = int64_t(b.op - sub.ops.data());
  site.loc = &b.op->loc;
  site.step = step;
  site.microbatch = microbatch;
  site.action = action_;
  const ScopedCallSite scopedSite(site);
  // Communication on another queue: its real interval, read on the thread that runs it (Timeline.h).
  std::shared_ptr<int64_t> t0;
  if (timeline_ && queue != 0) {
    t0 = std::make_shared<int64_t>(0);
    LLCDIST_RETURN_IF_ERROR(backend_->launchHostFunc(stream, [t0] { *t0 = Timeline::nowNs(); }));
  }
  using K = sc::OpKind;
  if (c.kind == K::kAllReduce) {
    for (size_t k = 0; k < c.args[0].size(); ++k) {
      // An f64 buffer (a kernel's partial reduction: grad_norm_sq, cross_entropy_max / _sums) is reduced in
      // f64; the others in the op's dtype.
      const CommDType dtype = c.type(0, k) == sc::ElemType::kF64 ? CommDType::kF64 : p->dtype;
      LLCDIST_ASSIGN_OR_RETURN(CollectiveHandle h, backend_->allReduceAsync(stream, c.args[0][k], c.argElems[0][k],
                                                                            dtype, p->reduceOp, b.channel));
      handles->push_back(h);
    }
  } else {
    StatusOr<CollectiveHandle> h =
        c.kind == K::kAllGather
            ? backend_->allGatherAsync(stream, c.args[0][0], c.args[1][0], p->outer, p->inner, p->total, p->dtype,
                                       b.channel)
        : c.kind == K::kReduceScatter
            ? backend_->reduceScatterAsync(stream, c.args[0][0], c.args[1][0], p->outer, p->inner, p->total, p->dtype,
                                           p->reduceOp, b.channel)
        : c.kind == K::kSend ? backend_->sendAsync(stream, c.f(0), c.argElems[0][0], p->peer, p->tag, microbatch)
        : c.kind == K::kRecv ? backend_->recvAsync(stream, c.f(0), c.argElems[0][0], p->peer, p->tag, microbatch)
                             : StatusOr<CollectiveHandle>(Status::internal("not a communication op"));
    if (!h.isOk()) return h.status();
    handles->push_back(h.value());
  }
  if (t0) {
    Timeline* timeline = timeline_;
    TimelineEvent e{sc::opName(c.kind), TraceLane::kCommunication, 0, 0, &b.op->loc,
                    &program_->subroutines[subroutine].name, step, microbatch, action_, int(queue)};
    LLCDIST_RETURN_IF_ERROR(backend_->launchHostFunc(stream, [timeline, t0, e]() mutable {
      e.startNs = *t0;
      e.endNs = Timeline::nowNs();
      timeline->record(e);
    }));
  }
  return Status::ok();
}

Status Interpreter::orderAfterCompute(size_t queue) {
  if (queue == 0) return Status::ok();
  LLCDIST_RETURN_IF_ERROR(backend_->recordEvent(streams_[0], queueEvents_[queue]));
  return backend_->waitEvent(streams_[queue], queueEvents_[queue]);
}

Status Interpreter::runCommunication(const BoundOp& b, int64_t microbatch, size_t subroutine, int64_t step) {
  const size_t queue = size_t(b.op->queue);
  LLCDIST_RETURN_IF_ERROR(orderAfterCompute(queue));
  // Synchronous: the next op waits for it (every plan without the feature takes this path on queue 0).
  std::vector<CollectiveHandle> handles;
  LLCDIST_RETURN_IF_ERROR(issueCommunication(b, queue, microbatch, subroutine, step, &handles));
  for (CollectiveHandle h : handles) LLCDIST_RETURN_IF_ERROR(backend_->waitCollective(streams_[0], h));
  return Status::ok();
}

namespace {
// Checking mode's poison: quiet NaNs with a recognizable payload, so arithmetic on them stays NaN.
constexpr uint32_t kPoisonF32 = 0x7fc0dead;
constexpr uint16_t kPoisonBf16 = 0x7fde;
std::vector<std::byte> poisonBytes(const BufferDesc& b) {
  std::vector<std::byte> v(size_t(b.bytes));
  if (b.dtype == sc::ElemType::kBF16) {
    for (size_t i = 0; i + 2 <= v.size(); i += 2) std::memcpy(&v[i], &kPoisonBf16, 2);
  } else {
    for (size_t i = 0; i + 4 <= v.size(); i += 4) std::memcpy(&v[i], &kPoisonF32, 4);
  }
  return v;
}
}  // namespace

Status Interpreter::startAsync(const BoundOp& b, size_t s, size_t i, int64_t step, int64_t microbatch) {
  InFlight f;
  f.op = &b;
  f.subroutine = s;
  f.opIndex = i;
  f.step = step;
  f.microbatch = microbatch;
  const size_t queue = size_t(b.op->queue);
  if (checkAsync_) {
    // Nothing runs now: the op's written buffers hold poison until it runs at its wait, and its
    // in-place buffers' values are kept aside (restored then, once their poison is checked).
    f.deferred = true;
    for (const BoundOp::Use& u : b.uses) {
      if (!u.write) continue;
      const BufferDesc& buf = program_->buffers[size_t(u.id)];
      const int64_t at = buf.offsetAt(b.slot);  // the instance the op is bound to
      if (u.read) {
        f.saved.emplace_back(size_t(buf.bytes));
        LLCDIST_RETURN_IF_ERROR(backend_->copyToHost(streams_[0], f.saved.back().data(), at, buf.bytes));
      }
      const std::vector<std::byte> poison = poisonBytes(buf);
      LLCDIST_RETURN_IF_ERROR(backend_->copyToDevice(streams_[0], at, poison.data(), buf.bytes));
    }
    deferred_[queue].push_back(b.op->token);
  } else {
    LLCDIST_RETURN_IF_ERROR(orderAfterCompute(queue));
    LLCDIST_RETURN_IF_ERROR(issueCommunication(b, queue, microbatch, s, step, &f.handles));
  }
  inFlight_[b.op->token] = std::move(f);  // the loader's token rules: the token is not in flight
  return Status::ok();
}

Status Interpreter::runDeferred(size_t queue, int64_t token) {
  std::vector<int64_t>& order = deferred_[queue];
  while (!order.empty()) {
    const int64_t t = order.front();
    order.erase(order.begin());
    InFlight& f = inFlight_.at(t);
    const BoundOp& b = *f.op;
    size_t k = 0;
    for (const BoundOp::Use& u : b.uses) {
      if (!u.write || !u.read) continue;
      const BufferDesc& buf = program_->buffers[size_t(u.id)];
      const int64_t at = buf.offsetAt(b.slot);
      std::vector<std::byte> now(size_t(buf.bytes));
      LLCDIST_RETURN_IF_ERROR(backend_->copyToHost(streams_[0], now.data(), at, buf.bytes));
      if (now != poisonBytes(buf))
        return Status::invalidArgument(
            "--check-async: buffer " + std::to_string(u.id) + " (\"" + buf.name + "\") was written while " +
            where(f.subroutine, f.opIndex) + " had it in flight (token " + std::to_string(t) +
            "): a missing or late wait");
      LLCDIST_RETURN_IF_ERROR(backend_->copyToDevice(streams_[0], at, f.saved[k++].data(), buf.bytes));
    }
    f.saved.clear();
    f.deferred = false;
    LLCDIST_RETURN_IF_ERROR(issueCommunication(b, 0, f.microbatch, f.subroutine, f.step, &f.handles));
    if (t == token) return Status::ok();
  }
  return Status::internal("--check-async: token " + std::to_string(token) + " was not deferred on its queue");
}

Status Interpreter::waitToken(const BoundOp& w, size_t s, int64_t step, int64_t microbatch) {
  auto it = inFlight_.find(w.op->token);
  if (it == inFlight_.end())  // the loader's token rules make this unreachable
    return Status::internal("wait: token " + std::to_string(w.op->token) + " is not in flight");
  InFlight& f = it->second;
  if (f.deferred) LLCDIST_RETURN_IF_ERROR(runDeferred(size_t(f.op->op->queue), w.op->token));
  const size_t queue = size_t(w.op->queue);
  // The wait is on the compute lane only if it blocked (the timeline's query reads no clock otherwise).
  const bool timed = timeline_ && queue == 0 &&
                     std::any_of(f.handles.begin(), f.handles.end(),
                                 [&](CollectiveHandle h) { return !backend_->collectiveDone(h); });
  int64_t m0 = -1;
  if (timed) {
    LLCDIST_ASSIGN_OR_RETURN(m0, backend_->markTime(streams_[0]));
  }
  Status st;
  for (CollectiveHandle h : f.handles) {
    Status one = backend_->waitCollective(streams_[queue], h);
    if (st.isOk() && !one.isOk()) st = one;  // every handle is waited for, even after an error
  }
  if (timed) {
    LLCDIST_ASSIGN_OR_RETURN(const int64_t m1, backend_->markTime(streams_[0]));
    pending_.push_back({{sc::opName(sc::OpKind::kWait), TraceLane::kCompute, 0, 0, &w.op->loc,
                         &program_->subroutines[s].name, step, microbatch, action_},
                        m0, m1});
  }
  if (!st.isOk())
    return st.withContext("the communication of token " + std::to_string(w.op->token) + " (" +
                          where(f.subroutine, f.opIndex) + ")");
  if (trace_) traceWait(*f.op);
  inFlight_.erase(it);
  return Status::ok();
}

// Forgets the tokens of a failed step without waiting for them: their calls may be blocked on peers
// that wait for this rank, and only the run's abort of the communicator (Train.cpp), after this rank
// has returned, releases them; the backend joins its workers when it is destroyed.
void Interpreter::abandonInFlight() {
  inFlight_.clear();
  for (auto& q : deferred_) q.clear();
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
  if (schema::communicates(b.call.kind)) return runCommunication(b, microbatch, subroutine_, step);
  if (launchesKernel(b.call.kind)) {
    if (schema::isOptimizerUpdate(b.call.kind)) {
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
  const int64_t idsAt = program_->buffers[size_t(idsId)].offsetAt(b.slot);
  const int64_t tgtAt = program_->buffers[size_t(tgtId)].offsetAt(b.slot);
  LLCDIST_RETURN_IF_ERROR(backend_->copyToDevice(stream_, idsAt, idsHost_.data(), n * 4));
  return backend_->copyToDevice(stream_, tgtAt, targetsHost_.data(), n * 4);
}

Status Interpreter::runSubroutine(size_t s, int64_t step, int64_t microbatch, double lr, const MicrobatchSource& data,
                                  int64_t slot) {
  if (s >= subroutines_.size()) return Status::outOfRange("subroutine index " + std::to_string(s) + " out of range");
  if (slot < 0 || slot >= int64_t(subroutines_[s].size()))
    return Status::outOfRange("subroutine '" + program_->subroutines[s].name + "' has no binding for slot " +
                              std::to_string(slot) + " (no action runs it in that slot or a higher one)");
  const std::vector<BoundOp>& ops = subroutines_[s][size_t(slot)];
  subroutine_ = s;
  for (size_t i = 0; i < ops.size(); ++i) {
    const sc::OpKind kind = ops[i].call.kind;
    if (kind == sc::OpKind::kWait) {  // records itself, only when it blocked
      LLCDIST_RETURN_IF_ERROR(waitToken(ops[i], s, step, microbatch).withContext(where(s, i)));
      continue;
    }
    if (ops[i].op->startsAsync()) {  // recorded on its queue's lane when it runs
      LLCDIST_RETURN_IF_ERROR(startAsync(ops[i], s, i, step, microbatch).withContext(where(s, i)));
      if (trace_) traceOp(ops[i]);
      continue;
    }
    // The measured timeline (Timeline.h): no clock is read unless one is attached. Every op but
    // load_microbatch launches a kernel or communicates; communication on another queue is recorded
    // on that queue's lane by the thread that runs it.
    const bool timed = timeline_ && kind != sc::OpKind::kLoadMicrobatch && ops[i].op->queue == 0;
    int64_t m0 = -1;
    if (timed) {
      LLCDIST_ASSIGN_OR_RETURN(m0, backend_->markTime(stream_));
    }
    LLCDIST_RETURN_IF_ERROR(runOp(ops[i], step, microbatch, lr, data).withContext(where(s, i)));
    if (timed) {
      LLCDIST_ASSIGN_OR_RETURN(const int64_t m1, backend_->markTime(stream_));
      const bool communicates = !launchesKernel(kind);
      TimelineEvent e{sc::opName(kind), communicates ? TraceLane::kCommunication : TraceLane::kCompute, 0, 0,
                      &ops[i].op->loc, &program_->subroutines[s].name, step, microbatch, action_};
      e.variant = ops[i].variant;
      e.flops = ops[i].flops;
      pending_.push_back({e, m0, m1});
    }
    if (trace_) traceOp(ops[i]);  // the memory measurement hook: one position per executed op
  }
  // A subroutine run outside a step (tests, tools) records its intervals now; a step does at its end.
  if (action_ < 0 && !pending_.empty()) {
    LLCDIST_RETURN_IF_ERROR(backend_->synchronize());
    return recordPending();
  }
  return Status::ok();
}

// The step's timed intervals, from their marks (valid after synchronize), into the timeline.
Status Interpreter::recordPending() {
  Status st;
  for (PendingInterval& p : pending_) {
    StatusOr<int64_t> t0 = backend_->markTimeNs(p.startMark), t1 = backend_->markTimeNs(p.endMark);
    if (!t0.isOk() || !t1.isOk()) {
      st = t0.isOk() ? t1.status() : t0.status();
      break;
    }
    p.event.startNs = *t0;
    p.event.endNs = *t1;
    timeline_->record(p.event);
  }
  pending_.clear();
  backend_->clearTimeMarks();
  return st;
}

Status Interpreter::runStep(int64_t step, double lr, const MicrobatchSource& data) {
  if (!memory_) {  // the first step is traced (every step executes the same ops)
    trace_ = std::make_unique<MemoryTrace>();
    trace_->buffers.resize(size_t(instanceBase_.empty() ? 0 : instanceBase_.back() +
                                                                  program_->buffers.back().instances()));
  }
  for (size_t a = 0; a < program_->actions.size(); ++a) {
    const Action& act = program_->actions[a];
    action_ = int64_t(a);
    Status st = runSubroutine(size_t(act.subroutine), step, act.microbatch, lr, data, act.slot)
                    .withContext("step " + std::to_string(step) + ", action " + std::to_string(a));
    action_ = -1;
    if (!st.isOk()) {
      abandonInFlight();
      trace_.reset();  // a failed step measures nothing; the next one is traced again
      pending_.clear();
      backend_->clearTimeMarks();
      return st;
    }
  }
  if (!inFlight_.empty()) {  // the loader's "never waited" rule makes this unreachable
    abandonInFlight();
    trace_.reset();
    pending_.clear();
    backend_->clearTimeMarks();
    return Status::internal(program_->file + ": communication still in flight at the end of step " +
                            std::to_string(step));
  }
  Status st = backend_->synchronize();
  if (trace_ && st.isOk()) memory_ = finishTrace();
  trace_.reset();
  if (!st.isOk()) {
    pending_.clear();
    backend_->clearTimeMarks();
    return st;
  }
  return pending_.empty() ? st : recordPending();
}

// The wait of an asynchronous op: one position, at which the op's buffers are touched again (they are
// live from its start through here: docs/plan-format.md "Asynchronous plans").
void Interpreter::traceWait(const BoundOp& started) {
  MemoryTrace& t = *trace_;
  const int64_t pos = t.position++;
  for (const BoundOp::Use& u : started.uses) {
    MemoryTrace::Buffer& buf = t.buffers[size_t(u.instance)];  // the instance its start touched
    if (buf.start >= 0) buf.last = pos;  // the lifetime its start opened (or continued)
  }
}

void Interpreter::traceOp(const BoundOp& b) {
  MemoryTrace& t = *trace_;
  const int64_t pos = t.position++;
  for (const BoundOp::Use& u : b.uses) {
    MemoryTrace::Buffer& buf = t.buffers[size_t(u.instance)];
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
  m.stagingBytes = stagingElems_ * int64_t(sizeof(float));
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
  // Per instance of each buffer (a slotted buffer's instances are separate memory: docs/plan-format.md).
  for (size_t id = 0; id < program_->buffers.size(); ++id) {
    const BufferDesc& b = program_->buffers[id];
    for (int64_t k = 0; k < b.instances(); ++k) {
      const MemoryTrace::Buffer& u = t.buffers[size_t(instanceBase_[id] + k)];
      if (u.touched) m.arenaHighWaterBytes = std::max(m.arenaHighWaterBytes, b.offsetAt(k) + b.bytes);
      if (sc::livesWholeStep(b.kind)) {
        wholeStep += aligned(b.bytes);
      } else if (u.start >= 0) {  // the open lifetime; a carried value lives on into the next step
        live(int64_t(id), u.start, u.carried ? positions - 1 : u.last);
      }
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
