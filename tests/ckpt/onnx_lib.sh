# tests/ckpt/onnx_lib.sh - shared by onnx_cli.sh and moe_export_cli.sh: the
# npm packages (transformers.js with onnxruntime-node, skipped with 77 only
# when the registry is unreachable), mtc's reference forward
# (tests/ckpt/logits_ref.c) and the comparisons with Hugging Face's clients.
# Needs ckpt_lib.sh sourced and D set.
CACHE=${MTC_BUILD_DIR:-$D}/npm-cache
REF=${MTC_BUILD_DIR:-build}/tests/mtc_logits_ref
[ -x "$REF" ] || { echo "FAIL: $REF is not built (make build)"; exit 1; }
npm_need "$CACHE" tjs @huggingface/transformers@3.8.1
MODS=$CACHE/tjs/node_modules
TJS=$MTC_SOURCE_DIR/tests/ckpt/onnx_tjs.mjs
HAVE_ONNX=0 # Debian's python3-onnx lives in /usr/bin/python3 (another python3 may come first)
for PYO in python3 /usr/bin/python3; do
    "$PYO" -c 'import onnx' 2>/dev/null && HAVE_ONNX=1 && break
done
IDS="3 17 22 5 6 11 0 9 14 2"
# json_text: the JSON string literal of stdin's text (without the last newline)
json_text() { python3 -c 'import json, sys; print(json.dumps(sys.stdin.read()[:-1], ensure_ascii=False))'; }
# continuation PROMPT: stdin's text (mtc generate's output) without the prompt, as JSON
continuation() {
    python3 -c 'import json, sys; p = sys.argv[1]; t = json.loads(sys.stdin.read()); print(json.dumps(t[len(p):] if t.startswith(p) else "<no prompt> " + t, ensure_ascii=False))' "$1"
}
# compare_rows NAME REF OUT: the same rows of floats to 1e-4
compare_rows() {
    if r=$(awk 'NR == FNR { for (i = 1; i <= NF; i++) a[FNR, i] = $i; n = FNR; nf = NF; next }
        { if (NF != nf) { print "width " NF " vs " nf; exit 1 }
          for (i = 1; i <= NF; i++) { d = $i - a[FNR, i]; if (d < 0) d = -d; if (d > m) m = d } }
        END { if (FNR != n) { print "rows " FNR " vs " n; exit 1 }; printf "%.2g over %d x %d", m, n, nf; exit m > 1e-4 }' "$2" "$3"); then
        ok "$1 = mtc's: max |diff| $r"
    else
        bad "$1 differ from mtc's: $r"
    fi
}
# check_logits NAME DIR CKPT: onnxruntime-node's rows (one call, then through the cache)
check_logits() {
    node "$TJS" "$MODS" logits "$2" "$IDS" >"$D/ort.txt" 2>"$D/ort.err" ||
        { bad "$1: onnxruntime-node failed"; cat "$D/ort.err"; return; }
    "$REF" "$3" logits "$IDS" >"$D/ref.txt" || { bad "$1: mtc_logits_ref"; return; }
    for tag in full cached; do
        grep "^$tag " "$D/ort.txt" | cut -d' ' -f2- >"$D/o.txt"
        compare_rows "$1: onnxruntime-node's logits ($tag)" "$D/ref.txt" "$D/o.txt"
    done
}
# check_onnx NAME DIR CKPT MAX_NEW PROMPTS: onnx.checker, then transformers.js'
# pipeline: no warning, mtc's ids for each prompt, mtc generate's greedy text
check_onnx() {
    f=$(ls "$2"/onnx/*.onnx)
    for x in config.json generation_config.json tokenizer.json tokenizer_config.json; do
        [ -f "$2/$x" ] || bad "$1: no $x"
    done
    if [ $HAVE_ONNX = 1 ]; then
        "$PYO" -c 'import onnx, sys; onnx.checker.check_model(sys.argv[1], full_check=True)' "$f" 2>"$D/chk.err" &&
            ok "$1: onnx.checker accepts $(basename "$f")" || { bad "$1: onnx.checker"; tail -n 3 "$D/chk.err"; }
    fi
    (IFS='|'; node "$TJS" "$MODS" generate "$2" "$4" $5) >"$D/g.out" 2>"$D/g.err" ||
        { bad "$1: transformers.js failed or warned"; cat "$D/g.err"; return; }
    echo "$5" | tr '|' '\n' | while read -r p; do
        line=$(awk -F '\t' -v p="$p" '$1 == p' "$D/g.out")
        ids=$(printf '%s' "$line" | cut -f2)
        got=$(printf '%s' "$line" | cut -f3)
        want_ids=$("$REF" "$3" ids "$p")
        want=$("$MTC" generate --load "$3" --prompt "$p" --max-new-tokens "$4" --temperature 0 2>&1 | json_text | continuation "$p")
        [ -n "$ids" ] && [ "$ids" = "$want_ids" ] && echo "ok   $1 '$p': transformers.js' tokenizer gives mtc's ids" ||
            echo "FAIL $1 '$p': transformers.js ids '$ids', mtc '$want_ids'"
        [ "$got" = "$want" ] && echo "ok   $1 '$p': transformers.js greedy = mtc generate: $got" ||
            echo "FAIL $1 '$p': transformers.js $got vs mtc generate $want"
    done >"$D/res"
    cat "$D/res"
    grep -q FAIL "$D/res" && fail=1
    [ "$(grep -c '^ok' "$D/res")" = $(($(echo "$5" | tr '|' '\n' | wc -l) * 2)) ] || bad "$1: a comparison is missing"
}
# check_config NAME DIR CKPT BOS_EOS PROMPTS: transformers.js' AutoConfig and
# AutoTokenizer on a safetensors folder, no warning; bos/eos/pad as given
# ("null" or the id), mtc's ids for each prompt
check_config() {
    (IFS='|'; node "$TJS" "$MODS" config "$2" $5) >"$D/c.out" 2>"$D/c.err" ||
        { bad "$1: transformers.js config/tokenizer failed or warned"; cat "$D/c.err"; return; }
    got=$(head -n 1 "$D/c.out" | cut -d' ' -f2-)
    [ "$got" = "$4 $4 $4" ] && ok "$1: transformers.js reads config.json (bos/eos/pad $got) without a warning" ||
        bad "$1: bos/eos/pad '$got', expected $4"
    echo "$5" | tr '|' '\n' | while read -r p; do
        ids=$(awk -F '\t' -v p="$p" '$1 == p' "$D/c.out" | cut -f2)
        want=$("$REF" "$3" ids "$p")
        [ -n "$ids" ] && [ "$ids" = "$want" ] && echo "ok   $1 '$p': AutoTokenizer gives mtc's ids" ||
            echo "FAIL $1 '$p': AutoTokenizer '$ids', mtc '$want'"
    done >"$D/res"
    cat "$D/res"
    grep -q FAIL "$D/res" && fail=1
}
