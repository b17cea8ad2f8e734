//===- XFDialect.cpp - the xf dialect -------------------------------------===//
#include "llcdist/Dialect/XF/IR/XFDialect.h"
#include "llcdist/Dialect/XF/IR/XFOps.h"

#include "mlir/IR/BuiltinOps.h"

using namespace mlir;
using namespace llcdist::xf;

#include "llcdist/Dialect/XF/IR/XFDialect.cpp.inc"

void XFDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "llcdist/Dialect/XF/IR/XFOps.cpp.inc"
      >();
}

namespace {
/// The global row count of the table an xf.embedding reads: its xf.param's
/// type, or the xf.sharding global_shape once llcdist-partition made the
/// type one shard's. std::nullopt when the table is no xf.param of known
/// shape (nothing to check).
std::optional<int64_t> globalRows(ParamOp param) {
  auto type = dyn_cast<RankedTensorType>(param.getType());
  if (!type || type.getRank() != 2 || type.isDynamicDim(0))
    return std::nullopt;
  if (auto sh = param->getAttrOfType<DictionaryAttr>("xf.sharding"))
    if (auto global = sh.getAs<DenseI64ArrayAttr>("global_shape"))
      return global.size() == 2 ? std::optional<int64_t>(global[0]) : std::nullopt;
  return type.getDimSize(0);
}

/// xf.model's vocab_size (when given: hand-written modules may describe only
/// what a test needs) against the token embedding's rows, which the plan
/// writer would otherwise emit as a manifest the runtime refuses or misreads
/// (ids past the table, an export of the wrong shape). Under vocabulary
/// padding the rows are xf.vocab_padding's padded_vocab_size and its
/// vocab_size is xf.model's.
LogicalResult verifyModelAttr(ModuleOp module, DictionaryAttr model) {
  // The training shape: counts the passes loop over, so a hand-edited huge
  // value is refused here rather than compiled for hours.
  if (Attribute m = model.get("microbatches")) {
    auto n = dyn_cast<IntegerAttr>(m);
    if (!n || n.getInt() < 1 || n.getInt() > kMaxModelMicrobatches)
      return module.emitError() << "'" << kModelAttr << "' microbatches must be an integer in [1, "
                                << kMaxModelMicrobatches << "] (global_batch / (micro_batch · dp)), got " << m;
  }
  for (StringRef key : {"micro_batch", "global_batch", "seq_len"})
    if (Attribute a = model.get(key))
      if (auto n = dyn_cast<IntegerAttr>(a); !n || n.getInt() < 1)
        return module.emitError() << "'" << kModelAttr << "' " << key << " must be a positive integer, got " << a;
  Attribute v = model.get("vocab_size");
  if (!v)
    return success();
  auto vocabAttr = dyn_cast<IntegerAttr>(v);
  if (!vocabAttr || vocabAttr.getInt() < 1)
    return module.emitError() << "'" << kModelAttr
                              << "' vocab_size must be a positive integer, got " << v;
  const int64_t vocab = vocabAttr.getInt();
  int64_t rows = vocab;
  std::string rowsFrom = std::string(kModelAttr) + " vocab_size";
  if (auto pad = module->getAttrOfType<DictionaryAttr>("xf.vocab_padding")) {
    auto real = pad.getAs<IntegerAttr>("vocab_size");
    if (real && real.getInt() != vocab)
      return module.emitError()
             << "'xf.vocab_padding' vocab_size = " << real.getInt() << " disagrees with '"
             << kModelAttr << "' vocab_size = " << vocab
             << " (both are the real vocabulary; make them equal, or recompile from the "
                "model's config.json)";
    if (auto padded = pad.getAs<IntegerAttr>("padded_vocab_size")) {
      rows = padded.getInt();
      rowsFrom = "xf.vocab_padding padded_vocab_size";
    }
  }
  WalkResult walk = module.walk([&](EmbeddingOp emb) {
    auto param = emb.getTable().getDefiningOp<ParamOp>();
    if (!param)
      return WalkResult::advance();
    std::optional<int64_t> have = globalRows(param);
    if (!have || *have == rows)
      return WalkResult::advance();
    emb.emitOpError() << "table '" << param.getName() << "' has " << *have
                      << " rows but the module's " << rowsFrom << " is " << rows
                      << " (one row per token id): the plan would give the runtime a "
                      << (*have < rows ? "table too short for its token ids"
                                       : "vocabulary that leaves table rows unused")
                      << "; make them agree (vocab_size in '" << kModelAttr
                      << "' or the table's shape), or recompile from the model's config.json";
    return WalkResult::interrupt();
  });
  return failure(walk.wasInterrupted());
}
} // namespace

LogicalResult XFDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  if (attr.getName() != kModelAttr)
    return success();
  auto module = dyn_cast<ModuleOp>(op);
  auto model = dyn_cast<DictionaryAttr>(attr.getValue());
  if (!module || !model)
    return op->emitError() << "'" << kModelAttr
                           << "' must be a dictionary on the builtin.module, got "
                           << attr.getValue() << " on '" << op->getName() << "'";
  return verifyModelAttr(module, model);
}
