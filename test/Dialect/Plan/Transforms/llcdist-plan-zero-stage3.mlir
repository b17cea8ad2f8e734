// RUN: llc-dist-opt %s -split-input-file -llcdist-plan-zero="stage=3" -mlir-print-debuginfo | FileCheck %s
// RUN: llc-dist-opt %s -split-input-file -llcdist-plan-zero="stage=3 reshard-after-forward=false" | FileCheck %s --check-prefix=KEEP

// ZeRO-3 (FSDP) on dp = 2, one stage of pp = 2, on a plan lowered with
// record-param-scopes: the parameter @b0 (4x2) holds its 2x2 block; where a
// scope begins to read it (plan.param_scopes: the forward's top level, then
// the backward's layer body) it is all-gathered into <slot><name>.gathered,
// declared where the lowering's counter stood, and the scope's kernels read
// that copy; the record is removed. The gradient is the block as for stage
// 2; the update writes the parameter's block in place (no slice, no
// gather); the norm sums over dp after pp.
// CHECK-LABEL: plan.program @stage0
// CHECK: plan.buffer @b0 : tensor<2x2xf32> {kind = "param", name = "w"}
// CHECK-NEXT: plan.buffer @b1 : tensor<2x2xf32> {kind = "grad", name = "w.grad"}
// CHECK-NEXT: plan.buffer @[[G0:b[0-9]+]] : tensor<4x2xf32> {kind = "activation", name = "v0s0/w.gathered"}
// CHECK-NEXT: plan.buffer @b2 : tensor<4x2xf32> {kind = "activation", name = "y"}
// CHECK-NEXT: plan.buffer @[[G1:b[0-9]+]] : tensor<4x2xf32> {kind = "activation", name = "v0s0/w.gathered#1"}
// CHECK-NEXT: plan.buffer @b3 : tensor<4x2xf32> {kind = "activation", name = "dy"}
// CHECK-NEXT: plan.buffer @[[MB:b[0-9]+]] : tensor<4x2xf32> {kind = "scratch", name = "w.grad_mb"}
// CHECK-NEXT: plan.buffer @[[PART:b[0-9]+]] : tensor<2x2xf32> {kind = "scratch", name = "w.grad_part"}
// CHECK: plan.buffer @b5 : tensor<2x2xf32> {kind = "optimizer_state", name = "w.exp_avg"}
// CHECK-NEXT: plan.buffer @b6 : tensor<2x2xf32> {kind = "optimizer_state", name = "w.exp_avg_sq"}
// CHECK-NEXT: plan.param "w" value @b0 grad @b1 state [@b5, @b6] {{{.*}}local_shape = array<i64: 4, 2>, weight_decay = true, zero = {axis = "dp", stage = 3 : i64}}
// CHECK: plan.subroutine @forward {
// CHECK-NEXT: plan.kernel "all_gather" {x = @b0, y = @[[G0]]} {axis = "dp", inner = 4 : i64, outer = 1 : i64} {plan.origin = "zero", plan.payload = "parameters"} loc(#[[GLOC:loc[0-9]+]])
// CHECK-NEXT: plan.kernel "copy" {x = @[[G0]], y = @b2} {n = 8 : i64} loc(
// CHECK-NEXT: plan.kernel "copy" {x = @[[G0]], y = @b2} {n = 8 : i64} loc(
// CHECK: plan.subroutine @backward {
// CHECK-NEXT: plan.kernel "all_gather" {x = @b0, y = @[[G1]]}
// CHECK-NEXT: plan.kernel "copy" {x = @[[G1]], y = @b3} {n = 8 : i64} loc(
// CHECK-NEXT: plan.kernel "linear_bwd_weight" {dw = @[[MB]], dy = @b3, x = @b2} {{{.*}}accumulate = false
// CHECK-NEXT: plan.kernel "reduce_scatter" {x = @[[MB]], y = @[[PART]]} {axis = "dp", inner = 4 : i64, op = "sum", outer = 1 : i64} {plan.origin = "zero", plan.payload = "gradients"}
// CHECK-NEXT: plan.kernel "accumulate" {x = @[[PART]], y = @b1} {n = 4 : i64}
// CHECK: plan.subroutine @optimizer {
// CHECK-NEXT: plan.kernel "grad_norm_sq" {grads = [@b1], sq = @b7} {}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@b7]} {axis = "dp", op = "sum"} {plan.origin = "grad_norm", plan.payload = "grad norm"}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@b7]} {axis = "pp", op = "sum"} {plan.origin = "grad_norm", plan.payload = "grad norm"}
// CHECK-NEXT: plan.kernel "grad_norm_clip" {grads = [@b1], norm = @b4, sq = @b7} {max_norm = 0.000000e+00 : f64}
// CHECK-NEXT: plan.kernel "adamw" {grad = @b1, m = @b5, param = @b0, v = @b6}
// CHECK-NEXT: {{^ +}}}
// CHECK-NOT: plan.param_scopes
// The gather's provenance: the reason beside the parameter read's.
// CHECK: #[[READ:loc[0-9]+]] = loc("w"(#{{loc[0-9]*}}))
// CHECK: #[[GLOC]] = loc("ZeRO-3: gather the parameter before its use"(#[[READ]]))
// Without reshard_after_forward the backward reads its slot's forward copy.
// KEEP-LABEL: plan.program @stage0
// KEEP-NOT: w.gathered#1
// KEEP: plan.subroutine @backward {
// KEEP-NEXT: plan.kernel "copy" {x = @[[G0:b[0-9]+]], y = @b3}
// KEEP: plan.subroutine @optimizer
#read = loc("w"("m.mlir":1:1))
module {
  shard.grid @mesh(shape = 2x1x2) {xf.mesh_axes = ["dp", "tp", "pp"]}
  plan.program @stage0 {
    plan.buffer @b0 : tensor<4x2xf32> {kind = "param", name = "w"}
    plan.buffer @b1 : tensor<4x2xf32> {kind = "grad", name = "w.grad"}
    plan.buffer @b2 : tensor<4x2xf32> {kind = "activation", name = "y"}
    plan.buffer @b3 : tensor<4x2xf32> {kind = "activation", name = "dy"}
    plan.buffer @b4 : tensor<1xf32> {kind = "metric", name = "grad_norm"}
    plan.buffer @b5 : tensor<4x2xf32> {kind = "optimizer_state", name = "w.exp_avg"}
    plan.buffer @b6 : tensor<4x2xf32> {kind = "optimizer_state", name = "w.exp_avg_sq"}
    plan.param "w" value @b0 grad @b1 state [@b5, @b6] {init = {kind = "normal", std = 2.0e-02 : f64}, weight_decay = true}
    plan.buffer @b7 : tensor<1xf64> {kind = "scratch", name = "grad_norm.sq"}
    plan.subroutine @step_begin {
      plan.kernel "fill_zero" {x = [@b1]} {}
    }
    plan.subroutine @forward {
      plan.kernel "copy" {x = @b0, y = @b2} {n = 8 : i64} {plan.param_scopes = [{loc = #read, param = "w", slot = "v0s0/"}]}
      plan.kernel "copy" {x = @b0, y = @b2} {n = 8 : i64}
    }
    plan.subroutine @backward {
      plan.kernel "copy" {x = @b0, y = @b3} {n = 8 : i64} {plan.param_scopes = [{loc = #read, param = "w", slot = "v0s0/"}]}
      plan.kernel "linear_bwd_weight" {dw = @b1, dy = @b3, x = @b2} {K = 2 : i64, M = 4 : i64, N = 4 : i64, accumulate = true, layout = "out_in"}
    }
    plan.subroutine @optimizer {
      plan.kernel "all_reduce" {x = [@b1]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients", plan.payload = "gradients"}
      plan.kernel "grad_norm_sq" {grads = [@b1], sq = @b7} {}
      plan.kernel "all_reduce" {x = [@b7]} {axis = "pp", op = "sum"} {plan.origin = "grad_norm", plan.payload = "grad norm"}
      plan.kernel "grad_norm_clip" {grads = [@b1], norm = @b4, sq = @b7} {max_norm = 0.0 : f64}
      plan.kernel "adamw" {grad = @b1, m = @b5, param = @b0, v = @b6} {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64, weight_decay = 1.0e-02 : f64}
    }
    plan.schedule {
      plan.action @step_begin
      plan.action @forward microbatch 0
      plan.action @backward microbatch 0
      plan.action @optimizer
    }
  }
}

// -----

// Mixed precision: the f32 master and the bf16 working copy are blocks,
// step_begin casts the block (n = 4); the gathers read the working copy. No
// value_block: the manifest's value is a block like everything else.
// CHECK-LABEL: plan.program @mixed
// CHECK: plan.buffer @b0 : tensor<2x2xf32> {kind = "param", memory_class = "optimizer_state", name = "w"}
// CHECK-NEXT: plan.buffer @b1 : tensor<2x2xbf16> {kind = "param", name = "w.bf16"}
// CHECK-NEXT: plan.buffer @b2 : tensor<2x2xbf16> {kind = "grad", name = "w.grad"}
// CHECK-NEXT: plan.buffer @[[G:b[0-9]+]] : tensor<4x2xbf16> {kind = "activation", name = "w.gathered"}
// CHECK: plan.param "w" {{.*}}zero = {axis = "dp", stage = 3 : i64}}
// CHECK-NEXT: plan.subroutine @step_begin {
// CHECK-NEXT: plan.kernel "cast" {x = @b0, y = @b1} {n = 4 : i64}
// CHECK: plan.subroutine @forward {
// CHECK-NEXT: plan.kernel "all_gather" {x = @b1, y = @[[G]]}
// CHECK-NEXT: plan.kernel "copy" {x = @[[G]], y = @b3}
module {
  shard.grid @mesh(shape = 2x1x1) {xf.mesh_axes = ["dp", "tp", "pp"]}
  plan.program @mixed {
    plan.buffer @b0 : tensor<4x2xf32> {kind = "param", memory_class = "optimizer_state", name = "w"}
    plan.buffer @b1 : tensor<4x2xbf16> {kind = "param", name = "w.bf16"}
    plan.buffer @b2 : tensor<4x2xbf16> {kind = "grad", name = "w.grad"}
    plan.buffer @b3 : tensor<4x2xbf16> {kind = "activation", name = "y"}
    plan.param "w" value @b0 grad @b2 state [] {init = {kind = "normal", std = 2.0e-02 : f64}, weight_decay = true}
    plan.subroutine @step_begin {
      plan.kernel "cast" {x = @b0, y = @b1} {n = 8 : i64}
      plan.kernel "fill_zero" {x = [@b2]} {}
    }
    plan.subroutine @forward {
      plan.kernel "copy" {x = @b1, y = @b3} {n = 8 : i64} {plan.param_scopes = [{loc = loc("w"("m.mlir":1:1)), param = "w", slot = ""}]}
    }
    plan.subroutine @optimizer {
      plan.kernel "all_reduce" {x = [@b2]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients", plan.payload = "gradients"}
      plan.kernel "sgd" {grad = @b2, param = @b0} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
    }
  }
}
