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

    ZeRO-3's parameter side (`zero` = 3, FSDP, over dp; every parameter's
    first dimension split in dp equal row blocks of ceil(rows / dp) rows,
    the last ones zero-padded when dp does not divide the rows: `total` on
    the gathers): each rank holds only its block of the parameter (and of
    the bf16 master) and all-gathers it where each scope (a layer body's
    forward, its backward, the step's top level) reads it, so the memory
    planner frees it after; with `reshard-after-forward` = false the
    backward reads the forward's copy. The rest of ZeRO-3 (the gradient and
    optimizer-state blocks, the manifest's `zero`) and stages 1 and 2 are a
    rewrite of the lowered plan, llcdist-plan-zero, which must follow;
    `zero` = 1 or 2 here is an error.

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
    Option<"zero", "zero", "int64_t", "0",
           "ZeRO-3 (FSDP) over dp: 3 holds each parameter's block and gathers it "
           "where each scope reads it (0: off; the rest is llcdist-plan-zero)">,
    Option<"reshardAfterForward", "reshard-after-forward", "bool", "true",
           "ZeRO-3: gather a layer's parameters again for its backward (true, "
           "PyTorch FSDP's default) or keep the forward's gathered copy">,
  ];
  let dependentDialects = ["llcdist::plan::PlanDialect"];
}

#endif
