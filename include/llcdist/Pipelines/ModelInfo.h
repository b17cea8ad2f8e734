//===- ModelInfo.h - the report of `llc-dist info` -------------*- C++ -*-===//
#ifndef LLCDIST_PIPELINES_MODELINFO_H
#define LLCDIST_PIPELINES_MODELINFO_H

#include "llcdist/Dialect/XF/Analysis/ModelStats.h"
#include "llcdist/Frontend/ModelConfig.h"

#include "llvm/Support/raw_ostream.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace llcdist {

/// Parameters, layers and FLOPs per token with their formula (`llc-dist
/// info --format json` and the compile report's "stats").
nlohmann::ordered_json modelStatsJson(const xf::ModelStats &stats);

/// What `llc-dist info` shows: the counts taken on the imported IR and,
/// for a model given by its config, the architecture's sizes and what a plan
/// pads the vocabulary to.
struct ModelInfo {
  std::string model; ///< the model's name
  std::string file;  ///< the path it was read from
  std::optional<ModelConfig> config;
  xf::ModelStats stats;

  nlohmann::ordered_json toJson() const;
  void print(llvm::raw_ostream &os) const;
};

} // namespace llcdist

#endif
