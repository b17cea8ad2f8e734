// The in-process communicator and mesh groups, nccl-tests style: every rank contributes seeded values
// whose reduction is known exactly, for each collective and several group shapes; determinism (every
// member gets the same bits, the member-order f32 sum); mismatched calls; the abort path (one failing
// rank never leaves the others waiting) and the timeout diagnostic.
#include "TestUtil.h"
#include "CommTestUtil.h"

#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/Mesh.h"

#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

namespace llcdist::rt {
namespace {
using testing::expectAllOk;
using testing::makeComm;
using testing::onRanks;




Mesh meshOf(int64_t dp, int64_t tp, std::array<MeshAxis, 3> order = {MeshAxis::kTp, MeshAxis::kDp, MeshAxis::kPp}) {
  Mesh m = Mesh::make(dp, tp, 1);
  m.setOrder({order.begin(), order.end()});
  return m;
}

TEST(MeshTest, GroupsFollowTheRankOrder) {
  // Megatron's default: tp fastest. rank = tp + 2·dp.
  const Mesh a = meshOf(2, 2);
  EXPECT_EQ(a.group(0, MeshAxis::kTp), (std::vector<int>{0, 1}));
  EXPECT_EQ(a.group(3, MeshAxis::kTp), (std::vector<int>{2, 3}));
  EXPECT_EQ(a.group(0, MeshAxis::kDp), (std::vector<int>{0, 2}));
  EXPECT_EQ(a.group(3, MeshAxis::kDp), (std::vector<int>{1, 3}));
  EXPECT_EQ(a.group(2, MeshAxis::kPp), (std::vector<int>{2}));
  EXPECT_EQ(a.coord(3, MeshAxis::kDp), 1);
  EXPECT_EQ(a.coord(2, MeshAxis::kTp), 0);
  // dp fastest: rank = dp + 2·tp.
  const Mesh b = meshOf(2, 2, {MeshAxis::kDp, MeshAxis::kTp, MeshAxis::kPp});
  EXPECT_EQ(b.group(0, MeshAxis::kDp), (std::vector<int>{0, 1}));
  EXPECT_EQ(b.group(0, MeshAxis::kTp), (std::vector<int>{0, 2}));
  EXPECT_EQ(b.group(3, MeshAxis::kTp), (std::vector<int>{1, 3}));
  EXPECT_EQ(b.coord(2, MeshAxis::kTp), 1);
  // dp=2, tp=3: the member index is the coordinate, and every group partition covers the world once.
  const Mesh c = meshOf(2, 3);
  EXPECT_EQ(c.group(4, MeshAxis::kTp), (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(c.group(4, MeshAxis::kDp), (std::vector<int>{1, 4}));
  EXPECT_EQ(c.axisOfGroup({1, 4}), MeshAxis::kDp);
  EXPECT_EQ(c.axisOfGroup({3, 4, 5}), MeshAxis::kTp);
  EXPECT_FALSE(c.axisOfGroup({0, 4}).has_value());
  for (int r = 0; r < 6; ++r)
    for (MeshAxis ax : {MeshAxis::kDp, MeshAxis::kTp}) {
      const std::vector<int> g = c.group(r, ax);
      EXPECT_EQ(g[size_t(c.coord(r, ax))], r);
    }
}

TEST(MeshTest, SubGroupsAreConsecutiveMembers) {
  // dp=2, tp=4, tp fastest: rank = tp + 4·dp; sub-groups of 2 tp members (kv-head replicas).
  const Mesh m = meshOf(2, 4);
  EXPECT_EQ(m.subGroup(0, MeshAxis::kTp, 2), (std::vector<int>{0, 1}));
  EXPECT_EQ(m.subGroup(3, MeshAxis::kTp, 2), (std::vector<int>{2, 3}));
  EXPECT_EQ(m.subGroup(6, MeshAxis::kTp, 2), (std::vector<int>{6, 7}));
  EXPECT_EQ(m.subGroup(5, MeshAxis::kTp, 1), (std::vector<int>{5}));
  // Not a proper divisor of the axis (0, the axis size or more, 3 of 4): the whole group.
  for (int64_t size : {0, 3, 4, 8}) EXPECT_EQ(m.subGroup(5, MeshAxis::kTp, size), m.group(5, MeshAxis::kTp));
  // dp fastest: the tp members are strided, the sub-group keeps member order.
  const Mesh d = meshOf(2, 4, {MeshAxis::kDp, MeshAxis::kTp, MeshAxis::kPp});
  EXPECT_EQ(d.subGroup(5, MeshAxis::kTp, 2), (std::vector<int>{5, 7}));
}

// Rank r's all-reduce input: x[k] = (r+1)·(k+1), so over group g: sum = Σ(g_m+1)·(k+1), max =
// (max g + 1)·(k+1); small integers, exact in f32.
TEST(CommunicatorTest, AllReduceSumAvgMaxOnBothAxesAndOrders) {
  for (auto order : {std::array<MeshAxis, 3>{MeshAxis::kTp, MeshAxis::kDp, MeshAxis::kPp},
                     std::array<MeshAxis, 3>{MeshAxis::kDp, MeshAxis::kTp, MeshAxis::kPp}}) {
    const Mesh mesh = meshOf(2, 2, order);
    auto comm = makeComm(mesh);
    const int64_t count = 37;
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax})
      for (MeshAxis axis : {MeshAxis::kDp, MeshAxis::kTp}) {
        std::vector<std::vector<float>> bufs(4);
        expectAllOk(onRanks(4, [&](int r) {
          std::vector<float>& x = bufs[size_t(r)];
          for (int64_t k = 0; k < count; ++k) x.push_back(float((r + 1) * (k + 1)));
          return comm->allReduce(r, mesh.group(r, axis), x.data(), count, CommDType::kF32, op);
        }));
        for (int r = 0; r < 4; ++r) {
          const std::vector<int> g = mesh.group(r, axis);
          double sum = 0, mx = 0;
          for (int m : g) sum += m + 1, mx = std::max(mx, double(m + 1));
          const double f = op == ReduceOp::kSum ? sum : op == ReduceOp::kAvg ? sum / 2 : mx;
          for (int64_t k = 0; k < count; ++k) ASSERT_EQ(bufs[size_t(r)][size_t(k)], float(f * double(k + 1))) << r << " " << k;
        }
      }
  }
}

TEST(CommunicatorTest, AllGatherAndReduceScatterExact) {
  const Mesh mesh = meshOf(2, 3);  // tp groups of 3, dp groups of 2
  auto comm = makeComm(mesh);
  const int64_t outer = 3, inner = 4;
  for (MeshAxis axis : {MeshAxis::kTp, MeshAxis::kDp}) {
    const int64_t n = mesh.axisSize(axis);
    std::vector<std::vector<float>> gathered(6), scattered(6);
    expectAllOk(onRanks(6, [&](int r) {
      // all_gather: x_r[o, k] = 100·r + 10·o + k.
      std::vector<float> x(size_t(outer * inner));
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t k = 0; k < inner; ++k) x[size_t(o * inner + k)] = float(100 * r + 10 * o + k);
      gathered[size_t(r)].assign(size_t(outer * n * inner), -1.0f);
      LLCDIST_RETURN_IF_ERROR(comm->allGather(r, mesh.group(r, axis), x.data(), gathered[size_t(r)].data(), outer, inner,
                                                 CommDType::kF32));
      // reduce_scatter: member m's x_m[j] = (m+1)·j over [outer, n·inner].
      const int64_t m = mesh.coord(r, axis);
      std::vector<float> big(size_t(outer * n * inner));
      for (size_t j = 0; j < big.size(); ++j) big[j] = float((m + 1) * int64_t(j));
      scattered[size_t(r)].assign(size_t(outer * inner), -1.0f);
      return comm->reduceScatter(r, mesh.group(r, axis), big.data(), scattered[size_t(r)].data(), outer, inner,
                                 CommDType::kF32, ReduceOp::kSum);
    }));
    for (int r = 0; r < 6; ++r) {
      const std::vector<int> g = mesh.group(r, axis);
      const int64_t c = mesh.coord(r, axis);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t m = 0; m < n; ++m)
          for (int64_t k = 0; k < inner; ++k)
            ASSERT_EQ(gathered[size_t(r)][size_t(o * n * inner + m * inner + k)], float(100 * g[size_t(m)] + 10 * o + k));
      const int64_t tri = n * (n + 1) / 2;
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t k = 0; k < inner; ++k)
          ASSERT_EQ(scattered[size_t(r)][size_t(o * inner + k)], float(tri * (o * n * inner + c * inner + k)));
    }
  }
}

// Values whose f32 sum depends on the order: every member must get the member-order sum's bits,
// however the threads are scheduled; f64 too.
TEST(CommunicatorTest, DeterministicMemberOrderAndIdenticalBits) {
  const Mesh mesh = meshOf(4, 1);
  auto comm = makeComm(mesh);
  const int64_t count = 1000;
  std::vector<std::vector<float>> in(4);
  for (int r = 0; r < 4; ++r) {
    in[size_t(r)] = testing::randn(count, 40 + r, 1.0f);
    for (size_t k = 0; k < in[size_t(r)].size(); k += 3) in[size_t(r)][k] *= 1e7f;  // make order matter
  }
  std::vector<float> want(in[0]);
  for (int r = 1; r < 4; ++r)
    for (int64_t k = 0; k < count; ++k) want[size_t(k)] += in[size_t(r)][size_t(k)];
  for (int trial = 0; trial < 10; ++trial) {
    std::vector<std::vector<float>> bufs = in;
    std::vector<std::vector<double>> d(4, std::vector<double>{0.1, 1e16});
    expectAllOk(onRanks(4, [&](int r) {
      std::this_thread::sleep_for(std::chrono::microseconds((r * 7 + trial * 13) % 50));
      d[size_t(r)][0] += r;
      LLCDIST_RETURN_IF_ERROR(comm->allReduce(r, mesh.group(r, MeshAxis::kDp), d[size_t(r)].data(), 2, CommDType::kF64, ReduceOp::kSum));
      return comm->allReduce(r, mesh.group(r, MeshAxis::kDp), bufs[size_t(r)].data(), count, CommDType::kF32,
                             ReduceOp::kSum);
    }));
    for (int r = 0; r < 4; ++r) {
      ASSERT_EQ(std::memcmp(bufs[size_t(r)].data(), want.data(), size_t(count) * 4), 0) << "rank " << r;
      ASSERT_EQ(d[size_t(r)][0], ((0.1 + (0.1 + 1)) + (0.1 + 2)) + (0.1 + 3));
      ASSERT_EQ(d[size_t(r)][1], 4e16);
    }
  }
}

// Interleaved collectives on different groups in one consistent order never deadlock.
TEST(CommunicatorTest, ManyInterleavedCollectives) {
  const Mesh mesh = meshOf(2, 2);
  auto comm = makeComm(mesh);
  std::vector<float> last(4);
  expectAllOk(onRanks(4, [&](int r) {
    float v = float(r);
    for (int i = 0; i < 300; ++i) {
      const MeshAxis axis = i % 3 == 0 ? MeshAxis::kDp : MeshAxis::kTp;
      LLCDIST_RETURN_IF_ERROR(comm->allReduce(r, mesh.group(r, axis), &v, 1, CommDType::kF32, ReduceOp::kMax));
    }
    last[size_t(r)] = v;
    return Status::ok();
  }));
  for (float v : last) EXPECT_EQ(v, 3.0f);
}

TEST(CommunicatorTest, MismatchedCallsAreAnErrorForEveryMember) {
  const Mesh mesh = meshOf(2, 1);
  auto comm = makeComm(mesh);
  std::vector<float> buf(8, 1.0f), buf2(8, 1.0f);
  const auto s = onRanks(2, [&](int r) {
    return comm->allReduce(r, {0, 1}, (r ? buf2 : buf).data(), r ? 5 : 4, CommDType::kF32, ReduceOp::kSum);
  });
  for (const Status& st : s) {
    ASSERT_FALSE(st.isOk());
    EXPECT_NE(st.message().find("mismatch"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("rank 1 called all_reduce(sum, 5 f32)"), std::string::npos) << st.message();
  }
  // Bad groups are refused at the call.
  auto c2 = makeComm(mesh);
  float x = 0;
  EXPECT_NE(c2->allReduce(0, {1}, &x, 1, CommDType::kF32, ReduceOp::kSum).message().find("not a member"), std::string::npos);
  EXPECT_NE(c2->allReduce(0, {0, 0}, &x, 1, CommDType::kF32, ReduceOp::kSum).message().find("twice"), std::string::npos);
  EXPECT_NE(c2->allReduce(0, {0, 5}, &x, 1, CommDType::kF32, ReduceOp::kSum).message().find("outside"), std::string::npos);
}

// Rank 2 fails instead of joining: ranks 0 and 1, already waiting (long timeout), return promptly with
// an Aborted error carrying rank 2's reason; later calls fail at once.
TEST(CommunicatorTest, AbortReleasesWaitingRanks) {
  const Mesh mesh = meshOf(3, 1);
  auto comm = makeComm(mesh, std::chrono::seconds(60));
  const auto t0 = std::chrono::steady_clock::now();
  const auto s = onRanks(3, [&](int r) {
    if (r == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      Status err = Status::invalidArgument("kernel exploded").withRank(2);
      comm->abort(err);
      return err;
    }
    float v = 1;
    return comm->allReduce(r, {0, 1, 2}, &v, 1, CommDType::kF32, ReduceOp::kSum);
  });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(s[size_t(r)].code(), StatusCode::kAborted);
    EXPECT_NE(s[size_t(r)].message().find("rank 2: kernel exploded"), std::string::npos) << s[size_t(r)].message();
  }
  EXPECT_EQ(comm->abortReason().message(), "rank 2: kernel exploded");
  float v = 0;
  EXPECT_EQ(comm->allReduce(0, {0, 1}, &v, 1, CommDType::kF32, ReduceOp::kSum).code(), StatusCode::kAborted);
}

// A member that never arrives: the waiting member's error names the collective, the axis, the group,
// who arrived and who is missing; the communicator is aborted with it.
TEST(CommunicatorTest, TimeoutNamesCollectiveAxisGroupAndMembers) {
  const Mesh mesh = meshOf(2, 2);
  auto comm = makeComm(mesh, std::chrono::milliseconds(150));
  float v[4] = {1, 2, 3, 4};
  // Rank 0 waits on its dp group [0, 2] alone.
  const Status s = comm->allReduce(0, mesh.group(0, MeshAxis::kDp), v, 4, CommDType::kF32, ReduceOp::kAvg);
  ASSERT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.message();
  for (const char* part : {"all_reduce(avg, 4 f32)", "axis dp", "group [0, 2]", "call 0", "arrived: rank 0 (member 0)",
                           "missing: rank 2 (member 1) after 0 call(s)", "timed out after 0.15 s"})
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " in: " << s.message();
  EXPECT_EQ(comm->abortReason().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(comm->abortReason().message().find("rank 0: "), std::string::npos);
  EXPECT_EQ(comm->allReduce(2, mesh.group(2, MeshAxis::kDp), v, 4, CommDType::kF32, ReduceOp::kAvg).code(),
            StatusCode::kAborted);
}

// The CPU backend's collectives run through the communicator.
TEST(CommunicatorTest, CpuBackendCollectivesUseTheCommunicator) {
  const Mesh mesh = meshOf(2, 1);
  auto comm = makeComm(mesh);
  std::vector<std::unique_ptr<Backend>> be;
  for (int r = 0; r < 2; ++r) {
    CpuBackendOptions o;
    o.rank = r;
    o.communicator = comm.get();
    be.push_back(makeCpuBackend(o));
    ASSERT_TRUE(be.back()->allocateArena(256).isOk());
  }
  expectAllOk(onRanks(2, [&](int r) {
    float* a = reinterpret_cast<float*>(be[size_t(r)]->arenaAt(0));
    for (int k = 0; k < 4; ++k) a[k] = float(r * 10 + k);
    LLCDIST_ASSIGN_OR_RETURN(Channel ch, be[size_t(r)]->createChannel({0, 1}));
    LLCDIST_ASSIGN_OR_RETURN(CollectiveHandle h, be[size_t(r)]->allReduceAsync(Stream{0}, a, 4, ReduceOp::kSum, ch));
    LLCDIST_RETURN_IF_ERROR(be[size_t(r)]->waitCollective(Stream{0}, h));
    LLCDIST_ASSIGN_OR_RETURN(h, be[size_t(r)]->allGatherAsync(Stream{0}, a, a + 16, 1, 4, 8, CommDType::kF32, ch));
    return be[size_t(r)]->waitCollective(Stream{0}, h);
  }));
  for (int r = 0; r < 2; ++r) {
    const float* a = reinterpret_cast<const float*>(be[size_t(r)]->arenaAt(0));
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(a[k], float(10 + 2 * k));
      EXPECT_EQ(a[16 + k], float(10 + 2 * k));
      EXPECT_EQ(a[20 + k], float(10 + 2 * k));
    }
  }
}

// Padded blocks (ZeRO when dp does not divide the rows): the whole side holds `total` < n·inner elements
// a row. all-gather keeps the real elements only (nothing written past them); reduce-scatter reads the
// missing tail as zeros. dp = 4, outer 2, inner 3, total 7: members 2 and 3 own 1 and 0 real elements.
TEST(CommunicatorTest, CpuBackendPaddedAllGatherAndReduceScatter) {
  const int n = 4;
  const int64_t outer = 2, inner = 3, total = 7;
  const Mesh mesh = meshOf(n, 1);
  auto comm = makeComm(mesh);
  std::vector<std::unique_ptr<Backend>> be;
  for (int r = 0; r < n; ++r) {
    CpuBackendOptions o;
    o.rank = r;
    o.communicator = comm.get();
    be.push_back(makeCpuBackend(o));
    ASSERT_TRUE(be.back()->allocateArena(1024).isOk());
  }
  // Arena layout (floats): block [0, 6), gathered [16, 16 + 14) followed by a guard, reduce input
  // [64, 64 + 14), reduced block [96, 102).
  expectAllOk(onRanks(n, [&](int r) {
    float* a = reinterpret_cast<float*>(be[size_t(r)]->arenaAt(0));
    for (int64_t i = 0; i < outer * inner; ++i) a[i] = float(100 * r + i);
    for (int64_t i = 0; i < 48; ++i) a[16 + i] = -1.0f;
    for (int64_t i = 0; i < outer * total; ++i) a[64 + i] = float((r + 1) * (i + 1));
    LLCDIST_ASSIGN_OR_RETURN(Channel group, be[size_t(r)]->createChannel(mesh.group(r, MeshAxis::kDp)));
    LLCDIST_ASSIGN_OR_RETURN(CollectiveHandle h,
                             be[size_t(r)]->allGatherAsync(Stream{0}, a, a + 16, outer, inner, total, CommDType::kF32, group));
    LLCDIST_RETURN_IF_ERROR(be[size_t(r)]->waitCollective(Stream{0}, h));
    LLCDIST_ASSIGN_OR_RETURN(h, be[size_t(r)]->reduceScatterAsync(Stream{0}, a + 64, a + 96, outer, inner, total,
                                                                  CommDType::kF32, ReduceOp::kSum, group));
    return be[size_t(r)]->waitCollective(Stream{0}, h);
  }));
  const float tri = float(n * (n + 1) / 2);  // sum over members of (m + 1)
  for (int r = 0; r < n; ++r) {
    const float* a = reinterpret_cast<const float*>(be[size_t(r)]->arenaAt(0));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < total; ++j)  // element j of row o: member j / inner's element (o, j % inner)
        EXPECT_EQ(a[16 + o * total + j], float(100 * (j / inner) + o * inner + j % inner)) << r << " " << o << " " << j;
    EXPECT_EQ(a[16 + outer * total], -1.0f) << "all-gather wrote past the real elements";
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < inner; ++k) {
        const int64_t j = r * inner + k;
        EXPECT_EQ(a[96 + o * inner + k], j < total ? tri * float(o * total + j + 1) : 0.0f) << r << " " << o << " " << k;
      }
  }
  // total outside (0, n·inner] is refused.
  auto bad = be[0]->allGatherAsync(Stream{0}, nullptr, nullptr, 1, inner, n * inner + 1, CommDType::kF32,
                                    be[0]->createChannel(mesh.group(0, MeshAxis::kDp)).value());
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("total 13"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace llcdist::rt
