// A kernel launch: one op with its buffers resolved to device addresses, its family's typed parameters
// (OpParams.h) and the step context. Built once per op by the interpreter (Interpreter.h), read by a
// backend's kernel table entry for the op kind (KernelTable.h).
#pragma once

#include "llcdist/runtime/OpParams.h"
#include "llcdist/runtime/PlanSchema.h"
#include "llcdist/runtime/Status.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace llcdist::rt {

// Whether ops of `kind` run as a backend kernel launch (Backend::launch), so that every backend's
// kernel table needs an entry for them: all but the collectives and send / recv (the backend's
// communication calls), load_microbatch (a host copy by the interpreter) and wait (a stream wait).
constexpr bool launchesKernel(schema::OpKind kind) {
  return !schema::communicates(kind) && kind != schema::OpKind::kLoadMicrobatch && kind != schema::OpKind::kWait;
}

// What changes from step to step in a bound program: the learning rate and the optimizer's step count
// t = step + 1 (AdamW's bias corrections, SGD's first momentum step). In device memory.
struct StepValues {
  double lr = 0;
  int64_t t = 0;
};

struct KernelCall {
  schema::OpKind kind = schema::OpKind::kFillZero;
  // args[i][k]: device address of the k-th buffer of role kOpSpecs[kind].args[i] (empty when an
  // optional role is absent); argElems[i][k] its element count.
  std::vector<std::vector<void*>> args;
  std::vector<std::vector<int64_t>> argElems;
  // argTypes[i][k]: the dtype of that buffer as the kernel gets it (as args; may be left empty, meaning
  // f32 for float roles and i32 for i32 roles). A float role is f32 or bf16 as the chosen kernel
  // variant takes it (KernelVariant.h): the interpreter converts a bf16 buffer to an f32 temporary
  // only for a variant that takes the role as f32 only (every CPU kernel), so kernels that take bf16
  // read the dtype of each float argument from here, as `fill_zero` and `cast` always have.
  std::vector<std::vector<schema::ElemType>> argTypes;
  // storedTypes[i][k]: the dtype of the buffer in the arena (may be left empty: as argTypes). It differs
  // from argTypes where the interpreter converts a bf16 buffer to an f32 temporary; a fused op rounds an
  // intermediate value its unfused ops stored in that buffer as it was stored (e.g. add_layer_norm_fwd's
  // sum before the norm reads it), so that fusing keeps the bits.
  std::vector<std::vector<schema::ElemType>> storedTypes;
  // The op's family's parameters (the binder of src/ops/<Family>.cpp sets the alternative).
  OpParams params;
  // The step's values for the optimizer updates (schema::isOptimizerUpdate: adamw, sgd and their _multi
  // forms): a device address, bound once; the interpreter writes the values there before each step
  // (Interpreter.h "Per-step inputs"), so a recorded step replays with each step's own. Null for
  // every other kind.
  const StepValues* stepValues = nullptr;
  // Which of the backend's kernel variants of `kind` runs the call (KernelVariant.h: an index into
  // Backend::kernelVariants(kind), chosen once at bind time); 0 for a backend with one kernel per kind.
  int variant = 0;

  // The family's parameters, or null when the call holds another family's.
  template <class P>
  const P* paramsAs() const {
    return std::get_if<P>(&params);
  }

  void* ptr(size_t role, size_t k = 0) const { return args[role].empty() ? nullptr : args[role][k]; }
  float* f(size_t role, size_t k = 0) const { return static_cast<float*>(ptr(role, k)); }
  int32_t* i32(size_t role, size_t k = 0) const { return static_cast<int32_t*>(ptr(role, k)); }
  double* f64(size_t role, size_t k = 0) const { return static_cast<double*>(ptr(role, k)); }
  schema::ElemType type(size_t role, size_t k = 0) const {
    if (role < argTypes.size() && k < argTypes[role].size()) return argTypes[role][k];
    const schema::ArgType t = schema::opSpec(kind).args[role].type;
    return t == schema::ArgType::kI32   ? schema::ElemType::kI32
           : t == schema::ArgType::kF64 ? schema::ElemType::kF64
                                        : schema::ElemType::kF32;
  }
  schema::ElemType storedType(size_t role, size_t k = 0) const {
    if (role < storedTypes.size() && k < storedTypes[role].size()) return storedTypes[role][k];
    return type(role, k);
  }
  // By role name (PlanSchema's table): an absent optional role gives null and an empty list.
  size_t role(std::string_view name) const { return size_t(schema::argIndex(kind, name)); }
  float* F(std::string_view name, size_t k = 0) const { return f(role(name), k); }
  int32_t* I(std::string_view name) const { return i32(role(name)); }
  double* D(std::string_view name) const { return f64(role(name)); }
  const std::vector<void*>& list(std::string_view name) const { return args[role(name)]; }
  int64_t elems(std::string_view name, size_t k = 0) const { return argElems[role(name)][k]; }
  // Whether the buffer of role `name` is stored in bf16 (whatever dtype the kernel gets it in).
  bool storedBf16(std::string_view name, size_t k = 0) const {
    return storedType(role(name), k) == schema::ElemType::kBF16;
  }
};

// A backend's kernel-table entry (KernelTable.h): runs one call with the backend's own context (the
// CPU backend's: CpuKernelContext in CpuBackend.h).
template <class Context>
using BackendKernel = std::function<Status(const KernelCall& call, const Context& context)>;

// The entry for `kind` that runs `kernel(call, params, context)` on the family's parameters P
// (OpParams.h); a call bound with another family's parameters is an Internal error. Every backend
// registers its kernels through this, so no backend switches on the parameters' type.
template <class P, class Context, class Fn>
BackendKernel<Context> typedKernel(schema::OpKind kind, Fn kernel) {
  return [kind, kernel](const KernelCall& call, const Context& context) -> Status {
    const P* params = call.paramsAs<P>();
    if (!params)
      return Status::internal(std::string(schema::opName(kind)) + " was bound without its family's parameters");
    return kernel(call, *params, context);
  };
}

}  // namespace llcdist::rt
