// Kernel variants (KernelVariant.h): the choice rule, the interpreter's binding of bf16 arguments to a
// variant that takes them (no staging) against the staged path's bits, the bind-time preparation, and
// the time marks that the measured timeline is made of.
#include "ForwardingBackend.h"
#include "PlanTestUtil.h"

#include "llcdist/runtime/Bf16.h"
#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/KernelVariant.h"
#include "llcdist/runtime/Timeline.h"

#include <gtest/gtest.h>

#include <cstring>

namespace llcdist::rt {
namespace {

namespace sc = schema;
using E = sc::ElemType;
using K = sc::OpKind;
using testing::PlanBuilder;

// A call of `kind` with one buffer per role, of the given dtypes (in the op's role order), sizes 1.
KernelCall probe(K kind, std::vector<E> types, OpParams params = {}) {
  KernelCall c;
  c.kind = kind;
  for (E t : types) {
    c.args.push_back({nullptr});
    c.argElems.push_back({1});
    c.argTypes.push_back({t});
  }
  c.params = std::move(params);
  return c;
}

// A call of `kind` with one buffer of each named role (dtype as given); the other roles absent.
KernelCall probeRoles(K kind, std::vector<std::pair<std::string_view, E>> roles, OpParams params = {}) {
  KernelCall c;
  c.kind = kind;
  const size_t n = sc::opSpec(kind).numArgs;
  c.args.resize(n);
  c.argElems.resize(n);
  c.argTypes.resize(n);
  for (const auto& [role, t] : roles) {
    const size_t r = c.role(role);
    c.args[r] = {nullptr};
    c.argElems[r] = {1};
    c.argTypes[r] = {t};
  }
  c.params = std::move(params);
  return c;
}
KernelCall attentionProbe(E qkvOut, OpParams params = {}) {
  return probeRoles(K::kAttentionFwd, {{"q", qkvOut}, {"k", qkvOut}, {"v", qkvOut}, {"out", qkvOut}, {"lse", E::kF32}},
                    std::move(params));
}

KernelVariantInfo variant(std::string_view name, std::vector<std::pair<std::string_view, DTypeMask>> roles,
                          std::function<std::string(const KernelCall&, const KernelSelectOptions&)> fits = nullptr) {
  KernelVariantInfo v;
  v.name = name;
  v.floatRoles = std::move(roles);
  v.fits = std::move(fits);
  return v;
}

int64_t countConverted(const KernelChoice& c) {
  int64_t n = 0;
  for (const auto& role : c.convert)
    for (bool b : role) n += b;
  return n;
}

// ---- the choice rule ---------------------------------------------------------------------------------

TEST(KernelVariantChoice, AnF32KernelConvertsEveryBf16FloatArgumentAndNothingElse) {
  // add: a, b, y. a bf16, b f32, y bf16: the f32 kernel converts a and y.
  const KernelCall c = probe(K::kAdd, {E::kBF16, E::kF32, E::kBF16});
  StatusOr<KernelChoice> got = chooseKernelVariant(c, {&f32KernelVariant()}, {});
  ASSERT_TRUE(got.isOk()) << got.status().toString();
  EXPECT_EQ(got->variant, 0);
  EXPECT_EQ(got->name, "own");
  EXPECT_EQ(got->converted, 2);
  EXPECT_EQ(countConverted(*got), 2);
  EXPECT_TRUE(got->convert[0][0]);
  EXPECT_FALSE(got->convert[1][0]);
  EXPECT_TRUE(got->convert[2][0]);
  EXPECT_TRUE(got->passedOver.empty());
  // i32 and f64 roles are never converted: cross_entropy_max's logits (bf16), targets (i32), row_max (f64).
  const KernelCall ce = probe(K::kCrossEntropyMax, {E::kBF16, E::kI32, E::kF64});
  got = chooseKernelVariant(ce, {&f32KernelVariant()}, {});
  ASSERT_TRUE(got.isOk()) << got.status().toString();
  EXPECT_EQ(got->converted, 1);
  EXPECT_TRUE(got->convert[0][0]);
}

TEST(KernelVariantChoice, AVariantThatTakesBf16GetsItAsItIs) {
  const KernelVariantInfo both = variant("both", {{"a", kTakesF32OrBF16}, {"b", kTakesF32OrBF16}, {"y", kTakesF32OrBF16}});
  const KernelCall c = probe(K::kAdd, {E::kBF16, E::kF32, E::kBF16});
  StatusOr<KernelChoice> got = chooseKernelVariant(c, {&f32KernelVariant(), &both}, {});
  ASSERT_TRUE(got.isOk());
  // The f32 kernel fits with 2 conversions, `both` with none: fewer conversions win over order.
  EXPECT_EQ(got->variant, 1);
  EXPECT_EQ(got->name, "both");
  EXPECT_EQ(got->converted, 0);
  EXPECT_EQ(got->passedOver, "own: converts more arguments");
}

TEST(KernelVariantChoice, TheFirstVariantWithoutConversionsWins) {
  const KernelVariantInfo a = variant("first", {{"a", kTakesF32OrBF16}, {"b", kTakesF32OrBF16}, {"y", kTakesF32OrBF16}});
  const KernelVariantInfo b = variant("second", {{"a", kTakesF32OrBF16}, {"b", kTakesF32OrBF16}, {"y", kTakesF32OrBF16}});
  StatusOr<KernelChoice> got =
      chooseKernelVariant(probe(K::kAdd, {E::kBF16, E::kBF16, E::kBF16}), {&a, &b}, {});
  ASSERT_TRUE(got.isOk());
  EXPECT_EQ(got->name, "first");
  // f32 arguments: every variant takes them as they are, the first wins.
  got = chooseKernelVariant(probe(K::kAdd, {E::kF32, E::kF32, E::kF32}), {&f32KernelVariant(), &a}, {});
  ASSERT_TRUE(got.isOk());
  EXPECT_EQ(got->name, "own");
  EXPECT_EQ(got->converted, 0);
}

TEST(KernelVariantChoice, ABf16OnlyVariantNeverGetsRoundedF32) {
  // A cuDNN-like attention: bf16 q, k, v, out only. f32 buffers are not rounded to reach it.
  const KernelVariantInfo fused =
      variant("fused", {{"q", kTakesBF16}, {"k", kTakesBF16}, {"v", kTakesBF16}, {"out", kTakesBF16}});
  const KernelCall f32 = attentionProbe(E::kF32);
  StatusOr<KernelChoice> got = chooseKernelVariant(f32, {&fused, &f32KernelVariant()}, {});
  ASSERT_TRUE(got.isOk());
  EXPECT_EQ(got->name, "own");
  EXPECT_EQ(got->converted, 0);
  EXPECT_EQ(got->passedOver, "fused: does not take f32 for role \"q\"");
  const KernelCall bf16 = attentionProbe(E::kBF16);
  got = chooseKernelVariant(bf16, {&fused, &f32KernelVariant()}, {});
  ASSERT_TRUE(got.isOk());
  EXPECT_EQ(got->name, "fused");
  EXPECT_EQ(got->converted, 0);
}

TEST(KernelVariantChoice, ARefusingPredicateFallsBackAndSaysWhy) {
  AttentionParams p;
  p.B = 1, p.S = 4, p.nh = 2, p.nkv = 1, p.hd = 12;
  const KernelVariantInfo fused = variant(
      "fused", {{"q", kTakesBF16}, {"k", kTakesBF16}, {"v", kTakesBF16}, {"out", kTakesBF16}},
      [](const KernelCall& c, const KernelSelectOptions& o) -> std::string {
        if (!o.cudnn) return "not here";
        return c.paramsAs<AttentionParams>()->hd % 8 ? "head dim" : "";
      });
  const KernelCall bf16 = attentionProbe(E::kBF16, p);
  KernelSelectOptions o;
  o.cudnn = true;
  StatusOr<KernelChoice> got = chooseKernelVariant(bf16, {&fused, &f32KernelVariant()}, o);
  ASSERT_TRUE(got.isOk());
  EXPECT_EQ(got->name, "own");
  EXPECT_EQ(got->converted, 4);  // q, k, v, out
  EXPECT_EQ(got->passedOver, "fused: head dim");
  o.cudnn = false;
  got = chooseKernelVariant(bf16, {&fused, &f32KernelVariant()}, o);
  ASSERT_TRUE(got.isOk());
  EXPECT_EQ(got->passedOver, "fused: not here");
  // Nothing fits: an error naming every variant's reason.
  got = chooseKernelVariant(bf16, {&fused}, o);
  ASSERT_FALSE(got.isOk());
  EXPECT_NE(got.status().message().find("fused: not here"), std::string::npos) << got.status().message();
  EXPECT_FALSE(chooseKernelVariant(bf16, {}, o).isOk());
}

TEST(KernelVariantChoice, ARefusedMixGetsASecondChanceWithEveryBf16ArgumentConverted) {
  // A GEMM-like variant: its operands must share a dtype.
  const KernelVariantInfo gemm = variant(
      "gemm", {{"x", kTakesF32OrBF16}, {"w", kTakesF32OrBF16}, {"y", kTakesF32OrBF16}},
      [](const KernelCall& c, const KernelSelectOptions&) -> std::string {
        return c.type(0) == c.type(1) ? "" : "operands differ";
      });
  // linear_fwd: x, w, bias (absent), y. x f32, w bf16, y f32: as is refused; with w converted it runs.
  KernelCall c = probe(K::kLinearFwd, {E::kF32, E::kBF16, E::kF32, E::kF32});
  c.args[2].clear();
  c.argElems[2].clear();
  c.argTypes[2].clear();
  StatusOr<KernelChoice> got = chooseKernelVariant(c, {&gemm}, {});
  ASSERT_TRUE(got.isOk()) << got.status().toString();
  EXPECT_EQ(got->converted, 1);
  EXPECT_TRUE(got->convert[1][0]);
  EXPECT_TRUE(got->convert[2].empty());
}

TEST(KernelVariantChoice, FlopsOfGemmsAndAttention) {
  LinearParams l;
  l.M = 3, l.K = 5, l.N = 7;
  EXPECT_EQ(kernelFlops(probe(K::kLinearFwd, {}, l)), 2.0 * 3 * 5 * 7);
  EXPECT_EQ(kernelFlops(probe(K::kLinearBwdWeight, {}, l)), 2.0 * 3 * 5 * 7);
  AttentionParams a;
  a.B = 2, a.S = 16, a.nh = 4, a.nkv = 2, a.hd = 8;
  const double fwd = 4.0 * 2 * 4 * 16 * 16 * 8 / 2;  // FlashAttention's causal count
  EXPECT_EQ(kernelFlops(probe(K::kAttentionFwd, {}, a)), fwd);
  EXPECT_EQ(kernelFlops(probe(K::kAttentionBwd, {}, a)), 2.5 * fwd);
  a.window = 4;  // Mistral's sliding window: the causal half less the (S − 4)²/2 pairs it masks
  EXPECT_EQ(kernelFlops(probe(K::kAttentionFwd, {}, a)), 4.0 * 2 * 4 * (16 * 16 - 12 * 12) / 2 * 8);
  a.window = 16;  // a window >= S masks nothing
  EXPECT_EQ(kernelFlops(probe(K::kAttentionFwd, {}, a)), fwd);
  ClassifierParams cl;
  cl.linear = l;
  cl.chunk = 2;
  EXPECT_EQ(kernelFlops(probe(K::kClassifier, {}, cl)), 3 * 2.0 * 3 * 5 * 7);  // its three GEMMs
  MoeParams g;  // grouped_linear_*: 2·N·K·O, N the rows attr (the worst case)
  g.N = 11, g.K = 5, g.O = 7, g.E = 4;
  for (K kind : {K::kGroupedLinearFwd, K::kGroupedLinearBwdInput, K::kGroupedLinearBwdWeight})
    EXPECT_EQ(kernelFlops(probe(kind, {}, g)), 2.0 * 11 * 5 * 7) << schema::opName(kind);
  EXPECT_EQ(kernelFlops(probe(K::kAdd, {}, ElementwiseParams{10})), 0.0);
}

// ---- the interpreter's binding -----------------------------------------------------------------------

// The CPU backend with a second variant of `add` first in line: "bf16add" takes bf16 a, b, y as they
// are and adds them on the host (f32 arithmetic, rounded once), as a device kernel would. It records
// what it was given, counts prepare() calls, and makes its time marks from a fake clock, so the
// timeline's intervals must be the marks'.
class Bf16AddBackend final : public testing::ForwardingBackend {
public:
  explicit Bf16AddBackend(std::unique_ptr<Backend> cpu) : ForwardingBackend(std::move(cpu)) {
    native_.name = "bf16add";
    native_.floatRoles = {{"a", kTakesF32OrBF16}, {"b", kTakesF32OrBF16}, {"y", kTakesF32OrBF16}};
  }
  std::string name() const override { return "bf16add-test"; }
  StatusOr<float*> allocateStaging(int64_t elems) override {
    stagingElems += elems;
    return inner_->allocateStaging(elems);
  }
  std::vector<const KernelVariantInfo*> kernelVariants(sc::OpKind kind) const override {
    if (kind == K::kAdd) return {&native_, &f32KernelVariant()};
    return inner_->kernelVariants(kind);
  }
  Status prepare(const KernelCall& call) override {
    ++prepared[call.kind];
    return Status::ok();
  }
  Status launch(Stream s, const KernelCall& call) override {
    if (call.kind != K::kAdd || call.variant != 0) return inner_->launch(s, call);
    nativeTypes.push_back({call.type(0), call.type(1), call.type(2)});
    const int64_t n = call.argElems[0][0];
    for (int64_t i = 0; i < n; ++i) {
      const float a = load(call, 0, i), b = load(call, 1, i);
      store(call, 2, i, a + b);
    }
    return Status::ok();
  }
  // Fake device time: mark k is at 1000 + 10·k ns after its step's first mark.
  StatusOr<int64_t> markTime(Stream) override { return marks_++; }
  StatusOr<int64_t> markTimeNs(int64_t mark) override {
    if (mark >= marks_) return Status::outOfRange("no such mark");
    return 1000 + 10 * mark;
  }
  void clearTimeMarks() override {
    marks_ = 0;
    ++clears;
  }

  std::vector<std::array<E, 3>> nativeTypes;
  std::map<sc::OpKind, int> prepared;
  int64_t stagingElems = 0;
  int clears = 0;

private:
  static float load(const KernelCall& c, size_t role, int64_t i) {
    if (c.type(role) == E::kBF16) return bf16ToFloat(static_cast<const uint16_t*>(c.ptr(role))[i]);
    return static_cast<const float*>(c.ptr(role))[i];
  }
  static void store(const KernelCall& c, size_t role, int64_t i, float v) {
    if (c.type(role) == E::kBF16)
      static_cast<uint16_t*>(c.ptr(role))[i] = floatToBf16(v);
    else
      static_cast<float*>(c.ptr(role))[i] = v;
  }
  KernelVariantInfo native_;
  int64_t marks_ = 0;
};

// a (bf16) + b (f32) -> y (bf16), then gelu of y into g (f32: the CPU's f32 kernel, y converted).
PlanBuilder addThenGelu(int64_t n) {
  PlanBuilder b(8, 2, 1, 1);
  const int64_t a = b.buffer("a", "activation", {n}, "bf16");
  const int64_t bb = b.buffer("b", "activation", {n});
  const int64_t y = b.buffer("y", "activation", {n}, "bf16");
  const int64_t g = b.buffer("g", "activation", {n});
  b.op("s", "add", {{"a", a}, {"b", bb}, {"y", y}}, {{"n", n}}, "residual");
  b.op("s", "gelu_tanh_fwd", {{"x", y}, {"y", g}}, {{"n", n}}, "mlp.act");
  b.action("s");
  return b;
}

TEST(KernelVariantBinding, ABf16VariantGetsTheArenaBuffersAndMatchesTheStagedPathBitForBit) {
  const int64_t n = 37;
  const PlanBuilder b = addThenGelu(n);
  std::vector<float> av(static_cast<size_t>(n)), bv(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    av[size_t(i)] = 0.37f * float(i) - 5.1f;
    bv[size_t(i)] = 1.0f / (1.0f + float(i)) + 0.001f * float(i * i);
  }
  const auto run = [&](Backend& backend, std::vector<float>* y, std::vector<float>* g,
                       std::vector<Interpreter::KernelChoiceSummary>* choices) {
    auto plan = testing::parsePlan(b, false);
    ASSERT_TRUE(plan.isOk()) << plan.status().message();
    auto in = Interpreter::create(*plan, 0, backend);
    ASSERT_TRUE(in.isOk()) << in.status().message();
    ASSERT_TRUE((*in)->writeF32(0, av.data()).isOk());
    ASSERT_TRUE((*in)->writeF32(1, bv.data()).isOk());
    ASSERT_TRUE((*in)->runSubroutine(0, 0, -1, 0.0, nullptr).isOk());
    *y = (*in)->readF32(2).value();
    *g = (*in)->readF32(3).value();
    *choices = (*in)->kernelChoices();
  };
  auto cpu = makeCpuBackend();
  std::vector<float> yRef, gRef, y, g;
  std::vector<Interpreter::KernelChoiceSummary> refChoices, choices;
  run(*cpu, &yRef, &gRef, &refChoices);
  Bf16AddBackend native(makeCpuBackend());
  run(native, &y, &g, &choices);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(std::memcmp(&y[size_t(i)], &yRef[size_t(i)], 4), 0) << i;
    EXPECT_EQ(std::memcmp(&g[size_t(i)], &gRef[size_t(i)], 4), 0) << i;
  }
  // The native add saw the arena's bf16 a and y and the f32 b, unconverted.
  ASSERT_EQ(native.nativeTypes.size(), 1u);
  EXPECT_EQ(native.nativeTypes[0][0], E::kBF16);
  EXPECT_EQ(native.nativeTypes[0][1], E::kF32);
  EXPECT_EQ(native.nativeTypes[0][2], E::kBF16);
  // Staging is sized for gelu alone (its x: n); the staged path's add needs a and y (2n).
  EXPECT_EQ(native.stagingElems, n);
  // The choices, as the log prints them.
  ASSERT_EQ(choices.size(), 2u);
  EXPECT_EQ(choices[0].kind, K::kAdd);
  EXPECT_EQ(choices[0].variant, "bf16add");
  EXPECT_EQ(choices[0].ops, 1);
  EXPECT_EQ(choices[0].convertedArgs, 0);
  EXPECT_EQ(choices[1].kind, K::kGeluTanhFwd);
  EXPECT_EQ(choices[1].variant, "own");
  EXPECT_EQ(choices[1].convertedArgs, 1);
  ASSERT_EQ(refChoices.size(), 2u);
  EXPECT_EQ(refChoices[0].variant, "own");
  EXPECT_EQ(refChoices[0].convertedArgs, 2);
  // Every bound kernel op was prepared once, before any step.
  EXPECT_EQ(native.prepared[K::kAdd], 1);
  EXPECT_EQ(native.prepared[K::kGeluTanhFwd], 1);
}

TEST(KernelVariantBinding, TheTimelineRecordsTheBackendsTimeMarks) {
  const PlanBuilder b = addThenGelu(8);
  auto plan = testing::parsePlan(b, false);
  ASSERT_TRUE(plan.isOk()) << plan.status().message();
  Bf16AddBackend native(makeCpuBackend());
  auto in = Interpreter::create(*plan, 0, native);
  ASSERT_TRUE(in.isOk()) << in.status().message();
  Timeline timeline;
  (*in)->setTimeline(&timeline);
  ASSERT_TRUE((*in)->runStep(0, 0.0, nullptr).isOk());
  ASSERT_TRUE((*in)->runStep(1, 0.0, nullptr).isOk());
  const std::vector<TimelineEvent>& ev = timeline.events();
  ASSERT_EQ(ev.size(), 4u);  // two ops a step
  // Marks 0..3 of each step (the marks are cleared after each step): [0, 1] add, [2, 3] gelu.
  EXPECT_EQ(ev[0].name, "add");
  EXPECT_EQ(ev[0].variant, "bf16add");
  EXPECT_EQ(ev[0].startNs, 1000);
  EXPECT_EQ(ev[0].endNs, 1010);
  EXPECT_EQ(ev[1].name, "gelu_tanh_fwd");
  EXPECT_EQ(ev[1].variant, "own");
  EXPECT_EQ(ev[1].startNs, 1020);
  EXPECT_EQ(ev[1].endNs, 1030);
  EXPECT_EQ(ev[2].step, 1);
  EXPECT_EQ(ev[2].startNs, 1000);
  EXPECT_GE(native.clears, 2);
}

}  // namespace
}  // namespace llcdist::rt
