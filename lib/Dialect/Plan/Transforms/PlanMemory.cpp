//===- PlanMemory.cpp - arena offsets for every buffer --------------------===//
#include "llcdist/Dialect/Plan/Transforms/Passes.h"

#include "llcdist/runtime/PlanSchema.h"

#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "llcdist-plan-memory"

namespace llcdist::plan {
#define GEN_PASS_DEF_PLANMEMORY
#include "llcdist/Dialect/Plan/Transforms/Passes.h.inc"
} // namespace llcdist::plan

using namespace mlir;
using namespace llcdist::plan;

namespace {
constexpr int64_t kAlignment = llcdist::rt::schema::kArenaAlignment;

struct PlanMemoryPass
    : public llcdist::plan::impl::PlanMemoryBase<PlanMemoryPass> {
  void runOnOperation() override {
    ProgramOp program = getOperation();
    Builder b(program.getContext());
    int64_t offset = 0;
    for (auto buf : program.getBody().front().getOps<BufferOp>()) {
      buf.setOffsetAttr(b.getI64IntegerAttr(offset));
      offset += (buf.getNumBytes() + kAlignment - 1) / kAlignment * kAlignment;
    }
    program.setArenaBytesAttr(b.getI64IntegerAttr(offset));
  }
};
} // namespace
