//===- FitBudget.cpp - fitting a plan into a memory budget ----------------===//
#include "llcdist/Pipelines/FitBudget.h"
#include "llcdist/Dialect/Plan/Analysis/CommReport.h"
#include "llcdist/Frontend/LoadModel.h"
#include "llcdist/InitAll.h"
#include "llcdist/Support/Device.h"
#include "llcdist/Support/ReportFormat.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

using namespace mlir;
using namespace llcdist;
using plan::MemoryBudget;
using plan::StageMemory;

std::optional<BudgetError>
llcdist::resolveMemoryBudget(const BudgetFlags &flags, std::optional<MemoryBudget> &budget) {
  budget.reset();
  if (!flags.device.empty()) {
    DeviceSpec dev;
    if (auto err = loadDevice(flags.device, dev))
      return BudgetError{*err, /*usage=*/false};
    budget = MemoryBudget{dev.memoryBytes, fmt::format("{} ({})", dev.id, dev.name), dev.reserve};
  }
  if (!flags.capacity.empty()) {
    std::optional<int64_t> b = parseByteSize(flags.capacity);
    if (!b)
      return BudgetError{"--memory-budget '" + flags.capacity +
                         "': expected a size like 80GiB, 72GB, 4096MiB or a byte count, at most 1 EiB"};
    if (!budget)
      budget = MemoryBudget{};
    budget->capacity = *b;
    budget->name = "--memory-budget " + flags.capacity;
  }
  if (!flags.reserve.empty()) {
    std::optional<int64_t> r = parseByteSize(flags.reserve, /*allowZero=*/true);
    if (!r)
      return BudgetError{"--memory-reserve '" + flags.reserve +
                         "': expected a size like 6GiB, 512MiB, 0 or a byte count, at most 1 EiB"};
    if (!budget)
      return BudgetError{"--memory-reserve is taken out of a capacity: it needs --device or "
                         "--memory-budget"};
    if (*r >= budget->capacity)
      return BudgetError{"--memory-reserve " + flags.reserve + " is not smaller than the " +
                         budget->name + " capacity (" + humanBytes(budget->capacity) + ")"};
    budget->fixed = *r;
    budget->fixedText = flags.reserve;
  }
  return std::nullopt;
}

bool llcdist::fitsBudget(ModuleOp m, const MemoryBudget &budget) {
  for (const StageMemory &sm : plan::computeStageMemory(m))
    if (!budget.fits(sm))
      return false;
  return true;
}

double llcdist::ringBytesPerRank(ModuleOp m) {
  FailureOr<plan::CommReport> r = plan::computeCommReport(m);
  if (failed(r))
    return 0;
  std::map<int64_t, double> perStage;
  for (const plan::CollectiveEntry &e : r->entries)
    perStage[e.stage] += e.ringBytesPerStep();
  double most = 0;
  for (auto &[stage, bytes] : perStage)
    most = std::max(most, bytes);
  return most;
}

FailureOr<std::string>
llcdist::fitRecompute(function_ref<FailureOr<ModuleOp>(StringRef mode)> compile,
                      const MemoryBudget &budget, std::vector<std::string> &tried) {
  // In the order of their cost: each mode re-runs more of the forward.
  std::string mode;
  for (const char *m : {"none", "selective", "full"}) {
    mode = m;
    FailureOr<ModuleOp> module = compile(mode);
    if (failed(module))
      return failure();
    if (fitsBudget(*module, budget))
      break;
    tried.push_back(mode);
  }
  return mode;
}

bool llcdist::compileInMemory(const std::string &model, const TrainingShape &shape,
                              const MeshSpec &mesh, TrainingPipelineOptions train,
                              llvm::function_ref<void(ModuleOp)> use, std::string &error) {
  DialectRegistry registry;
  registerAllDialects(registry);
  MLIRContext ctx(registry, MLIRContext::Threading::DISABLED);
  ctx.printOpOnDiagnostic(false);
  llvm::SourceMgr srcMgr;
  std::string first;
  ScopedDiagnosticHandler quiet(&ctx, [&](Diagnostic &d) {
    if (d.getSeverity() == DiagnosticSeverity::Error && first.empty())
      first = d.str();
    return success();
  });
  std::string err;
  std::optional<LoadedModel> lm = loadModel(ctx, srcMgr, model, shape, mesh.dp, err);
  if (!lm) {
    error = !err.empty() ? err : !first.empty() ? first : model + ": cannot load the model";
    return false;
  }
  PassManager pm(&ctx, ModuleOp::getOperationName());
  train.mesh = {mesh.dp, mesh.tp, mesh.pp, mesh.cp, mesh.rankOrderStr(), mesh.ep};
  train.verifyPlan = false;
  if (std::optional<std::string> why = overlapOptionsError(train)) { // what llc-dist compile refuses
    error = *why;
    return false;
  }
  {
    // Building a pipeline registers pass options (llvm::cl): one at a time.
    static std::mutex building;
    std::lock_guard<std::mutex> lock(building);
    buildTrainingPipeline(pm, train);
  }
  if (failed(pm.run(*lm->module))) {
    error = first.empty() ? "the compilation failed" : first;
    return false;
  }
  use(*lm->module);
  return true;
}

/// Compiles `h` in a context of its own: nothing is printed or written. The
/// pipeline stops before llcdist-verify-plan (memory does not depend on it).
static void compileHint(MemoryHint &h, const std::string &model, const TrainingShape &shape,
                        const MemoryBudget &budget) {
  h.compiled = compileInMemory(
      model, shape, h.mesh, h.train,
      [&](ModuleOp module) {
        h.fits = true;
        for (const StageMemory &sm : plan::computeStageMemory(module)) {
          h.peak = std::max(h.peak, sm.arena);
          h.fits &= budget.fits(sm);
        }
        h.ringBytes = ringBytesPerRank(module);
      },
      h.failure);
}

std::vector<MemoryHint> llcdist::memoryHints(const std::string &model,
                                             const TrainingShape &shape, const MeshSpec &mesh,
                                             const TrainingPipelineOptions &train,
                                             const MemoryBudget &budget) {
  std::vector<MemoryHint> hints;
  auto add = [&](std::string flags, int costClass, auto edit) {
    MemoryHint h;
    h.flags = std::move(flags);
    h.mesh = mesh;
    h.train = train;
    h.costClass = costClass;
    edit(h);
    hints.push_back(std::move(h));
  };
  if (train.recompute == "none")
    add("--recompute selective", 1, [](MemoryHint &h) { h.train.recompute = "selective"; });
  if (train.recompute != "full")
    add("--recompute full", 4, [](MemoryHint &h) { h.train.recompute = "full"; });
  // ZeRO shards over the data-parallel group dp × cp (an expert shard over
  // its replicas, edp).
  const bool zeroApplies = mesh.dataParallelGroup() > 1;
  if (zeroApplies)
    for (int64_t z = train.zero + 1; z <= 3; ++z)
      add(fmt::format("--zero {}", z), 0, [z](MemoryHint &h) {
        h.train.zero = z;
        h.train.reshardAfterForward = true;
      });
  auto reshape = [&](const std::string &axis) {
    MeshSpec m = mesh;
    int64_t &deg = axis == "tp" ? m.tp : axis == "cp" ? m.cp : m.pp;
    deg *= 2;
    if (axis == "cp" && mesh.cp == 1) { // the rank order names cp: next to tp (Megatron's tp,cp,dp,pp)
      auto tp = std::find(m.rankOrder.begin(), m.rankOrder.end(), "tp");
      m.rankOrder.insert(tp == m.rankOrder.end() ? m.rankOrder.begin() : tp + 1, "cp");
    }
    bool same = mesh.dp % 2 == 0;
    if (same)
      m.dp /= 2;
    m.ep = std::gcd(mesh.ep, m.dp); // expert parallelism stays inside dp
    add("--mesh " + m.str(), axis == "pp" ? 3 : 2, [&](MemoryHint &h) {
      h.mesh = m;
      h.note = same ? fmt::format("(same {} GPUs)", mesh.worldSize())
                    : fmt::format("({} GPUs)", m.worldSize());
      if (std::string(axis) == "pp")
        h.train.ppLayout.clear(); // balanced over the new stages
      if (h.mesh.dataParallelGroup() == 1) {
        h.train.zero = 0; // nothing to shard over
        h.train.reshardAfterForward = true;
      }
    });
  };
  reshape("tp");
  reshape("pp");
  // Long sequences: context parallelism splits every activation (attention's
  // too) over cp. The ring's load balancing needs the sequence in 2·cp chunks.
  if ((mesh.cp > 1 || shape.seqLen >= kLongSequence) && shape.seqLen % (4 * mesh.cp) == 0)
    reshape("cp");

  // Each hint is a whole compilation: run them side by side.
  unsigned threads = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(),
                                                     unsigned(hints.size())));
  auto runAll = [&](std::vector<MemoryHint> &list) {
    std::atomic<size_t> next{0};
    std::vector<std::thread> pool;
    for (unsigned i = 0; i < threads; ++i)
      pool.emplace_back([&] {
        for (size_t k; (k = next++) < list.size();)
          compileHint(list[k], model, shape, budget);
      });
    for (std::thread &t : pool)
      t.join();
  };
  runAll(hints);
  // When no single change fits, the strongest combination of them.
  bool anyFits = llvm::any_of(hints, [](const MemoryHint &h) { return h.fits; });
  // (Without ZeRO the combination is --recompute full alone, a hint above.)
  if (!anyFits && zeroApplies && (train.recompute != "full" || train.zero < 3)) {
    std::vector<MemoryHint> combo(1);
    MemoryHint &h = combo[0];
    h.mesh = mesh;
    h.train = train;
    h.train.recompute = "full";
    h.train.zero = 3;
    h.train.reshardAfterForward = true;
    h.flags = "--zero 3 --recompute full";
    h.costClass = 5;
    runAll(combo);
    hints.push_back(h);
  }
  std::stable_sort(hints.begin(), hints.end(), [](const MemoryHint &a, const MemoryHint &b) {
    if (a.compiled != b.compiled)
      return a.compiled;
    if (a.costClass != b.costClass)
      return a.costClass < b.costClass;
    return a.ringBytes < b.ringBytes;
  });
  return hints;
}

std::string llcdist::oomMessage(const std::vector<StageMemory> &memory,
                                const MemoryBudget &budget,
                                const std::vector<std::string> &tried) {
  const StageMemory *first = nullptr;
  for (const StageMemory &sm : memory)
    if (!budget.fits(sm) && !first)
      first = &sm;
  std::string msg = fmt::format("the plan does not fit: {} allows {} per rank", budget.name,
                                first ? budget.text(*first) : humanBytes(budget.capacity));
  if (!tried.empty()) {
    msg += " (--recompute auto tried";
    for (const std::string &t : tried)
      msg += " " + t;
    msg += ")";
  }
  for (const StageMemory &sm : memory)
    if (!budget.fits(sm)) {
      msg += fmt::format("\n  stage {} needs {} per rank: {}", sm.stage, humanBytes(sm.arena),
                         sm.breakdown());
      if (budget.reserve(sm.communicators()) > 0) {
        msg += fmt::format("\n    reserve {}: {}", humanBytes(budget.reserve(sm.communicators())),
                           budget.reserveBreakdown(sm));
        if (sm.arena <= budget.capacity)
          msg += fmt::format("\n    it would fit the nominal {} but not {} once the reserve "
                             "is taken out (--memory-reserve overrides the reserve)",
                             humanBytes(budget.capacity),
                             humanBytes(budget.usable(sm.communicators())));
      }
    }
  return msg;
}

std::string llcdist::hintsMessage(const std::vector<MemoryHint> &hints,
                                  const MemoryBudget &budget, double ringBytesNow,
                                  double seconds) {
  std::string msg = fmt::format(
      "\n  to fit, each change compiled (peak = the largest stage's arena per rank; fastest "
      "first: ZeRO, selective recompute, more tp, more pp, full recompute; ties by "
      "communication per rank per step; {} compilations in {:.1f} s):",
      hints.size(), seconds);
  size_t width = 0;
  for (const MemoryHint &h : hints)
    width = std::max(width, h.flags.size() + (h.note.empty() ? 0 : h.note.size() + 1));
  for (const MemoryHint &h : hints) {
    std::string what = h.flags + (h.note.empty() ? "" : " " + h.note);
    if (!h.compiled) {
      msg += fmt::format("\n    {:<{}}  not possible: {}", what, width, h.failure);
      continue;
    }
    double delta = h.ringBytes - ringBytesNow;
    std::string comm = std::fabs(delta) < 1024
                           ? "the same communication"
                           : fmt::format("communication {}{} per rank per step",
                                         delta < 0 ? "-" : "+",
                                         humanBytes(int64_t(std::fabs(delta))));
    msg += fmt::format("\n    {:<{}}  peak {:>10}  {:<13} {}", what, width, humanBytes(h.peak),
                       h.fits ? "fits" : "does not fit", comm);
  }
  auto best = llvm::find_if(hints, [](const MemoryHint &h) { return h.fits; });
  if (best != hints.end())
    msg += fmt::format("\n  the fastest that fits {}: {}{}", budget.name, best->flags,
                       best->note.empty() ? "" : " " + best->note);
  else
    msg += "\n  none of them fits alone; combine them or add GPUs";
  return msg;
}

std::string llcdist::outOfMemoryError(ModuleOp module, const std::string &model,
                                      const TrainingShape &shape, const MeshSpec &mesh,
                                      const TrainingPipelineOptions &train,
                                      const MemoryBudget &budget,
                                      const std::vector<std::string> &tried) {
  auto t0 = std::chrono::steady_clock::now();
  std::vector<MemoryHint> hints = memoryHints(model, shape, mesh, train, budget);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return oomMessage(plan::computeStageMemory(module), budget, tried) +
         hintsMessage(hints, budget, ringBytesPerRank(module), seconds);
}
