// LayerNorm (torch nn.LayerNorm; without beta MPT's bias-free one; without gamma and beta OLMo's non-parametric one)
// and RMSNorm (HF LlamaRMSNorm; GemmaRMSNorm's (1 + weight) with the weight offset). See Kernels.h for the contract.
// Row statistics are accumulated in double; the saved mean/rstd are fp32.
#include "llcdist/runtime/Kernels.h"

#include "CpuKernels.h"
#include "llcdist/runtime/Bf16.h"

#include <cmath>
#include <vector>

namespace llcdist::rt {

void layerNormForward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                      float* rstd, int64_t M, int64_t H, float eps) {
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * H;
    double sum = 0.0;
    for (int64_t h = 0; h < H; ++h) sum += xr[h];
    const double mu = sum / double(H);
    double var = 0.0;
    for (int64_t h = 0; h < H; ++h) var += (xr[h] - mu) * (xr[h] - mu);
    var /= double(H);
    const float mu32 = static_cast<float>(mu);
    const float rs = static_cast<float>(1.0 / std::sqrt(var + double(eps)));
    float* yr = y + m * H;
    if (gamma && beta)
      for (int64_t h = 0; h < H; ++h) yr[h] = (xr[h] - mu32) * rs * gamma[h] + beta[h];
    else if (gamma)  // no beta: torch's LayerNorm(bias=False), no add
      for (int64_t h = 0; h < H; ++h) yr[h] = (xr[h] - mu32) * rs * gamma[h];
    else  // no affine transform: gamma 1 and beta 0, the same bits
      for (int64_t h = 0; h < H; ++h) yr[h] = (xr[h] - mu32) * rs;
    mean[m] = mu32;
    rstd[m] = rs;
  }
}

namespace {
// The input gradient v of element i as the fused backward stores it: dresidual[i] + v, with v first
// rounded as the unfused input-gradient op stored it (layerNormBackwardInput's contract).
inline float withResidual(float v, const float* dresidual, int64_t i, bool roundBf16) {
  if (!dresidual) return v;
  return dresidual[i] + (roundBf16 ? roundToBf16(v) : v);
}
}  // namespace

void layerNormBackwardInput(const float* dy, const float* x, const float* gamma, const float* mean,
                            const float* rstd, float* dx, int64_t M, int64_t H, const float* dresidual,
                            bool roundBf16) {
  // dx = rstd · (g - mean(g) - xhat·mean(g·xhat)) with g = dy·gamma (dy·1 where gamma is null).
  const auto gammaAt = [gamma](int64_t h) { return gamma ? gamma[h] : 1.0f; };
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * H;
    const float* dyr = dy + m * H;
    double sumG = 0.0, sumGX = 0.0;
    for (int64_t h = 0; h < H; ++h) {
      const double g = double(dyr[h]) * gammaAt(h);
      sumG += g;
      sumGX += g * ((xr[h] - mean[m]) * rstd[m]);
    }
    const float meanG = static_cast<float>(sumG / double(H));
    const float meanGX = static_cast<float>(sumGX / double(H));
    float* dxr = dx + m * H;
    for (int64_t h = 0; h < H; ++h) {
      const float xhat = (xr[h] - mean[m]) * rstd[m];
      dxr[h] = withResidual(rstd[m] * (dyr[h] * gammaAt(h) - meanG - xhat * meanGX), dresidual, m * H + h, roundBf16);
    }
  }
}

void layerNormBackwardWeight(const float* dy, const float* x, const float* mean, const float* rstd,
                             float* dgamma, float* dbeta, int64_t M, int64_t H, bool accumulate) {
  std::vector<double> dg(H, 0.0), db(H, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t h = 0; h < H; ++h) {
      const float xhat = (x[m * H + h] - mean[m]) * rstd[m];
      dg[h] += double(dy[m * H + h]) * xhat;
      db[h] += dy[m * H + h];
    }
  for (int64_t h = 0; h < H; ++h) {
    dgamma[h] = static_cast<float>(accumulate ? dgamma[h] + dg[h] : dg[h]);
    if (dbeta) dbeta[h] = static_cast<float>(accumulate ? dbeta[h] + db[h] : db[h]);  // null: no beta
  }
}

void rmsNormForward(const float* x, const float* weight, float* y, float* rstd, int64_t M, int64_t H,
                    float eps, float weightOffset) {
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * H;
    double ss = 0.0;
    for (int64_t h = 0; h < H; ++h) ss += double(xr[h]) * xr[h];
    const float rs = static_cast<float>(1.0 / std::sqrt(ss / double(H) + double(eps)));
    float* yr = y + m * H;
    // HF: weight * (x * rsqrt); Gemma: (x * rsqrt) * (1 + weight), the same f32 product
    for (int64_t h = 0; h < H; ++h) yr[h] = rmsNormWeight(weight[h], weightOffset) * (xr[h] * rs);
    rstd[m] = rs;
  }
}

void rmsNormBackwardInput(const float* dy, const float* x, const float* weight, const float* rstd,
                          float* dx, int64_t M, int64_t H, const float* dresidual, bool roundBf16, float weightOffset) {
  // dx = rstd · (g - xhat·mean(g·xhat)) with g = dy·w, xhat = x·rstd, w = weightOffset + weight.
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * H;
    const float* dyr = dy + m * H;
    double sumGX = 0.0;
    for (int64_t h = 0; h < H; ++h)
      sumGX += double(dyr[h]) * rmsNormWeight(weight[h], weightOffset) * (xr[h] * rstd[m]);
    const float meanGX = static_cast<float>(sumGX / double(H));
    float* dxr = dx + m * H;
    for (int64_t h = 0; h < H; ++h)
      dxr[h] = withResidual(rstd[m] * (dyr[h] * rmsNormWeight(weight[h], weightOffset) - (xr[h] * rstd[m]) * meanGX),
                            dresidual, m * H + h, roundBf16);
  }
}

void rmsNormBackwardWeight(const float* dy, const float* x, const float* rstd, float* dweight, int64_t M,
                           int64_t H, bool accumulate) {
  std::vector<double> dw(H, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t h = 0; h < H; ++h) dw[h] += double(dy[m * H + h]) * (x[m * H + h] * rstd[m]);
  for (int64_t h = 0; h < H; ++h) dweight[h] = static_cast<float>(accumulate ? dweight[h] + dw[h] : dw[h]);
}

// ---- CPU kernel-table entries (CpuKernels.h) -------------------------------------------------------

namespace {
// add_*_norm_fwd's first half: sum = a + b (addForward), rounded as the sum's buffer stores it (the
// norm then reads what the unfused norm read); returns sum.
float* addAsStored(const KernelCall& c, const NormParams& p) {
  float* sum = c.F("sum");
  const int64_t n = p.M * p.H;
  addForward(c.F("a"), c.F("b"), sum, n);
  if (c.storedBf16("sum")) roundToBf16InPlace(sum, n);
  return sum;
}
}  // namespace

void registerCpuNormKernels(CpuKernelTable& t) {
  using K = schema::OpKind;
  using P = NormParams;
  using Ctx = CpuKernelContext;
  addCpuKernel<P>(t, K::kLayerNormFwd, [](const KernelCall& c, const P& p, const Ctx&) {
    layerNormForward(c.F("x"), c.F("gamma"), c.F("beta"), c.F("y"), c.F("mean"), c.F("rstd"), p.M, p.H, float(p.eps));
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kLayerNormBwdInput, [](const KernelCall& c, const P& p, const Ctx&) {
    layerNormBackwardInput(c.F("dy"), c.F("x"), c.F("gamma"), c.F("mean"), c.F("rstd"), c.F("dx"), p.M, p.H);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kLayerNormBwdWeight, [](const KernelCall& c, const P& p, const Ctx&) {
    layerNormBackwardWeight(c.F("dy"), c.F("x"), c.F("mean"), c.F("rstd"), c.F("dgamma"), c.F("dbeta"), p.M, p.H,
                            p.accumulate);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kRmsNormFwd, [](const KernelCall& c, const P& p, const Ctx&) {
    rmsNormForward(c.F("x"), c.F("weight"), c.F("y"), c.F("rstd"), p.M, p.H, float(p.eps), float(p.weightOffset));
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kRmsNormBwdInput, [](const KernelCall& c, const P& p, const Ctx&) {
    rmsNormBackwardInput(c.F("dy"), c.F("x"), c.F("weight"), c.F("rstd"), c.F("dx"), p.M, p.H, nullptr, false,
                         float(p.weightOffset));
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kRmsNormBwdWeight, [](const KernelCall& c, const P& p, const Ctx&) {
    rmsNormBackwardWeight(c.F("dy"), c.F("x"), c.F("rstd"), c.F("dweight"), p.M, p.H, p.accumulate);
    return Status::ok();
  });
  // The fused norms (llcdist-plan-fuse-norm): the unfused kernels in turn, each intermediate rounded as
  // its unfused buffer stored it, so the bits are the unfused ops'.
  addCpuKernel<P>(t, K::kAddLayerNormFwd, [](const KernelCall& c, const P& p, const Ctx&) {
    float* sum = addAsStored(c, p);
    layerNormForward(sum, c.F("gamma"), c.F("beta"), c.F("y"), c.F("mean"), c.F("rstd"), p.M, p.H, float(p.eps));
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kAddRmsNormFwd, [](const KernelCall& c, const P& p, const Ctx&) {
    float* sum = addAsStored(c, p);
    rmsNormForward(sum, c.F("weight"), c.F("y"), c.F("rstd"), p.M, p.H, float(p.eps), float(p.weightOffset));
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kLayerNormBwd, [](const KernelCall& c, const P& p, const Ctx&) {
    if (c.F("dgamma"))  // none: a LayerNorm without gamma and beta (the input gradient and the add only)
      layerNormBackwardWeight(c.F("dy"), c.F("x"), c.F("mean"), c.F("rstd"), c.F("dgamma"), c.F("dbeta"), p.M, p.H,
                              p.accumulate);
    layerNormBackwardInput(c.F("dy"), c.F("x"), c.F("gamma"), c.F("mean"), c.F("rstd"), c.F("dx"), p.M, p.H,
                           c.F("dresidual"), c.storedBf16("dx"));
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kRmsNormBwd, [](const KernelCall& c, const P& p, const Ctx&) {
    rmsNormBackwardWeight(c.F("dy"), c.F("x"), c.F("rstd"), c.F("dweight"), p.M, p.H, p.accumulate);
    rmsNormBackwardInput(c.F("dy"), c.F("x"), c.F("weight"), c.F("rstd"), c.F("dx"), p.M, p.H, c.F("dresidual"),
                         c.storedBf16("dx"), float(p.weightOffset));
    return Status::ok();
  });
}

}  // namespace llcdist::rt
