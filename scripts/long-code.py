#!/usr/bin/env python3
"""Functions over 150 lines and files over 800 in lib/, runtime/src and tools/ (issue #31).

A function is a brace block at function level: its opening text (since the
previous `;`, `{` or `}` at that depth) has a parameter list and is not a
class, struct, union, enum, namespace or initializer; lambdas and local classes
count in the function that holds them. Its length is the lines from the line
of its name to its closing brace. A file or function may stay long with a
one-line reason in the file: `// long-file: <reason>` anywhere in the file, or
`// long-function: <reason>` on one of the five lines above the function.

The functions that were long when the check came in are listed with their
lengths in scripts/long-code-baseline.json: each may only shrink (a ratchet
until it is split, issue #31); a new long function or file needs a reason.

usage: scripts/long-code.py [--root DIR] [--format text|json] [--check]
                            [--write-baseline]
  --check: exit 1 when a long file, or a long function neither reasoned nor
  within its baseline length, is found (the ctest long-code runs this)
  --write-baseline: record today's unreasoned long functions as the baseline
"""
import argparse
import json
import os
import re
import sys

MAX_FUNCTION = 150
MAX_FILE = 800
DIRS = ["lib", "runtime/src", "tools"]
EXTS = (".cpp", ".cc", ".h", ".cu", ".cuh")
NOT_FUNCTION = re.compile(r"^\s*(template\s*<[^{]*>\s*)?(class|struct|union|enum|namespace|extern\s+\"C\")\b")


def strip(text):
    """The text with comments, string and character literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(n, j + 1)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text):
    """(name, first line, last line) of each function-level block, 1-based."""
    code = strip(text)
    found = []
    # Per open brace: (kind, start of its opening text); kind "scope" (namespace,
    # class, extern) keeps looking inside, "function" and "other" do not.
    stack = []
    stmt_start = 0
    line_of = [0] * (len(code) + 1)
    line = 1
    for i, ch in enumerate(code):
        line_of[i] = line
        if ch == "\n":
            line += 1
    line_of[len(code)] = line
    inside_function = 0
    for i, ch in enumerate(code):
        if ch == ";" and not inside_function:
            stmt_start = i + 1
        elif ch == "{":
            if inside_function:
                inside_function += 1
                continue
            head = code[stmt_start:i]
            kind = "other"
            if NOT_FUNCTION.search(head) or re.search(r"\bnamespace\b", head):
                kind = "scope"
            elif "(" in head and ")" in head and not re.search(r"=\s*$", head.strip()) and \
                    not head.strip().endswith(","):
                kind = "function"
            if kind == "function":
                m = re.search(r"([~\w:<>]+)\s*\([^()]*(\([^()]*\)[^()]*)*\)[^()]*$", head)
                name = m.group(1) if m else head.strip().split("(")[0].split()[-1]
                first = line_of[stmt_start + len(head) - len(head.lstrip())]
                stack.append(("function", name, first))
                inside_function = 1
            else:
                stack.append((kind, None, None))
            stmt_start = i + 1
        elif ch == "}":
            if inside_function:
                inside_function -= 1
                if inside_function == 0:
                    _, name, first = stack.pop()
                    found.append((name, first, line_of[i]))
                    stmt_start = i + 1
                continue
            if stack:
                stack.pop()
            stmt_start = i + 1
    return found


def scan(root):
    files, funcs = [], []
    for d in DIRS:
        for dirpath, _, names in os.walk(os.path.join(root, d)):
            for n in sorted(names):
                if not n.endswith(EXTS):
                    continue
                path = os.path.join(dirpath, n)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                lines = text.split("\n")
                nlines = len(lines) - (1 if text.endswith("\n") else 0)
                if nlines > MAX_FILE:
                    m = re.search(r"//\s*long-file:\s*(\S.*)", text)
                    files.append({"file": rel, "lines": nlines, "reason": m.group(1).strip() if m else None})
                for name, first, last in functions(text):
                    length = last - first + 1
                    if length <= MAX_FUNCTION:
                        continue
                    reason = None
                    for k in range(max(0, first - 6), first):
                        m = re.search(r"//\s*long-function:\s*(\S.*)", lines[k])
                        if m:
                            reason = m.group(1).strip()
                    funcs.append({"file": rel, "function": name, "line": first, "lines": length, "reason": reason})
    files.sort(key=lambda f: -f["lines"])
    funcs.sort(key=lambda f: -f["lines"])
    return files, funcs


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=root)
    ap.add_argument("--format", choices=["text", "json"], default="text")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--write-baseline", action="store_true")
    args = ap.parse_args()
    files, funcs = scan(args.root)
    baseline_path = os.path.join(args.root, "scripts", "long-code-baseline.json")
    if args.write_baseline:
        base = {f"{f['file']}:{f['function']}": f["lines"] for f in funcs if not f["reason"]}
        with open(baseline_path, "w") as out:
            json.dump(base, out, indent=1, sort_keys=True)
            out.write("\n")
    baseline = {}
    if os.path.exists(baseline_path):
        with open(baseline_path) as f:
            baseline = json.load(f)
    for f in funcs:
        allowed = baseline.get(f"{f['file']}:{f['function']}")
        f["baseline"] = allowed
    if args.format == "json":
        print(json.dumps({"max_file_lines": MAX_FILE, "max_function_lines": MAX_FUNCTION, "files": files,
                          "functions": funcs}, indent=1))
    else:
        print(f"files over {MAX_FILE} lines: {len(files)}")
        for f in files:
            print(f"  {f['lines']:5d}  {f['file']}" + (f"  ({f['reason']})" if f["reason"] else ""))
        print(f"functions over {MAX_FUNCTION} lines: {len(funcs)}")
        for f in funcs:
            print(f"  {f['lines']:5d}  {f['file']}:{f['line']}  {f['function']}" +
                  (f"  ({f['reason']})" if f["reason"] else
                   f"  (baseline {f['baseline']})" if f["baseline"] else "  (new)"))
    found = {f"{f['file']}:{f['function']}" for f in funcs}
    stale = sorted(k for k in baseline if k not in found)
    bad = [f for f in files if not f["reason"]]
    bad += [f for f in funcs if not f["reason"] and (f["baseline"] is None or f["lines"] > f["baseline"])]
    if args.check and stale:
        for k in stale:
            print(f"long-code: {k}: in scripts/long-code-baseline.json but no longer over {MAX_FUNCTION} lines "
                  f"(or renamed): remove it from the baseline", file=sys.stderr)
    if args.check and (bad or stale):
        for f in bad:
            where = f"{f['file']}:{f['line']} {f['function']}" if "function" in f else f["file"]
            print(f"long-code: {where}: {f['lines']} lines" +
                  (f", over its baseline {f['baseline']}" if f.get("baseline") else ""), file=sys.stderr)
        if bad:
            print(f"long-code: {len(bad)} too long: split them, or say why (`// long-file: ...` in the file, "
                  f"`// long-function: ...` on the lines above the function)", file=sys.stderr)
        return 1
    if args.check:
        print(f"long-code: no file over {MAX_FILE} lines; {len(funcs)} functions over {MAX_FUNCTION}, "
              f"none new or grown")
    return 0


if __name__ == "__main__":
    sys.exit(main())
