#!/usr/bin/env python3
"""How close llcdist-plan-memory places each stage to its live peak, over a grid.

Compiles every combination of the models, meshes, pipeline schedules and ZeRO
stages below (seq 512, micro-batch 1, 2·pp microbatches per dp rank; the
interleaved schedule with 2 virtual stages; ZeRO only where dp > 1) and reads
each stage's `activations_placed_over_live` from the compile report. Prints the
configurations with a stage above --limit and how many there are
(docs/memory.md: 300 configurations, 11 above 1.05). --base compares with
another build: the configurations whose worst stage got better or worse.

usage: scripts/placement-scan.py [--bin build/bin/llc-dist] [--base OLD/llc-dist]
                                 [--limit 1.05] [--jobs 2] [--json OUT]
"""
import argparse
import concurrent.futures
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ["llama3.2-1b", "gpt2", "qwen2-0.5b", "phi-2", "gemma-2b"]
MESHES = ["pp=2", "dp=2,pp=2", "tp=2,pp=2", "dp=2,tp=2,pp=2", "pp=4", "dp=2,pp=4"]
SCHEDULES = ["gpipe", "1f1b", "interleaved", "zb-h1"]
ZERO = [0, 1, 2, 3]


def axis(mesh, name):
    for part in mesh.split(","):
        k, v = part.split("=")
        if k == name:
            return int(v)
    return 1


def configurations():
    for model, mesh, schedule, zero in itertools.product(MODELS, MESHES, SCHEDULES, ZERO):
        if zero and axis(mesh, "dp") == 1:
            continue
        yield (model, mesh, schedule, zero)


def scan(binary, jobs):
    """{configuration: [placed / live per stage] or an error message}."""
    work = tempfile.mkdtemp(prefix="placement-scan-")
    out_dirs = {}

    def run(cfg):
        model, mesh, schedule, zero = cfg
        dp, pp = axis(mesh, "dp"), axis(mesh, "pp")
        out = out_dirs.setdefault(threading.get_ident(), os.path.join(work, str(len(out_dirs))))
        args = [binary, "compile", os.path.join(ROOT, "models", model + ".json"), "--mesh", mesh,
                "--schedule", schedule, "--seq-len", "512", "--global-batch", str(2 * pp * dp),
                "--format", "json", "-o", out]
        if schedule == "interleaved":
            args += ["--virtual-stages", "2"]
        if zero:
            args += ["--zero", str(zero)]
        p = subprocess.run(args, capture_output=True, text=True)
        if p.returncode:
            return cfg, "error: " + p.stderr.strip().splitlines()[-1]
        return cfg, [r["activations_placed_over_live"] for r in json.loads(p.stdout)["memory_per_rank"]]

    try:
        with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
            return dict(ex.map(run, list(configurations())))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def name(cfg):
    model, mesh, schedule, zero = cfg
    return f"{model} --mesh {mesh} --schedule {schedule}" + (f" --zero {zero}" if zero else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "llc-dist"))
    ap.add_argument("--base", help="another llc-dist to compare with")
    ap.add_argument("--limit", type=float, default=1.05)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", help="write {configuration: stages} here")
    a = ap.parse_args()
    res = scan(a.bin, a.jobs)
    errors = [c for c, v in res.items() if isinstance(v, str)]
    above = [c for c, v in res.items() if not isinstance(v, str) and max(v) > a.limit]
    for c in above:
        print(f"{name(c)}: " + " ".join(f"{x:.3f}" for x in res[c]))
    for c in errors:
        print(f"{name(c)}: {res[c]}")
    print(f"{len(res)} configurations, {len(above)} with a stage above {a.limit}, {len(errors)} failed")
    if a.base:
        base = scan(a.base, a.jobs)
        better = worse = 0
        for c, v in res.items():
            b = base.get(c)
            if isinstance(v, str) or isinstance(b, str) or b is None or max(v) == max(b):
                continue
            better, worse = better + (max(v) < max(b)), worse + (max(v) > max(b))
            print(f"  {name(c)}: worst stage {max(b):.3f} -> {max(v):.3f}")
        print(f"against {a.base}: {better} better, {worse} worse")
    if a.json:
        with open(a.json, "w") as f:
            json.dump([[list(c), v] for c, v in res.items()], f)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
