#!/usr/bin/env python3
"""Trains a small byte-level BPE tokenizer in memory on TEXT and saves it as
OUT/tokenizer.json (the `tokenizers` library): VOCAB ids, "<|endoftext|>"
the first of them. With --words, a word-level tokenizer of VOCAB ids instead
("w0" ... "w<VOCAB-2>" split on whitespace, "<|endoftext|>" the last id), for
vocabularies past 65,536 ids. Test inputs for scripts/prepare_data.py.

usage: make_tokenizer.py TEXT OUT VOCAB [--words]
"""
import os
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers


def main():
    text, out, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3])  # TEXT unused with --words
    if "--words" in sys.argv[4:]:
        words = {f"w{i}": i for i in range(vocab - 1)}
        words["<|endoftext|>"] = vocab - 1
        tok = Tokenizer(models.WordLevel(words, unk_token="<|endoftext|>"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tok.add_special_tokens(["<|endoftext|>"])
        os.makedirs(out, exist_ok=True)
        tok.save(os.path.join(out, "tokenizer.json"))
        print(f"tokenizer: {tok.get_vocab_size()} ids, <|endoftext|> = {tok.token_to_id('<|endoftext|>')}")
        return
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    with open(text, encoding="utf-8") as f:
        tok.train_from_iterator([f.read()], trainer=trainer)
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    print(f"tokenizer: {tok.get_vocab_size()} ids, <|endoftext|> = {tok.token_to_id('<|endoftext|>')}")


if __name__ == "__main__":
    main()
