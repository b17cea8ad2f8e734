// Family "optimizer": the gradient norm and clipping (grad_norm when every rank holds whole gradients;
// otherwise grad_norm_sq, the plan's all-reduces of the f64 partial sums, then grad_norm_clip) and the
// updates adamw and sgd, per tensor or over a list of tensors (adamw_multi, sgd_multi).
#include "OpDefs.h"

#include <vector>

namespace llcdist::rt::ops {
namespace {

namespace sc = schema;
using K = sc::OpKind;

Status checkGradNorm(const OpChecker& c) { return c.count("norm", 1, "1"); }

// replica_shards, replicas and replica_axis come together; replicas divides the axis.
Status checkGradNormSq(const OpChecker& c) {
  const Op& op = c.op();
  const bool shards = !op.argList("replica_shards").empty();
  for (const char* attr : {"replicas", "replica_axis"}) {
    const bool has = op.attrs.count(attr) != 0;
    if (shards && !has)
      return c.attrError(attr, "required when args.replica_shards is present (replicas: how many consecutive members "
                               "of replica_axis hold each shard)");
    if (!shards && has) return c.attrError(attr, "only allowed together with args.replica_shards");
  }
  if (shards) {
    const std::string name = op.stringAttr("replica_axis");
    MeshAxis axis{};
    LLCDIST_RETURN_IF_ERROR(c.singleAxis("replica_axis", &axis));
    const int64_t n = c.manifest().mesh().axisSize(axis);
    if (n % c.I("replicas") != 0)
      return c.attrError("replicas", std::to_string(c.I("replicas")) + " does not divide the size " +
                                         std::to_string(n) + " of axis \"" + name + "\"");
  }
  LLCDIST_RETURN_IF_ERROR(c.count("add", 1, "1"));
  return c.count("sq", 1, "1");
}

Status checkGradNormClip(const OpChecker& c) {
  LLCDIST_RETURN_IF_ERROR(c.count("sq", 1, "1"));
  return c.count("norm", 1, "1");
}

StatusOr<OpParams> bindGradNorm(const BindContext& b) {
  OptimizerParams p;
  p.maxNorm = b.op.floatAttr("max_norm");  // 0 on grad_norm_sq (no attr)
  if (b.op.attrs.count("replica_axis")) {  // grad_norm_sq's replica shards: this rank's member index
    LLCDIST_ASSIGN_OR_RETURN(MeshAxis axis, b.axis("replica_axis", "replica_axis"));
    p.member = b.mesh.coord(b.rank, axis);
    p.replicas = b.op.intAttr("replicas");
  }
  return OpParams(std::move(p));
}

Status checkUpdate(const OpChecker& c) {
  const Op& op = c.op();
  const bool adam = op.kind == K::kAdamW;
  if (adam != (c.manifest().optimizer.kind == OptimizerDesc::Kind::kAdamW))
    return c.error("op", "op \"" + std::string(sc::opName(op.kind)) + "\" does not match the manifest's optimizer.kind");
  if (!adam && op.floatAttr("momentum") != 0.0 && op.arg("momentum_buf") < 0)
    return c.argError("momentum_buf", "required when attrs.momentum != 0");
  if (adam) return c.sameCount({"param", "grad", "m", "v"});
  LLCDIST_RETURN_IF_ERROR(c.sameCount({"param", "grad"}));
  return c.count("momentum_buf", c.numel(op.arg("param")), "numel(param)");
}

// adamw_multi / sgd_multi: every role lists one buffer per tensor, the k-th of each the same size.
Status checkUpdateMulti(const OpChecker& c) {
  const Op& op = c.op();
  const bool adam = op.kind == K::kAdamWMulti;
  if (adam != (c.manifest().optimizer.kind == OptimizerDesc::Kind::kAdamW))
    return c.error("op", "op \"" + std::string(sc::opName(op.kind)) + "\" does not match the manifest's optimizer.kind");
  std::vector<const char*> roles = {"params", "grads"};
  if (adam) {
    roles.push_back("m");
    roles.push_back("v");
  } else if (!op.argList("momentum_bufs").empty()) {
    roles.push_back("momentum_bufs");
  } else if (op.floatAttr("momentum") != 0.0) {
    return c.argError("momentum_bufs", "required when attrs.momentum != 0");
  }
  const std::vector<int64_t>& params = op.argList("params");
  for (const char* r : roles) {
    const std::vector<int64_t>& ids = op.argList(r);
    if (ids.size() != params.size())
      return c.argError(r, "lists " + std::to_string(ids.size()) + " buffers, args.params " +
                               std::to_string(params.size()) + " (one per tensor)");
    for (size_t k = 0; k < ids.size(); ++k)
      if (c.numel(ids[k]) != c.numel(params[k]))
        return c.argError(r, k, "buffer " + std::to_string(ids[k]) + " has " + std::to_string(c.numel(ids[k])) +
                                    " elements, expected numel(params[" + std::to_string(k) + "]) = " +
                                    std::to_string(c.numel(params[k])));
  }
  return Status::ok();
}

StatusOr<OpParams> bindUpdate(const BindContext& b) {
  OptimizerParams p;
  p.beta1 = b.op.floatAttr("beta1");
  p.beta2 = b.op.floatAttr("beta2");
  p.eps = b.op.floatAttr("eps");
  p.weightDecay = b.op.floatAttr("weight_decay");
  p.momentum = b.op.floatAttr("momentum");
  return OpParams(std::move(p));
}

}  // namespace

void registerOptimizerOps(OpDefTable& t) {
  t.add(K::kGradNorm, {"optimizer", checkGradNorm, bindGradNorm});
  t.add(K::kGradNormSq, {"optimizer", checkGradNormSq, bindGradNorm});
  t.add(K::kGradNormClip, {"optimizer", checkGradNormClip, bindGradNorm});
  t.add(K::kAdamW, {"optimizer", checkUpdate, bindUpdate});
  t.add(K::kSgd, {"optimizer", checkUpdate, bindUpdate});
  t.add(K::kAdamWMulti, {"optimizer", checkUpdateMulti, bindUpdate});
  t.add(K::kSgdMulti, {"optimizer", checkUpdateMulti, bindUpdate});
}

}  // namespace llcdist::rt::ops
