// RUN: llc-dist-opt %s -split-input-file -llcdist-model-stats -verify-diagnostics | FileCheck %s

// Parameters: a tied embedding counts once; {i} parameters once per layer.
//   wte 16x8 = 128; per layer w 8x8 + b 8 = 72, 3 layers = 216; total 344.
// FLOPs/token: per layer 2*8*8 = 128 linear + 4*S*heads*head_dim = 4*4*2*4 = 128
//   attention; LM head 2*8*16 = 256. Forward = 3*256 + 256 = 1024; training 3072.
// CHECK-LABEL: module attributes
// CHECK-SAME: xf.stats = {attention_flops_per_token = 384 : i64, forward_flops_per_token = 1024 : i64, layers = 3 : i64, linear_flops_per_token = 640 : i64, parameters = 344 : i64, training_flops_per_token = 3072 : i64}
func.func private @body(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> attributes {xf.layer_body} {
  %w = xf.param "h.{i}.w" : tensor<8x8xf32>
  %b = xf.param "h.{i}.b" : tensor<8xf32>
  %y = xf.linear in_out %x, %w, %b : (tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %a = xf.attention %y, %y, %y {num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %a : tensor<2x4x8xf32>
}
func.func @forward(%ids: tensor<2x4xi32>, %t: tensor<2x4xi32>) -> tensor<f32> attributes {xf.entry} {
  %wte = xf.param "wte" : tensor<16x8xf32>
  %e = xf.embedding %ids, %wte : (tensor<2x4xi32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
  %l0 = xf.layer @body[0](%e) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %l1 = xf.layer @body[1](%l0) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %l2 = xf.layer @body[2](%l1) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %wte2 = xf.param "wte" : tensor<16x8xf32>
  %logits = xf.linear out_in %l2, %wte2 : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %loss = xf.cross_entropy %logits, %t : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

func.func @forward(%ids: tensor<2x4xi32>) -> tensor<2x4x8xf32> attributes {xf.entry} {
  %w = xf.param "wte" : tensor<16x8xf32>
  // expected-error @+1 {{parameter 'wte' is used with two shapes: 'tensor<16x8xf32>' and 'tensor<8x16xf32>'}}
  %w2 = xf.param "wte" : tensor<8x16xf32>
  %e = xf.embedding %ids, %w : (tensor<2x4xi32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
  return %e : tensor<2x4x8xf32>
}
