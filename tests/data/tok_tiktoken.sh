#!/bin/sh
# tests/data/tok_tiktoken.sh - mtc's TikTokenizer (Megatron core 0.18's
# TikTokenizer: JSON vocabulary, --tiktoken-pattern v1|v2,
# --tiktoken-num-special-tokens) against npm js-tiktoken, installed into a
# cache under the build folder; skipped (exit 77) only when npm cannot reach
# its registry. The vocabulary is made from js-tiktoken's cl100k_base ranks
# in Megatron's format (tiktoken_ref.js says how). On the edge cases of
# tok_edge_cases.jsonl and tok_edge_cases_tt.jsonl and 1500 fortunes:
#   1. ids == js-tiktoken's, for v1 and v2, 1000 special tokens (Megatron's
#      default) and a cut vocabulary with 64 special tokens;
#   2. decode(encode(x)) == x, and the text form reads back to the same ids;
#   3. preprocess --append-eod ends documents with </s> (id 2);
#   4. bad flags and files: one line, exit 2 (an unknown pattern, a
#      vocabulary shorter than --vocab-size says, num special tokens < 7,
#      a file that is not Megatron's JSON list).
set -u
MTC=${MTC:?path of the mtc binary}
SRC=${MTC_SOURCE_DIR:?source folder}
BUILD=${MTC_BUILD_DIR:?build folder}
PY=/usr/bin/python3
FORTUNES=/usr/share/games/fortunes
cache="$BUILD/npm-cache/tiktoken"
mods="$cache/node_modules"
work="$BUILD/tok-tiktoken-test"
rm -rf "$work" && mkdir -p "$cache" "$work"
if [ ! -f "$mods/js-tiktoken/package.json" ]; then
    if ! command -v npm >/dev/null 2>&1 || ! timeout 60 npm ping >/dev/null 2>&1; then
        echo "SKIP: npm cannot reach its registry (or is not installed), so js-tiktoken cannot"
        echo "      be installed; nothing was compared"
        exit 77
    fi
    timeout 300 npm install --prefix "$cache" --no-audit --no-fund --no-save js-tiktoken@1.0.21 \
        >"$work/npm.log" 2>&1 || { echo "FAIL: npm install (registry reachable):"; cat "$work/npm.log"; exit 1; }
fi
[ -d "$FORTUNES" ] || { echo "FAIL: $FORTUNES missing (apt-get install fortunes)"; exit 1; }
fail=0
cat "$SRC/tests/data/tok_edge_cases.jsonl" "$SRC/tests/data/tok_edge_cases_tt.jsonl" >"$work/edge.jsonl"
$PY "$SRC/tests/data/spm_cases.py" "$work/edge.jsonl" "$FORTUNES" 1500 \
    "$work/cases.jsonl" "$work/lines.txt" "$work/corpus.txt" || exit 1

# run NAME N_TOKENS NUM_SPECIAL [extra flags]: both patterns against js-tiktoken
run() {
    name=$1 n=$2 ns=$3
    node "$SRC/tests/data/tiktoken_ref.js" "$mods" "$work/cases.jsonl" "$n" "$ns" "$work/$name.json" \
        "$work/$name.v1.ref" "$work/$name.v2.ref" || exit 1
    for pat in v1 v2; do
        flags="--tokenizer-type TikTokenizer --tokenizer-model $work/$name.json --vocab-size $((n + ns))"
        [ "$ns" = 1000 ] || flags="$flags --tiktoken-num-special-tokens $ns"
        [ "$pat" = v2 ] && [ "$name" = full ] || flags="$flags --tiktoken-pattern $pat" # v2 is the default
        # shellcheck disable=SC2086
        "$MTC" tokenize $flags --json-lines --input "$work/cases.jsonl" --stats >"$work/$name.$pat" 2>"$work/err.txt" ||
            { echo "FAIL: $name $pat: $(cat "$work/err.txt")"; fail=1; continue; }
        cmp -s "$work/$name.$pat" "$work/$name.$pat.ref" || {
            echo "FAIL: $name $pat ids differ from js-tiktoken's"
            awk 'NR == FNR { a[FNR] = $0; next } a[FNR] != $0 { print "case " FNR ": mtc " substr(a[FNR], 1, 120) "\n  js-tiktoken " substr($0, 1, 120); exit }' \
                "$work/$name.$pat" "$work/$name.$pat.ref"
            fail=1
        }
        # shellcheck disable=SC2086
        "$MTC" tokenize $flags --json-lines --decode --input "$work/$name.$pat" >"$work/back.jsonl" &&
            $PY -c 'import json, sys
a = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
b = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8")]
sys.exit(a != b)' "$work/back.jsonl" "$work/cases.jsonl" ||
            { echo "FAIL: $name $pat decode(encode(x)) != x"; fail=1; }
    done
}
run full 100000 1000
run cut 20000 64
cmp -s "$work/full.v1" "$work/full.v2" && { echo "FAIL: v1 and v2 gave the same ids on every case"; fail=1; }
grep -q "^0 \| 999 \| 2 " "$work/full.v2" || { echo "FAIL: special tokens never encoded"; fail=1; }

# 2. text form
"$MTC" tokenize --tokenizer-type TikTokenizer --tokenizer-model "$work/cut.json" --vocab-size 20064 \
    --tiktoken-num-special-tokens 64 --tiktoken-pattern v1 --print-tokenizer </dev/null >/dev/null 2>"$work/form.txt"
(cd / && "$MTC" tokenize --tokenizer-string "$(cat "$work/form.txt")" --json-lines --input "$work/cases.jsonl") \
    >"$work/form.ids" && cmp -s "$work/form.ids" "$work/cut.v1" ||
    { echo "FAIL: the text form $(cat "$work/form.txt") gives other ids"; fail=1; }

# 3. preprocess --append-eod
head -40 "$work/cases.jsonl" | $PY -c 'import json, sys
for l in sys.stdin: print(json.dumps({"text": json.loads(l)}))' >"$work/docs.jsonl"
"$MTC" preprocess --input "$work/docs.jsonl" --output-prefix "$work/ds" --tokenizer-type TikTokenizer \
    --tokenizer-model "$work/full.json" --vocab-size 101000 --append-eod 2>"$work/err.txt" >/dev/null ||
    { echo "FAIL: preprocess: $(cat "$work/err.txt")"; fail=1; }
$PY "$SRC/tests/data/read_indexed.py" "$work/ds_text_document" >"$work/ds.json" || fail=1
$PY -c 'import json, sys
docs = json.load(open(sys.argv[1]))["documents"]
ref = [l.split() for l in open(sys.argv[2])][:40]
want = [[int(x) for x in r] + [2] if r else [] for r in ref]
got = [sum(d, []) for d in docs]
if got != want: print("FAIL: preprocess ids + </s> differ from js-tiktoken + 2"); sys.exit(1)' \
    "$work/ds.json" "$work/full.v2.ref" || fail=1

# 4. bad input
echo '[{"rank": 0, "token_bytes": "AQ==", "token_str": ""}]' >"$work/badrank.json"
for args in "--tiktoken-pattern v3 --vocab-size 21000" "--vocab-size 200000" \
    "--tiktoken-num-special-tokens 5 --vocab-size 20005" "BAD"; do
    model="$work/cut.json"
    [ "$args" = BAD ] && model="$work/badrank.json" args="--vocab-size 1001"
    # shellcheck disable=SC2086
    "$MTC" tokenize --tokenizer-type TikTokenizer --tokenizer-model "$model" $args </dev/null >/dev/null 2>"$work/err.txt"
    rc=$?
    if [ $rc -ne 2 ] || [ "$(wc -l <"$work/err.txt")" -ne 1 ]; then
        echo "FAIL: $args gave exit $rc: $(cat "$work/err.txt")"
        fail=1
    fi
done

[ $fail -eq 0 ] && echo "tok_tiktoken: ok ($(wc -l <"$work/cases.jsonl") cases, v1 and v2, 2 vocabularies)"
exit $fail
