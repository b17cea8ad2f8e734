//===- TensorParallelInterface.h - an xf op's tp rule -----------*- C++ -*-===//
//
// The op interface llcdist-partition's tensor parallelism propagates splits
// through. Its models for the xf ops are in
// lib/Dialect/XF/Transforms/TensorParallel.cpp (registered by
// registerTensorParallelModels, llcdist/Dialect/XF/Transforms/Passes.h);
// docs/adding-an-op.md says how a new op gets one.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_DIALECT_XF_TRANSFORMS_TENSORPARALLELINTERFACE_H
#define LLCDIST_DIALECT_XF_TRANSFORMS_TENSORPARALLELINTERFACE_H

#include "mlir/IR/OpDefinition.h"

namespace llcdist::xf {
class TensorParallelPropagation;
} // namespace llcdist::xf

#include "llcdist/Dialect/XF/Transforms/TensorParallelInterface.h.inc"

#endif
