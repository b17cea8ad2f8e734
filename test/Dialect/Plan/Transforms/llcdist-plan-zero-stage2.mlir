// RUN: llc-dist-opt %s -split-input-file -llcdist-plan-zero="stage=2" -mlir-print-debuginfo | FileCheck %s

// ZeRO-2 on dp = 2 (with tp = 2): the gradients are blocks too, each
// microbatch's contribution reduce-scattered into its block where the
// backward computes it. A weight gradient computed straight into the
// gradient (accumulate = true) is written whole into <name>.grad_mb (a
// second one of the same parameter: #1), then reduce-scattered into
// <name>.grad_part and added; layer_norm_bwd_weight's two gradients in
// plan.param order (gamma, then beta); an `accumulate` into the gradient
// becomes the reduce-scatter and the add of the block. New buffers are
// declared after the latest one the kernels used so far. The optimizer's dp
// all-reduce is gone; the tp one, the norm and the update read the block.
// CHECK-LABEL: plan.program @stage0
// CHECK: plan.buffer @b1 : tensor<2x2xf32> {kind = "grad", name = "w.grad"}
// CHECK: plan.buffer @b3 : tensor<1xf32> {kind = "grad", name = "g.grad"}
// CHECK: plan.buffer @b5 : tensor<1xf32> {kind = "grad", name = "bb.grad"}
// CHECK-NEXT: plan.buffer @b6 : tensor<4x2xf32> {kind = "activation", name = "dy"}
// CHECK-NEXT: plan.buffer @[[MB:b[0-9]+]] : tensor<4x2xf32> {kind = "scratch", name = "w.grad_mb"}
// CHECK-NEXT: plan.buffer @[[PART:b[0-9]+]] : tensor<2x2xf32> {kind = "scratch", name = "w.grad_part"}
// CHECK-NEXT: plan.buffer @b7 : tensor<4x2xf32> {kind = "activation", name = "dy2"}
// CHECK-NEXT: plan.buffer @[[MB1:b[0-9]+]] : tensor<4x2xf32> {kind = "scratch", name = "w.grad_mb#1"}
// CHECK-NEXT: plan.buffer @[[PART1:b[0-9]+]] : tensor<2x2xf32> {kind = "scratch", name = "w.grad_part#1"}
// CHECK-NEXT: plan.buffer @[[GMB:b[0-9]+]] : tensor<2xf32> {kind = "scratch", name = "g.grad_mb"}
// CHECK-NEXT: plan.buffer @[[BMB:b[0-9]+]] : tensor<2xf32> {kind = "scratch", name = "bb.grad_mb"}
// CHECK-NEXT: plan.buffer @[[GPART:b[0-9]+]] : tensor<1xf32> {kind = "scratch", name = "g.grad_part"}
// CHECK-NEXT: plan.buffer @[[BPART:b[0-9]+]] : tensor<1xf32> {kind = "scratch", name = "bb.grad_part"}
// CHECK-NEXT: plan.buffer @b8 : tensor<4x2xf32> {kind = "activation", name = "dw"}
// CHECK-NEXT: plan.buffer @[[PART2:b[0-9]+]] : tensor<2x2xf32> {kind = "scratch", name = "w.grad_part#2"}
// CHECK: plan.param "w" {{.*}}zero = {axis = "dp", stage = 2 : i64}}
// CHECK: plan.subroutine @backward {
// CHECK-NEXT: plan.kernel "linear_bwd_weight" {dw = @[[MB]], dy = @b6, x = @b0} {{{.*}}accumulate = false{{.*}}} loc(#[[KLOC:loc[0-9]+]])
// CHECK-NEXT: plan.kernel "reduce_scatter" {x = @[[MB]], y = @[[PART]]} {axis = "dp", inner = 4 : i64, op = "sum", outer = 1 : i64} {plan.origin = "zero", plan.payload = "gradients"} loc(#[[RSLOC:loc[0-9]+]])
// CHECK-NEXT: plan.kernel "accumulate" {x = @[[PART]], y = @b1} {n = 4 : i64} loc(#[[KLOC]])
// CHECK-NEXT: plan.kernel "linear_bwd_weight" {dw = @[[MB1]], dy = @b7, x = @b0}
// CHECK-NEXT: plan.kernel "reduce_scatter" {x = @[[MB1]], y = @[[PART1]]}
// CHECK-NEXT: plan.kernel "accumulate" {x = @[[PART1]], y = @b1} {n = 4 : i64}
// CHECK-NEXT: plan.kernel "layer_norm_bwd_weight" {dbeta = @[[BMB]], dgamma = @[[GMB]], dy = @b6, mean = @b6, rstd = @b6, x = @b6} {H = 2 : i64, M = 4 : i64, accumulate = false}
// CHECK-NEXT: plan.kernel "reduce_scatter" {x = @[[GMB]], y = @[[GPART]]} {axis = "dp", inner = 1 : i64, op = "sum", outer = 1 : i64} {plan.origin = "zero", plan.payload = "gradients"}
// CHECK-NEXT: plan.kernel "accumulate" {x = @[[GPART]], y = @b3} {n = 1 : i64}
// CHECK-NEXT: plan.kernel "reduce_scatter" {x = @[[BMB]], y = @[[BPART]]}
// CHECK-NEXT: plan.kernel "accumulate" {x = @[[BPART]], y = @b5} {n = 1 : i64}
// CHECK-NEXT: plan.kernel "copy" {x = @b6, y = @b8}
// CHECK-NEXT: plan.kernel "reduce_scatter" {x = @b8, y = @[[PART2]]} {axis = "dp", inner = 4 : i64, op = "sum", outer = 1 : i64} {plan.origin = "zero", plan.payload = "gradients"} loc(#[[ACCLOC:loc[0-9]+]])
// CHECK-NEXT: plan.kernel "accumulate" {x = @[[PART2]], y = @b1} {n = 4 : i64} loc(#[[ALOC:loc[0-9]+]])
// CHECK-NEXT: {{^ +}}}
// CHECK: plan.subroutine @optimizer {
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@b1]} {axis = "tp", group_size = 2 : i64, op = "sum"}
// CHECK-NEXT: plan.kernel "grad_norm_sq" {grads = [@b1, @b3, @b5], sq = @[[SQ:b[0-9]+]]} {}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@[[SQ]]]} {axis = "dp", op = "sum"} {plan.origin = "grad_norm", plan.payload = "grad norm"}
// CHECK-NEXT: plan.kernel "grad_norm_clip" {grads = [@b1, @b3, @b5], norm = @b9, sq = @[[SQ]]} {max_norm = 0.000000e+00 : f64}
// CHECK-NEXT: plan.kernel "shard_slice" {x = @b0, y = @[[WS:b[0-9]+]]}
// CHECK-NEXT: plan.kernel "sgd" {grad = @b1, param = @[[WS]]}
// CHECK-NEXT: plan.kernel "all_gather" {x = @[[WS]], y = @b0}
// CHECK: #[[KLOC]] = loc("model.layers.0.w"(#{{loc[0-9]*}}))
// CHECK: #[[ALOC]] = loc("model.layers.0.acc"(#{{loc[0-9]*}}))
// CHECK: #[[RSLOC]] = loc("ZeRO: reduce-scatter the gradient into its dp shard"(#[[KLOC]]))
// CHECK: #[[ACCLOC]] = loc("ZeRO: reduce-scatter the gradient into its dp shard"(#[[ALOC]]))
module {
  shard.grid @mesh(shape = 2x2x1) {xf.mesh_axes = ["dp", "tp", "pp"]}
  plan.program @stage0 {
    plan.buffer @b0 : tensor<4x2xf32> {kind = "param", name = "w"}
    plan.buffer @b1 : tensor<4x2xf32> {kind = "grad", name = "w.grad"}
    plan.buffer @b2 : tensor<2xf32> {kind = "param", name = "g"}
    plan.buffer @b3 : tensor<2xf32> {kind = "grad", name = "g.grad"}
    plan.buffer @b4 : tensor<2xf32> {kind = "param", name = "bb"}
    plan.buffer @b5 : tensor<2xf32> {kind = "grad", name = "bb.grad"}
    plan.buffer @b6 : tensor<4x2xf32> {kind = "activation", name = "dy"}
    plan.buffer @b7 : tensor<4x2xf32> {kind = "activation", name = "dy2"}
    plan.buffer @b8 : tensor<4x2xf32> {kind = "activation", name = "dw"}
    plan.buffer @b9 : tensor<1xf32> {kind = "metric", name = "grad_norm"}
    plan.param "w" value @b0 grad @b1 state [] {init = {kind = "normal", std = 2.0e-02 : f64}, weight_decay = true}
    plan.param "g" value @b2 grad @b3 state [] {init = {kind = "ones"}, weight_decay = false}
    plan.param "bb" value @b4 grad @b5 state [] {init = {kind = "zeros"}, weight_decay = false}
    plan.subroutine @step_begin {
      plan.kernel "fill_zero" {x = [@b1, @b3, @b5]} {}
    }
    plan.subroutine @backward {
      plan.kernel "linear_bwd_weight" {dw = @b1, dy = @b6, x = @b0} {K = 2 : i64, M = 4 : i64, N = 4 : i64, accumulate = true, layout = "out_in"} loc("model.layers.0.w"("m.mlir":1:1))
      plan.kernel "linear_bwd_weight" {dw = @b1, dy = @b7, x = @b0} {K = 2 : i64, M = 4 : i64, N = 4 : i64, accumulate = true, layout = "out_in"}
      plan.kernel "layer_norm_bwd_weight" {dbeta = @b5, dgamma = @b3, dy = @b6, mean = @b6, rstd = @b6, x = @b6} {H = 2 : i64, M = 4 : i64, accumulate = true}
      plan.kernel "copy" {x = @b6, y = @b8} {n = 8 : i64}
      plan.kernel "accumulate" {x = @b8, y = @b1} {n = 8 : i64} loc("model.layers.0.acc"("m.mlir":2:1))
    }
    plan.subroutine @optimizer {
      plan.kernel "all_reduce" {x = [@b1, @b3, @b5]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients", plan.payload = "gradients"}
      plan.kernel "all_reduce" {x = [@b1]} {axis = "tp", group_size = 2 : i64, op = "sum"} {plan.payload = "kv-replica gradients"}
      plan.kernel "grad_norm" {grads = [@b1, @b3, @b5], norm = @b9} {max_norm = 0.0 : f64}
      plan.kernel "sgd" {grad = @b1, param = @b0} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
      plan.kernel "sgd" {grad = @b3, param = @b2} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
      plan.kernel "sgd" {grad = @b5, param = @b4} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
    }
    plan.schedule {
      plan.action @step_begin
      plan.action @backward microbatch 0
      plan.action @optimizer
    }
  }
}

// -----

// A pipeline's home stage of a tied parameter (pp = 2) under mixed
// precision: the replica's gradient arrives as it holds it, the block, and
// is added to the block; the bf16 gradient and its contributions are bf16,
// the master and its copy as under ZeRO-1 (value_block); the norm sums over
// dp after the stages.
// CHECK-LABEL: plan.program @stage1
// CHECK: plan.buffer @b0 : tensor<2x2xf32> {kind = "param", memory_class = "optimizer_state", name = "t"}
// CHECK-NEXT: plan.buffer @b1 : tensor<4x2xbf16> {kind = "param", name = "t.bf16"}
// CHECK-NEXT: plan.buffer @b2 : tensor<2x2xbf16> {kind = "grad", name = "t.grad"}
// CHECK-NEXT: plan.buffer @b3 : tensor<4x2xbf16> {kind = "activation", name = "dy"}
// CHECK-NEXT: plan.buffer @{{b[0-9]+}} : tensor<4x2xbf16> {kind = "scratch", name = "t.grad_mb"}
// CHECK-NEXT: plan.buffer @{{b[0-9]+}} : tensor<2x2xbf16> {kind = "scratch", name = "t.grad_part"}
// CHECK-NEXT: plan.buffer @b4 : tensor<2x2xbf16> {kind = "scratch", name = "t.grad@stage0"}
// CHECK: plan.param "t" {{.*}}zero = {axis = "dp", stage = 2 : i64, value_block = true}}
// CHECK: plan.subroutine @optimizer {
// CHECK-NEXT: plan.kernel "recv" {y = @b4}
// CHECK-NEXT: plan.kernel "accumulate" {x = @b4, y = @b2} {n = 4 : i64}
// CHECK-NEXT: plan.kernel "grad_norm_sq" {grads = [@b2], sq = @b8} {}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@b8]} {axis = "dp", op = "sum"} {plan.origin = "grad_norm", plan.payload = "grad norm"}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@b8]} {axis = "pp", op = "sum"} {plan.origin = "grad_norm", plan.payload = "grad norm"}
// CHECK-NEXT: plan.kernel "grad_norm_clip" {grads = [@b2], norm = @b5, sq = @b8} {max_norm = 0.000000e+00 : f64}
// CHECK-NEXT: plan.kernel "adamw" {grad = @b2, m = @b6, param = @b0, v = @b7}
module {
  shard.grid @mesh(shape = 2x1x2) {xf.mesh_axes = ["dp", "tp", "pp"]}
  plan.program @stage1 {
    plan.buffer @b0 : tensor<4x2xf32> {kind = "param", memory_class = "optimizer_state", name = "t"}
    plan.buffer @b1 : tensor<4x2xbf16> {kind = "param", name = "t.bf16"}
    plan.buffer @b2 : tensor<4x2xbf16> {kind = "grad", name = "t.grad"}
    plan.buffer @b3 : tensor<4x2xbf16> {kind = "activation", name = "dy"}
    plan.buffer @b4 : tensor<4x2xbf16> {kind = "scratch", name = "t.grad@stage0"}
    plan.buffer @b5 : tensor<1xf32> {kind = "metric", name = "grad_norm"}
    plan.buffer @b6 : tensor<4x2xf32> {kind = "optimizer_state", name = "t.exp_avg"}
    plan.buffer @b7 : tensor<4x2xf32> {kind = "optimizer_state", name = "t.exp_avg_sq"}
    plan.param "t" value @b0 grad @b2 state [@b6, @b7] {init = {kind = "normal", std = 2.0e-02 : f64}, weight_decay = false}
    plan.buffer @b8 : tensor<1xf64> {kind = "scratch", name = "grad_norm.sq"}
    plan.subroutine @step_begin {
      plan.kernel "cast" {x = @b0, y = @b1} {n = 8 : i64}
      plan.kernel "fill_zero" {x = [@b2]} {}
    }
    plan.subroutine @backward {
      plan.kernel "embedding_bwd_weight" {dout = @b3, dtable = @b2, ids = @b3} {H = 2 : i64, M = 4 : i64, V = 4 : i64, accumulate = true}
    }
    plan.subroutine @optimizer {
      plan.kernel "recv" {y = @b4} {axis = "pp", peer = 0 : i64, tag = 0 : i64} {plan.payload = "tied parameter"}
      plan.kernel "accumulate" {x = @b4, y = @b2} {n = 8 : i64}
      plan.kernel "all_reduce" {x = [@b2]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients", plan.payload = "gradients"}
      plan.kernel "grad_norm_sq" {grads = [@b2], sq = @b8} {}
      plan.kernel "all_reduce" {x = [@b8]} {axis = "pp", op = "sum"} {plan.origin = "grad_norm", plan.payload = "grad norm"}
      plan.kernel "grad_norm_clip" {grads = [@b2], norm = @b5, sq = @b8} {max_norm = 0.0 : f64}
      plan.kernel "adamw" {grad = @b2, m = @b6, param = @b0, v = @b7} {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64}
    }
    plan.schedule {
      plan.action @step_begin
      plan.action @optimizer
    }
  }
}
