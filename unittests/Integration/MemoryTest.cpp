//===- MemoryTest.cpp - recomputation, memory planning and ZeRO -----------===//
//
// Issue #6: every recompute mode (and ZeRO stage) reproduces the
// single-device run; the activations each mode keeps for the backward equal
// the analytic per-layer count; the memory plan's arena shrinks as it should.
//
//===----------------------------------------------------------------------===//
#include "GoldenUtil.h"
#include "MeasureUtil.h"

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/runtime/Plan.h"

#include <map>
#include <set>

using namespace llcdist;
namespace rt = llcdist::rt;

namespace {
struct Config {
  int64_t dp = 1, tp = 1, pp = 1;
  std::string recompute = "none";
  int64_t zero = 0;
  std::string name() const {
    return "dp" + std::to_string(dp) + "-tp" + std::to_string(tp) + "-pp" + std::to_string(pp) +
           "-" + recompute + (zero ? "-zero" + std::to_string(zero) : "");
  }
};

test::Trained train(const std::string &model, const Config &c, const std::string &optimizer,
                    int64_t microBatch) {
  TrainingPipelineOptions opt = test::goldenOptions(optimizer);
  opt.mesh.dp = c.dp;
  opt.mesh.tp = c.tp;
  opt.mesh.pp = c.pp;
  opt.recompute = c.recompute;
  opt.zero = c.zero;
  return test::trainPlan(model, opt, microBatch, c.name() + "-" + optimizer);
}

void goldenRecompute(const std::string &model, const std::string &optimizer) {
  test::Trained ref = test::trainPlan(model, test::goldenOptions(optimizer), 8,
                                      "recompute-reference-" + optimizer);
  for (const char *mode : {"selective", "full"})
    for (Config c : {Config{1, 1, 1}, Config{2, 2, 1}, Config{1, 1, 2}}) {
      c.recompute = mode;
      // Two microbatches per dp rank: recomputation across accumulation.
      test::expectSame(ref, train(model, c, optimizer, 8 / c.dp / 2),
                       model + " " + optimizer + " " + c.name(),
                       test::goldenTolerance(optimizer));
    }
}
} // namespace

TEST(Memory, RecomputeTinyGPT2) { goldenRecompute("tiny-gpt2", "sgd"); }
TEST(Memory, RecomputeTinyLlama) { goldenRecompute("tiny-llama", "sgd"); }
TEST(Memory, RecomputeTinyLlamaAdamW) { goldenRecompute("tiny-llama", "adamw"); }
// Phi's recomputed layer leaves out the most: both branches' projections
// and their tp all-reduces (RecomputedLayerRunsOnlyWhatTheBackwardReads).
TEST(Memory, RecomputeTinyPhi) { goldenRecompute("tiny-phi", "sgd"); }

namespace {
/// Bytes of layer 1's activation buffers that the forward writes and the
/// backward reads (one microbatch, one device or one rank of a cp group):
/// what the layer keeps for its backward.
int64_t savedBytesOfLayer1(const std::string &recompute, int64_t cp = 1, const std::string &cpImpl = "all-to-all") {
  TrainingShape shape;
  shape.seqLen = 16;
  shape.microBatch = 2;
  shape.globalBatch = 2;
  TrainingPipelineOptions opt;
  opt.recompute = recompute;
  opt.mesh.cp = cp;
  opt.cpImpl = cpImpl;
  std::string dir =
      test::compilePlan("tiny-llama", shape, opt, "saved-" + recompute + "-cp" + std::to_string(cp) + "-" + cpImpl);
  EXPECT_FALSE(dir.empty());
  auto plan = rt::loadPlan(dir);
  EXPECT_TRUE(plan.isOk()) << plan.status().toString();
  std::filesystem::remove_all(dir);
  if (!plan.isOk())
    return -1;
  const rt::Program &prog = plan->programs[0];
  auto touched = [&](const std::string &sub) {
    std::set<int64_t> ids;
    for (const rt::Subroutine &s : prog.subroutines)
      if (s.name == sub)
        for (const rt::Op &op : s.ops)
          for (const auto &arg : op.args)
            ids.insert(arg.begin(), arg.end());
    return ids;
  };
  std::set<int64_t> fwd = touched("forward"), bwd = touched("backward");
  int64_t bytes = 0;
  for (int64_t id : fwd) {
    const rt::BufferDesc &b = prog.buffers[id];
    if (bwd.count(id) && b.kind == rt::schema::BufferKind::kActivation &&
        b.name.rfind("model.layers.1.", 0) == 0)
      bytes += b.bytes;
  }
  return bytes;
}
} // namespace

// tiny Llama: b = 2, s = 16, h = 64, kv width h_kv = 32 (4 of 8 heads),
// intermediate i = 128, a = 8 heads, f32. What one layer keeps for its
// backward (its output counted here, as the next layer's input):
//  none: the norm outputs and the post-attention residual and the output
//    (4 b·s·h), q after RoPE and the attention output (2 b·s·h), k after RoPE
//    and v (2 b·s·h_kv), gate, up and their SwiGLU product (3 b·s·i), the two
//    norms' rstd (2 b·s) and the attention's log-sum-exp (b·a·s);
//  selective: none minus the attention output and its log-sum-exp, which the
//    backward recomputes from q, k, v;
//  full: only the output (the next layer's input; the layer's own input is
//    the previous layer's output).
TEST(Memory, SavedActivationsPerLayerMatchTheAnalyticCount) {
  const int64_t b = 2, s = 16, h = 64, hkv = 32, i = 128, a = 8, f32 = 4;
  const int64_t none = (6 * b * s * h + 2 * b * s * hkv + 3 * b * s * i + 2 * b * s + b * a * s) * f32;
  EXPECT_EQ(savedBytesOfLayer1("none"), none);
  EXPECT_EQ(savedBytesOfLayer1("selective"), none - (b * s * h + b * a * s) * f32);
  EXPECT_EQ(savedBytesOfLayer1("full"), b * s * h * f32);
}

// Context parallelism (issue #32): with everything else fixed, each rank of
// a cp group keeps exactly 1/cp of those bytes. Every token-wise activation
// holds s/cp tokens; the attention core's (q and k after RoPE, v, the
// output, the log-sum-exp) hold the whole sequence but a/cp heads under
// all-to-all, and the rank's s/cp tokens and all heads under the ring
// (whose k/v blocks in transit are scratch, live only during attention).
TEST(Memory, SavedActivationsPerRankScaleAsOneOverCp) {
  const int64_t b = 2, s = 16, h = 64, hkv = 32, i = 128, a = 8, f32 = 4;
  const int64_t none = (6 * b * s * h + 2 * b * s * hkv + 3 * b * s * i + 2 * b * s + b * a * s) * f32;
  const int64_t selective = none - (b * s * h + b * a * s) * f32;
  for (const char *impl : {"all-to-all", "ring"})
    for (int64_t cp : {1, 2, 4}) {
      EXPECT_EQ(savedBytesOfLayer1("none", cp, impl), none / cp) << impl << " cp=" << cp;
      EXPECT_EQ(savedBytesOfLayer1("selective", cp, impl), selective / cp) << impl << " cp=" << cp;
      EXPECT_EQ(savedBytesOfLayer1("full", cp, impl), b * s * h * f32 / cp) << impl << " cp=" << cp;
    }
  EXPECT_EQ(savedBytesOfLayer1("none", 8, "ring"), none / 8); // one token per chunk
}

// The arena (the plan's peak) shrinks with recomputation, with a longer
// sequence so activations dominate: none > selective > full.
TEST(Memory, RecomputeShrinksTheArena) {
  auto arena = [](const std::string &recompute) {
    TrainingShape shape;
    shape.seqLen = 64;
    shape.microBatch = 4;
    shape.globalBatch = 8;
    TrainingPipelineOptions opt;
    opt.recompute = recompute;
    std::string dir = test::compilePlan("tiny-llama", shape, opt, "arena-" + recompute);
    auto plan = rt::loadPlan(dir);
    std::filesystem::remove_all(dir);
    return plan.isOk() ? plan->programs[0].arenaBytes : int64_t(-1);
  };
  int64_t none = arena("none"), selective = arena("selective"), full = arena("full");
  EXPECT_GT(none, selective);
  EXPECT_GT(selective, full);
  EXPECT_GT(full, 0);
}

namespace {
using test::compileModule;
using test::plannedMemory;

mlir::DialectRegistry &registry() {
  static mlir::DialectRegistry r = [] {
    mlir::DialectRegistry reg;
    registerAllDialects(reg);
    return reg;
  }();
  return r;
}
} // namespace

// A fully recomputed layer runs only what its backward reads: the kernels
// full recomputation adds to the step (over --recompute none, at tp = 2)
// are each layer's forward without the projections whose outputs only the
// residual stream adds, their all-reduces and the last add. Per layer, from
// each architecture: GPT-2 runs 3 of its 4 linears again (not the MLP's
// c_proj) and 1 of its 2 row-parallel all-reduces; Llama 6 of 7 (not
// down_proj); Phi 4 of 6 and none of its 2 all-reduces (dense and fc2 only
// add into the stream); Mixtral all 5 linears (q, k, v, o, the router), its
// 3 grouped expert GEMMs and its attention's all-reduce, but not the
// experts' weighted combine (its weight gradient reads the experts' rows,
// not its output); Qwen2-MoE its 9 linears (the shared expert's 3 and gate
// too: the gate's gradient reads the shared output) and both all-reduces,
// but neither the combine nor the shared expert's sigmoid gating.
TEST(Memory, RecomputedLayerRunsOnlyWhatTheBackwardReads) {
  struct Case {
    const char *model;
    std::map<std::string, int64_t> perLayer; // kernels added per layer
  };
  const Case cases[] = {
      {"tiny-gpt2", {{"linear_fwd", 3}, {"all_reduce", 1}, {"add", 0}}},
      {"tiny-llama", {{"linear_fwd", 6}, {"all_reduce", 1}, {"add", 0}}},
      {"tiny-phi", {{"linear_fwd", 4}, {"all_reduce", 0}, {"add", 0}, {"bias_add", 0}}},
      {"tiny-mixtral",
       {{"linear_fwd", 5}, {"grouped_linear_fwd", 3}, {"all_reduce", 1}, {"moe_unpermute", 0}, {"add", 0}}},
      {"tiny-qwen2-moe",
       {{"linear_fwd", 9}, {"all_reduce", 2}, {"moe_unpermute", 0}, {"sigmoid_gate_fwd", 0}, {"add", 0}}},
  };
  for (const Case &c : cases) {
    std::map<std::string, int64_t> count[2];
    int64_t layers = 0;
    for (int full = 0; full < 2; ++full) {
      mlir::MLIRContext ctx(registry());
      TrainingShape shape;
      shape.seqLen = 16;
      shape.microBatch = 1;
      shape.globalBatch = 1;
      TrainingPipelineOptions opt;
      opt.mesh.tp = 2;
      opt.recompute = full ? "full" : "none";
      auto m = compileModule(ctx, c.model, shape, opt);
      ASSERT_TRUE(m) << c.model << " " << opt.recompute;
      m->walk([&](plan::KernelOp k) { ++count[full][k.getKernel().str()]; });
      auto model = (*m)->getAttrOfType<mlir::DictionaryAttr>(xf::kModelAttr);
      layers = model.getAs<mlir::IntegerAttr>("num_layers").getInt();
    }
    ASSERT_GT(layers, 0);
    for (const auto &[kernel, n] : c.perLayer)
      EXPECT_EQ(count[1][kernel] - count[0][kernel], n * layers) << c.model << ": " << kernel;
  }
}

// The model state per rank against the ZeRO paper (Rajbhandari et al., §3):
// mixed-precision Adam holds 2Ψ of bf16 parameters, 2Ψ of bf16 gradients and
// K·Ψ = 12Ψ of f32 master weights, momentum and variance; stage 1 shards the
// 12Ψ over N_d ranks (4Ψ + 12Ψ/N_d), stage 2 also the gradients
// (2Ψ + 14Ψ/N_d), stage 3 also the parameters (16Ψ/N_d). Ψ = tiny Llama's
// 180,800 parameters (every first dimension divides by 2 and 4, so no
// padding). Counted from the compiled plan's buffers (plan.memory: exact
// tensor bytes per kind; the f32 master counts as optimizer state).
TEST(Memory, ZeroModelStateMatchesThePaper) {
  const int64_t psi = 180800;
  for (int64_t nd : {2, 4})
    for (int64_t stage : {0, 1, 2, 3}) {
      mlir::MLIRContext ctx(registry());
      TrainingShape shape;
      shape.seqLen = 8;
      shape.microBatch = 1;
      shape.globalBatch = nd;
      shape.dtype = "bf16";
      TrainingPipelineOptions opt;
      opt.mesh.dp = nd;
      opt.zero = stage;
      auto m = compileModule(ctx, "tiny-llama", shape, opt);
      ASSERT_TRUE(m) << "dp=" << nd << " zero=" << stage;
      auto mem = plannedMemory(*m);
      ASSERT_EQ(mem.size(), 1u);
      int64_t params = mem[0]["param"], grads = mem[0]["grad"],
              state = mem[0]["optimizer_state"];
      std::string what = "N_d=" + std::to_string(nd) + " stage " + std::to_string(stage);
      EXPECT_EQ(params, stage >= 3 ? 2 * psi / nd : 2 * psi) << what;
      EXPECT_EQ(grads, stage >= 2 ? 2 * psi / nd : 2 * psi) << what;
      EXPECT_EQ(state, stage >= 1 ? 12 * psi / nd : 12 * psi) << what;
      int64_t total = params + grads + state;
      int64_t paper = stage == 0   ? 16 * psi
                      : stage == 1 ? 4 * psi + 12 * psi / nd
                      : stage == 2 ? 2 * psi + 14 * psi / nd
                                   : 16 * psi / nd;
      EXPECT_EQ(total, paper) << what;
    }
}

// Under context parallelism the data-parallel group is dp × cp (Megatron's):
// ZeRO shards the model state over N_d = dp·cp ranks, so the paper's counts
// hold with that N_d — dp=1 cp=2, dp=2 cp=2 and dp=1 cp=4 — and the gradient
// reduction is one collective over that group ("dp+cp", or "cp" alone).
TEST(Memory, ZeroShardsOverDpTimesCp) {
  const int64_t psi = 180800;
  struct Mesh {
    int64_t dp, cp;
  };
  for (Mesh mesh : {Mesh{1, 2}, Mesh{2, 2}, Mesh{1, 4}})
    for (int64_t stage : {1, 2, 3}) {
      mlir::MLIRContext ctx(registry());
      TrainingShape shape;
      shape.seqLen = 16;
      shape.microBatch = 1;
      shape.globalBatch = mesh.dp;
      shape.dtype = "bf16";
      TrainingPipelineOptions opt;
      opt.mesh.dp = mesh.dp;
      opt.mesh.cp = mesh.cp;
      opt.zero = stage;
      const int64_t nd = mesh.dp * mesh.cp;
      std::string what =
          "dp=" + std::to_string(mesh.dp) + " cp=" + std::to_string(mesh.cp) + " stage " + std::to_string(stage);
      auto m = compileModule(ctx, "tiny-llama", shape, opt);
      ASSERT_TRUE(m) << what;
      auto mem = plannedMemory(*m);
      ASSERT_EQ(mem.size(), 1u);
      EXPECT_EQ(mem[0]["param"], stage >= 3 ? 2 * psi / nd : 2 * psi) << what;
      EXPECT_EQ(mem[0]["grad"], stage >= 2 ? 2 * psi / nd : 2 * psi) << what;
      EXPECT_EQ(mem[0]["optimizer_state"], 12 * psi / nd) << what;
      // The gradients' reduce-scatters and the parameters' gathers run on
      // the whole group, and nothing else reduces gradients over dp or cp.
      const std::string group = mesh.dp > 1 ? "dp+cp" : "cp";
      int64_t onGroup = 0;
      m->walk([&](plan::KernelOp k) {
        auto axis = k.getParams().getAs<mlir::StringAttr>("axis");
        if (!axis ||
            (k.getKernel() != "reduce_scatter" && k.getKernel() != "all_gather" && k.getKernel() != "all_reduce"))
          return;
        if (k.getKernel() != "all_reduce")
          EXPECT_EQ(axis.getValue(), group) << what << ": " << k.getKernel().str();
        onGroup += axis.getValue() == group;
        EXPECT_NE(axis.getValue(), "dp") << what;
      });
      EXPECT_GT(onGroup, 0) << what;
    }
}

// Every ZeRO stage reproduces the single-device run: dp ∈ {2, 4}, alone and
// with tp = 2, with pp = 2 (1F1B; GPT-2's tied embedding's blocks travel
// between the first and last stage), and dp × tp × pp; fp32, SGD (strict)
// and AdamW.
TEST(Memory, ZeroGoldenRule) {
  for (const char *optimizer : {"sgd", "adamw"})
    for (const char *model : {"tiny-gpt2", "tiny-llama"}) {
      test::Trained ref = test::trainPlan(model, test::goldenOptions(optimizer), 8,
                                          std::string("zero-reference-") + optimizer);
      for (int64_t stage : {1, 2, 3})
        for (Config c : {Config{2, 1, 1}, Config{4, 1, 1}, Config{2, 2, 1}, Config{2, 1, 2},
                         Config{2, 2, 2}}) {
          c.zero = stage;
          test::expectSame(ref, train(model, c, optimizer, 8 / c.dp / 2),
                           std::string(model) + " " + optimizer + " " + c.name(),
                           test::goldenTolerance(optimizer));
        }
    }
}

// The runtime's measurements of what it executed equal the plan: every
// rank's arena high-water mark is the planned arena (the allocation), and
// its peak of live bytes is the planner's (persistent state plus the most
// activation bytes live at once), for plain, recomputed, pipelined, ZeRO and
// mixed-precision plans.
TEST(Memory, MeasuredPeakEqualsPlanned) {
  struct Case {
    std::string model, dtype = "f32", recompute = "none";
    int64_t dp = 1, tp = 1, pp = 1, zero = 0;
  };
  std::vector<Case> cases = {
      {"tiny-llama"},
      {"tiny-gpt2", "f32", "full"},
      {"tiny-llama", "f32", "selective", 2, 2, 1},
      {"tiny-gpt2", "f32", "none", 1, 1, 2},
      {"tiny-llama", "f32", "none", 2, 1, 1, 3},
      {"tiny-llama", "f32", "none", 2, 1, 1, 1},
      {"tiny-llama", "bf16"},
      {"tiny-llama", "bf16", "full", 2, 1, 1, 2},
      {"tiny-gpt2", "bf16", "selective", 2, 1, 2, 3},
  };
  for (const Case &k : cases) {
    std::string what = k.model + " " + k.dtype + " recompute " + k.recompute + " dp" +
                       std::to_string(k.dp) + " tp" + std::to_string(k.tp) + " pp" +
                       std::to_string(k.pp) + " zero" + std::to_string(k.zero);
    mlir::MLIRContext ctx(registry());
    TrainingShape shape;
    shape.seqLen = 16;
    shape.microBatch = 1;
    shape.globalBatch = 4 * k.dp;
    shape.dtype = k.dtype;
    TrainingPipelineOptions opt;
    opt.mesh.dp = k.dp;
    opt.mesh.tp = k.tp;
    opt.mesh.pp = k.pp;
    opt.recompute = k.recompute;
    opt.zero = k.zero;
    auto m = compileModule(ctx, k.model, shape, opt);
    ASSERT_TRUE(m) << what;
    auto planned = plannedMemory(*m);
    auto run = test::writeAndRunOneStep(*m, "llcdist-measured-peak", what);
    ASSERT_TRUE(run) << what;
    ASSERT_NO_FATAL_FAILURE(
        test::expectMeasuredPeakEqualsPlanned(*run, planned, what, /*arenaSlack=*/0));
  }
}

// The arena layout is within 6 % of the bytes live at once, for every
// pipeline schedule, as the runtime measures them: the high-water mark of
// arena bytes any op touched (the layout) against the most bytes live at
// one moment (what a perfect packing would need), each less the persistent
// state. The 8-layer variants put 2 and 4 layers on a stage. (The worst is
// ZB-H1 at pp=4: 1.044 before llcdist-plan-fuse-norm, 1.051 since: the
// fused kernels change the lifetimes greedy by size packs, 4 KiB more on
// 0.56 MiB; the real models' arenas are unchanged.) With ZeRO-2 and -3 at
// dp=2 under 1F1B, each microbatch's whole gradient of a parameter lives at
// the end of its backward, when the other slot's activations are live: in
// the slot's own block where its activations are freed (SlotLayout's
// adopt), else beside both blocks (tiny-llama-8l ZeRO-2 pp=2: 1.112x).
TEST(Memory, ArenaWithinSixPercentOfLivePeak) {
  struct Case {
    std::string model, schedule;
    int64_t pp, virtualStages = 1, zero = 0;
  };
  std::vector<Case> cases;
  for (std::string model : {"tiny-llama-8l", "tiny-gpt2-8l"})
    for (int64_t pp : {2, 4}) {
      for (std::string schedule : {"gpipe", "1f1b", "zb-h1"})
        cases.push_back({model, schedule, pp});
      cases.push_back({model, "interleaved", pp, 2});
      for (int64_t zero : {2, 3})
        cases.push_back({model, "1f1b", pp, 1, zero});
    }
  for (const Case &k : cases) {
    std::string what = k.model + " " + k.schedule + " pp" + std::to_string(k.pp) +
                       (k.zero ? " dp2 ZeRO-" + std::to_string(k.zero) : "");
    mlir::MLIRContext ctx(registry());
    TrainingShape shape;
    shape.seqLen = 16;
    shape.microBatch = 1;
    shape.globalBatch = 8;
    TrainingPipelineOptions opt;
    opt.mesh.pp = k.pp;
    opt.pipelineSchedule = k.schedule;
    opt.virtualStages = k.virtualStages;
    if (k.zero) {
      opt.mesh.dp = 2;
      opt.zero = k.zero;
      shape.globalBatch = 16; // 8 microbatches per dp rank
    }
    auto m = compileModule(ctx,
                           std::string(LLCDIST_SOURCE_DIR) + "/unittests/Integration/Inputs/" +
                               k.model + ".json",
                           shape, opt);
    ASSERT_TRUE(m) << what;
    auto planned = plannedMemory(*m);
    auto run = test::writeAndRunOneStep(*m, "llcdist-arena-tightness", what);
    ASSERT_TRUE(run) << what;
    const rt::RunResult &result = run->result;
    const rt::Manifest &manifest = run->plan.manifest;
    for (int64_t r = 0; r < manifest.worldSize(); ++r) {
      auto &p = planned[manifest.programOfRank(r)];
      int64_t persistent = p["arena"] - p["transient_peak"];
      int64_t placed = result.arenaHighWaterBytes[r] - persistent;
      int64_t live = result.measuredPeakLiveBytes[r] - persistent;
      ASSERT_GT(live, 0) << what << " rank " << r;
      EXPECT_EQ(placed, p["transient_peak"]) << what << " rank " << r;
      EXPECT_EQ(live, p["transient_live_peak"]) << what << " rank " << r;
      EXPECT_LE(double(placed), 1.06 * double(live))
          << what << " rank " << r << ": placed " << placed << " bytes for " << live
          << " live at once (" << double(placed) / double(live) << "x)";
    }
  }
}
