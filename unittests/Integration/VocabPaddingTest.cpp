//===- VocabPaddingTest.cpp - the golden rule under vocabulary padding -----===//
//
// Megatron-LM's --make-vocab-size-divisible-by (llcdist-pad-vocab): tiny
// GPT-2 with 257 tokens (tied embeddings) and tiny Llama with 300 (untied LM
// head), neither divisible by tp, against ONE device with NO padding (the
// real vocabulary, divisible-by 1): tp ∈ {2, 4} with and without sequence
// parallelism, with pp = 2, with --tp-embeddings replicated, and with ZeRO 1
// and 3 over dp = 2 (the padded table's rows in ZeRO blocks), each padded
// differently (257 -> 512 at tp=2 and tp=4, 384 at tp=1; 300 -> 512, 384),
// reproduce the losses and the saved (real-vocabulary) parameters. Also:
// padding rows that start at arbitrary values never move and never touch
// the loss (their gradient is exactly zero), and the manifest records both
// vocabularies.
//
//===----------------------------------------------------------------------===//
#include "GoldenUtil.h"

#include "llcdist/runtime/Plan.h"
#include "llcdist/runtime/Rng.h"

#include <fstream>
#include <nlohmann/json.hpp>

using namespace llcdist;
namespace rt = llcdist::rt;

namespace {
using test::expectSame;
using test::Tolerance;
using test::Trained;

const std::string kGPT2 = std::string(LLCDIST_SOURCE_DIR) + "/unittests/Integration/Inputs/tiny-gpt2-v257.json";
const std::string kLlama = std::string(LLCDIST_SOURCE_DIR) + "/unittests/Integration/Inputs/tiny-llama-v300.json";

struct Config {
  int64_t dp = 1, tp = 1, pp = 1;
  bool sequenceParallel = false, replicated = false;
  int64_t divisibleBy = 128;
  int64_t zero = 0;
  std::string name() const {
    return "dp" + std::to_string(dp) + "-tp" + std::to_string(tp) + "-pp" + std::to_string(pp) +
           (sequenceParallel ? "-sp" : "") + (replicated ? "-repl" : "") + "-div" +
           std::to_string(divisibleBy) + (zero ? "-zero" + std::to_string(zero) : "");
  }
};

TrainingPipelineOptions options(const Config &c, const std::string &optimizer) {
  TrainingPipelineOptions opt = test::goldenOptions(optimizer);
  opt.mesh.dp = c.dp;
  opt.mesh.tp = c.tp;
  opt.mesh.pp = c.pp;
  opt.sequenceParallel = c.sequenceParallel;
  opt.replicateEmbeddings = c.replicated;
  opt.vocabDivisibleBy = c.divisibleBy;
  opt.zero = c.zero;
  return opt;
}

// Micro-batch 4 of 8 / dp sequences (2 microbatches per dp rank) without a
// pipeline; 1 (8 / dp microbatches in flight) with one.
Trained train(const std::string &model, const Config &c, const std::string &optimizer) {
  int64_t mb = c.pp > 1 ? 1 : 4 / c.dp;
  return test::trainPlan(model, options(c, optimizer), mb, c.name() + "-" + optimizer);
}

void golden(const std::string &model, const std::string &optimizer) {
  const Tolerance tol = test::goldenTolerance(optimizer);
  // The reference: one device, one microbatch, the real vocabulary unpadded.
  Config none;
  none.divisibleBy = 1;
  Trained ref = test::trainPlan(model, options(none, optimizer), 8, "vocab-reference-" + optimizer);
  EXPECT_LT(ref.losses.back(), ref.losses.front()) << "the reference learns";
  std::vector<Config> configs = {
      {1, 1, 1},                    // padded on one device (to 384)
      {1, 2, 1}, {1, 4, 1}, {2, 2, 1},
      {1, 2, 1, true}, {1, 4, 1, true},   // sequence parallelism
      {1, 2, 2}, {1, 4, 2}, {1, 2, 2, true}, // with a pipeline (pp = 2)
      {1, 2, 1, false, true}, {1, 4, 1, false, true}, {1, 2, 2, false, true}, // replicated
      {2, 2, 1, false, false, 128, 1}, {2, 2, 1, false, false, 128, 3}, // ZeRO blocks of padded rows
  };
  for (const Config &c : configs)
    expectSame(ref, train(model, c, optimizer), model + " " + optimizer + " " + c.name(), tol);
}

} // namespace

TEST(VocabPadding, TinyGPT2SGD) { golden(kGPT2, "sgd"); }
TEST(VocabPadding, TinyGPT2AdamW) { golden(kGPT2, "adamw"); }
TEST(VocabPadding, TinyLlamaSGD) { golden(kLlama, "sgd"); }
TEST(VocabPadding, TinyLlamaAdamW) { golden(kLlama, "adamw"); }

// A vocabulary that is a multiple already (256 at tp = 2: 128·2) is left
// alone: no feature, no padded size, no real_vocab.
TEST(VocabPadding, MultipleIsNotPadded) {
  TrainingShape shape;
  shape.seqLen = 16;
  shape.microBatch = 4;
  shape.globalBatch = 8;
  Config c{1, 2, 1};
  std::string dir = test::compilePlan("tiny-gpt2", shape, options(c, "sgd"), "vocab-multiple");
  ASSERT_FALSE(dir.empty());
  auto plan = rt::loadPlan(dir);
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  EXPECT_FALSE(plan->manifest.hasFeature("vocab_padding"));
  EXPECT_EQ(plan->manifest.paddedVocabSize, 0);
  for (const rt::ParamDesc &p : plan->manifest.params)
    EXPECT_FALSE(p.vocabPadded) << p.name;
  std::filesystem::remove_all(dir);
}

// The manifest of a padded plan: both vocabularies, the padded tables, the
// loss's real vocabulary; the tables' rows split over tp.
TEST(VocabPadding, ManifestRecordsBothVocabularies) {
  TrainingShape shape;
  shape.seqLen = 16;
  shape.microBatch = 4;
  shape.globalBatch = 8;
  for (auto [model, vocab, tied] : {std::tuple<std::string, int64_t, bool>{kGPT2, 257, true},
                                    {kLlama, 300, false}}) {
    for (int64_t tp : {1, 2, 4}) {
      Config c{1, tp, 1};
      std::string dir = test::compilePlan(model, shape, options(c, "sgd"), "vocab-manifest");
      ASSERT_FALSE(dir.empty());
      auto plan = rt::loadPlan(dir);
      ASSERT_TRUE(plan.isOk()) << plan.status().toString();
      const rt::Manifest &m = plan->manifest;
      const int64_t padded = (vocab + 128 * tp - 1) / (128 * tp) * (128 * tp);
      EXPECT_TRUE(m.hasFeature("vocab_padding"));
      EXPECT_EQ(m.vocabSize, vocab);
      EXPECT_EQ(m.paddedVocabSize, padded) << model << " tp=" << tp;
      int64_t numPadded = 0;
      for (const rt::ParamDesc &p : m.params) {
        if (!p.vocabPadded)
          continue;
        ++numPadded;
        EXPECT_EQ(p.shape[0], padded) << p.name;
        EXPECT_EQ(p.fileShape[0], vocab) << p.name;
        if (tp > 1)
          EXPECT_TRUE(p.sharding && p.sharding->dim == 0) << p.name;
      }
      EXPECT_EQ(numPadded, tied ? 1 : 2) << model;
      int64_t losses = 0;
      for (const rt::Program &prog : plan->programs)
        for (const rt::Subroutine &s : prog.subroutines)
          for (const rt::Op &op : s.ops)
            if (op.kind == rt::schema::OpKind::kCrossEntropyFwd ||
                op.kind == rt::schema::OpKind::kCrossEntropyBwd || op.kind == rt::schema::OpKind::kClassifier) {
              EXPECT_EQ(op.intAttr("real_vocab"), vocab);
              ++losses;
            }
      EXPECT_GT(losses, 0);
      std::filesystem::remove_all(dir);
    }
  }
}

// Padding rows that hold arbitrary values (their Philox values: the test
// drops the manifest's "vocab_padded", so the runtime initializes them as real
// rows) still never reach the loss and get exactly zero gradient: after 3 SGD
// steps (momentum, no weight decay) they hold their initial bits, and every
// real parameter equals the zero-padded run's.
TEST(VocabPadding, PaddingRowsGetZeroGradient) {
  for (auto [model, tp] : {std::pair<std::string, int64_t>{kGPT2, 4}, {kLlama, 2}}) {
    TrainingShape shape;
    shape.seqLen = 16;
    shape.microBatch = 4;
    shape.globalBatch = 8;
    Config c{1, tp, 1};
    TrainingPipelineOptions opt = options(c, "sgd");
    Trained zeroPadded = test::trainPlan(model, opt, 4, "vocab-zero-padded");
    std::string dir = test::compilePlan(model, shape, opt, "vocab-philox-padded");
    ASSERT_FALSE(dir.empty());
    std::string path = dir + "/manifest.json";
    nlohmann::json j;
    {
      std::ifstream in(path);
      in >> j;
    }
    std::map<std::string, std::vector<int64_t>> padded;
    for (auto &p : j["params"])
      if (p.contains("vocab_padded")) {
        padded[p["name"].get<std::string>()] = p["shape"].get<std::vector<int64_t>>();
        p.erase("vocab_padded");
      }
    ASSERT_FALSE(padded.empty());
    std::ofstream(path) << j.dump(1);
    const int64_t vocab = j["model"]["vocab_size"].get<int64_t>();

    Trained run = test::runGoldenSteps(dir, "vocab-philox-padded");
    ASSERT_EQ(run.losses.size(), zeroPadded.losses.size());
    for (size_t i = 0; i < run.losses.size(); ++i)
      EXPECT_EQ(run.losses[i], zeroPadded.losses[i]) << model << " step " << i;
    ASSERT_FALSE(run.params.empty()) << "no parameters saved";
    for (const auto &[name, got] : run.params) {
      const std::vector<float> &want = zeroPadded.params.at(name);
      auto it = padded.find(name);
      if (it == padded.end()) {
        ASSERT_EQ(got.size(), want.size()) << name;
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << name;
        continue;
      }
      const int64_t H = it->second[1], rows = it->second[0];
      ASSERT_EQ(int64_t(got.size()), rows * H) << name;
      // Real rows: bitwise the zero-padded run's.
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), size_t(vocab * H) * 4)) << name;
      // Padding rows: their initial values, bit for bit.
      std::vector<float> init(size_t((rows - vocab) * H));
      rt::initNormal(init.data(), test::kGoldenSeed, name, vocab * H, int64_t(init.size()), 0.02f);
      EXPECT_NE(init[0], 0.0f);
      EXPECT_EQ(0, std::memcmp(got.data() + vocab * H, init.data(), init.size() * 4))
          << name << ": a padding row moved";
    }
    std::filesystem::remove_all(dir);
  }
}
