// Token and learned position embeddings. See Kernels.h for the contract.
#include "llcdist/runtime/Kernels.h"

#include <algorithm>
#include <string>

namespace llcdist::rt {
namespace {

Status checkIds(const int32_t* ids, int64_t M, int64_t V) {
  for (int64_t m = 0; m < M; ++m)
    if (ids[m] < 0 || ids[m] >= V)
      return Status::outOfRange("embedding: id " + std::to_string(ids[m]) + " at position " +
                                std::to_string(m) + " is outside the vocabulary [0, " +
                                std::to_string(V) + ")");
  return Status::ok();
}

}  // namespace

Status embeddingForward(const int32_t* ids, const float* table, float* out, int64_t M, int64_t V,
                        int64_t H) {
  LLCDIST_RETURN_IF_ERROR(checkIds(ids, M, V));
  for (int64_t m = 0; m < M; ++m) std::copy_n(table + int64_t(ids[m]) * H, H, out + m * H);
  return Status::ok();
}

Status embeddingBackward(const int32_t* ids, const float* dout, float* dtable, int64_t M, int64_t V,
                         int64_t H, bool accumulate) {
  LLCDIST_RETURN_IF_ERROR(checkIds(ids, M, V));
  if (!accumulate) std::fill_n(dtable, V * H, 0.0f);
  for (int64_t m = 0; m < M; ++m) {  // fixed order m = 0..M-1: deterministic
    float* row = dtable + int64_t(ids[m]) * H;
    const float* d = dout + m * H;
    for (int64_t h = 0; h < H; ++h) row[h] += d[h];
  }
  return Status::ok();
}

static Status checkPositions(int64_t S, int64_t P) {
  if (S > P)
    return Status::invalidArgument("position embedding: sequence length " + std::to_string(S) +
                                   " exceeds the table's " + std::to_string(P) + " positions");
  return Status::ok();
}

Status positionEmbeddingForward(const float* x, const float* wpe, float* y, int64_t B, int64_t S,
                                int64_t H, int64_t P) {
  LLCDIST_RETURN_IF_ERROR(checkPositions(S, P));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t off = (b * S + s) * H;
      for (int64_t h = 0; h < H; ++h) y[off + h] = x[off + h] + wpe[s * H + h];
    }
  return Status::ok();
}

Status positionEmbeddingBackwardWeight(const float* dy, float* dwpe, int64_t B, int64_t S, int64_t H,
                                       int64_t P, bool accumulate) {
  LLCDIST_RETURN_IF_ERROR(checkPositions(S, P));
  if (!accumulate) std::fill_n(dwpe, P * H, 0.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const float* d = dy + (b * S + s) * H;
      for (int64_t h = 0; h < H; ++h) dwpe[s * H + h] += d[h];
    }
  return Status::ok();
}

}  // namespace llcdist::rt
