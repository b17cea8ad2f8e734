#!/usr/bin/env python3
"""GPU training step time: llc-dist's CUDA backend beside PyTorch on the same GPU.

For GPT-2 124M and a Llama-3-style 1.2B model (models/llama3.2-1b.json) in bf16
mixed precision, compiles the training step (--dtype bf16, one rank), runs it
with `llc-dist run --backend cuda` for --steps steps (the first two are
warm-up) and reports the median ms/step, tokens/s and MFU: training FLOPs per
token from `llc-dist info` times tokens/s over the device's dense bf16 peak
(devices/h200.json unless --device). Beside it, the same model, batch and
AdamW in PyTorch (torch.compile, scaled_dot_product_attention, bf16 autocast),
timed the same way, and the ratio PyTorch ms / llc-dist ms (>= 1.1 is the
target: bench/README.md). One line per model; --json writes the numbers.

usage: bench/gpu_step.py [--build build] [--steps 12] [--models gpt2,llama3.2-1b]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CASES = {"gpt2": (8, 1024), "llama3.2-1b": (4, 2048)}  # micro-batch, seq-len


def llc_dist_step(exe, root, model, mb, seq, steps, tmp):
    cfg = os.path.join(root, "models", model + ".json")
    info = json.loads(subprocess.run([exe, "info", cfg, "--seq-len", str(seq), "--format", "json"],
                                     check=True, capture_output=True, text=True).stdout)
    plan = os.path.join(tmp, model)
    subprocess.run([exe, "compile", cfg, "--seq-len", str(seq), "--micro-batch", str(mb), "--dtype", "bf16",
                    "-o", plan, "--quiet"], check=True)
    log = os.path.join(tmp, model + ".jsonl")
    subprocess.run([exe, "run", plan, "--backend", "cuda", "--steps", str(steps), "--data", "synthetic",
                    "--log-json", log, "--quiet"], check=True)
    recs = [json.loads(l) for l in open(log)][2:]
    tps = statistics.median(r["tokens_per_s"] for r in recs)
    return info, 1e3 * mb * seq / tps, tps


def torch_step(model, cfg, mb, seq, steps):
    """The same model in plain PyTorch; returns median ms/step or raises."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    if not torch.cuda.is_available():
        raise RuntimeError("torch has no CUDA device")
    llama = cfg.get("model_type") == "llama"
    H = cfg.get("hidden_size", cfg.get("n_embd"))
    L = cfg.get("num_hidden_layers", cfg.get("n_layer"))
    nh = cfg.get("num_attention_heads", cfg.get("n_head"))
    nkv = cfg.get("num_key_value_heads", nh)
    V = cfg["vocab_size"]
    I = cfg.get("intermediate_size") or 4 * H
    hd = H // nh

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1 = nn.RMSNorm(H) if llama else nn.LayerNorm(H)
            self.n2 = nn.RMSNorm(H) if llama else nn.LayerNorm(H)
            self.qkv = nn.Linear(H, (nh + 2 * nkv) * hd, bias=not llama)
            self.o = nn.Linear(H, H, bias=not llama)
            if llama:
                self.gu = nn.Linear(H, 2 * I, bias=False)
                self.d = nn.Linear(I, H, bias=False)
            else:
                self.fc = nn.Linear(H, I)
                self.pr = nn.Linear(I, H)

        def forward(self, x):
            B, S, _ = x.shape
            q, k, v = self.qkv(self.n1(x)).split([nh * hd, nkv * hd, nkv * hd], -1)
            q = q.view(B, S, nh, hd).transpose(1, 2)
            k = k.view(B, S, nkv, hd).transpose(1, 2)
            v = v.view(B, S, nkv, hd).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=nkv != nh)
            x = x + self.o(a.transpose(1, 2).reshape(B, S, H))
            h = self.n2(x)
            if llama:
                g, u = self.gu(h).chunk(2, -1)
                return x + self.d(F.silu(g) * u)
            return x + self.pr(F.gelu(self.fc(h), approximate="tanh"))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, H)
            self.wpe = None if llama else nn.Embedding(seq, H)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.nf = nn.RMSNorm(H) if llama else nn.LayerNorm(H)

        def forward(self, ids, tgt):
            x = self.wte(ids)
            if self.wpe is not None:
                x = x + self.wpe.weight[: ids.shape[1]]
            for b in self.blocks:
                x = b(x)
            logits = self.nf(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.float().view(-1, V), tgt.view(-1))

    dev = "cuda"
    m = Model().to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)
    step = torch.compile(m)
    ids = torch.randint(0, V, (mb, seq), device=dev)
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step(ids, ids)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times[2:])


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(root, "build"))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--models", default=",".join(CASES))
    ap.add_argument("--device", default=os.path.join(root, "devices", "h200.json"))
    ap.add_argument("--json", default=os.path.join(root, "bench", "results", "gpu-step.json"))
    args = ap.parse_args()
    exe = os.path.join(args.build, "bin", "llc-dist")
    peak = json.load(open(args.device))["bf16_dense_tflops"] * 1e12
    rows, failed = [], False
    with tempfile.TemporaryDirectory(prefix="llcdist-gpu-bench-") as tmp:
        for model in args.models.split(","):
            mb, seq = CASES[model]
            cfg = json.load(open(os.path.join(root, "models", model + ".json")))
            row = {"model": model, "micro_batch": mb, "seq_len": seq}
            try:
                info, ms, tps = llc_dist_step(exe, root, model, mb, seq, args.steps, tmp)
                row.update(ms_per_step=ms, tokens_per_s=tps,
                           mfu=info["training_flops_per_token"] * tps / peak)
            except (subprocess.CalledProcessError, OSError, KeyError, ValueError) as e:
                print(f"FAIL bench {model}: llc-dist run --backend cuda: {e}")
                failed = True
                continue
            try:
                row["pytorch_ms_per_step"] = torch_step(model, cfg, mb, seq, args.steps)
                row["ratio_pytorch_over_llcdist"] = row["pytorch_ms_per_step"] / ms
                torch_part = (f", PyTorch {row['pytorch_ms_per_step']:.1f} ms/step, "
                              f"ratio {row['ratio_pytorch_over_llcdist']:.2f} (target >= 1.1)")
            except Exception as e:  # noqa: BLE001 - any PyTorch failure is reported, not fatal
                torch_part = f", PyTorch: not measured ({type(e).__name__}: {str(e)[:120]})"
            print(f"INFO bench {model} bf16 {mb}x{seq}: {ms:.1f} ms/step, {tps / 1e6:.3f} M tokens/s, "
                  f"MFU {100 * row['mfu']:.1f} %" + torch_part)
            rows.append(row)
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"benchmark": "llc-dist run --backend cuda, bf16, one GPU", "peak_flops": peak,
                   "results": rows}, f, indent=2)
        f.write("\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
