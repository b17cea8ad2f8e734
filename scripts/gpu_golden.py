#!/usr/bin/env python3
"""The golden rule across backends: one plan, run on two backends, the same losses.

  gpu_golden.py LLC_DIST MODELS_DIR NAME [--a cpu] [--b cuda] [--steps N]
                [--rtol X] [--run-flags "..."] [--b-flags "..."] -- MODEL COMPILE_FLAGS...

Compiles MODELS_DIR/MODEL.json with COMPILE_FLAGS into a temporary plan,
runs it --steps steps with `llc-dist run --backend A` and `--backend B`
(--log-json each), and compares every step's loss and grad_norm:
|b - a| <= rtol * max(|a|, 1e-3). Prints one line, "PASS golden NAME: ..." or
"FAIL golden NAME: ...", and exits 0 or 1 (2 when a run itself fails).
scripts/test-gpu.sh runs it with B = cuda on a GPU; CI runs it with B = cpu,
which checks the script and the --backend flag (docs/gpu.md).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def run(cmd, cwd):
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


def records(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit("usage: gpu_golden.py LLC_DIST MODELS_DIR NAME [options] -- MODEL FLAGS...")
    cut = argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("llc_dist")
    ap.add_argument("models")
    ap.add_argument("name")
    ap.add_argument("--a", default="cpu")
    ap.add_argument("--b", default="cuda")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rtol", type=float, default=2e-4)
    ap.add_argument("--run-flags", default="", help="llc-dist run flags of both runs")
    ap.add_argument("--b-flags", default="", help="more flags of run B only (the tests make B differ)")
    args = ap.parse_args(argv[:cut])
    model, flags = argv[cut + 1], argv[cut + 2:]
    with tempfile.TemporaryDirectory(prefix="llcdist-golden-") as tmp:
        plan = os.path.join(tmp, "plan")
        rc, out = run([args.llc_dist, "compile", os.path.join(args.models, model + ".json"), *flags,
                       "-o", plan, "--quiet"], tmp)
        if rc != 0:
            print(f"FAIL golden {args.name}: compile failed: {out.strip()[-400:]}")
            return 2
        logs = {}
        for backend in (args.a, args.b):
            log = os.path.join(tmp, backend + ".jsonl")
            cmd = [args.llc_dist, "run", plan, "--steps", str(args.steps), "--backend", backend,
                   "--log-json", log, "--quiet", *args.run_flags.split()]
            if logs:
                cmd += args.b_flags.split()
            rc, out = run(cmd, tmp)
            if rc != 0:
                print(f"FAIL golden {args.name}: --backend {backend} failed: {out.strip()[-400:]}")
                return 2
            logs[backend if backend not in logs else backend + "'"] = records(log)
        a, b = list(logs.values())
        if len(a) != args.steps or len(b) != args.steps:
            print(f"FAIL golden {args.name}: {len(a)} and {len(b)} step records for {args.steps} steps")
            return 1
        worst, where = 0.0, ""
        for ra, rb in zip(a, b):
            for key in ("loss", "grad_norm"):
                va, vb = ra.get(key), rb.get(key)
                if va is None or vb is None:
                    continue
                err = abs(vb - va) / max(abs(va), 1e-3)
                if err > worst or err != err:
                    worst, where = err, f"step {ra['step']} {key}: {args.a} {va!r} vs {args.b} {vb!r}"
        ok = worst <= args.rtol
        print(f"{'PASS' if ok else 'FAIL'} golden {args.name}: {args.steps} steps, {args.a} vs {args.b}, "
              f"max relative difference {worst:.2e} (tolerance {args.rtol:.0e})" + ("" if ok else f"; {where}"))
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
