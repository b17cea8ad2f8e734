// The training driver's layering, checked by the linker: runTrainingOn (Train.h) links with
// llcdist_runtime_train and the core alone — no CPU kernel, no CPU backend, no BLAS — and, where the
// CUDA backend is built, with it (a GPU-only program: this file linked with llcdist_runtime_cuda).
// CMake's test runs it and then test/check-no-libs.sh on it (no CPU backend or BLAS symbol, no BLAS
// library). Run, it also checks that the driver refuses an unset RunOptions::backend with an error
// instead of choosing one.
#include "llcdist/runtime/Train.h"
#if LLCDIST_HAVE_CUDA
#include "llcdist/runtime/CudaBackend.h"
#endif

#include <cstdio>
#include <sstream>
#include <string>

int main() {
  using namespace llcdist::rt;
#if LLCDIST_HAVE_CUDA
  // Referenced so that the linker must resolve the CUDA backend beside the driver.
  volatile auto make = &makeCudaBackend;
  (void)make;
#endif
  RunOptions o;
  o.planDir = "/nonexistent-plan";  // never read: the missing backend is found first
  std::ostringstream progress;
  const Status s = runTrainingOn(o, progress);
  if (s.code() != StatusCode::kInvalidArgument || s.message().find("RunOptions::backend is unset") == std::string::npos) {
    std::fprintf(stderr, "runTrainingOn without a backend: expected InvalidArgument naming RunOptions::backend, got %s\n",
                 s.toString().c_str());
    return 1;
  }
  std::printf("runTrainingOn links without the CPU backend and refuses an unset backend: %s\n", s.toString().c_str());
  return 0;
}
