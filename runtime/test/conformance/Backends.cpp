#include "Backends.h"

#include "llcdist/runtime/CpuBackend.h"
#ifdef LLCDIST_CONFORMANCE_CUDA
#include "llcdist/runtime/CudaBackend.h"
#endif

#include <cmath>
#include <cstring>

namespace llcdist::rt::conformance {

bool Tolerance::within(double got, double want) const {
  if (bitwise()) return std::memcmp(&got, &want, sizeof got) == 0 || got == want;
  if (std::isnan(want)) return std::isnan(got);
  return got == want || std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

namespace {

std::vector<BackendUnderTest> listBackends() {
  std::vector<BackendUnderTest> all;
  BackendUnderTest cpu;
  cpu.name = "cpu";
  cpu.make = [](int rank) -> StatusOr<std::unique_ptr<Backend>> {
    CpuBackendOptions o;
    o.rank = rank;
    return makeCpuBackend(o);
  };
  cpu.factory = cpuBackendFactory();
  all.push_back(std::move(cpu));
#ifdef LLCDIST_CONFORMANCE_CUDA
  BackendUnderTest cuda;
  cuda.name = "cuda";
  std::string why;
  if (cudaDevices(&why) == 0) cuda.unavailable = "no CUDA device (" + why + ")";
  // Deterministic kernels: a run's steps replayed as a CUDA graph must repeat the op-by-op bits.
  cuda.make = [](int rank) {
    CudaBackendOptions o;
    o.rank = rank;
    o.deterministic = true;
    return makeCudaBackend(o);
  };
  cuda.factory = [](int rank, Communicator* communicator) {
    CudaBackendOptions o;
    o.rank = rank;
    o.communicator = communicator;
    o.deterministic = true;
    return makeCudaBackend(o);
  };
  // The GPU kernel tests' tolerances (runtime/test/gpu/CudaKernelFamiliesTest.cpp, CudaBf16KernelsTest.cpp):
  // f32 arithmetic in another order; bf16 results one bf16 ulp (2^-8 relative) apart, with margin.
  cuda.f32 = {1e-5, 1e-4};
  cuda.bf16 = {1e-5, 1.0 / 128};
  all.push_back(std::move(cuda));
#endif
  return all;
}

}  // namespace

const std::vector<BackendUnderTest>& backendsUnderTest() {
  static const std::vector<BackendUnderTest> all = listBackends();
  return all;
}

std::string backendTestName(const ::testing::TestParamInfo<BackendUnderTest>& info) { return info.param.name; }

}  // namespace llcdist::rt::conformance
