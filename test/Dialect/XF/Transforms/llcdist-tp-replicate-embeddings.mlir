// RUN: llc-dist-opt %s -llcdist-megatron-tp -llcdist-tp-replicate-embeddings | FileCheck %s
// RUN: llc-dist-opt %s -llcdist-autodiff -llcdist-add-optimizer -llcdist-megatron-tp -llcdist-tp-replicate-embeddings -llcdist-partition | FileCheck %s --check-prefix=PART

// The strategy variant: the tied table (embedding and LM head) keeps its
// whole vocabulary on every tp rank; the layer keeps Megatron's split.
// CHECK: xf.param "h.{i}.w_in" {xf.tp_split = {blocks = 1 : i64, dim = 0 : i64}}
// CHECK: xf.param "h.{i}.w_out" {xf.tp_split = {blocks = 1 : i64, dim = 1 : i64}}
// CHECK: xf.param "wte" : tensor<32x8xf32>
// CHECK-NOT: xf.tp_split

// Partitioned: the lookup and the loss are the plain ops on whole tensors (no
// vocab_parallel_axis, no all-reduce of the lookup); the layer's row-parallel
// output is still all-reduced.
// PART-LABEL: func.func private @block(
// PART: xf.all_reduce
// PART-LABEL: func.func @train_step
// PART: xf.param "wte" : tensor<32x8xf32>
// PART-NEXT: xf.embedding %{{.+}}, %{{.+}} : (tensor<2x4xi32>, tensor<32x8xf32>) -> tensor<2x4x8xf32>
// PART-NEXT: xf.layer @block[0]
// PART: xf.cross_entropy %{{.+}}, %{{.+}} : (tensor<2x4x32xf32>, tensor<2x4xi32>) -> tensor<f32>
// PART-NOT: vocab_parallel_axis
module {
  shard.grid @mesh(shape = 1x2x1) {xf.mesh_axes = ["dp", "tp", "pp"], xf.rank_order = ["tp", "dp", "pp"]}
  func.func private @block(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> attributes {xf.layer_body} {
    %win = xf.param "h.{i}.w_in" : tensor<16x8xf32>
    %h = xf.linear out_in %x, %win : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %g = xf.gelu_tanh %h : tensor<2x4x16xf32>
    %wout = xf.param "h.{i}.w_out" : tensor<8x16xf32>
    %o = xf.linear out_in %g, %wout : (tensor<2x4x16xf32>, tensor<8x16xf32>) -> tensor<2x4x8xf32>
    %y = xf.add %x, %o : tensor<2x4x8xf32>
    return %y : tensor<2x4x8xf32>
  }
  func.func @forward(%ids: tensor<2x4xi32>, %t: tensor<2x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %wte = xf.param "wte" : tensor<32x8xf32>
    %e = xf.embedding %ids, %wte : (tensor<2x4xi32>, tensor<32x8xf32>) -> tensor<2x4x8xf32>
    %l = xf.layer @block[0](%e) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %logits = xf.linear out_in %l, %wte : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
    %loss = xf.cross_entropy %logits, %t : (tensor<2x4x32xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
