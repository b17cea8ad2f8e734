// The CUDA backend on a GPU (each test skips with a one-line reason without one): the arena and its
// copies through pinned staging, events ordering two streams, host functions, the device error flag,
// a recorded step captured into a CUDA graph, and the staged collectives of virtual ranks (two ranks
// on one device, the in-process communicator) against the CPU backend's results on the same inputs.
#include "KernelHarness.h"

#include "llcdist/runtime/CommandList.h"
#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/CudaBackend.h"

#include <atomic>
#include <thread>

namespace llcdist::rt::cuda::test {
namespace {

// Without a GPU too (its own ctest, llcdist_cuda_tests.kernel_table): the kernel table registers,
// for every op kind, exactly the variants host/KernelVariants.h states, in its order, so that
// KernelCall::variant indexes both alike (the backend refuses to start otherwise).
TEST(CudaKernelTable, RegistersEveryStatedVariantInOrder) {
  const Status st = checkCudaKernelTable();
  EXPECT_TRUE(st.isOk()) << st.toString();
  EXPECT_NE(cudaKernel(schema::OpKind::kLinearFwd), nullptr);  // its only variant: cublaslt
  EXPECT_NE(cudaKernel(schema::OpKind::kAttentionFwd, "cudnn"), nullptr);
  EXPECT_NE(cudaKernel(schema::OpKind::kAttentionFwd, "own"), nullptr);
  EXPECT_EQ(cudaKernel(schema::OpKind::kAttentionFwd, "cublaslt"), nullptr);
  EXPECT_EQ(cudaKernel(schema::OpKind::kAllReduce), nullptr);  // communication: no kernel
}

std::unique_ptr<Backend> cudaBackend(int rank, Communicator* comm) {
  CudaBackendOptions o;
  o.rank = rank;
  o.communicator = comm;
  StatusOr<std::unique_ptr<Backend>> b = makeCudaBackend(o);
  EXPECT_TRUE(b.isOk()) << b.status().toString();
  return b.isOk() ? std::move(b).value() : nullptr;
}

TEST(CudaBackendTest, ArenaCopiesRoundTripAndFillZero) {
  LLCDIST_REQUIRE_GPU();
  std::unique_ptr<Backend> b = cudaBackend(0, nullptr);
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->allocateArena(1000).isOk());
  EXPECT_EQ(b->arenaBytes(), 1000);
  EXPECT_FALSE(b->allocateArena(10).isOk()) << "one arena per backend";
  std::vector<float> x = randomF32(200, 1), y(200, -1.0f);
  ASSERT_TRUE(b->copyToDevice(Stream{0}, 64, x.data(), 800).isOk());
  ASSERT_TRUE(b->fillZero(Stream{0}, 64, 16).isOk());
  ASSERT_TRUE(b->copyToHost(Stream{0}, y.data(), 64, 800).isOk());
  ASSERT_TRUE(b->synchronize().isOk());
  for (int i = 0; i < 200; ++i) EXPECT_EQ(y[size_t(i)], i < 4 ? 0.0f : x[size_t(i)]) << i;
  EXPECT_FALSE(b->copyToDevice(Stream{0}, 900, x.data(), 800).isOk()) << "outside the arena";
}

TEST(CudaBackendTest, EventsOrderStreamsAndHostFunctionsRunInOrder) {
  LLCDIST_REQUIRE_GPU();
  std::unique_ptr<Backend> b = cudaBackend(0, nullptr);
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->allocateArena(4 << 20).isOk());
  StatusOr<Stream> side = b->createStream();
  StatusOr<Event> e = b->createEvent();
  ASSERT_TRUE(side.isOk() && e.isOk());
  std::vector<float> x = randomF32(1 << 20, 2), y(1 << 20);
  std::vector<int> order;
  ASSERT_TRUE(b->copyToDevice(Stream{0}, 0, x.data(), int64_t(x.size()) * 4).isOk());
  ASSERT_TRUE(b->launchHostFunc(Stream{0}, [&] { order.push_back(1); }).isOk());
  ASSERT_TRUE(b->recordEvent(Stream{0}, *e).isOk());
  ASSERT_TRUE(b->waitEvent(*side, *e).isOk());
  ASSERT_TRUE(b->launchHostFunc(*side, [&] { order.push_back(2); }).isOk());
  ASSERT_TRUE(b->copyToHost(*side, y.data(), 0, int64_t(y.size()) * 4).isOk());
  ASSERT_TRUE(b->synchronize().isOk());
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_EQ(x, y) << "the side stream's copy waited for the default stream's";
}

// Recorded steps (CommandList.h): a replay captured into a CUDA graph runs nothing while captured, and
// every launch of the graph copies the pinned host input as it is at that launch; a side stream forked
// by an event is joined back before the capture ends.
TEST(CudaBackendTest, ACapturedGraphReadsTheHostInputsAtEachLaunch) {
  LLCDIST_REQUIRE_GPU();
  std::unique_ptr<Backend> b = cudaBackend(0, nullptr);
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->allocateArena(4096).isOk());
  std::string why;
  ASSERT_TRUE(b->canCaptureGraph(&why)) << why;
  StatusOr<Stream> side = b->createStream();
  StatusOr<Event> e = b->createEvent();
  StatusOr<void*> host = b->allocateHostInput(4 * sizeof(float));
  ASSERT_TRUE(side.isOk() && e.isOk() && host.isOk());
  float* in = static_cast<float*>(*host);
  for (int i = 0; i < 4; ++i) in[i] = float(i + 1);
  std::vector<float> ones(8, 1.0f), y(8, -1.0f);
  ASSERT_TRUE(b->copyToDevice(Stream{0}, 64, ones.data(), 32).isOk());
  ASSERT_TRUE(b->synchronize().isOk());
  CommandList list;
  CommandRecorder rec(*b, list);
  ASSERT_TRUE(rec.copyHostInput(Stream{0}, b->arenaAt(0), in, 16).isOk());
  ASSERT_TRUE(rec.recordEvent(Stream{0}, *e).isOk());
  ASSERT_TRUE(rec.waitEvent(*side, *e).isOk());
  ASSERT_TRUE(rec.fillZero(*side, 64, 16).isOk());  // the side stream: zeroes 4 of the 8 ones
  ASSERT_TRUE(b->beginGraphCapture().isOk());
  ASSERT_TRUE(list.replay(*b, 0).isOk());
  StatusOr<int> graph = b->endGraphCapture();
  ASSERT_TRUE(graph.isOk()) << graph.status().toString();
  ASSERT_TRUE(b->copyToHost(Stream{0}, y.data(), 0, 16).isOk());
  ASSERT_TRUE(b->synchronize().isOk());  // the copy reaches y on the stream
  EXPECT_EQ(std::vector<float>(y.begin(), y.begin() + 4), (std::vector<float>{0, 0, 0, 0})) << "captured, not run";
  for (int launch = 1; launch <= 2; ++launch) {
    for (int i = 0; i < 4; ++i) in[i] = float(10 * launch + i);
    ASSERT_TRUE(b->launchGraph(*graph).isOk());
    ASSERT_TRUE(b->synchronize().isOk());
    ASSERT_TRUE(b->copyToHost(Stream{0}, y.data(), 0, 16).isOk());
    ASSERT_TRUE(b->synchronize().isOk());
    EXPECT_EQ(std::vector<float>(y.begin(), y.begin() + 4),
              (std::vector<float>{float(10 * launch), float(10 * launch + 1), float(10 * launch + 2),
                                  float(10 * launch + 3)}));
  }
  ASSERT_TRUE(b->copyToHost(Stream{0}, y.data(), 64, 32).isOk());
  ASSERT_TRUE(b->synchronize().isOk());
  EXPECT_EQ(y, (std::vector<float>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_FALSE(b->launchGraph(*graph + 1).isOk());
}

// A recorded host function (CommandList.h records them) captured into a graph runs at every launch of
// the graph: the backend keeps it alive, it is not freed by its first run.
TEST(CudaBackendTest, ACapturedHostFunctionRunsAtEveryLaunch) {
  LLCDIST_REQUIRE_GPU();
  std::unique_ptr<Backend> b = cudaBackend(0, nullptr);
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->allocateArena(4096).isOk());
  std::atomic<int> calls{0};
  CommandList list;
  CommandRecorder rec(*b, list);
  ASSERT_TRUE(rec.fillZero(Stream{0}, 0, 16).isOk());
  ASSERT_TRUE(rec.launchHostFunc(Stream{0}, [&calls] { ++calls; }).isOk());
  ASSERT_TRUE(b->beginGraphCapture().isOk());
  ASSERT_TRUE(list.replay(*b, 0).isOk());
  StatusOr<int> graph = b->endGraphCapture();
  ASSERT_TRUE(graph.isOk()) << graph.status().toString();
  EXPECT_EQ(calls.load(), 0) << "captured, not run";
  for (int launch = 1; launch <= 3; ++launch) {
    ASSERT_TRUE(b->launchGraph(*graph).isOk());
    ASSERT_TRUE(b->synchronize().isOk());
    EXPECT_EQ(calls.load(), launch);
  }
}

// Two virtual ranks on one device: the staged collectives give the CPU backend's bits.
TEST(CudaBackendTest, StagedCollectivesOfVirtualRanksMatchTheCpuBackend) {
  LLCDIST_REQUIRE_GPU();
  const int64_t outer = 3, inner = 5, total = 9;  // ZeRO's padded blocks: total < 2·inner
  auto run = [&](bool gpu) {
    InProcessCommunicatorOptions co;
    co.worldSize = 2;
    std::unique_ptr<Communicator> comm = makeInProcessCommunicator(co);
    std::vector<std::vector<float>> out(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        std::unique_ptr<Backend> b;
        if (gpu) {
          b = cudaBackend(r, comm.get());
        } else {
          CpuBackendOptions o;
          o.rank = r;
          o.communicator = comm.get();
          b = makeCpuBackend(o);
        }
        ASSERT_TRUE(b);
        ASSERT_TRUE(b->allocateArena(4096).isOk());
        StatusOr<Channel> ch = b->createChannel({0, 1});
        ASSERT_TRUE(ch.isOk());
        ASSERT_TRUE(b->connect().isOk());
        const std::vector<float> a = randomF32(16, 10 + r), g = randomF32(outer * inner, 20 + r),
                                 s = randomF32(outer * total, 30 + r);
        ASSERT_TRUE(b->copyToDevice(Stream{0}, 0, a.data(), 64).isOk());
        ASSERT_TRUE(b->copyToDevice(Stream{0}, 256, g.data(), int64_t(g.size()) * 4).isOk());
        ASSERT_TRUE(b->copyToDevice(Stream{0}, 1024, s.data(), int64_t(s.size()) * 4).isOk());
        auto at = [&](int64_t off) { return static_cast<void*>(b->arenaAt(off)); };
        StatusOr<CollectiveHandle> h1 = b->allReduceAsync(Stream{0}, static_cast<float*>(at(0)), 16, ReduceOp::kSum, *ch);
        ASSERT_TRUE(h1.isOk());
        ASSERT_TRUE(b->waitCollective(Stream{0}, *h1).isOk());
        StatusOr<CollectiveHandle> h2 =
            b->allGatherAsync(Stream{0}, at(256), at(512), outer, inner, total, CommDType::kF32, *ch);
        ASSERT_TRUE(h2.isOk());
        ASSERT_TRUE(b->waitCollective(Stream{0}, *h2).isOk());
        StatusOr<CollectiveHandle> h3 = b->reduceScatterAsync(Stream{0}, at(1024), at(2048), outer, inner, total,
                                                              CommDType::kF32, ReduceOp::kAvg, *ch);
        ASSERT_TRUE(h3.isOk());
        ASSERT_TRUE(b->waitCollective(Stream{0}, *h3).isOk());
        std::vector<float> got(16 + outer * total + outer * inner);
        ASSERT_TRUE(b->copyToHost(Stream{0}, got.data(), 0, 64).isOk());
        ASSERT_TRUE(b->copyToHost(Stream{0}, got.data() + 16, 512, outer * total * 4).isOk());
        ASSERT_TRUE(b->copyToHost(Stream{0}, got.data() + 16 + outer * total, 2048, outer * inner * 4).isOk());
        ASSERT_TRUE(b->synchronize().isOk());
        out[size_t(r)] = got;
      });
    for (std::thread& t : threads) t.join();
    return out;
  };
  const auto cpu = run(false), gpu = run(true);
  EXPECT_EQ(gpu, cpu);
}

TEST(CudaBackendTest, AnUnusableDeviceIsAClearError) {
  LLCDIST_REQUIRE_GPU();
  CudaBackendOptions o;
  o.device = 4096;
  StatusOr<std::unique_ptr<Backend>> b = makeCudaBackend(o);
  ASSERT_FALSE(b.isOk());
  EXPECT_NE(b.status().message().find("does not exist"), std::string::npos) << b.status().toString();
}

}  // namespace
}  // namespace llcdist::rt::cuda::test
