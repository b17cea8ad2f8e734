// RUN: llc-dist-opt %s --pass-pipeline='builtin.module(func.func(sharding-propagation,cse))' | FileCheck %s
// RUN: llc-dist-opt %s --pass-pipeline='builtin.module(func.func(sharding-propagation,shard-partition,cse,canonicalize))' | FileCheck %s --check-prefix=PART

// Data parallelism's partial sums: linear_grad_weight / linear_grad_bias sum
// over the rows, which are split on dp (axis 0). MLIR 22's sharding has no
// partial state: propagation annotates the weight gradient *replicated*
// ([[]]), and shard-partition all-reduces it (sum over dp) right after the op
// (llcdist-partition instead keeps it partial and reduces once per step).

shard.grid @mesh(shape = 2x2x1)

// CHECK-LABEL: func.func @grad_weight
// CHECK-DAG:   %[[DP:.+]] = shard.sharding @mesh split_axes = {{\[\[}}0]] : !shard.sharding
// CHECK:       %[[DW:.+]] = xf.linear_grad_weight out_in
// CHECK-NEXT:  %[[REP:.+]] = shard.sharding @mesh split_axes = {{\[\[}}]] : !shard.sharding
// CHECK-NEXT:  shard.shard %[[DW]] to %[[REP]] : tensor<32x16xf32>
// CHECK-NEXT:  %[[DB:.+]] = xf.linear_grad_bias
// CHECK-NEXT:  shard.shard %[[DB]] to %[[REP]] : tensor<32xf32>

// PART-LABEL: func.func @grad_weight(
// PART-SAME:  %[[DY:.+]]: tensor<2x8x32xf32>, %[[X:.+]]: tensor<2x8x16xf32>) -> (tensor<32x16xf32>, tensor<32xf32>)
// PART-NEXT:  %[[DW:.+]] = xf.linear_grad_weight out_in %[[DY]], %[[X]] : (tensor<2x8x32xf32>, tensor<2x8x16xf32>) -> tensor<32x16xf32>
// PART-NEXT:  %[[RW:.+]] = shard.all_reduce %[[DW]] on @mesh grid_axes = [0] : tensor<32x16xf32> -> tensor<32x16xf32>
// PART-NEXT:  %[[DB:.+]] = xf.linear_grad_bias %[[DY]] : (tensor<2x8x32xf32>) -> tensor<32xf32>
// PART-NEXT:  %[[RB:.+]] = shard.all_reduce %[[DB]] on @mesh grid_axes = [0] : tensor<32xf32> -> tensor<32xf32>
// PART-NEXT:  return %[[RW]], %[[RB]]
func.func @grad_weight(%dy: tensor<4x8x32xf32>, %x: tensor<4x8x16xf32>) -> (tensor<32x16xf32>, tensor<32xf32>) {
  %s = shard.sharding @mesh split_axes = [[0]] : !shard.sharding
  %dys = shard.shard %dy to %s : tensor<4x8x32xf32>
  %xs = shard.shard %x to %s : tensor<4x8x16xf32>
  %dw = xf.linear_grad_weight out_in %dys, %xs : (tensor<4x8x32xf32>, tensor<4x8x16xf32>) -> tensor<32x16xf32>
  %db = xf.linear_grad_bias %dys : (tensor<4x8x32xf32>) -> tensor<32xf32>
  %r = shard.sharding @mesh split_axes = [[]] : !shard.sharding
  %dwr = shard.shard %dw to %r annotate_for_users : tensor<32x16xf32>
  %dbr = shard.shard %db to %r annotate_for_users : tensor<32xf32>
  return %dwr, %dbr : tensor<32x16xf32>, tensor<32xf32>
}

// The loss is a mean over the tokens: with the batch on dp the local loss is
// all-reduced with `average`; the LayerNorm statistics (rows = B*S) follow
// the batch split (32 rows -> 16 per rank).
// CHECK-LABEL: func.func @loss
// PART-LABEL: func.func @loss(
// PART-SAME:  %{{.+}}: tensor<2x8x16xf32>, %{{.+}}: tensor<2x8xi32>) -> (tensor<f32>, tensor<2x16xf32>)
// PART:       xf.layer_norm {{.+}} -> (tensor<2x8x16xf32>, tensor<2x16xf32>)
// PART:       %[[L:.+]] = xf.cross_entropy {{.+}} : (tensor<2x8x16xf32>, tensor<2x8xi32>) -> tensor<f32>
// PART-NEXT:  %[[R:.+]] = shard.all_reduce %[[L]] on @mesh grid_axes = [0] reduction = average : tensor<f32> -> tensor<f32>
// PART-NEXT:  return %[[R]]
func.func @loss(%x: tensor<4x8x16xf32>, %ids: tensor<4x8xi32>) -> (tensor<f32>, tensor<2x32xf32>) {
  %s = shard.sharding @mesh split_axes = [[0]] : !shard.sharding
  %xs = shard.shard %x to %s : tensor<4x8x16xf32>
  %t = shard.shard %ids to %s : tensor<4x8xi32>
  %g = xf.param "ln.weight" : tensor<16xf32>
  %b = xf.param "ln.bias" : tensor<16xf32>
  %n, %st = xf.layer_norm %xs, %g, %b {eps = 1.0e-5 : f64} : (tensor<4x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> (tensor<4x8x16xf32>, tensor<2x32xf32>)
  %loss = xf.cross_entropy %n, %t : (tensor<4x8x16xf32>, tensor<4x8xi32>) -> tensor<f32>
  %rs = shard.sharding @mesh split_axes = [[], [0]] : !shard.sharding
  %st1 = shard.shard %st to %rs annotate_for_users : tensor<2x32xf32>
  return %loss, %st1 : tensor<f32>, tensor<2x32xf32>
}
