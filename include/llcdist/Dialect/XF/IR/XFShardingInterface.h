//===- XFShardingInterface.h - upstream ShardingInterface for xf -*- C++ -*-===//
//
// External models of MLIR's `shard::ShardingInterface` for the xf ops, so the
// upstream `sharding-propagation` and `shard-partition` passes can run on xf
// IR. What they express and what they cannot: docs/sharding-interface.md.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_DIALECT_XF_IR_XFSHARDINGINTERFACE_H
#define LLCDIST_DIALECT_XF_IR_XFSHARDINGINTERFACE_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace llcdist::xf {

/// Attaches the ShardingInterface external models to the xf ops when the xf
/// dialect is loaded.
void registerShardingInterfaceExternalModels(mlir::DialectRegistry &registry);

} // namespace llcdist::xf

#endif
