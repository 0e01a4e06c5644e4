#!/bin/sh
# tests/parity/bf16_cli.sh - mixed precision from the command line:
#  - bf16 training follows fp32 on real text (fortunes, char tokenizer, 300
#    steps): final validation loss within 2%;
#  - a bf16 run resumed from its checkpoint continues bit for bit (the
#    checkpoint holds the fp32 main params, not their bf16 copies), and the
#    same checkpoint loads into fp32 and back into bf16; the same with the
#    distributed optimizer, whose fp32 main params are each rank's shard;
#  - --fp16 with Megatron's dynamic scaler: the first iterations overflow
#    at 2^32 and are skipped and counted, the logged loss scale halves after
#    `hysteresis` overflows, training then goes on with a finite loss;
#  - an fp16 run resumes bit for bit (the loss scaler's state is saved);
#  - bf16 on the wire (pipeline activations, SP all-gathers,
#    --grad-reduce-in-bf16) halves those bytes; every oneDNN primitive is
#    made at set-up, none in the step loop;
#  - the GEMM engines (--bf16-gemm dnnl-bf16 / fp32) train alike, auto says
#    in the banner what it measured and which it chose, the fp32 engine
#    keeps no bf16 weight copy;
#  - bad precision flags exit 2 with one line before any work.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
FORT=/usr/share/games/fortunes
DATA="--data-path $FORT --tokenizer-type char"
[ -e "$FORT" ] || DATA="--mock-data --vocab-size 128" # section 1 needs the real text
if "$MTC" train $TINY --bf16 --bf16-gemm dnnl-bf16 --train-iters 1 2>&1 | grep -q "needs oneDNN"; then
    echo "skip: this mtc was built without oneDNN (--bf16 needs libdnnl-dev; scripts/deps.sh installs it)"
    exit 0
fi
SMALL="$DATA --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --micro-batch-size 8 --global-batch-size 16 --lr 2e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 20 --hidden-dropout 0 --attention-dropout 0 --split 98,2,0 --eval-iters 4 --threads 2"
vloss() { sed -n 's/.*validation loss at iteration .* lm loss value: \([^ ]*\) .*/\1/p' "$1" | tail -1; }

# 1. bf16 follows fp32
if [ ! -e "$FORT" ]; then
    echo "skip bf16 vs fp32 on fortunes: $FORT missing (apt-get install fortunes; scripts/deps.sh does)"
else
"$MTC" train $SMALL --train-iters 300 --log-interval 100 --eval-interval 300 >"$D/f32.log" 2>&1 || { bad "fp32 run"; cat "$D/f32.log"; }
"$MTC" train $SMALL --train-iters 300 --log-interval 100 --eval-interval 300 --bf16 >"$D/b16.log" 2>&1 || { bad "bf16 run"; cat "$D/b16.log"; }
a=$(vloss "$D/f32.log") b=$(vloss "$D/b16.log")
if [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { d = (a - b) / a; if (d < 0) d = -d; exit !(d <= 0.02 && a < 3.5) }'; then
    ok "bf16 final validation loss $b within 2% of fp32's $a (300 steps on fortunes)"
else bad "bf16 validation loss $b vs fp32 $a"; fi
fi

# 2. checkpoints keep the fp32 main params
ll() { grep -o '"lm_loss": [^,]*, "grad_norm": [^,]*' "$1"; }
# (an engine pinned: auto measures at set-up, and the bit-for-bit checks
# need the same engine in both runs)
B16="--bf16 --bf16-gemm dnnl-bf16"
R="$SMALL --train-iters 8 --log-interval 1 --eval-iters 0 --lr-warmup-iters 0 --lr-decay-style constant --lr-decay-iters 100"
"$MTC" train $R $B16 --metrics "$D/full.jsonl" >"$D/full.log" 2>&1 || bad "bf16 8 iterations"
"$MTC" train $R $B16 --train-iters 4 --save "$D/ck" >"$D/s.log" 2>&1 || bad "bf16 save"
"$MTC" train $R $B16 --load "$D/ck" --metrics "$D/res.jsonl" >"$D/res.log" 2>&1 || { bad "bf16 resume"; cat "$D/res.log"; }
if [ "$(ll "$D/full.jsonl" | tail -4)" = "$(ll "$D/res.jsonl")" ] && [ -n "$(ll "$D/res.jsonl")" ]; then
    ok "bf16 resumed from its checkpoint: iterations 5-8 bit for bit"
else bad "bf16 resume differs"; ll "$D/full.jsonl"; ll "$D/res.jsonl"; fi
"$MTC" train $R --load "$D/ck" --metrics "$D/f.jsonl" --save "$D/ck32" >"$D/f.log" 2>&1 || { bad "fp32 load of a bf16 checkpoint"; cat "$D/f.log"; }
"$MTC" train $R $B16 --train-iters 12 --load "$D/ck32" --metrics "$D/b.jsonl" >"$D/b.log" 2>&1 || { bad "bf16 load of an fp32 checkpoint"; cat "$D/b.log"; }
if [ "$(ll "$D/f.jsonl" | wc -l)" -eq 4 ] && [ "$(ll "$D/b.jsonl" | wc -l)" -eq 4 ] &&
    paste -d' ' "$D/res.jsonl" "$D/f.jsonl" | head -1 | awk '{ for (i = 1; i <= NF; i++) if ($i == "\"lm_loss\":") v[n++] = $(i + 1) + 0 }
        END { d = (v[0] - v[1]) / v[0]; if (d < 0) d = -d; exit !(n == 2 && d < 0.01) }'; then
    ok "a bf16 checkpoint trains on in fp32 (first loss within 1% of bf16's) and back in bf16"
else bad "bf16 -> fp32 -> bf16 checkpoints"; fi

# 2b. --bf16 with the distributed optimizer keeps fp32 main params only for
# each rank's shard: its checkpoint (written from the shards) resumes bit
# for bit, loads into a serial fp32 run, and an fp32 checkpoint loads into it
DO="$R --bf16 --bf16-gemm fp32 --world-size 2 --use-distributed-optimizer"
"$MTC" train $DO --metrics "$D/dfull.jsonl" >"$D/dfull.log" 2>&1 || { bad "bf16 distopt 8 iterations"; cat "$D/dfull.log"; }
"$MTC" train $DO --train-iters 4 --save "$D/dck" >"$D/ds.log" 2>&1 || bad "bf16 distopt save"
"$MTC" train $DO --load "$D/dck" --metrics "$D/dres.jsonl" >"$D/dres.log" 2>&1 || { bad "bf16 distopt resume"; cat "$D/dres.log"; }
kept=$(sed -n 's/.*fp32 main params: only this rank.s distributed-optimizer shard (\([0-9.]*\) MB above; \([0-9.]*\) MB.*/\1 \2/p' "$D/dfull.log" | head -1)
if [ -n "$kept" ] && awk -v k="$kept" 'BEGIN { split(k, v, " "); exit !(v[2] > 0.4 * (v[1] + v[2])) }' &&
    [ -n "$(ll "$D/dres.jsonl")" ] && [ "$(ll "$D/dfull.jsonl" | tail -4)" = "$(ll "$D/dres.jsonl")" ]; then
    ok "bf16 distopt dp2: fp32 main params of the shard only (kept / released MB: $kept), resumed bit for bit"
else bad "bf16 distopt shard / resume: '$kept'"; ll "$D/dfull.jsonl"; ll "$D/dres.jsonl"; fi
"$MTC" train $R --load "$D/dck" --metrics "$D/df.jsonl" >"$D/df.log" 2>&1 || { bad "fp32 serial load of a bf16 distopt checkpoint"; cat "$D/df.log"; }
"$MTC" train $R --world-size 2 --use-distributed-optimizer --train-iters 4 --save "$D/fck" >"$D/fs.log" 2>&1 || bad "fp32 distopt save"
"$MTC" train $DO --load "$D/fck" --metrics "$D/db.jsonl" >"$D/db.log" 2>&1 || { bad "bf16 distopt load of an fp32 checkpoint"; cat "$D/db.log"; }
first() { grep -o '"lm_loss": [^,]*' "$1" | head -1 | sed 's/.*: //'; }
a=$(first "$D/dres.jsonl") b=$(first "$D/df.jsonl") c=$(first "$D/db.jsonl")
if [ -n "$a" ] && [ -n "$b" ] && [ -n "$c" ] && awk -v a="$a" -v b="$b" -v c="$c" 'BEGIN { d = (a - b) / a; if (d < 0) d = -d; e = (a - c) / a; if (e < 0) e = -e; exit !(d < 0.01 && e < 0.01) }'; then
    ok "the sharded bf16 checkpoint trains on in serial fp32 ($b vs $a), an fp32 distopt one in bf16 distopt ($c)"
else bad "bf16 distopt checkpoints across precisions: $a $b $c"; fi

# 3. fp16 and the dynamic loss scaler
"$MTC" train $R --fp16 --train-iters 12 --log-interval 1 >"$D/h.log" 2>&1 || { bad "fp16 run"; cat "$D/h.log"; }
scales=$(sed -n 's/.*loss scale: \([0-9.]*\) |.*/\1/p' "$D/h.log" | tr '\n' ' ')
skips=$(sed -n 's/.*number of skipped iterations: *\([0-9]*\) |.*/\1/p' "$D/h.log" | tr '\n' ' ')
first=$(echo "$scales" | cut -d' ' -f1) second=$(echo "$scales" | cut -d' ' -f2)
if [ "$first" = "4294967296.0" ] && [ "$second" = "2147483648.0" ] && [ "$(echo "$skips" | cut -d' ' -f1-2)" = "1 1" ] &&
    grep -q "iteration *12/.*lm loss: [0-9]" "$D/h.log" && ! grep -q "iteration *1/.*grad norm" "$D/h.log"; then
    ok "fp16: overflows at 2^32 skipped and counted, the scale halves after hysteresis 2 (scales: $scales)"
else bad "fp16 scaler log: scales $scales skipped $skips"; cat "$D/h.log"; fi
"$MTC" train $R --fp16 --loss-scale 128 --train-iters 3 --log-interval 1 >"$D/c.log" 2>&1 &&
    [ "$(grep -c 'loss scale: 128.0 |' "$D/c.log")" -eq 3 ] && ok "--loss-scale 128: a constant scale, logged" ||
    { bad "constant loss scale"; cat "$D/c.log"; }

# the scaler's state is in the checkpoint: an fp16 run resumed goes on bit for bit
"$MTC" train $R --fp16 --train-iters 12 --metrics "$D/h12.jsonl" >"$D/h12.log" 2>&1 || bad "fp16 12"
"$MTC" train $R --fp16 --train-iters 6 --save "$D/hck" >"$D/h6.log" 2>&1 || bad "fp16 save"
"$MTC" train $R --fp16 --train-iters 12 --load "$D/hck" --metrics "$D/hres.jsonl" >"$D/hres.log" 2>&1 || bad "fp16 resume"
sl() { grep -o '"lm_loss": [^,]*, "grad_norm": [^,]*' "$1"; }
if [ -n "$(sl "$D/hres.jsonl")" ] && [ "$(sl "$D/h12.jsonl" | tail -6)" = "$(sl "$D/hres.jsonl")" ] &&
    [ "$(grep -o 'loss scale: [0-9.]*' "$D/h12.log" | tail -6)" = "$(grep -o 'loss scale: [0-9.]*' "$D/hres.log")" ]; then
    ok "fp16 resumed: iterations 7-12 and their loss scales bit for bit (the scaler state is saved)"
else bad "fp16 resume differs"; fi

# 4. bytes on the wire: pipeline activations travel as bf16 (half the
# bytes), as do the sequence-parallel all-gathers of the forward
gb() { grep -o "\"$2\": {\"bytes\": [0-9]*" "$D/$1.jsonl" | head -1 | sed 's/.*: //'; }
W="$TINY --world-size 4 --tp 2 --sequence-parallel --pp 2 --train-iters 1"
"$MTC" train $W --metrics "$D/w32.jsonl" >"$D/w32.log" 2>&1 || bad "fp32 tp2 sp pp2"
"$MTC" train $W --bf16 --metrics "$D/w16.jsonl" >"$D/w16.log" 2>&1 || bad "bf16 tp2 sp pp2"
pa=$(gb w32 PIPELINE_ACTIVATIONS) pb=$(gb w16 PIPELINE_ACTIVATIONS) ta=$(gb w32 TENSOR_MODEL_PARALLEL_GROUP) tb=$(gb w16 TENSOR_MODEL_PARALLEL_GROUP)
if [ -n "$pa" ] && [ -n "$pb" ] && [ "$pb" -gt 0 ] && [ $((pb * 2)) -eq "$pa" ] && [ -n "$ta" ] && [ -n "$tb" ] && [ "$tb" -lt "$ta" ]; then
    ok "bf16 on the wire: pipeline activations $pa -> $pb bytes, TP group $ta -> $tb"
else bad "bf16 wire bytes: pipeline $pa -> $pb, TP $ta -> $tb"; fi

# --grad-reduce-in-bf16: the data-parallel reduction carries half the bytes
# (besides the 8-byte loss all-reduce of each step's log), and training stays within the bf16 parity bound of the fp32 reduction
dpb() { grep -o '"DATA_PARALLEL_GROUP_WITH_CP": {"bytes": [0-9]*' "$D/$1.jsonl" | head -1 | sed 's/.*: //'; }
"$MTC" train $TINY --world-size 2 --bf16 --metrics "$D/r32.jsonl" >"$D/r32.log" 2>&1 || bad "bf16 dp2"
"$MTC" train $TINY --world-size 2 --bf16 --grad-reduce-in-bf16 --metrics "$D/r16.jsonl" >"$D/r16.log" 2>&1 || bad "bf16 dp2 --grad-reduce-in-bf16"
ra=$(dpb r32) rb=$(dpb r16)
if [ -n "$ra" ] && [ -n "$rb" ] && [ "$rb" -gt 8 ] && [ $(((rb - 8) * 2)) -eq $((ra - 8)) ] &&
    paste -d' ' "$D/r32.jsonl" "$D/r16.jsonl" | awk '{ n = 0; for (i = 1; i <= NF; i++) if ($i == "\"lm_loss\":") v[n++] = $(i + 1) + 0
        d = (v[0] - v[1]) / v[0]; if (d < 0) d = -d; if (d > 2e-4) bad = 1 } END { exit bad }'; then
    ok "--grad-reduce-in-bf16: DP bytes $ra -> $rb, losses within 2e-4 of the fp32 reduction"
else bad "--grad-reduce-in-bf16: DP bytes $ra -> $rb"; paste -d'\n' "$D/r32.jsonl" "$D/r16.jsonl"; fi

# oneDNN primitives: all made at set-up (the banner's count), none in the step loop
for lay in "" "--world-size 2 --tp 2 --sequence-parallel" "--world-size 2 --pp 2"; do
    "$MTC" train $TINY $lay --bf16 --bf16-gemm dnnl-bf16 --metrics "$D/pr.jsonl" >"$D/pr.log" 2>&1 || bad "bf16 $lay"
    made=$(sed -n 's/.* \([0-9]*\) primitives made at set-up.*/\1/p' "$D/pr.log")
    counts=$(grep -o '"lowp_primitives": [0-9]*' "$D/pr.jsonl" | sed 's/.*: //' | sort -u)
    if [ -n "$made" ] && [ "$made" -gt 0 ] && [ "$counts" = "$made" ] && [ "$(grep -c lowp_primitives "$D/pr.jsonl")" -eq 4 ]; then
        ok "bf16 ${lay:-serial}: $made oneDNN primitives made at set-up, none in 4 steps"
    else bad "bf16 ${lay:-serial}: primitives at set-up '$made', per step '$counts'"; fi
done

# 5. the GEMM engines: the same products (exact in fp32), fp32 sums in
# another order, so the losses agree within the bf16 parity bound (2e-4)
E="$TINY --train-iters 6 --bf16"
"$MTC" train $E --bf16-gemm dnnl-bf16 --metrics "$D/ed.jsonl" >"$D/ed.log" 2>&1 || bad "--bf16-gemm dnnl-bf16"
"$MTC" train $E --bf16-gemm fp32 --metrics "$D/ef.jsonl" >"$D/ef.log" 2>&1 || bad "--bf16-gemm fp32"
# auto, twice on a fresh cache: measured once, then read (the same rates, engine and bits)
MTC_PEAK_CACHE="$D/cache/peak.json" "$MTC" train $E --metrics "$D/ea.jsonl" >"$D/ea.log" 2>&1 || bad "--bf16-gemm auto"
MTC_PEAK_CACHE="$D/cache/peak.json" "$MTC" train $E --metrics "$D/eb.jsonl" >"$D/eb.log" 2>&1 || bad "--bf16-gemm auto again"
mb() { sed -n 's/.*compute copies \([0-9.]*\) MB.*/\1/p' "$1"; }
if [ "$(grep -c lm_loss "$D/ef.jsonl")" -eq 6 ] &&
    paste -d' ' "$D/ed.jsonl" "$D/ef.jsonl" | awk '{ n = 0; for (i = 1; i <= NF; i++) if ($i == "\"lm_loss\":") v[n++] = $(i + 1) + 0
        d = (v[0] - v[1]) / v[0]; if (d < 0) d = -d; if (n != 2 || d > 2e-4) bad = 1 } END { exit bad }' &&
    grep -q "GEMM engine dnnl-bf16 (set by --bf16-gemm)" "$D/ed.log" && grep -q "GEMM engine fp32 (set by --bf16-gemm)" "$D/ef.log" &&
    awk -v a="$(mb "$D/ed.log")" -v b="$(mb "$D/ef.log")" 'BEGIN { exit !(b > 0 && a > 1.4 * b) }'; then
    ok "--bf16-gemm dnnl-bf16 and fp32: 6 losses within 2e-4, compute copies $(mb "$D/ed.log") -> $(mb "$D/ef.log") MB (no bf16 copy)"
else bad "--bf16-gemm engines differ"; paste -d'\n' "$D/ed.jsonl" "$D/ef.jsonl"; grep "mixed precision" "$D/ed.log" "$D/ef.log"; fi
if grep -Eq "GEMM engine (fp32|dnnl-bf16) \(measured on [0-9]+x[0-9]+x[0-9]+: oneDNN bf16 [0-9.]+ GFLOP/s, fp32 [0-9.]+ GFLOP/s, bf16/fp32 [0-9.]+" "$D/ea.log"; then
    ok "--bf16-gemm auto: $(sed -n 's/.*GEMM engine \([^ ]*\) (measured on \([^;]*\);.*/\1 (\2)/p' "$D/ea.log")"
else bad "--bf16-gemm auto banner"; grep "mixed precision" "$D/ea.log"; fi
rates() { sed -n 's/.*GEMM engine \([^ ]*\) (measured[a-z ]* on \([^;]*\);.*/\1 \2/p' "$1"; }
if grep -q "measured earlier on this machine on" "$D/eb.log" && [ -n "$(rates "$D/ea.log")" ] &&
    [ "$(rates "$D/ea.log")" = "$(rates "$D/eb.log")" ] && ls "$D"/cache/bf16-gemm-*x*x*-t*.txt >/dev/null 2>&1 &&
    [ "$(grep -o '"lm_loss": [^,]*' "$D/ea.jsonl")" = "$(grep -o '"lm_loss": [^,]*' "$D/eb.jsonl")" ]; then
    ok "--bf16-gemm auto again: the cached rates, the same engine and losses"
else bad "--bf16-gemm auto's cache"; rates "$D/ea.log"; rates "$D/eb.log"; ls "$D/cache"; fi

# 6. bad flags
refuse "--bf16-gemm with an unknown engine" "is not auto, dnnl-bf16 or fp32" --bf16 --bf16-gemm amx
refuse "--bf16-gemm without --bf16" "needs --bf16" --bf16-gemm fp32
refuse "--bf16 with --fp16" "choose one" --bf16 --fp16
refuse "--grad-reduce-in-bf16 without --bf16" "needs --bf16" --grad-reduce-in-bf16
refuse "--hysteresis 0" "hysteresis=0" --fp16 --hysteresis 0
refuse "--min-loss-scale above the initial" "min-loss-scale=8" --fp16 --initial-loss-scale 4 --min-loss-scale 8
refuse "--loss-scale -1" "loss-scale=-1" --fp16 --loss-scale -1
exit $fail
