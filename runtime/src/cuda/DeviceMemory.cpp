// The CUDA backend's scratch and table memory and its error helpers (DeviceMemory.h, CudaKernels.h).
#include "DeviceMemory.h"

#include <algorithm>
#include <string>

namespace llcdist::rt::cuda {

Status cudaError(cudaError_t e, const char* expr, const char* file, int line, int rank) {
  if (e == cudaSuccess) return Status::ok();
  return Status::internal(std::string(file) + ":" + std::to_string(line) + ": " + expr + ": " + cudaGetErrorName(e) +
                          " (" + cudaGetErrorString(e) + ") on rank " + std::to_string(rank));
}

Status launchError(const char* what, const char* file, int line, int rank) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return Status::ok();
  return cudaError(e, (std::string("launching ") + what).c_str(), file, line, rank);
}

StreamScratch::~StreamScratch() {
  if (ptr_) cudaFreeAsync(ptr_, stream_);
}

StatusOr<void*> StreamScratch::get(int64_t bytes) {
  if (bytes <= bytes_) return ptr_;
  if (ptr_) {
    LLCDIST_CUDA_TRY(cudaFreeAsync(ptr_, stream_), rank_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  LLCDIST_CUDA_TRY(cudaMallocAsync(&ptr_, size_t(bytes), stream_), rank_);
  bytes_ = bytes;
  return ptr_;
}

TableCache::~TableCache() {
  for (auto& [key, copy] : copies_) cudaFree(copy.device);
  for (auto& [key, p] : byContent_) cudaFree(p);
}

StatusOr<const void*> TableCache::uploadBytes(const std::string& bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = byContent_.find(bytes);
  if (it != byContent_.end()) return static_cast<const void*>(it->second);
  void* p = nullptr;
  LLCDIST_CUDA_TRY(cudaMalloc(&p, std::max<size_t>(bytes.size(), 1)), rank_);
  const cudaError_t e = cudaMemcpy(p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice);
  if (e != cudaSuccess) {
    cudaFree(p);
    return cudaError(e, "cudaMemcpy(table)", __FILE__, __LINE__, rank_);
  }
  byContent_.emplace(bytes, p);
  bytes_ += int64_t(bytes.size());
  return static_cast<const void*>(p);
}

StatusOr<const float*> TableCache::upload(const float* host, int64_t count, std::shared_ptr<const void> owner) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = copies_.find({host, count});
  if (it != copies_.end()) return static_cast<const float*>(it->second.device);
  float* p = nullptr;
  LLCDIST_CUDA_TRY(cudaMalloc(&p, size_t(count) * sizeof(float)), rank_);
  const cudaError_t e = cudaMemcpy(p, host, size_t(count) * sizeof(float), cudaMemcpyHostToDevice);
  if (e != cudaSuccess) {
    cudaFree(p);
    return cudaError(e, "cudaMemcpy(table)", __FILE__, __LINE__, rank_);
  }
  copies_.emplace(std::make_pair(host, count), Copy{p, std::move(owner)});
  bytes_ += count * int64_t(sizeof(float));
  return static_cast<const float*>(p);
}

}  // namespace llcdist::rt::cuda
