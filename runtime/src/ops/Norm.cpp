// Family "norm": layer_norm_fwd / _bwd_input / _bwd_weight (torch LayerNorm) and rms_norm_fwd /
// _bwd_input / _bwd_weight (HF LlamaRMSNorm), over rows of H; and the fused forms of
// llcdist-plan-fuse-norm: add_layer_norm_fwd / add_rms_norm_fwd (the residual add and the norm) and
// layer_norm_bwd / rms_norm_bwd (both gradients, and the residual's add).
#include "OpDefs.h"

namespace llcdist::rt::ops {
namespace {

using K = schema::OpKind;

// Roles absent from an op are skipped by count(), so one checker serves the ten ops.
Status checkNorm(const OpChecker& c) {
  const int64_t M = c.I("M"), H = c.I("H");
  for (const char* r : {"x", "y", "dy", "dx", "a", "b", "sum", "dresidual"}) LLCDIST_RETURN_IF_ERROR(c.count(r, OpChecker::prod({M, H}), "M×H"));
  for (const char* r : {"mean", "rstd"}) LLCDIST_RETURN_IF_ERROR(c.count(r, M, "M"));
  for (const char* r : {"gamma", "beta", "weight", "dgamma", "dbeta", "dweight"})
    LLCDIST_RETURN_IF_ERROR(c.count(r, H, "H"));
  return Status::ok();
}
StatusOr<OpParams> bindNorm(const BindContext& b) {
  return OpParams(NormParams{b.op.intAttr("M"), b.op.intAttr("H"), b.op.floatAttr("eps"), b.op.boolAttr("accumulate")});
}

}  // namespace

void registerNormOps(OpDefTable& t) {
  for (K k : {K::kLayerNormFwd, K::kLayerNormBwdInput, K::kLayerNormBwdWeight, K::kRmsNormFwd, K::kRmsNormBwdInput,
              K::kRmsNormBwdWeight, K::kAddLayerNormFwd, K::kAddRmsNormFwd, K::kLayerNormBwd, K::kRmsNormBwd})
    t.add(k, {"norm", checkNorm, bindNorm});
}

}  // namespace llcdist::rt::ops
