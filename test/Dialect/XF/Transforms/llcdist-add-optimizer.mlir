// RUN: llc-dist-opt %s -split-input-file -llcdist-add-optimizer="grad-clip=1.0 lr=3e-4 lr-schedule=cosine warmup=10 total-steps=100 min-lr=3e-5" | FileCheck %s --check-prefix=ADAMW
// RUN: llc-dist-opt %s -split-input-file -llcdist-add-optimizer="optimizer=sgd momentum=0.9" | FileCheck %s --check-prefix=SGD
// RUN: not llc-dist-opt %s -llcdist-add-optimizer="optimizer=lamb" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not llc-dist-opt %s -llcdist-add-optimizer="warmup=200 total-steps=100" 2>&1 | FileCheck %s --check-prefix=WARMUP

// ADAMW: module attributes {xf.lr_schedule = {kind = "cosine", max_lr = 3.000000e-04 : f64, min_lr = 3.000000e-05 : f64, total_steps = 100 : i64, warmup_steps = 10 : i64}}
// ADAMW: func.func @optimizer_step() attributes {xf.optimizer}
// ADAMW-NEXT: xf.clip_grad_norm {max_norm = 1.000000e+00 : f64}
// torch.optim.AdamW's defaults: betas (0.9, 0.999), eps 1e-8, weight decay 0.01.
// ADAMW-NEXT: xf.adamw {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, weight_decay = 1.000000e-02 : f64}

// SGD: xf.lr_schedule = {kind = "constant", max_lr = 1.000000e-03 : f64
// SGD: xf.clip_grad_norm {max_norm = 0.000000e+00 : f64}
// torch.optim.SGD's default weight decay is 0.
// SGD-NEXT: xf.sgd {momentum = 9.000000e-01 : f64, weight_decay = 0.000000e+00 : f64}

// BAD: error: llcdist-add-optimizer: optimizer 'lamb' is not adamw or sgd
// WARMUP: error: llcdist-add-optimizer: warmup exceeds total-steps
module {
}
