//===- PlanOps.td - the plan dialect ----------------------*- tablegen -*-===//
//
// The lowest level of llc-dist's IR and the last before emission: what one
// rank (one program per group of ranks that run the same) executes. Buffers
// at planned arena offsets, subroutines of kernel calls, and the schedule:
// an action list over microbatches. It maps 1:1 onto the runtime's program
// format (docs/plan-format.md), which `llcdist::writePlanDirectory`
// (lib/Target/Plan) writes.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_DIALECT_PLAN_PLANOPS_TD
#define LLCDIST_DIALECT_PLAN_PLANOPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"

def Plan_Dialect : Dialect {
  let name = "plan";
  let cppNamespace = "::llcdist::plan";
  let summary = "per-rank programs: buffers, kernels, subroutines, schedules";
  let description = [{
    A `plan.program` holds `plan.buffer`s (tensors at arena offsets),
    `plan.param`s (which buffers hold each named parameter, its gradient and
    its optimizer state), `plan.subroutine`s (sequences of `plan.kernel`
    calls on buffers) and one `plan.schedule` (the actions of one training
    step). Kernels and their argument roles are the runtime's
    (runtime/include/llcdist/runtime/PlanSchema.h).
  }];
}

class Plan_Op<string mnemonic, list<Trait> traits = []>
    : Op<Plan_Dialect, mnemonic, traits>;

def Plan_ProgramOp : Plan_Op<"program", [Symbol, SymbolTable, IsolatedFromAbove,
    NoTerminator, SingleBlock]> {
  let summary = "the program of one pipeline stage (every rank of the stage runs it)";
  let description = [{
    ```mlir
    plan.program @stage0 attributes {arena_bytes = 4096 : i64} {
      plan.buffer @b0 : tensor<16x8xf32> {kind = "param", name = "wte", offset = 0 : i64}
      ...
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, OptionalAttr<I64Attr>:$arena_bytes);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $body";
  // The discardable `queues` (asynchronous plans): unique [a-z0-9_]+ names,
  // the first "compute".
  let hasVerifier = 1;
}

def Plan_BufferOp : Plan_Op<"buffer", [Symbol, HasParent<"ProgramOp">]> {
  let summary = "a tensor in the arena";
  let description = [{
    `kind` is param, grad, optimizer_state, activation, input, metric or
    scratch; `offset` (bytes, 64-aligned) is set by llcdist-plan-memory.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttr:$type, StrAttr:$name,
                       StrAttr:$kind, OptionalAttr<I64Attr>:$offset);
  let assemblyFormat = "$sym_name `:` $type attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    mlir::RankedTensorType getTensorType() {
      return mlir::cast<mlir::RankedTensorType>(getType());
    }
    /// Bytes of the tensor: elements × element size.
    int64_t getNumBytes();
  }];
}

def Plan_ParamOp : Plan_Op<"param", [HasParent<"ProgramOp">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "a named parameter: its value, gradient and optimizer state buffers";
  let description = [{
    ```mlir
    plan.param "wte" value @b0 grad @b1 state [@b2, @b3] {init = {kind = "normal", std = 2.0e-02 : f64}, weight_decay = false}
    ```
  }];
  let arguments = (ins StrAttr:$name, FlatSymbolRefAttr:$value,
                       FlatSymbolRefAttr:$grad, ArrayAttr:$state,
                       DictionaryAttr:$init, BoolAttr:$weight_decay);
  let assemblyFormat = "$name `value` $value `grad` $grad `state` $state attr-dict";
}

def Plan_SubroutineOp : Plan_Op<"subroutine", [Symbol, HasParent<"ProgramOp">,
    NoTerminator, SingleBlock]> {
  let summary = "a named sequence of kernel calls";
  let arguments = (ins SymbolNameAttr:$sym_name);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $body";
}

def Plan_KernelOp : Plan_Op<"kernel", [HasParent<"SubroutineOp">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "one call of a runtime kernel on buffers";
  let description = [{
    `args` maps each argument role to a buffer (`@b3`) or a list of buffers;
    `params` holds the kernel's scalar attributes. The kernel, its roles and
    its required attributes are checked against the runtime's schema
    (PlanSchema.h), so a plan the compiler emits is one the runtime accepts.
    The location is the provenance the runtime reports on failure.

    ```mlir
    plan.kernel "linear_fwd" {x = @b4, w = @b1, y = @b5} {K = 8 : i64, M = 8 : i64, N = 16 : i64, layout = "out_in"}
    ```

    Asynchronous plans (feature "async"): a communication kernel with the
    discardable `token` (i64 >= 0) is started and completes at the `wait`
    kernel with the same token, which has no arguments and no parameters;
    `queue` names the program queue an op is issued on (default "compute",
    where every other kernel must stay). The step's token and buffer rules
    are llcdist-verify-async's.

    ```mlir
    plan.kernel "all_reduce" {x = [@g0, @g1]} {axis = "dp", op = "avg"} {queue = "comm", token = 0 : i64}
    plan.kernel "wait" {} {} {token = 0 : i64}
    ```
  }];
  let arguments = (ins StrAttr:$kernel, DictionaryAttr:$args, DictionaryAttr:$params);
  let assemblyFormat = "$kernel $args $params attr-dict";
  let hasVerifier = 1;
}

def Plan_ScheduleOp : Plan_Op<"schedule", [HasParent<"ProgramOp">, NoTerminator,
    SingleBlock]> {
  let summary = "the actions of one training step, in order";
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "attr-dict-with-keyword $body";
}

def Plan_ActionOp : Plan_Op<"action", [HasParent<"ScheduleOp">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "run a subroutine (for one microbatch)";
  let description = [{
    ```mlir
    plan.action @forward microbatch 1
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$subroutine, OptionalAttr<I64Attr>:$microbatch);
  let assemblyFormat = "$subroutine (`microbatch` $microbatch^)? attr-dict";
}

#endif
