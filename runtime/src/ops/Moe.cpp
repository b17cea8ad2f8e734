// Family "moe" (PlanSchema.h "Mixture of experts"; docs/plan-format.md): the router (moe_route / _bwd), the
// load-balancing loss (moe_router_stats / _bwd, moe_aux_loss / _bwd), the
// permutation into expert-major rows and back (moe_permute, moe_unpermute / _bwd), the experts' grouped
// GEMMs (grouped_linear_*) and Qwen2-MoE's shared-expert gate (sigmoid_gate_*). The checker derives every
// role's element count from the attrs; the i32 contents (expert ids, slots, group sizes) are data, which
// the kernels guard (docs/plan-format.md). moe_chunk_transpose (expert parallelism) reorders the grid of
// row chunks between all_to_all_v's source-major rows and the local experts' expert-major rows.
#include "OpDefs.h"
#include "llcdist/runtime/FloatAttrRules.h"

#include <limits>
#include <sstream>

namespace llcdist::rt::ops {
namespace {

using K = schema::OpKind;
constexpr auto prod = OpChecker::prod;
constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();

// top_k picks k distinct experts of E.
Status checkTopK(const OpChecker& c) {
  const int64_t E = c.I("E"), k = c.I("k");
  if (k > E)
    return c.attrError("k", std::string(schema::opName(c.op().kind)) + ": k = " + std::to_string(k) +
                                " experts per token exceeds E = " + std::to_string(E) + " experts");
  if (E > kI32Max) return c.attrError("E", "E = " + std::to_string(E) + " does not fit an i32 expert id");
  return Status::ok();
}

Status checkRoute(const OpChecker& c) {
  LLCDIST_RETURN_IF_ERROR(checkTopK(c));
  const int64_t T = c.I("T"), E = c.I("E"), k = c.I("k");
  for (const char* r : {"logits", "dlogits"}) LLCDIST_RETURN_IF_ERROR(c.count(r, prod({T, E}), "T×E"));
  for (const char* r : {"weights", "experts", "dweights"}) LLCDIST_RETURN_IF_ERROR(c.count(r, prod({T, k}), "T×k"));
  return Status::ok();
}

// The load-balancing loss: moe_router_stats / _bwd read the router's logits [T, E] (and experts [T, k]); the
// statistics (counts, probs and their outputs, dprobs) are [E]; moe_aux_loss / _bwd's scale is finite as
// fp32, its loss [1].
Status checkAuxLoss(const OpChecker& c) {
  const K kind = c.op().kind;
  const int64_t E = c.I("E");
  if (kind == K::kMoeRouterStats) LLCDIST_RETURN_IF_ERROR(checkTopK(c));
  if (kind == K::kMoeRouterStats || kind == K::kMoeRouterStatsBwd) {
    const int64_t T = c.I("T");
    for (const char* r : {"logits", "dlogits"}) LLCDIST_RETURN_IF_ERROR(c.count(r, prod({T, E}), "T×E"));
    if (kind == K::kMoeRouterStats) LLCDIST_RETURN_IF_ERROR(c.count("experts", prod({T, c.I("k")}), "T×k"));
  }
  for (const char* r : {"counts", "probs", "counts_out", "probs_out", "dprobs"})
    LLCDIST_RETURN_IF_ERROR(c.count(r, E, "E"));
  LLCDIST_RETURN_IF_ERROR(c.count("loss", 1, "1"));
  if (kind != K::kMoeAuxLoss && kind != K::kMoeAuxLossBwd) return Status::ok();
  if (const double v = c.op().floatAttr("scale"); !schema::finiteAsF32(v)) {
    std::ostringstream msg;
    msg << schema::opName(kind) << ": scale must be a finite fp32 number, got " << v;
    return c.attrError("scale", msg.str());
  }
  return Status::ok();
}

// moe_permute: x [T, H]; experts, slots [T, k]; group_sizes [E]; xp [T·k, H], or [E·capacity, H] with the
// optional attr `capacity` (>= 1: the schema's rule for an int attr; token dropping). Its rows and the
// T·k assignments fit an i32 slot.
Status checkPermute(const OpChecker& c) {
  LLCDIST_RETURN_IF_ERROR(checkTopK(c));
  const int64_t T = c.I("T"), H = c.I("H"), E = c.I("E"), k = c.I("k");
  const int64_t N = prod({T, k});
  if (N < 0 || N > kI32Max)
    return c.attrError("k", "T×k = " + (N < 0 ? std::string("(overflow)") : std::to_string(N)) +
                                " assignment rows do not fit an i32 slot");
  LLCDIST_RETURN_IF_ERROR(c.count("x", prod({T, H}), "T×H"));
  LLCDIST_RETURN_IF_ERROR(c.count("experts", N, "T×k"));
  if (c.op().attrs.count("capacity")) {
    const int64_t rows = prod({E, c.I("capacity")});
    if (rows < 0 || rows > kI32Max)
      return c.attrError("capacity", "E×capacity = " + (rows < 0 ? std::string("(overflow)") : std::to_string(rows)) +
                                         " rows of xp do not fit an i32 slot");
    LLCDIST_RETURN_IF_ERROR(c.count("xp", prod({rows, H}), "E×capacity×H"));
  } else {
    LLCDIST_RETURN_IF_ERROR(c.count("xp", prod({T, k, H}), "T×k×H"));
  }
  LLCDIST_RETURN_IF_ERROR(c.count("slots", N, "T×k"));
  return c.count("group_sizes", E, "E");
}

// moe_unpermute / _bwd: xp, dxp [N, H] (the optional attr N, >= 1; absent: T·k); slots, weights, dweights
// [T, k]; y, dy [T, H]. N fits an i32 slot.
Status checkUnpermute(const OpChecker& c) {
  const int64_t T = c.I("T"), H = c.I("H"), k = c.I("k");
  if (c.op().attrs.count("N")) {
    const int64_t N = c.I("N");
    if (N > kI32Max) return c.attrError("N", "N = " + std::to_string(N) + " rows do not fit an i32 slot");
    for (const char* r : {"xp", "dxp"}) LLCDIST_RETURN_IF_ERROR(c.count(r, prod({N, H}), "N×H"));
  } else {
    for (const char* r : {"xp", "dxp"}) LLCDIST_RETURN_IF_ERROR(c.count(r, prod({T, k, H}), "T×k×H"));
  }
  for (const char* r : {"slots", "weights", "dweights"}) LLCDIST_RETURN_IF_ERROR(c.count(r, prod({T, k}), "T×k"));
  for (const char* r : {"y", "dy"}) LLCDIST_RETURN_IF_ERROR(c.count(r, prod({T, H}), "T×H"));
  return Status::ok();
}

// grouped_linear_*: x, dx [N, K]; y, dy [N, O]; w, dw [E, O, K]; group_sizes [E].
Status checkGrouped(const OpChecker& c) {
  const int64_t N = c.I("N"), K_ = c.I("K"), O = c.I("O"), E = c.I("E");
  for (const char* r : {"x", "dx"}) LLCDIST_RETURN_IF_ERROR(c.count(r, prod({N, K_}), "N×K"));
  for (const char* r : {"y", "dy"}) LLCDIST_RETURN_IF_ERROR(c.count(r, prod({N, O}), "N×O"));
  for (const char* r : {"w", "dw"}) LLCDIST_RETURN_IF_ERROR(c.count(r, prod({E, O, K_}), "E×O×K"));
  return c.count("group_sizes", E, "E");
}

// sigmoid_gate_*: gate, dgate [T]; x, y, dy, dx [T, H].
Status checkSigmoidGate(const OpChecker& c) {
  const int64_t T = c.I("T"), H = c.I("H");
  for (const char* r : {"gate", "dgate"}) LLCDIST_RETURN_IF_ERROR(c.count(r, T, "T"));
  for (const char* r : {"x", "y", "dy", "dx"}) LLCDIST_RETURN_IF_ERROR(c.count(r, prod({T, H}), "T×H"));
  return Status::ok();
}

// moe_chunk_transpose: x, y [N, H] (one float dtype), splits [r·c], col_sizes [c]; N fits an i32 row.
Status checkChunkTranspose(const OpChecker& c) {
  const int64_t r = c.I("r"), cols = c.I("c"), N = c.I("N"), H = c.I("H");
  if (N > kI32Max) return c.attrError("N", "N = " + std::to_string(N) + " rows do not fit an i32 split");
  for (const char* role : {"x", "y"}) LLCDIST_RETURN_IF_ERROR(c.count(role, prod({N, H}), "N×H"));
  LLCDIST_RETURN_IF_ERROR(c.count("splits", prod({r, cols}), "r×c"));
  LLCDIST_RETURN_IF_ERROR(c.count("col_sizes", cols, "c"));
  const schema::ElemType xt = c.buffer(c.op().arg("x")).dtype, yt = c.buffer(c.op().arg("y")).dtype;
  if (xt != yt)
    return c.argError("y", "y is " + std::string(schema::elemTypeName(yt)) + " but x is " +
                               std::string(schema::elemTypeName(xt)) + ": moe_chunk_transpose moves rows as they are");
  return Status::ok();
}

// Every kind's attrs into MoeParams (an attr the kind lacks stays 0 / false).
StatusOr<OpParams> bindMoe(const BindContext& b) {
  MoeParams p;
  p.T = b.op.intAttr("T");
  p.H = b.op.intAttr("H");
  p.E = b.op.intAttr("E");
  p.k = b.op.intAttr("k");
  p.N = b.op.intAttr("N");
  p.K = b.op.intAttr("K");
  p.O = b.op.intAttr("O");
  p.normalize = b.op.boolAttr("normalize");
  p.accumulate = b.op.boolAttr("accumulate");
  p.scale = b.op.floatAttr("scale");
  p.r = b.op.intAttr("r");
  p.c = b.op.intAttr("c");
  p.inverse = b.op.boolAttr("inverse");
  p.capacity = b.op.intAttr("capacity");  // 0 when absent: dropless
  return OpParams(p);
}

}  // namespace

void registerMoeOps(OpDefTable& t) {
  for (K k : {K::kMoeRoute, K::kMoeRouteBwd}) t.add(k, {"moe", checkRoute, bindMoe});
  for (K k : {K::kMoeRouterStats, K::kMoeRouterStatsBwd, K::kMoeAuxLoss, K::kMoeAuxLossBwd})
    t.add(k, {"moe", checkAuxLoss, bindMoe});
  t.add(K::kMoePermute, {"moe", checkPermute, bindMoe});
  for (K k : {K::kMoeUnpermute, K::kMoeUnpermuteBwd}) t.add(k, {"moe", checkUnpermute, bindMoe});
  for (K k : {K::kGroupedLinearFwd, K::kGroupedLinearBwdInput, K::kGroupedLinearBwdWeight})
    t.add(k, {"moe", checkGrouped, bindMoe});
  for (K k : {K::kSigmoidGateFwd, K::kSigmoidGateBwd}) t.add(k, {"moe", checkSigmoidGate, bindMoe});
  t.add(K::kMoeChunkTranspose, {"moe", checkChunkTranspose, bindMoe});
}

}  // namespace llcdist::rt::ops
