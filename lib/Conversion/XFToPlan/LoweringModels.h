//===- LoweringModels.h - the PlanLoweringOpInterface models ----*- C++ -*-===//
//
// One model per xf op: `OpLowering::lower<Op>` is its rule. Included by the
// files that hold the rules (OpLowerings.cpp, MoeLowerings.cpp), each of
// which attaches the models of its own ops, so every rule's specialization
// is seen where its model is instantiated. TU-local by design (an anonymous
// namespace): a rule file specializes kWritesParameterGradients for its ops.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_LIB_CONVERSION_XFTOPLAN_LOWERINGMODELS_H
#define LLCDIST_LIB_CONVERSION_XFTOPLAN_LOWERINGMODELS_H

#include "Lowering.h"

#include "llcdist/Conversion/XFToPlan/PlanLoweringInterface.h"

namespace {
/// Whether an op's kernel writes its results straight into the parameters'
/// gradient buffers (PlanLoweringOpInterface::writesParameterGradients):
/// true for the rules that ask gradTarget where their results go.
template <typename OpTy> constexpr bool kWritesParameterGradients = false;
} // namespace

namespace llcdist::xftoplan {
namespace {

template <typename OpTy>
struct PlanLoweringModel : public PlanLoweringOpInterface::ExternalModel<PlanLoweringModel<OpTy>, OpTy> {
  mlir::LogicalResult lowerToPlan(mlir::Operation *op, OpLowering &lowering, Scope &scope, BackwardPart part) const {
    return lowering.lower<OpTy>(op, scope, part, lowering.provenance(op, scope));
  }
  bool writesParameterGradients(mlir::Operation *) const { return kWritesParameterGradients<OpTy>; }
};

template <typename... Ops> void attachPlanLowering(mlir::MLIRContext *ctx) {
  (Ops::template attachInterface<PlanLoweringModel<Ops>>(*ctx), ...);
}

} // namespace

/// The mixture of experts' models (MoeLowerings.cpp).
void attachMoePlanLowerings(mlir::MLIRContext *ctx);

} // namespace llcdist::xftoplan

#endif // LLCDIST_LIB_CONVERSION_XFTOPLAN_LOWERINGMODELS_H
