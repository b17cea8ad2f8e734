"""Writes a plan_fuzzer input (fuzz/plan_fuzzer.cpp: manifest.json's text, a NUL byte,
program-0.json's text) as the plan directory it stands for: split-fuzz-plan.py INPUT DIR."""
import os
import sys

manifest, _, program = open(sys.argv[1], "rb").read().partition(b"\0")
os.makedirs(sys.argv[2], exist_ok=True)
with open(os.path.join(sys.argv[2], "manifest.json"), "wb") as f:
    f.write(manifest)
with open(os.path.join(sys.argv[2], "program-0.json"), "wb") as f:
    f.write(program)
