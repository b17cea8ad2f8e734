// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-fuse-optimizer))" | FileCheck %s
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-fuse-optimizer,llcdist-plan-memory))" | FileCheck %s --check-prefix=MEM

// A mixed-precision AdamW step: the masters' casts into their bf16 copies
// become one cast_multi; the updates, interleaved decay (matrices) and
// no-decay (norms), become one adamw_multi per group of two or more, the
// decay group first (its first op comes first), each list in the group's
// order; the no-decay group's one update stays an adamw after it. The
// program records what was fused.
// CHECK-LABEL: plan.program @adamw
// CHECK-SAME: plan.fused = [{from = "cast", into = 1 : i64, ops = 3 : i64, pass = "llcdist-plan-fuse-optimizer", to = "cast_multi"}, {from = "adamw", into = 1 : i64, ops = 2 : i64, pass = "llcdist-plan-fuse-optimizer", to = "adamw_multi"}]
// CHECK: plan.subroutine @step_begin {
// CHECK-NEXT: plan.kernel "cast_multi" {x = [@w0, @n0, @w1], y = [@c0, @cn0, @c1]} {}
// CHECK-NEXT: plan.kernel "fill_zero"
// CHECK-NEXT: {{^ *}}}
// CHECK: plan.subroutine @optimizer {
// CHECK-NEXT: plan.kernel "grad_norm"
// CHECK-NEXT: plan.kernel "adamw_multi" {grads = [@g0, @g1], m = [@m0, @m1], params = [@w0, @w1], v = [@v0, @v1]} {beta1 = 9.000000e-01 : f64, beta2 = {{.*}}, eps = 1.000000e-08 : f64, weight_decay = 1.000000e-01 : f64}
// CHECK-NEXT: plan.kernel "adamw" {grad = @gn0, m = @mn0, param = @n0, v = @vn0} {beta1 = 9.000000e-01 : f64, beta2 = {{.*}}, eps = 1.000000e-08 : f64, weight_decay = 0.000000e+00 : f64}
// CHECK-NEXT: {{^ *}}}
// The memory plan accepts the fused ops (every buffer keeps its lifetime).
// MEM-LABEL: plan.program @adamw
// MEM: arena_bytes
plan.program @adamw {
  plan.buffer @w0 : tensor<8xf32> {kind = "param", name = "w0"}
  plan.buffer @g0 : tensor<8xf32> {kind = "grad", name = "w0.grad"}
  plan.buffer @m0 : tensor<8xf32> {kind = "optimizer_state", name = "w0.exp_avg"}
  plan.buffer @v0 : tensor<8xf32> {kind = "optimizer_state", name = "w0.exp_avg_sq"}
  plan.buffer @c0 : tensor<8xbf16> {kind = "param", name = "w0.bf16"}
  plan.buffer @n0 : tensor<4xf32> {kind = "param", name = "n0"}
  plan.buffer @gn0 : tensor<4xf32> {kind = "grad", name = "n0.grad"}
  plan.buffer @mn0 : tensor<4xf32> {kind = "optimizer_state", name = "n0.exp_avg"}
  plan.buffer @vn0 : tensor<4xf32> {kind = "optimizer_state", name = "n0.exp_avg_sq"}
  plan.buffer @cn0 : tensor<4xbf16> {kind = "param", name = "n0.bf16"}
  plan.buffer @w1 : tensor<16xf32> {kind = "param", name = "w1"}
  plan.buffer @g1 : tensor<16xf32> {kind = "grad", name = "w1.grad"}
  plan.buffer @m1 : tensor<16xf32> {kind = "optimizer_state", name = "w1.exp_avg"}
  plan.buffer @v1 : tensor<16xf32> {kind = "optimizer_state", name = "w1.exp_avg_sq"}
  plan.buffer @c1 : tensor<16xbf16> {kind = "param", name = "w1.bf16"}
  plan.buffer @norm : tensor<f32> {kind = "metric", name = "grad_norm"}
  plan.param "w0" value @w0 grad @g0 state [@m0, @v0] {init = {kind = "zeros"}, weight_decay = true}
  plan.param "n0" value @n0 grad @gn0 state [@mn0, @vn0] {init = {kind = "ones"}, weight_decay = false}
  plan.param "w1" value @w1 grad @g1 state [@m1, @v1] {init = {kind = "zeros"}, weight_decay = true}
  plan.subroutine @step_begin {
    plan.kernel "cast" {x = @w0, y = @c0} {n = 8 : i64}
    plan.kernel "cast" {x = @n0, y = @cn0} {n = 4 : i64}
    plan.kernel "cast" {x = @w1, y = @c1} {n = 16 : i64}
    plan.kernel "fill_zero" {x = [@g0, @gn0, @g1]} {}
  }
  plan.subroutine @optimizer {
    plan.kernel "grad_norm" {grads = [@g0, @gn0, @g1], norm = @norm} {max_norm = 1.0 : f64}
    plan.kernel "adamw" {param = @w0, grad = @g0, m = @m0, v = @v0} {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64}
    plan.kernel "adamw" {param = @n0, grad = @gn0, m = @mn0, v = @vn0} {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64}
    plan.kernel "adamw" {param = @w1, grad = @g1, m = @m1, v = @v1} {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64}
  }
  plan.schedule {
    plan.action @step_begin
    plan.action @optimizer
  }
}

// -----

// SGD: updates without momentum have no momentum_bufs list. A wait between
// the updates (the grad buckets' optimizer) ends a window: the updates on
// either side fuse apart, and a window of one op stays as it is.
// CHECK-LABEL: plan.program @sgd
// CHECK: plan.subroutine @optimizer {
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 0 : i64}
// CHECK-NEXT: plan.kernel "sgd_multi" {grads = [@g0, @g1], params = [@w0, @w1]} {momentum = 0.000000e+00 : f64, weight_decay = 0.000000e+00 : f64}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 1 : i64}
// CHECK-NEXT: plan.kernel "sgd" {grad = @g2, param = @w2}
// CHECK-NEXT: {{^ *}}}
plan.program @sgd attributes {queues = ["compute", "comm"]} {
  plan.buffer @w0 : tensor<8xf32> {kind = "param", name = "w0"}
  plan.buffer @g0 : tensor<8xf32> {kind = "grad", name = "w0.grad"}
  plan.buffer @w1 : tensor<8xf32> {kind = "param", name = "w1"}
  plan.buffer @g1 : tensor<8xf32> {kind = "grad", name = "w1.grad"}
  plan.buffer @w2 : tensor<8xf32> {kind = "param", name = "w2"}
  plan.buffer @g2 : tensor<8xf32> {kind = "grad", name = "w2.grad"}
  plan.param "w0" value @w0 grad @g0 state [] {init = {kind = "zeros"}, weight_decay = false}
  plan.param "w1" value @w1 grad @g1 state [] {init = {kind = "zeros"}, weight_decay = false}
  plan.param "w2" value @w2 grad @g2 state [] {init = {kind = "zeros"}, weight_decay = false}
  plan.subroutine @backward {
    plan.kernel "all_reduce" {x = [@g0, @g1]} {axis = "dp", op = "sum"} {queue = "comm", token = 0 : i64}
    plan.kernel "all_reduce" {x = [@g2]} {axis = "dp", op = "sum"} {queue = "comm", token = 1 : i64}
  }
  plan.subroutine @optimizer {
    plan.kernel "wait" {} {} {token = 0 : i64}
    plan.kernel "sgd" {param = @w0, grad = @g0} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
    plan.kernel "sgd" {param = @w1, grad = @g1} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
    plan.kernel "wait" {} {} {token = 1 : i64}
    plan.kernel "sgd" {param = @w2, grad = @g2} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
  }
  plan.schedule {
    plan.action @backward microbatch 0
    plan.action @optimizer
  }
}

// -----

// Updates that write one buffer twice (never emitted by the lowering) keep
// their order: nothing fuses, nothing is recorded. (Reading one buffer twice
// would not stop the fusion.)
// CHECK-LABEL: plan.program @shared
// CHECK-NOT: plan.fused
// CHECK: plan.kernel "sgd" {grad = @g0, param = @w0}
// CHECK-NEXT: plan.kernel "sgd" {grad = @g1, param = @w0}
plan.program @shared {
  plan.buffer @w0 : tensor<8xf32> {kind = "param", name = "w0"}
  plan.buffer @g0 : tensor<8xf32> {kind = "grad", name = "w0.grad"}
  plan.buffer @g1 : tensor<8xf32> {kind = "scratch", name = "g1"}
  plan.param "w0" value @w0 grad @g0 state [] {init = {kind = "zeros"}, weight_decay = false}
  plan.subroutine @optimizer {
    plan.kernel "sgd" {param = @w0, grad = @g0} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
    plan.kernel "sgd" {param = @w0, grad = @g1} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
  }
  plan.schedule {
    plan.action @optimizer
  }
}
