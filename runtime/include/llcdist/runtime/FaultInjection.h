// Fault injection for the tests of hangs and dead ranks (docs/cluster.md "Faults"):
//   LLCDIST_FAULT=rank:R,step:S,op:K,kind:exit|stall|delay[,seconds:X]
// makes rank R, at its K-th communication call (0-based: collectives, sends and receives, in the
// order the rank issues them) of training step S (0-based), print what it does to stderr and then
//   exit  end its process at once (exit status 3), as a crashed rank;
//   stall wait until the job ends (a rank that is a thread: until the communicator is aborted, then
//         its call fails Aborted), as a hung rank;
//   delay wait X seconds (default 1) and go on.
// op defaults to 0. A malformed value is an error naming LLCDIST_FAULT and the field.
#pragma once

#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/Status.h"

#include <memory>
#include <optional>
#include <string>

namespace llcdist::rt {

struct FaultSpec {
  enum class Kind { kExit, kStall, kDelay };
  int rank = 0;
  int64_t step = 0, op = 0;
  Kind kind = Kind::kExit;
  double seconds = 1.0;
};

// Parses a LLCDIST_FAULT value.
StatusOr<FaultSpec> parseFaultSpec(const std::string& text);
// The spec in the environment, if LLCDIST_FAULT is set (nullopt when it is not).
StatusOr<std::optional<FaultSpec>> faultSpecFromEnvironment();

// A communicator that passes every call to `inner` and applies `spec` at its call. beginStep(rank,
// step) is called by the training loop before each step of each rank.
class FaultCommunicator : public Communicator {
public:
  virtual void beginStep(int rank, int64_t step) = 0;
};
std::unique_ptr<FaultCommunicator> makeFaultCommunicator(Communicator& inner, const FaultSpec& spec);

}  // namespace llcdist::rt
