// RUN: llc-dist-opt %s -split-input-file -llcdist-attach-mesh="dp=2 tp=2" -verify-diagnostics | FileCheck %s

// A mesh that divides the model: the grid is declared with named axes.
// CHECK-LABEL: module
// CHECK: shard.grid @mesh(shape = 2x2x1) {xf.mesh_axes = ["dp", "tp", "pp"], xf.rank_order = ["tp", "dp", "pp"]}
// CHECK: func.func @forward
func.func private @body(%x: tensor<4x8x64xf32>) -> tensor<4x8x64xf32> attributes {xf.layer_body} {
  %a = xf.attention %x, %x, %x {num_heads = 4 : i64, num_kv_heads = 4 : i64, head_dim = 16 : i64} : (tensor<4x8x64xf32>, tensor<4x8x64xf32>, tensor<4x8x64xf32>) -> tensor<4x8x64xf32>
  return %a : tensor<4x8x64xf32>
}
func.func @forward(%ids: tensor<4x8xi32>) -> tensor<4x8x64xf32> attributes {xf.entry} {
  %wte = xf.param "wte" : tensor<256x64xf32>
  %e = xf.embedding %ids, %wte : (tensor<4x8xi32>, tensor<256x64xf32>) -> tensor<4x8x64xf32>
  %l = xf.layer @body[0](%e) : (tensor<4x8x64xf32>) -> tensor<4x8x64xf32>
  return %l : tensor<4x8x64xf32>
}

// -----

// GQA with fewer kv heads than tp ranks: kv heads replicate (1 divides 2).
// CHECK-LABEL: module
// CHECK: shard.grid @mesh(shape = 2x2x1)
func.func @forward(%q: tensor<2x8x64xf32>, %kv: tensor<2x8x16xf32>) -> tensor<2x8x64xf32> attributes {xf.entry} {
  %a = xf.attention %q, %kv, %kv {num_heads = 4 : i64, num_kv_heads = 1 : i64, head_dim = 16 : i64} : (tensor<2x8x64xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x64xf32>
  return %a : tensor<2x8x64xf32>
}

// -----

func.func @forward(%q: tensor<2x8x48xf32>) -> tensor<2x8x48xf32> attributes {xf.entry} {
  // expected-error @+1 {{tp=2 does not divide num_heads=3; choose tp among the divisors of 3}}
  %a = xf.attention %q, %q, %q {num_heads = 3 : i64, num_kv_heads = 3 : i64, head_dim = 16 : i64} : (tensor<2x8x48xf32>, tensor<2x8x48xf32>, tensor<2x8x48xf32>) -> tensor<2x8x48xf32>
  return %a : tensor<2x8x48xf32>
}

// -----

// A vocabulary that tp does not divide is accepted: llcdist-pad-vocab pads it
// (llcdist-pad-vocab.mlir); the mesh does not constrain it.
// CHECK-LABEL: module
// CHECK: shard.grid @mesh(shape = 2x2x1)
// CHECK: xf.param "wte" : tensor<255x64xf32>
func.func @forward(%ids: tensor<2x8xi32>) -> tensor<2x8x64xf32> attributes {xf.entry} {
  %wte = xf.param "wte" : tensor<255x64xf32>
  %e = xf.embedding %ids, %wte : (tensor<2x8xi32>, tensor<255x64xf32>) -> tensor<2x8x64xf32>
  return %e : tensor<2x8x64xf32>
}

// -----

// expected-error @+1 {{dp=2 does not divide the batch of 3 sequences}}
func.func @forward(%ids: tensor<3x8xi32>) -> tensor<3x8xi32> attributes {xf.entry} {
  return %ids : tensor<3x8xi32>
}

// -----

// expected-error @+1 {{no function is marked 'xf.entry' (the forward function of the model)}}
module {
  func.func @f() {
    return
  }
}
