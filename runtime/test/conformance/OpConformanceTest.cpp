// Every op kind through the interpreter on each backend, against its CPU kernel (OpCases.cpp).
#include "Backends.h"
#include "OpCases.h"

#include "llcdist/runtime/PlanSchema.h"

namespace llcdist::rt::conformance {
namespace {

namespace sc = schema;

class OpConformance : public BackendConformance {};

TEST_P(OpConformance, EveryOpMatchesTheCpuKernel) {
  const std::set<std::string> covered = runEveryOpCase(backend(), /*bf16=*/false);
  // send / recv need a second rank: PointToPointTest runs them through two interpreters; wait needs a
  // started op: AsyncPlanTest.
  for (const sc::OpSpec& spec : sc::kOpSpecs) {
    if (sc::isPointToPoint(spec.kind) || spec.kind == sc::OpKind::kWait) continue;
    EXPECT_TRUE(covered.count(std::string(spec.name))) << spec.name << " has no op case";
  }
}

// Every op again with all its float buffers bf16: the result is the f32 kernel's on the bf16 values,
// each written value rounded once (zero and cast handle bf16 themselves).
TEST_P(OpConformance, EveryOpOnBf16BuffersIsTheRoundedF32Kernel) { runEveryOpCase(backend(), /*bf16=*/true); }

INSTANTIATE_TEST_SUITE_P(Backends, OpConformance, ::testing::ValuesIn(backendsUnderTest()), backendTestName);

}  // namespace
}  // namespace llcdist::rt::conformance
