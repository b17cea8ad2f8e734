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

#include <optional>
#include <string>

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

/// Why the dp × tp (× cp) replicas of the plan's pipeline might not
/// communicate alike, or nullopt when they do: every rank runs the program of
/// the rank of its stage with dp = tp = cp = 0, and every send/recv is along
/// pp, or is a ring transfer (`shift`) whose sends and recvs pair up in each
/// subroutine (each recv after its send, same count, dtype and tag: then the
/// ring completes on every member as a collective does). Then one
/// replica (the pp ranks with dp = tp = 0, commPlanOf(plan, 1)) stands for
/// the whole mesh:
///  - every replica is a copy of it (the same programs at the same stages,
///    the same peers along pp, the same collectives along pp within it), so
///    what holds for one holds for all;
///  - a collective along dp or tp joins ranks of one stage, which run one
///    program: each member's k-th collective on the group is the same op
///    with the same kind, count and dtype (no mismatch), and when every
///    replica follows the replica's schedule in step, all members reach it
///    together (no wait). So the replica may leave those out, and the whole
///    mesh completes every event iff the replica does.
std::optional<std::string> whyReplicasDiffer(const rt::Plan &plan);

/// How verifyPlan reached its verdict.
enum class PlanCheck {
  /// One replica of the pipeline stood for every rank (whyReplicasDiffer).
  Replica,
  /// Every rank of the mesh with dp and tp capped at maxAxis.
  SubMesh,
  /// Every rank of the mesh, simulated.
  AllRanks,
};

/// "replica", "sub-mesh", "all-ranks".
const char *planCheckName(PlanCheck check);

struct PlanVerifyResult : VerifyResult {
  PlanCheck check = PlanCheck::AllRanks;
  /// The ranks the verdict is about (the world, or the sub-mesh's) and the
  /// ranks simulated to reach it. Events are counted on the first.
  int64_t ranksCovered = 0, ranksSimulated = 0;
};

/// The plan's communication verified with the runtime's semantics: eager
/// sends (the in-process communicator's), collectives as barriers.
///  - maxAxis > 0 (default 4): where the replicas communicate alike
///    (whyReplicasDiffer), one replica is simulated (pp ranks, without the
///    dp/tp collectives: the cost does not grow with dp and tp, and the
///    verdict holds for every rank); where they do not, or where the replica
///    has a problem, verifyCommPlan(commPlanOf(plan, maxAxis)), whose
///    messages name the ranks of the capped mesh.
///  - maxAxis = 0: every rank simulated.
PlanVerifyResult verifyPlan(const rt::Plan &plan, int64_t maxErrors = 1, int64_t maxAxis = 4);

} // namespace llcdist::verify

#endif
