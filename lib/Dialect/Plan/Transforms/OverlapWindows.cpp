//===- OverlapWindows.cpp - start communication early, wait late ----------===//
#include "OverlapWindows.h"

#include "KernelAccess.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace llcdist::plan;

namespace {
bool isGemm(KernelOp k) { return k.getKernel().starts_with("linear_"); }
} // namespace

SmallVector<Window> llcdist::plan::overlapInBlock(Block &block, ArrayRef<KernelOp> ops,
                                                  int64_t &nextToken, bool crossOtherStarts) {
  // All of them go on queue comm first, so that a window may hold the later
  // ones (they are no synchronous collectives any more).
  OpBuilder b(block.getParentOp()->getContext());
  llvm::DenseSet<Operation *> onComm;
  llvm::DenseMap<int64_t, KernelOp> startOf; // token -> its op
  for (KernelOp c : ops) {
    c->setAttr(kQueueAttr, b.getStringAttr("comm"));
    startOf[nextToken] = c;
    c->setAttr(kTokenAttr, b.getI64IntegerAttr(nextToken++));
    onComm.insert(c);
  }
  auto isWait = [](Operation *op) {
    auto k = dyn_cast<KernelOp>(op);
    return k && k.getKernel() == kWaitKernel;
  };
  // A compute kernel (not a collective, not a wait).
  auto isCompute = [&](Operation *op) {
    auto k = dyn_cast<KernelOp>(op);
    return k && !isCommunicationKernel(k.getKernel()) && !isWait(op);
  };
  // The op whose token `w` (a wait) waits for, when it is one of `ops`.
  auto waited = [&](Operation *w) -> KernelOp {
    auto token = w->getAttrOfType<IntegerAttr>(kTokenAttr);
    return token ? startOf.lookup(token.getInt()) : KernelOp();
  };
  for (KernelOp c : ops) {
    KernelAccess ca = accessOf(c);
    // 0. A wait right above c for an earlier start whose buffers c touches
    // (a ring's recv into the buffer an earlier send sent) sank there past
    // the kernels above it: it rises above those independent of the op it
    // waits for, so that c can rise past them in 1 (that op started a
    // window earlier). Waiting earlier only blocks sooner: never a race.
    if (Operation *w = c->getPrevNode(); w && isWait(w))
      if (KernelOp first = waited(w); first && dependent(accessOf(first), ca)) {
        KernelAccess fa = accessOf(first);
        Operation *above = w->getPrevNode();
        while (above && isCompute(above) && !dependent(accessOf(cast<KernelOp>(above)), fa))
          above = above->getPrevNode();
        if (above != w->getPrevNode()) {
          if (above)
            w->moveAfter(above);
          else
            w->moveBefore(&block, block.begin());
        }
      }
    // 1. The start: up past the kernels since the last start or wait
    // (or synchronous collective); those independent of it and of every
    // kernel kept above it move below it, in their order.
    SmallVector<KernelAccess> kept{ca};
    SmallVector<Operation *> below; // in reverse order
    for (Operation *p = c->getPrevNode(); p && isCompute(p); p = p->getPrevNode()) {
      KernelAccess pa = accessOf(cast<KernelOp>(p));
      if (llvm::any_of(kept, [&](const KernelAccess &k) { return dependent(pa, k); }))
        kept.push_back(std::move(pa));
      else
        below.push_back(p);
    }
    for (Operation *p : below) // reverse order, each moved right after c
      p->moveAfter(c);
    // 2. The wait: down past the kernels independent of it, the other
    // ops' starts whose buffers it does not share (crossOtherStarts), and
    // waits.
    Operation *end = c->getNextNode();
    for (; end && !end->hasTrait<OpTrait::IsTerminator>(); end = end->getNextNode()) {
      auto k = dyn_cast<KernelOp>(end);
      if (!k || !(isCompute(k) || isWait(k) || (crossOtherStarts && onComm.contains(k))))
        break;
      if (!isWait(k) && dependent(accessOf(k), ca))
        break;
    }
    if (end)
      b.setInsertionPoint(end);
    else
      b.setInsertionPointToEnd(&block);
    auto w = KernelOp::create(b, c.getLoc(), kWaitKernel, b.getDictionaryAttr({}),
                              b.getDictionaryAttr({}));
    w->setAttr(kTokenAttr, c->getAttr(kTokenAttr));
  }
  // 3. What each window holds, once all have moved (a later start's
  // reordering moves kernels only within the windows around it).
  llvm::DenseMap<int64_t, Operation *> open;
  llvm::DenseMap<Operation *, std::pair<int64_t, int64_t>> held; // kernels, GEMMs
  for (Operation &op : block) {
    auto k = dyn_cast<KernelOp>(&op);
    if (!k)
      continue;
    auto token = k->getAttrOfType<IntegerAttr>(kTokenAttr);
    if (onComm.contains(k)) {
      open[token.getInt()] = k;
      held[k];
    } else if (isWait(k) && token) {
      open.erase(token.getInt());
    } else if (isCompute(k)) {
      for (auto &[t, c] : open) {
        ++held[c].first;
        held[c].second += isGemm(k);
      }
    }
  }
  SmallVector<Window> windows;
  for (KernelOp c : ops) {
    auto [kernels, gemms] = held.lookup(c);
    windows.push_back({kernels, gemms});
  }
  return windows;
}

int64_t llcdist::plan::overlapSelected(ProgramOp program, llvm::function_ref<bool(KernelOp)> select,
                                       bool crossOtherStarts, StringRef countsAttr) {
  int64_t nextToken = overlap::firstFreeToken(program);
  int64_t started = 0, overlapped = 0, kernels = 0;
  for (auto sub : program.getBody().front().getOps<SubroutineOp>()) {
    Block &block = sub.getBody().front();
    SmallVector<KernelOp> ops;
    for (KernelOp k : block.getOps<KernelOp>())
      if (select(k))
        ops.push_back(k);
    for (const Window &w : overlapInBlock(block, ops, nextToken, crossOtherStarts)) {
      ++started;
      overlapped += w.kernels > 0;
      kernels += w.kernels;
    }
  }
  if (started == 0)
    return 0;
  overlap::addQueue(program, "comm");
  OpBuilder b(program.getContext());
  program->setAttr(countsAttr, b.getDictionaryAttr({b.getNamedAttr("started", b.getI64IntegerAttr(started)),
                                                    b.getNamedAttr("overlapped", b.getI64IntegerAttr(overlapped)),
                                                    b.getNamedAttr("kernels", b.getI64IntegerAttr(kernels))}));
  return started;
}
