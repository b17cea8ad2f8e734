"""Rewrites a compiled data-parallel plan (llc-dist compile --mesh dp=N) into an asynchronous one
(docs/plan-format.md "Asynchronous plans"): the optimizer's gradient all-reduce (its first op) is
started on queue "comm" with token 0. Mode "ok" waits for it right after the loss all-reduce (before
grad_norm, its first reader); mode "late" waits only at the end of the optimizer, after the updates
that read it.

usage: make-async-plan.py PLAN_DIR OUT_DIR ok|late
"""
import json
import shutil
import sys

src, out, mode = sys.argv[1], sys.argv[2], sys.argv[3]
shutil.copytree(src, out, dirs_exist_ok=True)
with open(f"{out}/manifest.json") as f:
    manifest = json.load(f)
manifest["features"].append("async")
with open(f"{out}/manifest.json", "w") as f:
    json.dump(manifest, f, indent=1)
for ref in manifest["programs"]:
    path = f"{out}/{ref['file']}"
    with open(path) as f:
        prog = json.load(f)
    prog["queues"] = ["compute", "comm"]
    opt = next(s for s in prog["subroutines"] if s["name"] == "optimizer")
    ops = opt["ops"]
    assert ops[0]["op"] == "all_reduce" and ops[1]["op"] == "all_reduce", "unexpected optimizer"
    ops[0]["token"] = 0
    ops[0]["queue"] = "comm"
    wait = {"op": "wait", "token": 0}
    if mode == "ok":
        ops.insert(2, wait)
    else:
        ops.append(wait)
    with open(path, "w") as f:
        json.dump(prog, f, indent=1)
