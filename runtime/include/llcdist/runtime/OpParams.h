// The typed attributes of a bound op, one struct per kernel family (docs/adding-an-op.md): what a
// family's binder (src/ops/<Family>.cpp) computes from the op's attrs, the mesh and the rank once at
// bind time, and what every backend's kernel of that family reads. Each kernel reads only its own
// family's struct (KernelCall::params), so a new op extends one struct, not a catch-all call.
//
// Also the value types the families share with the CPU kernels (Kernels.h): the weight layout, the
// vocabulary shard, the RoPE configuration and its cos/sin table. Core, backend-independent: standard
// library only.
#pragma once

#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/Positions.h"
#include "llcdist/runtime/Status.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <variant>
#include <vector>

namespace llcdist::rt {

enum class WeightLayout {
  kOutIn,  // W is [N,K] and y = x·Wᵀ (torch nn.Linear; Llama)
  kInOut,  // W is [K,N] and y = x·W  (GPT-2 Conv1D)
};

// A vocabulary of V·count entries split into `count` contiguous slices of V; this rank holds slice
// `index`, the global ids [index·V, (index+1)·V). {0, 1} is the unsharded case.
struct VocabShard {
  int64_t index = 0;
  int64_t count = 1;
};

// Rotary position embedding, HF Llama rotate_half convention.
struct RopeConfig {
  float theta = 10000.0f;  // rope_theta
  // rope_scaling {"rope_type": "llama3", ...}; ignored unless llama3 is true.
  bool llama3 = false;
  float factor = 8.0f;
  float lowFreqFactor = 1.0f;
  float highFreqFactor = 4.0f;
  int64_t originalMaxPositionEmbeddings = 8192;
};

// inv_freq[hd/2] exactly as transformers computes it in fp32 (_compute_default_rope_parameters, then
// _compute_llama3_parameters when cfg.llama3): inv_freq[i] = 1 / theta^(2i/hd). hd must be even.
StatusOr<std::vector<float>> ropeInvFreq(const RopeConfig& cfg, int64_t headDim);

// cos/sin tables for S rows at positions `positions` (row s at positions.at(s)): cos[S,hd], sin[S,hd]
// with angle(s,i) = float(pos) * inv_freq[i] in fp32 (as HF does) and emb = cat(freqs, freqs). Part of
// the op's definition, computed on the host for every backend (src/ops/Rope.cpp). headDim is the width
// the table rotates: the head dim, or a partial rotary_dim (Phi: ropeInvFreq and the table built for
// rotary_dim instead of hd, the kernels rotating each head's first headDim dims only).
struct RopeTable {
  PositionRuns positions{};
  int64_t seqLen = 0, headDim = 0;
  std::vector<float> cos, sin;
};
StatusOr<RopeTable> makeRopeTable(const RopeConfig& cfg, int64_t headDim, const PositionRuns& positions, int64_t S);
// Positions [posBegin, posBegin + S).
inline StatusOr<RopeTable> makeRopeTable(const RopeConfig& cfg, int64_t headDim, int64_t posBegin, int64_t S) {
  return makeRopeTable(cfg, headDim, PositionRuns::from(posBegin), S);
}

// ---- The families' parameters (names as in PlanSchema's op table) -----------------------------------

// load_microbatch (family "data"): the microbatch's shape.
struct DataParams {
  int64_t B = 0, S = 0;
};
// zero, split_fwd / split_bwd, shard_slice (family "layout").
struct LayoutParams {
  int64_t rows = 0;            // split_*
  std::vector<int64_t> sizes;  // split_*: the parts' widths
  // shard_slice (ZeRO plans; a kernel, no communication): y[o, k] = x[o, member·inner + k] for the
  // `members` members of the op's `axis`; x holds `total` elements a row (n·inner, or fewer with attr
  // `total`: ZeRO's padded blocks, y's elements past it are zero).
  int64_t members = 1, member = 0, outer = 0, inner = 0, total = 0;
};
// The gate activation of swiglu_fwd / swiglu_bwd (attr `act`, PlanSchema.h kGluActAttr; indexed as
// schema::kGluActNames): silu (SwiGLU, the default) or gelu_tanh (GeGLU: gelu_tanh_fwd's function).
enum class GluActivation { kSilu, kGeluTanh };
// gelu_tanh_*, gelu_erf_*, swiglu_*, add, accumulate, copy, cast (family "elementwise"): every buffer has n elements.
// act: swiglu_*'s attr `act` (kSilu when absent; the other ops ignore it).
struct ElementwiseParams {
  int64_t n = 0;
  GluActivation act = GluActivation::kSilu;
  float limit = 0;   // clamp_*: the bound (> 0)
  float factor = 1;  // scale: the multiplier (finite, non-zero)
};
// embedding_fwd / embedding_bwd_weight, pos_embedding_fwd / pos_embedding_bwd_weight (family "embedding").
struct EmbeddingParams {
  int64_t M = 0, V = 0, H = 0;  // embedding_*
  int64_t B = 0, S = 0, P = 0;  // pos_embedding_* (and H); embedding_* with wpe / dwpe: B = M / S
  bool accumulate = false;
  // Vocabulary-parallel embedding (attr `shard_axis`): this rank's slice of the vocabulary.
  VocabShard vocabShard;
  // embedding_*'s attr `scale` (Gemma's sqrt(hidden) multiplier, kEmbeddingScaleAttr): out =
  // table[id]·float(scale), dtable[id] += float(scale)·dout; 1 when absent (a plain gather / scatter-add).
  double scale = 1.0;
  // embedding_bwd_weight's attr `padding_idx` (kPaddingIdxAttr): the global id whose rows dtable does
  // not accumulate (torch's nn.Embedding(padding_idx)); -1 when absent.
  int64_t paddingIdx = -1;
  // Sequence-parallel position embedding (attr `shard_axis`): the global positions of this rank's S
  // rows, posBegin + s below posSplit and posBegin2 + (s − posSplit) from it (PositionRuns): c·S + s
  // with c its coordinate on the axis, or on cp the layout's (contextParallelPositions); 0..S-1
  // without shard_axis; each plus the attr `offset` (kPositionOffsetAttr), as the fused embedding_*'s
  // posBegin (its positions are 0..S-1 plus that offset).
  int64_t posBegin = 0, posSplit = PositionRuns::kNoSplit, posBegin2 = 0;
  PositionRuns positions() const { return {posBegin, posSplit, posBegin2}; }
};
// layer_norm_*, rms_norm_* (family "norm").
// weightOffset: the RMS norms' attr `weight_offset` (Gemma: y = x·rstd·(weightOffset + w), the input
// gradient through (weightOffset + w); kWeightOffsetAttr); 0 when absent (the weight as it is).
struct NormParams {
  int64_t M = 0, H = 0;
  double eps = 0;
  bool accumulate = false;
  double weightOffset = 0;
};
// linear_*, bias_add (family "linear").
struct LinearParams {
  int64_t M = 0, K = 0, N = 0;
  WeightLayout layout = WeightLayout::kOutIn;
  bool accumulate = false;
};
// rope_fwd / rope_bwd (family "rope"): the table for the rows' positions (0..S-1 without attr
// shard_axis), built once at bind time and shared by copies of the call. rotaryDim: attr `rotary_dim`
// (Phi's partial rotary embedding, kRotaryDimAttr): the first rotaryDim dims of each head rotate, the
// rest pass through, and the table is built for rotaryDim; 0 means hd (every dim rotates).
struct RopeParams {
  int64_t B = 0, S = 0, n = 0, hd = 0;
  std::shared_ptr<const RopeTable> table;
  int64_t rotaryDim = 0;
  bool interleaved = false;  // GPT-J's adjacent pairs (attr `interleaved`); false: rotate_half
};
// ALiBi's heads: an attention op's head h is head head0 + h of the `heads` whose slopes ALiBi defines
// (Kernels.h: alibiSlope). heads 0: no ALiBi.
struct Alibi {
  int64_t heads = 0, head0 = 0;
  bool on() const { return heads > 0; }
};
// attention_fwd / attention_bwd (family "attention"). packedQkv: q, k, v are read from the one `qkv`
// buffer; packedGrad: the backward writes dq, dk, dv into the one `dqkv` (PlanSchema.h).
// attention_block_fwd / _bwd (ring attention): the global positions of the S query rows (this rank's)
// and of the S key/value rows (member (c − step) mod n's); attention_merge uses B, S, nh, hd only.
// window: attr `window` (sliding window: key j visible to query i iff j <= i and i − j < window, by
// global position on the ring's blocks); 0 when absent (plain causal).
// alibi: attr `alibi_heads` (BLOOM's ALiBi over that many heads; Kernels.h: alibiSlope) and, where the
// heads are split over a mesh axis (attr `head_axis`, tensor parallelism), head0 = the rank's coordinate
// on it × nh; none when absent.
struct AttentionParams {
  int64_t B = 0, S = 0, nh = 0, nkv = 0, hd = 0;
  bool packedQkv = false, packedGrad = false;
  PositionRuns qPos{}, kvPos{};
  int64_t window = 0;
  Alibi alibi{};
};
// Where the rows of q, k and v (or of dq, dk, dv) lie, in elements: the offsets of their first rows from
// the buffer each role names, and the row strides (one row = one token's heads). Separate buffers: all
// offsets 0, q's rows nh·hd apart, k's and v's nkv·hd; packed ([B,S,nh+2·nkv,hd]): q at 0, k at nh·hd,
// v at (nh+nkv)·hd, every row (nh+2·nkv)·hd apart. Element (b, s, head h, d) of q is at
// qOffset + (b·S + s)·qRow + h·hd + d; of k and v likewise with kvRow.
struct QkvLayout {
  int64_t qOffset = 0, kOffset = 0, vOffset = 0, qRow = 0, kvRow = 0;
};
inline QkvLayout qkvLayout(int64_t nh, int64_t nkv, int64_t hd, bool packed) {
  if (!packed) return {0, 0, 0, nh * hd, nkv * hd};
  const int64_t row = (nh + 2 * nkv) * hd;
  return {0, nh * hd, (nh + nkv) * hd, row, row};
}
// cross_entropy_fwd / cross_entropy_bwd / cross_entropy_max / cross_entropy_sums (family "loss").
struct LossParams {
  int64_t M = 0, V = 0;
  double scale = 0;
  // attr `real_vocab` (vocabulary padding): global columns >= realVocab are padding; 0 when absent.
  int64_t realVocab = 0;
  // Vocabulary-parallel (attr `shard_axis`): this rank's slice; nullopt without shard_axis.
  std::optional<VocabShard> vocabShard;
};
// classifier (family "loss"): the LM head's GEMMs (linear: M, K, N, layout; accumulate is dw's) and
// the cross entropy over `chunk` rows at a time (PlanSchema.h kClassifierArgs).
struct ClassifierParams {
  LinearParams linear;
  int64_t chunk = 0;
  double scale = 0, gradScale = 0;
  int64_t realVocab = 0;  // attr real_vocab; 0 when absent
};
// grad_norm, grad_norm_sq, grad_norm_clip, adamw, sgd (family "optimizer").
struct OptimizerParams {
  // grad_norm / grad_norm_clip: clip threshold. grad_norm_sq with args.replica_shards: `member` this
  // rank's index on `replica_axis` and `replicas` the attr (a replica shard counts where
  // member % replicas == 0; no communication).
  double maxNorm = 0;
  int64_t member = 0, replicas = 1;
  // adamw / sgd.
  double beta1 = 0, beta2 = 0, eps = 0, weightDecay = 0, momentum = 0;
};
// all_reduce, all_gather, reduce_scatter, all_to_all, send, recv (family "communication"): run through the
// backend's collectives and point-to-point calls, not as kernel launches.
struct CommunicationParams {
  // Collectives: the global ranks of the op's `axis` group (one axis or a set: "dp+cp"; or all_reduce's
  // `group_size` sub-group) in member order, the reduction, and all_gather / reduce_scatter's outer,
  // inner and whole-side sizes (total: n·inner, or the attr `total` of ZeRO's padded blocks).
  std::vector<int> group;
  ReduceOp reduceOp = ReduceOp::kSum;
  int64_t outer = 0, inner = 0, total = 0;
  // all_to_all: x is [outer, mid, n, inner] (xRankDim 2) or [outer, n, mid, inner] (xRankDim 1), y the
  // other of the two (Backend::allToAllAsync).
  int64_t mid = 0;
  int xRankDim = 0;
  // all_to_all_v: c chunks per member, rows of H elements, x's Nx and y's Ny rows.
  int64_t chunks = 0, rowElems = 0, xRows = 0, yRows = 0;
  // The attr `dtype`: f32 (default; bf16 buffers run through f32 staging) or bf16 (on the buffers).
  CommDType dtype = CommDType::kF32;
  // send / recv: the peer's global rank (this rank with coordinate `peer` on `axis`) and the tag.
  int peer = -1;
  int64_t tag = 0;
};

// moe_route / _bwd, moe_router_stats / _bwd, moe_aux_loss / _bwd, moe_permute, moe_unpermute / _bwd,
// grouped_linear_*, sigmoid_gate_* (family "moe"; PlanSchema.h "Mixture of experts"): T tokens, H hidden,
// E experts, k experts per token; the grouped GEMMs' N rows, K inputs and O outputs per expert.
// normalize: moe_route's attr; accumulate: grouped_linear_bwd_weight's.
// moe_chunk_transpose: the r × c grid of chunks (r, c), N rows of H (N, H), inverse.
struct MoeParams {
  int64_t T = 0, H = 0, E = 0, k = 0;
  int64_t N = 0, K = 0, O = 0;
  bool normalize = false, accumulate = false;
  // moe_aux_loss / _bwd's `scale` (coef·E·k², over microbatches; the backward's also over dp).
  double scale = 0;
  // (last: the aggregate initializers of the fields above stay as they are)
  int64_t r = 0, c = 0;
  bool inverse = false;
  // moe_permute's attr `capacity` (0: absent, dropless). moe_unpermute / _bwd's optional rows of xp are N
  // (0: absent, T·k).
  int64_t capacity = 0;
};
// The rows of moe_permute's xp: E·capacity under a capacity, else T·k.
inline int64_t moePermuteRows(const MoeParams& p) { return p.capacity > 0 ? p.E * p.capacity : p.T * p.k; }
// The rows of moe_unpermute / _bwd's xp and dxp: N when given, else T·k.
inline int64_t moeUnpermuteRows(const MoeParams& p) { return p.N > 0 ? p.N : p.T * p.k; }

using OpParams = std::variant<std::monostate, DataParams, LayoutParams, ElementwiseParams, EmbeddingParams,
                              NormParams, LinearParams, RopeParams, AttentionParams, LossParams, OptimizerParams,
                              CommunicationParams, ClassifierParams, MoeParams>;

}  // namespace llcdist::rt
