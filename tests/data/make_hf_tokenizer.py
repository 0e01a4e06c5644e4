#!/usr/bin/env python3
"""make_hf_tokenizer.py - writes a Hugging Face tokenizer.json for GPT-2 from
GPT-2's vocab.json (encoder.json) and merges.txt (vocab.bpe), in the shape the
`tokenizers` library saves for "gpt2": a BPE model, ByteLevel pre-tokenizer
and decoder, and <|endoftext|> as an added special token. Merges are written
as "a b" strings, or as ["a", "b"] pairs with --pair-merges (the newer form).
With --model-type T the model's type is replaced by T (to test refusal).
With --tiny it needs no files: a byte-level vocabulary of the 256 bytes, 45
merges of common English pairs and <|endoftext|> (id 300). Standard library
only.

    python3 make_hf_tokenizer.py VOCAB MERGES OUT [--pair-merges] [--model-type T]
    python3 make_hf_tokenizer.py --tiny OUT
"""
import argparse
import json


def byte_spelling():
    """GPT-2's bytes_to_unicode: byte -> the character that spells it."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + \
        list(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def tiny():
    spell = byte_spelling()
    vocab = {spell[b]: b for b in range(256)}
    pairs = ["t h", "th e", "\u0120 t", "\u0120t he", "i n", "e r", "a n", "o n", "r e",
             "\u0120 a", "e n", "o r", "\u0120 w", "e s", "i s", "\u0120 s", "a t", "l l",
             "h e", "o u", "e d", "i t", "\u0120 o", "\u0120 c", "\u0120 b", "\u0120 f",
             "\u0120 i", "in g", "\u0120 m", "o f", "\u0120 the", "\u0120 of", "\u0120 in",
             "l o", "he ll", "hell o", "w or", "wor l", "worl d", "\u0120 wor", "e v", "r y",
             "\u0120\u0120 \u0120", "\u0120 \u0120", "o w"]
    merges = []
    for p in pairs:
        a, b = p.split(" ")
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
        merges.append(a + " " + b)
    assert len(vocab) == 300, len(vocab)
    vocab["<|endoftext|>"] = 300
    return vocab, merges


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+", help="VOCAB MERGES OUT, or OUT with --tiny")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--pair-merges", action="store_true")
    ap.add_argument("--model-type", default="BPE")
    a = ap.parse_args()
    if a.tiny:
        (a.out,) = a.files
        vocab, merges = tiny()
    else:
        a.vocab, a.merges, a.out = a.files
        with open(a.vocab, encoding="utf-8") as f:
            vocab = json.load(f)
        merges = []
        with open(a.merges, encoding="utf-8") as f:
            for i, line in enumerate(f):
                line = line.rstrip("\n")
                if (i == 0 and line.startswith("#version")) or not line:
                    continue
                merges.append(line)
    merges = [m.split(" ") if a.pair_merges else m for m in merges]
    eod = vocab["<|endoftext|>"]
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": eod, "content": "<|endoftext|>", "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": True,
                          "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": a.model_type, "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": merges},
    }
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
