// The backend conformance suite's backends: every backend this build has, each run through the same
// cases (IREE's CTS model). The CPU backend is always built and is the reference; the CUDA backend is
// listed where the build has it (LLCDIST_CONFORMANCE_CUDA), and its cases skip, saying why, on a
// machine without a usable device. A backend is compared with the CPU reference bit for bit
// (tolerances 0) or within the GPU kernel tests' tolerances (|got - cpu| <= atol + rtol·|cpu|).
#pragma once

#include "llcdist/runtime/Backend.h"
#include "llcdist/runtime/Train.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace llcdist::rt::conformance {

struct Tolerance {
  double atol = 0, rtol = 0;
  bool bitwise() const { return atol == 0 && rtol == 0; }
  bool within(double got, double want) const;
};

struct BackendUnderTest {
  std::string name;
  // "" when the backend can run on this machine, else why not (its cases skip with it).
  std::string unavailable;
  // A backend for `rank` of a one-process run without a communicator.
  std::function<StatusOr<std::unique_ptr<Backend>>(int rank)> make;
  // The training runner's factory (RunOptions::backend).
  BackendFactory factory;
  // Against the CPU reference: f32 results, and results stored in bf16.
  Tolerance f32, bf16;
};

// gtest prints a parameter by its name.
inline void PrintTo(const BackendUnderTest& b, std::ostream* os) { *os << b.name; }

// The backends of this build, the CPU first.
const std::vector<BackendUnderTest>& backendsUnderTest();

// The parameter's name in test names ("cpu", "cuda").
std::string backendTestName(const ::testing::TestParamInfo<BackendUnderTest>& info);

// A suite parameterized over the backends: `GetParam()` is the backend under test; SetUp skips the
// case where the backend cannot run here.
class BackendConformance : public ::testing::TestWithParam<BackendUnderTest> {
 protected:
  void SetUp() override {
    if (!GetParam().unavailable.empty()) GTEST_SKIP() << GetParam().name << ": " << GetParam().unavailable;
  }
  const BackendUnderTest& backend() const { return GetParam(); }
};

}  // namespace llcdist::rt::conformance
