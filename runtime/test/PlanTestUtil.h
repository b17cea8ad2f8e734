// Test helpers: build plan directories by hand (manifest.json + program-0.json) from C++.
#pragma once

#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Plan.h"
#include "llcdist/runtime/PlanSchema.h"
#include "llcdist/runtime/Safetensors.h"
#include "llcdist/runtime/TokenData.h"
#include "llcdist/runtime/Train.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace llcdist::rt::testing {

using json = nlohmann::json;
namespace fs = std::filesystem;

// A fresh temporary directory per test, removed at the end.
class TempDirTest : public ::testing::Test {
 protected:
  fs::path dir;
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    // A parameterized test's names hold '/' ("Backends/Suite", "Case/cpu"): one directory, not a tree
    // TearDown would leave the top of.
    std::string name =
        "llcdist_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" + std::to_string(::getpid());
    std::replace(name.begin(), name.end(), '/', '-');
    dir = fs::temp_directory_path() / name;
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string path(const std::string& name) const { return (dir / name).string(); }
};

inline void writeText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// Builds a manifest and a single program; buffers get consecutive 64-byte-aligned offsets.
struct PlanBuilder {
  json manifest;
  json program;
  int64_t arena = 0;

  PlanBuilder(int64_t vocab, int64_t seqLen, int64_t microBatch, int64_t microbatches,
              std::string optimizer = "adamw") {
    manifest = {
        {"format", "llc-dist-plan"},
        {"version", schema::kPlanVersion},
        {"features", json::array()},
        {"model", {{"name", "test"}, {"architecture", "Test"}, {"vocab_size", vocab}, {"dtype", "f32"}}},
        {"batch",
         {{"seq_len", seqLen},
          {"micro_batch", microBatch},
          {"microbatches", microbatches},
          {"dp", 1},
          {"global_batch", microBatch * microbatches}}},
        {"mesh", {{"dp", 1}, {"tp", 1}, {"pp", 1}}},
        {"lr_schedule", {{"kind", "constant"}, {"max_lr", 1e-2}}},
        {"grad_clip", 1.0},
        {"params", json::array()},
        {"programs", json::array({{{"file", "program-0.json"}, {"ranks", {0}}}})},
    };
    if (optimizer == "adamw")
      manifest["optimizer"] = {
          {"kind", "adamw"}, {"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.1}};
    else
      manifest["optimizer"] = {{"kind", "sgd"}, {"momentum", 0.9}, {"weight_decay", 0.0}};
    program = {{"format", "llc-dist-program"},
               {"version", schema::kPlanVersion},
               {"arena_bytes", 0},
               {"buffers", json::array()},
               {"subroutines", json::array()},
               {"actions", json::array()}};
  }

  int64_t buffer(const std::string& name, const std::string& kind, std::vector<int64_t> shape,
                 const std::string& dtype = "f32") {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const auto type = schema::parseElemType(dtype);
    const int64_t bytes = n * (type ? schema::elemTypeSize(*type) : 4);
    const int64_t id = int64_t(program["buffers"].size());
    program["buffers"].push_back({{"id", id},
                                  {"name", name},
                                  {"kind", kind},
                                  {"dtype", dtype},
                                  {"shape", shape},
                                  {"offset", arena},
                                  {"bytes", bytes}});
    arena += (bytes + 63) / 64 * 64;
    program["arena_bytes"] = arena;
    return id;
  }

  json& ops(const std::string& sub) {
    for (json& s : program["subroutines"])
      if (s["name"] == sub) return s["ops"];
    program["subroutines"].push_back({{"name", sub}, {"ops", json::array()}});
    return program["subroutines"].back()["ops"];
  }
  void op(const std::string& sub, const std::string& name, json args, json attrs = json::object(),
          const std::string& loc = "") {
    json o = {{"op", name}, {"args", std::move(args)}, {"attrs", std::move(attrs)}};
    if (!loc.empty()) o["loc"] = loc;
    ops(sub).push_back(std::move(o));
  }
  void action(const std::string& sub, int64_t microbatch = -1) {
    json a = {{"subroutine", sub}};
    if (microbatch >= 0) a["microbatch"] = microbatch;
    program["actions"].push_back(std::move(a));
  }
  void param(const std::string& name, std::vector<int64_t> shape, int64_t buf, int64_t grad, json init, bool wd,
             const std::string& dtype = "f32") {
    manifest["params"].push_back({{"name", name},
                                  {"shape", shape},
                                  {"dtype", dtype},
                                  {"buffer", buf},
                                  {"grad", grad},
                                  {"init", init},
                                  {"weight_decay", wd}});
  }
  void write(const fs::path& dir) const {
    writeText((dir / "manifest.json").string(), manifest.dump(2));
    writeText((dir / "program-0.json").string(), program.dump(2));
  }
};

// One-layer LM: ids -> embedding (wte [V,H]) -> lm_head linear (out_in, [V,H]) -> cross entropy, with
// gradient accumulation over `microbatches` and AdamW (decay on lm_head only) after global-norm clipping.
inline PlanBuilder oneLayerPlan(int64_t V, int64_t H, int64_t T, int64_t B, int64_t microbatches,
                                double initStd = 0.02) {
  PlanBuilder p(V, T, B, microbatches);
  const int64_t M = B * T;
  const int64_t wte = p.buffer("transformer.wte.weight", "param", {V, H});
  const int64_t dwte = p.buffer("grad.wte", "grad", {V, H});
  const int64_t mwte = p.buffer("adam_m.wte", "optimizer_state", {V, H});
  const int64_t vwte = p.buffer("adam_v.wte", "optimizer_state", {V, H});
  const int64_t lm = p.buffer("lm_head.weight", "param", {V, H});
  const int64_t dlm = p.buffer("grad.lm_head", "grad", {V, H});
  const int64_t mlm = p.buffer("adam_m.lm_head", "optimizer_state", {V, H});
  const int64_t vlm = p.buffer("adam_v.lm_head", "optimizer_state", {V, H});
  const int64_t ids = p.buffer("ids", "input", {B, T}, "i32");
  const int64_t tgt = p.buffer("targets", "input", {B, T}, "i32");
  const int64_t h = p.buffer("h", "activation", {M, H});
  const int64_t dh = p.buffer("dh", "activation", {M, H});
  const int64_t logits = p.buffer("logits", "activation", {M, V});
  const int64_t loss = p.buffer("loss", "metric", {1});
  const int64_t gn = p.buffer("grad_norm", "metric", {});
  p.param("transformer.wte.weight", {V, H}, wte, dwte, {{"kind", "normal"}, {"std", initStd}}, false);
  p.param("lm_head.weight", {V, H}, lm, dlm, {{"kind", "normal"}, {"std", initStd}}, true);
  const double mb = double(microbatches);
  p.op("step_begin", "fill_zero", {{"x", {loss, dwte, dlm}}});
  p.op("forward", "load_microbatch", {{"ids", ids}, {"targets", tgt}}, {{"B", B}, {"S", T}});
  p.op("forward", "embedding_fwd", {{"ids", ids}, {"table", wte}, {"out", h}}, {{"M", M}, {"V", V}, {"H", H}}, "wte");
  p.op("forward", "linear_fwd", {{"x", h}, {"w", lm}, {"y", logits}},
       {{"M", M}, {"K", H}, {"N", V}, {"layout", "out_in"}}, "lm_head");
  p.op("forward", "cross_entropy_fwd", {{"logits", logits}, {"targets", tgt}, {"loss", loss}},
       {{"M", M}, {"V", V}, {"scale", 1.0 / mb}}, "loss");
  p.op("backward", "cross_entropy_bwd", {{"logits", logits}, {"targets", tgt}, {"dlogits", logits}},
       {{"M", M}, {"V", V}, {"scale", 1.0 / (double(M) * mb)}});
  p.op("backward", "linear_bwd_weight", {{"dy", logits}, {"x", h}, {"dw", dlm}},
       {{"M", M}, {"K", H}, {"N", V}, {"layout", "out_in"}, {"accumulate", true}});
  p.op("backward", "linear_bwd_input", {{"dy", logits}, {"w", lm}, {"dx", dh}},
       {{"M", M}, {"K", H}, {"N", V}, {"layout", "out_in"}, {"accumulate", false}});
  p.op("backward", "embedding_bwd_weight", {{"ids", ids}, {"dout", dh}, {"dtable", dwte}},
       {{"M", M}, {"V", V}, {"H", H}, {"accumulate", true}});
  p.op("optimizer", "grad_norm", {{"grads", {dwte, dlm}}, {"norm", gn}}, {{"max_norm", 1.0}});
  p.op("optimizer", "adamw", {{"param", wte}, {"grad", dwte}, {"m", mwte}, {"v", vwte}},
       {{"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.0}});
  p.op("optimizer", "adamw", {{"param", lm}, {"grad", dlm}, {"m", mlm}, {"v", vlm}},
       {{"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.1}});
  p.action("step_begin");
  for (int64_t j = 0; j < microbatches; ++j) {
    p.action("forward", j);
    p.action("backward", j);
  }
  p.action("optimizer");
  return p;
}

// Runs plans written by PlanBuilder through runTraining, with the test's seed.
class TrainFixture : public TempDirTest {
 protected:
  explicit TrainFixture(uint64_t seed) : seed_(seed) {}
  std::string planDir(const PlanBuilder& b, const std::string& name = "plan") {
    const fs::path d = dir / name;
    fs::create_directories(d);
    b.write(d);
    return d.string();
  }
  RunOptions options(const std::string& plan, int64_t steps) const {
    RunOptions o;
    o.planDir = plan;
    o.steps = steps;
    o.quiet = true;
    o.seed = seed_;
    return o;
  }
  Status run(const RunOptions& o, RunResult* res = nullptr) {
    std::ostringstream progress;
    return runTraining(o, progress, res);
  }
  // A token file (llm.c's format) of `count` tokens repeating 0, 1, ..., period-1: a pattern the
  // one-layer plans learn in a few dozen steps.
  std::string repeatingTokens(int64_t count, int period) {
    std::vector<uint16_t> t(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) t[size_t(i)] = uint16_t(i % period);
    const std::string p = path("tokens.bin");
    EXPECT_TRUE(writeTokenFile(p, t.data(), count).isOk());
    return p;
  }
  static std::map<std::string, std::vector<float>> readAll(const std::string& file) {
    std::map<std::string, std::vector<float>> out;
    auto r = SafetensorsReader::open(file);
    EXPECT_TRUE(r.isOk()) << r.status().message();
    if (!r.isOk()) return out;
    for (const TensorInfo& t : r->tensors()) out[t.name] = r->readF32(t.name).value();
    return out;
  }

 private:
  uint64_t seed_;
};

// The builder's manifest and program-0.json parsed by the loader, as one plan; with `validateParameters`
// also the manifest's parameters checked against the program (validateParams), as loadPlan does.
inline StatusOr<Plan> parsePlan(const PlanBuilder& b, bool validateParameters) {
  Plan plan;
  LLCDIST_ASSIGN_OR_RETURN(plan.manifest, parseManifest(b.manifest.dump(), "manifest.json"));
  LLCDIST_ASSIGN_OR_RETURN(Program prog, parseProgram(b.program.dump(), "program-0.json", plan.manifest));
  plan.programs.push_back(std::move(prog));
  if (validateParameters) LLCDIST_RETURN_IF_ERROR(validateParams(plan.manifest, plan.programs[0]));
  return plan;
}

// Runs `steps` steps of a single-rank plan (parsePlan) through an interpreter on the CPU backend and
// returns its memory measurement (none before the first step); `allocated` gets the backend's peak
// allocation.
inline std::optional<MemoryStats> measureMemory(const PlanBuilder& b, int steps = 1, int64_t* allocated = nullptr,
                                                bool validateParameters = false) {
  auto plan = parsePlan(b, validateParameters);
  EXPECT_TRUE(plan.isOk()) << plan.status().message();
  if (!plan.isOk()) return std::nullopt;
  auto backend = makeCpuBackend();
  auto in = Interpreter::create(*plan, 0, *backend);
  EXPECT_TRUE(in.isOk()) << in.status().message();
  if (!in.isOk()) return std::nullopt;
  EXPECT_FALSE((*in)->memoryStats().has_value()) << "measured before any step";
  for (int s = 0; s < steps; ++s) {
    Status st = (*in)->runStep(s, 0.0, nullptr);
    EXPECT_TRUE(st.isOk()) << st.message();
  }
  if (allocated) *allocated = backend->peakAllocatedBytes();
  return (*in)->memoryStats();
}

}  // namespace llcdist::rt::testing
