// RUN: llc-dist compile --emit xf %models/tiny-gpt2.json --mesh tp=2 --seq-len 8 --quiet | llc-dist-opt --llcdist-autodiff --llcdist-add-optimizer --llcdist-megatron-tp --llcdist-partition="sequence-parallel=true" | FileCheck %s
// RUN: llc-dist compile --emit xf %models/tiny-gpt2.json --mesh tp=2 --seq-len 8 --quiet | not llc-dist-opt --llcdist-autodiff --llcdist-add-optimizer --llcdist-megatron-tp --llcdist-tp-replicate-embeddings --llcdist-partition="sequence-parallel=true" 2>&1 | FileCheck %s --check-prefix=REPL
// RUN: llc-dist compile --emit xf %models/tiny-gpt2.json --seq-len 8 --quiet | not llc-dist-opt --llcdist-autodiff --llcdist-add-optimizer --llcdist-partition="sequence-parallel=true" 2>&1 | FileCheck %s --check-prefix=NOTP

// Megatron's sequence parallelism (Korthikanti et al.), tp = 2, sequence 8:
// the residual stream, norms and biases hold 4 positions per rank; an
// all-gather brings the whole sequence to each column-parallel linear, a
// reduce-scatter replaces each row-parallel all-reduce.
// CHECK-LABEL: func.func private @gpt2_block(%arg0: tensor<1x4x64xf32>)
// CHECK: %[[LN:.+]], %{{.+}} = xf.layer_norm %arg0, {{.+}} -> (tensor<1x4x64xf32>, tensor<2x4xf32>)
// CHECK-NEXT: %[[ALL:.+]] = xf.all_gather %[[LN]] {axis = "tp", dim = 1 : i64, origin = "sequence_parallel", reason = "sequence parallelism: this op needs the whole sequence of a sequence-split activation"} : (tensor<1x4x64xf32>) -> tensor<1x8x64xf32>
// CHECK: xf.linear in_out %[[ALL]], {{.+}} -> tensor<1x8x96xf32>
// CHECK: %[[P:.+]] = xf.linear in_out {{.+}} : (tensor<1x8x32xf32>, tensor<32x64xf32>) -> tensor<1x8x64xf32>
// CHECK-NEXT: %[[RS:.+]] = xf.reduce_scatter %[[P]] {axis = "tp", dim = 1 : i64, origin = "row_parallel", reason = "a row-parallel linear's output is a partial sum over tp; sequence parallelism keeps the sum's slice of the sequence"} : (tensor<1x8x64xf32>) -> tensor<1x4x64xf32>
// CHECK-NEXT: xf.bias_add %[[RS]], {{.+}} -> tensor<1x4x64xf32>
// CHECK-LABEL: func.func @train_step
// The vocab-parallel lookup is reduce-scattered; the positions are this
// rank's slice of the sequence.
// CHECK: %[[E:.+]] = xf.embedding {{.+}} {xf.vocab_parallel_axis = "tp"}
// CHECK-NEXT: %[[ES:.+]] = xf.reduce_scatter %[[E]] {{.+}} -> tensor<1x4x64xf32>
// CHECK: xf.add_position_embedding %[[ES]], %{{.+}} {xf.seq_parallel_axis = "tp"} : (tensor<1x4x64xf32>, tensor<64x64xf32>) -> tensor<1x4x64xf32>
// Norm weights and row-parallel biases saw only this rank's tokens: their
// gradients are all-reduced over tp once per step.
// CHECK-LABEL: func.func @optimizer_step
// CHECK-NEXT: xf.all_reduce_grads {axis = "tp", origin = "sequence_parallel", params = ["transformer.h.{i}.attn.c_proj.bias", "transformer.h.{i}.ln_1.bias", "transformer.h.{i}.ln_1.weight", "transformer.h.{i}.ln_2.bias", "transformer.h.{i}.ln_2.weight", "transformer.h.{i}.mlp.c_proj.bias", "transformer.ln_f.bias", "transformer.ln_f.weight", "transformer.wpe.weight"], reason = "sequence parallelism: these parameters act on each rank's slice of the sequence, so their gradients are partial sums over tp", reduction = "sum"}

// REPL: error: llcdist-partition: sequence parallelism needs the vocabulary-parallel embedding
// NOTP: error: llcdist-partition: sequence parallelism splits the tensor-parallel region's sequence over tp; it needs tp > 1
