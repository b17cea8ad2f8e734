"""One process per rank reproduces the in-process run (issue #13): compiles a plan, runs it with
every rank a thread of one `llc-dist run`, then under `mpirun -n WORLD llc-dist run`, and requires
the same losses, gradient norms and memory figures in --log-json and the same --save-params file,
byte for byte (both communicators reduce in member order). Also: a launcher that starts another
number of processes than the plan's ranks is an error on every rank, a rank that cannot read its
data names itself and ends every process, and nothing hangs.

usage: mpirun_matches_threads.py LLC_DIST MPIEXEC MODELS_DIR NAME -- COMPILE_FLAGS...
  NAME 'world-size-mismatch' checks that error instead; 'one-rank-bad-data', 'plan-mismatch' and
  'one-rank-missing-plan-file' that a rank given another data file or plan (MPMD) fails, named, and
  ends the job; 'fault-stall' and 'fault-exit' that a hung or dead rank (LLCDIST_FAULT) is named and
  the job ends within --comm-timeout + 10 s, and for the hung one that `llc-dist diagnose` of the
  flight recorder's dumps names it and the plan op it never reached, with the op's provenance
  ('fault-stall-rR-opK': rank R hangs at its communication call K of step 1, else the last rank at 3);
  'fault-delay' that a slow rank changes nothing; 'one-rank-only-its-stage' that a process needs only
  its ranks' program files; a NAME ending in '-rppK' runs K ranks per process
  (--ranks-per-process K, WORLD/K processes).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

llc, mpiexec, models, name = sys.argv[1:5]
flags = sys.argv[sys.argv.index("--") + 1:]
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")


CWD = None  # the temporary directory: a failed run's flight recorder dumps stay there


def run(cmd, timeout=240):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=CWD)
    return r.returncode, r.stdout, r.stderr


def fail(msg):
    sys.exit(f"{name}: FAIL: {msg}")


COMMUNICATION = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send", "recv")


def nth_call(plan, rank, k):
    """The plan op that makes `rank`'s k-th communication call of a step (0-based; a synchronous
    plan issues them in its actions' order, an all_reduce one call per buffer): (subroutine, op
    index, loc), read from the program files, independently of the runtime."""
    man = json.load(open(os.path.join(plan, "manifest.json")))
    file = next(p["file"] for p in man["programs"] if rank in p["ranks"])
    prog = json.load(open(os.path.join(plan, file)))
    subs = {s["name"]: s for s in prog["subroutines"]}
    n = 0
    for action in prog["actions"]:
        sub = subs[action["subroutine"]] if isinstance(action["subroutine"], str) else \
            prog["subroutines"][action["subroutine"]]
        for i, op in enumerate(sub["ops"]):
            if op["op"] not in COMMUNICATION:
                continue
            calls = len(op["args"]["x"]) if op["op"] == "all_reduce" else 1
            if n <= k < n + calls:
                return sub["name"], i, op.get("loc", "")
            n += calls
    fail(f"rank {rank} makes fewer than {k + 1} communication calls a step")


with tempfile.TemporaryDirectory() as d:
    CWD = d
    plan = os.path.join(d, "plan")
    model = os.path.join(models, flags[0] + ".json")
    rc, out, err = run([llc, "compile", model, *flags[1:], "-o", plan, "--quiet"])
    if rc:
        fail(f"compile: {err}")
    world = json.load(open(os.path.join(plan, "manifest.json")))["mesh"]
    world = world["dp"] * world["tp"] * world["pp"] * world.get("cp", 1)
    def expect_failure(cmd, what, want):
        """`cmd` must fail (within the timeout: nothing hangs) with `want` in its errors."""
        rc, out, err = run(cmd, timeout=120)
        if rc == 0:
            fail(f"{what} succeeded")
        if want not in err:
            fail(f"no '{want}' in:\n{err}")
        print(f"{name}: ok: exit {rc}: {want}")
        sys.exit(0)

    def copy_of_plan():
        """A copy of the plan for one rank of an MPMD run to differ in: its directory and manifest."""
        other = os.path.join(d, "other")
        shutil.copytree(plan, other)
        return other, json.load(open(os.path.join(other, "manifest.json")))

    def last_rank_runs(other, what, want):
        """Every rank runs the plan but the last, which runs `other`: the job must fail with `want`."""
        expect_failure([mpiexec, "-n", str(world - 1), llc, "run", plan, "--steps", "1", ":",
                        "-n", "1", llc, "run", other, "--steps", "1"], what, want)

    if name == "world-size-mismatch":
        n = world + 1
        expect_failure([mpiexec, "-n", str(n), llc, "run", plan, "--steps", "1"],
                       "a run with the wrong number of processes",
                       f"the launcher started {n} processes but the plan has {world} ranks")
    if name == "world-size-mismatch-rpp2":
        n = world // 2 + 1
        expect_failure([mpiexec, "-n", str(n), llc, "run", plan, "--steps", "1", "--ranks-per-process", "2"],
                       "a run with the wrong number of processes of 2 ranks",
                       f"the launcher started {n} processes of 2 ranks (--ranks-per-process) but the plan "
                       f"has {world} ranks")
    if name == "one-rank-bad-data":
        # MPMD: the last rank alone gets a data file that does not exist; it must name itself and end
        # the job, while the others wait for it in their first collective.
        bad = os.path.join(d, "missing.bin")
        expect_failure([mpiexec, "-n", str(world - 1), llc, "run", plan, "--steps", "2", ":",
                        "-n", "1", llc, "run", plan, "--steps", "2", "--data", bad],
                       "a run where one rank cannot read its data", f"rank {world - 1}: file '{bad}'")
    if name == "plan-mismatch":
        # MPMD: the last rank runs a copy of the plan whose AdamW epsilon differs.
        other, man = copy_of_plan()
        man["optimizer"]["eps"] = man["optimizer"]["eps"] * 2
        json.dump(man, open(os.path.join(other, "manifest.json"), "w"))
        last_rank_runs(other, "a run where one rank has another plan",
                       f"rank {world - 1} loaded another plan than rank 0")
    if name == "program-mismatch":
        # MPMD: the last rank's copy of its program file differs by one byte (valid JSON still).
        other, man = copy_of_plan()
        prog = man["programs"][-1]["file"]
        with open(os.path.join(other, prog), "a") as f:
            f.write(" ")
        last_rank_runs(other, "a run where one rank's program file differs",
                       f"rank {world - 1} loaded another plan than rank 0 ({prog}: fingerprint")
    if name == "one-rank-missing-plan-file":
        # MPMD: the last rank's copy of the plan lacks its stage's program file.
        other, man = copy_of_plan()
        missing = man["programs"][-1]["file"]
        os.remove(os.path.join(other, missing))
        last_rank_runs(other, "a run where one rank's plan lacks a file", missing)
    if name == "one-rank-only-its-stage":
        # MPMD: rank 1 (pipeline stage 0, not rank 0) gets a copy of the plan without the other
        # stage's program: a process reads only its ranks' programs, so the run is the same.
        other, man = copy_of_plan()
        mine = next(p["file"] for p in man["programs"] if 1 in p["ranks"])
        for p in man["programs"]:
            if p["file"] != mine:
                os.remove(os.path.join(other, p["file"]))
        rc, out, err = run([llc, "run", plan, "--steps", "2", "--log-json", f"{d}/threads.json"])
        if rc:
            fail(f"in-process run: {err}")
        rc, out, err = run([mpiexec, "-n", "1", llc, "run", plan, "--steps", "2", ":",
                            "-n", "1", llc, "run", other, "--steps", "2", ":",
                            "-n", str(world - 2), llc, "run", plan, "--steps", "2", "--log-json", f"{d}/mpi.json"])
        if rc:
            fail(f"a run where rank 1 has only its own stage's program failed: {err}")
        a = [json.loads(l)["loss"] for l in open(f"{d}/threads.json")]
        b = [json.loads(l)["loss"] for l in open(f"{d}/mpi.json")]
        if a != b:
            fail(f"losses {b} differ from the in-process run's {a}")
        print(f"{name}: ok: rank 1 ran without {[p['file'] for p in man['programs'] if p['file'] != mine]}: "
              f"losses {b} as in-process")
        sys.exit(0)
    if name in ("fault-stall", "fault-exit") or name.startswith("fault-stall-"):
        # LLCDIST_FAULT: the last rank hangs (or dies) at its 4th communication call of step 1; the
        # job must end within the timeout + 10 s of the fault (the launcher's start-up, which a
        # machine without its host name in /etc/hosts can make seconds slower, is not counted),
        # naming it.
        import threading
        import time
        kind = name.split("-")[1]
        last, call = world - 1, 3
        if name.count("-") == 3:  # fault-stall-rR-opK: rank R hangs at its call K instead
            last, call = int(name.split("-")[2][1:]), int(name.split("-")[3][2:])
        env["LLCDIST_FAULT"] = f"rank:{last},step:1,op:{call},kind:{kind}"
        # (a hung rank: named by the flight recorder's diagnosis, which the first rank to time out
        # prints before it ends the job)
        want = f"root cause: rank {last}" if kind == "stall" else f"LLCDIST_FAULT: rank {last}, step 1"
        flight = os.path.join(d, "flight")
        proc = subprocess.Popen([mpiexec, "-n", str(world), llc, "run", plan, "--steps", "3",
                                 "--comm-timeout", "2", "--flight-dir", flight], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, env=env, cwd=d)
        lines, fault_at = [], []

        def read():
            for line in proc.stderr:
                lines.append(line)
                if "LLCDIST_FAULT:" in line and not fault_at:
                    fault_at.append(time.monotonic())

        reader = threading.Thread(target=read)
        reader.start()
        try:
            rc = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            fail("the job did not end within 120 s")
        ended = time.monotonic()
        reader.join()
        job_rc = rc
        err = "".join(lines)
        if rc == 0:
            fail(f"a run with a {kind} rank succeeded")
        if not fault_at:
            fail(f"the fault was not injected:\n{err}")
        if want not in err:
            fail(f"no '{want}' in:\n{err}")
        dt = ended - fault_at[0]
        if dt > 2 + 10:
            fail(f"the job took {dt:.1f} s after the fault to end (--comm-timeout 2)")
        if kind == "stall":
            # The flight recorder's dumps: `llc-dist diagnose` must name the hung rank and the
            # operation it never reached, the one the plan says is its 4th call of the step, with
            # the compiler's provenance.
            sub, index, loc = nth_call(plan, last, call)
            rc, out, derr = run([llc, "diagnose", flight, "--format", "json"])
            if rc:
                fail(f"diagnose: exit {rc}: {derr}")
            diag = json.loads(out)
            first = diag["blocked"][0]
            if diag["root_causes"] != [last] or first["never_reached"] != [last]:
                fail(f"diagnose blames {diag['root_causes']} / {first['never_reached']}, not rank {last}")
            if (first["subroutine"], first["op_index"], first["loc"], first["step"]) != (sub, index, loc, 1):
                fail(f"diagnose names {first['subroutine']} op {first['op_index']} ({first['loc']}), "
                     f"not the plan's {sub} op {index} ({loc}) in step 1")
            if first["reason"] != loc.split(" @ ")[0] or not first["reason"]:
                fail(f"diagnose's reason '{first['reason']}' is not the op's provenance '{loc}'")
            rc, text, derr = run([llc, "diagnose", flight])
            if rc or f"rank {last} never reached {first['op']}" not in text:
                fail(f"diagnose's text does not say rank {last} never reached the {first['op']}:\n{text}")
            want += f"; diagnose: rank {last} never reached {sub} op {index} ({first['reason']})"
        print(f"{name}: ok: exit {job_rc}, {dt:.1f} s after the fault: {want}")
        sys.exit(0)
    if name.startswith("checkpoint"):
        # Checkpoints under one process per rank (issue #16): every process writes its own ranks'
        # shards into the shared root, rank 0's commits; resumed under mpirun (and in one process)
        # it is the uninterrupted in-process run, bit for bit. '-async': --async-checkpoint.
        per = int(name.rsplit("-rpp", 1)[1]) if "-rpp" in name else 1
        extra = ["--ranks-per-process", str(per)] if per > 1 else []
        save = ["--async-checkpoint"] if "-async" in name else []
        rc, out, err = run([llc, "run", plan, "--steps", "4", "--log-json", f"{d}/ref.json",
                            "--save-params", f"{d}/ref.st"])
        if rc:
            fail(f"in-process run: {err}")
        rc, out, err = run([mpiexec, "-n", str(world // per), llc, "run", plan, "--steps", "4", *extra, *save,
                            "--checkpoint-dir", f"{d}/ck", "--checkpoint-every", "2"])
        if rc:
            fail(f"mpirun with checkpoints: exit {rc}:\n{out}\n{err}")
        step2 = os.path.join(d, "ck", "step-00000002")
        man = json.load(open(os.path.join(step2, "checkpoint.json")))
        files = sorted(f["file"] for f in man["files"])
        if not files or any(f not in os.listdir(step2) for f in files):
            fail(f"checkpoint files {files} vs {os.listdir(step2)}")
        ref = {r["step"]: r["loss"] for r in map(json.loads, open(f"{d}/ref.json")) if "loss" in r}
        for how, cmd in (("mpirun", [mpiexec, "-n", str(world // per), llc, "run", plan, *extra]),
                         ("in-process", [llc, "run", plan])):
            rc, out, err = run([*cmd, "--steps", "4", "--resume", step2, "--log-json", f"{d}/res.json",
                                "--save-params", f"{d}/res.st"])
            if rc:
                fail(f"{how} resume: exit {rc}:\n{out}\n{err}")
            got = {r["step"]: r["loss"] for r in map(json.loads, open(f"{d}/res.json")) if "loss" in r}
            if sorted(got) != [2, 3] or any(got[k] != ref[k] for k in got):
                fail(f"{how} resume: losses {got} vs the uninterrupted {ref}")
            if open(f"{d}/ref.st", "rb").read() != open(f"{d}/res.st", "rb").read():
                fail(f"{how} resume: the final params differ from the uninterrupted run's")
        print(f"{name}: ok: {world // per} processes wrote {len(files)} shard files; resumed under mpirun "
              f"and in one process: losses {[got[k] for k in sorted(got)]} and params as uninterrupted")
        sys.exit(0)
    if name == "fault-delay":
        # A rank slower than the others but within the timeout: the same results.
        env["LLCDIST_FAULT"] = f"rank:{world - 1},step:1,op:2,kind:delay,seconds:0.5"
    steps = "3"
    base = [llc, "run", plan, "--steps", steps]
    rc, out, err = run([*base, "--log-json", f"{d}/threads.json", "--save-params", f"{d}/threads.st"])
    if rc:
        fail(f"in-process run: {err}")
    # NAME ending in -rppK: K ranks per process (--ranks-per-process), world / K processes.
    per = int(name.rsplit("-rpp", 1)[1]) if "-rpp" in name else 1
    extra = ["--ranks-per-process", str(per)] if per > 1 else []
    rc, out, err = run([mpiexec, "-n", str(world // per), *base, *extra, "--log-json", f"{d}/mpi.json",
                        "--save-params", f"{d}/mpi.st"])
    if rc:
        fail(f"mpirun -n {world // per}: exit {rc}:\n{out}\n{err}")
    a = [json.loads(l) for l in open(f"{d}/threads.json")]
    b = [json.loads(l) for l in open(f"{d}/mpi.json")]
    if len(a) != int(steps) or len(b) != len(a):
        fail(f"{len(a)} and {len(b)} log records")
    for x, y in zip(a, b):
        for k in ("step", "loss", "grad_norm", "lr", "memory"):
            if x.get(k) != y.get(k):
                fail(f"step {x['step']}: {k} {x.get(k)} (threads) vs {y.get(k)} (processes)")
    if open(f"{d}/threads.st", "rb").read() != open(f"{d}/mpi.st", "rb").read():
        fail("--save-params files differ")
    print(f"{name}: ok: {world // per} processes of {per} ranks, losses {[x['loss'] for x in b]} and params as in-process")
