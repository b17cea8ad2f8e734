//===- PlanLoweringInterface.td - an xf op's plan kernels --*- tablegen -*-===//
#ifndef LLCDIST_CONVERSION_XFTOPLAN_PLANLOWERINGINTERFACE_TD
#define LLCDIST_CONVERSION_XFTOPLAN_PLANLOWERINGINTERFACE_TD

include "mlir/IR/OpBase.td"

def PlanLoweringOpInterface : OpInterface<"PlanLoweringOpInterface"> {
  let cppNamespace = "::llcdist::xftoplan";
  let description = [{
    How llcdist-lower-to-plan turns one xf op into `plan.kernel` calls. The
    conversion sits above the xf dialect, so the ops do not declare this
    interface: external models attach it (registerPlanLoweringModels), one
    rule per op in lib/Conversion/XFToPlan/OpLowerings.cpp, as upstream's
    bufferization attaches BufferizableOpInterface. The pass never switches on
    the op: an op without a model is reported ("no lowering for this op").
  }];
  let methods = [
    InterfaceMethod<[{
        Emits the op's kernels into the lowering's current subroutine: defines
        the buffers of its results in `scope` (or aliases them, for an op
        computed in place) and reads its operands' buffers from it. `part` is
        the part of a split (ZB-H1) backward being lowered; only a layer call
        passes it on.
      }],
      "::mlir::LogicalResult", "lowerToPlan",
      (ins "::llcdist::xftoplan::OpLowering &":$lowering,
           "::llcdist::xftoplan::Scope &":$scope,
           "::llcdist::xftoplan::BackwardPart":$part)>,
    InterfaceMethod<[{
        Whether the op's kernel can write its results straight into the
        gradient buffers of the parameters they are accumulated into (its
        rule then asks `gradTarget` where each result goes), instead of into
        a buffer of its own followed by an `accumulate` kernel.
      }],
      "bool", "writesParameterGradients", (ins), [{}],
      [{ return false; }]>,
  ];
}

#endif
