// Point-to-point messages (the send/recv ops of pipeline plans; Communicator.h): eager sends, FIFO per
// ordered pair, (count, tag, microbatch) matching with an error naming both sides, the timeout and
// abort paths; the CPU backend's sendAsync/recvAsync; the interpreter's peer resolution and bind error.
#include "PipelineTestUtil.h"
#include "CommTestUtil.h"
#include "TestUtil.h"

#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Mesh.h"

#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

namespace llcdist::rt {
namespace {
using testing::makeComm;
using testing::onRanks;

using testing::json;



bool contains(const Status& s, const std::string& part) { return s.message().find(part) != std::string::npos; }

TEST(PointToPointTest, MeshPeersAndAxisBetween) {
  const Mesh m = Mesh::make(2, 1, 2);  // order tp, dp, pp: rank = dp + 2·pp
  EXPECT_EQ(m.withCoord(0, MeshAxis::kPp, 1), 2);
  EXPECT_EQ(m.withCoord(3, MeshAxis::kPp, 0), 1);
  EXPECT_EQ(m.withCoord(3, MeshAxis::kDp, 0), 2);
  EXPECT_EQ(m.axisBetween(1, 3), MeshAxis::kPp);
  EXPECT_EQ(m.axisBetween(2, 3), MeshAxis::kDp);
  EXPECT_FALSE(m.axisBetween(0, 3).has_value());  // differ on dp and pp
  EXPECT_FALSE(m.axisBetween(0, 0).has_value());
  EXPECT_FALSE(m.axisBetween(0, 9).has_value());
}

// Sends are eager: one thread can send and later receive its own messages as the other rank (no
// rendezvous); the sender may overwrite its buffer at once.
TEST(PointToPointTest, SendsAreBufferedAndFifoPerPair) {
  auto comm = makeComm(Mesh::make(1, 1, 2));
  std::vector<float> x = {1, 2, 3, 4};
  ASSERT_TRUE(comm->send(0, 1, x.data(), 4, 0, 0).isOk());
  x.assign(4, -1.0f);  // overwritten after the send: the message keeps the old values
  ASSERT_TRUE(comm->send(0, 1, x.data(), 2, 1, 0).isOk());
  const float z = 7;
  ASSERT_TRUE(comm->send(1, 0, &z, 1, 0, -1).isOk());  // the other direction is another queue
  std::vector<float> y(4, 0.0f);
  ASSERT_TRUE(comm->recv(1, 0, y.data(), 4, 0, 0).isOk());
  EXPECT_EQ(y, (std::vector<float>{1, 2, 3, 4}));
  ASSERT_TRUE(comm->recv(1, 0, y.data(), 2, 1, 0).isOk());
  EXPECT_EQ(y, (std::vector<float>{-1, -1, 3, 4}));
  float w = 0;
  ASSERT_TRUE(comm->recv(0, 1, &w, 1, 0, -1).isOk());
  EXPECT_EQ(w, 7.0f);
  ASSERT_TRUE(comm->send(0, 1, nullptr, 0, 9, 3).isOk());  // empty messages are messages too
  ASSERT_TRUE(comm->recv(1, 0, nullptr, 0, 9, 3).isOk());
  EXPECT_TRUE(comm->abortReason().isOk());
}

// A bf16 message moves the 2-byte elements as they are (the bits of a bf16 buffer, not f32 values), and
// the dtype is part of the match: a bf16 send does not match an f32 recv of the same count.
TEST(PointToPointTest, Bf16MessagesMoveTwoBytesAnElementAndTheirDtypeIsMatched) {
  auto comm = makeComm(Mesh::make(1, 1, 2));
  const std::vector<uint16_t> x = {0x3f80, 0xc02d, 0x7f7f, 0x0001, 0x8000};  // 1, -2.7, max, denormal, -0
  ASSERT_TRUE(comm->send(0, 1, x.data(), 5, CommDType::kBF16, 4, 2).isOk());
  std::vector<uint16_t> y(6, 0xffff);
  ASSERT_TRUE(comm->recv(1, 0, y.data(), 5, CommDType::kBF16, 4, 2).isOk());
  EXPECT_EQ(std::vector<uint16_t>(y.begin(), y.begin() + 5), x);
  EXPECT_EQ(y[5], 0xffff);  // 10 bytes written, no more
  ASSERT_TRUE(comm->send(0, 1, x.data(), 4, CommDType::kBF16, 5, 2).isOk());
  std::vector<float> f(4);
  const Status s = comm->recv(1, 0, f.data(), 4, CommDType::kF32, 5, 2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("sent (count 4 bf16, tag 5, microbatch 2)"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("expects (count 4, tag 5, microbatch 2)"), std::string::npos) << s.message();
}

// Many messages in both directions between threads, the receivers sometimes ahead of the senders and
// sometimes behind: every message arrives in order with its data.
TEST(PointToPointTest, ManyMessagesBothDirections) {
  const Mesh mesh = Mesh::make(2, 1, 2);
  auto comm = makeComm(mesh);
  const int kMessages = 200;
  const auto s = onRanks(4, [&](int r) -> Status {
    const int peer = int(mesh.withCoord(r, MeshAxis::kPp, 1 - mesh.coord(r, MeshAxis::kPp)));
    std::vector<float> buf(8);
    for (int i = 0; i < kMessages; ++i) {
      for (int k = 0; k < 8; ++k) buf[size_t(k)] = float(1000 * r + 10 * i + k);
      LLCDIST_RETURN_IF_ERROR(comm->send(r, peer, buf.data(), 8, i % 3, i % 5));
      if (i % 17 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200 * r));
      if (i % 2 == 1) continue;  // receive two at a time on odd i
      for (int j : {i - 1, i}) {
        if (j < 0) continue;
        LLCDIST_RETURN_IF_ERROR(comm->recv(r, peer, buf.data(), 8, j % 3, j % 5));
        for (int k = 0; k < 8; ++k)
          if (buf[size_t(k)] != float(1000 * peer + 10 * j + k))
            return Status::internal("rank " + std::to_string(r) + " message " + std::to_string(j) + " has wrong data");
      }
    }
    if (kMessages % 2 == 0)
      LLCDIST_RETURN_IF_ERROR(comm->recv(r, peer, buf.data(), 8, (kMessages - 1) % 3, (kMessages - 1) % 5));
    return Status::ok();
  });
  for (size_t r = 0; r < s.size(); ++r) EXPECT_TRUE(s[r].isOk()) << r << ": " << s[r].message();
}

// The head message must carry the receiver's (count, tag, microbatch): else an InvalidArgument error
// for the receiver naming both ranks and both triples, and the communicator is aborted.
TEST(PointToPointTest, MismatchNamesBothSides) {
  struct Case {
    int64_t count, tag, microbatch;
  };
  for (Case c : {Case{4, 2, 0}, Case{3, 1, 0}, Case{4, 1, 1}, Case{4, 1, -1}}) {
    auto comm = makeComm(Mesh::make(1, 1, 2));
    std::vector<float> x(4, 1.0f), y(4);
    ASSERT_TRUE(comm->send(0, 1, x.data(), 4, 1, 0).isOk());
    const Status s = comm->recv(1, 0, y.data(), c.count, c.tag, c.microbatch);
    ASSERT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
    const std::string want = "(count " + std::to_string(c.count) + ", tag " + std::to_string(c.tag) + ", microbatch " +
                             std::to_string(c.microbatch) + ")";
    for (const std::string& part :
         {std::string("send/recv mismatch"), std::string("from rank 0 to rank 1"),
          std::string("rank 0 sent (count 4, tag 1, microbatch 0)"), std::string("rank 1's recv("),
          std::string("from rank 0 on axis pp"), "expects " + want})
      EXPECT_TRUE(contains(s, part)) << part << " in: " << s.message();
    EXPECT_FALSE(comm->abortReason().isOk());
    EXPECT_EQ(comm->send(0, 1, x.data(), 4, 1, 0).code(), StatusCode::kAborted);
  }
}

// A recv whose send never comes: DeadlineExceeded naming the peer, axis, tag and microbatch; the
// communicator is aborted with it, so later calls fail at once.
TEST(PointToPointTest, TimeoutNamesPeerAxisTagAndMicrobatch) {
  const Mesh mesh = Mesh::make(2, 1, 2);
  auto comm = makeComm(mesh, std::chrono::milliseconds(150));
  float x[3] = {1, 2, 3};
  ASSERT_TRUE(comm->send(2, 0, x, 3, 5, 1).isOk());  // one message was received before the stall
  ASSERT_TRUE(comm->recv(0, 2, x, 3, 5, 1).isOk());
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = comm->recv(0, 2, x, 3, 7, 2);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  ASSERT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.message();
  for (const char* part : {"recv(3 f32, tag 7, microbatch 2) from rank 2 on axis pp", "timed out after 0.15 s",
                           "rank 2 has sent 1 message(s) to rank 0 so far"})
    EXPECT_TRUE(contains(s, part)) << part << " in: " << s.message();
  EXPECT_EQ(comm->abortReason().code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(contains(comm->abortReason(), "rank 0: "));
  EXPECT_EQ(comm->send(2, 0, x, 3, 7, 2).code(), StatusCode::kAborted);
  EXPECT_EQ(comm->recv(1, 3, x, 3, 7, 2).code(), StatusCode::kAborted);
}

// An abort (another rank failed) wakes a blocked receiver promptly with Aborted and the reason.
TEST(PointToPointTest, AbortWakesBlockedReceivers) {
  auto comm = makeComm(Mesh::make(1, 1, 3), std::chrono::seconds(60));
  const auto t0 = std::chrono::steady_clock::now();
  const auto s = onRanks(3, [&](int r) -> Status {
    float y = 0;
    if (r == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      Status err = Status::invalidArgument("stage exploded").withRank(2);
      comm->abort(err);
      return err;
    }
    return comm->recv(r, 2, &y, 1, 0, 0);  // both wait for rank 2, which never sends
  });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(s[size_t(r)].code(), StatusCode::kAborted) << s[size_t(r)].message();
    EXPECT_TRUE(contains(s[size_t(r)], "recv(1 f32, tag 0, microbatch 0) from rank 2"));
    EXPECT_TRUE(contains(s[size_t(r)], "rank 2: stage exploded")) << s[size_t(r)].message();
  }
}

TEST(PointToPointTest, BadCallsAreRefused) {
  auto comm = makeComm(Mesh::make(1, 1, 2));
  float x = 0;
  EXPECT_TRUE(contains(comm->send(0, 0, &x, 1, 0, 0), "cannot send to or receive from itself"));
  EXPECT_TRUE(contains(comm->recv(1, 1, &x, 1, 0, 0), "itself"));
  EXPECT_TRUE(contains(comm->send(0, 2, &x, 1, 0, 0), "rank 2 is outside the world of 2 ranks"));
  EXPECT_TRUE(contains(comm->recv(-1, 0, &x, 1, 0, 0), "outside the world"));
  EXPECT_TRUE(contains(comm->send(0, 1, &x, -1, 0, 0), "negative count"));
  EXPECT_TRUE(comm->abortReason().isOk());  // refused calls do not abort
}

TEST(PointToPointTest, CpuBackendSendRecvUseTheCommunicator) {
  auto comm = makeComm(Mesh::make(1, 1, 2));
  std::vector<std::unique_ptr<Backend>> be;
  for (int r = 0; r < 2; ++r) {
    CpuBackendOptions o;
    o.rank = r;
    o.communicator = comm.get();
    be.push_back(makeCpuBackend(o));
    ASSERT_TRUE(be.back()->allocateArena(256).isOk());
  }
  const auto s = onRanks(2, [&](int r) -> Status {
    float* a = reinterpret_cast<float*>(be[size_t(r)]->arenaAt(0));
    if (r == 0) {
      for (int k = 0; k < 4; ++k) a[k] = float(k + 1);
      LLCDIST_ASSIGN_OR_RETURN(CollectiveHandle h, be[0]->sendAsync(Stream{0}, a, 4, 1, 3, 2));
      return be[0]->waitCollective(Stream{0}, h);
    }
    LLCDIST_ASSIGN_OR_RETURN(CollectiveHandle h, be[1]->recvAsync(Stream{0}, a + 8, 4, 0, 3, 2));
    return be[1]->waitCollective(Stream{0}, h);
  });
  for (const Status& st : s) EXPECT_TRUE(st.isOk()) << st.message();
  const float* b = reinterpret_cast<const float*>(be[1]->arenaAt(0));
  for (int k = 0; k < 4; ++k) EXPECT_EQ(b[8 + k], float(k + 1));
  // Without a communicator there is nobody to talk to.
  auto lone = makeCpuBackend();
  ASSERT_TRUE(lone->allocateArena(64).isOk());
  auto h = lone->sendAsync(Stream{0}, reinterpret_cast<float*>(lone->arenaAt(0)), 1, 1, 0, -1);
  ASSERT_FALSE(h.isOk());
  EXPECT_TRUE(contains(h.status(), "no communicator")) << h.status().message();
}

// Interpreters of both stages of the tiny pipeline, built from the parsed plan: the send's peer is
// resolved from the mesh, and a send to the rank's own coordinate is refused at bind time.
Plan parsePipeline(const testing::MultiProgramPlan& p) {
  Plan plan;
  auto m = parseManifest(p.manifest.dump(), "manifest.json");
  EXPECT_TRUE(m.isOk()) << m.status().message();
  if (!m.isOk()) return plan;
  plan.manifest = m.value();
  for (size_t i = 0; i < p.programs.size(); ++i) {
    auto prog = parseProgram(p.programs[i].program.dump(), "program-" + std::to_string(i) + ".json", plan.manifest);
    EXPECT_TRUE(prog.isOk()) << prog.status().message();
    if (prog.isOk()) plan.programs.push_back(std::move(prog).value());
  }
  return plan;
}

TEST(PointToPointTest, InterpreterRefusesSendToItself) {
  testing::MultiProgramPlan p = testing::tinyLmPipeline(testing::TinyLm{});
  p.programs[0].program["subroutines"][1]["ops"][3]["attrs"]["peer"] = 0;  // stage 0 sends to stage 0
  p.programs[0].program["subroutines"][1]["ops"][3]["loc"] = "h2 to stage 1";
  const Plan plan = parsePipeline(p);
  ASSERT_EQ(plan.programs.size(), 2u);
  auto backend = makeCpuBackend();
  auto interp = Interpreter::create(plan, 0, *backend, 0);
  ASSERT_FALSE(interp.isOk());
  for (const char* part : {"program-0.json", "subroutine 'forward' op 3 (send, loc 'h2 to stage 1')",
                           "peer 0 is rank 0's own coordinate on axis pp"})
    EXPECT_TRUE(contains(interp.status(), part)) << part << " in: " << interp.status().message();
  // A rank runs only its own program.
  auto other = makeCpuBackend();
  auto wrong = Interpreter::create(parsePipeline(testing::tinyLmPipeline(testing::TinyLm{})), 1, *other, 0);
  ASSERT_FALSE(wrong.isOk());
  EXPECT_TRUE(contains(wrong.status(), "rank 0 does not run programs[1]")) << wrong.status().message();
}

// send/recv through two interpreters (dp = 2, pp = 2: rank 1 = (dp 1, stage 0) talks to rank 3):
// stage 0's forward sends h2 to its own dp replica's stage 1, with the action's microbatch.
TEST(PointToPointTest, InterpretersExchangeWithTheirStagePeer) {
  testing::TinyLm c;
  c.dp = 2;
  const Plan plan = parsePipeline(testing::tinyLmPipeline(c));
  ASSERT_EQ(plan.programs.size(), 2u);
  auto comm = makeComm(plan.manifest.mesh());
  std::vector<std::unique_ptr<Backend>> be;
  std::vector<std::unique_ptr<Interpreter>> in;
  for (int r : {1, 3}) {
    CpuBackendOptions o;
    o.rank = r;
    o.communicator = comm.get();
    be.push_back(makeCpuBackend(o));
    auto i = Interpreter::create(plan, size_t(plan.manifest.programOfRank(r)), *be.back(), r);
    ASSERT_TRUE(i.isOk()) << i.status().message();
    in.push_back(std::move(i).value());
  }
  // Stage 0's forward (subroutine 1) with microbatch 1 sends h2; stage 1 receives it as a message
  // (count M·H, tag 0, microbatch 1).
  const MicrobatchSource data = [](int64_t, int64_t, int32_t* ids, int32_t* tgt, int64_t B, int64_t S) {
    for (int64_t i = 0; i < B * S; ++i) ids[i] = tgt[i] = int32_t(i % 32);
    return Status::ok();
  };
  std::vector<float> ones(size_t(c.V * c.H), 1.0f);  // non-zero params, so that h2 is not zero
  ASSERT_TRUE(in[0]->writeBuffer(plan.programs[0].findBuffer("wte"), ones.data()).isOk());
  ASSERT_TRUE(in[0]->writeBuffer(plan.programs[0].findBuffer("w1"), ones.data()).isOk());
  Status st = in[0]->runSubroutine(1, 0, 1, 0.0, data);
  ASSERT_TRUE(st.isOk()) << st.message();
  st = in[1]->runSubroutine(1, 0, 1, 0.0, data);  // the message is already queued: no wait
  ASSERT_TRUE(st.isOk()) << st.message();
  const auto sent = in[0]->readF32(plan.programs[0].findBuffer("h2")).value();
  const auto got = in[1]->readF32(plan.programs[1].findBuffer("h2")).value();
  EXPECT_EQ(sent, got);
  EXPECT_NE(sent[0], 0.0f);
  // The next forward of stage 1 expects microbatch 0 but finds nothing from rank 1: here we check the
  // mismatch path instead by sending microbatch 1 again and receiving it as microbatch 0.
  ASSERT_TRUE(in[0]->runSubroutine(1, 0, 1, 0.0, data).isOk());
  st = in[1]->runSubroutine(1, 0, 0, 0.0, data);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  for (const char* part :
       {"program-1.json: subroutine 'forward' op 1 (recv)", "rank 1 sent (count 256, tag 0, microbatch 1)",
        "rank 3's recv(256 f32, tag 0, microbatch 0) from rank 1 on axis pp"})
    EXPECT_TRUE(contains(st, part)) << part << " in: " << st.message();
}

}  // namespace
}  // namespace llcdist::rt
