// RUN: llc-dist-opt %s -split-input-file -llcdist-plan-zero -mlir-print-debuginfo | FileCheck %s

// ZeRO-1 on dp = 2, f32 AdamW. @w (4x2) splits in two 2x2 blocks; the norm
// weight @n (3 rows) in blocks of 2 rows, the last one padding: its
// collectives carry `total` and its param `block_rows`.
// The dp gradient all-reduce becomes one reduce-scatter per parameter, in
// plan.param order, into <name>.grad_shard buffers declared before the
// optimizer's first state buffer; the tp reduction, the norm and the update
// read the blocks; the norm sums over dp; the state holds the block; each
// update slices its block out of the parameter and gathers it back.
// CHECK-LABEL: plan.program @stage0
// CHECK: plan.buffer @b0 : tensor<4x2xf32> {kind = "param", name = "w"}
// CHECK-NEXT: plan.buffer @b1 : tensor<4x2xf32> {kind = "grad", name = "w.grad"}
// CHECK-NEXT: plan.buffer @b2 : tensor<3xf32> {kind = "param", name = "n"}
// CHECK-NEXT: plan.buffer @b3 : tensor<3xf32> {kind = "grad", name = "n.grad"}
// CHECK-NEXT: plan.buffer @b4 : tensor<1xf32> {kind = "metric", name = "grad_norm"}
// CHECK-NEXT: plan.buffer @[[WS:b[0-9]+]] : tensor<2x2xf32> {kind = "scratch", name = "w.grad_shard"}
// CHECK-NEXT: plan.buffer @[[NS:b[0-9]+]] : tensor<2xf32> {kind = "scratch", name = "n.grad_shard"}
// CHECK-NEXT: plan.buffer @[[WB:b[0-9]+]] : tensor<2x2xf32> {kind = "scratch", name = "w.shard"}
// CHECK-NEXT: plan.buffer @b5 : tensor<2x2xf32> {kind = "optimizer_state", name = "w.exp_avg"}
// CHECK-NEXT: plan.buffer @b6 : tensor<2x2xf32> {kind = "optimizer_state", name = "w.exp_avg_sq"}
// CHECK-NEXT: plan.param "w" value @b0 grad @b1 state [@b5, @b6] {{{.*}}local_shape = array<i64: 4, 2>, weight_decay = true, zero = {axis = "dp", stage = 1 : i64}}
// CHECK-NEXT: plan.buffer @[[NB:b[0-9]+]] : tensor<2xf32> {kind = "scratch", name = "n.shard"}
// CHECK-NEXT: plan.buffer @b7 : tensor<2xf32> {kind = "optimizer_state", name = "n.exp_avg"}
// CHECK-NEXT: plan.buffer @b8 : tensor<2xf32> {kind = "optimizer_state", name = "n.exp_avg_sq"}
// CHECK-NEXT: plan.param "n" {{.*}}local_shape = array<i64: 3>, weight_decay = false, zero = {axis = "dp", block_rows = 2 : i64, stage = 1 : i64}}
// The local grad_norm becomes the split norm: its f64 squared norm, declared
// before the subroutines, all-reduced over dp.
// CHECK-NEXT: plan.buffer @[[SQ:b[0-9]+]] : tensor<1xf64> {kind = "scratch", name = "grad_norm.sq"}
// CHECK-NEXT: plan.subroutine @step_begin
// The backward is untouched.
// CHECK: plan.subroutine @backward {
// CHECK-NEXT: plan.kernel "accumulate" {x = @b0, y = @b1}
// CHECK: plan.subroutine @optimizer {
// CHECK-NEXT: plan.kernel "reduce_scatter" {x = @b1, y = @[[WS]]} {axis = "dp", inner = 4 : i64, op = "sum", outer = 1 : i64} {plan.origin = "zero", plan.payload = "gradients"} loc(#[[RSLOC:loc[0-9]+]])
// CHECK-NEXT: plan.kernel "reduce_scatter" {x = @b3, y = @[[NS]]} {axis = "dp", inner = 2 : i64, op = "sum", outer = 1 : i64, total = 3 : i64} {plan.origin = "zero", plan.payload = "gradients"}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@[[WS]]]} {axis = "tp", group_size = 2 : i64, op = "sum"} {plan.payload = "kv-replica gradients"}
// CHECK-NEXT: plan.kernel "grad_norm_sq" {grads = [@[[WS]], @[[NS]]], sq = @[[SQ]]} {}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@[[SQ]]]} {axis = "dp", op = "sum"} {plan.origin = "grad_norm", plan.payload = "grad norm"} loc(#[[NORMLOC:loc[0-9]+]])
// CHECK-NEXT: plan.kernel "grad_norm_clip" {grads = [@[[WS]], @[[NS]]], norm = @b4, sq = @[[SQ]]} {max_norm = 1.000000e+00 : f64}
// CHECK-NEXT: plan.kernel "shard_slice" {x = @b0, y = @[[WB]]} {axis = "dp", inner = 4 : i64, outer = 1 : i64}
// CHECK-NEXT: plan.kernel "adamw" {grad = @[[WS]], m = @b5, param = @[[WB]], v = @b6}
// CHECK-NEXT: plan.kernel "all_gather" {x = @[[WB]], y = @b0} {axis = "dp", inner = 4 : i64, outer = 1 : i64} {plan.origin = "zero", plan.payload = "parameters"} loc(#[[AGLOC:loc[0-9]+]])
// CHECK-NEXT: plan.kernel "shard_slice" {x = @b2, y = @[[NB]]} {axis = "dp", inner = 2 : i64, outer = 1 : i64, total = 3 : i64}
// CHECK-NEXT: plan.kernel "adamw" {grad = @[[NS]], m = @b7, param = @[[NB]], v = @b8}
// CHECK-NEXT: plan.kernel "all_gather" {x = @[[NB]], y = @b2} {axis = "dp", inner = 2 : i64, outer = 1 : i64, total = 3 : i64}
// CHECK-NEXT: {{^ +}}}
// The reduce-scatter's provenance: the reason, the parameter, the step's
// location; the gather's: beside the update's.
// CHECK: #[[STEP:loc[0-9]+]] = loc("optimizer.mlir":1:1)
// CHECK: #[[W:loc[0-9]+]] = loc("w"(#[[STEP]]))
// CHECK: #[[NORMLOC]] = loc("grad_norm: the gradient blocks' squared norm over dp (ZeRO)"
// CHECK: #[[RSLOC]] = loc("ZeRO-1: reduce-scatter the gradient to the optimizer state's owner"(#[[W]]))
// CHECK: #[[AGLOC]] = loc("ZeRO: gather the updated shards"(#[[W]]))
#step = loc("optimizer.mlir":1:1)
module {
  shard.grid @mesh(shape = 2x2x1) {xf.mesh_axes = ["dp", "tp", "pp"]}
  plan.program @stage0 {
    plan.buffer @b0 : tensor<4x2xf32> {kind = "param", name = "w"}
    plan.buffer @b1 : tensor<4x2xf32> {kind = "grad", name = "w.grad"}
    plan.buffer @b2 : tensor<3xf32> {kind = "param", name = "n"}
    plan.buffer @b3 : tensor<3xf32> {kind = "grad", name = "n.grad"}
    plan.buffer @b4 : tensor<1xf32> {kind = "metric", name = "grad_norm"}
    plan.buffer @b5 : tensor<4x2xf32> {kind = "optimizer_state", name = "w.exp_avg"}
    plan.buffer @b6 : tensor<4x2xf32> {kind = "optimizer_state", name = "w.exp_avg_sq"}
    plan.param "w" value @b0 grad @b1 state [@b5, @b6] {init = {kind = "normal", std = 2.0e-02 : f64}, weight_decay = true}
    plan.buffer @b7 : tensor<3xf32> {kind = "optimizer_state", name = "n.exp_avg"}
    plan.buffer @b8 : tensor<3xf32> {kind = "optimizer_state", name = "n.exp_avg_sq"}
    plan.param "n" value @b2 grad @b3 state [@b7, @b8] {init = {kind = "ones"}, weight_decay = false}
    plan.subroutine @step_begin {
      plan.kernel "fill_zero" {x = [@b1, @b3]} {}
    }
    plan.subroutine @backward {
      plan.kernel "accumulate" {x = @b0, y = @b1} {n = 8 : i64}
    }
    plan.subroutine @optimizer {
      plan.kernel "all_reduce" {x = [@b1, @b3]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients", plan.payload = "gradients"} loc("data-parallel gradient sum"(#step))
      plan.kernel "all_reduce" {x = [@b1]} {axis = "tp", group_size = 2 : i64, op = "sum"} {plan.payload = "kv-replica gradients"}
      plan.kernel "grad_norm" {grads = [@b1, @b3], norm = @b4} {max_norm = 1.0 : f64}
      plan.kernel "adamw" {grad = @b1, m = @b5, param = @b0, v = @b6} {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64, weight_decay = 1.0e-02 : f64} loc("w"(#step))
      plan.kernel "adamw" {grad = @b3, m = @b7, param = @b2, v = @b8} {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64} loc("n"(#step))
    }
    plan.schedule {
      plan.action @step_begin
      plan.action @backward microbatch 0
      plan.action @optimizer
    }
  }
}

// -----

// Mixed precision: the f32 master is the block (the update writes it in
// place, no slice), the state too; step_begin casts the block to bf16
// (<name>.bf16_block, declared after everything else) and gathers the blocks
// into the working copy the ops read. The master stays counted as
// optimizer state.
// CHECK-LABEL: plan.program @mixed
// CHECK: plan.buffer @b0 : tensor<2x2xf32> {kind = "param", memory_class = "optimizer_state", name = "w"}
// CHECK-NEXT: plan.buffer @b1 : tensor<4x2xbf16> {kind = "param", name = "w.bf16"}
// CHECK-NEXT: plan.buffer @b2 : tensor<4x2xbf16> {kind = "grad", name = "w.grad"}
// CHECK-NEXT: plan.buffer @[[GS:b[0-9]+]] : tensor<2x2xbf16> {kind = "scratch", name = "w.grad_shard"}
// CHECK-NEXT: plan.buffer @b3 : tensor<2x2xf32> {kind = "optimizer_state", name = "w.exp_avg"}
// CHECK-NEXT: plan.buffer @b4 : tensor<2x2xf32> {kind = "optimizer_state", name = "w.exp_avg_sq"}
// CHECK-NEXT: plan.param "w" {{.*}}zero = {axis = "dp", stage = 1 : i64, value_block = true}}
// CHECK-NEXT: plan.buffer @[[BLK:b[0-9]+]] : tensor<2x2xbf16> {kind = "scratch", name = "w.bf16_block"}
// CHECK-NEXT: plan.subroutine @step_begin {
// CHECK-NEXT: plan.kernel "cast" {x = @b0, y = @[[BLK]]} {n = 4 : i64}
// CHECK-NEXT: plan.kernel "all_gather" {x = @[[BLK]], y = @b1} {axis = "dp", inner = 4 : i64, outer = 1 : i64} {plan.origin = "zero", plan.payload = "parameters"}
// CHECK-NEXT: plan.kernel "fill_zero"
// CHECK: plan.subroutine @optimizer {
// CHECK-NEXT: plan.kernel "reduce_scatter" {x = @b2, y = @[[GS]]}
// CHECK-NEXT: plan.kernel "adamw" {grad = @[[GS]], m = @b3, param = @b0, v = @b4}
// CHECK-NEXT: {{^ +}}}
module {
  shard.grid @mesh(shape = 2x1x1) {xf.mesh_axes = ["dp", "tp", "pp"]}
  plan.program @mixed {
    plan.buffer @b0 : tensor<4x2xf32> {kind = "param", memory_class = "optimizer_state", name = "w"}
    plan.buffer @b1 : tensor<4x2xbf16> {kind = "param", name = "w.bf16"}
    plan.buffer @b2 : tensor<4x2xbf16> {kind = "grad", name = "w.grad"}
    plan.buffer @b3 : tensor<4x2xf32> {kind = "optimizer_state", name = "w.exp_avg"}
    plan.buffer @b4 : tensor<4x2xf32> {kind = "optimizer_state", name = "w.exp_avg_sq"}
    plan.param "w" value @b0 grad @b2 state [@b3, @b4] {init = {kind = "normal", std = 2.0e-02 : f64}, weight_decay = true}
    plan.subroutine @step_begin {
      plan.kernel "cast" {x = @b0, y = @b1} {n = 8 : i64}
      plan.kernel "fill_zero" {x = [@b2]} {}
    }
    plan.subroutine @optimizer {
      plan.kernel "all_reduce" {x = [@b2]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients", plan.payload = "gradients"}
      plan.kernel "adamw" {grad = @b2, m = @b3, param = @b0, v = @b4} {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64, weight_decay = 1.0e-02 : f64}
    }
    plan.schedule {
      plan.action @step_begin
      plan.action @optimizer
    }
  }
}

// -----

// A pipeline stage holding a tied replica (@t, updated on stage 1) and
// updating @w with SGD without momentum (no state). The replica is not
// reduced, sliced or updated here, but its param records the block; the
// tied exchange before the reduction reads the whole gradient; the norm sums
// over dp after the stages; @w's slice is declared before its plan.param.
// CHECK-LABEL: plan.program @stage0
// CHECK: plan.buffer @[[WS:b[0-9]+]] : tensor<2x2xf32> {kind = "scratch", name = "w.grad_shard"}
// CHECK-NEXT: plan.param "t" value @b0 grad @b1 state [] {{{.*}}local_shape = array<i64: 4, 2>, {{.*}}pipeline.replica_of = 1 : i64, weight_decay = false, zero = {axis = "dp", stage = 1 : i64}}
// CHECK-NEXT: plan.buffer @[[WB:b[0-9]+]] : tensor<2x2xf32> {kind = "scratch", name = "w.shard"}
// CHECK-NEXT: plan.param "w" value @b2 grad @b3 state []
// CHECK: plan.subroutine @optimizer {
// CHECK-NEXT: plan.kernel "send" {x = @b1}
// CHECK-NEXT: plan.kernel "reduce_scatter" {x = @b3, y = @[[WS]]}
// CHECK-NOT: reduce_scatter
// CHECK-NEXT: plan.kernel "grad_norm_sq" {grads = [@[[WS]]], sq = @b5} {}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@b5]} {axis = "dp", op = "sum"} {plan.origin = "grad_norm", plan.payload = "grad norm"}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@b5]} {axis = "pp", op = "sum"} {plan.origin = "grad_norm", plan.payload = "grad norm"}
// CHECK-NEXT: plan.kernel "grad_norm_clip" {grads = [@[[WS]]], norm = @b4, sq = @b5} {max_norm = 0.000000e+00 : f64}
// CHECK-NEXT: plan.kernel "shard_slice" {x = @b2, y = @[[WB]]}
// CHECK-NEXT: plan.kernel "sgd" {grad = @[[WS]], param = @[[WB]]}
// CHECK-NEXT: plan.kernel "all_gather" {x = @[[WB]], y = @b2}
// CHECK-NEXT: plan.kernel "recv" {y = @b0}
// CHECK-NEXT: {{^ +}}}
module {
  shard.grid @mesh(shape = 2x1x2) {xf.mesh_axes = ["dp", "tp", "pp"]}
  plan.program @stage0 {
    plan.buffer @b0 : tensor<4x2xf32> {kind = "param", name = "t"}
    plan.buffer @b1 : tensor<4x2xf32> {kind = "grad", name = "t.grad"}
    plan.buffer @b2 : tensor<4x2xf32> {kind = "param", name = "w"}
    plan.buffer @b3 : tensor<4x2xf32> {kind = "grad", name = "w.grad"}
    plan.buffer @b4 : tensor<1xf32> {kind = "metric", name = "grad_norm"}
    plan.param "t" value @b0 grad @b1 state [] {init = {kind = "normal", std = 2.0e-02 : f64}, pipeline.replica_of = 1 : i64, weight_decay = false}
    plan.param "w" value @b2 grad @b3 state [] {init = {kind = "normal", std = 2.0e-02 : f64}, weight_decay = true}
    plan.buffer @b5 : tensor<1xf64> {kind = "scratch", name = "grad_norm.sq"}
    plan.subroutine @step_begin {
      plan.kernel "fill_zero" {x = [@b1, @b3]} {}
    }
    plan.subroutine @optimizer {
      plan.kernel "send" {x = @b1} {axis = "pp", peer = 1 : i64, tag = 0 : i64} {plan.payload = "tied parameter"}
      plan.kernel "all_reduce" {x = [@b3]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients", plan.payload = "gradients"}
      plan.kernel "grad_norm_sq" {grads = [@b3], sq = @b5} {}
      plan.kernel "all_reduce" {x = [@b5]} {axis = "pp", op = "sum"} {plan.origin = "grad_norm", plan.payload = "grad norm"}
      plan.kernel "grad_norm_clip" {grads = [@b3], norm = @b4, sq = @b5} {max_norm = 0.0 : f64}
      plan.kernel "sgd" {grad = @b3, param = @b2} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
      plan.kernel "recv" {y = @b0} {axis = "pp", peer = 1 : i64, tag = 0 : i64} {plan.payload = "tied parameter"}
    }
    plan.schedule {
      plan.action @step_begin
      plan.action @optimizer
    }
  }
}
