//===- XFOps.td - xf operations ---------------------------*- tablegen -*-===//
#ifndef LLCDIST_DIALECT_XF_XFOPS_TD
#define LLCDIST_DIALECT_XF_XFOPS_TD

include "llcdist/Dialect/XF/IR/XFDialect.td"
include "llcdist/Dialect/XF/IR/XFInterfaces.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/OpBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/CallInterfaces.td"

//===----------------------------------------------------------------------===//
// Types and attributes
//===----------------------------------------------------------------------===//

def XF_Float : AnyTypeOf<[F32, BF16, F16]>;
def XF_FloatTensor : RankedTensorOf<[F32, BF16, F16]>;
def XF_IdTensor : RankedTensorOf<[I32, I64]>;

def XF_WeightLayout : I32EnumAttr<"WeightLayout",
    "memory layout of a linear op's weight", [
      I32EnumAttrCase<"OutIn", 0, "out_in">,   // torch nn.Linear: [out, in]
      I32EnumAttrCase<"InOut", 1, "in_out">    // GPT-2 Conv1D:   [in, out]
    ]> {
  let cppNamespace = "::llcdist::xf";
}

//===----------------------------------------------------------------------===//
// Parameters and layers
//===----------------------------------------------------------------------===//

def XF_ParamOp : XF_Op<"param", [Pure]> {
  let summary = "a named model parameter";
  let description = [{
    Yields the parameter `name` (its Hugging Face name and layout). Inside a
    function marked `xf.layer_body` the name must contain `{i}`, which stands
    for the index of the calling `xf.layer`; outside one it must not. Two
    `xf.param` ops with one name are one parameter (a tied embedding).

    ```mlir
    %w = xf.param "model.layers.{i}.self_attn.q_proj.weight" : tensor<64x64xf32>
    ```
  }];
  let arguments = (ins StrAttr:$name);
  let results = (outs XF_FloatTensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def XF_LayerOp : XF_Op<"layer", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "one transformer layer: a call of a layer body";
  let description = [{
    Runs the `xf.layer_body` function `callee` as layer `index` of the model:
    every `{i}` in the callee's parameter names reads as `index`. The operand
    and result types must match the callee's signature.

    ```mlir
    %h1 = xf.layer @block[1](%h0) : (tensor<2x32x64xf32>) -> tensor<2x32x64xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$callee, I64Attr:$index,
                       Variadic<AnyType>:$operands);
  let results = (outs Variadic<AnyType>:$results);
  let assemblyFormat = [{
    $callee `[` $index `]` `(` $operands `)` attr-dict `:` functional-type($operands, $results)
  }];
}

//===----------------------------------------------------------------------===//
// Embeddings
//===----------------------------------------------------------------------===//

def XF_EmbeddingOp : XF_Op<"embedding", [Pure, DeclareOpInterfaceMethods<XF_DifferentiableOpInterface>]> {
  let summary = "token embedding lookup";
  let description = [{
    `result[b, s, :] = table[ids[b, s], :] * scale`; ids [B, S], table
    [V, H], result [B, S, H]. The optional `scale` (absent: 1) is Gemma's
    sqrt(hidden_size). The optional `padding_idx` p (0 <= p < V; absent:
    none) is torch's `nn.Embedding(padding_idx=p)`: the lookup reads row p
    as any other, but row p gets no gradient from it (xf.embedding_grad
    skips the ids equal to p). Hugging Face's Llama-style models, OPT,
    OLMo and Cohere build it from `pad_token_id`.

    ```mlir
    %x = xf.embedding %ids, %wte : (tensor<2x32xi32>, tensor<256x64xf32>) -> tensor<2x32x64xf32>
    ```
  }];
  let arguments = (ins XF_IdTensor:$ids, XF_FloatTensor:$table, OptionalAttr<F64Attr>:$scale,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<0>]>>:$padding_idx);
  let results = (outs XF_FloatTensor:$result);
  let assemblyFormat = "$ids `,` $table attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def XF_AddPositionEmbeddingOp : XF_Op<"add_position_embedding", [Pure, DeclareOpInterfaceMethods<XF_DifferentiableOpInterface>]> {
  let summary = "learned absolute position embedding (GPT-2)";
  let description = [{
    `result[b, s, :] = input[b, s, :] + table[s + offset, :]` for s < S;
    input [B, S, H], table [P, H] with S + offset <= P. The optional
    `offset` (>= 1; absent: 0) is OPT's: its table's rows 0 and 1 are never read
    (OPTLearnedPositionalEmbedding's offset 2).
  }];
  let arguments = (ins XF_FloatTensor:$input, XF_FloatTensor:$table, OptionalAttr<I64Attr>:$offset);
  let results = (outs XF_FloatTensor:$result);
  let assemblyFormat = "$input `,` $table attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def XF_RopeOp : XF_Op<"rope", [Pure, DeclareOpInterfaceMethods<XF_DifferentiableOpInterface>, AllTypesMatch<["input", "result"]>]> {
  let summary = "rotary position embedding, rotate-half convention (Llama)";
  let description = [{
    Rotates each `head_dim`-wide head of `input` [B, S, n*head_dim] by
    position s with inverse frequencies `theta^(-2j/head_dim)`, exactly as
    Hugging Face Llama (`rotate_half`). The optional `scaling` dictionary is
    Hugging Face's `rope_scaling` (rope_type "llama3": factor,
    low_freq_factor, high_freq_factor, original_max_position_embeddings).
    The optional `rotary_dim` r (absent: head_dim; Phi's partial rotary)
    rotates only the first r dims of each head, with frequencies
    `theta^(-2j/r)`; the others pass through. With `interleaved` (GPT-J's
    `rotate_every_two`) the rotated pairs are adjacent dims (2j, 2j + 1)
    instead of rotate_half's j and j + r/2.

    ```mlir
    %q2 = xf.rope %q {head_dim = 16 : i64, theta = 10000.0 : f64} : tensor<2x32x64xf32>
    ```
  }];
  let arguments = (ins XF_FloatTensor:$input, I64Attr:$head_dim, F64Attr:$theta,
                       OptionalAttr<DictionaryAttr>:$scaling,
                       OptionalAttr<I64Attr>:$rotary_dim,
                       UnitAttr:$interleaved);
  let results = (outs XF_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Norms, linear, activations
//===----------------------------------------------------------------------===//

def XF_LayerNormOp : XF_Op<"layer_norm", [Pure, AttrSizedOperandSegments, DeclareOpInterfaceMethods<XF_DifferentiableOpInterface, ["buildWithSavedStatistics"]>, AllTypesMatch<["input", "result"]>]> {
  let summary = "LayerNorm over the last dimension (biased variance)";
  let description = [{
    `(x - mean) / sqrt(var + eps) * weight + bias` over the last dim H, as
    torch `nn.LayerNorm`; weight and bias are [H]. The bias absent: no add
    (torch's `bias=False`, MPT's); both absent: no affine transform,
    `(x - mean) / sqrt(var + eps)` (torch's `elementwise_affine=False`,
    OLMo's `OlmoLayerNorm`). In a training step
    the op also yields `stats` (f32 [2, rows]: the mean and 1/std of each
    row, rows = product of the leading dims), which its backward reads;
    autodiff adds it.

    ```mlir
    %y = xf.layer_norm %x, %w, %b {eps = 1.0e-05 : f64} : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
    %n = xf.layer_norm %x, %w {eps = 1.0e-05 : f64} : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
    %z = xf.layer_norm %x {eps = 1.0e-05 : f64} : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins XF_FloatTensor:$input, Optional<XF_FloatTensor>:$weight,
                       Optional<XF_FloatTensor>:$bias, F64Attr:$eps);
  let results = (outs XF_FloatTensor:$result, Optional<F32Tensor>:$stats);
  let assemblyFormat = "$input (`,` $weight^)? (`,` $bias^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def XF_RMSNormOp : XF_Op<"rms_norm", [Pure, DeclareOpInterfaceMethods<XF_DifferentiableOpInterface, ["buildWithSavedStatistics"]>, AllTypesMatch<["input", "result"]>]> {
  let summary = "RMSNorm over the last dimension (Llama)";
  let description = [{
    `weight * x * rsqrt(mean(x^2) + eps)` over the last dim H, as Hugging
    Face `LlamaRMSNorm`; weight is [H]. The optional `weight_offset` c
    (absent: 0) scales by `(c + weight)` instead: Gemma's `(1 + w)`. In a
    training step the op also yields `stats` (f32 [rows]: each row's
    rsqrt), which its backward reads.
  }];
  let arguments = (ins XF_FloatTensor:$input, XF_FloatTensor:$weight, F64Attr:$eps,
                       OptionalAttr<F64Attr>:$weight_offset);
  let results = (outs XF_FloatTensor:$result, Optional<F32Tensor>:$stats);
  let assemblyFormat = "$input `,` $weight attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def XF_LinearOp : XF_Op<"linear", [Pure, DeclareOpInterfaceMethods<XF_DifferentiableOpInterface>]> {
  let summary = "y = x W (+ b) over the last dimension";
  let description = [{
    `input` [..., K]; `weight` [N, K] (`out_in`, torch nn.Linear) or [K, N]
    (`in_out`, GPT-2 Conv1D); optional `bias` [N]; result [..., N].

    ```mlir
    %y = xf.linear out_in %x, %w : (tensor<2x32x64xf32>, tensor<128x64xf32>) -> tensor<2x32x128xf32>
    %z = xf.linear in_out %x, %w2, %b : (tensor<2x32x64xf32>, tensor<64x192xf32>, tensor<192xf32>) -> tensor<2x32x192xf32>
    ```
  }];
  let arguments = (ins XF_WeightLayout:$layout, XF_FloatTensor:$input,
                       XF_FloatTensor:$weight, Optional<XF_FloatTensor>:$bias);
  let results = (outs XF_FloatTensor:$result);
  let assemblyFormat = [{
    $layout $input `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def XF_SplitOp : XF_Op<"split", [Pure, DeclareOpInterfaceMethods<XF_DifferentiableOpInterface>]> {
  let summary = "split the last dimension into consecutive pieces";
  let description = [{
    Splits `input` [..., D] into pieces [..., sizes[i]] with sum(sizes) = D,
    e.g. GPT-2's fused `c_attn` output into q, k and v.

    With `groups` G the last dimension is G groups laid side by side: the
    input [..., D] reads as [..., G, D / G] and piece i is [..., G, sizes[i] /
    G], flattened (GPT-NeoX's `query_key_value`: each head's q, k and v
    together). Tensor parallelism then splits the input in G / tp whole
    groups per rank, a plain block split.

    ```mlir
    %q, %k, %v = xf.split %qkv : tensor<2x32x192xf32> -> tensor<2x32x64xf32>, tensor<2x32x64xf32>, tensor<2x32x64xf32>
    %q, %k, %v = xf.split %qkv {groups = 4 : i64} : tensor<2x32x192xf32> -> tensor<2x32x64xf32>, tensor<2x32x64xf32>, tensor<2x32x64xf32>
    ```
  }];
  let arguments = (ins XF_FloatTensor:$input, OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<1>]>>:$groups);
  let results = (outs Variadic<XF_FloatTensor>:$results);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($results)";
  let hasVerifier = 1;
}

def XF_AttentionOp : XF_Op<"attention", [Pure, DeclareOpInterfaceMethods<XF_DifferentiableOpInterface, ["buildWithSavedStatistics"]>]> {
  let summary = "causal scaled-dot-product self-attention (MHA, GQA, MQA)";
  let description = [{
    q [B, S, num_heads*head_dim]; k, v [B, S, num_kv_heads*head_dim];
    num_heads % num_kv_heads == 0, and query head h reads kv head
    h / (num_heads / num_kv_heads) (Hugging Face `repeat_kv`). Scores are
    scaled by 1/sqrt(head_dim), masked causally, soft-maxed in f32. With
    `window` (Mistral's sliding window) query position i sees only keys j
    with i - window < j <= i. With `alibi_heads` (BLOOM's ALiBi) every
    score of query head h gets slope_h * (j - i) added, slope_h that of
    head h among alibi_heads heads as transformers' build_alibi_tensor
    defines it; alibi_heads is the model's head count, which tensor
    parallelism keeps while num_heads becomes the rank's (the partition
    then names the split axis in `xf.alibi_head_axis`). Result
    [B, S, num_heads*head_dim]. In a training step the op also
    yields `lse` (f32 [B, num_heads, S]: each score row's log-sum-exp), from
    which its backward recomputes the probabilities.
  }];
  let arguments = (ins XF_FloatTensor:$q, XF_FloatTensor:$k, XF_FloatTensor:$v,
                       I64Attr:$num_heads, I64Attr:$num_kv_heads, I64Attr:$head_dim,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<1>]>>:$window,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<1>]>>:$alibi_heads);
  let results = (outs XF_FloatTensor:$result, Optional<F32Tensor>:$lse);
  let assemblyFormat = "$q `,` $k `,` $v attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def XF_GeluTanhOp : XF_Op<"gelu_tanh", [Pure, DeclareOpInterfaceMethods<XF_DifferentiableOpInterface>, SameOperandsAndResultType, Elementwise]> {
  let summary = "GELU, tanh approximation (Hugging Face gelu_new)";
  let description = [{
    `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`, element-wise.
  }];
  let arguments = (ins XF_FloatTensor:$input);
  let results = (outs XF_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def XF_GeluErfOp : XF_Op<"gelu_erf", [Pure, DeclareOpInterfaceMethods<XF_DifferentiableOpInterface>, SameOperandsAndResultType, Elementwise]> {
  let summary = "GELU, exact (Hugging Face gelu, torch's approximate='none')";
  let description = [{
    `0.5 x (1 + erf(x / sqrt(2)))`, element-wise (GPT-NeoX and Pythia).
  }];
  let arguments = (ins XF_FloatTensor:$input);
  let results = (outs XF_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def XF_ClampOp : XF_Op<"clamp", [Pure, DeclareOpInterfaceMethods<XF_DifferentiableOpInterface>, SameOperandsAndResultType, Elementwise]> {
  let summary = "clamp to [-limit, limit] (OLMo's clip_qkv)";
  let description = [{
    `min(max(x, -limit), limit)`, element-wise; `limit` > 0.
  }];
  let arguments = (ins XF_FloatTensor:$input, F64Attr:$limit);
  let results = (outs XF_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def XF_ReluOp : XF_Op<"relu", [Pure, DeclareOpInterfaceMethods<XF_DifferentiableOpInterface>, SameOperandsAndResultType, Elementwise]> {
  let summary = "ReLU (OPT's MLP)";
  let description = [{
    `max(x, 0)`, element-wise (a NaN passes, as torch.relu).
  }];
  let arguments = (ins XF_FloatTensor:$input);
  let results = (outs XF_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def XF_ScaleOp : XF_Op<"scale", [Pure, DeclareOpInterfaceMethods<XF_DifferentiableOpInterface>, SameOperandsAndResultType, Elementwise]> {
  let summary = "multiply by a constant (Cohere's logit_scale)";
  let description = [{
    `x * factor`, element-wise; `factor` finite and non-zero as fp32. Its
    gradient is itself: `dx = dy * factor`.
  }];
  let arguments = (ins XF_FloatTensor:$input, F64Attr:$factor);
  let results = (outs XF_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def XF_SwiGLUOp : XF_Op<"swiglu", [Pure, DeclareOpInterfaceMethods<XF_DifferentiableOpInterface>, SameOperandsAndResultType, Elementwise]> {
  let summary = "gated MLP activation: act(gate) * up (SwiGLU; GeGLU)";
  let description = [{
    `act(gate) * up` element-wise. `activation` absent or "silu": SwiGLU
    (Llama), `silu(x) = x sigmoid(x)`; "gelu_tanh": GeGLU (Gemma) with the
    tanh GELU of xf.gelu_tanh.
  }];
  let arguments = (ins XF_FloatTensor:$gate, XF_FloatTensor:$up, OptionalAttr<StrAttr>:$activation);
  let results = (outs XF_FloatTensor:$result);
  let assemblyFormat = "$gate `,` $up attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def XF_AddOp : XF_Op<"add", [Pure, DeclareOpInterfaceMethods<XF_DifferentiableOpInterface>, Commutative, SameOperandsAndResultType, Elementwise]> {
  let summary = "element-wise addition (the residual connection)";
  let description = [{ `lhs + rhs`, both of the result's type. }];
  let arguments = (ins XF_FloatTensor:$lhs, XF_FloatTensor:$rhs);
  let results = (outs XF_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//

def XF_MoeRouteOp : XF_Op<"moe_route", [Pure, DeclareOpInterfaceMethods<XF_DifferentiableOpInterface>]> {
  let summary = "mixture-of-experts routing: softmax, top-k";
  let description = [{
    `logits` [B, S, E] (the router's output) -> `experts` [B, S, top_k]
    (i32: each token's top_k experts by softmax probability, descending,
    ties to the lower index) and `weights` [B, S, top_k] (their
    probabilities, divided by their sum when `normalize`: Mixtral; Qwen2-MoE's
    norm_topk_prob). The softmax is computed in f32, as Hugging Face does.
    The load-balancing loss reads the router through xf.moe_router_stats.

    ```mlir
    %w, %e = xf.moe_route %logits {top_k = 2 : i64, normalize} : tensor<2x32x8xf32> -> tensor<2x32x2xf32>, tensor<2x32x2xi32>
    ```
  }];
  let arguments = (ins XF_FloatTensor:$logits, ConfinedAttr<I64Attr, [IntMinValue<1>]>:$top_k,
                       UnitAttr:$normalize);
  let results = (outs XF_FloatTensor:$weights, I32Tensor:$experts);
  let assemblyFormat = "$logits attr-dict `:` type($logits) `->` type($weights) `,` type($experts)";
  let hasVerifier = 1;
}

def XF_MoeRouterStatsOp : XF_Op<"moe_router_stats", [Pure, DeclareOpInterfaceMethods<XF_DifferentiableOpInterface>,
                                                      AllTypesMatch<["counts", "counts_out"]>,
                                                      AllTypesMatch<["probs", "probs_out"]>]> {
  let summary = "a router's load-balancing statistics, added to the layers' before it";
  let description = [{
    `logits` [B, S, E] and `experts` [B, S, k] of one xf.moe_route; `counts`
    [E] (i32) and `probs` [E] (f32) the statistics of the routers before it
    (xf.zeros before the first) -> `counts_out[e] = counts[e] +` the
    assignments to expert e, `probs_out[e] = probs[e] + Σ_t softmax(logits[t])[e]`
    (f32). The layers pass them on like the residual stream, so a pipeline
    stage sends them with its activations, and xf.moe_aux_loss reads the
    last layer's: transformers' load_balancing_loss_func over every router
    of the microbatch. The counts carry no gradient; `probs`' is `probs_out`'s.

    ```mlir
    %c1, %s1 = xf.moe_router_stats %logits, %experts, %c0, %s0 : tensor<2x32x8xf32>, tensor<2x32x2xi32>, tensor<8xi32>, tensor<8xf32>
    ```
  }];
  let arguments = (ins XF_FloatTensor:$logits, I32Tensor:$experts, I32Tensor:$counts, F32Tensor:$probs);
  let results = (outs I32Tensor:$counts_out, F32Tensor:$probs_out);
  let assemblyFormat = "$logits `,` $experts `,` $counts `,` $probs attr-dict `:` type($logits) `,` type($experts) "
                       "`,` type($counts) `,` type($probs)";
  let hasVerifier = 1;
}

def XF_MoeAuxLossOp : XF_Op<"moe_aux_loss", [Pure, AllTypesMatch<["loss", "result"]>]> {
  let summary = "the step's loss plus the load-balancing loss";
  let description = [{
    `loss` (the cross-entropy), `counts` [E] and `probs` [E] (the last
    xf.moe_router_stats': every router's of the microbatch) ->
    `loss + coef · E / (L·T)² · Σ_e counts[e]·probs[e]`, L·T the tokens of
    all L routers: `Σ_e counts[e] / top_k` (each token counts top_k
    assignments), so nothing here changes when a partition changes the
    tokens. transformers adds router_aux_loss_coef times this
    (load_balancing_loss_func) when output_router_logits is set.
    llcdist-autodiff differentiates it: the loss's gradient is the seed, the
    probabilities' xf.moe_aux_loss_grad.

    ```mlir
    %total = xf.moe_aux_loss %ce, %counts, %probs {coef = 2.0e-02 : f64, top_k = 2 : i64} : tensor<f32>, tensor<8xi32>, tensor<8xf32>
    ```
  }];
  let arguments = (ins 0DTensorOf<[F32]>:$loss, I32Tensor:$counts, F32Tensor:$probs, F64Attr:$coef,
                       ConfinedAttr<I64Attr, [IntMinValue<1>]>:$top_k);
  let results = (outs 0DTensorOf<[F32]>:$result);
  let assemblyFormat = "$loss `,` $counts `,` $probs attr-dict `:` type($loss) `,` type($counts) `,` type($probs)";
  let hasVerifier = 1;
}

def XF_ZerosOp : XF_Op<"zeros", [Pure, DeclareOpInterfaceMethods<XF_DifferentiableOpInterface>]> {
  let summary = "a tensor of zeros (the load-balancing statistics before the first router)";
  let description = [{
    ```mlir
    %c0 = xf.zeros : tensor<8xi32>
    ```
  }];
  let results = (outs AnyTypeOf<[XF_FloatTensor, I32Tensor]>:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def XF_MoePermuteOp : XF_Op<"moe_permute", [Pure, DeclareOpInterfaceMethods<XF_DifferentiableOpInterface>]> {
  let summary = "copy each token's rows to its experts, grouped by expert";
  let description = [{
    `input` [B, S, H], `experts` [B, S, k] -> `result` [B·S·k, H]: the
    assignments (token t, its j-th expert) in expert-major order (by expert,
    then t, then j), each row a copy of token t; `slots` [B, S, k] (i32) the
    row of each assignment; `group_sizes` [E] (i32) the rows of each expert,
    E given by its type. The expert FFNs read the groups with
    xf.grouped_linear; xf.moe_unpermute brings them back.

    With `capacity` C (--moe-capacity-factor; absent: dropless) each expert
    keeps the first C of its assignments in that order (the token-order
    drop policy) and the rest are dropped: slot -1, no row, no contribution
    to the token's output. `result` is then [n·E·C, H] (n blocks of E·C
    rows, one per data-parallel rank: llcdist-partition leaves one), the
    kept rows packed from row 0 and the rest zero.
  }];
  let arguments = (ins XF_FloatTensor:$input, I32Tensor:$experts, OptionalAttr<I64Attr>:$capacity);
  let results = (outs XF_FloatTensor:$result, I32Tensor:$slots, I32Tensor:$group_sizes);
  let assemblyFormat = "$input `,` $experts attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def XF_MoeUnpermuteOp : XF_Op<"moe_unpermute", [Pure, DeclareOpInterfaceMethods<XF_DifferentiableOpInterface>]> {
  let summary = "sum each token's expert rows, weighted";
  let description = [{
    `input` [N, H] (N = B·S·k, xf.moe_permute's order), `slots` [B, S, k],
    optional `weights` [B, S, k] -> `result` [B, S, H] with
    `result[t] = sum_j weights[t, j] · input[slots[t, j]]` (weights absent:
    1; the backward of xf.moe_permute).
  }];
  let arguments = (ins XF_FloatTensor:$input, I32Tensor:$slots, Optional<XF_FloatTensor>:$weights);
  let results = (outs XF_FloatTensor:$result);
  let assemblyFormat = "$input `,` $slots (`,` $weights^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def XF_GroupedLinearOp : XF_Op<"grouped_linear", [Pure, DeclareOpInterfaceMethods<XF_DifferentiableOpInterface>]> {
  let summary = "one linear per expert over consecutive row groups (grouped GEMM)";
  let description = [{
    `input` [N, K], `weight` [E, O, K] (expert e's nn.Linear weight,
    out_in), `group_sizes` [E] (i32) -> `result` [N, O]: the rows of group e
    (after the rows of groups 0..e-1) times weight[e]ᵀ; rows past the sum of
    the sizes are zero.
  }];
  let arguments = (ins XF_FloatTensor:$input, XF_FloatTensor:$weight, I32Tensor:$group_sizes);
  let results = (outs XF_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weight `,` $group_sizes attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def XF_SigmoidGateOp : XF_Op<"sigmoid_gate", [Pure, DeclareOpInterfaceMethods<XF_DifferentiableOpInterface>]> {
  let summary = "sigmoid(gate) · input (Qwen2-MoE's shared-expert gate)";
  let description = [{
    `gate` [B, S, 1], `input` [B, S, H] -> `sigmoid(gate) * input`, the gate
    broadcast over H.
  }];
  let arguments = (ins XF_FloatTensor:$gate, XF_FloatTensor:$input);
  let results = (outs XF_FloatTensor:$result);
  let assemblyFormat = "$gate `,` $input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

def XF_CrossEntropyOp : XF_Op<"cross_entropy", [Pure]> {
  let summary = "mean token cross-entropy loss";
  let description = [{
    `mean over (b, s) of -log softmax(logits[b, s, :])[targets[b, s]]`;
    logits [B, S, V], targets [B, S]; the result is a 0-d f32 tensor.
    With `real_vocab` (set by llcdist-pad-vocab) only the first `real_vocab`
    columns (global vocabulary ids) are the vocabulary: the padding columns
    after them are outside the softmax and get zero gradient.

    ```mlir
    %loss = xf.cross_entropy %logits, %targets : (tensor<2x32x256xf32>, tensor<2x32xi32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins XF_FloatTensor:$logits, XF_IdTensor:$targets,
                       OptionalAttr<I64Attr>:$real_vocab);
  let results = (outs 0DTensorOf<[F32]>:$loss);
  let assemblyFormat = "$logits `,` $targets attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

include "llcdist/Dialect/XF/IR/XFTrainingOps.td"

#endif // LLCDIST_DIALECT_XF_XFOPS_TD
