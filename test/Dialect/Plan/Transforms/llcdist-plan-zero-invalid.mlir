// RUN: llc-dist-opt %s -split-input-file -llcdist-plan-zero -verify-diagnostics
// RUN: not llc-dist-opt %s -split-input-file -llcdist-plan-zero="stage=4" 2>&1 | FileCheck %s --check-prefix=STAGE4
// RUN: not llc-dist-opt %s -split-input-file -llcdist-plan-zero="stage=0" 2>&1 | FileCheck %s --check-prefix=STAGE0
// RUN: not llc-dist-opt %s -split-input-file -llcdist-plan-zero="stage=3" 2>&1 | FileCheck %s --check-prefix=STAGE3

// The stage option: 1, 2 or 3.
// STAGE4: error: llcdist-plan-zero: stage 4 is not 1, 2 or 3
// STAGE0: error: llcdist-plan-zero: stage 0 is not 1, 2 or 3
// Stage 3 needs the scopes the lowering records (the last case has none).
// STAGE3-DAG: error: llcdist-plan-zero: stage 3 needs where each scope reads each parameter: lower with llcdist-lower-to-plan record-param-scopes

// ZeRO shards over dp: a mesh without dp is an error.
// expected-error@+1 {{llcdist-plan-zero: stage 1 shards over dp, but the mesh has dp=1 (use --mesh dp=N with N > 1)}}
module {
  shard.grid @mesh(shape = 1x2x1) {xf.mesh_axes = ["dp", "tp", "pp"]}
  plan.program @stage0 {
    plan.subroutine @step_begin {
    }
    plan.subroutine @optimizer {
    }
  }
}

// -----

// A plan is sharded once.
module {
  shard.grid @mesh(shape = 2x1x1) {xf.mesh_axes = ["dp", "tp", "pp"]}
  plan.program @stage0 {
    plan.buffer @b0 : tensor<2x2xf32> {kind = "param", name = "w"}
    plan.buffer @b1 : tensor<4x2xf32> {kind = "grad", name = "w.grad"}
    // expected-error@+1 {{llcdist-plan-zero: the parameter is already ZeRO-sharded}}
    plan.param "w" value @b0 grad @b1 state [] {init = {kind = "ones"}, local_shape = array<i64: 4, 2>, weight_decay = false, zero = {axis = "dp", stage = 1 : i64}}
    plan.subroutine @step_begin {
    }
    plan.subroutine @optimizer {
    }
  }
}

// -----

// The subroutines of llcdist-lower-to-plan.
module {
  shard.grid @mesh(shape = 2x1x1) {xf.mesh_axes = ["dp", "tp", "pp"]}
  // expected-error@+1 {{llcdist-plan-zero: expected the step_begin and optimizer subroutines of llcdist-lower-to-plan}}
  plan.program @stage0 {
    plan.subroutine @forward {
    }
  }
}

// -----

// Under stage 3 every read of a parameter is in a recorded scope.
// STAGE3-DAG: error: 'plan.kernel' op llcdist-plan-zero: reads parameter 'w' outside a scope recorded by llcdist-lower-to-plan
module {
  shard.grid @mesh(shape = 2x1x1) {xf.mesh_axes = ["dp", "tp", "pp"]}
  plan.program @stage0 {
    plan.buffer @b0 : tensor<4x2xf32> {kind = "param", name = "w"}
    plan.buffer @b1 : tensor<4x2xf32> {kind = "grad", name = "w.grad"}
    plan.buffer @b2 : tensor<4x2xf32> {kind = "activation", name = "y"}
    plan.param "w" value @b0 grad @b1 state [] {init = {kind = "ones"}, weight_decay = false}
    plan.subroutine @step_begin {
    }
    plan.subroutine @forward {
      plan.kernel "copy" {x = @b2, y = @b2} {n = 8 : i64} {plan.param_scopes = [{loc = loc("x.mlir":1:1), param = "v", slot = ""}]}
      plan.kernel "copy" {x = @b0, y = @b2} {n = 8 : i64}
    }
    plan.subroutine @optimizer {
    }
  }
}

// -----

// A plan lowered without ZeRO is fine for stages 1 and 2.
module {
  shard.grid @mesh(shape = 2x1x1) {xf.mesh_axes = ["dp", "tp", "pp"]}
  plan.program @stage0 {
    plan.buffer @b0 : tensor<4x2xf32> {kind = "param", name = "w"}
    plan.buffer @b1 : tensor<4x2xf32> {kind = "grad", name = "w.grad"}
    plan.param "w" value @b0 grad @b1 state [] {init = {kind = "ones"}, weight_decay = false}
    plan.subroutine @step_begin {
    }
    plan.subroutine @optimizer {
    }
  }
}
