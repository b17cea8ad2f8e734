#!/usr/bin/env python3
"""GPU training step: llc-dist's CUDA backend beside PyTorch eager and torch.compile, same GPU, same run.

For GPT-2 124M (models/gpt2.json, micro-batch 8 × 1024 tokens) and Llama-3.2-1B
(models/llama3.2-1b.json, 4 × 2048), bf16 mixed precision, AdamW, global-norm clipping, one rank
and one microbatch (global batch = micro-batch):

  llc-dist         `llcdist-run PLAN --backend cuda --steps N --data synthetic --log-json`: the
                   median ms/step and tokens/s of the steps after --warmup (the log's tokens_per_s),
                   MFU = training FLOPs/token (`llc-dist info`) × tokens/s / the device's dense bf16
                   peak (the devices/ file of the GPU nvidia-smi names: h100-80gb.json for an H100,
                   h200.json for an H200 and where it names none), the peak device memory the
                   runner logs;
  pytorch-eager    the same model (bench/gpu/torch_model.py: Hugging Face's GPT-2 / Llama with
                   SDPA), batch and optimizer (torch.optim.AdamW(fused=True), the plan's
                   hyper-parameters and weight-decay groups, clip_grad_norm_) under
                   torch.autocast(bfloat16), f32 parameters; each in its own process, timed the
                   same way (synchronized steps, median after the warm-up), with
                   torch.cuda.max_memory_allocated / max_memory_reserved;
  pytorch-compile  the same with the model's forward (and loss) under torch.compile;
  llc-dist-no-graphs  llc-dist again with `--cuda-graphs off` (every step op by op, no CUDA graph),
                   last: the INFO line "graphs" says what the recorded step bought.

For every run, the GPU's memory in use (nvidia-smi, sampled every 100 ms) above what it was before
the run is reported too: the process's whole footprint (CUDA context and library workspaces
included), the one figure measured the same way for both. Prints INFO lines per run and the
issue's target per model as a PASS / FAIL line: llc-dist tokens/s >= PyTorch eager's (the ratio to
torch.compile beside it; bench/README.md). --json writes every number.

  bench/gpu_step.py --dir DIR --runner RUNNER     the prepared check (scripts/test-gpu.sh --prepare
                                                  DIR: plans/bench/, info/, models/, devices/)
  bench/gpu_step.py [--build build]               in place: compiles the plans with
                                                  BUILD/bin/llc-dist, runs them with `llc-dist run`
Options: --models gpt2,llama3.2-1b  --steps 8 --warmup 3  --budget SECONDS  --skip-compile
         --cases MODEL=MBxSEQ,.. (in place)  --backend cpu --torch-device cpu (the CPU smoke test).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GiB = float(1 << 30)

# model -> (micro-batch, seq-len); the plans' compile flags (scripts/gpu_prepare.py compiles them too).
CASES = {"gpt2": (8, 1024), "llama3.2-1b": (4, 2048)}
COMPILE_FLAGS = ["--dtype", "bf16", "--optimizer", "adamw", "--lr", "3e-4", "--weight-decay", "0.1",
                 "--grad-clip", "1.0"]
# What the issue measured on an H200 (PyTorch 2.11 eager: SDPA, fused AdamW; and torch.compile):
# tokens/s and peak memory (GiB). Printed beside today's numbers; the target compares with the
# eager run of the same check, these only when that run failed.
REFERENCE = {"gpt2": {"eager": (207e3, 8.87), "compile": (393e3, 6.57)},
             "llama3.2-1b": {"eager": (55.8e3, 40.28), "compile": (68.1e3, 28.95)}}


def parse_cases(spec):
    """"gpt2=8x1024,llama3.2-1b=4x2048" -> {model: (micro-batch, seq-len)}."""
    out = {}
    for item in filter(None, spec.split(",")):
        model, shape = item.split("=")
        mb, seq = shape.lower().split("x")
        out[model] = (int(mb), int(seq))
    return out


def compile_flags(model, cases=None):
    mb, seq = (cases or CASES)[model]
    return ["--seq-len", str(seq), "--micro-batch", str(mb), "--global-batch", str(mb), *COMPILE_FLAGS]


def tail(text, lines=12):
    """The output's last lines as "  | " lines (its first 3 too when longer: a usage error's message
    comes before the help text)."""
    body = [l for l in (text or "").strip().splitlines() if l.strip()]
    if len(body) > lines:
        body = body[:3] + [f"... ({len(body) - lines} lines)"] + body[-(lines - 3):]
    return "".join(f"\n  | {l[:300]}" for l in body)


def gpu_name():
    """nvidia-smi's name of GPU 0 ("NVIDIA H100 80GB HBM3"), or "" without one."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                             capture_output=True, text=True, timeout=30).stdout
        return out.strip().splitlines()[0].strip() if out.strip() else ""
    except (OSError, IndexError, subprocess.SubprocessError):
        return ""


# nvidia-smi's name -> the devices/ file (the first match; an A100's memory decides which of two).
DEVICE_FILES = [("H200", "h200.json"), ("H100", "h100-80gb.json"), ("A100-SXM4-40GB", "a100-40gb.json"),
                ("A100 40GB", "a100-40gb.json"), ("A100", "a100-80gb.json")]


def device_file_for(name, devices_dir):
    """The devices/ file for GPU `name`: its peak prices MFU. H200 (the issue's card) where the name
    matches none, or where the matching file is not in devices_dir."""
    for key, file in DEVICE_FILES:
        if key in name and os.path.exists(os.path.join(devices_dir, file)):
            return os.path.join(devices_dir, file)
    return os.path.join(devices_dir, "h200.json")


class GpuMemory:
    """The GPU's memory.used (MiB, nvidia-smi), sampled every 100 ms while open: peak - baseline."""

    def __init__(self):
        self.base = self.peak = None
        self.proc = None

    def __enter__(self):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                                  "-i", "0"], capture_output=True, text=True, timeout=30).stdout
            self.base = self.peak = float(out.split()[0])
            self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                                          "-i", "0", "-lms", "100"], stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, text=True)
            threading.Thread(target=self._read, daemon=True).start()
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            self.proc = None
        return self

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.peak = max(self.peak, float(line.strip()))
            except ValueError:
                pass

    def __exit__(self, *exc):
        if self.proc:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def gib(self):
        return None if self.base is None else (self.peak - self.base) / 1024.0


def run_cmd(cmd, timeout, env=None):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                           env=env)
        return p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, out + f"\n(killed after {timeout:.0f} s)"
    except OSError as e:
        return 127, str(e)


def peak_device_bytes(mem):
    """(bytes, what) from the last log record's "memory": the runner's peak device bytes when it logs
    them (peak_device_bytes: a number or one per rank), else the largest arena (a lower bound)."""
    if not isinstance(mem, dict):
        return None, "not logged"
    for key in ("peak_device_bytes", "device_peak_bytes"):
        v = mem.get(key)
        if v is not None:
            return (max(v) if isinstance(v, list) else v), "peak device bytes"
    if mem.get("arena_bytes"):
        return max(mem["arena_bytes"]), "arena only; the log has no peak_device_bytes"
    return None, "not logged"


def llcdist_run(runner, plan, steps, warmup, timeout, tmp, name, backend="cuda", extra=()):
    """A dict of the llc-dist run's numbers, or raises RuntimeError with the output's tail."""
    log = os.path.join(tmp, name + ".jsonl")
    cmd = [*runner, plan, "--backend", backend, "--steps", str(steps), "--data", "synthetic", "--seed", "1",
           "--log-json", log, "--quiet", *extra]
    t0 = time.time()
    with GpuMemory() as gm:
        rc, out = run_cmd(cmd, timeout)
    if rc != 0:
        why = "timed out" if rc == 124 else f"exit {rc}"
        raise RuntimeError(f"{os.path.basename(cmd[0])} {' '.join(cmd[1:])}: {why} after "
                           f"{time.time() - t0:.0f} s{tail(out)}")
    recs = [json.loads(l) for l in open(log) if l.strip()]
    recs = [r for r in recs if "loss" in r]
    timed = [r["tokens_per_s"] for r in recs[warmup:] if r.get("tokens_per_s")]
    if not timed:
        raise RuntimeError(f"{len(recs)} step records, none after {warmup} warm-up steps")
    mem, what = peak_device_bytes(recs[-1].get("memory"))
    return {"tokens_per_s": statistics.median(timed), "steps_timed": len(timed), "wall_s": time.time() - t0,
            "peak_bytes": mem, "peak_what": what, "smi_gib": gm.gib(),
            "losses": [r.get("loss") for r in recs]}


def torch_run(config, plan, variant, steps, warmup, timeout, tmp, name, device="cuda"):
    out_json = os.path.join(tmp, f"{name}-{variant}.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", variant, "--config", config,
           "--plan", plan, "--steps", str(steps), "--warmup", str(warmup), "--json", out_json,
           "--torch-device", device]
    t0 = time.time()
    with GpuMemory() as gm:
        rc, out = run_cmd(cmd, timeout)
    if rc != 0 or not os.path.exists(out_json):
        raise RuntimeError(f"{'timed out' if rc == 124 else f'exit {rc}'} after {time.time() - t0:.0f} s{tail(out)}")
    r = json.load(open(out_json))
    r["smi_gib"] = gm.gib()
    r["wall_s"] = time.time() - t0
    return r


def torch_worker(args):
    """One PyTorch run (a process of its own: clean peak-memory counters, a timeout that can kill it)."""
    try:
        import torch
    except ImportError as e:
        raise SystemExit(f"PyTorch cannot be imported ({e})")
    sys.path.insert(0, os.path.join(HERE, "gpu"))
    import torch_model as tm
    dev = torch.device(args.torch_device)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit(f"torch {torch.__version__} sees no CUDA device")
    cfg = json.load(open(args.config))
    man = json.load(open(os.path.join(args.plan, "manifest.json")))
    mb, seq = man["batch"]["micro_batch"], man["batch"]["seq_len"]
    if cuda:
        with dev:  # parameters made on the device (torch >= 2.0), not on the host and copied
            model = tm.build(cfg)
    else:
        model = tm.build(cfg)
    tm.init_normal(model)
    opt = tm.make_optimizer(model, man, fused=cuda)
    fwd = torch.compile(model) if args.torch_worker == "compile" else model
    g = torch.Generator(device=dev).manual_seed(1)
    ids = torch.randint(0, cfg["vocab_size"], (mb, seq + 1), device=dev, generator=g)
    batch = lambda j: (ids[:, :-1], ids[:, 1:])
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times, losses, first = [], [], None
    for step in range(args.steps):
        sync()
        t0 = time.perf_counter()
        loss, _ = tm.train_step(model, opt, man, batch, step, args.steps, dev, torch.bfloat16, fwd=fwd)
        losses.append(float(loss))  # synchronizes, as llc-dist reads each step's loss
        sync()
        times.append(time.perf_counter() - t0)
        if first is None:
            first = times[-1]
    ms = 1e3 * statistics.median(times[args.warmup:])
    json.dump({"ms_per_step": ms, "tokens_per_s": mb * seq / (ms / 1e3), "first_step_s": first,
               "max_allocated_gib": torch.cuda.max_memory_allocated() / GiB if cuda else 0.0,
               "max_reserved_gib": torch.cuda.max_memory_reserved() / GiB if cuda else 0.0, "losses": losses,
               "torch": torch.__version__, "device": torch.cuda.get_device_name() if cuda else "cpu"},
              open(args.json, "w"))


def fmt_tps(x):
    return f"{x / 1e3:.1f}k" if x < 1e6 else f"{x / 1e6:.3f}M"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", help="a directory prepared by scripts/test-gpu.sh --prepare")
    ap.add_argument("--runner", help="with --dir: llcdist-run (or a wrapper setting its libraries)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="in place: the build directory")
    ap.add_argument("--models", default=None, help="default: every benchmark plan of --dir, or " + ",".join(CASES))
    ap.add_argument("--cases", default=None, help="in place: MODEL=MBxSEQ,... instead of " +
                    ",".join(f"{m}={b}x{s}" for m, (b, s) in CASES.items()))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--budget", type=float, default=900, help="seconds for everything; later runs SKIP")
    ap.add_argument("--skip-compile", action="store_true", help="no torch.compile runs")
    ap.add_argument("--device-file", default=None, help="default: the devices/ file of the GPU (device_file_for)")
    ap.add_argument("--json", default=None, help="default: bench/results/gpu-step.json in place")
    ap.add_argument("--backend", default="cuda", help="llc-dist's (cpu: the CPU smoke test of this script)")
    ap.add_argument("--torch-device", default="cuda", help="PyTorch's (cpu: the smoke test)")
    ap.add_argument("--torch-worker", choices=["eager", "compile"], help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--plan", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_worker:
        return torch_worker(args)

    tmp = tempfile.mkdtemp(prefix="llcdist-gpu-bench-")
    try:
        return bench(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench(args, tmp):
    deadline = time.time() + args.budget
    gpu_model = gpu_name()  # one nvidia-smi call: the device file and its INFO line
    if args.dir:
        d = os.path.abspath(args.dir)
        bench_dir = os.path.join(d, "plans", "bench")
        have = sorted(os.listdir(bench_dir)) if os.path.isdir(bench_dir) else []
        if not have:
            print(f"SKIP bench: {d} holds no benchmark plan (prepared with --no-bench)")
            return 0
        models = args.models.split(",") if args.models else sorted(have, key=lambda m: (m not in CASES, m))
        runner = [args.runner or os.path.join(d, "bin", "llcdist-run")]
        plans = {m: os.path.join(d, "plans", "bench", m) for m in models}
        cases = {}
        for m in models:
            b = json.load(open(os.path.join(plans[m], "manifest.json")))["batch"]
            cases[m] = (b["micro_batch"], b["seq_len"])
        configs = {m: os.path.join(d, "models", m + ".json") for m in models}
        infos = {m: json.load(open(os.path.join(d, "info", m + ".json"))) for m in models}
        device_file = args.device_file or device_file_for(gpu_model, os.path.join(d, "devices"))
        out_json = args.json  # none unless asked
    else:  # in place: compile here
        cases = parse_cases(args.cases) if args.cases else dict(CASES)
        models = args.models.split(",") if args.models else list(cases)
        exe = os.path.join(args.build, "bin", "llc-dist")
        runner = [exe, "run"]
        plans, configs, infos = {}, {}, {}
        for m in models:
            configs[m] = os.path.join(ROOT, "models", m + ".json")
            plans[m] = os.path.join(tmp, m)
            seq = str(cases[m][1])
            try:
                subprocess.run([exe, "compile", configs[m], *compile_flags(m, cases), "-o", plans[m], "--quiet"],
                               check=True, capture_output=True, text=True)
                infos[m] = json.loads(subprocess.run([exe, "info", configs[m], "--seq-len", seq, "--format", "json"],
                                                     check=True, capture_output=True, text=True).stdout)
            except (subprocess.CalledProcessError, OSError) as e:
                print(f"FAIL bench {m}: llc-dist compile / info: {e}{tail(getattr(e, 'stderr', ''))}")
                return 1
        device_file = args.device_file or device_file_for(gpu_model, os.path.join(ROOT, "devices"))
        out_json = args.json or os.path.join(ROOT, "bench", "results", "gpu-step.json")
    device = json.load(open(device_file))
    peak = device["bf16_dense_tflops"] * 1e12
    print(f"INFO bench device file: {os.path.basename(device_file)} ({device['name']}, "
          f"{device['bf16_dense_tflops']} TFLOP/s dense bf16) for GPU {gpu_model or 'none found'}", flush=True)

    # Order: what the targets need first (llc-dist and eager per model), torch.compile last.
    order = [(m, "llc-dist") for m in models[:1]] + [(models[0], "pytorch-eager")]
    for m in models[1:]:
        order += [(m, "llc-dist"), (m, "pytorch-eager")]
    if not args.skip_compile:
        order += [(m, "pytorch-compile") for m in models]
    order += [(m, "llc-dist-no-graphs") for m in models]
    limits = {"llc-dist": 150, "pytorch-eager": 90, "pytorch-compile": 180, "llc-dist-no-graphs": 150}
    res = {m: {} for m in models}
    failed = False
    for m, what in order:
        mb, seq = cases[m]
        left = deadline - time.time()
        if left < 25:
            print(f"SKIP bench {m} {what}: time budget ({left:.0f} s left of {args.budget:.0f})")
            continue
        t = min(limits[what], left - 5)
        try:
            if what.startswith("llc-dist"):
                off = what == "llc-dist-no-graphs"
                r = llcdist_run(runner, plans[m], args.steps, args.warmup, t, tmp, what + "-" + m, args.backend,
                                ["--cuda-graphs", "off"] if off else [])
                mem = "not logged" if r["peak_bytes"] is None else f"{r['peak_bytes'] / GiB:.2f} GiB ({r['peak_what']})"
            else:
                r = torch_run(configs[m], plans[m], what.split("-")[1], args.steps, args.warmup, t, tmp, m,
                              args.torch_device)
                mem = f"max allocated {r['max_allocated_gib']:.2f} GiB, reserved {r['max_reserved_gib']:.2f} GiB"
        except (RuntimeError, OSError, ValueError, KeyError) as e:
            print(f"FAIL bench {m} {what}: {e}", flush=True)
            failed = failed or what == "llc-dist"
            continue
        r["ms_per_step"] = 1e3 * mb * seq / r["tokens_per_s"]
        r["mfu"] = infos[m]["training_flops_per_token"] * r["tokens_per_s"] / peak
        res[m][what] = r
        smi = "" if r.get("smi_gib") is None else f", GPU memory in use +{r['smi_gib']:.2f} GiB (nvidia-smi)"
        ref = REFERENCE.get(m, {}).get(what.split("-")[-1])
        refs = f"; issue's H200 reference {fmt_tps(ref[0])} tokens/s, {ref[1]:.2f} GiB" if ref else ""
        extra = f", first step {r['first_step_s']:.1f} s" if "first_step_s" in r else ""
        print(f"INFO bench {m} {what}: bf16 {mb}x{seq}, {r['ms_per_step']:.1f} ms/step, "
              f"{fmt_tps(r['tokens_per_s'])} tokens/s, MFU {100 * r['mfu']:.1f} %, peak memory {mem}{smi}"
              f"{extra} [{r['wall_s']:.0f} s]{refs}", flush=True)

    # What the recorded step (one CUDA graph per step on the GPU) bought: the same plan, graphs off.
    for m in models:
        on, off = res[m].get("llc-dist"), res[m].get("llc-dist-no-graphs")
        if on and off:
            print(f"INFO bench {m} graphs: {fmt_tps(on['tokens_per_s'])} tokens/s with --cuda-graphs on, "
                  f"{fmt_tps(off['tokens_per_s'])} off ({on['tokens_per_s'] / off['tokens_per_s']:.2f}x)")

    # The targets: llc-dist >= PyTorch eager tokens/s on both models.
    for m in models:
        ours, eager, comp = (res[m].get(k) for k in ("llc-dist", "pytorch-eager", "pytorch-compile"))
        if ours is None:
            print(f"FAIL bench {m} target: llc-dist was not measured (above)")
            failed = True
            continue
        if eager is not None:
            base, src = eager["tokens_per_s"], "PyTorch eager in this run"
        elif m not in REFERENCE:
            print(f"FAIL bench {m} target: PyTorch eager was not measured (above)")
            failed = True
            continue
        else:
            base, src = REFERENCE[m]["eager"][0], "the issue's H200 PyTorch eager figure (this run's failed)"
        ratio = ours["tokens_per_s"] / base
        vs_compile = "" if comp is None else f", {ours['tokens_per_s'] / comp['tokens_per_s']:.2f}x torch.compile"
        ok = ratio >= 1.0
        # The CPU smoke test of this script (--backend cpu) compares CPU runs: informational only.
        smoke = args.backend == "cpu"
        failed = failed or (not ok and not smoke)
        label = "INFO" if smoke else "PASS" if ok else "FAIL"
        print(f"{label} bench {m} target: llc-dist {fmt_tps(ours['tokens_per_s'])} tokens/s, "
              f"{ratio:.2f}x {src} ({fmt_tps(base)}; target >= 1.00){vs_compile}", flush=True)
    if out_json:
        try:
            gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            gpu = "unknown"
        os.makedirs(os.path.dirname(os.path.abspath(out_json)), exist_ok=True)
        with open(out_json, "w") as f:
            json.dump({"benchmark": "bench/gpu_step.py: llc-dist --backend cuda vs PyTorch, bf16, AdamW, one GPU",
                       "gpu": gpu, "date": time.strftime("%Y-%m-%d"), "peak_flops": peak, "steps": args.steps,
                       "warmup": args.warmup, "results": res}, f, indent=2)
            f.write("\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
