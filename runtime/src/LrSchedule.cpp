// The learning-rate schedule of a plan's manifest (Kernels.h: LrSchedule, learningRate): in the core,
// beside the loader that parses it, for the training driver whatever the backend.
#include "llcdist/runtime/Kernels.h"

#include <algorithm>
#include <cmath>

namespace llcdist::rt {

double learningRate(const LrSchedule& s, int64_t step) {
  if (step < s.warmupSteps) return s.maxLr * double(step + 1) / double(s.warmupSteps);
  if (s.kind == LrSchedule::Kind::kConstant) return s.maxLr;
  const int64_t decaySteps = s.totalSteps - s.warmupSteps;
  const double r =
      decaySteps <= 0 ? 1.0 : std::clamp(double(step - s.warmupSteps) / double(decaySteps), 0.0, 1.0);
  return s.minLr + 0.5 * (1.0 + std::cos(M_PI * r)) * (s.maxLr - s.minLr);
}

}  // namespace llcdist::rt
