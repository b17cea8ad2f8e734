// RUN: llc-dist compile --emit xf %models/tiny-llama.json --mesh tp=2 --seq-len 8 --quiet | llc-dist-opt --llcdist-autodiff --llcdist-add-optimizer --llcdist-megatron-tp --llcdist-partition | FileCheck %s --check-prefix=LLAMA
// RUN: llc-dist compile --emit xf %models/tiny-gpt2.json --mesh tp=2 --seq-len 8 --quiet | llc-dist-opt --llcdist-autodiff --llcdist-add-optimizer --llcdist-megatron-tp --llcdist-partition | FileCheck %s --check-prefix=GPT2
// RUN: llc-dist compile --emit xf %models/tiny-llama.json --mesh tp=8 --seq-len 8 --quiet | llc-dist-opt --llcdist-autodiff --llcdist-add-optimizer --llcdist-megatron-tp --llcdist-partition | FileCheck %s --check-prefix=GQA
// RUN: llc-dist compile --emit xf %models/tiny-gpt-neox.json --mesh tp=2 --seq-len 8 --quiet | llc-dist-opt --llcdist-autodiff --llcdist-add-optimizer --llcdist-megatron-tp --llcdist-partition | FileCheck %s --check-prefix=NEOX
// RUN: llc-dist compile --emit xf %models/tiny-bloom.json --mesh tp=4 --seq-len 8 --quiet | llc-dist-opt --llcdist-autodiff --llcdist-add-optimizer --llcdist-megatron-tp --llcdist-partition | FileCheck %s --check-prefix=BLOOM

// Megatron tensor parallelism, tp = 2, on tiny Llama (8 heads, 4 kv heads,
// hidden 64, intermediate 128, vocab 256).

// Attention: q, k, v column-parallel (split on their output features: the
// heads), o_proj row-parallel, one all-reduce of its output; each rank runs
// 4 query heads and 2 kv heads (GQA kept).
// LLAMA-LABEL: func.func private @llama_decoder_layer(
// LLAMA: xf.param "model.layers.{i}.self_attn.q_proj.weight" {xf.sharding = {axis = "tp", blocks = 1 : i64, dim = 0 : i64, global_shape = array<i64: 64, 64>}} : tensor<32x64xf32>
// LLAMA: xf.param "model.layers.{i}.self_attn.k_proj.weight" {xf.sharding = {axis = "tp", blocks = 1 : i64, dim = 0 : i64, global_shape = array<i64: 32, 64>}} : tensor<16x64xf32>
// LLAMA: xf.attention {{.+}} {head_dim = 8 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<1x8x32xf32>, tensor<1x8x16xf32>, tensor<1x8x16xf32>)
// LLAMA: xf.param "model.layers.{i}.self_attn.o_proj.weight" {xf.sharding = {axis = "tp", blocks = 1 : i64, dim = 1 : i64, global_shape = array<i64: 64, 64>}} : tensor<64x32xf32>
// LLAMA: %[[O:.+]] = xf.linear out_in %{{.+}}, %{{.+}} : (tensor<1x8x32xf32>, tensor<64x32xf32>) -> tensor<1x8x64xf32>
// LLAMA-NEXT: %[[OR:.+]] = xf.all_reduce %[[O]] {axis = "tp", origin = "row_parallel", reason = "a row-parallel linear's output is a partial sum over tp"}
// LLAMA-NEXT: xf.add %arg0, %[[OR]]
// The MLP: gate and up column-parallel, down row-parallel, one all-reduce.
// LLAMA: xf.param "model.layers.{i}.mlp.gate_proj.weight" {{.+}} : tensor<64x64xf32>
// LLAMA: xf.swiglu {{.+}} : tensor<1x8x64xf32>
// LLAMA: xf.param "model.layers.{i}.mlp.down_proj.weight" {xf.sharding = {axis = "tp", blocks = 1 : i64, dim = 1 : i64, global_shape = array<i64: 64, 128>}} : tensor<64x64xf32>
// LLAMA: xf.all_reduce
// LLAMA-NOT: xf.all_reduce
// LLAMA: return
// Backward: the input gradients of q, k and v (and of gate and up) are summed
// while still partial, then all-reduced once before the norm's backward.
// LLAMA-LABEL: func.func private @llama_decoder_layer_bwd(
// LLAMA: %[[DU:.+]] = xf.linear_grad_input out_in %dup, {{.+}} -> tensor<1x8x64xf32>
// LLAMA: %[[DG:.+]] = xf.linear_grad_input out_in %dgate, {{.+}} -> tensor<1x8x64xf32>
// LLAMA-NEXT: %[[SUM:.+]] = xf.add %[[DU]], %[[DG]]
// LLAMA-NEXT: %[[RED:.+]] = xf.all_reduce %[[SUM]] {axis = "tp", origin = "column_parallel", reason = "a column-parallel linear's input gradient is a partial sum over tp"}
// LLAMA: xf.rms_norm_grad_input %[[RED]]
// LLAMA: xf.attention_grad {{.+}} {head_dim = 8 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64}
// LLAMA-COUNT-3: xf.linear_grad_input out_in
// LLAMA: %[[QKV:.+]] = xf.add
// LLAMA-NEXT: xf.all_reduce %[[QKV]]
// LLAMA-NOT: xf.all_reduce
// LLAMA: return
// The vocabulary-parallel embedding (a masked lookup, then an all-reduce) and
// the vocabulary-parallel loss: the LM head is split on the vocabulary and
// the full logits are never gathered.
// LLAMA-LABEL: func.func @train_step
// LLAMA: xf.param "model.embed_tokens.weight" {xf.sharding = {axis = "tp", blocks = 1 : i64, dim = 0 : i64, global_shape = array<i64: 256, 64>}} : tensor<128x64xf32>
// LLAMA-NEXT: %[[E:.+]] = xf.embedding %{{.+}}, %{{.+}} {xf.vocab_parallel_axis = "tp"}
// LLAMA-NEXT: xf.all_reduce %[[E]] {axis = "tp", origin = "vocab_parallel_embedding", reason = "a vocabulary-parallel embedding lookup is a partial sum over tp (each rank holds a slice of the vocabulary)"}
// LLAMA: xf.param "lm_head.weight" {xf.sharding = {axis = "tp", blocks = 1 : i64, dim = 0 : i64, global_shape = array<i64: 256, 64>}} : tensor<128x64xf32>
// LLAMA: %[[LOGITS:.+]] = xf.linear out_in {{.+}} -> tensor<1x8x128xf32>
// LLAMA-NEXT: xf.cross_entropy %[[LOGITS]], %{{.+}} {xf.vocab_parallel_axis = "tp"}
// LLAMA-NEXT: xf.cross_entropy_grad %[[LOGITS]], %{{.+}} {scale = 1.250000e-01 : f64, xf.vocab_parallel_axis = "tp"}

// GPT-2: the fused c_attn is split per q|k|v block (blocks = 3), its bias
// too; the row-parallel c_proj adds its bias once, after the all-reduce.
// GPT2: xf.param "transformer.h.{i}.attn.c_attn.weight" {xf.sharding = {axis = "tp", blocks = 3 : i64, dim = 1 : i64, global_shape = array<i64: 64, 192>}} : tensor<64x96xf32>
// GPT2: xf.param "transformer.h.{i}.attn.c_attn.bias" {xf.sharding = {axis = "tp", blocks = 3 : i64, dim = 0 : i64, global_shape = array<i64: 192>}} : tensor<96xf32>
// GPT2: xf.split {{.+}} : tensor<1x8x96xf32> -> tensor<1x8x32xf32>, tensor<1x8x32xf32>, tensor<1x8x32xf32>
// GPT2: xf.param "transformer.h.{i}.attn.c_proj.bias" : tensor<64xf32>
// GPT2: %[[P:.+]] = xf.linear in_out %{{.+}}, %{{.+}} : (tensor<1x8x32xf32>, tensor<32x64xf32>) -> tensor<1x8x64xf32>
// GPT2-NEXT: %[[PR:.+]] = xf.all_reduce %[[P]]
// GPT2-NEXT: xf.bias_add %[[PR]], %{{.+}} : (tensor<1x8x64xf32>, tensor<64xf32>) -> tensor<1x8x64xf32>

// Grouped-query attention with tp > kv heads (tp = 8, 4 kv heads): each kv
// head is replicated on the 2 ranks whose query heads use it; each rank runs
// 1 query head and 1 kv head, and the k/v gradients are summed over those
// sub-groups of 2 once per step.
// GQA-LABEL: func.func private @llama_decoder_layer(
// GQA: xf.param "model.layers.{i}.self_attn.k_proj.weight" {xf.sharding = {axis = "tp", blocks = 1 : i64, dim = 0 : i64, global_shape = array<i64: 32, 64>, replicas = 2 : i64}} : tensor<8x64xf32>
// GQA: xf.param "model.layers.{i}.self_attn.v_proj.weight" {xf.sharding = {axis = "tp", blocks = 1 : i64, dim = 0 : i64, global_shape = array<i64: 32, 64>, replicas = 2 : i64}} : tensor<8x64xf32>
// GQA: xf.attention {{.+}} {head_dim = 8 : i64, num_heads = 1 : i64, num_kv_heads = 1 : i64} : (tensor<1x8x8xf32>, tensor<1x8x8xf32>, tensor<1x8x8xf32>)
// GQA-LABEL: func.func private @llama_decoder_layer_bwd(
// GQA: xf.attention_grad {{.+}} {head_dim = 8 : i64, num_heads = 1 : i64, num_kv_heads = 1 : i64}
// GQA-LABEL: func.func @optimizer_step
// GQA: xf.all_reduce_grads {axis = "tp", group_size = 2 : i64, origin = "kv_replica", params = ["model.layers.{i}.self_attn.k_proj.weight", "model.layers.{i}.self_attn.v_proj.weight"], reason = "kv-head replication: {{.+}}", reduction = "sum"}

// GPT-NeoX: query_key_value holds each head's q, k and v side by side, so a
// plain block of its rows (blocks = 1) is whole heads; the split in `heads`
// groups keeps heads / tp of them per rank, and so does its backward concat.
// NEOX: xf.param "gpt_neox.layers.{i}.attention.query_key_value.weight" {xf.sharding = {axis = "tp", blocks = 1 : i64, dim = 0 : i64, global_shape = array<i64: 192, 64>}} : tensor<96x64xf32>
// NEOX: xf.param "gpt_neox.layers.{i}.attention.query_key_value.bias" {xf.sharding = {axis = "tp", blocks = 1 : i64, dim = 0 : i64, global_shape = array<i64: 192>}} : tensor<96xf32>
// NEOX: xf.split %{{.+}} {groups = 2 : i64} : tensor<1x8x96xf32> -> tensor<1x8x32xf32>, tensor<1x8x32xf32>, tensor<1x8x32xf32>
// NEOX: xf.attention {{.+}} {head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64}
// NEOX: xf.gelu_erf %{{.+}} : tensor<1x8x128xf32>
// NEOX: xf.concat %{{.+}}, %{{.+}}, %{{.+}} {groups = 2 : i64} : (tensor<1x8x32xf32>, tensor<1x8x32xf32>, tensor<1x8x32xf32>) -> tensor<1x8x96xf32>

// On tiny BLOOM, ALiBi's slopes are the model's 12 heads'; each of the 4 tp ranks
// holds 3 of them, and the partition names the axis that split them, so rank
// c adds the slopes of heads [3c, 3c + 3) (forward, backward).
// BLOOM-LABEL: func.func private @bloom_block(
// BLOOM: xf.attention {{.+}} {alibi_heads = 12 : i64, head_dim = 8 : i64, num_heads = 3 : i64, num_kv_heads = 3 : i64, xf.alibi_head_axis = "tp"}
// BLOOM-LABEL: func.func private @bloom_block_bwd(
// BLOOM: xf.attention_grad {{.+}} {alibi_heads = 12 : i64, head_dim = 8 : i64, num_heads = 3 : i64, num_kv_heads = 3 : i64, xf.alibi_head_axis = "tp"}
