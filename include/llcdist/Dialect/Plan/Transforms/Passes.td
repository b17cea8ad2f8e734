//===- Passes.td - plan passes ----------------------------*- tablegen -*-===//
#ifndef LLCDIST_DIALECT_PLAN_TRANSFORMS_PASSES_TD
#define LLCDIST_DIALECT_PLAN_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def PlanMemory : Pass<"llcdist-plan-memory", "llcdist::plan::ProgramOp"> {
  let summary = "assign every buffer an arena offset";
  let description = [{
    Places the program's buffers one after another at 64-byte-aligned
    offsets in declaration order and records the arena size; every buffer
    lives for the whole step. (Liveness-based reuse and the exact peak come
    with the memory planner of issue #6.)

    Before: `plan.buffer @b1 : tensor<8xf32> {kind = "param", name = "w"}`
    After:  `plan.buffer @b1 : tensor<8xf32> {kind = "param", name = "w", offset = 64 : i64}`
  }];
}

#endif
