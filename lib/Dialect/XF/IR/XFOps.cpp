//===- XFOps.cpp - xf operation verifiers ---------------------------------===//
//
// Every diagnostic names the operand or attribute at fault and the shapes it
// saw, so a malformed graph (hand-written or from a buggy pass) is easy to fix.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Dialect/XF/IR/XFOps.h"
#include "llcdist/runtime/FloatAttrRules.h" // header-only: the runtime's weight_offset and scale rules
#include "llcdist/runtime/PlanSchema.h"     // header-only: the runtime's rope_theta rule

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace llcdist::xf;

#include "llcdist/Dialect/XF/IR/XFEnums.cpp.inc"

#define GET_OP_CLASSES
#include "llcdist/Dialect/XF/IR/XFOps.cpp.inc"

#include "XFVerify.h"

using namespace llcdist::xf::detail;
// The runtime's namespace llcdist::rt (PlanSchema.h) would hide detail::rt
// from the verifiers below.
namespace llcdist::xf {
using detail::rt;
} // namespace llcdist::xf

//===----------------------------------------------------------------------===//
// ParamOp
//===----------------------------------------------------------------------===//

LogicalResult ParamOp::verify() {
  StringRef name = getName();
  if (name.empty())
    return emitOpError("parameter name must not be empty");
  if (!getType().hasStaticShape())
    return emitOpError("parameter must have a static shape, got ") << getType();
  // A mixture of experts' stacked weight: one Hugging Face tensor per
  // expert along the first dimension (experts.{e}.w1.weight).
  if (name.contains("{e}") && getType().getRank() < 2)
    return emitOpError("parameter '") << name << "' stacks one tensor per expert ('{e}') along its first dimension, "
                                      << "so it needs rank >= 2, got " << getType();
  return checkParamName(*this, name);
}

//===----------------------------------------------------------------------===//
// LayerOp
//===----------------------------------------------------------------------===//

LogicalResult LayerOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  // I64Attr's accessor is unsigned: read the signed value.
  if (getIndexAttr().getInt() < 0)
    return emitOpError("layer index must be >= 0, got ")
           << getIndexAttr().getInt();
  auto fn =
      symbolTable.lookupNearestSymbolFrom<func::FuncOp>(*this, getCalleeAttr());
  if (!fn)
    return emitOpError("callee @")
           << getCallee() << " does not name a func.func";
  if (!fn->hasAttr(kLayerBodyAttr))
    return emitOpError("callee @")
           << getCallee() << " is not marked '" << kLayerBodyAttr << "'";
  FunctionType ft = fn.getFunctionType();
  if (TypeRange(getOperands().getTypes()) != TypeRange(ft.getInputs()) ||
      TypeRange(getResults().getTypes()) != TypeRange(ft.getResults()))
    return emitOpError("type mismatch with callee @")
           << getCallee() << ": callee has type " << ft;
  return success();
}

//===----------------------------------------------------------------------===//
// Embeddings and rope
//===----------------------------------------------------------------------===//

LogicalResult llcdist::xf::detail::checkFloatAttr(Operation *op, FloatAttrRule rule, std::optional<APFloat> v) {
  namespace sc = llcdist::rt::schema;
  if (!v)
    return success();
  const double d = v->convertToDouble();
  struct Rule {
    bool (*valid)(double);
    std::string_view what;
    const char *attr;
  };
  const Rule r = rule == FloatAttrRule::EmbeddingScale ? Rule{sc::multiplierValid, sc::kMultiplierRule, "scale"}
                 : rule == FloatAttrRule::ClampLimit   ? Rule{sc::clampLimitValid, sc::kClampLimitRule, "limit"}
                 : rule == FloatAttrRule::ScaleFactor
                     ? Rule{sc::multiplierValid, sc::kMultiplierRule, "factor"}
                     : Rule{sc::weightOffsetValid, sc::kWeightOffsetRule, "weight_offset"};
  if (r.valid(d))
    return success();
  return op->emitOpError() << r.attr << " " << StringRef(r.what.data(), r.what.size()) << ", got " << d;
}

LogicalResult ClampOp::verify() { return checkFloatAttr(*this, FloatAttrRule::ClampLimit, getLimit()); }

LogicalResult ScaleOp::verify() { return checkFloatAttr(*this, FloatAttrRule::ScaleFactor, getFactor()); }

LogicalResult EmbeddingOp::verify() {
  if (failed(checkFloatAttr(*this, FloatAttrRule::EmbeddingScale, getScale())))
    return failure();
  auto ids = rt(getIds()), table = rt(getTable()), res = rt(getResult());
  if (table.getRank() != 2)
    return emitOpError("table must be [vocab, hidden], got ") << table;
  if (failed(checkPaddingIdx(*this, getPaddingIdx(), table.getDimSize(0))))
    return failure();
  SmallVector<int64_t> want(ids.getShape());
  want.push_back(table.getDimSize(1));
  if (res.getShape() != ArrayRef<int64_t>(want))
    return emitOpError("result shape must be ids shape + [hidden] = [")
           << llvm::make_range(want.begin(), want.end()) << "], got " << res;
  return sameElementType(*this, {getTable(), getResult()});
}

LogicalResult AddPositionEmbeddingOp::verify() {
  auto in = rt(getInput()), table = rt(getTable());
  if (in.getRank() != 3)
    return emitOpError("input must be [batch, seq, hidden], got ") << in;
  if (table.getRank() != 2 || table.getDimSize(1) != in.getDimSize(2))
    return emitOpError("table must be [positions, ")
           << in.getDimSize(2) << "], got " << table;
  const int64_t offset = int64_t(getOffset().value_or(0));
  if (getOffset() && offset < 1) // the plan's rule: absent is 0
    return emitOpError("offset must be >= 1 (absent: 0), got ") << offset;
  if (in.getDimSize(1) > table.getDimSize(0) - offset)
    return emitOpError("sequence length ") << in.getDimSize(1) << " exceeds the " << table.getDimSize(0) - offset
                                           << " learned positions" << (offset ? " after the offset" : "");
  if (getResult().getType() != in)
    return emitOpError("result type must equal the input type ") << in;
  return sameElementType(*this, {getInput(), getTable()});
}

LogicalResult llcdist::xf::detail::checkRopeTheta(Operation *op, double theta) {
  namespace sc = llcdist::rt::schema;
  if (sc::ropeThetaInRange(theta))
    return success();
  return op->emitOpError("theta ")
         << StringRef(sc::kRopeThetaRule.data(), sc::kRopeThetaRule.size())
         << ", got " << theta;
}

LogicalResult llcdist::xf::detail::checkRotaryDim(Operation *op, std::optional<uint64_t> rotaryDim, int64_t headDim) {
  if (!rotaryDim)
    return success();
  int64_t r = int64_t(*rotaryDim);
  if (r < 2 || r % 2 != 0 || r > headDim)
    return op->emitOpError("rotary_dim must be even and in [2, head_dim = ") << headDim << "], got " << r;
  return success();
}

LogicalResult llcdist::xf::detail::checkGatedActivation(Operation *op, std::optional<StringRef> activation) {
  if (!activation || *activation == "silu" || *activation == "gelu_tanh")
    return success();
  return op->emitOpError("activation must be \"silu\" (SwiGLU) or \"gelu_tanh\" (GeGLU), got \"")
         << *activation << "\"";
}

LogicalResult SwiGLUOp::verify() { return detail::checkGatedActivation(*this, getActivation()); }

LogicalResult RopeOp::verify() {
  auto in = rt(getInput());
  int64_t hd = getHeadDim();
  if (in.getRank() != 3)
    return emitOpError("input must be [batch, seq, heads*head_dim], got ")
           << in;
  if (hd <= 0 || hd % 2 != 0)
    return emitOpError("head_dim must be positive and even, got ") << hd;
  if (in.getDimSize(2) % hd != 0)
    return emitOpError("last dimension ")
           << in.getDimSize(2) << " is not a multiple of head_dim " << hd;
  if (failed(checkRopeTheta(*this, getTheta().convertToDouble())))
    return failure();
  if (failed(detail::checkRotaryDim(*this, getRotaryDim(), hd)))
    return failure();
  if (auto s = getScalingAttr()) {
    auto type = s.getAs<StringAttr>("rope_type");
    if (!type || type.getValue() != "llama3")
      return emitOpError("scaling.rope_type must be \"llama3\"");
    for (StringRef key : {"factor", "low_freq_factor", "high_freq_factor",
                          "original_max_position_embeddings"}) {
      auto f = s.getAs<FloatAttr>(key);
      if (!f || !(f.getValueAsDouble() > 0.0))
        return emitOpError("scaling.") << key << " must be a positive float";
    }
    namespace sc = llcdist::rt::schema;
    auto v = [&](StringRef key) { return s.getAs<FloatAttr>(key).getValueAsDouble(); };
    if (!sc::ropeScalingValid(v("factor"), v("low_freq_factor"), v("high_freq_factor"),
                              v("original_max_position_embeddings")))
      return emitOpError("scaling ")
             << StringRef(sc::kRopeScalingRule.data(), sc::kRopeScalingRule.size());
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Norms and linear
//===----------------------------------------------------------------------===//

LogicalResult LayerNormOp::verify() {
  // Both (torch's elementwise_affine), the weight alone (LayerNorm(bias=False), MPT's) or neither
  // (OLMo's OlmoLayerNorm).
  if (getBias() && !getWeight())
    return emitOpError("has a bias but no weight: give both (an affine LayerNorm), the weight alone (no bias) "
                       "or neither (none)");
  SmallVector<Value, 2> vecs;
  SmallVector<StringRef, 2> names;
  if (getWeight()) {
    vecs.push_back(getWeight());
    names.push_back("weight");
  }
  if (getBias()) {
    vecs.push_back(getBias());
    names.push_back("bias");
  }
  if (failed(checkNorm(*this, getInput(), vecs, names, getEps().convertToDouble(), getResult())))
    return failure();
  int64_t rows = numRows(getInput());
  return checkShape(*this, getStats(), "stats", {2, rows});
}

LogicalResult RMSNormOp::verify() {
  if (failed(checkFloatAttr(*this, FloatAttrRule::WeightOffset, getWeightOffset())))
    return failure();
  if (failed(checkNorm(*this, getInput(), {getWeight()}, {"weight"},
                       getEps().convertToDouble(), getResult())))
    return failure();
  return checkShape(*this, getStats(), "stats", {numRows(getInput())});
}

LogicalResult LinearOp::verify() {
  auto in = rt(getInput()), w = rt(getWeight()), res = rt(getResult());
  if (in.getRank() < 1)
    return emitOpError("input must have rank >= 1");
  if (w.getRank() != 2)
    return emitOpError("weight must be rank 2, got ") << w;
  bool outIn = getLayout() == WeightLayout::OutIn;
  int64_t k = in.getShape().back();
  int64_t wk = outIn ? w.getDimSize(1) : w.getDimSize(0);
  int64_t n = outIn ? w.getDimSize(0) : w.getDimSize(1);
  if (wk != k)
    return emitOpError("weight ")
           << w << " in layout " << stringifyWeightLayout(getLayout())
           << " has in-features " << wk << " but the input has " << k;
  if (getBias() && failed(checkVector(*this, getBias(), "bias", n)))
    return failure();
  SmallVector<int64_t> want(in.getShape());
  want.back() = n;
  if (res.getShape() != ArrayRef<int64_t>(want))
    return emitOpError("result must have shape [")
           << llvm::make_range(want.begin(), want.end()) << "], got " << res;
  SmallVector<Value> all{getInput(), getWeight(), getResult()};
  if (getBias())
    all.push_back(getBias());
  return sameElementType(*this, all);
}

LogicalResult SplitOp::verify() {
  auto in = rt(getInput());
  if (getNumResults() < 1)
    return emitOpError("needs at least one result");
  if (in.getRank() < 1)
    return emitOpError("input must have rank >= 1");
  int64_t sum = 0;
  for (Value r : getResults()) {
    auto t = rt(r);
    if (t.getRank() != in.getRank() ||
        t.getShape().drop_back() != in.getShape().drop_back())
      return emitOpError("result ")
             << t << " differs from the input " << in
             << " outside the last dimension";
    if (getGroups() && t.getShape().back() % int64_t(*getGroups()) != 0)
      return emitOpError("the last dimension of result ") << t << " is not a multiple of groups = " << *getGroups();
    sum += t.getShape().back();
  }
  if (sum != in.getShape().back())
    return emitOpError("results' last dimensions sum to ")
           << sum << ", the input's is " << in.getShape().back();
  SmallVector<Value> all{getInput()};
  all.append(getResults().begin(), getResults().end());
  return sameElementType(*this, all);
}

//===----------------------------------------------------------------------===//
// Attention and loss
//===----------------------------------------------------------------------===//

LogicalResult AttentionOp::verify() {
  int64_t nh = getNumHeads(), nkv = getNumKvHeads(), hd = getHeadDim();
  if (nh <= 0 || nkv <= 0 || hd <= 0)
    return emitOpError("num_heads, num_kv_heads and head_dim must be > 0");
  if (nh % nkv != 0)
    return emitOpError("num_kv_heads ")
           << nkv << " must divide num_heads " << nh;
  if (auto alibi = getAlibiHeads(); alibi && int64_t(*alibi) % nh != 0)
    return emitOpError("alibi_heads ") << *alibi << " must be a multiple of num_heads " << nh
                                       << " (the model's heads, of which the op holds a slice)";
  auto q = rt(getQ()), k = rt(getK()), v = rt(getV());
  for (auto [t, name] : {std::pair{q, "q"}, {k, "k"}, {v, "v"}}) {
    if (t.getRank() != 3)
      return emitOpError() << name << " must be [batch, seq, heads*head_dim], got "
                           << t;
    if (t.getDimSize(0) != q.getDimSize(0) || t.getDimSize(1) != q.getDimSize(1))
      return emitOpError() << name << " has batch/seq dims different from q: "
                           << t << " vs " << q;
  }
  if (q.getDimSize(2) != nh * hd)
    return emitOpError("q's last dimension must be num_heads*head_dim = ")
           << nh * hd << ", got " << q.getDimSize(2);
  if (k.getDimSize(2) != nkv * hd || v.getDimSize(2) != nkv * hd)
    return emitOpError("k and v's last dimension must be num_kv_heads*head_dim = ")
           << nkv * hd << ", got " << k.getDimSize(2) << " and "
           << v.getDimSize(2);
  if (getResult().getType() != q)
    return emitOpError("result type must equal q's type ") << q;
  if (failed(checkShape(*this, getLse(), "lse",
                        {q.getDimSize(0), nh, q.getDimSize(1)})))
    return failure();
  return sameElementType(*this, {getQ(), getK(), getV()});
}

LogicalResult CrossEntropyOp::verify() {
  auto logits = rt(getLogits()), targets = rt(getTargets());
  if (logits.getRank() != targets.getRank() + 1 ||
      logits.getShape().drop_back() != targets.getShape())
    return emitOpError("logits must be targets' shape + [vocab]; got logits ")
           << logits << " and targets " << targets;
  // Vocabulary padding: the real vocabulary is at most the global columns
  // (the local ones times tp once vocabulary-parallel; not checked then).
  if (auto real = getRealVocab()) {
    if (*real < 1 || (!(*this)->hasAttr("xf.vocab_parallel_axis") &&
                      int64_t(*real) > logits.getShape().back()))
      return emitOpError("real_vocab must be in [1, ")
             << logits.getShape().back() << "] (the logits' columns), got " << *real;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//

namespace {
/// `v`'s shape with its last dimension replaced by `last`.
SmallVector<int64_t> withLast(RankedTensorType t, int64_t last) {
  SmallVector<int64_t> d(t.getShape());
  if (!d.empty())
    d.back() = last;
  return d;
}

/// The rows of a value whose leading dims are `lead`: their product.
int64_t product(ArrayRef<int64_t> lead) {
  int64_t n = 1;
  for (int64_t d : lead)
    n *= d;
  return n;
}
} // namespace

LogicalResult MoeRouteOp::verify() {
  auto logits = rt(getLogits());
  int64_t k = getTopK(), experts = logits.getRank() ? logits.getShape().back() : 0;
  if (logits.getRank() < 2)
    return emitOpError("logits must be [..., experts], got ") << logits;
  if (k > experts)
    return emitOpError("top_k=") << k << " is more than the " << experts << " experts (the logits' last dimension)";
  SmallVector<int64_t> want = withLast(logits, k);
  if (rt(getWeights()).getShape() != ArrayRef(want) || rt(getExperts()).getShape() != ArrayRef(want))
    return emitOpError("weights and experts must be the logits' shape with top_k=")
           << k << " last, got " << rt(getWeights()) << " and " << rt(getExperts());
  return sameElementType(*this, {getLogits(), getWeights()});
}

namespace {
/// The load-balancing statistics: [E] each, E `experts` when known (> 0).
LogicalResult verifyExpertVector(Operation *op, StringRef name, Value v, int64_t experts) {
  auto t = rt(v);
  if (t.getRank() != 1 || (experts > 0 && t.getDimSize(0) != experts))
    return op->emitOpError() << name << " must be [" << (experts > 0 ? std::to_string(experts) : std::string("E"))
                             << "] (one per expert), got " << t;
  return success();
}

/// The load-balancing loss's coefficient: transformers' router_aux_loss_coef.
LogicalResult verifyAuxCoef(Operation *op, double coef) {
  if (!(coef > 0 && coef <= 1e6))
    return op->emitOpError("coef must be in (0, 1e6], got ") << coef;
  return success();
}
} // namespace

LogicalResult MoeRouterStatsOp::verify() {
  auto logits = rt(getLogits()), experts = rt(getExperts());
  if (logits.getRank() < 2 || experts.getRank() != logits.getRank() ||
      logits.getShape().drop_back() != experts.getShape().drop_back())
    return emitOpError("expects logits [..., E] and experts [..., k] over the same tokens; got ")
           << logits << " and " << experts;
  if (failed(verifyExpertVector(*this, "counts", getCounts(), logits.getShape().back())))
    return failure();
  return verifyExpertVector(*this, "probs", getProbs(), logits.getShape().back());
}

LogicalResult MoeRouterStatsGradOp::verify() {
  auto logits = rt(getLogits());
  if (logits.getRank() < 2)
    return emitOpError("logits must be [..., E], got ") << logits;
  return verifyExpertVector(*this, "dprobs", getDprobs(), logits.getShape().back());
}

LogicalResult MoeAuxLossOp::verify() {
  if (failed(verifyExpertVector(*this, "counts", getCounts(), 0)) ||
      failed(verifyExpertVector(*this, "probs", getProbs(), rt(getCounts()).getDimSize(0))))
    return failure();
  return verifyAuxCoef(*this, getCoef().convertToDouble());
}

LogicalResult MoeAuxLossGradOp::verify() {
  if (failed(verifyExpertVector(*this, "counts", getCounts(), 0)) ||
      failed(verifyExpertVector(*this, "result", getResult(), rt(getCounts()).getDimSize(0))))
    return failure();
  if (double s = getScale().convertToDouble(); !(s > 0 && s <= 1))
    return emitOpError("scale must be in (0, 1] (1 / microbatches), got ") << s;
  return verifyAuxCoef(*this, getCoef().convertToDouble());
}

LogicalResult MoePermuteOp::verify() {
  auto in = rt(getInput()), experts = rt(getExperts()), res = rt(getResult());
  if (in.getRank() < 2 || experts.getRank() != in.getRank() ||
      in.getShape().drop_back() != experts.getShape().drop_back())
    return emitOpError("expects input [..., H] and experts [..., k] over the same tokens; got ")
           << in << " and " << experts;
  int64_t rows = product(experts.getShape());
  if (std::optional<uint64_t> cap = getCapacity()) {
    // n blocks of E·capacity rows, one per data-parallel rank.
    int64_t block = int64_t(*cap) * rt(getGroupSizes()).getDimSize(0);
    if (*cap < 1 || res.getRank() != 2 || res.getDimSize(0) % block != 0 || res.getDimSize(1) != in.getShape().back())
      return emitOpError("with capacity ")
             << *cap << " the result must be [n·experts·capacity, H] (n = 1 per rank), got " << res;
  } else if (res.getRank() != 2 || res.getDimSize(0) != rows || res.getDimSize(1) != in.getShape().back()) {
    return emitOpError("result must be [tokens·k = ") << rows << ", H], got " << res;
  }
  if (rt(getSlots()).getShape() != experts.getShape())
    return emitOpError("slots must have the experts' shape ") << experts << ", got " << rt(getSlots());
  if (rt(getGroupSizes()).getRank() != 1)
    return emitOpError("group_sizes must be [experts], got ") << rt(getGroupSizes());
  return sameElementType(*this, {getInput(), getResult()});
}

LogicalResult MoeUnpermuteOp::verify() {
  auto in = rt(getInput()), slots = rt(getSlots()), res = rt(getResult());
  // xf.moe_permute's rows [N, H]: N = tokens·k dropless, experts·capacity
  // per rank with a capacity (the slots say which rows are real).
  if (in.getRank() != 2 || in.getDimSize(0) < 1)
    return emitOpError("input must be rows [N, H], got ") << in;
  if (res.getShape() != ArrayRef(withLast(slots, in.getDimSize(1))))
    return emitOpError("result must be the slots' tokens × H, got ") << res << " for slots " << slots;
  if (getWeights() && rt(getWeights()).getShape() != slots.getShape())
    return emitOpError("weights must have the slots' shape ") << slots << ", got " << rt(getWeights());
  return sameElementType(*this, {getInput(), getResult()});
}

LogicalResult GroupedLinearOp::verify() {
  auto in = rt(getInput()), w = rt(getWeight()), sizes = rt(getGroupSizes()), res = rt(getResult());
  if (in.getRank() != 2 || w.getRank() != 3 || sizes.getRank() != 1 || w.getDimSize(0) != sizes.getDimSize(0) ||
      w.getDimSize(2) != in.getDimSize(1))
    return emitOpError("expects input [N, K], weight [E, O, K] and group_sizes [E]; got ")
           << in << ", " << w << " and " << sizes;
  if (res.getRank() != 2 || res.getDimSize(0) != in.getDimSize(0) || res.getDimSize(1) != w.getDimSize(1))
    return emitOpError("result must be [N, O] = [") << in.getDimSize(0) << ", " << w.getDimSize(1) << "], got " << res;
  return sameElementType(*this, {getInput(), getWeight(), getResult()});
}

LogicalResult SigmoidGateOp::verify() {
  auto gate = rt(getGate()), in = rt(getInput());
  if (in.getRank() < 1 || gate.getShape() != ArrayRef(withLast(in, 1)) || rt(getResult()) != in)
    return emitOpError("expects gate [..., 1] and input [..., H] over the same tokens, and a result of the input's "
                       "type; got ")
           << gate << " and " << in;
  return sameElementType(*this, {getGate(), getInput()});
}
