#!/usr/bin/env python3
"""The golden rule across backends: one plan, run on two backends, the same losses.

Two forms, one comparison (every step's loss and grad_norm: |b - a| <= rtol * max(|a|, 1e-3)):

  gpu_golden.py LLC_DIST MODELS_DIR NAME [--a cpu] [--b cuda] [--steps N]
                [--rtol X] [--run-flags "..."] [--b-flags "..."] -- MODEL COMPILE_FLAGS...
      Compiles MODELS_DIR/MODEL.json with COMPILE_FLAGS into a temporary plan, runs it --steps
      steps with `llc-dist run --backend A` and `--backend B` (--log-json each) and compares.
      Prints one line, "PASS golden NAME: ..." or "FAIL golden NAME: ...", and exits 0 or 1 (2 when
      a run itself fails). CI runs it with B = cpu, which checks the script and the --backend flag.

  gpu_golden.py suite DIR --runner RUNNER [--backend cuda] [--jobs J] [--timeout S] [--logs OUT]
      The prepared GPU check (scripts/test-gpu.sh --prepare DIR; docs/gpu.md): for each entry of
      DIR/golden.json (a compiled plan, its run flags, the CPU backend's --log-json recorded at
      prepare time, the tolerance of its dtype; "grad_norm": "median" for the 10-step parity plans),
      runs `RUNNER PLAN --backend cuda --steps N
      --log-json OUT/NAME.jsonl` (J at a time: they share the GPU; correctness, not speed) and
      compares with the reference. One line per plan, in the file's order, with the tail of the
      runner's output under a failed one; exits 1 if any failed.
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def run(cmd, cwd, timeout=None):
    try:
        p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout)
        return p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, out + f"\n(killed after {timeout} s)"
    except OSError as e:
        return 127, str(e)


def records(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rec = json.loads(line)
                if "loss" in rec:  # not a checkpoint record
                    out.append(rec)
    return out


def compare(a, b, steps, rtol, name_a, name_b, grad_norm="every-step"):
    """(ok, message) for two runs' step records: every step's loss, and the grad norm at every step
    or (grad_norm="median") by the median of its steps' relative differences -- for long bf16 runs,
    where one step's norm can spike in one run and not the other (docs/gpu.md, "Tolerances")."""
    if len(a) != steps or len(b) != steps:
        return False, f"{len(a)} and {len(b)} step records for {steps} steps"
    worst, where, norms = 0.0, "", []
    for ra, rb in zip(a, b):
        for key in ("loss", "grad_norm"):
            va, vb = ra.get(key), rb.get(key)
            if va is None and vb is None and key == "grad_norm":
                continue
            if va is None or vb is None:  # null: non-finite in one of the logs
                worst, where = float("inf"), f"step {ra['step']} {key}: {name_a} {va!r} vs {name_b} {vb!r}"
                continue
            err = abs(vb - va) / max(abs(va), 1e-3)
            if key == "grad_norm" and grad_norm == "median":
                norms.append(err)
                continue
            if err > worst or err != err:
                worst, where = err, f"step {ra['step']} {key}: {name_a} {va!r} vs {name_b} {vb!r}"
    med = statistics.median(norms) if norms else 0.0
    ok = worst <= rtol and med <= rtol
    msg = f"{steps} steps, {name_a} vs {name_b}, max relative difference {worst:.2e}"
    if grad_norm == "median":
        msg = (f"{steps} steps, {name_a} vs {name_b}, max relative difference of the loss {worst:.2e}, "
               f"median of the grad norm's {med:.2e} (max {max(norms, default=0.0):.1e})")
    msg += f" (tolerance {rtol:.0e})" + ("" if ok else f"; {where or 'the grad norm median'}")
    return ok, msg


def tail(text, lines=12):
    """The output's last lines as "  | " lines (its first 3 too when longer: a usage error's message
    comes before the help text)."""
    body = [l for l in (text or "").strip().splitlines() if l.strip()]
    if len(body) > lines:
        body = body[:3] + [f"... ({len(body) - lines} lines)"] + body[-(lines - 3):]
    return "".join(f"\n  | {l[:300]}" for l in body)


# --- the compile-and-run form ----------------------------------------------------------------------
def main_compile(argv):
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
        ok, msg = compare(a, b, args.steps, args.rtol, args.a, args.b)
        print(f"{'PASS' if ok else 'FAIL'} golden {args.name}: {msg}")
        return 0 if ok else 1


# --- the prepared-suite form -----------------------------------------------------------------------
def run_one(entry, root, runner, backend, logs, timeout):
    """(line, ok) for one golden.json entry."""
    name = entry["name"]
    plan = os.path.join(root, entry["plan"])
    out_log = os.path.join(logs, name + ".jsonl")
    if os.path.exists(out_log):
        os.remove(out_log)
    flags = [os.path.join(root, f[len("DIR/"):]) if f.startswith("DIR/") else f for f in entry["run_flags"]]
    cmd = [runner, plan, "--backend", backend, "--steps", str(entry["steps"]), "--log-json", out_log,
           "--quiet", *flags]
    t0 = time.time()
    rc, out = run(cmd, logs, timeout)
    took = time.time() - t0
    with open(os.path.join(logs, name + ".out"), "w") as f:
        f.write(" ".join(cmd) + "\n" + out)
    label = f"golden {name} ({entry['dtype']}, {entry['ranks']} rank{'s' if entry['ranks'] > 1 else ''})"
    if rc != 0:
        why = "timed out" if rc == 124 else f"exit {rc}"
        return f"FAIL {label}: --backend {backend} {why} after {took:.0f} s{tail(out)}", False
    try:
        ref = records(os.path.join(root, entry["ref"]))
        got = records(out_log)
    except (OSError, ValueError) as e:
        return f"FAIL {label}: cannot read the logs ({e}){tail(out)}", False
    ok, msg = compare(ref, got, entry["steps"], entry["rtol"], "cpu", backend, entry.get("grad_norm", "every-step"))
    return f"{'PASS' if ok else 'FAIL'} {label}: {msg} [{took:.0f} s]", ok


def main_suite(argv):
    ap = argparse.ArgumentParser(prog="gpu_golden.py suite")
    ap.add_argument("dir")
    ap.add_argument("--runner", required=True, help="llcdist-run (or a wrapper that sets its libraries)")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--logs", default=None, help="where the runs' logs go (default: a temporary dir)")
    ap.add_argument("--only", default="", help="comma-separated names (default: all)")
    args = ap.parse_args(argv)
    root = os.path.abspath(args.dir)
    entries = json.load(open(os.path.join(root, "golden.json")))["plans"]
    if args.only:
        keep = set(args.only.split(","))
        entries = [e for e in entries if e["name"] in keep]
    logs = args.logs or tempfile.mkdtemp(prefix="llcdist-golden-")
    os.makedirs(logs, exist_ok=True)
    bad = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_one, e, root, args.runner, args.backend, logs, args.timeout) for e in entries]
        for f in futures:  # in the file's order
            line, ok = f.result()
            print(line, flush=True)
            bad += not ok
    return 1 if bad else 0


def main():
    argv = sys.argv[1:]
    if argv and argv[0] == "suite":
        return main_suite(argv[1:])
    if "--" not in argv:
        sys.exit("usage: gpu_golden.py LLC_DIST MODELS_DIR NAME [options] -- MODEL FLAGS...\n"
                 "       gpu_golden.py suite DIR --runner RUNNER [--backend cuda] [--jobs J]")
    return main_compile(argv)


if __name__ == "__main__":
    sys.exit(main())
