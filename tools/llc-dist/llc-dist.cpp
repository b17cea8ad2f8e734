//===- llc-dist.cpp - the llc-dist driver ---------------------------------===//
//
//   llc-dist compile MODEL [--mesh dp=..,tp=..,pp=..] [--emit xf] [-o OUT]
//   llc-dist info MODEL [--format json]
// and main; `verify`, `run` and `diagnose` are Verify.cpp's, Run.cpp's and
// Diagnose.cpp's, and what the
// subcommands share is Cli.h's.
//
// Only the driver's files exit; everything below them returns errors.
//
//===----------------------------------------------------------------------===//
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
#include "Cli.h"

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
using json = nlohmann::ordered_json;

#ifndef LLCDIST_ALLOCATOR
#define LLCDIST_ALLOCATOR "system"
#endif
#ifndef LLCDIST_VERSION
#define LLCDIST_VERSION "dev"
#endif

using namespace llcdist::cli;

namespace {

const char *kMainHelp = R"(llc-dist: compile a transformer training step for a device mesh

USAGE
  llc-dist <command> [options]

COMMANDS
  compile MODEL   compile MODEL's training step into a plan directory (or xf IR)
  run PLAN        execute a compiled plan: train, log, save parameters,
                  checkpoint and resume (on the same or another mesh)
  export CKPT     a checkpoint as a Hugging Face model directory (--hf OUT),
                  or what it holds (--info)
  verify PLAN     check every rank's send/recv and collectives (deadlocks,
                  mismatches) without running anything
  diagnose DIR    read a hung or failed run's flight recorder dumps: which
                  rank never reached which collective, and why it is there
  simulate PLAN   predict a plan's step on a device and topology: step time,
                  MFU, bubble, exposed communication (--trace: a timeline)
  plan MODEL      choose dp/tp/pp and every other knob for N GPUs: the
                  analytic search, the best few compiled and simulated
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
llcdist-pipeline-split, llcdist-lower-to-plan, [--grad-bucket-size:
llcdist-plan-grad-buckets], [--fsdp-prefetch: llcdist-plan-fsdp-prefetch],
[--overlap-param-gather: llcdist-plan-overlap-param-gather],
[--tp-comm-overlap: llcdist-plan-sp-overlap], [--overlap-p2p: llcdist-plan-p2p-overlap],
llcdist-plan-fuse-norm (unless --no-fuse-norm), llcdist-plan-fuse-epilogues
(unless --no-fuse-epilogues), llcdist-plan-ce-grad-in-place (unless
--no-ce-grad-in-place), llcdist-plan-fuse-classifier (unless
--no-fuse-classifier), llcdist-plan-packed-qkv (unless --no-packed-qkv),
llcdist-plan-fuse-embedding (unless --no-fuse-embedding),
llcdist-plan-fuse-optimizer (unless
--no-fuse-optimizer), llcdist-plan-memory. The same pipelines run as `llc-dist-opt --llcdist-forward=...` / `--llcdist-train=...`.

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
  --grad-reduce-dtype T  bf16 | f32 (default bf16): how a bf16 plan reduces
                         its bf16 gradients over dp (and ZeRO's, kv-head
                         replicas', SP's): bf16 as NCCL does (every partial
                         sum rounded to bf16, 2 bytes per element) or f32
                         (Megatron's --accumulate-allreduce-grads-in-fp32:
                         summed in f32 and rounded once, 4 bytes per
                         element). Other bf16 collectives always run in bf16

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

OVERLAP (asynchronous plans)
  --grad-bucket-size N|auto
                         dp > 1: overlap the gradient all-reduce with the last
                         microbatch's backward, in buckets (PyTorch DDP's,
                         Megatron-LM's): the gradients are grouped in buckets
                         of at least N parameters in the order the backward
                         completes them, and each bucket's all-reduce starts on
                         the comm queue as soon as it is complete; the update
                         waits for them (llcdist-plan-grad-buckets). auto:
                         Megatron-LM's default, max(40M, 1M × dp); 0: off, one
                         synchronous all-reduce before the update (default 0).
                         With --zero 1 each gradient's reduce-scatter starts with
                         its bucket; with --zero 2 or 3 every microbatch's
                         reduce-scatters start where they are, a bucket waited
                         once the next one is complete. On a pipeline each
                         chunk's last backward starts its chunk's buckets (a
                         tied embedding's gradient stays synchronous). The
                         summary lists the buckets.
  --fsdp-prefetch N      --zero 3: start the parameter all-gathers of the next
                         N units (a transformer layer each; the embeddings and
                         the final norm their own) on the comm queue while the
                         current unit computes, in forward and backward, each
                         waited just before its parameter's first use
                         (llcdist-plan-fsdp-prefetch; PyTorch FSDP2's forward
                         and backward prefetch, whose default is 1). 0: off,
                         each gather synchronous before its use (default 0).
                         The summary lists the gathers started ahead.
  --overlap-param-gather --zero 1|2: start the all-gather of the updated
                         parameter blocks at the beginning of the next step (on
                         the comm queue) and wait for each just before the
                         parameter's first use in the first microbatch's
                         forward (of its chunk, on a pipeline), instead of
                         synchronously after the update
                         (llcdist-plan-overlap-param-gather; Megatron-LM's
                         --overlap-param-gather, off by default as there). An
                         f32 plan's master value becomes the rank's block and
                         the forward reads a whole copy. A stage holding a
                         tied parameter (gpt2's embedding on a pipeline) keeps
                         its gathers synchronous (the summary lists the
                         stages overlapped).
  --tp-comm-overlap      with --sequence-parallel: start its all-gathers and
                         reduce-scatters on the comm queue and overlap them
                         with the kernels that do not depend on them
                         (Megatron-LM's --tp-comm-overlap, bulk): in the
                         backward the re-gather of a layer input with the
                         kernels before its weight-gradient GEMM, and the
                         input gradient's reduce-scatter with that layer's
                         weight-gradient GEMM (llcdist-plan-sp-overlap).
                         Default off. The summary says what overlaps.
  --overlap-p2p          pp > 1: start the pipeline sends and receives on the
                         comm queue (Megatron-LM's overlap_p2p_comm, within an
                         action): a send right after its payload is written,
                         the kernels that do not feed it (the backward's weight
                         gradients) running while it is in flight; a receive
                         waited just before its first reader
                         (llcdist-plan-p2p-overlap). Default off.
  --no-fuse-norm         keep the residual add and the norm after it, and a
                         norm's weight gradient, input gradient and the
                         residual's add, as separate kernels (default:
                         llcdist-plan-fuse-norm makes each one kernel,
                         add_layer_norm_fwd / layer_norm_bwd and the RMSNorm
                         forms; the same numbers). The summary says what fused.
  --no-fuse-epilogues    keep each linear layer's bias gradient apart from its
                         weight gradient, and the GELU apart from the linear
                         before it (default: llcdist-plan-fuse-epilogues makes
                         them linear_bwd_weight with db, linear_fwd with gelu
                         and linear_bwd_input with gelu_x, cuBLASLt's epilogues
                         of the GEMMs; the same numbers on the CPU). The
                         summary says what fused.
  --no-ce-grad-in-place  give the cross entropy's gradient a buffer of its own
                         (default: llcdist-plan-ce-grad-in-place writes it
                         over the logits, which nothing reads after it: one
                         [tokens, vocabulary] buffer less; the same numbers).
  --no-fuse-classifier   keep the LM head, the cross entropy and their backward
                         as five kernels over the whole [tokens, vocabulary]
                         logits (default: llcdist-plan-fuse-classifier makes
                         them one classifier op over chunks of token rows,
                         where a microbatch's backward follows its forward;
                         the same loss, dw summed over the chunks)
  --classifier-chunk-rows N
                         token rows per classifier chunk (default: as many as
                         keep the chunk's logits within 128 MiB)
  --no-packed-qkv        keep the split copies of the QKV GEMM's output and of
                         the attention's gradients (default:
                         llcdist-plan-packed-qkv makes the attention read q, k,
                         v from the packed buffer and write dq, dk, dv into
                         one; the same numbers).
  --no-fuse-embedding    keep the position embedding apart from the token
                         embedding (default: llcdist-plan-fuse-embedding adds
                         it in the token embedding's kernel, and its gradient
                         in the token embedding's backward; the same numbers).
  --no-fuse-optimizer    keep one optimizer update per parameter and one cast
                         per bf16 copy (default: llcdist-plan-fuse-optimizer
                         makes them one adamw_multi / sgd_multi per group of
                         equal hyperparameters and one cast_multi: one launch
                         each; the same numbers). The summary says what fused.

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
  --timing               print where the compile time went to stderr: each
                         pass (nested passes under their program) and the
                         summary and plan writing after them (MLIR's
                         -mlir-timing report; wall time)
  --format text|json     the summary's format (stderr if the IR goes to stdout)
  --quiet                no summary
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

/// The largest --make-vocab-size-divisible-by accepted.
constexpr int64_t kMaxVocabDivisibleBy = 65536;
/// --seq-len, --micro-batch and --global-batch: far above any real run.
constexpr int64_t kMaxSeqLen = int64_t(1) << 24, kMaxBatch = int64_t(1) << 24;

/// The overlap flags (OVERLAP in the help): what each needs of the mesh,
/// ZeRO and dtype, refused before anything compiles. Resolves
/// --grad-bucket-size (`auto`: Megatron-LM's default for dp).
void checkOverlapFlags(TrainingPipelineOptions &train, const MeshSpec &mesh,
                       const TrainingShape &shape, const std::string &gradBucketText) {
  if (gradBucketText == "auto") {
    train.gradBucketSize = defaultGradBucketSize(mesh.dp);
  } else {
    llvm::StringRef text(gradBucketText);
    if (text.getAsInteger(10, train.gradBucketSize) || train.gradBucketSize < 0)
      throw UsageError{"--grad-bucket-size must be a parameter count >= 0 (0: off) or auto, got '" +
                       gradBucketText + "'"};
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

/// loadModel, printing its error (an .mlir file's are already reported).
std::optional<LoadedModel> loadOrReport(MLIRContext &ctx, llvm::SourceMgr &srcMgr,
                                        const std::string &path, TrainingShape shape,
                                        int64_t dp) {
  std::string err;
  std::optional<LoadedModel> lm = loadModel(ctx, srcMgr, path, shape, dp, err);
  if (!lm && !err.empty())
    error(err);
  return lm;
}

/// Prints or dumps the module after each top-level pass.
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
  auto lm = loadOrReport(ctx, srcMgr, model, shape, /*dp=*/1);
  if (!lm)
    return kExitError;
  FailureOr<xf::ModelStats> s = xf::computeModelStats(*lm->module);
  if (failed(s) || !crossCheck(*lm, *s))
    return kExitError;

  ModelInfo info{modelName(*lm->module), model, lm->config, *s};
  if (format == "json")
    llvm::outs() << info.toJson().dump(2) << "\n";
  else
    info.print(llvm::outs());
  return 0;
}

int runCompile(Args &args) {
  std::string model, output, emit = "plan", format = "text", dumpDir, reshardText = "true",
              gradBucketText = "0";
  BudgetFlags budgetFlags;
  MeshSpec mesh;
  TrainingPipelineOptions train;
  std::optional<Topology> topology;
  std::string topologyArg; // --topology as given: with --device, the plan is simulated
  TrainingShape shape;
  bool printAll = false, quiet = false, verifyEach = false, timing = false;
  std::set<std::string> printAfter;
  ValueFlags compileFlags;
  // Bounds far above any real run (Llama 3: 8,192-token sequences, 2,048 of
  // them per step) that stop a typo before it sizes anything.
  compileFlags.add("--seq-len", &shape.seqLen, 1, kMaxSeqLen)
      .add("--micro-batch", &shape.microBatch, 1, kMaxBatch)
      .add("--global-batch", &shape.globalBatch, 1, kMaxBatch)
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
      if (auto err = loadTopology(cost::topologyPath(*v), t)) {
        error(*err);
        return kExitError;
      }
      topology = t;
      topologyArg = *v;
    } else if (auto v = args.value(a, "--rank-order")) {
      if (auto err = parseRankOrder(*v, mesh))
        throw UsageError{*err};
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
    else if (a == "--no-fuse-optimizer")
      train.fuseOptimizer = false;
    else if (a == "--no-fuse-norm")
      train.fuseNorm = false;
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
    else if (a == "--timing")
      timing = true;
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
  train.mesh = {mesh.dp, mesh.tp, mesh.pp, mesh.rankOrderStr()}; // the overlap rules read it
  checkOverlapFlags(train, mesh, shape, gradBucketText);
  if (train.recompute != "none" && train.recompute != "selective" &&
      train.recompute != "full" && train.recompute != "auto")
    throw UsageError{"--recompute must be none, selective, full or auto, got '" +
                     train.recompute + "'"};
  // The memory every rank may use: the capacity (--memory-budget, else the
  // --device's) minus the reserve (--memory-reserve, else the device's).
  std::optional<plan::MemoryBudget> budget;
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
  std::optional<cost::Hardware> hardware;
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

  auto t0 = std::chrono::steady_clock::now();
  // --timing: MLIR's timing report (printed when `timingManager` goes out of
  // scope, after `rootTimer`), the passes nested under "passes".
  mlir::DefaultTimingManager timingManager;
  timingManager.setEnabled(timing);
  mlir::TimingScope rootTimer = timingManager.getRootScope();
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
  // One compilation of the training step with `recompute`; the module stays
  // in `lm`. A pass that fails has reported why, with a location.
  std::optional<LoadedModel> lm;
  // The files llcdist-verify-plan checked, written as they are (not built twice).
  std::optional<PlanJson> verifiedPlan;
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
    error(outOfMemoryError(*lm->module, model, lm->config ? lm->shape : shape, mesh, train,
                           *budget, tried));
    return kExitError;
  }

  CompileSummary summary;
  // The forward graph's counts: recorded on the module by llcdist-model-stats.
  FailureOr<xf::ModelStats> s = recordedModelStats(*lm->module);
  if (failed(s) || !crossCheck(*lm, *s))
    return kExitError;
  summary.stats = *s;
  if (emit == "plan") {
    mlir::TimingScope reportTimer = rootTimer.nest("memory report");
    summary.memory = plan::MemoryReport{plan::computeStageMemory(*lm->module),
                                        train.recompute, budget};
    reportTimer = rootTimer.nest("pipeline report");
    FailureOr<std::optional<plan::PipelineReport>> pr =
        plan::computePipelineReport(*lm->module);
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
  summary.compileMs = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - t0)
                          .count();
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
                       : what == "run"   ? runHelp()
                       : what == "verify" ? kVerifyHelp
                       : what == "diagnose" ? kDiagnoseHelp
                       : what == "simulate" ? kSimulateHelp
                       : what == "plan" ? kPlanHelp
                       : what == "export" ? kExportHelp
                                         : kMainHelp);
      return 0;
    }
    if (cmd == "--version") {
      llvm::outs() << "llc-dist " << LLCDIST_VERSION << " (MLIR "
                   << LLVM_VERSION_STRING << ", allocator " << LLCDIST_ALLOCATOR
#if LLCDIST_HAVE_MPI
                   << ", MPI"
#else
                   << ", no MPI"
#endif
                   << ")\n";
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
    if (cmd == "diagnose")
      return runDiagnose(args);
    if (cmd == "simulate")
      return runSimulate(args);
    if (cmd == "plan")
      return runPlan(args);
    if (cmd == "export")
      return runExport(args);
    throw UsageError{"unknown command '" + cmd +
                     "' (commands: compile, run, export, verify, diagnose, simulate, plan, info, help)"};
  } catch (const UsageError &e) {
    llvm::errs() << "llc-dist: error: " << e.message << "\n"
                 << "Run 'llc-dist --help' for usage.\n";
    return kExitUsage;
  }
}
