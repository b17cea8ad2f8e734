// Family "elementwise": ops over n elements in every role: gelu_tanh_fwd / gelu_tanh_bwd,
// swiglu_fwd / swiglu_bwd, add, accumulate, copy, cast. A new elementwise op registers here
// (docs/adding-an-op.md).
#include "OpDefs.h"

namespace llcdist::rt::ops {
namespace {

using K = schema::OpKind;

Status checkElementwise(const OpChecker& c) { return c.everyRole(c.I("n"), "n"); }
StatusOr<OpParams> bindElementwise(const BindContext& b) { return OpParams(ElementwiseParams{b.op.intAttr("n")}); }

}  // namespace

void registerElementwiseOps(OpDefTable& t) {
  for (K k : {K::kGeluTanhFwd, K::kGeluTanhBwd, K::kSwigluFwd, K::kSwigluBwd, K::kAdd, K::kAccumulate, K::kCopy,
              K::kCast})
    t.add(k, {"elementwise", checkElementwise, bindElementwise});
}

}  // namespace llcdist::rt::ops
