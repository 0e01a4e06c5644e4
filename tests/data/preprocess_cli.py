#!/usr/bin/env python3
"""preprocess_cli.py - `mtc preprocess` end to end (standard library only).

1. NullTokenizer on 1500 documents whose ids are a formula of the document
   number (some empty, some lists of sentences with an empty one): the .bin/
   .idx read back by read_indexed.py (written from Megatron's
   indexed_dataset.py, not from mtc) hold exactly the expected documents,
   sequences and eod, and the bytes equal those Megatron's IndexedDatasetBuilder
   writes for them (read_indexed.py --rewrite); --workers 1 and 3 write the same.
2. A vocabulary of 70000 gives int32 ids (Megatron's optimal_dtype), and
   --json-keys text title writes one dataset per key.
3. A byte-level BPE tokenizer.json (HuggingFaceTokenizer) on Unicode text:
   each document's ids equal `mtc tokenize` of its text plus eod.
4. mtc's own reader trains two iterations on the output (--data-path).
5. Bad input (missing file, bad JSON with its line number, missing key,
   missing flags) exits 2 with one line, and leaves no output behind.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

MTC = os.environ.get("MTC", "build/mtc")
HERE = os.path.dirname(os.path.abspath(__file__))
fails = 0


def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("FAIL: " + what)


def run(args, **kw):
    return subprocess.run([MTC] + args, capture_output=True, text=True, **kw)


def null_docs(n, vocab):
    """(jsonl lines, expected documents with --append-eod)."""
    lines, docs = [], []
    eod = vocab - 1
    for d in range(n):
        k = d % 6  # 0: empty document
        ids = [(d * 31 + 7 * j) % (vocab - 1) for j in range(k)]
        if d % 10 == 3 and k >= 2:  # a list of sentences, one of them empty
            sents = [ids[:1], [], ids[1:]]
            lines.append(json.dumps({"text": [" ".join(map(str, s)) for s in sents], "id": d}))
            seqs = [s for s in sents if s]
        else:
            lines.append(json.dumps({"text": " ".join(map(str, ids)), "title": str(d % vocab)}))
            seqs = [ids] if ids else []
        if seqs:
            seqs[-1] = seqs[-1] + [eod]
        docs.append(seqs)
        if d == 700:
            lines.append("")  # a blank line is skipped
    return lines, docs


def read_back(prefix, expect, vocab):
    """The expected documents, and the bytes Megatron's builder writes for them."""
    with open(expect + ".json", "w") as f:
        json.dump(expect_docs[expect], f)
    r = subprocess.run([sys.executable, os.path.join(HERE, "read_indexed.py"), prefix,
                        "--expect", expect + ".json", "--vocab-size", str(vocab),
                        "--rewrite", expect + "_megatron"], capture_output=True, text=True)
    print(r.stdout.strip())
    check(r.returncode == 0, "read_indexed %s: %s" % (prefix, r.stderr.strip()))
    for ext in (".bin", ".idx"):
        with open(prefix + ext, "rb") as a, open(expect + "_megatron" + ext, "rb") as b:
            check(a.read() == b.read(), "%s%s differs from Megatron's builder's bytes" % (prefix, ext))


def files_of(prefix):
    return sorted(glob.glob(prefix + "*"))


with tempfile.TemporaryDirectory() as tmp:
    expect_docs = {}
    # 1. NullTokenizer, closed form
    lines, docs = null_docs(1500, 1000)
    inp = os.path.join(tmp, "null.jsonl")
    with open(inp, "w") as f:
        f.write("\n".join(lines) + "\n")
    out = {}
    for w in (1, 3):
        prefix = os.path.join(tmp, "null%d" % w)
        r = run(["preprocess", "--input", inp, "--output-prefix", prefix, "--tokenizer-type",
                 "NullTokenizer", "--vocab-size", "1000", "--append-eod", "--workers", str(w),
                 "--log-interval", "500"])
        check(r.returncode == 0, "preprocess null workers=%d: %s" % (w, r.stderr))
        check("processed 1000 documents" in r.stderr, "progress line: %r" % r.stderr[-300:])
        out[w] = prefix + "_text_document"
        check(files_of(prefix) == [out[w] + ".bin", out[w] + ".idx", out[w] + ".tokenizer"],
              "outputs %s" % files_of(prefix))
        with open(out[w] + ".tokenizer") as f:  # what mtc train decodes the ids with
            check(f.read() == "null:1000\n", "the .tokenizer beside the dataset")
    expect_docs[os.path.join(tmp, "null")] = docs
    read_back(out[1], os.path.join(tmp, "null"), 1000)
    for ext in (".bin", ".idx"):
        with open(out[1] + ext, "rb") as a, open(out[3] + ext, "rb") as b:
            check(a.read() == b.read(), "workers 1 and 3 differ in " + ext)

    # 2. int32 ids, two keys
    inp2 = os.path.join(tmp, "wide.jsonl")
    wide = [[69999, 0, 65535 + d] for d in range(40)]
    with open(inp2, "w") as f:
        for d, ids in enumerate(wide):
            f.write(json.dumps({"text": " ".join(map(str, ids)), "title": str(d)}) + "\n")
    prefix = os.path.join(tmp, "wide")
    r = run(["preprocess", "--input", inp2, "--output-prefix", prefix, "--tokenizer-type",
             "NullTokenizer", "--vocab-size", "70000", "--json-keys", "text", "title",
             "--workers", "2"])
    check(r.returncode == 0, "preprocess wide: %s" % r.stderr)
    expect_docs[os.path.join(tmp, "wide")] = [[ids] for ids in wide]
    expect_docs[os.path.join(tmp, "title")] = [[[d]] for d in range(40)]
    read_back(prefix + "_text_document", os.path.join(tmp, "wide"), 70000)
    read_back(prefix + "_title_document", os.path.join(tmp, "title"), 70000)

    # 3. byte-level BPE from a tokenizer.json, Unicode text
    tj = os.path.join(tmp, "tokenizer.json")
    r = subprocess.run([sys.executable, os.path.join(HERE, "make_hf_tokenizer.py"), "--tiny",
                        tj], capture_output=True, text=True)
    check(r.returncode == 0, "make_hf_tokenizer --tiny: " + r.stderr)
    texts = ["Hello world, the theory of everything.", "", "héllo wörld 日本語 🎉 e\u0301",
             "  spaces   and\n\nnewlines\t", "it's the <|endoftext|> inside", "123 4567"]
    texts = texts * 50
    inp3 = os.path.join(tmp, "text.jsonl")
    with open(inp3, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    prefix = os.path.join(tmp, "bpe")
    hf = ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", tj]
    r = run(["preprocess", "--input", inp3, "--output-prefix", prefix, "--append-eod",
             "--workers", "2"] + hf)
    check(r.returncode == 0, "preprocess bpe: %s" % r.stderr)
    cases = os.path.join(tmp, "cases.jsonl")
    with open(cases, "w", encoding="utf-8") as f:
        f.write("".join(json.dumps(t) + "\n" for t in texts))
    r = run(["tokenize", "--json-lines", "--input", cases] + hf)
    check(r.returncode == 0, "tokenize bpe: %s" % r.stderr)
    ids = [[int(x) for x in line.split()] for line in r.stdout.split("\n")[:len(texts)]]
    eod = 300  # make_hf_tokenizer --tiny puts <|endoftext|> last
    expect_docs[os.path.join(tmp, "bpe")] = [[i + [eod]] if i else [] for i in ids]
    check(any(eod in i for i in ids), "<|endoftext|> in the text is the eod id")
    read_back(prefix + "_text_document", os.path.join(tmp, "bpe"), 301)

    # 4. mtc's reader trains on it
    r = run(["train", "--data-path", out[1], "--num-layers", "1", "--hidden-size", "16",
             "--num-attention-heads", "2", "--seq-length", "16", "--micro-batch-size", "2",
             "--global-batch-size", "2", "--train-iters", "2", "--eval-iters", "0",
             "--log-interval", "1", "--split", "1,0,0"])
    check(r.returncode == 0 and "iteration" in r.stdout + r.stderr,
          "train on preprocess output: %s %s" % (r.stdout[-400:], r.stderr[-400:]))

    # 5. bad input: exit 2, one line, nothing left behind
    bad = os.path.join(tmp, "bad.jsonl")
    with open(bad, "w") as f:
        f.write('{"text": "1 2"}\n{"text": "3"}\n{"text": "4" oops\n{"text": "5"}\n')
    nokey = os.path.join(tmp, "nokey.jsonl")
    with open(nokey, "w") as f:
        f.write('{"text": "1 2"}\n{"body": "3"}\n')
    notstr = os.path.join(tmp, "notstr.jsonl")
    with open(notstr, "w") as f:
        f.write('{"text": 5}\n')
    badid = os.path.join(tmp, "badid.jsonl")
    with open(badid, "w") as f:
        f.write('{"text": "1 2000"}\n')
    null = ["--tokenizer-type", "NullTokenizer", "--vocab-size", "1000"]
    cases = [
        (["--input", os.path.join(tmp, "missing.jsonl")] + null, "missing.jsonl"),
        (["--input", tmp] + null, "is a folder"),
        (["--input", bad] + null, "bad.jsonl:3:"),
        (["--input", nokey] + null, 'nokey.jsonl:2: has no key "text"'),
        (["--input", notstr] + null, "notstr.jsonl:1:"),
        (["--input", badid] + null, "badid.jsonl:1:"),
        (["--input", bad, "--tokenizer-type", "GPT2BPETokenizer"], "--vocab-file"),
        (["--input", bad, "--tokenizer-type", "Bogus"], "Bogus"),
        (["--input", bad] + hf[:2] + ["--tokenizer-model", os.path.join(tmp, "no.json")],
         "no.json"),
        (["--input", bad, "--tokenizer-type", "ByteLevelTokenizer", "--append-eod"], "eod"),
        (["--input", bad] + null + ["--workers", "0"], "workers=0"),
    ]
    for args, needle in cases:
        prefix = os.path.join(tmp, "badout")
        r = run(["preprocess", "--output-prefix", prefix] + args)
        err = r.stderr.strip().split("\n")
        check(r.returncode == 2 and len(err) == 1 and needle in err[0],
              "%s: exit %d, stderr %r" % (" ".join(args[-3:]), r.returncode, r.stderr))
        check(files_of(prefix) == [], "left behind: %s" % files_of(prefix))

print("preprocess_cli: %s" % ("ok" if fails == 0 else "%d failures" % fails))
sys.exit(1 if fails else 0)
