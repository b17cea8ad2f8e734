#!/usr/bin/env python3
"""Real text in: text or JSON-lines files -> token files `llc-dist run --data` reads.

Each input is split into documents: a .txt file is one document; a .jsonl
file (or .json with one object per line) is one document per line, its text
under --text-key (default "text"). Every document is encoded with the model's
own tokenizer.json (the Hugging Face `tokenizers` library) and followed by the
end-of-text token, so documents never run into each other. The last
--val-fraction of the documents (at least one when there are two or more) go
to the validation split. Each split is written in llm.c's token format
(docs/plan-format.md "Data"; runtime/include/llcdist/runtime/TokenData.h):
version 1 (uint16 tokens) when every id fits, version 2 (uint32) otherwise,
as OUT/train_000000.bin, OUT/train_000001.bin, ... with at most
--shard-tokens tokens each, and OUT/val_000000.bin ...

A token id at or past the model's vocabulary (--vocab-size, or vocab_size of
--model CONFIG.json) is an error, as are a missing tokenizer, an unknown
end-of-text token, a missing or empty input and a document without text.
Nothing is written unless every input encodes.

usage: prepare_data.py INPUT... --tokenizer DIR|tokenizer.json -o OUT
                       [--model CONFIG.json | --vocab-size N] [--eot TOKEN]
                       [--val-fraction F] [--shard-tokens N] [--text-key K]
                       [--format text|json] [--quiet]
"""
import argparse
import json
import os
import struct
import sys
import time

MAGIC = 20240520
HEADER_INTS = 256
# Tried in order when --eot is not given: GPT-2's, Llama 3's, Llama 2's / Mistral's, Gemma's.
EOT_CANDIDATES = ["<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"]


class Refused(Exception):
    """Bad input: the message names the file or flag and the fix."""


def load_tokenizer(path):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise Refused("the Hugging Face `tokenizers` library is not installed "
                      "(pip install tokenizers; scripts/setup-deps.sh puts it in .venv-hf)")
    file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    if not os.path.isfile(file):
        raise Refused(f"--tokenizer {path}: no tokenizer.json there (give the model's directory or its "
                      "tokenizer.json)")
    try:
        return Tokenizer.from_file(file), file
    except Exception as e:  # the library's parse error
        raise Refused(f"{file}: not a tokenizer.json the tokenizers library reads: {e}")


def eot_id(tok, name, file):
    names = [name] if name else EOT_CANDIDATES
    for n in names:
        i = tok.token_to_id(n)
        if i is not None:
            return n, i
    if name:
        raise Refused(f"--eot {name}: {file} has no such token")
    raise Refused(f"{file} has none of the end-of-text tokens {', '.join(EOT_CANDIDATES)}; name it with --eot")


def vocab_limit(args):
    if args.model:
        try:
            with open(args.model) as f:
                cfg = json.load(f)
        except (OSError, ValueError) as e:
            raise Refused(f"--model {args.model}: cannot read the config: {e}")
        v = cfg.get("vocab_size")
        if not isinstance(v, int) or v <= 0:
            raise Refused(f"--model {args.model}: field 'vocab_size' must be a positive integer")
        return v
    return args.vocab_size


def documents(path, text_key):
    """(where, text) of every document of one input file."""
    if not os.path.isfile(path):
        raise Refused(f"{path}: no such input file")
    if path.endswith((".jsonl", ".json")):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError as e:
                    raise Refused(f"{path}:{n}: not a JSON object per line: {e}")
                if not isinstance(obj, dict) or not isinstance(obj.get(text_key), str):
                    raise Refused(f"{path}:{n}: field '{text_key}' must be a string (the document's text; "
                                  "--text-key names another field)")
                yield f"{path}:{n}", obj[text_key]
    else:
        with open(path, encoding="utf-8") as f:
            yield path, f.read()


class Progress:
    """One line on stderr, redrawn at most 10 times a second: bytes read of the inputs' total."""

    def __init__(self, total, quiet):
        self.total, self.done, self.quiet, self.last = max(total, 1), 0, quiet or not sys.stderr.isatty(), 0.0

    def add(self, n, docs, tokens):
        self.done += n
        now = time.time()
        if self.quiet or now - self.last < 0.1:
            return
        self.last = now
        frac = min(self.done / self.total, 1.0)
        bar = "#" * int(30 * frac)
        sys.stderr.write(f"\r  [{bar:<30}] {100 * frac:5.1f}%  {docs} documents, {tokens} tokens")
        sys.stderr.flush()

    def end(self):
        if not self.quiet:
            sys.stderr.write("\n")


def write_split(out, split, tokens, shard_tokens, wide):
    names = []
    for k, start in enumerate(range(0, max(len(tokens), 1), shard_tokens)):
        part = tokens[start:start + shard_tokens]
        name = os.path.join(out, f"{split}_{k:06d}.bin")
        header = [0] * HEADER_INTS
        header[0], header[1], header[2] = MAGIC, 2 if wide else 1, len(part)
        tmp = name + ".tmp"
        with open(tmp, "wb") as f:
            f.write(struct.pack(f"<{HEADER_INTS}i", *header))
            f.write(struct.pack(f"<{len(part)}{'I' if wide else 'H'}", *part))
        os.replace(tmp, name)
        names.append(name)
    return names


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", metavar="INPUT", help=".txt (one document) or .jsonl (one per line)")
    ap.add_argument("--tokenizer", required=True, help="the model's directory or its tokenizer.json")
    ap.add_argument("-o", "--out", required=True, help="output directory (created)")
    ap.add_argument("--model", help="the model's config.json: ids must be below its vocab_size")
    ap.add_argument("--vocab-size", type=int, help="ids must be below this (instead of --model)")
    ap.add_argument("--eot", help="the end-of-text token between documents (default: the first of "
                    + ", ".join(EOT_CANDIDATES) + " the tokenizer has)")
    ap.add_argument("--val-fraction", type=float, default=0.01, help="share of documents for validation")
    ap.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per shard at most")
    ap.add_argument("--text-key", default="text", help="the JSON-lines field holding the text")
    ap.add_argument("--format", choices=["text", "json"], default="text")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    try:
        if not (0 <= args.val_fraction < 1):
            raise Refused(f"--val-fraction {args.val_fraction}: must be in [0, 1)")
        if args.shard_tokens < 1 or args.shard_tokens > 2**31 - 1:
            raise Refused(f"--shard-tokens {args.shard_tokens}: must be in [1, 2^31 - 1] (the header's count)")
        if args.model and args.vocab_size:
            raise Refused("give --model or --vocab-size, not both")
        limit = vocab_limit(args)
        if limit is not None and limit <= 0:
            raise Refused(f"--vocab-size {limit}: must be positive")
        tok, tok_file = load_tokenizer(args.tokenizer)
        eot_name, eot = eot_id(tok, args.eot, tok_file)
        for p in args.inputs:
            if not os.path.isfile(p):
                raise Refused(f"{p}: no such input file")
        progress = Progress(sum(os.path.getsize(p) for p in args.inputs), args.quiet)
        docs, total = [], 0
        for p in args.inputs:
            for where, text in documents(p, args.text_key):
                if not text.strip():
                    raise Refused(f"{where}: the document has no text")
                ids = tok.encode(text, add_special_tokens=False).ids + [eot]
                docs.append((where, ids))
                total += len(ids)
                progress.add(len(text.encode("utf-8")), len(docs), total)
        progress.end()
        if not docs:
            raise Refused("the inputs hold no document")
        top = max(max(ids) for _, ids in docs)
        if limit is not None:
            for where, ids in docs:
                bad = [i for i in ids if i >= limit]
                if bad:
                    raise Refused(f"{where}: token id {bad[0]} is past the model's vocabulary of {limit} "
                                  f"({tok_file} is not this model's tokenizer?)")
        n_val = int(round(len(docs) * args.val_fraction))
        if args.val_fraction > 0 and n_val == 0 and len(docs) >= 2:
            n_val = 1
        train_docs, val_docs = docs[:len(docs) - n_val], docs[len(docs) - n_val:]
        wide = top > 0xFFFF
        os.makedirs(args.out, exist_ok=True)
        splits = {}
        for split, part in (("train", train_docs), ("val", val_docs)):
            if not part:
                continue
            flat = [i for _, ids in part for i in ids]
            splits[split] = {"documents": len(part), "tokens": len(flat),
                             "shards": write_split(args.out, split, flat, args.shard_tokens, wide)}
    except Refused as e:
        print(f"prepare_data: error: {e}", file=sys.stderr)
        return 1
    summary = {"tokenizer": tok_file, "eot": {"token": eot_name, "id": eot}, "vocab_size": limit,
               "largest_id": top, "token_bytes": 4 if wide else 2, "splits": splits}
    if args.format == "json":
        print(json.dumps(summary, indent=1))
    else:
        print(f"prepare_data: {len(docs)} documents, {sum(s['tokens'] for s in splits.values())} tokens "
              f"(end-of-text {eot_name} = {eot}; largest id {top}; {summary['token_bytes']}-byte tokens)")
        for split, s in splits.items():
            print(f"  {split}: {s['documents']} documents, {s['tokens']} tokens in {len(s['shards'])} "
                  f"shard{'s' if len(s['shards']) != 1 else ''}: {', '.join(os.path.basename(n) for n in s['shards'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
