//===- OverlapWindows.h - start communication early, wait late -*- C++ -*-===//
//
// What the overlap passes that move single communication ops share
// (llcdist-plan-sp-overlap, llcdist-plan-p2p-overlap): an op is started on
// queue "comm" with a token, its start moved up past the kernels it does not
// depend on (those independent of it and of the kernels it depends on move
// below the start, keeping their order), its wait moved down to the first
// kernel that depends on it. Buffers are symbols (the passes run before
// llcdist-plan-memory); llcdist-verify-async checks the result on the arena.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_LIB_DIALECT_PLAN_TRANSFORMS_OVERLAPWINDOWS_H
#define LLCDIST_LIB_DIALECT_PLAN_TRANSFORMS_OVERLAPWINDOWS_H

#include "OverlapUtil.h"

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

namespace llcdist::plan {

/// What one op's window (from its start to its wait) holds once all ops of
/// the block have moved.
struct Window {
  int64_t kernels = 0; ///< compute kernels
  int64_t gemms = 0;   ///< of them linear_* kernels
};

/// Starts each of `ops` (synchronous communication kernels of `block`, in
/// block order) on queue "comm" with a token from `nextToken` on and moves
/// its start and wait as far as the buffers allow. A start moves up only past
/// compute kernels; a wait moves down past compute kernels, waits and (with
/// `crossOtherStarts`) the starts of the other `ops` whose buffers it does
/// not share; anything else (a synchronous collective, a send or recv)
/// bounds a window, so the order of the block's communication ops never
/// changes. A wait right above a start that writes the buffers of the op it
/// waits for (a ring's recv into the buffer an earlier send read) first
/// rises above the compute kernels independent of that op, so the start
/// can rise past them. Returns each op's window.
llvm::SmallVector<Window> overlapInBlock(mlir::Block &block, llvm::ArrayRef<KernelOp> ops,
                                         int64_t &nextToken, bool crossOtherStarts);

/// Starts every op `select` picks in each subroutine of `program`
/// (overlapInBlock, tokens after the program's), and records on the program
/// `countsAttr` = {started, overlapped, kernels} and the comm queue; nothing
/// when it picks none. Returns how many it started.
int64_t overlapSelected(ProgramOp program, llvm::function_ref<bool(KernelOp)> select, bool crossOtherStarts,
                        llvm::StringRef countsAttr);

} // namespace llcdist::plan

#endif
