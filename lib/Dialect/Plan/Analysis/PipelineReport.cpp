//===- PipelineReport.cpp - the emitted pipeline schedule -----------------===//
#include "llcdist/Dialect/Plan/Analysis/PipelineReport.h"
#include "llcdist/Dialect/Plan/IR/PlanDialect.h"

#include <algorithm>
#include <numeric>

using namespace mlir;
using namespace llcdist;
using namespace llcdist::plan;
namespace sch = llcdist::schedule;

FailureOr<std::optional<PipelineReport>>
llcdist::plan::computePipelineReport(ModuleOp module) {
  auto info = module->getAttrOfType<DictionaryAttr>("plan.pipeline");
  if (!info)
    return std::optional<PipelineReport>();
  PipelineReport r;
  r.schedule = info.getAs<StringAttr>("schedule").str();
  r.stages = info.getAs<IntegerAttr>("stages").getInt();
  r.virtualStages = info.getAs<IntegerAttr>("virtual_stages").getInt();
  r.microbatches = info.getAs<IntegerAttr>("microbatches").getInt();
  for (Attribute a : info.getAs<ArrayAttr>("layers_per_chunk"))
    r.layersPerChunk.push_back(cast<IntegerAttr>(a).getInt());
  for (Attribute a : info.getAs<ArrayAttr>("chunk_flops"))
    r.chunkFlops.push_back(cast<FloatAttr>(a).getValueAsDouble());
  r.stageFlops.assign(r.stages, 0);
  for (size_t c = 0; c < r.chunkFlops.size(); ++c)
    r.stageFlops[c % r.stages] += r.chunkFlops[c];
  double mean = std::accumulate(r.stageFlops.begin(), r.stageFlops.end(), 0.0) /
                double(r.stages);
  r.imbalance = mean > 0 ? *std::max_element(r.stageFlops.begin(), r.stageFlops.end()) / mean - 1
                         : 0;

  // The emitted action lists: the actions the lowering marked with their
  // pipeline kind and chunk, program by program (stage order).
  r.emitted.stages = r.stages;
  r.emitted.microbatches = r.microbatches;
  r.emitted.virtualStages = r.virtualStages;
  auto kind = sch::parseScheduleKind(r.schedule);
  r.emitted.kind = kind ? *kind : sch::ScheduleKind::Custom;
  for (ProgramOp program : module.getOps<ProgramOp>()) {
    std::vector<sch::Action> list;
    for (auto sched : program.getBody().front().getOps<ScheduleOp>())
      for (auto a : sched.getBody().front().getOps<ActionOp>()) {
        auto k = a->getAttrOfType<StringAttr>("pipeline.kind");
        auto c = a->getAttrOfType<IntegerAttr>("pipeline.chunk");
        if (!k || !c || !a.getMicrobatch())
          continue; // step_begin, optimizer
        sch::Action act;
        act.kind = k.getValue() == "F"   ? sch::ActionKind::F
                   : k.getValue() == "B" ? sch::ActionKind::B
                                         : sch::ActionKind::W;
        r.emitted.splitBackward |= act.kind == sch::ActionKind::W;
        act.microbatch = int64_t(*a.getMicrobatch());
        act.chunk = c.getInt();
        list.push_back(act);
      }
    r.emitted.perStage.push_back(std::move(list));
  }
  if (int64_t(r.emitted.perStage.size()) != r.stages)
    return emitError(module.getLoc(), "plan.pipeline has ")
           << r.stages << " stages but the module has " << r.emitted.perStage.size()
           << " programs";
  r.costs.forward = 1;
  r.costs.backward = r.emitted.splitBackward ? 1 : 2;
  r.costs.weight = 1;
  auto sim = sch::simulate(r.emitted, r.costs);
  if (!sim)
    return emitError(module.getLoc(), "the emitted pipeline schedule is invalid: ")
           << sim.error().message;
  r.simulated = std::move(*sim);
  sch::ScheduleOptions so;
  so.stages = r.stages;
  so.microbatches = r.microbatches;
  so.virtualStages = r.virtualStages;
  so.kind = r.emitted.kind;
  r.analyticBubble = sch::analyticBubbleOverIdeal(so, r.costs);
  r.peakInFlight = sch::peakInFlight(r.emitted);
  return std::optional<PipelineReport>(std::move(r));
}
