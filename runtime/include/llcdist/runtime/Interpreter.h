// Executes one program of a validated plan (Plan.h) on a Backend (Backend.h).
//
// create() allocates the program's arena on the backend (zero-filled) and binds every op once: buffer
// ids become device addresses, and the op family's binder (src/ops/<Family>.cpp) turns attrs, mesh and
// rank into the call's typed parameters (OpParams.h; RoPE tables are built there); a kernel op whose
// kind the backend has no kernel for is an error (Backend::hasKernel). runStep(step) then
// runs the program's actions in order; an action runs its subroutine's ops in order on the default
// stream. Ops other than load_microbatch are backend launches; load_microbatch asks the data source
// for the (step, microbatch) batch and copies it into its ids/targets buffers. Optimizer ops (adamw,
// sgd) get the step's learning rate and t = step + 1.
//
// Per-step inputs: what differs between two steps of a bound program is written to memory before the
// step, never passed to a launch. The step's values (StepValues: learning rate, t = step + 1) are in
// device memory outside the arena, bound once into every optimizer update (KernelCall::stepValues);
// every load_microbatch of the step has its own host input (Backend::allocateHostInput: pinned on
// CUDA), one per (action, op), found by walking the actions at create(). runStep first writes the
// values and asks the data source for every batch of the step (in action order) into those inputs;
// then the step copies the values to the device (its first call) and each load_microbatch copies its
// input into its ids / targets buffers (Backend::copyHostInput: the host does not wait). The inputs are
// rewritten only at the next runStep, after this one has synchronized. A subroutine run outside a step
// (runSubroutine) writes and copies the values itself and loads its batch directly.
//
// Recorded steps (CommandList.h; `--cuda-graphs`, on by default): the first step runs op by op (it is
// the traced one, and it grows every workspace to its size). The next one is recorded: the interpreter
// runs it against a CommandRecorder, which runs nothing and lists the backend calls, then replays the
// list on the backend, or, where the backend can (CUDA: Backend::canCaptureGraph), captures one replay
// into a device graph and launches that. Every later step writes its inputs and replays the list or
// launches the graph: no op is walked, bound or branched on again. Steps are not recorded with a
// timeline (--trace, --profile: it reads the clock around ops), in checking mode (--check-async: started
// ops run at their waits), when recording is turned off (setRecordSteps(false)), or when the recording
// was refused (a call a recorded step cannot make): those steps run op by op, and stepExecution() says
// why. A replayed op's error reads as the op-by-op one: "step N, action a: <program>: subroutine ...".
//
// Multi-rank plans: the interpreter runs one rank (`rank`, its global rank in the manifest's mesh).
// Collective ops (all_reduce, all_gather, reduce_scatter, all_to_all) act on the group of `rank` on the
// op's `axis`, one axis or a set such as "dp+cp" (Mesh::group; all_reduce's `group_size` sub-group).
// create() makes one backend channel per distinct group of the program's collectives
// (Backend::createChannel), once, and each collective runs on its group's channel (docs/plan-format.md
// "Channels"); all_reduce issues one backend all-reduce per buffer of `x`, in list order (an f64
// buffer, a kernel's partial reduction, in f64; the others in the op's dtype), and every collective
// is waited for on the default stream before the next op. Kernels never
// communicate. Ops with attr `shard_axis` (vocabulary-parallel embedding and cross entropy) get the
// rank's vocabulary slice (EmbeddingParams / LossParams::vocabShard); position embeddings with
// `shard_axis` (sequence parallelism) get the positions of the rank's rows (EmbeddingParams::posBegin,
// posSplit, posBegin2: c·S + s, c the rank's coordinate on that axis, or cp's mesh.cp_layout on cp), and
// rope ops with `shard_axis` a table for those positions. grad_norm_sq with `replica_axis` gets the rank's member index there
// (OptimizerParams::member).
// shard_slice (ZeRO plans) is a kernel launch (no communication) that gets the rank's group on `axis`
// and its member index there (LayoutParams::member); bf16 arguments are handled as for every float op.
// Pipeline plans (and ring attention): send / recv resolve their peer once, at bind time: the global rank
// with this rank's coordinates except `peer` on `axis`, or with `shift` (c + shift) mod n there
// (Mesh::withCoord); a peer equal to the rank's own coordinate is a
// bind error naming the op. At run time they call the backend's sendAsync / recvAsync with the op's tag
// and the running action's microbatch (-1 when it has none), and wait for them on the default stream.
// The data source is per rank: the caller binds the rank's dp coordinate into it (Train.h).
//
// Kernel variants (KernelVariant.h): create() chooses, once per op, which of the backend's variants of
// its kind runs it (Backend::kernelVariants, chooseKernelVariant: from the op's buffer dtypes, its bound
// parameters and Backend::kernelSelectOptions), sets KernelCall::variant, and calls Backend::prepare for
// every bound kernel call. kernelChoices() lists the choices (the profile and the trace print them).
//
// bf16 buffers (docs/plan-format.md "bf16 storage, fp32 arithmetic"): a kernel variant that takes a
// role in bf16 gets the bf16 buffer as it is. Otherwise (every CPU kernel; communication ops except
// zero, load_microbatch, all_to_all_v (a copy of rows) and the collectives of dtype "bf16", which get
// their bf16 buffers as they are and reduce in bf16: "Collective dtypes") each bf16 argument of a float role is bound to an f32
// temporary in the interpreter's staging area (backend memory, sized once at create() to the largest
// need of one op; one temporary per distinct buffer of the op). Before the op the temporaries of roles it
// reads (read, or read-write: Op::access) are filled from the arena (exact); after it, the temporaries of
// roles it writes are rounded back into the arena (nearest even). The conversions are `cast` launches on
// the backend. Ops without bf16 arguments run on arena addresses directly (no copies). Collectives of
// dtype f32 (the default) and send / recv on bf16 buffers therefore communicate f32 values with the usual
// member-order rules.
//
// Asynchronous plans (feature "async", docs/plan-format.md "Asynchronous plans"): create() makes one
// backend stream per program queue (queue 0, "compute", is the default stream every kernel runs on)
// and an event per other queue. A communication op on queue q != 0 is ordered after all compute work
// issued so far (an event recorded on compute, waited on q's stream) and issued on q's stream. An op
// with a token is started: its handles (one per backend call; all_reduce makes one per buffer of x)
// are kept under the token and not waited for; the `wait` op waits them on its own queue's stream (the
// host blocks when that is compute) and reports their error with the started op's location. An op
// without a token is waited for on compute before the next op, as in every synchronous plan (which
// takes exactly the old path: queue 0, issue, wait). The loader's token rules guarantee every wait
// finds its token; a failed step forgets its tokens without waiting (their calls end with the run's
// abort of the communicator). An async op on bf16 buffers is a bind error (its f32 temporaries would
// outlive the op in the shared staging area).
// Checking mode (setCheckAsync, `--check-async`): a started op does not run at its start; its written
// buffers are filled with a quiet-NaN poison there (its in-place buffers' values kept aside), and at
// its token's wait the ops started on its queue run in start order up to it, each first checking that
// its in-place buffers still hold the poison (an error naming the buffer and the op otherwise), then
// restoring them and running synchronously.
//
// Memory measurement (docs/plan-format.md "Memory"): the first runStep() traces the ops it executes
// (the hook is in runSubroutine's op loop, after each op ran): op positions 0, 1, ... in execution
// order across the step's actions, and for each buffer the op positions that touch it. At the end of
// that step memoryStats() is computed: the arena high-water mark (the largest offset + bytes of any
// buffer an op touched) and the peak of live bytes: the max over op positions of Σ bytes rounded up to
// kArenaAlignment over the buffers live there. param, grad, optimizer_state, input and metric buffers
// are live for the whole step. An activation or scratch buffer is live from an op that writes it
// without reading it (a new value) to the last op that touches it before the next such write: one
// lifetime per value, e.g. one per microbatch when every microbatch's forward rewrites it. A buffer read
// before the step's first write of it holds a value from the previous step: live from position 0, and
// its last lifetime is live to the step's end. Later steps are not traced (they execute the same ops).
// A wait is an op position too, at which the started op's buffers are touched again (without starting
// a new value), so they are live from the start through the wait.
//
// Measured timeline (Timeline.h, `--trace`, `--profile`): with setTimeline(), runSubroutine's op loop
// makes a time mark on the compute stream before and after each op that launches a kernel or
// communicates (Backend::markTime: the host clock on the CPU, CUDA events on the GPU, so an interval is
// the op's execution, not its launch) and, once the step has synchronized, records the interval with
// the op's kind, kernel variant, FLOPs (kernelFlops), loc, subroutine, step, microbatch and action;
// without one it makes no mark. Communication on
// a queue q != 0 is timed by two host functions on q's stream around its calls (Backend::launchHostFunc)
// and recorded by the thread that runs them with TimelineEvent::queue = q; a wait on compute is
// recorded only when one of its handles was not yet complete (Backend::collectiveDone).
//
// Errors from an op carry where it is: "<program file>: subroutine 'backward' op 3 (linear_bwd_input,
// loc 'h.0.mlp.c_fc'): <kernel message>".
#pragma once

#include "llcdist/runtime/Backend.h"
#include "llcdist/runtime/CommandList.h"
#include "llcdist/runtime/Plan.h"
#include "llcdist/runtime/Status.h"
#include "llcdist/runtime/Timeline.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace llcdist::rt {

// Fills ids[B·S] and targets[B·S] (row-major [B,S]) of microbatch `microbatch` at `step` for this
// program's data-parallel rank.
using MicrobatchSource =
    std::function<Status(int64_t step, int64_t microbatch, int32_t* ids, int32_t* targets, int64_t B, int64_t S)>;

// What the interpreter measured in its first step (see above). Bytes are per rank (one arena).
struct MemoryStats {
  int64_t arenaBytes = 0;           // the program's arena_bytes (what the backend allocated)
  int64_t arenaHighWaterBytes = 0;  // max offset + bytes over the buffers the step's ops touched
  int64_t peakLiveBytes = 0;        // max over op positions of the live buffers' aligned bytes
  int64_t peakPosition = -1;        // first op position (0-based, execution order) at the peak; -1: no op ran
  int64_t opsExecuted = 0;          // op positions in the traced step
  int64_t stagingBytes = 0;         // f32 temporaries for bf16 arguments (backend memory, not in the arena)
};

class Interpreter {
 public:
  // `plan` and `backend` must outlive the interpreter. The backend must not have an arena yet. `rank`
  // is the global rank this interpreter runs (in [0, world size), one of programs[programIndex]'s ranks).
  static StatusOr<std::unique_ptr<Interpreter>> create(const Plan& plan, size_t programIndex, Backend& backend,
                                                       int rank = 0);
  ~Interpreter();
  int rank() const { return rank_; }
  size_t programIndex() const { return programIndex_; }  // index into plan.programs

  const Program& program() const { return *program_; }
  Backend& backend() { return *backend_; }

  // Runs every action of the program once: one training step. `lr` is the step's learning rate.
  Status runStep(int64_t step, double lr, const MicrobatchSource& data);
  // Runs one subroutine (by index) with the given microbatch (-1: none); for tests and tools.
  Status runSubroutine(size_t subroutine, int64_t step, int64_t microbatch, double lr, const MicrobatchSource& data,
                       int64_t slot = 0);

  // Host <-> buffer copies of a whole buffer (the host side has buffer.bytes bytes); synchronous.
  Status readBuffer(int64_t id, void* dst);
  Status writeBuffer(int64_t id, const void* src);
  // A float buffer's values as f32 (a bf16 buffer converted exactly); an i32 buffer is an error.
  StatusOr<std::vector<float>> readF32(int64_t id);
  // Writes numel() f32 values into a float buffer, converted to its dtype (bf16: nearest even).
  Status writeF32(int64_t id, const float* src);

  // Records every later op's interval into `timeline` (Timeline.h; owned by the caller, written by the
  // thread running this interpreter and, for communication on other queues, by the backend threads
  // that run it); nullptr (the default) records nothing and reads no clock.
  void setTimeline(Timeline* timeline);
  // Checking mode of asynchronous plans (`--check-async`, see above); off by default. Set before a step.
  void setCheckAsync(bool on) { checkAsync_ = on; }
  // Recorded steps (see above); on by default. Turning them off (or setting a timeline or checking mode)
  // after a step was recorded drops the recording.
  void setRecordSteps(bool on) { recordSteps_ = on; }
  // How the steps after the first run (see above).
  struct StepExecution {
    bool recorded = false;       // a recorded list, replayed (or launched as a device graph)
    bool deviceGraph = false;    // captured into one device graph (CUDA graphs)
    std::string whyNotRecorded;  // why the steps run op by op (recorded: empty)
    std::string whyNoGraph;      // recorded, but replayed call by call: why (Backend::canCaptureGraph)
    int64_t commands = 0;        // the recorded list's backend calls
    int64_t launches = 0;        // of which kernel launches
  };
  const StepExecution& stepExecution() const { return execution_; }

  // Channels create() made: one per distinct group of the program's collectives.
  size_t numChannels() const { return numChannels_; }

  // The kernel variants create() chose (KernelVariant.h), one entry per (op kind, variant) in order of
  // first appearance: how many ops of the program run it, how many of their arguments are converted
  // from bf16 to f32 temporaries, and (first op's) why earlier variants were passed over.
  struct KernelChoiceSummary {
    schema::OpKind kind;
    std::string variant;
    int64_t ops = 0;
    int64_t convertedArgs = 0;
    std::string passedOver;
  };
  const std::vector<KernelChoiceSummary>& kernelChoices() const { return kernelChoices_; }

  // The memory measured during the first runStep(); nullopt before a step has completed.
  const std::optional<MemoryStats>& memoryStats() const { return memory_; }

 private:
  struct BoundOp {
    KernelCall call;  // arena addresses; converted bf16 arguments: their f32 staging temporaries
    const Op* op = nullptr;
    std::string_view variant;  // the kernel variant's name (KernelVariant.h); empty for non-kernel ops
    double flops = 0;          // kernelFlops(call), for the timeline
    // bf16 arguments: cast launches arena -> staging before the op, staging -> arena after it.
    std::vector<KernelCall> convertIn, convertOut;
    // Every distinct buffer the op touches: whether it reads it (a read or read-write role, Op::access)
    // and whether it writes it, over all its roles; for the memory trace.
    struct Use {
      int64_t id;
      bool read, write;
      int64_t instance;  // the buffer's instance in the memory trace (instanceBase_[id] + slot)
    };
    std::vector<Use> uses;
    int64_t slot = 0;  // the instance of each slotted buffer the op is bound to
    Channel channel;   // collectives: their group's channel (createChannels)
  };
  struct MemoryTrace;
  Interpreter();
  // An op's binding that does not depend on the slot: its family's parameters, its kernel variant and
  // which bf16 arguments it gets as f32 temporaries (convert[r][k]).
  struct OpBinding {
    OpParams params;
    int variant = 0;
    std::string_view variantName;
    std::string passedOver;  // KernelChoice::passedOver
    std::vector<std::vector<bool>> convert;
  };
  StatusOr<OpBinding> chooseBinding(const Op& op);
  Status bind(const Op& op, const OpBinding& binding, int64_t slot, BoundOp* out);
  Status createChannels();
  int64_t stagingElems(const Op& op, const OpBinding& binding) const;
  void traceOp(const BoundOp& bound);
  MemoryStats finishTrace() const;
  // A communication op started with a token and not yet waited for (see above).
  struct InFlight {
    const BoundOp* op = nullptr;
    size_t subroutine = 0, opIndex = 0;
    int64_t step = 0, microbatch = -1;
    std::vector<CollectiveHandle> handles;      // issued on streams_[op->op->queue]
    bool deferred = false;                      // checking mode: not run yet
    std::vector<std::vector<std::byte>> saved;  // checking mode: the in-place buffers' values at the start
  };
  // Issues the op's backend calls on `stream` (one all-reduce per buffer of x), recording their
  // interval on the queue's lane when the queue is not compute; appends the handles without waiting.
  Status issueCommunication(const BoundOp& bound, size_t queue, int64_t microbatch, size_t subroutine, int64_t step,
                            std::vector<CollectiveHandle>* handles);
  // A communication op run to completion on queue `queue` (ordered after compute work) before the next op.
  Status runCommunication(const BoundOp& bound, int64_t microbatch, size_t subroutine, int64_t step);
  // Later work on stream `queue` waits for everything issued on compute so far.
  Status orderAfterCompute(size_t queue);
  Status startAsync(const BoundOp& bound, size_t subroutine, size_t opIndex, int64_t step, int64_t microbatch);
  Status waitToken(const BoundOp& wait, size_t subroutine, int64_t step, int64_t microbatch);
  // Checking mode: runs the deferred ops of `queue` in start order up to and including `token`.
  Status runDeferred(size_t queue, int64_t token);
  void traceWait(const BoundOp& started);
  void abandonInFlight();
  Status runOp(const BoundOp& bound, int64_t step, int64_t microbatch, const MicrobatchSource& data);
  Status execute(const BoundOp& bound, int64_t step, int64_t microbatch, const MicrobatchSource& data);
  // Per-step inputs (see above): the host-side writes before a step; the step's actions, op by op
  // (recorded when backend_ is the recorder); the recording and its replay.
  Status allocateStepInputs();
  Status writeStepInputs(int64_t step, double lr, const MicrobatchSource& data);
  Status runActions(int64_t step, const MicrobatchSource& data);
  std::string whyNotRecorded() const;
  Status recordStep(int64_t step, const MicrobatchSource& data);
  Status replayStep(int64_t step);
  std::string where(size_t subroutine, size_t opIndex) const;

  const Plan* plan_ = nullptr;
  const Program* program_ = nullptr;
  Backend* backend_ = nullptr;
  int rank_ = 0;
  size_t programIndex_ = 0;
  Stream stream_;
  // Per subroutine (parallel to program_->subroutines), per slot 0 .. the highest its actions run in: its ops
  // bound to that slot's instances of slotted buffers.
  std::vector<std::vector<std::vector<BoundOp>>> subroutines_;
  std::vector<int64_t> instanceBase_;           // per buffer: the memory trace index of its instance 0
  std::vector<int32_t> idsHost_, targetsHost_;  // load_microbatch outside a step
  // Per-step inputs (see above).
  StepValues* stepValuesDevice_ = nullptr;  // null: the program has no optimizer update
  StepValues* stepValuesHost_ = nullptr;
  struct StepInput {
    size_t action, subroutine, opIndex;
    const BoundOp* op;  // its load_microbatch
    int64_t microbatch, B, S;
    int32_t *ids, *targets;  // host inputs of B·S elements each
  };
  std::vector<StepInput> inputs_;  // the step's load_microbatch ops in execution order
  size_t nextInput_ = 0;           // the next one during a step
  // Recorded steps (see above).
  bool recordSteps_ = true;
  bool recordRefused_ = false;  // a recording was refused: not tried again
  std::unique_ptr<CommandList> recorded_;
  int graph_ = -1;                       // the device graph of recorded_, or -1
  CommandRecorder* recorder_ = nullptr;  // while recording: backend_ is it
  StepExecution execution_;
  float* staging_ = nullptr;            // f32 temporaries of bf16 arguments (one op at a time;
  int64_t stagingElems_ = 0;            // the backend's allocateStaging)
  std::unique_ptr<MemoryTrace> trace_;  // during the first runStep only
  std::optional<MemoryStats> memory_;
  Timeline* timeline_ = nullptr;  // --trace; not owned
  // The step's timed ops, recorded into timeline_ once the step has synchronized (their marks' times
  // are known then).
  struct PendingInterval {
    TimelineEvent event;
    int64_t startMark, endMark;
  };
  std::vector<PendingInterval> pending_;
  Status recordPending();
  std::vector<KernelChoiceSummary> kernelChoices_;
  int64_t action_ = -1;  // the action runStep is running; -1 outside a step
  size_t numChannels_ = 0;
  size_t subroutine_ = 0;  // the subroutine runSubroutine is running
  // Asynchronous plans: one stream per queue of the program (streams_[0] = stream_, the compute
  // queue) and an event per queue to order it after compute; the tokens in flight.
  std::vector<Stream> streams_;
  std::vector<Event> queueEvents_;
  std::map<int64_t, InFlight> inFlight_;
  bool checkAsync_ = false;
  std::vector<std::vector<int64_t>> deferred_;  // checking mode: per queue, started tokens not yet run
};

}  // namespace llcdist::rt
