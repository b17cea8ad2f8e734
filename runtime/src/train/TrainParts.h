// Private pieces of the training driver (Train.h): parameter init/import/export (sharding-aware) and
// data sources.
#pragma once

#include "llcdist/runtime/Checkpoint.h"
#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Plan.h"

#include <functional>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

namespace llcdist::rt::train {

// Writes the initial value of every param placed in interp's program (its local shard on interp.rank())
// into that placement's buffer: from the manifest's init under `seed`, or from the safetensors file
// `initFrom` when it is not empty (see Train.h for the rules; the file must still hold every param of
// the plan). Sharded params init/slice by global index (params[].sharding); a ZeRO stage-3 param's
// buffer gets the rank's block of its shard (params[].zero).
Status initParams(const Manifest& manifest, Interpreter& interp, uint64_t seed, const std::string& initFrom);
// Writes every param as F32 to `path` (atomically): sharded params gathered from their shards (ZeRO-3
// params from the blocks of each shard); replicated params (and the replicas of each shard, or of each
// ZeRO-3 block of a shard) must be bitwise identical on every rank whose
// program holds a copy (tied params of pipeline plans: whichever program), else an error names the
// param, the first differing rank and element. ranks[r] runs rank r.
Status saveParams(const Manifest& manifest, const std::vector<Interpreter*>& ranks, const std::string& path);
// The same with rank r's param buffers read by read(r, param index, buffer id in r's program): ranks
// of other processes included (the caller fetches them). `world` ranks, r's program
// manifest.programOfRank(r); params are read in the manifest's order, each rank after rank.
using ParamRead = std::function<StatusOr<std::vector<float>>(int rank, int64_t param, int64_t buffer)>;
Status saveParams(const Manifest& manifest, int world, const ParamRead& read, const std::string& path);

// "[2, 3]": a shape in messages.
std::string shapeStr(const std::vector<int64_t>& shape);

// The Hugging Face tensors of a param of (real) shape `shape`: one under its name, or, for a name holding
// "{e}" (a mixture of experts' stacked weight, docs/plan-format.md "Mixture of experts"), one per expert along
// the first dimension, "{e}" replaced by the expert's index (experts.{e}.w1.weight [E, O, K] is E tensors
// experts.0.w1.weight ... each [O, K]). --init-from, --save-params and `export --hf` read and write these.
struct FileTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0, numel = 0;  // elements of the param's real tensor
};
std::vector<FileTensor> fileTensorsOf(const std::string& name, const std::vector<int64_t>& shape);

// For each contiguous run of param `p`'s local shard on member `member` of its sharding axis:
// fn(localOffset, globalOffset, count) in elements. A replicated param is one run [0, numel).
void forEachShardRun(const ParamDesc& p, int64_t member, int64_t axisSize,
                     const std::function<void(int64_t, int64_t, int64_t)>& fn);

// The same for what a rank's value buffer holds when it is the ZeRO block `block` of `blocks` of that
// local shard (stage 3: the contiguous local elements [block·E/blocks, (block+1)·E/blocks), E the local
// numel): fn(bufferOffset, globalOffset, count). blocks = 1 is forEachShardRun.
void forEachHeldRun(const ParamDesc& p, int64_t member, int64_t axisSize, int64_t block, int64_t blocks,
                    const std::function<void(int64_t, int64_t, int64_t)>& fn);

// A slice of a global tensor as a checkpoint's rank file holds it (Checkpoint.h "llcdist.layout"):
// dimension `dim` viewed as splitBlocks blocks, each split in `members` chunks, chunk `member` of each
// (the local tensor); of that, row block `block` of `blocks` (ZeRO; padded as params[].zero says).
struct ShardLayout {
  int64_t dim = 0, splitBlocks = 1, member = 0, members = 1, block = 0, blocks = 1;
};
// That the layout fits the global shape and describes exactly `heldNumel` elements; an error says why.
Status checkLayout(const std::vector<int64_t>& globalShape, const ShardLayout& layout, int64_t heldNumel);
// fn(heldOffset, globalOffset, count) for each contiguous run (checkLayout first).
void forEachLayoutRun(const std::vector<int64_t>& globalShape, const ShardLayout& layout,
                      const std::function<void(int64_t, int64_t, int64_t)>& fn);
// What rank `rank` of the plan holds of param p: its shard, and with `block` its ZeRO block of it.
ShardLayout layoutOf(const Manifest& manifest, const ParamDesc& p, bool block, int rank);

// ---- Checkpoints (Checkpoint.h; TrainCheckpoint.cpp) ----

// A tensor of one program that a checkpoint holds: a manifest param's value buffer there, or the
// optimizer state its adamw / sgd op updates (found among the program's ops).
struct StateTensor {
  int64_t param = 0;    // index into manifest.params
  std::string state;    // "param", "exp_avg", "exp_avg_sq" or "momentum_buffer"
  int64_t buffer = -1;  // in the program
  bool block = false;   // the buffer holds the rank's ZeRO block of its shard (else the whole shard)
  bool writes = false;  // this rank writes it into the checkpoint (one holder of each slice does)
};
std::string stateTensorName(const ParamDesc& p, const std::string& state);
// Every param placed in programs[programIndex] with its state, as rank `rank` (of that program) holds
// them; an optimizer_state buffer that belongs to no param's optimizer op, or a param without its
// optimizer's state, is an error (the checkpoint would miss it).
StatusOr<std::vector<StateTensor>> stateTensorsOf(const Manifest& manifest, const Program& program,
                                                  size_t programIndex, int rank);
// fn(param, state) for every tensor a checkpoint of the plan holds: each param's value ("param") and
// its optimizer's states, in the manifest's order.
void forEachCheckpointTensor(const Manifest& manifest,
                             const std::function<void(const ParamDesc&, const std::string&)>& fn);
// The params' names, Hugging Face shapes and the vocabulary, hashed: plans of one model agree.
std::string modelFingerprint(const Manifest& manifest);

// The run's checkpoint settings and what they need of the run (Train.cpp fills it).
struct CheckpointRun {
  std::string root;
  int64_t keepLast = 0;
  bool async = false;
  const Manifest* manifest = nullptr;
  const Plan* plan = nullptr;
  CheckpointManifest base;  // the run's constant fields (data, model, mesh, plan fingerprint, ...)
  Communicator* comm = nullptr;  // null: one rank
  int world = 1;
  std::ostream* progress = nullptr;  // rank 0 prints a line per checkpoint (null: quiet)
  std::ostream* log = nullptr;        // --log-json, when this process writes it: a record per checkpoint
  std::mutex* progressMutex = nullptr;  // guards progress and log (the reporting rank writes them too)
};

// Saves checkpoints for the ranks of this process: save() at a step boundary on each rank's thread,
// finish() after its last step. Sync: snapshot, write, barrier, rank 0 commits. Async: snapshot (the
// stall), the write on a background thread; the barrier and commit at the rank's next save or
// finish(). The destructor waits for background writes (a failed run commits nothing more).
class CheckpointSaver {
public:
  explicit CheckpointSaver(CheckpointRun run);
  ~CheckpointSaver();
  // Removes what an interrupted save left under the root (stale .partial-*, .deleting-*, latest.tmp*)
  // and checks the root is writable; once, before any rank runs.
  Status prepare();
  Status save(int rank, int64_t step, Interpreter& interp, const std::vector<StateTensor>& states);
  Status finish(int rank);
  void setLog(std::ostream* log);  // --log-json (before any rank runs)

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Checks that `checkpoint` can resume this plan and run: the same model, optimizer kind, global batch,
// sequence length, data, shuffle, seed and LR schedule total; totalSteps the run's --steps (>= the
// checkpoint's step); the same tensors (names) as the plan checkpoints. Errors name the mismatch and
// the flag or plan that fixes it.
Status checkResumable(const CheckpointReader& checkpoint, const Manifest& manifest, const CheckpointManifest& run,
                      int64_t totalSteps);
// Writes every state tensor of a rank's program from the checkpoint, resharded to this plan's layout.
Status loadRankState(const CheckpointReader& checkpoint, const Manifest& manifest,
                     const std::vector<StateTensor>& states, Interpreter& interp);

// Data: a factory of per-rank microbatch sources ("synthetic" or an llm.c token file, loaded and
// checked once); the source for data-parallel coordinate dpRank reads that rank's samples, and of each
// the positions of context-parallel coordinate cpRank (contextParallelPositions under mesh.cp_layout;
// all of them when cp = 1).
struct DataSourceFactory {
  DataSourceFactory() = default;
  explicit DataSourceFactory(std::function<MicrobatchSource(int64_t dpRank, int64_t cpRank)> f) : make(std::move(f)) {}
  MicrobatchSource operator()(int64_t dpRank, int64_t cpRank = 0) const { return make(dpRank, cpRank); }
  std::function<MicrobatchSource(int64_t dpRank, int64_t cpRank)> make;
};
StatusOr<DataSourceFactory> makeDataSources(const Manifest& manifest, const std::string& data, bool shuffle,
                                            uint64_t seed);

}  // namespace llcdist::rt::train
