#!/usr/bin/env python3
"""Checkpoint stall at the step boundary: synchronous vs --async-checkpoint.

Compiles a ~16M-parameter GPT-2 (4 layers, 256 wide, GPT-2's 50,257-token
vocabulary) for dp=2 on the CPU, then runs it N steps with a checkpoint every K
steps, synchronous and asynchronous alternately (ROUNDS rounds, side by side),
and reads each checkpoint's record from --log-json: the stall (the training
time the checkpoint cost the step boundary: sync = snapshot + write + commit;
async = snapshot + waiting for the previous write + commit) and the background
write time. Reports medians over every checkpoint of every round, the ratio
async/sync of the stall, the median step time, and the checkpoint size.

usage: bench/checkpoint_stall.py [--rounds R] [--steps N] [--every K] [--tool build/bin/llc-dist]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = {
    "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 50257,
    "n_positions": 256, "n_embd": 256, "n_layer": 4, "n_head": 4, "n_inner": 1024,
    "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--every", type=int, default=3)
    ap.add_argument("--tool", default=os.path.join(ROOT, "build", "bin", "llc-dist"))
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="llcdist-ckpt-bench-")
    try:
        cfg = os.path.join(d, "bench-gpt2.json")
        json.dump(CONFIG, open(cfg, "w"))
        plan = os.path.join(d, "plan")
        subprocess.run([args.tool, "compile", cfg, "--mesh", "dp=2", "--seq-len", "64", "--micro-batch", "2",
                        "--global-batch", "4", "-o", plan, "--quiet"], check=True)
        stalls = {"sync": [], "async": []}
        writes = {"sync": [], "async": []}
        parts = {"sync": [], "async": []}  # (snapshot, wait, commit) ms
        steps = {"sync": [], "async": []}
        size = 0
        for r in range(args.rounds):
            for mode in ("sync", "async"):
                root = os.path.join(d, "ck-" + mode)
                shutil.rmtree(root, ignore_errors=True)
                log = os.path.join(d, mode + ".jsonl")
                cmd = [args.tool, "run", plan, "--steps", str(args.steps), "--quiet", "--log-json", log,
                       "--checkpoint-dir", root, "--checkpoint-every", str(args.every), "--keep-last", "1"]
                if mode == "async":
                    cmd.append("--async-checkpoint")
                subprocess.run(cmd, check=True)
                for line in open(log):
                    rec = json.loads(line)
                    if "checkpoint" in rec:
                        c = rec["checkpoint"]
                        stalls[mode].append(c["stall_s"] * 1e3)
                        writes[mode].append(c["write_s"] * 1e3)
                        parts[mode].append((c["snapshot_s"] * 1e3, c["wait_s"] * 1e3, c["commit_s"] * 1e3))
                    elif rec.get("tokens_per_s"):
                        steps[mode].append(64 * 4 / rec["tokens_per_s"] * 1e3)
                info = json.loads(subprocess.run([args.tool, "export", "--info", root, "--format", "json"],
                                                 check=True, capture_output=True, text=True).stdout)
                size = info["total_bytes"]
        med = {m: statistics.median(v) for m, v in stalls.items()}
        print(f"checkpoint of {size / 1e6:.1f} MB (params + AdamW state, {CONFIG['n_layer']}-layer GPT-2 "
              f"{CONFIG['n_embd']} wide, dp=2); {args.rounds} rounds x {args.steps // args.every} checkpoints per mode, every {args.every} steps")
        print(f"{'mode':6s} {'stall ms':>9s} {'snapshot':>9s} {'wait':>9s} {'commit':>9s} {'write ms':>9s} {'step ms':>9s}   (medians)")
        for m in ("sync", "async"):
            snap, wait, commit = (statistics.median(x[i] for x in parts[m]) for i in range(3))
            print(f"{m:6s} {med[m]:9.1f} {snap:9.1f} {wait:9.1f} {commit:9.1f} {statistics.median(writes[m]):9.1f} "
                  f"{statistics.median(steps[m]):9.1f}")
        print(f"async / sync stall: {med['async'] / med['sync']:.3f}")
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
