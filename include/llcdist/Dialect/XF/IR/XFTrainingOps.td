//===- XFTrainingOps.td - backward and optimizer ops --------*- tablegen -*-===//
//
// What `llcdist-autodiff` and `llcdist-add-optimizer` produce. The weight
// gradient (dW) and the input gradient (dX) of every op are separate ops, so
// zero-bubble pipeline schedules and overlapped data-parallel reductions can
// place them independently.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_DIALECT_XF_XFTRAININGOPS_TD
#define LLCDIST_DIALECT_XF_XFTRAININGOPS_TD

class XF_GradOp<string mnemonic, list<Trait> traits = []>
    : XF_Op<mnemonic, !listconcat([Pure], traits)> {
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def XF_LinearGradInputOp : XF_GradOp<"linear_grad_input"> {
  let summary = "dX of xf.linear: dy · W";
  let description = [{
    `dy` [..., N], `weight` in `layout`; result [..., K].
    ```mlir
    %dx = xf.linear_grad_input out_in %dy, %w : (tensor<2x8x128xf32>, tensor<128x64xf32>) -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins XF_WeightLayout:$layout, XF_FloatTensor:$dy, XF_FloatTensor:$weight);
  let results = (outs XF_FloatTensor:$result);
  let assemblyFormat = "$layout $dy `,` $weight attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def XF_LinearGradWeightOp : XF_GradOp<"linear_grad_weight"> {
  let summary = "dW of xf.linear, in the weight's own layout";
  let description = [{
    `dy` [..., N], `input` [..., K]; result [N, K] (`out_in`) or [K, N]
    (`in_out`), summed over all leading positions.
  }];
  let arguments = (ins XF_WeightLayout:$layout, XF_FloatTensor:$dy, XF_FloatTensor:$input);
  let results = (outs XF_FloatTensor:$result);
  let assemblyFormat = "$layout $dy `,` $input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def XF_LinearGradBiasOp : XF_GradOp<"linear_grad_bias"> {
  let summary = "db of xf.linear: dy summed over all leading positions";
  let description = [{ `dy` [..., N]; result [N]. }];
  let arguments = (ins XF_FloatTensor:$dy);
  let results = (outs XF_FloatTensor:$result);
  let hasVerifier = 1;
}

def XF_EmbeddingGradOp : XF_GradOp<"embedding_grad"> {
  let summary = "dTable of xf.embedding: scatter-add of dy rows at ids";
  let description = [{
    `ids` [B, S], `dy` [B, S, H]; result [V, H]: row v is the sum of
    `scale` · dy[b, s] over the (b, s) with ids[b, s] = v, except row
    `padding_idx` (the forward's), which stays zero.
  }];
  let arguments = (ins XF_IdTensor:$ids, XF_FloatTensor:$dy, OptionalAttr<F64Attr>:$scale,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<0>]>>:$padding_idx);
  let results = (outs XF_FloatTensor:$result);
  let hasVerifier = 1;
}

def XF_AddPositionEmbeddingGradOp : XF_GradOp<"add_position_embedding_grad"> {
  let summary = "dTable of xf.add_position_embedding";
  let description = [{
    `dy` [B, S, H]; result [P, H]: row s + offset (s < S) is the sum over b
    of dy[b, s], the other rows are zero; `offset` as the forward's (absent:
    0). (The input gradient is dy itself.)
  }];
  let arguments = (ins XF_FloatTensor:$dy, OptionalAttr<I64Attr>:$offset);
  let results = (outs XF_FloatTensor:$result);
  let hasVerifier = 1;
}

def XF_LayerNormGradInputOp : XF_GradOp<"layer_norm_grad_input",
    [AllTypesMatch<["dy", "input", "result"]>]> {
  let summary = "dX of xf.layer_norm";
  let description = [{
    Reads the forward's `stats` (mean, 1/std per row); no `weight` where the
    forward has no affine transform (a weight of ones).
  }];
  let arguments = (ins XF_FloatTensor:$dy, XF_FloatTensor:$input,
                       Optional<XF_FloatTensor>:$weight, F32Tensor:$stats);
  let results = (outs XF_FloatTensor:$result);
}

def XF_LayerNormGradParamsOp : XF_GradOp<"layer_norm_grad_params",
    [AllTypesMatch<["dy", "input"]>]> {
  let summary = "dWeight and dBias of xf.layer_norm";
  let description = [{
    Both [H], summed over rows; dbias absent for a LayerNorm without a bias (MPT's).
  }];
  let arguments = (ins XF_FloatTensor:$dy, XF_FloatTensor:$input, F32Tensor:$stats);
  let results = (outs XF_FloatTensor:$dweight, Optional<XF_FloatTensor>:$dbias);
}

def XF_RMSNormGradInputOp : XF_GradOp<"rms_norm_grad_input",
    [AllTypesMatch<["dy", "input", "result"]>]> {
  let summary = "dX of xf.rms_norm";
  let description = [{
    Reads the forward's `stats` (rsqrt per row); the forward's
    `weight_offset`, if any, added to the weight.
  }];
  let arguments = (ins XF_FloatTensor:$dy, XF_FloatTensor:$input,
                       XF_FloatTensor:$weight, F32Tensor:$stats,
                       OptionalAttr<F64Attr>:$weight_offset);
  let results = (outs XF_FloatTensor:$result);
}

def XF_RMSNormGradWeightOp : XF_GradOp<"rms_norm_grad_weight",
    [AllTypesMatch<["dy", "input"]>]> {
  let summary = "dWeight of xf.rms_norm";
  let description = [{ [H], summed over rows. }];
  let arguments = (ins XF_FloatTensor:$dy, XF_FloatTensor:$input, F32Tensor:$stats);
  let results = (outs XF_FloatTensor:$result);
}

def XF_RopeGradOp : XF_GradOp<"rope_grad", [AllTypesMatch<["dy", "result"]>]> {
  let summary = "dX of xf.rope: the inverse rotation";
  let description = [{ Same attributes as the forward xf.rope. }];
  let arguments = (ins XF_FloatTensor:$dy, I64Attr:$head_dim, F64Attr:$theta,
                       OptionalAttr<DictionaryAttr>:$scaling,
                       OptionalAttr<I64Attr>:$rotary_dim,
                       UnitAttr:$interleaved);
  let results = (outs XF_FloatTensor:$result);
  let hasVerifier = 1;
}

def XF_AttentionGradOp : XF_GradOp<"attention_grad", [
    AllTypesMatch<["dout", "out", "q", "dq"]>, AllTypesMatch<["k", "dk"]>,
    AllTypesMatch<["v", "dv"]>]> {
  let summary = "dq, dk, dv of xf.attention";
  let description = [{
    Recomputes the probabilities from q, k and the forward's `lse`; dk and dv
    sum over the query heads that share a kv head. `window` and
    `alibi_heads`: the forward's.
  }];
  let arguments = (ins XF_FloatTensor:$dout, XF_FloatTensor:$q, XF_FloatTensor:$k,
                       XF_FloatTensor:$v, XF_FloatTensor:$out, F32Tensor:$lse,
                       I64Attr:$num_heads, I64Attr:$num_kv_heads, I64Attr:$head_dim,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<1>]>>:$window,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<1>]>>:$alibi_heads);
  let results = (outs XF_FloatTensor:$dq, XF_FloatTensor:$dk, XF_FloatTensor:$dv);
}

def XF_GeluTanhGradOp : XF_GradOp<"gelu_tanh_grad",
    [AllTypesMatch<["dy", "input", "result"]>, Elementwise]> {
  let summary = "dX of xf.gelu_tanh";
  let description = [{ `dy * gelu_tanh'(input)`. }];
  let arguments = (ins XF_FloatTensor:$dy, XF_FloatTensor:$input);
  let results = (outs XF_FloatTensor:$result);
}

def XF_GeluErfGradOp : XF_GradOp<"gelu_erf_grad",
    [AllTypesMatch<["dy", "input", "result"]>, Elementwise]> {
  let summary = "dX of xf.gelu_erf";
  let description = [{ `dy * (Phi(input) + input * phi(input))`, the normal CDF and density. }];
  let arguments = (ins XF_FloatTensor:$dy, XF_FloatTensor:$input);
  let results = (outs XF_FloatTensor:$result);
}

def XF_ReluGradOp : XF_GradOp<"relu_grad",
    [AllTypesMatch<["dy", "input", "result"]>, Elementwise]> {
  let summary = "dX of xf.relu";
  let description = [{ `dy` where `input > 0`, else 0 (torch's threshold_backward). }];
  let arguments = (ins XF_FloatTensor:$dy, XF_FloatTensor:$input);
  let results = (outs XF_FloatTensor:$result);
}

def XF_ClampGradOp : XF_GradOp<"clamp_grad",
    [AllTypesMatch<["dy", "input", "result"]>, Elementwise]> {
  let summary = "dX of xf.clamp";
  let description = [{ `dy` where `-limit <= input <= limit` (torch's clamp passes both ends), else 0. }];
  let arguments = (ins XF_FloatTensor:$dy, XF_FloatTensor:$input, F64Attr:$limit);
  let results = (outs XF_FloatTensor:$result);
  let hasVerifier = 1;
}

def XF_SwiGLUGradOp : XF_GradOp<"swiglu_grad",
    [AllTypesMatch<["dy", "gate", "up", "dgate", "dup"]>, Elementwise]> {
  let summary = "d(gate) and d(up) of xf.swiglu";
  let description = [{
    `dgate = dy * up * act'(gate)`, `dup = dy * act(gate)`, act the
    forward's `activation` (absent: silu).
  }];
  let arguments = (ins XF_FloatTensor:$dy, XF_FloatTensor:$gate, XF_FloatTensor:$up,
                       OptionalAttr<StrAttr>:$activation);
  let results = (outs XF_FloatTensor:$dgate, XF_FloatTensor:$dup);
  let hasVerifier = 1;
}

def XF_ConcatOp : XF_GradOp<"concat"> {
  let summary = "concatenate along the last dimension (the backward of xf.split)";
  let description = [{
    Inputs [..., d_i]; result [..., Σ d_i]. With `groups` G (the backward of
    a grouped xf.split) each input reads as [..., G, d_i / G] and the result
    is [..., G, Σ d_i / G], flattened.
  }];
  let arguments = (ins Variadic<XF_FloatTensor>:$inputs, OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<1>]>>:$groups);
  let results = (outs XF_FloatTensor:$result);
  let hasVerifier = 1;
}

def XF_MoeRouteGradOp : XF_GradOp<"moe_route_grad", [AllTypesMatch<["logits", "result"]>]> {
  let summary = "dLogits of xf.moe_route (the selection held constant)";
  let description = [{
    From `dweights` [B, S, k]: with `normalize` the weights are a softmax over
    the selected logits, dl[e_j] = w_j (dw_j - sum w dw); without, through the
    whole softmax, dl[e] = p[e] (g[e] - sum_j p[e_j] dw_j), g[e_j] = dw_j.
  }];
  let arguments = (ins XF_FloatTensor:$logits, I32Tensor:$experts, XF_FloatTensor:$dweights, UnitAttr:$normalize);
  let results = (outs XF_FloatTensor:$result);
}

def XF_MoeRouterStatsGradOp : XF_GradOp<"moe_router_stats_grad", [AllTypesMatch<["logits", "result"]>]> {
  let summary = "dLogits of xf.moe_router_stats (through the probabilities' sums)";
  let description = [{
    `logits` [B, S, E], `dprobs` [E]: `dl[t, e] = p[t, e] · (g[e] - Σ_e' p[t, e'] g[e'])`,
    p the token's softmax, g = dprobs.
  }];
  let arguments = (ins XF_FloatTensor:$logits, F32Tensor:$dprobs);
  let results = (outs XF_FloatTensor:$result);
  let hasVerifier = 1;
}

def XF_MoeAuxLossGradOp : XF_GradOp<"moe_aux_loss_grad"> {
  let summary = "dProbs of xf.moe_aux_loss";
  let description = [{
    `counts` [E] -> `scale · coef · E · top_k² / N² · counts` (f32), N =
    Σ_e counts[e]; `scale` the loss's (1 / microbatches, as the
    cross-entropy's gradient is scaled).
  }];
  let arguments = (ins I32Tensor:$counts, F64Attr:$coef, ConfinedAttr<I64Attr, [IntMinValue<1>]>:$top_k,
                       F64Attr:$scale);
  let results = (outs F32Tensor:$result);
  let hasVerifier = 1;
}

def XF_MoeUnpermuteGradOp : XF_GradOp<"moe_unpermute_grad"> {
  let summary = "dInput and dWeights of a weighted xf.moe_unpermute";
  let description = [{
    `dinput[slots[t, j]] = weights[t, j] · dy[t]`,
    `dweights[t, j] = dy[t] · input[slots[t, j]]`.
  }];
  let arguments = (ins XF_FloatTensor:$dy, XF_FloatTensor:$input, I32Tensor:$slots, XF_FloatTensor:$weights);
  let results = (outs XF_FloatTensor:$dinput, XF_FloatTensor:$dweights);
}

def XF_GroupedLinearGradInputOp : XF_GradOp<"grouped_linear_grad_input"> {
  let summary = "dX of xf.grouped_linear: each group's dy · weight[e]";
  let description = [{ `dy` [N, O], `weight` [E, O, K]; result [N, K]. }];
  let arguments = (ins XF_FloatTensor:$dy, XF_FloatTensor:$weight, I32Tensor:$group_sizes);
  let results = (outs XF_FloatTensor:$result);
}

def XF_GroupedLinearGradWeightOp : XF_GradOp<"grouped_linear_grad_weight"> {
  let summary = "dW of xf.grouped_linear: dW[e] = dy[rows of e]ᵀ · x[rows of e]";
  let description = [{ `dy` [N, O], `input` [N, K]; result [E, O, K]. }];
  let arguments = (ins XF_FloatTensor:$dy, XF_FloatTensor:$input, I32Tensor:$group_sizes);
  let results = (outs XF_FloatTensor:$result);
}

def XF_SigmoidGateGradOp : XF_GradOp<"sigmoid_gate_grad"> {
  let summary = "dGate and dInput of xf.sigmoid_gate";
  let description = [{
    `dinput = sigmoid(gate) · dy`, `dgate = sigmoid'(gate) · sum_h dy · input`.
  }];
  let arguments = (ins XF_FloatTensor:$dy, XF_FloatTensor:$gate, XF_FloatTensor:$input);
  let results = (outs XF_FloatTensor:$dgate, XF_FloatTensor:$dinput);
}

def XF_CrossEntropyGradOp : XF_GradOp<"cross_entropy_grad",
    [AllTypesMatch<["logits", "result"]>]> {
  let summary = "dLogits of the loss: (softmax(logits) - onehot(targets)) · scale";
  let description = [{
    `scale` is 1 / (tokens per microbatch × microbatches): the step's loss is
    the mean over every token of every microbatch. `real_vocab` as on
    xf.cross_entropy: padding columns get exactly zero.
  }];
  let arguments = (ins XF_FloatTensor:$logits, XF_IdTensor:$targets, F64Attr:$scale,
                       OptionalAttr<I64Attr>:$real_vocab);
  let results = (outs XF_FloatTensor:$result);
}

def XF_AccumulateGradOp : XF_Op<"accumulate_grad", [MemoryEffects<[MemWrite]>]> {
  let summary = "add a gradient contribution into a parameter's gradient";
  let description = [{
    `grad(name) += grad`; the gradients are zeroed at the start of each step
    and accumulate over uses (a tied embedding) and microbatches. Naming
    rules (`{i}` inside layer bodies only) are those of xf.param.

    ```mlir
    xf.accumulate_grad "model.norm.weight", %dw : tensor<64xf32>
    ```
  }];
  let arguments = (ins StrAttr:$name, XF_FloatTensor:$grad);
  let assemblyFormat = "$name `,` $grad attr-dict `:` type($grad)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Optimizer (the body of the function marked xf.optimizer)
//===----------------------------------------------------------------------===//

def XF_ClipGradNormOp : XF_Op<"clip_grad_norm", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "global-norm gradient clipping over every parameter";
  let description = [{
    Computes the global L2 norm of all gradients (reported every step) and,
    when `max_norm` > 0, scales them by min(1, max_norm / (norm + 1e-6)) as
    torch.nn.utils.clip_grad_norm_ does.
  }];
  let arguments = (ins F64Attr:$max_norm);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

def XF_AdamWOp : XF_Op<"adamw", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "one torch.optim.AdamW step on every parameter";
  let description = [{
    Decoupled weight decay applies to matrices only: parameters of rank 2
    that are not read by an xf.embedding or xf.add_position_embedding; never
    to norms, biases and embeddings (a tied embedding is an embedding). The
    learning rate comes from the module's `xf.lr_schedule`.
  }];
  let arguments = (ins F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps, F64Attr:$weight_decay);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

def XF_SGDOp : XF_Op<"sgd", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "one torch.optim.SGD step on every parameter";
  let description = [{ Momentum 0 is plain SGD; weight decay as for xf.adamw. }];
  let arguments = (ins F64Attr:$momentum, F64Attr:$weight_decay);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Collectives the partitioner inserts (on mesh axes)
//===----------------------------------------------------------------------===//

// Why a collective exists, as data: set where the collective is created (the
// partitioner's xf collectives carry it as `origin`, and llcdist-lower-to-plan
// copies it onto their plan kernels as plan.origin, beside the ZeRO and
// pipeline collectives it creates itself). The compile report picks its
// analytic formula by this kind; `reason` is the sentence for people.
def XF_CollectiveOrigin : I32EnumAttr<"CollectiveOrigin",
    "why a collective exists", [
      // Megatron's f/g: a row-parallel linear's output (reduced, or under
      // sequence parallelism reduce-scattered) ...
      I32EnumAttrCase<"RowParallel", 0, "row_parallel">,
      // ... and a column-parallel linear's input gradient.
      I32EnumAttrCase<"ColumnParallel", 1, "column_parallel">,
      // The partial lookup of a vocabulary-parallel embedding.
      I32EnumAttrCase<"VocabParallelEmbedding", 2, "vocab_parallel_embedding">,
      // Sequence parallelism's gathers and its partial sums over the tokens.
      I32EnumAttrCase<"SequenceParallel", 3, "sequence_parallel">,
      // Data parallelism's gradient all-reduce (DDP).
      I32EnumAttrCase<"DataParallelGradients", 4, "dp_gradients">,
      // The gradients of a kv head shared by several tp ranks.
      I32EnumAttrCase<"KvReplica", 5, "kv_replica">,
      // The step's loss, averaged for reporting.
      I32EnumAttrCase<"Loss", 6, "loss">,
      // ZeRO's reduce-scatters and all-gathers (llcdist-lower-to-plan).
      I32EnumAttrCase<"Zero", 7, "zero">,
      // A pipeline border's activations or their gradients (send / recv).
      I32EnumAttrCase<"Pipeline", 8, "pipeline">,
      // A tied parameter's gradient and value between its stages.
      I32EnumAttrCase<"TiedParameter", 9, "tied_parameter">,
      // The global gradient norm's f64 partial squared norms (sharded
      // gradients over their axis, then over each pipeline / ZeRO axis).
      I32EnumAttrCase<"GradNorm", 10, "grad_norm">,
      // The vocabulary-parallel cross entropy's f64 row statistics (max,
      // then Σ exp and the target logit) over the vocabulary shards.
      I32EnumAttrCase<"VocabParallelLoss", 11, "vocab_parallel_loss">,
      // Context parallelism: attention's all-to-alls (sequence <-> heads)
      // and the partial sums over the sequence split on cp.
      I32EnumAttrCase<"ContextParallel", 12, "context_parallel">,
      // Expert parallelism: the tokens' rows sent to their experts' ranks
      // and back (all-to-all-v over ep).
      I32EnumAttrCase<"ExpertParallel", 13, "expert_parallel">
    ]> {
  let cppNamespace = "::llcdist::xf";
  // Stored as a string attribute (readable in the IR), checked against the enum.
  let genSpecializedAttr = 0;
}

def XF_CollectiveOriginAttr : ConfinedAttr<StrAttr, [AttrConstraint<
    CPred<"::llcdist::xf::symbolizeCollectiveOrigin("
          "::llvm::cast<::mlir::StringAttr>($_self).getValue()).has_value()">,
    "that names a collective origin (row_parallel, column_parallel, vocab_parallel_embedding, "
    "sequence_parallel, dp_gradients, kv_replica, loss, zero, pipeline, tied_parameter, grad_norm, "
    "vocab_parallel_loss, context_parallel, expert_parallel)">]>;

def XF_AllReduceGradsOp : XF_Op<"all_reduce_grads", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "all-reduce every parameter's gradient over a mesh axis";
  let description = [{
    Inserted by `llcdist-partition` at the start of the optimizer step when the
    gradients are partial sums over `axis` (data parallelism: the batch
    dimension of every weight-gradient contraction is sharded on dp). `axis`
    may name several axes joined by '+', one reduction over their product
    group: under context parallelism the data-parallel group is "dp+cp", as
    in Megatron (the sequence is split on cp too). Summed
    once per step, after all microbatches, as DDP does with no_sync.
    `reason` is the provenance the compile report and the runtime show, and
    `origin` its kind (dp_gradients, kv_replica, sequence_parallel).
    `group_size` (optional) reduces over sub-groups of the axis instead: its
    n members split into n / group_size groups of group_size consecutive
    members (kv-head replication: the tp ranks that share a kv head).
    `exclude` (optional) leaves the named parameters out: under expert
    parallelism the experts' gradients reduce over "edp" and every other
    over dp.

    ```mlir
    xf.all_reduce_grads {axis = "dp", origin = "dp_gradients", reduction = "sum", reason = "..."}
    xf.all_reduce_grads {axis = "tp", group_size = 2 : i64, origin = "kv_replica",
                         reduction = "sum",
                         params = ["model.layers.{i}.self_attn.k_proj.weight"], reason = "..."}
    ```
  }];
  let arguments = (ins StrAttr:$axis, StrAttr:$reduction, StrAttr:$reason,
                       XF_CollectiveOriginAttr:$origin,
                       OptionalAttr<StrArrayAttr>:$params,
                       OptionalAttr<I64Attr>:$group_size,
                       OptionalAttr<StrArrayAttr>:$exclude);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// True when this all-reduce covers the (instantiated) parameter `name`:
    /// all of them when `params` is absent, less those `exclude` names;
    /// names may hold "{i}", standing for any layer index.
    bool covers(llvm::StringRef name) {
      auto named = [&](mlir::ArrayAttr list) {
        return llvm::any_of(list, [&](mlir::Attribute a) {
          return matchesLayerName(mlir::cast<mlir::StringAttr>(a).getValue(), name);
        });
      };
      if (std::optional<mlir::ArrayAttr> out = getExclude(); out && named(*out))
        return false;
      std::optional<mlir::ArrayAttr> list = getParams();
      return !list || named(*list);
    }
  }];
}

def XF_AllReduceLossOp : XF_Op<"all_reduce_loss", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "average the step's loss over a mesh axis (for reporting)";
  let description = [{
    Each data-parallel rank's loss is the mean over its own tokens; the
    step's loss is their average (equal token counts).
  }];
  let arguments = (ins StrAttr:$axis, StrAttr:$reason, XF_CollectiveOriginAttr:$origin);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

def XF_AllReduceOp : XF_Op<"all_reduce", [SameOperandsAndResultType]> {
  let summary = "sum a partial value over a mesh axis (Megatron's f/g operators)";
  let description = [{
    Inserted by `llcdist-partition` after an op whose result is a partial sum
    over `axis`: a row-parallel linear's output, a column-parallel linear's
    input gradient, a vocabulary-parallel embedding lookup, the MoE
    load-balancing loss's statistics under sequence or context parallelism
    (its counts i32). `reason` is the provenance, `origin` its kind.

    ```mlir
    %y = xf.all_reduce %p {axis = "tp", origin = "row_parallel", reason = "..."} : tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins AnyTypeOf<[XF_FloatTensor, I32Tensor]>:$input, StrAttr:$axis, StrAttr:$reason,
                       XF_CollectiveOriginAttr:$origin);
  let results = (outs AnyTypeOf<[XF_FloatTensor, I32Tensor]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def XF_AllGatherOp : XF_Op<"all_gather"> {
  let summary = "gather a split dimension over a mesh axis (sequence parallelism)";
  let description = [{
    `result` concatenates every member's `input` along `dim`, in member
    order. Inserted by `llcdist-partition` where a sequence-split activation
    meets an op that needs the whole sequence (a column-parallel linear).

    ```mlir
    %y = xf.all_gather %x {axis = "tp", dim = 1 : i64, origin = "sequence_parallel", reason = "..."} : (tensor<2x4x64xf32>) -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins XF_FloatTensor:$input, StrAttr:$axis, I64Attr:$dim, StrAttr:$reason,
                       XF_CollectiveOriginAttr:$origin);
  let results = (outs XF_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def XF_ReduceScatterOp : XF_Op<"reduce_scatter"> {
  let summary = "sum a partial value over a mesh axis, keeping one slice of `dim`";
  let description = [{
    Each member receives its slice (by member index) of `dim` of the sum of
    every member's `input`. With sequence parallelism it replaces the
    all-reduce of a row-parallel output, whose consumer keeps the sequence
    split; `origin` is then that of the partial sum (row_parallel, ...).
  }];
  let arguments = (ins XF_FloatTensor:$input, StrAttr:$axis, I64Attr:$dim, StrAttr:$reason,
                       XF_CollectiveOriginAttr:$origin);
  let results = (outs XF_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def XF_AllToAllOp : XF_Op<"all_to_all"> {
  let summary = "exchange blocks over a mesh axis: split one dimension, gather another";
  let description = [{
    Over the n members of `axis`: `split_dim` of `input` is cut into n equal
    blocks, block j goes to member j, and `result` concatenates the blocks
    received along `concat_dim`, in member order. Context parallelism's
    all-to-all (DeepSpeed-Ulysses) inserted by `llcdist-partition`: from the
    sequence split on cp to the heads split on cp before attention
    (split_dim = 2, the heads' features; concat_dim = 1, the sequence) and
    back after it (split_dim = 1, concat_dim = 2). Its own inverse with the
    two dimensions swapped, which is its backward.

    ```mlir
    %y = xf.all_to_all %x {axis = "cp", split_dim = 2 : i64, concat_dim = 1 : i64, origin = "context_parallel", reason = "..."} : (tensor<2x4x64xf32>) -> tensor<2x8x32xf32>
    ```
  }];
  let arguments = (ins XF_FloatTensor:$input, StrAttr:$axis, I64Attr:$split_dim, I64Attr:$concat_dim,
                       StrAttr:$reason, XF_CollectiveOriginAttr:$origin);
  let results = (outs XF_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def XF_MoeDispatchOp : XF_Op<"moe_dispatch"> {
  let summary = "send each token's expert rows to the ep rank of their expert (all-to-all-v)";
  let description = [{
    Expert parallelism (`llcdist-partition` with ep > 1): the n members of
    `axis` (ep) each hold E/n consecutive experts, member m experts
    [m·E/n, (m+1)·E/n). `input` [N, H] is this rank's rows in
    xf.moe_permute's order (grouped by global expert, `group_sizes` [E]);
    each group goes to its expert's member, the sizes exchanged first.
    `result` [C, H] holds the rows every member sent here, grouped by local
    expert and, within one, by sending member (each member's rows in their
    order); `local_sizes` [E/n] the rows of each local expert (xf.grouped_linear's
    group sizes); `recv_splits` [E] the rows received from member i for local
    expert j at [i·E/n + j] (xf.moe_combine sends the rows back with them).
    C is the worst case, every member's rows on this rank: rows past the
    received ones are zero.

    ```mlir
    %rows, %splits, %sizes = xf.moe_dispatch %x, %group_sizes {axis = "ep", origin = "expert_parallel", reason = "..."} : (tensor<128x64xf32>, tensor<8xi32>) -> (tensor<256x64xf32>, tensor<8xi32>, tensor<4xi32>)
    ```
  }];
  let arguments = (ins XF_FloatTensor:$input, I32Tensor:$group_sizes, StrAttr:$axis, StrAttr:$reason,
                       XF_CollectiveOriginAttr:$origin);
  let results = (outs XF_FloatTensor:$result, I32Tensor:$recv_splits, I32Tensor:$local_sizes);
  let assemblyFormat = "$input `,` $group_sizes attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def XF_MoeCombineOp : XF_Op<"moe_combine"> {
  let summary = "send the expert rows back to the ranks of their tokens (all-to-all-v)";
  let description = [{
    The inverse of xf.moe_dispatch: `input` [C, H] grouped by local expert
    then sending member, `recv_splits` [E] the dispatch's, `local_experts`
    E/n -> `result` [N, H], this rank's rows back in xf.moe_permute's order.
    The backward of each is the other.
  }];
  let arguments = (ins XF_FloatTensor:$input, I32Tensor:$recv_splits, StrAttr:$axis, I64Attr:$local_experts,
                       StrAttr:$reason, XF_CollectiveOriginAttr:$origin);
  let results = (outs XF_FloatTensor:$result);
  let assemblyFormat = "$input `,` $recv_splits attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def XF_BiasAddOp : XF_Op<"bias_add", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "add a bias over the last dimension";
  let description = [{
    `input` [..., N] + `bias` [N]. A row-parallel linear adds its bias after
    the tensor-parallel all-reduce (once, not once per rank).
  }];
  let arguments = (ins XF_FloatTensor:$input, XF_FloatTensor:$bias);
  let results = (outs XF_FloatTensor:$result);
  let assemblyFormat = "$input `,` $bias attr-dict `:` functional-type(operands, results)";
}

#endif
