// The interpreter's dispatch beyond the op cases (those are the backend conformance suite's,
// runtime/test/conformance/OpCases.cpp): kernel errors named by op and location, one channel per
// collective group, and the CPU backend's own streams, events and single-rank collectives.
#include "PlanTestUtil.h"
#include "TestUtil.h"

#include "llcdist/runtime/Bf16.h"
#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Kernels.h"
#include "llcdist/runtime/Plan.h"

#include <cstring>
#include <functional>
#include <set>

namespace llcdist::rt {
namespace {

using testing::json;
namespace sc = schema;

// Host copies of an op's buffers by role.
TEST(InterpreterDispatchTest, KernelErrorsNameOpAndLoc) {
  // An embedding id outside [0, V): the kernel's error gets the op index, name and loc.
  testing::PlanBuilder b(8, 3, 2, 2);
  const int64_t ids = b.buffer("ids", "input", {4}, "i32"), table = b.buffer("t", "param", {24}),
                out = b.buffer("o", "activation", {16});
  b.op("s", "fill_zero", {{"x", json::array({out})}});
  b.op("s", "embedding_fwd", {{"ids", ids}, {"table", table}, {"out", out}}, {{"M", 4}, {"V", 6}, {"H", 4}}, "h.0.wte");
  b.action("s");
  Plan plan;
  plan.manifest = parseManifest(b.manifest.dump(), "manifest.json").value();
  auto p = parseProgram(b.program.dump(), "program-0.json", plan.manifest);
  ASSERT_TRUE(p.isOk()) << p.status().message();
  plan.programs.push_back(std::move(p).value());
  auto backend = makeCpuBackend();
  auto interp = Interpreter::create(plan, 0, *backend);
  ASSERT_TRUE(interp.isOk());
  const int32_t bad[4] = {0, 1, 7, 2};
  ASSERT_TRUE((*interp)->writeBuffer(ids, bad).isOk());
  Status s = (*interp)->runStep(0, 0.0, nullptr);
  ASSERT_FALSE(s.isOk());
  for (const char* part : {"step 0", "program-0.json", "subroutine 's' op 1", "embedding_fwd", "loc 'h.0.wte'"})
    EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
  EXPECT_EQ(backend->peakAllocatedBytes(), plan.programs[0].arenaBytes);
}

// create() makes one channel per distinct group of the program's collectives (here rank 0's dp group
// and its tp group, used by four collectives), before any step.
TEST(InterpreterDispatchTest, ChannelsAreCreatedOncePerGroup) {
  testing::PlanBuilder b(8, 3, 2, 2);
  b.manifest["batch"]["dp"] = 2;
  b.manifest["batch"]["global_batch"] = 2 * 2 * 2;
  b.manifest["mesh"] = {{"dp", 2}, {"tp", 2}, {"pp", 1}};
  b.manifest["programs"][0]["ranks"] = {0, 1, 2, 3};
  const int64_t x = b.buffer("x", "activation", {4}), y = b.buffer("y", "activation", {8});
  b.op("s", "all_reduce", {{"x", json::array({x})}}, {{"axis", "dp"}, {"op", "sum"}});
  b.op("s", "all_reduce", {{"x", json::array({x})}}, {{"axis", "tp"}, {"op", "sum"}});
  b.op("s", "all_gather", {{"x", x}, {"y", y}}, {{"axis", "tp"}, {"outer", 1}, {"inner", 4}});
  b.op("s", "all_reduce", {{"x", json::array({x})}}, {{"axis", "dp"}, {"op", "avg"}});
  b.action("s");
  Plan plan;
  auto m = parseManifest(b.manifest.dump(), "manifest.json");
  ASSERT_TRUE(m.isOk()) << m.status().message();
  plan.manifest = std::move(m).value();
  auto p = parseProgram(b.program.dump(), "program-0.json", plan.manifest);
  ASSERT_TRUE(p.isOk()) << p.status().message();
  plan.programs.push_back(std::move(p).value());
  auto backend = makeCpuBackend();
  auto interp = Interpreter::create(plan, 0, *backend, 0);
  ASSERT_TRUE(interp.isOk()) << interp.status().message();
  EXPECT_EQ((*interp)->numChannels(), 2u);
}

TEST(CpuBackendTest, StreamsEventsAndSingleRankCollectives) {
  auto be = makeCpuBackend();
  ASSERT_TRUE(be->allocateArena(100).isOk());
  EXPECT_FALSE(be->allocateArena(100).isOk());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(be->arenaAt(0)) % sc::kArenaAlignment, 0u);
  EXPECT_EQ(be->peakAllocatedBytes(), 128);
  auto s = be->createStream();
  auto e = be->createEvent();
  ASSERT_TRUE(s.isOk() && e.isOk());
  EXPECT_TRUE(be->recordEvent(*s, *e).isOk());
  EXPECT_TRUE(be->waitEvent(Stream{0}, *e).isOk());
  EXPECT_FALSE(be->waitEvent(Stream{7}, *e).isOk());
  EXPECT_FALSE(be->copyToDevice(*s, 96, "12345678", 8).isOk());  // past the 100-byte arena
  float* buf = reinterpret_cast<float*>(be->arenaAt(0));
  buf[0] = 3.0f;
  auto self = be->createChannel({0});
  auto pair = be->createChannel({0, 1});
  ASSERT_TRUE(self.isOk() && pair.isOk());
  EXPECT_FALSE(be->createChannel({1, 2}).isOk());  // rank 0 is no member
  auto h = be->allReduceAsync(*s, buf, 1, ReduceOp::kSum, *self);
  ASSERT_TRUE(h.isOk());
  EXPECT_TRUE(be->waitCollective(*s, *h).isOk());
  EXPECT_EQ(buf[0], 3.0f);
  // On a created stream (a worker thread) a failing collective's error comes at its wait on the
  // default stream, and synchronize() reports it too; on the default stream it is the call's.
  auto bad = be->allReduceAsync(*s, buf, 1, ReduceOp::kSum, *pair);
  ASSERT_TRUE(bad.isOk());
  const Status waited = be->waitCollective(Stream{0}, *bad);
  ASSERT_FALSE(waited.isOk());
  EXPECT_NE(waited.message().find("no communicator"), std::string::npos);
  EXPECT_FALSE(be->synchronize().isOk());
  EXPECT_TRUE(be->synchronize().isOk());  // reported once
  auto badNow = be->allReduceAsync(Stream{0}, buf, 1, ReduceOp::kSum, *pair);
  ASSERT_FALSE(badNow.isOk());
  EXPECT_NE(badNow.status().message().find("no communicator"), std::string::npos);
  auto unknown = be->allReduceAsync(*s, buf, 1, ReduceOp::kSum, Channel{7});
  ASSERT_FALSE(unknown.isOk());
  EXPECT_NE(unknown.status().message().find("unknown channel 7"), std::string::npos);
  auto g = be->allGatherAsync(*s, buf, buf + 4, 1, 1, 1, CommDType::kF32, *self);
  ASSERT_TRUE(g.isOk());
  ASSERT_TRUE(be->synchronize().isOk());
  EXPECT_EQ(buf[4], 3.0f);
}

}  // namespace
}  // namespace llcdist::rt
