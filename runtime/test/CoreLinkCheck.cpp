// The runtime's layering, checked by the linker: loading a plan (with every op family's checker) and
// binding it in an interpreter needs only llcdist_runtime_core, the library the compiler's plan
// verifier links; no kernel, BLAS or CPU-backend symbol may be reachable from it. Run as a test, it
// also runs the core's start-up check that every op kind has a definition.
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Plan.h"

#include "../src/ops/OpDefs.h"

#include <cstdio>

int main() {
  using namespace llcdist::rt;
  // Referenced so that the linker must resolve the loader and the interpreter from the core alone.
  StatusOr<Plan> (*volatile load)(const std::string&) = &loadPlan;
  volatile auto create = &Interpreter::create;
  (void)load;
  (void)create;
  const Status s = ops::checkOpDefs();
  if (!s.isOk()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  return 0;
}
