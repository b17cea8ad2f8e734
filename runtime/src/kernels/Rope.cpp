// Rotary position embedding, HF Llama convention (rotate_half). See Kernels.h for the contract.
// inv_freq and the angles are computed in fp32 with transformers' operation order, so tables match
// HF's to within the last-ulp differences of the math library.
#include "llcdist/runtime/Kernels.h"

#include <cmath>
#include <string>

namespace llcdist::rt {

StatusOr<std::vector<float>> ropeInvFreq(const RopeConfig& cfg, int64_t headDim) {
  if (headDim <= 0 || headDim % 2 != 0)
    return Status::invalidArgument("rope: head_dim must be positive and even, got " +
                                   std::to_string(headDim));
  if (!(cfg.theta > 0.0f))
    return Status::invalidArgument("rope: rope_theta must be positive, got " + std::to_string(cfg.theta));
  const int64_t half = headDim / 2;
  std::vector<float> inv(half);
  // _compute_default_rope_parameters: 1.0 / (base ** (arange(0, dim, 2).float() / dim))
  for (int64_t i = 0; i < half; ++i)
    inv[i] = 1.0f / std::pow(cfg.theta, static_cast<float>(2 * i) / static_cast<float>(headDim));
  if (!cfg.llama3) return inv;

  if (!(cfg.factor > 0.0f) || !(cfg.highFreqFactor > cfg.lowFreqFactor) || !(cfg.lowFreqFactor > 0.0f) ||
      cfg.originalMaxPositionEmbeddings <= 0)
    return Status::invalidArgument(
        "rope: llama3 rope_scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
        "original_max_position_embeddings > 0");
  // _compute_llama3_parameters. Python scalars are doubles; tensor ops run in fp32 with the scalar
  // cast to fp32, and `scalar / tensor` is reciprocal(tensor) * scalar.
  const double oldContext = double(cfg.originalMaxPositionEmbeddings);
  const float lowFreqWavelen = static_cast<float>(oldContext / cfg.lowFreqFactor);
  const float highFreqWavelen = static_cast<float>(oldContext / cfg.highFreqFactor);
  const float twoPi = static_cast<float>(2.0 * M_PI);
  const float smoothDenom = static_cast<float>(double(cfg.highFreqFactor) - double(cfg.lowFreqFactor));
  for (int64_t i = 0; i < half; ++i) {
    const float wavelen = (1.0f / inv[i]) * twoPi;
    float llama = wavelen > lowFreqWavelen ? inv[i] / cfg.factor : inv[i];
    const bool medium = !(wavelen < highFreqWavelen) && !(wavelen > lowFreqWavelen);
    if (medium) {
      const float smooth =
          ((1.0f / wavelen) * static_cast<float>(oldContext) - cfg.lowFreqFactor) / smoothDenom;
      llama = (1.0f - smooth) * llama / cfg.factor + smooth * llama;
    }
    inv[i] = llama;
  }
  return inv;
}

StatusOr<RopeTable> makeRopeTable(const RopeConfig& cfg, int64_t headDim, int64_t posBegin, int64_t S) {
  if (posBegin < 0 || S < 0)
    return Status::invalidArgument("rope: negative position range");
  LLCDIST_ASSIGN_OR_RETURN(std::vector<float> inv, ropeInvFreq(cfg, headDim));
  const int64_t half = headDim / 2;
  RopeTable t;
  t.posBegin = posBegin;
  t.seqLen = S;
  t.headDim = headDim;
  t.cos.resize(S * headDim);
  t.sin.resize(S * headDim);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(posBegin + s) * inv[i];  // fp32, as HF's matmul
      const float c = std::cos(angle), sn = std::sin(angle);
      t.cos[s * headDim + i] = t.cos[s * headDim + half + i] = c;
      t.sin[s * headDim + i] = t.sin[s * headDim + half + i] = sn;
    }
  return t;
}

namespace {

Status checkTable(const RopeTable& t, int64_t S, int64_t hd) {
  if (t.seqLen != S || t.headDim != hd)
    return Status::invalidArgument("rope: table is for S=" + std::to_string(t.seqLen) + ", head_dim=" +
                                   std::to_string(t.headDim) + " but the tensor has S=" +
                                   std::to_string(S) + ", head_dim=" + std::to_string(hd));
  return Status::ok();
}

// sign = +1: y = x*cos + rotate_half(x)*sin; sign = -1: the transpose (rotation by -angle).
void rotate(const RopeTable& t, const float* x, float* y, int64_t B, int64_t S, int64_t n, int64_t hd,
            float sign) {
  const int64_t half = hd / 2;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const float* c = t.cos.data() + s * hd;
      const float* sn = t.sin.data() + s * hd;
      for (int64_t h = 0; h < n; ++h) {
        const int64_t off = ((b * S + s) * n + h) * hd;
        for (int64_t i = 0; i < half; ++i) {
          const float lo = x[off + i], hi = x[off + half + i];
          y[off + i] = lo * c[i] + (-hi) * (sign * sn[i]);
          y[off + half + i] = hi * c[half + i] + lo * (sign * sn[half + i]);
        }
      }
    }
}

}  // namespace

Status ropeForward(const RopeTable& table, const float* x, float* y, int64_t B, int64_t S, int64_t n,
                   int64_t hd) {
  LLCDIST_RETURN_IF_ERROR(checkTable(table, S, hd));
  rotate(table, x, y, B, S, n, hd, 1.0f);
  return Status::ok();
}

Status ropeBackward(const RopeTable& table, const float* dy, float* dx, int64_t B, int64_t S, int64_t n,
                    int64_t hd) {
  LLCDIST_RETURN_IF_ERROR(checkTable(table, S, hd));
  rotate(table, dy, dx, B, S, n, hd, -1.0f);
  return Status::ok();
}

}  // namespace llcdist::rt
