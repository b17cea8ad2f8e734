// The MPI communicator, run as one process per rank (ctest: mpirun -np 2, 4 and 8). Each process
// makes every rank's inputs (a function of rank and element), runs the same calls on the in-process
// communicator with one thread per rank as the reference, and checks that its own outputs are the
// same bits; sums are also checked against a plain loop in member order.
#include "llcdist/runtime/Bf16.h"
#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/Mesh.h"
#include "llcdist/runtime/MpiCommunicator.h"

#include "cuda/host/NcclPlan.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <thread>

namespace llcdist::rt {
namespace {

int worldRank() { return mpiWorldRank(); }
int worldSize() { return mpiWorldSize(); }

std::unique_ptr<Communicator> mpiComm(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  MpiCommunicatorOptions o;
  o.timeout = timeout;
  auto c = makeMpiCommunicator(o);
  EXPECT_TRUE(c.isOk()) << c.status().toString();
  return std::move(c).value();
}

// Rank r's input element i: values whose sums round differently in different orders.
float input(int r, int64_t i) { return float(1.0 + 0.1 * r) * float(1e-3 * double(i % 97) + 1.0 / (3.0 + r + i)); }

// `call(comm, rank)` on the in-process communicator, one thread per rank; returns what `out(rank)`
// holds after it, for this process's rank.
template <typename Out>
Out inProcessReference(const std::function<Status(Communicator&, int, Out&)>& call) {
  InProcessCommunicatorOptions o;
  o.worldSize = worldSize();
  auto comm = makeInProcessCommunicator(o);
  std::vector<Out> outs(static_cast<size_t>(worldSize()));
  std::vector<std::thread> threads;
  for (int r = 0; r < worldSize(); ++r)
    threads.emplace_back([&, r] { EXPECT_TRUE(call(*comm, r, outs[size_t(r)]).isOk()); });
  for (auto& t : threads) t.join();
  return outs[size_t(worldRank())];
}

std::vector<int> world() {
  std::vector<int> g;
  for (int r = 0; r < worldSize(); ++r) g.push_back(r);
  return g;
}

// This rank's pair {2k, 2k+1} (the world when it has one rank).
std::vector<int> pairOf(int r) {
  if (worldSize() < 2) return {r};
  int first = r / 2 * 2;
  return first + 1 < worldSize() ? std::vector<int>{first, first + 1} : std::vector<int>{first};
}

TEST(MpiCommunicator, AllReduceIsTheInProcessResultBitForBit) {
  auto comm = mpiComm();
  const int me = worldRank();
  const int64_t n = 1003;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax})
    for (const std::vector<int>& g : {world(), pairOf(me)}) {
      auto call = [&](Communicator& c, int r, std::vector<float>& buf) {
        buf.resize(size_t(n));
        for (int64_t i = 0; i < n; ++i) buf[size_t(i)] = input(r, i);
        std::vector<int> group = g.size() == size_t(worldSize()) ? world() : pairOf(r);
        return c.allReduce(r, group, buf.data(), n, CommDType::kF32, op);
      };
      std::vector<float> want = inProcessReference<std::vector<float>>(call), got;
      ASSERT_TRUE(call(*comm, me, got).isOk());
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), size_t(n) * 4)) << "op " << int(op);
      if (op == ReduceOp::kSum) {  // a plain loop in member order
        for (int64_t i = 0; i < n; i += 101) {
          float acc = input(g[0], i);
          for (size_t m = 1; m < g.size(); ++m) acc += input(g[m], i);
          EXPECT_EQ(acc, got[size_t(i)]) << "element " << i;
        }
      }
    }
}

TEST(MpiCommunicator, F64AndBf16Reductions) {
  auto comm = mpiComm();
  const int me = worldRank();
  const int64_t n = 257;
  auto callF64 = [&](Communicator& c, int r, std::vector<double>& buf) {
    buf.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) buf[size_t(i)] = double(input(r, i)) / 7.0;
    return c.allReduce(r, world(), buf.data(), n, CommDType::kF64, ReduceOp::kSum);
  };
  std::vector<double> wantD = inProcessReference<std::vector<double>>(callF64), gotD;
  ASSERT_TRUE(callF64(*comm, me, gotD).isOk());
  EXPECT_EQ(0, std::memcmp(wantD.data(), gotD.data(), size_t(n) * 8));
  auto callBf16 = [&](Communicator& c, int r, std::vector<uint16_t>& buf) {
    buf.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) buf[size_t(i)] = floatToBf16(input(r, i));
    return c.allReduce(r, world(), buf.data(), n, CommDType::kBF16, ReduceOp::kAvg);
  };
  std::vector<uint16_t> wantB = inProcessReference<std::vector<uint16_t>>(callBf16), gotB;
  ASSERT_TRUE(callBf16(*comm, me, gotB).isOk());
  EXPECT_EQ(wantB, gotB);
}

TEST(MpiCommunicator, AllGatherAndReduceScatterLayouts) {
  auto comm = mpiComm();
  const int me = worldRank(), n = worldSize();
  const int64_t outer = 3, inner = 5;
  auto gather = [&](Communicator& c, int r, std::vector<float>& y) {
    std::vector<float> x(size_t(outer * inner));
    for (size_t i = 0; i < x.size(); ++i) x[i] = input(r, int64_t(i));
    y.assign(size_t(outer * inner * n), -1.0f);
    return c.allGather(r, world(), x.data(), y.data(), outer, inner, CommDType::kF32);
  };
  std::vector<float> wantG = inProcessReference<std::vector<float>>(gather), gotG;
  ASSERT_TRUE(gather(*comm, me, gotG).isOk());
  EXPECT_EQ(wantG, gotG);
  // y[o, m·inner + k] = x_m[o, k]
  for (int m = 0; m < n; ++m) EXPECT_EQ(gotG[size_t(1 * n * inner + m * inner + 2)], input(m, 1 * inner + 2));
  auto scatter = [&](Communicator& c, int r, std::vector<float>& y) {
    std::vector<float> x(size_t(outer * inner * n));
    for (size_t i = 0; i < x.size(); ++i) x[i] = input(r, int64_t(i));
    y.assign(size_t(outer * inner), -1.0f);
    return c.reduceScatter(r, world(), x.data(), y.data(), outer, inner, CommDType::kF32, ReduceOp::kSum);
  };
  std::vector<float> wantS = inProcessReference<std::vector<float>>(scatter), gotS;
  ASSERT_TRUE(scatter(*comm, me, gotS).isOk());
  EXPECT_EQ(0, std::memcmp(wantS.data(), gotS.data(), gotS.size() * 4));
}

// allToAll: block m of every member's send to member m, bit for bit the in-process result, f32 and bf16.
TEST(MpiCommunicator, AllToAllExchangesBlocks) {
  auto comm = mpiComm();
  const int me = worldRank(), n = worldSize();
  const int64_t count = 7;
  for (CommDType dtype : {CommDType::kF32, CommDType::kBF16}) {
    const int64_t el = commDTypeSize(dtype);
    auto call = [&](Communicator& c, int r, std::vector<uint8_t>& recv) {
      std::vector<uint8_t> send(size_t(n * count * el));
      for (size_t i = 0; i < send.size(); ++i) send[i] = uint8_t(r * 31 + int(i));
      recv.assign(send.size(), 0xee);
      return c.allToAll(r, world(), send.data(), recv.data(), count, dtype);
    };
    std::vector<uint8_t> want = inProcessReference<std::vector<uint8_t>>(call), got;
    ASSERT_TRUE(call(*comm, me, got).isOk());
    EXPECT_EQ(want, got);
    // recv block m = member m's send block `me`
    for (int m = 0; m < n; ++m)
      for (int64_t b = 0; b < count * el; ++b)
        ASSERT_EQ(got[size_t(m * count * el + b)], uint8_t(m * 31 + int(me * count * el + b)));
  }
}

// allToAllV (expert parallelism): splits with zeros (c = 3 chunks per member), then variable-size row
// messages, f32 and bf16 rows; y and recv splits bit for bit the in-process result, the tail of y zero,
// on the world and on pairs.
TEST(MpiCommunicator, AllToAllVExchangesSplitsThenRows) {
  auto comm = mpiComm();
  const int me = worldRank();
  const int64_t c = 3, H = 5;
  for (const std::vector<int>& group : {world(), pairOf(me)})
    for (CommDType dtype : {CommDType::kF32, CommDType::kBF16}) {
      const int64_t n = int64_t(group.size()), el = commDTypeSize(dtype), rowBytes = H * el;
      const int64_t xRows = n * c * 2, yRows = n * c * 2 + 3;  // every split <= 2: a spare tail in y
      struct Out {
        std::vector<uint8_t> y;
        std::vector<int32_t> recv;
      };
      auto call = [&](Communicator& cm, int r, Out& out) {
        std::vector<int32_t> send(size_t(n * c));
        for (int64_t k = 0; k < n * c; ++k) send[size_t(k)] = int32_t((r * 7 + k * 3) % 3);  // 0, 1 or 2
        std::vector<uint8_t> x(size_t(xRows * rowBytes));
        for (size_t i = 0; i < x.size(); ++i) x[i] = uint8_t(r * 29 + int(i));
        out.y.assign(size_t(yRows * rowBytes), 0xee);
        out.recv.assign(size_t(n * c), -1);
        return cm.allToAllV(r, group, x.data(), xRows, send.data(), out.y.data(), yRows, out.recv.data(), c, H,
                            dtype);
      };
      // The reference: every world rank's call on its group (the groups partition the world) on the
      // in-process communicator, one thread per rank.
      InProcessCommunicatorOptions o;
      o.worldSize = worldSize();
      auto ref = makeInProcessCommunicator(o);
      std::vector<Out> outs(static_cast<size_t>(worldSize()));
      std::vector<std::thread> threads;
      for (int r = 0; r < worldSize(); ++r)
        threads.emplace_back([&, r] {
          std::vector<int> g = group == world() ? world() : pairOf(r);
          auto callOn = [&](Communicator& cm, Out& out) {
            const int64_t gn = int64_t(g.size());
            std::vector<int32_t> send(size_t(gn * c));
            for (int64_t k = 0; k < gn * c; ++k) send[size_t(k)] = int32_t((r * 7 + k * 3) % 3);
            std::vector<uint8_t> x(size_t(gn * c * 2 * rowBytes));
            for (size_t i = 0; i < x.size(); ++i) x[i] = uint8_t(r * 29 + int(i));
            out.y.assign(size_t((gn * c * 2 + 3) * rowBytes), 0xee);
            out.recv.assign(size_t(gn * c), -1);
            return cm.allToAllV(r, g, x.data(), gn * c * 2, send.data(), out.y.data(), gn * c * 2 + 3,
                                out.recv.data(), c, H, dtype);
          };
          EXPECT_TRUE(callOn(*ref, outs[size_t(r)]).isOk());
        });
      for (auto& t : threads) t.join();
      Out got;
      Status s = call(*comm, me, got);
      ASSERT_TRUE(s.isOk()) << s.toString();
      EXPECT_EQ(got.recv, outs[size_t(me)].recv);
      EXPECT_EQ(got.y, outs[size_t(me)].y);
      int64_t rows = 0;
      for (int32_t v : got.recv) rows += v;
      for (int64_t b = rows * rowBytes; b < yRows * rowBytes; ++b) ASSERT_EQ(got.y[size_t(b)], 0) << b;
    }
}

// A wrong split fails allToAllV on every member of the group with the same error before any row moves,
// not on its own member while the others wait out the timeout (30 s here): the last rank's send splits
// exceed its x, then rank 0's y is too small for what it receives. Each case on a fresh communicator
// (a failed collective aborts the one it ran on).
TEST(MpiCommunicator, AllToAllVBadSplitsFailEveryMemberAtOnce) {
  const int me = worldRank(), n = worldSize(), last = n - 1;
  const int64_t c = 2, H = 3, rows = n * c;  // every split 1: each member sends and receives n·c rows
  for (int bad : {0, 1}) {
    SCOPED_TRACE(bad == 0 ? "send splits past x" : "y too small");
    auto comm = mpiComm(std::chrono::seconds(30));
    std::vector<int32_t> send(size_t(n * c), 1), recv(size_t(n * c), -1);
    if (bad == 0 && me == last) send[0] = 1000;
    const int64_t yRows = bad == 1 && me == 0 ? rows - 1 : rows;
    std::vector<float> x(size_t(rows * H), float(me)), y(size_t(yRows * H), -1.0f);
    const auto start = std::chrono::steady_clock::now();
    Status s =
        comm->allToAllV(me, world(), x.data(), rows, send.data(), y.data(), yRows, recv.data(), c, H, CommDType::kF32);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_FALSE(s.isOk());
    const std::string want = bad == 0 ? "all_to_all_v on rank " + std::to_string(last) + ": the send splits sum to"
                                      : "all_to_all_v on rank 0 receives " + std::to_string(rows) + " rows but y holds";
    EXPECT_NE(s.message().find(want), std::string::npos) << s.toString();
    EXPECT_LT(seconds, 10.0) << "the members failed apart (the timeout) instead of together";
    EXPECT_EQ(recv, std::vector<int32_t>(size_t(n * c), -1));  // nothing written
    EXPECT_EQ(y, std::vector<float>(size_t(yRows * H), -1.0f));
  }
}

// Messages of one pair arrive in order and carry their triple; a receive that expects another tag
// is an error naming both.
TEST(MpiCommunicator, SendsArriveInOrderAndTriplesAreChecked) {
  if (worldSize() < 2) GTEST_SKIP() << "needs two ranks";
  auto comm = mpiComm();
  const int me = worldRank(), n = worldSize();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  for (int64_t k = 0; k < 3; ++k) {
    std::vector<float> x(size_t(10 + k), float(100 * me + k));
    ASSERT_TRUE(comm->send(me, next, x.data(), int64_t(x.size()), /*tag=*/7, /*microbatch=*/k).isOk());
  }
  for (int64_t k = 0; k < 3; ++k) {
    std::vector<float> y(size_t(10 + k));
    Status s = comm->recv(me, prev, y.data(), int64_t(y.size()), 7, k);
    ASSERT_TRUE(s.isOk()) << s.toString();
    EXPECT_EQ(y.back(), float(100 * prev + k));
  }
  std::vector<float> x(4, 1.0f), y(4);
  ASSERT_TRUE(comm->send(me, next, x.data(), 4, /*tag=*/1, 0).isOk());
  Status bad = comm->recv(me, prev, y.data(), 4, /*tag=*/2, 0);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("send/recv mismatch: rank " + std::to_string(me) +
                               " receives (count 4, tag 2, microbatch 0) from rank " + std::to_string(prev) +
                               " but rank " + std::to_string(prev) + " sent (count 4, tag 1, microbatch 0)"),
            std::string::npos)
      << bad.toString();
  // The mismatch aborted this communicator: later calls fail at once.
  EXPECT_EQ(comm->recv(me, prev, y.data(), 4, 1, 0).code(), StatusCode::kAborted);
}

// Members that ask for different collectives all get the same error, naming both calls.
TEST(MpiCommunicator, AMismatchIsAnErrorOnEveryMember) {
  if (worldSize() < 2) GTEST_SKIP() << "needs two ranks";
  auto comm = mpiComm();
  const int me = worldRank();
  std::vector<float> buf(8, 1.0f);
  const int64_t count = me == 1 ? 6 : 8;
  Status s = comm->allReduce(me, world(), buf.data(), count, CommDType::kF32, ReduceOp::kSum);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("collective mismatch on group [0, 1"), std::string::npos) << s.toString();
  EXPECT_NE(s.message().find("rank 0 calls all_reduce(sum, 8 f32) but rank 1 calls all_reduce(sum, 6 f32)"),
            std::string::npos)
      << s.toString();
}

// A member that never comes: the others time out naming the collective and who is missing.
TEST(MpiCommunicator, AMissingMemberTimesOutNamingIt) {
  if (worldSize() < 2) GTEST_SKIP() << "needs two ranks";
  auto comm = mpiComm(std::chrono::milliseconds(300));
  const int me = worldRank();
  std::vector<float> buf(4, 1.0f);
  if (me != worldSize() - 1) {
    Status s = comm->allReduce(me, world(), buf.data(), 4, CommDType::kF32, ReduceOp::kSum);
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
    EXPECT_NE(s.message().find("missing: " + std::to_string(worldSize() - 1)), std::string::npos) << s.toString();
  }
}

TEST(MpiCommunicator, OneRankPerProcess) {
  auto comm = mpiComm();
  EXPECT_EQ(comm->worldSize(), worldSize());
  std::vector<float> buf(1);
  Status s = comm->allReduce((worldRank() + 1) % worldSize(), world(), buf.data(), 1, CommDType::kF32,
                             ReduceOp::kSum);
  if (worldSize() > 1) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.toString();
  }
}

// The CUDA backend's NCCL bootstrap over MPI (one process per rank, as `mpirun llc-dist run
// --backend cuda` makes it): every process gets rank 0's unique id and every rank's groups, so each
// derives the same channel plan; here the groups are a dp x tp mesh's (CudaHostTest.cpp checks the
// plan itself).
TEST(MpiCommunicator, NcclBootstrapGivesEveryProcessTheSamePlan) {
  auto comm = mpiComm();
  const int n = worldSize();
  const Mesh mesh = Mesh::make(n % 2 == 0 ? n / 2 : n, n % 2 == 0 ? 2 : 1, 1);
  std::vector<cuda::Group> mine;
  for (MeshAxis axis : {MeshAxis::kDp, MeshAxis::kTp}) mine.push_back(mesh.group(worldRank(), axis));
  int made = 0;
  auto boot = cuda::bootstrapNccl(*comm, worldRank(), mine, [&]() -> StatusOr<cuda::NcclId> {
    ++made;
    cuda::NcclId id{};
    for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<unsigned char>(7 * i + 3);
    return id;
  });
  ASSERT_TRUE(boot.isOk()) << boot.status().toString();
  EXPECT_EQ(made, worldRank() == 0 ? 1 : 0);
  EXPECT_EQ(boot->id[1], 10);
  ASSERT_EQ(boot->groupsOfRank.size(), size_t(n));
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(boot->groupsOfRank[size_t(r)][0], mesh.group(r, MeshAxis::kDp)) << "rank " << r;
    EXPECT_EQ(boot->groupsOfRank[size_t(r)][1], mesh.group(r, MeshAxis::kTp)) << "rank " << r;
  }
  // Every process's plan has the same rounds: the same ncclCommSplit calls on every rank.
  auto plan = cuda::planNcclChannels(boot->groupsOfRank, worldRank());
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  std::vector<double> shape = {double(plan->rounds.size())};
  for (const auto& round : plan->rounds) shape.push_back(double(round.size()));
  shape.resize(8, -1.0);
  std::vector<double> all(size_t(n) * 8);
  ASSERT_TRUE(comm->allGather(worldRank(), world(), shape.data(), all.data(), 1, 8, CommDType::kF64).isOk());
  for (int r = 1; r < n; ++r)
    for (int i = 0; i < 8; ++i) EXPECT_EQ(all[size_t(r) * 8 + size_t(i)], all[size_t(i)]) << "rank " << r;
}

}  // namespace
}  // namespace llcdist::rt

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (llcdist::rt::Status s = llcdist::rt::initMpi(); !s.isOk()) {
    std::fprintf(stderr, "%s\n", s.toString().c_str());
    return 1;
  }
  // One report: the other ranks print only failures.
  if (llcdist::rt::mpiWorldRank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  return RUN_ALL_TESTS();
}
