//===- NestingDepthTest.cpp - the nesting bound on .mlir text -------------===//
#include "llcdist/Support/NestingDepth.h"

#include <gtest/gtest.h>

#include <string>

using namespace llcdist;

namespace {
std::string nested(size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}
} // namespace

TEST(NestingDepth, AtTheLimitIsAccepted) {
  EXPECT_FALSE(checkNestingDepth(""));
  EXPECT_FALSE(checkNestingDepth(nested(kMaxMlirNestingDepth)));
  EXPECT_FALSE(checkNestingDepth(nested(3), 3));
  // Depth, not count: many shallow brackets in a row are fine.
  std::string flat;
  for (int i = 0; i < 10000; ++i)
    flat += "[{(<>)}] ";
  EXPECT_FALSE(checkNestingDepth(flat, 4));
}

TEST(NestingDepth, OneDeeperIsRefusedWhereItIsCrossed) {
  auto err = checkNestingDepth(nested(4), 3);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->line, 1u);
  EXPECT_EQ(err->column, 4u);
  EXPECT_EQ(err->limit, 3u);

  // 100,000 deep, after two lines: the error points at the 513th bracket.
  err = checkNestingDepth("module {\n  // comment\n  x = " + nested(100000));
  ASSERT_TRUE(err);
  EXPECT_EQ(err->line, 3u);
  EXPECT_EQ(err->column, 7u + kMaxMlirNestingDepth - 1); // "  x = " is 6 bytes, `{` is level 1
  std::string msg = err->describe("deep.mlir");
  EXPECT_EQ(msg.rfind("deep.mlir:3:518: nested deeper than 512 levels", 0), 0u) << msg;
  EXPECT_NE(msg.find("flatten"), std::string::npos) << msg;

  // Every bracket kind counts, mixed.
  EXPECT_TRUE(checkNestingDepth("([{<", 3));
  EXPECT_FALSE(checkNestingDepth("([{<", 4));
}

TEST(NestingDepth, StringsCommentsAndArrowsAreNotBrackets) {
  // Inside a string literal, escaped quotes included.
  EXPECT_FALSE(checkNestingDepth("\"" + std::string(1000, '[') + "\"", 2));
  EXPECT_FALSE(checkNestingDepth("\"\\\"[[[[\" []", 2));
  // After `//`, to the end of the line only.
  EXPECT_FALSE(checkNestingDepth("// [[[[[[\n[]", 2));
  EXPECT_TRUE(checkNestingDepth("// x\n[[[]]]", 2));
  // `->` and `>=` close nothing: three `(` stay open.
  EXPECT_TRUE(checkNestingDepth("(((d0) -> (d0)) (d0 >= 0) (((", 3));
  EXPECT_FALSE(checkNestingDepth("affine_map<(d0) -> (d0 + 1)>", 3));
  // An unterminated string ends at the newline, as MLIR's lexer ends it.
  EXPECT_TRUE(checkNestingDepth("\"abc\n[[[", 2));
  // A stray closer never makes the depth negative (so cannot hide nesting).
  EXPECT_TRUE(checkNestingDepth("]]]]]][[[", 2));
}
