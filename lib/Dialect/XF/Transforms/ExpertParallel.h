//===- ExpertParallel.h - expert parallelism over ep ------------*- C++ -*-===//
#ifndef LLCDIST_LIB_DIALECT_XF_TRANSFORMS_EXPERTPARALLEL_H
#define LLCDIST_LIB_DIALECT_XF_TRANSFORMS_EXPERTPARALLEL_H

#include "mlir/IR/BuiltinOps.h"

namespace llcdist::xf {
/// Splits every mixture-of-experts layer's experts over the ep ranks drawn
/// from dp (ExpertParallel.cpp): the stacked expert weights become each
/// rank's E/ep experts, and the rows between xf.moe_permute and
/// xf.moe_unpermute travel to their experts' ranks and back
/// (xf.moe_dispatch, xf.moe_combine). Part of llcdist-partition, after data
/// parallelism (the rows are the rank's own tokens' already). Fills
/// `expertParams` with the names of the split parameters (their gradients
/// reduce over "edp", not dp).
mlir::LogicalResult partitionExpertParallel(mlir::ModuleOp module, int64_t ep,
                                            llvm::SmallVectorImpl<mlir::Attribute> &expertParams);
} // namespace llcdist::xf

#endif
