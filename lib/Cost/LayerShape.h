//===- LayerShape.h - what one layer of the step model is made of --*- C++ -*-===//
//
// StepModel.cpp's per-layer inputs, apart: one layer's shapes on a tp rank,
// its experts' rows, a mixed model's mean layer, what full recomputation
// skips, and the parameters one rank holds.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_LIB_COST_LAYERSHAPE_H
#define LLCDIST_LIB_COST_LAYERSHAPE_H

#include "llcdist/Cost/StepModel.h"

#include <cstdint>

namespace llcdist::cost::detail {

/// The per-layer shapes on one tp rank.
struct LayerShape {
  int64_t h, q, kv, inter, nh, nkv, hd;
  bool llama;
};

/// The rows of a mixture-of-experts layer's experts per token of the rank
/// (T = micro-batch × seq-len tokens). `held`: what the experts' side's
/// static buffers hold (ExpertParallel.cpp): dropless, T·k without ep and
/// the worst case C = ep·T·min(k, E/ep) under ep; with a capacity factor
/// (moeExpertCapacity's C_e rows per expert) E·C_e without ep and at most
/// that under ep. `active`: what the experts compute under uniform routing
/// (T·k/E rows an expert): T·k, or E·C_e where the capacity drops tokens.
/// Under sequence parallelism the experts run on the tp rank's own 1/tp of
/// the tokens (TensorParallelPropagation::expertsOnSequenceSlice), else
/// whole on every tp rank.
struct ExpertRows {
  double held, active;
};

ExpertRows expertRowsPerToken(const Workload &w, const ParallelConfig &c);

/// A mixture of experts with dense layers (Qwen2-MoE's decoder_sparse_step,
/// mlp_only_layers) is priced as its mean layer: f = sparse layers / layers
/// of a sparse layer's compute, activations, parameters and ep traffic and
/// 1 − f of a dense layer's (exact for the totals over the layers; a stage's
/// model state and stashed activations count its own sparse and dense
/// layers: ParamCounts::layerOn(ep, sparse), estimateMemory). `sparse` where
/// every layer is sparse.
bool mixedLayers(const ModelConfig &m);
double meanLayer(const ModelConfig &m, double sparse, double dense);
int64_t meanLayerWidth(const ModelConfig &m, int64_t sparse, int64_t dense);

/// The MLP width whose activations a rank holds per token: the layer's
/// (LayerShape::inter), a mixture of experts' by the rows its experts'
/// side holds.
/// `largest`: the widest layer's (a mixed model's sparse or dense one) instead of the mean layer's.
double activationInter(const Workload &w, const ParallelConfig &c, const LayerShape &s, const ExpertRows &rows,
                       bool largest = false);
/// A sparse layer's: its experts' rows times their width, and the shared
/// expert's (split over tp).
double sparseActivationInter(const Workload &w, const ParallelConfig &c, const ExpertRows &rows);
/// Bytes a sparse layer stashes per token beyond a dense layer's (at
/// `b` bytes an element): the router's logits, top-k weights and routes,
/// the experts' input and output rows, the shared expert's output and gate.
double moeStashPerToken(const Workload &w, const ParallelConfig &c, const ExpertRows &rows, double b);

/// What a fully recomputed layer leaves out (opsForUsedResults: it runs what
/// its backward reads): the projections only the residual stream reads (the
/// MLP's down projection, Phi's attention output projection too) with their
/// tp reductions, and its last add. A mixture of experts' combine reads the
/// experts' outputs: they run again. Nothing under
/// Workload::Recomputation::Whole (Megatron's).
struct RecomputeSkip {
  bool mlpOut = false, attnOut = false, lastAdd = false;
  /// The skipped projections' multiply-adds per token of `s`'s layer.
  double macs(const LayerShape &s) const {
    return (mlpOut ? double(s.h) * double(s.inter) : 0) + (attnOut ? double(s.h) * double(s.q) : 0);
  }
  /// Their tp reductions (all-reduces, reduce-scatters under SP).
  int64_t reductions() const { return int64_t(mlpOut) + int64_t(attnOut); }
};

RecomputeSkip recomputeSkip(const Workload &w);

LayerShape layerShape(const ModelConfig &m, int64_t tp);
/// A sparse layer's MLP columns per token on a tp rank: top_k experts whole
/// and Qwen2-MoE's shared expert split over tp (a model with experts only).
int64_t sparseMlpWidth(const ModelConfig &m, int64_t tp);

/// Parameters one rank holds (element counts, before ZeRO): per layer, the
/// token embedding (a vocabulary shard under tp), what the first stage holds
/// beside it, the final norm and an untied LM head.
struct ParamCounts {
  /// `layer`: a mixed model's mean layer (Qwen2-MoE's decoder_sparse_step,
  /// mlp_only_layers), else the layer. `embeddingExtras`: GPT-2's position
  /// table, BLOOM's word_embeddings_layernorm (the first stage's, beside
  /// the embedding).
  double layer = 0, vocabMatrix = 0, embeddingExtras = 0, finalNorm = 0;
  /// A sparse layer's and a dense layer's parameters (a model without dense
  /// layers, or without experts, has `layer` in both).
  double sparseLayer = 0, denseLayer = 0;
  /// Of a sparse layer: the stacked experts' weights (the part ep splits).
  double experts = 0;
  /// A layer's largest tensor but the experts' (a projection or the MLP's
  /// dense weight), and the experts' stacked projection ([E, I, H], whole
  /// on every tp rank; ep holds E/ep of it).
  double largestTensor = 0, expertTensor = 0;
  bool tied = true;
  /// A sparse (or a dense) layer's parameters on a rank of an ep group.
  double layerOn(int64_t ep, bool sparse) const {
    const double l = sparse ? sparseLayer : denseLayer, e = sparse ? experts : 0;
    return ep > 1 ? l - e + e / double(ep) : l;
  }
};

ParamCounts paramCounts(const Workload &w, int64_t tp);

} // namespace llcdist::cost::detail

#endif // LLCDIST_LIB_COST_LAYERSHAPE_H
