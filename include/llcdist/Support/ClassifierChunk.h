//===- ClassifierChunk.h - the fused classifier's rows per chunk -*- C++ -*-===//
//
// Header-only and MLIR-free: llcdist-plan-fuse-classifier chooses the chunk
// with it and the analytic step model (lib/Cost/StepModel.cpp) prices the
// same chunks.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_SUPPORT_CLASSIFIERCHUNK_H
#define LLCDIST_SUPPORT_CLASSIFIERCHUNK_H

#include <algorithm>
#include <cstdint>

namespace llcdist {

/// The token rows per chunk of the fused classifier over `M` rows of an
/// `N`-wide vocabulary with `elemBytes`-byte logits, when the pass option
/// leaves it to the pass: as many as keep the chunk's logits within 128 MiB,
/// a multiple of 128 from 128 on, at least 1, at most M.
inline int64_t classifierChunkRows(int64_t M, int64_t N, int64_t elemBytes) {
  constexpr int64_t kBudget = int64_t(128) << 20;
  int64_t rows = std::max<int64_t>(1, kBudget / std::max<int64_t>(1, N * elemBytes));
  if (rows >= 128)
    rows -= rows % 128;
  return std::min(rows, M);
}

} // namespace llcdist

#endif
