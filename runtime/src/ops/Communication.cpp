// Family "communication": the collectives all_reduce, all_gather, reduce_scatter, all_to_all, all_to_all_v and
// the pipeline's point-to-point send / recv, and the wait of asynchronous plans. They have no kernel: the
// interpreter runs them through the backend's collective and point-to-point calls (Backend.h) on the groups and peers bound here.
#include "OpDefs.h"

#include <algorithm>

namespace llcdist::rt::ops {
namespace {

namespace sc = schema;
using K = sc::OpKind;

// attrs.dtype (optional): a known name, and "bf16" only on bf16 buffers (every role: the collective
// then runs on them without f32 staging; all_to_all_v's x and y, whatever its i32 splits).
Status checkCommDType(const OpChecker& c) {
  const Op& op = c.op();
  if (!op.attrs.count(std::string(sc::kCommDTypeAttr))) return Status::ok();
  const std::string dtype = op.stringAttr(std::string(sc::kCommDTypeAttr));
  if (std::find(sc::kCommDTypeNames.begin(), sc::kCommDTypeNames.end(), dtype) == sc::kCommDTypeNames.end())
    return c.attrError("dtype", "unknown collective dtype \"" + dtype + "\" (expected \"f32\" or \"bf16\")");
  if (dtype != "bf16") return Status::ok();
  const sc::OpSpec& spec = sc::opSpec(op.kind);
  for (size_t r = 0; r < op.args.size() && r < spec.numArgs; ++r)
    for (size_t k = 0; k < op.args[r].size(); ++k) {
      // all_to_all_v's splits are i32 counts, not data: only its rows (x, y) move in the dtype.
      if (op.kind == K::kAllToAllV && spec.args[r].role != "x" && spec.args[r].role != "y") continue;
      const BufferDesc& b = c.buffer(op.args[r][k]);
      if (b.dtype != sc::ElemType::kBF16) {
        const std::string arg = "args." + std::string(spec.args[r].role) +
                                (spec.args[r].arity == sc::ArgArity::kList ? "[" + std::to_string(k) + "]" : "");
        return c.attrError("dtype", "dtype \"bf16\" runs the collective on its bf16 buffers as they are, but " + arg +
                                        " (buffer " + std::to_string(op.args[r][k]) + ") is " +
                                        std::string(sc::elemTypeName(b.dtype)));
      }
    }
  return Status::ok();
}

Status checkAllReduce(const OpChecker& c) {
  const Op& op = c.op();
  int64_t n = 0;
  LLCDIST_RETURN_IF_ERROR(c.axisSetSize(&n));
  if (op.attrs.count("group_size") && n % c.I("group_size") != 0)
    return c.attrError("group_size", "sub-groups of " + std::to_string(c.I("group_size")) +
                                         " members do not divide axis \"" + op.stringAttr("axis") + "\" of size " +
                                         std::to_string(n));
  const std::string rop = op.stringAttr("op");
  if (std::find(sc::kReduceOpNames.begin(), sc::kReduceOpNames.end(), rop) == sc::kReduceOpNames.end())
    return c.attrError("op", "unknown reduction \"" + rop + "\" (expected \"sum\", \"avg\" or \"max\")");
  // i32 buffers (the load-balancing loss's counts) sum exactly; an average or a max of them is no plan's.
  const std::vector<int64_t>& xs = op.argList("x");
  if (rop != "sum" && std::any_of(xs.begin(), xs.end(), [&](int64_t id) { return c.buffer(id).dtype == sc::ElemType::kI32; }))
    return c.argError("x", "an i32 buffer is only summed (op \"sum\"), got \"" + rop + "\"");
  return checkCommDType(c);
}

Status checkGatherScatter(const OpChecker& c) {
  const Op& op = c.op();
  int64_t n = 0;
  LLCDIST_RETURN_IF_ERROR(c.axisSetSize(&n));
  const int64_t outer = c.I("outer"), inner = c.I("inner");
  const bool gather = op.kind == K::kAllGather;
  if (!gather && op.stringAttr("op") != "sum")
    return c.attrError("op", "reduce_scatter supports only \"sum\" in this version, got \"" + op.stringAttr("op") + "\"");
  LLCDIST_RETURN_IF_ERROR(c.count(gather ? "x" : "y", OpChecker::prod({outer, inner}), "outer×inner"));
  LLCDIST_RETURN_IF_ERROR(c.wholeSide(gather ? "y" : "x", n, outer, inner));
  return checkCommDType(c);
}

// all_to_all (context parallelism): outer, mid, inner >= 1 (the schema), x_rank_dim 1 or 2, x and y each
// outer·mid·n·inner elements (checked without overflow: a product past int64 matches no buffer).
Status checkAllToAll(const OpChecker& c) {
  int64_t n = 0;
  LLCDIST_RETURN_IF_ERROR(c.axisSetSize(&n));
  const int64_t rankDim = c.I("x_rank_dim");
  if (rankDim != 1 && rankDim != 2)
    return c.attrError("x_rank_dim",
                       "expected 1 (x is [outer, n, mid, inner], y [outer, mid, n, inner]) or 2 (x is "
                       "[outer, mid, n, inner], y [outer, n, mid, inner]), got " +
                           std::to_string(rankDim));
  const int64_t total = OpChecker::prod({c.I("outer"), c.I("mid"), n, c.I("inner")});
  LLCDIST_RETURN_IF_ERROR(c.count("x", total, "outer×mid×n×inner (n = " + std::to_string(n) + ")"));
  LLCDIST_RETURN_IF_ERROR(c.count("y", total, "outer×mid×n×inner (n = " + std::to_string(n) + ")"));
  return checkCommDType(c);
}

// all_to_all_v (expert parallelism): `axis` a single axis (n its size), c, H, Nx, Ny >= 1 (the schema);
// x Nx·H and y Ny·H elements of one float dtype, send_splits and recv_splits n·c i32 elements (x and y
// never overlap: the loader's aliasing rule). The splits' values are checked when it runs.
Status checkAllToAllV(const OpChecker& c) {
  int64_t n = 0;
  LLCDIST_RETURN_IF_ERROR(c.axisSize(&n));
  const int64_t H = c.I("H"), chunks = c.I("c");
  LLCDIST_RETURN_IF_ERROR(c.count("x", OpChecker::prod({c.I("Nx"), H}), "Nx×H"));
  LLCDIST_RETURN_IF_ERROR(c.count("y", OpChecker::prod({c.I("Ny"), H}), "Ny×H"));
  const std::string splits =
      "n×c (n = " + std::to_string(n) + ", the size of axis \"" + c.op().stringAttr("axis") + "\")";
  LLCDIST_RETURN_IF_ERROR(c.count("send_splits", OpChecker::prod({n, chunks}), splits));
  LLCDIST_RETURN_IF_ERROR(c.count("recv_splits", OpChecker::prod({n, chunks}), splits));
  const sc::ElemType xt = c.buffer(c.op().arg("x")).dtype, yt = c.buffer(c.op().arg("y")).dtype;
  if (xt != yt)
    return c.argError("y", "y is " + std::string(sc::elemTypeName(yt)) + " but x is " +
                               std::string(sc::elemTypeName(xt)) + ": all_to_all_v moves rows as they are (one dtype)");
  return checkCommDType(c);
}

// all_to_all_v: the group on its single axis, and its sizes.
StatusOr<OpParams> bindAllToAllV(const BindContext& b) {
  const Op& op = b.op;
  CommunicationParams p;
  LLCDIST_ASSIGN_OR_RETURN(MeshAxis axis, b.axis("axis", "axis"));
  p.group = b.mesh.group(b.rank, axis);
  p.chunks = op.intAttr("c");
  p.rowElems = op.intAttr("H");
  p.xRows = op.intAttr("Nx");
  p.yRows = op.intAttr("Ny");
  p.dtype = commDType(op);
  return OpParams(std::move(p));
}

// all_reduce (over its `group_size` sub-group when given), all_gather, reduce_scatter, all_to_all: the
// group of this rank on `axis`, one axis or a set ("dp+cp": members in global rank order).
StatusOr<OpParams> bindCollective(const BindContext& b) {
  const Op& op = b.op;
  CommunicationParams p;
  LLCDIST_ASSIGN_OR_RETURN(AxisSet axis, b.axisSet("axis", "axis"));
  p.group = op.attrs.count("group_size") ? b.mesh.subGroup(b.rank, axis, op.intAttr("group_size"))
                                         : b.mesh.group(b.rank, axis);
  const std::string reduce = op.stringAttr("op");
  p.reduceOp = reduce == "avg" ? ReduceOp::kAvg : reduce == "max" ? ReduceOp::kMax : ReduceOp::kSum;
  p.outer = op.intAttr("outer");
  p.inner = op.intAttr("inner");
  p.total = op.intAttr("total", int64_t(p.group.size()) * p.inner);  // absent: the unpadded n·inner
  p.mid = op.intAttr("mid", 0);
  p.xRankDim = int(op.intAttr("x_rank_dim", 0));
  p.dtype = commDType(op);
  return OpParams(std::move(p));
}

// `axis` a single mesh axis (a set is an error); exactly one of `peer` (a coordinate of the axis) and
// `shift` (a ring's step: 1 <= shift <= n − 1).
Status checkPointToPoint(const OpChecker& c) {
  int64_t n = 0;
  LLCDIST_RETURN_IF_ERROR(c.axisSize(&n));
  const Op& op = c.op();
  const bool hasPeer = op.attrs.count("peer") != 0, hasShift = op.attrs.count("shift") != 0;
  if (hasPeer == hasShift)
    return c.attrError(hasPeer ? "shift" : "peer",
                       std::string(hasPeer ? "name either peer or shift, not both"
                                           : "required: name the peer's coordinate (peer) or a ring shift (shift)"));
  const std::string range = "axis \"" + op.stringAttr("axis") + "\" has size " + std::to_string(n);
  if (hasShift) {
    const int64_t shift = c.I("shift");
    if (shift > n - 1)
      return c.attrError("shift", "shift " + std::to_string(shift) + " is out of range: " + range + " (shifts 1.." +
                                      std::to_string(n - 1) + ")");
    return Status::ok();
  }
  const int64_t peer = c.I("peer");
  if (peer >= n)
    return c.attrError("peer", "peer " + std::to_string(peer) + " is out of range: " + range + " (coordinates 0.." +
                                   std::to_string(n - 1) + ")");
  return Status::ok();
}

// The peer: this rank with the peer's coordinate on `axis`.
StatusOr<OpParams> bindPointToPoint(const BindContext& b) {
  const Op& op = b.op;
  const std::string name = op.stringAttr("axis");
  LLCDIST_ASSIGN_OR_RETURN(MeshAxis axis, b.axis("axis", "axis"));
  const int64_t peer = op.peerCoordinate(b.mesh.coord(b.rank, axis), b.mesh.axisSize(axis));
  if (peer < 0 || peer >= b.mesh.axisSize(axis))
    return Status::internal("peer " + std::to_string(peer) + " out of range for axis " + name);
  if (peer == b.mesh.coord(b.rank, axis))
    return Status::invalidArgument(std::string(sc::opName(op.kind)) + ": peer " + std::to_string(peer) + " is rank " +
                                   std::to_string(b.rank) + "'s own coordinate on axis " + name + " (a rank cannot " +
                                   (op.kind == K::kSend ? "send to" : "receive from") + " itself)");
  CommunicationParams p;
  p.peer = int(b.mesh.withCoord(b.rank, axis, peer));
  p.tag = op.intAttr("tag");
  return OpParams(std::move(p));
}

// wait: no roles or attrs; its token is checked by the loader with the program's token rules (Plan.cpp).
Status checkWait(const OpChecker&) { return Status::ok(); }
StatusOr<OpParams> bindWait(const BindContext&) { return OpParams(); }

}  // namespace

CommDType commDType(const Op& op) {
  return sc::isCollective(op.kind) && op.stringAttr(std::string(sc::kCommDTypeAttr)) == "bf16" ? CommDType::kBF16
                                                                                               : CommDType::kF32;
}

void registerCommunicationOps(OpDefTable& t) {
  t.add(K::kAllReduce, {"communication", checkAllReduce, bindCollective});
  t.add(K::kAllGather, {"communication", checkGatherScatter, bindCollective});
  t.add(K::kReduceScatter, {"communication", checkGatherScatter, bindCollective});
  t.add(K::kAllToAll, {"communication", checkAllToAll, bindCollective});
  t.add(K::kAllToAllV, {"communication", checkAllToAllV, bindAllToAllV});
  t.add(K::kSend, {"communication", checkPointToPoint, bindPointToPoint});
  t.add(K::kRecv, {"communication", checkPointToPoint, bindPointToPoint});
  t.add(K::kWait, {"communication", checkWait, bindWait});
}

}  // namespace llcdist::rt::ops
