// RUN: llc-dist-opt %s -split-input-file -llcdist-autodiff -llcdist-add-optimizer -llcdist-partition -llcdist-pipeline-split -llcdist-lower-to-plan -llcdist-plan-zero="stage=1" -verify-diagnostics | FileCheck %s --check-prefix=Z1
// RUN: llc-dist-opt %s -split-input-file -llcdist-autodiff -llcdist-add-optimizer -llcdist-partition -llcdist-pipeline-split -llcdist-lower-to-plan -llcdist-plan-zero="stage=2" -verify-diagnostics | FileCheck %s --check-prefix=Z2
// RUN: llc-dist-opt %s -split-input-file -llcdist-autodiff -llcdist-add-optimizer -llcdist-partition -llcdist-pipeline-split -llcdist-lower-to-plan="record-param-scopes=true" -llcdist-plan-zero="stage=3" -verify-diagnostics | FileCheck %s --check-prefix=Z3
// RUN: llc-dist-opt %s -split-input-file -llcdist-autodiff -llcdist-add-optimizer -llcdist-partition -llcdist-pipeline-split -llcdist-lower-to-plan="record-param-scopes=true" -llcdist-plan-zero="stage=3 reshard-after-forward=false" -verify-diagnostics | FileCheck %s --check-prefix=KEEP
// RUN: llc-dist-opt %s -split-input-file -llcdist-autodiff -llcdist-add-optimizer -llcdist-partition -llcdist-pipeline-split -llcdist-lower-to-plan="record-param-scopes=true" 2>/dev/null | FileCheck %s --check-prefix=SCOPES

// ZeRO on dp = 2 from the xf step: llcdist-plan-zero on the plan lowered
// without ZeRO (for stage 3 with the parameter scopes recorded; the pass
// alone: test/Dialect/Plan/Transforms/llcdist-plan-zero*.mlir). Every parameter's rows split in two blocks. A tied 16x8 table (blocks of 8x8 = 64 elements), a
// layer's 8x8 matrix (4x8 = 32) and a rank-1 norm weight of 8 (4).
// (llcdist-pipeline-split leaves a mesh without pp as it is; it cuts only
// the pipelined case below.)

// record-param-scopes (what llcdist-plan-zero's stage 3 needs): the kernel
// where each scope begins to read a parameter says so; the lowering itself
// shards nothing. The layer body's backward is a scope of its own.
// SCOPES-LABEL: name = "zero-dp2"
// SCOPES: plan.buffer @{{b[0-9]+}} : tensor<16x8xf32> {kind = "param", name = "wte"}
// SCOPES: plan.kernel "embedding_fwd" {{.*}} {plan.param_scopes = [{loc = #{{loc[0-9]*}}, param = "wte", slot = ""}]}
// SCOPES: plan.kernel "linear_fwd" {{.*}} {plan.param_scopes = [{loc = #{{loc[0-9]*}}, param = "h.0.w", slot = ""}]}
// SCOPES: plan.subroutine @backward {
// SCOPES: {plan.param_scopes = [{loc = #{{loc[0-9]*}}, param = "h.0.w", slot = ""}]}
// SCOPES-NOT: zero =

// ZeRO-1: only the optimizer state is a block. The whole gradient is
// reduce-scattered once per step, in the optimizer, instead of all-reduced;
// the norm sums the blocks over dp; each update cuts this rank's block of the
// parameter out (shard_slice), updates it and gathers the blocks back.
// Z1-LABEL: name = "zero-dp2"
// Z1-DAG: plan.buffer @[[WTE:b[0-9]+]] : tensor<16x8xf32> {kind = "param", name = "wte"}
// Z1-DAG: plan.buffer @[[WTEG:b[0-9]+]] : tensor<16x8xf32> {kind = "grad", name = "wte.grad"}
// Z1-DAG: plan.buffer @[[WTES:b[0-9]+]] : tensor<8x8xf32> {kind = "scratch", name = "wte.grad_shard"}
// Z1-DAG: plan.buffer @[[W0G:b[0-9]+]] : tensor<8x8xf32> {kind = "grad", name = "h.0.w.grad"}
// Z1-DAG: plan.buffer @[[W0S:b[0-9]+]] : tensor<4x8xf32> {kind = "scratch", name = "h.0.w.grad_shard"}
// Z1-DAG: plan.buffer @[[NS:b[0-9]+]] : tensor<4xf32> {kind = "scratch", name = "norm.grad_shard"}
// Z1-DAG: plan.buffer @[[SLICE:b[0-9]+]] : tensor<8x8xf32> {kind = "scratch", name = "wte.shard"}
// Z1-DAG: plan.buffer @[[M:b[0-9]+]] : tensor<8x8xf32> {kind = "optimizer_state", name = "wte.exp_avg"}
// Z1-DAG: plan.buffer @{{b[0-9]+}} : tensor<4xf32> {kind = "optimizer_state", name = "norm.exp_avg_sq"}
// Z1-DAG: plan.param "wte" value @[[WTE]] grad @[[WTEG]] {{.*}}local_shape = array<i64: 16, 8>, weight_decay = false, zero = {axis = "dp", stage = 1 : i64}}
// Z1-DAG: plan.param "norm" {{.*}}local_shape = array<i64: 8>, weight_decay = false, zero = {axis = "dp", stage = 1 : i64}}
// The backward writes the whole gradients, as without ZeRO.
// Z1: plan.subroutine @backward {
// Z1-NOT: reduce_scatter
// Z1: plan.kernel "linear_bwd_weight" {dw = @[[WTEG]], {{.*}}accumulate = true
// Z1-NOT: reduce_scatter
// Z1: plan.subroutine @optimizer {
// Z1-NEXT: plan.kernel "reduce_scatter" {x = @[[WTEG]], y = @[[WTES]]} {axis = "dp", inner = 64 : i64, op = "sum", outer = 1 : i64} {plan.origin = "zero", plan.payload = "gradients"}
// Z1-NEXT: plan.kernel "reduce_scatter" {x = @[[W0G]], y = @[[W0S]]} {axis = "dp", inner = 32 : i64, op = "sum", outer = 1 : i64}
// Z1-NEXT: plan.kernel "reduce_scatter" {{.*}}inner = 4 : i64
// Z1-NEXT: plan.kernel "all_reduce" {x = [@{{b[0-9]+}}]} {axis = "dp", op = "avg"} {plan.origin = "loss", plan.payload = "loss"}
// Z1-NEXT: plan.kernel "grad_norm_sq" {grads = [@[[WTES]], @[[W0S]], @[[NS]]], sq = @[[SQ:b[0-9]+]]} {}
// Z1-NEXT: plan.kernel "all_reduce" {x = [@[[SQ]]]} {axis = "dp", op = "sum"} {plan.origin = "grad_norm", plan.payload = "grad norm"}
// Z1-NEXT: plan.kernel "grad_norm_clip" {grads = [@[[WTES]], @[[W0S]], @[[NS]]], norm = @{{b[0-9]+}}, sq = @[[SQ]]} {max_norm = 0.000000e+00 : f64}
// Z1-NEXT: plan.kernel "shard_slice" {x = @[[WTE]], y = @[[SLICE]]} {axis = "dp", inner = 64 : i64, outer = 1 : i64}
// Z1-NEXT: plan.kernel "adamw" {grad = @[[WTES]], m = @[[M]], param = @[[SLICE]], v = @{{b[0-9]+}}}
// Z1-NEXT: plan.kernel "all_gather" {x = @[[SLICE]], y = @[[WTE]]} {axis = "dp", inner = 64 : i64, outer = 1 : i64} {plan.origin = "zero", plan.payload = "parameters"}
// Z1-NOT: all_reduce

// ZeRO-2: the gradient is a block too. Each contribution is computed whole
// into a scratch buffer, reduce-scattered at once and added to the block
// (the tied table: twice); the optimizer reduces nothing but the loss.
// Z2-LABEL: name = "zero-dp2"
// Z2-DAG: plan.buffer @[[WTE:b[0-9]+]] : tensor<16x8xf32> {kind = "param", name = "wte"}
// Z2-DAG: plan.buffer @[[WTEG:b[0-9]+]] : tensor<8x8xf32> {kind = "grad", name = "wte.grad"}
// Z2-DAG: plan.buffer @{{b[0-9]+}} : tensor<4x8xf32> {kind = "grad", name = "h.0.w.grad"}
// Z2-DAG: plan.buffer @{{b[0-9]+}} : tensor<4xf32> {kind = "grad", name = "norm.grad"}
// Z2-DAG: plan.buffer @[[MB:b[0-9]+]] : tensor<16x8xf32> {kind = "scratch", name = "wte.grad_mb"}
// Z2-DAG: plan.buffer @[[PART:b[0-9]+]] : tensor<8x8xf32> {kind = "scratch", name = "wte.grad_part"}
// Z2-DAG: plan.buffer @[[MB1:b[0-9]+]] : tensor<16x8xf32> {kind = "scratch", name = "wte.grad_mb#1"}
// Z2-DAG: plan.param "wte" {{.*}}zero = {axis = "dp", stage = 2 : i64}}
// Z2: plan.subroutine @backward {
// Z2: plan.kernel "linear_bwd_weight" {dw = @[[MB]], {{.*}}accumulate = false
// Z2-NEXT: plan.kernel "reduce_scatter" {x = @[[MB]], y = @[[PART]]} {axis = "dp", inner = 64 : i64, op = "sum", outer = 1 : i64} {plan.origin = "zero", plan.payload = "gradients"}
// Z2-NEXT: plan.kernel "accumulate" {x = @[[PART]], y = @[[WTEG]]} {n = 64 : i64}
// Z2: plan.kernel "embedding_bwd_weight" {dout = @{{b[0-9]+}}, dtable = @[[MB1]], {{.*}}accumulate = false
// Z2-NEXT: plan.kernel "reduce_scatter" {x = @[[MB1]]
// Z2-NEXT: plan.kernel "accumulate" {x = @{{b[0-9]+}}, y = @[[WTEG]]}
// Z2: plan.subroutine @optimizer {
// Z2-NEXT: plan.kernel "all_reduce" {{.*}}plan.payload = "loss"
// Z2-NEXT: plan.kernel "grad_norm_sq" {grads = [@[[WTEG]], {{.*}}sq = @[[SQ:b[0-9]+]]}
// Z2-NEXT: plan.kernel "all_reduce" {x = [@[[SQ]]]} {axis = "dp", op = "sum"} {plan.origin = "grad_norm"
// Z2-NEXT: plan.kernel "grad_norm_clip" {grads = [@[[WTEG]], {{.*}}sq = @[[SQ]]}
// Z2-NEXT: plan.kernel "shard_slice" {x = @[[WTE]]
// Z2-NEXT: plan.kernel "adamw" {grad = @[[WTEG]],
// Z2-NEXT: plan.kernel "all_gather" {{.*}}y = @[[WTE]]}

// ZeRO-3 (FSDP): the parameter is a block too. Each scope gathers the whole
// parameter right before its first use there: the step's top level once
// (the tied table, read in the forward and the backward), the layer body's
// forward and its backward each (reshard after forward). The update writes
// the block in place: no slice, no gather after.
// Z3-LABEL: name = "zero-dp2"
// Z3-DAG: plan.buffer @[[WTE:b[0-9]+]] : tensor<8x8xf32> {kind = "param", name = "wte"}
// Z3-DAG: plan.buffer @[[WTEF:b[0-9]+]] : tensor<16x8xf32> {kind = "activation", name = "wte.gathered"}
// Z3-DAG: plan.buffer @[[W0:b[0-9]+]] : tensor<4x8xf32> {kind = "param", name = "h.0.w"}
// Z3-DAG: plan.buffer @[[W0F:b[0-9]+]] : tensor<8x8xf32> {kind = "activation", name = "h.0.w.gathered"}
// Z3-DAG: plan.buffer @[[W0B:b[0-9]+]] : tensor<8x8xf32> {kind = "activation", name = "h.0.w.gathered#1"}
// Z3-DAG: plan.buffer @{{b[0-9]+}} : tensor<4xf32> {kind = "param", name = "norm"}
// Z3-DAG: plan.param "h.0.w" value @[[W0]] {{.*}}local_shape = array<i64: 8, 8>, weight_decay = true, zero = {axis = "dp", stage = 3 : i64}}
// Z3: plan.subroutine @forward {
// Z3-NEXT: plan.kernel "load_microbatch"
// Z3-NEXT: plan.kernel "all_gather" {x = @[[WTE]], y = @[[WTEF]]} {axis = "dp", inner = 64 : i64, outer = 1 : i64} {plan.origin = "zero", plan.payload = "parameters"}
// Z3-NEXT: plan.kernel "embedding_fwd" {{.*}}table = @[[WTEF]]}
// Z3-NEXT: plan.kernel "all_gather" {x = @[[W0]], y = @[[W0F]]} {axis = "dp", inner = 32 : i64, outer = 1 : i64}
// Z3-NEXT: plan.kernel "linear_fwd" {w = @[[W0F]],
// Z3: plan.kernel "linear_fwd" {w = @[[WTEF]],
// Z3: plan.subroutine @backward {
// Z3-NOT: "all_gather" {x = @[[WTE]]
// Z3: plan.kernel "linear_bwd_input" {{.*}}w = @[[WTEF]]}
// Z3: plan.kernel "all_gather" {x = @[[W0]], y = @[[W0B]]}
// Z3: plan.kernel "linear_bwd_input" {{.*}}w = @[[W0B]]}
// Z3: plan.subroutine @optimizer {
// Z3-NOT: shard_slice
// Z3: plan.kernel "adamw" {grad = @{{b[0-9]+}}, m = @{{b[0-9]+}}, param = @[[WTE]],
// Z3-NOT: {{shard_slice|all_gather}}
// Z3: plan.schedule

// reshard-after-forward=false: the layer's backward reads the forward's
// gathered copy; nothing is gathered in the backward.
// KEEP-LABEL: name = "zero-dp2"
// KEEP-DAG: plan.buffer @[[W0F:b[0-9]+]] : tensor<8x8xf32> {kind = "activation", name = "h.0.w.gathered"}
// KEEP-NOT: name = "h.0.w.gathered#1"
// KEEP: plan.subroutine @backward {
// KEEP-NOT: all_gather
// KEEP: plan.kernel "linear_bwd_input" {{.*}}w = @[[W0F]]}
// KEEP-NOT: all_gather
// KEEP: plan.subroutine @optimizer
module attributes {xf.model = {microbatches = 1 : i64, name = "zero-dp2", architecture = "LlamaForCausalLM", vocab_size = 16 : i64, num_layers = 1 : i64}} {
  shard.grid @mesh(shape = 2x1x1) {xf.mesh_axes = ["dp", "tp", "pp"], xf.rank_order = ["tp", "dp", "pp"]}
  func.func private @block(%x: tensor<4x4x8xf32>) -> tensor<4x4x8xf32> attributes {xf.layer_body} {
    %w = xf.param "h.{i}.w" : tensor<8x8xf32>
    %h = xf.linear out_in %x, %w : (tensor<4x4x8xf32>, tensor<8x8xf32>) -> tensor<4x4x8xf32>
    %y = xf.add %x, %h : tensor<4x4x8xf32>
    return %y : tensor<4x4x8xf32>
  }
  func.func @forward(%ids: tensor<4x4xi32>, %t: tensor<4x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %wte = xf.param "wte" : tensor<16x8xf32>
    %e = xf.embedding %ids, %wte : (tensor<4x4xi32>, tensor<16x8xf32>) -> tensor<4x4x8xf32>
    %l = xf.layer @block[0](%e) : (tensor<4x4x8xf32>) -> tensor<4x4x8xf32>
    %g = xf.param "norm" : tensor<8xf32>
    %n = xf.rms_norm %l, %g {eps = 1.0e-6 : f64} : (tensor<4x4x8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %logits = xf.linear out_in %n, %wte : (tensor<4x4x8xf32>, tensor<16x8xf32>) -> tensor<4x4x16xf32>
    %loss = xf.cross_entropy %logits, %t : (tensor<4x4x16xf32>, tensor<4x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// dp = 2 does not divide 15 rows: blocks of ceil(15 / 2) = 8 rows, the last
// one ending in a row of zero padding. The param says `block_rows`; the
// collectives and the slice carry `total` = 15 x 8 = 120, the real elements
// of the whole side.
// Z1-LABEL: name = "zero-padded-rows"
// Z1-DAG: plan.buffer @{{b[0-9]+}} : tensor<8x8xf32> {kind = "optimizer_state", name = "wte.exp_avg"}
// Z1-DAG: plan.param "wte" {{.*}}local_shape = array<i64: 15, 8>, weight_decay = false, zero = {axis = "dp", block_rows = 8 : i64, stage = 1 : i64}}
// Z1: plan.kernel "reduce_scatter" {{.*}}{axis = "dp", inner = 64 : i64, op = "sum", outer = 1 : i64, total = 120 : i64}
// Z1: plan.kernel "shard_slice" {{.*}}{axis = "dp", inner = 64 : i64, outer = 1 : i64, total = 120 : i64}
// Z1: plan.kernel "all_gather" {{.*}}{axis = "dp", inner = 64 : i64, outer = 1 : i64, total = 120 : i64}
// Z2-LABEL: name = "zero-padded-rows"
// Z2-DAG: plan.buffer @{{b[0-9]+}} : tensor<8x8xf32> {kind = "grad", name = "wte.grad"}
// Z2-DAG: plan.param "wte" {{.*}}zero = {axis = "dp", block_rows = 8 : i64, stage = 2 : i64}}
// Z2: plan.kernel "reduce_scatter" {{.*}}total = 120 : i64
// Z3-LABEL: name = "zero-padded-rows"
// Z3-DAG: plan.buffer @{{b[0-9]+}} : tensor<8x8xf32> {kind = "param", name = "wte"}
// Z3-DAG: plan.buffer @{{b[0-9]+}} : tensor<15x8xf32> {kind = "activation", name = "wte.gathered"}
// Z3: plan.kernel "all_gather" {{.*}}{axis = "dp", inner = 64 : i64, outer = 1 : i64, total = 120 : i64}
// KEEP-LABEL: name = "zero-padded-rows"
module attributes {xf.model = {microbatches = 1 : i64, name = "zero-padded-rows"}} {
  shard.grid @mesh(shape = 2x1x1) {xf.mesh_axes = ["dp", "tp", "pp"], xf.rank_order = ["tp", "dp", "pp"]}
  func.func @forward(%ids: tensor<4x4xi32>, %t: tensor<4x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %wte = xf.param "wte" : tensor<15x8xf32>
    %e = xf.embedding %ids, %wte : (tensor<4x4xi32>, tensor<15x8xf32>) -> tensor<4x4x8xf32>
    %logits = xf.linear out_in %e, %wte : (tensor<4x4x8xf32>, tensor<15x8xf32>) -> tensor<4x4x15xf32>
    %loss = xf.cross_entropy %logits, %t : (tensor<4x4x15xf32>, tensor<4x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Mixed precision under ZeRO: the f32 master is always a block. Stages 1 and
// 2 round this rank's block to bf16 at step_begin and gather the blocks into
// the whole bf16 working copy (`value_block`); the update writes the master
// block directly (no slice). Stage 3 holds a bf16 block and casts in place;
// the forward gathers it.
// Z1-LABEL: name = "zero-bf16"
// Z1-DAG: plan.buffer @[[MASTER:b[0-9]+]] : tensor<8x8xf32> {kind = "param", memory_class = "optimizer_state", name = "wte"}
// Z1-DAG: plan.buffer @[[COPY:b[0-9]+]] : tensor<16x8xbf16> {kind = "param", name = "wte.bf16"}
// Z1-DAG: plan.buffer @[[BLOCK:b[0-9]+]] : tensor<8x8xbf16> {kind = "scratch", name = "wte.bf16_block"}
// Z1-DAG: plan.param "wte" value @[[MASTER]] {{.*}}zero = {axis = "dp", stage = 1 : i64, value_block = true}}
// Z1: plan.subroutine @step_begin {
// Z1-NEXT: plan.kernel "cast" {x = @[[MASTER]], y = @[[BLOCK]]} {n = 64 : i64}
// Z1-NEXT: plan.kernel "all_gather" {x = @[[BLOCK]], y = @[[COPY]]} {axis = "dp", inner = 64 : i64, outer = 1 : i64} {plan.origin = "zero", plan.payload = "parameters"}
// Z1-NEXT: plan.kernel "fill_zero"
// Z1: plan.subroutine @optimizer {
// Z1-NOT: shard_slice
// Z1: plan.kernel "adamw" {grad = @{{b[0-9]+}}, m = @{{b[0-9]+}}, param = @[[MASTER]],
// Z1-NOT: all_gather
// Z1: plan.schedule
// Z2-LABEL: name = "zero-bf16"
// Z2-DAG: plan.param "wte" {{.*}}zero = {axis = "dp", stage = 2 : i64, value_block = true}}
// Z2: plan.subroutine @step_begin {
// Z2-NEXT: plan.kernel "cast"
// Z2-NEXT: plan.kernel "all_gather"
// Z3-LABEL: name = "zero-bf16"
// Z3-DAG: plan.buffer @[[MASTER:b[0-9]+]] : tensor<8x8xf32> {kind = "param", memory_class = "optimizer_state", name = "wte"}
// Z3-DAG: plan.buffer @[[COPY:b[0-9]+]] : tensor<8x8xbf16> {kind = "param", name = "wte.bf16"}
// Z3-DAG: plan.param "wte" value @[[MASTER]] {{.*}}zero = {axis = "dp", stage = 3 : i64}}
// Z3: plan.subroutine @step_begin {
// Z3-NEXT: plan.kernel "cast" {x = @[[MASTER]], y = @[[COPY]]} {n = 64 : i64}
// Z3-NEXT: plan.kernel "fill_zero"
// Z3: plan.subroutine @forward {
// Z3: plan.kernel "all_gather" {x = @[[COPY]], y = @{{b[0-9]+}}} {axis = "dp", inner = 64 : i64, outer = 1 : i64}
// KEEP-LABEL: name = "zero-bf16"
module attributes {xf.model = {microbatches = 1 : i64, name = "zero-bf16"}} {
  shard.grid @mesh(shape = 2x1x1) {xf.mesh_axes = ["dp", "tp", "pp"], xf.rank_order = ["tp", "dp", "pp"]}
  func.func @forward(%ids: tensor<4x4xi32>, %t: tensor<4x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %wte = xf.param "wte" : tensor<16x8xbf16>
    %e = xf.embedding %ids, %wte : (tensor<4x4xi32>, tensor<16x8xbf16>) -> tensor<4x4x8xbf16>
    %logits = xf.linear out_in %e, %wte : (tensor<4x4x8xbf16>, tensor<16x8xbf16>) -> tensor<4x4x16xbf16>
    %loss = xf.cross_entropy %logits, %t : (tensor<4x4x16xbf16>, tensor<4x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// ZeRO with a pipeline (dp = 2, pp = 2; llcdist-pipeline-split cuts this
// module only): the norm sums over both axes, and the tied table's replica
// on stage 1 sends its gradient home as it holds it. ZeRO-1: whole, not
// reduced over dp (the home adds it, then reduce-scatters the sum once);
// ZeRO-2/3: its dp block, already reduce-scattered in the backward.
// Z1-LABEL: name = "zero-dp2-pp2"
// Z1: plan.program @stage0 {
// Z1-DAG: plan.buffer @[[WTEG:b[0-9]+]] : tensor<16x8xf32> {kind = "grad", name = "wte.grad"}
// Z1-DAG: plan.buffer @[[PART:b[0-9]+]] : tensor<16x8xf32> {kind = "scratch", name = "wte.grad@stage1"}
// Z1-DAG: plan.buffer @[[SHARD:b[0-9]+]] : tensor<8x8xf32> {kind = "scratch", name = "wte.grad_shard"}
// Z1: plan.subroutine @optimizer {
// Z1-NEXT: plan.kernel "recv" {y = @[[PART]]} {axis = "pp", peer = 1 : i64, tag = 2 : i64} {plan.origin = "tied_parameter", plan.payload = "tied parameter"}
// Z1-NEXT: plan.kernel "accumulate" {x = @[[PART]], y = @[[WTEG]]} {n = 128 : i64}
// Z1-NEXT: plan.kernel "reduce_scatter" {x = @[[WTEG]], y = @[[SHARD]]} {axis = "dp", inner = 64 : i64, op = "sum", outer = 1 : i64}
// Z1: plan.kernel "grad_norm_sq" {grads = [@[[SHARD]], {{.*}}sq = @[[SQ:b[0-9]+]]}
// Z1-NEXT: plan.kernel "all_reduce" {x = [@[[SQ]]]} {axis = "dp", op = "sum"} {plan.origin = "grad_norm"
// Z1-NEXT: plan.kernel "all_reduce" {x = [@[[SQ]]]} {axis = "pp", op = "sum"} {plan.origin = "grad_norm"
// Z1-NEXT: plan.kernel "grad_norm_clip" {grads = [@[[SHARD]], {{.*}}sq = @[[SQ]]}
// Z1: plan.program @stage1 {
// Z1-DAG: plan.buffer @[[RG:b[0-9]+]] : tensor<16x8xf32> {kind = "grad", name = "wte.grad"}
// Z1-DAG: plan.param "wte" {{.*}}local_shape = array<i64: 16, 8>, pipeline.replica_of = 0 : i64, weight_decay = false, zero = {axis = "dp", stage = 1 : i64}}
// Z1: plan.subroutine @optimizer {
// Z1-NEXT: plan.kernel "send" {x = @[[RG]]} {axis = "pp", peer = 0 : i64, tag = 2 : i64} {plan.origin = "tied_parameter", plan.payload = "tied parameter"}
// Z1-NOT: "reduce_scatter" {x = @[[RG]]
// Z1: plan.kernel "grad_norm_sq" {{.*}}sq = @[[RSQ:b[0-9]+]]}
// Z1-NEXT: plan.kernel "all_reduce" {x = [@[[RSQ]]]} {axis = "dp", op = "sum"}
// Z1-NEXT: plan.kernel "all_reduce" {x = [@[[RSQ]]]} {axis = "pp", op = "sum"}
// Z1-NEXT: plan.kernel "grad_norm_clip"
// Z2-LABEL: name = "zero-dp2-pp2"
// Z2: plan.program @stage0 {
// Z2-DAG: plan.buffer @[[WTEG:b[0-9]+]] : tensor<8x8xf32> {kind = "grad", name = "wte.grad"}
// Z2-DAG: plan.buffer @[[PART:b[0-9]+]] : tensor<8x8xf32> {kind = "scratch", name = "wte.grad@stage1"}
// Z2: plan.subroutine @optimizer {
// Z2-NEXT: plan.kernel "recv" {y = @[[PART]]} {axis = "pp", peer = 1 : i64, tag = 2 : i64}
// Z2-NEXT: plan.kernel "accumulate" {x = @[[PART]], y = @[[WTEG]]} {n = 64 : i64}
// Z2-NEXT: plan.kernel "grad_norm_sq" {grads = [@[[WTEG]], {{.*}}sq = @[[SQ:b[0-9]+]]}
// Z2-NEXT: plan.kernel "all_reduce" {x = [@[[SQ]]]} {axis = "dp", op = "sum"}
// Z2-NEXT: plan.kernel "all_reduce" {x = [@[[SQ]]]} {axis = "pp", op = "sum"}
// Z2-NEXT: plan.kernel "grad_norm_clip" {grads = [@[[WTEG]], {{.*}}sq = @[[SQ]]}
// Z2: plan.program @stage1 {
// Z2-DAG: plan.buffer @[[RG:b[0-9]+]] : tensor<8x8xf32> {kind = "grad", name = "wte.grad"}
// Z2: plan.subroutine @optimizer {
// Z2-NEXT: plan.kernel "send" {x = @[[RG]]}
// Z3-LABEL: name = "zero-dp2-pp2"
// Z3: plan.program @stage0 {
// Z3-DAG: plan.buffer @[[WTE:b[0-9]+]] : tensor<8x8xf32> {kind = "param", name = "wte"}
// Each microbatch slot gathers its own copy: an instance of the gathered
// buffer per slot, as for the chunk's other buffers.
// Z3-DAG: plan.buffer @{{b[0-9]+}} : tensor<16x8xf32> {kind = "activation", name = "v0/wte.gathered", slots = 2 : i64}
// Z3-DAG: plan.buffer @{{b[0-9]+}} : tensor<8x8xf32> {kind = "scratch", name = "wte.grad@stage1"}
// Z3: plan.kernel "send" {x = @[[WTE]]} {axis = "pp", peer = 1 : i64, tag = 2 : i64}
// Z3: plan.program @stage1 {
// Z3-DAG: plan.buffer @[[RWTE:b[0-9]+]] : tensor<8x8xf32> {kind = "param", name = "wte"}
// Z3: plan.kernel "recv" {y = @[[RWTE]]} {axis = "pp", peer = 0 : i64, tag = 2 : i64}
// KEEP-LABEL: name = "zero-dp2-pp2"
module attributes {xf.model = {microbatches = 2 : i64, name = "zero-dp2-pp2", architecture = "GPT2LMHeadModel", vocab_size = 16 : i64, num_layers = 4 : i64}} {
  shard.grid @mesh(shape = 2x1x2) {xf.mesh_axes = ["dp", "tp", "pp"], xf.rank_order = ["tp", "dp", "pp"]}
  func.func private @block(%x: tensor<4x4x8xf32>) -> tensor<4x4x8xf32> attributes {xf.layer_body} {
    %w = xf.param "h.{i}.w" : tensor<8x8xf32>
    %h = xf.linear out_in %x, %w : (tensor<4x4x8xf32>, tensor<8x8xf32>) -> tensor<4x4x8xf32>
    %y = xf.add %x, %h : tensor<4x4x8xf32>
    return %y : tensor<4x4x8xf32>
  }
  func.func @forward(%ids: tensor<4x4xi32>, %t: tensor<4x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %wte = xf.param "wte" : tensor<16x8xf32>
    %e = xf.embedding %ids, %wte : (tensor<4x4xi32>, tensor<16x8xf32>) -> tensor<4x4x8xf32>
    %l0 = xf.layer @block[0](%e) : (tensor<4x4x8xf32>) -> tensor<4x4x8xf32>
    %l1 = xf.layer @block[1](%l0) : (tensor<4x4x8xf32>) -> tensor<4x4x8xf32>
    %l2 = xf.layer @block[2](%l1) : (tensor<4x4x8xf32>) -> tensor<4x4x8xf32>
    %l3 = xf.layer @block[3](%l2) : (tensor<4x4x8xf32>) -> tensor<4x4x8xf32>
    %logits = xf.linear out_in %l3, %wte : (tensor<4x4x8xf32>, tensor<16x8xf32>) -> tensor<4x4x16xf32>
    %loss = xf.cross_entropy %logits, %t : (tensor<4x4x16xf32>, tensor<4x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// ZeRO shards over dp: a mesh without dp is an error.
// expected-error@+1 {{shards over dp, but the mesh has dp=1 (use --mesh dp=N with N > 1)}}
module attributes {xf.model = {microbatches = 1 : i64, name = "zero-dp1"}} {
  shard.grid @mesh(shape = 1x1x1) {xf.mesh_axes = ["dp", "tp", "pp"], xf.rank_order = ["tp", "dp", "pp"]}
  func.func @forward(%ids: tensor<4x4xi32>, %t: tensor<4x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %wte = xf.param "wte" : tensor<16x8xf32>
    %e = xf.embedding %ids, %wte : (tensor<4x4xi32>, tensor<16x8xf32>) -> tensor<4x4x8xf32>
    %logits = xf.linear out_in %e, %wte : (tensor<4x4x8xf32>, tensor<16x8xf32>) -> tensor<4x4x16xf32>
    %loss = xf.cross_entropy %logits, %t : (tensor<4x4x16xf32>, tensor<4x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
