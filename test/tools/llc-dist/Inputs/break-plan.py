"""Breaks a compiled pipeline plan on purpose, for the verifier's lit tests.

usage: break-plan.py PLAN_DIR MODE
  swap-tied      stage 1's optimizer receives the tied embedding's new value
                 before it sends its gradient (a swapped send/recv order)
  drop-recv      stage 1's forward no longer receives its input (a missing recv)
  skip-stage-sum stage 1's gradient norm no longer sums over pp (its all_reduce
                 over pp dropped: a collective skipped on the ranks of one stage)
  resize-send    stage 0's forward sends a buffer of another size
The plan stays loadable: only the communication is wrong.
"""
import json
import sys

plan, mode = sys.argv[1], sys.argv[2]


def load(i):
    with open(f"{plan}/program-{i}.json") as f:
        return json.load(f)


def save(i, prog):
    with open(f"{plan}/program-{i}.json", "w") as f:
        json.dump(prog, f, indent=1)


def sub(prog, prefix):
    return next(s for s in prog["subroutines"] if s["name"].startswith(prefix))


if mode == "swap-tied":
    prog = load(1)
    ops = sub(prog, "optimizer")["ops"]
    last = ops.pop()
    assert last["op"] == "recv", last
    ops.insert(0, last)
    save(1, prog)
elif mode == "drop-recv":
    prog = load(1)
    ops = sub(prog, "forward")["ops"]
    ops[:] = [o for o in ops if o["op"] != "recv"]
    save(1, prog)
elif mode == "skip-stage-sum":
    prog = load(1)
    ops = sub(prog, "optimizer")["ops"]
    ops[:] = [o for o in ops
              if not (o["op"] == "all_reduce" and o["attrs"]["axis"] == "pp"
                      and prog["buffers"][o["args"]["x"][0]]["name"] == "grad_norm.sq")]
    save(1, prog)
elif mode == "resize-send":
    prog = load(0)
    send = next(o for o in sub(prog, "forward")["ops"] if o["op"] == "send")
    size = prog["buffers"][send["args"]["x"]]["bytes"]
    other = next(b for b in prog["buffers"]
                 if b["dtype"] == "f32" and b["bytes"] != size and b["kind"] == "param")
    send["args"]["x"] = other["id"]
    save(0, prog)
else:
    sys.exit(f"unknown mode {mode}")
