#!/usr/bin/python3
"""spm_cases.py - the cases tok_spm.sh and tok_tiktoken.sh compare: the
edge cases file, then every fortune (the texts between "%" lines) of each
fortunes file that is valid UTF-8, up to MAX cases in all; also writes the
single-line ones (no \\n or \\r: what spm_encode can take, one per line) to
LINES, and the training text to CORPUS.

    spm_cases.py EDGE_CASES FORTUNES_DIR MAX OUT.jsonl LINES.txt CORPUS.txt
"""
import json
import os
import sys

edge, folder, limit, out, lines_out, corpus_out = sys.argv[1:7]
limit = int(limit)
cases = [json.loads(l) for l in open(edge, encoding="utf-8") if l.strip()]
corpus = []
for name in sorted(os.listdir(folder)):
    p = os.path.join(folder, name)
    if name.endswith(".dat") or os.path.islink(p) or not os.path.isfile(p):
        continue
    try:
        text = open(p, "rb").read().decode("utf-8")
    except UnicodeDecodeError:
        continue
    corpus.append(text)
    for fortune in text.split("\n%\n"):
        if len(cases) < limit and fortune.strip():
            cases.append(fortune)
with open(out, "w", encoding="utf-8") as f:
    for c in cases:
        f.write(json.dumps(c) + "\n")
with open(lines_out, "w", encoding="utf-8") as f:
    for c in cases:
        if "\n" not in c and "\r" not in c and c:
            f.write(c + "\n")
with open(corpus_out, "w", encoding="utf-8") as f:
    f.write("".join(corpus))
print("%d cases" % len(cases))
