// RUN: llc-dist-opt %s -split-input-file -llcdist-attach-mesh="pp=3" -verify-diagnostics

func.func private @body(%x: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> attributes {xf.layer_body} {
  return %x : tensor<2x8x64xf32>
}
// expected-error @+1 {{pp=3 exceeds the model's 2 layers; a pipeline stage needs at least one layer}}
func.func @forward(%x: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> attributes {xf.entry} {
  %l0 = xf.layer @body[0](%x) : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %l1 = xf.layer @body[1](%l0) : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return %l1 : tensor<2x8x64xf32>
}

// -----

module {
  // expected-error @+1 {{a symbol named @mesh already exists}}
  shard.grid @mesh(shape = 1)
  func.func private @body(%x: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> attributes {xf.layer_body} {
    return %x : tensor<2x8x64xf32>
  }
  func.func @forward(%x: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> attributes {xf.entry} {
    %l0 = xf.layer @body[0](%x) : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    %l1 = xf.layer @body[1](%l0) : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    %l2 = xf.layer @body[2](%l1) : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    return %l2 : tensor<2x8x64xf32>
  }
}

