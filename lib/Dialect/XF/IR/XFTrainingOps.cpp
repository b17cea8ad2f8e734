//===- XFTrainingOps.cpp - verifiers of backward and optimizer ops --------===//
#include "XFVerify.h"

using namespace mlir;
using namespace llcdist::xf;
using namespace llcdist::xf::detail;

namespace {
/// [N, K] for out_in or [K, N] for in_out.
SmallVector<int64_t> weightShape(WeightLayout layout, int64_t k, int64_t n) {
  return layout == WeightLayout::OutIn ? SmallVector<int64_t>{n, k}
                                       : SmallVector<int64_t>{k, n};
}

/// The groups of expert parallelism, parts of dp (MeshSpec.h).
bool isExpertAxis(StringRef axis) { return axis == "ep" || axis == "edp"; }

/// One mesh axis (or an expert-parallel group).
LogicalResult checkAxis(Operation *op, StringRef axis) {
  if (axis != "dp" && axis != "tp" && axis != "pp" && axis != "cp" && !isExpertAxis(axis))
    return op->emitOpError("axis must be dp, tp, pp, cp, ep or edp, got '") << axis << "'";
  return success();
}

/// One mesh axis or several joined by '+' (a reduction over their product
/// group, "dp+cp"), each at most once; ep or edp alone or with axes other
/// than dp ("edp+cp"), as they are parts of dp.
LogicalResult checkAxisSet(Operation *op, StringRef axes) {
  SmallVector<StringRef> names;
  axes.split(names, '+');
  int expert = 0;
  for (auto [i, name] : llvm::enumerate(names)) {
    if (name != "dp" && name != "tp" && name != "pp" && name != "cp" && !isExpertAxis(name))
      return op->emitOpError("axis must be dp, tp, pp, cp, ep or edp, or several joined by '+' (\"dp+cp\"), got '")
             << axes << "'";
    if (llvm::is_contained(ArrayRef(names).take_front(i), name))
      return op->emitOpError("axis '") << axes << "' names " << name << " twice";
    expert += isExpertAxis(name);
  }
  if (expert > 1 || (expert == 1 && llvm::is_contained(names, "dp")))
    return op->emitOpError("axis '") << axes << "' names dp twice: ep and edp are parts of dp";
  return success();
}

LogicalResult checkNonNegative(Operation *op, StringRef what, double v) {
  if (!(v >= 0.0))
    return op->emitOpError() << what << " must be >= 0, got " << v;
  return success();
}
} // namespace

LogicalResult LinearGradInputOp::verify() {
  auto dy = rt(getDy()), w = rt(getWeight()), dx = rt(getResult());
  if (w.getRank() != 2 || dy.getRank() < 1 || dx.getRank() != dy.getRank())
    return emitOpError("expects dy [..., N], a rank-2 weight and dx [..., K]");
  int64_t n = dy.getShape().back(), k = dx.getShape().back();
  if (w.getShape() != ArrayRef<int64_t>(weightShape(getLayout(), k, n)))
    return emitOpError("weight ")
           << w << " does not map dy's " << n << " features to dx's " << k
           << " in layout " << stringifyWeightLayout(getLayout());
  if (dy.getShape().drop_back() != dx.getShape().drop_back())
    return emitOpError("dy and dx differ in their leading dimensions");
  return sameElementType(*this, {getDy(), getWeight(), getResult()});
}

LogicalResult LinearGradWeightOp::verify() {
  auto dy = rt(getDy()), x = rt(getInput()), dw = rt(getResult());
  if (dy.getRank() < 1 || dy.getShape().drop_back() != x.getShape().drop_back())
    return emitOpError("dy and input must agree in their leading dimensions");
  auto want = weightShape(getLayout(), x.getShape().back(), dy.getShape().back());
  if (dw.getShape() != ArrayRef<int64_t>(want))
    return emitOpError("result must have the weight's shape [")
           << llvm::make_range(want.begin(), want.end()) << "], got " << dw;
  return sameElementType(*this, {getDy(), getInput(), getResult()});
}

LogicalResult LinearGradBiasOp::verify() {
  auto dy = rt(getDy());
  return checkShape(*this, getResult(), "result", {dy.getShape().back()});
}

LogicalResult EmbeddingGradOp::verify() {
  if (failed(checkFloatAttr(*this, FloatAttrRule::EmbeddingScale, getScale())))
    return failure();
  auto ids = rt(getIds()), dy = rt(getDy()), res = rt(getResult());
  if (dy.getShape().drop_back() != ids.getShape())
    return emitOpError("dy must be ids' shape + [hidden], got ") << dy;
  if (res.getRank() != 2 || res.getDimSize(1) != dy.getShape().back())
    return emitOpError("result must be [vocab, ")
           << dy.getShape().back() << "], got " << res;
  if (failed(checkPaddingIdx(*this, getPaddingIdx(), res.getDimSize(0))))
    return failure();
  return sameElementType(*this, {getDy(), getResult()});
}

LogicalResult RopeGradOp::verify() {
  // The forward's theta, which the runtime's rope_bwd checks like rope_fwd's.
  if (failed(checkRotaryDim(*this, getRotaryDim(), getHeadDim())))
    return failure();
  return checkRopeTheta(*this, getTheta().convertToDouble());
}

LogicalResult SwiGLUGradOp::verify() { return checkGatedActivation(*this, getActivation()); }

LogicalResult AddPositionEmbeddingGradOp::verify() {
  auto dy = rt(getDy()), res = rt(getResult());
  const int64_t offset = int64_t(getOffset().value_or(0));
  if (getOffset() && offset < 1) // the plan's rule: absent is 0
    return emitOpError("offset must be >= 1 (absent: 0), got ") << offset;
  if (dy.getRank() != 3 || res.getRank() != 2 || res.getDimSize(1) != dy.getDimSize(2) ||
      res.getDimSize(0) - offset < dy.getDimSize(1))
    return emitOpError("expects dy [B, S, H] and a result [P, H] with P >= S + offset; got ") << dy << " and " << res;
  return sameElementType(*this, {getDy(), getResult()});
}

LogicalResult ClampGradOp::verify() { return checkFloatAttr(*this, FloatAttrRule::ClampLimit, getLimit()); }

LogicalResult ConcatOp::verify() {
  if (getInputs().empty())
    return emitOpError("needs at least one input");
  auto res = rt(getResult());
  int64_t sum = 0;
  for (Value v : getInputs()) {
    auto t = rt(v);
    if (t.getRank() != res.getRank() ||
        t.getShape().drop_back() != res.getShape().drop_back())
      return emitOpError("input ") << t << " differs from the result " << res
                                   << " outside the last dimension";
    if (getGroups() && t.getShape().back() % int64_t(*getGroups()) != 0)
      return emitOpError("the last dimension of input ") << t << " is not a multiple of groups = " << *getGroups();
    sum += t.getShape().back();
  }
  if (sum != res.getShape().back())
    return emitOpError("inputs' last dimensions sum to ")
           << sum << ", the result's is " << res.getShape().back();
  SmallVector<Value> all(getInputs());
  all.push_back(getResult());
  return sameElementType(*this, all);
}

LogicalResult AccumulateGradOp::verify() {
  return checkParamName(*this, getName());
}

LogicalResult ClipGradNormOp::verify() {
  return checkNonNegative(*this, "max_norm", getMaxNorm().convertToDouble());
}

LogicalResult AdamWOp::verify() {
  double b1 = getBeta1().convertToDouble(), b2 = getBeta2().convertToDouble();
  if (!(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1))
    return emitOpError("beta1 and beta2 must be in [0, 1), got ")
           << b1 << " and " << b2;
  if (!(getEps().convertToDouble() > 0))
    return emitOpError("eps must be > 0");
  return checkNonNegative(*this, "weight_decay",
                          getWeightDecay().convertToDouble());
}

LogicalResult SGDOp::verify() {
  if (failed(checkNonNegative(*this, "momentum", getMomentum().convertToDouble())))
    return failure();
  return checkNonNegative(*this, "weight_decay",
                          getWeightDecay().convertToDouble());
}

LogicalResult AllReduceGradsOp::verify() {
  if (getReduction() != "sum" && getReduction() != "avg")
    return emitOpError("reduction must be sum or avg, got '") << getReduction() << "'";
  if (auto g = getGroupSize(); g && *g < 2)
    return emitOpError("group_size must be >= 2 (absent: the whole axis), got ") << *g;
  return checkAxisSet(*this, getAxis());
}

LogicalResult AllReduceLossOp::verify() { return checkAxisSet(*this, getAxis()); }

LogicalResult AllReduceOp::verify() { return checkAxis(*this, getAxis()); }

namespace {
/// `small` and `big` agree everywhere but `dim`, where big is a multiple.
LogicalResult checkGathered(Operation *op, Value small, Value big, int64_t dim) {
  auto s = rt(small), b = rt(big);
  if (s.getRank() != b.getRank() || dim < 0 || dim >= s.getRank())
    return op->emitOpError("dim ") << dim << " is not a dimension of " << s;
  for (int64_t d = 0; d < s.getRank(); ++d)
    if (d == dim ? b.getDimSize(d) % s.getDimSize(d) != 0
                 : b.getDimSize(d) != s.getDimSize(d))
      return op->emitOpError("the whole ")
             << b << " is not the slice " << s << " gathered along dim " << dim;
  return sameElementType(op, {small, big});
}
} // namespace

LogicalResult AllGatherOp::verify() {
  if (failed(checkAxis(*this, getAxis())))
    return failure();
  return checkGathered(*this, getInput(), getResult(), getDimAttr().getInt());
}

LogicalResult ReduceScatterOp::verify() {
  if (failed(checkAxis(*this, getAxis())))
    return failure();
  return checkGathered(*this, getResult(), getInput(), getDimAttr().getInt());
}

/// Rows [N, H]: two dimensions, H the same on both sides.
LogicalResult sameRowWidth(Operation *op, RankedTensorType in, RankedTensorType out) {
  if (in.getRank() != 2 || out.getRank() != 2 || in.getDimSize(1) != out.getDimSize(1))
    return op->emitOpError("expects rows [N, H] in and out with the same H, got ") << in << " and " << out;
  return success();
}

LogicalResult MoeDispatchOp::verify() {
  if (getAxis() != "ep")
    return emitOpError("axis must be ep, got '") << getAxis() << "'";
  auto sizes = rt(getGroupSizes()), splits = rt(getRecvSplits()), local = rt(getLocalSizes());
  if (sizes.getRank() != 1 || splits.getShape() != sizes.getShape() || local.getRank() != 1 ||
      local.getDimSize(0) < 1 || sizes.getDimSize(0) % local.getDimSize(0) != 0)
    return emitOpError("expects group_sizes and recv_splits [E] and local_sizes [E/n], got ")
           << sizes << ", " << splits << " and " << local;
  if (failed(sameRowWidth(*this, rt(getInput()), rt(getResult()))))
    return failure();
  return sameElementType(*this, {getInput(), getResult()});
}

LogicalResult MoeCombineOp::verify() {
  if (getAxis() != "ep")
    return emitOpError("axis must be ep, got '") << getAxis() << "'";
  auto splits = rt(getRecvSplits());
  if (splits.getRank() != 1 || getLocalExperts() < 1 || splits.getDimSize(0) % getLocalExperts() != 0)
    return emitOpError("expects recv_splits [E] with E a multiple of local_experts ")
           << getLocalExperts() << ", got " << splits;
  if (failed(sameRowWidth(*this, rt(getInput()), rt(getResult()))))
    return failure();
  return sameElementType(*this, {getInput(), getResult()});
}

LogicalResult AllToAllOp::verify() {
  if (failed(checkAxis(*this, getAxis())))
    return failure();
  auto in = rt(getInput()), out = rt(getResult());
  int64_t split = getSplitDim(), concat = getConcatDim();
  if (in.getRank() != out.getRank() || split < 0 || split >= in.getRank() || concat < 0 || concat >= in.getRank() ||
      split == concat)
    return emitOpError("split_dim ") << split << " and concat_dim " << concat << " must be two different dimensions of "
                                     << in << " and " << out;
  // n = out[concat] / in[concat] = in[split] / out[split], every other dim equal.
  int64_t inC = in.getDimSize(concat), outS = out.getDimSize(split);
  bool ok = inC > 0 && outS > 0 && out.getDimSize(concat) % inC == 0 && in.getDimSize(split) % outS == 0 &&
            out.getDimSize(concat) / inC == in.getDimSize(split) / outS;
  for (int64_t d = 0; ok && d < in.getRank(); ++d)
    ok = d == split || d == concat || in.getDimSize(d) == out.getDimSize(d);
  if (!ok)
    return emitOpError("the result ") << out << " is not " << in << " split along dim " << split
                                      << " and gathered along dim " << concat << " over the same members";
  return sameElementType(*this, {getInput(), getResult()});
}
