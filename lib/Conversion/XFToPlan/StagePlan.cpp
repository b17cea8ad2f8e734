//===- StagePlan.cpp - what each pipeline stage of a lowered step holds ---===//
//
// Pure functions over the step's description (StagePlan.h): no IR is built
// or read here.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Conversion/XFToPlan/StagePlan.h"

#include <algorithm>
#include <cassert>

using namespace llcdist;
using namespace llcdist::stageplan;
namespace sch = llcdist::schedule;

std::optional<Error> stageplan::verifyChunks(const Step &step, int64_t stages) {
  for (int64_t i = 0; i < int64_t(step.ops.size()); ++i) {
    int64_t c = step.ops[i].chunk;
    if (c < 0)
      continue;
    for (const Operand &o : step.ops[i].operands) {
      if (o.kind != Operand::Kind::Result)
        continue;
      int64_t from = step.ops[o.op].chunk;
      if (from == c)
        continue;
      if (from < 0)
        return Error{i, "llcdist-lower-to-plan: operand of an op in chunk " + std::to_string(c) +
                            " comes from an op llcdist-pipeline-split did not mark"};
      if (from % stages == c % stages)
        return Error{i, "llcdist-lower-to-plan: chunk " + std::to_string(c) +
                            " reads a value of chunk " + std::to_string(from) +
                            " on the same stage; only values between stages can travel"};
    }
  }
  return std::nullopt;
}

Crossings stageplan::findCrossings(const Step &step, int64_t stages) {
  Crossings out;
  std::map<std::string, std::set<int64_t>> stagesOfParam;
  for (const StepOp &op : step.ops) {
    if (op.chunk < 0)
      continue;
    for (const Operand &o : op.operands) {
      if (o.kind == Operand::Kind::Param) {
        stagesOfParam[o.param].insert(op.chunk % stages);
        continue;
      }
      if (o.kind != Operand::Kind::Result)
        continue;
      int64_t from = step.ops[o.op].chunk;
      if (from == op.chunk)
        continue;
      assert(from >= 0 && from % stages != op.chunk % stages && "run verifyChunks first");
      ValueId v{o.op, o.result};
      auto [it, inserted] = out.tagOf.try_emplace(v, int64_t(out.values.size()));
      if (inserted)
        out.values.push_back(Crossing{v, it->second, from, {}});
      std::vector<int64_t> &readers = out.values[it->second].readers;
      if (std::find(readers.begin(), readers.end(), op.chunk) == readers.end())
        readers.push_back(op.chunk);
    }
  }
  // Tied parameters' tags follow the values', in name order.
  for (auto &[name, where] : stagesOfParam)
    if (where.size() > 1)
      out.tied.push_back(TiedParam{name, where, *where.begin(),
                                   int64_t(out.values.size() + out.tied.size())});
  return out;
}

SlotPlan stageplan::allocateSlots(const std::vector<sch::Action> &actions, int64_t localChunks,
                                  bool splitBackward) {
  const bool reuseSlots = localChunks == 1 && !splitBackward;
  SlotPlan out;
  out.slots.assign(localChunks, 0);
  std::vector<std::vector<int64_t>> freeSlots(localChunks);
  std::map<std::pair<int64_t, int64_t>, int64_t> slotOf; // (mb, chunk) -> slot
  for (const sch::Action &a : actions) {
    std::pair<int64_t, int64_t> key{a.microbatch, a.chunk};
    if (a.kind == sch::ActionKind::F) {
      std::vector<int64_t> &fs = freeSlots[a.chunk];
      int64_t slot;
      if (fs.empty() || !reuseSlots) {
        slot = out.slots[a.chunk]++;
      } else {
        auto it = std::min_element(fs.begin(), fs.end());
        slot = *it;
        fs.erase(it);
      }
      slotOf[key] = slot;
    }
    out.slotOfAction.push_back(slotOf.at(key));
    bool last = splitBackward ? a.kind == sch::ActionKind::W : a.kind == sch::ActionKind::B;
    if (last)
      freeSlots[a.chunk].push_back(slotOf.at(key));
  }
  return out;
}

bool stageplan::fusesBackward(const std::vector<sch::Action> &actions, int64_t lc,
                              bool backwardSends) {
  bool adjacent = true;
  for (size_t i = 0; i < actions.size(); ++i)
    if (actions[i].kind == sch::ActionKind::B && actions[i].chunk == lc)
      adjacent &= i + 1 < actions.size() && actions[i + 1].kind == sch::ActionKind::W &&
                  actions[i + 1].microbatch == actions[i].microbatch &&
                  actions[i + 1].chunk == lc;
  return adjacent && !backwardSends;
}

StagePlan stageplan::planStage(const Step &step, const Crossings &crossings,
                               const sch::Schedule &schedule, int64_t stage) {
  const int64_t p = schedule.stages;
  const std::vector<sch::Action> &actions = schedule.perStage[stage];
  StagePlan out;
  out.stage = stage;
  out.splitBackward = schedule.splitBackward;
  out.hasLoss = stage == (p * schedule.virtualStages - 1) % p;
  for (const TiedParam &t : crossings.tied)
    if (t.stages.count(stage) && t.home != stage)
      out.replicaOf[t.name] = t.home;

  SlotPlan slots = allocateSlots(actions, schedule.virtualStages, schedule.splitBackward);
  out.slotOfAction = std::move(slots.slotOfAction);
  for (int64_t lc = 0; lc < schedule.virtualStages; ++lc) {
    ChunkPlan c;
    c.localChunk = lc;
    c.chunk = lc * p + stage;
    c.slots = slots.slots[lc];
    for (int64_t i = 0; i < int64_t(step.ops.size()); ++i) {
      const StepOp &op = step.ops[i];
      if (op.chunk != c.chunk)
        continue;
      for (const Operand &o : op.operands) {
        c.readsInputs |= o.kind == Operand::Kind::Input;
        if (o.kind != Operand::Kind::Result)
          continue;
        auto tag = crossings.tagOf.find({o.op, o.result});
        if (tag != crossings.tagOf.end() &&
            std::find(c.receives.begin(), c.receives.end(), tag->second) == c.receives.end())
          c.receives.push_back(tag->second);
      }
      for (int64_t r = 0; r < op.numResults; ++r)
        if (auto tag = crossings.tagOf.find({i, r}); tag != crossings.tagOf.end())
          (i < step.firstBackward ? c.forwardSends : c.backwardSends).push_back(tag->second);
    }
    c.fusedBackward =
        schedule.splitBackward && fusesBackward(actions, lc, !c.backwardSends.empty());
    out.chunks.push_back(std::move(c));
  }
  return out;
}

std::string stageplan::subroutineName(sch::ActionKind kind, int64_t chunk) {
  const char *base = kind == sch::ActionKind::F   ? "forward"
                     : kind == sch::ActionKind::B ? "backward"
                                                  : "backward_weight";
  return std::string(base) + "_v" + std::to_string(chunk);
}

std::string stageplan::chunkPrefix(int64_t chunk) { return "v" + std::to_string(chunk) + "/"; }
