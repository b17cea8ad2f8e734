// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-ce-grad-in-place))" | FileCheck %s
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-ce-grad-in-place,llcdist-plan-memory,llcdist-verify-async))" | FileCheck %s --check-prefix=MEM

// The LM head's backward as the lowering emits it: the cross entropy's
// gradient, then the head's weight and input gradients reading it. The
// gradient goes over the logits and its buffer goes.
// CHECK-LABEL: plan.program @head
// CHECK-SAME: plan.fused = [{from = "cross_entropy_bwd", into = 1 : i64, ops = 1 : i64, pass = "llcdist-plan-ce-grad-in-place", to = "cross_entropy_bwd writing over its logits"}]
// CHECK-NOT: plan.buffer @dlogits
// CHECK: plan.subroutine @backward {
// CHECK-NEXT: plan.kernel "cross_entropy_bwd" {dlogits = @logits, logits = @logits, targets = @t}
// CHECK-NEXT: plan.kernel "linear_bwd_weight" {dw = @dw, dy = @logits, x = @h}
// CHECK-NEXT: plan.kernel "linear_bwd_input" {dx = @dh, dy = @logits, w = @w}
// CHECK-NEXT: {{^ *}}}
// MEM-LABEL: plan.program @head
// MEM: arena_bytes
plan.program @head {
  plan.buffer @w : tensor<8x4xf32> {kind = "param", name = "lm_head.weight"}
  plan.buffer @dw : tensor<8x4xf32> {kind = "grad", name = "lm_head.weight.grad"}
  plan.buffer @h : tensor<2x4xf32> {kind = "activation", name = "h"}
  plan.buffer @dh : tensor<2x4xf32> {kind = "activation", name = "h.grad"}
  plan.buffer @t : tensor<2xi32> {kind = "input", name = "labels"}
  plan.buffer @logits : tensor<2x8xf32> {kind = "activation", name = "logits"}
  plan.buffer @dlogits : tensor<2x8xf32> {kind = "activation", name = "logits.grad"}
  plan.buffer @loss : tensor<1xf32> {kind = "metric", name = "loss"}
  plan.param "lm_head.weight" value @w grad @dw state [] {init = {kind = "zeros"}, weight_decay = true}
  plan.subroutine @forward {
    plan.kernel "linear_fwd" {x = @h, w = @w, y = @logits} {M = 2 : i64, K = 4 : i64, N = 8 : i64, layout = "out_in"}
    plan.kernel "cross_entropy_fwd" {logits = @logits, targets = @t, loss = @loss} {M = 2 : i64, V = 8 : i64, scale = 0.5 : f64}
  }
  plan.subroutine @backward {
    plan.kernel "cross_entropy_bwd" {logits = @logits, targets = @t, dlogits = @dlogits} {M = 2 : i64, V = 8 : i64, scale = 0.5 : f64}
    plan.kernel "linear_bwd_weight" {dy = @dlogits, x = @h, dw = @dw} {M = 2 : i64, K = 4 : i64, N = 8 : i64, layout = "out_in", accumulate = true}
    plan.kernel "linear_bwd_input" {dy = @dlogits, w = @w, dx = @dh} {M = 2 : i64, K = 4 : i64, N = 8 : i64, layout = "out_in", accumulate = false}
  }
  plan.schedule {
    plan.action @forward microbatch 0
    plan.action @backward microbatch 0
  }
}

// -----

// What keeps the buffers apart: the logits read after the backward (@a), the
// gradient read in another subroutine (@b: ZB-H1's W pass), a gradient of
// another dtype than the logits (@c).
// CHECK-LABEL: plan.program @apart
// CHECK-NOT: plan.fused
// CHECK: plan.kernel "cross_entropy_bwd" {dlogits = @da, logits = @a, targets = @t}
// CHECK: plan.kernel "cross_entropy_bwd" {dlogits = @db, logits = @b, targets = @t}
// CHECK: plan.kernel "cross_entropy_bwd" {dlogits = @dc, logits = @c, targets = @t}
plan.program @apart {
  plan.buffer @w : tensor<8x4xf32> {kind = "param", name = "w"}
  plan.buffer @dw : tensor<8x4xf32> {kind = "grad", name = "w.grad"}
  plan.buffer @dh : tensor<2x4xf32> {kind = "activation", name = "h.grad"}
  plan.buffer @t : tensor<2xi32> {kind = "input", name = "labels"}
  plan.buffer @a : tensor<2x8xf32> {kind = "activation", name = "a"}
  plan.buffer @da : tensor<2x8xf32> {kind = "activation", name = "a.grad"}
  plan.buffer @b : tensor<2x8xf32> {kind = "activation", name = "b"}
  plan.buffer @db : tensor<2x8xf32> {kind = "activation", name = "b.grad"}
  plan.buffer @c : tensor<2x8xf32> {kind = "activation", name = "c"}
  plan.buffer @dc : tensor<2x8xbf16> {kind = "activation", name = "c.grad"}
  plan.buffer @s : tensor<2x8xf32> {kind = "activation", name = "s"}
  plan.subroutine @backward {
    plan.kernel "cross_entropy_bwd" {logits = @a, targets = @t, dlogits = @da} {M = 2 : i64, V = 8 : i64, scale = 0.5 : f64}
    plan.kernel "add" {a = @a, b = @da, y = @s} {n = 16 : i64}
    plan.kernel "cross_entropy_bwd" {logits = @b, targets = @t, dlogits = @db} {M = 2 : i64, V = 8 : i64, scale = 0.5 : f64}
    plan.kernel "cross_entropy_bwd" {logits = @c, targets = @t, dlogits = @dc} {M = 2 : i64, V = 8 : i64, scale = 0.5 : f64}
    plan.kernel "linear_bwd_input" {dy = @dc, w = @w, dx = @dh} {M = 2 : i64, K = 4 : i64, N = 8 : i64, layout = "out_in", accumulate = false}
  }
  plan.subroutine @weights {
    plan.kernel "linear_bwd_weight" {dy = @db, x = @dh, dw = @dw} {M = 2 : i64, K = 4 : i64, N = 8 : i64, layout = "out_in", accumulate = true}
  }
  plan.schedule {
    plan.action @backward microbatch 0
    plan.action @weights microbatch 0
  }
}
