// RUN: llc-dist-opt %s -llcdist-autodiff -llcdist-add-optimizer -llcdist-partition | FileCheck %s
// RUN: llc-dist-opt %s -llcdist-autodiff -llcdist-add-optimizer -llcdist-partition -llcdist-lower-to-plan | FileCheck %s --check-prefix=PLAN

// Expert parallelism (issue #34): dp=2 with ep=2 (the grid's xf.ep), 4
// experts, top-2. Each rank holds experts [2m, 2m+2) of the stacked weights
// (xf.sharding axis "ep", dim 0) and routes its own 4 tokens: its 8 rows
// (moe_permute's order) go to their experts' ranks (xf.moe_dispatch), the
// grouped GEMMs run on what arrived (the worst case, 2 ranks x 4 tokens x
// min(k = 2, 2 local experts) = 16 rows, grouped by local expert), and the
// output rows come back (xf.moe_combine) before the weighted sum. The
// backward sends the output gradient out and the input gradient back; it
// reads the forward's dispatched rows (the body returns them, not the
// token rows) and the combined output. The experts' gradients sum the ep
// group's tokens already: with dp = ep they reduce over nothing else (no
// edp all-reduce), every other gradient over dp.

// CHECK-LABEL: func.func private @block(
// CHECK: %[[ROWS:.+]], %{{.+}}, %[[GS:.+]] = xf.moe_permute
// CHECK: %[[W1:.+]] = xf.param "h.{i}.experts.{e}.w1.weight" {xf.sharding = {axis = "ep", blocks = 1 : i64, dim = 0 : i64, global_shape = array<i64: 4, 6, 8>}} : tensor<2x6x8xf32>
// CHECK: %[[XE:.+]], %[[SPLITS:.+]], %[[LOCAL:.+]] = xf.moe_dispatch %[[ROWS]], %[[GS]] {axis = "ep", origin = "expert_parallel"{{.*}}} : (tensor<8x8xf32>, tensor<4xi32>) -> (tensor<16x8xf32>, tensor<4xi32>, tensor<2xi32>)
// CHECK: %[[H:.+]] = xf.grouped_linear %[[XE]], %[[W1]], %[[LOCAL]] : (tensor<16x8xf32>, tensor<2x6x8xf32>, tensor<2xi32>) -> tensor<16x6xf32>
// CHECK: %[[D:.+]] = xf.grouped_linear %[[H]], %{{.+}}, %[[LOCAL]] : (tensor<16x6xf32>, tensor<2x8x6xf32>, tensor<2xi32>) -> tensor<16x8xf32>
// CHECK: %[[BACK:.+]] = xf.moe_combine %[[D]], %[[SPLITS]] {axis = "ep", local_experts = 2 : i64{{.*}}} : (tensor<16x8xf32>, tensor<4xi32>) -> tensor<8x8xf32>
// CHECK: xf.moe_unpermute %[[BACK]]
// CHECK: return {{.*}}%[[BACK]], %[[GS]], %[[H]], %[[XE]],
// CHECK-LABEL: func.func private @block_bwd(
// CHECK: %[[DIN:.+]], %{{.+}} = xf.moe_unpermute_grad
// CHECK: %[[DE:.+]], %[[BSPLITS:.+]], %[[BLOCAL:.+]] = xf.moe_dispatch %[[DIN]], %arg4
// CHECK: xf.grouped_linear_grad_weight %[[DE]], %arg5, %[[BLOCAL]] : {{.*}} -> tensor<2x8x6xf32>
// CHECK: %[[DH:.+]] = xf.grouped_linear_grad_input %[[DE]], %{{.+}}, %[[BLOCAL]]
// CHECK: xf.grouped_linear_grad_weight %[[DH]], %arg6, %[[BLOCAL]] : {{.*}} -> tensor<2x6x8xf32>
// CHECK: %[[DX:.+]] = xf.grouped_linear_grad_input %[[DH]], %{{.+}}, %[[BLOCAL]]
// CHECK: %[[DXT:.+]] = xf.moe_combine %[[DX]], %[[BSPLITS]]
// CHECK: xf.moe_unpermute %[[DXT]], %arg2
// CHECK-LABEL: func.func @optimizer_step()
// CHECK-NEXT: xf.all_reduce_grads {axis = "dp", exclude = ["h.{i}.experts.{e}.w1.weight", "h.{i}.experts.{e}.w2.weight"]
// CHECK-NOT: xf.all_reduce_grads

// The plan: each exchange is an all_to_all_v over ep (the counts travel
// with it) and a moe_chunk_transpose between sending-member and local-expert
// order; the expert weights are [2, O, K] shards on ep.
// PLAN-DAG: plan.param "h.0.experts.{e}.w1.weight" {{.*}}sharding = {axis = "ep"
// PLAN: plan.subroutine @forward {
// PLAN: plan.kernel "all_to_all_v" {recv_splits = @[[RS:b[0-9]+]], send_splits = @{{.+}}, x = @{{.+}}, y = @[[BY:b[0-9]+]]} {H = 8 : i64, Nx = 8 : i64, Ny = 16 : i64, axis = "ep", c = 2 : i64} {plan.origin = "expert_parallel", plan.payload = "expert rows"}
// PLAN-NEXT: plan.kernel "moe_chunk_transpose" {col_sizes = @[[LS:b[0-9]+]], splits = @[[RS]], x = @[[BY]], y = @[[XE:b[0-9]+]]} {H = 8 : i64, N = 16 : i64, c = 2 : i64, r = 2 : i64}
// PLAN-NEXT: plan.kernel "grouped_linear_fwd" {group_sizes = @[[LS]], w = @{{.+}}, x = @[[XE]], y = @{{.+}}} {E = 2 : i64, K = 8 : i64, N = 16 : i64, O = 6 : i64}
// PLAN: plan.kernel "moe_chunk_transpose" {splits = @[[RS]], x = @{{.+}}, y = @[[BACK:b[0-9]+]]} {H = 8 : i64, N = 16 : i64, c = 2 : i64, inverse = true, r = 2 : i64}
// PLAN-NEXT: plan.kernel "all_to_all_v" {recv_splits = @{{.+}}, send_splits = @[[RS]], x = @[[BACK]], y = @{{.+}}} {H = 8 : i64, Nx = 16 : i64, Ny = 8 : i64, axis = "ep", c = 2 : i64}

module attributes {xf.model = {microbatches = 1 : i64, name = "m", architecture = "MixtralForCausalLM", vocab_size = 16 : i64}} {
  shard.grid @mesh(shape = 2x1x1) {xf.mesh_axes = ["dp", "tp", "pp"], xf.rank_order = ["tp", "dp", "pp"], xf.ep = 2 : i64}
  func.func private @block(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> attributes {xf.layer_body} {
    %wg = xf.param "h.{i}.gate.weight" : tensor<4x8xf32>
    %logits = xf.linear out_in %x, %wg : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x4xf32>
    %w, %e = xf.moe_route %logits {top_k = 2 : i64, normalize} : tensor<2x4x4xf32> -> tensor<2x4x2xf32>, tensor<2x4x2xi32>
    %rows, %slots, %sizes = xf.moe_permute %x, %e : (tensor<2x4x8xf32>, tensor<2x4x2xi32>) -> (tensor<16x8xf32>, tensor<2x4x2xi32>, tensor<4xi32>)
    %w1 = xf.param "h.{i}.experts.{e}.w1.weight" : tensor<4x6x8xf32>
    %h = xf.grouped_linear %rows, %w1, %sizes : (tensor<16x8xf32>, tensor<4x6x8xf32>, tensor<4xi32>) -> tensor<16x6xf32>
    %w2 = xf.param "h.{i}.experts.{e}.w2.weight" : tensor<4x8x6xf32>
    %d = xf.grouped_linear %h, %w2, %sizes : (tensor<16x6xf32>, tensor<4x8x6xf32>, tensor<4xi32>) -> tensor<16x8xf32>
    %o = xf.moe_unpermute %d, %slots, %w : (tensor<16x8xf32>, tensor<2x4x2xi32>, tensor<2x4x2xf32>) -> tensor<2x4x8xf32>
    %y = xf.add %x, %o : tensor<2x4x8xf32>
    return %y : tensor<2x4x8xf32>
  }
  func.func @forward(%ids: tensor<2x4xi32>, %t: tensor<2x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %wte = xf.param "wte" : tensor<16x8xf32>
    %x = xf.embedding %ids, %wte : (tensor<2x4xi32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
    %h = xf.layer @block[0](%x) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %logits = xf.linear out_in %h, %wte : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %loss = xf.cross_entropy %logits, %t : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
