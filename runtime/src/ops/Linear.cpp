// Family "linear": linear_fwd / _bwd_input / _bwd_weight / _bwd_bias (y[M,N] = x[M,K]·W + b, W in
// either layout) and bias_add (a row-parallel linear's bias, after its all-reduce).
#include "OpDefs.h"

namespace llcdist::rt::ops {
namespace {

using K = schema::OpKind;
constexpr auto prod = OpChecker::prod;

Status checkLinear(const OpChecker& c) {
  const int64_t M = c.I("M"), K_ = c.I("K"), N = c.I("N");
  const std::string layout = c.op().stringAttr("layout");
  if (layout != "out_in" && layout != "in_out")
    return c.attrError("layout", "expected \"out_in\" (W is [N,K]) or \"in_out\" (W is [K,N]), got \"" + layout + "\"");
  LLCDIST_RETURN_IF_ERROR(c.count("x", prod({M, K_}), "M×K"));
  LLCDIST_RETURN_IF_ERROR(c.count("dx", prod({M, K_}), "M×K"));
  LLCDIST_RETURN_IF_ERROR(c.count("w", prod({K_, N}), "K×N"));
  LLCDIST_RETURN_IF_ERROR(c.count("dw", prod({K_, N}), "K×N"));
  LLCDIST_RETURN_IF_ERROR(c.count("bias", N, "N"));
  LLCDIST_RETURN_IF_ERROR(c.count("db", N, "N"));
  LLCDIST_RETURN_IF_ERROR(c.count("y", prod({M, N}), "M×N"));
  LLCDIST_RETURN_IF_ERROR(c.count("gelu", prod({M, N}), "M×N"));
  LLCDIST_RETURN_IF_ERROR(c.count("gelu_x", prod({M, K_}), "M×K"));
  if (c.op().arg("gelu_x") >= 0 && c.op().boolAttr("accumulate"))
    return c.argError("gelu_x", "the GELU gradient epilogue writes dx, it cannot accumulate: accumulate must be false");
  return c.count("dy", prod({M, N}), "M×N");
}
Status checkLinearBwdBias(const OpChecker& c) {
  LLCDIST_RETURN_IF_ERROR(c.count("dy", prod({c.I("M"), c.I("N")}), "M×N"));
  return c.count("db", c.I("N"), "N");
}
Status checkBiasAdd(const OpChecker& c) {
  LLCDIST_RETURN_IF_ERROR(c.count("y", prod({c.I("M"), c.I("N")}), "M×N"));
  return c.count("bias", c.I("N"), "N");
}
StatusOr<OpParams> bindLinear(const BindContext& b) {
  LinearParams p;
  p.M = b.op.intAttr("M");
  p.K = b.op.intAttr("K");
  p.N = b.op.intAttr("N");
  p.layout = b.op.stringAttr("layout") == "in_out" ? WeightLayout::kInOut : WeightLayout::kOutIn;
  p.accumulate = b.op.boolAttr("accumulate");
  return OpParams(p);
}

}  // namespace

void registerLinearOps(OpDefTable& t) {
  for (K k : {K::kLinearFwd, K::kLinearBwdInput, K::kLinearBwdWeight}) t.add(k, {"linear", checkLinear, bindLinear});
  t.add(K::kLinearBwdBias, {"linear", checkLinearBwdBias, bindLinear});
  t.add(K::kBiasAdd, {"linear", checkBiasAdd, bindLinear});
}

}  // namespace llcdist::rt::ops
