// The host-side preconditions of kernels that every backend checks the same way before it computes
// (or launches) anything: the sizes and parameters a call can be handed wrong, with one message each.
// Core, backend-independent (the CPU kernels of src/kernels/ and the CUDA kernels of src/cuda/kernels/
// call these). Data-dependent checks (an id outside the vocabulary) stay with each backend.
#pragma once

#include "llcdist/runtime/KernelCall.h"
#include "llcdist/runtime/OpParams.h"
#include "llcdist/runtime/Status.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace llcdist::rt {

// A vocabulary shard: index in [0, count), count >= 1.
Status checkVocabShard(const VocabShard& shard);
// Positions [begin, begin + S) of a position table with P rows.
Status checkPositionRange(int64_t S, int64_t P, int64_t begin);
// The positions of S rows (one run or two: PositionRuns) in a position table with P rows.
Status checkPositionRuns(int64_t S, int64_t P, const PositionRuns& positions);
// A partial rotary width (attr `rotary_dim`): even, 2 <= rotaryDim <= hd; 0 means hd.
Status checkRotaryDim(int64_t rotaryDim, int64_t hd);
// A RoPE table built for S positions of head dim hd, or of the rotated width rotaryDim (0: hd) when it
// rotates part of each head (checkRotaryDim).
Status checkRopeTable(const RopeTable& table, int64_t S, int64_t hd, int64_t rotaryDim = 0);
// Attention sizes: all positive, nh a multiple of nkv.
Status checkAttentionShape(int64_t B, int64_t S, int64_t nh, int64_t nkv, int64_t hd);
// An attention's sliding window: >= 1, or 0 for none (plain causal).
Status checkAttentionWindow(int64_t window);
// ALiBi's heads (OpParams.h: Alibi): none (heads 0), or the op's nh heads a slice of them:
// 0 <= head0 and head0 + nh <= heads.
Status checkAttentionAlibi(const Alibi& alibi, int64_t nh);
// A ring-attention block's rows (Sq query rows at positions q, Sk key rows at kv): positions and splits
// >= 0, and increasing key positions (the second run starts at or past the first's end), which the
// kernels' key ranges assume.
Status checkAttentionBlockPositions(const PositionRuns& q, int64_t Sq, const PositionRuns& kv, int64_t Sk);
// The first buffer of `role` holds at least `need` elements (an absent role passes).
Status checkArgElems(const KernelCall& call, std::string_view role, int64_t need);
// The q, k, v (and dq, dk, dv) of an attention call: their layouts (QkvLayout: separate buffers or one
// packed qkv / dqkv) and where each starts, offset by its element size as the kernel gets the role
// (f32 for a CPU or own CUDA kernel, bf16 for cuDNN). The gradients are null in a forward call.
struct AttentionArgs {
  QkvLayout in, grad;
  void *q = nullptr, *k = nullptr, *v = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
  const float* qF() const { return static_cast<const float*>(q); }
  const float* kF() const { return static_cast<const float*>(k); }
  const float* vF() const { return static_cast<const float*>(v); }
  float* dqF() const { return static_cast<float*>(dq); }
  float* dkF() const { return static_cast<float*>(dk); }
  float* dvF() const { return static_cast<float*>(dv); }
};
AttentionArgs attentionArgs(const KernelCall& call, const AttentionParams& p);
// Every buffer of an attention call holds what its layout addresses: q, k, v (or qkv), out, lse and, in
// the backward, dout and dq, dk, dv (or dqkv).
Status checkAttentionElems(const KernelCall& call, const AttentionParams& p);
// Every buffer of a ring-attention call (attention_block_fwd / _bwd, attention_merge) holds what its
// shape addresses: [B,S,nh,hd] for q, out, dout, dq, out_b; [B,S,nkv,hd] for k, v, dk, dv; [B,nh,S] for
// lse, lse_b.
Status checkAttentionBlockElems(const KernelCall& call, const AttentionParams& p);
// shard_slice's member, padding and buffer sizes; the elements of a row of x (total) when they agree.
StatusOr<int64_t> checkShardSlice(const KernelCall& call, const LayoutParams& p);

// The moe family's data errors, one message for every backend (the CPU kernels return it; the CUDA
// kernels report the first token and value on the device and the backend words it the same way at the
// next synchronize). moe_permute: token `token` is routed to an expert id outside [0, E).
std::string moePermuteExpertError(int64_t token, int64_t id);
// moe_unpermute / moe_unpermute_bwd (`op`): token `token` has a slot outside [-1, N) (-1: dropped).
std::string moeSlotError(std::string_view op, int64_t token, int64_t slot);

}  // namespace llcdist::rt
