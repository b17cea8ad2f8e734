// RUN: llc-dist-opt %s -split-input-file -llcdist-autodiff -verify-diagnostics | FileCheck %s

// A one-layer model with a tied embedding: the layer body gets a backward
// body fed with saved values, parameters' gradients are accumulated by name
// (the tied table twice), dW comes before dX, and the loss gradient is
// scaled by 1 / (tokens × microbatches) = 1 / (2·4·2). The lookup's
// padding_idx (torch's nn.Embedding) goes to its gradient alone: the tied
// head's gradient has every row.

// CHECK-LABEL: func.func private @block
// CHECK-SAME: (%[[X:.+]]: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>)
// CHECK: %[[W:.+]] = xf.param "h.{i}.w"
// CHECK: %[[H:.+]] = xf.linear out_in %[[X]], %[[W]]
// CHECK: %[[G:.+]] = xf.gelu_tanh %[[H]]
// CHECK: %[[Y:.+]] = xf.add %[[X]], %[[G]]
// CHECK: return %[[Y]], %[[H]], %[[X]]

// CHECK-LABEL: func.func private @block_bwd
// CHECK-SAME: (%[[DY:.+]]: tensor<2x4x8xf32>, %[[SH:.+]]: tensor<2x4x8xf32>, %[[SX:.+]]: tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
// CHECK-SAME: attributes {xf.backward_of = @block, xf.layer_body}
// CHECK: %[[W2:.+]] = xf.param "h.{i}.w"
// CHECK: %[[DH:.+]] = xf.gelu_tanh_grad %[[DY]], %[[SH]]
// CHECK: %[[DW:.+]] = xf.linear_grad_weight out_in %[[DH]], %[[SX]]
// CHECK: xf.accumulate_grad "h.{i}.w", %[[DW]]
// CHECK: %[[DX:.+]] = xf.linear_grad_input out_in %[[DH]], %[[W2]]
// The residual: dy reaches the input both directly and through the branch.
// CHECK: %[[SUM:.+]] = xf.add %[[DY]], %[[DX]]
// CHECK: return %[[SUM]]

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: attributes {xf.entry, xf.train_step}
// CHECK: %[[L:.+]]:3 = xf.layer @block[0] (%{{.+}}) {xf.num_outputs = 1 : i64}
// CHECK: %[[LOSS:.+]] = xf.cross_entropy
// CHECK: %[[DL:.+]] = xf.cross_entropy_grad %{{.+}}, %{{.+}} {scale = 6.250000e-02 : f64}
// CHECK: %[[DHEAD:.+]] = xf.linear_grad_weight out_in %[[DL]], %[[L]]#0
// CHECK: xf.accumulate_grad "wte", %[[DHEAD]]
// CHECK: %[[DXL:.+]] = xf.linear_grad_input out_in %[[DL]]
// CHECK: %[[DE:.+]] = xf.layer @block_bwd[0] (%[[DXL]], %[[L]]#1, %[[L]]#2)
// CHECK: %[[DT:.+]] = xf.embedding_grad %{{.+}}, %[[DE]] {padding_idx = 3 : i64}
// CHECK: xf.accumulate_grad "wte", %[[DT]]
// CHECK: return %[[LOSS]]
module attributes {xf.model = {microbatches = 2 : i64}} {
  func.func private @block(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> attributes {xf.layer_body} {
    %w = xf.param "h.{i}.w" : tensor<8x8xf32>
    %h = xf.linear out_in %x, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %g = xf.gelu_tanh %h : tensor<2x4x8xf32>
    %y = xf.add %x, %g : tensor<2x4x8xf32>
    return %y : tensor<2x4x8xf32>
  }
  func.func @forward(%ids: tensor<2x4xi32>, %t: tensor<2x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %wte = xf.param "wte" : tensor<16x8xf32>
    %e = xf.embedding %ids, %wte {padding_idx = 3 : i64} : (tensor<2x4xi32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
    %l = xf.layer @block[0](%e) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %logits = xf.linear out_in %l, %wte : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %loss = xf.cross_entropy %logits, %t : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Norms and attention gain their statistics, which their backward reads.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[N:.+]], %[[STATS:.+]] = xf.rms_norm %{{.+}}, %{{.+}} {eps = {{.+}}} : (tensor<1x4x8xf32>, tensor<8xf32>) -> (tensor<1x4x8xf32>, tensor<4xf32>)
// CHECK: %[[A:.+]], %[[LSE:.+]] = xf.attention %[[N]], %[[N]], %[[N]] {{.+}} -> (tensor<1x4x8xf32>, tensor<1x2x4xf32>)
// CHECK: %[[DQ:.+]], %[[DK:.+]], %[[DV:.+]] = xf.attention_grad %{{.+}}, %[[N]], %[[N]], %[[N]], %[[A]], %[[LSE]]
// q, k and v are one value: their gradients are summed.
// CHECK: %[[S1:.+]] = xf.add %[[DQ]], %[[DK]]
// CHECK: %[[S2:.+]] = xf.add %[[S1]], %[[DV]]
// CHECK: xf.rms_norm_grad_weight %[[S2]], %{{.+}}, %[[STATS]]
// CHECK: xf.rms_norm_grad_input %[[S2]], %{{.+}}, %{{.+}}, %[[STATS]]
func.func @forward(%x: tensor<1x4x8xf32>, %t: tensor<1x4xi32>) -> tensor<f32> attributes {xf.entry} {
  %g = xf.param "norm" : tensor<8xf32>
  %n = xf.rms_norm %x, %g {eps = 1.0e-5 : f64} : (tensor<1x4x8xf32>, tensor<8xf32>) -> tensor<1x4x8xf32>
  %a = xf.attention %n, %n, %n {num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64} : (tensor<1x4x8xf32>, tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  %loss = xf.cross_entropy %a, %t : (tensor<1x4x8xf32>, tensor<1x4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// expected-error @+1 {{autodiff: the entry function must return the value of an xf.cross_entropy (the loss)}}
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> attributes {xf.entry} {
  %y = xf.gelu_tanh %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @forward(%x: tensor<2x8xf32>, %t: tensor<2xi32>) -> tensor<f32> attributes {xf.entry} {
  // expected-error @+1 {{autodiff: result #1 of a split is unused; drop it from the graph}}
  %a, %b = xf.split %x : tensor<2x8xf32> -> tensor<2x4xf32>, tensor<2x4xf32>
  %loss = xf.cross_entropy %a, %t : (tensor<2x4xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// expected-error @+1 {{autodiff: @train_step is already a training step}}
func.func @train_step(%x: tensor<2x4xf32>, %t: tensor<2xi32>) -> tensor<f32> attributes {xf.entry, xf.train_step} {
  %loss = xf.cross_entropy %x, %t : (tensor<2x4xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// The MoE load-balancing loss: the layers pass the statistics on (i32
// counts, f32 probability sums), so the backward body takes gradients for
// the float outputs only (dy, dprobs) and returns them for the float inputs
// only (dx, dprobs_in: the probabilities' sum passes its gradient through);
// the router's logits get the statistics' share too. The loss's gradient
// reads the last layer's counts, scaled by 1 / microbatches.

// CHECK-LABEL: func.func private @moe_bwd
// CHECK-SAME: (%[[DY:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[DS:[a-z0-9]+]]: tensor<4xf32>, %{{.+}}) -> (tensor<2x4x8xf32>, tensor<4xf32>)
// CHECK: %[[DL:.+]] = xf.moe_router_stats_grad %{{.+}}, %[[DS]]
// CHECK: return %{{.+}}, %[[DS]] : tensor<2x4x8xf32>, tensor<4xf32>

// CHECK-LABEL: func.func @train_step
// CHECK: %[[C0:.+]] = xf.zeros : tensor<4xi32>
// CHECK: %[[S0:.+]] = xf.zeros : tensor<4xf32>
// CHECK: %[[L:.+]]:{{[0-9]+}} = xf.layer @moe[0] (%{{.+}}, %[[C0]], %[[S0]]) {xf.num_outputs = 3 : i64}
// CHECK: %[[CE:.+]] = xf.cross_entropy
// CHECK: %[[TOTAL:.+]] = xf.moe_aux_loss %[[CE]], %[[L]]#1, %[[L]]#2
// CHECK: %[[DSTAT:.+]] = xf.moe_aux_loss_grad %[[L]]#1 {coef = 2.000000e-02 : f64, scale = 5.000000e-01 : f64, top_k = 2 : i64}
// CHECK: xf.cross_entropy_grad
// CHECK: xf.layer @moe_bwd[0] (%{{.+}}, %[[DSTAT]], %{{.+}}) : {{.+}} -> (tensor<2x4x8xf32>, tensor<4xf32>)
// CHECK: return %[[TOTAL]]
module attributes {xf.model = {microbatches = 2 : i64}} {
  func.func private @moe(%x: tensor<2x4x8xf32>, %c: tensor<4xi32>, %s: tensor<4xf32>) -> (tensor<2x4x8xf32>, tensor<4xi32>, tensor<4xf32>) attributes {xf.layer_body} {
    %wg = xf.param "h.{i}.gate" : tensor<4x8xf32>
    %logits = xf.linear out_in %x, %wg : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x4xf32>
    %w, %e = xf.moe_route %logits {top_k = 2 : i64, normalize} : tensor<2x4x4xf32> -> tensor<2x4x2xf32>, tensor<2x4x2xi32>
    %c1, %s1 = xf.moe_router_stats %logits, %e, %c, %s : tensor<2x4x4xf32>, tensor<2x4x2xi32>, tensor<4xi32>, tensor<4xf32>
    %rows, %slots, %sizes = xf.moe_permute %x, %e : (tensor<2x4x8xf32>, tensor<2x4x2xi32>) -> (tensor<16x8xf32>, tensor<2x4x2xi32>, tensor<4xi32>)
    %we = xf.param "h.{i}.experts.{e}.w" : tensor<4x8x8xf32>
    %h = xf.grouped_linear %rows, %we, %sizes : (tensor<16x8xf32>, tensor<4x8x8xf32>, tensor<4xi32>) -> tensor<16x8xf32>
    %out = xf.moe_unpermute %h, %slots, %w : (tensor<16x8xf32>, tensor<2x4x2xi32>, tensor<2x4x2xf32>) -> tensor<2x4x8xf32>
    %y = xf.add %x, %out : tensor<2x4x8xf32>
    return %y, %c1, %s1 : tensor<2x4x8xf32>, tensor<4xi32>, tensor<4xf32>
  }
  func.func @forward(%ids: tensor<2x4xi32>, %t: tensor<2x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %wte = xf.param "wte" : tensor<16x8xf32>
    %emb = xf.embedding %ids, %wte : (tensor<2x4xi32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
    %c0 = xf.zeros : tensor<4xi32>
    %s0 = xf.zeros : tensor<4xf32>
    %l:3 = xf.layer @moe[0](%emb, %c0, %s0) : (tensor<2x4x8xf32>, tensor<4xi32>, tensor<4xf32>) -> (tensor<2x4x8xf32>, tensor<4xi32>, tensor<4xf32>)
    %logits = xf.linear out_in %l#0, %wte : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %ce = xf.cross_entropy %logits, %t : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    %loss = xf.moe_aux_loss %ce, %l#1, %l#2 {coef = 0.02 : f64, top_k = 2 : i64} : tensor<f32>, tensor<4xi32>, tensor<4xf32>
    return %loss : tensor<f32>
  }
}
