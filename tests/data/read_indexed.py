#!/usr/bin/env python3
"""read_indexed.py - reads a Megatron indexed dataset (PREFIX.bin + PREFIX.idx)
with the standard library only, written from Megatron core's
indexed_dataset.py (_IndexWriter / _IndexReader), independently of mtc's C
reader. Checks every invariant Megatron's writer guarantees, then either
prints the documents as JSON or compares them with an expected file.

    read_indexed.py PREFIX [--expect DOCS.json] [--vocab-size N] [--rewrite OUT]

DOCS.json: a list of documents, each a list of sequences, each a list of
ids. --vocab-size N also checks the dtype is Megatron's optimal_dtype(N)
(uint16 below 65500, else int32). --rewrite OUT writes the documents again
as Megatron's IndexedDatasetBuilder does (add_document per document, then
finalize), to OUT.bin/.idx, so a test can compare bytes. Exit 0 when all
holds, 1 otherwise.
"""
import argparse
import json
import os
import struct
import sys

MAGIC = b"MMIDIDX\x00\x00"
# Megatron's DType codes: struct format and item size
DTYPES = {1: ("B", 1), 2: ("b", 1), 3: ("h", 2), 4: ("i", 4), 5: ("q", 8), 6: ("d", 8),
          7: ("f", 4), 8: ("H", 2)}


def fail(msg):
    print("read_indexed: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def read(prefix):
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    with open(prefix + ".bin", "rb") as f:
        data = f.read()
    if idx[:9] != MAGIC:
        fail("bad magic %r" % idx[:9])
    (version,) = struct.unpack_from("<Q", idx, 9)
    (code,) = struct.unpack_from("<B", idx, 17)
    seq_count, doc_count = struct.unpack_from("<QQ", idx, 18)
    if version != 1:
        fail("version %d" % version)
    if code not in DTYPES:
        fail("dtype code %d" % code)
    fmt, size = DTYPES[code]
    off = 34
    lengths = struct.unpack_from("<%di" % seq_count, idx, off)
    off += 4 * seq_count
    pointers = struct.unpack_from("<%dq" % seq_count, idx, off)
    off += 8 * seq_count
    doc_idx = struct.unpack_from("<%dq" % doc_count, idx, off)
    off += 8 * doc_count
    if off != len(idx):
        fail(".idx has %d bytes, header accounts for %d (no sequence modes expected)"
             % (len(idx), off))
    ptr = 0
    for i, (n, p) in enumerate(zip(lengths, pointers)):
        if p != ptr:
            fail("sequence_pointers[%d] = %d, expected %d" % (i, p, ptr))
        ptr += n * size
    if ptr != len(data):
        fail(".bin has %d bytes, lengths say %d" % (len(data), ptr))
    if not doc_idx or doc_idx[0] != 0 or doc_idx[-1] != seq_count or \
            any(b < a for a, b in zip(doc_idx, doc_idx[1:])):
        fail("document_indices %r... not 0 .. %d non-decreasing" % (doc_idx[:8], seq_count))
    seqs = [list(struct.unpack_from("<%d%s" % (n, fmt), data, p))
            for n, p in zip(lengths, pointers)]
    docs = [seqs[a:b] for a, b in zip(doc_idx, doc_idx[1:])]
    return code, docs


def rewrite(out, code, docs):
    """IndexedDatasetBuilder(out.bin, dtype).add_document(...) per document; finalize."""
    fmt, size = DTYPES[code]
    lengths, doc_idx = [], [0]
    with open(out + ".bin", "wb") as f:
        for doc in docs:
            ids = [i for seq in doc for i in seq]
            f.write(struct.pack("<%d%s" % (len(ids), fmt), *ids))
            lengths.extend(len(seq) for seq in doc)
            doc_idx.append(len(lengths))
    pointers, ptr = [], 0
    for n in lengths:
        pointers.append(ptr)
        ptr += n * size
    with open(out + ".idx", "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(struct.pack("<%di" % len(lengths), *lengths))
        f.write(struct.pack("<%dq" % len(pointers), *pointers))
        f.write(struct.pack("<%dq" % len(doc_idx), *doc_idx))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("prefix")
    ap.add_argument("--expect")
    ap.add_argument("--vocab-size", type=int)
    ap.add_argument("--rewrite")
    a = ap.parse_args()
    code, docs = read(a.prefix)
    if a.rewrite:
        rewrite(a.rewrite, code, docs)
    if a.vocab_size is not None:
        want = 8 if a.vocab_size < 65500 else 4
        if code != want:
            fail("dtype code %d, Megatron picks %d for vocabulary %d" % (code, want, a.vocab_size))
    if a.expect:
        with open(a.expect) as f:
            expect = json.load(f)
        if len(docs) != len(expect):
            fail("%d documents, expected %d" % (len(docs), len(expect)))
        for i, (got, want) in enumerate(zip(docs, expect)):
            if got != want:
                fail("document %d: %s, expected %s" % (i, str(got)[:200], str(want)[:200]))
        n = sum(len(s) for d in docs for s in d)
        print("read_indexed: %s: %d documents, %d tokens, dtype code %d: as expected"
              % (os.path.basename(a.prefix), len(docs), n, code))
    else:
        json.dump({"dtype_code": code, "documents": docs}, sys.stdout)
        print()


if __name__ == "__main__":
    main()
