// Family "optimizer": grad_norm (the global gradient norm and clipping, with the all-reduces of sharded
// and per-stage squared norms inside its kernel) and the updates adamw and sgd.
#include "OpDefs.h"

namespace llcdist::rt::ops {
namespace {

namespace sc = schema;
using K = sc::OpKind;

Status checkGradNorm(const OpChecker& c) {
  const Op& op = c.op();
  const bool replicaShards = !op.argList("replica_shards").empty();
  const bool hasReplicas = op.attrs.count("replicas") != 0;
  if (replicaShards != hasReplicas)
    return replicaShards ? c.attrError("replicas", "required when args.replica_shards is present (how many "
                                                   "consecutive members of `axis` hold each shard)")
                         : c.attrError("replicas", "only allowed together with args.replica_shards");
  const bool sharded = !op.argList("sharded").empty() || replicaShards;
  const bool hasAxis = op.attrs.count("axis") != 0;
  const std::string stageAttr(sc::kStageAxisAttr);
  const bool hasStage = op.attrs.count(stageAttr) != 0;
  if (sharded && !hasAxis)
    return c.attrError("axis", "required when args.sharded is present (the axis the sharded gradients' squared "
                               "norms are all-reduced over)");
  if (!sharded && hasAxis) return c.attrError("axis", "only allowed together with args.sharded");
  if (hasAxis) {
    int64_t n = 0;
    LLCDIST_RETURN_IF_ERROR(c.axisSize(&n));
    if (hasReplicas && n % c.I("replicas") != 0)
      return c.attrError("replicas", std::to_string(c.I("replicas")) + " does not divide the size " +
                                         std::to_string(n) + " of axis \"" + op.stringAttr("axis") + "\"");
  }
  if (hasStage && !parseMeshAxisList(op.stringAttr(stageAttr)))  // one axis or a list ("dp,pp")
    return c.attrError(stageAttr.c_str(), "unknown mesh axis \"" + op.stringAttr(stageAttr) +
                                              "\" (expected \"dp\", \"tp\" or \"pp\", or a comma-separated list of them)");
  if (op.argList("grads").empty() && !sharded && !hasStage)
    return c.argError("grads", "missing role \"grads\" of op \"grad_norm\" (it may be absent only with args.sharded or "
                               "attrs.stage_axis)");
  return c.count("norm", 1, "1");
}

StatusOr<OpParams> bindGradNorm(const BindContext& b) {
  const Op& op = b.op;
  OptimizerParams p;
  p.maxNorm = op.floatAttr("max_norm");
  if (op.attrs.count("axis")) {  // the sharded gradients' group
    LLCDIST_ASSIGN_OR_RETURN(MeshAxis axis, b.axis("axis", "axis"));
    p.group = b.mesh.group(b.rank, axis);
    if (op.attrs.count("replicas")) {
      p.member = b.mesh.coord(b.rank, axis);
      p.replicas = op.intAttr("replicas");
    }
  }
  if (op.attrs.count(std::string(sc::kStageAxisAttr))) {  // over pipeline stages
    // One axis, or several separated by commas ("dp,pp"): summed over each in turn.
    const std::string names = op.stringAttr(std::string(sc::kStageAxisAttr));
    auto axes = parseMeshAxisList(names);
    if (!axes) return Status::internal("unknown stage_axis \"" + names + "\"");
    for (MeshAxis axis : *axes) p.stageGroups.push_back(b.mesh.group(b.rank, axis));
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
  t.add(K::kAdamW, {"optimizer", checkUpdate, bindUpdate});
  t.add(K::kSgd, {"optimizer", checkUpdate, bindUpdate});
}

}  // namespace llcdist::rt::ops
