//===- PlanDialect.h - the plan dialect -----------------------*- C++ -*-===//
#ifndef LLCDIST_DIALECT_PLAN_IR_PLANDIALECT_H
#define LLCDIST_DIALECT_PLAN_IR_PLANDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"

#include "llcdist/Dialect/Plan/IR/PlanDialect.h.inc"

#define GET_OP_CLASSES
#include "llcdist/Dialect/Plan/IR/PlanOps.h.inc"

namespace llcdist::plan {
/// Module attribute: the manifest fields (model, batch, mesh, optimizer,
/// lr_schedule, grad_clip) the emitter writes to manifest.json.
constexpr const char kManifestAttr[] = "plan.manifest";
/// Kernel attribute (llcdist-lower-to-plan's record-param-scopes): the
/// parameters whose reads in one scope (a layer body's forward or backward,
/// a chunk's top level) begin at this kernel, each {param, slot (the
/// chunk's buffer-name prefix), loc (the read's), and for a pipeline chunk
/// with several microbatch slots `slots` (kSlotsAttr), which the gathered
/// copy gets too}; what llcdist-plan-zero's
/// ZeRO-3 gathers need and a plan does not otherwise say. Not in the JSON.
constexpr const char kParamScopesAttr[] = "plan.param_scopes";
/// plan.buffer attribute (i64 >= 2): a pipeline chunk's buffer with one
/// instance per microbatch slot; llcdist-plan-memory places each instance
/// and records their offsets in kSlotOffsetsAttr (i64 array; `offset` is
/// instance 0's), emitted as the buffer's "slot_offsets".
constexpr const char kSlotsAttr[] = "slots";
constexpr const char kSlotOffsetsAttr[] = "slot_offsets";
/// plan.action attribute (i64 >= 1; absent: 0): the instance of every
/// slotted buffer the action's subroutine uses, emitted as "slot".
constexpr const char kSlotAttr[] = "slot";

// Asynchronous plans (feature "async", docs/plan-format.md): the names the
// plan IR and the JSON share. A communication kernel with `token` is started
// asynchronously and completes at the `wait` kernel with the same token;
// `queue` names the queue an op is issued on (default kComputeQueue), one of
// its program's `queues`.
/// Kernel attribute (i64 >= 0): the token of a started communication op, or
/// the token a `wait` kernel waits for.
constexpr const char kTokenAttr[] = "token";
/// Kernel attribute (string): the queue the op is issued on.
constexpr const char kQueueAttr[] = "queue";
/// Program attribute (array of strings, the first kComputeQueue): the
/// program's queues; absent means [kComputeQueue].
constexpr const char kQueuesAttr[] = "queues";
/// The queue every kernel runs on, and the default one.
constexpr const char kComputeQueue[] = "compute";
/// The kernel that waits for a token (no arguments, no parameters).
constexpr const char kWaitKernel[] = "wait";
/// The manifest feature of a plan that uses any of the above.
constexpr const char kAsyncFeature[] = "async";

/// Program attribute (llcdist-plan-grad-buckets): the gradient buckets it
/// made, each {collective, grads, elements, bytes}, for the compile summary. Not in the
/// JSON.
constexpr const char kGradBucketsAttr[] = "plan.grad_buckets";
/// Program attribute (the fusion passes: llcdist-plan-fuse-optimizer,
/// llcdist-plan-fuse-norm): what each fused, [{pass, from, to, ops, into}]:
/// `ops` kernels of the pattern `from` (kernel kinds, " + "-joined) became
/// `into` kernels `to`; for the compile summary (recordFusion). Not in the
/// JSON.
constexpr const char kFusedAttr[] = "plan.fused";
/// Program attribute (llcdist-plan-fsdp-prefetch): per subroutine whose
/// ZeRO-3 gathers it started ahead, {subroutine, units, gathers, prefetched,
/// bytes}, for the compile summary. Not in the JSON.
constexpr const char kFsdpPrefetchAttr[] = "plan.fsdp_prefetch";
/// Program attribute (llcdist-plan-overlap-param-gather): {gathers, bytes,
/// subroutine} of the parameter all-gathers it moved into the next step, for
/// the compile summary. Not in the JSON.
constexpr const char kParamGatherOverlapAttr[] = "plan.param_gather_overlap";
/// Program attribute (llcdist-plan-sp-overlap): per collective kind
/// (all_gather, reduce_scatter) {started, overlapped, kernels, gemms}, for
/// the compile summary. Not in the JSON.
constexpr const char kTpCommOverlapAttr[] = "plan.tp_comm_overlap";
/// Program attribute (llcdist-plan-p2p-overlap): {started, overlapped,
/// kernels} over its pipeline sends and recvs. Not in the JSON.
constexpr const char kP2POverlapAttr[] = "plan.p2p_overlap";
/// llcdist-plan-cp-ring-overlap's counts ({started, overlapped, kernels}).
constexpr const char kCpRingOverlapAttr[] = "plan.cp_ring_overlap";
/// Program attribute (llcdist-plan-p2p-scatter-gather): {sends, recvs} it
/// sliced over tp (each send of 1/tp, each recv all-gathered), for the
/// compile summary. Not in the JSON.
constexpr const char kP2PScatterGatherAttr[] = "plan.p2p_scatter_gather";

/// Whether `kernel` names a communication op (all_reduce, all_gather,
/// reduce_scatter, send, recv): the ops that may carry a token or be issued
/// on another queue than kComputeQueue.
bool isCommunicationKernel(llvm::StringRef kernel);
} // namespace llcdist::plan

#endif
