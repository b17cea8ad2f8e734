"""Breaks a compiled kv-replicated plan (MQA/GQA with tp > kv heads) on purpose,
for the loader's bad-input lit tests.

usage: break-kv-plan.py PLAN_DIR MODE
  replicas       the first replicated param's sharding.replicas becomes 3
                 (does not divide tp = 4)
  group-size     the kv-replica all_reduce's group_size becomes 3
  norm-replicas  grad_norm_sq loses its `replicas` attr (replica_shards stays)
"""
import json, sys
plan, mode = sys.argv[1], sys.argv[2]
if mode == "replicas":
    m = json.load(open(f"{plan}/manifest.json"))
    for p in m["params"]:
        if "replicas" in p.get("sharding", {}):
            p["sharding"]["replicas"] = 3
            break
    json.dump(m, open(f"{plan}/manifest.json", "w"), indent=1)
else:
    prog = json.load(open(f"{plan}/program-0.json"))
    for s in prog["subroutines"]:
        for op in s["ops"]:
            if mode == "group-size" and "group_size" in op["attrs"]:
                op["attrs"]["group_size"] = 3
            if mode == "norm-replicas" and op["op"] == "grad_norm_sq" and "replicas" in op["attrs"]:
                del op["attrs"]["replicas"]
    json.dump(prog, open(f"{plan}/program-0.json", "w"), indent=1)
