// RUN: llc-dist-opt %s | llc-dist-opt | FileCheck %s
// RUN: llc-dist-opt %s --mlir-print-op-generic | llc-dist-opt | FileCheck %s
// Every xf op parses, verifies, prints, and round-trips (also through the
// generic form).

// CHECK-LABEL: func.func private @block
// CHECK-SAME: attributes {xf.layer_body}
func.func private @block(%x: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> attributes {xf.layer_body} {
  // CHECK: %[[G:.+]] = xf.param "h.{i}.ln.weight" : tensor<64xf32>
  %g = xf.param "h.{i}.ln.weight" : tensor<64xf32>
  %b = xf.param "h.{i}.ln.bias" : tensor<64xf32>
  // CHECK: xf.layer_norm %{{.+}}, %[[G]], %{{.+}} {eps = 1.000000e-05 : f64} : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  %h = xf.layer_norm %x, %g, %b {eps = 1.0e-5 : f64} : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  // MPT's LayerNorm: the weight alone, no bias.
  // CHECK: xf.layer_norm %{{.+}}, %[[G]] {eps = 1.000000e-05 : f64} : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  %hw = xf.layer_norm %x, %g {eps = 1.0e-5 : f64} : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  // Without an affine transform (OLMo's LayerNorm): no weight, no bias.
  // CHECK: xf.layer_norm %{{.+}} {eps = 1.000000e-05 : f64} : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %h0 = xf.layer_norm %x {eps = 1.0e-5 : f64} : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  // CHECK: xf.rms_norm %{{.+}}, %[[G]] {eps = 9.9999999999999995E-7 : f64}
  %r = xf.rms_norm %h, %g {eps = 1.0e-6 : f64} : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  %w = xf.param "h.{i}.attn.c_attn.weight" : tensor<64x128xf32>
  %wb = xf.param "h.{i}.attn.c_attn.bias" : tensor<128xf32>
  // CHECK: %[[QKV:.+]] = xf.linear in_out %{{.+}}, %{{.+}}, %{{.+}} : (tensor<2x8x64xf32>, tensor<64x128xf32>, tensor<128xf32>) -> tensor<2x8x128xf32>
  %qkv = xf.linear in_out %r, %w, %wb : (tensor<2x8x64xf32>, tensor<64x128xf32>, tensor<128xf32>) -> tensor<2x8x128xf32>
  // CHECK: %[[S:.+]]:3 = xf.split %[[QKV]] : tensor<2x8x128xf32> -> tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>
  %q, %k, %v = xf.split %qkv : tensor<2x8x128xf32> -> tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>
  // GPT-NeoX's layout: 4 groups (heads) of q, k and v side by side.
  // CHECK: xf.split %[[QKV]] {groups = 4 : i64} : tensor<2x8x128xf32> -> tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x64xf32>
  %gq, %gk, %gv = xf.split %qkv {groups = 4 : i64} : tensor<2x8x128xf32> -> tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x64xf32>
  // CHECK: xf.rope %[[S]]#0 {head_dim = 16 : i64, theta = 1.000000e+04 : f64} : tensor<2x8x64xf32>
  %qr = xf.rope %q {head_dim = 16 : i64, theta = 10000.0 : f64} : tensor<2x8x64xf32>
  // CHECK: xf.rope %[[S]]#1 {head_dim = 16 : i64, scaling = {factor = 8.000000e+00 : f64, high_freq_factor = 4.000000e+00 : f64, low_freq_factor = 1.000000e+00 : f64, original_max_position_embeddings = 8.192000e+03 : f64, rope_type = "llama3"}, theta = 5.000000e+05 : f64}
  %kr = xf.rope %k {head_dim = 16 : i64, theta = 500000.0 : f64, scaling = {rope_type = "llama3", factor = 8.0 : f64, low_freq_factor = 1.0 : f64, high_freq_factor = 4.0 : f64, original_max_position_embeddings = 8192.0 : f64}} : tensor<2x8x32xf32>
  // CHECK: xf.attention %{{.+}}, %{{.+}}, %[[S]]#2 {head_dim = 16 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x64xf32>
  %a = xf.attention %qr, %kr, %v {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : (tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x64xf32>
  // BLOOM's ALiBi: the slopes of 8 heads, of which the op holds 4.
  // CHECK: xf.attention %{{.+}} {alibi_heads = 8 : i64, head_dim = 16 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64}
  %ab = xf.attention %qr, %kr, %v {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, alibi_heads = 8 : i64} : (tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x64xf32>
  %wo = xf.param "h.{i}.attn.o_proj.weight" : tensor<64x64xf32>
  // CHECK: xf.linear out_in %{{.+}}, %{{.+}} : (tensor<2x8x64xf32>, tensor<64x64xf32>) -> tensor<2x8x64xf32>
  %o = xf.linear out_in %a, %wo : (tensor<2x8x64xf32>, tensor<64x64xf32>) -> tensor<2x8x64xf32>
  // CHECK: xf.gelu_tanh %{{.+}} : tensor<2x8x64xf32>
  %gl = xf.gelu_tanh %o : tensor<2x8x64xf32>
  // CHECK: xf.gelu_erf %{{.+}} : tensor<2x8x64xf32>
  %ge0 = xf.gelu_erf %gl : tensor<2x8x64xf32>
  // CHECK: xf.clamp %{{.+}} {limit = 8.000000e+00 : f64} : tensor<2x8x64xf32>
  %ge1 = xf.clamp %ge0 {limit = 8.0 : f64} : tensor<2x8x64xf32>
  // CHECK: xf.relu %{{.+}} : tensor<2x8x64xf32>
  %ge = xf.relu %ge1 : tensor<2x8x64xf32>
  // CHECK: xf.scale %{{.+}} {factor = 6.250000e-02 : f64} : tensor<2x8x64xf32>
  %sc = xf.scale %ge {factor = 0.0625 : f64} : tensor<2x8x64xf32>
  // CHECK: xf.swiglu %{{.+}}, %{{.+}} : tensor<2x8x64xf32>
  %sw = xf.swiglu %sc, %o : tensor<2x8x64xf32>
  // CHECK: xf.add %{{.+}}, %{{.+}} : tensor<2x8x64xf32>
  %y = xf.add %x, %sw : tensor<2x8x64xf32>
  return %y : tensor<2x8x64xf32>
}

// CHECK-LABEL: func.func @forward
// CHECK-SAME: attributes {xf.entry}
func.func @forward(%ids: tensor<2x8xi32>, %targets: tensor<2x8xi32>) -> tensor<f32> attributes {xf.entry} {
  // CHECK: %[[WTE:.+]] = xf.param "wte.weight" : tensor<256x64xf32>
  %wte = xf.param "wte.weight" : tensor<256x64xf32>
  %wpe = xf.param "wpe.weight" : tensor<16x64xf32>
  // CHECK: xf.embedding %{{.+}}, %[[WTE]] : (tensor<2x8xi32>, tensor<256x64xf32>) -> tensor<2x8x64xf32>
  %e = xf.embedding %ids, %wte : (tensor<2x8xi32>, tensor<256x64xf32>) -> tensor<2x8x64xf32>
  // CHECK: xf.add_position_embedding %{{.+}}, %{{.+}} : (tensor<2x8x64xf32>, tensor<16x64xf32>) -> tensor<2x8x64xf32>
  %p0 = xf.add_position_embedding %e, %wpe : (tensor<2x8x64xf32>, tensor<16x64xf32>) -> tensor<2x8x64xf32>
  // OPT's table: positions from row 2 (8 + 2 <= 16 rows).
  // CHECK: xf.add_position_embedding %{{.+}}, %{{.+}} {offset = 2 : i64} : (tensor<2x8x64xf32>, tensor<16x64xf32>) -> tensor<2x8x64xf32>
  %p = xf.add_position_embedding %p0, %wpe {offset = 2 : i64} : (tensor<2x8x64xf32>, tensor<16x64xf32>) -> tensor<2x8x64xf32>
  // CHECK: %[[L0:.+]] = xf.layer @block[0] (%{{.+}}) : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  // CHECK: xf.layer @block[1] (%[[L0]])
  %l0 = xf.layer @block[0](%p) : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %l1 = xf.layer @block[1](%l0) : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  // CHECK: %[[LOGITS:.+]] = xf.linear out_in %{{.+}}, %[[WTE]]
  %logits = xf.linear out_in %l1, %wte : (tensor<2x8x64xf32>, tensor<256x64xf32>) -> tensor<2x8x256xf32>
  // CHECK: xf.cross_entropy %[[LOGITS]], %{{.+}} : (tensor<2x8x256xf32>, tensor<2x8xi32>) -> tensor<f32>
  %loss = xf.cross_entropy %logits, %targets : (tensor<2x8x256xf32>, tensor<2x8xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// CHECK-LABEL: func.func @low_precision
func.func @low_precision(%x: tensor<4x32xbf16>, %y: tensor<4x32xf16>) -> (tensor<4x32xbf16>, tensor<4x32xf16>) {
  // CHECK: xf.gelu_tanh %{{.+}} : tensor<4x32xbf16>
  %a = xf.gelu_tanh %x : tensor<4x32xbf16>
  // CHECK: xf.add %{{.+}}, %{{.+}} : tensor<4x32xf16>
  %b = xf.add %y, %y : tensor<4x32xf16>
  return %a, %b : tensor<4x32xbf16>, tensor<4x32xf16>
}

// The families' optional attributes (Gemma: the embedding's scale, the
// norm's weight offset, GeGLU; Phi: partial rotary; OPT: the padding row).
// CHECK-LABEL: func.func private @family_attrs
func.func private @family_attrs(%ids: tensor<2x8xi32>, %t: tensor<256x64xf32>, %w: tensor<64xf32>) -> tensor<2x8x64xf32> {
  // CHECK: xf.embedding %{{.+}}, %{{.+}} {scale = 8.000000e+00 : f64}
  %e = xf.embedding %ids, %t {scale = 8.0 : f64} : (tensor<2x8xi32>, tensor<256x64xf32>) -> tensor<2x8x64xf32>
  // CHECK: xf.embedding %{{.+}}, %{{.+}} {padding_idx = 255 : i64}
  %ep = xf.embedding %ids, %t {padding_idx = 255 : i64} : (tensor<2x8xi32>, tensor<256x64xf32>) -> tensor<2x8x64xf32>
  // CHECK: xf.rms_norm %{{.+}}, %{{.+}} {eps = 9.9999999999999995E-7 : f64, weight_offset = 1.000000e+00 : f64}
  %r = xf.rms_norm %e, %w {eps = 1.0e-6 : f64, weight_offset = 1.0 : f64} : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  // CHECK: xf.rope %{{.+}} {head_dim = 16 : i64, rotary_dim = 6 : i64, theta = 1.000000e+04 : f64}
  %q = xf.rope %r {head_dim = 16 : i64, theta = 10000.0 : f64, rotary_dim = 6 : i64} : tensor<2x8x64xf32>
  // GPT-J's rotate_every_two.
  // CHECK: xf.rope %{{.+}} {head_dim = 16 : i64, interleaved, rotary_dim = 4 : i64, theta = 1.000000e+04 : f64}
  %qi = xf.rope %r {head_dim = 16 : i64, theta = 10000.0 : f64, rotary_dim = 4 : i64, interleaved} : tensor<2x8x64xf32>
  // CHECK: xf.swiglu %{{.+}}, %{{.+}} {activation = "gelu_tanh"} : tensor<2x8x64xf32>
  %g = xf.swiglu %q, %r {activation = "gelu_tanh"} : tensor<2x8x64xf32>
  return %g : tensor<2x8x64xf32>
}

// The mixture of experts (Mixtral, Qwen2-MoE): route, permute, the experts'
// grouped GEMMs, the weighted sum back, Qwen2-MoE's gated shared expert.
// CHECK-LABEL: func.func private @mixture_of_experts
func.func private @mixture_of_experts(%x: tensor<2x8x64xf32>, %logits: tensor<2x8x4xf32>, %w: tensor<4x32x64xf32>, %w2: tensor<4x64x32xf32>, %g: tensor<2x8x1xf32>, %ce: tensor<f32>) -> tensor<2x8x64xf32> {
  // CHECK: %[[W:[a-z_0-9]+]], %[[E:[a-z_0-9]+]] = xf.moe_route %{{.+}} {normalize, top_k = 2 : i64} : tensor<2x8x4xf32> -> tensor<2x8x2xf32>, tensor<2x8x2xi32>
  %wt, %e = xf.moe_route %logits {top_k = 2 : i64, normalize} : tensor<2x8x4xf32> -> tensor<2x8x2xf32>, tensor<2x8x2xi32>
  // The load-balancing loss's statistics: zero before the first router,
  // each router's added (what the layers pass on), the loss from the last.
  // CHECK: %[[C0:[a-z_0-9]+]] = xf.zeros : tensor<4xi32>
  // CHECK: %[[S0:[a-z_0-9]+]] = xf.zeros : tensor<4xf32>
  // CHECK: %[[C1:[a-z_0-9]+]], %[[S1:[a-z_0-9]+]] = xf.moe_router_stats %{{.+}}, %[[E]], %[[C0]], %[[S0]] : tensor<2x8x4xf32>, tensor<2x8x2xi32>, tensor<4xi32>, tensor<4xf32>
  // CHECK: xf.moe_aux_loss %{{.+}}, %[[C1]], %[[S1]] {coef = 2.000000e-02 : f64, top_k = 2 : i64} : tensor<f32>, tensor<4xi32>, tensor<4xf32>
  %c0 = xf.zeros : tensor<4xi32>
  %s0 = xf.zeros : tensor<4xf32>
  %c1, %s1 = xf.moe_router_stats %logits, %e, %c0, %s0 : tensor<2x8x4xf32>, tensor<2x8x2xi32>, tensor<4xi32>, tensor<4xf32>
  %total = xf.moe_aux_loss %ce, %c1, %s1 {coef = 0.02 : f64, top_k = 2 : i64} : tensor<f32>, tensor<4xi32>, tensor<4xf32>
  // CHECK: %[[R:[a-z_0-9]+]], %[[SL:[a-z_0-9]+]], %[[GS:[a-z_0-9]+]] = xf.moe_permute %{{.+}}, %[[E]] : (tensor<2x8x64xf32>, tensor<2x8x2xi32>) -> (tensor<32x64xf32>, tensor<2x8x2xi32>, tensor<4xi32>)
  %rows, %slots, %sizes = xf.moe_permute %x, %e : (tensor<2x8x64xf32>, tensor<2x8x2xi32>) -> (tensor<32x64xf32>, tensor<2x8x2xi32>, tensor<4xi32>)
  // CHECK: xf.grouped_linear %[[R]], %{{.+}}, %[[GS]] : (tensor<32x64xf32>, tensor<4x32x64xf32>, tensor<4xi32>) -> tensor<32x32xf32>
  %h = xf.grouped_linear %rows, %w, %sizes : (tensor<32x64xf32>, tensor<4x32x64xf32>, tensor<4xi32>) -> tensor<32x32xf32>
  %y = xf.grouped_linear %h, %w2, %sizes : (tensor<32x32xf32>, tensor<4x64x32xf32>, tensor<4xi32>) -> tensor<32x64xf32>
  // CHECK: xf.moe_unpermute %{{.+}}, %[[SL]], %[[W]] : (tensor<32x64xf32>, tensor<2x8x2xi32>, tensor<2x8x2xf32>) -> tensor<2x8x64xf32>
  %out = xf.moe_unpermute %y, %slots, %wt : (tensor<32x64xf32>, tensor<2x8x2xi32>, tensor<2x8x2xf32>) -> tensor<2x8x64xf32>
  // CHECK: xf.moe_unpermute %{{.+}}, %[[SL]] : (tensor<32x64xf32>, tensor<2x8x2xi32>) -> tensor<2x8x64xf32>
  %sum = xf.moe_unpermute %y, %slots : (tensor<32x64xf32>, tensor<2x8x2xi32>) -> tensor<2x8x64xf32>
  // CHECK: xf.sigmoid_gate %{{.+}}, %{{.+}} : (tensor<2x8x1xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %s = xf.sigmoid_gate %g, %sum : (tensor<2x8x1xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %r = xf.add %out, %s : tensor<2x8x64xf32>
  return %r : tensor<2x8x64xf32>
}
