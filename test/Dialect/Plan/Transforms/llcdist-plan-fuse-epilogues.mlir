// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-fuse-epilogues))" | FileCheck %s
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-fuse-epilogues,llcdist-plan-memory,llcdist-verify-async))" | FileCheck %s --check-prefix=MEM

// A linear layer's backward as the lowering emits it: the weight gradient,
// the bias gradient and the input gradient of one dy. The bias gradient
// joins the weight gradient as its db; the input gradient stays. The
// program records what was fused.
// CHECK-LABEL: plan.program @linear
// CHECK-SAME: plan.fused = [{from = "linear_bwd_weight + linear_bwd_bias", into = 1 : i64, ops = 2 : i64, pass = "llcdist-plan-fuse-epilogues", to = "linear_bwd_weight with db"}]
// CHECK: plan.subroutine @backward {
// CHECK-NEXT: plan.kernel "linear_bwd_weight" {db = @db, dw = @dw, dy = @dy, x = @x} {K = 4 : i64, M = 2 : i64, N = 8 : i64, accumulate = true, layout = "in_out"}
// CHECK-NEXT: plan.kernel "linear_bwd_input" {dx = @dx, dy = @dy, w = @w}
// CHECK-NEXT: {{^ *}}}
// MEM-LABEL: plan.program @linear
// MEM: arena_bytes
plan.program @linear {
  plan.buffer @w : tensor<4x8xf32> {kind = "param", name = "w"}
  plan.buffer @b : tensor<8xf32> {kind = "param", name = "b"}
  plan.buffer @dw : tensor<4x8xf32> {kind = "grad", name = "w.grad"}
  plan.buffer @db : tensor<8xf32> {kind = "grad", name = "b.grad"}
  plan.buffer @x : tensor<2x4xf32> {kind = "activation", name = "x"}
  plan.buffer @y : tensor<2x8xf32> {kind = "activation", name = "y"}
  plan.buffer @dy : tensor<2x8xf32> {kind = "activation", name = "y.grad"}
  plan.buffer @dx : tensor<2x4xf32> {kind = "activation", name = "x.grad"}
  plan.param "w" value @w grad @dw state [] {init = {kind = "zeros"}, weight_decay = true}
  plan.param "b" value @b grad @db state [] {init = {kind = "zeros"}, weight_decay = false}
  plan.subroutine @forward {
    plan.kernel "linear_fwd" {x = @x, w = @w, bias = @b, y = @y} {M = 2 : i64, K = 4 : i64, N = 8 : i64, layout = "in_out"}
  }
  plan.subroutine @backward {
    plan.kernel "linear_bwd_weight" {dy = @dy, x = @x, dw = @dw} {M = 2 : i64, K = 4 : i64, N = 8 : i64, layout = "in_out", accumulate = true}
    plan.kernel "linear_bwd_bias" {dy = @dy, db = @db} {M = 2 : i64, N = 8 : i64, accumulate = true}
    plan.kernel "linear_bwd_input" {dy = @dy, w = @w, dx = @dx} {M = 2 : i64, K = 4 : i64, N = 8 : i64, layout = "in_out", accumulate = false}
  }
  plan.schedule {
    plan.action @forward microbatch 0
    plan.action @backward microbatch 0
  }
}

// -----

// What stays apart: a bias gradient that accumulates where the weight
// gradient does not, and a pair with a kernel between them that touches both
// db and dw (neither may cross it). A bias gradient moves to its weight
// gradient across what is independent of it: past the all-reduce of another
// gradient.
// CHECK-LABEL: plan.program @apart
// CHECK-SAME: plan.fused = [{from = "linear_bwd_weight + linear_bwd_bias", into = 1 : i64, ops = 2 : i64, pass = "llcdist-plan-fuse-epilogues", to = "linear_bwd_weight with db"}]
// CHECK: plan.subroutine @backward {
// CHECK-NEXT: plan.kernel "linear_bwd_weight" {dw = @dw, dy = @dy, x = @x} {K = 4 : i64, M = 2 : i64, N = 8 : i64, accumulate = false, layout = "out_in"}
// CHECK-NEXT: plan.kernel "linear_bwd_bias" {db = @db, dy = @dy} {M = 2 : i64, N = 8 : i64, accumulate = true}
// CHECK-NEXT: plan.kernel "linear_bwd_bias" {db = @db2, dy = @dy2}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@db2, @dw2]}
// CHECK-NEXT: plan.kernel "linear_bwd_weight" {dw = @dw2, dy = @dy2, x = @x}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@other]}
// CHECK-NEXT: plan.kernel "linear_bwd_weight" {db = @db3, dw = @dw3, dy = @dy3, x = @x}
// CHECK-NEXT: {{^ *}}}
plan.program @apart {
  plan.buffer @dw : tensor<8x4xf32> {kind = "grad", name = "w.grad"}
  plan.buffer @db : tensor<8xf32> {kind = "grad", name = "b.grad"}
  plan.buffer @dw2 : tensor<8x4xf32> {kind = "grad", name = "w2.grad"}
  plan.buffer @db2 : tensor<8xf32> {kind = "grad", name = "b2.grad"}
  plan.buffer @dw3 : tensor<8x4xf32> {kind = "grad", name = "w3.grad"}
  plan.buffer @db3 : tensor<8xf32> {kind = "grad", name = "b3.grad"}
  plan.buffer @other : tensor<8xf32> {kind = "grad", name = "o.grad"}
  plan.buffer @x : tensor<2x4xf32> {kind = "activation", name = "x"}
  plan.buffer @dy : tensor<2x8xf32> {kind = "activation", name = "y.grad"}
  plan.buffer @dy2 : tensor<2x8xf32> {kind = "activation", name = "y2.grad"}
  plan.buffer @dy3 : tensor<2x8xf32> {kind = "activation", name = "y3.grad"}
  plan.subroutine @backward {
    plan.kernel "linear_bwd_weight" {dy = @dy, x = @x, dw = @dw} {M = 2 : i64, K = 4 : i64, N = 8 : i64, layout = "out_in", accumulate = false}
    plan.kernel "linear_bwd_bias" {dy = @dy, db = @db} {M = 2 : i64, N = 8 : i64, accumulate = true}
    plan.kernel "linear_bwd_bias" {dy = @dy2, db = @db2} {M = 2 : i64, N = 8 : i64, accumulate = false}
    plan.kernel "all_reduce" {x = [@db2, @dw2]} {axis = "dp", op = "sum"}
    plan.kernel "linear_bwd_weight" {dy = @dy2, x = @x, dw = @dw2} {M = 2 : i64, K = 4 : i64, N = 8 : i64, layout = "out_in", accumulate = false}
    plan.kernel "linear_bwd_bias" {dy = @dy3, db = @db3} {M = 2 : i64, N = 8 : i64, accumulate = false}
    plan.kernel "all_reduce" {x = [@other]} {axis = "dp", op = "sum"}
    plan.kernel "linear_bwd_weight" {dy = @dy3, x = @x, dw = @dw3} {M = 2 : i64, K = 4 : i64, N = 8 : i64, layout = "out_in", accumulate = false}
  }
  plan.schedule {
    plan.action @backward microbatch 0
  }
}

// -----

// GPT-2's MLP: the GELU's forward joins the c_fc linear before it (gelu;
// y stays, the backward reads it) and its backward the c_proj linear's
// input gradient before it (gelu_x), whose buffer (@dact) goes. A linear
// whose dx accumulates, or whose dx another kernel reads too, keeps its GELU
// apart.
// CHECK-LABEL: plan.program @mlp
// CHECK-SAME: {from = "linear_bwd_input + gelu_tanh_bwd", into = 1 : i64, ops = 2 : i64, pass = "llcdist-plan-fuse-epilogues", to = "linear_bwd_input with gelu_x"}
// CHECK-SAME: {from = "linear_fwd + gelu_tanh_fwd", into = 1 : i64, ops = 2 : i64, pass = "llcdist-plan-fuse-epilogues", to = "linear_fwd with gelu"}
// CHECK-NOT: plan.buffer @dact :
// CHECK: plan.subroutine @forward {
// CHECK-NEXT: plan.kernel "linear_fwd" {bias = @b1, gelu = @act, w = @w1, x = @x, y = @pre}
// CHECK-NEXT: plan.kernel "linear_fwd" {w = @w2, x = @act, y = @out}
// CHECK-NEXT: {{^ *}}}
// CHECK: plan.subroutine @backward {
// CHECK-NEXT: plan.kernel "linear_bwd_input" {dx = @dpre, dy = @dout, gelu_x = @pre, w = @w2} {K = 16 : i64, M = 2 : i64, N = 4 : i64, accumulate = false, layout = "out_in"}
// CHECK-NEXT: plan.kernel "linear_bwd_input" {dx = @dact2, dy = @dout, w = @w2} {{.*}}accumulate = true
// CHECK-NEXT: plan.kernel "gelu_tanh_bwd" {dx = @dpre2, dy = @dact2, x = @pre}
// CHECK-NEXT: plan.kernel "linear_bwd_input" {dx = @dact3, dy = @dout, w = @w2}
// CHECK-NEXT: plan.kernel "gelu_tanh_bwd" {dx = @dpre3, dy = @dact3, x = @pre}
// CHECK-NEXT: plan.kernel "add" {a = @dact3, b = @dpre3, y = @dpre2}
// CHECK-NEXT: {{^ *}}}
plan.program @mlp {
  plan.buffer @w1 : tensor<16x4xf32> {kind = "param", name = "c_fc.weight"}
  plan.buffer @b1 : tensor<16xf32> {kind = "param", name = "c_fc.bias"}
  plan.buffer @w2 : tensor<4x16xf32> {kind = "param", name = "c_proj.weight"}
  plan.buffer @x : tensor<2x4xf32> {kind = "activation", name = "x"}
  plan.buffer @pre : tensor<2x16xf32> {kind = "activation", name = "pre"}
  plan.buffer @act : tensor<2x16xf32> {kind = "activation", name = "act"}
  plan.buffer @out : tensor<2x4xf32> {kind = "activation", name = "out"}
  plan.buffer @dout : tensor<2x4xf32> {kind = "activation", name = "out.grad"}
  plan.buffer @dact : tensor<2x16xf32> {kind = "activation", name = "act.grad"}
  plan.buffer @dpre : tensor<2x16xf32> {kind = "activation", name = "pre.grad"}
  plan.buffer @dact2 : tensor<2x16xf32> {kind = "activation", name = "act2.grad"}
  plan.buffer @dpre2 : tensor<2x16xf32> {kind = "activation", name = "pre2.grad"}
  plan.buffer @dact3 : tensor<2x16xf32> {kind = "activation", name = "act3.grad"}
  plan.buffer @dpre3 : tensor<2x16xf32> {kind = "activation", name = "pre3.grad"}
  plan.subroutine @forward {
    plan.kernel "linear_fwd" {x = @x, w = @w1, bias = @b1, y = @pre} {M = 2 : i64, K = 4 : i64, N = 16 : i64, layout = "out_in"}
    plan.kernel "gelu_tanh_fwd" {x = @pre, y = @act} {n = 32 : i64}
    plan.kernel "linear_fwd" {x = @act, w = @w2, y = @out} {M = 2 : i64, K = 16 : i64, N = 4 : i64, layout = "out_in"}
  }
  plan.subroutine @backward {
    plan.kernel "linear_bwd_input" {dy = @dout, w = @w2, dx = @dact} {M = 2 : i64, K = 16 : i64, N = 4 : i64, layout = "out_in", accumulate = false}
    plan.kernel "gelu_tanh_bwd" {dy = @dact, x = @pre, dx = @dpre} {n = 32 : i64}
    plan.kernel "linear_bwd_input" {dy = @dout, w = @w2, dx = @dact2} {M = 2 : i64, K = 16 : i64, N = 4 : i64, layout = "out_in", accumulate = true}
    plan.kernel "gelu_tanh_bwd" {dy = @dact2, x = @pre, dx = @dpre2} {n = 32 : i64}
    plan.kernel "linear_bwd_input" {dy = @dout, w = @w2, dx = @dact3} {M = 2 : i64, K = 16 : i64, N = 4 : i64, layout = "out_in", accumulate = false}
    plan.kernel "gelu_tanh_bwd" {dy = @dact3, x = @pre, dx = @dpre3} {n = 32 : i64}
    plan.kernel "add" {a = @dact3, b = @dpre3, y = @dpre2} {n = 32 : i64}
  }
  plan.schedule {
    plan.action @forward microbatch 0
    plan.action @backward microbatch 0
  }
}
