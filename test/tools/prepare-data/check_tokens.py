#!/usr/bin/env python3
"""Independent check of prepare_data.py's output: reads OUT's shards in order
(llm.c's header, uint16 or uint32 tokens by version), cuts them at the
end-of-text id, decodes every document with the tokenizer and compares it with
the documents of the inputs (a .txt file whole, a .jsonl line's "text").

usage: check_tokens.py OUT TOKENIZER.json EOT_ID INPUT... [--words]
With --words (a word-level tokenizer keeps no whitespace) documents compare
as their whitespace-separated words.
"""
import glob
import json
import os
import struct
import sys

from tokenizers import Tokenizer


def read(path):
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        assert header[0] == 20240520, path
        width = {1: "H", 2: "I"}[header[1]]
        n = header[2]
        ids = list(struct.unpack(f"<{n}{width}", f.read()))
        assert len(ids) == n
        return ids


def main():
    words = "--words" in sys.argv
    argv = [a for a in sys.argv if a != "--words"]
    out, tok_file, eot = argv[1], argv[2], int(argv[3])
    want = []
    for p in argv[4:]:
        if p.endswith(".jsonl"):
            want += [json.loads(line)["text"] for line in open(p) if line.strip()]
        else:
            want.append(open(p).read())
    tok = Tokenizer.from_file(tok_file)
    got = []
    for split in ("train", "val"):
        shards = sorted(glob.glob(os.path.join(out, f"{split}_*.bin")))
        if not shards:
            continue  # --val-fraction 0
        ids = [i for s in shards for i in read(s)]
        assert ids and ids[-1] == eot, f"{split} does not end with the end-of-text token"
        doc = []
        for i in ids:
            if i == eot:
                got.append(tok.decode(doc))
                doc = []
            else:
                doc.append(i)
    if words:
        got, want = [g.split() for g in got], [w.split() for w in want]
    if got != want:
        print(f"MISMATCH: {len(got)} documents decoded, {len(want)} in the inputs")
        for k, (g, w) in enumerate(zip(got, want)):
            if g != w:
                print(f"  document {k}: {g[:60]!r} != {w[:60]!r}")
                break
        return 1
    print(f"decoded {len(got)} documents: all equal to the inputs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
