// Family "layout": ops that move or clear data without arithmetic: fill_zero, split_fwd / split_bwd, and
// shard_slice (ZeRO plans: this rank's block of a replicated buffer, no communication).
#include "OpDefs.h"

namespace llcdist::rt::ops {
namespace {

namespace sc = schema;
using K = sc::OpKind;

Status checkFillZero(const OpChecker&) { return Status::ok(); }
StatusOr<OpParams> bindFillZero(const BindContext&) { return OpParams(LayoutParams{}); }

// x [rows, Σsizes] <-> parts [rows, sizes[p]].
Status checkSplit(const OpChecker& c) {
  const Op& op = c.op();
  const std::vector<int64_t> sizes = op.intListAttr("sizes");
  const int64_t rows = c.I("rows");
  const bool fwd = op.kind == K::kSplitFwd;
  const char* partsRole = fwd ? "outs" : "douts";
  const std::vector<int64_t>& parts = op.argList(partsRole);
  if (parts.size() != sizes.size())
    return c.attrError("sizes", "has " + std::to_string(sizes.size()) + " entries but args." + partsRole + " has " +
                                    std::to_string(parts.size()) + " buffers");
  int64_t total = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (__builtin_add_overflow(total, sizes[k], &total)) return c.attrError("sizes", "sum overflows");
    const BufferDesc& b = c.buffer(parts[k]);
    if (b.numel() != OpChecker::prod({rows, sizes[k]}))
      return c.argError(partsRole, k,
                        "buffer " + std::to_string(parts[k]) + " (\"" + b.name + "\") has " + std::to_string(b.numel()) +
                            " elements, expected rows×sizes[" + std::to_string(k) + "] = " +
                            std::to_string(OpChecker::prod({rows, sizes[k]})));
  }
  return c.count(fwd ? "x" : "dx", OpChecker::prod({rows, total}), "rows×Σsizes");
}
StatusOr<OpParams> bindSplit(const BindContext& b) {
  LayoutParams p;
  p.rows = b.op.intAttr("rows");
  p.sizes = b.op.intListAttr("sizes");
  return OpParams(std::move(p));
}

// ZeRO: this rank's block out of a replicated buffer; x [outer, n·inner], y [outer, inner]. `axis` is
// the ZeRO axis: one axis or a set ("dp+cp"), n the product of their sizes, the block the member index.
Status checkShardSlice(const OpChecker& c) {
  int64_t n = 0;
  LLCDIST_RETURN_IF_ERROR(c.axisSetSize(&n));
  const int64_t outer = c.I("outer"), inner = c.I("inner");
  LLCDIST_RETURN_IF_ERROR(c.count("y", OpChecker::prod({outer, inner}), "outer×inner"));
  return c.wholeSide("x", n, outer, inner);
}
StatusOr<OpParams> bindShardSlice(const BindContext& b) {
  LLCDIST_ASSIGN_OR_RETURN(AxisSet axis, b.axisSet("axis", "axis"));
  LayoutParams p;
  p.members = b.mesh.axisSize(axis);
  p.member = b.mesh.coord(b.rank, axis);
  p.outer = b.op.intAttr("outer");
  p.inner = b.op.intAttr("inner");
  p.total = b.op.intAttr("total", p.members * p.inner);  // absent: the unpadded n·inner
  return OpParams(std::move(p));
}

}  // namespace

void registerLayoutOps(OpDefTable& t) {
  t.add(K::kFillZero, {"layout", checkFillZero, bindFillZero});
  t.add(K::kSplitFwd, {"layout", checkSplit, bindSplit});
  t.add(K::kSplitBwd, {"layout", checkSplit, bindSplit});
  t.add(K::kShardSlice, {"layout", checkShardSlice, bindShardSlice});
}

}  // namespace llcdist::rt::ops
