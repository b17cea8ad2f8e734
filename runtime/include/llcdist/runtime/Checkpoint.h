// Checkpoints of a training run (docs/checkpoints.md): what `llc-dist run --checkpoint-dir D` writes,
// what `--resume D` reads (into the same plan or one for another mesh), and `llc-dist export`.
//
// Layout of a checkpoint root D:
//   D/latest                  the name of the newest committed checkpoint ("step-00000006\n"),
//                             replaced (durably) last
//   D/step-00000006/          one committed checkpoint (a later save of the same step: step-00000006-1)
//     checkpoint.json         the manifest (CheckpointManifest below), written last inside the directory
//     rank-00003.safetensors  the tensors rank 3 owns (the lowest rank holding each shard writes it)
//     model-config.json       the plan's Hugging Face config, when the plan has one (export reads it)
//   D/.partial-step-00000006/ a checkpoint being written: renamed to step-00000006 on commit; removed
//                             when the next run with --checkpoint-dir D starts
//
// A rank file holds, for every param whose shard (or ZeRO block) the rank owns, the master value
// (Hugging Face name) and the optimizer state (NAME.exp_avg, NAME.exp_avg_sq for AdamW,
// NAME.momentum_buffer for SGD with momentum: PyTorch's names), each in its buffer's shape and dtype
// (F32 or BF16, the exact bits). Its __metadata__ says which slice of the global tensor each holds:
// "llcdist.layout" = {"NAME": {"dim": d, "split_blocks": b, "member": i, "members": n, "block": c,
// "blocks": k}}: the global tensor's dimension d viewed as b blocks, each split in n chunks, the file
// holding chunk i of each block (a replicated tensor: n = 1), and of that local tensor the row block c
// of k (ZeRO; k = 1: all of it; docs/plan-format.md "Sharded parameters", "ZeRO plans"); plus
// "llcdist.step", "llcdist.rank" and "llcdist.plan" (the saving plan's fingerprint).
//
// Errors are never silent: a missing, truncated or corrupted shard file (size or checksum), a file of
// another step or plan, a manifest of another model or a tensor no file covers is an error naming the
// file and the tensor, and the newest other complete checkpoint under the root as the fallback.
#pragma once

#include "llcdist/runtime/Status.h"

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace llcdist::rt {

inline constexpr int64_t kCheckpointFormatVersion = 1;
inline constexpr const char* kCheckpointManifestFile = "checkpoint.json";
inline constexpr const char* kCheckpointLatestFile = "latest";
inline constexpr const char* kModelConfigFile = "model-config.json";

struct CheckpointTensorDesc {
  std::string name;                // in the rank files: PARAM or PARAM.STATE
  std::string param;               // the Hugging Face parameter name
  std::string state;               // "param", "exp_avg", "exp_avg_sq" or "momentum_buffer"
  std::vector<int64_t> shape;      // the global tensor as the saving plan held it (vocabulary padding in)
  std::vector<int64_t> realShape;  // the Hugging Face tensor (padding rows stripped)
  std::string dtype;               // "f32" or "bf16": the saving plan's buffers
};

struct CheckpointFileDesc {
  std::string file;  // "rank-00003.safetensors"
  int64_t rank = 0;
  int64_t bytes = 0;
  std::string checksum;                       // XXH3-64 of the file, 16 hex digits
  std::map<std::string, std::string> tensors; // tensor name -> XXH3-64 of its data bytes
};

struct CheckpointManifest {
  int64_t version = kCheckpointFormatVersion;
  int64_t step = 0;             // steps completed: the resumed run's first step
  int64_t samplesConsumed = 0;  // global samples the run has read: step × global batch
  int64_t globalBatch = 0, seqLen = 0;
  int64_t lrTotalSteps = 0;     // the LR schedule's total steps in the saving run
  std::string lrSchedule;       // "constant" or "cosine"
  // Data and RNG: every random stream of the runtime is counter-based (Rng.h), a pure function of
  // (seed, step, index): the state is the seed and the step.
  std::string data;             // "synthetic" or the token file's path
  bool shuffle = false;
  uint64_t seed = 0;
  std::string modelName, architecture;
  std::string modelFingerprint;  // the params' names and Hugging Face shapes, the vocabulary
  int64_t vocabSize = 0;
  int64_t meshDp = 1, meshTp = 1, meshPp = 1, meshCp = 1;  // mesh.cp: written only when > 1
  std::string planFingerprint;   // of the saving plan's manifest.json
  std::string optimizer;         // "adamw" or "sgd"
  bool modelConfig = false;      // model-config.json is in the directory
  std::vector<CheckpointTensorDesc> tensors;
  std::vector<CheckpointFileDesc> files;
};

// Bounds of what a checkpoint may claim, checked before anything is allocated from it.
inline constexpr int64_t kMaxCheckpointTensorElements = int64_t(1) << 40;
inline constexpr int64_t kMaxCheckpointRanks = int64_t(1) << 20;
// A name with no '/', '\' or NUL, not "." or "..": a file inside the checkpoint directory.
bool isPlainFileName(const std::string& name);

// checkpoint.json text <-> manifest. Parsing is strict (JSON depth, duplicate keys, every field's
// type and range, names that are plain file names); errors name `file` and the field.
StatusOr<CheckpointManifest> parseCheckpointManifest(const std::string& text, const std::string& file);
std::string checkpointManifestText(const CheckpointManifest& manifest);

// A checkpoint directory from what the user named: a step directory (it holds checkpoint.json), or a
// root whose `latest` names one.
StatusOr<std::string> resolveCheckpoint(const std::string& path);
// The committed checkpoint directories under `root`, oldest first (by step, then name).
std::vector<std::string> listCheckpoints(const std::string& root);

// An opened checkpoint: its manifest read and every listed file verified (present, size, checksum,
// step and plan in its metadata); global tensors assembled from the shards on request.
class CheckpointReader {
public:
  static StatusOr<CheckpointReader> open(const std::string& path);
  CheckpointReader(CheckpointReader&&) noexcept;
  CheckpointReader& operator=(CheckpointReader&&) noexcept;
  ~CheckpointReader();

  const std::string& dir() const;
  const CheckpointManifest& manifest() const;
  const CheckpointTensorDesc* find(const std::string& name) const;
  // The global tensor `name` (desc.shape), each element from a shard that holds it; elements of its
  // real rows that no file covers are an error (naming the tensor).
  StatusOr<std::vector<float>> readGlobal(const std::string& name) const;
  // An error message's tail naming the fallback: "; the newest other checkpoint is D/step-.. (--resume
  // D/step-..)", or "" when there is none.
  std::string fallbackHint() const;

private:
  struct Impl;
  explicit CheckpointReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// `llc-dist export --info`: what a checkpoint holds, as text or JSON.
std::string describeCheckpoint(const CheckpointReader& checkpoint, bool json);

// `llc-dist export D --hf OUT`: config.json (the checkpoint's model-config.json, or `configPath`) and
// the parameters as F32 safetensors with Hugging Face names and shapes: model.safetensors, or, past
// maxShardBytes, model-0000i-of-0000n.safetensors with model.safetensors.index.json, as
// transformers' save_pretrained writes them. OUT is created; files already there are replaced.
struct HfExportOptions {
  std::string outDir;
  std::string configPath;  // "" = the checkpoint's model-config.json
  int64_t maxShardBytes = int64_t(5) << 30;
};
Status exportHuggingFace(const CheckpointReader& checkpoint, const HfExportOptions& options, std::ostream& log);

}  // namespace llcdist::rt
