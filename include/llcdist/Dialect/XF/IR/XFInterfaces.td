//===- XFInterfaces.td - what every xf op must answer -----*- tablegen -*-===//
#ifndef LLCDIST_DIALECT_XF_XFINTERFACES_TD
#define LLCDIST_DIALECT_XF_XFINTERFACES_TD

include "mlir/IR/OpBase.td"

def XF_DifferentiableOpInterface : OpInterface<"DifferentiableOpInterface"> {
  let cppNamespace = "::llcdist::xf";
  let description = [{
    A forward op with a reverse-mode rule, written next to the op
    (lib/Dialect/XF/IR/XFAutodiff.cpp) and used by llcdist-autodiff inside
    every layer body and in the entry function. `buildBackward` emits, at the
    builder's insertion point, the ops that compute the gradients of the op's
    operands from those of its results (`dys`, one per result, null where a
    result has none; at least one is set). Forward values are read through
    `grads.fwd(v)` (inside a backward body they are the saved values) and each
    operand's gradient is handed to `grads.addGrad(operand, g)`, which sums
    contributions and accumulates parameters'. Ops whose backward needs the
    pass's context (the loss's scale, a layer's backward body) stay in the pass.
  }];
  let methods = [
    InterfaceMethod<"Emits the op's backward (see the interface's description).",
      "::mlir::LogicalResult", "buildBackward",
      (ins "::mlir::OpBuilder &":$b, "::llcdist::xf::GradientSink &":$grads,
           "::llvm::ArrayRef<::mlir::Value>":$dys)>,
    InterfaceMethod<[{
        Before the backward is built: a copy of the op, at the builder's
        insertion point, that also yields what its backward reads (a norm's
        statistics, attention's log-sum-exp), or null when the op has nothing
        to add or yields it already. llcdist-autodiff replaces the op's first
        result by the copy's and erases the op.
      }],
      "::mlir::Operation *", "buildWithSavedStatistics", (ins "::mlir::OpBuilder &":$b),
      [{}], [{ return nullptr; }]>,
  ];
}

#endif
