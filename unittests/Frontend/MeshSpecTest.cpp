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
