// The plan loader's validation: every error names the file and the JSON path and says what is wrong.
#include "PlanTestUtil.h"

#include "llcdist/runtime/Plan.h"

#include <functional>

namespace llcdist::rt {
namespace {

using testing::json;
using testing::oneLayerPlan;
namespace fs = std::filesystem;

class PlanLoaderTest : public testing::TempDirTest {
protected:
  testing::PlanBuilder base = oneLayerPlan(32, 16, 8, 2, 2);
  // Buffer ids of the base plan (see oneLayerPlan).
  static constexpr int kWte = 0, kLm = 4, kIds = 8, kH = 10, kDh = 11, kLogits = 12, kLoss = 13;
  // ops of subroutine "forward" (subroutines[1]): 0 load, 1 embedding, 2 linear, 3 cross entropy.

  Status load(const testing::PlanBuilder& b) {
    b.write(dir);
    return loadPlan(dir.string()).status();
  }
  // Applies `mutate` to a copy of the base plan and expects a load error containing every part.
  void expectError(const std::function<void(testing::PlanBuilder&)>& mutate, std::vector<std::string> parts) {
    testing::PlanBuilder b = base;
    mutate(b);
    Status s = load(b);
    ASSERT_FALSE(s.isOk()) << "expected an error containing '" << parts[0] << "'";
    for (const std::string& p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << s.message();
  }
  static json& forwardOp(testing::PlanBuilder& b, int i) { return b.program["subroutines"][1]["ops"][i]; }
};

TEST_F(PlanLoaderTest, ValidPlanLoads) {
  base.write(dir);
  auto plan = loadPlan(dir.string());
  ASSERT_TRUE(plan.isOk()) << plan.status().message();
  const Program& p = plan->programs[0];
  EXPECT_EQ(p.buffers.size(), 15u);
  EXPECT_EQ(p.subroutines.size(), 4u);
  EXPECT_EQ(p.actions.size(), 6u);
  EXPECT_EQ(p.actions[3].microbatch, 1);
  EXPECT_EQ(p.subroutines[1].ops[2].kind, schema::OpKind::kLinearFwd);
  EXPECT_EQ(p.subroutines[1].ops[2].loc, "lm_head");
  EXPECT_EQ(p.subroutines[1].ops[2].arg("w"), kLm);
  EXPECT_EQ(p.subroutines[1].ops[2].arg("bias"), -1);
  EXPECT_EQ(plan->manifest.params[1].name, "lm_head.weight");
  EXPECT_TRUE(plan->manifest.params[1].weightDecay);
  EXPECT_EQ(plan->manifest.globalBatch, 4);
  EXPECT_EQ(p.findBuffer("loss"), kLoss);
}

TEST_F(PlanLoaderTest, MalformedAndTruncatedJson) {
  base.write(dir);
  testing::writeText(path("manifest.json"), "{\"format\": \"llc-dist-plan\", \"version\": ");
  Status s = loadPlan(dir.string()).status();
  EXPECT_NE(s.message().find("manifest.json"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("malformed or truncated JSON"), std::string::npos) << s.message();

  base.write(dir);
  const std::string text = base.program.dump(2);
  testing::writeText(path("program-0.json"), text.substr(0, text.size() / 2));
  s = loadPlan(dir.string()).status();
  EXPECT_NE(s.message().find("program-0.json"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("malformed or truncated JSON"), std::string::npos) << s.message();

  testing::writeText(path("program-0.json"), "[1, 2]");
  s = loadPlan(dir.string()).status();
  EXPECT_NE(s.message().find("expected a JSON object"), std::string::npos) << s.message();

  fs::remove(path("program-0.json"));
  s = loadPlan(dir.string()).status();
  EXPECT_NE(s.message().find("program-0.json"), std::string::npos) << s.message();
  EXPECT_EQ(loadPlan(path("nope")).status().code(), StatusCode::kNotFound);
}

TEST_F(PlanLoaderTest, EveryPrefixAndByteFlipFailsCleanly) {
  // The loader never crashes on bad input: every truncation is an error, random byte flips load or fail.
  const Manifest m = parseManifest(base.manifest.dump(), "manifest.json").value();
  const std::string text = base.program.dump();
  for (size_t n = 0; n < text.size(); n += 7)
    EXPECT_FALSE(parseProgram(text.substr(0, n), "program-0.json", m).isOk()) << n;
  const std::string mtext = base.manifest.dump();
  for (size_t n = 0; n < mtext.size(); n += 5) EXPECT_FALSE(parseManifest(mtext.substr(0, n), "manifest.json").isOk());
  uint32_t state = 12345;
  for (int i = 0; i < 2000; ++i) {
    std::string t = text;
    state = state * 1664525u + 1013904223u;
    t[(state >> 8) % t.size()] = char("0123456789{}[]\",:-ae"[(state >> 4) % 20]);
    (void)parseProgram(t, "program-0.json", m);
  }
}

TEST_F(PlanLoaderTest, HeaderErrors) {
  expectError([](auto& b) { b.manifest["format"] = "llc-dist-program"; },
              {"manifest.json", "format", "expected \"llc-dist-plan\"", "wrong file"});
  expectError([](auto& b) { b.manifest["version"] = 2; },
              {"manifest.json", "version", "unsupported version 2", "supports version 1"});
  expectError([](auto& b) { b.program["version"] = 0; }, {"program-0.json", "version", "unsupported version 0"});
  expectError([](auto& b) { b.manifest["features"] = {"zero3", "fp8"}; },
              {"manifest.json", "features[0]", "unknown feature \"zero3\""});
  expectError([](auto& b) { b.program["format"] = "nope"; }, {"program-0.json", "format", "llc-dist-program"});
}

TEST_F(PlanLoaderTest, ManifestFieldErrors) {
  expectError([](auto& b) { b.manifest["batch"].erase("seq_len"); }, {"manifest.json", "batch.seq_len", "missing"});
  expectError([](auto& b) { b.manifest["extra"] = 1; }, {"manifest.json", "extra", "unknown field"});
  expectError([](auto& b) { b.manifest["batch"]["micro_batch"] = "2"; },
              {"batch.micro_batch", "expected an integer", "string"});
  expectError([](auto& b) { b.manifest["batch"]["global_batch"] = 5; }, {"batch.global_batch", "2 × 2 × 1"});
  expectError([](auto& b) { b.manifest["optimizer"]["kind"] = "lion"; }, {"optimizer.kind", "unknown optimizer"});
  expectError([](auto& b) { b.manifest["optimizer"].erase("beta2"); }, {"optimizer.beta2", "missing"});
  expectError([](auto& b) { b.manifest["lr_schedule"] = {{"kind", "cosine"}, {"max_lr", 1.0}}; },
              {"lr_schedule.min_lr", "missing"});
  expectError([](auto& b) { b.manifest["grad_clip"] = -1; }, {"grad_clip", ">= 0"});
  expectError([](auto& b) { b.manifest["params"][0]["init"] = {{"kind", "xavier"}}; },
              {"params[0].init.kind", "unknown init kind"});
  expectError([](auto& b) { b.manifest["params"][1]["name"] = "transformer.wte.weight"; },
              {"params[1].name", "duplicate parameter"});
  expectError([](auto& b) { b.manifest["programs"][0]["ranks"] = json::array({1}); }, {"programs[0].ranks[0]"});
  expectError([](auto& b) { b.manifest["programs"][0]["file"] = "../x.json"; }, {"programs[0].file", "relative path"});
}

TEST_F(PlanLoaderTest, ParamErrors) {
  expectError([](auto& b) { b.manifest["params"][0]["buffer"] = 99; },
              {"manifest.json", "params[0].buffer", "out of range"});
  expectError([](auto& b) { b.manifest["params"][0]["grad"] = kIds; },
              {"params[0].grad", "kind \"input\"", "expected \"grad\""});
  expectError([](auto& b) { b.manifest["params"][0]["shape"] = {16, 32}; },
              {"params[0].buffer", "shape [32, 16]", "has shape [16, 32]"});
  expectError([](auto& b) { b.manifest["params"][1]["buffer"] = kWte; }, {"params[1].buffer", "already used"});
}

TEST_F(PlanLoaderTest, BufferErrors) {
  expectError([](auto& b) { b.program["buffers"][3]["offset"] = 68; },
              {"program-0.json", "buffers[3].offset", "multiple of 64"});
  expectError([](auto& b) { b.program["buffers"][3]["bytes"] = 100; },
              {"program-0.json", "buffers[3].bytes", "expected product(shape)"});
  expectError([](auto& b) { b.program["arena_bytes"] = 1024; }, {"program-0.json", "extends past arena_bytes = 1024"});
  expectError([](auto& b) { b.program["buffers"][2]["id"] = 7; }, {"buffers[2].id", "must be i"});
  expectError([](auto& b) { b.program["buffers"][2]["dtype"] = "f16"; }, {"buffers[2].dtype", "unknown dtype"});
  expectError([](auto& b) { b.program["buffers"][2]["kind"] = "weights"; }, {"buffers[2].kind", "unknown buffer kind"});
  expectError([](auto& b) { b.program["buffers"][3]["name"] = "grad.wte"; }, {"buffers[3].name", "duplicate"});
  expectError([](auto& b) { b.program["buffers"][kLoss]["kind"] = "activation"; }, {"buffers[13]", "reserved"});
}

TEST_F(PlanLoaderTest, OpErrors) {
  const std::string p = "subroutines[1].ops[";
  expectError([](auto& b) { forwardOp(b, 2)["op"] = "matmul"; }, {"program-0.json", p + "2].op", "unknown op \"matmul\""});
  expectError([](auto& b) { forwardOp(b, 2)["args"].erase("w"); }, {p + "2].args.w", "missing role"});
  expectError([](auto& b) { forwardOp(b, 2)["args"]["z"] = 1; }, {p + "2].args.z", "unknown role", "x, w, bias"});
  expectError([](auto& b) { forwardOp(b, 2)["args"]["w"] = 99; }, {p + "2].args.w", "buffer id 99 is out of range"});
  expectError([](auto& b) { forwardOp(b, 2)["args"]["w"] = "4"; }, {p + "2].args.w", "expected a buffer id"});
  expectError([](auto& b) { forwardOp(b, 1)["args"]["ids"] = kH; }, {p + "1].args.ids", "is f32", "needs i32"});
  expectError([](auto& b) { forwardOp(b, 2)["attrs"]["K"] = 17; }, {p + "2].args.x", "expected M×K"});
  expectError([](auto& b) { forwardOp(b, 2)["attrs"]["layout"] = "nk"; }, {p + "2].attrs.layout", "out_in"});
  expectError([](auto& b) { forwardOp(b, 2)["attrs"]["M"] = 0; }, {p + "2].attrs.M", ">= 1"});
  expectError([](auto& b) { forwardOp(b, 2)["attrs"]["M"] = 1.5; }, {p + "2].attrs.M", "expected an integer"});
  expectError([](auto& b) { forwardOp(b, 2)["attrs"]["alpha"] = 1; }, {p + "2].attrs.alpha", "unknown attribute"});
  expectError([](auto& b) { b.program["subroutines"][2]["ops"][1]["attrs"].erase("accumulate"); },
              {"subroutines[2].ops[1].attrs.accumulate", "missing attribute"});
  expectError([](auto& b) { forwardOp(b, 0)["attrs"]["B"] = 4; }, {p + "0].attrs.B", "batch.micro_batch"});
  expectError([](auto& b) { forwardOp(b, 2)["loc"] = 3; }, {p + "2].loc", "expected a string"});
  expectError([](auto& b) { forwardOp(b, 2)["extra"] = 3; }, {p + "2].extra", "unknown field"});
  // Aliasing: the linear's output overlapping its input.
  expectError([](auto& b) { b.program["buffers"][kLogits]["offset"] = b.program["buffers"][kH]["offset"]; },
              {p + "2].args.y", "overlaps", "args.x"});
  // The cross entropy backward may write dlogits over logits (allowed exact alias): base plan does.
  // The optimizer op must match the manifest.
  expectError([](auto& b) { b.manifest["optimizer"] = {{"kind", "sgd"}, {"momentum", 0.0}, {"weight_decay", 0.0}}; },
              {"subroutines[3].ops[1].op", "does not match"});
}

TEST_F(PlanLoaderTest, ActionErrors) {
  expectError([](auto& b) { b.program["actions"][1]["subroutine"] = "fwd"; },
              {"program-0.json", "actions[1].subroutine", "unknown subroutine \"fwd\"", "\"forward\""});
  expectError([](auto& b) { b.program["actions"][1]["microbatch"] = 2; }, {"actions[1].microbatch", "[0, 1]"});
  expectError([](auto& b) { b.program["actions"][1].erase("microbatch"); }, {"actions[1]", "needs a \"microbatch\""});
  expectError([](auto& b) { b.program["subroutines"][2]["name"] = "forward"; }, {"subroutines[2].name", "duplicate"});
}

}  // namespace
}  // namespace llcdist::rt
