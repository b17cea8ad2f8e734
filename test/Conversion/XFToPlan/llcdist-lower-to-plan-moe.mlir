// RUN: llc-dist-opt %s -llcdist-autodiff -llcdist-add-optimizer -llcdist-partition -llcdist-lower-to-plan | FileCheck %s

// A mixture-of-experts layer (Mixtral's routed experts, Qwen2-MoE's gated
// output) lowers to the moe family's kernels: the route's weights and
// experts, the permutation's rows, slots and group sizes feed the grouped
// GEMMs and the weighted sum back; the backward runs them in reverse (the
// permutation's gradient is an unweighted unpermute) and the expert weights'
// gradients are written into their gradient buffers. A stacked expert weight
// keeps its {e} (one Hugging Face tensor per expert in the files).

// CHECK-DAG: plan.param "h.0.experts.{e}.w1.weight" value @[[W1:b[0-9]+]] grad @[[W1G:b[0-9]+]]
// CHECK-DAG: plan.param "h.0.experts.{e}.w2.weight" value @[[W2:b[0-9]+]] grad @[[W2G:b[0-9]+]]
// CHECK: plan.subroutine @forward {
// CHECK: plan.kernel "moe_route" {experts = @[[E:b[0-9]+]], logits = @[[L:b[0-9]+]], weights = @[[WT:b[0-9]+]]} {E = 4 : i64, T = 8 : i64, k = 2 : i64, normalize = true}
// CHECK-NEXT: plan.kernel "moe_permute" {experts = @[[E]], group_sizes = @[[GS:b[0-9]+]], slots = @[[SL:b[0-9]+]], x = @{{.+}}, xp = @[[XP:b[0-9]+]]} {E = 4 : i64, H = 8 : i64, T = 8 : i64, k = 2 : i64}
// CHECK-NEXT: plan.kernel "grouped_linear_fwd" {group_sizes = @[[GS]], w = @[[W1]], x = @[[XP]], y = @[[H:b[0-9]+]]} {E = 4 : i64, K = 8 : i64, N = 16 : i64, O = 6 : i64}
// CHECK-NEXT: plan.kernel "grouped_linear_fwd" {group_sizes = @[[GS]], w = @[[W2]], x = @[[H]], y = @[[D:b[0-9]+]]} {E = 4 : i64, K = 6 : i64, N = 16 : i64, O = 8 : i64}
// CHECK-NEXT: plan.kernel "moe_unpermute" {slots = @[[SL]], weights = @[[WT]], xp = @[[D]], y = @[[O:b[0-9]+]]} {H = 8 : i64, T = 8 : i64, k = 2 : i64}
// CHECK-NEXT: plan.kernel "linear_fwd"
// CHECK-NEXT: plan.kernel "sigmoid_gate_fwd" {gate = @{{.+}}, x = @[[O]], y = @{{.+}}} {H = 8 : i64, T = 8 : i64}
// CHECK: plan.subroutine @backward {
// CHECK: plan.kernel "sigmoid_gate_bwd" {dgate = @{{.+}}, dx = @[[DO:b[0-9]+]], dy = @{{.+}}, gate = @{{.+}}, x = @[[O]]} {H = 8 : i64, T = 8 : i64}
// CHECK: plan.kernel "moe_unpermute_bwd" {dweights = @[[DWT:b[0-9]+]], dxp = @[[DD:b[0-9]+]], dy = @[[DO]], slots = @[[SL]], weights = @[[WT]], xp = @[[D]]} {H = 8 : i64, T = 8 : i64, k = 2 : i64}
// CHECK-NEXT: plan.kernel "grouped_linear_bwd_weight" {dw = @[[W2G]], dy = @[[DD]], group_sizes = @[[GS]], x = @[[H]]} {E = 4 : i64, K = 6 : i64, N = 16 : i64, O = 8 : i64, accumulate = true}
// CHECK-NEXT: plan.kernel "grouped_linear_bwd_input" {dx = @[[DH:b[0-9]+]], dy = @[[DD]], group_sizes = @[[GS]], w = @[[W2]]} {E = 4 : i64, K = 6 : i64, N = 16 : i64, O = 8 : i64}
// CHECK-NEXT: plan.kernel "grouped_linear_bwd_weight" {dw = @[[W1G]], dy = @[[DH]], group_sizes = @[[GS]], x = @[[XP]]} {E = 4 : i64, K = 8 : i64, N = 16 : i64, O = 6 : i64, accumulate = true}
// CHECK-NEXT: plan.kernel "grouped_linear_bwd_input" {dx = @[[DXP:b[0-9]+]], dy = @[[DH]], group_sizes = @[[GS]], w = @[[W1]]}
// CHECK-NEXT: plan.kernel "moe_unpermute" {slots = @[[SL]], xp = @[[DXP]], y = @{{.+}}} {H = 8 : i64, T = 8 : i64, k = 2 : i64}
// CHECK: plan.kernel "moe_route_bwd" {dlogits = @{{.+}}, dweights = @[[DWT]], experts = @[[E]], logits = @[[L]]} {E = 4 : i64, T = 8 : i64, k = 2 : i64, normalize = true}
module attributes {xf.model = {microbatches = 1 : i64, name = "m", architecture = "MixtralForCausalLM", vocab_size = 16 : i64}} {
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
    %wsg = xf.param "h.{i}.shared_expert_gate.weight" : tensor<1x8xf32>
    %g = xf.linear out_in %x, %wsg : (tensor<2x4x8xf32>, tensor<1x8xf32>) -> tensor<2x4x1xf32>
    %s = xf.sigmoid_gate %g, %o : (tensor<2x4x1xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %y = xf.add %x, %s : tensor<2x4x8xf32>
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
