// Private: the CPU kernel families' registrations into the CPU backend's kernel table (CpuBackend.h).
// Each src/kernels/<Family>.cpp holds its kernels and, at its end, the entries that adapt a
// KernelCall with the family's parameters (OpParams.h) to them; src/cpu/CpuKernelTable.cpp calls
// every registration once.
#pragma once

#include "llcdist/runtime/CpuBackend.h"

namespace llcdist::rt {

void registerCpuLayoutKernels(CpuKernelTable& table);       // Layout.cpp: zero, split_*, shard_slice
void registerCpuElementwiseKernels(CpuKernelTable& table);  // Activation.cpp: gelu, swiglu, add, accumulate, copy, cast
void registerCpuEmbeddingKernels(CpuKernelTable& table);    // Embedding.cpp: embedding_*, pos_embedding_*
void registerCpuNormKernels(CpuKernelTable& table);         // Norm.cpp: layer_norm_*, rms_norm_*
void registerCpuLinearKernels(CpuKernelTable& table);       // Linear.cpp: linear_*, bias_add
void registerCpuRopeKernels(CpuKernelTable& table);         // Rope.cpp: rope_*
void registerCpuAttentionKernels(CpuKernelTable& table);    // Attention.cpp: attention_*
void registerCpuAttentionBlockKernels(CpuKernelTable& table);  // AttentionBlock.cpp: ring attention
void registerCpuLossKernels(CpuKernelTable& table);         // Loss.cpp: cross_entropy_*
void registerCpuOptimizerKernels(CpuKernelTable& table);    // Optimizer.cpp: grad_norm, adamw, sgd
void registerCpuMoeKernels(CpuKernelTable& table);          // Moe.cpp: moe_*, grouped_linear_*, sigmoid_gate_*

}  // namespace llcdist::rt
