//===- SlotLayout.h - a pipeline's slotted instances by pattern -*- C++ -*-===//
//
// llcdist-plan-memory's slot blocks (docs/memory.md "Slot blocks"): every
// slot of a pipeline chunk runs the same subroutines, so its instances are
// laid out once and each slot is one block of that layout.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_LIB_DIALECT_PLAN_TRANSFORMS_SLOTLAYOUT_H
#define LLCDIST_LIB_DIALECT_PLAN_TRANSFORMS_SLOTLAYOUT_H

#include "ArenaPlacement.h"

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SmallVector.h"

#include <deque>
#include <map>
#include <optional>
#include <vector>

namespace llcdist::plan::memory {

/// A transient buffer instance and its live segments (step 1).
struct Transient {
  mutable BufferOp buf; // (ops' accessors are not const)
  int64_t slot;
  llvm::ArrayRef<Segment> segs;
  int64_t bytes; // aligned(buf.getNumBytes()), once per buffer
  /// With slots alike (SlotPattern): slot 0's instance, standing for every
  /// slot's of this chunk; -1: the instance only.
  int64_t patternChunk = -1;
  /// The buffer's place in the program (what breaks ties of first use).
  int64_t index = 0;
};

/// An action's kernels in the step's numbering, and its pipeline chunk (-1:
/// none).
struct ActionSpan {
  int64_t first, last, chunk;
  int64_t slot = 0;
};

/// Slots alike (docs/memory.md "Slots alike"): in a synchronous program
/// where every slot of a chunk runs the chunk's subroutines in one order
/// and each slotted buffer is touched by one chunk's subroutines only, slot
/// k's instance of a buffer lives where slot 0's does, moved to slot k's
/// actions: a segment end in slot 0's i-th action of the chunk, o kernels
/// after its start, is o kernels after the start of slot k's i-th action.
/// So only slot 0 is replayed, and the other slots' segments are worked out
/// where a use needs them.
struct SlotPattern {
  llvm::ArrayRef<ActionSpan> spans;
  /// Per kernel of the step, its action.
  std::vector<int64_t> actionAt;
  /// Per action, its place among the actions of its (chunk, slot).
  std::vector<int64_t> place;
  /// Per chunk (dense: chunks without slotted buffers have no slots), per
  /// slot, its actions in order.
  std::vector<std::vector<std::vector<int64_t>>> actions;

  int64_t slots(int64_t chunk) const { return int64_t(actions[size_t(chunk)].size()); }
  /// Where slot `slot` of `chunk` runs what slot 0 runs at kernel `t`.
  int64_t map(int64_t chunk, int64_t slot, int64_t t) const {
    int64_t a = actionAt[size_t(t)];
    int64_t b = actions[size_t(chunk)][size_t(slot)][size_t(place[size_t(a)])];
    return spans[size_t(b)].first + (t - spans[size_t(a)].first);
  }
  /// `segs` (slot 0's) moved to slot `slot` of `chunk`.
  llvm::SmallVector<Segment, 2> map(int64_t chunk, int64_t slot,
                                    llvm::ArrayRef<Segment> segs) const {
    llvm::SmallVector<Segment, 2> out;
    for (const Segment &s : segs)
      out.push_back({map(chunk, slot, s.first), map(chunk, slot, s.last)});
    return out;
  }
};

/// What the arena places: a buffer instance (`slot` -1: one instance every
/// slot shares), or (`block` >= 0) slot `slot` of a slot block.
struct Item {
  BufferOp buf;
  int64_t slot = 0;
  llvm::ArrayRef<Segment> segs;
  int64_t bytes = 0;
  int64_t block = -1;
};

/// A slotted buffer laid out in a slot block.
struct InBlock {
  int64_t block, offset;
  bool shared = false; // a workspace block's: the same bytes in every slot
};

/// Workspace blocks' ids, above the chunks' (Item::block).
constexpr int64_t kWorkspaceBlocks = int64_t(1) << 32;

/// How far above the live peak slot blocks may place a program before
/// per-instance placement is tried (PlanMemoryPass).
constexpr double kBlockSlack = 0.02;

struct SlotLayout {
  /// With `adopt`: the workspace buffers the slot blocks took.
  int64_t adopted = 0;
  std::vector<Item> items;
  llvm::MapVector<mlir::StringAttr, InBlock> inBlock;
  std::deque<llvm::SmallVector<Segment, 2>> storage; // merged segments the items point into
};

/// The pipeline's slotted instances by pattern (docs/memory.md "Microbatch
/// slots"). Every slot of a chunk runs the same subroutines, so its
/// instances live alike:
///  - a buffer none of whose segments crosses an action's end (a chunk's
///    workspace) needs no instance per slot: every slot shares one, live in
///    the segments of all;
///  - the others (what a microbatch keeps from F to B and W: saved
///    activations, received values) are laid out once per chunk, at
///    offsets in a slot block computed from slot 0's lifetimes, and each
///    slot of the chunk is one block, live while any of its buffers is. The
///    layout is checked on every slot (no two buffers live at once share
///    bytes); a slot on which it would not hold, or a buffer that belongs to
///    no single chunk, leaves the whole program to per-instance placement.
/// So a buffer's instances sit at the block bases of its chunk plus one
/// offset, which the plan writes once per chunk ("slot deltas").
/// With `adopt`, a chunk's slot block also takes the chunk's workspace
/// buffers that fit beside what the block holds at their times (largest
/// first; one that raises the block's live peak by g where slots x g is
/// under its bytes): a workspace live when its own slot's activations are
/// freed (ZeRO's per-microbatch gradient at the end of a backward) then
/// sits in those bytes, slot by slot, instead of beside every block.
/// With `byPattern` false, or where the pattern does not hold, every
/// instance is an item of its own.
SlotLayout layoutSlots(llvm::ArrayRef<Transient> instances, const llvm::DenseMap<mlir::StringAttr, int64_t> &slotsOf,
                       llvm::ArrayRef<ActionSpan> spans, int64_t kernels, bool byPattern, bool adopt = false);

/// layoutSlots(all instances, byPattern = true) where the slots are alike:
/// `instances` holds slot 0's instance of each slotted buffer (with its
/// patternChunk) for all its slots, and the result is the same, computed
/// once per chunk and per action place instead of once per slot. nullopt
/// where layoutSlots would fall back to per-instance placement.
std::optional<SlotLayout> layoutSlotsAlike(llvm::ArrayRef<Transient> instances,
                                           const llvm::DenseMap<mlir::StringAttr, int64_t> &slotsOf,
                                           const SlotPattern &pattern, int64_t kernels, bool adopt = false);

} // namespace llcdist::plan::memory

#endif
