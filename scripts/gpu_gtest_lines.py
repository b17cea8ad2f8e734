#!/usr/bin/env python3
"""One line per GoogleTest case of a --gtest_output=json report (the GPU check, docs/gpu.md).

  gpu_gtest_lines.py REPORT.json LOG [PREFIX]

Prints "PASS PREFIX Suite.Case (time)", "SKIP PREFIX Suite.Case: reason" or "FAIL PREFIX
Suite.Case: message"; with no report (the binary crashed or timed out), one FAIL line with the
tail of LOG. Exits 1 if a case failed or there is no report.
"""
import json
import sys


def tail(path, lines=15):
    try:
        body = [l for l in open(path, errors="replace").read().splitlines() if l.strip()][-lines:]
    except OSError as e:
        return f"\n  | (no log: {e})"
    return "".join(f"\n  | {l[:300]}" for l in body)


def main():
    report_path, log_path = sys.argv[1], sys.argv[2]
    prefix = sys.argv[3] if len(sys.argv) > 3 else "kernel"
    try:
        report = json.load(open(report_path))
    except (OSError, ValueError) as e:
        print(f"FAIL {prefix}s: no test report ({e}); the log ends:{tail(log_path)}")
        return 1
    bad = 0
    for suite in report.get("testsuites", []):
        for t in suite.get("testsuite", []):
            name = f"{suite['name']}.{t['name']}"
            if t.get("failures"):
                bad += 1
                msg = " ".join(f["failure"].replace("\n", " ") for f in t["failures"])[:400]
                print(f"FAIL {prefix} {name}: {msg}")
            elif t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN":
                why = ""
                for s in t.get("skipped", []) or []:
                    why = ": " + str(s.get("message", "")).replace("\n", " ")[:200]
                print(f"SKIP {prefix} {name}{why}")
            else:
                print(f"PASS {prefix} {name} ({t.get('time', '?')})")
    if report.get("tests", 1) == 0:
        print(f"FAIL {prefix}s: the report lists no test")
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
