// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-grad-buckets{bucket-size=40}))" | FileCheck %s
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-grad-buckets{bucket-size=40},llcdist-plan-memory,llcdist-verify-async))" | FileCheck %s --check-prefix=RACE
// RUN: not llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-grad-buckets{bucket-size=0}))" 2>&1 | FileCheck %s --check-prefix=ZERO

// Two microbatches, three parameters. The backward completes @g2 (32
// elements), then @g1 (16), then @g0 (32): buckets of >= 40 elements in that
// order are [@g2, @g1] (48) and [@g0] (32). The last microbatch runs a clone
// of the backward that starts each bucket's all_reduce right after its last
// gradient write (@g1's accumulate, @g0's); the first microbatch's backward
// communicates nothing; the optimizer waits where the all_reduce was.
// CHECK-LABEL: plan.program @dp
// CHECK-SAME: plan.grad_buckets = [{bytes = 192 : i64, collective = "all_reduce", elements = 48 : i64, grads = 2 : i64, subroutine = "backward_last"}, {bytes = 128 : i64, collective = "all_reduce", elements = 32 : i64, grads = 1 : i64, subroutine = "backward_last"}]
// CHECK-SAME: queues = ["compute", "comm"]
// CHECK: plan.subroutine @backward {
// CHECK-NEXT: plan.kernel "accumulate" {x = @d2, y = @g2}
// CHECK-NEXT: plan.kernel "accumulate" {x = @d1, y = @g1}
// CHECK-NEXT: plan.kernel "copy"
// CHECK-NEXT: plan.kernel "accumulate" {x = @d0, y = @g0}
// CHECK-NEXT: {{^ *}}}
// CHECK: plan.subroutine @backward_last {
// CHECK-NEXT: plan.kernel "accumulate" {x = @d2, y = @g2}
// CHECK-NEXT: plan.kernel "accumulate" {x = @d1, y = @g1}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@g2, @g1]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients", queue = "comm", token = 0 : i64}
// CHECK-NEXT: plan.kernel "copy"
// CHECK-NEXT: plan.kernel "accumulate" {x = @d0, y = @g0}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@g0]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients", queue = "comm", token = 1 : i64}
// CHECK-NEXT: {{^ *}}}
// CHECK: plan.subroutine @optimizer {
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 0 : i64}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 1 : i64}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@loss]} {axis = "dp", op = "avg"} {plan.origin = "loss"}
// CHECK-NEXT: plan.kernel "sgd"
// CHECK: plan.action @backward microbatch 0
// CHECK-NEXT: plan.action @backward_last microbatch 1
// CHECK-NEXT: plan.action @optimizer
// The race check accepts the result.
// RACE-LABEL: plan.program @dp
plan.program @dp {
  plan.buffer @w0 : tensor<32xf32> {kind = "param", name = "w0"}
  plan.buffer @g0 : tensor<32xf32> {kind = "grad", name = "w0.grad"}
  plan.buffer @w1 : tensor<16xf32> {kind = "param", name = "w1"}
  plan.buffer @g1 : tensor<16xf32> {kind = "grad", name = "w1.grad"}
  plan.buffer @w2 : tensor<32xf32> {kind = "param", name = "w2"}
  plan.buffer @g2 : tensor<32xf32> {kind = "grad", name = "w2.grad"}
  plan.buffer @loss : tensor<1xf32> {kind = "metric", name = "loss"}
  plan.buffer @d0 : tensor<32xf32> {kind = "activation", name = "d0"}
  plan.buffer @d1 : tensor<16xf32> {kind = "activation", name = "d1"}
  plan.buffer @d2 : tensor<32xf32> {kind = "activation", name = "d2"}
  plan.param "w0" value @w0 grad @g0 state [] {init = {kind = "zeros"}, weight_decay = false}
  plan.param "w1" value @w1 grad @g1 state [] {init = {kind = "zeros"}, weight_decay = false}
  plan.param "w2" value @w2 grad @g2 state [] {init = {kind = "zeros"}, weight_decay = false}
  plan.subroutine @step_begin {
    plan.kernel "fill_zero" {x = [@g0, @g1, @g2, @loss]} {}
  }
  plan.subroutine @backward {
    plan.kernel "accumulate" {x = @d2, y = @g2} {n = 32 : i64}
    plan.kernel "accumulate" {x = @d1, y = @g1} {n = 16 : i64}
    plan.kernel "copy" {x = @d2, y = @d0} {n = 32 : i64}
    plan.kernel "accumulate" {x = @d0, y = @g0} {n = 32 : i64}
  }
  plan.subroutine @optimizer {
    plan.kernel "all_reduce" {x = [@g0, @g1, @g2]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients"}
    plan.kernel "all_reduce" {x = [@loss]} {axis = "dp", op = "avg"} {plan.origin = "loss"}
    plan.kernel "sgd" {param = @w0, grad = @g0} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
    plan.kernel "sgd" {param = @w1, grad = @g1} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
    plan.kernel "sgd" {param = @w2, grad = @g2} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
  }
  plan.schedule {
    plan.action @step_begin
    plan.action @backward microbatch 0
    plan.action @backward microbatch 1
    plan.action @optimizer
  }
}

// -----

// One microbatch: the clone is the whole backward, the original goes.
// CHECK-LABEL: plan.program @one_microbatch
// CHECK-NOT: plan.subroutine @backward {
// CHECK: plan.subroutine @backward_last {
// CHECK-NEXT: plan.kernel "accumulate" {x = @d, y = @g}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@g]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients", queue = "comm", token = 0 : i64}
// CHECK: plan.action @backward_last microbatch 0
// RACE-LABEL: plan.program @one_microbatch
plan.program @one_microbatch {
  plan.buffer @w : tensor<4xf32> {kind = "param", name = "w"}
  plan.buffer @g : tensor<4xf32> {kind = "grad", name = "w.grad"}
  plan.buffer @d : tensor<4xf32> {kind = "activation", name = "d"}
  plan.param "w" value @w grad @g state [] {init = {kind = "zeros"}, weight_decay = false}
  plan.subroutine @backward {
    plan.kernel "accumulate" {x = @d, y = @g} {n = 4 : i64}
  }
  plan.subroutine @optimizer {
    plan.kernel "all_reduce" {x = [@g]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients"}
    plan.kernel "sgd" {param = @w, grad = @g} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
  }
  plan.schedule {
    plan.action @backward microbatch 0
    plan.action @optimizer
  }
}

// -----

// A pipeline stage with two chunks (interleaved): each chunk's backward
// (@backward_v0 writes @g0, @backward_v2 writes @g2) gets a clone for its last
// microbatch, which starts that chunk's buckets; the tokens run on across
// the clones in the order of their actions. @gt is a tied parameter's
// gradient that the optimizer adds the other stage's part to before the
// reduction: it stays in the synchronous all_reduce, after the waits.
// CHECK-LABEL: plan.program @chunks
// CHECK-SAME: plan.grad_buckets = [{bytes = 128 : i64, collective = "all_reduce", elements = 32 : i64, grads = 1 : i64, subroutine = "backward_v2_last"}, {bytes = 128 : i64, collective = "all_reduce", elements = 32 : i64, grads = 1 : i64, subroutine = "backward_v0_last"}]
// CHECK: plan.subroutine @backward_v0_last {
// CHECK-NEXT: plan.kernel "accumulate" {x = @d0, y = @gt}
// CHECK-NEXT: plan.kernel "accumulate" {x = @d0, y = @g0}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@g0]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients", queue = "comm", token = 1 : i64}
// CHECK-NEXT: {{^ *}}}
// CHECK: plan.subroutine @backward_v2 {
// CHECK-NEXT: plan.kernel "accumulate" {x = @d2, y = @g2}
// CHECK-NEXT: {{^ *}}}
// CHECK: plan.subroutine @backward_v2_last {
// CHECK-NEXT: plan.kernel "accumulate" {x = @d2, y = @g2}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@g2]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients", queue = "comm", token = 0 : i64}
// CHECK-NEXT: {{^ *}}}
// CHECK: plan.subroutine @optimizer {
// CHECK-NEXT: plan.kernel "recv"
// CHECK-NEXT: plan.kernel "accumulate" {x = @dt, y = @gt}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 0 : i64}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 1 : i64}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@gt]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients"}
// CHECK: plan.action @backward_v2 microbatch 0
// CHECK-NEXT: plan.action @backward_v2_last microbatch 1
// CHECK-NEXT: plan.action @backward_v0 microbatch 0
// CHECK-NEXT: plan.action @backward_v0_last microbatch 1
// CHECK-NEXT: plan.action @optimizer
// RACE-LABEL: plan.program @chunks
plan.program @chunks {
  plan.buffer @w0 : tensor<32xf32> {kind = "param", name = "w0"}
  plan.buffer @g0 : tensor<32xf32> {kind = "grad", name = "w0.grad"}
  plan.buffer @w2 : tensor<32xf32> {kind = "param", name = "w2"}
  plan.buffer @g2 : tensor<32xf32> {kind = "grad", name = "w2.grad"}
  plan.buffer @wt : tensor<32xf32> {kind = "param", name = "wt"}
  plan.buffer @gt : tensor<32xf32> {kind = "grad", name = "wt.grad"}
  plan.buffer @d0 : tensor<32xf32> {kind = "activation", name = "d0"}
  plan.buffer @d2 : tensor<32xf32> {kind = "activation", name = "d2"}
  plan.buffer @dt : tensor<32xf32> {kind = "scratch", name = "wt.grad@stage1"}
  plan.param "w0" value @w0 grad @g0 state [] {init = {kind = "zeros"}, weight_decay = false}
  plan.param "w2" value @w2 grad @g2 state [] {init = {kind = "zeros"}, weight_decay = false}
  plan.param "wt" value @wt grad @gt state [] {init = {kind = "zeros"}, weight_decay = false}
  plan.subroutine @step_begin {
    plan.kernel "fill_zero" {x = [@g0, @g2, @gt]} {}
  }
  plan.subroutine @backward_v0 {
    plan.kernel "accumulate" {x = @d0, y = @gt} {n = 32 : i64}
    plan.kernel "accumulate" {x = @d0, y = @g0} {n = 32 : i64}
  }
  plan.subroutine @backward_v2 {
    plan.kernel "accumulate" {x = @d2, y = @g2} {n = 32 : i64}
  }
  plan.subroutine @optimizer {
    plan.kernel "recv" {y = @dt} {axis = "pp", peer = 1 : i64, tag = 7 : i64}
    plan.kernel "accumulate" {x = @dt, y = @gt} {n = 32 : i64}
    plan.kernel "all_reduce" {x = [@g0, @g2, @gt]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients"}
    plan.kernel "sgd" {param = @w0, grad = @g0} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
    plan.kernel "sgd" {param = @w2, grad = @g2} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
    plan.kernel "sgd" {param = @wt, grad = @gt} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
  }
  plan.schedule {
    plan.action @step_begin
    plan.action @backward_v2 microbatch 0
    plan.action @backward_v2 microbatch 1
    plan.action @backward_v0 microbatch 0
    plan.action @backward_v0 microbatch 1
    plan.action @optimizer
  }
}

// -----

// No data parallelism (no dp gradient all_reduce): unchanged.
// CHECK-LABEL: plan.program @no_dp {
// CHECK: plan.subroutine @backward {
// CHECK-NOT: token
// CHECK: plan.action @backward microbatch 0
plan.program @no_dp {
  plan.buffer @w : tensor<4xf32> {kind = "param", name = "w"}
  plan.buffer @g : tensor<4xf32> {kind = "grad", name = "w.grad"}
  plan.buffer @d : tensor<4xf32> {kind = "activation", name = "d"}
  plan.param "w" value @w grad @g state [] {init = {kind = "zeros"}, weight_decay = false}
  plan.subroutine @backward {
    plan.kernel "accumulate" {x = @d, y = @g} {n = 4 : i64}
  }
  plan.subroutine @optimizer {
    plan.kernel "sgd" {param = @w, grad = @g} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
  }
  plan.schedule {
    plan.action @backward microbatch 0
    plan.action @optimizer
  }
}

// -----

// ZeRO-1: one reduce_scatter per gradient into its block. One bucket,
// [@g1, @g0] (48 elements, @g1 complete first): its scatters start together
// after its last gradient write, one token each, and the optimizer waits for
// each where its scatter was.
// CHECK-LABEL: plan.program @zero1
// CHECK-SAME: plan.grad_buckets = [{bytes = 192 : i64, collective = "reduce_scatter", elements = 48 : i64, grads = 2 : i64, subroutine = "backward_last"}]
// CHECK: plan.subroutine @backward_last {
// CHECK-NEXT: plan.kernel "accumulate" {x = @d1, y = @g1}
// CHECK-NEXT: plan.kernel "accumulate" {x = @d0, y = @g0}
// CHECK-NEXT: plan.kernel "reduce_scatter" {x = @g1, y = @s1} {axis = "dp", inner = 8 : i64, op = "sum", outer = 1 : i64} {plan.origin = "zero", queue = "comm", token = 0 : i64}
// CHECK-NEXT: plan.kernel "reduce_scatter" {x = @g0, y = @s0} {axis = "dp", inner = 16 : i64, op = "sum", outer = 1 : i64} {plan.origin = "zero", queue = "comm", token = 1 : i64}
// CHECK: plan.subroutine @optimizer {
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 1 : i64}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 0 : i64}
// CHECK-NEXT: plan.kernel "sgd" {grad = @s0
// RACE-LABEL: plan.program @zero1
plan.program @zero1 {
  plan.buffer @w0 : tensor<16xf32> {kind = "param", name = "w0"}
  plan.buffer @g0 : tensor<32xf32> {kind = "grad", name = "w0.grad"}
  plan.buffer @s0 : tensor<16xf32> {kind = "scratch", name = "w0.grad_shard"}
  plan.buffer @w1 : tensor<8xf32> {kind = "param", name = "w1"}
  plan.buffer @g1 : tensor<16xf32> {kind = "grad", name = "w1.grad"}
  plan.buffer @s1 : tensor<8xf32> {kind = "scratch", name = "w1.grad_shard"}
  plan.buffer @d0 : tensor<32xf32> {kind = "activation", name = "d0"}
  plan.buffer @d1 : tensor<16xf32> {kind = "activation", name = "d1"}
  plan.subroutine @backward {
    plan.kernel "accumulate" {x = @d1, y = @g1} {n = 16 : i64}
    plan.kernel "accumulate" {x = @d0, y = @g0} {n = 32 : i64}
  }
  plan.subroutine @optimizer {
    plan.kernel "reduce_scatter" {x = @g0, y = @s0} {axis = "dp", inner = 16 : i64, op = "sum", outer = 1 : i64} {plan.origin = "zero"}
    plan.kernel "reduce_scatter" {x = @g1, y = @s1} {axis = "dp", inner = 8 : i64, op = "sum", outer = 1 : i64} {plan.origin = "zero"}
    plan.kernel "sgd" {param = @w0, grad = @s0} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
    plan.kernel "sgd" {param = @w1, grad = @s1} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
  }
  plan.schedule {
    plan.action @backward microbatch 0
    plan.action @backward microbatch 1
    plan.action @optimizer
  }
}

// ZERO: error: llcdist-plan-grad-buckets: bucket-size must be >= 1, got 0

// -----

// ZeRO-2: the backward reduce-scatters each contribution (@c0, @c1, @c2; 32,
// 16, 32 elements) into a part and adds it to the gradient's block. Buckets
// of >= 40 elements: [@c0, @c1], [@c2]. Every scatter starts where it is; the
// first bucket's waits and adds move to where the second is complete (here
// the end, which also drains the second), in order. @c1 is written again by
// the copy: the bucket in flight that reads it is waited and added first.
// CHECK-LABEL: plan.program @zero2
// CHECK-SAME: plan.grad_buckets = [{bytes = 192 : i64, collective = "reduce_scatter", elements = 48 : i64, every_microbatch = true, grads = 2 : i64, subroutine = "backward"}, {bytes = 128 : i64, collective = "reduce_scatter", elements = 32 : i64, every_microbatch = true, grads = 1 : i64, subroutine = "backward"}]
// CHECK: plan.subroutine @backward {
// CHECK-NEXT: plan.kernel "reduce_scatter" {x = @c0, y = @p0} {{.*}}queue = "comm", token = 0 : i64}
// CHECK-NEXT: plan.kernel "reduce_scatter" {x = @c1, y = @p1} {{.*}}queue = "comm", token = 1 : i64}
// CHECK-NEXT: plan.kernel "reduce_scatter" {x = @c2, y = @p2} {{.*}}queue = "comm", token = 2 : i64}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 0 : i64}
// CHECK-NEXT: plan.kernel "accumulate" {x = @p0, y = @g0}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 1 : i64}
// CHECK-NEXT: plan.kernel "accumulate" {x = @p1, y = @g1}
// CHECK-NEXT: plan.kernel "copy" {x = @c0, y = @c1}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 2 : i64}
// CHECK-NEXT: plan.kernel "accumulate" {x = @p2, y = @g2}
// CHECK-NEXT: {{^ *}}}
// RACE-LABEL: plan.program @zero2
// RACE: plan.kernel "wait"
plan.program @zero2 {
  plan.buffer @w0 : tensor<16xf32> {kind = "param", name = "w0"}
  plan.buffer @g0 : tensor<16xf32> {kind = "grad", name = "w0.grad"}
  plan.buffer @w1 : tensor<8xf32> {kind = "param", name = "w1"}
  plan.buffer @g1 : tensor<8xf32> {kind = "grad", name = "w1.grad"}
  plan.buffer @w2 : tensor<16xf32> {kind = "param", name = "w2"}
  plan.buffer @g2 : tensor<16xf32> {kind = "grad", name = "w2.grad"}
  plan.buffer @c0 : tensor<32xf32> {kind = "scratch", name = "w0.grad_mb"}
  plan.buffer @c1 : tensor<16xf32> {kind = "scratch", name = "w1.grad_mb"}
  plan.buffer @c2 : tensor<32xf32> {kind = "scratch", name = "w2.grad_mb"}
  plan.buffer @p0 : tensor<16xf32> {kind = "scratch", name = "w0.grad_part"}
  plan.buffer @p1 : tensor<8xf32> {kind = "scratch", name = "w1.grad_part"}
  plan.buffer @p2 : tensor<16xf32> {kind = "scratch", name = "w2.grad_part"}
  plan.param "w0" value @w0 grad @g0 state [] {init = {kind = "zeros"}, local_shape = array<i64: 32>, weight_decay = false, zero = {axis = "dp", stage = 2 : i64}}
  plan.param "w1" value @w1 grad @g1 state [] {init = {kind = "zeros"}, local_shape = array<i64: 16>, weight_decay = false, zero = {axis = "dp", stage = 2 : i64}}
  plan.param "w2" value @w2 grad @g2 state [] {init = {kind = "zeros"}, local_shape = array<i64: 32>, weight_decay = false, zero = {axis = "dp", stage = 2 : i64}}
  plan.subroutine @step_begin {
    plan.kernel "fill_zero" {x = [@g0, @g1, @g2]} {}
  }
  plan.subroutine @backward {
    plan.kernel "reduce_scatter" {x = @c0, y = @p0} {axis = "dp", inner = 16 : i64, op = "sum", outer = 1 : i64} {plan.origin = "zero"}
    plan.kernel "accumulate" {x = @p0, y = @g0} {n = 16 : i64}
    plan.kernel "reduce_scatter" {x = @c1, y = @p1} {axis = "dp", inner = 8 : i64, op = "sum", outer = 1 : i64} {plan.origin = "zero"}
    plan.kernel "accumulate" {x = @p1, y = @g1} {n = 8 : i64}
    plan.kernel "reduce_scatter" {x = @c2, y = @p2} {axis = "dp", inner = 16 : i64, op = "sum", outer = 1 : i64} {plan.origin = "zero"}
    plan.kernel "accumulate" {x = @p2, y = @g2} {n = 16 : i64}
    plan.kernel "copy" {x = @c0, y = @c1} {n = 16 : i64}
  }
  plan.subroutine @optimizer {
  }
  plan.schedule {
    plan.action @step_begin
    plan.action @backward microbatch 0
    plan.action @backward microbatch 1
    plan.action @optimizer
  }
}
