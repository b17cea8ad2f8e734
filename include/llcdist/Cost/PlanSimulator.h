//===- PlanSimulator.h - the predicted timeline of a compiled plan -*- C++ -*-===//
//
// MLIR-free. A discrete-event simulation of one training step of a plan
// directory (docs/plan-format.md), loaded with the runtime's own loader, on
// the hardware of CostModel.h: every op gets its time from the cost model
// (planOpCost, one table), and the simulator replays the plan's execution
// rules:
//
//   - one rank per pipeline stage (the lowest of its program's ranks) stands
//     for the stage's SPMD group; program i is stage i;
//   - each stage runs its actions in order, each action its subroutine's ops
//     in order, on the "compute" lane; a communication op with a token is
//     started on its queue's lane (once compute has reached it and the lane
//     is free) and compute goes on; a `wait` on compute blocks compute until
//     the token's op has ended; a communication op without a token blocks
//     compute until it ends;
//   - collectives of one axis of a stage run one after another (one
//     communicator per axis, as the runtime's);
//   - a `recv` ends no earlier than its matching `send` (the same (sender,
//     receiver) FIFO order as the runtime's channels) started plus the p2p
//     time; sends are eager;
//   - a collective over `pp` (the gradient norm's) starts when every stage
//     has reached it.
//
// A wait that can never end (a cyclic wait between stages) is an error
// naming each stage's blocked op. docs/cost-model.md, "Simulating a plan
// (llc-dist simulate)", defines every output.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_COST_PLANSIMULATOR_H
#define LLCDIST_COST_PLANSIMULATOR_H

#include "llcdist/Cost/CostModel.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace llcdist::rt {
struct Manifest;
struct Op;
struct Plan;
struct Program;
} // namespace llcdist::rt

namespace llcdist::cost {

/// The rule of planOpCost's table an op is priced by.
enum class OpCostRule {
  Gemm,       ///< linear_fwd / linear_bwd_input / linear_bwd_weight: gemmSeconds(M, N, K)
  Attention,  ///< attention_fwd / attention_bwd: attentionSeconds(B, S, nh, hd)
  Collective, ///< all_reduce / all_gather / reduce_scatter: collectiveSeconds
  P2P,        ///< send / recv: p2pSeconds
  Launch,     ///< load_microbatch: one kernel launch
  Free,       ///< wait: 0
  Memory,     ///< everything else: memorySeconds(Σ bytes of its argument buffers)
};
const char *opCostRuleName(OpCostRule r);

/// What one op costs on one rank.
struct OpCost {
  OpCostRule rule = OpCostRule::Memory;
  double seconds = 0;
  /// Executed FLOPs: 2·M·N·K per GEMM; attention counted whole as the FLOP
  /// papers do: 4·B·S²·nh·hd forward, twice that backward; 0 otherwise.
  double flops = 0;
  /// Memory: bytes moved; collective / p2p: bytes communicated; else 0.
  double bytes = 0;
  /// Collective / P2P: the mesh axis ("dp", "tp", "pp"), else "".
  std::string axis;
};

/// The cost of `op` of `program` run by global rank `rank` of `manifest`'s
/// mesh, on `hw` (see the table in docs/cost-model.md).
OpCost planOpCost(const Hardware &hw, const rt::Manifest &manifest, const rt::Program &program,
                  const rt::Op &op, int64_t rank);

struct SimOptions {
  /// The model's FLOPs per step over all ranks (StepModel's stepFlops().model,
  /// or the compile report's training FLOPs per token × tokens per step);
  /// without it there is no MFU.
  std::optional<double> modelFlopsPerStep;
  /// Or per token (llc-dist info's training FLOPs per token): × the plan's
  /// global_batch × seq_len. modelFlopsPerStep wins when both are given.
  std::optional<double> modelFlopsPerToken;
  /// Render the predicted timeline as a Chrome trace (PlanSimResult::traceJson).
  bool trace = true;
};

/// One pipeline stage (its representative rank).
struct StageSim {
  int64_t stage = 0;
  int64_t rank = 0;  ///< the rank that stands for the stage
  int64_t ranks = 1; ///< the stage's ranks (dp × tp)
  double busySeconds = 0;   ///< the compute lane running kernels
  double idleSeconds = 0;   ///< step time − busy
  double exposedCommSeconds = 0; ///< compute blocked by communication
  double bubbleSeconds = 0; ///< idle − exposed communication: waiting for other stages
  double endSeconds = 0;    ///< when the stage's last op (any lane) ended
  double flops = 0;         ///< executed FLOPs of one of its ranks
};

/// Communication on one mesh axis, summed over the stages' representative ranks.
struct AxisCommSim {
  double total = 0;   ///< Σ durations of the axis' communication ops
  double exposed = 0; ///< the part of it compute was blocked by
  double overlapped() const { return total > exposed ? total - exposed : 0; }
};

struct PlanSimResult {
  std::string device, topology; ///< the hardware's names
  int64_t worldSize = 0, globalBatch = 0, seqLen = 0;
  double stepSeconds = 0;    ///< makespan of one step
  double tokensPerSecond = 0; ///< global_batch × seq_len / step
  double executedFlops = 0;  ///< per step, all ranks (the HFU numerator)
  std::optional<double> modelFlops; ///< per step, all ranks (SimOptions)
  double peakFlopsPerGpu = 0; ///< of the plan's model.dtype (bf16 or f32)
  double hfu = 0;
  std::optional<double> mfu;
  double bubbleSeconds = 0;  ///< the mean of the stages' bubbles
  double bubbleFraction = 0; ///< bubbleSeconds / stepSeconds
  std::vector<StageSim> stages;
  std::map<std::string, AxisCommSim> comm; ///< "dp", "tp", "pp" (always all three)
  /// The predicted timeline in the format of `llc-dist run --trace`
  /// (runtime/include/llcdist/runtime/Timeline.h): pid = each stage's
  /// representative rank, tid 0 compute, tid q queue q (1: synchronous
  /// communication of a plan with one queue).
  std::string traceJson;

  /// The "predicted" object of `llc-dist simulate --format json` and of
  /// `llc-dist compile --format json`.
  nlohmann::ordered_json toJson() const;
  /// The text report (several lines, each ending in '\n'); `indent` prefixes each.
  std::string text(const std::string &indent = "") const;
};

/// Simulates one step of the plan in `planDir` (loaded with rt::loadPlan).
/// An error names the plan file, the op and the problem.
std::optional<std::string> simulatePlan(const std::string &planDir, const Hardware &hw,
                                        const SimOptions &options, PlanSimResult &out);
/// The same on a loaded plan.
std::optional<std::string> simulatePlan(const rt::Plan &plan, const Hardware &hw,
                                        const SimOptions &options, PlanSimResult &out);

} // namespace llcdist::cost

#endif
