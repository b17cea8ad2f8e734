#!/usr/bin/env python3
"""CPU training step time: compile each model's training step and run it.

For each (model, micro-batch, seq-len) the plan is compiled once and trained
for --steps steps on synthetic tokens with `llc-dist run`; the first step is
warm-up and excluded. Reports the median ms per step, tokens/s, and achieved
GFLOP/s (training FLOPs per token from `llc-dist info`, times tokens/s), and
each model's ms/step as a ratio to tiny-gpt2's, measured in the same run.

usage: bench/step_time.py [--build build] [--steps 6] [--json OUT] [--skip-gpt2]
"""
import json
import os
import shutil
import statistics
import subprocess
import tempfile

from benchlib import ROOT, llc_dist, parser, write_results

CASES = [("tiny-gpt2", 4, 64), ("tiny-llama", 4, 64), ("gpt2", 1, 128)]


def main():
    ap = parser(__doc__, "step-time.json")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--skip-gpt2", action="store_true", help="only the tiny models")
    args = ap.parse_args()
    exe = llc_dist(args.build, "step_time.py")
    tmp = tempfile.mkdtemp(prefix="llcdist-bench-")
    rows = []
    try:
        for model, mb, seq in CASES:
            if args.skip_gpt2 and model == "gpt2":
                continue
            cfg = os.path.join(ROOT, "models", model + ".json")
            info = json.loads(subprocess.run(
                [exe, "info", cfg, "--seq-len", str(seq), "--format", "json"],
                check=True, capture_output=True, text=True).stdout)
            plan = os.path.join(tmp, model)
            subprocess.run([exe, "compile", cfg, "--seq-len", str(seq), "--micro-batch", str(mb),
                            "-o", plan, "--quiet"], check=True)
            log = os.path.join(tmp, model + ".jsonl")
            subprocess.run([exe, "run", plan, "--steps", str(args.steps), "--data", "synthetic",
                            "--log-json", log, "--quiet"], check=True)
            recs = [json.loads(l) for l in open(log)][1:]  # step 0 is warm-up
            tps = statistics.median(r["tokens_per_s"] for r in recs)
            ms = 1e3 * mb * seq / tps
            gflops = info["training_flops_per_token"] * tps / 1e9
            rows.append({"model": model, "micro_batch": mb, "seq_len": seq,
                         "parameters": info["parameters"], "ms_per_step": ms,
                         "tokens_per_s": tps, "gflops": gflops})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base = rows[0]["ms_per_step"]
    print(f"{'model':<12} {'B x S':>8} {'params':>12} {'ms/step':>10} {'tok/s':>10} {'GFLOP/s':>8} {'x tiny-gpt2':>12}")
    for r in rows:
        r["ratio_to_tiny_gpt2"] = r["ms_per_step"] / base
        print(f"{r['model']:<12} {str(r['micro_batch']) + 'x' + str(r['seq_len']):>8} "
              f"{r['parameters']:>12,} {r['ms_per_step']:>10.1f} {r['tokens_per_s']:>10.0f} "
              f"{r['gflops']:>8.2f} {r['ratio_to_tiny_gpt2']:>12.1f}")
    write_results(args.json, {"benchmark": "llc-dist run, CPU backend, fp32, synthetic data, 1 BLAS thread",
                              "steps": args.steps, "results": rows})


if __name__ == "__main__":
    main()
