// Expert parallelism (docs/plan-format.md "Expert parallelism"): the derived mesh axes ep and edp (their
// groups listed by hand on dp=4, ep=2, tp=2), all_to_all_v on the in-process communicator (and its
// default over allToAll) against a reference written here, moe_chunk_transpose's CPU kernel against
// hand-rolled loops, grad_norm_sq's list of `add`s, the loader's rules (mesh.ep, the feature, the axes,
// the ops' counts) and an 8-rank plan of all_to_all_v / moe_chunk_transpose / all_reduce over ep and edp
// through interpreters (and all_to_all_v of bf16 rows, with and without dtype "bf16"), and params sharded
// on "ep" (save, the replica check, file tensors).
#include "PlanTestUtil.h"
#include "InProcessRanksUtil.h"
#include "TestUtil.h"

#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Kernels.h"
#include "llcdist/runtime/Mesh.h"
#include "llcdist/runtime/Plan.h"
#include "llcdist/runtime/Safetensors.h"
#include "train/TrainParts.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <thread>

#include <unistd.h>

namespace llcdist::rt {
namespace {

using testing::expectParts;
using testing::json;
using testing::PlanBuilder;
using testing::runRanks;

// ---- the mesh ---------------------------------------------------------------------------------------------

// dp=4, ep=2, tp=2, rank_order tp, dp, pp: rank = tp + 2·d (d the dp coordinate). ep groups: dp members
// {2⌊d/2⌋, 2⌊d/2⌋ + 1}; edp groups: the dp members with the same d mod 2.
TEST(ExpertParallelMeshTest, EpAndEdpGroupsListedByHand) {
  Mesh m = Mesh::make(4, 2, 1);
  m.ep = 2;
  ASSERT_TRUE(m.setOrder({MeshAxis::kTp, MeshAxis::kDp, MeshAxis::kPp}));
  EXPECT_EQ(m.axisSize(MeshAxis::kEp), 2);
  EXPECT_EQ(m.axisSize(MeshAxis::kEdp), 2);
  const std::vector<std::vector<int>> ep = {{0, 2}, {1, 3}, {0, 2}, {1, 3}, {4, 6}, {5, 7}, {4, 6}, {5, 7}};
  const std::vector<std::vector<int>> edp = {{0, 4}, {1, 5}, {2, 6}, {3, 7}, {0, 4}, {1, 5}, {2, 6}, {3, 7}};
  const std::vector<int64_t> epCoord = {0, 0, 1, 1, 0, 0, 1, 1}, edpCoord = {0, 0, 0, 0, 1, 1, 1, 1};
  for (int r = 0; r < 8; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(m.group(r, MeshAxis::kEp), ep[size_t(r)]);
    EXPECT_EQ(m.group(r, MeshAxis::kEdp), edp[size_t(r)]);
    EXPECT_EQ(m.group(r, AxisSet::of(MeshAxis::kEp)), ep[size_t(r)]);
    EXPECT_EQ(m.coord(r, MeshAxis::kEp), epCoord[size_t(r)]);
    EXPECT_EQ(m.coord(r, MeshAxis::kEdp), edpCoord[size_t(r)]);
    EXPECT_EQ(m.coord(r, AxisSet::of(MeshAxis::kEdp)), edpCoord[size_t(r)]);
    EXPECT_EQ(m.withCoord(r, MeshAxis::kEp, 1 - epCoord[size_t(r)]),
              ep[size_t(r)][size_t(1 - epCoord[size_t(r)])]);
    // ep lives in dp: d = ep coordinate + ep · edp coordinate.
    EXPECT_EQ(m.coord(r, MeshAxis::kDp), m.coord(r, MeshAxis::kEp) + 2 * m.coord(r, MeshAxis::kEdp));
  }
  EXPECT_EQ(m.axisOfGroup({0, 2}), MeshAxis::kEp);
  EXPECT_EQ(m.axisOfGroup({1, 5}), MeshAxis::kEdp);
  EXPECT_EQ(m.axisSetOfGroup({5, 7}), AxisSet::of(MeshAxis::kEp));
  EXPECT_EQ(m.axisOfGroup({0, 2, 4, 6}), MeshAxis::kDp);
  EXPECT_EQ(m.describe(), "dp=4 tp=2 pp=1 ep=2, rank_order [tp, dp, pp]");
  EXPECT_EQ(meshAxisName(MeshAxis::kEp), "ep");
  EXPECT_EQ(meshAxisName(MeshAxis::kEdp), "edp");
  EXPECT_EQ(parseMeshAxis("edp"), MeshAxis::kEdp);
  EXPECT_EQ(parseAxisSet("ep"), AxisSet::of(MeshAxis::kEp));
  EXPECT_EQ(axisSetName(AxisSet::of(MeshAxis::kEdp)), "edp");
  EXPECT_FALSE(parseAxisSet("dp+ep").has_value());   // ep is a part of dp
  EXPECT_FALSE(parseAxisSet("ep+edp").has_value());  // the two parts make dp: name it
  EXPECT_TRUE(parseAxisSet("edp+tp").has_value());   // with another base axis (AxisSetTest)

  // dp fastest (rank = d + 4·tp): ep {0,1},{2,3}; edp {0,2},{1,3}.
  ASSERT_TRUE(m.setOrder({MeshAxis::kDp, MeshAxis::kTp, MeshAxis::kPp}));
  EXPECT_EQ(m.group(0, MeshAxis::kEp), (std::vector<int>{0, 1}));
  EXPECT_EQ(m.group(3, MeshAxis::kEp), (std::vector<int>{2, 3}));
  EXPECT_EQ(m.group(5, MeshAxis::kEdp), (std::vector<int>{5, 7}));
  EXPECT_EQ(m.group(6, MeshAxis::kEdp), (std::vector<int>{4, 6}));
}

TEST(ExpertParallelMeshTest, EpOneIsAGroupOfOneAndEdpIsDp) {
  Mesh m = Mesh::make(4, 2, 1);
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(m.group(r, MeshAxis::kEp), (std::vector<int>{r}));
    EXPECT_EQ(m.group(r, MeshAxis::kEdp), m.group(r, MeshAxis::kDp));
    EXPECT_EQ(m.coord(r, MeshAxis::kEdp), m.coord(r, MeshAxis::kDp));
  }
  EXPECT_EQ(m.axisOfGroup(m.group(0, MeshAxis::kDp)), MeshAxis::kDp);  // named dp, not edp
  EXPECT_EQ(m.describe(), "dp=4 tp=2 pp=1, rank_order [tp, dp, pp]");
}

// ---- all_to_all_v on the communicator -----------------------------------------------------------------

// One member's call and the reference.
struct A2avRank {
  std::vector<float> x, y;
  std::vector<int32_t> send, recv;
  int64_t xRows = 0, yRows = 0;
};

// Member `me`'s y and recv splits, written out from every member's x and send splits.
void reference(const std::vector<A2avRank>& ranks, size_t me, int64_t c, int64_t H, std::vector<float>* y,
               std::vector<int32_t>* recv) {
  const size_t n = ranks.size();
  y->assign(size_t(ranks[me].yRows * H), 0.0f);
  recv->assign(n * size_t(c), 0);
  int64_t at = 0;
  for (size_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j) {
      const size_t k = me * size_t(c) + size_t(j);
      int64_t start = 0;
      for (size_t q = 0; q < k; ++q) start += ranks[i].send[q];
      const int64_t rows = ranks[i].send[k];
      (*recv)[i * size_t(c) + size_t(j)] = int32_t(rows);
      for (int64_t r = 0; r < rows; ++r, ++at)
        for (int64_t h = 0; h < H; ++h) (*y)[size_t(at * H + h)] = ranks[i].x[size_t((start + r) * H + h)];
    }
}

// Random splits (a third of them 0) and distinct x values; y poisoned (NaN) so the tail's zeros show.
std::vector<A2avRank> randomCall(size_t n, int64_t c, int64_t H, uint32_t seed, int64_t spare) {
  std::mt19937 rng(seed);
  std::vector<A2avRank> ranks(n);
  for (size_t m = 0; m < n; ++m) {
    A2avRank& r = ranks[m];
    int64_t total = 0;
    for (size_t k = 0; k < n * size_t(c); ++k) {
      const int32_t s = rng() % 3 == 0 ? 0 : int32_t(rng() % 4);
      r.send.push_back(s);
      total += s;
    }
    r.xRows = total + int64_t(m);  // unsent rows at the end of x
    for (int64_t i = 0; i < r.xRows * H; ++i) r.x.push_back(float(1000 * m + i));
  }
  for (size_t m = 0; m < n; ++m) {
    int64_t in = 0;
    for (size_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < c; ++j) in += ranks[i].send[m * size_t(c) + size_t(j)];
    ranks[m].yRows = in + spare;
    ranks[m].y.assign(size_t(ranks[m].yRows * H), std::nanf(""));
    ranks[m].recv.assign(n * size_t(c), -7);
  }
  return ranks;
}

using A2avFn = std::function<Status(Communicator&, int, const std::vector<int>&, A2avRank&)>;

// With `abortOnError` a member's failure aborts the communicator, as a run does, so the others stop
// waiting; without, they must fail on their own.
std::vector<Status> runA2av(std::vector<A2avRank>& ranks, int64_t c, int64_t H, const A2avFn& fn,
                            bool abortOnError = true) {
  const int n = int(ranks.size());
  InProcessCommunicatorOptions o;
  o.worldSize = n;
  o.timeout = std::chrono::seconds(20);
  auto comm = makeInProcessCommunicator(o);
  std::vector<int> group(static_cast<size_t>(n));
  for (int m = 0; m < n; ++m) group[size_t(m)] = m;
  std::vector<Status> st(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int m = 0; m < n; ++m)
    threads.emplace_back([&, m] {
      st[size_t(m)] = fn(*comm, m, group, ranks[size_t(m)]);
      if (!st[size_t(m)].isOk() && abortOnError) comm->abort(st[size_t(m)]);
    });
  for (std::thread& t : threads) t.join();
  (void)c, (void)H;
  return st;
}

A2avFn inProcess(int64_t c, int64_t H) {
  return [=](Communicator& comm, int m, const std::vector<int>& g, A2avRank& r) {
    return comm.allToAllV(m, g, r.x.data(), r.xRows, r.send.data(), r.y.data(), r.yRows, r.recv.data(), c, H,
                          CommDType::kF32);
  };
}
A2avFn byBlocks(int64_t c, int64_t H) {
  return [=](Communicator& comm, int m, const std::vector<int>& g, A2avRank& r) {
    return allToAllVByBlocks(comm, m, g, r.x.data(), r.xRows, r.send.data(), r.y.data(), r.yRows, r.recv.data(), c,
                             H, CommDType::kF32);
  };
}

TEST(AllToAllVTest, InProcessAndByBlocksMatchTheReference) {
  const int64_t H = 3;
  for (int64_t c : {1, 2, 3})
    for (uint32_t seed : {1u, 2u, 3u})
      for (bool blocks : {false, true}) {
        SCOPED_TRACE("c " + std::to_string(c) + " seed " + std::to_string(seed) + (blocks ? " by blocks" : ""));
        std::vector<A2avRank> ranks = randomCall(4, c, H, seed + 17 * uint32_t(c), /*spare=*/2);
        const std::vector<A2avRank> before = ranks;
        for (const Status& s : runA2av(ranks, c, H, blocks ? byBlocks(c, H) : inProcess(c, H)))
          ASSERT_TRUE(s.isOk()) << s.message();
        for (size_t m = 0; m < ranks.size(); ++m) {
          std::vector<float> y;
          std::vector<int32_t> recv;
          reference(before, m, c, H, &y, &recv);
          EXPECT_EQ(ranks[m].recv, recv) << "member " << m;
          ASSERT_EQ(ranks[m].y.size(), y.size());
          // Bitwise (pure copies), the tail's zeros included (NaN before).
          EXPECT_EQ(std::memcmp(ranks[m].y.data(), y.data(), y.size() * 4), 0) << "member " << m;
          EXPECT_EQ(ranks[m].x, before[m].x);
        }
      }
}

TEST(AllToAllVTest, CapacityAndNegativeSplitErrors) {
  const int64_t c = 2, H = 2;
  for (bool blocks : {false, true}) {
    SCOPED_TRACE(blocks ? "by blocks" : "in process");
    std::vector<A2avRank> ranks = randomCall(4, c, H, 5, 0);
    // Member 2 receives one row more than its y holds.
    ranks[0].send[2 * c] += 1;
    ranks[0].xRows += 1;
    ranks[0].x.resize(size_t(ranks[0].xRows * H), 0.0f);
    const int64_t want = ranks[2].yRows + 1;
    std::vector<Status> st = runA2av(ranks, c, H, blocks ? byBlocks(c, H) : inProcess(c, H));
    expectParts(st[2], {"rank 2 receives " + std::to_string(want) + " rows but y holds " +
                            std::to_string(ranks[2].yRows) + ": the plan's capacity is too small"});
    for (const Status& s : st) EXPECT_FALSE(s.isOk());
  }
  for (bool blocks : {false, true}) {
    std::vector<A2avRank> ranks = randomCall(2, c, H, 6, 1);
    ranks[1].send[3] = -2;
    std::vector<Status> st = runA2av(ranks, c, H, blocks ? byBlocks(c, H) : inProcess(c, H));
    expectParts(st[1], {"all_to_all_v on rank 1", "send_splits[3] (member 1, chunk 1) is negative: -2"});
  }
  {
    std::vector<A2avRank> ranks = randomCall(2, c, H, 7, 1);
    ranks[0].xRows = 0;  // sends more rows than x holds
    ranks[0].send.assign(ranks[0].send.size(), 1);
    std::vector<Status> st = runA2av(ranks, c, H, inProcess(c, H));
    expectParts(st[0], {"all_to_all_v on rank 0", "the send splits sum to 4 rows but x holds 0"});
  }
}

// By blocks (NCCL's path): the checks' verdicts travel with the all-reduce of the block size, so a wrong
// split fails every member at once, before any row moves, with no abort to stop the others: the member
// whose splits are wrong gets its own error, the others one naming it (the first wrong sender before
// the first too small y). A member failing alone would leave the others waiting out the 20 s timeout.
TEST(AllToAllVTest, ByBlocksFailsEveryMemberTogether) {
  const int64_t c = 2, H = 2;
  for (int bad : {0, 1}) {
    SCOPED_TRACE(bad == 0 ? "negative send split on member 3, y too small on member 1" : "y too small on member 1");
    std::vector<A2avRank> ranks = randomCall(4, c, H, 11, 0);
    ranks[0].send[1 * c] += 1;  // member 1 receives one row more than its y holds
    ranks[0].xRows += 1;
    ranks[0].x.resize(size_t(ranks[0].xRows * H), 0.0f);
    if (bad == 0) ranks[3].send[1] = -1;
    const std::vector<A2avRank> before = ranks;
    const auto start = std::chrono::steady_clock::now();
    std::vector<Status> st = runA2av(ranks, c, H, byBlocks(c, H), /*abortOnError=*/false);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
    const int culprit = bad == 0 ? 3 : 1;
    expectParts(st[size_t(culprit)], {bad == 0 ? "send_splits[1] (member 0, chunk 1) is negative: -1"
                                               : "rank 1 receives " + std::to_string(ranks[1].yRows + 1) + " rows"});
    for (int m = 0; m < 4; ++m) {
      if (m == culprit) continue;
      expectParts(st[size_t(m)], {"all_to_all_v on rank " + std::to_string(m) + ": rank " + std::to_string(culprit) +
                                      (bad == 0 ? "'s send splits are wrong" : "'s y is too small"),
                                  "no rows moved"});
      // y untouched (its NaN poison), as is x.
      EXPECT_EQ(std::memcmp(ranks[size_t(m)].y.data(), before[size_t(m)].y.data(), ranks[size_t(m)].y.size() * 4), 0);
    }
  }
}

// checkEveryMembersSplits (the MPI and NCCL all_to_all_v's check once every member's splits are gathered):
// each member, checking the same table, reaches the same verdict: its received splits (column `me`, checked
// against an independent transposition) on success, else the first wrong member's error (send splits in
// member order before receive capacities), with recvSplits untouched.
TEST(AllToAllVTest, EveryMemberChecksEveryMembersSplitsAlike) {
  const std::vector<int> group = {4, 5, 6, 7};  // ranks, not member indices
  const int64_t n = 4, c = 3;
  std::mt19937 rng(5);
  std::vector<int32_t> sends(size_t(n * n * c));
  for (int32_t& v : sends) v = int32_t(rng() % 4);
  std::vector<int64_t> xRows(static_cast<size_t>(n), 0), yRows(static_cast<size_t>(n), 0);
  for (int64_t m = 0; m < n; ++m) {
    for (int64_t k = 0; k < n * c; ++k) {
      xRows[size_t(m)] += sends[size_t(m * n * c + k)];
      yRows[size_t(k / c)] += sends[size_t(m * n * c + k)];  // what member k/c receives
    }
  }
  for (size_t me = 0; me < size_t(n); ++me) {
    std::vector<int32_t> recv(size_t(n * c), -1);
    ASSERT_TRUE(checkEveryMembersSplits(group, sends.data(), xRows.data(), yRows.data(), c, me, recv.data()).isOk());
    for (int64_t i = 0; i < n; ++i)  // from sender i: its splits to member `me`
      for (int64_t k = 0; k < c; ++k)
        EXPECT_EQ(recv[size_t(i * c + k)], sends[size_t(i * n * c + int64_t(me) * c + k)]) << "member " << me;
  }
  struct Case {
    const char* what;
    std::function<void(std::vector<int32_t>&, std::vector<int64_t>&, std::vector<int64_t>&)> breakIt;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"negative split on member 2", [](auto& s, auto&, auto&) { s[size_t(2 * n * c + 4)] = -1; },
       "all_to_all_v on rank 6: send_splits[4] (member 1, chunk 1) is negative: -1"},
      {"member 3 sends past its x", [&](auto&, auto& x, auto&) { x[3] -= 1; },
       "all_to_all_v on rank 7: the send splits sum to " + std::to_string(xRows[3]) + " rows but x holds " +
           std::to_string(xRows[3] - 1)},
      {"member 1's y too small", [&](auto&, auto&, auto& y) { y[1] -= 1; },
       "all_to_all_v on rank 5 receives " + std::to_string(yRows[1]) + " rows but y holds " +
           std::to_string(yRows[1] - 1)},
      {"both: the send splits' error first", [&](auto&, auto& x, auto& y) { y[0] -= 1, x[2] -= 1; },
       "all_to_all_v on rank 6: the send splits sum to"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    std::vector<int32_t> s = sends;
    std::vector<int64_t> x = xRows, y = yRows;
    k.breakIt(s, x, y);
    for (size_t me = 0; me < size_t(n); ++me) {
      std::vector<int32_t> recv(size_t(n * c), -1);
      Status st = checkEveryMembersSplits(group, s.data(), x.data(), y.data(), c, me, recv.data());
      ASSERT_FALSE(st.isOk()) << "member " << me;
      EXPECT_NE(st.message().find(k.error), std::string::npos) << "member " << me << ": " << st.toString();
      EXPECT_EQ(recv, std::vector<int32_t>(size_t(n * c), -1)) << "member " << me << ": recvSplits written";
    }
  }
}

// ---- moe_chunk_transpose's CPU kernel -----------------------------------------------------------------

// y built by hand: chunk (i, j) of splits[i·c + j] rows; the source walks x's order, the destination y's.
std::vector<float> chunkTransposeReference(const std::vector<float>& x, const std::vector<int32_t>& splits, int64_t R,
                                           int64_t C, int64_t N, int64_t H, bool inverse) {
  std::vector<float> y(static_cast<size_t>(N * H), 0.0f);
  auto startOf = [&](int64_t i0, int64_t j0, bool rowMajor) {
    int64_t s = 0;
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < C; ++j) {
        const bool before = rowMajor ? (i < i0 || (i == i0 && j < j0)) : (j < j0 || (j == j0 && i < i0));
        if (before) s += splits[size_t(i * C + j)];
      }
    return s;
  };
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) {
      const int64_t from = startOf(i, j, !inverse), to = startOf(i, j, inverse);
      for (int64_t r = 0; r < splits[size_t(i * C + j)]; ++r)
        for (int64_t h = 0; h < H; ++h) y[size_t((to + r) * H + h)] = x[size_t((from + r) * H + h)];
    }
  return y;
}

TEST(MoeChunkTransposeTest, BothDirectionsAgainstHandRolledLoops) {
  std::mt19937 rng(11);
  for (auto [R, C] : {std::pair<int64_t, int64_t>{1, 1}, {2, 3}, {4, 2}, {3, 5}})
    for (int trial = 0; trial < 3; ++trial) {
      std::vector<int32_t> splits;
      int64_t total = 0;
      for (int64_t k = 0; k < R * C; ++k) {
        splits.push_back(rng() % 3 == 0 ? 0 : int32_t(rng() % 5));
        total += splits.back();
      }
      const int64_t H = 3, N = total + trial;  // trial spare rows: the tail
      std::vector<float> x(static_cast<size_t>(N * H));
      for (size_t i = 0; i < x.size(); ++i) x[i] = float(i + 1);
      MoeParams p;
      p.r = R, p.c = C, p.N = N, p.H = H;
      for (bool inverse : {false, true}) {
        SCOPED_TRACE("r " + std::to_string(R) + " c " + std::to_string(C) + " trial " + std::to_string(trial) +
                     (inverse ? " inverse" : ""));
        p.inverse = inverse;
        std::vector<float> y(static_cast<size_t>(N * H), std::nanf(""));
        std::vector<int32_t> cols(static_cast<size_t>(C), -1);
        ASSERT_TRUE(moeChunkTranspose(x.data(), splits.data(), y.data(), cols.data(), p).isOk());
        const std::vector<float> want = chunkTransposeReference(x, splits, R, C, N, H, inverse);
        EXPECT_EQ(std::memcmp(y.data(), want.data(), y.size() * 4), 0);
        for (int64_t j = 0; j < C; ++j) {
          int32_t s = 0;
          for (int64_t i = 0; i < R; ++i) s += splits[size_t(i * C + j)];
          EXPECT_EQ(cols[size_t(j)], s) << "col " << j;
        }
        // The inverse undoes it (up to the tail, zero in both).
        MoeParams q = p;
        q.inverse = !inverse;
        std::vector<float> back(static_cast<size_t>(N * H), std::nanf(""));
        ASSERT_TRUE(moeChunkTranspose(y.data(), splits.data(), back.data(), nullptr, q).isOk());
        for (int64_t i = 0; i < total * H; ++i) EXPECT_EQ(back[size_t(i)], x[size_t(i)]) << i;
        for (int64_t i = total * H; i < N * H; ++i) EXPECT_EQ(back[size_t(i)], 0.0f) << i;
      }
    }
}

TEST(MoeChunkTransposeTest, NegativeSplitAndTooManyRowsAreErrors) {
  MoeParams p;
  p.r = 2, p.c = 2, p.N = 4, p.H = 1;
  std::vector<float> x(4, 1.0f), y(4, 0.0f);
  std::vector<int32_t> splits = {1, -1, 2, 1};
  expectParts(moeChunkTranspose(x.data(), splits.data(), y.data(), nullptr, p),
              {"moe_chunk_transpose", "splits[1] (chunk (0, 1)) is negative: -1"});
  splits = {1, 2, 2, 0};
  expectParts(moeChunkTranspose(x.data(), splits.data(), y.data(), nullptr, p),
              {"moe_chunk_transpose", "the splits sum to 5 rows but x and y hold N = 4"});
}

// ---- plans --------------------------------------------------------------------------------------------

// dp=4, tp=2 (8 ranks), rank order tp, dp, pp; mesh.ep = ep with the feature.
PlanBuilder epPlan(int64_t ep = 2, bool feature = true) {
  PlanBuilder b(16, 8, 1, 1);
  if (feature) b.manifest["features"] = {"expert_parallel"};
  b.manifest["mesh"] = {{"dp", 4}, {"tp", 2}, {"pp", 1}, {"ep", ep}, {"rank_order", {"tp", "dp", "pp"}}};
  b.manifest["batch"]["dp"] = 4;
  b.manifest["batch"]["global_batch"] = 4;
  b.manifest["programs"][0]["ranks"] = {0, 1, 2, 3, 4, 5, 6, 7};
  return b;
}

Status loadStatus(PlanBuilder b) {
  if (b.program["actions"].empty()) {
    if (b.program["subroutines"].empty()) b.ops("s");
    b.action(b.program["subroutines"][0]["name"]);
  }
  return testing::parsePlan(b, false).status();
}

TEST(ExpertParallelPlanTest, MeshEpRules) {
  EXPECT_TRUE(loadStatus(epPlan(2)).isOk());
  EXPECT_TRUE(loadStatus(epPlan(4)).isOk());
  EXPECT_TRUE(loadStatus(epPlan(1, false)).isOk());  // ep = 1 needs no feature
  expectParts(loadStatus(epPlan(3)), {"mesh.ep", "ep = 3 does not divide mesh.dp = 4", "choose an ep that divides dp"});
  expectParts(loadStatus(epPlan(2, false)), {"mesh.ep", "ep > 1 needs the feature \"expert_parallel\""});
  PlanBuilder zero = epPlan(2);
  zero.manifest["mesh"]["ep"] = 0;
  expectParts(loadStatus(zero), {"mesh.ep"});
  auto plan = testing::parsePlan([] {
    PlanBuilder b = epPlan(2);
    b.ops("s");
    b.action("s");
    return b;
  }(), false);
  ASSERT_TRUE(plan.isOk()) << plan.status().message();
  EXPECT_EQ(plan->manifest.meshEp, 2);
  EXPECT_EQ(plan->manifest.mesh().group(0, MeshAxis::kEp), (std::vector<int>{0, 2}));
}

// all_to_all_v's and moe_chunk_transpose's loader checks.
TEST(ExpertParallelPlanTest, OpCountsDtypesAndAxes) {
  const int64_t c = 3, H = 4, Nx = 10, Ny = 12;
  auto a2av = [&](std::function<void(PlanBuilder&, json& args, json& attrs)> edit) {
    PlanBuilder b = epPlan();
    json args = {{"x", b.buffer("x", "activation", {Nx, H})},
                 {"send_splits", b.buffer("ss", "activation", {2 * c}, "i32")},
                 {"y", b.buffer("y", "activation", {Ny, H})},
                 {"recv_splits", b.buffer("rs", "activation", {2 * c}, "i32")}};
    json attrs = {{"axis", "ep"}, {"c", c}, {"H", H}, {"Nx", Nx}, {"Ny", Ny}};
    edit(b, args, attrs);
    b.op("s", "all_to_all_v", args, attrs);
    return loadStatus(b);
  };
  const std::string at = "subroutines[0].ops[0]";
  EXPECT_TRUE(a2av([](PlanBuilder&, json&, json&) {}).isOk());
  EXPECT_TRUE(a2av([](PlanBuilder&, json&, json& a) { a["axis"] = "edp"; }).isOk());
  expectParts(a2av([](PlanBuilder&, json&, json& a) { a["axis"] = "dp+ep"; }),
              {at + ".attrs.axis", "names a set of mesh axes"});
  expectParts(a2av([](PlanBuilder&, json&, json& a) { a["Ny"] = 11; }), {at + ".args.y", "expected Ny×H = 44"});
  expectParts(a2av([](PlanBuilder&, json&, json& a) { a["axis"] = "tp"; a["c"] = 2; }),
              {at + ".args.send_splits", "expected n×c (n = 2, the size of axis \"tp\") = 4"});
  expectParts(a2av([&](PlanBuilder& b, json& args, json&) { args["send_splits"] = b.buffer("f", "activation", {2 * c}); }),
              {at + ".args.send_splits"});
  expectParts(a2av([&](PlanBuilder& b, json& args, json&) { args["y"] = b.buffer("yb", "activation", {Ny, H}, "bf16"); }),
              {at + ".args.y", "y is bf16 but x is f32"});
  expectParts(a2av([&](PlanBuilder&, json& args, json& a) {
                a["Ny"] = Nx;
                args["y"] = args["x"];
              }),
              {at});  // x and y alias
  expectParts(a2av([](PlanBuilder&, json&, json& a) { a.erase("Nx"); }), {at + ".attrs.Nx", "missing"});

  auto transpose = [&](std::function<void(PlanBuilder&, json& args, json& attrs)> edit) {
    PlanBuilder b = epPlan();
    json args = {{"x", b.buffer("x", "activation", {Nx, H})},
                 {"splits", b.buffer("sp", "activation", {2 * c}, "i32")},
                 {"y", b.buffer("y", "activation", {Nx, H})},
                 {"col_sizes", b.buffer("cs", "activation", {c}, "i32")}};
    json attrs = {{"r", 2}, {"c", c}, {"N", Nx}, {"H", H}, {"inverse", true}};
    edit(b, args, attrs);
    b.op("s", "moe_chunk_transpose", args, attrs);
    return loadStatus(b);
  };
  EXPECT_TRUE(transpose([](PlanBuilder&, json&, json&) {}).isOk());
  EXPECT_TRUE(transpose([](PlanBuilder&, json& args, json& a) {
                args.erase("col_sizes");
                a.erase("inverse");
              }).isOk());
  expectParts(transpose([](PlanBuilder&, json&, json& a) { a["r"] = 3; }), {at + ".args.splits", "expected r×c = 9"});
  expectParts(transpose([](PlanBuilder&, json&, json& a) { a["c"] = 2; }), {at + ".args.splits", "expected r×c = 4"});
  expectParts(transpose([](PlanBuilder&, json&, json& a) { a["N"] = 9; }), {at + ".args.x", "expected N×H = 36"});
}

// grad_norm_sq's `add`: a single id (plans written before the list) or a list, summed in order.
TEST(ExpertParallelPlanTest, GradNormSqAddsAList) {
  for (bool list : {false, true}) {
    SCOPED_TRACE(list ? "list" : "one id");
    PlanBuilder b(16, 8, 1, 1);
    const int64_t g = b.buffer("g", "activation", {3});
    const int64_t a1 = b.buffer("a1", "activation", {1}, "f64"), a2 = b.buffer("a2", "activation", {1}, "f64");
    const int64_t sq = b.buffer("sq", "activation", {1}, "f64");
    b.op("s", "grad_norm_sq", {{"grads", {g}}, {"add", list ? json{a1, a2} : json(a1)}, {"sq", sq}});
    b.action("s");
    auto plan = testing::parsePlan(b, false);
    ASSERT_TRUE(plan.isOk()) << plan.status().message();
    auto backend = makeCpuBackend({});
    auto it = Interpreter::create(*plan, 0, *backend, 0);
    ASSERT_TRUE(it.isOk()) << it.status().message();
    const float gv[3] = {1, 2, 3};
    const double av1 = 0.25, av2 = 100.5;
    ASSERT_TRUE((*it)->writeF32(g, gv).isOk());
    ASSERT_TRUE((*it)->writeBuffer(a1, &av1).isOk());
    ASSERT_TRUE((*it)->writeBuffer(a2, &av2).isOk());
    ASSERT_TRUE((*it)->runSubroutine(0, 0, -1, 0.0, nullptr).isOk());
    double out = 0;
    ASSERT_TRUE((*it)->readBuffer(sq, &out).isOk());
    EXPECT_EQ(out, list ? 14.0 + 0.25 + 100.5 : 14.0 + 0.25);
  }
  PlanBuilder b(16, 8, 1, 1);
  const int64_t a1 = b.buffer("a1", "activation", {1}, "f64"), a = b.buffer("a", "activation", {2}, "f64");
  const int64_t sq = b.buffer("sq", "activation", {1}, "f64");
  b.op("s", "grad_norm_sq", {{"add", {a1, a}}, {"sq", sq}});
  expectParts(loadStatus(b), {"args.add[1]", "expected 1"});
}

// Rank q's all_to_all_v call in a plan test: its n·c send splits split(q, i, j) and its Nx rows of
// H values x(q, row, h), receiving up to Ny rows.
using SplitFn = std::function<int32_t(int, int64_t, int64_t)>;
using RowFn = std::function<float(int, int64_t, int64_t)>;
A2avRank planCall(int q, int64_t n, int64_t c, int64_t Nx, int64_t Ny, int64_t H, const SplitFn& split,
                  const RowFn& xv) {
  A2avRank call;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j) call.send.push_back(split(q, i, j));
  for (int64_t row = 0; row < Nx; ++row)
    for (int64_t h = 0; h < H; ++h) call.x.push_back(xv(q, row, h));
  call.xRows = Nx, call.yRows = Ny;
  return call;
}

// The calls of rank r's ep group, in member order, for reference().
std::vector<A2avRank> groupCalls(const Mesh& mesh, int r, int64_t n, int64_t c, int64_t Nx, int64_t Ny, int64_t H,
                                 const SplitFn& split, const RowFn& xv) {
  std::vector<A2avRank> calls;
  for (int q : mesh.group(r, MeshAxis::kEp)) calls.push_back(planCall(q, n, c, Nx, Ny, H, split, xv));
  return calls;
}

// The dispatch of expert parallelism on 8 ranks (dp=4, ep=2, tp=2): all_to_all_v over ep of rows in c = 2
// chunks per member (two local experts), moe_chunk_transpose of the received [source member, expert] grid
// into expert-major rows (col_sizes: the local experts' group sizes) and back, all_to_all_v back (the
// recv splits as send splits: its own backward), and an all_reduce over edp. Checked against the
// in-process reference above.
TEST(ExpertParallelPlanTest, DispatchTransposeCombineOverEp) {
  const int64_t c = 2, H = 3, Nx = 8, Ny = 12, n = 2;
  PlanBuilder b = epPlan();
  const int64_t x = b.buffer("x", "activation", {Nx, H}), ss = b.buffer("ss", "activation", {n * c}, "i32");
  const int64_t y = b.buffer("y", "activation", {Ny, H}), rs = b.buffer("rs", "activation", {n * c}, "i32");
  const int64_t ye = b.buffer("ye", "activation", {Ny, H}), cs = b.buffer("cs", "activation", {c}, "i32");
  const int64_t yb = b.buffer("yb", "activation", {Ny, H});
  const int64_t back = b.buffer("back", "activation", {Nx, H}), rs2 = b.buffer("rs2", "activation", {n * c}, "i32");
  const int64_t ar = b.buffer("ar", "activation", {2});
  b.op("s", "all_to_all_v", {{"x", x}, {"send_splits", ss}, {"y", y}, {"recv_splits", rs}},
       {{"axis", "ep"}, {"c", c}, {"H", H}, {"Nx", Nx}, {"Ny", Ny}}, "dispatch");
  b.op("s", "moe_chunk_transpose", {{"x", y}, {"splits", rs}, {"y", ye}, {"col_sizes", cs}},
       {{"r", n}, {"c", c}, {"N", Ny}, {"H", H}});
  b.op("s", "moe_chunk_transpose", {{"x", ye}, {"splits", rs}, {"y", yb}}, {{"r", n}, {"c", c}, {"N", Ny}, {"H", H},
                                                                           {"inverse", true}});
  b.op("s", "all_to_all_v", {{"x", yb}, {"send_splits", rs}, {"y", back}, {"recv_splits", rs2}},
       {{"axis", "ep"}, {"c", c}, {"H", H}, {"Nx", Ny}, {"Ny", Nx}});
  b.op("s", "all_reduce", {{"x", {ar}}}, {{"axis", "edp"}, {"op", "sum"}});
  b.action("s");
  // Rank q sends to ep member i, chunk j: (q + i + j) % 3 rows (some 0), x[row, h] = 100q + 3row + h.
  auto split = [](int q, int64_t i, int64_t j) { return int32_t((q + i + j) % 3); };
  auto xv = [](int q, int64_t row, int64_t h) { return float(100 * q + 3 * row + h); };
  auto ranks = runRanks(b, [&](int q, Interpreter& it) -> Status {
    const A2avRank in = planCall(q, n, c, Nx, Ny, H, split, xv);
    const float arv[2] = {float(q), 1.0f};
    LLCDIST_RETURN_IF_ERROR(it.writeBuffer(ss, in.send.data()));
    LLCDIST_RETURN_IF_ERROR(it.writeF32(ar, arv));
    return it.writeF32(x, in.x.data());
  });
  ASSERT_TRUE(ranks);
  for (int r = 0; r < 8; ++r) ASSERT_TRUE(ranks->status[size_t(r)].isOk()) << ranks->status[size_t(r)].message();
  const Mesh mesh = ranks->plan.manifest.mesh();
  for (int r = 0; r < 8; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const std::vector<A2avRank> call = groupCalls(mesh, r, n, c, Nx, Ny, H, split, xv);
    const size_t me = size_t(mesh.coord(r, MeshAxis::kEp));
    std::vector<float> wantY;
    std::vector<int32_t> wantRecv;
    reference(call, me, c, H, &wantY, &wantRecv);
    Interpreter& it = *ranks->in[size_t(r)];
    std::vector<int32_t> gotRecv(static_cast<size_t>(n * c)), gotCols(static_cast<size_t>(c));
    std::vector<int32_t> gotRecv2(static_cast<size_t>(n * c));
    ASSERT_TRUE(it.readBuffer(rs, gotRecv.data()).isOk());
    ASSERT_TRUE(it.readBuffer(cs, gotCols.data()).isOk());
    ASSERT_TRUE(it.readBuffer(rs2, gotRecv2.data()).isOk());
    EXPECT_EQ(gotRecv, wantRecv);
    EXPECT_EQ(it.readF32(y).value(), wantY);
    // Expert-major: the received [member, expert] grid's chunks in column-major order.
    EXPECT_EQ(it.readF32(ye).value(), chunkTransposeReference(wantY, wantRecv, n, c, Ny, H, false));
    for (int64_t j = 0; j < c; ++j) EXPECT_EQ(gotCols[size_t(j)], wantRecv[size_t(j)] + wantRecv[size_t(c + j)]);
    EXPECT_EQ(it.readF32(yb).value(), wantY);
    // Back: this rank's own sent rows in place, the unsent rows zero; its recv splits its send splits.
    std::vector<float> wantBack(static_cast<size_t>(Nx * H), 0.0f);
    int64_t sent = 0;
    for (int32_t s : call[me].send) sent += s;
    for (int64_t k = 0; k < sent * H; ++k) wantBack[size_t(k)] = call[me].x[size_t(k)];
    EXPECT_EQ(it.readF32(back).value(), wantBack);
    EXPECT_EQ(gotRecv2, call[me].send);
    float edpSum = 0;
    for (int q : mesh.group(r, MeshAxis::kEdp)) edpSum += float(q);
    EXPECT_EQ(it.readF32(ar).value(), (std::vector<float>{edpSum, 2.0f}));
  }
}

// all_to_all_v of bf16 rows: attr dtype "bf16" is accepted when x and y are bf16 (the splits are i32
// counts, not data) and refused on f32 rows; with or without the attr the rows move as bf16 (2 bytes an
// element: a copy), equal to the f32 reference on bf16-exact values.
TEST(ExpertParallelPlanTest, AllToAllVMovesBf16Rows) {
  const int64_t c = 2, H = 3, Nx = 6, Ny = 9, n = 2;
  const std::string at = "subroutines[0].ops[0]";
  for (const char* xt : {"bf16", "f32"}) {
    PlanBuilder b = epPlan();
    const int64_t x = b.buffer("x", "activation", {Nx, H}, xt), ss = b.buffer("ss", "activation", {n * c}, "i32");
    const int64_t y = b.buffer("y", "activation", {Ny, H}, xt), rs = b.buffer("rs", "activation", {n * c}, "i32");
    b.op("s", "all_to_all_v", {{"x", x}, {"send_splits", ss}, {"y", y}, {"recv_splits", rs}},
         {{"axis", "ep"}, {"c", c}, {"H", H}, {"Nx", Nx}, {"Ny", Ny}, {"dtype", "bf16"}});
    if (std::string(xt) == "bf16")
      EXPECT_TRUE(loadStatus(b).isOk()) << loadStatus(b).message();
    else
      expectParts(loadStatus(b), {at + ".attrs.dtype", "args.x", "is f32"});
  }
  for (bool attr : {true, false}) {
    SCOPED_TRACE(attr ? "dtype bf16" : "no dtype");
    PlanBuilder b = epPlan();
    const int64_t x = b.buffer("x", "activation", {Nx, H}, "bf16"), ss = b.buffer("ss", "activation", {n * c}, "i32");
    const int64_t y = b.buffer("y", "activation", {Ny, H}, "bf16"), rs = b.buffer("rs", "activation", {n * c}, "i32");
    const int64_t guard = b.buffer("guard", "activation", {4}, "bf16");  // right after y: must stay as written
    json attrs = {{"axis", "ep"}, {"c", c}, {"H", H}, {"Nx", Nx}, {"Ny", Ny}};
    if (attr) attrs["dtype"] = "bf16";
    b.op("s", "all_to_all_v", {{"x", x}, {"send_splits", ss}, {"y", y}, {"recv_splits", rs}}, attrs);
    b.action("s");
    auto split = [](int q, int64_t i, int64_t j) { return int32_t((q + 2 * i + j) % 3); };
    auto xv = [](int q, int64_t row, int64_t h) { return float(8 * q + 3 * row + h); };  // exact in bf16
    const float guardValues[4] = {-1, -2, -3, -4};
    auto ranks = runRanks(b, [&](int q, Interpreter& it) -> Status {
      const A2avRank in = planCall(q, n, c, Nx, Ny, H, split, xv);
      LLCDIST_RETURN_IF_ERROR(it.writeBuffer(ss, in.send.data()));
      LLCDIST_RETURN_IF_ERROR(it.writeF32(guard, guardValues));
      return it.writeF32(x, in.x.data());
    });
    ASSERT_TRUE(ranks);
    for (int r = 0; r < 8; ++r) ASSERT_TRUE(ranks->status[size_t(r)].isOk()) << ranks->status[size_t(r)].message();
    const Mesh mesh = ranks->plan.manifest.mesh();
    for (int r = 0; r < 8; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      const std::vector<A2avRank> call = groupCalls(mesh, r, n, c, Nx, Ny, H, split, xv);
      std::vector<float> wantY;
      std::vector<int32_t> wantRecv;
      reference(call, size_t(mesh.coord(r, MeshAxis::kEp)), c, H, &wantY, &wantRecv);
      Interpreter& it = *ranks->in[size_t(r)];
      std::vector<int32_t> gotRecv(static_cast<size_t>(n * c));
      ASSERT_TRUE(it.readBuffer(rs, gotRecv.data()).isOk());
      EXPECT_EQ(gotRecv, wantRecv);
      EXPECT_EQ(it.readF32(y).value(), wantY);
      EXPECT_EQ(it.readF32(guard).value(), std::vector<float>(guardValues, guardValues + 4));
    }
  }
}

// The capacity error at run time names the op, the axis, the rank and the numbers.
TEST(ExpertParallelPlanTest, CapacityErrorNamesOpAxisAndRank) {
  const int64_t c = 1, H = 2, Nx = 4, Ny = 3;
  PlanBuilder b = epPlan();
  const int64_t x = b.buffer("x", "activation", {Nx, H}), ss = b.buffer("ss", "activation", {2}, "i32");
  const int64_t y = b.buffer("y", "activation", {Ny, H}), rs = b.buffer("rs", "activation", {2}, "i32");
  b.op("s", "all_to_all_v", {{"x", x}, {"send_splits", ss}, {"y", y}, {"recv_splits", rs}},
       {{"axis", "ep"}, {"c", c}, {"H", H}, {"Nx", Nx}, {"Ny", Ny}}, "moe.dispatch");
  b.action("s");
  auto ranks = runRanks(b, [&](int, Interpreter& it) -> Status {
    const int32_t s[2] = {2, 2};  // every member receives 4 rows, y holds 3
    return it.writeBuffer(ss, s);
  });
  ASSERT_TRUE(ranks);
  const Status& s0 = ranks->status[0];
  expectParts(s0, {"op 0 (all_to_all_v", "moe.dispatch", "axis ep", "receives 4 rows but y holds 3",
                   "the plan's capacity is too small"});
}

// ---- params sharded on ep ----------------------------------------------------------------------------

// ZeRO over a param sharded on ep: its replicas are over edp, so blocks over dp (which holds other experts)
// are refused; over edp they load.
TEST(ExpertParallelParamsTest, ZeroBlocksOfAnEpShardStayInEdp) {
  for (const char* axis : {"edp", "dp"}) {
    SCOPED_TRACE(axis);
    PlanBuilder b = epPlan();
    b.manifest["features"] = {"expert_parallel", "zero"};
    const int64_t w = b.buffer("w", "param", {2, 2, 3}), dw = b.buffer("dw", "grad", {2, 2, 3});
    b.param("experts.{e}.w1.weight", {4, 2, 3}, w, dw, {{"kind", "normal"}, {"std", 0.02}}, true);
    b.manifest["params"][0]["sharding"] = {{"axis", "ep"}, {"dim", 0}};
    b.manifest["params"][0]["zero"] = {{"axis", axis}, {"stage", 1}};
    const Status s = loadStatus(b);
    if (std::string(axis) == "edp")
      EXPECT_TRUE(s.isOk()) << s.message();
    else
      expectParts(s, {"params[0].zero.axis", "is sharded over ep, inside dp", "its replicas are over edp"});
  }
}

// The stacked experts' weight sharded over ep (dim 0): ep member m holds experts [m·E/ep, (m+1)·E/ep);
// saving gathers the ep shards (the file holds the whole tensor, one tensor per expert), and the edp
// replicas must agree.
TEST(ExpertParallelParamsTest, SaveGathersEpShardsAndChecksEdpReplicas) {
  const int64_t E = 4, O = 2, K = 3;
  PlanBuilder b = epPlan();
  const int64_t w = b.buffer("w", "param", {E / 2, O, K}), dw = b.buffer("dw", "grad", {E / 2, O, K});
  b.param("layers.0.experts.{e}.w1.weight", {E, O, K}, w, dw, {{"kind", "normal"}, {"std", 0.02}}, true);
  b.manifest["params"][0]["sharding"] = {{"axis", "ep"}, {"dim", 0}};
  b.ops("s");
  b.action("s");
  auto plan = testing::parsePlan(b, false);
  ASSERT_TRUE(plan.isOk()) << plan.status().message();
  const Manifest& m = plan->manifest;
  const Mesh mesh = m.mesh();
  auto global = [](int64_t e, int64_t o, int64_t k) { return float(100 * e + 10 * o + k); };
  auto shardOf = [&](int rank) {
    const int64_t member = mesh.coord(rank, MeshAxis::kEp);
    std::vector<float> v;
    for (int64_t e = member * E / 2; e < (member + 1) * E / 2; ++e)
      for (int64_t o = 0; o < O; ++o)
        for (int64_t k = 0; k < K; ++k) v.push_back(global(e, o, k));
    return v;
  };
  // The checkpoint layout (what a rank file holds, resharded on resume by it, so another ep reads the same
  // global tensor): rank r holds chunk coord(r, ep) of 2 along dim 0, experts [2m, 2m + 2).
  for (int r = 0; r < 8; ++r) {
    const train::ShardLayout l = train::layoutOf(m, m.params[0], false, r);
    EXPECT_EQ(l.dim, 0);
    EXPECT_EQ(l.members, 2);
    EXPECT_EQ(l.member, mesh.coord(r, MeshAxis::kEp)) << r;
    ASSERT_TRUE(train::checkLayout({E, O, K}, l, E / 2 * O * K).isOk());
    int64_t first = -1;
    train::forEachLayoutRun({E, O, K}, l, [&](int64_t held, int64_t global, int64_t) {
      if (held == 0) first = global;
    });
    EXPECT_EQ(first, l.member * (E / 2) * O * K) << r;
  }
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("llcdist-ep-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "params.safetensors").string();
  Status s = train::saveParams(m, 8, [&](int r, int64_t, int64_t) -> StatusOr<std::vector<float>> { return shardOf(r); },
                        path);
  ASSERT_TRUE(s.isOk()) << s.message();
  auto reader = SafetensorsReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  for (int64_t e = 0; e < E; ++e) {
    const std::string name = "layers.0.experts." + std::to_string(e) + ".w1.weight";
    auto t = reader->readF32(name);
    ASSERT_TRUE(t.isOk()) << name << ": " << t.status().message();
    for (int64_t o = 0; o < O; ++o)
      for (int64_t k = 0; k < K; ++k) EXPECT_EQ((*t)[size_t(o * K + k)], global(e, o, k)) << name;
  }
  // An edp replica that diverged (rank 5: ep member 0, like rank 1) is named.
  s = train::saveParams(m, 8,
                 [&](int r, int64_t, int64_t) -> StatusOr<std::vector<float>> {
                   std::vector<float> v = shardOf(r);
                   if (r == 5) v[1] += 1.0f;
                   return v;
                 },
                 path);
  expectParts(s, {"rank 5's copy", "differs from rank 0's", "shard 0"});
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace llcdist::rt
