// The options of llcdist-add-optimizer that llcdist-add-optimizer.mlir leaves
// at their defaults (AdamW's betas, eps and an explicit weight decay; SGD's
// weight decay), and a bad value of every option.
//
// RUN: llc-dist-opt %s -split-input-file -llcdist-add-optimizer="beta1=0.8 beta2=0.95 eps=1e-6 weight-decay=0.1" | FileCheck %s --check-prefix=ADAMW
// RUN: llc-dist-opt %s -split-input-file -llcdist-add-optimizer="optimizer=sgd weight-decay=0.3 momentum=0.5 grad-clip=2.0" | FileCheck %s --check-prefix=SGD
// RUN: llc-dist-opt %s -split-input-file -llcdist-add-optimizer="lr-schedule=cosine lr=0.5 min-lr=0.5 total-steps=4 warmup=4" | FileCheck %s --check-prefix=EDGE

// ADAMW-LABEL: func.func @optimizer_step()
// ADAMW-NEXT: xf.clip_grad_norm {max_norm = 0.000000e+00 : f64}
// ADAMW-NEXT: xf.adamw {beta1 = 8.000000e-01 : f64, beta2 = 0.94999999999999996 : f64, eps = 9.9999999999999995E-7 : f64, weight_decay = 1.000000e-01 : f64}
// ADAMW-NEXT: return

// SGD-LABEL: func.func @optimizer_step()
// SGD-NEXT: xf.clip_grad_norm {max_norm = 2.000000e+00 : f64}
// SGD-NEXT: xf.sgd {momentum = 5.000000e-01 : f64, weight_decay = 3.000000e-01 : f64}
// SGD-NEXT: return

// The edges of the accepted ranges: min-lr = lr, warmup = total-steps.
// EDGE: xf.lr_schedule = {kind = "cosine", max_lr = 5.000000e-01 : f64, min_lr = 5.000000e-01 : f64, total_steps = 4 : i64, warmup_steps = 4 : i64}
// EDGE-LABEL: func.func @optimizer_step()
// EDGE-NEXT: xf.clip_grad_norm
// EDGE-NEXT: xf.adamw {{{.*}}weight_decay = 1.000000e-02 : f64}

// Bad values: the pass names the option and what it accepts.
// RUN: not llc-dist-opt %s -split-input-file -llcdist-add-optimizer="optimizer=" 2>&1 | FileCheck %s --check-prefix=OPTIMIZER
// OPTIMIZER: error: llcdist-add-optimizer: optimizer '' is not adamw or sgd
// RUN: not llc-dist-opt %s -split-input-file -llcdist-add-optimizer="lr-schedule=step" 2>&1 | FileCheck %s --check-prefix=SCHEDULE
// SCHEDULE: error: llcdist-add-optimizer: lr-schedule 'step' is not constant or cosine
// RUN: not llc-dist-opt %s -split-input-file -llcdist-add-optimizer="lr=0" 2>&1 | FileCheck %s --check-prefix=LR
// RUN: not llc-dist-opt %s -split-input-file -llcdist-add-optimizer="lr=-1" 2>&1 | FileCheck %s --check-prefix=LR
// LR: error: llcdist-add-optimizer: lr must be > 0
// RUN: not llc-dist-opt %s -split-input-file -llcdist-add-optimizer="lr=1e-3 min-lr=1e-2" 2>&1 | FileCheck %s --check-prefix=MINLR
// RUN: not llc-dist-opt %s -split-input-file -llcdist-add-optimizer="min-lr=-0.1" 2>&1 | FileCheck %s --check-prefix=MINLR
// MINLR: error: llcdist-add-optimizer: min-lr must be in [0, lr]
// RUN: not llc-dist-opt %s -split-input-file -llcdist-add-optimizer="warmup=-1" 2>&1 | FileCheck %s --check-prefix=STEPS
// RUN: not llc-dist-opt %s -split-input-file -llcdist-add-optimizer="total-steps=-2" 2>&1 | FileCheck %s --check-prefix=STEPS
// STEPS: error: llcdist-add-optimizer: warmup and total-steps must be >= 0
//
// The numbers the pass does not range-check (torch accepts any) must still
// be numbers: the option parser names the option.
// RUN: not llc-dist-opt %s -split-input-file -llcdist-add-optimizer="beta1=x" 2>&1 | FileCheck %s --check-prefix=BETA1
// BETA1: for the --beta1 option: 'x' value invalid for floating point argument!
// RUN: not llc-dist-opt %s -split-input-file -llcdist-add-optimizer="beta2=x" 2>&1 | FileCheck %s --check-prefix=BETA2
// BETA2: for the --beta2 option: 'x' value invalid for floating point argument!
// RUN: not llc-dist-opt %s -split-input-file -llcdist-add-optimizer="eps=x" 2>&1 | FileCheck %s --check-prefix=EPS
// EPS: for the --eps option: 'x' value invalid for floating point argument!
// RUN: not llc-dist-opt %s -split-input-file -llcdist-add-optimizer="weight-decay=x" 2>&1 | FileCheck %s --check-prefix=WD
// WD: for the --weight-decay option: 'x' value invalid for floating point argument!
// RUN: not llc-dist-opt %s -split-input-file -llcdist-add-optimizer="momentum=x" 2>&1 | FileCheck %s --check-prefix=MOMENTUM
// MOMENTUM: for the --momentum option: 'x' value invalid for floating point argument!
// RUN: not llc-dist-opt %s -split-input-file -llcdist-add-optimizer="grad-clip=x" 2>&1 | FileCheck %s --check-prefix=CLIP
// CLIP: for the --grad-clip option: 'x' value invalid for floating point argument!
// RUN: not llc-dist-opt %s -split-input-file -llcdist-add-optimizer="warmup=1.5" 2>&1 | FileCheck %s --check-prefix=WARMUP
// WARMUP: for the --warmup option: '1.5' value invalid for long argument!
module {
}
