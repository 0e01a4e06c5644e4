#!/bin/sh
# tests/dp/fsdp_cli.sh - `mtc train --use-megatron-fsdp` end to end: every
# --data-parallel-sharding-strategy equals the serial run (lm loss and grad
# norm per iteration within 2e-5, the distributed optimizer's tolerance) on
# dp 4; optim_grads_params also with gradient accumulation (dp 2), tp 2 x
# dp 2 + SP, cp 2 x dp 2, full recomputation, bf16 (its units gathered as
# bf16 into the sharded compute copies: bit-identical to optim_grads, half
# the gather bytes, resident copy = shard + gathered units), --overlap-param-gather
# (prefetch) with --overlap-grad-reduce, pp 2 x dp 2 (and with vpp), HSDP (2 optimizer instances), MoE with ep 2 (expert parameters sharded over
# expert-DP), and --ckpt-format fsdp_dtensor; the measured resident params of optim_grads_params are
# exactly this rank's shard plus two gathered units (closed form of the
# unit layout, 4 KiB pages) and its gradients at most that, both below the
# unsharded run's; checkpoints with optimizer state reshard between FSDP,
# serial, the distributed optimizer on tp 2 (x pp 2) and back; what
# Megatron or mtc refuses exits 2 with one line.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
. "${MTC_SOURCE_DIR:-.}/tests/parity/parity_lib.sh"
F="--use-megatron-fsdp"
# --bf16 runs on oneDNN's bf16 engine unless a run names one: the checks
# count its bf16 copy and bf16 gathers, and --bf16-gemm auto would pick by
# this machine's measured rates (a sanitizer build's, or under load: fp32)
run() {
    name=$1
    shift
    case " $* " in *" --bf16 "*) case "$*" in *--bf16-gemm*) ;; *) set -- "$@" --bf16-gemm dnnl-bf16 ;; esac ;; esac
    "$MTC" train $TINY "$@" --metrics "$D/$name.jsonl" >"$D/$name.log" 2>&1 || { bad "$name run"; cat "$D/$name.log"; }
}

run s
for st in no_shard optim optim_grads optim_grads_params; do
    run "$st" --world-size 4 $F --data-parallel-sharding-strategy "$st"
    same_losses "fsdp $st dp=4" "$D/s.jsonl" "$D/$st.jsonl"
done
run acc --world-size 2 $F
same_losses "fsdp optim_grads_params dp=2 (2 microbatches accumulated in the shard)" "$D/s.jsonl" "$D/acc.jsonl"
run tp --world-size 4 --tp 2 --sequence-parallel $F
same_losses "fsdp optim_grads_params tp=2 x dp=2 + SP" "$D/s.jsonl" "$D/tp.jsonl"
run cp --world-size 4 --cp 2 $F --ckpt-format fsdp_dtensor
same_losses "fsdp optim_grads_params cp=2 x dp=2 (--ckpt-format fsdp_dtensor)" "$D/s.jsonl" "$D/cp.jsonl"
run rc --world-size 2 $F --data-parallel-sharding-strategy optim_grads --recompute-granularity full \
    --recompute-method uniform --recompute-num-layers 1 --overlap-grad-reduce
same_losses "fsdp optim_grads dp=2 full recomputation, overlap-grad-reduce" "$D/s.jsonl" "$D/rc.jsonl"
run ov --world-size 2 $F --overlap-grad-reduce --overlap-param-gather
same_losses "fsdp optim_grads_params dp=2 prefetch + overlapped reduce-scatter" "$D/s.jsonl" "$D/ov.jsonl"
run ot --world-size 4 --tp 2 --sequence-parallel $F --overlap-grad-reduce --overlap-param-gather \
    --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
same_losses "fsdp optim_grads_params tp=2 x dp=2 + SP, overlap, recompute" "$D/s.jsonl" "$D/ot.jsonl"
run us --world-size 4 $F --suggested-communication-unit-size 20000 --print-layout
same_losses "fsdp --suggested-communication-unit-size 20000" "$D/s.jsonl" "$D/us.jsonl"
# embedding 2560 + layer 12704 + layer 12704 held before the run reaches
# 20000: one merged unit, and the head's own
grep -q "^buffer: .*, 2 buckets, data-parallel size 4" "$D/us.log" && ok "unit size: 2 merged units" ||
    { bad "unit size layout"; grep "^buffer" "$D/us.log"; }
run hs --world-size 4 --micro-batch-size 1 $F --num-distributed-optimizer-instances 2 --overlap-grad-reduce
same_losses "HSDP: fsdp optim_grads_params over 2 instances x 2, 2 microbatches, overlap" "$D/s.jsonl" "$D/hs.jsonl"
MOE="--num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001"
run ms $MOE
run me $MOE --world-size 4 --ep 2 $F --overlap-grad-reduce --overlap-param-gather
same_losses "MoE ep=2 x dp=2: experts sharded over expert-DP, overlap" "$D/ms.jsonl" "$D/me.jsonl"
run pp --world-size 4 --pp 2 $F --overlap-grad-reduce --overlap-param-gather
same_losses "fsdp optim_grads_params pp=2 x dp=2 (1F1B, tied embedding's shard over EMBEDDING_GROUP), overlap" "$D/s.jsonl" "$D/pp.jsonl"
run s4 --num-layers 4
run pv --num-layers 4 --world-size 4 --pp 2 --num-layers-per-virtual-pipeline-stage 1 $F --data-parallel-sharding-strategy optim_grads
same_losses "fsdp optim_grads pp=2 x vpp 2 x dp=2" "$D/s4.jsonl" "$D/pv.jsonl"
run db --world-size 4 $F --fsdp-double-buffer --overlap-grad-reduce --overlap-param-gather --trace "$D/db.json"
same_losses "fsdp dp=4 --fsdp-double-buffer, overlap" "$D/s.jsonl" "$D/db.jsonl"
# the trace: one span per unit reduce-scatter and microbatch on each rank
# (4 units x 1 microbatch x 4 iterations x 4 ranks), and the prefetches'
# all-gathers as spans of their own
n=$(grep -o '"name": "reduce-scatter unit [0-9]*", "cat": "fsdp"' "$D/db.json" | wc -l)
p=$(grep -o '"cat": "fsdp", "ph": "X"[^}]*"prefetch": 1' "$D/db.json" | wc -l)
[ "$n" -eq 64 ] && [ "$p" -gt 0 ] && ok "trace: $n unit reduce-scatter spans, $p prefetch all-gathers" ||
    bad "trace: $n reduce-scatter spans (want 64), $p prefetches"
run sb --bf16
# --grad-reduce-in-bf16: each unit's reduce-scatter carries half the bytes,
# losses within the bf16 bound (2e-4) of the fp32 reduction; dp 2 also
# accumulates 2 microbatches in the fp32 shard, HSDP adds the instances
rsb() { grep -o '"reduce_scatter": {"bytes": [0-9]*' "$D/$1.jsonl" | head -1 | sed 's/.*: //'; }
near() {
    a=$(rsb "$2") b=$(rsb "$3")
    if [ -n "$a" ] && [ -n "$b" ] && [ "$b" -gt 0 ] && [ $((b * 2)) -eq "$a" ] &&
        paste -d' ' "$D/$2.jsonl" "$D/$3.jsonl" | awk '{ n = 0; for (i = 1; i <= NF; i++) if ($i == "\"lm_loss\":") v[n++] = $(i + 1) + 0
            d = (v[0] - v[1]) / v[0]; if (d < 0) d = -d; if (d > 2e-4) bad = 1; lines++ } END { exit bad || lines != 4 }'; then
        ok "$1: reduce-scatter bytes $a -> $b, losses within 2e-4 of the fp32 reduction"
    else bad "$1: reduce-scatter bytes $a -> $b"; paste -d'\n' "$D/$2.jsonl" "$D/$3.jsonl"; fi
}
run g32 --world-size 4 $F --bf16
run g16 --world-size 4 $F --bf16 --grad-reduce-in-bf16
near "fsdp dp=4 --grad-reduce-in-bf16" g32 g16
run h32 --world-size 2 $F --bf16 --overlap-grad-reduce --overlap-param-gather
run h16 --world-size 2 $F --bf16 --grad-reduce-in-bf16 --overlap-grad-reduce --overlap-param-gather
near "fsdp dp=2 --grad-reduce-in-bf16, 2 microbatches, overlap" h32 h16
run i32 --world-size 4 --micro-batch-size 1 $F --bf16 --num-distributed-optimizer-instances 2
run i16 --world-size 4 --micro-batch-size 1 $F --bf16 --grad-reduce-in-bf16 --num-distributed-optimizer-instances 2
near "HSDP 2 x 2 --grad-reduce-in-bf16" i32 i16
run bf --world-size 4 $F --bf16
same_losses "fsdp optim_grads_params dp=4 --bf16" "$D/sb.jsonl" "$D/bf.jsonl"
# --bf16 optim_grads_params gathers each unit as bf16 into the compute
# copies (the rounded shards): the losses and grad norms bit-identical to
# optim_grads, whose copies are rounded from the whole fp32 params, and the
# unit all-gathers carry half the bytes of the fp32 run's
lnorm() { grep -o '"lm_loss": [0-9.e+-]*\|"grad_norm": [0-9.e+-]*' "$D/$1.jsonl"; }
agb() {
    tail -1 "$D/$1.jsonl" | python3 -c '
import json, sys
print(json.loads(sys.stdin.read())["comm_groups"]["DATA_PARALLEL_GROUP_WITH_CP"]["all_gather"]["bytes"])'
}
run bg --world-size 4 $F --bf16 --data-parallel-sharding-strategy optim_grads
run bo --world-size 2 $F --bf16 --overlap-grad-reduce --overlap-param-gather
run bgo --world-size 2 $F --bf16 --overlap-grad-reduce --data-parallel-sharding-strategy optim_grads
a=$(agb optim_grads_params) b=$(agb bf)
if [ "$(lnorm bf)" = "$(lnorm bg)" ] && [ "$(lnorm bo)" = "$(lnorm bgo)" ] && [ -n "$(lnorm bf)" ] && [ -n "$a" ] &&
    [ -n "$b" ] && [ "$b" -gt 0 ] && [ $((b * 2)) -eq "$a" ]; then
    ok "--bf16 units gathered as bf16: losses bit-identical to optim_grads' (dp 4; dp 2 with 2 microbatches and overlap), all-gather bytes $a -> $b"
else bad "--bf16 bf16 gathers: all-gather bytes $a -> $b"; lnorm bf; lnorm bg; fi
# without oneDNN's bf16 copy (--bf16-gemm fp32) and with --fp16 the
# rounded shards are gathered into params_c as fp32: bit-identical too
run b32 --world-size 2 $F --bf16 --bf16-gemm fp32 --overlap-grad-reduce --overlap-param-gather
run b32g --world-size 2 $F --bf16 --bf16-gemm fp32 --overlap-grad-reduce --data-parallel-sharding-strategy optim_grads
run f16 --world-size 4 $F --fp16
run f16g --world-size 4 $F --fp16 --data-parallel-sharding-strategy optim_grads
[ -n "$(lnorm b32)" ] && [ "$(lnorm b32)" = "$(lnorm b32g)" ] && [ -n "$(lnorm f16)" ] && [ "$(lnorm f16)" = "$(lnorm f16g)" ] &&
    ok "--bf16-gemm fp32 (dp 2, overlap) and --fp16 (dp 4): compute copies gathered in fp32 storage, bit-identical to optim_grads'" ||
    { bad "fp32-storage compute-copy gathers differ"; lnorm b32; lnorm b32g; lnorm f16; lnorm f16g; }

# memory: a model whose units are large against a page. Units (floats,
# padded to whole 4 KiB pages per shard of 4 ranks = multiples of 4096):
# embedding (64 + 16) x 128 = 10240 -> 12288, layer 12 C^2 + 13 C = 198272
# -> 200704 (x4), head 2 C = 256 -> 4096; total 819200, shard 204800. With
# optim_grads_params the params peak at the shard + two layers' other
# three quarters: 204800 + 2 x 150528 floats.
M="--num-layers 4 --hidden-size 128 --train-iters 2"
if [ "$(getconf PAGESIZE 2>/dev/null)" = 4096 ]; then
    "$MTC" train $TINY $M --world-size 4 $F --metrics "$D/m.jsonl" >"$D/m.log" 2>&1 || { bad "memory run"; cat "$D/m.log"; }
    "$MTC" train $TINY $M --world-size 4 $F --data-parallel-sharding-strategy optim --metrics "$D/o.jsonl" >"$D/o.log" 2>&1 || bad "optim memory run"
    f() { grep -o "\"$2\": [0-9]*" "$1" | tail -1 | awk '{ print $2 }'; }
    P=$(f "$D/m.jsonl" param_bytes) G=$(f "$D/m.jsonl" grad_bytes) PO=$(f "$D/o.jsonl" param_bytes)
    if [ -n "$P" ] && [ -n "$G" ] && [ -n "$PO" ] && awk -v p="$P" -v g="$G" -v po="$PO" \
        'BEGIN { want = 4 * (204800 + 2 * 150528); exit !(p == want && g >= 4 * 204800 && g <= want && p < po) }'; then
        ok "optim_grads_params resident params $P = 4 x (shard + 2 units), grads $G <= that, optim's params $PO"
    else bad "memory: params '$P' grads '$G' optim '$PO' (want params $((4 * (204800 + 2 * 150528))))"; fi
    # the prefetch keeps a third unit; --fsdp-double-buffer's two persistent
    # slots hold the pages the gathers take: the same peak as without it
    "$MTC" train $TINY $M --world-size 4 $F --overlap-grad-reduce --overlap-param-gather --metrics "$D/mo.jsonl" >"$D/mo.log" 2>&1 || bad "overlap memory run"
    "$MTC" train $TINY $M --world-size 4 $F --fsdp-double-buffer --metrics "$D/md.jsonl" >"$D/md.log" 2>&1 || bad "double-buffer memory run"
    PV=$(f "$D/mo.jsonl" param_bytes) PD=$(f "$D/md.jsonl" param_bytes)
    [ "$PV" = $((4 * (204800 + 3 * 150528))) ] && ok "overlap: resident params $PV = 4 x (shard + 3 units)" ||
        bad "overlap memory: params '$PV' (want $((4 * (204800 + 3 * 150528))))"
    [ "$PD" = "$P" ] && ok "--fsdp-double-buffer: resident params $PD, the pool's pages counted" ||
        bad "double-buffer memory: params '$PD' (want $P)"
    # --bf16: the fp32 params stay the shard; the compute copies, params_c
    # (bf16 values in fp32 storage) and oneDNN's bf16 copy, are the shard
    # plus the gathered units, all counted in param_bytes. The bf16 copy in
    # 4 KiB pages, rank 0: its shards touch 1 page of the head (2048 B of
    # 8192), 25 of each layer (100352 B of 401408), 2 of the embedding (6144
    # B of 24576; the buffer's start and each unit's are page-aligned in
    # bf16 here), and the 2 gathered layers add 98 - 25 each: 249 pages.
    # With the prefetch the third unit's bf16 pages fill as its gather runs
    # on: params_c exact, the bf16 copy between the 249 pages and 73 more.
    # (the engine pinned: --bf16-gemm auto picks by this machine's measured rates)
    "$MTC" train $TINY $M --world-size 4 $F --bf16 --bf16-gemm dnnl-bf16 --metrics "$D/mb.jsonl" >"$D/mb.log" 2>&1 || bad "bf16 memory run"
    "$MTC" train $TINY $M --world-size 4 $F --bf16 --bf16-gemm dnnl-bf16 --overlap-grad-reduce --overlap-param-gather --metrics "$D/mbo.jsonl" >"$D/mbo.log" 2>&1 || bad "bf16 overlap memory run"
    PB=$(f "$D/mb.jsonl" param_bytes) PBO=$(f "$D/mbo.jsonl" param_bytes)
    WB=$((4 * 204800 + 4 * (204800 + 2 * 150528) + 249 * 4096)) WO=$((4 * 204800 + 4 * (204800 + 3 * 150528) + 249 * 4096))
    [ "$PB" = "$WB" ] && [ -n "$PBO" ] && [ "$PBO" -ge "$WO" ] && [ "$PBO" -le $((WO + 73 * 4096)) ] &&
        ok "--bf16: resident params $PB = fp32 shard + compute copies' shard + 2 units; $PBO with the prefetch" ||
        bad "bf16 memory: params '$PB' '$PBO' (want $WB, and $WO..$((WO + 73 * 4096)))"
    # mtc plan prices the same resident params to the byte, and the
    # gradients' bound it gives holds
    pl() { "$MTC" plan --num-layers 4 --hidden-size 128 --num-attention-heads 4 --vocab-size 60 \
        --make-vocab-size-divisible-by 16 --seq-length 16 --micro-batch-size 2 --global-batch-size 8 \
        --world-size 4 --machine dgx-a100 --fp32 $F "$@" --explain tp1-pp1-do 2>&1 | grep "^  FSDP"; }
    Q=$(pl) QV=$(pl --overlap-grad-reduce --overlap-param-gather)
    qp() { echo "$1" | sed 's/.*params \([0-9]*\) B.*/\1/'; }
    qg() { echo "$1" | sed 's/.*at most \([0-9]*\) B.*/\1/'; }
    if [ "$(qp "$Q")" = "$P" ] && [ "$(qp "$QV")" = "$PV" ] && [ "$(qg "$Q")" -ge "$G" ]; then
        ok "mtc plan: params $(qp "$Q") / $(qp "$QV") with overlap = measured, gradients <= $(qg "$Q")"
    else bad "mtc plan FSDP memory: '$Q' '$QV' against measured params $P / $PV, grads $G"; fi
else
    ok "memory check skipped: page size $(getconf PAGESIZE) (the closed form assumes 4096)"
fi

# checkpoints with the optimizer state, resharded: 4 iterations saved at
# one layout and resumed to 8 at another equal an uninterrupted 8 (its
# last 4 iterations)
ckpt_reference
ckpt_run ca 4 --world-size 4 $F --save "$D/ck"
ckpt_run cb 8 --world-size 4 $F --load "$D/ck"
grep -q "successfully loaded checkpoint from .*iteration 4, .*optimizer state" "$D/cb.log" || { bad "no load line"; cat "$D/cb.log"; }
same_losses "fsdp dp=4 save -> fsdp dp=4 resume" "$D/full4.jsonl" "$D/cb.jsonl"
ckpt_run cc 8 --load "$D/ck"
same_losses "fsdp dp=4 save -> serial resume" "$D/full4.jsonl" "$D/cc.jsonl"
ckpt_run cd 8 --world-size 4 --tp 2 --use-distributed-optimizer --load "$D/ck"
same_losses "fsdp dp=4 save -> distopt tp=2 x dp=2 resume" "$D/full4.jsonl" "$D/cd.jsonl"
ckpt_run ce 4 --world-size 4 --tp 2 --pp 2 --use-distributed-optimizer --save "$D/ck2"
ckpt_run cf 8 --world-size 4 $F --data-parallel-sharding-strategy optim_grads --load "$D/ck2"
same_losses "distopt tp=2 x pp=2 save -> fsdp optim_grads dp=4 resume" "$D/full4.jsonl" "$D/cf.jsonl"
ckpt_run cg 8 --world-size 4 --pp 2 $F --load "$D/ck"
B16="--bf16 --grad-reduce-in-bf16"
ckpt_run bfull 8 --world-size 4 $F $B16
tail -4 "$D/bfull.jsonl" >"$D/bfull4.jsonl"
ckpt_run bca 4 --world-size 4 $F $B16 --save "$D/ckb"
ckpt_run bcb 8 --world-size 4 $F $B16 --load "$D/ckb"
same_losses "fsdp dp=4 --grad-reduce-in-bf16 save -> resume" "$D/bfull4.jsonl" "$D/bcb.jsonl"
same_losses "fsdp dp=4 save -> fsdp pp=2 x dp=2 resume" "$D/full4.jsonl" "$D/cg.jsonl"
ckpt_run ch 4 --world-size 4 --pp 2 $F --save "$D/ck3"
ckpt_run ci 8 --world-size 4 --tp 2 --use-distributed-optimizer --load "$D/ck3"
same_losses "fsdp pp=2 x dp=2 save -> distopt tp=2 x dp=2 resume" "$D/full4.jsonl" "$D/ci.jsonl"

refuse "negative unit size" "suggested-communication-unit-size=-5 must be >= 1" $F --suggested-communication-unit-size -5
refuse "HFSDP outer optim with optim_grads" "is only supported with full-sharding on DP-Shard" --world-size 4 $F \
    --data-parallel-sharding-strategy optim_grads --num-distributed-optimizer-instances 2 --outer-dp-sharding-strategy optim
refuse "unknown outer strategy" "outer-dp-sharding-strategy=full is not a strategy" --outer-dp-sharding-strategy full
refuse "unknown strategy" "data-parallel-sharding-strategy=full is not a strategy" $F --data-parallel-sharding-strategy full
refuse "fsdp_dtensor without fsdp" "fsdp_dtensor is only tested with Megatron FSDP" --ckpt-format fsdp_dtensor
refuse "overlap-param-gather without overlap-grad-reduce" "Must use --overlap-param-gather with --overlap-grad-reduce" --world-size 2 $F --overlap-param-gather
exit $fail
