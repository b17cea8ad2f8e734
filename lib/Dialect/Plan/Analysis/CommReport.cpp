//===- CommReport.cpp - communication volume of a plan --------------------===//
#include "llcdist/Dialect/Plan/Analysis/CommReport.h"
#include "llcdist/Dialect/Plan/IR/PlanDialect.h"

#include "mlir/IR/SymbolTable.h"

#include "llvm/ADT/StringMap.h"

#include <set>

using namespace mlir;
using namespace llcdist::plan;

/// The mesh's axis sizes from the manifest (1 for an axis it does not give).
static llvm::StringMap<int64_t> meshAxisSizes(ModuleOp module) {
  llvm::StringMap<int64_t> axisSize{{"dp", 1}, {"tp", 1}, {"pp", 1}};
  if (auto m = module->getAttrOfType<DictionaryAttr>(kManifestAttr))
    if (auto mesh = m.getAs<DictionaryAttr>("mesh"))
      for (auto &[axis, size] : axisSize)
        if (auto v = mesh.getAs<IntegerAttr>(axis))
          size = v.getInt();
  return axisSize;
}

double CollectiveEntry::ringBytesPerStep() const {
  double n = double(groupSize);
  double factor = kind == "all_reduce" ? 2 * (n - 1) / n
                  : kind == "send"     ? 1.0
                                       : (n - 1) / n;
  return factor * double(payloadBytes) * double(callsPerStep);
}

double CommReport::ringBytesPerStep() const {
  double total = 0;
  for (const CollectiveEntry &e : entries)
    total += e.ringBytesPerStep();
  return total;
}

FailureOr<CommReport> llcdist::plan::computeCommReport(ModuleOp module) {
  auto programs = llvm::to_vector(module.getOps<ProgramOp>());
  if (programs.empty())
    return emitError(module.getLoc(), "no plan.program to report on");
  llvm::StringMap<int64_t> axisSize = meshAxisSizes(module);

  CommReport report;
  for (auto [index, program] : llvm::enumerate(programs)) {
    int64_t stage = programs.size() > 1 ? int64_t(index) : -1;
    // How often each subroutine runs in one step.
    llvm::StringMap<int64_t> runs;
    for (auto sched : program.getBody().front().getOps<ScheduleOp>())
      for (auto a : sched.getBody().front().getOps<ActionOp>())
        ++runs[a.getSubroutine()];
    SymbolTable symbols(program); // lookups in O(1), not a walk of the buffers
    int64_t params = 0;
    for (auto p : program.getBody().front().getOps<ParamOp>())
      if (p->hasAttr("pipeline.replica_of"))
        continue; // a tied parameter's copy: its home stage reduces and updates it
      else if (auto buf = symbols.lookup<BufferOp>(p.getValueAttr().getValue()))
        params += buf.getTensorType().getNumElements();
    report.localParametersPerStage.push_back(params);
    report.localParameters = std::max(report.localParameters, params);
    for (auto sub : program.getBody().front().getOps<SubroutineOp>())
      for (auto k : sub.getBody().front().getOps<KernelOp>()) {
        StringRef kind = k.getKernel();
        if (kind != "all_reduce" && kind != "all_gather" && kind != "reduce_scatter" &&
            kind != "send")
          continue;
        CollectiveEntry e;
        e.kind = kind.str();
        e.stage = stage;
        e.axis = k.getParams().getAs<StringAttr>("axis").str();
        e.groupSize = kind == "send" ? 2 : axisSize.lookup(e.axis);
        if (auto g = k.getParams().getAs<IntegerAttr>("group_size")) // a sub-group of the axis
          e.groupSize = g.getInt();
        e.callsPerStep = runs.lookup(sub.getSymName());
        if (auto p = k->getAttrOfType<StringAttr>("plan.payload"))
          e.payload = p.str();
        if (auto nl = dyn_cast<NameLoc>(k.getLoc()))
          e.reason = nl.getName().str();
        // The payload: the reduced buffers, or the full (gathered) tensor.
        StringRef role = kind == "all_gather" ? "y" : "x";
        Attribute arg = k.getArgs().get(role);
        SmallVector<Attribute> bufs;
        if (auto list = dyn_cast<ArrayAttr>(arg))
          bufs.append(list.begin(), list.end());
        else
          bufs.push_back(arg);
        for (Attribute a : bufs)
          if (auto buf = symbols.lookup<BufferOp>(cast<FlatSymbolRefAttr>(a).getValue()))
            e.payloadBytes += buf.getNumBytes();
        // One entry per (stage, kind, axis, payload, reason): a collective
        // repeated per layer is one line with its calls summed.
        auto same = llvm::find_if(report.entries, [&](const CollectiveEntry &o) {
          return o.stage == e.stage && o.kind == e.kind && o.axis == e.axis &&
                 o.payload == e.payload && o.reason == e.reason &&
                 o.payloadBytes == e.payloadBytes;
        });
        if (same != report.entries.end())
          same->callsPerStep += e.callsPerStep;
        else
          report.entries.push_back(e);
      }
  }
  return report;
}

std::vector<std::vector<std::string>>
llcdist::plan::communicatorAxesPerProgram(ModuleOp module) {
  llvm::StringMap<int64_t> axisSize = meshAxisSizes(module);
  std::vector<std::vector<std::string>> out;
  for (auto program : module.getOps<ProgramOp>()) {
    std::set<std::string> axes;
    program.walk([&](KernelOp k) {
      for (StringRef key : {"axis", "shard_axis", "stage_axis"}) {
        auto v = k.getParams().getAs<StringAttr>(key);
        if (!v)
          continue;
        SmallVector<StringRef> parts;
        v.getValue().split(parts, ',', -1, false);
        for (StringRef a : parts)
          if (axisSize.lookup(a.trim()) > 1)
            axes.insert(a.trim().str());
      }
    });
    out.emplace_back(axes.begin(), axes.end());
  }
  return out;
}
