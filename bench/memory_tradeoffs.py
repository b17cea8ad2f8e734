#!/usr/bin/env python3
"""Memory against time: recomputation, ZeRO, mixed precision and pipeline schedules.

Every variant of one tiny-llama training step (global batch 8, sequence 128)
is compiled and run on the CPU backend, side by side in rounds (each round
runs every variant once, so drift hits all alike). Reported per variant:
the largest rank's planned arena and the runtime's measured live peak
(from the run log), the median ms per step, and both as ratios to the
baseline (one device, no recomputation, fp32). The memory numbers are exact;
the times are the CPU backend's with every rank a thread on this machine's
cores, so only their ratios within one run mean anything.

usage: bench/memory_tradeoffs.py [--build build] [--steps 4] [--rounds 3] [--json OUT]
"""
import os
import shutil
import statistics
import subprocess
import tempfile

from benchlib import ROOT, llc_dist, parser, run_steps, write_results

BASE = ["--seq-len", "128", "--global-batch", "8"]
VARIANTS = [
    ("baseline (1 device, micro-batch 4)", ["--micro-batch", "4"]),
    ("recompute selective", ["--micro-batch", "4", "--recompute", "selective"]),
    ("recompute full", ["--micro-batch", "4", "--recompute", "full"]),
    ("bf16 mixed precision", ["--micro-batch", "4", "--dtype", "bf16"]),
    ("dp=2", ["--mesh", "dp=2", "--micro-batch", "2"]),
    ("dp=2 zero 1", ["--mesh", "dp=2", "--micro-batch", "2", "--zero", "1"]),
    ("dp=2 zero 2", ["--mesh", "dp=2", "--micro-batch", "2", "--zero", "2"]),
    ("dp=2 zero 3", ["--mesh", "dp=2", "--micro-batch", "2", "--zero", "3"]),
    ("pp=2 gpipe (8 microbatches)", ["--mesh", "pp=2", "--micro-batch", "1", "--schedule", "gpipe"]),
    ("pp=2 1f1b", ["--mesh", "pp=2", "--micro-batch", "1", "--schedule", "1f1b"]),
    ("pp=2 zb-h1", ["--mesh", "pp=2", "--micro-batch", "1", "--schedule", "zb-h1"]),
    ("pp=2 interleaved v=2", ["--mesh", "pp=2", "--micro-batch", "1", "--schedule", "interleaved",
                              "--virtual-stages", "2"]),
]


def main():
    ap = parser(__doc__, "memory-tradeoffs.json")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    exe = llc_dist(args.build, "memory_tradeoffs.py")
    cfg = os.path.join(ROOT, "models", "tiny-llama.json")
    tmp = tempfile.mkdtemp(prefix="llcdist-bench-mem-")
    rows = []
    try:
        for i, (name, flags) in enumerate(VARIANTS):
            plan = os.path.join(tmp, f"v{i}")
            subprocess.run([exe, "compile", cfg, *BASE, *flags, "-o", plan, "--quiet"], check=True)
            rows.append({"variant": name, "flags": " ".join(flags), "plan": plan, "ms": []})
        for _ in range(args.rounds):
            for r in rows:
                recs = run_steps(exe, r["plan"], args.steps)
                tps = statistics.median(x["tokens_per_s"] for x in recs[1:])  # step 0 warms up
                r["ms"].append(1e3 * 8 * 128 / tps)
                mem = recs[-1]["memory"]
                r["arena"] = max(mem["arena_bytes"])
                r["measured_live_peak"] = max(mem["peak_live_bytes"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base = rows[0]
    print(f"{'variant':<36} {'arena MiB':>10} {'live MiB':>9} {'x mem':>6} {'ms/step':>9} {'x time':>7}")
    for r in rows:
        del r["plan"]
        r["ms_per_step"] = statistics.median(r.pop("ms"))
        r["memory_ratio"] = r["arena"] / base["arena"]
        r["time_ratio"] = r["ms_per_step"] / base["ms_per_step"]
        print(f"{r['variant']:<36} {r['arena'] / 2**20:>10.2f} {r['measured_live_peak'] / 2**20:>9.2f} "
              f"{r['memory_ratio']:>6.2f} {r['ms_per_step']:>9.1f} {r['time_ratio']:>7.2f}")
    write_results(args.json, {"benchmark": "tiny-llama, global batch 8 x 128 tokens, CPU backend, synthetic data; "
                                            "largest rank's planned arena and measured live peak; median ms/step",
                              "steps": args.steps, "rounds": args.rounds, "results": rows})


if __name__ == "__main__":
    main()
