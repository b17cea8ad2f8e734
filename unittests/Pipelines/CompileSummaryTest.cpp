//===- CompileSummaryTest.cpp - the report of `llc-dist compile` ----------===//
//
// The summary is made of the analyses' objects: its JSON must carry their
// numbers unchanged, in the order consumers (and the lit tests) read, and
// the counts recorded before the lowering must be those of the forward graph.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Pipelines/CompileSummary.h"
#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "../CompileForTest.h"

#include <gtest/gtest.h>

#include <map>

using namespace llcdist;
using namespace llcdist::testing;

namespace {
/// The summary llc-dist compile builds for `c`, compiled with `mesh`.
CompileSummary summaryOf(const Compiled &c, const MeshSpec &mesh) {
  CompileSummary s;
  s.model = modelName(*c.module);
  s.mesh = mesh;
  s.shape = c.shape;
  s.output = "OUT";
  s.compileMs = 1.25;
  auto stats = recordedModelStats(*c.module);
  EXPECT_TRUE(mlir::succeeded(stats));
  s.stats = *stats;
  s.vocabPadding = vocabPaddingOf(*c.module);
  s.configVocab = c.config.vocab;
  s.memory = plan::MemoryReport{plan::computeStageMemory(*c.module), "none", std::nullopt};
  auto pipeline = plan::computePipelineReport(*c.module);
  EXPECT_TRUE(mlir::succeeded(pipeline));
  s.pipeline = *pipeline;
  auto comm = plan::computeCommReport(*c.module);
  EXPECT_TRUE(mlir::succeeded(comm));
  s.comm = *comm;
  return s;
}
} // namespace

// After the lowering the counts come from xf.stats: they must be those of
// the forward graph counted on a fresh import.
TEST(CompileSummary, RecordedStatsAreTheForwardGraphs) {
  Compiled c = compileForTest("tiny-gpt2", meshOptions(2), shapeForTest(16));
  ASSERT_TRUE(c.module);
  auto recorded = recordedModelStats(*c.module);
  ASSERT_TRUE(mlir::succeeded(recorded));
  auto fresh = importModel(*c.ctx, c.config, c.shape, 2);
  auto counted = xf::computeModelStats(*fresh);
  ASSERT_TRUE(mlir::succeeded(counted));
  EXPECT_EQ(recorded->parameters, counted->parameters);
  EXPECT_EQ(recorded->parameters, c.config.numParameters());
  EXPECT_EQ(recorded->layers, c.config.layers);
  EXPECT_DOUBLE_EQ(recorded->trainingFlopsPerToken(), counted->trainingFlopsPerToken());
  EXPECT_EQ(recorded->seqLen, 16);
  EXPECT_EQ(modelName(*c.module), "tiny-gpt2");
}

// --make-vocab-size-divisible-by 100: 256 rows padded to 300.
TEST(CompileSummary, VocabPadding) {
  TrainingPipelineOptions o = meshOptions(1);
  o.vocabDivisibleBy = 100;
  Compiled c = compileForTest("tiny-gpt2", o, shapeForTest(16));
  ASSERT_TRUE(c.module);
  std::optional<VocabPadding> pad = vocabPaddingOf(*c.module);
  ASSERT_TRUE(pad);
  EXPECT_EQ(pad->vocab, c.config.vocab);
  EXPECT_EQ(pad->padded, (c.config.vocab + 99) / 100 * 100);
  EXPECT_EQ(pad->multiple, 100);
  Compiled unpadded = compileForTest("tiny-gpt2", meshOptions(1), shapeForTest(16));
  EXPECT_FALSE(vocabPaddingOf(*unpadded.module)); // 256 is a multiple of 128
}

TEST(CompileSummary, JsonCarriesTheReportsInOrder) {
  MeshSpec mesh{2, 1, 2};
  TrainingPipelineOptions o = meshOptions(2, 1, 2);
  Compiled c = compileForTest("tiny-llama", o, shapeForTest(16, 1, 4));
  ASSERT_TRUE(c.module);
  CompileSummary s = summaryOf(c, mesh);
  nlohmann::ordered_json j = s.toJson();
  std::vector<std::string> keys;
  for (auto &[k, v] : j.items())
    keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{
                      "model", "mesh", "world_size", "seq_len", "micro_batch", "global_batch",
                      "microbatches", "dtype", "emit", "output", "compile_ms", "stats", "vocab",
                      "collectives", "pipeline", "memory_per_rank", "recompute"}));
  EXPECT_EQ(j["world_size"], 4);
  EXPECT_EQ(j["microbatches"], 2);
  EXPECT_EQ(j["stats"]["parameters"].get<int64_t>(), c.config.numParameters());
  EXPECT_EQ(j["vocab"]["padded_vocab_size"].get<int64_t>(), c.config.vocab);
  ASSERT_EQ(j["collectives"].size(), s.comm->entries.size());
  for (size_t i = 0; i < s.comm->entries.size(); ++i)
    EXPECT_EQ(j["collectives"][i]["calls_per_step"].get<int64_t>(),
              s.comm->entries[i].callsPerStep);
  EXPECT_EQ(j["pipeline"]["stages"], 2);
  EXPECT_EQ(j["pipeline"]["per_stage"].size(), 2u);
  ASSERT_EQ(j["memory_per_rank"].size(), 2u);
  EXPECT_EQ(j["memory_per_rank"][1]["arena"].get<int64_t>(), s.memory->stages[1].arena);

  // An xf compilation has none of the plan's reports.
  CompileSummary xf;
  xf.model = "m";
  xf.emit = "xf";
  xf.output = "-";
  nlohmann::ordered_json jx = xf.toJson();
  EXPECT_FALSE(jx.contains("vocab"));
  EXPECT_FALSE(jx.contains("memory_per_rank"));
  EXPECT_FALSE(jx.contains("seq_len"));
}

TEST(CompileSummary, Text) {
  MeshSpec mesh{2, 1, 2};
  Compiled c = compileForTest("tiny-llama", meshOptions(2, 1, 2), shapeForTest(16, 1, 4));
  ASSERT_TRUE(c.module);
  CompileSummary s = summaryOf(c, mesh);
  std::string text;
  llvm::raw_string_ostream os(text);
  s.print(os);
  EXPECT_EQ(text.rfind("llc-dist: compiled tiny-llama for mesh dp=2,tp=1,pp=2 (4 ranks) in "
                       "1.2 ms\n",
                       0),
            0u)
      << text;
  // The sections in order: memory, pipeline, collectives, then what was written.
  size_t memory = text.find("  memory per rank (MiB)"), pipeline = text.find("  pipeline: 2 stages"),
         comm = text.find("  collectives per step"), wrote = text.find("  wrote OUT/\n");
  ASSERT_NE(memory, std::string::npos) << text;
  EXPECT_LT(memory, pipeline);
  EXPECT_LT(pipeline, comm);
  EXPECT_LT(comm, wrote);
  EXPECT_NE(text.find("Chrome trace (Perfetto): OUT/schedule.trace.json"), std::string::npos);
}

// --grad-bucket-size: the buckets llcdist-plan-grad-buckets recorded, in the
// summary. They hold every gradient once (the model's parameter count on
// dp=2 without tp), each but the last has at least the bucket size.
TEST(CompileSummary, GradBuckets) {
  TrainingPipelineOptions o = meshOptions(2);
  o.gradBucketSize = 50'000;
  o.verifyPlan = false; // the runtime's loader of this tree may not know "async" yet
  Compiled c = compileForTest("tiny-gpt2", o, shapeForTest(16, 1, 4));
  ASSERT_TRUE(c.module);
  CompileSummary s = summaryOf(c, MeshSpec{2, 1, 1});
  s.gradBuckets = gradBucketsOf(*c.module);
  s.gradBucketSize = o.gradBucketSize;
  ASSERT_GE(s.gradBuckets.size(), 2u);
  int64_t elements = 0, grads = 0;
  for (auto [i, b] : llvm::enumerate(s.gradBuckets)) {
    EXPECT_EQ(b.collective, "all_reduce");
    EXPECT_EQ(b.bytes, 4 * b.elements); // f32 gradients
    if (i + 1 < s.gradBuckets.size())
      EXPECT_GE(b.elements, o.gradBucketSize);
    elements += b.elements;
    grads += b.grads;
  }
  EXPECT_EQ(elements, c.config.numParameters());
  EXPECT_EQ(grads, 52); // tiny-gpt2's parameter tensors (the tied LM head is wte)
  nlohmann::ordered_json j = s.toJson();
  EXPECT_EQ(j["grad_buckets"]["bucket_size"], 50'000);
  EXPECT_EQ(j["grad_buckets"]["buckets"].size(), s.gradBuckets.size());
  EXPECT_EQ(j["grad_buckets"]["buckets"][0]["params"], s.gradBuckets[0].elements);
  std::string text;
  llvm::raw_string_ostream os(text);
  s.print(os);
  EXPECT_NE(text.find("overlap (--grad-bucket-size 50,000): " +
                      std::to_string(s.gradBuckets.size()) +
                      " gradient buckets reduced over dp (all_reduce)"),
            std::string::npos)
      << text;
}

// FSDP prefetch: every ZeRO-3 gather of the synchronous plan is started ahead
// once, and the gathered bytes are those of the whole parameters each
// subroutine gathers (counted here on the synchronous plan's all_gathers).
TEST(CompileSummary, FsdpPrefetch) {
  TrainingPipelineOptions o = meshOptions(2);
  o.zero = 3;
  Compiled sync = compileForTest("tiny-gpt2", o, shapeForTest(16, 1, 4));
  ASSERT_TRUE(sync.module);
  std::map<std::string, std::pair<int64_t, int64_t>> gathered; // subroutine → (gathers, bytes)
  sync.module->walk([&](plan::KernelOp k) {
    if (k.getKernel() != "all_gather")
      return;
    auto sub = k->getParentOfType<plan::SubroutineOp>();
    auto y = k.getArgs().getAs<mlir::FlatSymbolRefAttr>("y");
    auto program = k->getParentOfType<plan::ProgramOp>();
    auto buf = program.lookupSymbol<plan::BufferOp>(y.getAttr());
    gathered[sub.getSymName().str()].first += 1;
    gathered[sub.getSymName().str()].second += buf.getNumBytes();
  });
  o.fsdpPrefetch = 1;
  Compiled c = compileForTest("tiny-gpt2", o, shapeForTest(16, 1, 4));
  ASSERT_TRUE(c.module);
  CompileSummary s = summaryOf(c, MeshSpec{2, 1, 1});
  s.fsdpPrefetch = fsdpPrefetchOf(*c.module);
  s.fsdpPrefetchUnits = 1;
  ASSERT_EQ(s.fsdpPrefetch.size(), 2u);
  for (const FsdpPrefetch &f : s.fsdpPrefetch) {
    EXPECT_EQ(f.gathers, gathered[f.subroutine].first) << f.subroutine;
    EXPECT_EQ(f.bytes, gathered[f.subroutine].second) << f.subroutine;
    EXPECT_LT(f.prefetched, f.gathers) << f.subroutine; // unit 0 is not ahead
    EXPECT_GT(f.prefetched, 0) << f.subroutine;
  }
  // The forward: the embeddings, 4 layers, the final norm.
  EXPECT_EQ(s.fsdpPrefetch[0].subroutine, "forward");
  EXPECT_EQ(s.fsdpPrefetch[0].units, 6);
  nlohmann::ordered_json j = s.toJson();
  EXPECT_EQ(j["fsdp_prefetch"]["units_ahead"], 1);
  EXPECT_EQ(j["fsdp_prefetch"]["subroutines"][0]["gathers"], s.fsdpPrefetch[0].gathers);
  std::string text;
  llvm::raw_string_ostream os(text);
  s.print(os);
  EXPECT_NE(text.find("overlap (--fsdp-prefetch 1): ZeRO-3 parameter all-gathers on queue comm"),
            std::string::npos)
      << text;
}

// --tp-comm-overlap: the summary counts every sequence-parallel collective
// the pass started (each tp all_gather / reduce_scatter of the plan, counted
// here on the IR) and the kernels their windows hold, in text and JSON.
TEST(CompileSummary, TpCommOverlap) {
  TrainingPipelineOptions o = meshOptions(2, 2);
  o.sequenceParallel = true;
  o.tpCommOverlap = true;
  Compiled c = compileForTest("tiny-gpt2", o, shapeForTest(16, 1, 4));
  ASSERT_TRUE(c.module);
  std::map<std::string, int64_t> started;
  c.module->walk([&](plan::KernelOp k) {
    auto axis = k.getParams().getAs<mlir::StringAttr>("axis");
    if ((k.getKernel() == "all_gather" || k.getKernel() == "reduce_scatter") && axis &&
        axis.getValue() == "tp") {
      EXPECT_TRUE(k->hasAttr(plan::kTokenAttr)) << k.getKernel().str();
      ++started[k.getKernel().str()];
    }
  });
  CompileSummary s = summaryOf(c, MeshSpec{2, 2, 1});
  s.tpCommOverlap = tpCommOverlapOf(*c.module);
  ASSERT_EQ(s.tpCommOverlap.size(), 2u);
  for (const TpCommOverlap &t : s.tpCommOverlap) {
    EXPECT_EQ(t.started, started[t.collective]) << t.collective;
    EXPECT_GT(t.overlapped, 0) << t.collective;
    EXPECT_LE(t.overlapped, t.started) << t.collective;
    EXPECT_GE(t.kernels, t.overlapped) << t.collective;
    EXPECT_GT(t.gemms, 0) << t.collective;
    EXPECT_LE(t.gemms, t.kernels) << t.collective;
  }
  nlohmann::ordered_json j = s.toJson();
  EXPECT_EQ(j["tp_comm_overlap"]["all_gather"]["started"], started["all_gather"]);
  EXPECT_EQ(j["tp_comm_overlap"]["reduce_scatter"]["kernels"], s.tpCommOverlap[1].kernels);
  std::string text;
  llvm::raw_string_ostream os(text);
  s.print(os);
  EXPECT_NE(text.find("    reduce_scatter: " + std::to_string(started["reduce_scatter"]) +
                      " started, " + std::to_string(s.tpCommOverlap[1].overlapped) +
                      " overlapping"),
            std::string::npos)
      << text;
}

// Megatron-LM's default bucket: max(40M, 1M × dp) parameters.
TEST(CompileSummary, DefaultGradBucketSize) {
  EXPECT_EQ(defaultGradBucketSize(1), 40'000'000);
  EXPECT_EQ(defaultGradBucketSize(40), 40'000'000);
  EXPECT_EQ(defaultGradBucketSize(64), 64'000'000);
}
