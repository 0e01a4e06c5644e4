#!/usr/bin/env python3
"""A tiny vocabulary in GPT-2's file formats, for tests that run Megatron's
example scripts offline (GPT-2's own files come from npm in other tests):
vocab.json (the 256 bytes in GPT-2's byte-to-unicode spelling, then the
merged tokens, then <|endoftext|>) and merges.txt (a "#version" line, then
one merge per line, rank = order). The merges are the most frequent adjacent
pairs of a short English text, learnt the BPE way, so encoding is not
byte-by-byte. Regenerate with
    python3 tests/data/gpt2_tiny/make_tiny_gpt2.py tests/data/gpt2_tiny
"""
import json
import os
import re
import sys

TEXT = ("the quick brown fox jumps over the lazy dog. a journey of a thousand miles begins with "
        "a single step. the early bird catches the worm, and the second mouse gets the cheese. "
        "there is nothing either good or bad, but thinking makes it so. ") * 4
PAT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")


def byte_alphabet():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def main(out):
    alpha = byte_alphabet()
    vocab = {alpha[b]: i for i, b in enumerate(sorted(alpha, key=lambda b: ord(alpha[b])))}
    words = [[alpha[b] for b in w.encode()] for w in PAT.findall(TEXT)]
    merges = []
    for _ in range(120):
        counts = {}
        for w in words:
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        (a, b), c = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
        if c < 2:
            break
        merges.append((a, b))
        vocab[a + b] = len(vocab)
        for w in words:
            i = 0
            while i < len(w) - 1:
                if w[i] == a and w[i + 1] == b:
                    w[i:i + 2] = [a + b]
                i += 1
    vocab["<|endoftext|>"] = len(vocab)
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(a + " " + b + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
