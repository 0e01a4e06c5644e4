#!/usr/bin/env python3
"""jsonl_strict.py - mtc reads JSON lines exactly as Python's json.loads does
(Megatron's preprocess_data.py uses it), checked against json.loads itself.

1. tokenize --json-lines with the byte-level tokenizer (ids = UTF-8 bytes) on
   fixed cases (every escape, \\u0000 and a raw-escaped NUL inside a string,
   surrogate pairs, lone surrogates, invalid UTF-8, raw control characters,
   two values on a line, trailing garbage, NaN/Infinity, deep nesting) and
   on 400 random lines from a seeded generator: where Python's
   line.decode('utf-8') + json.loads gives a str that encodes to UTF-8, mtc
   prints exactly its bytes; everywhere else mtc exits 2 with one line that
   names line 1.
2. preprocess keeps a document with \\u0000 whole: the .bin read back by
   read_indexed.py (written from Megatron's indexed_dataset.py) holds every
   byte plus eod; a line with two objects, trailing garbage, a lone
   surrogate or invalid UTF-8 is refused with its line number, nothing
   written.
3. tokenize --decode --json-lines of ids holding 0 prints "\\u0000", and the
   plain --decode writes the NUL byte.
"""
import json
import os
import random
import subprocess
import sys
import tempfile

MTC = os.environ.get("MTC", "build/mtc")
HERE = os.path.dirname(os.path.abspath(__file__))
fails = 0


def check(cond, what):
    global fails
    print(("ok   " if cond else "FAIL ") + what)
    fails += 0 if cond else 1


def expected(line):
    """The bytes json.loads gives for this line, or None when it is refused."""
    try:
        v = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(v, str):
        return None
    try:
        return v.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return None


def mtc_tokenize(d, line):
    p = os.path.join(d, "in.jsonl")
    with open(p, "wb") as f:
        f.write(line + b"\n")
    r = subprocess.run([MTC, "tokenize", "--tokenizer-type", "ByteLevelTokenizer", "--json-lines",
                        "--input", p], capture_output=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


FIXED = [b'"plain"', b'"a\\u0000b"', b'"nul\\u0000 after"', b'"\\"\\\\\\/\\b\\f\\n\\r\\t"',
         b'"\\u00e9\\u4e2d\\ud83d\\ude00"', b'"\\ud800"', b'"\\udc00"', b'"\\ud800\\u0041"',
         b'"\\ud83d"', b'"bad \xff byte"', b'"\xc3\xa9 ok"', b'"\xed\xa0\x80"', b'"\xc0\xaf"',
         b'"\xf4\x90\x80\x80"', b'"raw \x01 control"', b'"raw \x00 nul"', b'"a" "b"',
         b'"a"x', b'"a" ', b'  "a"\t', b'"\\x41"', b'"\\u12"', b'"\\u12G4"', b'"unterminated',
         b'NaN', b'Infinity', b'-Infinity', b'12', b'null', b'true', b'["a"]', b'{"a": 1}',
         b'"a"{"b": 2}', b'[' * 600 + b']' * 600, b'""', b'"\\u0000"', b'"tab\there"', b'"\x7f"']
random.seed(1)
POOL = [b'"', b'\\', b'u', b'd', b'8', b'0', b'c', b'a', b' ', b'{', b'}', b'[', b']', b',', b':',
        b'x', b'\x00', b'\x01', b'\xc3', b'\xa9', b'\xed', b'\xa0', b'\x80', b'n', b't', b'1',
        b'-', b'e', b'.', b'\xf0\x9f\x98\x80', b'\\u0000', b'\\ud83d\\ude00', b'\\ud800', b'\\n']
RANDOM = []
for k in range(400):
    body = b"".join(random.choice(POOL) for _ in range(random.randint(0, 12)))
    RANDOM.append(b'"' + body + b'"' if k % 2 else body)
d = tempfile.mkdtemp()
bad = []
agree = taken = 0
for line in FIXED + RANDOM:
    if b"\n" in line or b"\r" in line or not line.strip(b" \t"):
        continue  # Python splits lines there; mtc skips blank lines
    want = expected(line)
    rc, out, err = mtc_tokenize(d, line)
    if want is None:
        ok = rc == 2 and err.count(b"\n") == 1 and b"line 1" in err
    else:
        got = out.split()
        ok = rc == 0 and [int(x) for x in got] == list(want)
    agree += ok
    taken += want is not None
    if not ok:
        bad.append((line, want, rc, out[:80], err[:200]))
check(not bad and 50 < taken < agree - 50, "tokenize --json-lines agrees with json.loads on %d "
      "lines (%d strings taken, the rest refused)%s" % (agree, taken, "" if not bad else ": " +
                                                        repr(bad[:3])))

# 2. preprocess
src = os.path.join(d, "docs.jsonl")
docs = ["nul\u0000 after", "two\u0000\u0000nuls", "\u00e9\U0001F600"]
with open(src, "w") as f:
    for t in docs:
        f.write(json.dumps({"text": t}) + "\n")
r = subprocess.run([MTC, "preprocess", "--input", src, "--output-prefix", os.path.join(d, "p"),
                    "--tokenizer-type", "ByteLevelTokenizer"],
                   capture_output=True, text=True, timeout=60)
check(r.returncode == 0, "preprocess of documents with \\u0000 (exit %d %s)" % (r.returncode, r.stderr))
rd = subprocess.run([sys.executable, os.path.join(HERE, "read_indexed.py"),
                     os.path.join(d, "p_text_document")], capture_output=True, text=True)
try:
    got = json.loads(rd.stdout)
except ValueError:
    got = None
want = [[list(t.encode("utf-8"))] for t in docs]
check(got is not None and got.get("documents") == want, "preprocess kept every byte (NULs included) of every document: %s" % got)
for name, line, what in [("two objects", b'{"text": "a"}{"text": "b"}', "a second JSON value"),
                         ("trailing garbage", b'{"text": "a"} x', "extra data"),
                         ("a lone surrogate", b'{"text": "\\ud800"}', "lone surrogate"),
                         ("invalid UTF-8", b'{"text": "\xff"}', "invalid UTF-8")]:
    with open(src, "wb") as f:
        f.write(b'{"text": "fine"}\n' + line + b"\n")
    out = os.path.join(d, "q")
    r = subprocess.run([MTC, "preprocess", "--input", src, "--output-prefix", out,
                        "--tokenizer-type", "ByteLevelTokenizer"], capture_output=True, text=True,
                       timeout=60)
    check(r.returncode == 2 and ":2:" in r.stderr and what in r.stderr and
          r.stderr.count("\n") == 1 and not os.path.exists(out + "_text_document.bin"),
          "preprocess refuses %s with its line number: %s" % (name, r.stderr.strip()))

# 3. decode of id 0
r = subprocess.run([MTC, "tokenize", "--tokenizer-type", "ByteLevelTokenizer", "--decode", "--json-lines"],
                   input=b"97 0 98\n", capture_output=True, timeout=60)
check(r.returncode == 0 and r.stdout.strip() == b'"a\\u0000b"', "--decode --json-lines of 0: %r" % r.stdout)
r = subprocess.run([MTC, "tokenize", "--tokenizer-type", "ByteLevelTokenizer", "--decode"],
                   input=b"97 0 98", capture_output=True, timeout=60)
check(r.returncode == 0 and r.stdout == b"a\x00b", "--decode of 0 writes the NUL byte: %r" % r.stdout)
sys.exit(1 if fails else 0)
