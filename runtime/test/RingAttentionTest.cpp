// Context parallelism's ring attention and its positions (issue #32; docs/plan-format.md "Context
// parallelism"): manifest.mesh.cp_layout and its errors; the positions the binders give a rank's rows
// (position embeddings, RoPE and the attention blocks with an axis) under both layouts, and the ops'
// results at those rows against the whole sequence's; send / recv with a ring `shift`; the data
// sources' rows under the load-balanced layout; and a hand-written ring (attention_block_fwd, send /
// recv by shift, attention_merge, then the backward with the key/value gradients travelling with their
// rows) through interpreters on the in-process communicator, against attention_fwd / _bwd's kernels on
// the whole sequence.
#include "PlanTestUtil.h"
#include "TestUtil.h"

#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Kernels.h"
#include "llcdist/runtime/Plan.h"
#include "llcdist/runtime/Positions.h"
#include "llcdist/runtime/TokenData.h"
#include "ops/OpDefs.h"
#include "train/TrainParts.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <thread>

namespace llcdist::rt {
namespace {

using testing::expectAllClose;
using testing::expectParts;
using testing::json;
using testing::PlanBuilder;
using testing::randn;
namespace sc = schema;

constexpr CpLayout kLayouts[] = {CpLayout::kContiguous, CpLayout::kLoadBalanced};

std::string layoutName(CpLayout l) { return std::string(sc::cpLayoutName(l)); }

// A plan's manifest over cp ranks (dp = tp = pp = 1), with mesh.cp_layout when `layout` is not empty.
PlanBuilder cpPlan(int64_t cp, int64_t seqLen, const std::string& layout, int64_t microBatch = 1) {
  PlanBuilder b(16, seqLen, microBatch, 1);
  b.manifest["features"] = {"context_parallel"};
  b.manifest["mesh"]["cp"] = cp;
  if (!layout.empty()) b.manifest["mesh"]["cp_layout"] = layout;
  std::vector<int64_t> ranks;
  for (int64_t r = 0; r < cp; ++r) ranks.push_back(r);
  b.manifest["programs"][0]["ranks"] = ranks;
  return b;
}

StatusOr<Manifest> manifestOf(const PlanBuilder& b) { return parseManifest(b.manifest.dump(), "manifest.json"); }

// The S rows at positions `pos` of every batch of a [B, T, width] tensor.
template <class V>
V rowsAt(const V& t, int64_t B, int64_t T, int64_t width, const PositionRuns& pos, int64_t S) {
  V out;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      out.insert(out.end(), t.begin() + (b * T + pos.at(s)) * width, t.begin() + (b * T + pos.at(s) + 1) * width);
  return out;
}

// ---- manifest.mesh.cp_layout ---------------------------------------------------------------------------

TEST(CpLayoutManifestTest, AbsentIsContiguousAndBothNamesLoad) {
  auto m = manifestOf(cpPlan(2, 8, ""));
  ASSERT_TRUE(m.isOk()) << m.status().message();
  EXPECT_EQ(m->cpLayout, CpLayout::kContiguous);
  for (CpLayout l : kLayouts) {
    m = manifestOf(cpPlan(2, 8, layoutName(l)));
    ASSERT_TRUE(m.isOk()) << m.status().message();
    EXPECT_EQ(m->cpLayout, l);
  }
  // cp = 1: the load-balanced layout is the identity (T even).
  m = manifestOf(cpPlan(1, 8, "load_balanced"));
  ASSERT_TRUE(m.isOk()) << m.status().message();
  const PositionRuns one = contextParallelPositions(8, 1, 0, m->cpLayout);
  for (int64_t s = 0; s < 8; ++s) EXPECT_EQ(one.at(s), s);
}

TEST(CpLayoutManifestTest, Errors) {
  expectParts(manifestOf(cpPlan(2, 8, "striped")).status(),
              {"manifest.json", "mesh.cp_layout", "unknown layout \"striped\"", "\"contiguous\", \"load_balanced\""});
  expectParts(manifestOf(cpPlan(2, 6, "load_balanced")).status(),
              {"mesh.cp_layout", "load_balanced needs batch.seq_len divisible by 2·cp = 4", "got seq_len 6"});
  expectParts(manifestOf(cpPlan(4, 12, "load_balanced")).status(), {"mesh.cp_layout", "2·cp = 8"});
  EXPECT_TRUE(manifestOf(cpPlan(2, 6, "contiguous")).isOk());
  PlanBuilder b = cpPlan(2, 8, "");
  b.manifest["mesh"]["cp_layout"] = 1;
  expectParts(manifestOf(b).status(), {"mesh.cp_layout"});
}

// ---- binders and checkers -------------------------------------------------------------------------------

// A manifest of cp ranks over a sequence of T, in `layout`.
Manifest cpManifest(int64_t cp, int64_t T, CpLayout layout) {
  Manifest m;
  m.meshCp = cp;
  m.seqLen = T;
  m.cpLayout = layout;
  return m;
}

StatusOr<OpParams> bindWith(const Manifest& m, sc::OpKind kind, std::map<std::string, AttrValue> attrs, int rank) {
  Op op;
  op.kind = kind;
  op.attrs = std::move(attrs);
  return ops::opDefs().find(kind)->bind(ops::BindContext{op, m, m.mesh(), rank});
}

void expectRuns(const PositionRuns& got, const PositionRuns& want, int64_t S) {
  for (int64_t s = 0; s < S; ++s) EXPECT_EQ(got.at(s), want.at(s)) << "row " << s;
}

TEST(RingBinderTest, RowsGetTheirLayoutsPositions) {
  constexpr int64_t n = 4, T = 16, S = T / n;
  for (CpLayout layout : kLayouts)
    for (int c = 0; c < n; ++c) {
      SCOPED_TRACE(layoutName(layout) + " rank " + std::to_string(c));
      const Manifest m = cpManifest(n, T, layout);
      auto pos =
          bindWith(m, sc::OpKind::kPosEmbeddingFwd,
                   {{"B", int64_t(1)}, {"S", S}, {"H", int64_t(2)}, {"P", T}, {"shard_axis", std::string("cp")}}, c);
      ASSERT_TRUE(pos.isOk()) << pos.status().message();
      expectRuns(std::get<EmbeddingParams>(*pos).positions(), contextParallelPositions(T, n, c, layout), S);
      // The block of step 1: this rank's rows against member (c − 1) mod n's.
      auto blk = bindWith(m, sc::OpKind::kAttentionBlockBwd,
                          {{"B", int64_t(1)},
                           {"S", S},
                           {"nh", int64_t(2)},
                           {"nkv", int64_t(1)},
                           {"hd", int64_t(4)},
                           {"axis", std::string("cp")},
                           {"step", int64_t(1)}},
                          c);
      ASSERT_TRUE(blk.isOk()) << blk.status().message();
      const auto& a = std::get<AttentionParams>(*blk);
      expectRuns(a.qPos, contextParallelPositions(T, n, c, layout), S);
      expectRuns(a.kvPos, contextParallelPositions(T, n, (c + n - 1) % n, layout), S);
    }
  // Another axis: contiguous rows of its coordinate, whatever cp's layout (dp 2: rank 1 holds [4, 8)).
  Manifest m = cpManifest(2, 8, CpLayout::kLoadBalanced);
  m.meshDp = 2;
  auto dp = bindWith(m, sc::OpKind::kRopeFwd,
                     {{"B", int64_t(1)},
                      {"S", int64_t(4)},
                      {"n", int64_t(1)},
                      {"hd", int64_t(2)},
                      {"theta", 1e4},
                      {"shard_axis", std::string("dp")}},
                     2);  // rank 2 = cp 0, dp 1 (order tp, cp, dp, pp)
  ASSERT_TRUE(dp.isOk()) << dp.status().message();
  expectRuns(std::get<RopeParams>(*dp).table->positions, PositionRuns::from(4), 4);
}

// shard_axis "tp+cp" (sequence parallelism inside context parallelism): tp coordinate t holds rows
// [t·S, (t+1)·S) of its cp slice. tp = 3 over cp slices of 6 rows: under load balancing tp rank 1's
// rows straddle the slice's two chunks.
TEST(RingBinderTest, SequenceParallelRowsAreTpsPartOfTheCpSlice) {
  constexpr int64_t cp = 2, tp = 3, S = 2, T = S * tp * cp;
  for (CpLayout layout : kLayouts) {
    Manifest m = cpManifest(cp, T, layout);
    m.meshTp = tp;
    std::vector<int64_t> seen;
    for (int rank = 0; rank < cp * tp; ++rank) {
      const int64_t t = rank % tp, c = rank / tp;  // rank order tp, cp, dp, pp
      SCOPED_TRACE(layoutName(layout) + " rank " + std::to_string(rank));
      for (const char* axes : {"tp+cp", "cp+tp"}) {
        auto pos = bindWith(m, sc::OpKind::kPosEmbeddingBwdWeight,
                            {{"B", int64_t(1)},
                             {"S", S},
                             {"H", int64_t(2)},
                             {"P", T},
                             {"accumulate", false},
                             {"shard_axis", std::string(axes)}},
                            rank);
        ASSERT_TRUE(pos.isOk()) << pos.status().message();
        const PositionRuns slice = contextParallelPositions(T, cp, c, layout);
        const PositionRuns got = std::get<EmbeddingParams>(*pos).positions();
        for (int64_t s = 0; s < S; ++s) EXPECT_EQ(got.at(s), slice.at(t * S + s)) << "row " << s;
        if (axes[0] == 't')
          for (int64_t s = 0; s < S; ++s) seen.push_back(got.at(s));
      }
    }
    std::sort(seen.begin(), seen.end());  // every position once
    ASSERT_EQ(seen.size(), size_t(T));
    for (int64_t i = 0; i < T; ++i) EXPECT_EQ(seen[size_t(i)], i);
  }
}

// send / recv with a ring shift: the peer is member (c + shift) mod n of the axis.
TEST(RingBinderTest, ShiftNamesTheRingNeighbour) {
  Manifest m;
  m.meshDp = 2;
  m.meshTp = 4;  // rank 6: dp 1, tp 2
  auto send =
      bindWith(m, sc::OpKind::kSend, {{"axis", std::string("tp")}, {"shift", int64_t(1)}, {"tag", int64_t(0)}}, 6);
  ASSERT_TRUE(send.isOk()) << send.status().message();
  EXPECT_EQ(std::get<CommunicationParams>(*send).peer, 7);
  auto wrap =
      bindWith(m, sc::OpKind::kSend, {{"axis", std::string("tp")}, {"shift", int64_t(2)}, {"tag", int64_t(0)}}, 6);
  ASSERT_TRUE(wrap.isOk());
  EXPECT_EQ(std::get<CommunicationParams>(*wrap).peer, 4);  // tp (2 + 2) mod 4 = 0
  auto recv =
      bindWith(m, sc::OpKind::kRecv, {{"axis", std::string("tp")}, {"shift", int64_t(3)}, {"tag", int64_t(5)}}, 4);
  ASSERT_TRUE(recv.isOk());
  EXPECT_EQ(std::get<CommunicationParams>(*recv).peer, 7);  // tp 0 receives from tp 3 = (0 + 3) mod 4
  EXPECT_EQ(std::get<CommunicationParams>(*recv).tag, 5);
  auto dp =
      bindWith(m, sc::OpKind::kRecv, {{"axis", std::string("dp")}, {"shift", int64_t(1)}, {"tag", int64_t(0)}}, 6);
  ASSERT_TRUE(dp.isOk());
  EXPECT_EQ(std::get<CommunicationParams>(*dp).peer, 2);
}

// The loader's errors of the ring's ops, on a cp = 2 plan over T = 8.
Status opError(const std::string& layout, const std::string& op, json args, json attrs,
               std::initializer_list<std::pair<const char*, int64_t>> buffers) {
  PlanBuilder b = cpPlan(2, 8, layout);
  std::map<std::string, int64_t> ids;
  for (const auto& [name, elems] : buffers) ids[name] = b.buffer(name, "activation", {elems});
  for (auto it = args.begin(); it != args.end(); ++it) *it = ids.at(it->get<std::string>());
  b.op("s", op, args, attrs);
  b.action("s");
  auto m = manifestOf(b);
  if (!m.isOk()) return m.status();
  return parseProgram(b.program.dump(), "program-0.json", *m).status();
}

// A position embedding's shard_axis is one axis or tp+cp; the table holds S·cp·tp positions.
TEST(RingCheckerTest, PositionEmbeddingsSequenceAxes) {
  const json args = {{"x", "x"}, {"wpe", "wpe"}, {"y", "y"}};
  auto fwd = [&](json shardAxis, int64_t S, int64_t P) {
    return opError("load_balanced", "pos_embedding_fwd", args,
                   {{"B", 1}, {"S", S}, {"H", 2}, {"P", P}, {"shard_axis", shardAxis}},
                   {{"x", 2 * S}, {"wpe", 2 * P}, {"y", 2 * S}});
  };
  expectParts(fwd("dp+cp", 4, 8), {"attrs.shard_axis", "\"dp+cp\"", "one mesh axis or \"tp+cp\""});
  expectParts(fwd("xp+cp", 4, 8), {"attrs.shard_axis", "unknown mesh axis"});
  // tp is 1 in this plan: n = cp = 2, and S·n = 8 fits P = 8, not P = 7.
  EXPECT_TRUE(fwd("tp+cp", 4, 8).isOk());
  expectParts(fwd("tp+cp", 4, 7), {"attrs.S", "need S·n = 8 positions", "P = 7"});
  // Under load balancing the cp slice's S·tp rows are two runs: S = 3 at tp = 1 is odd.
  expectParts(fwd("tp+cp", 3, 8), {"attrs.S", "is odd"});
}

TEST(RingCheckerTest, BlockMergeRopeAndShiftErrors) {
  const json fwdArgs = {{"q", "q"}, {"k", "k"}, {"v", "v"}, {"out", "out"}, {"lse", "lse"}};
  auto fwd = [&](const std::string& layout, int64_t S, int64_t step) {
    const json attrs = {{"B", 1}, {"S", S}, {"nh", 2}, {"nkv", 1}, {"hd", 4}, {"axis", "cp"}, {"step", step}};
    return opError(layout, "attention_block_fwd", fwdArgs, attrs,
                   {{"q", S * 8}, {"k", S * 4}, {"v", S * 4}, {"out", S * 8}, {"lse", S * 2}});
  };
  EXPECT_TRUE(fwd("load_balanced", 4, 1).isOk()) << fwd("load_balanced", 4, 1).message();
  expectParts(fwd("", 4, 2), {"program-0.json", "attrs.step", "step 2 is out of range", "\"cp\" has size 2"});
  expectParts(fwd("load_balanced", 3, 0), {"attrs.S", "load_balanced", "S = 3 is odd"});
  EXPECT_TRUE(fwd("contiguous", 3, 0).isOk());
  const json mergeArgs = {{"out", "out"}, {"lse", "lse"}, {"out_b", "ob"}, {"lse_b", "lb"}};
  const json mergeAttrs = {{"B", 1}, {"S", 4}, {"nh", 2}, {"hd", 4}};
  EXPECT_TRUE(
      opError("", "attention_merge", mergeArgs, mergeAttrs, {{"out", 32}, {"lse", 8}, {"ob", 32}, {"lb", 8}}).isOk());
  expectParts(opError("", "attention_merge", mergeArgs, mergeAttrs, {{"out", 32}, {"lse", 8}, {"ob", 32}, {"lb", 6}}),
              {"args.lse_b", "expected B×nh×S = 8"});
  const json rope = {{"B", 1}, {"S", 3}, {"n", 1}, {"hd", 2}, {"theta", 1e4}, {"shard_axis", "cp"}};
  expectParts(opError("load_balanced", "rope_fwd", {{"x", "x"}, {"y", "y"}}, rope, {{"x", 6}, {"y", 6}}),
              {"attrs.S", "S = 3 is odd"});
  json ropeSp = rope;
  ropeSp["shard_axis"] = "sp";
  expectParts(opError("", "rope_fwd", {{"x", "x"}, {"y", "y"}}, ropeSp, {{"x", 6}, {"y", 6}}),
              {"attrs.shard_axis", "unknown mesh axis \"sp\""});
  // Exactly one of peer and shift, and 1 <= shift <= n − 1.
  auto p2p = [](json attrs) { return opError("", "send", {{"x", "x"}}, attrs, {{"x", 4}}); };
  EXPECT_TRUE(p2p({{"axis", "cp"}, {"shift", 1}, {"tag", 0}}).isOk());
  expectParts(p2p({{"axis", "cp"}, {"shift", 2}, {"tag", 0}}),
              {"attrs.shift", "shift 2 is out of range", "shifts 1..1"});
  expectParts(p2p({{"axis", "cp"}, {"shift", 1}, {"peer", 1}, {"tag", 0}}), {"attrs.shift", "not both"});
  expectParts(p2p({{"axis", "cp"}, {"tag", 0}}), {"attrs.peer", "required", "shift"});
  expectParts(p2p({{"axis", "cp"}, {"shift", 0}, {"tag", 0}}), {"attrs.shift"});
}

// ---- the ops at the rows' positions ------------------------------------------------------------------

// rope_fwd with shard_axis cp: rank c's rows rotated by their own positions, the whole sequence's
// rotation of those rows, bit for bit.
TEST(RingPositionsTest, RopeRotatesEachRowByItsPosition) {
  constexpr int64_t n = 4, T = 16, S = T / n, B = 2, heads = 2, hd = 8, width = heads * hd;
  const std::vector<float> x = randn(B * T * width, 31);
  const RopeTable whole = makeRopeTable(RopeConfig{}, hd, 0, T).value();
  std::vector<float> y(x.size());
  ASSERT_TRUE(ropeForward(whole, x.data(), y.data(), B, T, heads, hd).isOk());
  for (CpLayout layout : kLayouts)
    for (int c = 0; c < n; ++c) {
      SCOPED_TRACE(layoutName(layout) + " rank " + std::to_string(c));
      auto bound = bindWith(
          cpManifest(n, T, layout), sc::OpKind::kRopeFwd,
          {{"B", B}, {"S", S}, {"n", heads}, {"hd", hd}, {"theta", 1e4}, {"shard_axis", std::string("cp")}}, c);
      ASSERT_TRUE(bound.isOk()) << bound.status().message();
      const RopeParams& p = std::get<RopeParams>(*bound);
      const PositionRuns pos = contextParallelPositions(T, n, c, layout);
      const std::vector<float> xLocal = rowsAt(x, B, T, width, pos, S);
      std::vector<float> yLocal(xLocal.size()), back(xLocal.size());
      ASSERT_TRUE(ropeForward(*p.table, xLocal.data(), yLocal.data(), B, S, heads, hd).isOk());
      EXPECT_EQ(yLocal, rowsAt(y, B, T, width, pos, S));
      ASSERT_TRUE(ropeBackward(*p.table, yLocal.data(), back.data(), B, S, heads, hd).isOk());
      expectAllClose(back, xLocal, 1e-5, 1e-5, "rope_bwd undoes rope_fwd");
    }
}

// pos_embedding_fwd / _bwd_weight with shard_axis cp: rank c adds the table rows of its positions, and
// the ranks' gradients (accumulate false: disjoint rows) sum to the whole sequence's exactly.
TEST(RingPositionsTest, PositionEmbeddingsReadAndWriteTheRowsOfTheirPositions) {
  constexpr int64_t n = 2, T = 8, S = T / n, B = 2, H = 3, P = 10;
  const std::vector<float> x = randn(B * T * H, 41), wpe = randn(P * H, 42), dy = randn(B * T * H, 43);
  std::vector<float> y(x.size()), dwpe(size_t(P * H));
  ASSERT_TRUE(positionEmbeddingForward(x.data(), wpe.data(), y.data(), B, T, H, P).isOk());
  ASSERT_TRUE(positionEmbeddingBackwardWeight(dy.data(), dwpe.data(), B, T, H, P, false).isOk());
  for (CpLayout layout : kLayouts) {
    SCOPED_TRACE(layoutName(layout));
    std::vector<float> sum(dwpe.size(), 0.0f);
    for (int c = 0; c < n; ++c) {
      auto bound = bindWith(
          cpManifest(n, T, layout), sc::OpKind::kPosEmbeddingBwdWeight,
          {{"B", B}, {"S", S}, {"H", H}, {"P", P}, {"accumulate", false}, {"shard_axis", std::string("cp")}}, c);
      ASSERT_TRUE(bound.isOk()) << bound.status().message();
      const PositionRuns bp = std::get<EmbeddingParams>(*bound).positions();
      const PositionRuns pos = contextParallelPositions(T, n, c, layout);
      const std::vector<float> xLocal = rowsAt(x, B, T, H, pos, S);
      std::vector<float> yLocal(xLocal.size()), dLocal(dwpe.size());
      ASSERT_TRUE(positionEmbeddingForward(xLocal.data(), wpe.data(), yLocal.data(), B, S, H, P, bp).isOk());
      EXPECT_EQ(yLocal, rowsAt(y, B, T, H, pos, S));
      ASSERT_TRUE(
          positionEmbeddingBackwardWeight(rowsAt(dy, B, T, H, pos, S).data(), dLocal.data(), B, S, H, P, false, bp)
              .isOk());
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += dLocal[i];
    }
    EXPECT_EQ(sum, dwpe);
  }
  // A second run past the table is refused, naming the positions.
  std::vector<float> out(size_t(B * S * H));
  expectParts(positionEmbeddingForward(x.data(), wpe.data(), out.data(), B, S, H, P, PositionRuns{0, 2, 9}),
              {"positions [9, 11)", "10 positions"});
}

// The loader's fit check uses the layout's largest position: member 0's last under load balancing.
TEST(RingPositionsTest, PositionTableMustHoldEveryMembersRows) {
  const json attrs = {{"B", 1}, {"S", 4}, {"H", 2}, {"P", 7}, {"shard_axis", "cp"}};
  for (const char* layout : {"contiguous", "load_balanced"})
    expectParts(opError(layout, "pos_embedding_fwd", {{"x", "x"}, {"wpe", "wpe"}, {"y", "y"}}, attrs,
                        {{"x", 8}, {"wpe", 14}, {"y", 8}}),
                {"attrs.S", "need S·n = 8 positions", "P = 7"});
}

// ---- the data sources ---------------------------------------------------------------------------------

// A source's microbatch of [B, s] rows.
std::pair<std::vector<int32_t>, std::vector<int32_t>> batchOf(const MicrobatchSource& src, int64_t B, int64_t s) {
  std::vector<int32_t> ids(size_t(B * s)), targets(size_t(B * s));
  EXPECT_TRUE(src(1, 0, ids.data(), targets.data(), B, s).isOk());
  return {ids, targets};
}

// Rank c of cp reads the whole sample's tokens at its positions (inputs and targets), for the synthetic
// source and a token file.
class RingDataTest : public testing::TempDirTest {};

TEST_F(RingDataTest, SourcesReadTheLayoutsPositions) {
  constexpr int64_t n = 2, T = 8, B = 2, S = T / n;
  std::vector<uint16_t> toks(200);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = uint16_t((i * 7 + 3) % 16);
  const std::string file = path("tokens.bin");
  ASSERT_TRUE(writeTokenFile(file, toks.data(), int64_t(toks.size())).isOk());
  for (const std::string& data : {std::string("synthetic"), file})
    for (CpLayout layout : kLayouts) {
      SCOPED_TRACE(data + " " + layoutName(layout));
      auto whole = manifestOf(cpPlan(1, T, "", B));
      auto split = manifestOf(cpPlan(n, T, layoutName(layout), B));
      ASSERT_TRUE(whole.isOk() && split.isOk()) << whole.status().message() << split.status().message();
      auto wholeSrc = train::makeDataSources(*whole, data, true, 7),
           splitSrc = train::makeDataSources(*split, data, true, 7);
      ASSERT_TRUE(wholeSrc.isOk() && splitSrc.isOk()) << wholeSrc.status().message() << splitSrc.status().message();
      const auto [ids, targets] = batchOf((*wholeSrc)(0, 0), B, T);
      for (int64_t c = 0; c < n; ++c) {
        const PositionRuns pos = contextParallelPositions(T, n, c, layout);
        const auto [ci, ct] = batchOf((*splitSrc)(0, c), B, S);
        EXPECT_EQ(ci, rowsAt(ids, B, T, 1, pos, S)) << "rank " << c;
        EXPECT_EQ(ct, rowsAt(targets, B, T, 1, pos, S)) << "rank " << c;
      }
    }
}

// ---- the ring through interpreters ----------------------------------------------------------------------

struct RingShape {
  int64_t n, B, T, nh, nkv, hd;
  int64_t window = 0;  // the blocks' attr `window` (Mistral's sliding window); 0: absent
  int64_t S() const { return T / n; }
};

// The buffers of the ring plan (ids in program-0.json).
struct RingBuffers {
  int64_t q, k, v, dout, out, lse, outB, lseB, dq, dk, dv;
  int64_t kr[2], vr[2], dkr[2], dvr[2];  // the rows received at each step (alternating) and their gradients
};

// Appends send (shift 1) of each `from` and recv (shift n − 1) into each `to`, one tag per pair.
void exchange(PlanBuilder& b, int64_t n, int64_t* tag, std::initializer_list<std::pair<int64_t, int64_t>> moves) {
  for (const auto& [from, to] : moves) {
    b.op("s", "send", {{"x", from}}, {{"axis", "cp"}, {"shift", 1}, {"tag", *tag}});
    b.op("s", "recv", {{"y", to}}, {{"axis", "cp"}, {"shift", n - 1}, {"tag", *tag}});
    ++*tag;
  }
}

// The forward ring (attention_block_fwd at each step, the next member's rows from the previous member,
// merged into out and lse), then the backward ring (the key/value rows again, each step's dk and dv
// travelling with them, returned to their member after the last step).
PlanBuilder ringPlan(const RingShape& r, CpLayout layout, RingBuffers* ids) {
  PlanBuilder b = cpPlan(r.n, r.T, layoutName(layout), r.B);
  const int64_t S = r.S();
  auto buf = [&](const std::string& name, int64_t heads) {
    return b.buffer(name, "activation", {r.B, S, heads, r.hd});
  };
  RingBuffers& x = *ids;
  x.q = buf("q", r.nh), x.k = buf("k", r.nkv), x.v = buf("v", r.nkv), x.dout = buf("dout", r.nh);
  x.out = buf("out", r.nh), x.outB = buf("out_b", r.nh), x.dq = buf("dq", r.nh);
  x.dk = buf("dk", r.nkv), x.dv = buf("dv", r.nkv);
  x.lse = b.buffer("lse", "activation", {r.B, r.nh, S}), x.lseB = b.buffer("lse_b", "activation", {r.B, r.nh, S});
  for (int i = 0; i < 2; ++i) {
    const std::string at = std::to_string(i);
    x.kr[i] = buf("k_ring" + at, r.nkv), x.vr[i] = buf("v_ring" + at, r.nkv);
    x.dkr[i] = buf("dk_ring" + at, r.nkv), x.dvr[i] = buf("dv_ring" + at, r.nkv);
  }
  const json shape = {{"B", r.B}, {"S", S}, {"nh", r.nh}, {"nkv", r.nkv}, {"hd", r.hd}, {"axis", "cp"}};
  auto attrs = [&](int64_t step) {
    json a = shape;
    a["step"] = step;
    if (r.window > 0) a["window"] = r.window;
    return a;
  };
  auto kAt = [&](int64_t step) { return step == 0 ? x.k : x.kr[step % 2]; };
  auto vAt = [&](int64_t step) { return step == 0 ? x.v : x.vr[step % 2]; };
  int64_t tag = 0;
  b.op("s", "attention_block_fwd", {{"q", x.q}, {"k", x.k}, {"v", x.v}, {"out", x.out}, {"lse", x.lse}}, attrs(0));
  for (int64_t step = 1; step < r.n; ++step) {
    exchange(b, r.n, &tag, {{kAt(step - 1), kAt(step)}, {vAt(step - 1), vAt(step)}});
    b.op("s", "attention_block_fwd", {{"q", x.q}, {"k", kAt(step)}, {"v", vAt(step)}, {"out", x.outB}, {"lse", x.lseB}},
         attrs(step));
    b.op("s", "attention_merge", {{"out", x.out}, {"lse", x.lse}, {"out_b", x.outB}, {"lse_b", x.lseB}},
         {{"B", r.B}, {"S", S}, {"nh", r.nh}, {"hd", r.hd}});
  }
  b.op("s", "fill_zero", {{"x", {x.dq, x.dkr[0], x.dvr[0]}}});
  for (int64_t step = 0; step < r.n; ++step) {
    if (step > 0)
      exchange(b, r.n, &tag,
               {{kAt(step - 1), kAt(step)},
                {vAt(step - 1), vAt(step)},
                {x.dkr[(step - 1) % 2], x.dkr[step % 2]},
                {x.dvr[(step - 1) % 2], x.dvr[step % 2]}});
    b.op("s", "attention_block_bwd",
         {{"dout", x.dout},
          {"q", x.q},
          {"k", kAt(step)},
          {"v", vAt(step)},
          {"out", x.out},
          {"lse", x.lse},
          {"dq", x.dq},
          {"dk", x.dkr[step % 2]},
          {"dv", x.dvr[step % 2]}},
         attrs(step));
  }
  exchange(b, r.n, &tag, {{x.dkr[(r.n - 1) % 2], x.dk}, {x.dvr[(r.n - 1) % 2], x.dv}});
  b.action("s");
  return b;
}

// Runs the plan on every rank (one thread a rank): `in` writes a rank's inputs, `out` reads its results.
void runRanks(const PlanBuilder& b, int world, const std::function<Status(int, Interpreter&)>& in,
              const std::function<Status(int, Interpreter&)>& out) {
  Plan plan;
  auto m = manifestOf(b);
  ASSERT_TRUE(m.isOk()) << m.status().message();
  plan.manifest = *m;
  auto prog = parseProgram(b.program.dump(), "program-0.json", plan.manifest);
  ASSERT_TRUE(prog.isOk()) << prog.status().message();
  plan.programs.push_back(std::move(prog).value());
  InProcessCommunicatorOptions co;
  co.worldSize = world;
  co.mesh = plan.manifest.mesh();
  auto comm = makeInProcessCommunicator(co);
  std::vector<std::unique_ptr<Backend>> be(static_cast<size_t>(world));
  std::vector<std::unique_ptr<Interpreter>> interp(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    CpuBackendOptions bo;
    bo.rank = r;
    bo.communicator = comm.get();
    be[size_t(r)] = makeCpuBackend(bo);
    auto i = Interpreter::create(plan, 0, *be[size_t(r)], r);
    ASSERT_TRUE(i.isOk()) << i.status().message();
    interp[size_t(r)] = std::move(i).value();
  }
  std::vector<Status> st(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      Interpreter& it = *interp[size_t(r)];
      Status s = in(r, it);
      if (s.isOk()) s = it.runSubroutine(0, 0, -1, 0.0, nullptr);
      if (s.isOk()) s = out(r, it);
      st[size_t(r)] = s;
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_TRUE(st[size_t(r)].isOk()) << "rank " << r << ": " << st[size_t(r)].message();
}

// Also with attr `window` 3 on the blocks (wider than the load-balanced layout's chunks of 2 positions,
// narrower than a rank's rows): the windowed whole-sequence kernels' results.
class RingInterpreterTest : public ::testing::TestWithParam<std::tuple<int64_t, CpLayout, int64_t>> {};

TEST_P(RingInterpreterTest, TheRingIsTheWholeSequencesAttention) {
  const auto [n, layout, window] = GetParam();
  const RingShape r{n, 2, 4 * n, 4, 2, 8, window};
  const int64_t T = r.T, S = r.S(), qw = r.nh * r.hd, kw = r.nkv * r.hd;
  const AttentionShape whole{r.B, T, r.nh, r.nkv, r.hd, window};
  const std::vector<float> q = randn(r.B * T * qw, 51), k = randn(r.B * T * kw, 52), v = randn(r.B * T * kw, 53),
                           dout = randn(r.B * T * qw, 54);
  std::vector<float> out(q.size()), lse(size_t(r.B * r.nh * T)), dq(q.size()), dk(k.size()), dv(v.size());
  ASSERT_TRUE(attentionForward(whole, q.data(), k.data(), v.data(), out.data(), lse.data()).isOk());
  ASSERT_TRUE(attentionBackward(whole, dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), dq.data(),
                                dk.data(), dv.data())
                  .isOk());
  RingBuffers ids{};
  const PlanBuilder b = ringPlan(r, layout, &ids);
  std::vector<std::map<int64_t, std::vector<float>>> got(static_cast<size_t>(n));
  auto in = [&](int c, Interpreter& it) -> Status {
    const PositionRuns pos = contextParallelPositions(T, n, c, layout);
    using Input = std::tuple<int64_t, const std::vector<float>*, int64_t>;  // buffer, whole tensor, row width
    for (const auto& [id, t, w] :
         {Input{ids.q, &q, qw}, Input{ids.k, &k, kw}, Input{ids.v, &v, kw}, Input{ids.dout, &dout, qw}})
      LLCDIST_RETURN_IF_ERROR(it.writeBuffer(id, rowsAt(*t, r.B, T, w, pos, S).data()));
    return Status::ok();
  };
  auto read = [&](int c, Interpreter& it) -> Status {
    for (int64_t id : {ids.out, ids.lse, ids.dq, ids.dk, ids.dv}) {
      LLCDIST_ASSIGN_OR_RETURN(got[size_t(c)][id], it.readF32(id));
    }
    return Status::ok();
  };
  runRanks(b, int(n), in, read);
  for (int c = 0; c < n; ++c) {
    SCOPED_TRACE("rank " + std::to_string(c));
    const PositionRuns pos = contextParallelPositions(T, n, c, layout);
    std::vector<float> lseRows;  // lse [B, nh, T] at the rank's positions
    for (int64_t bh = 0; bh < r.B * r.nh; ++bh)
      for (int64_t s = 0; s < S; ++s) lseRows.push_back(lse[size_t(bh * T + pos.at(s))]);
    expectAllClose(got[size_t(c)][ids.out], rowsAt(out, r.B, T, qw, pos, S), 1e-5, 1e-5, "out");
    expectAllClose(got[size_t(c)][ids.lse], lseRows, 1e-5, 1e-5, "lse");
    expectAllClose(got[size_t(c)][ids.dq], rowsAt(dq, r.B, T, qw, pos, S), 1e-5, 1e-5, "dq");
    expectAllClose(got[size_t(c)][ids.dk], rowsAt(dk, r.B, T, kw, pos, S), 1e-5, 1e-5, "dk");
    expectAllClose(got[size_t(c)][ids.dv], rowsAt(dv, r.B, T, kw, pos, S), 1e-5, 1e-5, "dv");
  }
}

INSTANTIATE_TEST_SUITE_P(CpAndLayouts, RingInterpreterTest,
                         ::testing::Combine(::testing::Values(int64_t(2), int64_t(4)),
                                            ::testing::Values(CpLayout::kContiguous, CpLayout::kLoadBalanced),
                                            ::testing::Values(int64_t(0), int64_t(3))),
                         [](const auto& info) {
                           const int64_t window = std::get<2>(info.param);
                           return "cp" + std::to_string(std::get<0>(info.param)) + "_" +
                                  layoutName(std::get<1>(info.param)) +
                                  (window > 0 ? "_window" + std::to_string(window) : "");
                         });

}  // namespace
}  // namespace llcdist::rt
