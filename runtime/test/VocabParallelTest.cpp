// Vocabulary parallelism (docs/plan-format.md, attr `shard_axis`): the vocab-parallel embedding and
// cross entropy (local kernels cross_entropy_max / _sums / _fwd / _bwd with the plan's all_reduce ops
// between them) on tp = 2 and 4 (and a dp × tp mesh whose tp groups are not contiguous), run by one
// interpreter per rank on threads, against the unsharded kernels on the same global data. Also the
// kernel-level range rules, bias_add, and the failure paths of the row statistics' all-reduces (a
// failing member aborts the others; a missing member times out with the usual diagnostic). Also the
// sequence-parallel position embedding (shard_axis on pos_embedding_*) against the unsharded kernels.
#include "PlanTestUtil.h"
#include "TestUtil.h"

#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Kernels.h"
#include "llcdist/runtime/Plan.h"
#include "llcdist/runtime/Safetensors.h"
#include "llcdist/runtime/Train.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <thread>

namespace llcdist::rt {
namespace {

using testing::json;
namespace fs = std::filesystem;

TEST(VocabParallelKernelTest, EmbeddingRangesAndZeroRows) {
  // Global vocabulary 6 = 3 shards of 2 rows; this is shard 1 (global rows 2, 3).
  const float table[4] = {1, 2, 3, 4};
  const int32_t ids[4] = {3, 0, 2, 5};
  float out[8];
  std::fill_n(out, 8, -1.0f);
  ASSERT_TRUE(embeddingForward(ids, table, out, 4, 2, 2, {1, 3}).isOk());
  EXPECT_EQ(std::vector<float>(out, out + 8), (std::vector<float>{3, 4, 0, 0, 1, 2, 0, 0}));
  const float dout[8] = {1, 1, 2, 2, 3, 3, 4, 4};
  float dtable[4] = {10, 10, 10, 10};
  ASSERT_TRUE(embeddingBackward(ids, dout, dtable, 4, 2, 2, /*accumulate=*/true, {1, 3}).isOk());
  EXPECT_EQ(std::vector<float>(dtable, dtable + 4), (std::vector<float>{13, 13, 11, 11}));
  ASSERT_TRUE(embeddingBackward(ids, dout, dtable, 4, 2, 2, /*accumulate=*/false, {1, 3}).isOk());
  EXPECT_EQ(std::vector<float>(dtable, dtable + 4), (std::vector<float>{3, 3, 1, 1}));
  // Outside the global vocabulary [0, 6): an error, not a zero row.
  const int32_t bad[2] = {1, 6};
  Status s = embeddingForward(bad, table, out, 2, 2, 2, {1, 3});
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("[0, 6)"), std::string::npos) << s.message();
  EXPECT_FALSE(embeddingBackward(bad, dout, dtable, 2, 2, 2, true, {1, 3}).isOk());
  const int32_t neg[1] = {-1};
  EXPECT_FALSE(embeddingForward(neg, table, out, 1, 2, 2, {0, 3}).isOk());
}

// The plan's decomposition of the vocabulary-parallel cross entropy over n shards (logits[c]: shard
// c's [M, V] columns), with its two all-reduces done here in member order as the communicator does:
// every shard's mean loss and dlogits.
struct ShardedLoss {
  std::vector<double> loss;
  std::vector<std::vector<float>> dlogits;
};
Status shardedLoss(const std::vector<std::vector<float>>& logits, const int32_t* targets, int64_t M, int64_t V,
                   float scale, int64_t realV, ShardedLoss* out) {
  const int64_t n = int64_t(logits.size());
  std::vector<std::vector<double>> mx(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(M)));
  std::vector<std::vector<double>> sums(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(2 * M)));
  for (int64_t c = 0; c < n; ++c)
    LLCDIST_RETURN_IF_ERROR(
        crossEntropyShardMax(logits[size_t(c)].data(), targets, mx[size_t(c)].data(), M, V, {c, n}, realV));
  std::vector<double> gmax = mx[0];  // all_reduce max
  for (int64_t c = 1; c < n; ++c)
    for (int64_t m = 0; m < M; ++m) gmax[size_t(m)] = std::max(gmax[size_t(m)], mx[size_t(c)][size_t(m)]);
  for (int64_t c = 0; c < n; ++c)
    LLCDIST_RETURN_IF_ERROR(crossEntropyShardSums(logits[size_t(c)].data(), targets, gmax.data(),
                                                  sums[size_t(c)].data(), M, V, {c, n}, realV));
  std::vector<double> gsums = sums[0];  // all_reduce sum, member order
  for (int64_t c = 1; c < n; ++c)
    for (int64_t i = 0; i < 2 * M; ++i) gsums[size_t(i)] += sums[size_t(c)][size_t(i)];
  out->loss.assign(size_t(n), 0.0);
  out->dlogits.assign(size_t(n), std::vector<float>(size_t(M * V), -1.0f));
  for (int64_t c = 0; c < n; ++c) {
    LLCDIST_RETURN_IF_ERROR(crossEntropyForwardVocabParallel(gmax.data(), gsums.data(), &out->loss[size_t(c)], M));
    LLCDIST_RETURN_IF_ERROR(crossEntropyBackwardVocabParallel(logits[size_t(c)].data(), targets, gmax.data(),
                                                              gsums.data(), out->dlogits[size_t(c)].data(), M, V,
                                                              scale, {c, n}, realV));
  }
  return Status::ok();
}

TEST(VocabParallelKernelTest, CrossEntropyWithOneShardIsTheUnshardedKernel) {
  const int64_t M = 5, V = 7;
  const std::vector<float> logits = testing::randn(M * V, 3, 2.0f);
  const std::vector<int32_t> targets = testing::randIds(M, int32_t(V), 4);
  double want = 0;
  ASSERT_TRUE(crossEntropyForward(logits.data(), targets.data(), nullptr, &want, M, V).isOk());
  std::vector<float> dwant(size_t(M * V));
  ASSERT_TRUE(crossEntropyBackward(logits.data(), targets.data(), dwant.data(), M, V, 0.25f).isOk());
  ShardedLoss got;
  ASSERT_TRUE(shardedLoss({logits}, targets.data(), M, V, 0.25f, 0, &got).isOk());
  EXPECT_EQ(std::memcmp(&want, &got.loss[0], sizeof(double)), 0) << want << " vs " << got.loss[0];
  EXPECT_EQ(std::memcmp(dwant.data(), got.dlogits[0].data(), dwant.size() * 4), 0);
  // The statistics themselves: the row max and Σ exp(x - max), target logit, by a direct loop.
  std::vector<double> mx(static_cast<size_t>(M)), sums(static_cast<size_t>(2 * M));
  ASSERT_TRUE(crossEntropyShardMax(logits.data(), targets.data(), mx.data(), M, V, {0, 1}).isOk());
  ASSERT_TRUE(crossEntropyShardSums(logits.data(), targets.data(), mx.data(), sums.data(), M, V, {0, 1}).isOk());
  for (int64_t m = 0; m < M; ++m) {
    float rowMax = logits[size_t(m * V)];
    for (int64_t j = 1; j < V; ++j) rowMax = std::max(rowMax, logits[size_t(m * V + j)]);
    double sumExp = 0;
    // The subtraction in f32, as the unsharded kernel does (its definition), the exp and sum in double.
    for (int64_t j = 0; j < V; ++j) sumExp += std::exp(double(logits[size_t(m * V + j)] - rowMax));
    EXPECT_EQ(mx[size_t(m)], double(rowMax)) << "row " << m;
    EXPECT_NEAR(sums[size_t(m)], sumExp, 1e-12 * sumExp) << "row " << m;
    EXPECT_EQ(sums[size_t(M + m)], double(logits[size_t(m * V + targets[size_t(m)])])) << "row " << m;
  }
  // A target outside the global vocabulary fails in the first local step, before any collective.
  const int32_t bad[1] = {int32_t(2 * V)};
  Status s = crossEntropyShardMax(logits.data(), bad, mx.data(), 1, V, {1, 2});
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("[0, 14)"), std::string::npos) << s.message();
}

TEST(BiasAddTest, AddsTheBiasToEveryRow) {
  float y[6] = {1, 2, 3, 4, 5, 6};
  const float b[3] = {10, 20, 30};
  biasAddForward(y, b, 2, 3);
  EXPECT_EQ(std::vector<float>(y, y + 6), (std::vector<float>{11, 22, 33, 14, 25, 36}));
}

// ---- Through interpreters on a mesh ----------------------------------------------------------------

struct Mesh2 {
  int64_t dp, tp;
  std::vector<std::string> order;  // empty: the default (tp fastest)
};
void PrintTo(const Mesh2& m, std::ostream* os) {
  *os << "dp=" << m.dp << " tp=" << m.tp << (m.order.empty() ? "" : " dp fastest");
}

// Buffer ids of vocabPlan.
enum : int64_t { kIds, kTargets, kTable, kEmb, kLogits, kDlogits, kDout, kDtable, kLoss, kRowMax, kRowSums };

// The vocabulary-parallel cross entropy's row statistics as the compiler emits them: two local
// kernels, each followed by its all_reduce over tp.
void rowStats(testing::PlanBuilder& p, const std::string& sub, int64_t logits, int64_t targets, int64_t rowMax,
              int64_t rowSums, const json& attrs) {
  p.op(sub, "cross_entropy_max", {{"logits", logits}, {"targets", targets}, {"row_max", rowMax}}, attrs, "loss");
  p.op(sub, "all_reduce", {{"x", {rowMax}}}, {{"axis", "tp"}, {"op", "max"}});
  p.op(sub, "cross_entropy_sums",
       {{"logits", logits}, {"targets", targets}, {"row_max", rowMax}, {"row_sums", rowSums}}, attrs, "loss");
  p.op(sub, "all_reduce", {{"x", {rowSums}}}, {{"axis", "tp"}, {"op", "sum"}});
}

// One program for every rank: the vocab-parallel embedding (+ all_reduce sum of the partial rows over
// tp), the cross entropy forward and backward on tp-sharded logits, the embedding's weight gradient.
testing::PlanBuilder vocabPlan(const Mesh2& mesh, int64_t M, int64_t V, int64_t H, double fwdScale, double bwdScale) {
  testing::PlanBuilder p(V * mesh.tp, M, 1, 1);
  p.manifest["batch"]["dp"] = mesh.dp;
  p.manifest["batch"]["global_batch"] = mesh.dp;
  p.manifest["mesh"] = {{"dp", mesh.dp}, {"tp", mesh.tp}, {"pp", 1}};
  if (!mesh.order.empty()) p.manifest["mesh"]["rank_order"] = mesh.order;
  json ranks = json::array();
  for (int64_t r = 0; r < mesh.dp * mesh.tp; ++r) ranks.push_back(r);
  p.manifest["programs"][0]["ranks"] = ranks;
  p.buffer("ids", "input", {M}, "i32");
  p.buffer("targets", "input", {M}, "i32");
  p.buffer("table", "activation", {V, H});
  p.buffer("emb", "activation", {M, H});
  p.buffer("logits", "activation", {M, V});
  p.buffer("dlogits", "activation", {M, V});
  p.buffer("dout", "activation", {M, H});
  p.buffer("dtable", "activation", {V, H});
  p.buffer("loss", "metric", {1});
  p.buffer("row_max", "scratch", {M}, "f64");
  p.buffer("row_sums", "scratch", {2 * M}, "f64");
  const json stats = {{"M", M}, {"V", V}, {"shard_axis", "tp"}};
  p.op("s", "fill_zero", {{"x", {kLoss}}});
  p.op("s", "embedding_fwd", {{"ids", kIds}, {"table", kTable}, {"out", kEmb}},
       {{"M", M}, {"V", V}, {"H", H}, {"shard_axis", "tp"}}, "wte");
  p.op("s", "all_reduce", {{"x", {kEmb}}}, {{"axis", "tp"}, {"op", "sum"}});
  rowStats(p, "s", kLogits, kTargets, kRowMax, kRowSums, stats);
  p.op("s", "cross_entropy_fwd",
       {{"logits", kLogits}, {"targets", kTargets}, {"loss", kLoss}, {"row_max", kRowMax}, {"row_sums", kRowSums}},
       {{"M", M}, {"V", V}, {"scale", fwdScale}, {"shard_axis", "tp"}}, "loss");
  rowStats(p, "s", kLogits, kTargets, kRowMax, kRowSums, stats);  // the backward recomputes them
  p.op("s", "cross_entropy_bwd",
       {{"logits", kLogits}, {"targets", kTargets}, {"dlogits", kDlogits}, {"row_max", kRowMax},
        {"row_sums", kRowSums}},
       {{"M", M}, {"V", V}, {"scale", bwdScale}, {"shard_axis", "tp"}}, "loss");
  p.op("s", "embedding_bwd_weight", {{"ids", kIds}, {"dout", kDout}, {"dtable", kDtable}},
       {{"M", M}, {"V", V}, {"H", H}, {"accumulate", false}, {"shard_axis", "tp"}}, "wte");
  p.action("s");
  return p;
}

Plan loadFrom(const testing::PlanBuilder& b) {
  Plan plan;
  auto m = parseManifest(b.manifest.dump(), "manifest.json");
  EXPECT_TRUE(m.isOk()) << m.status().message();
  if (!m.isOk()) return plan;
  plan.manifest = m.value();
  auto p = parseProgram(b.program.dump(), "program-0.json", plan.manifest);
  EXPECT_TRUE(p.isOk()) << p.status().message();
  if (p.isOk()) plan.programs.push_back(std::move(p).value());
  return plan;
}

// Every rank's backend and interpreter over one in-process communicator.
struct Ranks {
  std::unique_ptr<Communicator> comm;
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<std::unique_ptr<Interpreter>> interps;
};

Ranks makeRanks(const Plan& plan, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  Ranks rk;
  const int world = int(plan.manifest.worldSize());
  InProcessCommunicatorOptions co;
  co.worldSize = world;
  co.mesh = plan.manifest.mesh();
  co.timeout = timeout;
  rk.comm = makeInProcessCommunicator(co);
  for (int r = 0; r < world; ++r) {
    CpuBackendOptions bo;
    bo.rank = r;
    bo.communicator = rk.comm.get();
    rk.backends.push_back(makeCpuBackend(bo));
    auto in = Interpreter::create(plan, 0, *rk.backends.back(), r);
    EXPECT_TRUE(in.isOk()) << in.status().message();
    rk.interps.push_back(in.isOk() ? std::move(in).value() : nullptr);
  }
  return rk;
}

// Runs fn(rank) on one thread per rank; a failing rank aborts the communicator (as runTraining does).
std::vector<Status> runAll(Ranks& rk, const std::function<Status(int)>& fn) {
  std::vector<Status> st(rk.interps.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < int(rk.interps.size()); ++r)
    threads.emplace_back([&, r] {
      st[size_t(r)] = fn(r);
      if (!st[size_t(r)].isOk()) rk.comm->abort(Status(st[size_t(r)]).withRank(r));
    });
  for (std::thread& t : threads) t.join();
  return st;
}

// The global data of one dp replica (seeded by the replica): ids and targets cover every id of the
// global vocabulary (so every shard owns some targets), logits spread enough that the row maxima fall
// on different shards.
struct Global {
  std::vector<int32_t> ids, targets;
  std::vector<float> table, logits, dout;
};
Global globalData(int64_t M, int64_t Vg, int64_t H, uint32_t seed) {
  Global g;
  for (int64_t m = 0; m < M; ++m) {
    g.ids.push_back(int32_t((m * 5 + seed) % Vg));
    g.targets.push_back(int32_t((m * 3 + 2 * seed + 1) % Vg));
  }
  g.table = testing::randn(Vg * H, seed + 10);
  g.logits = testing::randn(M * Vg, seed + 20, 3.0f);
  g.dout = testing::randn(M * H, seed + 30);
  return g;
}

// Columns [c·V, (c+1)·V) of a row-major [rows, V·n] matrix.
std::vector<float> columns(const std::vector<float>& x, int64_t rows, int64_t V, int64_t n, int64_t c) {
  std::vector<float> out(size_t(rows * V));
  for (int64_t r = 0; r < rows; ++r) std::memcpy(&out[size_t(r * V)], &x[size_t((r * n + c) * V)], size_t(V) * 4);
  return out;
}

void expectClose(const std::vector<float>& got, const std::vector<float>& want, double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (float w : want) scale = std::max(scale, std::abs(double(w)));
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = rel * std::max(std::abs(double(want[i])), 1e-3 * scale) + 1e-12;
    if (std::abs(double(got[i]) - want[i]) > tol && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs " << want[i];
  }
}

class VocabParallelTest : public ::testing::TestWithParam<Mesh2> {};

TEST_P(VocabParallelTest, MatchesTheUnshardedKernels) {
  const Mesh2 mesh = GetParam();
  const int64_t n = mesh.tp, V = 5, Vg = V * n, H = 3, M = 3 * Vg + 1;
  const double fwdScale = 0.5, bwdScale = 1.0 / double(M);
  const Plan plan = loadFrom(vocabPlan(mesh, M, V, H, fwdScale, bwdScale));
  ASSERT_EQ(plan.programs.size(), 1u);
  const Mesh m = plan.manifest.mesh();
  Ranks rk = makeRanks(plan);
  for (const auto& in : rk.interps) ASSERT_NE(in, nullptr);

  std::vector<Global> data;
  for (int64_t d = 0; d < mesh.dp; ++d) data.push_back(globalData(M, Vg, H, uint32_t(7 + d)));
  std::vector<Status> st = runAll(rk, [&](int r) -> Status {
    Interpreter& in = *rk.interps[size_t(r)];
    const Global& g = data[size_t(m.coord(r, MeshAxis::kDp))];
    const int64_t c = m.coord(r, MeshAxis::kTp);
    const std::vector<float> table(g.table.begin() + c * V * H, g.table.begin() + (c + 1) * V * H);
    const std::vector<float> logits = columns(g.logits, M, V, n, c);
    LLCDIST_RETURN_IF_ERROR(in.writeBuffer(kIds, g.ids.data()));
    LLCDIST_RETURN_IF_ERROR(in.writeBuffer(kTargets, g.targets.data()));
    LLCDIST_RETURN_IF_ERROR(in.writeBuffer(kTable, table.data()));
    LLCDIST_RETURN_IF_ERROR(in.writeBuffer(kLogits, logits.data()));
    LLCDIST_RETURN_IF_ERROR(in.writeBuffer(kDout, g.dout.data()));
    return in.runSubroutine(0, 0, -1, 0.0, nullptr);
  });
  for (size_t r = 0; r < st.size(); ++r) ASSERT_TRUE(st[r].isOk()) << "rank " << r << ": " << st[r].message();

  for (int64_t d = 0; d < mesh.dp; ++d) {
    const Global& g = data[size_t(d)];
    // The unsharded reference on the replica's global data.
    std::vector<float> emb(size_t(M * H)), dlogits(size_t(M * Vg)), dtable(size_t(Vg * H));
    ASSERT_TRUE(embeddingForward(g.ids.data(), g.table.data(), emb.data(), M, Vg, H).isOk());
    double mean = 0;
    ASSERT_TRUE(crossEntropyForward(g.logits.data(), g.targets.data(), nullptr, &mean, M, Vg).isOk());
    const float loss = float(fwdScale * mean);
    ASSERT_TRUE(crossEntropyBackward(g.logits.data(), g.targets.data(), dlogits.data(), M, Vg, float(bwdScale)).isOk());
    ASSERT_TRUE(embeddingBackward(g.ids.data(), g.dout.data(), dtable.data(), M, Vg, H, false).isOk());
    std::vector<float> lossBits;
    for (int r = 0; r < int(m.worldSize()); ++r) {
      if (m.coord(r, MeshAxis::kDp) != d) continue;
      const int64_t c = m.coord(r, MeshAxis::kTp);
      SCOPED_TRACE("dp " + std::to_string(d) + " rank " + std::to_string(r) + " shard " + std::to_string(c));
      Interpreter& in = *rk.interps[size_t(r)];
      // Embedding: one owner per row and zeros elsewhere, so the summed partial rows are exact.
      EXPECT_EQ(in.readF32(kEmb).value(), emb);
      const std::vector<float> dt = in.readF32(kDtable).value();
      EXPECT_EQ(dt, std::vector<float>(dtable.begin() + c * V * H, dtable.begin() + (c + 1) * V * H));
      const float got = in.readF32(kLoss).value()[0];
      EXPECT_NEAR(got, loss, 1e-6 * std::abs(loss));
      lossBits.push_back(got);
      expectClose(in.readF32(kDlogits).value(), columns(dlogits, M, V, n, c), 1e-6, "dlogits");
    }
    ASSERT_EQ(lossBits.size(), size_t(n));
    for (float l : lossBits) EXPECT_EQ(std::memcmp(&l, &lossBits[0], 4), 0) << "every member gets the same bits";
  }
}

INSTANTIATE_TEST_SUITE_P(Meshes, VocabParallelTest,
                         ::testing::Values(Mesh2{1, 2, {}}, Mesh2{1, 4, {}}, Mesh2{2, 2, {"dp", "tp", "pp"}}),
                         [](const ::testing::TestParamInfo<Mesh2>& i) {
                           return "dp" + std::to_string(i.param.dp) + "_tp" + std::to_string(i.param.tp) +
                                  (i.param.order.empty() ? "" : "_dp_fastest");
                         });

// shard_axis over an axis of size 1 (tp = 1) through the interpreter: exactly the unsharded loss.
TEST(VocabParallelPlanTest, OneRankAxisIsTheUnshardedOp) {
  const int64_t V = 6, H = 2, M = 7;
  const Plan plan = loadFrom(vocabPlan({1, 1, {}}, M, V, H, 1.0, 1.0 / M));
  Ranks rk = makeRanks(plan);
  const Global g = globalData(M, V, H, 3);
  Interpreter& in = *rk.interps[0];
  ASSERT_TRUE(in.writeBuffer(kIds, g.ids.data()).isOk());
  ASSERT_TRUE(in.writeBuffer(kTargets, g.targets.data()).isOk());
  ASSERT_TRUE(in.writeBuffer(kTable, g.table.data()).isOk());
  ASSERT_TRUE(in.writeBuffer(kLogits, g.logits.data()).isOk());
  ASSERT_TRUE(in.writeBuffer(kDout, g.dout.data()).isOk());
  Status s = in.runSubroutine(0, 0, -1, 0.0, nullptr);
  ASSERT_TRUE(s.isOk()) << s.message();
  double mean = 0;
  ASSERT_TRUE(crossEntropyForward(g.logits.data(), g.targets.data(), nullptr, &mean, M, V).isOk());
  EXPECT_EQ(in.readF32(kLoss).value()[0], float(mean));
}

// A bad target on one tp member only: that member fails in cross_entropy_max, before the collective,
// with its own error, and the other member, waiting in the row maxima's all_reduce, returns Aborted
// instead of hanging.
TEST(VocabParallelPlanTest, FailingMemberAbortsTheRowStatisticsAllReduce) {
  const int64_t V = 4, H = 2, M = 3;
  const Plan plan = loadFrom(vocabPlan({1, 2, {}}, M, V, H, 1.0, 1.0));
  Ranks rk = makeRanks(plan);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Status> st = runAll(rk, [&](int r) -> Status {
    const int32_t ids[3] = {0, 1, 2}, targets[3] = {0, 7, r == 1 ? 8 : 1};
    LLCDIST_RETURN_IF_ERROR(rk.interps[size_t(r)]->writeBuffer(kIds, ids));
    LLCDIST_RETURN_IF_ERROR(rk.interps[size_t(r)]->writeBuffer(kTargets, targets));
    return rk.interps[size_t(r)]->runSubroutine(0, 0, -1, 0.0, nullptr);
  });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  ASSERT_FALSE(st[1].isOk());
  EXPECT_NE(st[1].code(), StatusCode::kAborted) << st[1].message();
  for (const char* part : {"cross_entropy_max", "target 8", "[0, 8)"})
    EXPECT_NE(st[1].message().find(part), std::string::npos) << part << " in: " << st[1].message();
  ASSERT_FALSE(st[0].isOk());
  EXPECT_EQ(st[0].code(), StatusCode::kAborted) << st[0].message();
  EXPECT_NE(st[0].message().find("all_reduce"), std::string::npos) << st[0].message();
}

// A member that never reaches the cross entropy: the other times out in the row maxima's all_reduce
// with the communicator's diagnostic (collective, axis, group, missing member).
TEST(VocabParallelPlanTest, MissingMemberTimesOutInTheRowStatisticsAllReduce) {
  const int64_t V = 4, H = 2, M = 3;
  testing::PlanBuilder b = vocabPlan({1, 2, {}}, M, V, H, 1.0, 1.0);
  // Only the cross entropy's first local step and its max all-reduce, the first collective.
  json& ops = b.ops("s");
  ops = json::array({ops[3], ops[4]});
  const Plan plan = loadFrom(b);
  Ranks rk = makeRanks(plan, std::chrono::milliseconds(300));
  const int32_t targets[3] = {0, 1, 2};
  ASSERT_TRUE(rk.interps[0]->writeBuffer(kTargets, targets).isOk());
  Status s = rk.interps[0]->runSubroutine(0, 0, -1, 0.0, nullptr);
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.message();
  for (const char* part : {"all_reduce", "tp", "1"})
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " in: " << s.message();
}

// ---- Sequence-parallel position embedding ----------------------------------------------------------

// pos_embedding_fwd / pos_embedding_bwd_weight with shard_axis "tp": rank c of the tp group holds
// sequence positions [c·S, (c+1)·S) (S local). Buffer ids of seqPlan:
enum : int64_t { kSpX, kSpWpe, kSpY, kSpDy, kSpDwpe, kSpDwpeAcc };

testing::PlanBuilder seqPlan(const Mesh2& mesh, int64_t B, int64_t S, int64_t H, int64_t P) {
  testing::PlanBuilder p(8, S * mesh.tp, B, 1);
  p.manifest["batch"]["dp"] = mesh.dp;
  p.manifest["batch"]["global_batch"] = B * mesh.dp;
  p.manifest["mesh"] = {{"dp", mesh.dp}, {"tp", mesh.tp}, {"pp", 1}};
  if (!mesh.order.empty()) p.manifest["mesh"]["rank_order"] = mesh.order;
  json ranks = json::array();
  for (int64_t r = 0; r < mesh.dp * mesh.tp; ++r) ranks.push_back(r);
  p.manifest["programs"][0]["ranks"] = ranks;
  p.buffer("x", "activation", {B, S, H});
  p.buffer("wpe", "activation", {P, H});
  p.buffer("y", "activation", {B, S, H});
  p.buffer("dy", "activation", {B, S, H});
  p.buffer("dwpe", "activation", {P, H});
  p.buffer("dwpe_acc", "activation", {P, H});
  const json sp = {{"B", B}, {"S", S}, {"H", H}, {"P", P}, {"shard_axis", "tp"}};
  json over = sp, acc = sp;
  over["accumulate"] = false;
  acc["accumulate"] = true;
  p.op("s", "pos_embedding_fwd", {{"x", kSpX}, {"wpe", kSpWpe}, {"y", kSpY}}, sp, "wpe");
  p.op("s", "pos_embedding_bwd_weight", {{"dy", kSpDy}, {"dwpe", kSpDwpe}}, over, "wpe");
  p.op("s", "pos_embedding_bwd_weight", {{"dy", kSpDy}, {"dwpe", kSpDwpeAcc}}, acc, "wpe");
  p.action("s");
  return p;
}

// Positions [c·S, (c+1)·S) of a row-major [B, S·n, H] tensor.
std::vector<float> seqSlice(const std::vector<float>& x, int64_t B, int64_t S, int64_t n, int64_t H, int64_t c) {
  std::vector<float> out(size_t(B * S * H));
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(&out[size_t(b * S * H)], &x[size_t((b * n + c) * S * H)], size_t(S * H) * 4);
  return out;
}

class SequenceParallelTest : public ::testing::TestWithParam<Mesh2> {};

// One interpreter per rank on threads; every tp member's y / dwpe are its part of the unsharded
// kernels' result on the global sequence, bit for bit (rows of other members: 0, or untouched when
// accumulating). dp replicas get different data.
TEST_P(SequenceParallelTest, MembersComputeTheirSliceOfTheUnshardedOp) {
  const Mesh2 mesh = GetParam();
  const int64_t n = mesh.tp, B = 3, S = 4, H = 5, Sg = S * n, P = Sg + 3;  // rows [Sg, P): nobody's
  const Plan plan = loadFrom(seqPlan(mesh, B, S, H, P));
  ASSERT_EQ(plan.programs.size(), 1u);
  const Mesh m = plan.manifest.mesh();
  Ranks rk = makeRanks(plan);
  for (const auto& in : rk.interps) ASSERT_NE(in, nullptr);

  struct Data {
    std::vector<float> x, wpe, dy, init;
  };
  std::vector<Data> data;
  for (int64_t d = 0; d < mesh.dp; ++d) {
    const uint32_t sd = uint32_t(40 + 10 * d);
    data.push_back({testing::randn(B * Sg * H, sd), testing::randn(P * H, sd + 1), testing::randn(B * Sg * H, sd + 2),
                    testing::randn(P * H, sd + 3)});
  }
  std::vector<Status> st = runAll(rk, [&](int r) -> Status {
    Interpreter& in = *rk.interps[size_t(r)];
    const Data& g = data[size_t(m.coord(r, MeshAxis::kDp))];
    const int64_t c = m.coord(r, MeshAxis::kTp);
    LLCDIST_RETURN_IF_ERROR(in.writeBuffer(kSpX, seqSlice(g.x, B, S, n, H, c).data()));
    LLCDIST_RETURN_IF_ERROR(in.writeBuffer(kSpWpe, g.wpe.data()));
    LLCDIST_RETURN_IF_ERROR(in.writeBuffer(kSpDy, seqSlice(g.dy, B, S, n, H, c).data()));
    LLCDIST_RETURN_IF_ERROR(in.writeBuffer(kSpDwpe, g.init.data()));  // garbage: overwritten
    LLCDIST_RETURN_IF_ERROR(in.writeBuffer(kSpDwpeAcc, g.init.data()));
    return in.runSubroutine(0, 0, -1, 0.0, nullptr);
  });
  for (size_t r = 0; r < st.size(); ++r) ASSERT_TRUE(st[r].isOk()) << "rank " << r << ": " << st[r].message();

  for (int64_t d = 0; d < mesh.dp; ++d) {
    const Data& g = data[size_t(d)];
    // The unsharded kernels on the replica's global sequence of Sg positions.
    std::vector<float> y(size_t(B * Sg * H)), dwpe(size_t(P * H)), dwpeAcc = g.init;
    ASSERT_TRUE(positionEmbeddingForward(g.x.data(), g.wpe.data(), y.data(), B, Sg, H, P).isOk());
    ASSERT_TRUE(positionEmbeddingBackwardWeight(g.dy.data(), dwpe.data(), B, Sg, H, P, false).isOk());
    ASSERT_TRUE(positionEmbeddingBackwardWeight(g.dy.data(), dwpeAcc.data(), B, Sg, H, P, true).isOk());
    std::vector<float> sum(size_t(P * H), 0.0f);
    int members = 0;
    for (int r = 0; r < int(m.worldSize()); ++r) {
      if (m.coord(r, MeshAxis::kDp) != d) continue;
      ++members;
      const int64_t c = m.coord(r, MeshAxis::kTp);
      SCOPED_TRACE("dp " + std::to_string(d) + " rank " + std::to_string(r) + " seq shard " + std::to_string(c));
      Interpreter& in = *rk.interps[size_t(r)];
      const std::vector<float> gotY = in.readF32(kSpY).value(), wantY = seqSlice(y, B, S, n, H, c);
      ASSERT_EQ(gotY.size(), wantY.size());
      EXPECT_EQ(std::memcmp(gotY.data(), wantY.data(), gotY.size() * 4), 0) << "y differs from the unsharded slice";
      const std::vector<float> got = in.readF32(kSpDwpe).value(), gotAcc = in.readF32(kSpDwpeAcc).value();
      for (int64_t row = 0; row < P; ++row) {
        const bool mine = row >= c * S && row < (c + 1) * S;
        for (int64_t h = 0; h < H; ++h) {
          const size_t i = size_t(row * H + h);
          EXPECT_EQ(got[i], mine ? dwpe[i] : 0.0f) << "dwpe row " << row;
          EXPECT_EQ(gotAcc[i], mine ? dwpeAcc[i] : g.init[i]) << "accumulated dwpe row " << row;
          sum[i] += got[i];
        }
      }
    }
    ASSERT_EQ(members, n);
    // The plan's all_reduce sum over tp of the overwritten gradients: the unsharded gradient exactly.
    EXPECT_EQ(sum, dwpe);
  }
}

INSTANTIATE_TEST_SUITE_P(Meshes, SequenceParallelTest,
                         ::testing::Values(Mesh2{1, 2, {}}, Mesh2{1, 4, {}}, Mesh2{2, 2, {"dp", "tp", "pp"}}),
                         [](const ::testing::TestParamInfo<Mesh2>& i) {
                           return "dp" + std::to_string(i.param.dp) + "_tp" + std::to_string(i.param.tp) +
                                  (i.param.order.empty() ? "" : "_dp_fastest");
                         });

// ---- Training end to end ---------------------------------------------------------------------------

// A one-layer LM as the compiler emits it for Megatron tp: wte [V,H] and lm_head [V,H] (out_in) both
// vocab-sharded on tp (dim 0); h = all_reduce_sum(embedding) + bias (replicated, bias_add); logits are
// the local vocabulary columns; vocab-parallel cross entropy; dh all-reduced before the bias and
// embedding gradients; grad_norm with the sharded list. tp = 1 is the plain unsharded plan.
testing::PlanBuilder megatronOneLayer(int64_t tp, int64_t V, int64_t H, int64_t T, int64_t B, int64_t micro) {
  testing::PlanBuilder p(V, T, B, micro);
  p.manifest["mesh"]["tp"] = tp;
  json ranks = json::array();
  for (int64_t r = 0; r < tp; ++r) ranks.push_back(r);
  p.manifest["programs"][0]["ranks"] = ranks;
  const bool sharded = tp > 1;
  const int64_t Vl = V / tp, M = B * T;
  const int64_t wte = p.buffer("wte", "param", {Vl, H}), dwte = p.buffer("dwte", "grad", {Vl, H});
  const int64_t mwte = p.buffer("m.wte", "optimizer_state", {Vl, H}), vwte = p.buffer("v.wte", "optimizer_state", {Vl, H});
  const int64_t lm = p.buffer("lm", "param", {Vl, H}), dlm = p.buffer("dlm", "grad", {Vl, H});
  const int64_t mlm = p.buffer("m.lm", "optimizer_state", {Vl, H}), vlm = p.buffer("v.lm", "optimizer_state", {Vl, H});
  const int64_t bias = p.buffer("bias", "param", {H}), db = p.buffer("dbias", "grad", {H});
  const int64_t mb = p.buffer("m.bias", "optimizer_state", {H}), vb = p.buffer("v.bias", "optimizer_state", {H});
  const int64_t ids = p.buffer("ids", "input", {B, T}, "i32"), tgt = p.buffer("targets", "input", {B, T}, "i32");
  const int64_t h = p.buffer("h", "activation", {M, H}), dh = p.buffer("dh", "activation", {M, H});
  const int64_t logits = p.buffer("logits", "activation", {M, Vl});
  const int64_t loss = p.buffer("loss", "metric", {1}), gn = p.buffer("grad_norm", "metric", {});
  const int64_t rowMax = sharded ? p.buffer("row_max", "scratch", {M}, "f64") : -1;
  const int64_t rowSums = sharded ? p.buffer("row_sums", "scratch", {2 * M}, "f64") : -1;
  const int64_t shardedSq = sharded ? p.buffer("grad_norm.sharded_sq", "scratch", {1}, "f64") : -1;
  const int64_t sq = sharded ? p.buffer("grad_norm.sq", "scratch", {1}, "f64") : -1;
  p.param("transformer.wte.weight", {V, H}, wte, dwte, {{"kind", "normal"}, {"std", 0.5}}, false);
  p.param("lm_head.weight", {V, H}, lm, dlm, {{"kind", "normal"}, {"std", 0.5}}, true);
  p.param("transformer.h_bias", {H}, bias, db, {{"kind", "normal"}, {"std", 0.5}}, false);
  if (sharded)
    for (int i : {0, 1}) p.manifest["params"][i]["sharding"] = {{"axis", "tp"}, {"dim", 0}};
  auto shard = [&](json attrs) {
    if (sharded) attrs["shard_axis"] = "tp";
    return attrs;
  };
  const double nm = double(micro);
  p.op("step_begin", "fill_zero", {{"x", {loss, dwte, dlm, db}}});
  p.op("forward", "load_microbatch", {{"ids", ids}, {"targets", tgt}}, {{"B", B}, {"S", T}});
  p.op("forward", "embedding_fwd", {{"ids", ids}, {"table", wte}, {"out", h}}, shard({{"M", M}, {"V", Vl}, {"H", H}}));
  if (sharded) p.op("forward", "all_reduce", {{"x", {h}}}, {{"axis", "tp"}, {"op", "sum"}});
  p.op("forward", "bias_add", {{"y", h}, {"bias", bias}}, {{"M", M}, {"N", H}});
  p.op("forward", "linear_fwd", {{"x", h}, {"w", lm}, {"y", logits}}, {{"M", M}, {"K", H}, {"N", Vl}, {"layout", "out_in"}});
  auto withStats = [&](json args) {
    if (sharded) args.update({{"row_max", rowMax}, {"row_sums", rowSums}});
    return args;
  };
  const json stats = {{"M", M}, {"V", Vl}, {"shard_axis", "tp"}};
  if (sharded) rowStats(p, "forward", logits, tgt, rowMax, rowSums, stats);
  p.op("forward", "cross_entropy_fwd", withStats({{"logits", logits}, {"targets", tgt}, {"loss", loss}}),
       shard({{"M", M}, {"V", Vl}, {"scale", 1.0 / nm}}));
  if (sharded) rowStats(p, "backward", logits, tgt, rowMax, rowSums, stats);
  p.op("backward", "cross_entropy_bwd", withStats({{"logits", logits}, {"targets", tgt}, {"dlogits", logits}}),
       shard({{"M", M}, {"V", Vl}, {"scale", 1.0 / (double(M) * nm)}}));
  p.op("backward", "linear_bwd_weight", {{"dy", logits}, {"x", h}, {"dw", dlm}},
       {{"M", M}, {"K", H}, {"N", Vl}, {"layout", "out_in"}, {"accumulate", true}});
  p.op("backward", "linear_bwd_input", {{"dy", logits}, {"w", lm}, {"dx", dh}},
       {{"M", M}, {"K", H}, {"N", Vl}, {"layout", "out_in"}, {"accumulate", false}});
  if (sharded) p.op("backward", "all_reduce", {{"x", {dh}}}, {{"axis", "tp"}, {"op", "sum"}});
  p.op("backward", "linear_bwd_bias", {{"dy", dh}, {"db", db}}, {{"M", M}, {"N", H}, {"accumulate", true}});
  p.op("backward", "embedding_bwd_weight", {{"ids", ids}, {"dout", dh}, {"dtable", dwte}},
       shard({{"M", M}, {"V", Vl}, {"H", H}, {"accumulate", true}}));
  if (sharded) {  // the split gradients' squared norm over tp, the replicated bias's added, then the clip
    p.op("optimizer", "grad_norm_sq", {{"grads", {dwte, dlm}}, {"sq", shardedSq}});
    p.op("optimizer", "all_reduce", {{"x", {shardedSq}}}, {{"axis", "tp"}, {"op", "sum"}});
    p.op("optimizer", "grad_norm_sq", {{"grads", {db}}, {"add", shardedSq}, {"sq", sq}});
    p.op("optimizer", "grad_norm_clip", {{"sq", sq}, {"grads", {db, dwte, dlm}}, {"norm", gn}}, {{"max_norm", 1.0}});
  } else {
    p.op("optimizer", "grad_norm", {{"grads", {db, dwte, dlm}}, {"norm", gn}}, {{"max_norm", 1.0}});
  }
  for (auto [w, g, m1, v1, wd] : {std::tuple{wte, dwte, mwte, vwte, 0.0}, std::tuple{lm, dlm, mlm, vlm, 0.1},
                                  std::tuple{bias, db, mb, vb, 0.0}})
    p.op("optimizer", "adamw", {{"param", w}, {"grad", g}, {"m", m1}, {"v", v1}},
         {{"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", wd}});
  p.action("step_begin");
  for (int64_t j = 0; j < micro; ++j) {
    p.action("forward", j);
    p.action("backward", j);
  }
  p.action("optimizer");
  return p;
}

class VocabParallelTrainTest : public testing::TempDirTest {};

TEST_F(VocabParallelTrainTest, TensorParallelTrainingMatchesOneRank) {
  std::map<int64_t, RunResult> res;
  std::map<int64_t, std::map<std::string, std::vector<float>>> saved;
  for (int64_t tp : {1, 2, 4}) {
    const fs::path d = dir / ("tp" + std::to_string(tp));
    fs::create_directories(d);
    megatronOneLayer(tp, 32, 8, 8, 2, 2).write(d);
    RunOptions o;
    o.planDir = d.string();
    o.steps = 3;
    o.quiet = true;
    o.seed = 5;
    o.saveParams = path("tp" + std::to_string(tp) + ".safetensors");
    std::ostringstream progress;
    Status s = runTraining(o, progress, &res[tp]);
    ASSERT_TRUE(s.isOk()) << "tp=" << tp << ": " << s.message();
    auto r = SafetensorsReader::open(o.saveParams);
    ASSERT_TRUE(r.isOk()) << r.status().message();
    for (const TensorInfo& t : r->tensors()) saved[tp][t.name] = r->readF32(t.name).value();
  }
  ASSERT_EQ(saved[1].size(), 3u);
  for (int64_t tp : {2, 4})
    for (size_t k = 0; k < 3; ++k) {
      SCOPED_TRACE("tp=" + std::to_string(tp) + " step " + std::to_string(k));
      const StepRecord &a = res[tp].steps.at(k), &b = res[1].steps.at(k);
      EXPECT_NEAR(a.loss, b.loss, 1e-5 * std::abs(b.loss));
      EXPECT_NEAR(a.gradNorm, b.gradNorm, 1e-5 * b.gradNorm);
      if (k == 2)
        for (const auto& [name, want] : saved[1]) {
          const std::vector<float>& got = saved[tp].at(name);
          ASSERT_EQ(got.size(), want.size()) << name;
          double maxRel = 0;
          for (size_t i = 0; i < got.size(); ++i)
            maxRel = std::max(maxRel, std::abs(double(got[i]) - want[i]) / std::max(1e-2, std::abs(double(want[i]))));
          EXPECT_LT(maxRel, 1e-5) << name;
        }
    }
  EXPECT_GT(res[1].steps[0].gradNorm, 0.0);
}

}  // namespace
}  // namespace llcdist::rt

namespace llcdist::rt {
namespace {

// Vocabulary padding (attr real_vocab): logits with R = 11 real columns padded to V = 16 (garbage in
// the padding, large enough to dominate an unmasked softmax) give the unpadded kernel's loss and
// real-column gradient bit for bit, and exactly zero gradient in the padding columns.
TEST(VocabPaddingKernelTest, PaddingColumnsAreOutsideTheSoftmax) {
  const int64_t M = 5, R = 11, V = 16;
  const std::vector<float> real = testing::randn(M * R, 7, 2.0f);
  std::vector<float> padded(size_t(M * V));
  const std::vector<float> junk = testing::randn(M * (V - R), 8, 50.0f);
  for (int64_t m = 0; m < M; ++m) {
    std::copy(real.begin() + m * R, real.begin() + (m + 1) * R, padded.begin() + m * V);
    for (int64_t j = R; j < V; ++j) padded[size_t(m * V + j)] = 100.0f + junk[size_t(m * (V - R) + j - R)];
  }
  const std::vector<int32_t> targets = testing::randIds(M, int32_t(R), 9);
  double want = 0, got = 0;
  ASSERT_TRUE(crossEntropyForward(real.data(), targets.data(), nullptr, &want, M, R).isOk());
  ASSERT_TRUE(crossEntropyForward(padded.data(), targets.data(), nullptr, &got, M, V, R).isOk());
  EXPECT_EQ(std::memcmp(&want, &got, sizeof(double)), 0) << want << " vs " << got;
  std::vector<float> dwant(size_t(M * R)), dgot(size_t(M * V), -1.0f);
  ASSERT_TRUE(crossEntropyBackward(real.data(), targets.data(), dwant.data(), M, R, 0.125f).isOk());
  ASSERT_TRUE(crossEntropyBackward(padded.data(), targets.data(), dgot.data(), M, V, 0.125f, R).isOk());
  for (int64_t m = 0; m < M; ++m) {
    EXPECT_EQ(std::memcmp(dwant.data() + m * R, dgot.data() + m * V, size_t(R) * 4), 0) << "row " << m;
    for (int64_t j = R; j < V; ++j) EXPECT_EQ(dgot[size_t(m * V + j)], 0.0f) << "row " << m << " column " << j;
  }
  // A target in the padding is outside the vocabulary; real_vocab beyond the columns is refused.
  const int32_t pad[1] = {int32_t(R)};
  Status s = crossEntropyForward(padded.data(), pad, nullptr, &got, 1, V, R);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("outside the vocabulary [0, 11)"), std::string::npos) << s.message();
  s = crossEntropyForward(padded.data(), targets.data(), nullptr, &got, M, V, V + 1);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("real vocabulary 17 is outside [1, 16]"), std::string::npos) << s.message();
}

// Vocabulary-parallel over 4 members with 4 local columns each and R = 6 real columns: member 1 holds
// 2 real and 2 padding columns, members 2 and 3 padding only. Every member's loss equals the unpadded
// kernel's on the 6 real columns (up to the order of Σ exp), its gradient the unpadded one on its real
// columns, and exactly zero on the padding.
TEST(VocabPaddingKernelTest, VocabParallelShardsOfPaddingOnly) {
  const int64_t M = 3, n = 4, V = 4, R = 6;
  const std::vector<float> real = testing::randn(M * R, 11, 2.0f);
  const std::vector<int32_t> targets = testing::randIds(M, int32_t(R), 12);
  double want = 0;
  ASSERT_TRUE(crossEntropyForward(real.data(), targets.data(), nullptr, &want, M, R).isOk());
  std::vector<float> dwant(size_t(M * R));
  ASSERT_TRUE(crossEntropyBackward(real.data(), targets.data(), dwant.data(), M, R, 0.5f).isOk());
  std::vector<std::vector<float>> local(size_t(n), std::vector<float>(size_t(M * V)));
  for (int64_t c = 0; c < n; ++c)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < V; ++j) {
        const int64_t g = c * V + j;
        local[size_t(c)][size_t(m * V + j)] = g < R ? real[size_t(m * R + g)] : 1e4f;  // padding: huge
      }
  ShardedLoss got;
  Status s = shardedLoss(local, targets.data(), M, V, 0.5f, R, &got);
  ASSERT_TRUE(s.isOk()) << s.toString();
  const std::vector<double>& loss = got.loss;
  const std::vector<std::vector<float>>& grads = got.dlogits;
  for (int64_t c = 0; c < n; ++c) {
    EXPECT_NEAR(loss[size_t(c)], want, 1e-12 * std::fabs(want)) << "member " << c;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < V; ++j) {
        const int64_t g = c * V + j;
        const float d = grads[size_t(c)][size_t(m * V + j)];
        if (g < R)
          EXPECT_NEAR(d, dwant[size_t(m * R + g)], 1e-7f) << "member " << c << " row " << m << " column " << g;
        else
          EXPECT_EQ(d, 0.0f) << "member " << c << " row " << m << " padding column " << g;
      }
  }
}

}  // namespace
}  // namespace llcdist::rt
