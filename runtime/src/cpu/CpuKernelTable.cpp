// The CPU backend's kernel table (CpuBackend.h): every family's registration, called once, and the
// launch of one KernelCall through it.
#include "llcdist/runtime/CpuBackend.h"

#include "../kernels/CpuKernels.h"

namespace llcdist::rt {

const CpuKernelTable& cpuKernelTable() {
  static const CpuKernelTable table = [] {
    CpuKernelTable t("the CPU backend's kernel table (src/kernels)");
    registerCpuLayoutKernels(t);
    registerCpuElementwiseKernels(t);
    registerCpuEmbeddingKernels(t);
    registerCpuNormKernels(t);
    registerCpuLinearKernels(t);
    registerCpuRopeKernels(t);
    registerCpuAttentionKernels(t);
    registerCpuAttentionBlockKernels(t);
    registerCpuLossKernels(t);
    registerCpuOptimizerKernels(t);
    registerCpuMoeKernels(t);
    return t;
  }();
  return table;
}

Status checkCpuKernelTable() {
  static const Status result = cpuKernelTable().check(launchesKernel);
  return result;
}

Status runCpuKernel(const KernelCall& c) {
  const std::string_view name = schema::opName(c.kind);
  if (schema::isCollective(c.kind))
    return Status::internal(std::string(name) + " is a collective, run by the backend's communicator, not a kernel");
  if (schema::isPointToPoint(c.kind))
    return Status::internal(std::string(name) + " is point-to-point, run by the backend's communicator, not a kernel");
  if (c.kind == schema::OpKind::kLoadMicrobatch)
    return Status::internal("load_microbatch is executed by the interpreter, not by a kernel");
  if (c.args.size() != schema::opSpec(c.kind).numArgs) return Status::internal("kernel call has the wrong number of roles");
  const CpuKernel* kernel = cpuKernelTable().find(c.kind);
  if (!kernel) return Status::internal("the CPU backend has no kernel for op " + std::string(name) + " (docs/adding-an-op.md)");
  return (*kernel)(c, CpuKernelContext{});
}

}  // namespace llcdist::rt
