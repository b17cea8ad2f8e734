//===- PlanComm.cpp - a plan's communication, for the verifier ------------===//
//
// A pipelined program runs each subroutine once per microbatch and chunk, so
// its events repeat: everything that does not depend on the action (which ops
// communicate, kinds, counts, dtypes, axes) is worked out once per
// subroutine, everything that depends on the rank (groups, peers) once per
// (rank, subroutine), and an action only copies that list and fills in its
// tags and origins. Provenance text is built only for the events a message
// names (CommPlan::describeOrigin).
//
//===----------------------------------------------------------------------===//
#include "llcdist/Verify/PlanComm.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

using namespace llcdist;
using namespace llcdist::verify;
namespace schema = llcdist::rt::schema;

namespace {
/// What every action of a subroutine issues for one communicating op (an
/// all_reduce issues one per buffer), before the rank fills in the group or
/// peer and the action the tag.
struct OpEvent {
  EventKind kind = EventKind::Send;
  /// Send/recv: the peer's axis.
  rt::MeshAxis axis = rt::MeshAxis::kDp;
  /// Collectives: the group's axes (one, or several: "dp+cp"), and
  /// all_reduce's group_size (0: the whole group).
  rt::AxisSet axes;
  int64_t groupSize = 0;
  /// Send/recv: the peer's coordinate on `axis`, and the op's tag; with
  /// `relative`, peer is an offset from the rank's coordinate instead (a
  /// ring's shift, kept signed so a mesh cut to fewer members keeps the
  /// ring: shift n - 1 is -1).
  int64_t peer = 0, tag = 0;
  bool relative = false;
  Name collective;
  int64_t count = 0;
  Name dtype;
  /// The op's index in its subroutine.
  int64_t op = 0;
};

/// What a collective moves (docs/plan-format.md "Collective dtypes"): its
/// `dtype` attr, f32 by default (bf16 buffers travel as f32 then); an f64
/// buffer (a kernel's partial reduction) always in f64.
Name collectiveDtype(const rt::Op &op, const rt::BufferDesc &b) {
  if (b.dtype == schema::ElemType::kF64)
    return "f64";
  return op.stringAttr(std::string(schema::kCommDTypeAttr)) == "bf16" ? "bf16" : "f32";
}

/// The communicating ops of `sub` on `mesh`, in op order. Collectives on an
/// axis of one rank are left out (nothing to wait for), and so are send/recv
/// ops the loader refuses (an unknown axis, a peer outside it). `full` is
/// the plan's mesh (a ring's shift is relative to its axis sizes).
std::vector<OpEvent> opEventsOf(const rt::Program &prog, const rt::Subroutine &sub, const rt::Mesh &mesh,
                                const rt::Mesh &full) {
  std::vector<OpEvent> out;
  for (size_t oi = 0; oi < sub.ops.size(); ++oi) {
    const rt::Op &op = sub.ops[oi];
    if (!schema::isCollective(op.kind) && !schema::isPointToPoint(op.kind))
      continue;
    auto axisOf = [&]() -> std::optional<rt::AxisSet> {
      if (!op.attrs.count("axis"))
        return std::nullopt;
      auto a = rt::parseAxisSet(op.stringAttr("axis"));
      if (!a || mesh.axisSize(*a) <= 1)
        return std::nullopt;
      return a;
    };
    OpEvent ev;
    ev.op = int64_t(oi);
    switch (op.kind) {
    case schema::OpKind::kAllReduce: {
      auto axis = axisOf();
      if (!axis)
        break;
      ev.kind = EventKind::Collective;
      ev.axes = *axis;
      // A sub-group of the axis (kv-head replicas); on a mesh cut to maxAxis
      // members one larger than the axis is the whole axis.
      ev.groupSize = op.attrs.count("group_size") ? op.intAttr("group_size") : 0;
      ev.collective = "all_reduce." + op.stringAttr("op");
      for (int64_t id : op.argList("x")) {
        ev.count = prog.buffers[id].numel();
        ev.dtype = collectiveDtype(op, prog.buffers[id]);
        out.push_back(ev);
      }
      break;
    }
    case schema::OpKind::kAllGather:
    case schema::OpKind::kReduceScatter:
    case schema::OpKind::kAllToAll:
    case schema::OpKind::kAllToAllV: {
      auto axis = axisOf();
      if (!axis)
        break;
      const rt::BufferDesc &x = prog.buffers[op.arg("x")];
      ev.kind = EventKind::Collective;
      ev.axes = *axis;
      ev.collective = op.kind == schema::OpKind::kAllGather   ? Name("all_gather")
                      : op.kind == schema::OpKind::kAllToAll  ? Name("all_to_all")
                      : op.kind == schema::OpKind::kAllToAllV ? Name("all_to_all_v")
                                                              : Name("reduce_scatter." + op.stringAttr("op"));
      // all_to_all_v: x's rows, the most it sends (the members' counts are
      // exchanged at run time; the static sizes must agree).
      ev.count = x.numel();
      ev.dtype = collectiveDtype(op, x);
      out.push_back(ev);
      break;
    }
    case schema::OpKind::kSend:
    case schema::OpKind::kRecv: {
      auto axis = rt::parseMeshAxis(op.stringAttr("axis"));
      if (!axis)
        break; // the loader refuses this
      const int64_t n = full.axisSize(*axis);
      ev.relative = op.attrs.count("shift") != 0;
      ev.peer = ev.relative ? op.intAttr("shift") : op.intAttr("peer");
      if (ev.relative ? ev.peer < 1 || ev.peer >= n : ev.peer < 0 || ev.peer >= mesh.axisSize(*axis))
        break; // the loader refuses this
      if (ev.relative && mesh.axisSize(*axis) <= 1)
        break; // a ring of one rank (the replica's): nothing to wait for
      if (ev.relative && 2 * ev.peer > n)
        ev.peer -= n;
      const rt::BufferDesc &b =
          prog.buffers[op.arg(op.kind == schema::OpKind::kSend ? "x" : "y")];
      ev.kind = op.kind == schema::OpKind::kSend ? EventKind::Send : EventKind::Recv;
      ev.axis = *axis;
      ev.tag = op.intAttr("tag");
      ev.count = b.numel();
      ev.dtype = std::string(schema::elemTypeName(b.dtype));
      out.push_back(ev);
      break;
    }
    default:
      break;
    }
  }
  return out;
}

/// One shared member list per distinct group of the plan.
class GroupPool {
public:
  explicit GroupPool(const rt::Mesh &mesh) : mesh(mesh) {}

  /// The ranks of `rank`'s group on `axis` (with `groupSize` > 0 its
  /// sub-group of that many consecutive members), sorted.
  Group get(int64_t rank, rt::AxisSet axis, int64_t groupSize) {
    std::vector<int> g = mesh.subGroup(rank, axis, groupSize);
    std::vector<int64_t> members(g.begin(), g.end());
    std::sort(members.begin(), members.end());
    auto it = groups.find(members);
    if (it == groups.end())
      it = groups
               .emplace(members, std::make_shared<const std::vector<int64_t>>(members))
               .first;
    return it->second;
  }

private:
  const rt::Mesh &mesh;
  std::map<std::vector<int64_t>, Group> groups;
};

/// `rank`'s events of one run of a subroutine: `ops` with the rank's groups
/// and peers; tags and origins are the action's (filled in per action).
std::vector<CommEvent> rankEventsOf(const std::vector<OpEvent> &ops, int64_t rank,
                                    const rt::Mesh &mesh, GroupPool &groups) {
  std::vector<CommEvent> out;
  out.reserve(ops.size());
  for (const OpEvent &op : ops) {
    CommEvent e;
    e.kind = op.kind;
    e.count = op.count;
    e.dtype = op.dtype;
    if (op.kind == EventKind::Collective) {
      e.collective = op.collective;
      e.group = groups.get(rank, op.axes, op.groupSize);
    } else {
      const int64_t n = mesh.axisSize(op.axis);
      e.peer = op.relative ? mesh.withCoord(rank, op.axis, ((mesh.coord(rank, op.axis) + op.peer) % n + n) % n)
                           : mesh.withCoord(rank, op.axis, op.peer);
    }
    out.push_back(std::move(e));
  }
  return out;
}

/// What provenance text needs, copied out of the plan so the CommPlan can
/// outlive it: per program its file, actions and, per subroutine, its name
/// and its communicating ops' index, name and loc.
struct Origins {
  struct OpRef {
    int64_t op = 0;
    std::string_view name;
    std::string loc;
  };
  struct SubroutineRef {
    std::string name;
    std::vector<OpRef> ops; ///< parallel to the subroutine's OpEvents
  };
  struct ProgramRef {
    std::string file;
    std::vector<rt::Action> actions;
    std::vector<SubroutineRef> subroutines;
  };
  std::vector<ProgramRef> programs;
  std::vector<int64_t> programOfRank; ///< ranks of the (possibly smaller) mesh

  /// An event's origin: its action, and the index of its OpEvent in the
  /// action's subroutine (below 2^32: a subroutine's ops).
  static int64_t encode(size_t action, size_t opEvent) {
    return int64_t(action) << 32 | int64_t(opEvent);
  }

  /// `program-S.json action A (SUBROUTINE mb M) op I NAME (loc)`.
  std::string describe(int64_t rank, int64_t origin) const {
    const ProgramRef &prog = programs[size_t(programOfRank[size_t(rank)])];
    size_t ai = size_t(origin >> 32), ei = size_t(origin & 0xffffffff); // see encode
    const rt::Action &action = prog.actions[ai];
    const SubroutineRef &sub = prog.subroutines[size_t(action.subroutine)];
    const OpRef &op = sub.ops[ei];
    std::string s = prog.file + " action " + std::to_string(ai) + " (" + sub.name;
    if (action.microbatch >= 0)
      s += " mb " + std::to_string(action.microbatch);
    s += ") op " + std::to_string(op.op) + " " + std::string(op.name);
    if (!op.loc.empty())
      s += " (" + op.loc + ")";
    return s;
  }
};
} // namespace

namespace {
/// `full` with dp, tp and cp capped at `maxAxis` (0: uncapped).
rt::Mesh cappedMesh(const rt::Mesh &full, int64_t maxAxis) {
  rt::Mesh mesh = full;
  if (maxAxis <= 0)
    return mesh;
  for (rt::MeshAxis a : {rt::MeshAxis::kDp, rt::MeshAxis::kTp, rt::MeshAxis::kCp})
    mesh.size[size_t(a)] = std::min(mesh.size[size_t(a)], maxAxis);
  // Expert parallelism's groups lie inside dp: a capped dp keeps whole ep
  // groups (a multiple of ep, at least one group), except for the replica
  // (maxAxis 1), whose one dp rank is an ep group of one.
  const int64_t dp = full.axisSize(rt::MeshAxis::kDp);
  if (maxAxis == 1)
    mesh.ep = 1;
  else if (full.ep > 1)
    mesh.size[size_t(rt::MeshAxis::kDp)] = std::min(dp, std::max(full.ep, maxAxis / full.ep * full.ep));
  return mesh;
}

/// Rank `r` of the plan's mesh `full` in `mesh` (a capped copy of it): the
/// rank with its coordinates, or none where a coordinate is past the cap.
std::optional<int64_t> rankIn(const rt::Mesh &full, const rt::Mesh &mesh, int64_t r) {
  int64_t small = 0;
  for (rt::MeshAxis a : {rt::MeshAxis::kDp, rt::MeshAxis::kTp, rt::MeshAxis::kPp, rt::MeshAxis::kCp}) {
    const int64_t c = full.coord(r, a);
    if (c >= mesh.axisSize(a))
      return std::nullopt;
    small += c * mesh.stride(a);
  }
  return small;
}

/// The communication events of every rank of `mesh` (a capped copy of the
/// plan's), counted without building them: a program's ranks each issue,
/// per action, its subroutine's communicating ops.
int64_t eventCount(const rt::Plan &plan, const rt::Mesh &mesh) {
  const rt::Mesh full = plan.manifest.mesh();
  int64_t total = 0;
  for (size_t pi = 0; pi < plan.programs.size(); ++pi) {
    const rt::Program &prog = plan.programs[pi];
    int64_t ranks = 0;
    for (int64_t r : plan.manifest.programs[pi].ranks)
      ranks += rankIn(full, mesh, r).has_value();
    std::vector<int64_t> perSub;
    for (const rt::Subroutine &sub : prog.subroutines)
      perSub.push_back(int64_t(opEventsOf(prog, sub, mesh, full).size()));
    int64_t perRank = 0;
    for (const rt::Action &action : prog.actions)
      perRank += perSub[size_t(action.subroutine)];
    total += ranks * perRank;
  }
  return total;
}
} // namespace

CommPlan llcdist::verify::commPlanOf(const rt::Plan &plan, int64_t maxAxis) {
  const rt::Manifest &man = plan.manifest;
  const rt::Mesh full = man.mesh(), mesh = cappedMesh(full, maxAxis);
  CommPlan out(mesh.worldSize());
  const int64_t m = std::max<int64_t>(1, man.microbatches);
  auto origins = std::make_shared<Origins>();
  origins->programOfRank.assign(size_t(mesh.worldSize()), -1);
  // The ranks of the (possibly smaller) mesh that run each program: those
  // whose coordinates a rank of the program has in the full mesh.
  std::vector<std::vector<int64_t>> ranksOf(plan.programs.size());
  for (size_t pi = 0; pi < plan.programs.size(); ++pi)
    for (int64_t r : man.programs[pi].ranks)
      if (std::optional<int64_t> small = rankIn(full, mesh, r)) {
        ranksOf[pi].push_back(*small);
        origins->programOfRank[size_t(*small)] = int64_t(pi);
      }
  GroupPool groups(mesh);
  for (size_t pi = 0; pi < plan.programs.size(); ++pi) {
    const rt::Program &prog = plan.programs[pi];
    std::vector<std::vector<OpEvent>> subOps;
    Origins::ProgramRef &ref = origins->programs.emplace_back();
    ref.file = prog.file;
    ref.actions = prog.actions;
    for (const rt::Subroutine &sub : prog.subroutines) {
      subOps.push_back(opEventsOf(prog, sub, mesh, full));
      Origins::SubroutineRef &subRef = ref.subroutines.emplace_back();
      subRef.name = sub.name;
      for (const OpEvent &ev : subOps.back()) {
        const rt::Op &op = sub.ops[size_t(ev.op)];
        subRef.ops.push_back({ev.op, schema::opName(op.kind), op.loc});
      }
    }
    size_t perRank = 0;
    for (const rt::Action &action : prog.actions)
      perRank += subOps[size_t(action.subroutine)].size();
    for (int64_t rank : ranksOf[pi]) {
      std::vector<std::vector<CommEvent>> subEvents;
      for (const std::vector<OpEvent> &ops : subOps)
        subEvents.push_back(rankEventsOf(ops, rank, mesh, groups));
      std::vector<CommEvent> &events = out[rank];
      events.reserve(events.size() + perRank);
      for (size_t ai = 0; ai < prog.actions.size(); ++ai) {
        const rt::Action &action = prog.actions[ai];
        const std::vector<OpEvent> &ops = subOps[size_t(action.subroutine)];
        const std::vector<CommEvent> &run = subEvents[size_t(action.subroutine)];
        for (size_t k = 0; k < run.size(); ++k) {
          CommEvent &e = events.emplace_back(run[k]);
          // (op tag, microbatch) as one number, so a swapped microbatch
          // order is a tag mismatch.
          if (e.kind != EventKind::Collective)
            e.tag = ops[k].tag * (m + 1) + action.microbatch + 1;
          e.origin = Origins::encode(ai, k);
        }
      }
    }
  }
  out.describeOrigin = [origins](int64_t rank, int64_t origin) {
    return origins->describe(rank, origin);
  };
  return out;
}

namespace {
/// Whether a subroutine's ring transfers (send / recv with `shift`, along
/// an axis other than pp) pair up within any replica of the ranks that run
/// it: every member of the axis runs the same ops, so member c's k-th send
/// with shift s (to c + s) meets member c + s's k-th recv with shift n - s
/// (from c), and it does without waiting iff each such recv comes after its
/// send in the program, with the same count, dtype and tag. Then, as for a
/// collective along dp or tp, the whole axis completes the ring iff one
/// member does, and the replica may leave the ring out.
std::optional<std::string> whyRingsDiffer(const rt::Program &prog, const rt::Subroutine &sub, const rt::Mesh &mesh) {
  struct Transfer {
    size_t op;
    int64_t count, tag;
    schema::ElemType dtype;
  };
  // (axis, shift of the send) -> its sends, and the recvs that pair with them.
  std::map<std::pair<int, int64_t>, std::pair<std::vector<Transfer>, std::vector<Transfer>>> rings;
  for (size_t oi = 0; oi < sub.ops.size(); ++oi) {
    const rt::Op &op = sub.ops[oi];
    if (!schema::isPointToPoint(op.kind) || !op.attrs.count("shift"))
      continue;
    auto axis = rt::parseMeshAxis(op.stringAttr("axis"));
    if (!axis)
      continue; // the loader refuses this
    const int64_t n = mesh.axisSize(*axis), shift = op.intAttr("shift");
    const bool send = op.kind == schema::OpKind::kSend;
    const rt::BufferDesc &b = prog.buffers[op.arg(send ? "x" : "y")];
    auto &ring = rings[{int(*axis), send ? shift : n - shift}];
    (send ? ring.first : ring.second).push_back({oi, b.numel(), op.intAttr("tag"), b.dtype});
  }
  for (const auto &[key, ring] : rings) {
    const auto &[sends, recvs] = ring;
    if (sends.size() != recvs.size())
      return std::to_string(sends.size()) + " ring sends with shift " + std::to_string(key.second) + " but " +
             std::to_string(recvs.size()) + " recvs that pair with them";
    for (size_t k = 0; k < sends.size(); ++k) {
      const Transfer &s = sends[k], &r = recvs[k];
      if (r.op < s.op || r.count != s.count || r.tag != s.tag || r.dtype != s.dtype)
        return "ring recv op " + std::to_string(r.op) + " does not pair with send op " + std::to_string(s.op) +
               " (the order, the count, the tag or the dtype)";
    }
  }
  return std::nullopt;
}
} // namespace

std::optional<std::string> llcdist::verify::whyReplicasDiffer(const rt::Plan &plan) {
  const rt::Manifest &man = plan.manifest;
  const rt::Mesh mesh = man.mesh();
  std::vector<int64_t> programOf(size_t(mesh.worldSize()), -1);
  for (size_t pi = 0; pi < man.programs.size(); ++pi)
    for (int64_t r : man.programs[pi].ranks)
      if (r >= 0 && r < mesh.worldSize())
        programOf[size_t(r)] = int64_t(pi);
  for (int64_t r = 0; r < mesh.worldSize(); ++r) {
    int64_t first = mesh.withCoord(mesh.withCoord(mesh.withCoord(r, rt::MeshAxis::kDp, 0), rt::MeshAxis::kTp, 0),
                                   rt::MeshAxis::kCp, 0);
    if (programOf[size_t(r)] != programOf[size_t(first)])
      return "rank " + std::to_string(r) + " runs program " +
             std::to_string(programOf[size_t(r)]) + " but rank " + std::to_string(first) +
             " of its stage runs program " + std::to_string(programOf[size_t(first)]);
  }
  for (const rt::Program &prog : plan.programs)
    for (const rt::Subroutine &sub : prog.subroutines) {
      for (size_t oi = 0; oi < sub.ops.size(); ++oi) {
        const rt::Op &op = sub.ops[oi];
        if (schema::isPointToPoint(op.kind) && !op.attrs.count("shift") &&
            rt::parseMeshAxis(op.stringAttr("axis")) != rt::MeshAxis::kPp)
          return prog.file + " " + sub.name + " op " + std::to_string(oi) + " " + std::string(schema::opName(op.kind)) +
                 " is along " + op.stringAttr("axis") + ", not pp";
      }
      if (auto why = whyRingsDiffer(prog, sub, mesh))
        return prog.file + " " + sub.name + ": " + *why;
    }
  return std::nullopt;
}

const char *llcdist::verify::planCheckName(PlanCheck check) {
  switch (check) {
  case PlanCheck::Replica:
    return "replica";
  case PlanCheck::SubMesh:
    return "sub-mesh";
  case PlanCheck::AllRanks:
    return "all-ranks";
  }
  return "unknown";
}

PlanVerifyResult llcdist::verify::verifyPlan(const rt::Plan &plan, int64_t maxErrors,
                                             int64_t maxAxis) {
  VerifyOptions opts;
  opts.sendMode = SendMode::Eager;
  opts.maxErrors = maxErrors;
  const rt::Mesh full = plan.manifest.mesh();
  PlanVerifyResult out;
  // One replica for all (see PlanComm.h); a problem it finds is reported
  // from the simulation below, whose messages name the ranks of the mesh
  // asked for.
  if (maxAxis > 0 && !whyReplicasDiffer(plan)) {
    const rt::Mesh replica = cappedMesh(full, 1);
    VerifyResult r = verifyCommPlan(commPlanOf(plan, 1), opts);
    if (r.ok()) {
      static_cast<VerifyResult &>(out) = std::move(r);
      out.eventsTotal = out.eventsCompleted = eventCount(plan, full);
      out.check = PlanCheck::Replica;
      out.ranksCovered = full.worldSize();
      out.ranksSimulated = replica.worldSize();
      return out;
    }
  }
  const rt::Mesh mesh = cappedMesh(full, maxAxis);
  static_cast<VerifyResult &>(out) = verifyCommPlan(commPlanOf(plan, maxAxis), opts);
  out.check = mesh.worldSize() < full.worldSize() ? PlanCheck::SubMesh : PlanCheck::AllRanks;
  out.ranksCovered = out.ranksSimulated = mesh.worldSize();
  return out;
}
