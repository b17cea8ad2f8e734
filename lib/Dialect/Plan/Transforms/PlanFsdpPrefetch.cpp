//===- PlanFsdpPrefetch.cpp - ZeRO-3's parameter gathers ahead of use -----===//
//
// PyTorch FSDP2's prefetch (forward and backward prefetch of one unit ahead)
// on a ZeRO-3 plan (llcdist-plan-zero stage 3). There every scope gathers its
// parameters synchronously just before it reads them, so the compute waits
// for each gather. Here the gathers of a forward or backward subroutine are
// grouped into units, FSDP's wrapping of one module per transformer layer:
// a maximal run of gathers (in the subroutine's order) of parameters of one
// layer, the layer being the parameter name's first numeric component
// (`transformer.h.3.attn.c_attn.weight` → `transformer.h.3`,
// `model.layers.3.mlp.up_proj.weight` → `model.layers.3`); the others (the
// embeddings, the final norm: FSDP's root) are units of their own where they
// run. Every gather then starts on queue "comm" with a token of its own and
// is waited where it was, just before the parameter's first use:
//
//  - unit 0's gathers all start where its first one was (the compute waits
//    for that one only);
//  - unit i > 0's start right after the first wait of unit max(0, i - units),
//    i.e. when that unit begins computing: with units = 1 the next layer's
//    parameters are in flight while the current layer computes.
//
// The gathered buffers are therefore live from the start to their scope's
// last read; llcdist-plan-memory plans that (a started op's buffers live from
// its start). The tokens all complete inside the subroutine, so every run
// (microbatch) reuses them.
//
//===----------------------------------------------------------------------===//
#include "OverlapUtil.h"

#include "llcdist/Dialect/Plan/Analysis/CollectiveOrigin.h"
#include "llcdist/Dialect/Plan/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"

#define DEBUG_TYPE "llcdist-plan-fsdp-prefetch"

namespace llcdist::plan {
#define GEN_PASS_DEF_PLANFSDPPREFETCH
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist::plan;

namespace {
/// The layer a parameter belongs to: its name up to the first all-digit
/// component ("" for a parameter outside the layers).
StringRef layerOf(StringRef param) {
  size_t pos = 0;
  while (pos < param.size()) {
    size_t end = param.find('.', pos);
    StringRef part = param.slice(pos, end);
    if (!part.empty() && llvm::all_of(part, llvm::isDigit))
      return param.take_front(end == StringRef::npos ? param.size() : end);
    if (end == StringRef::npos)
      break;
    pos = end + 1;
  }
  return "";
}

struct PlanFsdpPrefetchPass
    : public llcdist::plan::impl::PlanFsdpPrefetchBase<PlanFsdpPrefetchPass> {
  using PlanFsdpPrefetchBase::PlanFsdpPrefetchBase;

  void runOnOperation() override {
    ProgramOp program = getOperation();
    if (units < 0) {
      program.emitError("llcdist-plan-fsdp-prefetch: units must be >= 0, got ")
          << static_cast<int64_t>(units);
      return signalPassFailure();
    }
    if (units == 0)
      return; // off: the gathers stay synchronous
    Block &body = program.getBody().front();

    // The buffer each ZeRO-3 gather reads is a parameter's block: the value,
    // or under mixed precision the bf16 copy step_begin casts it into.
    llvm::DenseMap<StringAttr, StringRef> paramOf;
    bool zero3 = false;
    for (auto p : body.getOps<ParamOp>()) {
      paramOf[p.getValueAttr().getAttr()] = p.getName();
      if (auto z = p->getAttrOfType<DictionaryAttr>("zero"))
        if (auto stage = z.getAs<IntegerAttr>("stage"))
          zero3 |= stage.getInt() >= 3;
    }
    if (!zero3)
      return; // the parameters are whole: nothing is gathered before use
    SmallVector<SubroutineOp> steps;
    for (auto sub : body.getOps<SubroutineOp>()) {
      if (sub.getSymName() == "step_begin") {
        for (auto k : sub.getBody().front().getOps<KernelOp>())
          if (k.getKernel() == "cast")
            if (StringRef p = paramOf.lookup(k.getArgs().getAs<FlatSymbolRefAttr>("x").getAttr());
                !p.empty())
              paramOf[k.getArgs().getAs<FlatSymbolRefAttr>("y").getAttr()] = p;
        continue;
      }
      if (sub.getSymName() != "optimizer")
        steps.push_back(sub);
    }

    SymbolTable symbols(program);
    const int64_t firstToken = overlap::firstFreeToken(program);
    OpBuilder b(program.getContext());
    SmallVector<Attribute> report;
    for (SubroutineOp sub : steps) {
      // 1. The units: runs of one layer's gathers.
      struct Unit {
        StringRef layer;
        SmallVector<KernelOp> gathers;
      };
      SmallVector<Unit> unitList;
      for (auto k : sub.getBody().front().getOps<KernelOp>()) {
        if (k.getKernel() != "all_gather" || k->hasAttr(kTokenAttr) ||
            collectiveOrigin(k) != llcdist::xf::CollectiveOrigin::Zero)
          continue;
        auto x = k.getArgs().getAs<FlatSymbolRefAttr>("x");
        StringRef param = x ? paramOf.lookup(x.getAttr()) : StringRef();
        if (param.empty())
          continue; // not a parameter's gather: left as it is
        StringRef layer = layerOf(param);
        if (unitList.empty() || unitList.back().layer != layer)
          unitList.push_back({layer, {}});
        unitList.back().gathers.push_back(k);
      }
      if (unitList.empty())
        continue;

      // 2. Each gather becomes a wait where it was, with a token of its own.
      llvm::DenseMap<Operation *, int64_t> tokenOf;
      llvm::DenseMap<Operation *, KernelOp> waitOf;
      int64_t token = firstToken, gathers = 0, prefetched = 0, bytes = 0;
      for (Unit &u : unitList)
        for (KernelOp g : u.gathers) {
          tokenOf[g] = token;
          b.setInsertionPoint(g);
          waitOf[g] = overlap::createWait(b, g.getLoc(), token++);
        }

      // 3. The starts: unit 0's where its first gather was, unit i's after
      // the first wait of unit i - units (unit 0 for the first `units`),
      // in unit order.
      llvm::DenseMap<int64_t, Operation *> tail; // anchor unit → last start after it
      for (auto [i, u] : llvm::enumerate(unitList)) {
        int64_t anchor = std::max<int64_t>(0, int64_t(i) - units);
        if (i == 0) {
          b.setInsertionPoint(waitOf.lookup(u.gathers.front()));
        } else {
          Operation *after = tail.lookup(anchor);
          if (!after)
            after = waitOf.lookup(unitList[anchor].gathers.front());
          b.setInsertionPointAfter(after);
        }
        for (KernelOp g : u.gathers) {
          Operation *s = b.clone(*g);
          overlap::start(s, "comm", tokenOf.lookup(g));
          b.setInsertionPointAfter(s);
          if (i != 0)
            tail[anchor] = s;
          ++gathers;
          prefetched += i != 0;
          bytes += symbols.lookup<BufferOp>(g.getArgs().getAs<FlatSymbolRefAttr>("y").getAttr())
                       .getNumBytes();
        }
      }
      for (Unit &u : unitList)
        for (KernelOp g : u.gathers)
          g.erase();
      report.push_back(b.getDictionaryAttr(
          {b.getNamedAttr("subroutine", b.getStringAttr(sub.getSymName())),
           b.getNamedAttr("units", b.getI64IntegerAttr(int64_t(unitList.size()))),
           b.getNamedAttr("gathers", b.getI64IntegerAttr(gathers)),
           b.getNamedAttr("prefetched", b.getI64IntegerAttr(prefetched)),
           b.getNamedAttr("bytes", b.getI64IntegerAttr(bytes))}));
    }
    if (report.empty())
      return;
    overlap::addQueue(program, "comm");
    program->setAttr(kFsdpPrefetchAttr, b.getArrayAttr(report));
  }
};
} // namespace
