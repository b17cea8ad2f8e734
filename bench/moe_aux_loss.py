#!/usr/bin/env python3
"""What the MoE load-balancing loss costs, side by side (CPU), without and with pipeline parallelism.

The Mixtral-shaped model of moe_parallel.py (hidden 256, 8 experts of 512, top-2, 4 layers here, seq
128, 8 sequences a step) on 2 ranks of the CPU backend (in-process), each mesh with
output_router_logits false and true:
  dp=2                  each rank's microbatches its own load-balancing loss
  pp=2 (1F1B)           the routers' statistics (counts i32 [E], probability sums f32 [E]) cross the
                        stage with the activations, their gradient back with the activations'
For each: the ops the loss adds per step over every program (moe_router_stats / _bwd, moe_aux_loss /
_bwd: each subroutine's ops times the microbatches it runs for), the point-to-point bytes per step
(pipeline sends, read from the plan's send ops), the planned arena of program 0, and the
median ms/step of `llc-dist run` after a warm-up step, the rows run round-robin for --rounds rounds.

usage: bench/moe_aux_loss.py [--build build] [--rounds 5] [--steps 4] [--json OUT]
"""
import json
import os
import shutil
import statistics
import subprocess
import tempfile

import moe_parallel
from benchlib import llc_dist, model_config, parser, time_rounds, write_results

SHAPE = dict(moe_parallel.SHAPE, num_hidden_layers=4)
SEQ, GLOBAL_BATCH, MICRO_BATCH = moe_parallel.SEQ, 8, 2
MESHES = [("dp=2", ["--mesh", "dp=2"]), ("pp=2", ["--mesh", "pp=2", "--schedule", "1f1b"])]
AUX_OPS = ("moe_router_stats", "moe_router_stats_bwd", "moe_aux_loss", "moe_aux_loss_bwd")
ELEM_BYTES = {"f32": 4, "i32": 4, "bf16": 2, "f64": 8}


def plan_counts(plan):
    """Per step, over every program: the load-balancing loss's ops (each subroutine's ops times the
    microbatches it runs for) and the bytes the pipeline sends."""
    manifest = json.load(open(os.path.join(plan, "manifest.json")))
    microbatches = manifest["batch"]["microbatches"]
    ops = sends = 0
    for name in sorted(os.listdir(plan)):
        if not name.startswith("program-"):
            continue
        prog = json.load(open(os.path.join(plan, name)))
        sizes = {b["id"]: b for b in prog["buffers"]}
        for sub in prog["subroutines"]:
            runs = microbatches if sub["name"].startswith(("forward", "backward")) else 1
            for op in sub["ops"]:
                ops += runs * (op["op"] in AUX_OPS)
                if op["op"] == "send":
                    b = sizes[op["args"]["x"]]
                    n = 1
                    for d in b["shape"]:
                        n *= d
                    sends += runs * n * ELEM_BYTES[b["dtype"]]
    return ops, sends


def main():
    ap = parser(__doc__, "moe-aux-loss.json")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    exe = llc_dist(args.build, "moe_aux_loss.py")
    tmp = tempfile.mkdtemp(prefix="llcdist-moe-aux-bench-")
    try:
        rows = []
        for aux in (False, True):
            model = model_config("tiny-mixtral", os.path.join(tmp, "mixtral-aux-%d.json" % aux),
                                 dict(SHAPE, output_router_logits=aux))
            for label, flags in MESHES:
                plan = os.path.join(tmp, "plan-%d" % len(rows))
                subprocess.run([exe, "compile", model, "--seq-len", str(SEQ), "--global-batch", str(GLOBAL_BATCH),
                                "--micro-batch", str(MICRO_BATCH), "-o", plan, "--quiet"] + flags, check=True)
                arena = json.load(open(os.path.join(plan, "program-0.json")))["arena_bytes"]
                ops, sends = plan_counts(plan)
                rows.append({"config": label + (" + aux loss" if aux else ""), "flags": " ".join(flags),
                             "aux_loss": aux, "plan": plan, "arena_mib": arena / 2**20, "aux_ops_per_step": ops,
                             "p2p_bytes_per_step": sends, "ms": []})
        time_rounds(exe, rows, args.rounds, args.steps, GLOBAL_BATCH * SEQ)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'config':<18} {'aux ops/step':>12} {'p2p bytes/step':>15} {'arena MiB/rank':>15} {'ms/step':>9} "
          f"{'x without':>9}")
    without = {r["flags"]: r for r in rows if not r["aux_loss"]}
    for r in rows:
        del r["plan"]
        r["ms_per_step"] = statistics.median(r.pop("ms"))
    for r in rows:
        r["step_ratio"] = r["ms_per_step"] / without[r["flags"]]["ms_per_step"]
        print(f"{r['config']:<18} {r['aux_ops_per_step']:>12} {r['p2p_bytes_per_step']:>15,} {r['arena_mib']:>15.2f} "
              f"{r['ms_per_step']:>9.1f} {r['step_ratio']:>9.3f}")
    write_results(args.json, {"benchmark": "the MoE load-balancing loss, off and on: llc-dist run, CPU backend, "
                                            "fp32, 2 in-process ranks", "model": SHAPE, "seq_len": SEQ,
                              "global_batch": GLOBAL_BATCH, "micro_batch": MICRO_BATCH, "rounds": args.rounds,
                              "steps": args.steps, "results": rows})


if __name__ == "__main__":
    main()
