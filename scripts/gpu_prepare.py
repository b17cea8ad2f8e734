#!/usr/bin/env python3
"""Prepares the GPU check in a directory that runs on a bare GPU machine (docs/gpu.md).

  gpu_prepare.py --build BUILD_DIR --out DIR [--llc-dist PATH] [--no-bench]

(scripts/test-gpu.sh --prepare DIR calls it after building.) On this machine, which has the
compiler and no GPU: compiles every plan the check runs into DIR/plans/ -- the golden plans (tiny
GPT-2 and tiny Llama on one rank and on virtual ranks, each in f32 and bf16), the PyTorch-parity
plans and the two benchmark plans (GPT-2 124M, Llama-3.2-1B) --, runs each golden plan on the CPU
backend and keeps its losses and gradient norms (DIR/ref/), saves the parity plans' initial
parameters (DIR/params/), and copies what the GPU machine lacks: llcdist-run, llcdist_cuda_tests
and llcdist_gpu_kernel_bench (stripped, xz) with the shared libraries they load that are neither
glibc's nor CUDA's (OpenBLAS, libgfortran, ...: lib/, xz; libstdc++, libgcc_s and other common
system libraries in lib/compat/, used there only when the machine's own leave something unresolved),
the scripts, the model configs, the token data and DIR/run.sh. Prints what it did and DIR's size;
fails above 64 MiB.

DIR layout:
  run.sh                       the check (scripts/gpu_check_run.sh)
  prepare.json                 what was prepared, when, from which commit; golden.json, parity.json
  bin/*.xz  lib/*.xz  lib/compat/*.xz
  plans/golden/NAME/  plans/bench/{gpt2,llama3.2-1b}/
  ref/NAME.jsonl               the CPU backend's --log-json of each golden plan
  params/NAME.safetensors      the parity plans' initial parameters (--steps 0 --save-params)
  models/ devices/*.json info/MODEL.json data/corpus_train.bin
  scripts/ bench/              gpu_golden.py, gpu_env.py, gpu_gtest_lines.py; gpu_step.py, gpu/torch_*.py
"""
import argparse
import concurrent.futures
import datetime
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import gpu_step  # noqa: E402  (the benchmark cases and their compile flags: one definition)

LIMIT = 64 << 20
SEED = 1
DATA = "data/corpus_train.bin"

# The golden rule on the GPU: each plan of today's check, in f32 and in bf16 (name, model, flags).
GOLDEN = [
    ("gpt2-1rank", "tiny-gpt2", "--seq-len 64 --global-batch 4"),
    ("llama-1rank", "tiny-llama", "--seq-len 64 --global-batch 4"),
    ("gpt2-dp2", "tiny-gpt2", "--mesh dp=2 --seq-len 64 --global-batch 4"),
    ("gpt2-tp2-sp", "tiny-gpt2", "--mesh tp=2 --sequence-parallel --seq-len 64 --global-batch 4"),
    ("llama-tp2-sp", "tiny-llama", "--mesh tp=2 --sequence-parallel --seq-len 64 --global-batch 4"),
    ("llama-pp2-1f1b", "tiny-llama", "--mesh pp=2 --schedule 1f1b --seq-len 64 --global-batch 8"),
    ("llama-dp2-zero3", "tiny-llama", "--mesh dp=2 --zero 3 --seq-len 64 --global-batch 4"),
    ("llama-dp2-tp2-pp2-sp", "tiny-llama", "--mesh dp=2,tp=2,pp=2 --sequence-parallel --seq-len 64 --global-batch 8"),
    # Context parallelism (issue #32) on the GPU, virtual ranks: the ring (the default: block
    # attention, merge, ring sends) and the all-to-alls.
    ("gpt2-cp2", "tiny-gpt2", "--mesh cp=2 --seq-len 64 --global-batch 4"),
    # Learned positions under sequence parallelism inside each cp slice (shard_axis "tp+cp").
    ("gpt2-cp2-tp2-sp", "tiny-gpt2", "--mesh cp=2,tp=2 --sequence-parallel --seq-len 64 --global-batch 4"),
    ("llama-dp2-cp2-tp2-sp", "tiny-llama",
     "--mesh dp=2,cp=2,tp=2 --cp-impl all-to-all --sequence-parallel --seq-len 64 --global-batch 4"),
    # The families (issue #33): Mistral's sliding window (own f32 kernel, cuDNN's band in bf16; on the
    # ring's blocks too), Gemma's (1 + w) norms, scaled embeddings and GeGLU (and its one kv head
    # replicated by all-to-all), Phi's partial rotary, parallel block and LM-head bias.
    ("mistral-1rank", "tiny-mistral", "--seq-len 64 --global-batch 4"),
    ("mistral-cp2-ring", "tiny-mistral", "--mesh cp=2 --seq-len 64 --global-batch 4"),
    ("gemma-tp2", "tiny-gemma", "--mesh tp=2 --seq-len 64 --global-batch 4"),
    ("gemma-cp4-a2a", "tiny-gemma", "--mesh cp=4 --cp-impl all-to-all --seq-len 64 --global-batch 4"),
    ("phi-dp2-tp2-sp", "tiny-phi", "--mesh dp=2,tp=2 --sequence-parallel --seq-len 64 --global-batch 4"),
    # OLMo's LayerNorms without gamma and beta (layer_norm_fwd fused with its add, the input gradient
    # alone), under sequence parallelism.
    ("olmo-dp2-tp2-sp", "tiny-olmo", "--mesh dp=2,tp=2 --sequence-parallel --seq-len 64 --global-batch 4"),
    # GPT-NeoX's grouped QKV split (split_fwd / split_bwd over heads x tokens rows) and the exact GELU
    # (gelu_erf_fwd / _bwd), per-rank heads under tp.
    ("gpt-neox-tp2", "tiny-gpt-neox", "--mesh tp=2 --seq-len 64 --global-batch 4"),
    ("falcon-dp2-tp2-sp", "tiny-falcon", "--mesh dp=2,tp=2 --sequence-parallel --seq-len 64 --global-batch 4"),
    # BLOOM's ALiBi (the own kernels: cuDNN's alibi mask is not a tp rank's slice of the slopes) by global
    # position on the ring's blocks, each tp rank's heads' slopes (head_axis).
    ("bloom-cp2-tp2-sp", "tiny-bloom", "--mesh cp=2,tp=2 --sequence-parallel --seq-len 64 --global-batch 4"),
    # GPTBigCode's multi_query c_attn (one group: every q head, one k, one v) with learned positions.
    ("gpt-bigcode-dp2-pp2", "tiny-gpt-bigcode", "--mesh dp=2,pp=2 --schedule 1f1b --seq-len 64 --global-batch 8"),
    # MPT's LayerNorms of gamma alone (layer_norm_fwd and its fused add without beta, the weight
    # gradient without dbeta) and ALiBi per tp rank, under sequence parallelism.
    ("mpt-dp2-tp2-sp", "tiny-mpt", "--mesh dp=2,tp=2 --sequence-parallel --seq-len 64 --global-batch 4"),
    # GPT-J's rotate_every_two (rope_fwd / _bwd interleaved) on a partial rotary width, per tp rank's heads.
    ("gpt-j-tp2", "tiny-gpt-j", "--mesh tp=2 --seq-len 64 --global-batch 4"),
    # OPT's ReLU (relu_fwd / _bwd) and its position table read from row 2 (the fused embedding's and
    # pos_embedding_*'s offset), over dp and tp with sequence parallelism.
    ("opt-dp2-tp2-sp", "tiny-opt", "--mesh dp=2,tp=2 --sequence-parallel --seq-len 32 --global-batch 4"),
    # Cohere's logit scale (scale, forward and backward), a LayerNorm of a weight alone feeding attention and
    # the MLP side by side, rotary embeddings in adjacent pairs over whole heads, per tp rank.
    ("cohere-tp2", "tiny-cohere", "--mesh tp=2 --seq-len 64 --global-batch 4"),
    # GPT-Neo's local layers (attention's window: 4 keys of 64, cuDNN's sliding window or the own kernel)
    # between global ones, and q scaled by sqrt(head_dim) before the attention, per tp rank.
    ("gpt-neo-tp2", "tiny-gpt-neo", "--mesh tp=2 --seq-len 64 --global-batch 4"),
    # BioGPT's scaled token embedding (embedding_fwd / embedding_bwd_weight with scale, not fused with the
    # positions) beside pos_embedding_fwd / _bwd_weight reading from row 2, and the erf GELU, per tp rank.
    ("biogpt-tp2", "tiny-biogpt", "--mesh tp=2 --seq-len 64 --global-batch 4"),
    # CodeGen's qkv_proj in 4 blocks of [q | v | k] (the packed-QKV attention cannot read it: split copies),
    # rotate_every_two on part of each head, per tp rank.
    ("codegen-tp2", "tiny-codegen", "--mesh tp=2 --seq-len 64 --global-batch 4"),
    # Mixtures of experts (issue #34): routing, permutation, the grouped GEMMs and the weighted sum back
    # (Mixtral, top-2 renormalized), Qwen2-MoE's gated shared expert, with dp and tp.
    ("mixtral-1rank", "tiny-mixtral", "--seq-len 64 --global-batch 4"),
    ("qwen2-moe-dp2-tp2", "tiny-qwen2-moe", "--mesh dp=2,tp=2 --seq-len 64 --global-batch 4"),
    # Expert parallelism: all_to_all_v between virtual ranks (staged through the host communicator
    # without NCCL), moe_chunk_transpose, the experts' ZeRO blocks over edp; and a capacity factor
    # that drops tokens (moe_permute's capacity, slot -1).
    ("mixtral-dp4-ep2-zero1", "tiny-mixtral", "--mesh dp=4,ep=2 --zero 1 --seq-len 64 --global-batch 4"),
    ("mixtral-dp2-ep2-capacity", "tiny-mixtral",
     "--mesh dp=2,ep=2 --moe-capacity-factor 0.5 --seq-len 64 --global-batch 4"),
    # The experts on each rank's own slice of the tokens: sequence parallelism (Qwen2-MoE, its shared
    # expert reduce-scattered) and context parallelism's ring (Mixtral).
    ("qwen2-moe-tp2-sp", "tiny-qwen2-moe", "--mesh tp=2 --sequence-parallel --seq-len 64 --global-batch 4"),
    ("mixtral-cp2-ring", "tiny-mixtral", "--mesh cp=2 --seq-len 64 --global-batch 4"),
    # The load-balancing loss (output_router_logits; a model path under the repository): its
    # statistics sent between pipeline stages (i32 counts too) and all-reduced over tp under SP;
    # moe_router_stats / _bwd and moe_aux_loss / _bwd.
    ("mixtral-aux-pp2", "unittests/Integration/Inputs/tiny-mixtral-aux",
     "--mesh pp=2 --schedule 1f1b --seq-len 64 --global-batch 8"),
    ("mixtral-aux-tp2-sp", "unittests/Integration/Inputs/tiny-mixtral-aux",
     "--mesh tp=2 --sequence-parallel --seq-len 64 --global-batch 4"),
    # Expert parallelism with context parallelism's ring: each cp rank dispatches its slice over its
    # ep group; the experts' gradients reduce over "cp" (ep = dp), the statistics over cp.
    ("mixtral-aux-dp2-cp2-ep2", "unittests/Integration/Inputs/tiny-mixtral-aux",
     "--mesh dp=2,cp=2,ep=2 --cp-impl ring --seq-len 64 --global-batch 4"),
]
GOLDEN_STEPS = 3
# The PyTorch comparison's plans: one rank, 2 microbatches of 4 x 64 tokens, AdamW with decay on
# the matrices, warmup + cosine, clipping (as test/reference/hf-parity.test), 10 steps. They are
# golden plans too (GPU against CPU; over 10 steps a bf16 run's grad norm can spike in one run and
# not in another -- measured 8e-2 apart at one step between the CPU's 1-rank and tp=2 runs of the
# same bf16 plan -- so their grad norms are held by the median over the steps, the losses at every
# step); their bf16 GPU logs are what PyTorch autocast is held to.
PARITY = [("parity-gpt2", "tiny-gpt2"), ("parity-llama", "tiny-llama")]
PARITY_FLAGS = ("--seq-len 64 --micro-batch 4 --global-batch 8 --lr 3e-3 --lr-schedule cosine --warmup 2 "
                "--min-lr 1e-4 --weight-decay 0.1 --grad-clip 1.0")
PARITY_STEPS = 10
# Tolerances (docs/gpu.md, "Tolerances": the one table; keep them equal).
GOLDEN_RTOL = {"f32": 2e-4, "bf16": 2e-2}  # GPU vs CPU backend, loss and grad norm, every step
PARITY_RTOL = {"f32": (2e-4, 2e-4), "bf16": (5e-3, 2e-2)}  # PyTorch: (loss every step, grad norm median)

GLIBC = re.compile(r"^(libc|libm|libdl|libpthread|librt|libresolv|libutil|libmvec|libanl|libnsl|ld-linux[^.]*)\.so")
CUDA = re.compile(r"^lib(cuda|cudart|cublas|cublasLt|cudnn\w*|nccl|nvrtc\w*|nvJitLink|cufft\w*|curand|"
                  r"cusparse\w*|cusolver\w*|cupti|nvToolsExt|nvidia-ml)\.so")
# Libraries most Linux machines have (the C++ runtime, compression, udev, ...): shipped in lib/compat/,
# which run.sh uses only when the machine's own leave something unresolved (older, or absent).
# Everything else (OpenBLAS, libgfortran, xxhash, OpenMPI's when linked) goes to lib/, always used.
COMPAT = re.compile(r"^(libstdc\+\+|libgcc_s|libz|liblzma|libzstd|liblz4|libbz2|libudev|libsystemd|libbsd|libmd|"
                    r"libffi|libtinfo|libedit|libxml2|libicu\w*|libcap|libgcrypt|libgpg-error|libcrypto|libssl|"
                    r"libnuma|libelf|libnl[-\w.]*)\.so")
BINARIES = ["llcdist-run", "llcdist_cuda_tests", "llcdist_gpu_kernel_bench"]


def model_config(model):
    """A golden entry's config: models/MODEL.json, or MODEL.json under the repository when MODEL is a path."""
    return os.path.join(ROOT, model + ".json") if "/" in model else os.path.join(ROOT, "models", model + ".json")


def log(msg):
    print(f"prepare: {msg}", flush=True)


def run(cmd, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout.strip()[-2000:]}")
    return p.stdout


def find_binary(build, name):
    for sub in ("bin", "runtime", "."):
        p = os.path.join(build, sub, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    raise RuntimeError(f"{name} not found in {build}/bin, {build}/runtime or {build} "
                       f"(build it: scripts/build.sh {name}; CMake must find the CUDA toolkit for the GPU targets)")


def xz_file(src, dst):
    """dst = xz(src), preset 3 (OpenBLAS's 36 MB -> 5 MB in a few seconds)."""
    if shutil.which("xz"):
        with open(dst, "wb") as o:
            subprocess.run(["xz", "-3", "-T2", "-c", src], stdout=o, check=True)
    else:
        with open(src, "rb") as i, lzma.open(dst, "wb", preset=3) as o:
            shutil.copyfileobj(i, o, 1 << 20)


def shared_libs(binaries):
    """{soname: resolved path} of every library the binaries load (ldd: the transitive closure)."""
    libs = {}
    for b in binaries:
        for line in run(["ldd", b]).splitlines():
            m = re.match(r"\s*(\S+) => (\S+)", line)
            if not m:
                continue
            name, path = m.groups()
            if path == "not":
                if not CUDA.match(name):
                    raise RuntimeError(f"ldd {b}: {name} not found on this machine")
                continue
            libs.setdefault(name, path)
    return libs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--llc-dist", default=None, help="the compiler (default BUILD/bin/llc-dist)")
    ap.add_argument("--no-bench", action="store_true",
                    help="no benchmark plans (the CPU test of --prepare; the check then SKIPs them)")
    ap.add_argument("--bench-cases", default=None,
                    help="MODEL=MBxSEQ,... instead of bench/gpu_step.py's (the CPU test: tiny models)")
    ap.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    args = ap.parse_args()
    t_start = time.time()
    out = os.path.abspath(args.out)
    if os.path.exists(out) and os.listdir(out):
        if not os.path.exists(os.path.join(out, "prepare.json")):
            raise SystemExit(f"prepare: {out} exists and is not a prepared directory: give an empty or new one")
        shutil.rmtree(out)
    for sub in ("bin", "lib/compat", "plans/golden", "plans/bench", "ref", "params", "models", "devices", "info",
                "data", "scripts", "bench/gpu"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)

    llc = args.llc_dist or find_binary(args.build, "llc-dist")
    bins = {n: find_binary(args.build, n) for n in BINARIES}
    runner = bins["llcdist-run"]
    help_text = subprocess.run([runner, "--help"], capture_output=True, text=True).stdout
    cpu_flag = ["--backend", "cpu"] if "--backend" in help_text else []  # today's runner is CPU-only
    env = dict(os.environ, LLCDIST_BACKEND="cpu")
    log(f"compiler {llc}; runner {runner} ({'--backend cpu' if cpu_flag else 'no --backend flag: CPU only'})")

    shutil.copy(os.path.join(ROOT, DATA), os.path.join(out, DATA))
    data = os.path.join(out, DATA)

    # Plans: the golden ones (f32, bf16) and the parity ones; each compiled, then run on the CPU.
    entries = []
    for name, model, flags in GOLDEN:
        for dt in ("f32", "bf16"):
            entries.append((f"{name}-{dt}", model, flags.split() + ["--dtype", dt], GOLDEN_STEPS, dt))
    for name, model in PARITY:
        for dt in ("f32", "bf16"):
            entries.append((f"{name}-{dt}", model, PARITY_FLAGS.split() + ["--dtype", dt], PARITY_STEPS, dt))

    def golden_one(e):
        name, model, flags, steps, dt = e
        plan = os.path.join(out, "plans", "golden", name)
        run([llc, "compile", model_config(model), *flags, "-o", plan, "--quiet"])
        run([runner, plan, *cpu_flag, "--steps", str(steps), "--data", data, "--seed", str(SEED),
             "--log-json", os.path.join(out, "ref", name + ".jsonl"), "--quiet"], env=env)
        if name.startswith("parity-"):
            run([runner, plan, *cpu_flag, "--steps", "0", "--seed", str(SEED), "--save-params",
                 os.path.join(out, "params", name + ".safetensors"), "--quiet"], env=env)
        man = json.load(open(os.path.join(plan, "manifest.json")))
        m = man["mesh"]
        return {"name": name, "model": model, "dtype": dt, "plan": f"plans/golden/{name}",
                "ref": f"ref/{name}.jsonl", "steps": steps, "rtol": GOLDEN_RTOL[dt],
                "grad_norm": "median" if name.startswith("parity-") else "every-step",
                "ranks": m.get("dp", 1) * m.get("tp", 1) * m.get("pp", 1) * m.get("cp", 1),
                "compile_flags": " ".join(flags),
                "run_flags": ["--data", "DIR/" + DATA, "--seed", str(SEED)]}

    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        golden = list(pool.map(golden_one, entries))
    log(f"{len(golden)} golden plans compiled and run on the CPU ({time.time() - t0:.1f} s)")
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump({"about": "scripts/gpu_golden.py suite: each plan on the GPU against ref (the CPU backend); "
                            "run_flags' DIR/ is this directory", "plans": golden}, f, indent=1)
    parity_cases = []
    for name, model in PARITY:
        for dt in ("bf16", "f32"):
            lt, gt = PARITY_RTOL[dt]
            # bf16: llc-dist on the GPU (the golden suite's log) vs PyTorch autocast on the GPU;
            # f32: llc-dist's CPU reference vs PyTorch f32 on the GPU (the model holds on that torch).
            parity_cases.append({
                "name": f"{model}-{dt}", "config": f"models/{model}.json", "plan": f"plans/golden/{name}-{dt}",
                "init": f"params/{name}-bf16.safetensors", "data": DATA,
                "log": f"LOGS/{name}-{dt}.jsonl" if dt == "bf16" else f"ref/{name}-{dt}.jsonl",
                "device": "cuda", "autocast": "bf16" if dt == "bf16" else "off", "loss_rtol": lt, "grad_rtol": gt,
                "log_from_run": dt == "bf16", "steps": PARITY_STEPS, "seed": SEED})
    with open(os.path.join(out, "parity.json"), "w") as f:
        json.dump(parity_cases, f, indent=1)
    for name, _ in PARITY:  # one initial state per model: the f32 and bf16 plans start from the same values
        a, b = (open(os.path.join(out, "params", f"{name}-{dt}.safetensors"), "rb").read() for dt in ("f32", "bf16"))
        if a != b:
            raise RuntimeError(f"{name}: the f32 and bf16 plans' initial parameters differ")
        os.remove(os.path.join(out, "params", f"{name}-f32.safetensors"))

    # The benchmark plans and their FLOPs per token.
    # The shipped configs the package carries (a golden plan of a config elsewhere is compiled here).
    models = sorted({model for _, model, _ in GOLDEN if "/" not in model} | {model for _, model in PARITY})
    cases = {} if args.no_bench else (gpu_step.parse_cases(args.bench_cases) if args.bench_cases else gpu_step.CASES)
    if cases:
        t0 = time.time()
        for m in cases:
            run([llc, "compile", os.path.join(ROOT, "models", m + ".json"), *gpu_step.compile_flags(m, cases),
                 "-o", os.path.join(out, "plans", "bench", m), "--quiet"])
            info = run([llc, "info", os.path.join(ROOT, "models", m + ".json"), "--seq-len",
                        str(cases[m][1]), "--format", "json"])
            json.loads(info)
            with open(os.path.join(out, "info", m + ".json"), "w") as f:
                f.write(info)
            if m not in models:
                models.append(m)
        log(f"benchmark plans {', '.join(f'{m} {b}x{q}' for m, (b, q) in cases.items())} compiled "
            f"({time.time() - t0:.1f} s)")
    for m in models:
        shutil.copy(os.path.join(ROOT, "models", m + ".json"), os.path.join(out, "models"))
    # Every device file: bench/gpu_step.py prices MFU with the one of the GPU it finds (H100 or H200).
    for dev in sorted(os.listdir(os.path.join(ROOT, "devices"))):
        if dev.endswith(".json"):
            shutil.copy(os.path.join(ROOT, "devices", dev), os.path.join(out, "devices"))

    # Scripts.
    for rel in ("scripts/gpu_golden.py", "scripts/gpu_env.py", "scripts/gpu_gtest_lines.py", "bench/gpu_step.py",
                "bench/gpu/torch_model.py", "bench/gpu/torch_parity.py"):
        shutil.copy(os.path.join(ROOT, rel), os.path.join(out, rel))
    shutil.copy(os.path.join(ROOT, "scripts", "gpu_check_run.sh"), os.path.join(out, "run.sh"))
    os.chmod(os.path.join(out, "run.sh"), 0o755)

    # Binaries (stripped) and the libraries they need that the GPU machine may lack, all xz.
    t0 = time.time()
    tmpbin = os.path.join(out, "bin", ".strip")
    os.makedirs(tmpbin)
    jobs = []
    for n, p in bins.items():
        s = os.path.join(tmpbin, n)
        shutil.copy(p, s)
        if shutil.which("strip"):
            subprocess.run(["strip", s], check=True)
        jobs.append((s, os.path.join(out, "bin", n + ".xz")))
    libs = shared_libs(list(bins.values()))
    shipped, left = [], []
    for name, path in sorted(libs.items()):
        if GLIBC.match(name) or CUDA.match(name):
            left.append(name)
            continue
        sub = "lib/compat" if COMPAT.match(name) else "lib"
        jobs.append((os.path.realpath(path), os.path.join(out, sub, name + ".xz")))
        shipped.append(f"{sub}/{name}")
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(lambda j: xz_file(*j), jobs))
    shutil.rmtree(tmpbin)
    log(f"binaries and libraries compressed ({time.time() - t0:.1f} s): shipped {', '.join(shipped)}; "
        f"left to the GPU machine: {', '.join(left)}")

    try:
        commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        commit = "?"
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out) for f in fs)
    benches = ", ".join(f"{m} {b}x{q}" for m, (b, q) in cases.items()) or "none (--no-bench)"
    summary = (f"{datetime.datetime.now().isoformat(timespec='seconds')} from {commit}: {len(golden)} golden plans, "
               f"{len(parity_cases)} PyTorch comparisons, benchmark plans: {benches}, "
               f"runner flags {'with' if cpu_flag else 'without'} --backend")
    with open(os.path.join(out, "prepare.json"), "w") as f:
        json.dump({"summary": summary, "commit": commit, "golden_rtol": GOLDEN_RTOL, "parity_rtol": PARITY_RTOL,
                   "shipped_libraries": shipped, "machine_libraries": left, "bytes": size,
                   "no_bench": args.no_bench}, f, indent=1)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out) for f in fs)
    log(f"done in {time.time() - t_start:.0f} s: {out} holds {size} bytes ({size / (1 << 20):.1f} MiB of the "
        f"{LIMIT >> 20} MiB a device call carries); on the GPU machine: bash {out}/run.sh")
    if size > LIMIT:
        print(f"prepare: FAIL: {out} is {size} bytes, over {LIMIT}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as e:
        print(f"prepare: FAIL: {e}", file=sys.stderr)
        sys.exit(1)
