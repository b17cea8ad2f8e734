#!/usr/bin/env python3
"""Writes a checkpoint with Hugging Face transformers itself.

Builds AutoModelForCausalLM.from_config(CONFIG.json) in float32 with the
library's own random initialization (torch.manual_seed(SEED)) and writes it
with save_pretrained: OUT_DIR/config.json and OUT_DIR/model.safetensors, as
the library writes them (a tied head once, under the embedding's name). The
file is what `llc-dist run --init-from` must load as it is, and hf_load.py
OUT_DIR - ... computes transformers' loss of the same parameters.

usage: hf_save.py CONFIG.json OUT_DIR [--seed S]
"""
import argparse
import sys

import torch
import transformers


def main():
    p = argparse.ArgumentParser()
    p.add_argument("config")
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(args.seed)
    cfg = transformers.AutoConfig.from_pretrained(args.config)
    model = transformers.AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
    # Random biases too (the library initializes them to zero), and norm
    # weights off their constant start (Gemma's are zero: it scales by
    # 1 + w), so a bias or norm weight that is dropped or misplaced on the
    # way in changes the loss.
    with torch.no_grad():
        for name, t in model.named_parameters():
            if name.endswith(".bias"):
                t.normal_(0.0, 0.02)
            elif "norm" in name and name.endswith(".weight"):
                t.add_(torch.randn_like(t) * 0.02)
    model.save_pretrained(args.out, safe_serialization=True)
    n = sum(t.numel() for t in model.parameters())
    print(f"transformers {transformers.__version__}: saved {type(model).__name__} ({n} parameters) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
