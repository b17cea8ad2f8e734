"""What the CPU benchmarks share: their command line, the built llc-dist, a model config, a run's step
records, the round-robin timing and the results file (bench/results/)."""
import argparse
import json
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parser(doc, results_name):
    """The benchmark's argument parser: --build and --json (bench/results/RESULTS_NAME) to start with."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--json", default=os.path.join(ROOT, "bench", "results", results_name))
    return ap


def llc_dist(build, script):
    """BUILD/bin/llc-dist, or exit naming SCRIPT and the fix."""
    exe = os.path.join(build, "bin", "llc-dist")
    if not os.path.exists(exe):
        sys.exit(f"{script}: {exe} not found; build first (scripts/build.sh)")
    return exe


def run_steps(exe, plan, steps):
    """`llc-dist run PLAN` for STEPS steps on synthetic tokens: its --log-json records, every step's."""
    log = plan + ".jsonl"
    if os.path.exists(log):
        os.remove(log)
    subprocess.run([exe, "run", plan, "--steps", str(steps), "--data", "synthetic", "--log-json", log, "--quiet"],
                   check=True)
    return [json.loads(line) for line in open(log)]


def model_config(base, path, fields):
    """models/BASE.json with FIELDS set, written to PATH (a benchmark's model); returns PATH."""
    with open(os.path.join(ROOT, "models", base + ".json")) as f:
        config = json.load(f)
    config.update(fields)
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
    return path


def time_rounds(exe, rows, rounds, steps, tokens):
    """Round-robin, so the machine's drift hits every row alike: per round, each row's plan (row["plan"])
    runs STEPS steps, and the ms per step of every step after the first (the warm-up) of a step of
    TOKENS tokens is appended to row["ms"]."""
    for _ in range(rounds):
        for r in rows:
            r["ms"] += [1e3 * tokens / x["tokens_per_s"] for x in run_steps(exe, r["plan"], steps)[1:]]


def write_results(path, out):
    """OUT with the machine it ran on, as JSON at PATH."""
    out = dict(out, machine=platform.platform(), cpus=os.cpu_count())
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print(f"wrote {path}")
