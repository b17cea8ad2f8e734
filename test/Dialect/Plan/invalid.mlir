// RUN: llc-dist-opt %s -split-input-file -verify-diagnostics

plan.program @p {
  // expected-error @+1 {{element type must be f32, bf16, f64 or i32 (what the runtime stores), got 'f16'}}
  plan.buffer @b0 : tensor<4xf16> {kind = "param", name = "w"}
}

// -----

plan.program @p {
  // expected-error @+1 {{unknown buffer kind 'weights'}}
  plan.buffer @b0 : tensor<4xf32> {kind = "weights", name = "w"}
}

// -----

plan.program @p {
  // expected-error @+1 {{offset must be a non-negative multiple of 64, got 32}}
  plan.buffer @b0 : tensor<4xf32> {kind = "param", name = "w", offset = 32 : i64}
}

// -----

plan.program @p attributes {arena_bytes = 64 : i64} {
  // expected-error @+1 {{ends at byte 80, past the arena's 64}}
  plan.buffer @b0 : tensor<4xf32> {kind = "param", name = "w", offset = 64 : i64}
}

// -----

plan.program @p {
  plan.buffer @b0 : tensor<4xf32> {kind = "param", name = "w"}
  // expected-error @+1 {{grad @nope does not name a plan.buffer}}
  plan.param "w" value @b0 grad @nope state [] {init = {kind = "zeros"}, weight_decay = false}
}

// -----

plan.program @p {
  plan.subroutine @s {
    // expected-error @+1 {{unknown runtime kernel 'matmul'}}
    plan.kernel "matmul" {} {}
  }
}

// -----

plan.program @p {
  plan.buffer @b0 : tensor<4xf32> {kind = "activation", name = "x"}
  plan.subroutine @s {
    // expected-error @+1 {{kernel 'add' has no argument 'c'}}
    plan.kernel "add" {a = @b0, b = @b0, c = @b0} {n = 4 : i64}
  }
}

// -----

plan.program @p {
  plan.buffer @b0 : tensor<4xf32> {kind = "activation", name = "x"}
  plan.subroutine @s {
    // expected-error @+1 {{kernel 'add' needs argument 'y'}}
    plan.kernel "add" {a = @b0, b = @b0} {n = 4 : i64}
  }
}

// -----

plan.program @p {
  plan.buffer @b0 : tensor<4xf32> {kind = "activation", name = "x"}
  plan.subroutine @s {
    // expected-error @+1 {{kernel 'add' needs attribute 'n'}}
    plan.kernel "add" {a = @b0, b = @b0, y = @b0} {}
  }
}

// -----

plan.program @p {
  plan.buffer @b0 : tensor<4xf32> {kind = "activation", name = "x"}
  plan.subroutine @s {
    // expected-error @+1 {{argument 'x' of 'fill_zero' must be a list of buffers}}
    plan.kernel "fill_zero" {x = @b0} {}
  }
}

// -----

plan.program @p {
  plan.subroutine @s {
    // expected-error @+1 {{argument 'x' @missing does not name a plan.buffer}}
    plan.kernel "accumulate" {x = @missing, y = @missing} {n = 4 : i64}
  }
}

// -----

plan.program @p {
  plan.schedule {
    // expected-error @+1 {{subroutine @nowhere does not name a plan.subroutine}}
    plan.action @nowhere
  }
}

// -----

// Asynchronous plans: a token only on a communication op.
plan.program @p {
  plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a"}
  plan.buffer @b : tensor<4xf32> {kind = "activation", name = "b"}
  plan.subroutine @s {
    // expected-error @+1 {{'token' on 'copy': only a communication op (all_reduce, all_gather, reduce_scatter, send, recv) or a wait has a token}}
    plan.kernel "copy" {x = @a, y = @b} {n = 4 : i64} {token = 0 : i64}
  }
}

// -----

plan.program @p {
  plan.subroutine @s {
    // expected-error @+1 {{'token' must be an i64 >= 0, got -1 : i64}}
    plan.kernel "wait" {} {} {token = -1 : i64}
  }
}

// -----

plan.program @p {
  plan.subroutine @s {
    // expected-error @+1 {{a wait needs a 'token'}}
    plan.kernel "wait" {} {}
  }
}

// -----

plan.program @p {
  plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a"}
  plan.subroutine @s {
    // expected-error @+1 {{a wait has no arguments and no parameters}}
    plan.kernel "wait" {x = @a} {} {token = 0 : i64}
  }
}

// -----

// A kernel stays on the compute queue.
plan.program @p attributes {queues = ["compute", "comm"]} {
  plan.buffer @a : tensor<4xf32> {kind = "activation", name = "a"}
  plan.buffer @b : tensor<4xf32> {kind = "activation", name = "b"}
  plan.subroutine @s {
    // expected-error @+1 {{'copy' is on queue 'comm': only communication ops and waits leave the 'compute' queue}}
    plan.kernel "copy" {x = @a, y = @b} {n = 4 : i64} {queue = "comm"}
  }
}

// -----

// A queue the program does not list (no `queues`: only "compute").
plan.program @p {
  plan.buffer @g : tensor<4xf32> {kind = "grad", name = "g"}
  plan.subroutine @s {
    // expected-error @+1 {{queue 'comm' is not one of the program's 'queues'}}
    plan.kernel "all_reduce" {x = [@g]} {axis = "dp", op = "avg"} {queue = "comm", token = 0 : i64}
  }
}

// -----

// expected-error @+1 {{the first of 'queues' must be 'compute'}}
plan.program @p attributes {queues = ["comm", "compute"]} {
}

// -----

// expected-error @+1 {{queue 'comm' is listed twice}}
plan.program @p attributes {queues = ["compute", "comm", "comm"]} {
}

// -----

// expected-error @+1 {{'queues'[1] must be a queue name ([a-z0-9_]+), got "Comm"}}
plan.program @p attributes {queues = ["compute", "Comm"]} {
}
