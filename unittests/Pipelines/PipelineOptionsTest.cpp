//===- PipelineOptionsTest.cpp - one options struct, C++ and textual ------===//
//
// TextualPipelineOptions binds a plain struct's fields to textual options,
// with the struct's defaults; `llcdist-train` built from text must be the
// pipeline buildTrainingPipeline builds from the same options set in C++.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Support/PipelineOptions.h"
#include "llcdist/InitAll.h"
#include "llcdist/Pipelines/Pipelines.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include <functional>
#include <gtest/gtest.h>
#include <set>

using namespace llcdist;

namespace {
struct Toy {
  int64_t count = 3;
  double rate = 0.5;
  bool on = true;
  std::string name = "toy";
  struct {
    int64_t depth = 7;
  } nested;
};

void bindToy(TextualPipelineOptions<Toy> &o, Toy &f) {
  o.bind("count", f.count, "a count");
  o.bind("rate", f.rate, "a rate");
  o.bind("on", f.on, "a switch");
  o.bind("name", f.name, "a name");
  o.bind("depth", f.nested.depth, "a nested field");
}

TEST(TextualPipelineOptions, DefaultsAreTheStructs) {
  TextualPipelineOptions<Toy> o(bindToy);
  ASSERT_TRUE(mlir::succeeded(o.parseFromString("")));
  Toy t = o.parsed();
  EXPECT_EQ(t.count, 3);
  EXPECT_EQ(t.rate, 0.5);
  EXPECT_TRUE(t.on);
  EXPECT_EQ(t.name, "toy");
  EXPECT_EQ(t.nested.depth, 7);
}

TEST(TextualPipelineOptions, ParsedValuesReachTheirFields) {
  TextualPipelineOptions<Toy> o(bindToy);
  ASSERT_TRUE(mlir::succeeded(o.parseFromString("count=11 rate=0.25 on=false name=x,y depth=2")));
  Toy t = o.parsed();
  EXPECT_EQ(t.count, 11);
  EXPECT_EQ(t.rate, 0.25);
  EXPECT_FALSE(t.on);
  EXPECT_EQ(t.name, "x,y");
  EXPECT_EQ(t.nested.depth, 2);
}

TEST(TextualPipelineOptions, UnknownAndMalformedOptionsFail) {
  TextualPipelineOptions<Toy> a(bindToy);
  EXPECT_TRUE(mlir::failed(a.parseFromString("colour=red")));
  TextualPipelineOptions<Toy> b(bindToy);
  EXPECT_TRUE(mlir::failed(b.parseFromString("count=many")));
}

/// The pipeline `options` builds, as text (each pass with all its options).
std::string pipelineText(const std::function<void(mlir::OpPassManager &)> &build) {
  mlir::OpPassManager pm(mlir::ModuleOp::getOperationName());
  build(pm);
  std::string text;
  llvm::raw_string_ostream os(text);
  pm.printAsTextualPipeline(os);
  return text;
}

std::string fromText(llvm::StringRef options) {
  static bool registered = [] {
    registerAllPasses();
    return true;
  }();
  (void)registered;
  return pipelineText([&](mlir::OpPassManager &pm) {
    std::string err;
    llvm::raw_string_ostream es(err);
    ASSERT_TRUE(mlir::succeeded(mlir::parsePassPipeline(("llcdist-train{" + options + "}").str(), pm, es))) << err;
  });
}

std::string fromStruct(const std::function<void(TrainingPipelineOptions &)> &set) {
  TrainingPipelineOptions o;
  set(o);
  return pipelineText([&](mlir::OpPassManager &pm) { buildTrainingPipeline(pm, o); });
}

TEST(TrainingPipelineOptions, TextualDefaultsAreTheStructs) {
  EXPECT_EQ(fromText(""), fromStruct([](TrainingPipelineOptions &) {}));
}

TEST(TrainingPipelineOptions, EveryTextualOptionSetsItsField) {
  using O = TrainingPipelineOptions;
  const std::vector<std::pair<std::string, std::function<void(O &)>>> cases = {
      {"dp=2", [](O &o) { o.mesh.dp = 2; }},
      {"tp=2", [](O &o) { o.mesh.tp = 2; }},
      {"pp=2", [](O &o) { o.mesh.pp = 2; }},
      {"rank-order=dp,tp,pp", [](O &o) { o.mesh.rankOrder = "dp,tp,pp"; }},
      {"optimizer=sgd", [](O &o) { o.optimizer = "sgd"; }},
      {"lr-schedule=cosine", [](O &o) { o.lrSchedule = "cosine"; }},
      {"lr=0.5", [](O &o) { o.lr = 0.5; }},
      // min-lr must stay within [0, lr] (optimizerOptionsError).
      {"lr=0.5 min-lr=0.01",
       [](O &o) {
         o.lr = 0.5;
         o.minLr = 0.01;
       }},
      {"warmup=3", [](O &o) { o.warmup = 3; }},
      {"total-steps=9", [](O &o) { o.totalSteps = 9; }},
      {"beta1=0.8", [](O &o) { o.beta1 = 0.8; }},
      {"beta2=0.95", [](O &o) { o.beta2 = 0.95; }},
      {"eps=1e-6", [](O &o) { o.eps = 1e-6; }},
      {"weight-decay=0.2", [](O &o) { o.weightDecay = 0.2; }},
      {"momentum=0.9", [](O &o) { o.momentum = 0.9; }},
      {"grad-clip=1.5", [](O &o) { o.gradClip = 1.5; }},
      {"tp=2 tp-replicate-embeddings=true",
       [](O &o) {
         o.mesh.tp = 2;
         o.replicateEmbeddings = true;
       }},
      {"make-vocab-size-divisible-by=64", [](O &o) { o.vocabDivisibleBy = 64; }},
      {"sequence-parallel=true", [](O &o) { o.sequenceParallel = true; }},
      {"schedule=gpipe", [](O &o) { o.pipelineSchedule = "gpipe"; }},
      {"virtual-stages=2", [](O &o) { o.virtualStages = 2; }},
      {"pp-layout=3,1", [](O &o) { o.ppLayout = "3,1"; }},
      {"recompute=full", [](O &o) { o.recompute = "full"; }},
      {"zero=3", [](O &o) { o.zero = 3; }},
      // llcdist-plan-zero's option: the pass runs only with a ZeRO stage.
      {"zero=3 reshard-after-forward=false",
       [](O &o) {
         o.zero = 3;
         o.reshardAfterForward = false;
       }},
  };
  const std::string defaults = fromText("");
  for (const auto &[text, set] : cases) {
    SCOPED_TRACE(text);
    const std::string built = fromStruct(set);
    // The option changes the pipeline (so the comparison below means
    // something), and the text changes it as the field does.
    EXPECT_NE(built, defaults);
    EXPECT_EQ(fromText(text), built);
  }
}

} // namespace

namespace {
// The rules between options (overlapOptionsError, optimizerOptionsError): each
// holds on the defaults and fails on the one field that breaks it.
TEST(TrainingPipelineOptions, RulesBetweenOptions) {
  const llcdist::TrainingPipelineOptions defaults;
  EXPECT_FALSE(llcdist::overlapOptionsError(defaults));
  EXPECT_FALSE(llcdist::optimizerOptionsError(defaults));
  auto overlap = [&](const std::function<void(llcdist::TrainingPipelineOptions &)> &set) {
    llcdist::TrainingPipelineOptions o = defaults;
    set(o);
    return llcdist::overlapOptionsError(o).value_or("");
  };
  EXPECT_NE(overlap([](auto &o) { o.tpCommOverlap = true; }).find("--sequence-parallel"), std::string::npos);
  EXPECT_EQ(overlap([](auto &o) { o.tpCommOverlap = o.sequenceParallel = true; }), "");
  EXPECT_NE(overlap([](auto &o) { o.overlapP2P = true; }).find("pp > 1"), std::string::npos);
  EXPECT_EQ(overlap([](auto &o) { o.overlapP2P = true, o.mesh.pp = 2; }), "");
  EXPECT_NE(overlap([](auto &o) { o.scatterGatherP2P = true, o.mesh.pp = 2; }).find("tp > 1"), std::string::npos);
  EXPECT_NE(overlap([](auto &o) { o.scatterGatherP2P = true, o.mesh.tp = 2; }).find("pp > 1"), std::string::npos);
  EXPECT_NE(overlap([](auto &o) {
              o.scatterGatherP2P = o.sequenceParallel = true, o.mesh.tp = o.mesh.pp = 2;
            }).find("--sequence-parallel"),
            std::string::npos);
  EXPECT_EQ(overlap([](auto &o) { o.scatterGatherP2P = true, o.mesh.tp = o.mesh.pp = 2; }), "");
  EXPECT_NE(overlap([](auto &o) { o.fsdpPrefetch = 1; }).find("--zero 3"), std::string::npos);
  EXPECT_EQ(overlap([](auto &o) { o.fsdpPrefetch = 1, o.zero = 3; }), "");
  EXPECT_NE(overlap([](auto &o) { o.fsdpPrefetch = -1; }).find(">= 0"), std::string::npos);
  EXPECT_NE(overlap([](auto &o) { o.overlapParamGather = true; }).find("--zero 1 or 2"), std::string::npos);
  EXPECT_NE(overlap([](auto &o) { o.gradBucketSize = -5; }).find("got -5"), std::string::npos);
  auto optimizer = [&](const std::function<void(llcdist::TrainingPipelineOptions &)> &set) {
    llcdist::TrainingPipelineOptions o = defaults;
    set(o);
    return llcdist::optimizerOptionsError(o).value_or("");
  };
  EXPECT_EQ(optimizer([](auto &o) { o.lr = 0; }), "--lr must be > 0 (default 1e-3), got 0");
  EXPECT_NE(optimizer([](auto &o) { o.beta2 = 1; }).find("--beta2"), std::string::npos);
  EXPECT_NE(optimizer([](auto &o) { o.minLr = 1; }).find("--min-lr"), std::string::npos);
  EXPECT_EQ(optimizer([](auto &o) { o.weightDecay = -1; }), ""); // torch's default
  EXPECT_NE(optimizer([](auto &o) { o.weightDecay = -0.5; }).find("--weight-decay"), std::string::npos);
  EXPECT_NE(optimizer([](auto &o) { o.gradClip = -1; }).find("--grad-clip"), std::string::npos);
}
} // namespace

namespace {
/// The pass arguments `pm` runs, nested pipelines flattened in order: its
/// textual form without the options' braces, split at the nesting.
void passArguments(mlir::OpPassManager &pm, std::vector<std::string> &out) {
  std::string text;
  llvm::raw_string_ostream os(text);
  pm.printAsTextualPipeline(os);
  std::string name;
  int braces = 0;
  for (char c : text + ",") {
    braces += c == '{' ? 1 : c == '}' ? -1 : 0;
    if (braces > 0 || c == '}')
      continue;
    if (c == ',' || c == '(' || c == ')') {
      if (!name.empty() && name != "builtin.module" && name != "plan.program")
        out.push_back(name);
      name.clear();
    } else if (c != ' ') {
      name += c;
    }
  }
}
} // namespace

// llc-dist compile's help lists the training passes from the table the
// pipeline is built from (describeTrainingPipeline): every pass a pipeline
// builds is a listed one, in the listed order, and over a few option sets
// every listed pass is built — a pass added to the builder and not to the
// table, or listed under a wrong name, fails here.
TEST(TrainingPipelineOptions, TheHelpListsEveryPassThePipelineBuilds) {
  mlir::MLIRContext ctx;
  const std::vector<std::string> listed = trainingPipelinePasses();
  const std::string described = describeTrainingPipeline();
  std::set<std::string> built;
  std::vector<TrainingPipelineOptions> sets(6);
  sets[5].mesh.cp = 2; // ring attention (the default cp-impl) and its overlap
  sets[1].mesh.tp = 2;
  sets[1].replicateEmbeddings = true;
  sets[1].sequenceParallel = true;
  sets[1].tpCommOverlap = true;
  sets[1].gradBucketSize = 1000;
  sets[2].mesh.dp = 2;
  sets[2].zero = 1;
  sets[2].overlapParamGather = true;
  sets[3].mesh.dp = 2;
  sets[3].mesh.pp = 2;
  sets[3].zero = 3;
  sets[3].fsdpPrefetch = 1;
  sets[3].overlapP2P = true;
  sets[3].mesh.tp = 2;
  sets[3].scatterGatherP2P = true;
  sets[4].fuseNorm = sets[4].fuseEpilogues = sets[4].ceGradInPlace = sets[4].fuseClassifier = false;
  sets[4].packedQkv = sets[4].fuseEmbedding = sets[4].fuseOptimizer = sets[4].verifyPlan = false;
  for (const TrainingPipelineOptions &o : sets) {
    mlir::OpPassManager pm("builtin.module");
    buildTrainingPipeline(pm, o);
    std::vector<std::string> args;
    passArguments(pm, args);
    // The forward pipeline first (cse, llcdist-attach-mesh, llcdist-model-stats), then the table's.
    ASSERT_GE(args.size(), 3u);
    size_t at = 0;
    for (size_t i = 3; i < args.size(); ++i) {
      while (at < listed.size() && listed[at] != args[i])
        ++at;
      ASSERT_LT(at, listed.size()) << args[i] << " is built but not listed (or out of the listed order)";
      built.insert(args[i]);
    }
  }
  for (const std::string &pass : listed) {
    EXPECT_TRUE(built.count(pass)) << pass << " is listed but no option set built it";
    EXPECT_NE(described.find(pass), std::string::npos) << pass;
  }
  EXPECT_NE(described.find("llcdist-plan-fuse-norm (unless --no-fuse-norm)"), std::string::npos) << described;
  EXPECT_NE(described.find("on each program: llcdist-plan-grad-buckets"), std::string::npos) << described;
}
