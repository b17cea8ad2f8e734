//===- VerifierTest.cpp - static cross-rank communication verifier --------===//
#include "llcdist/Verify/CommVerifier.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>

using namespace llcdist::verify;

namespace {

constexpr int64_t kAct = 4096; // elements of one activation (= its gradient)

/// Called inside a stage's forward (fwd = true) or backward of microbatch j on
/// rank r, to append that compute's collectives (e.g. tensor parallelism).
using ComputeHook = std::function<void(int64_t r, int64_t j, bool fwd)>;

std::string prov(int64_t s, const char *what, int64_t j, const char *dir) {
  return "s" + std::to_string(s) + "/" + what + "#" + std::to_string(j) + " " + dir;
}
int64_t actTag(int64_t j) { return 2 * j; }
int64_t gradTag(int64_t j) { return 2 * j + 1; }

/// GPipe: all forwards, then all backwards (last microbatch first).
/// stages[s] is the rank that runs stage s.
void gpipe(CommPlan &plan, const std::vector<int64_t> &stages, int64_t m,
           const ComputeHook &hook = {}) {
  int64_t p = static_cast<int64_t>(stages.size());
  for (int64_t s = 0; s < p; ++s) {
    int64_t r = stages[s];
    auto &ev = plan[r];
    for (int64_t j = 0; j < m; ++j) {
      if (s > 0)
        ev.push_back(CommEvent::recv(stages[s - 1], kAct, "f32",
                                     prov(s, "fwd", j, "recv act"), actTag(j)));
      if (hook)
        hook(r, j, true);
      if (s < p - 1)
        ev.push_back(CommEvent::send(stages[s + 1], kAct, "f32",
                                     prov(s, "fwd", j, "send act"), actTag(j)));
    }
    for (int64_t j = m - 1; j >= 0; --j) {
      if (s < p - 1)
        ev.push_back(CommEvent::recv(stages[s + 1], kAct, "f32",
                                     prov(s, "bwd", j, "recv grad"), gradTag(j)));
      if (hook)
        hook(r, j, false);
      if (s > 0)
        ev.push_back(CommEvent::send(stages[s - 1], kAct, "f32",
                                     prov(s, "bwd", j, "send grad"), gradTag(j)));
    }
  }
}

/// 1F1B (PipeDream-flush, Megatron's non-interleaved schedule). The combined
/// send_forward_recv_backward / send_backward_recv_forward exchanges become
/// two blocking events; with `parity` the even stage of each neighbouring
/// pair sends first and the odd one receives first (deadlock-free under
/// rendezvous semantics); without it every stage sends first (deadlocks).
void oneFOneB(CommPlan &plan, const std::vector<int64_t> &stages, int64_t m,
              const ComputeHook &hook = {}, bool parity = true) {
  int64_t p = static_cast<int64_t>(stages.size());
  for (int64_t s = 0; s < p; ++s) {
    int64_t r = stages[s];
    auto &ev = plan[r];
    bool sendFirst = !parity || s % 2 == 0;
    auto recvFwd = [&](int64_t j) {
      if (s > 0)
        ev.push_back(CommEvent::recv(stages[s - 1], kAct, "f32",
                                     prov(s, "fwd", j, "recv act"), actTag(j)));
    };
    auto sendFwd = [&](int64_t j) {
      if (s < p - 1)
        ev.push_back(CommEvent::send(stages[s + 1], kAct, "f32",
                                     prov(s, "fwd", j, "send act"), actTag(j)));
    };
    auto recvBwd = [&](int64_t j) {
      if (s < p - 1)
        ev.push_back(CommEvent::recv(stages[s + 1], kAct, "f32",
                                     prov(s, "bwd", j, "recv grad"), gradTag(j)));
    };
    auto sendBwd = [&](int64_t j) {
      if (s > 0)
        ev.push_back(CommEvent::send(stages[s - 1], kAct, "f32",
                                     prov(s, "bwd", j, "send grad"), gradTag(j)));
    };
    auto fwd = [&](int64_t j) {
      if (hook)
        hook(r, j, true);
    };
    auto bwd = [&](int64_t j) {
      if (hook)
        hook(r, j, false);
    };
    int64_t warmup = std::min(p - s - 1, m), steady = m - warmup;
    for (int64_t j = 0; j < warmup; ++j) {
      recvFwd(j);
      fwd(j);
      sendFwd(j);
    }
    if (steady > 0)
      recvFwd(warmup);
    for (int64_t i = 0; i < steady; ++i) {
      int64_t j = warmup + i;
      fwd(j);
      // send_forward_recv_backward with stage s+1.
      if (sendFirst) {
        sendFwd(j);
        recvBwd(i);
      } else {
        recvBwd(i);
        sendFwd(j);
      }
      bwd(i);
      if (i == steady - 1) {
        sendBwd(i);
      } else if (sendFirst) { // send_backward_recv_forward with stage s-1
        sendBwd(i);
        recvFwd(j + 1);
      } else {
        recvFwd(j + 1);
        sendBwd(i);
      }
    }
    for (int64_t i = steady; i < m; ++i) {
      recvBwd(i);
      bwd(i);
      sendBwd(i);
    }
  }
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = i;
  return v;
}

/// A dp x tp x pp mesh with Megatron's rank order (tp fastest, then dp, pp).
struct Mesh {
  int64_t dp, tp, pp;
  int64_t rank(int64_t d, int64_t t, int64_t s) const { return (s * dp + d) * tp + t; }
  int64_t world() const { return dp * tp * pp; }
  std::vector<int64_t> tpGroup(int64_t r) const {
    std::vector<int64_t> g;
    for (int64_t t = 0; t < tp; ++t)
      g.push_back(r - r % tp + t);
    return g;
  }
  std::vector<int64_t> dpGroup(int64_t r) const {
    int64_t t = r % tp, s = r / (dp * tp);
    std::vector<int64_t> g;
    for (int64_t d = 0; d < dp; ++d)
      g.push_back(rank(d, t, s));
    return g;
  }
};

/// Megatron-style tensor parallelism with sequence parallelism inside each
/// stage's forward/backward: per layer an all_gather before and a
/// reduce_scatter after attention and MLP (reversed in backward), then the
/// data-parallel gradient all-reduce per layer bucket.
ComputeHook tpHook(const Mesh &mesh, CommPlan &plan, int64_t layers) {
  return [&mesh, &plan, layers](int64_t r, int64_t j, bool fwd) {
    if (mesh.tp == 1)
      return;
    auto g = mesh.tpGroup(r);
    auto &ev = plan[r];
    std::string at = std::string(fwd ? "fwd#" : "bwd#") + std::to_string(j);
    for (int64_t l = 0; l < layers; ++l)
      for (const char *blk : {"attn", "mlp"}) {
        std::string where = at + " (h." + std::to_string(l) + "." + blk + ")";
        ev.push_back(CommEvent::coll(fwd ? "all_gather" : "reduce_scatter", g,
                                     1024, "f32", where));
        ev.push_back(CommEvent::coll(fwd ? "reduce_scatter" : "all_gather", g,
                                     1024, "f32", where));
      }
  };
}

void dpGradSync(const Mesh &mesh, CommPlan &plan, int64_t layers) {
  if (mesh.dp == 1)
    return;
  for (int64_t r = 0; r < mesh.world(); ++r)
    for (int64_t l = layers - 1; l >= 0; --l)
      plan[r].push_back(CommEvent::coll("all_reduce", mesh.dpGroup(r), 65536, "f32",
                                        "grad bucket " + std::to_string(l)));
}

/// A 3D plan: one pipeline per (dp, tp) column, TP collectives inside the
/// stages, DP gradient all-reduce after the schedule.
CommPlan plan3D(const Mesh &mesh, int64_t m, bool useGPipe, int64_t layers = 2) {
  CommPlan plan(mesh.world());
  ComputeHook hook = tpHook(mesh, plan, layers);
  for (int64_t d = 0; d < mesh.dp; ++d)
    for (int64_t t = 0; t < mesh.tp; ++t) {
      std::vector<int64_t> stages;
      for (int64_t s = 0; s < mesh.pp; ++s)
        stages.push_back(mesh.rank(d, t, s));
      if (useGPipe)
        gpipe(plan, stages, m, hook);
      else
        oneFOneB(plan, stages, m, hook);
    }
  dpGradSync(mesh, plan, layers);
  return plan;
}

/// The index of the first event on rank r whose provenance is `p`.
size_t find(const CommPlan &plan, int64_t r, const std::string &p) {
  const auto &ev = plan[r];
  for (size_t i = 0; i < ev.size(); ++i)
    if (ev[i].provenance == p)
      return i;
  ADD_FAILURE() << "no event '" << p << "' on rank " << r;
  return 0;
}

void erase(CommPlan &plan, int64_t r, const std::string &p) {
  plan[r].erase(plan[r].begin() + find(plan, r, p));
}

void expectOk(const CommPlan &plan, const VerifyOptions &opts = {}) {
  VerifyResult res = verifyCommPlan(plan, opts);
  EXPECT_TRUE(res.ok()) << res.str();
  EXPECT_EQ(res.eventsCompleted, plan.totalEvents());
  EXPECT_EQ(res.eventsTotal, plan.totalEvents());
}

VerifyOptions eager(int64_t maxErrors = 1) {
  VerifyOptions opts;
  opts.sendMode = SendMode::Eager;
  opts.maxErrors = maxErrors;
  return opts;
}

const VerifyError &onlyError(const VerifyResult &res) {
  EXPECT_EQ(res.errors.size(), 1u) << res.str();
  static VerifyError none;
  return res.errors.empty() ? none : res.errors.front();
}

} // namespace

//===----------------------------------------------------------------------===//
// Accepted plans
//===----------------------------------------------------------------------===//

TEST(PlanVerifier, AcceptsGPipe) {
  for (int64_t p : {2, 4})
    for (int64_t m : {1, 2, 3, 8}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      CommPlan plan(p);
      gpipe(plan, iota(p), m);
      EXPECT_EQ(plan.totalEvents(), 4 * (p - 1) * m);
      expectOk(plan);
    }
}

TEST(PlanVerifier, Accepts1F1B) {
  for (int64_t p : {2, 3, 4})
    for (int64_t m : {1, 2, 3, 4, 8}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      CommPlan plan(p);
      oneFOneB(plan, iota(p), m);
      EXPECT_EQ(plan.totalEvents(), 4 * (p - 1) * m);
      expectOk(plan);
    }
}

TEST(PlanVerifier, AcceptsDataTensorCollectives) {
  Mesh mesh{2, 2, 1};
  CommPlan plan = plan3D(mesh, /*m=*/2, /*useGPipe=*/true);
  // Per rank: 2 microbatches x (fwd + bwd) x 2 layers x 2 blocks x 2, + 2 buckets.
  for (int64_t r = 0; r < 4; ++r)
    EXPECT_EQ(plan[r].size(), 34u);
  expectOk(plan);
}

TEST(PlanVerifier, Accepts3DPlans) {
  for (bool g : {true, false}) {
    SCOPED_TRACE(g ? "gpipe" : "1f1b");
    expectOk(plan3D(Mesh{2, 2, 2}, 4, g));
    expectOk(plan3D(Mesh{1, 2, 4}, 5, g));
  }
}

TEST(PlanVerifier, AcceptsEdgeCases) {
  expectOk(CommPlan(0));
  expectOk(CommPlan(3)); // ranks without communication
  CommPlan plan(2);      // a single-member group completes on its own
  plan[0].push_back(CommEvent::coll("all_reduce", {0}, 8, "f32"));
  plan[0].push_back(CommEvent::send(1, 8, "bf16", "x")); // tags optional
  plan[1].push_back(CommEvent::recv(0, 8, "bf16", "y", 7));
  expectOk(plan);
}

// Naive 1F1B where every stage sends before it receives deadlocks under
// rendezvous semantics: this is why Megatron batches the pair into one
// send_forward_recv_backward. The verifier finds the cycle.
TEST(PlanVerifier, RejectsNaiveBlocking1F1B) {
  CommPlan plan(2);
  oneFOneB(plan, iota(2), 4, {}, /*parity=*/false);
  VerifyResult res = verifyCommPlan(plan);
  const VerifyError &e = onlyError(res);
  EXPECT_EQ(e.kind, ErrorKind::CyclicWait);
  EXPECT_EQ(e.message,
            "cyclic wait: rank 0 waits to send 4096 f32 to 1 (tag 2) at event 1 "
            "(s0/fwd#1 send act) while rank 1 waits to send 4096 f32 to 0 (tag 1) "
            "at event 1 (s1/bwd#0 send grad)");
}

//===----------------------------------------------------------------------===//
// Rejected plans
//===----------------------------------------------------------------------===//

TEST(PlanVerifier, RejectsSwappedSendRecvOrder) {
  CommPlan plan(2);
  gpipe(plan, iota(2), 4);
  // Rank 1 sends the first gradient before receiving the last activation.
  auto &ev = plan[1];
  std::swap(ev[find(plan, 1, "s1/fwd#3 recv act")], ev[find(plan, 1, "s1/bwd#3 send grad")]);
  VerifyResult res = verifyCommPlan(plan);
  const VerifyError &e = onlyError(res);
  EXPECT_EQ(e.kind, ErrorKind::CyclicWait);
  EXPECT_EQ(e.message,
            "cyclic wait: rank 0 waits to send 4096 f32 to 1 (tag 6) at event 3 "
            "(s0/fwd#3 send act) while rank 1 waits to send 4096 f32 to 0 (tag 7) "
            "at event 3 (s1/bwd#3 send grad)");
  EXPECT_EQ(e.events, (std::vector<EventRef>{{0, 3}, {1, 3}}));
  // The blocked set: each rank, what it waits for, and its peer's head.
  ASSERT_EQ(e.notes.size(), 2u);
  EXPECT_EQ(e.notes[0],
            "rank 0 (5 events left) waits to send 4096 f32 to 1 (tag 6) at event 3 "
            "(s0/fwd#3 send act); rank 1 is at event 3: send of 4096 f32 to 0 "
            "(tag 7) (s1/bwd#3 send grad)");
}

TEST(PlanVerifier, RejectsMissingRecv) {
  {
    // The last recv of the schedule is missing: the sender waits forever.
    CommPlan plan(2);
    gpipe(plan, iota(2), 4);
    erase(plan, 0, "s0/bwd#0 recv grad");
    VerifyResult res = verifyCommPlan(plan);
    const VerifyError &e = onlyError(res);
    EXPECT_EQ(e.kind, ErrorKind::PeerFinished);
    EXPECT_EQ(e.message,
              "rank 1 waits to send 4096 f32 to 0 (tag 1) at event 7 (s1/bwd#0 send "
              "grad) but rank 0 has finished (all 7 of its events done): no matching "
              "recv was posted (a missing recv?); rank 1 has 1 events left after all "
              "other ranks finished");
    EXPECT_EQ(e.events, (std::vector<EventRef>{{1, 7}}));
  }
  {
    // A recv missing in the middle of a 4-stage 1F1B: stage 2 never takes
    // microbatch 1's activation, so stage 1 waits on it in a cycle.
    CommPlan plan(4);
    oneFOneB(plan, iota(4), 4);
    erase(plan, 2, "s2/fwd#1 recv act");
    VerifyResult res = verifyCommPlan(plan);
    const VerifyError &e = onlyError(res);
    EXPECT_EQ(e.kind, ErrorKind::CyclicWait) << res.str();
    EXPECT_NE(e.message.find("rank 1 waits to send 4096 f32 to 2 (tag 2)"),
              std::string::npos)
        << e.message;
    EXPECT_NE(e.message.find("(s1/fwd#1 send act)"), std::string::npos) << e.message;
    EXPECT_NE(e.message.find("rank 2 waits to "), std::string::npos) << e.message;
  }
}

TEST(PlanVerifier, RejectsSkippedCollective) {
  {
    // Rank 3 skips its last data-parallel all-reduce.
    Mesh mesh{2, 2, 1};
    CommPlan plan = plan3D(mesh, 2, true);
    plan[3].pop_back();
    VerifyResult res = verifyCommPlan(plan);
    const VerifyError &e = onlyError(res);
    EXPECT_EQ(e.kind, ErrorKind::CollectiveSkipped);
    EXPECT_EQ(e.message,
              "collective skipped on group [1,3]: rank 3 has finished (all 33 of its "
              "events done) while rank 1 waits in all_reduce of 65536 f32 on group "
              "[1,3] at event 33 (grad bucket 0)");
  }
  {
    // Rank 3 skips a tensor-parallel collective in its last backward; its
    // partner waits, and rank 0 waits on rank 2 in the data-parallel group.
    Mesh mesh{2, 2, 1};
    CommPlan plan = plan3D(mesh, 2, true);
    plan[3].erase(plan[3].begin() + 31);
    VerifyResult res = verifyCommPlan(plan);
    const VerifyError &e = onlyError(res);
    EXPECT_EQ(e.kind, ErrorKind::CollectiveSkipped);
    EXPECT_EQ(e.message,
              "collective skipped on group [2,3]: rank 3 has finished (all 33 of its "
              "events done) while rank 2 waits in all_gather of 1024 f32 on group "
              "[2,3] at event 31 (bwd#0 (h.1.mlp))");
    // The blocked set lists rank 0 (behind rank 2) too.
    ASSERT_EQ(e.notes.size(), 2u);
    EXPECT_EQ(e.notes[0].rfind("rank 0 (2 events left) waits in all_reduce of 65536 "
                               "f32 on group [0,2] at event 32 (grad bucket 1); rank 2 "
                               "is at event 31: all_gather",
                               0),
              0u)
        << e.notes[0];
  }
  {
    // One member finished, another is stuck elsewhere (behind the first).
    CommPlan plan(3);
    plan[0].push_back(CommEvent::coll("all_reduce", {0, 1, 2}, 8, "f32", "ar"));
    plan[0].push_back(CommEvent::send(2, 8, "f32", "snd"));
    plan[2].push_back(CommEvent::recv(0, 8, "f32", "rcv"));
    VerifyResult res = verifyCommPlan(plan);
    const VerifyError &e = onlyError(res);
    EXPECT_EQ(e.kind, ErrorKind::CollectiveSkipped);
    EXPECT_EQ(e.message,
              "collective skipped on group [0,1,2]: rank 1 has finished (all 0 of its "
              "events done) while rank 0 waits in all_reduce of 8 f32 on group [0,1,2] "
              "at event 0 (ar); rank 2 is stuck elsewhere: waits to recv 8 f32 from 0 "
              "at event 0 (rcv)");
    EXPECT_EQ(e.events, (std::vector<EventRef>{{0, 0}, {2, 0}}));
  }
  {
    // Skipped on one rank of a 3D plan: the member is stuck elsewhere.
    CommPlan plan = plan3D(Mesh{1, 2, 2}, 2, false);
    erase(plan, 1, "fwd#1 (h.0.attn)");
    VerifyResult res = verifyCommPlan(plan);
    ASSERT_FALSE(res.ok());
    const VerifyError &e = res.errors.front();
    EXPECT_TRUE(e.kind == ErrorKind::CyclicWait ||
                e.kind == ErrorKind::CollectiveMismatch)
        << res.str();
    EXPECT_NE(e.message.find("group [0,1]"), std::string::npos) << e.message;
  }
}

TEST(PlanVerifier, RejectsMismatchedSendRecvSize) {
  CommPlan plan(2);
  gpipe(plan, iota(2), 4);
  plan[1][find(plan, 1, "s1/fwd#2 recv act")].count = 2048;
  VerifyResult res = verifyCommPlan(plan);
  const VerifyError &e = onlyError(res);
  EXPECT_EQ(e.kind, ErrorKind::SendRecvMismatch);
  EXPECT_EQ(e.message,
            "send/recv mismatch (element counts differ): rank 0 sends 4096 f32 to 1 "
            "(tag 4) at event 2 (s0/fwd#2 send act) but rank 1 receives 2048 f32 "
            "from 0 (tag 4) at event 2 (s1/fwd#2 recv act)");
  EXPECT_EQ(e.events, (std::vector<EventRef>{{0, 2}, {1, 2}}));
}

TEST(PlanVerifier, RejectsMismatchedDtypeAndTag) {
  CommPlan plan(2);
  gpipe(plan, iota(2), 2);
  plan[0][find(plan, 0, "s0/bwd#1 recv grad")].dtype = "bf16";
  plan[1][find(plan, 1, "s1/fwd#0 recv act")].tag = 5;
  VerifyOptions opts;
  opts.maxErrors = 10;
  VerifyResult res = verifyCommPlan(plan, opts);
  ASSERT_EQ(res.errors.size(), 2u) << res.str();
  EXPECT_EQ(res.errors[0].kind, ErrorKind::SendRecvMismatch);
  EXPECT_NE(res.errors[0].message.find("(tags differ)"), std::string::npos);
  EXPECT_NE(res.errors[0].message.find("from 0 (tag 5)"), std::string::npos);
  EXPECT_NE(res.errors[1].message.find("(dtypes differ)"), std::string::npos);
  EXPECT_NE(res.errors[1].message.find("receives 4096 bf16 from 1"), std::string::npos);
  // The matched pairs still complete, so the run goes on to the end.
  EXPECT_EQ(res.eventsCompleted, plan.totalEvents());
  // With the default options only the first error is reported.
  EXPECT_EQ(verifyCommPlan(plan).errors.size(), 1u);
}

TEST(PlanVerifier, RejectsMismatchedCollectiveKinds) {
  Mesh mesh{2, 2, 1};
  CommPlan plan = plan3D(mesh, 2, true);
  CommEvent &c = plan[3][2];
  ASSERT_EQ(c.collective.str(), "all_gather");
  c.collective = "all_reduce";
  c.count = 4096;
  c.provenance = "bwd#12 (h.3.attn)";
  VerifyResult res = verifyCommPlan(plan);
  const VerifyError &e = onlyError(res);
  EXPECT_EQ(e.kind, ErrorKind::CollectiveMismatch);
  EXPECT_EQ(e.message,
            "collective mismatch on group [2,3]: rank 3 does all_reduce of 4096 f32 at "
            "event 2 (bwd#12 (h.3.attn)) while rank 2 does all_gather of 1024 f32 at "
            "event 2 (fwd#0 (h.0.mlp))");
  EXPECT_EQ(e.events, (std::vector<EventRef>{{2, 2}, {3, 2}}));
  EXPECT_EQ(e.notes.size(), 2u);
}

TEST(PlanVerifier, CollectiveMismatchNamesTheOddMember) {
  CommPlan plan(4);
  for (int64_t r = 0; r < 4; ++r)
    plan[r].push_back(CommEvent::coll("all_reduce", {0, 1, 2, 3}, 4096, "f32",
                                      "backward#12 (h.3.attn)"));
  plan[1][0].collective = "all_gather";
  plan[1][0].count = 1024;
  VerifyResult res = verifyCommPlan(plan);
  const VerifyError &e = onlyError(res);
  EXPECT_EQ(e.message,
            "collective mismatch on group [0,1,2,3]: rank 1 does all_gather of 1024 "
            "f32 at event 0 (backward#12 (h.3.attn)) while rank 0 does all_reduce of "
            "4096 f32 at event 0 (backward#12 (h.3.attn))");
}

TEST(PlanVerifier, RejectsRecvFromFinishedRank) {
  CommPlan plan(2);
  gpipe(plan, iota(2), 2);
  plan[1].push_back(CommEvent::recv(0, kAct, "f32", "s1/extra recv"));
  plan[1].push_back(CommEvent::send(0, kAct, "f32", "s1/never reached"));
  VerifyResult res = verifyCommPlan(plan);
  const VerifyError &e = onlyError(res);
  EXPECT_EQ(e.kind, ErrorKind::PeerFinished);
  EXPECT_EQ(e.message,
            "rank 1 waits to recv 4096 f32 from 0 at event 4 (s1/extra recv) but rank "
            "0 has finished (all 4 of its events done): it never sends this (a missing "
            "send, or an extra recv); rank 1 has 2 events left after all other ranks "
            "finished");
}

TEST(PlanVerifier, RejectsLongerCycles) {
  {
    CommPlan plan(3);
    plan[0].push_back(CommEvent::recv(2, 1, "f32", "a"));
    plan[1].push_back(CommEvent::recv(0, 1, "f32", "b"));
    plan[2].push_back(CommEvent::recv(1, 1, "f32", "c"));
    VerifyResult res = verifyCommPlan(plan);
    const VerifyError &e = onlyError(res);
    EXPECT_EQ(e.message,
              "cyclic wait: rank 0 waits to recv 1 f32 from 2 at event 0 (a) while "
              "rank 2 waits to recv 1 f32 from 1 at event 0 (c) while rank 1 waits to "
              "recv 1 f32 from 0 at event 0 (b)");
  }
  {
    // A collective against a point-to-point transfer.
    CommPlan plan(3);
    plan[0].push_back(CommEvent::coll("all_reduce", {0, 1}, 8, "f32", "ar"));
    plan[0].push_back(CommEvent::send(1, 8, "f32", "snd"));
    plan[1].push_back(CommEvent::recv(0, 8, "f32", "rcv"));
    plan[1].push_back(CommEvent::coll("all_reduce", {0, 1}, 8, "f32", "ar"));
    plan[2].push_back(CommEvent::recv(1, 8, "f32", "behind")); // waits on the cycle
    VerifyResult res = verifyCommPlan(plan);
    const VerifyError &e = onlyError(res);
    EXPECT_EQ(e.kind, ErrorKind::CyclicWait);
    EXPECT_EQ(e.message,
              "cyclic wait: rank 0 waits in all_reduce of 8 f32 on group [0,1] at "
              "event 0 (ar) for rank 1 while rank 1 waits to recv 8 f32 from 0 at "
              "event 0 (rcv)");
    EXPECT_EQ(e.notes.size(), 3u);
  }
}

// Expert parallelism (issue #34; Megatron #5749): with dp = 4 and ep = 2 the
// ep groups are [0,1] and [2,3], the dp group all four. Ranks 0 and 1 issue
// their ep all-to-all and the dp gradient all-reduce in different orders:
// rank 0 waits in the all-to-all for rank 1, which waits in the all-reduce
// for rank 0. The verifier names both collectives and both ranks; issued in
// one order on every rank, the same events pass.
TEST(PlanVerifier, RejectsExpertAllToAllAgainstDataParallelOrder) {
  auto a2a = [](int64_t first) {
    return CommEvent::coll("all_to_all_v", {first, first + 1}, 2048, "f32", "expert parallelism: dispatch");
  };
  auto grads = CommEvent::coll("all_reduce.sum", {0, 1, 2, 3}, 65536, "f32", "dp gradients");
  CommPlan ok(4), swapped(4);
  for (int64_t r = 0; r < 4; ++r) {
    ok[r] = {a2a(r / 2 * 2), grads};
    swapped[r] = r == 1 ? std::vector<CommEvent>{grads, a2a(0)} : ok[r];
  }
  EXPECT_TRUE(verifyCommPlan(ok).ok());
  VerifyResult res = verifyCommPlan(swapped);
  const VerifyError &e = onlyError(res);
  EXPECT_EQ(e.kind, ErrorKind::CyclicWait);
  EXPECT_EQ(e.message, "cyclic wait: rank 0 waits in all_to_all_v of 2048 f32 on group [0,1] at event 0 "
                       "(expert parallelism: dispatch) for rank 1 while rank 1 waits in all_reduce.sum of 65536 "
                       "f32 on group [0,1,2,3] at event 0 (dp gradients) for rank 0");
}

TEST(PlanVerifier, RejectsInvalidEvents) {
  CommPlan plan(2);
  plan[0].push_back(CommEvent::send(2, 1, "f32", "out"));
  plan[0].push_back(CommEvent::send(0, 1, "f32", "self"));
  plan[1].push_back(CommEvent::coll("all_reduce", {1, 0}, 1, "f32", "unsorted"));
  plan[1].push_back(CommEvent::coll("all_reduce", {0}, 1, "f32", "not member"));
  plan[1].push_back(CommEvent::recv(0, -1, "f32", "negative"));
  VerifyOptions opts;
  opts.maxErrors = 100;
  VerifyResult res = verifyCommPlan(plan, opts);
  ASSERT_EQ(res.errors.size(), 5u) << res.str();
  for (const VerifyError &e : res.errors)
    EXPECT_EQ(e.kind, ErrorKind::InvalidEvent);
  EXPECT_EQ(res.errors[0].message,
            "rank 0 at event 0 (out): send of 1 f32 to 2: peer 2 is not a rank in [0, 2)");
  EXPECT_NE(res.errors[1].message.find("itself"), std::string::npos);
  EXPECT_NE(res.errors[2].message.find("sorted and distinct"), std::string::npos);
  EXPECT_NE(res.errors[3].message.find("not a member"), std::string::npos);
  EXPECT_NE(res.errors[4].message.find("negative"), std::string::npos);
  EXPECT_EQ(res.eventsCompleted, 0);
}

TEST(PlanVerifier, ResultToString) {
  CommPlan plan(2);
  plan[0].push_back(CommEvent::send(1, 1, "f32", "x"));
  plan[1].push_back(CommEvent::send(0, 1, "f32", "y"));
  std::string s = verifyCommPlan(plan).str();
  EXPECT_EQ(s.rfind("error [cyclic-wait]: cyclic wait: rank 0", 0), 0u) << s;
  EXPECT_NE(s.find("\n  rank 1 (1 events left)"), std::string::npos) << s;
  CommPlan good(2);
  gpipe(good, iota(2), 1);
  EXPECT_EQ(verifyCommPlan(good).str(), "ok: 4 communication events");
}

// ~10^5 events: a 64-stage 1F1B, and a dp=2,tp=2,pp=16 3D plan.
TEST(PlanVerifier, LargePlansAreFast) {
  auto t0 = std::chrono::steady_clock::now();
  CommPlan pipe(64);
  oneFOneB(pipe, iota(64), 400);
  EXPECT_EQ(pipe.totalEvents(), 4 * 63 * 400);
  CommPlan threeD = plan3D(Mesh{2, 2, 16}, 96, false, 1);
  EXPECT_GT(threeD.totalEvents(), 50000);
  auto t1 = std::chrono::steady_clock::now();
  expectOk(pipe);
  expectOk(threeD);
  auto t2 = std::chrono::steady_clock::now();
  double gen = std::chrono::duration<double>(t1 - t0).count();
  double ver = std::chrono::duration<double>(t2 - t1).count();
  std::printf("generated %lld + %lld events in %.3fs, verified in %.3fs\n",
              static_cast<long long>(pipe.totalEvents()),
              static_cast<long long>(threeD.totalEvents()), gen, ver);
  EXPECT_LT(ver, 60.0); // generous: a sanity bound, not a benchmark
}

//===----------------------------------------------------------------------===//
// Eager (buffered) sends
//===----------------------------------------------------------------------===//

namespace {

/// 1F1B with p = 2, m = 2 where both stages send before they receive:
///   stage 0: send a0, send a1, recv g0, recv g1
///   stage 1: recv a0, send g0, recv a1, send g1
CommPlan sendFirst1F1B() {
  CommPlan plan(2);
  oneFOneB(plan, iota(2), 2, {}, /*parity=*/false);
  return plan;
}

std::vector<std::string> provenances(const std::vector<CommEvent> &evs) {
  std::vector<std::string> v;
  for (const CommEvent &e : evs)
    v.push_back(e.provenance);
  return v;
}

} // namespace

TEST(EagerSends, ModeNamesAndDefault) {
  EXPECT_STREQ(sendModeName(SendMode::Rendezvous), "rendezvous");
  EXPECT_STREQ(sendModeName(SendMode::Eager), "eager");
  EXPECT_EQ(VerifyOptions().sendMode, SendMode::Rendezvous);
  EXPECT_STREQ(errorKindName(ErrorKind::UnreceivedSend), "unreceived-send");
}

// The schedule the runtime runs: deadlocks under rendezvous, fine with the
// runtime's eager sends.
TEST(EagerSends, SendFirst1F1BNeedsEagerSends) {
  CommPlan plan = sendFirst1F1B();
  ASSERT_EQ(provenances(plan[0]),
            (std::vector<std::string>{"s0/fwd#0 send act", "s0/fwd#1 send act",
                                      "s0/bwd#0 recv grad", "s0/bwd#1 recv grad"}));
  ASSERT_EQ(provenances(plan[1]),
            (std::vector<std::string>{"s1/fwd#0 recv act", "s1/bwd#0 send grad",
                                      "s1/fwd#1 recv act", "s1/bwd#1 send grad"}));
  VerifyResult rdv = verifyCommPlan(plan);
  const VerifyError &e = onlyError(rdv);
  EXPECT_EQ(e.kind, ErrorKind::CyclicWait);
  EXPECT_EQ(e.message,
            "cyclic wait: rank 0 waits to send 4096 f32 to 1 (tag 2) at event 1 "
            "(s0/fwd#1 send act) while rank 1 waits to send 4096 f32 to 0 (tag 1) "
            "at event 1 (s1/bwd#0 send grad)");
  EXPECT_EQ(rdv.eventsCompleted, 2);

  VerifyResult res = verifyCommPlan(plan, eager());
  EXPECT_TRUE(res.ok()) << res.str();
  EXPECT_EQ(res.eventsCompleted, 8);
  EXPECT_EQ(res.str(), "ok: 8 communication events");
}

// Everything rendezvous accepts, eager accepts too; and send-first 1F1B of
// any depth runs with eager sends.
TEST(EagerSends, AcceptsSchedules) {
  for (int64_t p : {2, 3, 4, 7})
    for (int64_t m : {1, 2, 3, 4, 8}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      for (int kind = 0; kind < 3; ++kind) {
        CommPlan plan(p);
        if (kind == 0)
          gpipe(plan, iota(p), m);
        else
          oneFOneB(plan, iota(p), m, {}, /*parity=*/kind == 1);
        expectOk(plan, eager());
      }
    }
  for (bool g : {true, false}) {
    SCOPED_TRACE(g ? "gpipe" : "1f1b");
    expectOk(plan3D(Mesh{2, 2, 2}, 4, g), eager());
    expectOk(plan3D(Mesh{1, 2, 4}, 5, g), eager());
  }
  CommPlan plan(2); // several messages in flight on one channel
  for (int64_t i = 0; i < 5; ++i)
    plan[0].push_back(CommEvent::send(1, i, "f32", "", i));
  for (int64_t i = 0; i < 5; ++i)
    plan[1].push_back(CommEvent::recv(0, i, "f32", "", i));
  expectOk(plan, eager());
}

TEST(EagerSends, RejectsMissingRecv) {
  CommPlan plan = sendFirst1F1B();
  erase(plan, 1, "s1/fwd#1 recv act");
  VerifyResult res = verifyCommPlan(plan, eager(10));
  const VerifyError &e = onlyError(res);
  EXPECT_EQ(e.kind, ErrorKind::UnreceivedSend);
  EXPECT_EQ(e.message,
            "rank 0's send of 4096 f32 to 1 (tag 2) at event 1 (s0/fwd#1 send act) is "
            "never received: rank 1 has finished (all 3 of its events done) after "
            "receiving 1 of the 2 messages rank 0 sent it (a missing recv?)");
  EXPECT_EQ(e.events, (std::vector<EventRef>{{0, 1}}));
  EXPECT_EQ(res.eventsCompleted, plan.totalEvents());
  EXPECT_EQ(res.str().rfind("error [unreceived-send]: rank 0's send", 0), 0u)
      << res.str();

  // Without tags a recv missing early shifts the FIFO: the later recvs take
  // the earlier messages and the last message is the one left over.
  CommPlan untagged(2);
  for (int64_t i = 0; i < 3; ++i)
    untagged[0].push_back(CommEvent::send(1, 8, "f32", "snd" + std::to_string(i)));
  for (int64_t i = 1; i < 3; ++i)
    untagged[1].push_back(CommEvent::recv(0, 8, "f32", "rcv" + std::to_string(i)));
  res = verifyCommPlan(untagged, eager(10));
  const VerifyError &u = onlyError(res);
  EXPECT_EQ(u.kind, ErrorKind::UnreceivedSend);
  EXPECT_EQ(u.message,
            "rank 0's send of 8 f32 to 1 at event 2 (snd2) is never received: rank 1 "
            "has finished (all 2 of its events done) after receiving 2 of the 3 "
            "messages rank 0 sent it (a missing recv?)");

  // Every message left over is an error; none at all received.
  CommPlan none(3);
  none[2].push_back(CommEvent::send(0, 1, "f32", "a"));
  none[2].push_back(CommEvent::send(0, 1, "f32", "b"));
  none[1].push_back(CommEvent::send(0, 1, "f32", "c"));
  res = verifyCommPlan(none, eager(10));
  ASSERT_EQ(res.errors.size(), 3u) << res.str();
  EXPECT_EQ(res.errors[0].events, (std::vector<EventRef>{{1, 0}})); // by channel
  EXPECT_EQ(res.errors[1].events, (std::vector<EventRef>{{2, 0}}));
  EXPECT_EQ(res.errors[2].events, (std::vector<EventRef>{{2, 1}}));
  EXPECT_NE(res.errors[1].message.find("after receiving 0 of the 2 messages"),
            std::string::npos)
      << res.errors[1].message;
  EXPECT_EQ(verifyCommPlan(none, eager()).errors.size(), 1u);
}

TEST(EagerSends, RejectsMissingSend) {
  CommPlan plan = sendFirst1F1B();
  erase(plan, 1, "s1/bwd#1 send grad");
  VerifyResult res = verifyCommPlan(plan, eager(10));
  const VerifyError &e = onlyError(res);
  EXPECT_EQ(e.kind, ErrorKind::PeerFinished);
  EXPECT_EQ(e.message,
            "rank 0 waits to recv 4096 f32 from 1 (tag 3) at event 3 (s0/bwd#1 recv "
            "grad) but rank 1 has finished (all 3 of its events done): it never sends "
            "this (a missing send, or an extra recv); rank 0 has 1 events left after "
            "all other ranks finished");
  EXPECT_EQ(e.events, (std::vector<EventRef>{{0, 3}}));
  EXPECT_EQ(res.eventsCompleted, 6);
}

TEST(EagerSends, RejectsSwappedRecvOrder) {
  CommPlan plan = sendFirst1F1B();
  auto &ev = plan[1];
  std::swap(ev[find(plan, 1, "s1/fwd#0 recv act")], ev[find(plan, 1, "s1/fwd#1 recv act")]);
  VerifyResult res = verifyCommPlan(plan, eager(10));
  ASSERT_EQ(res.errors.size(), 2u) << res.str();
  EXPECT_EQ(res.errors[0].kind, ErrorKind::SendRecvMismatch);
  EXPECT_EQ(res.errors[0].message,
            "send/recv mismatch (tags differ): rank 0 sends 4096 f32 to 1 (tag 0) at "
            "event 0 (s0/fwd#0 send act) but rank 1 receives 4096 f32 from 0 (tag 2) "
            "at event 0 (s1/fwd#1 recv act)");
  EXPECT_EQ(res.errors[0].events, (std::vector<EventRef>{{0, 0}, {1, 0}}));
  EXPECT_EQ(res.errors[1].message,
            "send/recv mismatch (tags differ): rank 0 sends 4096 f32 to 1 (tag 2) at "
            "event 1 (s0/fwd#1 send act) but rank 1 receives 4096 f32 from 0 (tag 0) "
            "at event 2 (s1/fwd#0 recv act)");
  EXPECT_EQ(res.errors[1].events, (std::vector<EventRef>{{0, 1}, {1, 2}}));
  EXPECT_EQ(res.eventsCompleted, plan.totalEvents());

  // Sizes are checked at match time too.
  CommPlan sized = sendFirst1F1B();
  sized[1][find(sized, 1, "s1/fwd#1 recv act")].count = 2048;
  res = verifyCommPlan(sized, eager());
  const VerifyError &e = onlyError(res);
  EXPECT_EQ(e.message,
            "send/recv mismatch (element counts differ): rank 0 sends 4096 f32 to 1 "
            "(tag 2) at event 1 (s0/fwd#1 send act) but rank 1 receives 2048 f32 from "
            "0 (tag 2) at event 2 (s1/fwd#1 recv act)");
}

TEST(EagerSends, RejectsCycleOfRecvs) {
  // Stage 0 waits for gradient 0 before sending anything.
  CommPlan plan = sendFirst1F1B();
  auto &ev = plan[0];
  std::rotate(ev.begin(), ev.begin() + find(plan, 0, "s0/bwd#0 recv grad"),
              ev.begin() + find(plan, 0, "s0/bwd#0 recv grad") + 1);
  ASSERT_EQ(ev[0].provenance, "s0/bwd#0 recv grad");
  VerifyResult res = verifyCommPlan(plan, eager(10));
  const VerifyError &e = onlyError(res);
  EXPECT_EQ(e.kind, ErrorKind::CyclicWait);
  EXPECT_EQ(e.message,
            "cyclic wait: rank 0 waits to recv 4096 f32 from 1 (tag 1) at event 0 "
            "(s0/bwd#0 recv grad) while rank 1 waits to recv 4096 f32 from 0 (tag 0) "
            "at event 0 (s1/fwd#0 recv act)");
  EXPECT_EQ(e.events, (std::vector<EventRef>{{0, 0}, {1, 0}}));
  ASSERT_EQ(e.notes.size(), 2u);
  EXPECT_EQ(e.notes[0],
            "rank 0 (4 events left) waits to recv 4096 f32 from 1 (tag 1) at event 0 "
            "(s0/bwd#0 recv grad); rank 1 is at event 0: recv of 4096 f32 from 0 "
            "(tag 0) (s1/fwd#0 recv act)");

  // Three ranks, and a rank waiting behind the cycle.
  CommPlan ring(4);
  ring[0].push_back(CommEvent::recv(2, 1, "f32", "a"));
  ring[0].push_back(CommEvent::send(1, 1, "f32", "a'"));
  ring[1].push_back(CommEvent::recv(0, 1, "f32", "b"));
  ring[2].push_back(CommEvent::recv(1, 1, "f32", "c"));
  ring[3].push_back(CommEvent::send(0, 1, "f32", "d")); // 0 is blocked: pending
  ring[3].push_back(CommEvent::recv(2, 1, "f32", "e"));
  res = verifyCommPlan(ring, eager(10));
  const VerifyError &r = onlyError(res); // the pending message is not an error
  EXPECT_EQ(r.message,
            "cyclic wait: rank 0 waits to recv 1 f32 from 2 at event 0 (a) while rank "
            "2 waits to recv 1 f32 from 1 at event 0 (c) while rank 1 waits to recv 1 "
            "f32 from 0 at event 0 (b)");
  EXPECT_EQ(r.notes.size(), 4u);
}

TEST(EagerSends, DeadlockHidesPendingMessages) {
  // Rank 1 waits on a rank that never sends; rank 0's message to rank 1 is
  // still pending then, which is a consequence, not a second error.
  CommPlan plan(3);
  plan[0].push_back(CommEvent::send(1, 8, "f32", "x"));
  plan[0].push_back(CommEvent::recv(1, 8, "f32", "y"));
  plan[1].push_back(CommEvent::recv(2, 8, "f32", "z"));
  plan[1].push_back(CommEvent::recv(0, 8, "f32", "x'"));
  plan[1].push_back(CommEvent::send(0, 8, "f32", "y'"));
  VerifyResult res = verifyCommPlan(plan, eager(10));
  const VerifyError &e = onlyError(res);
  EXPECT_EQ(e.kind, ErrorKind::PeerFinished);
  EXPECT_EQ(e.message.rfind("rank 1 waits to recv 8 f32 from 2 at event 0 (z) but "
                            "rank 2 has finished (all 0 of its events done): it "
                            "never sends this",
                            0),
            0u)
      << e.message;
  ASSERT_EQ(e.notes.size(), 2u);
  EXPECT_EQ(e.notes[0],
            "rank 0 (1 events left) waits to recv 8 f32 from 1 at event 1 (y); rank 1 "
            "is at event 0: recv of 8 f32 from 2 (z)");

  // A message to a blocked rank stays pending too (rank 0 might take it once
  // the deadlock is fixed).
  plan[2].push_back(CommEvent::send(0, 8, "f32", "w"));
  res = verifyCommPlan(plan, eager(10));
  EXPECT_EQ(onlyError(res).kind, ErrorKind::PeerFinished);

  // But a receiver that finished with messages left over is reported, after
  // the deadlock.
  plan = CommPlan(3);
  plan[0].push_back(CommEvent::recv(1, 8, "f32", "never"));
  plan[1].push_back(CommEvent::send(2, 8, "f32", "lost"));
  res = verifyCommPlan(plan, eager(10));
  ASSERT_EQ(res.errors.size(), 2u) << res.str();
  EXPECT_EQ(res.errors[0].kind, ErrorKind::PeerFinished);
  EXPECT_EQ(res.errors[1].kind, ErrorKind::UnreceivedSend);
  EXPECT_EQ(res.errors[1].message,
            "rank 1's send of 8 f32 to 2 at event 0 (lost) is never received: rank 2 "
            "has finished (all 0 of its events done) after receiving 0 of the 1 "
            "messages rank 1 sent it (a missing recv?)");
}

TEST(EagerSends, RejectsSkippedCollective) {
  {
    Mesh mesh{2, 2, 1};
    CommPlan plan = plan3D(mesh, 2, true);
    plan[3].pop_back();
    VerifyResult res = verifyCommPlan(plan, eager());
    const VerifyError &e = onlyError(res);
    EXPECT_EQ(e.kind, ErrorKind::CollectiveSkipped);
    EXPECT_EQ(e.message,
              "collective skipped on group [1,3]: rank 3 has finished (all 33 of its "
              "events done) while rank 1 waits in all_reduce of 65536 f32 on group "
              "[1,3] at event 33 (grad bucket 0)");
  }
  {
    // A 3D 1F1B plan: rank 7 (last stage) skips its last gradient all-reduce.
    Mesh mesh{2, 2, 2};
    CommPlan plan = plan3D(mesh, 4, false);
    plan[7].pop_back();
    VerifyResult res = verifyCommPlan(plan, eager());
    const VerifyError &e = onlyError(res);
    EXPECT_EQ(e.kind, ErrorKind::CollectiveSkipped);
    EXPECT_EQ(e.message.rfind("collective skipped on group [5,7]: rank 7 has finished",
                              0),
              0u)
        << e.message;
  }
  {
    // Skipped inside a stage: the partner waits in the collective while its
    // stage neighbour's messages pile up in the channel.
    CommPlan plan = plan3D(Mesh{1, 2, 2}, 2, false);
    erase(plan, 1, "fwd#1 (h.0.attn)");
    VerifyResult res = verifyCommPlan(plan, eager());
    ASSERT_FALSE(res.ok());
    const VerifyError &e = res.errors.front();
    EXPECT_TRUE(e.kind == ErrorKind::CyclicWait ||
                e.kind == ErrorKind::CollectiveMismatch ||
                e.kind == ErrorKind::CollectiveSkipped)
        << res.str();
    EXPECT_NE(e.message.find("group [0,1]"), std::string::npos) << e.message;
  }
  {
    // A collective mismatch is found as under rendezvous.
    CommPlan plan = plan3D(Mesh{2, 2, 1}, 2, true);
    plan[3][2].collective = "all_reduce";
    VerifyResult res = verifyCommPlan(plan, eager());
    EXPECT_EQ(onlyError(res).kind, ErrorKind::CollectiveMismatch);
  }
}

// Linear time with eager sends: a 64-stage send-first 1F1B, a 3D plan, one
// deep channel (10^5 messages in flight), a 4096-rank fan-in received in
// reverse order, and the same channel with every message left over.
TEST(EagerSends, LargePlansAreFast) {
  auto t0 = std::chrono::steady_clock::now();
  CommPlan pipe(64);
  oneFOneB(pipe, iota(64), 400, {}, /*parity=*/false);
  EXPECT_EQ(pipe.totalEvents(), 4 * 63 * 400);
  CommPlan threeD = plan3D(Mesh{2, 2, 16}, 96, false, 1);
  constexpr int64_t kDeep = 100000, kFan = 4096;
  CommPlan deep(2);
  for (int64_t i = 0; i < kDeep; ++i) {
    deep[0].push_back(CommEvent::send(1, 1, "f32", {}, i));
    deep[1].push_back(CommEvent::recv(0, 1, "f32", {}, i));
  }
  CommPlan fan(kFan);
  for (int64_t r = 1; r < kFan; ++r) {
    fan[r].push_back(CommEvent::send(0, 1, "f32"));
    fan[0].push_back(CommEvent::recv(kFan - r, 1, "f32"));
  }
  CommPlan lost(2);
  lost[0] = deep[0];
  auto t1 = std::chrono::steady_clock::now();
  expectOk(pipe, eager());
  expectOk(threeD, eager());
  expectOk(deep, eager());
  expectOk(fan, eager());
  VerifyResult res = verifyCommPlan(lost, eager(kDeep + 1));
  EXPECT_EQ(res.errors.size(), static_cast<size_t>(kDeep));
  EXPECT_EQ(res.errors.back().kind, ErrorKind::UnreceivedSend);
  auto t2 = std::chrono::steady_clock::now();
  double gen = std::chrono::duration<double>(t1 - t0).count();
  double ver = std::chrono::duration<double>(t2 - t1).count();
  std::printf("eager: generated %lld events in %.3fs, verified in %.3fs\n",
              static_cast<long long>(pipe.totalEvents() + threeD.totalEvents() +
                                     deep.totalEvents() + fan.totalEvents() +
                                     lost.totalEvents()),
              gen, ver);
  EXPECT_LT(ver, 60.0); // generous: a sanity bound, not a benchmark
}
