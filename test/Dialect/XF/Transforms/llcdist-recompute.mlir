// RUN: llc-dist-opt %s -split-input-file -llcdist-autodiff -llcdist-recompute | FileCheck %s --check-prefix=NONE
// RUN: llc-dist-opt %s -split-input-file -llcdist-autodiff -llcdist-recompute="mode=none" | FileCheck %s --check-prefix=NONE
// RUN: llc-dist-opt %s -split-input-file -llcdist-autodiff -llcdist-recompute="mode=selective" | FileCheck %s --check-prefix=SEL
// RUN: llc-dist-opt %s -split-input-file -llcdist-autodiff -llcdist-recompute="mode=full" | FileCheck %s --check-prefix=FULL
// RUN: not llc-dist-opt %s -split-input-file -llcdist-autodiff -llcdist-recompute="mode=auto" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not llc-dist-opt %s -split-input-file -llcdist-autodiff -llcdist-recompute="mode=" 2>&1 | FileCheck %s --check-prefix=EMPTY
// RUN: not llc-dist-opt %s -split-input-file -llcdist-recompute="mode=full" 2>&1 | FileCheck %s --check-prefix=ORDER

// Unknown modes are errors; `auto` is llc-dist compile's search over the
// modes, not a mode of the pass. Recomputation needs the training step.
// BAD: error: llcdist-recompute: mode 'auto' is not none, selective or full
// EMPTY: error: llcdist-recompute: mode '' is not none, selective or full
// ORDER: error: llcdist-recompute: run llcdist-autodiff first

// One layer whose body holds an attention. Its backward body reads the saved
// q, k, v (one value here), output and log-sum-exp.
//
// none (the default) changes nothing and records nothing.
// NONE-NOT: xf.recompute
// NONE-NOT: xf.recomputed
// NONE-LABEL: func.func private @block_bwd
// NONE-SAME: (%[[DY:.+]]: tensor<1x4x8xf32>, %[[LSE:.+]]: tensor<1x2x4xf32>, %[[OUT:.+]]: tensor<1x4x8xf32>, %[[QKV:.+]]: tensor<1x4x8xf32>)
// NONE: xf.attention_grad %[[DY]], %[[QKV]], %[[QKV]], %[[QKV]], %[[OUT]], %[[LSE]]
// NONE-LABEL: func.func @train_step
// NONE: %[[FWD:.+]]:4 = xf.layer @block[0]
// NONE: xf.layer @block_bwd[0] (%{{.+}}, %[[FWD]]#1, %[[FWD]]#2, %[[FWD]]#3)
//
// selective: the backward body recomputes the attention output and lse from
// the saved q, k, v and no longer reads the saved ones; the forward call is
// untouched.
// SEL: module attributes {{{.*}}xf.recompute = "selective"
// SEL-LABEL: func.func private @block_bwd
// SEL-SAME: (%[[DY:.+]]: tensor<1x4x8xf32>, %{{.+}}: tensor<1x2x4xf32>, %{{.+}}: tensor<1x4x8xf32>, %[[QKV:.+]]: tensor<1x4x8xf32>)
// SEL-NEXT: %[[OUT:.+]], %[[LSE:.+]] = xf.attention %[[QKV]], %[[QKV]], %[[QKV]] {{{.*}}xf.recomputed}
// SEL-NEXT: xf.attention_grad %[[DY]], %[[QKV]], %[[QKV]], %[[QKV]], %[[OUT]], %[[LSE]]
// SEL-LABEL: func.func @train_step
// SEL-NOT: xf.recomputed
// SEL: return
//
// full: right before the backward call, a copy of the forward call from the
// same saved layer input; the backward call reads the copy's results.
// FULL: module attributes {{{.*}}xf.recompute = "full"
// FULL-LABEL: func.func private @block_bwd
// FULL-NOT: xf.recomputed
// FULL-LABEL: func.func @train_step
// FULL-SAME: (%[[X:.+]]: tensor<1x4x8xf32>,
// FULL: %[[FWD:.+]]:4 = xf.layer @block[0] (%[[X]]) {xf.num_outputs = 1 : i64}
// FULL: xf.cross_entropy_grad
// FULL-NEXT: %[[RE:.+]]:4 = xf.layer @block[0] (%[[X]]) {xf.num_outputs = 1 : i64, xf.recomputed}
// FULL-NEXT: xf.layer @block_bwd[0] (%{{.+}}, %[[RE]]#1, %[[RE]]#2, %[[RE]]#3)
module attributes {xf.model = {microbatches = 1 : i64}} {
  func.func private @block(%x: tensor<1x4x8xf32>) -> tensor<1x4x8xf32> attributes {xf.layer_body} {
    %a = xf.attention %x, %x, %x {num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64} : (tensor<1x4x8xf32>, tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
    %y = xf.add %x, %a : tensor<1x4x8xf32>
    return %y : tensor<1x4x8xf32>
  }
  func.func @forward(%x: tensor<1x4x8xf32>, %t: tensor<1x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %l = xf.layer @block[0](%x) : (tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
    %loss = xf.cross_entropy %l, %t : (tensor<1x4x8xf32>, tensor<1x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Two layers: full recomputation gives each backward call its own copy of
// its own layer's forward call (layer 1's from layer 1's input, the output
// of layer 0), in backward order.
// NONE-LABEL: func.func @train_step
// NONE-NOT: xf.recomputed
// NONE: return
// SEL-LABEL: func.func @train_step
// FULL-LABEL: func.func @train_step
// FULL-SAME: (%[[X:.+]]: tensor<1x4x8xf32>,
// FULL: %[[L0:.+]]:2 = xf.layer @mlp[0] (%[[X]]) {xf.num_outputs = 1 : i64}
// FULL: %[[L1:.+]]:2 = xf.layer @mlp[1] (%[[L0]]#0) {xf.num_outputs = 1 : i64}
// FULL: %[[R1:.+]]:2 = xf.layer @mlp[1] (%[[L0]]#0) {xf.num_outputs = 1 : i64, xf.recomputed}
// FULL-NEXT: %[[D1:.+]] = xf.layer @mlp_bwd[1] (%{{.+}}, %[[R1]]#1)
// FULL-NEXT: %[[R0:.+]]:2 = xf.layer @mlp[0] (%[[X]]) {xf.num_outputs = 1 : i64, xf.recomputed}
// FULL-NEXT: xf.layer @mlp_bwd[0] (%[[D1]], %[[R0]]#1)
module attributes {xf.model = {microbatches = 1 : i64}} {
  func.func private @mlp(%x: tensor<1x4x8xf32>) -> tensor<1x4x8xf32> attributes {xf.layer_body} {
    %g = xf.gelu_tanh %x : tensor<1x4x8xf32>
    return %g : tensor<1x4x8xf32>
  }
  func.func @forward(%x: tensor<1x4x8xf32>, %t: tensor<1x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %l0 = xf.layer @mlp[0](%x) : (tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
    %l1 = xf.layer @mlp[1](%l0) : (tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
    %loss = xf.cross_entropy %l1, %t : (tensor<1x4x8xf32>, tensor<1x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
