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

#endif
