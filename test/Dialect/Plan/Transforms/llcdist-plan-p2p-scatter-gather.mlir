// RUN: llc-dist-opt %s -split-input-file -verify-diagnostics --pass-pipeline="builtin.module(plan.program(llcdist-plan-p2p-scatter-gather))" | FileCheck %s
// RUN: llc-dist-opt %s -split-input-file -verify-diagnostics --pass-pipeline="builtin.module(plan.program(llcdist-plan-p2p-scatter-gather,llcdist-plan-p2p-overlap))" | FileCheck %s --check-prefix=OVERLAP

// tp = 2: a stage's forward sends its 1/tp slice of the activation (a
// shard_slice over tp before the send); its backward receives a 1/tp slice of
// the output gradient and all-gathers it over tp into the buffer the recv
// wrote before (its readers unchanged). The slices keep the buffers'
// microbatch slots. The tied parameter's transfer and a transfer tp does not
// divide stay whole.
// CHECK-LABEL: plan.program @stage
// CHECK-SAME: plan.p2p_scatter_gather = {recvs = 1 : i64, sends = 1 : i64}
// CHECK-DAG: plan.buffer @[[HS:b[0-9]+]] : tensor<4xf32> {kind = "activation", name = "h:tp-slice", slots = 2 : i64}
// CHECK-DAG: plan.buffer @[[DYS:b[0-9]+]] : tensor<4xf32> {kind = "activation", name = "dy:tp-slice", slots = 2 : i64}
// CHECK: plan.subroutine @forward {
// CHECK-NEXT: plan.kernel "copy" {x = @x, y = @h}
// CHECK-NEXT: plan.kernel "shard_slice" {x = @h, y = @[[HS]]} {axis = "tp", inner = 4 : i64, outer = 1 : i64}
// CHECK-NEXT: plan.kernel "send" {x = @[[HS]]} {axis = "pp", peer = 1 : i64, tag = 0 : i64} {plan.origin = "pipeline", plan.payload = "activations"}
// CHECK-NEXT: plan.kernel "send" {x = @odd} {axis = "pp", peer = 1 : i64, tag = 2 : i64} {plan.origin = "pipeline"}
// CHECK-NEXT: plan.kernel "send" {x = @t} {axis = "pp", peer = 1 : i64, tag = 3 : i64} {plan.origin = "tied_parameter"}
// CHECK: plan.subroutine @backward {
// CHECK-NEXT: plan.kernel "recv" {y = @[[DYS]]} {axis = "pp", peer = 1 : i64, tag = 1 : i64} {plan.origin = "pipeline", plan.payload = "activation gradients"}
// CHECK-NEXT: plan.kernel "all_gather" {x = @[[DYS]], y = @dy} {axis = "tp", inner = 4 : i64, outer = 1 : i64} {plan.origin = "pipeline", plan.payload = "activation gradients"}
// CHECK-NEXT: plan.kernel "copy" {x = @dy, y = @dx}
// The overlap pass then starts the smaller transfers: the recv before its
// gather, the send after its slice.
// OVERLAP-LABEL: plan.program @stage
// OVERLAP: plan.kernel "shard_slice"
// OVERLAP-NEXT: plan.kernel "send" {x = @{{b[0-9]+}}} {{.*}}queue = "comm", token = {{[0-9]+}}
// OVERLAP: plan.kernel "recv" {y = @{{b[0-9]+}}} {{.*}}queue = "comm", token = [[T:[0-9]+]]
// OVERLAP-NEXT: plan.kernel "wait" {} {} {token = [[T]] : i64}
// OVERLAP-NEXT: plan.kernel "all_gather"
module {
  shard.grid @mesh(shape = 1x2x2)
  plan.program @stage {
    plan.buffer @x : tensor<2x4xf32> {kind = "activation", name = "x", slots = 2 : i64}
    plan.buffer @h : tensor<2x4xf32> {kind = "activation", name = "h", slots = 2 : i64}
    plan.buffer @odd : tensor<3xf32> {kind = "activation", name = "odd"}
    plan.buffer @dy : tensor<2x4xf32> {kind = "activation", name = "dy", slots = 2 : i64}
    plan.buffer @dx : tensor<2x4xf32> {kind = "activation", name = "dx", slots = 2 : i64}
    plan.buffer @t : tensor<4xf32> {kind = "param", name = "t"}
    plan.buffer @dt : tensor<4xf32> {kind = "grad", name = "t.grad"}
    plan.param "t" value @t grad @dt state [] {init = {kind = "zeros"}, weight_decay = false}
    plan.subroutine @forward {
      plan.kernel "copy" {x = @x, y = @h} {n = 8 : i64}
      plan.kernel "send" {x = @h} {axis = "pp", peer = 1 : i64, tag = 0 : i64} {plan.origin = "pipeline", plan.payload = "activations"}
      plan.kernel "send" {x = @odd} {axis = "pp", peer = 1 : i64, tag = 2 : i64} {plan.origin = "pipeline"}
      plan.kernel "send" {x = @t} {axis = "pp", peer = 1 : i64, tag = 3 : i64} {plan.origin = "tied_parameter"}
    }
    plan.subroutine @backward {
      plan.kernel "recv" {y = @dy} {axis = "pp", peer = 1 : i64, tag = 1 : i64} {plan.origin = "pipeline", plan.payload = "activation gradients"}
      plan.kernel "copy" {x = @dy, y = @dx} {n = 8 : i64}
    }
    plan.schedule {
      plan.action @forward microbatch 0
      plan.action @backward microbatch 0
    }
  }
}

// -----

// A buffer received in two subroutines (a backward and its last
// microbatch's clone, llcdist-plan-grad-buckets) and sent to two chunks
// keeps one slice each.
// CHECK-LABEL: plan.program @shared
// CHECK-SAME: plan.p2p_scatter_gather = {recvs = 2 : i64, sends = 2 : i64}
// CHECK-COUNT-2: name = "{{dy|h}}:tp-slice"
// CHECK-NOT: :tp-slice
// CHECK: plan.subroutine
module {
  shard.grid @mesh(shape = 1x2x2)
  plan.program @shared {
    plan.buffer @h : tensor<8xf32> {kind = "activation", name = "h"}
    plan.buffer @dy : tensor<8xf32> {kind = "activation", name = "dy"}
    plan.subroutine @forward {
      plan.kernel "send" {x = @h} {axis = "pp", peer = 1 : i64, tag = 0 : i64} {plan.origin = "pipeline"}
      plan.kernel "send" {x = @h} {axis = "pp", peer = 1 : i64, tag = 2 : i64} {plan.origin = "pipeline"}
    }
    plan.subroutine @backward {
      plan.kernel "recv" {y = @dy} {axis = "pp", peer = 1 : i64, tag = 1 : i64} {plan.origin = "pipeline"}
    }
    plan.subroutine @backward_last {
      plan.kernel "recv" {y = @dy} {axis = "pp", peer = 1 : i64, tag = 1 : i64} {plan.origin = "pipeline"}
    }
    plan.schedule {
      plan.action @forward microbatch 0
      plan.action @backward_last microbatch 0
    }
  }
}

// -----

// Under sequence parallelism a stage's tp ranks hold different slices of the
// sequence: refused.
module {
  shard.grid @mesh(shape = 1x2x2)
  // expected-error @+1 {{llcdist-plan-p2p-scatter-gather: the pipeline's sends are sliced over tp only where every tp rank holds the same activation}}
  plan.program @sp {
    plan.buffer @x : tensor<4xf32> {kind = "activation", name = "x"}
    plan.buffer @y : tensor<8xf32> {kind = "activation", name = "y"}
    plan.subroutine @forward {
      plan.kernel "all_gather" {x = @x, y = @y} {axis = "tp", inner = 4 : i64, outer = 1 : i64} {plan.origin = "sequence_parallel"}
      plan.kernel "send" {x = @x} {axis = "pp", peer = 1 : i64, tag = 0 : i64} {plan.origin = "pipeline"}
    }
    plan.schedule {
      plan.action @forward microbatch 0
    }
  }
}

// -----

// tp = 1: nothing to slice.
// CHECK-LABEL: plan.program @tp1
// CHECK-NOT: shard_slice
// CHECK: plan.kernel "send" {x = @x}
module {
  shard.grid @mesh(shape = 2x1x2)
  plan.program @tp1 {
    plan.buffer @x : tensor<4xf32> {kind = "activation", name = "x"}
    plan.subroutine @forward {
      plan.kernel "send" {x = @x} {axis = "pp", peer = 1 : i64, tag = 0 : i64} {plan.origin = "pipeline"}
    }
    plan.schedule {
      plan.action @forward microbatch 0
    }
  }
}
