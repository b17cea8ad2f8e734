// Family "loss": cross_entropy_fwd / cross_entropy_bwd (the mean token loss and its logits
// gradient), vocabulary-parallel with attr `shard_axis` (then with the row statistics that
// cross_entropy_max / cross_entropy_sums and the plan's all-reduces computed), with vocabulary padding
// under attr `real_vocab`; and classifier (the LM head, the cross entropy and their backward in one op,
// over chunks of token rows: llcdist-plan-fuse-classifier).
#include "OpDefs.h"

namespace llcdist::rt::ops {
namespace {

namespace sc = schema;
using K = sc::OpKind;

// attrs.real_vocab, when present (vocabulary padding): only with the feature, equal to
// model.vocab_size, and within the op's global columns (attr `columns`, times the shard_axis size).
Status checkRealVocab(const OpChecker& c, const char* columnsAttr = "V") {
  const Op& op = c.op();
  const Manifest& manifest = c.manifest();
  const std::string attr(sc::kRealVocabAttr);
  if (!op.attrs.count(attr)) return Status::ok();
  if (!manifest.hasFeature(sc::kVocabPaddingFeature))
    return c.attrError(attr.c_str(), "needs the feature \"vocab_padding\" in manifest.json \"features\"");
  const int64_t real = op.intAttr(attr);
  if (real != manifest.vocabSize)
    return c.attrError(attr.c_str(), "expected model.vocab_size = " + std::to_string(manifest.vocabSize) + ", got " +
                                         std::to_string(real));
  int64_t columns = c.I(columnsAttr);
  if (op.attrs.count(std::string(sc::kShardAxisAttr)))
    if (auto a = parseMeshAxis(op.stringAttr(std::string(sc::kShardAxisAttr)))) columns *= manifest.mesh().axisSize(*a);
  if (real > columns)
    return c.attrError(attr.c_str(), "the real vocabulary " + std::to_string(real) + " exceeds the logits' " +
                                         std::to_string(columns) + " global columns");
  return Status::ok();
}

// The row statistics' roles: row_max [M] and row_sums [2M] (f64), present exactly with shard_axis.
Status checkRowStats(const OpChecker& c) {
  const Op& op = c.op();
  const int64_t M = c.I("M");
  const bool sharded = op.attrs.count(std::string(sc::kShardAxisAttr)) != 0;
  for (const char* role : {"row_max", "row_sums"}) {
    if (sc::argIndex(op.kind, role) < 0) continue;
    const bool present = op.arg(role) >= 0;
    if (sharded && !present)
      return c.argError(role, std::string("required with attrs.shard_axis (the vocabulary-parallel row statistics, "
                                          "computed by cross_entropy_max / cross_entropy_sums and all-reduced "
                                          "in the plan; kernels do not communicate)"));
    if (!sharded && present) return c.argError(role, "only allowed with attrs.shard_axis");
  }
  LLCDIST_RETURN_IF_ERROR(c.count("row_max", M, "M"));
  return c.count("row_sums", OpChecker::prod({2, M}), "2×M");
}

Status checkCrossEntropy(const OpChecker& c) {
  const int64_t M = c.I("M"), V = c.I("V");
  LLCDIST_RETURN_IF_ERROR(c.shardAxis());
  LLCDIST_RETURN_IF_ERROR(checkRealVocab(c));
  LLCDIST_RETURN_IF_ERROR(checkRowStats(c));
  LLCDIST_RETURN_IF_ERROR(c.count("logits", OpChecker::prod({M, V}), "M×V"));
  LLCDIST_RETURN_IF_ERROR(c.count("dlogits", OpChecker::prod({M, V}), "M×V"));
  LLCDIST_RETURN_IF_ERROR(c.count("targets", M, "M"));
  return c.count("loss", 1, "1");
}

StatusOr<OpParams> bindCrossEntropy(const BindContext& b) {
  LossParams p;
  p.M = b.op.intAttr("M");
  p.V = b.op.intAttr("V");
  p.scale = b.op.floatAttr("scale");  // 0 on cross_entropy_max / _sums (no scale)
  p.realVocab = b.op.intAttr(std::string(sc::kRealVocabAttr));
  if (b.op.attrs.count(std::string(sc::kShardAxisAttr))) {  // vocabulary-parallel: this rank's slice
    LLCDIST_ASSIGN_OR_RETURN(MeshAxis axis, b.axis(std::string(sc::kShardAxisAttr), "shard_axis"));
    p.vocabShard = VocabShard{b.mesh.coord(b.rank, axis), b.mesh.axisSize(axis)};
  }
  return OpParams(std::move(p));
}

Status checkClassifier(const OpChecker& c) {
  constexpr auto prod = OpChecker::prod;
  const int64_t M = c.I("M"), K = c.I("K"), N = c.I("N"), chunk = c.I("chunk");
  const std::string layout = c.op().stringAttr("layout");
  if (layout != "out_in" && layout != "in_out")
    return c.attrError("layout", "expected \"out_in\" (W is [N,K]) or \"in_out\" (W is [K,N]), got \"" + layout + "\"");
  if (chunk > M)
    return c.attrError("chunk", "the rows per chunk (" + std::to_string(chunk) +
                                    ") exceed the op's M = " + std::to_string(M) + " token rows");
  LLCDIST_RETURN_IF_ERROR(checkRealVocab(c, "N"));
  LLCDIST_RETURN_IF_ERROR(c.count("x", prod({M, K}), "M×K"));
  LLCDIST_RETURN_IF_ERROR(c.count("dx", prod({M, K}), "M×K"));
  LLCDIST_RETURN_IF_ERROR(c.count("w", prod({K, N}), "K×N"));
  LLCDIST_RETURN_IF_ERROR(c.count("dw", prod({K, N}), "K×N"));
  LLCDIST_RETURN_IF_ERROR(c.count("dw_acc", prod({K, N}), "K×N"));
  LLCDIST_RETURN_IF_ERROR(c.count("logits", prod({chunk, N}), "chunk×N"));
  LLCDIST_RETURN_IF_ERROR(c.count("targets", M, "M"));
  if (const int64_t acc = c.op().arg("dw_acc"); acc >= 0 && c.buffer(acc).dtype != schema::ElemType::kF32)
    return c.argError("dw_acc", "the weight gradient's f32 sum over the chunks must be an f32 buffer");
  return c.count("loss", 1, "1");
}

StatusOr<OpParams> bindClassifier(const BindContext& b) {
  ClassifierParams p;
  p.linear.M = b.op.intAttr("M");
  p.linear.K = b.op.intAttr("K");
  p.linear.N = b.op.intAttr("N");
  p.linear.layout = b.op.stringAttr("layout") == "in_out" ? WeightLayout::kInOut : WeightLayout::kOutIn;
  p.linear.accumulate = b.op.boolAttr("accumulate");
  p.chunk = b.op.intAttr("chunk");
  p.scale = b.op.floatAttr("scale");
  p.gradScale = b.op.floatAttr("grad_scale");
  p.realVocab = b.op.intAttr(std::string(sc::kRealVocabAttr));
  return OpParams(p);
}

}  // namespace

void registerLossOps(OpDefTable& t) {
  t.add(K::kCrossEntropyFwd, {"loss", checkCrossEntropy, bindCrossEntropy});
  t.add(K::kCrossEntropyBwd, {"loss", checkCrossEntropy, bindCrossEntropy});
  t.add(K::kCrossEntropyMax, {"loss", checkCrossEntropy, bindCrossEntropy});
  t.add(K::kCrossEntropySums, {"loss", checkCrossEntropy, bindCrossEntropy});
  t.add(K::kClassifier, {"loss", checkClassifier, bindClassifier});
}

}  // namespace llcdist::rt::ops
