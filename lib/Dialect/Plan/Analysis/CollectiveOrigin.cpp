//===- CollectiveOrigin.cpp - why a plan collective exists ----------------===//
#include "llcdist/Dialect/Plan/Analysis/CollectiveOrigin.h"
#include "llcdist/Dialect/Plan/IR/PlanDialect.h"

#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;
using namespace llcdist;

std::optional<xf::CollectiveOrigin> plan::collectiveOrigin(Operation *kernel) {
  if (auto s = kernel->getAttrOfType<StringAttr>(kOriginAttr))
    return xf::symbolizeCollectiveOrigin(s.getValue());
  return std::nullopt;
}

void plan::setCollectiveOrigin(Operation *kernel, xf::CollectiveOrigin origin) {
  kernel->setAttr(kOriginAttr, StringAttr::get(kernel->getContext(), xf::stringifyCollectiveOrigin(origin)));
}

bool plan::reducesGradients(Operation *kernel, StringRef kind) {
  using xf::CollectiveOrigin;
  std::optional<CollectiveOrigin> o = collectiveOrigin(kernel);
  if (!o || kind == "all_gather")
    return false;
  switch (*o) {
  case CollectiveOrigin::DataParallelGradients:
  case CollectiveOrigin::KvReplica:
  case CollectiveOrigin::Zero: // its reduce-scatters (its all-gathers move parameters)
    return true;
  case CollectiveOrigin::SequenceParallel: // its all-reduces (its all-gathers move activations)
    return kind == "all_reduce";
  default:
    return false;
  }
}

bool plan::movesTpActivations(Operation *kernel, StringRef kind) {
  using xf::CollectiveOrigin;
  std::optional<CollectiveOrigin> o = collectiveOrigin(kernel);
  if (!o)
    return false;
  if (kind == "all_gather")
    return *o == CollectiveOrigin::SequenceParallel;
  if (kind == "reduce_scatter")
    return *o == CollectiveOrigin::RowParallel || *o == CollectiveOrigin::ColumnParallel ||
           *o == CollectiveOrigin::VocabParallelEmbedding;
  return false;
}

void plan::setCollectiveOrigin(Operation *kernel, Operation *xfCollective) {
  // The xf collectives' verifiers guarantee a known kind.
  auto origin = xfCollective->getAttrOfType<StringAttr>("origin");
  assert(origin && xf::symbolizeCollectiveOrigin(origin.getValue()) && "an xf collective without a valid origin");
  kernel->setAttr(kOriginAttr, origin);
}

bool plan::isSyncPipelineTransfer(Operation *kernel) {
  auto k = dyn_cast<KernelOp>(kernel);
  return k && (k.getKernel() == "send" || k.getKernel() == "recv") &&
         collectiveOrigin(k) == xf::CollectiveOrigin::Pipeline && !k->hasAttr(kTokenAttr);
}
