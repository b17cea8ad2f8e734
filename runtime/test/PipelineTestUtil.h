// Test helpers for pipeline plans (docs/plan-format.md "Pipeline plans"): a plan directory with one
// program per stage, and a tiny two-layer LM written both as one SPMD program and as a two-stage
// pipeline, so that the pipeline's trained parameters can be compared with the single program's.
#pragma once

#include "PlanTestUtil.h"

#include <string>
#include <vector>

namespace llcdist::rt::testing {

// A manifest plus one PlanBuilder per program (only each builder's `program` is used); programs[i] is
// written to program-i.json.
struct MultiProgramPlan {
  json manifest;
  std::vector<PlanBuilder> programs;

  void write(const fs::path& dir) const {
    writeText((dir / "manifest.json").string(), manifest.dump(2));
    for (size_t i = 0; i < programs.size(); ++i)
      writeText((dir / ("program-" + std::to_string(i) + ".json")).string(), programs[i].program.dump(2));
  }
};

// The model: ids -> embedding (wte [V,H]) -> linear w1 ([H,H], out_in) -> LM head ([V,H], out_in; the
// embedding table itself when `tied`) -> cross entropy; gradient accumulation over `microbatches`,
// global-norm clipping at `maxNorm`, SGD with momentum 0.9. With dp > 1 the grads and the loss are
// averaged over dp before the optimizer.
//
// As a pipeline (pp = 2, feature "pipeline"): stage 0 holds the embedding and w1 and sends the
// activation h2 (tag 0) to stage 1, which holds the head, computes the loss and sends back dh2 (tag 1).
// Each stage runs forward(j), backward(j) for every microbatch j, then its optimizer; grad_norm sums the
// stages' squared norms over pp (stageNorm). Tied: both stages hold a copy of wte; in the optimizer
// stage 1 sends its partial gradient (tag 2), stage 0 adds it to its own, counts and clips the sum in
// its grad_norm and sends the clipped sum back (tag 3), so both copies step identically (unless
// `syncTied` is false); stage 1's grad_norm then has no grads of its own.
struct TinyLm {
  int64_t V = 32, H = 16, T = 8, B = 2, microbatches = 2, dp = 1;
  bool tied = false;
  bool syncTied = true;
  double maxNorm = 1e-3;  // below the tiny model's gradient norm: clipping is active
  double lr = 0.1;
};

inline std::string kWteName() { return "transformer.wte.weight"; }

namespace detail {

inline void setCommon(PlanBuilder& p, const TinyLm& c, int64_t pp) {
  p.manifest["batch"]["dp"] = c.dp;
  p.manifest["batch"]["global_batch"] = c.B * c.microbatches * c.dp;
  p.manifest["mesh"] = {{"dp", c.dp}, {"tp", 1}, {"pp", pp}};
  p.manifest["optimizer"] = {{"kind", "sgd"}, {"momentum", 0.9}, {"weight_decay", 0.0}};
  p.manifest["lr_schedule"] = {{"kind", "constant"}, {"max_lr", c.lr}};
}

struct ParamBufs {
  int64_t value, grad, momentum;
};

inline ParamBufs paramBufs(PlanBuilder& p, const std::string& name, std::vector<int64_t> shape) {
  return {p.buffer(name, "param", shape), p.buffer("grad." + name, "grad", shape),
          p.buffer("momentum." + name, "optimizer_state", shape)};
}

inline json sgdOp(const ParamBufs& b) {
  return {{"op", "sgd"},
          {"args", {{"param", b.value}, {"grad", b.grad}, {"momentum_buf", b.momentum}}},
          {"attrs", {{"momentum", 0.9}, {"weight_decay", 0.0}}}};
}

inline json initNormal() { return {{"kind", "normal"}, {"std", 0.02}}; }

inline json param(const std::string& name, std::vector<int64_t> shape, json placements) {
  return {{"name", name}, {"shape", shape}, {"dtype", "f32"}, {"placements", std::move(placements)},
          {"init", initNormal()}, {"weight_decay", false}};
}

inline json p2p(const std::string& op, const char* role, int64_t buf, int64_t peer, int64_t tag) {
  return {{"op", op}, {"args", {{role, buf}}}, {"attrs", {{"axis", "pp"}, {"peer", peer}, {"tag", tag}}}};
}

// A stage's share of the global gradient norm as the compiler emits it: the local f64 squared norm of
// `grads` (none: 0), its all_reduce sum over pp, then the clip of `grads` with the global norm.
inline void stageNorm(PlanBuilder& p, const std::vector<int64_t>& grads, int64_t norm, double maxNorm) {
  const int64_t sq = p.buffer("grad_norm.sq", "scratch", {1}, "f64");
  json sqArgs = {{"sq", sq}}, clipArgs = {{"sq", sq}, {"norm", norm}};
  if (!grads.empty()) sqArgs["grads"] = clipArgs["grads"] = grads;
  p.op("optimizer", "grad_norm_sq", sqArgs);
  p.op("optimizer", "all_reduce", {{"x", {sq}}}, {{"axis", "pp"}, {"op", "sum"}});
  p.op("optimizer", "grad_norm_clip", clipArgs, {{"max_norm", maxNorm}});
}
}  // namespace detail

// The reference: one program that every rank runs (dp ranks).
inline PlanBuilder tinyLmSingle(const TinyLm& c) {
  PlanBuilder p(c.V, c.T, c.B, c.microbatches, "sgd");
  detail::setCommon(p, c, 1);
  json ranks = json::array();
  for (int64_t r = 0; r < c.dp; ++r) ranks.push_back(r);
  p.manifest["programs"][0]["ranks"] = ranks;
  const int64_t V = c.V, H = c.H, M = c.B * c.T;
  const double mb = double(c.microbatches);
  const detail::ParamBufs wte = detail::paramBufs(p, "wte", {V, H});
  const detail::ParamBufs w1 = detail::paramBufs(p, "w1", {H, H});
  const detail::ParamBufs lm = c.tied ? wte : detail::paramBufs(p, "lm", {V, H});
  const int64_t ids = p.buffer("ids", "input", {c.B, c.T}, "i32"), tgt = p.buffer("targets", "input", {c.B, c.T}, "i32");
  const int64_t h = p.buffer("h", "activation", {M, H}), h2 = p.buffer("h2", "activation", {M, H});
  const int64_t dh = p.buffer("dh", "activation", {M, H}), dh2 = p.buffer("dh2", "activation", {M, H});
  const int64_t logits = p.buffer("logits", "activation", {M, V});
  const int64_t loss = p.buffer("loss", "metric", {1}), gn = p.buffer("grad_norm", "metric", {});
  p.param(kWteName(), {V, H}, wte.value, wte.grad, detail::initNormal(), false);
  p.param("h.0.w1.weight", {H, H}, w1.value, w1.grad, detail::initNormal(), false);
  if (!c.tied) p.param("lm_head.weight", {V, H}, lm.value, lm.grad, detail::initNormal(), false);
  json grads = c.tied ? json{wte.grad, w1.grad} : json{wte.grad, w1.grad, lm.grad};
  json zero = grads;
  zero.insert(zero.begin(), loss);
  p.op("step_begin", "fill_zero", {{"x", zero}});
  p.op("forward", "load_microbatch", {{"ids", ids}, {"targets", tgt}}, {{"B", c.B}, {"S", c.T}});
  p.op("forward", "embedding_fwd", {{"ids", ids}, {"table", wte.value}, {"out", h}}, {{"M", M}, {"V", V}, {"H", H}});
  p.op("forward", "linear_fwd", {{"x", h}, {"w", w1.value}, {"y", h2}}, {{"M", M}, {"K", H}, {"N", H}, {"layout", "out_in"}});
  p.op("forward", "linear_fwd", {{"x", h2}, {"w", lm.value}, {"y", logits}},
       {{"M", M}, {"K", H}, {"N", V}, {"layout", "out_in"}});
  p.op("forward", "cross_entropy_fwd", {{"logits", logits}, {"targets", tgt}, {"loss", loss}},
       {{"M", M}, {"V", V}, {"scale", 1.0 / mb}});
  p.op("backward", "cross_entropy_bwd", {{"logits", logits}, {"targets", tgt}, {"dlogits", logits}},
       {{"M", M}, {"V", V}, {"scale", 1.0 / (double(M) * mb)}});
  p.op("backward", "linear_bwd_weight", {{"dy", logits}, {"x", h2}, {"dw", lm.grad}},
       {{"M", M}, {"K", H}, {"N", V}, {"layout", "out_in"}, {"accumulate", true}});
  p.op("backward", "linear_bwd_input", {{"dy", logits}, {"w", lm.value}, {"dx", dh2}},
       {{"M", M}, {"K", H}, {"N", V}, {"layout", "out_in"}, {"accumulate", false}});
  p.op("backward", "linear_bwd_weight", {{"dy", dh2}, {"x", h}, {"dw", w1.grad}},
       {{"M", M}, {"K", H}, {"N", H}, {"layout", "out_in"}, {"accumulate", true}});
  p.op("backward", "linear_bwd_input", {{"dy", dh2}, {"w", w1.value}, {"dx", dh}},
       {{"M", M}, {"K", H}, {"N", H}, {"layout", "out_in"}, {"accumulate", false}});
  p.op("backward", "embedding_bwd_weight", {{"ids", ids}, {"dout", dh}, {"dtable", wte.grad}},
       {{"M", M}, {"V", V}, {"H", H}, {"accumulate", true}});
  if (c.dp > 1) {
    p.op("optimizer", "all_reduce", {{"x", grads}}, {{"axis", "dp"}, {"op", "avg"}});
    p.op("optimizer", "all_reduce", {{"x", {loss}}}, {{"axis", "dp"}, {"op", "avg"}});
  }
  p.op("optimizer", "grad_norm", {{"grads", grads}, {"norm", gn}}, {{"max_norm", c.maxNorm}});
  p.ops("optimizer").push_back(detail::sgdOp(wte));
  p.ops("optimizer").push_back(detail::sgdOp(w1));
  if (!c.tied) p.ops("optimizer").push_back(detail::sgdOp(lm));
  p.action("step_begin");
  for (int64_t j = 0; j < c.microbatches; ++j) {
    p.action("forward", j);
    p.action("backward", j);
  }
  p.action("optimizer");
  return p;
}

// The same model as a two-stage pipeline (see TinyLm). Ranks: default order (tp, dp, pp), so stage s
// runs ranks [s·dp, (s+1)·dp).
inline MultiProgramPlan tinyLmPipeline(const TinyLm& c) {
  MultiProgramPlan plan;
  const int64_t V = c.V, H = c.H, M = c.B * c.T;
  const double mb = double(c.microbatches);
  PlanBuilder s0(c.V, c.T, c.B, c.microbatches, "sgd"), s1(c.V, c.T, c.B, c.microbatches, "sgd");
  detail::setCommon(s0, c, 2);
  plan.manifest = s0.manifest;
  plan.manifest["features"] = {"pipeline"};
  json programs = json::array();
  for (int64_t s = 0; s < 2; ++s) {
    json ranks = json::array();
    for (int64_t r = 0; r < c.dp; ++r) ranks.push_back(s * c.dp + r);
    programs.push_back({{"file", "program-" + std::to_string(s) + ".json"}, {"ranks", ranks}, {"stage", s}});
  }
  plan.manifest["programs"] = programs;

  // Stage 0: embedding and w1.
  const detail::ParamBufs wte = detail::paramBufs(s0, "wte", {V, H});
  const detail::ParamBufs w1 = detail::paramBufs(s0, "w1", {H, H});
  int64_t ids = s0.buffer("ids", "input", {c.B, c.T}, "i32"), tgt = s0.buffer("targets", "input", {c.B, c.T}, "i32");
  const int64_t h = s0.buffer("h", "activation", {M, H}), h2 = s0.buffer("h2", "activation", {M, H});
  const int64_t dh = s0.buffer("dh", "activation", {M, H}), dh2 = s0.buffer("dh2", "activation", {M, H});
  const int64_t gn0 = s0.buffer("grad_norm", "metric", {});
  const int64_t peerGrad = c.tied ? s0.buffer("grad.wte.from_stage1", "scratch", {V, H}) : -1;
  s0.op("step_begin", "fill_zero", {{"x", {wte.grad, w1.grad}}});
  s0.op("forward", "load_microbatch", {{"ids", ids}, {"targets", tgt}}, {{"B", c.B}, {"S", c.T}});
  s0.op("forward", "embedding_fwd", {{"ids", ids}, {"table", wte.value}, {"out", h}}, {{"M", M}, {"V", V}, {"H", H}});
  s0.op("forward", "linear_fwd", {{"x", h}, {"w", w1.value}, {"y", h2}}, {{"M", M}, {"K", H}, {"N", H}, {"layout", "out_in"}});
  s0.ops("forward").push_back(detail::p2p("send", "x", h2, 1, 0));
  s0.ops("backward").push_back(detail::p2p("recv", "y", dh2, 1, 1));
  s0.op("backward", "linear_bwd_weight", {{"dy", dh2}, {"x", h}, {"dw", w1.grad}},
        {{"M", M}, {"K", H}, {"N", H}, {"layout", "out_in"}, {"accumulate", true}});
  s0.op("backward", "linear_bwd_input", {{"dy", dh2}, {"w", w1.value}, {"dx", dh}},
        {{"M", M}, {"K", H}, {"N", H}, {"layout", "out_in"}, {"accumulate", false}});
  s0.op("backward", "embedding_bwd_weight", {{"ids", ids}, {"dout", dh}, {"dtable", wte.grad}},
        {{"M", M}, {"V", V}, {"H", H}, {"accumulate", true}});
  if (c.dp > 1) s0.op("optimizer", "all_reduce", {{"x", {wte.grad, w1.grad}}}, {{"axis", "dp"}, {"op", "avg"}});
  if (c.tied && c.syncTied) {
    s0.ops("optimizer").push_back(detail::p2p("recv", "y", peerGrad, 1, 2));
    s0.op("optimizer", "accumulate", {{"x", peerGrad}, {"y", wte.grad}}, {{"n", V * H}});
  }
  detail::stageNorm(s0, {wte.grad, w1.grad}, gn0, c.maxNorm);
  // The summed and clipped tied gradient goes back to stage 1's copy.
  if (c.tied && c.syncTied) s0.ops("optimizer").push_back(detail::p2p("send", "x", wte.grad, 1, 3));
  s0.ops("optimizer").push_back(detail::sgdOp(wte));
  s0.ops("optimizer").push_back(detail::sgdOp(w1));

  // Stage 1: the head (or the tied copy of wte), the loss.
  const detail::ParamBufs lm = detail::paramBufs(s1, c.tied ? "wte" : "lm", {V, H});
  ids = s1.buffer("ids", "input", {c.B, c.T}, "i32");
  tgt = s1.buffer("targets", "input", {c.B, c.T}, "i32");
  const int64_t x = s1.buffer("h2", "activation", {M, H}), dx = s1.buffer("dh2", "activation", {M, H});
  const int64_t logits = s1.buffer("logits", "activation", {M, V});
  const int64_t loss = s1.buffer("loss", "metric", {1}), gn1 = s1.buffer("grad_norm", "metric", {});
  s1.op("step_begin", "fill_zero", {{"x", {loss, lm.grad}}});
  s1.op("forward", "load_microbatch", {{"ids", ids}, {"targets", tgt}}, {{"B", c.B}, {"S", c.T}});
  s1.ops("forward").push_back(detail::p2p("recv", "y", x, 0, 0));
  s1.op("forward", "linear_fwd", {{"x", x}, {"w", lm.value}, {"y", logits}}, {{"M", M}, {"K", H}, {"N", V}, {"layout", "out_in"}});
  s1.op("forward", "cross_entropy_fwd", {{"logits", logits}, {"targets", tgt}, {"loss", loss}},
        {{"M", M}, {"V", V}, {"scale", 1.0 / mb}});
  s1.op("backward", "cross_entropy_bwd", {{"logits", logits}, {"targets", tgt}, {"dlogits", logits}},
        {{"M", M}, {"V", V}, {"scale", 1.0 / (double(M) * mb)}});
  s1.op("backward", "linear_bwd_weight", {{"dy", logits}, {"x", x}, {"dw", lm.grad}},
        {{"M", M}, {"K", H}, {"N", V}, {"layout", "out_in"}, {"accumulate", true}});
  s1.op("backward", "linear_bwd_input", {{"dy", logits}, {"w", lm.value}, {"dx", dx}},
        {{"M", M}, {"K", H}, {"N", V}, {"layout", "out_in"}, {"accumulate", false}});
  s1.ops("backward").push_back(detail::p2p("send", "x", dx, 0, 1));
  if (c.dp > 1) {
    s1.op("optimizer", "all_reduce", {{"x", {lm.grad}}}, {{"axis", "dp"}, {"op", "avg"}});
    s1.op("optimizer", "all_reduce", {{"x", {loss}}}, {{"axis", "dp"}, {"op", "avg"}});
  }
  if (c.tied && c.syncTied) s1.ops("optimizer").push_back(detail::p2p("send", "x", lm.grad, 0, 2));
  // The tied gradient is counted (and clipped) on stage 0: no grads of its own here.
  detail::stageNorm(s1, c.tied ? std::vector<int64_t>{} : std::vector<int64_t>{lm.grad}, gn1, c.maxNorm);
  if (c.tied && c.syncTied) s1.ops("optimizer").push_back(detail::p2p("recv", "y", lm.grad, 0, 3));
  s1.ops("optimizer").push_back(detail::sgdOp(lm));

  for (PlanBuilder* s : {&s0, &s1}) {
    s->action("step_begin");
    for (int64_t j = 0; j < c.microbatches; ++j) {
      s->action("forward", j);
      s->action("backward", j);
    }
    s->action("optimizer");
  }

  json params = json::array();
  json wtePl = json::array({{{"program", 0}, {"buffer", wte.value}, {"grad", wte.grad}}});
  if (c.tied) wtePl.push_back({{"program", 1}, {"buffer", lm.value}, {"grad", lm.grad}});
  params.push_back(detail::param(kWteName(), {V, H}, wtePl));
  params.push_back(detail::param("h.0.w1.weight", {H, H}, json::array({{{"program", 0}, {"buffer", w1.value}, {"grad", w1.grad}}})));
  if (!c.tied)
    params.push_back(detail::param("lm_head.weight", {V, H}, json::array({{{"program", 1}, {"buffer", lm.value}, {"grad", lm.grad}}})));
  plan.manifest["params"] = params;
  plan.programs = {std::move(s0), std::move(s1)};
  return plan;
}

}  // namespace llcdist::rt::testing
