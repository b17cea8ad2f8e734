// Family "attention": attention_fwd / attention_bwd (causal self-attention with GQA, the log-sum-exp
// saved for the backward).
#include "OpDefs.h"

namespace llcdist::rt::ops {
namespace {

using K = schema::OpKind;

Status checkAttention(const OpChecker& c) {
  const int64_t B = c.I("B"), S = c.I("S"), nh = c.I("nh"), nkv = c.I("nkv"), hd = c.I("hd");
  if (nh % nkv != 0)
    return c.attrError("nkv", "nh = " + std::to_string(nh) + " is not a multiple of nkv = " + std::to_string(nkv));
  for (const char* r : {"q", "out", "dout", "dq"})
    LLCDIST_RETURN_IF_ERROR(c.count(r, OpChecker::prod({B, S, nh, hd}), "B×S×nh×hd"));
  for (const char* r : {"k", "v", "dk", "dv"})
    LLCDIST_RETURN_IF_ERROR(c.count(r, OpChecker::prod({B, S, nkv, hd}), "B×S×nkv×hd"));
  return c.count("lse", OpChecker::prod({B, nh, S}), "B×nh×S");
}
StatusOr<OpParams> bindAttention(const BindContext& b) {
  const Op& op = b.op;
  return OpParams(AttentionParams{op.intAttr("B"), op.intAttr("S"), op.intAttr("nh"), op.intAttr("nkv"), op.intAttr("hd")});
}

}  // namespace

void registerAttentionOps(OpDefTable& t) {
  t.add(K::kAttentionFwd, {"attention", checkAttention, bindAttention});
  t.add(K::kAttentionBwd, {"attention", checkAttention, bindAttention});
}

}  // namespace llcdist::rt::ops
