//===- PlanMemory.cpp - arena offsets from buffer liveness ----------------===//
//
// Every buffer gets a 64-byte-aligned arena offset. State that lives across
// steps (parameters, gradients, optimizer state, inputs, metrics) is placed
// first, for the whole step. Activations and scratch buffers live from their
// first to their last use in the step's action sequence (the schedule with
// each subroutine's kernels inlined, microbatch after microbatch); two of them
// share bytes only when those intervals are disjoint. Offsets are chosen
// first-fit in order of first use, so the arena size is the plan's exact peak
// for this order of kernels.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Dialect/Plan/Transforms/Passes.h"

#include "llcdist/runtime/PlanSchema.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"

#include <map>
#include <queue>

#define DEBUG_TYPE "llcdist-plan-memory"

namespace llcdist::plan {
#define GEN_PASS_DEF_PLANMEMORY
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist::plan;

namespace {
constexpr int64_t kAlignment = llcdist::rt::schema::kArenaAlignment;

int64_t aligned(int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

bool persistent(BufferOp buf) {
  StringRef k = buf.getKind();
  return k == "param" || k == "grad" || k == "optimizer_state" || k == "input" ||
         k == "metric";
}

struct Interval {
  int64_t first = -1, last = -1;
};

struct PlanMemoryPass : public llcdist::plan::impl::PlanMemoryBase<PlanMemoryPass> {
  void runOnOperation() override {
    ProgramOp program = getOperation();
    Block &body = program.getBody().front();
    Builder b(program.getContext());

    // 1. Live intervals over the step: kernels numbered in execution order.
    llvm::StringMap<SmallVector<KernelOp>> kernelsOf;
    for (auto sub : body.getOps<SubroutineOp>())
      for (auto k : sub.getBody().front().getOps<KernelOp>())
        kernelsOf[sub.getSymName()].push_back(k);
    llvm::StringMap<Interval> live;
    int64_t t = 0;
    auto touch = [&](Attribute a) {
      Interval &iv = live[cast<FlatSymbolRefAttr>(a).getValue()];
      if (iv.first < 0)
        iv.first = t;
      iv.last = t;
    };
    for (auto sched : body.getOps<ScheduleOp>())
      for (auto action : sched.getBody().front().getOps<ActionOp>())
        for (KernelOp k : kernelsOf.lookup(action.getSubroutine())) {
          for (NamedAttribute arg : k.getArgs()) {
            if (auto list = dyn_cast<ArrayAttr>(arg.getValue()))
              llvm::for_each(list, touch);
            else
              touch(arg.getValue());
          }
          ++t;
        }

    // 2. Persistent state first, one after another.
    int64_t offset = 0;
    SmallVector<BufferOp> transient;
    for (auto buf : body.getOps<BufferOp>()) {
      if (!persistent(buf) && live.lookup(buf.getSymName()).first >= 0) {
        transient.push_back(buf);
        continue;
      }
      buf.setOffsetAttr(b.getI64IntegerAttr(offset));
      offset += aligned(buf.getNumBytes());
    }
    int64_t base = offset;

    // 3. Transient buffers, first-fit by first use.
    llvm::stable_sort(transient, [&](BufferOp x, BufferOp y) {
      return live.lookup(x.getSymName()).first < live.lookup(y.getSymName()).first;
    });
    // `active` holds the byte ranges (relative to base) of the buffers still
    // live, disjoint and sorted by offset; `expiry` orders them by last use.
    std::map<int64_t, int64_t> active; // begin -> end
    std::priority_queue<std::pair<int64_t, int64_t>, std::vector<std::pair<int64_t, int64_t>>,
                        std::greater<>>
        expiry; // (last use, begin)
    int64_t peak = 0;
    for (BufferOp buf : transient) {
      Interval iv = live.lookup(buf.getSymName());
      while (!expiry.empty() && expiry.top().first < iv.first) {
        active.erase(expiry.top().second);
        expiry.pop();
      }
      int64_t size = aligned(buf.getNumBytes()), at = 0;
      for (auto [begin, end] : active) {
        if (begin - at >= size)
          break;
        at = std::max(at, end);
      }
      active[at] = at + size;
      expiry.push({iv.last, at});
      peak = std::max(peak, at + size);
      buf.setOffsetAttr(b.getI64IntegerAttr(base + at));
    }
    program.setArenaBytesAttr(b.getI64IntegerAttr(base + peak));
  }
};
} // namespace
