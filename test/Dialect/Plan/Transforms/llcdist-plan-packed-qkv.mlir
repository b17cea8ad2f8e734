// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-packed-qkv))" | FileCheck %s
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-packed-qkv,llcdist-plan-memory,llcdist-verify-async))" | FileCheck %s --check-prefix=MEM

// GPT-2's attention as the lowering emits it: the QKV GEMM's output split
// into q, k, v, the attention's gradients joined back for the GEMM's
// backward. Both splits go, and the six buffers with them.
// CHECK-LABEL: plan.program @gpt2
// CHECK-SAME: plan.fused = [{from = "split_fwd + attention", into = 2 : i64, ops = 3 : i64, pass = "llcdist-plan-packed-qkv", to = "attention reading qkv"}, {from = "attention_bwd + split_bwd", into = 1 : i64, ops = 2 : i64, pass = "llcdist-plan-packed-qkv", to = "attention_bwd writing dqkv"}]
// CHECK-NOT: plan.buffer @{{q|k|v}} :
// CHECK-NOT: plan.buffer @{{dq|dk|dv}} :
// CHECK: plan.subroutine @forward {
// CHECK-NEXT: plan.kernel "linear_fwd" {w = @w, x = @h, y = @qkv}
// CHECK-NEXT: plan.kernel "attention_fwd" {lse = @lse, out = @o, qkv = @qkv}
// CHECK-NEXT: {{^ *}}}
// CHECK: plan.subroutine @backward {
// CHECK-NEXT: plan.kernel "attention_bwd" {dout = @do, dqkv = @dqkv, lse = @lse, out = @o, qkv = @qkv}
// CHECK-NEXT: plan.kernel "linear_bwd_weight" {dw = @dw, dy = @dqkv, x = @h}
// CHECK-NEXT: plan.kernel "linear_bwd_input" {dx = @dh, dy = @dqkv, w = @w}
// CHECK-NEXT: {{^ *}}}
// MEM-LABEL: plan.program @gpt2
// MEM: arena_bytes
plan.program @gpt2 {
  plan.buffer @w : tensor<48x16xf32> {kind = "param", name = "c_attn.weight"}
  plan.buffer @dw : tensor<48x16xf32> {kind = "grad", name = "c_attn.weight.grad"}
  plan.buffer @h : tensor<2x4x16xf32> {kind = "activation", name = "h"}
  plan.buffer @dh : tensor<2x4x16xf32> {kind = "activation", name = "h.grad"}
  plan.buffer @qkv : tensor<2x4x48xf32> {kind = "activation", name = "qkv"}
  plan.buffer @q : tensor<2x4x16xf32> {kind = "activation", name = "q"}
  plan.buffer @k : tensor<2x4x16xf32> {kind = "activation", name = "k"}
  plan.buffer @v : tensor<2x4x16xf32> {kind = "activation", name = "v"}
  plan.buffer @o : tensor<2x4x16xf32> {kind = "activation", name = "o"}
  plan.buffer @lse : tensor<2x2x4xf32> {kind = "activation", name = "lse"}
  plan.buffer @do : tensor<2x4x16xf32> {kind = "activation", name = "o.grad"}
  plan.buffer @dq : tensor<2x4x16xf32> {kind = "activation", name = "q.grad"}
  plan.buffer @dk : tensor<2x4x16xf32> {kind = "activation", name = "k.grad"}
  plan.buffer @dv : tensor<2x4x16xf32> {kind = "activation", name = "v.grad"}
  plan.buffer @dqkv : tensor<2x4x48xf32> {kind = "activation", name = "qkv.grad"}
  plan.param "c_attn.weight" value @w grad @dw state [] {init = {kind = "zeros"}, weight_decay = true}
  plan.subroutine @forward {
    plan.kernel "linear_fwd" {x = @h, w = @w, y = @qkv} {M = 8 : i64, K = 16 : i64, N = 48 : i64, layout = "out_in"}
    plan.kernel "split_fwd" {x = @qkv, outs = [@q, @k, @v]} {rows = 8 : i64, sizes = [16, 16, 16]}
    plan.kernel "attention_fwd" {q = @q, k = @k, v = @v, out = @o, lse = @lse} {B = 2 : i64, S = 4 : i64, nh = 2 : i64, nkv = 2 : i64, hd = 8 : i64}
  }
  plan.subroutine @backward {
    plan.kernel "attention_bwd" {dout = @do, q = @q, k = @k, v = @v, out = @o, lse = @lse, dq = @dq, dk = @dk, dv = @dv} {B = 2 : i64, S = 4 : i64, nh = 2 : i64, nkv = 2 : i64, hd = 8 : i64}
    plan.kernel "split_bwd" {douts = [@dq, @dk, @dv], dx = @dqkv} {rows = 8 : i64, sizes = [16, 16, 16]}
    plan.kernel "linear_bwd_weight" {dy = @dqkv, x = @h, dw = @dw} {M = 8 : i64, K = 16 : i64, N = 48 : i64, layout = "out_in", accumulate = true}
    plan.kernel "linear_bwd_input" {dy = @dqkv, w = @w, dx = @dh} {M = 8 : i64, K = 16 : i64, N = 48 : i64, layout = "out_in", accumulate = false}
  }
  plan.schedule {
    plan.action @forward microbatch 0
    plan.action @backward microbatch 0
  }
}

// -----

// What keeps the copies: k read by another kernel (@x1's split), the outputs
// handed to the attention in another order (@x2's: k as q), sizes that are
// not the attention's heads (@x3's), the split's input rewritten before the
// attention reads the copy (@x4's); in the backward, the split's dx touched
// between the attention and the split (@g1), a gradient read by another
// kernel (@g2).
// CHECK-LABEL: plan.program @apart
// CHECK-NOT: plan.fused
// CHECK-COUNT-4: plan.kernel "split_fwd"
// CHECK-COUNT-2: plan.kernel "split_bwd"
plan.program @apart {
  plan.buffer @x1 : tensor<2x4x48xf32> {kind = "activation", name = "x1"}
  plan.buffer @x2 : tensor<2x4x48xf32> {kind = "activation", name = "x2"}
  plan.buffer @x3 : tensor<2x4x48xf32> {kind = "activation", name = "x3"}
  plan.buffer @x4 : tensor<2x4x48xf32> {kind = "activation", name = "x4"}
  plan.buffer @q1 : tensor<2x4x16xf32> {kind = "activation", name = "q1"}
  plan.buffer @k1 : tensor<2x4x16xf32> {kind = "activation", name = "k1"}
  plan.buffer @v1 : tensor<2x4x16xf32> {kind = "activation", name = "v1"}
  plan.buffer @q2 : tensor<2x4x16xf32> {kind = "activation", name = "q2"}
  plan.buffer @k2 : tensor<2x4x16xf32> {kind = "activation", name = "k2"}
  plan.buffer @v2 : tensor<2x4x16xf32> {kind = "activation", name = "v2"}
  plan.buffer @q3 : tensor<2x4x8xf32> {kind = "activation", name = "q3"}
  plan.buffer @k3 : tensor<2x4x20xf32> {kind = "activation", name = "k3"}
  plan.buffer @v3 : tensor<2x4x20xf32> {kind = "activation", name = "v3"}
  plan.buffer @q4 : tensor<2x4x16xf32> {kind = "activation", name = "q4"}
  plan.buffer @k4 : tensor<2x4x16xf32> {kind = "activation", name = "k4"}
  plan.buffer @v4 : tensor<2x4x16xf32> {kind = "activation", name = "v4"}
  plan.buffer @o : tensor<2x4x16xf32> {kind = "activation", name = "o"}
  plan.buffer @o3 : tensor<2x4x8xf32> {kind = "activation", name = "o3"}
  plan.buffer @s : tensor<2x4x16xf32> {kind = "activation", name = "s"}
  plan.buffer @lse : tensor<2x2x4xf32> {kind = "activation", name = "lse"}
  plan.buffer @lse3 : tensor<2x1x4xf32> {kind = "activation", name = "lse3"}
  plan.buffer @do : tensor<2x4x16xf32> {kind = "activation", name = "o.grad"}
  plan.buffer @dq : tensor<2x4x16xf32> {kind = "activation", name = "q.grad"}
  plan.buffer @dk : tensor<2x4x16xf32> {kind = "activation", name = "k.grad"}
  plan.buffer @dv : tensor<2x4x16xf32> {kind = "activation", name = "v.grad"}
  plan.buffer @g1 : tensor<2x4x48xf32> {kind = "activation", name = "g1"}
  plan.buffer @dq2 : tensor<2x4x16xf32> {kind = "activation", name = "q2.grad"}
  plan.buffer @dk2 : tensor<2x4x16xf32> {kind = "activation", name = "k2.grad"}
  plan.buffer @dv2 : tensor<2x4x16xf32> {kind = "activation", name = "v2.grad"}
  plan.buffer @g2 : tensor<2x4x48xf32> {kind = "activation", name = "g2"}
  plan.subroutine @forward {
    plan.kernel "split_fwd" {x = @x1, outs = [@q1, @k1, @v1]} {rows = 8 : i64, sizes = [16, 16, 16]}
    plan.kernel "attention_fwd" {q = @q1, k = @k1, v = @v1, out = @o, lse = @lse} {B = 2 : i64, S = 4 : i64, nh = 2 : i64, nkv = 2 : i64, hd = 8 : i64}
    plan.kernel "add" {a = @k1, b = @o, y = @s} {n = 128 : i64}
    plan.kernel "split_fwd" {x = @x2, outs = [@q2, @k2, @v2]} {rows = 8 : i64, sizes = [16, 16, 16]}
    plan.kernel "attention_fwd" {q = @k2, k = @q2, v = @v2, out = @o, lse = @lse} {B = 2 : i64, S = 4 : i64, nh = 2 : i64, nkv = 2 : i64, hd = 8 : i64}
    plan.kernel "split_fwd" {x = @x3, outs = [@q3, @k3, @v3]} {rows = 8 : i64, sizes = [8, 20, 20]}
    plan.kernel "attention_fwd" {q = @q3, k = @k3, v = @v3, out = @o3, lse = @lse3} {B = 2 : i64, S = 4 : i64, nh = 1 : i64, nkv = 1 : i64, hd = 8 : i64}
    plan.kernel "split_fwd" {x = @x4, outs = [@q4, @k4, @v4]} {rows = 8 : i64, sizes = [16, 16, 16]}
    plan.kernel "fill_zero" {x = [@x4]} {}
    plan.kernel "attention_fwd" {q = @q4, k = @k4, v = @v4, out = @o, lse = @lse} {B = 2 : i64, S = 4 : i64, nh = 2 : i64, nkv = 2 : i64, hd = 8 : i64}
  }
  plan.subroutine @backward {
    plan.kernel "attention_bwd" {dout = @do, q = @q1, k = @k1, v = @v1, out = @o, lse = @lse, dq = @dq, dk = @dk, dv = @dv} {B = 2 : i64, S = 4 : i64, nh = 2 : i64, nkv = 2 : i64, hd = 8 : i64}
    plan.kernel "fill_zero" {x = [@g1]} {}
    plan.kernel "split_bwd" {douts = [@dq, @dk, @dv], dx = @g1} {rows = 8 : i64, sizes = [16, 16, 16]}
    plan.kernel "attention_bwd" {dout = @do, q = @q1, k = @k1, v = @v1, out = @o, lse = @lse, dq = @dq2, dk = @dk2, dv = @dv2} {B = 2 : i64, S = 4 : i64, nh = 2 : i64, nkv = 2 : i64, hd = 8 : i64}
    plan.kernel "split_bwd" {douts = [@dq2, @dk2, @dv2], dx = @g2} {rows = 8 : i64, sizes = [16, 16, 16]}
    plan.kernel "add" {a = @dk2, b = @o, y = @s} {n = 128 : i64}
  }
  plan.schedule {
    plan.action @forward microbatch 0
    plan.action @backward microbatch 0
  }
}
