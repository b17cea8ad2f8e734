// torch.optim AdamW / SGD steps and gradient-norm clipping (the learning-rate schedule: src/LrSchedule.cpp).
// Hyper-parameter arithmetic happens in double (Python floats in torch); each scalar enters the
// elementwise fp32 update cast to float, in torch's operation order.
#include "llcdist/runtime/Kernels.h"

#include "CpuKernels.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace llcdist::rt {

Status adamwStep(float* param, const float* grad, float* m, float* v, int64_t n, int64_t step, const AdamWConfig& cfg) {
  if (step < 1) return Status::invalidArgument("adamw: step must be >= 1, got " + std::to_string(step));
  const float decay = static_cast<float>(1.0 - cfg.lr * cfg.weightDecay);
  const float w1 = static_cast<float>(1.0 - cfg.beta1);  // lerp weight (< 0.5 for usual betas)
  const float b2 = static_cast<float>(cfg.beta2);
  const float w2 = static_cast<float>(1.0 - cfg.beta2);
  const double bc1 = 1.0 - std::pow(cfg.beta1, double(step));
  const double bc2 = 1.0 - std::pow(cfg.beta2, double(step));
  const float negStepSize = static_cast<float>(-(cfg.lr / bc1));
  const float bc2Sqrt = static_cast<float>(std::sqrt(bc2));
  const float eps = static_cast<float>(cfg.eps);
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    param[i] *= decay;
    // torch.lerp: small weights use self + w·(end - self), large ones end - (end - self)·(1 - w).
    m[i] = w1 < 0.5f ? m[i] + w1 * (g - m[i]) : g - (g - m[i]) * (1.0f - w1);
    v[i] = v[i] * b2 + w2 * g * g;
    const float denom = std::sqrt(v[i]) / bc2Sqrt + eps;
    param[i] = param[i] + negStepSize * m[i] / denom;
  }
  return Status::ok();
}

Status sgdStep(float* param, const float* grad, float* momentumBuf, int64_t n, int64_t step, const SgdConfig& cfg) {
  if (step < 1) return Status::invalidArgument("sgd: step must be >= 1, got " + std::to_string(step));
  if (cfg.momentum != 0.0 && !momentumBuf) return Status::invalidArgument("sgd: momentum != 0 needs a momentum buffer");
  if (cfg.nesterov && (cfg.momentum <= 0.0 || cfg.dampening != 0.0))
    return Status::invalidArgument("sgd: nesterov momentum requires a momentum and zero dampening");
  const float wd = static_cast<float>(cfg.weightDecay);
  const float mom = static_cast<float>(cfg.momentum);
  const float damp = static_cast<float>(1.0 - cfg.dampening);
  const float negLr = static_cast<float>(-cfg.lr);
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i];
    if (cfg.weightDecay != 0.0) g = g + wd * param[i];
    if (cfg.momentum != 0.0) {
      float& buf = momentumBuf[i];
      buf = step == 1 ? g : buf * mom + damp * g;
      g = cfg.nesterov ? g + mom * buf : buf;
    }
    param[i] = param[i] + negLr * g;
  }
  return Status::ok();
}

double sumOfSquares(const float* g, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += double(g[i]) * g[i];
  return s;
}

double gradNormPartial(const std::vector<GradSpan>& grads, const std::vector<GradSpan>& replicaShards,
                       bool countReplicas, double add) {
  double s = 0.0;
  for (const GradSpan& g : grads) s += sumOfSquares(g.data, g.size);
  if (countReplicas)
    for (const GradSpan& g : replicaShards) s += sumOfSquares(g.data, g.size);
  return s + add;
}

double globalGradNorm(const std::vector<GradSpan>& grads) {
  double s = 0.0;
  for (const GradSpan& g : grads) s += sumOfSquares(g.data, g.size);
  return std::sqrt(s);
}

float clipCoefficient(double totalNorm, double maxNorm) {
  return static_cast<float>(std::min(1.0, maxNorm / (totalNorm + 1e-6)));
}

void scaleInPlace(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

double clipGradNorm(const std::vector<GradSpan>& grads, double maxNorm) {
  const double total = globalGradNorm(grads);
  const float coef = clipCoefficient(total, maxNorm);
  if (coef < 1.0f)
    for (const GradSpan& g : grads) scaleInPlace(g.data, g.size, coef);
  return total;
}

double gradNormFinish(double totalSq, double maxNorm, const std::vector<const std::vector<GradSpan>*>& lists) {
  const double total = std::sqrt(totalSq);
  if (maxNorm > 0) {
    const float coef = clipCoefficient(total, maxNorm);
    if (coef < 1.0f)
      for (const std::vector<GradSpan>* list : lists)
        for (const GradSpan& g : *list) scaleInPlace(g.data, g.size, coef);
  }
  return total;
}

// ---- CPU kernel-table entries (CpuKernels.h) -------------------------------------------------------

namespace {

std::vector<GradSpan> spans(const KernelCall& c, std::string_view role) {
  std::vector<GradSpan> v;
  const size_t r = c.role(role);
  for (size_t k = 0; k < c.args[r].size(); ++k) v.push_back({c.f(r, k), c.argElems[r][k]});
  return v;
}

// grad_norm (gradients whole on every rank): the norm of `grads`, clipped in place when max_norm > 0.
Status gradNorm(const KernelCall& c, const OptimizerParams& p, const CpuKernelContext&) {
  const std::vector<GradSpan> grads = spans(c, "grads");
  c.F("norm")[0] = float(gradNormFinish(gradNormPartial(grads, {}, false, 0.0), p.maxNorm, {&grads}));
  return Status::ok();
}

// grad_norm_sq: this rank's partial squared norm (f64), which the plan all-reduces.
Status gradNormSq(const KernelCall& c, const OptimizerParams& p, const CpuKernelContext&) {
  // grads, then replica_shards, then each `add` (f64 [1] partial sums) in list order.
  double s = gradNormPartial(spans(c, "grads"), spans(c, "replica_shards"), p.member % p.replicas == 0, 0.0);
  for (void* add : c.list("add")) s += static_cast<const double*>(add)[0];
  c.D("sq")[0] = s;
  return Status::ok();
}

// grad_norm_clip: the norm of the all-reduced squared norm; clips `grads` in place.
Status gradNormClip(const KernelCall& c, const OptimizerParams& p, const CpuKernelContext&) {
  const std::vector<GradSpan> grads = spans(c, "grads");
  c.F("norm")[0] = float(gradNormFinish(c.D("sq")[0], p.maxNorm, {&grads}));
  return Status::ok();
}

// The step's values (KernelCall::stepValues; on the CPU backend device memory is host memory).
StatusOr<StepValues> stepValuesOf(const KernelCall& c) {
  if (!c.stepValues)
    return Status::internal(std::string(schema::opName(c.kind)) + " was bound without the step's values");
  return *c.stepValues;
}

AdamWConfig adamwConfigOf(const StepValues& sv, const OptimizerParams& p) {
  AdamWConfig cfg;
  cfg.lr = sv.lr;
  cfg.beta1 = p.beta1;
  cfg.beta2 = p.beta2;
  cfg.eps = p.eps;
  cfg.weightDecay = p.weightDecay;
  return cfg;
}

SgdConfig sgdConfigOf(const StepValues& sv, const OptimizerParams& p) {
  SgdConfig cfg;
  cfg.lr = sv.lr;
  cfg.momentum = p.momentum;
  cfg.weightDecay = p.weightDecay;
  return cfg;
}

}  // namespace

void registerCpuOptimizerKernels(CpuKernelTable& t) {
  using K = schema::OpKind;
  using P = OptimizerParams;
  using Ctx = CpuKernelContext;
  addCpuKernel<P>(t, K::kGradNorm, gradNorm);
  addCpuKernel<P>(t, K::kGradNormSq, gradNormSq);
  addCpuKernel<P>(t, K::kGradNormClip, gradNormClip);
  addCpuKernel<P>(t, K::kAdamW, [](const KernelCall& c, const P& p, const Ctx&) -> Status {
    LLCDIST_ASSIGN_OR_RETURN(const StepValues sv, stepValuesOf(c));
    return adamwStep(c.F("param"), c.F("grad"), c.F("m"), c.F("v"), c.elems("param"), sv.t, adamwConfigOf(sv, p));
  });
  addCpuKernel<P>(t, K::kSgd, [](const KernelCall& c, const P& p, const Ctx&) -> Status {
    LLCDIST_ASSIGN_OR_RETURN(const StepValues sv, stepValuesOf(c));
    return sgdStep(c.F("param"), c.F("grad"), c.F("momentum_buf"), c.elems("param"), sv.t, sgdConfigOf(sv, p));
  });
  // The _multi forms: each tensor's update exactly as the single op's, in list order.
  addCpuKernel<P>(t, K::kAdamWMulti, [](const KernelCall& c, const P& p, const Ctx&) -> Status {
    LLCDIST_ASSIGN_OR_RETURN(const StepValues sv, stepValuesOf(c));
    const AdamWConfig cfg = adamwConfigOf(sv, p);
    for (size_t k = 0; k < c.list("params").size(); ++k)
      LLCDIST_RETURN_IF_ERROR(
          adamwStep(c.F("params", k), c.F("grads", k), c.F("m", k), c.F("v", k), c.elems("params", k), sv.t, cfg));
    return Status::ok();
  });
  addCpuKernel<P>(t, K::kSgdMulti, [](const KernelCall& c, const P& p, const Ctx&) -> Status {
    LLCDIST_ASSIGN_OR_RETURN(const StepValues sv, stepValuesOf(c));
    const SgdConfig cfg = sgdConfigOf(sv, p);
    const bool bufs = !c.list("momentum_bufs").empty();
    for (size_t k = 0; k < c.list("params").size(); ++k)
      LLCDIST_RETURN_IF_ERROR(sgdStep(c.F("params", k), c.F("grads", k), bufs ? c.F("momentum_bufs", k) : nullptr,
                                      c.elems("params", k), sv.t, cfg));
    return Status::ok();
  });
}

}  // namespace llcdist::rt
