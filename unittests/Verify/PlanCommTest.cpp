//===- PlanCommTest.cpp - a runtime plan's communication events -----------===//
//
// commPlanOf builds each subroutine's events once and copies them per action,
// and describes an event only when a message names it. These tests check the
// result against a direct expansion of the documented rules
// (docs/plan-verifier.md "Feeding it from a plan") on a pipelined dp × tp × pp
// plan, and that errors deep in a long schedule still name the right action,
// microbatch and op.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Verify/PlanComm.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace llcdist;
using namespace llcdist::verify;
namespace schema = llcdist::rt::schema;

namespace {

constexpr int64_t kMicrobatches = 48;

/// An op with `roles` (role name -> buffer ids) and attrs.
rt::Op makeOp(schema::OpKind kind, std::vector<std::pair<std::string, std::vector<int64_t>>> roles,
              std::map<std::string, rt::AttrValue> attrs, std::string loc = {}) {
  rt::Op op;
  op.kind = kind;
  op.args.resize(schema::opSpec(kind).numArgs);
  for (auto &[role, ids] : roles)
    op.args[size_t(schema::argIndex(kind, role))] = ids;
  op.attrs = std::move(attrs);
  op.loc = std::move(loc);
  return op;
}

rt::Op sendOp(int64_t buf, int64_t peer, int64_t tag, std::string loc) {
  return makeOp(schema::OpKind::kSend, {{"x", {buf}}},
                {{"axis", std::string("pp")}, {"peer", peer}, {"tag", tag}}, std::move(loc));
}
rt::Op recvOp(int64_t buf, int64_t peer, int64_t tag, std::string loc) {
  return makeOp(schema::OpKind::kRecv, {{"y", {buf}}},
                {{"axis", std::string("pp")}, {"peer", peer}, {"tag", tag}}, std::move(loc));
}
rt::Op gatherOp(schema::OpKind kind, int64_t x, int64_t y, std::string loc = {}) {
  std::map<std::string, rt::AttrValue> attrs = {{"axis", std::string("tp")}};
  if (kind == schema::OpKind::kReduceScatter)
    attrs["op"] = std::string("sum");
  return makeOp(kind, {{"x", {x}}, {"y", {y}}}, std::move(attrs), std::move(loc));
}

enum Buf : int64_t { kAct, kGrad, kFull, kW, kNorm };
constexpr int64_t kForward = 0, kBackward = 1, kOptimizer = 2;

/// Stage s of a two-stage pipeline on dp=2 × tp=2: forward and backward with
/// a sequence-parallel all-gather / reduce-scatter over tp and the activation
/// / gradient exchange over pp; an optimizer step with the dp gradient
/// all-reduce (two buffers, one of them f64) and a bf16 all-reduce over tp.
rt::Program stageProgram(int64_t s) {
  rt::Program p;
  p.file = "program-" + std::to_string(s) + ".json";
  auto buffer = [&](const char *name, schema::ElemType dtype, std::vector<int64_t> shape) {
    rt::BufferDesc b;
    b.id = int64_t(p.buffers.size());
    b.name = name;
    b.dtype = dtype;
    b.shape = std::move(shape);
    p.buffers.push_back(b);
  };
  buffer("act", schema::ElemType::kF32, {8});
  buffer("grad", schema::ElemType::kF32, {8});
  buffer("full", schema::ElemType::kF32, {16});
  buffer("w", schema::ElemType::kF32, {4, 3});
  buffer("norm", schema::ElemType::kF64, {1});
  rt::Subroutine fwd{"forward", {}}, bwd{"backward", {}}, opt{"optimizer", {}};
  rt::Op zero;
  if (s == 0) {
    fwd.ops = {gatherOp(schema::OpKind::kAllGather, kAct, kFull, "h.0.attn"), zero,
               sendOp(kAct, 1, 0, "h.0.act")};
    bwd.ops = {recvOp(kGrad, 1, 1, "h.0.grad"),
               gatherOp(schema::OpKind::kReduceScatter, kFull, kAct)};
  } else {
    fwd.ops = {recvOp(kAct, 0, 0, "h.1.act"), gatherOp(schema::OpKind::kAllGather, kAct, kFull)};
    bwd.ops = {zero, gatherOp(schema::OpKind::kReduceScatter, kFull, kAct, "h.1.mlp"),
               sendOp(kGrad, 0, 1, "h.1.grad")};
  }
  opt.ops = {makeOp(schema::OpKind::kAllReduce, {{"x", {kW, kNorm}}},
                    {{"axis", std::string("dp")}, {"op", std::string("sum")}}, "grad sync"),
             makeOp(schema::OpKind::kAllReduce, {{"x", {kW}}},
                    {{"axis", std::string("tp")}, {"op", std::string("max")},
                     {"dtype", std::string("bf16")}})};
  p.subroutines = {fwd, bwd, opt};
  return p;
}

void addAction(rt::Program &p, int64_t subroutine, int64_t mb) {
  rt::Action a;
  a.subroutine = subroutine;
  a.microbatch = mb;
  p.actions.push_back(a);
}

/// GPipe: every forward, then every backward, then the optimizer.
rt::Plan pipelinePlan() {
  rt::Plan plan;
  rt::Manifest &man = plan.manifest;
  man.meshDp = 2, man.meshTp = 2, man.meshPp = 2;
  man.microbatches = kMicrobatches;
  rt::Mesh mesh = man.mesh();
  for (int64_t s = 0; s < 2; ++s) {
    rt::Manifest::ProgramRef ref;
    ref.file = "program-" + std::to_string(s) + ".json";
    ref.stage = s;
    for (int64_t r = 0; r < mesh.worldSize(); ++r)
      if (mesh.coord(r, rt::MeshAxis::kPp) == s)
        ref.ranks.push_back(r);
    man.programs.push_back(ref);
    rt::Program p = stageProgram(s);
    for (int64_t j = 0; j < kMicrobatches; ++j)
      addAction(p, kForward, j);
    for (int64_t j = 0; j < kMicrobatches; ++j)
      addAction(p, kBackward, j);
    addAction(p, kOptimizer, -1);
    plan.programs.push_back(std::move(p));
  }
  return plan;
}

/// An expected event, written out field by field.
struct Expected {
  EventKind kind;
  int64_t peer;
  std::vector<int64_t> members;
  std::string collective;
  int64_t count;
  std::string dtype;
  std::optional<int64_t> tag;
  std::string provenance;
};

/// The documented expansion, op by op and action by action, with the mesh's
/// arithmetic done by hand (Megatron order: tp fastest, then dp, then pp).
std::vector<std::vector<Expected>> expand(const rt::Plan &plan) {
  const int64_t tp = 2, dp = 2;
  auto rankOf = [&](int64_t d, int64_t t, int64_t s) { return (s * dp + d) * tp + t; };
  std::vector<std::vector<Expected>> out(8);
  for (int64_t s = 0; s < 2; ++s)
    for (int64_t d = 0; d < dp; ++d)
      for (int64_t t = 0; t < tp; ++t) {
        int64_t r = rankOf(d, t, s);
        const rt::Program &p = plan.programs[size_t(s)];
        for (size_t ai = 0; ai < p.actions.size(); ++ai) {
          const rt::Action &a = p.actions[ai];
          const rt::Subroutine &sub = p.subroutines[size_t(a.subroutine)];
          for (size_t oi = 0; oi < sub.ops.size(); ++oi) {
            const rt::Op &op = sub.ops[oi];
            std::string where = p.file + " action " + std::to_string(ai) + " (" + sub.name +
                                (a.microbatch >= 0 ? " mb " + std::to_string(a.microbatch) : "") +
                                ") op " + std::to_string(oi) + " " +
                                std::string(schema::opName(op.kind)) +
                                (op.loc.empty() ? "" : " (" + op.loc + ")");
            std::vector<int64_t> tpGroup = {rankOf(d, 0, s), rankOf(d, 1, s)};
            std::vector<int64_t> dpGroup = {rankOf(0, t, s), rankOf(1, t, s)};
            switch (op.kind) {
            case schema::OpKind::kAllGather:
              out[r].push_back({EventKind::Collective, -1, tpGroup, "all_gather", 8, "f32",
                                std::nullopt, where});
              break;
            case schema::OpKind::kReduceScatter:
              out[r].push_back({EventKind::Collective, -1, tpGroup, "reduce_scatter.sum", 16,
                                "f32", std::nullopt, where});
              break;
            case schema::OpKind::kAllReduce:
              if (op.stringAttr("axis") == "dp") {
                out[r].push_back({EventKind::Collective, -1, dpGroup, "all_reduce.sum", 12,
                                  "f32", std::nullopt, where});
                out[r].push_back({EventKind::Collective, -1, dpGroup, "all_reduce.sum", 1,
                                  "f64", std::nullopt, where});
              } else {
                out[r].push_back({EventKind::Collective, -1, tpGroup, "all_reduce.max", 12,
                                  "bf16", std::nullopt, where});
              }
              break;
            case schema::OpKind::kSend:
            case schema::OpKind::kRecv: {
              int64_t tag = op.intAttr("tag") * (kMicrobatches + 1) + a.microbatch + 1;
              out[r].push_back({op.kind == schema::OpKind::kSend ? EventKind::Send
                                                                 : EventKind::Recv,
                                rankOf(d, t, 1 - s), {}, "", 8, "f32", tag, where});
              break;
            }
            default:
              break;
            }
          }
        }
      }
  return out;
}

} // namespace

TEST(PlanComm, EventsAndProvenanceMatchTheDocumentedExpansion) {
  rt::Plan plan = pipelinePlan();
  CommPlan comm = commPlanOf(plan);
  std::vector<std::vector<Expected>> want = expand(plan);
  ASSERT_EQ(comm.world(), 8);
  for (int64_t r = 0; r < 8; ++r) {
    ASSERT_EQ(comm[r].size(), want[r].size()) << "rank " << r;
    for (size_t i = 0; i < want[r].size(); ++i) {
      const CommEvent &e = comm[r][i];
      const Expected &x = want[r][i];
      SCOPED_TRACE("rank " + std::to_string(r) + " event " + std::to_string(i));
      EXPECT_EQ(e.kind, x.kind);
      EXPECT_EQ(e.count, x.count);
      EXPECT_EQ(e.dtype.str(), x.dtype);
      EXPECT_EQ(e.tag, x.tag);
      EXPECT_EQ(comm.provenance(r, i), x.provenance);
      EXPECT_TRUE(e.provenance.empty()); // built on demand, not stored
      if (x.kind == EventKind::Collective) {
        EXPECT_EQ(e.members(), x.members);
        EXPECT_EQ(e.collective.str(), x.collective);
      } else {
        EXPECT_EQ(e.peer, x.peer);
      }
    }
  }
  // One shared member list per group: the tp group's every all-gather.
  EXPECT_EQ(comm[0][0].group.get(), comm[1][0].group.get());
  EXPECT_EQ(comm[0][0].group.get(), comm[0][2 * 30].group.get());
  EXPECT_TRUE(verifyPlan(plan).ok()) << verifyPlan(plan).str();
}

TEST(PlanComm, ProvenanceOutlivesThePlan) {
  CommPlan comm;
  {
    rt::Plan plan = pipelinePlan();
    comm = commPlanOf(plan);
  }
  EXPECT_EQ(comm.provenance(4, 2 * 47),
            "program-1.json action 47 (forward mb 47) op 0 recv (h.1.act)");
  EXPECT_EQ(comm.provenance(0, comm[0].size() - 1),
            "program-0.json action 96 (optimizer) op 1 all_reduce");
}

// Stage 0 waits for the first gradient after its 41st forward, before it sends
// the 42nd activation, which stage 1 waits for: a cycle 40 actions deep.
TEST(PlanComm, DeepDeadlockNamesActionMicrobatchAndOp) {
  rt::Plan plan = pipelinePlan();
  std::vector<rt::Action> &acts = plan.programs[0].actions;
  std::rotate(acts.begin() + 41, acts.begin() + kMicrobatches, acts.begin() + kMicrobatches + 1);
  ASSERT_EQ(acts[41].subroutine, kBackward);
  ASSERT_EQ(acts[41].microbatch, 0);
  VerifyResult res = verifyPlan(plan);
  ASSERT_EQ(res.errors.size(), 1u) << res.str();
  const VerifyError &e = res.errors[0];
  EXPECT_EQ(e.kind, ErrorKind::CyclicWait);
  // Tags: grad 1·49 + 0 + 1 = 50; act 0·49 + 41 + 1 = 42. Events: two per
  // action before (stage 0: all_gather, send; stage 1: recv, all_gather).
  EXPECT_EQ(e.message,
            "cyclic wait: rank 0 waits to recv 8 f32 from 4 (tag 50) at event 82 "
            "(program-0.json action 41 (backward mb 0) op 0 recv (h.0.grad)) while rank 4 "
            "waits to recv 8 f32 from 0 (tag 42) at event 82 (program-1.json action 41 "
            "(forward mb 41) op 0 recv (h.1.act))");
  ASSERT_EQ(e.events.size(), 2u);
  EXPECT_EQ(e.events[0], (EventRef{0, 82}));
  EXPECT_EQ(e.events[1], (EventRef{4, 82}));
  ASSERT_FALSE(e.notes.empty());
  EXPECT_EQ(e.notes[0],
            "rank 0 (" + std::to_string(4 * kMicrobatches + 3 - 82) +
                " events left) waits to recv 8 f32 from 4 (tag 50) at event 82 (program-0.json "
                "action 41 (backward mb 0) op 0 recv (h.0.grad)); rank 4 is at event 82: recv "
                "of 8 f32 from 0 (tag 42) (program-1.json action 41 (forward mb 41) op 0 recv "
                "(h.1.act))");
}

// Stage 1 runs the forwards of microbatches 37 and 38 in swapped order: its
// 38th receive takes microbatch 37's activation with microbatch 38's tag.
TEST(PlanComm, DeepMismatchNamesActionMicrobatchAndOp) {
  rt::Plan plan = pipelinePlan();
  std::swap(plan.programs[1].actions[37].microbatch, plan.programs[1].actions[38].microbatch);
  VerifyResult res = verifyPlan(plan);
  ASSERT_EQ(res.errors.size(), 1u) << res.str();
  const VerifyError &e = res.errors[0];
  EXPECT_EQ(e.kind, ErrorKind::SendRecvMismatch);
  ASSERT_EQ(e.events.size(), 2u);
  int64_t sender = e.events[0].rank, receiver = e.events[1].rank;
  EXPECT_LT(sender, 4);
  EXPECT_EQ(receiver, sender + 4);
  EXPECT_EQ(e.message,
            "send/recv mismatch (tags differ): rank " + std::to_string(sender) +
                " sends 8 f32 to " + std::to_string(receiver) +
                " (tag 38) at event 75 (program-0.json action 37 (forward mb 37) op 2 send "
                "(h.0.act)) but rank " +
                std::to_string(receiver) + " receives 8 f32 from " + std::to_string(sender) +
                " (tag 39) at event 74 (program-1.json action 37 (forward mb 38) op 0 recv "
                "(h.1.act))");
}

// One dp x tp replica of the pipeline stands for the whole mesh: the verdict
// is the simulation's of every rank, and the events are those of every rank
// (counted, here checked against the full expansion).
TEST(PlanComm, OneReplicaStandsForEveryRank) {
  rt::Plan plan = pipelinePlan();
  EXPECT_EQ(whyReplicasDiffer(plan), std::nullopt);
  PlanVerifyResult replica = verifyPlan(plan);
  ASSERT_TRUE(replica.ok()) << replica.str();
  EXPECT_EQ(replica.check, PlanCheck::Replica);
  EXPECT_EQ(replica.ranksSimulated, 2);
  EXPECT_EQ(replica.ranksCovered, 8);
  PlanVerifyResult all = verifyPlan(plan, 1, /*maxAxis=*/0);
  ASSERT_TRUE(all.ok()) << all.str();
  EXPECT_EQ(all.check, PlanCheck::AllRanks);
  EXPECT_EQ(all.ranksSimulated, 8);
  EXPECT_EQ(replica.eventsTotal, commPlanOf(plan).totalEvents());
  EXPECT_EQ(replica.eventsTotal, all.eventsTotal);
  EXPECT_EQ(replica.eventsCompleted, all.eventsCompleted);
  // The replica has no dp or tp collective: its events are the pp ranks'
  // sends and receives.
  CommPlan one = commPlanOf(plan, 1);
  ASSERT_EQ(one.world(), 2);
  for (int64_t r = 0; r < 2; ++r)
    for (const CommEvent &e : one[r])
      EXPECT_NE(e.kind, EventKind::Collective);
}

// The dp replica 1 of stage 0 runs a program without the gradient
// all-reduce over dp: the replica of dp = tp = 0 alone would pass, so the
// ranks that run another program send the check to the whole mesh, which
// finds the collective its dp peers wait in forever.
TEST(PlanComm, AReplicaThatRunsAnotherProgramIsSimulated) {
  rt::Plan plan = pipelinePlan();
  rt::Program other = plan.programs[0];
  other.file = "program-2.json";
  std::vector<rt::Op> &opt = other.subroutines[size_t(kOptimizer)].ops;
  ASSERT_EQ(opt[0].stringAttr("axis"), "dp");
  opt.erase(opt.begin());
  plan.programs.push_back(other);
  rt::Manifest &man = plan.manifest;
  rt::Mesh mesh = man.mesh();
  rt::Manifest::ProgramRef ref = man.programs[0];
  ref.file = other.file;
  ref.ranks.clear();
  std::vector<int64_t> &stage0 = man.programs[0].ranks;
  for (auto it = stage0.begin(); it != stage0.end();)
    if (mesh.coord(*it, rt::MeshAxis::kDp) == 1) {
      ref.ranks.push_back(*it);
      it = stage0.erase(it);
    } else {
      ++it;
    }
  ASSERT_EQ(ref.ranks.size(), 2u);
  man.programs.push_back(ref);
  std::optional<std::string> why = whyReplicasDiffer(plan);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("runs program 2 but rank"), std::string::npos) << *why;
  EXPECT_TRUE(verifyCommPlan(commPlanOf(plan, 1)).ok()); // the replica alone
  PlanVerifyResult res = verifyPlan(plan);
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.check, PlanCheck::AllRanks); // dp, tp <= 4: every rank
  EXPECT_EQ(res.errors[0].kind, ErrorKind::CollectiveSkipped) << res.str();
}

// A send along tp leaves the replica (its peer is in another one).
TEST(PlanComm, ASendAlongTpIsNotReplicated) {
  rt::Plan plan = pipelinePlan();
  rt::Op &send = plan.programs[0].subroutines[size_t(kForward)].ops[2];
  ASSERT_EQ(send.kind, schema::OpKind::kSend);
  send.attrs["axis"] = std::string("tp");
  std::optional<std::string> why = whyReplicasDiffer(plan);
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(*why, "program-0.json forward op 2 send is along tp, not pp");
  EXPECT_NE(verifyPlan(plan).check, PlanCheck::Replica);
}
