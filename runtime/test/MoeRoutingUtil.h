// Routing for the mixture-of-experts tests (MoeTest.cpp, gpu/CudaMoeKernelsTest.cpp): expert ids that
// collide heavily, so capacities drop assignments.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace llcdist::rt::testing {

// k distinct experts per token, low ids far more likely (e = E·u³); [T, k], deterministic in `seed`.
inline std::vector<int32_t> skewedExperts(int64_t T, int64_t E, int64_t k, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<int32_t> ex;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> picked;
    while (int64_t(picked.size()) < k) {
      const double v = u(gen);
      const int32_t e = int32_t(std::min<int64_t>(E - 1, int64_t(double(E) * v * v * v)));
      if (std::find(picked.begin(), picked.end(), e) == picked.end()) picked.push_back(e);
    }
    ex.insert(ex.end(), picked.begin(), picked.end());
  }
  return ex;
}

}  // namespace llcdist::rt::testing
