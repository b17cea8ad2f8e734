// RUN: llc-dist-opt %s -split-input-file -llcdist-plan-zero -verify-diagnostics
// RUN: not llc-dist-opt %s -split-input-file -llcdist-plan-zero="stage=4" 2>&1 | FileCheck %s --check-prefix=STAGE4
// RUN: not llc-dist-opt %s -split-input-file -llcdist-plan-zero="stage=0" 2>&1 | FileCheck %s --check-prefix=STAGE0
// RUN: not llc-dist-opt %s -split-input-file -llcdist-plan-zero="stage=3" 2>&1 | FileCheck %s --check-prefix=STAGE3

// The stage option: 1, 2 or 3.
// STAGE4: error: llcdist-plan-zero: stage 4 is not 1, 2 or 3
// STAGE0: error: llcdist-plan-zero: stage 0 is not 1, 2 or 3
// Stage 3 runs on the lowering's parameter blocks and gathers (the last
// case below has none).
// STAGE3: error: 'plan.param' op llcdist-plan-zero: stage 3 needs the parameter's blocks and gathers of llcdist-lower-to-plan zero=3

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

// ZeRO-3's parameter blocks (gathered by the lowering) take stage 3.
module {
  shard.grid @mesh(shape = 2x1x1) {xf.mesh_axes = ["dp", "tp", "pp"]}
  // expected-error@+1 {{llcdist-plan-zero: the parameters are ZeRO-3 blocks (llcdist-lower-to-plan zero=3): use stage=3}}
  plan.program @stage0 {
    plan.buffer @b0 : tensor<2x2xf32> {kind = "param", name = "w"}
    plan.buffer @b1 : tensor<4x2xf32> {kind = "grad", name = "w.grad"}
    plan.buffer @b2 : tensor<4x2xf32> {kind = "activation", name = "w.gathered"}
    plan.param "w" value @b0 grad @b1 state [] {init = {kind = "ones"}, weight_decay = false}
    plan.subroutine @step_begin {
    }
    plan.subroutine @forward {
      plan.kernel "all_gather" {x = @b0, y = @b2} {axis = "dp", inner = 4 : i64, outer = 1 : i64} {plan.origin = "zero", plan.payload = "parameters"}
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
