#!/usr/bin/env python3
"""The simulator (llc-dist simulate) against the CPU runtime's measured trace.

Compiles tiny plans that differ in one knob (pipeline schedule; gradient
buckets), runs each on the CPU backend with `llc-dist run --trace`, and
simulates each with a synthetic CPU-like device and an in-process
"topology" (unittests/Cost/Inputs/cpu-synthetic.json, cpu-node.json). It
reports, per group of plans, the measured and the predicted step times,
both orderings, and the communication each hides (measured: time on the
communication queues minus the compute lane's blocked waits; predicted:
comm.*.overlapped_s).

The measured step times are noisy on a small shared machine (threads of one
process on 2 cores: the same plan's step varies by up to 30 % between runs),
so their order is a benchmark to read, not a test: it prints "ORDER AGREES" /
"ORDER DIFFERS" per group, and only counts a pair whose measured times differ
by more than --min-ratio. The schedule-bubble group (2 microbatches on 2
stages) is a test of the pipeline bubble itself: the measured bubble fraction
of a step (1 - the ranks' mean compute-lane busy time / the step's span; a
uniform slow-down of the machine leaves it as it is; a thread preempted between
kernels adds idle time, one preempted inside a kernel busy time, so each plan
keeps the median over the rounds) against the
simulator's `bubble_fraction`. With --check-order it exits 1 unless every
pair the simulation puts more than 25 % apart has its measured bubbles in
that order (ctest cost-model.simulator-orders-schedules). Whether a plan hides
communication at all is not noise: with --check-hidden it exits 1 unless the
simulation hides communication in exactly the plans whose measured trace does
(ctest cost-model.simulator-hides-what-the-runtime-hides).

    python3 bench/simulate_vs_measured.py [--build build] [--steps 6]
"""
import argparse
import bisect
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INPUTS = os.path.join(ROOT, "unittests", "Cost", "Inputs")

# A Llama of the tiny one's family, big enough that a microbatch's compute
# (not the runtime's per-op overhead) sets the step: the bubble group's model.
BUBBLE_MODEL = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 8,
                "max_position_embeddings": 128, "num_attention_heads": 8,
                "num_key_value_heads": 4}

# name -> (model, plans, check_order). A checked group's orderings are a test
# (--check-order): 2 microbatches on 2 stages put a third of a GPipe or 1F1B
# step in the bubble ((p-1)/(m+p-1)), a fifth with v=2 and a ninth with v=4:
# 15-30 % apart, far beyond the noise.
GROUPS = {
    "schedule (tiny-llama pp=2, 8 microbatches)": ("tiny-llama", [
        ("gpipe", "--mesh pp=2 --global-batch 8 --schedule gpipe"),
        ("1f1b", "--mesh pp=2 --global-batch 8 --schedule 1f1b"),
        ("interleaved v=2", "--mesh pp=2 --global-batch 8 --schedule interleaved "
                            "--virtual-stages 2"),
    ], False),
    "schedule bubble (llama h=256, 8 layers, pp=2, 2 microbatches)": ("bubble", [
        ("gpipe", "--mesh pp=2 --global-batch 2 --seq-len 64 --schedule gpipe"),
        ("1f1b", "--mesh pp=2 --global-batch 2 --seq-len 64 --schedule 1f1b"),
        ("interleaved v=2", "--mesh pp=2 --global-batch 2 --seq-len 64 --schedule interleaved "
                            "--virtual-stages 2"),
        ("interleaved v=4", "--mesh pp=2 --global-batch 2 --seq-len 64 --schedule interleaved "
                            "--virtual-stages 4"),
    ], True),
    "gradient buckets (tiny-llama dp=2)": ("tiny-llama", [
        ("no buckets", "--mesh dp=2 --global-batch 4"),
        ("buckets 4000", "--mesh dp=2 --global-batch 4 --grad-bucket-size 4000"),
    ], False),
}


def model_file(tmp, name):
    path = os.path.join(ROOT, "models", "tiny-llama.json")
    if name == "tiny-llama":
        return path
    with open(path) as f:
        config = json.load(f)
    config.update(BUBBLE_MODEL)
    out = os.path.join(tmp, name + ".json")
    with open(out, "w") as f:
        json.dump(config, f)
    return out


# --check-order compares the pairs whose predicted bubble fractions are more than this far apart.
ORDER_RATIO = 1.25


def order_errors(rows):
    """The pairs whose predicted bubble fractions differ by more than ORDER_RATIO: how many,
    and those whose measured bubbles are the other way round."""
    checked, errors = 0, []
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            small, big = sorted((a, b), key=lambda r: r["predicted_bubble_fraction"])
            if big["predicted_bubble_fraction"] < ORDER_RATIO * small["predicted_bubble_fraction"]:
                continue
            checked += 1
            if small["measured_bubble_fraction"] >= big["measured_bubble_fraction"]:
                errors.append("%s (bubble predicted %.3f, measured %.3f) vs %s (%.3f, %.3f)"
                              % (small["plan"], small["predicted_bubble_fraction"],
                                 small["measured_bubble_fraction"], big["plan"],
                                 big["predicted_bubble_fraction"], big["measured_bubble_fraction"]))
    return checked, errors


def measured(trace_path, warmup):
    """Median step time (s) over steps >= warmup, the hidden comm (s/step), and the median
    bubble fraction (1 - the ranks' mean compute-lane kernel time / the step's span)."""
    with open(trace_path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = {}
    for e in events:
        s = e["args"]["step"]
        lo, hi = steps.get(s, (float("inf"), 0.0))
        steps[s] = (min(lo, e["ts"]), max(hi, e["ts"] + e["dur"]))
    kept = [hi - lo for s, (lo, hi) in steps.items() if s >= warmup] or \
           [hi - lo for lo, hi in steps.values()]
    busy = {}  # (step, rank) -> compute-lane kernel time
    for e in events:
        if e["tid"] == 0 and e["name"] != "wait":
            key = (e["args"]["step"], e["pid"])
            busy[key] = busy.get(key, 0.0) + e["dur"]
    bubbles = []
    for s, (lo, hi) in steps.items():
        ranks = [t for (bs, _), t in busy.items() if bs == s]
        if (s >= warmup or len(steps) <= warmup) and ranks and hi > lo:
            bubbles.append(1.0 - statistics.mean(ranks) / (hi - lo))
    nsteps = max(1, len([s for s in steps if s >= warmup]))
    # Hidden communication: the part of each communication interval (any
    # lane >= 1) during which its rank's compute lane ran a kernel.
    # Synchronous communication never overlaps a kernel of its rank.
    hidden = 0.0
    by_rank = {}
    for e in events:
        if e["args"]["step"] >= warmup:
            by_rank.setdefault(e["pid"], []).append(e)
    for evs in by_rank.values():
        kernels = sorted((e["ts"], e["ts"] + e["dur"]) for e in evs
                         if e["tid"] == 0 and e["name"] != "wait")
        starts = [k[0] for k in kernels]
        for c in evs:
            if c["tid"] < 1:
                continue
            lo, hi = c["ts"], c["ts"] + c["dur"]
            i = max(0, bisect.bisect_right(starts, lo) - 1)
            while i < len(kernels) and kernels[i][0] < hi:
                hidden += max(0.0, min(hi, kernels[i][1]) - max(lo, kernels[i][0]))
                i += 1
    return (statistics.median(kept) * 1e-6, hidden * 1e-6 / nsteps,
            statistics.median(bubbles) if bubbles else 0.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3,
                    help="runs of each plan, round-robin; each keeps its fastest median step "
                         "and the median of its bubbles")
    ap.add_argument("--min-ratio", type=float, default=1.10,
                    help="compare the order of two plans only when their measured "
                         "step times differ by more than this factor")
    ap.add_argument("--check-order", action="store_true",
                    help="exit 1 unless, in the checked groups (the schedule bubble), every "
                         "pair of plans whose bubble fractions the simulation predicts more than "
                         "25%% apart has its measured bubbles in that order (ctest "
                         "cost-model.simulator-orders-schedules)")
    ap.add_argument("--check-hidden", action="store_true",
                    help="exit 1 unless every plan hides communication in the simulation "
                         "exactly when its measured trace does (ctest "
                         "cost-model.simulator-hides-what-the-runtime-hides)")
    args = ap.parse_args()
    mismatches, disorders, checked_pairs = [], [], 0
    tool = os.path.join(args.build, "bin", "llc-dist")
    device = os.path.join(INPUTS, "cpu-synthetic.json")
    topology = os.path.join(INPUTS, "cpu-node.json")
    env = dict(os.environ, LLCDIST_BACKEND="cpu")
    report = {}
    with tempfile.TemporaryDirectory() as tmp:
        for gi, (group, (model_name, plans, check_order)) in enumerate(GROUPS.items()):
            model = model_file(tmp, model_name)
            dirs = []
            for name, flags in plans:
                plan = os.path.join(tmp, "%d-%s" % (gi, name.replace(" ", "_").replace("=", "")))
                subprocess.run([tool, "compile", model, *flags.split(), "-o", plan, "--quiet"],
                               check=True)
                dirs.append(plan)
            # Round-robin repeats: a burst of load on the machine slows one round of
            # every plan, not every round of one; each plan keeps its fastest round.
            runs = {plan: [] for plan in dirs}
            for rep in range(args.repeats):
                for plan in dirs:
                    tdir = "%s.trace%d" % (plan, rep)
                    os.makedirs(tdir)
                    subprocess.run([tool, "run", plan, "--steps", str(args.steps), "--trace",
                                    tdir, "--backend", "cpu"], check=True, env=env,
                                   stdout=subprocess.DEVNULL)
                    runs[plan].append(measured(os.path.join(tdir, "trace.json"), args.warmup))
            rows = []
            for (name, _), plan in zip(plans, dirs):
                m_step, m_hidden, _ = min(runs[plan])
                m_bubble = statistics.median(r[2] for r in runs[plan])
                sim = json.loads(subprocess.run(
                    [tool, "simulate", plan, "--device", device, "--topology", topology,
                     "--format", "json"], check=True, capture_output=True, text=True).stdout)
                p = sim["predicted"]
                p_hidden = sum(c["overlapped_s"] for c in p["comm"].values())
                rows.append({"plan": name, "measured_step_s": m_step,
                             "predicted_step_s": p["step_time_s"],
                             "measured_hidden_comm_s": m_hidden,
                             "predicted_hidden_comm_s": p_hidden,
                             "measured_bubble_fraction": m_bubble,
                             "predicted_bubble_fraction": p["bubble_fraction"]})
            print(f"== {group}")
            print(f"  {'plan':<18}{'measured':>12}{'predicted':>12}{'hidden meas.':>14}"
                  f"{'hidden pred.':>14}{'bubble meas.':>14}{'bubble pred.':>14}")
            for r in rows:
                print(f"  {r['plan']:<18}{r['measured_step_s'] * 1e3:>10.2f}ms"
                      f"{r['predicted_step_s'] * 1e3:>10.2f}ms"
                      f"{r['measured_hidden_comm_s'] * 1e3:>12.3f}ms"
                      f"{r['predicted_hidden_comm_s'] * 1e3:>12.3f}ms"
                      f"{r['measured_bubble_fraction']:>14.3f}{r['predicted_bubble_fraction']:>14.3f}")
            agree, compared = 0, 0
            for i in range(len(rows)):
                for j in range(i + 1, len(rows)):
                    a, b = rows[i], rows[j]
                    hi, lo = max(a["measured_step_s"], b["measured_step_s"]), \
                        min(a["measured_step_s"], b["measured_step_s"])
                    if hi < args.min_ratio * lo:
                        continue
                    compared += 1
                    agree += (a["measured_step_s"] < b["measured_step_s"]) == \
                             (a["predicted_step_s"] < b["predicted_step_s"])
            meas = " < ".join(r["plan"] for r in sorted(rows, key=lambda r: r["measured_step_s"]))
            pred = " < ".join(r["plan"] for r in sorted(rows, key=lambda r: r["predicted_step_s"]))
            print(f"  measured order:  {meas}\n  predicted order: {pred}")
            verdict = "ORDER AGREES" if agree == compared else "ORDER DIFFERS"
            print(f"  {verdict} on {agree}/{compared} pairs differing by > "
                  f"{(args.min_ratio - 1) * 100:.0f}% measured")
            report[group] = {"rows": rows, "pairs_compared": compared, "pairs_agree": agree}
            if check_order:
                checked, errors = order_errors(rows)
                checked_pairs += checked
                disorders += ["%s: %s" % (group, e) for e in errors]
            for r in rows:
                # Hidden: more than 0.1 ms per step (a synchronous plan hides none).
                if (r["measured_hidden_comm_s"] > 1e-4) != (r["predicted_hidden_comm_s"] > 1e-4):
                    mismatches.append(r["plan"])
    print(json.dumps(report, indent=1) if os.environ.get("LLCDIST_BENCH_JSON") else "", end="")
    if args.check_order:
        if disorders or checked_pairs < 4:
            print("ORDER CHECK FAILED (%d pairs of bubbles predicted > %.0f%% apart): %s"
                  % (checked_pairs, (ORDER_RATIO - 1) * 100,
                     "; ".join(disorders) or "too few pairs"))
            return 1
        print("ORDER CHECK PASSED: the %d pairs of bubbles predicted > %.0f%% apart are measured in "
              "the predicted order" % (checked_pairs, (ORDER_RATIO - 1) * 100))
    if args.check_hidden:
        if mismatches:
            print("HIDDEN DIFFERS: " + ", ".join(mismatches))
            return 1
        print("HIDDEN AGREES: the simulation hides communication exactly where the run does")
    return 0


if __name__ == "__main__":
    sys.exit(main())
