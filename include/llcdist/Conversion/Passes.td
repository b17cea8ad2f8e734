//===- Passes.td - lowerings between llc-dist dialects ----*- tablegen -*-===//
#ifndef LLCDIST_CONVERSION_PASSES_TD
#define LLCDIST_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def LowerToPlan : Pass<"llcdist-lower-to-plan", "mlir::ModuleOp"> {
  let summary = "lower the xf training step to a plan.program";
  let description = [{
    Expands every `xf.layer` call (instantiating `{i}`), gives each value a
    `plan.buffer`, and turns each xf op into runtime kernel calls in four
    subroutines: `step_begin` (zero the gradients and the loss), `forward`
    (load the microbatch, then the ops up to the loss), `backward` (the ops
    from the loss gradient on) and `optimizer` (the global gradient norm with
    optional clipping, then one update per parameter). The schedule runs
    forward and backward once per microbatch. A weight gradient consumed
    only by `xf.accumulate_grad` is computed straight into the parameter's
    gradient buffer (accumulate = true); other contributions are added with
    an `accumulate` kernel. Parameter initialization follows Hugging Face's
    `_init_weights` (normal(0, 0.02); GPT-2's residual projections
    `c_proj.weight` 0.02/sqrt(2·layers); norm weights 1; biases 0). The xf
    functions are erased; the manifest fields go to `plan.manifest`.

    ZeRO is llcdist-plan-zero's rewrite of this plan. For ZeRO-3 (FSDP) it
    needs what only the lowering knows, where each scope (a layer body's
    forward, its backward, a chunk's top level) begins to read each
    parameter: with `record-param-scopes` the kernel there carries
    `plan.param_scopes` (each {param, slot, loc}), which llcdist-plan-zero
    turns into the gathers and removes.

    Before: `func.func @train_step ...`, `func.func @optimizer_step ...`
    After:
    ```mlir
    plan.program @stage0 {
      plan.buffer @b0 : tensor<256x64xf32> {kind = "param", name = "transformer.wte.weight"}
      plan.subroutine @forward { plan.kernel "load_microbatch" {...} {...} ... }
      plan.schedule { plan.action @step_begin  plan.action @forward microbatch 0 ... }
    }
    ```
  }];
  let options = [
    Option<"recordParamScopes", "record-param-scopes", "bool", "false",
           "record where each scope begins to read each parameter "
           "(plan.param_scopes, for llcdist-plan-zero stage 3)">,
  ];
  let dependentDialects = ["llcdist::plan::PlanDialect"];
}

#endif
