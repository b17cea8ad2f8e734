// RUN: llc-dist-opt %s | llc-dist-opt | FileCheck %s
// RUN: llc-dist-opt %s --mlir-print-op-generic | llc-dist-opt | FileCheck %s
// The backward and optimizer ops round-trip.

// CHECK-LABEL: func.func @grads
func.func @grads(%dy: tensor<2x4x8xf32>, %x: tensor<2x4x16xf32>, %w: tensor<8x16xf32>,
                 %ids: tensor<2x4xi32>, %st: tensor<2x8xf32>, %rs: tensor<8xf32>,
                 %g: tensor<16xf32>, %lse: tensor<2x2x4xf32>) {
  // CHECK: xf.linear_grad_input out_in %{{.+}}, %{{.+}} : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %dx = xf.linear_grad_input out_in %dy, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  // CHECK: xf.linear_grad_weight out_in %{{.+}}, %{{.+}} : (tensor<2x4x8xf32>, tensor<2x4x16xf32>) -> tensor<8x16xf32>
  %dw = xf.linear_grad_weight out_in %dy, %x : (tensor<2x4x8xf32>, tensor<2x4x16xf32>) -> tensor<8x16xf32>
  // CHECK: xf.linear_grad_bias %{{.+}} : (tensor<2x4x8xf32>) -> tensor<8xf32>
  %db = xf.linear_grad_bias %dy : (tensor<2x4x8xf32>) -> tensor<8xf32>
  // CHECK: xf.embedding_grad %{{.+}}, %{{.+}} : (tensor<2x4xi32>, tensor<2x4x16xf32>) -> tensor<32x16xf32>
  %de = xf.embedding_grad %ids, %x : (tensor<2x4xi32>, tensor<2x4x16xf32>) -> tensor<32x16xf32>
  // CHECK: xf.add_position_embedding_grad %{{.+}} : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
  %dp = xf.add_position_embedding_grad %x : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
  // CHECK: xf.add_position_embedding_grad %{{.+}} {offset = 4 : i64} : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
  %dpo = xf.add_position_embedding_grad %x {offset = 4 : i64} : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
  // CHECK: xf.layer_norm_grad_input
  %a = xf.layer_norm_grad_input %x, %x, %g, %st : (tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<16xf32>, tensor<2x8xf32>) -> tensor<2x4x16xf32>
  // CHECK: xf.layer_norm_grad_input %{{.+}}, %{{.+}}, %{{.+}} : (tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x8xf32>) -> tensor<2x4x16xf32>
  %a0 = xf.layer_norm_grad_input %x, %x, %st : (tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x8xf32>) -> tensor<2x4x16xf32>
  // CHECK: xf.layer_norm_grad_params
  %b:2 = xf.layer_norm_grad_params %x, %x, %st : (tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x8xf32>) -> (tensor<16xf32>, tensor<16xf32>)
  // Without a bias (MPT's LayerNorm): dweight alone.
  // CHECK: xf.layer_norm_grad_params %{{.+}}, %{{.+}}, %{{.+}} : (tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x8xf32>) -> tensor<16xf32>
  %bw = xf.layer_norm_grad_params %x, %x, %st : (tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x8xf32>) -> tensor<16xf32>
  // CHECK: xf.rms_norm_grad_input
  %c = xf.rms_norm_grad_input %x, %x, %g, %rs : (tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<16xf32>, tensor<8xf32>) -> tensor<2x4x16xf32>
  // CHECK: xf.rms_norm_grad_weight
  %d = xf.rms_norm_grad_weight %x, %x, %rs : (tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<8xf32>) -> tensor<16xf32>
  // CHECK: xf.rope_grad %{{.+}} {head_dim = 8 : i64, theta = 1.000000e+04 : f64}
  %r = xf.rope_grad %x {head_dim = 8 : i64, theta = 10000.0 : f64} : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  // CHECK: xf.rope_grad %{{.+}} {head_dim = 8 : i64, interleaved, theta = 1.000000e+04 : f64}
  %ri = xf.rope_grad %x {head_dim = 8 : i64, theta = 10000.0 : f64, interleaved} : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  // CHECK: xf.attention_grad
  %q:3 = xf.attention_grad %x, %x, %dy, %dy, %x, %lse {num_heads = 2 : i64, num_kv_heads = 1 : i64, head_dim = 8 : i64} : (tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x16xf32>, tensor<2x2x4xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>)
  // CHECK: xf.gelu_tanh_grad
  %e = xf.gelu_tanh_grad %x, %x : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  // CHECK: xf.gelu_erf_grad
  %ee = xf.gelu_erf_grad %x, %x : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  // CHECK: xf.relu_grad
  %rg = xf.relu_grad %x, %x : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  // CHECK: xf.clamp_grad {{.+}} {limit = 5.000000e-01 : f64}
  %cg = xf.clamp_grad %x, %x {limit = 0.5 : f64} : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  // CHECK: xf.swiglu_grad
  %f:2 = xf.swiglu_grad %x, %x, %x : (tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x16xf32>)
  // CHECK: xf.concat %{{.+}}, %{{.+}} : (tensor<2x4x8xf32>, tensor<2x4x16xf32>) -> tensor<2x4x24xf32>
  %cat = xf.concat %dy, %x : (tensor<2x4x8xf32>, tensor<2x4x16xf32>) -> tensor<2x4x24xf32>
  // CHECK: xf.concat %{{.+}}, %{{.+}} {groups = 4 : i64} : (tensor<2x4x8xf32>, tensor<2x4x16xf32>) -> tensor<2x4x24xf32>
  %gcat = xf.concat %dy, %x {groups = 4 : i64} : (tensor<2x4x8xf32>, tensor<2x4x16xf32>) -> tensor<2x4x24xf32>
  // CHECK: xf.cross_entropy_grad %{{.+}}, %{{.+}} {scale = 1.250000e-01 : f64}
  %dl = xf.cross_entropy_grad %x, %ids {scale = 0.125 : f64} : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<2x4x16xf32>
  // CHECK: xf.accumulate_grad "w", %{{.+}} : tensor<8x16xf32>
  xf.accumulate_grad "w", %dw : tensor<8x16xf32>
  return
}

// CHECK-LABEL: func.func @optimizer
func.func @optimizer() attributes {xf.optimizer} {
  // CHECK: xf.clip_grad_norm {max_norm = 1.000000e+00 : f64}
  xf.clip_grad_norm {max_norm = 1.0 : f64}
  // CHECK: xf.adamw {beta1 = 9.000000e-01 : f64, beta2 = 0.94999999999999996 : f64, eps = 1.000000e-08 : f64, weight_decay = 1.000000e-01 : f64}
  xf.adamw {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64}
  // CHECK: xf.sgd {momentum = 0.000000e+00 : f64, weight_decay = 0.000000e+00 : f64}
  xf.sgd {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
  return
}

// The collectives carry their reason and its kind.
// CHECK-LABEL: func.func @collectives
func.func @collectives(%x: tensor<2x4x8xf32>) {
  // CHECK: xf.all_reduce %{{.+}} {axis = "tp", origin = "row_parallel", reason = "r"} : tensor<2x4x8xf32>
  %a = xf.all_reduce %x {axis = "tp", origin = "row_parallel", reason = "r"} : tensor<2x4x8xf32>
  // CHECK: xf.reduce_scatter %{{.+}} {axis = "tp", dim = 1 : i64, origin = "row_parallel", reason = "r"}
  %s = xf.reduce_scatter %x {axis = "tp", dim = 1 : i64, origin = "row_parallel", reason = "r"} : (tensor<2x4x8xf32>) -> tensor<2x2x8xf32>
  // CHECK: xf.all_gather %{{.+}} {axis = "tp", dim = 1 : i64, origin = "sequence_parallel", reason = "r"}
  %g = xf.all_gather %s {axis = "tp", dim = 1 : i64, origin = "sequence_parallel", reason = "r"} : (tensor<2x2x8xf32>) -> tensor<2x4x8xf32>
  // Context parallelism's all-to-all: the sequence split to the heads split and back.
  // CHECK: xf.all_to_all %{{.+}} {axis = "cp", concat_dim = 1 : i64, origin = "context_parallel", reason = "r", split_dim = 2 : i64} : (tensor<2x4x8xf32>) -> tensor<2x8x4xf32>
  %h = xf.all_to_all %x {axis = "cp", concat_dim = 1 : i64, origin = "context_parallel", reason = "r", split_dim = 2 : i64} : (tensor<2x4x8xf32>) -> tensor<2x8x4xf32>
  // CHECK: xf.all_to_all %{{.+}} {axis = "cp", concat_dim = 2 : i64, origin = "context_parallel", reason = "r", split_dim = 1 : i64} : (tensor<2x8x4xf32>) -> tensor<2x4x8xf32>
  %q = xf.all_to_all %h {axis = "cp", concat_dim = 2 : i64, origin = "context_parallel", reason = "r", split_dim = 1 : i64} : (tensor<2x8x4xf32>) -> tensor<2x4x8xf32>
  // CHECK: xf.all_reduce_grads {axis = "dp", origin = "dp_gradients", reason = "r", reduction = "sum"}
  xf.all_reduce_grads {axis = "dp", origin = "dp_gradients", reason = "r", reduction = "sum"}
  // CHECK: xf.all_reduce_loss {axis = "dp", origin = "loss", reason = "r"}
  xf.all_reduce_loss {axis = "dp", origin = "loss", reason = "r"}
  return
}

// The mixture of experts' gradient ops.
// CHECK-LABEL: func.func @moe_grads
func.func @moe_grads(%x: tensor<2x4x16xf32>, %logits: tensor<2x4x4xf32>, %e: tensor<2x4x2xi32>, %w: tensor<2x4x2xf32>,
                     %rows: tensor<16x16xf32>, %gw: tensor<4x16x8xf32>, %gs: tensor<4xi32>, %g: tensor<2x4x1xf32>) {
  // CHECK: xf.moe_route_grad %{{.+}}, %{{.+}}, %{{.+}} {normalize} : (tensor<2x4x4xf32>, tensor<2x4x2xi32>, tensor<2x4x2xf32>) -> tensor<2x4x4xf32>
  %dl = xf.moe_route_grad %logits, %e, %w {normalize} : (tensor<2x4x4xf32>, tensor<2x4x2xi32>, tensor<2x4x2xf32>) -> tensor<2x4x4xf32>
  // CHECK: xf.moe_unpermute_grad
  %du:2 = xf.moe_unpermute_grad %x, %rows, %e, %w : (tensor<2x4x16xf32>, tensor<16x16xf32>, tensor<2x4x2xi32>, tensor<2x4x2xf32>) -> (tensor<16x16xf32>, tensor<2x4x2xf32>)
  // CHECK: xf.grouped_linear_grad_input
  %gi = xf.grouped_linear_grad_input %rows, %gw, %gs : (tensor<16x16xf32>, tensor<4x16x8xf32>, tensor<4xi32>) -> tensor<16x8xf32>
  // CHECK: xf.grouped_linear_grad_weight
  %gd = xf.grouped_linear_grad_weight %rows, %gi, %gs : (tensor<16x16xf32>, tensor<16x8xf32>, tensor<4xi32>) -> tensor<4x16x8xf32>
  // CHECK: xf.sigmoid_gate_grad
  %sg:2 = xf.sigmoid_gate_grad %x, %g, %x : (tensor<2x4x16xf32>, tensor<2x4x1xf32>, tensor<2x4x16xf32>) -> (tensor<2x4x1xf32>, tensor<2x4x16xf32>)
  return
}
