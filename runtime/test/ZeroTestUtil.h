// Test helpers for ZeRO plans (docs/plan-format.md "ZeRO plans"): a plan of params only (every ZeRO stage,
// with and without a tp `sharding`), and a one-layer LM trained with ZeRO stage 1, 2 or 3 over dp the way
// the compiler lowers it (reduce_scatter of the gradients, the norm over the blocks with an all_reduce
// over dp, AdamW on blocks, shard_slice + all_gather for stages 1/2, all_gather of the param blocks before use for
// stage 3). With cp > 1 both are context-parallel and ZeRO (and every data-parallel collective) runs over
// the set "dp+cp", Megatron's data-parallel group under context parallelism.
#pragma once

#include "PlanTestUtil.h"

#include <string>
#include <vector>

namespace llcdist::rt::testing {

// cp > 1: mesh.cp and the feature "context_parallel" (an `order` then names all four axes).
inline void setMesh(PlanBuilder& p, int64_t dp, int64_t tp, const std::vector<std::string>& order = {},
                    int64_t cp = 1) {
  const int64_t B = p.manifest["batch"]["micro_batch"], M = p.manifest["batch"]["microbatches"];
  p.manifest["batch"]["dp"] = dp;
  p.manifest["batch"]["global_batch"] = B * M * dp;
  p.manifest["mesh"] = {{"dp", dp}, {"tp", tp}, {"pp", 1}};
  if (cp > 1) {
    p.manifest["mesh"]["cp"] = cp;
    p.manifest["features"].push_back("context_parallel");
  }
  if (!order.empty()) p.manifest["mesh"]["rank_order"] = order;
  json ranks = json::array();
  for (int64_t r = 0; r < dp * tp * cp; ++r) ranks.push_back(r);
  p.manifest["programs"][0]["ranks"] = ranks;
}

// The ZeRO axis of the helpers' plans: dp, or with context parallelism the set dp+cp.
inline std::string zeroAxis(int64_t cp) { return cp > 1 ? "dp+cp" : "dp"; }

// The params of zeroParamsPlan: name, HF shape, the tp sharding (when sharded), init std, whether the
// param gets a "zero" (wpe stays plain: a plan may mix both).
struct ZeroTestParam {
  std::string name;
  std::vector<int64_t> shape;
  json sharding;  // null: replicated over tp
  double std;
  bool zero;
};

// `padded`: ln_1.bias [7] and lm_head [18, 4], whose rows no dp > 1 of 2 and 4 divides both of (padded
// ZeRO blocks of ceil(rows / dp) rows; on dp = 4 lm_head's last block holds 3 real rows of 5, the bias's
// 1 of 2).
inline std::vector<ZeroTestParam> zeroTestParams(bool shard, bool padded = false) {
  const int64_t V = 16, H = 4, L = 8, Lb = padded ? 7 : L, Vlm = padded ? 18 : V;
  return {
      {"transformer.wte.weight", {V, H}, shard ? json{{"axis", "tp"}, {"dim", 0}} : json(), 0.02, true},
      // Sharded on dim 1 (per head, blocks 3) while ZeRO splits dim 0 of the shard: the held elements
      // are not one contiguous range of the global tensor.
      {"transformer.h.0.attn.c_attn.weight", {H, 3 * H},
       shard ? json{{"axis", "tp"}, {"dim", 1}, {"blocks", 3}} : json(), 1.0, true},
      {"transformer.h.0.ln_1.bias", {Lb}, json(), 0.5, true},
      {"transformer.wpe.weight", {L, H}, json(), 0.1, false},
      {"lm_head.weight", {Vlm, H}, json(), 0.5, true},
  };
}

struct ZeroParamsConfig {
  int64_t dp = 2, tp = 1;
  int64_t stage = 3;    // 0: no "zero" at all (and no feature)
  bool shard = false;   // shard wte and c_attn over tp
  std::vector<std::string> order = {};
  bool padded = false;  // zeroTestParams(shard, padded)
  int64_t cp = 1;       // > 1: ZeRO over "dp+cp" (dp·cp blocks)
};

// Shapes a ZeRO param's buffers have: the local shard (L), and the block (L with dim 0 / dp·cp).
inline std::vector<int64_t> localShapeOf(const ZeroTestParam& p, int64_t tp) {
  std::vector<int64_t> s = p.shape;
  if (!p.sharding.is_null()) s[size_t(p.sharding["dim"].get<int64_t>())] /= tp;
  return s;
}

// Params only: every param's value and grad buffer in the shapes its stage implies, a loss metric and a
// step that only zeroes the loss (so a run checks every replica at --save-params and changes nothing).
inline PlanBuilder zeroParamsPlan(const ZeroParamsConfig& c) {
  PlanBuilder p(16, 4, 1, 1);
  if (c.stage > 0) p.manifest["features"] = {"zero"};
  setMesh(p, c.dp, c.tp, c.order, c.cp);
  const int64_t n = c.dp * c.cp;  // the ZeRO group's members
  int64_t i = 0;
  for (const ZeroTestParam& zp : zeroTestParams(c.shard, c.padded)) {
    const std::vector<int64_t> local = localShapeOf(zp, c.tp);
    std::vector<int64_t> block = local;
    const bool zero = zp.zero && c.stage > 0;
    if (zero) block[0] = (block[0] + n - 1) / n;  // padded when n does not divide the rows
    const int64_t buf = p.buffer(zp.name, "param", zero && c.stage >= 3 ? block : local);
    const int64_t grad = p.buffer(zp.name + ".grad", "grad", zero && c.stage >= 2 ? block : local);
    p.param(zp.name, zp.shape, buf, grad, {{"kind", "normal"}, {"std", zp.std}}, zp.shape.size() > 1);
    if (!zp.sharding.is_null()) p.manifest["params"][size_t(i)]["sharding"] = zp.sharding;
    if (zero) p.manifest["params"][size_t(i)]["zero"] = {{"axis", zeroAxis(c.cp)}, {"stage", c.stage}};
    if (zero && local[0] % n != 0) p.manifest["params"][size_t(i)]["zero"]["block_rows"] = block[0];
    ++i;
  }
  const int64_t loss = p.buffer("loss", "metric", {1});
  p.op("step_begin", "fill_zero", {{"x", {loss}}});
  p.action("step_begin");
  return p;
}

// oneLayerPlan's model (V 32, H 16, T 8; embedding -> lm_head -> cross entropy, AdamW, clipping at 1)
// on dp ranks with ZeRO stage `stage` over dp, B sequences per microbatch and M microbatches per rank:
//  - stage 1: full grads accumulated per microbatch; the optimizer reduce-scatters them into blocks,
//    cuts the rank's block out of each param (shard_slice), updates it and all-gathers the blocks back;
//  - stage 2: each microbatch's full gradient is reduce-scattered into the block grad (accumulate);
//    the optimizer as in stage 1;
//  - stage 3: as stage 2, and the param buffers hold blocks, all-gathered into full activations before
//    the forward uses them (the backward uses the same gathered copies).
// The reduce-scatters sum, so the cross entropy backward scales by 1/(B·T·M·dp) (the average over dp);
// the loss metric is averaged over dp. The norm counts the blocks once each: grad_norm_sq of the blocks,
// all_reduce (f64) over dp, grad_norm_clip. With cp > 1 each rank holds T/cp positions of its samples
// (a per-token model: no attention) and "dp" above reads "dp+cp" (dp·cp blocks).
inline PlanBuilder zeroOneLayerPlan(int64_t stage, int64_t dp, int64_t B, int64_t M, int64_t cp = 1) {
  const int64_t V = 32, H = 16, T = 8, S = T / cp, N = B * S, n = dp * cp;
  const std::string axis = zeroAxis(cp);
  PlanBuilder p(V, T, B, M);
  p.manifest["features"] = {"zero"};
  setMesh(p, dp, 1, {}, cp);
  const std::vector<int64_t> full = {V, H}, block = {V / n, H};
  const int64_t blockN = V / n * H;
  struct W {
    int64_t value, grad, m, v, use, mb, part, shard, gshard;
  };
  auto weight = [&](const std::string& name) {
    W w;
    w.value = p.buffer(name, "param", stage >= 3 ? block : full);
    w.grad = p.buffer(name + ".grad", "grad", stage >= 2 ? block : full);
    w.m = p.buffer(name + ".exp_avg", "optimizer_state", block);
    w.v = p.buffer(name + ".exp_avg_sq", "optimizer_state", block);
    w.use = stage >= 3 ? p.buffer(name + ".gathered", "activation", full) : w.value;
    w.mb = stage >= 2 ? p.buffer(name + ".grad_mb", "scratch", full) : -1;
    w.part = stage >= 2 ? p.buffer(name + ".grad_part", "scratch", block) : -1;
    w.shard = stage <= 2 ? p.buffer(name + ".shard", "scratch", block) : w.value;
    w.gshard = stage == 1 ? p.buffer(name + ".grad_shard", "scratch", block) : w.grad;
    return w;
  };
  const W wte = weight("transformer.wte.weight"), lm = weight("lm_head.weight");
  const int64_t ids = p.buffer("ids", "input", {B, S}, "i32"), tgt = p.buffer("targets", "input", {B, S}, "i32");
  const int64_t h = p.buffer("h", "activation", {N, H}), dh = p.buffer("dh", "activation", {N, H});
  const int64_t logits = p.buffer("logits", "activation", {N, V});
  const int64_t loss = p.buffer("loss", "metric", {1}), gn = p.buffer("grad_norm", "metric", {});
  const json zero = {{"axis", axis}, {"stage", stage}};
  p.param("transformer.wte.weight", full, wte.value, wte.grad, {{"kind", "normal"}, {"std", 0.02}}, false);
  p.param("lm_head.weight", full, lm.value, lm.grad, {{"kind", "normal"}, {"std", 0.02}}, true);
  for (json& prm : p.manifest["params"]) prm["zero"] = zero;
  auto gather = [&](const std::string& sub, int64_t x, int64_t y) {
    p.op(sub, "all_gather", {{"x", x}, {"y", y}}, {{"axis", axis}, {"outer", 1}, {"inner", blockN}});
  };
  const double mb = double(M);
  p.op("step_begin", "fill_zero", {{"x", {loss, wte.grad, lm.grad}}});
  p.op("forward", "load_microbatch", {{"ids", ids}, {"targets", tgt}}, {{"B", B}, {"S", S}});
  if (stage >= 3) {
    gather("forward", wte.value, wte.use);
    gather("forward", lm.value, lm.use);
  }
  p.op("forward", "embedding_fwd", {{"ids", ids}, {"table", wte.use}, {"out", h}}, {{"M", N}, {"V", V}, {"H", H}});
  p.op("forward", "linear_fwd", {{"x", h}, {"w", lm.use}, {"y", logits}},
       {{"M", N}, {"K", H}, {"N", V}, {"layout", "out_in"}});
  p.op("forward", "cross_entropy_fwd", {{"logits", logits}, {"targets", tgt}, {"loss", loss}},
       {{"M", N}, {"V", V}, {"scale", 1.0 / mb}});
  p.op("backward", "cross_entropy_bwd", {{"logits", logits}, {"targets", tgt}, {"dlogits", logits}},
       {{"M", N}, {"V", V}, {"scale", 1.0 / (double(N) * mb * double(n))}});
  const bool perMb = stage >= 2;
  p.op("backward", "linear_bwd_weight", {{"dy", logits}, {"x", h}, {"dw", perMb ? lm.mb : lm.grad}},
       {{"M", N}, {"K", H}, {"N", V}, {"layout", "out_in"}, {"accumulate", !perMb}});
  p.op("backward", "linear_bwd_input", {{"dy", logits}, {"w", lm.use}, {"dx", dh}},
       {{"M", N}, {"K", H}, {"N", V}, {"layout", "out_in"}, {"accumulate", false}});
  p.op("backward", "embedding_bwd_weight", {{"ids", ids}, {"dout", dh}, {"dtable", perMb ? wte.mb : wte.grad}},
       {{"M", N}, {"V", V}, {"H", H}, {"accumulate", !perMb}});
  if (perMb)
    for (const W* w : {&lm, &wte}) {
      p.op("backward", "reduce_scatter", {{"x", w->mb}, {"y", w->part}},
           {{"axis", axis}, {"outer", 1}, {"inner", blockN}, {"op", "sum"}});
      p.op("backward", "accumulate", {{"x", w->part}, {"y", w->grad}}, {{"n", blockN}});
    }
  p.op("optimizer", "all_reduce", {{"x", {loss}}}, {{"axis", axis}, {"op", "avg"}});
  if (stage == 1)
    for (const W* w : {&wte, &lm})
      p.op("optimizer", "reduce_scatter", {{"x", w->grad}, {"y", w->gshard}},
           {{"axis", axis}, {"outer", 1}, {"inner", blockN}, {"op", "sum"}});
  const int64_t sq = p.buffer("grad_norm.sq", "scratch", {1}, "f64");
  p.op("optimizer", "grad_norm_sq", {{"grads", {wte.gshard, lm.gshard}}, {"sq", sq}});
  p.op("optimizer", "all_reduce", {{"x", {sq}}}, {{"axis", axis}, {"op", "sum"}});
  p.op("optimizer", "grad_norm_clip", {{"sq", sq}, {"grads", {wte.gshard, lm.gshard}}, {"norm", gn}}, {{"max_norm", 1.0}});
  for (const auto& [w, wd] : {std::pair{&wte, 0.0}, std::pair{&lm, 0.1}}) {
    if (stage <= 2)
      p.op("optimizer", "shard_slice", {{"x", w->value}, {"y", w->shard}}, {{"axis", axis}, {"outer", 1}, {"inner", blockN}});
    p.op("optimizer", "adamw", {{"param", w->shard}, {"grad", w->gshard}, {"m", w->m}, {"v", w->v}},
         {{"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", wd}});
    if (stage <= 2) gather("optimizer", w->shard, w->value);
  }
  p.action("step_begin");
  for (int64_t j = 0; j < M; ++j) {
    p.action("forward", j);
    p.action("backward", j);
  }
  p.action("optimizer");
  return p;
}

}  // namespace llcdist::rt::testing
