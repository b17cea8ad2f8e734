// Mistral's sliding-window attention (attr `window` of attention_fwd / _bwd and attention_block_fwd /
// _bwd; Kernels.h: AttentionShape::window, AttentionBlock::window) on the CPU: key j is visible to query
// i iff j <= i and i − j < window (transformers 4.40's MistralForCausalLM masks j <= i − sliding_window).
//  - attentionForward / attentionBackward against a brute force in double (AttentionReference.h: the
//    masked softmax and its analytic backward, nothing shared with the kernels), GQA nh = 4, nkv = 2, S = 16,
//    windows 1, 3, 16 (= S) and 100, separate and packed q, k, v; a window >= S gives the plain causal
//    bits.
//  - the ring's blocks: every rank's ring (cp 2 and 4, Megatron's load-balanced chunks and the
//    contiguous layout) merged by attentionMerge gives the windowed whole-sequence attention, and its
//    blocks' backward shares add up to the whole sequence's gradients, for windows inside a chunk and
//    across chunks; the key range of every row is the brute-force visible set.
//  - the plan: `window` loads and binds (absent: 0), 0, −1, a string or a float is refused naming
//    attrs.window, and an interpreter runs attention_fwd / _bwd with the window through the kernel table.
#include "AttentionReference.h"
#include "PlanTestUtil.h"
#include "PositionRowsUtil.h"
#include "TestUtil.h"

#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Kernels.h"
#include "llcdist/runtime/Plan.h"
#include "llcdist/runtime/Positions.h"
#include "ops/OpDefs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace llcdist::rt {
namespace {

using testing::expectAllClose;
using testing::json;
using testing::randn;
namespace sc = schema;

constexpr int64_t kB = 2, kS = 16, kNh = 4, kNkv = 2, kHd = 8;

// ---- the brute force and the kernels (AttentionReference.h) --------------------------------------------

using testing::sees;
using Result = testing::AttentionResult;
using testing::runAttentionKernels;

class WindowedAttentionTest : public ::testing::TestWithParam<std::tuple<int64_t, bool>> {
protected:
  const int64_t window = std::get<0>(GetParam());
  const bool packed = std::get<1>(GetParam());
  const AttentionShape s{kB, kS, kNh, kNkv, kHd, window};
  const std::vector<float> q = randn(kB * kS * kNh * kHd, 31), k = randn(kB * kS * kNkv * kHd, 32),
                           v = randn(kB * kS * kNkv * kHd, 33), dout = randn(kB * kS * kNh * kHd, 34);
};

TEST_P(WindowedAttentionTest, ForwardAndBackwardMatchTheBruteForce) {
  testing::expectKernelsMatchTheBruteForce(s, packed, q, k, v, dout);
}

// A window >= S masks nothing more than the causal mask: the plain causal bits. A smaller one changes
// the result (every row past the window loses keys).
TEST_P(WindowedAttentionTest, AWindowOfAtLeastSIsTheCausalAttentionBitForBit) {
  const Result got = runAttentionKernels(s, packed, q, k, v, dout);
  const Result causal = runAttentionKernels({kB, kS, kNh, kNkv, kHd}, packed, q, k, v, dout);
  if (window >= kS) {
    EXPECT_EQ(got.out, causal.out);
    EXPECT_EQ(got.lse, causal.lse);
    EXPECT_EQ(got.dq, causal.dq);
    EXPECT_EQ(got.dk, causal.dk);
    EXPECT_EQ(got.dv, causal.dv);
  } else {
    EXPECT_NE(got.out, causal.out);
    EXPECT_NE(got.dk, causal.dk);
  }
}

INSTANTIATE_TEST_SUITE_P(Windows, WindowedAttentionTest,
                         ::testing::Combine(::testing::Values(int64_t(1), int64_t(3), int64_t(16), int64_t(100)),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return "window" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_packed" : "");
                         });

TEST(WindowedAttentionErrors, ANegativeWindowIsRefused) {
  std::vector<float> buf(1024);
  const Status f = attentionForward({1, 4, 2, 1, 4, -1}, buf.data(), buf.data(), buf.data(), buf.data(), buf.data());
  EXPECT_EQ(f.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f.message().find("window -1"), std::string::npos) << f.message();
  AttentionBlock blk{1, 4, 4, 2, 1, 4, 0, 0};
  blk.window = -2;
  const Status b = attentionBlockForward(blk, buf.data(), buf.data(), buf.data(), buf.data(), buf.data());
  EXPECT_EQ(b.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.message().find("window -2"), std::string::npos) << b.message();
}

// ---- the ring's blocks (AttentionReference.h: expectRingIsTheWholeAttention) ---------------------------

// cp, the layout, the window. Chunks of 4 positions: T = 2·cp·4 (load-balanced: rank c holds chunks c and
// 2·cp − 1 − c).
class WindowedRingTest : public ::testing::TestWithParam<std::tuple<int64_t, CpLayout, int64_t>> {};

TEST_P(WindowedRingTest, BlocksAndMergeGiveTheWindowedAttentionAndItsGradients) {
  const auto [n, layout, window] = GetParam();
  constexpr int64_t kChunk = 4;
  int64_t emptyBlocks = 0;
  testing::expectRingIsTheWholeAttention({kB, 2 * n * kChunk, kNh, kNkv, kHd, window}, n, layout, 41, &emptyBlocks);
  // A window inside a chunk leaves some member's rows blind to another's (the empty result, merged
  // as nothing); the causal ring under the load-balanced layout has no such block.
  if (window < kChunk && n == 4) {
    EXPECT_GT(emptyBlocks, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    CpLayoutsAndWindows, WindowedRingTest,
    ::testing::Combine(::testing::Values(int64_t(2), int64_t(4)),
                       ::testing::Values(CpLayout::kLoadBalanced, CpLayout::kContiguous),
                       // inside a chunk (1, 3), one chunk (4), across chunks (6, 11), beyond T (1000)
                       ::testing::Values(int64_t(1), int64_t(3), int64_t(4), int64_t(6), int64_t(11), int64_t(1000))),
    [](const auto& info) {
      return "cp" + std::to_string(std::get<0>(info.param)) + "_" +
             std::string(sc::cpLayoutName(std::get<1>(info.param))) + "_window" +
             std::to_string(std::get<2>(info.param));
    });

// The keys a row sees are exactly the block rows [begin, end) of attentionBlockKeyRange: the positions
// kpos with qpos − window < kpos <= qpos, for every row of every block of rings of cp 2 and 4 in both
// layouts (two runs of positions on each side under load balancing).
TEST(WindowedRingTest, EveryRowsKeyRangeIsItsVisibleSet) {
  for (int64_t n : {2, 4})
    for (CpLayout layout : {CpLayout::kLoadBalanced, CpLayout::kContiguous})
      for (int64_t window : {0, 1, 2, 3, 5, 8, 13, 100}) {
        const int64_t T = 8 * n, S = T / n;
        for (int64_t c = 0; c < n; ++c)
          for (int64_t src = 0; src < n; ++src) {
            const PositionRuns qPos = contextParallelPositions(T, n, c, layout),
                               kvPos = contextParallelPositions(T, n, src, layout);
            const AttentionBlock blk = attentionBlock({1, S, 1, 1, 4, window}, qPos, kvPos);
            for (int64_t i = 0; i < S; ++i) {
              std::vector<int64_t> want;
              for (int64_t j = 0; j < S; ++j)
                if (sees(qPos.at(i), kvPos.at(j), window)) want.push_back(j);
              const AttentionKeyRange r = attentionBlockKeyRange(blk, i);
              std::vector<int64_t> got;
              for (int64_t j = r.begin; j < r.end; ++j) got.push_back(j);
              ASSERT_EQ(got, want) << "cp " << n << " " << sc::cpLayoutName(layout) << " window " << window
                                   << " member " << c << " keys of " << src << " row " << i;
              EXPECT_EQ(attentionBlockVisibleKeys(blk, i), int64_t(want.size()));
            }
          }
      }
}

// ---- the plan ------------------------------------------------------------------------------------------

// A single-rank plan with attention_fwd and attention_bwd over [kB, S] rows (attrs plus `extra`), and
// the buffers' ids in `ids` (q, k, v, out, lse, dout, dq, dk, dv).
testing::PlanBuilder attentionPlan(int64_t S, const json& extra, std::map<std::string, int64_t>* ids) {
  testing::PlanBuilder b(16, S, kB, 1);
  for (const char* name : {"q", "out", "dout", "dq"}) (*ids)[name] = b.buffer(name, "activation", {kB, S, kNh, kHd});
  for (const char* name : {"k", "v", "dk", "dv"}) (*ids)[name] = b.buffer(name, "activation", {kB, S, kNkv, kHd});
  (*ids)["lse"] = b.buffer("lse", "activation", {kB, kNh, S});
  json attrs = {{"B", kB}, {"S", S}, {"nh", kNh}, {"nkv", kNkv}, {"hd", kHd}};
  for (auto it = extra.begin(); it != extra.end(); ++it) attrs[it.key()] = it.value();
  const auto& x = *ids;
  b.op("s", "attention_fwd",
       {{"q", x.at("q")}, {"k", x.at("k")}, {"v", x.at("v")}, {"out", x.at("out")}, {"lse", x.at("lse")}}, attrs);
  b.op("s", "attention_bwd",
       {{"dout", x.at("dout")},
        {"q", x.at("q")},
        {"k", x.at("k")},
        {"v", x.at("v")},
        {"out", x.at("out")},
        {"lse", x.at("lse")},
        {"dq", x.at("dq")},
        {"dk", x.at("dk")},
        {"dv", x.at("dv")}},
       attrs);
  b.action("s");
  return b;
}

StatusOr<Plan> loadPlan(const testing::PlanBuilder& b) {
  Plan plan;
  LLCDIST_ASSIGN_OR_RETURN(plan.manifest, parseManifest(b.manifest.dump(), "manifest.json"));
  LLCDIST_ASSIGN_OR_RETURN(Program prog, parseProgram(b.program.dump(), "program-0.json", plan.manifest));
  plan.programs.push_back(std::move(prog));
  return plan;
}

void expectRefused(const Status& s, const std::string& what) {
  ASSERT_FALSE(s.isOk()) << what << " loaded";
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.toString();
  EXPECT_NE(s.message().find("attrs.window"), std::string::npos) << what << ": " << s.message();
}

TEST(WindowedAttentionPlanTest, WindowLoadsAndBindsAndBadValuesAreRefused) {
  std::map<std::string, int64_t> ids;
  for (const json& bad : {json(0), json(-1), json("3"), json(2.5), json(true)}) {
    const StatusOr<Plan> p = loadPlan(attentionPlan(8, {{"window", bad}}, &ids));
    expectRefused(p.status(), "window " + bad.dump());
    EXPECT_NE(p.status().message().find("ops[0]"), std::string::npos) << p.status().message();
  }
  for (const json& extra : {json::object(), json{{"window", 3}}}) {
    const StatusOr<Plan> p = loadPlan(attentionPlan(8, extra, &ids));
    ASSERT_TRUE(p.isOk()) << p.status().toString();
    const Manifest& m = p->manifest;
    for (const Op& op : p->programs[0].subroutines[0].ops) {
      const StatusOr<OpParams> bound = ops::opDefs().find(op.kind)->bind(ops::BindContext{op, m, m.mesh(), 0});
      ASSERT_TRUE(bound.isOk()) << bound.status().toString();
      EXPECT_EQ(std::get<AttentionParams>(*bound).window, extra.empty() ? 0 : 3) << sc::opName(op.kind);
    }
  }
  // The ring's blocks: the same attr, the same check (cp = 2 over T = 8).
  for (const json& window : {json(0), json(-4), json("x"), json(5)}) {
    testing::PlanBuilder b(16, 8, 1, 1);
    b.manifest["features"] = {"context_parallel"};
    b.manifest["mesh"]["cp"] = 2;
    b.manifest["programs"][0]["ranks"] = {0, 1};
    const int64_t q = b.buffer("q", "activation", {4, 8}), k = b.buffer("k", "activation", {4, 4}),
                  v = b.buffer("v", "activation", {4, 4}), o = b.buffer("o", "activation", {4, 8}),
                  l = b.buffer("l", "activation", {2, 4});
    b.op("s", "attention_block_fwd", {{"q", q}, {"k", k}, {"v", v}, {"out", o}, {"lse", l}},
         {{"B", 1}, {"S", 4}, {"nh", 2}, {"nkv", 1}, {"hd", 4}, {"axis", "cp"}, {"step", 1}, {"window", window}});
    b.action("s");
    const StatusOr<Plan> p = loadPlan(b);
    if (window == json(5)) {
      ASSERT_TRUE(p.isOk()) << p.status().toString();
      const Op& op = p->programs[0].subroutines[0].ops[0];
      const Manifest& m = p->manifest;
      const StatusOr<OpParams> bound = ops::opDefs().find(op.kind)->bind(ops::BindContext{op, m, m.mesh(), 1});
      ASSERT_TRUE(bound.isOk()) << bound.status().toString();
      EXPECT_EQ(std::get<AttentionParams>(*bound).window, 5);
    } else {
      expectRefused(p.status(), "attention_block_fwd window " + window.dump());
    }
  }
}

// attention_fwd / _bwd with attr window through an interpreter on the CPU backend: the kernels' bits
// with the window (which differ from the causal ones).
TEST(WindowedAttentionPlanTest, TheInterpreterRunsTheWindow) {
  std::map<std::string, int64_t> ids;
  const StatusOr<Plan> plan = loadPlan(attentionPlan(kS, {{"window", 3}}, &ids));
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  std::unique_ptr<Backend> backend = makeCpuBackend(CpuBackendOptions{});
  auto it = Interpreter::create(*plan, 0, *backend, 0);
  ASSERT_TRUE(it.isOk()) << it.status().toString();
  const std::vector<float> q = randn(kB * kS * kNh * kHd, 51), k = randn(kB * kS * kNkv * kHd, 52),
                           v = randn(kB * kS * kNkv * kHd, 53), dout = randn(kB * kS * kNh * kHd, 54);
  using Named = std::pair<const char*, const std::vector<float>*>;
  for (const auto& [name, data] : {Named{"q", &q}, Named{"k", &k}, Named{"v", &v}, Named{"dout", &dout}})
    ASSERT_TRUE((*it)->writeBuffer(ids.at(name), data->data()).isOk());
  const Status run = (*it)->runSubroutine(0, 0, -1, 0.0, nullptr);
  ASSERT_TRUE(run.isOk()) << run.toString();
  const Result want = runAttentionKernels({kB, kS, kNh, kNkv, kHd, 3}, false, q, k, v, dout);
  const Result causal = runAttentionKernels({kB, kS, kNh, kNkv, kHd}, false, q, k, v, dout);
  for (const auto& [name, ref] : {Named{"out", &want.out}, Named{"lse", &want.lse}, Named{"dq", &want.dq},
                                  Named{"dk", &want.dk}, Named{"dv", &want.dv}}) {
    const StatusOr<std::vector<float>> got = (*it)->readF32(ids.at(name));
    ASSERT_TRUE(got.isOk()) << got.status().toString();
    EXPECT_EQ(*got, *ref) << name;
  }
  EXPECT_NE(want.out, causal.out);
}

}  // namespace
}  // namespace llcdist::rt
