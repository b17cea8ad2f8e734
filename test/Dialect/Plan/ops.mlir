// RUN: llc-dist-opt %s | llc-dist-opt | FileCheck %s
// The plan dialect round-trips.

// CHECK-LABEL: plan.program @stage0 attributes {arena_bytes = 512 : i64}
plan.program @stage0 attributes {arena_bytes = 512 : i64} {
  // CHECK: plan.buffer @b0 : tensor<2x4xi32> {kind = "input", name = "input_ids", offset = 0 : i64}
  plan.buffer @b0 : tensor<2x4xi32> {kind = "input", name = "input_ids", offset = 0 : i64}
  plan.buffer @b1 : tensor<2x4xi32> {kind = "input", name = "labels", offset = 64 : i64}
  plan.buffer @b2 : tensor<16x4xf32> {kind = "param", name = "wte", offset = 128 : i64}
  plan.buffer @b3 : tensor<16x4xf32> {kind = "grad", name = "wte.grad", offset = 256 : i64}
  plan.buffer @b4 : tensor<1xf32> {kind = "metric", name = "loss", offset = 384 : i64}
  // CHECK: plan.param "wte" value @b2 grad @b3 state [] {init = {kind = "normal", std = 2.000000e-02 : f64}, weight_decay = false}
  plan.param "wte" value @b2 grad @b3 state [] {init = {kind = "normal", std = 0.02 : f64}, weight_decay = false}
  // CHECK: plan.subroutine @step_begin {
  // CHECK-NEXT: plan.kernel "fill_zero" {x = [@b3, @b4]} {}
  plan.subroutine @step_begin {
    plan.kernel "fill_zero" {x = [@b3, @b4]} {}
  }
  plan.subroutine @forward {
    // CHECK: plan.kernel "load_microbatch" {ids = @b0, targets = @b1} {B = 2 : i64, S = 4 : i64}
    plan.kernel "load_microbatch" {ids = @b0, targets = @b1} {B = 2 : i64, S = 4 : i64}
  }
  // CHECK: plan.schedule {
  // CHECK-NEXT: plan.action @step_begin
  // CHECK-NEXT: plan.action @forward microbatch 0
  plan.schedule {
    plan.action @step_begin
    plan.action @forward microbatch 0
  }
}

// Asynchronous plans: queues, a started all_reduce and its wait.
// CHECK-LABEL: plan.program @async attributes {queues = ["compute", "comm"]}
// CHECK: plan.kernel "all_reduce" {x = [@g]} {axis = "dp", op = "avg"} {queue = "comm", token = 3 : i64}
// CHECK-NEXT: plan.kernel "wait" {} {} {token = 3 : i64}
plan.program @async attributes {queues = ["compute", "comm"]} {
  plan.buffer @g : tensor<4xf32> {kind = "grad", name = "g"}
  plan.subroutine @s {
    plan.kernel "all_reduce" {x = [@g]} {axis = "dp", op = "avg"} {queue = "comm", token = 3 : i64}
    plan.kernel "wait" {} {} {token = 3 : i64}
  }
}
