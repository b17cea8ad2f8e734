// RUN: llc-dist-opt %s -split-input-file -llcdist-autodiff -llcdist-add-optimizer -llcdist-partition -verify-diagnostics | FileCheck %s

// Tensor parallelism's per-op rules (TensorParallelOpInterface, and the
// Elementwise trait for ops without a model): tp = 2, a SwiGLU MLP with its
// gate and up projections column-parallel and its down projection
// row-parallel. xf.swiglu and xf.swiglu_grad have no rule of their own: as
// Elementwise ops their operands are split alike and their results split as
// they are (16 intermediate features, 8 per rank). xf.linear's rule makes the
// down projection's output a partial sum, all-reduced before the residual add
// (xf.add's rule); in the backward, the gate and up input gradients are
// partial sums: the residual's replicated gradient, added to the first of
// them, waits until they are summed and all-reduced once (deferWholeOperand).

// CHECK-LABEL: func.func @train_step
// CHECK: xf.param "gate" {xf.sharding = {axis = "tp", blocks = 1 : i64, dim = 0 : i64, global_shape = array<i64: 16, 8>}} : tensor<8x8xf32>
// CHECK: %[[S:.+]] = xf.swiglu %{{.+}}, %{{.+}} : tensor<2x4x8xf32>
// CHECK: %[[D:.+]] = xf.linear out_in %[[S]], %{{.+}} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[R:.+]] = xf.all_reduce %[[D]] {axis = "tp", origin = "row_parallel"
// CHECK-NEXT: xf.add %{{.+}}, %[[R]] : tensor<2x4x8xf32>
// CHECK: xf.swiglu_grad {{.+}} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>)
// CHECK: %[[DU:.+]] = xf.linear_grad_input out_in %dup
// CHECK: %[[DG:.+]] = xf.linear_grad_input out_in %dgate
// CHECK-NEXT: %[[SUM:.+]] = xf.add %[[DU]], %[[DG]] : tensor<2x4x8xf32>
// CHECK-NEXT: %[[RU:.+]] = xf.all_reduce %[[SUM]] {axis = "tp", origin = "column_parallel"
// CHECK-NEXT: xf.add %{{.+}}, %[[RU]] : tensor<2x4x8xf32>
// CHECK-NOT: xf.all_reduce {{.*}}origin = "column_parallel"
module attributes {xf.model = {microbatches = 1 : i64}} {
  shard.grid @mesh(shape = 1x2x1)
  func.func @forward(%ids: tensor<2x4xi32>, %t: tensor<2x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %wte = xf.param "wte" : tensor<16x8xf32>
    %e = xf.embedding %ids, %wte : (tensor<2x4xi32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
    %wg = xf.param "gate" {xf.tp_split = {dim = 0 : i64, blocks = 1 : i64}} : tensor<16x8xf32>
    %wu = xf.param "up" {xf.tp_split = {dim = 0 : i64, blocks = 1 : i64}} : tensor<16x8xf32>
    %wd = xf.param "down" {xf.tp_split = {dim = 1 : i64, blocks = 1 : i64}} : tensor<8x16xf32>
    %g = xf.linear out_in %e, %wg : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %u = xf.linear out_in %e, %wu : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %s = xf.swiglu %g, %u : tensor<2x4x16xf32>
    %d = xf.linear out_in %s, %wd : (tensor<2x4x16xf32>, tensor<8x16xf32>) -> tensor<2x4x8xf32>
    %y = xf.add %e, %d : tensor<2x4x8xf32>
    %logits = xf.linear out_in %y, %wte : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %loss = xf.cross_entropy %logits, %t : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// An Elementwise op whose operands are split differently (the gate split
// over tp, the up projection replicated) has no rule: refused, not guessed.
module attributes {xf.model = {microbatches = 1 : i64}} {
  shard.grid @mesh(shape = 1x2x1)
  func.func @forward(%ids: tensor<2x4xi32>, %t: tensor<2x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %wte = xf.param "wte" : tensor<16x8xf32>
    %e = xf.embedding %ids, %wte : (tensor<2x4xi32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
    %wg = xf.param "gate" {xf.tp_split = {dim = 0 : i64, blocks = 1 : i64}} : tensor<16x8xf32>
    %wu = xf.param "up" : tensor<16x8xf32>
    %g = xf.linear out_in %e, %wg : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %u = xf.linear out_in %e, %wu : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    // expected-error @+1 {{llcdist-partition: no tensor-parallel rule for these operand shardings}}
    %s = xf.swiglu %g, %u : tensor<2x4x16xf32>
    %wd = xf.param "down" : tensor<16x16xf32>
    %logits = xf.linear out_in %s, %wd : (tensor<2x4x16xf32>, tensor<16x16xf32>) -> tensor<2x4x16xf32>
    %loss = xf.cross_entropy %logits, %t : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// A grouped split (GPT-NeoX's fused q, k, v: 3 heads of q, k and v side by
// side) gives each tp rank whole groups: 3 heads over tp = 2 is refused.
module attributes {xf.model = {microbatches = 1 : i64}} {
  shard.grid @mesh(shape = 1x2x1)
  func.func @forward(%ids: tensor<2x4xi32>, %t: tensor<2x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %wte = xf.param "wte" : tensor<16x8xf32>
    %e = xf.embedding %ids, %wte : (tensor<2x4xi32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
    %wqkv = xf.param "qkv" {xf.tp_split = {dim = 0 : i64, blocks = 1 : i64}} : tensor<18x8xf32>
    %qkv = xf.linear out_in %e, %wqkv : (tensor<2x4x8xf32>, tensor<18x8xf32>) -> tensor<2x4x18xf32>
    // expected-error @+1 {{llcdist-partition: tp=2 must divide groups=3 (each rank holds whole groups: heads, for a fused QKV)}}
    %q, %k, %v = xf.split %qkv {groups = 3 : i64} : tensor<2x4x18xf32> -> tensor<2x4x6xf32>, tensor<2x4x6xf32>, tensor<2x4x6xf32>
    %qk = xf.add %q, %k : tensor<2x4x6xf32>
    %s = xf.add %qk, %v : tensor<2x4x6xf32>
    %wd = xf.param "down" : tensor<16x6xf32>
    %logits = xf.linear out_in %s, %wd : (tensor<2x4x6xf32>, tensor<16x6xf32>) -> tensor<2x4x16xf32>
    %loss = xf.cross_entropy %logits, %t : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
