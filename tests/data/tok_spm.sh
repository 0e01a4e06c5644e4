#!/bin/sh
# tests/data/tok_spm.sh - mtc's SentencePiece tokenizers (SentencePieceTokenizer,
# GPTSentencePieceTokenizer, Llama2Tokenizer) against the SentencePiece tools
# themselves (Debian packages sentencepiece and python3-sentencepiece: the
# library Megatron calls). Models are trained at test time by spm_train on
# Debian's fortunes: a unigram one (nmt_nfkc normalisation, byte fallback)
# and a BPE one (identity normalisation, no dummy prefix, byte fallback).
# On the edge cases of tok_edge_cases.jsonl and up to 1500 fortunes:
#   1. ids == Python encode_as_ids (Megatron's non-legacy text_to_ids), for
#      each of the three type names; the single-line cases also == spm_encode;
#   2. decode(encode(x)) == Python decode_ids(encode_as_ids(x));
#   3. --tokenizer-sentencepiece-legacy with --tokenizer-special-tokens ==
#      Megatron's legacy algorithm (spm_ref.py --legacy);
#   4. preprocess --append-eod ends each document with the model's eos id;
#      the tokenizer's text form (stored with a model) reads back to the same ids;
#   5. a missing or non-SentencePiece --tokenizer-model is one line, exit 2.
set -u
MTC=${MTC:?path of the mtc binary}
SRC=${MTC_SOURCE_DIR:?source folder}
BUILD=${MTC_BUILD_DIR:?build folder}
PY=/usr/bin/python3 # Debian's, which has python3-sentencepiece
FORTUNES=/usr/share/games/fortunes
work="$BUILD/tok-spm-test"
rm -rf "$work" && mkdir -p "$work"
for t in spm_train spm_encode; do
    command -v $t >/dev/null 2>&1 || { echo "FAIL: $t missing (apt-get install sentencepiece)"; exit 1; }
done
$PY -c "import sentencepiece" 2>/dev/null || { echo "FAIL: apt-get install python3-sentencepiece"; exit 1; }
[ -d "$FORTUNES" ] || { echo "FAIL: $FORTUNES missing (apt-get install fortunes)"; exit 1; }
fail=0

$PY "$SRC/tests/data/spm_cases.py" "$SRC/tests/data/tok_edge_cases.jsonl" "$FORTUNES" 1500 \
    "$work/cases.jsonl" "$work/lines.txt" "$work/corpus.txt" || exit 1
head -c 400000 "$work/corpus.txt" >"$work/train.txt"
spm_train --input="$work/train.txt" --model_prefix="$work/uni" --vocab_size=1000 --model_type=unigram \
    --byte_fallback=true --minloglevel=2 >"$work/train.log" 2>&1 &&
    spm_train --input="$work/train.txt" --model_prefix="$work/bpe" --vocab_size=600 --model_type=bpe \
        --byte_fallback=true --normalization_rule_name=identity --add_dummy_prefix=false \
        --minloglevel=2 >>"$work/train.log" 2>&1 ||
    { echo "FAIL: spm_train"; cat "$work/train.log"; exit 1; }

for m in uni bpe; do
    model="$work/$m.model"
    # 1. ids
    $PY "$SRC/tests/data/spm_ref.py" "$model" "$work/cases.jsonl" "$work/$m.ref" || exit 1
    for type in SentencePieceTokenizer GPTSentencePieceTokenizer Llama2Tokenizer; do
        "$MTC" tokenize --tokenizer-type $type --tokenizer-model "$model" --json-lines \
            --input "$work/cases.jsonl" >"$work/$m.$type" 2>"$work/err.txt" ||
            { echo "FAIL: $m $type: $(cat "$work/err.txt")"; fail=1; continue; }
        cmp -s "$work/$m.$type" "$work/$m.ref" || {
            echo "FAIL: $m $type ids differ from sentencepiece's encode_as_ids"
            awk 'NR == FNR { a[FNR] = $0; next } a[FNR] != $0 { print "case " FNR ": mtc " substr(a[FNR], 1, 100) "\n   python " substr($0, 1, 100); exit }' \
                "$work/$m.$type" "$work/$m.ref"
            fail=1
        }
    done
    spm_encode --model="$model" --output_format=id <"$work/lines.txt" >"$work/$m.spm_encode" ||
        { echo "FAIL: spm_encode"; exit 1; }
    $PY -c 'import json, sys
for l in open(sys.argv[1], encoding="utf-8"): print(json.dumps(l.rstrip("\n")))' "$work/lines.txt" >"$work/lines.jsonl"
    "$MTC" tokenize --tokenizer-type Llama2Tokenizer --tokenizer-model "$model" --json-lines \
        --input "$work/lines.jsonl" >"$work/$m.lines" &&
        cmp -s "$work/$m.lines" "$work/$m.spm_encode" ||
        { echo "FAIL: $m ids differ from spm_encode's on the single-line cases"; fail=1; }
    n_lines=$(wc -l <"$work/lines.txt")
    [ "$n_lines" -ge 100 ] || { echo "FAIL: only $n_lines single-line cases"; fail=1; }

    # 2. decode
    $PY "$SRC/tests/data/spm_ref.py" "$model" "$work/cases.jsonl" "$work/$m.dref" --decode || exit 1
    "$MTC" tokenize --tokenizer-type Llama2Tokenizer --tokenizer-model "$model" --json-lines --decode \
        --input "$work/$m.ref" >"$work/$m.dec" 2>"$work/err.txt" &&
        $PY -c 'import json, sys
a = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
b = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8")]
bad = [i + 1 for i in range(max(len(a), len(b))) if i >= len(a) or i >= len(b) or a[i] != b[i]]
if bad: print("case %d: mtc %r python %r" % (bad[0], a[bad[0] - 1][:80] if bad[0] <= len(a) else None, b[bad[0] - 1][:80] if bad[0] <= len(b) else None)); sys.exit(1)' \
            "$work/$m.dec" "$work/$m.dref" ||
        { echo "FAIL: $m decode differs from sentencepiece's decode_ids $(cat "$work/err.txt")"; fail=1; }
done

# 3. legacy special tokens: one new ("<extra_id_0>"), one already a piece ("e"
# is in both models), and [INST] followed by a space (the trimmed separator)
printf '%s\n' '"[INST] who are you?<extra_id_0> x <extra_id_0><extra_id_0>the end"' \
    '"plain text, no special token"' '"a[INST]b[INST] [INST]  c"' >"$work/legacy.jsonl"
head -200 "$work/cases.jsonl" >>"$work/legacy.jsonl"
for m in uni bpe; do
    $PY "$SRC/tests/data/spm_ref.py" "$work/$m.model" "$work/legacy.jsonl" "$work/$m.lref" \
        --legacy "[INST]" "<extra_id_0>" "e" || exit 1
    "$MTC" tokenize --tokenizer-type SentencePieceTokenizer --tokenizer-model "$work/$m.model" \
        --tokenizer-sentencepiece-legacy --tokenizer-special-tokens "[INST]" "<extra_id_0>" e \
        --json-lines --input "$work/legacy.jsonl" >"$work/$m.legacy" 2>"$work/err.txt" &&
        cmp -s "$work/$m.legacy" "$work/$m.lref" ||
        { echo "FAIL: $m legacy ids differ from Megatron's legacy algorithm: $(cat "$work/err.txt")"; diff "$work/$m.legacy" "$work/$m.lref" | head -4; fail=1; }
    grep -q " 1000\| 600" "$work/$m.legacy" || { echo "FAIL: $m: the new special token never got the id after the pieces"; fail=1; }
done

# 4. preprocess: eod is the model's eos; the dataset's tokenizer text form
info=$($PY "$SRC/tests/data/spm_ref.py" "$work/uni.model" --info)
eos=$(echo "$info" | cut -d' ' -f3)
head -50 "$work/cases.jsonl" | $PY -c 'import json, sys
for l in sys.stdin: print(json.dumps({"text": json.loads(l)}))' >"$work/docs.jsonl"
"$MTC" preprocess --input "$work/docs.jsonl" --output-prefix "$work/ds" --tokenizer-type Llama2Tokenizer \
    --tokenizer-model "$work/uni.model" --append-eod --workers 2 2>"$work/err.txt" ||
    { echo "FAIL: preprocess: $(cat "$work/err.txt")"; fail=1; }
$PY "$SRC/tests/data/read_indexed.py" "$work/ds_text_document" >"$work/ds.json" ||
    { echo "FAIL: read_indexed"; fail=1; }
$PY -c 'import json, sys
docs = json.load(open(sys.argv[1]))["documents"]
ref = [l.split() for l in open(sys.argv[2])][:50]
eos = int(sys.argv[3])
got = [sum(d, []) for d in docs]
want = [[int(x) for x in r] + [eos] if r else [] for r in ref]  # Megatron: no eod for an empty document
if got != want: print("FAIL: preprocess ids + eos differ (first doc %r vs %r)" % (got[:1], want[:1])); sys.exit(1)' \
    "$work/ds.json" "$work/uni.ref" "$eos" || fail=1
"$MTC" tokenize --tokenizer-type Llama2Tokenizer --tokenizer-model "$work/uni.model" --print-tokenizer \
    </dev/null >/dev/null 2>"$work/form.txt"
(cd / && "$MTC" tokenize --tokenizer-string "$(cat "$work/form.txt")" --json-lines \
    --input "$work/cases.jsonl") >"$work/form.ids" && cmp -s "$work/form.ids" "$work/uni.ref" ||
    { echo "FAIL: the text form $(cat "$work/form.txt") does not give the same ids"; fail=1; }

# 5. bad files
for bad in "$work/missing.model" "$work/cases.jsonl"; do
    "$MTC" tokenize --tokenizer-type Llama2Tokenizer --tokenizer-model "$bad" </dev/null >/dev/null 2>"$work/err.txt"
    rc=$?
    if [ $rc -ne 2 ] || [ "$(wc -l <"$work/err.txt")" -ne 1 ] || ! grep -q "$bad" "$work/err.txt"; then
        echo "FAIL: --tokenizer-model $bad gave exit $rc: $(cat "$work/err.txt")"
        fail=1
    fi
done

[ $fail -eq 0 ] && echo "tok_spm: ok ($(wc -l <"$work/cases.jsonl") cases, $n_lines also against spm_encode, 2 models x 3 types)"
exit $fail
