#!/usr/bin/env python3
"""The fusion passes side by side: ops per step, arena, CPU ms/step, final loss.

Each case (model, dtype, micro-batch, seq-len) is compiled with every fusion
on (the default), with each one off alone (--no-fuse-norm,
--no-fuse-epilogues, --no-ce-grad-in-place, --no-fuse-classifier,
--no-packed-qkv, --no-fuse-embedding, --no-fuse-optimizer) and with all off, and each plan trains --steps steps on the same synthetic tokens with
`llc-dist run` on the CPU backend; step 0 is warm-up. Reports ops per step
(the launches a GPU step makes), the arena, the median ms per step and the
last step's loss, which must be the same in every row (the fused ops round
as the unfused ones stored: docs/plan-format.md). The GPU's side of the same
comparison is the GPU check's (scripts/test-gpu.sh).

usage: bench/fusion.py [--build build] [--steps 6] [--json OUT] [--quick]
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

CASES = [("tiny-llama", "bf16", 4, 64), ("tiny-gpt2", "bf16", 4, 64), ("gpt2", "bf16", 1, 128)]
FLAGS = ["--no-fuse-norm", "--no-fuse-epilogues", "--no-ce-grad-in-place", "--no-fuse-classifier", "--no-packed-qkv",
         "--no-fuse-embedding", "--no-fuse-optimizer"]
VARIANTS = [("all on", [])] + [(f, [f]) for f in FLAGS] + [("all off", FLAGS)]


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(root, "build"))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--quick", action="store_true", help="only the tiny models")
    ap.add_argument("--json", default=os.path.join(root, "bench", "results", "fusion.json"))
    args = ap.parse_args()
    if args.steps < 2:
        sys.exit("fusion.py: --steps must be at least 2 (step 0 is warm-up)")
    exe = os.path.join(args.build, "bin", "llc-dist")
    if not os.path.exists(exe):
        sys.exit(f"fusion.py: {exe} not found; build first (scripts/build.sh)")
    tmp = tempfile.mkdtemp(prefix="llcdist-fusion-")
    rows = []
    try:
        for model, dtype, mb, seq in CASES:
            if args.quick and not model.startswith("tiny"):
                continue
            cfg = os.path.join(root, "models", model + ".json")
            for name, flags in VARIANTS:
                plan = os.path.join(tmp, "plan")
                shutil.rmtree(plan, ignore_errors=True)
                summary = json.loads(subprocess.run(
                    [exe, "compile", cfg, "--dtype", dtype, "--seq-len", str(seq), "--micro-batch", str(mb),
                     "--format", "json", "-o", plan] + flags,
                    check=True, capture_output=True, text=True).stdout)
                log = os.path.join(tmp, "run.jsonl")
                subprocess.run([exe, "run", plan, "--steps", str(args.steps), "--data", "synthetic",
                                "--log-json", log, "--quiet"], check=True)
                recs = [json.loads(l) for l in open(log)]
                tps = statistics.median(r["tokens_per_s"] for r in recs[1:])
                rows.append({"model": model, "dtype": dtype, "micro_batch": mb, "seq_len": seq,
                             "variant": name, "ops_per_step": summary["plan"]["ops_per_step_per_stage"][0],
                             "arena_mib": summary["plan"]["arena_bytes"] / 2**20,
                             "ms_per_step": 1e3 * mb * seq / tps, "last_loss": recs[-1]["loss"]})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'model':<11} {'B x S':>7} {'variant':<22} {'ops/step':>8} {'arena MiB':>10} {'ms/step':>9} "
          f"{'last loss':>12}")
    same = True
    for r in rows:
        first = next(x for x in rows if x["model"] == r["model"])
        same = same and r["last_loss"] == first["last_loss"]
        print(f"{r['model']:<11} {str(r['micro_batch']) + 'x' + str(r['seq_len']):>7} {r['variant']:<22} "
              f"{r['ops_per_step']:>8} {r['arena_mib']:>10.2f} {r['ms_per_step']:>9.1f} {r['last_loss']:>12.6f}")
    print("the same last loss in every row of a model" if same else "LOSSES DIFFER between variants")
    out = {"benchmark": "llc-dist run, CPU backend, synthetic data: each fusion pass on and off",
           "steps": args.steps, "machine": platform.platform(), "cpus": os.cpu_count(),
           "same_losses": same, "results": rows}
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print(f"wrote {args.json}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
