#include "llcdist/runtime/Rng.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

namespace llcdist::rt {
namespace {

TEST(PhiloxTest, KnownAnswersFromRandom123) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(InitTest, ShardsMatchTheWholeTensor) {
  const int64_t n = 1003;  // not a multiple of 4: shard edges fall inside Philox blocks
  std::vector<float> whole(n);
  initNormal(whole.data(), 42, "model.layers.0.mlp.up_proj.weight", 0, n, 0.02f);
  for (int64_t split : {1, 2, 501, 502, 1002}) {
    std::vector<float> a(split), b(n - split);
    initNormal(a.data(), 42, "model.layers.0.mlp.up_proj.weight", 0, split, 0.02f);
    initNormal(b.data(), 42, "model.layers.0.mlp.up_proj.weight", split, n - split, 0.02f);
    a.insert(a.end(), b.begin(), b.end());
    EXPECT_EQ(a, whole) << "split at " << split;
  }
  std::vector<float> u(n), u1(300), u2(n - 300);
  initUniform(u.data(), 7, "w", 0, n, -0.5f, 0.5f);
  initUniform(u1.data(), 7, "w", 0, 300, -0.5f, 0.5f);
  initUniform(u2.data(), 7, "w", 300, n - 300, -0.5f, 0.5f);
  u1.insert(u1.end(), u2.begin(), u2.end());
  EXPECT_EQ(u1, u);
}

TEST(InitTest, DeterministicAndKeyedBySeedAndName) {
  std::vector<float> a(64), b(64), c(64), d(64);
  initNormal(a.data(), 1, "wte", 0, 64, 1.0f);
  initNormal(b.data(), 1, "wte", 0, 64, 1.0f);
  initNormal(c.data(), 2, "wte", 0, 64, 1.0f);
  initNormal(d.data(), 1, "wpe", 0, 64, 1.0f);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  EXPECT_EQ(std::set<float>(a.begin(), a.end()).size(), a.size());  // no repeats
}

TEST(InitTest, MomentsAreRoughlyRight) {
  const int64_t n = 200000;
  std::vector<float> x(n);
  initNormal(x.data(), 3, "h.0.attn.c_attn.weight", 0, n, 0.02f, 1.0f);
  double s = 0, s2 = 0;
  for (float v : x) s += v;
  const double mean = s / n;
  for (float v : x) s2 += (v - mean) * (v - mean);
  EXPECT_NEAR(mean, 1.0, 3 * 0.02 / std::sqrt(double(n)) * 2);
  EXPECT_NEAR(std::sqrt(s2 / n), 0.02, 0.02 * 0.01);
  int64_t beyond2 = 0;  // P(|z| > 2) = 4.55%
  for (float v : x) beyond2 += std::abs(v - 1.0f) > 0.04f;
  EXPECT_NEAR(double(beyond2) / n, 0.0455, 0.003);

  std::vector<float> u(n);
  initUniform(u.data(), 3, "u", 0, n, -1.0f, 3.0f);
  double us = 0;
  for (float v : u) {
    ASSERT_GE(v, -1.0f);
    ASSERT_LT(v, 3.0f);
    us += v;
  }
  EXPECT_NEAR(us / n, 1.0, 0.02);

  std::vector<float> ones(5);
  fillConstant(ones.data(), 5, 1.0f);
  EXPECT_EQ(ones, std::vector<float>(5, 1.0f));
}

}  // namespace
}  // namespace llcdist::rt
