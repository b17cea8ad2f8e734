// RUN: llc-dist-opt %s -split-input-file -llcdist-lower-to-plan -verify-diagnostics | FileCheck %s

// A hand-written training step whose weight gradient has two uses. Its op
// can write straight into a parameter's gradient (PlanLoweringOpInterface::
// writesParameterGradients), but not here: it is computed into its own
// buffer, then added into the parameter's gradient by an "accumulate" kernel
// per use.
// CHECK-DAG: plan.buffer @[[WG:b[0-9]+]] : tensor<8x8xf32> {kind = "grad", name = "w.grad"}
// CHECK-DAG: plan.buffer @[[TMP:b[0-9]+]] : tensor<8x8xf32> {kind = "activation", name = ":linear_grad_weight.grad"}
// SGD without momentum keeps no optimizer state.
// CHECK: plan.param "w" value @{{.+}} grad @[[WG]] state [] {init = {kind = "normal", std = 2.000000e-02 : f64}, weight_decay = true}
// CHECK: plan.kernel "linear_bwd_weight" {dw = @[[TMP]], {{.+}}accumulate = false
// CHECK-NEXT: plan.kernel "accumulate" {x = @[[TMP]], y = @[[WG]]} {n = 64 : i64}
// CHECK-NEXT: plan.kernel "accumulate" {x = @[[TMP]], y = @[[WG]]} {n = 64 : i64}
// CHECK: plan.kernel "sgd" {grad = @[[WG]], param = @{{.+}}} {momentum = 0.000000e+00 : f64, weight_decay = 0.000000e+00 : f64}
module {
  func.func @train_step(%x: tensor<4x8xf32>, %t: tensor<4xi32>) -> tensor<f32> attributes {xf.entry, xf.train_step} {
    %w = xf.param "w" : tensor<8x8xf32>
    %y = xf.linear out_in %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
    %loss = xf.cross_entropy %y, %t : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<f32>
    %dy = xf.cross_entropy_grad %y, %t {scale = 0.25 : f64} : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<4x8xf32>
    %dw = xf.linear_grad_weight out_in %dy, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
    xf.accumulate_grad "w", %dw : tensor<8x8xf32>
    xf.accumulate_grad "w", %dw : tensor<8x8xf32>
    return %loss : tensor<f32>
  }
  func.func @optimizer_step() attributes {xf.optimizer} {
    xf.clip_grad_norm {max_norm = 0.0 : f64}
    xf.sgd {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
    return
  }
}

// -----

// expected-error @+1 {{llcdist-lower-to-plan: run llcdist-autodiff first (@forward is not a training step)}}
func.func @forward(%x: tensor<4x8xf32>, %t: tensor<4xi32>) -> tensor<f32> attributes {xf.entry} {
  %loss = xf.cross_entropy %x, %t : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// expected-error @+1 {{llcdist-lower-to-plan: run llcdist-add-optimizer first (no function is marked xf.optimizer)}}
module {
  func.func @train_step(%x: tensor<4x8xf32>, %t: tensor<4xi32>) -> tensor<f32> attributes {xf.entry, xf.train_step} {
    %loss = xf.cross_entropy %x, %t : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Every op of a training step lowers through its PlanLoweringOpInterface
// model (lib/Conversion/XFToPlan/OpLowerings.cpp); the optimizer's ops have
// none (the optimizer function is lowered as a whole), so one met inside the
// step is reported, not skipped.
module {
  func.func @train_step(%x: tensor<4x8xf32>, %t: tensor<4xi32>) -> tensor<f32> attributes {xf.entry, xf.train_step} {
    %loss = xf.cross_entropy %x, %t : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<f32>
    // expected-error @+1 {{'xf.clip_grad_norm' op llcdist-lower-to-plan: no lowering for this op (it has no PlanLoweringOpInterface model: docs/adding-an-op.md)}}
    xf.clip_grad_norm {max_norm = 1.0 : f64}
    return %loss : tensor<f32>
  }
  func.func @optimizer_step() attributes {xf.optimizer} {
    xf.sgd {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
    return
  }
}
