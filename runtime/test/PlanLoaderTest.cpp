// The plan loader's validation: every error names the file and the JSON path and says what is wrong.
#include "PlanTestUtil.h"

#include "llcdist/runtime/Plan.h"
#include "llcdist/runtime/Safetensors.h"
#include "llcdist/runtime/Train.h"

#include <functional>
#include <sstream>
#include <string>

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

// A value nested 100,000 levels deep once overflowed the stack of whatever copied it (llc-dist run and
// verify crashed): the reader refuses JSON nested deeper than Doc::kMaxJsonDepth before parsing,
// naming the file and the byte. Brackets inside strings do not count.
TEST_F(PlanLoaderTest, DeeplyNestedJsonIsRefused) {
  const Manifest m = parseManifest(base.manifest.dump(), "manifest.json").value();
  json deep = base.program;
  deep["subroutines"][1]["ops"][0]["args"]["x"] = "DEEP";
  std::string text = deep.dump();
  const size_t at = text.find("\"DEEP\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 6, std::string(100000, '[') + "1" + std::string(100000, ']'));
  Status st = parseProgram(text, "program-0.json", m).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("program-0.json: JSON nested deeper than 64 levels"), std::string::npos)
      << st.message();
  EXPECT_FALSE(parseManifest(std::string(65, '[') + std::string(65, ']'), "manifest.json").isOk());
  // Brackets inside a string are a string: the plan loads (or fails on the field, never on the depth).
  json named = base.program;
  named["buffers"][0]["name"] = std::string(100, '[') + "\"{";
  st = parseProgram(named.dump(), "program-0.json", m).status();
  EXPECT_EQ(st.message().find("nested deeper"), std::string::npos) << st.message();
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
  expectError([](auto& b) { b.manifest["version"] = 3; },
              {"manifest.json", "version", "unsupported version 3", "supports version 2"});
  // Version 1 named the fill op `zero`: such a plan is refused before its ops are read.
  expectError([](auto& b) { b.manifest["version"] = 1; },
              {"manifest.json", "version", "unsupported version 1", "supports version 2", "recompile the plan"});
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
  // init.zero_row (nn.Embedding(padding_idx)'s row): a row of dimension 0, of a normal init only.
  expectError(
      [](auto& b) {
        b.manifest["params"][0]["init"] = {{"kind", "normal"}, {"std", 0.02}, {"zero_row", 1000}};
      },
      {"params[0].init.zero_row", "row 1000 is outside the", "rows of \"transformer.wte.weight\"", "dimension 0"});
  expectError(
      [](auto& b) {
        b.manifest["params"][0]["init"] = {{"kind", "normal"}, {"std", 0.02}, {"zero_row", -1}};
      },
      {"params[0].init.zero_row"});
  expectError(
      [](auto& b) {
        b.manifest["params"][0]["init"] = {{"kind", "zeros"}, {"zero_row", 1}};
      },
      {"params[0].init.zero_row"});
  expectError([](auto& b) { b.manifest["params"][1]["name"] = "transformer.wte.weight"; },
              {"params[1].name", "duplicate parameter"});
  expectError([](auto& b) { b.manifest["programs"][0]["ranks"] = json::array({1}); }, {"programs[0].ranks[0]"});
  expectError([](auto& b) { b.manifest["programs"][0]["file"] = "../x.json"; }, {"programs[0].file", "relative path"});
}

// programs[i].file (issue #16's mutation sweep): a name the OS would cut at a NUL, an empty or absolute
// name, one leaving the plan directory or naming a directory: each an error on manifest.json naming the
// field and the fix, never a silently read other file.
TEST_F(PlanLoaderTest, ProgramFileNames) {
  // The truncated name exists: without the check the loader reads program-0.json and succeeds.
  expectError([](auto& b) { b.manifest["programs"][0]["file"] = std::string("program-0.json\0.evil", 20); },
              {"manifest.json: programs[0].file: must be a relative path inside the plan directory",
               "\"program-0.json\\u0000.evil\"", "contains a NUL character at byte 14",
               "would cut the name there and read \"program-0.json\"", "e.g. \"program-0.json\""});
  // Written through the JSON escape itself, as a hand-edited manifest would.
  base.write(dir);
  std::string text = base.manifest.dump(2);
  const size_t at = text.find("\"program-0.json\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 16, "\"program-0.json\\u0000\"");
  testing::writeText(path("manifest.json"), text);
  Status s = loadPlan(dir.string()).status();
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("programs[0].file"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("NUL character at byte 14"), std::string::npos) << s.message();

  expectError([](auto& b) { b.manifest["programs"][0]["file"] = ""; }, {"manifest.json", "programs[0].file", "is empty"});
  expectError([](auto& b) { b.manifest["programs"][0]["file"] = (fs::current_path() / "program-0.json").string(); },
              {"programs[0].file", "is an absolute path"});
  expectError([](auto& b) { b.manifest["programs"][0]["file"] = "sub/../program-0.json"; },
              {"programs[0].file", "has a \"..\" component"});
  expectError([](auto& b) { b.manifest["programs"][0]["file"] = "."; }, {"programs[0].file", "names a directory"});
  expectError([](auto& b) { b.manifest["programs"][0]["file"] = "sub/"; }, {"programs[0].file", "names a directory"});
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


// Multi-rank plans (docs/plan-format.md "Multi-rank plans"): mesh, collectives, sharded grad norms and
// sharded params. The base plan on a dp=2 × tp=2 mesh.
void toMesh(testing::PlanBuilder& b, int64_t dp, int64_t tp) {
  b.manifest["batch"]["dp"] = dp;
  b.manifest["batch"]["global_batch"] = 2 * 2 * dp;
  b.manifest["mesh"] = {{"dp", dp}, {"tp", tp}, {"pp", 1}};
  json ranks = json::array();
  for (int64_t r = 0; r < dp * tp; ++r) ranks.push_back(r);
  b.manifest["programs"][0]["ranks"] = ranks;
}

TEST_F(PlanLoaderTest, MultiRankMeshAndPrograms) {
  testing::PlanBuilder b = base;
  toMesh(b, 2, 2);
  b.manifest["mesh"]["rank_order"] = {"dp", "tp", "pp"};
  b.write(dir);
  auto plan = loadPlan(dir.string());
  ASSERT_TRUE(plan.isOk()) << plan.status().message();
  EXPECT_EQ(plan->manifest.worldSize(), 4);
  EXPECT_EQ(plan->manifest.rankOrder[0], MeshAxis::kDp);
  EXPECT_EQ(plan->manifest.mesh().group(0, MeshAxis::kTp), (std::vector<int>{0, 2}));

  auto mesh = [](std::function<void(testing::PlanBuilder&)> f) {
    return [f](testing::PlanBuilder& b) {
      toMesh(b, 2, 2);
      f(b);
    };
  };
  expectError(mesh([](auto& b) { b.manifest["mesh"]["rank_order"] = {"tp", "dp"}; }),
              {"manifest.json", "mesh.rank_order", "permutation"});
  expectError(mesh([](auto& b) { b.manifest["mesh"]["rank_order"] = {"tp", "dp", "tp"}; }),
              {"manifest.json", "mesh.rank_order[2]", "twice"});
  expectError(mesh([](auto& b) {
                b.manifest["mesh"]["rank_order"] = {"tp", "dp", "xp"};
              }),
              {"mesh.rank_order[2]", "unknown axis \"xp\""});
  // ep / edp (expert parallelism) live inside dp: never in the rank order.
  expectError(mesh([](auto& b) {
                b.manifest["mesh"]["rank_order"] = {"tp", "dp", "ep"};
              }),
              {"mesh.rank_order[2]", "\"ep\" is an expert-parallel axis inside dp"});
  // cp is an axis now (context parallelism), but a three-name order lists dp, tp and pp.
  expectError(mesh([](auto& b) {
                b.manifest["mesh"]["rank_order"] = {"tp", "dp", "cp"};
              }),
              {"mesh.rank_order[2]", "three axes lists dp, tp and pp"});
  expectError(mesh([](auto& b) { b.manifest["mesh"]["rank_order"] = "tp,dp,pp"; }), {"mesh.rank_order", "permutation"});
  expectError(mesh([](auto& b) { b.manifest["mesh"]["xp"] = 1; }), {"mesh.xp", "unknown field"});
  expectError([](auto& b) {
    b.manifest["mesh"]["pp"] = 2;
    b.manifest["programs"][0]["ranks"] = {0, 1};
  }, {"manifest.json", "mesh.pp", "pp > 1 needs the feature \"pipeline\""});
  expectError(mesh([](auto& b) { b.manifest["programs"][0]["ranks"] = {0, 1, 2}; }),
              {"manifest.json", "programs", "no program runs rank 3"});
  expectError(mesh([](auto& b) {
    b.manifest["programs"][0]["ranks"] = {0, 1};
    b.manifest["programs"].push_back({{"file", "program-0.json"}, {"ranks", {2, 3}}});
  }), {"manifest.json", "programs", "SPMD"});
}

TEST_F(PlanLoaderTest, CollectiveOpErrors) {
  const int kDwte = 1;
  auto withOp = [](json op) {
    return [op](testing::PlanBuilder& b) {
      toMesh(b, 2, 2);
      b.ops("optimizer").push_back(op);
    };
  };
  auto op = [](const std::string& name, json args, json attrs) {
    return json{{"op", name}, {"args", args}, {"attrs", attrs}};
  };
  // Valid: each collective once (all_gather/reduce_scatter over tp: n = 2; dh [32, 16] = 2 × 2 × 128).
  {
    testing::PlanBuilder b = base;
    withOp(op("all_reduce", {{"x", {kDwte, kLoss}}}, {{"axis", "dp"}, {"op", "avg"}}))(b);
    b.ops("optimizer").push_back(op("all_gather", {{"x", kH}, {"y", kLogits}}, {{"axis", "tp"}, {"outer", 16}, {"inner", 16}}));
    b.ops("optimizer").push_back(op("reduce_scatter", {{"x", kLogits}, {"y", kDh}},
                                    {{"axis", "tp"}, {"outer", 16}, {"inner", 16}, {"op", "sum"}}));
    Status s = load(b);
    ASSERT_TRUE(s.isOk()) << s.message();
  }
  const std::string where = "subroutines[3].ops[3]";
  expectError(withOp(op("all_reduce", {{"x", {kDwte}}}, {{"axis", "xp"}, {"op", "sum"}})),
              {"program-0.json", where + ".attrs.axis", "unknown mesh axis \"xp\""});
  expectError(withOp(op("all_reduce", {{"x", {kDwte}}}, {{"axis", "dp"}, {"op", "prod"}})),
              {where + ".attrs.op", "unknown reduction \"prod\""});
  expectError(withOp(op("all_reduce", {{"x", {kDwte}}}, {{"axis", "dp"}})), {where + ".attrs.op", "missing"});
  expectError(withOp(op("all_reduce", {{"x", {kDwte, kDwte}}}, {{"axis", "dp"}, {"op", "sum"}})),
              {where + ".args.x[1]", "overlaps"});
  // An i32 buffer (the load-balancing loss's counts) is summed, never averaged.
  expectError(withOp(op("all_reduce", {{"x", {kIds}}}, {{"axis", "dp"}, {"op", "avg"}})),
              {where + ".args.x", "an i32 buffer is only summed (op \"sum\"), got \"avg\""});
  // h has 16·16 = 256 elements, logits 16·32 = 512.
  expectError(withOp(op("all_gather", {{"x", kH}, {"y", kLogits}}, {{"axis", "tp"}, {"outer", 16}, {"inner", 8}})),
              {where + ".args.x", "outer×inner = 128"});
  expectError(withOp(op("all_gather", {{"x", kDh}, {"y", kH}}, {{"axis", "dp"}, {"outer", 16}, {"inner", 16}})),
              {where + ".args.y", "outer×n(dp)×inner = 512"});
  expectError(withOp(op("reduce_scatter", {{"x", kLogits}, {"y", kDh}}, {{"axis", "tp"}, {"outer", 16}, {"inner", 16}, {"op", "avg"}})),
              {where + ".attrs.op", "only \"sum\""});
  expectError(withOp(op("reduce_scatter", {{"x", kLogits}, {"y", kDh}}, {{"axis", "tp"}, {"outer", 8}, {"inner", 16}, {"op", "sum"}})),
              {where + ".args.y", "outer×inner = 128"});
  expectError(withOp(op("all_gather", {{"x", kH}, {"y", kH}}, {{"axis", "pp"}, {"outer", 1}, {"inner", 256}})),
              {where + ".args.y", "overlaps"});
  // dtype: "f32" is the default and accepted anywhere; "bf16" needs bf16 buffers (these are f32).
  {
    testing::PlanBuilder b = base;
    withOp(op("all_reduce", {{"x", {kDwte}}}, {{"axis", "dp"}, {"op", "sum"}, {"dtype", "f32"}}))(b);
    Status s = load(b);
    ASSERT_TRUE(s.isOk()) << s.message();
  }
  expectError(withOp(op("all_reduce", {{"x", {kDwte}}}, {{"axis", "dp"}, {"op", "sum"}, {"dtype", "f16"}})),
              {where + ".attrs.dtype", "unknown collective dtype \"f16\" (expected \"f32\" or \"bf16\")"});
  expectError(withOp(op("all_reduce", {{"x", {kDwte}}}, {{"axis", "dp"}, {"op", "sum"}, {"dtype", "bf16"}})),
              {where + ".attrs.dtype", "args.x[0] (buffer 1) is f32"});
  expectError(withOp(op("all_gather", {{"x", kH}, {"y", kLogits}},
                        {{"axis", "tp"}, {"outer", 16}, {"inner", 16}, {"dtype", "bf16"}})),
              {where + ".attrs.dtype", "args.x (buffer"});
}

// The split gradient norm: grad_norm_sq (f64 partial sum; replica shards with replicas and
// replica_axis), all_reduce of the f64 buffer, grad_norm_clip. The in-kernel spelling of earlier plans
// (grad_norm with sharded / axis) is refused.
TEST_F(PlanLoaderTest, ShardedGradNormErrors) {
  // Replaces the optimizer's grad_norm (op 0) by `kind` (args, attrs) on a dp 2 × tp 2 mesh, with two
  // f64 buffers "sq" and "sq2" appended (ids sq, sq2 below).
  auto sqOp = [](json args, json attrs, const char* kind = "grad_norm_sq") {
    return [args, attrs, kind](testing::PlanBuilder& b) {
      toMesh(b, 2, 2);
      b.buffer("sq", "scratch", {1}, "f64");
      b.buffer("sq2", "scratch", {1}, "f64");
      json& g = b.ops("optimizer")[0];
      g["op"] = kind;
      g["args"] = args;
      g["attrs"] = attrs;
    };
  };
  testing::PlanBuilder probe = base;
  const int64_t sq = int64_t(probe.program["buffers"].size()), sq2 = sq + 1;
  {
    testing::PlanBuilder b = base;
    sqOp({{"grads", {1}}, {"replica_shards", {5}}, {"add", sq2}, {"sq", sq}}, {{"replicas", 2}, {"replica_axis", "tp"}})(b);
    b.op("optimizer", "all_reduce", {{"x", {sq}}}, {{"axis", "tp"}, {"op", "sum"}});
    Status s = load(b);
    ASSERT_TRUE(s.isOk()) << s.message();
  }
  const std::string at = "subroutines[3].ops[0]";
  expectError(sqOp({{"grads", {1}}, {"replica_shards", {5}}, {"sq", sq}}, {{"replica_axis", "tp"}}),
              {"program-0.json", at + ".attrs.replicas", "required when args.replica_shards"});
  expectError(sqOp({{"grads", {1}}, {"sq", sq}}, {{"replicas", 2}}), {at + ".attrs.replicas", "only allowed"});
  expectError(sqOp({{"replica_shards", {5}}, {"sq", sq}}, {{"replicas", 3}, {"replica_axis", "tp"}}),
              {at + ".attrs.replicas", "does not divide the size 2"});
  expectError(sqOp({{"replica_shards", {5}}, {"sq", sq}}, {{"replicas", 1}, {"replica_axis", "xp"}}),
              {at + ".attrs.replica_axis", "unknown mesh axis"});
  expectError(sqOp({{"grads", {1}}, {"sq", 1}}, json::object()), {at + ".args.sq", "is f32", "needs f64"});
  expectError(sqOp({{"grads", {sq}}, {"sq", sq2}}, json::object()), {at + ".args.grads[0]", "is f64", "needs f32 or bf16"});
  expectError(sqOp({{"grads", {1}}, {"sq", sq}, {"norm", sq2}}, json::object()), {at + ".args.norm", "unknown role"});
  // The old spellings: a clear error naming the field.
  expectError(sqOp({{"grads", {1}}, {"sharded", {5}}, {"norm", 1}}, {{"max_norm", 1.0}, {"axis", "tp"}}, "grad_norm"),
              {at + ".args.sharded", "unknown role for op \"grad_norm\""});
  expectError(sqOp({{"grads", {1}}, {"norm", sq}}, {{"max_norm", 1.0}}, "grad_norm"), {at + ".args.norm", "needs f32"});
  expectError(sqOp({{"sq", sq}, {"norm", 1}}, {{"max_norm", 1.0}, {"stage_axis", "pp"}}, "grad_norm_clip"),
              {at + ".attrs.stage_axis", "unknown attribute"});
}

// Vocabulary-parallel embedding / cross entropy (attr shard_axis; V is the local slice) and bias_add.
TEST_F(PlanLoaderTest, ShardAxisAndBiasAddErrors) {
  const std::string p = "subroutines[1].ops[";
  // A vocabulary-parallel cross entropy (forward op 3, backward op 0) reads the row statistics
  // (f64 row_max [M], row_sums [2M], M = 16) that cross_entropy_max / _sums and the plan's
  // all-reduces computed.
  auto vocabParallel = [](testing::PlanBuilder& b, json& op, const char* axis) {
    op["attrs"]["shard_axis"] = axis;
    const std::string n = std::to_string(b.program["buffers"].size());  // unique names
    op["args"]["row_max"] = int64_t(b.program["buffers"].size());
    op["args"]["row_sums"] = int64_t(b.program["buffers"].size()) + 1;
    b.buffer("row_max" + n, "scratch", {16}, "f64");
    b.buffer("row_sums" + n, "scratch", {32}, "f64");
  };
  // tp = 2: V is the local vocabulary slice, so full-size logits under V = 16 do not match.
  expectError(
      [&](auto& b) {
        toMesh(b, 1, 2);
        vocabParallel(b, forwardOp(b, 3), "tp");
        forwardOp(b, 3)["attrs"]["V"] = 16;
      },
      {p + "3].args.logits", "expected M×V = 256"});
  // The statistics come exactly with shard_axis (the in-kernel all-reduces of earlier plans are gone).
  expectError([](auto& b) { forwardOp(b, 3)["attrs"]["shard_axis"] = "tp"; },
              {p + "3].args.row_max", "required with attrs.shard_axis", "kernels do not communicate"});
  expectError(
      [&](auto& b) {
        vocabParallel(b, forwardOp(b, 3), "tp");
        forwardOp(b, 3)["attrs"].erase("shard_axis");
      },
      {p + "3].args.row_max", "only allowed with attrs.shard_axis"});
  expectError(
      [&](auto& b) {
        vocabParallel(b, b.ops("backward")[0], "tp");
        b.ops("backward")[0]["args"]["row_sums"] = b.ops("backward")[0]["args"]["row_max"];
      },
      {"subroutines[2].ops[0].args.row_sums", "expected 2×M = 32"});
  expectError(
      [&](auto& b) {
        vocabParallel(b, forwardOp(b, 3), "tp");
        forwardOp(b, 3)["args"]["row_max"] = kLogits;
      },
      {p + "3].args.row_max", "is f32", "needs f64"});
  {
    testing::PlanBuilder b = base;  // an axis of size 1 is allowed: the unsharded op
    vocabParallel(b, forwardOp(b, 3), "dp");
    vocabParallel(b, b.ops("backward")[0], "tp");
    b.ops("backward")[3]["attrs"]["shard_axis"] = "pp";
    forwardOp(b, 1)["attrs"]["shard_axis"] = "tp";
    Status s = load(b);
    EXPECT_TRUE(s.isOk()) << s.message();
  }
  expectError([](auto& b) { forwardOp(b, 1)["attrs"]["shard_axis"] = "xp"; },
              {p + "1].attrs.shard_axis", "unknown mesh axis \"xp\""});
  expectError([](auto& b) { forwardOp(b, 3)["attrs"]["shard_axis"] = 1; }, {p + "3].attrs.shard_axis", "expected a string"});
  expectError([&](auto& b) { vocabParallel(b, b.ops("backward")[0], ""); },
              {"subroutines[2].ops[0].attrs.shard_axis", "unknown mesh axis"});
  expectError([](auto& b) { b.ops("backward")[3]["attrs"]["shard_axis"] = "model"; },
              {"subroutines[2].ops[3].attrs.shard_axis", "unknown mesh axis"});
  // Element counts with a sharded V are the local ones: a full-size table under V = 16 is an error.
  expectError(
      [](auto& b) {
        toMesh(b, 1, 2);
        forwardOp(b, 1)["attrs"]["shard_axis"] = "tp";
        forwardOp(b, 1)["attrs"]["V"] = 16;
      },
      {p + "1].args.table", "expected V×H = 256"});
  // bias_add: y M·N, bias N, no overlap between them.
  auto biasAdd = [](json args, json attrs) {
    return [args, attrs](testing::PlanBuilder& b) {
      b.op("forward", "bias_add", args, attrs);
    };
  };
  {
    testing::PlanBuilder b = base;
    const int64_t bias = b.buffer("bias", "param", {32});
    biasAdd({{"y", kLogits}, {"bias", bias}}, {{"M", 16}, {"N", 32}})(b);
    Status s = load(b);
    EXPECT_TRUE(s.isOk()) << s.message();
  }
  expectError(
      [](auto& b) {
        const int64_t bias = b.buffer("bias", "param", {16});
        b.op("forward", "bias_add", {{"y", kLogits}, {"bias", bias}}, {{"M", 16}, {"N", 16}});
      },
      {"subroutines[1].ops[4].args.y", "expected M×N = 256"});
  expectError(biasAdd({{"y", kLogits}, {"bias", kH}}, {{"M", 16}, {"N", 32}}), {"ops[4].args.bias", "expected N = 32"});
  expectError(biasAdd({{"y", kLogits}, {"bias", kH}}, {{"M", 16}}), {"ops[4].attrs.N", "missing attribute"});
  expectError(biasAdd({{"y", kLogits}, {"bias", kLogits}}, {{"M", 1}, {"N", 512}}), {"ops[4].args.bias", "overlaps"});
  expectError(biasAdd({{"y", kIds}, {"bias", kH}}, {{"M", 1}, {"N", 16}}), {"ops[4].args.y", "needs f32"});
}

// The fused classifier (llcdist-plan-fuse-classifier): logits is a [chunk, N] scratch, chunk at most M,
// the optional dw_acc an f32 [N, K]; its loss is summed onto whatever its accumulate says (dw's).
TEST_F(PlanLoaderTest, ClassifierRoles) {
  auto classifier = [](int64_t chunk, int64_t chunkRows, const char* accType) {
    return [=](testing::PlanBuilder& b) {
      const int64_t logits = b.buffer("logits.chunk", "scratch", {chunkRows, 32});
      json args = {{"x", kH}, {"w", kLm}, {"targets", kIds + 1}, {"loss", kLoss}, {"logits", logits},
                   {"dx", kDh}, {"dw", kLm + 1}};
      if (accType) args["dw_acc"] = b.buffer("dw.sum", "scratch", {32, 16}, accType);
      b.op("backward", "classifier", args,
           {{"M", 16}, {"K", 16}, {"N", 32}, {"layout", "out_in"}, {"accumulate", false}, {"chunk", chunk},
            {"scale", 1.0}, {"grad_scale", 0.0625}});
    };
  };
  for (const char* acc : {static_cast<const char*>(nullptr), "f32"}) {
    testing::PlanBuilder b = base;
    classifier(5, 5, acc)(b);
    Status s = load(b);
    EXPECT_TRUE(s.isOk()) << s.message();
    auto plan = loadPlan(dir.string());
    ASSERT_TRUE(plan.isOk());
    const Op& op = plan->programs[0].subroutines[2].ops.back();
    ASSERT_EQ(op.kind, schema::OpKind::kClassifier);
    EXPECT_EQ(op.access(size_t(schema::argIndex(op.kind, "loss"))), schema::ArgAccess::kReadWrite);
    EXPECT_EQ(op.access(size_t(schema::argIndex(op.kind, "dw"))), schema::ArgAccess::kWrite);
  }
  expectError(classifier(17, 17, nullptr), {"attrs.chunk", "exceed the op's M = 16"});
  expectError(classifier(5, 4, nullptr), {"args.logits", "expected chunk×N = 160"});
  expectError(classifier(5, 5, "bf16"), {"args.dw_acc", "must be an f32 buffer"});
}

// The GELU epilogues' roles (llcdist-plan-fuse-epilogues): linear_fwd's gelu is M×N; linear_bwd_input's
// gelu_x is M×K and only where dx is written (the epilogue cannot accumulate).
TEST_F(PlanLoaderTest, LinearGeluRoles) {
  {
    testing::PlanBuilder b = base;
    forwardOp(b, 2)["args"]["gelu"] = b.buffer("gelu", "activation", {16, 32});
    Status s = load(b);
    EXPECT_TRUE(s.isOk()) << s.message();
  }
  expectError([](auto& b) { forwardOp(b, 2)["args"]["gelu"] = b.buffer("gelu", "activation", {16, 16}); },
              {"subroutines[1].ops[2].args.gelu", "expected M×N = 512"});
  auto bwdInput = [](bool accumulate, int64_t geluRows) {
    return [=](testing::PlanBuilder& b) {
      const int64_t x = b.buffer("gelu_x", "activation", {geluRows, 16}), dx = b.buffer("dx", "activation", {16, 16});
      b.op("forward", "linear_bwd_input", {{"dy", kLogits}, {"w", kLm}, {"gelu_x", x}, {"dx", dx}},
           {{"M", 16}, {"K", 16}, {"N", 32}, {"layout", "out_in"}, {"accumulate", accumulate}});
    };
  };
  {
    testing::PlanBuilder b = base;
    bwdInput(false, 16)(b);
    Status s = load(b);
    EXPECT_TRUE(s.isOk()) << s.message();
  }
  expectError(bwdInput(true, 16), {"ops[4].args.gelu_x", "accumulate must be false"});
  expectError(bwdInput(false, 8), {"ops[4].args.gelu_x", "expected M×K = 256"});
}

// attention_fwd / attention_bwd take q, k, v or the packed qkv (and dq, dk, dv or dqkv): exactly one form,
// the packed buffer B×S×(nh+2·nkv)×hd.
TEST_F(PlanLoaderTest, AttentionPackedRoles) {
  const json attrs = {{"B", 2}, {"S", 4}, {"nh", 2}, {"nkv", 1}, {"hd", 4}};
  // Adds an attention_fwd (ops[4]) and an attention_bwd (ops[5]) with the given input and gradient forms.
  auto attention = [&](bool packedIn, bool packedGrad, bool both, int64_t packedCols) {
    return [=](testing::PlanBuilder& b) {
      auto buf = [&](const char* n, int64_t cols) { return b.buffer(n, "activation", {8, cols}); };
      const int64_t q = buf("q", 8), k = buf("k", 4), v = buf("v", 4), qkv = buf("qkv", packedCols);
      const int64_t out = buf("o", 8), dout = buf("do", 8), lse = b.buffer("lse", "activation", {2, 2, 4});
      const int64_t dq = buf("dq", 8), dk = buf("dk", 4), dv = buf("dv", 4), dqkv = buf("dqkv", packedCols);
      json in = packedIn ? json{{"qkv", qkv}} : json{{"q", q}, {"k", k}, {"v", v}};
      if (both) in[packedIn ? "q" : "qkv"] = packedIn ? q : qkv;
      json fwd = in, bwd = in;
      fwd["out"] = out;
      fwd["lse"] = lse;
      b.op("forward", "attention_fwd", fwd, attrs);
      bwd["dout"] = dout;
      bwd["out"] = out;
      bwd["lse"] = lse;
      if (packedGrad) {
        bwd["dqkv"] = dqkv;
      } else {
        bwd["dq"] = dq;
        bwd["dk"] = dk;
        bwd["dv"] = dv;
      }
      b.op("forward", "attention_bwd", bwd, attrs);
    };
  };
  for (bool packedIn : {false, true})
    for (bool packedGrad : {false, true}) {
      testing::PlanBuilder b = base;
      attention(packedIn, packedGrad, false, 16)(b);
      Status s = load(b);
      EXPECT_TRUE(s.isOk()) << packedIn << packedGrad << ": " << s.message();
    }
  expectError(attention(true, false, true, 16), {"ops[4].args.qkv", "not both"});
  expectError(attention(false, false, true, 16), {"ops[4].args.qkv", "not both"});
  expectError(attention(true, true, false, 12), {"ops[4].args.qkv", "B×S×(nh+2·nkv)×hd = 128"});
  expectError(
      [&](testing::PlanBuilder& b) {
        attention(false, false, false, 16)(b);
        forwardOp(b, 5)["args"].erase("dv");
      },
      {"ops[5].args.dqkv", "name dq, dk, dv (all three) or the packed dqkv"});
}

// embedding_fwd with wpe / embedding_bwd_weight with dwpe (the fused position embedding): attrs S and P
// with it and only with it, M a multiple of S, S <= P, the table P×H, never with shard_axis.
TEST_F(PlanLoaderTest, EmbeddingFusedPositionRoles) {
  auto withWpe = [](int64_t P, int64_t S, bool attrs) {
    return [=](testing::PlanBuilder& b) {
      json& op = forwardOp(b, 1);
      op["args"]["wpe"] = b.buffer("wpe", "param", {P, 16});
      if (attrs) {
        op["attrs"]["S"] = S;
        op["attrs"]["P"] = P;
      }
    };
  };
  {
    testing::PlanBuilder b = base;
    withWpe(8, 8, true)(b);
    const int64_t dwpe = b.buffer("dwpe", "grad", {8, 16});
    b.op("forward", "embedding_bwd_weight", {{"ids", kIds}, {"dout", kH}, {"dtable", kWte}, {"dwpe", dwpe}},
         {{"M", 16}, {"V", 32}, {"H", 16}, {"accumulate", true}, {"S", 8}, {"P", 8}});
    Status s = load(b);
    EXPECT_TRUE(s.isOk()) << s.message();
  }
  expectError(withWpe(8, 8, false), {"ops[1].attrs.S", "required with wpe"});
  expectError([](auto& b) { forwardOp(b, 1)["attrs"]["S"] = 8; }, {"ops[1].attrs.S", "only allowed with wpe"});
  expectError(withWpe(8, 3, true), {"ops[1].attrs.S", "not a multiple of S = 3"});
  expectError(withWpe(4, 8, true), {"ops[1].attrs.S", "exceeds the position table size P = 4"});
}

// Sequence-parallel position embedding (attr shard_axis; S is the local sequence length, the rank holds
// positions [c·S, (c+1)·S), so S·n must fit in P).
TEST_F(PlanLoaderTest, PosEmbeddingShardAxisErrors) {
  // Appends pos_embedding_fwd (forward op 4, in place on h [B·T, H] = [2·8, 16]) and
  // pos_embedding_bwd_weight (backward op 4, on dh) with P positions and the given shard_axis (if any).
  auto withPos = [](int64_t P, json axisF, json axisB, int64_t tp = 1) {
    return [=](testing::PlanBuilder& b) {
      if (tp > 1) toMesh(b, 1, tp);
      const int64_t wpe = b.buffer("wpe", "activation", {P, 16}), dwpe = b.buffer("dwpe", "activation", {P, 16});
      json fa = {{"B", 2}, {"S", 8}, {"H", 16}, {"P", P}}, ba = {{"B", 2}, {"S", 8}, {"H", 16}, {"P", P}, {"accumulate", true}};
      if (!axisF.is_null()) fa["shard_axis"] = axisF;
      if (!axisB.is_null()) ba["shard_axis"] = axisB;
      b.op("forward", "pos_embedding_fwd", {{"x", kH}, {"wpe", wpe}, {"y", kH}}, fa, "wpe");
      b.op("backward", "pos_embedding_bwd_weight", {{"dy", kDh}, {"dwpe", dwpe}}, ba, "wpe");
    };
  };
  for (auto [P, tp, f, bw] : {std::tuple{8, 1, "tp", "dp"}, std::tuple{16, 2, "tp", "tp"}, std::tuple{17, 2, "tp", "pp"},
                              std::tuple{8, 2, "dp", "pp"}}) {
    testing::PlanBuilder b = base;  // S·n <= P on every axis (an axis of size 1 is the unsharded op)
    withPos(P, f, bw, tp)(b);
    Status s = load(b);
    EXPECT_TRUE(s.isOk()) << "P " << P << " tp " << tp << ": " << s.message();
  }
  const std::string pf = "subroutines[1].ops[4]", pb = "subroutines[2].ops[4]";
  expectError(withPos(8, "xp", nullptr), {"program-0.json", pf + ".attrs.shard_axis", "unknown mesh axis \"xp\""});
  expectError(withPos(8, nullptr, ""), {pb + ".attrs.shard_axis", "unknown mesh axis"});
  expectError(withPos(8, nullptr, "sp"),
              {pb + ".attrs.shard_axis", "unknown mesh axis \"sp\"",
               "\"dp\", \"tp\", \"pp\", \"cp\", \"ep\" or \"edp\""});
  expectError(withPos(8, 2, nullptr), {pf + ".attrs.shard_axis", "expected a string"});
  expectError(withPos(8, nullptr, json::array({"tp"})), {pb + ".attrs.shard_axis", "expected a string"});
  // tp = 2 with S = 8: the positions [0, 16) do not fit in P = 12 (nor the unsharded rule S <= P = 7).
  expectError(withPos(12, "tp", nullptr, 2), {pf + ".attrs.S", "S·n = 16", "shard_axis \"tp\"", "P = 12"});
  expectError(withPos(15, nullptr, "tp", 2), {pb + ".attrs.S", "S·n = 16", "P = 15"});
  expectError(withPos(7, "tp", nullptr, 2), {pf + ".attrs.S", "exceeds the position table size P = 7"});
}

TEST_F(PlanLoaderTest, ShardedParamErrors) {
  // Shard wte [32, 16] over tp = 2 on dim 0: its buffer and grad must be [16, 16].
  auto shardWte = [](json sharding, std::vector<int64_t> local) {
    return [sharding, local](testing::PlanBuilder& b) {
      toMesh(b, 2, 2);
      b.manifest["params"][0]["sharding"] = sharding;
      for (int id : {0, 1, 2, 3}) {  // wte, its grad, adam m and v
        b.program["buffers"][id]["shape"] = local;
        b.program["buffers"][id]["bytes"] = local[0] * local[1] * 4;
      }
    };
  };
  {
    testing::PlanBuilder b = base;
    shardWte({{"axis", "tp"}, {"dim", 0}}, {16, 16})(b);
    b.ops("forward")[1]["attrs"]["V"] = 16;  // the program's own use of the shard
    b.ops("backward")[3]["attrs"]["V"] = 16;
    b.write(dir);
    auto plan = loadPlan(dir.string());
    ASSERT_TRUE(plan.isOk()) << plan.status().message();
    const ParamDesc& p = plan->manifest.params[0];
    ASSERT_TRUE(p.sharding.has_value());
    EXPECT_EQ(p.sharding->blocks, 1);
    EXPECT_EQ(p.localShape, (std::vector<int64_t>{16, 16}));
  }
  auto fixOps = [](std::function<void(testing::PlanBuilder&)> f) {
    return [f](testing::PlanBuilder& b) {
      f(b);
      b.ops("forward")[1]["attrs"]["V"] = 16;
      b.ops("backward")[3]["attrs"]["V"] = 16;
    };
  };
  expectError(shardWte({{"axis", "tp"}, {"dim", 0}}, {32, 16}),
              {"manifest.json", "params[0].buffer", "local shard", "[16, 16]", "[32, 16]"});
  expectError(fixOps(shardWte({{"axis", "tp"}, {"dim", 2}}, {16, 16})), {"manifest.json", "params[0].sharding.dim", "in [0, 1]"});
  expectError(fixOps(shardWte({{"axis", "tp"}, {"dim", 0}, {"blocks", 3}}, {16, 16})),
              {"params[0].sharding", "not divisible by blocks × tp = 3 × 2"});
  expectError(fixOps(shardWte({{"axis", "xp"}, {"dim", 0}}, {16, 16})), {"params[0].sharding.axis", "unknown axis"});
  expectError(fixOps(shardWte({{"axis", "tp"}}, {16, 16})), {"params[0].sharding.dim", "missing"});
  expectError(fixOps(shardWte({{"axis", "tp"}, {"dim", 0}, {"split", 2}}, {16, 16})), {"params[0].sharding.split", "unknown field"});
  expectError(fixOps(shardWte({{"axis", "tp"}, {"dim", 0}, {"blocks", 0}}, {16, 16})), {"params[0].sharding.blocks", ">= 1"});
}

// The moe family (forward op 4): every role's element count from the attrs, k <= E, ids in i32 buffers.
TEST_F(PlanLoaderTest, MoeOpErrors) {
  const std::string at = "subroutines[1].ops[4]";
  // moe_route of the 16 tokens over E = 4 experts, k each: logits [16, 4], weights and experts [16, k].
  auto route = [](int64_t k, int64_t logits) {
    return [=](testing::PlanBuilder& b) {
      const int64_t l = b.buffer("router.logits", "activation", {logits});
      const int64_t w = b.buffer("router.weights", "activation", {16, k});
      const int64_t e = b.buffer("router.experts", "activation", {16, k}, "i32");
      b.op("forward", "moe_route", {{"logits", l}, {"weights", w}, {"experts", e}},
           {{"T", 16}, {"E", 4}, {"k", k}, {"normalize", true}});
    };
  };
  // grouped_linear_fwd of N = 32 rows, K = 16, O = 8 over E = 4 experts: w [4, 8, 16].
  auto grouped = [](int64_t w, const char* sizesType) {
    return [=](testing::PlanBuilder& b) {
      const int64_t x = b.buffer("experts.x", "activation", {32, 16});
      const int64_t wb = b.buffer("experts.w", "param", {w});
      const int64_t sizes = b.buffer("experts.sizes", "activation", {4}, sizesType);
      const int64_t y = b.buffer("experts.y", "activation", {32, 8});
      b.op("forward", "grouped_linear_fwd", {{"x", x}, {"w", wb}, {"group_sizes", sizes}, {"y", y}},
           {{"N", 32}, {"K", 16}, {"O", 8}, {"E", 4}});
    };
  };
  using Mutate = std::function<void(testing::PlanBuilder&)>;
  for (const Mutate& valid : {Mutate(route(2, 64)), Mutate(route(4, 64)), Mutate(grouped(512, "i32"))}) {
    testing::PlanBuilder b = base;
    valid(b);
    Status s = load(b);
    EXPECT_TRUE(s.isOk()) << s.message();
  }
  expectError(route(5, 64), {at + ".attrs.k", "moe_route: k = 5 experts per token exceeds E = 4 experts"});
  expectError(route(2, 60), {at + ".args.logits", "expected T×E = 64"});
  expectError(grouped(256, "i32"), {at + ".args.w", "expected E×O×K = 512"});
  expectError(grouped(512, "f32"), {at + ".args.group_sizes", "is f32", "needs i32"});
  // moe_unpermute: xp [T·k, H] = [32, 16] for T 16, k 2, H 16; the optional weights [T, k] when given.
  auto unpermute = [](int64_t xp, int64_t weights) {
    return [=](testing::PlanBuilder& b) {
      json args = {{"xp", b.buffer("moe.xp", "activation", {xp})},
                   {"slots", b.buffer("moe.slots", "activation", {32}, "i32")},
                   {"y", kH}};
      if (weights) args["weights"] = b.buffer("moe.weights", "activation", {weights});
      b.op("forward", "moe_unpermute", args, {{"T", 16}, {"H", 16}, {"k", 2}});
    };
  };
  {
    testing::PlanBuilder b = base;
    unpermute(512, 0)(b);
    Status s = load(b);
    EXPECT_TRUE(s.isOk()) << s.message();
  }
  expectError(unpermute(256, 32), {at + ".args.xp", "expected T×k×H = 512"});
  expectError(unpermute(512, 16), {at + ".args.weights", "expected T×k = 32"});
  // Token dropping: moe_permute's capacity C (>= 1) makes xp [E·C, H]; moe_unpermute's N makes xp [N, H].
  auto permute = [](int64_t xp, json capacity) {
    return [=](testing::PlanBuilder& b) {
      json attrs = {{"T", 16}, {"H", 16}, {"E", 4}, {"k", 2}};
      if (!capacity.is_null()) attrs["capacity"] = capacity;
      b.op("forward", "moe_permute",
           {{"x", kH},
            {"experts", b.buffer("moe.experts", "activation", {32}, "i32")},
            {"xp", b.buffer("moe.xp", "activation", {xp})},
            {"slots", b.buffer("moe.slots", "activation", {32}, "i32")},
            {"group_sizes", b.buffer("moe.sizes", "activation", {4}, "i32")}},
           attrs);
    };
  };
  auto unpermuteRows = [](int64_t xp, json N) {
    return [=](testing::PlanBuilder& b) {
      b.op("forward", "moe_unpermute",
           {{"xp", b.buffer("moe.xp", "activation", {xp})},
            {"slots", b.buffer("moe.slots", "activation", {32}, "i32")},
            {"y", kH}},
           {{"T", 16}, {"H", 16}, {"k", 2}, {"N", N}});
    };
  };
  for (const Mutate& valid :
       {Mutate(permute(512, json())), Mutate(permute(4 * 5 * 16, 5)), Mutate(permute(4 * 16, 1)),
        Mutate(unpermuteRows(20 * 16, 20))}) {
    testing::PlanBuilder b = base;
    valid(b);
    Status s = load(b);
    EXPECT_TRUE(s.isOk()) << s.message();
  }
  expectError(permute(512, 0), {at + ".attrs.capacity", ">= 1"});
  expectError(permute(512, -3), {at + ".attrs.capacity", ">= 1"});
  expectError(permute(512, 5), {at + ".args.xp", "expected E×capacity×H = 320"});
  expectError(permute(320, json()), {at + ".args.xp", "expected T×k×H = 512"});
  expectError(unpermuteRows(512, 20), {at + ".args.xp", "expected N×H = 320"});
  expectError(unpermuteRows(320, 0), {at + ".attrs.N", ">= 1"});
}

// The load-balancing loss's kernels: the statistics [E] (counts i32), the router's logits [T, E] and
// experts [T, k], the loss [1]; moe_aux_loss / _bwd's scale required and finite as fp32.
TEST_F(PlanLoaderTest, MoeAuxLossErrors) {
  const std::string at = "subroutines[1].ops[4]";
  // moe_router_stats with E-element statistics of `stats` elements and `experts` rows of k = 2.
  auto stats = [](int64_t statsElems, int64_t expertRows) {
    return [=](testing::PlanBuilder& b) {
      b.op("forward", "moe_router_stats",
           {{"logits", b.buffer("router.logits", "activation", {16, 4})},
            {"experts", b.buffer("router.experts", "activation", {expertRows, 2}, "i32")},
            {"counts", b.buffer("stats.counts", "activation", {4}, "i32")},
            {"probs", b.buffer("stats.probs", "activation", {4})},
            {"counts_out", b.buffer("stats.counts_out", "activation", {statsElems}, "i32")},
            {"probs_out", b.buffer("stats.probs_out", "activation", {4})}},
           {{"T", 16}, {"E", 4}, {"k", 2}});
    };
  };
  auto statsBwd = [](int64_t dprobs) {
    return [=](testing::PlanBuilder& b) {
      b.op("forward", "moe_router_stats_bwd",
           {{"logits", b.buffer("router.logits", "activation", {16, 4})},
            {"dprobs", b.buffer("stats.dprobs", "activation", {dprobs})},
            {"dlogits", b.buffer("router.dlogits", "activation", {16, 4})}},
           {{"T", 16}, {"E", 4}});
    };
  };
  // moe_aux_loss (or _bwd) with loss elements `loss` and attrs `attrs`.
  auto auxLoss = [](bool backward, int64_t loss, json attrs) {
    return [=](testing::PlanBuilder& b) {
      json args = {{"counts", b.buffer("stats.counts", "activation", {4}, "i32")}};
      if (backward) {
        args["dprobs"] = b.buffer("stats.dprobs", "activation", {4});
      } else {
        args["probs"] = b.buffer("stats.probs", "activation", {4});
        args["loss"] = b.buffer("aux.loss", "metric", {loss});
      }
      b.op("forward", backward ? "moe_aux_loss_bwd" : "moe_aux_loss", args, attrs);
    };
  };
  const json scaled = {{"E", 4}, {"scale", 0.32}};
  using Mutate = std::function<void(testing::PlanBuilder&)>;
  for (const Mutate& valid : {Mutate(stats(4, 16)), Mutate(statsBwd(4)), Mutate(auxLoss(false, 1, scaled)),
                              Mutate(auxLoss(true, 1, scaled))}) {
    testing::PlanBuilder b = base;
    valid(b);
    Status s = load(b);
    EXPECT_TRUE(s.isOk()) << s.message();
  }
  expectError(stats(8, 16), {at + ".args.counts_out", "expected E = 4"});
  expectError(stats(4, 15), {at + ".args.experts", "expected T×k = 32"});
  expectError(statsBwd(3), {at + ".args.dprobs", "expected E = 4"});
  expectError(auxLoss(false, 2, scaled), {at + ".args.loss", "expected 1 = 1"});
  expectError(auxLoss(false, 1, {{"E", 4}}), {at + ".attrs.scale"});
  expectError(auxLoss(true, 1, {{"E", 4}, {"scale", 1e39}}), {at + ".attrs.scale", "must be a finite fp32 number"});
}

}  // namespace
}  // namespace llcdist::rt

namespace llcdist::rt {
namespace {

// Vocabulary padding (feature "vocab_padding"): the base plan's 32 rows as 30 real + 2 padding.
class VocabPaddingLoaderTest : public PlanLoaderTest {
protected:
  VocabPaddingLoaderTest() : padded(base) {
    padded.manifest["features"] = {"vocab_padding"};
    padded.manifest["model"]["vocab_size"] = 30;
    padded.manifest["model"]["padded_vocab_size"] = 32;
    padded.manifest["params"][0]["vocab_padded"] = true;
    padded.manifest["params"][1]["vocab_padded"] = true;
    forwardOp(padded, 3)["attrs"]["real_vocab"] = 30;
  }
  void expectPaddedError(const std::function<void(testing::PlanBuilder&)>& mutate, std::vector<std::string> parts) {
    testing::PlanBuilder b = padded;
    mutate(b);
    Status s = load(b);
    ASSERT_FALSE(s.isOk()) << "expected an error containing '" << parts[0] << "'";
    for (const std::string& p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << s.message();
  }
  testing::PlanBuilder padded;
};

TEST_F(VocabPaddingLoaderTest, PaddedPlanLoads) {
  padded.write(dir);
  auto plan = loadPlan(dir.string());
  ASSERT_TRUE(plan.isOk()) << plan.status().message();
  const Manifest& m = plan->manifest;
  EXPECT_EQ(m.vocabSize, 30);
  EXPECT_EQ(m.paddedVocabSize, 32);
  EXPECT_TRUE(m.params[0].vocabPadded);
  EXPECT_EQ(m.params[0].shape, (std::vector<int64_t>{32, 16}));
  EXPECT_EQ(m.params[0].fileShape, (std::vector<int64_t>{30, 16}));
  EXPECT_EQ(m.params[0].fileNumel(), 30 * 16);
  EXPECT_EQ(plan->programs[0].subroutines[1].ops[3].intAttr("real_vocab"), 30);
}

TEST_F(VocabPaddingLoaderTest, Errors) {
  expectError([](auto& b) { b.manifest["model"]["padded_vocab_size"] = 64; },
              {"manifest.json", "model.padded_vocab_size", "needs the feature \"vocab_padding\""});
  expectPaddedError([](auto& b) { b.manifest["model"].erase("padded_vocab_size"); },
                    {"model.padded_vocab_size", "missing: the feature \"vocab_padding\" needs it"});
  expectPaddedError([](auto& b) { b.manifest["model"]["padded_vocab_size"] = 30; },
                    {"model.padded_vocab_size", "must exceed model.vocab_size = 30, got 30"});
  expectPaddedError([](auto& b) { b.manifest["model"]["padded_vocab_size"] = "32"; },
                    {"model.padded_vocab_size", "integer"});
  expectPaddedError([](auto& b) { b.manifest["model"]["padded_vocab_size"] = 40; },
                    {"params[0].vocab_padded", "has shape [32, 16]; a vocab-padded param has model.padded_vocab_size = 40 rows"});
  expectPaddedError([](auto& b) { b.manifest["params"][0]["vocab_padded"] = 1; }, {"params[0].vocab_padded"});
  expectError([](auto& b) { b.manifest["params"][0]["vocab_padded"] = true; },
              {"params[0].vocab_padded", "needs the feature \"vocab_padding\""});
  expectError([](auto& b) { forwardOp(b, 3)["attrs"]["real_vocab"] = 32; },
              {"ops[3].attrs.real_vocab", "needs the feature \"vocab_padding\""});
  expectPaddedError([](auto& b) { forwardOp(b, 3)["attrs"]["real_vocab"] = 31; },
                    {"ops[3].attrs.real_vocab", "expected model.vocab_size = 30, got 31"});
  expectPaddedError([](auto& b) { forwardOp(b, 3)["attrs"]["real_vocab"] = 0; }, {"ops[3].attrs.real_vocab", ">= 1"});
}

// Training a padded plan: the padding rows start at zero and stay there; --save-params writes the 30
// real rows; --init-from takes a 30-row file (and refuses the 32-row shape, naming both sizes); 0
// steps round-trip a file bit for bit.
TEST_F(VocabPaddingLoaderTest, SaveStripsAndImportPads) {
  padded.write(dir);
  RunOptions o;
  o.planDir = dir.string();
  o.steps = 2;
  o.quiet = true;
  o.seed = 5;
  o.saveParams = (dir / "out.safetensors").string();
  std::ostringstream progress;
  RunResult r;
  ASSERT_TRUE(runTraining(o, progress, &r).isOk());
  auto reader = SafetensorsReader::open(o.saveParams);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  for (const char* name : {"transformer.wte.weight", "lm_head.weight"}) {
    const TensorInfo* t = reader->find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->shape, (std::vector<int64_t>{30, 16})) << name;
  }
  // Round trip.
  o.steps = 0;
  o.initFrom = o.saveParams;
  o.saveParams = (dir / "again.safetensors").string();
  ASSERT_TRUE(runTraining(o, progress, &r).isOk());
  auto again = SafetensorsReader::open(o.saveParams);
  ASSERT_TRUE(again.isOk());
  for (const TensorInfo& t : reader->tensors()) {
    auto a = reader->readF32(t.name), b = again->readF32(t.name);
    ASSERT_TRUE(a.isOk() && b.isOk());
    EXPECT_EQ(a.value(), b.value()) << t.name;
  }
  // A file with the padded shape is not a Hugging Face file of this model.
  std::vector<float> big(32 * 16, 0.0f);
  std::vector<TensorToWrite> tensors;
  std::vector<std::vector<float>> keep;
  for (const TensorInfo& t : reader->tensors()) {
    keep.push_back(reader->readF32(t.name).value());
    std::vector<int64_t> shape = t.shape;
    if (shape[0] == 30) {
      shape[0] = 32;
      keep.back().resize(32 * 16, 0.0f);
    }
    tensors.push_back({t.name, DType::kF32, shape, keep.back().data()});
  }
  const std::string wrong = (dir / "padded.safetensors").string();
  ASSERT_TRUE(writeSafetensors(wrong, std::move(tensors), {{"format", "pt"}}).isOk());
  o.initFrom = wrong;
  o.saveParams.clear();
  Status s = runTraining(o, progress, &r);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("has shape [32, 16] but the plan's parameter has shape [30, 16] (the real vocabulary of "
                             "30 rows; the plan pads it to 32)"),
            std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace llcdist::rt
