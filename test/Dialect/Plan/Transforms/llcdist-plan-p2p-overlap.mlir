// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-p2p-overlap))" | FileCheck %s
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-p2p-overlap,llcdist-plan-memory,llcdist-verify-async))" | FileCheck %s --check-prefix=RACE

// A backward action: the received output gradient is waited just before its
// first reader; the input gradient is sent right after the input-gradient
// GEMM, the weight-gradient GEMM before it (independent of the payload)
// moving below the start; the send is waited at the end of the action.
// CHECK-LABEL: plan.program @backward
// CHECK-SAME: plan.p2p_overlap = {kernels = 1 : i64, overlapped = 1 : i64, started = 2 : i64}
// CHECK-SAME: queues = ["compute", "comm"]
// CHECK: plan.subroutine @backward_s1 {
// CHECK-NEXT: plan.kernel "recv" {y = @dy} {axis = "pp", peer = 1 : i64, tag = 1 : i64} {plan.origin = "pipeline", queue = "comm", token = 0 : i64}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 0 : i64}
// CHECK-NEXT: plan.kernel "linear_bwd_input" {dx = @dx, dy = @dy, w = @w}
// CHECK-NEXT: plan.kernel "send" {x = @dx} {axis = "pp", peer = 0 : i64, tag = 1 : i64} {plan.origin = "pipeline", queue = "comm", token = 1 : i64}
// CHECK-NEXT: plan.kernel "linear_bwd_weight" {dw = @dw, dy = @dy, x = @x}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 1 : i64}
// CHECK-NEXT: {{^ *}}}
// RACE-LABEL: plan.program @backward
plan.program @backward {
  plan.buffer @x : tensor<4x2xf32> {kind = "activation", name = "x"}
  plan.buffer @dy : tensor<4x2xf32> {kind = "activation", name = "dy"}
  plan.buffer @w : tensor<2x2xf32> {kind = "param", name = "w"}
  plan.buffer @dw : tensor<2x2xf32> {kind = "grad", name = "w.grad"}
  plan.buffer @dx : tensor<4x2xf32> {kind = "activation", name = "dx"}
  plan.param "w" value @w grad @dw state [] {init = {kind = "zeros"}, weight_decay = false}
  plan.subroutine @backward_s1 {
    plan.kernel "recv" {y = @dy} {axis = "pp", peer = 1 : i64, tag = 1 : i64} {plan.origin = "pipeline"}
    plan.kernel "linear_bwd_weight" {dw = @dw, dy = @dy, x = @x} {K = 2 : i64, M = 4 : i64, N = 2 : i64, accumulate = true, layout = "in_out"}
    plan.kernel "linear_bwd_input" {dx = @dx, dy = @dy, w = @w} {K = 2 : i64, M = 4 : i64, N = 2 : i64, accumulate = false, layout = "in_out"}
    plan.kernel "send" {x = @dx} {axis = "pp", peer = 0 : i64, tag = 1 : i64} {plan.origin = "pipeline"}
  }
  plan.schedule {
    plan.action @backward_s1 microbatch 0
  }
}

// -----

// A recv moves up past kernels that do not touch its buffer (to the start of
// the action) and is waited before its reader; a send is waited before its
// payload is written again. The tied parameter's transfer (not the
// pipeline's) stays synchronous. (That no window crosses another
// communication op is the shared OverlapWindows' rule, tested in
// llcdist-plan-sp-overlap.mlir.)
// CHECK-LABEL: plan.program @bounds
// CHECK-SAME: plan.p2p_overlap = {kernels = 3 : i64, overlapped = 2 : i64, started = 2 : i64}
// CHECK: plan.subroutine @forward_s0 {
// CHECK-NEXT: plan.kernel "recv" {y = @in} {{.*}} token = 0 : i64}
// CHECK-NEXT: plan.kernel "copy" {x = @a, y = @b}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 0 : i64}
// CHECK-NEXT: plan.kernel "copy" {x = @in, y = @out}
// CHECK-NEXT: plan.kernel "send" {x = @out} {{.*}} token = 1 : i64}
// CHECK-NEXT: plan.kernel "copy" {x = @b, y = @c}
// CHECK-NEXT: plan.kernel "copy" {x = @c, y = @d}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 1 : i64}
// CHECK-NEXT: plan.kernel "copy" {x = @d, y = @out}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@r]} {axis = "tp", op = "sum"}
// CHECK-NEXT: plan.kernel "send" {x = @t} {axis = "pp", peer = 1 : i64, tag = 2 : i64} {plan.origin = "tied_parameter"}
// RACE-LABEL: plan.program @bounds
plan.program @bounds {
  plan.buffer @in : tensor<4xf32> {kind = "activation", name = "in"}
  plan.buffer @out : tensor<4xf32> {kind = "activation", name = "out"}
  plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a"}
  plan.buffer @b : tensor<4xf32> {kind = "activation", name = "b"}
  plan.buffer @c : tensor<4xf32> {kind = "activation", name = "c"}
  plan.buffer @d : tensor<4xf32> {kind = "activation", name = "d"}
  plan.buffer @r : tensor<4xf32> {kind = "activation", name = "r"}
  plan.buffer @t : tensor<4xf32> {kind = "activation", name = "t"}
  plan.subroutine @forward_s0 {
    plan.kernel "copy" {x = @a, y = @b} {n = 4 : i64}
    plan.kernel "recv" {y = @in} {axis = "pp", peer = 1 : i64, tag = 0 : i64} {plan.origin = "pipeline"}
    plan.kernel "copy" {x = @in, y = @out} {n = 4 : i64}
    plan.kernel "send" {x = @out} {axis = "pp", peer = 1 : i64, tag = 0 : i64} {plan.origin = "pipeline"}
    plan.kernel "copy" {x = @b, y = @c} {n = 4 : i64}
    plan.kernel "copy" {x = @c, y = @d} {n = 4 : i64}
    plan.kernel "copy" {x = @d, y = @out} {n = 4 : i64}
    plan.kernel "all_reduce" {x = [@r]} {axis = "tp", op = "sum"}
    plan.kernel "send" {x = @t} {axis = "pp", peer = 1 : i64, tag = 2 : i64} {plan.origin = "tied_parameter"}
  }
  plan.schedule {
    plan.action @forward_s0 microbatch 0
  }
}

// -----

// No pipeline: unchanged.
// CHECK-LABEL: plan.program @no_pp {
// CHECK-NOT: token
// CHECK: plan.schedule
plan.program @no_pp {
  plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a"}
  plan.buffer @b : tensor<4xf32> {kind = "activation", name = "b"}
  plan.subroutine @forward {
    plan.kernel "copy" {x = @a, y = @b} {n = 4 : i64}
  }
  plan.schedule {
    plan.action @forward microbatch 0
  }
}
