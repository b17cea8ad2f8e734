// `--profile`: where a rank's step time goes, per op kind and kernel variant, from its measured timeline
// (Timeline.h: device intervals on the GPU, from CUDA events; host intervals on the CPU backend), with
// the achieved TFLOP/s of the GEMMs and attention (kernelFlops) and the kernel choices the rank's
// interpreter made (Interpreter::kernelChoices).
//
// What is counted: the steps from `firstStep` on (the driver skips the first step when there are
// several: it builds caches and touches memory first). A step's device time is from its first op's
// start to its last op's end on the compute lane; the per-kind times are the sums of their ops'
// intervals; "idle" is the step time no op covers (launch gaps, host work between ops, waits not
// recorded as ops). Communication ops are their own kinds (all_reduce, ...). Times are per step
// (averages over the counted steps).
//
// Core, backend-independent, tested on the CPU (ProfileTest.cpp).
#pragma once

#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Timeline.h"

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace llcdist::rt {

struct ProfileRow {
  std::string kind;     // the op kind ("linear_fwd", "all_reduce", ...)
  std::string variant;  // the kernel variant ("cublaslt", "own", ...); empty for communication
  double calls = 0;     // per step
  double ns = 0;        // device time per step
  double flops = 0;     // per step (0: not a GEMM or attention)
  double share = 0;     // ns / the step's time
  double tflops() const { return ns > 0 ? flops / ns * 1e-3 : 0; }
};

struct Profile {
  int rank = 0;
  int64_t firstStep = 0, steps = 0;  // the counted steps: [firstStep, firstStep + steps)
  double stepNs = 0;                 // device time per step (first start to last end)
  double busyNs = 0;                 // Σ of the rows' ns
  double opsPerStep = 0;
  std::vector<ProfileRow> rows;      // by ns, largest first
  double idleNs() const { return stepNs > busyNs ? stepNs - busyNs : 0; }
};

// computeProfile's firstStep: every recorded step but the earliest, when there are several (a resumed
// run starts past step 0).
inline constexpr int64_t kSkipFirstStep = -1;

// The profile of `timeline` over its steps >= firstStep (an empty profile when it has none).
Profile computeProfile(const Timeline& timeline, int64_t firstStep, int rank = 0);

// Prints the profile as a table, then the kernel choices ("kernels: ..."), one line each:
//   profile: rank 0, steps 1-3 (3), 12.34 ms/step on the device, 695 ops/step, 2.1% idle
//     op kind                 variant     calls/step    ms/step   share   TFLOP/s
//     linear_bwd_weight       cublaslt          49.0      3.210   26.0%     612.3
//     ...
//     (idle)                                               0.123    1.0%
//   kernels: linear_fwd cublaslt x49; attention_fwd cudnn x12; layer_norm_fwd own x25 (2 bf16
//     arguments converted to f32); attention_fwd own x12 (passed over cudnn: ...)
void printProfile(const Profile& profile, const std::vector<Interpreter::KernelChoiceSummary>& choices,
                  std::ostream& out);

}  // namespace llcdist::rt
