// torch.optim AdamW / SGD steps, gradient-norm clipping and learning-rate schedules.
// Hyper-parameter arithmetic happens in double (Python floats in torch); each scalar enters the
// elementwise fp32 update cast to float, in torch's operation order.
#include "llcdist/runtime/Kernels.h"

#include "CpuKernels.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace llcdist::rt {

Status adamwStep(float* param, const float* grad, float* m, float* v, int64_t n, int64_t step,
                 const AdamWConfig& cfg) {
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

Status sgdStep(float* param, const float* grad, float* momentumBuf, int64_t n, int64_t step,
               const SgdConfig& cfg) {
  if (step < 1) return Status::invalidArgument("sgd: step must be >= 1, got " + std::to_string(step));
  if (cfg.momentum != 0.0 && !momentumBuf)
    return Status::invalidArgument("sgd: momentum != 0 needs a momentum buffer");
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

double learningRate(const LrSchedule& s, int64_t step) {
  if (step < s.warmupSteps) return s.maxLr * double(step + 1) / double(s.warmupSteps);
  if (s.kind == LrSchedule::Kind::kConstant) return s.maxLr;
  const int64_t decaySteps = s.totalSteps - s.warmupSteps;
  const double r =
      decaySteps <= 0 ? 1.0 : std::clamp(double(step - s.warmupSteps) / double(decaySteps), 0.0, 1.0);
  return s.minLr + 0.5 * (1.0 + std::cos(M_PI * r)) * (s.maxLr - s.minLr);
}

// ---- CPU kernel-table entries (CpuKernels.h) -------------------------------------------------------

namespace {

// grad_norm: total = Σ grads g² + (all-reduced over p.group) Σ sharded g², then all-reduced over each
// of p.stageGroups, norm = sqrt(total); sums in double; clips every list in place when max_norm > 0.
Status gradNorm(const KernelCall& c, const OptimizerParams& p, const CpuKernelContext& ctx) {
  auto spans = [&](std::string_view role) {
    std::vector<GradSpan> v;
    const size_t r = c.role(role);
    for (size_t k = 0; k < c.args[r].size(); ++k) v.push_back({c.f(r, k), c.argElems[r][k]});
    return v;
  };
  const std::vector<GradSpan> grads = spans("grads"), sharded = spans("sharded"), replicaShards = spans("replica_shards");
  double replicatedSq = 0.0, shardedSq = 0.0;
  for (const GradSpan& g : grads) replicatedSq += sumOfSquares(g.data, g.size);
  if (!sharded.empty() || !replicaShards.empty()) {
    for (const GradSpan& g : sharded) shardedSq += sumOfSquares(g.data, g.size);
    // Each replicated shard once: on the first member of its replica group (the replicas hold the
    // same, already all-reduced, gradient).
    if (p.member % std::max<int64_t>(p.replicas, 1) == 0)
      for (const GradSpan& g : replicaShards) shardedSq += sumOfSquares(g.data, g.size);
    LLCDIST_RETURN_IF_ERROR(ctx.groupAllReduce(p.group, &shardedSq, 1, ReduceOp::kSum));
  }
  double totalSq = replicatedSq + shardedSq;
  for (const std::vector<int>& g : p.stageGroups)  // stage_axis: every stage's total, summed in member order
    LLCDIST_RETURN_IF_ERROR(ctx.groupAllReduce(g, &totalSq, 1, ReduceOp::kSum));
  const double total = std::sqrt(totalSq);
  if (p.maxNorm > 0) {
    const float coef = clipCoefficient(total, p.maxNorm);
    if (coef < 1.0f)
      for (const std::vector<GradSpan>* list : {&grads, &sharded, &replicaShards})
        for (const GradSpan& g : *list) scaleInPlace(g.data, g.size, coef);
  }
  c.F("norm")[0] = float(total);
  return Status::ok();
}

}  // namespace

void registerCpuOptimizerKernels(CpuKernelTable& t) {
  using K = schema::OpKind;
  using P = OptimizerParams;
  using Ctx = CpuKernelContext;
  addCpuKernel<P>(t, K::kGradNorm, gradNorm);
  addCpuKernel<P>(t, K::kAdamW, [](const KernelCall& c, const P& p, const Ctx&) {
    AdamWConfig cfg;
    cfg.lr = c.lr;
    cfg.beta1 = p.beta1;
    cfg.beta2 = p.beta2;
    cfg.eps = p.eps;
    cfg.weightDecay = p.weightDecay;
    return adamwStep(c.F("param"), c.F("grad"), c.F("m"), c.F("v"), c.elems("param"), c.t, cfg);
  });
  addCpuKernel<P>(t, K::kSgd, [](const KernelCall& c, const P& p, const Ctx&) {
    SgdConfig cfg;
    cfg.lr = c.lr;
    cfg.momentum = p.momentum;
    cfg.weightDecay = p.weightDecay;
    return sgdStep(c.F("param"), c.F("grad"), c.F("momentum_buf"), c.elems("param"), c.t, cfg);
  });
}

}  // namespace llcdist::rt
