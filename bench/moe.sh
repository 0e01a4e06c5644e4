#!/bin/sh
# bench/moe.sh [BUILD_DIR] - tokens/s of a small MoE (8 experts, top-2, expert
# ffn F) against the dense model with the same active parameters (ffn 2F),
# on 2 rank-threads: dense dp 2, MoE ep 1 (dp 2), MoE ep 2 with the allgather
# and the alltoall dispatcher, and at tp 2 + SP (no biases) dense against MoE
# etp 1 and etp 2 with both dispatchers; for each MoE run the share of the
# step spent in the expert groups' collectives (dispatch and combine, from
# --metrics' comm_groups). Prints mtc's figure, the dense one and the ratio. Measured,
# not asserted: on a shared machine the figures move with the load.
# Environment: ITERS (default 12), HIDDEN (256), FFN (expert ffn, 512),
# SEQ (256), LAYERS (4).
set -eu
BUILD=${1:-build}
MTC=$BUILD/mtc
[ -x "$MTC" ] || { echo "moe.sh: $MTC not found; build first" >&2; exit 2; }
ITERS=${ITERS:-12} H=${HIDDEN:-256} F=${FFN:-512} S=${SEQ:-256} L=${LAYERS:-4}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
BASE="--mock-data --vocab-size 1024 --num-layers $L --hidden-size $H --num-attention-heads 4 \
--seq-length $S --micro-batch-size 4 --global-batch-size 16 --train-iters $ITERS --log-interval $ITERS \
--eval-iters 0 --lr 1e-4 --world-size 2 --hidden-dropout 0 --attention-dropout 0"
MOE="--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size $F --moe-aux-loss-coeff 1e-2"
echo "# bench/moe.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# model: $L layers, hidden $H, seq $S, global batch 16 on 2 rank-threads; MoE 8 experts top-2 ffn $F vs dense ffn $((2 * F))"
run() { # NAME ARGS...
    n=$1
    shift
    "$MTC" train $BASE --metrics "$D/$n.jsonl" "$@" >"$D/$n.log" 2>&1 || { echo "moe.sh: $n failed:" >&2; tail -3 "$D/$n.log" >&2; exit 1; }
}
run dense --ffn-hidden-size $((2 * F))
run ep1 $MOE
run ep2_allgather $MOE --ep 2 --moe-token-dispatcher-type allgather
run ep2_alltoall $MOE --ep 2 --moe-token-dispatcher-type alltoall
# tensor parallelism (tp 2 + SP, no linear biases: etp 2 refuses expert biases)
TP="--tp 2 --sequence-parallel --disable-bias-linear"
run tp2_dense $TP --ffn-hidden-size $((2 * F))
run tp2_etp1 $MOE $TP --etp 1
run tp2_etp2_allgather $MOE $TP --moe-token-dispatcher-type allgather
run tp2_etp2_alltoall $MOE $TP --moe-token-dispatcher-type alltoall
python3 - "$D" <<'P'
import json, sys
d = sys.argv[1]
def last(n):
    rows = [json.loads(l) for l in open(f"{d}/{n}.jsonl") if l.strip()]
    return rows[-1]
dense = last("dense")
print(f"{'run':<22} {'tokens/s':>10} {'vs dense':>9} {'ms/iter':>9} {'MoE comm ms':>11} {'share':>9}")
print(f"{'dense (ffn 2F)':<22} {dense['tokens_per_s']:>10.0f} {1.0:>9.2f} {dense['elapsed_ms']:>9.1f} {'-':>11} {'-':>9}")
# the expert groups' collectives: the allgather dispatcher's ETP x EP group
# (EP itself at etp 1), the alltoall's EP and ETP groups
groups = ("EXPERT_MODEL_PARALLEL_GROUP", "EXPERT_TENSOR_PARALLEL_GROUP", "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP")
def expert_ms(r):
    return sum(r.get("comm_groups", {}).get(g, {}).get("ms", 0.0) for g in groups)
for n in ("ep1", "ep2_allgather", "ep2_alltoall"):
    r = last(n)
    ep = expert_ms(r)
    print(f"{'moe ' + n:<22} {r['tokens_per_s']:>10.0f} {r['tokens_per_s'] / dense['tokens_per_s']:>9.2f} "
          f"{r['elapsed_ms']:>9.1f} {ep:>11.1f} {100 * ep / r['elapsed_ms']:>8.1f}%")
print("target (issue 14): MoE at ep 2 >= 0.7x the dense model's tokens/s")
tdense = last("tp2_dense")
print(f"{'dense tp 2 (ffn 2F)':<22} {tdense['tokens_per_s']:>10.0f} {1.0:>9.2f} {tdense['elapsed_ms']:>9.1f} {'-':>11} {'-':>9}")
for n in ("tp2_etp1", "tp2_etp2_allgather", "tp2_etp2_alltoall"):
    r = last(n)
    ep = expert_ms(r)
    print(f"{'moe ' + n:<22} {r['tokens_per_s']:>10.0f} {r['tokens_per_s'] / tdense['tokens_per_s']:>9.2f} "
          f"{r['elapsed_ms']:>9.1f} {ep:>11.1f} {100 * ep / r['elapsed_ms']:>8.1f}%")
P
