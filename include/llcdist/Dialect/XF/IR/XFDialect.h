//===- XFDialect.h - the xf dialect ---------------------------*- C++ -*-===//
#ifndef LLCDIST_DIALECT_XF_IR_XFDIALECT_H
#define LLCDIST_DIALECT_XF_IR_XFDIALECT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Dialect.h"

#include "llcdist/Dialect/XF/IR/XFDialect.h.inc"

namespace llcdist::xf {
/// Unit attribute marking a func.func as a transformer-layer body.
constexpr const char kLayerBodyAttr[] = "xf.layer_body";
/// Unit attribute marking the forward (entry) function.
constexpr const char kEntryAttr[] = "xf.entry";
/// Module attribute: dictionary describing the model and training shapes.
constexpr const char kModelAttr[] = "xf.model";
/// Placeholder for the layer index in parameter names inside a layer body.
constexpr const char kLayerPlaceholder[] = "{i}";
} // namespace llcdist::xf

#endif
