// Family "rope": rope_fwd / rope_bwd (HF Llama rotate_half), and the cos/sin table every backend's
// kernel reads: inv_freq and the angles are computed in fp32 with transformers' operation order, so
// tables match HF's to within the last-ulp differences of the math library. The binder builds the
// table once per op, for the rows' positions: 0..S-1, or with attr shard_axis this rank's rows of a
// sequence split over that axis (axisRowPositions: cp's mesh.cp_layout on cp). With attr rotary_dim
// (Phi's partial rotary embedding) the table is built for rotary_dim (inv_freq over rotary_dim, llama3
// scaling too) and the kernels rotate each head's first rotary_dim dims only; with attr interleaved
// (GPT-J) they rotate adjacent pairs.
#include "OpDefs.h"
#include "llcdist/runtime/KernelChecks.h"

#include <charconv>
#include <cmath>
#include <memory>
#include <string>

namespace llcdist::rt {
namespace {
// The shortest text that reads back as v ("5e-324", not std::to_string's "0.000000").
std::string formatNumber(double v) {
  char buf[32];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}
}  // namespace

StatusOr<std::vector<float>> ropeInvFreq(const RopeConfig& cfg, int64_t headDim) {
  if (headDim <= 0 || headDim % 2 != 0)
    return Status::invalidArgument("rope: head_dim must be positive and even, got " +
                                   std::to_string(headDim));
  if (!schema::ropeThetaInRange(cfg.theta))
    return Status::invalidArgument("rope: rope_theta " + std::string(schema::kRopeThetaRule) + ", got " +
                                   formatNumber(cfg.theta));
  const int64_t half = headDim / 2;
  std::vector<float> inv(half);
  // _compute_default_rope_parameters: 1.0 / (base ** (arange(0, dim, 2).float() / dim))
  for (int64_t i = 0; i < half; ++i)
    inv[i] = 1.0f / std::pow(cfg.theta, static_cast<float>(2 * i) / static_cast<float>(headDim));
  if (!cfg.llama3) return inv;

  if (!schema::ropeScalingValid(cfg.factor, cfg.lowFreqFactor, cfg.highFreqFactor,
                                 double(cfg.originalMaxPositionEmbeddings)))
    return Status::invalidArgument("rope: llama3 rope_scaling " + std::string(schema::kRopeScalingRule));
  // _compute_llama3_parameters. Python scalars are doubles; tensor ops run in fp32 with the scalar
  // cast to fp32, and `scalar / tensor` is reciprocal(tensor) * scalar.
  const double oldContext = double(cfg.originalMaxPositionEmbeddings);
  const float lowFreqWavelen = static_cast<float>(oldContext / cfg.lowFreqFactor);
  const float highFreqWavelen = static_cast<float>(oldContext / cfg.highFreqFactor);
  const float twoPi = static_cast<float>(2.0 * M_PI);
  const float smoothDenom = static_cast<float>(double(cfg.highFreqFactor) - double(cfg.lowFreqFactor));
  for (int64_t i = 0; i < half; ++i) {
    const float wavelen = (1.0f / inv[i]) * twoPi;
    float llama = wavelen > lowFreqWavelen ? inv[i] / cfg.factor : inv[i];
    const bool medium = !(wavelen < highFreqWavelen) && !(wavelen > lowFreqWavelen);
    if (medium) {
      const float smooth =
          ((1.0f / wavelen) * static_cast<float>(oldContext) - cfg.lowFreqFactor) / smoothDenom;
      llama = (1.0f - smooth) * llama / cfg.factor + smooth * llama;
    }
    inv[i] = llama;
  }
  return inv;
}

StatusOr<RopeTable> makeRopeTable(const RopeConfig& cfg, int64_t headDim, const PositionRuns& positions, int64_t S) {
  if (S < 0 || (S > 0 && positions.minAt(S) < 0)) return Status::invalidArgument("rope: negative position range");
  LLCDIST_ASSIGN_OR_RETURN(std::vector<float> inv, ropeInvFreq(cfg, headDim));
  const int64_t half = headDim / 2;
  RopeTable t;
  t.positions = positions;
  t.seqLen = S;
  t.headDim = headDim;
  t.cos.resize(S * headDim);
  t.sin.resize(S * headDim);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(positions.at(s)) * inv[i];  // fp32, as HF's matmul
      const float c = std::cos(angle), sn = std::sin(angle);
      t.cos[s * headDim + i] = t.cos[s * headDim + half + i] = c;
      t.sin[s * headDim + i] = t.sin[s * headDim + half + i] = sn;
    }
  return t;
}

namespace ops {
namespace {

using K = schema::OpKind;

Status checkRope(const OpChecker& c) {
  const Op& op = c.op();
  const int64_t hd = c.I("hd");
  if (hd % 2 != 0) return c.attrError("hd", "the head dimension must be even, got " + std::to_string(hd));
  if (op.attrs.count(std::string(schema::kRotaryDimAttr))) {
    const int64_t rd = op.intAttr(std::string(schema::kRotaryDimAttr));
    if (rd % 2 != 0 || rd < 2 || rd > hd)
      return c.attrError(schema::kRotaryDimAttr.data(),
                         std::string(schema::opName(op.kind)) + ": rotary_dim must be even and in [2, hd = " +
                             std::to_string(hd) + "] (the rotated dims of each head), got " + std::to_string(rd));
  }
  if (const double theta = op.floatAttr("theta"); !schema::ropeThetaInRange(theta))
    return c.attrError("theta", std::string(schema::kRopeThetaRule) + ", got " + formatNumber(theta));
  const bool llama3 = op.boolAttr("llama3");
  for (const char* a : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
    const bool has = op.attrs.count(a) != 0;
    if (llama3 && !has) return c.attrError(a, "required when llama3 is true");
    if (!llama3 && has) return c.attrError(a, "only allowed when llama3 is true");
  }
  LLCDIST_RETURN_IF_ERROR(c.shardAxis());
  if (op.attrs.count(std::string(schema::kShardAxisAttr)))
    LLCDIST_RETURN_IF_ERROR(c.axisRows(op.stringAttr(std::string(schema::kShardAxisAttr)), c.I("S")));
  const int64_t e = OpChecker::prod({c.I("B"), c.I("S"), c.I("n"), hd});
  for (const char* r : {"x", "y", "dy", "dx"}) LLCDIST_RETURN_IF_ERROR(c.count(r, e, "B×S×n×hd"));
  return Status::ok();
}

StatusOr<OpParams> bindRope(const BindContext& b) {
  const Op& op = b.op;
  RopeParams p;
  p.B = op.intAttr("B");
  p.S = op.intAttr("S");
  p.n = op.intAttr("n");
  p.hd = op.intAttr("hd");
  p.rotaryDim = op.intAttr(std::string(schema::kRotaryDimAttr), p.hd);  // absent: every dim rotates
  p.interleaved = op.boolAttr(std::string(schema::kInterleavedAttr));   // absent: rotate_half
  RopeConfig cfg;
  cfg.theta = float(op.floatAttr("theta"));
  cfg.llama3 = op.boolAttr("llama3");
  if (cfg.llama3) {
    cfg.factor = float(op.floatAttr("factor"));
    cfg.lowFreqFactor = float(op.floatAttr("low_freq_factor"));
    cfg.highFreqFactor = float(op.floatAttr("high_freq_factor"));
    cfg.originalMaxPositionEmbeddings = op.intAttr("original_max_position_embeddings");
  }
  PositionRuns positions;  // 0..S-1; with shard_axis this rank's rows' positions on that axis
  if (op.attrs.count(std::string(schema::kShardAxisAttr))) {
    LLCDIST_ASSIGN_OR_RETURN(MeshAxis axis, b.axis(std::string(schema::kShardAxisAttr), "shard_axis"));
    positions = axisRowPositions(b.manifest, axis, b.mesh.coord(b.rank, axis), p.S);
  }
  LLCDIST_RETURN_IF_ERROR(checkRotaryDim(p.rotaryDim, p.hd));
  LLCDIST_ASSIGN_OR_RETURN(RopeTable table, makeRopeTable(cfg, p.rotaryDim, positions, p.S));
  p.table = std::make_shared<const RopeTable>(std::move(table));
  return OpParams(std::move(p));
}

}  // namespace

void registerRopeOps(OpDefTable& t) {
  t.add(K::kRopeFwd, {"rope", checkRope, bindRope});
  t.add(K::kRopeBwd, {"rope", checkRope, bindRope});
}

}  // namespace ops
}  // namespace llcdist::rt
