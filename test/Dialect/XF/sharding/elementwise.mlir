// RUN: llc-dist-opt %s --pass-pipeline='builtin.module(func.func(sharding-propagation,cse))' | FileCheck %s
// RUN: llc-dist-opt %s --pass-pipeline='builtin.module(func.func(sharding-propagation,shard-partition,cse,canonicalize))' | FileCheck %s --check-prefix=PART

// Upstream sharding-propagation over xf's element-wise ops and a norm: the
// batch split on grid axis 0 (dp) of the input reaches every result; the norm
// weight stays replicated (its only dim is the reduced hidden dim).

shard.grid @mesh(shape = 2x2x1)

// CHECK-LABEL: func.func @chain
// CHECK-DAG:   %[[DP:.+]] = shard.sharding @mesh split_axes = {{\[\[}}0]] : !shard.sharding
// CHECK-DAG:   %[[REP:.+]] = shard.sharding @mesh split_axes = {{\[\[}}]] : !shard.sharding
// CHECK:       %[[G:.+]] = shard.shard %{{.+}} to %[[REP]] annotate_for_users : tensor<16xf32>
// CHECK:       %[[N:.+]] = xf.rms_norm %{{.+}}, %[[G]]
// CHECK-NEXT:  shard.shard %[[N]] to %[[DP]] : tensor<4x8x16xf32>
// CHECK:       %[[Y:.+]] = shard.shard %arg1 to %[[DP]] annotate_for_users : tensor<4x8x16xf32>
// CHECK-NEXT:  %[[A:.+]] = xf.add %{{.+}}, %[[Y]]
// CHECK-NEXT:  shard.shard %[[A]] to %[[DP]] : tensor<4x8x16xf32>
// CHECK:       %[[B:.+]] = xf.gelu_tanh
// CHECK-NEXT:  shard.shard %[[B]] to %[[DP]] : tensor<4x8x16xf32>
// CHECK:       %[[C:.+]] = xf.swiglu
// CHECK-NEXT:  shard.shard %[[C]] to %[[DP]] : tensor<4x8x16xf32>
// CHECK:       %[[R:.+]] = xf.rope
// CHECK-NEXT:  shard.shard %[[R]] to %[[DP]] : tensor<4x8x16xf32>

// After shard-partition every op runs on the local batch 4/2 = 2, with no
// collective at all.
// PART-LABEL: func.func @chain(%{{.+}}: tensor<2x8x16xf32>, %{{.+}}: tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
// PART:       xf.rms_norm {{.+}} -> tensor<2x8x16xf32>
// PART-NEXT:  xf.add {{.+}} : tensor<2x8x16xf32>
// PART-NEXT:  xf.gelu_tanh {{.+}} : tensor<2x8x16xf32>
// PART-NEXT:  xf.swiglu {{.+}} : tensor<2x8x16xf32>
// PART-NEXT:  xf.rope {{.+}} : tensor<2x8x16xf32>
// PART-NOT:   shard.
// PART:       return
func.func @chain(%x: tensor<4x8x16xf32>, %y: tensor<4x8x16xf32>) -> tensor<4x8x16xf32> {
  %s = shard.sharding @mesh split_axes = [[0]] : !shard.sharding
  %xs = shard.shard %x to %s : tensor<4x8x16xf32>
  %g = xf.param "norm.weight" : tensor<16xf32>
  %n = xf.rms_norm %xs, %g {eps = 1.0e-5 : f64} : (tensor<4x8x16xf32>, tensor<16xf32>) -> tensor<4x8x16xf32>
  %a = xf.add %n, %y : tensor<4x8x16xf32>
  %b = xf.gelu_tanh %a : tensor<4x8x16xf32>
  %c = xf.swiglu %b, %a : tensor<4x8x16xf32>
  %d = xf.rope %c {head_dim = 8 : i64, theta = 10000.0 : f64} : tensor<4x8x16xf32>
  %ds = shard.shard %d to %s annotate_for_users : tensor<4x8x16xf32>
  return %ds : tensor<4x8x16xf32>
}

// xf.rope rotates by the absolute position, so its sequence dim cannot be
// split: with batch on axis 0 and sequence on axis 1, gelu keeps both but
// rope asks for the sequence replicated (partition all-gathers it on axis 1).
// CHECK-LABEL: func.func @rope_pins_sequence
// CHECK:       %[[BS:.+]] = shard.sharding @mesh split_axes = {{\[\[}}0], [1]] : !shard.sharding
// CHECK:       %[[G:.+]] = xf.gelu_tanh
// CHECK-NEXT:  %[[GS:.+]] = shard.shard %[[G]] to %[[BS]] : tensor<4x8x16xf32>
// CHECK-NEXT:  %[[B:.+]] = shard.sharding @mesh split_axes = {{\[\[}}0]] : !shard.sharding
// CHECK-NEXT:  %[[IN:.+]] = shard.shard %[[GS]] to %[[B]] annotate_for_users : tensor<4x8x16xf32>
// CHECK-NEXT:  %[[R:.+]] = xf.rope %[[IN]]
// CHECK-NEXT:  shard.shard %[[R]] to %[[B]] : tensor<4x8x16xf32>

// PART-LABEL: func.func @rope_pins_sequence(%{{.+}}: tensor<2x4x16xf32>) -> tensor<2x8x16xf32>
// PART:       %[[G:.+]] = xf.gelu_tanh {{.+}} : tensor<2x4x16xf32>
// PART-NEXT:  %[[AG:.+]] = shard.all_gather %[[G]] on @mesh grid_axes = [1] gather_axis = 1 : tensor<2x4x16xf32> -> tensor<2x8x16xf32>
// PART-NEXT:  xf.rope %[[AG]] {{.+}} : tensor<2x8x16xf32>
func.func @rope_pins_sequence(%x: tensor<4x8x16xf32>) -> tensor<4x8x16xf32> {
  %s = shard.sharding @mesh split_axes = [[0], [1]] : !shard.sharding
  %xs = shard.shard %x to %s : tensor<4x8x16xf32>
  %a = xf.gelu_tanh %xs : tensor<4x8x16xf32>
  %d = xf.rope %a {head_dim = 8 : i64, theta = 10000.0 : f64} : tensor<4x8x16xf32>
  %r = shard.sharding @mesh split_axes = [[0]] : !shard.sharding
  %ds = shard.shard %d to %r annotate_for_users : tensor<4x8x16xf32>
  return %ds : tensor<4x8x16xf32>
}
