// Microbatch slots (docs/plan-format.md "Microbatch slots"): the loader's checks of `slot_offsets` and an
// action's `slot`, the interpreter running one subroutine on each slot's instances (the same numbers as
// separate per-microbatch buffers would give), and the memory measurement per instance.
#include "PlanTestUtil.h"

#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Plan.h"

#include <cmath>
#include <functional>

namespace llcdist::rt {
namespace {

using testing::json;
using testing::oneLayerPlan;
using testing::PlanBuilder;

// oneLayerPlan(32, 16, 8, 2, 2): buffer ids (see PlanTestUtil.h) and sizes.
constexpr int64_t kWte = 0, kLm = 4, kIds = 8, kTargets = 9, kH = 10, kDh = 11, kLogits = 12, kLoss = 13;
constexpr int64_t kHBytes = 16 * 16 * 4, kDhBytes = kHBytes, kLogitsBytes = 16 * 32 * 4;

StatusOr<Plan> parse(const PlanBuilder& b) { return testing::parsePlan(b, /*validateParameters=*/true); }

// Gives each of `ids` a second instance at the end of the arena.
void addSlot(PlanBuilder& b, std::initializer_list<int64_t> ids) {
  for (int64_t id : ids) {
    json& buf = b.program["buffers"][size_t(id)];
    const int64_t bytes = buf["bytes"];
    buf["slot_offsets"] = {buf["offset"], b.arena};
    b.arena += (bytes + 63) / 64 * 64;
  }
  b.program["arena_bytes"] = b.arena;
}

// The base plan run GPipe-style: F0 F1 B0 B1, the second microbatch in slot 1 of every activation and input
// buffer (`slotted`), or (not slotted) in the one set of buffers.
PlanBuilder gpipe(bool slotted) {
  PlanBuilder b = oneLayerPlan(32, 16, 8, 2, 2);
  if (slotted) addSlot(b, {kIds, kTargets, kH, kDh, kLogits});
  b.program["actions"] = json::array();
  b.action("step_begin");
  for (auto [sub, mb] : {std::pair{"forward", 0}, {"forward", 1}, {"backward", 0}, {"backward", 1}}) {
    b.action(sub, mb);
    if (slotted && mb == 1) b.program["actions"].back()["slot"] = 1;
  }
  b.action("optimizer");
  return b;
}

Status tokens(int64_t step, int64_t mb, int32_t* ids, int32_t* targets, int64_t B, int64_t S) {
  for (int64_t i = 0; i < B * S; ++i) {
    ids[i] = int32_t((step * 7 + mb * 13 + i * 5) % 32);
    targets[i] = int32_t((step * 3 + mb * 11 + i * 7 + 1) % 32);
  }
  return Status::ok();
}

struct Trained {
  std::vector<float> wte, lm, loss;
  MemoryStats memory;
};

Trained train(const PlanBuilder& b, int steps) {
  Trained r;
  auto plan = parse(b);
  EXPECT_TRUE(plan.isOk()) << plan.status().message();
  if (!plan.isOk()) return r;
  auto backend = makeCpuBackend();
  auto in = Interpreter::create(*plan, 0, *backend);
  EXPECT_TRUE(in.isOk()) << in.status().message();
  if (!in.isOk()) return r;
  std::vector<float> init(32 * 16);
  for (size_t i = 0; i < init.size(); ++i) init[i] = 0.01f * float(int(i % 17) - 8);
  EXPECT_TRUE((*in)->writeF32(kWte, init.data()).isOk());
  EXPECT_TRUE((*in)->writeF32(kLm, init.data()).isOk());
  for (int s = 0; s < steps; ++s) {
    Status st = (*in)->runStep(s, 1e-2, tokens);
    EXPECT_TRUE(st.isOk()) << st.message();
    r.loss.push_back((*in)->readF32(kLoss).value()[0]);
  }
  r.wte = (*in)->readF32(kWte).value();
  r.lm = (*in)->readF32(kLm).value();
  r.memory = *(*in)->memoryStats();
  return r;
}

// One-microbatch-at-a-time order (F0 B0 F1 B1) on one set of buffers: the reference.
PlanBuilder oneAtATime() { return oneLayerPlan(32, 16, 8, 2, 2); }

TEST(SlotTest, SlotsGiveTheNumbersOfOneMicrobatchAtATime) {
  const Trained ref = train(oneAtATime(), 3);
  const Trained slotted = train(gpipe(/*slotted=*/true), 3);
  // Same kernels on the same values in the same accumulation order: bitwise equal.
  EXPECT_EQ(slotted.loss, ref.loss);
  EXPECT_EQ(slotted.wte, ref.wte);
  EXPECT_EQ(slotted.lm, ref.lm);
  // Without slots F1 overwrites F0's activations before B0 reads them: the test can fail.
  const Trained shared = train(gpipe(/*slotted=*/false), 3);
  EXPECT_NE(shared.wte, ref.wte);
}

TEST(SlotTest, MemoryCountsEachInstance) {
  const PlanBuilder b = gpipe(/*slotted=*/true);
  const Trained r = train(b, 1);
  // Whole-step buffers (params, grads, state, metrics, and both instances of the inputs) by hand.
  int64_t wholeStep = 0;
  for (const json& buf : b.program["buffers"]) {
    const std::string kind = buf["kind"];
    if (kind == "activation") continue;
    const int64_t bytes = buf["bytes"];
    wholeStep += (bytes + 63) / 64 * 64 * (buf.contains("slot_offsets") ? 2 : 1);
  }
  // The peak is in B0 with both microbatches in flight: at linear_bwd_weight h0, logits0, h1, logits1; at
  // linear_bwd_input logits0, dh0, h1, logits1 (h0's last use was linear_bwd_weight): equal totals.
  const int64_t transient = 2 * kHBytes + 2 * kLogitsBytes;
  EXPECT_EQ(kDhBytes, kHBytes);
  EXPECT_EQ(r.memory.peakLiveBytes, wholeStep + transient);
  EXPECT_EQ(r.memory.arenaHighWaterBytes, b.arena);  // slot 1's instances are the arena's end
}

class SlotLoaderTest : public ::testing::Test {
protected:
  void expectError(const std::function<void(PlanBuilder&)>& mutate, const std::vector<std::string>& parts) {
    PlanBuilder b = gpipe(/*slotted=*/true);
    mutate(b);
    StatusOr<Plan> p = parse(b);
    ASSERT_FALSE(p.isOk()) << "expected an error containing '" << parts[0] << "'";
    for (const std::string& part : parts)
      EXPECT_NE(p.status().message().find(part), std::string::npos) << part << " in: " << p.status().message();
  }
  static json& buffer(PlanBuilder& b, int64_t id) { return b.program["buffers"][size_t(id)]; }
};

TEST_F(SlotLoaderTest, ValidSlottedPlanLoads) {
  auto p = parse(gpipe(/*slotted=*/true));
  ASSERT_TRUE(p.isOk()) << p.status().message();
  const Program& prog = p->programs[0];
  EXPECT_EQ(prog.buffers[size_t(kH)].instances(), 2);
  EXPECT_EQ(prog.buffers[size_t(kH)].offsetAt(0), prog.buffers[size_t(kH)].offset);
  EXPECT_EQ(prog.buffers[size_t(kLoss)].instances(), 1);
  EXPECT_EQ(prog.actions[2].slot, 1);
  EXPECT_EQ(prog.actions[1].slot, 0);
}

TEST_F(SlotLoaderTest, SlotOffsetErrors) {
  expectError([](PlanBuilder& b) { buffer(b, kH)["slot_offsets"] = {buffer(b, kH)["offset"]}; },
              {"program-0.json", "buffers[10].slot_offsets", "at least 2 instances"});
  expectError([](PlanBuilder& b) { buffer(b, kH)["slot_offsets"][0] = 64 * 1000; },
              {"buffers[10].slot_offsets[0]", "expected the buffer's offset"});
  expectError([](PlanBuilder& b) { buffer(b, kH)["slot_offsets"][1] = 65; },
              {"buffers[10].slot_offsets[1]", "not a multiple of 64"});
  expectError([](PlanBuilder& b) { buffer(b, kH)["slot_offsets"][1] = b.arena; },
              {"buffers[10].slot_offsets[1]", "instance 1 of buffer \"h\"", "extends past arena_bytes"});
  expectError([](PlanBuilder& b) { buffer(b, kH)["slot_offsets"][1] = "x"; }, {"buffers[10].slot_offsets"});
  expectError([](PlanBuilder& b) { buffer(b, kWte)["slot_offsets"] = {0, 64 * 1000}; },
              {"buffers[0].slot_offsets", "a \"param\" buffer cannot have slots"});
}

// The plan with every slotted buffer's slot_offsets rewritten as a row of the program's slot_deltas (what
// the compiler writes): one row per distinct pattern.
PlanBuilder withSlotDeltas(PlanBuilder b) {
  json rows = json::array();
  for (json& buf : b.program["buffers"]) {
    if (!buf.contains("slot_offsets")) continue;
    json row = json::array();
    for (const json& o : buf["slot_offsets"]) row.push_back(int64_t(o) - int64_t(buf["offset"]));
    size_t r = 0;
    while (r < rows.size() && rows[r] != row) ++r;
    if (r == rows.size()) rows.push_back(row);
    buf.erase("slot_offsets");
    buf["slot_delta"] = r;
  }
  b.program["slot_deltas"] = rows;
  return b;
}

TEST_F(SlotLoaderTest, SlotDeltasGiveTheSameInstances) {
  auto explicitOffsets = parse(gpipe(/*slotted=*/true));
  auto deltas = parse(withSlotDeltas(gpipe(/*slotted=*/true)));
  ASSERT_TRUE(explicitOffsets.isOk()) << explicitOffsets.status().message();
  ASSERT_TRUE(deltas.isOk()) << deltas.status().message();
  ASSERT_EQ(explicitOffsets->programs[0].buffers.size(), deltas->programs[0].buffers.size());
  int64_t slotted = 0;
  for (size_t i = 0; i < deltas->programs[0].buffers.size(); ++i) {
    EXPECT_EQ(explicitOffsets->programs[0].buffers[i].slotOffsets, deltas->programs[0].buffers[i].slotOffsets) << i;
    slotted += deltas->programs[0].buffers[i].instances() > 1;
  }
  EXPECT_EQ(slotted, 5);
  // And the same run.
  const Trained a = train(gpipe(/*slotted=*/true), 2), b = train(withSlotDeltas(gpipe(/*slotted=*/true)), 2);
  EXPECT_EQ(a.wte, b.wte);
  EXPECT_EQ(a.loss, b.loss);
}

TEST_F(SlotLoaderTest, SlotDeltaErrors) {
  auto with = [&](std::function<void(PlanBuilder&)> mutate, const std::vector<std::string>& parts) {
    expectError(
        [&](PlanBuilder& b) {
          b = withSlotDeltas(b);
          mutate(b);
        },
        parts);
  };
  with([](PlanBuilder& b) { buffer(b, kH)["slot_delta"] = 9; },
       {"program-0.json", "buffers[10].slot_delta", "row 9 of \"slot_deltas\" does not exist"});
  with([](PlanBuilder& b) { buffer(b, kH)["slot_delta"] = -1; }, {"buffers[10].slot_delta"});
  with([](PlanBuilder& b) { buffer(b, kH)["slot_offsets"] = {buffer(b, kH)["offset"], 0}; },
       {"buffers[10].slot_delta", "not both"});
  with([](PlanBuilder& b) { b.program["slot_deltas"][0] = {0}; }, {"slot_deltas[0]", "at least 2 instances"});
  with([](PlanBuilder& b) { b.program["slot_deltas"][0][0] = 64; }, {"slot_deltas[0][0]", "expected 0"});
  with([](PlanBuilder& b) { b.program["slot_deltas"][0][1] = 65; }, {"slot_delta", "not a multiple of 64"});
  // Huge, NaN-like and non-integer deltas are refused before anything is added.
  with([](PlanBuilder& b) { b.program["slot_deltas"][0][1] = int64_t(1) << 62; }, {"slot_deltas[0][1]"});
  with([](PlanBuilder& b) { b.program["slot_deltas"][0][1] = 1.5; }, {"slot_deltas[0][1]"});
  with([](PlanBuilder& b) { b.program["slot_deltas"] = json::array(); }, {"slot_deltas", "at least one row"});
  with([](PlanBuilder& b) { b.program["slot_deltas"] = 3; }, {"slot_deltas"});
  // A delta that puts an instance before the arena's start or past its end.
  with([](PlanBuilder& b) { b.program["slot_deltas"][0][1] = -int64_t(buffer(b, kIds)["offset"]) - 64; },
       {"slot_delta", "instance 1 of buffer", "extends past arena_bytes"});
  with([](PlanBuilder& b) { b.program["slot_deltas"][0][1] = b.arena; },
       {"slot_delta", "instance 1 of buffer", "extends past arena_bytes"});
}

TEST_F(SlotLoaderTest, ActionSlotErrors) {
  expectError([](PlanBuilder& b) { b.program["actions"][2]["slot"] = 2; },
              {"actions[2].slot", "slot 2 of subroutine \"forward\"", "buffer 8 (\"ids\") has 2 slot_offsets"});
  expectError([](PlanBuilder& b) { b.program["actions"][2]["slot"] = -1; }, {"actions[2].slot"});
  expectError([](PlanBuilder& b) { b.program["actions"][2]["lane"] = 1; }, {"actions[2]", "lane"});
  // Slot 1's instance of logits overlapping slot 1's h in linear_fwd (h read, logits written): the alias
  // rule is checked on each slot's instances.
  expectError([](PlanBuilder& b) { buffer(b, kLogits)["slot_offsets"][1] = buffer(b, kH)["slot_offsets"][1]; },
              {"subroutines[1].ops[2].args.y", "overlaps", "in slot 1"});
}

TEST_F(SlotLoaderTest, UnslottedSubroutineRunsInAnySlot) {
  // A subroutine without slotted buffers is the same in every slot (an empty ZB-H1 W).
  PlanBuilder b = gpipe(/*slotted=*/true);
  b.program["actions"].back()["slot"] = 3;  // the optimizer
  auto p = parse(b);
  ASSERT_TRUE(p.isOk()) << p.status().message();
  const Trained slot3 = train(b, 2), slot0 = train(gpipe(/*slotted=*/true), 2);
  EXPECT_EQ(slot3.wte, slot0.wte);
  EXPECT_EQ(slot3.loss, slot0.loss);
}

// The loader checks each (subroutine, slot) pair once and, within it, only the ops and argument pairs
// that a slot can change (planops::SlotChecker); its errors are those of the scan of every op of the
// subroutine in order, each op's instances and then its aliasing, with the first offending pair in
// argument order. The messages are compared whole.
std::string loadError(const PlanBuilder& b) {
  StatusOr<Plan> p = parse(b);
  return p.isOk() ? "(loads)" : p.status().message();
}

// Gives each of `ids` one more instance at the end of the arena.
void addInstance(PlanBuilder& b, std::initializer_list<int64_t> ids) {
  for (int64_t id : ids) {
    json& buf = b.program["buffers"][size_t(id)];
    buf["slot_offsets"].push_back(b.arena);
    b.arena += (int64_t(buf["bytes"]) + 63) / 64 * 64;
  }
  b.program["arena_bytes"] = b.arena;
}

TEST(SlotCheckTest, AliasInALaterSlotNamesTheOpThePairAndTheSlot) {
  PlanBuilder b = gpipe(/*slotted=*/true);
  json& logits = b.program["buffers"][size_t(kLogits)];
  logits["slot_offsets"][1] = b.program["buffers"][size_t(kH)]["slot_offsets"][1];
  EXPECT_EQ(loadError(b), "program-0.json: subroutines[1].ops[2].args.y: buffer 12 (\"logits\") overlaps "
                          "subroutines[1].ops[2].args.x (buffer 10, \"h\") in the arena, and op \"linear_fwd\" "
                          "does not allow that alias (in slot 1)");
}

TEST(SlotCheckTest, TheFirstErrorOfTheOpsInOrderWins) {
  // Slot 2 exists for ids, targets and h but not for logits (op 2, linear_fwd): the instance error of
  // op 2, unless op 1 (embedding_fwd) breaks the alias rule in slot 2 first.
  PlanBuilder b = gpipe(/*slotted=*/true);
  addInstance(b, {kIds, kTargets, kH});
  b.action("forward", 0);
  b.program["actions"].back()["slot"] = 2;
  const std::string action = std::to_string(b.program["actions"].size() - 1);
  EXPECT_EQ(loadError(b), "program-0.json: actions[" + action + "].slot: slot 2 of subroutine \"forward\", but its "
                          "buffer 12 (\"logits\") has 2 slot_offsets");
  b.program["buffers"][size_t(kH)]["slot_offsets"][2] = b.program["buffers"][size_t(kIds)]["slot_offsets"][2];
  EXPECT_EQ(loadError(b), "program-0.json: subroutines[1].ops[1].args.out: buffer 10 (\"h\") overlaps "
                          "subroutines[1].ops[1].args.ids (buffer 8, \"ids\") in the arena, and op "
                          "\"embedding_fwd\" does not allow that alias (in slot 2)");
}

// gpipe plus a subroutine "clear" (subroutines[4]) zeroing n slotted scratch buffers c0..c{n-1}
// (buffers 15..) in slot 1; for each (from, to) of `moves`, c{to}'s instance 1 is moved onto c{from}'s.
PlanBuilder zeroInSlot1(int n, std::initializer_list<std::pair<int, int>> moves) {
  PlanBuilder b = gpipe(/*slotted=*/true);
  std::vector<int64_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(b.buffer("c" + std::to_string(i), "scratch", {16}));
  for (int64_t id : ids) addSlot(b, {id});
  for (auto [from, to] : moves)
    b.program["buffers"][size_t(ids[size_t(to)])]["slot_offsets"][1] =
        b.program["buffers"][size_t(ids[size_t(from)])]["slot_offsets"][1];
  b.op("clear", "fill_zero", {{"x", ids}});
  b.action("clear");
  b.program["actions"].back()["slot"] = 1;
  return b;
}

TEST(SlotCheckTest, FirstOverlappingPairInArgumentOrderForShortAndLongArgLists) {
  // 5 arguments: the pairwise scan; 17: the sweep in offset order. c1 onto c4 and c3 onto c2: both name
  // the pair (x[1], x[4]), the first in argument order, though (x[2], x[3]) comes first in the arena.
  const std::string expected =
      "program-0.json: subroutines[4].ops[0].args.x[4]: buffer 19 (\"c4\") overlaps subroutines[4].ops[0].args.x[1] "
      "(buffer 16, \"c1\") in the arena, and op \"fill_zero\" does not allow that alias (in slot 1)";
  for (int n : {5, 17}) {
    EXPECT_EQ(loadError(zeroInSlot1(n, {})), "(loads)") << n << " arguments";
    EXPECT_EQ(loadError(zeroInSlot1(n, {{4, 1}, {2, 3}})), expected) << n << " arguments";
  }
}

// An asynchronous op in slot 1 (feature "async"): single rank, aligned bytes 64 each: w param, loss metric,
// a slotted activation (instances at 128 and 192), b activation. The action runs `s` in slot 1:
//   0 copy w -> a            a's instance 1 written
//   1 all_reduce [a] token 0 (started: instance 1 live until its wait)
//   2 copy w -> b            b written
//   3 accumulate b into w    b's last use
//   4 copy a -> b            (with `late`: reads a in flight)
//   4|5 wait 0               instance 1's last touch
// `late` adds op 4 before the wait and accumulates b into w again, so the checking mode's poison of the
// in-flight instance reaches w.
PlanBuilder asyncInSlot1(bool late) {
  PlanBuilder p(8, 2, 1, 1);
  const int64_t w = p.buffer("w", "param", {16});
  p.buffer("loss", "metric", {1});
  const int64_t a = p.buffer("a", "activation", {16});
  addSlot(p, {a});  // instance 1 at the end, after b's bytes below
  const int64_t b = p.buffer("b", "activation", {16});
  p.manifest["features"] = {"async"};
  p.program["queues"] = {"compute", "comm"};
  p.op("s", "copy", {{"x", w}, {"y", a}}, {{"n", 16}});
  p.op("s", "all_reduce", {{"x", {a}}}, {{"axis", "dp"}, {"op", "avg"}});
  p.ops("s").back()["token"] = 0;
  p.ops("s").back()["queue"] = "comm";
  p.op("s", "copy", {{"x", w}, {"y", b}}, {{"n", 16}});
  p.op("s", "accumulate", {{"x", b}, {"y", w}}, {{"n", 16}});
  if (late) {
    p.op("s", "copy", {{"x", a}, {"y", b}}, {{"n", 16}});
    p.op("s", "accumulate", {{"x", b}, {"y", w}}, {{"n", 16}});
  }
  p.ops("s").push_back({{"op", "wait"}, {"token", 0}});
  p.action("s");
  p.program["actions"].back()["slot"] = 1;
  return p;
}

TEST(SlotAsyncTest, AnInFlightInstanceIsLiveThroughItsWait) {
  const auto m = testing::measureMemory(asyncInSlot1(/*late=*/false), 1, nullptr, /*validateParameters=*/true);
  ASSERT_TRUE(m.has_value());
  // w and loss (128) + instance 1 of a [0, 4] + b [2, 3]: 256 at position 2 (instance 0 is never touched).
  EXPECT_EQ(m->peakLiveBytes, 256);
  EXPECT_EQ(m->peakPosition, 2);
}

TEST(SlotAsyncTest, CheckingModePoisonsTheSlotsInstance) {
  for (bool check : {false, true}) {
    auto plan = parse(asyncInSlot1(/*late=*/true));
    ASSERT_TRUE(plan.isOk()) << plan.status().message();
    auto backend = makeCpuBackend();
    auto in = Interpreter::create(*plan, 0, *backend);
    ASSERT_TRUE(in.isOk()) << in.status().message();
    (*in)->setCheckAsync(check);
    std::vector<float> w(16, 0.25f);
    ASSERT_TRUE((*in)->writeBuffer(0, w.data()).isOk());
    Status st = (*in)->runStep(0, 0.0, nullptr);
    ASSERT_TRUE(st.isOk()) << st.message();
    ASSERT_TRUE((*in)->readBuffer(0, w.data()).isOk());
    // Unchecked: w = 0.25 + 0.25 + 0.25 (the single-rank average leaves a as it is). Checked: op 4 read
    // the poisoned instance 1 of a, so w is NaN.
    if (check)
      EXPECT_TRUE(std::isnan(w[0])) << w[0];
    else
      EXPECT_EQ(w[0], 0.75f);
  }
}

}  // namespace
}  // namespace llcdist::rt
