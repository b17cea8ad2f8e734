// Loading and validating a plan directory (docs/plan-format.md): plan/manifest.json plus the
// program-N.json files it lists, into plain C++ structs.
//
// Contract: loadPlan() either returns a plan that the interpreter can run without further checks
// (every buffer reference resolves, every buffer lies inside the arena at an aligned offset with
// bytes = numel·sizeof(dtype), every op has exactly its roles with the right dtypes and element
// counts, no op's written argument overlaps another argument except where PlanSchema allows an exact
// alias, every action names a subroutine and a valid microbatch; asynchronous plans: every op's queue
// is listed and every token obeys the token rules over the step's execution order, so a run never
// waits for a token nobody started; every param placement names param/grad
// buffers of its program (of the shapes its sharding and ZeRO stage imply); pipeline plans have one program per stage with exactly that stage's ranks,
// and every send/recv peer is a coordinate of its axis), or an error whose message names the
// file and the JSON path ("program-0.json: subroutines[1].ops[3].args.w: ...") and what is wrong. It
// never crashes or throws on bad input (truncated or malformed JSON included).
#pragma once

#include "llcdist/runtime/Kernels.h"
#include "llcdist/runtime/Mesh.h"
#include "llcdist/runtime/PlanSchema.h"
#include "llcdist/runtime/Positions.h"
#include "llcdist/runtime/Status.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <array>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace llcdist::rt {

struct ParamInit {
  enum class Kind { kNormal, kZeros, kOnes };
  Kind kind = Kind::kZeros;
  double std = 0.0;  // kNormal only
  // kNormal: row zeroRow of dimension 0 (a real row) starts at zero instead, as torch's
  // nn.Embedding(padding_idx) initializes its padding row; -1: none.
  int64_t zeroRow = -1;
};

// params[].sharding: dimension `dim` of the Hugging Face tensor is viewed as `blocks` equal blocks,
// each split evenly into n / replicas chunks over the `axis` group's n members; member m holds, from
// each block in order, its (m / replicas)-th chunk, concatenated. `replicas` (default 1) consecutive
// members hold the same shard (kv-head replication: the tp ranks whose query heads share a kv head).
struct ParamSharding {
  MeshAxis axis = MeshAxis::kTp;
  int64_t dim = 0;
  int64_t blocks = 1;
  int64_t replicas = 1;
};

// params[].zero (feature "zero"; docs/plan-format.md "ZeRO plans"): the param's LOCAL tensor (its shape
// after `sharding`) is split along its first dimension into n equal row blocks over the `axis` group's n
// members; member c owns block c, the contiguous local elements [c·E/n, (c+1)·E/n) (E = local numel).
// `axis` is one mesh axis or a set ("dp+cp": Megatron's data-parallel group under context parallelism):
// n = Mesh::axisSize(axis), c = Mesh::coord(rank, axis), the member index in global rank order.
// When n does not divide the rows, each block has blockRows = ceil(rows / n) rows (the plan says so):
// block c holds the local elements [c·b, min((c+1)·b, E)) (b = blockRows · E / rows) followed by zero
// padding, which no kernel, save or gradient norm ever sees as data.
// Stage 1: buffer and grad hold the whole local tensor (only the optimizer state is per block); stage
// 2: the grad holds the block; stage 3: buffer and grad both hold the block.
struct ParamZero {
  AxisSet axis = AxisSet::of(MeshAxis::kDp);
  int64_t stage = 1;  // 1, 2 or 3
  // Stages 1 and 2: the value buffer holds the block too (`"value_block": true`): the f32 master of a
  // mixed-precision plan, whose bf16 working copy is whole. Stage 3 always holds the block.
  bool valueBlock = false;
  // `"block_rows"`: the rows of a padded block, ceil(rows / n); 0 when n divides the rows (absent).
  int64_t blockRows = 0;
};

struct ParamDesc {
  // Where a copy of the param lives: its value and gradient buffers in programs[program]. A param placed
  // in several programs (tied weights across pipeline stages) is a replica: every copy starts with the
  // same values and the plan keeps them identical (docs/plan-format.md "Pipeline plans").
  struct Placement {
    int64_t program = 0;
    int64_t buffer = -1;
    int64_t grad = -1;
  };
  std::string name;            // Hugging Face name
  std::vector<int64_t> shape;  // Hugging Face layout (the global tensor)
  // params[].dtype: f32 or bf16; the value buffer of every placement has this dtype (its grad buffer
  // f32 or bf16). Init and --init-from round to it; --save-params writes F32 (exact).
  schema::ElemType dtype = schema::ElemType::kF32;
  // Always at least one entry, with distinct programs, in the JSON's order. The legacy spelling
  // (params[i].buffer / .grad) becomes one placement in program 0.
  std::vector<Placement> placements;
  bool legacyBufferGrad = false;  // spelled with buffer/grad (error paths name params[i].buffer)
  int64_t buffer = -1;            // = placements[0].buffer (for single-program callers)
  int64_t grad = -1;              // = placements[0].grad
  ParamInit init;
  bool weightDecay = false;
  std::optional<ParamSharding> sharding;  // absent: replicated on every rank
  std::vector<int64_t> localShape;        // `shape`, dim divided by n / replicas when sharded (the local tensor)
  std::optional<ParamZero> zero;          // absent: no ZeRO split
  // The zero block's shape: localShape with dim 0 divided by the zero axis size, rounded up (padded
  // blocks); = localShape without `zero`.
  std::vector<int64_t> blockShape;
  // params[].vocab_padded (feature "vocab_padding"): dim 0 is the vocabulary, padded to
  // model.padded_vocab_size rows. The rows past model.vocab_size start at zero and are never in a
  // safetensors file: --init-from reads fileShape and zero-fills them, --save-params strips them.
  bool vocabPadded = false;
  std::vector<int64_t> fileShape;         // the Hugging Face tensor: `shape`, real rows only if padded
  int64_t numel() const;                  // of the global tensor
  int64_t fileNumel() const;              // of fileShape: the global tensor's first fileNumel elements
  int64_t localNumel() const;
  int64_t blockNumel() const;
  // What the param's buffers hold: the value buffer the zero block under stage 3, the gradient the
  // block under stages 2 and 3, else the whole local tensor (localShape).
  bool bufferHoldsBlock() const { return zero && (zero->stage >= 3 || zero->valueBlock); }
  bool gradHoldsBlock() const { return zero && zero->stage >= 2; }
  const std::vector<int64_t>& bufferShape() const { return bufferHoldsBlock() ? blockShape : localShape; }
  const std::vector<int64_t>& gradShape() const { return gradHoldsBlock() ? blockShape : localShape; }
  // The placement in programs[program], or null when the param has no copy there.
  const Placement* placementIn(int64_t program) const;
};

struct OptimizerDesc {
  enum class Kind { kAdamW, kSgd };
  Kind kind = Kind::kAdamW;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adamw
  double momentum = 0.0;                          // sgd
  double weightDecay = 0.0;
};

struct Manifest {
  std::vector<std::string> features;
  std::string modelName, architecture;
  schema::ElemType modelDtype = schema::ElemType::kF32;  // model.dtype: f32 or bf16 (descriptive)
  int64_t vocabSize = 0;
  // model.padded_vocab_size (feature "vocab_padding"; > vocabSize), 0 without padding.
  int64_t paddedVocabSize = 0;
  int64_t seqLen = 0, microBatch = 0, microbatches = 0, dataParallel = 0, globalBatch = 0;
  // mesh.cp (feature "context_parallel"; absent: 1).
  int64_t meshDp = 1, meshTp = 1, meshPp = 1, meshCp = 1;
  // mesh.ep (feature "expert_parallel"; absent: 1): a divisor of dp, the size of the derived axis "ep"
  // (Mesh.h).
  int64_t meshEp = 1;
  // mesh.cp_layout (absent: contiguous): the positions each cp rank holds (Positions.h).
  schema::CpLayout cpLayout = schema::CpLayout::kContiguous;
  // Fastest first, all four axes: a three-name mesh.rank_order gets cp appended (the slowest axis).
  std::array<MeshAxis, kNumMeshAxes> rankOrder = Mesh::kDefaultOrder;
  OptimizerDesc optimizer;
  LrSchedule lrSchedule;  // totalSteps 0 = "the run's --steps" (resolved by the caller)
  double gradClip = 0.0;
  std::vector<ParamDesc> params;
  struct ProgramRef {
    std::string file;
    std::vector<int64_t> ranks;
    int64_t stage = 0;  // programs[i].stage (optional in JSON; always i)
  };
  // One program without the feature "pipeline" (every rank runs it); with it, one program per pipeline
  // stage: programs[i] runs exactly the ranks whose pp coordinate is i.
  std::vector<ProgramRef> programs;
  int64_t worldSize() const { return meshDp * meshTp * meshPp * meshCp; }
  bool hasFeature(std::string_view name) const;
  // The index of the program whose ranks contain `rank`, or -1.
  int64_t programOfRank(int64_t rank) const;
  Mesh mesh() const {
    Mesh m = Mesh::make(meshDp, meshTp, meshPp, meshCp);
    m.order = rankOrder;
    m.ep = meshEp;
    return m;
  }
};

struct BufferDesc {
  int64_t id = 0;
  std::string name;
  schema::BufferKind kind = schema::BufferKind::kScratch;
  schema::ElemType dtype = schema::ElemType::kF32;
  std::vector<int64_t> shape;  // [] = scalar
  int64_t offset = 0, bytes = 0;
  // A slotted buffer (docs/plan-format.md "Pipeline plans"): one instance per microbatch slot, instance k
  // at slotOffsets[k] (slotOffsets[0] == offset). Empty: one instance, at offset.
  std::vector<int64_t> slotOffsets;
  int64_t numel() const;
  int64_t instances() const { return slotOffsets.empty() ? 1 : int64_t(slotOffsets.size()); }
  // The arena offset of the instance an action with `slot` uses (a buffer with one instance: offset).
  int64_t offsetAt(int64_t slot) const { return slotOffsets.empty() ? offset : slotOffsets[size_t(slot)]; }
};

using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>>;

struct Op {
  schema::OpKind kind = schema::OpKind::kFillZero;
  // args[i] holds the buffer ids of role kOpSpecs[kind].args[i]: one id (kOne), zero or one id
  // (kOptional), one or more ids (kList), none or more (kOptionalList).
  std::vector<std::vector<int64_t>> args;
  std::map<std::string, AttrValue> attrs;  // validated: names and types as in PlanSchema
  std::string loc;                         // provenance ("" when absent)
  // Feature "async" (docs/plan-format.md "Asynchronous plans"): the op's queue, an index into
  // Program::queues (0: "compute", the default); and its token: on a communication op, >= 0 starts it
  // asynchronously (-1: synchronous); on a wait, the token it waits for.
  int64_t queue = 0;
  int64_t token = -1;
  bool startsAsync() const { return token >= 0 && kind != schema::OpKind::kWait; }

  // Typed attribute access; the loader guarantees presence and type of required attrs.
  int64_t intAttr(const std::string& name, int64_t dflt = 0) const;
  double floatAttr(const std::string& name, double dflt = 0.0) const;  // int attrs convert
  bool boolAttr(const std::string& name, bool dflt = false) const;
  std::string stringAttr(const std::string& name) const;
  std::vector<int64_t> intListAttr(const std::string& name) const;
  // The single buffer id of a kOne/kOptional role (-1 when an optional role is absent).
  int64_t arg(std::string_view role) const;
  const std::vector<int64_t>& argList(std::string_view role) const;
  // How the op uses the buffers of role index `role` (kOpSpecs[kind].args[role]): the schema's access,
  // except that a read-write role of an op with attr `accumulate` false is write-only (it is
  // overwritten, not added into).
  schema::ArgAccess access(size_t role) const;
  // send / recv: the peer's coordinate on `axis` for a rank at coordinate `coord` of an axis of
  // `size` members: attr `peer`, or with `shift` (a ring's step) (coord + shift) mod size.
  int64_t peerCoordinate(int64_t coord, int64_t size) const;
};

struct Subroutine {
  std::string name;
  std::vector<Op> ops;
};

struct Action {
  int64_t subroutine = 0;   // index into Program::subroutines
  int64_t microbatch = -1;  // -1 when absent
  int64_t slot = 0;         // the instance of each slotted buffer its subroutine's ops use
};

struct Program {
  std::string file;  // as listed in the manifest
  int64_t arenaBytes = 0;
  // "queues" (feature "async"): unique names, the first kComputeQueue; absent: just kComputeQueue.
  std::vector<std::string> queues = {std::string(schema::kComputeQueue)};
  std::vector<BufferDesc> buffers;  // buffers[i].id == i
  std::vector<Subroutine> subroutines;
  std::vector<Action> actions;
  int64_t findBuffer(std::string_view name) const;  // id or -1
};

struct Plan {
  std::string dir;
  Manifest manifest;
  std::vector<Program> programs;  // parallel to manifest.programs
  // Which programs loadPlan read (a program it skipped is empty); empty: every one.
  std::vector<bool> loaded;
  bool isLoaded(size_t program) const { return loaded.empty() || loaded[program]; }
};

// Parses and validates manifest.json text. `file` names the file in error messages.
StatusOr<Manifest> parseManifest(const std::string& text, const std::string& file);
// Parses and validates one program's text in the context of its manifest (microbatch counts, batch
// sizes, optimizer kind). Params are cross-checked by loadPlan / validateParams.
StatusOr<Program> parseProgram(const std::string& text, const std::string& file, const Manifest& manifest);
// The same checks on documents already parsed (the compiler's in-memory plan, which
// llcdist-verify-plan loads without writing and re-reading the text). Errors name `file` as above.
StatusOr<Manifest> parseManifestDocument(const nlohmann::ordered_json& root, const std::string& file);
StatusOr<Program> parseProgramDocument(const nlohmann::ordered_json& root, const std::string& file,
                                       const Manifest& manifest);
// Checks every param's placement in programs[programIndex] (`program`): buffer/grad ids in range,
// kinds param/grad, the value buffer of the param's dtype and the grad f32 or bf16, the local shape (or
// the ZeRO block where the stage says so: ParamDesc::bufferShape / gradShape), no buffer serving two
// params. Errors name params[i].buffer / .grad (legacy spelling) or params[i].placements[k].buffer /
// .grad.
Status validateParams(const Manifest& manifest, const Program& program, size_t programIndex);
// The same for programs[0] (single-program plans).
Status validateParams(const Manifest& manifest, const Program& program);
// Reads dir/manifest.json and every program it lists; errors name the file (path within the dir).
StatusOr<Plan> loadPlan(const std::string& dir);
// Only the programs `wanted` (given the parsed manifest and a program's index) accepts are read and
// checked; the others stay empty (Plan::isLoaded). One process of a multi-process run reads its own
// ranks' programs this way.
StatusOr<Plan> loadPlan(const std::string& dir, const std::function<bool(const Manifest&, size_t)>& wanted);

}  // namespace llcdist::rt
