//===- Passes.td - plan passes ----------------------------*- tablegen -*-===//
#ifndef LLCDIST_DIALECT_PLAN_TRANSFORMS_PASSES_TD
#define LLCDIST_DIALECT_PLAN_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def PlanMemory : Pass<"llcdist-plan-memory", "llcdist::plan::ProgramOp"> {
  let summary = "assign every buffer an arena offset, reusing dead activations' bytes";
  let description = [{
    Persistent state (params, gradients, optimizer state, inputs, metrics) is
    placed first, in declaration order. Activation and scratch buffers live
    from their first to their last use in the step (the schedule's actions
    with their kernels inlined) and are placed first-fit in order of first
    use, sharing bytes only with buffers whose intervals are disjoint; the
    arena size is recorded. Offsets are 64-byte aligned.

    Before: `plan.buffer @b1 : tensor<8xf32> {kind = "param", name = "w"}`
    After:  `plan.buffer @b1 : tensor<8xf32> {kind = "param", name = "w", offset = 64 : i64}`

    Where every microbatch slot of a chunk runs alike (docs/memory.md
    "Slots alike"), slot 0's instances stand for the others; slots-alike=false
    replays and lays out every slot's, which gives the same plan (the
    reference the tests compare with).
  }];
  let options = [
    Option<"slotsAlike", "slots-alike", "bool", "true",
           "work out the slots of a chunk from slot 0 where they run alike">,
    Option<"checkSlotsAlike", "check-slots-alike", "bool", "false",
           "also lay out every slot and fail where the two differ (for tests)">,
  ];
}

def PlanZero : Pass<"llcdist-plan-zero", "mlir::ModuleOp"> {
  let summary = "ZeRO over dp: shard the optimizer state, the gradients, the parameters";
  let description = [{
    A plan→plan rewrite of the plan llcdist-lower-to-plan lowers (ZeRO is
    not the lowering's) on a mesh with dp > 1. Every parameter's rows are split
    in dp blocks of ceil(rows / dp) rows, the last ones zero-padded when dp
    does not divide the rows (`block_rows` on the param, `total` on its
    collectives), and each dp rank keeps the optimizer state of its block
    only (ZeRO stage 1, DeepSpeed's and Megatron's distributed optimizer):

    - the optimizer's gradient all-reduce over dp becomes one reduce-scatter
      per parameter the program updates, into `<name>.grad_shard`, which the
      later reductions, the norm and the update read; the norm sums the
      blocks over dp (an f64 all_reduce of grad_norm_sq's squared norm over dp, before
      the pipeline's pp one);
    - the optimizer state buffers hold the block; an f32 update cuts the
      block out of the parameter (`shard_slice` into `<name>.shard`),
      updates it and all-gathers the blocks back into the parameter;
    - under mixed precision the f32 master is the block (the update writes
      it in place) and step_begin's bf16 copy is cast per block
      (`<name>.bf16_block`) and all-gathered into the working copy;
    - each plan.param records its shape before the blocks (`local_shape`)
      and its block (`zero` = {axis, stage, value_block, block_rows}).

    Stage 2 also keeps only the gradient's block: a kernel that computed a
    weight gradient straight into the gradient (`accumulate` = true) writes
    this microbatch's whole contribution into `<name>.grad_mb` instead,
    reduce-scattered into `<name>.grad_part` and added to the block right
    after it; an `accumulate` into the gradient becomes that reduce-scatter
    and add; a tied parameter's home receives the replicas' blocks; the
    optimizer's dp all-reduce goes.

    Stage 3 (FSDP) also keeps only the parameter's block (and under mixed
    precision the master's): each scope (a layer body's forward, its
    backward, a chunk's top level) all-gathers it into
    `<slot><name>.gathered` where it begins to read it and reads that copy,
    so the memory planner frees it after the scope; with
    `reshard-after-forward` = false the backward reads its microbatch
    slot's forward copy instead. Where a scope begins is the lowering's
    knowledge: it records it with `record-param-scopes`
    (`plan.param_scopes` on the kernel; the pass removes it). The update
    writes the parameter's block in place (no slice, no gather).

    New buffers are declared where llcdist-lower-to-plan used to make them,
    so the plan's buffer ids and arena are those of a lowering that did ZeRO
    itself.

    Before: `plan.kernel "all_reduce" {x = [@g]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients"}`
    After:  `plan.kernel "reduce_scatter" {x = @g, y = @gs} {axis = "dp", inner = 32 : i64, op = "sum", outer = 1 : i64} {plan.origin = "zero"}`
  }];
  let options = [
    Option<"stage", "stage", "int64_t", "1",
           "ZeRO stage: 1 (optimizer state), 2 (also the gradients), 3 (FSDP: "
           "also the parameters; needs record-param-scopes)">,
    Option<"reshardAfterForward", "reshard-after-forward", "bool", "true",
           "ZeRO-3: gather a layer's parameters again for its backward (true, "
           "PyTorch FSDP's default) or keep the forward's gathered copy">,
  ];
}

def PlanGradBuckets : Pass<"llcdist-plan-grad-buckets", "llcdist::plan::ProgramOp"> {
  let summary = "overlap the dp gradient all-reduce with the last backward, in buckets";
  let description = [{
    PyTorch DDP's and Megatron-LM's gradient buckets on a plan with dp > 1
    (no pipeline yet): the last microbatch's backward gets its own
    subroutine (`<backward>_last`, a clone run by that action), the
    gradients are grouped into buckets of at least `bucket-size` elements in
    the order the clone finishes writing them, and each bucket's all_reduce
    (the optimizer's synchronous one, split) is started on queue "comm" with
    a token right after its last gradient write; the optimizer waits for the
    tokens where the all_reduce was. The program gets `queues = ["compute",
    "comm"]` and `plan.grad_buckets` ({grads, elements, bytes} per bucket,
    for the compile summary). Under ZeRO-1 (llcdist-plan-zero's reduce_scatter
    per gradient) each gradient's reduce_scatter starts with its bucket, one
    token each, and is waited where it was. Under ZeRO-2 (every microbatch
    reduce-scatters each contribution into a part and adds it to the block)
    each scatter starts where it is, the contributions are bucketed in the
    backward's order, and a bucket's waits and adds move to where the next
    bucket is complete (the subroutine's end for the last; earlier before a
    kernel that writes a contribution or touches a part in flight); its
    buckets carry `every_microbatch`. A program without the dp gradient
    reduction, or whose gradients several subroutines compute (a pipeline),
    is left alone.

    Before (optimizer): `plan.kernel "all_reduce" {x = [@g1, @g0]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients"}`
    After (backward_last, after @g1's last write): `plan.kernel "all_reduce" {x = [@g1]} {axis = "dp", op = "sum"} {plan.origin = "dp_gradients", queue = "comm", token = 0 : i64}`
    After (optimizer): `plan.kernel "wait" {} {} {token = 0 : i64}`
  }];
  let options = [
    Option<"bucketSize", "bucket-size", "int64_t", "40000000",
           "gradient elements per bucket (a bucket closes at this many or more; "
           "Megatron-LM's default: max(40M, 1M × dp))">,
  ];
}

def PlanFsdpPrefetch : Pass<"llcdist-plan-fsdp-prefetch", "llcdist::plan::ProgramOp"> {
  let summary = "ZeRO-3: start the next units' parameter all-gathers while a unit computes";
  let description = [{
    PyTorch FSDP2's forward and backward prefetch on a ZeRO-3 plan
    (llcdist-plan-zero stage 3, whose scopes gather their parameters
    synchronously before use). In each forward or backward subroutine the
    parameter gathers are grouped into units (FSDP's one module per
    transformer layer: a run of gathers of parameters whose names share the
    first numeric component, `transformer.h.3`; the embeddings and the final
    norm are units of their own where they run). Every gather starts on
    queue "comm" with a token and is waited where it was (just before the
    parameter's first use): unit 0's start where its first gather was, unit
    i's right after the first wait of unit max(0, i - `units`), so `units`
    units are in flight while one computes. The gathered buffers live from
    the start (llcdist-plan-memory). The program gets `queues = ["compute",
    "comm"]` and `plan.fsdp_prefetch` ({subroutine, units, gathers,
    prefetched, bytes} each, for the compile summary). `units` = 0, or a plan
    without ZeRO-3 parameters, is left alone.

    Before (forward): `plan.kernel "all_gather" {x = @w1, y = @w1g} {axis = "dp", ...} {plan.origin = "zero"}` just before the first read of @w1g
    After (forward, when the previous layer begins): `plan.kernel "all_gather" {x = @w1, y = @w1g} {...} {plan.origin = "zero", queue = "comm", token = 3 : i64}`
    After (where it was): `plan.kernel "wait" {} {} {token = 3 : i64}`
  }];
  let options = [
    Option<"units", "units", "int64_t", "1",
           "units gathered ahead of the one computing (FSDP2's default: 1; "
           "0: off, synchronous)">,
  ];
}

def PlanOverlapParamGather : Pass<"llcdist-plan-overlap-param-gather", "llcdist::plan::ProgramOp"> {
  let summary = "ZeRO-1/2: overlap the updated parameters' all-gather with the next step's forward";
  let description = [{
    Megatron-LM's --overlap-param-gather on a ZeRO-1 or -2 plan
    (llcdist-plan-zero stage 1 or 2), where the updated blocks are gathered
    back into the whole parameters synchronously: in the optimizer after an
    f32 update, or under mixed precision in step_begin (cast of the master
    block, gather into the bf16 working copy). Tokens do not cross steps, so
    the gathers start at the beginning of the step, in step_begin on queue
    "comm", and the first microbatch's forward (a clone of the forward,
    `<forward>_first`, run by that action only) waits for each just before
    its first read of the parameter.

    An f32 plan is first made the shape of a mixed-precision one: the
    parameter's value buffer holds its block, the master the update writes
    in place (`zero.value_block`, initialized by the runtime as the whole
    parameter's block, so the first step's gather reproduces the whole
    parameter), and the whole parameter the forward and backward read is a
    new `<name>.whole` buffer (kind "param") step_begin gathers; the
    optimizer's shard_slice and all_gather go. The program gets
    `queues = ["compute", "comm"]` and `plan.param_gather_overlap`
    ({gathers, bytes, subroutine}, for the compile summary). A plan without
    ZeRO-1/2 parameters, with a pipeline (several forward subroutines) or a
    single action-less forward is left alone.

    Before (optimizer): `plan.kernel "all_gather" {x = @w.shard, y = @w} {...} {plan.origin = "zero"}`
    After (step_begin): `plan.kernel "all_gather" {x = @w, y = @w.whole} {...} {plan.origin = "zero", queue = "comm", token = 0 : i64}`
    After (forward_first, before the first read of @w.whole): `plan.kernel "wait" {} {} {token = 0 : i64}`
  }];
}

def PlanSPOverlap : Pass<"llcdist-plan-sp-overlap", "llcdist::plan::ProgramOp"> {
  let summary = "overlap sequence parallelism's all-gathers and reduce-scatters with independent kernels";
  let description = [{
    Megatron-LM's --tp-comm-overlap (bulk): every tp `all_gather` and
    `reduce_scatter` of activations (sequence parallelism's, synchronous) is
    started on queue "comm" with a fresh token. Its start moves up to just
    after the last kernel it depends on (kernels before it that are
    independent of it and of the kernels it depends on move below the
    start: the weight-gradient GEMM before an input gradient's
    reduce_scatter runs while it is in flight), and its wait moves down to
    just before the first kernel that reads what it writes or writes what
    it touches. A window never crosses a synchronous collective, a
    pipeline send/recv or, upwards, another start or wait, so the comm
    queue keeps the collectives' order. The program gets `queues =
    ["compute", "comm"]` and `plan.tp_comm_overlap` (per kind: started,
    overlapped, kernels, gemms) for the compile summary. Runs after
    llcdist-plan-grad-buckets (its tokens come after those) and before
    llcdist-plan-memory.

    Before: `linear_bwd_weight {dw = @dw, dy = @dy, x = @x}`, `linear_bwd_input {dx = @dx, dy = @dy, w = @w}`, `reduce_scatter {x = @dx, y = @dxs}`, `layer_norm_bwd_input {dy = @dxs, ...}`
    After: `linear_bwd_input`, `reduce_scatter {x = @dx, y = @dxs} {queue = "comm", token = 0 : i64}`, `linear_bwd_weight`, `wait {token = 0 : i64}`, `layer_norm_bwd_input`
  }];
}

def PlanP2PScatterGather : Pass<"llcdist-plan-p2p-scatter-gather", "llcdist::plan::ProgramOp"> {
  let summary = "pipeline sends of 1/tp, all-gathered over tp by the receivers";
  let description = [{
    Megatron-LM's scatter/gather of pipeline tensors (Narayanan et al. 2021,
    section 4.1). Under tensor parallelism without sequence parallelism the tp
    ranks of a stage hold the same activation (and activation gradient) at
    the stage's boundary, and each sends all of it. Here every pipeline `send`
    (plan.origin "pipeline", synchronous) sends its rank's 1/tp slice, cut by
    a `shard_slice` over tp before it, and every pipeline `recv` receives
    such a slice and is followed by an `all_gather` over tp into the buffer
    it received before: the inter-stage bytes shrink by tp, and the gather
    runs on the tp group's (intra-node) links. No value changes. A transfer
    whose element count tp does not divide stays whole (on both sides). An
    error under sequence parallelism (the tp ranks hold different slices of
    the sequence there, and send 1/tp already). The program gets
    `plan.p2p_scatter_gather` ({sends, recvs}) for the compile summary. Runs
    before llcdist-plan-p2p-overlap, which then starts the smaller sends and
    recvs; `llc-dist compile --scatter-gather-p2p`.

    Before: `plan.kernel "send" {x = @h} {axis = "pp", peer = 1 : i64, tag = 0 : i64}`
    After (tp = 2, @h of 64 elements):
    ```mlir
    plan.kernel "shard_slice" {x = @h, y = @h_slice} {axis = "tp", inner = 32 : i64, outer = 1 : i64}
    plan.kernel "send" {x = @h_slice} {axis = "pp", peer = 1 : i64, tag = 0 : i64}
    ```
    and on the receiving stage `recv {y = @h_slice}` then
    `all_gather {x = @h_slice, y = @h} {axis = "tp", inner = 32 : i64, outer = 1 : i64}`.
  }];
}

def PlanP2POverlap : Pass<"llcdist-plan-p2p-overlap", "llcdist::plan::ProgramOp"> {
  let summary = "overlap pipeline sends and receives with the kernels of their action";
  let description = [{
    Megatron-LM's overlap_p2p_comm within an action: every pipeline `send`
    and `recv` (plan.origin "pipeline", synchronous) is started on queue
    "comm" with a fresh token. A send's start moves up to just after the last
    write of its payload (the kernels before it that do not feed the
    payload, such as the backward's weight gradients, move below the start
    and run while it is in flight); its wait moves down to the first kernel
    that writes the payload, else the end of the subroutine. A recv starts as
    early as the subroutine allows and is waited before the first kernel
    that touches its buffer. No start or wait crosses another communication
    op, so each rank's communication keeps the synchronous order (the
    cross-rank verifier's blocking model of a start stays exact). The program
    gets `queues = ["compute", "comm"]` and `plan.p2p_overlap` ({started,
    overlapped, kernels}). Runs after llcdist-plan-sp-overlap, before
    llcdist-plan-memory.

    Before: `linear_bwd_weight {dw = @dw, dy = @g, x = @x}`, `linear_bwd_input {dx = @dx, dy = @g, w = @w}`, `send {x = @dx}`
    After: `linear_bwd_input`, `send {x = @dx} {queue = "comm", token = 0 : i64}`, `linear_bwd_weight`, `wait {token = 0 : i64}`
  }];
}

def PlanCpRingOverlap : Pass<"llcdist-plan-cp-ring-overlap", "llcdist::plan::ProgramOp"> {
  let summary = "overlap ring attention's k/v transfers with the current block's attention";
  let description = [{
    Context parallelism's ring (--cp-impl ring; Megatron's p2p context
    parallelism): every ring `send` and `recv` (plan.origin
    "context_parallel", synchronous) is started on queue "comm" with a fresh
    token. A start moves up past the kernels it does not depend on, so the
    next k/v block's transfer begins as soon as the block it forwards has
    arrived, before the current block's attention; a wait moves down to the
    first kernel that touches its buffer, past the other ring transfers'
    starts whose buffers it does not share (k and v, dk and dv in flight
    together). Starts keep the ring's synchronous order. The program gets
    `queues = ["compute", "comm"]` and `plan.cp_ring_overlap` ({started,
    overlapped, kernels}). Runs before llcdist-plan-memory; on by default
    (`llc-dist compile --no-cp-ring-overlap`: the synchronous ring).

    Before: `send {x = @k} {axis = "cp", shift = 1}`, `recv {y = @k1} {axis = "cp", shift = 1}`, `attention_block_fwd {k = @k1, ...}`
    After: `send {x = @k} {queue = "comm", token = 0}`, `recv {y = @k1} {queue = "comm", token = 1}`, `wait {token = 0}`, `wait {token = 1}`, `attention_block_fwd {k = @k1, ...}`
  }];
}

def VerifyAsync : Pass<"llcdist-verify-async", "llcdist::plan::ProgramOp"> {
  let summary = "check a program's tokens and in-flight buffers (asynchronous plans)";
  let description = [{
    Executes the program's step in order (the schedule's actions, each
    subroutine's kernels) and tracks each communication op started with a
    `token` until the `wait` with that token. A token waited twice, a wait
    before its start, a token started again while in flight or still in
    flight at the end of the step is an error, and so is a race: an op that
    writes bytes an in-flight op reads or writes, or reads bytes an in-flight
    op writes (arena ranges once llcdist-plan-memory has placed the buffers,
    else the buffers themselves). Each error names both ops (subroutine,
    kernel index, origin, action, microbatch) and their locations. A plan
    without tokens passes unchanged (docs/plan-verifier.md).

    ```mlir
    plan.kernel "all_reduce" {x = [@g]} {axis = "dp", op = "avg"} {queue = "comm", token = 0 : i64}
    plan.kernel "adamw" {param = @w, grad = @g, m = @m, v = @v} {...}  // error: reads @g in flight
    plan.kernel "wait" {} {} {token = 0 : i64}
    ```
  }];
}

def VerifyPlan : Pass<"llcdist-verify-plan", "mlir::ModuleOp"> {
  let summary = "check every rank's communication before anything runs";
  let description = [{
    Builds the runtime's plan from the module's plan.program ops (exactly the
    files the compiler would write), loads it with the runtime's own loader
    (so the plan is also checked against the format), and executes every
    rank's communication symbolically (lib/Verify, docs/plan-verifier.md):
    every send meets its recv (peer, size, dtype, tag and microbatch, in
    order), every group's members issue the same collectives in the same
    order with the same sizes, and no rank waits forever under the runtime's
    semantics (eager sends, blocking recvs and collectives). A failure is a
    compile error naming the ranks, the action and op indices and the ops'
    provenance. The same check runs as `llc-dist verify PLAN`.
  }];
  let options = [
    Option<"maxErrors", "max-errors", "int64_t", "1", "errors to report before stopping">,
  ];
}

def PlanFuseNorm : Pass<"llcdist-plan-fuse-norm", "llcdist::plan::ProgramOp"> {
  let summary = "the residual add and the norm, forward and backward, one kernel each";
  let description = [{
    A pre-norm transformer block adds each branch to the residual stream and
    normalizes the sum for the next branch; the backward runs the norm's
    weight gradient, its input gradient and the residual's add. The lowering
    emits these as separate kernels, each reading and writing the [M, H]
    activations again. This pass makes, in every subroutine,
    - an `add` followed by `layer_norm_fwd` / `rms_norm_fwd` of its sum one
      `add_layer_norm_fwd` / `add_rms_norm_fwd` (a, b, sum and the norm's
      roles: the residual stream and its normalized value in one pass);
    - a norm's `*_bwd_weight` and `*_bwd_input` next to each other (either
      order, the same dy, x and statistics) one `layer_norm_bwd` /
      `rms_norm_bwd`; and when the kernel after them is an `add` of the input
      gradient and the residual's gradient, and no other kernel of the program
      touches the input gradient, the add joins it as `dresidual` (dx =
      dresidual + the input gradient) and the input gradient's buffer goes.
    Only adjacent synchronous compute kernels fuse, so no kernel moves
    across another, and the fused kernels round each intermediate as the
    unfused kernels stored it (the sum before the norm reads it; the input
    gradient to dx's dtype): fused and unfused plans give the same bits.
    Runs after the passes that move kernels around the communication and
    before llcdist-plan-memory; records what it fused (plan.fused) for the
    compile summary. `llc-dist compile --no-fuse-norm` leaves the kernels.

    Before:
    ```mlir
    plan.kernel "add" {a = @r0, b = @attn, y = @r1} {n = 4096 : i64}
    plan.kernel "layer_norm_fwd" {beta = @b, gamma = @g, mean = @mu, rstd = @rs, x = @r1, y = @ln} {H = 64 : i64, M = 64 : i64, eps = 1.0e-05 : f64}
    ```
    After:
    ```mlir
    plan.kernel "add_layer_norm_fwd" {a = @r0, b = @attn, beta = @b, gamma = @g, mean = @mu, rstd = @rs, sum = @r1, y = @ln} {H = 64 : i64, M = 64 : i64, eps = 1.0e-05 : f64}
    ```
  }];
}

def PlanFuseEpilogues : Pass<"llcdist-plan-fuse-epilogues", "llcdist::plan::ProgramOp"> {
  let summary = "work a neighbouring GEMM can do in its epilogue: the bias gradient, the GELU";
  let description = [{
    A linear layer with a bias has, in the backward, the weight-gradient GEMM
    (dw = dy^T x) and the bias gradient (db = the column sums of dy): two
    kernels that each read dy. cuBLASLt's BGRADA / BGRADB epilogues compute
    the column sums inside the GEMM. This pass makes, in every subroutine, a
    `linear_bwd_bias` and the `linear_bwd_weight` of the same dy (the same M,
    N and accumulate) one `linear_bwd_weight` with the optional `db`. GPT-2's
    MLP applies a GELU to the c_fc linear's output: a `linear_fwd` and the
    `gelu_tanh_fwd` that first reads its y become `linear_fwd` with `gelu`
    (GELU_AUX_BIAS; y stays, the backward reads it), and a `linear_bwd_input`
    that writes its dx and the `gelu_tanh_bwd` of it become
    `linear_bwd_input` with `gelu_x` (DGELU) when no other kernel of the
    program touches that dx (whose buffer goes) and both dx have one dtype.
    The fused op stands where one of the two stood, the other moving to it
    only across kernels independent of it (Fusion.h), and computes what the
    two did, rounding as they stored, so the numbers are the same bits on
    the CPU. Runs before llcdist-plan-memory;
    records what it fused (plan.fused) for the compile summary. `llc-dist
    compile --no-fuse-epilogues` leaves the kernels.

    Before:
    ```mlir
    plan.kernel "linear_bwd_weight" {dw = @dw, dy = @dy, x = @x} {K = 64 : i64, M = 32 : i64, N = 256 : i64, accumulate = false, layout = "in_out"}
    plan.kernel "linear_bwd_bias" {db = @db, dy = @dy} {M = 32 : i64, N = 256 : i64, accumulate = false}
    ```
    After:
    ```mlir
    plan.kernel "linear_bwd_weight" {db = @db, dw = @dw, dy = @dy, x = @x} {K = 64 : i64, M = 32 : i64, N = 256 : i64, accumulate = false, layout = "in_out"}
    ```
  }];
}

def PlanCeGradInPlace : Pass<"llcdist-plan-ce-grad-in-place", "llcdist::plan::ProgramOp"> {
  let summary = "the cross entropy's gradient written over the logits";
  let description = [{
    `cross_entropy_bwd` writes the gradient of the logits, a buffer as large
    as the logits ([tokens, vocabulary]), while the logits stay live until
    it reads them. This pass makes it write over the logits (dlogits =
    logits, the op's allowed alias) where no value changes: in every
    subroutine, no kernel after the backward touches the logits, every
    kernel that touches the gradient comes after its one writer, no other
    subroutine touches the gradient, and no asynchronous operation touches
    either. The gradient's buffer goes and llcdist-plan-memory places one
    buffer where there were two. Records what it changed (plan.fused) for the
    compile summary; `llc-dist compile --no-ce-grad-in-place` leaves the
    buffers apart.

    Before:
    ```mlir
    plan.kernel "cross_entropy_bwd" {dlogits = @dlogits, logits = @logits, targets = @t} {M = 16 : i64, V = 64 : i64, scale = 6.250000e-02 : f64}
    plan.kernel "linear_bwd_input" {dx = @dh, dy = @dlogits, w = @w} {...}
    ```
    After:
    ```mlir
    plan.kernel "cross_entropy_bwd" {dlogits = @logits, logits = @logits, targets = @t} {M = 16 : i64, V = 64 : i64, scale = 6.250000e-02 : f64}
    plan.kernel "linear_bwd_input" {dx = @dh, dy = @logits, w = @w} {...}
    ```
  }];
}

def PlanFuseClassifier : Pass<"llcdist-plan-fuse-classifier", "llcdist::plan::ProgramOp"> {
  let summary = "the LM head, the cross entropy and their backward as one chunked op";
  let description = [{
    The LM head's logits are [tokens, vocabulary] (0.8 GB for GPT-2 at
    8 × 1024 in bf16) and live from the forward's last GEMM to the
    backward's first two. This pass makes the LM head's `linear_fwd` and the
    `cross_entropy_fwd` (forward) and the `cross_entropy_bwd`,
    `linear_bwd_weight` and `linear_bwd_input` (backward) one `classifier`
    kernel at the cross_entropy_bwd's place, which runs them over chunks of
    `chunk` token rows: only a [chunk, vocabulary] scratch holds logits (and,
    for a non-f32 weight gradient summed over several chunks, an f32 scratch
    of its shape). The loss is then written in the backward, so the pass
    fuses only where that changes no value: the kernels synchronous and
    unsharded (not the vocabulary-parallel loss), the logits theirs alone,
    nothing touching the loss or writing the inputs between, and every
    forward action followed by its microbatch's backward action before any
    other touching these buffers (one stage or the last one under 1F1B; not
    GPipe, not ZB-H1). The loss is the same bits; dx the same rows of the
    same products; dw summed over the chunks (f32: within rounding).
    `chunk-rows` (0: the pass picks the rows that keep the chunk's logits
    within 128 MiB, a multiple of 128) sets the chunk. Records what it fused
    (plan.fused); `llc-dist compile --no-fuse-classifier` keeps the five.

    Before (forward, then backward):
    ```mlir
    plan.kernel "linear_fwd" {w = @wte, x = @h, y = @logits} {K = 16 : i64, M = 8 : i64, N = 64 : i64, layout = "out_in"}
    plan.kernel "cross_entropy_fwd" {logits = @logits, loss = @loss, targets = @t} {M = 8 : i64, V = 64 : i64, scale = 1.0 : f64}
    plan.kernel "cross_entropy_bwd" {dlogits = @logits, logits = @logits, targets = @t} {M = 8 : i64, V = 64 : i64, scale = 0.125 : f64}
    plan.kernel "linear_bwd_weight" {dw = @dwte, dy = @logits, x = @h} {K = 16 : i64, M = 8 : i64, N = 64 : i64, accumulate = true, layout = "out_in"}
    plan.kernel "linear_bwd_input" {dx = @dh, dy = @logits, w = @wte} {K = 16 : i64, M = 8 : i64, N = 64 : i64, accumulate = false, layout = "out_in"}
    ```
    After (backward; the forward loses its two):
    ```mlir
    plan.kernel "classifier" {dw = @dwte, dx = @dh, logits = @chunk, loss = @loss, targets = @t, w = @wte, x = @h} {K = 16 : i64, M = 8 : i64, N = 64 : i64, accumulate = true, chunk = 4 : i64, grad_scale = 0.125 : f64, layout = "out_in", scale = 1.0 : f64}
    ```
  }];
  let options = [
    Option<"chunkRows", "chunk-rows", "int64_t", /*default=*/"0",
           "token rows per chunk (0: as many as keep the chunk's logits within 128 MiB)">,
  ];
}

def PlanPackedQkv : Pass<"llcdist-plan-packed-qkv", "llcdist::plan::ProgramOp"> {
  let summary = "attention reads q, k, v from the packed QKV buffer and writes dq, dk, dv into one";
  let description = [{
    A fused QKV projection (GPT-2's c_attn) writes q, k and v side by side in
    one [tokens, (nh+2·nkv)·hd] buffer; the lowering splits it into three
    (`split_fwd`) for the attention and joins the attention's dq, dk, dv back
    into one (`split_bwd`) for the projection's gradients: two copies of the
    QKV activation per layer. The attention ops read and write that packed
    layout through row strides (their `qkv` and `dqkv` roles). This pass
    makes the attention ops read the split's input as `qkv` and drops the
    split_fwd where no value changes (its outputs touched by the split and
    those attention ops only, the split the next kernel after every write of
    its input), and makes an attention_bwd write the split_bwd's dx as `dqkv`
    where only that split reads its gradients and nothing touches dx
    between them. The three buffers go each way; the numbers are the same
    bits. Records what it changed (plan.fused) for the compile summary;
    `llc-dist compile --no-packed-qkv` keeps the copies.

    Before:
    ```mlir
    plan.kernel "split_fwd" {outs = [@q, @k, @v], x = @qkv} {rows = 8 : i64, sizes = [16, 16, 16]}
    plan.kernel "attention_fwd" {k = @k, lse = @lse, out = @o, q = @q, v = @v} {B = 2 : i64, S = 4 : i64, hd = 8 : i64, nh = 2 : i64, nkv = 2 : i64}
    ```
    After:
    ```mlir
    plan.kernel "attention_fwd" {lse = @lse, out = @o, qkv = @qkv} {B = 2 : i64, S = 4 : i64, hd = 8 : i64, nh = 2 : i64, nkv = 2 : i64}
    ```
  }];
}

def PlanFuseEmbedding : Pass<"llcdist-plan-fuse-embedding", "llcdist::plan::ProgramOp"> {
  let summary = "the position embedding in the token embedding's kernels";
  let description = [{
    GPT-2's input is the token embedding's gather plus the learned position
    embedding, and its backward the two weight gradients of the same dy:
    two kernels each way. This pass makes an `embedding_fwd` and the
    `pos_embedding_fwd` that first reads its out one `embedding_fwd` with
    `wpe` (out = table[ids] + wpe[position], writing the position
    embedding's y; the intermediate buffer goes where nothing else touches
    it), and a `pos_embedding_bwd_weight` and the `embedding_bwd_weight` of
    the same dy and accumulate one `embedding_bwd_weight` with `dwpe`. Only
    synchronous, unsharded ops fuse (no shard_axis), with table and out of
    one dtype (the gathered row is exact), so the numbers are the same bits.
    Records what it fused (plan.fused) for the compile summary;
    `llc-dist compile --no-fuse-embedding` keeps the pairs.

    Before:
    ```mlir
    plan.kernel "embedding_fwd" {ids = @ids, out = @e, table = @wte} {H = 16 : i64, M = 8 : i64, V = 64 : i64}
    plan.kernel "pos_embedding_fwd" {wpe = @wpe, x = @e, y = @h} {B = 2 : i64, H = 16 : i64, P = 4 : i64, S = 4 : i64}
    ```
    After:
    ```mlir
    plan.kernel "embedding_fwd" {ids = @ids, out = @h, table = @wte, wpe = @wpe} {H = 16 : i64, M = 8 : i64, P = 4 : i64, S = 4 : i64, V = 64 : i64}
    ```
  }];
}

def PlanFuseOptimizer : Pass<"llcdist-plan-fuse-optimizer", "llcdist::plan::ProgramOp"> {
  let summary = "one multi-tensor op per optimizer group: adamw_multi, sgd_multi, cast_multi";
  let description = [{
    The lowering emits one optimizer update per parameter (`adamw` / `sgd`)
    and, in mixed precision, one `cast` per master for its bf16 copy: a launch
    each (148 + 148 for GPT-2 124M). This pass makes each run of consecutive
    updates (synchronous, on compute) one op per group of equal
    hyperparameters (the decay and no-decay groups): `adamw_multi` /
    `sgd_multi` over lists of the groups' buffers, in the group's order; and
    each run of consecutive casts one `cast_multi`. Each tensor's update is the
    single op's (docs/plan-format.md), so the numbers are the same bits. Runs
    after the passes that look at the per-parameter updates (ZeRO, buckets,
    the overlaps) and before llcdist-plan-memory; records what it fused on the
    program (plan.fused) for the compile summary. `llc-dist compile
    --no-fuse-optimizer` leaves the per-parameter ops.

    Before:
    ```mlir
    plan.kernel "adamw" {grad = @g0, m = @m0, param = @p0, v = @v0} {beta1 = 9.0e-01 : f64, beta2 = 9.5e-01 : f64, eps = 1.0e-08 : f64, weight_decay = 1.0e-01 : f64}
    plan.kernel "adamw" {grad = @g1, m = @m1, param = @p1, v = @v1} {beta1 = 9.0e-01 : f64, beta2 = 9.5e-01 : f64, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64}
    plan.kernel "adamw" {grad = @g2, m = @m2, param = @p2, v = @v2} {beta1 = 9.0e-01 : f64, beta2 = 9.5e-01 : f64, eps = 1.0e-08 : f64, weight_decay = 1.0e-01 : f64}
    ```
    After:
    ```mlir
    plan.kernel "adamw_multi" {grads = [@g0, @g2], m = [@m0, @m2], params = [@p0, @p2], v = [@v0, @v2]} {... weight_decay = 1.0e-01 : f64}
    plan.kernel "adamw" {grad = @g1, m = @m1, param = @p1, v = @v1} {... weight_decay = 0.0 : f64}
    ```
    (a group of one op stays as it is; the casts of a run form one group
    whatever their sizes). Under ZeRO each update sits between its block's
    shard_slice and all_gather, so no two updates are consecutive and they
    stay per parameter (hoisting every slice before the updates would keep all
    blocks live at once).
  }];
}

def PlanCommDType : Pass<"llcdist-plan-comm-dtype", "mlir::ModuleOp"> {
  let summary = "give each collective on bf16 buffers its dtype: bf16 as NCCL, or f32 for gradients";
  let description = [{
    A collective (`all_reduce`, `all_gather`, `reduce_scatter`) whose buffers
    are all bf16 gets `dtype = "bf16"` (docs/plan-format.md "Collective
    dtypes"): the runtime reduces it as NCCL reduces bf16 (each partial sum
    rounded to bf16, in member order) and moves 2-byte elements. The
    exception is a gradient reduction (an all_reduce or reduce_scatter whose
    plan.payload is "gradients", "kv-replica gradients" or "sequence-parallel
    gradients") with `grad-reduce-dtype` = f32, Megatron-LM's
    --accumulate-allreduce-grads-in-fp32: it keeps no dtype, the default f32,
    so the runtime reduces it in f32 and rounds once (and moves 4 bytes per
    element). Collectives with any f32 buffer are left as they are (f32), so
    an f32 plan does not change. Runs after llcdist-plan-zero, whose
    reduce-scatters and gathers it covers.

    Before: `plan.kernel "all_reduce" {x = [@g]} {axis = "dp", op = "sum"} {plan.payload = "gradients"}` (@g bf16)
    After:  `plan.kernel "all_reduce" {x = [@g]} {axis = "dp", dtype = "bf16", op = "sum"} {plan.payload = "gradients"}`
  }];
  let options = [
    Option<"gradReduceDtype", "grad-reduce-dtype", "std::string", "\"bf16\"",
           "the dtype of gradient reductions on bf16 buffers: bf16 (NCCL's, the "
           "default) or f32 (Megatron's accumulate-allreduce-grads-in-fp32)">,
  ];
}

#endif
