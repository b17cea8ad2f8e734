// Family "elementwise": ops over n elements in every role: gelu_tanh_fwd / gelu_tanh_bwd, gelu_erf_fwd /
// gelu_erf_bwd, clamp_fwd / clamp_bwd, relu_fwd / relu_bwd, scale, swiglu_fwd / swiglu_bwd, add, accumulate, copy,
// cast; and cast_multi, a cast of each pair of a list. A new elementwise op registers here (docs/adding-an-op.md).
// swiglu_*'s optional `act` (the gate's activation: "silu", the default, or "gelu_tanh", Gemma's GeGLU) binds as
// ElementwiseParams::act.
#include "OpDefs.h"

#include "llcdist/runtime/FloatAttrRules.h"

#include <optional>
#include <vector>

namespace llcdist::rt::ops {
namespace {

using K = schema::OpKind;

namespace sc = schema;

// attrs.act (only swiglu_*'s schema has it): one of kGluActNames; nullopt for another string.
std::optional<GluActivation> gluActivation(const Op& op) {
  const std::string name(sc::kGluActAttr);
  if (!op.attrs.count(name)) return GluActivation::kSilu;
  const std::string act = op.stringAttr(name);
  for (size_t i = 0; i < sc::kGluActNames.size(); ++i)
    if (sc::kGluActNames[i] == act) return GluActivation(i);
  return std::nullopt;
}

Status checkElementwise(const OpChecker& c) {
  if (!gluActivation(c.op())) {
    std::string valid;
    for (std::string_view n : sc::kGluActNames)
      valid += std::string(valid.empty() ? "" : " or ") + "\"" + std::string(n) + "\"";
    return c.attrError(sc::kGluActAttr.data(), std::string(sc::opName(c.op().kind)) + ": unknown activation \"" +
                                                   c.op().stringAttr(std::string(sc::kGluActAttr)) + "\" (expected " +
                                                   valid + ")");
  }
  return c.everyRole(c.I("n"), "n");
}
StatusOr<OpParams> bindElementwise(const BindContext& b) {
  ElementwiseParams p{b.op.intAttr("n")};
  const std::optional<GluActivation> act = gluActivation(b.op);
  if (!act) return Status::internal(std::string(sc::opName(b.op.kind)) + ": unknown activation (the loader checks it)");
  p.act = *act;
  return OpParams(p);
}

// The ops of one float attr the kernels use as fp32 (clamp_*'s limit, scale's factor): n elements in every
// role, the attr under its FloatAttrRules.h rule (the compiler's), bound into its ElementwiseParams field.
struct FloatAttr {
  const char* name;
  bool (*valid)(double);
  std::string_view rule;
  float ElementwiseParams::*field;
};
constexpr FloatAttr kClampLimit{"limit", sc::clampLimitValid, sc::kClampLimitRule, &ElementwiseParams::limit};
constexpr FloatAttr kScaleFactor{"factor", sc::multiplierValid, sc::kMultiplierRule, &ElementwiseParams::factor};

template <const FloatAttr& A>
Status checkFloatAttr(const OpChecker& c) {
  const double v = c.op().floatAttr(A.name);
  if (!A.valid(v)) return c.attrError(A.name, std::string(A.rule) + ", got " + std::to_string(v));
  return c.everyRole(c.I("n"), "n");
}
template <const FloatAttr& A>
StatusOr<OpParams> bindFloatAttr(const BindContext& b) {
  ElementwiseParams p{b.op.intAttr("n")};
  p.*A.field = float(b.op.floatAttr(A.name));
  return OpParams(p);
}

// cast_multi: x and y list one buffer per tensor, y[k] of x[k]'s size.
Status checkCastMulti(const OpChecker& c) {
  const std::vector<int64_t>& x = c.op().argList("x");
  const std::vector<int64_t>& y = c.op().argList("y");
  if (x.size() != y.size())
    return c.argError("y", "lists " + std::to_string(y.size()) + " buffers, args.x " + std::to_string(x.size()));
  for (size_t k = 0; k < y.size(); ++k)
    if (c.numel(y[k]) != c.numel(x[k]))
      return c.argError("y", k, "buffer " + std::to_string(y[k]) + " has " + std::to_string(c.numel(y[k])) +
                                    " elements, expected numel(x[" + std::to_string(k) + "]) = " +
                                    std::to_string(c.numel(x[k])));
  return Status::ok();
}
// The kernels read each tensor's size from the call (KernelCall::argElems): no parameter.
StatusOr<OpParams> bindCastMulti(const BindContext&) { return OpParams(ElementwiseParams{0}); }

}  // namespace

void registerElementwiseOps(OpDefTable& t) {
  for (K k : {K::kGeluTanhFwd, K::kGeluTanhBwd, K::kSwigluFwd, K::kSwigluBwd, K::kAdd, K::kAccumulate, K::kCopy,
              K::kCast, K::kGeluErfFwd, K::kGeluErfBwd, K::kReluFwd, K::kReluBwd})
    t.add(k, {"elementwise", checkElementwise, bindElementwise});
  t.add(K::kCastMulti, {"elementwise", checkCastMulti, bindCastMulti});
  for (K k : {K::kClampFwd, K::kClampBwd})
    t.add(k, {"elementwise", checkFloatAttr<kClampLimit>, bindFloatAttr<kClampLimit>});
  t.add(K::kScale, {"elementwise", checkFloatAttr<kScaleFactor>, bindFloatAttr<kScaleFactor>});
}

}  // namespace llcdist::rt::ops
