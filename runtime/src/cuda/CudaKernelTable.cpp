// The CUDA backend's kernel table (CudaKernels.h): every family's registration, called once, and the
// start-up check that it registers exactly the variants host/KernelVariants.h states, in its order.
#include "CudaKernels.h"

#include "host/KernelVariants.h"

namespace llcdist::rt::cuda {

const CudaKernelTable& cudaKernelTable() {
  static const CudaKernelTable table = [] {
    CudaKernelTable t("the CUDA backend's kernel table (src/cuda/kernels)");
    registerCudaLayoutKernels(t);
    registerCudaElementwiseKernels(t);
    registerCudaEmbeddingKernels(t);
    registerCudaNormKernels(t);
    registerCudaLinearKernels(t);
    registerCudaRopeKernels(t);
    registerCudaAttentionKernels(t);
    registerCudaAttentionBlockKernels(t);
    registerCudaLossKernels(t);
    registerCudaOptimizerKernels(t);
    registerCudaMoeKernels(t);
    registerCudaMoeRouterKernels(t);
    return t;
  }();
  return table;
}

Status checkCudaKernelTable() {
  static const Status result = [] {
    const CudaKernelTable& t = cudaKernelTable();
    LLCDIST_RETURN_IF_ERROR(t.check(launchesKernel));
    std::string msg;
    for (size_t i = 0; i < schema::kNumOpKinds; ++i) {
      const schema::OpKind kind = schema::OpKind(i);
      const std::vector<KernelVariantInfo>& stated = cudaKernelVariants(kind);
      const std::vector<CudaKernelVariant>* registered = t.find(kind);
      std::string have, want;
      for (const KernelVariantInfo& v : stated) want += (want.empty() ? "" : ",") + std::string(v.name);
      if (registered)
        for (const CudaKernelVariant& v : *registered) have += (have.empty() ? "" : ",") + std::string(v.name);
      if (have != want)
        msg += (msg.empty() ? "" : "; ") + std::string(schema::opName(kind)) + " registers [" + have +
               "] but host/KernelVariants.h states [" + want + "]";
    }
    if (!msg.empty()) return Status::internal(t.name() + ": " + msg + " (docs/adding-an-op.md)");
    return Status::ok();
  }();
  return result;
}

const CudaKernel* cudaKernel(schema::OpKind kind, std::string_view name) {
  const std::vector<CudaKernelVariant>* vs = cudaKernelTable().find(kind);
  if (!vs || vs->empty()) return nullptr;
  for (const CudaKernelVariant& v : *vs)
    if (v.name == (name.empty() ? std::string_view("own") : name)) return &v.run;
  return name.empty() ? &vs->front().run : nullptr;
}

}  // namespace llcdist::rt::cuda
