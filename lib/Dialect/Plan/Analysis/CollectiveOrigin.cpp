//===- CollectiveOrigin.cpp - why a plan collective exists ----------------===//
#include "llcdist/Dialect/Plan/Analysis/CollectiveOrigin.h"

#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;
using namespace llcdist;

std::optional<xf::CollectiveOrigin> plan::collectiveOrigin(Operation *kernel) {
  if (auto s = kernel->getAttrOfType<StringAttr>(kOriginAttr))
    return xf::symbolizeCollectiveOrigin(s.getValue());
  return std::nullopt;
}

void plan::setCollectiveOrigin(Operation *kernel, xf::CollectiveOrigin origin) {
  kernel->setAttr(kOriginAttr,
                  StringAttr::get(kernel->getContext(), xf::stringifyCollectiveOrigin(origin)));
}

void plan::setCollectiveOrigin(Operation *kernel, Operation *xfCollective) {
  // The xf collectives' verifiers guarantee a known kind.
  auto origin = xfCollective->getAttrOfType<StringAttr>("origin");
  assert(origin && xf::symbolizeCollectiveOrigin(origin.getValue()) &&
         "an xf collective without a valid origin");
  kernel->setAttr(kOriginAttr, origin);
}
