//===- MemoryReport.h - per-rank memory of a plan --------------*- C++ -*-===//
//
// What each rank of each pipeline stage holds, read back from the
// breakdown llcdist-plan-memory records on every plan.program (plan.memory),
// and the budget it is checked against (--device / --memory-budget).
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_DIALECT_PLAN_ANALYSIS_MEMORYREPORT_H
#define LLCDIST_DIALECT_PLAN_ANALYSIS_MEMORYREPORT_H

#include "llcdist/Support/Device.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace llcdist::plan {

/// One stage's (program's) memory per rank, from llcdist-plan-memory.
struct StageMemory {
  int64_t stage = 0;
  /// Bytes by persistent buffer kind (param, grad, optimizer_state, master,
  /// input, metric, ...) and the persistent buffers' alignment ("padding").
  std::map<std::string, int64_t> persistent;
  /// The transient buffers' arena extent, and the most bytes live at once.
  int64_t transientPeak = 0, transientLivePeak = 0;
  int64_t arena = 0;
  /// At the moment of the live peak: activations, communication, workspace.
  std::map<std::string, int64_t> atPeak;
  /// The mesh axes this stage communicates on: one NCCL communicator each.
  std::vector<std::string> commAxes;

  int64_t communicators() const { return int64_t(commAxes.size()); }
  /// Bytes of one persistent kind (param, grad, optimizer_state, ...), or 0.
  int64_t kind(const std::string &k) const { return lookup(persistent, k); }
  /// Inputs, metrics and the persistent buffers' alignment padding.
  int64_t other() const { return kind("input") + kind("metric") + kind("padding"); }
  /// Bytes of one class at the live peak, or 0.
  int64_t peak(const std::string &cls) const { return lookup(atPeak, cls); }
  /// How close the arena layout gets to the bytes live at once (1 = exact).
  double placedOverLive() const {
    return transientLivePeak ? double(transientPeak) / double(transientLivePeak) : 1.0;
  }
  /// "parameters .. | gradients .. | optimizer state .. | activations and
  /// buffers (peak) .. | inputs, metrics, alignment ..".
  std::string breakdown() const;

private:
  static int64_t lookup(const std::map<std::string, int64_t> &m, const std::string &k) {
    auto it = m.find(k);
    return it == m.end() ? 0 : it->second;
  }
};

/// The memory each rank's arena may use: the capacity (the --device's
/// memory, or --memory-budget) minus what the process holds outside the
/// arena: --memory-reserve, else the device file's reserve, whose NCCL part
/// grows with the communicators the stage's ranks join; none without either.
struct MemoryBudget {
  int64_t capacity = 0;
  std::string name;                    ///< where the capacity comes from
  std::optional<DeviceReserve> device; ///< the --device file's reserve
  std::optional<int64_t> fixed;        ///< --memory-reserve
  std::string fixedText;

  int64_t reserve(int64_t communicators) const {
    if (fixed)
      return *fixed;
    return device ? device->bytes(capacity, communicators) : 0;
  }
  int64_t usable(int64_t communicators) const { return capacity - reserve(communicators); }
  bool fits(const StageMemory &sm) const { return sm.arena <= usable(sm.communicators()); }

  /// "80.00 GiB - reserve 3.07 GiB = 76.93 GiB", or the capacity alone.
  std::string text(const StageMemory &sm) const;
  /// What the reserve of stage `sm` is made of (its communicators' NCCL
  /// buffers name its axes).
  std::string reserveBreakdown(const StageMemory &sm) const;
};

/// The memory part of the compile report: one entry per plan.program, in
/// order (empty for a module without programs), the recomputation the plan
/// was compiled with, and the budget when one was given.
struct MemoryReport {
  std::vector<StageMemory> stages;
  std::string recompute = "none";
  std::optional<MemoryBudget> budget;

  /// Every stage fits the budget (true without one).
  bool fits() const;
  /// "memory_per_rank", "recompute" and, with a budget, "memory_budget".
  nlohmann::ordered_json toJson() const;
  /// The per-stage table in MiB: parameters + gradients + optimizer state +
  /// activations (peak; live) + inputs = arena, the classes at the live
  /// peak, and the budget's verdict and reserve.
  void print(llvm::raw_ostream &os) const;
};

/// Reads plan.memory and the arena of each of `module`'s plan.program ops
/// (written by llcdist-plan-memory), and the axes each communicates on.
std::vector<StageMemory> computeStageMemory(mlir::ModuleOp module);

} // namespace llcdist::plan

#endif
