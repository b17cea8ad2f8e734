//===- OverlapTest.cpp - the overlap passes keep the golden rule ----------===//
//
// Issue #12: a plan made asynchronous by an overlap pass reproduces the
// single-device run in the runtime's checking mode (RunOptions::checkAsync:
// a started op runs only at its wait, its outputs NaN-poisoned until then,
// so a read before the wait or an overwrite in flight changes the numbers),
// and its measured memory is the planned one.
//
// Sequence-parallel overlap (llcdist-plan-sp-overlap: dp=2×tp=2 and tp=4, alone
// and with grad buckets) and pipeline send/recv overlap
// (llcdist-plan-p2p-overlap: every schedule on pp=2, pp=4, dp=2×tp=2×pp=2,
// also with SP overlap) in the same checking mode; a wait moved by hand past
// the kernel that needs it is caught.
//
//===----------------------------------------------------------------------===//
#include "GoldenUtil.h"
#include "MeasureUtil.h"

#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/runtime/Plan.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>

using namespace llcdist;
namespace rt = llcdist::rt;

//===----------------------------------------------------------------------===//
// ZeRO overlap: FSDP prefetch (llcdist-plan-fsdp-prefetch), the ZeRO-1/2
// parameter gather overlapped with the next step (llcdist-plan-overlap-param-gather),
// ZeRO-2's gradient buckets (llcdist-plan-grad-buckets)
//===----------------------------------------------------------------------===//

namespace {
struct ZeroOverlap {
  int64_t dp = 2, tp = 1, zero = 3;
  int64_t fsdpPrefetch = 0;
  bool overlapParamGather = false;
  int64_t gradBucketSize = 0;
  std::string name() const {
    std::string n = "dp" + std::to_string(dp) + "-tp" + std::to_string(tp) + "-zero" +
                    std::to_string(zero);
    if (fsdpPrefetch)
      n += "-prefetch" + std::to_string(fsdpPrefetch);
    if (overlapParamGather)
      n += "-overlap-param-gather";
    if (gradBucketSize)
      n += "-buckets" + std::to_string(gradBucketSize);
    return n;
  }
  TrainingPipelineOptions options(const std::string &optimizer) const {
    TrainingPipelineOptions opt = test::goldenOptions(optimizer);
    opt.mesh.dp = dp;
    opt.mesh.tp = tp;
    opt.zero = zero;
    opt.fsdpPrefetch = fsdpPrefetch;
    opt.overlapParamGather = overlapParamGather;
    opt.gradBucketSize = gradBucketSize;
    return opt;
  }
};

TrainingShape goldenShape() {
  TrainingShape shape;
  shape.seqLen = 16;
  shape.microBatch = 1;
  shape.globalBatch = 8;
  return shape;
}

/// The plan of `c`, checked to be asynchronous as `c` asks: every program
/// reports what each pass moved.
mlir::OwningOpRef<mlir::ModuleOp> compileOverlapped(const std::string &model,
                                                    const ZeroOverlap &c,
                                                    const std::string &optimizer) {
  auto m = test::compileModule(test::sharedContext(), model, goldenShape(), c.options(optimizer));
  EXPECT_TRUE(m) << c.name() << ": compilation failed";
  if (!m)
    return m;
  for (auto program : m->getOps<plan::ProgramOp>()) {
    if (c.fsdpPrefetch) {
      auto report = program->getAttrOfType<mlir::ArrayAttr>(plan::kFsdpPrefetchAttr);
      EXPECT_TRUE(report && !report.empty()) << c.name() << ": nothing prefetched";
    }
    if (c.overlapParamGather)
      EXPECT_TRUE(program->hasAttr(plan::kParamGatherOverlapAttr))
          << c.name() << ": no parameter gather overlapped";
    if (c.gradBucketSize)
      EXPECT_TRUE(program->hasAttr(plan::kGradBucketsAttr)) << c.name() << ": no buckets";
  }
  return m;
}

/// Trains `c`'s plan 3 steps in the checking mode.
test::Trained trainOverlapped(const std::string &model, const ZeroOverlap &c,
                              const std::string &optimizer) {
  auto m = compileOverlapped(model, c, optimizer);
  if (!m)
    return {};
  return test::trainInCheckingMode(*m, "overlap-" + model + "-" + c.name() + "-" + optimizer);
}

const test::Trained &singleDevice(const std::string &model, const std::string &optimizer) {
  return test::singleDeviceRun(model, optimizer, 1);
}

const std::vector<ZeroOverlap> &zeroOverlapCases() {
  static const std::vector<ZeroOverlap> cases = [] {
    std::vector<ZeroOverlap> v;
    for (int64_t tp : {1, 2}) {
      v.push_back({2, tp, 3, /*fsdpPrefetch=*/1});
      v.push_back({2, tp, 1, 0, /*overlapParamGather=*/true});
      v.push_back({2, tp, 2, 0, /*overlapParamGather=*/true});
      // Both overlaps of a ZeRO-1 step: the gradient buckets' reduce-scatters
      // and the next step's parameter gathers.
      v.push_back({2, tp, 1, 0, /*overlapParamGather=*/true, /*gradBucketSize=*/50000});
      // ZeRO-2's per-microbatch reduce-scatters in buckets, with and
      // without the parameter gathers' overlap.
      v.push_back({2, tp, 2, 0, false, /*gradBucketSize=*/20000});
      v.push_back({2, tp, 2, 0, true, /*gradBucketSize=*/20000});
    }
    v.push_back({2, 1, 3, /*fsdpPrefetch=*/2}); // two units ahead
    // ZeRO-3's per-microbatch reduce-scatters in buckets, alone and with
    // the prefetched gathers on the same queue.
    v.push_back({2, 1, 3, 0, false, /*gradBucketSize=*/20000});
    v.push_back({2, 2, 3, /*fsdpPrefetch=*/1, false, /*gradBucketSize=*/20000});
    return v;
  }();
  return cases;
}
} // namespace

TEST(ZeroOverlap, MatchesSingleDeviceUnderCheckAsync) {
  for (const std::string model : {"tiny-gpt2", "tiny-llama"})
    for (const std::string optimizer : {"sgd", "adamw"}) {
      const test::Trained &ref = singleDevice(model, optimizer);
      ASSERT_EQ(ref.losses.size(), 3u) << model << " " << optimizer;
      for (const ZeroOverlap &c : zeroOverlapCases()) {
        std::string what = model + " " + c.name() + " " + optimizer;
        SCOPED_TRACE(what);
        test::Trained got = trainOverlapped(model, c, optimizer);
        test::expectSame(ref, got, what, test::goldenTolerance(optimizer));
      }
    }
}

// The prefetched gathers' copies live from their start (planned by
// llcdist-plan-memory); the runtime counts an in-flight op's buffers at its
// start and its wait, so the measured peak is the planned one exactly.
TEST(ZeroOverlap, MeasuredPeakEqualsPlanned) {
  std::vector<std::pair<std::string, ZeroOverlap>> cases = {
      {"tiny-llama", {2, 1, 3, 1}},
      {"tiny-gpt2", {2, 2, 3, 2}},
      {"tiny-llama", {2, 1, 1, 0, true}},
      {"tiny-gpt2", {2, 1, 2, 0, true}},
      {"tiny-llama", {2, 1, 2, 0, false, 20000}},
      {"tiny-gpt2", {2, 1, 3, 1, false, 20000}},
  };
  for (auto &[model, c] : cases) {
    std::string what = model + " " + c.name();
    auto m = compileOverlapped(model, c, "adamw");
    ASSERT_TRUE(m) << what;
    auto planned = test::plannedMemory(*m);
    auto run = test::writeAndRunOneStep(*m, "llcdist-overlap-peak", what);
    ASSERT_TRUE(run) << what;
    ASSERT_NO_FATAL_FAILURE(
        // The live peak is exact; the high-water mark may stop short of the
        // arena's aligned end when an odd-sized buffer (the grad norm's f64
        // scalar, the loss) is placed last.
        test::expectMeasuredPeakEqualsPlanned(*run, planned, what, /*arenaSlack=*/64));
  }
}

// Prefetching costs memory: the next unit's copies are live while one
// computes, so the planned arena grows, and by less than all the bytes one
// subroutine gathers (only the units in flight are live at once).
TEST(ZeroOverlap, PrefetchRaisesThePlannedPeakBoundedly) {
  ZeroOverlap sync{2, 1, 3, 0}, ahead{2, 1, 3, 1};
  auto a = compileOverlapped("tiny-llama", sync, "adamw");
  auto b = compileOverlapped("tiny-llama", ahead, "adamw");
  ASSERT_TRUE(a && b);
  int64_t arenaA = 0, arenaB = 0, gathered = 0;
  for (auto p : a->getOps<plan::ProgramOp>())
    arenaA += int64_t(p.getArenaBytes().value_or(0));
  for (auto p : b->getOps<plan::ProgramOp>()) {
    arenaB += int64_t(p.getArenaBytes().value_or(0));
    for (auto d : p->getAttrOfType<mlir::ArrayAttr>(plan::kFsdpPrefetchAttr)
                      .getAsRange<mlir::DictionaryAttr>())
      gathered = std::max(gathered, d.getAs<mlir::IntegerAttr>("bytes").getInt());
  }
  EXPECT_GT(arenaB, arenaA);
  EXPECT_LE(arenaB - arenaA, gathered);
}

// The test above can fail: the same FSDP plan with its first waits moved
// after the first read of their gathered parameters still obeys the token
// rules (the loader accepts it), but in the checking mode that read sees the
// poison and the run no longer matches (or fails). The moved waits are those
// before the forward's first kernel (the embedding table's and, the position
// embedding fused into the embedding, the position table's): a later wait
// would complete them anyway, as a queue runs its ops in order, but the
// embedding reads both tables before any.
TEST(ZeroOverlap, CheckAsyncCatchesALateWait) {
  const std::string model = "tiny-gpt2";
  ZeroOverlap c{2, 1, 3, 1};
  auto m = compileOverlapped(model, c, "sgd");
  ASSERT_TRUE(m);
  std::string dir = test::tempPath("llcdist-overlap-late-wait").string();
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(mlir::succeeded(writePlanDirectory(*m, dir)));
  // Move forward's first wait to the subroutine's end.
  std::string file = dir + "/program-0.json";
  nlohmann::json program;
  {
    std::ifstream in(file);
    in >> program;
  }
  int moved = 0;
  for (auto &sub : program["subroutines"]) {
    if (sub["name"] != "forward")
      continue;
    auto &ops = sub["ops"];
    size_t i = 0;
    while (i < ops.size() && ops[i]["op"] != "embedding_fwd") {
      if (ops[i]["op"] == "wait") {
        nlohmann::json w = ops[i];
        ops.erase(ops.begin() + i);
        ops.push_back(w);
        ++moved;
        continue;
      }
      ++i;
    }
  }
  ASSERT_GT(moved, 0);
  {
    std::ofstream out(file);
    out << program.dump();
  }
  auto loaded = rt::loadPlan(dir);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().toString();

  rt::RunOptions o = test::goldenRunOptions(dir);
  o.checkAsync = true;
  rt::RunResult result;
  std::ostringstream progress;
  rt::Status st = rt::runTraining(o, progress, &result);
  std::filesystem::remove_all(dir);
  const test::Trained &ref = singleDevice(model, "sgd");
  bool differs = !st.isOk() || result.steps.size() != ref.losses.size();
  for (size_t i = 0; !differs && i < ref.losses.size(); ++i)
    differs = !(std::fabs(result.steps[i].loss - ref.losses[i]) <= 1e-5 * ref.losses[i]);
  EXPECT_TRUE(differs) << "a read before its wait went unnoticed";
}

namespace {
using test::expectSame;
using test::Trained;

//===----------------------------------------------------------------------===//
// Sequence-parallel overlap (llcdist-plan-sp-overlap, --tp-comm-overlap)
//===----------------------------------------------------------------------===//

TrainingPipelineOptions spOverlapOptions(const std::string &optimizer, int64_t dp, int64_t tp,
                                         int64_t gradBucketSize = 0) {
  TrainingPipelineOptions opt = test::goldenOptions(optimizer);
  opt.mesh.dp = dp;
  opt.mesh.tp = tp;
  opt.sequenceParallel = true;
  opt.tpCommOverlap = true;
  opt.gradBucketSize = gradBucketSize;
  return opt;
}

TrainingShape microBatchShape(int64_t microBatch) {
  TrainingShape shape;
  shape.seqLen = 16;
  shape.microBatch = microBatch;
  shape.globalBatch = 8;
  return shape;
}

// The pass overlaps what Megatron's bulk overlap does: in the backward, an
// input gradient's reduce_scatter starts right after its input-gradient GEMM
// and the weight-gradient GEMM runs while it is in flight.
TEST(SPOverlapTest, InputGradientReduceScatterOverlapsTheWeightGradient) {
  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  mlir::MLIRContext ctx(registry);
  auto module = test::compileModule(ctx, "tiny-gpt2", microBatchShape(4), spOverlapOptions("sgd", 2, 2));
  ASSERT_TRUE(module);
  int64_t overlapped = 0, programs = 0;
  for (auto program : module->getOps<plan::ProgramOp>()) {
    ++programs;
    auto report = program->getAttrOfType<mlir::DictionaryAttr>(plan::kTpCommOverlapAttr);
    ASSERT_TRUE(report);
    for (const char *kind : {"all_gather", "reduce_scatter"}) {
      auto d = report.getAs<mlir::DictionaryAttr>(kind);
      ASSERT_TRUE(d) << kind;
      EXPECT_GT(d.getAs<mlir::IntegerAttr>("gemms").getInt(), 0) << kind;
    }
    program.walk([&](plan::KernelOp rs) {
      if (rs.getKernel() != "reduce_scatter" || !rs->hasAttr(plan::kTokenAttr))
        return;
      auto prev = llvm::dyn_cast_or_null<plan::KernelOp>(rs->getPrevNode());
      auto next = llvm::dyn_cast_or_null<plan::KernelOp>(rs->getNextNode());
      if (prev && next && prev.getKernel() == "linear_bwd_input" &&
          next.getKernel() == "linear_bwd_weight") {
        // The dgrad wrote what the scatter reads; the wgrad is independent.
        EXPECT_EQ(prev.getArgs().get("dx"), rs.getArgs().get("x"));
        ++overlapped;
      }
    });
  }
  EXPECT_EQ(programs, 1);
  // tiny-gpt2: 2 column-parallel linears per layer (qkv, fc) × 4 layers.
  EXPECT_GE(overlapped, 8);
}

void spOverlapGolden(const std::string &model, const std::string &optimizer) {
  auto tol = test::goldenTolerance(optimizer);
  TrainingPipelineOptions single = test::goldenOptions(optimizer);
  Trained ref = test::trainPlan(model, single, 8, "overlap-sp-ref-" + optimizer);
  for (auto [dp, tp] : {std::pair<int64_t, int64_t>{2, 2}, {1, 4}})
    for (int64_t buckets : {int64_t(0), int64_t(3000)}) {
      if (buckets && dp == 1)
        continue; // no dp gradient reduction to bucket
      std::string tag = "overlap-sp-dp" + std::to_string(dp) + "-tp" + std::to_string(tp) +
                        "-b" + std::to_string(buckets) + "-" + optimizer;
      // Two microbatches per dp rank: the overlapped subroutines run twice.
      Trained got = test::trainPlan(model, spOverlapOptions(optimizer, dp, tp, buckets),
                                    4 / dp, tag, "f32", /*checkAsync=*/true);
      expectSame(ref, got, model + " " + tag + " (checking mode)", tol);
    }
}

TEST(SPOverlapTest, GoldenGpt2Sgd) { spOverlapGolden("tiny-gpt2", "sgd"); }
TEST(SPOverlapTest, GoldenGpt2AdamW) { spOverlapGolden("tiny-gpt2", "adamw"); }
TEST(SPOverlapTest, GoldenLlamaSgd) { spOverlapGolden("tiny-llama", "sgd"); }

// The checking mode fails a plan whose wait comes too late: the first wait of
// the backward (an input gradient's reduce_scatter, read by the next kernel)
// moved by hand to the end of the subroutine. The token rules still hold (the
// loader accepts it); the kernel reads the poisoned result.
TEST(SPOverlapTest, CheckingModeCatchesAMovedWait) {
  std::string dir = test::compilePlan("tiny-gpt2", microBatchShape(4),
                                      spOverlapOptions("sgd", 2, 2), "overlap-sp-moved-wait");
  ASSERT_FALSE(dir.empty());
  Trained good = test::runGoldenSteps(dir, "overlap-sp-moved-wait", /*checkAsync=*/true);
  ASSERT_EQ(good.losses.size(), 3u);

  std::string path = dir + "/program-0.json";
  nlohmann::json program;
  {
    std::ifstream in(path);
    in >> program;
  }
  bool moved = false;
  for (auto &sub : program["subroutines"]) {
    if (sub["name"] != "backward")
      continue;
    auto &ops = sub["ops"];
    for (size_t i = 0; i + 1 < ops.size(); ++i)
      if (ops[i]["op"] == "wait") {
        nlohmann::json wait = ops[i];
        ops.erase(ops.begin() + i);
        ops.push_back(wait);
        moved = true;
        break;
      }
  }
  ASSERT_TRUE(moved) << "no wait in the backward of " << path;
  {
    std::ofstream out(path);
    out << program.dump(1);
  }
  Trained bad = test::runGoldenSteps(dir, "overlap-sp-moved-wait", /*checkAsync=*/true,
                                     /*expectOk=*/false);
  bool caught = bad.losses.size() < good.losses.size();
  for (size_t i = 0; !caught && i < bad.losses.size(); ++i)
    caught = !std::isfinite(bad.losses[i]) ||
             std::fabs(bad.losses[i] - good.losses[i]) > 1e-3 * std::fabs(good.losses[i]);
  EXPECT_TRUE(caught) << "the moved wait went unnoticed: loss " << bad.losses.back();
  std::filesystem::remove_all(dir);
}

// (End of the sequence-parallel overlap tests.)

//===----------------------------------------------------------------------===//
// Pipeline send/recv overlap (llcdist-plan-p2p-overlap, --overlap-p2p)
//===----------------------------------------------------------------------===//

struct P2PConfig {
  int64_t dp = 1, tp = 1, pp = 2;
  std::string schedule;
  int64_t virtualStages = 1;
  bool sequenceParallel = false;
  std::string name() const {
    return "overlap-p2p-dp" + std::to_string(dp) + "-tp" + std::to_string(tp) + "-pp" +
           std::to_string(pp) + "-" + schedule +
           (virtualStages > 1 ? "-v" + std::to_string(virtualStages) : "") +
           (sequenceParallel ? "-sp" : "");
  }
};

TrainingPipelineOptions p2pOptions(const P2PConfig &c, const std::string &optimizer) {
  TrainingPipelineOptions opt = test::goldenOptions(optimizer);
  opt.mesh.dp = c.dp;
  opt.mesh.tp = c.tp;
  opt.mesh.pp = c.pp;
  opt.pipelineSchedule = c.schedule;
  opt.virtualStages = c.virtualStages;
  opt.sequenceParallel = c.sequenceParallel;
  opt.tpCommOverlap = c.sequenceParallel;
  opt.overlapP2P = true;
  return opt;
}

std::vector<P2PConfig> p2pConfigs() {
  std::vector<P2PConfig> configs;
  for (const char *s : {"gpipe", "1f1b", "zb-h1"}) {
    configs.push_back({1, 1, 2, s});
    configs.push_back({1, 1, 4, s});
    configs.push_back({2, 2, 2, s});
  }
  configs.push_back({1, 1, 2, "interleaved", 2});
  configs.push_back({2, 2, 2, "interleaved", 2});
  configs.push_back({2, 2, 2, "1f1b", 1, /*sequenceParallel=*/true});
  configs.push_back({2, 2, 2, "zb-h1", 1, /*sequenceParallel=*/true});
  return configs;
}

// Every configuration's transfers overlap kernels somewhere; where the
// backward computes weight gradients in the same action as the sent input
// gradient (not ZB-H1's B, whose W runs apart) and no tp all-reduce comes
// between them, the send starts before a weight-gradient GEMM.
TEST(P2POverlapTest, SendsOverlapTheWeightGradients) {
  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  mlir::MLIRContext ctx(registry);
  for (const P2PConfig &c : p2pConfigs()) {
    auto module = test::compileModule(ctx, "tiny-gpt2", microBatchShape(1), p2pOptions(c, "sgd"));
    ASSERT_TRUE(module) << c.name();
    int64_t overlapped = 0, sendsOverlappingWgrad = 0;
    for (auto program : module->getOps<plan::ProgramOp>()) {
      auto report = program->getAttrOfType<mlir::DictionaryAttr>(plan::kP2POverlapAttr);
      ASSERT_TRUE(report) << c.name();
      overlapped += report.getAs<mlir::IntegerAttr>("overlapped").getInt();
      program.walk([&](plan::KernelOp send) {
        auto next = llvm::dyn_cast_or_null<plan::KernelOp>(send->getNextNode());
        if (send.getKernel() == "send" && send->hasAttr(plan::kTokenAttr) && next &&
            next.getKernel().starts_with("linear_bwd_weight"))
          ++sendsOverlappingWgrad;
      });
    }
    EXPECT_GT(overlapped, 0) << c.name();
    if (c.schedule != "zb-h1" && c.tp == 1)
      EXPECT_GT(sendsOverlappingWgrad, 0) << c.name();
  }
}

void p2pGolden(const std::string &model, const std::string &optimizer) {
  TrainingPipelineOptions single = test::goldenOptions(optimizer);
  Trained ref = test::trainPlan(model, single, 8, "overlap-p2p-ref-" + optimizer);
  for (const P2PConfig &c : p2pConfigs()) {
    // One sequence per microbatch: 8 / dp microbatches flow through the pipe.
    Trained got = test::trainPlan(model, p2pOptions(c, optimizer), 1, c.name() + "-" + optimizer,
                                  "f32", /*checkAsync=*/true);
    expectSame(ref, got, model + " " + optimizer + " " + c.name() + " (checking mode)",
               test::goldenTolerance(optimizer));
  }
}

TEST(P2POverlapTest, GoldenGpt2Sgd) { p2pGolden("tiny-gpt2", "sgd"); }
TEST(P2POverlapTest, GoldenGpt2AdamW) { p2pGolden("tiny-gpt2", "adamw"); }

// (End of the pipeline send/recv overlap tests.)

} // namespace
