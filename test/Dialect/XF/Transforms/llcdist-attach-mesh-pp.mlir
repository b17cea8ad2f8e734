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


// -----

// A module that already declares llc-dist's mesh (the output of --emit xf)
// for another mesh than the requested one.
module {
  // expected-error @+1 {{the module already declares mesh dp=1,tp=1,pp=2 but mesh dp=1,tp=1,pp=3 was requested; compile it with --mesh dp=1,tp=1,pp=2}}
  shard.grid @mesh(shape = 1x1x2) {xf.mesh_axes = ["dp", "tp", "pp"], xf.rank_order = ["tp", "dp", "pp"]}
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
