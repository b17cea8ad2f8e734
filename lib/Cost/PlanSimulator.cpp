//===- PlanSimulator.cpp - the predicted timeline of a compiled plan ------===//
//
// See PlanSimulator.h and docs/cost-model.md "Simulating a plan".
//
//===----------------------------------------------------------------------===//
#include "llcdist/Cost/PlanSimulator.h"

#include "llcdist/runtime/Plan.h"
#include "llcdist/runtime/Timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <sstream>

using namespace llcdist;
using namespace llcdist::cost;
using rt::schema::OpKind;

const char *cost::opCostRuleName(OpCostRule r) {
  switch (r) {
  case OpCostRule::Gemm:
    return "gemm";
  case OpCostRule::Attention:
    return "attention";
  case OpCostRule::Collective:
    return "collective";
  case OpCostRule::P2P:
    return "p2p";
  case OpCostRule::Launch:
    return "launch";
  case OpCostRule::Free:
    return "free";
  case OpCostRule::Memory:
    return "memory";
  }
  return "?";
}

namespace {

/// The rank a send or recv of `rank` talks to (rt::Op::peerCoordinate).
int64_t peerRank(const rt::Mesh &mesh, int64_t rank, const rt::Op &op) {
  auto axis = rt::parseMeshAxis(op.stringAttr("axis"));
  if (!axis)
    return rank;
  return mesh.withCoord(rank, *axis, op.peerCoordinate(mesh.coord(rank, *axis), mesh.axisSize(*axis)));
}

MeshSpec meshSpecOf(const rt::Manifest &m) {
  MeshSpec s;
  s.dp = m.meshDp;
  s.tp = m.meshTp;
  s.pp = m.meshPp;
  s.cp = m.meshCp;
  s.ep = m.meshEp; // expert parallelism: the "ep" and "edp" groups
  s.rankOrder.clear();
  for (rt::MeshAxis a : m.rankOrder)
    if (a != rt::MeshAxis::kCp || s.cp > 1) // a mesh without cp names three axes
      s.rankOrder.push_back(std::string(rt::meshAxisName(a)));
  return s;
}

const rt::BufferDesc &buffer(const rt::Program &p, int64_t id) { return p.buffers[size_t(id)]; }

/// Expert parallelism's exchange (docs/plan-format.md "all_to_all_v").
bool isAllToAllV(const rt::Op &op) { return op.kind == rt::schema::OpKind::kAllToAllV; }

/// BF16 when the op's first argument buffer is bf16 (the precision its GEMM
/// or attention kernel runs in), else F32.
Precision precisionOf(const rt::Program &p, const rt::Op &op) {
  for (const std::vector<int64_t> &ids : op.args)
    if (!ids.empty())
      return buffer(p, ids.front()).dtype == rt::schema::ElemType::kBF16 ? Precision::BF16
                                                                         : Precision::F32;
  return Precision::F32;
}

/// The bytes a collective moves per element of buffer `b`: 2 with attr
/// dtype "bf16", 8 for an f64 partial reduction, else 4 (f32 and bf16
/// buffers both move f32: docs/plan-format.md "Collective dtypes").
double commBytes(const rt::Op &op, const rt::BufferDesc &b) {
  auto it = op.attrs.find("dtype");
  bool bf16 = it != op.attrs.end() && std::get_if<std::string>(&it->second) &&
              std::get<std::string>(it->second) == "bf16";
  double elem = bf16 ? 2 : b.dtype == rt::schema::ElemType::kF64 ? 8 : 4;
  return elem * double(b.numel());
}

} // namespace

//===----------------------------------------------------------------------===//
// The per-op cost table. One switch, one rule per op kind: the analytic
// step model (StepModel.cpp) prices the same ops with the same calls.
//
//   op kind                                   rule        cost
//   linear_fwd, linear_bwd_input,             Gemm        gemmSeconds(M, N, K, p)
//     linear_bwd_weight
//   classifier                                Gemm        Σ_chunks 3·gemmSeconds(rows, N, K, p)
//                                                         + memorySeconds(4 passes over the logits)
//   attention_fwd / attention_bwd,            Attention   attentionSeconds(B, S, nh, hd, bwd, p)
//     attention_block_fwd / _bwd (per step)
//   all_reduce                                Collective  Σ_x collectiveSeconds(AR, bytes(x), G)
//   all_gather                                Collective  collectiveSeconds(AG, bytes(y), G)
//   reduce_scatter                            Collective  collectiveSeconds(RS, bytes(x), G)
//   all_to_all_v                              Collective  collectiveSeconds(A2A, bytes(min(x, y)), G over ep):
//                                                         the rank's own T·k rows (the volume is
//                                                         data-dependent; the other buffer is the
//                                                         worst case)
//   send / recv                               P2P         p2pSeconds(bytes, peer on another node)
//   load_microbatch                           Launch      launchSeconds
//   wait                                      Free        0
//   everything else (moe_chunk_transpose, ...) Memory     memorySeconds(Σ bytes of its buffers)
//
// p: BF16 when the first argument buffer is bf16; G: axisGroup(mesh, axis)
// (group_size g: g members, at most as many per node).
//===----------------------------------------------------------------------===//
OpCost cost::planOpCost(const Hardware &hw, const rt::Manifest &manifest,
                        const rt::Program &program, const rt::Op &op, int64_t rank) {
  OpCost c;
  auto group = [&](const std::string &axis) {
    Group g = axisGroup(meshSpecOf(manifest), axis, hw.topology);
    if (int64_t gs = op.intAttr("group_size", 0); gs > 0 && gs < g.size) {
      g.size = gs;
      g.perNode = std::min(g.perNode, gs);
    }
    return g;
  };
  switch (op.kind) {
  case OpKind::kLinearFwd:
  case OpKind::kLinearBwdInput:
  case OpKind::kLinearBwdWeight: {
    int64_t m = op.intAttr("M"), n = op.intAttr("N"), k = op.intAttr("K");
    c.rule = OpCostRule::Gemm;
    c.flops = 2.0 * double(m) * double(n) * double(k);
    c.seconds = gemmSeconds(hw, m, n, k, precisionOf(program, op));
    return c;
  }
  case OpKind::kClassifier: {
    // Per chunk: the LM head's GEMM, the input- and weight-gradient GEMMs;
    // the logits written by the first, read twice and written once by the
    // loss and its gradient (the chunk's own pass over them).
    const int64_t m = op.intAttr("M"), n = op.intAttr("N"), k = op.intAttr("K"),
                  chunk = std::max<int64_t>(1, op.intAttr("chunk"));
    const Precision p = precisionOf(program, op);
    c.rule = OpCostRule::Gemm;
    c.flops = 6.0 * double(m) * double(n) * double(k);
    for (int64_t r = 0; r < m; r += chunk)
      c.seconds += 3 * gemmSeconds(hw, std::min(chunk, m - r), n, k, p);
    const rt::BufferDesc &logits = buffer(program, op.arg("logits"));
    c.bytes = 4.0 * double(m) * double(n) * double(logits.bytes) / double(std::max<int64_t>(1, logits.numel()));
    c.seconds += memorySeconds(hw, c.bytes);
    return c;
  }
  case OpKind::kAttentionFwd:
  case OpKind::kAttentionBwd:
  case OpKind::kAttentionBlockFwd:
  case OpKind::kAttentionBlockBwd: {
    // A ring step's block: the load-balanced layout makes every step's
    // visible share of its S x S scores one half, as the causal diagonal's.
    int64_t b = op.intAttr("B"), s = op.intAttr("S"), nh = op.intAttr("nh"),
            hd = op.intAttr("hd");
    bool bwd = op.kind == OpKind::kAttentionBwd || op.kind == OpKind::kAttentionBlockBwd;
    c.rule = OpCostRule::Attention;
    c.flops = (bwd ? 8.0 : 4.0) * double(b) * double(s) * double(s) * double(nh) * double(hd);
    c.seconds = attentionSeconds(hw, b, s, nh, hd, bwd, precisionOf(program, op));
    return c;
  }
  case OpKind::kAllReduce:
  case OpKind::kAllGather:
  case OpKind::kReduceScatter:
  case OpKind::kAllToAll: {
    c.rule = OpCostRule::Collective;
    c.axis = op.stringAttr("axis");
    Group g = group(c.axis);
    if (op.kind == OpKind::kAllToAll) { // each rank's x, (n-1)/n of it leaving
      c.bytes = commBytes(op, buffer(program, op.arg("x")));
      c.seconds = collectiveSeconds(hw, Collective::AllToAll, c.bytes, g);
      return c;
    }
    if (op.kind == OpKind::kAllReduce) {
      for (int64_t id : op.argList("x")) { // one collective per buffer
        double bytes = commBytes(op, buffer(program, id));
        c.bytes += bytes;
        c.seconds += collectiveSeconds(hw, Collective::AllReduce, bytes, g);
      }
      return c;
    }
    bool gather = op.kind == OpKind::kAllGather;
    c.bytes = commBytes(op, buffer(program, op.arg(gather ? "y" : "x")));
    c.seconds = collectiveSeconds(hw, gather ? Collective::AllGather : Collective::ReduceScatter,
                                  c.bytes, g);
    return c;
  }
  case OpKind::kSend:
  case OpKind::kRecv: {
    c.rule = OpCostRule::P2P;
    c.axis = op.stringAttr("axis");
    c.bytes = double(buffer(program, op.arg(op.kind == OpKind::kSend ? "x" : "y")).bytes);
    int64_t peer = peerRank(manifest.mesh(), rank, op);
    int64_t perNode = std::max<int64_t>(1, hw.topology.gpusPerNode);
    c.seconds = p2pSeconds(hw, c.bytes, rank / perNode != peer / perNode);
    return c;
  }
  case OpKind::kLoadMicrobatch:
    c.rule = OpCostRule::Launch;
    c.seconds = launchSeconds(hw);
    return c;
  case OpKind::kWait:
    c.rule = OpCostRule::Free;
    return c;
  default:
    break;
  }
  if (isAllToAllV(op)) {
    // Expert parallelism's dispatch or combine over the ep group (its n
    // members: send_splits holds n × c counts). The volume is data-dependent
    // (the router's choices). What is fixed: the dispatch sends exactly its
    // x (the rank's T·k token rows) and the combine receives exactly its y
    // (the same rows home), and over the group every row sent is received,
    // so a rank moves T·k rows on average either way; the other buffer is
    // the worst case the static plan holds (C = ep·T·min(k, E/ep) rows,
    // every token routed to this rank's experts), which only a skewed
    // router fills. Priced: the smaller of x and y, (n−1)/n of it leaving
    // the rank as for all_to_all (uniform routing, the step model's
    // assumption); x alone would charge the combine its worst case (4× at
    // Mixtral's ep = 8).
    c.rule = OpCostRule::Collective;
    c.axis = op.stringAttr("axis");
    MeshSpec mesh = meshSpecOf(manifest);
    const int64_t perMember = std::max<int64_t>(1, op.intAttr("c", 1));
    mesh.ep = std::max<int64_t>(1, buffer(program, op.arg("send_splits")).numel() / perMember);
    Group g = axisGroup(mesh, c.axis, hw.topology);
    const rt::BufferDesc &x = buffer(program, op.arg("x")), &y = buffer(program, op.arg("y"));
    c.bytes = commBytes(op, x.numel() <= y.numel() ? x : y);
    c.seconds = collectiveSeconds(hw, Collective::AllToAll, c.bytes, g);
    return c;
  }
  c.rule = OpCostRule::Memory;
  for (const std::vector<int64_t> &ids : op.args)
    for (int64_t id : ids)
      c.bytes += double(buffer(program, id).bytes);
  c.seconds = memorySeconds(hw, c.bytes);
  return c;
}

//===----------------------------------------------------------------------===//
// The simulation.
//===----------------------------------------------------------------------===//
namespace {

constexpr double kUnset = -1;

/// One op in a stage's execution order (actions in order, each its
/// subroutine's ops) and what the simulation learned of it.
struct Exec {
  const rt::Op *op = nullptr;
  int64_t action = 0, subroutine = 0, index = 0, microbatch = -1;
  OpCost cost;
  bool issued = false, resolved = false;
  double issue = kUnset, start = kUnset, end = kUnset;
  double peerWait = 0; ///< of [start, end]: waiting for another stage
  int64_t seq = -1;    ///< the n-th send/recv of its (sender, receiver) pair, or pp collective
  int64_t peerStage = -1;
  size_t waitFor = 0; ///< a wait: the op that started its token
};

struct Lane {
  std::deque<size_t> pending; ///< issued, not yet resolved, in issue order
  double free = 0;
};

struct Stage {
  const rt::Program *program = nullptr;
  int64_t index = 0, rank = 0;
  std::vector<Exec> ops;
  size_t pc = 0;
  double t = 0; ///< the compute lane's clock
  std::vector<Lane> lanes;
  std::map<std::string, double> commFree; ///< each axis' communicator
  std::map<int64_t, size_t> tokens;       ///< token -> the op that started it
  std::map<int64_t, int64_t> sendSeq, recvSeq; ///< per peer stage
  int64_t ppSeq = 0;
  StageSim sim;
  std::map<std::string, AxisCommSim> comm;
  rt::Timeline timeline;
  bool done() const {
    if (pc < ops.size())
      return false;
    for (const Lane &l : lanes)
      if (!l.pending.empty())
        return false;
    return true;
  }
};

class StepSimulation {
public:
  StepSimulation(const rt::Plan &plan, const Hardware &hw) : plan(plan), hw(hw) {}
  std::optional<std::string> run(const SimOptions &options, PlanSimResult &out);

private:
  const rt::Plan &plan;
  const Hardware &hw;
  std::vector<Stage> stages;
  /// sendStart[{from, to}][seq]: when that send started (kUnset: not yet).
  std::map<std::pair<int64_t, int64_t>, std::vector<double>> sendStart;
  /// ppArrival[seq][stage]: when the stage reached its seq-th pp collective.
  std::vector<std::vector<double>> ppArrival;

  bool isPpCollective(const Exec &e) const {
    return rt::schema::isCollective(e.op->kind) && e.cost.axis == "pp" &&
           plan.manifest.meshPp > 1;
  }
  void issue(Stage &s, size_t i);
  bool tryResolve(Stage &s, size_t i, double earliest);
  void block(Stage &s, const Exec &e, double from);
  void record(Stage &s, const Exec &e, double start, double end, bool comm);
  bool advance(Stage &s);
  std::string describe(const Stage &s, const Exec &e) const;
  std::string blockedOn(const Stage &s, const Exec &e) const;
};

std::string StepSimulation::describe(const Stage &s, const Exec &e) const {
  const rt::Subroutine &sub = s.program->subroutines[size_t(e.subroutine)];
  std::string what = std::string(rt::schema::opName(e.op->kind));
  if (rt::schema::isPointToPoint(e.op->kind))
    what += " " + std::string(e.op->kind == OpKind::kSend ? "to" : "from") + " stage " +
            std::to_string(e.peerStage) + ", tag " + std::to_string(e.op->intAttr("tag"));
  else if (e.op->kind == OpKind::kWait)
    what += " for token " + std::to_string(e.op->token);
  else if (!e.cost.axis.empty())
    what += " over " + e.cost.axis;
  return s.program->file + ": subroutines[" + std::to_string(e.subroutine) + "].ops[" +
         std::to_string(e.index) + "] (" + what + ", subroutine '" + sub.name + "', action " +
         std::to_string(e.action) + ")";
}

std::string StepSimulation::blockedOn(const Stage &s, const Exec &e) const {
  if (e.op->kind == OpKind::kRecv)
    return "its send from stage " + std::to_string(e.peerStage) + " (message " +
           std::to_string(e.seq) + " of that pair) is never issued";
  if (isPpCollective(e)) {
    std::string missing;
    if (size_t(e.seq) < ppArrival.size())
      for (size_t k = 0; k < stages.size(); ++k)
        if (ppArrival[size_t(e.seq)][k] == kUnset)
          missing += (missing.empty() ? "" : ", ") + std::to_string(k);
    return "stages " + missing + " never reach their pp collective " + std::to_string(e.seq);
  }
  if (e.op->kind == OpKind::kWait)
    return "the op it waits for, " + describe(s, s.ops[e.waitFor]) + ", never ends";
  return "an earlier op of its queue never ends";
}

void StepSimulation::issue(Stage &s, size_t i) {
  Exec &e = s.ops[i];
  if (e.issued)
    return;
  e.issued = true;
  e.issue = s.t;
  if (e.op->startsAsync())
    s.tokens[e.op->token] = i;
  if (e.op->kind == OpKind::kWait)
    e.waitFor = s.tokens.at(e.op->token);
  if (rt::schema::isPointToPoint(e.op->kind)) {
    bool send = e.op->kind == OpKind::kSend;
    e.seq = (send ? s.sendSeq : s.recvSeq)[e.peerStage]++;
    if (send) {
      std::vector<double> &v = sendStart[{s.index, e.peerStage}];
      if (v.size() <= size_t(e.seq))
        v.resize(size_t(e.seq) + 1, kUnset);
    }
  } else if (isPpCollective(e)) {
    e.seq = s.ppSeq++;
    if (ppArrival.size() <= size_t(e.seq))
      ppArrival.resize(size_t(e.seq) + 1, std::vector<double>(stages.size(), kUnset));
  }
}

/// Resolves op i once it can start no earlier than `earliest` (its issue
/// point and its lane); false while it waits for another stage.
bool StepSimulation::tryResolve(Stage &s, size_t i, double earliest) {
  Exec &e = s.ops[i];
  const bool coll = rt::schema::isCollective(e.op->kind);
  if (coll)
    earliest = std::max(earliest, s.commFree[e.cost.axis]);
  double start = earliest, end = earliest + e.cost.seconds;
  if (e.op->kind == OpKind::kWait) { // a wait on a queue other than compute
    const Exec &started = s.ops[e.waitFor];
    if (!started.resolved)
      return false;
    end = std::max(earliest, started.end);
  } else if (e.op->kind == OpKind::kSend) {
    sendStart[{s.index, e.peerStage}][size_t(e.seq)] = start;
  } else if (e.op->kind == OpKind::kRecv) {
    auto it = sendStart.find({e.peerStage, s.index});
    if (it == sendStart.end() || it->second.size() <= size_t(e.seq) ||
        it->second[size_t(e.seq)] == kUnset)
      return false;
    double sent = it->second[size_t(e.seq)];
    e.peerWait = std::max(0.0, sent - earliest);
    end = std::max(earliest, sent) + e.cost.seconds;
  } else if (isPpCollective(e)) {
    std::vector<double> &arrival = ppArrival[size_t(e.seq)];
    if (arrival[size_t(s.index)] == kUnset)
      arrival[size_t(s.index)] = earliest;
    double all = 0;
    for (double a : arrival) {
      if (a == kUnset)
        return false;
      all = std::max(all, a);
    }
    e.peerWait = all - earliest;
    end = all + e.cost.seconds;
  }
  e.resolved = true;
  e.start = start;
  e.end = end;
  if (coll)
    s.commFree[e.cost.axis] = end;
  if (!e.cost.axis.empty())
    s.comm[e.cost.axis].total += e.cost.seconds;
  if (e.op->kind != OpKind::kWait)
    record(s, e, start, end, true);
  return true;
}

/// Compute was blocked from `from` until e ended: the last cost.seconds of
/// it are e's transfer (exposed communication), the peerWait before that
/// waiting for another stage (bubble), anything earlier its queue's
/// earlier communication (exposed, on e's axis).
void StepSimulation::block(Stage &s, const Exec &e, double from) {
  double b = std::max(0.0, e.end - from);
  if (b <= 0)
    return;
  double d = e.cost.seconds;
  double transfer = std::min(b, d);
  double peer = std::min(std::max(0.0, b - d), e.peerWait);
  double queued = std::max(0.0, b - d - e.peerWait);
  double exposed = transfer + queued;
  (void)peer; // counted as bubble: idle − exposed
  if (!e.cost.axis.empty())
    s.comm[e.cost.axis].exposed += exposed;
  s.sim.exposedCommSeconds += exposed;
}

void StepSimulation::record(Stage &s, const Exec &e, double start, double end, bool comm) {
  const rt::Subroutine &sub = s.program->subroutines[size_t(e.subroutine)];
  rt::TimelineEvent ev{rt::schema::opName(e.op->kind),
                       comm ? rt::TraceLane::kCommunication : rt::TraceLane::kCompute,
                       int64_t(std::llround(start * 1e9)),
                       int64_t(std::llround(end * 1e9)),
                       &e.op->loc,
                       &sub.name,
                       0,
                       e.microbatch,
                       e.action,
                       int(e.op->queue)};
  s.timeline.record(ev);
}

bool StepSimulation::advance(Stage &s) {
  bool progress = false;
  for (;;) {
    // The queues other than compute: their heads, in issue order.
    for (size_t q = 1; q < s.lanes.size(); ++q) {
      Lane &lane = s.lanes[q];
      while (!lane.pending.empty()) {
        size_t i = lane.pending.front();
        if (!tryResolve(s, i, std::max(s.ops[i].issue, lane.free)))
          break;
        lane.free = s.ops[i].end;
        lane.pending.pop_front();
        progress = true;
      }
    }
    if (s.pc >= s.ops.size())
      return progress;
    size_t i = s.pc;
    Exec &e = s.ops[i];
    const rt::Op &op = *e.op;
    if (!rt::schema::communicates(op.kind) && op.kind != OpKind::kWait) { // a kernel
      e.issued = e.resolved = true;
      e.issue = e.start = s.t;
      e.end = s.t + e.cost.seconds;
      s.sim.busySeconds += e.cost.seconds;
      s.sim.flops += e.cost.flops;
      if (op.kind != OpKind::kLoadMicrobatch) // as the runtime's trace
        record(s, e, e.start, e.end, false);
      s.t = e.end;
      ++s.pc;
      progress = true;
      continue;
    }
    if (op.kind == OpKind::kWait && op.queue == 0) {
      issue(s, i);
      const Exec &started = s.ops[e.waitFor];
      if (!started.resolved)
        return progress;
      e.issued = e.resolved = true;
      e.issue = e.start = s.t;
      e.end = std::max(s.t, started.end);
      block(s, started, s.t);
      if (e.end > s.t)
        record(s, e, s.t, e.end, false);
      s.t = e.end;
      ++s.pc;
      progress = true;
      continue;
    }
    if (op.queue != 0) { // started on its queue (a token), or a wait there
      if (!e.issued) {
        issue(s, i);
        s.lanes[size_t(op.queue)].pending.push_back(i);
        progress = true;
      }
      if (op.startsAsync() || op.kind == OpKind::kWait) {
        ++s.pc;
        continue;
      }
      // Synchronous on another queue: compute waits for it.
      if (!e.resolved)
        return progress;
      block(s, e, s.t);
      s.t = std::max(s.t, e.end);
      ++s.pc;
      continue;
    }
    // Synchronous communication on compute (a token on compute starts it
    // there: compute runs it in order and goes on once it is issued).
    issue(s, i);
    if (!tryResolve(s, i, s.t))
      return progress;
    if (op.startsAsync()) {
      // Started on compute: the compute queue runs it, so later compute
      // work is ordered after it.
      block(s, e, s.t);
      s.t = std::max(s.t, e.end);
    } else {
      block(s, e, s.t);
      s.t = e.end;
    }
    ++s.pc;
    progress = true;
  }
}

std::optional<std::string> StepSimulation::run(const SimOptions &options, PlanSimResult &out) {
  const rt::Manifest &man = plan.manifest;
  if (!hw.device.cost || !hw.topology.cost)
    return std::string("the hardware has no cost objects (load it with cost::loadHardware)");
  stages.resize(plan.programs.size());
  rt::Mesh mesh = man.mesh();
  for (size_t k = 0; k < plan.programs.size(); ++k) {
    Stage &s = stages[k];
    s.program = &plan.programs[k];
    s.index = int64_t(k);
    const std::vector<int64_t> &ranks = man.programs[k].ranks;
    s.rank = ranks.empty() ? 0 : *std::min_element(ranks.begin(), ranks.end());
    s.sim.stage = s.index;
    s.sim.rank = s.rank;
    s.sim.ranks = int64_t(ranks.size());
    s.lanes.resize(s.program->queues.size());
    s.timeline.setQueues(s.program->queues);
    // Each (subroutine, op) is priced once: the same op costs the same in
    // every action.
    std::vector<std::vector<OpCost>> costs(s.program->subroutines.size());
    for (size_t a = 0; a < s.program->actions.size(); ++a) {
      const rt::Action &act = s.program->actions[a];
      const rt::Subroutine &sub = s.program->subroutines[size_t(act.subroutine)];
      std::vector<OpCost> &c = costs[size_t(act.subroutine)];
      if (c.empty())
        for (const rt::Op &op : sub.ops)
          c.push_back(planOpCost(hw, man, *s.program, op, s.rank));
      for (size_t j = 0; j < sub.ops.size(); ++j) {
        Exec e;
        e.op = &sub.ops[j];
        e.action = int64_t(a);
        e.subroutine = act.subroutine;
        e.index = int64_t(j);
        e.microbatch = act.microbatch;
        e.cost = c[j];
        if (rt::schema::isPointToPoint(e.op->kind)) {
          e.peerStage = man.programOfRank(peerRank(mesh, s.rank, *e.op));
        }
        s.ops.push_back(e);
      }
    }
  }
  for (;;) {
    bool progress = false, done = true;
    for (Stage &s : stages) {
      progress |= advance(s);
      done &= s.done();
    }
    if (done)
      break;
    if (progress)
      continue;
    std::string msg = plan.dir + ": the simulated step cannot finish: a cyclic wait between "
                                 "stages (llc-dist verify names the ranks):";
    for (const Stage &s : stages) {
      if (s.done())
        continue;
      const Exec *blocked = nullptr;
      if (s.pc < s.ops.size())
        blocked = &s.ops[s.pc];
      for (size_t q = 1; !blocked && q < s.lanes.size(); ++q)
        if (!s.lanes[q].pending.empty())
          blocked = &s.ops[s.lanes[q].pending.front()];
      if (blocked && blocked->op->kind == OpKind::kWait && blocked->op->queue == 0) {
        const Exec &started = s.ops[blocked->waitFor];
        msg += "\n  stage " + std::to_string(s.index) + " waits at " + describe(s, *blocked) +
               " for " + describe(s, started) + ", where " + blockedOn(s, started);
      } else if (blocked) {
        msg += "\n  stage " + std::to_string(s.index) + " is blocked at " +
               describe(s, *blocked) + ": " + blockedOn(s, *blocked);
      }
    }
    return msg;
  }

  PlanSimResult r;
  r.device = hw.device.id.empty() ? hw.device.name : hw.device.id;
  r.topology = hw.topology.name;
  r.worldSize = man.worldSize();
  r.globalBatch = man.globalBatch;
  r.seqLen = man.seqLen;
  for (Stage &s : stages) {
    double end = s.t;
    for (const Exec &e : s.ops)
      end = std::max(end, e.end);
    s.sim.endSeconds = end;
    r.stepSeconds = std::max(r.stepSeconds, end);
  }
  for (const char *axis : {"dp", "tp", "pp"})
    r.comm[axis] = AxisCommSim{};
  double bubbleSum = 0;
  for (Stage &s : stages) {
    s.sim.idleSeconds = std::max(0.0, r.stepSeconds - s.sim.busySeconds);
    s.sim.bubbleSeconds = std::max(0.0, s.sim.idleSeconds - s.sim.exposedCommSeconds);
    bubbleSum += s.sim.bubbleSeconds;
    r.executedFlops += s.sim.flops * double(s.sim.ranks);
    for (const auto &[axis, c] : s.comm) {
      r.comm[axis].total += c.total;
      r.comm[axis].exposed += c.exposed;
    }
    r.stages.push_back(s.sim);
  }
  r.bubbleSeconds = stages.empty() ? 0 : bubbleSum / double(stages.size());
  if (r.stepSeconds > 0) {
    r.bubbleFraction = r.bubbleSeconds / r.stepSeconds;
    r.tokensPerSecond = double(man.globalBatch) * double(man.seqLen) / r.stepSeconds;
  }
  Precision p = man.modelDtype == rt::schema::ElemType::kBF16 ? Precision::BF16 : Precision::F32;
  r.peakFlopsPerGpu = peakFlops(hw, p);
  double capacity = r.stepSeconds * double(r.worldSize) * r.peakFlopsPerGpu;
  if (capacity > 0) {
    r.hfu = r.executedFlops / capacity;
    if (options.modelFlopsPerStep)
      r.modelFlops = options.modelFlopsPerStep;
    else if (options.modelFlopsPerToken)
      r.modelFlops = *options.modelFlopsPerToken * double(man.globalBatch) * double(man.seqLen);
    if (r.modelFlops)
      r.mfu = *r.modelFlops / capacity;
  }
  if (options.trace) {
    std::vector<const rt::Timeline *> ranks(size_t(std::max<int64_t>(r.worldSize, 1)), nullptr);
    for (const Stage &s : stages)
      if (size_t(s.rank) < ranks.size())
        ranks[size_t(s.rank)] = &s.timeline;
    r.traceJson = rt::renderChromeTrace(ranks);
  }
  out = std::move(r);
  return std::nullopt;
}

std::string fmtSeconds(double s) {
  char buf[64];
  if (std::abs(s) < 1e-12) // rounding of total − exposed
    std::snprintf(buf, sizeof buf, "0 s");
  else if (s < 1e-3)
    std::snprintf(buf, sizeof buf, "%.2f us", s * 1e6);
  else if (s < 1)
    std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.3f s", s);
  return buf;
}

} // namespace

std::optional<std::string> cost::simulatePlan(const rt::Plan &plan, const Hardware &hw,
                                              const SimOptions &options, PlanSimResult &out) {
  StepSimulation sim(plan, hw);
  return sim.run(options, out);
}

std::optional<std::string> cost::simulatePlan(const std::string &planDir, const Hardware &hw,
                                              const SimOptions &options, PlanSimResult &out) {
  auto plan = rt::loadPlan(planDir);
  if (!plan.isOk())
    return plan.status().toString();
  return simulatePlan(plan.value(), hw, options, out);
}

nlohmann::ordered_json PlanSimResult::toJson() const {
  using json = nlohmann::ordered_json;
  json stagesJson = json::array();
  for (const StageSim &s : stages)
    stagesJson.push_back({{"stage", s.stage},
                          {"rank", s.rank},
                          {"ranks", s.ranks},
                          {"busy_s", s.busySeconds},
                          {"idle_s", s.idleSeconds},
                          {"exposed_comm_s", s.exposedCommSeconds},
                          {"bubble_s", s.bubbleSeconds},
                          {"end_s", s.endSeconds}});
  json commJson = json::object();
  for (const auto &[axis, c] : comm)
    commJson[axis] = {{"total_s", c.total},
                      {"exposed_s", c.exposed},
                      {"overlapped_s", c.overlapped()}};
  return json{{"device", device},
              {"topology", topology},
              {"step_time_s", stepSeconds},
              {"tokens_per_s", tokensPerSecond},
              {"mfu", mfu ? json(*mfu) : json(nullptr)},
              {"hfu", hfu},
              {"model_flops_per_step", modelFlops ? json(*modelFlops) : json(nullptr)},
              {"executed_flops_per_step", executedFlops},
              {"peak_flops_per_gpu", peakFlopsPerGpu},
              {"world_size", worldSize},
              {"bubble_s", bubbleSeconds},
              {"bubble_fraction", bubbleFraction},
              {"stages", stagesJson},
              {"comm", commJson}};
}

std::string PlanSimResult::text(const std::string &indent) const {
  std::ostringstream os;
  char buf[256];
  std::snprintf(buf, sizeof buf, "step time %s, %.4g tokens/s on %lld GPUs (%s, %s)\n",
                fmtSeconds(stepSeconds).c_str(), tokensPerSecond, (long long)worldSize,
                device.c_str(), topology.c_str());
  os << indent << buf;
  if (mfu)
    std::snprintf(buf, sizeof buf, "MFU %.3g%%, HFU %.3g%% (of %.4g TFLOP/s per GPU)\n",
                  *mfu * 100, hfu * 100, peakFlopsPerGpu / 1e12);
  else
    std::snprintf(buf, sizeof buf,
                  "MFU n/a (no model FLOPs given), HFU %.3g%% (of %.4g TFLOP/s per GPU)\n",
                  hfu * 100, peakFlopsPerGpu / 1e12);
  os << indent << buf;
  std::snprintf(buf, sizeof buf, "pipeline bubble %s (%.1f%% of the step, mean over stages)\n",
                fmtSeconds(bubbleSeconds).c_str(), bubbleFraction * 100);
  os << indent << buf;
  std::snprintf(buf, sizeof buf, "  %-6s %-6s %12s %12s %12s %12s\n", "stage", "rank", "busy",
                "idle", "exposed comm", "bubble");
  os << indent << buf;
  for (const StageSim &s : stages) {
    std::snprintf(buf, sizeof buf, "  %-6lld %-6lld %12s %12s %12s %12s\n", (long long)s.stage,
                  (long long)s.rank, fmtSeconds(s.busySeconds).c_str(),
                  fmtSeconds(s.idleSeconds).c_str(), fmtSeconds(s.exposedCommSeconds).c_str(),
                  fmtSeconds(s.bubbleSeconds).c_str());
    os << indent << buf;
  }
  os << indent << "communication (summed over the stages):\n";
  for (const auto &[axis, c] : comm) {
    std::snprintf(buf, sizeof buf, "  %-3s total %12s  exposed %12s  overlapped %12s\n",
                  axis.c_str(), fmtSeconds(c.total).c_str(), fmtSeconds(c.exposed).c_str(),
                  fmtSeconds(c.overlapped()).c_str());
    os << indent << buf;
  }
  return os.str();
}
