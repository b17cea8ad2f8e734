// RUN: llc-dist-opt %s -split-input-file -verify-diagnostics
// One case per verifier diagnostic of the xf dialect.

func.func @param_empty_name() {
  // expected-error @+1 {{parameter name must not be empty}}
  %w = xf.param "" : tensor<4xf32>
  return
}

// -----

func.func @param_dynamic() {
  // expected-error @+1 {{parameter must have a static shape}}
  %w = xf.param "w" : tensor<?xf32>
  return
}

// -----

func.func @param_int() {
  // expected-error @+1 {{result #0 must be ranked tensor of 32-bit float or bfloat16 type or 16-bit float values}}
  %w = xf.param "w" : tensor<4xi32>
  return
}

// -----

func.func private @body(%x: tensor<4xf32>) -> tensor<4xf32> attributes {xf.layer_body} {
  // expected-error @+1 {{parameter 'h.ln.weight' is inside layer body @body but its name has no '{i}' layer-index placeholder}}
  %w = xf.param "h.ln.weight" : tensor<4xf32>
  return %x : tensor<4xf32>
}

// -----

func.func @placeholder_outside() {
  // expected-error @+1 {{parameter 'h.{i}.w' uses the '{i}' placeholder outside a function marked 'xf.layer_body'}}
  %w = xf.param "h.{i}.w" : tensor<4xf32>
  return
}

// -----

func.func private @body(%x: tensor<4xf32>) -> tensor<4xf32> attributes {xf.layer_body} {
  return %x : tensor<4xf32>
}
func.func @layer_negative_index(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{layer index must be >= 0, got -1}}
  %y = xf.layer @body[-1](%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @layer_missing_callee(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{callee @nowhere does not name a func.func}}
  %y = xf.layer @nowhere[0](%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func private @plain(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
func.func @layer_not_body(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{callee @plain is not marked 'xf.layer_body'}}
  %y = xf.layer @plain[0](%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func private @body(%x: tensor<4xf32>) -> tensor<4xf32> attributes {xf.layer_body} {
  return %x : tensor<4xf32>
}
func.func @layer_type_mismatch(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{type mismatch with callee @body: callee has type '(tensor<4xf32>) -> tensor<4xf32>'}}
  %y = xf.layer @body[0](%x) : (tensor<8xf32>) -> tensor<8xf32>
  return %y : tensor<8xf32>
}

// -----

func.func @embedding_table_rank(%ids: tensor<2x8xi32>, %t: tensor<256xf32>) {
  // expected-error @+1 {{table must be [vocab, hidden], got 'tensor<256xf32>'}}
  %e = xf.embedding %ids, %t : (tensor<2x8xi32>, tensor<256xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @embedding_result(%ids: tensor<2x8xi32>, %t: tensor<256x64xf32>) {
  // expected-error @+1 {{result shape must be ids shape + [hidden] = [2, 8, 64], got 'tensor<2x8x32xf32>'}}
  %e = xf.embedding %ids, %t : (tensor<2x8xi32>, tensor<256x64xf32>) -> tensor<2x8x32xf32>
  return
}

// -----

func.func @embedding_dtype(%ids: tensor<2x8xi32>, %t: tensor<256x64xf32>) {
  // expected-error @+1 {{expects one element type for all float operands and results, got 'f32' and 'bf16'}}
  %e = xf.embedding %ids, %t : (tensor<2x8xi32>, tensor<256x64xf32>) -> tensor<2x8x64xbf16>
  return
}

// -----

func.func @pos_rank(%x: tensor<8x64xf32>, %t: tensor<16x64xf32>) {
  // expected-error @+1 {{input must be [batch, seq, hidden], got 'tensor<8x64xf32>'}}
  %e = xf.add_position_embedding %x, %t : (tensor<8x64xf32>, tensor<16x64xf32>) -> tensor<8x64xf32>
  return
}

// -----

func.func @pos_table(%x: tensor<2x8x64xf32>, %t: tensor<16x32xf32>) {
  // expected-error @+1 {{table must be [positions, 64], got 'tensor<16x32xf32>'}}
  %e = xf.add_position_embedding %x, %t : (tensor<2x8x64xf32>, tensor<16x32xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @pos_too_long(%x: tensor<2x32x64xf32>, %t: tensor<16x64xf32>) {
  // expected-error @+1 {{sequence length 32 exceeds the 16 learned positions}}
  %e = xf.add_position_embedding %x, %t : (tensor<2x32x64xf32>, tensor<16x64xf32>) -> tensor<2x32x64xf32>
  return
}

// -----

func.func @pos_offset_too_far(%x: tensor<2x8x64xf32>, %t: tensor<16x64xf32>) {
  // expected-error @+1 {{sequence length 8 exceeds the 7 learned positions after the offset}}
  %e = xf.add_position_embedding %x, %t {offset = 9 : i64} : (tensor<2x8x64xf32>, tensor<16x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @pos_offset_negative(%x: tensor<2x8x64xf32>, %t: tensor<16x64xf32>) {
  // expected-error @+1 {{offset must be >= 1 (absent: 0), got 0}}
  %e = xf.add_position_embedding %x, %t {offset = 0 : i64} : (tensor<2x8x64xf32>, tensor<16x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @pos_grad_offset_too_far(%dy: tensor<2x8x64xf32>) {
  // expected-error @+1 {{expects dy [B, S, H] and a result [P, H] with P >= S + offset}}
  %d = xf.add_position_embedding_grad %dy {offset = 9 : i64} : (tensor<2x8x64xf32>) -> tensor<16x64xf32>
  return
}

// -----

func.func @pos_result(%x: tensor<2x8x64xf32>, %t: tensor<16x64xf32>) {
  // expected-error @+1 {{result type must equal the input type 'tensor<2x8x64xf32>'}}
  %e = xf.add_position_embedding %x, %t : (tensor<2x8x64xf32>, tensor<16x64xf32>) -> tensor<2x4x64xf32>
  return
}

// -----

func.func @rope_rank(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{input must be [batch, seq, heads*head_dim], got 'tensor<8x64xf32>'}}
  %r = xf.rope %x {head_dim = 16 : i64, theta = 10000.0 : f64} : tensor<8x64xf32>
  return
}

// -----

func.func @rope_odd(%x: tensor<2x8x63xf32>) {
  // expected-error @+1 {{head_dim must be positive and even, got 7}}
  %r = xf.rope %x {head_dim = 7 : i64, theta = 10000.0 : f64} : tensor<2x8x63xf32>
  return
}

// -----

func.func @rope_rotary_dim_odd(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{rotary_dim must be even and in [2, head_dim = 16], got 5}}
  %r = xf.rope %x {head_dim = 16 : i64, theta = 10000.0 : f64, rotary_dim = 5 : i64} : tensor<2x8x64xf32>
  return
}

// -----

func.func @rope_rotary_dim_wide(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{rotary_dim must be even and in [2, head_dim = 16], got 18}}
  %r = xf.rope %x {head_dim = 16 : i64, theta = 10000.0 : f64, rotary_dim = 18 : i64} : tensor<2x8x64xf32>
  return
}

// -----

func.func @rope_grad_rotary_dim(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{rotary_dim must be even and in [2, head_dim = 16], got 0}}
  %r = xf.rope_grad %x {head_dim = 16 : i64, theta = 10000.0 : f64, rotary_dim = 0 : i64} : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @swiglu_activation(%g: tensor<2x8x64xf32>, %u: tensor<2x8x64xf32>) {
  // expected-error @+1 {{activation must be "silu" (SwiGLU) or "gelu_tanh" (GeGLU), got "relu"}}
  %r = xf.swiglu %g, %u {activation = "relu"} : tensor<2x8x64xf32>
  return
}

// -----

func.func @swiglu_grad_activation(%d: tensor<2x8x64xf32>, %g: tensor<2x8x64xf32>, %u: tensor<2x8x64xf32>) {
  // expected-error @+1 {{activation must be "silu" (SwiGLU) or "gelu_tanh" (GeGLU), got "gelu"}}
  %r:2 = xf.swiglu_grad %d, %g, %u {activation = "gelu"} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x64xf32>)
  return
}

// -----

func.func @embedding_scale_zero(%ids: tensor<2x8xi32>, %t: tensor<256x64xf32>) {
  // expected-error @+1 {{scale must be a finite, non-zero fp32 number, got 0}}
  %e = xf.embedding %ids, %t {scale = 0.0 : f64} : (tensor<2x8xi32>, tensor<256x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @embedding_grad_scale_inf(%ids: tensor<2x8xi32>, %d: tensor<2x8x64xf32>) {
  // expected-error @+1 {{scale must be a finite, non-zero fp32 number, got INF}}
  %e = xf.embedding_grad %ids, %d {scale = 0x7FF0000000000000 : f64} : (tensor<2x8xi32>, tensor<2x8x64xf32>) -> tensor<256x64xf32>
  return
}

// -----

// torch's nn.Embedding(padding_idx): a row of the table.
func.func @embedding_padding_idx_past_table(%ids: tensor<2x8xi32>, %t: tensor<256x64xf32>) {
  // expected-error @+1 {{padding_idx 256 is outside the table's 256 rows}}
  %e = xf.embedding %ids, %t {padding_idx = 256 : i64} : (tensor<2x8xi32>, tensor<256x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @embedding_padding_idx_negative(%ids: tensor<2x8xi32>, %t: tensor<256x64xf32>) {
  // expected-error @+1 {{attribute 'padding_idx' failed to satisfy constraint}}
  %e = xf.embedding %ids, %t {padding_idx = -1 : i64} : (tensor<2x8xi32>, tensor<256x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @embedding_grad_padding_idx_past_table(%ids: tensor<2x8xi32>, %d: tensor<2x8x64xf32>) {
  // expected-error @+1 {{padding_idx 300 is outside the table's 256 rows}}
  %e = xf.embedding_grad %ids, %d {padding_idx = 300 : i64} : (tensor<2x8xi32>, tensor<2x8x64xf32>) -> tensor<256x64xf32>
  return
}

// -----

// Finite as a double, not as the fp32 the kernels use: the runtime's rule (FloatAttrRules.h).
func.func @rms_norm_weight_offset_fp32(%x: tensor<2x8x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{weight_offset must be a finite fp32 number, got 1.000000e+39}}
  %y = xf.rms_norm %x, %w {eps = 1.0e-06 : f64, weight_offset = 1.0e39 : f64} : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @rms_norm_weight_offset(%x: tensor<2x8x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{weight_offset must be a finite fp32 number, got nan}}
  %y = xf.rms_norm %x, %w {eps = 1.0e-06 : f64, weight_offset = 0x7FF8000000000000 : f64} : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @rope_multiple(%x: tensor<2x8x60xf32>) {
  // expected-error @+1 {{last dimension 60 is not a multiple of head_dim 16}}
  %r = xf.rope %x {head_dim = 16 : i64, theta = 10000.0 : f64} : tensor<2x8x60xf32>
  return
}

// -----

func.func @rope_theta(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{theta must be a positive number in the normal fp32 range [1.17549435e-38, 3.40282347e+38] (the runtime computes RoPE frequencies in fp32), got 0}}
  %r = xf.rope %x {head_dim = 16 : i64, theta = 0.0 : f64} : tensor<2x8x64xf32>
  return
}

// -----

// A double subnormal is positive but 0 in fp32: the runtime would refuse the plan (issue #16).
func.func @rope_theta_subnormal(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{theta must be a positive number in the normal fp32 range}}
  %r = xf.rope %x {head_dim = 16 : i64, theta = 4.9406564584124654e-324 : f64} : tensor<2x8x64xf32>
  return
}

// -----

// The backward carries the forward's theta; the runtime's rope_bwd checks it the same way.
func.func @rope_grad_theta(%x: tensor<2x4x16xf32>) {
  // expected-error @+1 {{'xf.rope_grad' op theta must be a positive number in the normal fp32 range}}
  %r = xf.rope_grad %x {head_dim = 8 : i64, theta = 1.0e39 : f64} : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  return
}

// -----

func.func @rope_scaling_type(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{scaling.rope_type must be "llama3"}}
  %r = xf.rope %x {head_dim = 16 : i64, theta = 10000.0 : f64, scaling = {rope_type = "yarn"}} : tensor<2x8x64xf32>
  return
}

// -----

func.func @rope_scaling_key(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{scaling.low_freq_factor must be a positive float}}
  %r = xf.rope %x {head_dim = 16 : i64, theta = 10000.0 : f64, scaling = {rope_type = "llama3", factor = 8.0 : f64, high_freq_factor = 4.0 : f64, original_max_position_embeddings = 8192.0 : f64}} : tensor<2x8x64xf32>
  return
}

// -----

// low_freq_factor above high_freq_factor (issue #31: 4096.5 compiled, then the runtime refused the plan):
// one rule for the compiler and the runtime (rt::schema::ropeScalingValid).
func.func @rope_scaling_order(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor (as fp32 values) and original_max_position_embeddings > 0}}
  %r = xf.rope %x {head_dim = 16 : i64, theta = 10000.0 : f64, scaling = {rope_type = "llama3", factor = 8.0 : f64, low_freq_factor = 4096.5 : f64, high_freq_factor = 4.0 : f64, original_max_position_embeddings = 8192.0 : f64}} : tensor<2x8x64xf32>
  return
}

// -----

func.func @ln_weight(%x: tensor<2x8x64xf32>, %w: tensor<32xf32>, %b: tensor<64xf32>) {
  // expected-error @+1 {{weight must be tensor<64x...> (the input's last dimension), got 'tensor<32xf32>'}}
  %y = xf.layer_norm %x, %w, %b {eps = 1.0e-5 : f64} : (tensor<2x8x64xf32>, tensor<32xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @ln_bias(%x: tensor<2x8x64xf32>, %w: tensor<64xf32>, %b: tensor<64x1xf32>) {
  // expected-error @+1 {{bias must be tensor<64x...> (the input's last dimension), got 'tensor<64x1xf32>'}}
  %y = xf.layer_norm %x, %w, %b {eps = 1.0e-5 : f64} : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64x1xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @ln_weight_of_another_width(%x: tensor<2x8x64xf32>, %w: tensor<32xf32>) {
  // expected-error @+1 {{weight must be tensor<64x...> (the input's last dimension), got 'tensor<32xf32>'}}
  %y = xf.layer_norm %x, %w {eps = 1.0e-5 : f64} : (tensor<2x8x64xf32>, tensor<32xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @ln_bias_without_weight(%x: tensor<2x8x64xf32>, %b: tensor<64xf32>) {
  // expected-error @+1 {{has a bias but no weight: give both (an affine LayerNorm), the weight alone (no bias) or neither (none)}}
  %y = "xf.layer_norm"(%x, %b) <{eps = 1.0e-5 : f64, operandSegmentSizes = array<i32: 1, 0, 1>}> : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @ln_eps(%x: tensor<2x8x64xf32>, %w: tensor<64xf32>, %b: tensor<64xf32>) {
  // expected-error @+1 {{eps must be > 0, got 0}}
  %y = xf.layer_norm %x, %w, %b {eps = 0.0 : f64} : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @ln_scalar(%x: tensor<f32>, %w: tensor<1xf32>, %b: tensor<1xf32>) {
  // expected-error @+1 {{input must have rank >= 1}}
  %y = xf.layer_norm %x, %w, %b {eps = 1.0e-5 : f64} : (tensor<f32>, tensor<1xf32>, tensor<1xf32>) -> tensor<f32>
  return
}

// -----

func.func @rms_weight(%x: tensor<2x8x64xf32>, %w: tensor<63xf32>) {
  // expected-error @+1 {{weight must be tensor<64x...> (the input's last dimension), got 'tensor<63xf32>'}}
  %y = xf.rms_norm %x, %w {eps = 1.0e-5 : f64} : (tensor<2x8x64xf32>, tensor<63xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @rms_dtype(%x: tensor<2x8x64xf32>, %w: tensor<64xbf16>) {
  // expected-error @+1 {{expects one element type for all float operands and results, got 'f32' and 'bf16'}}
  %y = xf.rms_norm %x, %w {eps = 1.0e-5 : f64} : (tensor<2x8x64xf32>, tensor<64xbf16>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @linear_rank(%x: tensor<2x8x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{weight must be rank 2, got 'tensor<64xf32>'}}
  %y = xf.linear out_in %x, %w : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @linear_layout(%x: tensor<2x8x64xf32>, %w: tensor<64x128xf32>) {
  // expected-error @+1 {{weight 'tensor<64x128xf32>' in layout out_in has in-features 128 but the input has 64}}
  %y = xf.linear out_in %x, %w : (tensor<2x8x64xf32>, tensor<64x128xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @linear_bias(%x: tensor<2x8x64xf32>, %w: tensor<64x128xf32>, %b: tensor<64xf32>) {
  // expected-error @+1 {{bias must be tensor<128x...> (the input's last dimension), got 'tensor<64xf32>'}}
  %y = xf.linear in_out %x, %w, %b : (tensor<2x8x64xf32>, tensor<64x128xf32>, tensor<64xf32>) -> tensor<2x8x128xf32>
  return
}

// -----

func.func @linear_result(%x: tensor<2x8x64xf32>, %w: tensor<64x128xf32>) {
  // expected-error @+1 {{result must have shape [2, 8, 128], got 'tensor<2x8x64xf32>'}}
  %y = xf.linear in_out %x, %w : (tensor<2x8x64xf32>, tensor<64x128xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @linear_dtype(%x: tensor<2x8x64xbf16>, %w: tensor<128x64xf32>) {
  // expected-error @+1 {{expects one element type for all float operands and results, got 'bf16' and 'f32'}}
  %y = xf.linear out_in %x, %w : (tensor<2x8x64xbf16>, tensor<128x64xf32>) -> tensor<2x8x128xbf16>
  return
}

// -----

func.func @split_sum(%x: tensor<2x8x96xf32>) {
  // expected-error @+1 {{results' last dimensions sum to 64, the input's is 96}}
  %a, %b = xf.split %x : tensor<2x8x96xf32> -> tensor<2x8x32xf32>, tensor<2x8x32xf32>
  return
}

// -----

func.func @clamp_limit(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{limit must be a positive fp32 number (finite, non-zero), got 1.000000e+39}}
  %y = xf.clamp %x {limit = 1.0e39 : f64} : tensor<2x8xf32>
  return
}

// -----

func.func @scale_zero(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{factor must be a finite, non-zero fp32 number, got 0.000000e+00}}
  %y = xf.scale %x {factor = 0.0 : f64} : tensor<2x8xf32>
  return
}

// -----

func.func @scale_fp32(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{factor must be a finite, non-zero fp32 number, got 1.000000e+39}}
  %y = xf.scale %x {factor = 1.0e39 : f64} : tensor<2x8xf32>
  return
}

// -----

func.func @clamp_negative(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{limit must be a positive fp32 number (finite, non-zero), got -1.000000e+00}}
  %y = xf.clamp_grad %x, %x {limit = -1.0 : f64} : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @split_groups(%x: tensor<2x8x96xf32>) {
  // expected-error @+1 {{the last dimension of result 'tensor<2x8x48xf32>' is not a multiple of groups = 5}}
  %a, %b = xf.split %x {groups = 5 : i64} : tensor<2x8x96xf32> -> tensor<2x8x48xf32>, tensor<2x8x48xf32>
  return
}

// -----

func.func @split_no_groups(%x: tensor<2x8x96xf32>) {
  // expected-error @+1 {{attribute 'groups' failed to satisfy constraint}}
  %a, %b = xf.split %x {groups = 0 : i64} : tensor<2x8x96xf32> -> tensor<2x8x48xf32>, tensor<2x8x48xf32>
  return
}

// -----

func.func @concat_groups(%a: tensor<2x8xf32>, %b: tensor<2x4xf32>) {
  // expected-error @+1 {{the last dimension of input 'tensor<2x4xf32>' is not a multiple of groups = 8}}
  %c = xf.concat %a, %b {groups = 8 : i64} : (tensor<2x8xf32>, tensor<2x4xf32>) -> tensor<2x12xf32>
  return
}

// -----

func.func @split_prefix(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{result 'tensor<2x4x32xf32>' differs from the input 'tensor<2x8x64xf32>' outside the last dimension}}
  %a, %b = xf.split %x : tensor<2x8x64xf32> -> tensor<2x8x32xf32>, tensor<2x4x32xf32>
  return
}

// -----

func.func @attention_heads(%q: tensor<2x8x64xf32>) {
  // expected-error @+1 {{num_heads, num_kv_heads and head_dim must be > 0}}
  %a = xf.attention %q, %q, %q {num_heads = 0 : i64, num_kv_heads = 4 : i64, head_dim = 16 : i64} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @attention_gqa(%q: tensor<2x8x64xf32>, %kv: tensor<2x8x48xf32>) {
  // expected-error @+1 {{num_kv_heads 3 must divide num_heads 4}}
  %a = xf.attention %q, %kv, %kv {num_heads = 4 : i64, num_kv_heads = 3 : i64, head_dim = 16 : i64} : (tensor<2x8x64xf32>, tensor<2x8x48xf32>, tensor<2x8x48xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @attention_alibi_heads(%q: tensor<2x8x64xf32>, %kv: tensor<2x8x32xf32>) {
  // expected-error @+1 {{alibi_heads 6 must be a multiple of num_heads 4 (the model's heads, of which the op holds a slice)}}
  %a = xf.attention %q, %kv, %kv {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, alibi_heads = 6 : i64} : (tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @attention_alibi_zero(%q: tensor<2x8x64xf32>, %kv: tensor<2x8x32xf32>) {
  // expected-error @+1 {{attribute 'alibi_heads' failed to satisfy constraint}}
  %a = xf.attention %q, %kv, %kv {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, alibi_heads = 0 : i64} : (tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @attention_q(%q: tensor<2x8x64xf32>, %kv: tensor<2x8x32xf32>) {
  // expected-error @+1 {{q's last dimension must be num_heads*head_dim = 128, got 64}}
  %a = xf.attention %q, %kv, %kv {num_heads = 8 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : (tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @attention_kv(%q: tensor<2x8x64xf32>, %kv: tensor<2x8x64xf32>) {
  // expected-error @+1 {{k and v's last dimension must be num_kv_heads*head_dim = 32, got 64 and 64}}
  %a = xf.attention %q, %kv, %kv {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @attention_rank(%q: tensor<2x8x64xf32>, %kv: tensor<16x32xf32>) {
  // expected-error @+1 {{k must be [batch, seq, heads*head_dim], got 'tensor<16x32xf32>'}}
  %a = xf.attention %q, %kv, %kv {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : (tensor<2x8x64xf32>, tensor<16x32xf32>, tensor<16x32xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @attention_batch(%q: tensor<2x8x64xf32>, %kv: tensor<2x4x32xf32>) {
  // expected-error @+1 {{k has batch/seq dims different from q: 'tensor<2x4x32xf32>' vs 'tensor<2x8x64xf32>'}}
  %a = xf.attention %q, %kv, %kv {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : (tensor<2x8x64xf32>, tensor<2x4x32xf32>, tensor<2x4x32xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @attention_result(%q: tensor<2x8x64xf32>, %kv: tensor<2x8x32xf32>) {
  // expected-error @+1 {{result type must equal q's type 'tensor<2x8x64xf32>'}}
  %a = xf.attention %q, %kv, %kv {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : (tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  return
}

// -----

func.func @attention_dtype(%q: tensor<2x8x64xf32>, %kv: tensor<2x8x32xbf16>) {
  // expected-error @+1 {{expects one element type for all float operands and results, got 'f32' and 'bf16'}}
  %a = xf.attention %q, %kv, %kv {num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : (tensor<2x8x64xf32>, tensor<2x8x32xbf16>, tensor<2x8x32xbf16>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @ce_shape(%l: tensor<2x8x256xf32>, %t: tensor<2x4xi32>) {
  // expected-error @+1 {{logits must be targets' shape + [vocab]; got logits 'tensor<2x8x256xf32>' and targets 'tensor<2x4xi32>'}}
  %loss = xf.cross_entropy %l, %t : (tensor<2x8x256xf32>, tensor<2x4xi32>) -> tensor<f32>
  return
}

// -----

func.func @ce_result(%l: tensor<2x8x256xf32>, %t: tensor<2x8xi32>) {
  // expected-error @+1 {{result #0 must be 0D tensor of 32-bit float values}}
  %loss = xf.cross_entropy %l, %t : (tensor<2x8x256xf32>, tensor<2x8xi32>) -> tensor<2xf32>
  return
}

// -----

func.func @swiglu_types(%a: tensor<4xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{requires the same type for all operands and results}}
  %y = "xf.swiglu"(%a, %b) : (tensor<4xf32>, tensor<8xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @ln_stats(%x: tensor<2x8x64xf32>, %w: tensor<64xf32>, %b: tensor<64xf32>) {
  // expected-error @+1 {{stats must have shape [2, 16], got 'tensor<16xf32>'}}
  %y, %s = xf.layer_norm %x, %w, %b {eps = 1.0e-5 : f64} : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>) -> (tensor<2x8x64xf32>, tensor<16xf32>)
  return
}

// -----

func.func @attention_lse(%q: tensor<2x8x64xf32>) {
  // expected-error @+1 {{lse must have shape [2, 4, 8], got 'tensor<2x8x4xf32>'}}
  %a, %l = xf.attention %q, %q, %q {num_heads = 4 : i64, num_kv_heads = 4 : i64, head_dim = 16 : i64} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x4xf32>)
  return
}

// -----

func.func @linear_grad_input(%dy: tensor<2x8xf32>, %w: tensor<8x16xf32>) {
  // expected-error @+1 {{weight 'tensor<8x16xf32>' does not map dy's 8 features to dx's 8 in layout in_out}}
  %dx = xf.linear_grad_input in_out %dy, %w : (tensor<2x8xf32>, tensor<8x16xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @linear_grad_weight(%dy: tensor<2x8xf32>, %x: tensor<2x16xf32>) {
  // expected-error @+1 {{result must have the weight's shape [8, 16], got 'tensor<16x8xf32>'}}
  %dw = xf.linear_grad_weight out_in %dy, %x : (tensor<2x8xf32>, tensor<2x16xf32>) -> tensor<16x8xf32>
  return
}

// -----

func.func @linear_grad_bias(%dy: tensor<2x8xf32>) {
  // expected-error @+1 {{result must have shape [8], got 'tensor<16xf32>'}}
  %db = xf.linear_grad_bias %dy : (tensor<2x8xf32>) -> tensor<16xf32>
  return
}

// -----

func.func @embedding_grad(%ids: tensor<2x4xi32>, %dy: tensor<2x4x16xf32>) {
  // expected-error @+1 {{result must be [vocab, 16], got 'tensor<32x8xf32>'}}
  %d = xf.embedding_grad %ids, %dy : (tensor<2x4xi32>, tensor<2x4x16xf32>) -> tensor<32x8xf32>
  return
}

// -----

func.func @pos_grad(%dy: tensor<2x4x16xf32>) {
  // expected-error @+1 {{expects dy [B, S, H] and a result [P, H] with P >= S}}
  %d = xf.add_position_embedding_grad %dy : (tensor<2x4x16xf32>) -> tensor<2x16xf32>
  return
}

// -----

func.func @concat(%a: tensor<2x8xf32>, %b: tensor<2x8xf32>) {
  // expected-error @+1 {{inputs' last dimensions sum to 16, the result's is 12}}
  %c = xf.concat %a, %b : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x12xf32>
  return
}

// -----

func.func @accumulate_outside(%g: tensor<8xf32>) {
  // expected-error @+1 {{parameter 'h.{i}.w' uses the '{i}' placeholder outside a function marked 'xf.layer_body'}}
  xf.accumulate_grad "h.{i}.w", %g : tensor<8xf32>
  return
}

// -----

func.func @adamw_beta() {
  // expected-error @+1 {{beta1 and beta2 must be in [0, 1), got 1.000000e+00 and 9.990000e-01}}
  xf.adamw {beta1 = 1.0 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64}
  return
}

// -----

func.func @adamw_eps() {
  // expected-error @+1 {{eps must be > 0}}
  xf.adamw {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 0.0 : f64, weight_decay = 0.0 : f64}
  return
}

// -----

func.func @sgd_momentum() {
  // expected-error @+1 {{momentum must be >= 0, got -1.000000e-01}}
  xf.sgd {momentum = -0.1 : f64, weight_decay = 0.0 : f64}
  return
}

// -----

func.func @clip() {
  // expected-error @+1 {{max_norm must be >= 0, got -1.000000e+00}}
  xf.clip_grad_norm {max_norm = -1.0 : f64}
  return
}

// -----

func.func @f(%logits: tensor<2x3x8xf32>, %t: tensor<2x3xi32>) -> tensor<f32> {
  // expected-error @+1 {{real_vocab must be in [1, 8] (the logits' columns), got 9}}
  %loss = xf.cross_entropy %logits, %t {real_vocab = 9 : i64} : (tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// A collective's origin is one of the kinds the reports know (xf::CollectiveOrigin).
func.func @collective_origin(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{attribute 'origin' failed to satisfy constraint: string attribute that names a collective origin (row_parallel,}}
  %y = xf.all_reduce %x {axis = "tp", origin = "row-parallel", reason = "r"} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// xf.model's vocab_size against the token embedding's rows (issue #16: a hand-edited vocab_size
// compiled to a plan the runtime refused mid-step, token ids past the table).
module attributes {xf.model = {vocab_size = 300 : i64}} {
  func.func @vocab_rows(%ids: tensor<2x8xi32>) -> tensor<2x8x64xf32> {
    %w = xf.param "wte" : tensor<256x64xf32>
    // expected-error @+1 {{'xf.embedding' op table 'wte' has 256 rows but the module's xf.model vocab_size is 300 (one row per token id): the plan would give the runtime a table too short for its token ids; make them agree (vocab_size in 'xf.model' or the table's shape), or recompile from the model's config.json}}
    %e = xf.embedding %ids, %w : (tensor<2x8xi32>, tensor<256x64xf32>) -> tensor<2x8x64xf32>
    return %e : tensor<2x8x64xf32>
  }
}

// -----

// Under vocabulary padding the rows are padded_vocab_size (after llcdist-partition, the global ones).
module attributes {xf.model = {vocab_size = 250 : i64}, xf.vocab_padding = {multiple = 128 : i64, padded_vocab_size = 256 : i64, params = ["wte"], vocab_size = 250 : i64}} {
  func.func @padded_rows(%ids: tensor<2x8xi32>) -> tensor<2x8x64xf32> {
    %w = xf.param "wte" {xf.sharding = {axis = "tp", blocks = 1 : i64, dim = 0 : i64, global_shape = array<i64: 384, 64>}} : tensor<192x64xf32>
    // expected-error @+1 {{table 'wte' has 384 rows but the module's xf.vocab_padding padded_vocab_size is 256}}
    %e = xf.embedding %ids, %w {xf.vocab_parallel_axis = "tp"} : (tensor<2x8xi32>, tensor<192x64xf32>) -> tensor<2x8x64xf32>
    return %e : tensor<2x8x64xf32>
  }
}

// -----

// expected-error @+1 {{'xf.vocab_padding' vocab_size = 250 disagrees with 'xf.model' vocab_size = 251}}
module attributes {xf.model = {vocab_size = 251 : i64}, xf.vocab_padding = {multiple = 128 : i64, padded_vocab_size = 256 : i64, params = ["wte"], vocab_size = 250 : i64}} {
}

// -----

// expected-error @+1 {{'xf.model' vocab_size must be a positive integer, got 0 : i64}}
module attributes {xf.model = {vocab_size = 0 : i64}} {
}

// -----

// The training shape's counts (issue #31: microbatches = 2^63-1 in a
// hand-edited module made compile run for more than 20 s).
// expected-error @+1 {{'xf.model' microbatches must be an integer in [1, 65536] (global_batch / (micro_batch · dp)), got 9223372036854775807 : i64}}
module attributes {xf.model = {microbatches = 9223372036854775807 : i64}} {
}

// -----

// expected-error @+1 {{'xf.model' microbatches must be an integer in [1, 65536] (global_batch / (micro_batch · dp)), got 0 : i64}}
module attributes {xf.model = {microbatches = 0 : i64}} {
}

// -----

// expected-error @+1 {{'xf.model' global_batch must be a positive integer, got -4 : i64}}
module attributes {xf.model = {global_batch = -4 : i64}} {
}

// -----

// expected-error @+1 {{'xf.model' must be a dictionary on the builtin.module, got "gpt2" on 'builtin.module'}}
module attributes {xf.model = "gpt2"} {
}

// -----

func.func @all_to_all_same_dims(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{split_dim 1 and concat_dim 1 must be two different dimensions}}
  %h = xf.all_to_all %x {axis = "cp", concat_dim = 1 : i64, origin = "context_parallel", reason = "r", split_dim = 1 : i64} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return
}

// -----

func.func @all_to_all_unbalanced(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{is not 'tensor<2x4x8xf32>' split along dim 2 and gathered along dim 1 over the same members}}
  %h = xf.all_to_all %x {axis = "cp", concat_dim = 1 : i64, origin = "context_parallel", reason = "r", split_dim = 2 : i64} : (tensor<2x4x8xf32>) -> tensor<2x8x2xf32>
  return
}

// -----

func.func @all_to_all_axis(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{axis must be dp, tp, pp, cp, ep or edp, got 'xp'}}
  %h = xf.all_to_all %x {axis = "xp", concat_dim = 1 : i64, origin = "context_parallel", reason = "r", split_dim = 2 : i64} : (tensor<2x4x8xf32>) -> tensor<2x8x4xf32>
  return
}

// -----

func.func @moe_dispatch_axis(%x: tensor<8x4xf32>, %g: tensor<4xi32>) {
  // expected-error @+1 {{axis must be ep, got 'dp'}}
  %r, %s, %l = xf.moe_dispatch %x, %g {axis = "dp", origin = "expert_parallel", reason = "r"} : (tensor<8x4xf32>, tensor<4xi32>) -> (tensor<16x4xf32>, tensor<4xi32>, tensor<2xi32>)
  return
}

// -----

func.func @moe_dispatch_counts(%x: tensor<8x4xf32>, %g: tensor<4xi32>) {
  // expected-error @+1 {{expects group_sizes and recv_splits [E] and local_sizes [E/n]}}
  %r, %s, %l = xf.moe_dispatch %x, %g {axis = "ep", origin = "expert_parallel", reason = "r"} : (tensor<8x4xf32>, tensor<4xi32>) -> (tensor<16x4xf32>, tensor<4xi32>, tensor<3xi32>)
  return
}

// -----

func.func @moe_dispatch_rows(%x: tensor<8x4xf32>, %g: tensor<4xi32>) {
  // expected-error @+1 {{expects rows [N, H] in and out with the same H}}
  %r, %s, %l = xf.moe_dispatch %x, %g {axis = "ep", origin = "expert_parallel", reason = "r"} : (tensor<8x4xf32>, tensor<4xi32>) -> (tensor<16x8xf32>, tensor<4xi32>, tensor<2xi32>)
  return
}

// -----

func.func @moe_combine_experts(%x: tensor<16x4xf32>, %s: tensor<4xi32>) {
  // expected-error @+1 {{expects recv_splits [E] with E a multiple of local_experts 3}}
  %r = xf.moe_combine %x, %s {axis = "ep", local_experts = 3 : i64, origin = "expert_parallel", reason = "r"} : (tensor<16x4xf32>, tensor<4xi32>) -> tensor<8x4xf32>
  return
}

// -----

func.func @moe_permute_capacity(%x: tensor<2x4x8xf32>, %e: tensor<2x4x2xi32>) {
  // expected-error @+1 {{with capacity 3 the result must be [n·experts·capacity, H]}}
  %r, %s, %g = xf.moe_permute %x, %e {capacity = 3 : i64} : (tensor<2x4x8xf32>, tensor<2x4x2xi32>) -> (tensor<16x8xf32>, tensor<2x4x2xi32>, tensor<4xi32>)
  return
}

// -----

func.func @moe_route_top_k(%l: tensor<2x8x4xf32>) {
  // expected-error @+1 {{top_k=5 is more than the 4 experts}}
  %w, %e = xf.moe_route %l {top_k = 5 : i64} : tensor<2x8x4xf32> -> tensor<2x8x5xf32>, tensor<2x8x5xi32>
  return
}

// -----

func.func @moe_route_shapes(%l: tensor<2x8x4xf32>) {
  // expected-error @+1 {{weights and experts must be the logits' shape with top_k=2 last}}
  %w, %e = xf.moe_route %l {top_k = 2 : i64} : tensor<2x8x4xf32> -> tensor<2x8x3xf32>, tensor<2x8x2xi32>
  return
}

// -----

func.func @moe_permute_rows(%x: tensor<2x8x64xf32>, %e: tensor<2x8x2xi32>) {
  // expected-error @+1 {{result must be [tokens·k = 32, H]}}
  %r:3 = xf.moe_permute %x, %e : (tensor<2x8x64xf32>, tensor<2x8x2xi32>) -> (tensor<16x64xf32>, tensor<2x8x2xi32>, tensor<4xi32>)
  return
}

// -----

func.func @moe_unpermute_weights(%r: tensor<32x64xf32>, %s: tensor<2x8x2xi32>, %w: tensor<2x8x3xf32>) {
  // expected-error @+1 {{weights must have the slots' shape}}
  %y = xf.moe_unpermute %r, %s, %w : (tensor<32x64xf32>, tensor<2x8x2xi32>, tensor<2x8x3xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @grouped_linear_experts(%x: tensor<32x64xf32>, %w: tensor<4x16x64xf32>, %s: tensor<3xi32>) {
  // expected-error @+1 {{expects input [N, K], weight [E, O, K] and group_sizes [E]}}
  %y = xf.grouped_linear %x, %w, %s : (tensor<32x64xf32>, tensor<4x16x64xf32>, tensor<3xi32>) -> tensor<32x16xf32>
  return
}

// -----

func.func @sigmoid_gate_shape(%g: tensor<2x8x2xf32>, %x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{expects gate [..., 1] and input [..., H] over the same tokens}}
  %y = xf.sigmoid_gate %g, %x : (tensor<2x8x2xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @expert_param_rank() {
  // expected-error @+1 {{along its first dimension, so it needs rank >= 2}}
  %w = xf.param "experts.{e}.bias" : tensor<4xf32>
  return
}

// -----

func.func @moe_router_stats_experts(%l: tensor<2x8x4xf32>, %e: tensor<2x8x2xi32>, %c: tensor<5xi32>, %s: tensor<4xf32>) {
  // expected-error @+1 {{counts must be [4] (one per expert), got 'tensor<5xi32>'}}
  %c1, %s1 = xf.moe_router_stats %l, %e, %c, %s : tensor<2x8x4xf32>, tensor<2x8x2xi32>, tensor<5xi32>, tensor<4xf32>
  return
}

// -----

func.func @moe_router_stats_tokens(%l: tensor<2x8x4xf32>, %e: tensor<2x4x2xi32>, %c: tensor<4xi32>, %s: tensor<4xf32>) {
  // expected-error @+1 {{expects logits [..., E] and experts [..., k] over the same tokens}}
  %c1, %s1 = xf.moe_router_stats %l, %e, %c, %s : tensor<2x8x4xf32>, tensor<2x4x2xi32>, tensor<4xi32>, tensor<4xf32>
  return
}

// -----

func.func @moe_aux_loss_coef(%loss: tensor<f32>, %c: tensor<4xi32>, %s: tensor<4xf32>) {
  // expected-error @+1 {{coef must be in (0, 1e6]}}
  %t = xf.moe_aux_loss %loss, %c, %s {coef = -1.0 : f64, top_k = 2 : i64} : tensor<f32>, tensor<4xi32>, tensor<4xf32>
  return
}

// -----

func.func @moe_aux_loss_probs(%loss: tensor<f32>, %c: tensor<4xi32>, %s: tensor<8xf32>) {
  // expected-error @+1 {{probs must be [4] (one per expert), got 'tensor<8xf32>'}}
  %t = xf.moe_aux_loss %loss, %c, %s {coef = 0.02 : f64, top_k = 2 : i64} : tensor<f32>, tensor<4xi32>, tensor<8xf32>
  return
}
