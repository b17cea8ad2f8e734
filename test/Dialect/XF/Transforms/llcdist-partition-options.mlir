// llcdist-partition's one option, sequence-parallel: the default is off, and
// a value that is not a boolean is refused (llcdist-partition-sp.mlir covers
// sequence-parallel=true and its errors).
//
// RUN: llc-dist-opt %s -split-input-file -llcdist-autodiff -llcdist-add-optimizer -llcdist-partition="sequence-parallel=false" | FileCheck %s
// RUN: not llc-dist-opt %s -split-input-file -llcdist-partition="sequence-parallel=maybe" 2>&1 | FileCheck %s --check-prefix=BOOL
// BOOL: for the --sequence-parallel option: 'maybe' is invalid value for boolean argument! Try 0 or 1

// dp = 2 (no tp): the batch split, no sequence split.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: tensor<1x4xi32>
// CHECK-NOT: xf.reduce_scatter
// CHECK-NOT: xf.all_gather
// CHECK-LABEL: func.func @optimizer_step
// CHECK: xf.all_reduce_grads {axis = "dp"
module attributes {xf.model = {microbatches = 1 : i64}} {
  shard.grid @mesh(shape = 2x1x1) {xf.mesh_axes = ["dp", "tp", "pp"], xf.rank_order = ["tp", "dp", "pp"]}
  func.func @forward(%ids: tensor<2x4xi32>, %t: tensor<2x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %wte = xf.param "wte" : tensor<16x8xf32>
    %e = xf.embedding %ids, %wte : (tensor<2x4xi32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
    %logits = xf.linear out_in %e, %wte : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %loss = xf.cross_entropy %logits, %t : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
