//===- ScheduleTest.cpp - pipeline schedules as data ----------------------===//
//
// Every expected number here is derived by hand in the comment beside it,
// never copied from the code's output.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Schedule/Render.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>

using namespace llcdist::schedule;

namespace {

Schedule gen(ScheduleKind kind, int64_t p, int64_t m, int64_t v = 1) {
  Expected<Schedule> s = generateSchedule({p, m, v, kind});
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  return s.ok() ? *s : Schedule();
}

SimResult sim(const Schedule &s, const CostModel &c = CostModel()) {
  Expected<SimResult> r = simulate(s, c);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : SimResult();
}

Schedule parse(const char *text, int64_t m, int64_t v = 1) {
  Expected<Schedule> s = parseSchedule(text, m, v);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  return s.ok() ? *s : Schedule();
}

const std::pair<int64_t, int64_t> kPM[] = {{2, 4}, {4, 8}, {4, 16}, {8, 8}};

} // namespace

//===----------------------------------------------------------------------===//
// Bubbles
//===----------------------------------------------------------------------===//

// GPipe and 1F1B with F = B = 1: the step takes 2(m + p - 1) (the first
// forward needs p-1 hops to reach the last stage, the last backward p-1 hops
// back), every stage computes 2m, so idle = 2(p-1) on every stage:
// idle/busy = (p-1)/m and idle/makespan = (p-1)/(m+p-1), exactly. The ratios
// of small integers are computed as correctly rounded doubles on both sides,
// so EXPECT_EQ is exact equality.
TEST(ScheduleBubble, GPipeAnd1F1BMatchAnalytic) {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB})
    for (auto [p, m] : kPM) {
      SCOPED_TRACE(std::string(kindName(kind)) + " p=" + std::to_string(p) +
                   " m=" + std::to_string(m));
      SimResult r = sim(gen(kind, p, m));
      EXPECT_EQ(r.makespan, 2.0 * (m + p - 1));
      EXPECT_EQ(r.bubbleOverIdeal, double(p - 1) / double(m));
      EXPECT_EQ(r.idleFraction, double(p - 1) / double(m + p - 1));
      ASSERT_EQ(r.perStage.size(), (size_t)p);
      for (const StageStats &s : r.perStage) {
        EXPECT_EQ(s.idle, 2.0 * (p - 1));
        EXPECT_EQ(s.bubbleOverIdeal, double(p - 1) / double(m));
        EXPECT_EQ(s.idleFraction, double(p - 1) / double(m + p - 1));
      }
      EXPECT_EQ(analyticBubbleOverIdeal({p, m, 1, kind}),
                double(p - 1) / double(m));
    }
}

// The ratio is independent of F and B as long as they are uniform: with
// F = 1, B = 2 the idle is 3(p-1) and the busy time 3m.
TEST(ScheduleBubble, OneFOneBRatioIndependentOfCosts) {
  SimResult r = sim(gen(ScheduleKind::OneFOneB, 4, 8), {1, 2, 0, 0});
  EXPECT_EQ(r.makespan, 3.0 * (8 + 4 - 1));
  for (const StageStats &s : r.perStage)
    EXPECT_EQ(s.idle, 3.0 * (4 - 1));
  EXPECT_EQ(r.bubbleOverIdeal, 3.0 / 8.0);
}

// Interleaved 1F1B: each chunk action costs F/v, B/v. The warm-up and the
// drain shrink to (p-1)(F+B)/v while the work stays m(F+B), so
// idle/busy = (1/v)(p-1)/m (Narayanan et al. 2021, section 2.2). With v a
// power of two every time is a dyadic rational, so equality is exact.
TEST(ScheduleBubble, InterleavedMatchesAnalytic) {
  for (int64_t v : {2, 4})
    for (auto [p, m] : kPM) {
      SCOPED_TRACE("v=" + std::to_string(v) + " p=" + std::to_string(p) +
                   " m=" + std::to_string(m));
      SimResult r = sim(gen(ScheduleKind::Interleaved1F1B, p, m, v));
      EXPECT_EQ(r.makespan, 2.0 * m + 2.0 * (p - 1) / double(v));
      EXPECT_EQ(r.bubbleOverIdeal, double(p - 1) / double(v * m));
      for (const StageStats &s : r.perStage)
        EXPECT_EQ(s.bubbleOverIdeal, double(p - 1) / double(v * m));
      EXPECT_EQ(analyticBubbleOverIdeal({p, m, v, ScheduleKind::Interleaved1F1B}),
                double(p - 1) / double(v * m));
    }
}

// ZB-H1 with F = B = W = 1 and m >= p. Stage s's first backward can start
// only when microbatch 0 has gone down p stages (p) and its input gradient
// back up p-1-s stages: at 2p-1-s. Before that stage s has run its p-s
// warm-up forwards from time s, so it idled s + (p-1-s) = p-1. After that
// the schedule keeps every stage busy to the end (stage s holds back its
// first s weight gradients for the cool-down), so the step takes
// 3m + p - 1 and every stage idles p-1 = (p-1)(F+B-W), Qi et al.'s ZB-H1
// bubble (1F1B's is (p-1)(F+B+W) = 3(p-1) for the same work).
// bubbleOverIdeal = (p-1)/(3m), a third of 1F1B's (p-1)/m.
TEST(ScheduleBubble, ZBH1BeatsOneFOneBAndMatchesPaper) {
  for (auto [p, m] : kPM) {
    SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
    SimResult zb = sim(gen(ScheduleKind::ZBH1, p, m), {1, 1, 1, 0});
    // The same work in 1F1B: the backward does both gradients (B = 2).
    SimResult ofob = sim(gen(ScheduleKind::OneFOneB, p, m), {1, 2, 0, 0});
    SimResult ofobUnit = sim(gen(ScheduleKind::OneFOneB, p, m));
    EXPECT_EQ(zb.makespan, 3.0 * m + p - 1);
    for (const StageStats &s : zb.perStage)
      EXPECT_EQ(s.idle, double(p - 1));
    EXPECT_EQ(zb.bubbleOverIdeal, double(p - 1) / double(3 * m));
    EXPECT_EQ(zb.idleFraction, double(p - 1) / double(3 * m + p - 1));
    EXPECT_LT(zb.bubbleOverIdeal, ofob.bubbleOverIdeal);
    EXPECT_LT(zb.bubbleOverIdeal, ofobUnit.bubbleOverIdeal);
    EXPECT_LT(zb.makespan, ofob.makespan);
    EXPECT_EQ(analyticBubbleOverIdeal({p, m, 1, ScheduleKind::ZBH1}),
              double(p - 1) / double(3 * m));
  }
}

// Other costs, m >= p. When W <= F the cool-down leaves stage 0 (p-1)(F-W)
// idle besides the (p-1)B before its first backward: (p-1)(F+B-W) in all.
// When W > F the gap cannot go negative: the idle stays (p-1)B.
TEST(ScheduleBubble, ZBH1OtherCosts) {
  struct Case {
    CostModel c;
    double idlePerHop;
  } cases[] = {{{2, 2, 1, 0}, 3.0},   // F+B-W = 3
               {{1, 2, 1, 0}, 2.0},   // F+B-W = 2
               {{2, 1, 1, 0}, 2.0},   // F+B-W = 2
               {{1, 1, 0.5, 0}, 1.5}, // F+B-W = 1.5
               {{1, 1, 2, 0}, 1.0}};  // W > F: B = 1
  for (const Case &k : cases)
    for (auto [p, m] : kPM) {
      SimResult r = sim(gen(ScheduleKind::ZBH1, p, m), k.c);
      double worst = 0;
      for (const StageStats &s : r.perStage)
        worst = std::max(worst, s.idle);
      EXPECT_EQ(worst, (p - 1) * k.idlePerHop)
          << "F=" << k.c.forward << " B=" << k.c.backward
          << " W=" << k.c.weight << " p=" << p << " m=" << m;
      EXPECT_EQ(analyticBubbleOverIdeal({p, m, 1, ScheduleKind::ZBH1}, k.c),
                (p - 1) * k.idlePerHop /
                    (m * (k.c.forward + k.c.backward + k.c.weight)));
    }
}

// p = 1 has no bubble; a point-to-point latency L adds to each stage hop.
// GPipe p = 2, m = 1, F = B = 1, L = 0.5: F0 on S0 [0,1], on S1 [1.5,2.5],
// B0 on S1 [2.5,3.5], on S0 [4,5].
TEST(ScheduleBubble, SingleStageAndLatency) {
  SimResult one = sim(gen(ScheduleKind::OneFOneB, 1, 5));
  EXPECT_EQ(one.makespan, 10.0);
  EXPECT_EQ(one.bubbleOverIdeal, 0.0);
  SimResult lat = sim(gen(ScheduleKind::GPipe, 2, 1), {1, 1, 1, 0.5});
  EXPECT_EQ(lat.makespan, 5.0);
  ASSERT_EQ(lat.timeline[1].size(), 2u);
  EXPECT_EQ(lat.timeline[1][0].start, 1.5);
  EXPECT_EQ(lat.timeline[0][1].start, 4.0);
}

//===----------------------------------------------------------------------===//
// Memory: microbatches in flight
//===----------------------------------------------------------------------===//

// 1F1B: stage s runs p-1-s warm-up forwards and one more before its first
// backward, then never holds more: min(p-s, m). GPipe holds all m.
// ZB-H1 keeps 1F1B's F/B order, so the same; its stage s holds back s
// weight gradients, plus the one just computed: s+1 pending W at most.
TEST(SchedulePeak, InFlight) {
  for (int64_t p : {1, 2, 4, 8})
    for (int64_t m : {1, 2, 3, 4, 8, 16}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      std::vector<int64_t> ofob = peakInFlight(gen(ScheduleKind::OneFOneB, p, m));
      std::vector<int64_t> gp = peakInFlight(gen(ScheduleKind::GPipe, p, m));
      Schedule zbs = gen(ScheduleKind::ZBH1, p, m);
      std::vector<int64_t> zb = peakInFlight(zbs);
      std::vector<int64_t> zbw = peakPendingWeightGrads(zbs);
      ASSERT_EQ(ofob.size(), (size_t)p);
      for (int64_t s = 0; s < p; ++s) {
        EXPECT_EQ(ofob[s], std::min(p - s, m));
        EXPECT_EQ(gp[s], m);
        EXPECT_EQ(zb[s], std::min(p - s, m));
        EXPECT_EQ(zbw[s], std::min(s + 1, m));
      }
    }
  SimResult r = sim(gen(ScheduleKind::OneFOneB, 4, 8));
  EXPECT_EQ(r.perStage[0].peakInFlight, 4);
  EXPECT_EQ(r.perStage[3].peakInFlight, 1);
}

// Megatron's interleaved warm-up is 2(p-s-1) + (v-1)p chunk forwards, then
// one more before the first backward: p=4, v=2 gives 11, 9, 7, 5 chunk
// activations on stages 0..3 (capped by m*v).
TEST(SchedulePeak, Interleaved) {
  std::vector<int64_t> pk =
      peakInFlight(gen(ScheduleKind::Interleaved1F1B, 4, 8, 2));
  EXPECT_EQ(pk, (std::vector<int64_t>{11, 9, 7, 5}));
  // m = p = 2, v = 2: stage 0 would warm up 2 + 2 = 4 = m*v, all of them.
  pk = peakInFlight(gen(ScheduleKind::Interleaved1F1B, 2, 2, 2));
  EXPECT_EQ(pk, (std::vector<int64_t>{4, 3}));
}

//===----------------------------------------------------------------------===//
// Validation
//===----------------------------------------------------------------------===//

TEST(ScheduleValidate, GeneratedSchedulesAreValid) {
  for (int64_t p = 1; p <= 6; ++p)
    for (int64_t m = 1; m <= 12; ++m) {
      for (ScheduleKind k : {ScheduleKind::GPipe, ScheduleKind::OneFOneB,
                             ScheduleKind::ZBH1}) {
        Status st = validateSchedule(gen(k, p, m));
        EXPECT_TRUE(st.ok()) << kindName(k) << " p=" << p << " m=" << m
                             << ": " << st.error().message;
      }
      if (m % p == 0)
        for (int64_t v = 1; v <= 4; ++v) {
          Status st = validateSchedule(gen(ScheduleKind::Interleaved1F1B, p, m, v));
          EXPECT_TRUE(st.ok()) << "interleaved p=" << p << " m=" << m
                               << " v=" << v << ": " << st.error().message;
        }
    }
}

TEST(ScheduleValidate, HandMadeOneFOneBMatchesGenerator) {
  Schedule hand = parse("F0 F1 B0 B1\nF0 B0 F1 B1\n", 2);
  EXPECT_TRUE(validateSchedule(hand).ok());
  EXPECT_EQ(hand.perStage, gen(ScheduleKind::OneFOneB, 2, 2).perStage);
}

TEST(ScheduleValidate, MissingBackward) {
  Status st = validateSchedule(parse("F0 F1 B0 | F0 B0 F1 B1", 2));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message,
            "stage 0: missing B1 (every stage runs F and B once for each "
            "microbatch (m=2))");
  EXPECT_EQ(st.error().stage, 0);
}

TEST(ScheduleValidate, BackwardBeforeItsForward) {
  Status st = validateSchedule(parse("F0 B1 B0 F1 | F0 B0 F1 B1", 2));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message,
            "stage 0: action #1 (B1) comes before F1 (action #3) on the same "
            "stage; a backward needs its forward's activations");
  EXPECT_EQ(st.error().stage, 0);
  EXPECT_EQ(st.error().actionIndex, 1);
}

// Stage 0 runs F0 then waits in B0 for stage 1's B0; stage 1 first wants
// F1, which stage 0 only produces after its B0: neither can move.
TEST(ScheduleValidate, CyclicWaitBetweenTwoStages) {
  Schedule s = parse("F0 B0 F1 B1 | F1 F0 B0 B1", 2);
  EXPECT_TRUE(validateStructure(s).ok());
  Status st = validateSchedule(s);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message,
            "deadlock: stage 0 action #1 (B0) can never start: it waits for "
            "B0 (stage 1 action #2), queued behind stage 1 action #0 (F1), "
            "which waits for F1 (stage 0 action #2), queued behind stage 0 "
            "action #1 (B0); a cyclic wait between stages 0, 1");
  EXPECT_EQ(st.error().stage, 0);
  EXPECT_EQ(st.error().actionIndex, 1);
  // simulate reports the same error.
  Expected<SimResult> r = simulate(s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, st.error().message);
}

// A three-stage cycle found from a stage outside it names the cycle only.
TEST(ScheduleValidate, CyclicWaitThreeStages) {
  // S1 waits in B0 for S2's B0; S2 waits in F1 for S1's F1 (behind B0).
  // S0 finishes F0 F1 and then waits for S1's B0: it is blocked, not in the
  // cycle.
  Schedule s = parse("F0 F1 B0 B1 | F0 B0 F1 B1 | F1 F0 B0 B1", 2);
  Status st = validateSchedule(s);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message,
            "deadlock: stage 1 action #1 (B0) can never start: it waits for "
            "B0 (stage 2 action #2), queued behind stage 2 action #0 (F1), "
            "which waits for F1 (stage 1 action #2), queued behind stage 1 "
            "action #1 (B0); a cyclic wait between stages 1, 2");
  EXPECT_EQ(st.error().stage, 1);
}

TEST(ScheduleValidate, OtherStructuralErrors) {
  Status dup = validateSchedule(parse("F0 F0 B0 | F0 B0", 1));
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.error().message,
            "stage 0: action #1 (F0) repeats action #0; each action runs once");
  Status range = validateSchedule(parse("F0 F2 B0 | F0 B0", 1));
  ASSERT_FALSE(range.ok());
  EXPECT_EQ(range.error().message,
            "stage 0: action #1 (F2) names microbatch 2, outside [0, 1)");
  // A W makes the schedule split; then every stage needs every W.
  Status noW = validateSchedule(parse("F0 B0 W0 | F0 B0", 1));
  ASSERT_FALSE(noW.ok());
  EXPECT_EQ(noW.error().message,
            "stage 1: missing W0 (every stage runs F, B and W once for each "
            "microbatch (m=1))");
  Status wFirst = validateSchedule(parse("F0 W0 B0 | F0 B0 W0", 1));
  ASSERT_FALSE(wFirst.ok());
  EXPECT_EQ(wFirst.error().message,
            "stage 0: action #1 (W0) comes before B0 (action #2) on the same "
            "stage; a weight gradient needs its backward's output gradient");
  Schedule nosplit = parse("F0 B0 W0", 1);
  nosplit.splitBackward = false;
  Status stray = validateSchedule(nosplit);
  ASSERT_FALSE(stray.ok());
  EXPECT_EQ(stray.error().message,
            "stage 0: action #2 (W0) is a weight-gradient action in a schedule "
            "whose backward is not split");
  Expected<Schedule> bad = parseSchedule("F0 X1", 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message,
            "stage 0: bad action 'X1' (expected F<mb>, B<mb> or W<mb>, "
            "optionally followed by c<chunk>, e.g. F3 or B2c1)");
}

//===----------------------------------------------------------------------===//
// Generator errors
//===----------------------------------------------------------------------===//

TEST(ScheduleGenerate, Errors) {
  Expected<Schedule> e = generateSchedule({0, 4, 1, ScheduleKind::GPipe});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().message, "pipeline stages must be >= 1 (got p=0)");
  e = generateSchedule({2, 0, 1, ScheduleKind::ZBH1});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().message,
            "microbatches must be >= 1 (got m=0); m = global batch / "
            "(micro-batch size x dp)");
  e = generateSchedule({4, 6, 2, ScheduleKind::Interleaved1F1B});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().message,
            "interleaved 1F1B needs the number of microbatches to be a "
            "multiple of the pipeline stages: m=6 is not a multiple of p=4 "
            "(use m=4 or m=8)");
  e = generateSchedule({4, 8, 2, ScheduleKind::OneFOneB});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().message,
            "virtual stages (v=2) apply only to the interleaved schedule, not "
            "1f1b");
  e = generateSchedule({4, 8, 0, ScheduleKind::Interleaved1F1B});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().message, "virtual stages per device must be >= 1 (got v=0)");
  Expected<ScheduleKind> k = parseScheduleKind("zb-h1");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(*k, ScheduleKind::ZBH1);
  k = parseScheduleKind("zbh2");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.error().message,
            "unknown schedule 'zbh2' (expected gpipe, 1f1b, interleaved or "
            "zb-h1)");
}

//===----------------------------------------------------------------------===//
// Output
//===----------------------------------------------------------------------===//

// p = 2, m = 2, 1F1B, F = B = 1. Stage 0 warms up with p-1-0 = 1 forward:
// F0 F1 B0 B1; stage 1 has none: F0 B0 F1 B1.
//   t=0 S0 F0. t=1 S0 F1, S1 F0 (F0 arrived). t=2 S1 B0; S0 waits for it.
//   t=3 S0 B0, S1 F1 (F1 arrived at 2). t=4 S1 B1; S0 waits. t=5 S0 B1.
TEST(ScheduleRender, GanttOneFOneB) {
  SimResult r = sim(gen(ScheduleKind::OneFOneB, 2, 2));
  EXPECT_EQ(renderGantt(r), "S0: F0 F1 .  B0 .  B1\n"
                            "S1: .  F0 B0 F1 B1 .\n");
}

// ZB-H1, p = 2, m = 2, F = B = W = 1. Stage 0 (defers 0 W): F0 F1 B0 W0 B1
// W1; stage 1 (defers 1 W): F0 B0 F1 B1 W0 W1.
//   S1: F0 [1,2] B0 [2,3] F1 [3,4] B1 [4,5] W0 [5,6] W1 [6,7]
//   S0: F0 [0,1] F1 [1,2] idle, B0 [3,4] W0 [4,5] B1 [5,6] W1 [6,7]
// 3m + p - 1 = 7 columns, one idle column per stage.
TEST(ScheduleRender, GanttZBH1) {
  SimResult r = sim(gen(ScheduleKind::ZBH1, 2, 2));
  EXPECT_EQ(renderGantt(r), "S0: F0 F1 .  B0 W0 B1 W1\n"
                            "S1: .  F0 B0 F1 B1 W0 W1\n");
}

// Actions longer than a column show "-" after their label: GPipe p = 2,
// m = 1 with B = 2: S0 F0 [0,1] B0 [4,6]; S1 F0 [1,2] B0 [2,4].
TEST(ScheduleRender, GanttLongActions) {
  SimResult r = sim(gen(ScheduleKind::GPipe, 2, 1), {1, 2, 0, 0});
  EXPECT_EQ(renderGantt(r), "S0: F0 .  .  .  B0 -\n"
                            "S1: .  F0 B0 -  .  .\n");
}

TEST(ScheduleRender, ChromeTrace) {
  SimResult r = sim(gen(ScheduleKind::OneFOneB, 2, 2));
  nlohmann::json j = nlohmann::json::parse(renderChromeTrace(r, 1000.0));
  ASSERT_TRUE(j.contains("traceEvents"));
  int complete = 0;
  bool sawB0onS0 = false;
  for (const auto &e : j["traceEvents"]) {
    if (e["ph"] != "X")
      continue;
    ++complete;
    EXPECT_EQ(e["pid"], 0);
    // Stage 0's B0 runs [3,4] (see GanttOneFOneB): ts 3000 us, dur 1000 us.
    if (e["name"] == "B0" && e["tid"] == 0) {
      sawB0onS0 = true;
      EXPECT_EQ(e["ts"].get<double>(), 3000.0);
      EXPECT_EQ(e["dur"].get<double>(), 1000.0);
      EXPECT_EQ(e["args"]["microbatch"], 0);
    }
  }
  EXPECT_EQ(complete, 8); // 2 stages x 2 microbatches x {F, B}
  EXPECT_TRUE(sawB0onS0);
}
