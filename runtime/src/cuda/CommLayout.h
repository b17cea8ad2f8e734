// Private to the CUDA backend: the rearrangements around NCCL's all-gather and reduce-scatter, whose
// blocks are contiguous per member, for the plan's [outer, total] layouts (Backend.h) with ZeRO's
// padded blocks (total < n·inner).
#pragma once

#include "llcdist/runtime/Status.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace llcdist::rt::cuda {

// out[o, m·inner + k] = blocks[m][o][k] for m·inner + k < total (n members; elemBytes 2, 4 or 8).
Status unpackGathered(const void* blocks, void* out, int64_t n, int64_t outer, int64_t inner, int64_t total,
                      int elemBytes, cudaStream_t stream, int rank);
// blocks[m][o][k] = in[o, m·inner + k], 0 where m·inner + k >= total.
Status packForScatter(const void* in, void* blocks, int64_t n, int64_t outer, int64_t inner, int64_t total,
                      int elemBytes, cudaStream_t stream, int rank);

}  // namespace llcdist::rt::cuda
