// RUN: llc-dist-opt %s -split-input-file -llcdist-autodiff -llcdist-add-optimizer -llcdist-partition -llcdist-pipeline-split -llcdist-lower-to-plan | FileCheck %s
// RUN: llc-dist-opt %s -split-input-file -llcdist-autodiff -llcdist-add-optimizer -llcdist-partition -llcdist-pipeline-split="schedule=gpipe" -llcdist-lower-to-plan | FileCheck %s --check-prefix=GPIPE
// RUN: llc-dist-opt %s -split-input-file -llcdist-autodiff -llcdist-add-optimizer -llcdist-partition -llcdist-pipeline-split="schedule=zb-h1" -llcdist-lower-to-plan | FileCheck %s --check-prefix=ZB
// RUN: llc-dist-opt %s -split-input-file -llcdist-autodiff -llcdist-add-optimizer -llcdist-partition -llcdist-pipeline-split="schedule=interleaved virtual-stages=2" -llcdist-lower-to-plan | FileCheck %s --check-prefix=VIRT

// llcdist-lower-to-plan on modules cut by llcdist-pipeline-split (pp = 2,
// two microbatches): one program per stage, as its stage plan says
// (unittests/Conversion/StagePlanTest.cpp tests the plans themselves).

// A four-layer model with a tied table, read by the embedding (stage 0) and
// the LM head (stage 1). 1F1B: stage 0 has two microbatches in flight (two
// slots: its activation buffers have two instances and the second
// microbatch's actions run in slot 1), stage 1 one, reused. The one value crossing forward (tag 0) is sent
// at the end of stage 0's forward and received where stage 1 first reads
// it; the gradient crossing back (tag 1) the other way. The tied table's tag
// follows (2): stage 1 holds a replica (no state, not in its norm), sends
// its gradient home before the update and receives the new value after.
// CHECK-LABEL: name = "pp2-tied"
// CHECK: plan.program @stage0 {
// CHECK-DAG: plan.buffer @{{b[0-9]+}} : tensor<2x4xi32> {kind = "input", name = "v0/input_ids", slots = 2 : i64}
// CHECK-DAG: plan.buffer @{{b[0-9]+}} : tensor<2x4x8xf32> {kind = "activation", name = "v0/:embedding", slots = 2 : i64}
// CHECK-DAG: plan.buffer @[[WTE:b[0-9]+]] : tensor<16x8xf32> {kind = "param", name = "wte"}
// CHECK-DAG: plan.buffer @[[WTEG:b[0-9]+]] : tensor<16x8xf32> {kind = "grad", name = "wte.grad"}
// CHECK-DAG: plan.buffer @[[PART:b[0-9]+]] : tensor<16x8xf32> {kind = "scratch", name = "wte.grad@stage1"}
// CHECK-DAG: plan.param "wte" value @[[WTE]] grad @[[WTEG]] state [@{{b[0-9]+}}, @{{b[0-9]+}}] {init = {kind = "normal", std = 2.000000e-02 : f64}, weight_decay = false}
// No loss on the first stage: step_begin zeroes the gradients only.
// CHECK-NOT: name = "loss"
// CHECK: plan.subroutine @forward_v0 {
// CHECK-NEXT: plan.kernel "load_microbatch"
// CHECK: plan.kernel "send" {x = @{{b[0-9]+}}} {axis = "pp", peer = 1 : i64, tag = 0 : i64} {plan.origin = "pipeline", plan.payload = "activations"}
// CHECK-NEXT: {{^ +}}}{{$}}
// CHECK: plan.subroutine @backward_v0 {
// CHECK-NEXT: plan.kernel "recv" {y = @{{b[0-9]+}}} {axis = "pp", peer = 1 : i64, tag = 1 : i64} {plan.origin = "pipeline", plan.payload = "activation gradients"}
// CHECK: plan.kernel "embedding_bwd_weight" {{.*}}dtable = @[[WTEG]],
// CHECK-NOT: plan.subroutine @forward
// CHECK: plan.subroutine @optimizer {
// CHECK-NEXT: plan.kernel "recv" {y = @[[PART]]} {axis = "pp", peer = 1 : i64, tag = 2 : i64} {plan.origin = "tied_parameter", plan.payload = "tied parameter"}
// CHECK-NEXT: plan.kernel "accumulate" {x = @[[PART]], y = @[[WTEG]]} {n = 128 : i64}
// CHECK-NEXT: plan.kernel "grad_norm_sq" {grads = [@[[WTEG]], {{.*}}], sq = @[[SQ:b[0-9]+]]}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@[[SQ]]]} {axis = "pp", op = "sum"} {plan.origin = "grad_norm", plan.payload = "grad norm"}
// CHECK-NEXT: plan.kernel "grad_norm_clip" {grads = [@[[WTEG]], {{.*}}], norm = @{{b[0-9]+}}, sq = @[[SQ]]} {max_norm
// CHECK-NEXT: plan.kernel "adamw" {grad = @[[WTEG]], m = @{{b[0-9]+}}, param = @[[WTE]],
// CHECK: plan.kernel "send" {x = @[[WTE]]} {axis = "pp", peer = 1 : i64, tag = 2 : i64} {plan.origin = "tied_parameter", plan.payload = "tied parameter"}
// CHECK-NEXT: {{^ +}}}{{$}}
// CHECK: plan.schedule {
// CHECK-NEXT: plan.action @step_begin
// CHECK-NEXT: plan.action @forward_v0 microbatch 0 {pipeline.chunk = 0 : i64, pipeline.kind = "F"}
// CHECK-NEXT: plan.action @forward_v0 microbatch 1 {pipeline.chunk = 0 : i64, pipeline.kind = "F", slot = 1 : i64}
// CHECK-NEXT: plan.action @backward_v0 microbatch 0 {pipeline.chunk = 0 : i64, pipeline.kind = "B"}
// CHECK-NEXT: plan.action @backward_v0 microbatch 1 {pipeline.chunk = 0 : i64, pipeline.kind = "B", slot = 1 : i64}
// CHECK-NEXT: plan.action @optimizer
// CHECK: plan.program @stage1 {
// CHECK-DAG: plan.buffer @[[LOSS:b[0-9]+]] : tensor<1xf32> {kind = "metric", name = "loss"}
// CHECK-DAG: plan.buffer @[[RWTE:b[0-9]+]] : tensor<16x8xf32> {kind = "param", name = "wte"}
// CHECK-DAG: plan.buffer @[[RWTEG:b[0-9]+]] : tensor<16x8xf32> {kind = "grad", name = "wte.grad"}
// CHECK-DAG: plan.param "wte" value @[[RWTE]] grad @[[RWTEG]] state [] {init = {kind = "normal", std = 2.000000e-02 : f64}, pipeline.replica_of = 0 : i64, weight_decay = false}
// CHECK: plan.kernel "fill_zero" {x = [{{.*}}@[[LOSS]]]} {}
// The last stage reads the labels: it loads its microbatch too.
// CHECK: plan.subroutine @forward_v1 {
// CHECK-NEXT: plan.kernel "load_microbatch"
// CHECK-NEXT: plan.kernel "recv" {y = @{{b[0-9]+}}} {axis = "pp", peer = 0 : i64, tag = 0 : i64} {plan.origin = "pipeline", plan.payload = "activations"}
// CHECK: plan.kernel "cross_entropy_fwd" {{.*}}loss = @[[LOSS]],
// CHECK: plan.subroutine @backward_v1 {
// CHECK: plan.kernel "send" {x = @{{b[0-9]+}}} {axis = "pp", peer = 0 : i64, tag = 1 : i64} {plan.origin = "pipeline", plan.payload = "activation gradients"}
// CHECK-NOT: plan.subroutine @forward
// CHECK: plan.subroutine @optimizer {
// CHECK-NEXT: plan.kernel "send" {x = @[[RWTEG]]} {axis = "pp", peer = 0 : i64, tag = 2 : i64} {plan.origin = "tied_parameter", plan.payload = "tied parameter"}
// CHECK-NEXT: plan.kernel "grad_norm_sq" {grads = [
// CHECK-NOT: @[[RWTEG]]
// CHECK-SAME: sq = @[[RSQ:b[0-9]+]]}
// CHECK-NEXT: plan.kernel "all_reduce" {x = [@[[RSQ]]]} {axis = "pp", op = "sum"} {plan.origin = "grad_norm", plan.payload = "grad norm"}
// CHECK-NEXT: plan.kernel "grad_norm_clip" {grads = [
// CHECK-NOT: grad = @[[RWTEG]]
// CHECK: plan.kernel "recv" {y = @[[RWTE]]} {axis = "pp", peer = 0 : i64, tag = 2 : i64} {plan.origin = "tied_parameter", plan.payload = "tied parameter"}
// CHECK: plan.schedule {
// CHECK-NEXT: plan.action @step_begin
// CHECK-NEXT: plan.action @forward_v1 microbatch 0 {pipeline.chunk = 0 : i64, pipeline.kind = "F"}
// CHECK-NEXT: plan.action @backward_v1 microbatch 0 {pipeline.chunk = 0 : i64, pipeline.kind = "B"}
// CHECK-NEXT: plan.action @forward_v1 microbatch 1 {pipeline.chunk = 0 : i64, pipeline.kind = "F"}
// CHECK-NEXT: plan.action @backward_v1 microbatch 1 {pipeline.chunk = 0 : i64, pipeline.kind = "B"}

// GPipe: all forwards before the backwards, so stage 1 also has two
// microbatches in flight: two slots, each with its own instance of the buffers.
// GPIPE-LABEL: name = "pp2-tied"
// GPIPE: plan.program @stage1 {
// GPIPE-DAG: plan.buffer @{{b[0-9]+}} : tensor<2x4x8xf32> {kind = "activation", name = "v1/recv:0", slots = 2 : i64}
// GPIPE: plan.schedule {
// GPIPE-NEXT: plan.action @step_begin
// GPIPE-NEXT: plan.action @forward_v1 microbatch 0 {pipeline.chunk = 0 : i64, pipeline.kind = "F"}
// GPIPE-NEXT: plan.action @forward_v1 microbatch 1 {pipeline.chunk = 0 : i64, pipeline.kind = "F", slot = 1 : i64}
// GPIPE-NEXT: plan.action @backward_v1 microbatch 0 {pipeline.chunk = 0 : i64, pipeline.kind = "B"}
// GPIPE-NEXT: plan.action @backward_v1 microbatch 1 {pipeline.chunk = 0 : i64, pipeline.kind = "B", slot = 1 : i64}

// ZB-H1: stage 0 runs each W right after its B and sends nothing back, so
// its B is the whole backward and its W empty. Stage 1's backward sends the
// input gradient: B computes it (no weight-gradient GEMM before the send),
// W the weight-gradient GEMMs, later. No slot is reused.
// ZB-LABEL: name = "pp2-tied"
// ZB: plan.subroutine @backward_v0 {
// ZB: plan.kernel "linear_bwd_weight"
// ZB: plan.subroutine @backward_weight_v0 {
// ZB-NEXT: {{^ +}}}{{$}}
// ZB: plan.program @stage1 {
// ZB: plan.subroutine @backward_v1 {
// ZB-NOT: linear_bwd_weight
// ZB: plan.kernel "send" {{.*}}tag = 1 : i64
// ZB-NEXT: {{^ +}}}{{$}}
// ZB-NEXT: plan.subroutine @backward_weight_v1 {
// ZB-NEXT: plan.kernel "linear_bwd_weight"
// ZB-NEXT: plan.kernel "linear_bwd_weight"
// ZB-NEXT: {{^ +}}}{{$}}
// ZB-NEXT: plan.subroutine @optimizer {
// ZB: plan.action @backward_v1 microbatch 1 {pipeline.chunk = 0 : i64, pipeline.kind = "B", slot = 1 : i64}
// ZB-NEXT: plan.action @backward_weight_v1 microbatch 0 {pipeline.chunk = 0 : i64, pipeline.kind = "W"}
// ZB-NEXT: plan.action @backward_weight_v1 microbatch 1 {pipeline.chunk = 0 : i64, pipeline.kind = "W", slot = 1 : i64}

// Interleaved, two chunks per stage: stage 0 runs chunks 0 and 2, stage 1
// chunks 1 and 3. The forward crosses 0 -> 1 -> 2 -> 3 (tags 0, 1, 2), the
// backward 3 -> 2 -> 1 -> 0 (tags 3, 4, 5); the tied table's tag is 6.
// Chunk 3 has the loss, so it loads the labels; chunk 2 loads nothing.
// VIRT-LABEL: name = "pp2-tied"
// VIRT: plan.program @stage0 {
// VIRT: plan.subroutine @forward_v0 {
// VIRT: plan.kernel "send" {{.*}}tag = 0 : i64
// VIRT: plan.subroutine @backward_v0 {
// VIRT-NEXT: plan.kernel "recv" {{.*}}tag = 5 : i64
// VIRT: plan.subroutine @forward_v2 {
// VIRT-NEXT: plan.kernel "recv" {{.*}}tag = 1 : i64
// VIRT: plan.kernel "send" {{.*}}tag = 2 : i64
// VIRT: plan.subroutine @backward_v2 {
// VIRT-NEXT: plan.kernel "recv" {{.*}}tag = 3 : i64
// VIRT: plan.kernel "send" {{.*}}tag = 4 : i64
// VIRT: plan.subroutine @optimizer {
// VIRT-NEXT: plan.kernel "recv" {{.*}}tag = 6 : i64} {plan.origin = "tied_parameter", plan.payload = "tied parameter"}
// VIRT: plan.action @forward_v2 microbatch 0 {pipeline.chunk = 1 : i64, pipeline.kind = "F"}
// VIRT: plan.program @stage1 {
// VIRT: plan.subroutine @forward_v1 {
// VIRT-NEXT: plan.kernel "recv" {{.*}}tag = 0 : i64
// VIRT: plan.subroutine @forward_v3 {
// VIRT-NEXT: plan.kernel "load_microbatch"
// VIRT-NEXT: plan.kernel "recv" {{.*}}tag = 2 : i64
// VIRT: plan.kernel "cross_entropy_fwd"
// VIRT: plan.subroutine @backward_v3 {
// VIRT: plan.kernel "send" {{.*}}tag = 3 : i64
// VIRT: plan.action @forward_v3 microbatch 0 {pipeline.chunk = 1 : i64, pipeline.kind = "F"}
module attributes {xf.model = {microbatches = 2 : i64, name = "pp2-tied", architecture = "GPT2LMHeadModel", vocab_size = 16 : i64, num_layers = 4 : i64}} {
  shard.grid @mesh(shape = 1x1x2) {xf.mesh_axes = ["dp", "tp", "pp"], xf.rank_order = ["tp", "dp", "pp"]}
  func.func private @block(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> attributes {xf.layer_body} {
    %w = xf.param "h.{i}.w" : tensor<8x8xf32>
    %h = xf.linear out_in %x, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %y = xf.add %x, %h : tensor<2x4x8xf32>
    return %y : tensor<2x4x8xf32>
  }
  func.func @forward(%ids: tensor<2x4xi32>, %t: tensor<2x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %wte = xf.param "wte" : tensor<16x8xf32>
    %e = xf.embedding %ids, %wte : (tensor<2x4xi32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
    %l0 = xf.layer @block[0](%e) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %l1 = xf.layer @block[1](%l0) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %l2 = xf.layer @block[2](%l1) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %l3 = xf.layer @block[3](%l2) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %logits = xf.linear out_in %l3, %wte : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %loss = xf.cross_entropy %logits, %t : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Mixed precision: each stage casts the masters it holds at step_begin; the
// tied table's replica sends its bf16 gradient home and receives the f32
// master back, from which its next step_begin makes its bf16 copy.
// CHECK-LABEL: name = "pp2-bf16"
// CHECK: plan.program @stage0 {
// CHECK-DAG: plan.buffer @[[PART:b[0-9]+]] : tensor<16x8xbf16> {kind = "scratch", name = "wte.grad@stage1"}
// CHECK: plan.subroutine @optimizer {
// CHECK-NEXT: plan.kernel "recv" {y = @[[PART]]} {{.*}}tag = 2 : i64} {plan.origin = "tied_parameter", plan.payload = "tied parameter"}
// CHECK: plan.program @stage1 {
// CHECK-DAG: plan.buffer @[[MASTER:b[0-9]+]] : tensor<16x8xf32> {kind = "param", memory_class = "optimizer_state", name = "wte"}
// CHECK-DAG: plan.buffer @[[COPY:b[0-9]+]] : tensor<16x8xbf16> {kind = "param", name = "wte.bf16"}
// CHECK-DAG: plan.buffer @[[GRAD:b[0-9]+]] : tensor<16x8xbf16> {kind = "grad", name = "wte.grad"}
// CHECK: plan.subroutine @step_begin {
// CHECK: plan.kernel "cast" {x = @[[MASTER]], y = @[[COPY]]} {n = 128 : i64}
// CHECK: plan.subroutine @optimizer {
// CHECK-NEXT: plan.kernel "send" {x = @[[GRAD]]} {{.*}}tag = 2 : i64} {plan.origin = "tied_parameter", plan.payload = "tied parameter"}
// CHECK: plan.kernel "recv" {y = @[[MASTER]]} {{.*}}tag = 2 : i64} {plan.origin = "tied_parameter", plan.payload = "tied parameter"}
// GPIPE-LABEL: name = "pp2-bf16"
// ZB-LABEL: name = "pp2-bf16"
// VIRT-LABEL: name = "pp2-bf16"
module attributes {xf.model = {microbatches = 2 : i64, name = "pp2-bf16", architecture = "GPT2LMHeadModel", vocab_size = 16 : i64, num_layers = 4 : i64}} {
  shard.grid @mesh(shape = 1x1x2) {xf.mesh_axes = ["dp", "tp", "pp"], xf.rank_order = ["tp", "dp", "pp"]}
  func.func private @block(%x: tensor<2x4x8xbf16>) -> tensor<2x4x8xbf16> attributes {xf.layer_body} {
    %w = xf.param "h.{i}.w" : tensor<8x8xbf16>
    %h = xf.linear out_in %x, %w : (tensor<2x4x8xbf16>, tensor<8x8xbf16>) -> tensor<2x4x8xbf16>
    %y = xf.add %x, %h : tensor<2x4x8xbf16>
    return %y : tensor<2x4x8xbf16>
  }
  func.func @forward(%ids: tensor<2x4xi32>, %t: tensor<2x4xi32>) -> tensor<f32> attributes {xf.entry} {
    %wte = xf.param "wte" : tensor<16x8xbf16>
    %e = xf.embedding %ids, %wte : (tensor<2x4xi32>, tensor<16x8xbf16>) -> tensor<2x4x8xbf16>
    %l0 = xf.layer @block[0](%e) : (tensor<2x4x8xbf16>) -> tensor<2x4x8xbf16>
    %l1 = xf.layer @block[1](%l0) : (tensor<2x4x8xbf16>) -> tensor<2x4x8xbf16>
    %l2 = xf.layer @block[2](%l1) : (tensor<2x4x8xbf16>) -> tensor<2x4x8xbf16>
    %l3 = xf.layer @block[3](%l2) : (tensor<2x4x8xbf16>) -> tensor<2x4x8xbf16>
    %logits = xf.linear out_in %l3, %wte : (tensor<2x4x8xbf16>, tensor<16x8xbf16>) -> tensor<2x4x16xbf16>
    %loss = xf.cross_entropy %logits, %t : (tensor<2x4x16xbf16>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
