//===- XFVerify.h - helpers shared by the xf verifiers ----------*- C++ -*-===//
#ifndef LLCDIST_LIB_DIALECT_XF_IR_XFVERIFY_H
#define LLCDIST_LIB_DIALECT_XF_IR_XFVERIFY_H

#include "llcdist/Dialect/XF/IR/XFOps.h"

namespace llcdist::xf::detail {
using namespace mlir;

inline RankedTensorType rt(Value v) { return cast<RankedTensorType>(v.getType()); }

/// Checks that every value has the element type of the first one.
inline LogicalResult sameElementType(Operation *op, ValueRange values) {
  Type first = rt(values.front()).getElementType();
  for (Value v : values.drop_front())
    if (rt(v).getElementType() != first)
      return op->emitOpError("expects one element type for all float operands "
                             "and results, got ")
             << first << " and " << rt(v).getElementType();
  return success();
}

/// Checks `v` is a 1-D tensor of `n` elements (a norm weight or a bias).
inline LogicalResult checkVector(Operation *op, Value v, StringRef what, int64_t n) {
  auto t = rt(v);
  if (t.getRank() != 1 || t.getDimSize(0) != n)
    return op->emitOpError() << what << " must be tensor<" << n << "x...>"
                             << " (the input's last dimension), got " << t;
  return success();
}

inline LogicalResult checkNorm(Operation *op, Value input, ValueRange vecs,
                        ArrayRef<StringRef> names, double eps, Value result) {
  auto in = rt(input);
  if (in.getRank() < 1)
    return op->emitOpError("input must have rank >= 1");
  int64_t h = in.getShape().back();
  for (auto [v, name] : llvm::zip(vecs, names))
    if (failed(checkVector(op, v, name, h)))
      return failure();
  if (!(eps > 0.0))
    return op->emitOpError() << "eps must be > 0, got " << eps;
  SmallVector<Value> all{input, result};
  all.append(vecs.begin(), vecs.end());
  return sameElementType(op, all);
}

/// xf.rope's and xf.rope_grad's theta against the runtime's rule
/// (rt::schema::kRopeThetaRule; defined in XFOps.cpp, the one file here that
/// includes the runtime's schema).
LogicalResult checkRopeTheta(Operation *op, double theta);
/// xf.rope's and xf.rope_grad's optional rotary_dim: even, in [2, head_dim].
LogicalResult checkRotaryDim(Operation *op, std::optional<uint64_t> rotaryDim, int64_t headDim);
/// xf.swiglu's and xf.swiglu_grad's optional activation: "silu" or "gelu_tanh".
LogicalResult checkGatedActivation(Operation *op, std::optional<StringRef> activation);
/// xf.rms_norm's weight_offset, xf.embedding's (and its gradient's) scale
/// xf.clamp's (and its gradient's) limit and xf.scale's factor against the runtime's rules (rt::schema,
/// FloatAttrRules.h): the kernels use them as fp32 numbers.
enum class FloatAttrRule { WeightOffset, EmbeddingScale, ClampLimit, ScaleFactor };
LogicalResult checkFloatAttr(Operation *op, FloatAttrRule rule, std::optional<APFloat> v);

/// xf.embedding's and xf.embedding_grad's optional padding_idx (>= 0 by its
/// type) below the table's `rows`; a vocabulary-parallel op's table (attr
/// xf.vocab_parallel_axis) is its rank's slice, so only the whole table's
/// bound, checked before the split, applies.
inline LogicalResult checkPaddingIdx(Operation *op, std::optional<uint64_t> paddingIdx, int64_t rows) {
  if (!paddingIdx || op->hasAttr("xf.vocab_parallel_axis") || int64_t(*paddingIdx) < rows)
    return success();
  return op->emitOpError("padding_idx ") << *paddingIdx << " is outside the table's " << rows << " rows";
}

/// Rows of a [..., H] tensor: the product of its leading dimensions.
inline int64_t numRows(Value v) {
  auto t = rt(v);
  int64_t rows = 1;
  for (int64_t d : t.getShape().drop_back())
    rows *= d;
  return rows;
}

/// When `v` is present, checks that it has shape `dims`.
inline LogicalResult checkShape(Operation *op, Value v, StringRef what,
                                ArrayRef<int64_t> dims) {
  if (!v)
    return success();
  if (rt(v).getShape() != dims)
    return op->emitOpError() << what << " must have shape ["
                             << llvm::make_range(dims.begin(), dims.end())
                             << "], got " << rt(v);
  return success();
}

/// Parameter names: `{i}` inside a layer body, never outside one.
inline LogicalResult checkParamName(Operation *op, StringRef name) {
  if (name.empty())
    return op->emitOpError("parameter name must not be empty");
  auto func = op->getParentOfType<func::FuncOp>();
  bool inLayer = func && func->hasAttr(kLayerBodyAttr);
  bool hasPlaceholder = name.contains(kLayerPlaceholder);
  if (inLayer && !hasPlaceholder)
    return op->emitOpError("parameter '")
           << name << "' is inside layer body @" << func.getSymName()
           << " but its name has no '{i}' layer-index placeholder";
  if (!inLayer && hasPlaceholder)
    return op->emitOpError("parameter '")
           << name << "' uses the '{i}' placeholder outside a function "
           << "marked '" << kLayerBodyAttr << "'";
  return success();
}

} // namespace llcdist::xf::detail

#endif
