//===- llc-dist.cpp - the llc-dist driver ---------------------------------===//
//
//   llc-dist compile MODEL [--mesh dp=..,tp=..,pp=..] [--emit xf] [-o OUT]
//   llc-dist info MODEL [--format json]
//
// Only this file exits; everything below it returns errors.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Dialect/Plan/Analysis/CommReport.h"
#include "llcdist/Dialect/Plan/Analysis/PipelineReport.h"
#include "llcdist/Dialect/XF/Analysis/ModelStats.h"
#include "llcdist/Frontend/ImportXF.h"
#include "llcdist/InitAll.h"
#include "llcdist/Pipelines/Pipelines.h"
#include "llcdist/Schedule/Render.h"
#include "llcdist/Schedule/Schedule.h"
#include "llcdist/Support/Device.h"
#include "llcdist/Support/MeshSpec.h"
#include "llcdist/Support/Topology.h"
#include "llcdist/Target/Plan/PlanWriter.h"
#include "llcdist/Verify/PlanComm.h"
#include "llcdist/runtime/Train.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <iostream>
#include <unistd.h>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <variant>
#include <string>
#include <vector>

using namespace mlir;
using namespace llcdist;
using json = nlohmann::ordered_json;

#ifndef LLCDIST_ALLOCATOR
#define LLCDIST_ALLOCATOR "system"
#endif
#ifndef LLCDIST_VERSION
#define LLCDIST_VERSION "dev"
#endif

namespace {

constexpr int kExitError = 1; // bad input, failed compile
constexpr int kExitUsage = 2; // bad command line

const char *kMainHelp = R"(llc-dist: compile a transformer training step for a device mesh

USAGE
  llc-dist <command> [options]

COMMANDS
  compile MODEL   compile MODEL's training step into a plan directory (or xf IR)
  run PLAN        execute a compiled plan: train, log, save parameters
  verify PLAN     check every rank's send/recv and collectives (deadlocks,
                  mismatches) without running anything
  info MODEL      parameter count, layers and training FLOPs per token
  help [COMMAND]  show help (also: llc-dist COMMAND --help)

MODEL is a Hugging Face config.json (GPT2LMHeadModel, LlamaForCausalLM),
e.g. models/llama3-8b.json, or a .mlir file in the xf dialect.

OPTIONS
  --help, -h      show this help
  --version       print the version

Run `llc-dist-opt --help` to run single passes on .mlir files.
)";

const char *kCompileHelp = R"(llc-dist compile MODEL [options] -o OUT

Imports MODEL as an xf forward graph on global shapes and compiles its
training step. Passes: cse, llcdist-attach-mesh, llcdist-model-stats (the
forward graph; --emit xf stops here), then llcdist-pad-vocab, llcdist-autodiff,
llcdist-add-optimizer, [under tp: llcdist-megatron-tp], llcdist-partition,
llcdist-pipeline-split, llcdist-lower-to-plan, llcdist-plan-memory. The same
pipelines run as `llc-dist-opt --llcdist-forward=...` / `--llcdist-train=...`.

SHAPES
  --mesh SPEC            device mesh, e.g. dp=2,tp=4,pp=2 (default dp=1,tp=1,pp=1)
  --sequence-parallel    Megatron's sequence parallelism under tp: norms,
                         residuals and biases on a slice of the sequence;
                         all-gather / reduce-scatter replace all-reduces
  --tp-embeddings vocab-parallel|replicated
                         under tp: Megatron's vocabulary-parallel embedding,
                         LM head and loss (default), or keep them whole
  --make-vocab-size-divisible-by N
                         Megatron-LM's vocabulary padding (default 128): the
                         embedding and LM-head rows are padded to the smallest
                         multiple of N × tp (N alone with --tp-embeddings
                         replicated) >= the vocabulary, so any tp splits it;
                         the loss masks the padding out, and safetensors in
                         and out keep the real vocabulary (llcdist-pad-vocab)
  --rank-order AXES      axes from fastest- to slowest-varying in the rank
                         number (default tp,dp,pp: Megatron's)
  --topology FILE        a node and its network (GPUs per node, NVLink and NIC
                         bandwidths; see topologies/); the nodes follow from
                         the mesh in rank order: the report tells which
                         collectives cross nodes and estimates their time
  --seq-len N            tokens per sequence (default min(max positions, 1024))
  --micro-batch N        sequences per microbatch per dp rank (default 1)
  --global-batch N       sequences per step (default micro-batch × dp);
                         microbatches = global / (micro-batch × dp), the
                         gradient-accumulation steps
  --dtype T              f32 | bf16 | f16 (default f32). bf16 plans are mixed
                         precision: bf16 parameter copies, gradients and
                         activations; f32 master weights, Adam state, norm
                         statistics and loss (the runtime computes in f32);
                         f16 is xf-only (--emit xf)

PIPELINE (pp > 1)
  --schedule S           gpipe | 1f1b | interleaved | zb-h1 (default 1f1b);
                         zb-h1 runs weight gradients (W) apart from input
                         gradients (B) to fill the cool-down bubble
  --virtual-stages V     model chunks per stage (interleaved only; default 1);
                         microbatches must be a multiple of pp
  --pp-layout N,N,..     layers per model chunk in order (pp × V counts), e.g.
                         3,3,2; default: balanced by estimated FLOPs, counting
                         the embedding in the first chunk and the LM head and
                         loss in the last
  The summary shows each stage's chunks, cost, bubble and peak microbatches in
  flight beside the analytic bubble, and the schedule as a text Gantt chart;
  the plan directory gets schedule.trace.json (Chrome trace / Perfetto).

MEMORY
  --recompute none|selective|full|auto
                         activation recomputation: selective re-runs the core
                         attention in the backward, full re-runs each layer
                         from its input; auto picks the least that fits the
                         budget (needs --device or --memory-budget)
  --zero 1|2|3           ZeRO over dp: 1 shards the optimizer state, 2 also
                         the gradients, 3 (FSDP) also the parameters, gathered
                         per layer where used (default 0: off); a parameter
                         whose rows dp does not divide gets padded blocks of
                         ceil(rows / dp) rows
  --reshard-after-forward true|false
                         --zero 3: gather each layer's parameters again for its
                         backward (true, FSDP's default) or keep the forward's
                         copy until then (more memory, a third less gathering)
  --device NAME|FILE     the accelerator every rank runs on (devices/: h100-80gb,
                         a100-80gb, a100-40gb, h200); a plan whose arena exceeds
                         its memory minus its reserve on any rank is an error
                         with the breakdown and every change that could make it
                         fit (recompute, ZeRO, more tp/pp), each compiled, with
                         its exact peak, fastest first
  --memory-budget SIZE   the same with an explicit capacity (80GiB, 72GB, 4096MiB)
  --memory-reserve SIZE  what each rank holds outside the arena (e.g. 6GiB; 0:
                         none), instead of the device file's reserve (CUDA
                         context, cuBLAS/cuDNN workspaces, NCCL buffers per
                         communicator of the plan, fragmentation margin); the
                         arena must fit capacity - reserve
  The summary shows each rank's parameters, gradients, optimizer state,
  activations (peak) and arena, per pipeline stage.

OPTIMIZER (torch.optim semantics)
  --optimizer adamw|sgd  (default adamw)
  --lr X                 peak learning rate (default 1e-3)
  --lr-schedule constant|cosine   linear warmup, then constant or cosine decay
  --warmup N             warmup steps (default 0)
  --lr-decay-steps N     steps of the cosine decay (default 0: the run's --steps)
  --min-lr X             final learning rate of the cosine decay (default 0)
  --weight-decay X       on matrices only, never norms, biases, embeddings
                         (default: torch's, 0.01 for adamw and 0 for sgd)
  --beta1 X --beta2 X --eps X     AdamW (default 0.9, 0.999, 1e-8)
  --momentum X           SGD momentum (default 0)
  --grad-clip X          global-norm clipping threshold, 0 = off (default 0)

OUTPUT
  --emit plan|xf         plan: a plan directory for `llc-dist run` (default);
                         xf: the forward graph as MLIR, with locations;
                         `llc-dist compile FILE.mlir` with the same --mesh
                         gives the plan the config gives
  -o OUT                 the plan directory (required for plan), or the xf
                         file ('-' or absent: stdout)
  --print-ir-after-all   print the IR after every pass to stderr
  --print-ir-after=P,..  print the IR after the named passes (e.g. cse)
  --dump-ir-dir DIR      write 00-import.mlir and one numbered file per pass
  --verify-each          run MLIR's IR verifier after every pass (default:
                         once, after the last; llcdist-verify-plan always
                         checks the plan contract); for debugging a pass
  --format text|json     the summary's format (stderr if the IR goes to stdout)
  --quiet                no summary
)";

const char *kRunHelp = R"(llc-dist run PLAN [options]

Executes a plan directory written by `llc-dist compile` on the CPU backend:
initializes (or loads) the parameters, runs --steps training steps over the
data, prints one progress line per step, and saves the parameters.

OPTIONS
  --steps N              training steps (default 1)
  --data FILE|synthetic  llm.c token file (e.g. data/corpus_train.bin) or
                         deterministic random tokens (default synthetic)
  --shuffle on|off       shuffle the samples of each epoch (default off: the
                         order of docs/plan-format.md / design.md §4)
  --seed S               seed of initialization, shuffling, synthetic data (default 0)
  --init-from W.safetensors   load parameters (Hugging Face names and layouts)
  --save-params OUT.safetensors  save parameters after the run
  --log-json FILE        JSON Lines, one record per step: step, loss, lr,
                         grad_norm, tokens_per_s
  --quiet                no progress output
)";

const char *kInfoHelp = R"(llc-dist info MODEL [options]

Prints the parameter count (counted on the imported IR and checked against
the architecture's formula), layers, and training FLOPs per token:
  training FLOPs/token = 3 × (Σ_linear 2·K·N + Σ_attention 4·S·heads·head_dim)
(backward = 2 × forward; no recomputation; attention counts the full S×S).

OPTIONS
  --seq-len N            sequence length S for the attention FLOPs
                         (default min(max positions, 1024))
  --format text|json     output format (default text)
)";

struct UsageError {
  std::string message;
};

/// A tiny, strict command-line reader: every option must be known.
class Args {
public:
  Args(std::vector<std::string> a) : args(std::move(a)) {}

  bool empty() const { return pos >= args.size(); }
  const std::string &peek() const { return args[pos]; }
  std::string next() { return args[pos++]; }

  /// "--name VALUE" or "--name=VALUE".
  std::optional<std::string> value(const std::string &arg,
                                   const std::string &name) {
    if (arg == name) {
      if (empty())
        throw UsageError{name + " needs a value"};
      return next();
    }
    if (arg.rfind(name + "=", 0) == 0)
      return arg.substr(name.size() + 1);
    return std::nullopt;
  }

private:
  std::vector<std::string> args;
  size_t pos = 0;
};

/// The largest --make-vocab-size-divisible-by accepted.
constexpr int64_t kMaxVocabDivisibleBy = 65536;

int64_t parseInt(const std::string &flag, const std::string &v) {
  char *end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0)
    throw UsageError{flag + " expects an integer, got '" + v + "'"};
  return x;
}

double parseDouble(const std::string &flag, const std::string &v) {
  char *end = nullptr;
  errno = 0;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno != 0)
    throw UsageError{flag + " expects a number, got '" + v + "'"};
  return x;
}

/// Options that store one value: `--name V` or `--name=V` parsed into a
/// variable; one table per command instead of a chain of ifs.
class ValueFlags {
public:
  ValueFlags &add(const char *name, int64_t *dst) { return push(name, dst); }
  ValueFlags &add(const char *name, double *dst) { return push(name, dst); }
  ValueFlags &add(const char *name, std::string *dst) { return push(name, dst); }

  /// Consumes `arg` (and its value) when it names a flag of the table.
  bool match(Args &args, const std::string &arg) const {
    for (const auto &[name, dst] : flags) {
      std::optional<std::string> v = args.value(arg, name);
      if (!v)
        continue;
      if (auto *i = std::get_if<int64_t *>(&dst))
        **i = parseInt(name, *v);
      else if (auto *d = std::get_if<double *>(&dst))
        **d = parseDouble(name, *v);
      else
        **std::get_if<std::string *>(&dst) = *v;
      return true;
    }
    return false;
  }

private:
  template <typename T> ValueFlags &push(const char *name, T *dst) {
    flags.emplace_back(name, dst);
    return *this;
  }
  std::vector<std::pair<std::string, std::variant<int64_t *, double *, std::string *>>> flags;
};

std::string grouped(int64_t n) {
  std::string s = std::to_string(n), out;
  int c = 0;
  for (auto it = s.rbegin(); it != s.rend(); ++it) {
    if (c && c % 3 == 0 && *it != '-')
      out.push_back(',');
    out.push_back(*it);
    ++c;
  }
  return std::string(out.rbegin(), out.rend());
}

std::string sci(double x) { return fmt::format("{:.4g}", x); }

void error(const std::string &msg) {
  llvm::errs() << "llc-dist: error: " << msg << "\n";
}

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// A model loaded from JSON or .mlir, with the config when there is one.
struct LoadedModel {
  OwningOpRef<ModuleOp> module;
  std::optional<ModelConfig> config;
  TrainingShape shape;
};

std::optional<LoadedModel> loadModel(MLIRContext &ctx, llvm::SourceMgr &srcMgr,
                                     const std::string &path,
                                     TrainingShape shape, int64_t dp,
                                     std::string *quietError = nullptr) {
  LoadedModel lm;
  // A hint's compilation (quietError set) keeps its first error instead.
  auto error = [&](const std::string &msg) {
    if (quietError)
      *quietError = msg;
    else
      ::error(msg);
  };
  if (!llvm::sys::fs::exists(path)) {
    error(path + ": no such file (shipped models are in models/, e.g. "
                 "models/gpt2.json)");
    return std::nullopt;
  }
  if (endsWith(path, ".mlir")) {
    lm.module = parseSourceFile<ModuleOp>(path, srcMgr, ParserConfig(&ctx));
    if (!lm.module)
      return std::nullopt; // diagnostics already printed with locations
    return lm;
  }
  ModelConfig cfg;
  if (auto err = loadModelConfig(path, cfg)) {
    error(err->message);
    return std::nullopt;
  }
  if (auto err = resolveTrainingShape(cfg, dp, shape)) {
    error(*err);
    return std::nullopt;
  }
  lm.module = importModel(ctx, cfg, shape, dp);
  if (failed(mlir::verify(*lm.module))) {
    error(path + ": internal error: the imported graph does not verify");
    return std::nullopt;
  }
  lm.config = cfg;
  lm.shape = shape;
  return lm;
}

/// Prints or dumps the module after each top-level pass.
class IRPrinter : public PassInstrumentation {
public:
  IRPrinter(std::string dumpDir, bool printAll, std::set<std::string> printAfter)
      : dumpDir(std::move(dumpDir)), printAll(printAll),
        printAfter(std::move(printAfter)) {}

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
      return; // a nested-pipeline adaptor: its passes report themselves
    while (op->getParentOp()) // a nested pass: show the whole module
      op = op->getParentOp();
    (void)dump(op, arg);
    if (printAll || printAfter.count(arg)) {
      llvm::errs() << "// -----// IR Dump After " << pass->getName() << " ("
                   << arg << ") //----- //\n";
      op->print(llvm::errs());
      llvm::errs() << "\n";
    }
  }

  void checkUnknown(const std::set<std::string> &known) {
    for (const std::string &p : printAfter)
      if (!known.count(p))
        throw UsageError{"--print-ir-after: no pass '" + p +
                         "' in the pipeline (see llc-dist compile --help)"};
  }

private:
  std::string dumpDir;
  bool printAll;
  std::set<std::string> printAfter;
  int counter = 0;
};

json statsJson(const xf::ModelStats &s) {
  json j;
  j["parameters"] = s.parameters;
  j["layers"] = s.layers;
  j["seq_len"] = s.seqLen;
  j["forward_flops_per_token"] = s.forwardFlopsPerToken();
  j["training_flops_per_token"] = s.trainingFlopsPerToken();
  j["linear_flops_per_token"] = s.linearFlopsPerToken;
  j["attention_flops_per_token"] = s.attentionFlopsPerToken;
  j["six_n_flops_per_token"] = 6.0 * double(s.parameters);
  j["formula"] = "training FLOPs/token = 3 × (Σ_linear 2·K·N + Σ_attention "
                 "4·S·heads·head_dim)";
  return j;
}

/// What llcdist-pad-vocab recorded: the real and padded vocabulary and the
/// multiple; nullopt when nothing was padded.
struct VocabPadding {
  int64_t vocab = 0, padded = 0, multiple = 1;
};
std::optional<VocabPadding> vocabPaddingOf(ModuleOp m) {
  auto d = m->getAttrOfType<DictionaryAttr>("xf.vocab_padding");
  if (!d)
    return std::nullopt;
  return VocabPadding{d.getAs<IntegerAttr>("vocab_size").getInt(),
                      d.getAs<IntegerAttr>("padded_vocab_size").getInt(),
                      d.getAs<IntegerAttr>("multiple").getInt()};
}

/// The counts llcdist-model-stats recorded (the graph may since have been
/// lowered), else counted now.
FailureOr<xf::ModelStats> statsOf(ModuleOp m) {
  auto d = m->getAttrOfType<DictionaryAttr>("xf.stats");
  if (!d || !m->hasAttr(plan::kManifestAttr))
    return xf::computeModelStats(m);
  xf::ModelStats s;
  s.parameters = d.getAs<IntegerAttr>("parameters").getInt();
  s.layers = d.getAs<IntegerAttr>("layers").getInt();
  s.linearFlopsPerToken = double(d.getAs<IntegerAttr>("linear_flops_per_token").getInt());
  s.attentionFlopsPerToken =
      double(d.getAs<IntegerAttr>("attention_flops_per_token").getInt());
  if (auto model = m->getAttrOfType<DictionaryAttr>(xf::kModelAttr))
    if (auto sl = model.getAs<IntegerAttr>("seq_len"))
      s.seqLen = sl.getInt();
  return s;
}

/// The analytic volume of a collective, for reports beside the counted one:
/// data parallelism all-reduces the fp32 gradients (4·Ψ_local bytes) once per
/// step; Megatron's tensor parallelism all-reduces b·s·h activations: each
/// layer's two row-parallel outputs forward and two column-parallel input
/// gradients backward, plus the vocab-parallel embedding forward and the LM
/// head's input gradient backward — (4L + 2) per microbatch.
struct Analytic {
  std::string formula;
  double payloadBytes = 0;
  int64_t calls = -1; ///< -1: not predicted
};

/// What the analytic volumes need to know about a plan, read once.
struct PlanFacts {
  bool bf16 = false;          ///< mixed precision: bf16 gradients and activations
  bool vocabParallel = false; ///< a vocabulary-parallel LM head and loss
  bool sequenceParallel = false;
  bool fullRecompute = false;
  int64_t tp = 1;
  /// From xf.model: micro-batch, sequence, hidden size, layers, microbatches.
  std::optional<std::array<int64_t, 5>> bshLM;
  int64_t headDim = 0;
  bool kvBias = false; ///< the k and v projections have biases
};

PlanFacts planFacts(ModuleOp m) {
  PlanFacts f;
  if (auto man = m->getAttrOfType<DictionaryAttr>(plan::kManifestAttr)) {
    if (auto md = man.getAs<DictionaryAttr>("model"))
      f.bf16 = md.getAs<StringAttr>("dtype") && md.getAs<StringAttr>("dtype").getValue() == "bf16";
    if (auto mesh = man.getAs<DictionaryAttr>("mesh"))
      f.tp = mesh.getAs<IntegerAttr>("tp").getInt();
  }
  m.walk([&](plan::KernelOp k) {
    f.vocabParallel |= k.getKernel() == "cross_entropy_fwd" && k.getParams().get("shard_axis");
    // Sequence parallelism reduce-scatters activations (ZeRO's are gradients).
    auto payload = k->getAttrOfType<StringAttr>("plan.payload");
    f.sequenceParallel |= k.getKernel() == "reduce_scatter" && payload &&
                          payload.getValue() == "activations";
  });
  auto rc = m->getAttrOfType<StringAttr>("xf.recompute");
  f.fullRecompute = rc && rc.getValue() == "full";
  if (auto model = m->getAttrOfType<DictionaryAttr>(xf::kModelAttr)) {
    auto get = [&](StringRef k) { return model.getAs<IntegerAttr>(k).getInt(); };
    f.bshLM = std::array<int64_t, 5>{get("micro_batch"), get("seq_len"), get("hidden_size"),
                                     get("num_layers"), get("microbatches")};
    if (auto hd = model.getAs<IntegerAttr>("head_dim"))
      f.headDim = hd.getInt();
  }
  m.walk([&](plan::ParamOp p) { f.kvBias |= p.getName().ends_with("self_attn.k_proj.bias"); });
  return f;
}

Analytic analytic(const plan::CollectiveEntry &e, const plan::CommReport &r,
                  const PlanFacts &f) {
  int64_t localParams = e.stage >= 0 ? r.localParametersPerStage[e.stage] : r.localParameters;
  if (StringRef(e.reason).starts_with("ZeRO"))
    return {}; // per-parameter blocks: the totals are in docs/memory.md
  if (e.payload == "gradients")
    return f.bf16 ? Analytic{"2·Ψ (bf16 gradients of this rank's parameters)",
                             2.0 * double(localParams), 1}
                  : Analytic{"4·Ψ (fp32 gradients of this rank's parameters)",
                             4.0 * double(localParams), 1};
  if (e.payload == "loss")
    return {"4 (one f32)", 4.0, 1};
  if (e.payload == "kv-replica gradients") {
    // kv-head replication: each rank's one kv head, k and v, in every layer.
    if (!f.bshLM || e.stage >= 0)
      return {}; // per-stage layer counts: no prediction
    const int64_t h = (*f.bshLM)[2], L = (*f.bshLM)[3], d = f.headDim;
    const double el = f.bf16 ? 2.0 : 4.0;
    return {std::string("2·L·d_head·") + (f.kvBias ? "(h + 1)" : "h") + "·" + (f.bf16 ? "2" : "4") +
                " (k and v gradients of this rank's kv head)",
            el * 2.0 * double(L * d * (h + (f.kvBias ? 1 : 0))), 1};
  }
  if ((e.payload != "activations" && e.kind != "send") || !f.bshLM)
    return {};
  auto [b, s, h, L, M] = *f.bshLM;
  // Activations travel in the plan's activation dtype: bf16 (2 bytes) or f32.
  const std::string el = f.bf16 ? "2" : "4";
  double bsh = (f.bf16 ? 2.0 : 4.0) * double(b * s * h);
  StringRef reason = e.reason;
  if (e.kind == "send") {
    // Pipeline borders: the residual stream of one microbatch; under
    // sequence parallelism only this rank's slice of the sequence travels.
    if (e.payload == "activations" || e.payload == "activation gradients")
      return {f.sequenceParallel ? "b·s·h·" + el + " / tp (the sequence-parallel slice)"
                                 : "b·s·h·" + el,
              f.sequenceParallel ? bsh / double(f.tp) : bsh, -1};
    return {};
  }
  if (e.stage >= 0) // per-stage layer counts: payloads only
    L = -1;
  if (reason.starts_with("a row-parallel")) // full recomputation repeats the forward's
    return {"b·s·h·" + el + ", 2 per layer per microbatch (attention and MLP outputs)" +
                (f.fullRecompute ? std::string(", twice (full recompute)") : std::string()),
            bsh, L < 0 ? -1 : 2 * L * M * (f.fullRecompute ? 2 : 1)};
  if (reason.starts_with("a column-parallel"))
    return {f.vocabParallel
                ? "b·s·h·" + el + ", 2 per layer + the LM head, per microbatch (input gradients)"
                : "b·s·h·" + el + ", 2 per layer per microbatch (input gradients)",
            bsh, L < 0 ? -1 : (2 * L + (f.vocabParallel ? 1 : 0)) * M};
  if (reason.starts_with("a vocabulary-parallel embedding"))
    return {"b·s·h·" + el + ", once per microbatch", bsh, M};
  return {};
}

/// Which link a collective's group uses, and the ring time at its bandwidth.
struct LinkEstimate {
  bool crossesNodes = false;
  double gbs = 0, ms = 0;
};

LinkEstimate estimate(const plan::CollectiveEntry &e, const MeshSpec &mesh,
                      const Topology &topo) {
  LinkEstimate l;
  l.crossesNodes = axisCrossesNodes(mesh, e.axis, topo);
  l.gbs = l.crossesNodes ? topo.interNodeGBs : topo.intraNodeGBs;
  l.ms = e.ringBytesPerStep() / (l.gbs * 1e9) * 1e3;
  return l;
}

json commJson(const plan::CommReport &r, const MeshSpec &mesh,
              const std::optional<Topology> &topo, ModuleOp m) {
  json list = json::array();
  PlanFacts facts = planFacts(m);
  for (const plan::CollectiveEntry &e : r.entries) {
    Analytic a = analytic(e, r, facts);
    const std::string &formula = a.formula;
    double bytes = a.payloadBytes;
    json extra = json::object();
    if (topo) {
      LinkEstimate l = estimate(e, mesh, *topo);
      extra = {{"crosses_nodes", l.crossesNodes},
               {"link_gb_s", l.gbs},
               {"estimated_ms_per_step", l.ms}};
    }
    list.push_back({{"kind", e.kind},
                    {"axis", e.axis},
                    {"group_size", e.groupSize},
                    {"payload", e.payload},
                    {"calls_per_step", e.callsPerStep},
                    {"payload_bytes", e.payloadBytes},
                    {"analytic_payload_bytes", bytes},
                    {"analytic_calls_per_step", a.calls},
                    {"analytic_formula", formula},
                    {"ring_bytes_per_rank_per_step", e.ringBytesPerStep()},
                    {"reason", e.reason}});
    for (auto &[k, v] : extra.items())
      list.back()[k] = v;
    if (e.stage >= 0)
      list.back()["stage"] = e.stage;
  }
  return list;
}

void printComm(llvm::raw_ostream &os, const plan::CommReport &r, const MeshSpec &mesh,
               const std::optional<Topology> &topo, ModuleOp m) {
  if (r.entries.empty()) {
    os << "  collectives: none (one rank)\n";
    return;
  }
  if (topo) {
    int64_t world = mesh.worldSize(), nodes = topo->nodesFor(world);
    int64_t last = world - (nodes - 1) * topo->gpusPerNode;
    os << fmt::format("  topology {}: {} ranks on {} node{} of {} GPUs{} (rank order {}); "
                      "{:g} GB/s per GPU inside a node, {:g} GB/s between nodes ({} NICs x "
                      "{:g} GB/s / {} GPUs)\n",
                      topo->name, world, nodes, nodes == 1 ? "" : "s", topo->gpusPerNode,
                      last < topo->gpusPerNode ? fmt::format(", the last using {}", last) : "",
                      mesh.rankOrderStr(), topo->intraNodeGBs, topo->interNodeGBs,
                      topo->nicsPerNode, topo->nicGBs, topo->gpusPerNode);
  }
  os << "  collectives per step, per rank (ring algorithms: all-reduce sends "
        "2(n-1)/n of the payload):\n";
  bool staged = !r.entries.empty() && r.entries.front().stage >= 0;
  os << fmt::format("    {}{:<11} {:<4} {:>3} {:>6} {:>14} {:>16}  {}\n",
                    staged ? "stage " : "", "kind", "axis", "n", "calls", "payload B",
                    "ring B/step", "analytic payload");
  PlanFacts facts = planFacts(m);
  for (const plan::CollectiveEntry &e : r.entries) {
    Analytic a = analytic(e, r, facts);
    bool same = double(e.payloadBytes) == a.payloadBytes &&
                (a.calls < 0 || a.calls == e.callsPerStep);
    os << fmt::format("    {}{:<11} {:<4} {:>3} {:>6} {:>14} {:>16.0f}  {}{}\n",
                      staged ? fmt::format("{:>5} ", e.stage) : "", e.kind, e.axis, e.groupSize, e.callsPerStep, grouped(e.payloadBytes),
                      e.ringBytesPerStep(), a.formula,
                      a.formula.empty() ? "" : (same ? " = same" : " ≠ MISMATCH"));
    if (topo) {
      LinkEstimate l = estimate(e, mesh, *topo);
      os << fmt::format("      {} at {:g} GB/s per GPU: ~{:.3f} ms per step\n",
                        l.crossesNodes ? "crosses nodes" : "inside a node", l.gbs,
                        l.ms);
    }
  }
}

json pipelineJson(const plan::PipelineReport &p) {
  json stages = json::array();
  for (int64_t s = 0; s < p.stages; ++s) {
    const schedule::StageStats &st = p.simulated.perStage[s];
    json chunks = json::array();
    for (int64_t c = s; c < int64_t(p.chunkFlops.size()); c += p.stages)
      chunks.push_back({{"chunk", c},
                        {"layers", p.layersPerChunk[c]},
                        {"training_flops_per_microbatch", p.chunkFlops[c]}});
    std::string actions;
    for (const schedule::Action &a : p.emitted.perStage[s])
      actions += (actions.empty() ? "" : " ") + schedule::label(a, p.virtualStages);
    stages.push_back({{"stage", s},
                      {"chunks", chunks},
                      {"training_flops_per_microbatch", p.stageFlops[s]},
                      {"bubble_over_ideal", st.bubbleOverIdeal},
                      {"idle_fraction", st.idleFraction},
                      {"peak_microbatches_in_flight", p.peakInFlight[s]},
                      {"actions", actions}});
  }
  return {{"schedule", p.schedule},
          {"stages", p.stages},
          {"virtual_stages", p.virtualStages},
          {"microbatches", p.microbatches},
          {"imbalance", p.imbalance},
          {"costs", {{"forward", p.costs.forward},
                     {"backward", p.costs.backward},
                     {"weight", p.costs.weight}}},
          {"bubble_over_ideal", p.simulated.bubbleOverIdeal},
          {"analytic_bubble_over_ideal", p.analyticBubble},
          {"per_stage", stages}};
}

void printPipeline(llvm::raw_ostream &os, const plan::PipelineReport &p,
                   const std::string &output) {
  os << fmt::format("  pipeline: {} stages × {} chunk{} per stage, {} microbatches, "
                    "schedule {}\n",
                    p.stages, p.virtualStages, p.virtualStages > 1 ? "s" : "",
                    p.microbatches, p.schedule);
  os << "    stage  chunks (layers)            training FLOPs/microbatch  bubble  "
        "peak in flight\n";
  for (int64_t s = 0; s < p.stages; ++s) {
    std::string chunks;
    for (int64_t c = s; c < int64_t(p.chunkFlops.size()); c += p.stages)
      chunks += fmt::format("{}{} ({})", chunks.empty() ? "" : ", ", c, p.layersPerChunk[c]);
    os << fmt::format("    {:>5}  {:<26} {:>25}  {:>6.3f}  {:>14}\n", s, chunks,
                      sci(p.stageFlops[s]), p.simulated.perStage[s].bubbleOverIdeal,
                      p.peakInFlight[s]);
  }
  std::string formula = p.schedule == "interleaved" ? "(1/v)(p-1)/m"
                        : p.schedule == "zb-h1"     ? "ZB-H1's (p-1)(B+max(F-W,0))/(m(F+B+W))"
                                                    : "(p-1)/m";
  os << fmt::format("    imbalance {:.1f}% (slowest stage / mean - 1); bubble over "
                    "ideal compute {:.3f} (emitted schedule, F=1 B={:g}{}) vs "
                    "analytic {} = {:.3f}\n",
                    100 * p.imbalance, p.simulated.bubbleOverIdeal, p.costs.backward,
                    p.emitted.splitBackward ? " W=1" : "", formula, p.analyticBubble);
  std::string gantt = schedule::renderGantt(p.simulated);
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
  if (output != "-")
    os << "    Chrome trace (Perfetto): " << output << "/schedule.trace.json\n";
}

std::string modelName(ModuleOp m) {
  if (auto d = m->getAttrOfType<DictionaryAttr>(xf::kModelAttr))
    if (auto n = d.getAs<StringAttr>("name"))
      return n.str();
  return m.getName() ? m.getName()->str() : "<model>";
}

/// Checks the IR's count against the architecture's formula: a mismatch is a
/// compiler bug, never a user error.
bool crossCheck(const LoadedModel &lm, const xf::ModelStats &s) {
  if (!lm.config || lm.config->numParameters() == s.parameters)
    return true;
  error(fmt::format("internal error: the IR has {} parameters but the {} "
                    "formula gives {}",
                    s.parameters, archName(lm.config->arch),
                    lm.config->numParameters()));
  return false;
}

int runInfo(Args &args) {
  std::string model, format = "text";
  TrainingShape shape;
  while (!args.empty()) {
    std::string a = args.next();
    if (a == "--help" || a == "-h") {
      llvm::outs() << kInfoHelp;
      return 0;
    }
    if (auto v = args.value(a, "--seq-len"))
      shape.seqLen = parseInt("--seq-len", *v);
    else if (auto v = args.value(a, "--format"))
      format = *v;
    else if (a.rfind("-", 0) == 0)
      throw UsageError{"info: unknown option '" + a + "'"};
    else if (model.empty())
      model = a;
    else
      throw UsageError{"info: more than one MODEL given ('" + model + "', '" +
                       a + "')"};
  }
  if (model.empty())
    throw UsageError{"info: missing MODEL (e.g. models/gpt2.json)"};
  if (format != "text" && format != "json")
    throw UsageError{"--format must be text or json, got '" + format + "'"};

  DialectRegistry registry;
  registerAllDialects(registry);
  MLIRContext ctx(registry);
  llvm::SourceMgr srcMgr;
  SourceMgrDiagnosticHandler diag(srcMgr, &ctx);
  auto lm = loadModel(ctx, srcMgr, model, shape, /*dp=*/1);
  if (!lm)
    return kExitError;
  FailureOr<xf::ModelStats> s = xf::computeModelStats(*lm->module);
  if (failed(s) || !crossCheck(*lm, *s))
    return kExitError;

  if (format == "json") {
    json j;
    j["model"] = modelName(*lm->module);
    j["file"] = model;
    if (lm->config) {
      const ModelConfig &c = *lm->config;
      j["architecture"] = hfArchitecture(c.arch);
      j["hidden_size"] = c.hidden;
      j["num_heads"] = c.heads;
      j["num_kv_heads"] = c.kvHeads;
      j["head_dim"] = c.headDim;
      j["intermediate_size"] = c.intermediate;
      j["vocab_size"] = c.vocab;
      // The padded rows of a plan at tp=1 with the default divisor (128).
      j["padded_vocab_size_tp1"] = (c.vocab + 127) / 128 * 128;
      j["tie_word_embeddings"] = c.tieEmbeddings;
    }
    json stats = statsJson(*s);
    for (auto &[k, v] : stats.items())
      j[k] = v;
    llvm::outs() << j.dump(2) << "\n";
    return 0;
  }
  auto &os = llvm::outs();
  os << fmt::format("model             {}", modelName(*lm->module));
  if (lm->config)
    os << fmt::format(" ({})", hfArchitecture(lm->config->arch));
  os << "\n";
  os << fmt::format("parameters        {}\n", grouped(s->parameters));
  os << fmt::format("layers            {}\n", s->layers);
  if (lm->config) {
    const ModelConfig &c = *lm->config;
    os << fmt::format("hidden            {} (heads {}, kv heads {}, head_dim "
                      "{}, intermediate {})\n",
                      c.hidden, c.heads, c.kvHeads, c.headDim, c.intermediate);
    os << fmt::format("vocab             {}{}\n", c.vocab,
                      c.tieEmbeddings ? " (tied embeddings)" : "");
    // What a plan pads it to (llcdist-pad-vocab), at the default
    // --make-vocab-size-divisible-by 128; the counts above stay the real ones.
    if (c.vocab % 128 != 0)
      os << fmt::format("                  padded in plans to a multiple of 128 × tp "
                        "(--make-vocab-size-divisible-by): {} at tp=1, {} at tp=8\n",
                        (c.vocab + 127) / 128 * 128, (c.vocab + 1023) / 1024 * 1024);
  }
  os << fmt::format("seq len           {}\n", s->seqLen);
  os << fmt::format("training FLOPs    {} per token\n",
                    sci(s->trainingFlopsPerToken()));
  os << "  = 3 × (Σ_linear 2·K·N + Σ_attention 4·S·heads·head_dim)\n";
  os << fmt::format("  = 3 × ({} linear + {} attention)\n",
                    sci(s->linearFlopsPerToken), sci(s->attentionFlopsPerToken));
  os << fmt::format("  (6N approximation: {})\n", sci(6.0 * s->parameters));
  return 0;
}

/// One stage's (program's) memory per rank, from llcdist-plan-memory.
struct StageMemory {
  int64_t stage = 0;
  std::map<std::string, int64_t> persistent; ///< by buffer kind
  int64_t transientPeak = 0, transientLivePeak = 0, arena = 0;
  /// At the moment of the live peak: activations, communication, workspace.
  std::map<std::string, int64_t> atPeak;
  /// The mesh axes this stage communicates on: one NCCL communicator each.
  std::vector<std::string> commAxes;
  int64_t communicators() const { return int64_t(commAxes.size()); }
  /// Bytes of one persistent kind (param, grad, optimizer_state, ...), or 0.
  int64_t kind(const std::string &k) const { return lookup(persistent, k); }
  /// Inputs, metrics and the persistent buffers' alignment padding.
  int64_t other() const { return kind("input") + kind("metric") + kind("padding"); }
  /// Bytes of one class at the live peak, or 0.
  int64_t peak(const std::string &cls) const { return lookup(atPeak, cls); }
  /// How close the arena layout gets to the bytes live at once (1 = exact).
  double placedOverLive() const {
    return transientLivePeak ? double(transientPeak) / double(transientLivePeak) : 1.0;
  }

private:
  static int64_t lookup(const std::map<std::string, int64_t> &m, const std::string &k) {
    auto it = m.find(k);
    return it == m.end() ? 0 : it->second;
  }
};

std::vector<StageMemory> memoryOf(ModuleOp m) {
  std::vector<StageMemory> out;
  std::vector<std::vector<std::string>> comms = plan::communicatorAxesPerProgram(m);
  for (auto program : m.getOps<plan::ProgramOp>()) {
    StageMemory sm;
    sm.stage = int64_t(out.size());
    sm.commAxes = comms[out.size()];
    sm.arena = program.getArenaBytes() ? int64_t(*program.getArenaBytes()) : 0;
    if (auto d = program->getAttrOfType<DictionaryAttr>("plan.memory"))
      for (NamedAttribute n : d) {
        int64_t v = cast<IntegerAttr>(n.getValue()).getInt();
        if (n.getName() == "transient_peak")
          sm.transientPeak = v;
        else if (n.getName() == "transient_live_peak")
          sm.transientLivePeak = v;
        else if (n.getName().strref().starts_with("peak_"))
          sm.atPeak[n.getName().str().substr(5)] = v;
        else
          sm.persistent[n.getName().str()] = v;
      }
    out.push_back(sm);
  }
  return out;
}

/// Bytes for people: GiB, MiB or KiB, whichever reads best.
std::string gib(int64_t bytes) {
  double b = double(bytes);
  if (b >= 1073741824.0)
    return fmt::format("{:.2f} GiB", b / 1073741824.0);
  if (b >= 1048576.0)
    return fmt::format("{:.2f} MiB", b / 1048576.0);
  return fmt::format("{:.1f} KiB", b / 1024.0);
}

/// The memory each rank's arena may use: the capacity (the --device's
/// memory, or --memory-budget) minus what the process holds outside the
/// arena: --memory-reserve, else the device file's reserve, whose NCCL part
/// grows with the communicators the stage's ranks join; none without either.
struct Budget {
  int64_t capacity = 0;
  std::string name;                    ///< where the capacity comes from
  std::optional<DeviceReserve> device; ///< the --device file's reserve
  std::optional<int64_t> fixed;        ///< --memory-reserve
  std::string fixedText;

  int64_t reserve(int64_t communicators) const {
    if (fixed)
      return *fixed;
    return device ? device->bytes(capacity, communicators) : 0;
  }
  int64_t usable(int64_t communicators) const { return capacity - reserve(communicators); }
  bool fits(const StageMemory &sm) const { return sm.arena <= usable(sm.communicators()); }

  /// "80.00 GiB − reserve 3.07 GiB = 76.93 GiB", or the capacity alone.
  std::string text(const StageMemory &sm) const {
    int64_t r = reserve(sm.communicators());
    if (!fixed && !device)
      return gib(capacity);
    return fmt::format("{} - reserve {} = {}", gib(capacity), gib(r), gib(capacity - r));
  }
  /// What the reserve is made of, for a stage that joins `axes`.
  std::string reserveBreakdown(const StageMemory &sm) const {
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
        gib(d.cudaContextBytes), gib(d.cublasWorkspaceBytes), gib(d.cudnnWorkspaceBytes),
        sm.communicators(), gib(d.ncclPerCommunicatorBytes()), sm.communicators(),
        sm.communicators() == 1 ? "" : "s", axes.empty() ? "" : ": " + axes,
        gib(d.ncclBuffsizeBytes), d.ncclChannels, d.ncclPeers,
        gib(d.fragmentationBytes(capacity)), 100 * d.fragmentationFraction);
  }
};

bool fitsBudget(ModuleOp m, const Budget &budget) {
  for (const StageMemory &sm : memoryOf(m))
    if (!budget.fits(sm))
      return false;
  return true;
}
std::string mib(int64_t bytes) { return fmt::format("{:.2f}", double(bytes) / 1048576.0); }

/// parameters | gradients | optimizer state | activations (peak) | inputs, metrics
std::string breakdown(const StageMemory &sm) {
  return fmt::format("parameters {} | gradients {} | optimizer state {} | activations and "
                     "buffers (peak) {} | inputs, metrics, alignment {}",
                     gib(sm.kind("param")), gib(sm.kind("grad")),
                     gib(sm.kind("optimizer_state")), gib(sm.transientPeak),
                     gib(sm.other()));
}

/// A plan that does not fit: every stage over the budget with its breakdown,
/// and what would make it fit.
std::string oomMessage(const std::vector<StageMemory> &memory, const Budget &budget,
                       const std::vector<std::string> &tried) {
  const StageMemory *first = nullptr;
  for (const StageMemory &sm : memory)
    if (!budget.fits(sm) && !first)
      first = &sm;
  std::string msg = fmt::format("the plan does not fit: {} allows {} per rank", budget.name,
                                first ? budget.text(*first) : gib(budget.capacity));
  if (!tried.empty()) {
    msg += " (--recompute auto tried";
    for (const std::string &t : tried)
      msg += " " + t;
    msg += ")";
  }
  for (const StageMemory &sm : memory)
    if (!budget.fits(sm)) {
      msg += fmt::format("\n  stage {} needs {} per rank: {}", sm.stage, gib(sm.arena),
                         breakdown(sm));
      if (budget.reserve(sm.communicators()) > 0) {
        msg += fmt::format("\n    reserve {}: {}", gib(budget.reserve(sm.communicators())),
                           budget.reserveBreakdown(sm));
        if (sm.arena <= budget.capacity)
          msg += fmt::format("\n    it would fit the nominal {} but not {} once the reserve "
                             "is taken out (--memory-reserve overrides the reserve)",
                             gib(budget.capacity), gib(budget.usable(sm.communicators())));
      }
    }
  return msg;
}

/// Per rank per step, of the busiest stage: what its collectives and sends
/// move with NCCL's ring algorithms (CollectiveEntry::ringBytesPerStep).
double ringBytesPerRank(ModuleOp m) {
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

/// A change that could make a plan fit, compiled in memory.
struct Hint {
  std::string flags;  ///< what to pass instead, e.g. "--zero 3"
  std::string note;   ///< e.g. "(same 64 GPUs)"
  MeshSpec mesh;
  TrainingPipelineOptions train;
  /// The ordering rule of docs/memory.md: 0 ZeRO (no extra compute; its
  /// collectives overlap the step), 1 selective recompute (the core attention
  /// again: a few percent of the FLOPs), 2 more tp (activation all-reduces on
  /// the critical path of every layer), 3 more pipeline stages (a larger
  /// bubble), 4 full recompute (one more forward per layer, ~+33 % FLOPs),
  /// 5 combinations; within a class, by the compiled plan's communication per
  /// rank per step.
  int costClass = 0;
  // Results.
  bool compiled = false;
  std::string failure;
  int64_t peak = 0;
  bool fits = false;
  double ringBytes = 0;
};

/// Compiles `h` in a context of its own: nothing is printed or written. The
/// pipeline stops before llcdist-verify-plan (memory does not depend on it).
void compileHint(Hint &h, const std::string &model, const TrainingShape &shape,
                 const Budget &budget) {
  DialectRegistry registry;
  registerAllDialects(registry);
  MLIRContext ctx(registry, MLIRContext::Threading::DISABLED);
  ctx.printOpOnDiagnostic(false);
  llvm::SourceMgr srcMgr;
  ScopedDiagnosticHandler quiet(&ctx, [&](Diagnostic &d) {
    if (d.getSeverity() == DiagnosticSeverity::Error && h.failure.empty())
      h.failure = d.str();
    return success();
  });
  std::string err;
  std::optional<LoadedModel> lm = loadModel(ctx, srcMgr, model, shape, h.mesh.dp, &err);
  if (!lm) {
    h.failure = err.empty() ? h.failure : err;
    return;
  }
  PassManager pm(&ctx, ModuleOp::getOperationName());
  TrainingPipelineOptions t = h.train;
  t.mesh = {h.mesh.dp, h.mesh.tp, h.mesh.pp, h.mesh.rankOrderStr()};
  t.verifyPlan = false;
  {
    static std::mutex building;
    std::lock_guard<std::mutex> lock(building);
    buildTrainingPipeline(pm, t);
  }
  if (failed(pm.run(*lm->module))) {
    if (h.failure.empty())
      h.failure = "the compilation failed";
    return;
  }
  h.compiled = true;
  h.fits = true;
  for (const StageMemory &sm : memoryOf(*lm->module)) {
    h.peak = std::max(h.peak, sm.arena);
    h.fits &= budget.fits(sm);
  }
  h.ringBytes = ringBytesPerRank(*lm->module);
}

/// The changes worth trying on a plan that does not fit: the stronger
/// recomputation modes, the higher ZeRO stages (dp > 1), twice the tp and
/// twice the pp (taking the GPUs from dp when it is even, else asking for
/// twice the GPUs) — each compiled, in parallel, and ordered fastest first.
std::vector<Hint> memoryHints(const std::string &model, const TrainingShape &shape,
                              const MeshSpec &mesh, const TrainingPipelineOptions &train,
                              const Budget &budget) {
  std::vector<Hint> hints;
  auto add = [&](std::string flags, int costClass, auto edit) {
    Hint h;
    h.flags = std::move(flags);
    h.mesh = mesh;
    h.train = train;
    h.costClass = costClass;
    edit(h);
    hints.push_back(std::move(h));
  };
  if (train.recompute == "none")
    add("--recompute selective", 1, [](Hint &h) { h.train.recompute = "selective"; });
  if (train.recompute != "full")
    add("--recompute full", 4, [](Hint &h) { h.train.recompute = "full"; });
  if (mesh.dp > 1)
    for (int64_t z = train.zero + 1; z <= 3; ++z)
      add(fmt::format("--zero {}", z), 0, [z](Hint &h) {
        h.train.zero = z;
        h.train.reshardAfterForward = true;
      });
  auto reshape = [&](const char *axis) {
    MeshSpec m = mesh;
    int64_t &deg = std::string(axis) == "tp" ? m.tp : m.pp;
    deg *= 2;
    bool same = mesh.dp % 2 == 0;
    if (same)
      m.dp /= 2;
    add("--mesh " + m.str(), std::string(axis) == "tp" ? 2 : 3, [&](Hint &h) {
      h.mesh = m;
      h.note = same ? fmt::format("(same {} GPUs)", mesh.worldSize())
                    : fmt::format("({} GPUs)", m.worldSize());
      if (std::string(axis) == "pp")
        h.train.ppLayout.clear(); // balanced over the new stages
      if (h.mesh.dp == 1) {
        h.train.zero = 0; // nothing to shard over
        h.train.reshardAfterForward = true;
      }
    });
  };
  reshape("tp");
  reshape("pp");

  // Each hint is a whole compilation: run them side by side. Building a
  // pipeline registers pass options (llvm::cl), so that part is serialized.
  unsigned threads = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(),
                                                     unsigned(hints.size())));
  auto runAll = [&](std::vector<Hint> &list) {
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
  bool anyFits = llvm::any_of(hints, [](const Hint &h) { return h.fits; });
  if (!anyFits && (train.recompute != "full" || (mesh.dp > 1 && train.zero < 3))) {
    std::vector<Hint> combo(1);
    Hint &h = combo[0];
    h.mesh = mesh;
    h.train = train;
    h.train.recompute = "full";
    std::string flags = "--recompute full";
    if (mesh.dp > 1) {
      h.train.zero = 3;
      h.train.reshardAfterForward = true;
      flags = "--zero 3 " + flags;
    }
    h.flags = flags;
    h.costClass = 5;
    runAll(combo);
    hints.push_back(h);
  }
  std::stable_sort(hints.begin(), hints.end(), [](const Hint &a, const Hint &b) {
    if (a.compiled != b.compiled)
      return a.compiled;
    if (a.costClass != b.costClass)
      return a.costClass < b.costClass;
    return a.ringBytes < b.ringBytes;
  });
  return hints;
}

std::string hintsMessage(const std::vector<Hint> &hints, const Budget &budget,
                         double ringBytesNow, double seconds) {
  std::string msg = fmt::format(
      "\n  to fit, each change compiled (peak = the largest stage's arena per rank; fastest "
      "first: ZeRO, selective recompute, more tp, more pp, full recompute; ties by "
      "communication per rank per step; {} compilations in {:.1f} s):",
      hints.size(), seconds);
  size_t width = 0;
  for (const Hint &h : hints)
    width = std::max(width, h.flags.size() + (h.note.empty() ? 0 : h.note.size() + 1));
  for (const Hint &h : hints) {
    std::string what = h.flags + (h.note.empty() ? "" : " " + h.note);
    if (!h.compiled) {
      msg += fmt::format("\n    {:<{}}  not possible: {}", what, width, h.failure);
      continue;
    }
    double delta = h.ringBytes - ringBytesNow;
    std::string comm = std::fabs(delta) < 1024 ? "the same communication"
                       : fmt::format("communication {}{} per rank per step",
                                     delta < 0 ? "-" : "+", gib(int64_t(std::fabs(delta))));
    msg += fmt::format("\n    {:<{}}  peak {:>10}  {:<13} {}", what, width, gib(h.peak),
                       h.fits ? "fits" : "does not fit", comm);
  }
  auto best = llvm::find_if(hints, [](const Hint &h) { return h.fits; });
  if (best != hints.end())
    msg += fmt::format("\n  the fastest that fits {}: {}{}", budget.name, best->flags,
                       best->note.empty() ? "" : " " + best->note);
  else
    msg += "\n  none of them fits alone; combine them or add GPUs";
  return msg;
}

int runCompile(Args &args) {
  std::string model, output, emit = "plan", format = "text", dumpDir, deviceName, budgetText,
      reserveText, reshardText = "true";
  MeshSpec mesh;
  TrainingPipelineOptions train;
  std::optional<Topology> topology;
  TrainingShape shape;
  bool printAll = false, quiet = false, verifyEach = false;
  std::set<std::string> printAfter;
  ValueFlags compileFlags;
  compileFlags.add("--seq-len", &shape.seqLen)
      .add("--micro-batch", &shape.microBatch)
      .add("--global-batch", &shape.globalBatch)
      .add("--dtype", &shape.dtype)
      .add("--emit", &emit)
      .add("--optimizer", &train.optimizer)
      .add("--lr-schedule", &train.schedule)
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
      .add("--virtual-stages", &train.virtualStages)
      .add("--pp-layout", &train.ppLayout)
      .add("--recompute", &train.recompute)
      .add("--zero", &train.zero)
      .add("--make-vocab-size-divisible-by", &train.vocabDivisibleBy)
      .add("--reshard-after-forward", &reshardText)
      .add("--device", &deviceName)
      .add("--memory-budget", &budgetText)
      .add("--memory-reserve", &reserveText)
      .add("-o", &output)
      .add("--format", &format)
      .add("--dump-ir-dir", &dumpDir);
  while (!args.empty()) {
    std::string a = args.next();
    if (a == "--help" || a == "-h") {
      llvm::outs() << kCompileHelp;
      return 0;
    }
    if (auto v = args.value(a, "--mesh")) {
      std::vector<std::string> order = mesh.rankOrder;
      if (auto err = parseMeshSpec(*v, mesh))
        throw UsageError{*err};
      mesh.rankOrder = order;
    } else if (auto v = args.value(a, "--topology")) {
      Topology t;
      if (auto err = loadTopology(*v, t)) {
        error(*err);
        return kExitError;
      }
      topology = t;
    } else if (auto v = args.value(a, "--rank-order")) {
      if (auto err = parseRankOrder(*v, mesh))
        throw UsageError{*err};
    } else if (compileFlags.match(args, a))
      continue;
    else if (a == "--sequence-parallel")
      train.sequenceParallel = true;
    else if (auto v = args.value(a, "--tp-embeddings")) {
      if (*v != "vocab-parallel" && *v != "replicated")
        throw UsageError{"--tp-embeddings must be vocab-parallel or replicated, got '" +
                         *v + "'"};
      train.replicateEmbeddings = *v == "replicated";
    }
    else if (auto v = args.value(a, "--print-ir-after")) {
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
    else if (a.rfind("-", 0) == 0 && a != "-")
      throw UsageError{"compile: unknown option '" + a + "'"};
    else if (model.empty())
      model = a;
    else
      throw UsageError{"compile: more than one MODEL given ('" + model +
                       "', '" + a + "')"};
  }
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
    throw UsageError{"--make-vocab-size-divisible-by must be in [1, " +
                     std::to_string(kMaxVocabDivisibleBy) + "] (Megatron-LM's default: 128; 1 pads "
                     "only to a multiple of tp), got " + std::to_string(train.vocabDivisibleBy)};
  if (auto k = schedule::parseScheduleKind(train.pipelineSchedule); !k)
    throw UsageError{"--schedule: " + k.error().message};
  if (reshardText != "true" && reshardText != "false")
    throw UsageError{"--reshard-after-forward must be true or false, got '" + reshardText + "'"};
  train.reshardAfterForward = reshardText == "true";
  if (!train.reshardAfterForward && train.zero != 3)
    throw UsageError{"--reshard-after-forward false only applies to --zero 3 (FSDP)"};
  if (train.recompute != "none" && train.recompute != "selective" &&
      train.recompute != "full" && train.recompute != "auto")
    throw UsageError{"--recompute must be none, selective, full or auto, got '" +
                     train.recompute + "'"};
  // The memory every rank may use: the capacity (--memory-budget, else the
  // --device's) minus the reserve (--memory-reserve, else the device's).
  std::optional<Budget> budget;
  if (!deviceName.empty()) {
    DeviceSpec dev;
    if (auto err = loadDevice(deviceName, dev)) {
      error(*err);
      return kExitError;
    }
    budget = Budget{dev.memoryBytes, fmt::format("{} ({})", dev.id, dev.name), dev.reserve};
  }
  if (!budgetText.empty()) {
    std::optional<int64_t> b = parseByteSize(budgetText);
    if (!b)
      throw UsageError{"--memory-budget '" + budgetText +
                       "': expected a size like 80GiB, 72GB, 4096MiB or a byte count"};
    if (!budget)
      budget = Budget{};
    budget->capacity = *b;
    budget->name = "--memory-budget " + budgetText;
  }
  if (!reserveText.empty()) {
    std::optional<int64_t> r = parseByteSize(reserveText, /*allowZero=*/true);
    if (!r)
      throw UsageError{"--memory-reserve '" + reserveText +
                       "': expected a size like 6GiB, 512MiB, 0 or a byte count"};
    if (!budget)
      throw UsageError{"--memory-reserve is taken out of a capacity: it needs --device or "
                       "--memory-budget"};
    if (*r >= budget->capacity)
      throw UsageError{"--memory-reserve " + reserveText + " is not smaller than the " +
                       budget->name + " capacity (" + gib(budget->capacity) + ")"};
    budget->fixed = *r;
    budget->fixedText = reserveText;
  }
  if (train.recompute == "auto" && !budget)
    throw UsageError{"--recompute auto picks the least recomputation that fits: it needs "
                     "--device or --memory-budget"};
  if (train.recompute == "auto" && emit != "plan")
    throw UsageError{"--recompute auto needs --emit plan"};
  if (format != "text" && format != "json")
    throw UsageError{"--format must be text or json, got '" + format + "'"};

  auto t0 = std::chrono::steady_clock::now();
  DialectRegistry registry;
  registerAllDialects(registry);
  MLIRContext ctx(registry);
  ctx.printOpOnDiagnostic(false); // a user error names the model and the field, not the IR
  llvm::SourceMgr srcMgr;
  SourceMgrDiagnosticHandler diag(srcMgr, &ctx);
  if (!dumpDir.empty()) {
    if (std::error_code ec = llvm::sys::fs::create_directories(dumpDir)) {
      error(dumpDir + ": cannot create the --dump-ir-dir directory: " +
            ec.message());
      return kExitError;
    }
  }
  train.mesh = {mesh.dp, mesh.tp, mesh.pp, mesh.rankOrderStr()};
  // One compilation of the training step with `recompute`; the module stays
  // in `lm`. A pass that fails has reported why, with a location.
  std::optional<LoadedModel> lm;
  // The files llcdist-verify-plan checked, written as they are (not built twice).
  std::optional<PlanJson> verifiedPlan;
  auto compileWith = [&](const std::string &recompute) -> bool {
    lm = loadModel(ctx, srcMgr, model, shape, mesh.dp);
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
    std::set<std::string> known;
    for (Pass &p : pm.getPasses())
      known.insert(p.getArgument().str());
    if (emit == "plan")
      known.insert("llcdist-plan-memory"); // nested on plan.program
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
    return succeeded(pm.run(*lm->module)) && succeeded(mlir::verify(*lm->module));
  };
  // --recompute auto: the least recomputation whose plan fits the budget.
  std::vector<std::string> tried;
  if (train.recompute == "auto") {
    for (const char *mode : {"none", "selective", "full"}) {
      if (!compileWith(mode))
        return kExitError;
      train.recompute = mode;
      if (fitsBudget(*lm->module, *budget))
        break;
      tried.push_back(mode);
    }
  } else if (!compileWith(train.recompute)) {
    return kExitError;
  }
  std::vector<StageMemory> memory = memoryOf(*lm->module);
  if (budget && emit == "plan" && !fitsBudget(*lm->module, *budget)) {
    auto h0 = std::chrono::steady_clock::now();
    std::vector<Hint> hints = memoryHints(model, lm->config ? lm->shape : shape, mesh, train,
                                          *budget);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - h0).count();
    error(oomMessage(memory, *budget, tried) +
          hintsMessage(hints, *budget, ringBytesPerRank(*lm->module), seconds));
    return kExitError;
  }

  // The forward graph's counts: recorded on the module by llcdist-model-stats.
  FailureOr<xf::ModelStats> s = statsOf(*lm->module);
  if (failed(s) || !crossCheck(*lm, *s))
    return kExitError;

  std::optional<PlanSummary> planSummary;
  std::optional<plan::CommReport> comm;
  std::optional<plan::PipelineReport> pipeline;
  if (emit == "plan") {
    FailureOr<std::optional<plan::PipelineReport>> pr =
        plan::computePipelineReport(*lm->module);
    if (failed(pr))
      return kExitError;
    pipeline = *pr;
    std::map<std::string, std::string> extra;
    if (pipeline)
      extra["schedule.trace.json"] = schedule::renderChromeTrace(pipeline->simulated);
    FailureOr<PlanSummary> ps = writePlanDirectory(*lm->module, *verifiedPlan, output, extra);
    if (failed(ps))
      return kExitError;
    planSummary = *ps;
    FailureOr<plan::CommReport> cr = plan::computeCommReport(*lm->module);
    if (failed(cr))
      return kExitError;
    comm = *cr;
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
  double ms = std::chrono::duration<double, std::milli>(
                  std::chrono::steady_clock::now() - t0)
                  .count();
  if (quiet)
    return 0;

  auto &os = output == "-" ? llvm::errs() : llvm::outs();
  if (format == "json") {
    json j;
    j["model"] = modelName(*lm->module);
    j["mesh"] = {{"dp", mesh.dp}, {"tp", mesh.tp}, {"pp", mesh.pp}};
    j["world_size"] = mesh.worldSize();
    if (lm->config) {
      j["seq_len"] = lm->shape.seqLen;
      j["micro_batch"] = lm->shape.microBatch;
      j["global_batch"] = lm->shape.globalBatch;
      j["microbatches"] = lm->shape.microbatches(mesh.dp);
      j["dtype"] = lm->shape.dtype;
    }
    j["emit"] = emit;
    j["output"] = output;
    j["compile_ms"] = ms;
    j["stats"] = statsJson(*s);
    if (emit == "plan") {
      // The real vocabulary beside the padded one (equal without padding).
      auto pad = vocabPaddingOf(*lm->module);
      int64_t vocab = lm->config ? lm->config->vocab : (pad ? pad->vocab : 0);
      j["vocab"] = {{"vocab_size", pad ? pad->vocab : vocab},
                    {"padded_vocab_size", pad ? pad->padded : vocab},
                    {"make_vocab_size_divisible_by", train.vocabDivisibleBy}};
    }
    if (comm)
      j["collectives"] = commJson(*comm, mesh, topology, *lm->module);
    if (topology)
      j["topology"] = {{"name", topology->name},
                       {"gpus_per_node", topology->gpusPerNode},
                       {"nodes", topology->nodesFor(mesh.worldSize())},
                       {"intra_node_gb_s", topology->intraNodeGBs},
                       {"nics_per_node", topology->nicsPerNode},
                       {"nic_gb_s", topology->nicGBs},
                       {"inter_node_gb_s", topology->interNodeGBs}};
    if (planSummary)
      j["plan"] = {{"buffers", planSummary->buffers},
                   {"kernels", planSummary->kernels},
                   {"params", planSummary->params},
                   {"arena_bytes", planSummary->arenaBytes},
                   {"arena_bytes_per_stage", planSummary->arenaBytesPerProgram}};
    if (pipeline)
      j["pipeline"] = pipelineJson(*pipeline);
    if (emit == "plan") {
      json mem = json::array();
      for (const StageMemory &sm : memory) {
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
      j["recompute"] = train.recompute;
      if (budget) {
        json usable = json::array(), reserve = json::array();
        for (const StageMemory &sm : memory) {
          usable.push_back(budget->usable(sm.communicators()));
          reserve.push_back(budget->reserve(sm.communicators()));
        }
        j["memory_budget"] = {{"bytes", budget->capacity},
                              {"from", budget->name},
                              {"reserve_bytes_per_stage", reserve},
                              {"usable_bytes_per_stage", usable}};
        if (!memory.empty())
          j["memory_budget"]["reserve"] = budget->reserveBreakdown(memory.front());
      }
    }
    os << j.dump(2) << "\n";
    return 0;
  }
  os << fmt::format("llc-dist: compiled {} for mesh {} ({} ranks) in {:.1f} ms\n",
                    modelName(*lm->module), mesh.str(), mesh.worldSize(), ms);
  os << fmt::format("  parameters {} | layers {} | training FLOPs/token {}\n",
                    grouped(s->parameters), s->layers,
                    sci(s->trainingFlopsPerToken()));
  if (auto pad = vocabPaddingOf(*lm->module))
    os << fmt::format("  vocabulary {} padded to {} rows (a multiple of {}: "
                      "--make-vocab-size-divisible-by {}{}); the loss masks the {} "
                      "padding columns, safetensors keep {}\n",
                      grouped(pad->vocab), grouped(pad->padded), pad->multiple,
                      train.vocabDivisibleBy,
                      pad->multiple != train.vocabDivisibleBy
                          ? fmt::format(" × tp {}", pad->multiple / train.vocabDivisibleBy)
                          : std::string(),
                      pad->padded - pad->vocab, grouped(pad->vocab));
  if (lm->config)
    os << fmt::format("  seq len {} | micro-batch {} | global batch {} "
                      "({} microbatches) | dtype {}\n",
                      lm->shape.seqLen, lm->shape.microBatch,
                      lm->shape.globalBatch, lm->shape.microbatches(mesh.dp),
                      lm->shape.dtype);
  if (planSummary)
    os << fmt::format("  plan: {} kernels, {} buffers, {} parameters, arena "
                      "{:.1f} MiB\n",
                      planSummary->kernels, planSummary->buffers,
                      planSummary->params, planSummary->arenaBytes / 1048576.0);
  if (emit == "plan") {
    os << fmt::format("  memory per rank (MiB){}: parameters + gradients + optimizer state + "
                      "activations and buffers (peak; most live at once) + inputs, metrics, "
                      "alignment = arena\n",
                      train.recompute != "none" ? ", recompute " + train.recompute : "");
    for (const StageMemory &sm : memory) {
      os << fmt::format("    {}{} + {} + {} + {} ({}) + {} = {}{}\n"
                        "      at the live peak: activations {}, communication buffers {}, "
                        "workspace {}; placed / live {:.3f}\n",
                        memory.size() > 1 ? fmt::format("stage {}: ", sm.stage) : "",
                        mib(sm.kind("param")), mib(sm.kind("grad")),
                        mib(sm.kind("optimizer_state")), mib(sm.transientPeak),
                        mib(sm.transientLivePeak), mib(sm.other()), mib(sm.arena),
                        budget ? fmt::format("  (fits {}: {})", budget->name, budget->text(sm)) : "",
                        mib(sm.peak("activations")), mib(sm.peak("communication")),
                        mib(sm.peak("workspace")), sm.placedOverLive());
      if (budget && budget->reserve(sm.communicators()) > 0)
        os << fmt::format("      reserved outside the arena: {} = {}\n",
                          gib(budget->reserve(sm.communicators())),
                          budget->reserveBreakdown(sm));
    }
  }
  if (pipeline)
    printPipeline(os, *pipeline, output);
  if (comm)
    printComm(os, *comm, mesh, topology, *lm->module);
  if (!dumpDir.empty())
    os << "  IR after each pass: " << dumpDir << "/\n";
  if (output != "-")
    os << "  wrote " << output << (emit == "plan" ? "/" : "") << "\n";
  return 0;
}

const char *kVerifyHelp = R"(llc-dist verify PLAN [options]

Checks a plan directory's communication across all ranks before anything
runs: executes every rank's send/recv and collectives symbolically (with
the runtime's semantics: eager sends, blocking receives, collectives as
barriers) and reports a send without its recv (or the reverse), sizes,
tags or microbatches that differ, a collective that some member of its
group skips or issues with another size, and any cyclic wait (deadlock),
naming the ranks, the action and op indices and the ops' provenance.
`llc-dist compile` runs the same check (llcdist-verify-plan) before it
writes a plan. Exit status 0: ok; 1: a problem (or an unreadable plan).

OPTIONS
  --max-errors N         report up to N problems (default 1: the first is
                         the one to fix; later ones are often its echoes)
  --all-ranks            check every rank; by default dp and tp are capped at
                         4 (every rank of a stage runs the same program, so
                         the smaller mesh asks every question the full one
                         does, at a cost that does not grow with dp and tp;
                         rank numbers in messages are then the smaller mesh's)
  --format text|json     output format (default text)
)";

int runVerify(Args &args) {
  std::string dir, format = "text";
  int64_t maxErrors = 1, maxAxis = 4;
  ValueFlags flags;
  flags.add("--max-errors", &maxErrors).add("--format", &format);
  while (!args.empty()) {
    std::string a = args.next();
    if (a == "--help" || a == "-h") {
      llvm::outs() << kVerifyHelp;
      return 0;
    }
    if (flags.match(args, a))
      continue;
    if (a == "--all-ranks") {
      maxAxis = 0;
      continue;
    }
    if (a.rfind("-", 0) == 0)
      throw UsageError{"verify: unknown option '" + a + "'"};
    if (!dir.empty())
      throw UsageError{"verify: more than one PLAN given ('" + dir + "', '" + a + "')"};
    dir = a;
  }
  if (dir.empty())
    throw UsageError{"verify: missing PLAN (a directory written by llc-dist compile -o)"};
  if (maxErrors < 1)
    throw UsageError{"--max-errors must be >= 1"};
  if (format != "text" && format != "json")
    throw UsageError{"--format must be text or json, got '" + format + "'"};
  auto plan = rt::loadPlan(dir);
  if (!plan.isOk()) {
    error(plan.status().toString());
    return kExitError;
  }
  verify::VerifyResult r = verify::verifyPlan(plan.value(), maxErrors, maxAxis);
  const rt::Manifest &man = plan->manifest;
  int64_t checked = man.worldSize();
  std::string sub;
  if (maxAxis > 0 && (man.meshDp > maxAxis || man.meshTp > maxAxis)) {
    int64_t dp = std::min(man.meshDp, maxAxis), tp = std::min(man.meshTp, maxAxis);
    checked = dp * tp * man.meshPp;
    sub = fmt::format(" (checked on the dp={},tp={},pp={} sub-mesh; --all-ranks checks all {})",
                      dp, tp, man.meshPp, man.worldSize());
  }
  if (format == "json") {
    json errors = json::array();
    for (const verify::VerifyError &e : r.errors) {
      json events = json::array();
      for (const verify::EventRef &ev : e.events)
        events.push_back({{"rank", ev.rank}, {"event", ev.index}});
      errors.push_back({{"kind", verify::errorKindName(e.kind)},
                        {"message", e.message},
                        {"events", events},
                        {"notes", e.notes}});
    }
    llvm::outs() << json({{"plan", dir},
                          {"ok", r.ok()},
                          {"ranks", plan->manifest.worldSize()},
                          {"ranks_checked", checked},
                          {"events", r.eventsTotal},
                          {"events_completed", r.eventsCompleted},
                          {"errors", errors}})
                        .dump(2)
                 << "\n";
    return r.ok() ? 0 : kExitError;
  }
  if (r.ok()) {
    llvm::outs() << fmt::format("llc-dist verify: {}: ok: {} communication events on {} "
                                "ranks match (sends and receives, collectives per "
                                "group) and none waits forever{}\n",
                                dir, r.eventsTotal, checked, sub);
    return 0;
  }
  error(dir + sub + ": " + r.str());
  return kExitError;
}

int runRun(Args &args) {
  rt::RunOptions o;
  int64_t seed = 0;
  std::string shuffle = "off";
  ValueFlags runFlags;
  runFlags.add("--steps", &o.steps)
      .add("--data", &o.data)
      .add("--shuffle", &shuffle)
      .add("--seed", &seed)
      .add("--init-from", &o.initFrom)
      .add("--save-params", &o.saveParams)
      .add("--log-json", &o.logJson);
  while (!args.empty()) {
    std::string a = args.next();
    if (a == "--help" || a == "-h") {
      llvm::outs() << kRunHelp;
      return 0;
    }
    if (runFlags.match(args, a))
      continue;
    if (a == "--quiet")
      o.quiet = true;
    else if (a.rfind("-", 0) == 0)
      throw UsageError{"run: unknown option '" + a + "'"};
    else if (o.planDir.empty())
      o.planDir = a;
    else
      throw UsageError{"run: more than one PLAN given ('" + o.planDir + "', '" +
                       a + "')"};
  }
  if (o.planDir.empty())
    throw UsageError{"run: missing PLAN (a directory written by llc-dist compile -o)"};
  if (o.steps < 0)
    throw UsageError{"--steps must be >= 0"};
  if (shuffle != "on" && shuffle != "off")
    throw UsageError{"--shuffle must be on or off, got '" + shuffle + "'"};
  o.shuffle = shuffle == "on";
  o.seed = static_cast<uint64_t>(seed);
  o.progressIsTty = isatty(fileno(stdout));
  rt::Status st = rt::runTraining(o, std::cout);
  if (!st.isOk()) {
    std::cout.flush();
    error(st.toString());
    return kExitError;
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> argv_(argv + 1, argv + argc);
  Args args(argv_);
  try {
    if (args.empty()) {
      llvm::errs() << kMainHelp;
      return kExitUsage;
    }
    std::string cmd = args.next();
    if (cmd == "--help" || cmd == "-h") {
      llvm::outs() << kMainHelp;
      return 0;
    }
    if (cmd == "help") {
      std::string what = args.empty() ? "" : args.next();
      llvm::outs() << (what == "compile" ? kCompileHelp
                       : what == "info"  ? kInfoHelp
                       : what == "run"   ? kRunHelp
                       : what == "verify" ? kVerifyHelp
                                         : kMainHelp);
      return 0;
    }
    if (cmd == "--version") {
      llvm::outs() << "llc-dist " << LLCDIST_VERSION << " (MLIR "
                   << LLVM_VERSION_STRING << ", allocator " << LLCDIST_ALLOCATOR << ")\n";
      return 0;
    }
    if (cmd == "compile")
      return runCompile(args);
    if (cmd == "info")
      return runInfo(args);
    if (cmd == "run")
      return runRun(args);
    if (cmd == "verify")
      return runVerify(args);
    throw UsageError{"unknown command '" + cmd +
                     "' (commands: compile, run, verify, info, help)"};
  } catch (const UsageError &e) {
    llvm::errs() << "llc-dist: error: " << e.message << "\n"
                 << "Run 'llc-dist --help' for usage.\n";
    return kExitUsage;
  }
}
