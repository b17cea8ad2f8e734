// Private to the CUDA backend: the device memory a kernel may use besides the arena (CudaKernels.h's
// DeviceScratch and DeviceTables), and the error helpers' definitions. Used by the backend and by the
// GPU kernel tests' harness.
#pragma once

#include "CudaKernels.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace llcdist::rt::cuda {

// Scratch for the kernels launched on one stream: grown with cudaMallocAsync on that stream (the old
// block is freed on the stream, after the work that uses it). peakBytes() is the largest size held.
class StreamScratch final : public DeviceScratch {
public:
  StreamScratch(cudaStream_t stream, int rank) : stream_(stream), rank_(rank) {}
  ~StreamScratch() override;
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  StatusOr<void*> get(int64_t bytes) override;
  int64_t bytes() const { return bytes_; }

private:
  cudaStream_t stream_;
  int rank_;
  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
};

// Device copies of host tables, uploaded synchronously the first time an address is seen; each
// copy holds its host table's owner, so an address cannot be reused by another table meanwhile.
class TableCache final : public DeviceTables {
public:
  explicit TableCache(int rank) : rank_(rank) {}
  ~TableCache() override;
  TableCache(const TableCache&) = delete;
  TableCache& operator=(const TableCache&) = delete;
  StatusOr<const float*> upload(const float* host, int64_t count, std::shared_ptr<const void> owner) override;
  StatusOr<const void*> uploadBytes(const std::string& bytes) override;
  int64_t bytes() const { return bytes_; }

private:
  int rank_;
  std::mutex mu_;
  struct Copy {
    float* device;
    std::shared_ptr<const void> owner;  // keeps the host table (and so its address) alive
  };
  std::map<std::pair<const float*, int64_t>, Copy> copies_;
  std::map<std::string, void*> byContent_;
  int64_t bytes_ = 0;
};

}  // namespace llcdist::rt::cuda
