// RUN: llc-dist-opt %s -split-input-file -llcdist-autodiff -llcdist-add-optimizer -llcdist-partition -verify-diagnostics | FileCheck %s

// Data parallelism, dp = 2, global batch 4: every batch-carrying value takes
// its local type (batch 2; the LayerNorm statistics' rows 16 -> 8), the
// layer bodies too; parameters and their gradients stay whole; the optimizer
// step starts with the gradient all-reduce (sum: the loss gradient already
// divides by the global token count) and the loss average.

// CHECK-LABEL: func.func private @block(%{{.+}}: tensor<2x4x8xf32>)
// CHECK: xf.param "h.{i}.w" : tensor<8x8xf32>
// CHECK: xf.layer_norm {{.+}} -> (tensor<2x4x8xf32>, tensor<2x8xf32>)
// CHECK-LABEL: func.func private @block_bwd
// CHECK: xf.linear_grad_weight out_in %{{.+}}, %{{.+}} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<8x8xf32>
// CHECK: xf.layer_norm_grad_params {{.+}} -> (tensor<8xf32>, tensor<8xf32>)
// CHECK-LABEL: func.func @train_step(%{{.+}}: tensor<2x4xi32>, %{{.+}}: tensor<2x4xi32>)
// CHECK: xf.embedding {{.+}} -> tensor<2x4x8xf32>
// The loss gradient keeps the global scale 1 / (4·4·2).
// CHECK: xf.cross_entropy_grad %{{.+}}, %{{.+}} {scale = 3.125000e-02 : f64} : (tensor<2x4x16xf32>, tensor<2x4xi32>)
// CHECK: xf.embedding_grad {{.+}} -> tensor<16x8xf32>
// CHECK-LABEL: func.func @optimizer_step()
// CHECK-NEXT: xf.all_reduce_grads {axis = "dp", origin = "dp_gradients", reason = "every weight gradient contracts over the batch dimension, which is sharded on dp: each rank holds a partial sum (already scaled by the global token count)", reduction = "sum"}
// CHECK-NEXT: xf.all_reduce_loss {axis = "dp", origin = "loss", reason = "each dp rank's loss is the mean over its own tokens"}
// CHECK-NEXT: xf.clip_grad_norm
module attributes {xf.model = {microbatches = 2 : i64}} {
  shard.grid @mesh(shape = 2x1x1)
  func.func private @block(%x: tensor<4x4x8xf32>) -> tensor<4x4x8xf32> attributes {xf.layer_body} {
    %w = xf.param "h.{i}.w" : tensor<8x8xf32>
    %g = xf.param "h.{i}.g" : tensor<8xf32>
    %b = xf.param "h.{i}.b" : tensor<8xf32>
    %n = xf.layer_norm %x, %g, %b {eps = 1.0e-5 : f64} : (tensor<4x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %h = xf.linear out_in %n, %w : (tensor<4x4x8xf32>, tensor<8x8xf32>) -> tensor<4x4x8xf32>
    %y = xf.add %x, %h : tensor<4x4x8xf32>
    return %y : tensor<4x4x8xf32>
  }
  func.func @forward(%ids: tensor<4x4xi32>, %t: tensor<4x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %wte = xf.param "wte" : tensor<16x8xf32>
    %e = xf.embedding %ids, %wte : (tensor<4x4xi32>, tensor<16x8xf32>) -> tensor<4x4x8xf32>
    %l = xf.layer @block[0](%e) : (tensor<4x4x8xf32>) -> tensor<4x4x8xf32>
    %logits = xf.linear out_in %l, %wte : (tensor<4x4x8xf32>, tensor<16x8xf32>) -> tensor<4x4x16xf32>
    %loss = xf.cross_entropy %logits, %t : (tensor<4x4x16xf32>, tensor<4x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// No mesh, or dp = 1: nothing to partition.
// CHECK-LABEL: func.func @train_step(%{{.+}}: tensor<4x4xi32>
// CHECK-NOT: xf.all_reduce_grads
func.func @forward(%ids: tensor<4x4xi32>, %t: tensor<4x4xi32>) -> tensor<f32> attributes {xf.entry} {
  %wte = xf.param "wte" : tensor<16x8xf32>
  %e = xf.embedding %ids, %wte : (tensor<4x4xi32>, tensor<16x8xf32>) -> tensor<4x4x8xf32>
  %logits = xf.linear out_in %e, %wte : (tensor<4x4x8xf32>, tensor<16x8xf32>) -> tensor<4x4x16xf32>
  %loss = xf.cross_entropy %logits, %t : (tensor<4x4x16xf32>, tensor<4x4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// The pp axis is not a sharding: with dp = tp = 1 the partitioner leaves the
// step alone (llcdist-pipeline-split cuts the stages).
// CHECK-LABEL: shard.grid @mesh(shape = 1x1x2)
// CHECK: func.func @train_step(%{{.*}}: tensor<4x4xi32>
// CHECK-NOT: xf.all_reduce
module {
  shard.grid @mesh(shape = 1x1x2)
  func.func @forward(%ids: tensor<4x4xi32>, %t: tensor<4x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %wte = xf.param "wte" : tensor<16x8xf32>
    %e = xf.embedding %ids, %wte : (tensor<4x4xi32>, tensor<16x8xf32>) -> tensor<4x4x8xf32>
    %logits = xf.linear out_in %e, %wte : (tensor<4x4x8xf32>, tensor<16x8xf32>) -> tensor<4x4x16xf32>
    %loss = xf.cross_entropy %logits, %t : (tensor<4x4x16xf32>, tensor<4x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
