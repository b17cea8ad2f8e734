// Family "attention": attention_fwd / attention_bwd (causal self-attention with GQA, the log-sum-exp
// saved for the backward), reading q, k, v from three buffers or one packed qkv, and writing dq, dk, dv
// to three or one packed dqkv; and ring attention's attention_block_fwd / _bwd (one step of the ring:
// this rank's query rows against member (c − step) mod n's key/value rows, by global position) and
// attention_merge (context parallelism, docs/plan-format.md "Context parallelism"). The four attention
// ops take Mistral's sliding `window` (optional, an integer >= 1: the schema's check), bound as
// AttentionParams::window (0 when absent), and BLOOM's ALiBi (`alibi_heads`, with `head_axis` under
// tensor parallelism), bound as AttentionParams::alibi with the rank's first head.
#include "OpDefs.h"

namespace llcdist::rt::ops {
namespace {

using K = schema::OpKind;

// Whether the op names `packed` (then none of `parts`) or all of `parts`; an error otherwise.
StatusOr<bool> packedForm(const OpChecker& c, const char* packed, std::initializer_list<const char*> parts) {
  const bool whole = c.op().arg(packed) >= 0;
  int named = 0;
  for (const char* r : parts) named += c.op().arg(r) >= 0;
  if (whole && named == 0) return true;
  if (!whole && named == int(parts.size())) return false;
  std::string list;
  for (const char* r : parts) list += std::string(list.empty() ? "" : ", ") + r;
  return c.argError(packed, whole ? "name either " + std::string(packed) + " or " + list + ", not both"
                                  : "name " + list + " (all three) or the packed " + std::string(packed));
}

// alibi_heads / head_axis (PlanSchema.h: kAlibiHeadsAttr): head_axis only with alibi_heads, one mesh
// axis, and the op's nh heads times its size (1 without it) are alibi_heads.
Status checkAlibi(const OpChecker& c) {
  const std::string heads(schema::kAlibiHeadsAttr), axisAttr(schema::kHeadAxisAttr);
  const bool on = c.op().attrs.count(heads) != 0, split = c.op().attrs.count(axisAttr) != 0;
  if (!on) {
    if (split) return c.attrError(axisAttr.c_str(), "head_axis splits ALiBi's heads: it needs attrs.alibi_heads");
    return Status::ok();
  }
  int64_t n = 1;
  if (split) {
    MeshAxis a{};
    LLCDIST_RETURN_IF_ERROR(c.singleAxis(axisAttr.c_str(), &a));
    n = c.manifest().mesh().axisSize(a);
  }
  const int64_t nh = c.I("nh");
  if (OpChecker::prod({nh, n}) != c.I(heads.c_str()))
    return c.attrError(heads.c_str(),
                       "alibi_heads " + std::to_string(c.I(heads.c_str())) + " is not nh = " + std::to_string(nh) +
                           (split ? " × the head_axis size " + std::to_string(n) : std::string(" (no head_axis)")));
  return Status::ok();
}
// The rank's ALiBi heads: all alibi_heads, the op's nh of them from coordinate × nh on head_axis.
StatusOr<Alibi> bindAlibi(const BindContext& b, int64_t nh) {
  Alibi a;
  a.heads = b.op.intAttr(std::string(schema::kAlibiHeadsAttr));  // 0 when absent: none
  if (a.heads > 0 && b.op.attrs.count(std::string(schema::kHeadAxisAttr))) {
    LLCDIST_ASSIGN_OR_RETURN(MeshAxis axis, b.axis(std::string(schema::kHeadAxisAttr), "head_axis"));
    a.head0 = b.mesh.coord(b.rank, axis) * nh;
  }
  return a;
}

Status checkAttention(const OpChecker& c) {
  const int64_t B = c.I("B"), S = c.I("S"), nh = c.I("nh"), nkv = c.I("nkv"), hd = c.I("hd");
  if (nh % nkv != 0)
    return c.attrError("nkv", "nh = " + std::to_string(nh) + " is not a multiple of nkv = " + std::to_string(nkv));
  LLCDIST_RETURN_IF_ERROR(checkAlibi(c));
  LLCDIST_RETURN_IF_ERROR(packedForm(c, "qkv", {"q", "k", "v"}).status());
  if (c.op().kind == K::kAttentionBwd) LLCDIST_RETURN_IF_ERROR(packedForm(c, "dqkv", {"dq", "dk", "dv"}).status());
  for (const char* r : {"q", "out", "dout", "dq"})
    LLCDIST_RETURN_IF_ERROR(c.count(r, OpChecker::prod({B, S, nh, hd}), "B×S×nh×hd"));
  for (const char* r : {"k", "v", "dk", "dv"})
    LLCDIST_RETURN_IF_ERROR(c.count(r, OpChecker::prod({B, S, nkv, hd}), "B×S×nkv×hd"));
  for (const char* r : {"qkv", "dqkv"})
    LLCDIST_RETURN_IF_ERROR(c.count(r, OpChecker::prod({B, S, nh + 2 * nkv, hd}), "B×S×(nh+2·nkv)×hd"));
  return c.count("lse", OpChecker::prod({B, nh, S}), "B×nh×S");
}
StatusOr<OpParams> bindAttention(const BindContext& b) {
  const Op& op = b.op;
  AttentionParams p{op.intAttr("B"), op.intAttr("S"), op.intAttr("nh"), op.intAttr("nkv"), op.intAttr("hd")};
  p.packedQkv = op.arg("qkv") >= 0;
  p.packedGrad = op.arg("dqkv") >= 0;
  p.window = op.intAttr(std::string(schema::kWindowAttr));  // 0 when absent: plain causal
  LLCDIST_ASSIGN_OR_RETURN(p.alibi, bindAlibi(b, p.nh));
  return OpParams(p);
}

// attention_block_fwd / _bwd: the shape's counts, `axis` a mesh axis, `step` < its size, and S rows a
// member under the axis's layout.
Status checkAttentionBlock(const OpChecker& c) {
  const int64_t B = c.I("B"), S = c.I("S"), nh = c.I("nh"), nkv = c.I("nkv"), hd = c.I("hd");
  if (nh % nkv != 0)
    return c.attrError("nkv", "nh = " + std::to_string(nh) + " is not a multiple of nkv = " + std::to_string(nkv));
  LLCDIST_RETURN_IF_ERROR(checkAlibi(c));
  int64_t n = 0;
  LLCDIST_RETURN_IF_ERROR(c.axisSize(&n));
  if (c.I("step") >= n)
    return c.attrError("step", "step " + std::to_string(c.I("step")) + " is out of range: axis \"" +
                                   c.op().stringAttr("axis") + "\" has size " + std::to_string(n) + " (steps 0.." +
                                   std::to_string(n - 1) + ")");
  LLCDIST_RETURN_IF_ERROR(c.axisRows(c.op().stringAttr("axis"), S));
  for (const char* r : {"q", "out", "dout", "dq"})
    LLCDIST_RETURN_IF_ERROR(c.count(r, OpChecker::prod({B, S, nh, hd}), "B×S×nh×hd"));
  for (const char* r : {"k", "v", "dk", "dv"})
    LLCDIST_RETURN_IF_ERROR(c.count(r, OpChecker::prod({B, S, nkv, hd}), "B×S×nkv×hd"));
  return c.count("lse", OpChecker::prod({B, nh, S}), "B×nh×S");
}
// The query rows are this rank's (coordinate c on `axis`), the key/value rows member (c − step) mod n's.
StatusOr<OpParams> bindAttentionBlock(const BindContext& b) {
  const Op& op = b.op;
  AttentionParams p{op.intAttr("B"), op.intAttr("S"), op.intAttr("nh"), op.intAttr("nkv"), op.intAttr("hd")};
  LLCDIST_ASSIGN_OR_RETURN(MeshAxis axis, b.axis("axis", "axis"));
  const int64_t n = b.mesh.axisSize(axis), c = b.mesh.coord(b.rank, axis), step = op.intAttr("step");
  if (step < 0 || step >= n) return Status::internal("step " + std::to_string(step) + " out of range for its axis");
  p.qPos = axisRowPositions(b.manifest, axis, c, p.S);
  p.kvPos = axisRowPositions(b.manifest, axis, ((c - step) % n + n) % n, p.S);
  p.window = op.intAttr(std::string(schema::kWindowAttr));
  LLCDIST_ASSIGN_OR_RETURN(p.alibi, bindAlibi(b, p.nh));
  return OpParams(p);
}

Status checkAttentionMerge(const OpChecker& c) {
  const int64_t B = c.I("B"), S = c.I("S"), nh = c.I("nh"), hd = c.I("hd");
  for (const char* r : {"out", "out_b"})
    LLCDIST_RETURN_IF_ERROR(c.count(r, OpChecker::prod({B, S, nh, hd}), "B×S×nh×hd"));
  for (const char* r : {"lse", "lse_b"}) LLCDIST_RETURN_IF_ERROR(c.count(r, OpChecker::prod({B, nh, S}), "B×nh×S"));
  return Status::ok();
}
StatusOr<OpParams> bindAttentionMerge(const BindContext& b) {
  const Op& op = b.op;
  AttentionParams p;
  p.B = op.intAttr("B");
  p.S = op.intAttr("S");
  p.nh = op.intAttr("nh");
  p.hd = op.intAttr("hd");
  return OpParams(p);
}

}  // namespace

void registerAttentionOps(OpDefTable& t) {
  t.add(K::kAttentionFwd, {"attention", checkAttention, bindAttention});
  t.add(K::kAttentionBwd, {"attention", checkAttention, bindAttention});
  t.add(K::kAttentionBlockFwd, {"attention", checkAttentionBlock, bindAttentionBlock});
  t.add(K::kAttentionBlockBwd, {"attention", checkAttentionBlock, bindAttentionBlock});
  t.add(K::kAttentionMerge, {"attention", checkAttentionMerge, bindAttentionMerge});
}

}  // namespace llcdist::rt::ops
