//===- Passes.td - xf passes ------------------------------*- tablegen -*-===//
#ifndef LLCDIST_DIALECT_XF_TRANSFORMS_PASSES_TD
#define LLCDIST_DIALECT_XF_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def AttachMesh : Pass<"llcdist-attach-mesh", "mlir::ModuleOp"> {
  let summary = "declare the device mesh and check that it divides the model";
  let description = [{
    Adds the device mesh as an upstream `shard.grid @mesh` with axes
    (dp, tp, pp), recorded by name in the grid's `xf.mesh_axes` attribute,
    and checks that the mesh divides the model: tp must divide every
    attention's num_heads and the vocabulary (the token embedding's rows);
    kv heads must be divisible by tp or divide it (kv heads then replicate);
    dp must divide the batch; pp must not exceed the number of layers.
    A mesh that does not divide the model is a located error that names the
    quantity and the fix.

    Before (`--llcdist-attach-mesh="dp=2 tp=4"`):
    ```mlir
    module attributes {xf.model = {...}} { func.func @forward ... }
    ```
    After:
    ```mlir
    module attributes {xf.model = {...}} {
      shard.grid @mesh(shape = 2x4x1) {xf.mesh_axes = ["dp", "tp", "pp"]}
      func.func @forward ...
    }
    ```
  }];
  let options = [
    Option<"dp", "dp", "int64_t", "1", "data-parallel degree">,
    Option<"tp", "tp", "int64_t", "1", "tensor-parallel degree">,
    Option<"pp", "pp", "int64_t", "1", "pipeline-parallel degree">,
  ];
  let dependentDialects = ["mlir::shard::ShardDialect"];
}

def ModelStats : Pass<"llcdist-model-stats", "mlir::ModuleOp"> {
  let summary = "count parameters and FLOPs per token from the IR";
  let description = [{
    Counts the model's unique parameters (a tied embedding counts once; a
    layer body's `{i}` parameters count once per calling `xf.layer`) and its
    matmul FLOPs per token: 2·K·N per `xf.linear` and 4·S·heads·head_dim per
    `xf.attention` (QKᵀ and PV over the full S×S square, the convention of
    Megatron-LM and PaLM). Training FLOPs are 3× forward (backward = 2×
    forward), without recomputation. The result is recorded on the module:

    ```mlir
    module attributes {xf.stats = {forward_flops_per_token = 284812800 : i64, layers = 12 : i64,
                                   parameters = 124439808 : i64, training_flops_per_token = 854438400 : i64}}
    ```
  }];
}

#endif
