//===- PipelineReport.cpp - the emitted pipeline schedule -----------------===//
#include "llcdist/Dialect/Plan/Analysis/PipelineReport.h"
#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/Schedule/Render.h"
#include "llcdist/Support/ReportFormat.h"

#include <fmt/format.h>

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

std::string PipelineReport::analyticBubbleFormula() const {
  return schedule == "interleaved" ? "(1/v)(p-1)/m"
         : schedule == "zb-h1"     ? "ZB-H1's (p-1)(B+max(F-W,0))/(m(F+B+W))"
                                   : "(p-1)/m";
}

nlohmann::ordered_json PipelineReport::toJson() const {
  using json = nlohmann::ordered_json;
  json perStage = json::array();
  for (int64_t s = 0; s < stages; ++s) {
    const schedule::StageStats &st = simulated.perStage[s];
    json chunks = json::array();
    for (int64_t c = s; c < int64_t(chunkFlops.size()); c += stages)
      chunks.push_back({{"chunk", c},
                        {"layers", layersPerChunk[c]},
                        {"training_flops_per_microbatch", chunkFlops[c]}});
    std::string actions;
    for (const schedule::Action &a : emitted.perStage[s])
      actions += (actions.empty() ? "" : " ") + schedule::label(a, virtualStages);
    perStage.push_back({{"stage", s},
                        {"chunks", chunks},
                        {"training_flops_per_microbatch", stageFlops[s]},
                        {"bubble_over_ideal", st.bubbleOverIdeal},
                        {"idle_fraction", st.idleFraction},
                        {"peak_microbatches_in_flight", peakInFlight[s]},
                        {"actions", actions}});
  }
  return {{"schedule", schedule},
          {"stages", stages},
          {"virtual_stages", virtualStages},
          {"microbatches", microbatches},
          {"imbalance", imbalance},
          {"costs", {{"forward", costs.forward},
                     {"backward", costs.backward},
                     {"weight", costs.weight}}},
          {"bubble_over_ideal", simulated.bubbleOverIdeal},
          {"analytic_bubble_over_ideal", analyticBubble},
          {"per_stage", perStage}};
}

void PipelineReport::print(llvm::raw_ostream &os, llvm::StringRef traceFile) const {
  os << fmt::format("  pipeline: {} stages × {} chunk{} per stage, {} microbatches, "
                    "schedule {}\n",
                    stages, virtualStages, virtualStages > 1 ? "s" : "", microbatches,
                    schedule);
  os << "    stage  chunks (layers)            training FLOPs/microbatch  bubble  "
        "peak in flight\n";
  for (int64_t s = 0; s < stages; ++s) {
    std::string chunks;
    for (int64_t c = s; c < int64_t(chunkFlops.size()); c += stages)
      chunks += fmt::format("{}{} ({})", chunks.empty() ? "" : ", ", c, layersPerChunk[c]);
    os << fmt::format("    {:>5}  {:<26} {:>25}  {:>6.3f}  {:>14}\n", s, chunks,
                      sci(stageFlops[s]), simulated.perStage[s].bubbleOverIdeal,
                      peakInFlight[s]);
  }
  os << fmt::format("    imbalance {:.1f}% (slowest stage / mean - 1); bubble over "
                    "ideal compute {:.3f} (emitted schedule, F=1 B={:g}{}) vs "
                    "analytic {} = {:.3f}\n",
                    100 * imbalance, simulated.bubbleOverIdeal, costs.backward,
                    emitted.splitBackward ? " W=1" : "", analyticBubbleFormula(),
                    analyticBubble);
  // The Gantt chart has one column per unit of time: print it only while it
  // stays readable in a terminal; the Chrome trace always has it.
  std::string gantt = schedule::renderGantt(simulated);
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(gantt).split(lines, '\n', -1, false);
  size_t widest = 0;
  for (llvm::StringRef l : lines)
    widest = std::max(widest, l.size());
  if (lines.size() <= 16 && widest <= 240) {
    os << "    schedule (one column per unit of time; . = idle):\n";
    for (llvm::StringRef l : lines)
      os << "      " << l << "\n";
  } else {
    os << fmt::format("    schedule: {} stages × {} columns, too wide to print here "
                      "(the Chrome trace has it)\n",
                      lines.size(), widest);
  }
  if (!traceFile.empty())
    os << "    Chrome trace (Perfetto): " << traceFile << "\n";
}
