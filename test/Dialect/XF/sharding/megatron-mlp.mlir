// RUN: llc-dist-opt %s --pass-pipeline='builtin.module(func.func(sharding-propagation,cse))' | FileCheck %s
// RUN: llc-dist-opt %s --pass-pipeline='builtin.module(func.func(sharding-propagation,shard-partition,cse,canonicalize))' | FileCheck %s --check-prefix=PART

// Megatron's MLP on the (dp, tp, pp) = 2x2x1 grid: fc split on its
// out-features N over tp (axis 1, column parallel), proj split on its
// in-features K over tp (row parallel). Upstream propagation derives the
// hidden activation split on its last dim and the output replicated over tp;
// shard-partition turns the pair into two local xf.linear and exactly one
// shard.all_reduce (sum) over tp: design.md §2's demonstration, on xf ops.

shard.grid @mesh(shape = 2x2x1)

// CHECK-LABEL: func.func @mlp
// CHECK-DAG:   %[[COL:.+]] = shard.sharding @mesh split_axes = {{\[\[}}1]] : !shard.sharding
// CHECK-DAG:   %[[REP:.+]] = shard.sharding @mesh split_axes = {{\[\[}}]] : !shard.sharding
// CHECK:       %[[X:.+]] = shard.shard %arg0 to %[[REP]] annotate_for_users : tensor<4x8x16xf32>
// CHECK:       %[[H:.+]] = xf.linear out_in %[[X]], %{{.+}} : (tensor<4x8x16xf32>, tensor<64x16xf32>) -> tensor<4x8x64xf32>
// CHECK-NEXT:  %[[HID:.+]] = shard.sharding @mesh split_axes = {{\[\[}}], [], [1]] : !shard.sharding
// CHECK-NEXT:  shard.shard %[[H]] to %[[HID]] : tensor<4x8x64xf32>
// CHECK:       %[[A:.+]] = xf.gelu_tanh
// CHECK-NEXT:  shard.shard %[[A]] to %[[HID]] : tensor<4x8x64xf32>
// CHECK:       %[[ROW:.+]] = shard.sharding @mesh split_axes = {{\[\[}}], [1]] : !shard.sharding
// CHECK:       %[[Y:.+]] = xf.linear out_in
// CHECK-NEXT:  shard.shard %[[Y]] to %[[REP]] : tensor<4x8x16xf32>

// PART-LABEL: func.func @mlp(
// PART-SAME:  %[[X:.+]]: tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
// PART-NEXT:  %[[W1:.+]] = xf.param "fc.weight" : tensor<32x16xf32>
// PART-NEXT:  %[[H:.+]] = xf.linear out_in %[[X]], %[[W1]] : (tensor<4x8x16xf32>, tensor<32x16xf32>) -> tensor<4x8x32xf32>
// PART-NEXT:  %[[A:.+]] = xf.gelu_tanh %[[H]] : tensor<4x8x32xf32>
// PART-NEXT:  %[[W2:.+]] = xf.param "proj.weight" : tensor<16x32xf32>
// PART-NEXT:  %[[Y:.+]] = xf.linear out_in %[[A]], %[[W2]] : (tensor<4x8x32xf32>, tensor<16x32xf32>) -> tensor<4x8x16xf32>
// PART-NEXT:  %[[R:.+]] = shard.all_reduce %[[Y]] on @mesh grid_axes = [1] : tensor<4x8x16xf32> -> tensor<4x8x16xf32>
// PART-NEXT:  return %[[R]] : tensor<4x8x16xf32>
func.func @mlp(%x: tensor<4x8x16xf32>) -> tensor<4x8x16xf32> {
  %w1 = xf.param "fc.weight" : tensor<64x16xf32>
  %s1 = shard.sharding @mesh split_axes = [[1]] : !shard.sharding
  %w1s = shard.shard %w1 to %s1 : tensor<64x16xf32>
  %h = xf.linear out_in %x, %w1s : (tensor<4x8x16xf32>, tensor<64x16xf32>) -> tensor<4x8x64xf32>
  %a = xf.gelu_tanh %h : tensor<4x8x64xf32>
  %w2 = xf.param "proj.weight" : tensor<16x64xf32>
  %s2 = shard.sharding @mesh split_axes = [[], [1]] : !shard.sharding
  %w2s = shard.shard %w2 to %s2 : tensor<16x64xf32>
  %y = xf.linear out_in %a, %w2s : (tensor<4x8x64xf32>, tensor<16x64xf32>) -> tensor<4x8x16xf32>
  %r = shard.sharding @mesh split_axes = [[]] : !shard.sharding
  %ys = shard.shard %y to %r annotate_for_users : tensor<4x8x16xf32>
  return %ys : tensor<4x8x16xf32>
}

// The same pair with GPT-2's Conv1D layout (in_out: [K, N]) and the batch
// also split over dp (axis 0): 2-D sharding, still one all_reduce, on tp only.
// CHECK-LABEL: func.func @mlp_in_out_dp_tp
// CHECK:       %[[DP:.+]] = shard.sharding @mesh split_axes = {{\[\[}}0]] : !shard.sharding
// CHECK:       xf.linear in_out
// CHECK-NEXT:  %[[HID:.+]] = shard.sharding @mesh split_axes = {{\[\[}}0], [], [1]] : !shard.sharding
// CHECK-NEXT:  shard.shard %{{.+}} to %[[HID]] : tensor<4x8x64xf32>
// CHECK:       %[[Y:.+]] = xf.linear in_out
// CHECK-NEXT:  shard.shard %[[Y]] to %[[DP]] : tensor<4x8x16xf32>

// PART-LABEL: func.func @mlp_in_out_dp_tp(
// PART-SAME:  %{{.+}}: tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
// PART:       xf.param "fc.weight" : tensor<16x32xf32>
// PART-NEXT:  xf.linear in_out {{.+}} : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
// PART-NEXT:  xf.gelu_tanh {{.+}} : tensor<2x8x32xf32>
// PART-NEXT:  xf.param "proj.weight" : tensor<32x16xf32>
// PART-NEXT:  %[[Y:.+]] = xf.linear in_out {{.+}} : (tensor<2x8x32xf32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
// PART-NEXT:  %[[R:.+]] = shard.all_reduce %[[Y]] on @mesh grid_axes = [1] : tensor<2x8x16xf32> -> tensor<2x8x16xf32>
// PART-NEXT:  return %[[R]] : tensor<2x8x16xf32>
func.func @mlp_in_out_dp_tp(%x: tensor<4x8x16xf32>) -> tensor<4x8x16xf32> {
  %dp = shard.sharding @mesh split_axes = [[0]] : !shard.sharding
  %xs = shard.shard %x to %dp : tensor<4x8x16xf32>
  %w1 = xf.param "fc.weight" : tensor<16x64xf32>
  %s1 = shard.sharding @mesh split_axes = [[], [1]] : !shard.sharding
  %w1s = shard.shard %w1 to %s1 : tensor<16x64xf32>
  %h = xf.linear in_out %xs, %w1s : (tensor<4x8x16xf32>, tensor<16x64xf32>) -> tensor<4x8x64xf32>
  %a = xf.gelu_tanh %h : tensor<4x8x64xf32>
  %w2 = xf.param "proj.weight" : tensor<64x16xf32>
  %s2 = shard.sharding @mesh split_axes = [[1]] : !shard.sharding
  %w2s = shard.shard %w2 to %s2 : tensor<64x16xf32>
  %y = xf.linear in_out %a, %w2s : (tensor<4x8x64xf32>, tensor<64x16xf32>) -> tensor<4x8x16xf32>
  %ys = shard.shard %y to %dp annotate_for_users : tensor<4x8x16xf32>
  return %ys : tensor<4x8x16xf32>
}
