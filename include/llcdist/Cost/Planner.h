//===- Planner.h - choosing a parallel configuration -----------*- C++ -*-===//
//
// MLIR-free: what `llc-dist plan` searches. Given the hardware, the workload
// and a number of GPUs, it enumerates every configuration of
// `llc-dist compile`'s knobs (dp·tp·pp = GPUs, virtual stages, micro-batch,
// ZeRO 0-3, recompute, pipeline schedule, sequence parallelism, gradient
// buckets, FSDP prefetch), drops those checkConfig refuses (divisibility) and
// those whose analytic memory (estimateMemory + the device's reserve) does
// not fit the device, and ranks the rest by predictStep (StepModel.h).
// Rejected configurations are grouped into families — by mesh (dp,tp,pp) and
// by the value of one knob — and each family's best member says why it lost:
// out of memory by how much, the divisibility that fails, or slower by X %
// and what the time went to (the bubble, an axis' exposed communication and
// whether that axis crosses nodes, compute, the optimizer).
//
// The search allocates nothing per configuration but what StepModel does:
// one ParallelConfig is edited in place, families are indexed by their loop
// level, and only the best few survive the search (docs/cost-model.md,
// "Choosing a configuration").
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_COST_PLANNER_H
#define LLCDIST_COST_PLANNER_H

#include "llcdist/Cost/CostModel.h"
#include "llcdist/Cost/StepModel.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace llcdist::cost {

/// The value of --grad-bucket-size auto: Megatron-LM's default,
/// max(40,000,000, 1,000,000 × dp) parameters (the same formula as
/// llcdist::defaultGradBucketSize in Pipelines.h, which is MLIR's side).
int64_t autoGradBucket(int64_t dp);

/// What the command line fixes or bounds. A fixed knob (`--fix KNOB=VALUE`)
/// is searched at that value only; the bounds cap the search.
struct PlannerOptions {
  int64_t gpus = 0;
  /// tp is a divisor of the GPUs up to this (0: 2 × the node's GPUs, so one
  /// step across nodes is priced and explained).
  int64_t maxTp = 0;
  /// pp is a divisor of GPUs / tp up to this (0: the layers).
  int64_t maxPp = 0;
  /// Micro-batches are the powers of two up to this.
  int64_t maxMicroBatch = 8;
  /// Interleaved's model chunks per stage: 2 .. this.
  int64_t maxVirtualStages = 8;
  /// How many of the best survive the search (the table's rows).
  int64_t top = 5;

  /// cp is a divisor of GPUs / (tp·pp) up to this (0: seq_len / 8192, so
  /// each cp rank holds at least 8K tokens: context parallelism is searched
  /// only when the sequence is long, as Llama 3's 128K stage used cp = 16).
  int64_t maxCp = 0;

  // --fix: nullopt = searched. ep (expert parallelism) is searched for
  // mixture-of-experts models only: the divisors of dp that divide the
  // experts, never with ZeRO.
  std::optional<int64_t> dp, tp, pp, cp, ep, virtualStages, microBatch, zero, fsdpPrefetch;
  std::optional<std::string> cpImpl;
  /// --fix bucket=0|auto|N: -1 stands for auto (autoGradBucket(dp)).
  std::optional<int64_t> gradBucket;
  std::optional<std::string> recompute, schedule;
  std::optional<bool> sequenceParallel;

  /// Called about every 0.25 s of a long search with the meshes done and
  /// their number, and the configurations evaluated so far; may be empty.
  std::function<void(int64_t meshesDone, int64_t meshes, int64_t evaluated)> progress;
};

/// Parses one --fix list ("tp=8,pp=16", "recompute=full,sp=on",
/// "bucket=auto") into `opts`. Knobs: dp, tp, pp, cp, cp-impl, ep, v (virtual-stages), mb
/// (micro-batch), zero, recompute, schedule, sp (sequence-parallel),
/// bucket (grad-bucket-size), prefetch (fsdp-prefetch). The message names
/// the knob and the values it takes.
std::optional<std::string> parseFix(const std::string &spec, PlannerOptions &opts);

/// The largest cp the search takes on `w`: opts.maxCp, else seq_len / 8192
/// (at least 1).
int64_t maxContextParallel(const Workload &w, const PlannerOptions &opts);

/// Why `opts` describe no search on `w` (GPUs < 1, a fixed degree that does
/// not divide the GPUs, fixed knobs that contradict one another or the GPUs:
/// tp·pp·dp ≠ GPUs, ZeRO without dp, a schedule without pp, ep without
/// experts or with ZeRO, ...), or nullopt.
std::optional<std::string> checkOptions(const Workload &w, const PlannerOptions &opts);

/// Why a family lost to the winner (a structured kind; the sentence is
/// FamilyReport::why).
enum class LossReason {
  Divisibility,  ///< no member compiles (checkConfig)
  Memory,        ///< every member that compiles is out of memory
  Bubble,        ///< slower, mostly by its pipeline bubble
  Communication, ///< slower, mostly by one axis' exposed communication
  Compute,       ///< slower, mostly by compute (recomputation, smaller GEMMs, ...)
  Optimizer,     ///< slower, mostly by the optimizer step
  Tie,           ///< as fast as the winner (within 0.05 %): the model prices the knob the same
};
const char *lossReasonName(LossReason r); ///< "divisibility", "memory", "bubble", ...

/// One ranked configuration.
struct Candidate {
  ParallelConfig config;
  StepPrediction prediction;
  int64_t reserveBytes = 0; ///< DeviceReserve::bytes for its communicators
  int64_t capacityBytes = 0;
  int64_t memoryBytes() const { return prediction.memory.total() + reserveBytes; }
  double bubbleShare() const;      ///< bubble / step
  double exposedCommShare() const; ///< all axes' exposed communication / step
};

/// A group of configurations that share the mesh ("mesh", key
/// "dp=..,tp=..,pp=..") or one knob's value ("knob", key e.g.
/// "schedule=gpipe"), and that does not hold the winner.
struct FamilyReport {
  std::string kind; ///< "mesh" | "knob"
  std::string key;
  int64_t members = 0, prunedDivisibility = 0, prunedMemory = 0, feasible = 0;
  LossReason reason = LossReason::Divisibility;
  std::string why; ///< the sentence, with the numbers
  /// The fastest member that fits (feasible > 0).
  std::optional<Candidate> best;
  /// No member fits: the one closest to fitting, and by how much it does not.
  std::optional<ParallelConfig> closest;
  MemoryEstimate closestMemory;
  int64_t closestReserve = 0;
  double oomGiB = 0;
  std::string divisibility; ///< no member compiles: the first member's reason
  // Slower (best): the comparison with the winner.
  double slowerPercent = 0;
  double bubbleShare = 0, exposedCommShare = 0;
  std::string commAxis;     ///< Communication: the axis
  bool commCrossesNodes = false;
};

/// `llc-dist plan`'s exact check of one analytic candidate: compiled and
/// simulated (filled by the tool; the planner itself is MLIR-free).
struct ExactResult {
  size_t candidate = 0;     ///< index into PlanResult::top
  bool ok = false;
  std::string error;        ///< why it did not compile or simulate
  double stepSeconds = 0;   ///< the simulator's step time
  double compileSeconds = 0, simulateSeconds = 0;
  std::string planDir;      ///< where the plan was written (kept with --keep-plans)
};

struct PlanResult {
  int64_t gpus = 0;
  int64_t globalBatch = 0, seqLen = 0; ///< the workload's (sequences, tokens each)
  int64_t capacityBytes = 0; ///< the device's memory
  int64_t gpusPerNode = 0;
  // Counters: meshes are the (dp,tp,pp) factorizations enumerated;
  // evaluated = prunedDivisibility + prunedMemory + feasible.
  int64_t meshes = 0, evaluated = 0, prunedDivisibility = 0, prunedMemory = 0, feasible = 0;
  /// Feasible configurations left out of `top` because one already there has
  /// the same predicted step time and memory (the first, with fewer knobs on,
  /// is kept).
  int64_t duplicates = 0;
  double searchSeconds = 0;
  double exactSeconds = 0; ///< compile + simulate of the top (the tool's)
  double configsPerSecond() const { return searchSeconds > 0 ? evaluated / searchSeconds : 0; }

  std::vector<Candidate> top; ///< fastest first (analytic), at most PlannerOptions::top
  /// Why the winner (top[0]) wins, one sentence each, with numbers.
  std::vector<std::string> winnerWhy;
  std::vector<FamilyReport> families; ///< mesh families first, then knob families
  /// Nothing fits: the configuration closest to fitting and its excess.
  std::optional<ParallelConfig> closest;
  double closestOomGiB = 0;
  std::string firstDivisibility; ///< nothing compiles: the first reason

  std::vector<ExactResult> exact; ///< in the order of `top`; empty when not run
  /// Indices into `top` by the exact step time (failed ones last).
  std::vector<size_t> exactOrder() const;

  nlohmann::ordered_json toJson() const;
  /// The table, the winner's explanation, the families, the exact results.
  void print(std::ostream &os) const;
};

/// A ParallelConfig's knobs as JSON (dp, tp, pp, [ep when > 1,] virtual_stages, micro_batch,
/// microbatches of `globalBatch`, zero, recompute, schedule,
/// sequence_parallel, grad_bucket_size, fsdp_prefetch, compile_flags).
nlohmann::ordered_json configJson(const ParallelConfig &c, int64_t globalBatch);

/// The search. Fails (the message) when `opts` are refused (checkOptions) or
/// no configuration compiles; when none fits, succeeds with `top` empty and
/// `closest` set (the tool reports it).
std::optional<std::string> plan(const Hardware &hw, const Workload &w,
                                const PlannerOptions &opts, PlanResult &out);

} // namespace llcdist::cost

#endif
