//===- TensorParallelInterface.td - an xf op's tp rule -----*- tablegen -*-===//
#ifndef LLCDIST_DIALECT_XF_TRANSFORMS_TENSORPARALLELINTERFACE_TD
#define LLCDIST_DIALECT_XF_TRANSFORMS_TENSORPARALLELINTERFACE_TD

include "mlir/IR/OpBase.td"

def TensorParallelOpInterface : OpInterface<"TensorParallelOpInterface"> {
  let cppNamespace = "::llcdist::xf";
  let description = [{
    How an xf op's values split over the tp axis of llcdist-partition's
    tensor parallelism (lib/Dialect/XF/Transforms/TensorParallel.cpp): from
    the split of its operands, the split of its results (replicated, split on
    a dimension, a partial sum, or split on the sequence), or a mismatch.
    External models attach it (registerTensorParallelModels), one rule per op
    next to the pass. An op without a model but with the `Elementwise` trait
    follows the elementwise rule (operands split alike, results split like
    them); any other op is refused ("no tensor-parallel rule for this op").
  }];
  let methods = [
    InterfaceMethod<[{
        Sets the tp split of the op's results from its operands' (read and
        written through `propagation`), or emits an error.
      }],
      "::mlir::LogicalResult", "propagateTensorParallel",
      (ins "::llcdist::xf::TensorParallelPropagation &":$propagation)>,
    InterfaceMethod<[{
        Whether the op belongs to the sequence-parallel region (Korthikanti et
        al.): under sequence parallelism it runs on each rank's slice of the
        sequence when its activations are split on it; an operand split on
        the sequence is all-gathered before any other op.
      }],
      "bool", "runsOnSequenceSlice", (ins), [{}], [{ return false; }]>,
  ];
}

#endif
