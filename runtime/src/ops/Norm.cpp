// Family "norm": layer_norm_fwd / _bwd_input / _bwd_weight (torch LayerNorm; without beta MPT's
// bias-free one; without gamma and beta OLMo's non-parametric LayerNorm) and rms_norm_fwd /
// _bwd_input / _bwd_weight (HF LlamaRMSNorm), over rows of H; and the fused forms of
// llcdist-plan-fuse-norm: add_layer_norm_fwd / add_rms_norm_fwd (the residual add and the norm) and
// layer_norm_bwd / rms_norm_bwd (both gradients, and the residual's add). The RMS norms' optional
// `weight_offset` (Gemma: the weight used is weight_offset + w) binds as NormParams::weightOffset.
#include "OpDefs.h"
#include "llcdist/runtime/FloatAttrRules.h"

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

namespace llcdist::rt::ops {
namespace {

namespace sc = schema;
using K = sc::OpKind;

// Roles absent from an op are skipped by count(), so one checker serves the ten ops.
Status checkNorm(const OpChecker& c) {
  const int64_t M = c.I("M"), H = c.I("H");
  for (const char* r : {"x", "y", "dy", "dx", "a", "b", "sum", "dresidual"}) LLCDIST_RETURN_IF_ERROR(c.count(r, OpChecker::prod({M, H}), "M×H"));
  for (const char* r : {"mean", "rstd"}) LLCDIST_RETURN_IF_ERROR(c.count(r, M, "M"));
  for (const char* r : {"gamma", "beta", "weight", "dgamma", "dbeta", "dweight"})
    LLCDIST_RETURN_IF_ERROR(c.count(r, H, "H"));
  // A LayerNorm's optional parameter roles: beta needs gamma (a LayerNorm without a bias has gamma alone,
  // MPT's; one without an affine transform neither: gamma 1, beta 0); in layer_norm_bwd dgamma comes
  // with gamma and dbeta needs dgamma.
  const auto has = [&c](const char* r) {
    const int i = sc::argIndex(c.op().kind, r);
    return i >= 0 && !c.op().args[size_t(i)].empty();
  };
  const auto inSchema = [&c](const char* r) { return sc::argIndex(c.op().kind, r) >= 0; };
  const std::string name(sc::opName(c.op().kind));
  if (has("beta") && !has("gamma"))
    return c.argError("beta", name +
                                  ": beta needs gamma (an affine LayerNorm has both, one without a bias gamma "
                                  "alone, one without an affine transform neither); args.gamma is missing");
  if (inSchema("dgamma") && inSchema("gamma") && has("gamma") != has("dgamma"))
    return c.argError(has("gamma") ? "gamma" : "dgamma",
                      name + ": gamma and dgamma come together (a LayerNorm with a weight) or not at all; args." +
                          (has("gamma") ? "dgamma" : "gamma") + " is missing");
  if (has("dbeta") && !has("dgamma")) return c.argError("dbeta", name + ": dbeta needs dgamma; args.dgamma is missing");
  // weight_offset (only the RMS norms' schemas have it): a finite JSON number (the schema), and finite
  // as the fp32 value the kernels add (1e39 is not).
  const std::string offset(sc::kWeightOffsetAttr);
  if (c.op().attrs.count(offset)) {
    const double v = c.op().floatAttr(offset);
    if (!sc::weightOffsetValid(v)) {
      std::ostringstream msg;
      msg << sc::opName(c.op().kind) << ": weight_offset " << sc::kWeightOffsetRule << ", got " << v;
      return c.attrError(sc::kWeightOffsetAttr.data(), msg.str());
    }
  }
  return Status::ok();
}
StatusOr<OpParams> bindNorm(const BindContext& b) {
  NormParams p{b.op.intAttr("M"), b.op.intAttr("H"), b.op.floatAttr("eps"), b.op.boolAttr("accumulate")};
  p.weightOffset = b.op.floatAttr(std::string(sc::kWeightOffsetAttr), 0.0);  // absent: the weight itself
  return OpParams(p);
}

}  // namespace

void registerNormOps(OpDefTable& t) {
  for (K k : {K::kLayerNormFwd, K::kLayerNormBwdInput, K::kLayerNormBwdWeight, K::kRmsNormFwd, K::kRmsNormBwdInput,
              K::kRmsNormBwdWeight, K::kAddLayerNormFwd, K::kAddRmsNormFwd, K::kLayerNormBwd, K::kRmsNormBwd})
    t.add(k, {"norm", checkNorm, bindNorm});
}

}  // namespace llcdist::rt::ops
