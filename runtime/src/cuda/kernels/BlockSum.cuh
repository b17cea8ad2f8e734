// The fixed-order block sum the CUDA kernel families share (Norm.cu, Optimizer.cu, Loss.cu and the moe
// family through MoeCommon.cuh): every thread's double added over the block by a halving tree in shared
// memory, the same tree on every run, so a sum repeats bit for bit. Included by .cu files only;
// everything is file-local (an anonymous namespace), as each file's own copy was.
#ifndef LLCDIST_RUNTIME_SRC_CUDA_KERNELS_BLOCKSUM_CUH
#define LLCDIST_RUNTIME_SRC_CUDA_KERNELS_BLOCKSUM_CUH

namespace llcdist::rt::cuda {
namespace {

// The threads of a block that calls blockSum: a power of two (the tree halves it). Each including file
// static_asserts that its reduction blocks have this size.
constexpr int kBlockSumThreads = 256;

// The sum of every thread's v over the block (blockDim.x == kBlockSumThreads), in a fixed tree order, in
// buf (__shared__ double[kBlockSumThreads]); every thread of the block must call it (it synchronizes)
// and gets the sum.
__device__ double blockSum(double v, double* buf) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = kBlockSumThreads / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  const double sum = buf[0];
  __syncthreads();  // every thread has read buf[0] before the next call overwrites it
  return sum;
}

// The same in a shared buffer of its own.
__device__ double blockSum(double v) {
  __shared__ double buf[kBlockSumThreads];
  return blockSum(v, buf);
}

}  // namespace
}  // namespace llcdist::rt::cuda

#endif  // LLCDIST_RUNTIME_SRC_CUDA_KERNELS_BLOCKSUM_CUH
