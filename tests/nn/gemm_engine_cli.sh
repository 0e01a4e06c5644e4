#!/bin/sh
# tests/nn/gemm_engine_cli.sh - the fp32 GEMM engine from the command line:
# `mtc bench-peak --gemm-engines` writes both engines' rates to the peak
# cache (MTC_PEAK_CACHE) and names the engine later runs take; with a
# forced OPENBLAS_CORETYPE the library's own core type is measured too (in
# a child without the variable); a train run's banner names the engine and
# its reason; MTC_GEMM overrides the cache. No rate is asserted beyond its
# presence (the machine is shared).
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
PK=$D/peak.json
if MTC_PEAK_CACHE=$PK OPENBLAS_CORETYPE=Haswell "$MTC" bench-peak --gemm-engines >"$D/ge" 2>&1 &&
    grep -q '"gemm_engines": {"measured_at": "[0-9 :-]*", "threads": [0-9]*, "dnnl": [0-9.e+]*, "openblas": {"Haswell": [0-9.e+]*' "$PK" &&
    grep -q "fp32 GEMM engine of later runs here: \(dnnl\|openblas\) (bench-peak" "$D/ge"; then
    ok "bench-peak --gemm-engines cached the rates"
else
    bad "--gemm-engines: $(cat "$D/ge" "$PK")"
fi
own=$(env -u OPENBLAS_CORETYPE "$MTC" train --mock-data --vocab-size 64 --num-layers 1 --hidden-size 16 \
    --num-attention-heads 2 --seq-length 8 --max-position-embeddings 8 --micro-batch-size 1 --global-batch-size 1 \
    --train-iters 1 --eval-iters 0 2>&1 | sed -n 's/.*kernels for \([A-Za-z0-9]*\).*/\1/p' | head -n 1)
if [ "$own" = Haswell ] || grep -q "\"$own\": [0-9.e+]*" "$PK"; then ok "the library's own core ($own) measured"; else bad "own core '$own': $(cat "$PK" "$D/ge")"; fi
MTC_PEAK_CACHE=$PK MTC_GEMM=openblas "$MTC" train --mock-data --vocab-size 64 --num-layers 1 --hidden-size 16 \
    --num-attention-heads 2 --seq-length 8 --max-position-embeddings 8 --micro-batch-size 1 --global-batch-size 1 \
    --train-iters 1 --eval-iters 0 >"$D/tr" 2>&1
if grep -q "BLAS: fp32 GEMM engine OpenBLAS (MTC_GEMM=openblas)" "$D/tr"; then ok "banner names the engine"; else bad "banner: $(grep BLAS "$D/tr")"; fi
# no override: the engine bench-peak named, for the reason it gave
said=$(sed -n 's/.*fp32 GEMM engine of later runs here: \([a-z]*\) .*/\1/p' "$D/ge")
MTC_PEAK_CACHE=$PK OPENBLAS_CORETYPE=Haswell "$MTC" train --mock-data --vocab-size 64 --num-layers 1 --hidden-size 16 \
    --num-attention-heads 2 --seq-length 8 --max-position-embeddings 8 --micro-batch-size 1 --global-batch-size 1 \
    --train-iters 1 --eval-iters 0 >"$D/tr2" 2>&1
case $said in dnnl) name=oneDNN ;; *) name=OpenBLAS ;; esac
if grep -q "BLAS: fp32 GEMM engine $name (bench-peak [0-9 :-]*: oneDNN [0-9]*, OpenBLAS Haswell [0-9]* GFLOP/s" "$D/tr2"; then
    ok "the cached choice ($said) runs"
else
    bad "cached choice '$said': $(grep BLAS "$D/tr2")"
fi
exit $fail
