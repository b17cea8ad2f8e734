//===- StagePlanTest.cpp - pipeline stage planning of the lowering --------===//
//
// Small hand-built steps and action lists; every expected number is derived
// by hand in the comment beside it, never copied from the code's output.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Conversion/XFToPlan/StagePlan.h"

#include <gtest/gtest.h>

using namespace llcdist;
using namespace llcdist::stageplan;
using schedule::Action;
using schedule::ActionKind;

namespace {
using O = Operand;
using Tags = std::vector<int64_t>;

StepOp op(int64_t chunk, std::vector<Operand> operands, int64_t results = 1) {
  return StepOp{chunk, std::move(operands), results};
}

Action F(int64_t mb, int64_t chunk = 0) { return {ActionKind::F, mb, chunk}; }
Action B(int64_t mb, int64_t chunk = 0) { return {ActionKind::B, mb, chunk}; }
Action W(int64_t mb, int64_t chunk = 0) { return {ActionKind::W, mb, chunk}; }

/// A two-stage GPT-2-like step with a tied table "wte":
///   0 embedding  chunk 0 (ids, wte)       5 loss grad    chunk 1 (3, labels)
///   1 layer 0    chunk 0 (0)              6 head grad    chunk 1 (5, wte)
///   2 layer 1    chunk 1 (1)  <- crosses  7 layer 1 bwd  chunk 1 (6)
///   3 head       chunk 1 (2, wte)         8 layer 0 bwd  chunk 0 (7)  <- crosses
///   4 loss       chunk 1 (3, labels)      9 emb grad     chunk 0 (8, ids)
/// The backward starts at op 5.
Step tiedTwoStage() {
  Step s;
  s.ops = {op(0, {O::input(), O::ofParam("wte")}),
           op(0, {O::resultOf(0)}),
           op(1, {O::resultOf(1)}),
           op(1, {O::resultOf(2), O::ofParam("wte")}),
           op(1, {O::resultOf(3), O::input()}),
           op(1, {O::resultOf(3), O::input()}),
           op(1, {O::resultOf(5), O::ofParam("wte")}),
           op(1, {O::resultOf(6)}),
           op(0, {O::resultOf(7)}),
           op(0, {O::resultOf(8), O::input()})};
  s.firstBackward = 5;
  return s;
}

schedule::Schedule twoStages(std::vector<Action> stage0, std::vector<Action> stage1,
                             bool split = false) {
  schedule::Schedule s;
  s.stages = 2;
  s.microbatches = 2;
  s.splitBackward = split;
  s.perStage = {std::move(stage0), std::move(stage1)};
  return s;
}
} // namespace

//===----------------------------------------------------------------------===//
// verifyChunks
//===----------------------------------------------------------------------===//

TEST(StagePlanVerify, AcceptsValuesBetweenStages) {
  EXPECT_FALSE(verifyChunks(tiedTwoStage(), 2).has_value());
}

// Op 1 (chunk 0) reads op 0, which has no chunk.
TEST(StagePlanVerify, RejectsAnOperandFromAnUnmarkedOp) {
  Step s;
  s.ops = {op(-1, {}), op(0, {O::resultOf(0)})};
  std::optional<Error> e = verifyChunks(s, 2);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->op, 1);
  EXPECT_EQ(e->message, "llcdist-lower-to-plan: operand of an op in chunk 0 comes from an op "
                        "llcdist-pipeline-split did not mark");
}

// With 2 stages chunks 0 and 2 both run on stage 0: no send can carry a
// value between them. Op 2 is the second offender; op 1 is reported.
TEST(StagePlanVerify, RejectsAValueBetweenChunksOfOneStageFirstOneFirst) {
  Step s;
  s.ops = {op(0, {}), op(2, {O::resultOf(0)}), op(-1, {}), op(1, {O::resultOf(2)})};
  std::optional<Error> e = verifyChunks(s, 2);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->op, 1);
  EXPECT_EQ(e->message, "llcdist-lower-to-plan: chunk 2 reads a value of chunk 0 on the same "
                        "stage; only values between stages can travel");
}

// An op without a chunk reads what it likes; the step's inputs and
// parameters never cross.
TEST(StagePlanVerify, IgnoresUnmarkedReadersInputsAndParams) {
  Step s;
  s.ops = {op(0, {O::input(), O::ofParam("w")}), op(-1, {O::resultOf(0)}),
           op(2, {O::input(), O::ofParam("w")})};
  EXPECT_FALSE(verifyChunks(s, 2).has_value());
}

//===----------------------------------------------------------------------===//
// findCrossings
//===----------------------------------------------------------------------===//

// Op 2 reads op 1's result (chunk 0 -> 1): tag 0; op 8 reads op 7's (chunk 1
// -> 0): tag 1. "wte" is read on stages 0 (op 0) and 1 (ops 3, 6): tied,
// home stage 0, tag 2 (after the two values).
TEST(StagePlanCrossings, ValuesThenTiedParameters) {
  Crossings c = findCrossings(tiedTwoStage(), 2);
  ASSERT_EQ(c.values.size(), 2u);
  EXPECT_EQ(c.values[0].value, (ValueId{1, 0}));
  EXPECT_EQ(c.values[0].tag, 0);
  EXPECT_EQ(c.values[0].fromChunk, 0);
  EXPECT_EQ(c.values[0].readers, Tags{1});
  EXPECT_EQ(c.values[1].value, (ValueId{7, 0}));
  EXPECT_EQ(c.values[1].tag, 1);
  EXPECT_EQ(c.values[1].fromChunk, 1);
  EXPECT_EQ(c.values[1].readers, Tags{0});
  EXPECT_EQ(c.tagOf.at({1, 0}), 0);
  EXPECT_EQ(c.tagOf.at({7, 0}), 1);
  EXPECT_EQ(c.tagOf.count({2, 0}), 0u); // read by its own chunk only
  ASSERT_EQ(c.tied.size(), 1u);
  EXPECT_EQ(c.tied[0].name, "wte");
  EXPECT_EQ(c.tied[0].stages, (std::set<int64_t>{0, 1}));
  EXPECT_EQ(c.tied[0].home, 0);
  EXPECT_EQ(c.tied[0].tag, 2);
}

// Four stages. Op 0 (chunk 0) defines A (result 0) and B (result 1). Chunk 1
// reads B first (op 1), then A (op 2); chunk 3 reads A (op 3); chunk 1
// reads A again (op 4). Tags follow the first read: B = 0, A = 1; A's
// readers are [1, 3], each once, in the order of their first read.
TEST(StagePlanCrossings, TagsInOrderOfFirstReadReadersOnce) {
  Step s;
  s.ops = {op(0, {}, 2), op(1, {O::resultOf(0, 1)}), op(1, {O::resultOf(0, 0)}),
           op(3, {O::resultOf(0, 0)}), op(1, {O::resultOf(0, 0)})};
  Crossings c = findCrossings(s, 4);
  ASSERT_EQ(c.values.size(), 2u);
  EXPECT_EQ(c.values[0].value, (ValueId{0, 1}));
  EXPECT_EQ(c.values[0].readers, Tags{1});
  EXPECT_EQ(c.values[1].value, (ValueId{0, 0}));
  EXPECT_EQ(c.values[1].readers, (Tags{1, 3}));
  EXPECT_TRUE(c.tied.empty());
}

// Two stages, chunks 0..3 (interleaved, chunk k on stage k mod 2). "a" is
// read by chunks 0 and 2, both stage 0: one stage, not tied. "z" by chunks
// 3 (stage 1) and 0 (stage 0), "b" by chunks 1 and 2: both tied, home the
// lowest stage (0), tags in name order after the one crossing value (op 1
// reads op 0 across stages): b = 1, z = 2.
TEST(StagePlanCrossings, TiedOnlyAcrossStagesNamedInOrder) {
  Step s;
  s.ops = {op(3, {O::ofParam("z")}), op(0, {O::ofParam("a"), O::ofParam("z"), O::resultOf(0)}),
           op(2, {O::ofParam("a"), O::ofParam("b")}), op(1, {O::ofParam("b")})};
  Crossings c = findCrossings(s, 2);
  ASSERT_EQ(c.values.size(), 1u);
  ASSERT_EQ(c.tied.size(), 2u);
  EXPECT_EQ(c.tied[0].name, "b");
  EXPECT_EQ(c.tied[0].home, 0);
  EXPECT_EQ(c.tied[0].tag, 1);
  EXPECT_EQ(c.tied[1].name, "z");
  EXPECT_EQ(c.tied[1].stages, (std::set<int64_t>{0, 1}));
  EXPECT_EQ(c.tied[1].tag, 2);
}

//===----------------------------------------------------------------------===//
// allocateSlots
//===----------------------------------------------------------------------===//

// 1F1B, stage 0 of 2, 2 microbatches: F0 takes slot 0, F1 slot 1 (0 is in
// use until B0); 2 slots.  Stage 1: F0 -> 0, B0 frees it, F1 reuses it; 1 slot.
TEST(StagePlanSlots, OneFOneBReusesFreedSlots) {
  SlotPlan s0 = allocateSlots({F(0), F(1), B(0), B(1)}, 1, false);
  EXPECT_EQ(s0.slots, Tags{2});
  EXPECT_EQ(s0.slotOfAction, (Tags{0, 1, 0, 1}));
  SlotPlan s1 = allocateSlots({F(0), B(0), F(1), B(1)}, 1, false);
  EXPECT_EQ(s1.slots, Tags{1});
  EXPECT_EQ(s1.slotOfAction, (Tags{0, 0, 0, 0}));
}

// F0 F1 F2 take 0 1 2; B1 frees 1, then B2 frees 2; F3 takes the lowest
// free slot, 1 (not the last freed, 2); B0 runs in 0, B3 in 1.
TEST(StagePlanSlots, ReusesTheLowestFreeSlot) {
  SlotPlan s = allocateSlots({F(0), F(1), F(2), B(1), B(2), F(3), B(0), B(3)}, 1, false);
  EXPECT_EQ(s.slots, Tags{3});
  EXPECT_EQ(s.slotOfAction, (Tags{0, 1, 2, 1, 2, 1, 0, 1}));
}

// A split backward never reuses: F2 takes a third slot although W0 freed
// slot 0. B and W run in their F's slot.
TEST(StagePlanSlots, SplitBackwardGivesEachMicrobatchItsSlot) {
  SlotPlan s = allocateSlots({F(0), F(1), B(0), W(0), F(2), B(1), W(1), B(2), W(2)}, 1, true);
  EXPECT_EQ(s.slots, Tags{3});
  EXPECT_EQ(s.slotOfAction, (Tags{0, 1, 0, 0, 2, 1, 1, 2, 2}));
}

// Two local chunks (interleaved): no reuse either; slots count per chunk.
// F1c1 comes after B0c1 freed slot 0 of chunk 1 and still takes slot 1.
TEST(StagePlanSlots, InterleavedCountsSlotsPerChunk) {
  SlotPlan s = allocateSlots({F(0, 0), F(0, 1), B(0, 1), F(1, 1), F(1, 0), B(1, 1), B(0, 0),
                              B(1, 0)},
                             2, false);
  EXPECT_EQ(s.slots, (Tags{2, 2}));
  EXPECT_EQ(s.slotOfAction, (Tags{0, 0, 0, 1, 1, 1, 0, 1}));
}

//===----------------------------------------------------------------------===//
// fusesBackward
//===----------------------------------------------------------------------===//

TEST(StagePlanFusedBackward, EveryWRightAfterItsBAndNoSends) {
  std::vector<Action> zbFirst = {F(0), B(0), W(0), F(1), B(1), W(1)};
  EXPECT_TRUE(fusesBackward(zbFirst, 0, /*backwardSends=*/false));
  // A W run inside B would delay what B sends.
  EXPECT_FALSE(fusesBackward(zbFirst, 0, /*backwardSends=*/true));
  // W0 waits behind B1: the gap can be used.
  EXPECT_FALSE(fusesBackward({F(0), F(1), B(0), B(1), W(0), W(1)}, 0, false));
  // The action after B0 is a W, but of microbatch 1.
  EXPECT_FALSE(fusesBackward({F(0), F(1), B(1), W(0), B(0), W(1)}, 0, false));
  // The last action is a B: nothing follows it.
  EXPECT_FALSE(fusesBackward({F(0), W(0), B(0)}, 0, false));
  // Only chunk 1's B count: chunk 0's B0 is followed by F, chunk 1's by W.
  EXPECT_TRUE(fusesBackward({F(0, 1), B(0, 1), W(0, 1), B(0, 0), F(1, 0)}, 1, false));
}

//===----------------------------------------------------------------------===//
// planStage
//===----------------------------------------------------------------------===//

// 1F1B over tiedTwoStage. Stage 0 (chunk 0): reads the ids (op 0), sends tag
// 0 in its forward (op 1), nothing in its backward, receives tag 1 (op 8);
// no loss; holds "wte" at home. Stage 1 (chunk 1): reads the labels (op 4),
// sends tag 1 in its backward (op 7), receives tag 0 (op 2), has the loss
// (the last chunk, 1, is on stage 1) and holds a replica of "wte" (home 0).
TEST(StagePlanStage, OneFOneBTiedTwoStages) {
  Step step = tiedTwoStage();
  Crossings c = findCrossings(step, 2);
  schedule::Schedule sched = twoStages({F(0), F(1), B(0), B(1)}, {F(0), B(0), F(1), B(1)});

  StagePlan s0 = planStage(step, c, sched, 0);
  EXPECT_EQ(s0.stage, 0);
  EXPECT_FALSE(s0.hasLoss);
  EXPECT_FALSE(s0.splitBackward);
  EXPECT_TRUE(s0.replicaOf.empty());
  EXPECT_TRUE(s0.updates("wte"));
  EXPECT_EQ(s0.slotOfAction, (Tags{0, 1, 0, 1}));
  ASSERT_EQ(s0.chunks.size(), 1u);
  EXPECT_EQ(s0.chunks[0].chunk, 0);
  EXPECT_EQ(s0.chunks[0].slots, 2);
  EXPECT_TRUE(s0.chunks[0].readsInputs);
  EXPECT_EQ(s0.chunks[0].forwardSends, Tags{0});
  EXPECT_TRUE(s0.chunks[0].backwardSends.empty());
  EXPECT_EQ(s0.chunks[0].receives, Tags{1});
  EXPECT_FALSE(s0.chunks[0].fusedBackward); // not a split backward

  StagePlan s1 = planStage(step, c, sched, 1);
  EXPECT_TRUE(s1.hasLoss);
  EXPECT_EQ(s1.replicaOf, (std::map<std::string, int64_t>{{"wte", 0}}));
  EXPECT_FALSE(s1.updates("wte"));
  EXPECT_EQ(s1.slotOfAction, (Tags{0, 0, 0, 0}));
  ASSERT_EQ(s1.chunks.size(), 1u);
  EXPECT_EQ(s1.chunks[0].chunk, 1);
  EXPECT_EQ(s1.chunks[0].slots, 1);
  EXPECT_TRUE(s1.chunks[0].readsInputs);
  EXPECT_TRUE(s1.chunks[0].forwardSends.empty());
  EXPECT_EQ(s1.chunks[0].backwardSends, Tags{1});
  EXPECT_EQ(s1.chunks[0].receives, Tags{0});
}

// ZB-H1-like lists. Stage 0 runs each W right after its B and its backward
// sends nothing: fused. Stage 1's W0 waits behind F1 and its backward sends
// tag 1: split. No slot is reused under a split backward: 2 slots each.
TEST(StagePlanStage, SplitBackwardFusesOnlyWhereNothingGains) {
  Step step = tiedTwoStage();
  Crossings c = findCrossings(step, 2);
  schedule::Schedule sched = twoStages({F(0), F(1), B(0), W(0), B(1), W(1)},
                                       {F(0), B(0), F(1), B(1), W(0), W(1)}, /*split=*/true);
  StagePlan s0 = planStage(step, c, sched, 0);
  EXPECT_TRUE(s0.splitBackward);
  EXPECT_TRUE(s0.chunks[0].fusedBackward);
  EXPECT_EQ(s0.chunks[0].slots, 2);
  EXPECT_EQ(s0.slotOfAction, (Tags{0, 1, 0, 0, 1, 1}));
  StagePlan s1 = planStage(step, c, sched, 1);
  EXPECT_FALSE(s1.chunks[0].fusedBackward);
  EXPECT_EQ(s1.chunks[0].slots, 2);
  EXPECT_EQ(s1.slotOfAction, (Tags{0, 0, 1, 1, 0, 1}));
}

// Interleaved, 2 stages x 2 chunks: stage 1 holds chunks 1 and 3; the loss
// is on chunk 3's stage, 1. Chunk 0 -> 1 -> 2 -> 3 forward (tags 0, 1, 2);
// stage 1's chunks: 1 receives 0 and sends 1, 3 receives 2; neither reads
// inputs.
TEST(StagePlanStage, InterleavedChunksOfAStage) {
  Step s;
  s.ops = {op(0, {O::input()}), op(1, {O::resultOf(0)}), op(2, {O::resultOf(1)}),
           op(3, {O::resultOf(2)})};
  s.firstBackward = 4;
  Crossings c = findCrossings(s, 2);
  schedule::Schedule sched;
  sched.stages = 2;
  sched.virtualStages = 2;
  sched.perStage = {{F(0, 0), F(0, 1), B(0, 1), B(0, 0)}, {F(0, 0), F(0, 1), B(0, 1), B(0, 0)}};
  StagePlan s1 = planStage(s, c, sched, 1);
  EXPECT_TRUE(s1.hasLoss);
  ASSERT_EQ(s1.chunks.size(), 2u);
  EXPECT_EQ(s1.chunks[0].localChunk, 0);
  EXPECT_EQ(s1.chunks[0].chunk, 1);
  EXPECT_EQ(s1.chunks[0].receives, Tags{0});
  EXPECT_EQ(s1.chunks[0].forwardSends, Tags{1});
  EXPECT_FALSE(s1.chunks[0].readsInputs);
  EXPECT_EQ(s1.chunks[1].chunk, 3);
  EXPECT_EQ(s1.chunks[1].receives, Tags{2});
  EXPECT_TRUE(s1.chunks[1].forwardSends.empty());
  EXPECT_EQ(s1.chunks[1].slots, 1);
  StagePlan s0 = planStage(s, c, sched, 0);
  EXPECT_FALSE(s0.hasLoss);
  EXPECT_TRUE(s0.chunks[0].readsInputs);
  EXPECT_EQ(s0.chunks[1].chunk, 2);
}

TEST(StagePlanNames, SubroutinesAndSlotPrefixes) {
  EXPECT_EQ(subroutineName(ActionKind::F, 3), "forward_v3");
  EXPECT_EQ(subroutineName(ActionKind::B, 0), "backward_v0");
  EXPECT_EQ(subroutineName(ActionKind::W, 1), "backward_weight_v1");
  EXPECT_EQ(chunkPrefix(1), "v1/");
}
