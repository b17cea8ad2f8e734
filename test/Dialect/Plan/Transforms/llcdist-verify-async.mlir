// RUN: llc-dist-opt %s -split-input-file --pass-pipeline="builtin.module(plan.program(llcdist-verify-async))" -verify-diagnostics | FileCheck %s

// A correct asynchronous plan: the gradient's all_reduce is started on the
// comm queue, an unrelated kernel runs while it is in flight, and the update
// reads the gradient after the wait. The token is reused by the next
// microbatch after its wait. Passes unchanged.
// CHECK-LABEL: plan.program @ok
plan.program @ok attributes {queues = ["compute", "comm"]} {
  plan.buffer @w : tensor<4xf32> {kind = "param", name = "w"}
  plan.buffer @g : tensor<4xf32> {kind = "grad", name = "w.grad"}
  plan.buffer @m : tensor<4xf32> {kind = "optimizer_state", name = "w.m"}
  plan.buffer @v : tensor<4xf32> {kind = "optimizer_state", name = "w.v"}
  plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a"}
  plan.buffer @b : tensor<4xf32> {kind = "activation", name = "b"}
  plan.subroutine @backward {
    plan.kernel "all_reduce" {x = [@g]} {axis = "dp", op = "avg"} {queue = "comm", token = 0 : i64}
    plan.kernel "copy" {x = @a, y = @b} {n = 4 : i64}
    plan.kernel "wait" {} {} {token = 0 : i64}
  }
  plan.subroutine @optimizer {
    plan.kernel "adamw" {param = @w, grad = @g, m = @m, v = @v} {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, n = 4 : i64}
  }
  plan.schedule {
    plan.action @backward microbatch 0
    plan.action @backward microbatch 1
    plan.action @optimizer
  }
}

// -----

// Two in-flight ops may read the same buffer (two gathers of one block).
// CHECK-LABEL: plan.program @shared_read
plan.program @shared_read attributes {queues = ["compute", "comm"]} {
  plan.buffer @p : tensor<4xf32> {kind = "param", name = "p"}
  plan.buffer @q1 : tensor<8xf32> {kind = "activation", name = "q1"}
  plan.buffer @q2 : tensor<8xf32> {kind = "activation", name = "q2"}
  plan.subroutine @s {
    plan.kernel "all_gather" {x = @p, y = @q1} {axis = "dp", inner = 4 : i64, outer = 1 : i64} {queue = "comm", token = 0 : i64}
    plan.kernel "all_gather" {x = @p, y = @q2} {axis = "dp", inner = 4 : i64, outer = 1 : i64} {queue = "comm", token = 1 : i64}
    plan.kernel "wait" {} {} {token = 1 : i64}
    plan.kernel "wait" {} {} {token = 0 : i64}
  }
  plan.schedule {
    plan.action @s
  }
}

// -----

// A missing wait: the token is still in flight at the end of the step.
plan.program @missing_wait attributes {queues = ["compute", "comm"]} {
  plan.buffer @g : tensor<4xf32> {kind = "grad", name = "w.grad"}
  plan.subroutine @optimizer {
    // expected-error @+1 {{token 0 is never waited: started by subroutine @optimizer kernel 0 'all_reduce' (origin dp_gradients) in action 0, still in flight at the end of the step}}
    plan.kernel "all_reduce" {x = [@g]} {axis = "dp", op = "avg"} {plan.origin = "dp_gradients", queue = "comm", token = 0 : i64}
  }
  plan.schedule {
    plan.action @optimizer
  }
}

// -----

// The update reads the gradient while its all_reduce is in flight.
plan.program @read_in_flight attributes {queues = ["compute", "comm"]} {
  plan.buffer @w : tensor<4xf32> {kind = "param", name = "w"}
  plan.buffer @g : tensor<4xf32> {kind = "grad", name = "w.grad"}
  plan.buffer @m : tensor<4xf32> {kind = "optimizer_state", name = "w.m"}
  plan.buffer @v : tensor<4xf32> {kind = "optimizer_state", name = "w.v"}
  plan.subroutine @optimizer {
    // expected-note @+1 {{the in-flight op started here}}
    plan.kernel "all_reduce" {x = [@g]} {axis = "dp", op = "avg"} {queue = "comm", token = 0 : i64}
    // expected-error @+1 {{race: subroutine @optimizer kernel 1 'adamw' in action 0 reads a buffer that the in-flight subroutine @optimizer kernel 0 'all_reduce' in action 0 (token 0) writes, before its wait}}
    plan.kernel "adamw" {param = @w, grad = @g, m = @m, v = @v} {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, n = 4 : i64}
    plan.kernel "wait" {} {} {token = 0 : i64}
  }
  plan.schedule {
    plan.action @optimizer
  }
}

// -----

// A buffer reused while in flight: the last microbatch's backward
// accumulates into the gradient that the all_reduce started after the first
// microbatch still sends.
plan.program @reused_in_flight attributes {queues = ["compute", "comm"]} {
  plan.buffer @g : tensor<4xf32> {kind = "grad", name = "w.grad"}
  plan.buffer @d : tensor<4xf32> {kind = "activation", name = "d"}
  plan.subroutine @backward {
    plan.kernel "accumulate" {x = @d, y = @g} {n = 4 : i64}
    // expected-note @+1 {{the in-flight op started here}}
    plan.kernel "all_reduce" {x = [@g]} {axis = "dp", op = "avg"} {queue = "comm", token = 0 : i64}
  }
  plan.subroutine @backward_last {
    // expected-error @+1 {{race: subroutine @backward_last kernel 0 'accumulate' in action 1 (microbatch 1) writes a buffer that the in-flight subroutine @backward kernel 1 'all_reduce' in action 0 (microbatch 0) (token 0) accesses, before its wait}}
    plan.kernel "accumulate" {x = @d, y = @g} {n = 4 : i64}
  }
  plan.subroutine @optimizer {
    plan.kernel "wait" {} {} {token = 0 : i64}
  }
  plan.schedule {
    plan.action @backward microbatch 0
    plan.action @backward_last microbatch 1
    plan.action @optimizer
  }
}

// -----

// Aliasing: once offsets are planned, a buffer at the same bytes as an
// in-flight op's counts (@h overlaps @g's last 16 bytes).
plan.program @alias attributes {arena_bytes = 128 : i64, queues = ["compute", "comm"]} {
  plan.buffer @g : tensor<8xf32> {kind = "activation", name = "g", offset = 0 : i64}
  plan.buffer @h : tensor<4xf32> {kind = "activation", name = "h", offset = 64 : i64}
  plan.buffer @s : tensor<8xf32> {kind = "activation", name = "s", offset = 64 : i64}
  plan.subroutine @s0 {
    plan.kernel "fill_zero" {x = [@g]} {}
    // expected-note @+1 {{the in-flight op started here}}
    plan.kernel "all_reduce" {x = [@s]} {axis = "dp", op = "sum"} {queue = "comm", token = 7 : i64}
    // expected-error @+1 {{race: subroutine @s0 kernel 2 'copy' in action 0 writes a buffer that the in-flight subroutine @s0 kernel 1 'all_reduce' in action 0 (token 7) accesses, before its wait}}
    plan.kernel "copy" {x = @g, y = @h} {n = 4 : i64}
    plan.kernel "wait" {} {} {token = 7 : i64}
  }
  plan.schedule {
    plan.action @s0
  }
}

// -----

// A double wait.
plan.program @double_wait attributes {queues = ["compute", "comm"]} {
  plan.buffer @g : tensor<4xf32> {kind = "grad", name = "w.grad"}
  plan.subroutine @optimizer {
    plan.kernel "all_reduce" {x = [@g]} {axis = "dp", op = "avg"} {queue = "comm", token = 2 : i64}
    // expected-note @+1 {{the first wait}}
    plan.kernel "wait" {} {} {token = 2 : i64}
    // expected-error @+1 {{double wait: token 2 waited at subroutine @optimizer kernel 2 'wait' in action 0 was already waited at subroutine @optimizer kernel 1 'wait' in action 0}}
    plan.kernel "wait" {} {} {token = 2 : i64}
  }
  plan.schedule {
    plan.action @optimizer
  }
}

// -----

// A wait before its start.
plan.program @wait_before_start attributes {queues = ["compute", "comm"]} {
  plan.buffer @g : tensor<4xf32> {kind = "grad", name = "w.grad"}
  plan.subroutine @optimizer {
    // expected-error @+1 {{wait before start: token 1 is not in flight at subroutine @optimizer kernel 0 'wait' in action 0}}
    plan.kernel "wait" {} {} {token = 1 : i64}
    plan.kernel "all_reduce" {x = [@g]} {axis = "dp", op = "avg"} {queue = "comm", token = 1 : i64}
    plan.kernel "wait" {} {} {token = 1 : i64}
  }
  plan.schedule {
    plan.action @optimizer
  }
}

// -----

// A token started again while in flight: each microbatch's backward starts
// token 0 and only the optimizer waits.
plan.program @restart attributes {queues = ["compute", "comm"]} {
  plan.buffer @g : tensor<4xf32> {kind = "grad", name = "w.grad"}
  plan.buffer @g2 : tensor<4xf32> {kind = "grad", name = "u.grad"}
  plan.subroutine @backward {
    // expected-note @+2 {{the first start}}
    // expected-error @+1 {{token 0 started again while in flight: subroutine @backward kernel 0 'all_reduce' in action 1 (microbatch 1) restarts the token of subroutine @backward kernel 0 'all_reduce' in action 0 (microbatch 0), not waited yet}}
    plan.kernel "all_reduce" {x = [@g]} {axis = "dp", op = "avg"} {queue = "comm", token = 0 : i64}
  }
  plan.subroutine @optimizer {
    plan.kernel "wait" {} {} {token = 0 : i64}
  }
  plan.schedule {
    plan.action @backward microbatch 0
    plan.action @backward microbatch 1
    plan.action @optimizer
  }
}

// -----

// Microbatch slots: a slotted buffer has an instance per slot and a kernel
// touches its action's. The send started in slot 0 reads instance 0 of @a
// while slot 1's forward overwrites instance 1: no race.
// CHECK-LABEL: plan.program @other_slot
plan.program @other_slot attributes {queues = ["compute", "comm"]} {
  plan.buffer @w : tensor<4xf32> {kind = "param", name = "w"}
  plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a", slots = 2 : i64}
  plan.subroutine @f {
    plan.kernel "copy" {x = @w, y = @a} {n = 4 : i64}
    plan.kernel "send" {x = @a} {axis = "pp", peer = 1 : i64, tag = 0 : i64} {queue = "comm", token = 0 : i64}
  }
  plan.subroutine @done {
    plan.kernel "wait" {} {} {token = 0 : i64}
  }
  plan.schedule {
    plan.action @f microbatch 0
    plan.action @done
    plan.action @f microbatch 1 {slot = 1 : i64}
    plan.action @done
  }
}

// -----

// The same with placed offsets that put both instances on the same bytes:
// the second forward's copy overwrites what the in-flight send reads.
plan.program @same_bytes attributes {queues = ["compute", "comm"]} {
  plan.buffer @w : tensor<4xf32> {kind = "param", name = "w", offset = 0 : i64}
  plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a", offset = 64 : i64, slot_offsets = array<i64: 64, 64>, slots = 2 : i64}
  plan.subroutine @f {
    plan.kernel "copy" {x = @w, y = @a} {n = 4 : i64}
    // expected-note @+1 {{the in-flight op started here}}
    plan.kernel "send" {x = @a} {axis = "pp", peer = 1 : i64, tag = 1 : i64} {queue = "comm", token = 0 : i64}
  }
  plan.subroutine @g {
    // expected-error @+1 {{race: subroutine @g kernel 0 'copy' in action 1 (microbatch 1) in slot 1 writes a buffer that the in-flight subroutine @f kernel 1 'send' in action 0 (microbatch 0) (token 0) accesses, before its wait}}
    plan.kernel "copy" {x = @w, y = @a} {n = 4 : i64}
  }
  plan.subroutine @done {
    plan.kernel "wait" {} {} {token = 0 : i64}
  }
  plan.schedule {
    plan.action @f microbatch 0
    plan.action @g microbatch 1 {slot = 1 : i64}
    plan.action @done
  }
}
