// RUN: llc-dist-opt %s -split-input-file -verify-diagnostics

plan.program @p {
  // expected-error @+1 {{element type must be f32, bf16 or i32 (what the runtime stores), got 'f16'}}
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
    // expected-error @+1 {{argument 'x' of 'zero' must be a list of buffers}}
    plan.kernel "zero" {x = @b0} {}
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
