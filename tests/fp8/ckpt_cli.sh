#!/bin/sh
# tests/fp8/ckpt_cli.sh - the delayed recipe's amax histories and scales
# travel in the checkpoint: 6 iterations straight (a save at 3) against 3
# loaded from that save and 3 more, iterations 4-6 bit for bit (the
# metrics' printed loss, grad norm and fp8 fields); on pp 2 as well, whose
# stages hold different layers' state, and dp 2 with --fp8-param-gather
# (whose cast records the weight amaxes). A resume without the state (a
# different --fp8-amax-history-len) is refused with the fix; and the fp8
# flags' refusals (one line, exit 2, before any work).
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
M="--mock-data --vocab-size 64 --make-vocab-size-divisible-by 16 --num-layers 2 --hidden-size 32
--num-attention-heads 4 --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --lr 1e-2
--lr-decay-style constant --log-interval 1 --eval-iters 0 --threads 1 --bf16 --seed 3
--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 8 --fp8-amax-compute-algo max"
fields() { sed 's/"elapsed_ms"[^"]*//; s/"tokens_per_s"[^"]*//; s/"comm_ms"[^"]*//; s/"peak_rss[^]]*]//' "$1" |
    grep -o '"\(lm_loss\|grad_norm\|fp8_[a-z_]*\)": [^,}]*' | tr '\n' ' '; }
for lay in serial pp2 dp2pg; do
    L=""
    [ $lay = pp2 ] && L="--world-size 2 --pp 2"
    # --fp8-param-gather: the weight amaxes recorded at the cast resume too
    [ $lay = dp2pg ] && L="--world-size 2 --use-distributed-optimizer --fp8-param-gather"
    "$MTC" train $M $L --train-iters 6 --save "$D/$lay" --save-interval 3 --metrics "$D/$lay.a.jsonl" \
        >"$D/$lay.a.log" 2>&1 || { bad "$lay straight run"; tail -3 "$D/$lay.a.log"; }
    rm -rf "$D/$lay.b" && cp -r "$D/$lay" "$D/$lay.b" && echo 3 >"$D/$lay.b/latest_checkpointed_iteration.txt"
    "$MTC" train $M $L --train-iters 6 --load "$D/$lay.b" --metrics "$D/$lay.b.jsonl" \
        >"$D/$lay.b.log" 2>&1 || { bad "$lay resumed run"; tail -3 "$D/$lay.b.log"; }
    tail -3 "$D/$lay.a.jsonl" >"$D/$lay.a3.jsonl"
    a=$(fields "$D/$lay.a3.jsonl") b=$(fields "$D/$lay.b.jsonl")
    if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$(wc -l <"$D/$lay.b.jsonl")" -eq 3 ]; then
        ok "$lay: resumed iterations 4-6 bit for bit ($(echo "$a" | cut -c1-60)...)"
    else bad "$lay: resume differs"; echo "$a"; echo "$b"; fi
done
grep -q '"fp8"' "$D/serial/iter_0000003/metadata.json" "$D/serial/iter_0000003/"*.json 2>/dev/null &&
    ok "the checkpoint's common state holds the fp8 histories" || bad "no fp8 state in the checkpoint"
# without the state the resumed run differs (the test can fail)
"$MTC" train $(echo "$M" | sed 's/--fp8-amax-history-len 8/--fp8-amax-history-len 4/') --train-iters 6 \
    --load "$D/serial.b" >"$D/h.log" 2>&1
grep -q "fp8-amax-history-len 8" "$D/h.log" && ok "a different history length is refused with the fix" ||
    { bad "history length mismatch"; tail -2 "$D/h.log"; }
# corrupted fp8 state (a string or an out-of-range scale, a negative amax, a fractional history length) is
# refused, not quantized with
fp8edit() { # PYTHON-STATEMENT on f (the common fp8 state); re-signs metadata.json
    rm -rf "$D/cor" && cp -r "$D/serial" "$D/cor" && echo 3 >"$D/cor/latest_checkpointed_iteration.txt"
    python3 - "$D/cor/iter_0000003/metadata.json" "$1" <<'PY'
import json, sys
path, stmt = sys.argv[1], sys.argv[2]
m = json.load(open(path))
f = m["common"]["fp8"]
exec(stmt)
text = json.dumps(m, indent=1).encode()
def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF
open(path, "wb").write(text)
open(path + ".crc32c", "w").write("%08x\n" % crc32c(text))
PY
}
for e in 'f["state"][0] = "abc"|value 0 is not a finite scale > 0' 'f["state"][9] = 1e300|value 9 is not a finite scale > 0' \
    'f["state"][1] = -1|value 1 is not an amax' 'f["amax_history_len"] = 8.5|fp8 amax_history_len is not a whole number'; do
    fp8edit "${e%%|*}"
    "$MTC" train $M --train-iters 6 --load "$D/cor" >"$D/cor.log" 2>&1
    st=$?
    if [ $st -ne 0 ] && grep -q -- "${e#*|}" "$D/cor.log" && ! grep -q "iteration        4" "$D/cor.log"; then
        ok "fp8 state ${e%%|*} refused (exit $st): $(grep -o 'error: .*' "$D/cor.log" | head -1 | cut -c1-120)"
    else bad "fp8 state ${e%%|*} (exit $st)"; tail -2 "$D/cor.log"; fi
done
refuse() { # NAME PATTERN ARGS
    name=$1 pat=$2
    shift 2
    "$MTC" train --mock-data --train-iters 1 --metrics "$D/never.jsonl" "$@" >"$D/r.out" 2>"$D/r.err"
    st=$?
    if [ $st -eq 2 ] && [ "$(wc -l <"$D/r.err")" -eq 1 ] && grep -q -- "$pat" "$D/r.err" && [ ! -e "$D/never.jsonl" ]; then
        ok "$name refused: $(cat "$D/r.err")"
    else bad "$name (status $st)"; cat "$D/r.err"; fi
}
refuse "fp8 without bf16" "needs --bf16" --fp8-format hybrid
refuse "unknown format" "is not e4m3 or hybrid" --bf16 --fp8-format e5m2
refuse "unknown recipe" "is not delayed, tensorwise" --bf16 --fp8-format hybrid --fp8-recipe fp4
refuse "recipe without format" "needs --fp8-format" --bf16 --fp8-recipe mxfp8
refuse "history 0" "fp8-amax-history-len=0" --bf16 --fp8-format e4m3 --fp8-amax-history-len 0
refuse "algo" "is not max or most_recent" --bf16 --fp8-format e4m3 --fp8-amax-compute-algo mean
refuse "param gather without distopt" "needs --use-distributed-optimizer" --bf16 --fp8-format hybrid --fp8-param-gather
# the block recipes' blocks may not straddle two ranks' shards (the tensor and dimension named)
refuse "blockwise on tp 2 with 32 query rows a rank" "query rows per rank (heads x head size / tp) is 32, not a multiple of its 128-value blocks" \
    --bf16 --fp8-format hybrid --fp8-recipe blockwise --hidden-size 64 --num-attention-heads 4 --world-size 2 --tp 2
refuse "mxfp8 on tp 2 with 48 fc1 rows a rank" "fc1 weight's rows per rank (ffn / tp) is 48.*--ffn-hidden-size a multiple of 64" \
    --bf16 --fp8-format hybrid --fp8-recipe mxfp8 --hidden-size 64 --num-attention-heads 4 --ffn-hidden-size 96 --world-size 2 --tp 2
refuse "mxfp8 on cp 2 with 16-token chunks" "sequence chunk (seq / 2cp) has 16 tokens.*--seq-length a multiple of 128" \
    --bf16 --fp8-format hybrid --fp8-recipe mxfp8 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --world-size 2 --cp 2
refuse "bf16 layers beyond a stage" "layers per pipeline stage (2)" --bf16 --fp8-format hybrid \
    --fp8-recipe mxfp8 --first-last-layers-bf16 --num-layers-at-start-in-bf16 3 --world-size 2 --pp 2
refuse "first/last bf16 with delayed" "delayed scaling does not support" --bf16 --fp8-format hybrid \
    --first-last-layers-bf16
exit $fail
