// RUN: llc-dist-opt %s -split-input-file -llcdist-pad-vocab="multiple=8" -verify-diagnostics | FileCheck %s
// RUN: llc-dist-opt %s -split-input-file -llcdist-pad-vocab="multiple=8" -llcdist-pad-vocab="multiple=4" -verify-diagnostics | FileCheck %s --check-prefix=TWICE
// RUN: llc-dist-opt %s -split-input-file -llcdist-pad-vocab="multiple=8" -llcdist-autodiff -llcdist-add-optimizer -verify-diagnostics | FileCheck %s --check-prefix=GRAD
// RUN: not llc-dist-opt %s -split-input-file -llcdist-pad-vocab="multiple=0" 2>&1 | FileCheck %s --check-prefix=ZERO

// A tied vocabulary of 5 padded to 8: the one table (embedding and LM head)
// gets 8 rows, the logits 8 columns, the loss the real vocabulary; the module
// records both sizes and the padded parameters.
// CHECK-LABEL: module attributes {xf.vocab_padding = {multiple = 8 : i64, padded_vocab_size = 8 : i64, params = ["wte"], vocab_size = 5 : i64}}
// CHECK: %[[W:.+]] = xf.param "wte" : tensor<8x4xf32>
// CHECK: xf.embedding %{{.+}}, %[[W]] : (tensor<2x3xi32>, tensor<8x4xf32>) -> tensor<2x3x4xf32>
// CHECK: %[[L:.+]] = xf.linear out_in %{{.+}}, %[[W]] : (tensor<2x3x4xf32>, tensor<8x4xf32>) -> tensor<2x3x8xf32>
// CHECK: xf.cross_entropy %[[L]], %{{.+}} {real_vocab = 5 : i64} : (tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<f32>
// A second run with a multiple that 8 already is: nothing changes.
// TWICE-LABEL: module attributes {xf.vocab_padding = {multiple = 8 : i64, padded_vocab_size = 8 : i64
// TWICE: xf.cross_entropy %{{.+}}, %{{.+}} {real_vocab = 5 : i64} : (tensor<2x3x8xf32>
// The loss gradient masks the padding columns too (real_vocab carried over).
// GRAD: xf.cross_entropy_grad %{{.+}}, %{{.+}} {real_vocab = 5 : i64, scale = {{.+}}} : (tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
// GRAD: xf.accumulate_grad "wte", %{{.+}} : tensor<8x4xf32>
// ZERO: error: llcdist-pad-vocab: multiple must be >= 1, got 0
func.func @forward(%ids: tensor<2x3xi32>, %t: tensor<2x3xi32>) -> tensor<f32> attributes {xf.entry} {
  %wte = xf.param "wte" : tensor<5x4xf32>
  %e = xf.embedding %ids, %wte : (tensor<2x3xi32>, tensor<5x4xf32>) -> tensor<2x3x4xf32>
  %logits = xf.linear out_in %e, %wte : (tensor<2x3x4xf32>, tensor<5x4xf32>) -> tensor<2x3x5xf32>
  %loss = xf.cross_entropy %logits, %t : (tensor<2x3x5xf32>, tensor<2x3xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// An untied LM head (Llama's lm_head): both the embedding table and the head
// are padded; other parameters keep their shapes.
// CHECK-LABEL: module attributes {xf.vocab_padding = {multiple = 8 : i64, padded_vocab_size = 16 : i64, params = ["lm_head.weight", "model.embed_tokens.weight"], vocab_size = 9 : i64}}
// CHECK: xf.param "model.embed_tokens.weight" : tensor<16x4xf32>
// CHECK: xf.param "model.norm.weight" : tensor<4xf32>
// CHECK: xf.param "lm_head.weight" : tensor<16x4xf32>
// CHECK: xf.cross_entropy %{{.+}}, %{{.+}} {real_vocab = 9 : i64} : (tensor<2x3x16xf32>
func.func @forward(%ids: tensor<2x3xi32>, %t: tensor<2x3xi32>) -> tensor<f32> attributes {xf.entry} {
  %wte = xf.param "model.embed_tokens.weight" : tensor<9x4xf32>
  %e = xf.embedding %ids, %wte : (tensor<2x3xi32>, tensor<9x4xf32>) -> tensor<2x3x4xf32>
  %g = xf.param "model.norm.weight" : tensor<4xf32>
  %n = xf.rms_norm %e, %g {eps = 1.0e-05 : f64} : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %head = xf.param "lm_head.weight" : tensor<9x4xf32>
  %logits = xf.linear out_in %n, %head : (tensor<2x3x4xf32>, tensor<9x4xf32>) -> tensor<2x3x9xf32>
  %loss = xf.cross_entropy %logits, %t : (tensor<2x3x9xf32>, tensor<2x3xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// A vocabulary that is a multiple already: left alone, no attribute.
// CHECK-LABEL: module {
// CHECK: xf.param "wte" : tensor<16x4xf32>
// CHECK-NOT: real_vocab
func.func @forward(%ids: tensor<2x3xi32>, %t: tensor<2x3xi32>) -> tensor<f32> attributes {xf.entry} {
  %wte = xf.param "wte" : tensor<16x4xf32>
  %e = xf.embedding %ids, %wte : (tensor<2x3xi32>, tensor<16x4xf32>) -> tensor<2x3x4xf32>
  %logits = xf.linear out_in %e, %wte : (tensor<2x3x4xf32>, tensor<16x4xf32>) -> tensor<2x3x16xf32>
  %loss = xf.cross_entropy %logits, %t : (tensor<2x3x16xf32>, tensor<2x3xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// The logits must come from the LM head.
func.func @forward(%logits: tensor<2x3x5xf32>, %t: tensor<2x3xi32>) -> tensor<f32> attributes {xf.entry} {
  // expected-error @+1 {{llcdist-pad-vocab: the logits must be an xf.linear out_in of an xf.param (the LM head, [vocab, hidden]) used only by the loss}}
  %loss = xf.cross_entropy %logits, %t : (tensor<2x3x5xf32>, tensor<2x3xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// The embedding must index the loss's vocabulary.
func.func @forward(%ids: tensor<2x3xi32>, %t: tensor<2x3xi32>) -> tensor<f32> attributes {xf.entry} {
  %wte = xf.param "wte" : tensor<6x4xf32>
  // expected-error @+1 {{llcdist-pad-vocab: the token embedding's table must be an xf.param with the loss's 5 vocabulary rows, got 'tensor<6x4xf32>'}}
  %e = xf.embedding %ids, %wte : (tensor<2x3xi32>, tensor<6x4xf32>) -> tensor<2x3x4xf32>
  %head = xf.param "lm_head.weight" : tensor<5x4xf32>
  %logits = xf.linear out_in %e, %head : (tensor<2x3x4xf32>, tensor<5x4xf32>) -> tensor<2x3x5xf32>
  %loss = xf.cross_entropy %logits, %t : (tensor<2x3x5xf32>, tensor<2x3xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
