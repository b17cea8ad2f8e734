//===- Passes.td - plan passes ----------------------------*- tablegen -*-===//
#ifndef LLCDIST_DIALECT_PLAN_TRANSFORMS_PASSES_TD
#define LLCDIST_DIALECT_PLAN_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def PlanMemory : Pass<"llcdist-plan-memory", "llcdist::plan::ProgramOp"> {
  let summary = "assign every buffer an arena offset, reusing dead activations' bytes";
  let description = [{
    Persistent state (params, gradients, optimizer state, inputs, metrics) is
    placed first, in declaration order. Activation and scratch buffers live
    from their first to their last use in the step (the schedule's actions
    with their kernels inlined) and are placed first-fit in order of first
    use, sharing bytes only with buffers whose intervals are disjoint; the
    arena size is recorded. Offsets are 64-byte aligned.

    Before: `plan.buffer @b1 : tensor<8xf32> {kind = "param", name = "w"}`
    After:  `plan.buffer @b1 : tensor<8xf32> {kind = "param", name = "w", offset = 64 : i64}`
  }];
}

def VerifyPlan : Pass<"llcdist-verify-plan", "mlir::ModuleOp"> {
  let summary = "check every rank's communication before anything runs";
  let description = [{
    Builds the runtime's plan from the module's plan.program ops (exactly the
    files the compiler would write), loads it with the runtime's own loader
    (so the plan is also checked against the format), and executes every
    rank's communication symbolically (lib/Verify, docs/plan-verifier.md):
    every send meets its recv (peer, size, dtype, tag and microbatch, in
    order), every group's members issue the same collectives in the same
    order with the same sizes, and no rank waits forever under the runtime's
    semantics (eager sends, blocking recvs and collectives). A failure is a
    compile error naming the ranks, the action and op indices and the ops'
    provenance. The same check runs as `llc-dist verify PLAN`.
  }];
  let options = [
    Option<"maxErrors", "max-errors", "int64_t", "1", "errors to report before stopping">,
  ];
}

#endif
