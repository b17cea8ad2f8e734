// The interpreter's communication: collectives and send / recv issued on their queue's stream, and
// the asynchronous plans' started ops, their waits and the checking mode (--check-async). See
// Interpreter.h; the binding and the steps are Interpreter.cpp.
#include "llcdist/runtime/FlightRecorder.h"
#include "llcdist/runtime/Interpreter.h"

#include <algorithm>
#include <cstring>

namespace llcdist::rt {

namespace sc = schema;

namespace {
// The element type of a buffer as it is stored.
CommDType storedDType(sc::ElemType t) {
  switch (t) {
    case sc::ElemType::kBF16:
      return CommDType::kBF16;
    case sc::ElemType::kI32:
      return CommDType::kI32;
    case sc::ElemType::kF64:
      return CommDType::kF64;
    default:
      return CommDType::kF32;
  }
}

// The element type a send or recv moves: its buffer's (an i32 buffer's too: the load-balancing loss's
// counts). all_to_all_v's too (x's, which is y's; bound without f32 temporaries): a copy of rows, bf16
// rows as bf16 (2 bytes an element) with or without its attr dtype "bf16".
CommDType p2pDType(const KernelCall& c) { return storedDType(c.type(0, 0)); }
}  // namespace

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
      // f64, an i32 one (the load-balancing loss's counts) in i32; the others in the op's dtype.
      const sc::ElemType t = c.type(0, k);
      const CommDType dtype = t == sc::ElemType::kF64 || t == sc::ElemType::kI32 ? storedDType(t) : p->dtype;
      LLCDIST_ASSIGN_OR_RETURN(CollectiveHandle h, backend_->allReduceAsync(stream, c.args[0][k], c.argElems[0][k],
                                                                            dtype, p->reduceOp, b.channel));
      handles->push_back(h);
    }
  } else {
    StatusOr<CollectiveHandle> h =
        c.kind == K::kAllGather  ? backend_->allGatherAsync(stream, c.args[0][0], c.args[1][0], p->outer, p->inner,
                                                            p->total, p->dtype, b.channel)
        : c.kind == K::kAllToAll ? backend_->allToAllAsync(stream, c.args[0][0], c.args[1][0], p->outer, p->mid,
                                                           p->inner, p->xRankDim, p->dtype, b.channel)
        // all_to_all_v: x, send_splits, y, recv_splits (PlanSchema.h kAllToAllVArgs).
        : c.kind == K::kAllToAllV
            ? backend_->allToAllVAsync(stream, c.args[0][0], p->xRows, static_cast<const int32_t*>(c.args[1][0]),
                                       c.args[2][0], p->yRows, static_cast<int32_t*>(c.args[3][0]), p->chunks,
                                       p->rowElems, p2pDType(c), b.channel)
        : c.kind == K::kReduceScatter
            ? backend_->reduceScatterAsync(stream, c.args[0][0], c.args[1][0], p->outer, p->inner, p->total, p->dtype,
                                           p->reduceOp, b.channel)
        // send / recv move the buffer as it is stored (a bf16 buffer as bf16).
        : c.kind == K::kSend
            ? backend_->sendAsync(stream, c.args[0][0], c.argElems[0][0], p2pDType(c), p->peer, p->tag, microbatch)
        : c.kind == K::kRecv
            ? backend_->recvAsync(stream, c.args[0][0], c.argElems[0][0], p2pDType(c), p->peer, p->tag, microbatch)
            : StatusOr<CollectiveHandle>(Status::internal("not a communication op"));
    if (!h.isOk()) return h.status();
    handles->push_back(h.value());
  }
  if (t0) {
    Timeline* timeline = timeline_;
    TimelineEvent e{sc::opName(c.kind),
                    TraceLane::kCommunication,
                    0,
                    0,
                    &b.op->loc,
                    &program_->subroutines[subroutine].name,
                    step,
                    microbatch,
                    action_,
                    int(queue)};
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
  // all_to_all_v's run-time errors (its splits) name the axis too; the caller adds the op.
  const std::string axis = b.call.kind == sc::OpKind::kAllToAllV ? "axis " + b.op->stringAttr("axis") : "";
  const auto named = [&](Status s) { return axis.empty() ? s : std::move(s).withContext(axis); };
  LLCDIST_RETURN_IF_ERROR(named(issueCommunication(b, queue, microbatch, subroutine, step, &handles)));
  for (CollectiveHandle h : handles) LLCDIST_RETURN_IF_ERROR(named(backend_->waitCollective(streams_[0], h)));
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
      // A device backend's copies complete later: the saved values and the poison must outlive them.
      LLCDIST_RETURN_IF_ERROR(backend_->synchronize());
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
      LLCDIST_RETURN_IF_ERROR(backend_->synchronize());  // `now` holds the copy
      if (now != poisonBytes(buf))
        return Status::invalidArgument("--check-async: buffer " + std::to_string(u.id) + " (\"" + buf.name +
                                       "\") was written while " + where(f.subroutine, f.opIndex) +
                                       " had it in flight (token " + std::to_string(t) + "): a missing or late wait");
      LLCDIST_RETURN_IF_ERROR(backend_->copyToDevice(streams_[0], at, f.saved[k++].data(), buf.bytes));
    }
    LLCDIST_RETURN_IF_ERROR(backend_->synchronize());  // the restores have read f.saved
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
  const bool timed =
      timeline_ && queue == 0 &&
      std::any_of(f.handles.begin(), f.handles.end(), [&](CollectiveHandle h) { return !backend_->collectiveDone(h); });
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
                        m0,
                        m1});
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

}  // namespace llcdist::rt
