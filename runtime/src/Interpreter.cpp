// Binds a program's ops to KernelCalls and runs its actions. See Interpreter.h.
#include "llcdist/runtime/Interpreter.h"

#include "ops/OpDefs.h"

#include "llcdist/runtime/Bf16.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace llcdist::rt {

namespace sc = schema;

namespace {
// Ops that take bf16 buffers as they are (no f32 staging): fill_zero, cast, load_microbatch, the
// collectives with dtype "bf16" (reduced in bf16 on the buffers themselves) and send / recv (which move
// a buffer as it is stored).
// all_to_all_v copies rows (no arithmetic): its bf16 rows move as they are, attr dtype or not.
bool handlesBf16Itself(const Op& op) {
  return sc::handlesBf16Itself(op.kind) || sc::isPointToPoint(op.kind) || op.kind == sc::OpKind::kAllToAllV ||
         ops::commDType(op) == CommDType::kBF16;
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
                            std::to_string(backend.arenaBytes()) +
                            " bytes for arena_bytes = " + std::to_string(in->program_->arenaBytes));
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
  // The step's values, in device memory, if an optimizer update reads them (bound into its call).
  const bool updates = std::any_of(subs.begin(), subs.end(), [](const Subroutine& sub) {
    return std::any_of(sub.ops.begin(), sub.ops.end(), [](const Op& op) { return sc::isOptimizerUpdate(op.kind); });
  });
  if (updates) {
    constexpr int64_t kFloats = int64_t((sizeof(StepValues) + sizeof(float) - 1) / sizeof(float));
    LLCDIST_ASSIGN_OR_RETURN(float* device, backend.allocateStaging(kFloats));
    LLCDIST_ASSIGN_OR_RETURN(void* host, backend.allocateHostInput(int64_t(sizeof(StepValues))));
    in->stepValuesDevice_ = reinterpret_cast<StepValues*>(device);
    in->stepValuesHost_ = static_cast<StepValues*>(host);
  }
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
  LLCDIST_RETURN_IF_ERROR(in->allocateStepInputs());
  return in;
}

// One host input per load_microbatch of the step, in execution order (the actions', each running its
// subroutine's ops bound to its slot).
Status Interpreter::allocateStepInputs() {
  for (size_t a = 0; a < program_->actions.size(); ++a) {
    const Action& act = program_->actions[a];
    const std::vector<BoundOp>& ops = subroutines_[size_t(act.subroutine)][size_t(act.slot)];
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].call.kind != sc::OpKind::kLoadMicrobatch) continue;
      const DataParams* batch = ops[i].call.paramsAs<DataParams>();
      if (!batch)
        return Status::internal(where(size_t(act.subroutine), i) + ": load_microbatch bound without its parameters");
      const int64_t n = batch->B * batch->S;
      LLCDIST_ASSIGN_OR_RETURN(void* host, backend_->allocateHostInput(2 * n * int64_t(sizeof(int32_t))));
      int32_t* ids = static_cast<int32_t*>(host);
      inputs_.push_back(
          StepInput{a, size_t(act.subroutine), i, &ops[i], act.microbatch, batch->B, batch->S, ids, ids + n});
    }
  }
  return Status::ok();
}

namespace {
// A load_microbatch's batch from the data source, into host memory.
Status fetchBatch(const MicrobatchSource& data, int64_t step, int64_t microbatch, int32_t* ids, int32_t* targets,
                  int64_t B, int64_t S) {
  if (!data) return Status::invalidArgument("load_microbatch: no data source was given");
  if (microbatch < 0) return Status::invalidArgument("load_microbatch: the action has no microbatch");
  return data(step, microbatch, ids, targets, B, S);
}
}  // namespace

// Before a step (the previous one has synchronized): the step's values and every batch it loads.
Status Interpreter::writeStepInputs(int64_t step, double lr, const MicrobatchSource& data) {
  if (stepValuesHost_) *stepValuesHost_ = StepValues{lr, step + 1};
  for (const StepInput& in : inputs_) {
    Status st = fetchBatch(data, step, in.microbatch, in.ids, in.targets, in.B, in.S);
    if (!st.isOk())
      return std::move(st)
          .withContext(where(in.subroutine, in.opIndex))
          .withContext("step " + std::to_string(step) + ", action " + std::to_string(in.action));
  }
  return Status::ok();
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
  if (!def)
    return Status::internal("op " + std::string(sc::opName(op.kind)) + " has no definition (docs/adding-an-op.md)");
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
        use = out->uses.insert(
            out->uses.end(),
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
    return Status::invalidArgument(
        "asynchronous communication (\"token\") on bf16 buffers is not supported by "
        "this runtime; run it synchronously");
  c.params = binding.params;
  if (sc::isOptimizerUpdate(op.kind)) c.stepValues = stepValuesDevice_;
  out->variant = binding.variantName;
  out->flops = kernelFlops(c);
  return Status::ok();
}

Status Interpreter::runOp(const BoundOp& b, int64_t step, int64_t microbatch, const MicrobatchSource& data) {
  if (!b.convertIn.empty() || !b.convertOut.empty()) {  // bf16 arguments: convert in, run in f32, round out
    for (const KernelCall& in : b.convertIn)
      LLCDIST_RETURN_IF_ERROR(backend_->launch(stream_, in).withContext("converting a bf16 argument to f32"));
    LLCDIST_RETURN_IF_ERROR(execute(b, step, microbatch, data));
    for (const KernelCall& out : b.convertOut)
      LLCDIST_RETURN_IF_ERROR(backend_->launch(stream_, out).withContext("rounding an f32 result to bf16"));
    return Status::ok();
  }
  return execute(b, step, microbatch, data);
}

// The op itself, on b.call's addresses (arena, or f32 temporaries for bf16 arguments).
Status Interpreter::execute(const BoundOp& b, int64_t step, int64_t microbatch, const MicrobatchSource& data) {
  if (schema::communicates(b.call.kind)) return runCommunication(b, microbatch, subroutine_, step);
  if (launchesKernel(b.call.kind)) return backend_->launch(stream_, b.call);
  if (action_ >= 0) {  // in a step: the batch is the op's host input, written before the step
    if (nextInput_ >= inputs_.size() || inputs_[nextInput_].op != &b)
      return Status::internal("load_microbatch out of the step's order of inputs");
    const StepInput& in = inputs_[nextInput_++];
    const int64_t bytes = in.B * in.S * int64_t(sizeof(int32_t));
    const int64_t idsAt = program_->buffers[size_t(b.op->arg("ids"))].offsetAt(b.slot);
    const int64_t tgtAt = program_->buffers[size_t(b.op->arg("targets"))].offsetAt(b.slot);
    LLCDIST_RETURN_IF_ERROR(backend_->copyHostInput(stream_, backend_->arenaAt(idsAt), in.ids, bytes));
    return backend_->copyHostInput(stream_, backend_->arenaAt(tgtAt), in.targets, bytes);
  }
  const DataParams* batch = b.call.paramsAs<DataParams>();
  if (!batch) return Status::internal("load_microbatch bound without its parameters");
  const int64_t n = batch->B * batch->S;
  idsHost_.assign(size_t(n), 0);
  targetsHost_.assign(size_t(n), 0);
  LLCDIST_RETURN_IF_ERROR(fetchBatch(data, step, microbatch, idsHost_.data(), targetsHost_.data(), batch->B, batch->S));
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
  if (action_ < 0 && stepValuesDevice_) {              // outside a step: the optimizer updates' values, now
    LLCDIST_RETURN_IF_ERROR(backend_->synchronize());  // the last copy of the host values has run
    *stepValuesHost_ = StepValues{lr, step + 1};
    LLCDIST_RETURN_IF_ERROR(backend_->copyHostInput(stream_, stepValuesDevice_, stepValuesHost_, sizeof(StepValues)));
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    const sc::OpKind kind = ops[i].call.kind;
    if (recorder_) recorder_->setContext("action " + std::to_string(action_) + ": " + where(s, i));
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
    LLCDIST_RETURN_IF_ERROR(runOp(ops[i], step, microbatch, data).withContext(where(s, i)));
    if (timed) {
      LLCDIST_ASSIGN_OR_RETURN(const int64_t m1, backend_->markTime(stream_));
      const bool communicates = !launchesKernel(kind);
      TimelineEvent e{sc::opName(kind),
                      communicates ? TraceLane::kCommunication : TraceLane::kCompute,
                      0,
                      0,
                      &ops[i].op->loc,
                      &program_->subroutines[s].name,
                      step,
                      microbatch,
                      action_};
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
  if (recorded_ && !whyNotRecorded().empty()) {  // a timeline or checking mode was set since
    recorded_.reset();
    graph_ = -1;
    execution_ = StepExecution{};
  }
  LLCDIST_RETURN_IF_ERROR(writeStepInputs(step, lr, data));
  if (!memory_) {  // the first step is traced (every step executes the same ops)
    trace_ = std::make_unique<MemoryTrace>();
    trace_->buffers.resize(
        size_t(instanceBase_.empty() ? 0 : instanceBase_.back() + program_->buffers.back().instances()));
  } else if (!recorded_ && !recordRefused_) {
    execution_.whyNotRecorded = whyNotRecorded();
    if (execution_.whyNotRecorded.empty()) LLCDIST_RETURN_IF_ERROR(recordStep(step, data));
  }
  Status st = recorded_ ? replayStep(step) : runActions(step, data);
  if (!st.isOk()) return st;
  st = backend_->synchronize();
  if (trace_ && st.isOk()) memory_ = finishTrace();
  trace_.reset();
  if (!st.isOk()) {
    pending_.clear();
    backend_->clearTimeMarks();
    return st;
  }
  return pending_.empty() ? st : recordPending();
}

// The step's actions, op by op: the step's values copied first, then each action's subroutine.
Status Interpreter::runActions(int64_t step, const MicrobatchSource& data) {
  nextInput_ = 0;
  Status st;
  if (stepValuesDevice_)
    st = backend_->copyHostInput(stream_, stepValuesDevice_, stepValuesHost_, int64_t(sizeof(StepValues)))
             .withContext("step " + std::to_string(step) + ": copying the step's values");
  for (size_t a = 0; a < program_->actions.size() && st.isOk(); ++a) {
    const Action& act = program_->actions[a];
    action_ = int64_t(a);
    st = runSubroutine(size_t(act.subroutine), step, act.microbatch, /*lr: in the step's values*/ 0, data, act.slot)
             .withContext("step " + std::to_string(step) + ", action " + std::to_string(a));
    action_ = -1;
  }
  if (st.isOk() && !inFlight_.empty())  // the loader's "never waited" rule makes this unreachable
    st =
        Status::internal(program_->file + ": communication still in flight at the end of step " + std::to_string(step));
  if (!st.isOk()) {
    abandonInFlight();
    trace_.reset();  // a failed step measures nothing; the next one is traced again
    pending_.clear();
    backend_->clearTimeMarks();
  }
  return st;
}

std::string Interpreter::whyNotRecorded() const {
  if (!recordSteps_) return "--cuda-graphs off";
  if (timeline_) return "a trace or profile times every op (--trace, --profile)";
  if (checkAsync_) return "--check-async runs started communication at its wait";
  return "";
}

// Records the step's calls (nothing runs), then keeps them as the list every step from this one on
// replays, captured into a device graph where the backend can. A refused recording (a call a recorded
// step cannot make) leaves the steps op by op, with the refusal as the reason.
Status Interpreter::recordStep(int64_t step, const MicrobatchSource& data) {
  auto list = std::make_unique<CommandList>();
  CommandRecorder recorder(*backend_, *list);
  Backend* real = backend_;
  backend_ = &recorder;
  recorder_ = &recorder;
  const Status st = runActions(step, data);
  backend_ = real;
  recorder_ = nullptr;
  if (!st.isOk()) {
    execution_.whyNotRecorded = "recording the step was refused: " + st.message();
    recordRefused_ = true;
    return Status::ok();
  }
  execution_.recorded = true;
  execution_.commands = int64_t(list->size());
  execution_.launches = list->launches();
  if (backend_->canCaptureGraph(&execution_.whyNoGraph)) {
    // Nothing runs during a capture, so a failed one leaves the list to be replayed call by call.
    Status captured = backend_->beginGraphCapture();
    if (captured.isOk()) {
      captured = list->replay(*backend_, step);
      StatusOr<int> graph = backend_->endGraphCapture();  // ended even after a failed replay
      if (captured.isOk()) captured = graph.status();
      if (captured.isOk()) graph_ = graph.value();
    }
    execution_.deviceGraph = graph_ >= 0;
    execution_.whyNoGraph = captured.isOk() ? "" : "capturing the step failed: " + captured.message();
  }
  recorded_ = std::move(list);
  return Status::ok();
}

Status Interpreter::replayStep(int64_t step) {
  if (graph_ >= 0) return backend_->launchGraph(graph_).withContext("step " + std::to_string(step) + " (its graph)");
  return recorded_->replay(*backend_, step);
}

// The wait of an asynchronous op: one position, at which the op's buffers are touched again (they are
// live from its start through here: docs/plan-format.md "Asynchronous plans").
void Interpreter::traceWait(const BoundOp& started) {
  MemoryTrace& t = *trace_;
  const int64_t pos = t.position++;
  for (const BoundOp::Use& u : started.uses) {
    MemoryTrace::Buffer& buf = t.buffers[size_t(u.instance)];  // the instance its start touched
    if (buf.start >= 0) buf.last = pos;                        // the lifetime its start opened (or continued)
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
  if (id < 0 || id >= int64_t(program_->buffers.size()))
    return Status::outOfRange("buffer id " + std::to_string(id) + " out of range");
  const BufferDesc& b = program_->buffers[size_t(id)];
  LLCDIST_RETURN_IF_ERROR(backend_->copyToHost(stream_, dst, b.offset, b.bytes));
  return backend_->synchronize();
}

Status Interpreter::writeBuffer(int64_t id, const void* src) {
  if (id < 0 || id >= int64_t(program_->buffers.size()))
    return Status::outOfRange("buffer id " + std::to_string(id) + " out of range");
  const BufferDesc& b = program_->buffers[size_t(id)];
  LLCDIST_RETURN_IF_ERROR(backend_->copyToDevice(stream_, b.offset, src, b.bytes));
  return backend_->synchronize();
}

StatusOr<std::vector<float>> Interpreter::readF32(int64_t id) {
  if (id < 0 || id >= int64_t(program_->buffers.size()))
    return Status::outOfRange("buffer id " + std::to_string(id) + " out of range");
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
  if (id < 0 || id >= int64_t(program_->buffers.size()))
    return Status::outOfRange("buffer id " + std::to_string(id) + " out of range");
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
