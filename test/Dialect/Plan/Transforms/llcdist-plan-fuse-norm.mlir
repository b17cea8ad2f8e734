// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-fuse-norm))" | FileCheck %s
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-fuse-norm,llcdist-plan-memory,llcdist-verify-async))" | FileCheck %s --check-prefix=MEM

// The forward: an add and the LayerNorm of its sum become one
// add_layer_norm_fwd (the sum stays: the next residual add reads it); an add
// whose sum is first read by something else than a norm stays. The backward:
// the weight and input gradients and the residual's add become one
// layer_norm_bwd with dresidual, and the input gradient's buffer (@dxn) goes.
// The program records what was fused.
// CHECK-LABEL: plan.program @layer
// CHECK-SAME: plan.fused = [{from = "add + layer_norm_fwd", into = 1 : i64, ops = 2 : i64, pass = "llcdist-plan-fuse-norm", to = "add_layer_norm_fwd"}, {from = "layer_norm_bwd_weight + layer_norm_bwd_input + add", into = 1 : i64, ops = 3 : i64, pass = "llcdist-plan-fuse-norm", to = "layer_norm_bwd"}]
// CHECK-NOT: plan.buffer @dxn
// CHECK: plan.subroutine @forward {
// CHECK-NEXT: plan.kernel "add_layer_norm_fwd" {a = @r0, b = @br, beta = @beta, gamma = @gamma, mean = @mu, rstd = @rs, sum = @r1, y = @ln} {H = 4 : i64, M = 2 : i64, eps = 1.000000e-05 : f64}
// CHECK-NEXT: plan.kernel "add" {a = @r1, b = @ln, y = @r2}
// CHECK-NEXT: plan.kernel "linear_fwd"
// CHECK-NEXT: {{^ *}}}
// CHECK: plan.subroutine @backward {
// CHECK-NEXT: plan.kernel "layer_norm_bwd" {dbeta = @dbeta, dgamma = @dgamma, dresidual = @dres, dx = @dr0, dy = @dln, gamma = @gamma, mean = @mu, rstd = @rs, x = @r1} {H = 4 : i64, M = 2 : i64, accumulate = true}
// CHECK-NEXT: {{^ *}}}
// MEM-LABEL: plan.program @layer
// MEM: arena_bytes
plan.program @layer {
  plan.buffer @gamma : tensor<4xf32> {kind = "param", name = "ln.weight"}
  plan.buffer @beta : tensor<4xf32> {kind = "param", name = "ln.bias"}
  plan.buffer @dgamma : tensor<4xf32> {kind = "grad", name = "ln.weight.grad"}
  plan.buffer @dbeta : tensor<4xf32> {kind = "grad", name = "ln.bias.grad"}
  plan.buffer @w : tensor<4x4xf32> {kind = "param", name = "w"}
  plan.buffer @r0 : tensor<2x4xf32> {kind = "activation", name = "r0"}
  plan.buffer @br : tensor<2x4xf32> {kind = "activation", name = "branch"}
  plan.buffer @r1 : tensor<2x4xf32> {kind = "activation", name = "r1"}
  plan.buffer @ln : tensor<2x4xf32> {kind = "activation", name = "ln"}
  plan.buffer @mu : tensor<2xf32> {kind = "activation", name = "ln.mean"}
  plan.buffer @rs : tensor<2xf32> {kind = "activation", name = "ln.rstd"}
  plan.buffer @r2 : tensor<2x4xf32> {kind = "activation", name = "r2"}
  plan.buffer @y : tensor<2x4xf32> {kind = "activation", name = "y"}
  plan.buffer @dln : tensor<2x4xf32> {kind = "activation", name = "ln.grad"}
  plan.buffer @dxn : tensor<2x4xf32> {kind = "activation", name = "ln.grad_input"}
  plan.buffer @dres : tensor<2x4xf32> {kind = "activation", name = "r1.grad"}
  plan.buffer @dr0 : tensor<2x4xf32> {kind = "activation", name = "r0.grad"}
  plan.param "ln.weight" value @gamma grad @dgamma state [] {init = {kind = "ones"}, weight_decay = false}
  plan.param "ln.bias" value @beta grad @dbeta state [] {init = {kind = "zeros"}, weight_decay = false}
  plan.param "w" value @w grad @dgamma state [] {init = {kind = "zeros"}, weight_decay = false}
  plan.subroutine @forward {
    plan.kernel "add" {a = @r0, b = @br, y = @r1} {n = 8 : i64}
    plan.kernel "layer_norm_fwd" {x = @r1, gamma = @gamma, beta = @beta, y = @ln, mean = @mu, rstd = @rs} {M = 2 : i64, H = 4 : i64, eps = 1.0e-5 : f64}
    plan.kernel "add" {a = @r1, b = @ln, y = @r2} {n = 8 : i64}
    plan.kernel "linear_fwd" {x = @r2, w = @w, y = @y} {M = 2 : i64, K = 4 : i64, N = 4 : i64, layout = "out_in"}
  }
  plan.subroutine @backward {
    plan.kernel "layer_norm_bwd_weight" {dy = @dln, x = @r1, mean = @mu, rstd = @rs, dgamma = @dgamma, dbeta = @dbeta} {M = 2 : i64, H = 4 : i64, accumulate = true}
    plan.kernel "layer_norm_bwd_input" {dy = @dln, x = @r1, gamma = @gamma, mean = @mu, rstd = @rs, dx = @dxn} {M = 2 : i64, H = 4 : i64}
    plan.kernel "add" {a = @dres, b = @dxn, y = @dr0} {n = 8 : i64}
  }
  plan.schedule {
    plan.action @forward microbatch 0
    plan.action @backward microbatch 0
  }
}

// -----

// RMSNorm with communication between the kernels (ZeRO-3's gather of the
// weight before the norm; ZeRO-2's reduce-scatter of the weight gradient,
// started on queue comm, and a wait for another op in flight): the fused
// kernel stands where one of them stood, the others moving to it across
// what is independent of them. The forward add moves down to the norm past
// the gather; the backward's input gradient and add move up to the weight
// gradient (the reduce-scatter reads it), past the wait of the all-reduce
// of @other, whose buffers they do not touch.
// CHECK-LABEL: plan.program @rms
// CHECK: plan.subroutine @forward {
// CHECK-NEXT: plan.kernel "all_gather" {x = @wshard, y = @weight}
// CHECK-NEXT: plan.kernel "add_rms_norm_fwd" {a = @r0, b = @br, rstd = @rs, sum = @r1, weight = @weight, y = @ln} {H = 4 : i64, M = 2 : i64, eps = 9.9999999999999995E-7 : f64}
// CHECK-NEXT: {{^ *}}}
// CHECK: plan.subroutine @backward {
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@other]}
// CHECK-NEXT: plan.kernel "rms_norm_bwd" {dresidual = @dres, dweight = @dwmb, dx = @dr0, dy = @dln, rstd = @rs, weight = @weight, x = @r1} {H = 4 : i64, M = 2 : i64, accumulate = false}
// CHECK-NEXT: plan.kernel "reduce_scatter" {x = @dwmb, y = @dwshard}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 1 : i64}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 0 : i64}
// CHECK-NEXT: {{^ *}}}
// MEM-LABEL: plan.program @rms
// MEM: arena_bytes
plan.program @rms attributes {queues = ["compute", "comm"]} {
  plan.buffer @wshard : tensor<2xf32> {kind = "param", name = "norm.weight"}
  plan.buffer @dwshard : tensor<2xf32> {kind = "grad", name = "norm.weight.grad"}
  plan.buffer @weight : tensor<4xf32> {kind = "activation", name = "norm.weight.gathered"}
  plan.buffer @dwmb : tensor<4xf32> {kind = "activation", name = "norm.weight.grad_mb"}
  plan.buffer @other : tensor<4xf32> {kind = "activation", name = "other"}
  plan.buffer @r0 : tensor<2x4xf32> {kind = "activation", name = "r0"}
  plan.buffer @br : tensor<2x4xf32> {kind = "activation", name = "branch"}
  plan.buffer @r1 : tensor<2x4xf32> {kind = "activation", name = "r1"}
  plan.buffer @ln : tensor<2x4xf32> {kind = "activation", name = "ln"}
  plan.buffer @rs : tensor<2xf32> {kind = "activation", name = "ln.rstd"}
  plan.buffer @dln : tensor<2x4xf32> {kind = "activation", name = "ln.grad"}
  plan.buffer @dxn : tensor<2x4xf32> {kind = "activation", name = "ln.grad_input"}
  plan.buffer @dres : tensor<2x4xf32> {kind = "activation", name = "r1.grad"}
  plan.buffer @dr0 : tensor<2x4xf32> {kind = "activation", name = "r0.grad"}
  plan.param "norm.weight" value @wshard grad @dwshard state [] {init = {kind = "ones"}, weight_decay = false}
  plan.subroutine @forward {
    plan.kernel "add" {a = @r0, b = @br, y = @r1} {n = 8 : i64}
    plan.kernel "all_gather" {x = @wshard, y = @weight} {axis = "dp", outer = 1 : i64, inner = 2 : i64}
    plan.kernel "rms_norm_fwd" {x = @r1, weight = @weight, y = @ln, rstd = @rs} {M = 2 : i64, H = 4 : i64, eps = 1.0e-6 : f64}
  }
  plan.subroutine @backward {
    plan.kernel "all_reduce" {x = [@other]} {axis = "dp", op = "sum"} {queue = "comm", token = 1 : i64}
    plan.kernel "rms_norm_bwd_weight" {dy = @dln, x = @r1, rstd = @rs, dweight = @dwmb} {M = 2 : i64, H = 4 : i64, accumulate = false}
    plan.kernel "reduce_scatter" {x = @dwmb, y = @dwshard} {axis = "dp", op = "sum", outer = 1 : i64, inner = 2 : i64} {queue = "comm", token = 0 : i64}
    plan.kernel "wait" {} {} {token = 1 : i64}
    plan.kernel "rms_norm_bwd_input" {dy = @dln, x = @r1, weight = @weight, rstd = @rs, dx = @dxn} {M = 2 : i64, H = 4 : i64}
    plan.kernel "add" {a = @dxn, b = @dres, y = @dr0} {n = 8 : i64}
    plan.kernel "wait" {} {} {token = 0 : i64}
  }
  plan.schedule {
    plan.action @forward microbatch 0
    plan.action @backward microbatch 0
  }
}

// -----

// What stays: an input gradient another kernel also reads keeps its add
// (the pair still fuses, writing @dxn); an add that waits for the residual's
// all-reduce (the wait is for an op writing @dres) cannot move above it, so
// the pair moves down to it; an add into another dtype than the input
// gradient's (it would round the input gradient otherwise) stays; a pair of
// two norms' kernels (another x) does not fuse.
// CHECK-LABEL: plan.program @kept
// CHECK: plan.subroutine @reread {
// CHECK-NEXT: plan.kernel "layer_norm_bwd" {dbeta = @dbeta, dgamma = @dgamma, dx = @dxn, dy = @dln, gamma = @gamma, mean = @mu, rstd = @rs, x = @r1} {H = 4 : i64, M = 2 : i64, accumulate = true}
// CHECK-NEXT: plan.kernel "add" {a = @dres, b = @dxn, y = @dr0}
// CHECK-NEXT: plan.kernel "copy" {x = @dxn, y = @other}
// CHECK-NEXT: {{^ *}}}
// CHECK: plan.subroutine @waits {
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@dres]}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 0 : i64}
// CHECK-NEXT: plan.kernel "layer_norm_bwd" {dbeta = @dbeta, dgamma = @dgamma, dresidual = @dres, dx = @dr0, dy = @dln, gamma = @gamma, mean = @mu, rstd = @rs, x = @r1}
// CHECK-NEXT: {{^ *}}}
// CHECK: plan.subroutine @dtype {
// CHECK-NEXT: plan.kernel "layer_norm_bwd" {dbeta = @dbeta, dgamma = @dgamma, dx = @dxb, dy = @dln, gamma = @gamma, mean = @mu, rstd = @rs, x = @r1}
// CHECK-NEXT: plan.kernel "add" {a = @dres, b = @dxb, y = @dr0}
// CHECK-NEXT: {{^ *}}}
// CHECK: plan.subroutine @two {
// CHECK-NEXT: plan.kernel "layer_norm_bwd_weight"
// CHECK-NEXT: plan.kernel "layer_norm_bwd_input"
// CHECK-NEXT: {{^ *}}}
plan.program @kept attributes {queues = ["compute", "comm"]} {
  plan.buffer @gamma : tensor<4xf32> {kind = "param", name = "ln.weight"}
  plan.buffer @beta : tensor<4xf32> {kind = "param", name = "ln.bias"}
  plan.buffer @dgamma : tensor<4xf32> {kind = "grad", name = "ln.weight.grad"}
  plan.buffer @dbeta : tensor<4xf32> {kind = "grad", name = "ln.bias.grad"}
  plan.buffer @r1 : tensor<2x4xf32> {kind = "activation", name = "r1"}
  plan.buffer @r2 : tensor<2x4xf32> {kind = "activation", name = "r2"}
  plan.buffer @mu : tensor<2xf32> {kind = "activation", name = "ln.mean"}
  plan.buffer @rs : tensor<2xf32> {kind = "activation", name = "ln.rstd"}
  plan.buffer @dln : tensor<2x4xf32> {kind = "activation", name = "ln.grad"}
  plan.buffer @dxn : tensor<2x4xf32> {kind = "activation", name = "ln.grad_input"}
  plan.buffer @dxm : tensor<2x4xf32> {kind = "activation", name = "ln.grad_input#2"}
  plan.buffer @dxb : tensor<2x4xbf16> {kind = "activation", name = "ln.grad_input.bf16"}
  plan.buffer @dres : tensor<2x4xf32> {kind = "activation", name = "r1.grad"}
  plan.buffer @dr0 : tensor<2x4xf32> {kind = "activation", name = "r0.grad"}
  plan.buffer @other : tensor<2x4xf32> {kind = "activation", name = "other"}
  plan.param "ln.weight" value @gamma grad @dgamma state [] {init = {kind = "ones"}, weight_decay = false}
  plan.param "ln.bias" value @beta grad @dbeta state [] {init = {kind = "zeros"}, weight_decay = false}
  plan.subroutine @reread {
    plan.kernel "layer_norm_bwd_weight" {dy = @dln, x = @r1, mean = @mu, rstd = @rs, dgamma = @dgamma, dbeta = @dbeta} {M = 2 : i64, H = 4 : i64, accumulate = true}
    plan.kernel "layer_norm_bwd_input" {dy = @dln, x = @r1, gamma = @gamma, mean = @mu, rstd = @rs, dx = @dxn} {M = 2 : i64, H = 4 : i64}
    plan.kernel "add" {a = @dres, b = @dxn, y = @dr0} {n = 8 : i64}
    plan.kernel "copy" {x = @dxn, y = @other} {n = 8 : i64}
  }
  plan.subroutine @waits {
    plan.kernel "all_reduce" {x = [@dres]} {axis = "dp", op = "sum"} {queue = "comm", token = 0 : i64}
    plan.kernel "layer_norm_bwd_weight" {dy = @dln, x = @r1, mean = @mu, rstd = @rs, dgamma = @dgamma, dbeta = @dbeta} {M = 2 : i64, H = 4 : i64, accumulate = true}
    plan.kernel "layer_norm_bwd_input" {dy = @dln, x = @r1, gamma = @gamma, mean = @mu, rstd = @rs, dx = @dxm} {M = 2 : i64, H = 4 : i64}
    plan.kernel "wait" {} {} {token = 0 : i64}
    plan.kernel "add" {a = @dres, b = @dxm, y = @dr0} {n = 8 : i64}
  }
  plan.subroutine @dtype {
    plan.kernel "layer_norm_bwd_weight" {dy = @dln, x = @r1, mean = @mu, rstd = @rs, dgamma = @dgamma, dbeta = @dbeta} {M = 2 : i64, H = 4 : i64, accumulate = true}
    plan.kernel "layer_norm_bwd_input" {dy = @dln, x = @r1, gamma = @gamma, mean = @mu, rstd = @rs, dx = @dxb} {M = 2 : i64, H = 4 : i64}
    plan.kernel "add" {a = @dres, b = @dxb, y = @dr0} {n = 8 : i64}
  }
  plan.subroutine @two {
    plan.kernel "layer_norm_bwd_weight" {dy = @dln, x = @r1, mean = @mu, rstd = @rs, dgamma = @dgamma, dbeta = @dbeta} {M = 2 : i64, H = 4 : i64, accumulate = true}
    plan.kernel "layer_norm_bwd_input" {dy = @dln, x = @r2, gamma = @gamma, mean = @mu, rstd = @rs, dx = @other} {M = 2 : i64, H = 4 : i64}
  }
  plan.schedule {
    plan.action @reread microbatch 0
    plan.action @waits microbatch 0
    plan.action @dtype microbatch 0
    plan.action @two microbatch 0
  }
}

// -----

// A LayerNorm without gamma and beta (OLMo's): the forward fuses as any
// (add_layer_norm_fwd without them); the input gradient has no weight
// gradient beside it, and it joins the residual's add alone: layer_norm_bwd
// without gamma, dgamma and dbeta (accumulate false), and @dxn goes.
// CHECK-LABEL: plan.program @plain
// CHECK-SAME: plan.fused = [{from = "add + layer_norm_fwd", into = 1 : i64, ops = 2 : i64, pass = "llcdist-plan-fuse-norm", to = "add_layer_norm_fwd"}, {from = "layer_norm_bwd_input + add", into = 1 : i64, ops = 2 : i64, pass = "llcdist-plan-fuse-norm", to = "layer_norm_bwd"}]
// CHECK-NOT: plan.buffer @dxn
// CHECK: plan.subroutine @forward {
// CHECK-NEXT: plan.kernel "add_layer_norm_fwd" {a = @r0, b = @br, mean = @mu, rstd = @rs, sum = @r1, y = @ln} {H = 4 : i64, M = 2 : i64, eps = 1.000000e-05 : f64}
// CHECK-NEXT: plan.kernel "add" {a = @r1, b = @ln, y = @r2}
// CHECK-NEXT: {{^ *}}}
// CHECK: plan.subroutine @backward {
// CHECK-NEXT: plan.kernel "layer_norm_bwd" {dresidual = @dres, dx = @dr0, dy = @dln, mean = @mu, rstd = @rs, x = @r1} {H = 4 : i64, M = 2 : i64, accumulate = false}
// CHECK-NEXT: {{^ *}}}
// MEM-LABEL: plan.program @plain
// MEM: arena_bytes
plan.program @plain {
  plan.buffer @r0 : tensor<2x4xf32> {kind = "activation", name = "r0"}
  plan.buffer @br : tensor<2x4xf32> {kind = "activation", name = "branch"}
  plan.buffer @r1 : tensor<2x4xf32> {kind = "activation", name = "r1"}
  plan.buffer @ln : tensor<2x4xf32> {kind = "activation", name = "ln"}
  plan.buffer @mu : tensor<2xf32> {kind = "activation", name = "ln.mean"}
  plan.buffer @rs : tensor<2xf32> {kind = "activation", name = "ln.rstd"}
  plan.buffer @r2 : tensor<2x4xf32> {kind = "activation", name = "r2"}
  plan.buffer @dln : tensor<2x4xf32> {kind = "activation", name = "ln.grad"}
  plan.buffer @dxn : tensor<2x4xf32> {kind = "activation", name = "ln.grad_input"}
  plan.buffer @dres : tensor<2x4xf32> {kind = "activation", name = "r1.grad"}
  plan.buffer @dr0 : tensor<2x4xf32> {kind = "activation", name = "r0.grad"}
  plan.subroutine @forward {
    plan.kernel "add" {a = @r0, b = @br, y = @r1} {n = 8 : i64}
    plan.kernel "layer_norm_fwd" {x = @r1, y = @ln, mean = @mu, rstd = @rs} {M = 2 : i64, H = 4 : i64, eps = 1.0e-5 : f64}
    plan.kernel "add" {a = @r1, b = @ln, y = @r2} {n = 8 : i64}
  }
  plan.subroutine @backward {
    plan.kernel "layer_norm_bwd_input" {dy = @dln, x = @r1, mean = @mu, rstd = @rs, dx = @dxn} {M = 2 : i64, H = 4 : i64}
    plan.kernel "add" {a = @dres, b = @dxn, y = @dr0} {n = 8 : i64}
  }
  plan.schedule {
    plan.action @forward microbatch 0
    plan.action @backward microbatch 0
  }
}
