//===- ConfigLoc.h - locations at the config field an op comes from -*- C++ -*-===//
//
// The frontend (lib/Frontend/ImportXF.cpp) gives an op shaped by a config
// field a location at that field, so a pass that rejects the op (tp does not
// divide the heads, pp exceeds the layers) points at the line to change:
//
//   NameLoc("model.layers.{i}.self_attn",
//           FusedLoc<"xf.config">[NameLoc("config.num_heads", f.json:7:3),
//                                 NameLoc("config.num_kv_heads", f.json:9:3),
//                                 f.json:1:1])
//
// A diagnostic at the op's location shows the first location of the fused
// list (the field the op's own errors are about); configFieldLoc picks
// another role. The roles are xf.model's keys (num_heads, num_kv_heads,
// num_layers, vocab_size, max_positions, hidden_size). The plan writer's
// provenance skips the config.* entries, so plans do not change.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_DIALECT_XF_IR_CONFIGLOC_H
#define LLCDIST_DIALECT_XF_IR_CONFIGLOC_H

#include "mlir/IR/Location.h"
#include "mlir/IR/Operation.h"

namespace llcdist::xf {

/// The metadata of the fused location that carries config fields.
inline constexpr llvm::StringLiteral kConfigLocTag = "xf.config";
/// The prefix of the name of one field's location in it.
inline constexpr llvm::StringLiteral kConfigFieldPrefix = "config.";

/// The fused list of config fields inside `loc` (through NameLocs), if any.
inline mlir::FusedLoc configFused(mlir::Location loc) {
  while (auto n = llvm::dyn_cast<mlir::NameLoc>(loc))
    loc = n.getChildLoc();
  auto f = llvm::dyn_cast<mlir::FusedLoc>(loc);
  auto tag = f ? llvm::dyn_cast_or_null<mlir::StringAttr>(f.getMetadata()) : nullptr;
  return tag && tag.getValue() == kConfigLocTag ? f : nullptr;
}

/// True for the location of one config field inside the fused list.
inline bool isConfigField(mlir::Location loc) {
  auto n = llvm::dyn_cast<mlir::NameLoc>(loc);
  return n && n.getName().getValue().starts_with(kConfigFieldPrefix);
}

/// The location of the config field playing `role` for `op` (e.g.
/// "num_kv_heads"), else the op's own location.
inline mlir::Location configFieldLoc(mlir::Operation *op, llvm::StringRef role) {
  if (mlir::FusedLoc f = configFused(op->getLoc()))
    for (mlir::Location l : f.getLocations())
      if (auto n = llvm::dyn_cast<mlir::NameLoc>(l))
        if (n.getName().getValue() == (kConfigFieldPrefix + role).str())
          return n.getChildLoc();
  return op->getLoc();
}

} // namespace llcdist::xf

#endif
