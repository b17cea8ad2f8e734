//===- InitAll.h - the dialects and passes every llc-dist tool uses -------===//
#ifndef LLCDIST_INITALL_H
#define LLCDIST_INITALL_H

#include "llcdist/Conversion/Passes.h"
#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/Dialect/Plan/Transforms/Passes.h"
#include "llcdist/Dialect/XF/IR/XFDialect.h"
#include "llcdist/Dialect/XF/IR/XFShardingInterface.h"
#include "llcdist/Dialect/XF/Transforms/Passes.h"
#include "llcdist/Pipelines/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/Transforms/Passes.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Transforms/Passes.h"

namespace llcdist {

/// The dialects llc-dist's IR uses: only these (no registerAllDialects).
inline void registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<xf::XFDialect, plan::PlanDialect, mlir::func::FuncDialect, mlir::shard::ShardDialect>();
  // Upstream sharding-propagation / shard-partition on xf ops.
  xf::registerShardingInterfaceExternalModels(registry);
  // Each xf op's tensor-parallel rule (llcdist-partition) and plan kernels
  // (llcdist-lower-to-plan).
  xf::registerTensorParallelModels(registry);
  xftoplan::registerPlanLoweringModels(registry);
}

/// Our passes plus the upstream ones our pipelines use.
inline void registerAllPasses() {
  xf::registerXFPassesAndPipelines();
  plan::registerPlanPasses();
  registerConversionPasses();
  registerPipelines();
  mlir::registerCSEPass();
  mlir::registerCanonicalizerPass();
  mlir::registerSymbolDCEPass();
  // Upstream sharding passes (docs/sharding-interface.md).
  mlir::shard::registerShardingPropagation();
  mlir::shard::registerPartition();
}

} // namespace llcdist

#endif
