//===- Manifest.cpp - plan.param entries and the plan.manifest -----------===//
//
// What the runtime needs beside the kernels: per parameter its buffers,
// state, initialization (Hugging Face's, llcdist/Frontend/InitPolicy.h),
// weight decay and how it is split (tp sharding, pipeline replica; the ZeRO
// block is llcdist-plan-zero's); for the step the model, batch, mesh, optimizer and LR schedule.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include "llcdist/Dialect/XF/Analysis/ModelStats.h"
#include "llcdist/Frontend/InitPolicy.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"

using namespace mlir;
using namespace llcdist;
using namespace llcdist::xf;
using namespace llcdist::xftoplan;

namespace {
DictionaryAttr initAttr(Builder &b, const StepInfo &step, const std::string &name,
                        const ParamInfo &p) {
  InitSpec init = initPolicy(step.arch, name, step.numLayers,
                             ParamRole{p.isNormWeight, p.isNormOrBias});
  switch (init.kind) {
  case InitSpec::Kind::Ones:
    return b.getDictionaryAttr({b.getNamedAttr("kind", b.getStringAttr("ones"))});
  case InitSpec::Kind::Zeros:
    return b.getDictionaryAttr({b.getNamedAttr("kind", b.getStringAttr("zeros"))});
  case InitSpec::Kind::Normal:
    break;
  }
  SmallVector<NamedAttribute> attrs{b.getNamedAttr("kind", b.getStringAttr("normal")),
                                    b.getNamedAttr("std", b.getF64FloatAttr(init.std))};
  if (auto row = step.paddingRows.find(name); row != step.paddingRows.end()) // nn.Embedding(padding_idx)
    attrs.push_back(b.getNamedAttr("zero_row", b.getI64IntegerAttr(row->second)));
  return b.getDictionaryAttr(attrs);
}
} // namespace

void xftoplan::emitParam(ProgramBuilder &pb, const StepInfo &step, const std::string &name,
                         const ParamInfo &p, ArrayRef<Attribute> state, bool decays,
                         std::optional<int64_t> replicaOf, Location loc) {
  OpBuilder &b = pb.b;
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPoint(pb.firstSubroutine);
  auto pop = plan::ParamOp::create(b, loc, b.getStringAttr(name), p.value, p.grad,
                                   b.getArrayAttr(state), initAttr(b, step, name, p),
                                   b.getBoolAttr(decays));
  if (p.sharding)
    pop->setAttr("sharding", p.sharding);
  if (step.vocabPadded.count(name)) // dim 0 padded past the real vocabulary
    pop->setAttr("vocab_padded", b.getUnitAttr());
  if (replicaOf) // reports: updated (and counted) on its home stage
    pop->setAttr("pipeline.replica_of", b.getI64IntegerAttr(*replicaOf));
}

DictionaryAttr xftoplan::buildManifest(ModuleOp module, const StepInfo &step,
                                       const OptimizerChoice &optimizer) {
  Builder b(module.getContext());
  auto i64 = [&](StringRef n, int64_t v) { return b.getNamedAttr(n, b.getI64IntegerAttr(v)); };
  auto f64 = [&](StringRef n, double v) { return b.getNamedAttr(n, b.getF64FloatAttr(v)); };
  auto str = [&](StringRef n, StringRef v) { return b.getNamedAttr(n, b.getStringAttr(v)); };
  func::FuncOp entry = step.entry;
  auto model = module->getAttrOfType<DictionaryAttr>(kModelAttr);
  auto get = [&](StringRef k) -> Attribute { return model ? model.get(k) : Attribute(); };
  auto ids = cast<RankedTensorType>(entry.getArgument(0).getType());
  const auto [dp, tp, pp, cp, ep] = xf::meshDegrees(module).value_or(xf::MeshDegrees{});
  ArrayAttr rankOrder = b.getStrArrayAttr({"tp", "dp", "pp"}); // Megatron's
  if (auto grid = module.lookupSymbol<shard::GridOp>("mesh"))
    if (auto order = grid->getAttrOfType<ArrayAttr>("xf.rank_order"))
      rankOrder = order;
  // After llcdist-partition the ids are one dp rank's: the micro-batch.
  int64_t microBatch = module->hasAttr("xf.partition") ? ids.getDimSize(0)
                                                        : ids.getDimSize(0) / dp;
  // The global sequence: after llcdist-partition the ids hold cp's slice.
  int64_t seqLen = module->hasAttr("xf.partition") ? ids.getDimSize(1) * cp : ids.getDimSize(1);
  SmallVector<NamedAttribute> modelAttrs{
      b.getNamedAttr("name", get("name") ? get("name") : b.getStringAttr("model")),
      b.getNamedAttr("architecture", get("architecture") ? get("architecture") : b.getStringAttr("")),
      b.getNamedAttr("vocab_size", get("vocab_size") ? get("vocab_size") : b.getI64IntegerAttr(0)),
      str("dtype", step.mixed ? "bf16" : "f32"),
  };
  // Vocabulary padding (llcdist-pad-vocab): the real vocabulary is the
  // loss's, the padded one the tables' rows.
  if (auto pad = module->getAttrOfType<DictionaryAttr>("xf.vocab_padding")) {
    modelAttrs[2] = b.getNamedAttr("vocab_size", pad.get("vocab_size"));
    modelAttrs.push_back(b.getNamedAttr("padded_vocab_size", pad.get("padded_vocab_size")));
  }
  // A mesh without cp is written as it always was (dp, tp, pp).
  SmallVector<NamedAttribute> meshAttrs{i64("dp", dp), i64("tp", tp), i64("pp", pp),
                                        b.getNamedAttr("rank_order", rankOrder)};
  if (cp > 1)
    meshAttrs.push_back(i64("cp", cp));
  if (ep > 1) // expert parallelism, drawn from dp
    meshAttrs.push_back(i64("ep", ep));
  // Ring attention's load-balanced chunks (llcdist-partition, --cp-impl ring).
  if (auto layout = module->getAttrOfType<StringAttr>("xf.cp_layout"))
    meshAttrs.push_back(b.getNamedAttr("cp_layout", layout));
  SmallVector<NamedAttribute> m{
      b.getNamedAttr("model", b.getDictionaryAttr(modelAttrs)),
      b.getNamedAttr("batch", b.getDictionaryAttr({
                                  i64("seq_len", seqLen),
                                  i64("micro_batch", microBatch),
                                  i64("microbatches", step.microbatches),
                                  i64("dp", dp),
                                  i64("global_batch", microBatch * step.microbatches * dp),
                              })),
      b.getNamedAttr("mesh", b.getDictionaryAttr(meshAttrs)),
      b.getNamedAttr("optimizer", optimizer.attrs),
      f64("grad_clip", optimizer.gradClip),
  };
  if (auto lr = module->getAttrOfType<DictionaryAttr>("xf.lr_schedule"))
    m.push_back(b.getNamedAttr("lr_schedule", lr));
  return b.getDictionaryAttr(m);
}
