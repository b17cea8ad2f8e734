#!/usr/bin/env python3
"""The cost model against published runs: the calibration set and the runs it was not fitted to.

Calibration (fitted to): bench/data/megatron-sc21-table1.csv, every row, as
scripts/fit_cost_model.py predicts it. Validation (not fitted to):
bench/data/published-validation.csv (Korthikanti et al. Table 5 on DGX A100; Llama 3 Table 4 on
H100, its 128K-token context-parallel row included), each row with its paper's setup; what the paper leaves open (the interleaving degree) is
the model's fastest choice. A published configuration ran on its GPUs, so validation rows are
not filtered by llc-dist's memory model (it describes llc-dist's plans, not Megatron-LM's or
Meta's: Llama 3 trained without activation checkpointing where our model of that plan does not
fit 80 GB). Then the paired rows: SC21 Table 1 and Korthikanti Table 5 each ran the 530B and the
1T model with the same tensor/pipeline split, microbatch and recomputation, one year apart; the
published ratio of their per-GPU throughputs against the model's (which sees only the dp
all-reduce differ) measures what no SC21-only fit can see. Prints the tables with the median and
max |error| and writes bench/results/cost-model-validation.json. Targets (issue #15): validation
median <= 5 %, max <= 10 %; a row over says MISS (a target, not a test).

With --simulate, each validation row's chosen configuration is also compiled by llc-dist (with
--scatter-gather-p2p where it applies, as the papers' software ran) and simulated
(llc-dist simulate), and the simulation is set beside the analytic model priced for that same plan
(its attention and memory-bound kernels fused, as llc-dist's plans are): issue #31's target, within 3 % on every row.

  python3 bench/validate_cost_model.py [--build build] [--simulate]
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import fit_cost_model as fit  # noqa: E402

VALIDATION = os.path.join(ROOT, "bench", "data", "published-validation.csv")


def validation_rows():
    with open(VALIDATION) as f:
        return list(csv.DictReader(l for l in f if not l.startswith("#")))


def configs(r):
    tp, pp, cp, gpus = int(r["tp"]), int(r["pp"]), int(r["cp"]), int(r["gpus"])
    layers = int(r["layers"])
    dp = gpus // (tp * pp * cp)
    zero, rc = int(r["zero"]), r["recompute"]
    out = []
    scheds = [("1f1b", 1)] if pp == 1 else [("1f1b", 1)] + [
        ("interleaved", v) for v in (2, 3, 4, 6, 8) if pp * v <= layers]
    for sched, v in scheds:
        out.append({"dp": dp, "tp": tp, "pp": pp, "cp": cp, "cp_impl": "ring", "micro_batch": int(r["micro_batch"]),
                    "virtual_stages": v, "schedule": sched, "recompute": rc,
                    "sequence_parallel": r["sequence_parallel"] == "true", "zero": zero,
                    # Llama 3 / Megatron-LM today overlap the gradient reduction.
                    "grad_bucket": 40000000 if r["source"] == "llama3-t4" else 0})
    return out


def model_path(tmp, r):
    if r["source"] == "llama3-t4":
        return os.path.join(ROOT, "models", "llama3.1-405b.json")
    return fit.gpt_config(tmp, {"hidden": int(r["hidden"]), "layers": int(r["layers"]),
                                "heads": int(r["heads"])})


def causal_share(r):
    """Model FLOPs with attention's causal half over those with it whole (a Llama row)."""
    with open(os.path.join(ROOT, "models", "llama3.1-405b.json")) as f:
        cfg = json.load(f)
    h, L, I, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = h // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * hd
    s = int(r["seq_len"])
    matmul = 2 * (h * (h + 2 * kv) + h * h + 3 * h * I) * L + 2 * h * V  # per token, forward
    attention = 4 * s * h * L
    return (matmul + attention / 2) / (matmul + attention)


def model_flops(r):
    """Korthikanti's model FLOPs per iteration for GPT (72·B·s·l·h²(1 + s/6h + V/12lh))."""
    B, s, l, h, V = int(r["global_batch"]), 2048, int(r["layers"]), int(r["hidden"]), 51200
    return 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))


def paired(cal, vrows, validation):
    """SC21 Table 1 vs Korthikanti Table 5 "full" at the same tp, pp, microbatch and recompute.

    Both count TFLOP/s with Narayanan's formula (the recomputed forward included); the published
    ratio is the year of software between the papers plus the dp all-reduce SC21 also ran."""
    print("\nPaired rows: the same model, split and recomputation in both papers (TFLOP/s/GPU)")
    out = []
    by_name = {(v["source"], v["name"]): v for v in validation}
    for r in vrows:
        if r["source"] != "korthikanti-t5" or r["recompute"] != "full":
            continue
        shape = {"hidden": int(r["hidden"]), "layers": int(r["layers"]),
                 "global_batch": int(r["global_batch"])}
        for e in cal:
            c = e["row"]
            if (c["hidden"], c["layers"], c["tp"], c["pp"]) != (
                    shape["hidden"], shape["layers"], int(r["tp"]), int(r["pp"])):
                continue
            flops = fit.narayanan_flops(shape)
            gpus = int(r["gpus"])
            k_pub = flops / (gpus * float(r["published"])) / 1e12
            v = by_name[(r["source"], r["name"])]
            k_pred = flops / (gpus * v["prediction"]["step_time_s"]) / 1e12
            pub, pred = k_pub / c["tflops_per_gpu"], k_pred / e["predicted_tflops"]
            print("  %-5s tp=%d pp=%-2d  SC21 (dp=%d) %3d, Korthikanti (dp=1) %5.1f: published "
                  "ratio %.3f, model %.3f  (%+.1f %% the model cannot see)"
                  % (r["name"].split()[0], c["tp"], c["pp"], c["gpus"] // (c["tp"] * c["pp"]),
                     c["tflops_per_gpu"], k_pub, pub, pred, 100 * (pub / pred - 1)))
            out.append({"model": r["name"].split()[0], "sc21_tflops": c["tflops_per_gpu"],
                        "korthikanti_tflops": k_pub, "published_ratio": pub,
                        "model_ratio": pred})
    return out


def simulate_row(args, exe, tmp, r, req, best):
    """The analytic step of `best`'s plan (attention and the plan's kernels fused, as compiled) and its simulation."""
    chosen = None
    for c in req["configs"]:
        p = fit.predict(exe, r["device"], r["topology"], [dict(req, configs=[c])])[0]["best"]
        if p and abs(p["step_time_s"] - best["step_time_s"]) <= 1e-12 * best["step_time_s"]:
            chosen = c
            break
    same = fit.predict(exe, r["device"], r["topology"],
                       [dict(req, configs=[chosen], attention="flash", fusion="plan", p2p="scatter_gather",
                             recomputation="read")])[0]["best"]
    plan = os.path.join(tmp, "plan-" + r["source"] + "-" + r["name"].replace(" ", "_"))
    llc = os.path.join(args.build, "bin", "llc-dist")
    subprocess.run([llc, "compile", req["model"], "--dtype", "bf16", "--seq-len", str(req["seq_len"]),
                    "--global-batch", str(req["global_batch"]), "-o", plan, "--quiet"] + same["flags"].split(),
                   check=True)
    out = subprocess.run([llc, "simulate", plan, "--device", r["device"], "--topology", r["topology"],
                          "--format", "json"], check=True, capture_output=True, text=True)
    simulated = json.loads(out.stdout)["predicted"]["step_time_s"]
    return {"flags": same["flags"], "analytic_s": same["step_time_s"], "simulated_s": simulated,
            "gap": simulated / same["step_time_s"] - 1}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--simulate", action="store_true",
                    help="also compile and simulate each validation row's plan (minutes)")
    args = ap.parse_args()
    exe = os.path.join(args.build, "bin", "llcdist-predict")
    report = {"calibration": [], "validation": []}
    with tempfile.TemporaryDirectory() as tmp:
        rows = fit.read_rows()
        paths = [fit.gpt_config(tmp, r) for r in rows]
        cal = fit.evaluate(exe, rows, paths, None)
        print("Calibration (fitted to): Narayanan et al. SC21 Table 1, DGX A100")
        for e in cal:
            r = e["row"]
            print("  %7.1fB tp=%d pp=%-2d GPUs=%-4d published %3d TFLOP/s/GPU, predicted %5.1f  %+5.1f %%"
                  % (r["params_billion"], r["tp"], r["pp"], r["gpus"], r["tflops_per_gpu"],
                     e["predicted_tflops"], 100 * e["error"]))
            report["calibration"].append({"row": r, "error": e["error"],
                                          "predicted_tflops": e["predicted_tflops"],
                                          "chosen": e["best"]["config"]})
        cerr = [abs(e["error"]) * 100 for e in cal]
        print("  median |error| %.1f %%, max %.1f %%" % (statistics.median(cerr), max(cerr)))

        vrows = validation_rows()
        errs = []
        print("\nValidation (not fitted to)")
        for r in vrows:
            req = {"model": model_path(tmp, r), "global_batch": int(r["global_batch"]),
                   "seq_len": int(r["seq_len"]), "dtype": "bf16",
                   "attention": r["attention"], "fusion": "none", "configs": configs(r),
                   # Megatron-LM's scatter/gather pipeline sends (both papers' software).
                   "p2p": "megatron",
                   # Megatron-LM's full recomputation reruns the layer's whole forward.
                   "recomputation": "whole",
                   # The published run fit its GPUs: our memory model (of llc-dist's
                   # plans) does not get to rule its configuration out.
                   "memory_filter": False}
            pred = fit.predict(exe, r["device"], r["topology"], [req])[0]
            best = pred["best"]
            if best is None:
                print("  %-16s %-22s no configuration fits" % (r["source"], r["name"]))
                errs.append(float("inf"))
                continue
            if r["metric"] == "iteration_s":
                published = float(r["published"])
                predicted = best["step_time_s"]
                err = predicted / published - 1
                shown = "published %.2f s, predicted %.2f s" % (published, predicted)
                mfu = model_flops(r) / (int(r["gpus"]) * 312e12 * predicted)
                shown += " (MFU %.1f %%)" % (100 * mfu)
            else:
                # TFLOP/s per GPU: the model FLOPs of the step over the GPUs and the time.
                published = float(r["published"])
                tflops = best["mfu"] * 989.0  # H100 SXM dense bf16 peak (devices/h100-80gb.json)
                err = published / tflops - 1  # as a step-time error
                shown = "published %d TFLOP/s/GPU, predicted %.0f" % (published, tflops)
                if int(r["seq_len"]) > 8192:
                    # Model FLOPs count attention's QKᵀ and PV whole (the papers' convention, and
                    # StepModel's); at 128K tokens they are most of the step, and a count of the
                    # causal half only (what the kernels run) is 30 % lower.
                    shown += " (%.0f counting attention's causal half)" % (tflops * causal_share(r))
            errs.append(abs(err) * 100)
            mark = "" if abs(err) <= 0.10 else "  MISS (> 10 %)"
            print("  %-15s %-22s %s  %+5.1f %%  [%s, %s]%s" % (r["source"], r["name"], shown,
                                                           100 * err, best["config"],
                                                           best["bound"], mark))
            entry = {"source": r["source"], "name": r["name"], "error": err, "chosen": best["config"],
                     "prediction": best}
            if args.simulate:
                sim = simulate_row(args, exe, tmp, r, req, best)
                print("  %-15s %-22s the plan simulated %.2f s, analytic (same plan) %.2f s: %+.1f %%%s"
                      % ("", "", sim["simulated_s"], sim["analytic_s"], 100 * sim["gap"],
                         "" if abs(sim["gap"]) <= 0.03 else "  MISS (> 3 %)"))
                entry["simulated"] = sim
            report["validation"].append(entry)
        med, mx = statistics.median(errs), max(errs)
        print("  median |error| %.1f %% (target <= 5 %%), max %.1f %% (target <= 10 %%)%s"
              % (med, mx, "" if med <= 5 and mx <= 10 else "  MISS"))
        report["validation_median_pct"], report["validation_max_pct"] = med, mx
        report["paired"] = paired(cal, vrows, report["validation"])
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "cost-model-validation.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
