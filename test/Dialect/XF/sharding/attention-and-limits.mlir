// RUN: llc-dist-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(sharding-propagation,shard-partition,cse,canonicalize))' -verify-diagnostics | FileCheck %s

// Attention's heads: a split of the feature dim over tp is kept only when tp
// divides num_kv_heads (whole GQA groups per rank); partition then rewrites
// the head counts. Otherwise (MQA here) the op asks for the heads replicated
// and partition all-gathers q.

shard.grid @mesh(shape = 2x2x1)

// CHECK-LABEL: func.func @gqa_heads_on_tp(
// CHECK-SAME:  %[[Q:.+]]: tensor<2x8x8xf32>, %[[K:.+]]: tensor<2x8x4xf32>) -> tensor<2x8x8xf32>
// CHECK-NEXT:  xf.attention %[[Q]], %[[K]], %[[K]] {head_dim = 4 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64} : (tensor<2x8x8xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x8xf32>
// CHECK-NOT:   shard.
func.func @gqa_heads_on_tp(%q: tensor<4x8x16xf32>, %k: tensor<4x8x8xf32>) -> tensor<4x8x16xf32> {
  %s = shard.sharding @mesh split_axes = [[0], [], [1]] : !shard.sharding
  %qs = shard.shard %q to %s : tensor<4x8x16xf32>
  %ks = shard.shard %k to %s : tensor<4x8x8xf32>
  %o = xf.attention %qs, %ks, %ks {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64} : (tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>) -> tensor<4x8x16xf32>
  %o1 = shard.shard %o to %s annotate_for_users : tensor<4x8x16xf32>
  return %o1 : tensor<4x8x16xf32>
}

// CHECK-LABEL: func.func @mqa_replicates_heads(
// CHECK-SAME:  %[[Q:.+]]: tensor<2x8x8xf32>, %[[K:.+]]: tensor<2x8x4xf32>) -> tensor<2x8x16xf32>
// CHECK-NEXT:  %[[AG:.+]] = shard.all_gather %[[Q]] on @mesh grid_axes = [1] gather_axis = 2 : tensor<2x8x8xf32> -> tensor<2x8x16xf32>
// CHECK-NEXT:  xf.attention %[[AG]], %[[K]], %[[K]] {head_dim = 4 : i64, num_heads = 4 : i64, num_kv_heads = 1 : i64} : (tensor<2x8x16xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x16xf32>
func.func @mqa_replicates_heads(%q: tensor<4x8x16xf32>, %k: tensor<4x8x4xf32>) -> tensor<4x8x16xf32> {
  %s = shard.sharding @mesh split_axes = [[0], [], [1]] : !shard.sharding
  %qs = shard.shard %q to %s : tensor<4x8x16xf32>
  %o = xf.attention %qs, %k, %k {num_heads = 4 : i64, num_kv_heads = 1 : i64, head_dim = 4 : i64} : (tensor<4x8x16xf32>, tensor<4x8x4xf32>, tensor<4x8x4xf32>) -> tensor<4x8x16xf32>
  %r = shard.sharding @mesh split_axes = [[0]] : !shard.sharding
  %o1 = shard.shard %o to %r annotate_for_users : tensor<4x8x16xf32>
  return %o1 : tensor<4x8x16xf32>
}

// -----

// A row-parallel xf.linear with a bias cannot be partitioned faithfully by
// upstream's all_reduce-after-the-op scheme (the bias would be summed tp
// times): a diagnostic, not a wrong program.
shard.grid @mesh(shape = 2x2x1)
func.func @row_parallel_bias(%x: tensor<4x64xf32>) -> tensor<4x16xf32> {
  %w = xf.param "w" : tensor<16x64xf32>
  %b = xf.param "b" : tensor<16xf32>
  %s = shard.sharding @mesh split_axes = [[], [1]] : !shard.sharding
  %ws = shard.shard %w to %s : tensor<16x64xf32>
  // expected-error @+1 {{cannot partition: a row-parallel xf.linear (in-features sharded) with a bias}}
  %y = xf.linear out_in %x, %ws, %b : (tensor<4x64xf32>, tensor<16x64xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %r = shard.sharding @mesh split_axes = [[]] : !shard.sharding
  %y1 = shard.shard %y to %r annotate_for_users : tensor<4x16xf32>
  return %y1 : tensor<4x16xf32>
}

// -----

// ALiBi's slopes belong to the model's heads: upstream's partition does not
// know which axis split them, so it refuses rather than give every rank the
// first heads' slopes (llcdist-partition records the axis).
shard.grid @mesh(shape = 2x2x1)
func.func @alibi_heads_split(%q: tensor<4x8x16xf32>) -> tensor<4x8x16xf32> {
  %s = shard.sharding @mesh split_axes = [[0], [], [1]] : !shard.sharding
  %qs = shard.shard %q to %s : tensor<4x8x16xf32>
  // expected-error @+1 {{cannot partition: the heads of an attention with alibi_heads split over grid axes}}
  %o = xf.attention %qs, %qs, %qs {num_heads = 4 : i64, num_kv_heads = 4 : i64, head_dim = 4 : i64, alibi_heads = 4 : i64} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  %o1 = shard.shard %o to %s annotate_for_users : tensor<4x8x16xf32>
  return %o1 : tensor<4x8x16xf32>
}
