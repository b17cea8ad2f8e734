// Helpers shared by the runtime tests: seeded random data and central-difference gradient checks.
#pragma once

#include "llcdist/runtime/Status.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace llcdist::rt::testing {

// `s` is an error whose message contains every one of `parts` (the file, the field, the fix...).
inline void expectParts(const Status& s, const std::vector<std::string>& parts) {
  ASSERT_FALSE(s.isOk()) << "expected an error with: " << parts[0];
  for (const std::string& p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << p << " in: " << s.message();
}

inline std::vector<float> randn(int64_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

inline std::vector<int32_t> randIds(int64_t n, int32_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(gen);
  return v;
}

// Σ w·y in double: the scalar whose gradient with respect to y is w.
inline double dot(const std::vector<float>& w, const std::vector<float>& y) {
  double s = 0.0;
  for (size_t i = 0; i < w.size(); ++i) s += double(w[i]) * y[i];
  return s;
}

// Central differences of `loss` with respect to every element of `param` (perturbed in place, then
// restored), compared with `analytic` using |num - ana| <= atol + rtol·|num|. Returns the max error;
// set LLCDIST_PRINT_GRAD_ERR=1 to print it (to size tolerances: keep them ~10x above what is seen).
inline double checkGradient(std::vector<float>& param, const std::vector<float>& analytic,
                            const std::function<double()>& loss, const std::string& what,
                            float h = 1e-2f, double atol = 3e-4, double rtol = 3e-3) {
  EXPECT_EQ(param.size(), analytic.size()) << what;
  double maxErr = 0.0;
  int failures = 0;
  for (size_t i = 0; i < param.size(); ++i) {
    const float orig = param[i];
    const float plus = orig + h, minus = orig - h;
    param[i] = plus;
    const double lp = loss();
    param[i] = minus;
    const double lm = loss();
    param[i] = orig;
    const double num = (lp - lm) / (double(plus) - double(minus));
    const double err = std::abs(num - analytic[i]);
    maxErr = std::max(maxErr, err);
    if (err > atol + rtol * std::abs(num) && failures++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: numeric " << num << " vs analytic " << analytic[i];
  }
  if (std::getenv("LLCDIST_PRINT_GRAD_ERR")) std::printf("  %s: max abs err %.3g\n", what.c_str(), maxErr);
  return maxErr;
}

// Elementwise closeness with the llm.c criterion |a - ref| <= tol + |ref|·rtol.
template <typename A, typename B>
void expectAllClose(const A& actual, const B& ref, double tol, double rtol, const std::string& what) {
  ASSERT_EQ(actual.size(), ref.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double a = actual[i], r = ref[i];
    if (!(std::abs(a - r) <= tol + std::abs(r) * rtol) && failures++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: " << a << " vs reference " << r;
  }
}

}  // namespace llcdist::rt::testing
