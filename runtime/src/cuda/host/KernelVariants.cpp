// The CUDA backend's kernel variants (KernelVariants.h). CUDA-free.
#include "cuda/host/KernelVariants.h"

#include "cuda/host/AttentionPlan.h"

#include "llcdist/runtime/OpParams.h"

#include <array>
#include <string>

namespace llcdist::rt::cuda {
namespace {

namespace sc = schema;
using K = sc::OpKind;
using E = sc::ElemType;

// Every listed role takes f32 or bf16.
KernelVariantInfo own(std::initializer_list<std::string_view> roles) {
  KernelVariantInfo v;
  v.name = kOwnVariant;
  for (std::string_view r : roles) v.floatRoles.emplace_back(r, kTakesF32OrBF16);
  return v;
}

// The dtype of role `name`'s k-th buffer as the variant gets it; nullopt-like kF64 sentinel when the
// role is absent (an optional role: bias).
bool present(const KernelCall& c, std::string_view name) {
  const int r = sc::argIndex(c.kind, name);
  return r >= 0 && size_t(r) < c.args.size() && !c.args[size_t(r)].empty();
}
E typeOf(const KernelCall& c, std::string_view name, size_t k = 0) {
  return c.type(size_t(sc::argIndex(c.kind, name)), k);
}

// Every float argument of the call has one dtype (element copies).
std::string sameDType(const KernelCall& c) {
  const sc::OpSpec& spec = sc::opSpec(c.kind);
  bool first = true;
  E t = E::kF32;
  for (size_t r = 0; r < c.args.size() && r < spec.numArgs; ++r) {
    if (!sc::isFloatRole(spec.args[r].type)) continue;
    for (size_t k = 0; k < c.args[r].size(); ++k) {
      if (first) t = c.type(r, k);
      if (c.type(r, k) != t) return "its arguments mix f32 and bf16 (it copies elements)";
      first = false;
    }
  }
  return "";
}

// cuBLASLt's dtype combinations: operands a and b of one dtype; the output that dtype or, for bf16
// operands, f32; the bias (linear_fwd) the output's dtype.
std::string gemmDTypes(const KernelCall& c, std::string_view a, std::string_view b, std::string_view out) {
  const E ta = typeOf(c, a), tb = typeOf(c, b), to = typeOf(c, out);
  if (ta != tb)
    return "its operands " + std::string(a) + " (" + std::string(sc::elemTypeName(ta)) + ") and " + std::string(b) +
           " (" + std::string(sc::elemTypeName(tb)) + ") differ in dtype";
  if (to != ta && !(ta == E::kBF16 && to == E::kF32))
    return "a " + std::string(sc::elemTypeName(ta)) + " GEMM cannot write " + std::string(sc::elemTypeName(to));
  if (c.kind == K::kLinearFwd && present(c, "bias") && typeOf(c, "bias") != to)
    return "the bias's dtype differs from the output's";
  return "";
}

KernelVariantInfo gemm(std::string_view a, std::string_view b, std::string_view out,
                       std::initializer_list<std::string_view> more = {}) {
  KernelVariantInfo v;
  v.name = kCublasLtVariant;
  for (std::string_view r : {a, b, out}) v.floatRoles.emplace_back(r, kTakesF32OrBF16);
  for (std::string_view r : more) v.floatRoles.emplace_back(r, kTakesF32OrBF16);
  const std::string ra(a), rb(b), ro(out);
  v.fits = [ra, rb, ro](const KernelCall& c, const KernelSelectOptions&) { return gemmDTypes(c, ra, rb, ro); };
  return v;
}

// The fused classifier's three GEMMs (x·Wᵀ into the chunk's logits, dlogits·W into dx, dlogitsᵀ·x into
// dw_acc or dw) on cuBLASLt: x, w and logits of one dtype; dx and dw that dtype or, for bf16 operands,
// f32 (gemmDTypes' rule for each GEMM); dw_acc f32.
KernelVariantInfo classifierVariant() {
  KernelVariantInfo v;
  v.name = kCublasLtVariant;
  for (std::string_view r : {"x", "w", "logits", "dx", "dw", "dw_acc"}) v.floatRoles.emplace_back(r, kTakesF32OrBF16);
  v.fits = [](const KernelCall& c, const KernelSelectOptions&) -> std::string {
    if (std::string why = gemmDTypes(c, "x", "w", "logits"); !why.empty()) return why;
    if (std::string why = gemmDTypes(c, "logits", "w", "dx"); !why.empty()) return why;
    if (std::string why = gemmDTypes(c, "logits", "x", "dw"); !why.empty()) return why;
    if (present(c, "dw_acc") && typeOf(c, "dw_acc") != E::kF32) return "dw_acc is not f32";
    return "";
  };
  return v;
}

// Why cuDNN's fused attention cannot run the call, or "" (AttentionPlan.h's support check on this
// device and cuDNN; the backend adds its graph build at bind time: CudaBackend.cpp).
std::string cudnnAttentionFits(const KernelCall& c, const KernelSelectOptions& o) {
  if (!o.cudnn) return "cuDNN's fused attention is not usable here";
  const AttentionParams* p = c.paramsAs<AttentionParams>();
  if (!p) return "no attention parameters";
  const AttentionProblem problem = attentionProblem(*p, c.kind == K::kAttentionBwd, o.deterministic);
  return cudnnAttentionUnsupportedReason(problem, CudnnTarget{o.smVersion, o.cudnnVersion});
}

KernelVariantInfo cudnnAttention(std::initializer_list<std::string_view> bf16Roles) {
  KernelVariantInfo v;
  v.name = kCudnnVariant;
  for (std::string_view r : bf16Roles) v.floatRoles.emplace_back(r, kTakesBF16);
  v.fits = cudnnAttentionFits;
  return v;
}

KernelVariantInfo withFits(KernelVariantInfo v, std::string (*fits)(const KernelCall&)) {
  v.fits = [fits](const KernelCall& c, const KernelSelectOptions&) { return fits(c); };
  return v;
}

std::array<std::vector<KernelVariantInfo>, sc::kNumOpKinds> build() {
  std::array<std::vector<KernelVariantInfo>, sc::kNumOpKinds> t;
  auto set = [&](K k, std::vector<KernelVariantInfo> v) { t[size_t(k)] = std::move(v); };
  set(K::kFillZero, {own({})});  // any dtype (PlanSchema: kAny)
  set(K::kCast, {own({"x", "y"})});
  set(K::kEmbeddingFwd, {own({"table", "out", "wpe"})});
  set(K::kEmbeddingBwdWeight, {own({"dout", "dtable", "dwpe"})});
  set(K::kPosEmbeddingFwd, {own({"x", "wpe", "y"})});
  set(K::kPosEmbeddingBwdWeight, {own({"dy", "dwpe"})});
  set(K::kLayerNormFwd, {own({"x", "gamma", "beta", "y"})});
  set(K::kLayerNormBwdInput, {own({"dy", "x", "gamma", "dx"})});
  set(K::kLayerNormBwdWeight, {own({"dy", "x", "dgamma", "dbeta"})});
  set(K::kRmsNormFwd, {own({"x", "weight", "y"})});
  set(K::kRmsNormBwdInput, {own({"dy", "x", "weight", "dx"})});
  set(K::kRmsNormBwdWeight, {own({"dy", "x", "dweight"})});
  set(K::kAddLayerNormFwd, {own({"a", "b", "sum", "gamma", "beta", "y"})});
  set(K::kAddRmsNormFwd, {own({"a", "b", "sum", "weight", "y"})});
  set(K::kLayerNormBwd, {own({"dy", "x", "gamma", "dresidual", "dx", "dgamma", "dbeta"})});
  set(K::kRmsNormBwd, {own({"dy", "x", "weight", "dresidual", "dx", "dweight"})});
  set(K::kLinearFwd, {gemm("x", "w", "y", {"bias", "gelu"})});
  set(K::kLinearBwdInput, {gemm("dy", "w", "dx", {"gelu_x"})});
  set(K::kLinearBwdWeight, {gemm("dy", "x", "dw", {"db"})});
  set(K::kLinearBwdBias, {own({"dy", "db"})});
  set(K::kBiasAdd, {own({"y", "bias"})});
  set(K::kSplitFwd, {withFits(own({"x", "outs"}), sameDType)});
  set(K::kSplitBwd, {withFits(own({"douts", "dx"}), sameDType)});
  set(K::kRopeFwd, {own({"x", "y"})});
  set(K::kRopeBwd, {own({"dy", "dx"})});
  set(K::kAttentionFwd, {cudnnAttention({"q", "k", "v", "qkv", "out"}), own({})});
  set(K::kAttentionBwd, {cudnnAttention({"dout", "q", "k", "v", "qkv", "out", "dq", "dk", "dv", "dqkv"}), own({})});
  set(K::kGeluTanhFwd, {own({"x", "y"})});
  set(K::kGeluTanhBwd, {own({"dy", "x", "dx"})});
  set(K::kGeluErfFwd, {own({"x", "y"})});
  set(K::kGeluErfBwd, {own({"dy", "x", "dx"})});
  set(K::kClampFwd, {own({"x", "y"})});
  set(K::kClampBwd, {own({"dy", "x", "dx"})});
  set(K::kReluFwd, {own({"x", "y"})});
  set(K::kReluBwd, {own({"dy", "x", "dx"})});
  set(K::kScale, {own({"x", "y"})});
  set(K::kSwigluFwd, {own({"gate", "up", "y"})});
  set(K::kSwigluBwd, {own({"dy", "gate", "up", "dgate", "dup"})});
  set(K::kAdd, {own({"a", "b", "y"})});
  set(K::kAccumulate, {own({"x", "y"})});
  set(K::kCopy, {own({"x", "y"})});
  set(K::kCrossEntropyFwd, {own({"logits"})});
  set(K::kCrossEntropyBwd, {own({"logits", "dlogits"})});
  set(K::kCrossEntropyMax, {own({"logits"})});
  set(K::kCrossEntropySums, {own({"logits"})});
  set(K::kClassifier, {classifierVariant()});
  set(K::kGradNorm, {own({"grads"})});
  set(K::kGradNormSq, {own({"grads", "replica_shards"})});
  set(K::kGradNormClip, {own({"grads"})});
  set(K::kAdamW, {own({"param", "grad"})});
  set(K::kSgd, {own({"param", "grad"})});
  set(K::kShardSlice, {withFits(own({"x", "y"}), sameDType)});
  set(K::kAdamWMulti, {own({"params", "grads"})});
  set(K::kSgdMulti, {own({"params", "grads"})});
  set(K::kCastMulti, {own({"x", "y"})});
  // Ring attention's own f32 kernels (a bf16 plan converts).
  set(K::kAttentionBlockFwd, {own({})});
  set(K::kAttentionBlockBwd, {own({})});
  set(K::kAttentionMerge, {own({})});
  // Mixture of experts: experts, slots, group_sizes and the load-balancing loss's counts are i32; its loss
  // f32 only (a bf16 buffer converts: one scalar).
  set(K::kMoeRoute, {own({"logits", "weights"})});
  set(K::kMoeRouteBwd, {own({"logits", "dweights", "dlogits"})});
  set(K::kMoeRouterStats, {own({"logits", "probs", "probs_out"})});
  set(K::kMoeRouterStatsBwd, {own({"logits", "dprobs", "dlogits"})});
  set(K::kMoeAuxLoss, {own({"probs"})});
  set(K::kMoeAuxLossBwd, {own({"dprobs"})});
  set(K::kMoePermute, {own({"x", "xp"})});
  set(K::kMoeUnpermute, {own({"xp", "weights", "y"})});
  set(K::kMoeUnpermuteBwd, {own({"dy", "xp", "weights", "dxp", "dweights"})});
  set(K::kGroupedLinearFwd, {own({"x", "w", "y"})});
  set(K::kGroupedLinearBwdInput, {own({"dy", "w", "dx"})});
  set(K::kGroupedLinearBwdWeight, {own({"dy", "x", "dw"})});
  set(K::kSigmoidGateFwd, {own({"gate", "x", "y"})});
  set(K::kSigmoidGateBwd, {own({"dy", "gate", "x", "dgate", "dx"})});
  // moe_chunk_transpose copies rows as they are: x and y in one dtype, f32 or bf16.
  set(K::kMoeChunkTranspose, {withFits(own({"x", "y"}), sameDType)});
  return t;
}

}  // namespace

const std::vector<KernelVariantInfo>& cudaKernelVariants(sc::OpKind kind) {
  static const std::array<std::vector<KernelVariantInfo>, sc::kNumOpKinds> table = build();
  return table[size_t(kind)];
}

}  // namespace llcdist::rt::cuda
