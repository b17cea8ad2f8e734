#!/usr/bin/env python3
"""Generate llc-dist's small demo corpus: English-like text from a tiny grammar, byte-tokenized.

Writes, next to this script:
  corpus.txt        the text (ASCII)
  corpus_train.bin  the first ~90% (cut at a paragraph break), llm.c token format
  corpus_val.bin    the rest, llm.c token format

Tokens are bytes (vocab 256). The llm.c format is 256 little-endian int32 header words
([0] magic 20240520, [1] version 1, [2] token count), then the tokens as uint16.

Deterministic: the generator uses its own 64-bit LCG (no dependence on Python's `random`),
so the same script always produces byte-identical files. Standard library only.

    python3 data/make_corpus.py            # regenerate in place
    python3 data/make_corpus.py --check    # verify the shipped files match what the script makes
"""
import argparse
import os
import struct
import sys

TARGET_BYTES = 200_000
MAGIC, VERSION = 20240520, 1


class Lcg:
    """Knuth's MMIX LCG; the high bits are used."""

    def __init__(self, seed):
        self.state = seed & 0xFFFFFFFFFFFFFFFF

    def below(self, n):
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        return (self.state >> 33) % n

    def pick(self, items):
        return items[self.below(len(items))]


NAMES = ["Anna", "Ben", "Clara", "David", "Emma", "Finn", "Grace", "Hugo", "Ivy", "Jack", "Lena", "Max"]
ANIMALS = ["cat", "dog", "bird", "fox", "horse", "rabbit", "duck", "goat", "mouse", "bear"]
COLORS = ["red", "blue", "green", "yellow", "white", "black", "brown", "small", "big", "old"]
THINGS = ["ball", "book", "box", "cup", "hat", "kite", "boat", "key", "apple", "basket"]
PLACES = ["the garden", "the park", "the river", "the forest", "the market", "the hill", "the farm",
          "the school", "the kitchen", "the old bridge"]
TIMES = ["In the morning", "At noon", "In the evening", "One day", "After lunch", "On Sunday"]
FEELINGS = ["happy", "tired", "hungry", "curious", "sleepy", "glad", "calm"]
VERBS_PAST = ["found", "saw", "carried", "painted", "dropped", "lost", "washed", "opened"]
WEATHER = ["The sun was warm.", "It was raining a little.", "The wind was cold.", "The sky was clear.",
           "Clouds moved over the hills."]
NUMBERS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def story(rng):
    a, b = rng.pick(NAMES), rng.pick(NAMES)
    while b == a:
        b = rng.pick(NAMES)
    animal, color, thing = rng.pick(ANIMALS), rng.pick(COLORS), rng.pick(THINGS)
    place, place2 = rng.pick(PLACES), rng.pick(PLACES)
    n = rng.below(8) + 2  # 2..9, so plurals read right
    s = [f"{rng.pick(TIMES)}, {a} went to {place}."]
    s.append(rng.pick(WEATHER))
    s.append(f"{a} {rng.pick(VERBS_PAST)} a {color} {thing} near a {animal}.")
    s.append(f"The {animal} looked at the {color} {thing} and {a} felt {rng.pick(FEELINGS)}.")
    if rng.below(2):
        s.append(f"Then {b} came to {place} with {NUMBERS[n - 1]} {thing}s.")
        s.append(f"\"Hello, {a}!\" said {b}. \"Do you want to play with me?\"")
        s.append(f"\"Yes, {b}!\" said {a}. They played until the {animal} ran to {place2}.")
    else:
        s.append(f"{a} counted: {', '.join(NUMBERS[:n])}.")
        s.append(f"There were {NUMBERS[n - 1]} {animal}s at {place}, and each one had a {color} {thing}.")
    s.append(f"At the end of the day, {a} went home and put the {thing} in the box.")
    return " ".join(s)


def generate():
    rng = Lcg(20240520)
    paragraphs, size = [], 0
    while size < TARGET_BYTES:
        p = story(rng)
        paragraphs.append(p)
        size += len(p) + 2
    return paragraphs


def token_file(text):
    data = text.encode("ascii")
    header = struct.pack("<256i", MAGIC, VERSION, len(data), *([0] * 253))
    return header + struct.pack(f"<{len(data)}H", *data)


def outputs():
    paragraphs = generate()
    cut = (len(paragraphs) * 9) // 10
    train = "\n\n".join(paragraphs[:cut]) + "\n\n"
    val = "\n\n".join(paragraphs[cut:]) + "\n"
    return {"corpus.txt": (train + val).encode("ascii"),
            "corpus_train.bin": token_file(train),
            "corpus_val.bin": token_file(val)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with the files on disk, write nothing")
    parser.add_argument("--out-dir", default=os.path.dirname(os.path.abspath(__file__)))
    args = parser.parse_args()
    bad = 0
    for name, content in outputs().items():
        path = os.path.join(args.out_dir, name)
        if args.check:
            with open(path, "rb") as f:
                same = f.read() == content
            print(f"{name}: {'ok' if same else 'DIFFERS'}")
            bad += not same
        else:
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(content)
            os.replace(tmp, path)
            print(f"wrote {path} ({len(content)} bytes)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
