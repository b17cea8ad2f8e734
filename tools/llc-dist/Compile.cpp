//===- Compile.cpp - llc-dist compile -------------------------------------===//
//
//   llc-dist compile MODEL [--mesh dp=..,tp=..,pp=..] [--emit xf] [-o OUT]
//
// Imports the model, runs the training pipeline (lib/Pipelines) with the
// flags' options, prints the compile summary and writes the plan directory;
// and what `info` shares with it: loading a model, checking its parameter
// count.
//
//===----------------------------------------------------------------------===//
#include "Cli.h"
#include "llcdist/Cost/PlanSimulator.h"
#include "llcdist/Dialect/XF/Analysis/ModelStats.h"
#include "llcdist/Frontend/LoadModel.h"
#include "llcdist/InitAll.h"
#include "llcdist/Pipelines/CompileSummary.h"
#include "llcdist/Pipelines/FitBudget.h"
#include "llcdist/Pipelines/ModelInfo.h"
#include "llcdist/Pipelines/Pipelines.h"
#include "llcdist/Schedule/Render.h"
#include "llcdist/Schedule/Schedule.h"
#include "llcdist/Support/MeshSpec.h"
#include "llcdist/Support/Topology.h"
#include "llcdist/Target/Plan/PlanWriter.h"

#include "llvm/Support/MemoryBuffer.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "Compile.h"
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

using namespace mlir;
using namespace llcdist;
using namespace llcdist::cli;
using json = nlohmann::ordered_json;

/// loadModel, printing its error (an .mlir file's are already reported).
std::optional<LoadedModel> llcdist::cli::loadOrReport(MLIRContext &ctx, llvm::SourceMgr &srcMgr,
                                                      const std::string &path, TrainingShape shape, int64_t dp) {
  std::string err;
  std::optional<LoadedModel> lm = loadModel(ctx, srcMgr, path, shape, dp, err);
  if (!lm && !err.empty())
    error(err);
  return lm;
}

/// Checks the IR's count against the architecture's formula: a mismatch is a
/// compiler bug, never a user error.
bool llcdist::cli::crossCheck(const LoadedModel &lm, const xf::ModelStats &s) {
  if (!lm.config || lm.config->numParameters() == s.parameters)
    return true;
  error(fmt::format("internal error: the IR has {} parameters but the {} "
                    "formula gives {}",
                    s.parameters, archName(lm.config->arch), lm.config->numParameters()));
  return false;
}

namespace {

/// The largest --make-vocab-size-divisible-by accepted.
constexpr int64_t kMaxVocabDivisibleBy = 65536;
/// --seq-len, --micro-batch and --global-batch: far above any real run.
constexpr int64_t kMaxSeqLen = int64_t(1) << 24, kMaxBatch = int64_t(1) << 24;

/// The overlap flags (OVERLAP in the help): what each needs of the mesh,
/// ZeRO and dtype, refused before anything compiles. Resolves
/// --grad-bucket-size (`auto`: Megatron-LM's default for dp).
void checkOverlapFlags(TrainingPipelineOptions &train, const MeshSpec &mesh, const TrainingShape &shape,
                       const std::string &gradBucketText) {
  if (gradBucketText == "auto") {
    train.gradBucketSize = defaultGradBucketSize(mesh.dp);
  } else {
    llvm::StringRef text(gradBucketText);
    if (text.getAsInteger(10, train.gradBucketSize) || train.gradBucketSize < 0)
      throw UsageError{"--grad-bucket-size must be a parameter count >= 0 (0: off) or auto, got '" + gradBucketText +
                       "'"};
  }
  // What each overlap needs of the mesh and ZeRO: the pipeline's own rules (llc-dist-opt applies them too).
  if (std::optional<std::string> e = overlapOptionsError(train))
    throw UsageError{*e};
  // The runtime cannot run a started collective through f32 staging of bf16 buffers yet.
  if (train.gradBucketSize > 0 && shape.dtype == "bf16" && train.gradReduceDtype == "f32")
    throw UsageError{"--grad-bucket-size does not support --grad-reduce-dtype f32 under --dtype bf16 "
                     "yet (the runtime runs a started reduction only in the buffers' dtype): drop one "
                     "of them"};
}

/// The optimizer flags' ranges (torch.optim's own checks), refused before
/// anything compiles, naming the flag (the passes' verifiers would name an op).
void checkOptimizerFlags(const TrainingPipelineOptions &t) {
  if (std::optional<std::string> e = optimizerOptionsError(t))
    throw UsageError{*e};
}

/// The argument of every pass in `pm`, nested pipelines included (read from
/// its textual form: pass names outside the option braces, not the op names
/// that open a nested pipeline).
std::set<std::string> passNamesOf(PassManager &pm) {
  std::string text;
  llvm::raw_string_ostream os(text);
  pm.printAsTextualPipeline(os);
  std::set<std::string> names;
  std::string token;
  int braces = 0;
  for (char ch : text + ",") {
    if (ch == '{' || ch == '}') {
      braces += ch == '{' ? 1 : -1;
      continue;
    }
    if (braces > 0)
      continue;
    if (ch == ',' || ch == '(' || ch == ')' || ch == ' ') {
      if (!token.empty() && ch != '(') // `op(`: a nested pipeline's op
        names.insert(token);
      token.clear();
      continue;
    }
    token += ch;
  }
  return names;
}

/// Prints or dumps the module after each top-level pass.
class IRPrinter : public PassInstrumentation {
public:
  IRPrinter(std::string dumpDir, bool printAll, std::set<std::string> printAfter)
      : dumpDir(std::move(dumpDir)), printAll(printAll), printAfter(std::move(printAfter)) {}

  LogicalResult dump(Operation *module, const std::string &label) {
    if (dumpDir.empty())
      return success();
    std::string file = fmt::format("{}/{:02d}-{}.mlir", dumpDir, counter++, label);
    std::string err;
    auto out = openOutputFile(file, &err);
    if (!out) {
      error(file + ": cannot write: " + err);
      return failure();
    }
    // With locations, as --emit xf: each dump compiles again to the same plan.
    module->print(out->os(), OpPrintingFlags().enableDebugInfo());
    out->os() << "\n"; // as mlir-opt ends its output
    out->keep();
    return success();
  }

  void runAfterPass(Pass *pass, Operation *op) override {
    std::string arg = pass->getArgument().str();
    if (arg.empty())
      return;                 // a nested-pipeline adaptor: its passes report themselves
    while (op->getParentOp()) // a nested pass: show the whole module
      op = op->getParentOp();
    (void)dump(op, arg);
    if (printAll || printAfter.count(arg)) {
      llvm::errs() << "// -----// IR Dump After " << pass->getName() << " (" << arg << ") //----- //\n";
      op->print(llvm::errs());
      llvm::errs() << "\n";
    }
  }

  void checkUnknown(const std::set<std::string> &known) {
    for (const std::string &p : printAfter)
      if (!known.count(p))
        throw UsageError{"--print-ir-after: no pass '" + p + "' in the pipeline (see llc-dist compile --help)"};
  }

private:
  std::string dumpDir;
  bool printAll;
  std::set<std::string> printAfter;
  int counter = 0;
};

/// llc-dist compile, step by step: the flags (parse), what they must
/// satisfy before anything compiles (check), the training pipeline
/// (compile), the plan directory or the xf file (write) and the summary
/// (report). Each step returns the exit code where the command ends there.
class CompileCommand {
public:
  std::optional<int> parse(Args &args);
  std::optional<int> check();
  std::optional<int> compile();
  std::optional<int> write(CompileSummary &summary);
  int report(CompileSummary &summary);

private:
  // --timing: MLIR's timing report, printed when `timingManager` goes (after
  // `rootTimer`, and after everything else: both are destroyed last), the
  // passes nested under "passes".
  mlir::DefaultTimingManager timingManager;
  mlir::TimingScope rootTimer;
  std::string model, output, emit = "plan", format = "text", dumpDir, reshardText = "true", gradBucketText = "0";
  BudgetFlags budgetFlags;
  MeshSpec mesh;
  std::optional<std::string> rankOrderArg; // --rank-order, checked against --mesh after both are read
  TrainingPipelineOptions train;
  std::optional<Topology> topology;
  std::string topologyArg; // --topology as given: with --device, the plan is simulated
  TrainingShape shape;
  bool printAll = false, quiet = false, verifyEach = false, timing = false;
  std::set<std::string> printAfter;
  ValueFlags compileFlags;
  // The memory every rank may use (--memory-budget / --device), and the
  // hardware the written plan's step is predicted on (--device and --topology).
  std::optional<plan::MemoryBudget> budget;
  std::optional<cost::Hardware> hardware;
  std::chrono::steady_clock::time_point t0;
  DialectRegistry registry;
  std::unique_ptr<MLIRContext> ctxOwner;
  llvm::SourceMgr srcMgr;
  std::optional<SourceMgrDiagnosticHandler> diag;
  // The compiled module (in `lm`) and the files llcdist-verify-plan checked,
  // written as they are (not built twice).
  std::optional<LoadedModel> lm;
  std::optional<PlanJson> verifiedPlan;
};

std::optional<int> CompileCommand::parse(Args &args) {
  // Bounds far above any real run (Llama 3: 8,192-token sequences, 2,048 of
  // them per step) that stop a typo before it sizes anything.
  compileFlags.add("--seq-len", &shape.seqLen, 1, kMaxSeqLen)
      .add("--micro-batch", &shape.microBatch, 1, kMaxBatch)
      .add("--global-batch", &shape.globalBatch, 1, kMaxBatch)
      .add("--dtype", &shape.dtype)
      .add("--moe-capacity-factor", &shape.moeCapacityFactor)
      .add("--emit", &emit)
      .add("--optimizer", &train.optimizer)
      .add("--lr-schedule", &train.lrSchedule)
      .add("--lr", &train.lr)
      .add("--min-lr", &train.minLr)
      .add("--warmup", &train.warmup)
      .add("--lr-decay-steps", &train.totalSteps)
      .add("--weight-decay", &train.weightDecay)
      .add("--beta1", &train.beta1)
      .add("--beta2", &train.beta2)
      .add("--eps", &train.eps)
      .add("--momentum", &train.momentum)
      .add("--grad-clip", &train.gradClip)
      .add("--schedule", &train.pipelineSchedule)
      .add("--cp-impl", &train.cpImpl)
      .add("--virtual-stages", &train.virtualStages, 1, 4096)
      .add("--pp-layout", &train.ppLayout)
      .add("--recompute", &train.recompute)
      .add("--zero", &train.zero)
      .add("--grad-reduce-dtype", &train.gradReduceDtype)
      .add("--make-vocab-size-divisible-by", &train.vocabDivisibleBy)
      .add("--reshard-after-forward", &reshardText)
      .add("--grad-bucket-size", &gradBucketText)
      .add("--fsdp-prefetch", &train.fsdpPrefetch)
      .add("--classifier-chunk-rows", &train.classifierChunkRows, 1, int64_t(1) << 40)
      .add("--device", &budgetFlags.device)
      .add("--memory-budget", &budgetFlags.capacity)
      .add("--memory-reserve", &budgetFlags.reserve)
      .add("-o", &output)
      .add("--format", &format)
      .add("--dump-ir-dir", &dumpDir);
  while (!args.empty()) {
    std::string a = args.next();
    if (a == "--help" || a == "-h") {
      llvm::outs() << compileHelp();
      return 0;
    }
    if (auto v = args.value(a, "--mesh")) {
      if (auto err = parseMeshSpec(*v, mesh))
        throw UsageError{*err};
    } else if (auto v = args.value(a, "--topology")) {
      Topology t;
      if (auto err = loadTopology(cost::topologyPath(*v), t)) {
        error(*err);
        return kExitError;
      }
      topology = t;
      topologyArg = *v;
    } else if (auto v = args.value(a, "--rank-order")) {
      rankOrderArg = *v; // checked against the mesh once both are read
    } else if (compileFlags.match(args, a))
      continue;
    else if (a == "--overlap-param-gather")
      train.overlapParamGather = true;
    else if (a == "--sequence-parallel")
      train.sequenceParallel = true;
    else if (a == "--tp-comm-overlap")
      train.tpCommOverlap = true;
    else if (a == "--overlap-p2p")
      train.overlapP2P = true;
    else if (a == "--scatter-gather-p2p")
      train.scatterGatherP2P = true;
    else if (a == "--no-fuse-optimizer")
      train.fuseOptimizer = false;
    else if (a == "--no-fuse-norm")
      train.fuseNorm = false;
    else if (a == "--no-cp-ring-overlap")
      train.cpRingOverlap = false;
    else if (a == "--no-fuse-epilogues")
      train.fuseEpilogues = false;
    else if (a == "--no-ce-grad-in-place")
      train.ceGradInPlace = false;
    else if (a == "--no-fuse-classifier")
      train.fuseClassifier = false;
    else if (a == "--no-packed-qkv")
      train.packedQkv = false;
    else if (a == "--no-fuse-embedding")
      train.fuseEmbedding = false;
    else if (auto v = args.value(a, "--tp-embeddings")) {
      if (*v != "vocab-parallel" && *v != "replicated")
        throw UsageError{"--tp-embeddings must be vocab-parallel or replicated, got '" + *v + "'"};
      train.replicateEmbeddings = *v == "replicated";
    } else if (auto v = args.value(a, "--print-ir-after")) {
      llvm::SmallVector<llvm::StringRef> names;
      llvm::StringRef(*v).split(names, ',', -1, false);
      for (auto n : names)
        printAfter.insert(n.str());
    } else if (a == "--print-ir-after-all")
      printAll = true;
    else if (a == "--quiet")
      quiet = true;
    else if (a == "--verify-each")
      verifyEach = true;
    else if (a == "--timing")
      timing = true;
    else if (a.rfind("-", 0) == 0 && a != "-")
      throw UsageError{"compile: unknown option '" + a + "'"};
    else if (model.empty())
      model = a;
    else
      throw UsageError{"compile: more than one MODEL given ('" + model + "', '" + a + "')"};
  }
  return std::nullopt;
}

std::optional<int> CompileCommand::check() {
  if (model.empty())
    throw UsageError{"compile: missing MODEL (e.g. models/tiny-gpt2.json)"};
  if (emit != "xf" && emit != "plan")
    throw UsageError{"--emit '" + emit + "' is not plan or xf"};
  if (emit == "plan" && (output.empty() || output == "-"))
    throw UsageError{"compile: --emit plan needs -o DIR (the plan directory)"};
  if (emit == "xf" && output.empty())
    output = "-";
  if (mesh.pp == 1 && (train.virtualStages != 1 || !train.ppLayout.empty()))
    throw UsageError{"--virtual-stages and --pp-layout need a pipeline: pp > 1 in --mesh"};
  // A bound well above any real use (Megatron-LM uses 128) that keeps
  // N × tp × the rows far from overflow and a typo from a huge table.
  if (train.vocabDivisibleBy < 1 || train.vocabDivisibleBy > kMaxVocabDivisibleBy)
    throw UsageError{"--make-vocab-size-divisible-by must be in [1, " + std::to_string(kMaxVocabDivisibleBy) +
                     "] (Megatron-LM's default: 128; 1 pads "
                     "only to a multiple of tp), got " +
                     std::to_string(train.vocabDivisibleBy)};
  // -1 is the struct's "torch's default" only when the flag is not given.
  if (compileFlags.given("--weight-decay") && train.weightDecay < 0)
    throw UsageError{fmt::format("--weight-decay must be >= 0 (default: torch's, 0.01 for "
                                 "AdamW, 0 for SGD), got {}",
                                 train.weightDecay)};
  checkOptimizerFlags(train);
  if (auto k = schedule::parseScheduleKind(train.pipelineSchedule); !k)
    throw UsageError{"--schedule: " + k.error().message};
  if (train.gradReduceDtype != "bf16" && train.gradReduceDtype != "f32")
    throw UsageError{"--grad-reduce-dtype must be bf16 or f32, got '" + train.gradReduceDtype + "'"};
  if (reshardText != "true" && reshardText != "false")
    throw UsageError{"--reshard-after-forward must be true or false, got '" + reshardText + "'"};
  train.reshardAfterForward = reshardText == "true";
  if (!train.reshardAfterForward && train.zero != 3)
    throw UsageError{"--reshard-after-forward false only applies to --zero 3 (FSDP)"};
  if (rankOrderArg)
    if (auto err = parseRankOrder(*rankOrderArg, mesh))
      throw UsageError{*err};
  if (train.cpImpl != "all-to-all" && train.cpImpl != "ring")
    throw UsageError{"--cp-impl must be ring or all-to-all, got '" + train.cpImpl + "'"};
  train.mesh = {mesh.dp, mesh.tp, mesh.pp, mesh.cp, mesh.rankOrderStr(), mesh.ep}; // the overlap rules read it
  checkOverlapFlags(train, mesh, shape, gradBucketText);
  if (train.recompute != "none" && train.recompute != "selective" && train.recompute != "full" &&
      train.recompute != "auto")
    throw UsageError{"--recompute must be none, selective, full or auto, got '" + train.recompute + "'"};
  // The memory every rank may use: the capacity (--memory-budget, else the
  // --device's) minus the reserve (--memory-reserve, else the device's).
  if (auto err = resolveMemoryBudget(budgetFlags, budget)) {
    if (err->usage)
      throw UsageError{err->message};
    error(err->message);
    return kExitError;
  }
  if (train.recompute == "auto" && !budget)
    throw UsageError{"--recompute auto picks the least recomputation that fits: it needs "
                     "--device or --memory-budget"};
  if (train.recompute == "auto" && emit != "plan")
    throw UsageError{"--recompute auto needs --emit plan"};
  if (format != "text" && format != "json")
    throw UsageError{"--format must be text or json, got '" + format + "'"};
  // --device and --topology: the written plan's predicted step (llc-dist
  // simulate); both need their "cost" objects, checked before compiling.
  if (emit == "plan" && !budgetFlags.device.empty() && !topologyArg.empty()) {
    hardware.emplace();
    if (auto err = cost::loadHardware(budgetFlags.device, topologyArg, *hardware)) {
      // A device or topology file made for the memory budget or the
      // communication report alone still compiles; it just predicts nothing.
      if (err->find("no 'cost' object") == std::string::npos) {
        error(*err);
        return kExitError;
      }
      llvm::errs() << "llc-dist compile: note: no predicted step: " << *err << "\n";
      hardware.reset();
    }
  }

  return std::nullopt;
}

std::optional<int> CompileCommand::compile() {
  t0 = std::chrono::steady_clock::now();
  // --timing: MLIR's timing report (printed when `timingManager` goes out of
  // scope, after `rootTimer`), the passes nested under "passes".
  timingManager.setEnabled(timing);
  rootTimer = timingManager.getRootScope();
  registerAllDialects(registry);
  ctxOwner = std::make_unique<MLIRContext>(registry);
  MLIRContext &ctx = *ctxOwner;
  ctx.printOpOnDiagnostic(false); // a user error names the model and the field, not the IR
  diag.emplace(srcMgr, &ctx);
  if (!dumpDir.empty()) {
    if (std::error_code ec = llvm::sys::fs::create_directories(dumpDir)) {
      error(dumpDir + ": cannot create the --dump-ir-dir directory: " + ec.message());
      return kExitError;
    }
  }
  // One compilation of the training step with `recompute`; the module stays
  // in `lm`. A pass that fails has reported why, with a location.
  auto compileWith = [&](const std::string &recompute) -> bool {
    {
      mlir::TimingScope loadTimer = rootTimer.nest("load model");
      lm = loadOrReport(ctx, srcMgr, model, shape, mesh.dp);
    }
    if (!lm)
      return false;
    PassManager pm(&ctx, ModuleOp::getOperationName());
    TrainingPipelineOptions t = train;
    t.recompute = recompute;
    verifiedPlan.emplace();
    t.verifiedPlan = &*verifiedPlan;
    if (emit == "xf")
      xf::buildForwardPipeline(pm, t.mesh);
    else
      buildTrainingPipeline(pm, t);
    const std::set<std::string> known = passNamesOf(pm);
    auto printer = std::make_unique<IRPrinter>(dumpDir, printAll, printAfter);
    printer->checkUnknown(known);
    if (failed(printer->dump(*lm->module, "import")))
      return false;
    pm.addInstrumentation(std::move(printer));
    // Verifying the whole module after each of ~15 passes costs as much as
    // a pass on deep models (2,048 layers: 1 s of 6.6), so by default, as
    // clang does, the IR is verified once; a pass that broke it is still
    // caught before anything is written (--verify-each names the pass).
    pm.enableVerifier(verifyEach);
    mlir::TimingScope passTimer = rootTimer.nest("passes");
    pm.enableTiming(passTimer);
    if (failed(pm.run(*lm->module)))
      return false;
    mlir::TimingScope verifyTimer = rootTimer.nest("verify IR");
    return succeeded(mlir::verify(*lm->module));
  };
  // --recompute auto: the least recomputation whose plan fits the budget.
  std::vector<std::string> tried;
  if (train.recompute == "auto") {
    FailureOr<std::string> mode = fitRecompute(
        [&](StringRef recompute) -> FailureOr<ModuleOp> {
          if (!compileWith(recompute.str()))
            return failure();
          return *lm->module;
        },
        *budget, tried);
    if (failed(mode))
      return kExitError;
    train.recompute = *mode;
  } else if (!compileWith(train.recompute)) {
    return kExitError;
  }
  if (budget && emit == "plan" && !fitsBudget(*lm->module, *budget)) {
    error(outOfMemoryError(*lm->module, model, lm->config ? lm->shape : shape, mesh, train, *budget, tried));
    return kExitError;
  }

  return std::nullopt;
}

std::optional<int> CompileCommand::write(CompileSummary &summary) {
  // The forward graph's counts: recorded on the module by llcdist-model-stats.
  FailureOr<xf::ModelStats> s = recordedModelStats(*lm->module);
  if (failed(s) || !crossCheck(*lm, *s))
    return kExitError;
  summary.stats = *s;
  if (emit == "plan") {
    mlir::TimingScope reportTimer = rootTimer.nest("memory report");
    summary.memory = plan::MemoryReport{plan::computeStageMemory(*lm->module), train.recompute, budget};
    reportTimer = rootTimer.nest("pipeline report");
    FailureOr<std::optional<plan::PipelineReport>> pr = plan::computePipelineReport(*lm->module);
    if (failed(pr))
      return kExitError;
    summary.pipeline = *pr;
    std::map<std::string, std::string> extra;
    reportTimer = rootTimer.nest("schedule trace");
    if (summary.pipeline)
      extra["schedule.trace.json"] = schedule::renderChromeTrace(summary.pipeline->simulated);
    // The Hugging Face config the plan was compiled from: checkpoints keep it, and
    // `llc-dist export --hf` writes it as config.json (docs/checkpoints.md).
    if (llvm::StringRef(model).ends_with(".json"))
      if (auto text = llvm::MemoryBuffer::getFile(model))
        extra["model-config.json"] = (*text)->getBuffer().str();
    reportTimer.stop();
    mlir::TimingScope writeTimer = rootTimer.nest("write plan");
    FailureOr<PlanSummary> ps = writePlanDirectory(*lm->module, *verifiedPlan, output, extra);
    writeTimer.stop();
    if (failed(ps))
      return kExitError;
    summary.plan = *ps;
    mlir::TimingScope commTimer = rootTimer.nest("comm report");
    FailureOr<plan::CommReport> cr = plan::computeCommReport(*lm->module);
    if (failed(cr))
      return kExitError;
    summary.comm = *cr;
  } else {
    // Emit atomically: a failed write leaves no partial file behind.
    std::string err;
    auto out = openOutputFile(output, &err);
    if (!out) {
      error(output + ": cannot write: " + err);
      return kExitError;
    }
    // With locations: they name the config field each op came from, and the
    // plan's buffer names and provenance are built from them, so compiling
    // this file again gives the plan the config gives.
    lm->module->print(out->os(), OpPrintingFlags().enableDebugInfo());
    out->os() << "\n";
    if (out->os().has_error()) {
      error(output + ": write failed");
      return kExitError;
    }
    out->keep();
  }
  return std::nullopt;
}

int CompileCommand::report(CompileSummary &summary) {
  summary.compileMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (quiet)
    return 0;

  summary.model = modelName(*lm->module);
  summary.mesh = mesh;
  if (lm->config) {
    summary.shape = lm->shape;
    summary.configVocab = lm->config->vocab;
  }
  summary.emit = emit;
  summary.output = output;
  summary.dumpDir = dumpDir;
  summary.vocabPadding = vocabPaddingOf(*lm->module);
  summary.vocabDivisibleBy = train.vocabDivisibleBy;
  summary.topology = topology;
  if (emit == "plan") {
    summary.gradBuckets = gradBucketsOf(*lm->module);
    summary.gradBucketSize = train.gradBucketSize;
    summary.fsdpPrefetch = fsdpPrefetchOf(*lm->module);
    summary.fsdpPrefetchUnits = train.fsdpPrefetch;
    summary.paramGatherOverlap = paramGatherOverlapOf(*lm->module);
    if (train.overlapParamGather)
      summary.paramGatherSynchronous = programsWithoutParamGatherOverlap(*lm->module);
    summary.tpCommOverlap = tpCommOverlapOf(*lm->module);
    summary.p2pScatterGather = p2pScatterGatherOf(*lm->module);
    summary.fused = fusedOf(*lm->module);
  }
  std::optional<cost::PlanSimResult> predicted;
  if (hardware) {
    cost::SimOptions so;
    so.trace = false;
    so.modelFlopsPerToken = summary.stats.trainingFlopsPerToken();
    predicted.emplace();
    if (auto err = cost::simulatePlan(output, *hardware, so, *predicted)) {
      error(*err);
      return kExitError;
    }
  }
  auto &os = output == "-" ? llvm::errs() : llvm::outs();
  if (format == "json") {
    json j = summary.toJson();
    if (predicted)
      j["predicted"] = predicted->toJson();
    os << j.dump(2) << "\n";
  } else {
    summary.print(os);
    if (predicted)
      os << "predicted (llc-dist simulate):\n" << predicted->text("  ");
  }
  return 0;
}

} // namespace

int llcdist::cli::runCompile(Args &args) {
  CompileCommand command;
  if (std::optional<int> exit = command.parse(args))
    return *exit;
  if (std::optional<int> exit = command.check())
    return *exit;
  if (std::optional<int> exit = command.compile())
    return *exit;
  CompileSummary summary;
  if (std::optional<int> exit = command.write(summary))
    return *exit;
  return command.report(summary);
}
