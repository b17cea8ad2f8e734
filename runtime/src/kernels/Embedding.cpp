// Token and learned position embeddings. See Kernels.h for the contract.
#include "llcdist/runtime/KernelChecks.h"
#include "llcdist/runtime/Kernels.h"

#include "CpuKernels.h"

#include <algorithm>
#include <string>

namespace llcdist::rt {
namespace {

// Every id must lie in the global vocabulary [0, V·count).
Status checkIds(const int32_t* ids, int64_t M, int64_t V, const VocabShard& shard) {
  LLCDIST_RETURN_IF_ERROR(checkVocabShard(shard));
  const int64_t global = V * shard.count;
  for (int64_t m = 0; m < M; ++m)
    if (ids[m] < 0 || ids[m] >= global)
      return Status::outOfRange("embedding: id " + std::to_string(ids[m]) + " at position " + std::to_string(m) +
                                " is outside the vocabulary [0, " + std::to_string(global) + ")" +
                                (shard.count > 1
                                     ? " (" + std::to_string(shard.count) + " shards of " + std::to_string(V) + " rows)"
                                     : std::string()));
  return Status::ok();
}

}  // namespace

Status embeddingForward(const int32_t* ids, const float* table, float* out, int64_t M, int64_t V, int64_t H,
                        const VocabShard& shard, float scale) {
  LLCDIST_RETURN_IF_ERROR(checkIds(ids, M, V, shard));
  const int64_t begin = shard.index * V;
  for (int64_t m = 0; m < M; ++m) {
    const int64_t local = int64_t(ids[m]) - begin;
    if (local >= 0 && local < V && scale == 1.0f) {
      std::copy_n(table + local * H, H, out + m * H);
    } else if (local >= 0 && local < V) {
      const float* row = table + local * H;
      float* o = out + m * H;
      for (int64_t h = 0; h < H; ++h) o[h] = row[h] * scale;  // Gemma: embeds * normalizer
    } else {
      std::fill_n(out + m * H, H, 0.0f);  // another shard's row: this shard contributes 0
    }
  }
  return Status::ok();
}

Status embeddingBackward(const int32_t* ids, const float* dout, float* dtable, int64_t M, int64_t V, int64_t H,
                         bool accumulate, const VocabShard& shard, float scale, int64_t paddingIdx) {
  LLCDIST_RETURN_IF_ERROR(checkIds(ids, M, V, shard));
  if (!accumulate) std::fill_n(dtable, V * H, 0.0f);
  const int64_t begin = shard.index * V;
  for (int64_t m = 0; m < M; ++m) {  // fixed order m = 0..M-1: deterministic
    const int64_t local = int64_t(ids[m]) - begin;
    if (local < 0 || local >= V) continue;  // another shard's row
    if (ids[m] == paddingIdx) continue;     // nn.Embedding(padding_idx): no gradient
    float* row = dtable + local * H;
    const float* d = dout + m * H;
    if (scale == 1.0f) {
      for (int64_t h = 0; h < H; ++h) row[h] += d[h];
    } else {
      for (int64_t h = 0; h < H; ++h) {
        const float g = scale * d[h];  // the product rounded first: the gradient of out = row·scale
        row[h] += g;
      }
    }
  }
  return Status::ok();
}

Status positionEmbeddingForward(const float* x, const float* wpe, float* y, int64_t B, int64_t S, int64_t H, int64_t P,
                                const PositionRuns& pos) {
  LLCDIST_RETURN_IF_ERROR(checkPositionRuns(S, P, pos));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t off = (b * S + s) * H;
      const float* w = wpe + pos.at(s) * H;
      for (int64_t h = 0; h < H; ++h) y[off + h] = x[off + h] + w[h];
    }
  return Status::ok();
}

Status positionEmbeddingBackwardWeight(const float* dy, float* dwpe, int64_t B, int64_t S, int64_t H, int64_t P,
                                       bool accumulate, const PositionRuns& pos) {
  LLCDIST_RETURN_IF_ERROR(checkPositionRuns(S, P, pos));
  if (!accumulate) std::fill_n(dwpe, P * H, 0.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const float* d = dy + (b * S + s) * H;
      float* w = dwpe + pos.at(s) * H;
      for (int64_t h = 0; h < H; ++h) w[h] += d[h];
    }
  return Status::ok();
}

// ---- CPU kernel-table entries (CpuKernels.h) -------------------------------------------------------

void registerCpuEmbeddingKernels(CpuKernelTable& t) {
  using K = schema::OpKind;
  using P = EmbeddingParams;
  using Ctx = CpuKernelContext;
  // With wpe / dwpe (llcdist-plan-fuse-embedding): the unfused ops' arithmetic one after the other, the
  // position embedding added to out in place (its rows are the table's, exact in out's dtype).
  // A scale with wpe / dwpe is refused at plan load (src/ops/Embedding.cpp), and here for a call bound
  // otherwise.
  const auto scaleWithPositions = [](const char* what) {
    return Status::invalidArgument(std::string(what) + ": scale cannot be combined with the fused position embedding");
  };
  addCpuKernel<P>(t, K::kEmbeddingFwd, [scaleWithPositions](const KernelCall& c, const P& p, const Ctx&) -> Status {
    if (c.F("wpe") && p.scale != 1.0) return scaleWithPositions("embedding_fwd");
    LLCDIST_RETURN_IF_ERROR(
        embeddingForward(c.I("ids"), c.F("table"), c.F("out"), p.M, p.V, p.H, p.vocabShard, float(p.scale)));
    if (!c.F("wpe")) return Status::ok();
    return positionEmbeddingForward(c.F("out"), c.F("wpe"), c.F("out"), p.B, p.S, p.H, p.P, p.posBegin);
  });
  addCpuKernel<P>(t, K::kEmbeddingBwdWeight,
                  [scaleWithPositions](const KernelCall& c, const P& p, const Ctx&) -> Status {
    if (c.F("dwpe") && p.scale != 1.0) return scaleWithPositions("embedding_bwd_weight");
    if (c.F("dwpe"))
      LLCDIST_RETURN_IF_ERROR(
          positionEmbeddingBackwardWeight(c.F("dout"), c.F("dwpe"), p.B, p.S, p.H, p.P, p.accumulate, p.posBegin));
    return embeddingBackward(c.I("ids"), c.F("dout"), c.F("dtable"), p.M, p.V, p.H, p.accumulate, p.vocabShard,
                             float(p.scale), p.paddingIdx);
  });
  addCpuKernel<P>(t, K::kPosEmbeddingFwd, [](const KernelCall& c, const P& p, const Ctx&) {
    return positionEmbeddingForward(c.F("x"), c.F("wpe"), c.F("y"), p.B, p.S, p.H, p.P, p.positions());
  });
  addCpuKernel<P>(t, K::kPosEmbeddingBwdWeight, [](const KernelCall& c, const P& p, const Ctx&) {
    return positionEmbeddingBackwardWeight(c.F("dy"), c.F("dwpe"), p.B, p.S, p.H, p.P, p.accumulate, p.positions());
  });
}

}  // namespace llcdist::rt
