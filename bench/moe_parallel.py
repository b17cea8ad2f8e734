#!/usr/bin/env python3
"""Mixture of experts under tp, sequence parallelism and expert parallelism, side by side (CPU).

A Mixtral-shaped model (hidden 256, 8 experts of 512, top-2, 2 layers, seq 128) on 2 ranks of the
CPU backend (in-process), the same tokens per step in every row:
  tp=2                  the experts whole on both tp ranks (each runs every token's experts)
  tp=2 + SP             each tp rank routes its own half of the tokens (no gather before the layer)
  dp=2                  every expert on both ranks, each rank its own sequences
  dp=2, ep=2            each rank 4 of the 8 experts, rows exchanged by all_to_all_v
For each: the planned arena per rank (exact: the plan's arena_bytes), the experts' GEMM sizes per
rank per step summed from the plan's grouped_linear ops at their static rows (N·O·K; under ep N is
the worst case C = ep·T·min(k, E/ep), while the GEMMs run on the rows that arrive, T·k under even
routing), and the median ms/step of `llc-dist run` after a warm-up step, the rows run round-robin
for --rounds rounds.

usage: bench/moe_parallel.py [--build build] [--rounds 5] [--steps 4] [--json OUT]
"""
import json
import os
import shutil
import statistics
import subprocess
import tempfile

from benchlib import llc_dist, model_config, parser, time_rounds, write_results

SHAPE = {"hidden_size": 256, "intermediate_size": 512, "num_local_experts": 8, "num_experts_per_tok": 2,
         "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
         "max_position_embeddings": 128}
SEQ, GLOBAL_BATCH = 128, 4
ROWS = [("tp=2", ["--mesh", "tp=2", "--micro-batch", "4"]),
        ("tp=2 + SP", ["--mesh", "tp=2", "--sequence-parallel", "--micro-batch", "4"]),
        ("dp=2", ["--mesh", "dp=2", "--micro-batch", "2"]),
        ("dp=2, ep=2", ["--mesh", "dp=2,ep=2", "--micro-batch", "2"])]


def grouped_gemm_rows(plan):
    """Σ over the plan's grouped_linear ops of N·O·K (the static rows times the weight's size)."""
    total = 0
    for name in sorted(os.listdir(plan)):
        if not name.startswith("program-"):
            continue
        prog = json.load(open(os.path.join(plan, name)))
        for sub in prog["subroutines"]:
            for op in sub["ops"]:
                if op["op"].startswith("grouped_linear"):
                    a = op["attrs"]
                    total += a.get("N", 0) * a.get("O", 0) * a.get("K", 0)
        break  # every rank runs program-0 (no pipeline here)
    return total


def main():
    ap = parser(__doc__, "moe-parallel.json")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    exe = llc_dist(args.build, "moe_parallel.py")
    tmp = tempfile.mkdtemp(prefix="llcdist-moe-bench-")
    try:
        model = model_config("tiny-mixtral", os.path.join(tmp, "mixtral-bench.json"), SHAPE)
        rows = []
        for label, flags in ROWS:
            plan = os.path.join(tmp, "plan-%d" % len(rows))
            subprocess.run([exe, "compile", model, "--seq-len", str(SEQ), "--global-batch", str(GLOBAL_BATCH),
                            "-o", plan, "--quiet"] + flags, check=True)
            arena = json.load(open(os.path.join(plan, "program-0.json")))["arena_bytes"]
            rows.append({"config": label, "flags": " ".join(flags), "plan": plan, "arena_mib": arena / 2**20,
                         "expert_gemm_mnk": grouped_gemm_rows(plan), "ms": []})
        time_rounds(exe, rows, args.rounds, args.steps, GLOBAL_BATCH * SEQ)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base = rows[0]
    print(f"{'config':<12} {'arena MiB/rank':>14} {'static expert N·O·K':>20} {'x tp=2':>7} {'ms/step':>9} {'x tp=2':>7}")
    for r in rows:
        del r["plan"]
        r["ms_per_step"] = statistics.median(r.pop("ms"))
        r["expert_gemm_ratio"] = r["expert_gemm_mnk"] / base["expert_gemm_mnk"]
        r["step_ratio"] = r["ms_per_step"] / base["ms_per_step"]
        print(f"{r['config']:<12} {r['arena_mib']:>14.2f} {r['expert_gemm_mnk']:>20,} {r['expert_gemm_ratio']:>7.2f} "
              f"{r['ms_per_step']:>9.1f} {r['step_ratio']:>7.2f}")
    write_results(args.json, {"benchmark": "MoE under tp, SP, dp and ep: llc-dist run, CPU backend, fp32, 2 "
                                            "in-process ranks", "model": SHAPE, "seq_len": SEQ,
                              "global_batch": GLOBAL_BATCH, "rounds": args.rounds, "steps": args.steps,
                              "results": rows})


if __name__ == "__main__":
    main()
