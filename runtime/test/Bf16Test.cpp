// bf16 storage, fp32 arithmetic (docs/plan-format.md "bf16 storage"): the conversions' rounding, the
// `cast` op, the loader's dtype rules, bf16 collectives and send/recv, and training with bf16
// activations and params, and with an f32 master + bf16 copy (mixed precision), against the f32 plan.
#include "CommTestUtil.h"
#include "PlanTestUtil.h"

#include "llcdist/runtime/Bf16.h"
#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Plan.h"
#include "llcdist/runtime/TokenData.h"
#include "train/TrainParts.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <thread>

namespace llcdist::rt {
namespace {

using testing::json;
using testing::PlanBuilder;

float fromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ---- rounding ----------------------------------------------------------------------------------------

TEST(Bf16Test, RoundToNearestEvenEdgeCases) {
  const float ulp = std::ldexp(1.0f, -7);  // bf16 spacing in [1, 2): 8 significand bits
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBf16(1.0f + ulp / 2), 0x3f80);                          // tie, even below: down
  EXPECT_EQ(floatToBf16(1.0f + 3 * ulp / 2), 0x3f82);                      // tie, odd below: up to even
  EXPECT_EQ(floatToBf16(1.0f + ulp / 2 + std::ldexp(1.0f, -20)), 0x3f81);  // just above the tie: up
  EXPECT_EQ(floatToBf16(1.0f + ulp / 2 - std::ldexp(1.0f, -20)), 0x3f80);  // just below: down
  EXPECT_EQ(floatToBf16(-(1.0f + ulp / 2)), 0xbf80);                       // the sign does not matter
  EXPECT_EQ(floatToBf16(-(1.0f + 3 * ulp / 2)), 0xbf82);
  EXPECT_EQ(floatToBf16(0.0f), 0x0000);
  EXPECT_EQ(floatToBf16(-0.0f), 0x8000);
  // Subnormals round like everything else: ties to even, carries into the exponent.
  EXPECT_EQ(floatToBf16(fromBits(0x00000001)), 0x0000);
  EXPECT_EQ(floatToBf16(fromBits(0x00008000)), 0x0000);  // tie between 0 and 0x0001: even (0)
  EXPECT_EQ(floatToBf16(fromBits(0x00008001)), 0x0001);
  EXPECT_EQ(floatToBf16(fromBits(0x00018000)), 0x0002);  // tie between 0x0001 and 0x0002: even
  EXPECT_EQ(floatToBf16(fromBits(0x007fffff)), 0x0080);  // the largest subnormal rounds up to the normal
  // Overflow: the largest finite bf16 is 0x7f7f; halfway to the next (inf) rounds to even = inf.
  EXPECT_EQ(floatToBf16(fromBits(0x7f7f7fff)), 0x7f7f);
  EXPECT_EQ(floatToBf16(fromBits(0x7f7f8000)), 0x7f80);
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(floatToBf16(-std::numeric_limits<float>::infinity()), 0xff80);
  // NaN stays NaN, whatever its payload (a payload only in the low bits must not become inf).
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x7f80ffffu}) {
    const uint16_t b = floatToBf16(fromBits(nan));
    EXPECT_TRUE(std::isnan(bf16ToFloat(b))) << std::hex << nan << " -> " << b;
    EXPECT_EQ(b & 0x8000, (nan >> 16) & 0x8000) << std::hex << nan;
  }
  // Widening is exact: the bits move up.
  EXPECT_EQ(bitsOf(bf16ToFloat(0x3f81)), 0x3f810000u);
  EXPECT_EQ(roundToBf16(1.0f + 3 * ulp / 2), 1.0f + 2 * ulp);
  // The array versions agree with the scalar ones.
  std::vector<float> x = {1.0f + ulp / 2, 1.0f + 3 * ulp / 2, -2.5f, fromBits(0x7f7f8000), 1e-40f, 3.14159f};
  std::vector<uint16_t> b(x.size());
  std::vector<float> back(x.size());
  convertF32ToBf16(x.data(), b.data(), int64_t(x.size()));
  convertBf16ToF32(b.data(), back.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(b[i], floatToBf16(x[i])) << i;
    EXPECT_EQ(bitsOf(back[i]), uint32_t(b[i]) << 16) << i;
  }
}

// ---- helpers ----------------------------------------------------------------------------------------

StatusOr<Plan> parse(const PlanBuilder& b) { return testing::parsePlan(b, /*validateParameters=*/true); }

void expectError(const PlanBuilder& b, const std::vector<std::string>& parts) {
  StatusOr<Plan> p = parse(b);
  ASSERT_FALSE(p.isOk()) << "expected an error containing '" << parts[0] << "'";
  for (const std::string& part : parts)
    EXPECT_NE(p.status().message().find(part), std::string::npos) << part << " in: " << p.status().message();
}

// ---- the cast op --------------------------------------------------------------------------------------

TEST(Bf16Test, CastOpConvertsBetweenDtypes) {
  PlanBuilder b(8, 2, 1, 1);
  const int64_t a = b.buffer("a", "activation", {6});            // f32 source
  const int64_t h = b.buffer("h", "activation", {6}, "bf16");    // f32 -> bf16
  const int64_t f = b.buffer("f", "activation", {6});            // bf16 -> f32
  const int64_t h2 = b.buffer("h2", "activation", {6}, "bf16");  // bf16 -> bf16
  const int64_t f2 = b.buffer("f2", "activation", {6});          // f32 -> f32
  const int64_t z = b.buffer("z", "activation", {6}, "bf16");    // zeroed (zero handles bf16)
  b.op("s", "cast", {{"x", a}, {"y", h}}, {{"n", 6}});
  b.op("s", "cast", {{"x", h}, {"y", f}}, {{"n", 6}});
  b.op("s", "cast", {{"x", h}, {"y", h2}}, {{"n", 6}});
  b.op("s", "cast", {{"x", a}, {"y", f2}}, {{"n", 6}});
  b.op("s", "fill_zero", {{"x", {z}}});
  b.action("s");
  auto plan = parse(b);
  ASSERT_TRUE(plan.isOk()) << plan.status().message();
  auto backend = makeCpuBackend();
  auto in = Interpreter::create(*plan, 0, *backend);
  ASSERT_TRUE(in.isOk()) << in.status().message();
  const float ulp = std::ldexp(1.0f, -7);
  const std::vector<float> av = {1.0f + ulp / 2, 1.0f + 3 * ulp / 2, -3.0f, 1e30f, std::nanf(""), 0.1f};
  ASSERT_TRUE((*in)->writeF32(a, av.data()).isOk());
  const std::vector<uint16_t> ones(6, 0x3f80);
  ASSERT_TRUE((*in)->writeBuffer(z, ones.data()).isOk());
  ASSERT_TRUE((*in)->runSubroutine(0, 0, -1, 0.0, nullptr).isOk());
  std::vector<uint16_t> hv(6), h2v(6), zv(6);
  ASSERT_TRUE((*in)->readBuffer(h, hv.data()).isOk());
  ASSERT_TRUE((*in)->readBuffer(h2, h2v.data()).isOk());
  ASSERT_TRUE((*in)->readBuffer(z, zv.data()).isOk());
  const std::vector<float> fv = (*in)->readF32(f).value(), f2v = (*in)->readF32(f2).value();
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(hv[i], floatToBf16(av[i])) << i;             // rounded to nearest even
    EXPECT_EQ(bitsOf(fv[i]), uint32_t(hv[i]) << 16) << i;  // widened exactly
    EXPECT_EQ(h2v[i], hv[i]) << i;                         // copied
    EXPECT_EQ(bitsOf(f2v[i]), bitsOf(av[i])) << i;         // copied
    EXPECT_EQ(zv[i], 0) << i;
  }
  EXPECT_EQ(hv[0], 0x3f80);
  EXPECT_EQ(hv[1], 0x3f82);
}

// ---- loader --------------------------------------------------------------------------------------------

TEST(Bf16Test, LoaderChecksDtypes) {
  // A valid mixed plan loads: bf16 buffers in float roles (any mix per op), a bf16 param with an f32
  // grad, model.dtype bf16.
  auto base = [] {
    PlanBuilder b(8, 2, 1, 1);
    b.manifest["model"]["dtype"] = "bf16";
    const int64_t w = b.buffer("w", "param", {4}, "bf16"), g = b.buffer("gw", "grad", {4});
    const int64_t m = b.buffer("m", "optimizer_state", {4}), v = b.buffer("v", "optimizer_state", {4}, "bf16");
    b.buffer("ids", "input", {4}, "i32");
    b.buffer("x", "activation", {4}, "bf16");
    b.buffer("loss", "metric", {1});
    b.param("w", {4}, w, g, {{"kind", "zeros"}}, false, "bf16");
    b.op("s", "add", {{"a", w}, {"b", 5}, {"y", g}}, {{"n", 4}});
    b.op("s", "adamw", {{"param", w}, {"grad", g}, {"m", m}, {"v", v}},
         {{"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.0}});
    b.action("s");
    return b;
  };
  {
    auto ok = parse(base());
    ASSERT_TRUE(ok.isOk()) << ok.status().message();
    EXPECT_EQ(ok->manifest.params[0].dtype, schema::ElemType::kBF16);
    EXPECT_EQ(ok->manifest.modelDtype, schema::ElemType::kBF16);
    EXPECT_EQ(ok->programs[0].buffers[0].bytes, 8);
  }
  // bytes = numel × 2 for bf16.
  PlanBuilder b = base();
  b.program["buffers"][0]["bytes"] = 16;
  expectError(b, {"program-0.json: buffers[0].bytes", "sizeof(bf16) = 4 × 2 = 8, got 16"});
  b = base();
  b.program["buffers"][5]["dtype"] = "f16";
  expectError(b, {"buffers[5].dtype", "unknown dtype \"f16\"", "\"bf16\""});
  // An i32 buffer in a float role; a bf16 buffer in an i32 role.
  b = base();
  b.ops("s")[0]["args"]["b"] = 4;
  expectError(b, {"program-0.json: subroutines[0].ops[0].args.b", "(\"ids\") is i32 but role \"b\" needs f32 or bf16"});
  b = base();
  b.op("s", "embedding_fwd", {{"ids", 5}, {"table", 0}, {"out", 1}}, {{"M", 4}, {"V", 4}, {"H", 1}});
  expectError(b, {"subroutines[0].ops[2].args.ids", "(\"x\") is bf16 but role \"ids\" needs i32"});
  // cast: float dtypes only, n elements each.
  b = base();
  b.op("s", "cast", {{"x", 4}, {"y", 5}}, {{"n", 4}});
  expectError(b, {"subroutines[0].ops[2].args.x", "is i32 but role \"x\" needs f32 or bf16"});
  b = base();
  b.op("s", "cast", {{"x", 1}, {"y", 5}}, {{"n", 3}});
  expectError(b, {"subroutines[0].ops[2].args.x", "has 4 elements, expected n = 3"});
  // The reserved metrics stay f32.
  b = base();
  b.program["buffers"][6]["dtype"] = "bf16";
  b.program["buffers"][6]["bytes"] = 2;
  expectError(b, {"buffers[6]", "reserved buffer name \"loss\" needs kind \"metric\", dtype \"f32\""});
  // Param dtypes: f32 or bf16, the value buffer of that dtype, the grad a float buffer.
  b = base();
  b.manifest["params"][0]["dtype"] = "f16";
  expectError(b,
              {"manifest.json: params[0].dtype", "unsupported parameter dtype \"f16\" (expected \"f32\", \"bf16\")"});
  b = base();
  b.manifest["model"]["dtype"] = "i32";
  expectError(b, {"manifest.json: model.dtype", "unsupported dtype \"i32\""});
  b = base();
  b.manifest["params"][0]["dtype"] = "f32";
  expectError(b, {"params[0].buffer", "buffer 0 (\"w\") is bf16 but parameter \"w\" has dtype \"f32\""});
  b = base();
  b.program["buffers"][1]["dtype"] = "i32";
  b.ops("s").clear();
  expectError(b, {"params[0].grad", "buffer 1 (\"gw\") is i32; a gradient must be f32 or bf16"});
}

// ---- collectives and send / recv on bf16 buffers ---------------------------------------------------------

using testing::onRanks;

// dp = 2: the members' bf16 values are summed in f32 in member order and the sum rounded once.
TEST(Bf16Test, CollectivesOnBf16BuffersReduceInF32AndRoundOnce) {
  PlanBuilder b(8, 2, 1, 1);
  b.manifest["mesh"]["dp"] = 2;
  b.manifest["batch"]["dp"] = 2;
  b.manifest["batch"]["global_batch"] = 2;
  b.manifest["programs"][0]["ranks"] = {0, 1};
  const int64_t x = b.buffer("x", "activation", {4}, "bf16");
  const int64_t g = b.buffer("g", "activation", {8});            // all_gather into f32
  const int64_t gh = b.buffer("gh", "activation", {8}, "bf16");  // reduce_scatter source
  const int64_t rs = b.buffer("rs", "activation", {4}, "bf16");
  b.op("s", "all_reduce", {{"x", {x}}}, {{"axis", "dp"}, {"op", "sum"}});
  b.op("s", "all_gather", {{"x", x}, {"y", g}}, {{"axis", "dp"}, {"outer", 1}, {"inner", 4}});
  b.op("s", "reduce_scatter", {{"x", gh}, {"y", rs}}, {{"axis", "dp"}, {"outer", 1}, {"inner", 4}, {"op", "sum"}});
  b.action("s");
  auto plan = parse(b);
  ASSERT_TRUE(plan.isOk()) << plan.status().message();
  InProcessCommunicatorOptions co;
  co.worldSize = 2;
  co.mesh = plan->manifest.mesh();
  auto comm = makeInProcessCommunicator(co);
  std::vector<std::unique_ptr<Backend>> be(2);
  std::vector<std::unique_ptr<Interpreter>> in(2);
  for (int r = 0; r < 2; ++r) {
    CpuBackendOptions bo;
    bo.rank = r;
    bo.communicator = comm.get();
    be[size_t(r)] = makeCpuBackend(bo);
    auto i = Interpreter::create(*plan, 0, *be[size_t(r)], r);
    ASSERT_TRUE(i.isOk()) << i.status().message();
    in[size_t(r)] = std::move(i).value();
  }
  const float ulp = std::ldexp(1.0f, -7);
  // Member 0 holds 1; member 1 holds half an ulp, 1.5 ulp, ... : the f32 sums are ties or exact.
  const std::vector<std::vector<float>> xs = {{1.0f, 1.0f, 2.0f, -1.0f}, {ulp / 2, 3 * ulp / 2, 0.25f, -ulp / 2}};
  std::vector<std::vector<float>> ghs(2, std::vector<float>(8));
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 8; ++k) ghs[size_t(r)][size_t(k)] = roundToBf16(0.1f * float(k + 1) + float(r));
  auto st = onRanks(2, [&](int r) {
    LLCDIST_RETURN_IF_ERROR(in[size_t(r)]->writeF32(x, xs[size_t(r)].data()));
    LLCDIST_RETURN_IF_ERROR(in[size_t(r)]->writeF32(gh, ghs[size_t(r)].data()));
    return in[size_t(r)]->runSubroutine(0, 0, -1, 0.0, nullptr);
  });
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(st[size_t(r)].isOk()) << r << ": " << st[size_t(r)].message();
  std::vector<float> sum(4);
  for (size_t k = 0; k < 4; ++k) sum[k] = roundToBf16(xs[0][k] + xs[1][k]);
  EXPECT_EQ(sum[0], 1.0f);            // tie -> even
  EXPECT_EQ(sum[1], 1.0f + 2 * ulp);  // tie -> even (up)
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(in[size_t(r)]->readF32(x).value(), sum) << r;
    std::vector<float> gathered = sum;
    gathered.insert(gathered.end(), sum.begin(), sum.end());
    EXPECT_EQ(in[size_t(r)]->readF32(g).value(), gathered) << r;
    std::vector<float> want(4);
    for (size_t k = 0; k < 4; ++k) want[k] = roundToBf16(ghs[0][size_t(r) * 4 + k] + ghs[1][size_t(r) * 4 + k]);
    EXPECT_EQ(in[size_t(r)]->readF32(rs).value(), want) << r;
  }
}

// Two pipeline stages: a bf16 buffer is sent as bf16 (2 bytes an element, no f32 staging) and received
// into a bf16 buffer bit for bit; a recv into an f32 buffer does not match it (the dtype is part of the
// match, as `llc-dist verify` checks it): an error naming both sides.
TEST(Bf16Test, SendRecvOfBf16BuffersMoveBf16) {
  PlanBuilder s0(8, 2, 1, 1), s1(8, 2, 1, 1);
  json manifest = s0.manifest;
  manifest["features"] = {"pipeline"};
  manifest["mesh"]["pp"] = 2;
  manifest["programs"] = {{{"file", "program-0.json"}, {"ranks", {0}}}, {{"file", "program-1.json"}, {"ranks", {1}}}};
  const int64_t x = s0.buffer("x", "activation", {5}, "bf16");
  s0.op("s", "send", {{"x", x}}, {{"axis", "pp"}, {"peer", 1}, {"tag", 0}});
  s0.op("s", "send", {{"x", x}}, {{"axis", "pp"}, {"peer", 1}, {"tag", 1}});
  s0.action("s");
  const int64_t yb = s1.buffer("yb", "activation", {5}, "bf16"), yf = s1.buffer("yf", "activation", {5});
  s1.op("s", "recv", {{"y", yb}}, {{"axis", "pp"}, {"peer", 0}, {"tag", 0}});
  s1.op("s", "recv", {{"y", yf}}, {{"axis", "pp"}, {"peer", 0}, {"tag", 1}});
  s1.action("s");
  Plan plan;
  auto m = parseManifest(manifest.dump(), "manifest.json");
  ASSERT_TRUE(m.isOk()) << m.status().message();
  plan.manifest = m.value();
  for (const PlanBuilder* p : {&s0, &s1}) {
    auto prog = parseProgram(p->program.dump(), "program.json", plan.manifest);
    ASSERT_TRUE(prog.isOk()) << prog.status().message();
    plan.programs.push_back(std::move(prog).value());
  }
  InProcessCommunicatorOptions co;
  co.worldSize = 2;
  co.mesh = plan.manifest.mesh();
  auto comm = makeInProcessCommunicator(co);
  std::vector<std::unique_ptr<Backend>> be(2);
  std::vector<std::unique_ptr<Interpreter>> in(2);
  for (int r = 0; r < 2; ++r) {
    CpuBackendOptions bo;
    bo.rank = r;
    bo.communicator = comm.get();
    be[size_t(r)] = makeCpuBackend(bo);
    auto i = Interpreter::create(plan, size_t(r), *be[size_t(r)], r);
    ASSERT_TRUE(i.isOk()) << i.status().message();
    in[size_t(r)] = std::move(i).value();
  }
  const std::vector<float> xv = {0.1f, -2.7f, 3e5f, 1e-20f, 1.0f};
  ASSERT_TRUE(in[0]->writeF32(x, xv.data()).isOk());
  auto st = onRanks(2, [&](int r) { return in[size_t(r)]->runSubroutine(0, 0, -1, 0.0, nullptr); });
  ASSERT_TRUE(st[0].isOk()) << st[0].message();  // sends are eager
  const std::vector<float> sent = in[0]->readF32(x).value();
  for (size_t k = 0; k < xv.size(); ++k) EXPECT_EQ(sent[k], roundToBf16(xv[k]));
  EXPECT_EQ(in[1]->readF32(yb).value(), sent);
  ASSERT_FALSE(st[1].isOk());
  EXPECT_NE(st[1].message().find("send/recv mismatch"), std::string::npos) << st[1].message();
  EXPECT_NE(st[1].message().find("sent (count 5 bf16, tag 1"), std::string::npos) << st[1].message();
  EXPECT_NE(st[1].message().find("recv(5 f32, tag 1"), std::string::npos) << st[1].message();
}

// ---- training ------------------------------------------------------------------------------------------

enum class Precision {
  kF32,    // everything f32 (the reference)
  kBf16,   // params and activations bf16; grads and AdamW state f32
  kMixed,  // f32 master params, grads and AdamW state; bf16 param copies (cast) and activations
};

// oneLayerPlan (PlanTestUtil.h) with the dtypes of `prec`.
PlanBuilder lmPlan(int64_t V, int64_t H, int64_t T, int64_t B, int64_t microbatches, Precision prec) {
  PlanBuilder p(V, T, B, microbatches);
  const int64_t M = B * T;
  const std::string act = prec == Precision::kF32 ? "f32" : "bf16";
  const std::string par = prec == Precision::kBf16 ? "bf16" : "f32";
  const int64_t wte = p.buffer("transformer.wte.weight", "param", {V, H}, par);
  const int64_t dwte = p.buffer("grad.wte", "grad", {V, H});
  const int64_t mwte = p.buffer("adam_m.wte", "optimizer_state", {V, H});
  const int64_t vwte = p.buffer("adam_v.wte", "optimizer_state", {V, H});
  const int64_t lm = p.buffer("lm_head.weight", "param", {V, H}, par);
  const int64_t dlm = p.buffer("grad.lm_head", "grad", {V, H});
  const int64_t mlm = p.buffer("adam_m.lm_head", "optimizer_state", {V, H});
  const int64_t vlm = p.buffer("adam_v.lm_head", "optimizer_state", {V, H});
  // The weights the forward and backward read: the params themselves, or their bf16 copies.
  int64_t wteUse = wte, lmUse = lm;
  if (prec == Precision::kMixed) {
    wteUse = p.buffer("transformer.wte.weight.bf16", "param", {V, H}, "bf16");
    lmUse = p.buffer("lm_head.weight.bf16", "param", {V, H}, "bf16");
  }
  const int64_t ids = p.buffer("ids", "input", {B, T}, "i32");
  const int64_t tgt = p.buffer("targets", "input", {B, T}, "i32");
  const int64_t h = p.buffer("h", "activation", {M, H}, act);
  const int64_t dh = p.buffer("dh", "activation", {M, H}, act);
  const int64_t logits = p.buffer("logits", "activation", {M, V}, act);
  const int64_t loss = p.buffer("loss", "metric", {1});
  const int64_t gn = p.buffer("grad_norm", "metric", {});
  p.param("transformer.wte.weight", {V, H}, wte, dwte, {{"kind", "normal"}, {"std", 0.02}}, false, par);
  p.param("lm_head.weight", {V, H}, lm, dlm, {{"kind", "normal"}, {"std", 0.02}}, true, par);
  const double mb = double(microbatches);
  p.op("step_begin", "fill_zero", {{"x", {loss, dwte, dlm}}});
  auto castCopies = [&](const std::string& sub) {  // bf16 copies of the f32 masters
    p.op(sub, "cast", {{"x", wte}, {"y", wteUse}}, {{"n", V * H}});
    p.op(sub, "cast", {{"x", lm}, {"y", lmUse}}, {{"n", V * H}});
  };
  // The runtime initializes only the manifest's params, so the copies are made before their first use.
  if (prec == Precision::kMixed) castCopies("step_begin");
  p.op("forward", "load_microbatch", {{"ids", ids}, {"targets", tgt}}, {{"B", B}, {"S", T}});
  p.op("forward", "embedding_fwd", {{"ids", ids}, {"table", wteUse}, {"out", h}}, {{"M", M}, {"V", V}, {"H", H}});
  p.op("forward", "linear_fwd", {{"x", h}, {"w", lmUse}, {"y", logits}},
       {{"M", M}, {"K", H}, {"N", V}, {"layout", "out_in"}});
  p.op("forward", "cross_entropy_fwd", {{"logits", logits}, {"targets", tgt}, {"loss", loss}},
       {{"M", M}, {"V", V}, {"scale", 1.0 / mb}});
  p.op("backward", "cross_entropy_bwd", {{"logits", logits}, {"targets", tgt}, {"dlogits", logits}},
       {{"M", M}, {"V", V}, {"scale", 1.0 / (double(M) * mb)}});
  p.op("backward", "linear_bwd_weight", {{"dy", logits}, {"x", h}, {"dw", dlm}},
       {{"M", M}, {"K", H}, {"N", V}, {"layout", "out_in"}, {"accumulate", true}});
  p.op("backward", "linear_bwd_input", {{"dy", logits}, {"w", lmUse}, {"dx", dh}},
       {{"M", M}, {"K", H}, {"N", V}, {"layout", "out_in"}, {"accumulate", false}});
  p.op("backward", "embedding_bwd_weight", {{"ids", ids}, {"dout", dh}, {"dtable", dwte}},
       {{"M", M}, {"V", V}, {"H", H}, {"accumulate", true}});
  p.op("optimizer", "grad_norm", {{"grads", {dwte, dlm}}, {"norm", gn}}, {{"max_norm", 1.0}});
  p.op("optimizer", "adamw", {{"param", wte}, {"grad", dwte}, {"m", mwte}, {"v", vwte}},
       {{"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.0}});
  p.op("optimizer", "adamw", {{"param", lm}, {"grad", dlm}, {"m", mlm}, {"v", vlm}},
       {{"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.1}});
  if (prec == Precision::kMixed) castCopies("optimizer");  // the updated masters' bf16 copies
  p.action("step_begin");
  for (int64_t j = 0; j < microbatches; ++j) {
    p.action("forward", j);
    p.action("backward", j);
  }
  p.action("optimizer");
  return p;
}

class Bf16TrainTest : public testing::TrainFixture {
 protected:
  Bf16TrainTest() : TrainFixture(11) {}
  // Tokens in [0, period), not in a plain cycle (TrainFixture::repeatingTokens is one).
  std::string mixedTokens(int64_t count, int period) {
    std::vector<uint16_t> t(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) t[size_t(i)] = uint16_t((i * 7 + i / period) % period);
    const std::string p = path("tokens.bin");
    EXPECT_TRUE(writeTokenFile(p, t.data(), count).isOk());
    return p;
  }
};

TEST_F(Bf16TrainTest, Bf16AndMixedPrecisionPlansTrackTheF32Plan) {
  constexpr int64_t V = 32, H = 16, T = 8, B = 2, MB = 2, kSteps = 30;
  const std::string data = mixedTokens(4096, 16);
  std::map<Precision, RunResult> res;
  for (Precision prec : {Precision::kF32, Precision::kBf16, Precision::kMixed}) {
    const std::string name = prec == Precision::kF32 ? "f32" : prec == Precision::kBf16 ? "bf16" : "mixed";
    RunOptions o = options(planDir(lmPlan(V, H, T, B, MB, prec), name), kSteps);
    o.data = data;
    o.saveParams = path(name + ".safetensors");
    Status s = run(o, &res[prec]);
    ASSERT_TRUE(s.isOk()) << name << ": " << s.message();
    ASSERT_EQ(res[prec].steps.size(), size_t(kSteps));
  }
  const RunResult& ref = res[Precision::kF32];
  EXPECT_LT(ref.steps.back().loss, 0.8 * ref.steps.front().loss) << "the f32 plan did not learn";
  for (Precision prec : {Precision::kBf16, Precision::kMixed}) {
    double worst = 0;
    for (int64_t k = 0; k < kSteps; ++k) {
      const double a = ref.steps[size_t(k)].loss, b = res[prec].steps[size_t(k)].loss;
      worst = std::max(worst, std::abs(a - b) / std::abs(a));
    }
    EXPECT_LT(worst, 1e-2) << (prec == Precision::kBf16 ? "bf16" : "mixed");
    EXPECT_GT(worst, 0.0) << "bf16 storage should change the numbers a little";
  }
  // A bf16 plan's params are exported as F32 holding bf16 values exactly.
  auto bf16Params = readAll(path("bf16.safetensors"));
  ASSERT_EQ(bf16Params.size(), 2u);
  for (const auto& [name, v] : bf16Params)
    for (float x : v) ASSERT_EQ(roundToBf16(x), x) << name;
  // The mixed plan's masters are f32 (not all bf16 values).
  auto mixed = readAll(path("mixed.safetensors"));
  int64_t notBf16 = 0;
  for (const auto& [name, v] : mixed)
    for (float x : v) notBf16 += roundToBf16(x) != x;
  EXPECT_GT(notBf16, 0);
}

// Mixed precision through an interpreter: after each step the bf16 copies are exactly the rounded f32
// masters (the cast after adamw), and init/import round to bf16 for bf16 params.
TEST_F(Bf16TrainTest, MixedPrecisionCopiesAreTheRoundedMasters) {
  constexpr int64_t V = 16, H = 8, T = 4, B = 1, MB = 2;
  const std::string dir = planDir(lmPlan(V, H, T, B, MB, Precision::kMixed), "mixed");
  auto plan = loadPlan(dir);
  ASSERT_TRUE(plan.isOk()) << plan.status().message();
  auto backend = makeCpuBackend();
  auto in = Interpreter::create(*plan, 0, *backend);
  ASSERT_TRUE(in.isOk()) << in.status().message();
  ASSERT_TRUE(train::initParams(plan->manifest, **in, 3, "").isOk());
  auto sources = train::makeDataSources(plan->manifest, "synthetic", false, 3);
  ASSERT_TRUE(sources.isOk()) << sources.status().message();
  const MicrobatchSource data = (*sources)(0);
  const Program& prog = plan->programs[0];
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE((*in)->runStep(step, 1e-2, data).isOk());
    for (const char* name : {"transformer.wte.weight", "lm_head.weight"}) {
      const auto master = (*in)->readF32(prog.findBuffer(name)).value();
      const auto copy = (*in)->readF32(prog.findBuffer(std::string(name) + ".bf16")).value();
      ASSERT_EQ(master.size(), copy.size());
      for (size_t k = 0; k < master.size(); ++k) ASSERT_EQ(copy[k], roundToBf16(master[k])) << name << " " << k;
    }
  }
  // The f32 masters are initialized unrounded; a bf16 param (the kBf16 plan) gets the rounded values.
  const std::string bdir = planDir(lmPlan(V, H, T, B, MB, Precision::kBf16), "bf16");
  auto bplan = loadPlan(bdir);
  ASSERT_TRUE(bplan.isOk()) << bplan.status().message();
  auto bbackend = makeCpuBackend(), fbackend = makeCpuBackend();
  auto bin = Interpreter::create(*bplan, 0, *bbackend);
  auto fin = Interpreter::create(*plan, 0, *fbackend);
  ASSERT_TRUE(bin.isOk() && fin.isOk());
  ASSERT_TRUE(train::initParams(bplan->manifest, **bin, 3, "").isOk());
  ASSERT_TRUE(train::initParams(plan->manifest, **fin, 3, "").isOk());
  const auto b16 = (*bin)->readF32(bplan->programs[0].findBuffer("lm_head.weight")).value();
  const auto f32 = (*fin)->readF32(prog.findBuffer("lm_head.weight")).value();
  int64_t differ = 0;
  for (size_t k = 0; k < f32.size(); ++k) {
    ASSERT_EQ(b16[k], roundToBf16(f32[k])) << k;
    differ += b16[k] != f32[k];
  }
  EXPECT_GT(differ, 0);
  // --init-from rounds the file's values into a bf16 param; --save-params writes them back exactly.
  RunOptions save = options(dir, 0);
  save.saveParams = path("init.safetensors");
  ASSERT_TRUE(run(save).isOk());
  RunOptions import = options(bdir, 0);
  import.initFrom = save.saveParams;
  import.saveParams = path("imported.safetensors");
  ASSERT_TRUE(run(import).isOk());
  auto a = readAll(save.saveParams), b = readAll(import.saveParams);
  for (const auto& [name, v] : a)
    for (size_t k = 0; k < v.size(); ++k) ASSERT_EQ(b[name][k], roundToBf16(v[k])) << name << " " << k;
}

}  // namespace
}  // namespace llcdist::rt
