#!/usr/bin/env python3
"""Checks llc-dist's per-family padding_idx against transformers' own classes.

For every config given (the tiny models of every family) -- as written, with pad_token_id 3 (does
the family's embedding take it at all), and with pad_token_id removed (the config class's
default) -- it builds transformers'
AutoModelForCausalLM from the config and reads its token embedding's padding_idx (None where the
family's nn.Embedding takes none), and compiles the same file with `llc-dist compile --emit xf`
and reads xf.embedding's padding_idx (absent: none). The two must agree: the families' kPaddingIdx
trait and kReaders' pad default (ModelConfig.h, ModelConfig.cpp) against the real classes.
Prints one line per config and case, then PADDING TABLE OK or PADDING TABLE FAILED (exit 1).
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

import torch
import transformers


def hf_padding(config_path):
    cfg = transformers.AutoConfig.from_pretrained(config_path)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    return model.get_input_embeddings().padding_idx


def llcdist_padding(llc_dist, config_path, workdir):
    out = os.path.join(workdir, "model.mlir")
    subprocess.run([llc_dist, "compile", config_path, "--seq-len", "16", "--micro-batch", "1",
                    "--global-batch", "1", "--emit", "xf", "-o", out, "--quiet"], check=True)
    with open(out) as f:
        text = f.read()
    lines = [l for l in text.splitlines() if "xf.embedding " in l]
    if len(lines) != 1:
        raise SystemExit(f"{config_path}: expected one xf.embedding, found {len(lines)}")
    m = re.search(r"padding_idx = (-?\d+)", lines[0])
    return int(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compiler", default="llc-dist", help="the llc-dist binary")
    ap.add_argument("configs", nargs="+", help="config.json files, or folders whose tiny-*.json to take")
    args = ap.parse_args()
    paths = []
    for c in args.configs:
        paths += sorted(glob.glob(os.path.join(c, "tiny-*.json"))) if os.path.isdir(c) else [c]
    if not paths:
        raise SystemExit("no configs given")
    transformers.logging.set_verbosity_error()
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            with open(path) as f:
                cfg = json.load(f)
            name = os.path.basename(path)[: -len(".json")]
            # As written; with a pad token (does the family's embedding take it: the trait); without
            # one (the config class's default).
            cases = [("as written", cfg), ("pad 3", {**cfg, "pad_token_id": 3})]
            if "pad_token_id" in cfg:
                cases.append(("default", {k: v for k, v in cfg.items() if k != "pad_token_id"}))
            for case, c in cases:
                d = os.path.join(tmp, f"{name}-{case.replace(' ', '-')}")
                os.makedirs(d)
                file = os.path.join(d, "config.json")
                with open(file, "w") as f:
                    json.dump(c, f)
                hf, ours = hf_padding(d), llcdist_padding(args.compiler, file, d)
                ok = hf == ours
                failed += not ok
                print(f"{name} ({case}): transformers {hf}, llc-dist {ours}{'' if ok else '  MISMATCH'}")
    print("PADDING TABLE OK" if not failed else f"PADDING TABLE FAILED ({failed} mismatches)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
