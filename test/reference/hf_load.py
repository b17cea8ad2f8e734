#!/usr/bin/env python3
"""Loads parameters llc-dist saved into Hugging Face transformers itself.

Where hf_parity.py re-implements the architectures, this check uses the real
library: it puts the model's config.json and llc-dist's safetensors file side
by side in a directory, calls AutoModelForCausalLM.from_pretrained on it, and
requires that no tensor is missing, unexpected or of another shape. It then
computes, with transformers' own forward pass, the loss of step 0's global
batch (design.md's sample order: sample g reads the T + 1 tokens from token
g·T) and compares it with the step-0 loss llc-dist logged, which was computed
from the same parameters when PARAMS is the file `--steps 0` saved.

usage: hf_load.py CONFIG.json PARAMS.safetensors DATA.bin LOG.jsonl
                  --seq-len T --global-batch G [--loss-rtol R] [--step K]
       hf_load.py HF_DIR - DATA.bin LOG.jsonl ...
With a directory (what `llc-dist export --hf` writes: config.json and
model.safetensors or its sharded index) it is loaded as it is. --step K
compares the loss of step K's global batch with the loss logged for step K
(a run resumed from a checkpoint at step K logs it from the checkpoint's
parameters).
Exit 0 on agreement, 1 with a report otherwise.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers

torch.set_num_threads(1)


def read_tokens(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(256 * 4), dtype="<i4")
        assert header[0] == 20240520 and header[1] == 1, "not an llm.c token file"
        return np.frombuffer(f.read(), dtype="<u2")[: header[2]].astype(np.int64)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("config")
    p.add_argument("params")
    p.add_argument("data")
    p.add_argument("log")
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--global-batch", type=int, required=True)
    p.add_argument("--loss-rtol", type=float, default=1e-5)
    p.add_argument("--step", type=int, default=0)
    args = p.parse_args()

    if os.path.isdir(args.config):
        model, info = transformers.AutoModelForCausalLM.from_pretrained(
            args.config, output_loading_info=True, attn_implementation="eager",
            torch_dtype=torch.float32)
    else:
        d = tempfile.mkdtemp()
        try:
            shutil.copy(args.config, os.path.join(d, "config.json"))
            shutil.copy(args.params, os.path.join(d, "model.safetensors"))
            model, info = transformers.AutoModelForCausalLM.from_pretrained(
                d, output_loading_info=True, attn_implementation="eager",
                torch_dtype=torch.float32)
        finally:
            shutil.rmtree(d)
    problems = {k: v for k, v in info.items() if v}
    summary = ", ".join(f"{len(v)} {k} (e.g. {sorted(v)[0]})" for k, v in problems.items())
    print(f"transformers {transformers.__version__}: {type(model).__name__}, "
          f"vocabulary {model.config.vocab_size}, loading info {summary or 'clean'}")
    if problems:
        print("FAIL: the file does not load into transformers unchanged")
        return 1

    T, G = args.seq_len, args.global_batch
    tokens = read_tokens(args.data)
    samples = (len(tokens) - 1) // T  # per epoch; the order wraps (TokenData.h, shuffle off)
    starts = [((args.step * G + g) % samples) * T for g in range(G)]
    batch = np.stack([tokens[s: s + T + 1] for s in starts])
    inputs = torch.from_numpy(batch[:, :T])
    targets = torch.from_numpy(batch[:, 1:])
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=inputs).logits
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).double(), targets.reshape(-1)).item()
    records = [json.loads(line) for line in open(args.log)]
    logged = [r for r in records if "loss" in r and r["step"] == args.step][0]["loss"]
    rel = abs(loss - logged) / abs(logged)
    print(f"step {args.step}: transformers loss {loss:.8f}, llc-dist {logged:.8f}, rel {rel:.2e}")
    if rel > args.loss_rtol:
        print(f"FAIL: relative difference {rel:.2e} > {args.loss_rtol:.0e}")
        return 1
    print("TRANSFORMERS OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
