#!/usr/bin/env python3
"""make_hf_tokenizer.py - writes a Hugging Face tokenizer.json for GPT-2 from
GPT-2's vocab.json (encoder.json) and merges.txt (vocab.bpe), in the shape the
`tokenizers` library saves for "gpt2": a BPE model, ByteLevel pre-tokenizer
and decoder, and <|endoftext|> as an added special token. Merges are written
as "a b" strings, or as ["a", "b"] pairs with --pair-merges (the newer form).
With --model-type T the model's type is replaced by T (to test refusal).
Standard library only.

    python3 make_hf_tokenizer.py VOCAB MERGES OUT [--pair-merges] [--model-type T]
"""
import argparse
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("vocab")
    ap.add_argument("merges")
    ap.add_argument("out")
    ap.add_argument("--pair-merges", action="store_true")
    ap.add_argument("--model-type", default="BPE")
    a = ap.parse_args()
    with open(a.vocab, encoding="utf-8") as f:
        vocab = json.load(f)
    merges = []
    with open(a.merges, encoding="utf-8") as f:
        for i, line in enumerate(f):
            line = line.rstrip("\n")
            if (i == 0 and line.startswith("#version")) or not line:
                continue
            left, right = line.split(" ")
            merges.append([left, right] if a.pair_merges else left + " " + right)
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
