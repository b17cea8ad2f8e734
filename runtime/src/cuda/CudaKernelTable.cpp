// The CUDA backend's kernel table (CudaKernels.h): every family's registration, called once.
#include "CudaKernels.h"

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
    registerCudaLossKernels(t);
    registerCudaOptimizerKernels(t);
    return t;
  }();
  return table;
}

Status checkCudaKernelTable() {
  static const Status result = cudaKernelTable().check(launchesKernel);
  return result;
}

}  // namespace llcdist::rt::cuda
