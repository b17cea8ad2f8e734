// Context parallelism, Ulysses-style (issue #32; docs/plan-format.md "Context parallelism"): the mesh's
// cp axis (coordinates, strides, groups, the default order tp, cp, dp, pp); the manifest's mesh.cp, its
// four-name rank_order, the feature and the seq_len rule; the all_to_all op through interpreters on the
// in-process communicator (cp = 2 beside dp = 2, and cp = 4; both x_rank_dim; outer > 1; f32 and bf16
// buffers, the collective in f32 and in bf16) against index arithmetic written here, its round trip
// and its attr errors; and the data layout of a (dp, cp) coordinate against the contract's formula.
#include "PlanTestUtil.h"
#include "TestUtil.h"

#include "llcdist/runtime/Bf16.h"
#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Mesh.h"
#include "llcdist/runtime/Plan.h"
#include "llcdist/runtime/TokenData.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <thread>

namespace llcdist::rt {
namespace {

using testing::expectParts;
using testing::json;
using testing::PlanBuilder;

// ---- the mesh --------------------------------------------------------------------------------------------

TEST(ContextParallelMeshTest, DefaultOrderIsTpCpDpPp) {
  const Mesh m = Mesh::make(2, 2, 1, 2);
  EXPECT_EQ(m.worldSize(), 8);
  EXPECT_EQ(m.stride(MeshAxis::kTp), 1);
  EXPECT_EQ(m.stride(MeshAxis::kCp), 2);
  EXPECT_EQ(m.stride(MeshAxis::kDp), 4);
  EXPECT_EQ(m.stride(MeshAxis::kPp), 8);
  // rank 6 = tp 0 + cp 1·2 + dp 1·4
  EXPECT_EQ(m.coord(6, MeshAxis::kTp), 0);
  EXPECT_EQ(m.coord(6, MeshAxis::kCp), 1);
  EXPECT_EQ(m.coord(6, MeshAxis::kDp), 1);
  EXPECT_EQ(m.group(6, MeshAxis::kCp), (std::vector<int>{4, 6}));
  EXPECT_EQ(m.group(6, MeshAxis::kDp), (std::vector<int>{2, 6}));
  EXPECT_EQ(m.group(6, MeshAxis::kTp), (std::vector<int>{6, 7}));
  EXPECT_EQ(m.axisOfGroup({4, 6}), MeshAxis::kCp);
  EXPECT_EQ(m.axisBetween(4, 6), MeshAxis::kCp);
  EXPECT_EQ(m.axisBetween(4, 7), std::nullopt);
  EXPECT_EQ(m.withCoord(6, MeshAxis::kCp, 0), 4);
  EXPECT_EQ(m.describe(), "dp=2 tp=2 pp=1 cp=2, rank_order [tp, cp, dp, pp]");
  // Without cp the mesh reads as before.
  EXPECT_EQ(Mesh::make(2, 2, 1).describe(), "dp=2 tp=2 pp=1, rank_order [tp, dp, pp]");
  EXPECT_EQ(Mesh::make(2, 2, 1).worldSize(), 4);
  EXPECT_EQ(parseMeshAxis("cp"), MeshAxis::kCp);
  EXPECT_EQ(meshAxisName(MeshAxis::kCp), "cp");
}

TEST(ContextParallelMeshTest, SetOrderTakesThreeOrFourAxes) {
  Mesh m = Mesh::make(2, 1, 1, 2);
  ASSERT_TRUE(m.setOrder({MeshAxis::kDp, MeshAxis::kTp, MeshAxis::kPp}));  // cp then the slowest
  EXPECT_EQ(m.order, (std::array<MeshAxis, 4>{MeshAxis::kDp, MeshAxis::kTp, MeshAxis::kPp, MeshAxis::kCp}));
  EXPECT_EQ(m.group(0, MeshAxis::kCp), (std::vector<int>{0, 2}));
  ASSERT_TRUE(m.setOrder({MeshAxis::kCp, MeshAxis::kDp, MeshAxis::kTp, MeshAxis::kPp}));
  EXPECT_EQ(m.group(0, MeshAxis::kCp), (std::vector<int>{0, 1}));
  EXPECT_EQ(m.describe(), "dp=2 tp=1 pp=1 cp=2, rank_order [cp, dp, tp, pp]");
  const auto before = m.order;
  EXPECT_FALSE(m.setOrder({MeshAxis::kDp, MeshAxis::kCp, MeshAxis::kPp}));  // three names without tp
  EXPECT_FALSE(m.setOrder({MeshAxis::kDp, MeshAxis::kDp, MeshAxis::kPp, MeshAxis::kCp}));
  EXPECT_FALSE(m.setOrder({MeshAxis::kDp, MeshAxis::kTp}));
  EXPECT_EQ(m.order, before);
}

// ---- the manifest ----------------------------------------------------------------------------------------

// A cp = 2 plan's manifest over `world` = dp·cp ranks (dp = 1 unless set).
PlanBuilder cpPlan(int64_t cp, int64_t seqLen = 8, int64_t dp = 1) {
  PlanBuilder b(16, seqLen, 1, 1);
  b.manifest["features"] = {"context_parallel"};
  b.manifest["mesh"]["cp"] = cp;
  b.manifest["mesh"]["dp"] = dp;
  b.manifest["batch"]["dp"] = dp;
  b.manifest["batch"]["global_batch"] = dp;
  std::vector<int64_t> ranks;
  for (int64_t r = 0; r < cp * dp; ++r) ranks.push_back(r);
  b.manifest["programs"][0]["ranks"] = ranks;
  return b;
}

StatusOr<Manifest> manifestOf(const PlanBuilder& b) { return parseManifest(b.manifest.dump(), "manifest.json"); }

TEST(ContextParallelManifestTest, CpAndItsRankOrderLoad) {
  auto m = manifestOf(cpPlan(2, 8, 2));
  ASSERT_TRUE(m.isOk()) << m.status().message();
  EXPECT_EQ(m->meshCp, 2);
  EXPECT_EQ(m->worldSize(), 4);
  EXPECT_EQ(m->rankOrder, Mesh::kDefaultOrder);
  EXPECT_EQ(m->mesh().group(0, MeshAxis::kCp), (std::vector<int>{0, 1}));

  PlanBuilder b = cpPlan(2, 8, 2);
  b.manifest["mesh"]["rank_order"] = {"dp", "cp", "tp", "pp"};
  m = manifestOf(b);
  ASSERT_TRUE(m.isOk()) << m.status().message();
  EXPECT_EQ(m->mesh().group(0, MeshAxis::kCp), (std::vector<int>{0, 2}));
  EXPECT_EQ(m->mesh().group(0, MeshAxis::kDp), (std::vector<int>{0, 1}));

  // Without cp: absent is 1, and a three-name order puts cp last (any place is the same with cp = 1).
  PlanBuilder plain(16, 8, 1, 1);
  plain.manifest["mesh"]["rank_order"] = {"dp", "tp", "pp"};
  m = manifestOf(plain);
  ASSERT_TRUE(m.isOk()) << m.status().message();
  EXPECT_EQ(m->meshCp, 1);
  EXPECT_EQ(m->rankOrder[3], MeshAxis::kCp);
  // A four-name order is fine with cp = 1 too, as is "cp": 1 without the feature.
  plain.manifest["mesh"]["rank_order"] = {"tp", "cp", "dp", "pp"};
  plain.manifest["mesh"]["cp"] = 1;
  EXPECT_TRUE(manifestOf(plain).isOk()) << manifestOf(plain).status().message();
}

TEST(ContextParallelManifestTest, Errors) {
  PlanBuilder b = cpPlan(2);
  b.manifest["mesh"]["rank_order"] = {"tp", "dp", "pp"};
  expectParts(manifestOf(b).status(), {"manifest.json", "mesh.rank_order", "mesh.cp = 2", "lists cp"});
  b = cpPlan(2);
  b.manifest["mesh"]["rank_order"] = {"tp", "cp", "dp", "cp"};
  expectParts(manifestOf(b).status(), {"mesh.rank_order[3]", "twice"});
  b = cpPlan(2);
  b.manifest["mesh"]["rank_order"] = {"tp", "cp", "dp"};
  expectParts(manifestOf(b).status(), {"mesh.rank_order[1]", "three axes"});
  b = cpPlan(2);
  b.manifest["features"] = json::array();
  expectParts(manifestOf(b).status(), {"mesh.cp", "cp > 1 needs the feature \"context_parallel\""});
  b = cpPlan(2, 9);
  expectParts(manifestOf(b).status(), {"batch.seq_len", "9", "mesh.cp = 2"});
  b = cpPlan(2);
  b.manifest["mesh"]["cp"] = 0;
  expectParts(manifestOf(b).status(), {"mesh.cp"});
  b = cpPlan(2);
  b.manifest["mesh"]["cp"] = "2";
  expectParts(manifestOf(b).status(), {"mesh.cp"});
  b = cpPlan(2);
  b.manifest["mesh"]["dp"] = 1 << 24;
  b.manifest["batch"]["dp"] = 1 << 24;
  b.manifest["batch"]["global_batch"] = 1 << 24;
  expectParts(manifestOf(b).status(), {"mesh", "dp × tp × pp × cp is too large"});
  b = cpPlan(2);
  b.manifest["programs"][0]["ranks"] = {0};
  expectParts(manifestOf(b).status(), {"programs", "no program runs rank 1", "dp × tp × pp × cp = 2"});
}

// load_microbatch's S is the rank's T / cp positions.
TEST(ContextParallelManifestTest, LoadMicrobatchReadsTheRanksChunk) {
  for (int64_t S : {4, 8}) {
    PlanBuilder b = cpPlan(2, 8);
    const int64_t ids = b.buffer("ids", "input", {1, S}, "i32"), targets = b.buffer("targets", "input", {1, S}, "i32");
    b.op("fwd", "load_microbatch", {{"ids", ids}, {"targets", targets}}, {{"B", 1}, {"S", S}});
    b.action("fwd", 0);
    auto m = manifestOf(b);
    ASSERT_TRUE(m.isOk()) << m.status().message();
    auto p = parseProgram(b.program.dump(), "program-0.json", *m);
    if (S == 4)
      EXPECT_TRUE(p.isOk()) << p.status().message();
    else
      expectParts(p.status(), {"attrs.S", "batch.seq_len / mesh.cp = 8 / 2 = 4"});
  }
}

// ---- all_to_all ----------------------------------------------------------------------------------------

struct A2aShape {
  int64_t outer, mid, inner;
};

// Runs two all_to_all ops over cp, x -(x_rank_dim)-> y -(3 - x_rank_dim)-> z, on every rank of a
// dp × cp mesh; x of rank r holds r·E + e at element e (E = its element count: exact in bf16 for the
// sizes below). Returns y and z of every rank, as floats.
struct A2aRun {
  std::vector<std::vector<float>> y, z;
  Mesh mesh;
};
A2aRun runAllToAll(int64_t dp, int64_t cp, A2aShape s, int xRankDim, const std::string& dtype,
                   const std::string& commDType) {
  A2aRun out;
  PlanBuilder b = cpPlan(cp, cp, dp);
  const int64_t E = s.outer * s.mid * cp * s.inner;
  const int64_t x = b.buffer("x", "activation", {E}, dtype), y = b.buffer("y", "activation", {E}, dtype),
                z = b.buffer("z", "activation", {E}, dtype);
  json attrs = {{"axis", "cp"}, {"outer", s.outer}, {"mid", s.mid}, {"inner", s.inner}, {"x_rank_dim", xRankDim}};
  if (!commDType.empty()) attrs["dtype"] = commDType;
  b.op("s", "all_to_all", {{"x", x}, {"y", y}}, attrs);
  attrs["x_rank_dim"] = 3 - xRankDim;
  b.op("s", "all_to_all", {{"x", y}, {"y", z}}, attrs);
  b.action("s");
  Plan plan;
  auto m = manifestOf(b);
  EXPECT_TRUE(m.isOk()) << m.status().message();
  if (!m.isOk()) return out;
  plan.manifest = m.value();
  auto prog = parseProgram(b.program.dump(), "program-0.json", plan.manifest);
  EXPECT_TRUE(prog.isOk()) << prog.status().message();
  if (!prog.isOk()) return out;
  plan.programs.push_back(std::move(prog).value());
  out.mesh = plan.manifest.mesh();
  const int world = int(dp * cp);
  InProcessCommunicatorOptions co;
  co.worldSize = world;
  co.mesh = out.mesh;
  auto comm = makeInProcessCommunicator(co);
  std::vector<std::unique_ptr<Backend>> be(static_cast<size_t>(world));
  std::vector<std::unique_ptr<Interpreter>> in(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    CpuBackendOptions bo;
    bo.rank = r;
    bo.communicator = comm.get();
    be[size_t(r)] = makeCpuBackend(bo);
    auto i = Interpreter::create(plan, 0, *be[size_t(r)], r);
    EXPECT_TRUE(i.isOk()) << i.status().message();
    if (!i.isOk()) return out;
    in[size_t(r)] = std::move(i).value();
  }
  out.y.assign(size_t(world), {});
  out.z.assign(size_t(world), {});
  std::vector<Status> st(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      Interpreter& it = *in[size_t(r)];
      const bool bf16 = dtype == "bf16";
      std::vector<float> xf(static_cast<size_t>(E));
      std::vector<uint16_t> xb(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) {
        xf[size_t(e)] = float(r * E + e);
        xb[size_t(e)] = floatToBf16(xf[size_t(e)]);
      }
      Status w = bf16 ? it.writeBuffer(x, xb.data()) : it.writeBuffer(x, xf.data());
      if (w.isOk()) w = it.runSubroutine(0, 0, -1, 0.0, nullptr);
      for (auto [id, dst] : {std::pair{y, &out.y[size_t(r)]}, std::pair{z, &out.z[size_t(r)]}}) {
        if (!w.isOk()) break;
        dst->assign(size_t(E), 0.0f);
        if (bf16) {
          std::vector<uint16_t> v(static_cast<size_t>(E));
          w = it.readBuffer(id, v.data());
          for (int64_t e = 0; e < E; ++e) (*dst)[size_t(e)] = bf16ToFloat(v[size_t(e)]);
        } else {
          w = it.readBuffer(id, dst->data());
        }
      }
      st[size_t(r)] = w;
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_TRUE(st[size_t(r)].isOk()) << "rank " << r << ": " << st[size_t(r)].message();
  return out;
}

// The contract's index arithmetic: x_rank_dim 2: x [O, M, n, I] -> y [O, n, M, I] with
// y_c[o, i, m, k] = x_{member i}[o, m, c, k]; x_rank_dim 1: x [O, n, M, I] -> y [O, M, n, I] with
// y_c[o, m, i, k] = x_{member i}[o, c, m, k].
void checkAllToAll(int64_t dp, int64_t cp, A2aShape s, int xRankDim, const std::string& dtype,
                   const std::string& commDType) {
  SCOPED_TRACE("dp " + std::to_string(dp) + " cp " + std::to_string(cp) + " x_rank_dim " + std::to_string(xRankDim) +
               " " + dtype + " dtype attr '" + commDType + "'");
  const A2aRun run = runAllToAll(dp, cp, s, xRankDim, dtype, commDType);
  const int64_t O = s.outer, M = s.mid, I = s.inner, n = cp, E = O * M * n * I;
  const int world = int(dp * cp);
  ASSERT_EQ(run.y.size(), size_t(world));
  for (int r = 0; r < world; ++r) {
    const std::vector<int> group = run.mesh.group(r, MeshAxis::kCp);
    const int64_t c = run.mesh.coord(r, MeshAxis::kCp);
    ASSERT_EQ(group.size(), size_t(n));
    ASSERT_EQ(run.y[size_t(r)].size(), size_t(E));
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t m = 0; m < M; ++m)
          for (int64_t k = 0; k < I; ++k) {
            const int src = group[size_t(i)];
            int64_t yAt = 0, xAt = 0;
            if (xRankDim == 2) {
              yAt = ((o * n + i) * M + m) * I + k;
              xAt = ((o * M + m) * n + c) * I + k;
            } else {
              yAt = ((o * M + m) * n + i) * I + k;
              xAt = ((o * n + c) * M + m) * I + k;
            }
            ASSERT_EQ(run.y[size_t(r)][size_t(yAt)], float(src * E + xAt))
                << "rank " << r << " y[" << yAt << "] (o " << o << ", member " << i << ", m " << m << ", k " << k
                << ")";
          }
    // The two layouts' all_to_alls are each other's inverse.
    for (int64_t e = 0; e < E; ++e) ASSERT_EQ(run.z[size_t(r)][size_t(e)], float(r * E + e)) << "rank " << r;
  }
}

TEST(AllToAllTest, TwoMembersBesideDataParallelism) {
  for (int dim : {1, 2}) {
    checkAllToAll(2, 2, {3, 2, 5}, dim, "f32", "");
    checkAllToAll(2, 2, {3, 2, 5}, dim, "bf16", "bf16");
    checkAllToAll(2, 2, {3, 2, 5}, dim, "bf16", "");  // f32 staging of bf16 buffers: exact
  }
}

TEST(AllToAllTest, FourMembers) {
  for (int dim : {1, 2}) {
    checkAllToAll(1, 4, {2, 3, 2}, dim, "f32", "f32");
    checkAllToAll(1, 4, {2, 3, 2}, dim, "bf16", "bf16");
    // outer = 1: one side is the communicator's contiguous blocks (no packing on that side).
    checkAllToAll(1, 4, {1, 3, 2}, dim, "f32", "");
    checkAllToAll(1, 4, {1, 1, 3}, dim, "f32", "");
  }
}

TEST(AllToAllTest, AttrErrors) {
  auto programError = [](const std::function<void(PlanBuilder&, json&)>& edit, int64_t elems = 24) {
    PlanBuilder b = cpPlan(2);
    const int64_t x = b.buffer("x", "activation", {elems}), y = b.buffer("y", "activation", {24});
    json attrs = {{"axis", "cp"}, {"outer", 2}, {"mid", 3}, {"inner", 2}, {"x_rank_dim", 2}};
    json args = {{"x", x}, {"y", y}};
    edit(b, attrs);
    b.op("s", "all_to_all", args, attrs);
    b.action("s");
    auto m = manifestOf(b);
    EXPECT_TRUE(m.isOk()) << m.status().message();
    return parseProgram(b.program.dump(), "program-0.json", *m).status();
  };
  EXPECT_TRUE(programError([](PlanBuilder&, json&) {}).isOk());
  expectParts(programError([](PlanBuilder&, json& a) { a["x_rank_dim"] = 3; }),
              {"program-0.json", "ops[0].attrs.x_rank_dim", "expected 1", "got 3"});
  expectParts(programError([](PlanBuilder&, json& a) { a["x_rank_dim"] = 0; }), {"attrs.x_rank_dim"});
  expectParts(programError([](PlanBuilder&, json& a) { a.erase("mid"); }), {"attrs.mid"});
  expectParts(programError([](PlanBuilder&, json& a) { a["inner"] = 0; }), {"attrs.inner"});
  expectParts(programError([](PlanBuilder&, json& a) { a["axis"] = "sp"; }),
              {"attrs.axis", "unknown mesh axis \"sp\""});
  expectParts(programError([](PlanBuilder&, json& a) { a["outer"] = int64_t(1) << 62; }),
              {"args.x", "expected outer×mid×n×inner (n = 2) = (overflow)"});
  expectParts(programError([](PlanBuilder&, json&) {}, 12), {"args.x", "has 12 elements", "outer×mid×n×inner"});
  expectParts(programError([](PlanBuilder&, json& a) { a["dtype"] = "bf16"; }), {"attrs.dtype", "bf16"});
  expectParts(programError([](PlanBuilder&, json& a) { a["dtype"] = "f16"; }), {"attrs.dtype", "unknown"});
  // x and y may not overlap.
  expectParts(programError([](PlanBuilder& b, json&) { b.program["buffers"][1]["offset"] = 0; }), {"overlaps"});
}

// ---- the data layout -------------------------------------------------------------------------------------

TEST(ContextParallelDataTest, PositionsOfACoordinateAreTheFormula) {
  for (int64_t T : {4, 12, 32})
    for (int64_t cp : {1, 2, 4})
      for (int64_t c = 0; c < cp; ++c) {
        const PositionRuns k = contextParallelPositions(T, cp, c, CpLayout::kContiguous);
        for (int64_t s = 0; s < T / cp; ++s) EXPECT_EQ(k.at(s), c * T / cp + s);
        EXPECT_EQ(k.minAt(T / cp), c * T / cp);
        EXPECT_EQ(k.maxAt(T / cp), (c + 1) * T / cp - 1);
      }
}

// Load-balanced: chunks c and 2·cp − 1 − c of 2·cp, in that order; the members' rows tile the sample.
TEST(ContextParallelDataTest, LoadBalancedPositionsAreMegatronsChunks) {
  for (int64_t T : {4, 16, 24})
    for (int64_t cp : {1, 2})
      for (int64_t c = 0; c < cp; ++c) {
        const int64_t h = T / (2 * cp);
        const PositionRuns k = contextParallelPositions(T, cp, c, CpLayout::kLoadBalanced);
        for (int64_t s = 0; s < h; ++s) {
          EXPECT_EQ(k.at(s), c * h + s);
          EXPECT_EQ(k.at(h + s), (2 * cp - 1 - c) * h + s);
        }
        EXPECT_EQ(k.minAt(2 * h), c * h);
        EXPECT_EQ(k.maxAt(2 * h), (2 * cp - c) * h - 1);
      }
  std::vector<int> seen(32, 0);
  for (int64_t c = 0; c < 4; ++c) {
    const PositionRuns k = contextParallelPositions(32, 4, c, CpLayout::kLoadBalanced);
    for (int64_t s = 0; s < 8; ++s) ++seen[size_t(k.at(s))];
  }
  EXPECT_EQ(seen, std::vector<int>(32, 1));
  EXPECT_EQ(contextParallelPositions(32, 4, 1, CpLayout::kLoadBalanced).at(5), 4 * 6 + 1);  // chunk 6, row 1
}

// The cp ranks of a dp coordinate hold their samples in contiguous chunks: together the whole
// microbatch of the dp coordinate, inputs and targets (inputs shifted by one).
class ContextParallelSamplerTest : public testing::TempDirTest {};

TEST_F(ContextParallelSamplerTest, ChunksTileTheMicrobatch) {
  std::vector<uint16_t> toks(400);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = uint16_t((i * 7 + 3) % 1000);
  const std::string path = (dir / "tokens.bin").string();
  ASSERT_TRUE(writeTokenFile(path, toks.data(), int64_t(toks.size())).isOk());
  auto opened = TokenFile::open(path);
  ASSERT_TRUE(opened.isOk()) << opened.status().message();
  auto file = std::make_shared<const TokenFile>(std::move(opened).value());
  BatchConfig cfg;
  cfg.B = 2, cfg.T = 12, cfg.microbatches = 2, cfg.dp = 2, cfg.shuffle = true, cfg.seed = 5;
  auto sampler = BatchSampler::create(file, cfg);
  ASSERT_TRUE(sampler.isOk()) << sampler.status().message();
  const int64_t B = cfg.B, T = cfg.T;
  // The contract's positions, written out: contiguous [c·T/cp, (c+1)·T/cp); load-balanced chunks c and
  // 2·cp − 1 − c of h = T/(2·cp).
  auto position = [T](CpLayout layout, int64_t cp, int64_t c, int64_t s) {
    if (layout == CpLayout::kContiguous) return c * T / cp + s;
    const int64_t h = T / (2 * cp);
    return s < h ? c * h + s : (2 * cp - 1 - c) * h + (s - h);
  };
  for (CpLayout layout : {CpLayout::kContiguous, CpLayout::kLoadBalanced})
    for (int64_t cp : {2, 3, 4}) {
      if (layout == CpLayout::kLoadBalanced && T % (2 * cp) != 0) continue;
      for (int64_t dpRank = 0; dpRank < cfg.dp; ++dpRank)
        for (int64_t micro = 0; micro < cfg.microbatches; ++micro) {
          SCOPED_TRACE(std::string(schema::cpLayoutName(layout)) + " cp " + std::to_string(cp));
          std::vector<int32_t> ids(static_cast<size_t>(B * T)), targets(static_cast<size_t>(B * T));
          ASSERT_TRUE(sampler->microbatch(1, micro, dpRank, ids.data(), targets.data()).isOk());
          for (int64_t c = 0; c < cp; ++c) {
            const int64_t S = T / cp;
            std::vector<int32_t> ci(static_cast<size_t>(B * S)), ct(static_cast<size_t>(B * S));
            ASSERT_TRUE(sampler
                            ->microbatchChunk(1, micro, dpRank, contextParallelPositions(T, cp, c, layout), S,
                                              ci.data(), ct.data())
                            .isOk());
            for (int64_t i = 0; i < B; ++i) {
              const uint16_t* sample = toks.data() + sampler->sampleStart(sampler->globalSample(1, micro, dpRank, i));
              for (int64_t s = 0; s < S; ++s) {
                const int64_t pos = position(layout, cp, c, s);
                ASSERT_EQ(ci[size_t(i * S + s)], ids[size_t(i * T + pos)]);
                ASSERT_EQ(ct[size_t(i * S + s)], targets[size_t(i * T + pos)]);
                ASSERT_EQ(ci[size_t(i * S + s)], sample[pos]);
                ASSERT_EQ(ct[size_t(i * S + s)], sample[pos + 1]);
              }
            }
          }
        }
    }
  std::vector<int32_t> a(size_t(B * 4)), b(size_t(B * 4));
  EXPECT_FALSE(sampler->microbatchChunk(0, 0, 0, PositionRuns::from(10), 4, a.data(), b.data()).isOk());
  EXPECT_FALSE(sampler->microbatchChunk(0, 0, 0, PositionRuns{0, 2, 11}, 4, a.data(), b.data()).isOk());
  EXPECT_TRUE(sampler->microbatchChunk(0, 0, 0, PositionRuns{0, 2, 10}, 4, a.data(), b.data()).isOk());
}

}  // namespace
}  // namespace llcdist::rt
