#!/usr/bin/env python3
"""txt_to_indexed.py - convert text files to a Megatron indexed dataset
(PREFIX.bin + PREFIX.idx, docs/formats.md section 2) with mtc's
byte- or char-level tokenizer, plus PREFIX.tokenizer holding the tokenizer in
mtc's text form ("byte" or "char:<hex of the chars>") so `mtc` can decode.

    python3 tools/txt_to_indexed.py --input /usr/share/games/fortunes \
        --output-prefix /tmp/fortunes --tokenizer char
    mtc train --data-path /tmp/fortunes ...

Inputs are files or folders; folders are read as mtc reads them (recursively,
entries sorted by name, skipping names starting with '.', strfile indexes
*.dat, and files already seen through a symlink). Each file is one document
(one sequence); documents are concatenated with no separator, so the token
stream equals the one mtc reads from the text itself. Ids are stored as
uint16 (dtype code 8), what Megatron picks for vocabularies under 65500.
Only the Python standard library is needed. Files are written under
temporary names and renamed.
"""
import argparse
import os
import struct
import sys


def list_folder(root, seen, out):
    for name in sorted(os.listdir(root), key=lambda s: s.encode()):
        if name.startswith("."):
            continue
        path = os.path.join(root, name)
        try:
            st = os.stat(path)
        except OSError:
            continue  # dangling symlink
        key = (st.st_dev, st.st_ino)
        if os.path.isdir(path):
            if key not in seen:
                seen.add(key)
                list_folder(path, seen, out)
        elif os.path.isfile(path) and not name.endswith(".dat") and key not in seen:
            seen.add(key)
            out.append(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", nargs="+", required=True, help="text files or folders")
    ap.add_argument("--output-prefix", required=True)
    ap.add_argument("--tokenizer", choices=["byte", "char"], default="char")
    args = ap.parse_args()

    paths, seen = [], set()
    for p in args.input:
        if os.path.isdir(p):
            st = os.stat(p)
            seen.add((st.st_dev, st.st_ino))
            list_folder(p, seen, paths)
        elif os.path.isfile(p):
            paths.append(p)
        else:
            sys.exit(f"txt_to_indexed.py: error: --input {p}: no such file or folder")
    docs = []
    for p in paths:
        with open(p, "rb") as f:
            data = f.read()
        if data:
            docs.append(data)
    if not docs:
        sys.exit("txt_to_indexed.py: error: the inputs hold no text")

    if args.tokenizer == "byte":
        id_of = list(range(256))
        tok_text = "byte"
        n_symbols = 256
    else:
        chars = sorted(set().union(*[set(d) for d in docs]))
        id_of = [-1] * 256
        for i, c in enumerate(chars):
            id_of[c] = i
        tok_text = "char:" + "".join(f"{c:02x}" for c in chars)
        n_symbols = len(chars)
    table = bytes(max(i, 0) for i in id_of)  # byte -> id: one byte for both tokenizers

    prefix = args.output_prefix
    n = len(docs)
    lengths = [len(d) for d in docs]
    pointers, off = [], 0
    for ln in lengths:
        pointers.append(off)
        off += 2 * ln
    idx = bytearray(b"MMIDIDX\x00\x00")
    idx += struct.pack("<Q", 1)  # version
    idx += struct.pack("<B", 8)  # dtype code: uint16
    idx += struct.pack("<Q", n)  # sequence_count
    idx += struct.pack("<Q", n + 1)  # document_count (D + 1)
    idx += struct.pack(f"<{n}i", *lengths)
    idx += struct.pack(f"<{n}q", *pointers)
    idx += struct.pack(f"<{n + 1}q", *range(n + 1))  # one document per sequence

    outputs = []
    try:
        with open(prefix + ".bin.tmp", "wb") as f:
            outputs.append(prefix + ".bin")
            for d in docs:
                ids = d.translate(table)
                f.write(struct.pack(f"<{len(ids)}H", *ids))
        with open(prefix + ".idx.tmp", "wb") as f:
            outputs.append(prefix + ".idx")
            f.write(idx)
        with open(prefix + ".tokenizer.tmp", "w") as f:
            outputs.append(prefix + ".tokenizer")
            f.write(tok_text + "\n")
    except OSError as e:
        for o in outputs:
            if os.path.exists(o + ".tmp"):
                os.remove(o + ".tmp")
        sys.exit(f"txt_to_indexed.py: error: {e}")
    for o in outputs:
        os.replace(o + ".tmp", o)
    print(f"{prefix}.bin/.idx: {n} documents, {sum(lengths)} tokens, "
          f"{args.tokenizer} tokenizer with {n_symbols} symbols")


if __name__ == "__main__":
    main()
