//===- XFInterfaces.h - what every xf op must answer -----------*- C++ -*-===//
#ifndef LLCDIST_DIALECT_XF_IR_XFINTERFACES_H
#define LLCDIST_DIALECT_XF_IR_XFINTERFACES_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpDefinition.h"

namespace llcdist::xf {

/// What a backward rule (DifferentiableOpInterface) reads and writes:
/// llcdist-autodiff's gradient map, seen from one op.
class GradientSink {
public:
  virtual ~GradientSink() = default;
  /// The forward value `v` where the backward is being built (inside a
  /// layer's backward body: the saved value passed in as an argument).
  virtual mlir::Value fwd(mlir::Value v) = 0;
  /// Adds `g` to the gradient of `operand` (ignored when `g` is null or
  /// `operand` is not floating point).
  virtual void addGrad(mlir::Value operand, mlir::Value g) = 0;
};

} // namespace llcdist::xf

#include "llcdist/Dialect/XF/IR/XFInterfaces.h.inc"

#endif
