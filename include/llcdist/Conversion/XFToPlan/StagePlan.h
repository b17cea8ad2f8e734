//===- StagePlan.h - what each pipeline stage of a lowered step holds -----===//
//
// Pipeline stage planning for llcdist-lower-to-plan, as pure functions over a
// small description of the training step (no MLIR): which values cross from
// one chunk to another (each with a tag its sender and its receivers share),
// which parameters chunks of several stages read (tied embeddings) and which
// stage is their home, how many microbatch slots each local chunk needs under
// a schedule, and so which subroutines, sends and receives a stage has.
//
// The lowering (lib/Conversion/XFToPlan/Stages.cpp) describes the step's
// top-level ops as a `Step`, asks for a `StagePlan` per stage and emits what
// it says; the unit tests (unittests/Conversion/StagePlanTest.cpp) check the
// plans of small hand-built steps.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_CONVERSION_XFTOPLAN_STAGEPLAN_H
#define LLCDIST_CONVERSION_XFTOPLAN_STAGEPLAN_H

#include "llcdist/Schedule/Schedule.h"

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace llcdist::stageplan {

/// What a top-level op of the step reads.
struct Operand {
  enum class Kind { Input, Param, Result };
  Kind kind = Kind::Input;
  /// Kind::Param: the parameter's name.
  std::string param;
  /// Kind::Result: the defining op's index in `Step::ops`, and which result.
  int64_t op = -1, result = 0;

  /// The step's input ids or labels (a block argument of the entry).
  static Operand input() { return Operand(); }
  static Operand ofParam(std::string name) {
    Operand o;
    o.kind = Kind::Param;
    o.param = std::move(name);
    return o;
  }
  static Operand resultOf(int64_t op, int64_t result = 0) {
    Operand o;
    o.kind = Kind::Result;
    o.op = op;
    o.result = result;
    return o;
  }
};

/// One top-level op of the training step, in program order.
struct StepOp {
  /// The chunk llcdist-pipeline-split assigned (xf.chunk); -1 when unmarked.
  int64_t chunk = -1;
  std::vector<Operand> operands;
  int64_t numResults = 0;
};

/// The training step as stage planning sees it.
struct Step {
  std::vector<StepOp> ops;
  /// The index of the first backward op (the loss gradient).
  int64_t firstBackward = 0;
};

/// A result of a step op: (op index, result number).
using ValueId = std::pair<int64_t, int64_t>;

/// Why a step cannot be planned, at the op that shows it.
struct Error {
  int64_t op = -1;
  std::string message;
};

/// A value that one chunk computes and chunks of other stages read: sent by
/// its chunk to each reader's stage and received there before its first use.
struct Crossing {
  ValueId value;
  int64_t tag = 0;
  int64_t fromChunk = -1;
  /// The reading chunks, in the order they first read it.
  std::vector<int64_t> readers;
};

/// A parameter that chunks of several stages read (a tied embedding). Every
/// such stage holds it; the first is its home: the others send it their
/// gradient, it updates the parameter and sends the new value back.
struct TiedParam {
  std::string name;
  std::set<int64_t> stages;
  int64_t home = 0;
  int64_t tag = 0;
};

/// What travels between stages: the same for every stage of one step.
struct Crossings {
  /// By tag (values[t].tag == t), in the order the walk over the step's ops
  /// first finds each value read by another chunk.
  std::vector<Crossing> values;
  std::map<ValueId, int64_t> tagOf;
  /// By name; their tags follow the values' tags.
  std::vector<TiedParam> tied;
};

/// Chunk k runs on stage k mod `stages`. Errors: an op reads a value that an
/// op with no chunk computes, or a value of another chunk of its own stage
/// (only values between stages can travel). The first such operand in program
/// order is the one reported, and the messages are the lowering's own.
std::optional<Error> verifyChunks(const Step &step, int64_t stages);

/// The crossing values and tied parameters of a step that verifyChunks
/// accepts.
Crossings findCrossings(const Step &step, int64_t stages);

/// Microbatch slots: each local chunk's activation buffers have one
/// instance per slot, and its subroutines run on the instances of the
/// action's slot. An F takes a slot; the last action that reads the chunk's
/// activations (B, or W with a split backward) frees it. A freed slot is
/// reused (lowest first) only with one chunk per stage and an unsplit
/// backward (GPipe, 1F1B); otherwise every microbatch gets its own slot,
/// which keeps each instance's life one interval for the memory planner
/// (docs/memory.md): reused slots under interleaving pack ~8% worse and
/// make the best-fit sweep slow.
struct SlotPlan {
  /// Per local chunk: how many slots it has.
  std::vector<int64_t> slots;
  /// Per action of the stage's list: the slot it runs in.
  std::vector<int64_t> slotOfAction;
};
SlotPlan allocateSlots(const std::vector<schedule::Action> &actions, int64_t localChunks,
                       bool splitBackward);

/// A split backward (ZB-H1): whether local chunk `lc` runs B and W as one
/// backward (W empty). That is when every W of the chunk directly follows its
/// B in the stage's list, so nothing could use the gap between them, and the
/// chunk's backward sends nothing (which a W run inside B would delay).
bool fusesBackward(const std::vector<schedule::Action> &actions, int64_t lc,
                   bool backwardSends);

/// One local chunk of a stage.
struct ChunkPlan {
  int64_t localChunk = 0;
  /// The chunk (virtual stage): localChunk * stages + stage.
  int64_t chunk = 0;
  int64_t slots = 0;
  /// Whether its ops read the ids or labels: every slot loads its microbatch.
  bool readsInputs = false;
  /// Split backward only: B is the whole backward, W empty (fusesBackward).
  bool fusedBackward = false;
  /// Tags of the values its forward ops and its backward ops send.
  std::vector<int64_t> forwardSends, backwardSends;
  /// Tags of the values it receives, in the order it first reads them.
  std::vector<int64_t> receives;
};

/// Everything the lowering needs to know about one stage's program.
struct StagePlan {
  int64_t stage = 0;
  bool splitBackward = false;
  /// The last chunk's stage computes the loss.
  bool hasLoss = false;
  std::vector<ChunkPlan> chunks;
  /// Per action of schedule.perStage[stage]: the slot it runs in.
  std::vector<int64_t> slotOfAction;
  /// Tied parameters held here whose home is another stage (name -> home):
  /// this stage neither updates them nor counts them in the gradient norm.
  std::map<std::string, int64_t> replicaOf;

  /// Whether this stage updates parameter `name`.
  bool updates(const std::string &name) const { return !replicaOf.count(name); }
};

/// The plan of stage `stage` of `schedule` for a step that verifyChunks
/// accepts.
StagePlan planStage(const Step &step, const Crossings &crossings,
                    const schedule::Schedule &schedule, int64_t stage);

/// Subroutine names: "forward_v<chunk>", "backward_v<chunk>",
/// "backward_weight_v<chunk>" for F, B and W (every slot runs the same one).
std::string subroutineName(schedule::ActionKind kind, int64_t chunk);
/// The prefix of a chunk's activation buffer names: "v<chunk>/".
std::string chunkPrefix(int64_t chunk);

} // namespace llcdist::stageplan

#endif // LLCDIST_CONVERSION_XFTOPLAN_STAGEPLAN_H
