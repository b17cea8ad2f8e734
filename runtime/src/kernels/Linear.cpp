// Linear layers via cblas_sgemm. See Kernels.h for the contract.
#include "llcdist/runtime/Kernels.h"

#include "CpuKernels.h"
#include "llcdist/runtime/Bf16.h"

#include <cblas.h>

#include <vector>

namespace llcdist::rt {

void linearForward(const float* x, const float* w, const float* bias, float* y, int64_t M, int64_t K,
                   int64_t N, WeightLayout layout) {
  float beta = 0.0f;
  if (bias) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) y[m * N + n] = bias[n];
    beta = 1.0f;
  }
  if (layout == WeightLayout::kOutIn)  // y = x · Wᵀ, W [N,K]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x, K, w, K, beta, y, N);
  else  // y = x · W, W [K,N]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, x, K, w, N, beta, y, N);
}

void linearBackwardInput(const float* dy, const float* w, float* dx, int64_t M, int64_t K, int64_t N,
                         WeightLayout layout, bool accumulate) {
  const float beta = accumulate ? 1.0f : 0.0f;
  if (layout == WeightLayout::kOutIn)  // dx = dy · W, W [N,K]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, N, 1.0f, dy, N, w, K, beta, dx, K);
  else  // dx = dy · Wᵀ, W [K,N]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, K, N, 1.0f, dy, N, w, N, beta, dx, K);
}

void linearBackwardWeight(const float* dy, const float* x, float* dw, int64_t M, int64_t K, int64_t N,
                          WeightLayout layout, bool accumulate) {
  const float beta = accumulate ? 1.0f : 0.0f;
  if (layout == WeightLayout::kOutIn)  // dw[N,K] = dyᵀ · x
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, M, 1.0f, dy, N, x, K, beta, dw, K);
  else  // dw[K,N] = xᵀ · dy
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, N, M, 1.0f, x, K, dy, N, beta, dw, N);
}

void linearBackwardBias(const float* dy, float* db, int64_t M, int64_t N, bool accumulate) {
  std::vector<double> sum(N, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) sum[n] += dy[m * N + n];
  for (int64_t n = 0; n < N; ++n) db[n] = static_cast<float>(accumulate ? db[n] + sum[n] : sum[n]);
}

void biasAddForward(float* y, const float* bias, int64_t M, int64_t N) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) y[m * N + n] += bias[n];
}

// ---- CPU kernel-table entries (CpuKernels.h) -------------------------------------------------------

void registerCpuLinearKernels(CpuKernelTable& t) {
  using K = schema::OpKind;
  using P = LinearParams;
  using Ctx = CpuKernelContext;
  // The GELU epilogues (llcdist-plan-fuse-epilogues): the GEMM, its output rounded as its buffer stores
  // it, then gelu_tanh_fwd / _bwd of it, as the unfused ops in turn.
  addCpuKernel<P>(t, K::kLinearFwd, [](const KernelCall& c, const P& p, const Ctx&) {
    linearForward(c.F("x"), c.F("w"), c.F("bias"), c.F("y"), p.M, p.K, p.N, p.layout);
    if (float* gelu = c.F("gelu")) {
      float* y = c.F("y");
      if (c.storedBf16("y")) roundToBf16InPlace(y, p.M * p.N);
      geluTanhForward(y, gelu, p.M * p.N);
    }
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kLinearBwdInput, [](const KernelCall& c, const P& p, const Ctx&) {
    float* dx = c.F("dx");
    linearBackwardInput(c.F("dy"), c.F("w"), dx, p.M, p.K, p.N, p.layout, p.accumulate);
    if (const float* x = c.F("gelu_x")) {
      if (c.storedBf16("dx")) roundToBf16InPlace(dx, p.M * p.K);
      geluTanhBackward(dx, x, dx, p.M * p.K);
    }
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kLinearBwdWeight, [](const KernelCall& c, const P& p, const Ctx&) {
    linearBackwardWeight(c.F("dy"), c.F("x"), c.F("dw"), p.M, p.K, p.N, p.layout, p.accumulate);
    if (float* db = c.F("db")) linearBackwardBias(c.F("dy"), db, p.M, p.N, p.accumulate);  // the fused bias gradient
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kLinearBwdBias, [](const KernelCall& c, const P& p, const Ctx&) {
    linearBackwardBias(c.F("dy"), c.F("db"), p.M, p.N, p.accumulate);
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kBiasAdd, [](const KernelCall& c, const P& p, const Ctx&) {
    biasAddForward(c.F("y"), c.F("bias"), p.M, p.N);
    return Status::ok();
  });
}

}  // namespace llcdist::rt
