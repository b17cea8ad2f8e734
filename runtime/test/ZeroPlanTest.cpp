// ZeRO plans (docs/plan-format.md "ZeRO plans"), loading and the shard_slice op: params[i].zero is
// validated (the feature, stage, axis, divisibility, the buffer and grad shapes of each stage, placements
// of pipeline plans) with errors naming manifest.json and the JSON path; shard_slice checks its element
// counts, axis and overlap, and cuts the rank's block of every row on 2 and 4 ranks, f32 and bf16.
#include "PipelineTestUtil.h"
#include "TestUtil.h"
#include "ZeroTestUtil.h"

#include "llcdist/runtime/Bf16.h"
#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Plan.h"

#include <functional>
#include <string>

namespace llcdist::rt {
namespace {

using testing::json;
namespace fs = std::filesystem;

// Buffer ids of zeroParamsPlan: value, grad per param in order.
constexpr int kWte = 0, kLnBias = 4, kLm = 8, kLmGrad = 9, kLoss = 10;

class ZeroPlanTest : public testing::TempDirTest {
protected:
  // dp = 2, tp = 2, wte and c_attn sharded over tp, ZeRO stage 3 over dp.
  testing::PlanBuilder base = testing::zeroParamsPlan({2, 2, 3, true});

  Status load(const testing::PlanBuilder& b) {
    b.write(dir);
    return loadPlan(dir.string()).status();
  }
  void expectError(const testing::PlanBuilder& start, const std::function<void(testing::PlanBuilder&)>& mutate,
                   std::vector<std::string> parts) {
    testing::PlanBuilder b = start;
    mutate(b);
    Status s = load(b);
    ASSERT_FALSE(s.isOk()) << "expected an error containing '" << parts[0] << "'";
    for (const std::string& p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << p << " in: " << s.message();
  }
  void expectError(const std::function<void(testing::PlanBuilder&)>& mutate, std::vector<std::string> parts) {
    expectError(base, mutate, std::move(parts));
  }
  static void setShape(testing::PlanBuilder& b, int id, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    b.program["buffers"][id]["shape"] = shape;
    b.program["buffers"][id]["bytes"] = n * 4;
    b.program["arena_bytes"] = b.program["arena_bytes"].get<int64_t>() + n * 4;  // room for a larger buffer
  }
};

TEST_F(ZeroPlanTest, EveryStageLoadsWithItsShapes) {
  for (int64_t stage : {1, 2, 3})
    for (auto [dp, tp, shard] : {std::tuple{2, 1, false}, std::tuple{4, 1, false}, std::tuple{2, 2, true}}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + " dp " + std::to_string(dp) + " tp " + std::to_string(tp));
      testing::zeroParamsPlan({dp, tp, stage, shard}).write(dir);
      auto plan = loadPlan(dir.string());
      ASSERT_TRUE(plan.isOk()) << plan.status().message();
      const Manifest& m = plan->manifest;
      EXPECT_TRUE(m.hasFeature("zero"));
      const ParamDesc& qkv = m.params[1];
      ASSERT_TRUE(qkv.zero.has_value());
      EXPECT_EQ(qkv.zero->axis, AxisSet::of(MeshAxis::kDp));
      EXPECT_EQ(qkv.zero->stage, stage);
      EXPECT_EQ(qkv.localShape, (std::vector<int64_t>{4, 12 / tp}));
      EXPECT_EQ(qkv.blockShape, (std::vector<int64_t>{4 / dp, 12 / tp}));
      EXPECT_EQ(qkv.blockNumel(), 48 / tp / dp);
      EXPECT_EQ(qkv.bufferShape(), stage >= 3 ? qkv.blockShape : qkv.localShape);
      EXPECT_EQ(qkv.gradShape(), stage >= 2 ? qkv.blockShape : qkv.localShape);
      const ParamDesc& wpe = m.params[3];  // no zero: whole (local) tensors
      EXPECT_FALSE(wpe.zero.has_value());
      EXPECT_EQ(wpe.blockShape, wpe.localShape);
      EXPECT_EQ(wpe.bufferShape(), wpe.shape);
    }
}

TEST_F(ZeroPlanTest, ZeroParamErrors) {
  auto setZero = [](int i, json zero) { return [i, zero](testing::PlanBuilder& b) { b.manifest["params"][i]["zero"] = zero; }; };
  expectError([](testing::PlanBuilder& b) { b.manifest["features"] = json::array(); },
              {"manifest.json", "params[0].zero", "needs the feature \"zero\""});
  expectError(setZero(4, {{"axis", "dp"}, {"stage", 0}}), {"params[4].zero.stage", "in [1, 3]", "got 0"});
  expectError(setZero(4, {{"axis", "dp"}, {"stage", 4}}), {"params[4].zero.stage", "in [1, 3]", "got 4"});
  expectError(setZero(4, {{"axis", "dp"}, {"stage", "3"}}), {"params[4].zero.stage", "expected an integer"});
  expectError(setZero(4, {{"axis", "dp"}}), {"params[4].zero.stage", "missing"});
  expectError(setZero(4, {{"axis", "xp"}, {"stage", 3}}), {"params[4].zero.axis", "unknown mesh axis \"xp\""});
  expectError(setZero(4, {{"axis", "dp"}, {"stage", 3}, {"offload", true}}), {"params[4].zero.offload", "unknown field"});
  expectError(setZero(4, json::array({"dp", 3})), {"params[4].zero", "expected an object"});
  // ZeRO over the axis the param is already sharded on would leave blocks on no rank.
  expectError(setZero(0, {{"axis", "tp"}, {"stage", 3}}), {"params[0].zero.axis", "sharded over tp"});
  expectError([](testing::PlanBuilder& b) { b.manifest["params"][2]["shape"] = json::array(); },
              {"params[2].zero", "scalar"});
  // The first dimension of the LOCAL tensor must split over dp: the ln bias [6], and wte [20, 4] whose
  // tp shard is [10, 4], on dp = 4.
  const testing::PlanBuilder dp4 = testing::zeroParamsPlan({4, 2, 3, true});
  expectError(dp4, [](testing::PlanBuilder& b) { b.manifest["params"][2]["shape"] = {6}; },
              {"params[2].zero", "has size 6", "not divisible by dp = 4"});
  expectError(dp4, [](testing::PlanBuilder& b) { b.manifest["params"][0]["shape"] = {20, 4}; },
              {"params[0].zero", "local shard", "[10, 4]", "not divisible by dp = 4"});
  // Buffer shapes per stage. Stage 3: the value buffer is the block [8, 4] of lm_head [16, 4].
  expectError([](testing::PlanBuilder& b) { setShape(b, kLm, {16, 4}); },
              {"manifest.json", "params[4].buffer", "ZeRO stage 3", "block", "[8, 4]", "has shape [16, 4]"});
  expectError([](testing::PlanBuilder& b) { setShape(b, kLmGrad, {16, 4}); },
              {"params[4].grad", "ZeRO stage 3", "[8, 4]"});
  // The block of a tp shard: wte [16, 4] -> shard [8, 4] -> block [4, 4].
  expectError([](testing::PlanBuilder& b) { setShape(b, kWte, {8, 4}); },
              {"params[0].buffer", "local shard", "[4, 4]"});
  // Stage 2: the value buffer whole, the grad a block; stage 1: both whole.
  const testing::PlanBuilder s2 = testing::zeroParamsPlan({2, 2, 2, true});
  expectError(s2, [](testing::PlanBuilder& b) { setShape(b, kLm, {8, 4}); },
              {"params[4].buffer", "ZeRO stage 2", "the whole of", "[16, 4]"});
  expectError(s2, [](testing::PlanBuilder& b) { setShape(b, kLmGrad, {16, 4}); },
              {"params[4].grad", "ZeRO stage 2", "block", "[8, 4]"});
  const testing::PlanBuilder s1 = testing::zeroParamsPlan({2, 2, 1, true});
  expectError(s1, [](testing::PlanBuilder& b) { setShape(b, kLmGrad, {8, 4}); },
              {"params[4].grad", "ZeRO stage 1", "the whole of", "[16, 4]"});
}

// Padded blocks: a param whose local rows dp does not divide has blocks of ceil(rows / dp) rows, which
// the plan states as "block_rows" (so a reader never guesses); wrong or needless values are errors.
TEST_F(ZeroPlanTest, PaddedBlocksNeedBlockRows) {
  const testing::PlanBuilder padded = testing::zeroParamsPlan({4, 1, 3, false, {}, true});
  {
    padded.write(dir);
    auto plan = loadPlan(dir.string());
    ASSERT_TRUE(plan.isOk()) << plan.status().message();
    const ParamDesc& lm = plan->manifest.params[4];  // lm_head [18, 4] over dp = 4: 5 rows a block
    ASSERT_TRUE(lm.zero.has_value());
    EXPECT_EQ(lm.zero->blockRows, 5);
    EXPECT_EQ(lm.blockShape, (std::vector<int64_t>{5, 4}));
    EXPECT_EQ(lm.blockNumel(), 20);
    const ParamDesc& bias = plan->manifest.params[2];  // ln_1.bias [7]: 2 rows a block
    EXPECT_EQ(bias.blockShape, (std::vector<int64_t>{2}));
    EXPECT_EQ(plan->manifest.params[0].zero->blockRows, 0);  // wte [16, 4]: exact blocks
  }
  auto setRows = [](int i, json rows) {
    return [i, rows](testing::PlanBuilder& b) {
      if (rows.is_null())
        b.manifest["params"][i]["zero"].erase("block_rows");
      else
        b.manifest["params"][i]["zero"]["block_rows"] = rows;
    };
  };
  expectError(padded, setRows(4, nullptr),
              {"manifest.json", "params[4].zero", "has size 18", "not divisible by dp = 4", "\"block_rows\": 5"});
  expectError(padded, setRows(4, 4), {"params[4].zero.block_rows", "is 4", "ceil(18 / 4) = 5 rows"});
  expectError(padded, setRows(4, 6), {"params[4].zero.block_rows", "is 6", "ceil(18 / 4) = 5 rows"});
  expectError(padded, setRows(4, 0), {"params[4].zero.block_rows", ">= 1"});
  expectError(padded, setRows(4, "5"), {"params[4].zero.block_rows", "expected an integer"});
  expectError(padded, setRows(0, 4), {"params[0].zero.block_rows", "divisible by dp = 4", "need no padding"});
  // The buffers hold the padded block: lm_head's value buffer [5, 4] under stage 3, not [4, 4].
  expectError(padded, [](testing::PlanBuilder& b) { setShape(b, kLm, {4, 4}); },
              {"params[4].buffer", "ZeRO stage 3", "[5, 4]", "has shape [4, 4]"});
}

TEST_F(ZeroPlanTest, PipelinePlacementsHoldEveryBlock) {
  testing::TinyLm c;
  c.dp = 2;
  testing::MultiProgramPlan p = testing::tinyLmPipeline(c);
  p.manifest["features"] = {"pipeline", "zero"};
  // Stage 1 keeps every buffer whole: over dp every stage holds every block.
  for (json& prm : p.manifest["params"]) prm["zero"] = {{"axis", "dp"}, {"stage", 1}};
  p.write(dir);
  auto plan = loadPlan(dir.string());
  ASSERT_TRUE(plan.isOk()) << plan.status().message();
  EXPECT_TRUE(plan->manifest.params[0].zero.has_value());
  // Over pp, w1 (only on stage 0) would have its pp block 1 on no rank.
  p.manifest["params"][1]["zero"] = {{"axis", "pp"}, {"stage", 1}};
  p.write(dir);
  Status s = loadPlan(dir.string()).status();
  ASSERT_FALSE(s.isOk());
  for (const char* part : {"manifest.json", "params[1].zero", "programs[0] has no rank with pp coordinate 1"})
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " in: " << s.message();
  // Over the set dp+pp the member index is dp + 2·pp: stage 0's ranks hold members 0 and 1 only.
  p.manifest["params"][1]["zero"] = {{"axis", "dp+pp"}, {"stage", 1}};
  p.write(dir);
  s = loadPlan(dir.string()).status();
  ASSERT_FALSE(s.isOk());
  for (const char* part :
       {"params[1].zero", "split by ZeRO over dp+pp", "programs[0] has no rank with dp+pp member index 2"})
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " in: " << s.message();
}

// ZeRO over the set dp+cp (dp = 2, tp = 2, cp = 2): n = dp·cp = 4 blocks, the messages name the set.
TEST_F(ZeroPlanTest, ZeroOverDpCpSplitsOverTheSet) {
  const testing::PlanBuilder cp2 = testing::zeroParamsPlan({2, 2, 3, true, {}, false, 2});
  cp2.write(dir);
  auto plan = loadPlan(dir.string());
  ASSERT_TRUE(plan.isOk()) << plan.status().message();
  const ParamDesc& qkv = plan->manifest.params[1];
  ASSERT_TRUE(qkv.zero.has_value());
  EXPECT_EQ(qkv.zero->axis, parseAxisSet("dp+cp"));
  EXPECT_EQ(plan->manifest.mesh().axisSize(qkv.zero->axis), 4);
  EXPECT_EQ(qkv.blockShape, (std::vector<int64_t>{1, 6}));                       // local [4, 6] over 4 members
  EXPECT_EQ(plan->manifest.params[4].blockShape, (std::vector<int64_t>{4, 4}));  // lm_head [16, 4]
  auto setZero = [](int i, json zero) {
    return [i, zero](testing::PlanBuilder& b) { b.manifest["params"][i]["zero"] = zero; };
  };
  {
    testing::PlanBuilder b = cp2;  // either spelling of the set
    setZero(4, {{"axis", "cp+dp"}, {"stage", 3}})(b);
    Status st = load(b);
    EXPECT_TRUE(st.isOk()) << st.message();
  }
  expectError(cp2, setZero(4, {{"axis", "dp+dp"}, {"stage", 3}}),
              {"params[4].zero.axis", R"(mesh axis "dp" is named twice in "dp+dp")", "several joined by '+'"});
  expectError(cp2, setZero(4, {{"axis", "dp+xp"}, {"stage", 3}}), {"params[4].zero.axis", R"(unknown mesh axis "xp")"});
  // ep / edp (expert parallelism) are parts of dp: never in a set with it.
  expectError(cp2, setZero(4, {{"axis", "dp+ep"}, {"stage", 3}}),
              {"params[4].zero.axis", R"("dp+ep" names dp twice)"});
  // wte is sharded over tp: a set with tp would leave blocks on no rank.
  expectError(cp2, setZero(0, {{"axis", "tp+cp"}, {"stage", 3}}),
              {"params[0].zero.axis", "sharded over tp", R"("tp+cp" contains it)"});
  // The ln bias [6] does not split over 4 members; its block's rows are ceil(6 / 4) = 2.
  expectError(cp2, [](testing::PlanBuilder& b) { b.manifest["params"][2]["shape"] = {6}; },
              {"params[2].zero", "has size 6", "not divisible by dp+cp = 4", "\"block_rows\": 2"});
  expectError(cp2,
              [](testing::PlanBuilder& b) {
                setShape(b, kLm, {8, 4});
              },
              {"params[4].buffer", "ZeRO stage 3", "[4, 4]", "dim 0 divided by dp+cp"});
}

TEST_F(ZeroPlanTest, ShardSliceErrors) {
  // x [2, 2·3] over dp = 2 into y [2, 3].
  auto withSlice = [](json attrs, std::vector<int64_t> xShape = {2, 6}, std::vector<int64_t> yShape = {2, 3},
                      bool overlap = false) {
    return [=](testing::PlanBuilder& b) {
      const int64_t x = b.buffer("x", "scratch", xShape), y = b.buffer("y", "scratch", yShape);
      if (overlap) b.program["buffers"][y]["offset"] = b.program["buffers"][x]["offset"];
      b.op("step_begin", "shard_slice", {{"x", x}, {"y", y}}, attrs);
    };
  };
  const json ok = {{"axis", "dp"}, {"outer", 2}, {"inner", 3}};
  {
    testing::PlanBuilder b = base;
    withSlice(ok)(b);
    Status s = load(b);
    ASSERT_TRUE(s.isOk()) << s.message();
    // No "zero" param is needed for the op (nor the feature).
    testing::PlanBuilder plain = testing::zeroParamsPlan({2, 1, 0, false});
    withSlice(ok)(plain);
    s = load(plain);
    EXPECT_TRUE(s.isOk()) << s.message();
  }
  const std::string op = "subroutines[0].ops[1]";
  expectError(withSlice(ok, {2, 6}, {2, 2}), {"program-0.json", op + ".args.y", "has 4 elements", "outer×inner = 6"});
  expectError(withSlice(ok, {2, 4}, {2, 3}), {op + ".args.x", "outer×n(dp)×inner = 12"});
  expectError(withSlice({{"axis", "tp"}, {"outer", 2}, {"inner", 3}}, {2, 3}, {2, 3}), {op + ".args.x"});
  expectError(withSlice({{"axis", "tp"}, {"outer", 2}, {"inner", 3}}, {2, 9}, {2, 3}), {op + ".args.x", "outer×n(tp)×inner = 12"});
  expectError(withSlice({{"axis", "sp"}, {"outer", 2}, {"inner", 3}}), {op + ".attrs.axis", "unknown mesh axis \"sp\""});
  expectError(withSlice({{"axis", "dp"}, {"outer", 2}}), {op + ".attrs.inner", "missing attribute"});
  expectError(withSlice({{"axis", "dp"}, {"outer", 0}, {"inner", 3}}), {op + ".attrs.outer", ">= 1"});
  expectError(withSlice(ok, {2, 6}, {2, 3}, /*overlap=*/true), {op + ".args", "overlaps", "shard_slice"});
}

// Runs one shard_slice on every rank of `manifest`'s mesh (no communicator: the op communicates
// nothing) and returns each rank's y. x on rank r holds 1000·r + i at element i.
// total > 0: x is [outer, total] (padded blocks, attr `total`).
std::vector<std::vector<float>> runShardSlice(testing::PlanBuilder b, const std::string& axis, int64_t n,
                                              int64_t outer, int64_t inner, const std::string& xType = "f32",
                                              const std::string& yType = "f32", int64_t total = 0) {
  const int64_t row = total > 0 ? total : n * inner;
  const int64_t x = b.buffer("x", "scratch", {outer, row}, xType), y = b.buffer("y", "scratch", {outer, inner}, yType);
  json attrs = {{"axis", axis}, {"outer", outer}, {"inner", inner}};
  if (total > 0) attrs["total"] = total;
  b.op("s", "shard_slice", {{"x", x}, {"y", y}}, attrs, "zero");
  b.action("s");
  Plan plan;
  auto m = parseManifest(b.manifest.dump(), "manifest.json");
  EXPECT_TRUE(m.isOk()) << m.status().message();
  plan.manifest = m.value();
  auto p = parseProgram(b.program.dump(), "program-0.json", plan.manifest);
  EXPECT_TRUE(p.isOk()) << p.status().message();
  if (!p.isOk()) return {};
  plan.programs.push_back(std::move(p).value());
  std::vector<std::vector<float>> out;
  for (int r = 0; r < int(plan.manifest.worldSize()); ++r) {
    auto backend = makeCpuBackend();
    auto interp = Interpreter::create(plan, 0, *backend, r);
    EXPECT_TRUE(interp.isOk()) << interp.status().message();
    std::vector<float> xv(size_t(outer * row));
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = float(1000 * r) + float(i) + 0.25f;
    EXPECT_TRUE((*interp)->writeF32(x, xv.data()).isOk());
    Status s = (*interp)->runSubroutine(0, 0, -1, 0.0, nullptr);
    EXPECT_TRUE(s.isOk()) << s.message();
    out.push_back((*interp)->readF32(y).value());
  }
  return out;
}

TEST_F(ZeroPlanTest, ShardSliceCutsTheMembersBlockOfEveryRow) {
  const int64_t outer = 3, inner = 2;
  for (int64_t n : {2, 4}) {
    SCOPED_TRACE("dp " + std::to_string(n));
    testing::PlanBuilder b(8, 2, 1, 1);
    testing::setMesh(b, n, 1);
    const auto ys = runShardSlice(b, "dp", n, outer, inner);
    ASSERT_EQ(int64_t(ys.size()), n);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t k = 0; k < inner; ++k)  // member c = r: columns [c·inner, (c+1)·inner) of row o
          EXPECT_EQ(ys[size_t(r)][size_t(o * inner + k)], float(1000 * r) + float(o * n * inner + r * inner + k) + 0.25f)
              << r << " " << o << " " << k;
  }
  // dp × tp: the member index is the rank's coordinate on the op's axis, under either rank order.
  for (const std::vector<std::string>& order : {std::vector<std::string>{}, std::vector<std::string>{"dp", "tp", "pp"}}) {
    for (const std::string axis : {"dp", "tp"}) {
      SCOPED_TRACE(axis + " order " + std::to_string(order.size()));
      testing::PlanBuilder b(8, 2, 1, 1);
      testing::setMesh(b, 2, 2, order);
      const Mesh mesh = parseManifest(b.manifest.dump(), "m").value().mesh();
      const auto ys = runShardSlice(b, axis, 2, outer, inner);
      ASSERT_EQ(ys.size(), 4u);
      for (int r = 0; r < 4; ++r) {
        const int64_t c = mesh.coord(r, *parseMeshAxis(axis));
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t k = 0; k < inner; ++k)
            EXPECT_EQ(ys[size_t(r)][size_t(o * inner + k)], float(1000 * r) + float(o * 2 * inner + c * inner + k) + 0.25f);
      }
    }
  }
  // An axis of size 1 copies.
  testing::PlanBuilder b(8, 2, 1, 1);
  const auto ys = runShardSlice(b, "tp", 1, outer, inner);
  ASSERT_EQ(ys.size(), 1u);
  for (int64_t i = 0; i < outer * inner; ++i) EXPECT_EQ(ys[0][size_t(i)], float(i) + 0.25f);
}

// Padded blocks: x [outer, total] with total < n·inner; member c gets x[o, c·inner + k] while that is
// below total, then zeros (dp = 4, inner 3, total 7: members 0 and 1 whole, 2 one element, 3 none).
TEST_F(ZeroPlanTest, ShardSlicePadsTheLastBlocksWithZeros) {
  const int64_t outer = 2, inner = 3, n = 4, total = 7;
  testing::PlanBuilder b(8, 2, 1, 1);
  testing::setMesh(b, n, 1);
  const auto ys = runShardSlice(b, "dp", n, outer, inner, "f32", "f32", total);
  ASSERT_EQ(int64_t(ys.size()), n);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < inner; ++k) {
        const int64_t j = r * inner + k;
        const float want = j < total ? float(1000 * r) + float(o * total + j) + 0.25f : 0.0f;
        EXPECT_EQ(ys[size_t(r)][size_t(o * inner + k)], want) << r << " " << o << " " << k;
      }
}

TEST_F(ZeroPlanTest, PaddedCollectiveErrors) {
  // total > n·inner, and the whole side's count with total.
  auto withOp = [](const std::string& op, json attrs, std::vector<int64_t> whole) {
    return [=](testing::PlanBuilder& b) {
      const int64_t blk = b.buffer("blk", "scratch", {2, 3}), w = b.buffer("whole", "scratch", whole);
      const bool gather = op == "all_gather";
      b.op("step_begin", op, {{"x", gather ? blk : w}, {"y", gather ? w : blk}}, attrs);
    };
  };
  const std::string path = "subroutines[0].ops[1]";
  for (const std::string op : {"all_gather", "reduce_scatter", "shard_slice"}) {
    SCOPED_TRACE(op);
    json attrs = {{"axis", "dp"}, {"outer", 2}, {"inner", 3}, {"total", 5}};
    if (op == "reduce_scatter") attrs["op"] = "sum";
    {
      testing::PlanBuilder b = base;
      withOp(op, attrs, {2, 5})(b);
      Status s = load(b);
      EXPECT_TRUE(s.isOk()) << s.message();
    }
    const std::string whole = op == "all_gather" ? ".args.y" : ".args.x";
    expectError(withOp(op, attrs, {2, 6}), {path + whole, "has 12 elements", "outer×total = 10"});
    json big = attrs;
    big["total"] = 7;
    expectError(withOp(op, big, {2, 7}), {path + ".attrs.total", "total 7 exceeds n(dp)×inner = 2×3"});
    json zero = attrs;
    zero["total"] = 0;
    expectError(withOp(op, zero, {2, 5}), {path + ".attrs.total", ">= 1"});
  }
}

TEST_F(ZeroPlanTest, ShardSliceOnBf16Buffers) {
  // bf16 x into f32 y is exact; f32 x into bf16 y rounds each element once (nearest even); bf16 to bf16
  // copies the bits. Values 1000·r + i + 0.25 are not all bf16-representable: the rounding shows.
  const int64_t outer = 2, inner = 3, n = 2;
  for (auto [xt, yt] : {std::pair{"bf16", "f32"}, std::pair{"f32", "bf16"}, std::pair{"bf16", "bf16"}}) {
    SCOPED_TRACE(std::string(xt) + " -> " + yt);
    testing::PlanBuilder b(8, 2, 1, 1);
    testing::setMesh(b, n, 1);
    const auto ys = runShardSlice(b, "dp", n, outer, inner, xt, yt);
    ASSERT_EQ(ys.size(), 2u);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t k = 0; k < inner; ++k) {
          const float v = float(1000 * r) + float(o * n * inner + r * inner + k) + 0.25f;
          EXPECT_EQ(ys[size_t(r)][size_t(o * inner + k)], roundToBf16(v));
        }
  }
}

}  // namespace
}  // namespace llcdist::rt
