// RUN: llc-dist-opt %s -llcdist-attach-mesh="dp=2 tp=2 rank-order=dp,tp,pp" | FileCheck %s
// RUN: not llc-dist-opt %s -llcdist-attach-mesh="rank-order=tp,tp,pp" 2>&1 | FileCheck %s --check-prefix=ORDER

// CHECK: shard.grid @mesh(shape = 2x2x1) {xf.mesh_axes = ["dp", "tp", "pp"], xf.rank_order = ["dp", "tp", "pp"]}
// ORDER: error: rank-order 'tp,tp,pp' is not a permutation of dp, tp, pp
func.func @forward(%ids: tensor<4x4xi32>) -> tensor<4x4xi32> attributes {xf.entry} {
  return %ids : tensor<4x4xi32>
}
