// llcdist-train's options: each reaches the pass it shapes, with
// TrainingPipelineOptions' defaults (the pipeline is printed before it runs;
// it then fails on this empty module, which has no model). The C++ side of
// the same check is unittests/Pipelines/PipelineOptionsTest.cpp.
//
// RUN: not llc-dist-opt %s --llcdist-train --dump-pass-pipeline 2>&1 | FileCheck %s --check-prefix=DEFAULT
// DEFAULT-LABEL: Pass Manager with 13 passes:
// DEFAULT-NEXT: builtin.module(
// DEFAULT-NEXT: cse,
// DEFAULT-NEXT: llcdist-attach-mesh{cp=1 dp=1 ep=1 pp=1 rank-order=tp,dp,pp tp=1},
// DEFAULT-NEXT: llcdist-model-stats,
// DEFAULT-NEXT: llcdist-pad-vocab{multiple=128},
// DEFAULT-NEXT: llcdist-autodiff,
// DEFAULT-NEXT: llcdist-recompute{mode=none},
// DEFAULT-NEXT: llcdist-add-optimizer{beta1=9.000000e-01 beta2=9.990000e-01 eps=1.000000e-08 grad-clip=0.000000e+00 lr=1.000000e-03 lr-schedule=constant min-lr=0.000000e+00 momentum=0.000000e+00 optimizer=adamw total-steps=0 warmup=0 weight-decay=-1.000000e+00},
// DEFAULT-NEXT: llcdist-partition{cp-impl=ring sequence-parallel=false},
// DEFAULT-NEXT: llcdist-pipeline-split{layout= schedule=1f1b virtual-stages=1},
// DEFAULT-NEXT: llcdist-lower-to-plan{record-param-scopes=false},
// DEFAULT-NEXT: llcdist-plan-comm-dtype{grad-reduce-dtype=bf16},
// DEFAULT-NEXT: plan.program(
// DEFAULT-NEXT: llcdist-plan-fuse-norm,
// DEFAULT-NEXT: llcdist-plan-fuse-epilogues,
// DEFAULT-NEXT: llcdist-plan-ce-grad-in-place,
// DEFAULT-NEXT: llcdist-plan-fuse-classifier{chunk-rows=0},
// DEFAULT-NEXT: llcdist-plan-packed-qkv,
// DEFAULT-NEXT: llcdist-plan-fuse-embedding,
// DEFAULT-NEXT: llcdist-plan-fuse-optimizer,
// DEFAULT-NEXT: llcdist-plan-memory{check-slots-alike=false slots-alike=true},
// DEFAULT-NEXT: llcdist-verify-async
// DEFAULT-NEXT: ),
// DEFAULT-NEXT: llcdist-verify-plan{max-errors=1}
// DEFAULT-NEXT: )

// The mesh goes to llcdist-attach-mesh; tp also multiplies the vocabulary
// multiple and adds the Megatron strategy.
// RUN: not llc-dist-opt %s --llcdist-train="dp=2 pp=4 rank-order=dp,tp,pp" --dump-pass-pipeline 2>&1 | FileCheck %s --check-prefix=MESH
// MESH-LABEL: Pass Manager
// MESH: llcdist-attach-mesh{cp=1 dp=2 ep=1 pp=4 rank-order=dp,tp,pp tp=1},
// MESH: llcdist-pad-vocab{multiple=128},
// MESH-NOT: llcdist-megatron-tp
// RUN: not llc-dist-opt %s --llcdist-train="tp=2" --dump-pass-pipeline 2>&1 | FileCheck %s --check-prefix=TP
// TP-LABEL: Pass Manager with 14 passes:
// TP: llcdist-attach-mesh{cp=1 dp=1 ep=1 pp=1 rank-order=tp,dp,pp tp=2},
// TP: llcdist-pad-vocab{multiple=256},
// TP: llcdist-add-optimizer
// TP-NEXT: llcdist-megatron-tp,
// TP-NEXT: llcdist-partition{cp-impl=ring sequence-parallel=false},

// tp-replicate-embeddings adds the strategy variant after Megatron's and
// drops tp from the vocabulary multiple; make-vocab-size-divisible-by sets it.
// RUN: not llc-dist-opt %s --llcdist-train="tp=2 tp-replicate-embeddings=true" --dump-pass-pipeline 2>&1 | FileCheck %s --check-prefix=REPL
// REPL-LABEL: Pass Manager with 15 passes:
// REPL: llcdist-pad-vocab{multiple=128},
// REPL: llcdist-megatron-tp,
// REPL-NEXT: llcdist-tp-replicate-embeddings,
// RUN: not llc-dist-opt %s --llcdist-train="tp=4 make-vocab-size-divisible-by=64" --dump-pass-pipeline 2>&1 | FileCheck %s --check-prefix=VOCAB
// VOCAB-LABEL: Pass Manager
// VOCAB: llcdist-pad-vocab{multiple=256},
// RUN: not llc-dist-opt %s --llcdist-train="tp-replicate-embeddings=true" --dump-pass-pipeline 2>&1 | FileCheck %s --check-prefix=REPL1
// REPL1-LABEL: Pass Manager with 13 passes:
// REPL1-NOT: llcdist-tp-replicate-embeddings

// The optimizer's options go to llcdist-add-optimizer under the same names.
// RUN: not llc-dist-opt %s --llcdist-train="optimizer=sgd momentum=0.9 weight-decay=0.2 grad-clip=1.5" --dump-pass-pipeline 2>&1 | FileCheck %s --check-prefix=SGD
// SGD-LABEL: Pass Manager
// SGD: llcdist-add-optimizer{beta1=9.000000e-01 beta2=9.990000e-01 eps=1.000000e-08 grad-clip=1.500000e+00 lr=1.000000e-03 lr-schedule=constant min-lr=0.000000e+00 momentum=9.000000e-01 optimizer=sgd total-steps=0 warmup=0 weight-decay=2.000000e-01},
// RUN: not llc-dist-opt %s --llcdist-train="lr-schedule=cosine lr=0.5 min-lr=0.01 warmup=3 total-steps=9 beta1=0.8 beta2=0.95 eps=1e-6" --dump-pass-pipeline 2>&1 | FileCheck %s --check-prefix=ADAMW
// ADAMW-LABEL: Pass Manager
// ADAMW: llcdist-add-optimizer{beta1=8.000000e-01 beta2=9.500000e-01 eps=1.000000e-06 grad-clip=0.000000e+00 lr=5.000000e-01 lr-schedule=cosine min-lr=1.000000e-02 momentum=0.000000e+00 optimizer=adamw total-steps=9 warmup=3 weight-decay=-1.000000e+00},

// The rest: one pass each.
// RUN: not llc-dist-opt %s --llcdist-train="sequence-parallel=true" --dump-pass-pipeline 2>&1 | FileCheck %s --check-prefix=SP
// SP-LABEL: Pass Manager
// SP: llcdist-partition{cp-impl=ring sequence-parallel=true},
// RUN: not llc-dist-opt %s --llcdist-train="schedule=interleaved virtual-stages=2 pp-layout=3,1" --dump-pass-pipeline 2>&1 | FileCheck %s --check-prefix=PIPE
// PIPE-LABEL: Pass Manager
// PIPE: llcdist-pipeline-split{layout=3,1 schedule=interleaved virtual-stages=2},
// RUN: not llc-dist-opt %s --llcdist-train="recompute=selective" --dump-pass-pipeline 2>&1 | FileCheck %s --check-prefix=SEL
// SEL-LABEL: Pass Manager
// SEL: llcdist-recompute{mode=selective},
// RUN: not llc-dist-opt %s --llcdist-train="recompute=full" --dump-pass-pipeline 2>&1 | FileCheck %s --check-prefix=FULL
// FULL-LABEL: Pass Manager
// FULL: llcdist-recompute{mode=full},
// RUN: not llc-dist-opt %s --llcdist-train="zero=3 reshard-after-forward=false" --dump-pass-pipeline 2>&1 | FileCheck %s --check-prefix=ZERO
// ZERO-LABEL: Pass Manager
// ZERO: llcdist-lower-to-plan{record-param-scopes=true},
// ZERO-NEXT: llcdist-plan-zero{reshard-after-forward=false stage=3},
// ZERO-NEXT: llcdist-plan-comm-dtype{grad-reduce-dtype=bf16},
// RUN: not llc-dist-opt %s --llcdist-train="grad-reduce-dtype=f32" --dump-pass-pipeline 2>&1 | FileCheck %s --check-prefix=GRAD
// GRAD-LABEL: Pass Manager
// GRAD: llcdist-plan-comm-dtype{grad-reduce-dtype=f32},
// grad-bucket-size reaches llcdist-plan-grad-buckets, before the arena.
// RUN: not llc-dist-opt %s --llcdist-train="dp=2 grad-bucket-size=1000" --dump-pass-pipeline 2>&1 | FileCheck %s --check-prefix=BUCKETS
// BUCKETS-LABEL: Pass Manager
// BUCKETS: plan.program(
// BUCKETS-NEXT: llcdist-plan-grad-buckets{bucket-size=1000},
// BUCKETS-NEXT: llcdist-plan-fuse-norm,
// BUCKETS-NEXT: llcdist-plan-fuse-epilogues,
// BUCKETS-NEXT: llcdist-plan-ce-grad-in-place,
// BUCKETS-NEXT: llcdist-plan-fuse-classifier{chunk-rows=0},
// BUCKETS-NEXT: llcdist-plan-packed-qkv,
// BUCKETS-NEXT: llcdist-plan-fuse-embedding,
// BUCKETS-NEXT: llcdist-plan-fuse-optimizer,
// BUCKETS-NEXT: llcdist-plan-memory{check-slots-alike=false slots-alike=true},

// classifier-chunk-rows reaches llcdist-plan-fuse-classifier; fuse-classifier=false drops it.
// RUN: not llc-dist-opt %s --llcdist-train="classifier-chunk-rows=256" --dump-pass-pipeline 2>&1 | FileCheck %s --check-prefix=CHUNK
// CHUNK: llcdist-plan-fuse-classifier{chunk-rows=256},
// RUN: not llc-dist-opt %s --llcdist-train="fuse-classifier=false" --dump-pass-pipeline 2>&1 | FileCheck %s --check-prefix=NOCLS
// NOCLS-LABEL: Pass Manager
// NOCLS-NOT: llcdist-plan-fuse-classifier

// Bad values: an unknown option or a value of the wrong type is refused by
// the option parser; a value of the right type that the pass refuses fails
// in that pass, which names the option.
// RUN: not llc-dist-opt %s --llcdist-train="zero-stage=1" 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// UNKNOWN: no such option zero-stage
// RUN: not llc-dist-opt %s --llcdist-train="zero=one" 2>&1 | FileCheck %s --check-prefix=TYPE
// TYPE: for the --zero option: 'one' value invalid for long argument!
// RUN: not llc-dist-opt %s --llcdist-train="sequence-parallel=maybe" 2>&1 | FileCheck %s --check-prefix=BOOL
// BOOL: for the --sequence-parallel option: 'maybe' is invalid value for boolean argument! Try 0 or 1
// RUN: not llc-dist-opt %s --llcdist-train="dp=0" 2>&1 | FileCheck %s --check-prefix=DP
// DP: error: mesh degrees must be >= 1, got dp=0
// RUN: not llc-dist-opt %s --llcdist-train="rank-order=tp,dp" 2>&1 | FileCheck %s --check-prefix=ORDER
// ORDER: error: rank-order 'tp,dp' is not a permutation of dp, tp, pp

// Options each right alone that do not go together, and values out of the
// optimizer's ranges: refused when the pipeline is built, with the words of
// llc-dist compile's rules (the same functions: overlapOptionsError,
// optimizerOptionsError), before any pass runs.
// RUN: not llc-dist-opt %s --llcdist-train="tp=2 tp-comm-overlap=true" 2>&1 | FileCheck %s --check-prefix=SPOV
// SPOV: llcdist-train: --tp-comm-overlap overlaps sequence parallelism's collectives: it needs --sequence-parallel
// RUN: not llc-dist-opt %s --llcdist-train="overlap-p2p=true" 2>&1 | FileCheck %s --check-prefix=P2P
// P2P: llcdist-train: --overlap-p2p overlaps the pipeline's sends and receives: it needs pp > 1 in --mesh
// RUN: not llc-dist-opt %s --llcdist-train="dp=2 fsdp-prefetch=1" 2>&1 | FileCheck %s --check-prefix=FSDP
// FSDP: llcdist-train: --fsdp-prefetch only applies to --zero 3 (FSDP)
// RUN: not llc-dist-opt %s --llcdist-train="lr=-1" 2>&1 | FileCheck %s --check-prefix=LR
// LR: llcdist-train: --lr must be > 0 (default 1e-3), got -1
// RUN: not llc-dist-opt %s --llcdist-train="dp=2 zero=3 fsdp-prefetch=1" --dump-pass-pipeline 2>&1 | FileCheck %s --check-prefix=FSDPOK
// FSDPOK: llcdist-plan-fsdp-prefetch
module {
}
