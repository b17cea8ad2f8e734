// RUN: llc-dist-opt %s -llcdist-megatron-tp | FileCheck %s

// Megatron-LM's roles, read off the structure: w_in feeds an activation
// (column-parallel: weight on its output dim, bias too), w_out feeds only the
// residual add (row-parallel: weight on its input dim, bias whole), the fused
// w_qkv feeds a 3-way equal split (blocks = 3), the table and the LM head are
// vocabulary-parallel (dim 0). Norm weights stay whole.

// CHECK-LABEL: func.func private @block
// CHECK: xf.param "h.{i}.w_qkv" {xf.tp_split = {blocks = 3 : i64, dim = 1 : i64}} : tensor<8x24xf32>
// CHECK: xf.param "h.{i}.w_in" {xf.tp_split = {blocks = 1 : i64, dim = 0 : i64}} : tensor<16x8xf32>
// CHECK: xf.param "h.{i}.b_in" {xf.tp_split = {blocks = 1 : i64, dim = 0 : i64}} : tensor<16xf32>
// CHECK: xf.param "h.{i}.w_out" {xf.tp_split = {blocks = 1 : i64, dim = 1 : i64}} : tensor<8x16xf32>
// CHECK: xf.param "h.{i}.b_out" : tensor<8xf32>
// CHECK-LABEL: func.func @forward
// CHECK: xf.param "wte" {xf.tp_split = {blocks = 1 : i64, dim = 0 : i64}} : tensor<32x8xf32>
// CHECK: xf.param "norm" : tensor<8xf32>
// CHECK: xf.param "head" {xf.tp_split = {blocks = 1 : i64, dim = 0 : i64}} : tensor<32x8xf32>
module {
  func.func private @block(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> attributes {xf.layer_body} {
    %wqkv = xf.param "h.{i}.w_qkv" : tensor<8x24xf32>
    %qkv = xf.linear in_out %x, %wqkv : (tensor<2x4x8xf32>, tensor<8x24xf32>) -> tensor<2x4x24xf32>
    %q, %k, %v = xf.split %qkv : tensor<2x4x24xf32> -> tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
    %a = xf.attention %q, %k, %v {num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %win = xf.param "h.{i}.w_in" : tensor<16x8xf32>
    %bin = xf.param "h.{i}.b_in" : tensor<16xf32>
    %h = xf.linear out_in %a, %win, %bin : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
    %g = xf.gelu_tanh %h : tensor<2x4x16xf32>
    %wout = xf.param "h.{i}.w_out" : tensor<8x16xf32>
    %bout = xf.param "h.{i}.b_out" : tensor<8xf32>
    %o = xf.linear out_in %g, %wout, %bout : (tensor<2x4x16xf32>, tensor<8x16xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
    %y = xf.add %x, %o : tensor<2x4x8xf32>
    return %y : tensor<2x4x8xf32>
  }
  func.func @forward(%ids: tensor<2x4xi32>, %t: tensor<2x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %wte = xf.param "wte" : tensor<32x8xf32>
    %e = xf.embedding %ids, %wte : (tensor<2x4xi32>, tensor<32x8xf32>) -> tensor<2x4x8xf32>
    %l = xf.layer @block[0](%e) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %n = xf.param "norm" : tensor<8xf32>
    %r = xf.rms_norm %l, %n {eps = 1.0e-5 : f64} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
    %head = xf.param "head" : tensor<32x8xf32>
    %logits = xf.linear out_in %r, %head : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
    %loss = xf.cross_entropy %logits, %t : (tensor<2x4x32xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
