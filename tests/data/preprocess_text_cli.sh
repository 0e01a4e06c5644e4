#!/bin/sh
# tests/data/preprocess_text_cli.sh - `mtc preprocess --text-documents` on
# plain text: a document per non-blank line (lines) or per blank-line
# paragraph (paragraphs), from a file or from a folder's files in name
# order, never spanning two files; read back by tests/data/read_indexed.py
# (Megatron's format from its spec) against the documents' bytes computed
# here (ByteLevelTokenizer: id = byte); --append-eod ends each with eod; a
# text file given as JSON lines is refused with the hint; PREFIX.tokenizer
# is written beside the dataset.
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
R="$MTC_SOURCE_DIR/tests/data/read_indexed.py"
mkdir "$D/in"
printf 'first line\nsecond line, café\n\n\nthird after blanks\r\nfourth\n' >"$D/in/b.txt"
printf 'zeta one\nzeta two\n\nzeta three' >"$D/in/a.txt"
printf 'hidden\n' >"$D/in/.hidden"
expect() { # MODE FILES... -> DOCS.json on stdout
    python3 - "$@" <<'PY'
import json, sys
mode, files = sys.argv[1], sys.argv[2:]
docs = []
for f in files:
    lines = [l.rstrip("\r\n") for l in open(f, "rb").read().decode("utf8").split("\n")]
    cur = []
    for l in lines + [""]:
        if l.strip() == "":
            if cur: docs.append("\n".join(cur)); cur = []
            continue
        if mode == "lines": docs.append(l)
        else: cur.append(l)
print(json.dumps([[list(d.encode("utf8"))] for d in docs]))
PY
}
for mode in lines paragraphs; do
    "$MTC" preprocess --input "$D/in" --text-documents $mode --output-prefix "$D/$mode" --tokenizer-type ByteLevelTokenizer >"$D/p.log" 2>&1 ||
        { bad "$mode: preprocess"; cat "$D/p.log"; continue; }
    expect $mode "$D/in/a.txt" "$D/in/b.txt" >"$D/$mode.json"
    n=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))))' "$D/$mode.json")
    python3 "$R" "$D/${mode}_text_document" --expect "$D/$mode.json" --vocab-size 256 >"$D/r.log" 2>&1 &&
        ok "$mode: a folder's two files, $n documents as expected (hidden file skipped)" || { bad "$mode: read back"; cat "$D/r.log"; }
    [ "$(cat "$D/${mode}_text_document.tokenizer")" = byte ] && ok "$mode: PREFIX.tokenizer" || bad "$mode: PREFIX.tokenizer"
done
# one file, and --append-eod with GPT-2's tiny BPE: every document ends with eod
T="--tokenizer-type GPT2BPETokenizer --vocab-file $MTC_SOURCE_DIR/tests/data/gpt2_tiny/vocab.json --merge-file $MTC_SOURCE_DIR/tests/data/gpt2_tiny/merges.txt"
# shellcheck disable=SC2086
"$MTC" preprocess --input "$D/in/b.txt" --text-documents lines --output-prefix "$D/eod" $T --append-eod >"$D/p.log" 2>&1 || { bad "eod preprocess"; cat "$D/p.log"; }
python3 "$R" "$D/eod_text_document" >"$D/eod.json" 2>&1 || bad "eod read"
EOD=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["<|endoftext|>"])' "$MTC_SOURCE_DIR/tests/data/gpt2_tiny/vocab.json")
python3 - "$D/eod.json" "$EOD" <<'PY' && ok "one file, --append-eod: 4 documents ending in <|endoftext|>" || bad "eod documents"
import json, sys
docs = json.load(open(sys.argv[1]))["documents"]
eod = int(sys.argv[2])
assert len(docs) == 4, len(docs)
assert all(d[-1][-1] == eod and eod not in d[-1][:-1] for d in docs), docs
PY
# a text file read as JSON lines: refused, with the hint
"$MTC" preprocess --input "$D/in/b.txt" --output-prefix "$D/x" --tokenizer-type ByteLevelTokenizer >"$D/o" 2>"$D/e"
st=$?
[ $st -eq 2 ] && grep -q "is not a JSON object" "$D/e" && grep -q -- "--text-documents" "$D/e" && [ ! -e "$D/x_text_document.bin" ] &&
    ok "text as JSON lines: $(cat "$D/e")" || { bad "JSON-lines refusal: exit $st"; cat "$D/e"; }
"$MTC" preprocess --input "$D/in" --text-documents words --output-prefix "$D/x" --tokenizer-type ByteLevelTokenizer >"$D/o" 2>"$D/e"
[ $? -eq 2 ] && grep -q "text-documents=words" "$D/e" && ok "an unknown mode: $(cat "$D/e")" || { bad "unknown mode"; cat "$D/e"; }
mkdir "$D/empty"
"$MTC" preprocess --input "$D/empty" --text-documents lines --output-prefix "$D/x" --tokenizer-type ByteLevelTokenizer >"$D/o" 2>"$D/e"
[ $? -eq 2 ] && grep -q "holds no file" "$D/e" && ok "an empty folder: $(cat "$D/e")" || { bad "empty folder"; cat "$D/e"; }
exit $fail
