// The host-side preconditions of kernels that every backend checks the same way before it computes
// (or launches) anything: the sizes and parameters a call can be handed wrong, with one message each.
// Core, backend-independent (the CPU kernels of src/kernels/ and the CUDA kernels of src/cuda/kernels/
// call these). Data-dependent checks (an id outside the vocabulary) stay with each backend.
#pragma once

#include "llcdist/runtime/KernelCall.h"
#include "llcdist/runtime/OpParams.h"
#include "llcdist/runtime/Status.h"

#include <cstdint>
#include <string_view>

namespace llcdist::rt {

// A vocabulary shard: index in [0, count), count >= 1.
Status checkVocabShard(const VocabShard& shard);
// Positions [begin, begin + S) of a position table with P rows.
Status checkPositionRange(int64_t S, int64_t P, int64_t begin);
// A RoPE table built for S positions of head dim hd.
Status checkRopeTable(const RopeTable& table, int64_t S, int64_t hd);
// Attention sizes: all positive, nh a multiple of nkv.
Status checkAttentionShape(int64_t B, int64_t S, int64_t nh, int64_t nkv, int64_t hd);
// The first buffer of `role` holds at least `need` elements (an absent role passes).
Status checkArgElems(const KernelCall& call, std::string_view role, int64_t need);
// shard_slice's member, padding and buffer sizes; the elements of a row of x (total) when they agree.
StatusOr<int64_t> checkShardSlice(const KernelCall& call, const LayoutParams& p);

}  // namespace llcdist::rt
