// Kernel variants: one op kind, several implementations per backend (an own kernel, a cuBLASLt GEMM,
// cuDNN's fused attention, ...), each stating which dtypes it takes per role; the choice is made once
// per op when the interpreter binds a program (Interpreter::create), from the op's buffer dtypes, its
// bound parameters and the backend's options, never during a step (docs/plan-format.md "bf16 storage").
//
// The rule (chooseKernelVariant, unit-tested in KernelVariantTest.cpp):
//  - A variant takes an argument as it is when it accepts the argument's dtype for its role. A bf16
//    argument of a float role that the variant accepts only as f32 is converted: the interpreter binds
//    it to an f32 temporary, filled from the buffer before the op when the op reads it and rounded back
//    (nearest even) after it when the op writes it. Any other mismatch (f32 where the variant wants
//    bf16, an f64 or i32 buffer outside its role) means the variant cannot take the op: the runtime
//    never rounds an f32 value to run a kernel in lower precision.
//  - Its `fits` predicate then sees the call with the dtypes the variant would get (KernelCall::argTypes
//    after conversion) and the backend's options, and says why not, if it cannot run it (a head size
//    cuDNN does not support, a GEMM whose two operands differ in dtype, ...). Refused, the variant has
//    a second chance with every bf16 argument it also takes as f32 converted (an f32 GEMM).
//  - Of the variants that fit, the first in the backend's preference order that takes every argument
//    as it is wins; when every fitting variant needs conversions, the one with the fewest wins (the
//    earliest on ties). No fitting variant is an error naming each variant's reason.
// The result is what kernels see: every float role is f32 or bf16 as the variant accepts, and f32
// arithmetic inside. A kernel that takes bf16 computes in f32 and rounds each value it writes once, at
// the point where the staged path would have rounded its f32 temporary, so both paths round at the same
// points (docs/plan-format.md "Where bf16 results are rounded"); they differ only in the order of f32
// accumulations inside a kernel, and where a library rounds inside (cuDNN's attention: its P and dP
// tiles in bf16).
//
// Header-only data types and a pure function of them: part of the runtime's core, CUDA-free, so the
// CUDA backend's choices are tested on machines without a GPU.
#pragma once

#include "llcdist/runtime/KernelCall.h"
#include "llcdist/runtime/PlanSchema.h"
#include "llcdist/runtime/Status.h"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace llcdist::rt {

// A set of element types, one bit per schema::ElemType.
using DTypeMask = uint8_t;
constexpr DTypeMask dtypeBit(schema::ElemType t) { return DTypeMask(1u << unsigned(t)); }
inline constexpr DTypeMask kTakesF32 = dtypeBit(schema::ElemType::kF32);
inline constexpr DTypeMask kTakesBF16 = dtypeBit(schema::ElemType::kBF16);
inline constexpr DTypeMask kTakesF32OrBF16 = kTakesF32 | kTakesBF16;
constexpr bool takes(DTypeMask m, schema::ElemType t) { return (m & dtypeBit(t)) != 0; }

// What a variant's applicability may depend on besides the call: the backend's run options.
struct KernelSelectOptions {
  bool deterministic = false;  // bitwise-repeatable results required (--deterministic)
  bool tf32 = false;           // f32 GEMMs may use TF32 tensor cores (--tf32)
  bool cudnn = false;          // cuDNN's fused attention can run here (the build has it, the device too)
  int smVersion = 0;           // the device's compute capability, major·10 + minor (0: not a GPU)
  int64_t cudnnVersion = 0;    // cuDNN's run-time version (cudnnGetVersion; 0: none)
};

struct KernelVariantInfo {
  // Short and stable: it names the variant in logs, the profile and the trace ("own", "cublaslt",
  // "cudnn").
  std::string_view name = "own";
  // The dtypes each float role takes, by role name. A float role not listed takes f32 only, so a
  // variant that lists nothing is an f32 kernel (every bf16 argument converted), as every CPU kernel
  // is. Roles of the other types (i32, f64, any) take what PlanSchema allows them.
  std::vector<std::pair<std::string_view, DTypeMask>> floatRoles;
  // Whether the variant can run `call` (bound parameters; argTypes the dtypes it would get): "" when
  // it can, else the reason it cannot (short; logged). Null: it runs every call it takes the dtypes of.
  std::function<std::string(const KernelCall& call, const KernelSelectOptions& options)> fits;

  // The dtypes role `role` of an op of `kind` takes.
  DTypeMask accepts(schema::OpKind kind, size_t role) const;
};

// The default variant: an f32 kernel (every bf16 argument converted), what a backend that lists no
// variants of its own has for each kind it has a kernel for.
const KernelVariantInfo& f32KernelVariant();

struct KernelChoice {
  int variant = 0;        // index into the kind's variants, in the backend's order
  std::string_view name;  // the variant's name
  // convert[r][k]: the k-th buffer of role r is bf16 and is passed to the kernel as an f32 temporary.
  std::vector<std::vector<bool>> convert;
  int64_t converted = 0;  // how many arguments are converted
  // Why each variant before the chosen one (in preference order) was not taken, "name: reason; ...";
  // empty when the first variant won.
  std::string passedOver;
};

// The choice for `call` (kind, argTypes and argElems set, params bound; the addresses are not read)
// among `variants` (the backend's, in preference order), by the rule above. An error names the op
// kind and every variant's reason when none fits; an empty `variants` is an error too.
StatusOr<KernelChoice> chooseKernelVariant(const KernelCall& call, const std::vector<const KernelVariantInfo*>& variants,
                                           const KernelSelectOptions& options);

// The op's floating-point operations per call, for the profile's achieved TFLOP/s (Profile.h): GEMMs
// 2·M·N·K (linear_fwd, linear_bwd_input, linear_bwd_weight), causal attention forward 2·B·nh·S²·hd (the
// two products over the causal half: 4·B·nh·S²·hd / 2; with a sliding window W < S the half less the
// (S − W)²/2 masked pairs: attentionScorePairs), backward 2.5× the forward (FlashAttention's
// convention: five products to the forward's two), grouped_linear_fwd / _bwd_input / _bwd_weight
// 2·N·K·O (N the rows attr: the worst case, every row in a group; the rows really multiplied, Σ
// group_sizes, are data-dependent). 0 for every other op (memory-bound; the profile gives their time
// only).
double kernelFlops(const KernelCall& call);

}  // namespace llcdist::rt
