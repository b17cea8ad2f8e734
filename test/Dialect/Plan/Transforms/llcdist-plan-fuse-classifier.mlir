// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-fuse-classifier{chunk-rows=3}))" | FileCheck %s
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-fuse-classifier,llcdist-plan-memory,llcdist-verify-async))" | FileCheck %s --check-prefix=MEM

// The LM head as the lowering emits it (bf16, the gradient already over the
// logits: llcdist-plan-ce-grad-in-place), two microbatches, forward then
// backward each: one classifier at the cross_entropy_bwd's place over chunks
// of 3 of the 8 rows, a [3, 16] scratch for the logits and, dw being bf16
// and summed over three chunks, an f32 one for its sum. The logits go.
// CHECK-LABEL: plan.program @head
// CHECK-SAME: plan.fused = [{from = "linear_fwd + cross_entropy_fwd + cross_entropy_bwd + linear_bwd_weight + linear_bwd_input", into = 1 : i64, ops = 5 : i64, pass = "llcdist-plan-fuse-classifier", to = "classifier"}]
// CHECK-DAG: plan.buffer @[[CHUNK:b[0-9]+]] : tensor<3x16xbf16> {kind = "scratch", name = "logits.chunk"}
// CHECK-DAG: plan.buffer @[[SUM:b[0-9]+]] : tensor<16x4xf32> {kind = "scratch", name = "wte.grad.f32_sum"}
// CHECK-NOT: plan.buffer @logits
// CHECK: plan.subroutine @forward {
// CHECK-NEXT: plan.kernel "rms_norm_fwd"
// CHECK-NEXT: {{^ *}}}
// CHECK: plan.subroutine @backward {
// CHECK-NEXT: plan.kernel "classifier" {dw = @dw, dw_acc = @[[SUM]], dx = @dh, logits = @[[CHUNK]], loss = @loss, targets = @t, w = @w, x = @h} {K = 4 : i64, M = 8 : i64, N = 16 : i64, accumulate = true, chunk = 3 : i64, grad_scale = 6.250000e-02 : f64, layout = "out_in", real_vocab = 15 : i64, scale = 5.000000e-01 : f64}
// CHECK-NEXT: plan.kernel "rms_norm_bwd_input"
// CHECK-NEXT: {{^ *}}}
// The pass picks the rows itself (all 8 here: one chunk, no f32 sum), and the
// plan places the scratch.
// MEM-LABEL: plan.program @head
// MEM: tensor<8x16xbf16> {kind = "scratch", name = "logits.chunk"
// MEM-NOT: f32_sum
// MEM: plan.kernel "classifier"
// MEM-NOT: dw_acc
// MEM-SAME: chunk = 8 : i64
plan.program @head {
  plan.buffer @w : tensor<16x4xbf16> {kind = "param", name = "wte"}
  plan.buffer @dw : tensor<16x4xbf16> {kind = "grad", name = "wte.grad"}
  plan.buffer @g : tensor<4xbf16> {kind = "param", name = "norm"}
  plan.buffer @x : tensor<8x4xbf16> {kind = "activation", name = "x"}
  plan.buffer @rstd : tensor<8xf32> {kind = "activation", name = "rstd"}
  plan.buffer @h : tensor<8x4xbf16> {kind = "activation", name = "h"}
  plan.buffer @dh : tensor<8x4xbf16> {kind = "activation", name = "h.grad"}
  plan.buffer @dxn : tensor<8x4xbf16> {kind = "activation", name = "x.grad"}
  plan.buffer @t : tensor<8xi32> {kind = "input", name = "labels"}
  plan.buffer @logits : tensor<8x16xbf16> {kind = "activation", name = "logits"}
  plan.buffer @loss : tensor<1xf32> {kind = "metric", name = "loss"}
  plan.param "wte" value @w grad @dw state [] {init = {kind = "zeros"}, weight_decay = true}
  plan.subroutine @forward {
    plan.kernel "rms_norm_fwd" {x = @x, weight = @g, y = @h, rstd = @rstd} {M = 8 : i64, H = 4 : i64, eps = 1.0e-05 : f64}
    plan.kernel "linear_fwd" {x = @h, w = @w, y = @logits} {M = 8 : i64, K = 4 : i64, N = 16 : i64, layout = "out_in"}
    plan.kernel "cross_entropy_fwd" {logits = @logits, targets = @t, loss = @loss} {M = 8 : i64, V = 16 : i64, real_vocab = 15 : i64, scale = 0.5 : f64}
  }
  plan.subroutine @backward {
    plan.kernel "cross_entropy_bwd" {logits = @logits, targets = @t, dlogits = @logits} {M = 8 : i64, V = 16 : i64, real_vocab = 15 : i64, scale = 0.0625 : f64}
    plan.kernel "linear_bwd_weight" {dy = @logits, x = @h, dw = @dw} {M = 8 : i64, K = 4 : i64, N = 16 : i64, layout = "out_in", accumulate = true}
    plan.kernel "linear_bwd_input" {dy = @logits, w = @w, dx = @dh} {M = 8 : i64, K = 4 : i64, N = 16 : i64, layout = "out_in", accumulate = false}
    plan.kernel "rms_norm_bwd_input" {dy = @dh, x = @x, weight = @g, rstd = @rstd, dx = @dxn} {M = 8 : i64, H = 4 : i64}
  }
  plan.schedule {
    plan.action @forward microbatch 0
    plan.action @backward microbatch 0
    plan.action @forward microbatch 1
    plan.action @backward microbatch 1
  }
}

// -----

// GPipe's order (both forwards, then both backwards): the second forward
// would write the loss, and its own logits, before the first backward. Not
// fused.
// CHECK-LABEL: plan.program @gpipe
// CHECK-NOT: plan.fused
// CHECK: plan.kernel "linear_fwd"
// CHECK: plan.kernel "cross_entropy_fwd"
// CHECK: plan.kernel "cross_entropy_bwd"
plan.program @gpipe {
  plan.buffer @w : tensor<16x4xf32> {kind = "param", name = "w"}
  plan.buffer @dw : tensor<16x4xf32> {kind = "grad", name = "w.grad"}
  plan.buffer @h : tensor<8x4xf32> {kind = "activation", name = "h"}
  plan.buffer @dh : tensor<8x4xf32> {kind = "activation", name = "h.grad"}
  plan.buffer @t : tensor<8xi32> {kind = "input", name = "labels"}
  plan.buffer @logits : tensor<8x16xf32> {kind = "activation", name = "logits"}
  plan.buffer @loss : tensor<1xf32> {kind = "metric", name = "loss"}
  plan.subroutine @forward {
    plan.kernel "linear_fwd" {x = @h, w = @w, y = @logits} {M = 8 : i64, K = 4 : i64, N = 16 : i64, layout = "out_in"}
    plan.kernel "cross_entropy_fwd" {logits = @logits, targets = @t, loss = @loss} {M = 8 : i64, V = 16 : i64, scale = 0.5 : f64}
  }
  plan.subroutine @backward {
    plan.kernel "cross_entropy_bwd" {logits = @logits, targets = @t, dlogits = @logits} {M = 8 : i64, V = 16 : i64, scale = 0.0625 : f64}
    plan.kernel "linear_bwd_weight" {dy = @logits, x = @h, dw = @dw} {M = 8 : i64, K = 4 : i64, N = 16 : i64, layout = "out_in", accumulate = true}
    plan.kernel "linear_bwd_input" {dy = @logits, w = @w, dx = @dh} {M = 8 : i64, K = 4 : i64, N = 16 : i64, layout = "out_in", accumulate = false}
  }
  plan.schedule {
    plan.action @forward microbatch 0
    plan.action @forward microbatch 1
    plan.action @backward microbatch 0
    plan.action @backward microbatch 1
  }
}

// -----

// What else keeps the five apart: the logits read by a kernel of their own
// (@keep: a metric of the logits), the loss read in the backward before the
// cross entropy's gradient (@early), the weight gradient in another
// subroutine (@zb: ZB-H1's W pass), the vocabulary-parallel loss (@vp).
// CHECK-LABEL: plan.program @keep
// CHECK-NOT: plan.fused
// CHECK: plan.kernel "cross_entropy_bwd"
plan.program @keep {
  plan.buffer @w : tensor<16x4xf32> {kind = "param", name = "w"}
  plan.buffer @dw : tensor<16x4xf32> {kind = "grad", name = "w.grad"}
  plan.buffer @h : tensor<8x4xf32> {kind = "activation", name = "h"}
  plan.buffer @dh : tensor<8x4xf32> {kind = "activation", name = "h.grad"}
  plan.buffer @t : tensor<8xi32> {kind = "input", name = "labels"}
  plan.buffer @logits : tensor<8x16xf32> {kind = "activation", name = "logits"}
  plan.buffer @copy : tensor<8x16xf32> {kind = "activation", name = "copy"}
  plan.buffer @loss : tensor<1xf32> {kind = "metric", name = "loss"}
  plan.subroutine @forward {
    plan.kernel "linear_fwd" {x = @h, w = @w, y = @logits} {M = 8 : i64, K = 4 : i64, N = 16 : i64, layout = "out_in"}
    plan.kernel "cross_entropy_fwd" {logits = @logits, targets = @t, loss = @loss} {M = 8 : i64, V = 16 : i64, scale = 0.5 : f64}
    plan.kernel "copy" {x = @logits, y = @copy} {n = 128 : i64}
  }
  plan.subroutine @backward {
    plan.kernel "cross_entropy_bwd" {logits = @logits, targets = @t, dlogits = @logits} {M = 8 : i64, V = 16 : i64, scale = 0.0625 : f64}
    plan.kernel "linear_bwd_weight" {dy = @logits, x = @h, dw = @dw} {M = 8 : i64, K = 4 : i64, N = 16 : i64, layout = "out_in", accumulate = true}
    plan.kernel "linear_bwd_input" {dy = @logits, w = @w, dx = @dh} {M = 8 : i64, K = 4 : i64, N = 16 : i64, layout = "out_in", accumulate = false}
  }
  plan.schedule {
    plan.action @forward microbatch 0
    plan.action @backward microbatch 0
  }
}

// -----

// CHECK-LABEL: plan.program @early
// CHECK-NOT: plan.fused
// CHECK: plan.kernel "cross_entropy_bwd"
plan.program @early {
  plan.buffer @w : tensor<16x4xf32> {kind = "param", name = "w"}
  plan.buffer @dw : tensor<16x4xf32> {kind = "grad", name = "w.grad"}
  plan.buffer @h : tensor<8x4xf32> {kind = "activation", name = "h"}
  plan.buffer @dh : tensor<8x4xf32> {kind = "activation", name = "h.grad"}
  plan.buffer @t : tensor<8xi32> {kind = "input", name = "labels"}
  plan.buffer @logits : tensor<8x16xf32> {kind = "activation", name = "logits"}
  plan.buffer @loss : tensor<1xf32> {kind = "metric", name = "loss"}
  plan.buffer @l2 : tensor<1xf32> {kind = "metric", name = "loss.copy"}
  plan.subroutine @forward {
    plan.kernel "linear_fwd" {x = @h, w = @w, y = @logits} {M = 8 : i64, K = 4 : i64, N = 16 : i64, layout = "out_in"}
    plan.kernel "cross_entropy_fwd" {logits = @logits, targets = @t, loss = @loss} {M = 8 : i64, V = 16 : i64, scale = 0.5 : f64}
  }
  plan.subroutine @backward {
    plan.kernel "copy" {x = @loss, y = @l2} {n = 1 : i64}
    plan.kernel "cross_entropy_bwd" {logits = @logits, targets = @t, dlogits = @logits} {M = 8 : i64, V = 16 : i64, scale = 0.0625 : f64}
    plan.kernel "linear_bwd_weight" {dy = @logits, x = @h, dw = @dw} {M = 8 : i64, K = 4 : i64, N = 16 : i64, layout = "out_in", accumulate = true}
    plan.kernel "linear_bwd_input" {dy = @logits, w = @w, dx = @dh} {M = 8 : i64, K = 4 : i64, N = 16 : i64, layout = "out_in", accumulate = false}
  }
  plan.schedule {
    plan.action @forward microbatch 0
    plan.action @backward microbatch 0
  }
}

// -----

// CHECK-LABEL: plan.program @zb
// CHECK-NOT: plan.fused
// CHECK: plan.kernel "cross_entropy_bwd"
plan.program @zb {
  plan.buffer @w : tensor<16x4xf32> {kind = "param", name = "w"}
  plan.buffer @dw : tensor<16x4xf32> {kind = "grad", name = "w.grad"}
  plan.buffer @h : tensor<8x4xf32> {kind = "activation", name = "h"}
  plan.buffer @dh : tensor<8x4xf32> {kind = "activation", name = "h.grad"}
  plan.buffer @t : tensor<8xi32> {kind = "input", name = "labels"}
  plan.buffer @logits : tensor<8x16xf32> {kind = "activation", name = "logits"}
  plan.buffer @dlogits : tensor<8x16xf32> {kind = "activation", name = "logits.grad"}
  plan.buffer @loss : tensor<1xf32> {kind = "metric", name = "loss"}
  plan.subroutine @forward {
    plan.kernel "linear_fwd" {x = @h, w = @w, y = @logits} {M = 8 : i64, K = 4 : i64, N = 16 : i64, layout = "out_in"}
    plan.kernel "cross_entropy_fwd" {logits = @logits, targets = @t, loss = @loss} {M = 8 : i64, V = 16 : i64, scale = 0.5 : f64}
  }
  plan.subroutine @backward {
    plan.kernel "cross_entropy_bwd" {logits = @logits, targets = @t, dlogits = @dlogits} {M = 8 : i64, V = 16 : i64, scale = 0.0625 : f64}
    plan.kernel "linear_bwd_input" {dy = @dlogits, w = @w, dx = @dh} {M = 8 : i64, K = 4 : i64, N = 16 : i64, layout = "out_in", accumulate = false}
  }
  plan.subroutine @weights {
    plan.kernel "linear_bwd_weight" {dy = @dlogits, x = @h, dw = @dw} {M = 8 : i64, K = 4 : i64, N = 16 : i64, layout = "out_in", accumulate = true}
  }
  plan.schedule {
    plan.action @forward microbatch 0
    plan.action @backward microbatch 0
    plan.action @weights microbatch 0
  }
}

// -----

// CHECK-LABEL: plan.program @vp
// CHECK-NOT: plan.fused
// CHECK: plan.kernel "cross_entropy_bwd"
plan.program @vp {
  plan.buffer @w : tensor<16x4xf32> {kind = "param", name = "w"}
  plan.buffer @dw : tensor<16x4xf32> {kind = "grad", name = "w.grad"}
  plan.buffer @h : tensor<8x4xf32> {kind = "activation", name = "h"}
  plan.buffer @dh : tensor<8x4xf32> {kind = "activation", name = "h.grad"}
  plan.buffer @t : tensor<8xi32> {kind = "input", name = "labels"}
  plan.buffer @logits : tensor<8x16xf32> {kind = "activation", name = "logits"}
  plan.buffer @mx : tensor<8xf64> {kind = "scratch", name = "row_max"}
  plan.buffer @sums : tensor<16xf64> {kind = "scratch", name = "row_sums"}
  plan.buffer @loss : tensor<1xf32> {kind = "metric", name = "loss"}
  plan.subroutine @forward {
    plan.kernel "linear_fwd" {x = @h, w = @w, y = @logits} {M = 8 : i64, K = 4 : i64, N = 16 : i64, layout = "out_in"}
    plan.kernel "cross_entropy_fwd" {logits = @logits, targets = @t, loss = @loss, row_max = @mx, row_sums = @sums} {M = 8 : i64, V = 16 : i64, scale = 0.5 : f64, shard_axis = "tp"}
  }
  plan.subroutine @backward {
    plan.kernel "cross_entropy_bwd" {logits = @logits, targets = @t, dlogits = @logits, row_max = @mx, row_sums = @sums} {M = 8 : i64, V = 16 : i64, scale = 0.0625 : f64, shard_axis = "tp"}
    plan.kernel "linear_bwd_weight" {dy = @logits, x = @h, dw = @dw} {M = 8 : i64, K = 4 : i64, N = 16 : i64, layout = "out_in", accumulate = true}
    plan.kernel "linear_bwd_input" {dy = @logits, w = @w, dx = @dh} {M = 8 : i64, K = 4 : i64, N = 16 : i64, layout = "out_in", accumulate = false}
  }
  plan.schedule {
    plan.action @forward microbatch 0
    plan.action @backward microbatch 0
  }
}
