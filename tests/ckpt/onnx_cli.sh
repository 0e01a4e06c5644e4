#!/bin/sh
# tests/ckpt/onnx_cli.sh - `mtc export --format onnx` run by Hugging Face's
# own transformers.js (npm @huggingface/transformers 3.x, onnxruntime-node's
# CPU binaries; installed with --ignore-scripts into $MTC_BUILD_DIR/npm-cache,
# skipped with 77 only when npm cannot reach its registry). Models trained in
# parallel layouts: a GPT-2 (byte tokenizer, tp 2) and a Llama (GQA 2 groups
# over 4 heads, SwiGLU, untied head; char tokenizer; tp 2), each exported fp32
# and fp16:
#   - onnx.checker (Debian python3-onnx) accepts each model.onnx (full check);
#   - the text-generation pipeline loads each folder from disk with no
#     warning, its tokenizer gives mtc's ids of each prompt, and its greedy
#     continuation is `mtc generate --temperature 0`'s text;
#   - onnxruntime-node's logits of fixed ids (one call, and two calls through
#     the KV cache) equal mtc's forward (tests/ckpt/logits_ref.c) to 1e-4 (fp32).
. "$MTC_SOURCE_DIR/tests/ckpt/ckpt_lib.sh"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
CACHE=${MTC_BUILD_DIR:-$D}/npm-cache
REF=${MTC_BUILD_DIR:-build}/tests/mtc_logits_ref
[ -x "$REF" ] || { echo "FAIL: $REF is not built (make build)"; exit 1; }
npm_need "$CACHE" tjs @huggingface/transformers@3.8.1
MODS=$CACHE/tjs/node_modules
HAVE_ONNX=0 # Debian's python3-onnx lives in /usr/bin/python3 (another python3 may come first)
for PYO in python3 /usr/bin/python3; do
    "$PYO" -c 'import onnx' 2>/dev/null && HAVE_ONNX=1 && break
done
i=0
while [ $i -lt 200 ]; do
    echo "the quick brown fox jumps over the lazy dog $((i % 7)) times"
    i=$((i + 1))
done >"$D/text.txt"
sed 's/ times$/ times, café über 日本/' "$D/text.txt" >"$D/utext.txt" # multi-byte characters for the char vocabulary
B="--data-path $D/text.txt --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 4 --global-batch-size 8 --lr 3e-3 --train-iters 80 --log-interval 40 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --threads 1 --world-size 2 --tp 2"
LLAMA="--normalization RMSNorm --position-embedding-type rope --swiglu --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights --disable-bias-linear"
# shellcheck disable=SC2086
"$MTC" train $B --tokenizer-type byte --save "$D/gpt2" >"$D/t1.log" 2>&1 || { bad "gpt2 train"; cat "$D/t1.log"; }
# shellcheck disable=SC2086
"$MTC" train $(echo "$B" | sed "s|$D/text.txt|$D/utext.txt|") $LLAMA --tokenizer-type char --save "$D/llama" >"$D/t2.log" 2>&1 || { bad "llama train"; cat "$D/t2.log"; }
PROMPTS="the qu|over the lazy|jumps ov|2 times, ca"
IDS="3 17 22 5 6 11 0 9 14 2"
json_text() { python3 -c 'import json, sys; print(json.dumps(sys.stdin.read()[:-1], ensure_ascii=False))'; }
# check_logits NAME DIR CKPT: onnxruntime's full and cached rows against mtc's
check_logits() {
    node "$MTC_SOURCE_DIR/tests/ckpt/onnx_tjs.mjs" "$MODS" logits "$2" "$IDS" >"$D/ort.txt" 2>"$D/ort.err" ||
        { bad "$1: onnxruntime-node failed"; cat "$D/ort.err"; return; }
    "$REF" "$3" logits "$IDS" >"$D/ref.txt" || { bad "$1: mtc_logits_ref"; return; }
    for tag in full cached; do
        grep "^$tag " "$D/ort.txt" | cut -d' ' -f2- >"$D/o.txt"
        if r=$(awk 'NR == FNR { for (i = 1; i <= NF; i++) a[FNR, i] = $i; n = FNR; nf = NF; next }
            { if (NF != nf) { print "width " NF " vs " nf; exit 1 }
              for (i = 1; i <= NF; i++) { d = $i - a[FNR, i]; if (d < 0) d = -d; if (d > m) m = d } }
            END { if (FNR != n) { print "rows " FNR " vs " n; exit 1 }; printf "%.2g over %d x %d", m, n, nf; exit m > 1e-4 }' \
            "$D/ref.txt" "$D/o.txt"); then
            ok "$1: onnxruntime-node's logits ($tag) = mtc's: max |diff| $r"
        else
            bad "$1: onnxruntime-node's logits ($tag) differ from mtc's: $r"
        fi
    done
}
for fam in gpt2 llama; do
    for dt in fp32 fp16; do
        O=$D/$fam.$dt
        "$MTC" export --load "$D/$fam" --format onnx --dtype $dt --out "$O" >"$D/e.log" 2>&1 ||
            { bad "$fam $dt export"; cat "$D/e.log"; continue; }
        f=$O/onnx/model.onnx
        [ $dt = fp16 ] && f=$O/onnx/model_fp16.onnx
        [ -f "$f" ] && [ -f "$O/config.json" ] && [ -f "$O/generation_config.json" ] && [ -f "$O/tokenizer.json" ] &&
            [ -f "$O/tokenizer_config.json" ] && ok "$fam $dt: the folder's files" || bad "$fam $dt: files missing"
        if [ $HAVE_ONNX = 1 ]; then
            "$PYO" -c 'import onnx, sys; onnx.checker.check_model(sys.argv[1], full_check=True)' "$f" 2>"$D/chk.err" &&
                ok "$fam $dt: onnx.checker accepts $(basename "$f")" || { bad "$fam $dt: onnx.checker"; tail -n 3 "$D/chk.err"; }
        fi
        (IFS='|'; node "$MTC_SOURCE_DIR/tests/ckpt/onnx_tjs.mjs" "$MODS" generate "$O" 14 $PROMPTS) >"$D/g.out" 2>"$D/g.err" ||
            { bad "$fam $dt: transformers.js failed or warned"; cat "$D/g.err"; continue; }
        echo "$PROMPTS" | tr '|' '\n' | while read -r p; do
            line=$(awk -F '\t' -v p="$p" '$1 == p' "$D/g.out")
            ids=$(printf '%s' "$line" | cut -f2)
            got=$(printf '%s' "$line" | cut -f3)
            want_ids=$("$REF" "$D/$fam" ids "$p")
            want=$("$MTC" generate --load "$D/$fam" --prompt "$p" --max-new-tokens 14 --temperature 0 2>&1 | json_text)
            want=$(printf '%s' "$want" | python3 -c 'import json, sys; p = sys.argv[1]; t = json.loads(sys.stdin.read()); print(json.dumps(t[len(p):] if t.startswith(p) else "<no prompt> " + t, ensure_ascii=False))' "$p")
            [ -n "$ids" ] && [ "$ids" = "$want_ids" ] && echo "ok   $fam $dt '$p': transformers.js' tokenizer gives mtc's ids" ||
                echo "FAIL $fam $dt '$p': transformers.js ids '$ids', mtc '$want_ids'"
            [ "$got" = "$want" ] && echo "ok   $fam $dt '$p': transformers.js greedy = mtc generate: $got" ||
                echo "FAIL $fam $dt '$p': transformers.js $got vs mtc generate $want"
        done >"$D/res"
        cat "$D/res"
        grep -q FAIL "$D/res" && fail=1
        [ "$(grep -c '^ok' "$D/res")" = 8 ] || bad "$fam $dt: 8 comparisons expected"
        [ $dt = fp32 ] && check_logits "$fam $dt" "$O" "$D/$fam"
    done
done
[ $HAVE_ONNX = 1 ] || echo "note: python3-onnx is not installed (scripts/deps.sh), onnx.checker not run"
exit $fail
