//===- MeshSpecTest.cpp - the --mesh spec ---------------------------------===//
#include "llcdist/Support/MeshSpec.h"

#include <gtest/gtest.h>

using namespace llcdist;

TEST(MeshSpec, Parses) {
  MeshSpec m;
  ASSERT_FALSE(parseMeshSpec("tp=4,dp=2", m));
  EXPECT_EQ(m.dp, 2);
  EXPECT_EQ(m.tp, 4);
  EXPECT_EQ(m.pp, 1);
  EXPECT_EQ(m.worldSize(), 8);
  EXPECT_EQ(m.str(), "dp=2,tp=4,pp=1");
  ASSERT_FALSE(parseMeshSpec("dp=1,tp=8,pp=16", m));
  EXPECT_EQ(m.worldSize(), 128);
}

TEST(MeshSpec, Errors) {
  MeshSpec m;
  auto expectError = [&](const char *spec, const char *what) {
    auto err = parseMeshSpec(spec, m);
    ASSERT_TRUE(err) << spec;
    EXPECT_NE(err->find(what), std::string::npos) << *err;
    EXPECT_NE(err->find(std::string("'") + spec + "'"), std::string::npos);
  };
  expectError("", "empty");
  expectError("dp", "is not AXIS=DEGREE");
  expectError("dp=2,xp=2", "unknown axis 'xp'");
  expectError("dp=2,dp=4", "given twice");
  expectError("dp=two", "is not an integer");
  expectError("tp=0", "must be >= 1");
  expectError("dp=2,", "is not AXIS=DEGREE");
  expectError("dp=2x", "is not an integer");
}

TEST(MeshSpec, RankOrder) {
  MeshSpec m;
  ASSERT_FALSE(parseMeshSpec("dp=2,tp=4,pp=3", m));
  // Megatron's default: tp fastest, then dp, then pp.
  EXPECT_EQ(m.rankOrderStr(), "tp,dp,pp");
  EXPECT_EQ(m.rank(0, 1, 0), 1);
  EXPECT_EQ(m.rank(1, 0, 0), 4);
  EXPECT_EQ(m.rank(0, 0, 1), 8);
  EXPECT_EQ(m.rank(1, 3, 2), 2 * 8 + 1 * 4 + 3);
  ASSERT_FALSE(parseRankOrder("dp,tp,pp", m));
  EXPECT_EQ(m.rank(1, 0, 0), 1);
  EXPECT_EQ(m.rank(0, 1, 0), 2);
  EXPECT_EQ(m.rank(1, 3, 2), 2 * 8 + 3 * 2 + 1);
  auto err = parseRankOrder("tp,dp", m);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("expected a permutation of dp, tp, pp"), std::string::npos);
  EXPECT_TRUE(parseRankOrder("tp,tp,pp", m));
}

// fuzz/regressions/mesh_spec/ (issue #16): degrees whose product overflowed
// int64 in worldSize(). A mesh is at most 2^24 ranks, the runtime's bound.
TEST(MeshSpec, WorldSizeBound) {
  MeshSpec m;
  ASSERT_FALSE(parseMeshSpec("dp=16777216", m));
  EXPECT_EQ(m.worldSize(), 16777216);
  ASSERT_FALSE(parseMeshSpec("dp=4096,tp=64,pp=64", m));
  EXPECT_EQ(m.worldSize(), 16777216);
  auto err = parseMeshSpec("dp=16777217", m);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("degree of dp must be at most 16777216"), std::string::npos) << *err;
  err = parseMeshSpec("pp=27777777777777770,dp=22,tp=2707722777", m);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("degree of pp must be at most 16777216"), std::string::npos) << *err;
  err = parseMeshSpec("dp=4096,tp=4096,pp=2", m);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("world size dp × tp × pp × cp must be at most 16777216"), std::string::npos) << *err;
  EXPECT_EQ(m.worldSize(), 16777216); // unchanged by a refused spec
  err = parseMeshSpec("dp=4096,tp=64,pp=64,cp=2", m);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("world size dp × tp × pp × cp must be at most 16777216"), std::string::npos) << *err;
}

// Context parallelism (issue #32): a fourth axis, after tp in Megatron's
// order; a mesh without cp keeps its three-axis order and text.
TEST(MeshSpec, ContextParallelAxis) {
  MeshSpec m;
  ASSERT_FALSE(parseMeshSpec("dp=2,cp=4,tp=2", m));
  EXPECT_EQ(m.cp, 4);
  EXPECT_EQ(m.worldSize(), 16);
  EXPECT_EQ(m.str(), "dp=2,tp=2,pp=1,cp=4");
  EXPECT_EQ(m.rankOrderStr(), "tp,cp,dp,pp");
  // tp fastest, then cp, then dp.
  EXPECT_EQ(m.rank(0, 1, 0, 0), 1);
  EXPECT_EQ(m.rank(0, 0, 0, 1), 2);
  EXPECT_EQ(m.rank(1, 0, 0, 0), 8);
  EXPECT_EQ(m.rank(1, 1, 0, 3), 8 + 3 * 2 + 1);
  // With cp the order must name it.
  auto err = parseRankOrder("tp,dp,pp", m);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("the mesh has cp=4, so the order must be a permutation of dp, tp, pp, cp"), std::string::npos)
      << *err;
  ASSERT_FALSE(parseRankOrder("cp,tp,dp,pp", m));
  EXPECT_EQ(m.rank(0, 1, 0, 0), 4);
  EXPECT_EQ(m.rank(0, 0, 0, 1), 1);
  // cp = 1: the mesh as before.
  ASSERT_FALSE(parseMeshSpec("dp=2,tp=2", m));
  EXPECT_EQ(m.str(), "dp=2,tp=2,pp=1");
  EXPECT_EQ(m.rankOrderStr(), "tp,dp,pp");
  EXPECT_TRUE(parseMeshSpec("dp=2,cp=0", m));
}
