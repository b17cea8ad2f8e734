// RUN: llc-dist-opt %s -llcdist-plan-comm-dtype | FileCheck %s --check-prefixes=CHECK,BF16
// RUN: llc-dist-opt %s -llcdist-plan-comm-dtype=grad-reduce-dtype=f32 | FileCheck %s --check-prefixes=CHECK,F32
// RUN: not llc-dist-opt %s -llcdist-plan-comm-dtype=grad-reduce-dtype=f16 2>&1 | FileCheck %s --check-prefix=BAD

// Collectives whose buffers are all bf16 get dtype "bf16"; with
// grad-reduce-dtype=f32 the gradient reductions keep the default f32 (no
// attr), the activations' collectives stay bf16. A collective with an f32
// buffer (the loss; a mixed list) is never touched.
module {
  plan.program @stage0 {
    plan.buffer @b0 : tensor<8xbf16> {kind = "grad", name = "w.grad"}
    plan.buffer @b1 : tensor<4xbf16> {kind = "scratch", name = "w.grad_shard"}
    plan.buffer @b2 : tensor<1xf32> {kind = "metric", name = "loss"}
    plan.buffer @b3 : tensor<8xf32> {kind = "grad", name = "n.grad"}
    plan.buffer @b4 : tensor<2x4xbf16> {kind = "activation", name = "h"}
    plan.buffer @b5 : tensor<2x8xbf16> {kind = "activation", name = "h.gathered"}
    plan.subroutine @forward {
      // CHECK: plan.kernel "all_reduce" {x = [@b4]} {axis = "tp", dtype = "bf16", op = "sum"}
      plan.kernel "all_reduce" {x = [@b4]} {axis = "tp", op = "sum"} {plan.origin = "row_parallel", plan.payload = "activations"}
      // CHECK: plan.kernel "all_gather" {x = @b4, y = @b5} {axis = "tp", dtype = "bf16", inner = 4 : i64, outer = 2 : i64}
      plan.kernel "all_gather" {x = @b4, y = @b5} {axis = "tp", inner = 4 : i64, outer = 2 : i64} {plan.origin = "sequence_parallel", plan.payload = "activations"}
      // CHECK: plan.kernel "reduce_scatter" {x = @b5, y = @b4} {axis = "tp", dtype = "bf16", inner = 4 : i64, op = "sum", outer = 2 : i64}
      plan.kernel "reduce_scatter" {x = @b5, y = @b4} {axis = "tp", inner = 4 : i64, op = "sum", outer = 2 : i64} {plan.origin = "row_parallel", plan.payload = "activations"}
    }
    plan.subroutine @optimizer {
      // BF16: plan.kernel "all_reduce" {x = [@b0]} {axis = "dp", dtype = "bf16", op = "sum"}
      // F32: plan.kernel "all_reduce" {x = [@b0]} {axis = "dp", op = "sum"}
      plan.kernel "all_reduce" {x = [@b0]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients", plan.payload = "gradients"}
      // BF16: plan.kernel "all_reduce" {x = [@b0]} {axis = "tp", dtype = "bf16", group_size = 2 : i64, op = "sum"}
      // F32: plan.kernel "all_reduce" {x = [@b0]} {axis = "tp", group_size = 2 : i64, op = "sum"}
      plan.kernel "all_reduce" {x = [@b0]} {axis = "tp", group_size = 2 : i64, op = "sum"} {plan.origin = "kv_replica", plan.payload = "kv-replica gradients"}
      // BF16: plan.kernel "reduce_scatter" {x = @b0, y = @b1} {axis = "dp", dtype = "bf16", inner = 4 : i64, op = "sum", outer = 1 : i64}
      // F32: plan.kernel "reduce_scatter" {x = @b0, y = @b1} {axis = "dp", inner = 4 : i64, op = "sum", outer = 1 : i64}
      plan.kernel "reduce_scatter" {x = @b0, y = @b1} {axis = "dp", inner = 4 : i64, op = "sum", outer = 1 : i64} {plan.origin = "zero", plan.payload = "gradients"}
      // CHECK: plan.kernel "all_reduce" {x = [@b0, @b3]} {axis = "dp", op = "sum"}
      plan.kernel "all_reduce" {x = [@b0, @b3]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients", plan.payload = "gradients"}
      // CHECK: plan.kernel "all_reduce" {x = [@b2]} {axis = "dp", op = "avg"}
      plan.kernel "all_reduce" {x = [@b2]} {axis = "dp", op = "avg"} {plan.origin = "loss", plan.payload = "loss"}
    }
  }
}

// BAD: llcdist-plan-comm-dtype: grad-reduce-dtype "f16" is not bf16 or f32
