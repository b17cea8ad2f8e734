//===- XFDialect.td - the xf transformer graph dialect ----*- tablegen -*-===//
#ifndef LLCDIST_DIALECT_XF_XFDIALECT_TD
#define LLCDIST_DIALECT_XF_XFDIALECT_TD

include "mlir/IR/OpBase.td"

def XF_Dialect : Dialect {
  let name = "xf";
  let cppNamespace = "::llcdist::xf";
  let summary = "Transformer graph dialect of llc-dist";
  let description = [{
    `xf` describes a decoder-only transformer training graph on GLOBAL tensor
    shapes (before any sharding), using builtin ranked tensors of f32, bf16 or
    f16 (token ids are i32). Parameters are explicit `xf.param` ops named with
    their Hugging Face names. A transformer layer is written once, as a
    `func.func` marked `xf.layer_body`; the forward function calls it once per
    layer through `xf.layer`, so layer boundaries are explicit (pipeline
    splitting, FSDP units and recomputation cut there) and the IR of a
    126-layer model stays compact. Inside a layer body, parameter names carry
    the placeholder `{i}`, bound to the calling `xf.layer`'s index.
  }];
  let dependentDialects = ["::mlir::func::FuncDialect"];
  // The module attribute xf.model against the graph (XFDialect.cpp).
  let hasOperationAttrVerify = 1;
}

class XF_Op<string mnemonic, list<Trait> traits = []>
    : Op<XF_Dialect, mnemonic, traits>;

#endif // LLCDIST_DIALECT_XF_XFDIALECT_TD
