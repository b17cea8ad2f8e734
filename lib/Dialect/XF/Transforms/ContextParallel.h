//===- ContextParallel.h - context parallelism over cp ---------*- C++ -*-===//
#ifndef LLCDIST_LIB_DIALECT_XF_TRANSFORMS_CONTEXTPARALLEL_H
#define LLCDIST_LIB_DIALECT_XF_TRANSFORMS_CONTEXTPARALLEL_H

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace llcdist::xf {
/// Partitions the training step's sequence over the cp axis of size `cp`
/// (ContextParallel.cpp) with attention by `impl` ("all-to-all": Ulysses);
/// part of llcdist-partition, after tensor parallelism and before data
/// parallelism.
mlir::LogicalResult partitionContextParallel(mlir::ModuleOp module, int64_t cp, const std::string &impl);
} // namespace llcdist::xf

#endif
