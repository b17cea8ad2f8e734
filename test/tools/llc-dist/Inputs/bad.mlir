func.func @forward(%q: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> attributes {xf.entry} {
  %a = xf.attention %q, %q, %q {num_heads = 4 : i64, num_kv_heads = 3 : i64, head_dim = 16 : i64} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return %a : tensor<2x8x64xf32>
}
