//===- LayerShape.cpp - what one layer of the step model is made of -------===//
#include "LayerShape.h"

#include "llcdist/Frontend/ModelConfig.h"

#include <algorithm>
#include <cmath>

using namespace llcdist;
using namespace llcdist::cost;

namespace llcdist::cost::detail {

ExpertRows expertRowsPerToken(const Workload &w, const ParallelConfig &c) {
  if (!w.model.moe)
    return {0, 0}; // a dense model
  const MoeConfig &e = *w.model.moe;
  const double k = double(e.topK), E = double(e.experts);
  ExpertRows r{c.ep > 1 ? double(c.ep) * std::min(k, E / double(c.ep)) : k, k};
  TrainingShape shape;
  shape.seqLen = w.seqLen;
  shape.microBatch = c.microBatch;
  shape.moeCapacityFactor = w.moeCapacityFactor;
  if (const int64_t ce = moeExpertCapacity(w.model, shape)) {
    const double capped = E * double(ce) / (double(c.microBatch) * double(w.seqLen));
    r.held = c.ep > 1 ? std::min(r.held, capped) : capped;
    r.active = std::min(r.active, capped);
  }
  if (c.sequenceParallel) {
    r.held /= double(c.tp);
    r.active /= double(c.tp);
  }
  return r;
}

bool mixedLayers(const ModelConfig &m) { return m.moe && m.sparseLayers() < m.layers; }

double meanLayer(const ModelConfig &m, double sparse, double dense) {
  if (!mixedLayers(m))
    return sparse;
  const double f = double(m.sparseLayers()) / double(m.layers);
  return f * sparse + (1 - f) * dense;
}

int64_t meanLayerWidth(const ModelConfig &m, int64_t sparse, int64_t dense) {
  return mixedLayers(m) ? int64_t(std::llround(meanLayer(m, double(sparse), double(dense)))) : sparse;
}

double sparseActivationInter(const Workload &w, const ParallelConfig &c, const ExpertRows &rows) {
  const MoeConfig &e = *w.model.moe;
  return rows.held * double(e.intermediate) + double(e.sharedIntermediate / c.tp);
}

double activationInter(const Workload &w, const ParallelConfig &c, const LayerShape &s, const ExpertRows &rows,
                       bool largest) {
  const ModelConfig &m = w.model;
  if (!m.moe)
    return double(s.inter);
  const double sparse = sparseActivationInter(w, c, rows), dense = double(m.intermediate / c.tp);
  return largest && mixedLayers(m) ? std::max(sparse, dense) : meanLayer(m, sparse, dense);
}

double moeStashPerToken(const Workload &w, const ParallelConfig &c, const ExpertRows &rows, double b) {
  const MoeConfig &e = *w.model.moe;
  const double H = double(w.model.hidden), E = double(e.experts), k = double(e.topK);
  // The router: its logits over every expert, the top-k weights, and the
  // chosen experts and their rows (i32), on the rank's tokens (T/tp under SP).
  const double perToken = c.sequenceParallel ? 1 / double(c.tp) : 1;
  double keep = perToken * (E * b + k * b + 2 * k * 4);
  // The experts' rows (the held share of a token): their input, which the
  // GEMMs' weight gradients read, and the down projection's output, which
  // the weighted combine's gradient reads.
  keep += 2 * rows.held * H * b;
  // The shared expert's output and its gate's logit (Qwen2-MoE).
  if (e.sharedIntermediate)
    keep += perToken * (H * b + b);
  return keep;
}

RecomputeSkip recomputeSkip(const Workload &w) {
  if (w.recomputation == Workload::Recomputation::Whole)
    return {};
  if (w.model.moe) // (a mixed model's dense layers do skip their down projection: priced as sparse ones)
    return {false, false, true};
  return {true, phiLayer(w.model.arch) || w.model.parallelResidual, true};
}

LayerShape layerShape(const ModelConfig &m, int64_t tp) {
  LayerShape s;
  s.llama = llamaLayout(m.arch);
  s.h = m.hidden;
  s.hd = m.headDim ? m.headDim : m.hidden / m.heads;
  s.nh = m.heads / tp;
  s.nkv = m.kvHeads >= tp ? m.kvHeads / tp : 1; // replicated kv heads: one per rank
  s.q = s.nh * s.hd;
  s.kv = s.nkv * s.hd;
  s.inter = m.intermediate / tp;
  // A mixture of experts computes top_k experts per token (and Qwen2-MoE's
  // shared expert): that many MLP columns, whole on every tp rank (tp splits
  // attention only; the shared expert is Megatron-split). Its parameters are
  // every expert's (paramCounts).
  if (m.moe)
    s.inter = meanLayerWidth(m, sparseMlpWidth(m, tp), s.inter);
  return s;
}

int64_t sparseMlpWidth(const ModelConfig &m, int64_t tp) {
  return m.moe->topK * m.moe->intermediate + m.moe->sharedIntermediate / tp;
}

ParamCounts paramCounts(const Workload &w, int64_t tp) {
  const ModelConfig &m = w.model;
  LayerShape s = layerShape(m, tp);
  ParamCounts pc;
  double H = double(m.hidden);
  if (s.llama) {
    double mlp = 3 * H * double(s.inter), sparseMlp = mlp, denseMlp = mlp;
    if (m.moe) { // the router and every expert, whole on each tp rank; the shared expert split as an MLP
      const MoeConfig &e = *m.moe;
      const double experts = double(e.experts) * 3 * H * double(e.intermediate);
      double sparse = double(e.experts) * H + experts;
      if (e.sharedIntermediate)
        sparse += 3 * H * double(e.sharedIntermediate / tp) + H;
      const double dense = 3 * H * double(m.intermediate / tp);
      pc.experts = experts;
      mlp = meanLayer(m, sparse, dense);
      sparseMlp = sparse;
      denseMlp = mixedLayers(m) ? dense : sparse;
    }
    pc.layer = double(m.normTensors()) * H + H * double(s.q) + 2 * H * double(s.kv) + double(s.q) * H + mlp;
    if (m.qkvBias)
      pc.layer += double(s.q + 2 * s.kv);
    if (m.outputBias)
      pc.layer += H;
    if (m.mlpBias)
      pc.layer += 2 * double(s.inter) + H;
    pc.sparseLayer = pc.layer - mlp + sparseMlp;
    pc.denseLayer = pc.layer - mlp + denseMlp;
    pc.finalNorm = double(m.finalNormTensors()) * H; // OLMo's has none
  } else {
    // The GPT-style layers: the LayerNorms (Phi's, GPT-J's and Falcon's
    // parallel_attn: one; MPT's without biases); q, k, v (GPT-2's, GPT-NeoX's,
    // Falcon's, BLOOM's, GPTBigCode's and MPT's fused), o, the MLP's two
    // matrices, their biases; BLOOM's LayerNorm on the embeddings, GPT-2's
    // and GPTBigCode's position table.
    pc.layer = double(m.normTensors()) * H + H * double(s.q + 2 * s.kv) + double(s.q) * H + 2 * H * double(s.inter);
    if (m.qkvBias)
      pc.layer += double(s.q + 2 * s.kv);
    if (m.outputBias)
      pc.layer += H;
    if (m.mlpBias)
      pc.layer += double(s.inter) + H;
    pc.finalNorm = double(m.finalNormTensors()) * H;
    if (m.embeddingNorm)
      pc.embeddingExtras = 2 * H;
    if (learnedPositions(m.arch)) // wpe (OPT's and BioGPT's with their two unused rows)
      pc.embeddingExtras = double(m.maxPositions + m.positionOffset) * H;
  }
  // The widest tensor of a layer: GPT-2's fused c_attn, the others' q
  // projection, a dense MLP's (none where every layer has experts); a
  // mixture of experts' router, shared expert and stacked experts.
  const double attnWidth =
      gpt2Layer(m.arch) || groupedQkv(m.arch) || m.qkvBlocks ? double(s.q + 2 * s.kv) : double(s.q); // fused: 3q
  const double denseMlpWidth = m.moe && !mixedLayers(m) ? 0 : double(m.intermediate / tp);
  pc.largestTensor = H * std::max(attnWidth, denseMlpWidth);
  if (m.moe) {
    pc.largestTensor =
        std::max({pc.largestTensor, H * double(m.moe->experts), H * double(m.moe->sharedIntermediate / tp)});
    pc.expertTensor = double(m.moe->experts) * double(m.moe->intermediate) * H;
  }
  pc.vocabMatrix = double(w.paddedVocab(tp)) / double(tp) * H;
  if (m.lmHeadBias) // Phi's, split over the vocabulary like the head
    pc.finalNorm += double(w.paddedVocab(tp)) / double(tp);
  pc.tied = m.tieEmbeddings;
  if (!mixedLayers(m))
    pc.sparseLayer = pc.denseLayer = pc.layer;
  return pc;
}

} // namespace llcdist::cost::detail
