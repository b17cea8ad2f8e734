// The choice among a backend's kernel variants (KernelVariant.h).
#include "llcdist/runtime/KernelVariant.h"
#include "llcdist/runtime/Kernels.h"

#include <string>

namespace llcdist::rt {

namespace sc = schema;

DTypeMask KernelVariantInfo::accepts(sc::OpKind kind, size_t role) const {
  const sc::ArgSpec& spec = sc::opSpec(kind).args[role];
  switch (spec.type) {
    case sc::ArgType::kI32: return dtypeBit(sc::ElemType::kI32);
    case sc::ArgType::kF64: return dtypeBit(sc::ElemType::kF64);
    case sc::ArgType::kAny: return DTypeMask(0xff);
    case sc::ArgType::kF32:
    case sc::ArgType::kReducible: break;
  }
  DTypeMask m = kTakesF32;
  for (const auto& [name, mask] : floatRoles)
    if (name == spec.role) m = mask;
  if (spec.type == sc::ArgType::kReducible) m |= dtypeBit(sc::ElemType::kF64) | dtypeBit(sc::ElemType::kI32);
  return m;
}

const KernelVariantInfo& f32KernelVariant() {
  static const KernelVariantInfo info{};
  return info;
}

namespace {

// What `v` would get for `call`: the conversions, and the call with the dtypes after them; an empty
// reason when it takes every argument (as it is or converted).
struct Fitting {
  std::string reason;
  std::vector<std::vector<bool>> convert;
  int64_t converted = 0;
};

// `all`: convert every bf16 argument of a float role the variant also takes as f32 (not only those it
// cannot take as bf16): the variant's second chance when its predicate refuses the mix it would get
// otherwise (a GEMM with one bf16 and one f32 operand runs as an f32 GEMM).
Fitting tryVariant(const KernelCall& call, const KernelVariantInfo& v, const KernelSelectOptions& options, bool all) {
  Fitting f;
  const sc::OpSpec& spec = sc::opSpec(call.kind);
  KernelCall as = call;  // small: pointers, sizes and the bound parameters (shared RoPE tables)
  as.argTypes.resize(call.args.size());
  f.convert.resize(call.args.size());
  for (size_t r = 0; r < call.args.size() && r < spec.numArgs; ++r) {
    const DTypeMask accepted = v.accepts(call.kind, r);
    const size_t count = call.args[r].size();
    as.argTypes[r].resize(count);
    f.convert[r].assign(count, false);
    for (size_t k = 0; k < count; ++k) {
      const sc::ElemType t = call.type(r, k);
      as.argTypes[r][k] = t;
      const bool convertible =
          t == sc::ElemType::kBF16 && sc::isFloatRole(spec.args[r].type) && takes(accepted, sc::ElemType::kF32);
      if (takes(accepted, t) && !(all && convertible)) continue;
      if (convertible) {
        f.convert[r][k] = true;
        as.argTypes[r][k] = sc::ElemType::kF32;
        ++f.converted;
        continue;
      }
      f.reason = "does not take " + std::string(sc::elemTypeName(t)) + " for role \"" + std::string(spec.args[r].role) +
                 "\"";
      return f;
    }
  }
  if (v.fits) f.reason = v.fits(as, options);
  return f;
}

}  // namespace

StatusOr<KernelChoice> chooseKernelVariant(const KernelCall& call, const std::vector<const KernelVariantInfo*>& variants,
                                           const KernelSelectOptions& options) {
  const std::string op(sc::opName(call.kind));
  if (variants.empty()) return Status::invalidArgument("no kernel for op " + op);
  std::vector<std::string> why(variants.size());  // per variant tried: why it was not taken
  int best = -1;
  Fitting bestFit;
  for (size_t i = 0; i < variants.size(); ++i) {
    Fitting f = tryVariant(call, *variants[i], options, false);
    if (!f.reason.empty()) {  // refused as it is: with every bf16 argument it can take as f32 converted?
      Fitting g = tryVariant(call, *variants[i], options, true);
      if (g.reason.empty() && g.converted > f.converted) f = std::move(g);
    }
    if (!f.reason.empty()) {
      why[i] = std::move(f.reason);
      continue;
    }
    if (best < 0 || f.converted < bestFit.converted) {
      if (best >= 0) why[size_t(best)] = "converts more arguments";
      best = int(i);
      bestFit = std::move(f);
      if (bestFit.converted == 0) break;  // takes everything as it is: the first such wins
    } else {
      why[i] = "converts more arguments";
    }
  }
  const auto list = [&](size_t upTo) {
    std::string s;
    for (size_t i = 0; i < upTo; ++i)
      if (!why[i].empty()) s += (s.empty() ? "" : "; ") + std::string(variants[i]->name) + ": " + why[i];
    return s;
  };
  if (best < 0) return Status::invalidArgument("no kernel variant of " + op + " can run this op (" + list(why.size()) + ")");
  KernelChoice choice;
  choice.variant = best;
  choice.name = variants[size_t(best)]->name;
  choice.convert = std::move(bestFit.convert);
  choice.converted = bestFit.converted;
  choice.passedOver = list(size_t(best));
  return choice;
}

double kernelFlops(const KernelCall& call) {
  using K = sc::OpKind;
  switch (call.kind) {
    case K::kLinearFwd:
    case K::kLinearBwdInput:
    case K::kLinearBwdWeight:
      if (const LinearParams* p = call.paramsAs<LinearParams>()) return 2.0 * double(p->M) * double(p->N) * double(p->K);
      return 0;
    case K::kGroupedLinearFwd:
    case K::kGroupedLinearBwdInput:
    case K::kGroupedLinearBwdWeight:
      // The experts' GEMMs over N rows (K inputs, O outputs): the worst case, every row of the buffer in
      // some group. The rows really multiplied (Σ group_sizes) are data-dependent: fewer under a capacity
      // or an uneven expert-parallel split; the plan only bounds them by N.
      if (const MoeParams* p = call.paramsAs<MoeParams>()) return 2.0 * double(p->N) * double(p->K) * double(p->O);
      return 0;
    case K::kClassifier:  // its three GEMMs
      if (const ClassifierParams* p = call.paramsAs<ClassifierParams>())
        return 6.0 * double(p->linear.M) * double(p->linear.N) * double(p->linear.K);
      return 0;
    case K::kAttentionFwd:
    case K::kAttentionBwd:
      if (const AttentionParams* p = call.paramsAs<AttentionParams>()) {
        // 4·hd per visible score pair (two products), S²/2 pairs causal, fewer with a window.
        const double fwd = 4.0 * double(p->B) * double(p->nh) * attentionScorePairs(p->S, p->window) * double(p->hd);
        return call.kind == K::kAttentionFwd ? fwd : 2.5 * fwd;
      }
      return 0;
    default: return 0;
  }
}

}  // namespace llcdist::rt
