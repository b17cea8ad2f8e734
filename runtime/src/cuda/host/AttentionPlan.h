// Private to the CUDA backend, but free of CUDA (standard library and runtime headers only, so it
// builds and is tested on machines without a toolkit: runtime/test/AttentionPlanTest.cpp): how the
// plan's causal GQA attention (Kernels.h: attentionForward, attentionBackward) is handed to cuDNN's
// fused SDPA graphs (src/cuda/CudnnAttention.h): the problem, the key the graph cache keeps a built
// graph under, every tensor's dims and strides in cuDNN's order, the elements each buffer must hold, the
// support check the kernel table can run at bind time, and the FLOP counts the benchmarks report.
//
// The layout. Our buffers are row-major q, out, dout, dq [B,S,nh,hd]; k, v, dk, dv [B,S,nkv,hd]; lse
// [B,nh,S] f32. cuDNN's SDPA takes every tensor as dims [b,h,s,d] with arbitrary strides (innermost
// stride 1), so our buffers are described as they are, with no transpose or copy: element (b,h,s,d) of
// q sits at ((b·S + s)·nh + h)·hd + d, i.e. strides {S·nh·hd, hd, nh·hd, 1}. lse is [b,h,s,1] with
// strides {nh·S, S, 1, 1} (cuDNN's packed "BHSD" Stats, which its backward requires before 9.26).
// GQA: K and V have h = nkv heads; cuDNN maps query head h to kv head h / (nh/nkv), HF's repeat_kv, and
// sums dK, dV over the query heads of a group; no K/V is copied.
//
// Numerics (what cuDNN computes, the contract of Kernels.h): scores = scale·q·kᵀ with scale =
// 1/sqrt(hd) rounded to f32 as the CPU reference rounds it, the causal mask keeps keys j <= query i
// (cuDNN's top-left diagonal, right bound 0), and with a sliding window W (AttentionParams::window) also
// i − j < W: cuDNN's diagonal band left bound W (set_diagonal_band_left_bound; the frontend's
// sliding_window_mask keeps, top-left aligned, the scores with column + left_bound > row, i.e. j > i − W,
// utils/attn_score_modifiers.h), softmax in f32, out = P·v rounded to bf16. cuDNN's Stats
// output is the natural-log log-sum-exp of each masked, scaled score row (max + ln Σ exp(s - max); the
// frontend converts to base 2 only when asked, set_stats_use_log2, which we never ask), exactly our lse:
// the backward recomputes P = exp(score - lse).
#pragma once

#include "llcdist/runtime/OpParams.h"
#include "llcdist/runtime/PlanSchema.h"
#include "llcdist/runtime/Status.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace llcdist::rt::cuda {

// One attention graph: a forward (q, k, v -> out, lse) or a backward (dout, q, k, v, out, lse -> dq, dk,
// dv) of the causal GQA attention of Kernels.h.
struct AttentionProblem {
  int64_t B = 0, S = 0, nh = 0, nkv = 0, hd = 0;
  bool backward = false;       // the backward graph; else the forward
  bool deterministic = false;  // backward: cuDNN's deterministic algorithm (the forward is deterministic anyway)
  float scale = 0.0f;          // the softmax scale: 1/sqrt(hd) as the CPU reference rounds it
  // The dtype of q, k, v, out (and dout, dq, dk, dv); lse is always f32. cuDNN's SDPA takes bf16 (or
  // fp16, which plans do not have), not f32: an f32 plan runs the own kernel.
  schema::ElemType dtype = schema::ElemType::kBF16;
  // Q, K, V read from one packed [B,S,nh+2·nkv,hd] buffer (attention's `qkv`), and the backward's dQ, dK,
  // dV written into one (`dqkv`): their rows are (nh+2·nkv)·hd apart (QkvLayout, OpParams.h).
  bool packedQkv = false, packedGrad = false;
  // The sliding window (key j visible to query i iff j <= i and i − j < window): cuDNN's diagonal band
  // left bound. 0: none (plain causal); attentionProblem drops a window >= S (it masks nothing).
  int64_t window = 0;
  // BLOOM's ALiBi (AttentionParams::alibi): cuDNN's alibi mask derives its slopes from the graph's own
  // head count, which is not a tensor-parallel rank's slice of the model's heads, so such a problem is
  // unsupported here and runs the own kernel (cudnnAttentionUnsupportedReason says so).
  bool alibi = false;
};

// The problem of an attention op: its shape, scale 1/sqrt(hd) rounded as the CPU reference does
// (src/kernels/Attention.cpp), dtype bf16, packed as the op's roles are, its window (0 when absent or
// >= S, so such a problem is the plain causal one and shares its graph). `deterministic` and packedGrad
// are kept for the backward only; a forward problem has both false, so forward graphs are shared.
AttentionProblem attentionProblem(const AttentionParams& p, bool backward, bool deterministic,
                                  schema::ElemType dtype = schema::ElemType::kBF16);

// "attention backward B=4 S=2048 nh=32 nkv=8 hd=64 bf16 causal window=4096 scale=0.125 deterministic"
// (window only when set): for errors and logs.
std::string describeAttention(const AttentionProblem& p);

// The graph cache key: every field of the problem that changes the graph (the scale by its bits, so
// equal keys mean bit-equal scales). Ordered (std::map) and hashable (AttentionKeyHash).
struct AttentionKey {
  int64_t B = 0, S = 0, nh = 0, nkv = 0, hd = 0;
  bool backward = false, deterministic = false;
  uint32_t scaleBits = 0;
  schema::ElemType dtype = schema::ElemType::kBF16;
  bool packedQkv = false, packedGrad = false;
  int64_t window = 0;

  bool operator<(const AttentionKey& o) const;
  bool operator==(const AttentionKey& o) const;
  bool operator!=(const AttentionKey& o) const { return !(*this == o); }
};
AttentionKey attentionKey(const AttentionProblem& p);
struct AttentionKeyHash {
  size_t operator()(const AttentionKey& k) const;
};

// The tensors of the SDPA graphs. Forward: Q, K, V in, O and Stats (= lse) out. Backward: Q, K, V, O,
// Stats, dO in; dQ, dK, dV out (overwritten).
enum class AttentionTensor { kQ, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };
inline constexpr std::array<AttentionTensor, 9> kAttentionTensors = {
    AttentionTensor::kQ,  AttentionTensor::kK,  AttentionTensor::kV,  AttentionTensor::kO,  AttentionTensor::kStats,
    AttentionTensor::kDO, AttentionTensor::kDQ, AttentionTensor::kDK, AttentionTensor::kDV};
const char* attentionTensorName(AttentionTensor t);  // "Q", "K", ..., "dV"
// Whether the tensor is part of the problem's graph (forward: Q, K, V, O, Stats; backward: all nine).
bool attentionTensorUsed(const AttentionProblem& p, AttentionTensor t);

// A tensor as cuDNN takes it: dims and strides (in elements) in the order [b, h, s, d].
struct AttentionLayout {
  std::array<int64_t, 4> dim{}, stride{};
};
// Q, O, dO, dQ: dim {B, nh, S, hd}, stride {S·nh·hd, hd, nh·hd, 1}; K, V, dK, dV: dim {B, nkv, S, hd},
// stride {S·nkv·hd, hd, nkv·hd, 1}; Stats: dim {B, nh, S, 1}, stride {nh·S, S, 1, 1}. Packed (Q, K, V with
// packedQkv; dQ, dK, dV with packedGrad): the same dims with row stride r = (nh+2·nkv)·hd, stride
// {S·r, hd, r, 1}, each tensor addressed from its own first element (K at nh·hd, V at (nh+nkv)·hd into
// the packed row: QkvLayout).
AttentionLayout attentionLayout(const AttentionProblem& p, AttentionTensor t);
// The elements the tensor's buffer must hold from its first element (the last element the layout
// addresses, plus one): B·S·nh·hd for Q, O, dO, dQ; B·S·nkv·hd for K, V, dK, dV; B·nh·S for Stats (packed:
// up to the tensor's last element in the packed buffer).
int64_t attentionElems(const AttentionProblem& p, AttentionTensor t);
// Its element type: Stats f32, everything else the problem's dtype.
schema::ElemType attentionTensorType(const AttentionProblem& p, AttentionTensor t);

// What the support check knows of the machine: the device's compute capability as major·10 + minor
// (90 for H100 / H200) and cuDNN's run-time version as cudnnGetVersion() reports it (91900 = 9.19.0).
struct CudnnTarget {
  int smVersion = 0;
  int64_t cudnnVersion = 0;
};

// "" when cuDNN's SDPA (frontend 1.32) supports the problem on the target, else the reason (for the bind
// log; the caller then runs the own kernel). The limits are those the frontend checks before it asks the
// library (cudnn-frontend 1.32: node/sdpa_support_surface.h for the bf16 forward,
// node/scaled_dot_product_flash_attention.h for the backward) plus the head-dim ceiling cuDNN documents:
//  - B, S, nh, nkv, hd >= 1, nh a multiple of nkv, a finite positive scale, dtype bf16;
//  - window 0 or in [1, 2^31 − 1] (the frontend's left bound is an int; the frontend refuses a left
//    bound <= 0, and takes one with the top-left causal mask and s_q = s_kv on every version);
//  - compute capability 8.0 or newer, cuDNN 9 (a build against 9.x headers);
//  - not cuDNN 9.10.0 / 9.10.1 (the frontend refuses both directions: known bugs);
//  - hd a multiple of 8 (16-byte rows: also what makes every stride 16-byte aligned) and hd <= 256;
//    forward: hd <= 128 on sm_8x with cuDNN <= 9.9 and on sm_10x with cuDNN < 9.9;
//  - backward: S >= 2 (s_q = s_kv = 1 is refused); hd <= 256 on sm_90; on sm_10x (cuDNN >= 9.11)
//    hd <= 128 or hd == 256 with cuDNN >= 9.23; elsewhere hd <= 128; deterministic on sm_10x needs
//    cuDNN >= 9.18.
// The check can only say no early: cuDNN itself decides at CudnnAttention::prepare, whose error is a
// reason to fall back as well.
std::string cudnnAttentionUnsupportedReason(const AttentionProblem& p, const CudnnTarget& target);

// cuDNN's SDPA kernels move Q, K, V, O (and the gradients) with 16-byte vector loads and TMA and do not
// check the pointers themselves: every buffer must be 16-byte aligned (plan arenas are 64-byte
// aligned). InvalidArgument naming the tensor and its address; a null pointer is an error too.
inline constexpr int64_t kAttentionAlignment = 16;
Status checkAttentionPointer(AttentionTensor t, const void* p);

// FLOPs by FlashAttention's benchmark convention (benchmarks/benchmark_flash_attention.py): forward
// 4·B·nh·S²·hd (the two GEMMs q·kᵀ and P·v, 2·S²·hd each per head) halved for the causal mask
// (S²/2, not the exact S(S+1)/2; with a window W < S less the (S − W)²/2 masked pairs:
// attentionScorePairs, Kernels.h), backward 2.5× the forward (five GEMMs of which one recomputes the
// scores). What the benchmarks' TFLOP/s divide by.
double attentionForwardFlops(const AttentionProblem& p);
double attentionBackwardFlops(const AttentionProblem& p);

}  // namespace llcdist::rt::cuda
