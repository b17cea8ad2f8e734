// Family "embedding": embedding_fwd / embedding_bwd_weight (token embedding, vocabulary-parallel with
// attr `shard_axis`) and pos_embedding_fwd / pos_embedding_bwd_weight (GPT-2's learned positions,
// sequence-parallel with attr `shard_axis`: one axis, or tp+cp; from row `offset` of the table, OPT's). embedding_*'s
// optional `scale` (Gemma's multiplier of the gathered rows, and of their gradient) binds as EmbeddingParams::scale,
// embedding_bwd_weight's optional `padding_idx` (nn.Embedding's: no gradient for that id) as ::paddingIdx.
#include "OpDefs.h"
#include "llcdist/runtime/FloatAttrRules.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace llcdist::rt::ops {
namespace {

namespace sc = schema;
using K = sc::OpKind;

// The attr `offset` (kPositionOffsetAttr; the parser took it as an integer >= 1); absent: 0.
int64_t positionOffset(const OpChecker& c) { return c.op().intAttr(std::string(sc::kPositionOffsetAttr), 0); }

// S positions from row `offset` of a table of P: the position embeddings' rule, fused or not.
Status positionsFit(const OpChecker& c, int64_t S, int64_t P, int64_t offset) {
  if (S > P || offset > P - S)
    return c.attrError("S", "S = " + std::to_string(S) +
                                (offset ? " from row offset = " + std::to_string(offset) : "") +
                                " exceeds the position table size P = " + std::to_string(P));
  return Status::ok();
}

// The fused position embedding (roles wpe / dwpe): attrs S and P with it and only with it (offset
// optional), M a multiple of S, S + offset <= P, no shard_axis, the table P×H.
Status checkFusedPositions(const OpChecker& c, const char* role) {
  const Op& op = c.op();
  const bool has = op.arg(role) >= 0;
  for (const char* a : {"S", "P"}) {
    if (has && !op.attrs.count(a)) return c.attrError(a, std::string("required with ") + role);
    if (!has && op.attrs.count(a)) return c.attrError(a, std::string("only allowed with ") + role);
  }
  if (!has && op.attrs.count(std::string(sc::kPositionOffsetAttr)))  // optional with it
    return c.attrError(sc::kPositionOffsetAttr.data(), std::string("only allowed with ") + role);
  if (!has) return Status::ok();
  if (op.attrs.count(std::string(sc::kShardAxisAttr)))
    return c.argError(role, "a sharded embedding (shard_axis) cannot add the position embedding");
  const int64_t M = c.I("M"), S = c.I("S"), P = c.I("P");
  if (M % S != 0)
    return c.attrError("S", "M = " + std::to_string(M) + " is not a multiple of S = " + std::to_string(S));
  const int64_t offset = positionOffset(c);
  LLCDIST_RETURN_IF_ERROR(positionsFit(c, S, P, offset));
  return c.count(role, OpChecker::prod({P, c.I("H")}), "P×H");
}

// attrs.scale: finite and non-zero as the fp32 value the kernels multiply by, and never with the fused
// position embedding (its rows are added unscaled after the gather: a different function).
Status checkEmbeddingScale(const OpChecker& c, const char* positionRole) {
  const Op& op = c.op();
  const std::string name(sc::kEmbeddingScaleAttr);
  if (!op.attrs.count(name)) return Status::ok();
  const double v = op.floatAttr(name);
  const std::string opName(sc::opName(op.kind));
  if (!sc::multiplierValid(v)) {
    std::ostringstream msg;
    msg << opName << ": scale " << sc::kMultiplierRule << ", got " << v;
    return c.attrError(sc::kEmbeddingScaleAttr.data(), msg.str());
  }
  if (op.arg(positionRole) >= 0)
    return c.attrError(sc::kEmbeddingScaleAttr.data(),
                       opName + ": scale cannot be combined with the fused position embedding (args." + positionRole +
                           "); scale the token embedding in a plan without llcdist-plan-fuse-embedding");
  return Status::ok();
}

// embedding_bwd_weight's padding_idx (>= 0 as an index attr): a global id, below V × the shard_axis
// size (the rows of the whole table).
Status checkPaddingIdx(const OpChecker& c) {
  const Op& op = c.op();
  const std::string name(sc::kPaddingIdxAttr);
  if (!op.attrs.count(name)) return Status::ok();
  int64_t shards = 1;
  if (op.attrs.count(std::string(sc::kShardAxisAttr))) {  // vocabulary-parallel: V rows on each member
    MeshAxis axis{};
    LLCDIST_RETURN_IF_ERROR(c.singleAxis(sc::kShardAxisAttr.data(), &axis));
    shards = c.manifest().mesh().axisSize(axis);
  }
  const int64_t rows = OpChecker::prod({c.I("V"), shards}), p = op.intAttr(name);
  if (rows >= 0 && p >= rows)
    return c.attrError(
        name.c_str(),
        "padding_idx = " + std::to_string(p) + " is outside the table's " + std::to_string(rows) + " rows" +
            (shards > 1 ? " (V = " + std::to_string(c.I("V")) + " on each of " + std::to_string(shards) + " shards)"
                        : std::string()));
  return Status::ok();
}

Status checkEmbedding(const OpChecker& c) {
  const int64_t M = c.I("M"), V = c.I("V"), H = c.I("H");
  const bool fwd = c.op().kind == K::kEmbeddingFwd;
  LLCDIST_RETURN_IF_ERROR(c.shardAxis());
  LLCDIST_RETURN_IF_ERROR(checkPaddingIdx(c));
  LLCDIST_RETURN_IF_ERROR(checkFusedPositions(c, fwd ? "wpe" : "dwpe"));
  LLCDIST_RETURN_IF_ERROR(checkEmbeddingScale(c, fwd ? "wpe" : "dwpe"));
  LLCDIST_RETURN_IF_ERROR(c.count("ids", M, "M"));
  if (fwd) {
    LLCDIST_RETURN_IF_ERROR(c.count("table", OpChecker::prod({V, H}), "V×H"));
    return c.count("out", OpChecker::prod({M, H}), "M×H");
  }
  LLCDIST_RETURN_IF_ERROR(c.count("dout", OpChecker::prod({M, H}), "M×H"));
  return c.count("dtable", OpChecker::prod({V, H}), "V×H");
}
StatusOr<OpParams> bindEmbedding(const BindContext& b) {
  EmbeddingParams p;
  p.M = b.op.intAttr("M");
  p.V = b.op.intAttr("V");
  p.H = b.op.intAttr("H");
  p.accumulate = b.op.boolAttr("accumulate");
  p.scale = b.op.floatAttr(std::string(sc::kEmbeddingScaleAttr), 1.0);  // absent: the rows as they are
  p.paddingIdx = b.op.intAttr(std::string(sc::kPaddingIdxAttr), -1);    // absent: every id adds its row
  if (b.op.attrs.count("S")) {  // the fused position embedding: M = B·S rows
    p.S = b.op.intAttr("S");
    p.P = b.op.intAttr("P");
    p.B = p.M / p.S;
    p.posBegin = b.op.intAttr(std::string(sc::kPositionOffsetAttr), 0);  // positions 0..S-1 from that row
  }
  if (b.op.attrs.count(std::string(sc::kShardAxisAttr))) {  // vocabulary-parallel: this rank's slice
    LLCDIST_ASSIGN_OR_RETURN(MeshAxis axis, b.axis(std::string(sc::kShardAxisAttr), "shard_axis"));
    p.vocabShard = VocabShard{b.mesh.coord(b.rank, axis), b.mesh.axisSize(axis)};
  }
  return OpParams(std::move(p));
}

Status checkPosEmbedding(const OpChecker& c) {
  const Op& op = c.op();
  const int64_t B = c.I("B"), S = c.I("S"), H = c.I("H"), P = c.I("P");
  const int64_t offset = positionOffset(c);
  LLCDIST_RETURN_IF_ERROR(positionsFit(c, S, P, offset));
  const std::string attr(sc::kShardAxisAttr);
  if (op.attrs.count(attr)) {
    // Sequence-parallel over one axis, or over tp inside each cp slice (tp+cp): the members' rows are
    // the positions [0, S·n) in some order (n the members), which must fit in P.
    const std::string axis = op.stringAttr(attr);
    const auto axes = parseAxisSet(axis);
    if (!axes)  // an unknown name
      return axis.find('+') == std::string::npos ? c.shardAxis() : c.attrError(attr.c_str(), axisSetError(axis));
    if (!isSequenceAxes(*axes))
      return c.attrError(attr.c_str(),
                         "shard_axis \"" + axis +
                             "\" names a set of mesh axes; a position embedding's "
                             "shard_axis is one mesh axis or \"tp+cp\" (sequence parallelism inside each cp slice)");
    const Mesh& mesh = c.manifest().mesh();
    const int64_t tp = axes->single() ? 1 : mesh.axisSize(MeshAxis::kTp);
    LLCDIST_RETURN_IF_ERROR(c.axisRows(axes->single() ? axis : "cp", OpChecker::prod({S, tp})));
    const int64_t n = mesh.axisSize(*axes);
    const int64_t needed = OpChecker::prod({S, n});
    if (needed < 0 || needed > P - offset)
      return c.attrError("S", "S = " + std::to_string(S) + " positions on each of the " + std::to_string(n) +
                                  " members of shard_axis \"" + axis +
                                  "\" need S·n = " + (needed < 0 ? std::string("(overflow)") : std::to_string(needed)) +
                                  " positions, more than the position table size P = " + std::to_string(P) +
                                  (offset ? " from row offset = " + std::to_string(offset) : ""));
  }
  const bool fwd = op.kind == K::kPosEmbeddingFwd;
  LLCDIST_RETURN_IF_ERROR(c.count(fwd ? "x" : "dy", OpChecker::prod({B, S, H}), "B×S×H"));
  if (fwd) LLCDIST_RETURN_IF_ERROR(c.count("y", OpChecker::prod({B, S, H}), "B×S×H"));
  return c.count(fwd ? "wpe" : "dwpe", OpChecker::prod({P, H}), "P×H");
}
StatusOr<OpParams> bindPosEmbedding(const BindContext& b) {
  EmbeddingParams p;
  p.B = b.op.intAttr("B");
  p.S = b.op.intAttr("S");
  p.H = b.op.intAttr("H");
  p.P = b.op.intAttr("P");
  p.accumulate = b.op.boolAttr("accumulate");
  if (b.op.attrs.count(std::string(sc::kShardAxisAttr))) {  // sequence-parallel: this rank's rows' positions
    LLCDIST_ASSIGN_OR_RETURN(AxisSet axes, b.axisSet(std::string(sc::kShardAxisAttr), "shard_axis"));
    const PositionRuns pos = sequenceRowPositions(b.manifest, b.mesh, axes, b.rank, p.S);
    p.posBegin = pos.first;
    p.posSplit = pos.split;
    p.posBegin2 = pos.second;
  }
  const int64_t offset = b.op.intAttr(std::string(sc::kPositionOffsetAttr), 0);  // OPT's table: position p at row p + 2
  p.posBegin += offset;
  p.posBegin2 += offset;
  return OpParams(std::move(p));
}

}  // namespace

void registerEmbeddingOps(OpDefTable& t) {
  t.add(K::kEmbeddingFwd, {"embedding", checkEmbedding, bindEmbedding});
  t.add(K::kEmbeddingBwdWeight, {"embedding", checkEmbedding, bindEmbedding});
  t.add(K::kPosEmbeddingFwd, {"embedding", checkPosEmbedding, bindPosEmbedding});
  t.add(K::kPosEmbeddingBwdWeight, {"embedding", checkPosEmbedding, bindPosEmbedding});
}

}  // namespace llcdist::rt::ops
