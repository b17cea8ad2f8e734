//===- StepModel.cpp - the analytic time and memory of a training step ----===//
//
// Mirrors what the compiler emits, op by op, for one transformer layer and
// one microbatch (docs/cost-model.md, "The analytic step model"), priced by
// CostModel.h; the exact simulator (PlanSimulator.h) prices the emitted ops
// themselves, and the tests hold the two close.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Cost/StepModel.h"
#include "DataParallelTime.h"
#include "LayerShape.h"
#include "PipelineSendTime.h"

#include "llcdist/Schedule/Simulator.h"
#include "llcdist/Support/ClassifierChunk.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

using namespace llcdist;
using namespace llcdist::cost;
using namespace llcdist::cost::detail;
using llcdist::cost::detail::dataParallelSeconds;
using llcdist::cost::detail::PipelineSends;
using llcdist::cost::detail::pipelineSends;

namespace {

/// Times of one layer for one microbatch on one rank (seconds).
struct LayerTimes {
  double fwd = 0, bwdInput = 0, bwdWeight = 0; ///< compute only
  double recomputeFwd = 0;                     ///< the forward again, under full recomputation (RecomputeSkip)
  double attnFwd = 0;                          ///< the core attention's forward
  double tpFwd = 0, tpBwd = 0;                 ///< tp collectives (synchronous)
  double tpRecompute = 0;                      ///< the recomputed forward's (RecomputeSkip)
  double epFwd = 0, epBwd = 0;                 ///< ep's dispatch and combine (synchronous)
  /// Context parallelism's attention communication: in all, and what the
  /// block attention it overlaps does not hide.
  double cpFwd = 0, cpBwd = 0, cpFwdExposed = 0, cpBwdExposed = 0;
};

/// Context parallelism's attention on one rank, one layer, one microbatch
/// of T local tokens: the compute (attnFwd, attnBwd) and the communication.
/// Ring (RingAttention.cpp): cp blocks of T x T scores, each half visible
/// (the load-balanced layout), so cp times the causal attention of T
/// tokens; each of the cp - 1 k/v transfers (k and v forward; k, v and the
/// running dk, dv backward) starts before the previous block's attention
/// and hides under it, but dk and dv wait for the block that adds to them,
/// and the last trip home. All-to-all: the whole sequence and nh / cp heads;
/// q, k, v and out forward, dout, dq, dk, dv and out again backward
/// (synchronous).
void contextParallelAttention(const Hardware &hw, const Workload &w, const ParallelConfig &c, const LayerShape &s,
                              int64_t T, LayerTimes &t, double &attnBwd) {
  const Precision p = w.precision;
  const double b = double(bytesOf(p));
  const int64_t S = w.seqLen / c.cp, cp = c.cp;
  // All-to-all replicates kv heads that cp does not divide: cp of them move.
  const double kvWidth = c.cpImpl == "ring" ? double(s.kv) : std::max(double(s.kv), double(cp * s.hd));
  const double qBytes = double(T) * double(s.q) * b, kvBytes = double(T) * kvWidth * b;
  if (c.cpImpl == "ring") {
    const double blockF = attentionSeconds(hw, c.microBatch, S, s.nh, s.hd, false, p);
    const double blockB = attentionSeconds(hw, c.microBatch, S, s.nh, s.hd, true, p);
    t.attnFwd = double(cp) * blockF;
    attnBwd = double(cp) * blockB;
    const bool cross = axisGroup(c.mesh(), "cp", hw.topology).crossesNodes();
    const double kv = p2pSeconds(hw, kvBytes, cross);
    t.cpFwd = 2 * double(cp - 1) * kv;
    t.cpFwdExposed = double(cp - 1) * std::max(0.0, 2 * kv - blockF);
    t.cpBwd = 2 * double(cp - 1) * kv + 2 * double(cp) * kv;
    t.cpBwdExposed = double(cp - 1) * (std::max(0.0, 2 * kv - blockB) + 2 * kv) + 2 * kv;
    return;
  }
  t.attnFwd = attentionSeconds(hw, c.microBatch, w.seqLen, s.nh / cp, s.hd, false, p);
  attnBwd = attentionSeconds(hw, c.microBatch, w.seqLen, s.nh / cp, s.hd, true, p);
  const Group g = axisGroup(c.mesh(), "cp", hw.topology);
  const double q = collectiveSeconds(hw, Collective::AllToAll, qBytes, g);
  const double kv = collectiveSeconds(hw, Collective::AllToAll, kvBytes, g);
  t.cpFwd = t.cpFwdExposed = 2 * q + 2 * kv;
  t.cpBwd = t.cpBwdExposed = 3 * q + 2 * kv;
}

LayerTimes layerTimes(const Hardware &hw, const Workload &w, const ParallelConfig &c) {
  const Precision p = w.precision;
  const double b = double(bytesOf(p));
  LayerShape s = layerShape(w.model, c.tp);
  const ExpertRows rows = expertRowsPerToken(w, c);
  // The experts' GEMMs run on the rows they receive: under a capacity factor
  // that drops tokens, fewer than T·k.
  if (const MoeConfig *e = w.model.moe ? &*w.model.moe : nullptr)
    s.inter = meanLayerWidth(
        w.model, int64_t(std::llround(rows.active * double(e->intermediate))) + e->sharedIntermediate / c.tp,
        w.model.intermediate / c.tp);
  const int64_t T = c.microBatch * w.seqLen / c.cp;     // the rank's tokens of the microbatch
  const int64_t Ts = c.sequenceParallel ? T / c.tp : T; // the norms' and residuals' tokens
  LayerTimes t;
  auto gemm = [&](int64_t n, int64_t k) { return gemmSeconds(hw, T, n, k, p); };
  auto mem = [&](double elems) { return memorySeconds(hw, elems * b); };
  double fwdGemm, bwdGemm;
  if (s.llama) {
    fwdGemm = gemm(s.q, s.h) + 2 * gemm(s.kv, s.h) + gemm(s.h, s.q) + 2 * gemm(s.inter, s.h) + gemm(s.h, s.inter);
  } else {
    fwdGemm = gemm(s.q + 2 * s.kv, s.h) + gemm(s.h, s.q) + gemm(s.inter, s.h) + gemm(s.h, s.inter);
  }
  bwdGemm = fwdGemm; // dX and dW: each runs the forward's shapes once
  double attnBwd;
  if (c.cp > 1) {
    contextParallelAttention(hw, w, c, s, T, t, attnBwd);
  } else if (w.attention == Workload::Attention::Flash) {
    t.attnFwd = attentionSeconds(hw, c.microBatch, w.seqLen, s.nh, s.hd, false, p);
    attnBwd = attentionSeconds(hw, c.microBatch, w.seqLen, s.nh, s.hd, true, p);
  } else {
    // b·nh batched [S, hd]·[hd, S] and [S, S]·[S, hd] products (priced as one
    // GEMM of their total size), the score matrix read and written by the
    // softmax (2 + 2 bytes an element) and the dropout (2 + 2, + a 1-byte
    // mask); the backward: four products, softmax and dropout backward.
    const double bh = double(c.microBatch) * double(s.nh);
    const double scores = bh * double(w.seqLen) * double(w.seqLen);
    double mm = gemmSeconds(hw, int64_t(bh) * w.seqLen, w.seqLen, s.hd, p);
    t.attnFwd = 2 * mm + memorySeconds(hw, 4 * scores) + memorySeconds(hw, 5 * scores);
    attnBwd = 4 * mm + memorySeconds(hw, 6 * scores) + memorySeconds(hw, 5 * scores);
  }
  const double hS = double(Ts) * double(s.h);
  // Memory-bound ops, elements moved (reads + writes) as the compiler's
  // argument buffers count them. The residual stream: two norms (x, y) and
  // two residual adds (a, b, y) forward, each norm's dx (dy, x, dx) and dw
  // (dy, x) and the residual gradients' adds backward; fused (Fusion::Plan),
  // each add with the norm after it (a, b → sum, y) and each norm's
  // backward with the residual gradient (dy, dresidual, x → dx). A fully
  // recomputed layer starts at its first norm (its input's add is the
  // previous layer's) and ends at its last add unless it skips it
  // (RecomputeSkip): one norm, one fused pair (, one add).
  const bool fused = w.fusion == Workload::Fusion::Plan;
  const RecomputeSkip skip = recomputeSkip(w);
  const double residualFwd = fused ? 2 * mem(4 * hS) : 2 * mem(2 * hS) + 2 * mem(3 * hS);
  const double residualRecompute =
      (fused ? mem(2 * hS) + mem(4 * hS) + mem(3 * hS) : residualFwd) - (skip.lastAdd ? mem(3 * hS) : 0);
  const double residualBwd = fused ? 2 * mem(4 * hS) : 2 * (mem(3 * hS) + mem(2 * hS)) + 2 * mem(3 * hS);
  // The rest: rope (q and k: x, y), SwiGLU and the input gradients' sums
  // (Llama); GPT's GELU, biases and bias gradients, which the fused plan
  // runs in the GEMMs' epilogues but for the row-parallel linears' biases
  // under tp (added after the reduction: y, in place).
  // Under expert parallelism the SwiGLU between the expert GEMMs runs on the
  // experts' static rows, the worst case C (activationInter), and each
  // dispatch and combine reorders them (moe_chunk_transpose: [C, H] read
  // and written, as the simulator prices it), two forward, two backward.
  double modelFwd = 0, modelBwd = 0;
  const double inter = activationInter(w, c, s, rows);
  if (s.llama) {
    modelFwd = mem(2.0 * T * (s.q + s.kv)) + mem(3.0 * T * inter);
    modelBwd = mem(2.0 * T * (s.q + s.kv)) + mem(5.0 * T * inter) + 2 * mem(2.0 * T * s.h);
    if (w.model.moe && c.ep > 1) {
      const double transpose = meanLayer(w.model, mem(2.0 * T * rows.held * s.h), 0);
      modelFwd += 2 * transpose;
      modelBwd += 2 * transpose;
    }
  } else if (fused) {
    modelFwd = c.tp > 1 ? 2 * mem(hS) : 0;
  } else {
    modelFwd = mem(2.0 * T * s.inter) + mem(2.0 * T * s.h);
    modelBwd = mem(3.0 * T * s.inter) + 2 * mem(2.0 * T * s.h);
  }
  t.fwd = fwdGemm + t.attnFwd + residualFwd + modelFwd;
  const double skippedGemm = (skip.mlpOut ? gemm(s.h, s.inter) : 0) + (skip.attnOut ? gemm(s.h, s.q) : 0);
  t.recomputeFwd = fwdGemm - skippedGemm + t.attnFwd + residualRecompute + modelFwd;
  t.bwdInput = bwdGemm + attnBwd + residualBwd + modelBwd;
  t.bwdWeight = bwdGemm;
  // tp on the [T, h] activations, as the compiler emits it (Megatron's):
  // two all-reduces each way; under SP two all-gathers and two
  // reduce-scatters forward, and backward two reduce-scatters and four
  // all-gathers (the gradients' two, and the two column-parallel inputs
  // gathered again for their weight gradients: SP stashes them sharded).
  if (c.tp > 1) {
    Group g = axisGroup(c.mesh(), "tp", hw.topology);
    double bytes = double(T) * double(s.h) * b;
    if (c.sequenceParallel) {
      double ag = collectiveSeconds(hw, Collective::AllGather, bytes, g);
      double rs = collectiveSeconds(hw, Collective::ReduceScatter, bytes, g);
      t.tpFwd = 2 * ag + 2 * rs;
      t.tpBwd = 4 * ag + 2 * rs;
      t.tpRecompute = 2 * ag + double(2 - skip.reductions()) * rs;
    } else {
      double ar = collectiveSeconds(hw, Collective::AllReduce, bytes, g);
      t.tpFwd = 2 * ar;
      t.tpBwd = 2 * ar;
      t.tpRecompute = double(2 - skip.reductions()) * ar;
    }
  }
  // Expert parallelism (ExpertParallel.cpp): forward, the dispatch of the
  // rank's T·k token rows (fewer where a capacity drops some) to the ep
  // members holding their experts and the combine of the experts' outputs
  // back; backward, the output gradient out and the input gradient back:
  // four all-to-alls of T·k·H each, every one sending (ep−1)/ep of its rows
  // off the rank under uniform routing (the real volume is data-dependent;
  // the experts' compute is the active experts' on the rank's own T tokens:
  // no load imbalance).
  if (c.ep > 1) {
    const Group g = axisGroup(c.mesh(), "ep", hw.topology);
    const double bytes = double(T) * rows.active * double(s.h) * b;
    const double a2a = collectiveSeconds(hw, Collective::AllToAll, bytes, g);
    t.epFwd = meanLayer(w.model, 2 * a2a, 0);
    t.epBwd = t.epFwd;
  }
  return t;
}

/// The compiler's default --pp-layout (llcdist-pipeline-split's `balance`):
/// the contiguous split of the layers into `parts` chunks minimizing the
/// largest chunk's training FLOPs per token, the LM head's in the last chunk,
/// ties to the earliest cut. The costs depend on the model and on full
/// recomputation only, so the sizes are cached per (model, parts, full).
std::vector<int64_t> balanceLayers(const Workload &w, int64_t parts, bool full) {
  const ModelConfig &m = w.model;
  LayerShape s = layerShape(m, 1);
  double H = double(m.hidden);
  // One layer's training FLOPs per token; a mixed model's sparse and dense
  // layers each their own (the width `inter` of its MLP).
  auto layerCost = [&](bool sparse) {
    const double inter = !mixedLayers(m) ? double(s.inter)
                         : sparse        ? double(sparseMlpWidth(m, 1))
                                         : double(m.intermediate);
    double matmul = s.llama ? H * double(s.q) + 2 * H * double(s.kv) + double(s.q) * H + 3 * H * inter
                            : H * double(s.q + 2 * s.kv) + double(s.q) * H + 2 * H * inter;
    if (m.moe && sparse) // the router and Qwen2-MoE's shared-expert gate, as llcdist-pipeline-split counts them
      matmul += H * double(m.moe->experts) + (m.moe->sharedIntermediate ? H : 0);
    double fwd = 2 * matmul + 4.0 * double(w.seqLen) * double(m.heads) * double(s.hd);
    return 3 * fwd + (full ? fwd - 2 * recomputeSkip(w).macs(s) : 0);
  };
  const double layer = layerCost(m.moe.has_value());
  std::vector<double> before(size_t(m.layers) + 1, 0); // a mixed model's layers [0, i)
  if (mixedLayers(m))
    for (int64_t i = 0; i < m.layers; ++i)
      before[size_t(i) + 1] = before[size_t(i)] + layerCost(m.sparseLayer(i));
  // The head: the LM head over the padded vocabulary (the pass runs after
  // llcdist-pad-vocab, whose tp is folded into the key below).
  double tail = 3 * 2 * H * double(w.paddedVocab(1));
  struct Key {
    const void *model;
    int64_t parts, layers, seq, vocab;
    bool full;
    bool operator==(const Key &o) const {
      return model == o.model && parts == o.parts && layers == o.layers && seq == o.seq && vocab == o.vocab &&
             full == o.full;
    }
  };
  thread_local std::vector<std::pair<Key, std::vector<int64_t>>> cache;
  Key key{&w.model, parts, m.layers, w.seqLen, w.paddedVocab(1), full};
  for (const auto &[k, v] : cache)
    if (k == key)
      return v;
  int64_t n = m.layers;
  auto group = [&](int64_t a, int64_t b) {
    return (mixedLayers(m) ? before[size_t(b)] - before[size_t(a)] : double(b - a) * layer) + (b == n ? tail : 0);
  };
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(size_t(parts + 1), std::vector<double>(size_t(n + 1), inf));
  std::vector<std::vector<int64_t>> cut(size_t(parts + 1), std::vector<int64_t>(size_t(n + 1), 0));
  best[0][0] = 0;
  for (int64_t k = 1; k <= parts; ++k)
    for (int64_t i = k; i <= n; ++i)
      for (int64_t j = k - 1; j < i; ++j) {
        double c = std::max(best[size_t(k - 1)][size_t(j)], group(j, i));
        if (c < best[size_t(k)][size_t(i)] * (1 - 1e-12)) {
          best[size_t(k)][size_t(i)] = c;
          cut[size_t(k)][size_t(i)] = j;
        }
      }
  std::vector<int64_t> sizes(static_cast<size_t>(parts));
  for (int64_t k = parts, i = n; k >= 1; --k) {
    sizes[size_t(k - 1)] = i - cut[size_t(k)][size_t(i)];
    i = cut[size_t(k)][size_t(i)];
  }
  if (cache.size() > 256)
    cache.clear();
  cache.emplace_back(key, sizes);
  return sizes;
}

/// Layers each stage holds (its chunks s, s + pp, ... of the compiler's
/// layout, over the model's layers in order), and of them a mixture of
/// experts' sparse ones (none for a model without experts).
struct StageLayers {
  std::vector<int64_t> all, sparse;
};
StageLayers stageLayers(const Workload &w, const ParallelConfig &c) {
  const ModelConfig &m = w.model;
  StageLayers out{std::vector<int64_t>(size_t(c.pp), 0), std::vector<int64_t>(size_t(c.pp), 0)};
  const std::vector<int64_t> sizes =
      c.pp == 1 ? std::vector<int64_t>{m.layers} : balanceLayers(w, c.pp * c.virtualStages, c.recompute == "full");
  int64_t layer = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.all[i % size_t(c.pp)] += sizes[i];
    for (int64_t k = 0; k < sizes[i]; ++k, ++layer)
      out.sparse[i % size_t(c.pp)] += m.sparseLayer(layer);
  }
  return out;
}

/// The parameters of one rank of `stage` holding `layers` layers of which
/// `sparse` are a mixture of experts' sparse ones (elements, before ZeRO).
double stageParams(const Workload &w, const ParallelConfig &c, int64_t stage, int64_t layers, int64_t sparse) {
  ParamCounts pc = paramCounts(w, c.tp);
  double n = double(sparse) * pc.layerOn(c.ep, true) + double(layers - sparse) * pc.layerOn(c.ep, false);
  if (stage == 0)
    n += pc.vocabMatrix + pc.embeddingExtras;
  if (stage == c.pp - 1) {
    n += pc.finalNorm;
    // The LM head: untied, or the tied embedding's replica on a later stage.
    if (!pc.tied || c.pp > 1)
      n += pc.vocabMatrix;
  }
  return n;
}

/// Of stageParams: the experts' (1/ep of every expert weight of its `sparse`
/// layers).
double stageExpertParams(const Workload &w, const ParallelConfig &c, int64_t sparse) {
  return double(sparse) * paramCounts(w, c.tp).experts / double(c.ep);
}

/// What one rank keeps of its `params` (of which `experts` are its expert
/// shards) once ZeRO splits them: the dense ones over the data-parallel
/// group, the experts over their shard's replicas (edp = dp / ep, times cp:
/// nothing apart when ep = dp and cp = 1), as llcdist-plan-zero splits them.
double zeroBlock(const ParallelConfig &c, double params, double experts) {
  return (params - experts) / double(c.dataParallelGroup()) + experts / double(c.expertDataParallelGroup());
}

/// The parameter tensors one rank of `stage` holds (ZeRO's collectives run
/// one per tensor): `sparse` of its `layers` a mixture of experts' sparse ones.
int64_t stageTensors(const Workload &w, const ParallelConfig &c, int64_t stage, int64_t layers, int64_t sparse) {
  const ModelConfig &m = w.model;
  int64_t n = sparse * m.layerTensors(true) + (layers - sparse) * m.layerTensors(false);
  if (stage == 0) // the embedding, a position table (GPT-2, GPTBigCode), BLOOM's embedding LayerNorm
    n += 1 + (learnedPositions(m.arch) ? 1 : 0) + (m.embeddingNorm ? 2 : 0);
  if (stage == c.pp - 1) {
    n += m.finalNormTensors(); // the final norm (a LayerNorm's weight and bias; OLMo's none)
    if (!m.tieEmbeddings || c.pp > 1)
      n += 1;
    if (m.lmHeadBias)
      n += 1;
  }
  return n;
}

} // namespace

StepFlops cost::stepFlops(const Workload &w, const std::string &recompute) {
  const ModelConfig &m = w.model;
  LayerShape s = layerShape(m, 1);
  // A capacity factor F < 1 keeps F of the experts' rows under uniform
  // routing: the FLOPs computed (MFU counts what runs, as the step model).
  if (m.moe && w.moeCapacityFactor > 0 && w.moeCapacityFactor < 1)
    s.inter = meanLayerWidth(m,
                             int64_t(std::llround(w.moeCapacityFactor * double(m.moe->topK * m.moe->intermediate))) +
                                 m.moe->sharedIntermediate,
                             m.intermediate);
  double T = double(w.globalBatch) * double(w.seqLen);
  double H = double(m.hidden);
  double matmulPerToken; // multiply-adds per token per layer
  if (s.llama)
    matmulPerToken = H * double(s.q) + 2 * H * double(s.kv) + double(s.q) * H + 3 * H * double(s.inter);
  else
    matmulPerToken = H * double(s.q + 2 * s.kv) + double(s.q) * H + 2 * H * double(s.inter);
  double layerFwd = 2 * T * matmulPerToken;
  double attnFwd = 4 * double(w.globalBatch) * double(w.seqLen) * double(w.seqLen) * double(m.heads) * double(s.hd);
  double headFwd = 2 * T * H * double(m.vocab);
  StepFlops f;
  f.model = 3 * (double(m.layers) * (layerFwd + attnFwd) + headFwd);
  f.hardware = f.model;
  if (recompute == "full")
    f.hardware += double(m.layers) * (layerFwd - 2 * T * recomputeSkip(w).macs(s) + attnFwd);
  else if (recompute == "selective")
    f.hardware += double(m.layers) * attnFwd;
  return f;
}

double StepPrediction::exposedCommSeconds() const {
  double e = 0;
  for (const auto &[axis, c] : comm)
    e += c.exposed;
  return e;
}

MemoryEstimate cost::estimateMemory(const Workload &w, const ParallelConfig &c) {
  const ModelConfig &m = w.model;
  const bool bf16 = w.precision == Precision::BF16;
  const double b = double(bytesOf(w.precision));
  const int64_t mbs = c.microbatches(w.globalBatch);
  const LayerShape s = layerShape(m, c.tp);
  const ParamCounts pc = paramCounts(w, c.tp);
  const StageLayers staged = stageLayers(w, c);
  const std::vector<int64_t> &layers = staged.all, &sparse = staged.sparse;
  // The MLP activations' width: the experts' side at its static rows (the
  // worst case C = ep·T·min(k, E/ep) under ep where the plan without ep
  // holds T·k; E·C_e under a capacity factor).
  const ExpertRows rows = expertRowsPerToken(w, c);
  const double interLargest = activationInter(w, c, s, rows, true);
  const double denseInter = double(s.inter), sparseInter = m.moe ? sparseActivationInter(w, c, rows) : 0;
  MemoryEstimate best;
  for (int64_t stage = 0; stage < c.pp; ++stage) {
    double params = stageParams(w, c, stage, layers[size_t(stage)], sparse[size_t(stage)]);
    MemoryEstimate e;
    e.stage = stage;
    // Persistent: value (bf16 copy or f32), gradient, optimizer state
    // (bf16: f32 master + m + v; f32: m + v), sharded by ZeRO's stage over
    // the data-parallel group dp × cp (an expert shard over edp).
    const double valueB = bf16 ? 2 : 4, gradB = bf16 ? 2 : 4, optB = bf16 ? 12 : 8;
    const double block = zeroBlock(c, params, c.ep > 1 ? stageExpertParams(w, c, sparse[size_t(stage)]) : 0);
    e.params = int64_t((c.zero >= 3 ? block : params) * valueB);
    e.grads = int64_t((c.zero >= 2 ? block : params) * gradB);
    e.optimizer = int64_t((c.zero >= 1 ? block : params) * optB);
    // Activations stashed per layer per microbatch for the backward (T
    // tokens; the norms' and residuals' on T/tp under SP; docs/cost-model.md).
    const double T = double(c.microBatch) * double(w.seqLen) / double(c.cp); // the rank's tokens
    const double Ts = c.sequenceParallel ? T / double(c.tp) : T;
    // A layer's stash: a sparse one (`sparse`) holds its experts' rows.
    auto perLayer = [&](bool sparse) {
      if (c.recompute == "full")
        return Ts * double(s.h) * b; // the layer's input only
      // The core attention's output and log-sum-exp, unless selective
      // recomputation runs it again.
      double attnKeep = c.recompute == "selective" ? 0 : T * double(s.q) * b + T * double(s.nh) * 4;
      // GPT-style: x, norm out (x2); q, k, v (StarCoder2's k and v of its kv
      // heads); fc1 out, gelu out; mean, rstd (x2).
      if (!s.llama)
        return 4 * Ts * double(s.h) * b + T * double(s.q + 2 * s.kv) * b + attnKeep + 2 * T * double(s.inter) * b +
               4 * Ts * 4;
      // x, norm out (x2); q, k, v; gate, up, swiglu out; rstd (x2)
      const double inter = sparse ? sparseInter : denseInter;
      double keep =
          4 * Ts * double(s.h) * b + T * double(s.q + 2 * s.kv) * b + attnKeep + 3 * T * inter * b + 2 * Ts * 4;
      if (sparse) // the router's and experts' (moeStashPerToken)
        keep += T * moeStashPerToken(w, c, rows, b);
      return keep;
    };
    // Microbatches in flight on this stage at its peak.
    double inFlight;
    if (c.pp == 1)
      inFlight = 1;
    else if (c.schedule == "gpipe")
      inFlight = double(mbs);
    else if (c.schedule == "interleaved")
      inFlight = std::min<double>(double(mbs), double(c.pp - stage) + double(c.pp - 1) / double(c.virtualStages));
    else
      inFlight = std::min<double>(double(mbs), double(c.pp - stage));
    const int64_t sparseHere = sparse[size_t(stage)], denseHere = layers[size_t(stage)] - sparseHere;
    double stash = inFlight * (double(sparseHere) * perLayer(true) + double(denseHere) * perLayer(false));
    // Transients: one layer's activations (the layer being recomputed or
    // backwarded) or, on the last stage, the LM head's, whichever is larger
    // (they are not live at once): the logits (their gradient written over
    // them, llcdist-plan-ce-grad-in-place; apart under ZB-H1, whose W pass
    // reads it) and the head's input and its gradient. Under ZeRO-3 also the
    // largest unit's gathered parameters and gradients.
    double transient = 4 * T * double(s.h) * b + 3 * T * std::max(interLargest, double(s.q)) * b;
    if (stage == c.pp - 1) {
      const double logitBuffers = c.pp > 1 && c.schedule == "zb-h1" ? 2 : 1;
      transient =
          std::max(transient, logitBuffers * T * double(w.paddedVocab(c.tp) / c.tp) * b + 2 * T * double(s.h) * b);
    }
    // Under ZeRO-3 also the largest unit gathered whole, and beside it the
    // largest whole gradient its backward writes before reduce-scattering
    // it (each weight gradient is reduced right after its kernel): the
    // embedding and its gradient, or a layer and its largest tensor's.
    if (c.zero == 3) {
      const double layer = std::max(pc.layerOn(c.ep, true), pc.layerOn(c.ep, false));
      const double tensor = std::max(pc.largestTensor, pc.expertTensor / double(c.ep));
      transient += std::max(2 * pc.vocabMatrix, layer + tensor) * valueB;
    }
    e.activations = int64_t(stash + transient);
    if (e.total() > best.total())
      best = e;
  }
  return best;
}

StepPrediction cost::predictStep(const Hardware &hw, const Workload &w, const ParallelConfig &c) {
  return predictStep(hw, w, c, estimateMemory(w, c));
}

namespace {
/// The schedule's bubble over its ideal (busy) time, pp > 1.
double bubbleOverIdeal(const Workload &w, const ParallelConfig &c, const LayerTimes &lt, int64_t mbs, double fShare,
                       double layerTotal) {
  const ModelConfig &m = w.model;
  schedule::ScheduleOptions so;
  so.stages = c.pp;
  so.microbatches = mbs;
  so.virtualStages = c.virtualStages;
  so.kind = c.schedule == "gpipe"         ? schedule::ScheduleKind::GPipe
            : c.schedule == "interleaved" ? schedule::ScheduleKind::Interleaved1F1B
            : c.schedule == "zb-h1"       ? schedule::ScheduleKind::ZBH1
                                          : schedule::ScheduleKind::OneFOneB;
  schedule::CostModel cm;
  cm.forward = fShare;
  if (so.kind == schedule::ScheduleKind::ZBH1) {
    double wShare = lt.bwdWeight / layerTotal;
    cm.backward = 1 - fShare - wShare;
    cm.weight = wShare;
  } else {
    cm.backward = 1 - fShare;
    cm.weight = 0;
  }
  double ratio = schedule::analyticBubbleOverIdeal(so, cm);
  // Interleaved: the fill and drain run chunk by chunk, so uneven chunks
  // (126 layers in 96 chunks: 1 or 2 each) stretch them by the largest
  // chunk over the mean one.
  if (c.virtualStages > 1) {
    std::vector<int64_t> sizes = balanceLayers(w, c.pp * c.virtualStages, c.recompute == "full");
    double largest = double(*std::max_element(sizes.begin(), sizes.end()));
    ratio *= largest * double(sizes.size()) / double(m.layers);
  }
  return ratio;
}

/// What bounds the step: the largest of the non-compute shares, where it is
/// over 15 % of the step.
std::string boundOf(const StepPrediction &out, double bubble, double dpExposed) {
  std::vector<std::pair<double, std::string>> parts = {{bubble, "bubble"},
                                                       {out.comm.at("tp").exposed, "tp communication"},
                                                       {dpExposed, "dp communication"},
                                                       {out.comm.at("pp").exposed, "pp communication"},
                                                       {out.comm.at("cp").exposed, "cp communication"},
                                                       {out.optimizerSeconds, "optimizer"}};
  if (out.comm.count("ep"))
    parts.push_back({out.comm.at("ep").exposed, "ep communication"});
  auto worst = std::max_element(parts.begin(), parts.end());
  return worst->first > 0.15 * out.stepSeconds ? worst->second : "compute";
}
} // namespace

StepPrediction cost::predictStep(const Hardware &hw, const Workload &w, const ParallelConfig &c,
                                 const MemoryEstimate &memory) {
  const ModelConfig &m = w.model;
  const Precision p = w.precision;
  const double b = double(bytesOf(p));
  const int64_t mbs = c.microbatches(w.globalBatch);
  const int64_t T = c.microBatch * w.seqLen / c.cp; // the rank's tokens
  const int64_t Vp = w.paddedVocab(c.tp) / c.tp;
  StepPrediction out;
  LayerTimes lt = layerTimes(hw, w, c);

  // One microbatch of each layer: forward, backward, recomputation (the
  // forward's cp communication again under full recomputation).
  double recomputeFwd = c.recompute == "full"        ? lt.recomputeFwd + lt.tpRecompute + lt.cpFwdExposed
                        : c.recompute == "selective" ? lt.attnFwd + lt.cpFwdExposed
                                                     : 0;
  double layerF = lt.fwd + lt.tpFwd + lt.cpFwdExposed;
  double layerB = lt.bwdInput + lt.bwdWeight + lt.tpBwd + lt.cpBwdExposed + recomputeFwd;
  if (c.ep > 1) { // the dispatch and combine, again under full recomputation
    layerF += lt.epFwd;
    layerB += lt.epBwd + (c.recompute == "full" ? lt.epFwd : 0);
  }
  // The embedding (first chunk) and the LM head + loss (last chunk).
  double embF = memorySeconds(hw, 2.0 * double(T) * double(m.hidden) * b);
  double embB = memorySeconds(hw, 2.0 * double(T) * double(m.hidden) * b);
  double headF = gemmSeconds(hw, T, Vp, m.hidden, p) + memorySeconds(hw, 3.0 * double(T) * double(Vp) * b);
  double headB = 2 * gemmSeconds(hw, T, Vp, m.hidden, p) + memorySeconds(hw, 3.0 * double(T) * double(Vp) * b);
  if (w.fusion == Workload::Fusion::Plan && c.tp == 1) {
    // llcdist-plan-fuse-classifier: the head's three GEMMs chunk by chunk
    // and four passes over each chunk's logits, in the backward.
    const int64_t chunk = classifierChunkRows(T, Vp, int64_t(b));
    headF = 0;
    headB = memorySeconds(hw, 4.0 * double(T) * double(Vp) * b);
    for (int64_t r = 0; r < T; r += chunk)
      headB += 3 * gemmSeconds(hw, std::min(chunk, T - r), Vp, m.hidden, p);
  }
  double tpHead = 0;
  if (c.tp > 1) {
    Group g = axisGroup(c.mesh(), "tp", hw.topology);
    double bytes = double(T) * double(m.hidden) * b;
    // The embedding's all-reduce (or reduce-scatter) and the head's input
    // gathered under SP, each way; the vocabulary-parallel loss's row stats.
    tpHead =
        2 * collectiveSeconds(hw, c.sequenceParallel ? Collective::ReduceScatter : Collective::AllReduce, bytes, g) +
        4 * collectiveSeconds(hw, Collective::AllReduce, 16.0 * double(T), g);
  }
  // The stages' layers: the compiler's default layout.
  // Per microbatch, each stage's compute and pipeline transfers.
  const StageLayers staged = stageLayers(w, c);
  const std::vector<int64_t> &layers = staged.all, &sparse = staged.sparse;
  const PipelineSends sends = pipelineSends(hw, w, c, T, b);
  std::vector<double> stageCost(static_cast<size_t>(c.pp), 0);
  for (int64_t st = 0; st < c.pp; ++st)
    stageCost[size_t(st)] = double(layers[size_t(st)]) * (layerF + layerB) + sends.perMicrobatch(st);
  stageCost.front() += embF + embB;
  stageCost.back() += headF + headB + tpHead;
  const int64_t busiest = std::max_element(stageCost.begin(), stageCost.end()) - stageCost.begin();
  const double maxStage = stageCost[size_t(busiest)];
  int64_t maxLayers = *std::max_element(layers.begin(), layers.end());
  double layerTotal = layerF + layerB;
  double fShare = layerF / layerTotal;
  const double p2p = sends.hop(), p2pPerMicrobatch = sends.perMicrobatch(busiest);

  // Compute of the busiest stage over the step, and the bubble.
  double busy = double(mbs) * maxStage;
  double bubble = 0;
  if (c.pp > 1) // every fill/drain hop also waits for the boundary's p2p
    bubble = bubbleOverIdeal(w, c, lt, mbs, fShare, layerTotal) * busy + 2.0 * double(c.pp - 1) * p2p;
  out.computeSeconds = busy;
  out.bubbleSeconds = bubble;
  out.comm["tp"].total =
      double(mbs) * double(maxLayers) * (lt.tpFwd + lt.tpBwd + (c.recompute == "full" ? lt.tpRecompute : 0)) +
      double(mbs) * tpHead;
  out.comm["tp"].exposed = out.comm["tp"].total;
  out.comm["pp"].total = double(mbs) * p2pPerMicrobatch + 2.0 * double(c.pp - 1) * p2p;
  out.comm["pp"].exposed = out.comm["pp"].total;
  const double cpAgain = c.recompute != "none" ? 1 : 0;
  out.comm["cp"].total = double(mbs) * double(maxLayers) * (lt.cpFwd * (1 + cpAgain) + lt.cpBwd);
  out.comm["cp"].exposed = double(mbs) * double(maxLayers) * (lt.cpFwdExposed * (1 + cpAgain) + lt.cpBwdExposed);
  if (c.ep > 1) {
    out.comm["ep"].total = double(mbs) * double(maxLayers) * (lt.epFwd * (c.recompute == "full" ? 2 : 1) + lt.epBwd);
    out.comm["ep"].exposed = out.comm["ep"].total;
  }

  // dp: gradients and (ZeRO) parameters of the busiest stage's rank.
  out.memory = memory;
  double rankParams = 0, rankExperts = 0;
  int64_t maxTensors = 0;
  for (int64_t st = 0; st < c.pp; ++st) {
    const double here = stageParams(w, c, st, layers[size_t(st)], sparse[size_t(st)]);
    if (here > rankParams && c.ep > 1)
      rankExperts = stageExpertParams(w, c, sparse[size_t(st)]);
    rankParams = std::max(rankParams, here);
    maxTensors = std::max(maxTensors, stageTensors(w, c, st, layers[size_t(st)], sparse[size_t(st)]));
  }
  // Under cp every gradient is a partial sum over the rank's tokens too: one
  // reduction over the group dp × cp (the compiler's "dp+cp"), reported as dp.
  auto [dpTotal, dpExposed] = c.dataParallelGroup() > 1 && c.ep == 1
                                  ? dataParallelSeconds(hw, c, axisGroup(c.mesh(), c.gradientAxis(), hw.topology),
                                                        rankParams, maxTensors, maxLayers, layerF, layerB, mbs, b)
                                  : std::pair<double, double>{0, 0};
  if (c.ep > 1) {
    // Expert parallelism: the experts' gradients, which sum the tokens of
    // the whole ep group, reduce over their shard's dp / ep replicas
    // ("edp", with cp "edp+cp"; ZeRO splits them there), the dense ones over
    // dp (dp+cp); the last backward hides no more than it can of the two
    // (buckets).
    const int64_t expertTensors = 3 * maxLayers; // gate, up and down per layer
    const auto [denseTotal, denseExposed] =
        dataParallelSeconds(hw, c, axisGroup(c.mesh(), c.gradientAxis(), hw.topology), rankParams - rankExperts,
                            maxTensors - expertTensors, maxLayers, layerF, layerB, mbs, b);
    const auto [expertTotal, expertExposed] =
        dataParallelSeconds(hw, c, axisGroup(c.mesh(), c.expertGradientAxis(), hw.topology), rankExperts, expertTensors,
                            maxLayers, layerF, layerB, mbs, b);
    dpTotal = denseTotal + expertTotal;
    const double hidden =
        std::min((denseTotal - denseExposed) + (expertTotal - expertExposed), double(maxLayers) * layerB);
    dpExposed = dpTotal - hidden;
  }
  out.comm["dp"].total = dpTotal;
  out.comm["dp"].exposed = dpExposed;

  // The optimizer: Adam over the rank's shard, the bf16 casts, the norm.
  double shardParams = c.zero >= 1 ? zeroBlock(c, rankParams, rankExperts) : rankParams;
  out.optimizerSeconds = memorySeconds(hw, shardParams * (w.precision == Precision::BF16 ? 30 : 32));

  out.stepSeconds = busy + bubble + dpExposed + out.optimizerSeconds;
  double tokens = double(w.globalBatch) * double(w.seqLen);
  out.tokensPerSecond = tokens / out.stepSeconds;
  StepFlops f = stepFlops(w, c.recompute);
  double gpus = double(c.gpus());
  double peak = peakFlops(hw, p);
  out.mfu = f.model / (gpus * peak * out.stepSeconds);
  out.hfu = f.hardware / (gpus * peak * out.stepSeconds);

  out.bound = boundOf(out, bubble, dpExposed);
  return out;
}
