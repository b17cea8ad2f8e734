//===- FitBudget.h - fitting a plan into a memory budget -------*- C++ -*-===//
//
// What `llc-dist compile` does with a memory budget (--device,
// --memory-budget): --recompute auto's search for the least recomputation
// that fits, and, for a plan that does not fit, the error that names every
// stage over the budget and every change that could make it fit, each
// compiled with its exact peak (docs/memory.md).
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_PIPELINES_FITBUDGET_H
#define LLCDIST_PIPELINES_FITBUDGET_H

#include "llcdist/Dialect/Plan/Analysis/MemoryReport.h"
#include "llcdist/Frontend/ModelConfig.h"
#include "llcdist/Pipelines/Pipelines.h"
#include "llcdist/Support/MeshSpec.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/STLFunctionalExtras.h"

#include <string>
#include <vector>

namespace llcdist {

/// What `llc-dist compile` was told about memory: --device (a name in
/// devices/ or a file), --memory-budget and --memory-reserve (sizes such as
/// 80GiB); empty when not given.
struct BudgetFlags {
  std::string device, capacity, reserve;
};

/// Why BudgetFlags describe no budget: a flag's value (`usage`: the command
/// line is wrong) or the device file (it does not load).
struct BudgetError {
  std::string message;
  bool usage = true;
};

/// The budget `flags` describe into `budget` (left empty when none of them is
/// given): the capacity is --memory-budget's, else the device's; the reserve
/// --memory-reserve's, else the device's.
std::optional<BudgetError> resolveMemoryBudget(const BudgetFlags &flags,
                                               std::optional<plan::MemoryBudget> &budget);

/// Every stage of `module`'s plan fits `budget`.
bool fitsBudget(mlir::ModuleOp module, const plan::MemoryBudget &budget);

/// Per rank per step, of the busiest stage: what its collectives and sends
/// move with NCCL's ring algorithms (CollectiveEntry::ringBytesPerStep); 0
/// without a plan.
double ringBytesPerRank(mlir::ModuleOp module);

/// --recompute auto: compiles with none, selective and full recomputation in
/// turn through `compile` (false: that compilation failed and said why;
/// otherwise it returns the compiled module) and stops at the first whose
/// plan fits `budget`. Returns the mode last compiled ("full" when none
/// fits), with the modes whose plans did not fit in `tried`; failure when a
/// compilation failed.
mlir::FailureOr<std::string>
fitRecompute(llvm::function_ref<mlir::FailureOr<mlir::ModuleOp>(llvm::StringRef mode)> compile,
             const plan::MemoryBudget &budget, std::vector<std::string> &tried);

/// Compiles `model` (a config or .mlir file) for `mesh`, `train` and `shape`
/// in an MLIR context of its own, printing nothing and without
/// llcdist-verify-plan (what it checks is not needed in memory), then calls
/// `use` with the compiled module while the context lives. On failure returns
/// false with the first error diagnostic (or what failed) in `error`. Safe to
/// call from several threads (the memory hints compile in parallel).
bool compileInMemory(const std::string &model, const TrainingShape &shape, const MeshSpec &mesh,
                     TrainingPipelineOptions train,
                     llvm::function_ref<void(mlir::ModuleOp)> use, std::string &error);

/// A change that could make a plan fit, compiled in memory.
struct MemoryHint {
  std::string flags; ///< what to pass instead, e.g. "--zero 3"
  std::string note;  ///< e.g. "(same 64 GPUs)"
  MeshSpec mesh;
  TrainingPipelineOptions train;
  /// The ordering rule of docs/memory.md: 0 ZeRO (no extra compute; its
  /// collectives overlap the step), 1 selective recompute (the core attention
  /// again: a few percent of the FLOPs), 2 more tp (activation all-reduces on
  /// the critical path of every layer), 3 more pipeline stages (a larger
  /// bubble; more cp is class 2 too: its ring runs under the attention), 4 full recompute (one more forward per layer,
  /// ~+33 % FLOPs), 5 combinations; within a class, by the compiled plan's communication per rank per step.
  int costClass = 0;
  // Results.
  bool compiled = false;
  std::string failure; ///< the first error, when it did not compile
  int64_t peak = 0;    ///< the largest stage's arena per rank
  bool fits = false;
  double ringBytes = 0; ///< ringBytesPerRank of its plan
};

/// The changes worth trying on a plan of `model` (with `shape`, `mesh` and
/// `train`) that does not fit `budget`: the stronger recomputation modes, the
/// higher ZeRO stages (dp × cp > 1), twice the tp, twice the pp and, for a
/// sequence of kLongSequence tokens or more (or cp > 1 already), twice the cp
/// (taking the GPUs from dp when it is even, else asking for twice the GPUs), and, when
/// none fits alone, the strongest combination — each compiled in a context
/// of its own, in parallel, nothing printed or written, and ordered fastest
/// first (MemoryHint::costClass).
/// Where the memory hints start offering context parallelism (Megatron's
/// guidance: sequences of 8K tokens and more).
inline constexpr int64_t kLongSequence = 8192;

std::vector<MemoryHint> memoryHints(const std::string &model, const TrainingShape &shape,
                                    const MeshSpec &mesh, const TrainingPipelineOptions &train,
                                    const plan::MemoryBudget &budget);

/// "the plan does not fit: ..." with every stage over the budget, its
/// breakdown and reserve, and the modes --recompute auto `tried`.
std::string oomMessage(const std::vector<plan::StageMemory> &memory,
                       const plan::MemoryBudget &budget, const std::vector<std::string> &tried);

/// The hints as a table (peak, fits, communication against
/// `ringBytesNow`), the compilations' time, and the fastest that fits.
std::string hintsMessage(const std::vector<MemoryHint> &hints, const plan::MemoryBudget &budget,
                         double ringBytesNow, double seconds);

/// The whole error of a compiled `module` that does not fit `budget`:
/// oomMessage, then memoryHints compiled and described by hintsMessage.
std::string outOfMemoryError(mlir::ModuleOp module, const std::string &model,
                             const TrainingShape &shape, const MeshSpec &mesh,
                             const TrainingPipelineOptions &train,
                             const plan::MemoryBudget &budget,
                             const std::vector<std::string> &tried);

} // namespace llcdist

#endif
