// The plan format's constants (docs/plan-format.md): format names, version, buffer kinds, dtypes, the
// op table (argument roles and attributes of every op). The compiler includes this header to emit
// plans and the runtime's loader (Plan.h) validates against it, so the two cannot drift apart.
//
// Header-only, standard library only, C++17; no MLIR/LLVM and no other runtime header.
#pragma once

#include <array>
#include <cfloat>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace llcdist::rt::schema {

inline constexpr std::string_view kPlanFormat = "llc-dist-plan";        // manifest.json "format"
inline constexpr std::string_view kProgramFormat = "llc-dist-program";  // program-N.json "format"
inline constexpr std::string_view kManifestFile = "manifest.json";
// Version 2 (2026-12-05): the fill op `zero` is `fill_zero` (in the format "zero" means ZeRO).
inline constexpr int64_t kPlanVersion = 2;            // the version this runtime writes and reads
inline constexpr int64_t kMinSupportedVersion = 2;    // oldest version the loader accepts
inline constexpr int64_t kArenaAlignment = 64;        // every buffer offset is a multiple of this
// Optional features a plan may list in "features"; a plan naming any feature not in this list is
// refused.
//   "pipeline": pipeline parallelism (docs/plan-format.md "Pipeline plans"): mesh.pp may be > 1, one
//               program per stage, params placed by "placements", send/recv ops.
//   "zero":     ZeRO sharding of params, gradients and optimizer state (docs/plan-format.md "ZeRO plans"):
//               params[].zero {axis, stage}, the shard_slice op.
//   "vocab_padding": the embedding / LM-head rows padded past the real vocabulary (Megatron's
//               --make-vocab-size-divisible-by; docs/plan-format.md "Vocabulary padding"):
//               model.padded_vocab_size, params[].vocab_padded, cross_entropy_* attr real_vocab.
//   "async":    asynchronous communication (docs/plan-format.md "Asynchronous plans"): program
//               "queues", op fields "queue" and "token", the wait op.
//   "context_parallel": context parallelism (docs/plan-format.md "Context parallelism"): mesh.cp may be
//               > 1, each rank holds T/cp positions of every sample (mesh.cp_layout), Ulysses' all_to_all
//               op or ring attention's attention_block_fwd / _bwd and attention_merge.
//   "expert_parallel": expert parallelism (docs/plan-format.md "Expert parallelism"): mesh.ep may be > 1
//               (ep ranks drawn from the data-parallel group), the derived axes "ep" and "edp", params
//               sharded on "ep", the all_to_all_v op.
inline constexpr std::string_view kPipelineFeature = "pipeline";
inline constexpr std::string_view kZeroFeature = "zero";
inline constexpr std::string_view kVocabPaddingFeature = "vocab_padding";
inline constexpr std::string_view kAsyncFeature = "async";
inline constexpr std::string_view kContextParallelFeature = "context_parallel";
inline constexpr std::string_view kExpertParallelFeature = "expert_parallel";
inline constexpr std::array<std::string_view, 6> kKnownFeatures = {kPipelineFeature,        kZeroFeature,
                                                                   kVocabPaddingFeature,    kAsyncFeature,
                                                                   kContextParallelFeature, kExpertParallelFeature};
// Asynchronous plans: the first queue of every program (kernels and load_microbatch run on it; a
// program without "queues" has only it).
inline constexpr std::string_view kComputeQueue = "compute";
// ZeRO stages a param's "zero" may name (params[].zero.stage): 1 optimizer state, 2 + gradients, 3 +
// parameters (the param's buffer holds only this rank's block).
inline constexpr int64_t kMinZeroStage = 1;
inline constexpr int64_t kMaxZeroStage = 3;

// Names of the metric buffers the runtime reports each step.
inline constexpr std::string_view kLossMetric = "loss";
inline constexpr std::string_view kGradNormMetric = "grad_norm";

// String enums of the manifest.
inline constexpr std::array<std::string_view, 2> kOptimizerKinds = {"adamw", "sgd"};
inline constexpr std::array<std::string_view, 2> kLrScheduleKinds = {"constant", "cosine"};
inline constexpr std::array<std::string_view, 3> kInitKinds = {"normal", "zeros", "ones"};
inline constexpr std::array<std::string_view, 2> kWeightLayouts = {"out_in", "in_out"};

// ---------------------------------------------------------------------------------------------------
// The device mesh (docs/plan-format.md "Multi-rank plans").
// ---------------------------------------------------------------------------------------------------
// Axis names, as in manifest.mesh, collective attrs `axis` and params[].sharding.axis (indexed by
// MeshAxis). "cp" (context parallelism, feature "context_parallel") is optional in manifest.mesh (absent:
// 1). The collectives' and shard_slice's `axis` and params[].zero.axis may name a set of axes joined by
// '+' ("dp+cp": parseAxisSet, Mesh.h); every other axis attr names one.
inline constexpr std::array<std::string_view, 4> kMeshAxes = {"dp", "tp", "pp", "cp"};
// Expert parallelism (feature "expert_parallel"; docs/plan-format.md "Expert parallelism"): manifest.mesh.ep
// (optional, absent: 1; >= 1, divides mesh.dp) splits each data-parallel group into dp/ep groups of ep
// consecutive members. Two derived axes (indexed by MeshAxis after the four of kMeshAxes) name a single
// axis wherever one is accepted (collectives' `axis`, params[].sharding.axis, grad_norm_sq's
// replica_axis), never inside a set ("dp+ep") nor in rank_order: "ep" (the ep members of this rank's
// data-parallel group that hold it: dp coordinates [d/ep·ep, d/ep·ep + ep), member index d mod ep) and
// "edp" (expert data parallel: the dp/ep members with the same d mod ep, member index d/ep).
inline constexpr std::array<std::string_view, 2> kDerivedMeshAxes = {"ep", "edp"};
// manifest.mesh.rank_order default (fastest-varying axis first): Megatron's order. A plan's rank_order
// lists dp, tp and pp (cp is then the slowest axis, which needs cp = 1) or all four axes.
inline constexpr std::array<std::string_view, 3> kDefaultRankOrder = {"tp", "dp", "pp"};
// With context parallelism: Megatron's tp, cp, dp, pp (the same ranks as kDefaultRankOrder when cp = 1).
inline constexpr std::array<std::string_view, 4> kDefaultRankOrderWithCp = {"tp", "cp", "dp", "pp"};
// The largest mesh.cp (and world size).
inline constexpr int64_t kMaxMeshAxisSize = int64_t(1) << 24;
// manifest.mesh.cp_layout (optional; absent: contiguous): which positions of each sample a cp rank
// holds (docs/plan-format.md "Context parallelism"). Contiguous: coordinate c holds [c·L, (c+1)·L),
// L = T/cp. Load-balanced (Megatron's causal load balancing; needs T divisible by 2·cp): the sample is
// cut into 2·cp chunks of h = T/(2·cp) and coordinate c holds chunks c and 2·cp−1−c, in that order.
// Indexed by CpLayout (Positions.h: contextParallelPositions).
enum class CpLayout { kContiguous, kLoadBalanced };
inline constexpr std::array<std::string_view, 2> kCpLayoutNames = {"contiguous", "load_balanced"};
constexpr std::string_view cpLayoutName(CpLayout l) { return kCpLayoutNames[size_t(l)]; }
constexpr std::optional<CpLayout> parseCpLayout(std::string_view s) {
  for (size_t i = 0; i < kCpLayoutNames.size(); ++i)
    if (kCpLayoutNames[i] == s) return CpLayout(i);
  return std::nullopt;
}
// The optional attr of embedding_fwd / embedding_bwd_weight / cross_entropy_fwd / cross_entropy_bwd that
// makes them vocabulary-parallel over one mesh axis (the op's V is then the local vocabulary slice), and
// of pos_embedding_fwd / pos_embedding_bwd_weight and rope_fwd / rope_bwd that makes them
// sequence-parallel (the op's S is then the local sequence length; the rank holds positions
// [c·S, (c+1)·S), or on cp those of mesh.cp_layout).
inline constexpr std::string_view kShardAxisAttr = "shard_axis";
// The optional int attr (>= 1) of pos_embedding_fwd / pos_embedding_bwd_weight (and of embedding_fwd /
// embedding_bwd_weight with wpe / dwpe): position p reads and writes row p + offset of the table (OPT's
// OPTLearnedPositionalEmbedding: 2; rows [0, offset) unused, their gradient 0). The positions plus the
// offset must fit in P. Absent: 0.
inline constexpr std::string_view kPositionOffsetAttr = "offset";
// The optional int attr of cross_entropy_fwd / cross_entropy_bwd under vocabulary padding (feature
// "vocab_padding"): the real vocabulary; global logit columns at or above it are padding, outside the
// softmax and with zero gradient.
inline constexpr std::string_view kRealVocabAttr = "real_vocab";
// The optional int attr (>= 1) of attention_fwd / attention_bwd / attention_block_fwd / attention_block_bwd
// for Mistral's sliding window (config sliding_window): key position j is visible to query position i
// iff j <= i and i − j < window. Absent: plain causal attention.
inline constexpr std::string_view kWindowAttr = "window";
// The optional int attr (>= 1) of the same four ops for BLOOM's ALiBi: every visible score gets
// slope_g · (key position − query position) added (Kernels.h: alibiSlope of head g of alibi_heads, as
// transformers' build_alibi_tensor). With the optional str attr `head_axis` (tensor parallelism) the op's
// nh heads are the rank's slice of them: heads [c·nh, (c+1)·nh) at coordinate c on that axis, and
// nh × the axis size = alibi_heads; without it nh = alibi_heads.
inline constexpr std::string_view kAlibiHeadsAttr = "alibi_heads";
inline constexpr std::string_view kHeadAxisAttr = "head_axis";
// The optional int attr of rope_fwd / rope_bwd for a partial rotary embedding (Phi's
// partial_rotary_factor: PhiRotaryEmbedding(dim=rotary_ndims)): only the first rotary_dim dims of each
// head rotate (rotate_half within them: pairs j and j + rotary_dim/2), with inv_freq[j] =
// 1/theta^(2j/rotary_dim), j < rotary_dim/2 (the table built for rotary_dim); dims [rotary_dim, hd) pass
// through unchanged. Even, 2 <= rotary_dim <= hd. Absent: rotary_dim = hd (every dim rotates).
inline constexpr std::string_view kRotaryDimAttr = "rotary_dim";
// The optional bool attr of rope_fwd / rope_bwd for GPT-J's rotary embedding (rotate_every_two): the
// rotated pairs are adjacent dims (2j, 2j + 1), each by the angle of inv_freq[j], instead of rotate_half's
// j and j + rotary_dim/2; the table is the same. Absent or false: rotate_half.
inline constexpr std::string_view kInterleavedAttr = "interleaved";
// The optional float attr of rms_norm_fwd / add_rms_norm_fwd / rms_norm_bwd_input / rms_norm_bwd for
// Gemma's RMSNorm: y = x·rstd·(weight_offset + w), the offset added to the weight in fp32 (Gemma:
// `output * (1.0 + self.weight.float())`); the input gradient uses (weight_offset + w), the weight
// gradient is unchanged (rms_norm_bwd_weight has no such attr). Finite as an fp32 value (weightOffsetValid,
// FloatAttrRules.h: the compiler's xf.rms_norm checks the same rule). Absent: 0.
inline constexpr std::string_view kWeightOffsetAttr = "weight_offset";
// The optional float attr of embedding_fwd / embedding_bwd_weight for Gemma's scaled embedding
// (`normalizer = torch.tensor(hidden_size**0.5, dtype)`): out = table[id]·float(scale), dtable[id] +=
// float(scale)·dout. The plan gives the multiplier as the model's dtype rounds it. Finite and non-zero
// as an fp32 value (multiplierValid, FloatAttrRules.h, also xf.embedding's rule); never with the fused position
// embedding (wpe / dwpe). Absent: 1.
inline constexpr std::string_view kEmbeddingScaleAttr = "scale";
// The optional index attr of embedding_bwd_weight for torch's nn.Embedding(padding_idx) (transformers'
// pad_token_id): the ids equal to it add nothing, so that row of dtable gets no gradient from the lookup
// (it keeps its value under accumulate, 0 otherwise). A global token id: below V × the shard_axis size
// (V without it). Absent: every id adds its row.
inline constexpr std::string_view kPaddingIdxAttr = "padding_idx";
// The optional string attr of swiglu_fwd / swiglu_bwd: the gate's activation act in y = act(gate)·up.
// "silu" (the default: SwiGLU, Llama) or "gelu_tanh" (GeGLU, Gemma: gelu_tanh_fwd's function, torch's
// gelu(approximate="tanh")). Indexed by GluActivation (OpParams.h).
inline constexpr std::string_view kGluActAttr = "act";
inline constexpr std::array<std::string_view, 2> kGluActNames = {"silu", "gelu_tanh"};
// rope_fwd / rope_bwd attr `theta` (a model's rope_theta): the runtime computes RoPE's frequencies in
// fp32, as transformers does, so theta must convert to a normal positive fp32 value (a double subnormal
// such as 5e-324 becomes 0, one above FLT_MAX becomes inf). The runtime checks plans against this rule
// (src/ops/Rope.cpp) and the compiler checks model configs (lib/Frontend/ModelConfig.cpp) and xf.rope
// (lib/Dialect/XF/IR/XFOps.cpp) against it, so a plan llc-dist writes is one the runtime loads.
inline constexpr std::string_view kRopeThetaRule =
    "must be a positive number in the normal fp32 range [1.17549435e-38, 3.40282347e+38] (the runtime "
    "computes RoPE frequencies in fp32)";
constexpr bool ropeThetaInRange(double theta) { return theta >= double(FLT_MIN) && theta <= double(FLT_MAX); }
// Llama 3's rope_scaling, as the runtime computes it (in fp32, so the comparisons are of the fp32
// values): the same one rule for the runtime, model configs and xf.rope.
inline constexpr std::string_view kRopeScalingRule =
    "needs factor > 0, 0 < low_freq_factor < high_freq_factor (as fp32 values) and "
    "original_max_position_embeddings > 0";
constexpr bool ropeScalingValid(double factor, double lowFreqFactor, double highFreqFactor,
                                double originalMaxPositionEmbeddings) {
  return float(factor) > 0.0f && float(lowFreqFactor) > 0.0f && float(highFreqFactor) > float(lowFreqFactor) &&
         originalMaxPositionEmbeddings > 0;
}
// Collective reduction ops (attr `op` of all_reduce / reduce_scatter).
inline constexpr std::array<std::string_view, 3> kReduceOpNames = {"sum", "avg", "max"};
// reduce_scatter supports only these in this version.
inline constexpr std::array<std::string_view, 1> kReduceScatterOpNames = {"sum"};
// The optional attr `dtype` of all_reduce / all_gather / reduce_scatter / all_to_all (docs/plan-format.md
// "Collective dtypes"): the collective's element type, its arithmetic and what it moves. "f32" (the
// default) runs it in f32 (bf16 buffers converted in and rounded out once); "bf16" runs it on the bf16 buffers
// themselves (2-byte elements, every partial sum rounded to bf16 as NCCL does) and needs every buffer
// of the op to be bf16. all_to_all_v takes it too: "bf16" needs its x and y bf16 (its splits are i32
// counts); a copy, it moves its rows in their own dtype with or without the attr.
inline constexpr std::string_view kCommDTypeAttr = "dtype";
inline constexpr std::array<std::string_view, 2> kCommDTypeNames = {"f32", "bf16"};

// ---------------------------------------------------------------------------------------------------
// Buffers.
// ---------------------------------------------------------------------------------------------------
enum class BufferKind { kParam, kGrad, kOptimizerState, kActivation, kInput, kMetric, kScratch };
inline constexpr std::array<std::string_view, 7> kBufferKindNames = {
    "param", "grad", "optimizer_state", "activation", "input", "metric", "scratch"};
constexpr std::string_view bufferKindName(BufferKind k) { return kBufferKindNames[size_t(k)]; }
constexpr std::optional<BufferKind> parseBufferKind(std::string_view s) {
  for (size_t i = 0; i < kBufferKindNames.size(); ++i)
    if (kBufferKindNames[i] == s) return BufferKind(i);
  return std::nullopt;
}
// Kinds whose buffers hold state across steps (or the step's inputs and metrics): live for the whole
// step, as the compiler's memory planner places them. Activations and scratch buffers live only between
// their uses (the runtime's measured peak: docs/plan-format.md "Memory").
constexpr bool livesWholeStep(BufferKind k) {
  return k != BufferKind::kActivation && k != BufferKind::kScratch;
}

// Buffer dtypes. `bf16` (bfloat16: the top 16 bits of an IEEE f32; Bf16.h) is a storage dtype: ops
// compute in f32 and round what they write; a kernel variant that takes a bf16 role reads and writes it
// as it is, and the interpreter converts the bf16 arguments of every other (KernelVariant.h;
// docs/plan-format.md "bf16 storage, fp32 arithmetic"). `f64` holds the double-precision partial reductions a kernel hands to an
// explicit collective (grad_norm_sq's squared norm, the vocabulary-parallel cross entropy's row
// statistics): only roles of type kF64 and all_reduce's x take it. Buffer `bytes` = numel ×
// elemTypeSize(dtype).
enum class ElemType { kF32, kI32, kBF16, kF64 };
inline constexpr std::array<std::string_view, 4> kElemTypeNames = {"f32", "i32", "bf16", "f64"};
constexpr std::string_view elemTypeName(ElemType t) { return kElemTypeNames[size_t(t)]; }
constexpr int64_t elemTypeSize(ElemType t) {
  return t == ElemType::kBF16 ? 2 : t == ElemType::kF64 ? 8 : 4;
}
// The float dtypes: what a float role (ArgType::kF32) accepts.
constexpr bool isFloatType(ElemType t) { return t == ElemType::kF32 || t == ElemType::kBF16; }
// The dtypes a parameter (manifest params[].dtype, model.dtype) may have.
inline constexpr std::array<std::string_view, 2> kParamDTypeNames = {"f32", "bf16"};
constexpr std::optional<ElemType> parseElemType(std::string_view s) {
  for (size_t i = 0; i < kElemTypeNames.size(); ++i)
    if (kElemTypeNames[i] == s) return ElemType(i);
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------------
// Ops. Each op: {"op": name, "args": {role: id | [ids]}, "attrs": {...}, "loc": "..."}.
// ---------------------------------------------------------------------------------------------------
// One line per family of ops.
// clang-format off
enum class OpKind {
  kLoadMicrobatch, kFillZero,
  kEmbeddingFwd, kEmbeddingBwdWeight, kPosEmbeddingFwd, kPosEmbeddingBwdWeight,
  kLayerNormFwd, kLayerNormBwdInput, kLayerNormBwdWeight,
  kRmsNormFwd, kRmsNormBwdInput, kRmsNormBwdWeight,
  kLinearFwd, kLinearBwdInput, kLinearBwdWeight, kLinearBwdBias, kBiasAdd,
  kSplitFwd, kSplitBwd, kRopeFwd, kRopeBwd, kAttentionFwd, kAttentionBwd,
  kGeluTanhFwd, kGeluTanhBwd, kSwigluFwd, kSwigluBwd, kAdd, kAccumulate, kCopy,
  kCrossEntropyFwd, kCrossEntropyBwd, kCrossEntropyMax, kCrossEntropySums,
  kGradNorm, kGradNormSq, kGradNormClip, kAdamW, kSgd,
  kAllReduce, kAllGather, kReduceScatter,
  kSend, kRecv, kAllToAll,
  kCast,
  kShardSlice,
  kAttentionBlockFwd, kAttentionBlockBwd, kAttentionMerge,
  kAdamWMulti, kSgdMulti, kCastMulti,
  kAddLayerNormFwd, kAddRmsNormFwd, kLayerNormBwd, kRmsNormBwd,
  kClassifier,
  kMoeRoute, kMoeRouteBwd, kMoePermute, kMoeUnpermute, kMoeUnpermuteBwd,
  kGroupedLinearFwd, kGroupedLinearBwdInput, kGroupedLinearBwdWeight,
  kSigmoidGateFwd, kSigmoidGateBwd,
  kAllToAllV, kMoeChunkTranspose,
  kMoeRouterStats, kMoeRouterStatsBwd, kMoeAuxLoss, kMoeAuxLossBwd,
  kGeluErfFwd, kGeluErfBwd,
  kClampFwd, kClampBwd,
  kReluFwd, kReluBwd,
  kScale,
  kWait,
};
// clang-format on
inline constexpr size_t kNumOpKinds = size_t(OpKind::kWait) + 1;

// one id; one id or absent; a non-empty [ids]; a non-empty [ids] or absent
enum class ArgArity { kOne, kOptional, kList, kOptionalList };
// Whether a role takes a JSON array of ids, and whether it may be absent.
constexpr bool isListArity(ArgArity a) { return a == ArgArity::kList || a == ArgArity::kOptionalList; }
constexpr bool isOptionalArity(ArgArity a) { return a == ArgArity::kOptional || a == ArgArity::kOptionalList; }
// kF32: a float role: the buffer is f32 or bf16 (bf16 arguments are converted to f32 temporaries
// around a kernel variant that takes the role as f32 only: KernelVariant.h; `cast` converts itself); kI32: i32 only (ids, targets);
// kF64: f64 only (the partial reductions of grad_norm_sq and cross_entropy_max / _sums); kReducible: a
// float role that also takes f64 and i32 (all_reduce's x: i32 sums exactly, the load-balancing loss's
// counts); kAny: any dtype (`fill_zero`).
enum class ArgType { kF32, kI32, kF64, kReducible, kAny };
// Whether a role of type t gets the bf16 -> f32 staging of float roles.
constexpr bool isFloatRole(ArgType t) { return t == ArgType::kF32 || t == ArgType::kReducible; }
enum class ArgAccess { kRead, kWrite, kReadWrite };
struct ArgSpec {
  std::string_view role;
  ArgArity arity;
  ArgType type;
  ArgAccess access;
  // Roles this (written) argument may alias exactly (same offset and bytes), '|'-separated; any other
  // overlap between two arguments of one op, at least one of them written, is an error.
  std::string_view mayAlias = {};
  // A read-written role of an op with attr `accumulate`: whether accumulate false makes it only written
  // (the role is summed onto only when accumulating: linear's dw, a norm's dweight). False for a role
  // the op always sums onto whatever `accumulate` says (the classifier's loss; its accumulate is dw's).
  bool governedByAccumulate = true;
  // A list role that also accepts one buffer id in place of the array (read as a list of one): a role
  // that became a list after plans were written with a single id (grad_norm_sq's `add`).
  bool singleIdOk = false;
};

// kInt: a JSON integer >= 1; kIndex: a JSON integer >= 0 (peer coordinates, tags); kFloat: a finite
// JSON number (integers accepted); kIntList: a non-empty array of integers >= 1.
enum class AttrType { kInt, kFloat, kBool, kString, kIntList, kIndex };
struct AttrSpec {
  std::string_view name;
  AttrType type;
  bool required = true;
};

struct OpSpec {
  OpKind kind;
  std::string_view name;
  const ArgSpec* args;
  size_t numArgs;
  const AttrSpec* attrs;
  size_t numAttrs;
};

namespace detail {
using A = ArgSpec;
using T = AttrSpec;
constexpr auto One = ArgArity::kOne, Opt = ArgArity::kOptional, List = ArgArity::kList,
               OptList = ArgArity::kOptionalList;
constexpr auto F = ArgType::kF32, I = ArgType::kI32, D = ArgType::kF64, FDI = ArgType::kReducible,
               Any = ArgType::kAny;
constexpr auto R = ArgAccess::kRead, W = ArgAccess::kWrite, RW = ArgAccess::kReadWrite;
constexpr auto Int = AttrType::kInt, Flt = AttrType::kFloat, Bool = AttrType::kBool,
               Str = AttrType::kString, Ints = AttrType::kIntList, Idx = AttrType::kIndex;

inline constexpr A kLoadArgs[] = {{"ids", One, I, W}, {"targets", One, I, W}};
inline constexpr T kLoadAttrs[] = {{"B", Int}, {"S", Int}};
inline constexpr A kFillZeroArgs[] = {{"x", List, Any, W}};
// `wpe` (optional, with attrs S and P): the learned position embedding added in the same op, out[b, s] =
// table[ids[b, s]] + wpe[s] for the M = B·S rows (llcdist-plan-fuse-embedding); `dwpe` likewise its
// gradient from the same dout, accumulated as dtable is. Never with shard_axis.
inline constexpr A kEmbFwdArgs[] = {{"ids", One, I, R}, {"table", One, F, R}, {"out", One, F, W}, {"wpe", Opt, F, R}};
// `shard_axis` (optional): vocabulary-parallel table; V is the local row count (see plan-format.md).
// `scale` (optional, kEmbeddingScaleAttr): Gemma's embedding multiplier, never with wpe / dwpe.
// `offset` (optional, with wpe / dwpe: kPositionOffsetAttr): position p's row of wpe is p + offset.
inline constexpr T kEmbFwdAttrs[] = {{"M", Int},
                                     {"V", Int},
                                     {"H", Int},
                                     {"S", Int, false},
                                     {"P", Int, false},
                                     {"shard_axis", Str, false},
                                     {"scale", Flt, false},
                                     {"offset", Int, false}};
// `padding_idx` (optional, kPaddingIdxAttr): the global id whose rows add nothing to dtable.
inline constexpr A kEmbBwdArgs[] = {{"ids", One, I, R}, {"dout", One, F, R}, {"dtable", One, F, RW},
                                    {"dwpe", Opt, F, RW}};
inline constexpr T kEmbBwdAttrs[] = {{"M", Int},
                                     {"V", Int},
                                     {"H", Int},
                                     {"accumulate", Bool},
                                     {"S", Int, false},
                                     {"P", Int, false},
                                     {"shard_axis", Str, false},
                                     {"scale", Flt, false},
                                     {"offset", Int, false},
                                     {"padding_idx", Idx, false}};
inline constexpr A kPosFwdArgs[] = {{"x", One, F, R}, {"wpe", One, F, R}, {"y", One, F, W, "x"}};
// `shard_axis` (optional): sequence parallelism; S is the local sequence length and the rank holds
// positions [c·S, (c+1)·S), c its coordinate on the axis, or on "cp" the positions of
// manifest.mesh.cp_layout (see plan-format.md). `offset` (optional, kPositionOffsetAttr): the table row of
// position 0.
inline constexpr T kPosFwdAttrs[] = {
    {"B", Int}, {"S", Int}, {"H", Int}, {"P", Int}, {"shard_axis", Str, false}, {"offset", Int, false}};
inline constexpr A kPosBwdArgs[] = {{"dy", One, F, R}, {"dwpe", One, F, RW}};
inline constexpr T kPosBwdAttrs[] = {{"B", Int},
                                     {"S", Int},
                                     {"H", Int},
                                     {"P", Int},
                                     {"accumulate", Bool},
                                     {"shard_axis", Str, false},
                                     {"offset", Int, false}};
// LayerNorm's gamma and beta: both, gamma alone (no bias: torch's LayerNorm(bias=False), MPT's) or
// neither (no affine transform: gamma 1, beta 0; OLMo's OlmoLayerNorm), in layer_norm_fwd,
// add_layer_norm_fwd and (gamma) layer_norm_bwd_input; dbeta in the backwards with beta.
inline constexpr A kLnFwdArgs[] = {{"x", One, F, R}, {"gamma", Opt, F, R}, {"beta", Opt, F, R},
                                   {"y", One, F, W}, {"mean", One, F, W},  {"rstd", One, F, W}};
inline constexpr T kNormFwdAttrs[] = {{"M", Int}, {"H", Int}, {"eps", Flt}};
// The RMS norms' optional `weight_offset` (Gemma: y = x·rstd·(weight_offset + w); kWeightOffsetAttr):
// rms_norm_fwd / add_rms_norm_fwd, rms_norm_bwd_input and the fused rms_norm_bwd (its input gradient).
inline constexpr T kRmsFwdAttrs[] = {{"M", Int}, {"H", Int}, {"eps", Flt}, {"weight_offset", Flt, false}};
inline constexpr T kRmsBwdInAttrs[] = {{"M", Int}, {"H", Int}, {"weight_offset", Flt, false}};
inline constexpr T kRmsBwdAttrs[] = {{"M", Int}, {"H", Int}, {"accumulate", Bool}, {"weight_offset", Flt, false}};
inline constexpr A kLnBwdInArgs[] = {{"dy", One, F, R},   {"x", One, F, R},    {"gamma", Opt, F, R},
                                     {"mean", One, F, R}, {"rstd", One, F, R}, {"dx", One, F, W}};
inline constexpr T kMHAttrs[] = {{"M", Int}, {"H", Int}};
inline constexpr A kLnBwdWArgs[] = {{"dy", One, F, R},   {"x", One, F, R},       {"mean", One, F, R},
                                    {"rstd", One, F, R}, {"dgamma", One, F, RW}, {"dbeta", Opt, F, RW}};
inline constexpr T kMHAccAttrs[] = {{"M", Int}, {"H", Int}, {"accumulate", Bool}};
inline constexpr A kRmsFwdArgs[] = {{"x", One, F, R}, {"weight", One, F, R}, {"y", One, F, W}, {"rstd", One, F, W}};
inline constexpr A kRmsBwdInArgs[] = {{"dy", One, F, R}, {"x", One, F, R}, {"weight", One, F, R},
                                      {"rstd", One, F, R}, {"dx", One, F, W}};
inline constexpr A kRmsBwdWArgs[] = {{"dy", One, F, R}, {"x", One, F, R}, {"rstd", One, F, R},
                                     {"dweight", One, F, RW}};
// The GELU epilogues (llcdist-plan-fuse-epilogues; cuBLASLt's GELU_AUX(_BIAS) and DGELU): linear_fwd's
// optional gelu = gelu_tanh_fwd of y as stored (y stays: the pre-activation the backward reads);
// linear_bwd_input's optional gelu_x: dx = gelu_tanh_bwd(dy·W as dx stores it, gelu_x), accumulate off.
inline constexpr A kLinFwdArgs[] = {{"x", One, F, R}, {"w", One, F, R}, {"bias", Opt, F, R}, {"y", One, F, W},
                                    {"gelu", Opt, F, W}};
inline constexpr T kLinFwdAttrs[] = {{"M", Int}, {"K", Int}, {"N", Int}, {"layout", Str}};
inline constexpr A kLinBwdInArgs[] = {{"dy", One, F, R}, {"w", One, F, R}, {"gelu_x", Opt, F, R}, {"dx", One, F, RW}};
inline constexpr T kLinBwdAttrs[] = {{"M", Int}, {"K", Int}, {"N", Int}, {"layout", Str}, {"accumulate", Bool}};
// linear_bwd_weight's optional db: linear_bwd_bias of the same dy in the same op (the weight gradient
// GEMM's bias-gradient epilogue; llcdist-plan-fuse-epilogues), accumulated as dw is.
inline constexpr A kLinBwdWArgs[] = {{"dy", One, F, R}, {"x", One, F, R}, {"dw", One, F, RW}, {"db", Opt, F, RW}};
inline constexpr A kLinBwdBArgs[] = {{"dy", One, F, R}, {"db", One, F, RW}};
inline constexpr T kLinBwdBAttrs[] = {{"M", Int}, {"N", Int}, {"accumulate", Bool}};
// bias_add: y[M,N] += bias[N], in place.
inline constexpr A kBiasAddArgs[] = {{"y", One, F, RW}, {"bias", One, F, R}};
inline constexpr T kMNAttrs[] = {{"M", Int}, {"N", Int}};
inline constexpr A kSplitFwdArgs[] = {{"x", One, F, R}, {"outs", List, F, W}};
inline constexpr A kSplitBwdArgs[] = {{"douts", List, F, R}, {"dx", One, F, W}};
inline constexpr T kSplitAttrs[] = {{"rows", Int}, {"sizes", Ints}};
inline constexpr A kRopeFwdArgs[] = {{"x", One, F, R}, {"y", One, F, W, "x"}};
inline constexpr A kRopeBwdArgs[] = {{"dy", One, F, R}, {"dx", One, F, W, "dy"}};
// `shard_axis` (optional): the S rows are this rank's rows of a sequence split over that axis, at the
// positions pos_embedding_fwd's shard_axis gives them (cp: manifest.mesh.cp_layout); absent: 0..S-1.
// `rotary_dim` (optional, kRotaryDimAttr): Phi's partial rotary embedding; absent: hd. `interleaved`
// (optional, kInterleavedAttr): GPT-J's adjacent pairs.
inline constexpr T kRopeAttrs[] = {{"B", Int},
                                   {"S", Int},
                                   {"n", Int},
                                   {"hd", Int},
                                   {"theta", Flt},
                                   {"llama3", Bool, false},
                                   {"factor", Flt, false},
                                   {"low_freq_factor", Flt, false},
                                   {"high_freq_factor", Flt, false},
                                   {"original_max_position_embeddings", Int, false},
                                   {"shard_axis", Str, false},
                                   {"rotary_dim", Int, false},
                                   {"interleaved", Bool, false}};
// q, k, v, or `qkv`: the three packed in one [B,S,nh+2·nkv,hd] buffer, q's heads, then k's, then v's
// (the QKV GEMM's output; llcdist-plan-packed-qkv). The backward writes dq, dk, dv, or `dqkv` packed
// the same way. Exactly one form each (src/ops/Attention.cpp).
// `window` (optional; Mistral's sliding window): key j is visible to query i iff j <= i and i − j < window
// (transformers masks j <= i − sliding_window); absent: plain causal (j <= i). On the ring's blocks the
// same by global position. `alibi_heads` / `head_axis` (optional; BLOOM's ALiBi): kAlibiHeadsAttr.
inline constexpr A kAttnFwdArgs[] = {{"q", Opt, F, R},   {"k", Opt, F, R},  {"v", Opt, F, R}, {"qkv", Opt, F, R},
                                     {"out", One, F, W}, {"lse", One, F, W}};
inline constexpr T kAttnAttrs[] = {{"B", Int},
                                   {"S", Int},
                                   {"nh", Int},
                                   {"nkv", Int},
                                   {"hd", Int},
                                   {"window", Int, false},
                                   {"alibi_heads", Int, false},
                                   {"head_axis", Str, false}};
inline constexpr A kAttnBwdArgs[] = {{"dout", One, F, R}, {"q", Opt, F, R},   {"k", Opt, F, R},
                                     {"v", Opt, F, R},    {"qkv", Opt, F, R}, {"out", One, F, R},
                                     {"lse", One, F, R},  {"dq", Opt, F, W},  {"dk", Opt, F, W},
                                     {"dv", Opt, F, W},   {"dqkv", Opt, F, W}};
// Ring attention (context parallelism, docs/plan-format.md "Context parallelism"): one step of the ring.
// q, out [B,S,nh,hd] are this rank's S rows (coordinate c on `axis`); k, v [B,S,nkv,hd] are the rows of
// member (c − step) mod n; causal by global position (with `window`: also qpos − kpos < window); lse
// [B,nh,S] (−inf for a row that sees no key of the block, whose out is 0). The backward reads the final out and lse
// (over all keys) and ADDS this block's share to dq, dk, dv. attention_merge: (out, lse) := the merge of two partial
// results over disjoint keys by their log-sum-exp.
inline constexpr A kAttnBlockFwdArgs[] = {
    {"q", One, F, R}, {"k", One, F, R}, {"v", One, F, R}, {"out", One, F, W}, {"lse", One, F, W}};
inline constexpr A kAttnBlockBwdArgs[] = {{"dout", One, F, R}, {"q", One, F, R},   {"k", One, F, R},
                                          {"v", One, F, R},    {"out", One, F, R}, {"lse", One, F, R},
                                          {"dq", One, F, RW},  {"dk", One, F, RW}, {"dv", One, F, RW}};
inline constexpr T kAttnBlockAttrs[] = {{"B", Int},
                                        {"S", Int},
                                        {"nh", Int},
                                        {"nkv", Int},
                                        {"hd", Int},
                                        {"axis", Str},
                                        {"step", Idx},
                                        {"window", Int, false},
                                        {"alibi_heads", Int, false},
                                        {"head_axis", Str, false}};
inline constexpr A kAttnMergeArgs[] = {
    {"out", One, F, RW}, {"lse", One, F, RW}, {"out_b", One, F, R}, {"lse_b", One, F, R}};
inline constexpr T kAttnMergeAttrs[] = {{"B", Int}, {"S", Int}, {"nh", Int}, {"hd", Int}};
inline constexpr T kNAttrs[] = {{"n", Int}};
inline constexpr A kGeluFwdArgs[] = {{"x", One, F, R}, {"y", One, F, W, "x"}};
inline constexpr A kGeluBwdArgs[] = {{"dy", One, F, R}, {"x", One, F, R}, {"dx", One, F, W, "dy|x"}};
// clamp_fwd / clamp_bwd (OLMo's clip_qkv): y = min(max(x, -limit), limit); dx = dy where -limit <= x <= limit
// (both ends in, as torch's clamp passes its gradient), else 0.
inline constexpr T kClampAttrs[] = {{"n", Int}, {"limit", Flt}};
// scale (Cohere's logit_scale; its own gradient): y = x·float(factor), factor finite and non-zero as fp32
// (multiplierValid, FloatAttrRules.h; the compiler's xf.scale checks the same rule).
inline constexpr T kScaleAttrs[] = {{"n", Int}, {"factor", Flt}};
inline constexpr A kSwiFwdArgs[] = {{"gate", One, F, R}, {"up", One, F, R}, {"y", One, F, W, "gate|up"}};
inline constexpr A kSwiBwdArgs[] = {{"dy", One, F, R}, {"gate", One, F, R}, {"up", One, F, R},
                                    {"dgate", One, F, W, "dy"}, {"dup", One, F, W, "dy"}};
// `act` (optional, kGluActAttr): the gate's activation, "silu" (default) or "gelu_tanh" (GeGLU).
inline constexpr T kSwiAttrs[] = {{"n", Int}, {"act", Str, false}};
inline constexpr A kAddArgs[] = {{"a", One, F, R}, {"b", One, F, R}, {"y", One, F, W, "a|b"}};
inline constexpr A kAccArgs[] = {{"x", One, F, R}, {"y", One, F, RW}};
inline constexpr A kCopyArgs[] = {{"x", One, F, R}, {"y", One, F, W}};
// cast: y = x converted between float dtypes (f32 -> bf16 rounds to nearest even, bf16 -> f32 is exact,
// the same dtype copies); x and y never overlap.
inline constexpr A kCastArgs[] = {{"x", One, F, R}, {"y", One, F, W}};
// `shard_axis` (optional): vocabulary-parallel logits; V is the local column count, and row_max [M] and
// row_sums [2M] (f64, required with shard_axis and only then) are the global row statistics that
// cross_entropy_max / cross_entropy_sums and their all-reduces computed (see plan-format.md).
inline constexpr A kCeFwdArgs[] = {{"logits", One, F, R}, {"targets", One, I, R}, {"loss", One, F, RW},
                                   {"row_max", Opt, D, R}, {"row_sums", Opt, D, R}};
inline constexpr A kCeBwdArgs[] = {{"logits", One, F, R}, {"targets", One, I, R},
                                   {"dlogits", One, F, W, "logits"}, {"row_max", Opt, D, R},
                                   {"row_sums", Opt, D, R}};
// `real_vocab` (optional): the real vocabulary under vocabulary padding (global columns >= it are padding).
inline constexpr T kCeAttrs[] = {{"M", Int}, {"V", Int}, {"scale", Flt}, {"shard_axis", Str, false},
                                 {"real_vocab", Int, false}};
// The local steps of the vocabulary-parallel cross entropy (Megatron's decomposition), each followed
// by an all_reduce over shard_axis in the plan: cross_entropy_max writes every row's maximum over this
// shard's real columns (-inf for a shard of padding only); cross_entropy_sums, given the reduced
// maxima, writes [Σ exp(x - max) for each row | the target's logit where this shard holds it, else 0].
inline constexpr A kCeMaxArgs[] = {{"logits", One, F, R}, {"targets", One, I, R}, {"row_max", One, D, W}};
inline constexpr A kCeSumsArgs[] = {{"logits", One, F, R}, {"targets", One, I, R}, {"row_max", One, D, R},
                                    {"row_sums", One, D, W}};
// classifier (llcdist-plan-fuse-classifier): the LM head, the cross entropy and their backward in
// one op, over chunks of `chunk` token rows: per chunk, logits = x·Wᵀ (W in `layout`, no bias) into
// `logits` (a [chunk, N] scratch, never the whole [M, N]), loss += scale · Σ row losses / M (the rows
// summed in order over all chunks, as cross_entropy_fwd does), the gradient (softmax - onehot) ·
// grad_scale in place of the chunk's logits, then dx rows = dlogits·W and dw += dlogitsᵀ·x, dw summed
// in f32 over the chunks and rounded once into its dtype (`dw_acc`: an f32 [N,K] scratch for that sum
// where dw is not f32 and there are several chunks; a backend may sum elsewhere in f32).
// The loss is summed onto whatever `accumulate` (dw's) says.
inline constexpr A kClassifierArgs[] = {{"x", One, F, R},      {"w", One, F, R},       {"targets", One, I, R},
                                        {"loss", One, F, RW, {}, /*governedByAccumulate=*/false},
                                        {"logits", One, F, W}, {"dx", One, F, W},      {"dw", One, F, RW},
                                        {"dw_acc", Opt, F, W}};
inline constexpr T kClassifierAttrs[] = {{"M", Int},          {"K", Int},          {"N", Int},
                                         {"layout", Str},     {"accumulate", Bool}, {"chunk", Int},
                                         {"scale", Flt},      {"grad_scale", Flt}, {"real_vocab", Int, false}};
inline constexpr T kCeStatsAttrs[] = {{"M", Int}, {"V", Int}, {"shard_axis", Str}, {"real_vocab", Int, false}};
// grad_norm: the local norm of `grads` and the clip (a plan whose gradients are whole on every rank).
inline constexpr A kGradNormArgs[] = {{"grads", List, F, RW}, {"norm", One, F, W}};
inline constexpr T kMaxNormAttrs[] = {{"max_norm", Flt}};
// grad_norm_sq: sq = Σ g² over `grads` (+ over `replica_shards` on the first member of each replica
// group: member index on `replica_axis` a multiple of `replicas`; kv-head replication) (+ add), summed
// in double. The plan all-reduces partial sums between grad_norm_sq and grad_norm_clip (sharded
// gradients over their axis, then each pipeline / ZeRO axis); no role present: sq = 0.
// `add`: f64 [1] partial sums added at the end, in list order (grads, then replica_shards, then each add);
// a list role that also loads from a single id (ArgSpec::singleIdOk: plans written before it was a list).
inline constexpr A kGradNormSqArgs[] = {{"grads", OptList, F, R}, {"replica_shards", OptList, F, R},
                                        {"add", OptList, D, R, {}, true, /*singleIdOk=*/true}, {"sq", One, D, W}};
inline constexpr T kGradNormSqAttrs[] = {{"replicas", Int, false}, {"replica_axis", Str, false}};
// grad_norm_clip: norm = sqrt(sq); with max_norm > 0 every buffer of `grads` is clipped in place.
inline constexpr A kGradNormClipArgs[] = {{"sq", One, D, R}, {"grads", OptList, F, RW}, {"norm", One, F, W}};
inline constexpr A kAdamArgs[] = {{"param", One, F, RW}, {"grad", One, F, R}, {"m", One, F, RW}, {"v", One, F, RW}};
inline constexpr T kAdamAttrs[] = {{"beta1", Flt}, {"beta2", Flt}, {"eps", Flt}, {"weight_decay", Flt}};
inline constexpr A kSgdArgs[] = {{"param", One, F, RW}, {"grad", One, F, R}, {"momentum_buf", Opt, F, RW}};
inline constexpr T kSgdAttrs[] = {{"momentum", Flt}, {"weight_decay", Flt}};
// The collectives' `axis`: one mesh axis or a set ("dp+cp"; n the product of the sizes, members in global
// rank order).
// `group_size` (optional): the `axis` group's n members form n / group_size sub-groups of group_size
// consecutive members, and each reduces over its own (kv-head replicas); absent: the whole group.
// x: f32 / bf16, or f64 (the partial reductions of grad_norm_sq and cross_entropy_max / _sums: an f64
// buffer is always reduced in f64).
inline constexpr A kAllReduceArgs[] = {{"x", List, FDI, RW}};
inline constexpr T kAllReduceAttrs[] = {{"axis", Str}, {"op", Str}, {"group_size", Int, false}, {"dtype", Str, false}};
inline constexpr A kGatherArgs[] = {{"x", One, F, R}, {"y", One, F, W}};
// `total` (optional, ZeRO's padded blocks): the whole side holds only `total` <= n·inner elements per
// outer row, the first `total` of the padded [outer, n·inner]: all_gather drops the rest, reduce_scatter
// (and shard_slice) reads it as zeros. Absent: total = n·inner.
inline constexpr T kAllGatherAttrs[] = {
    {"axis", Str}, {"outer", Int}, {"inner", Int}, {"total", Int, false}, {"dtype", Str, false}};
inline constexpr T kReduceScatterAttrs[] = {
    {"axis", Str}, {"outer", Int}, {"inner", Int}, {"op", Str}, {"total", Int, false}, {"dtype", Str, false}};
// all_to_all (context parallelism, Ulysses): with n the size of `axis`, x and y hold O·M·n·I elements.
// x_rank_dim 2: x is [O, M, n, I] and y is [O, n, M, I]; x_rank_dim 1: x is [O, n, M, I] and y is
// [O, M, n, I]. Block j of x's rank dimension (O·M·I elements) goes to member j; the block from member
// i lands at index i of y's rank dimension (a rank keeps its own block). x and y never overlap.
inline constexpr T kAllToAllAttrs[] = {{"axis", Str},  {"outer", Int},      {"mid", Int},
                                       {"inner", Int}, {"x_rank_dim", Int}, {"dtype", Str, false}};
// all_to_all_v (expert parallelism's token dispatch and combine): rows of H elements in variable-size
// chunks. n the size of `axis` (one axis, "ep" in the compiler's plans), c chunks per member. This member
// (me) sends to member i the c chunks of send_splits[i·c .. i·c + c) rows, taken consecutively from row 0
// of x [Nx, H] in (i, j) order. The splits are exchanged first: recv_splits[i·c + j] = member i's
// send_splits[me·c + j]; then y [Ny, H] holds the rows from member 0 (its chunks j = 0..c−1 in order),
// then member 1's, ..., from row 0, and every row past Σ recv_splits is zero. Run-time errors: a negative
// split, Σ send_splits > Nx, Σ recv_splits > Ny (the plan's capacity). x and y never overlap. Its own
// backward (a second all_to_all_v with the first's recv_splits as send_splits). `dtype` as for the others.
inline constexpr A kAllToAllVArgs[] = {
    {"x", One, F, R}, {"send_splits", One, I, R}, {"y", One, F, W}, {"recv_splits", One, I, W}};
inline constexpr T kAllToAllVAttrs[] = {{"axis", Str}, {"c", Int},  {"H", Int},
                                        {"Nx", Int},   {"Ny", Int}, {"dtype", Str, false}};
// Point-to-point (pipeline plans, ring attention): the peer is the rank with this rank's coordinates
// except on `axis`, where it has coordinate `peer`, or with `shift` (a ring) (c + shift) mod n, c this
// rank's coordinate and n the axis size, 1 <= shift <= n − 1; exactly one of peer and shift. `tag` is
// checked against the matching op's, never used to reorder (FIFO per ordered pair).
// send / recv move a buffer as it is stored: a float one, or i32 (the load-balancing loss's counts).
inline constexpr A kSendArgs[] = {{"x", One, Any, R}};
inline constexpr A kRecvArgs[] = {{"y", One, Any, W}};
inline constexpr T kP2PAttrs[] = {{"axis", Str}, {"peer", Idx, false}, {"shift", Int, false}, {"tag", Idx}};
// shard_slice (ZeRO plans): x is [outer, n·inner], y is [outer, inner]: y[o, k] = x[o, c·inner + k], c this
// rank's member index on `axis` (n its size; a set as for the collectives). No communication; x and y
// never overlap. With `total` (padded blocks, as for all_gather) x is [outer, total] and y's elements
// past it are zero.
inline constexpr A kShardSliceArgs[] = {{"x", One, F, R}, {"y", One, F, W}};
inline constexpr T kShardSliceAttrs[] = {{"axis", Str}, {"outer", Int}, {"inner", Int}, {"total", Int, false}};

// adamw_multi / sgd_multi: adamw's / sgd's update of a list of tensors with the same hyperparameters
// in one op (one launch on a GPU; llcdist-plan-fuse-optimizer merges the per-parameter updates into
// them): the k-th buffers of the roles belong together (numel(params[k]) = numel(grads[k]) = ...), and
// each tensor's update is exactly adamw's / sgd's on those buffers.
inline constexpr A kAdamMultiArgs[] = {{"params", List, F, RW}, {"grads", List, F, R}, {"m", List, F, RW},
                                       {"v", List, F, RW}};
inline constexpr A kSgdMultiArgs[] = {{"params", List, F, RW}, {"grads", List, F, R}, {"momentum_bufs", OptList, F, RW}};
// cast_multi: cast over lists, y[k] = x[k] converted (numel(x[k]) = numel(y[k])); the bf16 copies of a
// mixed-precision plan's masters refreshed in one op.
inline constexpr A kCastMultiArgs[] = {{"x", List, F, R}, {"y", List, F, W}};
// The fused norms (llcdist-plan-fuse-norm). add_*_norm_fwd: sum = a + b (`add`), then the norm's forward
// of sum (the residual stream and its normalized value in one pass). *_norm_bwd: the weight gradients
// and the input gradient of the norm in one op, and with `dresidual` dx = dresidual + the input gradient
// (the residual's add). Each intermediate the unfused ops stored is rounded as its buffer was (sum as
// stored, the input gradient to dx's dtype): the same bits as the unfused ops.
inline constexpr A kAddLnFwdArgs[] = {{"a", One, F, R},     {"b", One, F, R},    {"sum", One, F, W, "a|b"},
                                      {"gamma", Opt, F, R}, {"beta", Opt, F, R}, {"y", One, F, W},
                                      {"mean", One, F, W},  {"rstd", One, F, W}};
inline constexpr A kAddRmsFwdArgs[] = {{"a", One, F, R},      {"b", One, F, R}, {"sum", One, F, W, "a|b"},
                                       {"weight", One, F, R}, {"y", One, F, W}, {"rstd", One, F, W}};
// layer_norm_bwd's gamma, dgamma and dbeta: all three, gamma and dgamma (no beta), or none (a LayerNorm
// without an affine transform: the input gradient and the residual's add only).
inline constexpr A kLnBwdArgs[] = {
    {"dy", One, F, R},    {"x", One, F, R},         {"gamma", Opt, F, R},           {"mean", One, F, R},
    {"rstd", One, F, R},  {"dresidual", Opt, F, R}, {"dx", One, F, W, "dresidual"}, {"dgamma", Opt, F, RW},
    {"dbeta", Opt, F, RW}};
inline constexpr A kRmsBwdArgs[] = {{"dy", One, F, R},        {"x", One, F, R},
                                    {"weight", One, F, R},    {"rstd", One, F, R},
                                    {"dresidual", Opt, F, R}, {"dx", One, F, W, "dresidual"},
                                    {"dweight", One, F, RW}};

// Mixture of experts (family "moe"; docs/plan-format.md "Mixture of experts"). T tokens (rows), H hidden,
// E experts, k experts per token (top_k), N = T·k assignment rows.
//   moe_route: p = softmax(logits[t]) in fp32; experts[t, 0..k) the k largest p, descending, ties to the
//     lower expert index; weights[t, j] = p[experts[t, j]], divided by their sum over j when `normalize`.
//   moe_route_bwd: dlogits from dweights through that function (the selection is constant).
//   The load-balancing loss (Switch / transformers' load_balancing_loss_func), as statistics [E] each
//   MoE layer adds to and passes on (so pipeline stages send them with the activations):
//   moe_router_stats: counts_out[e] = counts[e] + the assignments (t, j) to e (i32; an expert id outside
//     [0, E) counts nothing); probs_out[e] = probs[e] + Σ_t p[t, e] (p = softmax(logits[t]) as moe_route's).
//   moe_router_stats_bwd: dlogits[t, e] = p[t, e]·(g[e] − Σ_e' p[t, e']·g[e']), g = dprobs.
//   moe_aux_loss: loss += scale·Σ_e counts[e]·probs[e] / N², N = Σ_e counts[e] (k·L·T: every router's
//     tokens, k assignments each); nothing when N <= 0. scale = coef·E·k² / microbatches.
//   moe_aux_loss_bwd: dprobs[e] = scale·counts[e] / N² (0 when N <= 0).
//   moe_permute: slots[t, j] = the row of assignment (t, j) in expert-major order (sorted by expert, then
//     t, then j); group_sizes[e] = assignments to e; xp[slots[t, j]] = x[t]. Optional `capacity` C (>= 1;
//     GShard / Switch token dropping): xp has E·C rows (absent: T·k); expert e keeps its first min(n_e, C)
//     assignments in that order and drops the rest (slots -1); group_sizes[e] = min(n_e, C), the kept rows
//     packed from row 0 in expert order; rows of xp past Σ group_sizes are 0. Run-time error: an expert id
//     outside [0, E) (moePermuteExpertError, KernelChecks.h: CPU and CUDA give the same message).
//   moe_unpermute: y[t] = sum over j = 0..k-1 of weights[t, j]·xp[slots[t, j]] (weights absent: 1).
//   moe_unpermute_bwd: dxp[slots[t, j]] = weights[t, j]·dy[t]; dweights[t, j] = dy[t]·xp[slots[t, j]].
//     Both: optional `N` (>= 1), the rows of xp / dxp (absent: T·k; moe_permute's E·C under a capacity);
//     a slot -1 (a dropped assignment) adds nothing (dweights 0; dxp rows no slot names are 0); a slot
//     < -1 or >= N is a run-time error (moeSlotError, KernelChecks.h).
//   grouped_linear_*: the rows [off_e, off_e + group_sizes[e]) (off_e = sizes of experts before e) are
//     y = x·w[e]ᵀ (w [E, O, K], each expert's weight out_in); rows at or past the sum of the sizes are
//     zero in y / dx and read by nothing; dw[e] = dy[rows of e]ᵀ·x[rows of e] (+= with accumulate).
//   sigmoid_gate_fwd / _bwd (Qwen2-MoE's shared expert gate): y[t] = sigmoid(gate[t])·x[t];
//     dx[t] = sigmoid(gate[t])·dy[t], dgate[t] = sigmoid'(gate[t])·(dy[t]·x[t]).
inline constexpr A kMoeRouteArgs[] = {{"logits", One, F, R}, {"weights", One, F, W}, {"experts", One, I, W}};
inline constexpr A kMoeRouteBwdArgs[] = {{"logits", One, F, R}, {"experts", One, I, R}, {"dweights", One, F, R},
                                         {"dlogits", One, F, W}};
inline constexpr T kMoeRouteAttrs[] = {{"T", Int}, {"E", Int}, {"k", Int}, {"normalize", Bool}};
inline constexpr A kMoeRouterStatsArgs[] = {{"logits", One, F, R}, {"experts", One, I, R},    {"counts", One, I, R},
                                            {"probs", One, F, R},  {"counts_out", One, I, W}, {"probs_out", One, F, W}};
inline constexpr T kMoeRouterStatsAttrs[] = {{"T", Int}, {"E", Int}, {"k", Int}};
inline constexpr A kMoeRouterStatsBwdArgs[] = {{"logits", One, F, R}, {"dprobs", One, F, R}, {"dlogits", One, F, W}};
inline constexpr T kMoeRouterStatsBwdAttrs[] = {{"T", Int}, {"E", Int}};
inline constexpr A kMoeAuxLossArgs[] = {{"counts", One, I, R}, {"probs", One, F, R}, {"loss", One, F, RW}};
inline constexpr A kMoeAuxLossBwdArgs[] = {{"counts", One, I, R}, {"dprobs", One, F, W}};
inline constexpr T kMoeAuxLossAttrs[] = {{"E", Int}, {"scale", Flt}};
inline constexpr A kMoePermuteArgs[] = {{"x", One, F, R}, {"experts", One, I, R}, {"xp", One, F, W},
                                        {"slots", One, I, W}, {"group_sizes", One, I, W}};
inline constexpr T kMoePermuteAttrs[] = {{"T", Int}, {"H", Int}, {"E", Int}, {"k", Int}, {"capacity", Int, false}};
inline constexpr A kMoeUnpermuteArgs[] = {{"xp", One, F, R}, {"slots", One, I, R}, {"weights", Opt, F, R},
                                          {"y", One, F, W}};
inline constexpr A kMoeUnpermuteBwdArgs[] = {{"dy", One, F, R},      {"xp", One, F, R},  {"slots", One, I, R},
                                             {"weights", One, F, R}, {"dxp", One, F, W}, {"dweights", One, F, W}};
inline constexpr T kMoeUnpermuteAttrs[] = {{"T", Int}, {"H", Int}, {"k", Int}, {"N", Int, false}};
inline constexpr A kGroupedFwdArgs[] = {{"x", One, F, R}, {"w", One, F, R}, {"group_sizes", One, I, R},
                                        {"y", One, F, W}};
inline constexpr A kGroupedBwdInArgs[] = {{"dy", One, F, R}, {"w", One, F, R}, {"group_sizes", One, I, R},
                                          {"dx", One, F, W}};
inline constexpr A kGroupedBwdWArgs[] = {{"dy", One, F, R}, {"x", One, F, R}, {"group_sizes", One, I, R},
                                         {"dw", One, F, RW}};
inline constexpr T kGroupedAttrs[] = {{"N", Int}, {"K", Int}, {"O", Int}, {"E", Int}};
inline constexpr T kGroupedBwdWAttrs[] = {{"N", Int}, {"K", Int}, {"O", Int}, {"E", Int}, {"accumulate", Bool}};
inline constexpr A kSigmoidGateFwdArgs[] = {{"gate", One, F, R}, {"x", One, F, R}, {"y", One, F, W, "x"}};
inline constexpr A kSigmoidGateBwdArgs[] = {{"dy", One, F, R},    {"gate", One, F, R},     {"x", One, F, R},
                                            {"dgate", One, F, W}, {"dx", One, F, W, "dy"}};
inline constexpr T kSigmoidGateAttrs[] = {{"T", Int}, {"H", Int}};
// moe_chunk_transpose (expert parallelism: between the dispatch all_to_all_v's source-major rows and the
// local experts' expert-major rows): an r × c grid of row chunks, chunk (i, j) of splits[i·c + j] rows.
// Not inverse: x holds the chunks row-major ((0,0), (0,1), ..., (1,0), ...) from row 0, y the same chunks
// column-major ((0,0), (1,0), ..., (0,1), ...); inverse: x column-major, y row-major. Rows of y past
// Σ splits are zero. Optional col_sizes [c]: col_sizes[j] = Σ_i splits[i·c + j] (the local experts'
// group sizes). Run-time errors: a negative split, Σ splits > N. x and y never overlap.
inline constexpr A kMoeChunkTransposeArgs[] = {
    {"x", One, F, R}, {"splits", One, I, R}, {"y", One, F, W}, {"col_sizes", Opt, I, W}};
inline constexpr T kMoeChunkTransposeAttrs[] = {
    {"r", Int}, {"c", Int}, {"N", Int}, {"H", Int}, {"inverse", Bool, false}};

template <size_t NA, size_t NT>
constexpr OpSpec op(OpKind k, std::string_view name, const A (&a)[NA], const T (&t)[NT]) {
  return {k, name, a, NA, t, NT};
}
template <size_t NA>
constexpr OpSpec op(OpKind k, std::string_view name, const A (&a)[NA]) {
  return {k, name, a, NA, nullptr, 0};
}
}  // namespace detail

// Indexed by OpKind.
inline constexpr std::array<OpSpec, kNumOpKinds> kOpSpecs = {{
    detail::op(OpKind::kLoadMicrobatch, "load_microbatch", detail::kLoadArgs, detail::kLoadAttrs),
    detail::op(OpKind::kFillZero, "fill_zero", detail::kFillZeroArgs),
    detail::op(OpKind::kEmbeddingFwd, "embedding_fwd", detail::kEmbFwdArgs, detail::kEmbFwdAttrs),
    detail::op(OpKind::kEmbeddingBwdWeight, "embedding_bwd_weight", detail::kEmbBwdArgs, detail::kEmbBwdAttrs),
    detail::op(OpKind::kPosEmbeddingFwd, "pos_embedding_fwd", detail::kPosFwdArgs, detail::kPosFwdAttrs),
    detail::op(OpKind::kPosEmbeddingBwdWeight, "pos_embedding_bwd_weight", detail::kPosBwdArgs, detail::kPosBwdAttrs),
    detail::op(OpKind::kLayerNormFwd, "layer_norm_fwd", detail::kLnFwdArgs, detail::kNormFwdAttrs),
    detail::op(OpKind::kLayerNormBwdInput, "layer_norm_bwd_input", detail::kLnBwdInArgs, detail::kMHAttrs),
    detail::op(OpKind::kLayerNormBwdWeight, "layer_norm_bwd_weight", detail::kLnBwdWArgs, detail::kMHAccAttrs),
    detail::op(OpKind::kRmsNormFwd, "rms_norm_fwd", detail::kRmsFwdArgs, detail::kRmsFwdAttrs),
    detail::op(OpKind::kRmsNormBwdInput, "rms_norm_bwd_input", detail::kRmsBwdInArgs, detail::kRmsBwdInAttrs),
    detail::op(OpKind::kRmsNormBwdWeight, "rms_norm_bwd_weight", detail::kRmsBwdWArgs, detail::kMHAccAttrs),
    detail::op(OpKind::kLinearFwd, "linear_fwd", detail::kLinFwdArgs, detail::kLinFwdAttrs),
    detail::op(OpKind::kLinearBwdInput, "linear_bwd_input", detail::kLinBwdInArgs, detail::kLinBwdAttrs),
    detail::op(OpKind::kLinearBwdWeight, "linear_bwd_weight", detail::kLinBwdWArgs, detail::kLinBwdAttrs),
    detail::op(OpKind::kLinearBwdBias, "linear_bwd_bias", detail::kLinBwdBArgs, detail::kLinBwdBAttrs),
    detail::op(OpKind::kBiasAdd, "bias_add", detail::kBiasAddArgs, detail::kMNAttrs),
    detail::op(OpKind::kSplitFwd, "split_fwd", detail::kSplitFwdArgs, detail::kSplitAttrs),
    detail::op(OpKind::kSplitBwd, "split_bwd", detail::kSplitBwdArgs, detail::kSplitAttrs),
    detail::op(OpKind::kRopeFwd, "rope_fwd", detail::kRopeFwdArgs, detail::kRopeAttrs),
    detail::op(OpKind::kRopeBwd, "rope_bwd", detail::kRopeBwdArgs, detail::kRopeAttrs),
    detail::op(OpKind::kAttentionFwd, "attention_fwd", detail::kAttnFwdArgs, detail::kAttnAttrs),
    detail::op(OpKind::kAttentionBwd, "attention_bwd", detail::kAttnBwdArgs, detail::kAttnAttrs),
    detail::op(OpKind::kGeluTanhFwd, "gelu_tanh_fwd", detail::kGeluFwdArgs, detail::kNAttrs),
    detail::op(OpKind::kGeluTanhBwd, "gelu_tanh_bwd", detail::kGeluBwdArgs, detail::kNAttrs),
    detail::op(OpKind::kSwigluFwd, "swiglu_fwd", detail::kSwiFwdArgs, detail::kSwiAttrs),
    detail::op(OpKind::kSwigluBwd, "swiglu_bwd", detail::kSwiBwdArgs, detail::kSwiAttrs),
    detail::op(OpKind::kAdd, "add", detail::kAddArgs, detail::kNAttrs),
    detail::op(OpKind::kAccumulate, "accumulate", detail::kAccArgs, detail::kNAttrs),
    detail::op(OpKind::kCopy, "copy", detail::kCopyArgs, detail::kNAttrs),
    detail::op(OpKind::kCrossEntropyFwd, "cross_entropy_fwd", detail::kCeFwdArgs, detail::kCeAttrs),
    detail::op(OpKind::kCrossEntropyBwd, "cross_entropy_bwd", detail::kCeBwdArgs, detail::kCeAttrs),
    detail::op(OpKind::kCrossEntropyMax, "cross_entropy_max", detail::kCeMaxArgs, detail::kCeStatsAttrs),
    detail::op(OpKind::kCrossEntropySums, "cross_entropy_sums", detail::kCeSumsArgs, detail::kCeStatsAttrs),
    detail::op(OpKind::kGradNorm, "grad_norm", detail::kGradNormArgs, detail::kMaxNormAttrs),
    detail::op(OpKind::kGradNormSq, "grad_norm_sq", detail::kGradNormSqArgs, detail::kGradNormSqAttrs),
    detail::op(OpKind::kGradNormClip, "grad_norm_clip", detail::kGradNormClipArgs, detail::kMaxNormAttrs),
    detail::op(OpKind::kAdamW, "adamw", detail::kAdamArgs, detail::kAdamAttrs),
    detail::op(OpKind::kSgd, "sgd", detail::kSgdArgs, detail::kSgdAttrs),
    detail::op(OpKind::kAllReduce, "all_reduce", detail::kAllReduceArgs, detail::kAllReduceAttrs),
    detail::op(OpKind::kAllGather, "all_gather", detail::kGatherArgs, detail::kAllGatherAttrs),
    detail::op(OpKind::kReduceScatter, "reduce_scatter", detail::kGatherArgs, detail::kReduceScatterAttrs),
    detail::op(OpKind::kSend, "send", detail::kSendArgs, detail::kP2PAttrs),
    detail::op(OpKind::kRecv, "recv", detail::kRecvArgs, detail::kP2PAttrs),
    detail::op(OpKind::kAllToAll, "all_to_all", detail::kGatherArgs, detail::kAllToAllAttrs),
    detail::op(OpKind::kCast, "cast", detail::kCastArgs, detail::kNAttrs),
    detail::op(OpKind::kShardSlice, "shard_slice", detail::kShardSliceArgs, detail::kShardSliceAttrs),
    detail::op(OpKind::kAttentionBlockFwd, "attention_block_fwd", detail::kAttnBlockFwdArgs, detail::kAttnBlockAttrs),
    detail::op(OpKind::kAttentionBlockBwd, "attention_block_bwd", detail::kAttnBlockBwdArgs, detail::kAttnBlockAttrs),
    detail::op(OpKind::kAttentionMerge, "attention_merge", detail::kAttnMergeArgs, detail::kAttnMergeAttrs),
    detail::op(OpKind::kAdamWMulti, "adamw_multi", detail::kAdamMultiArgs, detail::kAdamAttrs),
    detail::op(OpKind::kSgdMulti, "sgd_multi", detail::kSgdMultiArgs, detail::kSgdAttrs),
    detail::op(OpKind::kCastMulti, "cast_multi", detail::kCastMultiArgs),
    detail::op(OpKind::kAddLayerNormFwd, "add_layer_norm_fwd", detail::kAddLnFwdArgs, detail::kNormFwdAttrs),
    detail::op(OpKind::kAddRmsNormFwd, "add_rms_norm_fwd", detail::kAddRmsFwdArgs, detail::kRmsFwdAttrs),
    detail::op(OpKind::kLayerNormBwd, "layer_norm_bwd", detail::kLnBwdArgs, detail::kMHAccAttrs),
    detail::op(OpKind::kRmsNormBwd, "rms_norm_bwd", detail::kRmsBwdArgs, detail::kRmsBwdAttrs),
    detail::op(OpKind::kClassifier, "classifier", detail::kClassifierArgs, detail::kClassifierAttrs),
    detail::op(OpKind::kMoeRoute, "moe_route", detail::kMoeRouteArgs, detail::kMoeRouteAttrs),
    detail::op(OpKind::kMoeRouteBwd, "moe_route_bwd", detail::kMoeRouteBwdArgs, detail::kMoeRouteAttrs),
    detail::op(OpKind::kMoePermute, "moe_permute", detail::kMoePermuteArgs, detail::kMoePermuteAttrs),
    detail::op(OpKind::kMoeUnpermute, "moe_unpermute", detail::kMoeUnpermuteArgs, detail::kMoeUnpermuteAttrs),
    detail::op(OpKind::kMoeUnpermuteBwd, "moe_unpermute_bwd", detail::kMoeUnpermuteBwdArgs, detail::kMoeUnpermuteAttrs),
    detail::op(OpKind::kGroupedLinearFwd, "grouped_linear_fwd", detail::kGroupedFwdArgs, detail::kGroupedAttrs),
    detail::op(OpKind::kGroupedLinearBwdInput, "grouped_linear_bwd_input", detail::kGroupedBwdInArgs,
               detail::kGroupedAttrs),
    detail::op(OpKind::kGroupedLinearBwdWeight, "grouped_linear_bwd_weight", detail::kGroupedBwdWArgs,
               detail::kGroupedBwdWAttrs),
    detail::op(OpKind::kSigmoidGateFwd, "sigmoid_gate_fwd", detail::kSigmoidGateFwdArgs, detail::kSigmoidGateAttrs),
    detail::op(OpKind::kSigmoidGateBwd, "sigmoid_gate_bwd", detail::kSigmoidGateBwdArgs, detail::kSigmoidGateAttrs),
    detail::op(OpKind::kAllToAllV, "all_to_all_v", detail::kAllToAllVArgs, detail::kAllToAllVAttrs),
    detail::op(OpKind::kMoeChunkTranspose, "moe_chunk_transpose", detail::kMoeChunkTransposeArgs,
               detail::kMoeChunkTransposeAttrs),
    detail::op(OpKind::kMoeRouterStats, "moe_router_stats", detail::kMoeRouterStatsArgs, detail::kMoeRouterStatsAttrs),
    detail::op(OpKind::kMoeRouterStatsBwd, "moe_router_stats_bwd", detail::kMoeRouterStatsBwdArgs,
               detail::kMoeRouterStatsBwdAttrs),
    detail::op(OpKind::kMoeAuxLoss, "moe_aux_loss", detail::kMoeAuxLossArgs, detail::kMoeAuxLossAttrs),
    detail::op(OpKind::kMoeAuxLossBwd, "moe_aux_loss_bwd", detail::kMoeAuxLossBwdArgs, detail::kMoeAuxLossAttrs),
    detail::op(OpKind::kGeluErfFwd, "gelu_erf_fwd", detail::kGeluFwdArgs, detail::kNAttrs),
    detail::op(OpKind::kGeluErfBwd, "gelu_erf_bwd", detail::kGeluBwdArgs, detail::kNAttrs),
    detail::op(OpKind::kClampFwd, "clamp_fwd", detail::kGeluFwdArgs, detail::kClampAttrs),
    detail::op(OpKind::kClampBwd, "clamp_bwd", detail::kGeluBwdArgs, detail::kClampAttrs),
    detail::op(OpKind::kReluFwd, "relu_fwd", detail::kGeluFwdArgs, detail::kNAttrs),
    detail::op(OpKind::kReluBwd, "relu_bwd", detail::kGeluBwdArgs, detail::kNAttrs),
    detail::op(OpKind::kScale, "scale", detail::kGeluFwdArgs, detail::kScaleAttrs),
    // wait (feature "async"): no roles, no attrs; its top-level "token" names the started op it waits for.
    OpSpec{OpKind::kWait, "wait", nullptr, 0, nullptr, 0},
}};

constexpr const OpSpec& opSpec(OpKind k) { return kOpSpecs[size_t(k)]; }

// The access of argument `idx` of a `kind` op whose attr `accumulate` is `accumulate` (absent: true):
// with accumulate false a read-written role that accumulate governs (ArgSpec::governedByAccumulate)
// is overwritten, not summed onto, so it is only written.
constexpr ArgAccess effectiveAccess(OpKind kind, size_t idx, bool accumulate) {
  const ArgSpec& a = opSpec(kind).args[idx];
  if (a.access != ArgAccess::kReadWrite || accumulate || !a.governedByAccumulate) return a.access;
  return ArgAccess::kWrite;
}
constexpr std::string_view opName(OpKind k) { return kOpSpecs[size_t(k)].name; }
constexpr std::optional<OpKind> parseOpKind(std::string_view s) {
  for (const OpSpec& spec : kOpSpecs)
    if (spec.name == s) return spec.kind;
  return std::nullopt;
}
// True for the collective ops (all_reduce, all_gather, reduce_scatter, all_to_all, all_to_all_v): executed
// through the backend's collectives, not as kernel launches.
constexpr bool isCollective(OpKind k) {
  return k == OpKind::kAllReduce || k == OpKind::kAllGather || k == OpKind::kReduceScatter ||
         k == OpKind::kAllToAll || k == OpKind::kAllToAllV;
}
// (shard_slice is not one: it reads this rank's own buffer only, a kernel launch.)
// True for the point-to-point ops (send, recv) of pipeline plans: executed through the backend's
// send/recv, not as kernel launches.
constexpr bool isPointToPoint(OpKind k) { return k == OpKind::kSend || k == OpKind::kRecv; }
// The ops that communicate (collectives and point-to-point): the only ops that may carry a "token"
// (started asynchronously) or run on a queue other than "compute" (feature "async").
constexpr bool communicates(OpKind k) { return isCollective(k) || isPointToPoint(k); }
// True for the ops whose kernels read and write bf16 buffers themselves on every backend (`cast`,
// `cast_multi`, `fill_zero`, and load_microbatch, which has no float role). For every other op the backend's kernel
// variant says which roles it takes in bf16 (KernelVariant.h); the runtime converts each other bf16
// argument of a float role to an f32 temporary before the op (roles read or read-written), runs the op,
// and rounds every written temporary back (roles written or read-written).
constexpr bool handlesBf16Itself(OpKind k) {
  return k == OpKind::kCast || k == OpKind::kCastMulti || k == OpKind::kFillZero || k == OpKind::kLoadMicrobatch;
}
// The optimizer updates (adamw, sgd and their _multi forms): they get the step's learning rate and
// t = step + 1 (KernelCall::lr, t).
constexpr bool isOptimizerUpdate(OpKind k) {
  return k == OpKind::kAdamW || k == OpKind::kSgd || k == OpKind::kAdamWMulti || k == OpKind::kSgdMulti;
}
// Index of `role` in the op's argument list, or -1.
constexpr int argIndex(OpKind k, std::string_view role) {
  const OpSpec& spec = opSpec(k);
  for (size_t i = 0; i < spec.numArgs; ++i)
    if (spec.args[i].role == role) return int(i);
  return -1;
}

// The table is indexed by OpKind: checked at compile time.
namespace detail {
constexpr bool opTableIsIndexed() {
  for (size_t i = 0; i < kNumOpKinds; ++i)
    if (size_t(kOpSpecs[i].kind) != i) return false;
  return true;
}
static_assert(opTableIsIndexed(), "kOpSpecs must be in OpKind order");
}  // namespace detail

}  // namespace llcdist::rt::schema
