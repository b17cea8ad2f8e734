//===- CompileHelp.cpp - llc-dist compile --help --------------------------===//
//
// The compile command's help text (Compile.cpp reads its flags): the pass list is
// llcdist::describeTrainingPipeline(), the table the pipeline is built from.
//
//===----------------------------------------------------------------------===//
#include "Cli.h"

#include "llcdist/Pipelines/Pipelines.h"

#include "mlir/Pass/PassManager.h"

#include <string>
#include <vector>

namespace {

// Every flag of the compile command, after the pass list (which the pipeline builder describes).
const char *const kCompileFlags = R"(SHAPES
  --mesh SPEC            device mesh, e.g. dp=2,tp=4,pp=2 (default dp=1,tp=1,pp=1);
                         cp=N is context parallelism: each rank holds 1/N of
                         every sequence (rank order then tp,cp,dp,pp)
                         ep=N is expert parallelism (mixture of experts): N
                         consecutive dp ranks split each layer's experts and
                         exchange the tokens' rows (all-to-all-v); N divides
                         dp and the experts
  --cp-impl IMPL         context parallelism's attention (default ring):
                         ring (Megatron's --cp-comm-type p2p): k and v pass
                         around the cp ranks, each block merged by its
                         log-sum-exp; ranks hold load-balanced causal chunks
                         (the sequence a multiple of 2*cp). all-to-all
                         (DeepSpeed-Ulysses, --cp-comm-type a2a): q, k, v
                         exchanged from the sequence split to 1/cp of the
                         heads and back; cp must divide the heads per tp rank
                         and divide the kv heads per tp rank or be a multiple
                         of them (each kv head then replicated, as tp does)
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
  --moe-capacity-factor F
                         mixture of experts: each expert takes at most
                         ceil(F * T * k / E) of a rank's T tokens per
                         microbatch (GShard/Switch); later assignments, in
                         token order, are dropped (no row, no output).
                         Default: dropless (every assignment kept; the plan
                         holds T*k rows per layer)
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
  --scatter-gather-p2p   tp > 1 and pp > 1, without --sequence-parallel: each
                         tp rank sends its 1/tp slice of a pipeline tensor and
                         the receiving stage all-gathers it over tp
                         (Megatron-LM's scatter/gather of pipeline tensors):
                         tp times fewer bytes between stages, one all-gather
                         over tp per receive; the same values
                         (llcdist-plan-p2p-scatter-gather). Default off.
  --no-cp-ring-overlap   ring attention's transfers synchronous (default: each
                         next k/v block in flight during the current block's
                         attention, llcdist-plan-cp-ring-overlap)
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

// `text` wrapped at `width` columns, at spaces outside parentheses and not before one, so that a
// pass and its "(when)" stay on one line.
std::string wrap(const std::string &text, size_t width) {
  std::vector<std::string> words(1);
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    depth += c == '(' ? 1 : c == ')' ? -1 : 0;
    if (c == ' ' && depth == 0 && (i + 1 >= text.size() || text[i + 1] != '('))
      words.emplace_back();
    else
      words.back() += c;
  }
  std::string out, line;
  for (const std::string &word : words) {
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  return out + line;
}

} // namespace

const char *llcdist::cli::compileHelp() {
  static const std::string help = [] {
    mlir::OpPassManager forward("builtin.module");
    xf::buildForwardPipeline(forward, xf::ForwardPipelineOptions{});
    std::string passes;
    for (mlir::Pass &p : forward.getPasses())
      passes += (passes.empty() ? "" : ", ") + p.getArgument().str();
    const std::string text = "Imports MODEL as an xf forward graph on global shapes and compiles its training step. "
                             "Passes: " +
                             passes + " (the forward graph; --emit xf stops here), then " + describeTrainingPipeline() +
                             ". The same pipelines run as `llc-dist-opt --llcdist-forward=...` / "
                             "`--llcdist-train=...`.";
    return "llc-dist compile MODEL [options] -o OUT\n\n" + wrap(text, 78) + "\n\n" + kCompileFlags;
  }();
  return help.c_str();
}
