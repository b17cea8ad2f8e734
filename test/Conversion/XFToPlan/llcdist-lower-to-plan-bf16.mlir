// RUN: llc-dist-opt %s -split-input-file -llcdist-autodiff -llcdist-add-optimizer -llcdist-partition -llcdist-lower-to-plan -verify-diagnostics | FileCheck %s

// bf16 values in the IR make a mixed-precision plan: each parameter's f32
// master (what the runtime initializes, updates and saves; it counts as
// optimizer state, the 12 bytes per parameter of master + m + v) and a bf16
// working copy that every op reads, made from the master at each
// step_begin; bf16 gradients and activations; f32 norm statistics,
// optimizer state and metrics.
// CHECK-LABEL: dtype = "bf16", name = "bf16-masters"
// CHECK-DAG: plan.buffer @[[WTE:b[0-9]+]] : tensor<16x8xf32> {kind = "param", memory_class = "optimizer_state", name = "wte"}
// CHECK-DAG: plan.buffer @[[WTE16:b[0-9]+]] : tensor<16x8xbf16> {kind = "param", name = "wte.bf16"}
// CHECK-DAG: plan.buffer @[[WTEG:b[0-9]+]] : tensor<16x8xbf16> {kind = "grad", name = "wte.grad"}
// CHECK-DAG: plan.buffer @[[G:b[0-9]+]] : tensor<8xf32> {kind = "param", memory_class = "optimizer_state", name = "h.0.norm"}
// CHECK-DAG: plan.buffer @[[G16:b[0-9]+]] : tensor<8xbf16> {kind = "param", name = "h.0.norm.bf16"}
// CHECK-DAG: plan.buffer @[[W:b[0-9]+]] : tensor<8x8xf32> {kind = "param", memory_class = "optimizer_state", name = "h.0.w"}
// CHECK-DAG: plan.buffer @[[W16:b[0-9]+]] : tensor<8x8xbf16> {kind = "param", name = "h.0.w.bf16"}
// CHECK-DAG: plan.buffer @[[WG:b[0-9]+]] : tensor<8x8xbf16> {kind = "grad", name = "h.0.w.grad"}
// CHECK-DAG: plan.buffer @[[EMB:b[0-9]+]] : tensor<2x4x8xbf16> {kind = "activation", name = ":embedding"}
// CHECK-DAG: plan.buffer @[[RSTD:b[0-9]+]] : tensor<8xf32> {kind = "activation", name = ":rms_norm.rstd"}
// CHECK-DAG: plan.buffer @[[M:b[0-9]+]] : tensor<8x8xf32> {kind = "optimizer_state", name = "h.0.w.exp_avg"}
// The manifest's parameter is the master.
// CHECK-DAG: plan.param "wte" value @[[WTE]] grad @[[WTEG]] {{.*}}weight_decay = false}
// CHECK-DAG: plan.param "h.0.w" value @[[W]] grad @[[WG]] state [@[[M]], @{{b[0-9]+}}] {init = {kind = "normal", std = 2.000000e-02 : f64}, weight_decay = true}
// One cast per parameter, in the order the step first reads them, before
// the gradients are zeroed.
// CHECK: plan.subroutine @step_begin {
// CHECK-NEXT: plan.kernel "cast" {x = @[[WTE]], y = @[[WTE16]]} {n = 128 : i64}
// CHECK-NEXT: plan.kernel "cast" {x = @[[G]], y = @[[G16]]} {n = 8 : i64}
// CHECK-NEXT: plan.kernel "cast" {x = @[[W]], y = @[[W16]]} {n = 64 : i64}
// CHECK-NEXT: plan.kernel "fill_zero"
// CHECK-NEXT: {{^ +}}}{{$}}
// CHECK: plan.subroutine @forward {
// CHECK: plan.kernel "embedding_fwd" {ids = @{{b[0-9]+}}, out = @[[EMB]], table = @[[WTE16]]}
// CHECK-NEXT: plan.kernel "rms_norm_fwd" {rstd = @[[RSTD]], weight = @[[G16]], x = @[[EMB]],
// CHECK-NEXT: plan.kernel "linear_fwd" {w = @[[W16]],
// CHECK: plan.kernel "linear_fwd" {w = @[[WTE16]],
// CHECK: plan.subroutine @backward {
// CHECK: plan.kernel "linear_bwd_weight" {dw = @[[WTEG]], {{.*}}accumulate = true
// CHECK: plan.kernel "linear_bwd_input" {{.*}}w = @[[W16]]}
// The update: f32 master and state, bf16 gradient.
// CHECK: plan.subroutine @optimizer {
// CHECK: plan.kernel "adamw" {grad = @[[WTEG]], m = @{{b[0-9]+}}, param = @[[WTE]], v = @{{b[0-9]+}}}
// CHECK: plan.kernel "adamw" {grad = @[[WG]], m = @[[M]], param = @[[W]], v = @{{b[0-9]+}}}
module attributes {xf.model = {microbatches = 2 : i64, name = "bf16-masters", architecture = "LlamaForCausalLM", vocab_size = 16 : i64, num_layers = 1 : i64}} {
  func.func private @block(%x: tensor<2x4x8xbf16>) -> tensor<2x4x8xbf16> attributes {xf.layer_body} {
    %g = xf.param "h.{i}.norm" : tensor<8xbf16>
    %n = xf.rms_norm %x, %g {eps = 1.0e-6 : f64} : (tensor<2x4x8xbf16>, tensor<8xbf16>) -> tensor<2x4x8xbf16>
    %w = xf.param "h.{i}.w" : tensor<8x8xbf16>
    %h = xf.linear out_in %n, %w : (tensor<2x4x8xbf16>, tensor<8x8xbf16>) -> tensor<2x4x8xbf16>
    %y = xf.add %x, %h : tensor<2x4x8xbf16>
    return %y : tensor<2x4x8xbf16>
  }
  func.func @forward(%ids: tensor<2x4xi32>, %t: tensor<2x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %wte = xf.param "wte" : tensor<16x8xbf16>
    %e = xf.embedding %ids, %wte : (tensor<2x4xi32>, tensor<16x8xbf16>) -> tensor<2x4x8xbf16>
    %l = xf.layer @block[0](%e) : (tensor<2x4x8xbf16>) -> tensor<2x4x8xbf16>
    %logits = xf.linear out_in %l, %wte : (tensor<2x4x8xbf16>, tensor<16x8xbf16>) -> tensor<2x4x16xbf16>
    %loss = xf.cross_entropy %logits, %t : (tensor<2x4x16xbf16>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// The same step in f32: no masters, no copies, no casts.
// CHECK-LABEL: dtype = "f32", name = "f32-no-masters"
// CHECK-DAG: plan.buffer @[[WTE:b[0-9]+]] : tensor<16x8xf32> {kind = "param", name = "wte"}
// CHECK-NOT: bf16
// CHECK: plan.subroutine @step_begin {
// CHECK-NEXT: plan.kernel "fill_zero"
// CHECK-NEXT: {{^ +}}}{{$}}
// CHECK: plan.kernel "embedding_fwd" {{.*}}table = @[[WTE]]}
module attributes {xf.model = {microbatches = 1 : i64, name = "f32-no-masters"}} {
  func.func @forward(%ids: tensor<2x4xi32>, %t: tensor<2x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %wte = xf.param "wte" : tensor<16x8xf32>
    %e = xf.embedding %ids, %wte : (tensor<2x4xi32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
    %logits = xf.linear out_in %e, %wte : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %loss = xf.cross_entropy %logits, %t : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// The runtime stores f32 or bf16 only.
func.func @forward(%ids: tensor<1x4xi32>, %t: tensor<1x4xi32>) -> tensor<f32> attributes {xf.entry} {
  // expected-error@+1 {{llcdist-lower-to-plan: element type 'f16' cannot be executed: the runtime stores f32 or bf16 (compile with --dtype f32 or bf16)}}
  %wte = xf.param "wte" : tensor<8x8xf16>
  %e = xf.embedding %ids, %wte : (tensor<1x4xi32>, tensor<8x8xf16>) -> tensor<1x4x8xf16>
  %loss = xf.cross_entropy %e, %t : (tensor<1x4x8xf16>, tensor<1x4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
