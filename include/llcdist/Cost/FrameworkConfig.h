//===- FrameworkConfig.h - a configuration in Megatron's and DeepSpeed's terms -*- C++ -*-===//
//
// MLIR-free: what `llc-dist plan --as megatron|deepspeed` prints for the
// winner. One table (knobMappings) says, for every knob of ParallelConfig and
// Workload, the `llc-dist compile` flag, the Megatron-LM pretrain_gpt.py
// flags and the DeepSpeed config fields it becomes, and renders them; a knob
// a framework cannot express becomes a note, never a silently dropped flag.
// The tests change each knob and check that the flags follow
// (unittests/Cost/PlannerTest.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_COST_FRAMEWORKCONFIG_H
#define LLCDIST_COST_FRAMEWORKCONFIG_H

#include "llcdist/Cost/StepModel.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace llcdist::cost {

/// One configuration in both frameworks' terms.
struct FrameworkArgs {
  /// Megatron-LM's pretrain_gpt.py flags, "--flag" or "--flag VALUE", in the
  /// table's order.
  std::vector<std::string> megatron;
  std::vector<std::string> megatronNotes;
  /// A DeepSpeed config (ds_config.json).
  nlohmann::ordered_json deepspeed = nlohmann::ordered_json::object();
  std::vector<std::string> deepspeedNotes;
};

/// One row of the table.
struct KnobMapping {
  const char *knob;        ///< e.g. "tp"
  const char *compileFlag; ///< llc-dist compile's flag, e.g. "--mesh tp=N"
  const char *megatron;    ///< what it becomes in Megatron-LM (documentation)
  const char *deepspeed;   ///< ... and in a DeepSpeed config
  void (*render)(const Workload &w, const ParallelConfig &c, FrameworkArgs &out);
};

/// The table, in the order its flags are printed.
const std::vector<KnobMapping> &knobMappings();

/// Every row rendered for `c` on `w`.
FrameworkArgs frameworkArgs(const Workload &w, const ParallelConfig &c);

/// "pretrain_gpt.py \\\n    --flag \\\n ..." preceded by the notes as "# " lines.
std::string megatronCommand(const FrameworkArgs &a);
/// The DeepSpeed JSON (2-space indent), the notes on stderr's side: returned
/// apart in `a.deepspeedNotes`.
std::string deepspeedText(const FrameworkArgs &a);

/// Whether `args` holds `flag` (exactly, "--bf16", or "--flag VALUE").
bool hasFlag(const std::vector<std::string> &args, const std::string &flag);

} // namespace llcdist::cost

#endif
