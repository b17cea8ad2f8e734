// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-sp-overlap))" | FileCheck %s
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-sp-overlap,llcdist-plan-memory,llcdist-verify-async))" | FileCheck %s --check-prefix=RACE

// Megatron's bulk wgrad/dgrad overlap: the weight-gradient GEMM comes before
// the input-gradient GEMM whose result is reduce-scattered. The scatter starts
// right after the input gradient (the weight gradient, independent of both,
// moves below the start) and is waited just before its reader.
// CHECK-LABEL: plan.program @bulk
// CHECK-SAME: plan.tp_comm_overlap = {reduce_scatter = {gemms = 1 : i64, kernels = 1 : i64, overlapped = 1 : i64, started = 1 : i64}}
// CHECK-SAME: queues = ["compute", "comm"]
// CHECK: plan.subroutine @backward {
// CHECK-NEXT: plan.kernel "linear_bwd_input" {dx = @dx, dy = @dy, w = @w}
// CHECK-NEXT: plan.kernel "reduce_scatter" {x = @dx, y = @dxs} {axis = "tp", inner = 4 : i64, op = "sum", outer = 1 : i64} {plan.origin = "row_parallel", plan.payload = "activations", queue = "comm", token = 0 : i64}
// CHECK-NEXT: plan.kernel "linear_bwd_weight" {dw = @dw, dy = @dy, x = @x}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 0 : i64}
// CHECK-NEXT: plan.kernel "copy" {x = @dxs, y = @h}
// CHECK-NEXT: {{^ *}}}
// RACE-LABEL: plan.program @bulk
plan.program @bulk {
  plan.buffer @x : tensor<4x2xf32> {kind = "activation", name = "x"}
  plan.buffer @dy : tensor<4x2xf32> {kind = "activation", name = "dy"}
  plan.buffer @w : tensor<2x2xf32> {kind = "param", name = "w"}
  plan.buffer @dw : tensor<2x2xf32> {kind = "grad", name = "w.grad"}
  plan.buffer @dx : tensor<4x2xf32> {kind = "activation", name = "dx"}
  plan.buffer @dxs : tensor<2x2xf32> {kind = "activation", name = "dx:reduce_scatter"}
  plan.buffer @h : tensor<2x2xf32> {kind = "activation", name = "h"}
  plan.param "w" value @w grad @dw state [] {init = {kind = "zeros"}, weight_decay = false}
  plan.subroutine @backward {
    plan.kernel "linear_bwd_weight" {dw = @dw, dy = @dy, x = @x} {K = 2 : i64, M = 4 : i64, N = 2 : i64, accumulate = true, layout = "in_out"}
    plan.kernel "linear_bwd_input" {dx = @dx, dy = @dy, w = @w} {K = 2 : i64, M = 4 : i64, N = 2 : i64, accumulate = false, layout = "in_out"}
    plan.kernel "reduce_scatter" {x = @dx, y = @dxs} {axis = "tp", inner = 4 : i64, op = "sum", outer = 1 : i64} {plan.origin = "row_parallel", plan.payload = "activations"}
    plan.kernel "copy" {x = @dxs, y = @h} {n = 4 : i64}
  }
  plan.schedule {
    plan.action @backward microbatch 0
  }
}

// -----

// The re-gather of a layer input for its weight gradient starts right after
// the last write of its input; the kernels between, independent of it, run
// while it is in flight (in their order).
// CHECK-LABEL: plan.program @regather
// CHECK-SAME: plan.tp_comm_overlap = {all_gather = {gemms = 0 : i64, kernels = 2 : i64, overlapped = 1 : i64, started = 1 : i64}}
// CHECK: plan.subroutine @backward {
// CHECK-NEXT: plan.kernel "copy" {x = @z, y = @s}
// CHECK-NEXT: plan.kernel "all_gather" {x = @s, y = @full} {{.*}} {plan.origin = "sequence_parallel", plan.payload = "activations", queue = "comm", token = 0 : i64}
// CHECK-NEXT: plan.kernel "copy" {x = @a, y = @b}
// CHECK-NEXT: plan.kernel "copy" {x = @b, y = @c}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 0 : i64}
// CHECK-NEXT: plan.kernel "copy" {x = @full, y = @o}
// RACE-LABEL: plan.program @regather
plan.program @regather {
  plan.buffer @z : tensor<4xf32> {kind = "activation", name = "z"}
  plan.buffer @s : tensor<4xf32> {kind = "activation", name = "s"}
  plan.buffer @full : tensor<8xf32> {kind = "activation", name = "s:all_gather"}
  plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a"}
  plan.buffer @b : tensor<4xf32> {kind = "activation", name = "b"}
  plan.buffer @c : tensor<4xf32> {kind = "activation", name = "c"}
  plan.buffer @o : tensor<8xf32> {kind = "activation", name = "o"}
  plan.subroutine @backward {
    plan.kernel "copy" {x = @z, y = @s} {n = 4 : i64}
    plan.kernel "copy" {x = @a, y = @b} {n = 4 : i64}
    plan.kernel "copy" {x = @b, y = @c} {n = 4 : i64}
    plan.kernel "all_gather" {x = @s, y = @full} {axis = "tp", inner = 4 : i64, outer = 1 : i64} {plan.origin = "sequence_parallel", plan.payload = "activations"}
    plan.kernel "copy" {x = @full, y = @o} {n = 8 : i64}
  }
  plan.schedule {
    plan.action @backward microbatch 0
  }
}

// -----

// A synchronous collective bounds a window both ways (two collectives of one
// group must not run concurrently on two queues).
// CHECK-LABEL: plan.program @bounded
// CHECK: plan.subroutine @forward {
// CHECK-NEXT: plan.kernel "copy" {x = @a, y = @b}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@r]} {axis = "tp", op = "sum"}
// CHECK-NEXT: plan.kernel "all_gather" {x = @s, y = @full} {{.*}} {plan.origin = "sequence_parallel", plan.payload = "activations", queue = "comm", token = 0 : i64}
// CHECK-NEXT: plan.kernel "copy" {x = @c, y = @d}
// CHECK-NEXT: plan.kernel "copy" {x = @e, y = @f}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 0 : i64}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@r2]} {axis = "tp", op = "sum"}
// CHECK-NEXT: plan.kernel "copy" {x = @full, y = @o}
// RACE-LABEL: plan.program @bounded
plan.program @bounded {
  plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a"}
  plan.buffer @b : tensor<4xf32> {kind = "activation", name = "b"}
  plan.buffer @c : tensor<4xf32> {kind = "activation", name = "c"}
  plan.buffer @d : tensor<4xf32> {kind = "activation", name = "d"}
  plan.buffer @e : tensor<4xf32> {kind = "activation", name = "e"}
  plan.buffer @f : tensor<4xf32> {kind = "activation", name = "f"}
  plan.buffer @r : tensor<4xf32> {kind = "activation", name = "r"}
  plan.buffer @r2 : tensor<4xf32> {kind = "activation", name = "r2"}
  plan.buffer @s : tensor<4xf32> {kind = "activation", name = "s"}
  plan.buffer @full : tensor<8xf32> {kind = "activation", name = "s:all_gather"}
  plan.buffer @o : tensor<8xf32> {kind = "activation", name = "o"}
  plan.subroutine @forward {
    plan.kernel "copy" {x = @a, y = @b} {n = 4 : i64}
    plan.kernel "all_reduce" {x = [@r]} {axis = "tp", op = "sum"}
    plan.kernel "copy" {x = @c, y = @d} {n = 4 : i64}
    plan.kernel "all_gather" {x = @s, y = @full} {axis = "tp", inner = 4 : i64, outer = 1 : i64} {plan.origin = "sequence_parallel", plan.payload = "activations"}
    plan.kernel "copy" {x = @e, y = @f} {n = 4 : i64}
    plan.kernel "all_reduce" {x = [@r2]} {axis = "tp", op = "sum"}
    plan.kernel "copy" {x = @full, y = @o} {n = 8 : i64}
  }
  plan.schedule {
    plan.action @forward microbatch 0
  }
}

// -----

// Tokens come after those an earlier pass started (grad buckets'); the
// windows of consecutive collectives may overlap (the wait of the first
// crosses the second's start: they share no buffer); a collective with
// nothing independent around it is started and waited at once.
// CHECK-LABEL: plan.program @tokens
// CHECK-SAME: plan.tp_comm_overlap = {all_gather = {gemms = 0 : i64, kernels = 1 : i64, overlapped = 1 : i64, started = 2 : i64}, reduce_scatter = {gemms = 0 : i64, kernels = 0 : i64, overlapped = 0 : i64, started = 1 : i64}}
// CHECK: plan.subroutine @backward {
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@g]} {axis = "dp", op = "sum"} {queue = "comm", token = 0 : i64}
// CHECK-NEXT: plan.kernel "all_gather" {x = @s, y = @full} {{.*}} token = 1 : i64}
// CHECK-NEXT: plan.kernel "all_gather" {x = @s, y = @full2} {{.*}} token = 2 : i64}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 2 : i64}
// CHECK-NEXT: plan.kernel "copy" {x = @full2, y = @o2}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 1 : i64}
// CHECK-NEXT: plan.kernel "copy" {x = @full, y = @o}
// CHECK-NEXT: plan.kernel "reduce_scatter" {x = @o, y = @os} {{.*}} token = 3 : i64}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 3 : i64}
// CHECK-NEXT: plan.kernel "copy" {x = @os, y = @s}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 0 : i64}
// RACE-LABEL: plan.program @tokens
plan.program @tokens attributes {queues = ["compute", "comm"]} {
  plan.buffer @g : tensor<4xf32> {kind = "activation", name = "g"}
  plan.buffer @s : tensor<4xf32> {kind = "activation", name = "s"}
  plan.buffer @full : tensor<8xf32> {kind = "activation", name = "s:all_gather"}
  plan.buffer @full2 : tensor<8xf32> {kind = "activation", name = "s:all_gather#1"}
  plan.buffer @o : tensor<8xf32> {kind = "activation", name = "o"}
  plan.buffer @o2 : tensor<8xf32> {kind = "activation", name = "o2"}
  plan.buffer @os : tensor<4xf32> {kind = "activation", name = "o:reduce_scatter"}
  plan.subroutine @backward {
    plan.kernel "all_reduce" {x = [@g]} {axis = "dp", op = "sum"} {queue = "comm", token = 0 : i64}
    plan.kernel "all_gather" {x = @s, y = @full} {axis = "tp", inner = 4 : i64, outer = 1 : i64} {plan.origin = "sequence_parallel", plan.payload = "activations"}
    plan.kernel "all_gather" {x = @s, y = @full2} {axis = "tp", inner = 4 : i64, outer = 1 : i64} {plan.origin = "sequence_parallel", plan.payload = "activations"}
    plan.kernel "copy" {x = @full2, y = @o2} {n = 8 : i64}
    plan.kernel "copy" {x = @full, y = @o} {n = 8 : i64}
    plan.kernel "reduce_scatter" {x = @o, y = @os} {axis = "tp", inner = 4 : i64, op = "sum", outer = 1 : i64} {plan.origin = "row_parallel", plan.payload = "activations"}
    plan.kernel "copy" {x = @os, y = @s} {n = 4 : i64}
    plan.kernel "wait" {} {} {token = 0 : i64}
  }
  plan.schedule {
    plan.action @backward microbatch 0
  }
}

// -----

// No sequence parallelism (a dp all_gather, a tp one of parameters): unchanged.
// CHECK-LABEL: plan.program @no_sp {
// CHECK-NOT: token
// CHECK: plan.schedule
plan.program @no_sp {
  plan.buffer @s : tensor<4xf32> {kind = "param", name = "s"}
  plan.buffer @full : tensor<8xf32> {kind = "activation", name = "s:all_gather"}
  plan.buffer @full2 : tensor<8xf32> {kind = "activation", name = "s:all_gather#1"}
  plan.subroutine @forward {
    plan.kernel "all_gather" {x = @s, y = @full} {axis = "dp", inner = 4 : i64, outer = 1 : i64} {plan.origin = "sequence_parallel", plan.payload = "activations"}
    plan.kernel "all_gather" {x = @s, y = @full2} {axis = "tp", inner = 4 : i64, outer = 1 : i64}
  }
  plan.schedule {
    plan.action @forward microbatch 0
  }
}
