// The training driver with the CPU backend as its default (library llcdist_runtime: the driver of
// llcdist_runtime_train joined with llcdist_runtime_cpu; Train.h "Libraries and the default backend").
#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Train.h"

namespace llcdist::rt {

BackendFactory cpuBackendFactory() {
  return [](int rank, Communicator* communicator) -> StatusOr<std::unique_ptr<Backend>> {
    CpuBackendOptions bo;
    bo.rank = rank;
    bo.communicator = communicator;
    return makeCpuBackend(bo);
  };
}

Status runTraining(const RunOptions& options, std::ostream& progress, RunResult* result) {
  if (options.backend) return runTrainingOn(options, progress, result);
  RunOptions withCpu = options;
  withCpu.backend = cpuBackendFactory();
  return runTrainingOn(withCpu, progress, result);
}

}  // namespace llcdist::rt
