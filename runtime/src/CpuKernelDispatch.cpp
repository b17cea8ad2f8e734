// runCpuKernel: one KernelCall -> the fp32 CPU kernels of Kernels.h. See Backend.h.
#include "llcdist/runtime/Backend.h"
#include "llcdist/runtime/Bf16.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace llcdist::rt {

Status runCpuGradNorm(const KernelCall& c, const std::function<Status(double*)>& reduceSharded,
                      const std::function<Status(double*)>& reduceStage) {
  const size_t gi = size_t(schema::argIndex(c.kind, "grads")), si = size_t(schema::argIndex(c.kind, "sharded"));
  const size_t ri = size_t(schema::argIndex(c.kind, "replica_shards"));
  if (c.kind != schema::OpKind::kGradNorm || c.args.size() != schema::opSpec(c.kind).numArgs)
    return Status::internal("runCpuGradNorm: not a grad_norm call");
  auto spans = [&](size_t role) {
    std::vector<GradSpan> v;
    for (size_t k = 0; k < c.args[role].size(); ++k) v.push_back({c.f(role, k), c.argElems[role][k]});
    return v;
  };
  const std::vector<GradSpan> grads = spans(gi), sharded = spans(si), replicaShards = spans(ri);
  double replicatedSq = 0.0, shardedSq = 0.0;
  for (const GradSpan& g : grads) replicatedSq += sumOfSquares(g.data, g.size);
  if (!sharded.empty() || !replicaShards.empty()) {
    for (const GradSpan& g : sharded) shardedSq += sumOfSquares(g.data, g.size);
    // Each replicated shard once: on the first member of its replica group (the replicas hold the
    // same, already all-reduced, gradient).
    if (c.member % std::max<int64_t>(c.replicas, 1) == 0)
      for (const GradSpan& g : replicaShards) shardedSq += sumOfSquares(g.data, g.size);
    LLCDIST_RETURN_IF_ERROR(reduceSharded(&shardedSq));
  }
  double totalSq = replicatedSq + shardedSq;
  if (!c.stageGroups.empty()) {  // stage_axis: every stage's total, summed in member order
    if (!reduceStage) return Status::internal("grad_norm with stage_axis needs a stage all-reduce");
    LLCDIST_RETURN_IF_ERROR(reduceStage(&totalSq));
  }
  const double total = std::sqrt(totalSq);
  if (c.maxNorm > 0) {
    const float coef = clipCoefficient(total, c.maxNorm);
    if (coef < 1.0f)
      for (const std::vector<GradSpan>* list : {&grads, &sharded, &replicaShards})
        for (const GradSpan& g : *list) scaleInPlace(g.data, g.size, coef);
  }
  c.f(size_t(schema::argIndex(c.kind, "norm")))[0] = float(total);
  return Status::ok();
}

Status runCpuKernel(const KernelCall& c) {
  return runCpuKernel(c, [&](const std::vector<int>& group, double*, int64_t, ReduceOp) {
    if (group.size() > 1)
      return Status::internal(std::string(schema::opName(c.kind)) + " needs an all-reduce over a group of " +
                              std::to_string(group.size()) + " ranks, and no communicator was given");
    return Status::ok();
  });
}

Status runCpuKernel(const KernelCall& c, const CpuGroupAllReduce& groupAllReduce) {
  using K = schema::OpKind;
  const ShardAllReduceF64 shardReduce = [&](double* buf, int64_t n, bool max) {
    return groupAllReduce(c.group, buf, n, max ? ReduceOp::kMax : ReduceOp::kSum);
  };
  const schema::OpSpec& spec = schema::opSpec(c.kind);
  auto role = [&](std::string_view r) { return size_t(schema::argIndex(c.kind, r)); };
  auto F = [&](std::string_view r, size_t k = 0) { return c.f(role(r), k); };
  auto I = [&](std::string_view r) { return c.i32(role(r)); };
  auto list = [&](std::string_view r) -> const std::vector<void*>& { return c.args[role(r)]; };
  auto elems = [&](std::string_view r, size_t k = 0) { return c.argElems[role(r)][k]; };
  if (c.args.size() != spec.numArgs) return Status::internal("kernel call has the wrong number of roles");

  switch (c.kind) {
    case K::kLoadMicrobatch:
      return Status::internal("load_microbatch is executed by the interpreter, not by a kernel");
    case K::kZero: {
      const size_t x = role("x");
      for (size_t k = 0; k < list("x").size(); ++k)
        std::memset(list("x")[k], 0, size_t(elems("x", k) * schema::elemTypeSize(c.type(x, k))));
      return Status::ok();
    }
    case K::kCast: {
      // y = x converted: f32 -> bf16 rounds to nearest even, bf16 -> f32 is exact, same dtype copies.
      const schema::ElemType from = c.type(role("x")), to = c.type(role("y"));
      const void* x = c.ptr(role("x"));
      void* y = c.ptr(role("y"));
      if (!schema::isFloatType(from) || !schema::isFloatType(to))
        return Status::internal("cast between non-float dtypes");
      if (from == to) {
        std::memmove(y, x, size_t(c.n * schema::elemTypeSize(from)));
      } else if (from == schema::ElemType::kF32) {
        convertF32ToBf16(static_cast<const float*>(x), static_cast<uint16_t*>(y), c.n);
      } else {
        convertBf16ToF32(static_cast<const uint16_t*>(x), static_cast<float*>(y), c.n);
      }
      return Status::ok();
    }
    case K::kEmbeddingFwd:
      return embeddingForward(I("ids"), F("table"), F("out"), c.M, c.V, c.H, c.vocabShard.value_or(VocabShard{}));
    case K::kEmbeddingBwdWeight:
      return embeddingBackward(I("ids"), F("dout"), F("dtable"), c.M, c.V, c.H, c.accumulate,
                               c.vocabShard.value_or(VocabShard{}));
    case K::kPosEmbeddingFwd:
      return positionEmbeddingForward(F("x"), F("wpe"), F("y"), c.B, c.S, c.H, c.P, c.posBegin);
    case K::kPosEmbeddingBwdWeight:
      return positionEmbeddingBackwardWeight(F("dy"), F("dwpe"), c.B, c.S, c.H, c.P, c.accumulate, c.posBegin);
    case K::kLayerNormFwd:
      layerNormForward(F("x"), F("gamma"), F("beta"), F("y"), F("mean"), F("rstd"), c.M, c.H, float(c.eps));
      return Status::ok();
    case K::kLayerNormBwdInput:
      layerNormBackwardInput(F("dy"), F("x"), F("gamma"), F("mean"), F("rstd"), F("dx"), c.M, c.H);
      return Status::ok();
    case K::kLayerNormBwdWeight:
      layerNormBackwardWeight(F("dy"), F("x"), F("mean"), F("rstd"), F("dgamma"), F("dbeta"), c.M, c.H, c.accumulate);
      return Status::ok();
    case K::kRmsNormFwd:
      rmsNormForward(F("x"), F("weight"), F("y"), F("rstd"), c.M, c.H, float(c.eps));
      return Status::ok();
    case K::kRmsNormBwdInput:
      rmsNormBackwardInput(F("dy"), F("x"), F("weight"), F("rstd"), F("dx"), c.M, c.H);
      return Status::ok();
    case K::kRmsNormBwdWeight:
      rmsNormBackwardWeight(F("dy"), F("x"), F("rstd"), F("dweight"), c.M, c.H, c.accumulate);
      return Status::ok();
    case K::kLinearFwd:
      linearForward(F("x"), F("w"), F("bias"), F("y"), c.M, c.K, c.N, c.layout);
      return Status::ok();
    case K::kLinearBwdInput:
      linearBackwardInput(F("dy"), F("w"), F("dx"), c.M, c.K, c.N, c.layout, c.accumulate);
      return Status::ok();
    case K::kLinearBwdWeight:
      linearBackwardWeight(F("dy"), F("x"), F("dw"), c.M, c.K, c.N, c.layout, c.accumulate);
      return Status::ok();
    case K::kLinearBwdBias:
      linearBackwardBias(F("dy"), F("db"), c.M, c.N, c.accumulate);
      return Status::ok();
    case K::kBiasAdd:
      biasAddForward(F("y"), F("bias"), c.M, c.N);
      return Status::ok();
    case K::kSplitFwd:
    case K::kSplitBwd: {
      // x [rows, Σsizes] <-> parts [rows, sizes[p]].
      const bool fwd = c.kind == K::kSplitFwd;
      const std::vector<void*>& parts = list(fwd ? "outs" : "douts");
      float* whole = F(fwd ? "x" : "dx");
      int64_t width = 0;
      for (int64_t s : c.sizes) width += s;
      int64_t col = 0;
      for (size_t p = 0; p < parts.size(); ++p) {
        float* part = static_cast<float*>(parts[p]);
        const int64_t w = c.sizes[p];
        for (int64_t r = 0; r < c.rows; ++r) {
          float* wr = whole + r * width + col;
          float* pr = part + r * w;
          if (fwd) std::memcpy(pr, wr, size_t(w) * 4);
          else std::memcpy(wr, pr, size_t(w) * 4);
        }
        col += w;
      }
      return Status::ok();
    }
    case K::kRopeFwd:
      if (!c.rope) return Status::internal("rope_fwd without a rope table");
      return ropeForward(*c.rope, F("x"), F("y"), c.B, c.S, c.n, c.hd);
    case K::kRopeBwd:
      if (!c.rope) return Status::internal("rope_bwd without a rope table");
      return ropeBackward(*c.rope, F("dy"), F("dx"), c.B, c.S, c.n, c.hd);
    case K::kAttentionFwd:
      return attentionForward({c.B, c.S, c.nh, c.nkv, c.hd}, F("q"), F("k"), F("v"), F("out"), F("lse"));
    case K::kAttentionBwd:
      return attentionBackward({c.B, c.S, c.nh, c.nkv, c.hd}, F("dout"), F("q"), F("k"), F("v"), F("out"), F("lse"),
                               F("dq"), F("dk"), F("dv"));
    case K::kGeluTanhFwd:
      geluTanhForward(F("x"), F("y"), c.n);
      return Status::ok();
    case K::kGeluTanhBwd:
      geluTanhBackward(F("dy"), F("x"), F("dx"), c.n);
      return Status::ok();
    case K::kSwigluFwd:
      swigluForward(F("gate"), F("up"), F("y"), c.n);
      return Status::ok();
    case K::kSwigluBwd:
      swigluBackward(F("dy"), F("gate"), F("up"), F("dgate"), F("dup"), c.n);
      return Status::ok();
    case K::kAdd:
      addForward(F("a"), F("b"), F("y"), c.n);
      return Status::ok();
    case K::kAccumulate:
      accumulateInto(F("x"), F("y"), c.n);
      return Status::ok();
    case K::kCopy:
      std::memcpy(F("y"), F("x"), size_t(c.n) * 4);
      return Status::ok();
    case K::kShardSlice: {
      // y[o, k] = x[o, c·inner + k]: this rank's block of every row (no communication). With padded
      // blocks x has `total` elements a row and y's elements past them are zero.
      const int64_t n = c.group.empty() ? 1 : int64_t(c.group.size());
      const int64_t total = c.total > 0 ? c.total : n * c.inner;
      if (c.member < 0 || c.member >= n || total > n * c.inner || elems("x") != c.outer * total ||
          elems("y") != c.outer * c.inner)
        return Status::internal("shard_slice: member " + std::to_string(c.member) + " of " + std::to_string(n) +
                                " with x of " + std::to_string(elems("x")) + " and y of " + std::to_string(elems("y")) +
                                " elements does not match outer " + std::to_string(c.outer) + ", inner " +
                                std::to_string(c.inner) + ", total " + std::to_string(total));
      const float* x = F("x");
      float* y = F("y");
      const int64_t begin = c.member * c.inner;
      const int64_t real = std::clamp<int64_t>(total - begin, 0, c.inner);
      for (int64_t o = 0; o < c.outer; ++o) {
        if (real > 0) std::memcpy(y + o * c.inner, x + o * total + begin, size_t(real) * 4);
        std::fill(y + o * c.inner + real, y + (o + 1) * c.inner, 0.0f);
      }
      return Status::ok();
    }
    case K::kCrossEntropyFwd: {
      double mean = 0.0;
      if (c.vocabShard)
        LLCDIST_RETURN_IF_ERROR(crossEntropyForwardVocabParallel(F("logits"), I("targets"), &mean, c.M, c.V,
                                                                 *c.vocabShard, shardReduce, c.realVocab));
      else
        LLCDIST_RETURN_IF_ERROR(
            crossEntropyForward(F("logits"), I("targets"), nullptr, &mean, c.M, c.V, c.realVocab));
      F("loss")[0] += float(c.scale * mean);
      return Status::ok();
    }
    case K::kCrossEntropyBwd:
      if (c.vocabShard)
        return crossEntropyBackwardVocabParallel(F("logits"), I("targets"), F("dlogits"), c.M, c.V, float(c.scale),
                                                 *c.vocabShard, shardReduce, c.realVocab);
      return crossEntropyBackward(F("logits"), I("targets"), F("dlogits"), c.M, c.V, float(c.scale), c.realVocab);
    case K::kGradNorm:
      return runCpuGradNorm(
          c, [&](double* v) { return groupAllReduce(c.group, v, 1, ReduceOp::kSum); },
          [&](double* v) {
            for (const std::vector<int>& g : c.stageGroups)
              LLCDIST_RETURN_IF_ERROR(groupAllReduce(g, v, 1, ReduceOp::kSum));
            return Status::ok();
          });
    case K::kAllReduce:
    case K::kAllGather:
    case K::kReduceScatter:
      return Status::internal(std::string(spec.name) + " is a collective, run by the backend's communicator, not a kernel");
    case K::kSend:
    case K::kRecv:
      return Status::internal(std::string(spec.name) + " is point-to-point, run by the backend's communicator, not a kernel");
    case K::kAdamW: {
      AdamWConfig cfg;
      cfg.lr = c.lr;
      cfg.beta1 = c.beta1;
      cfg.beta2 = c.beta2;
      cfg.eps = c.eps;
      cfg.weightDecay = c.weightDecay;
      return adamwStep(F("param"), F("grad"), F("m"), F("v"), elems("param"), c.t, cfg);
    }
    case K::kSgd: {
      SgdConfig cfg;
      cfg.lr = c.lr;
      cfg.momentum = c.momentum;
      cfg.weightDecay = c.weightDecay;
      return sgdStep(F("param"), F("grad"), F("momentum_buf"), elems("param"), c.t, cfg);
    }
  }
  return Status::internal("unhandled op kind");
}

}  // namespace llcdist::rt
