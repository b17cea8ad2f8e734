// The measured memory (docs/plan-format.md "Memory"; Interpreter.h MemoryStats, Train.h RunResult): the
// live-bytes peak and the arena high-water mark of hand-written plans against values computed by hand,
// the exact arena allocation, the printed line and the log's "memory" field.
#include "PlanTestUtil.h"

#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Plan.h"

#include <fstream>
#include <sstream>

namespace llcdist::rt {
namespace {

using testing::json;
using testing::measureMemory;
using testing::PlanBuilder;

// Buffers at consecutive 64-aligned offsets (PlanBuilder):
//   id name    kind             dtype shape offset bytes (aligned)
//    0 w       param            f32   [16]     0    64
//    1 loss    metric           f32   [1]     64     4  (64)
//    2 a       activation       f32   [16]   128    64
//    3 b       activation       bf16  [16]   192    32  (64)
//    4 c       scratch          f32   [16]   256    64
//    5 d       activation       f32   [40]   320   160  (192)
//    6 unused  activation       f32   [64]   512   256      never touched
//    7 e       activation       f32   [16]   768    64      ends at the arena's end: 832
// Two subroutines, one action each; op positions in execution order:
//   0 zero [a]                  a written
//   1 add a + w -> c            c written
//   2 cast c -> b               b written; c's last use
//   3 zero [d]                  d written, last use
//   4 accumulate b into e       e is read before any write: live for the whole step
//   5 add b + a -> a            a's and b's last use
// Every buffer here holds one value per step, so its lifetime is [first write, last use] (e: the whole
// step). Live (aligned) bytes: whole step w 64 + loss 64 + e 64 = 192; a [0,5], c [1,2], b [2,5], d [3,3]:
//   position 0: 192 + 64 = 256      1: 192 + 64 + 64 = 320       2: 192 + 3·64 = 384
//   position 3: 192 + 64 + 64 + 192 = 512 (peak)                 4, 5: 192 + 64 + 64 = 320
PlanBuilder handPlan() {
  PlanBuilder p(8, 2, 1, 1);
  const int64_t w = p.buffer("w", "param", {16});
  p.buffer("loss", "metric", {1});
  const int64_t a = p.buffer("a", "activation", {16});
  const int64_t b = p.buffer("b", "activation", {16}, "bf16");
  const int64_t c = p.buffer("c", "scratch", {16});
  const int64_t d = p.buffer("d", "activation", {40});
  p.buffer("unused", "activation", {64});
  const int64_t e = p.buffer("e", "activation", {16});
  p.op("first", "fill_zero", {{"x", {a}}});
  p.op("first", "add", {{"a", a}, {"b", w}, {"y", c}}, {{"n", 16}});
  p.op("first", "cast", {{"x", c}, {"y", b}}, {{"n", 16}});
  p.op("second", "fill_zero", {{"x", {d}}});
  p.op("second", "accumulate", {{"x", b}, {"y", e}}, {{"n", 16}});
  p.op("second", "add", {{"a", b}, {"b", a}, {"y", a}}, {{"n", 16}});
  p.action("first");
  p.action("second");
  return p;
}



TEST(MemoryTest, HandComputedPeakAndHighWater) {
  int64_t allocated = 0;
  const auto m = measureMemory(handPlan(), 2, &allocated);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->arenaBytes, 832);
  EXPECT_EQ(allocated, 832);  // the CPU backend allocates exactly arena_bytes
  EXPECT_EQ(m->opsExecuted, 6);
  EXPECT_EQ(m->peakLiveBytes, 512);
  EXPECT_EQ(m->peakPosition, 3);
  EXPECT_EQ(m->arenaHighWaterBytes, 832);  // e, touched, ends at the arena's end
  EXPECT_EQ(m->stagingBytes, 16 * 4);      // b (bf16) as an f32 temporary in accumulate / add
}

TEST(MemoryTest, UntouchedBuffersAndWholeStepKinds) {
  // An untouched optimizer_state buffer at the arena's end: live for the whole step (+64), but the ops
  // never reach it, so the high-water mark stays at e's end (832) below the arena (896).
  PlanBuilder p = handPlan();
  p.buffer("state", "optimizer_state", {16});
  const auto m = measureMemory(p);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->arenaBytes, 896);
  EXPECT_EQ(m->arenaHighWaterBytes, 832);
  EXPECT_EQ(m->peakLiveBytes, 512 + 64);
  EXPECT_EQ(m->peakPosition, 3);
  // The same plan as an untouched activation: never live.
  p.program["buffers"].back()["kind"] = "activation";
  const auto m2 = measureMemory(p);
  ASSERT_TRUE(m2.has_value());
  EXPECT_EQ(m2->peakLiveBytes, 512);
  EXPECT_EQ(m2->arenaHighWaterBytes, 832);
}

TEST(MemoryTest, AccumulateFalseOverwritesInsteadOfReading) {
  // x [8] (64), big [64] (256), db [4] (64), loss (64). linear_bwd_bias's db role is read-write, but with
  // accumulate false it is only written: db lives from position 1, not from the step's start.
  PlanBuilder p(8, 2, 1, 1);
  const int64_t x = p.buffer("x", "activation", {8});
  const int64_t big = p.buffer("big", "activation", {64});
  const int64_t db = p.buffer("db", "activation", {4});
  p.buffer("loss", "metric", {1});
  p.op("s", "fill_zero", {{"x", {big, x}}});
  p.op("s", "linear_bwd_bias", {{"dy", x}, {"db", db}}, {{"M", 2}, {"N", 4}, {"accumulate", false}});
  p.op("s", "linear_bwd_bias", {{"dy", x}, {"db", db}}, {{"M", 2}, {"N", 4}, {"accumulate", true}});
  p.action("s");
  const auto m = measureMemory(p);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->peakLiveBytes, 64 + 64 + 256);  // position 0: loss, x, big (db not yet live)
  EXPECT_EQ(m->peakPosition, 0);
  // With accumulate true first, db is read before it is written: live for the whole step.
  p.ops("s")[1]["attrs"]["accumulate"] = true;
  const auto m2 = measureMemory(p);
  ASSERT_TRUE(m2.has_value());
  EXPECT_EQ(m2->peakLiveBytes, 64 + 64 + 256 + 64);
}

TEST(MemoryTest, EachValueIsItsOwnLifetime) {
  // Gradient-accumulation shape: x and z are rewritten by every microbatch's actions; between two
  // microbatches (position 3) neither holds a value anyone reads, so only `big` and the loss are live.
  //   0 zero [x]   1 zero [z]   2 accumulate x into z   3 zero [big]   4 zero [x]   5 zero [z]   6 accumulate
  // Lifetimes: x [0,2] [4,6], z [1,2] [5,6], big [3,3]. Live: loss 64 + {64, 128, 128, 256, 64, 128, 128}.
  PlanBuilder p(8, 2, 1, 1);
  const int64_t x = p.buffer("x", "activation", {16});
  const int64_t z = p.buffer("z", "activation", {16});
  const int64_t big = p.buffer("big", "scratch", {64});
  p.buffer("loss", "metric", {1});
  p.op("fwd", "fill_zero", {{"x", {x}}});
  p.op("bwd", "fill_zero", {{"x", {z}}});
  p.op("bwd", "accumulate", {{"x", x}, {"y", z}}, {{"n", 16}});
  p.op("mid", "fill_zero", {{"x", {big}}});
  for (const char* a : {"fwd", "bwd", "mid", "fwd", "bwd"}) p.action(a);
  const auto m = measureMemory(p);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->opsExecuted, 7);
  EXPECT_EQ(m->peakLiveBytes, 64 + 256);  // not 64 + 64 + 64 + 256: x and z are dead at position 3
  EXPECT_EQ(m->peakPosition, 3);
  // A value read before the step writes it comes from the previous step: z accumulated without a zero
  // is live from position 0 and, after the step's last write, to the end of the step.
  p.ops("bwd").erase(0);
  const auto carried = measureMemory(p);
  ASSERT_TRUE(carried.has_value());
  EXPECT_EQ(carried->peakLiveBytes, 64 + 64 + 256);  // position 2 (mid): loss, z, big
}

class MemoryTrainTest : public testing::TrainFixture {
protected:
  MemoryTrainTest() : TrainFixture(1) {}
};

TEST_F(MemoryTrainTest, RunReportsPrintsAndLogsTheMeasurement) {
  RunOptions o = options(planDir(handPlan()), 3);
  o.quiet = false;
  o.logJson = path("log.jsonl");
  std::ostringstream progress;
  RunResult res;
  Status s = runTraining(o, progress, &res);
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(res.arenaBytes, std::vector<int64_t>{832});
  EXPECT_EQ(res.arenaHighWaterBytes, std::vector<int64_t>{832});
  EXPECT_EQ(res.measuredPeakLiveBytes, std::vector<int64_t>{512});
  EXPECT_EQ(res.peakDeviceBytes, 832);
  const std::string text = progress.str();
  EXPECT_NE(text.find("\nmemory: rank 0 arena 832 bytes, touched up to 832, live peak 512\n"), std::string::npos)
      << text;
  // The last log record (only) carries the memory field, indexed by rank.
  std::ifstream log(o.logJson);
  std::string line;
  std::vector<json> records;
  while (std::getline(log, line)) records.push_back(json::parse(line));
  ASSERT_EQ(records.size(), 3u);
  EXPECT_FALSE(records[0].contains("memory"));
  EXPECT_FALSE(records[1].contains("memory"));
  ASSERT_TRUE(records[2].contains("memory")) << records[2].dump();
  EXPECT_EQ(records[2]["memory"],
            json({{"arena_bytes", {832}},
                  {"arena_high_water_bytes", {832}},
                  {"peak_live_bytes", {512}},
                  {"peak_device_bytes", {832}}}));  // the CPU backend allocates its arena only
  EXPECT_EQ(res.devicePeakBytes, std::vector<int64_t>{832});
  EXPECT_EQ(text.find("device memory:"), std::string::npos) << text;  // nothing beside the arena
  EXPECT_EQ(records[2]["step"], 2);
  // No step, no measurement and no line.
  o.steps = 0;
  o.logJson.clear();
  std::ostringstream none;
  ASSERT_TRUE(runTraining(o, none, &res).isOk());
  EXPECT_EQ(none.str().find("memory:"), std::string::npos) << none.str();
  EXPECT_EQ(res.arenaBytes, std::vector<int64_t>{832});
  EXPECT_EQ(res.measuredPeakLiveBytes, std::vector<int64_t>{0});
}

TEST_F(MemoryTrainTest, MultiRankLinesAreCompactWhenTheRanksAgree) {
  PlanBuilder p = handPlan();
  p.manifest["mesh"]["dp"] = 3;
  p.manifest["batch"]["dp"] = 3;
  p.manifest["batch"]["global_batch"] = 3;
  p.manifest["programs"][0]["ranks"] = {0, 1, 2};
  RunOptions o = options(planDir(p), 2);
  o.quiet = false;
  o.logJson = path("log.jsonl");
  std::ostringstream progress;
  RunResult res;
  Status s = runTraining(o, progress, &res);
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(res.arenaBytes, (std::vector<int64_t>{832, 832, 832}));
  EXPECT_EQ(res.arenaHighWaterBytes, (std::vector<int64_t>{832, 832, 832}));
  EXPECT_EQ(res.measuredPeakLiveBytes, (std::vector<int64_t>{512, 512, 512}));
  const std::string text = progress.str();
  EXPECT_NE(text.find("\nmemory: ranks 0-2 arena 832 bytes, touched up to 832, live peak 512\n"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("memory: rank "), std::string::npos) << text;
  std::ifstream log(o.logJson);
  std::string line, last;
  while (std::getline(log, line)) last = line;
  EXPECT_EQ(json::parse(last)["memory"]["peak_live_bytes"], json({512, 512, 512})) << last;
}

}  // namespace
}  // namespace llcdist::rt
