// Collectives of dtype bf16 (Communicator.h, docs/plan-format.md "Collective dtypes"): NCCL's bf16
// reduction, each partial sum rounded to bf16 in member order, checked bit for bit against a reference
// computed here independently of Bf16.h (exact sums in double, rounded to the nearest bf16 with ties to
// even by rint); all_gather of 2-byte elements; the CPU backend's padded blocks in bf16; i32 sums and
// messages.
#include "TestUtil.h"
#include "CommTestUtil.h"

#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Mesh.h"

#include <cfenv>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

namespace llcdist::rt {
namespace {
using testing::expectAllOk;
using testing::makeComm;
using testing::onRanks;



// The reference: bf16 bits of the value nearest to v (finite, within bf16's normal range), ties to
// even, computed from the bf16 grid itself: 8 significant bits, so the spacing at v is 2^(e - 7).
uint16_t refBf16(double v) {
  if (v == 0) return std::signbit(v) ? 0x8000 : 0;
  const int e = std::ilogb(v);
  const double ulp = std::ldexp(1.0, e - 7);
  const double q = std::rint(v / ulp) * ulp;  // rint: round to nearest, ties to even (the default mode)
  const float f = float(q);                   // exact: q has at most 9 significant bits
  uint32_t u;
  std::memcpy(&u, &f, 4);
  EXPECT_EQ(u & 0xffffu, 0u) << v;
  return uint16_t(u >> 16);
}
double refValue(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Seeded bf16 inputs spread over a few binades (so partial sums round differently from a single
// rounding of the exact sum).
std::vector<uint16_t> bf16Inputs(int64_t n, uint32_t seed) {
  std::vector<float> v = testing::randn(n, seed, 1.0f);
  std::vector<uint16_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = refBf16(double(v[size_t(i)]) * ((i % 5) + 1));
  return out;
}

TEST(CommDTypeTest, Bf16AllReduceRoundsEveryPartialSumInMemberOrder) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  const Mesh mesh = Mesh::make(4, 1, 1);
  auto comm = makeComm(mesh);
  const int64_t count = 4096;
  std::vector<std::vector<uint16_t>> in(4);
  for (int r = 0; r < 4; ++r) in[size_t(r)] = bf16Inputs(count, 70 + r);
  // Element 0: 1 + 2^-8 + 2^-8 + 2^-8. Each partial sum is a tie that rounds to even (1.0), so
  // NCCL's bf16 sum is 1.0 where the f32 sum rounded once would be 1.0078125 (1 + 2^-7).
  in[0][0] = refBf16(1.0);
  for (int r = 1; r < 4; ++r) in[size_t(r)][0] = refBf16(std::ldexp(1.0, -8));
  std::vector<std::vector<uint16_t>> sum = in, avg = in, mx = in;
  expectAllOk(onRanks(4, [&](int r) {
    const std::vector<int> g = mesh.group(r, MeshAxis::kDp);
    LLCDIST_RETURN_IF_ERROR(comm->allReduce(r, g, sum[size_t(r)].data(), count, CommDType::kBF16, ReduceOp::kSum));
    LLCDIST_RETURN_IF_ERROR(comm->allReduce(r, g, avg[size_t(r)].data(), count, CommDType::kBF16, ReduceOp::kAvg));
    return comm->allReduce(r, g, mx[size_t(r)].data(), count, CommDType::kBF16, ReduceOp::kMax);
  }));
  int64_t differsFromOneRounding = 0;
  for (int64_t i = 0; i < count; ++i) {
    uint16_t acc = in[0][size_t(i)];
    double exact = refValue(acc), best = refValue(acc);
    for (int m = 1; m < 4; ++m) {
      const double x = refValue(in[size_t(m)][size_t(i)]);
      acc = refBf16(refValue(acc) + x);  // bf16 + bf16 is exact in double
      exact += x;
      best = std::max(best, x);
    }
    differsFromOneRounding += acc != refBf16(exact);
    const uint16_t wantAvg = refBf16(double(float(refValue(acc)) * 0.25f));
    for (int r = 0; r < 4; ++r) {
      ASSERT_EQ(sum[size_t(r)][size_t(i)], acc) << "sum, rank " << r << " element " << i;
      ASSERT_EQ(avg[size_t(r)][size_t(i)], wantAvg) << "avg, rank " << r << " element " << i;
      ASSERT_EQ(mx[size_t(r)][size_t(i)], refBf16(best)) << "max, rank " << r << " element " << i;
    }
  }
  EXPECT_EQ(refValue(sum[0][0]), 1.0);
  // The inputs exercise the per-step rounding: a good share of the sums differ from one rounding.
  EXPECT_GT(differsFromOneRounding, count / 20);
}

TEST(CommDTypeTest, Bf16AllGatherAndReduceScatterMoveTwoByteElements) {
  const int n = 2;
  const Mesh mesh = Mesh::make(n, 1, 1);
  auto comm = makeComm(mesh);
  const int64_t outer = 3, inner = 5;
  std::vector<std::vector<uint16_t>> x(n), gathered(n), big(n), scattered(n);
  for (int r = 0; r < n; ++r) {
    x[size_t(r)] = bf16Inputs(outer * inner, 90 + r);
    big[size_t(r)] = bf16Inputs(outer * n * inner, 95 + r);
    gathered[size_t(r)].assign(size_t(outer * n * inner) + 1, 0xdead);  // one guard element
    scattered[size_t(r)].assign(size_t(outer * inner) + 1, 0xdead);
  }
  expectAllOk(onRanks(n, [&](int r) {
    const std::vector<int> g = mesh.group(r, MeshAxis::kDp);
    LLCDIST_RETURN_IF_ERROR(
        comm->allGather(r, g, x[size_t(r)].data(), gathered[size_t(r)].data(), outer, inner, CommDType::kBF16));
    return comm->reduceScatter(r, g, big[size_t(r)].data(), scattered[size_t(r)].data(), outer, inner,
                               CommDType::kBF16, ReduceOp::kSum);
  }));
  for (int r = 0; r < n; ++r) {
    for (int64_t ob = 0; ob < outer; ++ob)
      for (int m = 0; m < n; ++m)
        for (int64_t k = 0; k < inner; ++k)
          ASSERT_EQ(gathered[size_t(r)][size_t(ob * n * inner + m * inner + k)], x[size_t(m)][size_t(ob * inner + k)]);
    EXPECT_EQ(gathered[size_t(r)].back(), 0xdead) << "all_gather wrote past outer·n·inner 2-byte elements";
    for (int64_t ob = 0; ob < outer; ++ob)
      for (int64_t k = 0; k < inner; ++k) {
        const size_t j = size_t(ob * n * inner + r * inner + k);
        ASSERT_EQ(scattered[size_t(r)][size_t(ob * inner + k)], refBf16(refValue(big[0][j]) + refValue(big[1][j])));
      }
    EXPECT_EQ(scattered[size_t(r)].back(), 0xdead);
  }
}

// Members that disagree on the dtype are a mismatch naming both calls.
TEST(CommDTypeTest, DTypeMismatchIsAnError) {
  const Mesh mesh = Mesh::make(2, 1, 1);
  auto comm = makeComm(mesh);
  std::vector<float> buf(4, 1.0f);
  std::vector<std::vector<float>> bufs(2, buf);
  std::vector<Status> s = onRanks(2, [&](int r) {
    return comm->allReduce(r, mesh.group(r, MeshAxis::kDp), bufs[size_t(r)].data(), 4,
                           r == 0 ? CommDType::kF32 : CommDType::kBF16, ReduceOp::kSum);
  });
  for (const Status& st : s) {
    ASSERT_FALSE(st.isOk());
    EXPECT_NE(st.message().find("all_reduce(sum, 4 f32)"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("all_reduce(sum, 4 bf16)"), std::string::npos) << st.message();
  }
}

// i32 buffers (the MoE load-balancing loss's counts): all_reduce sums them exactly, in i32 (values past
// f32's 2^24 stay exact), and send / recv move them as i32, the dtype part of the message's match.
TEST(CommDTypeTest, I32AllReduceSumsExactlyAndPointToPointMovesI32) {
  const Mesh mesh = Mesh::make(3, 1, 1);
  auto comm = makeComm(mesh);
  std::vector<std::vector<int32_t>> bufs = {{16777217, 0, -5}, {1, 7, 5}, {2, 100, 0}};
  expectAllOk(onRanks(3, [&](int r) {
    return comm->allReduce(r, mesh.group(r, MeshAxis::kDp), bufs[size_t(r)].data(), 3, CommDType::kI32,
                           ReduceOp::kSum);
  }));
  for (const std::vector<int32_t>& b : bufs) EXPECT_EQ(b, (std::vector<int32_t>{16777220, 107, 0}));
  std::vector<int32_t> sent = {3, -1, 40}, got(3, 0);
  expectAllOk(onRanks(2, [&](int r) {
    return r == 0 ? comm->send(0, 1, sent.data(), 3, CommDType::kI32, 7, 0)
                  : comm->recv(1, 0, got.data(), 3, CommDType::kI32, 7, 0);
  }));
  EXPECT_EQ(got, sent);
  std::vector<Status> s = onRanks(2, [&](int r) {
    return r == 0 ? comm->send(0, 1, sent.data(), 3, CommDType::kI32, 8, 0)
                  : comm->recv(1, 0, got.data(), 3, CommDType::kF32, 8, 0);
  });
  ASSERT_FALSE(s[1].isOk());
  EXPECT_NE(s[1].message().find("i32"), std::string::npos) << s[1].message();
}

// The CPU backend's padded blocks (ZeRO's total < n·inner) with 2-byte elements.
TEST(CommDTypeTest, CpuBackendPaddedBf16Blocks) {
  const int n = 2;
  const Mesh mesh = Mesh::make(n, 1, 1);
  auto comm = makeComm(mesh);
  std::vector<std::unique_ptr<Backend>> be;
  for (int r = 0; r < n; ++r) {
    CpuBackendOptions bo;
    bo.rank = r;
    bo.communicator = comm.get();
    be.push_back(makeCpuBackend(bo));
    ASSERT_TRUE(be.back()->allocateArena(1024).isOk());
  }
  const int64_t outer = 2, inner = 3, total = 5;  // padded: n·inner = 6
  expectAllOk(onRanks(n, [&](int r) {
    auto* a = reinterpret_cast<uint16_t*>(be[size_t(r)]->arenaAt(0));
    for (int64_t i = 0; i < outer * inner; ++i) a[i] = refBf16(double(10 * r + i));
    for (int64_t i = 0; i < outer * total + 1; ++i) a[16 + i] = 0xdead;
    for (int64_t i = 0; i < outer * total; ++i) a[64 + i] = refBf16(double((r + 1) * (i + 1)));
    LLCDIST_ASSIGN_OR_RETURN(Channel g, be[size_t(r)]->createChannel(mesh.group(r, MeshAxis::kDp)));
    LLCDIST_ASSIGN_OR_RETURN(CollectiveHandle h, be[size_t(r)]->allGatherAsync(Stream{0}, a, a + 16, outer, inner,
                                                                              total, CommDType::kBF16, g));
    LLCDIST_RETURN_IF_ERROR(be[size_t(r)]->waitCollective(Stream{0}, h));
    LLCDIST_ASSIGN_OR_RETURN(h, be[size_t(r)]->reduceScatterAsync(Stream{0}, a + 64, a + 96, outer, inner, total,
                                                                  CommDType::kBF16, ReduceOp::kSum, g));
    return be[size_t(r)]->waitCollective(Stream{0}, h);
  }));
  for (int r = 0; r < n; ++r) {
    const auto* a = reinterpret_cast<const uint16_t*>(be[size_t(r)]->arenaAt(0));
    for (int64_t ob = 0; ob < outer; ++ob)
      for (int64_t j = 0; j < total; ++j)
        EXPECT_EQ(refValue(a[16 + ob * total + j]), double(10 * (j / inner) + ob * inner + j % inner)) << r << " " << j;
    EXPECT_EQ(a[16 + outer * total], 0xdead) << "all-gather wrote past the real elements";
    for (int64_t ob = 0; ob < outer; ++ob)
      for (int64_t k = 0; k < inner; ++k) {
        const int64_t j = r * inner + k;
        EXPECT_EQ(refValue(a[96 + ob * inner + k]), j < total ? 3.0 * double(ob * total + j + 1) : 0.0) << r << " " << k;
      }
  }
}

}  // namespace
}  // namespace llcdist::rt
