// The CUDA backend's all-gather / reduce-scatter rearrangements (CommLayout.h).
#include "CommLayout.h"

#include "CudaKernels.h"

namespace llcdist::rt::cuda {
namespace {

template <class T>
__global__ void unpackKernel(const T* blocks, T* out, int64_t n, int64_t outer, int64_t inner, int64_t total) {
  const int64_t count = outer * total;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = i / total, j = i % total, m = j / inner, k = j % inner;
    if (m < n) out[i] = blocks[(m * outer + o) * inner + k];
  }
}

template <class T>
__global__ void packKernel(const T* in, T* blocks, int64_t n, int64_t outer, int64_t inner, int64_t total) {
  const int64_t count = n * outer * inner;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = i % inner, o = (i / inner) % outer, m = i / (inner * outer), j = m * inner + k;
    blocks[i] = j < total ? in[o * total + j] : T(0);
  }
}


}  // namespace

Status unpackGathered(const void* blocks, void* out, int64_t n, int64_t outer, int64_t inner, int64_t total,
                      int elemBytes, cudaStream_t stream, int rank) {
  const int64_t count = outer * total;
  if (count == 0) return Status::ok();
  const unsigned grid = gridFor(count);
  switch (elemBytes) {
    case 2: unpackKernel<<<grid, 256, 0, stream>>>(static_cast<const uint16_t*>(blocks), static_cast<uint16_t*>(out), n, outer, inner, total); break;
    case 4: unpackKernel<<<grid, 256, 0, stream>>>(static_cast<const uint32_t*>(blocks), static_cast<uint32_t*>(out), n, outer, inner, total); break;
    case 8: unpackKernel<<<grid, 256, 0, stream>>>(static_cast<const uint64_t*>(blocks), static_cast<uint64_t*>(out), n, outer, inner, total); break;
    default: return Status::internal("unpackGathered: element size " + std::to_string(elemBytes));
  }
  return LLCDIST_CUDA_LAUNCHED("the all-gather unpack", rank);
}

Status packForScatter(const void* in, void* blocks, int64_t n, int64_t outer, int64_t inner, int64_t total,
                      int elemBytes, cudaStream_t stream, int rank) {
  const int64_t count = n * outer * inner;
  if (count == 0) return Status::ok();
  const unsigned grid = gridFor(count);
  switch (elemBytes) {
    case 2: packKernel<<<grid, 256, 0, stream>>>(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(blocks), n, outer, inner, total); break;
    case 4: packKernel<<<grid, 256, 0, stream>>>(static_cast<const uint32_t*>(in), static_cast<uint32_t*>(blocks), n, outer, inner, total); break;
    case 8: packKernel<<<grid, 256, 0, stream>>>(static_cast<const uint64_t*>(in), static_cast<uint64_t*>(blocks), n, outer, inner, total); break;
    default: return Status::internal("packForScatter: element size " + std::to_string(elemBytes));
  }
  return LLCDIST_CUDA_LAUNCHED("the reduce-scatter pack", rank);
}

}  // namespace llcdist::rt::cuda
