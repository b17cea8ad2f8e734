//===- Passes.td - xf passes ------------------------------*- tablegen -*-===//
#ifndef LLCDIST_DIALECT_XF_TRANSFORMS_PASSES_TD
#define LLCDIST_DIALECT_XF_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def AttachMesh : Pass<"llcdist-attach-mesh", "mlir::ModuleOp"> {
  let summary = "declare the device mesh and check that it divides the model";
  let description = [{
    Adds the device mesh as an upstream `shard.grid @mesh` with axes
    (dp, tp, pp), and cp when cp > 1 (context parallelism), recorded by name
    in the grid's `xf.mesh_axes` attribute,
    and checks that the mesh divides the model: tp must divide every
    attention's num_heads; kv heads must be divisible by tp or divide it
    (kv heads then replicate);
    dp must divide the batch; cp must divide the sequence; pp must not
    exceed the number of layers; ep (expert parallelism, drawn from dp:
    recorded as the grid's `xf.ep` when > 1) must divide dp and every
    mixture-of-experts layer's experts.
    A mesh that does not divide the model is a located error that names the
    quantity and the fix.

    Before (`--llcdist-attach-mesh="dp=2 tp=4"`):
    ```mlir
    module attributes {xf.model = {...}} { func.func @forward ... }
    ```
    After:
    ```mlir
    module attributes {xf.model = {...}} {
      shard.grid @mesh(shape = 2x4x1) {xf.mesh_axes = ["dp", "tp", "pp"], xf.rank_order = ["tp", "dp", "pp"]}
      func.func @forward ...
    }
    ```
  }];
  let options = [
    Option<"dp", "dp", "int64_t", "1", "data-parallel degree">,
    Option<"tp", "tp", "int64_t", "1", "tensor-parallel degree">,
    Option<"pp", "pp", "int64_t", "1", "pipeline-parallel degree">,
    Option<"cp", "cp", "int64_t", "1", "context-parallel degree (the sequence split over cp)">,
    Option<"rankOrder", "rank-order", "std::string", "\"tp,dp,pp\"",
           "axes from fastest- to slowest-varying in the rank number (Megatron: tp,dp,pp; "
           "with cp > 1 a three-axis order gets cp right after tp: tp,cp,dp,pp)">,
    Option<"ep", "ep", "int64_t", "1",
           "expert-parallel degree: a divisor of dp (the experts split over ep consecutive dp ranks)">,
  ];
  let dependentDialects = ["mlir::shard::ShardDialect"];
}

def ModelStats : Pass<"llcdist-model-stats", "mlir::ModuleOp"> {
  let summary = "count parameters and FLOPs per token from the IR";
  let description = [{
    Counts the model's unique parameters (a tied embedding counts once; a
    layer body's `{i}` parameters count once per calling `xf.layer`) and its
    matmul FLOPs per token: 2·K·N per `xf.linear` and 4·S·heads·head_dim per
    `xf.attention` (QKᵀ and PV over the full S×S square, the convention of
    Megatron-LM and PaLM). Training FLOPs are 3× forward (backward = 2×
    forward), without recomputation. The result is recorded on the module:

    ```mlir
    module attributes {xf.stats = {forward_flops_per_token = 284812800 : i64, layers = 12 : i64,
                                   parameters = 124439808 : i64, training_flops_per_token = 854438400 : i64}}
    ```
  }];
}

def PadVocab : Pass<"llcdist-pad-vocab", "mlir::ModuleOp"> {
  let summary = "pad the embedding and LM-head rows to a multiple (Megatron-LM)";
  let description = [{
    Megatron-LM's `--make-vocab-size-divisible-by`: the vocabulary V (the
    loss's logit columns) is padded to Vp, the smallest multiple of
    `multiple` >= V. `llc-dist compile` passes 128 × tp (128 alone under
    `--tp-embeddings replicated`), so the vocabulary-parallel embedding, LM
    head and loss split evenly over tp, whatever V is. The token embedding's
    table and the LM head's weight (tied or not; `xf.linear out_in` feeding
    the loss) get Vp rows; the logits get Vp columns; `xf.cross_entropy`
    records `real_vocab = V`, so the padding columns are outside the softmax
    and get exactly zero gradient (and so do the padded rows of the
    embedding and the LM head). The module records
    `xf.vocab_padding = {vocab_size, padded_vocab_size, multiple, params}`
    for the lowering (the manifest's `padded_vocab_size` and `vocab_padded`
    params: the runtime starts the padding rows at zero, and `--init-from`
    and `--save-params` read and write Hugging Face's real rows only).
    A vocabulary that is a multiple already is left alone (no attribute).
    Runs after llcdist-model-stats, so `xf.stats` (and `llc-dist info`)
    count the real vocabulary.

    Before (`--llcdist-pad-vocab="multiple=8"`, V = 5):
    ```mlir
    %wte = xf.param "wte" : tensor<5x4xf32>
    %logits = xf.linear out_in %h, %wte : (tensor<2x3x4xf32>, tensor<5x4xf32>) -> tensor<2x3x5xf32>
    %loss = xf.cross_entropy %logits, %t : (tensor<2x3x5xf32>, tensor<2x3xi32>) -> tensor<f32>
    ```
    After:
    ```mlir
    %wte = xf.param "wte" : tensor<8x4xf32>
    %logits = xf.linear out_in %h, %wte : (tensor<2x3x4xf32>, tensor<8x4xf32>) -> tensor<2x3x8xf32>
    %loss = xf.cross_entropy %logits, %t {real_vocab = 5 : i64} : (tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<f32>
    ```
  }];
  let options = [
    Option<"multiple", "multiple", "int64_t", "128",
           "pad the vocabulary to a multiple of this (llc-dist: --make-vocab-size-divisible-by × tp)">,
  ];
}

def Autodiff : Pass<"llcdist-autodiff", "mlir::ModuleOp"> {
  let summary = "reverse-mode autodiff: the forward graph becomes a training step";
  let description = [{
    Turns the entry function (loss of one microbatch) into `@train_step`:
    the forward ops, then the backward of each op in reverse order, with the
    input gradient (dX) and the weight gradient (dW) as separate ops and
    every parameter's gradient added into its gradient by
    `xf.accumulate_grad`. Each layer body `@body` gets a backward body
    `@body_bwd` (marked `xf.backward_of = @body`), called once per layer in
    reverse order; the forward body now also returns the values its backward
    reads (the saved activations), and norms and attention yield their
    statistics. The loss gradient is scaled by 1 / (tokens per microbatch ×
    microbatches), the microbatch count read from `xf.model`.

    Before:
    ```mlir
    %y = xf.linear out_in %x, %w : ...
    %loss = xf.cross_entropy %y, %t : ...
    ```
    After:
    ```mlir
    %y = xf.linear out_in %x, %w : ...
    %loss = xf.cross_entropy %y, %t : ...
    %dy = xf.cross_entropy_grad %y, %t {scale = ...} : ...
    %dw = xf.linear_grad_weight out_in %dy, %x : ...
    xf.accumulate_grad "w", %dw : ...
    %dx = xf.linear_grad_input out_in %dy, %w : ...
    ```
  }];
}

def Partition : Pass<"llcdist-partition", "mlir::ModuleOp"> {
  let options = [
    Option<"sequenceParallel", "sequence-parallel", "bool", "false",
           "Megatron's sequence parallelism in the tensor-parallel region">,
    Option<"cpImpl", "cp-impl", "std::string", "\"ring\"",
           "context parallelism's attention under cp > 1: ring (the default, k "
           "and v around the cp ranks, load-balanced causal chunks) or "
           "all-to-all (Ulysses: sequence to heads before attention and back after)">,
  ];
  let summary = "SPMD partitioning of the training step over the mesh (data parallelism)";
  let description = [{
    Reads the mesh (`shard.grid @mesh`, axes dp, tp, pp) and turns the
    global training step into one rank's program. Shardings are propagated
    from the inputs: the batch dimension of the token ids and labels is
    sharded on dp, and every op that keeps the batch dimension keeps the
    sharding (norm and attention statistics included), into and out of layer
    bodies. Each value's type becomes its local type (batch / dp). A
    contraction over the sharded batch dimension — every weight gradient,
    and the loss's mean — yields a partial result; the pass checks that every
    parameter gradient is such a partial sum and inserts, at the start of the
    optimizer step, `xf.all_reduce_grads` (sum over dp, once per step after
    all microbatches: the gradients are already scaled by the global token
    count) and `xf.all_reduce_loss` (average over dp), each with the
    provenance of why it is needed. Under tp > 1 the tensor-parallel rules
    (TensorParallel.cpp) run first; with fewer kv heads than tp ranks they
    replicate each kv head on the tp / kv ranks whose query heads use it
    (`xf.sharding` gains `replicas`) and sum those k/v projections'
    gradients over that sub-group of tp (`xf.all_reduce_grads` with
    `group_size`). Under cp > 1 context parallelism runs between the two
    (ContextParallel.cpp): the sequence of the ids and labels is split on cp
    and propagated like the batch; the attention core (rope, attention and
    their gradients) runs on the whole sequence and 1/cp of the heads, its
    operands exchanged by `xf.all_to_all` (`cp-impl` all-to-all, Ulysses),
    or it stays on the rank's tokens with attention marked `xf.cp_ring`
    (`cp-impl` ring; the lowering emits the ring);
    the gradients are summed and the loss averaged over cp once per step.
    The pp axis is not a sharding: it is left to llcdist-pipeline-split.

    Before (dp = 2, global batch 4):
    ```mlir
    func.func @train_step(%ids: tensor<4x16xi32>, ...) ...
      %dw = xf.linear_grad_weight out_in %dy, %x : (tensor<4x16x64xf32>, ...) -> tensor<64x64xf32>
    func.func @optimizer_step() { xf.adamw {...} }
    ```
    After:
    ```mlir
    func.func @train_step(%ids: tensor<2x16xi32>, ...) ...
      %dw = xf.linear_grad_weight out_in %dy, %x : (tensor<2x16x64xf32>, ...) -> tensor<64x64xf32>
    func.func @optimizer_step() {
      xf.all_reduce_grads {axis = "dp", reason = "...", reduction = "sum"}
      xf.all_reduce_loss {axis = "dp", reason = "..."}
      xf.adamw {...}
    }
    ```
  }];
}

def MegatronTP : Pass<"llcdist-megatron-tp", "mlir::ModuleOp"> {
  let summary = "annotate Megatron-LM's tensor-parallel split of every parameter";
  let description = [{
    The strategy of Shoeybi et al. (Megatron-LM), read off the graph's
    structure and written as `xf.tp_split = {dim, blocks}` on the xf.param
    ops to split over tp (every clone of a name); llcdist-partition does the
    rest by propagation:
    - a linear whose every user is a residual xf.add (inside a layer body) is
      row-parallel: its weight splits on the input dimension, its bias stays
      whole;
    - a linear feeding the loss is the vocabulary-parallel LM head, split on
      the vocabulary, and a token embedding's table likewise;
    - every other linear is column-parallel: weight and bias split on the
      output dimension; when its output feeds an xf.split of k equal parts (a
      fused q|k|v), each part splits on its own (blocks = k).

    ```mlir
    %w = xf.param "model.layers.{i}.mlp.down_proj.weight" {xf.tp_split = {blocks = 1 : i64, dim = 1 : i64}} : tensor<64x128xf32>
    ```
  }];
}

def TPReplicateEmbeddings : Pass<"llcdist-tp-replicate-embeddings", "mlir::ModuleOp"> {
  let summary = "strategy variant: keep the embeddings and the LM head whole under tp";
  let description = [{
    A small strategy pass, the worked example of docs/writing-a-sharding-pass.md:
    it removes the tensor-parallel split of every parameter read as an
    embedding table or by the linear that feeds the loss, so those are
    replicated on every tp rank (no vocabulary-parallel lookup or loss, no
    embedding all-reduce) — worth it when the vocabulary is small next to the
    layers. Runs between llcdist-megatron-tp and llcdist-partition.

    Before: `xf.param "wte" {xf.tp_split = {blocks = 1 : i64, dim = 0 : i64}} : tensor<256x64xf32>`
    After:  `xf.param "wte" : tensor<256x64xf32>`
  }];
}

def AddOptimizer : Pass<"llcdist-add-optimizer", "mlir::ModuleOp"> {
  let summary = "add the optimizer step and the learning-rate schedule";
  let description = [{
    Adds `func.func @optimizer_step() attributes {xf.optimizer}` holding an
    `xf.clip_grad_norm` and one `xf.adamw` or `xf.sgd`, and records the
    learning-rate schedule on the module as `xf.lr_schedule`.

    ```mlir
    module attributes {xf.lr_schedule = {kind = "cosine", max_lr = 1.0e-3 : f64, ...}} {
      func.func @optimizer_step() attributes {xf.optimizer} {
        xf.clip_grad_norm {max_norm = 1.0 : f64}
        xf.adamw {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64}
        return
      }
    }
    ```
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", "\"adamw\"", "adamw | sgd">,
    Option<"lr", "lr", "double", "1e-3", "peak learning rate">,
    Option<"minLr", "min-lr", "double", "0.0", "final learning rate of the cosine schedule">,
    Option<"lrSchedule", "lr-schedule", "std::string", "\"constant\"", "constant | cosine">,
    Option<"warmup", "warmup", "int64_t", "0", "linear warmup steps">,
    Option<"totalSteps", "total-steps", "int64_t", "0", "steps of the cosine decay (0: the run's --steps)">,
    Option<"beta1", "beta1", "double", "0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", "0.999", "AdamW beta2">,
    Option<"eps", "eps", "double", "1e-8", "AdamW eps">,
    Option<"weightDecay", "weight-decay", "double", "-1.0", "weight decay on matrices only (-1: torch's default, 0.01 for adamw, 0 for sgd)">,
    Option<"momentum", "momentum", "double", "0.0", "SGD momentum">,
    Option<"gradClip", "grad-clip", "double", "0.0", "global-norm clipping threshold (0 = off)">,
  ];
  let dependentDialects = ["llcdist::xf::XFDialect", "mlir::func::FuncDialect"];
}

def PipelineSplit : Pass<"llcdist-pipeline-split", "mlir::ModuleOp"> {
  let options = [
    Option<"virtualStages", "virtual-stages", "int64_t", "1",
           "model chunks per pipeline stage (interleaved schedules)">,
    Option<"layout", "layout", "std::string", "\"\"",
           "layers per model chunk, e.g. 3,3,2 (empty: balanced by cost)">,
    Option<"schedule", "schedule", "std::string", "\"1f1b\"",
           "gpipe | 1f1b | interleaved | zb-h1">,
  ];
  let summary = "cut the training step into pipeline stages over the pp axis";
  let description = [{
    Reads pp from the mesh (`shard.grid @mesh`); with pp = 1 it does
    nothing. The layer sequence is cut into pp × virtual-stages contiguous
    model chunks (each at least one layer): balanced by estimated training
    FLOPs per microbatch (3 × the forward GEMM and attention FLOPs), with the
    embedding counted in chunk 0 and the final norm, LM head and loss in the
    last chunk, or as given by `layout`. Chunk k runs on stage k mod pp
    (Megatron's interleaved assignment). Every top-level op of the training
    step gets `xf.chunk` (the chunk it runs in: a layer call its layer's,
    the prologue and the embedding gradient 0, the head and loss the last);
    parameters are left unmarked (each stage that reads one holds it). The
    module gets `xf.pipeline` = {stages, virtual_stages, schedule,
    microbatches, layers_per_chunk, chunk_flops}. llcdist-lower-to-plan
    turns this into one program per stage with send/recv at chunk borders
    and the schedule's action lists.

    Errors: fewer layers than chunks, a layout that does not add up,
    virtual stages without the interleaved schedule, an interleaved
    schedule whose microbatches are not a multiple of pp.
  }];
  let dependentDialects = ["llcdist::xf::XFDialect"];
}

def Recompute : Pass<"llcdist-recompute", "mlir::ModuleOp"> {
  let options = [
    Option<"mode", "mode", "std::string", "\"none\"", "none | selective | full">,
  ];
  let summary = "activation recomputation: trade backward FLOPs for saved activations";
  let description = [{
    Runs after llcdist-autodiff, on the training step.

    - `full`: keep only each layer's input. Before every backward layer call
      the pass inserts a copy of its forward layer call (same body, same
      index, the same input), and the backward call reads the copy's saved
      activations; the forward call's saved results die right after the
      forward (llcdist-plan-memory reuses their bytes). Costs one more
      forward per layer.
    - `selective`: Megatron's core-attention recomputation. Each backward
      layer body recomputes the attention output and its log-sum-exp from
      the saved q, k, v (one more attention forward, 4·b·s²·h FLOPs per
      layer) instead of reading them, so the forward's `out` (b·s·h) and
      `lse` (b·heads·s) are not kept. (Our attention is flash-style: the
      s×s scores are never stored, so this is what selective saves here.)
    - `none`: nothing.

    The module gets `xf.recompute = "<mode>"`.
  }];
  let dependentDialects = ["llcdist::xf::XFDialect"];
}

#endif
