// fp32 CPU reference kernels: forward, backward and optimizer updates of a transformer training step.
//
// Conventions (all kernels):
//  - Tensors are row-major, contiguous fp32 raw pointers with explicit sizes; shapes in comments are
//    [outermost, ..., innermost]. Integer inputs (token ids, targets) are int32.
//  - Semantics follow PyTorch / Hugging Face transformers (named per kernel below).
//  - Every forward has a backward. Input gradients (dX) and weight gradients (dW, db) are separate
//    functions so that a zero-bubble pipeline schedule can run them at different times.
//  - Weight-gradient functions take `accumulate`: true adds into the existing gradient buffer
//    (gradient accumulation across microbatches, tied weights), false overwrites it.
//  - Deterministic: single-threaded loops with a fixed reduction order, plus cblas_sgemm for GEMMs.
//    Reductions over rows/columns (norm statistics, bias/gamma gradients, losses) accumulate in double.
//  - Output buffers must not alias inputs unless a kernel says so.
//  - Kernels that can be handed invalid data or shapes return Status; the rest return void and
//    assume sizes > 0 and valid pointers.
#pragma once

#include "llcdist/runtime/OpParams.h"  // WeightLayout, VocabShard, RopeConfig / RopeTable
#include "llcdist/runtime/Status.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

// Functions the CUDA kernels call too (nvcc compiles them for the device as well).
#if defined(__CUDACC__)
#define LLCDIST_HOST_DEVICE __host__ __device__
#else
#define LLCDIST_HOST_DEVICE
#endif

namespace llcdist::rt {

// ---------------------------------------------------------------------------------------------------
// Linear (Linear.cpp): y[M,N] = x[M,K] · W + b.
// ---------------------------------------------------------------------------------------------------
// W's layout is a WeightLayout (OpParams.h): kOutIn, W [N,K] and y = x·Wᵀ (torch nn.Linear; Llama), or
// kInOut, W [K,N] and y = x·W (GPT-2 Conv1D).
// bias [N] may be null.
void linearForward(const float* x, const float* w, const float* bias, float* y, int64_t M, int64_t K,
                   int64_t N, WeightLayout layout);
// dx[M,K] = dy[M,N] · W (as [N,K]). `accumulate` adds into dx (an input feeding several linears).
void linearBackwardInput(const float* dy, const float* w, float* dx, int64_t M, int64_t K, int64_t N,
                         WeightLayout layout, bool accumulate);
// dw in W's own layout: kOutIn dw[N,K] = dyᵀ·x; kInOut dw[K,N] = xᵀ·dy.
void linearBackwardWeight(const float* dy, const float* x, float* dw, int64_t M, int64_t K, int64_t N,
                          WeightLayout layout, bool accumulate);
// db[N] = column sums of dy[M,N].
void linearBackwardBias(const float* dy, float* db, int64_t M, int64_t N, bool accumulate);
// y[M,N] += bias[N] in place (a row-parallel linear's bias, added after the tensor-parallel all-reduce).
void biasAddForward(float* y, const float* bias, int64_t M, int64_t N);

// ---------------------------------------------------------------------------------------------------
// Vocabulary parallelism (Megatron VocabParallelEmbedding / vocab_parallel_cross_entropy).
// ---------------------------------------------------------------------------------------------------
// A rank's slice of the vocabulary is a VocabShard (OpParams.h).

// ---------------------------------------------------------------------------------------------------
// Embeddings (Embedding.cpp).
// ---------------------------------------------------------------------------------------------------
// out[M,H] = table[ids[m], :]; table [V,H]. An id outside [0,V) is an error (out is then unspecified).
// Vocabulary-parallel (shard.count > 1): table holds global rows [c·V, (c+1)·V), c = shard.index; an id
// in that range reads its local row, an id elsewhere in [0, V·count) gives a zero row (the plan sums
// the partial outputs over the shards), an id outside [0, V·count) is an error.
// scale (Gemma's embedding multiplier, attr `scale`): out = table[ids[m], :]·scale in f32 (another
// shard's row stays 0); 1 is the plain gather (the row copied).
Status embeddingForward(const int32_t* ids, const float* table, float* out, int64_t M, int64_t V,
                        int64_t H, const VocabShard& shard = {}, float scale = 1.0f);
// dtable[V,H] (+)= scatter-add of dout[M,H] rows at ids, in order m = 0..M-1. With accumulate=false the
// whole table gradient is zeroed first (rows not referenced get 0). Vocabulary-parallel: only the ids
// of this shard's range scatter (into their local rows); ids outside [0, V·count) are an error.
// scale: each row adds scale·dout[m, :] (the f32 product, then the f32 sum); 1 adds dout itself.
// paddingIdx (torch's nn.Embedding(padding_idx), attr `padding_idx`): a global id whose rows add nothing
// (that row of dtable keeps its value, 0 without accumulate); -1: none.
Status embeddingBackward(const int32_t* ids, const float* dout, float* dtable, int64_t M, int64_t V, int64_t H,
                         bool accumulate, const VocabShard& shard = {}, float scale = 1.0f, int64_t paddingIdx = -1);

// GPT-2 learned positions: y[B,S,H] = x[B,S,H] + wpe[pos.at(s),:] (wpe [P,H]). Row s of x/y is at
// sequence position pos.at(s) (Positions.h): s unless sequence-parallel (then c·S + s, c the rank's
// coordinate on the op's shard_axis, or context parallelism's layout on cp: two runs). Requires every
// position in [0, P) (an error otherwise). y may alias x. The input gradient is the identity (dx = dy),
// so there is no backward-input function.
Status positionEmbeddingForward(const float* x, const float* wpe, float* y, int64_t B, int64_t S, int64_t H, int64_t P,
                                const PositionRuns& pos);
// dwpe[pos.at(s),:] (+)= sum over b of dy[b,s,:] for s < S (b in order 0..B-1); with accumulate=false
// every other row of dwpe is zeroed. The rows' positions are distinct. Same range rule as forward.
Status positionEmbeddingBackwardWeight(const float* dy, float* dwpe, int64_t B, int64_t S, int64_t H, int64_t P,
                                       bool accumulate, const PositionRuns& pos);
// One run of positions [posBegin, posBegin + S).
inline Status positionEmbeddingForward(const float* x, const float* wpe, float* y, int64_t B, int64_t S, int64_t H,
                                       int64_t P, int64_t posBegin = 0) {
  return positionEmbeddingForward(x, wpe, y, B, S, H, P, PositionRuns::from(posBegin));
}
inline Status positionEmbeddingBackwardWeight(const float* dy, float* dwpe, int64_t B, int64_t S, int64_t H, int64_t P,
                                              bool accumulate, int64_t posBegin = 0) {
  return positionEmbeddingBackwardWeight(dy, dwpe, B, S, H, P, accumulate, PositionRuns::from(posBegin));
}

// ---------------------------------------------------------------------------------------------------
// Normalization (Norm.cpp). x, y [M,H] normalized over the last dim H.
// ---------------------------------------------------------------------------------------------------
// torch nn.LayerNorm: y = (x - mean) * rstd * gamma + beta, rstd = 1/sqrt(var + eps), biased variance.
// Saves mean[M] and rstd[M] for backward (2·M floats). beta null: no bias (torch's LayerNorm(bias=False),
// MPT's); gamma and beta null: no affine transform (gamma 1, beta 0; OLMo's LayerNorm), and
// layerNormBackwardInput's gamma likewise.
void layerNormForward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                      float* rstd, int64_t M, int64_t H, float eps);
// With `dresidual` (layer_norm_bwd's residual): dx = dresidual + the input gradient, the input gradient
// first rounded to bf16 when `roundBf16` (as the unfused plan stored it); dx may be dresidual.
void layerNormBackwardInput(const float* dy, const float* x, const float* gamma, const float* mean,
                            const float* rstd, float* dx, int64_t M, int64_t H, const float* dresidual = nullptr,
                            bool roundBf16 = false);
// dgamma[H] = Σ_m dy·xhat, dbeta[H] = Σ_m dy (dbeta null: a LayerNorm without beta).
void layerNormBackwardWeight(const float* dy, const float* x, const float* mean, const float* rstd,
                             float* dgamma, float* dbeta, int64_t M, int64_t H, bool accumulate);

// HF LlamaRMSNorm: y = weight * (x * rsqrt(mean(x²) + eps)). Saves rstd[M] for backward.
// weightOffset (Gemma's RMSNorm, attr `weight_offset`): the weight is (weightOffset + weight[h]) in
// f32, y = (x·rstd)·(1 + w) as GemmaRMSNorm computes it; 0 uses weight[h] itself.
void rmsNormForward(const float* x, const float* weight, float* y, float* rstd, int64_t M, int64_t H,
                    float eps, float weightOffset = 0.0f);
// `dresidual`, `roundBf16`: as layerNormBackwardInput's; `weightOffset` as rmsNormForward's (the input
// gradient through weightOffset + weight).
void rmsNormBackwardInput(const float* dy, const float* x, const float* weight, const float* rstd,
                          float* dx, int64_t M, int64_t H, const float* dresidual = nullptr, bool roundBf16 = false,
                          float weightOffset = 0.0f);
// The RMS norm's weight as the kernels use it: weightOffset + w in f32, or w itself when the offset
// is 0 (so a plan without the attr keeps its bits, a −0 weight included).
inline float rmsNormWeight(float w, float weightOffset) { return weightOffset == 0.0f ? w : weightOffset + w; }
// The weight gradient is the same with or without an offset (d(offset + w)/dw = 1).
void rmsNormBackwardWeight(const float* dy, const float* x, const float* rstd, float* dweight, int64_t M,
                           int64_t H, bool accumulate);

// ---------------------------------------------------------------------------------------------------
// Rotary position embedding (Rope.cpp), HF Llama rotate_half convention.
// ---------------------------------------------------------------------------------------------------
// The cos/sin table (RopeTable, makeRopeTable: OpParams.h) is part of the op's definition, built in
// the core (src/ops/Rope.cpp) for every backend.
// y[B,S,n,hd] = x*cos + rotate_half(x)*sin, rotate_half(x) = cat(-x[hd/2:], x[:hd/2]); row s of the
// table is used for sequence index s. y may alias x. table.seqLen must equal S, table.headDim hd.
// rotaryDim (Phi's partial rotary embedding, attr `rotary_dim`; 0 = hd): only each head's first
// rotaryDim dims rotate, rotate_half within them (pairs i and i + rotaryDim/2), over a table built for
// rotaryDim (table.headDim == rotaryDim); dims [rotaryDim, hd) are copied (y = x there). Even,
// 2 <= rotaryDim <= hd (checkRotaryDim). interleaved (GPT-J's rotate_every_two, attr `interleaved`):
// the pairs are dims 2i and 2i + 1, rotated by the table's column i (the angle of inv_freq[i]).
Status ropeForward(const RopeTable& table, const float* x, float* y, int64_t B, int64_t S, int64_t n, int64_t hd,
                   int64_t rotaryDim = 0, bool interleaved = false);
// dx = Rᵀ dy (the rotation by -angle); with rotaryDim < hd the pass-through dims' gradient is dy's.
// dx may alias dy.
Status ropeBackward(const RopeTable& table, const float* dy, float* dx, int64_t B, int64_t S, int64_t n, int64_t hd,
                    int64_t rotaryDim = 0, bool interleaved = false);

// The slope of head g (0-based) of n ALiBi heads, as transformers' build_alibi_tensor (BLOOM) defines
// it: with p = the largest power of two <= n, heads g < p get 2^(−8(g+1)/p), the others
// 2^(−4(2(g−p)+1)/p) (the odd powers of the base of 2p heads). Computed in double, rounded to f32 once,
// so every kernel (CPU, CUDA) adds the same f32 slope. Requires 0 <= g < n.
LLCDIST_HOST_DEVICE inline float alibiSlope(int64_t n, int64_t g) {
  int64_t p = 1;
  while (p * 2 <= n) p *= 2;
  const double e = g < p ? -8.0 * double(g + 1) / double(p) : -4.0 * double(2 * (g - p) + 1) / double(p);
  return static_cast<float>(exp2(e));
}

// ---------------------------------------------------------------------------------------------------
// Causal self-attention (Attention.cpp).
// ---------------------------------------------------------------------------------------------------
// q [B,S,nh,hd]; k, v [B,S,nkv,hd] with nh % nkv == 0; query head h reads kv head h / (nh/nkv) (HF
// repeat_kv; nkv == nh is MHA, nkv == 1 is MQA). scores = q·kᵀ/sqrt(hd), causal mask (key position <=
// query position), softmax in fp32, out = P·v, out [B,S,nh,hd].
// window > 0: Mistral's sliding window, key j visible to query i iff j <= i and i − j < window (each
// row's keys [max(0, i − window + 1), i]); 0: plain causal. A window >= S masks nothing more, and the
// result is the plain causal one bit for bit (the kernels' arithmetic is the same).
// alibi (BLOOM's ALiBi, Press et al. 2022): every visible score gets slope_g · (j − i) added after
// the scaling (key position j, query position i; by global position on the ring's blocks), g = the
// op's head h + alibi.head0 among alibi.heads heads (a tp rank holds a slice of them). transformers'
// build_alibi_tensor adds slope_g · j; the two differ by a constant per row, which the softmax
// cancels. alibi.heads 0: none.
// Saved for backward: lse [B,nh,S] (the log-sum-exp of each masked score row, B·nh·S floats) plus the
// inputs q, k, v and the output; backward recomputes P = exp(scores - lse), so no S×S tensor is kept.
// Temporary workspace: S·S floats (forward), 2·S·S floats (backward).
struct AttentionShape {
  int64_t B = 0, S = 0, nh = 0, nkv = 0, hd = 0;
  int64_t window = 0;  // >= 1: the sliding window; 0: none; < 0 is an InvalidArgument error
  Alibi alibi{};       // BLOOM's ALiBi bias; none by default
};
// The shape of an attention op's parameters (OpParams.h).
inline AttentionShape attentionShape(const AttentionParams& p) {
  return {p.B, p.S, p.nh, p.nkv, p.hd, p.window, p.alibi};
}
// The first key query position i sees under `window` (0: none): max(0, i − window + 1).
inline int64_t attentionFirstKey(int64_t i, int64_t window) { return window > 0 && i >= window ? i - window + 1 : 0; }
// The score pairs (query, key) the FLOP convention counts per (batch, head): S²/2 for causal attention
// (FlashAttention's benchmarks, not the exact S(S+1)/2), less the (S − window)²/2 pairs a window < S masks.
inline double attentionScorePairs(int64_t S, int64_t window) {
  const double s = double(S), cut = window > 0 && window < S ? double(S - window) : 0.0;
  return (s * s - cut * cut) / 2.0;
}
// The softmax scale every attention kernel uses (CPU, CUDA, cuDNN): 1/sqrt(hd) in double, rounded to
// f32 once, so all see one value.
inline float attentionScale(int64_t hd) { return static_cast<float>(1.0 / std::sqrt(double(hd))); }
Status attentionForward(const AttentionShape& shape, const float* q, const float* k, const float* v,
                        float* out, float* lse);
// dq [B,S,nh,hd]; dk, dv [B,S,nkv,hd], summed over the query heads that share each kv head (overwritten).
Status attentionBackward(const AttentionShape& shape, const float* dout, const float* q, const float* k,
                         const float* v, const float* out, const float* lse, float* dq, float* dk,
                         float* dv);
// The same with q, k, v laid out by `in` and dq, dk, dv by `grad` (OpParams.h: QkvLayout; q, k, v point
// at their first rows, e.g. into one packed qkv buffer); out, dout and lse as above. Only the elements the
// layout addresses are read or written (the backward zeroes dk, dv row by row), so the arithmetic is that
// of separate buffers, bit for bit.
Status attentionForward(const AttentionShape& shape, const QkvLayout& in, const float* q, const float* k,
                        const float* v, float* out, float* lse);
Status attentionBackward(const AttentionShape& shape, const QkvLayout& in, const QkvLayout& grad,
                         const float* dout, const float* q, const float* k, const float* v, const float* out,
                         const float* lse, float* dq, float* dk, float* dv);

// Context parallelism's ring attention (AttentionBlock.cpp): Sq query rows against Sk key/value rows,
// causal by global position (key position <= query position; with window > 0 also query position −
// key position < window, Mistral's sliding window as AttentionShape's). Query row i is at qStart + i
// below qSplit and at qStart2 + (i − qSplit) from it; key row j likewise with kvStart, kvSplit, kvStart2
// (the load-balanced layout's two runs; the default split is one run). The key positions increase with
// j (kvStart2 >= kvStart + kvSplit), so the keys a query row sees are a range of the block's rows (a
// prefix without a window). q, out [B,Sq,nh,hd], k, v [B,Sk,nkv,hd] contiguous; lse [B,nh,Sq].
struct AttentionBlock {
  int64_t B = 0, Sq = 0, Sk = 0, nh = 0, nkv = 0, hd = 0;
  int64_t qStart = 0, kvStart = 0;
  int64_t qSplit = PositionRuns::kNoSplit, qStart2 = 0, kvSplit = PositionRuns::kNoSplit, kvStart2 = 0;
  int64_t window = 0;  // >= 1: the sliding window over global positions; 0: none
  Alibi alibi{};       // ALiBi by global position (AttentionShape's)
  PositionRuns qPositions() const { return {qStart, qSplit, qStart2}; }
  PositionRuns kvPositions() const { return {kvStart, kvSplit, kvStart2}; }
};
// The block of S query rows at qPos against S key/value rows at kvPos (the shape's window too).
AttentionBlock attentionBlock(const AttentionShape& shape, const PositionRuns& qPos, const PositionRuns& kvPos);
// The keys query row i sees: block rows [begin, end) (begin 0 without a window; empty: begin == end).
struct AttentionKeyRange {
  int64_t begin = 0, end = 0;
};
AttentionKeyRange attentionBlockKeyRange(const AttentionBlock& block, int64_t i);
// The number of keys query row i sees (end − begin of its range).
int64_t attentionBlockVisibleKeys(const AttentionBlock& block, int64_t i);
// The softmax over this block's visible keys only; a row that sees none gets out 0 and lse -inf.
Status attentionBlockForward(const AttentionBlock& block, const float* q, const float* k, const float* v,
                             float* out, float* lse);
// (out, lse) := the attention over both blocks' keys, from two partial results over disjoint keys:
// lse = log(e^lse + e^lseB), out = e^(lse_old - lse)·out + e^(lseB - lse)·outB (a -inf side is none).
void attentionMerge(int64_t B, int64_t Sq, int64_t nh, int64_t hd, float* out, float* lse, const float* outB,
                    const float* lseB);
// This block's share of the backward, given the final out and lse of the query rows (over every key):
// dq [B,Sq,nh,hd], dk, dv [B,Sk,nkv,hd] are ADDED to (each ring step adds its contribution).
Status attentionBlockBackward(const AttentionBlock& block, const float* dout, const float* q, const float* k,
                              const float* v, const float* out, const float* lse, float* dq, float* dk, float* dv);

// ---------------------------------------------------------------------------------------------------
// Elementwise (Activation.cpp). All of length n; y may alias an input.
// ---------------------------------------------------------------------------------------------------
// HF "gelu_new": 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))).
void geluTanhForward(const float* x, float* y, int64_t n);
void geluTanhBackward(const float* dy, const float* x, float* dx, int64_t n);
// HF "gelu" (torch's exact GELU, GPT-NeoX / Pythia): 0.5·x·(1 + erf(x/√2)).
void geluErfForward(const float* x, float* y, int64_t n);
void geluErfBackward(const float* dy, const float* x, float* dx, int64_t n);
// clamp to [-limit, limit] (OLMo's clip_qkv); dx = dy where -limit <= x <= limit, else 0 (torch's clamp).
void clampForward(const float* x, float* y, int64_t n, float limit);
void clampBackward(const float* dy, const float* x, float* dx, int64_t n, float limit);
// ReLU (OPT's MLP): y = x where x is not below 0 (a NaN passes), else 0; dx = dy where x > 0, else 0
// (torch's threshold_backward: 0 at x = 0).
void reluForward(const float* x, float* y, int64_t n);
void reluBackward(const float* dy, const float* x, float* dx, int64_t n);
// y = x·factor (Cohere's logit_scale; y may be x).
void scaleForward(const float* x, float* y, int64_t n, float factor);
// SwiGLU: y = silu(gate) * up, silu(g) = g·sigmoid(g). dgate/dup may alias dy.
void swigluForward(const float* gate, const float* up, float* y, int64_t n);
void swigluBackward(const float* dy, const float* gate, const float* up, float* dgate, float* dup,
                    int64_t n);
// The gated unit with the gate's activation `act` (swiglu_*'s attr `act`): y = act(gate)·up, dgate =
// (dy·up)·act'(gate), dup = dy·act(gate). kSilu is swigluForward / swigluBackward above; kGeluTanh
// (GeGLU) uses gelu_tanh_fwd's function and gelu_tanh_bwd's derivative (geluTanhForward's math).
void swigluForward(const float* gate, const float* up, float* y, int64_t n, GluActivation act);
void swigluBackward(const float* dy, const float* gate, const float* up, float* dgate, float* dup, int64_t n,
                    GluActivation act);
// Residual add y = a + b (the backward of a residual add is a fan-out of dy: no kernel needed).
void addForward(const float* a, const float* b, float* y, int64_t n);
// y += x (gradient fan-in).
void accumulateInto(const float* x, float* y, int64_t n);

// ---------------------------------------------------------------------------------------------------
// Loss (Loss.cpp): cross entropy over logits [M,V] and int32 targets [M].
// ---------------------------------------------------------------------------------------------------
// *meanLoss = (1/M) Σ_m -log softmax(logits[m])[targets[m]], computed with max subtraction, the mean
// accumulated in double. losses [M] (per token) may be null. A target outside [0,V) is an error.
// Vocabulary padding (Megatron's --make-vocab-size-divisible-by): with 0 < realV <= V only the first realV
// columns are the vocabulary; the rest are padding, outside the softmax (never read) and with exactly
// zero gradient, so the result is bitwise the unpadded op's on the first realV columns. realV 0 = V.
Status crossEntropyForward(const float* logits, const int32_t* targets, float* losses, double* meanLoss,
                           int64_t M, int64_t V, int64_t realV = 0);
// dlogits[M,V] = (softmax(logits) - onehot(targets)) * scale. scale = 1/M for a plain mean, 1/(M·micro)
// under gradient accumulation over `micro` microbatches. dlogits may alias logits. Padding columns
// (j >= realV, realV > 0) get dlogits 0.
Status crossEntropyBackward(const float* logits, const int32_t* targets, float* dlogits, int64_t M,
                            int64_t V, float scale, int64_t realV = 0);

// The fused classifier (op `classifier`, PlanSchema.h kClassifierArgs; llcdist-plan-fuse-classifier).
// Every target is checked first (nothing is written on an error). Then for the rows [r, r + chunk) of
// x [M,K] in turn: logits [rows,N] = x_rows·Wᵀ (W in layout), rounded to bf16 where `bf16Logits` (as
// its buffer stores them), the rows' losses added to *total in row order (double, as
// crossEntropyForward sums them), dlogits = (softmax - onehot)·gradScale in place of the logits
// (rounded likewise), dx_rows = dlogits·W, and dlogitsᵀ·x_rows summed in f32 over the chunks: into
// dwAcc (written) when given, then dw = (accumulate ? dw : 0) + dwAcc; else straight onto dw
// (accumulated when `accumulate` or after the first chunk). The caller adds scale·total/M to the loss.
struct ClassifierArrays {
  const float* x = nullptr;
  const float* w = nullptr;
  const int32_t* targets = nullptr;
  float* logits = nullptr;  // [chunk, N]
  float* dx = nullptr;
  float* dw = nullptr;
  float* dwAcc = nullptr;  // optional
  bool bf16Logits = false;
};
Status classifierForwardBackward(const ClassifierArrays& a, const ClassifierParams& p, double* total);

// Vocabulary-parallel cross entropy (Megatron's vocab_parallel_cross_entropy), as local kernels with
// the plan's all-reduces between them (kernels never communicate): logits [M,V] hold the global
// columns [c·V, (c+1)·V) of a V·count vocabulary (c = shard.index); targets are global ids in
// [0, V·count). realV (0 < realV <= V·count; 0 = all): global columns >= realV are vocabulary padding,
// outside the softmax.
//  1. crossEntropyShardMax: rowMax[M] = each row's max over this shard's real columns (-inf for a
//     shard of padding only), as double; checks every target first, so a bad batch fails every member
//     before the first collective. The plan all-reduces rowMax with max (exact).
//  2. crossEntropyShardSums: rowSums[2M] = [Σ_j exp(x_j - max) | the target's logit on the shard that
//     holds it, else 0], with max = float(rowMax) (exact: a float through double) and the same f32
//     subtraction and double terms as crossEntropyForward. The plan all-reduces rowSums with sum
//     (member order: identical bits on every member).
//  3. crossEntropyForwardVocabParallel: loss_m = max + log(sumexp) - target_logit, *meanLoss their mean
//     (accumulated in double, in row order); crossEntropyBackwardVocabParallel: dlogits[M,V] =
//     (softmax_global(logits) - onehot(targets)) · scale on the local columns, 0 on padding columns;
//     dlogits may alias logits.
// The result equals the unsharded op's up to the order of the Σ exp terms.
Status crossEntropyShardMax(const float* logits, const int32_t* targets, double* rowMax, int64_t M, int64_t V,
                            const VocabShard& shard, int64_t realV = 0);
Status crossEntropyShardSums(const float* logits, const int32_t* targets, const double* rowMax, double* rowSums,
                             int64_t M, int64_t V, const VocabShard& shard, int64_t realV = 0);
Status crossEntropyForwardVocabParallel(const double* rowMax, const double* rowSums, double* meanLoss, int64_t M);
Status crossEntropyBackwardVocabParallel(const float* logits, const int32_t* targets, const double* rowMax,
                                         const double* rowSums, float* dlogits, int64_t M, int64_t V, float scale,
                                         const VocabShard& shard, int64_t realV = 0);

// ---------------------------------------------------------------------------------------------------
// Optimizers, gradient clipping, LR schedules (Optimizer.cpp), matching torch.optim.
// ---------------------------------------------------------------------------------------------------
struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 1e-2;
};
// One torch.optim.AdamW step (single-tensor path, amsgrad=False), step t >= 1 (t counts this step):
//   p *= 1 - lr·wd;  m = lerp(m, g, 1-b1);  v = v·b2 + (1-b2)·g·g;
//   denom = sqrt(v) / sqrt(1 - b2^t) + eps;  p += -(lr / (1 - b1^t)) · m / denom.
// m and v start at zero. Scalars are computed in double and used as fp32, as torch does.
Status adamwStep(float* param, const float* grad, float* m, float* v, int64_t n, int64_t step,
                 const AdamWConfig& cfg);

struct SgdConfig {
  double lr = 1e-2;
  double momentum = 0.0;
  double dampening = 0.0;
  double weightDecay = 0.0;
  bool nesterov = false;
};
// One torch.optim.SGD step, step t >= 1: g += wd·p; with momentum: buf = g at t == 1, else
// buf = momentum·buf + (1-dampening)·g; g = nesterov ? g + momentum·buf : buf; p += -lr·g.
// momentumBuf [n] is required when momentum != 0 and may be null otherwise.
Status sgdStep(float* param, const float* grad, float* momentumBuf, int64_t n, int64_t step,
               const SgdConfig& cfg);

struct GradSpan {
  float* data = nullptr;
  int64_t size = 0;
};
// Σ g² in double (the piece a sharded rank contributes before an all-reduce of squared norms).
double sumOfSquares(const float* g, int64_t n);
// grad_norm_sq: Σ over `grads` of sumOfSquares, then over `replicaShards` when countReplicas (the
// first member of each replica group), each tensor's sum added in list order, then + add. The plan
// all-reduces the result (f64) before gradNormFinish.
double gradNormPartial(const std::vector<GradSpan>& grads, const std::vector<GradSpan>& replicaShards,
                       bool countReplicas, double add);
// grad_norm_clip: returns sqrt(totalSq); with maxNorm > 0 scales every list in place by
// clipCoefficient when it is < 1 (clip_grad_norm_).
double gradNormFinish(double totalSq, double maxNorm, const std::vector<const std::vector<GradSpan>*>& lists);
// sqrt of Σ over tensors of their sums of squares, in double.
double globalGradNorm(const std::vector<GradSpan>& grads);
// torch.nn.utils.clip_grad_norm_ coefficient: min(1, maxNorm / (totalNorm + 1e-6)).
float clipCoefficient(double totalNorm, double maxNorm);
// Clip in place like clip_grad_norm_ (scaled only when the coefficient is < 1); returns the total norm
// before clipping.
double clipGradNorm(const std::vector<GradSpan>& grads, double maxNorm);
void scaleInPlace(float* x, int64_t n, float s);

// Learning rate at 0-based step `step`:
//   step < warmupSteps: maxLr · (step+1) / warmupSteps (both kinds);
//   kConstant: maxLr afterwards;
//   kWarmupCosine: with r = (step - warmupSteps) / (totalSteps - warmupSteps) clamped to [0,1],
//     minLr + 0.5·(1 + cos(π·r))·(maxLr - minLr), so it reaches minLr at step == totalSteps and stays.
struct LrSchedule {
  enum class Kind { kConstant, kWarmupCosine };
  Kind kind = Kind::kConstant;
  double maxLr = 1e-3;
  double minLr = 0.0;
  int64_t warmupSteps = 0;
  int64_t totalSteps = 0;
};
double learningRate(const LrSchedule& schedule, int64_t step);

// ---------------------------------------------------------------------------------------------------
// Mixture of experts (Moe.cpp; family "moe", docs/plan-format.md "Mixture of experts"): HF Mixtral /
// Qwen2-MoE's sparse block as a router, a permutation of the tokens into expert-major rows, the experts'
// grouped GEMMs and the weighted sum back. Sizes from MoeParams (OpParams.h): T tokens, H hidden, E
// experts, k experts per token; the grouped GEMMs' N rows, K inputs, O outputs. Expert ids, slots and
// group sizes are i32 data: a value out of range is a producer's bug, which the kernels guard (nothing is
// read or written out of bounds; what they compute then is stated per kernel); moe_permute's expert ids
// and moe_unpermute's slots out of range are an error (the same message on every backend).
// ---------------------------------------------------------------------------------------------------
// logits [T,E] -> experts [T,k], weights [T,k]: p = softmax(logits[t]) in fp32 (max subtracted, Σ exp in
// double); experts[t, 0..k) the k largest p in descending order, ties to the lower expert index
// (torch.topk); weights[t, j] = p[experts[t, j]], divided by their sum over j (double) when p.normalize.
void moeRouteForward(const float* logits, float* weights, int32_t* experts, const MoeParams& p);
// dlogits [T,E] from dweights [T,k], the selection constant: normalize, w_j = softmax of the selected
// logits: dl[e_j] = w_j·(dw_j − Σ_j' w_j'·dw_j'), 0 elsewhere; else dl[e] = p[e]·(g[e] − Σ_j p[e_j]·dw_j),
// g[e] = Σ of dw_j over the j with e_j = e. An expert id outside [0,E) contributes nothing.
void moeRouteBackward(const float* logits, const int32_t* experts, const float* dweights, float* dlogits,
                      const MoeParams& p);
// The load-balancing loss (transformers' load_balancing_loss_func) from statistics [E] each MoE layer adds
// to: countsOut[e] = counts[e] + the assignments (t, j) to e (an expert id outside [0,E) counts nothing);
// probsOut[e] = probs[e] + Σ_t p[t, e] (p = softmax(logits[t]) as moeRouteForward's; the sum in double).
void moeRouterStats(const float* logits, const int32_t* experts, const int32_t* counts, const float* probs,
                    int32_t* countsOut, float* probsOut, const MoeParams& p);
// dlogits[t, e] = p[t, e]·(g[e] − Σ_e' p[t, e']·g[e']), g = dprobs (the sum in double).
void moeRouterStatsBackward(const float* logits, const float* dprobs, float* dlogits, const MoeParams& p);
// loss[0] += p.scale·Σ_e counts[e]·probs[e] / N², N = Σ_e counts[e] (double); nothing when N <= 0.
void moeAuxLoss(const int32_t* counts, const float* probs, float* loss, const MoeParams& p);
// dprobs[e] = p.scale·counts[e] / N², N = Σ_e counts[e]; 0 when N <= 0.
void moeAuxLossBackward(const int32_t* counts, float* dprobs, const MoeParams& p);
// x [T,H], experts [T,k] -> xp [R,H], slots [T,k], groupSizes [E] (R = moePermuteRows: E·p.capacity
// under a capacity, else T·k): the assignments (t,j) in expert-major order (by expert, then t, then j);
// expert e keeps its first min(n_e, C) of them (C = p.capacity; 0: all, dropless), groupSizes[e] =
// min(n_e, C), the kept rows packed from row 0 in expert order: slots[t,j] = the row of a kept
// assignment, -1 for a dropped one; xp[slots[t,j]] = x[t]; rows of xp past Σ groupSizes are 0. An expert
// id outside [0,E) is an error (moePermuteExpertError, naming the first such token; nothing written).
Status moePermute(const float* x, const int32_t* experts, float* xp, int32_t* slots, int32_t* groupSizes,
                  const MoeParams& p);
// y[t] = Σ_{j=0..k-1} weights[t,j]·xp[slots[t,j]] (f32, in j order; weights null: 1). xp [R,H] (R =
// moeUnpermuteRows: p.N, or T·k when 0). A slot -1 (dropped) adds nothing; one < -1 or >= R is an error
// (moeSlotError, the first such token; nothing written).
Status moeUnpermute(const float* xp, const int32_t* slots, const float* weights, float* y, const MoeParams& p);
// dxp[slots[t,j]] = weights[t,j]·dy[t] (rows no slot names: 0; a row named twice: the sum), dweights[t,j] =
// Σ_h dy[t,h]·xp[slots[t,j],h] (double). xp, dxp [R,H] as moeUnpermute; a slot -1: dweights 0, no row
// written; one < -1 or >= R is an error (moeSlotError; nothing written).
Status moeUnpermuteBackward(const float* dy, const float* xp, const int32_t* slots, const float* weights, float* dxp,
                            float* dweights, const MoeParams& p);
// Grouped GEMMs over consecutive row groups: expert e owns rows [off_e, off_e + n_e) of x [N,K] / y [N,O],
// off_e = Σ_{e'<e} n_e', n_e = groupSizes[e] clamped to [0, N − off_e] (a negative size is 0, the sizes are
// cut at N); w [E,O,K], each expert's weight out_in. Rows from Σ n_e on are 0 in y / dx. One cblas_sgemm
// per non-empty group.
// y_rows = x_rows·w[e]ᵀ.
void groupedLinearForward(const float* x, const float* w, const int32_t* groupSizes, float* y, const MoeParams& p);
// dx_rows = dy_rows·w[e].
void groupedLinearBackwardInput(const float* dy, const float* w, const int32_t* groupSizes, float* dx,
                                const MoeParams& p);
// dw[e] = dy_rowsᵀ·x_rows, added onto dw with p.accumulate; an expert without rows gets 0 (unchanged
// when accumulating).
void groupedLinearBackwardWeight(const float* dy, const float* x, const int32_t* groupSizes, float* dw,
                                 const MoeParams& p);
// Qwen2-MoE's shared-expert gate: y[t,h] = s_t·x[t,h], s_t = sigmoid(gate[t]) in f32. y may alias x.
void sigmoidGateForward(const float* gate, const float* x, float* y, const MoeParams& p);
// dx[t,h] = s_t·dy[t,h]; dgate[t] = s_t·(1 − s_t)·Σ_h dy[t,h]·x[t,h] (double). dx may alias dy.
void sigmoidGateBackward(const float* dy, const float* gate, const float* x, float* dgate, float* dx,
                         const MoeParams& p);
// moe_chunk_transpose (expert parallelism): x, y [N,H]; splits [r·c], chunk (i, j) of splits[i·c + j]
// rows. Not p.inverse: x holds the chunks row-major ((i, j) for i outer, j inner), y column-major (j
// outer, i inner); p.inverse: the other way round. y's rows from Σ splits on are 0; colSizes [c]
// (optional) gets Σ_i splits[i·c + j]. A negative split or Σ splits > N is an InvalidArgument error
// (nothing written) here, the reference; the CUDA kernel, which keeps the splits on the device, clamps
// instead (a negative split is 0, the chunks are cut at N).
Status moeChunkTranspose(const float* x, const int32_t* splits, float* y, int32_t* colSizes, const MoeParams& p);

}  // namespace llcdist::rt
