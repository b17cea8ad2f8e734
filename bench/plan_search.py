#!/usr/bin/env python3
"""Planner benchmark: `llc-dist plan` for llama3.1-405b on 16,384 H100s.

Runs

  llc-dist plan models/llama3.1-405b.json --gpus 16384 --device h100-80gb
      --topology dgx-h100 --global-batch 2048 --seq-len 8192 --format json

(2,048 x 8,192 = 16.8M tokens per step) pinned to one core (`taskset -c 0`,
when taskset is there), after one warm-up run, several times, and reports the
medians of: the whole command's wall time, the planner's own counters from its
JSON (configurations evaluated, seconds in the analytic search, seconds in the
exact compile + simulate of the top 5) and configurations evaluated per second
of search. The targets: the whole command under 10 s, and at least 1,500
configurations evaluated per second of search; a miss prints MISS (a target
to measure against, not a test: machines here are noisy).

usage: bench/plan_search.py [--build build] [--repeats 5] [--exact K] [--json OUT]
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

MAX_SECONDS = 10.0
MIN_CONFIGS_PER_SECOND = 1500.0


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(root, "build"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--exact", type=int, default=5,
                    help="configurations compiled and simulated (llc-dist plan --exact)")
    ap.add_argument("--json", default=os.path.join(root, "bench", "results", "plan-search.json"))
    args = ap.parse_args()
    exe = os.path.join(args.build, "bin", "llc-dist")
    if not os.path.exists(exe):
        sys.exit(f"{exe} not found: build it first (scripts/build.sh)")
    cmd = [exe, "plan", os.path.join(root, "models", "llama3.1-405b.json"), "--gpus", "16384",
           "--device", "h100-80gb", "--topology", "dgx-h100", "--global-batch", "2048",
           "--seq-len", "8192", "--format", "json", "--exact", str(args.exact)]
    pinned = shutil.which("taskset") is not None
    if pinned:
        cmd = ["taskset", "-c", "0"] + cmd

    def once():
        t0 = time.perf_counter()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            sys.exit("llc-dist plan failed:\n" + p.stderr)
        return wall, json.loads(p.stdout)

    once()  # warm-up: page cache, device and topology files
    runs = [once() for _ in range(args.repeats)]
    walls = [w for w, _ in runs]
    c = [j["counters"] for _, j in runs]
    med = lambda xs: statistics.median(xs)
    result = {
        "command": " ".join(cmd),
        "pinned_to_one_core": pinned,
        "repeats": args.repeats,
        "wall_seconds_median": med(walls),
        "wall_seconds": walls,
        "evaluated": c[0]["evaluated"],
        "meshes": c[0]["meshes"],
        "pruned_divisibility": c[0]["pruned_divisibility"],
        "pruned_memory": c[0]["pruned_memory"],
        "feasible": c[0]["feasible"],
        "search_seconds_median": med([x["search_seconds"] for x in c]),
        "configs_per_second_median": med([x["configs_per_second"] for x in c]),
        "exact_seconds_median": med([x["exact_seconds"] for x in c]),
        "exact": args.exact,
        "exact_ok": sum(e["ok"] for e in runs[0][1]["exact"]),
        "winner": runs[0][1]["top"][0]["config"]["compile_flags"],
        "winner_analytic_step_seconds": runs[0][1]["top"][0]["step_seconds"],
        "machine": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    print(f"llc-dist plan llama3.1-405b, 16384 x h100-80gb, 2048 x 8192 tokens "
          f"({'one core' if pinned else 'not pinned: no taskset'}, median of {args.repeats}):")
    print(f"  total              {result['wall_seconds_median']:8.2f} s   "
          f"(target < {MAX_SECONDS:.0f} s: "
          f"{'ok' if result['wall_seconds_median'] < MAX_SECONDS else 'MISS'})")
    print(f"  search             {result['search_seconds_median']:8.3f} s   "
          f"{result['evaluated']} configurations on {result['meshes']} meshes "
          f"({result['pruned_divisibility']} divisibility, {result['pruned_memory']} memory, "
          f"{result['feasible']} fit)")
    print(f"  configs / s        {result['configs_per_second_median']:8.0f}     "
          f"(target >= {MIN_CONFIGS_PER_SECOND:.0f}: "
          f"{'ok' if result['configs_per_second_median'] >= MIN_CONFIGS_PER_SECOND else 'MISS'})")
    print(f"  exact compile+sim  {result['exact_seconds_median']:8.2f} s   "
          f"(top {args.exact}, {result['exact_ok']} ok)")
    print(f"  winner             {result['winner']} "
          f"({result['winner_analytic_step_seconds']:.3f} s analytic)")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    print(f"written to {args.json}")


if __name__ == "__main__":
    main()
