// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-fsdp-prefetch{units=1}))" | FileCheck %s
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-fsdp-prefetch{units=2}))" | FileCheck %s --check-prefix=TWO
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-fsdp-prefetch{units=1},llcdist-plan-memory,llcdist-verify-async))" | FileCheck %s --check-prefix=RACE
// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-fsdp-prefetch{units=0}))" | FileCheck %s --check-prefix=OFF
// RUN: not llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-plan-fsdp-prefetch{units=-1}))" 2>&1 | FileCheck %s --check-prefix=BAD

// A ZeRO-3 forward gathering each parameter just before its use. The units
// are [emb] (outside the layers), [h.0.w, h.0.b] (layer h.0), [h.1.w]. Every
// gather starts on the comm queue and is waited where it was; unit 0 starts
// where its gather was, unit i right after the first wait of unit i - 1 (with
// units=2: of unit max(0, i - 2)).
// CHECK-LABEL: plan.program @fsdp
// CHECK-SAME: plan.fsdp_prefetch = [{bytes = 144 : i64, gathers = 4 : i64, prefetched = 3 : i64, subroutine = "forward", units = 3 : i64}]
// CHECK-SAME: queues = ["compute", "comm"]
// CHECK: plan.subroutine @forward {
// CHECK-NEXT: plan.kernel "all_gather" {x = @emb, y = @emb_g} {{.*}}queue = "comm", token = 0 : i64}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 0 : i64}
// CHECK-NEXT: plan.kernel "all_gather" {x = @w0, y = @w0_g} {{.*}}queue = "comm", token = 1 : i64}
// CHECK-NEXT: plan.kernel "all_gather" {x = @b0, y = @b0_g} {{.*}}queue = "comm", token = 2 : i64}
// CHECK-NEXT: plan.kernel "copy" {x = @emb_g, y = @a0}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 1 : i64}
// CHECK-NEXT: plan.kernel "all_gather" {x = @w1, y = @w1_g} {{.*}}queue = "comm", token = 3 : i64}
// CHECK-NEXT: plan.kernel "copy" {x = @w0_g, y = @a1}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 2 : i64}
// CHECK-NEXT: plan.kernel "copy" {x = @b0_g, y = @a2}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 3 : i64}
// CHECK-NEXT: plan.kernel "copy" {x = @w1_g, y = @a3}
// CHECK-NEXT: {{^ *}}}
// The optimizer's kernels are not a step's: left as they are.
// CHECK: plan.subroutine @optimizer {
// CHECK-NEXT: plan.kernel "sgd"
// CHECK-NEXT: {{^ *}}}

// TWO-LABEL: plan.program @fsdp
// TWO: plan.kernel "all_gather" {x = @emb, {{.*}}token = 0 : i64}
// TWO-NEXT: plan.kernel "wait" {} {} {token = 0 : i64}
// TWO-NEXT: plan.kernel "all_gather" {x = @w0, {{.*}}token = 1 : i64}
// TWO-NEXT: plan.kernel "all_gather" {x = @b0, {{.*}}token = 2 : i64}
// TWO-NEXT: plan.kernel "all_gather" {x = @w1, {{.*}}token = 3 : i64}
// TWO-NEXT: plan.kernel "copy" {x = @emb_g, y = @a0}

// The race check accepts the result: nothing writes a gathered copy or its
// block, nothing reads a copy before its wait.
// RACE-LABEL: plan.program @fsdp
// RACE: plan.kernel "wait"

// OFF-LABEL: plan.program @fsdp
// OFF-NOT: queue = "comm"
// OFF: plan.kernel "all_gather" {x = @emb, y = @emb_g} {axis = "dp", inner = 8 : i64, outer = 1 : i64} {plan.origin = "zero"}

// BAD: error: llcdist-plan-fsdp-prefetch: units must be >= 0, got -1
plan.program @fsdp {
  plan.buffer @emb : tensor<8xf32> {kind = "param", name = "emb"}
  plan.buffer @emb.grad : tensor<8xf32> {kind = "grad", name = "emb.grad"}
  plan.buffer @w0 : tensor<4xf32> {kind = "param", name = "h.0.w"}
  plan.buffer @w0.grad : tensor<4xf32> {kind = "grad", name = "h.0.w.grad"}
  plan.buffer @b0 : tensor<2xf32> {kind = "param", name = "h.0.b"}
  plan.buffer @b0.grad : tensor<2xf32> {kind = "grad", name = "h.0.b.grad"}
  plan.buffer @w1 : tensor<4xf32> {kind = "param", name = "h.1.w"}
  plan.buffer @w1.grad : tensor<4xf32> {kind = "grad", name = "h.1.w.grad"}
  plan.buffer @emb_g : tensor<16xf32> {kind = "activation", name = "emb.gathered"}
  plan.buffer @w0_g : tensor<8xf32> {kind = "activation", name = "h.0.w.gathered"}
  plan.buffer @b0_g : tensor<4xf32> {kind = "activation", name = "h.0.b.gathered"}
  plan.buffer @w1_g : tensor<8xf32> {kind = "activation", name = "h.1.w.gathered"}
  plan.buffer @a0 : tensor<16xf32> {kind = "activation", name = "a0"}
  plan.buffer @a1 : tensor<8xf32> {kind = "activation", name = "a1"}
  plan.buffer @a2 : tensor<4xf32> {kind = "activation", name = "a2"}
  plan.buffer @a3 : tensor<8xf32> {kind = "activation", name = "a3"}
  plan.param "emb" value @emb grad @emb.grad state [] {init = {kind = "zeros"}, weight_decay = false, zero = {axis = "dp", stage = 3 : i64}}
  plan.param "h.0.w" value @w0 grad @w0.grad state [] {init = {kind = "zeros"}, weight_decay = false, zero = {axis = "dp", stage = 3 : i64}}
  plan.param "h.0.b" value @b0 grad @b0.grad state [] {init = {kind = "zeros"}, weight_decay = false, zero = {axis = "dp", stage = 3 : i64}}
  plan.param "h.1.w" value @w1 grad @w1.grad state [] {init = {kind = "zeros"}, weight_decay = false, zero = {axis = "dp", stage = 3 : i64}}
  plan.subroutine @step_begin {
    plan.kernel "fill_zero" {x = [@emb.grad, @w0.grad, @b0.grad, @w1.grad]} {}
  }
  plan.subroutine @forward {
    plan.kernel "all_gather" {x = @emb, y = @emb_g} {axis = "dp", inner = 8 : i64, outer = 1 : i64} {plan.origin = "zero"}
    plan.kernel "copy" {x = @emb_g, y = @a0} {n = 16 : i64}
    plan.kernel "all_gather" {x = @w0, y = @w0_g} {axis = "dp", inner = 4 : i64, outer = 1 : i64} {plan.origin = "zero"}
    plan.kernel "copy" {x = @w0_g, y = @a1} {n = 8 : i64}
    plan.kernel "all_gather" {x = @b0, y = @b0_g} {axis = "dp", inner = 2 : i64, outer = 1 : i64} {plan.origin = "zero"}
    plan.kernel "copy" {x = @b0_g, y = @a2} {n = 4 : i64}
    plan.kernel "all_gather" {x = @w1, y = @w1_g} {axis = "dp", inner = 4 : i64, outer = 1 : i64} {plan.origin = "zero"}
    plan.kernel "copy" {x = @w1_g, y = @a3} {n = 8 : i64}
  }
  plan.subroutine @optimizer {
    plan.kernel "sgd" {param = @w0, grad = @w0.grad} {momentum = 0.0 : f64, weight_decay = 0.0 : f64}
  }
  plan.schedule {
    plan.action @step_begin
    plan.action @forward microbatch 0
    plan.action @forward microbatch 1
    plan.action @optimizer
  }
}

// -----

// Without ZeRO-3 parameters there is nothing gathered before use.
// CHECK-LABEL: plan.program @plain
// CHECK-NOT: queues
// CHECK: plan.kernel "all_gather" {x = @w, y = @wg} {axis = "dp", inner = 4 : i64, outer = 1 : i64} {plan.origin = "zero"}
// TWO-LABEL: plan.program @plain
// RACE-LABEL: plan.program @plain
// OFF-LABEL: plan.program @plain
plan.program @plain {
  plan.buffer @w : tensor<4xf32> {kind = "param", name = "h.0.w"}
  plan.buffer @g : tensor<4xf32> {kind = "grad", name = "h.0.w.grad"}
  plan.buffer @wg : tensor<8xf32> {kind = "activation", name = "wg"}
  plan.param "h.0.w" value @w grad @g state [] {init = {kind = "zeros"}, weight_decay = false}
  plan.subroutine @step_begin {
    plan.kernel "fill_zero" {x = [@g]} {}
  }
  plan.subroutine @forward {
    plan.kernel "all_gather" {x = @w, y = @wg} {axis = "dp", inner = 4 : i64, outer = 1 : i64} {plan.origin = "zero"}
  }
  plan.subroutine @optimizer {
  }
  plan.schedule {
    plan.action @step_begin
    plan.action @forward microbatch 0
    plan.action @optimizer
  }
}
