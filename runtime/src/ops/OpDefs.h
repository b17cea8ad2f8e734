// Private: the core's definition of every op kind, registered per kernel family (docs/adding-an-op.md):
// the loader's checker (element counts and attribute consistency, beyond PlanSchema's roles and attr
// types) and the interpreter's binder (attrs, mesh and rank -> the family's OpParams). Backend
// independent: every backend's kernel of a kind reads what its binder produced.
#pragma once

#include "../PlanJson.h"
#include "llcdist/runtime/KernelTable.h"
#include "llcdist/runtime/Mesh.h"
#include "llcdist/runtime/OpParams.h"
#include "llcdist/runtime/Plan.h"

#include <initializer_list>
#include <string>
#include <string_view>

namespace llcdist::rt::ops {

// One op of a program as the loader checks it, with the helpers the families' checkers share. Errors
// name the file and the JSON path of the offending role or attr.
class OpChecker {
public:
  OpChecker(const planjson::Doc& doc, const std::string& path, const Program& prog, const Manifest& manifest,
            const Op& op)
      : doc_(doc), path_(path), prog_(prog), manifest_(manifest), op_(op) {}

  const Op& op() const { return op_; }
  const Program& program() const { return prog_; }
  const Manifest& manifest() const { return manifest_; }
  int64_t I(const char* n) const { return op_.intAttr(n); }

  // An error at the op's `rel` path (e.g. "op", "args.grads").
  Status error(const std::string& rel, const std::string& msg) const;
  Status attrError(const char* attr, const std::string& msg) const;
  Status argError(const char* role, const std::string& msg) const;
  Status argError(const char* role, size_t k, const std::string& msg) const;  // args.<role>[k]
  // Every buffer of `role` (skipped when an optional role is absent) has `expected` elements.
  Status count(const char* role, int64_t expected, const std::string& formula) const;
  // Every role of the op has n elements.
  Status everyRole(int64_t n, const std::string& formula) const;
  // All listed roles have the element count of the first.
  Status sameCount(std::initializer_list<const char*> roles) const;
  // Product of attrs (-1 on overflow, which then never matches a buffer).
  static int64_t prod(std::initializer_list<int64_t> xs);
  // The whole side of all_gather / reduce_scatter / shard_slice: outer×n×inner elements, or with
  // attrs.total (ZeRO's padded blocks) outer×total, total at most n×inner.
  Status wholeSide(const char* role, int64_t n, int64_t outer, int64_t inner) const;
  // attrs.`attr` names one mesh axis; *axis (when not null) gets it. A set of axes ("dp+cp") is an error
  // at the attr saying the op's `attr` needs a single axis.
  Status singleAxis(const char* attr, MeshAxis* axis = nullptr) const;
  // attrs.axis names one mesh axis (send / recv, the ring attention ops); *n (when not null) gets its
  // size from the manifest.
  Status axisSize(int64_t* n) const;
  // attrs.axis names one mesh axis or a set of several joined by '+' ("dp+cp": the collectives and
  // shard_slice); *n (when not null) gets the product of their sizes.
  Status axisSetSize(int64_t* n) const;
  // attrs.shard_axis, when present, names one mesh axis (any size: an axis of size 1 makes the op the
  // unsharded one). Vocabulary-parallel embedding / cross entropy, sequence-parallel position embedding.
  Status shardAxis() const;
  // The S rows of each member of mesh axis `axisName` (a known name) at their positions
  // (axisRowPositions): on cp under mesh.cp_layout "load_balanced" S must be even (two runs of S/2),
  // an error at attrs.S otherwise.
  Status axisRows(const std::string& axisName, int64_t S) const;
  // The element count of buffer `id`.
  int64_t numel(int64_t id) const { return prog_.buffers[size_t(id)].numel(); }
  const BufferDesc& buffer(int64_t id) const { return prog_.buffers[size_t(id)]; }

private:
  std::string argPath(const char* role, size_t k, bool list) const;  // args.<role>[k] or args.<role>

  const planjson::Doc& doc_;
  const std::string& path_;
  const Program& prog_;
  const Manifest& manifest_;
  const Op& op_;
};

// What a binder sees: the validated op and the rank it is bound for.
struct BindContext {
  const Op& op;
  const Manifest& manifest;
  Mesh mesh;
  int rank = 0;

  // The mesh axis named by `attr` (the loader checked it; an unknown name is an Internal error
  // "unknown <what> \"name\"").
  StatusOr<MeshAxis> axis(const std::string& attr, const char* what) const;
  // The same for an attr that may name a set of axes ("dp+cp").
  StatusOr<AxisSet> axisSet(const std::string& attr, const char* what) const;
};

// The global positions of the S rows that coordinate `coord` of `axis` holds (Positions.h): on cp the
// manifest's mesh.cp_layout over a sequence of S·n (n the axis size), on any other axis
// [coord·S, (coord+1)·S). Position embeddings, RoPE and ring attention with an axis.
PositionRuns axisRowPositions(const Manifest& manifest, MeshAxis axis, int64_t coord, int64_t S);
// The sequence axes a position embedding's shard_axis may name: one mesh axis, or tp+cp (sequence
// parallelism inside a context-parallel slice: the sequence split over cp, each cp slice over tp).
bool isSequenceAxes(AxisSet axes);
// The global positions of the S rows `rank` holds of a sequence split over `axes` (isSequenceAxes): one
// axis as axisRowPositions; tp+cp: rows [t·S, (t+1)·S) of the rank's cp slice of S·tp rows (mesh.cp_layout),
// t its tp coordinate.
PositionRuns sequenceRowPositions(const Manifest& manifest, const Mesh& mesh, AxisSet axes, int64_t rank, int64_t S);

struct OpDef {
  std::string_view family;  // the kernel family ("norm", ...): src/ops/<Family>.cpp, docs/adding-an-op.md
  Status (*check)(const OpChecker&);
  StatusOr<OpParams> (*bind)(const BindContext&);
};
using OpDefTable = KernelTable<OpDef>;

// The table of every op kind, built once from the families' registrations below; its completeness is
// checked when it is built (checkOpDefs) and by OpTableTest.
const OpDefTable& opDefs();
Status checkOpDefs();

// A collective's element type (attr `dtype`, checked by the loader; absent: f32). With kBF16 the
// interpreter hands the op its bf16 buffers as they are (no f32 staging). Communication.cpp.
CommDType commDType(const Op& op);

// One per family, in src/ops/<Family>.cpp.
void registerDataOps(OpDefTable& table);           // load_microbatch
void registerLayoutOps(OpDefTable& table);         // zero, split_*, shard_slice
void registerElementwiseOps(OpDefTable& table);    // gelu_tanh_*, gelu_erf_*, swiglu_*, add, accumulate, copy, cast
void registerEmbeddingOps(OpDefTable& table);      // embedding_*, pos_embedding_*
void registerNormOps(OpDefTable& table);           // layer_norm_*, rms_norm_*
void registerLinearOps(OpDefTable& table);         // linear_*, bias_add
void registerRopeOps(OpDefTable& table);           // rope_*
void registerAttentionOps(OpDefTable& table);      // attention_*
void registerLossOps(OpDefTable& table);           // cross_entropy_*
void registerOptimizerOps(OpDefTable& table);      // grad_norm, adamw, sgd
void registerCommunicationOps(OpDefTable& table);  // all_reduce, all_gather, reduce_scatter, send, recv, wait
void registerMoeOps(OpDefTable& table);            // moe_*, grouped_linear_*, sigmoid_gate_*

}  // namespace llcdist::rt::ops
