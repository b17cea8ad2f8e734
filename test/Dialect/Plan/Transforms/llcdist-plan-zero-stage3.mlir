// RUN: llc-dist-opt %s -split-input-file -llcdist-plan-zero="stage=3" | FileCheck %s

// ZeRO-3 (FSDP) on dp = 2, one stage of pp = 2: llcdist-lower-to-plan
// zero=3 already holds the parameter's block (@b0, 2x2 of a 4x2 tensor) and
// gathers it where each scope reads it (the whole tensor is the gather's
// output); the pass does the rest as for stage 2: the gradient is the block,
// each contribution reduce-scattered into it, the dp all-reduce goes, the
// norm sums over dp after pp, the state is the block. The update writes the
// parameter's block in place: no shard_slice, no gather after it.
// CHECK-LABEL: plan.program @stage0
// CHECK: plan.buffer @b0 : tensor<2x2xf32> {kind = "param", name = "w"}
// CHECK-NEXT: plan.buffer @b1 : tensor<2x2xf32> {kind = "grad", name = "w.grad"}
// CHECK-NEXT: plan.buffer @b2 : tensor<4x2xf32> {kind = "activation", name = "w.gathered"}
// CHECK-NEXT: plan.buffer @b3 : tensor<4x2xf32> {kind = "activation", name = "dy"}
// CHECK-NEXT: plan.buffer @[[MB:b[0-9]+]] : tensor<4x2xf32> {kind = "scratch", name = "w.grad_mb"}
// CHECK-NEXT: plan.buffer @[[PART:b[0-9]+]] : tensor<2x2xf32> {kind = "scratch", name = "w.grad_part"}
// CHECK: plan.buffer @b5 : tensor<2x2xf32> {kind = "optimizer_state", name = "w.exp_avg"}
// CHECK-NEXT: plan.buffer @b6 : tensor<2x2xf32> {kind = "optimizer_state", name = "w.exp_avg_sq"}
// CHECK-NEXT: plan.param "w" value @b0 grad @b1 state [@b5, @b6] {{{.*}}local_shape = array<i64: 4, 2>, weight_decay = true, zero = {axis = "dp", stage = 3 : i64}}
// CHECK: plan.subroutine @backward {
// CHECK-NEXT: plan.kernel "all_gather" {x = @b0, y = @b2}
// CHECK-NEXT: plan.kernel "linear_bwd_weight" {dw = @[[MB]], dy = @b3, x = @b2} {{{.*}}accumulate = false
// CHECK-NEXT: plan.kernel "reduce_scatter" {x = @[[MB]], y = @[[PART]]} {axis = "dp", inner = 4 : i64, op = "sum", outer = 1 : i64} {plan.origin = "zero", plan.payload = "gradients"}
// CHECK-NEXT: plan.kernel "accumulate" {x = @[[PART]], y = @b1} {n = 4 : i64}
// CHECK: plan.subroutine @optimizer {
// CHECK-NEXT: plan.kernel "grad_norm" {grads = [@b1], norm = @b4} {max_norm = 0.000000e+00 : f64, stage_axis = "dp,pp"}
// CHECK-NEXT: plan.kernel "adamw" {grad = @b1, m = @b5, param = @b0, v = @b6}
// CHECK-NEXT: {{^ +}}}
module {
  shard.grid @mesh(shape = 2x1x2) {xf.mesh_axes = ["dp", "tp", "pp"]}
  plan.program @stage0 {
    plan.buffer @b0 : tensor<2x2xf32> {kind = "param", name = "w"}
    plan.buffer @b1 : tensor<4x2xf32> {kind = "grad", name = "w.grad"}
    plan.buffer @b2 : tensor<4x2xf32> {kind = "activation", name = "w.gathered"}
    plan.buffer @b3 : tensor<4x2xf32> {kind = "activation", name = "dy"}
    plan.buffer @b4 : tensor<1xf32> {kind = "metric", name = "grad_norm"}
    plan.buffer @b5 : tensor<4x2xf32> {kind = "optimizer_state", name = "w.exp_avg"}
    plan.buffer @b6 : tensor<4x2xf32> {kind = "optimizer_state", name = "w.exp_avg_sq"}
    plan.param "w" value @b0 grad @b1 state [@b5, @b6] {init = {kind = "normal", std = 2.0e-02 : f64}, weight_decay = true}
    plan.subroutine @step_begin {
      plan.kernel "zero" {x = [@b1]} {}
    }
    plan.subroutine @backward {
      plan.kernel "all_gather" {x = @b0, y = @b2} {axis = "dp", inner = 4 : i64, outer = 1 : i64} {plan.origin = "zero", plan.payload = "parameters"}
      plan.kernel "linear_bwd_weight" {dw = @b1, dy = @b3, x = @b2} {K = 2 : i64, M = 4 : i64, N = 4 : i64, accumulate = true, layout = "out_in"}
    }
    plan.subroutine @optimizer {
      plan.kernel "all_reduce" {x = [@b1]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients", plan.payload = "gradients"}
      plan.kernel "grad_norm" {grads = [@b1], norm = @b4} {max_norm = 0.0 : f64, stage_axis = "pp"}
      plan.kernel "adamw" {grad = @b1, m = @b5, param = @b0, v = @b6} {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64, weight_decay = 1.0e-02 : f64}
    }
    plan.schedule {
      plan.action @step_begin
      plan.action @backward microbatch 0
      plan.action @optimizer
    }
  }
}

// -----

// Mixed precision: the lowering casts the f32 master's block into the bf16
// working copy's block (n = 4) at step_begin; that stays. The manifest's
// value is the block of the working copy too: no value_block.
// CHECK-LABEL: plan.program @mixed
// CHECK: plan.buffer @b2 : tensor<2x2xbf16> {kind = "grad", name = "w.grad"}
// CHECK: plan.param "w" {{.*}}zero = {axis = "dp", stage = 3 : i64}}
// CHECK-NEXT: plan.subroutine @step_begin {
// CHECK-NEXT: plan.kernel "cast" {x = @b0, y = @b1} {n = 4 : i64}
module {
  shard.grid @mesh(shape = 2x1x1) {xf.mesh_axes = ["dp", "tp", "pp"]}
  plan.program @mixed {
    plan.buffer @b0 : tensor<2x2xf32> {kind = "param", memory_class = "optimizer_state", name = "w"}
    plan.buffer @b1 : tensor<2x2xbf16> {kind = "param", name = "w.bf16"}
    plan.buffer @b2 : tensor<4x2xbf16> {kind = "grad", name = "w.grad"}
    plan.buffer @b3 : tensor<4x2xbf16> {kind = "activation", name = "w.gathered"}
    plan.param "w" value @b0 grad @b2 state [] {init = {kind = "normal", std = 2.0e-02 : f64}, weight_decay = true}
    plan.subroutine @step_begin {
      plan.kernel "cast" {x = @b0, y = @b1} {n = 4 : i64}
      plan.kernel "zero" {x = [@b2]} {}
    }
    plan.subroutine @forward {
      plan.kernel "all_gather" {x = @b1, y = @b3} {axis = "dp", inner = 4 : i64, outer = 1 : i64} {plan.origin = "zero", plan.payload = "parameters"}
    }
    plan.subroutine @optimizer {
      plan.kernel "sgd" {grad = @b2, param = @b0} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
    }
  }
}
