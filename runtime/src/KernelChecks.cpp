// The kernels' shared host-side preconditions (KernelChecks.h).
#include "llcdist/runtime/KernelChecks.h"

#include <array>
#include <string>

namespace llcdist::rt {

Status checkVocabShard(const VocabShard& shard) {
  if (shard.count < 1 || shard.index < 0 || shard.index >= shard.count)
    return Status::invalidArgument("embedding: vocabulary shard " + std::to_string(shard.index) + " of " +
                                   std::to_string(shard.count) + " is invalid");
  return Status::ok();
}

Status checkPositionRange(int64_t S, int64_t P, int64_t begin) {
  if (begin < 0)
    return Status::invalidArgument("position embedding: first position " + std::to_string(begin) + " is negative");
  if (begin == 0 && S > P)
    return Status::invalidArgument("position embedding: sequence length " + std::to_string(S) +
                                   " exceeds the table's " + std::to_string(P) + " positions");
  if (S > P - begin)
    return Status::invalidArgument("position embedding: positions [" + std::to_string(begin) + ", " +
                                   std::to_string(begin + S) + ") (sequence shard of length " + std::to_string(S) +
                                   ") exceed the table's " + std::to_string(P) + " positions");
  return Status::ok();
}

Status checkPositionRuns(int64_t S, int64_t P, const PositionRuns& pos) {
  const int64_t n1 = pos.firstRows(S);
  if (n1 == S) return checkPositionRange(S, P, pos.first);  // one run
  if (n1 > 0) LLCDIST_RETURN_IF_ERROR(checkPositionRange(n1, P, pos.first));
  return checkPositionRange(S - n1, P, pos.second);
}

Status checkRotaryDim(int64_t rotaryDim, int64_t hd) {
  if (rotaryDim == 0) return Status::ok();
  if (rotaryDim < 2 || rotaryDim % 2 != 0 || rotaryDim > hd)
    return Status::invalidArgument("rope: rotary_dim " + std::to_string(rotaryDim) +
                                   " must be even and in [2, hd = " + std::to_string(hd) + "]");
  return Status::ok();
}

Status checkRopeTable(const RopeTable& t, int64_t S, int64_t hd, int64_t rotaryDim) {
  LLCDIST_RETURN_IF_ERROR(checkRotaryDim(rotaryDim, hd));
  if (rotaryDim != 0 && rotaryDim != hd) {
    if (t.seqLen != S || t.headDim != rotaryDim)
      return Status::invalidArgument("rope: table is for S=" + std::to_string(t.seqLen) + ", rotary_dim=" +
                                     std::to_string(t.headDim) + " but the tensor has S=" + std::to_string(S) +
                                     ", rotary_dim=" + std::to_string(rotaryDim) + " (head_dim " +
                                     std::to_string(hd) + ")");
    return Status::ok();
  }
  if (t.seqLen != S || t.headDim != hd)
    return Status::invalidArgument("rope: table is for S=" + std::to_string(t.seqLen) +
                                   ", head_dim=" + std::to_string(t.headDim) +
                                   " but the tensor has S=" + std::to_string(S) + ", head_dim=" + std::to_string(hd));
  return Status::ok();
}

Status checkAttentionShape(int64_t B, int64_t S, int64_t nh, int64_t nkv, int64_t hd) {
  if (B <= 0 || S <= 0 || nh <= 0 || nkv <= 0 || hd <= 0)
    return Status::invalidArgument("attention: all of B, S, nh, nkv, hd must be positive");
  if (nh % nkv != 0)
    return Status::invalidArgument("attention: num_heads " + std::to_string(nh) +
                                   " is not a multiple of num_kv_heads " + std::to_string(nkv));
  return Status::ok();
}

Status checkAttentionWindow(int64_t window) {
  if (window < 0)
    return Status::invalidArgument("attention: window " + std::to_string(window) +
                                   " must be >= 1 (a sliding window) or 0 (none: plain causal)");
  return Status::ok();
}

Status checkAttentionAlibi(const Alibi& alibi, int64_t nh) {
  if (alibi.heads == 0 && alibi.head0 == 0) return Status::ok();
  if (alibi.heads < 0 || alibi.head0 < 0 || alibi.head0 + nh > alibi.heads)
    return Status::invalidArgument("attention: ALiBi heads [" + std::to_string(alibi.head0) + ", " +
                                   std::to_string(alibi.head0 + nh) + ") are not a slice of its " +
                                   std::to_string(alibi.heads) + " heads");
  return Status::ok();
}

Status checkAttentionBlockPositions(const PositionRuns& q, int64_t Sq, const PositionRuns& kv, int64_t Sk) {
  if (q.minAt(Sq) < 0 || kv.minAt(Sk) < 0 || q.split < 0 || kv.split < 0)
    return Status::invalidArgument("attention block: the rows' positions and the splits must be >= 0");
  const int64_t n1 = kv.firstRows(Sk);
  if (n1 > 0 && n1 < Sk && kv.second < kv.first + n1)
    return Status::invalidArgument("attention block: the key rows' second run starts at " + std::to_string(kv.second) +
                                   ", inside the first [" + std::to_string(kv.first) + ", " +
                                   std::to_string(kv.first + n1) + ") (key positions must increase)");
  return Status::ok();
}

Status checkArgElems(const KernelCall& c, std::string_view role, int64_t need) {
  const size_t r = c.role(role);
  if (r >= c.argElems.size() || c.argElems[r].empty()) return Status::ok();
  if (c.argElems[r][0] < need)
    return Status::invalidArgument(std::string(schema::opName(c.kind)) + ": " + std::string(role) + " holds " +
                                   std::to_string(c.argElems[r][0]) + " elements, the op needs " +
                                   std::to_string(need));
  return Status::ok();
}

namespace {
void* offsetBy(const KernelCall& c, std::string_view role, int64_t elems) {
  const size_t r = c.role(role);
  char* base = static_cast<char*>(c.ptr(r));
  return base ? base + elems * schema::elemTypeSize(c.type(r)) : nullptr;
}
}  // namespace

AttentionArgs attentionArgs(const KernelCall& c, const AttentionParams& p) {
  AttentionArgs a;
  a.in = qkvLayout(p.nh, p.nkv, p.hd, p.packedQkv);
  a.grad = qkvLayout(p.nh, p.nkv, p.hd, p.packedGrad);
  // The three at the layout's offsets into the packed role `whole`, or the three roles.
  auto three = [&](bool packed, const char* whole, const QkvLayout& l, std::array<const char*, 3> parts,
                   std::array<void**, 3> out) {
    const int64_t offsets[3] = {l.qOffset, l.kOffset, l.vOffset};
    for (size_t i = 0; i < 3; ++i) *out[i] = packed ? offsetBy(c, whole, offsets[i]) : c.ptr(c.role(parts[i]));
  };
  three(p.packedQkv, "qkv", a.in, {"q", "k", "v"}, {&a.q, &a.k, &a.v});
  if (c.kind == schema::OpKind::kAttentionBwd)
    three(p.packedGrad, "dqkv", a.grad, {"dq", "dk", "dv"}, {&a.dq, &a.dk, &a.dv});
  return a;
}

Status checkAttentionElems(const KernelCall& c, const AttentionParams& p) {
  const int64_t qElems = p.B * p.S * p.nh * p.hd, kvElems = p.B * p.S * p.nkv * p.hd;
  const int64_t packedElems = p.B * p.S * (p.nh + 2 * p.nkv) * p.hd;
  const bool bwd = c.kind == schema::OpKind::kAttentionBwd;
  auto qkv = [&](bool packed, const char* whole, std::array<const char*, 3> parts) -> Status {
    if (packed) return checkArgElems(c, whole, packedElems);
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, parts[0], qElems));
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, parts[1], kvElems));
    return checkArgElems(c, parts[2], kvElems);
  };
  LLCDIST_RETURN_IF_ERROR(qkv(p.packedQkv, "qkv", {"q", "k", "v"}));
  LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "out", qElems));
  if (bwd) {
    LLCDIST_RETURN_IF_ERROR(checkArgElems(c, "dout", qElems));
    LLCDIST_RETURN_IF_ERROR(qkv(p.packedGrad, "dqkv", {"dq", "dk", "dv"}));
  }
  return checkArgElems(c, "lse", p.B * p.nh * p.S);
}

Status checkAttentionBlockElems(const KernelCall& c, const AttentionParams& p) {
  const int64_t qElems = p.B * p.S * p.nh * p.hd, kvElems = p.B * p.S * p.nkv * p.hd, rows = p.B * p.nh * p.S;
  for (const char* role : {"q", "out", "dout", "dq", "out_b"}) LLCDIST_RETURN_IF_ERROR(checkArgElems(c, role, qElems));
  for (const char* role : {"k", "v", "dk", "dv"}) LLCDIST_RETURN_IF_ERROR(checkArgElems(c, role, kvElems));
  for (const char* role : {"lse", "lse_b"}) LLCDIST_RETURN_IF_ERROR(checkArgElems(c, role, rows));
  return Status::ok();
}

StatusOr<int64_t> checkShardSlice(const KernelCall& c, const LayoutParams& p) {
  const int64_t n = p.members, total = p.total > 0 ? p.total : n * p.inner;
  if (p.member < 0 || p.member >= n || total > n * p.inner || c.elems("x") != p.outer * total ||
      c.elems("y") != p.outer * p.inner)
    return Status::internal("shard_slice: member " + std::to_string(p.member) + " of " + std::to_string(n) +
                            " with x of " + std::to_string(c.elems("x")) + " and y of " + std::to_string(c.elems("y")) +
                            " elements does not match outer " + std::to_string(p.outer) + ", inner " +
                            std::to_string(p.inner) + ", total " + std::to_string(total));
  return total;
}

std::string moePermuteExpertError(int64_t token, int64_t id) {
  return "moe_permute: token " + std::to_string(token) + " is routed to expert id " + std::to_string(id) +
         ", outside [0, E)";
}

std::string moeSlotError(std::string_view op, int64_t token, int64_t slot) {
  return std::string(op) + ": token " + std::to_string(token) + " has slot " + std::to_string(slot) +
         ", outside [-1, N) (N the rows of xp; -1 a dropped assignment)";
}

}  // namespace llcdist::rt
