#!/usr/bin/env python3
"""Byte-compare the plans of two llc-dist builds on a fixed list of configurations.

A refactor of the compiler must not change what it emits. This compiles every
configuration below with both binaries and compares the plan directories file by
file (and the `--emit xf` text of a few): every schedule, ZeRO stage, recompute
mode, bf16, SP, tied and untied embeddings, padded vocabularies, kv-head
replication, context parallelism (ring and all-to-all), Qwen2 and the 405B plan with 16
pipeline stages; then 48 more on the tiny
models (gradient accumulation, the overlaps and buckets, each fusion off).

usage: scripts/plan-diff.py --base OLD/llc-dist [--new build/bin/llc-dist] [--keep DIR]
                            [--strip-op-attr NAME ...] [--base-sub FROM=TO ...]

--strip-op-attr NAME (repeatable): a change that adds an op attribute on purpose
(e.g. a collective's `dtype`) changes the program files that carry it; with this
option a differing program-N.json is compared again as JSON with attrs.NAME
removed from every op of both sides, and reported "same modulo attrs NAME" when
nothing else differs.

--base-sub FROM=TO (repeatable): a change of the format's spelling (an op renamed, the
version raised) rewrites the base side's files, text FROM replaced by TO in every
file, before they are compared, e.g. the plan format's version 2:
  --base-sub '"op": "zero"="op": "fill_zero"' --base-sub '"version": 1="version": 2'
(the '=' that splits them is the first one followed by FROM's first character).

Build the old binary from the commit before the change, e.g.
  git worktree add /tmp/base REV && cmake -S /tmp/base -B /tmp/base/build -G Ninja \\
      -DLLCDIST_BUILD_TESTS=OFF && ninja -C /tmp/base/build llc-dist
Exit status 0 when every configuration is byte-identical, 1 otherwise (the
differing files are listed).
"""
import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (name, model, arguments). Tiny models compile in well under a second; the
# large ones exercise the real shapes (vocabulary padding, GQA, 16 stages).
CONFIGS = [
    ("tiny-llama-1dev", "tiny-llama", "--seq-len 64"),
    ("tiny-gpt2-tied-dp2", "tiny-gpt2", "--mesh dp=2 --seq-len 32"),
    ("tiny-llama-tp2-sp", "tiny-llama", "--mesh tp=2 --sequence-parallel --seq-len 64"),
    ("tiny-llama-gpipe", "tiny-llama", "--mesh pp=2 --schedule gpipe --global-batch 4 --seq-len 64"),
    ("tiny-llama-1f1b", "tiny-llama", "--mesh dp=2,pp=2 --global-batch 8 --seq-len 64"),
    ("tiny-llama-interleaved", "tiny-llama",
     "--mesh pp=2 --schedule interleaved --virtual-stages 2 --global-batch 4 --seq-len 64"),
    ("tiny-llama-zbh1", "tiny-llama", "--mesh pp=2 --schedule zb-h1 --global-batch 4 --seq-len 64"),
    ("tiny-llama-zero1", "tiny-llama", "--mesh dp=2 --zero 1 --seq-len 64"),
    ("tiny-llama-zero2-tp2", "tiny-llama", "--mesh dp=2,tp=2 --zero 2 --seq-len 64"),
    ("tiny-llama-zero3-pp2", "tiny-llama", "--mesh dp=2,pp=2 --zero 3 --global-batch 4 --seq-len 64"),
    ("tiny-llama-zero3-keep", "tiny-llama", "--mesh dp=4 --zero 3 --reshard-after-forward false --seq-len 64"),
    ("tiny-llama-selective", "tiny-llama", "--mesh tp=2 --recompute selective --seq-len 64"),
    ("tiny-llama-full-pp2", "tiny-llama", "--mesh pp=2 --recompute full --global-batch 4 --seq-len 64"),
    ("tiny-llama-bf16-tp2-pp2", "tiny-llama",
     "--mesh tp=2,pp=2 --dtype bf16 --global-batch 4 --seq-len 64"),
    ("tiny-gpt2-sgd-cosine", "tiny-gpt2",
     "--optimizer sgd --momentum 0.9 --lr-schedule cosine --warmup 2 --grad-clip 1 --seq-len 32"),
    ("tiny-gpt2-replicated-emb", "tiny-gpt2", "--mesh tp=2 --tp-embeddings replicated --seq-len 32"),
    ("gpt2-dp2-tp4", "gpt2", "--mesh dp=2,tp=4 --seq-len 128"),
    ("gpt2-dp8-zero3", "gpt2", "--mesh dp=8 --zero 3 --seq-len 128"),
    ("llama3-8b-tp8-pp4-zbh1", "llama3-8b",
     "--mesh tp=8,pp=4 --schedule zb-h1 --global-batch 8 --seq-len 1024"),
    ("llama3.1-405b-pp16", "llama3.1-405b", "--mesh dp=2,tp=8,pp=16 --global-batch 64 --seq-len 1024"),
    # Context parallelism: ring and all-to-all, composed with dp (the dp+cp
    # group, ZeRO over it), tp + SP and pp; and the Qwen2 family.
    ("tiny-llama-cp2-ring", "tiny-llama", "--mesh cp=2 --seq-len 64"),
    ("tiny-llama-cp2-a2a", "tiny-llama", "--mesh cp=2 --cp-impl all-to-all --seq-len 64"),
    ("tiny-llama-dp2-cp2-zero1", "tiny-llama", "--mesh dp=2,cp=2 --zero 1 --global-batch 4 --seq-len 64"),
    ("tiny-llama-cp2-tp2-sp", "tiny-llama", "--mesh cp=2,tp=2 --sequence-parallel --seq-len 64"),
    ("tiny-llama-cp2-pp2", "tiny-llama", "--mesh cp=2,pp=2 --global-batch 4 --seq-len 64"),
    ("tiny-gpt2-cp2-a2a-bf16", "tiny-gpt2", "--mesh cp=2 --cp-impl all-to-all --dtype bf16 --seq-len 32"),
    ("tiny-qwen2-dp2-tp2", "tiny-qwen2", "--mesh dp=2,tp=2 --seq-len 32"),
]
# 48 more: both tiny models over gradient accumulation (1, 2 and 8
# microbatches), f32 and bf16, every schedule, ZeRO, SP, recomputation, the
# overlaps and buckets, and each fusion pass off (what a change to the memory
# planner or a fusion pass must keep).
_MORE_FLAGS = [
    ("gb2", "--global-batch 2"),
    ("gb8", "--global-batch 8"),
    ("bf16-gb8", "--dtype bf16 --global-batch 8"),
    ("dp2-gb8-buckets", "--mesh dp=2 --global-batch 8 --grad-bucket-size 2000"),
    ("tp2-sp-overlap", "--mesh tp=2 --sequence-parallel --tp-comm-overlap --dtype bf16"),
    ("pp2-1f1b-gb8", "--mesh pp=2 --global-batch 8"),
    ("pp2-gpipe-bf16", "--mesh pp=2 --schedule gpipe --global-batch 4 --dtype bf16"),
    ("pp2-interleaved-gb8", "--mesh pp=2 --schedule interleaved --virtual-stages 2 --global-batch 8"),
    ("pp2-zbh1-gb8", "--mesh pp=2 --schedule zb-h1 --global-batch 8"),
    ("pp2-overlap-p2p", "--mesh pp=2 --global-batch 4 --overlap-p2p"),
    ("dp2-zero1-overlap", "--mesh dp=2 --zero 1 --overlap-param-gather --global-batch 4"),
    ("dp2-zero2-bf16", "--mesh dp=2 --zero 2 --dtype bf16 --global-batch 8"),
    ("dp2-zero3-prefetch", "--mesh dp=2 --zero 3 --fsdp-prefetch 1 --global-batch 4"),
    ("selective-gb4", "--recompute selective --global-batch 4"),
    ("full-bf16", "--recompute full --dtype bf16"),
    ("3d-sp", "--mesh dp=2,tp=2,pp=2 --sequence-parallel --global-batch 8"),
    ("no-fusion", "--no-fuse-norm --no-fuse-epilogues --no-ce-grad-in-place --no-fuse-classifier --no-packed-qkv "
                  "--no-fuse-embedding --no-fuse-optimizer --global-batch 2"),
    ("sgd-clip", "--optimizer sgd --momentum 0.9 --grad-clip 1 --global-batch 4"),
    ("adamw-cosine", "--lr-schedule cosine --warmup 2 --lr-decay-steps 10 --weight-decay 0.1"),
    ("seq32-mb2", "--seq-len 32 --micro-batch 2 --global-batch 8"),
    ("dp4-gb16", "--mesh dp=4 --global-batch 16"),
    ("tp2-pp2-bf16-gb8", "--mesh tp=2,pp=2 --dtype bf16 --global-batch 8"),
    ("dp2-tp2-zero1", "--mesh dp=2,tp=2 --zero 1"),
    ("pp2-full", "--mesh pp=2 --recompute full --global-batch 8"),
]
CONFIGS += [(f"{model}-{tag}", model, flags) for model in ("tiny-llama", "tiny-gpt2") for tag, flags in _MORE_FLAGS]
XF = [("tiny-llama-xf", "tiny-llama", "--mesh dp=2,tp=2"), ("gpt2-xf", "gpt2", "--mesh dp=2,tp=4")]


def compile_one(exe, model, args, out, emit):
    cmd = [exe, "compile", os.path.join(ROOT, "models", model + ".json"), *args.split(),
           "--emit", emit, "-o", out, "--quiet"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, r.stderr


def apply_base_subs(path, subs):
    """Rewrites the file `path`, or every file under the directory `path`, with the (FROM, TO)
    text substitutions."""
    paths = [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs] if os.path.isdir(path) else [path]
    for p in paths:
        with open(p, encoding="utf-8") as fh:
            text = fh.read()
        new = text
        for a, b in subs:
            new = new.replace(a, b)
        if new != text:
            with open(p, "w", encoding="utf-8") as fh:
                fh.write(new)


def parse_sub(spec):
    """'FROM=TO' split at the '=' that begins TO: the first '=' after which the text is the
    same kind of token as FROM's start (both quoted JSON or both not)."""
    for i, ch in enumerate(spec):
        if ch == "=" and i > 0 and spec[i + 1:i + 2] == spec[0:1]:
            return spec[:i], spec[i + 1:]
    sys.exit(f"plan-diff.py: --base-sub {spec!r}: expected FROM=TO")


def same_tree(a, b):
    """Files that differ (or exist on one side only) between directories a and b."""
    diffs = []
    for root, _, files in os.walk(a):
        for f in files:
            pa = os.path.join(root, f)
            pb = os.path.join(b, os.path.relpath(pa, a))
            if not os.path.exists(pb) or not filecmp.cmp(pa, pb, shallow=False):
                diffs.append(os.path.relpath(pa, a))
    for root, _, files in os.walk(b):
        for f in files:
            pb = os.path.join(root, f)
            if not os.path.exists(os.path.join(a, os.path.relpath(pb, b))):
                diffs.append(os.path.relpath(pb, b) + " (new only)")
    return diffs


def strip_op_attrs(path, names):
    """The program JSON at `path` without attrs `names` on any op."""
    with open(path) as f:
        prog = json.load(f)
    for sub in prog.get("subroutines", []):
        for op in sub.get("ops", []):
            for n in names:
                op.get("attrs", {}).pop(n, None)
    return prog


def same_modulo_attrs(a, b, diffs, names):
    """Whether every differing file is a program that differs only in op attrs `names`."""
    for d in diffs:
        if not (d.startswith("program-") and d.endswith(".json")):
            return False
        if strip_op_attrs(os.path.join(a, d), names) != strip_op_attrs(os.path.join(b, d), names):
            return False
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the old llc-dist binary")
    ap.add_argument("--new", default=os.path.join(ROOT, "build", "bin", "llc-dist"))
    ap.add_argument("--keep", help="keep the plans under this directory")
    ap.add_argument("--strip-op-attr", action="append", default=[], metavar="NAME",
                    help="compare differing programs again without this op attribute")
    ap.add_argument("--base-sub", action="append", default=[], metavar="FROM=TO",
                    help="replace text FROM by TO in the base side's files before comparing")
    args = ap.parse_args()
    subs = [parse_sub(x) for x in args.base_sub]
    for exe in (args.base, args.new):
        if not os.access(exe, os.X_OK):
            sys.exit(f"plan-diff.py: {exe} is not an executable")
    work = args.keep or tempfile.mkdtemp(prefix="llcdist-plan-diff-")
    failed = 0
    try:
        for name, model, flags in [(n, m, a) for n, m, a in CONFIGS] + XF:
            emit = "xf" if (name, model, flags) in XF else "plan"
            outs = []
            for side, exe in (("base", args.base), ("new", args.new)):
                out = os.path.join(work, side, name + (".xf.mlir" if emit == "xf" else ""))
                os.makedirs(os.path.dirname(out), exist_ok=True)
                rc, err = compile_one(exe, model, flags, out, emit)
                outs.append((rc, err, out))
            (rb, eb, ob), (rn, en, on) = outs
            if subs and rb == 0:
                apply_base_subs(ob, subs)
            if rb != 0 or rn != 0:
                same = rb == rn and eb == en
                print(f"{'same' if same else 'DIFF'}  {name}: exit {rb} / {rn}"
                      + ("" if same else f"\n  base: {eb.strip()[:300]}\n  new:  {en.strip()[:300]}"))
                failed += not same
                continue
            if emit == "xf":
                diffs = [] if filecmp.cmp(ob, on, shallow=False) else [os.path.basename(ob)]
            else:
                diffs = same_tree(ob, on)
            if diffs and args.strip_op_attr and emit == "plan" and \
                    same_modulo_attrs(ob, on, diffs, args.strip_op_attr):
                print(f"same  {name} modulo attrs {', '.join(args.strip_op_attr)}: {', '.join(diffs)}")
                continue
            print(f"{'same' if not diffs else 'DIFF'}  {name}" + (f": {', '.join(diffs)}" if diffs else ""))
            failed += bool(diffs)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    total = len(CONFIGS) + len(XF)
    print(f"{total - failed} of {total} configurations byte-identical")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
