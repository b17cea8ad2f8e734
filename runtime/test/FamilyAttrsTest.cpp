// The model families' optional op attrs on the CPU backend, each op run from a plan (PlanBuilder) by an
// interpreter through the kernel table, as a loaded plan runs:
//  - rope_fwd / rope_bwd `rotary_dim` (Phi's partial rotary embedding, transformers 4.40 modeling_phi.py):
//    the first rotary_dim dims of each head rotate (rotate_half within them, inv_freq[j] =
//    1/theta^(2j/rotary_dim)), the rest pass through; llama3 scaling over rotary_dim.
//  - rms_norm_fwd / add_rms_norm_fwd / rms_norm_bwd_input / rms_norm_bwd `weight_offset` (Gemma's
//    RMSNorm: y = x·rstd·(offset + w)).
//  - embedding_fwd / embedding_bwd_weight `scale` (Gemma's sqrt(hidden) multiplier), vocabulary-parallel
//    too.
//  - swiglu_fwd / swiglu_bwd `act` "gelu_tanh" (Gemma's GeGLU).
//  - layer_norm_fwd / add_layer_norm_fwd / layer_norm_bwd_input without gamma and beta (OLMo's LayerNorm).
//  - pos_embedding_fwd / pos_embedding_bwd_weight `offset` (OPT's table: position p at row p + 2), also on
//    the fused embedding_fwd / embedding_bwd_weight with wpe / dwpe and sequence-parallel.
// Each against a reference written here in double from the formulas (nothing shared with the kernels),
// forward and backward, the backward also against central differences of the forward; absent == the
// explicit default, bit for bit, and == the kernel as it was before the attr (plans without it run the
// same bits); bad values refused at plan load, naming the op's attr and the valid values.
#include "PlanTestUtil.h"
#include "TestUtil.h"

#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Kernels.h"
#include "llcdist/runtime/Plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace llcdist::rt {
namespace {

using testing::checkGradient;
using testing::dot;
using testing::expectAllClose;
using testing::json;
using testing::randn;

// ---- one op in a plan ------------------------------------------------------------------------------------

// A buffer of the plan: its shape, dtype and initial contents (f32 values, or i32 ids).
struct Buffer {
  std::vector<int64_t> shape;
  std::vector<float> f;
  std::vector<int32_t> ids;
  std::string dtype = "f32";
};
using Buffers = std::map<std::string, Buffer>;

Buffer f32(std::vector<int64_t> shape, std::vector<float> v) {
  return Buffer{std::move(shape), std::move(v), {}, "f32"};
}
Buffer i32(std::vector<int64_t> shape, std::vector<int32_t> v) {
  return Buffer{std::move(shape), {}, std::move(v), "i32"};
}

// The plan of one op: `roles` maps each role to a buffer name of `bufs`; `tp` > 1 makes a tp mesh (one
// program for every rank: the vocabulary-parallel ops).
struct OnePlan {
  testing::PlanBuilder builder{16, 4, 1, 1};
  std::map<std::string, int64_t> ids;
};
OnePlan onePlan(const std::string& op, const json& roles, const json& attrs, const Buffers& bufs, int tp = 1) {
  OnePlan p;
  if (tp > 1) {
    p.builder.manifest["mesh"]["tp"] = tp;
    json ranks = json::array();
    for (int r = 0; r < tp; ++r) ranks.push_back(r);
    p.builder.manifest["programs"][0]["ranks"] = ranks;
  }
  for (const auto& [name, b] : bufs) p.ids[name] = p.builder.buffer(name, "activation", b.shape, b.dtype);
  json args = json::object();
  for (auto it = roles.begin(); it != roles.end(); ++it) args[it.key()] = p.ids.at(it.value().get<std::string>());
  p.builder.op("s", op, args, attrs);
  p.builder.action("s");
  return p;
}

// Loads a plan from its JSON texts; `rawProgram` replaces the program's text.
StatusOr<Plan> loadPlan(const testing::PlanBuilder& b, const std::string& rawProgram = "") {
  Plan plan;
  LLCDIST_ASSIGN_OR_RETURN(plan.manifest, parseManifest(b.manifest.dump(), "manifest.json"));
  LLCDIST_ASSIGN_OR_RETURN(
      Program prog, parseProgram(rawProgram.empty() ? b.program.dump() : rawProgram, "program-0.json", plan.manifest));
  plan.programs.push_back(std::move(prog));
  return plan;
}

// An interpreter on the CPU backend over the loaded one-op plan; set() writes a buffer, run() runs the
// op and returns every f32 buffer's contents.
class OpRunner {
 public:
  OpRunner(const std::string& op, const json& roles, const json& attrs, const Buffers& bufs, int tp = 1, int rank = 0)
      : bufs_(bufs), one_(onePlan(op, roles, attrs, bufs, tp)) {
    StatusOr<Plan> plan = loadPlan(one_.builder);
    EXPECT_TRUE(plan.isOk()) << op << ": " << plan.status().toString();
    if (!plan.isOk()) return;
    plan_ = std::make_unique<Plan>(std::move(plan).value());
    backend_ = makeCpuBackend(CpuBackendOptions{});
    StatusOr<std::unique_ptr<Interpreter>> it = Interpreter::create(*plan_, 0, *backend_, rank);
    EXPECT_TRUE(it.isOk()) << it.status().toString();
    if (it.isOk()) interp_ = std::move(it).value();
  }
  bool ok() const { return interp_ != nullptr; }
  // Overrides a buffer's contents for the next run.
  void set(const std::string& name, const std::vector<float>& v) { bufs_.at(name).f = v; }
  std::map<std::string, std::vector<float>> run() {
    std::map<std::string, std::vector<float>> out;
    if (!ok()) return out;
    for (const auto& [name, b] : bufs_) {
      const Status s = b.dtype == "i32" ? interp_->writeBuffer(one_.ids.at(name), b.ids.data())
                                        : interp_->writeF32(one_.ids.at(name), b.f.data());
      EXPECT_TRUE(s.isOk()) << name << ": " << s.toString();
    }
    const Status run = interp_->runSubroutine(0, 0, -1, 0.0, nullptr);
    EXPECT_TRUE(run.isOk()) << run.toString();
    for (const auto& [name, b] : bufs_) {
      if (b.dtype == "i32") continue;
      StatusOr<std::vector<float>> v = interp_->readF32(one_.ids.at(name));
      EXPECT_TRUE(v.isOk()) << v.status().toString();
      if (v.isOk()) out[name] = std::move(v).value();
    }
    return out;
  }

 private:
  Buffers bufs_;
  OnePlan one_;
  std::unique_ptr<Plan> plan_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Interpreter> interp_;
};

std::map<std::string, std::vector<float>> runOnce(const std::string& op, const json& roles, const json& attrs,
                                                  const Buffers& bufs) {
  OpRunner r(op, roles, attrs, bufs);
  return r.run();
}

// The load of a one-op plan with `attrs` must fail at attrs.<attr>, its message holding every `parts`.
void expectRefused(const std::string& op, const json& roles, const json& attrs, const Buffers& bufs,
                   const std::string& attr, const std::vector<std::string>& parts) {
  const StatusOr<Plan> plan = loadPlan(onePlan(op, roles, attrs, bufs).builder);
  const std::string what = op + " " + attrs.dump();
  ASSERT_FALSE(plan.isOk()) << what << " loaded";
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument) << plan.status().toString();
  const std::string& msg = plan.status().message();
  EXPECT_NE(msg.find("attrs." + attr), std::string::npos) << what << ": " << msg;
  for (const std::string& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << what << ": " << msg;
}

// A float attr written as an infinity (JSON has none: 1e999 overflows a double) fails the plan's parse;
// the attr's placeholder "@INF@" in `attrs` is replaced by 1e999 in the program's text.
void expectNoInfinity(const std::string& op, const json& roles, const json& attrs, const Buffers& bufs) {
  const OnePlan p = onePlan(op, roles, attrs, bufs);
  std::string text = p.builder.program.dump();
  const size_t at = text.find("\"@INF@\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 7, "1e999");
  const StatusOr<Plan> plan = loadPlan(p.builder, text);
  ASSERT_FALSE(plan.isOk()) << op << " with an infinite attr loaded";
  EXPECT_NE(plan.status().message().find("1e999"), std::string::npos) << plan.status().message();
}

json withAttrs(json attrs, const json& extra) {
  for (auto it = extra.begin(); it != extra.end(); ++it) attrs[it.key()] = it.value();
  return attrs;
}

// ---- rope_fwd / rope_bwd: rotary_dim -------------------------------------------------------------------

constexpr int64_t kRB = 2, kRS = 5, kRN = 3, kRHd = 10;

const json kRopeFwdRoles = {{"x", "x"}, {"y", "y"}};
const json kRopeBwdRoles = {{"dy", "dy"}, {"dx", "dx"}};
json ropeAttrs(const json& extra = json::object(), int64_t hd = kRHd) {
  return withAttrs({{"B", kRB}, {"S", kRS}, {"n", kRN}, {"hd", hd}, {"theta", 10000.0}}, extra);
}
Buffers ropeBuffers(int64_t hd = kRHd, uint32_t seed = 1) {
  const int64_t e = kRB * kRS * kRN * hd;
  return {{"x", f32({e}, randn(e, seed))},
          {"y", f32({e}, std::vector<float>(static_cast<size_t>(e), 0.0f))},
          {"dy", f32({e}, randn(e, seed + 1))},
          {"dx", f32({e}, std::vector<float>(static_cast<size_t>(e), 0.0f))}};
}

// HF's partial rotary embedding in double: dims [0, rd) of each head rotate by rotate_half over
// rd (inv_freq[j] = theta^(−2j/rd), angle = pos·inv_freq[j]), dims [rd, hd) pass through; sign −1 is
// the transpose (the backward).
std::vector<double> ropeReference(const std::vector<float>& x, int64_t hd, int64_t rd, double theta, double sign) {
  std::vector<double> y(x.size());
  const int64_t half = rd / 2;
  for (int64_t b = 0; b < kRB; ++b)
    for (int64_t s = 0; s < kRS; ++s)
      for (int64_t h = 0; h < kRN; ++h) {
        const size_t off = size_t(((b * kRS + s) * kRN + h) * hd);
        for (int64_t d = 0; d < hd; ++d) {
          if (d >= rd) {
            y[off + size_t(d)] = x[off + size_t(d)];
            continue;
          }
          const int64_t j = d % half;
          const double angle = double(s) / std::pow(theta, 2.0 * double(j) / double(rd));
          const double c = std::cos(angle), sn = sign * std::sin(angle);
          // rotate_half(x)[d] = −x[d + half] below half, x[d − half] from it
          const double rot = d < half ? -double(x[off + size_t(d + half)]) : double(x[off + size_t(d - half)]);
          y[off + size_t(d)] = double(x[off + size_t(d)]) * c + rot * sn;
        }
      }
  return y;
}

TEST(RotaryDimTest, PartialRotationMatchesTheReferenceForwardAndBackward) {
  for (int64_t rd : {2, 4, 6, 10}) {  // rd/2 odd and even, down to one pair; 10 = hd (every dim)
    SCOPED_TRACE("rotary_dim " + std::to_string(rd));
    const Buffers bufs = ropeBuffers();
    const auto fwd = runOnce("rope_fwd", kRopeFwdRoles, ropeAttrs({{"rotary_dim", rd}}), bufs);
    const auto bwd = runOnce("rope_bwd", kRopeBwdRoles, ropeAttrs({{"rotary_dim", rd}}), bufs);
    ASSERT_EQ(fwd.count("y"), 1u);
    ASSERT_EQ(bwd.count("dx"), 1u);
    expectAllClose(fwd.at("y"), ropeReference(bufs.at("x").f, kRHd, rd, 10000.0, 1.0), 1e-5, 1e-5, "y");
    expectAllClose(bwd.at("dx"), ropeReference(bufs.at("dy").f, kRHd, rd, 10000.0, -1.0), 1e-5, 1e-5, "dx");
    // The pass-through dims are the input's bits.
    for (size_t i = 0; i < bufs.at("x").f.size(); ++i)
      if (int64_t(i) % kRHd >= rd) {
        ASSERT_EQ(fwd.at("y")[i], bufs.at("x").f[i]) << i;
        ASSERT_EQ(bwd.at("dx")[i], bufs.at("dy").f[i]) << i;
      }
  }
}

// rope_bwd is the gradient of rope_fwd: central differences of Σ w·y(x) against rope_bwd(dy = w).
TEST(RotaryDimTest, BackwardIsTheForwardsGradient) {
  Buffers bufs = ropeBuffers(kRHd, 7);
  const std::vector<float> w = randn(int64_t(bufs.at("x").f.size()), 9);
  bufs.at("dy").f = w;
  const auto dx = runOnce("rope_bwd", kRopeBwdRoles, ropeAttrs({{"rotary_dim", 6}}), bufs).at("dx");
  OpRunner fwd("rope_fwd", kRopeFwdRoles, ropeAttrs({{"rotary_dim", 6}}), bufs);
  ASSERT_TRUE(fwd.ok());
  std::vector<float> x = bufs.at("x").f;
  checkGradient(
      x, dx,
      [&] {
        fwd.set("x", x);
        return dot(w, fwd.run().at("y"));
      },
      "dx");
}

// The table is built for rotary_dim, llama3's rope_scaling included: the rotated dims are exactly a
// full rope of head dim rotary_dim on them.
TEST(RotaryDimTest, TheTableIsBuiltForTheRotaryDimLlama3Included) {
  const json llama3 = {{"llama3", true},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 4},
                       {"theta", 500000.0}};
  const int64_t rd = 4;
  const Buffers bufs = ropeBuffers(kRHd, 11);
  const auto partial = runOnce("rope_fwd", kRopeFwdRoles, ropeAttrs(withAttrs(llama3, {{"rotary_dim", rd}})), bufs);
  // The first rd dims of every head, as a tensor of head dim rd.
  const int64_t rows = kRB * kRS * kRN;
  Buffers narrow = ropeBuffers(rd, 12);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < rd; ++d) narrow.at("x").f[size_t(r * rd + d)] = bufs.at("x").f[size_t(r * kRHd + d)];
  const auto full = runOnce("rope_fwd", kRopeFwdRoles, ropeAttrs(llama3, rd), narrow);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < rd; ++d)
      ASSERT_EQ(partial.at("y")[size_t(r * kRHd + d)], full.at("y")[size_t(r * rd + d)]) << r << " " << d;
}

// Absent, rotary_dim = hd and the kernel as it was (every dim rotates): the same bits.
TEST(RotaryDimTest, AbsentIsHdBitForBit) {
  const Buffers bufs = ropeBuffers(kRHd, 13);
  const auto absent = runOnce("rope_fwd", kRopeFwdRoles, ropeAttrs(), bufs);
  const auto explicitHd = runOnce("rope_fwd", kRopeFwdRoles, ropeAttrs({{"rotary_dim", kRHd}}), bufs);
  EXPECT_EQ(absent.at("y"), explicitHd.at("y"));
  const RopeTable table = makeRopeTable(RopeConfig{}, kRHd, 0, kRS).value();
  std::vector<float> y(bufs.at("x").f.size());
  ASSERT_TRUE(ropeForward(table, bufs.at("x").f.data(), y.data(), kRB, kRS, kRN, kRHd).isOk());
  EXPECT_EQ(absent.at("y"), y);
  const auto absentBwd = runOnce("rope_bwd", kRopeBwdRoles, ropeAttrs(), bufs);
  const auto explicitBwd = runOnce("rope_bwd", kRopeBwdRoles, ropeAttrs({{"rotary_dim", kRHd}}), bufs);
  EXPECT_EQ(absentBwd.at("dx"), explicitBwd.at("dx"));
  // A partial rotary width changes the result (the test can fail).
  EXPECT_NE(runOnce("rope_fwd", kRopeFwdRoles, ropeAttrs({{"rotary_dim", 4}}), bufs).at("y"), absent.at("y"));
}

// y may alias x (and dx dy): the pass-through dims stay, the rotated ones as out of place.
TEST(RotaryDimTest, InPlace) {
  const Buffers bufs = ropeBuffers(kRHd, 14);
  const auto out = runOnce("rope_fwd", kRopeFwdRoles, ropeAttrs({{"rotary_dim", 4}}), bufs);
  const auto in = runOnce("rope_fwd", {{"x", "x"}, {"y", "x"}}, ropeAttrs({{"rotary_dim", 4}}), bufs);
  EXPECT_EQ(in.at("x"), out.at("y"));
}

TEST(RotaryDimTest, BadValuesAreRefused) {
  const Buffers bufs = ropeBuffers();
  for (const char* op : {"rope_fwd", "rope_bwd"}) {
    const json& roles = std::string(op) == "rope_fwd" ? kRopeFwdRoles : kRopeBwdRoles;
    for (int64_t rd : {7, 12, 1})  // odd, above hd, below 2
      expectRefused(op, roles, ropeAttrs({{"rotary_dim", rd}}), bufs, "rotary_dim",
                    {op, "rotary_dim must be even and in [2, hd = 10]", "got " + std::to_string(rd)});
    expectRefused(op, roles, ropeAttrs({{"rotary_dim", 0}}), bufs, "rotary_dim", {"integer >= 1"});
    expectRefused(op, roles, ropeAttrs({{"rotary_dim", "4"}}), bufs, "rotary_dim", {});
  }
}

// ---- rms norms: weight_offset -------------------------------------------------------------------------

constexpr int64_t kNM = 5, kNH = 12;
constexpr double kEps = 1e-6;

struct NormReference {
  std::vector<double> y, rstd, dx, dweight;
};
// Gemma's RMSNorm in double: r = 1/sqrt(mean(x²) + eps), y = x·r·(off + w); for loss Σ dy·y: dx = r·(g −
// x·r·mean(g·x·r)) with g = dy·(off + w), dweight = Σ_m dy·x·r.
NormReference normReference(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& dy,
                            double off) {
  NormReference r;
  r.y.resize(x.size());
  r.dx.resize(x.size());
  r.rstd.resize(static_cast<size_t>(kNM));
  r.dweight.assign(static_cast<size_t>(kNH), 0.0);
  for (int64_t m = 0; m < kNM; ++m) {
    double ss = 0;
    for (int64_t h = 0; h < kNH; ++h) ss += double(x[size_t(m * kNH + h)]) * double(x[size_t(m * kNH + h)]);
    const double rs = 1.0 / std::sqrt(ss / double(kNH) + kEps);
    r.rstd[size_t(m)] = rs;
    double gx = 0;
    for (int64_t h = 0; h < kNH; ++h) {
      const size_t i = size_t(m * kNH + h);
      const double xhat = double(x[i]) * rs, wt = off + double(w[size_t(h)]);
      r.y[i] = xhat * wt;
      gx += double(dy[i]) * wt * xhat;
      r.dweight[size_t(h)] += double(dy[i]) * xhat;
    }
    for (int64_t h = 0; h < kNH; ++h) {
      const size_t i = size_t(m * kNH + h);
      r.dx[i] = rs * (double(dy[i]) * (off + double(w[size_t(h)])) - double(x[i]) * rs * gx / double(kNH));
    }
  }
  return r;
}

Buffers normBuffers(uint32_t seed) {
  const int64_t e = kNM * kNH;
  std::vector<float> a = randn(e, seed), b = randn(e, seed + 1), x(static_cast<size_t>(e));
  for (size_t i = 0; i < x.size(); ++i) x[i] = a[i] + b[i];
  return {{"x", f32({kNM, kNH}, x)},
          {"a", f32({kNM, kNH}, a)},
          {"b", f32({kNM, kNH}, b)},
          {"sum", f32({kNM, kNH}, std::vector<float>(static_cast<size_t>(e), 0.0f))},
          {"weight", f32({kNH}, randn(kNH, seed + 2, 0.5f))},
          {"y", f32({kNM, kNH}, std::vector<float>(static_cast<size_t>(e), 0.0f))},
          {"rstd", f32({kNM}, std::vector<float>(static_cast<size_t>(kNM), 0.0f))},
          {"dy", f32({kNM, kNH}, randn(e, seed + 3))},
          {"dx", f32({kNM, kNH}, std::vector<float>(static_cast<size_t>(e), 0.0f))},
          {"dresidual", f32({kNM, kNH}, randn(e, seed + 4))},
          {"dweight", f32({kNH}, randn(kNH, seed + 5))}};
}
const json kRmsFwdRoles = {{"x", "x"}, {"weight", "weight"}, {"y", "y"}, {"rstd", "rstd"}};
const json kAddRmsFwdRoles = {{"a", "a"},           {"b", "b"}, {"sum", "sum"},
                              {"weight", "weight"}, {"y", "y"}, {"rstd", "rstd"}};
const json kRmsBwdInRoles = {{"dy", "dy"}, {"x", "x"}, {"weight", "weight"}, {"rstd", "rstd"}, {"dx", "dx"}};
const json kRmsBwdRoles = {{"dy", "dy"},     {"x", "x"},   {"weight", "weight"},
                           {"rstd", "rstd"}, {"dx", "dx"}, {"dweight", "dweight"}};
json normAttrs(const json& extra, bool fwd) {
  json a = {{"M", kNM}, {"H", kNH}};
  if (fwd) a["eps"] = kEps;
  return withAttrs(a, extra);
}

TEST(WeightOffsetTest, EveryRmsNormOpMatchesTheReference) {
  for (double off : {1.0, -0.25}) {
    SCOPED_TRACE("weight_offset " + std::to_string(off));
    const json attr = {{"weight_offset", off}};
    Buffers bufs = normBuffers(21);
    const NormReference ref = normReference(bufs.at("x").f, bufs.at("weight").f, bufs.at("dy").f, off);
    const auto fwd = runOnce("rms_norm_fwd", kRmsFwdRoles, normAttrs(attr, true), bufs);
    expectAllClose(fwd.at("y"), ref.y, 1e-5, 1e-5, "rms_norm_fwd y");
    expectAllClose(fwd.at("rstd"), ref.rstd, 1e-6, 1e-5, "rms_norm_fwd rstd");
    const auto added = runOnce("add_rms_norm_fwd", kAddRmsFwdRoles, normAttrs(attr, true), bufs);
    expectAllClose(added.at("y"), ref.y, 1e-5, 1e-5, "add_rms_norm_fwd y");
    EXPECT_EQ(added.at("y"), fwd.at("y"));  // the sum is the x above, exactly
    bufs.at("rstd").f = fwd.at("rstd");     // the backward reads the forward's rstd
    const auto bwdIn = runOnce("rms_norm_bwd_input", kRmsBwdInRoles, normAttrs(attr, false), bufs);
    expectAllClose(bwdIn.at("dx"), ref.dx, 1e-5, 1e-4, "rms_norm_bwd_input dx");
    // The fused backward: dweight is unchanged by the offset (accumulate false), dx with and without the
    // residual.
    const auto bwd =
        runOnce("rms_norm_bwd", kRmsBwdRoles, normAttrs(withAttrs(attr, {{"accumulate", false}}), false), bufs);
    expectAllClose(bwd.at("dx"), ref.dx, 1e-5, 1e-4, "rms_norm_bwd dx");
    expectAllClose(bwd.at("dweight"), ref.dweight, 1e-5, 1e-4, "rms_norm_bwd dweight");
    EXPECT_EQ(bwd.at("dx"), bwdIn.at("dx"));
    json residualRoles = kRmsBwdRoles;
    residualRoles["dresidual"] = "dresidual";
    const auto res =
        runOnce("rms_norm_bwd", residualRoles, normAttrs(withAttrs(attr, {{"accumulate", false}}), false), bufs);
    std::vector<double> want(ref.dx.size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = ref.dx[i] + double(bufs.at("dresidual").f[i]);
    expectAllClose(res.at("dx"), want, 1e-5, 1e-4, "rms_norm_bwd dx + dresidual");
  }
}

// Central differences of Σ w·y(x, weight) through rms_norm_fwd with the offset, against rms_norm_bwd's
// dx and dweight (from dy = w and the forward's rstd).
TEST(WeightOffsetTest, BackwardIsTheForwardsGradient) {
  const json attr = {{"weight_offset", 1.0}};
  Buffers bufs = normBuffers(31);
  const std::vector<float> w = bufs.at("dy").f;
  OpRunner fwd("rms_norm_fwd", kRmsFwdRoles, normAttrs(attr, true), bufs);
  ASSERT_TRUE(fwd.ok());
  bufs.at("rstd").f = fwd.run().at("rstd");
  const auto bwd =
      runOnce("rms_norm_bwd", kRmsBwdRoles, normAttrs(withAttrs(attr, {{"accumulate", false}}), false), bufs);
  std::vector<float> x = bufs.at("x").f, weight = bufs.at("weight").f;
  const auto loss = [&] {
    fwd.set("x", x);
    fwd.set("weight", weight);
    return dot(w, fwd.run().at("y"));
  };
  checkGradient(x, bwd.at("dx"), loss, "dx");
  checkGradient(weight, bwd.at("dweight"), loss, "dweight");
}

// Absent, weight_offset 0 and the kernels as they were: the same bits (a −0 weight included).
TEST(WeightOffsetTest, AbsentIsZeroBitForBit) {
  Buffers bufs = normBuffers(41);
  bufs.at("weight").f[3] = -0.0f;
  const auto absent = runOnce("rms_norm_fwd", kRmsFwdRoles, normAttrs({}, true), bufs);
  const auto zero = runOnce("rms_norm_fwd", kRmsFwdRoles, normAttrs({{"weight_offset", 0.0}}, true), bufs);
  EXPECT_EQ(absent.at("y"), zero.at("y"));
  std::vector<float> y(static_cast<size_t>(kNM * kNH)), rstd(static_cast<size_t>(kNM));
  rmsNormForward(bufs.at("x").f.data(), bufs.at("weight").f.data(), y.data(), rstd.data(), kNM, kNH, float(kEps));
  EXPECT_EQ(absent.at("y"), y);
  for (size_t i = 3; i < y.size(); i += size_t(kNH)) EXPECT_EQ(std::signbit(absent.at("y")[i]), std::signbit(y[i]));
  bufs.at("rstd").f = rstd;
  const auto absentIn = runOnce("rms_norm_bwd_input", kRmsBwdInRoles, normAttrs({}, false), bufs);
  const auto zeroIn = runOnce("rms_norm_bwd_input", kRmsBwdInRoles, normAttrs({{"weight_offset", 0}}, false), bufs);
  EXPECT_EQ(absentIn.at("dx"), zeroIn.at("dx"));
  std::vector<float> dx(static_cast<size_t>(kNM * kNH));
  rmsNormBackwardInput(bufs.at("dy").f.data(), bufs.at("x").f.data(), bufs.at("weight").f.data(), rstd.data(),
                       dx.data(), kNM, kNH);
  EXPECT_EQ(absentIn.at("dx"), dx);
  const json acc = {{"accumulate", true}};
  const auto absentBwd = runOnce("rms_norm_bwd", kRmsBwdRoles, normAttrs(acc, false), bufs);
  const auto zeroBwd =
      runOnce("rms_norm_bwd", kRmsBwdRoles, normAttrs(withAttrs(acc, {{"weight_offset", 0.0}}), false), bufs);
  EXPECT_EQ(absentBwd.at("dx"), zeroBwd.at("dx"));
  EXPECT_EQ(absentBwd.at("dweight"), zeroBwd.at("dweight"));
  const auto absentAdd = runOnce("add_rms_norm_fwd", kAddRmsFwdRoles, normAttrs({}, true), bufs);
  const auto zeroAdd = runOnce("add_rms_norm_fwd", kAddRmsFwdRoles, normAttrs({{"weight_offset", 0.0}}, true), bufs);
  EXPECT_EQ(absentAdd.at("y"), zeroAdd.at("y"));
  // An offset changes the result (the test can fail).
  EXPECT_NE(runOnce("rms_norm_fwd", kRmsFwdRoles, normAttrs({{"weight_offset", 1.0}}, true), bufs).at("y"),
            absent.at("y"));
}

TEST(WeightOffsetTest, BadValuesAreRefused) {
  const Buffers bufs = normBuffers(51);
  struct Case {
    const char* op;
    const json& roles;
    bool fwd;
  };
  for (const Case& c : {Case{"rms_norm_fwd", kRmsFwdRoles, true}, Case{"add_rms_norm_fwd", kAddRmsFwdRoles, true},
                        Case{"rms_norm_bwd_input", kRmsBwdInRoles, false}, Case{"rms_norm_bwd", kRmsBwdRoles, false}}) {
    json base = normAttrs({}, c.fwd);
    if (std::string(c.op) == "rms_norm_bwd") base["accumulate"] = false;
    // Finite as a double but not as the fp32 value the kernels add.
    expectRefused(c.op, c.roles, withAttrs(base, {{"weight_offset", 1e39}}), bufs, "weight_offset",
                  {c.op, "weight_offset must be a finite fp32 number"});
    // Not finite at all: no JSON number is.
    expectNoInfinity(c.op, c.roles, withAttrs(base, {{"weight_offset", "@INF@"}}), bufs);
    expectRefused(c.op, c.roles, withAttrs(base, {{"weight_offset", "1"}}), bufs, "weight_offset", {"number"});
  }
  // Only the RMS norms take it.
  const Buffers ln = {{"x", f32({kNM, kNH}, randn(kNM * kNH, 1))}, {"gamma", f32({kNH}, randn(kNH, 2))},
                      {"beta", f32({kNH}, randn(kNH, 3))},         {"y", f32({kNM, kNH}, randn(kNM * kNH, 4))},
                      {"mean", f32({kNM}, randn(kNM, 5))},         {"rstd", f32({kNM}, randn(kNM, 6))}};
  const json lnRoles = {{"x", "x"}, {"gamma", "gamma"}, {"beta", "beta"},
                        {"y", "y"}, {"mean", "mean"},   {"rstd", "rstd"}};
  const OnePlan p = onePlan("layer_norm_fwd", lnRoles, normAttrs({{"weight_offset", 1.0}}, true), ln);
  const StatusOr<Plan> plan = loadPlan(p.builder);
  ASSERT_FALSE(plan.isOk());
  EXPECT_NE(plan.status().message().find("unknown attribute"), std::string::npos) << plan.status().message();
}

// ---- layer norms without gamma and beta (OLMo's OlmoLayerNorm) ----------------------------------------

// In double, independently of the kernels: mu, r = 1/sqrt(var + eps), xhat = (x − mu)·r, y = xhat·gamma
// (gamma empty: 1, OLMo's LayerNorm; no beta: MPT's, or beta 0); for loss Σ dy·y, with g = dy·gamma:
// dx = r·(g − mean(g) − xhat·mean(g·xhat)) and dweight (dgamma) = Σ_m dy·xhat.
NormReference layerNormReference(const std::vector<float>& x, const std::vector<float>& dy,
                                 const std::vector<float>& gamma, double eps) {
  NormReference r{std::vector<double>(x.size()), std::vector<double>(static_cast<size_t>(kNM)),
                  std::vector<double>(x.size()), std::vector<double>(static_cast<size_t>(kNH), 0.0)};
  const auto gammaAt = [&gamma](int64_t h) { return gamma.empty() ? 1.0 : double(gamma[size_t(h)]); };
  for (int64_t m = 0; m < kNM; ++m) {
    double mu = 0, var = 0, g = 0, gx = 0;
    for (int64_t h = 0; h < kNH; ++h) mu += double(x[size_t(m * kNH + h)]);
    mu /= double(kNH);
    for (int64_t h = 0; h < kNH; ++h)
      var += (double(x[size_t(m * kNH + h)]) - mu) * (double(x[size_t(m * kNH + h)]) - mu);
    const double rs = 1.0 / std::sqrt(var / double(kNH) + eps);
    r.rstd[size_t(m)] = rs;
    std::vector<double> xhat(static_cast<size_t>(kNH));
    for (int64_t h = 0; h < kNH; ++h) {
      const size_t i = size_t(m * kNH + h);
      xhat[size_t(h)] = (double(x[i]) - mu) * rs;
      r.y[i] = xhat[size_t(h)] * gammaAt(h);
      r.dweight[size_t(h)] += double(dy[i]) * xhat[size_t(h)];
      g += double(dy[i]) * gammaAt(h);
      gx += double(dy[i]) * gammaAt(h) * xhat[size_t(h)];
    }
    for (int64_t h = 0; h < kNH; ++h) {
      const size_t i = size_t(m * kNH + h);
      r.dx[i] = rs * (double(dy[i]) * gammaAt(h) - g / double(kNH) - xhat[size_t(h)] * gx / double(kNH));
    }
  }
  return r;
}

const json kLnPlainFwdRoles = {{"x", "x"}, {"y", "y"}, {"mean", "mean"}, {"rstd", "rstd"}};
const json kAddLnPlainFwdRoles = {{"a", "a"}, {"b", "b"},       {"sum", "sum"},
                                  {"y", "y"}, {"mean", "mean"}, {"rstd", "rstd"}};
const json kLnPlainBwdInRoles = {{"dy", "dy"}, {"x", "x"}, {"mean", "mean"}, {"rstd", "rstd"}, {"dx", "dx"}};

Buffers plainLayerNormBuffers(uint32_t seed) {
  Buffers b = normBuffers(seed);
  for (float& v : b.at("a").f) v += 2.0f;  // a non-zero mean
  for (size_t i = 0; i < b.at("x").f.size(); ++i) b.at("x").f[i] = b.at("a").f[i] + b.at("b").f[i];
  b["mean"] = f32({kNM}, std::vector<float>(static_cast<size_t>(kNM), 0.0f));
  b["gamma"] = f32({kNH}, std::vector<float>(static_cast<size_t>(kNH), 1.0f));
  b["beta"] = f32({kNH}, std::vector<float>(static_cast<size_t>(kNH), 0.0f));
  return b;
}

// layer_norm_fwd, add_layer_norm_fwd and layer_norm_bwd_input without gamma (and beta): the reference
// above, and the bits of the same ops given gamma 1 and beta 0.
TEST(PlainLayerNormTest, EveryOpMatchesTheReferenceAndGammaOneBetaZero) {
  Buffers bufs = plainLayerNormBuffers(61);
  const NormReference ref = layerNormReference(bufs.at("x").f, bufs.at("dy").f, {}, 1e-5);
  const json fwdAttrs = {{"M", kNM}, {"H", kNH}, {"eps", 1e-5}}, bwdAttrs = {{"M", kNM}, {"H", kNH}};
  const auto fwd = runOnce("layer_norm_fwd", kLnPlainFwdRoles, fwdAttrs, bufs);
  expectAllClose(fwd.at("y"), ref.y, 1e-5, 1e-5, "layer_norm_fwd y");
  expectAllClose(fwd.at("rstd"), ref.rstd, 1e-6, 1e-5, "layer_norm_fwd rstd");
  json affine = kLnPlainFwdRoles;
  affine["gamma"] = "gamma";
  affine["beta"] = "beta";
  EXPECT_EQ(runOnce("layer_norm_fwd", affine, fwdAttrs, bufs).at("y"), fwd.at("y"));
  const auto added = runOnce("add_layer_norm_fwd", kAddLnPlainFwdRoles, fwdAttrs, bufs);
  EXPECT_EQ(added.at("y"), fwd.at("y"));  // the sum is the x above, exactly
  bufs.at("mean").f = fwd.at("mean");     // the backward reads the forward's statistics
  bufs.at("rstd").f = fwd.at("rstd");
  const auto bwdIn = runOnce("layer_norm_bwd_input", kLnPlainBwdInRoles, bwdAttrs, bufs);
  expectAllClose(bwdIn.at("dx"), ref.dx, 1e-5, 1e-4, "layer_norm_bwd_input dx");
  json withGamma = kLnPlainBwdInRoles;
  withGamma["gamma"] = "gamma";
  EXPECT_EQ(runOnce("layer_norm_bwd_input", withGamma, bwdAttrs, bufs).at("dx"), bwdIn.at("dx"));
  // The fused backward without gamma, dgamma and dbeta: the input gradient, then dresidual + it.
  json fusedRoles = kLnPlainBwdInRoles;
  fusedRoles["dresidual"] = "dresidual";
  const auto fused = runOnce("layer_norm_bwd", fusedRoles, withAttrs(bwdAttrs, {{"accumulate", false}}), bufs);
  std::vector<float> want(bwdIn.at("dx").size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = bufs.at("dresidual").f[i] + bwdIn.at("dx")[i];
  EXPECT_EQ(fused.at("dx"), want);
  // Another gamma changes the result (the comparison can fail).
  bufs.at("gamma").f[0] = 2.0f;
  EXPECT_NE(runOnce("layer_norm_bwd_input", withGamma, bwdAttrs, bufs).at("dx"), bwdIn.at("dx"));
}

// ---- layer norms with gamma and no beta (torch's LayerNorm(bias=False), MPT's) -------------------------

// layer_norm_fwd, add_layer_norm_fwd, layer_norm_bwd_weight and layer_norm_bwd with gamma and without
// beta (dbeta): the reference above, and the bits of the same ops given beta 0 (and a dbeta).
TEST(BiasFreeLayerNormTest, EveryOpMatchesTheReferenceAndBetaZero) {
  Buffers bufs = plainLayerNormBuffers(83);
  for (size_t h = 0; h < bufs.at("gamma").f.size(); ++h) bufs.at("gamma").f[h] = 0.5f + 0.125f * float(h % 7);
  bufs["dgamma"] = f32({kNH}, std::vector<float>(static_cast<size_t>(kNH), 0.0f));
  bufs["dbeta"] = f32({kNH}, std::vector<float>(static_cast<size_t>(kNH), 0.0f));
  const NormReference ref = layerNormReference(bufs.at("x").f, bufs.at("dy").f, bufs.at("gamma").f, 1e-5);
  const json fwdAttrs = {{"M", kNM}, {"H", kNH}, {"eps", 1e-5}};
  const json bwdAttrs = {{"M", kNM}, {"H", kNH}, {"accumulate", false}};
  json fwdRoles = kLnPlainFwdRoles;
  fwdRoles["gamma"] = "gamma";
  const auto fwd = runOnce("layer_norm_fwd", fwdRoles, fwdAttrs, bufs);
  expectAllClose(fwd.at("y"), ref.y, 1e-5, 1e-5, "layer_norm_fwd y without beta");
  json affine = fwdRoles;
  affine["beta"] = "beta";
  EXPECT_EQ(runOnce("layer_norm_fwd", affine, fwdAttrs, bufs).at("y"), fwd.at("y"));
  json addRoles = kAddLnPlainFwdRoles;
  addRoles["gamma"] = "gamma";
  EXPECT_EQ(runOnce("add_layer_norm_fwd", addRoles, fwdAttrs, bufs).at("y"), fwd.at("y"));
  bufs.at("mean").f = fwd.at("mean");  // the backward reads the forward's statistics
  bufs.at("rstd").f = fwd.at("rstd");
  const json wRoles = {{"dy", "dy"}, {"x", "x"}, {"mean", "mean"}, {"rstd", "rstd"}, {"dgamma", "dgamma"}};
  const auto w = runOnce("layer_norm_bwd_weight", wRoles, bwdAttrs, bufs);
  expectAllClose(w.at("dgamma"), ref.dweight, 1e-5, 1e-4, "layer_norm_bwd_weight dgamma without dbeta");
  json wWithBeta = wRoles;
  wWithBeta["dbeta"] = "dbeta";
  EXPECT_EQ(runOnce("layer_norm_bwd_weight", wWithBeta, bwdAttrs, bufs).at("dgamma"), w.at("dgamma"));
  json inRoles = kLnPlainBwdInRoles;
  inRoles["gamma"] = "gamma";
  const auto in = runOnce("layer_norm_bwd_input", inRoles, {{"M", kNM}, {"H", kNH}}, bufs);
  expectAllClose(in.at("dx"), ref.dx, 1e-5, 1e-4, "layer_norm_bwd_input dx with gamma");
  // The fused backward with gamma and dgamma and no dbeta: both gradients, then dresidual + dx.
  json fusedRoles = inRoles;
  fusedRoles["dgamma"] = "dgamma";
  fusedRoles["dresidual"] = "dresidual";
  const auto fused = runOnce("layer_norm_bwd", fusedRoles, bwdAttrs, bufs);
  EXPECT_EQ(fused.at("dgamma"), w.at("dgamma"));
  std::vector<float> want(in.at("dx").size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = bufs.at("dresidual").f[i] + in.at("dx")[i];
  EXPECT_EQ(fused.at("dx"), want);
}

// beta without gamma is no LayerNorm; in layer_norm_bwd gamma and dgamma come together and dbeta needs
// dgamma: refused at load, naming the roles.
TEST(PlainLayerNormTest, BetaWithoutGammaIsRefused) {
  const Buffers bufs = plainLayerNormBuffers(71);
  const json attrs = {{"M", kNM}, {"H", kNH}, {"eps", 1e-5}};
  for (const char* op : {"layer_norm_fwd", "add_layer_norm_fwd"}) {
    json roles = std::string(op) == "layer_norm_fwd" ? kLnPlainFwdRoles : kAddLnPlainFwdRoles;
    roles["beta"] = "beta";
    const StatusOr<Plan> plan = loadPlan(onePlan(op, roles, attrs, bufs).builder);
    ASSERT_FALSE(plan.isOk()) << op << " with only beta loaded";
    const std::string& msg = plan.status().message();
    EXPECT_NE(msg.find("args.beta"), std::string::npos) << msg;
    EXPECT_NE(msg.find("beta needs gamma"), std::string::npos) << msg;
  }
  Buffers withGrads = bufs;
  withGrads["dgamma"] = f32({kNH}, std::vector<float>(static_cast<size_t>(kNH), 0.0f));
  withGrads["dbeta"] = f32({kNH}, std::vector<float>(static_cast<size_t>(kNH), 0.0f));
  const json bwdAttrs = {{"M", kNM}, {"H", kNH}, {"accumulate", false}};
  const std::pair<json, const char*> cases[] = {
      {json{{"gamma", "gamma"}}, "gamma and dgamma come together"},
      {json{{"dgamma", "dgamma"}, {"dbeta", "dbeta"}}, "gamma and dgamma come together"},
      {json{{"dbeta", "dbeta"}}, "dbeta needs dgamma"}};
  for (const auto& [extra, want] : cases) {
    json roles = kLnPlainBwdInRoles;
    for (auto it = extra.begin(); it != extra.end(); ++it) roles[it.key()] = it.value();
    const StatusOr<Plan> plan = loadPlan(onePlan("layer_norm_bwd", roles, bwdAttrs, withGrads).builder);
    ASSERT_FALSE(plan.isOk()) << "layer_norm_bwd with " << extra.dump() << " loaded";
    EXPECT_NE(plan.status().message().find(want), std::string::npos) << plan.status().message();
  }
}

// ---- embedding: scale ----------------------------------------------------------------------------------

constexpr int64_t kEM = 7, kEV = 6, kEH = 8;
const float kGemmaScale = float(std::sqrt(double(kEH)));  // Gemma: hidden ** 0.5 in the model's dtype

const json kEmbFwdRoles = {{"ids", "ids"}, {"table", "table"}, {"out", "out"}};
const json kEmbBwdRoles = {{"ids", "ids"}, {"dout", "dout"}, {"dtable", "dtable"}};
json embAttrs(const json& extra, bool bwd, int64_t V = kEV) {
  json a = {{"M", kEM}, {"V", V}, {"H", kEH}};
  if (bwd) a["accumulate"] = false;
  return withAttrs(a, extra);
}
Buffers embBuffers(uint32_t seed, int64_t V = kEV, int32_t globalVocab = int32_t(kEV)) {
  std::vector<int32_t> ids = testing::randIds(kEM, globalVocab, seed);
  ids[1] = ids[4];  // a repeated id: its rows add
  return {{"ids", i32({kEM}, ids)},
          {"table", f32({V, kEH}, randn(V * kEH, seed + 1))},
          {"out", f32({kEM, kEH}, std::vector<float>(static_cast<size_t>(kEM * kEH), 0.0f))},
          {"dout", f32({kEM, kEH}, randn(kEM * kEH, seed + 2))},
          {"dtable", f32({V, kEH}, randn(V * kEH, seed + 3))}};
}

TEST(EmbeddingScaleTest, ForwardAndBackwardMatchTheReference) {
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
    const Buffers bufs = embBuffers(61);
    const json attr = {{"scale", double(kGemmaScale)}};
    const auto fwd = runOnce("embedding_fwd", kEmbFwdRoles, embAttrs(attr, false), bufs);
    const auto bwd = runOnce("embedding_bwd_weight", kEmbBwdRoles,
                             withAttrs(embAttrs(attr, true), {{"accumulate", accumulate}}), bufs);
    const std::vector<int32_t>& ids = bufs.at("ids").ids;
    std::vector<double> out(static_cast<size_t>(kEM * kEH)), dtable(static_cast<size_t>(kEV * kEH), 0.0);
    if (accumulate)
      for (size_t i = 0; i < dtable.size(); ++i) dtable[i] = bufs.at("dtable").f[i];
    for (int64_t m = 0; m < kEM; ++m)
      for (int64_t h = 0; h < kEH; ++h) {
        out[size_t(m * kEH + h)] = double(bufs.at("table").f[size_t(ids[size_t(m)] * kEH + h)]) * double(kGemmaScale);
        dtable[size_t(ids[size_t(m)] * kEH + h)] +=
            double(kGemmaScale) * double(bufs.at("dout").f[size_t(m * kEH + h)]);
      }
    expectAllClose(fwd.at("out"), out, 1e-6, 1e-6, "out");
    expectAllClose(bwd.at("dtable"), dtable, 1e-5, 1e-5, "dtable");
  }
}

// Central differences of Σ w·out(table) against embedding_bwd_weight(dout = w).
TEST(EmbeddingScaleTest, BackwardIsTheForwardsGradient) {
  Buffers bufs = embBuffers(71);
  const json attr = {{"scale", 0.75}};
  const std::vector<float> w = bufs.at("dout").f;
  const auto dtable = runOnce("embedding_bwd_weight", kEmbBwdRoles, embAttrs(attr, true), bufs).at("dtable");
  OpRunner fwd("embedding_fwd", kEmbFwdRoles, embAttrs(attr, false), bufs);
  ASSERT_TRUE(fwd.ok());
  std::vector<float> table = bufs.at("table").f;
  checkGradient(
      table, dtable,
      [&] {
        fwd.set("table", table);
        return dot(w, fwd.run().at("out"));
      },
      "dtable");
}

// Vocabulary-parallel (shard_axis over tp = 2): each rank's out holds its rows scaled and zeros for the
// other's ids, their sum the unsharded scaled gather; each dtable the scaled scatter of its own ids.
TEST(EmbeddingScaleTest, VocabularyParallel) {
  const int64_t local = kEV / 2;
  const Buffers whole = embBuffers(81);
  const json attr = {{"scale", double(kGemmaScale)}, {"shard_axis", "tp"}};
  const auto unsharded =
      runOnce("embedding_fwd", kEmbFwdRoles, embAttrs({{"scale", double(kGemmaScale)}}, false), whole);
  const auto unshardedBwd =
      runOnce("embedding_bwd_weight", kEmbBwdRoles, embAttrs({{"scale", double(kGemmaScale)}}, true), whole);
  std::vector<float> sum(static_cast<size_t>(kEM * kEH), 0.0f);
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    Buffers bufs = embBuffers(81, local, int32_t(kEV));
    bufs.at("ids") = whole.at("ids");
    bufs.at("table").f.assign(whole.at("table").f.begin() + rank * local * kEH,
                              whole.at("table").f.begin() + (rank + 1) * local * kEH);
    OpRunner fwd("embedding_fwd", kEmbFwdRoles, embAttrs(attr, false, local), bufs, 2, rank);
    OpRunner bwd("embedding_bwd_weight", kEmbBwdRoles, embAttrs(attr, true, local), bufs, 2, rank);
    ASSERT_TRUE(fwd.ok() && bwd.ok());
    const std::vector<float> out = fwd.run().at("out");
    const std::vector<float> dtable = bwd.run().at("dtable");
    for (int64_t m = 0; m < kEM; ++m) {
      const int32_t id = whole.at("ids").ids[size_t(m)];
      const bool mine = id / local == rank;
      for (int64_t h = 0; h < kEH; ++h) {
        const float v = out[size_t(m * kEH + h)];
        if (!mine) {
          ASSERT_EQ(v, 0.0f) << "row " << m << " (id " << id << ")";
        }
        sum[size_t(m * kEH + h)] += v;
      }
    }
    for (size_t i = 0; i < dtable.size(); ++i)
      ASSERT_EQ(dtable[i], unshardedBwd.at("dtable")[size_t(rank * local * kEH) + i]) << i;
  }
  EXPECT_EQ(sum, unsharded.at("out"));
}

// Absent, scale 1 and the kernels as they were: the same bits.
TEST(EmbeddingScaleTest, AbsentIsOneBitForBit) {
  const Buffers bufs = embBuffers(91);
  const auto absent = runOnce("embedding_fwd", kEmbFwdRoles, embAttrs({}, false), bufs);
  const auto one = runOnce("embedding_fwd", kEmbFwdRoles, embAttrs({{"scale", 1.0}}, false), bufs);
  EXPECT_EQ(absent.at("out"), one.at("out"));
  std::vector<float> out(static_cast<size_t>(kEM * kEH));
  ASSERT_TRUE(embeddingForward(bufs.at("ids").ids.data(), bufs.at("table").f.data(), out.data(), kEM, kEV, kEH).isOk());
  EXPECT_EQ(absent.at("out"), out);
  for (bool accumulate : {false, true}) {
    const json acc = {{"accumulate", accumulate}};
    const auto absentBwd = runOnce("embedding_bwd_weight", kEmbBwdRoles, embAttrs(acc, true), bufs);
    const auto oneBwd =
        runOnce("embedding_bwd_weight", kEmbBwdRoles, embAttrs(withAttrs(acc, {{"scale", 1}}), true), bufs);
    EXPECT_EQ(absentBwd.at("dtable"), oneBwd.at("dtable"));
    std::vector<float> dtable = bufs.at("dtable").f;
    ASSERT_TRUE(
        embeddingBackward(bufs.at("ids").ids.data(), bufs.at("dout").f.data(), dtable.data(), kEM, kEV, kEH, accumulate)
            .isOk());
    EXPECT_EQ(absentBwd.at("dtable"), dtable);
  }
  // A scale changes the result (the test can fail).
  EXPECT_NE(runOnce("embedding_fwd", kEmbFwdRoles, embAttrs({{"scale", 2.0}}, false), bufs).at("out"),
            absent.at("out"));
}

// ---- embedding: padding_idx ---------------------------------------------------------------------------

// torch's nn.Embedding(padding_idx) through a plan: embedding_bwd_weight's attr binds as the kernel's
// paddingIdx (the row of the repeated id keeps its value under accumulate), and the attr changes the
// result (the test can fail).
TEST(EmbeddingPaddingIdxTest, BindsAsTheKernelsPaddingIdx) {
  const Buffers bufs = embBuffers(201);
  const int32_t pad = bufs.at("ids").ids[4];  // a repeated id (embBuffers: ids[1] = ids[4])
  for (bool accumulate : {false, true}) {
    const json attrs = embAttrs({{"accumulate", accumulate}, {"padding_idx", pad}}, true);
    const auto got = runOnce("embedding_bwd_weight", kEmbBwdRoles, attrs, bufs).at("dtable");
    std::vector<float> want = bufs.at("dtable").f;
    ASSERT_TRUE(embeddingBackward(bufs.at("ids").ids.data(), bufs.at("dout").f.data(), want.data(), kEM, kEV, kEH,
                                  accumulate, {}, 1.0f, pad)
                    .isOk());
    EXPECT_EQ(got, want);
    for (int64_t h = 0; h < kEH; ++h)
      EXPECT_EQ(got[size_t(pad * kEH + h)], accumulate ? bufs.at("dtable").f[size_t(pad * kEH + h)] : 0.0f);
    EXPECT_NE(
        got,
        runOnce("embedding_bwd_weight", kEmbBwdRoles, embAttrs({{"accumulate", accumulate}}, true), bufs).at("dtable"));
  }
}

TEST(EmbeddingPaddingIdxTest, BadValuesAreRefused) {
  const Buffers bufs = embBuffers(211);
  expectRefused("embedding_bwd_weight", kEmbBwdRoles, embAttrs({{"padding_idx", kEV}}, true), bufs, "padding_idx",
                {"padding_idx = 6 is outside the table's 6 rows"});
  expectRefused("embedding_bwd_weight", kEmbBwdRoles, embAttrs({{"padding_idx", -1}}, true), bufs, "padding_idx",
                {"expected an integer >= 0, got -1"});
  expectRefused("embedding_bwd_weight", kEmbBwdRoles, embAttrs({{"padding_idx", 1.5}}, true), bufs, "padding_idx",
                {"integer"});
  // The lookup itself reads every row: the attr is the gradient's alone.
  expectRefused("embedding_fwd", kEmbFwdRoles, embAttrs({{"padding_idx", 1}}, false), bufs, "padding_idx",
                {"unknown attribute"});
}

TEST(EmbeddingScaleTest, BadValuesAreRefused) {
  Buffers bufs = embBuffers(101);
  for (bool bwd : {false, true}) {
    const char* op = bwd ? "embedding_bwd_weight" : "embedding_fwd";
    const json& roles = bwd ? kEmbBwdRoles : kEmbFwdRoles;
    expectRefused(op, roles, embAttrs({{"scale", 0.0}}, bwd), bufs, "scale",
                  {op, "scale must be a finite, non-zero fp32 number", "got 0"});
    expectRefused(op, roles, embAttrs({{"scale", 1e-50}}, bwd), bufs, "scale", {"non-zero fp32"});  // 0 as fp32
    expectRefused(op, roles, embAttrs({{"scale", 1e39}}, bwd), bufs, "scale", {"finite"});
    expectNoInfinity(op, roles, embAttrs({{"scale", "@INF@"}}, bwd), bufs);
  }
  // Never with the fused position embedding (wpe / dwpe, attrs S and P).
  const int64_t S = kEM, P = kEM;
  bufs["wpe"] = f32({P, kEH}, randn(P * kEH, 5));
  json fwdRoles = kEmbFwdRoles, bwdRoles = kEmbBwdRoles;
  fwdRoles["wpe"] = "wpe";
  bwdRoles["dwpe"] = "wpe";
  const json fused = {{"S", S}, {"P", P}, {"scale", 2.0}};
  expectRefused("embedding_fwd", fwdRoles, embAttrs(fused, false), bufs, "scale",
                {"embedding_fwd", "cannot be combined with the fused position embedding (args.wpe)"});
  expectRefused("embedding_bwd_weight", bwdRoles, embAttrs(fused, true), bufs, "scale",
                {"embedding_bwd_weight", "cannot be combined with the fused position embedding (args.dwpe)"});
  // ... while the fused op without scale loads.
  EXPECT_TRUE(loadPlan(onePlan("embedding_fwd", fwdRoles, embAttrs({{"S", S}, {"P", P}}, false), bufs).builder).isOk());
}

// ---- swiglu: act ---------------------------------------------------------------------------------------

constexpr int64_t kGN = 257;

double geluRef(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
double geluGradRef(double x) {
  const double k = std::sqrt(2.0 / M_PI), t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}
double siluRef(double x) { return x / (1.0 + std::exp(-x)); }
double siluGradRef(double x) {
  const double s = 1.0 / (1.0 + std::exp(-x));
  return s * (1.0 + x * (1.0 - s));
}

const json kSwiFwdRoles = {{"gate", "gate"}, {"up", "up"}, {"y", "y"}};
const json kSwiBwdRoles = {{"dy", "dy"}, {"gate", "gate"}, {"up", "up"}, {"dgate", "dgate"}, {"dup", "dup"}};
json swiAttrs(const json& extra = json::object()) { return withAttrs({{"n", kGN}}, extra); }
Buffers swiBuffers(uint32_t seed) {
  return {{"gate", f32({kGN}, randn(kGN, seed, 2.5f))},
          {"up", f32({kGN}, randn(kGN, seed + 1))},
          {"y", f32({kGN}, std::vector<float>(static_cast<size_t>(kGN), 0.0f))},
          {"dy", f32({kGN}, randn(kGN, seed + 2))},
          {"dgate", f32({kGN}, std::vector<float>(static_cast<size_t>(kGN), 0.0f))},
          {"dup", f32({kGN}, std::vector<float>(static_cast<size_t>(kGN), 0.0f))}};
}

TEST(GluActTest, GeluTanhAndSiluMatchTheReference) {
  const Buffers bufs = swiBuffers(111);
  for (const char* act : {"gelu_tanh", "silu"}) {
    SCOPED_TRACE(act);
    const bool gelu = std::string(act) == "gelu_tanh";
    const auto fwd = runOnce("swiglu_fwd", kSwiFwdRoles, swiAttrs({{"act", act}}), bufs);
    const auto bwd = runOnce("swiglu_bwd", kSwiBwdRoles, swiAttrs({{"act", act}}), bufs);
    std::vector<double> y(static_cast<size_t>(kGN)), dgate(static_cast<size_t>(kGN)), dup(static_cast<size_t>(kGN));
    for (size_t i = 0; i < y.size(); ++i) {
      const double g = bufs.at("gate").f[i], u = bufs.at("up").f[i], d = bufs.at("dy").f[i];
      const double a = gelu ? geluRef(g) : siluRef(g), da = gelu ? geluGradRef(g) : siluGradRef(g);
      y[i] = a * u;
      dgate[i] = d * u * da;
      dup[i] = d * a;
    }
    expectAllClose(fwd.at("y"), y, 1e-6, 1e-5, "y");
    expectAllClose(bwd.at("dgate"), dgate, 1e-6, 1e-5, "dgate");
    expectAllClose(bwd.at("dup"), dup, 1e-6, 1e-5, "dup");
  }
}

// Central differences of Σ w·y(gate, up) against swiglu_bwd(dy = w), act gelu_tanh.
TEST(GluActTest, BackwardIsTheForwardsGradient) {
  Buffers bufs = swiBuffers(121);
  const json attr = {{"act", "gelu_tanh"}};
  const std::vector<float> w = bufs.at("dy").f;
  const auto bwd = runOnce("swiglu_bwd", kSwiBwdRoles, swiAttrs(attr), bufs);
  OpRunner fwd("swiglu_fwd", kSwiFwdRoles, swiAttrs(attr), bufs);
  ASSERT_TRUE(fwd.ok());
  std::vector<float> gate = bufs.at("gate").f, up = bufs.at("up").f;
  const auto loss = [&] {
    fwd.set("gate", gate);
    fwd.set("up", up);
    return dot(w, fwd.run().at("y"));
  };
  checkGradient(gate, bwd.at("dgate"), loss, "dgate");
  checkGradient(up, bwd.at("dup"), loss, "dup");
}

// GeGLU's gate is gelu_tanh_fwd's function, bit for bit (one definition), its derivative gelu_tanh_bwd's;
// in place (dgate = dy) as out of place.
TEST(GluActTest, TheGateIsGeluTanhFwdsFunction) {
  const Buffers bufs = swiBuffers(131);
  const auto y = runOnce("swiglu_fwd", kSwiFwdRoles, swiAttrs({{"act", "gelu_tanh"}}), bufs).at("y");
  const auto gelu = runOnce("gelu_tanh_fwd", {{"x", "gate"}, {"y", "y"}}, {{"n", kGN}}, bufs).at("y");
  std::vector<float> dyUp(static_cast<size_t>(kGN));
  for (size_t i = 0; i < dyUp.size(); ++i) {
    ASSERT_EQ(y[i], gelu[i] * bufs.at("up").f[i]) << i;
    dyUp[i] = bufs.at("dy").f[i] * bufs.at("up").f[i];
  }
  Buffers g = bufs;
  g.at("dy").f = dyUp;
  const auto dgelu =
      runOnce("gelu_tanh_bwd", {{"dy", "dy"}, {"x", "gate"}, {"dx", "dgate"}}, {{"n", kGN}}, g).at("dgate");
  const auto bwd = runOnce("swiglu_bwd", kSwiBwdRoles, swiAttrs({{"act", "gelu_tanh"}}), bufs);
  EXPECT_EQ(bwd.at("dgate"), dgelu);
  json inPlace = kSwiBwdRoles;
  inPlace["dgate"] = "dy";
  EXPECT_EQ(runOnce("swiglu_bwd", inPlace, swiAttrs({{"act", "gelu_tanh"}}), bufs).at("dy"), bwd.at("dgate"));
}

// Absent, act "silu" and the kernels as they were: the same bits.
TEST(GluActTest, AbsentIsSiluBitForBit) {
  const Buffers bufs = swiBuffers(141);
  const auto absent = runOnce("swiglu_fwd", kSwiFwdRoles, swiAttrs(), bufs);
  const auto silu = runOnce("swiglu_fwd", kSwiFwdRoles, swiAttrs({{"act", "silu"}}), bufs);
  EXPECT_EQ(absent.at("y"), silu.at("y"));
  std::vector<float> y(static_cast<size_t>(kGN));
  swigluForward(bufs.at("gate").f.data(), bufs.at("up").f.data(), y.data(), kGN);
  EXPECT_EQ(absent.at("y"), y);
  const auto absentBwd = runOnce("swiglu_bwd", kSwiBwdRoles, swiAttrs(), bufs);
  const auto siluBwd = runOnce("swiglu_bwd", kSwiBwdRoles, swiAttrs({{"act", "silu"}}), bufs);
  std::vector<float> dgate(static_cast<size_t>(kGN)), dup(static_cast<size_t>(kGN));
  swigluBackward(bufs.at("dy").f.data(), bufs.at("gate").f.data(), bufs.at("up").f.data(), dgate.data(), dup.data(),
                 kGN);
  EXPECT_EQ(absentBwd.at("dgate"), siluBwd.at("dgate"));
  EXPECT_EQ(absentBwd.at("dup"), siluBwd.at("dup"));
  EXPECT_EQ(absentBwd.at("dgate"), dgate);
  EXPECT_EQ(absentBwd.at("dup"), dup);
  // gelu_tanh changes the result (the test can fail).
  EXPECT_NE(runOnce("swiglu_fwd", kSwiFwdRoles, swiAttrs({{"act", "gelu_tanh"}}), bufs).at("y"), absent.at("y"));
}

TEST(GluActTest, BadValuesAreRefused) {
  const Buffers bufs = swiBuffers(151);
  for (const char* op : {"swiglu_fwd", "swiglu_bwd"}) {
    const json& roles = std::string(op) == "swiglu_fwd" ? kSwiFwdRoles : kSwiBwdRoles;
    for (const char* act : {"relu", "gelu", "SILU", ""})
      expectRefused(op, roles, swiAttrs({{"act", act}}), bufs, "act",
                    {op, "unknown activation \"" + std::string(act) + "\"", "expected \"silu\" or \"gelu_tanh\""});
    expectRefused(op, roles, swiAttrs({{"act", 1}}), bufs, "act", {"string"});
  }
  // Only swiglu takes it.
  const StatusOr<Plan> plan =
      loadPlan(onePlan("gelu_tanh_fwd", {{"x", "gate"}, {"y", "y"}}, {{"n", kGN}, {"act", "silu"}}, bufs).builder);
  ASSERT_FALSE(plan.isOk());
  EXPECT_NE(plan.status().message().find("unknown attribute"), std::string::npos) << plan.status().message();
}

// ---- scale: factor ---------------------------------------------------------------------------------------

TEST(ScaleFactorTest, BadValuesAreRefused) {
  const Buffers bufs = {{"x", f32({kGN}, randn(kGN, 161))}, {"y", f32({kGN}, std::vector<float>(size_t(kGN), 0.0f))}};
  const json roles = {{"x", "x"}, {"y", "y"}};
  expectRefused("scale", roles, {{"n", kGN}, {"factor", 0.0}}, bufs, "factor",
                {"must be a finite, non-zero fp32 number", "got 0"});
  expectRefused("scale", roles, {{"n", kGN}, {"factor", 1e39}}, bufs, "factor", {"finite"});
  expectRefused("scale", roles, {{"n", kGN}, {"factor", 1e-50}}, bufs, "factor", {"non-zero"});  // 0 as fp32
  expectNoInfinity("scale", roles, {{"n", kGN}, {"factor", "@INF@"}}, bufs);
  // ... while a valid one runs: y = x·factor.
  const auto y = runOnce("scale", roles, {{"n", kGN}, {"factor", 0.0625}}, bufs).at("y");
  for (int64_t i = 0; i < kGN; ++i) EXPECT_EQ(y[size_t(i)], bufs.at("x").f[size_t(i)] / 16.0f) << i;
}

// ---- pos_embedding: offset -----------------------------------------------------------------------------

constexpr int64_t kPB = 2, kPS = 3, kPH = 4, kPP = 6;  // positions 0..2 from row 2 of a table of 6 (rows 5 unused)

const json kPosFwdRoles = {{"x", "x"}, {"wpe", "wpe"}, {"y", "y"}};
const json kPosBwdRoles = {{"dy", "dy"}, {"dwpe", "dwpe"}};
json posAttrs(const json& extra, bool bwd) {
  json a = {{"B", kPB}, {"S", kPS}, {"H", kPH}, {"P", kPP}};
  if (bwd) a["accumulate"] = false;
  return withAttrs(a, extra);
}
Buffers posBuffers(uint32_t seed) {
  return {{"x", f32({kPB * kPS, kPH}, randn(kPB * kPS * kPH, seed))},
          {"wpe", f32({kPP, kPH}, randn(kPP * kPH, seed + 1))},
          {"y", f32({kPB * kPS, kPH}, std::vector<float>(size_t(kPB * kPS * kPH), 0.0f))},
          {"dy", f32({kPB * kPS, kPH}, randn(kPB * kPS * kPH, seed + 2))},
          {"dwpe", f32({kPP, kPH}, randn(kPP * kPH, seed + 3))}};
}

// y[b, s] = x[b, s] + wpe[s + offset]; dwpe[s + offset] = sum over b of dy[b, s], every other row 0.
TEST(PositionOffsetTest, ForwardAndBackwardReadTheRowsFromTheOffset) {
  const Buffers bufs = posBuffers(171);
  for (int64_t offset : {0, 2, 3}) {
    SCOPED_TRACE(offset);
    const json attr = offset ? json{{"offset", offset}} : json::object();  // absent: 0
    const auto fwd = runOnce("pos_embedding_fwd", kPosFwdRoles, posAttrs(attr, false), bufs);
    const auto bwd = runOnce("pos_embedding_bwd_weight", kPosBwdRoles, posAttrs(attr, true), bufs);
    std::vector<float> y(size_t(kPB * kPS * kPH)), dwpe(size_t(kPP * kPH), 0.0f);
    for (int64_t b = 0; b < kPB; ++b)
      for (int64_t s = 0; s < kPS; ++s)
        for (int64_t h = 0; h < kPH; ++h) {
          const size_t i = size_t((b * kPS + s) * kPH + h), w = size_t((s + offset) * kPH + h);
          y[i] = bufs.at("x").f[i] + bufs.at("wpe").f[w];
          dwpe[w] += bufs.at("dy").f[i];
        }
    EXPECT_EQ(fwd.at("y"), y);
    EXPECT_EQ(bwd.at("dwpe"), dwpe);
  }
  // An offset changes the result (the test can fail).
  const auto absent = runOnce("pos_embedding_fwd", kPosFwdRoles, posAttrs(json::object(), false), bufs);
  EXPECT_NE(absent.at("y"), runOnce("pos_embedding_fwd", kPosFwdRoles, posAttrs({{"offset", 2}}, false), bufs).at("y"));
}

// The fused embedding (llcdist-plan-fuse-embedding) with the offset: the unfused pair's bits.
TEST(PositionOffsetTest, FusedEmbeddingMatchesThePair) {
  Buffers bufs = embBuffers(181);
  const int64_t S = kEM, P = kEM + 2;
  bufs["wpe"] = f32({P, kEH}, randn(P * kEH, 182));
  bufs["dwpe"] = f32({P, kEH}, randn(P * kEH, 183));
  json fwdRoles = kEmbFwdRoles, bwdRoles = kEmbBwdRoles;
  fwdRoles["wpe"] = "wpe";
  bwdRoles["dwpe"] = "dwpe";
  const json fused = {{"S", S}, {"P", P}, {"offset", 2}};
  const auto fwd = runOnce("embedding_fwd", fwdRoles, embAttrs(fused, false), bufs);
  const auto bwd = runOnce("embedding_bwd_weight", bwdRoles, embAttrs(fused, true), bufs);
  // The pair: the gather, then the positions from row 2 (B = 1 sequence of S = M rows).
  Buffers pair = bufs;
  pair["out"].f = runOnce("embedding_fwd", kEmbFwdRoles, embAttrs(json::object(), false), bufs).at("out");
  const json posAttr = {{"B", 1}, {"S", S}, {"H", kEH}, {"P", P}, {"offset", 2}};
  const auto pos = runOnce("pos_embedding_fwd", {{"x", "out"}, {"wpe", "wpe"}, {"y", "out"}}, posAttr, pair);
  EXPECT_EQ(fwd.at("out"), pos.at("out"));
  const auto dpos = runOnce("pos_embedding_bwd_weight", {{"dy", "dout"}, {"dwpe", "dwpe"}},
                            withAttrs(posAttr, {{"accumulate", false}}), bufs);
  EXPECT_EQ(bwd.at("dwpe"), dpos.at("dwpe"));
  for (int64_t i = 0; i < 2 * kEH; ++i) EXPECT_EQ(bwd.at("dwpe")[size_t(i)], 0.0f) << i;  // rows 0 and 1: unused
}

TEST(PositionOffsetTest, BadValuesAreRefused) {
  const Buffers bufs = posBuffers(191);
  for (bool bwd : {false, true}) {
    const char* op = bwd ? "pos_embedding_bwd_weight" : "pos_embedding_fwd";
    const json& roles = bwd ? kPosBwdRoles : kPosFwdRoles;
    // Absent is 0: a written offset is a positive integer.
    expectRefused(op, roles, posAttrs({{"offset", -1}}, bwd), bufs, "offset", {"expected an integer >= 1, got -1"});
    expectRefused(op, roles, posAttrs({{"offset", 0}}, bwd), bufs, "offset", {"expected an integer >= 1, got 0"});
    // S = 3 positions from row 4 need rows 4..6 of a table of 6.
    expectRefused(op, roles, posAttrs({{"offset", 4}}, bwd), bufs, "S", {"from row offset = 4", "P = 6"});
    expectRefused(op, roles, posAttrs({{"offset", 1.5}}, bwd), bufs, "offset", {"integer"});
  }
  // On the token embedding only with the fused position embedding.
  const Buffers emb = embBuffers(192);
  expectRefused("embedding_fwd", kEmbFwdRoles, embAttrs({{"offset", 2}}, false), emb, "offset",
                {"only allowed with wpe"});
}

}  // namespace
}  // namespace llcdist::rt
