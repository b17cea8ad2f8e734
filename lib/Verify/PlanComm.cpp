//===- PlanComm.cpp - a plan's communication, for the verifier ------------===//
#include "llcdist/Verify/PlanComm.h"

#include <algorithm>

using namespace llcdist;
using namespace llcdist::verify;
namespace schema = llcdist::rt::schema;

namespace {
/// The ranks of `rank`'s group on `axis`, or with `groupSize` > 0 of its
/// sub-group of that many consecutive members (all_reduce's group_size).
std::vector<int64_t> sortedGroup(const rt::Mesh &mesh, int64_t rank, rt::MeshAxis axis,
                                 int64_t groupSize = 0) {
  std::vector<int> g = mesh.subGroup(rank, axis, groupSize);
  std::vector<int64_t> out(g.begin(), g.end());
  std::sort(out.begin(), out.end());
  return out;
}

std::string dtypeOf(const rt::BufferDesc &b) {
  return std::string(schema::elemTypeName(b.dtype));
}
/// What a collective moves (docs/plan-format.md "Collective dtypes"): its
/// `dtype` attr, f32 by default (bf16 buffers travel as f32 then); an f64
/// buffer (a kernel's partial reduction) always in f64.
std::string collectiveDtype(const rt::Op &op, const rt::BufferDesc &b) {
  if (b.dtype == schema::ElemType::kF64)
    return "f64";
  return op.stringAttr(std::string(schema::kCommDTypeAttr)) == "bf16" ? "bf16" : "f32";
}
} // namespace

CommPlan llcdist::verify::commPlanOf(const rt::Plan &plan, int64_t maxAxis) {
  const rt::Manifest &man = plan.manifest;
  rt::Mesh full = man.mesh(), mesh = full;
  if (maxAxis > 0)
    for (rt::MeshAxis a : {rt::MeshAxis::kDp, rt::MeshAxis::kTp})
      mesh.size[size_t(a)] = std::min(mesh.size[size_t(a)], maxAxis);
  CommPlan out(mesh.worldSize());
  const int64_t m = std::max<int64_t>(1, man.microbatches);
  // The ranks of the (possibly smaller) mesh that run each program: those
  // whose coordinates a rank of the program has in the full mesh.
  std::vector<std::vector<int64_t>> ranksOf(plan.programs.size());
  for (size_t pi = 0; pi < plan.programs.size(); ++pi)
    for (int64_t r : man.programs[pi].ranks) {
      int64_t small = 0;
      bool inside = true;
      for (rt::MeshAxis a : {rt::MeshAxis::kDp, rt::MeshAxis::kTp, rt::MeshAxis::kPp}) {
        int64_t c = full.coord(r, a);
        inside &= c < mesh.axisSize(a);
        small += c * mesh.stride(a);
      }
      if (inside)
        ranksOf[pi].push_back(small);
    }
  for (size_t pi = 0; pi < plan.programs.size(); ++pi) {
    const rt::Program &prog = plan.programs[pi];
    for (int64_t rank : ranksOf[pi]) {
      std::vector<CommEvent> &events = out[rank];
      for (size_t ai = 0; ai < prog.actions.size(); ++ai) {
        const rt::Action &action = prog.actions[ai];
        const rt::Subroutine &sub = prog.subroutines[action.subroutine];
        for (size_t oi = 0; oi < sub.ops.size(); ++oi) {
          const rt::Op &op = sub.ops[oi];
          auto where = [&] {
            std::string s = prog.file + " action " + std::to_string(ai) + " (" + sub.name;
            if (action.microbatch >= 0)
              s += " mb " + std::to_string(action.microbatch);
            s += ") op " + std::to_string(oi) + " " + std::string(schema::opName(op.kind));
            if (!op.loc.empty())
              s += " (" + op.loc + ")";
            return s;
          };
          auto axisOf = [&](const std::string &attr) -> std::optional<rt::MeshAxis> {
            if (!op.attrs.count(attr))
              return std::nullopt;
            auto a = rt::parseMeshAxis(op.stringAttr(attr));
            if (!a || mesh.axisSize(*a) <= 1)
              return std::nullopt;
            return a;
          };
          auto collective = [&](const std::string &name, rt::MeshAxis axis, int64_t count,
                                const std::string &dtype, int64_t groupSize = 0) {
            events.push_back(CommEvent::coll(name, sortedGroup(mesh, rank, axis, groupSize),
                                             count, dtype, where()));
          };
          switch (op.kind) {
          case schema::OpKind::kAllReduce: {
            auto axis = axisOf("axis");
            if (!axis)
              break;
            // A sub-group of the axis (kv-head replicas); on a mesh cut to
            // maxAxis members one larger than the axis is the whole axis.
            int64_t groupSize = op.attrs.count("group_size") ? op.intAttr("group_size") : 0;
            for (int64_t id : op.argList("x"))
              collective("all_reduce." + op.stringAttr("op"), *axis, prog.buffers[id].numel(),
                         collectiveDtype(op, prog.buffers[id]), groupSize);
            break;
          }
          case schema::OpKind::kAllGather:
          case schema::OpKind::kReduceScatter: {
            auto axis = axisOf("axis");
            if (!axis)
              break;
            const rt::BufferDesc &x = prog.buffers[op.arg("x")];
            collective(op.kind == schema::OpKind::kAllGather ? "all_gather"
                                                             : "reduce_scatter." + op.stringAttr("op"),
                       *axis, x.numel(), collectiveDtype(op, x));
            break;
          }
          case schema::OpKind::kSend:
          case schema::OpKind::kRecv: {
            auto axis = rt::parseMeshAxis(op.stringAttr("axis"));
            if (!axis)
              break; // the loader refuses this
            std::vector<int> g = mesh.group(rank, *axis);
            int64_t peer = op.intAttr("peer");
            if (peer < 0 || peer >= int64_t(g.size()))
              break; // the loader refuses this
            const rt::BufferDesc &b =
                prog.buffers[op.arg(op.kind == schema::OpKind::kSend ? "x" : "y")];
            int64_t tag = op.intAttr("tag") * (m + 1) + action.microbatch + 1;
            events.push_back(op.kind == schema::OpKind::kSend
                                 ? CommEvent::send(g[peer], b.numel(), dtypeOf(b), where(), tag)
                                 : CommEvent::recv(g[peer], b.numel(), dtypeOf(b), where(), tag));
            break;
          }
          default:
            break;
          }
        }
      }
    }
  }
  return out;
}

VerifyResult llcdist::verify::verifyPlan(const rt::Plan &plan, int64_t maxErrors,
                                         int64_t maxAxis) {
  VerifyOptions opts;
  opts.sendMode = SendMode::Eager;
  opts.maxErrors = maxErrors;
  return verifyCommPlan(commPlanOf(plan, maxAxis), opts);
}
