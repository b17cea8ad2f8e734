//===- TensorParallel.h - Megatron tensor parallelism over tp --*- C++ -*-===//
#ifndef LLCDIST_LIB_DIALECT_XF_TRANSFORMS_TENSORPARALLEL_H
#define LLCDIST_LIB_DIALECT_XF_TRANSFORMS_TENSORPARALLEL_H

#include "mlir/IR/BuiltinOps.h"

namespace llcdist::xf {
/// Partitions the training step over the tp axis of size `tp` (see
/// TensorParallel.cpp), with Megatron's sequence parallelism when asked;
/// part of llcdist-partition.
mlir::LogicalResult partitionTensorParallel(mlir::ModuleOp module, int64_t tp, bool sequenceParallel);
} // namespace llcdist::xf

#endif
