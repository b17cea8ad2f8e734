#!/usr/bin/env python3
"""Kills `llc-dist run --checkpoint-dir` (SIGKILL) inside its saves, many times,
and checks that every time the newest committed checkpoint loads and resumes
the run: the resumed run's losses are the uninterrupted run's, bit for bit.

  checkpoint-crash.py LLC_DIST PLAN WORKDIR [--random N] [--seed S]

First at each named point of the commit protocol (LLCDIST_CHECKPOINT_CRASH,
runtime/src/train/TrainCheckpoint.cpp) of the second save, then N times at a
random moment of a longer run. Standard library only."""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time


def losses(path):
    out = {}
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if "loss" in rec:
                out[rec["step"]] = rec["loss"]
    return out


def info(tool, root):
    p = subprocess.run([tool, "export", "--info", root, "--format", "json"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr.strip()
    return json.loads(p.stdout), ""


def main():
    tool, plan, work = sys.argv[1:4]
    rest = sys.argv[4:]
    n_random = int(rest[rest.index("--random") + 1]) if "--random" in rest else 10
    rng = random.Random(int(rest[rest.index("--seed") + 1]) if "--seed" in rest else 1)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    steps = 40
    ref_log = os.path.join(work, "reference.jsonl")
    subprocess.run([tool, "run", plan, "--steps", str(steps), "--quiet", "--log-json", ref_log], check=True)
    ref = losses(ref_log)
    failures = 0

    def resume_and_check(root, what):
        nonlocal failures
        desc, err = info(tool, root)
        if desc is None:
            print(f"FAIL {what}: the checkpoint does not load: {err}")
            failures += 1
            return None
        k = desc["step"]
        log = os.path.join(work, "resumed.jsonl")
        p = subprocess.run([tool, "run", plan, "--steps", str(min(k + 2, steps)), "--resume", root,
                            "--quiet", "--log-json", log], capture_output=True, text=True)
        if p.returncode != 0:
            print(f"FAIL {what}: resume from step {k} failed: {p.stderr.strip()}")
            failures += 1
            return k
        got = losses(log)
        bad = [s for s, l in got.items() if ref.get(s) != l]
        if bad or (k < steps and not got):
            print(f"FAIL {what}: resumed losses differ from the uninterrupted run at steps {bad}")
            failures += 1
        return k

    # 1. At each point of the second save's commit.
    expect = {"shard": 1, "manifest": 1, "rename": 1, "latest": 2, "prune": 2}
    for point, want in expect.items():
        root = os.path.join(work, "ck-" + point)
        env = dict(os.environ, LLCDIST_CHECKPOINT_CRASH=point + "@2")
        p = subprocess.run([tool, "run", plan, "--steps", "4", "--quiet", "--checkpoint-dir", root,
                            "--checkpoint-every", "1", "--keep-last", "1"], env=env,
                           capture_output=True, text=True)
        if p.returncode != -signal.SIGKILL:
            print(f"FAIL crash at {point}: the run was not killed (exit {p.returncode}): {p.stderr.strip()}")
            failures += 1
            continue
        k = resume_and_check(root, "crash at " + point)
        status = "ok" if k == want else f"FAIL (expected step {want})"
        if k != want:
            failures += 1
        print(f"crash at {point} of save 2: resumed from step {k}: {status}")

    # 2. At random moments (most of a run's time is spent saving: a checkpoint every step).
    landed = mid_save = resumed = 0
    for i in range(n_random):
        root = os.path.join(work, "ck-random")
        shutil.rmtree(root, ignore_errors=True)
        proc = subprocess.Popen([tool, "run", plan, "--steps", str(steps), "--quiet", "--checkpoint-dir", root,
                                 "--checkpoint-every", "1", "--keep-last", "2"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.05, 0.8))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if proc.returncode != -signal.SIGKILL:
            continue  # it finished first
        landed += 1
        if any(n.startswith((".partial-", ".deleting-")) or n.startswith("latest.tmp")
               for n in (os.listdir(root) if os.path.isdir(root) else [])):
            mid_save += 1
        if not os.path.exists(os.path.join(root, "latest")):
            continue  # killed before the first commit: nothing to resume
        if resume_and_check(root, f"random kill {i}") is not None:
            resumed += 1
    print(f"random kills: {landed} of {n_random} landed, {mid_save} inside a save, {resumed} resumed")
    if failures:
        print(f"{failures} FAILURES")
        return 1
    print("CRASH-SAFE")
    return 0


if __name__ == "__main__":
    sys.exit(main())
