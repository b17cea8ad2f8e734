//===- MemoryReport.cpp - per-rank memory of a plan -----------------------===//
#include "llcdist/Dialect/Plan/Analysis/MemoryReport.h"
#include "llcdist/Dialect/Plan/Analysis/CommReport.h"
#include "llcdist/Dialect/Plan/IR/PlanDialect.h"
#include "llcdist/Support/ReportFormat.h"

#include <fmt/format.h>

using namespace mlir;
using namespace llcdist;
using namespace llcdist::plan;
using json = nlohmann::ordered_json;

/// The prefix of plan.memory's entries that describe the live peak (see
/// llcdist-plan-memory); every other entry but the two transient totals is a
/// persistent buffer kind.
static constexpr llvm::StringLiteral kAtPeakPrefix = "peak_";

std::vector<StageMemory> llcdist::plan::computeStageMemory(ModuleOp m) {
  std::vector<StageMemory> out;
  std::vector<std::vector<std::string>> comms = communicatorAxesPerProgram(m);
  for (auto program : m.getOps<ProgramOp>()) {
    StageMemory sm;
    sm.stage = int64_t(out.size());
    sm.commAxes = comms[out.size()];
    sm.arena = program.getArenaBytes() ? int64_t(*program.getArenaBytes()) : 0;
    if (auto d = program->getAttrOfType<DictionaryAttr>("plan.memory"))
      for (NamedAttribute n : d) {
        int64_t v = cast<IntegerAttr>(n.getValue()).getInt();
        StringRef name = n.getName().strref();
        if (name == "transient_peak")
          sm.transientPeak = v;
        else if (name == "transient_live_peak")
          sm.transientLivePeak = v;
        else if (name.consume_front(kAtPeakPrefix))
          sm.atPeak[name.str()] = v;
        else
          sm.persistent[name.str()] = v;
      }
    out.push_back(sm);
  }
  return out;
}

std::string StageMemory::breakdown() const {
  return fmt::format("parameters {} | gradients {} | optimizer state {} | activations and "
                     "buffers (peak) {} | inputs, metrics, alignment {}",
                     humanBytes(kind("param")), humanBytes(kind("grad")),
                     humanBytes(kind("optimizer_state")), humanBytes(transientPeak),
                     humanBytes(other()));
}

std::string MemoryBudget::text(const StageMemory &sm) const {
  int64_t r = reserve(sm.communicators());
  if (!fixed && !device)
    return humanBytes(capacity);
  return fmt::format("{} - reserve {} = {}", humanBytes(capacity), humanBytes(r),
                     humanBytes(capacity - r));
}

std::string MemoryBudget::reserveBreakdown(const StageMemory &sm) const {
  if (fixed)
    return "--memory-reserve " + fixedText;
  if (!device)
    return "no reserve (give --device or --memory-reserve)";
  const DeviceReserve &d = *device;
  std::string axes;
  for (const std::string &a : sm.commAxes)
    axes += (axes.empty() ? "" : ", ") + a;
  return fmt::format(
      "CUDA context {} + cuBLAS workspaces {} + cuDNN workspace {} + NCCL {} x {} "
      "({} communicator{}{}; NCCL_BUFFSIZE {} x {} channels x {} peers) + fragmentation {} "
      "({:g}% of the capacity)",
      humanBytes(d.cudaContextBytes), humanBytes(d.cublasWorkspaceBytes),
      humanBytes(d.cudnnWorkspaceBytes), sm.communicators(),
      humanBytes(d.ncclPerCommunicatorBytes()), sm.communicators(),
      sm.communicators() == 1 ? "" : "s", axes.empty() ? "" : ": " + axes,
      humanBytes(d.ncclBuffsizeBytes), d.ncclChannels, d.ncclPeers,
      humanBytes(d.fragmentationBytes(capacity)), 100 * d.fragmentationFraction);
}

bool MemoryReport::fits() const {
  return !budget || llvm::all_of(stages, [&](const StageMemory &sm) { return budget->fits(sm); });
}

json MemoryReport::toJson() const {
  json j = json::object();
  json mem = json::array();
  for (const StageMemory &sm : stages) {
    json e = {{"stage", sm.stage}};
    for (auto &[k, v] : sm.persistent)
      e[k] = v;
    e["activations_peak"] = sm.transientPeak;
    e["activations_live_peak"] = sm.transientLivePeak;
    e["activations_placed_over_live"] = sm.placedOverLive();
    for (auto &[k, v] : sm.atPeak)
      e["at_live_peak_" + k] = v;
    e["arena"] = sm.arena;
    mem.push_back(e);
  }
  j["memory_per_rank"] = mem;
  j["recompute"] = recompute;
  if (budget) {
    json usable = json::array(), reserve = json::array();
    for (const StageMemory &sm : stages) {
      usable.push_back(budget->usable(sm.communicators()));
      reserve.push_back(budget->reserve(sm.communicators()));
    }
    j["memory_budget"] = {{"bytes", budget->capacity},
                          {"from", budget->name},
                          {"reserve_bytes_per_stage", reserve},
                          {"usable_bytes_per_stage", usable}};
    if (!stages.empty())
      j["memory_budget"]["reserve"] = budget->reserveBreakdown(stages.front());
  }
  return j;
}

void MemoryReport::print(llvm::raw_ostream &os) const {
  os << fmt::format("  memory per rank (MiB){}: parameters + gradients + optimizer state + "
                    "activations and buffers (peak; most live at once) + inputs, metrics, "
                    "alignment = arena\n",
                    recompute != "none" ? ", recompute " + recompute : "");
  for (const StageMemory &sm : stages) {
    os << fmt::format(
        "    {}{} + {} + {} + {} ({}) + {} = {}{}\n"
        "      at the live peak: activations {}, communication buffers {}, "
        "workspace {}; placed / live {:.3f}\n",
        stages.size() > 1 ? fmt::format("stage {}: ", sm.stage) : "",
        mebibytes(sm.kind("param")), mebibytes(sm.kind("grad")),
        mebibytes(sm.kind("optimizer_state")), mebibytes(sm.transientPeak),
        mebibytes(sm.transientLivePeak), mebibytes(sm.other()), mebibytes(sm.arena),
        budget ? fmt::format("  (fits {}: {})", budget->name, budget->text(sm)) : "",
        mebibytes(sm.peak("activations")), mebibytes(sm.peak("communication")),
        mebibytes(sm.peak("workspace")), sm.placedOverLive());
    if (budget && budget->reserve(sm.communicators()) > 0)
      os << fmt::format("      reserved outside the arena: {} = {}\n",
                        humanBytes(budget->reserve(sm.communicators())),
                        budget->reserveBreakdown(sm));
  }
}
