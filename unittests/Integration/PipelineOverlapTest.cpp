//===- PipelineOverlapTest.cpp - every overlap pass on pipelines ----------===//
//
// Issue #12's golden matrix on dp×pp and dp×tp×pp: the gradient buckets
// (llcdist-plan-grad-buckets: one clone per chunk's last backward, or per
// ZB-H1 weight-gradient part), ZeRO-1/2's parameter gathers overlapped with
// the next step (llcdist-plan-overlap-param-gather: a clone per chunk's
// first forward), FSDP prefetch, pipeline send/recv overlap and the
// sequence-parallel overlap, alone and together, with every schedule. Each
// plan reproduces the single-device run in the runtime's checking mode
// (RunOptions::checkAsync: a started op completes only at its wait, its
// buffers NaN-poisoned meanwhile), and every pass a configuration asks for
// really made its program asynchronous (its report attribute is there), so
// a pass that silently backs off fails here rather than passing trivially.
//
//===----------------------------------------------------------------------===//
#include "GoldenUtil.h"
#include "MeasureUtil.h"

#include "llcdist/Dialect/Plan/Analysis/CollectiveOrigin.h"
#include "llcdist/Dialect/Plan/IR/PlanDialect.h"

#include <map>

using namespace llcdist;

namespace {
struct PipelineOverlap {
  int64_t dp = 2, tp = 1, pp = 2;
  std::string schedule = "1f1b";
  int64_t virtualStages = 1;
  int64_t zero = 0;
  int64_t gradBucketSize = 0;
  bool overlapParamGather = false;
  int64_t fsdpPrefetch = 0;
  bool overlapP2P = false;
  bool spOverlap = false; // --sequence-parallel --tp-comm-overlap

  std::string name() const {
    std::string n = "dp" + std::to_string(dp) + "-tp" + std::to_string(tp) + "-pp" +
                    std::to_string(pp) + "-" + schedule +
                    (virtualStages > 1 ? "-v" + std::to_string(virtualStages) : "");
    if (zero)
      n += "-zero" + std::to_string(zero);
    if (gradBucketSize)
      n += "-buckets" + std::to_string(gradBucketSize);
    if (overlapParamGather)
      n += "-opg";
    if (fsdpPrefetch)
      n += "-prefetch" + std::to_string(fsdpPrefetch);
    if (overlapP2P)
      n += "-p2p";
    if (spOverlap)
      n += "-sp";
    return n;
  }

  TrainingPipelineOptions options(const std::string &optimizer) const {
    TrainingPipelineOptions opt = test::goldenOptions(optimizer);
    opt.mesh.dp = dp;
    opt.mesh.tp = tp;
    opt.mesh.pp = pp;
    opt.pipelineSchedule = schedule;
    opt.virtualStages = virtualStages;
    opt.zero = zero;
    opt.gradBucketSize = gradBucketSize;
    opt.overlapParamGather = overlapParamGather;
    opt.fsdpPrefetch = fsdpPrefetch;
    opt.overlapP2P = overlapP2P;
    opt.sequenceParallel = spOverlap;
    opt.tpCommOverlap = spOverlap;
    return opt;
  }
};

/// One sequence per microbatch: 8 / dp microbatches flow through the pipe,
/// so every chunk's backward runs several times before its last (the clone
/// the buckets start in) and its forward after its first.
TrainingShape shape(const std::string &dtype = "f32") {
  TrainingShape s;
  s.dtype = dtype;
  s.seqLen = 16;
  s.microBatch = 1;
  s.globalBatch = 8;
  return s;
}

/// `c`'s plan, each requested pass checked to have acted on every program
/// (the parameter-gather overlap: on every program of tiny-llama, whose
/// stages share no tied parameter).
mlir::OwningOpRef<mlir::ModuleOp> compile(const std::string &model, const PipelineOverlap &c,
                                          const std::string &optimizer,
                                          const std::string &dtype = "f32") {
  auto m = test::compileModule(test::sharedContext(), model, shape(dtype), c.options(optimizer));
  EXPECT_TRUE(m) << c.name() << ": compilation failed";
  if (!m)
    return m;
  int64_t programs = 0;
  for (auto program : m->getOps<plan::ProgramOp>()) {
    ++programs;
    std::string what = c.name() + " " + program.getSymName().str();
    if (c.gradBucketSize)
      EXPECT_TRUE(program->hasAttr(plan::kGradBucketsAttr)) << what << ": no buckets";
    if (c.overlapParamGather)
      EXPECT_TRUE(program->hasAttr(plan::kParamGatherOverlapAttr))
          << what << ": no parameter gather overlapped";
    if (c.fsdpPrefetch)
      EXPECT_TRUE(program->hasAttr(plan::kFsdpPrefetchAttr)) << what << ": nothing prefetched";
    if (c.overlapP2P)
      EXPECT_TRUE(program->hasAttr(plan::kP2POverlapAttr)) << what << ": no p2p overlap";
    if (c.spOverlap)
      EXPECT_TRUE(program->hasAttr(plan::kTpCommOverlapAttr)) << what << ": no SP overlap";
  }
  EXPECT_EQ(programs, c.pp) << c.name();
  return m;
}

test::Trained train(const std::string &model, const PipelineOverlap &c,
                    const std::string &optimizer) {
  auto m = compile(model, c, optimizer);
  if (!m)
    return {};
  return test::trainInCheckingMode(*m, "pipeline-overlap-" + model + "-" + c.name() + "-" +
                                           optimizer);
}

std::vector<PipelineOverlap> cases() {
  std::vector<PipelineOverlap> v;
  struct Schedule {
    const char *name;
    int64_t virtualStages;
  };
  for (Schedule s : {Schedule{"gpipe", 1}, {"1f1b", 1}, {"zb-h1", 1}, {"interleaved", 2}}) {
    auto with = [&](PipelineOverlap c) {
      c.schedule = s.name;
      c.virtualStages = s.virtualStages;
      v.push_back(c);
    };
    PipelineOverlap buckets;
    buckets.gradBucketSize = 20000;
    with(buckets); // alone
    PipelineOverlap p2p = buckets;
    p2p.overlapP2P = true;
    with(p2p); // with the pipeline's transfers
    PipelineOverlap zero1 = buckets;
    zero1.zero = 1;
    zero1.overlapParamGather = true;
    zero1.overlapP2P = true;
    with(zero1); // ZeRO-1: scatters in buckets, gathers into the next step
    PipelineOverlap zero2 = buckets;
    zero2.zero = 2;
    zero2.overlapParamGather = true;
    with(zero2);
    PipelineOverlap zero3 = buckets;
    zero3.zero = 3;
    zero3.fsdpPrefetch = 1;
    with(zero3); // FSDP: prefetch and the per-microbatch scatters in buckets
    PipelineOverlap all = p2p;
    all.tp = 2;
    all.spOverlap = true;
    with(all); // every pass of a dp×tp×pp step with SP
  }
  // Alone on a pipeline: the parameter-gather overlap, FSDP prefetch.
  PipelineOverlap opg;
  opg.zero = 1;
  opg.overlapParamGather = true;
  v.push_back(opg);
  PipelineOverlap prefetch;
  prefetch.zero = 3;
  prefetch.fsdpPrefetch = 1;
  v.push_back(prefetch);
  return v;
}

const test::Trained &singleDevice(const std::string &model, const std::string &optimizer) {
  return test::singleDeviceRun(model, optimizer, 8);
}

void golden(const std::string &model, const std::string &optimizer) {
  const test::Trained &ref = singleDevice(model, optimizer);
  ASSERT_EQ(ref.losses.size(), 3u) << model << " " << optimizer;
  for (const PipelineOverlap &c : cases()) {
    std::string what = model + " " + optimizer + " " + c.name() + " (checking mode)";
    SCOPED_TRACE(what);
    test::expectSame(ref, train(model, c, optimizer), what, test::goldenTolerance(optimizer));
  }
}
} // namespace

TEST(PipelineOverlapTest, GoldenLlamaSgd) { golden("tiny-llama", "sgd"); }
TEST(PipelineOverlapTest, GoldenLlamaAdamW) { golden("tiny-llama", "adamw"); }

// tiny-gpt2 ties its embedding to the head, on the first and the last stage:
// the home stage adds the other's gradient in the optimizer before reducing
// it, so that gradient stays in the synchronous all_reduce while the others
// go in buckets (and the parameter-gather overlap keeps off these programs).
TEST(PipelineOverlapTest, GoldenGpt2TiedEmbeddingStaysSynchronous) {
  const std::string model = "tiny-gpt2";
  const test::Trained &ref = singleDevice(model, "sgd");
  ASSERT_EQ(ref.losses.size(), 3u);
  for (const char *schedule : {"1f1b", "zb-h1"}) {
    PipelineOverlap c;
    c.schedule = schedule;
    c.gradBucketSize = 20000;
    c.overlapP2P = true;
    auto m = compile(model, c, "sgd");
    ASSERT_TRUE(m) << c.name();
    // The home stage's optimizer still all-reduces the tied gradient, and
    // only it, synchronously.
    int64_t synchronous = 0;
    m->walk([&](plan::KernelOp k) {
      auto origin = k->getAttrOfType<mlir::StringAttr>(plan::kOriginAttr);
      if (k.getKernel() == "all_reduce" && origin && origin.getValue() == "dp_gradients" &&
          !k->hasAttr(plan::kTokenAttr)) {
        ++synchronous;
        auto x = k.getArgs().getAs<mlir::ArrayAttr>("x");
        EXPECT_EQ(x.size(), 1u) << c.name();
      }
    });
    EXPECT_EQ(synchronous, 1) << c.name();
    test::expectSame(ref, train(model, c, "sgd"), model + " " + c.name(),
                     test::goldenTolerance("sgd"));
  }
}

// The buckets' gradients and the overlapped gathers are persistent and the
// transfers' buffers live until their waits: measured = planned peak.
TEST(PipelineOverlapTest, MeasuredPeakEqualsPlanned) {
  for (const PipelineOverlap &c : cases()) {
    if (c.schedule != "interleaved" && c.schedule != "zb-h1")
      continue;
    auto m = compile("tiny-llama", c, "adamw");
    ASSERT_TRUE(m) << c.name();
    auto planned = test::plannedMemory(*m);
    auto run = test::writeAndRunOneStep(*m, "llcdist-pipeline-overlap-peak", c.name());
    ASSERT_TRUE(run) << c.name();
    ASSERT_NO_FATAL_FAILURE(
        test::expectMeasuredPeakEqualsPlanned(*run, planned, c.name(), /*arenaSlack=*/64));
  }
}

// Mixed precision: the parameter-gather overlap moves step_begin's gathers
// of the cast master blocks (bf16, reduced in bf16) onto the comm queue and
// nothing else, so the overlapped run is the synchronous one bit for bit, on
// dp and on a pipeline (checking mode).
TEST(PipelineOverlapTest, Bf16ParamGatherOverlapIsTheSynchronousRunBitForBit) {
  for (int64_t pp : {1, 2})
    for (int64_t zero : {1, 2}) {
      PipelineOverlap c;
      c.pp = pp;
      c.zero = zero;
      std::string tag = "pipeline-overlap-bf16-pp" + std::to_string(pp) + "-zero" +
                        std::to_string(zero);
      test::Trained sync =
          test::trainPlan("tiny-llama", c.options("adamw"), 1, tag + "-sync", "bf16");
      c.overlapParamGather = true;
      auto m = compile("tiny-llama", c, "adamw", "bf16"); // the pass acts on every program
      ASSERT_TRUE(m) << tag;
      test::Trained async = test::trainPlan("tiny-llama", c.options("adamw"), 1, tag + "-async",
                                            "bf16", /*checkAsync=*/true);
      ASSERT_EQ(sync.losses.size(), 3u) << tag;
      EXPECT_EQ(sync.losses, async.losses) << tag;
      EXPECT_EQ(sync.params, async.params) << tag;
    }
}
