// RUN: llc-dist-opt %s -split-input-file -llcdist-autodiff -llcdist-add-optimizer="grad-clip=1.0 weight-decay=0.1" -llcdist-partition -llcdist-lower-to-plan -verify-diagnostics | FileCheck %s

// A one-layer model, two microbatches. Layers are expanded with {i} bound;
// weight gradients used only by xf.accumulate_grad are written straight into
// the gradient buffer (accumulate = true); the tied table's two gradient
// contributions both accumulate into one gradient buffer.

// CHECK: module attributes {plan.manifest = {batch = {dp = 1 : i64, global_batch = 4 : i64, micro_batch = 2 : i64, microbatches = 2 : i64, seq_len = 4 : i64}, grad_clip = 1.000000e+00 : f64, lr_schedule = {kind = "constant"
// CHECK-SAME: optimizer = {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, kind = "adamw", weight_decay = 1.000000e-01 : f64}
// CHECK-NOT: func.func
// CHECK: plan.program @stage0 {
// CHECK-DAG: plan.buffer @[[IDS:b[0-9]+]] : tensor<2x4xi32> {kind = "input", name = "input_ids"}
// CHECK-DAG: plan.buffer @[[LOSS:b[0-9]+]] : tensor<1xf32> {kind = "metric", name = "loss"}
// CHECK-DAG: plan.buffer @[[WTE:b[0-9]+]] : tensor<16x8xf32> {kind = "param", name = "wte"}
// CHECK-DAG: plan.buffer @[[WTEG:b[0-9]+]] : tensor<16x8xf32> {kind = "grad", name = "wte.grad"}
// CHECK-DAG: plan.buffer @[[W0:b[0-9]+]] : tensor<8x8xf32> {kind = "param", name = "h.0.w"}
// CHECK-DAG: plan.buffer @[[W0G:b[0-9]+]] : tensor<8x8xf32> {kind = "grad", name = "h.0.w.grad"}
// The table is an embedding: no weight decay; the layer's matrix decays.
// CHECK-DAG: plan.param "wte" value @[[WTE]] grad @[[WTEG]] state [@{{.+}}, @{{.+}}] {init = {kind = "normal", std = 2.000000e-02 : f64}, weight_decay = false}
// CHECK-DAG: plan.param "h.0.w" value @[[W0]] grad @[[W0G]] state [@{{.+}}, @{{.+}}] {init = {kind = "normal", std = 2.000000e-02 : f64}, weight_decay = true}

// CHECK: plan.subroutine @step_begin {
// CHECK-NEXT: plan.kernel "fill_zero" {x = [@{{.+}}, @{{.+}}, @[[LOSS]]]} {}
// CHECK: plan.subroutine @forward {
// CHECK-NEXT: plan.kernel "load_microbatch" {ids = @[[IDS]], targets = @{{.+}}} {B = 2 : i64, S = 4 : i64}
// CHECK-NEXT: plan.kernel "embedding_fwd" {ids = @[[IDS]], out = @{{.+}}, table = @[[WTE]]} {H = 8 : i64, M = 8 : i64, V = 16 : i64}
// CHECK-NEXT: plan.kernel "linear_fwd" {w = @[[W0]], x = @{{.+}}, y = @{{.+}}} {K = 8 : i64, M = 8 : i64, N = 8 : i64, layout = "out_in"}
// CHECK-NEXT: plan.kernel "add"
// CHECK-NEXT: plan.kernel "linear_fwd" {w = @[[WTE]]
// The step's loss is the mean over microbatches.
// CHECK-NEXT: plan.kernel "cross_entropy_fwd" {logits = @{{.+}}, loss = @[[LOSS]], targets = @{{.+}}} {M = 8 : i64, V = 16 : i64, scale = 5.000000e-01 : f64}
// CHECK-NEXT: }
// CHECK: plan.subroutine @backward {
// CHECK-NEXT: plan.kernel "cross_entropy_bwd" {{.+}} {M = 8 : i64, V = 16 : i64, scale = 6.250000e-02 : f64}
// CHECK-NEXT: plan.kernel "linear_bwd_weight" {dw = @[[WTEG]], {{.+}}} {K = 8 : i64, M = 8 : i64, N = 16 : i64, accumulate = true, layout = "out_in"}
// CHECK-NEXT: plan.kernel "linear_bwd_input" {{.+}} {K = 8 : i64, M = 8 : i64, N = 16 : i64, accumulate = false, layout = "out_in"}
// CHECK-NEXT: plan.kernel "linear_bwd_weight" {dw = @[[W0G]], {{.+}}} {{.+}}accumulate = true
// CHECK-NEXT: plan.kernel "linear_bwd_input"
// CHECK-NEXT: plan.kernel "add"
// CHECK-NEXT: plan.kernel "embedding_bwd_weight" {dout = @{{.+}}, dtable = @[[WTEG]], ids = @[[IDS]]} {H = 8 : i64, M = 8 : i64, V = 16 : i64, accumulate = true}
// CHECK-NEXT: }
// CHECK: plan.subroutine @optimizer {
// CHECK-NEXT: plan.kernel "grad_norm" {grads = [@[[WTEG]], @[[W0G]]], norm = @{{.+}}} {max_norm = 1.000000e+00 : f64}
// CHECK-NEXT: plan.kernel "adamw" {grad = @[[WTEG]], m = @{{.+}}, param = @[[WTE]], v = @{{.+}}} {{.+}}weight_decay = 0.000000e+00 : f64}
// CHECK-NEXT: plan.kernel "adamw" {grad = @[[W0G]], m = @{{.+}}, param = @[[W0]], v = @{{.+}}} {{.+}}weight_decay = 1.000000e-01 : f64}
// CHECK: plan.schedule {
// CHECK-NEXT: plan.action @step_begin
// CHECK-NEXT: plan.action @forward microbatch 0
// CHECK-NEXT: plan.action @backward microbatch 0
// CHECK-NEXT: plan.action @forward microbatch 1
// CHECK-NEXT: plan.action @backward microbatch 1
// CHECK-NEXT: plan.action @optimizer
module attributes {xf.model = {microbatches = 2 : i64, name = "m", architecture = "LlamaForCausalLM", vocab_size = 16 : i64}} {
  func.func private @block(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> attributes {xf.layer_body} {
    %w = xf.param "h.{i}.w" : tensor<8x8xf32>
    %h = xf.linear out_in %x, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %y = xf.add %x, %h : tensor<2x4x8xf32>
    return %y : tensor<2x4x8xf32>
  }
  func.func @forward(%ids: tensor<2x4xi32>, %t: tensor<2x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %wte = xf.param "wte" : tensor<16x8xf32>
    %e = xf.embedding %ids, %wte : (tensor<2x4xi32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
    %l = xf.layer @block[0](%e) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %logits = xf.linear out_in %l, %wte : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %loss = xf.cross_entropy %logits, %t : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// A norm weight's gradient feeds only its accumulation: fused. The rank-1
// norm weight initializes to ones.
// CHECK: plan.param "norm" {{.+}} {init = {kind = "ones"}, weight_decay = false}
// CHECK: plan.kernel "rms_norm_fwd" {rstd = @{{.+}}, weight = @{{.+}}, x = @{{.+}}, y = @{{.+}}} {H = 8 : i64, M = 4 : i64, eps = 9.9999999999999995E-7 : f64}
// CHECK: plan.kernel "rms_norm_bwd_weight" {{.+}}accumulate = true
func.func @forward(%ids: tensor<1x4xi32>, %t: tensor<1x4xi32>) -> tensor<f32> attributes {xf.entry} {
  %wte = xf.param "wte" : tensor<8x8xf32>
  %e = xf.embedding %ids, %wte : (tensor<1x4xi32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
  %g = xf.param "norm" : tensor<8xf32>
  %n = xf.rms_norm %e, %g {eps = 1.0e-6 : f64} : (tensor<1x4x8xf32>, tensor<8xf32>) -> tensor<1x4x8xf32>
  %loss = xf.cross_entropy %n, %t : (tensor<1x4x8xf32>, tensor<1x4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Data parallelism: the manifest describes the mesh and the local batch;
// the optimizer subroutine starts with the two all-reduces, whose locations
// carry the partitioner's reasons and plan.origin its kinds.
// CHECK: module attributes {plan.manifest = {batch = {dp = 2 : i64, global_batch = 4 : i64, micro_batch = 2 : i64, microbatches = 1 : i64, seq_len = 4 : i64}
// CHECK-SAME: mesh = {dp = 2 : i64, pp = 1 : i64, rank_order = ["tp", "dp", "pp"], tp = 1 : i64}
// CHECK: plan.buffer @{{.+}} : tensor<2x4xi32> {kind = "input", name = "input_ids"}
// CHECK: plan.subroutine @optimizer {
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@{{.+}}]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients", plan.payload = "gradients"}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@{{.+}}]} {axis = "dp", op = "avg"} {plan.origin = "loss", plan.payload = "loss"}
// CHECK-NEXT: plan.kernel "grad_norm"
module attributes {xf.model = {microbatches = 1 : i64}} {
  shard.grid @mesh(shape = 2x1x1) {xf.mesh_axes = ["dp", "tp", "pp"], xf.rank_order = ["tp", "dp", "pp"]}
  func.func @forward(%ids: tensor<4x4xi32>, %t: tensor<4x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %wte = xf.param "wte" : tensor<16x8xf32>
    %e = xf.embedding %ids, %wte : (tensor<4x4xi32>, tensor<16x8xf32>) -> tensor<4x4x8xf32>
    %logits = xf.linear out_in %e, %wte : (tensor<4x4x8xf32>, tensor<16x8xf32>) -> tensor<4x4x16xf32>
    %loss = xf.cross_entropy %logits, %t : (tensor<4x4x16xf32>, tensor<4x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
