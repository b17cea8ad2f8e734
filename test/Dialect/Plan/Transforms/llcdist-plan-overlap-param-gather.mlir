// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-overlap-param-gather))" | FileCheck %s
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-overlap-param-gather,llcdist-plan-memory,llcdist-verify-async))" | FileCheck %s --check-prefix=RACE

// ZeRO-1, f32, two microbatches. The optimizer cuts @w's block out
// (shard_slice), updates it and gathers the blocks back. After the pass @w is
// the f32 master block (value_block, updated in place), the forward and
// backward read the whole copy @b10 ("w.whole", kind "param") that step_begin
// gathers on the comm queue; the first microbatch's forward (@forward_first)
// waits just before its first read of it; the shard buffer goes.
// CHECK-LABEL: plan.program @z1
// CHECK-SAME: plan.param_gather_overlap = {bytes = 16 : i64, gathers = 1 : i64, subroutine = "forward_first"}
// CHECK-SAME: queues = ["compute", "comm"]
// CHECK: plan.buffer @w : tensor<2xf32> {kind = "param", memory_class = "optimizer_state", name = "w"}
// CHECK-NEXT: plan.buffer @b10 : tensor<4xf32> {kind = "param", name = "w.whole"}
// CHECK-NOT: name = "w.shard"
// CHECK: plan.param "w" {{.*}}zero = {axis = "dp", stage = 1 : i64, value_block = true}}
// CHECK: plan.subroutine @step_begin {
// CHECK-NEXT: plan.kernel "all_gather" {x = @w, y = @b10} {axis = "dp", inner = 2 : i64, outer = 1 : i64} {plan.origin = "zero", queue = "comm", token = 0 : i64}
// CHECK-NEXT: plan.kernel "fill_zero"
// CHECK: plan.subroutine @forward {
// CHECK-NEXT: plan.kernel "copy" {x = @a, y = @a2}
// CHECK-NEXT: plan.kernel "copy" {x = @b10, y = @a}
// CHECK: plan.subroutine @forward_first {
// CHECK-NEXT: plan.kernel "copy" {x = @a, y = @a2}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 0 : i64}
// CHECK-NEXT: plan.kernel "copy" {x = @b10, y = @a}
// CHECK: plan.subroutine @backward {
// CHECK-NEXT: plan.kernel "accumulate" {x = @b10, y = @g}
// CHECK: plan.subroutine @optimizer {
// CHECK-NEXT: plan.kernel "reduce_scatter"
// CHECK-NEXT: plan.kernel "sgd" {grad = @gs, param = @w}
// CHECK-NEXT: {{^ *}}}
// CHECK: plan.action @forward_first microbatch 0
// CHECK: plan.action @forward microbatch 1
// RACE-LABEL: plan.program @z1
// RACE: plan.kernel "wait" {} {} {token = 0 : i64}
plan.program @z1 {
  plan.buffer @w : tensor<4xf32> {kind = "param", name = "w"}
  plan.buffer @g : tensor<4xf32> {kind = "grad", name = "w.grad"}
  plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a"}
  plan.buffer @a2 : tensor<4xf32> {kind = "activation", name = "a2"}
  plan.buffer @gs : tensor<2xf32> {kind = "scratch", name = "w.grad_shard"}
  plan.buffer @b9 : tensor<2xf32> {kind = "scratch", name = "w.shard"}
  plan.param "w" value @w grad @g state [] {init = {kind = "zeros"}, local_shape = array<i64: 4>, weight_decay = false, zero = {axis = "dp", stage = 1 : i64}}
  plan.subroutine @step_begin {
    plan.kernel "fill_zero" {x = [@g]} {}
  }
  plan.subroutine @forward {
    plan.kernel "copy" {x = @a, y = @a2} {n = 4 : i64}
    plan.kernel "copy" {x = @w, y = @a} {n = 4 : i64}
  }
  plan.subroutine @backward {
    plan.kernel "accumulate" {x = @w, y = @g} {n = 4 : i64}
  }
  plan.subroutine @optimizer {
    plan.kernel "reduce_scatter" {x = @g, y = @gs} {axis = "dp", inner = 2 : i64, op = "sum", outer = 1 : i64} {plan.origin = "zero"}
    plan.kernel "shard_slice" {x = @w, y = @b9} {axis = "dp", inner = 2 : i64, outer = 1 : i64}
    plan.kernel "sgd" {grad = @gs, param = @b9} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
    plan.kernel "all_gather" {x = @b9, y = @w} {axis = "dp", inner = 2 : i64, outer = 1 : i64} {plan.origin = "zero"}
  }
  plan.schedule {
    plan.action @step_begin
    plan.action @forward microbatch 0
    plan.action @backward microbatch 0
    plan.action @forward microbatch 1
    plan.action @backward microbatch 1
    plan.action @optimizer
  }
}

// -----

// Mixed precision, one microbatch: the master already is the block and
// step_begin casts it and gathers the bf16 working copy; only the gather
// becomes asynchronous, waited in the forward's clone (which replaces the
// forward: no other action runs it).
// CHECK-LABEL: plan.program @mixed
// CHECK: plan.subroutine @step_begin {
// CHECK-NEXT: plan.kernel "cast" {x = @m, y = @blk}
// CHECK-NEXT: plan.kernel "all_gather" {x = @blk, y = @wb} {{.*}}queue = "comm", token = 0 : i64}
// CHECK-NOT: plan.subroutine @forward {
// CHECK: plan.subroutine @forward_first {
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 0 : i64}
// CHECK-NEXT: plan.kernel "copy" {x = @wb, y = @a}
// CHECK: plan.action @forward_first microbatch 0
// RACE-LABEL: plan.program @mixed
plan.program @mixed {
  plan.buffer @m : tensor<2xf32> {kind = "param", memory_class = "optimizer_state", name = "w"}
  plan.buffer @wb : tensor<4xbf16> {kind = "param", name = "w.bf16"}
  plan.buffer @g : tensor<2xbf16> {kind = "grad", name = "w.grad"}
  plan.buffer @blk : tensor<2xbf16> {kind = "scratch", name = "w.bf16_block"}
  plan.buffer @a : tensor<4xbf16> {kind = "activation", name = "a"}
  plan.param "w" value @m grad @g state [] {init = {kind = "zeros"}, local_shape = array<i64: 4>, weight_decay = false, zero = {axis = "dp", stage = 2 : i64, value_block = true}}
  plan.subroutine @step_begin {
    plan.kernel "cast" {x = @m, y = @blk} {n = 2 : i64}
    plan.kernel "all_gather" {x = @blk, y = @wb} {axis = "dp", inner = 2 : i64, outer = 1 : i64} {plan.origin = "zero"}
  }
  plan.subroutine @forward {
    plan.kernel "copy" {x = @wb, y = @a} {n = 4 : i64}
  }
  plan.subroutine @optimizer {
  }
  plan.schedule {
    plan.action @step_begin
    plan.action @forward microbatch 0
    plan.action @optimizer
  }
}

// -----

// A pipeline stage with two chunks (interleaved), two microbatches: @w0 is
// chunk 0's, @w2 chunk 2's. Each gather is waited in the first action that
// reads its parameter: @forward_v0's first microbatch (@forward_v0_first) for
// @w0, @forward_v2's (@forward_v2_first) for @w2; the later microbatches run
// the originals, which wait for nothing.
// CHECK-LABEL: plan.program @chunks
// CHECK-SAME: plan.param_gather_overlap = {bytes = 16 : i64, gathers = 2 : i64, subroutine = "forward_v0_first, forward_v2_first"}
// CHECK: plan.subroutine @forward_v0 {
// CHECK-NEXT: plan.kernel "copy" {x = @wb0, y = @a0}
// CHECK: plan.subroutine @forward_v0_first {
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 0 : i64}
// CHECK-NEXT: plan.kernel "copy" {x = @wb0, y = @a0}
// CHECK-NEXT: {{^ *}}}
// CHECK: plan.subroutine @forward_v2 {
// CHECK-NEXT: plan.kernel "copy" {x = @wb2, y = @a2}
// CHECK: plan.subroutine @forward_v2_first {
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 1 : i64}
// CHECK-NEXT: plan.kernel "copy" {x = @wb2, y = @a2}
// CHECK-NEXT: {{^ *}}}
// CHECK: plan.action @forward_v0_first microbatch 0
// CHECK-NEXT: plan.action @forward_v0 microbatch 1
// CHECK-NEXT: plan.action @forward_v2_first microbatch 0
// CHECK-NEXT: plan.action @forward_v2 microbatch 1
// RACE-LABEL: plan.program @chunks
plan.program @chunks {
  plan.buffer @m0 : tensor<2xf32> {kind = "param", memory_class = "optimizer_state", name = "w0"}
  plan.buffer @wb0 : tensor<4xbf16> {kind = "param", name = "w0.bf16"}
  plan.buffer @g0 : tensor<2xbf16> {kind = "grad", name = "w0.grad"}
  plan.buffer @blk0 : tensor<2xbf16> {kind = "scratch", name = "w0.bf16_block"}
  plan.buffer @m2 : tensor<2xf32> {kind = "param", memory_class = "optimizer_state", name = "w2"}
  plan.buffer @wb2 : tensor<4xbf16> {kind = "param", name = "w2.bf16"}
  plan.buffer @g2 : tensor<2xbf16> {kind = "grad", name = "w2.grad"}
  plan.buffer @blk2 : tensor<2xbf16> {kind = "scratch", name = "w2.bf16_block"}
  plan.buffer @a0 : tensor<4xbf16> {kind = "activation", name = "a0"}
  plan.buffer @a2 : tensor<4xbf16> {kind = "activation", name = "a2"}
  plan.param "w0" value @m0 grad @g0 state [] {init = {kind = "zeros"}, local_shape = array<i64: 4>, weight_decay = false, zero = {axis = "dp", stage = 2 : i64, value_block = true}}
  plan.param "w2" value @m2 grad @g2 state [] {init = {kind = "zeros"}, local_shape = array<i64: 4>, weight_decay = false, zero = {axis = "dp", stage = 2 : i64, value_block = true}}
  plan.subroutine @step_begin {
    plan.kernel "cast" {x = @m0, y = @blk0} {n = 2 : i64}
    plan.kernel "all_gather" {x = @blk0, y = @wb0} {axis = "dp", inner = 2 : i64, outer = 1 : i64} {plan.origin = "zero"}
    plan.kernel "cast" {x = @m2, y = @blk2} {n = 2 : i64}
    plan.kernel "all_gather" {x = @blk2, y = @wb2} {axis = "dp", inner = 2 : i64, outer = 1 : i64} {plan.origin = "zero"}
  }
  plan.subroutine @forward_v0 {
    plan.kernel "copy" {x = @wb0, y = @a0} {n = 4 : i64}
  }
  plan.subroutine @forward_v2 {
    plan.kernel "copy" {x = @wb2, y = @a2} {n = 4 : i64}
  }
  plan.subroutine @optimizer {
  }
  plan.schedule {
    plan.action @step_begin
    plan.action @forward_v0 microbatch 0
    plan.action @forward_v0 microbatch 1
    plan.action @forward_v2 microbatch 0
    plan.action @forward_v2 microbatch 1
    plan.action @optimizer
  }
}

// -----

// Not ZeRO-1/2 (here ZeRO-3): left alone.
// CHECK-LABEL: plan.program @z3
// CHECK-NOT: queue
// CHECK: plan.action @forward microbatch 0
// RACE-LABEL: plan.program @z3
plan.program @z3 {
  plan.buffer @w : tensor<2xf32> {kind = "param", name = "w"}
  plan.buffer @g : tensor<2xf32> {kind = "grad", name = "w.grad"}
  plan.buffer @wg : tensor<4xf32> {kind = "activation", name = "w.gathered"}
  plan.param "w" value @w grad @g state [] {init = {kind = "zeros"}, local_shape = array<i64: 4>, weight_decay = false, zero = {axis = "dp", stage = 3 : i64}}
  plan.subroutine @step_begin {
  }
  plan.subroutine @forward {
    plan.kernel "all_gather" {x = @w, y = @wg} {axis = "dp", inner = 2 : i64, outer = 1 : i64} {plan.origin = "zero"}
  }
  plan.subroutine @optimizer {
  }
  plan.schedule {
    plan.action @step_begin
    plan.action @forward microbatch 0
    plan.action @optimizer
  }
}
