// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-fuse-embedding))" | FileCheck %s
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-fuse-embedding,llcdist-plan-memory,llcdist-verify-async))" | FileCheck %s --check-prefix=MEM

// GPT-2's input as the lowering emits it: the token embedding's gather, the
// position embedding added, and their two weight gradients of one dy. One
// kernel each way; the gather's intermediate buffer goes.
// CHECK-LABEL: plan.program @gpt2
// CHECK-SAME: plan.fused = [{from = "embedding_fwd + pos_embedding_fwd", into = 1 : i64, ops = 2 : i64, pass = "llcdist-plan-fuse-embedding", to = "embedding_fwd with wpe"}, {from = "embedding_bwd_weight + pos_embedding_bwd_weight", into = 1 : i64, ops = 2 : i64, pass = "llcdist-plan-fuse-embedding", to = "embedding_bwd_weight with dwpe"}]
// CHECK-NOT: plan.buffer @e :
// CHECK: plan.subroutine @forward {
// CHECK-NEXT: plan.kernel "embedding_fwd" {ids = @ids, out = @h, table = @wte, wpe = @wpe} {H = 16 : i64, M = 8 : i64, P = 4 : i64, S = 4 : i64, V = 64 : i64}
// CHECK-NEXT: plan.kernel "layer_norm_fwd"
// CHECK-NEXT: {{^ *}}}
// CHECK: plan.subroutine @backward {
// CHECK-NEXT: plan.kernel "embedding_bwd_weight" {dout = @dh, dtable = @dwte, dwpe = @dwpe, ids = @ids} {H = 16 : i64, M = 8 : i64, P = 4 : i64, S = 4 : i64, V = 64 : i64, accumulate = true}
// CHECK-NEXT: {{^ *}}}
// MEM-LABEL: plan.program @gpt2
// MEM: arena_bytes
plan.program @gpt2 {
  plan.buffer @wte : tensor<64x16xf32> {kind = "param", name = "wte"}
  plan.buffer @dwte : tensor<64x16xf32> {kind = "grad", name = "wte.grad"}
  plan.buffer @wpe : tensor<4x16xf32> {kind = "param", name = "wpe"}
  plan.buffer @dwpe : tensor<4x16xf32> {kind = "grad", name = "wpe.grad"}
  plan.buffer @g : tensor<16xf32> {kind = "param", name = "ln.weight"}
  plan.buffer @bb : tensor<16xf32> {kind = "param", name = "ln.bias"}
  plan.buffer @ids : tensor<2x4xi32> {kind = "input", name = "input_ids"}
  plan.buffer @e : tensor<2x4x16xf32> {kind = "activation", name = "e"}
  plan.buffer @h : tensor<2x4x16xf32> {kind = "activation", name = "h"}
  plan.buffer @y : tensor<2x4x16xf32> {kind = "activation", name = "y"}
  plan.buffer @mean : tensor<8xf32> {kind = "activation", name = "mean"}
  plan.buffer @rstd : tensor<8xf32> {kind = "activation", name = "rstd"}
  plan.buffer @dh : tensor<2x4x16xf32> {kind = "activation", name = "h.grad"}
  plan.param "wte" value @wte grad @dwte state [] {init = {kind = "zeros"}, weight_decay = false}
  plan.param "wpe" value @wpe grad @dwpe state [] {init = {kind = "zeros"}, weight_decay = false}
  plan.subroutine @forward {
    plan.kernel "embedding_fwd" {ids = @ids, table = @wte, out = @e} {M = 8 : i64, V = 64 : i64, H = 16 : i64}
    plan.kernel "pos_embedding_fwd" {x = @e, wpe = @wpe, y = @h} {B = 2 : i64, S = 4 : i64, H = 16 : i64, P = 4 : i64}
    plan.kernel "layer_norm_fwd" {x = @h, gamma = @g, beta = @bb, y = @y, mean = @mean, rstd = @rstd} {M = 8 : i64, H = 16 : i64, eps = 1.0e-05 : f64}
  }
  plan.subroutine @backward {
    plan.kernel "pos_embedding_bwd_weight" {dy = @dh, dwpe = @dwpe} {B = 2 : i64, S = 4 : i64, H = 16 : i64, P = 4 : i64, accumulate = true}
    plan.kernel "embedding_bwd_weight" {ids = @ids, dout = @dh, dtable = @dwte} {M = 8 : i64, V = 64 : i64, H = 16 : i64, accumulate = true}
  }
  plan.schedule {
    plan.action @forward microbatch 0
    plan.action @backward microbatch 0
  }
}

// -----

// What keeps the pairs: a sequence-parallel position embedding (@s,
// shard_axis), a gather whose out another kernel reads (@r), a bf16 out of an
// f32 table (@c: the gathered row rounds); in the backward, gradients of
// other dys (@d1, @d2) and other accumulate flags.
// CHECK-LABEL: plan.program @apart
// CHECK-NOT: plan.fused
// CHECK-COUNT-3: plan.kernel "pos_embedding_fwd"
// CHECK-COUNT-2: plan.kernel "pos_embedding_bwd_weight"
plan.program @apart {
  plan.buffer @wte : tensor<64x16xf32> {kind = "param", name = "wte"}
  plan.buffer @dwte : tensor<64x16xf32> {kind = "grad", name = "wte.grad"}
  plan.buffer @wpe : tensor<8x16xf32> {kind = "param", name = "wpe"}
  plan.buffer @dwpe : tensor<8x16xf32> {kind = "grad", name = "wpe.grad"}
  plan.buffer @ids : tensor<2x4xi32> {kind = "input", name = "input_ids"}
  plan.buffer @s : tensor<2x4x16xf32> {kind = "activation", name = "s"}
  plan.buffer @sy : tensor<2x4x16xf32> {kind = "activation", name = "sy"}
  plan.buffer @r : tensor<2x4x16xf32> {kind = "activation", name = "r"}
  plan.buffer @ry : tensor<2x4x16xf32> {kind = "activation", name = "ry"}
  plan.buffer @rz : tensor<2x4x16xf32> {kind = "activation", name = "rz"}
  plan.buffer @c : tensor<2x4x16xbf16> {kind = "activation", name = "c"}
  plan.buffer @cy : tensor<2x4x16xbf16> {kind = "activation", name = "cy"}
  plan.buffer @d1 : tensor<2x4x16xf32> {kind = "activation", name = "d1"}
  plan.buffer @d2 : tensor<2x4x16xf32> {kind = "activation", name = "d2"}
  plan.subroutine @forward {
    plan.kernel "embedding_fwd" {ids = @ids, table = @wte, out = @s} {M = 8 : i64, V = 64 : i64, H = 16 : i64}
    plan.kernel "pos_embedding_fwd" {x = @s, wpe = @wpe, y = @sy} {B = 2 : i64, S = 4 : i64, H = 16 : i64, P = 8 : i64, shard_axis = "tp"}
    plan.kernel "embedding_fwd" {ids = @ids, table = @wte, out = @r} {M = 8 : i64, V = 64 : i64, H = 16 : i64}
    plan.kernel "pos_embedding_fwd" {x = @r, wpe = @wpe, y = @ry} {B = 2 : i64, S = 4 : i64, H = 16 : i64, P = 8 : i64}
    plan.kernel "add" {a = @r, b = @ry, y = @rz} {n = 128 : i64}
    plan.kernel "embedding_fwd" {ids = @ids, table = @wte, out = @c} {M = 8 : i64, V = 64 : i64, H = 16 : i64}
    plan.kernel "pos_embedding_fwd" {x = @c, wpe = @wpe, y = @cy} {B = 2 : i64, S = 4 : i64, H = 16 : i64, P = 8 : i64}
  }
  plan.subroutine @backward {
    plan.kernel "pos_embedding_bwd_weight" {dy = @d1, dwpe = @dwpe} {B = 2 : i64, S = 4 : i64, H = 16 : i64, P = 8 : i64, accumulate = true}
    plan.kernel "embedding_bwd_weight" {ids = @ids, dout = @d2, dtable = @dwte} {M = 8 : i64, V = 64 : i64, H = 16 : i64, accumulate = true}
    plan.kernel "pos_embedding_bwd_weight" {dy = @d2, dwpe = @dwpe} {B = 2 : i64, S = 4 : i64, H = 16 : i64, P = 8 : i64, accumulate = false}
  }
  plan.schedule {
    plan.action @forward microbatch 0
    plan.action @backward microbatch 0
  }
}
