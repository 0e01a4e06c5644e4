#!/usr/bin/python3
"""spm_ref.py - reference ids for tok_spm.sh from Python's sentencepiece
(Debian python3-sentencepiece: the library Megatron's SentencePieceTokenizer
calls), one line of space-separated ids per JSON-string case.

    spm_ref.py MODEL CASES OUT                 encode_as_ids (Megatron non-legacy)
    spm_ref.py MODEL CASES OUT --legacy T...   Megatron 0.18's legacy text_to_ids
                                               with special tokens T...
    spm_ref.py MODEL CASES OUT --decode        decode_ids(encode_as_ids(case)), as
                                               JSON strings
    spm_ref.py MODEL --info                    "pieces bos eos unk" on stdout

The legacy path is a transcription of the algorithm in
megatron/core/tokenizers/text/libraries/sentencepiece_tokenizer.py
(_text_to_ids with legacy=True, ignore_extra_whitespaces=True), written
from its description: special tokens not in the model get ids from the
piece count on, the earliest occurrence is cut first (ties: the first
token given), and the "▁" piece right after a special token is dropped.
"""
import json
import sys

import sentencepiece


def legacy_ids(sp, text, specials):
    tok_id, id_tok = {}, {}
    size = sp.get_piece_size()
    for t in specials:
        pid = sp.piece_to_id(t)
        if pid == sp.unk_id() and t not in tok_id:
            tok_id[t] = size
            id_tok[size] = t
            size += 1
        elif pid != sp.unk_id():
            tok_id[t] = pid
            id_tok[pid] = t
    sep = sp.piece_to_id("\u2581")
    ids, idx = [], 0
    while True:
        found = {}
        for t in tok_id:
            at = text.find(t, idx)
            if at >= 0:
                found[t] = at - idx
        if not found:
            break
        nxt = min(found, key=found.get)
        at = idx + found[nxt]
        part = sp.encode(text[idx:at])
        if ids and ids[-1] in id_tok and part and part[0] == sep:
            part.pop(0)
        ids.extend(part)
        ids.append(tok_id[nxt])
        idx = at + len(nxt)
    ids.extend(sp.encode_as_ids(text[idx:]))
    return ids


def main():
    sp = sentencepiece.SentencePieceProcessor()
    sp.Load(sys.argv[1])
    if sys.argv[2] == "--info":
        print(sp.get_piece_size(), sp.bos_id(), sp.eos_id(), sp.unk_id())
        return
    cases = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8") if l.strip()]
    rest = sys.argv[4:]
    with open(sys.argv[3], "w", encoding="utf-8") as out:
        for c in cases:
            if rest and rest[0] == "--legacy":
                out.write(" ".join(map(str, legacy_ids(sp, c, rest[1:]))) + "\n")
            elif rest and rest[0] == "--decode":
                out.write(json.dumps(sp.decode_ids(sp.encode_as_ids(c))) + "\n")
            else:
                out.write(" ".join(map(str, sp.encode_as_ids(c))) + "\n")


if __name__ == "__main__":
    main()
