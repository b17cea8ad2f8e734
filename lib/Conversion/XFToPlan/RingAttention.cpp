//===- RingAttention.cpp - context parallelism's ring attention -----------===//
//
// The plan kernels of an xf.attention / xf.attention_grad that
// llcdist-partition marked `xf.cp_ring` (context parallelism, --cp-impl
// ring; Megatron's --cp-comm-type p2p, after Liu et al.'s ring attention).
// Each of the n cp ranks holds its own query, key and value rows (the
// load-balanced chunks of the manifest's cp_layout). The forward computes
// its queries against its own k/v block (step 0), then passes the k/v block
// it holds to the next member of the ring and receives the previous one's,
// n - 1 times: step j's block is member (c - j) mod n's, attended by
// `attention_block_fwd` and merged into the output by its log-sum-exp
// (`attention_merge`). The backward passes k and v around the ring again,
// each with the running dk and dv of its rows: every rank adds its queries'
// contribution (`attention_block_bwd`) and passes them on; one last shift
// brings each block's complete dk and dv home. Transfers are `send` (shift
// 1) and `recv` (shift n - 1) over cp, their origin context_parallel.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

using namespace mlir;
using namespace llcdist;
using namespace llcdist::xf;
using namespace llcdist::xftoplan;

void OpLowering::ringShift(Buf x, Buf y, int64_t n, int64_t tag, StringRef payload, Location opLoc) {
  Location loc = NameLoc::get(b.getStringAttr(payload == "activations"
                                                  ? "context parallelism (ring): k and v pass to the next cp rank"
                                                  : "context parallelism (ring): dk and dv pass around the ring "
                                                    "with their k and v, back to their rank"),
                              opLoc);
  plan::KernelOp send = kernel("send", {arg("x", x)}, {str("axis", "cp"), i64("shift", 1), i64("tag", tag)}, loc);
  plan::KernelOp recv = kernel("recv", {arg("y", y)}, {str("axis", "cp"), i64("shift", n - 1), i64("tag", tag)}, loc);
  for (plan::KernelOp k : {send, recv}) {
    k->setAttr("plan.payload", b.getStringAttr(payload));
    plan::setCollectiveOrigin(k, CollectiveOrigin::ContextParallel);
  }
}

namespace {
/// The buffers ring steps 1 .. n - 1 receive into, used in turn. Three (or
/// n - 1, when fewer steps): the one step j sends (received at j - 1), the
/// one it receives into, and the one the next step receives into, which
/// nothing in flight touches any more when step j's transfers start, so
/// llcdist-plan-cp-ring-overlap can start step j + 1's transfers during
/// step j's attention.
struct RingSlots {
  SmallVector<Buf, 3> bufs;
  Buf at(int64_t j) const { return bufs[size_t((j - 1) % int64_t(bufs.size()))]; }
};

/// Makes a scratch buffer.
using BufferFactory = std::function<Buf(std::string, Type)>;

RingSlots ringSlots(const BufferFactory &make, const std::string &name, StringRef what, Type type, int64_t n) {
  RingSlots r;
  for (int64_t i = 0; i < std::min<int64_t>(n - 1, 3); ++i)
    r.bufs.push_back(make(name + ".ring_" + what.str() + std::to_string(i), type));
  return r;
}
} // namespace

SmallVector<NamedAttribute> OpLowering::ringBlockAttrs(Operation *attention, Value q, int64_t nh, int64_t nkv,
                                                       int64_t hd, int64_t step) {
  return withAttentionBias(attention, {i64("B", dim(q, 0)), i64("S", dim(q, 1)), i64("nh", nh), i64("nkv", nkv),
                                       i64("hd", hd), str("axis", "cp"), i64("step", step)});
}

LogicalResult OpLowering::ringAttentionForward(AttentionOp at, Scope &s, Buf out, Buf lse, Location loc) {
  const int64_t n = at->getAttrOfType<IntegerAttr>("xf.cp_ring").getInt();
  const int64_t nh = at.getNumHeads(), nkv = at.getNumKvHeads(), hd = at.getHeadDim();
  Buf q = use(s, at.getQ()), k = use(s, at.getK()), v = use(s, at.getV());
  kernel("attention_block_fwd", {arg("q", q), arg("k", k), arg("v", v), arg("out", out), arg("lse", lse)},
         ringBlockAttrs(at, at.getQ(), nh, nkv, hd, 0), loc);
  std::string name = label(at, s);
  BufferFactory scratch = [&](std::string n, Type t) { return newBuffer(std::move(n), "scratch", t); };
  RingSlots ks = ringSlots(scratch, name, "k", at.getK().getType(), n);
  RingSlots vs = ringSlots(scratch, name, "v", at.getV().getType(), n);
  Buf blockOut = newBuffer(name + ".ring_out", "scratch", at.getResult().getType());
  Buf blockLse = newBuffer(name + ".ring_lse", "scratch", pb.bufferOp(lse).getType());
  SmallVector<NamedAttribute> mergeAttrs{i64("B", dim(at.getQ(), 0)), i64("S", dim(at.getQ(), 1)), i64("nh", nh),
                                         i64("hd", hd)};
  Buf curK = k, curV = v;
  for (int64_t j = 1; j < n; ++j) {
    ringShift(curK, ks.at(j), n, 2 * j, "activations", loc);
    ringShift(curV, vs.at(j), n, 2 * j + 1, "activations", loc);
    curK = ks.at(j);
    curV = vs.at(j);
    kernel("attention_block_fwd",
           {arg("q", q), arg("k", curK), arg("v", curV), arg("out", blockOut), arg("lse", blockLse)},
           ringBlockAttrs(at, at.getQ(), nh, nkv, hd, j), loc);
    kernel("attention_merge", {arg("out", out), arg("lse", lse), arg("out_b", blockOut), arg("lse_b", blockLse)},
           mergeAttrs, loc);
  }
  return success();
}

LogicalResult OpLowering::ringAttentionBackward(AttentionGradOp g, Scope &s, Buf dq, Buf dk, Buf dv, Location loc) {
  const int64_t n = g->getAttrOfType<IntegerAttr>("xf.cp_ring").getInt();
  const int64_t nh = g.getNumHeads(), nkv = g.getNumKvHeads(), hd = g.getHeadDim();
  Buf k = use(s, g.getK()), v = use(s, g.getV());
  SmallVector<NamedAttribute> fixed{arg("dout", use(s, g.getDout())), arg("q", use(s, g.getQ())),
                                    arg("out", use(s, g.getOut())), arg("lse", use(s, g.getLse())), arg("dq", dq)};
  auto block = [&](Buf kb, Buf vb, Buf dkb, Buf dvb, int64_t j) {
    SmallVector<NamedAttribute> args(fixed);
    args.append({arg("k", kb), arg("v", vb), arg("dk", dkb), arg("dv", dvb)});
    kernel("attention_block_bwd", args, ringBlockAttrs(g, g.getQ(), nh, nkv, hd, j), loc);
  };
  kernel("fill_zero", {arg("x", b.getArrayAttr({dq, dk, dv}))}, {}, loc);
  block(k, v, dk, dv, 0);
  std::string name = label(g, s);
  BufferFactory scratch = [&](std::string n, Type t) { return newBuffer(std::move(n), "scratch", t); };
  RingSlots ks = ringSlots(scratch, name, "k", g.getK().getType(), n);
  RingSlots vs = ringSlots(scratch, name, "v", g.getV().getType(), n);
  RingSlots dks = ringSlots(scratch, name, "dk", g.getDk().getType(), n);
  RingSlots dvs = ringSlots(scratch, name, "dv", g.getDv().getType(), n);
  Buf cur[4] = {k, v, dk, dv};
  for (int64_t j = 1; j < n; ++j) {
    Buf next[4] = {ks.at(j), vs.at(j), dks.at(j), dvs.at(j)};
    for (int i = 0; i < 4; ++i)
      ringShift(cur[i], next[i], n, 4 * j + i, i < 2 ? "activations" : "activation gradients", loc);
    std::copy(std::begin(next), std::end(next), std::begin(cur));
    block(cur[0], cur[1], cur[2], cur[3], j);
  }
  // Home: the block each rank holds now is its successor's.
  ringShift(cur[2], dk, n, 4 * n, "activation gradients", loc);
  ringShift(cur[3], dv, n, 4 * n + 1, "activation gradients", loc);
  return success();
}
