//===- TensorParallel.h - Megatron tensor parallelism over tp --*- C++ -*-===//
#ifndef LLCDIST_LIB_DIALECT_XF_TRANSFORMS_TENSORPARALLEL_H
#define LLCDIST_LIB_DIALECT_XF_TRANSFORMS_TENSORPARALLEL_H

#include "mlir/IR/BuiltinOps.h"

namespace llcdist::xf {
/// Partitions the training step over the tp axis of size `tp` (see
/// TensorParallel.cpp); part of llcdist-partition.
mlir::LogicalResult partitionTensorParallel(mlir::ModuleOp module, int64_t tp);
} // namespace llcdist::xf

#endif
