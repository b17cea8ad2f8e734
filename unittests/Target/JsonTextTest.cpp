//===- JsonTextTest.cpp - plan JSON text is dump(1)'s, byte for byte ------===//
//
// writeJsonText streams what nlohmann's dump(1) would build as a string:
// the plan files must not change by a byte. Checked against dump(1) itself
// on every kind of value, nesting and the strings that need escapes.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Target/Plan/JsonText.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

using json = nlohmann::ordered_json;

namespace {

std::string text(const json &j) {
  std::string s;
  llvm::raw_string_ostream os(s);
  llcdist::writeJsonText(os, j);
  return s;
}

TEST(JsonTextTest, ScalarsAreDumpsText) {
  for (const json &j :
       {json(nullptr), json(true), json(false), json(0), json(-1), json(42),
        json(std::numeric_limits<int64_t>::min()), json(std::numeric_limits<int64_t>::max()),
        json(std::numeric_limits<uint64_t>::max()), json(uint64_t(7)), json(0.5), json(1e-8),
        json(-3.25e300), json(1.0), json(""), json("plain ascii / with slash"),
        json("quote \" and backslash \\"), json("tab\tnewline\ncontrol\x01"), json("del\x7f"),
        json("utf-8 \xc3\xa9 \xe2\x86\x92")})
    EXPECT_EQ(text(j), j.dump(1)) << j.dump();
}

TEST(JsonTextTest, ContainersAreDumpsText) {
  json program = json::object();
  program["format"] = "llc-dist-program";
  program["empty_object"] = json::object();
  program["empty_array"] = json::array();
  program["buffers"] = json::array();
  for (int i = 0; i < 3; ++i) {
    json b = json::object();
    b["id"] = i;
    b["name"] = "h.\"" + std::to_string(i) + "\"";
    b["shape"] = {16, 4096};
    b["mixed"] = {1, -2, uint64_t(3), 4.5, "x"};
    b["ints"] = {std::numeric_limits<int64_t>::min(), std::numeric_limits<uint64_t>::max()};
    b["slot_offsets"] = {0, 64, 128};
    b["nested"] = {{"a", json::array({json::array(), json::object(), 1.5, nullptr})}};
    program["buffers"].push_back(std::move(b));
  }
  program["key \"with\" escapes\n"] = false;
  program["deep"] = {{{{1}}}};
  EXPECT_EQ(text(program), program.dump(1));
  // A long integer array at a deep indent: the local buffer flushes many times.
  json deep = json::array();
  for (int d = 0; d < 40; ++d)
    deep = json::array({std::move(deep)});
  json longInts = json::array();
  for (int64_t i = 0; i < 5000; ++i)
    longInts.push_back(i * 1000003 - 7);
  deep.push_back(std::move(longInts));
  EXPECT_EQ(text(deep), deep.dump(1));
  EXPECT_EQ(text(json::array()), "[]");
  EXPECT_EQ(text(json::object()), "{}");
}

TEST(JsonTextTest, InvalidUtf8ThrowsAsDumpDoes) {
  const json bad = std::string("\xff");
  EXPECT_THROW(bad.dump(1), json::type_error);
  EXPECT_THROW(text(bad), json::type_error);
}

} // namespace
