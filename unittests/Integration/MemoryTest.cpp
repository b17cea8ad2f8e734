//===- MemoryTest.cpp - recomputation, memory planning and ZeRO -----------===//
//
// Issue #6: every recompute mode (and ZeRO stage) reproduces the
// single-device run; the activations each mode keeps for the backward equal
// the analytic per-layer count; the memory plan's arena shrinks as it should.
//
//===----------------------------------------------------------------------===//
#include "GoldenUtil.h"

#include "llcdist/runtime/Plan.h"

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

namespace {
/// Bytes of layer 1's activation buffers that the forward writes and the
/// backward reads (one microbatch, one device): what the layer keeps for
/// its backward.
int64_t savedBytesOfLayer1(const std::string &recompute) {
  TrainingShape shape;
  shape.seqLen = 16;
  shape.microBatch = 2;
  shape.globalBatch = 2;
  TrainingPipelineOptions opt;
  opt.recompute = recompute;
  std::string dir = test::compilePlan("tiny-llama", shape, opt, "saved-" + recompute);
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
