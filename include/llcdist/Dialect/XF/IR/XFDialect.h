//===- XFDialect.h - the xf dialect ---------------------------*- C++ -*-===//
#ifndef LLCDIST_DIALECT_XF_IR_XFDIALECT_H
#define LLCDIST_DIALECT_XF_IR_XFDIALECT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Dialect.h"
#include "llvm/ADT/STLExtras.h"

#include <string>

#include "llcdist/Dialect/XF/IR/XFDialect.h.inc"

namespace llcdist::xf {
/// Unit attribute marking a func.func as a transformer-layer body.
constexpr const char kLayerBodyAttr[] = "xf.layer_body";
/// Unit attribute marking the forward (entry) function.
constexpr const char kEntryAttr[] = "xf.entry";
/// Module attribute: dictionary describing the model and training shapes.
constexpr const char kModelAttr[] = "xf.model";
/// The most microbatches xf.model's `microbatches` may ask of one step (the
/// frontend's kMaxMicrobatches: the passes build one accumulation per
/// microbatch, so a hand-edited 2^63-1 would never finish compiling).
constexpr int64_t kMaxModelMicrobatches = 65536;
/// String attribute llcdist-partition sets on an xf.attention /
/// xf.attention_grad with alibi_heads whose heads it split: the mesh axis
/// ("tp"), so rank c's slopes are those of heads [c·nh, (c+1)·nh).
constexpr const char kAlibiHeadAxisAttr[] = "xf.alibi_head_axis";
/// Placeholder for the layer index in parameter names inside a layer body.
constexpr const char kLayerPlaceholder[] = "{i}";

/// `name` with every "{i}" replaced by `layer` (unchanged when layer < 0).
inline std::string instantiateLayerName(llvm::StringRef name, int64_t layer) {
  std::string s = name.str();
  if (layer < 0)
    return s;
  for (size_t pos; (pos = s.find(kLayerPlaceholder)) != std::string::npos;)
    s.replace(pos, sizeof(kLayerPlaceholder) - 1, std::to_string(layer));
  return s;
}

/// Whether `name` is `pattern` instantiated for some layer (a pattern
/// without "{i}" matches only itself).
inline bool matchesLayerName(llvm::StringRef pattern, llvm::StringRef name) {
  size_t at = pattern.find(kLayerPlaceholder);
  if (at == llvm::StringRef::npos)
    return pattern == name;
  llvm::StringRef prefix = pattern.take_front(at),
                  suffix = pattern.drop_front(at + sizeof(kLayerPlaceholder) - 1);
  if (!name.starts_with(prefix) || !name.ends_with(suffix) ||
      name.size() <= prefix.size() + suffix.size())
    return false;
  llvm::StringRef index = name.drop_front(prefix.size()).drop_back(suffix.size());
  return llvm::all_of(index, [](char c) { return c >= '0' && c <= '9'; });
}
} // namespace llcdist::xf

#endif
