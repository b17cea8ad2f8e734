//===- PlanComm.h - a plan's communication, for the verifier ---*- C++ -*-===//
//
// The adapter between the runtime's plan (runtime/include/llcdist/runtime/
// Plan.h, what `llc-dist run` executes) and the static communication verifier
// (CommVerifier.h): every rank's program is expanded along its action list
// into the rank's communication events. MLIR-free (links the runtime's
// loader), so `llc-dist verify plan/` and the compiler's llcdist-verify-plan
// pass check exactly what the runtime would run.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_VERIFY_PLANCOMM_H
#define LLCDIST_VERIFY_PLANCOMM_H

#include "llcdist/Verify/CommVerifier.h"
#include "llcdist/runtime/Plan.h"

namespace llcdist::verify {

/// Rank r's events: for each action of its program, for each op of the
/// action's subroutine, in order:
///  - all_reduce: one collective per buffer ("all_reduce.sum", count = its
///    elements); all_gather / reduce_scatter: one ("all_gather",
///    "reduce_scatter.sum", count = x's elements), with the buffer's dtype
///    (f64 for the grad norm's and the vocabulary-parallel loss's partial
///    reductions; kernels never communicate);
///  - send / recv: a point-to-point event with the peer's global rank, the
///    buffer's elements and the tag (op tag, action microbatch) encoded as
///    tag · (microbatches + 1) + microbatch + 1.
/// Groups of one rank are left out (nothing to wait for); every event on one
/// group shares one member list. The provenance of an event names the
/// program file, the action, the subroutine, the microbatch, the op index,
/// the op and its loc; it is built only when asked for (CommPlan::provenance,
/// through the event's origin and the plan's describeOrigin, which keeps what
/// it needs: the result does not refer to `plan`).
///
/// Cost: the events of a subroutine are worked out once per (rank,
/// subroutine) and copied per action, so an action costs a copy per event.
///
/// `maxAxis` > 0 caps the dp and tp axes at that size (pp is never capped):
/// the events are those of the smaller mesh. Every rank of a stage runs the
/// same program and its collectives' groups along dp and tp have the same
/// structure whatever their size (the counts in a plan are per member), so a
/// mesh of min(dp, maxAxis) × min(tp, maxAxis) × pp ranks exercises every
/// matching and ordering question of the full one, and verification costs
/// O(pp) programs' events instead of O(world).
CommPlan commPlanOf(const rt::Plan &plan, int64_t maxAxis = 0);

/// verifyCommPlan(commPlanOf(plan, maxAxis)) with the runtime's semantics:
/// eager sends (the in-process communicator's), collectives as barriers.
/// The default caps dp and tp at 4.
VerifyResult verifyPlan(const rt::Plan &plan, int64_t maxErrors = 1, int64_t maxAxis = 4);

} // namespace llcdist::verify

#endif
