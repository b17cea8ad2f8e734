#!/usr/bin/env python3
"""llc-dist's training steps beside the same model in PyTorch (the GPU check, docs/gpu.md).

  torch_parity.py NAME --config CONFIG.json --plan PLAN --init INIT.safetensors --data DATA.bin
                  --log LLCDIST.jsonl [--device cuda|cpu] [--autocast bf16|off]
                  [--loss-rtol R] [--grad-rtol R]
  torch_parity.py --suite CASES.json [--root DIR] [--logs LOGDIR]

PLAN is the compiled plan llc-dist ran (its manifest gives the batch, optimizer, schedule and
clipping), INIT the parameters it started from (`llcdist-run PLAN --steps 0 --save-params`), DATA
the token file it read (shuffle off), LOG its --log-json. The model (bench/gpu/torch_model.py:
Hugging Face's GPT-2 / Llama with SDPA) loads INIT and trains len(LOG) steps on --device, under
torch.autocast(bfloat16) with --autocast bf16 (f32 master weights, torch.optim's AdamW: PyTorch's
own mixed precision). Compared with LOG: every step's loss, |torch - llc-dist| <= loss-rtol ·
|torch|, and the gradient norms (before clipping) by the median over the steps of
|torch - llc-dist| / |torch| <= grad-rtol (one step's norm is sensitive to the trajectory: a spike
in one run can be absent from the other once two bf16 runs drift apart).

Prints one line per case, PASS / FAIL / SKIP torch NAME: ... (every step's numbers on FAIL), and
exits 1 if a case failed (SKIP: no torch, or no CUDA device in it). --suite takes a JSON list of
cases {name, config, plan, init, data, log, device, autocast, loss_rtol, grad_rtol}, paths
relative to --root, a log starting with "LOGS/" relative to --logs: one PyTorch import for all. A
case with "log_from_run" whose log is missing (the golden check did not run) gets it from --runner:
`RUNNER PLAN --backend cuda --steps STEPS --data DATA --seed SEED --log-json LOG`.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def check(case):
    """(line, ok) for one case (a dict of the CLI's fields)."""
    tag = f"torch {case['name']}"
    try:
        import torch
        import torch_model as tm
    except ImportError as e:
        return f"SKIP {tag}: PyTorch cannot be imported ({e})", True
    device = case.get("device", "cuda")
    if device.startswith("cuda") and not torch.cuda.is_available():
        return f"SKIP {tag}: torch {torch.__version__} sees no CUDA device", True
    if not os.path.exists(case["log"]) and case.get("runner"):
        # No llc-dist run to compare with yet (the golden check did not run): make it.
        cmd = [case["runner"], case["plan"], "--backend", "cuda", "--steps", str(case.get("steps", 10)), "--data",
               case["data"], "--seed", str(case.get("seed", 1)), "--log-json", case["log"], "--quiet"]
        os.makedirs(os.path.dirname(os.path.abspath(case["log"])), exist_ok=True)
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            body = [l for l in p.stdout.splitlines() if l.strip()][-10:]
            return f"FAIL {tag}: llc-dist's run failed (exit {p.returncode})" + "".join(f"\n  | {l}" for l in body), False
    try:
        log = [json.loads(l) for l in open(case["log"]) if l.strip()]
        log = [r for r in log if "loss" in r]
    except (OSError, ValueError) as e:
        return f"FAIL {tag}: no llc-dist log to compare with ({e})", False
    if not log:
        return f"FAIL {tag}: {case['log']} holds no step record", False
    t0 = time.time()
    torch.manual_seed(0)
    if device == "cpu":
        torch.set_num_threads(1)  # as test/reference/hf_parity.py: small ops, shared machines
    else:  # the f32 reference on the GPU: no TF32 anywhere (llc-dist's f32 GEMMs do not use it)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    try:
        cfg = json.load(open(case["config"]))
        man = json.load(open(os.path.join(case["plan"], "manifest.json")))
        if man["batch"]["dp"] != 1 or man["mesh"].get("tp", 1) != 1 or man["mesh"].get("pp", 1) != 1:
            return f"FAIL {tag}: the comparison takes a one-rank plan (mesh {man['mesh']})", False
        model = tm.build(cfg)
        tm.load(model, tm.read_safetensors(case["init"]))
        model.to(device)
        opt = tm.make_optimizer(model, man, fused=device.startswith("cuda"))
        tokens = tm.read_tokens(case["data"])
        amp = torch.bfloat16 if case.get("autocast", "bf16") == "bf16" else None
        errs = {"loss": [], "grad_norm": []}
        rows = []
        for step, rec in enumerate(log):
            loss, norm = tm.train_step(model, opt, man, tokens, step, len(log), device, amp)
            ours = {"loss": float(loss), "grad_norm": float(norm)}
            rows.append(f"step {step} loss torch {ours['loss']:.6f} llc-dist {rec.get('loss')}, "
                        f"grad norm torch {ours['grad_norm']:.6f} llc-dist {rec.get('grad_norm')}")
            for key in errs:
                theirs = rec.get(key)  # None: a non-finite number in the log
                errs[key].append(float("inf") if theirs is None else
                                 abs(ours[key] - theirs) / max(abs(ours[key]), 1e-3))
    except Exception as e:  # noqa: BLE001 - reported as the case's failure, the others still run
        return f"FAIL {tag}: {type(e).__name__}: {str(e)[:300]}", False
    loss_rtol, grad_rtol = case.get("loss_rtol", 5e-3), case.get("grad_rtol", 2e-2)
    loss_max, grad_med = max(errs["loss"]), statistics.median(errs["grad_norm"])
    ok = loss_max <= loss_rtol and grad_med <= grad_rtol
    where = f"{'bf16 autocast' if amp else 'f32'} on {device}, torch {torch.__version__}"
    msg = (f"{len(log)} steps ({where}, {time.time() - t0:.0f} s): relative difference of the loss max "
           f"{loss_max:.1e} (tolerance {loss_rtol:.0e}), of the grad norm median {grad_med:.1e} "
           f"(tolerance {grad_rtol:.0e}), max {max(errs['grad_norm']):.1e}")
    if not ok:
        return f"FAIL {tag}: {msg}" + "".join(f"\n  | {r}" for r in rows), False
    return f"PASS {tag}: {msg}", True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("name", nargs="?")
    for a in ("--config", "--plan", "--init", "--data", "--log"):
        ap.add_argument(a)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--autocast", choices=["bf16", "off"], default="bf16")
    ap.add_argument("--loss-rtol", type=float, default=5e-3)
    ap.add_argument("--grad-rtol", type=float, default=2e-2)
    ap.add_argument("--suite", help="a JSON list of cases")
    ap.add_argument("--root", default=".", help="--suite: the directory its paths are relative to")
    ap.add_argument("--logs", default=".", help="--suite: the directory of logs named LOGS/...")
    ap.add_argument("--runner", default=None,
                    help="--suite: llcdist-run, to make a missing LOGS/ log (--backend cuda) when no run made it")
    args = ap.parse_args()
    if args.suite:
        cases = json.load(open(args.suite))
        for c in cases:
            for k in ("config", "plan", "init", "data", "log"):
                v = c[k]
                c[k] = os.path.join(args.logs, v[5:]) if v.startswith("LOGS/") else os.path.join(args.root, v)
            if c.get("log_from_run") and args.runner:
                c["runner"] = args.runner
    else:
        missing = [a for a in ("name", "config", "plan", "init", "data", "log") if getattr(args, a) is None]
        if missing:
            ap.error("missing " + ", ".join(missing))
        cases = [{"name": args.name, "config": args.config, "plan": args.plan, "init": args.init,
                  "data": args.data, "log": args.log, "device": args.device, "autocast": args.autocast,
                  "loss_rtol": args.loss_rtol, "grad_rtol": args.grad_rtol}]
    bad = 0
    for c in cases:
        line, ok = check(c)
        print(line, flush=True)
        bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
