#!/usr/bin/env python3
"""Every number of every seed replaced by values at the edges of int64, uint64 and double, each
variant run once through a fuzz target (docs/fuzzing.md "Edge sweep").

  python3 fuzz/edge_sweep.py build-fuzz/device_fuzzer fuzz/corpus/device/*

libFuzzer's mutations rarely grow "8" into "9223372036854775807" where nothing compares against
a bound; this sweep does, deterministically. A failing variant is kept in sweep/ beside the
binary (build-fuzz/sweep/<target>_fuzzer/) and named on stdout; the exit status is 1 if any failed. Standard library only."""
import os
import re
import shutil
import subprocess
import sys

EDGES = ["0", "-1", "0.5", "5e-324", "1e19", "1e300", "-1e300", "2147483648", "4294967296",
         "16777217", "4611686018427387904", "9223372036854775807", "-9223372036854775808",
         "18446744073709551615"]
# A JSON number: after ':', '[' or ',' and before ',', ']' or '}'.
NUMBER = re.compile(rb'(?<=[:\[,])(\s*)(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?=\s*[,\]\}])')
KEY = re.compile(rb'"([A-Za-z_0-9]+)"\s*:')
BATCH = 400


def variants(seed, out):
    data = open(seed, "rb").read()
    seen = set()
    for m in NUMBER.finditer(data):
        keys = KEY.findall(data[max(0, m.start() - 60):m.start()])
        # One variant set per (field, value) pair: a plan repeats the same fields thousands of times.
        sig = (keys[-1] if keys else b"", m.group(2))
        if sig in seen:
            continue
        seen.add(sig)
        for e in EDGES:
            path = os.path.join(out, "%s@%d=%s" % (os.path.basename(seed), m.start(2), e))
            with open(path, "wb") as f:
                f.write(data[:m.start(2)] + e.encode() + data[m.end(2):])
            yield path


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    binary, seeds = argv[1], argv[2:]
    out = os.path.join(os.path.dirname(os.path.abspath(binary)), "sweep", os.path.basename(binary))
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    files = [p for s in seeds for p in variants(s, out)]
    failed, i = [], 0
    while i < len(files):
        batch = files[i:i + BATCH]
        # Given files, libFuzzer runs each once ("Running: FILE") and stops at the first failure.
        run = subprocess.run([binary, "-rss_limit_mb=2048", "-malloc_limit_mb=1024", "-timeout=10"]
                             + batch, capture_output=True, text=True, errors="replace")
        if run.returncode == 0:
            i += len(batch)
            continue
        bad = re.findall(r"^Running: (.*)$", run.stderr, re.M)[-1]
        why = [l for l in run.stderr.splitlines() if "runtime error" in l or "ERROR:" in l][:1]
        print("FAILED %s: %s" % (bad, why[0] if why else "exit %d" % run.returncode))
        failed.append(bad)
        i = files.index(bad) + 1
    for f in set(files) - set(failed):
        os.remove(f)
    print("edge sweep of %s: %d variants of %d seeds, %d failed" %
          (os.path.basename(binary), len(files), len(seeds), len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
