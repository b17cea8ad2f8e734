//===- ContextParallelTest.cpp - the golden rule for context parallelism --===//
//
// Issue #32: a plan whose sequence is split over cp (each rank 1/cp of every
// sample's tokens; attention by DeepSpeed-Ulysses' all-to-all, sequence to
// heads and back, or by the ring, k and v passed around the cp ranks, which
// hold load-balanced causal chunks) reproduces the single-device plan: tiny GPT-2 (learned
// positions, 4 heads) and tiny Llama (RoPE, GQA 8/4 heads) at cp 2 and 4,
// and composed with dp, with gradient accumulation, with tp (and sequence
// parallelism), with pp under 1F1B and interleaved, with ZeRO and with full
// recomputation: losses and every parameter after 3 SGD and 3 AdamW steps
// within the golden tolerance (fp32; sums run in another order), and in bf16
// within the bf16 tolerance. Meshes the model cannot take are refused with an
// error that names the fix.
//
//===----------------------------------------------------------------------===//
#include "GoldenUtil.h"

#include "mlir/IR/Diagnostics.h"

using namespace llcdist;

namespace {
using test::expectSame;
using test::Trained;

/// One context-parallel configuration of the golden runs.
struct CpCase {
  int64_t cp = 2, dp = 1, tp = 1, pp = 1, ep = 1;
  int64_t microBatch = 8; ///< of a global batch of 8 (per dp rank: 8 / dp for one microbatch)
  bool sequenceParallel = false;
  std::string schedule = "1f1b";
  int64_t virtualStages = 1;
  int64_t zero = 0;
  std::string recompute = "none";
  std::string impl = "all-to-all";

  // Chained setters: CpCase::of(2).withDp(2).withMicroBatch(4).
  static CpCase of(int64_t cp) {
    CpCase c;
    c.cp = cp;
    return c;
  }
  CpCase withDp(int64_t v) const {
    return set([&](CpCase &c) { c.dp = v; });
  }
  CpCase withEp(int64_t v) const {
    return set([&](CpCase &c) { c.ep = v; });
  }
  CpCase withTp(int64_t v) const {
    return set([&](CpCase &c) { c.tp = v; });
  }
  CpCase withPp(int64_t v) const {
    return set([&](CpCase &c) { c.pp = v; });
  }
  CpCase withMicroBatch(int64_t v) const {
    return set([&](CpCase &c) { c.microBatch = v; });
  }
  CpCase withSequenceParallel() const {
    return set([&](CpCase &c) { c.sequenceParallel = true; });
  }
  CpCase withInterleaved(int64_t v) const {
    return set([&](CpCase &c) { c.schedule = "interleaved", c.virtualStages = v; });
  }
  CpCase withZero(int64_t v) const {
    return set([&](CpCase &c) { c.zero = v; });
  }
  CpCase withRecompute(const std::string &v) const {
    return set([&](CpCase &c) { c.recompute = v; });
  }
  CpCase ring() const {
    return set([&](CpCase &c) { c.impl = "ring"; });
  }
  template <typename F> CpCase set(F f) const {
    CpCase c = *this;
    f(c);
    return c;
  }

  std::string tag() const {
    std::string t = std::string(impl == "ring" ? "ring-" : "") + "cp" + std::to_string(cp) + "-dp" +
                    std::to_string(dp) + "-tp" + std::to_string(tp) + "-pp" + std::to_string(pp) + "-mb" +
                    std::to_string(microBatch);
    if (sequenceParallel)
      t += "-sp";
    if (ep > 1)
      t += "-ep" + std::to_string(ep);
    if (pp > 1)
      t += "-" + schedule + (virtualStages > 1 ? "-v" + std::to_string(virtualStages) : "");
    if (zero)
      t += "-zero" + std::to_string(zero);
    if (recompute != "none")
      t += "-" + recompute;
    return t;
  }
};

TrainingPipelineOptions optionsFor(const CpCase &c, const std::string &optimizer) {
  TrainingPipelineOptions opt = test::goldenOptions(optimizer);
  opt.mesh.dp = c.dp;
  opt.mesh.tp = c.tp;
  opt.mesh.pp = c.pp;
  opt.mesh.cp = c.cp;
  opt.mesh.ep = c.ep;
  opt.sequenceParallel = c.sequenceParallel;
  opt.pipelineSchedule = c.schedule;
  opt.virtualStages = c.virtualStages;
  opt.zero = c.zero;
  opt.recompute = c.recompute;
  opt.cpImpl = c.impl;
  return opt;
}

Trained train(const std::string &model, const CpCase &c, const std::string &optimizer) {
  return test::trainPlan(model, optionsFor(c, optimizer), c.microBatch, model + "-" + c.tag() + "-" + optimizer);
}

void golden(const std::string &model, const std::string &optimizer, const std::vector<CpCase> &cases) {
  test::Tolerance tol = test::goldenTolerance(optimizer);
  const Trained &ref = test::singleDeviceRun(model, optimizer, 8);
  ASSERT_FALSE(ref.losses.empty());
  EXPECT_LT(ref.losses.back(), ref.losses.front()) << "the reference learns";
  for (const CpCase &c : cases)
    expectSame(ref, train(model, c, optimizer), model + " " + optimizer + " " + c.tag(), tol);
}

/// cp alone, with dp, with gradient accumulation, with pp (1F1B and
/// interleaved), with ZeRO-1 over the data-parallel group dp × cp (and over
/// cp alone) and with full recomputation.
std::vector<CpCase> commonCases() {
  std::vector<CpCase> cases;
  cases.push_back(CpCase::of(2));
  cases.push_back(CpCase::of(4));
  cases.push_back(CpCase::of(2).withDp(2).withMicroBatch(4));
  cases.push_back(CpCase::of(2).withMicroBatch(4)); // two microbatches
  cases.push_back(CpCase::of(2).withPp(2).withMicroBatch(2));
  cases.push_back(CpCase::of(2).withPp(2).withMicroBatch(2).withInterleaved(2));
  cases.push_back(CpCase::of(2).withDp(2).withMicroBatch(4).withZero(1));
  cases.push_back(CpCase::of(2).withZero(1)); // dp = 1: ZeRO shards over cp
  cases.push_back(CpCase::of(2).withRecompute("full"));
  return cases;
}

TEST(ContextParallel, TinyGPT2SGD) {
  std::vector<CpCase> cases = commonCases();
  cases.push_back(CpCase::of(2).withTp(2));
  // Learned positions under sequence parallelism too: tp's part of each cp slice ("tp+cp").
  cases.push_back(CpCase::of(2).withTp(2).withSequenceParallel());
  cases.push_back(CpCase::of(2).withDp(2).withTp(2).withMicroBatch(4).withSequenceParallel());
  golden("tiny-gpt2", "sgd", cases);
}

TEST(ContextParallel, TinyGPT2AdamW) {
  golden("tiny-gpt2", "adamw", {CpCase::of(2), CpCase::of(4), CpCase::of(2).withDp(2).withMicroBatch(4)});
}

TEST(ContextParallel, TinyLlamaSGD) {
  std::vector<CpCase> cases = commonCases();
  cases.push_back(CpCase::of(2).withTp(2));
  cases.push_back(CpCase::of(2).withTp(2).withSequenceParallel());
  cases.push_back(CpCase::of(2).withDp(2).withTp(2).withMicroBatch(4).withSequenceParallel());
  // kv heads replicated for all-to-all: 2 per tp rank over cp 4, 4 over cp 8.
  cases.push_back(CpCase::of(4).withTp(2));
  cases.push_back(CpCase::of(4).withTp(2).withSequenceParallel());
  cases.push_back(CpCase::of(8));
  golden("tiny-llama", "sgd", cases);
}

TEST(ContextParallel, TinyLlamaAdamW) {
  golden("tiny-llama", "adamw", {CpCase::of(2), CpCase::of(4), CpCase::of(2).withTp(2).withSequenceParallel()});
}

/// Ring attention (--cp-impl ring): the same compositions, ZeRO-3 for
/// ZeRO-1, and cp = 8 on 16 tokens (chunks of one token; all-to-all cannot
/// split GPT-2's 4 heads 8 ways).
std::vector<CpCase> ringCases() {
  std::vector<CpCase> cases;
  for (const CpCase &c : commonCases())
    cases.push_back((c.zero ? c.withZero(3) : c).ring());
  return cases;
}

TEST(ContextParallelRing, TinyGPT2SGD) {
  std::vector<CpCase> cases = ringCases();
  cases.push_back(CpCase::of(2).withTp(2).ring());
  // Sequence parallelism inside each load-balanced cp slice: at cp 4 each tp rank holds one chunk.
  cases.push_back(CpCase::of(2).withTp(2).withSequenceParallel().ring());
  cases.push_back(CpCase::of(4).withTp(2).withSequenceParallel().ring());
  cases.push_back(CpCase::of(8).ring());
  golden("tiny-gpt2", "sgd", cases);
}

TEST(ContextParallelRing, TinyGPT2AdamW) { golden("tiny-gpt2", "adamw", {CpCase::of(2).ring(), CpCase::of(4).ring()}); }

TEST(ContextParallelRing, TinyLlamaSGD) {
  std::vector<CpCase> cases = ringCases();
  cases.push_back(CpCase::of(2).withTp(2).withSequenceParallel().ring());
  cases.push_back(CpCase::of(4).withTp(2).ring()); // 2 kv heads per tp rank (all-to-all replicates them)
  golden("tiny-llama", "sgd", cases);
}

/// AdamW's state sharded by ZeRO over dp × cp (stages 1 and 2) and over cp
/// alone.
TEST(ContextParallelRing, TinyLlamaAdamW) {
  golden("tiny-llama", "adamw",
         {CpCase::of(2).ring(), CpCase::of(4).ring(), CpCase::of(2).withDp(2).withMicroBatch(4).withZero(1).ring(),
          CpCase::of(2).withDp(2).withMicroBatch(4).withZero(2).ring(), CpCase::of(4).withZero(1).ring()});
}

/// Qwen2 (q, k, v biases; tied; 2 kv heads): both implementations, with dp
/// and ZeRO over dp × cp, and with tp + SP.
TEST(ContextParallelRing, TinyQwen2SGD) {
  golden("tiny-qwen2", "sgd",
         {CpCase::of(2).ring(), CpCase::of(4).ring(), CpCase::of(2).withDp(2).withMicroBatch(4).withZero(1).ring(),
          CpCase::of(2).withTp(2).withSequenceParallel().ring(), CpCase::of(2)});
}

/// Mistral's window of 8 (9 keys) over 16 tokens: the ring's blocks mask by global
/// position, so the band crosses chunk borders (cp = 2: chunks of 4; cp = 4:
/// of 2); all-to-all runs the windowed attention on the whole sequence.
TEST(ContextParallelRing, TinyMistralSGD) {
  golden("tiny-mistral", "sgd",
         {CpCase::of(2).ring(), CpCase::of(4).ring(), CpCase::of(2).withDp(2).withMicroBatch(4).withZero(1).ring(),
          CpCase::of(2), CpCase::of(4)});
}

/// Phi's partial rotary at the global positions of cp's chunks; Gemma's
/// head_dim wider than hidden / heads through the ring and the all-to-all.
TEST(ContextParallelRing, TinyPhiSGD) {
  golden("tiny-phi", "sgd", {CpCase::of(2).ring(), CpCase::of(4).ring(), CpCase::of(2), CpCase::of(4)});
}
/// StarCoder2's window (8, over 16 tokens) and LayerNorms with biases, at
/// cp alone and with tp + SP (its 2 kv heads split over tp).
TEST(ContextParallelRing, TinyStarcoder2SGD) {
  golden("tiny-starcoder2", "sgd",
         {CpCase::of(2).ring(), CpCase::of(4).ring(), CpCase::of(2),
          CpCase::of(2).withTp(2).withSequenceParallel().ring(), CpCase::of(2).withTp(2).withSequenceParallel()});
}
/// StableLM's partial rotary at the global positions of cp's chunks, its
/// LayerNorms under tp + SP.
TEST(ContextParallelRing, TinyStableLmSGD) {
  golden("tiny-stablelm", "sgd",
         {CpCase::of(2).ring(), CpCase::of(2), CpCase::of(2).withTp(2).withSequenceParallel().ring()});
}
/// GPT-NeoX's grouped QKV split on cp's chunks (the ring and the all-to-all),
/// and under tp + SP (whole heads per tp rank).
TEST(ContextParallelRing, TinyGptNeoXSGD) {
  golden("tiny-gpt-neox", "sgd",
         {CpCase::of(2).ring(), CpCase::of(2), CpCase::of(2).withTp(2).withSequenceParallel().ring()});
}
/// Falcon's q, k and v grouped per kv head (2 q heads each) on cp's chunks,
/// and under tp + SP (one kv group per tp rank).
TEST(ContextParallelRing, TinyFalconSGD) {
  golden("tiny-falcon", "sgd",
         {CpCase::of(2).ring(), CpCase::of(2), CpCase::of(2).withTp(2).withSequenceParallel().ring()});
}
/// BLOOM's ALiBi by global position on the ring's load-balanced chunks (cp 2
/// and 4), and its slopes per tp rank under tp + SP.
TEST(ContextParallelRing, TinyBloomSGD) {
  golden("tiny-bloom", "sgd",
         {CpCase::of(2).ring(), CpCase::of(4).ring(), CpCase::of(2).withTp(2).withSequenceParallel().ring()});
}
/// GPTBigCode's multi_query c_attn (every q head, then one k and one v head)
/// with learned positions on cp's chunks: the ring passes its one kv head
/// around, all-to-all replicates it.
TEST(ContextParallelRing, TinyGptBigCodeSGD) {
  golden("tiny-gpt-bigcode", "sgd", {CpCase::of(2).ring(), CpCase::of(4).ring(), CpCase::of(2)});
}
/// MPT's ALiBi and its LayerNorms of a weight alone on the ring's chunks, and
/// under tp + SP (each rank's slice of the tokens sums its part of each
/// LayerNorm weight's gradient).
TEST(ContextParallelRing, TinyMptSGD) {
  golden("tiny-mpt", "sgd", {CpCase::of(2).ring(), CpCase::of(2).withTp(2).withSequenceParallel().ring()});
}
/// GPT-J's rotate_every_two at the global positions of cp's chunks (ring and
/// all-to-all).
TEST(ContextParallelRing, TinyGptJSGD) { golden("tiny-gpt-j", "sgd", {CpCase::of(2).ring(), CpCase::of(2)}); }
/// Cohere's rotary embeddings in adjacent pairs at the global positions of
/// cp's chunks, two kv heads (ring and all-to-all).
TEST(ContextParallelRing, TinyCohereSGD) { golden("tiny-cohere", "sgd", {CpCase::of(2).ring(), CpCase::of(2)}); }
/// OPT's learned positions from row 2 of their table at the global positions
/// of cp's chunks (ring, and all-to-all with tp's sequence slices).
TEST(ContextParallelRing, TinyOptSGD) {
  golden("tiny-opt", "sgd", {CpCase::of(2).ring(), CpCase::of(2).withTp(2).withSequenceParallel()});
}
/// GPT-Neo's local layers (the last 4 keys) and global ones alternating, at
/// the global positions of cp's chunks: the window crosses the chunks' and
/// the load-balanced layout's boundaries (ring, and all-to-all with tp's
/// sequence slices).
TEST(ContextParallelRing, TinyGptNeoSGD) {
  golden("tiny-gpt-neo", "sgd", {CpCase::of(2).ring(), CpCase::of(2).withTp(2).withSequenceParallel()});
}
/// BioGPT's scaled token embeddings and its positions from row 2 (not fused:
/// the scale) at the global positions of cp's chunks (ring, and all-to-all
/// with tp's sequence slices).
/// CodeGen's q | v | k blocks split over tp with rotate_every_two at the
/// global positions of cp's chunks (ring, and all-to-all with tp's sequence
/// slices).
TEST(ContextParallelRing, TinyCodeGenSGD) {
  golden("tiny-codegen", "sgd", {CpCase::of(2).ring(), CpCase::of(2).withTp(2).withSequenceParallel()});
}
TEST(ContextParallelRing, TinyBioGptSGD) {
  golden("tiny-biogpt", "sgd", {CpCase::of(2).ring(), CpCase::of(2).withTp(2).withSequenceParallel()});
}
/// One kv head: all-to-all replicates it over cp (2 and 4 copies), ring passes
/// it around.
TEST(ContextParallelRing, TinyGemmaSGD) {
  golden("tiny-gemma", "sgd", {CpCase::of(2).ring(), CpCase::of(4).ring(), CpCase::of(2), CpCase::of(4)});
}
/// The mixtures of experts: each cp rank routes its own slice of the tokens
/// (the ring's load-balanced chunks, all-to-all's contiguous ones), its
/// permuted rows and group sizes its own; with dp and tp under SP.
TEST(ContextParallelRing, TinyMixtralSGD) {
  golden("tiny-mixtral", "sgd",
         {CpCase::of(2).ring(), CpCase::of(4).ring(), CpCase::of(2), CpCase::of(2).withDp(2).withMicroBatch(4)});
}
TEST(ContextParallelRing, TinyQwen2MoeAdamW) {
  golden("tiny-qwen2-moe", "adamw", {CpCase::of(2).ring(), CpCase::of(2).withTp(2).withSequenceParallel()});
}
/// Expert parallelism with context parallelism: each cp rank routes its own
/// slice of the tokens and dispatches it over its ep group (ranks drawn from
/// dp with its cp coordinate), so an expert's gradient sums over the ranks
/// that hold it, dp/ep of them times cp ("edp+cp"; "cp" where ep = dp); under
/// ZeRO its blocks are over that group too. Ring and all-to-all, with dp
/// replicas of the experts (dp = 4, ep = 2), ZeRO-1 and ZeRO-3, tp under SP.
TEST(ContextParallelRing, ExpertParallel) {
  golden("tiny-mixtral", "sgd",
         {CpCase::of(2).withDp(2).withEp(2).withMicroBatch(4).ring(),
          CpCase::of(2).withDp(2).withEp(2).withMicroBatch(4),
          CpCase::of(2).withDp(4).withEp(2).withMicroBatch(2).ring(),
          CpCase::of(2).withDp(4).withEp(2).withMicroBatch(2).withZero(1)});
  golden("tiny-qwen2-moe", "adamw",
         {CpCase::of(2).withDp(2).withEp(2).withMicroBatch(4).withZero(3).ring(),
          CpCase::of(2).withDp(2).withEp(2).withTp(2).withSequenceParallel().withMicroBatch(4)});
}

/// bf16 (mixed precision): cp reorders the weight-gradient sums (each rank's
/// tokens, then the sum over cp, with a bf16 rounding per partial sum) and the
/// all-to-alls move bf16 activations unchanged, so the single-device bf16 run
/// is reproduced within Bf16ReduceTest's tolerance (losses within 2e-4
/// relative, every f32 master within 5e-4 absolute; measured: losses within
/// 4e-5). A missing or doubled gradient moves parameters by about 1e-2.
void goldenBf16(const std::string &model, const std::vector<CpCase> &cases) {
  TrainingPipelineOptions single = test::goldenOptions("sgd");
  const Trained ref = test::trainPlan(model, single, 8, model + "-bf16-single", "bf16");
  ASSERT_FALSE(ref.losses.empty());
  for (const CpCase &c : cases) {
    const Trained got = test::trainPlan(model, optionsFor(c, "sgd"), c.microBatch, model + "-bf16-" + c.tag(), "bf16");
    const test::Deviation d = test::deviation(ref, got);
    std::printf("%s bf16 %s: losses within %.3g relative, parameters within %.3g\n", model.c_str(), c.tag().c_str(),
                d.lossRel, d.paramAbs);
    EXPECT_LE(d.lossRel, 2e-4) << model << " bf16 " << c.tag();
    EXPECT_LE(d.paramAbs, 5e-4) << model << " bf16 " << c.tag();
  }
}

TEST(ContextParallel, Bf16TinyGPT2) { goldenBf16("tiny-gpt2", {CpCase::of(2), CpCase::of(4)}); }
TEST(ContextParallel, Bf16TinyLlama) {
  goldenBf16("tiny-llama", {CpCase::of(2), CpCase::of(2).withDp(2).withMicroBatch(4)});
}
TEST(ContextParallelRing, Bf16) {
  goldenBf16("tiny-gpt2",
             {CpCase::of(2).ring(), CpCase::of(4).ring(), CpCase::of(2).withTp(2).withSequenceParallel().ring()});
  goldenBf16("tiny-llama", {CpCase::of(2).ring()});
}

/// Compiles `model` for `c` and returns the diagnostics it failed with
/// ("" when it compiled).
std::string compileError(const std::string &model, const CpCase &c) {
  mlir::MLIRContext &ctx = test::sharedContext();
  std::string messages;
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &d) {
    messages += d.str() + "\n";
    return mlir::success();
  });
  TrainingShape shape;
  shape.seqLen = 16;
  shape.microBatch = c.microBatch;
  shape.globalBatch = 8;
  auto module = test::compileModule(ctx, model, shape, optionsFor(c, "sgd"));
  return module ? std::string() : messages.empty() ? std::string("(failed without a message)") : messages;
}

TEST(ContextParallel, MeshesTheModelCannotTakeAreRefused) {
  // 16 tokens do not split into 3.
  EXPECT_NE(compileError("tiny-gpt2", CpCase::of(3)).find("cp=3 does not divide the sequence of 16 tokens"),
            std::string::npos);
  // 4 heads do not split into 8 head groups.
  std::string heads = compileError("tiny-gpt2", CpCase::of(8));
  EXPECT_NE(heads.find("cp=8 (all-to-all) gives each cp rank 1/cp of the attention's heads: it must divide "
                       "num_heads=4"),
            std::string::npos)
      << heads;
  // tp 2 leaves 4 heads and 2 kv heads per rank: cp 8 cannot split the heads.
  std::string kv = compileError("tiny-llama", CpCase::of(8).withTp(2));
  EXPECT_NE(kv.find("num_heads=4 and either divide num_kv_heads=2 or be a multiple of it"), std::string::npos) << kv;
  // The ring's load-balanced chunks: 2·cp must divide the sequence.
  std::string lb = compileError("tiny-llama", CpCase::of(16).ring());
  EXPECT_NE(lb.find("cp=16 (ring) cuts the sequence of 16 tokens into 2*cp=32 load-balanced chunks"), std::string::npos)
      << lb;
  // And what compiles does not complain (cp 4 over 2 kv heads per tp rank:
  // each replicated twice).
  EXPECT_EQ(compileError("tiny-llama", CpCase::of(2).withTp(2).withSequenceParallel()), "");
  EXPECT_EQ(compileError("tiny-gpt2", CpCase::of(2).withTp(2).withSequenceParallel()), "");
  EXPECT_EQ(compileError("tiny-llama", CpCase::of(4).withTp(2)), "");
}
} // namespace
