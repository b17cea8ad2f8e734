// Collectives over a set of mesh axes ("dp+cp": Megatron's data-parallel group under context parallelism
// is dp × cp; docs/plan-format.md "Multi-rank plans"): parseAxisSet / axisSetName / axisSetError; the
// group, member index, sub-group and name (axisSetOfGroup) of every set under every rank order, against
// the brute-force group (the ranks sharing the other coordinates, in rank order); all_reduce,
// reduce_scatter, all_gather, all_to_all and shard_slice over "dp+cp" through interpreters on the
// in-process communicator, against sums computed here; the loader's errors for bad sets and for a set
// where one axis is needed (send / recv, shard_axis, replica_axis); "axis dp+cp" in the communicator's
// timeout and in the flight diagnosis.
#include "InProcessRanksUtil.h"
#include "PlanTestUtil.h"
#include "TestUtil.h"

#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Diagnose.h"
#include "llcdist/runtime/FlightRecorder.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Mesh.h"
#include "llcdist/runtime/Plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <thread>

namespace llcdist::rt {
namespace {

using testing::expectParts;
using testing::json;
using testing::PlanBuilder;
using testing::runRanks;

// ---- parsing and naming ---------------------------------------------------------------------------------

TEST(AxisSetTest, ParseAndNameRoundTrip) {
  const char* names[] = {"dp", "tp", "pp", "cp"};  // MeshAxis order
  for (unsigned bits = 1; bits < 16; ++bits) {
    std::string want;  // the names in MeshAxis order, joined by '+', written out here
    for (unsigned a = 0; a < 4; ++a)
      if (bits >> a & 1u) want += (want.empty() ? "" : "+") + std::string(names[a]);
    const AxisSet s{bits};
    EXPECT_EQ(axisSetName(s), want);
    const auto back = parseAxisSet(want);
    ASSERT_TRUE(back.has_value()) << want;
    EXPECT_EQ(back->bits, bits) << want;
    EXPECT_EQ(axisSetError(want), "") << want;
    EXPECT_EQ(s.single().has_value(), __builtin_popcount(bits) == 1) << want;
  }
  EXPECT_EQ(parseAxisSet("cp+dp"), parseAxisSet("dp+cp"));  // any order, one name
  EXPECT_EQ(axisSetName(*parseAxisSet("cp+dp")), "dp+cp");
  EXPECT_EQ(parseAxisSet("dp"), AxisSet::of(MeshAxis::kDp));
  EXPECT_EQ(parseAxisSet("cp")->single(), MeshAxis::kCp);
  EXPECT_TRUE(parseAxisSet("dp+cp")->has(MeshAxis::kDp));
  EXPECT_TRUE(parseAxisSet("dp+cp")->has(MeshAxis::kCp));
  EXPECT_FALSE(parseAxisSet("dp+cp")->has(MeshAxis::kTp));
  EXPECT_FALSE(parseAxisSet("dp+cp")->single().has_value());
}

TEST(AxisSetTest, RejectsEmptyUnknownAndRepeatedNames) {
  for (const char* bad : {"", "+", "dp+", "+dp", "dp++cp", "dp+dp", "dp+cp+dp", "dp+xx", "DP", "dp cp", "dp,cp", "xp",
                          "dp+ep", "edp+dp", "ep+edp", "ep+edp+cp"})
    EXPECT_FALSE(parseAxisSet(bad).has_value()) << bad;
  const std::string forms = R"(expected "dp", "tp", "pp", "cp", or several joined by '+', e.g. "dp+cp")";
  for (auto [name, why] :
       {std::pair{"dp+dp", R"(mesh axis "dp" is named twice in "dp+dp")"},
        std::pair{"cp+tp+cp", R"(mesh axis "cp" is named twice in "cp+tp+cp")"},
        std::pair{"dp+xx", R"(unknown mesh axis "xx" in "dp+xx")"}, std::pair{"xp", R"(unknown mesh axis "xp")"},
        std::pair{"dp+ep", R"("dp+ep" names dp twice: ep and edp are parts of dp (ep × edp = dp))"},
        std::pair{"ep+edp", R"("ep+edp" names dp twice)"}, std::pair{"dp+", R"(empty mesh axis name in "dp+")"},
        std::pair{"", R"(empty mesh axis name "")"}}) {
    const std::string e = axisSetError(name);
    EXPECT_NE(e.find(why), std::string::npos) << e;
    EXPECT_NE(e.find(forms), std::string::npos) << e;
  }
}

// ---- mesh groups ----------------------------------------------------------------------------------------

// The ranks that share every coordinate of `rank` outside `s`, in rank order: the group, by brute force.
std::vector<int> bruteGroup(const Mesh& m, int rank, AxisSet s) {
  std::vector<int> g;
  for (int q = 0; q < int(m.worldSize()); ++q) {
    bool same = true;
    for (MeshAxis a : Mesh::kAllAxes)
      if (!s.has(a) && m.coord(q, a) != m.coord(rank, a)) same = false;
    if (same) g.push_back(q);
  }
  return g;
}

// A derived axis with base axes other than dp: the experts' data-parallel group under context
// parallelism, edp+cp (and ep+cp), against the brute force on every rank, in two rank orders.
TEST(AxisSetMeshTest, DerivedAxisWithContextParallelism) {
  for (const char* name : {"edp+cp", "ep+cp", "edp+tp", "ep+cp+tp"}) {
    const AxisSet s = *parseAxisSet(name);
    EXPECT_EQ(axisSetError(name), "") << name;
    EXPECT_EQ(*parseAxisSet(axisSetName(s)), s) << name;
  }
  // dp=4, ep=2, cp=2, tp=2, order tp, cp, dp, pp: rank = tp + 2·cp + 4·d; edp holds d mod 2, varies d / 2.
  Mesh m = Mesh::make(4, 2, 1, 2);
  m.ep = 2;
  const AxisSet edpcp = *parseAxisSet("edp+cp"), epcp = *parseAxisSet("ep+cp");
  EXPECT_EQ(m.axisSize(edpcp), 4);
  EXPECT_EQ(m.group(0, edpcp), (std::vector<int>{0, 2, 8, 10}));  // d ∈ {0, 2}, cp ∈ {0, 1}, tp 0
  EXPECT_EQ(m.group(5, edpcp), (std::vector<int>{5, 7, 13, 15}));
  EXPECT_EQ(m.coord(10, edpcp), 3);
  EXPECT_EQ(m.group(0, epcp), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(m.axisSetOfGroup({0, 2, 8, 10}), edpcp);
  for (int order = 0; order < 2; ++order) {
    if (order == 1) {  // dp fastest: rank = d + 4·cp + 8·tp
      ASSERT_TRUE(m.setOrder({MeshAxis::kDp, MeshAxis::kCp, MeshAxis::kTp, MeshAxis::kPp}));
    }
    for (const char* name : {"edp+cp", "ep+cp", "edp+tp", "ep+cp+tp"}) {
      const AxisSet s = *parseAxisSet(name);
      for (int r = 0; r < int(m.worldSize()); ++r) {
        // The ranks equal to r outside the set, in rank order (dp's coordinate is ep's and edp's).
        std::vector<int> want;
        for (int q = 0; q < int(m.worldSize()); ++q) {
          bool same = true;
          for (MeshAxis a : {MeshAxis::kTp, MeshAxis::kPp, MeshAxis::kCp, MeshAxis::kEp, MeshAxis::kEdp})
            if (!s.has(a) && m.coord(q, a) != m.coord(r, a)) same = false;
          if (same) want.push_back(q);
        }
        const std::vector<int> g = m.group(r, s);
        EXPECT_EQ(g, want) << name << " rank " << r << " order " << order;
        EXPECT_EQ(g[size_t(m.coord(r, s))], r) << name << " rank " << r;
      }
    }
  }
}

TEST(AxisSetMeshTest, DpCpGroupsOnTheDefaultOrderAndDpFastest) {
  // dp=2, tp=2, cp=2, order tp, cp, dp, pp: rank = tp + 2·cp + 4·dp; the dp+cp member index cp + 2·dp.
  Mesh m = Mesh::make(2, 2, 1, 2);
  const AxisSet dpcp = *parseAxisSet("dp+cp");
  EXPECT_EQ(m.axisSize(dpcp), 4);
  EXPECT_EQ(m.group(0, dpcp), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(m.group(7, dpcp), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(m.coord(4, dpcp), 2);  // dp 1, cp 0
  EXPECT_EQ(m.coord(2, dpcp), 1);  // dp 0, cp 1
  EXPECT_EQ(m.subGroup(6, dpcp, 2), (std::vector<int>{4, 6}));
  EXPECT_EQ(m.axisSetOfGroup({0, 2, 4, 6}), dpcp);
  EXPECT_EQ(m.axisSetOfGroup({0, 4}), AxisSet::of(MeshAxis::kDp));
  EXPECT_FALSE(m.axisSetOfGroup({0, 4, 2, 6}).has_value());  // not in member order
  EXPECT_FALSE(m.axisSetOfGroup({0, 6}).has_value());
  // dp fastest: rank = dp + 2·cp + 4·tp.
  ASSERT_TRUE(m.setOrder({MeshAxis::kDp, MeshAxis::kCp, MeshAxis::kTp, MeshAxis::kPp}));
  EXPECT_EQ(m.group(5, dpcp), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(m.coord(6, dpcp), 2);  // dp 0, cp 1: member dp + 2·cp
  EXPECT_EQ(m.axisSetOfGroup({4, 5, 6, 7}), dpcp);
}

// Every set of axes under every rank order, on two meshes: the group is the brute-force one, the rank's
// member index its position there, the sub-groups consecutive members, and the group's name the set's
// axes of size > 1 (a smaller set gives the same ranks when an axis has size 1).
TEST(AxisSetMeshTest, EverySetUnderEveryOrderIsTheBruteForceGroup) {
  for (Mesh m : {Mesh::make(2, 2, 1, 2), Mesh::make(2, 3, 2, 2)}) {
    std::array<MeshAxis, 4> order = Mesh::kAllAxes;  // dp, tp, pp, cp: sorted, for next_permutation
    do {
      ASSERT_TRUE(m.setOrder({order.begin(), order.end()}));
      SCOPED_TRACE(m.describe());
      for (unsigned bits = 1; bits < 16; ++bits) {
        const AxisSet s{bits};
        SCOPED_TRACE(axisSetName(s));
        AxisSet named;
        for (MeshAxis a : Mesh::kAllAxes)
          if (s.has(a) && m.axisSize(a) > 1) named.bits |= AxisSet::of(a).bits;
        for (int r = 0; r < int(m.worldSize()); ++r) {
          const std::vector<int> g = bruteGroup(m, r, s);
          ASSERT_EQ(m.group(r, s), g) << "rank " << r;
          EXPECT_EQ(m.axisSize(s), int64_t(g.size()));
          const int64_t c = std::find(g.begin(), g.end(), r) - g.begin();
          EXPECT_EQ(m.coord(r, s), c) << "rank " << r;
          const int64_t n = int64_t(g.size());
          for (int64_t k = 1; k <= n + 1; ++k) {
            const std::vector<int> sub = m.subGroup(r, s, k);
            // Consecutive members for a proper divisor, else the whole group.
            const bool divides = k < n && n % k == 0;
            const std::vector<int> want =
                divides ? std::vector<int>(g.begin() + c / k * k, g.begin() + c / k * k + k) : g;
            EXPECT_EQ(sub, want) << r << " " << k;
          }
          // A group of one rank has no axis.
          const std::optional<AxisSet> wantName = g.size() >= 2 ? std::optional<AxisSet>(named) : std::nullopt;
          EXPECT_EQ(m.axisSetOfGroup(g), wantName) << "rank " << r;
        }
      }
    } while (std::next_permutation(order.begin(), order.end()));
  }
}

// ---- plans over dp+cp -----------------------------------------------------------------------------------

// A dp = 2, tp = 2, cp = 2 plan (8 ranks); `order` empty: the default tp, cp, dp, pp.
PlanBuilder meshPlan(const std::vector<std::string>& order = {}) {
  PlanBuilder b(16, 8, 1, 1);
  b.manifest["features"] = {"context_parallel"};
  b.manifest["mesh"] = {{"dp", 2}, {"tp", 2}, {"pp", 1}, {"cp", 2}};
  if (!order.empty()) b.manifest["mesh"]["rank_order"] = order;
  b.manifest["batch"]["dp"] = 2;
  b.manifest["batch"]["global_batch"] = 2;
  b.manifest["programs"][0]["ranks"] = {0, 1, 2, 3, 4, 5, 6, 7};
  return b;
}

// Every collective over "dp+cp" (and shard_slice) on dp=2, tp=2, cp=2, under the default order and with dp
// fastest. The dp+cp group of a rank is the ranks with its tp coordinate, in rank order (bruteGroup over the
// single-axis coordinates), its member index c the rank's position there; inputs are small integers, so
// every sum is exact.
TEST(AxisSetPlanTest, CollectivesOverDpCpActOnTheRanksSharingTheTpCoordinate) {
  for (const std::vector<std::string>& order :
       {std::vector<std::string>{}, std::vector<std::string>{"dp", "cp", "tp", "pp"}}) {
    SCOPED_TRACE(order.empty() ? "default order" : "dp fastest");
    PlanBuilder b = meshPlan(order);
    const int64_t O = 2, I = 3, n = 4;
    const int64_t ar = b.buffer("ar", "activation", {5}), ar2 = b.buffer("ar2", "activation", {3}),
                  ar3 = b.buffer("ar3", "activation", {2});
    const int64_t z = b.buffer("z", "activation", {O, n * I}), rs = b.buffer("rs", "activation", {O, I}),
                  g = b.buffer("g", "activation", {O, n * I}), sl = b.buffer("sl", "activation", {O, I});
    const int64_t x = b.buffer("x", "activation", {O, I}), y = b.buffer("y", "activation", {O, n * I});
    const int64_t a = b.buffer("a", "activation", {n * 2}), ay = b.buffer("ay", "activation", {n * 2});
    b.op("s", "all_reduce", {{"x", {ar}}}, {{"axis", "dp+cp"}, {"op", "sum"}});
    b.op("s", "all_reduce", {{"x", {ar2}}}, {{"axis", "dp+cp"}, {"op", "sum"}, {"group_size", 2}});
    b.op("s", "all_reduce", {{"x", {ar3}}}, {{"axis", "cp+dp"}, {"op", "avg"}});  // the same set
    b.op("s", "reduce_scatter", {{"x", z}, {"y", rs}}, {{"axis", "dp+cp"}, {"outer", O}, {"inner", I}, {"op", "sum"}});
    b.op("s", "all_gather", {{"x", rs}, {"y", g}}, {{"axis", "dp+cp"}, {"outer", O}, {"inner", I}});
    b.op("s", "all_gather", {{"x", x}, {"y", y}}, {{"axis", "dp+cp"}, {"outer", O}, {"inner", I}});
    b.op("s", "all_to_all", {{"x", a}, {"y", ay}},
         {{"axis", "dp+cp"}, {"outer", 1}, {"mid", 1}, {"inner", 2}, {"x_rank_dim", 1}});
    b.op("s", "shard_slice", {{"x", z}, {"y", sl}}, {{"axis", "dp+cp"}, {"outer", O}, {"inner", I}});
    b.action("s");
    // Rank q's inputs: ar[k] = (q+1)(k+1) (ar2, ar3 alike), z[o, j] = 100q + 12o + j, x[o, k] = 10q + 3o + k,
    // a[j] = 1000q + j.
    auto zv = [](int q, int64_t o, int64_t j) { return float(100 * q + 12 * o + j); };
    auto xv = [](int q, int64_t o, int64_t k) { return float(10 * q + 3 * o + k); };
    auto av = [](int q, int64_t j) { return float(1000 * q + j); };
    auto ranks = runRanks(b, [&](int q, Interpreter& it) -> Status {
      for (auto [id, count] : {std::pair{ar, 5}, std::pair{ar2, 3}, std::pair{ar3, 2}}) {
        std::vector<float> v;
        for (int k = 0; k < count; ++k) v.push_back(float((q + 1) * (k + 1)));
        LLCDIST_RETURN_IF_ERROR(it.writeF32(id, v.data()));
      }
      std::vector<float> zb, xb, ab;
      for (int64_t o = 0; o < O; ++o)
        for (int64_t j = 0; j < n * I; ++j) zb.push_back(zv(q, o, j));
      for (int64_t o = 0; o < O; ++o)
        for (int64_t k = 0; k < I; ++k) xb.push_back(xv(q, o, k));
      for (int64_t j = 0; j < n * 2; ++j) ab.push_back(av(q, j));
      LLCDIST_RETURN_IF_ERROR(it.writeF32(z, zb.data()));
      LLCDIST_RETURN_IF_ERROR(it.writeF32(x, xb.data()));
      return it.writeF32(a, ab.data());
    });
    ASSERT_TRUE(ranks);
    for (int r = 0; r < 8; ++r)
      ASSERT_TRUE(ranks->status[size_t(r)].isOk()) << "rank " << r << ": " << ranks->status[size_t(r)].message();
    const Mesh& mesh = ranks->plan.manifest.mesh();
    for (int r = 0; r < 8; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      const std::vector<int> members =
          bruteGroup(mesh, r, AxisSet{AxisSet::of(MeshAxis::kDp).bits | AxisSet::of(MeshAxis::kCp).bits});
      ASSERT_EQ(members.size(), 4u);
      for (int q : members) ASSERT_EQ(mesh.coord(q, MeshAxis::kTp), mesh.coord(r, MeshAxis::kTp));
      const int64_t c = std::find(members.begin(), members.end(), r) - members.begin();
      Interpreter& it = *ranks->in[size_t(r)];
      const auto arv = it.readF32(ar).value(), ar2v = it.readF32(ar2).value(), ar3v = it.readF32(ar3).value();
      for (int k = 0; k < 5; ++k) {
        float sum = 0;
        for (int q : members) sum += float((q + 1) * (k + 1));
        EXPECT_EQ(arv[size_t(k)], sum) << "all_reduce k " << k;
        if (k < 2) {
          EXPECT_EQ(ar3v[size_t(k)], sum * 0.25f) << "avg k " << k;
        }
      }
      for (int k = 0; k < 3; ++k) {  // sub-group of members 2⌊c/2⌋ and 2⌊c/2⌋ + 1
        const int64_t first = c / 2 * 2;
        EXPECT_EQ(ar2v[size_t(k)],
                  float((members[size_t(first)] + 1) * (k + 1) + (members[size_t(first + 1)] + 1) * (k + 1)))
            << "group_size 2, k " << k;
      }
      const auto rsv = it.readF32(rs).value(), gv = it.readF32(g).value(), slv = it.readF32(sl).value();
      const auto yv = it.readF32(y).value(), ayv = it.readF32(ay).value();
      for (int64_t o = 0; o < O; ++o)
        for (int64_t k = 0; k < I; ++k) {
          float sum = 0;  // reduce_scatter: the sum of block c
          for (int q : members) sum += zv(q, o, c * I + k);
          EXPECT_EQ(rsv[size_t(o * I + k)], sum) << "reduce_scatter o " << o << " k " << k;
          EXPECT_EQ(slv[size_t(o * I + k)], zv(r, o, c * I + k)) << "shard_slice o " << o << " k " << k;
          for (int64_t i = 0; i < n; ++i) {
            float blockSum = 0;  // all_gather of the reduce_scatter: member i's block, the sum of block i
            for (int q : members) blockSum += zv(q, o, i * I + k);
            EXPECT_EQ(gv[size_t(o * n * I + i * I + k)], blockSum) << "gathered o " << o << " member " << i;
            EXPECT_EQ(yv[size_t(o * n * I + i * I + k)], xv(members[size_t(i)], o, k)) << "all_gather member " << i;
          }
        }
      for (int64_t i = 0; i < n; ++i)  // all_to_all: block i from member i, its block c
        for (int64_t k = 0; k < 2; ++k)
          EXPECT_EQ(ayv[size_t(i * 2 + k)], av(members[size_t(i)], c * 2 + k)) << "all_to_all member " << i;
    }
  }
}

// The loader: a bad set names the accepted forms; a set where one axis is needed names the attr.
TEST(AxisSetPlanTest, LoaderRefusesBadSetsAndSetsWhereOneAxisIsNeeded) {
  auto load = [](const std::function<void(PlanBuilder&)>& add) {
    PlanBuilder b = meshPlan();
    add(b);
    b.action("s");
    return testing::parsePlan(b, false).status();
  };
  auto allReduce = [&](json attrs) {
    return load([=](PlanBuilder& b) { b.op("s", "all_reduce", {{"x", {b.buffer("x", "activation", {4})}}}, attrs); });
  };
  const std::string at = "subroutines[0].ops[0]";
  const std::string forms = R"("dp", "tp", "pp", "cp", or several joined by '+', e.g. "dp+cp")";
  EXPECT_TRUE(allReduce({{"axis", "dp+cp"}, {"op", "sum"}}).isOk());
  EXPECT_TRUE(allReduce({{"axis", "tp+cp+dp"}, {"op", "sum"}}).isOk());
  expectParts(allReduce({{"axis", "dp+dp"}, {"op", "sum"}}),
              {"program-0.json", at + ".attrs.axis", R"(mesh axis "dp" is named twice in "dp+dp")", forms});
  expectParts(allReduce({{"axis", "dp+xx"}, {"op", "sum"}}),
              {at + ".attrs.axis", R"(unknown mesh axis "xx" in "dp+xx")", forms});
  expectParts(allReduce({{"axis", "dp+"}, {"op", "sum"}}), {at + ".attrs.axis", R"(empty mesh axis name in "dp+")"});
  expectParts(allReduce({{"axis", "sp"}, {"op", "sum"}}), {at + ".attrs.axis", R"(unknown mesh axis "sp")", forms});
  expectParts(allReduce({{"axis", "dp+cp"}, {"op", "sum"}, {"group_size", 3}}),
              {at + ".attrs.group_size", R"(do not divide axis "dp+cp" of size 4)"});
  // The size of a set is the product of its axes': all_gather's y is outer × 4 × inner.
  expectParts(load([](PlanBuilder& b) {
                b.op("s", "all_gather",
                     {{"x", b.buffer("x", "activation", {3})}, {"y", b.buffer("y", "activation", {6})}},
                     {{"axis", "dp+cp"}, {"outer", 1}, {"inner", 3}});
              }),
              {at + ".args.y", "outer×n(dp+cp)×inner = 12"});
  // send / recv stay on one axis (their peer is a coordinate of it).
  for (const char* op : {"send", "recv"}) {
    const Status s = load([&](PlanBuilder& b) {
      const int64_t buf = b.buffer("x", "activation", {4});
      b.op("s", op, {{std::string(op) == "send" ? "x" : "y", buf}}, {{"axis", "dp+cp"}, {"shift", 1}, {"tag", 0}});
    });
    expectParts(s, {at + ".attrs.axis", R"(axis "dp+cp" names a set of mesh axes)",
                    std::string(op) + "'s axis needs a single axis"});
  }
  // shard_axis and replica_axis too.
  expectParts(
      load([](PlanBuilder& b) {
        const int64_t x = b.buffer("x", "activation", {1, 4, 1, 2}), y = b.buffer("y", "activation", {1, 4, 1, 2});
        b.op("s", "rope_fwd", {{"x", x}, {"y", y}},
             {{"B", 1}, {"S", 4}, {"n", 1}, {"hd", 2}, {"theta", 10000.0}, {"shard_axis", "tp+cp"}});
      }),
      {at + ".attrs.shard_axis", "rope_fwd's shard_axis needs a single axis"});
  expectParts(
      load([](PlanBuilder& b) {
        const int64_t g = b.buffer("g", "grad", {4}), sq = b.buffer("sq", "scratch", {1}, "f64");
        b.op("s", "grad_norm_sq", {{"replica_shards", {g}}, {"sq", sq}}, {{"replicas", 1}, {"replica_axis", "dp+cp"}});
      }),
      {at + ".attrs.replica_axis", "grad_norm_sq's replica_axis needs a single axis"});
}

// ---- messages -------------------------------------------------------------------------------------------

// A dp+cp member that never arrives: the waiting member's error names the group's axis as the set.
TEST(AxisSetMessageTest, TimeoutNamesTheDpCpAxis) {
  const Mesh mesh = Mesh::make(2, 2, 1, 2);
  InProcessCommunicatorOptions o;
  o.worldSize = 8;
  o.mesh = mesh;
  o.timeout = std::chrono::milliseconds(150);
  auto comm = makeInProcessCommunicator(o);
  float v[4] = {1, 2, 3, 4};
  const Status s = comm->allReduce(0, mesh.group(0, *parseAxisSet("dp+cp")), v, 4, CommDType::kF32, ReduceOp::kSum);
  expectParts(s, {"all_reduce(sum, 4 f32) on axis dp+cp, group [0, 2, 4, 6]", "missing: rank 2 (member 1)"});
}

// The flight diagnosis of a hang in a dp+cp all-reduce says "axis dp+cp".
TEST(AxisSetMessageTest, DiagnosisNamesTheDpCpAxis) {
  const Mesh mesh = Mesh::make(2, 2, 1, 2);
  InProcessCommunicatorOptions o;
  o.worldSize = 8;
  o.mesh = mesh;
  o.timeout = std::chrono::milliseconds(300);
  auto comm = makeInProcessCommunicator(o);
  FlightRunInfo info;
  info.runId = "0123456789abcdef-100";
  info.worldSize = 8;
  info.mesh = mesh;
  info.commTimeoutSeconds = 1;
  FlightRecorder rec(info, {0, 1, 2, 3, 4, 5, 6, 7}, 100);
  auto recording = makeRecordingCommunicator(*comm, rec);
  std::vector<std::thread> threads;
  const AxisSet dpcp = *parseAxisSet("dp+cp");
  for (int r = 0; r < 8; ++r)
    threads.emplace_back([&, r] {
      float x = 1;
      for (int k = 0; k < (r == 6 ? 1 : 2); ++k) {  // rank 6 (member 3 of group 0, 2, 4, 6) stops after one
        Status s = recording->allReduce(r, mesh.group(r, dpcp), &x, 1, CommDType::kF32, ReduceOp::kSum);
        if (r % 2 == 1 || k == 0) {
          EXPECT_TRUE(s.isOk()) << r << " " << s.toString();
        }
      }
    });
  for (std::thread& t : threads) t.join();
  FlightSet set;
  set.dir = "mem";
  set.runId = info.runId;
  set.worldSize = 8;
  set.mesh = mesh;
  for (int r = 0; r < 8; ++r) {
    auto d = parseFlightDump(rec.dumpJson(r, "test"), "rank" + std::to_string(r));
    ASSERT_TRUE(d.isOk()) << d.status().toString();
    set.dumps.push_back(std::move(d).value());
  }
  const json d = json::parse(diagnoseJson(set));
  ASSERT_EQ(d["blocked"].size(), 1u) << d.dump();
  EXPECT_EQ(d["blocked"][0]["axis"], "dp+cp");
  EXPECT_EQ(d["blocked"][0]["never_reached"], json::array({6}));
  const std::string text = diagnoseText(set);
  EXPECT_NE(text.find("rank 6 never reached all_reduce #1 on group 0,2,4,6 (axis dp+cp)"), std::string::npos) << text;
}

}  // namespace
}  // namespace llcdist::rt
