//===- PadVocab.cpp - pad the vocabulary to a multiple (Megatron-LM) ------===//
//
// Megatron-LM's --make-vocab-size-divisible-by: the token embedding and the
// LM head get rows past the real vocabulary so that the vocabulary splits
// evenly over tp (and GEMMs get a friendly size). The loss masks the padding
// columns out (xf.cross_entropy's `real_vocab`), so they never reach the loss
// or a gradient; the runtime starts the padding rows at zero and keeps them
// out of safetensors files. Runs after llcdist-model-stats, so the imported
// IR, `llc-dist info` and the published parameter counts keep the real
// vocabulary.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Dialect/XF/Analysis/ModelStats.h"
#include "llcdist/Dialect/XF/IR/XFOps.h"
#include "llcdist/Dialect/XF/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSet.h"

#define DEBUG_TYPE "llcdist-pad-vocab"

namespace llcdist::xf {
#define GEN_PASS_DEF_PADVOCAB
#include "llcdist/Dialect/XF/Transforms/Passes.h.inc"
} // namespace llcdist::xf

using namespace mlir;
using namespace llcdist::xf;

namespace {
RankedTensorType withDim0(Type t, int64_t rows) {
  auto rt = cast<RankedTensorType>(t);
  SmallVector<int64_t> shape(rt.getShape());
  shape[0] = rows;
  return rt.clone(shape);
}

struct PadVocabPass : public llcdist::xf::impl::PadVocabBase<PadVocabPass> {
  using PadVocabBase::PadVocabBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    const int64_t m = multiple;
    if (m < 1) {
      module.emitError("llcdist-pad-vocab: multiple must be >= 1, got ") << m;
      return signalPassFailure();
    }
    func::FuncOp entry = getEntryFunction(module);
    if (!entry)
      return signalPassFailure();

    // The loss and its LM head: the linear that computes the logits.
    SmallVector<CrossEntropyOp> losses;
    module.walk([&](CrossEntropyOp ce) { losses.push_back(ce); });
    if (losses.size() != 1) {
      module.emitError("llcdist-pad-vocab: expected one xf.cross_entropy (the loss), found ")
          << losses.size();
      return signalPassFailure();
    }
    CrossEntropyOp ce = losses.front();
    auto head = ce.getLogits().getDefiningOp<LinearOp>();
    auto headW = head ? head.getWeight().getDefiningOp<ParamOp>() : ParamOp();
    if (!headW || head.getLayout() != WeightLayout::OutIn || !head->hasOneUse())
      return fail(ce, "the logits must be an xf.linear out_in of an xf.param (the "
                      "LM head, [vocab, hidden]) used only by the loss");
    auto logitsTy = cast<RankedTensorType>(ce.getLogits().getType());
    const int64_t current = logitsTy.getShape().back();
    // Already padded (an xf file of a padded module): keep it when it is a
    // multiple, as a second run of the pass does.
    const int64_t vocab = ce.getRealVocab() ? int64_t(*ce.getRealVocab()) : current;
    const int64_t padded = (vocab + m - 1) / m * m;
    if (current % m == 0)
      return;
    if (ce.getRealVocab())
      return fail(ce, "the vocabulary is padded already (to " + std::to_string(current) +
                          " rows, real " + std::to_string(vocab) + "), not to a multiple of " +
                          std::to_string(m));

    // The parameters with a vocabulary dimension 0: the LM head (and its
    // bias) and every token embedding's table (the same name when tied).
    llvm::StringSet<> names;
    names.insert(headW.getName());
    if (Value bias = head.getBias()) {
      auto p = bias.getDefiningOp<ParamOp>();
      if (!p)
        return fail(head, "the LM head's bias is not an xf.param");
      names.insert(p.getName());
    }
    bool bad = false;
    module.walk([&](EmbeddingOp e) {
      auto p = e.getTable().getDefiningOp<ParamOp>();
      auto rows = cast<RankedTensorType>(e.getTable().getType()).getDimSize(0);
      if (!p || rows != vocab) {
        e.emitError("llcdist-pad-vocab: the token embedding's table must be an xf.param "
                    "with the loss's ")
            << vocab << " vocabulary rows, got " << e.getTable().getType();
        bad = true;
        return;
      }
      names.insert(p.getName());
    });
    if (bad)
      return signalPassFailure();
    module.walk([&](ParamOp p) {
      if (!names.contains(p.getName()))
        return;
      if (cast<RankedTensorType>(p.getType()).getDimSize(0) != vocab) {
        p.emitError("llcdist-pad-vocab: parameter '")
            << p.getName() << "' has dimension 0 of " << p.getType()
            << ", not the vocabulary of " << vocab;
        bad = true;
        return;
      }
      p.getResult().setType(withDim0(p.getType(), padded));
    });
    if (bad)
      return signalPassFailure();

    // The LM head's logits widen; the loss masks the padding columns out.
    SmallVector<int64_t> shape(logitsTy.getShape());
    shape.back() = padded;
    head.getResult().setType(logitsTy.clone(shape));
    Builder b(module.getContext());
    ce.setRealVocabAttr(b.getI64IntegerAttr(vocab));

    SmallVector<Attribute> padNames;
    for (const auto &n : names)
      padNames.push_back(b.getStringAttr(n.getKey()));
    llvm::sort(padNames, [](Attribute a, Attribute c) {
      return cast<StringAttr>(a).getValue() < cast<StringAttr>(c).getValue();
    });
    module->setAttr("xf.vocab_padding",
                    b.getDictionaryAttr({b.getNamedAttr("vocab_size", b.getI64IntegerAttr(vocab)),
                                         b.getNamedAttr("padded_vocab_size",
                                                        b.getI64IntegerAttr(padded)),
                                         b.getNamedAttr("multiple", b.getI64IntegerAttr(m)),
                                         b.getNamedAttr("params", b.getArrayAttr(padNames))}));
  }

  void fail(Operation *op, const std::string &msg) {
    op->emitError("llcdist-pad-vocab: ") << msg;
    signalPassFailure();
  }
};
} // namespace
